//! `apply` on cgroup v2: one directory, runtime-spec fields converted to v2 interface files.
//!
//! Devices: cgroup v2 enforces device access only through an eBPF program
//! (BPF_PROG_TYPE_CGROUP_DEVICE) attached to the cgroup: see [`crate::ebpf`]. It is applied
//! after every other resource (a failure there leaves the limits written, as runc does).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    LinuxBlockIo, LinuxCpu, LinuxHugepageLimit, LinuxMemory, LinuxNetwork, LinuxPids, LinuxRdma,
    LinuxResources,
};

use crate::resources::{self as r, invalid, set, try_set};
use crate::{fs, warn, Error, Hier, Manager, Result};

pub(crate) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let u = m
        .unified_hier()
        .ok_or_else(|| Error::Invalid("no cgroup2 directory to apply resources to".into()))?;
    let d = u.dir.as_path();
    if let Some(x) = res.devices() {
        crate::ebpf::parse_rules(x)?; // validate before writing anything
    }
    if let Some(x) = res.memory() {
        memory(d, x)?;
    }
    if let Some(x) = res.cpu() {
        cpu(d, x)?;
    }
    if let Some(x) = res.pids() {
        pids(d, x)?;
    }
    if let Some(x) = res.block_io() {
        io(d, x)?;
    }
    if let Some(x) = res.hugepage_limits() {
        hugetlb(u, x)?;
    }
    if let Some(x) = res.network() {
        network(x)?;
    }
    if let Some(x) = res.rdma() {
        rdma(d, x)?;
    }
    if let Some(x) = res.unified() {
        unified(d, x)?;
    }
    // Rootless: no device program (bpf(2) needs CAP_BPF/CAP_SYS_ADMIN in the initial user
    // namespace, and BPF_PROG_QUERY fails before it), as runc and crun; such a container
    // cannot mknod devices or reach host device nodes it was not given anyway.
    if let Some(x) = res.devices().as_ref().filter(|_| !m.rootless) {
        crate::ebpf::attach_device_filter(d, x)?;
    }
    Ok(())
}

/// memory.swap.max from the runtime-spec's memory+swap total (runc's conversion).
pub(crate) fn swap_v2(swap: i64, limit: Option<i64>) -> Result<String> {
    if swap == -1 {
        return Ok("max".into());
    }
    match limit {
        None => Err(invalid(
            "memory.swap",
            "cannot set a swap limit without a memory limit on cgroup v2",
        )),
        Some(-1) => Err(invalid(
            "memory.swap",
            format_args!("{swap} is invalid with an unlimited memory.limit (use -1)"),
        )),
        Some(l) if swap < l => Err(invalid(
            "memory.swap",
            format_args!("{swap} is lower than memory.limit {l} (swap is the memory+swap limit)"),
        )),
        Some(l) => Ok((swap - l).to_string()),
    }
}

fn memory(d: &Path, mem: &LinuxMemory) -> Result<()> {
    let limit = r::bytes("memory.limit", mem.limit())?;
    let swap = r::bytes("memory.swap", mem.swap())?;
    let reservation = r::bytes("memory.reservation", mem.reservation())?;
    let swap = match swap {
        Some(s) => Some(swap_v2(s, limit)?),
        None => None,
    };
    if let Some(s) = mem.swappiness() {
        if s > 100 {
            return Err(invalid(
                "memory.swappiness",
                format_args!("{s} is out of range (0..100)"),
            ));
        }
        warn("linux.resources.memory.swappiness is not supported on cgroup v2; ignored");
    }
    if r::bytes("memory.kernelTCP", mem.kernel_tcp())?.is_some() {
        warn("linux.resources.memory.kernelTCP is not supported on cgroup v2; ignored");
    }
    if mem.disable_oom_killer() == Some(true) {
        warn("linux.resources.memory.disableOOMKiller is not supported on cgroup v2; ignored");
    }
    if mem.use_hierarchy() == Some(false) {
        warn("linux.resources.memory.useHierarchy=false: cgroup v2 is always hierarchical");
    }
    if let (Some(l), Some(true)) = (limit, mem.check_before_update()) {
        if l > 0 {
            crate::resources_v1::check_usage(d, "memory.current", l)?;
        }
    }
    // swap first: memory.swap.max is independent of memory.max on v2, and runc's order.
    // Without swap accounting (no memory.swap.max: swap off, or swapaccount=0) "no limit" and
    // "no swap" are what the container gets anyway: runc writes nothing then, and neither do we.
    if let Some(s) = swap {
        if !try_set(d, "memory.swap.max", &s, "memory.swap")? && s != "max" && s != "0" {
            return Err(r::missing(d, "memory.swap.max", "memory.swap", true));
        }
    }
    if let Some(l) = limit {
        set(d, "memory.max", &r::max_or(l), "memory.limit", true)?;
    }
    if let Some(v) = reservation {
        set(d, "memory.low", &r::max_or(v), "memory.reservation", true)?;
    }
    Ok(())
}

fn cpu(d: &Path, c: &LinuxCpu) -> Result<()> {
    let shares = r::shares(c.shares())?;
    let quota = r::quota(c.quota())?;
    let period = r::period(c.period())?;
    let idle = r::idle(c.idle())?;
    if c.realtime_runtime().is_some_and(|v| v != 0) {
        return Err(invalid("cpu.realtimeRuntime", "not supported on cgroup v2"));
    }
    if c.realtime_period().is_some_and(|v| v != 0) {
        return Err(invalid("cpu.realtimePeriod", "not supported on cgroup v2"));
    }
    if let Some(s) = shares {
        set(
            d,
            "cpu.weight",
            &r::shares_to_weight(s).to_string(),
            "cpu.shares",
            true,
        )?;
    }
    if quota.is_some() || period.is_some() {
        let q = match quota {
            Some(q) => r::max_or(q),
            None => {
                // Only the period changes: keep the current quota.
                let cur = fs::read_at(d, "cpu.max")
                    .map_err(|_| r::missing(d, "cpu.max", "cpu.period", true))?;
                cur.split_whitespace().next().unwrap_or("max").to_string()
            }
        };
        let v = match period {
            Some(p) => format!("{q} {p}"),
            None => q,
        };
        set(
            d,
            "cpu.max",
            &v,
            if quota.is_some() {
                "cpu.quota"
            } else {
                "cpu.period"
            },
            true,
        )?;
    }
    if let Some(b) = c.burst() {
        set(d, "cpu.max.burst", &b.to_string(), "cpu.burst", true)?;
    }
    if let Some(i) = idle {
        set(d, "cpu.idle", &i.to_string(), "cpu.idle", true)?;
    }
    if let Some(v) = c.cpus().as_deref().filter(|s| !s.is_empty()) {
        set(d, "cpuset.cpus", v, "cpu.cpus", true)?;
    }
    if let Some(v) = c.mems().as_deref().filter(|s| !s.is_empty()) {
        set(d, "cpuset.mems", v, "cpu.mems", true)?;
    }
    Ok(())
}

fn pids(d: &Path, p: &LinuxPids) -> Result<()> {
    match p.limit() {
        0 => Ok(()),
        l => set(d, "pids.max", &r::max_or(l), "pids.limit", true),
    }
}

fn io(d: &Path, b: &LinuxBlockIo) -> Result<()> {
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

fn hugetlb(u: &Hier, limits: &[LinuxHugepageLimit]) -> Result<()> {
    let mut vals = Vec::with_capacity(limits.len());
    for l in limits {
        let size = r::hugepage_size(l.page_size())?;
        vals.push((size, r::hugepage_limit(l.page_size(), l.limit())?));
    }
    hugetlb_v2(u, &vals, None)
}

/// Write hugetlb.<size>.max (and .rsvd.max where present) on a cgroup2 leaf. With
/// `delegate` (the directories this container made above its leaf), a missing file first
/// enables hugetlb in those (the hybrid tracking leaf is created without controllers, to keep
/// `create` cheap); never above them.
pub(crate) fn hugetlb_v2(
    u: &Hier,
    vals: &[(String, i64)],
    delegate: Option<&[PathBuf]>,
) -> Result<()> {
    let d = u.dir.as_path();
    let mut delegated = false;
    for (size, lim) in vals {
        let file = format!("hugetlb.{size}.max");
        let v = r::max_or(*lim);
        if !try_set(d, &file, &v, "hugepageLimits")? {
            let Some(ours) = delegate.filter(|_| !delegated) else {
                return Err(r::missing(d, &file, "hugepageLimits", true));
            };
            for dir in ours
                .iter()
                .filter(|p| p.starts_with(&u.mount) && **p != u.dir)
            {
                crate::v2::enable(dir, &["hugetlb"]);
            }
            delegated = true;
            set(d, &file, &v, "hugepageLimits", true)?;
        }
        try_set(d, &format!("hugetlb.{size}.rsvd.max"), &v, "hugepageLimits")?;
    }
    Ok(())
}

fn network(n: &LinuxNetwork) -> Result<()> {
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

fn rdma(d: &Path, map: &HashMap<String, LinuxRdma>) -> Result<()> {
    for (dev, l) in map {
        if let Some(line) = r::rdma_line(dev, l)? {
            set(d, "rdma.max", &line, "rdma", true)?;
        }
    }
    Ok(())
}

/// Raw cgroup v2 key/value pairs, in key order.
pub(crate) fn unified(d: &Path, map: &HashMap<String, String>) -> Result<()> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in &keys {
        if k.is_empty()
            || k.contains('/')
            || k.starts_with('.')
            || matches!(
                k.as_str(),
                "cgroup.procs" | "cgroup.threads" | "cgroup.kill" | "cgroup.subtree_control"
            )
        {
            return Err(invalid(
                "unified",
                format_args!("key {k:?} is not a resource interface file"),
            ));
        }
    }
    for k in keys {
        set(d, k, &map[k], &format!("unified.{k}"), true)?;
    }
    Ok(())
}
