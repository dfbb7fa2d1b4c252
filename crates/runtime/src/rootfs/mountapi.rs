//! The new mount API: open_tree, mount_setattr, move_mount, and a bind made with them.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::options::{
    attr_from_flags, attr_names, bind_attrs, bind_replace_attrs, locked_attrs_from_statfs,
    MountOpts, MOUNT_ATTR_NODIRATIME, MOUNT_ATTR__ATIME,
};
use crate::sys::{cvt, cvt_l, fd_path, mount};

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

/// [`mount_setattr`] of `tree`'s top mount, which also becomes private: a clone keeps its
/// source's propagation (a slave of the host's peer group, in a container's mount namespace),
/// where a new mount has none (and checkpointing refuses a master it cannot reach).
pub(super) fn mount_setattr_private(tree: RawFd, set: u64, clr: u64) -> io::Result<()> {
    mount_setattr_raw(
        tree,
        false,
        MountAttr {
            attr_set: set,
            attr_clr: clr,
            propagation: libc::MS_PRIVATE,
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

/// Attach `tree` at `path`, whose last component is not followed if it is a symlink (no
/// MOVE_MOUNT_T_SYMLINKS: as an O_PATH|O_NOFOLLOW open of it), without an fd for the target.
pub fn move_mount_to_path(tree: RawFd, path: &CStr) -> io::Result<()> {
    move_mount_at(tree, path, 0)
}

/// Attach `tree` at `path`, following `path` if it is a symlink (MOVE_MOUNT_T_SYMLINKS), as
/// mount(2) does.
pub fn move_mount_follow(tree: RawFd, path: &CStr) -> io::Result<()> {
    const MOVE_MOUNT_T_SYMLINKS: u32 = 0x10;
    move_mount_at(tree, path, MOVE_MOUNT_T_SYMLINKS)
}

/// move_mount(2) of `tree` (F_EMPTY_PATH) to `path` from the cwd, with `flags` added.
fn move_mount_at(tree: RawFd, path: &CStr, flags: u32) -> io::Result<()> {
    // SAFETY: the source path is the empty C string literal (F_EMPTY_PATH: `tree` itself), the
    // target a borrowed NUL-terminated string alive for the call; fds and flags are integers.
    cvt_l(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | flags,
        )
    })
    .map(drop)
}

/// Bind `tree` (from open_tree) onto `target` with attributes `flags` applied first.
pub(super) fn attach_bind(tree: OwnedFd, target: &OwnedFd, opts: &MountOpts) -> io::Result<()> {
    let (set, clr) = bind_attrs(opts);
    mount_setattr(tree.as_raw_fd(), false, set, clr)?;
    attach_rest(tree, target, opts)
}

/// A bind mount of the config's `mounts`: `tree` gets the flags its options name and no others
/// ([`bind_replace_attrs`], runc's semantics), then is attached to `target`.
///
/// In a user namespace the flags of an inherited mount are locked: clearing one fails (EPERM).
/// Then, as runc: a locked flag the options clear explicitly (`rw` on a read-only source) or an
/// atime they name that differs from the source's is an error; the other locked flags of the
/// source are kept and the attributes applied again.
pub(super) fn attach_configured_bind(
    tree: OwnedFd,
    target: &OwnedFd,
    opts: &MountOpts,
) -> io::Result<()> {
    if let Some((set, clr)) = bind_replace_attrs(opts) {
        match mount_setattr(tree.as_raw_fd(), false, set, clr) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                let locked = source_locked_attrs(&tree)?;
                let (set, clr) = keep_locked(set, clr, opts, locked)?;
                mount_setattr(tree.as_raw_fd(), false, set, clr).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "with the source's locked flags ({}) kept: {e}",
                            attr_names(locked)
                        ),
                    )
                })?;
            }
            r => r?,
        }
    }
    attach_rest(tree, target, opts)
}

/// The attributes of the mount `tree` that a user namespace locks (statvfs's ST_* flags).
fn source_locked_attrs(tree: &OwnedFd) -> io::Result<u64> {
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs writes one statvfs into `st`, a live exclusive borrow; `tree` is open.
    cvt(unsafe { libc::fstatvfs(tree.as_raw_fd(), &mut st) })?;
    Ok(locked_attrs_from_statfs(st.f_flag as u64))
}

/// `set`/`clr` with the source's locked attributes `locked` kept, or the error runc gives when
/// the options clear one of them or name an atime other than the source's.
fn keep_locked(set: u64, clr: u64, opts: &MountOpts, locked: u64) -> io::Result<(u64, u64)> {
    const ATIME: u64 = MOUNT_ATTR__ATIME | MOUNT_ATTR_NODIRATIME;
    let cleared = attr_from_flags(opts.clear) & locked;
    if cleared != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "cannot clear the source's locked flags {} in this user namespace: Operation not permitted",
                attr_names(cleared)
            ),
        ));
    }
    if clr & MOUNT_ATTR__ATIME != 0 && set & ATIME != locked & ATIME {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "cannot change the source's locked atime flags ({}) in this user namespace: Operation not permitted",
                attr_names(locked & ATIME)
            ),
        ));
    }
    let keep = locked & !ATIME;
    Ok((set | keep, clr & !keep))
}

fn attach_rest(tree: OwnedFd, target: &OwnedFd, opts: &MountOpts) -> io::Result<()> {
    if opts.rec_attr_set != 0 || opts.rec_attr_clr != 0 {
        mount_setattr(tree.as_raw_fd(), true, opts.rec_attr_set, opts.rec_attr_clr)?;
    }
    move_mount_to_fd(tree.as_raw_fd(), target.as_raw_fd())?;
    for p in &opts.propagation {
        mount(None, &fd_path(&tree), None, *p, None)?;
    }
    Ok(())
}
