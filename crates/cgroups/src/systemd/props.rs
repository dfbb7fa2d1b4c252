//! `linux.resources` as the transient unit's properties, as runc's and crun's systemd drivers
//! set them: one function per controller (`PROPS`, in the order the properties are sent),
//! each validating what it maps with the same field-named errors as the cgroupfs `apply`.
//! The cgroupfs write that follows sets the rest (and wins where systemd rounds).

use oci_spec::runtime::LinuxResources;

use super::dbus::Value;
use crate::{resources, Layout, Result};

/// What the property writers know of the systemd they talk to.
pub(crate) struct Sd<'a> {
    /// The unit is on a pure cgroup v2 host.
    pub(crate) v2: bool,
    /// systemd's version (0: unknown, and then no property that needs a version is sent, as
    /// runc does), asked for only when a property depends on it.
    version: &'a mut dyn FnMut() -> u32,
}

impl<'a> Sd<'a> {
    pub(crate) fn new(layout: Layout, version: &'a mut dyn FnMut() -> u32) -> Sd<'a> {
        Sd {
            v2: layout == Layout::V2,
            version,
        }
    }

    fn at_least(&mut self, v: u32) -> bool {
        (self.version)() >= v
    }
}

/// CPUQuotaPeriodUSec: systemd ≥ 242.
const QUOTA_PERIOD_SINCE: u32 = 242;
/// AllowedCPUs and AllowedMemoryNodes: systemd ≥ 244.
const CPUSET_SINCE: u32 = 244;
/// CPUWeight=0, which sets cpu.idle: systemd ≥ 252.
const CPU_IDLE_SINCE: u32 = 252;

/// One controller's properties: appends them to `p`.
type Props = fn(sd: &mut Sd, res: &LinuxResources, p: &mut Vec<Value>) -> Result<()>;

/// The property writers (controller, function), in the order their properties are sent.
const PROPS: &[(&str, Props)] = &[
    ("memory", memory),
    ("cpu", cpu),
    ("pids", pids),
    ("io", io),
    ("devices", devices),
    ("unified", unified),
];

/// The resource properties runc's and crun's systemd drivers set. Validates what it maps
/// (the same field-named errors as cgroupfs `apply`, whatever the version).
pub(crate) fn resource_props(sd: &mut Sd, res: &LinuxResources) -> Result<Vec<Value>> {
    let mut p = Vec::new();
    for (_, props) in PROPS {
        props(sd, res, &mut p)?;
    }
    Ok(p)
}

/// The resources as the cgroupfs write after the properties takes them: a quota systemd
/// rounded up to whole percents (see [`quota_per_sec`]) is written rounded the same way, so
/// that the unit and the cgroup agree and a daemon-reload changes nothing (runc ≥ 1.4 does
/// the same).
pub(crate) fn for_cgroupfs(res: &LinuxResources) -> std::borrow::Cow<'_, LinuxResources> {
    use std::borrow::Cow;
    let Some(cpu) = res.cpu() else {
        return Cow::Borrowed(res);
    };
    let (Some(q), period) = (cpu.quota().filter(|q| *q > 0), cpu.period()) else {
        return Cow::Borrowed(res);
    };
    let period = period.filter(|p| *p > 0).unwrap_or(DEFAULT_PERIOD);
    let rounded = rounded_quota(q, period);
    if rounded == q {
        return Cow::Borrowed(res);
    }
    let mut r = res.clone();
    if let Some(c) = r.cpu_mut() {
        c.set_quota(Some(rounded));
    }
    Cow::Owned(r)
}

/// [`for_cgroupfs`] after `update` checked `memory.checkBeforeUpdate` itself, before
/// SetUnitProperties: the cgroupfs write then does not read the usage a second time.
pub(crate) fn checked_for_cgroupfs(res: &LinuxResources) -> std::borrow::Cow<'_, LinuxResources> {
    use std::borrow::Cow;
    let r = for_cgroupfs(res);
    if r.memory()
        .as_ref()
        .is_none_or(|m| m.check_before_update() != Some(true))
    {
        return r;
    }
    let mut r = r.into_owned();
    if let Some(m) = r.memory_mut() {
        m.set_check_before_update(None);
    }
    Cow::Owned(r)
}

/// The kernel's and systemd's default CFS period, 100ms.
const DEFAULT_PERIOD: u64 = 100_000;

/// The quota (per `period`) that CPUQuotaPerSecUSec rounded up to 10ms per second gives back.
fn rounded_quota(quota: i64, period: u64) -> i64 {
    let per_sec = quota_per_sec(Some(quota), Some(period));
    if per_sec == u64::MAX {
        return quota;
    }
    i64::try_from(u128::from(per_sec) * u128::from(period) / 1_000_000).unwrap_or(quota)
}

pub(super) fn prop(name: &str, v: Value) -> Value {
    Value::Struct(vec![Value::str(name), Value::variant(v)])
}

fn u64_or_infinity(v: i64) -> u64 {
    if v < 0 {
        u64::MAX
    } else {
        v as u64
    }
}

/// MemoryLimit (v1) or MemoryMax; on v2 also MemoryLow and MemorySwapMax.
fn memory(sd: &mut Sd, res: &LinuxResources, p: &mut Vec<Value>) -> Result<()> {
    let v2 = sd.v2;
    let Some(mem) = res.memory() else {
        return Ok(());
    };
    let limit = resources::bytes("memory.limit", mem.limit())?;
    if let Some(l) = limit {
        p.push(prop(
            if v2 { "MemoryMax" } else { "MemoryLimit" },
            Value::U64(u64_or_infinity(l)),
        ));
    }
    if v2 {
        if let Some(r) = resources::bytes("memory.reservation", mem.reservation())? {
            p.push(prop("MemoryLow", Value::U64(u64_or_infinity(r))));
        }
        // Memory+swap in the spec, swap alone for systemd (as runc); an unlimited memory
        // limit without a swap value lifts the swap limit too (as the cgroupfs write).
        let v = match (mem.swap(), limit) {
            (Some(-1), _) | (None, Some(-1)) => Some(u64::MAX),
            (Some(s), Some(l)) if s > 0 && l > 0 && s >= l => Some((s - l) as u64),
            _ => None,
        };
        if let Some(v) = v {
            p.push(prop("MemorySwapMax", Value::U64(v)));
        }
    }
    Ok(())
}

/// CPUShares (v1) or CPUWeight, or on v2 CPUWeight=0 for `idle` 1 (systemd ≥ 252; the weight
/// is then left out, as the kernel refuses cpu.weight of an idle cgroup); on v2 the cpuset's
/// AllowedCPUs and AllowedMemoryNodes (the runtime-spec keeps them under `cpu`);
/// CPUQuotaPeriodUSec (≥ 242) and CPUQuotaPerSecUSec.
fn cpu(sd: &mut Sd, res: &LinuxResources, p: &mut Vec<Value>) -> Result<()> {
    let Some(cpu) = res.cpu() else {
        return Ok(());
    };
    let v2 = sd.v2;
    let shares = resources::shares(cpu.shares())?;
    let idle = resources::idle(cpu.idle())? == Some(1) && v2 && sd.at_least(CPU_IDLE_SINCE);
    if idle {
        p.push(prop("CPUWeight", Value::U64(0)));
        if shares.is_some() {
            crate::warn(
                "unable to apply both CPUWeight and CpuIdle to systemd, ignoring CPUWeight",
            );
        }
    } else if let Some(s) = shares {
        if v2 {
            p.push(prop(
                "CPUWeight",
                Value::U64(resources::shares_to_weight(s)),
            ));
        } else {
            p.push(prop("CPUShares", Value::U64(s)));
        }
    }
    if v2 {
        cpuset(sd, cpu, p)?;
    }
    let quota = resources::quota(cpu.quota())?;
    let period = resources::period(cpu.period())?;
    cpu_quota(sd, quota, period, p);
    Ok(())
}

/// CPUQuotaPeriodUSec for a period (systemd ≥ 242: without it a daemon-reload puts the
/// default period back), then CPUQuotaPerSecUSec, as runc sends them.
fn cpu_quota(sd: &mut Sd, quota: Option<i64>, period: Option<u64>, p: &mut Vec<Value>) {
    if let Some(per) = period.filter(|_| sd.at_least(QUOTA_PERIOD_SINCE)) {
        p.push(prop("CPUQuotaPeriodUSec", Value::U64(per)));
    }
    if quota.is_some() || period.is_some() {
        p.push(prop(
            "CPUQuotaPerSecUSec",
            Value::U64(quota_per_sec(quota, period)),
        ));
    }
}

/// Microseconds of CPU time per second (`u64::MAX`: no quota); systemd keeps whole percents,
/// so rounded up to 10ms (runc does the same, so that the cgroupfs write that follows wins).
fn quota_per_sec(quota: Option<i64>, period: Option<u64>) -> u64 {
    let Some(q) = quota.filter(|q| *q > 0) else {
        return u64::MAX;
    };
    let per_sec = q as u64 * 1_000_000 / period.unwrap_or(DEFAULT_PERIOD).max(1);
    per_sec.div_ceil(10_000) * 10_000
}

/// The `unified` keys systemd has properties for, on v2 (runc's mapping): memory.min, .low,
/// .high, .max and .swap.max, pids.max, cpu.weight, cpu.max, cpuset.cpus and .mems. Sent after
/// the properties of the named fields, so they win where both set one (as in the cgroupfs
/// write, where `unified` comes last). Without them a daemon-reload would reset those files to
/// the unit's values. cpu.idle 1 is CPUWeight=0 (systemd ≥ 252; a cpu.weight beside it is then
/// left to cgroupfs, as runc does), cpu.max's period CPUQuotaPeriodUSec (≥ 242). Other keys go
/// to cgroupfs only.
fn unified(sd: &mut Sd, res: &LinuxResources, p: &mut Vec<Value>) -> Result<()> {
    let Some(map) = res.unified().as_ref().filter(|_| sd.v2) else {
        return Ok(());
    };
    let idle = map.get("cpu.idle").map(|v| v.trim()) == Some("1") && sd.at_least(CPU_IDLE_SINCE);
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        let v = map[k].trim();
        let field = format!("unified.{k}");
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| resources::invalid(&field, format_args!("{s:?} is not a number")))
        };
        let max_or_num = |s: &str| if s == "max" { Ok(u64::MAX) } else { num(s) };
        let (name, value) = match k.as_str() {
            "memory.min" => ("MemoryMin", Value::U64(max_or_num(v)?)),
            "memory.low" => ("MemoryLow", Value::U64(max_or_num(v)?)),
            "memory.high" => ("MemoryHigh", Value::U64(max_or_num(v)?)),
            "memory.max" => ("MemoryMax", Value::U64(max_or_num(v)?)),
            "memory.swap.max" => ("MemorySwapMax", Value::U64(max_or_num(v)?)),
            // systemd takes no TasksMax=0.
            "pids.max" => ("TasksMax", Value::U64(max_or_num(v)?.max(1))),
            "cpu.idle" if idle => ("CPUWeight", Value::U64(0)),
            "cpu.weight" if idle => {
                crate::warn(
                    "unable to apply both cpu.weight and cpu.idle to systemd, ignoring cpu.weight",
                );
                continue;
            }
            "cpu.weight" => ("CPUWeight", Value::U64(num(v)?)),
            "cpu.max" => {
                let mut it = v.split_whitespace();
                let quota = match it.next() {
                    Some("max") => None,
                    Some(q) => Some(num(q)? as i64),
                    None => return Err(resources::invalid(&field, "empty value")),
                };
                let period = it.next().map(num).transpose()?;
                if it.next().is_some() {
                    return Err(resources::invalid(
                        &field,
                        format_args!("{v:?} is not \"QUOTA [PERIOD]\""),
                    ));
                }
                // A quota without a period is one per systemd's (and the kernel's) default.
                cpu_quota(sd, quota, Some(period.unwrap_or(DEFAULT_PERIOD)), p);
                continue;
            }
            "cpuset.cpus" | "cpuset.mems" => {
                let bits = cpu_list_bits(v)
                    .map_err(|why| resources::invalid(&field, format_args!("{v:?}: {why}")))?;
                if !sd.at_least(CPUSET_SINCE) {
                    continue;
                }
                (
                    if k == "cpuset.cpus" {
                        "AllowedCPUs"
                    } else {
                        "AllowedMemoryNodes"
                    },
                    Value::Array("y".into(), bits.into_iter().map(Value::Byte).collect()),
                )
            }
            _ => continue,
        };
        p.push(prop(name, value));
    }
    Ok(())
}

/// cpuset: systemd (>= 244, cgroup v2) owns cpuset.cpus/mems of the unit through
/// AllowedCPUs/AllowedMemoryNodes; without them a daemon-reload would reset what the
/// cgroupfs write sets (runc and crun send both).
fn cpuset(sd: &mut Sd, cpu: &oci_spec::runtime::LinuxCpu, p: &mut Vec<Value>) -> Result<()> {
    for (name, field, v) in [
        ("AllowedCPUs", "cpu.cpus", cpu.cpus()),
        ("AllowedMemoryNodes", "cpu.mems", cpu.mems()),
    ] {
        if let Some(list) = v.as_deref().filter(|l| !l.trim().is_empty()) {
            let bits = cpu_list_bits(list)
                .map_err(|why| resources::invalid(field, format_args!("{list:?}: {why}")))?;
            if !sd.at_least(CPUSET_SINCE) {
                continue;
            }
            p.push(prop(
                name,
                Value::Array("y".into(), bits.into_iter().map(Value::Byte).collect()),
            ));
        }
    }
    Ok(())
}

/// TasksMax.
fn pids(_: &mut Sd, res: &LinuxResources, p: &mut Vec<Value>) -> Result<()> {
    if let Some(pids) = res.pids() {
        match pids.limit() {
            l if l > 0 => p.push(prop("TasksMax", Value::U64(l as u64))),
            -1 => p.push(prop("TasksMax", Value::U64(u64::MAX))),
            _ => {}
        }
    }
    Ok(())
}

/// BlockIOWeight (v1) or IOWeight.
fn io(sd: &mut Sd, res: &LinuxResources, p: &mut Vec<Value>) -> Result<()> {
    let v2 = sd.v2;
    if let Some(b) = res.block_io() {
        if let Some(w) = resources::blkio_weight("blockIO.weight", b.weight())? {
            if v2 {
                p.push(prop(
                    "IOWeight",
                    Value::U64(resources::blkio_to_io_weight(u64::from(w))),
                ));
            } else {
                p.push(prop("BlockIOWeight", Value::U64(u64::from(w))));
            }
        }
    }
    Ok(())
}

/// DevicePolicy and DeviceAllow from the device rules (the config's, then the defaults), as
/// runc and crun send them. systemd applies a unit's device policy again whenever it realizes
/// the unit (a `systemctl daemon-reload`, which package managers run): with the default
/// policy and no list, on cgroup v1 it writes `a` to the scope's devices.allow, and every
/// device of the host would be open to the container from then on. On v2 systemd attaches a
/// program of its own beside the one sprout attaches; a device is usable only if both allow it.
///
/// systemd has no deny rules, so the list is each allow rule less the access of the later deny
/// rules that cover all of its devices: where a deny covers only part of an allow rule (one
/// device of a wildcard), the allow rule stays whole. The list allows at least what the rules
/// do (sprout's own filter, written after the unit starts, is exact) and exactly that for the
/// usual deny-all-then-allow lists. An allow-all that no deny takes back is
/// `DevicePolicy=auto` with no list. The order is runc's: an empty DeviceAllow first (it clears
/// a list), then DevicePolicy, then the list (the other order makes systemd ≥ 230 mark every
/// unit NeedDaemonReload).
fn devices(_: &mut Sd, res: &LinuxResources, p: &mut Vec<Value>) -> Result<()> {
    let Some(list) = res.devices().as_deref() else {
        return Ok(());
    };
    let rules = crate::ebpf::parse_rules(list)?;
    let allowed = device_allow_list(&rules);
    let entries = |v: Vec<(String, String)>| {
        Value::Array(
            "(ss)".into(),
            v.into_iter()
                .map(|(path, acc)| Value::Struct(vec![Value::str(path), Value::str(acc)]))
                .collect(),
        )
    };
    p.push(prop("DeviceAllow", entries(Vec::new())));
    match allowed {
        None => p.push(prop("DevicePolicy", Value::str("auto"))),
        Some(v) => {
            p.push(prop("DevicePolicy", Value::str("strict")));
            p.push(prop("DeviceAllow", entries(v)));
        }
    }
    Ok(())
}

/// The DeviceAllow entries (`path`, "rwm" subset) for `rules` (see [`devices`]); `None`: every
/// device is allowed (an allow-all rule that no later deny-all takes back).
pub(crate) fn device_allow_list(rules: &[crate::ebpf::Rule]) -> Option<Vec<(String, String)>> {
    use crate::ebpf::{ACC_MKNOD, ACC_READ, ACC_WRITE, DEV_BLOCK, DEV_CHAR};
    const ALL: u32 = ACC_MKNOD | ACC_READ | ACC_WRITE;
    // A deny rule `d` covers an allow rule `a` when every device `a` names is one `d` names.
    let covers = |d: &crate::ebpf::Rule, a: &crate::ebpf::Rule| {
        (d.typ.is_none() || d.typ == a.typ)
            && (d.major.is_none() || d.major == a.major)
            && (d.minor.is_none() || d.minor == a.minor)
    };
    let mut groups: Option<Vec<(u32, String)>> = None;
    let mut out = Vec::new();
    for (i, a) in rules.iter().enumerate().filter(|(_, r)| r.allow) {
        let access = rules[i + 1..]
            .iter()
            .filter(|d| !d.allow && covers(d, a))
            .fold(a.access, |acc, d| acc & !d.access);
        if access == 0 {
            continue;
        }
        if a.typ.is_none() && a.major.is_none() && a.minor.is_none() && access == ALL {
            return None;
        }
        let perms: String = [(ACC_READ, 'r'), (ACC_WRITE, 'w'), (ACC_MKNOD, 'm')]
            .iter()
            .filter(|(bit, _)| access & bit != 0)
            .map(|(_, c)| *c)
            .collect();
        let types = match a.typ {
            Some(t) => vec![t],
            None => vec![DEV_CHAR, DEV_BLOCK],
        };
        for t in types {
            let (prefix, dir) = if t == DEV_BLOCK {
                ("block-", "block")
            } else {
                ("char-", "char")
            };
            let path = match (a.major, a.minor) {
                (Some(maj), Some(min)) => format!("/dev/{dir}/{maj}:{min}"),
                // Every minor of a major: systemd ≥ 240 takes the number, older ones only the
                // group's name in /proc/devices (both name every major of that group).
                (Some(maj), None) => {
                    let g = groups.get_or_insert_with(proc_devices);
                    match g
                        .iter()
                        .find(|(m, name)| *m == maj && name.starts_with(prefix))
                    {
                        Some((_, name)) => name.clone(),
                        None => format!("{prefix}{maj}"),
                    }
                }
                // "*:n" has no systemd form: every device of the type (more than the rule).
                (None, _) => format!("{prefix}*"),
            };
            out.push((path, perms.clone()));
        }
    }
    Some(out)
}

/// /proc/devices as (major, "char-NAME" or "block-NAME").
fn proc_devices() -> Vec<(u32, String)> {
    let text = std::fs::read_to_string("/proc/devices").unwrap_or_default();
    let mut prefix = "char-";
    let mut out = Vec::new();
    for line in text.lines() {
        match line.trim() {
            "Character devices:" => prefix = "char-",
            "Block devices:" => prefix = "block-",
            l => {
                if let Some((maj, name)) = l.split_once(' ') {
                    if let Ok(m) = maj.parse::<u32>() {
                        out.push((m, format!("{prefix}{}", name.trim())));
                    }
                }
            }
        }
    }
    out
}

/// A cpuset list ("0-3,6") as systemd's CPU bitmask: bit n of byte n/8 is CPU (or node) n.
pub(crate) fn cpu_list_bits(list: &str) -> std::result::Result<Vec<u8>, String> {
    const MAX: u32 = 8192;
    let mut bits: Vec<u8> = Vec::new();
    for part in list.trim().split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let num = |x: &str| {
            x.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n < MAX)
                .ok_or_else(|| format!("{part:?} is not a CPU number or range"))
        };
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(format!("{part:?}: the range is reversed"));
        }
        for n in a..=b {
            let i = (n / 8) as usize;
            if bits.len() <= i {
                bits.resize(i + 1, 0);
            }
            bits[i] |= 1 << (n % 8);
        }
    }
    Ok(bits)
}
