//! Shared helpers for the real-host integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A cgroup name no other test run can collide with.
pub fn unique(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "sprout-cgtest-{tag}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The effective uid of this process.
pub fn euid() -> libc::uid_t {
    // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
    unsafe { libc::geteuid() }
}

/// Why these tests cannot run here, if they cannot.
pub fn skip_reason(want: &[sprout_cgroups::Layout]) -> Option<String> {
    if euid() != 0 {
        return Some("not root".into());
    }
    match sprout_cgroups::Layout::detect() {
        Ok(l) if want.contains(&l) => None,
        Ok(l) => Some(format!("host cgroup layout is {l:?}, test needs {want:?}")),
        Err(e) => Some(format!("no cgroups: {e}")),
    }
}

#[macro_export]
macro_rules! skip_unless {
    ($($l:expr),+) => {
        if let Some(why) = common::skip_reason(&[$($l),+]) {
            println!("SKIPPED {}: {why}", module_path!());
            eprintln!("SKIPPED {}: {why}", module_path!());
            return;
        }
    };
}

pub fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
        .trim()
        .to_string()
}

pub fn spawn_sleep() -> Child {
    Command::new("sleep")
        .arg("1000")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep")
}

/// Kill and reap a child we spawned, if still there (test cleanup on failure paths).
pub struct Reap(pub Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The test crates' one polling helper (tests/support): `wait_for(what, timeout, || cond.then_some(()))`.
#[allow(unused_imports)]
pub use sprout_test_support::wait_for;

/// The line of /proc/<pid>/cgroup for a hierarchy ("memory", or "" for cgroup2).
pub fn proc_cgroup(pid: u32, ctrl: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, c, p) = (it.next()?, it.next()?, it.next()?);
        c.split(',').any(|x| x == ctrl).then(|| p.to_string())
    })
}
