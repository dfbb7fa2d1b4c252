//! Shared pieces of `apply`: field-named errors, validation and value conversions.

use std::io;
use std::path::Path;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType, LinuxHugepageLimit, LinuxRdma};

use crate::{fs, Error, Result};

pub(crate) const P: &str = "linux.resources";

pub(crate) fn invalid(field: &str, msg: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("{P}.{field}: {msg}"))
}

/// Write one interface file for `field`. A missing file is reported as the kernel lacking the
/// feature; on v2 with a hint about controller delegation.
pub(crate) fn set(dir: &Path, file: &str, value: &str, field: &str, v2: bool) -> Result<()> {
    let p = dir.join(file);
    match fs::write(&p, value.as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(missing(dir, file, field, v2)),
        Err(e) => Err(invalid(
            field,
            format_args!("writing {value:?} to {}: {e}", p.display()),
        )),
    }
}

/// Like [`set`], but `Ok(false)` instead of an error when the file does not exist.
pub(crate) fn try_set(dir: &Path, file: &str, value: &str, field: &str) -> Result<bool> {
    let p = dir.join(file);
    match fs::write(&p, value.as_bytes()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(invalid(
            field,
            format_args!("writing {value:?} to {}: {e}", p.display()),
        )),
    }
}

/// Whether `res` asks for any limit a cgroup controller enforces (device rules aside): runc's
/// `needAnyControllers`, used to let a rootless container without cgroup access go without one.
/// Empty objects, nulls, zeros and empty lists ask for nothing.
pub(crate) fn needs_limits(res: Option<&oci_spec::runtime::LinuxResources>) -> bool {
    fn set(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Null => false,
            serde_json::Value::Bool(b) => *b,
            serde_json::Value::Number(n) => n.as_f64() != Some(0.0),
            serde_json::Value::String(s) => !s.is_empty(),
            serde_json::Value::Array(a) => a.iter().any(set),
            serde_json::Value::Object(o) => o.values().any(set),
        }
    }
    let Some(res) = res else {
        return false;
    };
    match serde_json::to_value(res) {
        Ok(serde_json::Value::Object(mut o)) => {
            o.remove("devices");
            o.values().any(set)
        }
        _ => true,
    }
}

pub(crate) fn missing(dir: &Path, file: &str, field: &str, v2: bool) -> Error {
    if !dir.exists() {
        return invalid(
            field,
            format_args!("cgroup directory {} does not exist", dir.display()),
        );
    }
    if v2 {
        let ctrl = file.split('.').next().unwrap_or(file);
        invalid(
            field,
            format_args!(
                "not supported by this kernel (no {file}; is the {ctrl} controller available and \
                 enabled in the parent's cgroup.subtree_control?)"
            ),
        )
    } else {
        invalid(
            field,
            format_args!("not supported by this kernel (no {file})"),
        )
    }
}

/// checkBeforeUpdate: refuse a limit below what the cgroup already uses.
pub(crate) fn check_usage(
    d: &Path,
    file: &str,
    limit: Option<i64>,
    swap: Option<i64>,
) -> Result<()> {
    let Some(usage) = fs::read_u64_opt(d, file)? else {
        return Ok(());
    };
    // runc's words and order (fs2.CheckMemoryUsage): the memory+swap total, then the limit.
    for (field, what, v) in [
        ("memory.swap", "memory+swap", swap),
        ("memory.limit", "memory", limit),
    ] {
        if let Some(v) = v.filter(|v| *v > 0) {
            if v as u64 <= usage {
                return Err(invalid(
                    field,
                    format_args!("rejecting {what} limit {v} <= usage {usage} (checkBeforeUpdate)"),
                ));
            }
        }
    }
    Ok(())
}

pub(crate) fn not_mounted(field: &str, controller: &str) -> Error {
    invalid(
        field,
        format_args!(
            "not supported on this host (the {controller} cgroup controller is not mounted)"
        ),
    )
}

/// Byte limits (memory, swap, reservation): 0 = unset, -1 = unlimited, other negatives are
/// rejected. Returns the number to write (v1 style; v2 callers map -1 to "max").
pub(crate) fn bytes(field: &str, v: Option<i64>) -> Result<Option<i64>> {
    match v {
        None | Some(0) => Ok(None),
        Some(v) if v < -1 => Err(invalid(
            field,
            format_args!("invalid value {v} (must be -1 for unlimited, or a byte count)"),
        )),
        Some(v) => Ok(Some(v)),
    }
}

pub(crate) fn max_or(v: i64) -> String {
    if v < 0 {
        "max".to_string()
    } else {
        v.to_string()
    }
}

/// cpu.shares: 0 = unset; the kernel range is 2..=262144.
pub(crate) fn shares(v: Option<u64>) -> Result<Option<u64>> {
    match v {
        None | Some(0) => Ok(None),
        Some(s) if !(2..=262144).contains(&s) => Err(invalid(
            "cpu.shares",
            format_args!("{s} is out of range (2..262144)"),
        )),
        Some(s) => Ok(Some(s)),
    }
}

/// cpu.shares (2..262144, default 1024) -> cpu.weight (1..10000, default 100), as runc ≥ 1.3.2
/// (opencontainers/cgroups' ConvertCPUSharesToCgroupV2Value) and crun ≥ 1.23 convert: the
/// exponent is a quadratic in log2(shares) through the three points (2, 1), (1024, 100) and
/// (262144, 10000), so a v1 default maps to the v2 default (the linear formula before it gave
/// 1024 -> 39, below systemd's and the kubelet's 100 for the same share). 0 stays "unset".
pub(crate) fn shares_to_weight(shares: u64) -> u64 {
    match shares {
        0 => 0,
        1..=2 => 1,
        262_144.. => 10_000,
        s => {
            let l = (s as f64).log2();
            let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
            // The value is within 1..=10000, so the cast neither truncates nor saturates.
            10f64.powf(exponent).ceil() as u64
        }
    }
}

/// blkio weight (10..1000) -> io.weight (1..10000).
pub(crate) fn blkio_to_io_weight(w: u64) -> u64 {
    1 + (w - 10) * 9999 / 990
}

pub(crate) fn blkio_weight(field: &str, v: Option<u16>) -> Result<Option<u16>> {
    match v {
        None | Some(0) => Ok(None),
        Some(w) if !(10..=1000).contains(&w) => Err(invalid(
            field,
            format_args!("{w} is out of range (10..1000)"),
        )),
        Some(w) => Ok(Some(w)),
    }
}

pub(crate) fn quota(v: Option<i64>) -> Result<Option<i64>> {
    match v {
        None | Some(0) => Ok(None),
        Some(-1) => Ok(Some(-1)),
        Some(q) if q < 1000 => Err(invalid(
            "cpu.quota",
            format_args!(
                "{q} is invalid (must be -1 for unlimited, or at least 1000 microseconds)"
            ),
        )),
        Some(q) => Ok(Some(q)),
    }
}

pub(crate) fn period(v: Option<u64>) -> Result<Option<u64>> {
    match v {
        None | Some(0) => Ok(None),
        Some(p) if !(1000..=1_000_000).contains(&p) => Err(invalid(
            "cpu.period",
            format_args!("{p} is out of range (1000..1000000 microseconds)"),
        )),
        Some(p) => Ok(Some(p)),
    }
}

pub(crate) fn idle(v: Option<i64>) -> Result<Option<i64>> {
    match v {
        None => Ok(None),
        Some(i @ (0 | 1)) => Ok(Some(i)),
        Some(i) => Err(invalid(
            "cpu.idle",
            format_args!("{i} is invalid (must be 0 or 1)"),
        )),
    }
}

pub(crate) fn dev_num(field: &str, major: i64, minor: i64) -> Result<String> {
    if major < 0 || minor < 0 || major > i64::from(u32::MAX) || minor > i64::from(u32::MAX) {
        return Err(invalid(
            field,
            format_args!("invalid device number {major}:{minor}"),
        ));
    }
    Ok(format!("{major}:{minor}"))
}

/// "2MB", "1GB", "64KB", "2048kB" -> the canonical name used in hugetlb file names
/// ("2MB", "1GB", "64KB").
pub(crate) fn hugepage_size(s: &str) -> Result<String> {
    let bad = || {
        invalid(
            "hugepageLimits.pageSize",
            format_args!("{s:?} is not a page size like \"2MB\" or \"1GB\""),
        )
    };
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mut kb = match unit {
        "KB" | "kB" | "K" | "k" => n,
        "MB" | "M" => n * 1024,
        "GB" | "G" => n * 1024 * 1024,
        _ => return Err(bad()),
    };
    if kb == 0 {
        return Err(bad());
    }
    // The kernel names hugetlb files with the largest exact unit.
    let mut units = ["KB", "MB", "GB"].iter();
    let mut u = units.next().unwrap();
    while kb % 1024 == 0 {
        match units.next() {
            Some(next) => {
                kb /= 1024;
                u = next;
            }
            None => break,
        }
    }
    Ok(format!("{kb}{u}"))
}

pub(crate) fn hugepage_limit(page: &str, v: i64) -> Result<i64> {
    if v < -1 {
        return Err(invalid(
            "hugepageLimits.limit",
            format_args!("{v} for page size {page} is invalid (must be a byte count, or -1)"),
        ));
    }
    Ok(v)
}

/// Every limit as (the canonical page size of its file names, the limit), validated.
pub(crate) fn hugepage_values(limits: &[LinuxHugepageLimit]) -> Result<Vec<(String, i64)>> {
    limits
        .iter()
        .map(|l| {
            Ok((
                hugepage_size(l.page_size())?,
                hugepage_limit(l.page_size(), l.limit())?,
            ))
        })
        .collect()
}

/// "mlx4_0 hca_handle=2 hca_object=100"; `None` when neither limit is set.
pub(crate) fn rdma_line(dev: &str, l: &LinuxRdma) -> Result<Option<String>> {
    if dev.is_empty() || dev.contains(char::is_whitespace) {
        return Err(invalid("rdma", format_args!("invalid device name {dev:?}")));
    }
    let mut s = dev.to_string();
    if let Some(h) = l.hca_handles() {
        s.push_str(&format!(" hca_handle={h}"));
    }
    if let Some(o) = l.hca_objects() {
        s.push_str(&format!(" hca_object={o}"));
    }
    Ok(if s.len() == dev.len() { None } else { Some(s) })
}

/// A v1 devices.allow / devices.deny line: "c 1:3 rwm", "a *:* rwm".
pub(crate) fn device_rule(i: usize, d: &LinuxDeviceCgroup) -> Result<String> {
    let field = format!("devices[{i}]");
    let typ = d.typ().unwrap_or(LinuxDeviceType::A);
    let t = match typ {
        LinuxDeviceType::A => "a",
        LinuxDeviceType::B => "b",
        LinuxDeviceType::C | LinuxDeviceType::U => "c",
        LinuxDeviceType::P => {
            return Err(invalid(
                &field,
                "type \"p\" (FIFO) cannot be used in a device cgroup rule",
            ))
        }
    };
    let num = |v: Option<i64>| -> Result<String> {
        match v {
            None => Ok("*".into()),
            Some(n) if n < 0 => Ok("*".into()),
            Some(n) if n > i64::from(u32::MAX) => {
                Err(invalid(&field, format_args!("invalid device number {n}")))
            }
            Some(n) => Ok(n.to_string()),
        }
    };
    let access = device_access(&field, d)?;
    let mut acc = String::with_capacity(3);
    for (bit, c) in [(ACCESS_READ, 'r'), (ACCESS_WRITE, 'w'), (ACCESS_MKNOD, 'm')] {
        if access & bit != 0 {
            acc.push(c);
        }
    }
    Ok(format!("{t} {}:{} {acc}", num(d.major())?, num(d.minor())?))
}

/// Read access in a device rule's `access` bits.
pub(crate) const ACCESS_READ: u32 = 1;
/// Write access.
pub(crate) const ACCESS_WRITE: u32 = 2;
/// mknod.
pub(crate) const ACCESS_MKNOD: u32 = 4;

/// A device rule's `access` as bits. Empty or absent means "rwm". Like runc (whose
/// `Permissions.toSet` skips them), characters other than r, w and m are ignored with a warning
/// naming the field (runc's own tests use "rwa"); an access made only of such characters would
/// silently be no access at all, so that one is an error.
pub(crate) fn device_access(field: &str, d: &LinuxDeviceCgroup) -> Result<u32> {
    let acc = d.access().as_deref().unwrap_or("");
    if acc.is_empty() {
        return Ok(ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD);
    }
    let mut bits = 0;
    let mut unknown = false;
    for c in acc.chars() {
        match c {
            'r' => bits |= ACCESS_READ,
            'w' => bits |= ACCESS_WRITE,
            'm' => bits |= ACCESS_MKNOD,
            _ => unknown = true,
        }
    }
    if bits == 0 {
        return Err(invalid(
            field,
            format_args!("invalid access {acc:?} (only r, w, m)"),
        ));
    }
    if unknown {
        crate::warn(&format!(
            "{field}: access {acc:?}: characters other than r, w, m are ignored"
        ));
    }
    Ok(bits)
}

/// The list only says "allow everything" or "deny everything" (the default rules).
pub(crate) fn devices_trivial(list: &[LinuxDeviceCgroup]) -> Option<bool> {
    let all = |d: &LinuxDeviceCgroup| {
        matches!(d.typ(), None | Some(LinuxDeviceType::A))
            && d.major().is_none_or(|m| m < 0)
            && d.minor().is_none_or(|m| m < 0)
            && d.access()
                .as_deref()
                .is_none_or(|a| a.is_empty() || a == "rwm")
    };
    match list {
        [d] if all(d) => Some(d.allow()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxDeviceCgroupBuilder;

    #[test]
    fn limits_that_need_a_cgroup() {
        let r = |j: &str| -> oci_spec::runtime::LinuxResources { serde_json::from_str(j).unwrap() };
        assert!(!needs_limits(None));
        assert!(!needs_limits(Some(&r("{}"))));
        assert!(!needs_limits(Some(&r(
            r#"{"devices":[{"allow":false,"access":"rwm"}],"memory":{},"cpu":{"shares":0}}"#
        ))));
        assert!(needs_limits(Some(&r(r#"{"pids":{"limit":10}}"#))));
        assert!(needs_limits(Some(&r(r#"{"memory":{"limit":1048576}}"#))));
        assert!(needs_limits(Some(&r(r#"{"unified":{"io.weight":"100"}}"#))));
    }

    #[test]
    fn conversions() {
        for (shares, weight) in [
            (0, 0),
            (2, 1),
            (3, 2),
            (10, 4),
            (100, 17),
            (512, 59),
            (1024, 100),
            (2048, 174),
            (262_143, 10_000),
            (262_144, 10_000),
        ] {
            assert_eq!(shares_to_weight(shares), weight, "shares {shares}");
        }
        // The sum over the whole range, as runc 1.5.1's Go function gives it (math.Log2,
        // math.Pow, math.Ceil over 0..=262144): one ulp of difference at a value near an
        // integer would move it.
        let sum: u64 = (0..=262_144).map(shares_to_weight).sum();
        assert_eq!(sum, 1_405_378_461);
        assert_eq!(blkio_to_io_weight(10), 1);
        assert_eq!(blkio_to_io_weight(500), 4950);
        assert_eq!(blkio_to_io_weight(1000), 10000);
    }

    #[test]
    fn validation() {
        assert_eq!(bytes("memory.limit", Some(0)).unwrap(), None);
        assert_eq!(bytes("memory.limit", Some(-1)).unwrap(), Some(-1));
        let e = bytes("memory.limit", Some(-5)).unwrap_err().to_string();
        assert!(
            e.contains("linux.resources.memory.limit") && e.contains("-5"),
            "{e}"
        );
        assert!(shares(Some(1))
            .unwrap_err()
            .to_string()
            .contains("cpu.shares"));
        assert!(shares(Some(300000)).is_err());
        assert!(quota(Some(5))
            .unwrap_err()
            .to_string()
            .contains("linux.resources.cpu.quota"));
        assert_eq!(quota(Some(-1)).unwrap(), Some(-1));
        assert!(period(Some(10)).is_err());
        assert!(idle(Some(2)).is_err());
        assert!(blkio_weight("blockIO.weight", Some(5)).is_err());
        assert!(dev_num("x", -1, 0).is_err());
    }

    #[test]
    fn hugepage_sizes() {
        assert_eq!(hugepage_size("2MB").unwrap(), "2MB");
        assert_eq!(hugepage_size("2048kB").unwrap(), "2MB");
        assert_eq!(hugepage_size("1GB").unwrap(), "1GB");
        assert_eq!(hugepage_size("64KB").unwrap(), "64KB");
        assert_eq!(hugepage_size("1048576KB").unwrap(), "1GB");
        assert!(hugepage_size("2XB").is_err());
        assert!(hugepage_size("MB").is_err());
        assert!(hugepage_size("0MB").is_err());
        assert!(hugepage_size("../2MB").is_err());
    }

    #[test]
    fn device_rules() {
        let d = LinuxDeviceCgroupBuilder::default()
            .allow(false)
            .access("rwm")
            .build()
            .unwrap();
        assert_eq!(device_rule(0, &d).unwrap(), "a *:* rwm");
        assert_eq!(devices_trivial(std::slice::from_ref(&d)), Some(false));
        let c = LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .typ(LinuxDeviceType::C)
            .major(1)
            .minor(3)
            .access("rw")
            .build()
            .unwrap();
        assert_eq!(device_rule(1, &c).unwrap(), "c 1:3 rw");
        assert_eq!(devices_trivial(&[d, c]), None);
        // runc ignores characters other than r, w, m ("rwa" is in its own suite) ...
        let odd = LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .access("rwa")
            .build()
            .unwrap();
        assert_eq!(device_rule(2, &odd).unwrap(), "a *:* rw");
        let order = LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .access("mr")
            .build()
            .unwrap();
        assert_eq!(device_rule(2, &order).unwrap(), "a *:* rm");
        // ... but an access with none of them is an error naming the field.
        let bad = LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .access("x")
            .build()
            .unwrap();
        assert!(device_rule(2, &bad)
            .unwrap_err()
            .to_string()
            .contains("devices[2]"));
    }
}
