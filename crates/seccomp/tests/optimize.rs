//! What `compile` stores (libseccomp's binary-tree layout, SCMP_FLTATR_CTL_OPTIMIZE = 2,
//! shortened by compact.rs) decides every syscall exactly as libseccomp's linear layout does.
//! The programs are run in a classic-BPF interpreter (written independently of compact.rs's)
//! over every syscall number of each architecture with a spread of argument values, so a
//! difference anywhere (not only in the few syscalls a load test can try) fails.

mod common;

use common::{podman_profile, profile};
use serde_json::json;
use sprout_seccomp::compile::{compile, compile_with, OPTIMIZE};

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
const X32_BIT: u32 = 0x4000_0000;

/// struct seccomp_data as the kernel lays it out.
fn data(nr: u32, arch: u32, args: [u64; 6]) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&nr.to_ne_bytes());
    d[4..8].copy_from_slice(&arch.to_ne_bytes());
    d[8..16].copy_from_slice(&0x7f00_1234_5678u64.to_ne_bytes());
    for (i, a) in args.iter().enumerate() {
        d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
    }
    d
}

/// A classic-BPF interpreter (the subset seccomp accepts); returns the filter's return value.
fn run(prog: &[libc::sock_filter], d: &[u8; 64]) -> u32 {
    let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
    let mut pc = 0usize;
    let word = |k: u32| u32::from_ne_bytes(d[k as usize..k as usize + 4].try_into().unwrap());
    loop {
        let i = prog[pc];
        pc += 1;
        let k = i.k;
        let src = if i.code & 0x08 != 0 { x } else { k };
        match i.code & 0x07 {
            0x00 => match i.code & 0xe0 {
                0x20 => a = word(k),         // LD W ABS
                0x00 => a = k,               // LD IMM
                0x60 => a = mem[k as usize], // LD MEM
                0x80 => a = 64,              // LD LEN
                m => panic!("LD mode {m:#x}"),
            },
            0x01 => match i.code & 0xe0 {
                0x00 => x = k,
                0x60 => x = mem[k as usize],
                0x80 => x = 64,
                m => panic!("LDX mode {m:#x}"),
            },
            0x02 => mem[k as usize] = a,
            0x03 => mem[k as usize] = x,
            0x04 => {
                a = match i.code & 0xf0 {
                    0x00 => a.wrapping_add(src),
                    0x10 => a.wrapping_sub(src),
                    0x20 => a.wrapping_mul(src),
                    0x30 => a / src,
                    0x40 => a | src,
                    0x50 => a & src,
                    0x60 => a << src,
                    0x70 => a >> src,
                    0x80 => a.wrapping_neg(),
                    0x90 => a % src,
                    0xa0 => a ^ src,
                    op => panic!("ALU op {op:#x}"),
                }
            }
            0x05 => {
                let t = match i.code & 0xf0 {
                    0x00 => {
                        pc += k as usize;
                        continue;
                    }
                    0x10 => a == src,
                    0x20 => a > src,
                    0x30 => a >= src,
                    0x40 => a & src != 0,
                    op => panic!("JMP op {op:#x}"),
                };
                pc += if t { i.jt } else { i.jf } as usize;
            }
            0x06 => return if i.code & 0x18 == 0x10 { a } else { k },
            0x07 => {
                if i.code & 0xf8 == 0x00 {
                    x = a
                } else {
                    a = x
                }
            }
            _ => unreachable!(),
        }
    }
}

/// Argument vectors that hit the podman profile's conditions from both sides.
fn arg_sets() -> Vec<[u64; 6]> {
    let vals: [u64; 12] = [
        0,
        1,
        8,
        9,
        0x28,
        0xdead,
        0xffff_ffff,
        0x1_0000_0000,
        0x7e02_0000, // clone namespace flags
        0x0800_0000,
        0x2000_0000,
        u64::MAX,
    ];
    let mut out = vec![[0; 6]];
    for &v in &vals {
        for i in 0..3 {
            let mut a = [0u64; 6];
            a[i] = v;
            out.push(a);
        }
        out.push([libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, v, 0, 0, 0]);
        out.push([v; 6]);
    }
    out
}

/// libseccomp's linear program, its tree program and what `compile` stores (the tree
/// shortened by compact.rs) decide every (arch, nr, args) alike. Returns the three lengths.
fn assert_same_decisions(p: &oci_spec::runtime::LinuxSeccomp) -> [usize; 3] {
    let linear = compile_with(p, 1).unwrap().filter;
    let tree = compile_with(p, 2).unwrap().filter;
    let ours = compile(p).unwrap().filter;
    // `compile` puts the ENOSYS stub in front (tested on its own in enosys.rs): compare it with
    // the stub in front of libseccomp's linear program.
    let stub = sprout_seccomp::enosys::stub(p);
    let stubbed: Vec<libc::sock_filter> = stub.iter().chain(linear.iter()).copied().collect();
    let raw = |f: &[libc::sock_filter]| -> Vec<(u16, u8, u8, u32)> {
        f.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect()
    };
    assert_eq!(OPTIMIZE, 2);
    assert_ne!(raw(&linear), raw(&tree), "the tree layout should differ");
    assert!(ours.len() <= tree.len() + stub.len());
    let args = arg_sets();
    let mut checked = 0;
    for arch in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64] {
        for nr in (0..1100u32).chain((0..600).map(|n| n | X32_BIT)).chain([
            0x3fff_ffff,
            0x7fff_ffff,
            0xffff_fffe,
            u32::MAX,
        ]) {
            for a in &args {
                let d = data(nr, arch, *a);
                let (l, t, o) = (run(&linear, &d), run(&tree, &d), run(&ours, &d));
                let want = run(&stubbed, &d);
                assert_eq!(
                    l, t,
                    "arch {arch:#x} nr {nr:#x} args {a:x?}: linear {l:#x}, tree {t:#x}"
                );
                assert_eq!(
                    want, o,
                    "arch {arch:#x} nr {nr:#x} args {a:x?}: stub+linear {want:#x}, compiled {o:#x}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100_000);
    [linear.len(), tree.len(), ours.len()]
}

#[test]
fn podman_default_tree_and_compact_decide_like_linear() {
    let [linear, tree, ours] = assert_same_decisions(&podman_profile());
    eprintln!("podman-default: linear {linear}, tree {tree}, compiled {ours} instructions");
    // compact.rs must actually shorten podman's profile (it falls back to the tree silently):
    // 1426 -> 325 instructions with the returns shared in islands (588 without).
    assert!(ours * 4 < tree, "compiled {ours} vs tree {tree}");
}

#[test]
fn small_profiles_tree_and_compact_decide_like_linear() {
    assert_same_decisions(&profile(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
        "syscalls": [
            {"names": ["getppid", "kill", "umask"], "action": "SCMP_ACT_ERRNO", "errnoRet": 42},
            {"names": ["fcntl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 44, "args": [
                {"index": 1, "value": 1, "op": "SCMP_CMP_EQ"},
                {"index": 1, "value": 3, "op": "SCMP_CMP_EQ"}]},
            {"names": ["socket"], "action": "SCMP_ACT_KILL_PROCESS", "args": [
                {"index": 0, "value": 16, "op": "SCMP_CMP_EQ"},
                {"index": 2, "value": 9, "op": "SCMP_CMP_GE"}]},
            {"names": ["personality"], "action": "SCMP_ACT_TRAP", "args": [
                {"index": 0, "value": 0xffff_ffffu64, "valueTwo": 8, "op": "SCMP_CMP_MASKED_EQ"}]}
        ]
    })));
}

#[test]
fn interpreter_agrees_with_the_kernel_on_a_sample() {
    // Guard against a wrong interpreter making the tests above vacuous: for the podman profile
    // the interpreter must give ALLOW for getpid, ERRNO(EPERM) for sethostname and
    // ERRNO(ENOSYS) for add_key, as the real load test (load.rs) sees them in the kernel.
    let tree = compile(&podman_profile()).unwrap().filter;
    let at = |nr: i64| -> u32 { run(&tree, &data(nr as u32, AUDIT_ARCH_X86_64, [0; 6])) };
    assert_eq!(at(libc::SYS_getpid), 0x7fff_0000u32);
    assert_eq!(at(libc::SYS_sethostname), 0x0005_0000 | libc::EPERM as u32);
    assert_eq!(at(libc::SYS_add_key), 0x0005_0000 | libc::ENOSYS as u32);
    // Newer than every syscall the profile names: ENOSYS (the stub), not the default EPERM.
    assert_eq!(at(1000), 0x0005_0000 | libc::ENOSYS as u32);
    assert_eq!(
        run(&tree, &data(1000 | X32_BIT, AUDIT_ARCH_X86_64, [0; 6])),
        0x0005_0000 | libc::ENOSYS as u32
    );
}
