//! Writes to /proc that a mount cannot redirect (runc's CVE-2025-52881).
//!
//! The runtime writes to /proc inside the container's mount namespace: sysctls
//! (`/proc/sys/...`), the OOM score and the LSM exec labels of the init and of every `exec`'d
//! process. A mount over one of those files (a bind of another procfs file such as
//! /proc/sysrq-trigger or /proc/sys/kernel/core_pattern, or a tmpfs over /proc itself, which a
//! container with its own user namespace may make before an `exec`) would send the write
//! elsewhere: a profile left unapplied, a host-wide setting changed. Here /proc is opened once
//! and checked to be a procfs (fstatfs), and each file is opened below it with openat2(2)
//! refusing every symlink (RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS), any way out
//! (RESOLVE_BENEATH) and any mount crossed on the way (RESOLVE_NO_XDEV): a covered file is an
//! error, never a write somewhere else. "self" and "thread-self" are symlinks, so callers name
//! their own pid and tid. Kernels before 5.6 (no openat2) get one O_NOFOLLOW open checked to
//! be on a procfs.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// statfs(2)'s f_type of a procfs.
pub const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// Whether `fd` is on a procfs.
pub fn is_procfs(fd: impl AsFd) -> io::Result<bool> {
    Ok(rustix::fs::fstatfs(fd)?.f_type as i64 == PROC_SUPER_MAGIC)
}

/// /proc as the calling process sees it, checked to be a procfs.
pub struct ProcRoot(OwnedFd);

impl ProcRoot {
    pub fn open() -> io::Result<Self> {
        let fd = rustix::fs::open(
            c"/proc",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        if !is_procfs(&fd)? {
            return Err(io::Error::other("/proc is not a procfs"));
        }
        Ok(ProcRoot(fd))
    }

    /// `rel` (below /proc, no leading '/') opened with `flags`: no symlink followed, no mount
    /// crossed.
    pub fn open_at(&self, rel: &str, flags: OFlags) -> io::Result<OwnedFd> {
        let how = ResolveFlags::BENEATH
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_XDEV;
        match rustix::fs::openat2(&self.0, rel, flags | OFlags::CLOEXEC, Mode::empty(), how) {
            Ok(fd) => Ok(fd),
            Err(Errno::XDEV) => Err(io::Error::other(format!(
                "/proc/{rel} is covered by a mount (refused: a write there could go elsewhere)"
            ))),
            Err(Errno::NOSYS) => {
                let fd = rustix::fs::openat(
                    &self.0,
                    rel,
                    flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                if !is_procfs(&fd)? {
                    return Err(io::Error::other(format!(
                        "/proc/{rel} is not on a procfs (refused: a write there could go elsewhere)"
                    )));
                }
                Ok(fd)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Write `data` to `rel` with one write(2) (the interfaces take a value whole).
    pub fn write(&self, rel: &str, data: &[u8]) -> io::Result<()> {
        let fd = self.open_at(rel, OFlags::WRONLY)?;
        let n = rustix::io::write(&fd, data)?;
        if n != data.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
        }
        Ok(())
    }
}

/// "<tid>", the calling thread's directory below /proc (in the pid namespace the caller is in,
/// which is the one of the /proc it sees, the container's own).
pub fn thread_dir() -> String {
    rustix::thread::gettid().as_raw_nonzero().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files_open_and_mounts_are_refused() {
        let p = ProcRoot::open().unwrap();
        let me = thread_dir();
        p.open_at(&format!("{me}/oom_score_adj"), OFlags::RDONLY)
            .unwrap();
        // A symlink is not followed.
        let e = p.open_at("self/oom_score_adj", OFlags::RDONLY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        // Nothing outside /proc.
        assert!(p.open_at("../etc/passwd", OFlags::RDONLY).is_err());
    }

    /// A file bound over our own oom_score_adj (in a mount namespace of a child's own): a plain
    /// open reaches the decoy, [`ProcRoot::write`] refuses it and leaves it as it was.
    #[test]
    fn a_covered_file_is_refused() {
        if !rustix::process::geteuid().is_root() {
            println!("SKIPPED: not root (a mount namespace of its own)");
            return;
        }
        crate::testutil::in_child(|| {
            let decoy = std::env::temp_dir().join(format!("sprout-procfs-{}", std::process::id()));
            std::fs::write(&decoy, "decoy\n").map_err(|e| e.to_string())?;
            let r = (|| {
                sprout_test_support::unshare_private_mounts()
                    .map_err(|e| format!("mount namespace: {e}"))?;
                // SAFETY: mount reads only its integer and NUL-terminated string arguments,
                // alive for the call.
                unsafe {
                    let src = std::ffi::CString::new(decoy.as_os_str().as_encoded_bytes()).unwrap();
                    let dst =
                        std::ffi::CString::new(format!("/proc/{}/oom_score_adj", thread_dir()))
                            .unwrap();
                    if libc::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(format!("bind: {}", io::Error::last_os_error()));
                    }
                }
                let plain = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap_or_default();
                if plain != "decoy\n" {
                    return Err(format!("the bind did not cover the file: {plain:?}"));
                }
                let p = ProcRoot::open().map_err(|e| e.to_string())?;
                match p.write(&format!("{}/oom_score_adj", thread_dir()), b"7") {
                    Err(e) if e.to_string().contains("covered by a mount") => {}
                    other => return Err(format!("not refused: {other:?}")),
                }
                let now = std::fs::read_to_string(&decoy).unwrap_or_default();
                if now != "decoy\n" {
                    return Err(format!("the decoy was written: {now:?}"));
                }
                Ok(())
            })();
            let _ = std::fs::remove_file(&decoy);
            r
        });
    }
}
