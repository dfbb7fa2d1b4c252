//! `--pidfd-socket PATH` (runc 1.2+, `create`, `run` and `exec`): the caller listens on a unix
//! socket and receives, with SCM_RIGHTS, a pidfd for the container's init (create/run) or the
//! exec'd process, to signal it with pidfd_send_signal(2) without any pid-reuse race.
//!
//! The socket is connected before anything is made (a bad path fails the command naming the
//! flag, nothing left behind) and the pidfd sent once the process exists.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::error::{Error, Result};

/// A connection to the caller's --pidfd-socket.
pub struct PidfdSocket {
    path: String,
    sock: OwnedFd,
}

impl PidfdSocket {
    pub fn connect(path: &Path) -> Result<PidfdSocket> {
        let path = path.display().to_string();
        let s = UnixStream::connect(&path)
            .map_err(|e| Error::os(format!("--pidfd-socket {path}"), e))?;
        Ok(PidfdSocket {
            path,
            sock: s.into(),
        })
    }

    /// Send `pidfd`; the message's bytes name it, as runc's (the receiver reads the fd).
    pub fn send(&self, pidfd: &OwnedFd) -> Result<()> {
        crate::sys::send_fd(self.sock.as_raw_fd(), b"pidfd", pidfd.as_raw_fd()).map_err(|e| {
            Error::os(
                format!("--pidfd-socket {}: sending the pidfd", self.path),
                e,
            )
        })
    }
}
