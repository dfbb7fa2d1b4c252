//! v1 `blkio`: weights (CFQ or BFQ files), per-device weights and throttles; bytes and I/Os
//! per device as statistics.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::{self as r, set, try_set};
use crate::stats::opt_read;
use crate::{BlkioEntry, Manager, Result, Stats};

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

/// CFQ's recursive statistics, else the throttle layer's (always present).
pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    let (bytes, ios) = if d.join("blkio.io_service_bytes_recursive").exists() {
        (
            "blkio.io_service_bytes_recursive",
            "blkio.io_serviced_recursive",
        )
    } else {
        (
            "blkio.throttle.io_service_bytes_recursive",
            "blkio.throttle.io_serviced_recursive",
        )
    };
    if let Some(s) = opt_read(d, bytes)? {
        entries(&s, &mut st.blkio.io_service_bytes_recursive);
    }
    if let Some(s) = opt_read(d, ios)? {
        entries(&s, &mut st.blkio.io_serviced_recursive);
    }
    Ok(())
}

/// `MAJOR:MINOR OP VALUE` lines (a `Total` line has two fields and is skipped).
fn entries(s: &str, out: &mut Vec<BlkioEntry>) {
    for l in s.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() != 3 {
            continue;
        }
        let Some((ma, mi)) = f[0].split_once(':') else {
            continue;
        };
        let (Ok(major), Ok(minor), Ok(value)) = (ma.parse(), mi.parse(), f[2].parse()) else {
            continue;
        };
        out.push(BlkioEntry {
            major,
            minor,
            op: f[1].to_string(),
            value,
        });
    }
}
