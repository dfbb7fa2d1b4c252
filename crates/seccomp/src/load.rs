//! Loading a prepared filter: one raw `seccomp(2)` call, no libseccomp, no allocation.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::{Error, Result};

const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;

/// Installs `filter` with `seccomp(SECCOMP_SET_MODE_FILTER, flags, &prog)`. Returns the listener
/// fd when `listener` (the flags then include SECCOMP_FILTER_FLAG_NEW_LISTENER).
///
/// The caller must have set no_new_privs or hold CAP_SYS_ADMIN in its user namespace.
pub fn load_filter(
    filter: &[libc::sock_filter],
    flags: u32,
    listener: bool,
) -> Result<Option<OwnedFd>> {
    if filter.is_empty() || filter.len() > crate::compile::BPF_MAXINSNS {
        return Err(Error::Io(std::io::Error::from_raw_os_error(libc::EINVAL)));
    }
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `filter`, which outlives the call; the kernel copies the program.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            libc::c_ulong::from(flags),
            std::ptr::from_ref::<libc::sock_fprog>(&prog),
        )
    };
    if rc < 0 {
        // io::Error::last_os_error does not allocate.
        return Err(Error::Io(std::io::Error::last_os_error()));
    }
    if listener {
        // SAFETY: with SECCOMP_FILTER_FLAG_NEW_LISTENER the return value is a new fd we own.
        Ok(Some(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) }))
    } else {
        Ok(None)
    }
}
