//! The cgroupfs driver on pure cgroup v2: one directory, controllers delegated down the
//! directories `create` makes. One file per controller writes its resources (`CONTROLLERS`, in
//! the order they are written) and reads its statistics (`STATS`); `freezer.rs` is the v2
//! freezer (also the hybrid leaf's).
//!
//! Exercised for real (tests/v2_private_mount.rs): mkdir/rmdir, cgroup.subtree_control
//! enabling (hugetlb, the one controller free on a hybrid host's unified hierarchy),
//! `hugetlb.<size>.max`, cgroup.procs, cgroup.freeze + cgroup.events, cgroup.kill, pids/stats
//! reading; memory/cpu/io/pids writers only against the fake tree in unit tests.

use std::path::{Path, PathBuf};

use oci_spec::runtime::LinuxResources;

use crate::backend::{Backend, Freezer};
use crate::stats::ReadStats;
use crate::{cgroupfs, fs, stats, Delegation, Error, Hier, Manager, OomEvents, Result, Stats};

mod cpu;
mod cpuset;
mod devices;
pub(crate) mod freezer;
pub(crate) mod hugetlb;
mod io;
mod memory;
mod network;
mod pids;
mod rdma;
pub(crate) mod unified;

/// One controller's `apply`: writes the fields of the resources it owns, if any are set.
type Apply = fn(&Manager, &Hier, &LinuxResources) -> Result<()>;

/// The resource writers (controller, its file's `apply`), in the order `apply` runs them
/// (device rules are checked before the first, and their program attached last). Each writes
/// only its controller's files (`<controller>.*`), `unified` only the keys it is given.
const CONTROLLERS: &[(&str, Apply)] = &[
    ("memory", memory::apply),
    ("cpu", cpu::apply),
    ("cpuset", cpuset::apply),
    ("pids", pids::apply),
    ("io", io::apply),
    ("hugetlb", hugetlb::apply),
    ("network", network::apply),
    ("rdma", rdma::apply),
    ("unified", unified::apply),
    ("devices", devices::apply),
];

/// The statistics readers (controller, its file's `stats`), in the order `stats` runs them on
/// the leaf (see [`stats::v2`]).
pub(crate) const STATS: &[(&str, ReadStats)] = &[
    ("cpu", cpu::stats),
    ("memory", memory::stats),
    ("pids", pids::stats),
    ("io", io::stats),
    ("hugetlb", hugetlb::stats),
];

/// cgroupfs on a pure cgroup v2 host.
pub(crate) struct Fs;

impl Backend for Fs {
    fn create(&self, m: &mut Manager, refuse_frozen: bool) -> Result<()> {
        cgroupfs::create(m, refuse_frozen, mkdirs)
    }

    fn apply(&self, m: &Manager, res: &LinuxResources) -> Result<()> {
        let u = m
            .unified_hier()
            .ok_or_else(|| Error::Invalid("no cgroup2 directory to apply resources to".into()))?;
        // Before writing anything.
        devices::validate(res)?;
        // Only limits need the controllers: a container without any (device rules are an eBPF
        // program, no controller) does not wait up to 1 s for a parent that nobody delegates.
        if m.delegation == Delegation::Pending && crate::resources::needs_limits(Some(res)) {
            wait_delegated(u)?;
        }
        CONTROLLERS
            .iter()
            .try_for_each(|(_, apply)| apply(m, u, res))
    }

    fn freezer<'m>(&self, m: &'m Manager) -> Freezer<'m> {
        match m.unified_hier() {
            Some(u) => Freezer::V2(&u.dir),
            None => Freezer::None,
        }
    }

    fn stats(&self, m: &Manager) -> Result<Stats> {
        stats::v2(m)
    }

    fn oom_events(&self, m: &Manager) -> Result<OomEvents> {
        let u = m
            .unified_hier()
            .ok_or_else(|| Error::Invalid("no cgroup2 directory to watch".into()))?;
        OomEvents::v2(&u.dir)
    }

    fn clone_into(&self, m: &Manager) -> bool {
        m.unified_hier().is_some()
    }
}

/// `create`'s directories: the leaf and what is missing above it (see [`cgroupfs::create`]).
fn mkdirs(m: &mut Manager, created: &mut Vec<PathBuf>) -> Result<()> {
    let Some(u) = m.unified.as_ref() else {
        return Ok(());
    };
    // Controllers are delegated down the directories this call makes above the leaf, and only
    // there: each one enables what its parent gave it (its cgroup.controllers), right after its
    // mkdir. A cgroup that existed before (the caller's own, its slice, the root, a parent
    // another container made) is not ours to change; what its cgroup.subtree_control lacks,
    // `apply` reports by field.
    let mut enable_made = |d: &Path| {
        if let Ok(avail) = fs::read_at(d, "cgroup.controllers") {
            enable(d, &avail.split_whitespace().collect::<Vec<_>>());
        }
    };
    let start = created.len();
    match fs::mkdir_below_then(&u.base, &u.dir, created, &mut enable_made) {
        Ok(()) => {}
        Err(fs::MkdirError::Io(p, e)) => return Err(fs::io_err(p, e)),
        Err(fs::MkdirError::BaseMissing) if u.base == u.mount || !u.mount.exists() => {
            return Err(Error::Invalid(format!(
                "no cgroup2 hierarchy mounted at {}",
                u.mount.display()
            )))
        }
        Err(fs::MkdirError::BaseMissing) => {
            return Err(Error::Invalid(format!(
                "this process's own unified cgroup {} does not exist",
                u.base.display()
            )))
        }
    }
    // The leaf's parent was made by another container's create an instant ago (a shared
    // `parent/` of containers started side by side) when it is strictly below the base, not
    // ours, and has controllers to give but none enabled yet: that create enables them right
    // after its mkdir, so wait a moment for it rather than start without them. The kernel
    // shows the new cgroup.subtree_control before it has given the children the controllers'
    // files (seen in the VM: `no memory.max` right after `memory` appeared there), so the
    // leaf's files are waited for too.
    let parent_not_ours = u.dir.parent().is_some_and(|p| {
        *p != u.base && p.starts_with(&u.base) && !created[start..].iter().any(|c| c == p)
    });
    if parent_not_ours {
        if m.delegation == Delegation::AtApply {
            m.delegation = Delegation::Pending;
        } else {
            wait_delegated(u)?;
        }
    }
    Ok(())
}

/// The wait of [`mkdirs`] for the controllers the leaf's parent (made by another container's
/// create, an instant ago) is about to delegate.
fn wait_delegated(u: &Hier) -> Result<()> {
    if let Some(parent) = u.dir.parent() {
        let leaf = &u.dir;
        let pending = || -> Result<bool> {
            let offered = fs::read_at(parent, "cgroup.controllers")?;
            let enabled = fs::read_at(parent, "cgroup.subtree_control")?;
            Ok(!offered.trim().is_empty() && enabled.trim().is_empty()
                || !has_files_of(leaf, &enabled))
        };
        if pending().unwrap_or(false) {
            fs::wait_until(
                std::time::Duration::from_secs(1),
                |_| Ok(()),
                || Ok(!pending().unwrap_or(false)),
            )?;
        }
    }
    Ok(())
}

/// Whether `dir` has an interface file of every controller in `ctrls` (a cgroup.subtree_control
/// line of its parent); perf_event has none on v2.
fn has_files_of(dir: &Path, ctrls: &str) -> bool {
    let want: Vec<&str> = ctrls
        .split_whitespace()
        .filter(|c| *c != "perf_event")
        .collect();
    if want.is_empty() {
        return true;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return true; // gone or unreadable: `apply` reports it
    };
    let names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    want.iter().all(|c| {
        names
            .iter()
            .any(|n| n.strip_prefix(c).is_some_and(|r| r.starts_with('.')))
    })
}

/// Write "+c1 +c2 .." to `dir`'s cgroup.subtree_control (one at a time when the batch fails).
pub(crate) fn enable(dir: &Path, ctrls: &[&str]) {
    if ctrls.is_empty() {
        return;
    }
    let line: String = ctrls
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    let p = dir.join("cgroup.subtree_control");
    if fs::write(&p, line.as_bytes()).is_err() && ctrls.len() > 1 {
        for c in ctrls {
            let _ = fs::write(&p, format!("+{c}").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use oci_spec::runtime::LinuxHugepageLimitBuilder;

    use super::{has_files_of, CONTROLLERS};
    use crate::testutil::{changed, files, snapshot, TempDir};
    use crate::{Host, Layout, Manager};

    /// Each controller's file writes its own interface files and nothing else: a v2 controller
    /// is one file (plus its line in CONTROLLERS).
    #[test]
    fn each_controller_writes_only_its_own_files() {
        let t = TempDir::new("v2own");
        let host = Host {
            root: t.path().to_path_buf(),
            layout: Layout::V2,
            self_cgroup: None,
            systemd_running: Some(false),
        };
        let mut m = Manager::new_in(&host, Some("/c"), "c", false).unwrap();
        m.set_rootless(true); // no device program on a fake tree
        let d = t.path().join("c");
        let names = [
            "memory.max",
            "memory.swap.max",
            "memory.low",
            "memory.high",
            "cpu.weight",
            "cpu.max",
            "cpu.max.burst",
            "cpu.idle",
            "cpuset.cpus",
            "cpuset.mems",
            "pids.max",
            "io.weight",
            "io.max",
            "hugetlb.2MB.max",
            "rdma.max",
        ];
        files(&d, &names.map(|n| (n, "")));
        let mut res = crate::tests::full_resources();
        res.set_hugepage_limits(Some(vec![LinuxHugepageLimitBuilder::default()
            .page_size("2MB")
            .limit(-1i64)
            .build()
            .unwrap()]));
        res.set_unified(Some(HashMap::from([(
            "memory.high".to_string(),
            "90000000".to_string(),
        )])));
        if let Some(c) = res.cpu_mut() {
            c.set_cpus(Some("0".into()));
            c.set_mems(Some("0".into()));
        }
        let u = m.unified_hier().unwrap();
        for (name, apply) in CONTROLLERS {
            let before = snapshot(&d);
            apply(&m, u, &res).unwrap_or_else(|e| panic!("{name}: {e}"));
            let wrote: Vec<String> = changed(&before, &snapshot(&d))
                .iter()
                .map(|p| p.strip_prefix(&d).unwrap().to_string_lossy().into_owned())
                .collect();
            match *name {
                "unified" => assert_eq!(wrote, ["memory.high"]),
                // network: refusals only; devices: an eBPF program, not a file
                "network" | "devices" => assert!(wrote.is_empty(), "{name}: {wrote:?}"),
                _ => assert!(
                    !wrote.is_empty() && wrote.iter().all(|f| f.starts_with(&format!("{name}."))),
                    "{name} wrote {wrote:?}"
                ),
            }
        }
    }

    #[test]
    fn a_leaf_has_the_files_of_what_its_parent_enabled() {
        let t = TempDir::new("v2files");
        for f in ["cgroup.procs", "cpu.weight", "memory.max", "cpuset.cpus"] {
            std::fs::write(t.path().join(f), "").unwrap();
        }
        assert!(has_files_of(t.path(), "cpu memory\n"));
        assert!(has_files_of(t.path(), "cpuset cpu memory perf_event"));
        assert!(has_files_of(t.path(), ""));
        // `pids` enabled but its files not there yet; "cpu" must not match "cpuset.cpus" alone
        assert!(!has_files_of(t.path(), "cpu memory pids"));
        std::fs::remove_file(t.path().join("cpu.weight")).unwrap();
        assert!(!has_files_of(t.path(), "cpu"));
    }
}
