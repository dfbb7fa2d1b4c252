//! Resource usage, shaped like the `data` object of runc's `events --stats` JSON
//! (same field names; cpu times in nanoseconds; "max" limits read as u64::MAX).
//! Best effort: a file or controller the host lacks leaves its fields at zero.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fs::{self, flat_keyed, read_u64_opt};
use crate::{Manager, Result};

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuUsage {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percpu: Vec<u64>,
    #[serde(default)]
    pub kernel: u64,
    #[serde(default)]
    pub user: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttling {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub periods: u64,
    #[serde(default, rename = "throttledPeriods", skip_serializing_if = "is_zero")]
    pub throttled_periods: u64,
    #[serde(default, rename = "throttledTime", skip_serializing_if = "is_zero")]
    pub throttled_time: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuStats {
    #[serde(default)]
    pub usage: CpuUsage,
    #[serde(default)]
    pub throttling: Throttling,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryEntry {
    #[serde(default)]
    pub limit: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usage: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max: u64,
    #[serde(default)]
    pub failcnt: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryStats {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache: u64,
    #[serde(default)]
    pub usage: MemoryEntry,
    #[serde(default)]
    pub swap: MemoryEntry,
    #[serde(default)]
    pub kernel: MemoryEntry,
    #[serde(default, rename = "kernelTCP")]
    pub kernel_tcp: MemoryEntry,
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub raw: HashMap<String, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidsStats {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub current: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub limit: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlkioEntry {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub major: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub minor: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub op: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub value: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlkioStats {
    #[serde(
        default,
        rename = "ioServiceBytesRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_service_bytes_recursive: Vec<BlkioEntry>,
    #[serde(
        default,
        rename = "ioServicedRecursive",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub io_serviced_recursive: Vec<BlkioEntry>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugetlbStats {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usage: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max: u64,
    #[serde(default)]
    pub failcnt: u64,
}

/// runc `events --stats` "data".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    #[serde(default)]
    pub cpu: CpuStats,
    #[serde(default)]
    pub memory: MemoryStats,
    #[serde(default)]
    pub pids: PidsStats,
    #[serde(default)]
    pub blkio: BlkioStats,
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub hugetlb: HashMap<String, HugetlbStats>,
}

fn u(dir: &Path, file: &str) -> Result<u64> {
    Ok(read_u64_opt(dir, file)?.unwrap_or(0))
}

fn opt_read(dir: &Path, file: &str) -> Result<Option<String>> {
    match fs::read(&dir.join(file)) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(fs::io_err(dir.join(file), e)),
    }
}

fn mem_entry(d: &Path, prefix: &str) -> Result<MemoryEntry> {
    Ok(MemoryEntry {
        usage: u(d, &format!("{prefix}usage_in_bytes"))?,
        max: u(d, &format!("{prefix}max_usage_in_bytes"))?,
        limit: u(d, &format!("{prefix}limit_in_bytes"))?,
        failcnt: u(d, &format!("{prefix}failcnt"))?,
    })
}

/// Hugepage sizes with a `hugetlb.<size>.<suffix>` file in `d`.
fn hugetlb_sizes(d: &Path, suffix: &str) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(d) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            let size = n.strip_prefix("hugetlb.")?.strip_suffix(suffix)?;
            (!size.contains('.')).then(|| size.to_string())
        })
        .collect()
}

fn blkio_v1(s: &str, out: &mut Vec<BlkioEntry>) {
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

pub(crate) fn v1(m: &Manager) -> Result<Stats> {
    let mut st = Stats::default();
    if let Some(d) = m.v1_path("cpuacct") {
        st.cpu.usage.total = u(d, "cpuacct.usage")?;
        if let Some(s) = opt_read(d, "cpuacct.usage_percpu")? {
            st.cpu.usage.percpu = s
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
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
    }
    if let Some(d) = m.v1_path("cpu") {
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
    }
    if let Some(d) = m.v1_path("memory") {
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
    }
    if let Some(d) = m.v1_path("pids") {
        st.pids.current = u(d, "pids.current")?;
        st.pids.limit = u(d, "pids.max")?;
    }
    if let Some(d) = m.v1_path("blkio") {
        // CFQ's recursive stats, else the throttle layer's (always present).
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
            blkio_v1(&s, &mut st.blkio.io_service_bytes_recursive);
        }
        if let Some(s) = opt_read(d, ios)? {
            blkio_v1(&s, &mut st.blkio.io_serviced_recursive);
        }
    }
    if let Some(d) = m.v1_path("hugetlb") {
        for size in hugetlb_sizes(d, ".usage_in_bytes") {
            let h = HugetlbStats {
                usage: u(d, &format!("hugetlb.{size}.usage_in_bytes"))?,
                max: u(d, &format!("hugetlb.{size}.max_usage_in_bytes"))?,
                failcnt: u(d, &format!("hugetlb.{size}.failcnt"))?,
            };
            st.hugetlb.insert(size, h);
        }
    } else if let Some(d) = m.unified_path() {
        hugetlb_v2(d, &mut st)?;
    }
    Ok(st)
}

fn hugetlb_v2(d: &Path, st: &mut Stats) -> Result<()> {
    for size in hugetlb_sizes(d, ".current") {
        let mut h = HugetlbStats {
            usage: u(d, &format!("hugetlb.{size}.current"))?,
            ..Default::default()
        };
        if let Some(s) = opt_read(d, &format!("hugetlb.{size}.events"))? {
            h.failcnt = flat_keyed(&s)
                .find(|(k, _)| *k == "max")
                .map(|(_, v)| v)
                .unwrap_or(0);
        }
        st.hugetlb.insert(size, h);
    }
    Ok(())
}

pub(crate) fn v2(m: &Manager) -> Result<Stats> {
    let mut st = Stats::default();
    let Some(d) = m.unified_path() else {
        return Ok(st);
    };
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
    st.memory.usage.usage = u(d, "memory.current")?;
    st.memory.usage.limit = u(d, "memory.max")?;
    st.memory.usage.max = u(d, "memory.peak")?;
    if let Some(s) = opt_read(d, "memory.events")? {
        st.memory.usage.failcnt = flat_keyed(&s)
            .find(|(k, _)| *k == "max")
            .map(|(_, v)| v)
            .unwrap_or(0);
    }
    st.memory.swap.usage = u(d, "memory.swap.current")?;
    st.memory.swap.limit = u(d, "memory.swap.max")?;
    if let Some(s) = opt_read(d, "memory.stat")? {
        st.memory.raw = flat_keyed(&s).map(|(k, v)| (k.to_string(), v)).collect();
        st.memory.cache = st.memory.raw.get("file").copied().unwrap_or(0);
    }
    st.pids.current = u(d, "pids.current")?;
    st.pids.limit = u(d, "pids.max")?;
    if let Some(s) = opt_read(d, "io.stat")? {
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
    }
    hugetlb_v2(d, &mut st)?;
    Ok(st)
}
