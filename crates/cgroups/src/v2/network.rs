//! The runtime-spec's `network` on v2: no net_cls or net_prio controller there, so a class id
//! or priorities are refused.

use oci_spec::runtime::LinuxResources;

use crate::resources::invalid;
use crate::{Hier, Manager, Result};

pub(super) fn apply(_: &Manager, _: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(n) = res.network() else {
        return Ok(());
    };
    if n.class_id().is_some() {
        return Err(invalid(
            "network.classID",
            "not supported on cgroup v2 (no net_cls controller)",
        ));
    }
    if n.priorities().as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(invalid(
            "network.priorities",
            "not supported on cgroup v2 (no net_prio controller)",
        ));
    }
    Ok(())
}
