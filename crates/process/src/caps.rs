//! Capabilities: name <-> number mapping, validation, and the privilege drop itself
//! (bounding set, identity change, capset, ambient raise).

use std::sync::atomic::{AtomicU32, Ordering};

use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities, User};

use crate::{identity, Error, Result};

/// Kernel capability names, indexed by capability number (CAP_CHOWN = 0 ... CAP_CHECKPOINT_RESTORE = 40).
static CAP_NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

const CAP_SETPCAP: u32 = 8;

/// Highest capability number this crate knows a name for.
pub const CAP_LAST_KNOWN: u32 = 40;

/// All capability names this crate knows ("CAP_CHOWN", ...), ordered by kernel number
/// (index == capability number). Not filtered by what the running kernel supports: see
/// [`last_cap`] for that.
pub fn all_cap_names() -> &'static [&'static str] {
    &CAP_NAMES
}

/// Capability number for a name: "CAP_SYS_ADMIN", "SYS_ADMIN", "cap_sys_admin" and "sys_admin"
/// are all accepted. `None` for unknown names.
pub fn cap_from_name(name: &str) -> Option<u32> {
    let bare = strip_cap_prefix(name.trim());
    if bare.is_empty() {
        return None;
    }
    CAP_NAMES
        .iter()
        .position(|n| n[4..].eq_ignore_ascii_case(bare))
        .map(|i| i as u32)
}

/// What a capability name in a config is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapNameKind {
    /// A capability this runtime knows (its number); it may still be above the running
    /// kernel's [`last_cap`].
    Known(u32),
    /// Shaped like a capability name ("CAP_" and letters, digits, '_') but unknown to this
    /// runtime: a capability of a newer kernel. runtime-spec >= 1.1: the runtime SHOULD NOT
    /// fail on it (runc 1.2+ and crun log a warning and go on).
    Unknown,
    /// Not a capability name at all ("", "sys admin", "CAP_"): refused.
    Invalid,
}

/// Classify a capability name from a config or `exec --cap` (case-insensitive, "CAP_"
/// optional, as [`cap_from_name`]).
pub fn classify_cap_name(name: &str) -> CapNameKind {
    if let Some(n) = cap_from_name(name) {
        return CapNameKind::Known(n);
    }
    let bare = strip_cap_prefix(name);
    let shaped = !bare.is_empty()
        && bare.len() <= 64
        && bare.starts_with(|c: char| c.is_ascii_alphabetic())
        && bare.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if shaped {
        CapNameKind::Unknown
    } else {
        CapNameKind::Invalid
    }
}

fn strip_cap_prefix(s: &str) -> &str {
    match s.get(..4) {
        Some(p) if p.eq_ignore_ascii_case("CAP_") => &s[4..],
        _ => s,
    }
}

/// Kernel name ("CAP_SYS_ADMIN") of a capability number, `None` above [`CAP_LAST_KNOWN`].
pub fn cap_name(n: u32) -> Option<&'static str> {
    CAP_NAMES.get(n as usize).copied()
}

fn name_or_number(n: u32) -> String {
    match cap_name(n) {
        Some(s) => s.to_string(),
        None => format!("capability {n}"),
    }
}

/// Kernel number of an oci-spec capability.
pub fn cap_number(c: Capability) -> u32 {
    use Capability::*;
    match c {
        Chown => 0,
        DacOverride => 1,
        DacReadSearch => 2,
        Fowner => 3,
        Fsetid => 4,
        Kill => 5,
        Setgid => 6,
        Setuid => 7,
        Setpcap => 8,
        LinuxImmutable => 9,
        NetBindService => 10,
        NetBroadcast => 11,
        NetAdmin => 12,
        NetRaw => 13,
        IpcLock => 14,
        IpcOwner => 15,
        SysModule => 16,
        SysRawio => 17,
        SysChroot => 18,
        SysPtrace => 19,
        SysPacct => 20,
        SysAdmin => 21,
        SysBoot => 22,
        SysNice => 23,
        SysResource => 24,
        SysTime => 25,
        SysTtyConfig => 26,
        Mknod => 27,
        Lease => 28,
        AuditWrite => 29,
        AuditControl => 30,
        Setfcap => 31,
        MacOverride => 32,
        MacAdmin => 33,
        Syslog => 34,
        WakeAlarm => 35,
        BlockSuspend => 36,
        AuditRead => 37,
        Perfmon => 38,
        Bpf => 39,
        CheckpointRestore => 40,
    }
}

static LAST_CAP: AtomicU32 = AtomicU32::new(u32::MAX);

fn capbset_read(cap: u32) -> libc::c_int {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAPBSET_READ,
            libc::c_ulong::from(cap),
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    }
}

/// Highest capability number the running kernel supports (what /proc/sys/kernel/cap_last_cap
/// says). Found by probing PR_CAPBSET_READ (EINVAL above the last capability), so it works
/// without /proc; cached after the first call.
pub fn last_cap() -> u32 {
    let cached = LAST_CAP.load(Ordering::Relaxed);
    if cached != u32::MAX {
        return cached;
    }
    let mut n = CAP_LAST_KNOWN;
    let last = if capbset_read(n) >= 0 {
        while n < 63 && capbset_read(n + 1) >= 0 {
            n += 1;
        }
        n
    } else {
        while n > 0 && capbset_read(n) < 0 {
            n -= 1;
        }
        n
    };
    LAST_CAP.store(last, Ordering::Relaxed);
    last
}

fn supported_mask() -> u64 {
    let l = last_cap();
    if l >= 63 {
        u64::MAX
    } else {
        (1u64 << (l + 1)) - 1
    }
}

/// The five capability sets as bit masks (bit n = capability n).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapMasks {
    pub bounding: u64,
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: u64,
}

fn set_mask(set: &Option<Capabilities>) -> u64 {
    set.as_ref().map_or(0, |s| {
        s.iter().fold(0u64, |m, c| m | 1u64 << cap_number(*c))
    })
}

impl CapMasks {
    /// Masks as listed in the config; `None` (no capabilities object) and absent sets are empty.
    pub fn from_spec(caps: Option<&LinuxCapabilities>) -> CapMasks {
        match caps {
            None => CapMasks::default(),
            Some(c) => CapMasks {
                bounding: set_mask(c.bounding()),
                effective: set_mask(c.effective()),
                permitted: set_mask(c.permitted()),
                inheritable: set_mask(c.inheritable()),
                ambient: set_mask(c.ambient()),
            },
        }
    }

    /// The same masks without the capabilities the running kernel does not know (ignored, as runc does).
    pub fn supported(self) -> CapMasks {
        let m = supported_mask();
        CapMasks {
            bounding: self.bounding & m,
            effective: self.effective & m,
            permitted: self.permitted & m,
            inheritable: self.inheritable & m,
            ambient: self.ambient & m,
        }
    }
}

fn first_bit(mask: u64) -> u32 {
    mask.trailing_zeros()
}

/// Names of requested capabilities the running kernel does not support (above cap_last_cap).
/// They are ignored when applying; the runtime should warn about them (runc does).
pub fn unsupported_caps(caps: &LinuxCapabilities) -> Vec<&'static str> {
    let m = CapMasks::from_spec(Some(caps));
    let all = m.bounding | m.effective | m.permitted | m.inheritable | m.ambient;
    let extra = all & !supported_mask();
    (0..=CAP_LAST_KNOWN)
        .filter(|n| extra & (1u64 << n) != 0)
        .filter_map(cap_name)
        .collect()
}

/// Checks that need nothing but the config (kernel-unsupported capabilities ignored):
/// effective must be within permitted, ambient within permitted and inheritable.
pub fn validate_capabilities(caps: Option<&LinuxCapabilities>) -> Result<()> {
    validate_masks(&CapMasks::from_spec(caps).supported())
}

fn validate_masks(m: &CapMasks) -> Result<()> {
    let bad = m.effective & !m.permitted;
    if bad != 0 {
        return Err(Error::invalid(format!(
            "process.capabilities.effective: {} is not in the permitted set",
            name_or_number(first_bit(bad))
        )));
    }
    // Ambient capabilities outside permitted ∩ inheritable cannot be raised. runc's own default
    // spec asks for them without inheritable ones (since CVE-2022-29162) and runc only warns, so
    // they are left out here too rather than failing the container (see `raisable_ambient`).
    Ok(())
}

// ---- capget / capset -------------------------------------------------------------------------

/// effective, permitted, inheritable of the calling thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapState {
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
}

/// capget(2) on the calling thread (version 3: both 32-bit halves).
pub fn capget() -> std::io::Result<CapState> {
    let c = rustix::thread::capabilities(None)?;
    Ok(CapState {
        effective: c.effective.bits(),
        permitted: c.permitted.bits(),
        inheritable: c.inheritable.bits(),
    })
}

/// capset(2) on the calling thread (version 3: both 32-bit halves).
pub fn capset(s: &CapState) -> std::io::Result<()> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    let sets = CapabilitySets {
        effective: CapabilitySet::from_bits_retain(s.effective),
        permitted: CapabilitySet::from_bits_retain(s.permitted),
        inheritable: CapabilitySet::from_bits_retain(s.inheritable),
    };
    rustix::thread::set_capabilities(None, sets)?;
    Ok(())
}

fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> libc::c_int {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(op, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) }
}

/// Current bounding set of the calling thread.
pub fn bounding_set() -> u64 {
    (0..=last_cap())
        .filter(|&n| capbset_read(n) == 1)
        .fold(0u64, |m, n| m | 1u64 << n)
}

/// Drop every capability not in `keep` from the bounding set (needs CAP_SETPCAP in effective).
/// Capabilities already absent are skipped, so this never fails for them.
pub fn drop_bounding(keep: u64) -> Result<()> {
    drop_bounding_from(bounding_set(), keep)
}

fn drop_bounding_from(current: u64, keep: u64) -> Result<()> {
    drop_bounding_bits(current, keep).map_err(|(n, errno)| Error::Sys {
        what: format!(
            "process.capabilities.bounding: dropping {} from the bounding set",
            name_or_number(n)
        ),
        source: std::io::Error::from_raw_os_error(errno),
    })
}

/// Drop each capability of `current` not in `keep`; the error is the capability and errno.
/// No allocation. `current` may be a superset of the bounding set ([`supported_mask`], when
/// it was not read: one PR_CAPBSET_READ per capability, ~41 syscalls on a start): dropping a
/// capability already absent succeeds with CAP_SETPCAP, and without it (EPERM) the set is
/// read for that capability alone, so an absent one is still no error.
fn drop_bounding_bits(current: u64, keep: u64) -> std::result::Result<(), (u32, i32)> {
    for n in 0..=last_cap() {
        if keep & (1u64 << n) != 0 || current & (1u64 << n) == 0 {
            continue;
        }
        if prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(n), 0) != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if errno == libc::EPERM && capbset_read(n) == 0 {
                continue;
            }
            return Err((n, errno));
        }
    }
    Ok(())
}

/// The step of [`drop_all_privileges`] that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropStep {
    /// Emptying the bounding set (the capability that could not be dropped).
    Bounding(u32),
    /// The identity change ([`identity::set_ids`]).
    Identity(identity::IdStep),
    NoNewPrivs,
}

/// The whole privilege drop of a process that keeps no capability (sprout-serve's
/// sandboxes): the bounding set emptied (as [`drop_bounding`], with CAP_SETPCAP still held),
/// then [`identity::set_ids`] (leaving uid 0 clears the permitted, effective and ambient sets;
/// without PR_SET_KEEPCAPS nothing survives), then no_new_privs. The pieces are the ones
/// [`finalize_privileges`] uses. No allocation, no lock, no /proc: for a child between a raw
/// clone of a multi-threaded process and exec. The error is the step and its errno (also
/// left in `errno`).
pub fn drop_all_privileges(
    uid: u32,
    gid: u32,
    groups: Option<&[libc::gid_t]>,
) -> std::result::Result<(), (DropStep, i32)> {
    drop_bounding_bits(supported_mask(), 0).map_err(|(n, e)| (DropStep::Bounding(n), e))?;
    identity::set_ids(uid, gid, groups).map_err(|(s, e)| (DropStep::Identity(s), e))?;
    if prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0) != 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err((DropStep::NoNewPrivs, errno));
    }
    Ok(())
}

/// Clear the ambient set, then raise each capability in `ambient`.
pub fn set_ambient(ambient: u64) -> Result<()> {
    if prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
    ) != 0
    {
        let err = std::io::Error::last_os_error();
        // Kernels before 4.3 have no ambient set: fine as long as none is asked for.
        if ambient != 0 || err.raw_os_error() != Some(libc::EINVAL) {
            return Err(Error::Sys {
                what: "process.capabilities.ambient: clearing the ambient set".into(),
                source: err,
            });
        }
        return Ok(());
    }
    for n in 0..=last_cap() {
        if ambient & (1u64 << n) == 0 {
            continue;
        }
        if prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            libc::c_ulong::from(n),
        ) != 0
        {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EPERM) {
                return Err(Error::invalid(format!(
                    "process.capabilities.ambient: {} is not in the permitted and inheritable sets",
                    name_or_number(n)
                )));
            }
            return Err(Error::Sys {
                what: format!(
                    "process.capabilities.ambient: raising {}",
                    name_or_number(n)
                ),
                source: err,
            });
        }
    }
    Ok(())
}

fn set_keepcaps(on: bool) -> Result<()> {
    if prctl(libc::PR_SET_KEEPCAPS, libc::c_ulong::from(on), 0) != 0 {
        return Err(Error::last_os(format!(
            "process.user: prctl(PR_SET_KEEPCAPS, {})",
            u8::from(on)
        )));
    }
    Ok(())
}

/// Everything the kernel's capset(2) would refuse, checked up front against the calling
/// thread's current state so the error names the field and capability.
/// `inh_capped`: whether CAP_SETPCAP will be missing from the effective set at capset time
/// (then the kernel also requires new inheritable within old inheritable | old permitted).
fn precheck(m: &CapMasks, cur: &CapState, cur_bounding: u64, inh_capped: bool) -> Result<()> {
    validate_masks(m)?;
    let bad = m.permitted & !cur.permitted;
    if bad != 0 {
        return Err(Error::invalid(format!(
            "process.capabilities.permitted: {} cannot be granted: the runtime does not hold it",
            name_or_number(first_bit(bad))
        )));
    }
    // capset: new inheritable must be within old inheritable | bounding (after our drop)
    // and within old inheritable | old permitted.
    let final_bounding = cur_bounding & m.bounding;
    let bad = m.inheritable & !(cur.inheritable | final_bounding);
    if bad != 0 {
        return Err(Error::invalid(format!(
            "process.capabilities.inheritable: {} is not in the bounding set",
            name_or_number(first_bit(bad))
        )));
    }
    let bad = m.inheritable & !(cur.inheritable | cur.permitted);
    if inh_capped && bad != 0 {
        return Err(Error::invalid(format!(
            "process.capabilities.inheritable: {} cannot be granted: the runtime does not hold it",
            name_or_number(first_bit(bad))
        )));
    }
    Ok(())
}

/// See [`crate::finalize_privileges`].
pub fn finalize_privileges(user: &User, caps: Option<&LinuxCapabilities>) -> Result<()> {
    let m = CapMasks::from_spec(caps).supported();
    let cur = capget().map_err(|e| Error::Sys {
        what: "process.capabilities: capget".into(),
        source: e,
    })?;
    // The bounding set matters to the checks only for inheritable capabilities the process
    // does not have yet; otherwise it is not read (see `drop_bounding_bits`).
    let cur_bounding = if m.inheritable & !cur.inheritable != 0 {
        bounding_set()
    } else {
        supported_mask()
    };
    // The effective set at capset time, after setresuid (capabilities(7), "Effect of user ID
    // changes on capabilities"): leaving euid 0 clears it, reaching euid 0 sets it to permitted.
    let euid = rustix::process::geteuid();
    let eff_at_capset = match (euid.is_root(), user.uid() == 0) {
        (true, false) => 0,
        (false, true) => cur.permitted,
        _ => cur.effective,
    };
    precheck(
        &m,
        &cur,
        cur_bounding,
        eff_at_capset & (1 << CAP_SETPCAP) == 0,
    )?;
    let setgroups_allowed = identity::precheck(user)?;

    // The bounding drop needs CAP_SETPCAP, which the identity change may take away.
    drop_bounding_from(cur_bounding, m.bounding)?;

    set_keepcaps(true)?;
    identity::apply(user, setgroups_allowed)?;
    set_keepcaps(false)?;
    identity::set_umask(user);

    let want = CapState {
        effective: m.effective,
        permitted: m.permitted,
        inheritable: m.inheritable,
    };
    capset(&want).map_err(|e| Error::Sys {
        what: "process.capabilities: capset".into(),
        source: e,
    })?;

    set_ambient(raisable_ambient(&m))
}

/// The ambient capabilities the kernel will let us raise: those also permitted and inheritable.
fn raisable_ambient(m: &CapMasks) -> u64 {
    m.ambient & m.permitted & m.inheritable
}

/// The ambient capabilities of `caps` (those the kernel supports) that cannot be raised because
/// they are not also permitted and inheritable, by name: the container starts without them and
/// the caller warns, as runc does ("can't raise ambient capability CAP_X"). Empty when the
/// inheritable set is: that is the config every generator wrote before CVE-2022-29162 (ambient
/// capabilities without inheritable ones, which can never be raised), and runc 1.5's own
/// default has no ambient set; a warning on every such start would say nothing.
pub fn unraisable_ambient(caps: &LinuxCapabilities) -> Vec<String> {
    let m = CapMasks::from_spec(Some(caps)).supported();
    if m.inheritable == 0 {
        return Vec::new();
    }
    let left = m.ambient & !raisable_ambient(&m);
    (0..64)
        .filter(|n| left & (1u64 << n) != 0)
        .map(name_or_number)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use oci_spec::runtime::{LinuxCapabilitiesBuilder, UserBuilder};

    /// A builder with all five sets empty (the builder's own default is the 3-cap runc default).
    fn empty_caps() -> LinuxCapabilitiesBuilder {
        LinuxCapabilitiesBuilder::default()
            .bounding(set(&[]))
            .effective(set(&[]))
            .permitted(set(&[]))
            .inheritable(set(&[]))
            .ambient(set(&[]))
    }

    fn set(caps: &[Capability]) -> Capabilities {
        caps.iter().copied().collect()
    }

    #[test]
    fn classify_names() {
        assert_eq!(classify_cap_name("CAP_CHOWN"), CapNameKind::Known(0));
        assert_eq!(classify_cap_name("sys_admin"), CapNameKind::Known(21));
        assert_eq!(classify_cap_name("CAP_UNKNOWN"), CapNameKind::Unknown);
        assert_eq!(classify_cap_name("cap_future_thing2"), CapNameKind::Unknown);
        for bad in ["", "CAP_", "sys admin", "CAP_1X", "CAP_X-Y", "CAP_X\n"] {
            assert_eq!(classify_cap_name(bad), CapNameKind::Invalid, "{bad:?}");
        }
    }

    #[test]
    fn names_and_numbers() {
        assert_eq!(all_cap_names().len(), 41);
        assert_eq!(all_cap_names()[0], "CAP_CHOWN");
        assert_eq!(all_cap_names()[40], "CAP_CHECKPOINT_RESTORE");
        for (i, n) in all_cap_names().iter().enumerate() {
            assert_eq!(cap_from_name(n), Some(i as u32), "{n}");
            assert_eq!(cap_from_name(&n[4..]), Some(i as u32), "{n}");
            assert_eq!(cap_from_name(&n.to_lowercase()), Some(i as u32), "{n}");
            assert_eq!(cap_name(i as u32), Some(*n));
        }
        assert_eq!(cap_from_name("sys_admin"), Some(21));
        assert_eq!(cap_from_name("Cap_Net_Raw"), Some(13));
        assert_eq!(cap_from_name("CAP_"), None);
        assert_eq!(cap_from_name(""), None);
        assert_eq!(cap_from_name("CAP_FOO"), None);
        assert_eq!(cap_from_name("CAP_CAP_CHOWN"), None);
        assert_eq!(cap_name(41), None);
    }

    #[test]
    fn oci_enum_matches_names() {
        // Every oci-spec Capability, parsed from its kernel name, maps to the same number.
        for (i, n) in all_cap_names().iter().enumerate() {
            let c: Capability = n[4..].parse().unwrap();
            assert_eq!(cap_number(c), i as u32, "{n}");
        }
    }

    #[test]
    fn last_cap_matches_proc() {
        let s = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").unwrap();
        assert_eq!(last_cap(), s.trim().parse::<u32>().unwrap());
    }

    #[test]
    fn masks_from_spec() {
        assert_eq!(CapMasks::from_spec(None), CapMasks::default());
        let c = empty_caps()
            .bounding(set(&[Capability::Chown, Capability::Kill]))
            .effective(set(&[Capability::Kill]))
            .build()
            .unwrap();
        let m = CapMasks::from_spec(Some(&c));
        assert_eq!(m.bounding, 1 | 1 << 5);
        assert_eq!(m.effective, 1 << 5);
        assert_eq!(m.permitted, 0);
        assert_eq!(m.inheritable, 0);
        assert_eq!(m.ambient, 0);
    }

    #[test]
    fn precheck_mirrors_capset_rules() {
        let all = (1u64 << 41) - 1;
        let masks = |b: u64, e: u64, p: u64, i: u64, a: u64| CapMasks {
            bounding: b,
            effective: e,
            permitted: p,
            inheritable: i,
            ambient: a,
        };
        let full = CapState {
            effective: all,
            permitted: all,
            inheritable: 0,
        };
        precheck(&masks(all, all, all, all, all), &full, all, true).unwrap();
        // Permitted beyond what the runtime holds.
        let lacking = CapState {
            effective: all & !(1 << 24),
            permitted: all & !(1 << 24),
            inheritable: 0,
        };
        assert_eq!(
            precheck(&masks(all, 0, 1 << 24, 0, 0), &lacking, all, true).unwrap_err().to_string(),
            "process.capabilities.permitted: CAP_SYS_RESOURCE cannot be granted: the runtime does not hold it"
        );
        // Inheritable outside the (new) bounding set, unless already inheritable.
        assert_eq!(
            precheck(&masks(KILL, 0, 0, CHOWN, 0), &full, all, true)
                .unwrap_err()
                .to_string(),
            "process.capabilities.inheritable: CAP_CHOWN is not in the bounding set"
        );
        let inh = CapState {
            inheritable: CHOWN,
            ..full
        };
        precheck(&masks(KILL, 0, 0, CHOWN, 0), &inh, all, true).unwrap();
        // Inheritable beyond old inheritable | permitted: refused only without CAP_SETPCAP.
        let noperm = CapState {
            effective: 0,
            permitted: KILL,
            inheritable: 0,
        };
        assert_eq!(
            precheck(&masks(all, 0, 0, CHOWN, 0), &noperm, all, true).unwrap_err().to_string(),
            "process.capabilities.inheritable: CAP_CHOWN cannot be granted: the runtime does not hold it"
        );
        precheck(&masks(all, 0, 0, CHOWN, 0), &noperm, all, false).unwrap();
    }

    #[test]
    fn validation_errors() {
        let c = empty_caps()
            .effective(set(&[Capability::SysAdmin]))
            .permitted(set(&[]))
            .build()
            .unwrap();
        let e = validate_capabilities(Some(&c)).unwrap_err().to_string();
        assert_eq!(
            e,
            "process.capabilities.effective: CAP_SYS_ADMIN is not in the permitted set"
        );

        let c = empty_caps()
            .effective(set(&[]))
            .permitted(set(&[Capability::SysAdmin]))
            .inheritable(set(&[]))
            .ambient(set(&[Capability::SysAdmin]))
            .build()
            .unwrap();
        // Not an error (runc compatibility): the cap is left out of the ambient set at raise time.
        validate_capabilities(Some(&c)).unwrap();

        validate_capabilities(None).unwrap();
        validate_capabilities(Some(&LinuxCapabilities::default())).unwrap();
        assert!(unsupported_caps(&LinuxCapabilities::default()).is_empty());
    }

    fn status_mask(status: &str, key: &str) -> u64 {
        u64::from_str_radix(&status_field(status, key), 16).unwrap()
    }

    const CHOWN: u64 = 1 << 0;
    const KILL: u64 = 1 << 5;
    const SETGID: u64 = 1 << 6;
    const SETUID: u64 = 1 << 7;
    const NET_BIND: u64 = 1 << 10;
    const NET_RAW: u64 = 1 << 13;
    const AUDIT_WRITE: u64 = 1 << 29;

    /// sprout-serve's sandbox drop: nothing left in any set, the ids and no groups, nnp on.
    #[test]
    fn drop_all_privileges_leaves_nothing() {
        in_child(|| {
            drop_all_privileges(65534, 65533, Some(&[]))
                .map_err(|e| format!("drop_all_privileges: {e:?}"))?;
            let st = proc_status();
            for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
                check_eq(key, status_mask(&st, key), 0)?;
            }
            check_eq(
                "Uid",
                status_field(&st, "Uid"),
                "65534\t65534\t65534\t65534".into(),
            )?;
            check_eq(
                "Gid",
                status_field(&st, "Gid"),
                "65533\t65533\t65533\t65533".into(),
            )?;
            check_eq("Groups", status_field(&st, "Groups"), String::new())?;
            check_eq("NoNewPrivs", status_field(&st, "NoNewPrivs"), "1".into())?;
            Ok(())
        });
    }

    /// A step that fails is named, with its errno: without CAP_SETGID (dropped from the
    /// effective set first) setresgid is refused with EPERM, and no_new_privs is not set.
    #[test]
    fn drop_all_privileges_names_the_failed_step() {
        in_child(|| {
            let mut st = capget().map_err(|e| e.to_string())?;
            st.effective &= !(SETGID | 1 << CAP_SETPCAP);
            capset(&st).map_err(|e| e.to_string())?;
            // Without CAP_SETPCAP the bounding drop is the step that fails.
            match drop_all_privileges(65534, 65534, None) {
                Err((DropStep::Bounding(_), libc::EPERM)) => {}
                other => return Err(format!("without CAP_SETPCAP: {other:?}")),
            }
            st.effective |= 1 << CAP_SETPCAP;
            capset(&st).map_err(|e| e.to_string())?;
            match drop_all_privileges(65534, 65534, None) {
                Err((DropStep::Identity(identity::IdStep::Setresgid), libc::EPERM)) => {}
                other => return Err(format!("without CAP_SETGID: {other:?}")),
            }
            check_eq(
                "NoNewPrivs",
                status_field(&proc_status(), "NoNewPrivs"),
                "0".into(),
            )
        });
    }

    #[test]
    fn finalize_root_default_caps() {
        // The `runc spec` default: root, three capabilities everywhere.
        in_child(|| {
            let user = UserBuilder::default().uid(0u32).gid(0u32).build().unwrap();
            let caps = LinuxCapabilities::default();
            finalize_privileges(&user, Some(&caps)).map_err(|e| e.to_string())?;
            let st = proc_status();
            let want = KILL | NET_BIND | AUDIT_WRITE;
            for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
                check_eq(key, status_mask(&st, key), want)?;
            }
            check_eq("umask", current_umask(), 0o022)?;
            Ok(())
        });
    }

    #[test]
    fn finalize_none_drops_everything() {
        in_child(|| {
            let user = UserBuilder::default()
                .uid(0u32)
                .gid(0u32)
                .umask(0o077u32)
                .build()
                .unwrap();
            finalize_privileges(&user, None).map_err(|e| e.to_string())?;
            let st = proc_status();
            for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
                check_eq(key, status_mask(&st, key), 0)?;
            }
            check_eq("umask", current_umask(), 0o077)?;
            Ok(())
        });
    }

    #[test]
    fn finalize_non_root_with_ambient_and_groups() {
        in_child(|| {
            let user = UserBuilder::default()
                .uid(1000u32)
                .gid(1001u32)
                .additional_gids(vec![5u32, 1002, 7])
                .umask(0o027u32)
                .build()
                .unwrap();
            let c = set(&[
                Capability::NetBindService,
                Capability::NetRaw,
                Capability::Chown,
            ]);
            let caps = empty_caps()
                .bounding(c.clone())
                .effective(set(&[Capability::NetBindService, Capability::Chown]))
                .permitted(c.clone())
                .inheritable(set(&[Capability::NetBindService, Capability::NetRaw]))
                .ambient(set(&[Capability::NetBindService]))
                .build()
                .unwrap();
            finalize_privileges(&user, Some(&caps)).map_err(|e| e.to_string())?;
            let st = proc_status();
            check_eq(
                "CapBnd",
                status_mask(&st, "CapBnd"),
                NET_BIND | NET_RAW | CHOWN,
            )?;
            check_eq(
                "CapPrm",
                status_mask(&st, "CapPrm"),
                NET_BIND | NET_RAW | CHOWN,
            )?;
            check_eq("CapEff", status_mask(&st, "CapEff"), NET_BIND | CHOWN)?;
            check_eq("CapInh", status_mask(&st, "CapInh"), NET_BIND | NET_RAW)?;
            check_eq("CapAmb", status_mask(&st, "CapAmb"), NET_BIND)?;
            check_eq(
                "Uid",
                status_field(&st, "Uid"),
                "1000\t1000\t1000\t1000".to_string(),
            )?;
            check_eq(
                "Gid",
                status_field(&st, "Gid"),
                "1001\t1001\t1001\t1001".to_string(),
            )?;
            check_eq(
                "Groups",
                status_field(&st, "Groups"),
                "5 7 1002".to_string(),
            )?;
            check_eq("umask", current_umask(), 0o027)?;
            Ok(())
        });
    }

    #[test]
    fn finalize_non_root_no_caps() {
        in_child(|| {
            let user = UserBuilder::default()
                .uid(65534u32)
                .gid(65534u32)
                .build()
                .unwrap();
            let caps = empty_caps()
                .bounding(set(&[Capability::Kill]))
                .effective(set(&[]))
                .permitted(set(&[]))
                .inheritable(set(&[]))
                .ambient(set(&[]))
                .build()
                .unwrap();
            finalize_privileges(&user, Some(&caps)).map_err(|e| e.to_string())?;
            let st = proc_status();
            check_eq("CapBnd", status_mask(&st, "CapBnd"), KILL)?;
            for key in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
                check_eq(key, status_mask(&st, key), 0)?;
            }
            check_eq(
                "Uid",
                status_field(&st, "Uid"),
                "65534\t65534\t65534\t65534".to_string(),
            )?;
            // No additionalGids: the supplementary groups are cleared.
            check_eq("Groups", status_field(&st, "Groups"), String::new())?;
            Ok(())
        });
    }

    #[test]
    fn empty_inheritable_is_not_inherited_cve_2022_29162() {
        in_child(|| {
            // The runtime itself carries inheritable capabilities.
            let mut s = capget().map_err(|e| e.to_string())?;
            s.inheritable = s.permitted;
            capset(&s).map_err(|e| e.to_string())?;
            check_eq(
                "parent CapInh",
                status_mask(&proc_status(), "CapInh"),
                s.permitted,
            )?;

            let user = UserBuilder::default().uid(0u32).gid(0u32).build().unwrap();
            let caps = empty_caps()
                .bounding(set(&[Capability::Kill, Capability::Setuid]))
                .effective(set(&[Capability::Kill]))
                .permitted(set(&[Capability::Kill]))
                .inheritable(set(&[]))
                .build()
                .unwrap();
            finalize_privileges(&user, Some(&caps)).map_err(|e| e.to_string())?;
            let st = proc_status();
            check_eq("CapInh", status_mask(&st, "CapInh"), 0)?;
            check_eq("CapAmb", status_mask(&st, "CapAmb"), 0)?;
            check_eq("CapPrm", status_mask(&st, "CapPrm"), KILL)?;
            check_eq("CapBnd", status_mask(&st, "CapBnd"), KILL | SETUID)?;
            Ok(())
        });
    }

    #[test]
    fn ambient_not_inheritable_is_left_out_like_runc() {
        // runc's default spec lists ambient caps without inheritable ones; runc warns and goes on.
        in_child(|| {
            let user = UserBuilder::default().uid(0u32).gid(0u32).build().unwrap();
            let caps = empty_caps()
                .bounding(set(&[Capability::SysAdmin]))
                .permitted(set(&[Capability::SysAdmin]))
                .effective(set(&[Capability::SysAdmin]))
                .ambient(set(&[Capability::SysAdmin]))
                .build()
                .unwrap();
            finalize_privileges(&user, Some(&caps)).map_err(|e| e.to_string())?;
            let st = proc_status();
            check_eq("CapAmb", status_mask(&st, "CapAmb"), 0)?;
            check_eq("CapPrm", status_mask(&st, "CapPrm"), 1 << 21)?;
            check_eq("CapInh", status_mask(&st, "CapInh"), 0)?;
            Ok(())
        });
    }

    #[test]
    fn ambient_raise_eperm_is_reported_with_field() {
        in_child(|| {
            // Bypass the precheck to exercise the kernel path.
            let mut s = capget().map_err(|e| e.to_string())?;
            s.inheritable = 0;
            capset(&s).map_err(|e| e.to_string())?;
            let e = set_ambient(1 << 21).unwrap_err().to_string();
            check_eq(
                "error",
                e,
                "process.capabilities.ambient: CAP_SYS_ADMIN is not in the permitted and inheritable sets".to_string(),
            )
        });
    }

    #[test]
    fn permitted_cap_the_runtime_lacks_is_an_error() {
        in_child(|| {
            // Simulate a runtime without CAP_NET_RAW (this host may also lack CAP_SYS_RESOURCE).
            let mut s = capget().map_err(|e| e.to_string())?;
            s.permitted &= !NET_RAW;
            s.effective &= !NET_RAW;
            capset(&s).map_err(|e| e.to_string())?;
            let user = UserBuilder::default().uid(0u32).gid(0u32).build().unwrap();
            let caps = empty_caps()
                .bounding(set(&[Capability::NetRaw]))
                .permitted(set(&[Capability::NetRaw]))
                .effective(set(&[Capability::NetRaw]))
                .build()
                .unwrap();
            let e = finalize_privileges(&user, Some(&caps))
                .unwrap_err()
                .to_string();
            check_eq(
                "error",
                e,
                "process.capabilities.permitted: CAP_NET_RAW cannot be granted: the runtime does not hold it".to_string(),
            )
        });
    }

    #[test]
    fn inheritable_outside_bounding_is_an_error() {
        in_child(|| {
            let user = UserBuilder::default().uid(0u32).gid(0u32).build().unwrap();
            let caps = empty_caps()
                .bounding(set(&[Capability::Kill]))
                .permitted(set(&[Capability::Kill, Capability::Chown]))
                .inheritable(set(&[Capability::Chown]))
                .build()
                .unwrap();
            let e = finalize_privileges(&user, Some(&caps))
                .unwrap_err()
                .to_string();
            check_eq(
                "error",
                e,
                "process.capabilities.inheritable: CAP_CHOWN is not in the bounding set"
                    .to_string(),
            )
        });
    }

    #[test]
    fn setgid_dropped_from_bounding_still_allows_identity_change() {
        // Bounding is dropped before setresgid/setresuid: only the effective set matters there.
        in_child(|| {
            let user = UserBuilder::default()
                .uid(1234u32)
                .gid(1234u32)
                .build()
                .unwrap();
            let caps = empty_caps()
                .bounding(set(&[Capability::Kill]))
                .permitted(set(&[Capability::Kill, Capability::Setgid]))
                .effective(set(&[Capability::Kill]))
                .build()
                .unwrap();
            finalize_privileges(&user, Some(&caps)).map_err(|e| e.to_string())?;
            let st = proc_status();
            check_eq("CapPrm", status_mask(&st, "CapPrm"), KILL | SETGID)?;
            check_eq("CapEff", status_mask(&st, "CapEff"), KILL)?;
            check_eq(
                "Gid",
                status_field(&st, "Gid"),
                "1234\t1234\t1234\t1234".to_string(),
            )?;
            Ok(())
        });
    }
}
