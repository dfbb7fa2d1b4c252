//! The container's root filesystem: mount propagation, the spec's mounts, devices, pivot_root,
//! masked and read-only paths.
//!
//! Every mount destination is resolved inside the rootfs with openat2(RESOLVE_IN_ROOT) and the
//! mount is made onto the resulting fd (through /proc/self/fd/N, or move_mount on the fd), so a
//! symlink planted in the rootfs can never redirect a mount to the host (CVE-2021-30465). Bind
//! mounts use the new mount API (open_tree + mount_setattr + move_mount): attributes are set on a
//! detached tree before it is attached, which needs no remount and leaves no window.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

use oci_spec::runtime::{LinuxDevice, LinuxDeviceType, Mount};

use crate::bail;
use crate::error::{Error, Result};
use crate::sys::{cstr, cstr_s, cvt, cvt_l, fd_path, mount, open_in_root};

pub fn propagation_flag(s: &str) -> Option<libc::c_ulong> {
    Some(match s {
        "shared" => libc::MS_SHARED,
        "rshared" => libc::MS_SHARED | libc::MS_REC,
        "slave" => libc::MS_SLAVE,
        "rslave" => libc::MS_SLAVE | libc::MS_REC,
        "private" => libc::MS_PRIVATE,
        "rprivate" => libc::MS_PRIVATE | libc::MS_REC,
        "unbindable" => libc::MS_UNBINDABLE,
        "runbindable" => libc::MS_UNBINDABLE | libc::MS_REC,
        _ => return None,
    })
}

/// Parsed mount options: flags for mount(2), the same as mount_setattr attributes for binds,
/// propagation, and the rest as the fs-specific data string.
#[derive(Default, Debug, PartialEq)]
pub struct MountOpts {
    pub flags: libc::c_ulong,
    pub clear: libc::c_ulong,
    pub propagation: Vec<libc::c_ulong>,
    pub data: String,
    pub bind: bool,
    pub recursive: bool,
    /// "rro", "rnosuid"...: attributes applied to every mount of a recursive bind.
    pub rec_attr_set: u64,
    pub rec_attr_clr: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const MOUNT_ATTR__ATIME: u64 = 0x70;
const MOUNT_ATTR_NOATIME: u64 = 0x10;
const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x200000;

pub fn parse_options(opts: &[String]) -> Result<MountOpts> {
    let mut o = MountOpts::default();
    for opt in opts {
        let (set, clr): (libc::c_ulong, libc::c_ulong) = match opt.as_str() {
            "defaults" => (0, 0),
            "ro" => (libc::MS_RDONLY, 0),
            "rw" => (0, libc::MS_RDONLY),
            "suid" => (0, libc::MS_NOSUID),
            "nosuid" => (libc::MS_NOSUID, 0),
            "dev" => (0, libc::MS_NODEV),
            "nodev" => (libc::MS_NODEV, 0),
            "exec" => (0, libc::MS_NOEXEC),
            "noexec" => (libc::MS_NOEXEC, 0),
            "sync" => (libc::MS_SYNCHRONOUS, 0),
            "async" => (0, libc::MS_SYNCHRONOUS),
            "dirsync" => (libc::MS_DIRSYNC, 0),
            "remount" => (libc::MS_REMOUNT, 0),
            "mand" => (libc::MS_MANDLOCK, 0),
            "nomand" => (0, libc::MS_MANDLOCK),
            "atime" => (0, libc::MS_NOATIME),
            "noatime" => (libc::MS_NOATIME, 0),
            "diratime" => (0, libc::MS_NODIRATIME),
            "nodiratime" => (libc::MS_NODIRATIME, 0),
            "relatime" => (libc::MS_RELATIME, 0),
            "norelatime" => (0, libc::MS_RELATIME),
            "strictatime" => (libc::MS_STRICTATIME, 0),
            "nostrictatime" => (0, libc::MS_STRICTATIME),
            "silent" => (libc::MS_SILENT, 0),
            "loud" => (0, libc::MS_SILENT),
            "nosymfollow" => (0x100, 0), // MS_NOSYMFOLLOW
            "symfollow" => (0, 0x100),
            "bind" => {
                o.bind = true;
                (0, 0)
            }
            "rbind" => {
                o.bind = true;
                o.recursive = true;
                (0, 0)
            }
            // crun's extension; the copy-up is not needed for correctness here.
            "tmpcopyup" | "notmpcopyup" => (0, 0),
            // Id-mapped binds: the runtime makes the tree (crate::idmap), the init attaches it.
            "idmap" | "ridmap" => (0, 0),
            "rro" => {
                o.rec_attr_set |= MOUNT_ATTR_RDONLY;
                (0, 0)
            }
            "rrw" => {
                o.rec_attr_clr |= MOUNT_ATTR_RDONLY;
                (0, 0)
            }
            "rnosuid" => {
                o.rec_attr_set |= MOUNT_ATTR_NOSUID;
                (0, 0)
            }
            "rsuid" => {
                o.rec_attr_clr |= MOUNT_ATTR_NOSUID;
                (0, 0)
            }
            "rnodev" => {
                o.rec_attr_set |= MOUNT_ATTR_NODEV;
                (0, 0)
            }
            "rdev" => {
                o.rec_attr_clr |= MOUNT_ATTR_NODEV;
                (0, 0)
            }
            "rnoexec" => {
                o.rec_attr_set |= MOUNT_ATTR_NOEXEC;
                (0, 0)
            }
            "rexec" => {
                o.rec_attr_clr |= MOUNT_ATTR_NOEXEC;
                (0, 0)
            }
            "rnodiratime" => {
                o.rec_attr_set |= MOUNT_ATTR_NODIRATIME;
                (0, 0)
            }
            "rdiratime" => {
                o.rec_attr_clr |= MOUNT_ATTR_NODIRATIME;
                (0, 0)
            }
            "rnosymfollow" => {
                o.rec_attr_set |= MOUNT_ATTR_NOSYMFOLLOW;
                (0, 0)
            }
            "rsymfollow" => {
                o.rec_attr_clr |= MOUNT_ATTR_NOSYMFOLLOW;
                (0, 0)
            }
            "rnoatime" => {
                o.rec_attr_set |= MOUNT_ATTR_NOATIME;
                o.rec_attr_clr |= MOUNT_ATTR__ATIME;
                (0, 0)
            }
            "rstrictatime" => {
                o.rec_attr_set |= MOUNT_ATTR_STRICTATIME;
                o.rec_attr_clr |= MOUNT_ATTR__ATIME;
                (0, 0)
            }
            "rrelatime" => {
                o.rec_attr_clr |= MOUNT_ATTR__ATIME;
                (0, 0)
            }
            other => {
                if let Some(p) = propagation_flag(other) {
                    o.propagation.push(p);
                } else {
                    if !o.data.is_empty() {
                        o.data.push(',');
                    }
                    o.data.push_str(other);
                }
                (0, 0)
            }
        };
        o.flags = (o.flags | set) & !clr;
        o.clear = (o.clear | clr) & !set;
    }
    Ok(o)
}

fn attr_from_flags(flags: libc::c_ulong) -> u64 {
    let mut a = 0;
    if flags & libc::MS_RDONLY != 0 {
        a |= MOUNT_ATTR_RDONLY;
    }
    if flags & libc::MS_NOSUID != 0 {
        a |= MOUNT_ATTR_NOSUID;
    }
    if flags & libc::MS_NODEV != 0 {
        a |= MOUNT_ATTR_NODEV;
    }
    if flags & libc::MS_NOEXEC != 0 {
        a |= MOUNT_ATTR_NOEXEC;
    }
    if flags & libc::MS_NODIRATIME != 0 {
        a |= MOUNT_ATTR_NODIRATIME;
    }
    if flags & libc::MS_NOATIME != 0 {
        a |= MOUNT_ATTR_NOATIME;
    }
    if flags & libc::MS_STRICTATIME != 0 {
        a |= MOUNT_ATTR_STRICTATIME;
    }
    if flags & 0x100 != 0 {
        a |= MOUNT_ATTR_NOSYMFOLLOW;
    }
    a
}

/// mount_setattr's (attr_set, attr_clr) for a bind mount's options. The atime modes are an
/// enum, not bits: changing it needs the whole MOUNT_ATTR__ATIME in attr_clr (EINVAL otherwise).
fn bind_attrs(opts: &MountOpts) -> (u64, u64) {
    const ATIME_MODES: u64 = MOUNT_ATTR__ATIME;
    let set = attr_from_flags(opts.flags) & !ATIME_MODES;
    let mut clr = attr_from_flags(opts.clear) & !ATIME_MODES & !set;
    let mut atime = 0;
    let mut change_atime = false;
    if opts.flags & libc::MS_NOATIME != 0 {
        atime = MOUNT_ATTR_NOATIME;
        change_atime = true;
    } else if opts.flags & libc::MS_STRICTATIME != 0 {
        atime = MOUNT_ATTR_STRICTATIME;
        change_atime = true;
    } else if opts.flags & libc::MS_RELATIME != 0
        || opts.clear & (libc::MS_NOATIME | libc::MS_STRICTATIME) != 0
    {
        change_atime = true; // relatime is the enum's 0
    }
    if change_atime {
        clr |= MOUNT_ATTR__ATIME;
    }
    (set | atime, clr)
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const OPEN_TREE_CLONE: u32 = 1;
const AT_RECURSIVE: u32 = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;

pub fn open_tree(dirfd: RawFd, path: &CStr, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    if path.to_bytes().is_empty() {
        flags |= libc::AT_EMPTY_PATH as u32;
    }
    let fd = cvt_l(unsafe { libc::syscall(libc::SYS_open_tree, dirfd, path.as_ptr(), flags) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn mount_setattr(fd: RawFd, recursive: bool, set: u64, clr: u64) -> io::Result<()> {
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

const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

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

fn mount_setattr_raw(fd: RawFd, recursive: bool, attr: MountAttr) -> io::Result<()> {
    let mut flags = libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    cvt_l(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

pub fn move_mount_to_fd(tree: RawFd, target: RawFd) -> io::Result<()> {
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
fn attach_bind(tree: OwnedFd, target: &OwnedFd, opts: &MountOpts) -> io::Result<()> {
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

/// Make `path` (absolute, container view) exist inside `root`, as a directory or (if `file`) an
/// empty file, without ever following a symlink out of the rootfs. Returns an O_PATH fd on it.
pub fn ensure_in_root(root: &OwnedFd, path: &Path, file: bool) -> Result<OwnedFd> {
    match open_in_root(root.as_raw_fd(), path, libc::O_PATH, 0) {
        Ok(fd) => return Ok(fd),
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
            return create_in(root, &dir, name, path, file);
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
                let r = if last && file {
                    unsafe {
                        libc::mknodat(cur.as_raw_fd(), name.as_ptr(), libc::S_IFREG | 0o644, 0)
                    }
                } else {
                    unsafe { libc::mkdirat(cur.as_raw_fd(), name.as_ptr(), 0o755) }
                };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(Error::os(
                            format!("creating {} in the rootfs", sofar.display()),
                            e,
                        ));
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
    Ok(cur)
}

/// Create `name` (a directory, or an empty file) in `dir` and open it; EEXIST (a race with
/// another creator) is fine. `path` is the full container path, for errors and the reopen.
fn create_in(
    root: &OwnedFd,
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    path: &Path,
    file: bool,
) -> Result<OwnedFd> {
    let cname = cstr(name);
    let r = if file {
        unsafe { libc::mknodat(dir.as_raw_fd(), cname.as_ptr(), libc::S_IFREG | 0o644, 0) }
    } else {
        unsafe { libc::mkdirat(dir.as_raw_fd(), cname.as_ptr(), 0o755) }
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(Error::os(
                format!("creating {} in the rootfs", path.display()),
                e,
            ));
        }
    }
    open_in_root(root.as_raw_fd(), path, libc::O_PATH, 0)
        .map_err(|e| Error::os(format!("resolving {} in the rootfs", path.display()), e))
}

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
        // pivot_root refuses a new root whose parent mount is shared: make that one private.
        // A recursive slave or private "/" already covers it; "shared", or a flag on "/"
        // alone ("private", "slave"), leaves the rootfs's own mount (a shared /tmp under
        // systemd, say) as it was.
        make_parent_mount_private(rootfs)?;
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

/// Make the mount containing `path`'s parent directory private (walking up to the mount point:
/// mount(MS_PRIVATE) says EINVAL for a directory that is not one).
fn make_parent_mount_private(path: &Path) -> Result<()> {
    let mut p = path.parent();
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

/// What the cgroup mount needs: (name under /sys/fs/cgroup, host path of our cgroup in it).
pub type CgroupBinds = Vec<(String, PathBuf)>;

/// The init's own cgroups, read from /proc/self/cgroup (call once placed in its cgroup).
pub fn own_cgroup_binds() -> CgroupBinds {
    let Ok(s) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    cgroup_binds_from(Path::new(CGROUP_ROOT), &s, |_| None)
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// What [`own_cgroup_binds`] will read in the init once it has joined `cg`, computed in the
/// parent from its own /proc/self/cgroup as soon as the directories exist: the hierarchies
/// the container joins name its directories, the others stay at the parent's. The init
/// mounts its cgroups with these before it is moved in, so its mounts need not wait for
/// the parent's cgroup.procs writes. `None` when a path is not UTF-8 (the channel carries
/// text): the init then waits and reads its own.
pub fn planned_cgroup_binds(cg: &sprout_cgroups::Manager) -> Option<CgroupBinds> {
    let s = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = |dir: &Path, mount: &Path| -> Option<String> {
        let r = dir.strip_prefix(mount).ok()?;
        Some(format!("/{}", r.to_str()?))
    };
    let binds = cgroup_binds_from(Path::new(CGROUP_ROOT), &s, |ctrls| {
        if ctrls.is_empty() {
            let u = cg.unified_path()?;
            return rel(u, cg.unified_mount()?);
        }
        ctrls.split(',').find_map(|c| {
            let (dir, mount) = cg.v1_dir_and_mount(c)?;
            rel(dir, mount)
        })
    });
    binds
        .iter()
        .all(|(n, p)| p.to_str().is_some() && !n.contains('\0'))
        .then_some(binds)
}

/// (name, host path) per line of a /proc/<pid>/cgroup text; `path_of(controllers)` overrides
/// the line's path (absolute within its hierarchy).
fn cgroup_binds_from(
    root: &Path,
    s: &str,
    path_of: impl Fn(&str) -> Option<String>,
) -> CgroupBinds {
    // One getdents of the cgroup root (a tmpfs with one entry per hierarchy on v1) instead of
    // a stat per hierarchy, listed only when a line names one.
    let listing = std::cell::OnceCell::new();
    let mounted = |name: &str| {
        listing
            .get_or_init(|| -> Vec<std::ffi::OsString> {
                std::fs::read_dir(root)
                    .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
                    .unwrap_or_default()
            })
            .iter()
            .any(|n| n == name)
    };
    let unified_root = if s.lines().any(|l| l.starts_with("0::")) && mounted("unified") {
        "unified"
    } else {
        ""
    };
    let mut out = Vec::new();
    for line in s.lines() {
        let mut it = line.splitn(3, ':');
        let (_, ctrls, path) = match (it.next(), it.next(), it.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        let name = if ctrls.is_empty() {
            // Pure v2: the hierarchy is /sys/fs/cgroup itself (name ""); hybrid: "unified".
            unified_root.to_string()
        } else {
            ctrls.strip_prefix("name=").unwrap_or(ctrls).to_string()
        };
        let base = if name.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&name)
        };
        let path = path_of(ctrls).unwrap_or_else(|| path.to_string());
        let host = base.join(path.trim_start_matches('/'));
        let present = if name.is_empty() {
            base.exists()
        } else {
            mounted(&name)
        };
        if present {
            out.push((name, host));
        }
    }
    out
}

/// [`CgroupBinds`] as a channel payload: `name NUL path NUL`, pair after pair.
pub fn encode_cgroup_binds(b: &CgroupBinds) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, p) in b {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
        out.extend_from_slice(p.as_os_str().as_encoded_bytes());
        out.push(0);
    }
    out
}

pub fn decode_cgroup_binds(s: &str) -> CgroupBinds {
    let mut it = s.split('\0');
    let mut out = Vec::new();
    while let (Some(n), Some(p)) = (it.next(), it.next()) {
        out.push((n.to_string(), PathBuf::from(p)));
    }
    out
}

pub struct MountCtx<'a> {
    pub rootfs_fd: &'a OwnedFd,
    pub bundle: &'a Path,
    pub cgroup_v2: bool,
    pub new_cgroup_ns: bool,
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
pub fn open_bind_sources(
    pidfd: &OwnedFd,
    bundle: &Path,
    mounts: &[Mount],
) -> Vec<(usize, OwnedFd)> {
    let wanted: Vec<(usize, CString)> = mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m.typ().as_deref() == Some("bind")
                || m.options()
                    .as_deref()
                    .is_some_and(|o| o.iter().any(|x| x == "bind" || x == "rbind"))
        })
        // Id-mapped binds come as whole trees instead (crate::idmap).
        .filter(|(_, m)| !crate::idmap::is_idmapped(m))
        .filter_map(|(i, m)| Some((i, cstr(bind_source(bundle, m)?))))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let pid = pidfd.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare/setns act on this thread only (CLONE_FS unshared first); the fds
            // are plain integers owned by this process.
            if unsafe { libc::unshare(libc::CLONE_FS) } != 0
                || unsafe { libc::setns(pid, libc::CLONE_NEWNS) } != 0
            {
                return Vec::new();
            }
            wanted
                .iter()
                .filter_map(|(i, p)| {
                    // SAFETY: `p` is a NUL-terminated path; a successful open returns a new fd
                    // that nothing else owns.
                    let fd = unsafe { libc::open(p.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
                    (fd >= 0).then(|| (*i, unsafe { OwnedFd::from_raw_fd(fd) }))
                })
                .collect()
        })
        .join()
        .unwrap_or_default()
    })
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
            attach_bind(tree, &target, &opts)
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
        attach_bind(tree, &target, &opts)
            .map_err(|e| Error::os(format!("{}: bind {}", what(), src.display()), e))?;
        return Ok(());
    }
    if typ == "cgroup" || typ == "cgroup2" {
        return mount_cgroup(ctx, dest, &opts).map_err(|e| e.context(what()));
    }
    let target = ensure_in_root(ctx.rootfs_fd, dest, false)?;
    let src = cstr_s(m.source().as_ref().and_then(|s| s.to_str()).unwrap_or(typ));
    let fstype = cstr_s(typ);
    let data = cstr_s(&opts.data);
    let tp = fd_path(&target);
    let r = mount(
        Some(&src),
        &tp,
        Some(&fstype),
        opts.flags & !libc::MS_REMOUNT,
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

fn mount_cgroup(ctx: &MountCtx, dest: &Path, opts: &MountOpts) -> Result<()> {
    let target = ensure_in_root(ctx.rootfs_fd, dest, false)?;
    let flags = opts.flags | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    if ctx.cgroup_v2 {
        if ctx.new_cgroup_ns {
            match mount(
                Some(c"cgroup2"),
                &fd_path(&target),
                Some(c"cgroup2"),
                flags,
                None,
            ) {
                Ok(()) => return Ok(()),
                // EBUSY: the target is already a mount of the same cgroup2 superblock (the
                // host's /sys/fs/cgroup, brought in by the rbind of /sys that `spec
                // --rootless` writes); EPERM: not allowed in this user namespace. runc then
                // binds the container's own cgroup instead, as below.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EPERM)) => {}
                Err(e) => return Err(Error::os("mount cgroup2", e)),
            }
        }
        for (_, host) in (ctx.cgroup_binds)() {
            let tree = open_tree(libc::AT_FDCWD, &cstr(&host), true)
                .map_err(|e| Error::os("bind cgroup", e))?;
            attach_bind(
                tree,
                &target,
                &MountOpts {
                    flags,
                    ..Default::default()
                },
            )
            .map_err(|e| Error::os("bind cgroup", e))?;
        }
        return Ok(());
    }
    // v1 / hybrid: a tmpfs with one bind per hierarchy of the container's own cgroup.
    mount(
        Some(c"tmpfs"),
        &fd_path(&target),
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(c"mode=755"),
    )
    .map_err(|e| Error::os("mount tmpfs for cgroups", e))?;
    // The tmpfs just mounted (`target` still names the directory under it). It is new, empty
    // and visible only in this mount namespace, so its subdirectories are made and opened with
    // plain mkdirat/openat below it: 2 syscalls per hierarchy instead of an openat2 that fails,
    // one for the parent, the mkdirat and one more openat2.
    let tmp = open_in_root(
        ctx.rootfs_fd.as_raw_fd(),
        dest,
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )
    .map_err(|e| Error::os("cgroup tmpfs", e))?;
    for (name, host) in (ctx.cgroup_binds)() {
        let t = if !name.is_empty() && !name.contains('/') && name != "." && name != ".." {
            let cname = cstr_s(&name);
            cvt(unsafe { libc::mkdirat(tmp.as_raw_fd(), cname.as_ptr(), 0o755) })
                .map_err(|e| Error::os(format!("cgroup tmpfs: mkdir {name}"), e))?;
            let fd = cvt(unsafe {
                libc::openat(
                    tmp.as_raw_fd(),
                    cname.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            })
            .map_err(|e| Error::os(format!("cgroup tmpfs: {name}"), e))?;
            unsafe { OwnedFd::from_raw_fd(fd) }
        } else {
            ensure_in_root(ctx.rootfs_fd, &dest.join(&name), false)?
        };
        let tree = open_tree(libc::AT_FDCWD, &cstr(&host), false)
            .map_err(|e| Error::os(format!("bind cgroup {name}"), e))?;
        move_mount_to_fd(tree.as_raw_fd(), t.as_raw_fd())
            .map_err(|e| Error::os(format!("bind cgroup {name}"), e))?;
    }
    // The mount's flags (read-only, nosuid, ...) on the tmpfs and every bind below it at once:
    // one recursive mount_setattr instead of one per bind plus a read-only remount. `tmp` was
    // opened before the binds, so it names the tmpfs' root.
    let (set, clr) = bind_attrs(&MountOpts {
        flags,
        ..Default::default()
    });
    mount_setattr(tmp.as_raw_fd(), true, set, clr)
        .map_err(|e| Error::os("cgroup mount flags", e))?;
    Ok(())
}

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

/// Create one device node in the rootfs; falls back to bind-mounting the host's node when mknod
/// is not permitted (user namespaces).
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
        root, &dir, path, kind, major, minor, mode, uid, gid, in_userns,
    )
}

#[allow(clippy::too_many_arguments)]
fn create_device_in(
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
) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::msg(format!("linux.devices: bad path {}", path.display())))?;
    // mknodat needs a real directory fd (O_PATH works for *at calls with a name).
    let cname = cstr(name);
    unsafe { libc::unlinkat(dir.as_raw_fd(), cname.as_ptr(), 0) };
    let r = if in_userns {
        -1
    } else {
        unsafe {
            libc::mknodat(
                dir.as_raw_fd(),
                cname.as_ptr(),
                kind | (mode & 0o7777),
                libc::makedev(major, minor),
            )
        }
    };
    if r == 0 {
        let r = unsafe {
            libc::fchownat(
                dir.as_raw_fd(),
                cname.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r < 0 {
            return Err(Error::last_os(format!(
                "linux.devices: chown {}",
                path.display()
            )));
        }
        // mknod is subject to umask; set the exact mode (the node was just made by us: a plain
        // name in a directory we hold, no symlink can be there).
        if unsafe { libc::fchmodat(dir.as_raw_fd(), cname.as_ptr(), mode & 0o7777, 0) } < 0 {
            return Err(Error::last_os(format!(
                "linux.devices: chmod {}",
                path.display()
            )));
        }
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
    // Bind the host's node of the same path.
    let host = Path::new("/dev").join(path.strip_prefix("/dev").unwrap_or(path));
    let target = ensure_in_root(root, path, true)?;
    let tree = open_tree(libc::AT_FDCWD, &cstr(&host), false)
        .map_err(|e| Error::os(format!("linux.devices: bind {}", host.display()), e))?;
    attach_bind(tree, &target, &MountOpts::default())
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
    if dev_is_tmpfs {
        for (name, maj, min) in default_devices() {
            let p = Path::new("/dev").join(name);
            if devices.iter().any(|d| d.path() == &p) {
                continue;
            }
            create_device_in(
                root,
                &dev,
                &p,
                libc::S_IFCHR,
                maj,
                min,
                0o666,
                0,
                0,
                in_userns,
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
                &dev,
                d.path(),
                kind,
                d.major() as u32,
                d.minor() as u32,
                mode,
                uid,
                gid,
                in_userns,
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
            if name == "ptmx" {
                unsafe { libc::unlinkat(dev.as_raw_fd(), n.as_ptr(), 0) };
            }
            let r = unsafe { libc::symlinkat(target.as_ptr(), dev.as_raw_fd(), n.as_ptr()) };
            if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                return Err(Error::last_os(format!("creating /dev/{name}")));
            }
        }
    }
    Ok(())
}

/// pivot_root into `rootfs` and detach the old root. The old root is made rslave first so the
/// lazy unmount cannot propagate to the host.
pub fn pivot(rootfs: &Path) -> Result<()> {
    let c = cstr(rootfs);
    let newroot = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if newroot < 0 {
        return Err(Error::last_os("opening the rootfs for pivot_root"));
    }
    let newroot = unsafe { OwnedFd::from_raw_fd(newroot) };
    // An fd on the old root, so that after pivot_root we can name exactly that mount: "." would
    // name the new root for mount(2) (which does not follow the old root stacked on it) and
    // turning the container's own mounts into slaves would undo their propagation options.
    let oldroot = unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    let oldroot = (oldroot >= 0).then(|| unsafe { OwnedFd::from_raw_fd(oldroot) });
    cvt(unsafe { libc::fchdir(newroot.as_raw_fd()) }).map_err(|e| Error::os("chdir rootfs", e))?;
    cvt(
        unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) } as libc::c_int,
    )
    .map_err(|e| Error::os("pivot_root", e))?;
    // Make the old root rslave so its lazy unmount cannot propagate to the host, then detach it.
    // Through /proc/self/fd when the container has a /proc; otherwise "/" was already made rslave
    // (or the configured propagation) before the pivot and "." reaches the old root for umount2.
    let via_fd = oldroot
        .as_ref()
        .map(fd_path)
        .filter(|p| mount(None, p, None, libc::MS_SLAVE | libc::MS_REC, None).is_ok());
    match via_fd {
        Some(p) => cvt(unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) })
            .map_err(|e| Error::os("detaching the old root", e))?,
        None => cvt(unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) })
            .map_err(|e| Error::os("detaching the old root", e))?,
    };
    drop(oldroot);
    cvt(unsafe { libc::chdir(c"/".as_ptr()) }).map_err(|e| Error::os("chdir /", e))?;
    Ok(())
}

/// --no-pivot (or no mount namespace): move the rootfs over / and chroot into it.
pub fn move_and_chroot(rootfs: &Path) -> Result<()> {
    let c = cstr(rootfs);
    cvt(unsafe { libc::chdir(c.as_ptr()) }).map_err(|e| Error::os("chdir rootfs", e))?;
    mount(Some(c"."), c"/", None, libc::MS_MOVE, None)
        .map_err(|e| Error::os("moving the rootfs to /", e))?;
    cvt(unsafe { libc::chroot(c".".as_ptr()) }).map_err(|e| Error::os("chroot", e))?;
    cvt(unsafe { libc::chdir(c"/".as_ptr()) }).map_err(|e| Error::os("chdir /", e))?;
    Ok(())
}

/// Masked paths (after pivot_root): directories get a read-only empty tmpfs, files /dev/null.
pub fn mask_paths(paths: &[String]) -> Result<()> {
    for p in paths {
        let c = cstr_s(p);
        // One stat decides: a failed mount(2) is not cheap (the kernel waits for an RCU grace
        // period to free the half-made mount), so never try the wrong kind first.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::stat(c.as_ptr(), &mut st) } < 0 {
            continue; // missing: nothing to mask
        }
        let r = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            mount(Some(c"tmpfs"), &c, Some(c"tmpfs"), libc::MS_RDONLY, None)
        } else {
            mount(Some(c"/dev/null"), &c, None, libc::MS_BIND, None)
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
        let target = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if target < 0 {
            return Err(Error::last_os(format!("linux.readonlyPaths: {p}")));
        }
        let target = unsafe { OwnedFd::from_raw_fd(target) };
        move_mount_to_fd(tree.as_raw_fd(), target.as_raw_fd())
            .map_err(|e| Error::os(format!("linux.readonlyPaths: {p}"), e))?;
    }
    Ok(())
}

/// root.readonly: remount / read-only, keeping the flags the kernel locks.
pub fn readonly_root() -> Result<()> {
    remount_readonly(c"/", "root.readonly", "/")
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

/// Remount `path` read-only (bind remount), keeping the nosuid/nodev/noexec flags it has: the
/// kernel refuses a remount that would clear a flag it locked.
fn remount_readonly(path: &std::ffi::CStr, field: &str, shown: &str) -> Result<()> {
    // SAFETY: a zeroed statvfs is a valid out-buffer.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs with a NUL-terminated path and a buffer that outlive the call.
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

pub fn set_sysctls(sysctl: &std::collections::HashMap<String, String>) -> Result<()> {
    for (k, v) in sysctl {
        let path = format!("/proc/sys/{}", k.replace('.', "/"));
        std::fs::write(&path, v).map_err(|e| Error::os(format!("linux.sysctl: {k}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn cgroup_binds_planned_and_encoded() {
        let root = std::env::temp_dir().join(format!("sprout-cgbinds-{}", std::process::id()));
        for d in ["cpu,cpuacct", "memory", "systemd", "unified"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let text = "5:cpu,cpuacct:/own\n4:memory:/m/own\n3:name=systemd:/own\n\
                    2:rdma:/\n0::/own\n";
        // As the parent plans them: the container's paths where it joins, its own elsewhere.
        let planned = cgroup_binds_from(&root, text, |c| match c {
            "cpu,cpuacct" | "name=systemd" | "" => Some("/own/ctr".to_string()),
            "memory" => Some("/m/own/ctr".to_string()),
            _ => None,
        });
        let want: CgroupBinds = vec![
            ("cpu,cpuacct".into(), root.join("cpu,cpuacct/own/ctr")),
            ("memory".into(), root.join("memory/m/own/ctr")),
            ("systemd".into(), root.join("systemd/own/ctr")),
            // rdma is not mounted under root: no bind.
            ("unified".into(), root.join("unified/own/ctr")),
        ];
        assert_eq!(planned, want);
        // What the init would read from /proc/self/cgroup once moved in: the same binds.
        let joined = "5:cpu,cpuacct:/own/ctr\n4:memory:/m/own/ctr\n\
                      3:name=systemd:/own/ctr\n2:rdma:/\n0::/own/ctr\n";
        assert_eq!(cgroup_binds_from(&root, joined, |_| None), want);
        let enc = encode_cgroup_binds(&want);
        assert_eq!(
            decode_cgroup_binds(std::str::from_utf8(&enc).unwrap()),
            want
        );
        assert!(decode_cgroup_binds("").is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn options() {
        let o = parse_options(&s(&[
            "nosuid",
            "noexec",
            "nodev",
            "mode=755",
            "size=65536k",
        ]))
        .unwrap();
        assert_eq!(o.flags, libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_NODEV);
        assert_eq!(o.data, "mode=755,size=65536k");
        let o = parse_options(&s(&["rbind", "ro", "rprivate"])).unwrap();
        assert!(o.bind && o.recursive);
        assert_eq!(o.flags, libc::MS_RDONLY);
        assert_eq!(o.propagation, vec![libc::MS_PRIVATE | libc::MS_REC]);
        let o = parse_options(&s(&["ro", "rw"])).unwrap();
        assert_eq!(o.flags, 0);
        // idmap/ridmap are no mount data (the runtime id-maps the tree, crate::idmap).
        let o = parse_options(&s(&["rbind", "idmap", "ridmap"])).unwrap();
        assert!(o.bind && o.recursive && o.data.is_empty() && o.flags == 0);
        let o = parse_options(&s(&["rro"])).unwrap();
        assert_eq!(o.rec_attr_set, MOUNT_ATTR_RDONLY);
    }

    #[test]
    fn bind_atime_attrs_clear_the_whole_enum() {
        let o = parse_options(&s(&["bind", "nosuid", "strictatime", "mode=755"])).unwrap();
        assert_eq!(
            bind_attrs(&o),
            (
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_STRICTATIME,
                MOUNT_ATTR__ATIME
            )
        );
        let o = parse_options(&s(&["bind", "relatime", "ro"])).unwrap();
        assert_eq!(bind_attrs(&o), (MOUNT_ATTR_RDONLY, MOUNT_ATTR__ATIME));
        let o = parse_options(&s(&["bind", "rw", "suid"])).unwrap();
        assert_eq!(bind_attrs(&o), (0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID));
        let o = parse_options(&s(&["bind", "noatime"])).unwrap();
        assert_eq!(bind_attrs(&o), (MOUNT_ATTR_NOATIME, MOUNT_ATTR__ATIME));
    }

    #[test]
    fn attrs() {
        assert_eq!(
            attr_from_flags(libc::MS_RDONLY | libc::MS_NODEV),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV
        );
    }
}
