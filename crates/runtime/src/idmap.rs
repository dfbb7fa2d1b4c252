//! Id-mapped bind mounts (runtime-spec 1.3: a mount's `uidMappings`/`gidMappings`, the options
//! `idmap` and `ridmap`).
//!
//! The runtime makes each tree on the host side, before the init mounts anything: an
//! `open_tree(OPEN_TREE_CLONE)` of the source (with `AT_RECURSIVE` for `rbind`), then
//! `mount_setattr(MOUNT_ATTR_IDMAP)` (with `AT_RECURSIVE` for `ridmap`) with a user namespace
//! that carries the mapping. The detached tree goes to the init over the sync channel
//! (`sync::TREE`) and the init attaches it with move_mount like any other bind
//! (`rootfs::mount_one`), its other options applied first. As runc: a mount's own mappings get
//! a user namespace made for them (one per distinct mapping, held by a short-lived child that
//! is killed once its namespace is open); `idmap`/`ridmap` without mappings use the container's
//! user namespace (the init's, its maps written; or the one joined by path).
//!
//! A mount's mapping reads as the spec's container maps do: a file owned on disk by
//! `containerID + n` is seen as `hostID + n`.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use oci_spec::runtime::{Linux, LinuxIdMapping, LinuxNamespaceType, Mount};

use crate::bail_field;
use crate::error::{Error, Kind, Result};
use crate::sys::cstr;
use std::os::fd::FromRawFd;

/// Whether `m` is id-mapped: it names `idmap`/`ridmap` or carries mappings of its own (runc
/// treats mappings without either option as `idmap`).
pub fn is_idmapped(m: &Mount) -> bool {
    m.uid_mappings().is_some()
        || m.gid_mappings().is_some()
        || m.options()
            .iter()
            .flatten()
            .any(|o| o == "idmap" || o == "ridmap")
}

/// Whether the mapping applies to every mount of the tree (`ridmap`), not only its top.
fn recursive_map(m: &Mount) -> bool {
    m.options().iter().flatten().any(|o| o == "ridmap")
}

fn recursive_bind(m: &Mount) -> bool {
    m.options().iter().flatten().any(|o| o == "rbind")
}

fn container_userns(linux: Option<&Linux>) -> Option<Option<&Path>> {
    linux?
        .namespaces()
        .iter()
        .flatten()
        .find(|n| n.typ() == LinuxNamespaceType::User)
        .map(|n| n.path().as_deref())
}

/// Checks of `mounts[i]` at create, before anything is made (runc's checkIDMapMounts):
/// bind mounts only, root only, both maps or the container's user namespace.
pub fn validate(i: usize, m: &Mount, linux: Option<&Linux>, euid: u32) -> Result<()> {
    if !is_idmapped(m) {
        return Ok(());
    }
    if !crate::rootfs::is_bind(m) {
        bail_field!(format!("mounts[{i}]"), "id-mapped mounts (idmap, ridmap, uidMappings/gidMappings) are only supported for bind mounts");
    }
    if euid != 0 {
        bail_field!(
            format!("mounts[{i}]"),
            "id-mapped mounts are not supported for rootless containers"
        );
    }
    let uid = m.uid_mappings().as_deref();
    let gid = m.gid_mappings().as_deref();
    match (uid, gid) {
        (None, None) => {
            if container_userns(linux).is_none() {
                bail_field!(format!("mounts[{i}]"), "idmap without uidMappings/gidMappings uses the container's user namespace, and linux.namespaces has none");
            }
        }
        (Some(u), Some(g)) if !u.is_empty() && !g.is_empty() => {
            check_maps(i, "uidMappings", u)?;
            check_maps(i, "gidMappings", g)?;
        }
        (u, _) => {
            let missing = if u.is_none_or(|u| u.is_empty()) {
                "uidMappings"
            } else {
                "gidMappings"
            };
            bail_field!(
                format!("mounts[{i}].{missing}"),
                "an id-mapped mount needs both uidMappings and gidMappings"
            );
        }
    }
    Ok(())
}

fn check_maps(i: usize, field: &str, maps: &[LinuxIdMapping]) -> Result<()> {
    for (j, x) in maps.iter().enumerate() {
        if x.size() == 0 {
            bail_field!(
                format!("mounts[{i}].{field}[{j}].size"),
                "must be at least 1"
            );
        }
        let end = |v: u32| u64::from(v) + u64::from(x.size());
        if end(x.container_id()) > 1 << 32 || end(x.host_id()) > 1 << 32 {
            bail_field!(
                format!("mounts[{i}].{field}[{j}]"),
                "the range passes 4294967295"
            );
        }
    }
    Ok(())
}

/// A user namespace that only carries a mapping: a child cloned into a new user namespace, its
/// maps written, its namespace opened, then killed and reaped (the open fd keeps the namespace).
fn mapping_userns(uid: &[LinuxIdMapping], gid: &[LinuxIdMapping], i: usize) -> Result<OwnedFd> {
    let (pid, pidfd) = crate::sys::clone3(libc::CLONE_NEWUSER as u64, None).map_err(|e| {
        Error::os(
            format!("mounts[{i}]: a user namespace for the id mapping"),
            e,
        )
    })?;
    if pid == 0 {
        // The child only waits to be killed: async-signal-safe calls, no allocation.
        // SAFETY: prctl, getppid, pause and _exit take no pointers; the runtime parent kills
        // this child by its pidfd below, and PDEATHSIG ends it if the runtime dies first.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() == 1 {
                libc::_exit(0);
            }
            loop {
                libc::pause();
            }
        }
    }
    let pidfd = pidfd.expect("clone3 gives a pidfd");
    let r = (|| {
        // Root only (id-mapped mounts are refused otherwise): the direct write, never the
        // newuidmap fallback.
        for (kind, field, helper, maps) in [
            ("uid_map", "uidMappings", "newuidmap", uid),
            ("gid_map", "gidMappings", "newgidmap", gid),
        ] {
            crate::namespaces::write_one_map(
                pid,
                kind,
                &format!("mounts[{i}].{field}"),
                helper,
                0,
                0,
                maps,
            )?;
        }
        open_ns(&format!("/proc/{pid}/ns/user")).map_err(|e| {
            Error::os(
                format!("mounts[{i}]: opening the mapping's user namespace"),
                e,
            )
        })
    })();
    let _ = crate::sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
    let mut status = 0;
    // SAFETY: `pid` is our own child (its pidfd is still open, so the pid is not reused);
    // `status` is a valid out pointer.
    unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    r
}

fn open_ns(path: &str) -> std::io::Result<OwnedFd> {
    std::fs::File::open(path).map(OwnedFd::from)
}

/// The container's user namespace, whose mapping a mount without maps of its own takes: the
/// one joined by path, else the init's new one.
fn open_container_userns(linux: Option<&Linux>, init_pid: i32, i: usize) -> Result<OwnedFd> {
    let path = match container_userns(linux) {
        Some(Some(p)) => p.display().to_string(),
        _ => format!("/proc/{init_pid}/ns/user"),
    };
    open_ns(&path).map_err(|e| {
        Error::os(
            format!("mounts[{i}]: the container's user namespace {path}"),
            e,
        )
    })
}

/// An id-mapped mount whose source lies inside the rootfs (`<rootfs>/mnt/x`): the source may be
/// on a mount an earlier entry makes, so its tree is made when the init reaches it
/// ([`make_late_tree`], sync::TREE_REQ), not with the others before GO.
pub fn source_in_rootfs(bundle: &Path, rootfs: &Path, m: &Mount) -> bool {
    is_idmapped(m) && crate::rootfs::bind_source(bundle, m).is_some_and(|s| s.starts_with(rootfs))
}

/// The id-mapped trees of `mounts`, by index, for the init `init_pid` (whose user namespace,
/// when it has a new one, has its maps written already), except those whose source is inside
/// the rootfs ([`source_in_rootfs`]). An error names the mount.
pub fn make_trees(
    bundle: &Path,
    rootfs: &Path,
    mounts: &[Mount],
    linux: Option<&Linux>,
    init_pid: i32,
) -> Result<Vec<(usize, OwnedFd)>> {
    let mut helpers: HashMap<String, OwnedFd> = HashMap::new();
    let mut container_ns: Option<OwnedFd> = None;
    let mut trees = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        if !is_idmapped(m) || source_in_rootfs(bundle, rootfs, m) {
            continue;
        }
        let dest = m.destination().display();
        let src = crate::rootfs::bind_source(bundle, m).ok_or_else(|| {
            Error::new(
                Kind::Config,
                format!("mounts[{i}] ({dest}): bind mount needs a source"),
            )
        })?;
        let userns = match (m.uid_mappings().as_deref(), m.gid_mappings().as_deref()) {
            (Some(u), Some(g)) => {
                let key = format!(
                    "{}|{}",
                    crate::namespaces::map_text(u),
                    crate::namespaces::map_text(g)
                );
                if !helpers.contains_key(&key) {
                    helpers.insert(key.clone(), mapping_userns(u, g, i)?);
                }
                helpers[&key].as_raw_fd()
            }
            _ => {
                if container_ns.is_none() {
                    container_ns = Some(open_container_userns(linux, init_pid, i)?);
                }
                container_ns.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1)
            }
        };
        let tree = crate::rootfs::open_tree(libc::AT_FDCWD, &cstr(&src), recursive_bind(m))
            .map_err(|e| {
                Error::os(
                    format!("mounts[{i}] ({dest}): cloning {}", src.display()),
                    e,
                )
            })?;
        crate::rootfs::set_idmap(&tree, recursive_map(m), userns).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EINVAL) {
                " (the filesystem may not support id-mapped mounts on this kernel)"
            } else {
                ""
            };
            Error::msg(format!(
                "mounts[{i}] ({dest}): id-mapping {}: {e}{hint}",
                src.display()
            ))
        })?;
        trees.push((i, tree));
    }
    Ok(trees)
}

/// The id-mapped tree of `mounts[i]`, whose source is inside the rootfs, made now that the init
/// has made the mounts before it: a thread joins the init's mount namespace (through `pidfd`,
/// with the runtime's credentials, which the id mapping needs), resolves the source inside the
/// rootfs (openat2 RESOLVE_IN_ROOT: a symlink of the image cannot lead it out) and clones and
/// id-maps it there; the tree is usable in that namespace only, where the init attaches it.
pub fn make_late_tree(
    bundle: &Path,
    rootfs: &Path,
    mounts: &[Mount],
    linux: Option<&Linux>,
    init_pid: i32,
    pidfd: &OwnedFd,
    i: usize,
) -> Result<OwnedFd> {
    let m = mounts
        .get(i)
        .filter(|m| source_in_rootfs(bundle, rootfs, m))
        .ok_or_else(|| Error::msg(format!("mounts[{i}]: no id-mapped mount inside the rootfs")))?;
    let dest = m.destination().display();
    let src = crate::rootfs::bind_source(bundle, m).unwrap_or_default();
    let rel = src
        .strip_prefix(rootfs)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let userns = match (m.uid_mappings().as_deref(), m.gid_mappings().as_deref()) {
        (Some(u), Some(g)) => mapping_userns(u, g, i)?,
        _ => open_container_userns(linux, init_pid, i)?,
    };
    let root = cstr(rootfs);
    let pid = pidfd.as_raw_fd();
    let made = std::thread::scope(|s| {
        s.spawn(|| -> std::io::Result<OwnedFd> {
            // SAFETY: unshare(CLONE_FS) takes a flag only and acts on this scoped thread alone.
            crate::sys::cvt(unsafe { libc::unshare(libc::CLONE_FS) })?;
            // SAFETY: setns moves only this thread (its fs state no longer shared, as CLONE_NEWNS
            // requires) into the init's mount namespace; `pid` is the raw fd of the borrowed
            // `pidfd`, open for the whole scope.
            crate::sys::cvt(unsafe { libc::setns(pid, libc::CLONE_NEWNS) })?;
            // SAFETY: `root` is a NUL-terminated path; a successful open returns a new fd that
            // nothing else owns.
            let rfd = unsafe {
                libc::open(
                    root.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            if rfd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: open succeeded, so `rfd` is a new descriptor that nothing else owns.
            let rfd = unsafe { OwnedFd::from_raw_fd(rfd) };
            let at = crate::sys::open_in_root(rfd.as_raw_fd(), &rel, libc::O_PATH, 0)?;
            let tree = crate::rootfs::open_tree(at.as_raw_fd(), c"", recursive_bind(m))?;
            crate::rootfs::set_idmap(&tree, recursive_map(m), userns.as_raw_fd())?;
            Ok(tree)
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the mount-source thread panicked")))
    });
    made.map_err(|e| {
        Error::os(
            format!("mounts[{i}] ({dest}): id-mapping {}", src.display()),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(json: &str) -> Mount {
        serde_json::from_str(json).unwrap()
    }

    fn linux(json: &str) -> Linux {
        serde_json::from_str(json).unwrap()
    }

    const MAPS: &str = r#""uidMappings":[{"containerID":0,"hostID":100000,"size":65536}],"gidMappings":[{"containerID":0,"hostID":100000,"size":65536}]"#;

    #[test]
    fn which_mounts_are_idmapped() {
        assert!(!is_idmapped(&mount(
            r#"{"destination":"/a","source":"/b","options":["rbind"]}"#
        )));
        assert!(is_idmapped(&mount(
            r#"{"destination":"/a","source":"/b","options":["rbind","idmap"]}"#
        )));
        assert!(is_idmapped(&mount(
            r#"{"destination":"/a","source":"/b","options":["ridmap"]}"#
        )));
        let m = mount(&format!(
            r#"{{"destination":"/a","source":"/b","options":["bind"],{MAPS}}}"#
        ));
        assert!(is_idmapped(&m));
        assert!(!recursive_map(&m));
        assert!(!recursive_bind(&m));
    }

    #[test]
    fn validation_names_the_field() {
        let no_ns = linux("{}");
        let with_ns = linux(r#"{"namespaces":[{"type":"user"}]}"#);
        let ok = mount(&format!(
            r#"{{"destination":"/a","source":"/b","options":["bind"],{MAPS}}}"#
        ));
        validate(0, &ok, Some(&no_ns), 0).unwrap();
        let e = validate(0, &ok, Some(&no_ns), 1000)
            .unwrap_err()
            .message()
            .to_string();
        assert!(e.contains("rootless"), "{e}");
        let tmpfs = mount(&format!(
            r#"{{"destination":"/a","type":"tmpfs","source":"tmpfs",{MAPS}}}"#
        ));
        let e = validate(3, &tmpfs, None, 0)
            .unwrap_err()
            .message()
            .to_string();
        assert!(
            e.starts_with("mounts[3]: ") && e.contains("only supported for bind mounts"),
            "{e}"
        );
        let bare = mount(r#"{"destination":"/a","source":"/b","options":["bind","idmap"]}"#);
        let e = validate(1, &bare, Some(&no_ns), 0)
            .unwrap_err()
            .message()
            .to_string();
        assert!(
            e.contains("mounts[1]") && e.contains("user namespace"),
            "{e}"
        );
        validate(1, &bare, Some(&with_ns), 0).unwrap();
        let half = mount(
            r#"{"destination":"/a","source":"/b","options":["bind"],"uidMappings":[{"containerID":0,"hostID":1,"size":1}]}"#,
        );
        let err = validate(2, &half, Some(&with_ns), 0).unwrap_err();
        assert_eq!(err.field_path(), Some("mounts[2].gidMappings"));
        assert_eq!(err.kind(), Kind::Config);
        let e = err.message().to_string();
        assert!(e.starts_with("mounts[2].gidMappings: "), "{e}");
        let zero = mount(
            r#"{"destination":"/a","source":"/b","options":["bind"],"uidMappings":[{"containerID":0,"hostID":1,"size":0}],"gidMappings":[{"containerID":0,"hostID":1,"size":1}]}"#,
        );
        let err = validate(2, &zero, None, 0).unwrap_err();
        assert_eq!(err.field_path(), Some("mounts[2].uidMappings[0].size"));
        let e = err.message().to_string();
        assert!(e.starts_with("mounts[2].uidMappings[0].size"), "{e}");
    }
}
