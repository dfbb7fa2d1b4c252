//! The spec's mounts, one by one, and the bind sources the runtime opens for the init.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use oci_spec::runtime::Mount;

use super::{
    cgroup::{mount_cgroup, CgroupBinds},
    mountapi::{attach_bind, attach_configured_bind, open_tree},
    options::{parse_options, MountOpts, MOUNT_ATTR_RDONLY},
    paths::ensure_in_root,
    paths::ensure_in_root_existed,
};
use crate::error::{Error, Result};
use crate::sys::{cstr, cstr_s, fd_path, mount, mount_at, open_in_root};

pub struct MountCtx<'a> {
    pub rootfs_fd: &'a OwnedFd,
    pub bundle: &'a Path,
    pub cgroup_v2: bool,
    pub cgroup_binds: &'a dyn Fn() -> CgroupBinds,
    /// Bind sources opened by the runtime (`open_bind_sources`), by index in `mounts`.
    pub sources: &'a [(usize, OwnedFd)],
    /// This mount's id-mapped tree when it is one (made by the runtime, `crate::idmap`).
    pub tree: std::cell::Cell<Option<OwnedFd>>,
}

/// The host path a bind mount's source names (relative sources are the bundle's).
pub fn bind_source(bundle: &Path, m: &Mount) -> Option<PathBuf> {
    let src = m.source().as_ref()?;
    Some(if src.is_absolute() {
        src.clone()
    } else {
        bundle.join(src)
    })
}

/// Open (O_PATH) the source of every bind mount in `mounts`, from inside the mount namespace
/// of the process behind `pidfd` but with this process's credentials: the init, root of a new
/// user namespace, may be unable to look up a source the runtime can (a 0700 directory of the
/// host's root; runc and crun open such sources for the init too). The fds must come from the
/// init's own mount namespace, or the kernel refuses to clone their trees there (EINVAL).
///
/// Best effort: an entry whose source cannot be opened here is left out, and the init resolves
/// it itself (and reports it). A thread does the work: `setns(CLONE_NEWNS)` needs a private
/// fs_struct (`unshare(CLONE_FS)`), and this process keeps its own mount namespace and cwd.
///
/// A source inside the rootfs (`<rootfs>/mnt/x`) is left to the init too: it may lie on a mount
/// an earlier entry makes, so it is looked up when its turn comes (runc's "mount order" tests).
pub fn open_bind_sources(
    pidfd: &OwnedFd,
    bundle: &Path,
    rootfs: &Path,
    mounts: &[Mount],
) -> Vec<(usize, OwnedFd)> {
    let wanted: Vec<(usize, CString)> = mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| is_bind(m))
        // Id-mapped binds come as whole trees instead (crate::idmap).
        .filter(|(_, m)| !crate::idmap::is_idmapped(m))
        .filter_map(|(i, m)| Some((i, bind_source(bundle, m)?)))
        .filter(|(_, src)| !src.starts_with(rootfs))
        .map(|(i, src)| (i, cstr(src)))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let pid = pidfd.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare(CLONE_FS) takes a flag only and acts on this scoped thread alone.
            if unsafe { libc::unshare(libc::CLONE_FS) } != 0
                // SAFETY: setns moves only this thread (its fs state no longer shared, as
                // CLONE_NEWNS requires) into the init's mount namespace; `pid` is the raw fd of
                // the borrowed `pidfd`, open for the whole scope.
                || unsafe { libc::setns(pid, libc::CLONE_NEWNS) } != 0
            {
                return Vec::new();
            }
            wanted
                .iter()
                .filter_map(|(i, p)| {
                    use rustix::fs::{Mode, OFlags};
                    let fd = rustix::fs::open(
                        p.as_c_str(),
                        OFlags::PATH | OFlags::CLOEXEC,
                        Mode::empty(),
                    );
                    fd.ok().map(|fd| (*i, fd))
                })
                .collect()
        })
        .join()
        .unwrap_or_default()
    })
}

/// A bind mount: type "bind", or a "bind"/"rbind" option (what `mount_one` binds).
pub(crate) fn is_bind(m: &Mount) -> bool {
    m.typ().as_deref() == Some("bind")
        || m.options()
            .iter()
            .flatten()
            .any(|o| o == "bind" || o == "rbind")
}

pub fn mount_one(ctx: &MountCtx, i: usize, m: &Mount) -> Result<()> {
    let typ = m.typ().as_deref().unwrap_or("");
    let opts = parse_options(m.options().as_deref().unwrap_or(&[]))
        .map_err(|e| e.context(format!("mounts[{i}]")))?;
    let dest = m.destination();
    let what = || format!("mounts[{i}] ({})", dest.display());
    let is_bind = opts.bind || typ == "bind";
    if is_bind {
        let src = bind_source(ctx.bundle, m)
            .ok_or_else(|| Error::msg(format!("{}: bind mount needs a source", what())))?;
        if let Some(tree) = ctx.tree.take() {
            let is_dir = crate::sys::fstat(tree.as_raw_fd())
                .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
                .map_err(|e| Error::os(format!("{}: source {}", what(), src.display()), e))?;
            let target = ensure_in_root(ctx.rootfs_fd, dest, !is_dir)?;
            check_proc_target(ctx.rootfs_fd, &target, dest, typ, Some(&tree))
                .map_err(|e| e.context(what()))?;
            attach_configured_bind(tree, &target, &opts)
                .map_err(|e| Error::os(format!("{}: bind {}", what(), src.display()), e))?;
            return Ok(());
        }
        if crate::idmap::is_idmapped(m) {
            return Err(Error::msg(format!(
                "{}: the runtime sent no id-mapped tree for {}",
                what(),
                src.display()
            )));
        }
        let opened = ctx.sources.iter().find(|(j, _)| *j == i).map(|(_, fd)| fd);
        let is_dir = match opened {
            Some(fd) => crate::sys::fstat(fd.as_raw_fd())
                .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
            None => std::fs::metadata(&src).map(|m| m.is_dir()),
        }
        .map_err(|e| Error::os(format!("{}: source {}", what(), src.display()), e))?;
        let target = ensure_in_root(ctx.rootfs_fd, dest, !is_dir)?;
        let tree = match opened {
            Some(fd) => open_tree(fd.as_raw_fd(), c"", opts.recursive),
            None => open_tree(libc::AT_FDCWD, &cstr(&src), opts.recursive),
        }
        .map_err(|e| Error::os(format!("{}: cloning {}", what(), src.display()), e))?;
        check_proc_target(ctx.rootfs_fd, &target, dest, typ, Some(&tree))
            .map_err(|e| e.context(what()))?;
        attach_configured_bind(tree, &target, &opts)
            .map_err(|e| Error::os(format!("{}: bind {}", what(), src.display()), e))?;
        return Ok(());
    }
    if typ == "cgroup" || typ == "cgroup2" {
        return mount_cgroup(ctx, dest, &opts).map_err(|e| e.context(what()));
    }
    let checked = if typ == "proc" || typ == "sysfs" {
        ordinary_target(ctx, dest, typ).map_err(|e| e.context(what()))?
    } else {
        None
    };
    let (target, existed) = match checked {
        Some(fd) => (fd, true),
        None => ensure_in_root_existed(ctx.rootfs_fd, dest, false)?,
    };
    check_proc_target(ctx.rootfs_fd, &target, dest, typ, None).map_err(|e| e.context(what()))?;
    let src = cstr_s(m.source().as_ref().and_then(|s| s.to_str()).unwrap_or(typ));
    let fstype = cstr_s(typ);
    let mut opts = opts;
    if typ == "tmpfs" && existed && !opts.data.split(',').any(|o| o.starts_with("mode=")) {
        // As runc: a tmpfs over an existing directory keeps that directory's mode (instead of
        // tmpfs's 1777) unless the options give one.
        let st = crate::sys::fstat(target.as_raw_fd()).map_err(|e| Error::os(what(), e))?;
        let mode = format!("mode={:04o}", st.st_mode & 0o7777);
        opts.data = if opts.data.is_empty() {
            mode
        } else {
            format!("{mode},{}", opts.data)
        };
    }
    // tmpcopyup: the covered directory, read before the tmpfs hides it; the tmpfs stays writable
    // until the copy is in.
    let copyup = if typ == "tmpfs" && existed && opts.copyup {
        Some(
            super::copyup::open_dir(&target)
                .map_err(|e| Error::os(format!("{}: tmpcopyup", what()), e))?,
        )
    } else {
        None
    };
    let mut flags = opts.flags & !libc::MS_REMOUNT;
    if copyup.is_some() {
        flags &= !libc::MS_RDONLY;
    }
    let data = cstr_s(&opts.data);
    let r = mount_at(
        Some(&src),
        &target,
        Some(&fstype),
        flags,
        if opts.data.is_empty() {
            None
        } else {
            Some(&data)
        },
    );
    if let Err(e) = r {
        // sysfs can't be mounted in a user namespace that doesn't own the netns: fall back to a
        // recursive read-only bind of the host's /sys, as runc does.
        if typ == "sysfs" && e.raw_os_error() == Some(libc::EPERM) {
            let tree = open_tree(libc::AT_FDCWD, c"/sys", true)
                .map_err(|e| Error::os(format!("{}: bind /sys", what()), e))?;
            let mut o = MountOpts {
                flags: opts.flags | libc::MS_RDONLY,
                ..Default::default()
            };
            o.rec_attr_set = MOUNT_ATTR_RDONLY;
            attach_bind(tree, &target, &o)
                .map_err(|e| Error::os(format!("{}: bind /sys", what()), e))?;
            return Ok(());
        }
        return Err(Error::os(format!("{}: mount {typ}", what()), e));
    }
    if let Some(lower) = copyup {
        let copy = || -> std::io::Result<()> {
            let upper = open_in_root(
                ctx.rootfs_fd.as_raw_fd(),
                dest,
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )?;
            super::copyup::copy_tree(&lower, &upper)?;
            if opts.flags & libc::MS_RDONLY != 0 {
                super::mountapi::mount_setattr(upper.as_raw_fd(), false, MOUNT_ATTR_RDONLY, 0)?;
            }
            Ok(())
        };
        copy().map_err(|e| Error::os(format!("{}: tmpcopyup", what()), e))?;
    }
    if !opts.propagation.is_empty() {
        let fd = open_in_root(ctx.rootfs_fd.as_raw_fd(), dest, libc::O_PATH, 0)
            .map_err(|e| Error::os(what(), e))?;
        for p in &opts.propagation {
            mount(None, &fd_path(&fd), None, *p, None)
                .map_err(|e| Error::os(format!("{}: propagation", what()), e))?;
        }
    }
    Ok(())
}

/// The files below /proc that a mount may cover: those lxcfs emulates (runc's list). A bind of
/// anything else there could redirect the runtime's own writes (sysctls, the OOM score, LSM
/// labels: CVE-2025-52881) or hide what a masked path hides.
const PROC_MOUNTABLE: [&str; 10] = [
    "/proc/cpuinfo",
    "/proc/diskstats",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/swaps",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/slabinfo",
    "/proc/sys/kernel/ns_last_pid",
    "/proc/sys/crypto/fips_enabled",
];

/// As runc's checkProcMount, on the resolved target: a mount whose target is in the
/// container's /proc (its path in the rootfs once symlinks are followed, as runc compares it:
/// a destination that reaches /proc through a symlink counts) is refused, except over /proc
/// itself with a new `proc` or the bind of a procfs, and over the files lxcfs emulates
/// ([`PROC_MOUNTABLE`]). A procfs elsewhere (a host /proc bound at /host/proc) is not guarded,
/// as with runc. Only targets on a procfs are looked at further (an fstatfs for the others).
fn check_proc_target(
    root: &OwnedFd,
    target: &OwnedFd,
    dest: &Path,
    typ: &str,
    tree: Option<&OwnedFd>,
) -> Result<()> {
    let on_proc = |fd: &OwnedFd| sprout_process::procfs::is_procfs(fd).unwrap_or(false);
    if !on_proc(target) {
        return Ok(());
    }
    // The target's path in the rootfs; where it cannot be told, it counts as inside /proc.
    let link = |fd: &OwnedFd| std::fs::read_link(crate::sys::fd_path(fd).to_str().unwrap_or(""));
    let resolved = match (link(root), link(target)) {
        (Ok(r), Ok(t)) => t.strip_prefix(&r).ok().map(|rel| Path::new("/").join(rel)),
        _ => None,
    };
    let shown = resolved.clone().unwrap_or_else(|| dest.to_path_buf());
    match &resolved {
        Some(p) if !p.starts_with("/proc") => return Ok(()),
        Some(p) if p == Path::new("/proc") => {
            if typ == "proc" || tree.is_some_and(on_proc) {
                return Ok(());
            }
            return Err(Error::msg(format!(
                "{} is the container's /proc: only a proc mount or the bind of a procfs may \
                 cover it",
                dest.display()
            )));
        }
        Some(p) if PROC_MOUNTABLE.iter().any(|m| p == Path::new(m)) => return Ok(()),
        _ => {}
    }
    Err(Error::msg(format!(
        "{} is inside /proc ({}), where a mount may cover only the files lxcfs emulates \
         (/proc/cpuinfo, /proc/meminfo, ...)",
        dest.display(),
        shown.display()
    )))
}

/// As runc: procfs and sysfs go only on an ordinary directory. A symlink planted at the
/// destination (e.g. the image's /proc pointing elsewhere) would put them where the symlink
/// points while the container's path still names the link. The O_NOFOLLOW open is also the
/// mount target when it exists (no second lookup); `None`: missing, made by the caller.
fn ordinary_target(ctx: &MountCtx, dest: &Path, typ: &str) -> Result<Option<OwnedFd>> {
    let Ok(fd) = open_in_root(
        ctx.rootfs_fd.as_raw_fd(),
        dest,
        libc::O_PATH | libc::O_NOFOLLOW,
        0,
    ) else {
        return Ok(None); // missing: made as a directory; other errors show there
    };
    let st = crate::sys::fstat(fd.as_raw_fd())
        .map_err(|e| Error::os(format!("{typ} mount point"), e))?;
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(Error::msg(format!(
            "{typ} must be mounted on ordinary directory ({} is a symlink)",
            dest.display()
        )));
    }
    Ok(Some(fd))
}
