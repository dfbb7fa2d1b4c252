//! v1 `net_cls`: net_cls.classid (the runtime-spec's `network.classID`).

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::set;
use crate::{Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(id) = res.network().as_ref().and_then(|n| n.class_id()) else {
        return Ok(());
    };
    let d = dir(m, "net_cls", "network.classID")?;
    set(
        d,
        "net_cls.classid",
        &id.to_string(),
        "network.classID",
        false,
    )
}
