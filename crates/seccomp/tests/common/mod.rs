#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use oci_spec::runtime::LinuxSeccomp;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "sprout-seccomp-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn profile(v: serde_json::Value) -> LinuxSeccomp {
    serde_json::from_value(v).expect("valid LinuxSeccomp")
}

pub fn podman_profile() -> LinuxSeccomp {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/podman-default.json");
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    profile(spec["linux"]["seccomp"].clone())
}

/// Runs `f` in a forked child (which sets no_new_privs first) and returns its wait status.
/// `f` must not allocate or take locks: the parent is multi-threaded.
pub fn in_child(f: impl FnOnce() -> i32) -> libc::c_int {
    // SAFETY: fork in the multi-threaded test harness: the child runs only prctl (integers
    // only), `f` (which by this function's contract neither allocates nor takes a lock another
    // thread might have held at the fork) and _exit, so it never returns into the harness.
    // The parent waits for exactly its own child with a live `status` out-pointer.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                libc::_exit(100);
            }
            let code = f();
            libc::_exit(code);
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        status
    }
}

/// The child's exit code; panics (with the signal) if it was killed.
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        panic!("child killed by signal {}", libc::WTERMSIG(status));
    } else {
        panic!("child status {status:#x}");
    }
}

/// A raw syscall's outcome: Ok(return value) or Err(errno). Allocation-free.
/// Only for syscalls whose arguments are all integers (pointer arguments 0), as every caller
/// passes: the kernel then reads or writes none of this process's memory.
pub fn sys(
    nr: libc::c_long,
    a: libc::c_long,
    b: libc::c_long,
    c: libc::c_long,
) -> Result<i64, i32> {
    // SAFETY: integer arguments only (see above); __errno_location returns this thread's
    // errno slot, valid for the life of the thread.
    unsafe {
        let r = libc::syscall(nr, a, b, c);
        if r == -1 {
            Err(*libc::__errno_location())
        } else {
            Ok(r as i64)
        }
    }
}

/// The effective uid of this process.
pub fn euid() -> libc::uid_t {
    // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
    unsafe { libc::geteuid() }
}

/// The entry file of `profile` in `dir`.
pub fn entry_path(dir: &Path, p: &LinuxSeccomp) -> PathBuf {
    dir.join(sprout_seccomp::key(p))
}
