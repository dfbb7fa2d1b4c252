//! Test helpers. The fork helpers are the test crates' shared ones (tests/support, module
//! `child`, which states the rule for code after fork: it may allocate, it takes no other lock).

pub use sprout_test_support::{exec_in_child, in_child};

use std::fmt::Debug;

pub fn check_eq<T: PartialEq + Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

pub fn proc_status() -> String {
    std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default()
}

/// Value of `Key:` in /proc/<pid>/status, trimmed ("" if absent).
pub fn status_field(status: &str, key: &str) -> String {
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix(key).and_then(|r| r.strip_prefix(':')) {
            return rest.trim().to_string();
        }
    }
    String::new()
}

pub fn current_umask() -> u32 {
    // SAFETY: umask(2) takes an integer and always succeeds; the old value is restored right
    // away (the tests call this in a forked, single-threaded child).
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m as u32
    }
}
