//! OOM notification for real on a v1/hybrid host: a forked child allocates past a 32MB
//! memory(+swap) limit in a memory cgroup nested under this test's own one.

mod common;

use std::time::Duration;

use common::unique;
use oci_spec::runtime::*;
use sprout_cgroups::{Layout, Manager, OomWait};

#[test]
fn v1_oom_event_then_gone() {
    skip_unless!(Layout::V1, Layout::Hybrid);
    let mut m = Manager::new(Some(&format!("{}/ctr", unique("oom"))), "x", false).unwrap();
    if m.v1_path("memory").is_none() {
        println!("SKIPPED: no v1 memory hierarchy");
        return;
    }
    m.create().unwrap();
    let mut mem = LinuxMemoryBuilder::default().limit(32i64 << 20);
    if m.v1_path("memory")
        .unwrap()
        .join("memory.memsw.limit_in_bytes")
        .exists()
    {
        mem = mem.swap(32i64 << 20);
    }
    m.apply(
        &LinuxResourcesBuilder::default()
            .memory(mem.build().unwrap())
            .build()
            .unwrap(),
    )
    .unwrap();
    let mut ev = m.oom_events().unwrap();
    assert_eq!(ev.wait(Some(Duration::ZERO)).unwrap(), OomWait::Timeout);

    let mut p = [0i32; 2];
    // SAFETY: `p` is a live [c_int; 2], the two slots pipe2(2) writes.
    unsafe { assert_eq!(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC), 0) };
    // SAFETY: the test harness is multi-threaded, so the child below makes only
    // async-signal-safe calls and raw memory writes (no allocation, no lock) and ends in _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: `b` is a live 1-byte buffer; the writes go to the `len` bytes of the fresh
        // anonymous mapping (checked against MAP_FAILED), one per page, all below `len`.
        unsafe {
            libc::close(p[1]);
            let mut b = 0u8;
            libc::read(p[0], std::ptr::from_mut::<u8>(&mut b).cast(), 1);
            let len = 256usize << 20;
            let a = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if a == libc::MAP_FAILED {
                libc::_exit(2);
            }
            let a = a.cast::<u8>();
            let mut i = 0;
            while i < len {
                *a.add(i) = 1;
                i += 4096;
            }
            libc::_exit(0);
        }
    }
    // SAFETY: closes the parent's copy of the read end, once.
    unsafe { libc::close(p[0]) };
    let placed = m.add_pid(pid);
    let res = match placed {
        Ok(()) => {
            // SAFETY: writes 1 byte of a static literal to our pipe.
            unsafe { libc::write(p[1], b"x".as_ptr().cast(), 1) };
            ev.wait(Some(Duration::from_secs(20))).unwrap()
        }
        Err(_) => OomWait::Timeout,
    };
    let mut st = 0;
    // SAFETY: closes our write end once; `pid` is our own child (kill and waitpid take
    // integers) and `st` a live c_int for its status.
    unsafe {
        libc::close(p[1]);
        if !matches!(res, OomWait::Oom(_)) {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::waitpid(pid, &mut st, 0);
    }
    placed.unwrap();
    assert!(matches!(res, OomWait::Oom(n) if n >= 1), "{res:?}");
    assert!(
        libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGKILL,
        "child status {st:#x}"
    );
    std::thread::sleep(Duration::from_millis(20));
    m.destroy().unwrap();
    assert_eq!(
        ev.wait(Some(Duration::from_secs(5))).unwrap(),
        OomWait::Gone
    );
    assert!(ev.next().is_none());
}
