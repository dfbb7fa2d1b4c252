//! cgroup v2 device control: OCI device rules -> a `BPF_PROG_TYPE_CGROUP_DEVICE` program,
//! loaded and attached with the raw `bpf(2)` syscall (no loader library).
//!
//! The program has runc's `devicefilter` semantics: rules are evaluated last-match-wins (the
//! instructions test the rules from the last to the first and return on the first match),
//! anything no rule matches is denied. Its layout is not runc's: it is one the kernel's
//! verifier accepts in a single pass ([`device_filter`]). A rule matches a request when the device type matches
//! (`a` matches both), major and minor match (a missing or negative number is a wildcard) and
//! the requested access bits are a subset of the rule's ("rw" does not match an "r"-only rule).
//!
//! Attaching (`attach_device_filter`) is `BPF_F_ALLOW_MULTI` on the cgroup2 directory: the new
//! program is attached first, then every program that was attached before it is detached, so
//! an update never leaves a window without a filter. Programs stay alive while attached (the
//! cgroup holds a reference); no fd needs to be kept.
//!
//! Loaded programs are kept for the next start with the same rules ([`load_cached`]): pinned in
//! the host's bpffs under `/sys/fs/bpf/sprout/`, named after their instructions, and taken back
//! with `BPF_OBJ_GET` instead of another `BPF_PROG_LOAD` (the verifier and JIT, 0.1–1 ms by
//! the list's length). A pinned program is used only if the kernel's own copy of its
//! instructions is the program wanted, instruction for instruction.
//!
//! Verified on Linux 6.18 with license "Apache-2.0" (no GPL-only helpers are called).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};

use crate::resources::invalid;
use crate::{Error, Result};

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst and src register nibbles (dst low on little-endian).
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// Opcodes used (see include/uapi/linux/bpf.h, bpf_common.h).
pub(crate) const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
pub(crate) const AND32_K: u8 = 0x54; // BPF_ALU | BPF_AND | BPF_K
pub(crate) const RSH32_K: u8 = 0x74; // BPF_ALU | BPF_RSH | BPF_K
pub(crate) const MOV32_X: u8 = 0xbc; // BPF_ALU | BPF_MOV | BPF_X
pub(crate) const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
pub(crate) const JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
pub(crate) const JNE_X: u8 = 0x5d; // BPF_JMP | BPF_JNE | BPF_X
pub(crate) const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

/// `struct bpf_cgroup_dev_ctx` encodings.
pub const DEV_BLOCK: u32 = 1;
pub const DEV_CHAR: u32 = 2;
pub const ACC_MKNOD: u32 = 1;
pub const ACC_READ: u32 = 2;
pub const ACC_WRITE: u32 = 4;

/// `struct bpf_insn` has `__u8 dst_reg:4, src_reg:4`: dst is the low nibble on little-endian,
/// the high one on big-endian.
const fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    let regs = if cfg!(target_endian = "little") {
        (src << 4) | (dst & 0xf)
    } else {
        (dst << 4) | (src & 0xf)
    };
    Insn {
        code,
        regs,
        off,
        imm,
    }
}

const fn dst_src(i: &Insn) -> (usize, usize) {
    if cfg!(target_endian = "little") {
        ((i.regs & 0xf) as usize, (i.regs >> 4) as usize)
    } else {
        ((i.regs >> 4) as usize, (i.regs & 0xf) as usize)
    }
}

/// One rule after validation: `None` fields are wildcards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    pub allow: bool,
    /// DEV_CHAR / DEV_BLOCK; None = 'a'.
    pub typ: Option<u32>,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    /// ACC_* bits.
    pub access: u32,
}

pub(crate) fn parse_rules(list: &[LinuxDeviceCgroup]) -> Result<Vec<Rule>> {
    let mut out = Vec::with_capacity(list.len());
    for (i, d) in list.iter().enumerate() {
        let field = format!("devices[{i}]");
        let typ = match d.typ().unwrap_or(LinuxDeviceType::A) {
            LinuxDeviceType::A => None,
            LinuxDeviceType::B => Some(DEV_BLOCK),
            LinuxDeviceType::C | LinuxDeviceType::U => Some(DEV_CHAR),
            LinuxDeviceType::P => {
                return Err(invalid(
                    &field,
                    "type \"p\" (FIFO) cannot be used in a device cgroup rule",
                ))
            }
        };
        let num = |v: Option<i64>| -> Result<Option<u32>> {
            match v {
                None => Ok(None),
                Some(n) if n < 0 => Ok(None),
                Some(n) if n > i64::from(u32::MAX) => {
                    Err(invalid(&field, format_args!("invalid device number {n}")))
                }
                Some(n) => Ok(Some(n as u32)),
            }
        };
        let bits = crate::resources::device_access(&field, d)?;
        let mut access = 0;
        for (bit, acc) in [
            (crate::resources::ACCESS_READ, ACC_READ),
            (crate::resources::ACCESS_WRITE, ACC_WRITE),
            (crate::resources::ACCESS_MKNOD, ACC_MKNOD),
        ] {
            if bits & bit != 0 {
                access |= acc;
            }
        }
        out.push(Rule {
            allow: d.allow(),
            typ,
            major: num(d.major())?,
            minor: num(d.minor())?,
            access,
        });
    }
    Ok(out)
}

/// The device filter program for `rules`: last match wins, default deny.
///
/// runc's devicefilter loads the context into r2..r5 once and tests every rule in turn. The
/// kernel's verifier then learns something different on each way into the next rule (that the
/// type was c, or the major 1, on the paths that failed a later test of the rule before), all of
/// it about registers that are read again later, so it cannot treat those paths as one and
/// walks each of them: its work grows faster than the rule list. runc's default list of 11
/// rules took ~0.3 ms to load (kernel 6.18), 6 rules more ~1 ms and 20 more ~5.7 ms. Here the
/// program is laid out so that every way into a rule carries the same knowledge:
///
/// ```text
///   r1 = ctx (never written)
///   for each run of rules with the same verdict, the last run first:
///     (its rules sorted by type, then major: which one of the run matches does not matter)
///     for each type in the run:   [w2 = ctx->access_type & 0xffff; if r2 != type goto next type]
///       for each major:           [w4 = ctx->major; if r4 != major goto next major]
///         for each rule:          [w3 = ctx->access_type >> 16; w0 = w3; w0 &= access;
///                                  if r0 != r3 goto next rule]
///                                 [w5 = ctx->minor; if r5 != minor goto next rule]
///                                 r0 = allow; exit
///   r0 = 0; exit                                       (default deny)
/// ```
///
/// Every register but r1 is loaded right before the test that reads it, so none is live where
/// two ways meet: the verifier walks each instruction about once (`verifier_work_is_linear` in
/// tests/v2_devices.rs). A rule whose tests are all done by its group's headers (`c 136:* rwm`)
/// ends its group; one with no test at all ends the program.
///
/// Rules naming a major/minor above `i32::MAX` can match no device (dev_t has 12+20 bits) and
/// are left out.
pub fn device_filter(rules: &[LinuxDeviceCgroup]) -> Result<Vec<Insn>> {
    Ok(program(&parse_rules(rules)?))
}

/// At most this many rules share one group's jumps: a header jumps over its group, and a jump's
/// offset is an i16 (each rule takes at most 9 instructions, a group's headers 5).
const MAX_CHUNK: usize = 2048;

pub(crate) fn program(rules: &[Rule]) -> Vec<Insn> {
    let all = ACC_READ | ACC_WRITE | ACC_MKNOD;
    // In the order they are tried (the last rule first), without those that match nothing.
    let live: Vec<Rule> = rules
        .iter()
        .rev()
        .filter(|r| {
            r.access & all != 0
                && r.major.is_none_or(|m| m <= i32::MAX as u32)
                && r.minor.is_none_or(|m| m <= i32::MAX as u32)
        })
        .copied()
        .collect();
    let mut p = Vec::new();
    let mut i = 0;
    while i < live.len() {
        let allow = live[i].allow;
        let n = live[i..].iter().take_while(|r| r.allow == allow).count();
        let mut run = live[i..i + n].to_vec();
        i += n;
        // Stable: wildcards (None) first, so a rule that ends its group comes before the rules
        // it makes unreachable; within a major, those with no test of their own first.
        run.sort_by_key(|r| (r.typ, r.major, r.access & all != all || r.minor.is_some()));
        for chunk in run.chunks(MAX_CHUNK) {
            if emit_run(&mut p, chunk, allow) {
                return p; // a rule matched every request: nothing after it runs
            }
        }
    }
    p.push(ins(MOV64_K, 0, 0, 0, 0));
    p.push(ins(EXIT, 0, 0, 0, 0));
    p
}

/// Emit `rules` (one verdict, sorted by type and major) in groups; true if one of them matches
/// every request (the program ends there).
fn emit_run(p: &mut Vec<Insn>, rules: &[Rule], allow: bool) -> bool {
    let all = ACC_READ | ACC_WRITE | ACC_MKNOD;
    // A forward jump at `at`, to the instruction about to be emitted.
    let land = |p: &mut Vec<Insn>, at: usize| {
        p[at].off = i16::try_from(p.len() - at - 1).expect("a group fits an i16 jump");
    };
    let mut t = 0;
    while t < rules.len() {
        let typ = rules[t].typ;
        let t_end = t + rules[t..].iter().take_while(|r| r.typ == typ).count();
        let type_jump = typ.map(|ty| {
            p.push(ins(LDX_W, 2, 1, 0, 0));
            p.push(ins(AND32_K, 2, 0, 0, 0xffff));
            p.push(ins(JNE_K, 2, 0, 0, ty as i32));
            p.len() - 1
        });
        let mut m = t;
        let mut type_done = false;
        while m < t_end && !type_done {
            let major = rules[m].major;
            let m_end = m + rules[m..t_end]
                .iter()
                .take_while(|r| r.major == major)
                .count();
            let major_jump = major.map(|mj| {
                p.push(ins(LDX_W, 4, 1, 4, 0));
                p.push(ins(JNE_K, 4, 0, 0, mj as i32));
                p.len() - 1
            });
            for r in &rules[m..m_end] {
                let mut jumps = Vec::new();
                if r.access & all != all {
                    p.push(ins(LDX_W, 3, 1, 0, 0));
                    p.push(ins(RSH32_K, 3, 0, 0, 16));
                    p.push(ins(MOV32_X, 0, 3, 0, 0));
                    p.push(ins(AND32_K, 0, 0, 0, r.access as i32));
                    p.push(ins(JNE_X, 0, 3, 0, 0));
                    jumps.push(p.len() - 1);
                }
                if let Some(mn) = r.minor {
                    p.push(ins(LDX_W, 5, 1, 8, 0));
                    p.push(ins(JNE_K, 5, 0, 0, mn as i32));
                    jumps.push(p.len() - 1);
                }
                p.push(ins(MOV64_K, 0, 0, 0, i32::from(allow)));
                p.push(ins(EXIT, 0, 0, 0, 0));
                for j in jumps.iter().copied() {
                    land(p, j);
                }
                if jumps.is_empty() {
                    // Matches whatever passed the headers: the rest of its major never runs,
                    // and with no major test, the rest of its type neither.
                    type_done = major.is_none();
                    break;
                }
            }
            if let Some(j) = major_jump {
                land(p, j);
            }
            m = m_end;
        }
        if let Some(j) = type_jump {
            land(p, j);
        } else if type_done {
            return true;
        }
        t = t_end;
    }
    false
}

/// A tiny interpreter for exactly the instructions [`program`] emits: what the kernel would
/// return (1 allow, 0 deny) for a request. Used by tests, and handy to explain a filter.
pub fn evaluate(
    prog: &[Insn],
    typ: u32,
    access: u32,
    major: u32,
    minor: u32,
) -> std::result::Result<u64, String> {
    let ctx = [(access << 16) | typ, major, minor];
    let mut r = [0u64; 11];
    let mut pc = 0usize;
    for _ in 0..prog.len() + 1 {
        let i = prog
            .get(pc)
            .ok_or_else(|| format!("pc {pc} out of range"))?;
        let (dst, src) = dst_src(i);
        pc += 1;
        match i.code {
            LDX_W => {
                if src != 1 || i.off % 4 != 0 || !(0..12).contains(&i.off) {
                    return Err(format!("bad load {i:?}"));
                }
                r[dst] = u64::from(ctx[i.off as usize / 4]);
            }
            AND32_K => r[dst] = u64::from(r[dst] as u32 & i.imm as u32),
            RSH32_K => r[dst] = u64::from((r[dst] as u32) >> i.imm),
            MOV32_X => r[dst] = u64::from(r[src] as u32),
            MOV64_K => r[dst] = i64::from(i.imm) as u64,
            JNE_K | JNE_X => {
                let b = if i.code == JNE_K {
                    i64::from(i.imm) as u64
                } else {
                    r[src]
                };
                if r[dst] != b {
                    if i.off < 0 {
                        return Err("backward jump".into());
                    }
                    pc += i.off as usize;
                }
            }
            EXIT => return Ok(r[0]),
            c => return Err(format!("unknown opcode {c:#x}")),
        }
    }
    Err("no exit".into())
}

// ---- bpf(2) ----

const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_OBJ_PIN: libc::c_int = 6;
const BPF_OBJ_GET: libc::c_int = 7;
const BPF_PROG_ATTACH: libc::c_int = 8;
const BPF_PROG_DETACH: libc::c_int = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_PROG_QUERY: libc::c_int = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// `union bpf_attr`, big enough for every command used here; unused bytes stay zero (the
/// kernel checks that bytes past the fields it knows are zero).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn get_u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().unwrap())
    }
}

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
///
/// Every address stored in `attr` must point to a buffer that stays live for the call and is at
/// least as large as the length the same `attr` gives the kernel for it (the kernel reads
/// program and license, writes log, info and id arrays there).
unsafe fn bpf(cmd: libc::c_int, attr: &mut Attr) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, exclusively borrowed 128-byte, 8-aligned buffer and the size
    // passed is its size, so the kernel reads and writes only inside it; the addresses inside
    // it are valid by this function's contract.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut::<Attr>(attr),
            std::mem::size_of::<Attr>() as u32,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn err(what: &str, dir: &Path, e: std::io::Error) -> Error {
    Error::Invalid(format!(
        "linux.resources.devices: {what} on {}: {e}",
        dir.display()
    ))
}

const LICENSE: &[u8] = b"Apache-2.0\0";

/// BPF_PROG_LOAD's attr for `prog`: its two addresses are `prog` (prog.len() instructions, the
/// count given) and LICENSE (NUL-terminated, static).
fn load_attr(prog: &[Insn]) -> Attr {
    let mut a = Attr::new();
    a.u32(0, BPF_PROG_TYPE_CGROUP_DEVICE)
        .u32(4, prog.len() as u32)
        .u64(8, prog.as_ptr() as u64)
        .u64(16, LICENSE.as_ptr() as u64);
    // prog_name (offset 48, 16 bytes): shows up in bpftool.
    a.0[48..48 + 13].copy_from_slice(b"sprout_devcg\0");
    a
}

/// Ask the verifier for its log at `level` in `log` (log.len() bytes, the size given).
fn with_log(a: &mut Attr, level: u32, log: &mut [u8]) {
    a.u32(24, level)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64);
}

/// The verifier's log up to its NUL.
fn log_text(log: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end])
}

/// Load a device program; returns its fd. On a verifier rejection the message carries the
/// verifier log.
pub fn load(prog: &[Insn]) -> std::io::Result<OwnedFd> {
    let mut a = load_attr(prog);
    // SAFETY: the attr's addresses are `prog` and LICENSE (`load_attr`); both outlive the call.
    match unsafe { bpf(BPF_PROG_LOAD, &mut a) } {
        // SAFETY: BPF_PROG_LOAD returned a new program fd that nothing else owns.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::EACCES) =>
        {
            // Again with the verifier log, to say why.
            let mut log = vec![0u8; 64 * 1024];
            with_log(&mut a, 1, &mut log);
            // SAFETY: as above, plus the log buffer: `log` is log.len() writable bytes (the
            // size given) and lives until after the call. On success the new fd is leaked, as
            // before: the first load failed, so this one fails the same way.
            let _ = unsafe { bpf(BPF_PROG_LOAD, &mut a) };
            Err(std::io::Error::new(
                e.kind(),
                format!("{e}; verifier: {}", log_text(&log).trim()),
            ))
        }
        Err(e) => Err(e),
    }
}

/// How many instructions the kernel's verifier walked to accept `prog` (its "processed N insns"
/// statistic, `BPF_LOG_STATS`, Linux 5.2+): a program it can verify in one pass walks each
/// instruction about once. The program is loaded and closed again. Needs what a load needs
/// (CAP_BPF or CAP_SYS_ADMIN).
pub fn verifier_processed(prog: &[Insn]) -> std::io::Result<u64> {
    const BPF_LOG_STATS: u32 = 4;
    let mut log = vec![0u8; 4096];
    let mut a = load_attr(prog);
    with_log(&mut a, BPF_LOG_STATS, &mut log);
    // SAFETY: the attr's addresses are `prog` and LICENSE (`load_attr`) and `log` (log.len()
    // writable bytes, the size given); all outlive the call.
    let fd = unsafe { bpf(BPF_PROG_LOAD, &mut a) }?;
    // SAFETY: BPF_PROG_LOAD returned a new program fd that nothing else owns; closed here.
    drop(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    let text = log_text(&log);
    text.split("processed ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            std::io::Error::other(format!("no statistic in the verifier's log: {text:?}"))
        })
}

/// Where loaded device programs are kept: a directory of this runtime's own in the host's
/// bpffs (systemd mounts it at boot). Nothing is kept where no bpffs is mounted there.
pub const PIN_DIR: &str = "/sys/fs/bpf/sprout";
/// At most this many programs are kept; past it a new program is loaded and not kept. Each is
/// a few KiB of kernel memory until it is unlinked or the host reboots
/// (`rm -r /sys/fs/bpf/sprout` drops them all; containers keep theirs while attached).
pub const MAX_PINS: usize = 64;
/// The bpffs that holds [`PIN_DIR`].
const BPF_FS: &str = "/sys/fs/bpf";
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// The name a program is kept under: its length and a 64-bit FNV-1a of its bytes. A clash
/// only costs a load: what is found under a name is used only if its instructions match.
pub fn pin_name(prog: &[Insn]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for i in prog {
        let mut b = [0u8; 8];
        b[0] = i.code;
        b[1] = i.regs;
        b[2..4].copy_from_slice(&i.off.to_le_bytes());
        b[4..8].copy_from_slice(&i.imm.to_le_bytes());
        for x in b {
            h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
        }
    }
    format!("devcg-{}-{h:016x}", prog.len())
}

fn cpath(p: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// The kernel id of `prog_fd` if it is a device program whose instructions, as the kernel
/// holds them, are `prog`'s (the verifier rewrites nothing in a program of this kind: no
/// helpers, no maps, context fields read as they are). `None` also where the kernel does not
/// tell (no raw dumps for this caller; constant blinding changes the instructions it gives
/// back).
fn id_if_program(prog_fd: &OwnedFd, prog: &[Insn]) -> Option<u32> {
    let mut got = vec![
        Insn {
            code: 0,
            regs: 0,
            off: 0,
            imm: 0
        };
        prog.len() + 1
    ];
    // struct bpf_prog_info { __u32 type, id; __u8 tag[8]; __u32 jited_prog_len,
    // xlated_prog_len; __aligned_u64 jited_prog_insns, xlated_prog_insns; ... }: 40 bytes.
    let mut info = Attr::new();
    info.u32(20, (got.len() * std::mem::size_of::<Insn>()) as u32)
        .u64(32, got.as_mut_ptr() as u64);
    let mut a = Attr::new();
    a.u32(0, prog_fd.as_raw_fd() as u32)
        .u32(4, 40)
        .u64(8, info.0.as_mut_ptr() as u64);
    // SAFETY: the addresses are `info` (a live 128-byte buffer; the kernel writes at most the
    // 40 bytes asked for) and `got` (room for got.len() instructions, the byte length given in
    // xlated_prog_len); both outlive the call.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a) }.ok()?;
    let len = info.get_u32(20) as usize;
    (info.get_u32(0) == BPF_PROG_TYPE_CGROUP_DEVICE
        && len == std::mem::size_of_val(prog)
        && got[..prog.len()] == *prog)
        .then(|| info.get_u32(4))
}

/// What is kept under a name.
enum Kept {
    /// The program wanted, and its id.
    Hit(OwnedFd, u32),
    /// Nothing.
    Absent,
    /// Something else, or something whose instructions cannot be read back.
    Other,
}

/// What is kept under `path`, judged against `prog`.
fn get_pinned(path: &Path, prog: &[Insn]) -> Kept {
    let c = cpath(path);
    let mut a = Attr::new();
    a.u64(0, c.as_ptr() as u64);
    // SAFETY: the one address is `c`, a NUL-terminated path that outlives the call.
    match unsafe { bpf(BPF_OBJ_GET, &mut a) } {
        Ok(fd) => {
            // SAFETY: BPF_OBJ_GET returned a new fd that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            match id_if_program(&fd, prog) {
                Some(id) => Kept::Hit(fd, id),
                None => Kept::Other,
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Kept::Absent,
        Err(_) => Kept::Other,
    }
}

/// Keep `fd` under `path` in `dir` (made if missing), unless `dir` holds MAX_PINS already.
/// Best effort: a start that cannot keep its program has loaded it all the same.
fn pin(dir: &Path, path: &Path, fd: &OwnedFd) {
    use std::os::unix::fs::DirBuilderExt;
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    if std::fs::read_dir(dir).map_or(true, |d| d.count() >= MAX_PINS) {
        return;
    }
    // EEXIST (a concurrent start kept the same program first) is fine.
    let _ = pin_at(path, fd);
}

/// `BPF_OBJ_PIN`: the program `fd` under `path` in a bpffs.
pub fn pin_at(path: &Path, fd: &OwnedFd) -> std::io::Result<()> {
    let c = cpath(path);
    let mut a = Attr::new();
    a.u64(0, c.as_ptr() as u64).u32(8, fd.as_raw_fd() as u32);
    // SAFETY: the one address is `c`, a NUL-terminated path that outlives the call.
    unsafe { bpf(BPF_OBJ_PIN, &mut a) }.map(|_| ())
}

/// `prog` loaded, or the same program kept in [`PIN_DIR`] by an earlier start; a newly loaded
/// one is kept there when a bpffs is mounted at [`BPF_FS`]. With the program's kernel id when
/// the check against the kept one read it already.
pub fn load_cached(prog: &[Insn]) -> std::io::Result<(OwnedFd, Option<u32>)> {
    if crate::detect::fs_magic(Path::new(BPF_FS)).ok().flatten() != Some(BPF_FS_MAGIC) {
        return Ok((load(prog)?, None));
    }
    let path = Path::new(PIN_DIR).join(pin_name(prog));
    let kept = match get_pinned(&path, prog) {
        Kept::Hit(fd, id) => return Ok((fd, Some(id))),
        k => k,
    };
    let fd = load(prog)?;
    // Kept only where it can be recognised again: not where the kernel does not give its
    // instructions back, or gives them blinded (net.core.bpf_jit_harden), where every start
    // loads its own.
    let id = id_if_program(&fd, prog);
    if id.is_some() {
        if matches!(kept, Kept::Other) {
            // Something else under the name (a clash, or left by hand): this one takes its
            // place.
            let _ = std::fs::remove_file(&path);
        }
        pin(Path::new(PIN_DIR), &path, &fd);
    }
    Ok((fd, id))
}

/// A device program loaded ahead of its attach ([`preload`]): its instructions and its fd.
static PRELOADED: std::sync::Mutex<Option<(Vec<Insn>, OwnedFd)>> = std::sync::Mutex::new(None);

/// Load the device program for `rules` now, for the next [`attach_device_filter`] with the same
/// program to attach instead of loading it (the systemd driver loads it while systemd makes the
/// unit). Nothing happens where the attach would load nothing; errors are left to the attach,
/// which loads again and reports them.
pub(crate) fn preload(rules: &[LinuxDeviceCgroup]) {
    if rules.is_empty() || crate::resources::devices_trivial(rules) == Some(true) {
        return;
    }
    let Ok(parsed) = parse_rules(rules) else {
        return;
    };
    let prog = program(&parsed);
    if let Ok((fd, _)) = load_cached(&prog) {
        if let Ok(mut g) = PRELOADED.lock() {
            *g = Some((prog, fd));
        }
    }
}

/// The preloaded program if it is `prog`; it is taken either way (one preload, one attach).
fn take_preloaded(prog: &[Insn]) -> Option<OwnedFd> {
    match PRELOADED.lock().ok()?.take() {
        Some((p, fd)) if p == prog => Some(fd),
        _ => None,
    }
}

/// Kernel id of a loaded program.
pub fn prog_id(fd: &OwnedFd) -> std::io::Result<u32> {
    // struct bpf_prog_info starts { __u32 type; __u32 id; ... }: ask for those 8 bytes.
    let mut info = Attr::new();
    let mut a = Attr::new();
    a.u32(0, fd.as_raw_fd() as u32)
        .u32(4, 8)
        .u64(8, info.0.as_mut_ptr() as u64);
    // SAFETY: the one address, `info`, is a live 128-byte buffer and the kernel writes at
    // most the 8 bytes asked for (info_len at offset 4).
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a) }?;
    Ok(info.get_u32(4))
}

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?;
    Ok(OwnedFd::from(f))
}

/// Ids of the device programs attached directly to `cgfd` (not inherited ones).
fn query(cgfd: &OwnedFd) -> std::io::Result<Vec<u32>> {
    let mut cap = 64usize;
    loop {
        let mut ids = vec![0u32; cap];
        let mut a = Attr::new();
        a.u32(0, cgfd.as_raw_fd() as u32)
            .u32(4, BPF_CGROUP_DEVICE)
            .u64(16, ids.as_mut_ptr() as u64)
            .u32(24, ids.len() as u32);
        // SAFETY: the one address, `ids`, has room for ids.len() u32 (prog_cnt at offset 24),
        // the most the kernel writes; it lives until the end of the iteration.
        match unsafe { bpf(BPF_PROG_QUERY, &mut a) } {
            Ok(_) => {
                ids.truncate((a.get_u32(24) as usize).min(cap));
                return Ok(ids);
            }
            // More programs than room: prog_cnt says how many.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && cap < 1 << 16 => {
                cap = (a.get_u32(24) as usize).max(cap * 2);
            }
            Err(e) => return Err(e),
        }
    }
}

fn attach(cgfd: &OwnedFd, prog: &OwnedFd, flags: u32) -> std::io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, cgfd.as_raw_fd() as u32)
        .u32(4, prog.as_raw_fd() as u32)
        .u32(8, BPF_CGROUP_DEVICE)
        .u32(12, flags);
    // SAFETY: BPF_PROG_ATTACH's attr holds fds and flags only, no addresses.
    unsafe { bpf(BPF_PROG_ATTACH, &mut a) }.map(|_| ())
}

fn detach_id(cgfd: &OwnedFd, id: u32) -> std::io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, id);
    // SAFETY: BPF_PROG_GET_FD_BY_ID's attr holds an id only, no addresses.
    let fd = match unsafe { bpf(BPF_PROG_GET_FD_BY_ID, &mut a) } {
        // SAFETY: the call returned a new program fd that nothing else owns.
        Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd as i32) },
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()), // gone already
        Err(e) => return Err(e),
    };
    let mut a = Attr::new();
    a.u32(0, cgfd.as_raw_fd() as u32)
        .u32(4, fd.as_raw_fd() as u32)
        .u32(8, BPF_CGROUP_DEVICE);
    // SAFETY: BPF_PROG_DETACH's attr holds fds and the attach type only, no addresses.
    match unsafe { bpf(BPF_PROG_DETACH, &mut a) } {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Enforce `rules` on the cgroup2 directory `dir`: load the filter, attach it
/// (`BPF_F_ALLOW_MULTI`), then detach every device program that was attached there before.
/// Returns the new program's id.
///
/// Special cases: an empty list changes nothing (`Ok(None)`); a lone allow-all rule attaches
/// no program and only detaches earlier ones (`Ok(None)`; on a directory that is not a
/// cgroup2 one, e.g. a test tree, it does nothing).
pub fn attach_device_filter(dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<Option<u32>> {
    if rules.is_empty() {
        return Ok(None);
    }
    let parsed = parse_rules(rules)?;
    let allow_all = crate::resources::devices_trivial(rules) == Some(true);
    let cgfd = open_dir(dir).map_err(|e| err("opening the cgroup", dir, e))?;
    if !crate::detect::is_cgroup2(&cgfd) {
        if allow_all {
            return Ok(None);
        }
        return Err(Error::Invalid(format!(
            "linux.resources.devices: {} is not a cgroup2 directory (device rules on cgroup v2 \
             are an eBPF program attached to the cgroup)",
            dir.display()
        )));
    }
    let old = query(&cgfd).map_err(|e| err("BPF_PROG_QUERY", dir, e))?;
    if allow_all {
        for id in old {
            detach_id(&cgfd, id).map_err(|e| err("BPF_PROG_DETACH", dir, e))?;
        }
        return Ok(None);
    }
    let insns = program(&parsed);
    let loaded = match take_preloaded(&insns) {
        Some(fd) => Ok((fd, None)),
        None => load_cached(&insns),
    };
    let (prog, id) = match loaded {
        Ok(p) => p,
        // In a user namespace bpf(2) is refused (no CAP_BPF/CAP_SYS_ADMIN in the initial
        // namespace); as runc does, go without the filter there: such containers cannot
        // mknod devices or reach host device nodes they were not given anyway.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && in_user_namespace() => {
            crate::warn(&format!(
                "linux.resources.devices: not enforced on {} (bpf(2) is not permitted in a user namespace)",
                dir.display()
            ));
            return Ok(None);
        }
        Err(e) => return Err(err("loading the device eBPF program", dir, e)),
    };
    let id = match id {
        Some(id) => id,
        None => prog_id(&prog).map_err(|e| err("BPF_OBJ_GET_INFO_BY_FD", dir, e))?,
    };
    // The same rules again (`update`): a kept program is attached there already, and a
    // second attach of it would be EEXIST. Only the others go.
    if old.contains(&id) {
        for old_id in old {
            if old_id != id {
                detach_id(&cgfd, old_id).map_err(|e| err("BPF_PROG_DETACH", dir, e))?;
            }
        }
        return Ok(Some(id));
    }
    match attach(&cgfd, &prog, BPF_F_ALLOW_MULTI) {
        Ok(()) => {}
        // A program attached by someone else without BPF_F_ALLOW_MULTI (EPERM): replace it,
        // detach first (a short window without that filter; nothing else works).
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && !old.is_empty() => {
            for id in &old {
                detach_id(&cgfd, *id).map_err(|e| err("BPF_PROG_DETACH", dir, e))?;
            }
            attach(&cgfd, &prog, BPF_F_ALLOW_MULTI).map_err(|e| err("BPF_PROG_ATTACH", dir, e))?;
            return Ok(Some(id));
        }
        Err(e) => return Err(err("BPF_PROG_ATTACH", dir, e)),
    }
    for old_id in old {
        if old_id != id {
            detach_id(&cgfd, old_id).map_err(|e| err("BPF_PROG_DETACH", dir, e))?;
        }
    }
    Ok(Some(id))
}

/// Not in the initial user namespace (/proc/self/uid_map is not the identity map of all ids).
pub(crate) fn in_user_namespace() -> bool {
    crate::running_rootless()
}

/// Ids of the device programs attached directly to the cgroup2 directory `dir`.
pub fn attached_device_programs(dir: &Path) -> Result<Vec<u32>> {
    let cgfd = open_dir(dir).map_err(|e| err("opening the cgroup", dir, e))?;
    query(&cgfd).map_err(|e| err("BPF_PROG_QUERY", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxDeviceCgroupBuilder;

    fn rule(
        allow: bool,
        t: Option<LinuxDeviceType>,
        maj: Option<i64>,
        min: Option<i64>,
        acc: &str,
    ) -> LinuxDeviceCgroup {
        let mut b = LinuxDeviceCgroupBuilder::default().allow(allow).access(acc);
        if let Some(t) = t {
            b = b.typ(t);
        }
        if let Some(m) = maj {
            b = b.major(m);
        }
        if let Some(m) = min {
            b = b.minor(m);
        }
        b.build().unwrap()
    }
    use LinuxDeviceType::{B, C};

    /// The runtime's list: a leading deny-all, then the defaults every container gets.
    fn runtime_defaults() -> Vec<LinuxDeviceCgroup> {
        let mut v = vec![rule(false, None, None, None, "rwm")];
        v.extend(crate::default_device_rules(&[]));
        v
    }

    fn ok(p: &[Insn], t: u32, acc: u32, maj: u32, min: u32) -> bool {
        match evaluate(p, t, acc, maj, min).unwrap() {
            0 => false,
            1 => true,
            x => panic!("r0 = {x}"),
        }
    }

    #[test]
    fn golden_single_rule() {
        let p = device_filter(&[rule(true, Some(C), Some(1), Some(3), "rw")]).unwrap();
        let want = vec![
            // type group
            ins(LDX_W, 2, 1, 0, 0),
            ins(AND32_K, 2, 0, 0, 0xffff),
            ins(JNE_K, 2, 0, 11, DEV_CHAR as i32),
            // major group
            ins(LDX_W, 4, 1, 4, 0),
            ins(JNE_K, 4, 0, 9, 1),
            // the rule: access, minor
            ins(LDX_W, 3, 1, 0, 0),
            ins(RSH32_K, 3, 0, 0, 16),
            ins(MOV32_X, 0, 3, 0, 0),
            ins(AND32_K, 0, 0, 0, (ACC_READ | ACC_WRITE) as i32),
            ins(JNE_X, 0, 3, 4, 0),
            ins(LDX_W, 5, 1, 8, 0),
            ins(JNE_K, 5, 0, 2, 3),
            ins(MOV64_K, 0, 0, 0, 1),
            ins(EXIT, 0, 0, 0, 0),
            // default deny
            ins(MOV64_K, 0, 0, 0, 0),
            ins(EXIT, 0, 0, 0, 0),
        ];
        assert_eq!(p, want);
        #[cfg(target_endian = "little")]
        assert_eq!(ins(LDX_W, 2, 1, 0, 0).regs, 0x12);
    }

    #[test]
    fn deny_all_and_allow_all() {
        let deny = device_filter(&[rule(false, None, None, None, "rwm")]).unwrap();
        assert_eq!(deny, [ins(MOV64_K, 0, 0, 0, 0), ins(EXIT, 0, 0, 0, 0)]);
        let allow = device_filter(&[rule(true, None, None, None, "")]).unwrap();
        assert_eq!(allow, [ins(MOV64_K, 0, 0, 0, 1), ins(EXIT, 0, 0, 0, 0)]);
        assert!(ok(&allow, DEV_BLOCK, ACC_WRITE, 8, 0));
        assert!(!ok(&deny, DEV_CHAR, ACC_READ, 1, 3));
        // nothing at all: deny
        assert!(!ok(&device_filter(&[]).unwrap(), DEV_CHAR, ACC_READ, 1, 3));
    }

    #[test]
    fn runtime_default_list() {
        let p = device_filter(&runtime_defaults()).unwrap();
        // The leading deny-all is the default and is cut off: the program ends in deny.
        assert_eq!(p.last(), Some(&ins(EXIT, 0, 0, 0, 0)));
        for (a, b) in [
            (1, 3),
            (1, 5),
            (1, 7),
            (1, 8),
            (1, 9),
            (5, 0),
            (5, 2),
            (10, 200),
        ] {
            assert!(ok(&p, DEV_CHAR, ACC_READ | ACC_WRITE, a, b), "{a}:{b}");
            assert!(ok(&p, DEV_CHAR, ACC_MKNOD, a, b));
            assert!(!ok(&p, DEV_BLOCK, ACC_READ, a, b), "block {a}:{b}");
        }
        assert!(ok(&p, DEV_CHAR, ACC_READ | ACC_WRITE, 136, 4)); // pts
        assert!(!ok(&p, DEV_CHAR, ACC_READ, 1, 1)); // /dev/mem
        assert!(!ok(&p, DEV_CHAR, ACC_READ, 5, 1)); // the host's console
        assert!(!ok(&p, DEV_BLOCK, ACC_READ, 8, 0)); // sda
        assert!(ok(&p, DEV_BLOCK, ACC_MKNOD, 8, 0)); // mknod of anything is fine
        assert!(ok(&p, DEV_CHAR, ACC_MKNOD, 4, 1));
        assert!(!ok(&p, DEV_CHAR, ACC_MKNOD | ACC_READ, 4, 1));
    }

    #[test]
    fn last_match_wins() {
        // allow all, then deny c 1:3 rw: /dev/null blocked for r and w, mknod still fine
        let p = device_filter(&[
            rule(true, None, None, None, "rwm"),
            rule(false, Some(C), Some(1), Some(3), "rw"),
        ])
        .unwrap();
        assert!(!ok(&p, DEV_CHAR, ACC_READ, 1, 3));
        assert!(!ok(&p, DEV_CHAR, ACC_WRITE, 1, 3));
        assert!(!ok(&p, DEV_CHAR, ACC_READ | ACC_WRITE, 1, 3));
        assert!(ok(&p, DEV_CHAR, ACC_MKNOD, 1, 3));
        assert!(ok(&p, DEV_CHAR, ACC_READ, 1, 5));
        assert!(ok(&p, DEV_BLOCK, ACC_READ, 1, 3));
        // and the reverse order: the later allow wins
        let p = device_filter(&[
            rule(false, Some(C), Some(1), Some(3), "rw"),
            rule(true, Some(C), Some(1), None, "rw"),
        ])
        .unwrap();
        assert!(ok(&p, DEV_CHAR, ACC_READ, 1, 3));
        assert!(!ok(&p, DEV_CHAR, ACC_MKNOD, 1, 3));
        assert!(!ok(&p, DEV_CHAR, ACC_READ, 2, 3));
    }

    #[test]
    fn access_must_be_a_subset() {
        let p = device_filter(&[rule(true, Some(C), Some(1), Some(3), "r")]).unwrap();
        assert!(ok(&p, DEV_CHAR, ACC_READ, 1, 3));
        assert!(!ok(&p, DEV_CHAR, ACC_READ | ACC_WRITE, 1, 3));
        assert!(!ok(&p, DEV_CHAR, ACC_WRITE, 1, 3));
    }

    #[test]
    fn wildcards_and_unmatchable_numbers() {
        let p = device_filter(&[
            rule(true, Some(B), None, Some(0), "rwm"),
            rule(true, Some(C), Some(-1), Some(7), "rwm"),
        ])
        .unwrap();
        assert!(ok(&p, DEV_BLOCK, ACC_READ, 8, 0));
        assert!(!ok(&p, DEV_BLOCK, ACC_READ, 8, 1));
        assert!(ok(&p, DEV_CHAR, ACC_WRITE, 99, 7));
        // a major above i32::MAX can match nothing and is dropped, not sign-extended
        let p =
            device_filter(&[rule(true, Some(C), Some(i64::from(u32::MAX)), None, "rwm")]).unwrap();
        assert_eq!(p, [ins(MOV64_K, 0, 0, 0, 0), ins(EXIT, 0, 0, 0, 0)]);
        assert!(!ok(&p, DEV_CHAR, ACC_READ, u32::MAX, 0));
    }

    #[test]
    fn initial_user_namespace() {
        // The tests run as root on the host.
        // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
        let euid = unsafe { libc::geteuid() };
        if euid == 0
            && std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|s| s.contains("4294967295"))
        {
            assert!(!in_user_namespace());
        }
    }

    #[test]
    fn invalid_rules() {
        let e = device_filter(&[rule(true, Some(C), Some(1), Some(3), "xyz")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("devices[0]") && e.contains("xyz"), "{e}");
        // Characters other than r, w, m are ignored, as runc does ("rwa" in its suite).
        let f = parse_rules(&[rule(true, Some(C), Some(1), Some(3), "rwa")]).unwrap();
        assert_eq!(f[0].access, ACC_READ | ACC_WRITE);
        let e = device_filter(&[
            rule(true, None, None, None, ""),
            rule(true, Some(LinuxDeviceType::P), None, None, ""),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("devices[1]") && e.contains("FIFO"), "{e}");
        let e = device_filter(&[rule(true, Some(C), Some(1i64 << 33), None, "r")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid device number"), "{e}");
    }

    #[test]
    fn jumps_stay_in_bounds_exhaustively() {
        // Every combination of rule shapes: the interpreter (which rejects out-of-range pcs)
        // agrees with a direct last-match-wins evaluation for every request shape.
        let shapes = [
            rule(true, None, None, None, "rwm"),
            rule(false, Some(C), Some(1), None, "w"),
            rule(true, Some(B), None, Some(3), "rm"),
            rule(false, None, Some(1), Some(3), "r"),
            rule(true, Some(C), Some(1), Some(3), "rw"),
        ];
        let parsed = parse_rules(&shapes).unwrap();
        for mask in 0u32..(1 << shapes.len()) {
            let list: Vec<_> = (0..shapes.len()).filter(|i| mask & (1 << i) != 0).collect();
            let rules: Vec<_> = list.iter().map(|&i| shapes[i].clone()).collect();
            let p = device_filter(&rules).unwrap();
            let sub: Vec<Rule> = list.iter().map(|&i| parsed[i]).collect();
            for t in [DEV_BLOCK, DEV_CHAR] {
                for acc in 1..8 {
                    for (maj, min) in [(1, 3), (1, 4), (2, 3), (9, 9)] {
                        assert_eq!(
                            ok(&p, t, acc, maj, min),
                            reference(&sub, t, acc, maj, min),
                            "mask {mask:b} t{t} acc{acc} {maj}:{min}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_preloaded_program_is_taken_once_and_only_for_its_own_rules() {
        let rules = runtime_defaults();
        let prog = device_filter(&rules).unwrap();
        if let Err(e) = load(&prog) {
            println!("SKIPPED: cannot load a device program here: {e}");
            return;
        }
        preload(&rules);
        let other = device_filter(&[rule(false, None, None, None, "rwm")]).unwrap();
        assert!(take_preloaded(&other).is_none(), "another program took it");
        assert!(take_preloaded(&prog).is_none(), "a mismatch must drop it");
        preload(&rules);
        let fd = take_preloaded(&prog).expect("the preloaded program");
        assert!(prog_id(&fd).unwrap() > 0);
        assert!(take_preloaded(&prog).is_none(), "taken twice");
        // Nothing to load: nothing kept.
        preload(&[rule(true, None, None, None, "rwm")]);
        assert!(PRELOADED.lock().unwrap().is_none());
    }

    /// What the rules say, straight from the list: the last matching rule's verdict.
    fn reference(rules: &[Rule], t: u32, acc: u32, maj: u32, min: u32) -> bool {
        rules
            .iter()
            .rev()
            .find(|r| {
                r.typ.is_none_or(|x| x == t)
                    && acc & !r.access == 0
                    && r.major.is_none_or(|x| x == maj)
                    && r.minor.is_none_or(|x| x == min)
            })
            .is_some_and(|r| r.allow)
    }

    #[test]
    fn random_lists_agree_with_the_rules() {
        // Lists drawn from a small domain, so that runs of one verdict, shared types and majors,
        // wildcards and rules that end their group all come up; every request shape checked.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let types = [None, Some(B), Some(C), Some(LinuxDeviceType::A)];
        let accs = ["r", "w", "m", "rw", "rm", "wm", "rwm", "rwm", ""];
        for case in 0..4000 {
            let len = next(12) as usize;
            let mut list = Vec::new();
            let mut allow = next(2) == 0;
            for _ in 0..len {
                if next(3) == 0 {
                    allow = !allow;
                }
                let maj = [None, Some(1), Some(2), Some(-1)][next(4) as usize];
                let min = [None, Some(3), Some(4)][next(3) as usize];
                let acc = accs[next(accs.len() as u64) as usize];
                list.push(rule(allow, types[next(4) as usize], maj, min, acc));
            }
            let parsed = parse_rules(&list).unwrap();
            let p = device_filter(&list).unwrap();
            for t in [DEV_BLOCK, DEV_CHAR] {
                for acc in 1..8 {
                    for maj in [1, 2, 9] {
                        for min in [3, 4, 9] {
                            assert_eq!(
                                ok(&p, t, acc, maj, min),
                                reference(&parsed, t, acc, maj, min),
                                "case {case}: {list:?}, request t{t} acc{acc} {maj}:{min}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn long_lists_split_into_groups_that_jumps_can_span() {
        // 3 chunks of one verdict, all of type c and alternating majors: every jump still lands.
        let mut list = vec![rule(false, None, None, None, "rwm")];
        for i in 0..5000 {
            list.push(rule(true, Some(C), Some(i % 7), Some(i), "rw"));
        }
        let parsed = parse_rules(&list).unwrap();
        let p = device_filter(&list).unwrap();
        for (maj, min) in [(0, 0), (6, 4999), (3, 3), (3, 4), (4, 4), (1, 5001)] {
            for acc in [ACC_READ, ACC_READ | ACC_MKNOD] {
                assert_eq!(
                    ok(&p, DEV_CHAR, acc, maj, min),
                    reference(&parsed, DEV_CHAR, acc, maj, min),
                    "{maj}:{min} acc{acc}"
                );
            }
        }
    }
}
