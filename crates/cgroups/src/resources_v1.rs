//! `apply` on cgroup v1 (and hybrid: v1 controllers, plus hugetlb and `unified` keys on the
//! cgroup2 leaf when no v1 hugetlb hierarchy exists).
//!
//! Only fields that are set are written; every field is validated before its controller's
//! first write; a missing interface file is an error naming the field.

use std::path::Path;

use oci_spec::runtime::{
    LinuxBlockIo, LinuxCpu, LinuxDeviceCgroup, LinuxHugepageLimit, LinuxMemory, LinuxNetwork,
    LinuxPids, LinuxRdma, LinuxResources,
};

use crate::resources::{self as r, invalid, not_mounted, set, try_set};
use crate::{fs, Layout, Manager, Result};

pub(crate) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    if let Some(x) = res.devices() {
        devices(m, x)?;
    }
    if let Some(x) = res.memory() {
        memory(m, x)?;
    }
    if let Some(x) = res.cpu() {
        cpu(m, x)?;
    }
    if let Some(x) = res.pids() {
        pids(m, x)?;
    }
    if let Some(x) = res.block_io() {
        blkio(m, x)?;
    }
    if let Some(x) = res.hugepage_limits() {
        hugetlb(m, x)?;
    }
    if let Some(x) = res.network() {
        network(m, x)?;
    }
    if let Some(x) = res.rdma() {
        rdma(m, x)?;
    }
    if let Some(x) = res.unified() {
        if x.is_empty() {
            return Ok(());
        }
        match (m.layout(), m.unified_hier()) {
            (Layout::Hybrid, Some(u)) => {
                hybrid_unified_keys(m, &u.dir, x)?;
                crate::resources_v2::unified(&u.dir, x)?
            }
            _ => {
                return Err(invalid(
                    "unified",
                    "cgroup v2 keys cannot be applied on a cgroup v1 host",
                ))
            }
        }
    }
    Ok(())
}

/// On a hybrid host a `unified` key reaches only the controllers of the cgroup v2 hierarchy: one
/// whose controller is bound to a v1 hierarchy (memory.min with the v1 memory controller) cannot
/// be applied. Refused before any unified key is written, with runc's "invalid configuration"
/// words.
fn hybrid_unified_keys(
    m: &Manager,
    dir: &Path,
    map: &std::collections::HashMap<String, String>,
) -> Result<()> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        let ctrl = k.split('.').next().unwrap_or("");
        let v1 = match ctrl {
            "io" => "blkio",
            c => c,
        };
        if ctrl != "cgroup" && m.v1_hier(v1).is_some() && !dir.join(k).exists() {
            return Err(invalid(
                &format!("unified.{k}"),
                format_args!(
                    "invalid configuration: the {v1} controller is on cgroup v1 on this hybrid \
                     host; unified keys reach only cgroup v2 controllers"
                ),
            ));
        }
    }
    Ok(())
}

fn dir<'a>(m: &'a Manager, controller: &str, field: &str) -> Result<&'a Path> {
    m.v1_hier(controller)
        .map(|h| h.dir.as_path())
        .ok_or_else(|| not_mounted(field, controller))
}

fn memory(m: &Manager, mem: &LinuxMemory) -> Result<()> {
    let limit = r::bytes("memory.limit", mem.limit())?;
    let swap_explicit = r::bytes("memory.swap", mem.swap())?;
    let reservation = r::bytes("memory.reservation", mem.reservation())?;
    let kernel_tcp = r::bytes("memory.kernelTCP", mem.kernel_tcp())?;
    // memory.kernel is deprecated (kernel memory limits are gone since Linux 5.4/6.x): ignored.
    if let Some(s) = mem.swappiness() {
        if s > 100 {
            return Err(invalid(
                "memory.swappiness",
                format_args!("{s} is out of range (0..100)"),
            ));
        }
    }
    if let (Some(l), Some(s)) = (limit, swap_explicit) {
        if l > 0 && s > 0 && s < l {
            return Err(invalid(
                "memory.swap",
                format_args!("{s} is lower than memory.limit {l} (swap is the memory+swap limit)"),
            ));
        }
    }
    let oom_off = mem.disable_oom_killer() == Some(true);
    if limit.is_none()
        && swap_explicit.is_none()
        && reservation.is_none()
        && kernel_tcp.is_none()
        && mem.swappiness().is_none()
        && !oom_off
        && mem.use_hierarchy().is_none()
    {
        return Ok(());
    }
    let d = dir(m, "memory", "memory")?;

    // Unlimited memory without a swap setting means unlimited swap too (runc).
    let swap = swap_explicit.or(if limit == Some(-1) { Some(-1) } else { None });
    if let (Some(l), Some(true)) = (limit, mem.check_before_update()) {
        if l > 0 {
            check_usage(d, "memory.usage_in_bytes", l)?;
        }
    }
    let set_swap = |s: i64| -> Result<()> {
        let v = s.to_string();
        if try_set(d, "memory.memsw.limit_in_bytes", &v, "memory.swap")? {
            return Ok(());
        }
        // No swap accounting: fine when no swap beyond the memory limit was asked for.
        if swap_explicit.is_some() && s >= 0 && Some(s) != limit {
            return Err(r::missing(
                d,
                "memory.memsw.limit_in_bytes",
                "memory.swap",
                false,
            ));
        }
        Ok(())
    };
    match (limit, swap) {
        (Some(l), Some(s)) => {
            // memsw >= mem must hold after each write: order them by the current limit.
            let cur = fs::read_u64_opt(d, "memory.limit_in_bytes")?.unwrap_or(u64::MAX);
            if s == -1 || cur < s as u64 {
                set_swap(s)?;
                set(
                    d,
                    "memory.limit_in_bytes",
                    &l.to_string(),
                    "memory.limit",
                    false,
                )?;
            } else {
                set(
                    d,
                    "memory.limit_in_bytes",
                    &l.to_string(),
                    "memory.limit",
                    false,
                )?;
                set_swap(s)?;
            }
        }
        (Some(l), None) => set(
            d,
            "memory.limit_in_bytes",
            &l.to_string(),
            "memory.limit",
            false,
        )?,
        (None, Some(s)) => set_swap(s)?,
        (None, None) => {}
    }
    if let Some(v) = reservation {
        set(
            d,
            "memory.soft_limit_in_bytes",
            &v.to_string(),
            "memory.reservation",
            false,
        )?;
    }
    if let Some(v) = kernel_tcp {
        set(
            d,
            "memory.kmem.tcp.limit_in_bytes",
            &v.to_string(),
            "memory.kernelTCP",
            false,
        )?;
    }
    if let Some(s) = mem.swappiness() {
        set(
            d,
            "memory.swappiness",
            &s.to_string(),
            "memory.swappiness",
            false,
        )?;
    }
    if oom_off {
        set(
            d,
            "memory.oom_control",
            "1",
            "memory.disableOOMKiller",
            false,
        )?;
    }
    if let Some(h) = mem.use_hierarchy() {
        set(
            d,
            "memory.use_hierarchy",
            if h { "1" } else { "0" },
            "memory.useHierarchy",
            false,
        )?;
    }
    Ok(())
}

/// checkBeforeUpdate: refuse a limit below what the cgroup already uses.
pub(crate) fn check_usage(d: &Path, file: &str, limit: i64) -> Result<()> {
    if let Some(usage) = fs::read_u64_opt(d, file)? {
        if usage > limit as u64 {
            return Err(invalid(
                "memory.limit",
                format_args!(
                    "new limit {limit} is below the current usage {usage} (checkBeforeUpdate)"
                ),
            ));
        }
    }
    Ok(())
}

fn cpu(m: &Manager, c: &LinuxCpu) -> Result<()> {
    let shares = r::shares(c.shares())?;
    let quota = r::quota(c.quota())?;
    let period = r::period(c.period())?;
    let idle = r::idle(c.idle())?;
    let rt_runtime = match c.realtime_runtime() {
        None | Some(0) => None,
        Some(v) if v < -1 => {
            return Err(invalid(
                "cpu.realtimeRuntime",
                format_args!("{v} is invalid"),
            ))
        }
        Some(v) => Some(v),
    };
    let rt_period = c.realtime_period().filter(|p| *p != 0);
    let cpus = c.cpus().as_deref().filter(|s| !s.is_empty());
    let mems = c.mems().as_deref().filter(|s| !s.is_empty());

    if shares.is_some()
        || quota.is_some()
        || period.is_some()
        || idle.is_some()
        || c.burst().is_some()
        || rt_runtime.is_some()
        || rt_period.is_some()
    {
        let d = dir(m, "cpu", "cpu")?;
        if let Some(s) = shares {
            set(d, "cpu.shares", &s.to_string(), "cpu.shares", false)?;
        }
        match (period, quota) {
            (Some(p), q) => {
                // Period first; if the kernel refuses the pair in that order, quota first.
                if let Err(e) = set(d, "cpu.cfs_period_us", &p.to_string(), "cpu.period", false) {
                    let Some(q) = q else { return Err(e) };
                    set(d, "cpu.cfs_quota_us", &q.to_string(), "cpu.quota", false)?;
                    set(d, "cpu.cfs_period_us", &p.to_string(), "cpu.period", false)?;
                } else if let Some(q) = q {
                    set(d, "cpu.cfs_quota_us", &q.to_string(), "cpu.quota", false)?;
                }
            }
            (None, Some(q)) => set(d, "cpu.cfs_quota_us", &q.to_string(), "cpu.quota", false)?,
            (None, None) => {}
        }
        if let Some(b) = c.burst() {
            set(d, "cpu.cfs_burst_us", &b.to_string(), "cpu.burst", false)?;
        }
        let set_rt_period = |p: u64| {
            set(
                d,
                "cpu.rt_period_us",
                &p.to_string(),
                "cpu.realtimePeriod",
                false,
            )
        };
        let set_rt_runtime = |v: i64| {
            set(
                d,
                "cpu.rt_runtime_us",
                &v.to_string(),
                "cpu.realtimeRuntime",
                false,
            )
        };
        match (rt_period, rt_runtime) {
            (Some(p), r) => {
                // Period first; the kernel refuses a period below the current runtime, so then
                // runtime first (runc #4094).
                if let Err(e) = set_rt_period(p) {
                    let Some(r) = r else { return Err(e) };
                    set_rt_runtime(r)?;
                    set_rt_period(p)?;
                } else if let Some(r) = r {
                    set_rt_runtime(r)?;
                }
            }
            (None, Some(r)) => set_rt_runtime(r)?,
            (None, None) => {}
        }
        if let Some(i) = idle {
            set(d, "cpu.idle", &i.to_string(), "cpu.idle", false)?;
        }
    }
    if cpus.is_some() || mems.is_some() {
        let d = dir(m, "cpuset", "cpu.cpus")?;
        if let Some(v) = cpus {
            set(d, "cpuset.cpus", v, "cpu.cpus", false)?;
        }
        if let Some(v) = mems {
            set(d, "cpuset.mems", v, "cpu.mems", false)?;
        }
    }
    Ok(())
}

fn pids(m: &Manager, p: &LinuxPids) -> Result<()> {
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

fn blkio(m: &Manager, b: &LinuxBlockIo) -> Result<()> {
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

fn hugetlb(m: &Manager, limits: &[LinuxHugepageLimit]) -> Result<()> {
    if limits.is_empty() {
        return Ok(());
    }
    let mut vals = Vec::with_capacity(limits.len());
    for l in limits {
        let size = r::hugepage_size(l.page_size())?;
        vals.push((size, r::hugepage_limit(l.page_size(), l.limit())?));
    }
    if let Some(h) = m.v1_hier("hugetlb") {
        for (size, lim) in &vals {
            let v = lim.to_string();
            set(
                &h.dir,
                &format!("hugetlb.{size}.limit_in_bytes"),
                &v,
                "hugepageLimits",
                false,
            )?;
            try_set(
                &h.dir,
                &format!("hugetlb.{size}.rsvd.limit_in_bytes"),
                &v,
                "hugepageLimits",
            )?;
        }
        return Ok(());
    }
    // Hybrid without a v1 hugetlb hierarchy: drive it on the cgroup2 leaf.
    if let (Layout::Hybrid, Some(u)) = (m.layout(), m.unified_hier()) {
        return crate::resources_v2::hugetlb_v2(u, &vals, Some(m.created()));
    }
    Err(not_mounted("hugepageLimits", "hugetlb"))
}

fn network(m: &Manager, n: &LinuxNetwork) -> Result<()> {
    if let Some(id) = n.class_id() {
        let d = dir(m, "net_cls", "network.classID")?;
        set(
            d,
            "net_cls.classid",
            &id.to_string(),
            "network.classID",
            false,
        )?;
    }
    let prios = n.priorities().as_deref().unwrap_or(&[]);
    if !prios.is_empty() {
        let d = dir(m, "net_prio", "network.priorities")?;
        for (i, p) in prios.iter().enumerate() {
            let field = format!("network.priorities[{i}]");
            if p.name().is_empty() || p.name().contains(char::is_whitespace) {
                return Err(invalid(
                    &field,
                    format_args!("invalid interface name {:?}", p.name()),
                ));
            }
            set(
                d,
                "net_prio.ifpriomap",
                &format!("{} {}", p.name(), p.priority()),
                &field,
                false,
            )?;
        }
    }
    Ok(())
}

fn rdma(m: &Manager, map: &std::collections::HashMap<String, LinuxRdma>) -> Result<()> {
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

fn devices(m: &Manager, list: &[LinuxDeviceCgroup]) -> Result<()> {
    if list.is_empty() {
        return Ok(());
    }
    let mut rules = Vec::with_capacity(list.len());
    for (i, d) in list.iter().enumerate() {
        rules.push((d.allow(), r::device_rule(i, d)?, i));
    }
    let d = dir(m, "devices", "devices")?;
    // devices.allow / devices.deny take one rule per write(2): each file is opened once and
    // written once per rule (runc's list makes ~13 rules per container: 2 opens, not 13).
    let mut files: [Option<std::fs::File>; 2] = [None, None];
    for (allow, rule, i) in rules {
        let file = if allow {
            "devices.allow"
        } else {
            "devices.deny"
        };
        let field = format!("devices[{i}]");
        let slot = &mut files[usize::from(allow)];
        if slot.is_none() {
            let p = d.join(file);
            match std::fs::OpenOptions::new().write(true).open(&p) {
                Ok(f) => *slot = Some(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(crate::resources::missing(d, file, &field, false))
                }
                Err(e) => {
                    return Err(r::invalid(
                        &field,
                        format_args!("opening {}: {e}", p.display()),
                    ))
                }
            }
        }
        let f = slot.as_mut().expect("opened above");
        match std::io::Write::write(f, rule.as_bytes()) {
            Ok(n) if n == rule.len() => {}
            Ok(_) => {
                return Err(r::invalid(
                    &field,
                    format_args!("short write of {rule:?} to {}", d.join(file).display()),
                ))
            }
            Err(e) => {
                return Err(r::invalid(
                    &field,
                    format_args!("writing {rule:?} to {}: {e}", d.join(file).display()),
                ))
            }
        }
    }
    Ok(())
}
