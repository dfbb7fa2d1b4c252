//! Masked and read-only paths (after pivot_root).

use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

use super::{
    mountapi::{mount_setattr, move_mount_follow, move_mount_to_path, open_tree},
    options::MOUNT_ATTR_RDONLY,
};
use crate::error::{Error, Result};
use crate::sys::{cstr_s, mount};

/// Masked paths (after pivot_root): files get /dev/null bound over them; directories one
/// read-only empty tmpfs, mounted over the first and bound over the others (runc 1.5: one
/// superblock instead of one per directory); a path named twice is masked once.
pub fn mask_paths(paths: &[String]) -> Result<()> {
    let mut shared_tmpfs: Option<std::ffi::CString> = None;
    // The container's /dev/null, opened once it is needed and checked to be the null device.
    let mut null: Option<OwnedFd> = None;
    for (i, p) in paths.iter().enumerate() {
        if paths[..i].contains(p) {
            continue;
        }
        let c = cstr_s(p);
        // One stat decides: a failed mount(2) is not cheap (the kernel waits for an RCU grace
        // period to free the half-made mount), so never try the wrong kind first.
        let Ok(st) = rustix::fs::stat(c.as_c_str()) else {
            continue; // missing: nothing to mask
        };
        let r = if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            let null = match &null {
                Some(fd) => fd,
                None => null.insert(
                    open_dev_null()
                        .map_err(|e| Error::os(format!("linux.maskedPaths: {p}: /dev/null"), e))?,
                ),
            };
            bind_null(null, &c)
        } else if let Some(first) = &shared_tmpfs {
            mount(Some(first), &c, None, libc::MS_BIND, None)
        } else {
            let r = mount(Some(c"tmpfs"), &c, Some(c"tmpfs"), libc::MS_RDONLY, None);
            if r.is_ok() {
                shared_tmpfs = Some(c.clone());
            }
            r
        };
        match r {
            Ok(()) => {}
            // The target went away since the stat: nothing to mask. (The source is an open
            // descriptor: its ENOENT cannot come here.)
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(Error::os(format!("linux.maskedPaths: {p}"), e)),
        }
    }
    Ok(())
}

/// The container's /dev/null for masking, as runc does since CVE-2025-31133: where /dev is not
/// the runtime's own tmpfs (a bind, or the image's own /dev), it is the image's or a shared
/// volume's, and a symlink there (to /proc/sys/kernel/core_pattern, say) would have bound
/// that file, writable, over a masked path; a missing one would have left the paths unmasked.
/// Not followed, and refused unless it is the character device 1:3.
fn open_dev_null() -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::open(
        c"/dev/null",
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || (major, minor) != (1, 3) {
        let what = match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => "a symlink".to_string(),
            libc::S_IFCHR => format!("the character device {major}:{minor}"),
            _ => "not a device".to_string(),
        };
        return Err(std::io::Error::other(format!(
            "is {what}, not the null device 1:3 (refused: CVE-2025-31133)"
        )));
    }
    Ok(fd)
}

/// Bind the opened null device over `target` (followed if a symlink, as mount(2) follows it):
/// a clone of the descriptor's mount, no path lookup of the source. Kernels without
/// open_tree (before 5.2) bind through /proc/self/fd.
fn bind_null(null: &OwnedFd, target: &std::ffi::CStr) -> std::io::Result<()> {
    match open_tree(null.as_raw_fd(), c"", false) {
        Ok(tree) => move_mount_follow(tree.as_raw_fd(), target),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => mount(
            Some(&crate::sys::fd_path(null)),
            target,
            None,
            libc::MS_BIND,
            None,
        ),
        Err(e) => Err(e),
    }
}

/// Read-only paths (after pivot_root): a recursive bind of the path onto itself, read-only.
pub fn readonly_paths(paths: &[String]) -> Result<()> {
    for p in paths {
        let c = cstr_s(p);
        let tree = match open_tree(libc::AT_FDCWD, &c, true) {
            Ok(t) => t,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(Error::os(format!("linux.readonlyPaths: {p}"), e)),
        };
        mount_setattr(tree.as_raw_fd(), true, MOUNT_ATTR_RDONLY, 0)
            .map_err(|e| Error::os(format!("linux.readonlyPaths: {p}"), e))?;
        // The path's last component not followed (as an O_NOFOLLOW open of it would not).
        move_mount_to_path(tree.as_raw_fd(), c.as_c_str())
            .map_err(|e| Error::os(format!("linux.readonlyPaths: {p}"), e))?;
    }
    Ok(())
}
