//! Engine <-> sandbox wire format: 4-byte little-endian length + JSON; file descriptors
//! (SCM_RIGHTS) ride on the first byte of a message. Blocking std sockets: every sandbox
//! conversation runs on a blocking-pool thread with SO_RCVTIMEO as its deadline.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

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
    // First byte with the fds, then the rest.
    // SAFETY: CMSG_SPACE is arithmetic on its argument only.
    let space = unsafe { libc::CMSG_SPACE((fds.len() * 4) as u32) } as usize;
    // u64s, not bytes: the cmsghdr written at its start needs 8-byte alignment.
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut _,
        iov_len: 1,
    };
    // SAFETY: msghdr is plain C data (integers and pointers): all-zero is a valid value.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf.as_mut_ptr().cast();
    mh.msg_controllen = space;
    // SAFETY: msg_controllen (`space`) >= CMSG_LEN(fds.len() * 4), so CMSG_FIRSTHDR returns a
    // non-null, 8-aligned header at the start of `cbuf` (space bytes, live and exclusively
    // ours), and its data area holds the fds.len() * 4 bytes copied from `fds` (a different
    // allocation: no overlap).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&mh);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fds.len() * 4);
    }
    loop {
        // SAFETY: `mh` points at the live `iov` (1 byte of the non-empty `msg`; the kernel
        // only reads it, whatever the *mut) and the live `cbuf` of `space` bytes.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
        if r == 1 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    (&*sock).write_all(&msg[1..])
}

pub fn recv(sock: &UnixStream) -> io::Result<Vec<u8>> {
    let mut hdr = [0u8; 4];
    (&*sock).read_exact(&mut hdr)?;
    let n = u32::from_le_bytes(hdr) as usize;
    if n > MAX_REPLY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("sandbox message of {n} bytes"),
        ));
    }
    let mut body = vec![0u8; n];
    (&*sock).read_exact(&mut body)?;
    Ok(body)
}

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

pub fn recv_json(sock: &UnixStream) -> io::Result<serde_json::Value> {
    let b = recv(sock)?;
    serde_json::from_slice(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A close-on-exec socketpair (SOCK_STREAM).
pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
    UnixStream::pair()
}
