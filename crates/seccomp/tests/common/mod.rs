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

#[allow(unused_imports)]
pub use sprout_test_support::exit_code;

/// Runs `f` in a forked child that sets no_new_privs first (exit code 100 if it cannot), as a
/// container's init does before its filter; returns the child's wait status. The child is
/// `sprout_test_support::in_child_status`'s: `f` may allocate, takes no lock another thread
/// could hold, and nothing but `_exit` runs after it (so a filter `f` loads restricts only `f`).
pub fn in_nnp_child(f: impl FnOnce() -> i32) -> libc::c_int {
    sprout_test_support::in_child_status(|| {
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes integers only and affects this child alone.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return 100;
        }
        f()
    })
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
