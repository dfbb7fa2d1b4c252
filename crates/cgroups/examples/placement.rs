//! Cost of placing a process into a container's cgroups on a v1/hybrid host, per write and
//! per strategy. The first cgroup.procs write after an idle period takes the global
//! cgroup_threadgroup_rwsem for writing, which (percpu rwsem -> rcu_sync_enter) waits for an
//! RCU grace period; writes that follow within about one grace period do not wait again.
//!   cargo run --release -p sprout-cgroups --example placement [rounds] [a]
//! ("a": only the per-write measurement A and B.)
//! Everything nests under this process's own cgroups; only children forked here are killed.
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sprout_cgroups::Manager;

const IDLE: Duration = Duration::from_millis(300);

fn dirs(m: &Manager, with_unified: bool) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = m
        .v1_paths()
        .map(|(c, d)| (c.to_string(), d.to_path_buf()))
        .collect();
    if with_unified {
        if let Some(u) = m.unified_path() {
            v.push(("unified".into(), u.to_path_buf()));
        }
    }
    v
}

fn write(p: &std::path::Path, s: &str) {
    std::fs::write(p, s).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
}

/// A child blocked on a pipe; `cgfd`: clone3(CLONE_INTO_CGROUP) into that cgroup2 dir.
struct Child {
    pid: i32,
    w: i32,
}
impl Child {
    fn spawn(cgfd: Option<i32>) -> Child {
        let mut p = [0i32; 2];
        // SAFETY: `p` is a live [c_int; 2], the two slots pipe2(2) writes.
        unsafe { assert_eq!(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC), 0) };
        let pid = match cgfd {
            // SAFETY: the child only reads its pipe and calls _exit (below): async-signal-safe
            // calls, no allocation, whatever threads the process has.
            None => unsafe { libc::fork() },
            Some(fd) => {
                #[repr(C)]
                #[derive(Default)]
                struct CloneArgs {
                    flags: u64,
                    pidfd: u64,
                    child_tid: u64,
                    parent_tid: u64,
                    exit_signal: u64,
                    stack: u64,
                    stack_size: u64,
                    tls: u64,
                    set_tid: u64,
                    set_tid_size: u64,
                    cgroup: u64,
                }
                let a = CloneArgs {
                    flags: 0x200000000, /* CLONE_INTO_CGROUP */
                    exit_signal: libc::SIGCHLD as u64,
                    cgroup: fd as u64,
                    ..Default::default()
                };
                // SAFETY: clone3 reads size_of::<CloneArgs>() bytes from the live `a`, laid out
                // as struct clone_args (repr(C), eleven u64: CLONE_ARGS_SIZE_VER2). Without
                // CLONE_VM and with no stack it behaves like fork: the child gets a copy of
                // this stack and runs the same async-signal-safe code as the fork above.
                unsafe {
                    libc::syscall(
                        libc::SYS_clone3,
                        std::ptr::from_ref::<CloneArgs>(&a),
                        std::mem::size_of::<CloneArgs>(),
                    ) as i32
                }
            }
        };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: closes the child's copy of the write end; reads at most 1 byte into the
            // live `b`; _exit never returns into the parent's code.
            unsafe {
                libc::close(p[1]);
                let mut b = 0u8;
                libc::read(p[0], std::ptr::from_mut::<u8>(&mut b).cast(), 1);
                libc::_exit(0);
            }
        }
        // SAFETY: closes the parent's copy of the read end, once.
        unsafe { libc::close(p[0]) };
        Child { pid, w: p[1] }
    }
}
impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: `w` is owned by this Child and closed only here (waking the child);
        // `pid` is our own child, reaped once, with a null status pointer (allowed).
        unsafe {
            libc::close(self.w);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Fork a child that writes "0" to each of `tasks` (timed in the child) and exits; µs.
fn self_join(tasks: &[std::ffi::CString]) -> f64 {
    let mut p = [0i32; 2];
    // SAFETY: `p` is a live [c_int; 2], the two slots pipe2(2) writes.
    unsafe { assert_eq!(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC), 0) };
    // SAFETY: the child makes raw syscalls on memory prepared before the fork (the CStrings,
    // a stack timespec) and calls _exit: no allocation, no locks.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: see above; every pointer is to live memory of this (copied) process.
        unsafe {
            let mut t0: libc::timespec = std::mem::zeroed();
            let mut t1: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t0);
            for t in tasks {
                let fd = libc::open(t.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    libc::_exit(1);
                }
                libc::close(fd);
            }
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t1);
            let ns: i64 = (t1.tv_sec - t0.tv_sec) * 1_000_000_000 + (t1.tv_nsec - t0.tv_nsec);
            libc::write(p[1], std::ptr::from_ref(&ns).cast(), 8);
            libc::_exit(0);
        }
    }
    let mut ns = 0i64;
    // SAFETY: closes our copy of the write end; reads 8 bytes into the live `ns`; reaps our
    // own child with a null status pointer; closes the read end once.
    unsafe {
        libc::close(p[1]);
        libc::read(p[0], std::ptr::from_mut(&mut ns).cast(), 8);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(p[0]);
    }
    assert!(ns > 0, "the child could not join");
    ns as f64 / 1000.0
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn stats(name: &str, v: &mut [f64]) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "  {name:<58} median {:>8.0}us  mean {:>8.0}us  min {:>7.0}us  max {:>8.0}us",
        v[v.len() / 2],
        mean,
        v[0],
        v[v.len() - 1]
    );
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let name = format!("sprout-placement-{}", std::process::id());
    let mut m = Manager::new(Some(&name), "x", false).unwrap();
    m.create().unwrap();
    let all = dirs(&m, true);
    let v1 = dirs(&m, false);
    let own: Vec<(String, String)> = std::fs::read_to_string("/proc/self/cgroup")
        .unwrap()
        .lines()
        .map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, c, p) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            (c.to_string(), p.to_string())
        })
        .collect();
    let own_dir = |c: &str, d: &PathBuf| -> PathBuf {
        // the container dir is <own>/<name>: its parent is our own cgroup
        let _ = c;
        d.parent().unwrap().to_path_buf()
    };
    let _ = own;
    println!(
        "layout {:?}: {} v1 hierarchies{}, {rounds} rounds, {IDLE:?} idle before each",
        m.layout(),
        v1.len(),
        if m.unified_path().is_some() {
            " + cgroup2 leaf"
        } else {
            ""
        }
    );

    // A. after idle: every write of one placement, in order.
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); all.len()];
    let mut total_a = Vec::new();
    let mut second = Vec::new();
    for _ in 0..rounds {
        let c = Child::spawn(None);
        std::thread::sleep(IDLE);
        let t0 = Instant::now();
        for (i, (_, d)) in all.iter().enumerate() {
            let t = Instant::now();
            write(&d.join("cgroup.procs"), &c.pid.to_string());
            per[i].push(us(t.elapsed()));
        }
        total_a.push(us(t0.elapsed()));
        // B. a second container placed right after (same GP window)
        let c2 = Child::spawn(None);
        let t = Instant::now();
        for (_, d) in &all {
            write(&d.join("cgroup.procs"), &c2.pid.to_string());
        }
        second.push(us(t.elapsed()));
    }
    println!("A. one placement after {IDLE:?} idle, per write:");
    for (i, (c, _)) in all.iter().enumerate() {
        stats(&format!("write #{i} {c}/cgroup.procs"), &mut per[i]);
    }
    stats("A. all writes of one placement", &mut total_a);
    stats(
        "B. the next placement right after (within the GP window)",
        &mut second,
    );

    if std::env::args().nth(2).as_deref() == Some("a") {
        std::thread::sleep(Duration::from_millis(50));
        m.destroy().unwrap();
        return;
    }

    // C. warm-up: a thread writes our own pid into our own (unchanged) pids cgroup at the
    // start of the work; the real placement comes `lead` later.
    let pids_own = v1
        .iter()
        .find(|(c, _)| c == "pids")
        .or(v1.first())
        .map(|(c, d)| own_dir(c, d))
        .unwrap();
    for lead_ms in [0u64, 1, 3, 10, 30] {
        let mut crit = Vec::new();
        for _ in 0..rounds {
            let c = Child::spawn(None);
            std::thread::sleep(IDLE);
            let p = pids_own.clone();
            let warm = std::thread::spawn(move || {
                write(&p.join("cgroup.procs"), &std::process::id().to_string())
            });
            std::thread::sleep(Duration::from_millis(lead_ms)); // other start-up work
            let t = Instant::now();
            for (_, d) in &all {
                write(&d.join("cgroup.procs"), &c.pid.to_string());
            }
            crit.push(us(t.elapsed()));
            warm.join().unwrap();
        }
        stats(
            &format!("C. warm-up write {lead_ms}ms before: placement (critical path)"),
            &mut crit,
        );
    }

    // D. hybrid: clone3(CLONE_INTO_CGROUP) into the cgroup2 leaf, then the v1 writes.
    if let Some(u) = m.unified_path() {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(u).unwrap();
        let (mut clone_t, mut v1_t) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            std::thread::sleep(IDLE);
            let t = Instant::now();
            let c = Child::spawn(Some(f.as_raw_fd()));
            clone_t.push(us(t.elapsed()));
            let t = Instant::now();
            for (_, d) in &v1 {
                write(&d.join("cgroup.procs"), &c.pid.to_string());
            }
            v1_t.push(us(t.elapsed()));
        }
        stats(
            "D. clone3(CLONE_INTO_CGROUP unified leaf) after idle",
            &mut clone_t,
        );
        stats("D. then the v1 writes", &mut v1_t);
        let mut fork_t = Vec::new();
        for _ in 0..rounds {
            std::thread::sleep(IDLE);
            let t = Instant::now();
            let _c = Child::spawn(None);
            fork_t.push(us(t.elapsed()));
        }
        stats("D. plain fork after idle (for comparison)", &mut fork_t);
    }

    // E. parent first: move ourselves into the container's v1 cgroups, fork (the child
    // inherits them), move ourselves back.
    let mut in_t = Vec::new();
    let mut fork_t = Vec::new();
    let mut back_t = Vec::new();
    let me = std::process::id().to_string();
    for _ in 0..rounds {
        std::thread::sleep(IDLE);
        let t = Instant::now();
        for (_, d) in &v1 {
            write(&d.join("cgroup.procs"), &me);
        }
        in_t.push(us(t.elapsed()));
        let t = Instant::now();
        let c = Child::spawn(None);
        fork_t.push(us(t.elapsed()));
        let t = Instant::now();
        for (c, d) in &v1 {
            write(&own_dir(c, d).join("cgroup.procs"), &me);
        }
        back_t.push(us(t.elapsed()));
        drop(c);
    }
    stats("E. parent moves itself in (all v1) after idle", &mut in_t);
    stats("E. fork (child inherits)", &mut fork_t);
    stats("E. parent moves back", &mut back_t);

    // F. the child moves itself: "0" to each v1 `tasks` (one thread, no pid: the kernel skips
    // the global rwsem), after idle and right after another; what sprout's init does.
    let tasks: Vec<std::ffi::CString> = v1
        .iter()
        .map(|(_, d)| std::ffi::CString::new(d.join("tasks").into_os_string().into_vec()).unwrap())
        .collect();
    let (mut idle_t, mut warm_t) = (Vec::new(), Vec::new());
    for i in 0..2 * rounds {
        if i % 2 == 0 {
            std::thread::sleep(IDLE);
        }
        let t = self_join(&tasks);
        if i % 2 == 0 {
            idle_t.push(t);
        } else {
            warm_t.push(t);
        }
    }
    stats(
        "F. the child writes \"0\" to each v1 tasks, after idle",
        &mut idle_t,
    );
    stats("F. the same right after another", &mut warm_t);

    // wait for children to be reaped, then clean up
    std::thread::sleep(Duration::from_millis(50));
    m.destroy().unwrap();
}
