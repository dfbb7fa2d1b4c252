//! Running test code in a forked child: [`in_child`] (checks that report a message),
//! [`in_child_status`] (how the child ended: exit code or signal) and [`exec_in_child`]
//! (set up, then execv). One rule for all three, the rule of code that runs after `fork` in a
//! test binary:
//!
//! - The child is a copy of the calling thread only, and the test harness is multi-threaded:
//!   a lock that another thread held at the fork stays locked in the child for ever.
//! - The closure **may allocate**: the test binaries are glibc builds, and glibc's `fork()`
//!   takes every malloc arena lock before forking and re-initialises them in the child, so
//!   the heap is usable there.
//! - The closure **takes no other lock** another thread could hold: no `println!`/`eprintln!`
//!   (the stdout/stderr locks), no `std::env::set_var`/`var` (the environment lock), no
//!   Mutex of the test. It reports through its return value (and [`in_child`]'s message).
//! - After the closure returns the child only `_exit`s (no atexit handlers, no destructors of
//!   the parent's data), so a test may leave the child in any state: under a seccomp filter
//!   that forbids everything but `exit_group`, or with its ids dropped.
//! - The closure **does not panic on purpose**: a panic is caught and ends the child with
//!   [`PANICKED`], but printing its message takes std's panic-output lock, which another thread
//!   of the harness holds while it reports a panic of its own: a child forked at that moment
//!   hangs in its panic for ever. A check that can fail returns an error instead.

/// Exit code of a child whose closure panicked.
pub const PANICKED: i32 = 255;

/// Forks; the child runs `f` and `_exit`s with the code it returns (see the module's rule).
fn fork_child(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork in the multi-threaded harness: the child runs only `f` under the module's
    // rule (no lock another thread may hold; malloc is re-initialised by glibc's fork) and
    // _exit, so it never returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(PANICKED);
        // SAFETY: ends the child without running the harness' atexit handlers or unwinding.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Reaps our own child `pid`; its wait status.
fn reap(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child, writing its status into the live local `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return status;
        }
        assert!(
            std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR),
            "waitpid({pid}): {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A pipe whose ends are closed on drop (and on exec).
struct Pipe {
    read: libc::c_int,
    write: libc::c_int,
}

impl Pipe {
    fn new() -> Pipe {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a live [c_int; 2], the two slots pipe2(2) writes.
        let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
        Pipe {
            read: fds[0],
            write: fds[1],
        }
    }

    fn close_write(&mut self) {
        if self.write >= 0 {
            // SAFETY: our write end, closed once (then marked closed).
            unsafe { libc::close(self.write) };
            self.write = -1;
        }
    }

    /// Writes all of `b` to the write end (best effort: errors end the write).
    fn write_all(&self, b: &[u8]) {
        let mut off = 0;
        while off < b.len() {
            // SAFETY: writes b.len() - off bytes starting at b[off], all inside `b`.
            let n = unsafe { libc::write(self.write, b[off..].as_ptr().cast(), b.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
    }

    /// Everything until EOF on the read end (the write end must be closed here first).
    fn read_to_end(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads at most buf.len() bytes into the live local `buf`.
            let n = unsafe { libc::read(self.read, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if n <= 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.close_write();
        // SAFETY: our read end, closed once.
        unsafe { libc::close(self.read) };
    }
}

/// Forks, runs `f` in the child (under the module's rule) and returns the child's wait status
/// (`libc::WIFEXITED`/`WEXITSTATUS`, `WIFSIGNALED`/`WTERMSIG`): for tests about how the child
/// ends (an exit code of their own, death by SIGSYS).
pub fn in_child_status(f: impl FnOnce() -> i32) -> libc::c_int {
    reap(fork_child(f))
}

/// The exit code in a wait status; panics (naming the signal) if the child was killed.
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        panic!("child killed by signal {}", libc::WTERMSIG(status));
    } else {
        panic!("child status {status:#x}");
    }
}

/// Forks, runs the checks `f` in the child (under the module's rule) and panics in the parent,
/// with `f`'s message, if `f` returned an error, panicked or the child was killed.
pub fn in_child(f: impl FnOnce() -> Result<(), String>) {
    let mut pipe = Pipe::new();
    let pid = fork_child(|| match f() {
        Ok(()) => 0,
        Err(m) => {
            pipe.write_all(m.as_bytes());
            1
        }
    });
    pipe.close_write();
    let msg = pipe.read_to_end();
    let status = reap(pid);
    let msg = String::from_utf8_lossy(&msg);
    assert!(
        libc::WIFEXITED(status),
        "child killed by signal {}: {msg}",
        libc::WTERMSIG(status)
    );
    match libc::WEXITSTATUS(status) {
        0 => {}
        PANICKED => panic!("child panicked: {msg}"),
        c => panic!("child failed ({c}): {msg}"),
    }
}

/// Forks; in the child runs `setup` (under the module's rule), then `execv(argv[0], argv)`
/// with stdout on a pipe. Returns (exit code, or 128 + signal; stdout). When `setup` fails its
/// message is returned as stdout with code 100. `argv` is converted before the fork, so the
/// exec path itself allocates nothing.
pub fn exec_in_child(setup: impl FnOnce() -> Result<(), String>, argv: &[&str]) -> (i32, String) {
    let cargs: Vec<std::ffi::CString> = argv
        .iter()
        .map(|a| std::ffi::CString::new(*a).unwrap())
        .collect();
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let mut pipe = Pipe::new();
    let pid = fork_child(|| {
        let msg = match setup() {
            Ok(()) => {
                // SAFETY: dup2 takes two fds of ours; `ptrs` is a NULL-terminated array of
                // pointers into `cargs` (NUL-terminated CStrings), both alive across execv.
                unsafe {
                    libc::dup2(pipe.write, 1);
                    libc::execv(ptrs[0], ptrs.as_ptr());
                }
                format!("execv: {}", std::io::Error::last_os_error())
            }
            Err(m) => m,
        };
        pipe.write_all(msg.as_bytes());
        100
    });
    pipe.close_write();
    let out = pipe.read_to_end();
    let status = reap(pid);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    (code, String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_child_status_reports_exit_codes_and_signals() {
        assert_eq!(exit_code(in_child_status(|| 7)), 7);
        let st = in_child_status(|| {
            // SAFETY: raise(2) takes an integer; SIGKILL ends this child only.
            unsafe { libc::raise(libc::SIGKILL) };
            0
        });
        assert!(libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGKILL);
        // (A panicking closure is not tried here: see the module's rule.)
    }

    #[test]
    fn in_child_runs_in_another_process_and_carries_the_message() {
        // SAFETY: getpid(2) takes no arguments and always succeeds.
        let parent = unsafe { libc::getpid() };
        in_child(|| {
            // SAFETY: as above.
            let me = unsafe { libc::getpid() };
            // Allocating in the child is allowed (the module's rule).
            let v: Vec<u8> = vec![1; 1 << 20];
            (me != parent && v.len() == 1 << 20)
                .then_some(())
                .ok_or_else(|| "same pid".to_string())
        });
        let long = "x".repeat(100_000); // more than a pipe's buffer
        let err = std::panic::catch_unwind(|| in_child(|| Err(long.clone()))).unwrap_err();
        let text = err.downcast_ref::<String>().unwrap();
        assert!(text.starts_with("child failed (1): xxx") && text.len() > 100_000);
    }

    #[test]
    fn exec_in_child_captures_stdout_and_setup_errors() {
        let (code, out) = exec_in_child(|| Ok(()), &["/bin/sh", "-c", "echo hi; exit 3"]);
        assert_eq!((code, out.as_str()), (3, "hi\n"));
        let (code, out) = exec_in_child(|| Err("no".into()), &["/bin/true"]);
        assert_eq!((code, out.as_str()), (100, "no"));
    }
}
