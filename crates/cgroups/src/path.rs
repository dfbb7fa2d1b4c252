//! Resolving an OCI `linux.cgroupsPath` into per-hierarchy directories.
//!
//! Rules (runc-compatible):
//! - relative path (no leading '/'): nested under the calling process's own cgroup, per
//!   hierarchy (read from `/proc/self/cgroup`);
//! - absolute path: from the hierarchy root;
//! - `None` / empty: `<own cgroup>/<container id>`;
//! - any `..` component is rejected; `.` and empty components are dropped;
//! - with `--systemd-cgroup`, the path must be `slice:prefix:name` and is expanded the way
//!   systemd lays out units (`a-b.slice` -> `a.slice/a-b.slice`, `prefix-name.scope`).

use crate::{Error, Result};

/// Where the container's cgroup hangs, independent of the hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgPath {
    /// `true`: `rel` is relative to the own cgroup of each hierarchy; `false`: to its root.
    pub relative: bool,
    /// Normalized, '/'-separated, never empty, no leading or trailing '/'.
    pub rel: String,
}

/// The calling process's cgroup membership, parsed from `/proc/self/cgroup`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SelfCgroup {
    /// (controller name, path) for every v1 hierarchy; `name=systemd` is kept as is.
    /// Co-mounted controllers ("cpu,cpuacct") give one entry per controller.
    pub v1: Vec<(String, String)>,
    /// (controller, the hierarchy's full controller list) for co-mounted controllers only,
    /// e.g. ("cpu", "cpu,cpuacct"): the mount point to try when /sys/fs/cgroup/cpu is missing.
    pub comounted: Vec<(String, String)>,
    /// The "0::/path" entry.
    pub unified: Option<String>,
}

impl SelfCgroup {
    pub fn parse(s: &str) -> SelfCgroup {
        let mut out = SelfCgroup::default();
        for line in s.lines() {
            let mut it = line.splitn(3, ':');
            let (Some(id), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if id == "0" && ctrls.is_empty() {
                out.unified = Some(path.to_string());
                continue;
            }
            let multi = ctrls.contains(',');
            for c in ctrls.split(',').filter(|c| !c.is_empty()) {
                out.v1.push((c.to_string(), path.to_string()));
                if multi {
                    out.comounted.push((c.to_string(), ctrls.to_string()));
                }
            }
        }
        out
    }

    pub fn read() -> Result<SelfCgroup> {
        let p = std::path::Path::new("/proc/self/cgroup");
        let s = crate::fs::read(p).map_err(|e| Error::Io {
            path: p.into(),
            source: e,
        })?;
        Ok(SelfCgroup::parse(&s))
    }

    pub fn comounted(&self, controller: &str) -> Option<&str> {
        self.comounted
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, p)| p.as_str())
    }

    pub fn v1_path(&self, controller: &str) -> Option<&str> {
        self.v1
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, p)| p.as_str())
    }
}

fn bad_path(p: &str, why: &str) -> Error {
    Error::Invalid(format!("linux.cgroupsPath {p:?}: {why}"))
}

/// Normalize '/'-separated components: drop empty and '.', reject '..'.
fn normalize(p: &str, whole: &str) -> Result<String> {
    let mut out = String::with_capacity(p.len());
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(bad_path(whole, "'..' components are not allowed")),
            c => {
                if !out.is_empty() {
                    out.push('/');
                }
                out.push_str(c);
            }
        }
    }
    Ok(out)
}

fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id == "." || id == ".." || id.contains('/') {
        return Err(Error::Invalid(format!(
            "container id {id:?} cannot be used as a cgroup name"
        )));
    }
    Ok(())
}

/// Resolve a cgroupfs-style `linux.cgroupsPath`.
pub(crate) fn resolve(cgroups_path: Option<&str>, id: &str) -> Result<CgPath> {
    match cgroups_path {
        None | Some("") => {
            check_id(id)?;
            Ok(CgPath {
                relative: true,
                rel: id.to_string(),
            })
        }
        Some(p) => {
            let rel = normalize(p, p)?;
            if rel.is_empty() {
                return Err(bad_path(p, "must not name the root cgroup"));
            }
            Ok(CgPath {
                relative: !p.starts_with('/'),
                rel,
            })
        }
    }
}

/// Resolve a systemd-style `slice:prefix:name` path (see [`resolve_systemd_unit`]).
#[cfg(test)]
pub(crate) fn resolve_systemd(
    cgroups_path: Option<&str>,
    id: &str,
    systemd_running: impl FnOnce() -> bool,
) -> Result<CgPath> {
    resolve_systemd_unit(cgroups_path, id, systemd_running).map(|(cg, _, _)| cg)
}

/// Resolve a systemd-style `slice:prefix:name` path into the cgroup path systemd gives the
/// unit (relative to systemd's root), the slice and the unit name (`prefix-name.scope`, or
/// `name` when it is a slice). `systemd_running` is passed in so the check is done by the
/// caller only when needed.
pub(crate) fn resolve_systemd_unit(
    cgroups_path: Option<&str>,
    id: &str,
    systemd_running: impl FnOnce() -> bool,
) -> Result<(CgPath, String, String)> {
    if !systemd_running() {
        return Err(Error::Invalid(format!(
            "--systemd-cgroup: systemd is not running on this host (no /run/systemd/system; \
             {} can name a bus with org.freedesktop.systemd1)",
            crate::systemd::BUS_ENV
        )));
    }
    let owned;
    let p = match cgroups_path {
        None | Some("") => {
            check_id(id)?;
            owned = format!(":sprout:{id}");
            owned.as_str()
        }
        Some(p) => p,
    };
    let parts: Vec<&str> = p.split(':').collect();
    if parts.len() != 3 {
        return Err(bad_path(
            p,
            "with --systemd-cgroup it must have the form \"slice:prefix:name\"",
        ));
    }
    let (slice, prefix, name) = (parts[0], parts[1], parts[2]);
    if name.is_empty() {
        return Err(bad_path(
            p,
            "the name part of \"slice:prefix:name\" is empty",
        ));
    }
    for part in [slice, prefix, name] {
        if part.contains('/') {
            return Err(bad_path(p, "systemd unit names must not contain '/'"));
        }
        // systemd's unit name alphabet (unit_name_is_valid): [A-Za-z0-9:-_.\\@]; ':' is
        // the separator here.
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-_.\\@".contains(*c)))
        {
            return Err(bad_path(
                p,
                &format!("{c:?} is not allowed in a systemd unit name"),
            ));
        }
    }
    let slice = if slice.is_empty() {
        // runc: the user manager's default slice for rootless containers.
        if crate::running_rootless() {
            "user.slice"
        } else {
            "system.slice"
        }
    } else {
        slice
    };
    let mut rel = expand_slice(slice).map_err(|why| bad_path(p, &why))?;
    if !rel.is_empty() {
        rel.push('/');
    }
    let unit = if name.ends_with(".slice") {
        rel = expand_slice(name).map_err(|why| bad_path(p, &why))?;
        if rel.is_empty() {
            return Err(bad_path(p, "the name part must not be the root slice"));
        }
        name.to_string()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    if !name.ends_with(".slice") {
        rel.push_str(&unit);
    }
    if unit.len() > 255 {
        return Err(bad_path(p, "the unit name is longer than 255 bytes"));
    }
    Ok((
        CgPath {
            relative: false,
            rel,
        },
        slice.to_string(),
        unit,
    ))
}

/// "a-b-c.slice" -> "a.slice/a-b.slice/a-b-c.slice"; "-.slice" -> "" (the root slice).
pub(crate) fn expand_slice(slice: &str) -> std::result::Result<String, String> {
    let Some(stem) = slice.strip_suffix(".slice") else {
        return Err(format!(
            "{slice:?} is not a slice unit name (no .slice suffix)"
        ));
    };
    if stem == "-" {
        return Ok(String::new());
    }
    if stem.is_empty() || stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return Err(format!("invalid slice name {slice:?}"));
    }
    let mut out = String::new();
    let mut prefix = String::new();
    for comp in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(comp);
        if !out.is_empty() {
            out.push('/');
        }
        out.push_str(&prefix);
        out.push_str(".slice");
    }
    Ok(out)
}

/// Join a hierarchy-relative cgroup path ("/a/b") under a mount point.
/// runc's placement of relative paths on cgroup v2: the caller's cgroup, or its parent when the
/// caller's cgroup is a systemd scope (`….scope`).
pub(crate) fn beside_scope(own: &str) -> &str {
    if own.ends_with(".scope") {
        match own.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &own[..i],
        }
    } else {
        own
    }
}

pub(crate) fn under(mount: &std::path::Path, cg: &str) -> std::path::PathBuf {
    let cg = cg.trim_start_matches('/');
    if cg.is_empty() {
        mount.to_path_buf()
    } else {
        mount.join(cg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_go_beside_a_scope() {
        assert_eq!(
            beside_scope("/user.slice/user-0.slice/session-7.scope"),
            "/user.slice/user-0.slice"
        );
        assert_eq!(beside_scope("/init.scope"), "/");
        assert_eq!(
            beside_scope("/system.slice/foo.service"),
            "/system.slice/foo.service"
        );
        assert_eq!(beside_scope("/"), "/");
        assert_eq!(beside_scope("/a.scope/b"), "/a.scope/b");
    }

    #[test]
    fn parse_self_cgroup_hybrid() {
        let s = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/f62\n1:cpu,cpuacct:/x\n0::/\n";
        let c = SelfCgroup::parse(s);
        assert_eq!(c.v1_path("memory"), Some("/process_api/f62"));
        assert_eq!(c.v1_path("cpu"), Some("/x"));
        assert_eq!(c.v1_path("cpuacct"), Some("/x"));
        assert_eq!(c.comounted("cpuacct"), Some("cpu,cpuacct"));
        assert_eq!(c.comounted("memory"), None);
        assert_eq!(c.v1_path("name=systemd"), Some("/"));
        assert_eq!(c.v1_path("hugetlb"), None);
        assert_eq!(c.unified.as_deref(), Some("/"));
    }

    #[test]
    fn parse_self_cgroup_v2_only() {
        let c = SelfCgroup::parse("0::/user.slice/a b:c\n");
        assert!(c.v1.is_empty());
        assert_eq!(c.unified.as_deref(), Some("/user.slice/a b:c"));
    }

    #[test]
    fn resolve_rules() {
        assert_eq!(
            resolve(None, "abc").unwrap(),
            CgPath {
                relative: true,
                rel: "abc".into()
            }
        );
        assert_eq!(resolve(Some(""), "abc").unwrap().rel, "abc");
        assert_eq!(
            resolve(Some("/a//b/./c/"), "x").unwrap(),
            CgPath {
                relative: false,
                rel: "a/b/c".into()
            }
        );
        assert_eq!(
            resolve(Some("a/b"), "x").unwrap(),
            CgPath {
                relative: true,
                rel: "a/b".into()
            }
        );
        let e = resolve(Some("a/../../etc"), "x").unwrap_err().to_string();
        assert!(e.contains("linux.cgroupsPath") && e.contains(".."), "{e}");
        assert!(resolve(Some("/.."), "x").is_err());
        assert!(resolve(Some("/"), "x")
            .unwrap_err()
            .to_string()
            .contains("root"));
        assert!(resolve(None, "a/b").is_err());
        assert!(resolve(None, "..").is_err());
    }

    #[test]
    fn systemd_paths() {
        let e = resolve_systemd(Some("system.slice:docker:abc"), "x", || false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cgroup: --systemd-cgroup: systemd is not running on this host"),
            "{e}"
        );
        let e = resolve_systemd(Some("/foo/bar"), "x", || true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("slice:prefix:name"), "{e}");
        assert_eq!(
            resolve_systemd(Some("system.slice:docker:abc"), "x", || true).unwrap(),
            CgPath {
                relative: false,
                rel: "system.slice/docker-abc.scope".into()
            }
        );
        assert_eq!(
            resolve_systemd(Some("a-b.slice:p:c"), "x", || true)
                .unwrap()
                .rel,
            "a.slice/a-b.slice/p-c.scope"
        );
        assert_eq!(
            resolve_systemd(None, "id1", || true).unwrap().rel,
            "system.slice/sprout-id1.scope"
        );
        assert_eq!(
            resolve_systemd(Some("user.slice::x-y.slice"), "i", || true)
                .unwrap()
                .rel,
            // A slice's place in the tree comes from its name alone.
            "x.slice/x-y.slice"
        );
        let (_, slice, unit) =
            resolve_systemd_unit(Some("machine.slice:libpod:ab_c"), "i", || true).unwrap();
        assert_eq!(
            (slice.as_str(), unit.as_str()),
            ("machine.slice", "libpod-ab_c.scope")
        );
        let (cg, slice, unit) = resolve_systemd_unit(Some(":sprout:x"), "i", || true).unwrap();
        assert_eq!(cg.rel, "system.slice/sprout-x.scope");
        assert_eq!(
            (slice.as_str(), unit.as_str()),
            ("system.slice", "sprout-x.scope")
        );
        assert_eq!(
            resolve_systemd_unit(Some("-.slice:p:n"), "i", || true)
                .unwrap()
                .0
                .rel,
            "p-n.scope"
        );
        for bad in [
            "a.slice:p:n m",
            "a.slice:p$:n",
            "a.slice:p:n\n",
            "a.slice:p:-.slice",
        ] {
            let e = resolve_systemd(Some(bad), "i", || true)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("cgroup: linux.cgroupsPath"), "{bad}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(resolve_systemd(Some("bad:p:n"), "i", || true).is_err());
        assert!(resolve_systemd(Some("a.slice:p:"), "i", || true).is_err());
    }

    #[test]
    fn expand() {
        assert_eq!(expand_slice("-.slice").unwrap(), "");
        assert_eq!(
            expand_slice("a-b-c.slice").unwrap(),
            "a.slice/a-b.slice/a-b-c.slice"
        );
        assert!(expand_slice("a--b.slice").is_err());
        assert!(expand_slice("a").is_err());
    }
}
