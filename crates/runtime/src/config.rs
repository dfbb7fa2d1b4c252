//! Loading and validating config.json. Parsing goes through serde_path_to_error so that a bad
//! field is reported by its JSON path ("linux.namespaces[1].type: unknown variant ..."). Every
//! check that can be done before touching the host is done here, so that a bad config fails before
//! anything exists that would need cleaning up.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType, Spec};

use crate::bail_field;
use crate::error::{Error, Kind, Result};

/// The runtime-spec versions we implement: 1.0.0 up to 1.3.x.
pub const OCI_VERSION: &str = "1.3.0";
pub const OCI_VERSION_MIN: &str = "1.0.0";

pub struct Config {
    pub spec: Spec,
    /// The raw bytes of config.json, kept so `create` can store them for `exec` without
    /// serialising the spec again.
    pub raw: Vec<u8>,
    pub bundle: PathBuf,
    /// Absolute path of the root filesystem.
    pub rootfs: PathBuf,
}

pub fn parse_spec(raw: &[u8], what: &str) -> Result<Spec> {
    // A valid config (the start path) is parsed without tracking the path: ~25 % faster
    // (examples/parsebench). Only a config that fails is parsed again with the tracker, for an
    // error that names the field.
    if let Ok(spec) = serde_json::from_slice::<Spec>(raw) {
        if !empty_page_size(&spec) && !crate::keycase::resources_in_another_case(raw) {
            return Ok(spec);
        }
    }
    // Capabilities unknown to this runtime (a newer kernel's) fail oci-spec's parse: drop them
    // with a warning and parse again (runtime-spec >= 1.1: SHOULD NOT fail; runc 1.2+, crun).
    // The spec's scheduler flag names are not oci-spec's: map them, and parse again.
    // Keys of linux.resources in another case (`pagesize`, `CPU`): the spec's spelling, as
    // Go's decoder matches them (keycase.rs).
    if let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(raw) {
        let mut changed = v
            .pointer_mut("/linux/resources")
            .is_some_and(crate::keycase::normalize_resources);
        if let Some(p) = v.get_mut("process") {
            changed |= drop_unknown_caps(p, "process.capabilities")?;
            changed |= map_scheduler_flags(p, "process.scheduler.flags")?;
        }
        if changed {
            return spec_from_value(v, what);
        }
    }
    let de = &mut serde_json::Deserializer::from_slice(raw);
    serde_path_to_error::deserialize(de).map_err(|e| field_error(e, what, "invalid JSON: "))
}

/// A hugepage limit whose `pageSize` came out empty (oci-spec defaults it): perhaps written in
/// another case (`pagesize`, runc's cgroups.bats), which the second pass below takes. Only
/// then does a valid config pay for that pass.
fn empty_page_size(spec: &Spec) -> bool {
    spec.linux()
        .as_ref()
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.hugepage_limits().as_ref())
        .is_some_and(|h| h.iter().any(|l| l.page_size().is_empty()))
}

/// Deserialize a spec (or a process) from a JSON value, an error naming the field.
pub fn spec_from_value<T: serde::de::DeserializeOwned>(
    v: serde_json::Value,
    what: &str,
) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| field_error(e, what, ""))
}

/// One line naming the field (`what: path: error`), or `what: {no_path}error` at the top level.
fn field_error<E: std::fmt::Display>(
    e: serde_path_to_error::Error<E>,
    what: &str,
    no_path: &str,
) -> Error {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if path == "." || path.is_empty() {
        Error::new(Kind::Config, format!("{what}: {no_path}{inner}"))
    } else if let Some(rest) = path.strip_prefix("linux.memoryPolicy") {
        // runc's words first ("invalid memory policy mode/flag"), which scripts match; the
        // typed parse's own reason after them.
        let part = if rest.starts_with(".mode") || inner.to_string().contains("`mode`") {
            " mode"
        } else if rest.starts_with(".flags") {
            " flag"
        } else if rest.starts_with(".nodes") {
            " node"
        } else {
            ""
        };
        Error::field(path, format!("invalid memory policy{part}: {inner}")).context(what)
    } else {
        Error::field(path, inner).context(what)
    }
}

/// runtime-spec's names for process.scheduler.flags, with the values of sched_attr.sched_flags.
pub const SCHED_FLAGS: [&str; 7] = [
    "SCHED_FLAG_RESET_ON_FORK",
    "SCHED_FLAG_RECLAIM",
    "SCHED_FLAG_DL_OVERRUN",
    "SCHED_FLAG_KEEP_POLICY",
    "SCHED_FLAG_KEEP_PARAMS",
    "SCHED_FLAG_UTIL_CLAMP_MIN",
    "SCHED_FLAG_UTIL_CLAMP_MAX",
];

/// In a process object, rewrite process.scheduler.flags from the spec's names to the ones
/// oci-spec's enum deserializes (it spells two of them differently: SCHED_RESET_ON_FORK and
/// SCHED_FLAG_D_L_OVERRUN, which stay accepted). Any other string is an error naming the field
/// and listing the spec's names. Returns whether anything was rewritten.
pub fn map_scheduler_flags(process: &mut serde_json::Value, field: &str) -> Result<bool> {
    let Some(list) = process
        .get_mut("scheduler")
        .and_then(|s| s.get_mut("flags"))
        .and_then(|f| f.as_array_mut())
    else {
        return Ok(false);
    };
    let mut changed = false;
    for (i, f) in list.iter_mut().enumerate() {
        let Some(name) = f.as_str() else { continue };
        let oci = match name {
            "SCHED_FLAG_RESET_ON_FORK" => "SCHED_RESET_ON_FORK",
            "SCHED_FLAG_DL_OVERRUN" => "SCHED_FLAG_D_L_OVERRUN",
            "SCHED_RESET_ON_FORK" | "SCHED_FLAG_D_L_OVERRUN" => continue,
            n if SCHED_FLAGS.contains(&n) => continue,
            n => bail_field!(
                format!("{field}[{i}]"),
                "{n:?} is not a scheduler flag (one of {})",
                SCHED_FLAGS.join(", ")
            ),
        };
        *f = serde_json::Value::String(oci.to_string());
        changed = true;
    }
    Ok(changed)
}

/// Remove, from the capability sets of a process object, the names that look like capabilities
/// but are unknown to this runtime, with one warning naming them; a string that is not a
/// capability name at all is an error naming the field. `field` is the capabilities object's
/// path for messages. Returns whether anything was removed.
pub fn drop_unknown_caps(process: &mut serde_json::Value, field: &str) -> Result<bool> {
    use sprout_process::CapNameKind;
    let Some(caps) = process
        .get_mut("capabilities")
        .and_then(|c| c.as_object_mut())
    else {
        return Ok(false);
    };
    let mut unknown: Vec<String> = Vec::new();
    for set in [
        "bounding",
        "effective",
        "permitted",
        "inheritable",
        "ambient",
    ] {
        let Some(list) = caps.get_mut(set).and_then(|l| l.as_array_mut()) else {
            continue;
        };
        for (i, c) in list.iter().enumerate() {
            let Some(name) = c.as_str() else { continue };
            if sprout_process::classify_cap_name(name) == CapNameKind::Invalid {
                bail_field!(
                    format!("{field}.{set}[{i}]"),
                    "{name:?} is not a capability name"
                );
            }
        }
        list.retain(|c| {
            let Some(name) = c.as_str() else { return true };
            if sprout_process::classify_cap_name(name) == CapNameKind::Unknown {
                if !unknown.iter().any(|u| u == name) {
                    unknown.push(name.to_string());
                }
                return false;
            }
            true
        });
    }
    if unknown.is_empty() {
        return Ok(false);
    }
    crate::log::warn(&format!(
        "{field}: ignoring capabilities unknown to this runtime and kernel: {}",
        unknown.join(", ")
    ));
    Ok(true)
}

impl Config {
    pub fn load(bundle: &Path) -> Result<Config> {
        Config::load_then(bundle, |_| ())
    }

    /// [`Config::load`], handing the raw config.json to `early` before it is parsed (the start
    /// path begins work that depends on a few fields while the whole is parsed).
    pub fn load_then(bundle: &Path, early: impl FnOnce(&[u8])) -> Result<Config> {
        // Absolute and normalised ("." → the directory's path), as runc reports it in `state`.
        let bundle = std::fs::canonicalize(bundle)
            .map_err(|e| Error::os(format!("bundle {}", bundle.display()), e))?;
        let path = bundle.join("config.json");
        let raw = std::fs::read(&path)
            .map_err(|e| Error::os(format!("config.json ({})", path.display()), e))?;
        early(&raw);
        let mut spec = parse_spec(&raw, "config.json")?;
        absolute_mount_destinations(&mut spec);
        explicit_zero_pids_limit(&mut spec, &raw);
        empty_namespace_paths(&mut spec);
        let rootfs = validate(&spec, &bundle)?;
        rootfs_prefixed_destinations(&mut spec, &rootfs);
        Ok(Config {
            spec,
            raw,
            bundle,
            rootfs,
        })
    }
}

/// `linux.resources.pids.limit: 0` given explicitly means a limit of 1, as in runc ≥ 1.2
/// (runtime-spec 1.3 makes the limit optional; systemd has no TasksMax=0, and runc maps 0 to 1 for
/// both cgroup managers); -1 is unlimited and an absent limit changes nothing. The typed config
/// cannot tell an absent limit from 0, so only a 0 looks at the raw JSON (off the usual path).
fn explicit_zero_pids_limit(spec: &mut Spec, raw: &[u8]) {
    let Some(res) = spec.linux().as_ref().and_then(|l| l.resources().as_ref()) else {
        return;
    };
    if res.pids().is_none_or(|p| p.limit() != 0) {
        return;
    }
    let explicit = serde_json::from_slice::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| v.pointer("/linux/resources/pids/limit").cloned())
        .is_some_and(|l| l.as_i64() == Some(0));
    if explicit {
        let mut res = res.clone();
        let mut pids = oci_spec::runtime::LinuxPids::default();
        pids.set_limit(1);
        res.set_pids(Some(pids));
        if let Some(linux) = spec.linux_mut() {
            linux.set_resources(Some(res));
        }
    }
}

/// A destination that names a path inside the rootfs by its host path (`<rootfs>/mnt/x`) means
/// that path in the container (`/mnt/x`), as runc has always read it; otherwise it would be made
/// under the rootfs again (`<rootfs><rootfs>/mnt/x`). The usual case copies nothing.
fn rootfs_prefixed_destinations(spec: &mut Spec, rootfs: &Path) {
    let inside = |d: &Path| d.starts_with(rootfs) && d != rootfs;
    if !spec
        .mounts()
        .iter()
        .flatten()
        .any(|m| inside(m.destination()))
    {
        return;
    }
    let Some(mut mounts) = spec.mounts().clone() else {
        return;
    };
    for m in mounts.iter_mut().filter(|m| inside(m.destination())) {
        let rel = m
            .destination()
            .strip_prefix(rootfs)
            .map(|r| Path::new("/").join(r))
            .unwrap_or_else(|_| m.destination().clone());
        m.set_destination(rel);
    }
    spec.set_mounts(Some(mounts));
}

/// A namespace whose `path` is "" is a new one, as runc reads it (its run.bats joins every
/// namespace of another container but the mount one, given as `"path": ""`).
fn empty_namespace_paths(spec: &mut Spec) {
    let Some(linux) = spec.linux_mut() else {
        return;
    };
    let empty = |n: &LinuxNamespace| n.path().as_ref().is_some_and(|p| p.as_os_str().is_empty());
    if !linux.namespaces().iter().flatten().any(empty) {
        return;
    }
    if let Some(mut ns) = linux.namespaces().clone() {
        for n in ns.iter_mut().filter(|n| empty(n)) {
            n.set_path(None);
        }
        linux.set_namespaces(Some(ns));
    }
}

/// runtime-spec (Linux): a mount destination MAY be relative, for old configurations, and is
/// then relative to "/" (deprecated). Made absolute here, once, with runc's warning.
fn absolute_mount_destinations(spec: &mut Spec) {
    // The usual case (every destination absolute) copies nothing.
    if spec
        .mounts()
        .iter()
        .flatten()
        .all(|m| m.destination().is_absolute())
    {
        return;
    }
    let Some(mut mounts) = spec.mounts().clone() else {
        return;
    };
    for m in mounts.iter_mut().filter(|m| !m.destination().is_absolute()) {
        crate::log::warn(&format!(
            "mount destination {} is not absolute: taken as relative to \"/\" (relative destinations are deprecated)",
            m.destination().display()
        ));
        let abs = Path::new("/").join(m.destination());
        m.set_destination(abs);
    }
    spec.set_mounts(Some(mounts));
}

/// Compare "1.2.3" style versions on major only (and reject below 1.0.0 and above 1.x).
fn check_version(v: &str) -> Result<()> {
    let major = v.split('.').next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(1) => Ok(()),
        Some(m) if m > 1 => bail_field!("ociVersion", "{v} is not supported (this runtime implements {OCI_VERSION_MIN} to {OCI_VERSION})"),
        _ => bail_field!("ociVersion", "{v:?} is not a valid runtime-spec version (this runtime implements {OCI_VERSION_MIN} to {OCI_VERSION})"),
    }
}

pub fn ns_name(t: LinuxNamespaceType) -> &'static str {
    match t {
        LinuxNamespaceType::Pid => "pid",
        LinuxNamespaceType::Network => "network",
        LinuxNamespaceType::Mount => "mount",
        LinuxNamespaceType::Ipc => "ipc",
        LinuxNamespaceType::Uts => "uts",
        LinuxNamespaceType::User => "user",
        LinuxNamespaceType::Cgroup => "cgroup",
        LinuxNamespaceType::Time => "time",
    }
}

/// Validate what can be validated without touching the host; returns the absolute rootfs path.
pub fn validate(spec: &Spec, bundle: &Path) -> Result<PathBuf> {
    check_version(spec.version())?;

    let root = spec.root().as_ref().ok_or_else(|| {
        Error::field(
            "root",
            "missing (config.json must name the root filesystem)",
        )
    })?;
    let rootfs = if root.path().is_absolute() {
        root.path().clone()
    } else {
        bundle.join(root.path())
    };
    match std::fs::metadata(&rootfs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail_field!("root.path", "{} is not a directory", rootfs.display()),
        Err(e) => bail_field!("root.path", "{}: {e}", rootfs.display()),
    }
    // '..' or symlinks that lead to the host's own root would give the container the host.
    let rootfs = std::fs::canonicalize(&rootfs)
        .map_err(|e| Error::field("root.path", format!("{}: {e}", rootfs.display())))?;
    if rootfs == Path::new("/") {
        bail_field!(
            "root.path",
            "{:?} resolves to the host's / (refusing to run a container on the host's root)",
            root.path()
        );
    }

    let process = spec.process().as_ref();
    if let Some(p) = process {
        crate::numa::CpuAffinity::from_spec(
            p.exec_cpu_affinity().as_ref(),
            "process.execCPUAffinity",
        )?;
        match p.args() {
            Some(a) if !a.is_empty() && !a[0].is_empty() => {}
            _ => bail_field!("process.args", "must name at least the program to run"),
        }
        if !p.cwd().is_absolute() {
            bail_field!("process.cwd", "{:?} must be an absolute path", p.cwd());
        }
        if let Some(c) = p.capabilities() {
            let unsupported = sprout_process::unsupported_caps(c);
            if !unsupported.is_empty() {
                crate::log::warn(&format!(
                    "process.capabilities: ignoring capabilities the running kernel does not support: {}",
                    unsupported.join(", ")
                ));
            }
            for name in sprout_process::unraisable_ambient(c) {
                crate::log::warn(&format!(
                    "can't raise ambient capability {name}: process.capabilities.ambient needs it in the permitted and inheritable sets too; left out"
                ));
            }
        }
        if let Some(env) = p.env() {
            for e in env {
                if !e.contains('=') {
                    bail_field!("process.env", "{e:?} is not of the form KEY=value");
                }
            }
        }
    }

    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        crate::idmap::validate(i, m, spec.linux().as_ref(), euid)?;
    }

    let Some(linux) = spec.linux() else {
        if spec.hostname().as_deref().is_some_and(|h| !h.is_empty()) {
            bail_field!(
                "hostname",
                "setting a hostname needs a uts namespace in linux.namespaces"
            );
        }
        return Ok(rootfs);
    };
    let mut seen = HashSet::new();
    let mut has_uts = false;
    let mut has_user = false;
    let mut new_user = false;
    let mut has_net = false;
    let mut has_ipc = false;
    for (i, ns) in linux.namespaces().iter().flatten().enumerate() {
        let t = ns.typ();
        if !seen.insert(t) {
            bail_field!(
                format!("linux.namespaces[{i}]"),
                "duplicate namespace type {:?}",
                ns_name(t)
            );
        }
        if let Some(p) = ns.path() {
            if !p.is_absolute() {
                bail_field!(
                    format!("linux.namespaces[{i}].path"),
                    "{:?} must be absolute",
                    p
                );
            }
        }
        match t {
            // A uts namespace joined by path is the container's too: hostname goes there (runc).
            LinuxNamespaceType::Uts => has_uts = true,
            LinuxNamespaceType::User => {
                has_user = true;
                // "path": "" is a new namespace too.
                new_user = ns.path().as_ref().is_none_or(|p| p.as_os_str().is_empty());
            }
            LinuxNamespaceType::Network => has_net = true,
            LinuxNamespaceType::Ipc => has_ipc = true,
            _ => {}
        }
    }
    if (spec.hostname().as_deref().is_some_and(|h| !h.is_empty())
        || spec.domainname().as_deref().is_some_and(|h| !h.is_empty()))
        && !has_uts
    {
        bail_field!(
            "hostname",
            "setting a hostname or domainname needs a new uts namespace in linux.namespaces"
        );
    }
    let maps = linux.uid_mappings().as_ref().is_some_and(|m| !m.is_empty())
        || linux.gid_mappings().as_ref().is_some_and(|m| !m.is_empty());
    if maps && !has_user {
        bail_field!(
            "linux.uidMappings",
            "id mappings need a user namespace in linux.namespaces"
        );
    }
    // A new user namespace without mappings would have no root to set the container up with:
    // refused with runc's words (crun maps the caller's ids instead).
    if new_user && !maps {
        bail_field!(
            "linux.uidMappings",
            "user namespaces enabled, but no namespace path to join nor mappings to apply specified"
        );
    }
    if let Some(sysctl) = linux.sysctl() {
        let ns = SysctlNs {
            net: has_net,
            ipc: has_ipc,
            uts: has_uts,
        };
        for (key, value) in sysctl {
            check_sysctl(key, value, ns, spec.domainname().as_deref())?;
        }
    }
    if linux.intel_rdt().is_some() {
        // runc: "intelRdt is specified in config, but Intel RDT is not enabled" without resctrl.
        if resctrl_mount().is_none() {
            bail_field!(
                "linux.intelRdt",
                "specified in config, but Intel RDT is not enabled (no resctrl filesystem mounted)"
            );
        }
        bail_field!("linux.intelRdt", "Intel RDT is not supported by sprout");
    }
    if let Some(devs) = linux.net_devices() {
        crate::netdev::validate(devs, has_net)?;
    }
    if let Some(mp) = linux.memory_policy() {
        crate::numa::MemPolicy::from_spec(mp)?;
    }
    if let Some(prop) = linux.rootfs_propagation() {
        if crate::rootfs::propagation_flag(prop).is_none() {
            bail_field!("linux.rootfsPropagation", "unknown propagation {prop:?}");
        }
    }
    if let Some(cg) = linux.cgroups_path() {
        if cg
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            bail_field!("linux.cgroupsPath", "{:?} must not contain '..'", cg);
        }
    }
    for (i, d) in linux.devices().iter().flatten().enumerate() {
        if !d.path().is_absolute() {
            bail_field!(
                format!("linux.devices[{i}].path"),
                "{:?} must be absolute",
                d.path()
            );
        }
    }
    Ok(rootfs)
}

/// Where a resctrl filesystem (Intel RDT / AMD QoS) is mounted, if it is.
pub fn resctrl_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()?
        .lines()
        .find(|l| l.split(' ').nth(2) == Some("resctrl"))
        .and_then(|l| l.split(' ').nth(1))
        .map(PathBuf::from)
}

/// The namespaces of its own a container has, for [`check_sysctl`]. Only namespaced sysctls
/// may be set, and only when the container has the namespace that scopes them (as runc
/// checks): otherwise the write would change the host.
#[derive(Clone, Copy)]
struct SysctlNs {
    net: bool,
    ipc: bool,
    uts: bool,
}

fn check_sysctl(key: &str, value: &str, ns: SysctlNs, domainname: Option<&str>) -> Result<()> {
    let (has_net, has_ipc) = (ns.net, ns.ipc);
    const IPC: &[&str] = &[
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
    ];
    if IPC.contains(&key) || key.starts_with("fs.mqueue.") {
        if !has_ipc {
            bail_field!("linux.sysctl", "{key} needs a new ipc namespace");
        }
        return Ok(());
    }
    if key.starts_with("net.") {
        if !has_net {
            bail_field!("linux.sysctl", "{key} needs a new network namespace");
        }
        return Ok(());
    }
    // As runc: kernel.hostname would fight the config's own "hostname" field.
    if key == "kernel.hostname" {
        bail_field!(
            "linux.sysctl",
            "{key} is not allowed: set the container's host name with the \"hostname\" field"
        );
    }
    // kernel.domainname is namespaced by the uts namespace, and Docker sets `--domainname` this
    // way: allowed with a uts namespace of the container's own (runc). A "domainname" field with
    // another value is refused, as crun does: one of the two would silently win.
    if key == "kernel.domainname" && ns.uts {
        if let Some(d) = domainname.filter(|d| !d.is_empty() && *d != value) {
            bail_field!(
                "linux.sysctl",
                "{key} {value:?} conflicts with the \"domainname\" field {d:?}"
            );
        }
        return Ok(());
    }
    bail_field!(
        "linux.sysctl",
        "{key} is not a namespaced sysctl and would change the host"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert!(check_version("1.0.0").is_ok());
        assert!(check_version("1.2.1").is_ok());
        assert!(check_version("1.0.2-dev").is_ok());
        let e = check_version("2.0.0").unwrap_err();
        assert!(e.to_string().starts_with("ociVersion: 2.0.0"), "{e}");
        assert!(check_version("").is_err());
        assert!(check_version("0.5").is_err());
    }

    #[test]
    fn bad_namespace_names_the_field() {
        let raw = br#"{"ociVersion":"1.0.0","root":{"path":"r"},"linux":{"namespaces":[{"type":"pid"},{"type":"bogus"}]}}"#;
        let e = parse_spec(raw, "config.json").unwrap_err().to_string();
        assert!(e.contains("linux.namespaces[1].type"), "{e}");
    }

    /// runc's cgroups.bats "hugetlb limits" writes `pagesize`: oci-spec leaves `pageSize` empty,
    /// which sends the config through the second pass, and that takes the resources' keys in
    /// their other case (Go's decoder does, so runc does).
    #[test]
    fn resources_keys_in_another_case() {
        let raw = br#"{"ociVersion":"1.0.0","root":{"path":"r"},"linux":{"resources":{"hugepageLimits":[{"pagesize":"2MB","limit":4194304}],"CPU":{"Shares":512}}}}"#;
        let spec = parse_spec(raw, "config.json").unwrap();
        let r = spec.linux().as_ref().unwrap().resources().as_ref().unwrap();
        let h = &r.hugepage_limits().as_ref().unwrap()[0];
        assert_eq!((h.page_size().as_str(), h.limit()), ("2MB", 4194304));
        assert_eq!(r.cpu().as_ref().unwrap().shares(), Some(512));
        // An optional key alone in another case: the scan of the resources object sends it
        // through the second pass too (update.bats "cpuset parameters via resources.CPU").
        let raw = br#"{"ociVersion":"1.0.0","root":{"path":"r"},"linux":{"resources":{"CPU":{"Shares":512}}}}"#;
        let spec = parse_spec(raw, "config.json").unwrap();
        let r = spec.linux().as_ref().unwrap().resources().as_ref().unwrap();
        assert_eq!(r.cpu().as_ref().unwrap().shares(), Some(512));
    }

    #[test]
    fn unknown_capabilities_are_dropped_not_names_refused() {
        let raw = br#"{"ociVersion":"1.0.0","root":{"path":"r"},"process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0},"capabilities":{"bounding":["CAP_KILL","CAP_UNKNOWN"],"ambient":["CAP_NEWER_ONE"]}}}"#;
        let spec = parse_spec(raw, "config.json").unwrap();
        let caps = spec
            .process()
            .as_ref()
            .unwrap()
            .capabilities()
            .clone()
            .unwrap();
        assert_eq!(caps.bounding().as_ref().unwrap().len(), 1);
        assert!(caps.ambient().as_ref().unwrap().is_empty());
        let raw = br#"{"ociVersion":"1.0.0","root":{"path":"r"},"process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0},"capabilities":{"bounding":["CAP_KILL","sys admin"]}}}"#;
        let e = parse_spec(raw, "config.json").unwrap_err().to_string();
        assert!(
            e.starts_with("process.capabilities.bounding[1]: \"sys admin\""),
            "{e}"
        );
    }

    #[test]
    fn truncated_json() {
        let e = parse_spec(br#"{"ociVersion":"1.0.0","root":{"pa"#, "config.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("config.json"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn sysctls() {
        let ns = |net, ipc, uts| SysctlNs { net, ipc, uts };
        let all = ns(true, true, true);
        assert!(check_sysctl("net.ipv4.ip_forward", "1", ns(true, false, false), None).is_ok());
        assert!(check_sysctl("net.ipv4.ip_forward", "1", ns(false, true, true), None).is_err());
        assert!(check_sysctl("kernel.shmmax", "1", ns(false, true, false), None).is_ok());
        assert!(check_sysctl("vm.swappiness", "1", all, None).is_err());
        let e = check_sysctl("kernel.hostname", "h", all, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"hostname\" field"), "{e}");
        // kernel.domainname: with a uts namespace, unless the "domainname" field says otherwise.
        assert!(check_sysctl("kernel.domainname", "d", all, None).is_ok());
        assert!(check_sysctl("kernel.domainname", "d", all, Some("d")).is_ok());
        assert!(check_sysctl("kernel.domainname", "d", all, Some("")).is_ok());
        let e = check_sysctl("kernel.domainname", "d", all, Some("other"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("conflicts with the \"domainname\" field"), "{e}");
        assert!(check_sysctl("kernel.domainname", "d", ns(true, true, false), None).is_err());
    }

    fn spec_with(extra: &str, root: &Path) -> Spec {
        let raw = format!(
            r#"{{"ociVersion":"1.0.0","root":{{"path":"{}"}},"process":{{"cwd":"/","args":["sh"],"user":{{"uid":0,"gid":0}}}}{extra}}}"#,
            root.display()
        );
        parse_spec(raw.as_bytes(), "config.json").unwrap()
    }

    #[test]
    fn relative_mount_destinations_are_relative_to_root() {
        let dir = std::env::temp_dir();
        let mut spec = spec_with(
            r#","mounts":[{"destination":"tmp/rel","type":"tmpfs","source":"tmpfs"},{"destination":"/abs","type":"tmpfs","source":"tmpfs"}]"#,
            &dir,
        );
        absolute_mount_destinations(&mut spec);
        let d: Vec<_> = spec
            .mounts()
            .iter()
            .flatten()
            .map(|m| m.destination().clone())
            .collect();
        assert_eq!(d, [Path::new("/tmp/rel"), Path::new("/abs")]);
    }

    #[test]
    fn validation_errors_name_fields() {
        let dir = std::env::temp_dir();
        let ok = spec_with("", &dir);
        assert!(validate(&ok, &dir).is_ok());
        let cases = [
            (
                r#","linux":{"namespaces":[{"type":"pid"},{"type":"pid"}]}"#,
                "linux.namespaces[1]",
            ),
            (r#","hostname":"x""#, "hostname"),
            (r#","linux":{"cgroupsPath":"a/../b"}"#, "linux.cgroupsPath"),
        ];
        for (extra, field) in cases {
            let e = validate(&spec_with(extra, &dir), &dir).unwrap_err();
            assert!(e.to_string().starts_with(field), "{extra}: {e}");
            assert_eq!(e.field_path(), Some(field), "{extra}: {e}");
            assert_eq!(e.kind(), Kind::Config, "{extra}: {e}");
        }
        let raw = br#"{"ociVersion":"1.0.0","root":{"path":"/nonexistent-sprout"},"process":{"cwd":"/","args":[],"user":{"uid":0,"gid":0}}}"#;
        let e = validate(&parse_spec(raw, "c").unwrap(), &dir).unwrap_err();
        assert!(e.to_string().starts_with("root.path"), "{e}");
        assert_eq!(e.field_path(), Some("root.path"));
    }
}
