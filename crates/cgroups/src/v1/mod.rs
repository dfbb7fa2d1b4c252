//! The cgroupfs driver on v1 and hybrid hosts: one directory per mounted v1 hierarchy, plus
//! (hybrid) a cgroup2 leaf that tracks the processes. One file per controller writes its
//! resources (`CONTROLLERS`, in the order they are written) and reads its statistics (`STATS`);
//! `freezer.rs` is the v1 freezer.

use std::path::{Path, PathBuf};

use oci_spec::runtime::LinuxResources;

use crate::backend::{Backend, Freezer};
use crate::fs::{self, MkdirError};
use crate::resources::not_mounted;
use crate::stats::ReadStats;
use crate::{cgroupfs, stats, Error, Hier, Manager, OomEvents, Result, Stats};

mod blkio;
mod cpu;
mod cpuacct;
pub(crate) mod cpuset;
mod devices;
pub(crate) mod freezer;
mod hugetlb;
mod memory;
mod net_cls;
mod net_prio;
mod pids;
mod rdma;
mod unified;

/// One controller's `apply`: writes the fields of the resources it owns, if any are set.
type Apply = fn(&Manager, &LinuxResources) -> Result<()>;

/// The resource writers (controller, its file's `apply`), in the order `apply` runs them. Each
/// validates what it reads before its controller's first write, and writes only the fields
/// that are set, only in its controller's hierarchy (`<controller>.*` files; `unified`: the
/// hybrid cgroup2 leaf).
const CONTROLLERS: &[(&str, Apply)] = &[
    ("devices", devices::apply),
    ("memory", memory::apply),
    ("cpu", cpu::apply),
    ("cpuset", cpuset::apply),
    ("pids", pids::apply),
    ("blkio", blkio::apply),
    ("hugetlb", hugetlb::apply),
    ("net_cls", net_cls::apply),
    ("net_prio", net_prio::apply),
    ("rdma", rdma::apply),
    ("unified", unified::apply),
];

/// The statistics readers (hierarchy, its file's `stats`), in the order `stats` runs them,
/// each on its hierarchy's directory when the container has one (see [`stats::v1`]).
pub(crate) const STATS: &[(&str, ReadStats)] = &[
    ("cpuacct", cpuacct::stats),
    ("cpu", cpu::stats),
    ("cpuset", cpuset::stats),
    ("memory", memory::stats),
    ("pids", pids::stats),
    ("blkio", blkio::stats),
    ("hugetlb", hugetlb::stats),
];

/// cgroupfs on a v1 or hybrid host.
pub(crate) struct Fs;

impl Backend for Fs {
    fn create(&self, m: &mut Manager, refuse_frozen: bool) -> Result<()> {
        cgroupfs::create(m, refuse_frozen, mkdirs)
    }

    /// Only fields that are set are written; every field is validated before its
    /// controller's first write; a missing interface file is an error naming the field.
    fn apply(&self, m: &Manager, res: &LinuxResources) -> Result<()> {
        CONTROLLERS.iter().try_for_each(|(_, apply)| apply(m, res))
    }

    /// The v1 freezer hierarchy; without one, the hybrid cgroup2 leaf.
    fn freezer<'m>(&self, m: &'m Manager) -> Freezer<'m> {
        match m.v1_hier("freezer") {
            Some(h) => Freezer::V1(&h.dir),
            None => crate::v2::Fs.freezer(m),
        }
    }

    fn stats(&self, m: &Manager) -> Result<Stats> {
        stats::v1(m)
    }

    fn oom_events(&self, m: &Manager) -> Result<OomEvents> {
        let h = m.v1_hier("memory").ok_or_else(|| {
            Error::Invalid("OOM events: the memory cgroup controller is not mounted".into())
        })?;
        OomEvents::v1(&h.dir)
    }

    fn clone_into(&self, _: &Manager) -> bool {
        false
    }
}

/// The container's directory in `controller`'s hierarchy; an error naming `field` when that
/// hierarchy is not mounted.
fn dir<'a>(m: &'a Manager, controller: &str, field: &str) -> Result<&'a Path> {
    m.v1_hier(controller)
        .map(|h| h.dir.as_path())
        .ok_or_else(|| not_mounted(field, controller))
}

/// mkdir one hierarchy's leaf; `Ok(false)` when the hierarchy is not mounted.
pub(crate) fn mkdir_hier(h: &Hier, created: &mut Vec<PathBuf>) -> Result<bool> {
    match fs::mkdir_below(&h.base, &h.dir, created) {
        Ok(()) => Ok(true),
        Err(MkdirError::Io(p, e)) => Err(fs::io_err(p, e)),
        Err(MkdirError::BaseMissing) => {
            if h.base == h.mount || !h.mount.exists() {
                Ok(false)
            } else {
                Err(Error::Invalid(format!(
                    "this process's own {} cgroup {} does not exist",
                    h.name,
                    h.base.display()
                )))
            }
        }
    }
}

/// `create`'s directories: one leaf per mounted hierarchy (see [`cgroupfs::create`]).
fn mkdirs(m: &mut Manager, created: &mut Vec<PathBuf>) -> Result<()> {
    // On error nothing in `m` changes (the caller rolls back what was created).
    let mut unmounted = Vec::new();
    let mut cpusets = Vec::new();
    for (i, h) in m.v1.iter_mut().enumerate() {
        let start = created.len();
        if !mkdir_hier(h, created)? {
            // e.g. /sys/fs/cgroup/cpu missing but /sys/fs/cgroup/cpu,cpuacct mounted.
            let alt = h.alt_mount.take().filter(|a| a.is_dir());
            let Some(alt) = alt else {
                unmounted.push(i);
                continue;
            };
            h.rebase(alt);
            if !mkdir_hier(h, created)? {
                unmounted.push(i);
                continue;
            }
        }
        if h.name == "cpuset" {
            cpusets.extend_from_slice(&created[start..]);
        }
    }
    match &mut m.cpuset_unfilled {
        // Manager::defer_cpuset_fill: filled by Manager::fill_cpusets.
        Some(later) => *later = cpusets,
        None => cpuset::copy_from_parent(&cpusets)?,
    }
    create_unified(m, created);
    let mut i = 0;
    m.v1.retain(|_| {
        i += 1;
        !unmounted.contains(&(i - 1))
    });
    Ok(())
}

/// Hybrid: also the cgroup2 leaf, for process tracking (and cgroup.kill / cgroup.freeze).
/// Best effort: it only tracks processes (a read-only /sys/fs/cgroup/unified, as some nested
/// set-ups have, must not stop the container).
pub(crate) fn create_unified(m: &mut Manager, created: &mut Vec<PathBuf>) {
    let unified_mounted = match &m.unified {
        // Made before clone already (Manager::make_tracking_leaf).
        Some(u) if m.created.contains(&u.dir) => true,
        Some(u) => match mkdir_hier(u, created) {
            Ok(b) => b,
            Err(e) => {
                crate::warn(&format!(
                    "hybrid: not tracking the container in cgroup2: {e}"
                ));
                false
            }
        },
        None => false,
    };
    if !unified_mounted {
        m.unified = None;
    }
}

#[cfg(test)]
mod tests {
    use oci_spec::runtime::{
        LinuxHugepageLimitBuilder, LinuxInterfacePriorityBuilder, LinuxNetworkBuilder,
    };

    use super::CONTROLLERS;
    use crate::testutil::{changed, files, snapshot, TempDir};
    use crate::{Host, Layout, Manager};

    const HIERARCHIES: &[&str] = &[
        "cpu", "cpuset", "memory", "devices", "blkio", "pids", "net_cls", "net_prio", "hugetlb",
        "rdma",
    ];

    /// Each controller's file writes only its own files (`<controller>.*`), only in its own
    /// hierarchy: every hierarchy's leaf has every controller's files, to catch a write to
    /// the wrong one.
    #[test]
    fn each_controller_writes_only_its_own_files_in_its_own_hierarchy() {
        let t = TempDir::new("v1own");
        let own: String = HIERARCHIES
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{}:{c}:/\n", i + 1))
            .collect();
        let host = Host {
            root: t.path().to_path_buf(),
            layout: Layout::V1,
            self_cgroup: Some(own),
            systemd_running: Some(false),
        };
        let m = Manager::new_in(&host, Some("/c"), "c", false).unwrap();
        let names = [
            "cpu.shares",
            "cpu.cfs_period_us",
            "cpu.cfs_quota_us",
            "cpu.cfs_burst_us",
            "cpu.idle",
            "cpuset.cpus",
            "cpuset.mems",
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "memory.soft_limit_in_bytes",
            "memory.swappiness",
            "memory.oom_control",
            "devices.allow",
            "devices.deny",
            "blkio.weight",
            "blkio.weight_device",
            "blkio.throttle.read_bps_device",
            "blkio.throttle.write_iops_device",
            "pids.max",
            "net_cls.classid",
            "net_prio.ifpriomap",
            "hugetlb.2MB.limit_in_bytes",
            "rdma.max",
        ];
        for h in HIERARCHIES {
            let v: Vec<(&str, &str)> = names
                .iter()
                .map(|n| match *n {
                    "memory.limit_in_bytes" => (*n, "9223372036854771712"),
                    _ => (*n, ""),
                })
                .collect();
            files(&t.path().join(h).join("c"), &v);
        }
        let mut res = crate::tests::full_resources();
        res.set_hugepage_limits(Some(vec![LinuxHugepageLimitBuilder::default()
            .page_size("2MB")
            .limit(4194304i64)
            .build()
            .unwrap()]));
        res.set_network(Some(
            LinuxNetworkBuilder::default()
                .class_id(0x10001u32)
                .priorities(vec![LinuxInterfacePriorityBuilder::default()
                    .name("eth0")
                    .priority(5u32)
                    .build()
                    .unwrap()])
                .build()
                .unwrap(),
        ));
        if let Some(c) = res.cpu_mut() {
            c.set_cpus(Some("0".into()));
            c.set_mems(Some("0".into()));
        }
        for (name, apply) in CONTROLLERS {
            let before = snapshot(t.path());
            apply(&m, &res).unwrap_or_else(|e| panic!("{name}: {e}"));
            let wrote = changed(&before, &snapshot(t.path()));
            if *name == "unified" {
                // a pure v1 host: no keys given, nothing written
                assert!(wrote.is_empty(), "{wrote:?}");
                continue;
            }
            let dir = t.path().join(name).join("c");
            assert!(
                !wrote.is_empty()
                    && wrote.iter().all(|p| p.parent() == Some(dir.as_path())
                        && p.file_name()
                            .unwrap()
                            .to_string_lossy()
                            .starts_with(&format!("{name}."))),
                "{name} wrote {wrote:?}"
            );
        }
    }
}
