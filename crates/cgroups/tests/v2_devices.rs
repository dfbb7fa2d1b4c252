//! cgroup v2 device control for real: an eBPF device program attached to a cgroup2 child of
//! this test process's own cgroup on the host's cgroup2 mount (pure v2: /sys/fs/cgroup;
//! hybrid: /sys/fs/cgroup/unified; device programs need no controller). A forked child is
//! moved into the cgroup and opens /dev/null and /dev/zero.

mod common;

use std::path::{Path, PathBuf};

use common::{euid, proc_cgroup, unique};
use oci_spec::runtime::*;
use sprout_cgroups::ebpf;

fn cgroup2_mount() -> Option<PathBuf> {
    for p in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let c = std::ffi::CString::new(p).unwrap();
        // SAFETY: statfs is a plain C struct of integers: all-zero is a valid value.
        let mut s: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path and `s` a live statfs for the kernel to fill.
        let ok = unsafe { libc::statfs(c.as_ptr(), &mut s) } == 0;
        #[allow(clippy::unnecessary_cast)] // f_type is i64 on x86_64 glibc, not on every target
        if ok && s.f_type as i64 == 0x6367_7270 {
            return Some(PathBuf::from(p));
        }
    }
    None
}

struct Cg(PathBuf);
impl Drop for Cg {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn make_cgroup(tag: &str) -> Option<Cg> {
    if euid() != 0 {
        println!("SKIPPED: not root");
        return None;
    }
    let Some(mnt) = cgroup2_mount() else {
        println!("SKIPPED: no cgroup2 mount");
        return None;
    };
    let own = proc_cgroup(std::process::id(), "").expect("0:: line");
    let dir = mnt.join(own.trim_start_matches('/')).join(unique(tag));
    std::fs::create_dir(&dir).unwrap();
    Some(Cg(dir))
}

/// Fork a child, move it into `cg`, let it open /dev/null (read, then write) and /dev/zero
/// (read). Returns the errno of each open (0 = success).
fn probe(cg: &Path) -> [i32; 3] {
    let mut go = [0i32; 2];
    let mut res = [0i32; 2];
    // SAFETY: `go` and `res` are live [c_int; 2], the two slots pipe2(2) writes.
    unsafe {
        assert_eq!(libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC), 0);
        assert_eq!(libc::pipe2(res.as_mut_ptr(), libc::O_CLOEXEC), 0);
    }
    // SAFETY: the test harness is multi-threaded, so the child below makes only
    // async-signal-safe calls (read, open, close, write, _exit: no allocation, no lock) and
    // never returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // Child: only async-signal-safe calls.
        // SAFETY: every buffer is a live local of the size passed (1 byte `b`, 12 bytes
        // `out`); the paths are NUL-terminated literals; the fds are this function's pipes and
        // the ones open() just returned; __errno_location is this thread's errno slot.
        unsafe {
            let mut b = 0u8;
            libc::read(go[0], std::ptr::from_mut::<u8>(&mut b).cast(), 1);
            let mut out = [0i32; 3];
            for (i, (p, fl)) in [
                (c"/dev/null", libc::O_RDONLY),
                (c"/dev/null", libc::O_WRONLY),
                (c"/dev/zero", libc::O_RDONLY),
            ]
            .iter()
            .enumerate()
            {
                let fd = libc::open(p.as_ptr(), *fl);
                out[i] = if fd < 0 { *libc::__errno_location() } else { 0 };
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            libc::write(res[1], out.as_ptr().cast(), 12);
            libc::_exit(0);
        }
    }
    // SAFETY: closes the parent's copies of the child's pipe ends, each exactly once.
    unsafe {
        libc::close(go[0]);
        libc::close(res[1]);
    }
    std::fs::write(cg.join("cgroup.procs"), pid.to_string()).unwrap();
    // SAFETY: writes 1 byte of a static literal to our pipe.
    unsafe { libc::write(go[1], b"x".as_ptr().cast(), 1) };
    let mut out = [0i32; 3];
    // SAFETY: reads at most 12 bytes into the live 12-byte `out` ([i32; 3], any bits valid).
    let n = unsafe { libc::read(res[0], out.as_mut_ptr().cast(), 12) };
    let mut st = 0;
    // SAFETY: `pid` is our own child and `st` a live c_int; the two fds are closed once.
    unsafe {
        libc::waitpid(pid, &mut st, 0);
        libc::close(go[1]);
        libc::close(res[0]);
    }
    assert_eq!(n, 12, "child did not report");
    out
}

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

#[test]
fn device_program_denies_then_allows_dev_null() {
    let Some(cg) = make_cgroup("devbpf") else {
        return;
    };
    let d = &cg.0;
    assert_eq!(probe(d), [0, 0, 0], "no program yet");

    // allow everything, then deny c 1:3 rw (last match wins)
    let deny_null = [
        rule(true, None, None, None, "rwm"),
        rule(false, Some(LinuxDeviceType::C), Some(1), Some(3), "rw"),
    ];
    let id1 = ebpf::attach_device_filter(d, &deny_null)
        .unwrap()
        .expect("a program");
    assert_eq!(ebpf::attached_device_programs(d).unwrap(), vec![id1]);
    assert_eq!(probe(d), [libc::EPERM, libc::EPERM, 0]);

    // update: only /dev/null readable, everything else denied; the old program is detached
    let only_null_r = [
        rule(false, None, None, None, "rwm"),
        rule(true, Some(LinuxDeviceType::C), Some(1), Some(3), "r"),
    ];
    let id2 = ebpf::attach_device_filter(d, &only_null_r)
        .unwrap()
        .expect("a program");
    assert_ne!(id1, id2);
    assert_eq!(ebpf::attached_device_programs(d).unwrap(), vec![id2]);
    assert_eq!(probe(d), [0, libc::EPERM, libc::EPERM]);

    // update to allow-all: no program left
    assert_eq!(
        ebpf::attach_device_filter(d, &[rule(true, None, None, None, "rwm")]).unwrap(),
        None
    );
    assert!(ebpf::attached_device_programs(d).unwrap().is_empty());
    assert_eq!(probe(d), [0, 0, 0]);
}

#[test]
fn runtime_default_rules_load_and_enforce() {
    let Some(cg) = make_cgroup("devdef") else {
        return;
    };
    let d = &cg.0;
    let mut rules = vec![rule(false, None, None, None, "rwm")];
    rules.extend(sprout_cgroups::default_device_rules(&[]));
    let t = std::time::Instant::now();
    ebpf::attach_device_filter(d, &rules).unwrap();
    println!(
        "load+attach of the runtime's default device program: {:?}",
        t.elapsed()
    );
    assert_eq!(probe(d), [0, 0, 0]);
    // a deny-all program: nothing opens
    ebpf::attach_device_filter(d, &[rule(false, None, None, None, "rwm")]).unwrap();
    assert_eq!(probe(d), [libc::EPERM, libc::EPERM, libc::EPERM]);
    assert_eq!(ebpf::attached_device_programs(d).unwrap().len(), 1);
}

/// The kernel's verifier walks the device program about once, however long the rule list
/// (crates/cgroups/src/ebpf.rs, `device_filter`). runc's layout, which sprout used before, made
/// it walk 228 instructions for the runtime's 64-instruction default program, 630 for 112 with 6
/// rules more and 3,332 for 224 with 20 more (kernel 6.18): ~0.3, ~1 and ~5.7 ms of a start.
#[test]
fn verifier_work_is_linear() {
    if euid() != 0 {
        println!("SKIPPED: not root");
        return;
    }
    let c = Some(LinuxDeviceType::C);
    let mut rules = vec![rule(false, None, None, None, "rwm")];
    rules.extend(sprout_cgroups::default_device_rules(&[]));
    for extra in [0, 6, 20, 60] {
        let mut list = rules.clone();
        for i in 0..extra {
            // What device plugins add: several minors of one major, majors of their own, some
            // read-only, a denial among them.
            let (maj, min) = if i % 3 == 0 { (195, i) } else { (500 + i, 0) };
            let acc = if i % 4 == 1 { "r" } else { "rw" };
            list.push(rule(i % 7 != 6, c, Some(maj), Some(min), acc));
        }
        let prog = ebpf::device_filter(&list).unwrap();
        let processed = match ebpf::verifier_processed(&prog) {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EINVAL)) => {
                println!("SKIPPED: the kernel does not load it with statistics here: {e}");
                return;
            }
            Err(e) => panic!("loading the device program: {e}"),
        };
        println!(
            "{} rules: {} instructions, the verifier walked {processed}",
            list.len(),
            prog.len()
        );
        assert!(
            processed <= 3 * prog.len() as u64,
            "{} rules: the verifier walked {processed} instructions of {}",
            list.len(),
            prog.len()
        );
    }
}

/// Run `f` in a fresh thread with a private mount namespace and a bpffs of its own mounted at
/// /sys/fs/bpf (where the runtime keeps its device programs), so that nothing is kept in the
/// host's. False (after printing why) where that cannot be made.
fn with_private_bpffs(f: impl FnOnce() + Send + 'static) -> bool {
    if euid() != 0 {
        println!("SKIPPED: not root");
        return false;
    }
    if !Path::new("/sys/fs/bpf").is_dir() {
        println!("SKIPPED: no /sys/fs/bpf");
        return false;
    }
    std::thread::spawn(move || {
        // A fresh thread: its fs context is its own.
        sprout_test_support::unshare_private_mounts().expect("a private mount namespace");
        // SAFETY: NUL-terminated literals, alive for the call.
        unsafe {
            assert_eq!(
                libc::mount(
                    c"bpf".as_ptr(),
                    c"/sys/fs/bpf".as_ptr(),
                    c"bpf".as_ptr(),
                    0,
                    c"mode=700".as_ptr().cast()
                ),
                0,
                "mounting a bpffs: {}",
                std::io::Error::last_os_error()
            );
        }
        f();
    })
    .join()
    .map_err(std::panic::resume_unwind)
    .unwrap();
    true
}

/// A device program is loaded once per rule list: the next cgroup with the same rules gets the
/// same kernel program (kept in /sys/fs/bpf/sprout), and it still enforces. A program kept
/// under that name whose instructions are not the list's is not used, and is replaced.
#[test]
fn device_program_is_kept_and_reused() {
    with_private_bpffs(|| {
        let (Some(a), Some(b), Some(c)) = (
            make_cgroup("devkeep-a"),
            make_cgroup("devkeep-b"),
            make_cgroup("devkeep-c"),
        ) else {
            return;
        };
        let mut rules = vec![rule(false, None, None, None, "rwm")];
        rules.extend(sprout_cgroups::default_device_rules(&[]));
        let kept =
            Path::new(ebpf::PIN_DIR).join(ebpf::pin_name(&ebpf::device_filter(&rules).unwrap()));
        assert!(!kept.exists());

        let id_a = ebpf::attach_device_filter(&a.0, &rules)
            .unwrap()
            .expect("a program");
        assert!(kept.exists(), "{} not kept", kept.display());
        let id_b = ebpf::attach_device_filter(&b.0, &rules)
            .unwrap()
            .expect("a program");
        assert_eq!(id_a, id_b, "the second cgroup got a program of its own");
        assert_eq!(
            probe(&b.0),
            [0, 0, 0],
            "the kept program enforces the defaults"
        );

        // `update` with the same rules: the program is attached there already.
        assert_eq!(
            ebpf::attach_device_filter(&a.0, &rules).unwrap(),
            Some(id_a)
        );
        assert_eq!(ebpf::attached_device_programs(&a.0).unwrap(), vec![id_a]);

        // Another program (deny everything) under the defaults' name.
        let deny = ebpf::load(&ebpf::device_filter(&rules[..1]).unwrap()).unwrap();
        let deny_id = ebpf::prog_id(&deny).unwrap();
        std::fs::remove_file(&kept).unwrap();
        ebpf::pin_at(&kept, &deny).unwrap();
        let id_c = ebpf::attach_device_filter(&c.0, &rules)
            .unwrap()
            .expect("a program");
        assert_ne!(id_c, deny_id, "a program with other instructions was used");
        assert_ne!(
            id_c, id_a,
            "the old program was found although its pin was gone"
        );
        assert_eq!(probe(&c.0), [0, 0, 0]);
        // ... and the kept one is now the right program again.
        assert_eq!(
            ebpf::attach_device_filter(&b.0, &rules).unwrap(),
            Some(id_c)
        );
        assert_eq!(ebpf::attached_device_programs(&b.0).unwrap(), vec![id_c]);
        assert_eq!(probe(&b.0), [0, 0, 0]);
    });
}
