//! v1 `blkio`: weights (CFQ or BFQ files), per-device weights and throttles.

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::{self as r, set, try_set};
use crate::{Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(b) = res.block_io() else {
        return Ok(());
    };
    let weight = r::blkio_weight("blockIO.weight", b.weight())?;
    let leaf = r::blkio_weight("blockIO.leafWeight", b.leaf_weight())?;
    let mut lines: Vec<(&str, String, String)> = Vec::new(); // (file, line, field)
    for (i, wd) in b.weight_device().iter().flatten().enumerate() {
        let num = r::dev_num(
            &format!("blockIO.weightDevice[{i}]"),
            wd.major(),
            wd.minor(),
        )?;
        if let Some(w) = r::blkio_weight(&format!("blockIO.weightDevice[{i}].weight"), wd.weight())?
        {
            lines.push((
                "blkio.weight_device",
                format!("{num} {w}"),
                format!("blockIO.weightDevice[{i}].weight"),
            ));
        }
        if let Some(w) = r::blkio_weight(
            &format!("blockIO.weightDevice[{i}].leafWeight"),
            wd.leaf_weight(),
        )? {
            lines.push((
                "blkio.leaf_weight_device",
                format!("{num} {w}"),
                format!("blockIO.weightDevice[{i}].leafWeight"),
            ));
        }
    }
    for (list, file, name) in [
        (
            b.throttle_read_bps_device(),
            "blkio.throttle.read_bps_device",
            "throttleReadBpsDevice",
        ),
        (
            b.throttle_write_bps_device(),
            "blkio.throttle.write_bps_device",
            "throttleWriteBpsDevice",
        ),
        (
            b.throttle_read_iops_device(),
            "blkio.throttle.read_iops_device",
            "throttleReadIOPSDevice",
        ),
        (
            b.throttle_write_iops_device(),
            "blkio.throttle.write_iops_device",
            "throttleWriteIOPSDevice",
        ),
    ] {
        for (i, t) in list.iter().flatten().enumerate() {
            let field = format!("blockIO.{name}[{i}]");
            let num = r::dev_num(&field, t.major(), t.minor())?;
            lines.push((file, format!("{num} {}", t.rate()), field));
        }
    }
    if weight.is_none() && leaf.is_none() && lines.is_empty() {
        return Ok(());
    }
    let d = dir(m, "blkio", "blockIO")?;
    if let Some(w) = weight {
        // CFQ's blkio.weight, or BFQ's blkio.bfq.weight on newer kernels.
        if !try_set(d, "blkio.weight", &w.to_string(), "blockIO.weight")?
            && !try_set(d, "blkio.bfq.weight", &w.to_string(), "blockIO.weight")?
        {
            return Err(r::missing(d, "blkio.weight", "blockIO.weight", false));
        }
    }
    if let Some(w) = leaf {
        set(
            d,
            "blkio.leaf_weight",
            &w.to_string(),
            "blockIO.leafWeight",
            false,
        )?;
    }
    for (file, line, field) in &lines {
        if *file == "blkio.weight_device" {
            if !try_set(d, file, line, field)?
                && !try_set(d, "blkio.bfq.weight_device", line, field)?
            {
                return Err(r::missing(d, file, field, false));
            }
        } else {
            set(d, file, line, field, false)?;
        }
    }
    Ok(())
}
