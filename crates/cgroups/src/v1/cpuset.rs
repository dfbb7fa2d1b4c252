//! v1 `cpuset`: cpuset.cpus and cpuset.mems (the runtime-spec's `cpu.cpus`, `cpu.mems`), and
//! the parent's values copied into each cpuset cgroup `create` makes.

use std::path::{Path, PathBuf};

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::set;
use crate::{fs, Error, Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(c) = res.cpu() else {
        return Ok(());
    };
    let cpus = c.cpus().as_deref().filter(|s| !s.is_empty());
    let mems = c.mems().as_deref().filter(|s| !s.is_empty());
    if cpus.is_some() || mems.is_some() {
        let d = dir(m, "cpuset", "cpu.cpus")?;
        if let Some(v) = cpus {
            set(d, "cpuset.cpus", v, "cpu.cpus", false)?;
        }
        if let Some(v) = mems {
            set(d, "cpuset.mems", v, "cpu.mems", false)?;
        }
    }
    Ok(())
}

/// A new v1 cpuset cgroup starts with empty cpuset.cpus/mems, and no task can join it until
/// they are set: copy them from the parent, top-down over the directories we created.
pub(crate) fn copy_from_parent(new_dirs: &[PathBuf]) -> Result<()> {
    for (i, d) in new_dirs.iter().enumerate() {
        let parent = d.parent().unwrap_or(Path::new("/"));
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let mut v = fs::read_at(parent, file)?;
            if v.trim().is_empty() && i == 0 {
                // A parent this create did not make may have been made an instant ago by
                // another container's create (a shared `sprout-test/`), which fills it right
                // after its mkdir: give that a moment rather than fail; it is not ours to fill.
                let mut last = String::new();
                fs::wait_until(
                    std::time::Duration::from_secs(2),
                    |_| Ok(()),
                    || {
                        last = fs::read_at(parent, file)?;
                        Ok(!last.trim().is_empty())
                    },
                )?;
                v = last;
            }
            let v = v.trim();
            if v.is_empty() {
                return Err(Error::Invalid(format!(
                    "cannot initialise {}: parent's {file} is empty",
                    d.display()
                )));
            }
            fs::write_at(d, file, v)?;
        }
    }
    Ok(())
}

/// The cpuset hierarchy's files, as runc's `events --stats` shows them (missing ones zero).
pub(super) fn stats(d: &Path, st: &mut crate::Stats) -> Result<()> {
    use crate::stats::{cpu_list, opt_read, u};
    let c = &mut st.cpuset;
    c.cpus = opt_read(d, "cpuset.cpus")?
        .map(|s| cpu_list(&s))
        .unwrap_or_default();
    c.mems = opt_read(d, "cpuset.mems")?
        .map(|s| cpu_list(&s))
        .unwrap_or_default();
    c.cpu_exclusive = u(d, "cpuset.cpu_exclusive")?;
    c.mem_hardwall = u(d, "cpuset.mem_hardwall")?;
    c.mem_exclusive = u(d, "cpuset.mem_exclusive")?;
    c.memory_migrate = u(d, "cpuset.memory_migrate")?;
    c.memory_spread_page = u(d, "cpuset.memory_spread_page")?;
    c.memory_spread_slab = u(d, "cpuset.memory_spread_slab")?;
    c.memory_pressure = u(d, "cpuset.memory_pressure")?;
    c.sched_load_balance = u(d, "cpuset.sched_load_balance")?;
    c.sched_relax_domain_level = opt_read(d, "cpuset.sched_relax_domain_level")?
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::TempDir;

    #[test]
    fn stats_read_the_cpuset_files_as_runc() {
        let t = TempDir::new("cpusetstats");
        for (f, v) in [
            ("cpuset.cpus", "0-2,5\n"),
            ("cpuset.mems", "0\n"),
            ("cpuset.cpu_exclusive", "0\n"),
            ("cpuset.sched_load_balance", "1\n"),
            ("cpuset.sched_relax_domain_level", "-1\n"),
        ] {
            std::fs::write(t.path().join(f), v).unwrap();
        }
        let mut st = crate::Stats::default();
        super::stats(t.path(), &mut st).unwrap();
        let c = &st.cpuset;
        assert_eq!(
            (c.cpus.as_slice(), c.mems.as_slice()),
            (&[0, 1, 2, 5][..], &[0][..])
        );
        assert_eq!((c.sched_load_balance, c.sched_relax_domain_level), (1, -1));
        assert_eq!(crate::stats::cpu_list(" \n"), Vec::<u16>::new());
    }
}
