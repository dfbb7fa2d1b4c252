//! Devices: the default set, linux.devices, and a read-only /dev.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{chownat, symlinkat, unlinkat, AtFlags, Mode, OFlags};
use rustix::process::{Gid, Uid};

use oci_spec::runtime::{LinuxDevice, LinuxDeviceType, Mount};

use super::{
    mountapi::{attach_bind, open_tree},
    options::{parse_options, MountOpts},
    paths::ensure_in_root,
    root::remount_readonly,
};
use crate::bail;
use crate::error::{Error, Result};
use crate::sys::{cstr, cstr_s};

/// The devices every container gets (runtime-spec "Default Devices").
pub fn default_devices() -> [(&'static str, u32, u32); 6] {
    [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
    ]
}

/// Create one device node in the rootfs; falls back to bind-mounting the host's node (nosuid,
/// noexec) when mknod is not permitted (user namespaces).
#[allow(clippy::too_many_arguments)]
pub fn create_device(
    root: &OwnedFd,
    path: &Path,
    kind: libc::mode_t,
    major: u32,
    minor: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    in_userns: bool,
) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let dir = ensure_in_root(root, parent, false)?;
    create_device_in(
        root, &dir, path, kind, major, minor, mode, uid, gid, in_userns, None,
    )
}

/// What a node made by mknod in the /dev tmpfs the init mounted has without a chown or chmod:
/// the creator's fsuid/fsgid (a fresh tmpfs has no setgid directory, no default ACL), and
/// the mode asked for with the umask at 0 (no special bits: those are set by chmod).
#[derive(Clone, Copy)]
pub(super) struct FreshDir {
    uid: u32,
    gid: u32,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn create_device_in(
    root: &OwnedFd,
    dir: &OwnedFd,
    path: &Path,
    kind: libc::mode_t,
    major: u32,
    minor: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    in_userns: bool,
    fresh: Option<FreshDir>,
) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::msg(format!("linux.devices: bad path {}", path.display())))?;
    // mknodat needs a real directory fd (O_PATH works for *at calls with a name).
    let cname = cstr(name);
    let mknod = || {
        // SAFETY: mknodat reads the NUL-terminated CString `cname`, alive for the call; the mode
        // and makedev's dev_t are integers; `dir` is borrowed (open).
        unsafe {
            libc::mknodat(
                dir.as_raw_fd(),
                cname.as_ptr(),
                kind | (mode & 0o7777),
                libc::makedev(major, minor),
            )
        }
    };
    let r = if in_userns {
        -1
    } else {
        // Whatever is there is replaced (unlinked first only when there is something).
        let mut r = mknod();
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
            let _ = unlinkat(dir, cname.as_c_str(), AtFlags::empty());
            r = mknod();
        }
        r
    };
    let exact = fresh.is_some_and(|f| f.uid == uid && f.gid == gid && mode & 0o7000 == 0);
    if r == 0 && exact {
        return Ok(());
    }
    if r == 0 {
        // The node just made, pinned by a descriptor and checked to be it: the owner and mode
        // are set on that inode, never on what a rename or a symlink (a volume shared with
        // another container) put at the name meanwhile (runc's fix of the same kind,
        // 2025-11). mknod is subject to umask, and chown clears set-id bits: the mode last.
        let what = |step: &str, e: io::Error| {
            Error::os(format!("linux.devices: {step} {}", path.display()), e)
        };
        let node = rustix::fs::openat(
            dir,
            cname.as_c_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| what("opening", e.into()))?;
        let st = rustix::fs::fstat(&node).map_err(|e| what("stat", e.into()))?;
        if st.st_mode & libc::S_IFMT != kind || st.st_rdev != libc::makedev(major, minor) {
            return Err(Error::msg(format!(
                "linux.devices: {} was replaced while it was made",
                path.display()
            )));
        }
        // The _unchecked ids pass -1 ("unchanged") through as fchownat did.
        let (u, g) = (Uid::from_raw_unchecked(uid), Gid::from_raw_unchecked(gid));
        chownat(&node, c"", Some(u), Some(g), AtFlags::EMPTY_PATH)
            .map_err(|e| what("chown", e.into()))?;
        // chmod has no O_PATH form but the descriptor's /proc/self/fd link (the host's /proc:
        // this runs before pivot_root).
        rustix::fs::chmod(
            crate::sys::fd_path(&node).as_c_str(),
            Mode::from_raw_mode(mode & 0o7777),
        )
        .map_err(|e| what("chmod", e.into()))?;
        return Ok(());
    }
    let err = if in_userns {
        io::Error::from_raw_os_error(libc::EPERM)
    } else {
        io::Error::last_os_error()
    };
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(Error::os(
            format!("linux.devices: mknod {}", path.display()),
            err,
        ));
    }
    // Bind the host's node of the same path (runc), nosuid and noexec as crun binds them: a
    // device node needs neither, and the host's /dev may have both allowed.
    let host = Path::new("/dev").join(path.strip_prefix("/dev").unwrap_or(path));
    let target = ensure_in_root(root, path, true)?;
    let tree = open_tree(libc::AT_FDCWD, &cstr(&host), false)
        .map_err(|e| Error::os(format!("linux.devices: bind {}", host.display()), e))?;
    let opts = MountOpts {
        flags: libc::MS_NOSUID | libc::MS_NOEXEC,
        ..MountOpts::default()
    };
    attach_bind(tree, &target, &opts)
        .map_err(|e| Error::os(format!("linux.devices: bind {}", host.display()), e))?;
    Ok(())
}

pub fn device_kind(t: LinuxDeviceType) -> Result<libc::mode_t> {
    Ok(match t {
        LinuxDeviceType::C | LinuxDeviceType::U => libc::S_IFCHR,
        LinuxDeviceType::B => libc::S_IFBLK,
        LinuxDeviceType::P => libc::S_IFIFO,
        LinuxDeviceType::A => bail!("linux.devices: type 'a' is only valid in cgroup device rules"),
    })
}

pub fn create_devices(
    root: &OwnedFd,
    devices: &[LinuxDevice],
    in_userns: bool,
    dev_is_tmpfs: bool,
) -> Result<()> {
    let dev = ensure_in_root(root, Path::new("/dev"), false)?;
    // In the /dev tmpfs just mounted, a node made with the umask at 0 has the mode asked for and
    // is ours: no chown or chmod needed for the usual root:root 0666 nodes.
    let fresh = dev_is_tmpfs.then(|| FreshDir {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    });
    let old_umask = fresh.map(|_| rustix::process::umask(Mode::empty()));
    let r = create_devices_in(root, &dev, devices, in_userns, dev_is_tmpfs, fresh);
    if let Some(m) = old_umask {
        rustix::process::umask(m);
    }
    r
}

fn create_devices_in(
    root: &OwnedFd,
    dev: &OwnedFd,
    devices: &[LinuxDevice],
    in_userns: bool,
    dev_is_tmpfs: bool,
    fresh: Option<FreshDir>,
) -> Result<()> {
    if dev_is_tmpfs {
        for (name, maj, min) in default_devices() {
            let p = Path::new("/dev").join(name);
            if devices.iter().any(|d| d.path() == &p) {
                continue;
            }
            create_device_in(
                root,
                dev,
                &p,
                libc::S_IFCHR,
                maj,
                min,
                0o666,
                0,
                0,
                in_userns,
                fresh,
            )?;
        }
    }
    for d in devices {
        let kind = device_kind(d.typ())?;
        let mode = d.file_mode().unwrap_or(0o666);
        let (uid, gid) = (d.uid().unwrap_or(0), d.gid().unwrap_or(0));
        if d.path().parent() == Some(Path::new("/dev")) {
            create_device_in(
                root,
                dev,
                d.path(),
                kind,
                d.major() as u32,
                d.minor() as u32,
                mode,
                uid,
                gid,
                in_userns,
                fresh,
            )?;
        } else {
            create_device(
                root,
                d.path(),
                kind,
                d.major() as u32,
                d.minor() as u32,
                mode,
                uid,
                gid,
                in_userns,
            )?;
        }
    }
    if dev_is_tmpfs {
        let mut links: Vec<(&str, &CStr)> = vec![
            ("fd", c"/proc/self/fd"),
            ("stdin", c"/proc/self/fd/0"),
            ("stdout", c"/proc/self/fd/1"),
            ("stderr", c"/proc/self/fd/2"),
            ("ptmx", c"pts/ptmx"),
        ];
        if Path::new("/proc/kcore").exists() {
            links.push(("core", c"/proc/kcore"));
        }
        for (name, target) in links {
            let n = cstr_s(name);
            let mut r = symlinkat(target, dev, n.as_c_str());
            // /dev/ptmx is the devpts one, whatever a linux.devices entry made there.
            if name == "ptmx" && r == Err(rustix::io::Errno::EXIST) {
                let _ = unlinkat(dev, n.as_c_str(), AtFlags::empty());
                r = symlinkat(target, dev, n.as_c_str());
            }
            match r {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(Error::os(format!("creating /dev/{name}"), e.into())),
            }
        }
    }
    Ok(())
}

/// A `/dev` mount with `ro` (runc's mountPropagate + finalizeRootfs): `mounts[i]` for /dev is
/// mounted read-write so its devices, /dev/pts, /dev/shm, /dev/mqueue and symlinks can be made,
/// and remounted read-only here, once nothing is left to make in it. Returns the options to
/// mount it with (`ro` turned into `rw`) when the mount asks for read-only, else None.
pub fn dev_mount_options_rw(m: &Mount) -> Option<Vec<String>> {
    if m.destination() != Path::new("/dev") {
        return None;
    }
    let opts = m.options().as_deref().unwrap_or(&[]);
    let ro = parse_options(opts).is_ok_and(|o| o.flags & libc::MS_RDONLY != 0);
    ro.then(|| {
        opts.iter()
            .map(|o| {
                if o == "ro" {
                    "rw".to_string()
                } else {
                    o.clone()
                }
            })
            .collect()
    })
}

/// The second half of [`dev_mount_options_rw`]: remount /dev (the container's, after the
/// pivot) read-only.
pub fn readonly_dev() -> Result<()> {
    remount_readonly(c"/dev", "mounts (/dev)", "/dev")
}
