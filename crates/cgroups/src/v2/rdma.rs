//! v2 `rdma`: rdma.max.

use oci_spec::runtime::LinuxResources;

use crate::resources::{self as r, set};
use crate::{Hier, Manager, Result};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(map) = res.rdma().as_ref() else {
        return Ok(());
    };
    let d = u.dir.as_path();
    for (dev, l) in map {
        if let Some(line) = r::rdma_line(dev, l)? {
            set(d, "rdma.max", &line, "rdma", true)?;
        }
    }
    Ok(())
}
