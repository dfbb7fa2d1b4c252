//! The ENOSYS stub prepended to every compiled filter whose default action refuses (runc's
//! "patchbpf" behaviour, which its test suite and programs rely on).
//!
//! A syscall the profile predates should look to the container like a syscall the kernel does
//! not have (ENOSYS), so that glibc and programs fall back to an older one, not like one the
//! profile forbids (the default errno, usually EPERM, or a kill). Which syscalls count as
//! "newer than the profile" follows runc:
//!
//! - Per architecture, the largest syscall number that any name in any rule of the profile has
//!   on that architecture (whatever the rule's action; names unknown there are ignored). A
//!   syscall number above it gets `SECCOMP_RET_ERRNO | ENOSYS`; everything else goes on to the
//!   profile's own program.
//! - The architectures are the profile's plus the native one (libseccomp always adds it). One
//!   without any known name, or that libseccomp cannot resolve names for, gets no check (its
//!   syscalls go to the program, which decides them as before: a bad architecture is killed).
//! - x86_64 and x32 share AUDIT_ARCH_X86_64; x32 syscalls have bit 30 set (and libseccomp's x32
//!   numbers include it). Each mode is checked against its own maximum; a mode the profile does
//!   not cover goes to the program.
//! - On s390 / s390x syscall 0 is the multiplexer that unknown large syscall numbers end up as:
//!   it gets ENOSYS too.
//! - Only when the default action refuses: not for ALLOW, LOG or TRACE (a tracer handles new
//!   syscalls itself), and not when it already is ERRNO(ENOSYS).
//!
//! The stub is part of the compiled (cached) program, so a start pays nothing extra for it but
//! its few instructions.

use libc::sock_filter;
use libseccomp::{ScmpArch, ScmpSyscall};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction};

const LD_W_ABS: u16 = 0x20;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;

/// `SECCOMP_RET_ERRNO | ENOSYS`.
pub const RET_ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32;
/// The bit x32 syscall numbers carry (`__X32_SYSCALL_BIT`).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// AUDIT_ARCH_* values (linux/audit.h): EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_S390: u32 = 0x0000_0016;
const AUDIT_ARCH_S390X: u32 = 0x8000_0016;

/// The AUDIT_ARCH of a libseccomp architecture (x32 maps to x86_64); None for those runc has no
/// stub for either.
fn audit_arch(a: ScmpArch) -> Option<u32> {
    Some(match a {
        ScmpArch::X86 => AUDIT_ARCH_I386,
        ScmpArch::X8664 | ScmpArch::X32 => AUDIT_ARCH_X86_64,
        ScmpArch::Arm => 0x4000_0028,
        ScmpArch::Aarch64 => 0xc000_00b7,
        ScmpArch::Mips => 0x0000_0008,
        ScmpArch::Mips64 => 0x8000_0008,
        ScmpArch::Mips64N32 => 0xa000_0008,
        ScmpArch::Mipsel => 0x4000_0008,
        ScmpArch::Mipsel64 => 0xc000_0008,
        ScmpArch::Mipsel64N32 => 0xe000_0008,
        ScmpArch::Ppc => 0x0000_0014,
        ScmpArch::Ppc64 => 0x8000_0015,
        ScmpArch::Ppc64Le => 0xc000_0015,
        ScmpArch::S390 => AUDIT_ARCH_S390,
        ScmpArch::S390X => AUDIT_ARCH_S390X,
        ScmpArch::Riscv64 => 0xc000_00f3,
        ScmpArch::Loongarch64 => 0xc000_0102,
        _ => return None,
    })
}

/// Whether the profile's default action gets the stub.
pub fn applies(profile: &LinuxSeccomp) -> bool {
    match profile.default_action() {
        LinuxSeccompAction::ScmpActAllow
        | LinuxSeccompAction::ScmpActLog
        | LinuxSeccompAction::ScmpActTrace => false,
        LinuxSeccompAction::ScmpActErrno => {
            profile.default_errno_ret() != Some(libc::ENOSYS as u32)
        }
        _ => true,
    }
}

/// The largest syscall number on `arch` of any name in the profile's rules (None: no name known).
fn largest(profile: &LinuxSeccomp, arch: ScmpArch) -> Option<u32> {
    profile
        .syscalls()
        .iter()
        .flatten()
        .flat_map(|r| r.names().iter())
        .filter_map(|n| ScmpSyscall::from_name_by_arch(n, arch).ok())
        .map(|s| s.as_raw_syscall())
        // Negative numbers are libseccomp's pseudo-syscalls (names this arch lacks).
        .filter(|&nr| nr > 0)
        .max()
        .map(|nr| nr as u32)
}

/// The checks for one AUDIT_ARCH: the largest known number of its normal mode and, on x86_64,
/// of its x32 mode.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Section {
    audit: u32,
    max: Option<u32>,
    x32_max: Option<u32>,
}

fn sections(profile: &LinuxSeccomp) -> Vec<Section> {
    let mut archs: Vec<ScmpArch> = profile
        .architectures()
        .iter()
        .flatten()
        .map(|a| crate::compile::arch(*a))
        .collect();
    archs.push(ScmpArch::Native);
    let mut out: Vec<Section> = Vec::new();
    for a in archs {
        let a = if a == ScmpArch::Native {
            ScmpArch::native()
        } else {
            a
        };
        let Some(audit) = audit_arch(a) else { continue };
        let Some(max) = largest(profile, a) else {
            continue;
        };
        let i = match out.iter().position(|s| s.audit == audit) {
            Some(i) => i,
            None => {
                out.push(Section {
                    audit,
                    ..Section::default()
                });
                out.len() - 1
            }
        };
        if a == ScmpArch::X32 {
            out[i].x32_max = Some(max);
        } else {
            out[i].max = Some(max);
        }
    }
    out
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The stub to put in front of the profile's program (empty when it does not apply). Its
/// fall-through paths jump to the instruction right after it.
pub fn stub(profile: &LinuxSeccomp) -> Vec<sock_filter> {
    if !applies(profile) {
        return Vec::new();
    }
    let secs = sections(profile);
    if secs.is_empty() {
        return Vec::new();
    }
    // Each section: `ld nr`, its checks ending in `ret ENOSYS`, then `ja <program>` (patched
    // below). Jumps inside a section are short; only the `ja`s span the stub.
    let mut bodies: Vec<Vec<sock_filter>> = Vec::new();
    for s in &secs {
        let mut b = vec![insn(LD_W_ABS, 0, 0, OFF_NR)];
        if s.audit == AUDIT_ARCH_S390 || s.audit == AUDIT_ARCH_S390X {
            // nr == 0 (the multiplexer): skip the range check, land on `ret ENOSYS`.
            b.push(insn(JEQ_K, 1, 0, 0));
        }
        match (s.max, s.x32_max) {
            (Some(m), Some(x)) => {
                // bit 30 set: x32 check; else x86_64 check.
                b.push(insn(JSET_K, 1, 0, X32_SYSCALL_BIT));
                b.push(insn(JGT_K, 1, 2, m));
                b.push(insn(JGT_K, 0, 1, x));
            }
            (Some(m), None) => {
                if s.audit == AUDIT_ARCH_X86_64 {
                    // x32 syscalls are not this section's.
                    b.push(insn(JSET_K, 2, 0, X32_SYSCALL_BIT));
                }
                b.push(insn(JGT_K, 0, 1, m));
            }
            (None, Some(x)) => {
                b.push(insn(JSET_K, 0, 2, X32_SYSCALL_BIT));
                b.push(insn(JGT_K, 0, 1, x));
            }
            (None, None) => unreachable!("a section has at least one maximum"),
        }
        b.push(insn(RET_K, 0, 0, RET_ENOSYS));
        b.push(insn(JA, 0, 0, 0));
        bodies.push(b);
    }
    // Head: `ld arch`, per section `jeq arch,0,1; ja <section>`, then `ja <program>`.
    let head_len = 1 + 2 * secs.len() + 1;
    let total = head_len + bodies.iter().map(Vec::len).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    out.push(insn(LD_W_ABS, 0, 0, OFF_ARCH));
    let mut at = head_len;
    for (s, b) in secs.iter().zip(&bodies) {
        out.push(insn(JEQ_K, 0, 1, s.audit));
        // `ja k` goes to pc + 1 + k.
        let pc = out.len();
        out.push(insn(JA, 0, 0, (at - pc - 1) as u32));
        at += b.len();
    }
    let pc = out.len();
    out.push(insn(JA, 0, 0, (total - pc - 1) as u32));
    for b in bodies {
        out.extend(b);
        let pc = out.len() - 1;
        out[pc].k = (total - pc - 1) as u32;
    }
    debug_assert_eq!(out.len(), total);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(v: serde_json::Value) -> LinuxSeccomp {
        serde_json::from_value(v).unwrap()
    }

    /// Runs the stub on (nr, arch): Some(ret) or None when it falls through to the program.
    fn run(stub: &[sock_filter], nr: u32, arch: u32) -> Option<u32> {
        let mut pc = 0;
        let mut a = 0;
        loop {
            if pc == stub.len() {
                return None;
            }
            let i = stub[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => a = if i.k == OFF_NR { nr } else { arch },
                JA => pc += i.k as usize,
                JEQ_K | JGT_K | JSET_K => {
                    let t = match i.code {
                        JEQ_K => a == i.k,
                        JGT_K => a > i.k,
                        _ => a & i.k != 0,
                    };
                    pc += if t { i.jt } else { i.jf } as usize;
                }
                RET_K => return Some(i.k),
                c => panic!("unexpected opcode {c:#x}"),
            }
            assert!(pc <= stub.len(), "jump past the stub");
        }
    }

    fn nr(name: &str, arch: ScmpArch) -> u32 {
        ScmpSyscall::from_name_by_arch(name, arch)
            .unwrap()
            .as_raw_syscall() as u32
    }

    fn errno_profile(archs: &[&str], names: &[&str]) -> LinuxSeccomp {
        profile(serde_json::json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": archs,
            "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}],
        }))
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_x32_and_i386_each_against_their_own_largest_syscall() {
        let p = errno_profile(
            &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            &["read", "write", "openat", "no_such_syscall"],
        );
        let s = stub(&p);
        let m64 = nr("openat", ScmpArch::X8664);
        let m32 = nr("openat", ScmpArch::X86);
        let mx32 = nr("openat", ScmpArch::X32);
        assert_eq!(
            mx32,
            m64 | X32_SYSCALL_BIT,
            "libseccomp's x32 numbers carry bit 30"
        );
        for (arch, max) in [
            (AUDIT_ARCH_X86_64, m64),
            (AUDIT_ARCH_I386, m32),
            (AUDIT_ARCH_X86_64, mx32),
        ] {
            assert_eq!(run(&s, max, arch), None, "arch {arch:#x} nr {max}");
            assert_eq!(run(&s, max - 1, arch), None);
            assert_eq!(run(&s, max + 1, arch), Some(RET_ENOSYS));
            assert_eq!(run(&s, max + 700, arch), Some(RET_ENOSYS));
        }
        assert_eq!(run(&s, 0, AUDIT_ARCH_X86_64), None);
        assert_eq!(run(&s, X32_SYSCALL_BIT, AUDIT_ARCH_X86_64), None);
        assert_eq!(run(&s, u32::MAX, AUDIT_ARCH_X86_64), Some(RET_ENOSYS));
        // Another architecture goes to the program (its bad-arch action).
        assert_eq!(run(&s, 5000, 0xc000_00b7), None);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_mode_without_x32_in_the_profile_goes_to_the_program() {
        let p = errno_profile(&["SCMP_ARCH_X86_64"], &["read", "openat"]);
        let s = stub(&p);
        assert_eq!(run(&s, 1000, AUDIT_ARCH_X86_64), Some(RET_ENOSYS));
        assert_eq!(run(&s, X32_SYSCALL_BIT | 1000, AUDIT_ARCH_X86_64), None);
        // Only x32 listed: the native x86_64 is still added.
        let p = errno_profile(&["SCMP_ARCH_X32"], &["read", "openat"]);
        let s = stub(&p);
        assert_eq!(run(&s, 1000, AUDIT_ARCH_X86_64), Some(RET_ENOSYS));
        assert_eq!(
            run(&s, X32_SYSCALL_BIT | 1000, AUDIT_ARCH_X86_64),
            Some(RET_ENOSYS)
        );
        assert_eq!(
            run(&s, nr("openat", ScmpArch::X32), AUDIT_ARCH_X86_64),
            None
        );
    }

    #[test]
    fn native_architecture_is_always_covered() {
        let p = errno_profile(&[], &["read", "openat"]);
        assert_native_boundary_after(&p, "openat");
    }

    /// On the native architecture `last` (the profile's newest syscall) passes the stub and
    /// the number after it gets ENOSYS.
    fn assert_native_boundary_after(p: &LinuxSeccomp, last: &str) {
        let native = audit_arch(ScmpArch::native()).unwrap();
        let max = nr(last, ScmpArch::native());
        let s = stub(p);
        assert_eq!(run(&s, max, native), None);
        assert_eq!(run(&s, max + 1, native), Some(RET_ENOSYS));
    }

    #[test]
    fn rules_with_any_action_count_and_unknown_names_do_not() {
        let p = profile(serde_json::json!({
            "defaultAction": "SCMP_ACT_KILL_PROCESS",
            "syscalls": [
                {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["openat", "not_a_syscall"], "action": "SCMP_ACT_KILL_PROCESS"},
            ],
        }));
        assert_native_boundary_after(&p, "openat");
    }

    #[test]
    fn s390_multiplexer_gets_enosys() {
        let p = errno_profile(&["SCMP_ARCH_S390X"], &["read", "openat"]);
        let s = stub(&p);
        let max = nr("openat", ScmpArch::S390X);
        assert_eq!(run(&s, 0, AUDIT_ARCH_S390X), Some(RET_ENOSYS));
        assert_eq!(run(&s, 1, AUDIT_ARCH_S390X), None);
        assert_eq!(run(&s, max, AUDIT_ARCH_S390X), None);
        assert_eq!(run(&s, max + 1, AUDIT_ARCH_S390X), Some(RET_ENOSYS));
    }

    #[test]
    fn permissive_or_enosys_defaults_and_empty_profiles_get_no_stub() {
        for d in ["SCMP_ACT_ALLOW", "SCMP_ACT_LOG", "SCMP_ACT_TRACE"] {
            let p = profile(serde_json::json!({
                "defaultAction": d,
                "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO"}],
            }));
            assert!(stub(&p).is_empty(), "{d}");
        }
        let p = profile(serde_json::json!({
            "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": libc::ENOSYS,
            "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}],
        }));
        assert!(stub(&p).is_empty());
        let p = profile(serde_json::json!({"defaultAction": "SCMP_ACT_ERRNO"}));
        assert!(stub(&p).is_empty());
        for d in [
            "SCMP_ACT_ERRNO",
            "SCMP_ACT_KILL",
            "SCMP_ACT_KILL_PROCESS",
            "SCMP_ACT_TRAP",
        ] {
            let p = profile(serde_json::json!({
                "defaultAction": d,
                "syscalls": [{"names": ["openat"], "action": "SCMP_ACT_ALLOW"}],
            }));
            assert!(!stub(&p).is_empty(), "{d}");
        }
    }

    #[test]
    fn audit_arch_values_match_the_spec_enum() {
        use oci_spec::runtime::Arch;
        for (a, o) in [
            (ScmpArch::X86, Arch::ScmpArchX86),
            (ScmpArch::X8664, Arch::ScmpArchX86_64),
            (ScmpArch::Arm, Arch::ScmpArchArm),
            (ScmpArch::Aarch64, Arch::ScmpArchAarch64),
            (ScmpArch::Mips, Arch::ScmpArchMips),
            (ScmpArch::Mips64, Arch::ScmpArchMips64),
            (ScmpArch::Mips64N32, Arch::ScmpArchMips64n32),
            (ScmpArch::Mipsel, Arch::ScmpArchMipsel),
            (ScmpArch::Mipsel64, Arch::ScmpArchMipsel64),
            (ScmpArch::Mipsel64N32, Arch::ScmpArchMipsel64n32),
            (ScmpArch::Ppc, Arch::ScmpArchPpc),
            (ScmpArch::Ppc64, Arch::ScmpArchPpc64),
            (ScmpArch::Ppc64Le, Arch::ScmpArchPpc64le),
            (ScmpArch::S390, Arch::ScmpArchS390),
            (ScmpArch::S390X, Arch::ScmpArchS390x),
            (ScmpArch::Riscv64, Arch::ScmpArchRiscv64),
            (ScmpArch::Loongarch64, Arch::ScmpArchLoongarch64),
        ] {
            assert_eq!(audit_arch(a), Some(o as u32), "{a:?}");
        }
    }
}
