//! Shared helpers for the integration tests in `tests/`: the harness of
//! `sprout-test-support` (see there for `SPROUT_BIN`, `SPROUT_GLOBAL_ARGS`
//! and the isolation rules) for the [`Integration`] suite.
//!
//! Run the tests against runc with
//! `SPROUT_BIN=/usr/sbin/runc cargo test -p sprout-integration-tests`.
//! Every test gets its own `--root` below `/run/sprout-itest/<pid>/` and its
//! own scratch directory below `/tmp/sprout-itest/<pid>/`; every container's
//! `linux.cgroupsPath` is the relative `sprout-test/<id>`.

use std::fs;
use std::time::Duration;

/// The integration suite: `/run/sprout-itest`, `/tmp/sprout-itest`, cgroups
/// `sprout-test/<id>`, ids `it<pid>-...`, markers `SPROUT_ITEST_CALL` and
/// `SPROUT_ITEST_ID`.
pub enum Integration {}

impl sprout_test_support::Suite for Integration {
    const RUN_DIR: &'static str = "sprout-itest";
    const CGROUP_PARENT: &'static str = "sprout-test";
    const ID_PREFIX: &'static str = "it";
    const CALL_MARKER: &'static str = "SPROUT_ITEST_CALL";
    const CONTAINER_MARKER: &'static str = "SPROUT_ITEST_ID";
    const POLL_TIMEOUT: Duration = Duration::from_secs(30);
    const BUNDLE_DIR_IS_ID: bool = false;
    const TRACK_UNMARKED: bool = true;
}

sprout_test_support::suite_api!(Integration);

/// Receive one fd over a unix stream with SCM_RIGHTS (the console socket's pty master).
pub fn recv_fd(sock: std::os::fd::RawFd) -> std::os::fd::RawFd {
    // SAFETY: the iovec covers the live local `data` (the kernel writes at most its 4096 bytes)
    // and the control buffer is the live 256-byte `cbuf` with msg_controllen = its length; an
    // all-zero msghdr is valid. CMSG_FIRSTHDR stays within what the kernel set in
    // msg_controllen and is checked for null before CMSG_DATA is read, unaligned (a byte
    // buffer).
    unsafe {
        let mut data = [0u8; 4096];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        let mut cbuf = [0u8; 256];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.len();
        let n = libc::recvmsg(sock, &mut msg, 0);
        assert!(n >= 0, "recvmsg: {}", std::io::Error::last_os_error());
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        assert!(
            !cmsg.is_null(),
            "no SCM_RIGHTS message on the console socket"
        );
        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const std::os::fd::RawFd)
    }
}

/// Accept one connection on `sock_path`, receive the pty master (`--console-socket`) and read
/// it. The text comes back on the channel as soon as it ends with the line `last` (so a test
/// can check it before it kills the container: a hangup may discard what the pty held and the
/// reader had not read yet), else once the slave side is closed.
pub fn pty_reader(
    sock_path: &std::path::Path,
    last: Option<&'static str>,
) -> std::sync::mpsc::Receiver<String> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    let listener = std::os::unix::net::UnixListener::bind(sock_path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((stream, _)) = listener.accept() {
            let fd = recv_fd(stream.as_raw_fd());
            // SAFETY: the fd was just received and is owned by nothing else.
            let mut master = unsafe { fs::File::from_raw_fd(fd) };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let mut sent = false;
            loop {
                match master.read(&mut chunk) {
                    Ok(0) | Err(_) => break, // EIO once the slave side is closed
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                if let Some(l) = last.filter(|_| !sent) {
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    if text.ends_with(&format!("{l}\r\n")) || text.ends_with(&format!("{l}\n")) {
                        let _ = tx.send(text);
                        sent = true;
                    }
                }
            }
            if !sent {
                let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
            }
        }
    });
    rx
}

/// A container running `sleep 1000`, created and started, its process exec'd: for `exec`.
pub fn running(ctx: &Ctx) -> Bundle<'_> {
    let b = ctx.bundle(&["sleep", "1000"]);
    b.create().assert_ok();
    b.start_and_wait_exec();
    b
}
