//! v1 `memory`: limit, memory+swap (ordered so that memsw >= mem holds after each write),
//! reservation, kernel TCP, swappiness, OOM killer, hierarchy; usage, maximum, limit and
//! failcnt of each counter, and memory.stat.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::fs::flat_keyed;
use crate::resources::{self as r, invalid, set, try_set};
use crate::stats::{opt_read, u};
use crate::{fs, Manager, MemoryEntry, Result, Stats};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(mem) = res.memory() else {
        return Ok(());
    };
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
    if mem.check_before_update() == Some(true) {
        r::check_usage(d, "memory.usage_in_bytes", limit, mem.swap())?;
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
    let set_limit = |l: i64| {
        set(
            d,
            "memory.limit_in_bytes",
            &l.to_string(),
            "memory.limit",
            false,
        )
    };
    match (limit, swap) {
        (Some(l), Some(s)) => {
            // memsw >= mem must hold after each write: order them by the current limit.
            let cur = fs::read_u64_opt(d, "memory.limit_in_bytes")?.unwrap_or(u64::MAX);
            if s == -1 || cur < s as u64 {
                set_swap(s)?;
                set_limit(l)?;
            } else {
                set_limit(l)?;
                set_swap(s)?;
            }
        }
        (Some(l), None) => set_limit(l)?,
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

/// One counter's usage, maximum usage, limit and failcnt (`memory.`, `memory.memsw.`,
/// `memory.kmem.`, `memory.kmem.tcp.`).
fn mem_entry(d: &Path, prefix: &str) -> Result<MemoryEntry> {
    Ok(MemoryEntry {
        usage: u(d, &format!("{prefix}usage_in_bytes"))?,
        max: u(d, &format!("{prefix}max_usage_in_bytes"))?,
        limit: u(d, &format!("{prefix}limit_in_bytes"))?,
        failcnt: u(d, &format!("{prefix}failcnt"))?,
    })
}

/// The four counters, and memory.stat (its page cache: `total_cache`, else `cache`).
pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    st.memory.usage = mem_entry(d, "memory.")?;
    st.memory.swap = mem_entry(d, "memory.memsw.")?;
    st.memory.kernel = mem_entry(d, "memory.kmem.")?;
    st.memory.kernel_tcp = mem_entry(d, "memory.kmem.tcp.")?;
    if let Some(s) = opt_read(d, "memory.stat")? {
        st.memory.raw = flat_keyed(&s).map(|(k, v)| (k.to_string(), v)).collect();
        st.memory.cache = st
            .memory
            .raw
            .get("total_cache")
            .or(st.memory.raw.get("cache"))
            .copied()
            .unwrap_or(0);
    }
    Ok(())
}
