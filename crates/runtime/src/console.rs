//! process.terminal: the container's pty. The pty is opened inside the container (its /dev/pts),
//! the slave becomes the process's stdio and controlling terminal, and the master is sent over
//! the --console-socket with SCM_RIGHTS (what containerd, podman's conmon and runc expect).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::error::{Error, Result};
use crate::sys::{cvt, send_fd};

/// Connect to the console socket (parent side, before clone: the child inherits the connection,
/// so it never needs to reach a host path from inside the container).
pub fn connect(path: &Path) -> Result<OwnedFd> {
    let s = UnixStream::connect(path)
        .map_err(|e| Error::os(format!("--console-socket {}", path.display()), e))?;
    Ok(s.into())
}

/// Open a new pty inside the container, hand the master over `socket`, and make the slave our
/// stdio and (with `ctty`) controlling terminal. `exec` leaves the last step to the process it
/// spawns (trampoline.rs), which must be the session leader.
pub fn setup_pty(socket: RawFd, size: Option<(u64, u64)>, ctty: bool) -> Result<()> {
    let master = unsafe {
        libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if master < 0 {
        return Err(Error::last_os("process.terminal: opening /dev/ptmx"));
    }
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    cvt(unsafe { libc::unlockpt(master.as_raw_fd()) })
        .map_err(|e| Error::os("process.terminal: unlockpt", e))?;
    // TIOCGPTPEER opens the slave through the master: no path lookup in /dev/pts.
    let slave = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY,
        )
    };
    if slave < 0 {
        return Err(Error::last_os("process.terminal: opening the pty slave"));
    }
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    if let Some((h, w)) = size {
        let ws = libc::winsize {
            ws_row: h as u16,
            ws_col: w as u16,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    }
    let mut name = [0 as libc::c_char; 64];
    unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_bytes()
        .to_vec();
    send_fd(socket, &name, master.as_raw_fd())
        .map_err(|e| Error::os("--console-socket: sending the pty master", e))?;
    drop(master);
    unsafe {
        if ctty {
            libc::setsid();
            if libc::ioctl(slave.as_raw_fd(), libc::TIOCSCTTY, 0) < 0 {
                return Err(Error::last_os("process.terminal: TIOCSCTTY"));
            }
        }
        for fd in 0..3 {
            if libc::dup2(slave.as_raw_fd(), fd) < 0 {
                return Err(Error::last_os("process.terminal: dup2"));
            }
        }
    }
    Ok(())
}
