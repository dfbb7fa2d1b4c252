//! Compiling an OCI seccomp profile to classic BPF with libseccomp (the slow path: a cache miss).
//!
//! Semantics follow runc: unknown syscall names are ignored, rules whose action equals the
//! default action are skipped, several conditions on the same argument index are split into one
//! rule per condition (libseccomp refuses them in one rule; runc ORs them this way), `errnoRet`
//! defaults to EPERM for SCMP_ACT_ERRNO and SCMP_ACT_TRACE, SECCOMP_FILTER_FLAG_TSYNC is accepted
//! and ignored (the filter is loaded by a single-threaded process).

use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::OnceLock;

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompFilterFlag, LinuxSeccompOperator,
};

use crate::{Error, Result};

/// `seccomp(2)` filter flags (linux/seccomp.h).
pub const SECCOMP_FILTER_FLAG_TSYNC: u32 = 1 << 0;
pub const SECCOMP_FILTER_FLAG_LOG: u32 = 1 << 1;
pub const SECCOMP_FILTER_FLAG_SPEC_ALLOW: u32 = 1 << 2;
pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 1 << 3;
pub const SECCOMP_FILTER_FLAG_TSYNC_ESRCH: u32 = 1 << 4;
pub const SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV: u32 = 1 << 5;

/// The flags `load` may pass; anything else in a cache entry makes it invalid.
pub(crate) const KNOWN_FLAGS: u32 = SECCOMP_FILTER_FLAG_LOG
    | SECCOMP_FILTER_FLAG_SPEC_ALLOW
    | SECCOMP_FILTER_FLAG_NEW_LISTENER
    | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;

/// The kernel's limit on the number of instructions of one filter (BPF_MAXINSNS).
pub const BPF_MAXINSNS: usize = 4096;

/// A compiled filter: the BPF program and the `seccomp(2)` flags to load it with.
pub struct Compiled {
    pub filter: Box<[libc::sock_filter]>,
    pub flags: u32,
    pub listener: bool,
}

/// The libseccomp version linked in (queried at run time, once per process).
pub fn libseccomp_version() -> (u32, u32, u32) {
    static V: OnceLock<(u32, u32, u32)> = OnceLock::new();
    *V.get_or_init(|| match libseccomp::ScmpVersion::current() {
        Ok(v) => (v.major, v.minor, v.micro),
        Err(_) => (0, 0, 0),
    })
}

fn uses_notify(profile: &LinuxSeccomp) -> bool {
    profile.default_action() == LinuxSeccompAction::ScmpActNotify
        || profile.syscalls().as_ref().is_some_and(|r| {
            r.iter()
                .any(|r| r.action() == LinuxSeccompAction::ScmpActNotify)
        })
}

/// runc's two refusals: NOTIFY as the default action, or for `write` (the init runs under the
/// filter before it has handed the listener on, so a notification nobody can answer yet would
/// block it: runc writes the fd number to its parent; both would hang the create).
fn check_notify(profile: &LinuxSeccomp) -> Result<()> {
    if profile.default_action() == LinuxSeccompAction::ScmpActNotify {
        return Err(Error::Invalid(
            "linux.seccomp.defaultAction: SCMP_ACT_NOTIFY cannot be used as default action".into(),
        ));
    }
    for (i, r) in profile.syscalls().iter().flatten().enumerate() {
        if r.action() == LinuxSeccompAction::ScmpActNotify && r.names().iter().any(|n| n == "write")
        {
            return Err(Error::Invalid(format!(
                "linux.seccomp.syscalls[{i}]: SCMP_ACT_NOTIFY cannot be used for the write syscall"
            )));
        }
    }
    Ok(())
}

/// The `seccomp(2)` flags for `profile` and whether it needs a listener fd. Also validates what
/// can be validated without libseccomp (so a cache hit checks it too).
pub fn filter_flags(profile: &LinuxSeccomp) -> Result<(u32, bool)> {
    let mut flags = 0;
    if let Some(fs) = profile.flags() {
        for f in fs {
            flags |= match f {
                LinuxSeccompFilterFlag::SeccompFilterFlagLog => SECCOMP_FILTER_FLAG_LOG,
                LinuxSeccompFilterFlag::SeccompFilterFlagSpecAllow => {
                    SECCOMP_FILTER_FLAG_SPEC_ALLOW
                }
                LinuxSeccompFilterFlag::SeccompFilterFlagWaitKillableRecv => {
                    SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
                }
                // Ignored as runc does: the filter is loaded by a single-threaded process.
                LinuxSeccompFilterFlag::SeccompFilterFlagTsync => 0,
            };
        }
    }
    check_notify(profile)?;
    let listener = uses_notify(profile);
    if listener {
        if profile.listener_path().is_none() {
            return Err(Error::Invalid(
                "SCMP_ACT_NOTIFY used but linux.seccomp.listenerPath is not set".into(),
            ));
        }
        flags |= SECCOMP_FILTER_FLAG_NEW_LISTENER;
    } else {
        // The kernel refuses WAIT_KILLABLE_RECV without NEW_LISTENER (EINVAL); it only changes
        // how notifications are waited for, so without NOTIFY it is meaningless: drop it.
        flags &= !SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    }
    Ok((flags, listener))
}

fn errno_of(what: &str, v: Option<u32>) -> Result<u16> {
    match v {
        None => Ok(libc::EPERM as u16),
        Some(v) if v <= u32::from(u16::MAX) => Ok(v as u16),
        Some(v) => Err(Error::Invalid(format!(
            "{what} errnoRet {v} out of range (0..=65535)"
        ))),
    }
}

fn action(a: LinuxSeccompAction, errno_ret: Option<u32>, what: &str) -> Result<ScmpAction> {
    Ok(match a {
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            ScmpAction::KillThread
        }
        LinuxSeccompAction::ScmpActKillProcess => ScmpAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => ScmpAction::Trap,
        LinuxSeccompAction::ScmpActErrno => {
            ScmpAction::Errno(i32::from(errno_of(what, errno_ret)?))
        }
        LinuxSeccompAction::ScmpActTrace => ScmpAction::Trace(errno_of(what, errno_ret)?),
        LinuxSeccompAction::ScmpActNotify => ScmpAction::Notify,
        LinuxSeccompAction::ScmpActLog => ScmpAction::Log,
        LinuxSeccompAction::ScmpActAllow => ScmpAction::Allow,
    })
}

pub(crate) fn arch(a: Arch) -> ScmpArch {
    match a {
        Arch::ScmpArchNative => ScmpArch::Native,
        Arch::ScmpArchX86 => ScmpArch::X86,
        Arch::ScmpArchX86_64 => ScmpArch::X8664,
        Arch::ScmpArchX32 => ScmpArch::X32,
        Arch::ScmpArchArm => ScmpArch::Arm,
        Arch::ScmpArchAarch64 => ScmpArch::Aarch64,
        Arch::ScmpArchMips => ScmpArch::Mips,
        Arch::ScmpArchMips64 => ScmpArch::Mips64,
        Arch::ScmpArchMips64n32 => ScmpArch::Mips64N32,
        Arch::ScmpArchMipsel => ScmpArch::Mipsel,
        Arch::ScmpArchMipsel64 => ScmpArch::Mipsel64,
        Arch::ScmpArchMipsel64n32 => ScmpArch::Mipsel64N32,
        Arch::ScmpArchPpc => ScmpArch::Ppc,
        Arch::ScmpArchPpc64 => ScmpArch::Ppc64,
        Arch::ScmpArchPpc64le => ScmpArch::Ppc64Le,
        Arch::ScmpArchS390 => ScmpArch::S390,
        Arch::ScmpArchS390x => ScmpArch::S390X,
        Arch::ScmpArchParisc => ScmpArch::Parisc,
        Arch::ScmpArchParisc64 => ScmpArch::Parisc64,
        Arch::ScmpArchRiscv64 => ScmpArch::Riscv64,
        Arch::ScmpArchLoongarch64 => ScmpArch::Loongarch64,
        Arch::ScmpArchM68k => ScmpArch::M68k,
        Arch::ScmpArchSh => ScmpArch::Sh,
        Arch::ScmpArchSheb => ScmpArch::Sheb,
    }
}

fn op(o: LinuxSeccompOperator, value: u64) -> ScmpCompareOp {
    match o {
        LinuxSeccompOperator::ScmpCmpNe => ScmpCompareOp::NotEqual,
        LinuxSeccompOperator::ScmpCmpLt => ScmpCompareOp::Less,
        LinuxSeccompOperator::ScmpCmpLe => ScmpCompareOp::LessOrEqual,
        LinuxSeccompOperator::ScmpCmpEq => ScmpCompareOp::Equal,
        LinuxSeccompOperator::ScmpCmpGe => ScmpCompareOp::GreaterEqual,
        LinuxSeccompOperator::ScmpCmpGt => ScmpCompareOp::Greater,
        LinuxSeccompOperator::ScmpCmpMaskedEq => ScmpCompareOp::MaskedEqual(value),
    }
}

fn lerr(what: impl std::fmt::Display, e: libseccomp::error::SeccompError) -> Error {
    Error::Invalid(format!("{what}: {e}"))
}

/// Compiles `profile` with libseccomp (binary-tree layout, [`OPTIMIZE`]) and shortens the
/// result with [`crate::compact`]: the syscall-number dispatch becomes a binary search over
/// ranges of numbers with the same decision, and only the argument checks of libseccomp's
/// program are kept. The compacted program is checked against libseccomp's at compile time
/// and dropped for libseccomp's own if anything differs. In front of it goes runc's ENOSYS
/// stub ([`crate::enosys`]): syscall numbers newer than any the profile names get ENOSYS
/// instead of a refusing default action.
pub fn compile(profile: &LinuxSeccomp) -> Result<Compiled> {
    let full = compile_with(profile, OPTIMIZE)?;
    let program = crate::compact::compact(&full.filter).unwrap_or(full.filter);
    let stub = crate::enosys::stub(profile);
    if stub.len() + program.len() > BPF_MAXINSNS {
        return Err(Error::Invalid(format!(
            "linux.seccomp: filter of {} instructions exceeds the kernel's limit of {BPF_MAXINSNS}",
            stub.len() + program.len()
        )));
    }
    let filter = stub.into_iter().chain(program.iter().copied()).collect();
    Ok(Compiled { filter, ..full })
}

/// libseccomp's filter optimisation level (SCMP_FLTATR_CTL_OPTIMIZE) used by [`compile`]: 2, a
/// binary tree over syscall numbers instead of one long `if nr == N` chain.
///
/// Loading the filter is where a container start pays for its length: the kernel converts the
/// classic BPF to eBPF, JITs it, and precomputes its per-syscall action cache by emulating the
/// filter once for every syscall number of each architecture (`seccomp_cache_prepare`), which
/// walks the whole chain for the syscalls at its end. For podman's default profile (x86_64,
/// x86, x32) level 2 gives 1426 instructions instead of 1144, but `seccomp(2)` takes ~280 us
/// instead of ~750 us (`cargo run --release -p sprout-seccomp --example loadbench`), and every
/// syscall of the container is then decided in ~10 comparisons instead of up to ~430. [`compile`]
/// then shortens the tree further ([`crate::compact`]).
/// Part of the cache key (canon.rs): a different level is a different compiled form.
pub const OPTIMIZE: u32 = 2;

/// [`compile`] at an explicit SCMP_FLTATR_CTL_OPTIMIZE level (1: libseccomp's default linear
/// layout, 2: binary tree of syscall numbers; libseccomp >= 2.5). For measurements.
#[doc(hidden)]
pub fn compile_with(profile: &LinuxSeccomp, optimize: u32) -> Result<Compiled> {
    let (flags, listener) = filter_flags(profile)?;
    let filter = libseccomp_filter(profile, optimize)?;
    Ok(Compiled {
        filter,
        flags,
        listener,
    })
}

/// libseccomp's program for `profile`.
fn libseccomp_filter(profile: &LinuxSeccomp, optimize: u32) -> Result<Box<[libc::sock_filter]>> {
    let default = action(
        profile.default_action(),
        profile.default_errno_ret(),
        "default",
    )?;
    let mut ctx = ScmpFilterContext::new(default).map_err(|e| lerr("seccomp_init", e))?;
    if optimize != 1 {
        ctx.set_ctl_optimize(optimize)
            .map_err(|e| lerr("SCMP_FLTATR_CTL_OPTIMIZE", e))?;
    }

    if let Some(archs) = profile.architectures() {
        for a in archs {
            // An architecture this libseccomp cannot handle is left out of the filter, so its
            // syscalls get the bad-arch action (kill): never more permissive than asked.
            let _ = ctx.add_arch(arch(*a));
        }
    }

    let mut conds: Vec<ScmpArgCompare> = Vec::new();
    if let Some(rules) = profile.syscalls() {
        for (i, rule) in rules.iter().enumerate() {
            let act = action(rule.action(), rule.errno_ret(), &format!("syscalls[{i}]"))?;
            if act == default {
                // libseccomp refuses a rule whose action is the default one; it is a no-op anyway.
                continue;
            }
            conds.clear();
            let mut seen = 0u8;
            let mut same_index = false;
            for a in rule.args().iter().flatten() {
                if a.index() > 5 {
                    return Err(Error::Invalid(format!(
                        "syscalls[{i}]: argument index {} out of range (0..=5)",
                        a.index()
                    )));
                }
                let bit = 1u8 << a.index();
                same_index |= seen & bit != 0;
                seen |= bit;
                let (o, datum) = match a.op() {
                    // (arg & value) == valueTwo
                    LinuxSeccompOperator::ScmpCmpMaskedEq => {
                        (op(a.op(), a.value()), a.value_two().unwrap_or(0))
                    }
                    other => (op(other, a.value()), a.value()),
                };
                conds.push(ScmpArgCompare::new(a.index() as u32, o, datum));
            }
            for name in rule.names() {
                let Ok(nr) = ScmpSyscall::from_name(name) else {
                    // Unknown to this libseccomp: ignored, as runc does.
                    continue;
                };
                let res = if same_index {
                    // Conditions on the same argument are ORed: one rule per condition.
                    conds.iter().try_for_each(|c| {
                        ctx.add_rule_conditional(act, nr, std::slice::from_ref(c))
                            .map(|_| ())
                    })
                } else {
                    ctx.add_rule_conditional(act, nr, &conds).map(|_| ())
                };
                res.map_err(|e| lerr(format_args!("adding rule for {name}"), e))?;
            }
        }
    }

    export(&ctx)
}

fn export(ctx: &ScmpFilterContext) -> Result<Box<[libc::sock_filter]>> {
    // SAFETY: the name is a NUL-terminated C string literal with static lifetime; the
    // returned fd is checked and owned on the next lines.
    let fd = unsafe { libc::memfd_create(c"sprout-seccomp-bpf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: `fd` (>= 0) was just returned by memfd_create and nothing else owns or closes it.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    ctx.export_bpf(&file)
        .map_err(|e| lerr("seccomp_export_bpf", e))?;
    file.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::with_capacity(8192);
    file.read_to_end(&mut bytes)?;
    bytes_to_filter(&bytes).ok_or_else(|| {
        Error::Invalid(format!(
            "bad BPF program from libseccomp ({} bytes)",
            bytes.len()
        ))
    })
}

/// Native-endian `struct sock_filter` array from its raw bytes; None unless the length is a
/// non-zero multiple of 8 within the kernel's limit.
pub(crate) fn bytes_to_filter(bytes: &[u8]) -> Option<Box<[libc::sock_filter]>> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(8) || bytes.len() / 8 > BPF_MAXINSNS {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| libc::sock_filter {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect(),
    )
}

/// The raw bytes of a `struct sock_filter` array (8 bytes each, no padding).
pub(crate) fn filter_bytes(filter: &[libc::sock_filter]) -> &[u8] {
    const _: () = assert!(std::mem::size_of::<libc::sock_filter>() == 8);
    // SAFETY: sock_filter is repr(C) {u16, u8, u8, u32}: 8 bytes, no padding, any bit pattern ok.
    unsafe { std::slice::from_raw_parts(filter.as_ptr().cast::<u8>(), filter.len() * 8) }
}
