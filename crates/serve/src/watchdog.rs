//! Sandboxes and zygotes die with the engine, however it dies.
//!
//! A clean shutdown kills and removes everything itself; a SIGKILL (or a crash, an OOM kill)
//! leaves it no chance. The engine's children get EOF on their sockets when it dies, but a
//! handler in an endless loop never reads its socket, and a frozen sandbox cannot. So before
//! the engine starts (no thread yet, nothing of it open), it forks a watchdog: a small
//! process that keeps only the read end of a pipe whose write end only the engine holds.
//! When the read end gives EOF the engine is gone, and the watchdog kills and removes the
//! pool cgroups in the engine's record, as `sprout-serve cleanup` would (only the cgroups
//! the engine made, found through its record in the run dir; mounts are left to the next
//! start or `cleanup`), then exits.
//!
//! Not a parent-death signal: PR_SET_PDEATHSIG fires when the *thread* that forked a child
//! ends (the engine forks from pool threads that come and go), and a zygote's children must
//! outlive the zygote when it is evicted.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::Config;

/// Fork the watchdog. The engine keeps the write end (close-on-exec: no sandbox, zygote or
/// pip inherits it) for as long as it lives.
pub fn start(cfg: &Config) -> std::io::Result<()> {
    // Both ends close-on-exec.
    let (r, w) = std::io::pipe()?;
    let (r, w) = (OwnedFd::from(r), OwnedFd::from(w));
    // SAFETY: the process has one thread here (daemon() calls us before the engine or the
    // tokio runtime start any), so the child may run ordinary Rust code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        drop(r);
        // Kept open (never closed) until the engine's exit.
        std::mem::forget(w);
        return Ok(());
    }
    drop(w);
    // SAFETY: getppid cannot fail; the engine is our parent until it dies.
    let engine = unsafe { libc::getppid() };
    // A panic in the watchdog must end the watchdog, never unwind back into the engine's
    // start-up code on this side of the fork.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| watch(r, cfg, engine)));
    // SAFETY: _exit takes an integer and ends this (child) process without running the
    // engine's exit handlers.
    unsafe { libc::_exit(70) }
}

/// `run_dir/engine.lock`, flocked: blocking (the engine, waiting for a previous watchdog to
/// finish), or not (None: someone else holds it).
pub fn lock_run_dir(run: &Path, block: bool) -> std::io::Result<Option<OwnedFd>> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .mode(0o600)
        .open(run.join("engine.lock"))?;
    let op = if block {
        libc::LOCK_EX
    } else {
        libc::LOCK_EX | libc::LOCK_NB
    };
    loop {
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(Some(f.into()));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(None),
            _ => return Err(e),
        }
    }
}

fn watch(r: OwnedFd, cfg: &Config, engine: i32) -> ! {
    // SAFETY: plain syscalls on our own process; the name is a NUL-terminated literal.
    unsafe {
        libc::prctl(
            libc::PR_SET_NAME,
            c"sprout-serve-wd".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        // Ctrl-C in a terminal reaches the whole process group: the engine shuts down
        // cleanly then, and we must still be here if it does not.
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        // Nothing the engine's parent gave it (stdio aside: our stderr is its log) stays
        // open here, and no working directory is kept busy.
        let keep = r.as_raw_fd() as u32;
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
        libc::chdir(c"/".as_ptr());
    }
    let mut b = [0u8; 1];
    loop {
        // SAFETY: reads into a valid one-byte buffer from a pipe fd we own.
        let n = unsafe { libc::read(r.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        if n == 0 || (n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
        {
            break;
        }
    }
    // The engine's lock goes with its last fds, a moment after the pipe's; a new engine may
    // take it first (then it cleans up, and we leave).
    let t = Instant::now();
    let lock = loop {
        match lock_run_dir(&cfg.run_dir, false) {
            Ok(Some(l)) => break Some(l),
            Ok(None) => {}
            // No run dir: a clean shutdown removed it; nothing is left to do.
            Err(_) => break None,
        }
        let named = std::fs::read_to_string(cfg.run_dir.join("engine.pid")).unwrap_or_default();
        if named.trim() != engine.to_string() || t.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let named = std::fs::read_to_string(cfg.run_dir.join("engine.pid")).unwrap_or_default();
    if lock.is_none() || named.trim() != engine.to_string() {
        // SAFETY: as below.
        unsafe { libc::_exit(0) }
    }
    if let Ok(c) = crate::engine::clean_recorded(cfg) {
        if c.found > 0 {
            eprintln!(
                "sprout-serve: watchdog: the engine is gone; killed and removed {} of its {} pool cgroups",
                c.found - c.left.len(),
                c.found
            );
        }
    }
    // SAFETY: ends this process without running the engine's atexit handlers or destructors
    // (they belong to the engine).
    unsafe { libc::_exit(0) }
}
