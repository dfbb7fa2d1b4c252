//! v1 `cpuacct`: statistics only (cpu time in total, per cpu, user and system); it has no
//! resources to write.

use std::path::Path;

use crate::fs::flat_keyed;
use crate::stats::{opt_read, u};
use crate::{Result, Stats};

/// cpuacct.usage, cpuacct.usage_percpu, cpuacct.usage_all, cpuacct.stat (clock ticks, as
/// nanoseconds).
pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    st.cpu.usage.total = u(d, "cpuacct.usage")?;
    if let Some(s) = opt_read(d, "cpuacct.usage_percpu")? {
        st.cpu.usage.percpu = s
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
    }
    // "cpu user system" and a line per cpu, nanoseconds (runc's getPercpuUsageInModes).
    if let Some(s) = opt_read(d, "cpuacct.usage_all")? {
        for l in s.lines().skip(1) {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            if let [_, user, system, ..] = f[..] {
                st.cpu.usage.percpu_user.push(user);
                st.cpu.usage.percpu_kernel.push(system);
            }
        }
    }
    if let Some(s) = opt_read(d, "cpuacct.stat")? {
        // SAFETY: sysconf(3) takes an integer name and touches no memory of ours.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        for (k, v) in flat_keyed(&s) {
            let ns = v.saturating_mul(1_000_000_000 / hz);
            match k {
                "user" => st.cpu.usage.user = ns,
                "system" => st.cpu.usage.kernel = ns,
                _ => {}
            }
        }
    }
    Ok(())
}
