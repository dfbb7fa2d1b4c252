//! v1 `cpu`: shares, CFS quota and period, burst, realtime runtime and period, idle; the
//! throttling statistics (cpu.stat).

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::fs::flat_keyed;
use crate::resources::{self as r, invalid, set};
use crate::stats::opt_read;
use crate::{Manager, Result, Stats};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(c) = res.cpu() else {
        return Ok(());
    };
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
    Ok(())
}

/// Throttling from cpu.stat (the usage is cpuacct's).
pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    if let Some(s) = opt_read(d, "cpu.stat")? {
        for (k, v) in flat_keyed(&s) {
            match k {
                "nr_periods" => st.cpu.throttling.periods = v,
                "nr_throttled" => st.cpu.throttling.throttled_periods = v,
                "throttled_time" => st.cpu.throttling.throttled_time = v,
                _ => {}
            }
        }
    }
    Ok(())
}
