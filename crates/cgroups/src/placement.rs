//! Hiding the cost of the first cgroup.procs write on cgroup v1 (see README.md, "Placement
//! cost on v1").
//!
//! A write to a v1 cgroup.procs takes the global `cgroup_threadgroup_rwsem` for writing. It
//! is a percpu rwsem: the first writer after an idle period waits for an RCU grace period
//! (`rcu_sync_enter`) before it gets the lock, ~12ms on the dev host (HZ=250), and writers
//! that come while it is held or within about one grace period after the last one was
//! released do not wait again. The wait is idle time, so it can overlap other work: a
//! no-op migration (our own pid into the cgroup we are already in: the kernel takes the lock
//! and then finds nothing to move, so no controller's attach callback runs) started in a
//! background thread early in `sprout create` pays the grace period while the runtime parses
//! the config and creates the cgroups; the real `add_pid` then finds the lock warm.

use std::path::PathBuf;

use crate::path::SelfCgroup;
use crate::{Layout, DEFAULT_ROOT};

/// The own cgroup.procs the warm-up writes to: a v1 hierarchy with no costly attach work
/// (pids, freezer, the named systemd one), any v1 hierarchy otherwise.
pub(crate) fn warmup_target(root: &std::path::Path, own: &SelfCgroup) -> Option<PathBuf> {
    const PREFER: &[(&str, &str)] = &[
        ("pids", "pids"),
        ("freezer", "freezer"),
        ("name=systemd", "systemd"),
    ];
    for (ctrl, dir) in PREFER {
        if let Some(p) = own.v1_path(ctrl) {
            return Some(crate::path::under(&root.join(dir), p).join("cgroup.procs"));
        }
    }
    let (ctrl, p) = own.v1.first()?;
    let dir = crate::V1_CONTROLLERS
        .iter()
        .find(|(c, _)| c == ctrl)
        .map(|(_, d)| *d)?;
    Some(crate::path::under(&root.join(dir), p).join("cgroup.procs"))
}

/// Start paying, in a background thread, the RCU grace period that the first v1
/// cgroup.procs write after an idle period costs, so that [`crate::Manager::add_pid`] a
/// little later does not. Call it as early as possible in `create`/`run`/`exec` (before
/// parsing the config); it does nothing useful if the placement comes more than ~2 grace
/// periods (~25ms on the dev host) later. `None` on pure v2 (the runtime uses
/// CLONE_INTO_CGROUP, which takes no write lock) or when there is no v1 hierarchy.
///
/// The thread writes this process's pid into the v1 cgroup it already is in (pids, freezer
/// or name=systemd): the kernel finds source and destination equal and moves nothing.
/// Errors are ignored. Joining the handle is optional (it returns after one grace period).
pub fn prewarm_migration(layout: Layout) -> Option<std::thread::JoinHandle<()>> {
    if layout == Layout::V2 {
        return None;
    }
    let own = SelfCgroup::read().ok()?;
    let target = warmup_target(std::path::Path::new(DEFAULT_ROOT), &own)?;
    let pid = std::process::id().to_string();
    std::thread::Builder::new()
        .name("sprout-cg-warm".into())
        .spawn(move || {
            let _ = crate::fs::write(&target, pid.as_bytes());
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn target_choice() {
        let own = SelfCgroup::parse("9:name=systemd:/\n8:pids:/a\n4:memory:/m\n0::/\n");
        assert_eq!(
            warmup_target(Path::new("/r"), &own).unwrap(),
            Path::new("/r/pids/a/cgroup.procs")
        );
        let own = SelfCgroup::parse("4:memory:/m\n3:cpu,cpuacct:/x\n");
        assert_eq!(
            warmup_target(Path::new("/r"), &own).unwrap(),
            Path::new("/r/memory/m/cgroup.procs")
        );
        assert_eq!(
            warmup_target(Path::new("/r"), &SelfCgroup::parse("0::/u\n")),
            None
        );
    }

    #[test]
    fn prewarm_is_a_no_op_migration() {
        let before = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let layout = match Layout::detect() {
            Ok(l) => l,
            Err(_) => return,
        };
        match prewarm_migration(layout) {
            Some(h) => h.join().unwrap(),
            None => assert_eq!(layout, Layout::V2),
        }
        assert_eq!(
            std::fs::read_to_string("/proc/self/cgroup").unwrap(),
            before
        );
    }
}
