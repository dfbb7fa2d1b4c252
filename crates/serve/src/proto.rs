//! Engine <-> sandbox wire format: 4-byte little-endian length + JSON; file descriptors
//! (SCM_RIGHTS) ride on the first byte of a message. Blocking std sockets: every sandbox
//! conversation runs on a blocking-pool thread with SO_RCVTIMEO as its deadline.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use sprout_process::fdpass;

/// Largest message we accept from a sandbox or zygote (a reply is further capped by the
/// config's `max_reply_bytes`).
pub const MAX_REPLY: usize = 64 << 20;

/// Why [`recv_until`] gave no message.
#[derive(Debug)]
pub enum RecvError {
    /// The deadline passed first.
    Timeout,
    /// The message announced more bytes than the cap (none of them were read).
    TooLarge(usize),
    Io(io::Error),
}

pub fn send(sock: &UnixStream, body: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut msg = Vec::with_capacity(4 + body.len());
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(body);
    if fds.is_empty() {
        return (&*sock).write_all(&msg);
    }
    // The fds on the first byte alone (sprout-process's SCM_RIGHTS helper, shared with the
    // runtime), then the rest: the zygote reads that byte with recv_fds.
    fdpass::send_all(sock.as_raw_fd(), &msg[..1], fds)?;
    (&*sock).write_all(&msg[1..])
}

/// The largest control message the engine reads (a sandbox's "ready" or its start error, a
/// zygote's answers): they are small, but the code behind them is the tenants' (a handler
/// runs in the process that sends "ready"; a zygote imports their packages), and each is
/// parsed into a JSON tree, several times its size in memory.
pub const CONTROL_MAX: usize = 1 << 20;

/// One message, by an absolute deadline (however slowly its bytes come) and at most `cap`
/// bytes long: a peer that sends one byte at a time, or announces a huge message, costs
/// neither more time nor more memory than that. Leaves the socket's read timeout changed.
pub fn recv_until(sock: &UnixStream, deadline: Instant, cap: usize) -> Result<Vec<u8>, RecvError> {
    let read_all = |buf: &mut [u8]| -> Result<(), RecvError> {
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RecvError::Timeout);
            }
            // SO_RCVTIMEO has microsecond resolution; zero would mean "no timeout".
            let _ = sock.set_read_timeout(Some(left.max(Duration::from_micros(1))));
            match (&*sock).read(&mut buf[got..]) {
                Ok(0) => return Err(RecvError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(RecvError::Timeout)
                }
                Err(e) => return Err(RecvError::Io(e)),
            }
        }
        Ok(())
    };
    let mut hdr = [0u8; 4];
    read_all(&mut hdr)?;
    let n = u32::from_le_bytes(hdr) as usize;
    if n > cap {
        return Err(RecvError::TooLarge(n));
    }
    let mut body = vec![0u8; n];
    read_all(&mut body)?;
    Ok(body)
}

/// One control message (at most [`CONTROL_MAX`] bytes), whole by `deadline`: a sender that
/// trickles its bytes holds the reader no longer than that.
pub fn recv_json_until(sock: &UnixStream, deadline: Instant) -> io::Result<serde_json::Value> {
    let b = recv_until(sock, deadline, CONTROL_MAX).map_err(|e| match e {
        RecvError::Timeout => io::Error::new(io::ErrorKind::TimedOut, "no message in time"),
        RecvError::TooLarge(n) => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control message of {n} bytes (at most {CONTROL_MAX})"),
        ),
        RecvError::Io(e) => e,
    })?;
    serde_json::from_slice(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A close-on-exec socketpair (SOCK_STREAM).
pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
    UnixStream::pair()
}
