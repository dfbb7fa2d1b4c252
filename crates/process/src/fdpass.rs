//! File descriptors over unix sockets (SCM_RIGHTS): one implementation for the runtime (its
//! parent ⇄ init channel, console and pidfd sockets) and for sprout-serve (the engine ⇄
//! sandbox/zygote wire, and a cold spare's hand-over between its raw clone and exec).
//!
//! Neither direction allocates: the control buffer is on the stack, sized for the kernel's
//! most fds per message ([`MAX_FDS`], SCM_MAX_FD), so [`send`] and [`recv_into`] may run in a
//! child between a raw clone(2) and execve. [`recv`] is the owning form: every fd received is
//! an [`OwnedFd`] (close-on-exec: MSG_CMSG_CLOEXEC), and an fd that does not fit what the
//! caller asked for is closed at once, never left open in the process.

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

/// Most fds the kernel passes in one message (SCM_MAX_FD); [`send`] refuses more (EINVAL).
pub const MAX_FDS: usize = 253;

/// Bytes of a control buffer that holds one SCM_RIGHTS header with [`MAX_FDS`] fds
/// (CMSG_SPACE(MAX_FDS * 4)), plus 8 for rustix's alignment of its start to a cmsghdr.
const CBUF_BYTES: usize = rustix::cmsg_space!(ScmRights(MAX_FDS)) + 8;

/// `fd` borrowed for one call. A negative number is refused with EBADF, what the kernel
/// answers for it, before any BorrowedFd (which cannot hold -1) is made.
fn borrow(fd: RawFd) -> io::Result<BorrowedFd<'static>> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: a non-negative fd number, used only for the syscalls of this module's calls
    // while the caller keeps it open (the kernel answers EBADF for one that is not).
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// What one [`recv_into`] got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recv {
    /// Payload bytes in the buffer (0 with no fds: end of stream).
    pub len: usize,
    /// Fds stored at the start of the caller's slice.
    pub nfds: usize,
    /// The message was longer than the buffer and its tail is lost (MSG_TRUNC: datagram and
    /// seqpacket sockets; a stream socket keeps the rest for the next read).
    pub truncated: bool,
    /// More fds came than the caller had room for (they were closed), or the kernel cut the
    /// control data (MSG_CTRUNC).
    pub fds_dropped: bool,
}

/// What one [`recv`] got: the payload length, the fds (owned, close-on-exec) and the
/// truncation flags of [`Recv`].
#[derive(Debug)]
pub struct Received {
    pub len: usize,
    pub fds: Vec<OwnedFd>,
    pub truncated: bool,
    pub fds_dropped: bool,
}

/// One sendmsg(2) of `data` with `fds` attached (SCM_RIGHTS; none: a plain send), with
/// MSG_NOSIGNAL, retried on EINTR. Returns the bytes sent: on a stream socket that may be
/// fewer than `data.len()` (the fds went with the first of them; see [`send_all`]). Fds need
/// at least one byte to ride on: `fds` with an empty `data` is EINVAL, and so are more than
/// [`MAX_FDS`]. No allocation.
pub fn send(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_FDS || (!fds.is_empty() && data.is_empty()) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let sock = borrow(sock)?;
    let mut borrowed = [sock; MAX_FDS];
    for (b, &fd) in borrowed.iter_mut().zip(fds) {
        *b = borrow(fd)?;
    }
    let mut space = [MaybeUninit::<u8>::uninit(); CBUF_BYTES];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        // Fits: CBUF_BYTES holds MAX_FDS fds.
        control.push(SendAncillaryMessage::ScmRights(&borrowed[..fds.len()]));
    }
    let iov = [IoSlice::new(data)];
    loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// [`send`], then the rest of `data` (plain sends) until all of it is written: the fds ride
/// on the first byte(s) that went.
pub fn send_all(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut done = send(sock, data, fds)?;
    while done < data.len() {
        let n = send(sock, &data[done..], &[])?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}

/// One recvmsg(2) into `buf` (MSG_CMSG_CLOEXEC, retried on EINTR); the fds that came with it
/// are stored at the start of `fds`, which the caller then owns (`Recv::nfds` of them). Fds
/// beyond `fds.len()` are closed here (`Recv::fds_dropped`). No allocation, no lock: usable
/// between a raw clone and exec.
pub fn recv_into(sock: RawFd, buf: &mut [u8], fds: &mut [RawFd]) -> io::Result<Recv> {
    let sock = borrow(sock)?;
    let mut space = [MaybeUninit::<u8>::uninit(); CBUF_BYTES];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r.map_err(io::Error::from)?,
        }
    };
    let mut got = Recv {
        len: msg.bytes,
        nfds: 0,
        truncated: msg.flags.contains(ReturnFlags::TRUNC),
        fds_dropped: msg.flags.contains(ReturnFlags::CTRUNC),
    };
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            for fd in rights {
                if got.nfds < fds.len() {
                    fds[got.nfds] = fd.into_raw_fd();
                    got.nfds += 1;
                } else {
                    // Installed in this process by recvmsg for us alone: closed here.
                    drop(fd);
                    got.fds_dropped = true;
                }
            }
        }
    }
    Ok(got)
}

/// [`recv_into`] with up to [`MAX_FDS`] fds, each returned owned (close-on-exec). Whatever
/// the flags say, no fd received stays open without an owner.
pub fn recv(sock: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut raw: [RawFd; MAX_FDS] = [-1; MAX_FDS];
    let got = recv_into(sock, buf, &mut raw)?;
    let fds = raw[..got.nfds]
        .iter()
        // SAFETY: recv_into installed these fds in this process for us alone; each is
        // wrapped exactly once.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    Ok(Received {
        len: got.len,
        fds,
        truncated: got.truncated,
        fds_dropped: got.fds_dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn pair(ty: libc::c_int) -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two fds into the live local 2-element `fds`.
        let r = unsafe {
            libc::socketpair(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())
        };
        assert_eq!(r, 0, "socketpair: {}", io::Error::last_os_error());
        // SAFETY: socketpair succeeded: two new fds that nothing else owns.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// A pipe; what is written to `w` can be read back through a received copy of `r`.
    fn pipe() -> (std::fs::File, std::fs::File) {
        let mut p = [0; 2];
        // SAFETY: pipe2 writes two fds into the live local `p`.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: two new fds that nothing else owns.
        unsafe {
            (
                std::fs::File::from_raw_fd(p[0]),
                std::fs::File::from_raw_fd(p[1]),
            )
        }
    }

    fn cloexec(fd: &OwnedFd) -> bool {
        // SAFETY: F_GETFD takes an integer and only reads the fd table.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
    }

    #[test]
    fn zero_one_three_fds() {
        use std::io::{Read, Write};
        for ty in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET] {
            for k in [0usize, 1, 3] {
                let (a, b) = pair(ty);
                let pipes: Vec<_> = (0..k).map(|_| pipe()).collect();
                let raw: Vec<RawFd> = pipes.iter().map(|(r, _)| r.as_raw_fd()).collect();
                send_all(a.as_raw_fd(), b"hello", &raw).unwrap();
                let mut buf = [0u8; 16];
                let got = recv(b.as_raw_fd(), &mut buf).unwrap();
                assert_eq!(&buf[..got.len], b"hello", "type {ty}, {k} fds");
                assert_eq!(got.fds.len(), k, "type {ty}");
                assert!(!got.truncated && !got.fds_dropped);
                for (i, fd) in got.fds.iter().enumerate() {
                    assert!(cloexec(fd), "received fd {i} is not close-on-exec");
                    // A new fd for the same pipe: what goes into its write end comes out here.
                    (&pipes[i].1).write_all(&[b'a' + i as u8]).unwrap();
                    let mut r = std::fs::File::from(fd.try_clone().unwrap());
                    let mut c = [0u8; 1];
                    r.read_exact(&mut c).unwrap();
                    assert_eq!(c[0], b'a' + i as u8);
                    assert_ne!(fd.as_raw_fd(), pipes[i].0.as_raw_fd());
                }
            }
        }
    }

    #[test]
    fn fds_need_a_byte_and_at_most_max() {
        let (a, _b) = pair(libc::SOCK_STREAM);
        let (r, _w) = pipe();
        let e = send(a.as_raw_fd(), b"", &[r.as_raw_fd()]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let many = vec![r.as_raw_fd(); MAX_FDS + 1];
        let e = send(a.as_raw_fd(), b"x", &many).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        // MAX_FDS exactly goes through, and all of them come back.
        let (a, b) = pair(libc::SOCK_SEQPACKET);
        send(a.as_raw_fd(), b"x", &many[..MAX_FDS]).unwrap();
        let mut buf = [0u8; 1];
        let got = recv(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(got.fds.len(), MAX_FDS);
        assert!(!got.fds_dropped);
    }

    /// A payload longer than the buffer on a seqpacket socket: the tail is lost and flagged,
    /// and the fds still arrive, owned.
    #[test]
    fn truncated_payload_keeps_the_fds() {
        let (a, b) = pair(libc::SOCK_SEQPACKET);
        let (r1, _w1) = pipe();
        let (r2, _w2) = pipe();
        send(
            a.as_raw_fd(),
            b"0123456789",
            &[r1.as_raw_fd(), r2.as_raw_fd()],
        )
        .unwrap();
        let mut buf = [0u8; 4];
        let got = recv(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(got.len, 4);
        assert_eq!(&buf, b"0123");
        assert!(got.truncated);
        assert_eq!(got.fds.len(), 2);
        assert!(got.fds.iter().all(cloexec));
    }

    /// More fds than the caller has room for: the extra ones are closed, not leaked. The fds
    /// sent are pipe write ends: once every copy of one is closed, its read end sees EOF.
    #[test]
    fn extra_fds_are_closed() {
        use std::io::Read;
        let (a, b) = pair(libc::SOCK_SEQPACKET);
        let pipes: Vec<_> = (0..3).map(|_| pipe()).collect();
        let raw: Vec<RawFd> = pipes.iter().map(|(_, w)| w.as_raw_fd()).collect();
        send(a.as_raw_fd(), b"abc", &raw).unwrap();
        let mut one = [-1; 1];
        let mut buf = [0u8; 8];
        let got = recv_into(b.as_raw_fd(), &mut buf, &mut one).unwrap();
        assert_eq!((got.len, got.nfds), (3, 1));
        assert!(got.fds_dropped);
        // SAFETY: recv_into gave us this fd to own.
        let kept = unsafe { OwnedFd::from_raw_fd(one[0]) };
        let mut readers = Vec::new();
        for (r, w) in pipes {
            drop(w);
            // SAFETY: F_SETFL on an fd this test owns.
            unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
            readers.push(r);
        }
        let mut c = [0u8; 1];
        // The first pipe's write end lives on in `kept`: no EOF there.
        let e = (&readers[0]).read(&mut c).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        for (i, r) in readers.iter().enumerate().skip(1) {
            assert_eq!(
                (&*r).read(&mut c).unwrap(),
                0,
                "pipe {i}: a received copy of its write end is still open"
            );
        }
        drop(kept);
        assert_eq!((&readers[0]).read(&mut c).unwrap(), 0);
    }

    /// A stream message longer than the first sendmsg takes still arrives whole
    /// (send_all), with the fds on its first byte.
    #[test]
    fn send_all_large_stream_message() {
        use std::io::Read;
        let (a, b) = pair(libc::SOCK_STREAM);
        let (r, _w) = pipe();
        let big: Vec<u8> = (0..4 << 20).map(|i| i as u8).collect();
        let big2 = big.clone();
        let t = std::thread::spawn(move || {
            send_all(a.as_raw_fd(), &big2, &[r.as_raw_fd()]).unwrap();
            drop(a);
        });
        let mut first = [0u8; 1];
        let got = recv(b.as_raw_fd(), &mut first).unwrap();
        assert_eq!((got.len, got.fds.len()), (1, 1));
        let mut rest = Vec::new();
        std::fs::File::from(b).read_to_end(&mut rest).unwrap();
        t.join().unwrap();
        assert_eq!(first[0], big[0]);
        assert_eq!(rest, big[1..]);
    }
}
