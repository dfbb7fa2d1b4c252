//! v2 `pids`: pids.max; pids.current and pids.max as statistics.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::resources::{self as r, set};
use crate::stats::u;
use crate::{Hier, Manager, Result, Stats};

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

pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    st.pids.current = u(d, "pids.current")?;
    // "max" is 0 in runc's stats: no limit.
    st.pids.limit = match u(d, "pids.max")? {
        u64::MAX => 0,
        l => l,
    };
    Ok(())
}
