//! The new mount API: open_tree, mount_setattr, move_mount, and a bind made with them.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::options::{bind_attrs, MountOpts};
use crate::sys::{cvt_l, fd_path, mount};

#[repr(C)]
pub(super) struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub(super) const OPEN_TREE_CLONE: u32 = 1;
pub(super) const AT_RECURSIVE: u32 = 0x8000;
pub(super) const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
pub(super) const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;

pub fn open_tree(dirfd: RawFd, path: &CStr, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    if path.to_bytes().is_empty() {
        flags |= libc::AT_EMPTY_PATH as u32;
    }
    // SAFETY: open_tree(2) reads the borrowed NUL-terminated `path`, alive for the call; dirfd and
    // flags are integers.
    let fd = cvt_l(unsafe { libc::syscall(libc::SYS_open_tree, dirfd, path.as_ptr(), flags) })?;
    // SAFETY: open_tree succeeded, so `fd` is a new descriptor (a detached tree) that nothing else
    // owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub(super) fn mount_setattr(fd: RawFd, recursive: bool, set: u64, clr: u64) -> io::Result<()> {
    if set == 0 && clr == 0 {
        return Ok(());
    }
    mount_setattr_raw(
        fd,
        recursive,
        MountAttr {
            attr_set: set,
            attr_clr: clr,
            propagation: 0,
            userns_fd: 0,
        },
    )
}

pub(super) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// Id-map the detached tree `tree` (from [`open_tree`]) through the user namespace `userns`
/// (an fd on /proc/PID/ns/user): its top mount, or every mount of it with `recursive`.
pub fn set_idmap(tree: &OwnedFd, recursive: bool, userns: RawFd) -> io::Result<()> {
    mount_setattr_raw(
        tree.as_raw_fd(),
        recursive,
        MountAttr {
            attr_set: MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: userns as u64,
        },
    )
}

pub(super) fn mount_setattr_raw(fd: RawFd, recursive: bool, attr: MountAttr) -> io::Result<()> {
    let mut flags = libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: the path is the empty C string literal (AT_EMPTY_PATH: `fd` itself), and `attr` is a
    // live #[repr(C)] mount_attr (the kernel's 32-byte MOUNT_ATTR_SIZE_VER0 layout) whose size is
    // passed with it; the kernel only reads both.
    cvt_l(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            std::ptr::from_ref::<MountAttr>(&attr),
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

pub fn move_mount_to_fd(tree: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: both paths are the empty C string literal (the F/T_EMPTY_PATH flags: the fds
    // themselves); the fds and flags are integers.
    cvt_l(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// Bind `tree` (from open_tree) onto `target` with attributes `flags` applied first.
pub(super) fn attach_bind(tree: OwnedFd, target: &OwnedFd, opts: &MountOpts) -> io::Result<()> {
    let (set, clr) = bind_attrs(opts);
    mount_setattr(tree.as_raw_fd(), false, set, clr)?;
    if opts.rec_attr_set != 0 || opts.rec_attr_clr != 0 {
        mount_setattr(tree.as_raw_fd(), true, opts.rec_attr_set, opts.rec_attr_clr)?;
    }
    move_mount_to_fd(tree.as_raw_fd(), target.as_raw_fd())?;
    for p in &opts.propagation {
        mount(None, &fd_path(&tree), None, *p, None)?;
    }
    Ok(())
}
