//! v2 `pids`: pids.max; pids.current and pids.max as statistics.

use oci_spec::runtime::LinuxResources;

use crate::resources::{self as r, set};
use crate::{Hier, Manager, Result};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(p) = res.pids() else {
        return Ok(());
    };
    let d = u.dir.as_path();
    match p.limit() {
        0 => Ok(()),
        l => set(d, "pids.max", &r::max_or(l), "pids.limit", true),
    }
}

/// The same files on v1 and v2: [`crate::stats::pids`].
pub(super) use crate::stats::pids as stats;
