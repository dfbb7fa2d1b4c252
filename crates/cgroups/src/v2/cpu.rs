//! v2 `cpu`: cpu.weight (from shares), cpu.max (quota and period), cpu.max.burst, cpu.idle;
//! the realtime fields are refused; usage and throttling (cpu.stat) as statistics.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::fs::flat_keyed;
use crate::resources::{self as r, invalid, set};
use crate::stats::opt_read;
use crate::{fs, Hier, Manager, Result, Stats};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(c) = res.cpu() else {
        return Ok(());
    };
    let d = u.dir.as_path();
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
    Ok(())
}

/// cpu.stat: usage (total, user, system) and throttling, microseconds as nanoseconds;
/// cpu.pressure.
pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    if let Some(s) = opt_read(d, "cpu.stat")? {
        for (k, v) in flat_keyed(&s) {
            let ns = v.saturating_mul(1000);
            match k {
                "usage_usec" => st.cpu.usage.total = ns,
                "user_usec" => st.cpu.usage.user = ns,
                "system_usec" => st.cpu.usage.kernel = ns,
                "nr_periods" => st.cpu.throttling.periods = v,
                "nr_throttled" => st.cpu.throttling.throttled_periods = v,
                "throttled_usec" => st.cpu.throttling.throttled_time = ns,
                _ => {}
            }
        }
    }
    st.cpu.psi = crate::stats::psi(d, "cpu.pressure");
    Ok(())
}
