//! Mount targets inside the rootfs, made and opened without following a symlink out of it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::sys::{cstr, open_in_root};

/// Make `path` (absolute, container view) exist inside `root`, as a directory or (if `file`) an
/// empty file, without ever following a symlink out of the rootfs. Returns an O_PATH fd on it.
pub fn ensure_in_root(root: &OwnedFd, path: &Path, file: bool) -> Result<OwnedFd> {
    ensure_in_root_existed(root, path, file).map(|(fd, _)| fd)
}

/// [`ensure_in_root`], and whether `path` existed already (false: this call made it).
///
/// A dangling symlink on the way (`/etc/hosts -> /tmp/hosts`, `/jump -> /tmp/foo/bar`) is
/// followed inside the rootfs and what it points at is made, as runc does; only when the plain
/// attempt failed with ENOENT, so the usual start costs nothing more.
pub fn ensure_in_root_existed(root: &OwnedFd, path: &Path, file: bool) -> Result<(OwnedFd, bool)> {
    match ensure_in_root_inner(root, path, file) {
        Err(e) if e.errno() == Some(libc::ENOENT) => {
            let real = follow_in_root(root, path)
                .map_err(|e| Error::os(format!("resolving {} in the rootfs", path.display()), e))?;
            if real.as_path() == path {
                return Err(e);
            }
            ensure_in_root_inner(root, &real, file)
        }
        r => r,
    }
}

/// `path` with every symlink on it followed inside `root` the way RESOLVE_IN_ROOT does (an
/// absolute target starts at the root, `..` stops there), also where the target is missing.
/// ELOOP past 40 links.
fn follow_in_root(root: &OwnedFd, path: &Path) -> io::Result<PathBuf> {
    let mut todo: Vec<std::ffi::OsString> = Vec::new();
    let push = |todo: &mut Vec<std::ffi::OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_os_string()),
                Component::ParentDir => todo.push("..".into()),
                _ => {}
            }
        }
    };
    push(&mut todo, path);
    let mut done = PathBuf::from("/");
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            done.pop();
            continue;
        }
        let link = open_in_root(root.as_raw_fd(), &done, libc::O_PATH | libc::O_DIRECTORY, 0)
            .ok()
            .and_then(|dir| readlink_at(&dir, &c));
        match link {
            Some(target) => {
                links += 1;
                if links > 40 {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                if target.is_absolute() {
                    done = PathBuf::from("/");
                }
                push(&mut todo, &target);
            }
            None => done.push(&c),
        }
    }
    Ok(done)
}

/// The target of the symlink `name` in `dir`; None if it is no symlink (or missing).
fn readlink_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let cname = cstr(name);
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    let n = rustix::fs::readlinkat_raw(dir, cname.as_c_str(), &mut buf[..]).ok()?;
    if n == 0 {
        return None;
    }
    buf.truncate(n);
    Some(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}

fn ensure_in_root_inner(root: &OwnedFd, path: &Path, file: bool) -> Result<(OwnedFd, bool)> {
    match open_in_root(root.as_raw_fd(), path, libc::O_PATH, 0) {
        Ok(fd) => return Ok((fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => {
            return Err(Error::os(
                format!("resolving {} in the rootfs", path.display()),
                e,
            ))
        }
    }
    // Usually only the last component is missing: create it in its (existing) parent.
    if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
        if let Ok(dir) = open_in_root(
            root.as_raw_fd(),
            parent,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        ) {
            return create_in(root, &dir, name, path, file).map(|fd| (fd, false));
        }
    }
    // Walk down, creating what is missing.
    let mut cur = open_in_root(
        root.as_raw_fd(),
        Path::new("/"),
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )
    .map_err(|e| Error::os("opening the rootfs", e))?;
    let mut sofar = PathBuf::from("/");
    let comps: Vec<_> = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    for (i, c) in comps.iter().enumerate() {
        sofar.push(c);
        let last = i + 1 == comps.len();
        let next = match open_in_root(root.as_raw_fd(), &sofar, libc::O_PATH, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let name = cstr(c.as_os_str());
                // mkdirat/mknodat on an O_PATH dirfd works; the name is a single component.
                match make_at(&cur, &name, last && file) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => {
                        return Err(Error::os(
                            format!("creating {} in the rootfs", sofar.display()),
                            e.into(),
                        ))
                    }
                }
                open_in_root(root.as_raw_fd(), &sofar, libc::O_PATH, 0).map_err(|e| {
                    Error::os(format!("resolving {} in the rootfs", sofar.display()), e)
                })?
            }
            Err(e) => {
                return Err(Error::os(
                    format!("resolving {} in the rootfs", sofar.display()),
                    e,
                ))
            }
        };
        cur = next;
    }
    Ok((cur, false))
}

/// mknodat(`name`, S_IFREG | 0644, 0) (`file`) or mkdirat(`name`, 0755) in `dir` (an O_PATH
/// dirfd works for both; `name` is a single component).
fn make_at(dir: &OwnedFd, name: &std::ffi::CStr, file: bool) -> rustix::io::Result<()> {
    use rustix::fs::{FileType, Mode};
    if file {
        rustix::fs::mknodat(
            dir,
            name,
            FileType::RegularFile,
            Mode::from_raw_mode(0o644),
            0,
        )
    } else {
        rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))
    }
}

/// Create `name` (a directory, or an empty file) in `dir` and open it; EEXIST (a race with
/// another creator) is fine. `path` is the full container path, for errors and the reopen.
pub(super) fn create_in(
    root: &OwnedFd,
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    path: &Path,
    file: bool,
) -> Result<OwnedFd> {
    let cname = cstr(name);
    match make_at(dir, &cname, file) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => {
            return Err(Error::os(
                format!("creating {} in the rootfs", path.display()),
                e.into(),
            ))
        }
    }
    open_in_root(root.as_raw_fd(), path, libc::O_PATH, 0)
        .map_err(|e| Error::os(format!("resolving {} in the rootfs", path.display()), e))
}
