//! Resource usage, shaped like the `data` object of runc's `events --stats` JSON
//! (same field names; cpu times in nanoseconds; "max" limits read as u64::MAX).
//! Best effort: a file or controller the host lacks leaves its fields at zero.
//!
//! This file holds the types, the dispatch over the drivers' `STATS` lists and the helpers
//! the readers share; each controller's reader is in its own file, `v1/<controller>.rs` or
//! `v2/<controller>.rs`.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fs::{self, read_u64_opt};
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
