//! v2 `cpuset`: cpuset.cpus and cpuset.mems (the runtime-spec's `cpu.cpus`, `cpu.mems`).

use oci_spec::runtime::LinuxResources;

use crate::resources::set;
use crate::{Hier, Manager, Result};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(c) = res.cpu() else {
        return Ok(());
    };
    let d = u.dir.as_path();
    if let Some(v) = c.cpus().as_deref().filter(|s| !s.is_empty()) {
        set(d, "cpuset.cpus", v, "cpu.cpus", true)?;
    }
    if let Some(v) = c.mems().as_deref().filter(|s| !s.is_empty()) {
        set(d, "cpuset.mems", v, "cpu.mems", true)?;
    }
    Ok(())
}
