//! Masked and read-only paths (after pivot_root).

use std::os::fd::AsRawFd;

use super::{
    mountapi::{mount_setattr, move_mount_to_path, open_tree},
    options::MOUNT_ATTR_RDONLY,
};
use crate::error::{Error, Result};
use crate::sys::{cstr_s, mount};

/// Masked paths (after pivot_root): files get /dev/null bound over them; directories one
/// read-only empty tmpfs, mounted over the first and bound over the others (runc 1.5: one
/// superblock instead of one per directory); a path named twice is masked once.
pub fn mask_paths(paths: &[String]) -> Result<()> {
    let mut shared_tmpfs: Option<std::ffi::CString> = None;
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
            mount(Some(c"/dev/null"), &c, None, libc::MS_BIND, None)
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
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(Error::os(format!("linux.maskedPaths: {p}"), e)),
        }
    }
    Ok(())
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
