//! Test helpers: run a closure in a forked child and report back through a pipe + exit code.

use std::fmt::Debug;

/// Fork; run `f` in the child; the parent waits for it and panics with the child's message if
/// `f` returned an error or panicked. Every child is reaped.
pub fn in_child<F: FnOnce() -> Result<(), String>>(f: F) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a live [c_int; 2], the two slots pipe2(2) writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fork from the multi-threaded test harness: the child is a copy of this thread
    // only. It runs `f`, writes to the pipe and _exits, never returning into the harness.
    // glibc's malloc resets its locks in the child, so `f` and the message may allocate; a
    // lock held by another harness thread at the fork could only hang the child, and the
    // tests' `f` take none (they call the crate's setters and read /proc).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: the child's copy of the read end, closed once.
        unsafe { libc::close(fds[0]) };
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let (code, msg) = match res {
            Ok(Ok(())) => (0, String::new()),
            Ok(Err(m)) => (1, m),
            Err(_) => (2, "child panicked".to_string()),
        };
        let b = msg.as_bytes();
        let mut off = 0;
        while off < b.len() {
            // SAFETY: writes b.len() - off bytes starting at b[off], all inside `b`.
            let n = unsafe { libc::write(fds[1], b[off..].as_ptr().cast(), b.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        // SAFETY: leave without running the test harness' atexit handlers or unwinding into it.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: the parent's copy of the write end, closed once (so read() sees EOF).
    unsafe { libc::close(fds[1]) };
    let mut msg = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads at most buf.len() bytes into the live local `buf`.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        msg.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: our read end, closed once.
    unsafe { libc::close(fds[0]) };
    let mut status = 0;
    loop {
        // SAFETY: reaping our own child into the live local `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        assert!(
            std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR),
            "waitpid failed"
        );
    }
    let msg = String::from_utf8_lossy(&msg);
    assert!(
        libc::WIFEXITED(status),
        "child killed by signal {}: {msg}",
        libc::WTERMSIG(status)
    );
    assert_eq!(libc::WEXITSTATUS(status), 0, "child failed: {msg}");
}

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

/// Fork; in the child run `setup`, then execv(`argv[0]`, argv) with stdout on a pipe. Returns
/// (exit code, stdout); when `setup` fails its message is returned as stdout with code 100.
pub fn exec_in_child<F: FnOnce() -> Result<(), String>>(setup: F, argv: &[&str]) -> (i32, String) {
    let cargs: Vec<std::ffi::CString> = argv
        .iter()
        .map(|a| std::ffi::CString::new(*a).unwrap())
        .collect();
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let mut fds = [0; 2];
    // SAFETY: `fds` is a live [c_int; 2], the two slots pipe2(2) writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: as in `in_child`: the child (a copy of this thread only) runs `setup`, then
    // execs or _exits, never returning into the harness. `cargs`/`ptrs` were built before
    // the fork, so the exec path itself allocates nothing.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: the child's copy of the read end, closed once.
        unsafe { libc::close(fds[0]) };
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(setup));
        let msg = match res {
            Ok(Ok(())) => {
                // SAFETY: dup2 takes two fds of ours; `ptrs` is a NULL-terminated array of
                // pointers into `cargs` (NUL-terminated CStrings), both alive across execv.
                unsafe {
                    libc::dup2(fds[1], 1);
                    libc::execv(ptrs[0], ptrs.as_ptr());
                }
                format!("execv: {}", std::io::Error::last_os_error())
            }
            Ok(Err(m)) => m,
            Err(_) => "setup panicked".to_string(),
        };
        // SAFETY: writes msg.len() bytes of the live String `msg`; _exit never returns.
        unsafe {
            libc::write(fds[1], msg.as_ptr().cast(), msg.len());
            libc::_exit(100);
        }
    }
    // SAFETY: the parent's copy of the write end, closed once (so read() sees EOF).
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads at most buf.len() bytes into the live local `buf`.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: our read end, closed once.
    unsafe { libc::close(fds[0]) };
    let mut status = 0;
    // SAFETY: reaping our own child into the live local `status`.
    while unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        assert!(
            std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR),
            "waitpid failed"
        );
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    (code, String::from_utf8_lossy(&out).into_owned())
}
