//! What the two cgroupfs drivers (v1/hybrid and pure v2) do alike: `create`'s undo and runc's
//! checks on a cgroup that existed already, `add_pid` and `destroy`. The systemd driver uses
//! `add_pid` and `destroy`'s pieces for the hierarchies systemd does not manage.

use std::path::{Path, PathBuf};

use crate::{fs, Error, Manager, Result};

/// `Backend::create` of a cgroupfs driver: `mkdirs` makes the directories (recording each one
/// it made in `created`, and leaving `m` as it was on error); with `refuse_frozen`, runc's
/// checks on a cgroup that existed already. On failure every directory this call made is
/// removed again.
pub(crate) fn create(
    m: &mut Manager,
    refuse_frozen: bool,
    mkdirs: fn(&mut Manager, &mut Vec<PathBuf>) -> Result<()>,
) -> Result<()> {
    let mut created = Vec::new();
    let res = mkdirs(m, &mut created).and_then(|()| {
        if refuse_frozen {
            check_existing_empty(m, &created)?;
            check_existing_not_frozen(m, &created)
        } else {
            Ok(())
        }
    });
    match res {
        Ok(()) => {
            m.created.extend(created);
            Ok(())
        }
        Err(e) => {
            for d in created.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
            // Gone again: nothing for fill_cpusets.
            if let Some(dirs) = &mut m.cpuset_unfilled {
                dirs.clear();
            }
            Err(e)
        }
    }
}

/// runc's check: a container's cgroup that existed before this create (not in `created`)
/// and has processes (another container's, or anyone's) is not taken over: the container
/// would share its limits, its freezer and its `kill --all`. The directory whose
/// cgroup.procs lists members (the v1 freezer hierarchy, else the cgroup2 leaf), sub-cgroups
/// included, is only read.
pub(crate) fn check_existing_empty(m: &Manager, created: &[PathBuf]) -> Result<()> {
    let Some(dir) = m
        .procs_dir()
        .filter(|d| !created.iter().chain(&m.created).any(|c| c == d))
    else {
        return Ok(());
    };
    let mut pids = Vec::new();
    match fs::read_procs_recursive(dir, &mut pids) {
        Ok(()) if !pids.is_empty() => Err(Error::Invalid(format!(
            "container's cgroup is not empty: {} process(es) found ({})",
            pids.len(),
            dir.display()
        ))),
        // Gone meanwhile (a concurrent delete): nothing there.
        _ => Ok(()),
    }
}

/// runc's check: a container's cgroup that existed before this create (not in `created`)
/// and is frozen would freeze the init as it joins, and the create would hang; refuse it.
/// Both freezers are looked at (the v1 freezer hierarchy and the cgroup2 leaf, which on a
/// hybrid host freezes the init too). The cgroup is not ours: it is only read, never
/// thawed or removed. Nothing is read for a directory this create made.
pub(crate) fn check_existing_not_frozen(m: &Manager, created: &[PathBuf]) -> Result<()> {
    let existed = |d: &Path| !created.iter().chain(&m.created).any(|c| c == d);
    let mut frozen = None;
    // (With the systemd driver the directories are only planned: one not there is not frozen.)
    if let Some(h) = m
        .v1_hier("freezer")
        .filter(|h| existed(&h.dir) && h.dir.is_dir())
    {
        // FREEZING counts: a task joining it is frozen too.
        if crate::v1::freezer::read_state(&h.dir)? != "THAWED" {
            frozen = Some(&h.dir);
        }
    }
    if let Some(u) = m
        .unified
        .as_ref()
        .filter(|u| frozen.is_none() && existed(&u.dir))
    {
        match crate::v2::freezer::freeze_requested(&u.dir) {
            Ok(true) => frozen = Some(&u.dir),
            Ok(false) => {}
            // No cgroup.freeze (Linux < 5.2): nothing there can be frozen.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    match frozen {
        Some(d) => Err(Error::Invalid(format!(
            "container's cgroup unexpectedly frozen ({})",
            d.display()
        ))),
        None => Ok(()),
    }
}

/// Write `pid` into cgroup.procs of every hierarchy (v1 controllers, then unified).
pub(crate) fn add_pid(m: &Manager, pid: i32) -> Result<()> {
    add_pid_to(pid, m.v1.iter().chain(m.unified.iter()))
}

/// Write `pid` into cgroup.procs of `hiers`.
pub(crate) fn add_pid_to<'a>(pid: i32, hiers: impl Iterator<Item = &'a crate::Hier>) -> Result<()> {
    let s = pid.to_string();
    for h in hiers {
        let p = h.dir.join("cgroup.procs");
        if let Err(e) = fs::write(&p, s.as_bytes()) {
            let why = join_error(&h.name, &h.dir, &e);
            if let Some(why) = why {
                // runc's words first ("adding pid N to cgroups ...: device or resource busy"),
                // which scripts match.
                return Err(Error::Invalid(format!(
                    "adding pid {pid} to cgroups {}: {e}: {why}",
                    h.dir.display()
                )));
            }
            return Err(fs::io_err(p, e));
        }
    }
    Ok(())
}

/// The v1 hierarchies a single-threaded process joins itself: their `tasks` files, opened
/// ([`SelfJoin::open`]) while their paths are in view, written "0" to later
/// ([`SelfJoin::join`]). The kernel moves the writer (`current`, one thread) without the global
/// `cgroup_threadgroup_rwsem` then (cgroup_procs_write_start: no pid, no thread group); a write
/// of a pid to `cgroup.procs` takes it for writing, which after an idle spell first waits for
/// an RCU grace period (5–23 ms measured on the development host) while holding
/// `cgroup_mutex`. Not for cgroup2, where moving one thread out of its domain is refused.
pub struct SelfJoin(Vec<(String, PathBuf, std::fs::File)>);

impl SelfJoin {
    /// Open `<dir>/tasks` of each `(name, dir)`.
    pub fn open(hiers: &[(String, PathBuf)]) -> Result<SelfJoin> {
        hiers
            .iter()
            .map(|(name, dir)| {
                let p = dir.join("tasks");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map(|f| (name.clone(), dir.clone(), f))
                    .map_err(|e| fs::io_err(p, e))
            })
            .collect::<Result<Vec<_>>>()
            .map(SelfJoin)
    }

    /// Move the calling thread into every hierarchy.
    pub fn join(self) -> Result<()> {
        use std::io::Write;
        for (name, dir, mut f) in self.0 {
            if let Err(e) = f.write_all(b"0") {
                if let Some(why) = join_error(&name, &dir, &e) {
                    return Err(Error::Invalid(format!("joining {}: {why}", dir.display())));
                }
                return Err(fs::io_err(dir.join("tasks"), e));
            }
        }
        Ok(())
    }
}

/// Why moving a process into hierarchy `name`'s `dir` failed with `e`, where the errno alone
/// does not say.
fn join_error(name: &str, dir: &Path, e: &std::io::Error) -> Option<String> {
    match e.raw_os_error() {
        Some(libc::ENOSPC) if name == "cpuset" => {
            Some("cpuset.cpus or cpuset.mems is empty".to_string())
        }
        Some(libc::EOPNOTSUPP) if name == "unified" => Some(format!(
            "not a domain cgroup (cgroup.type: {}); a process can only join a domain cgroup \
             or a threaded cgroup of its own threaded subtree",
            fs::read_at(dir, "cgroup.type")
                .map(|t| t.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        )),
        Some(libc::EBUSY) if name == "unified" => Some(
            "it has controllers enabled in its cgroup.subtree_control, and a cgroup that \
             delegates controllers cannot hold processes"
                .to_string(),
        ),
        _ => None,
    }
}

/// `Backend::destroy` of a cgroupfs driver: rmdir exactly the directories `create` made,
/// deepest first (see [`Manager::destroy`]).
pub(crate) fn destroy(m: &Manager) -> Result<()> {
    let mut res = Ok(());
    let idle_gone = m.idle_leaf_gone.get().then(|| m.procs_dir()).flatten();
    for d in m.created.iter().rev() {
        if idle_gone == Some(d.as_path()) {
            continue;
        }
        let leaf = m.v1.iter().chain(m.unified.iter()).any(|h| &h.dir == d);
        let r = if leaf {
            // The container's own cgroup, with any sub-cgroups its processes made.
            fs::rmdir_tree_retry(d)
        } else {
            match std::fs::remove_dir(d) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::ENOTEMPTY)) => Ok(()),
                Err(e) => Err(fs::io_err(d, e)),
            }
        };
        if let Err(e) = r {
            if res.is_ok() {
                res = Err(e);
            }
        }
    }
    res
}
