//! v1 `pids`: pids.max; pids.current and pids.max as statistics.

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::set;
use crate::{Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(p) = res.pids() else {
        return Ok(());
    };
    let v = match p.limit() {
        0 => return Ok(()),
        l if l < 0 => "max".to_string(),
        l => l.to_string(),
    };
    set(
        dir(m, "pids", "pids.limit")?,
        "pids.max",
        &v,
        "pids.limit",
        false,
    )
}

/// The same files on v1 and v2: [`crate::stats::pids`].
pub(super) use crate::stats::pids as stats;
