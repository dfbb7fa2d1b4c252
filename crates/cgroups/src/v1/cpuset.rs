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
