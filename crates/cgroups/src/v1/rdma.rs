//! v1 `rdma`: rdma.max.

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::{self as r, set};
use crate::{Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(map) = res.rdma().as_ref() else {
        return Ok(());
    };
    let mut lines = Vec::new();
    for (dev, l) in map {
        if let Some(line) = r::rdma_line(dev, l)? {
            lines.push(line);
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    let d = dir(m, "rdma", "rdma")?;
    for line in lines {
        set(d, "rdma.max", &line, "rdma", false)?;
    }
    Ok(())
}
