//! v2 `io`: weights (io.bfq.weight, else io.weight on its own scale) and io.max throttles,
//! every field validated before the first write; io.stat's bytes and I/Os per device as
//! statistics (in v1 blkio's shape).

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::resources::{self as r, set, try_set};
use crate::stats::opt_read;
use crate::{warn, BlkioEntry, Hier, Manager, Result, Stats};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(b) = res.block_io() else {
        return Ok(());
    };
    let d = u.dir.as_path();
    let weight = r::blkio_weight("blockIO.weight", b.weight())?;
    if r::blkio_weight("blockIO.leafWeight", b.leaf_weight())?.is_some() {
        warn("linux.resources.blockIO.leafWeight is not supported on cgroup v2; ignored");
    }
    // Validate everything first.
    let mut wdev = Vec::new();
    for (i, wd) in b.weight_device().iter().flatten().enumerate() {
        let field = format!("blockIO.weightDevice[{i}].weight");
        let num = r::dev_num(&field, wd.major(), wd.minor())?;
        if let Some(w) = r::blkio_weight(&field, wd.weight())? {
            wdev.push((num, w, field));
        }
    }
    let mut max = Vec::new();
    for (list, key, name) in [
        (
            b.throttle_read_bps_device(),
            "rbps",
            "throttleReadBpsDevice",
        ),
        (
            b.throttle_write_bps_device(),
            "wbps",
            "throttleWriteBpsDevice",
        ),
        (
            b.throttle_read_iops_device(),
            "riops",
            "throttleReadIOPSDevice",
        ),
        (
            b.throttle_write_iops_device(),
            "wiops",
            "throttleWriteIOPSDevice",
        ),
    ] {
        for (i, t) in list.iter().flatten().enumerate() {
            let field = format!("blockIO.{name}[{i}]");
            let num = r::dev_num(&field, t.major(), t.minor())?;
            max.push((format!("{num} {key}={}", t.rate()), field));
        }
    }
    if let Some(w) = weight {
        // BFQ takes the v1 scale directly; otherwise io.weight on the 1..10000 scale.
        if !try_set(d, "io.bfq.weight", &w.to_string(), "blockIO.weight")? {
            let v = format!("default {}", r::blkio_to_io_weight(u64::from(w)));
            set(d, "io.weight", &v, "blockIO.weight", true)?;
        }
    }
    for (num, w, field) in &wdev {
        if !try_set(d, "io.bfq.weight", &format!("{num} {w}"), field)? {
            let v = format!("{num} {}", r::blkio_to_io_weight(u64::from(*w)));
            set(d, "io.weight", &v, field, true)?;
        }
    }
    for (line, field) in &max {
        set(d, "io.max", line, field, true)?;
    }
    Ok(())
}

/// io.stat: `rbytes`/`wbytes` as service bytes, `rios`/`wios` as serviced, per device.
pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    let Some(s) = opt_read(d, "io.stat")? else {
        return Ok(());
    };
    for l in s.lines() {
        let mut it = l.split_whitespace();
        let Some((ma, mi)) = it.next().and_then(|n| n.split_once(':')) else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (ma.parse::<u64>(), mi.parse::<u64>()) else {
            continue;
        };
        for kv in it {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(value) = v.parse::<u64>() else {
                continue;
            };
            let (list, op) = match k {
                "rbytes" => (&mut st.blkio.io_service_bytes_recursive, "Read"),
                "wbytes" => (&mut st.blkio.io_service_bytes_recursive, "Write"),
                "rios" => (&mut st.blkio.io_serviced_recursive, "Read"),
                "wios" => (&mut st.blkio.io_serviced_recursive, "Write"),
                _ => continue,
            };
            list.push(BlkioEntry {
                major,
                minor,
                op: op.into(),
                value,
            });
        }
    }
    st.blkio.psi = crate::stats::psi(d, "io.pressure");
    Ok(())
}
