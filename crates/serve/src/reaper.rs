//! The engine is a child subreaper: sandboxes forked by zygotes (and the pid-namespace
//! intermediates) are re-parented to it. One thread reaps every child with waitpid(-1) and
//! hands exit codes to whoever waits for a specific pid (pip).

use crate::locked::Locked;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

struct Reaper {
    exits: Mutex<HashMap<i32, (i32, Instant)>>,
    cv: Condvar,
}

fn reaper() -> &'static Reaper {
    static R: OnceLock<Reaper> = OnceLock::new();
    R.get_or_init(|| Reaper {
        exits: Mutex::new(HashMap::new()),
        cv: Condvar::new(),
    })
}

pub fn start() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes integers only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(|| loop {
            let mut status = 0;
            // SAFETY: `status` is a live c_int for the kernel to fill.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
            if pid < 0 {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            };
            let r = reaper();
            let mut m = r.exits.locked();
            m.insert(pid, (code, Instant::now()));
            // Forget exits nobody asked for after a while.
            if m.len() > 4096 {
                m.retain(|_, (_, t)| t.elapsed() < Duration::from_secs(60));
            }
            r.cv.notify_all();
        })
        .expect("reaper thread");
}

/// Exit code of `pid` (a child of ours), or None after `timeout`.
pub fn wait_pid(pid: i32, timeout: Duration) -> Option<i32> {
    let r = reaper();
    let deadline = Instant::now() + timeout;
    let mut m = r.exits.locked();
    loop {
        if let Some((c, _)) = m.remove(&pid) {
            return Some(c);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        m = r.cv.wait_timeout(m, deadline - now).unwrap().0;
    }
}
