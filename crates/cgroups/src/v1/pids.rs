//! v1 `pids`: pids.max; pids.current and pids.max as statistics.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::set;
use crate::stats::u;
use crate::{Manager, Result, Stats};

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

pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    st.pids.current = u(d, "pids.current")?;
    // "max" is 0 in runc's stats: no limit.
    st.pids.limit = match u(d, "pids.max")? {
        u64::MAX => 0,
        l => l,
    };
    Ok(())
}
