//! The parent ⇄ container-init channel: a SOCK_SEQPACKET socketpair, so every message keeps its
//! boundaries and EOF means the other side is gone. A message is one tag byte and a payload.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::sys::cvt;

/// child → parent: please write the uid/gid maps (payload empty).
pub const MAPS: u8 = b'U';
/// child → parent: the init forked the container's pid 1 (`Plan::fork_for_pid`); payload: its pid.
pub const PID1: u8 = b'I';
/// parent → child: continue (maps written, cgroup joined, hooks run).
pub const GO: u8 = b'G';
/// parent → child: the cgroup directories exist (not yet joined); payload = the binds of the
/// cgroup mount (`rootfs::encode_cgroup_binds`). Optional: sent only when the init can mount
/// its cgroups before it is moved in (no cgroup namespace, cgroupfs driver, v1/hybrid).
pub const DIRS: u8 = b'D';
/// parent → child, after DIRS, when `InitCtx::self_join`: the v1 cgroup directories the init
/// joins itself at GO (`sprout_cgroups::SelfJoin`); payload = name\0dir\0 pairs, none when
/// the runtime moves it in after all.
pub const JOIN: u8 = b'J';
/// parent → child, first: the new network namespace, made beside the runtime's work by its
/// helper (netns.rs), to join instead of unsharing one; payload "lo" when lo is up in it. Without
/// an fd the helper failed: the init makes the namespace itself (and reports its own error).
pub const NETNS: u8 = b'N';
/// child → parent: run the createRuntime / prestart hooks now.
pub const HOOKS: u8 = b'H';
/// child → parent: setup done, waiting for `start`; payload = encoded phase trace.
pub const READY: u8 = b'R';
/// child → parent: setup done, the exec trampoline follows (EOF: it runs and waits for `start`;
/// TRAMPOLINE_OFF: it could not run, the init waits itself); payload = encoded phase trace.
pub const READY_EXEC: u8 = b'W';
/// child → parent: running without the exec trampoline; payload = why (logged as a warning).
pub const TRAMPOLINE_OFF: u8 = b'T';
/// child → parent: setup failed; payload = the error (`Error::to_wire`: kind, errno and the
/// one-line message; a bare message is read as a plain one).
pub const ERROR: u8 = b'E';
/// child → parent: seccomp listener fd attached (payload empty).
pub const LISTENER: u8 = b'L';
/// parent → child, before GO: an O_PATH fd on the source of bind mount `mounts[i]` (payload =
/// `i` in decimal), opened by the runtime in the init's mount namespace with the runtime's own
/// credentials. Sent only when the init is in a new user namespace, whose root may not be able
/// to look the source up (a 0700 directory of the host's root): as runc and crun, the runtime
/// opens it, the init only mounts it.
pub const SOURCE: u8 = b'S';
/// parent → child, before GO: the detached, id-mapped tree (open_tree + MOUNT_ATTR_IDMAP) of
/// bind mount `mounts[i]` (payload = `i` in decimal), for the init to attach (`crate::idmap`).
pub const TREE: u8 = b'M';
/// child → parent, after GO: make the id-mapped tree of `mounts[i]` now (payload = `i` in
/// decimal): its source lies inside the rootfs and may be on a mount an earlier entry made, so
/// the runtime clones it in the init's mount namespace when the init reaches it, and answers
/// with TREE (or fails the create).
pub const TREE_REQ: u8 = b'Q';

pub struct Channel {
    fd: OwnedFd,
}

impl Channel {
    pub fn pair() -> io::Result<(Channel, Channel)> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair writes two fds into the live local 2-element `fds`.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: socketpair succeeded, so fds[0] and fds[1] are two new descriptors that nothing
        // else owns, each wrapped once.
        unsafe {
            Ok((
                Channel {
                    fd: OwnedFd::from_raw_fd(fds[0]),
                },
                Channel {
                    fd: OwnedFd::from_raw_fd(fds[1]),
                },
            ))
        }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn send(&self, tag: u8, payload: &[u8]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(1 + payload.len());
        buf.push(tag);
        buf.extend_from_slice(payload);
        loop {
            // SAFETY: send reads buf.len() bytes from the live Vec `buf`; the channel's fd is
            // borrowed (open).
            let n = unsafe {
                libc::send(
                    self.raw(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            return Ok(());
        }
    }

    pub fn send_with_fd(&self, tag: u8, fd: RawFd) -> io::Result<()> {
        crate::sys::send_fd(self.raw(), &[tag], fd)
    }

    /// One message with a payload and an fd.
    pub fn send_fd_payload(&self, tag: u8, payload: &[u8], fd: RawFd) -> io::Result<()> {
        let mut buf = Vec::with_capacity(1 + payload.len());
        buf.push(tag);
        buf.extend_from_slice(payload);
        crate::sys::send_fd(self.raw(), &buf, fd)
    }

    /// Receive one message; `(0, "")` means EOF (the peer exited).
    pub fn recv(&self) -> io::Result<(u8, String, Option<OwnedFd>)> {
        let mut buf = vec![0u8; 8192];
        let (n, fd) = crate::sys::recv_fd(self.raw(), &mut buf)?;
        if n == 0 {
            return Ok((0, String::new(), fd));
        }
        Ok((buf[0], String::from_utf8_lossy(&buf[1..n]).into_owned(), fd))
    }

    /// Block until the parent says GO (child side). EOF means the parent died: stop.
    pub fn wait_go(&self) -> io::Result<()> {
        let (tag, _, _) = self.recv()?;
        if tag == GO {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "parent went away",
            ))
        }
    }
}
