//! v2 `memory`: memory.swap.max (from the runtime-spec's memory+swap total), memory.max,
//! memory.low; the v1-only fields are warned about and ignored. Usage, peak, limit, OOM
//! count, swap and memory.stat as statistics.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::fs::flat_keyed;
use crate::resources::{self as r, invalid, set, try_set};
use crate::stats::{opt_read, u};
use crate::{warn, Hier, Manager, Result, Stats};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(mem) = res.memory() else {
        return Ok(());
    };
    let d = u.dir.as_path();
    let limit = r::bytes("memory.limit", mem.limit())?;
    let swap = r::bytes("memory.swap", mem.swap())?;
    let reservation = r::bytes("memory.reservation", mem.reservation())?;
    let swap = match (swap, limit) {
        (Some(s), _) => Some(swap_v2(s, limit)?),
        // An unlimited memory limit with no swap given lifts the swap limit too (runc's
        // conversion, as v1's memsw follows the limit): `update --memory -1` after a swap
        // limit would leave that swap limit behind otherwise.
        (None, Some(-1)) => Some("max".to_string()),
        (None, _) => None,
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
    if mem.check_before_update() == Some(true) {
        r::check_usage(d, "memory.current", limit, mem.swap())?;
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

/// memory.current/max/peak, memory.events' `max` (as failcnt), memory.swap.current/max,
/// memory.stat (its page cache: `file`).
pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    st.memory.usage.usage = u(d, "memory.current")?;
    st.memory.usage.limit = u(d, "memory.max")?;
    st.memory.usage.max = u(d, "memory.peak")?;
    if let Some(s) = opt_read(d, "memory.events")? {
        st.memory.usage.failcnt = flat_keyed(&s)
            .find(|(k, _)| *k == "max")
            .map(|(_, v)| v)
            .unwrap_or(0);
    }
    // memory+swap, as v1's memsw and runc's v2 stats report it (its max usage unknown: 0);
    // without swap accounting (no memory.swap.current) the swap part is zero.
    let (swap, swap_max) = match crate::fs::read_u64_opt(d, "memory.swap.current")? {
        Some(cur) => (cur, u(d, "memory.swap.max")?),
        None => (0, 0),
    };
    st.memory.swap.usage = swap.saturating_add(st.memory.usage.usage);
    st.memory.swap.limit = match swap_max {
        u64::MAX => u64::MAX,
        l => l.saturating_add(st.memory.usage.limit),
    };
    if let Some(s) = opt_read(d, "memory.stat")? {
        st.memory.raw = flat_keyed(&s).map(|(k, v)| (k.to_string(), v)).collect();
        st.memory.cache = st.memory.raw.get("file").copied().unwrap_or(0);
    }
    st.memory.psi = crate::stats::psi(d, "memory.pressure");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::swap_v2;

    /// The runtime-spec's swap is memory+swap; memory.swap.max is swap alone.
    #[test]
    fn swap_is_the_total_minus_the_limit() {
        assert_eq!(swap_v2(-1, None).unwrap(), "max");
        assert_eq!(swap_v2(300, Some(100)).unwrap(), "200");
        assert_eq!(swap_v2(100, Some(100)).unwrap(), "0");
        for (swap, limit, why) in [
            (300, None, "without a memory limit"),
            (300, Some(-1), "unlimited memory.limit"),
            (50, Some(100), "lower than memory.limit 100"),
        ] {
            let e = swap_v2(swap, limit).unwrap_err().to_string();
            assert!(
                e.starts_with("cgroup: linux.resources.memory.swap: ") && e.contains(why),
                "{e}"
            );
        }
    }
}
