//! Process file descriptors: a handle on one process that a reused pid number cannot
//! redirect. Shared by the runtime (its init and `kill`) and sprout-serve (placing what a
//! zygote forks).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::process::{Pid, PidfdFlags};

/// `pidfd_open(pid, 0)`.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // The kernel's answer for a pid <= 0, which rustix's Pid cannot hold.
    let pid = Pid::from_raw(pid.max(0)).ok_or(io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_open(pid, PidfdFlags::empty())?)
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`; signal 0 only asks whether the process is still
/// there (running or a zombie: its pid is not free for another).
pub fn pidfd_send_signal(pidfd: &OwnedFd, sig: i32) -> io::Result<()> {
    // SAFETY: the pidfd is borrowed (open for the call); a null siginfo is allowed (the kernel
    // fills in a SI_USER one) and flags are 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
