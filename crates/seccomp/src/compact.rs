//! Shortening libseccomp's BPF program (the miss path; the result is what the cache stores).
//!
//! Loading a filter costs the kernel time in proportion to its length (cBPF to eBPF
//! conversion, JIT, and the per-syscall action cache it precomputes by emulating the filter
//! for every syscall number). libseccomp emits one comparison per syscall name and
//! architecture: ~1400 instructions for podman's default profile, even in its binary-tree
//! layout. Most of those syscalls get the same decision as their numeric neighbours, so the
//! dispatch can be a binary search over *ranges* of syscall numbers instead:
//!
//! - The decision of libseccomp's program, for a given architecture and arguments, is a
//!   piecewise-constant function of the syscall number whose pieces can only start at a
//!   constant `k` the program compares with, or at `k + 1`. Running the program (a small
//!   interpreter here) once at each of those points gives every piece exactly.
//! - A piece whose run reads a syscall argument jumps into libseccomp's own program, at the
//!   instruction where that run first loads an argument (the accumulator is overwritten
//!   there, and libseccomp uses no other state): only the instructions reachable from those
//!   entry points are kept, in their order, with their jumps re-targeted. They run exactly as
//!   in the full program, for every argument value.
//! - The result is checked against libseccomp's program at every piece (and with several
//!   argument vectors for the argument-dependent ones); on any difference, an unknown
//!   instruction or a limit, `compact` returns `None` and libseccomp's program is used.
//!
//! - The leaves cost no instruction: a comparison whose branch returns jumps to a `RET` of
//!   that value shared by its whole subtree (an "island" after it, in 8-bit reach), instead
//!   of to a `RET` of its own. Only K comparisons, `JA` and `RET` are emitted, so the kernel
//!   can still precompute its per-syscall action cache from the program.
//!
//! For podman's default profile on x86_64 (x86_64, x86 and x32): 1426 -> 588 instructions,
//! `seccomp(2)` ~2x faster again; with the islands 325 instructions, `seccomp(2)` 120 -> 81 µs
//! (examples/loadbench.rs, 400 fresh children, this 2-core VM).

/// Version of this pass; part of the cache key (a change here changes compiled programs).
pub const VERSION: u32 = 2;

use libc::sock_filter;

const LD_W_ABS: u16 = 0x20;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const ALU_AND_K: u16 = 0x54;
const ALU_OR_K: u16 = 0x44;
const ALU_LSH_K: u16 = 0x64;
const ALU_RSH_K: u16 = 0x74;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// What one run of a program did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub ret: u32,
    /// It loaded something other than the syscall number and the architecture.
    pub read_other: bool,
    /// It loaded the syscall number.
    pub read_nr: bool,
    /// Where it first loaded something other than the syscall number and the architecture.
    pub first_other: Option<usize>,
}

/// Runs a classic-BPF seccomp program on (nr, arch, args). Only the instructions libseccomp
/// emits are supported (absolute word loads, K jumps, RET K); anything else gives `None`.
/// Also collects the constants compared while the accumulator held the architecture.
pub(crate) fn run(
    prog: &[sock_filter],
    nr: u32,
    arch: u32,
    args: &[u64; 6],
    arch_consts: &mut Vec<u32>,
) -> Option<Run> {
    let mut pc = 0usize;
    let mut a = 0u32;
    let mut a_is_arch = false;
    // Whether the accumulator holds the syscall number unchanged: only K comparisons may
    // look at it (no masks or arithmetic), or the pieces would not be what `compact` assumes.
    let mut a_is_nr = false;
    let mut r = Run {
        ret: 0,
        read_other: false,
        read_nr: false,
        first_other: None,
    };
    for _ in 0..prog.len() + 1 {
        let i = *prog.get(pc)?;
        pc += 1;
        match i.code {
            LD_W_ABS => {
                a_is_arch = i.k == OFF_ARCH;
                a_is_nr = i.k == OFF_NR;
                a = match i.k {
                    OFF_NR => {
                        r.read_nr = true;
                        nr
                    }
                    OFF_ARCH => arch,
                    k if (16..64).contains(&k) && k % 4 == 0 => {
                        r.read_other = true;
                        r.first_other.get_or_insert(pc - 1);
                        let w = args[(k as usize - 16) / 8];
                        // Little-endian seccomp_data: the low word first.
                        if (k - 16) % 8 == 0 {
                            w as u32
                        } else {
                            (w >> 32) as u32
                        }
                    }
                    _ => return None,
                };
                if cfg!(target_endian = "big") && (16..64).contains(&i.k) {
                    return None;
                }
            }
            JA => pc = pc.checked_add(i.k as usize)?,
            ALU_AND_K | ALU_OR_K | ALU_RSH_K | ALU_LSH_K => {
                if a_is_nr || a_is_arch {
                    return None;
                }
                a = match i.code {
                    ALU_AND_K => a & i.k,
                    ALU_OR_K => a | i.k,
                    ALU_RSH_K => a.checked_shr(i.k)?,
                    _ => a.checked_shl(i.k)?,
                };
            }
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                // Only K comparisons on the number, only equality on the architecture: then
                // the answer is piecewise constant in the number and the same for every
                // architecture the program does not name.
                if (i.code == JSET_K && a_is_nr) || (a_is_arch && i.code != JEQ_K) {
                    return None;
                }
                if a_is_arch {
                    arch_consts.push(i.k);
                }
                let t = match i.code {
                    JEQ_K => a == i.k,
                    JGT_K => a > i.k,
                    JGE_K => a >= i.k,
                    _ => a & i.k != 0,
                };
                pc += if t { i.jt } else { i.jf } as usize;
            }
            RET_K => {
                r.ret = i.k;
                return Some(r);
            }
            _ => return None,
        }
    }
    None
}

/// A leaf of the dispatch: return a value, or continue in libseccomp's program at this
/// instruction (its argument checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leaf {
    Ret(u32),
    Args(usize),
}

/// Code under construction: instructions, with the jumps into the kept argument checks
/// patched at the end, and the conditional jumps to a return value not placed yet.
#[derive(Default)]
struct Code {
    ins: Vec<sock_filter>,
    /// (index of a JA, instruction of the full program it must reach).
    to_args: Vec<(usize, usize)>,
    /// (index of a conditional jump, its true branch (else its false one), value to return).
    to_ret: Vec<(usize, bool, u32)>,
}

impl Code {
    fn push(&mut self, i: sock_filter) {
        self.ins.push(i);
    }
    fn append(&mut self, mut o: Code) {
        let base = self.ins.len();
        self.to_args
            .extend(o.to_args.iter().map(|&(x, t)| (x + base, t)));
        self.to_ret
            .extend(o.to_ret.iter().map(|&(x, b, v)| (x + base, b, v)));
        self.ins.append(&mut o.ins);
    }
    fn leaf(l: Leaf) -> Code {
        let mut c = Code::default();
        match l {
            Leaf::Ret(k) => c.push(insn(RET_K, 0, 0, k)),
            Leaf::Args(pc) => {
                c.to_args.push((0, pc));
                c.push(insn(JA, 0, 0, 0));
            }
        }
        c
    }

    /// The code followed by one `RET` per value its conditional jumps still have to return
    /// (an "island"), those jumps pointed at it; `None` if one would be out of reach (8 bits).
    fn seal(mut self) -> Option<Code> {
        let mut values: Vec<u32> = self.to_ret.iter().map(|r| r.2).collect();
        values.sort_unstable();
        values.dedup();
        let at = self.ins.len();
        for &v in &values {
            self.push(insn(RET_K, 0, 0, v));
        }
        for &(j, t, v) in &self.to_ret {
            let dest = at + values.binary_search(&v).ok()?;
            let off = u8::try_from(dest - (j + 1)).ok()?;
            if t {
                self.ins[j].jt = off;
            } else {
                self.ins[j].jf = off;
            }
        }
        self.to_ret.clear();
        Some(self)
    }
}

/// A subtree before it is sealed: a bare return value (no instruction of its own: the
/// comparison above it jumps to a shared `RET`), or code.
enum Sub {
    Ret(u32),
    Code(Code),
}

/// The search over `pieces` with every return left to an island (see [`Code::seal`]): a
/// comparison whose branch is a return jumps to that value's `RET` instead of to a `RET`
/// instruction of its own, so the ~280 leaves of podman's profile cost no instruction.
/// Every subtree's code ends in a return or a jump: nothing falls through past its end.
fn search(pieces: &[(u32, Leaf)]) -> Sub {
    if pieces.len() == 1 {
        return match pieces[0].1 {
            Leaf::Ret(k) => Sub::Ret(k),
            l => Sub::Code(Code::leaf(l)),
        };
    }
    let mid = pieces.len() / 2;
    let k = pieces[mid].0;
    let mut c = Code::default();
    match (search(&pieces[..mid]), search(&pieces[mid..])) {
        (Sub::Ret(a), Sub::Ret(b)) => {
            c.to_ret.push((0, true, b));
            c.to_ret.push((0, false, a));
            c.push(insn(JGE_K, 0, 0, k));
        }
        (Sub::Ret(a), Sub::Code(r)) => {
            c.to_ret.push((0, false, a));
            c.push(insn(JGE_K, 0, 0, k));
            c.append(r);
        }
        (Sub::Code(l), Sub::Ret(b)) => {
            c.to_ret.push((0, true, b));
            c.push(insn(JGE_K, 0, 0, k));
            c.append(l);
        }
        (Sub::Code(l), Sub::Code(r)) => {
            // nr >= k: skip the left half.
            if l.ins.len() <= 255 {
                c.push(insn(JGE_K, l.ins.len() as u8, 0, k));
            } else {
                c.push(insn(JGE_K, 0, 1, k));
                c.push(insn(JA, 0, 0, l.ins.len() as u32));
            }
            c.append(l);
            c.append(r);
        }
    }
    Sub::Code(c)
}

/// Binary search over `pieces` (start, leaf), sorted by start; the first starts at 0. The
/// largest subtrees whose returns all fit in 8-bit jumps to one island each are searched
/// with islands ([`search`]); above them, the halves are joined as plain code.
fn tree(pieces: &[(u32, Leaf)]) -> Code {
    let sealed = match search(pieces) {
        Sub::Ret(k) => Some(Code::leaf(Leaf::Ret(k))),
        Sub::Code(c) => c.seal(),
    };
    if let Some(c) = sealed {
        return c;
    }
    let mid = pieces.len() / 2;
    let left = tree(&pieces[..mid]);
    let right = tree(&pieces[mid..]);
    let mut c = Code::default();
    // nr >= start of the right half: skip the left half.
    if left.ins.len() <= 255 {
        c.push(insn(JGE_K, left.ins.len() as u8, 0, pieces[mid].0));
    } else {
        c.push(insn(JGE_K, 0, 1, pieces[mid].0));
        c.push(insn(JA, 0, 0, left.ins.len() as u32));
    }
    c.append(left);
    c.append(right);
    c
}

/// Argument vectors for the equivalence check of the argument-dependent syscalls.
fn sample_args() -> Vec<[u64; 6]> {
    let vals = [
        0u64,
        1,
        8,
        0x28,
        0xffff_ffff,
        0x1_0000_0000,
        0x7e02_0000,
        u64::MAX,
    ];
    let mut out = Vec::new();
    for &v in &vals {
        for i in 0..6 {
            let mut a = [0u64; 6];
            a[i] = v;
            out.push(a);
        }
        out.push([v; 6]);
    }
    out
}

/// Critical points of the syscall number: 0 and every compared constant k and k + 1.
fn critical_points(prog: &[sock_filter]) -> Vec<u32> {
    let mut pts = vec![0u32];
    for i in prog {
        if matches!(i.code, JEQ_K | JGT_K | JGE_K) {
            pts.push(i.k);
            if let Some(k1) = i.k.checked_add(1) {
                pts.push(k1);
            }
        }
    }
    pts.sort_unstable();
    pts.dedup();
    pts
}

/// The instructions of `full` reachable from `entries`, in order: (old index -> new index
/// map, instructions with their jumps re-targeted). `None` if a jump leaves the program.
fn reachable(
    full: &[sock_filter],
    entries: &[usize],
) -> Option<(Vec<Option<usize>>, Vec<sock_filter>)> {
    let mut keep = vec![false; full.len()];
    let mut stack: Vec<usize> = entries.to_vec();
    while let Some(pc) = stack.pop() {
        if pc >= full.len() {
            return None;
        }
        if keep[pc] {
            continue;
        }
        keep[pc] = true;
        let i = full[pc];
        match i.code {
            RET_K => {}
            JA => stack.push(pc + 1 + i.k as usize),
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                stack.push(pc + 1 + i.jt as usize);
                stack.push(pc + 1 + i.jf as usize);
            }
            _ => stack.push(pc + 1),
        }
    }
    let mut map = vec![None; full.len()];
    let mut n = 0;
    for (pc, k) in keep.iter().enumerate() {
        if *k {
            map[pc] = Some(n);
            n += 1;
        }
    }
    let mut out = Vec::with_capacity(n);
    for (pc, k) in keep.iter().enumerate() {
        if !*k {
            continue;
        }
        let mut i = full[pc];
        let me = map[pc]?;
        let rel = |t: usize| -> Option<usize> { map[t]?.checked_sub(me + 1) };
        match i.code {
            JA => i.k = rel(pc + 1 + i.k as usize)? as u32,
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                // Targets only move closer: the 8-bit offsets still fit.
                i.jt = u8::try_from(rel(pc + 1 + i.jt as usize)?).ok()?;
                i.jf = u8::try_from(rel(pc + 1 + i.jf as usize)?).ok()?;
            }
            _ => {}
        }
        out.push(i);
    }
    Some((map, out))
}

/// The shortened equivalent of `full` (libseccomp's program), or `None` to keep `full`.
pub fn compact(full: &[sock_filter]) -> Option<Box<[sock_filter]>> {
    let zero = [0u64; 6];
    // An architecture none of the comparisons names: the program's answer for every such
    // architecture (libseccomp compares the architecture with JEQ only).
    let mut archs = Vec::new();
    let unknown_arch = (0u32..).find(|a| !full.iter().any(|i| i.k == *a))?;
    let bad = run(full, 0, unknown_arch, &zero, &mut archs)?;
    if bad.read_nr || bad.read_other {
        return None;
    }
    archs.sort_unstable();
    archs.dedup();
    let pts = critical_points(full);
    let mut out = Code::default();
    out.push(insn(LD_W_ABS, 0, 0, OFF_ARCH));
    let mut blocks = Vec::new();
    let mut entries = Vec::new();
    // The full program's run at every point of every architecture, kept for the check.
    let mut runs: Vec<Vec<Run>> = Vec::with_capacity(archs.len());
    let mut scratch = Vec::new();
    for &arch in &archs {
        let mut pieces: Vec<(u32, Leaf)> = Vec::new();
        let mut arch_runs = Vec::with_capacity(pts.len());
        for &p in &pts {
            scratch.clear();
            let r = run(full, p, arch, &zero, &mut scratch)?;
            arch_runs.push(r);
            let leaf = match r.first_other {
                Some(pc) => {
                    entries.push(pc);
                    Leaf::Args(pc)
                }
                None => Leaf::Ret(r.ret),
            };
            if pieces.last().map(|l| l.1) != Some(leaf) {
                pieces.push((p, leaf));
            }
        }
        let mut b = Code::default();
        b.push(insn(LD_W_ABS, 0, 0, OFF_NR));
        b.append(tree(&pieces));
        blocks.push(b);
        runs.push(arch_runs);
    }
    // Architecture chain: JEQ arch -> JA block; otherwise the unknown-architecture answer.
    let chain_len = archs.len() * 2 + 1;
    let mut offset = 0usize;
    for (i, &arch) in archs.iter().enumerate() {
        out.push(insn(JEQ_K, 0, 1, arch));
        // The JA is at absolute index 2i+2; its block starts after the chain.
        let target = 1 + chain_len + offset;
        out.push(insn(JA, 0, 0, (target - (2 * i + 3)) as u32));
        offset += blocks[i].ins.len();
    }
    out.push(insn(RET_K, 0, 0, bad.ret));
    for b in blocks {
        out.append(b);
    }
    entries.sort_unstable();
    entries.dedup();
    let (map, kept) = reachable(full, &entries)?;
    let base = out.ins.len();
    out.ins.extend_from_slice(&kept);
    for &(j, t) in &out.to_args {
        out.ins[j].k = (base + map[t]? - (j + 1)) as u32;
    }
    let prog = out.ins;
    if prog.len() >= full.len() || prog.len() > crate::compile::BPF_MAXINSNS {
        return None;
    }
    // Check: same answer as libseccomp's program at every piece of every architecture (the
    // argument-dependent pieces with many argument vectors), and for an unknown architecture.
    let args = sample_args();
    for (ai, &arch) in archs.iter().enumerate() {
        for (pi, &p) in pts.iter().enumerate() {
            let r = runs[ai][pi];
            scratch.clear();
            if run(&prog, p, arch, &zero, &mut scratch)?.ret != r.ret {
                return None;
            }
            if r.read_other {
                for a in &args[1..] {
                    scratch.clear();
                    let want = run(full, p, arch, a, &mut scratch)?.ret;
                    scratch.clear();
                    if run(&prog, p, arch, a, &mut scratch)?.ret != want {
                        return None;
                    }
                }
            }
        }
    }
    for &p in &pts {
        scratch.clear();
        if run(&prog, p, unknown_arch, &zero, &mut scratch)?.ret != bad.ret {
            return None;
        }
    }
    Some(prog.into_boxed_slice())
}
