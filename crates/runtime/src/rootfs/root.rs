//! The root itself: propagation, pivot_root (or move + chroot), read-only root, sysctls.

use rustix::fs::{Mode, OFlags};
use rustix::mount::{unmount, UnmountFlags};
use std::path::{Path, PathBuf};

use super::options::propagation_flag;
use crate::error::{Error, Result};
use crate::sys::{cstr, cvt, mount, pivot_root};

/// Make the host's mounts invisible to propagation from the container, then bind the rootfs onto
/// itself so that it is a mount point pivot_root can use.
pub fn prepare_root(rootfs: &Path, propagation: Option<&str>) -> Result<()> {
    // "/" gets the configured propagation, except unbindable, which would forbid the rootfs
    // bind below: that one is applied to the container's "/" after pivot_root.
    let flag = propagation
        .and_then(propagation_flag)
        .filter(|f| f & libc::MS_UNBINDABLE == 0)
        .unwrap_or(libc::MS_SLAVE | libc::MS_REC);
    mount(None, c"/", None, flag, None)
        .map_err(|e| Error::os("making / private to the container", e))?;
    if flag & libc::MS_SHARED != 0 || flag & libc::MS_REC == 0 {
        // pivot_root refuses a new root that is shared or whose parent mount is: make the
        // mount the rootfs is on private, before the bind below copies it. A recursive slave
        // or private "/" already covers it; "shared", or a flag on "/" alone ("private",
        // "slave"), leaves that mount (a shared /tmp under systemd, say, or the rootfs's own
        // overlay mount, shared by an rshared "/") as it was.
        make_mount_private_at(rootfs)?;
    }
    let c = cstr(rootfs);
    mount(Some(&c), &c, None, libc::MS_BIND | libc::MS_REC, None)
        .map_err(|e| Error::os(format!("binding rootfs {}", rootfs.display()), e))?;
    Ok(())
}

/// After pivot_root: rootfsPropagation applies to the container's "/" (pivot_root itself refuses
/// shared mounts, so it can only be set now).
pub fn apply_root_propagation(propagation: Option<&str>) -> Result<()> {
    // Only "/" itself: the mounts below keep the propagation their own options gave them.
    if let Some(p) = propagation.and_then(propagation_flag) {
        mount(None, c"/", None, p & !libc::MS_REC, None)
            .map_err(|e| Error::os("linux.rootfsPropagation", e))?;
    }
    Ok(())
}

/// Make the mount `path` is on private: `path` itself where it is a mount point (containerd's,
/// CRI-O's and podman's rootfs is an overlay mount of its own), else the mount point above it
/// (mount(MS_PRIVATE) says EINVAL for a directory that is not one). Starting at the parent
/// left a rootfs that is a mount point shared under `rootfsPropagation: rshared`, and the
/// bind of it shared too: pivot_root then failed with EINVAL (a CRI container with
/// Bidirectional mount propagation).
pub(super) fn make_mount_private_at(path: &Path) -> Result<()> {
    let mut p = Some(path);
    while let Some(dir) = p {
        match mount(None, &cstr(dir), None, libc::MS_PRIVATE, None) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => p = dir.parent(),
            Err(e) => {
                return Err(Error::os(
                    format!("linux.rootfsPropagation: making {} private", dir.display()),
                    e,
                ))
            }
        }
    }
    Ok(())
}

/// pivot_root into `rootfs` and detach the old root. The old root is made rslave first so the
/// lazy unmount cannot propagate to the host.
pub fn pivot(rootfs: &Path) -> Result<()> {
    let c = cstr(rootfs);
    let newroot = rustix::fs::open(
        c.as_c_str(),
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::os("opening the rootfs for pivot_root", e.into()))?;
    // An fd on the old root, so that after pivot_root we can name exactly that mount: "." from
    // the new root would name the new root for mount(2) (which does not follow the old root
    // stacked on it) and turning the container's own mounts into slaves would undo their
    // propagation options.
    let oldroot = rustix::fs::open(
        c"/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok();
    rustix::process::fchdir(&newroot).map_err(|e| Error::os("chdir rootfs", e.into()))?;
    pivot_root(c".", c".").map_err(|e| Error::os("pivot_root", e))?;
    // Make the old root rslave so its lazy unmount cannot propagate to the host, then detach it:
    // from the old root as the cwd, "." is that mount for both calls (no /proc/self/fd path: a
    // procfs walk each, and no /proc needed). Without the fd, "/" was already made rslave (or
    // the configured propagation) before the pivot, and "." from the new root reaches the old
    // root stacked on it for umount2, which follows mounts on its last component.
    if let Some(fd) = &oldroot {
        if rustix::process::fchdir(fd).is_ok() {
            let _ = mount(None, c".", None, libc::MS_SLAVE | libc::MS_REC, None);
        }
    }
    unmount(c".", UnmountFlags::DETACH)
        .map_err(|e| Error::os("detaching the old root", e.into()))?;
    drop(oldroot);
    rustix::process::chdir(c"/").map_err(|e| Error::os("chdir /", e.into()))?;
    Ok(())
}

/// --no-pivot (with the container's own mount namespace): move the rootfs over / and chroot
/// into it. The old root's mounts stay in the namespace under the chroot, and the kernel lets
/// a process mount a new procfs or sysfs where a *full* one is reachable in its namespace
/// (mount_too_revealing): a nested user namespace in the container could mount a bare /proc
/// (runc's no_pivot.bats). So, as runc's msMoveRoot, every full proc and sysfs mount outside
/// the rootfs is made slave (nothing propagates back to the host) and detached first, or
/// covered by an empty tmpfs where it cannot be unmounted.
pub fn move_and_chroot(rootfs: &Path) -> Result<()> {
    hide_full_proc_and_sys(rootfs)?;
    let c = cstr(rootfs);
    rustix::process::chdir(c.as_c_str()).map_err(|e| Error::os("chdir rootfs", e.into()))?;
    mount(Some(c"."), c"/", None, libc::MS_MOVE, None)
        .map_err(|e| Error::os("moving the rootfs to /", e))?;
    rustix::process::chroot(c".").map_err(|e| Error::os("chroot", e.into()))?;
    rustix::process::chdir(c"/").map_err(|e| Error::os("chdir /", e.into()))?;
    Ok(())
}

/// The mount points of the full (root "/") proc and sysfs mounts in this mount namespace that
/// are not inside `rootfs`, deepest first, from /proc/self/mountinfo's text.
fn full_proc_sys_mounts(mountinfo: &str, rootfs: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            let fstype = post.split(' ').next()?;
            let point = PathBuf::from(unescape_mountinfo(f.get(4)?));
            (f.get(3) == Some(&"/")
                && (fstype == "proc" || fstype == "sysfs")
                && !point.starts_with(rootfs))
            .then_some(point)
        })
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hide_full_proc_and_sys(rootfs: &Path) -> Result<()> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::os("--no-pivot: reading /proc/self/mountinfo", e))?;
    for p in full_proc_sys_mounts(&info, rootfs) {
        let c = cstr(&p);
        match mount(None, &c, None, libc::MS_SLAVE | libc::MS_REC, None) {
            Ok(()) => {}
            // A parent already detached.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => {
                return Err(Error::os(
                    format!("--no-pivot: making {} slave", p.display()),
                    e,
                ))
            }
        }
        if let Err(e) = unmount(c.as_c_str(), UnmountFlags::DETACH) {
            let e = std::io::Error::from(e);
            if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EPERM)) {
                return Err(Error::os(
                    format!("--no-pivot: detaching {}", p.display()),
                    e,
                ));
            }
            mount(Some(c"tmpfs"), &c, Some(c"tmpfs"), 0, None)
                .map_err(|e| Error::os(format!("--no-pivot: covering {}", p.display()), e))?;
        }
    }
    Ok(())
}

/// root.readonly: remount / read-only, keeping the flags the kernel locks.
pub fn readonly_root() -> Result<()> {
    remount_readonly(c"/", "root.readonly", "/")
}

/// Remount `path` read-only (bind remount), keeping the nosuid/nodev/noexec flags it has: the
/// kernel refuses a remount that would clear a flag it locked.
pub(super) fn remount_readonly(path: &std::ffi::CStr, field: &str, shown: &str) -> Result<()> {
    // SAFETY: statvfs is plain integers: all-zero is a valid value.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs reads the borrowed NUL-terminated `path` and writes one statvfs into the
    // live local `sv`.
    cvt(unsafe { libc::statvfs(path.as_ptr(), &mut sv) })
        .map_err(|e| Error::os(format!("{field}: statvfs {shown}"), e))?;
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
    ] {
        if sv.f_flag & st != 0 {
            flags |= ms;
        }
    }
    mount(None, path, None, flags, None)
        .map_err(|e| Error::os(format!("{field}: remount {shown} read-only"), e))
}

/// `linux.sysctl`, written through the container's /proc (after pivot_root) with
/// [`sprout_process::procfs::ProcRoot`]: a mount over a sysctl's file (CVE-2025-52881: a bind of
/// /proc/sysrq-trigger or of a host-wide sysctl over a namespaced one) is an error naming the
/// key, never a write elsewhere.
pub fn set_sysctls(sysctl: &std::collections::HashMap<String, String>) -> Result<()> {
    if sysctl.is_empty() {
        return Ok(());
    }
    let proc = sprout_process::procfs::ProcRoot::open()
        .map_err(|e| Error::os("linux.sysctl: opening /proc", e))?;
    for (k, v) in sysctl {
        proc.write(&format!("sys/{}", k.replace('.', "/")), v.as_bytes())
            .map_err(|e| Error::os(format!("linux.sysctl: {k}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_proc_and_sys_mounts_outside_the_rootfs() {
        let info = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
23 1 0:22 / /sys rw - sysfs sysfs rw
24 23 0:23 / /sys/fs/cgroup rw - tmpfs tmpfs rw
25 1 0:21 /sys /mnt/partial rw - proc proc rw
26 1 0:24 / /run/c/rootfs/proc rw - proc proc rw
27 1 0:25 / /mnt/with\\040space rw - proc proc rw
28 1 8:1 / / rw - ext4 /dev/vda rw
";
        let got = full_proc_sys_mounts(info, Path::new("/run/c/rootfs"));
        assert_eq!(
            got,
            [
                PathBuf::from("/mnt/with space"),
                PathBuf::from("/proc"),
                PathBuf::from("/sys")
            ]
        );
    }
}
