//! The cgroup mount: which host cgroup directories it shows, and the mount itself.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{
    mount::MountCtx,
    mountapi::{attach_bind, mount_setattr, mount_setattr_private, move_mount_to_fd, open_tree},
    options::{bind_attrs, MountOpts},
    paths::ensure_in_root,
};
use crate::error::{Error, Result};
use crate::sys::{cstr, cstr_s, mount, mount_at, open_in_root};

/// What the cgroup mount needs: (name under /sys/fs/cgroup, host path of our cgroup in it).
pub type CgroupBinds = Vec<(String, PathBuf)>;

/// The init's own cgroups, read from /proc/self/cgroup (call once placed in its cgroup), on a
/// host of `layout` (the parent's detection: no statfs here).
pub fn own_cgroup_binds(layout: sprout_cgroups::Layout) -> CgroupBinds {
    let Ok(s) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    cgroup_binds_from(Path::new(CGROUP_ROOT), &s, Some(layout), |_| None)
}

pub(super) const CGROUP_ROOT: &str = "/sys/fs/cgroup";

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
    let binds = cgroup_binds_from(Path::new(CGROUP_ROOT), &s, Some(cg.layout()), |ctrls| {
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
/// the line's path (absolute within its hierarchy). The cgroup2 line ("0::") is the hierarchy
/// at `root` on pure v2 and at `root`/unified on a hybrid host; on a v1-only host it names
/// none: the kernel lists it there too once anything has mounted cgroup2 (a checkpoint's
/// cgroup yard, a tool), and binding it took the host's cgroup tmpfs, or an empty directory
/// of it, over the container's hierarchies. `layout` unknown: the hybrid reading where
/// `root` lists "unified", else pure v2.
pub(super) fn cgroup_binds_from(
    root: &Path,
    s: &str,
    layout: Option<sprout_cgroups::Layout>,
    path_of: impl Fn(&str) -> Option<String>,
) -> CgroupBinds {
    use sprout_cgroups::Layout;
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
    let unified_root = match layout {
        Some(Layout::V1) => None,
        Some(Layout::V2) => Some(""),
        Some(Layout::Hybrid) => Some("unified"),
        None if s.lines().any(|l| l.starts_with("0::")) && mounted("unified") => Some("unified"),
        None => Some(""),
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
            let Some(u) = unified_root else { continue };
            u.to_string()
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

pub(super) fn mount_cgroup(ctx: &MountCtx, dest: &Path, opts: &MountOpts) -> Result<()> {
    let target = ensure_in_root(ctx.rootfs_fd, dest, false)?;
    let flags = opts.flags | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    let bind_opts = MountOpts {
        flags,
        ..Default::default()
    };
    if ctx.cgroup_v2 {
        // In a cgroup namespace: a cgroup2 mount, whose root is the container's cgroup. Without
        // one it shows the whole tree, so that /sys/fs/cgroup + the path /proc/self/cgroup
        // gives is the container's own cgroup (a privileged pod's engine, systemd or a nested
        // runtime reads it that way). In the initial cgroup namespace that tree is the host's
        // /sys/fs/cgroup, bound (`host_hierarchy`): a new cgroup2 mount there would set the
        // hierarchy's global options to its own (none), clearing the host's nsdelegate and
        // memory_recursiveprot (runc issue 5258; runc and crun mount anew).
        if let Some(tree) = host_hierarchy() {
            // Private, as a new mount would be: not a slave of the host's mount.
            let (set, clr) = bind_attrs(&bind_opts);
            mount_setattr_private(tree.as_raw_fd(), set, clr)
                .and_then(|()| move_mount_to_fd(tree.as_raw_fd(), target.as_raw_fd()))
                .map_err(|e| Error::os("bind cgroup2", e))?;
            return Ok(());
        }
        match mount_at(Some(c"cgroup2"), &target, Some(c"cgroup2"), flags, None) {
            Ok(()) => return Ok(()),
            // EBUSY: the target is already a mount of the same cgroup2 superblock (the host's
            // /sys/fs/cgroup, brought in by the rbind of /sys that `spec --rootless` writes);
            // EPERM: not allowed in this user namespace. runc then binds the container's own
            // cgroup instead, as below.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EPERM)) => {}
            Err(e) => return Err(Error::os("mount cgroup2", e)),
        }
        for (_, host) in (ctx.cgroup_binds)() {
            let tree = open_tree(libc::AT_FDCWD, &cstr(&host), true)
                .map_err(|e| Error::os("bind cgroup", e))?;
            attach_bind(tree, &target, &bind_opts).map_err(|e| Error::os("bind cgroup", e))?;
        }
        return Ok(());
    }
    // v1 / hybrid: a tmpfs with one bind per hierarchy of the container's own cgroup.
    mount_at(
        Some(c"tmpfs"),
        &target,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(c"mode=755"),
    )
    .map_err(|e| Error::os("mount tmpfs for cgroups", e))?;
    // The tmpfs just mounted (`target` still names the directory under it). It is new, empty
    // and visible only in this mount namespace: nothing else can put a symlink in it, so its
    // subdirectories are made with a plain mkdirat below it and each bind is one mount(2)
    // onto `<name>` relative to it as the cwd (one fchdir for all: a /proc/self/fd/<tmpfs>
    // path walked procfs per bind): 2 syscalls per hierarchy, where an fd for the target plus
    // open_tree and move_mount took 6.
    let tmp = open_in_root(
        ctx.rootfs_fd.as_raw_fd(),
        dest,
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )
    .map_err(|e| Error::os("cgroup tmpfs", e))?;
    let mut in_tmp = false;
    for (name, host) in (ctx.cgroup_binds)() {
        if !name.is_empty() && !name.contains('/') && name != "." && name != ".." {
            let cname = cstr_s(&name);
            use rustix::fs::Mode;
            // A single component (no '/', not . or ..) in `tmp`.
            rustix::fs::mkdirat(&tmp, cname.as_c_str(), Mode::from_raw_mode(0o755))
                .map_err(|e| Error::os(format!("cgroup tmpfs: mkdir {name}"), e.into()))?;
            if !in_tmp {
                rustix::process::fchdir(&tmp)
                    .map_err(|e| Error::os("cgroup tmpfs: chdir", e.into()))?;
                in_tmp = true;
            }
            mount(Some(&cstr(&host)), &cname, None, libc::MS_BIND, None)
                .map_err(|e| Error::os(format!("bind cgroup {name}"), e))?;
        } else {
            let t = ensure_in_root(ctx.rootfs_fd, &dest.join(&name), false)?;
            let tree = open_tree(libc::AT_FDCWD, &cstr(&host), false)
                .map_err(|e| Error::os(format!("bind cgroup {name}"), e))?;
            move_mount_to_fd(tree.as_raw_fd(), t.as_raw_fd())
                .map_err(|e| Error::os(format!("bind cgroup {name}"), e))?;
        }
    }
    // The mount's flags (read-only, nosuid, ...) on the tmpfs and every bind below it at once:
    // one recursive mount_setattr instead of one per bind plus a read-only remount. `tmp` was
    // opened before the binds, so it names the tmpfs' root.
    let (set, clr) = bind_attrs(&bind_opts);
    mount_setattr(tmp.as_raw_fd(), true, set, clr)
        .map_err(|e| Error::os("cgroup mount flags", e))?;
    Ok(())
}

/// The inode numbers the kernel gives the initial namespaces (include/linux/proc_ns.h).
const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;
const PROC_CGROUP_INIT_INO: u64 = 0xEFFF_FFFB;
/// The inode of a cgroup2 hierarchy's root directory (kernfs' root node).
const CGROUP2_ROOT_INO: u64 = 1;

/// The host's cgroup2 hierarchy (/sys/fs/cgroup as this process sees it, a detached clone)
/// where the container mounts its cgroups without namespaces of its own: this process in the
/// initial cgroup and user namespaces, and /sys/fs/cgroup the root of a cgroup2 hierarchy.
///
/// Every cgroup2 mount made in the initial cgroup namespace applies its options to the one
/// hierarchy (the kernel's `apply_cgroup_root_flags`): a container's plain `cgroup` mount
/// clears the `nsdelegate` and `memory_recursiveprot` that systemd mounts it with, for the
/// whole host, and on 6.18 each such mount also takes the cgroup threadgroup rwsem for
/// writing, an RCU grace period (5–15 ms on this project's 2-core host). A bind of the same
/// root shows the same tree and changes nothing. `None` (a new mount, as before) in a cgroup
/// namespace, where the kernel applies no options; in a user namespace, where the mount is
/// refused and the container's own cgroup is bound instead; and where /sys/fs/cgroup is not
/// such a root.
pub fn host_hierarchy() -> Option<OwnedFd> {
    let ino = |ns: &std::ffi::CStr| rustix::fs::stat(ns).ok().map(|s| s.st_ino);
    if ino(c"/proc/self/ns/cgroup")? != PROC_CGROUP_INIT_INO
        || ino(c"/proc/self/ns/user")? != PROC_USER_INIT_INO
    {
        return None;
    }
    let tree = open_tree(libc::AT_FDCWD, c"/sys/fs/cgroup", false).ok()?;
    let root = rustix::fs::fstat(&tree).ok()?.st_ino;
    (root == CGROUP2_ROOT_INO && sprout_cgroups::is_cgroup2(&tree)).then_some(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    use sprout_cgroups::Layout;

    #[test]
    fn cgroup_binds_planned_and_encoded() {
        let root = std::env::temp_dir().join(format!("sprout-cgbinds-{}", std::process::id()));
        for d in ["cpu,cpuacct", "memory", "systemd", "unified"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let text = "5:cpu,cpuacct:/own\n4:memory:/m/own\n3:name=systemd:/own\n\
                    2:rdma:/\n0::/own\n";
        // As the parent plans them: the container's paths where it joins, its own elsewhere.
        let planned = cgroup_binds_from(&root, text, Some(Layout::Hybrid), |c| match c {
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
        assert_eq!(
            cgroup_binds_from(&root, joined, Some(Layout::Hybrid), |_| None),
            want
        );
        // Unknown layout: "unified" listed under the root reads as hybrid.
        assert_eq!(cgroup_binds_from(&root, joined, None, |_| None), want);
        // A v1-only host whose kernel lists the cgroup2 line (something mounted cgroup2
        // once), with an empty "unified" directory left in its tmpfs: no bind for it.
        let v1 = cgroup_binds_from(&root, joined, Some(Layout::V1), |_| None);
        assert_eq!(v1, want[..3].to_vec());
        // Without that directory, the line used to bind the tmpfs root itself ("").
        std::fs::remove_dir(root.join("unified")).unwrap();
        let v1 = cgroup_binds_from(&root, joined, Some(Layout::V1), |_| None);
        assert_eq!(v1, want[..3].to_vec());
        let enc = encode_cgroup_binds(&want);
        assert_eq!(
            decode_cgroup_binds(std::str::from_utf8(&enc).unwrap()),
            want
        );
        assert!(decode_cgroup_binds("").is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
