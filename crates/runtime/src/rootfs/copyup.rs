//! `tmpcopyup`: a tmpfs mounted over a directory of the image starts with a copy of what that
//! directory held (podman's `--tmpfs` asks for it; runc and crun do it).
//!
//! The directory is opened before the tmpfs covers it; that fd still reads the covered tree.
//! The copy goes through fds only (`*at` calls relative to the two directories, never a path
//! that a symlink in the image could redirect): directories, regular files, symlinks, fifos and
//! device nodes, with their modes and owners. Only mounts with the option pay for it.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use crate::sys::{cvt, fstat};

/// Open `fd`'s directory for reading (from an O_PATH fd).
pub(super) fn open_dir(fd: &OwnedFd) -> io::Result<OwnedFd> {
    reopen(fd.as_raw_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)
}

fn reopen(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: openat reads the NUL-terminated `name`, alive for the call; `dir` is an open fd.
    let fd = cvt(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    })?;
    // SAFETY: openat succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Copy the tree under the directory `from` into the directory `to` (both open O_RDONLY), and
/// give `to` the mode and owner of `from`.
pub(super) fn copy_tree(from: &OwnedFd, to: &OwnedFd) -> io::Result<()> {
    let st = fstat(from.as_raw_fd())?;
    copy_dir(from, to, 0)?;
    // SAFETY: fchown/fchmod take integers; `to` is open.
    cvt(unsafe { libc::fchown(to.as_raw_fd(), st.st_uid, st.st_gid) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fchmod(to.as_raw_fd(), st.st_mode & 0o7777) })?;
    Ok(())
}

fn copy_dir(from: &OwnedFd, to: &OwnedFd, depth: u32) -> io::Result<()> {
    if depth > 128 {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    for name in list(from)? {
        copy_entry(from, to, &name, depth)?;
    }
    Ok(())
}

/// The names in the directory `dir` (without . and ..), read through a dup of it.
fn list(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let fd = reopen(dir.as_raw_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)?;
    // SAFETY: fdopendir takes ownership of the open fd on success (closedir closes it).
    let d = unsafe { libc::fdopendir(fd.as_raw_fd()) };
    if d.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(fd); // owned by `d` now
    let mut names = Vec::new();
    loop {
        // SAFETY: `d` is the open DIR from fdopendir; readdir returns null at the end.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: `e` points at the entry readdir just returned, valid until the next call;
        // d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    // SAFETY: `d` is the DIR opened above, closed once.
    unsafe { libc::closedir(d) };
    Ok(names)
}

fn copy_entry(from: &OwnedFd, to: &OwnedFd, name: &CStr, depth: u32) -> io::Result<()> {
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat reads `name` (NUL-terminated, alive) and writes one stat into `st`.
    cvt(unsafe {
        libc::fstatat(
            from.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    let (f, t) = (from.as_raw_fd(), to.as_raw_fd());
    let mode = st.st_mode & 0o7777;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {
            // SAFETY: mkdirat reads `name`; `t` is open.
            cvt(unsafe { libc::mkdirat(t, name.as_ptr(), 0o700) })?;
            let src = reopen(f, name, libc::O_RDONLY | libc::O_DIRECTORY)?;
            let dst = reopen(t, name, libc::O_RDONLY | libc::O_DIRECTORY)?;
            copy_dir(&src, &dst, depth + 1)?;
            set_owner_mode(&dst, &st, mode)
        }
        libc::S_IFREG => {
            let src = reopen(f, name, libc::O_RDONLY)?;
            // SAFETY: openat reads `name`; O_CREAT|O_EXCL makes a new file (mode 0600 until the
            // fchmod below), never following a symlink.
            let fd = cvt(unsafe {
                libc::openat(
                    t,
                    name.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                    0o600,
                )
            })?;
            // SAFETY: openat succeeded: a new descriptor that nothing else owns.
            let dst = unsafe { OwnedFd::from_raw_fd(fd) };
            let mut src_f = std::fs::File::from(src);
            let mut dst_f = std::fs::File::from(dst);
            io::copy(&mut src_f, &mut dst_f)?;
            set_owner_mode(&OwnedFd::from(dst_f), &st, mode)
        }
        libc::S_IFLNK => {
            let mut buf = vec![0u8; libc::PATH_MAX as usize];
            // SAFETY: readlinkat reads `name` and writes at most buf.len() bytes into `buf`.
            let n =
                unsafe { libc::readlinkat(f, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            buf.truncate(n as usize);
            let target = CString::new(buf).map_err(|_| io::ErrorKind::InvalidData)?;
            // SAFETY: symlinkat reads the two NUL-terminated strings, alive for the call.
            cvt(unsafe { libc::symlinkat(target.as_ptr(), t, name.as_ptr()) })?;
            chown_entry(t, name, &st)
        }
        libc::S_IFIFO | libc::S_IFCHR | libc::S_IFBLK | libc::S_IFSOCK => {
            // SAFETY: mknodat reads `name`; type, mode and device are integers.
            cvt(unsafe {
                libc::mknodat(
                    t,
                    name.as_ptr(),
                    st.st_mode & libc::S_IFMT | mode,
                    st.st_rdev,
                )
            })?;
            chown_entry(t, name, &st)
        }
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{}: unknown file type",
                std::ffi::OsStr::from_bytes(name.to_bytes()).to_string_lossy()
            ),
        )),
    }
}

fn set_owner_mode(fd: &OwnedFd, st: &libc::stat, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: fchown/fchmod take integers; `fd` is open. Owner first: chown clears set-id bits.
    cvt(unsafe { libc::fchown(fd.as_raw_fd(), st.st_uid, st.st_gid) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

/// The owner of `name` in `dir` (never through a symlink: a link gets its own owner).
fn chown_entry(dir: RawFd, name: &CStr, st: &libc::stat) -> io::Result<()> {
    // SAFETY: fchownat reads the NUL-terminated `name`; AT_SYMLINK_NOFOLLOW changes the entry
    // itself.
    cvt(unsafe {
        libc::fchownat(
            dir,
            name.as_ptr(),
            st.st_uid,
            st.st_gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}
