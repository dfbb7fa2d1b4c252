//! Resource usage, shaped like the `data` object of runc's `events --stats` JSON (runc
//! 1.5.1's types/events.go: the same field names, order and omitted zeros; cpu times in
//! nanoseconds; a "max" memory limit reads as u64::MAX, a "max" pids limit as 0, runc's "no
//! limit").
//! Best effort: a file or controller the host lacks leaves its fields at zero.
//!
//! This file holds the types, the dispatch over the drivers' `STATS` lists and the helpers
//! the readers share; each controller's reader is in its own file, `v1/<controller>.rs` or
//! `v2/<controller>.rs`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fs::{self, read_u64_opt};
use crate::{Manager, Result};

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Go's `omitzero`: left out when every field is zero.
fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuUsage {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percpu: Vec<u64>,
    /// v1 cpuacct.usage_all, per cpu.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percpu_kernel: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percpu_user: Vec<u64>,
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

/// One line of a PSI file (`some` or `full`): runc's PSIData.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PsiData {
    #[serde(default)]
    pub avg10: f64,
    #[serde(default)]
    pub avg60: f64,
    #[serde(default)]
    pub avg300: f64,
    #[serde(default)]
    pub total: u64,
}

/// A cgroup2 `<controller>.pressure` file (pure v2 only, as runc reads it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PsiStats {
    #[serde(default)]
    pub some: PsiData,
    #[serde(default)]
    pub full: PsiData,
}

impl Eq for PsiStats {}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuStats {
    #[serde(default, skip_serializing_if = "is_default")]
    pub usage: CpuUsage,
    #[serde(default, skip_serializing_if = "is_default")]
    pub throttling: Throttling,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// v1 cpuset's files; on v2 runc reports none of them (zeros, no lists).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpusetStats {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u16>,
    #[serde(default)]
    pub cpu_exclusive: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mems: Vec<u16>,
    #[serde(default)]
    pub mem_hardwall: u64,
    #[serde(default)]
    pub mem_exclusive: u64,
    #[serde(default)]
    pub memory_migrate: u64,
    #[serde(default)]
    pub memory_spread_page: u64,
    #[serde(default)]
    pub memory_spread_slab: u64,
    #[serde(default)]
    pub memory_pressure: u64,
    #[serde(default)]
    pub sched_load_balance: u64,
    #[serde(default)]
    pub sched_relax_domain_level: i64,
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
    #[serde(default, skip_serializing_if = "is_default")]
    pub usage: MemoryEntry,
    #[serde(default, skip_serializing_if = "is_default")]
    pub swap: MemoryEntry,
    #[serde(default, skip_serializing_if = "is_default")]
    pub kernel: MemoryEntry,
    #[serde(default, rename = "kernelTCP", skip_serializing_if = "is_default")]
    pub kernel_tcp: MemoryEntry,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raw: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
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

/// runc `events --stats` "data", in runc's order. `hugetlb` and `intel_rdt` are always there
/// (`{}` without hugepages; sprout has no Intel RDT), `network_interfaces` always null (runc
/// fills it only for libcontainer's own veth networks, which an OCI config cannot ask for).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    #[serde(default)]
    pub cpu: CpuStats,
    #[serde(default)]
    pub cpuset: CpusetStats,
    #[serde(default)]
    pub memory: MemoryStats,
    #[serde(default)]
    pub pids: PidsStats,
    #[serde(default)]
    pub blkio: BlkioStats,
    #[serde(default)]
    pub hugetlb: BTreeMap<String, HugetlbStats>,
    #[serde(default)]
    pub intel_rdt: IntelRdtStats,
    #[serde(default)]
    pub network_interfaces: Option<Vec<serde_json::Value>>,
}

/// Always empty: sprout refuses `linux.intelRdt`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntelRdtStats {}

/// One controller's statistics reader: fills its fields of [`Stats`] from its directory (a
/// v1 hierarchy's, or the cgroup2 leaf). Each lives in its controller's file
/// (`v1/<controller>.rs`, `v2/<controller>.rs`), beside that controller's `apply`; the
/// drivers list them in `STATS`.
pub(crate) type ReadStats = fn(&Path, &mut Stats) -> Result<()>;

/// v1/hybrid: each reader of [`crate::v1::STATS`] on its hierarchy's directory, for the
/// hierarchies the container has; without a v1 hugetlb hierarchy, the hybrid cgroup2 leaf's
/// hugetlb files.
pub(crate) fn v1(m: &Manager) -> Result<Stats> {
    let mut st = Stats::default();
    for (controller, read) in crate::v1::STATS {
        if let Some(d) = m.v1_path(controller) {
            read(d, &mut st)?;
        }
    }
    if m.v1_path("hugetlb").is_none() {
        if let Some(d) = m.unified_path() {
            crate::v2::hugetlb::stats(d, &mut st)?;
        }
    }
    Ok(st)
}

/// Pure v2: each reader of [`crate::v2::STATS`] on the leaf.
pub(crate) fn v2(m: &Manager) -> Result<Stats> {
    let mut st = Stats::default();
    let Some(d) = m.unified_path() else {
        return Ok(st);
    };
    for (_, read) in crate::v2::STATS {
        read(d, &mut st)?;
    }
    Ok(st)
}

// ---- what the readers share

/// A u64 file, 0 when it is missing ("max" reads as u64::MAX).
pub(crate) fn u(dir: &Path, file: &str) -> Result<u64> {
    Ok(read_u64_opt(dir, file)?.unwrap_or(0))
}

/// pids.current and pids.max (v1 and v2 alike); "max" is 0 in runc's stats: no limit.
pub(crate) fn pids(d: &Path, st: &mut Stats) -> Result<()> {
    st.pids.current = u(d, "pids.current")?;
    st.pids.limit = match u(d, "pids.max")? {
        u64::MAX => 0,
        l => l,
    };
    Ok(())
}

/// A `<controller>.pressure` file (`some`/`full` lines of `avg10=… avg60=… avg300=…
/// total=…`); None when it is missing or unreadable (no PSI in the kernel, or turned off for
/// the cgroup), as runc.
pub(crate) fn psi(dir: &Path, file: &str) -> Option<PsiStats> {
    let s = std::fs::read_to_string(dir.join(file)).ok()?;
    let mut p = PsiStats::default();
    for l in s.lines() {
        let mut it = l.split_whitespace();
        let d = match it.next() {
            Some("some") => &mut p.some,
            Some("full") => &mut p.full,
            _ => continue,
        };
        for kv in it {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            match k {
                "avg10" => d.avg10 = v.parse().unwrap_or(0.0),
                "avg60" => d.avg60 = v.parse().unwrap_or(0.0),
                "avg300" => d.avg300 = v.parse().unwrap_or(0.0),
                "total" => d.total = v.parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    Some(p)
}

/// A cpuset list ("0-3,8") as its numbers, as runc's getCpusetStat.
pub(crate) fn cpu_list(s: &str) -> Vec<u16> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u16>(), b.trim().parse::<u16>()) {
            out.extend(a..=b);
        }
    }
    out
}

/// A file's text, None when it is missing.
pub(crate) fn opt_read(dir: &Path, file: &str) -> Result<Option<String>> {
    match fs::read(&dir.join(file)) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(fs::io_err(dir.join(file), e)),
    }
}

/// Hugepage sizes with a `hugetlb.<size>.<suffix>` file in `d`.
pub(crate) fn hugetlb_sizes(d: &Path, suffix: &str) -> Vec<String> {
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
