//! `checkpoint` and `restore` through CRIU (criu(8), found as `--criu`, else `criu` on $PATH),
//! with runc's flags and files.
//!
//! sprout runs criu's command line, not its RPC interface (`criu swrk`): one fork and exec per
//! call, no protobuf. What runc passes over RPC goes on the command line:
//!
//! - **Mounts CRIU cannot see the source of** are marked external at dump and given their new
//!   source at restore: the config's bind mounts (key: the destination; restore: the bundle's
//!   source), the host's v1 cgroup directories bound into a container without a cgroup namespace
//!   (key: the mount point; restore: the new container's directory of that hierarchy), and /dev
//!   nodes bound from the host's devtmpfs (user namespaces). They are read from the init's own
//!   mountinfo at dump and written to `sprout-criu.json` in the image directory.
//! - **Stdio**: the init's fds 0-2 go to `descriptors.json` (runc's file, same format); at restore
//!   a pipe among them is replaced by the restoring process's own fd of that number
//!   (`--inherit-fd`), as runc does, so conmon's (or the shim's) new pipes carry the output.
//! - **Namespaces the config joins by path**: the network and pid namespaces are external
//!   (`--external net[INODE]:extRootNetNS`, restored from an fd of the same path); the others are
//!   joined with `--join-ns`.
//! - **cgroups**: `restore` makes the container's cgroup and applies `linux.resources` first, as
//!   `create` does; criu runs inside it and puts the restored tasks there (`--cgroup-root`).
//! - **The rootfs** must be a mount point for `criu restore --root`: criu runs in a mount namespace
//!   of its own where the rootfs is bound on `<state dir>/criu-root`; nothing is mounted in the
//!   caller's namespace.
//!
//! A container with a terminal is refused: CRIU hands its pty master back only over RPC
//! (`orphan-pts-master`).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use oci_spec::runtime::{LinuxNamespaceType, Mount, Spec};
use serde::{Deserialize, Serialize};

use crate::bail;
use crate::config::{self, Config};
use crate::error::{Error, Kind, Result};
use crate::state::{self, State, Status, Store};
use crate::sys;
use crate::trace::Trace;

/// runc's name for the init's stdio list in the image directory.
pub const DESCRIPTORS_FILE: &str = "descriptors.json";
/// sprout's own list of the mounts it marked external at dump.
pub const EXTERNAL_FILE: &str = "sprout-criu.json";
const CRIU_ROOT: &str = "criu-root";
const PIDFILE: &str = "criu-restore.pid";

/// runc's `--manage-cgroups-mode` values.
const CG_MODES: &[&str] = &["soft", "full", "strict", "ignore"];

/// What `checkpoint` and `restore` share (runc's CriuOpts).
#[derive(Clone, Debug, Default)]
pub struct CriuOpts {
    /// criu's binary (`--criu`); "criu" on $PATH when empty.
    pub criu: Option<PathBuf>,
    pub image_path: PathBuf,
    pub work_path: Option<PathBuf>,
    pub parent_path: Option<PathBuf>,
    pub leave_running: bool,
    pub tcp_established: bool,
    pub tcp_skip_in_flight: bool,
    pub link_remap: bool,
    pub ext_unix_sk: bool,
    pub shell_job: bool,
    pub file_locks: bool,
    pub pre_dump: bool,
    pub manage_cgroups_mode: Option<String>,
    pub empty_ns: Vec<String>,
    pub auto_dedup: bool,
    pub lazy_pages: bool,
    pub status_fd: Option<i32>,
    pub page_server: Option<String>,
    pub lsm_profile: Option<String>,
    pub lsm_mount_context: Option<String>,
}

/// A mount marked external at dump, and how restore finds its new source.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum External {
    /// One of the config's bind mounts: restore binds the source its config gives.
    Bind { mountpoint: String },
    /// A host cgroup directory: `hierarchy` is the mount point's name under the cgroup mount
    /// (`memory`, `cpu,cpuacct`, `unified`; empty when the cgroup mount itself is the bind).
    Cgroup {
        mountpoint: String,
        hierarchy: String,
    },
    /// A node of the host's /dev bound in (`host` is its path there).
    Device { mountpoint: String, host: String },
}

impl External {
    fn mountpoint(&self) -> &str {
        match self {
            External::Bind { mountpoint }
            | External::Cgroup { mountpoint, .. }
            | External::Device { mountpoint, .. } => mountpoint,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ExternalFile {
    mounts: Vec<External>,
}

/// One line of /proc/PID/mountinfo: (root within its filesystem, mount point, filesystem type).
fn parse_mountinfo(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some((
                unescape(f.get(3)?),
                unescape(f.get(4)?),
                f.get(sep + 1)?.to_string(),
            ))
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let d = |k: usize| u32::from(b[i + k] - b'0');
            out.push((d(1) * 64 + d(2) * 8 + d(3)) as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The container's mounts CRIU must be told are external, from the init's mountinfo (container
/// view: the rootfs is `/`): every config bind mount that is mounted, every cgroup mount that
/// binds a host cgroup directory (its root is not `/`), and every /dev node bound from devtmpfs.
pub fn externals_from_mountinfo(mountinfo: &str, spec: &Spec) -> Vec<External> {
    let mounts = parse_mountinfo(mountinfo);
    let cgroup_dest = spec
        .mounts()
        .iter()
        .flatten()
        .find(|m| m.typ().as_deref() == Some("cgroup") || m.typ().as_deref() == Some("cgroup2"))
        .map(|m| m.destination().to_string_lossy().into_owned())
        .unwrap_or_else(|| "/sys/fs/cgroup".into());
    let binds: Vec<String> = spec
        .mounts()
        .iter()
        .flatten()
        .filter(|m| crate::rootfs::is_bind(m))
        .map(|m| normalize(&m.destination().to_string_lossy()))
        .collect();
    let mut out: Vec<External> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (root, mp, fstype) in &mounts {
        if mp == "/" || !seen.insert(mp.clone()) {
            continue;
        }
        let e = if binds.iter().any(|b| b == mp) {
            External::Bind {
                mountpoint: mp.clone(),
            }
        } else if (fstype == "cgroup" || fstype == "cgroup2") && root != "/" {
            let hierarchy = if *mp == cgroup_dest {
                String::new()
            } else if let Some(rest) = mp
                .strip_prefix(cgroup_dest.as_str())
                .and_then(|r| r.strip_prefix('/'))
            {
                rest.to_string()
            } else {
                continue;
            };
            External::Cgroup {
                mountpoint: mp.clone(),
                hierarchy,
            }
        } else if fstype == "devtmpfs" && mp.starts_with("/dev/") {
            External::Device {
                mountpoint: mp.clone(),
                host: format!("/dev{}", if root == "/" { "" } else { root }),
            }
        } else {
            continue;
        };
        out.push(e);
    }
    out
}

fn normalize(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// A close-on-exec duplicate of `fd`.
fn dup_cloexec(fd: i32) -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes integers only; on success the new fd is ours alone.
    let n = sys::cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: `n` was just returned by fcntl and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

fn criu_bin(o: &CriuOpts) -> PathBuf {
    o.criu.clone().unwrap_or_else(|| PathBuf::from("criu"))
}

fn check_modes(o: &CriuOpts) -> Result<()> {
    if let Some(m) = &o.manage_cgroups_mode {
        if !CG_MODES.contains(&m.as_str()) {
            bail!(
                kind = Kind::InvalidArgument,
                "--manage-cgroups-mode: invalid value {m:?} (soft, full, strict or ignore)"
            );
        }
    }
    for ns in &o.empty_ns {
        if ns != "network" && ns != "net" {
            bail!(
                kind = Kind::InvalidArgument,
                "--empty-ns: {ns:?}: only the network namespace can be left empty"
            );
        }
    }
    if o.lazy_pages {
        bail!(
            kind = Kind::InvalidArgument,
            "--lazy-pages: not supported by sprout (it needs CRIU's page server and lazy-pages daemon)"
        );
    }
    if o.status_fd.is_some() {
        bail!(
            kind = Kind::InvalidArgument,
            "--status-fd: only used with --lazy-pages, which sprout does not support"
        );
    }
    Ok(())
}

/// Flags both dump and restore take, from runc's.
fn common_args(o: &CriuOpts, args: &mut Vec<OsString>) {
    if o.tcp_established {
        args.push("--tcp-established".into());
    }
    if o.tcp_skip_in_flight {
        args.push("--skip-in-flight".into());
    }
    if o.link_remap {
        args.push("--link-remap".into());
    }
    if o.ext_unix_sk {
        args.push("--ext-unix-sk".into());
    }
    if o.shell_job {
        args.push("--shell-job".into());
    }
    if o.file_locks {
        args.push("--file-locks".into());
    }
    if o.auto_dedup {
        args.push("--auto-dedup".into());
    }
    if !o.empty_ns.is_empty() {
        args.push("--empty-ns".into());
        args.push("net".into());
    }
    match &o.manage_cgroups_mode {
        Some(m) => args.push(format!("--manage-cgroups={m}").into()),
        None => args.push("--manage-cgroups".into()),
    }
}

fn mkdir_0700(p: &Path, flag: &str) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::os(format!("{flag} {}", p.display()), e)),
    }
}

/// Where criu writes its log: the work directory, else the image directory (runc's rule).
fn log_dir(o: &CriuOpts) -> &Path {
    o.work_path.as_deref().unwrap_or(&o.image_path)
}

/// The error of a failed criu run: its exit status and the last `Error` lines of its log.
fn criu_failed(what: &str, status: std::process::ExitStatus, log: &Path) -> Error {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error (") && !l.contains("RLIMIT_NOFILE"))
        .collect();
    // The first error is the cause (the later ones are criu giving up); the last says how it
    // ended.
    let last = match (errors.first(), errors.last()) {
        (Some(a), Some(b)) if a != b => format!("{}; ...; {}", a.trim(), b.trim()),
        (Some(a), _) => a.trim().to_string(),
        _ => String::new(),
    };
    let code = status
        .code()
        .map(|c| format!("exit status {c}"))
        .unwrap_or_else(|| format!("{status}"));
    Error::msg(format!(
        "{what}: criu failed ({code}){}; log: {}",
        if last.is_empty() {
            String::new()
        } else {
            format!(": {last}")
        },
        log.display()
    ))
}

fn spawn_error(criu: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::new(
            Kind::NotFound,
            format!(
                "criu ({}): not found; install CRIU (3.16 or newer) or name it with --criu",
                criu.display()
            ),
        )
    } else {
        Error::os(format!("running criu ({})", criu.display()), e)
    }
}

fn load_spec(store: &Store, id: &str) -> Result<Spec> {
    let raw = std::fs::read(store.dir(id).join(state::CONFIG_FILE))
        .map_err(|e| Error::os(format!("container {id:?}: reading its config"), e))?;
    config::parse_spec(&raw, "config.json")
}

fn ns_path(spec: &Spec, t: LinuxNamespaceType) -> Option<PathBuf> {
    spec.linux()
        .as_ref()?
        .namespaces()
        .as_ref()?
        .iter()
        .find(|n| n.typ() == t)
        .and_then(|n| n.path().clone())
        .filter(|p| !p.as_os_str().is_empty())
}

fn ext_ns_key(t: LinuxNamespaceType) -> &'static str {
    if t == LinuxNamespaceType::Network {
        "extRootNetNS"
    } else {
        "extRootPidNS"
    }
}

/// `checkpoint`: dump the container's processes into `o.image_path`. Unless `--leave-running` or
/// `--pre-dump`, criu ends them and the container is deleted, as runc does.
pub fn checkpoint(store: &Store, id: &str, o: &CriuOpts, trace: &mut Trace) -> Result<()> {
    check_modes(o)?;
    let st = store.load(id)?;
    let status = st.status(store);
    if !matches!(status, Status::Running | Status::Paused) {
        bail!(
            kind = Kind::State,
            "container {id:?} cannot be checkpointed in {} state",
            status.as_str()
        );
    }
    let spec = load_spec(store, id)?;
    if spec
        .process()
        .as_ref()
        .and_then(|p| p.terminal())
        .unwrap_or(false)
    {
        bail!(
            kind = Kind::InvalidArgument,
            "process.terminal: sprout cannot checkpoint a container with a terminal (CRIU returns \
             its pty only over RPC)"
        );
    }
    mkdir_0700(&o.image_path, "--image-path")?;
    if let Some(w) = &o.work_path {
        mkdir_0700(w, "--work-path")?;
    }
    let pid = st.pid;
    let mut args: Vec<OsString> = vec![
        if o.pre_dump { "pre-dump" } else { "dump" }.into(),
        "-t".into(),
        pid.to_string().into(),
        "-D".into(),
        o.image_path.clone().into(),
    ];
    if let Some(w) = &o.work_path {
        args.push("-W".into());
        args.push(w.clone().into());
    }
    let log_name = if o.pre_dump {
        "pre-dump.log"
    } else {
        "dump.log"
    };
    args.extend(["-o".into(), log_name.into(), "-v4".into()]);
    args.push("--root".into());
    args.push(st.rootfs.clone().into());
    common_args(o, &mut args);
    if o.leave_running {
        args.push("--leave-running".into());
    }
    if let Some(p) = &o.parent_path {
        args.push("--prev-images-dir".into());
        args.push(p.clone().into());
    }
    if o.pre_dump || o.parent_path.is_some() {
        args.push("--track-mem".into());
    }
    if let Some(ps) = &o.page_server {
        let (addr, port) = ps.rsplit_once(':').ok_or_else(|| {
            Error::new(
                Kind::InvalidArgument,
                format!("--page-server {ps:?}: expected ADDRESS:PORT"),
            )
        })?;
        args.extend([
            "--page-server".into(),
            "--address".into(),
            addr.into(),
            "--port".into(),
            port.into(),
        ]);
    }
    // CRIU freezes with the container's freezer cgroup (runc does too), else with ptrace.
    if let Some(cg) = &st.cgroup {
        let freezer = match cg.layout() {
            sprout_cgroups::Layout::V2 => cg.unified_path(),
            _ => cg.v1_path("freezer"),
        };
        if let Some(f) = freezer {
            args.push("--freeze-cgroup".into());
            args.push(f.into());
        }
    }
    for t in [LinuxNamespaceType::Network, LinuxNamespaceType::Pid] {
        if ns_path(&spec, t).is_some() {
            let link = format!(
                "/proc/{pid}/ns/{}",
                if t == LinuxNamespaceType::Network {
                    "net"
                } else {
                    "pid"
                }
            );
            let md = std::fs::metadata(&link).map_err(|e| Error::os(&link, e))?;
            use std::os::unix::fs::MetadataExt;
            args.push("--external".into());
            args.push(
                format!(
                    "{}[{}]:{}",
                    if t == LinuxNamespaceType::Network {
                        "net"
                    } else {
                        "pid"
                    },
                    md.ino(),
                    ext_ns_key(t)
                )
                .into(),
            );
        }
    }
    if !o.pre_dump {
        let mi = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .map_err(|e| Error::os(format!("container {id:?}: reading its mounts"), e))?;
        let ext = externals_from_mountinfo(&mi, &spec);
        for e in &ext {
            args.push("--external".into());
            args.push(format!("mnt[{0}]:{0}", e.mountpoint()).into());
        }
        let file = ExternalFile { mounts: ext };
        state::write_atomic(
            &o.image_path.join(EXTERNAL_FILE),
            &serde_json::to_vec_pretty(&file).unwrap_or_default(),
        )?;
        // runc's descriptors.json: what the init's stdio were, for restore's --inherit-fd.
        let fds: Vec<String> = (0..3)
            .map(|i| {
                std::fs::read_link(format!("/proc/{pid}/fd/{i}"))
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| "/dev/null".into())
            })
            .collect();
        state::write_atomic(
            &o.image_path.join(DESCRIPTORS_FILE),
            &serde_json::to_vec(&fds).unwrap_or_default(),
        )?;
    }
    trace.mark("criu_prepare");
    let criu = criu_bin(o);
    let status = Command::new(&criu)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| spawn_error(&criu, e))?;
    trace.mark("criu_dump");
    if !status.success() {
        return Err(criu_failed(
            if o.pre_dump { "pre-dump" } else { "checkpoint" },
            status,
            &log_dir(o).join(log_name),
        ));
    }
    if !(o.leave_running || o.pre_dump) {
        crate::lifecycle::delete(store, id, true, trace)?;
    }
    Ok(())
}

/// What `restore` takes besides the CRIU flags (runc's restore flags).
#[derive(Clone, Debug, Default)]
pub struct RestoreOpts {
    pub id: String,
    pub bundle: PathBuf,
    pub pid_file: Option<PathBuf>,
    pub console_socket: Option<PathBuf>,
    pub detach: bool,
    pub no_pivot: bool,
    pub no_subreaper: bool,
    pub systemd_cgroup: bool,
}

/// A restored container: its state and a pidfd of its init (our child).
pub struct Restored {
    pub state: State,
    pub pidfd: OwnedFd,
}

/// Undo for a failing restore: the restored init (if criu got that far), the cgroup, the state
/// directory.
struct Undo<'a> {
    store: &'a Store,
    id: String,
    cgroup: Option<sprout_cgroups::Manager>,
    pid: Option<OwnedFd>,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(fd) = &self.pid {
            let _ = sys::pidfd_send_signal(fd, libc::SIGKILL);
            let _ = sys::pidfd_wait_exit(fd, 2000);
        }
        if let Some(cg) = &self.cgroup {
            let _ = cg.kill_all(libc::SIGKILL);
            let _ = cg.destroy();
        }
        let _ = self.store.remove(&self.id);
    }
}

/// The host cgroup directory of a container's cgroup mount `hierarchy` (see
/// [`External::Cgroup`]) in the new container's cgroup.
fn cgroup_source(cg: &sprout_cgroups::Manager, hierarchy: &str) -> Option<PathBuf> {
    if hierarchy.is_empty() || hierarchy == "unified" {
        if hierarchy.is_empty() && cg.layout() != sprout_cgroups::Layout::V2 {
            return None;
        }
        return cg.unified_path().map(Path::to_path_buf);
    }
    cg.v1_paths().find_map(|(name, dir)| {
        let (_, mount) = cg.v1_dir_and_mount(name)?;
        (mount.file_name()?.to_str()? == hierarchy).then(|| dir.to_path_buf())
    })
}

/// `--cgroup-root` values: every hierarchy's path (relative to its mount) of the new cgroup.
fn cgroup_roots(cg: &sprout_cgroups::Manager) -> Vec<String> {
    let mut out = Vec::new();
    for (name, _) in cg.v1_paths() {
        if let Some((dir, mount)) = cg.v1_dir_and_mount(name) {
            if let Ok(rel) = dir.strip_prefix(mount) {
                out.push(format!("{name}:/{}", rel.display()));
            }
        }
    }
    if let (Some(dir), Some(mount)) = (cg.unified_path(), cg.unified_mount()) {
        if let Ok(rel) = dir.strip_prefix(mount) {
            // No controller: the root of every hierarchy not named before (cgroup2's "").
            out.push(format!("/{}", rel.display()));
        }
    }
    out
}

/// The mount points of the config's bind mounts, made in the rootfs as `create` makes them
/// (criu mounts on them and does not make them), unless a tmpfs of the config holds them (criu
/// restores a tmpfs's whole content, its mount points with it). runc does the same.
fn make_bind_mountpoints(config: &Config) -> Result<()> {
    let mounts: &[Mount] = config.spec.mounts().as_deref().unwrap_or(&[]);
    let tmpfs: Vec<String> = mounts
        .iter()
        .filter(|m| m.typ().as_deref() == Some("tmpfs"))
        .map(|m| normalize(&m.destination().to_string_lossy()))
        .collect();
    let binds = mounts.iter().filter(|m| crate::rootfs::is_bind(m));
    let mut root: Option<OwnedFd> = None;
    for (i, m) in binds.enumerate() {
        let dest = normalize(&m.destination().to_string_lossy());
        if tmpfs.iter().any(|t| dest.starts_with(&format!("{t}/"))) {
            continue;
        }
        let file = crate::rootfs::bind_source(&config.bundle, m)
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|md| !md.is_dir());
        if root.is_none() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open(&config.rootfs)
                .map_err(|e| Error::os(format!("root.path {}", config.rootfs.display()), e))?;
            root = Some(OwnedFd::from(f));
        }
        let r = root.as_ref().expect("opened above");
        crate::rootfs::ensure_in_root(r, Path::new(&dest), file)
            .map_err(|e| e.context(format!("mounts[{i}]: making the mount point {dest}")))?;
    }
    Ok(())
}

/// `restore`: a new container `o.id` from the bundle's config and the checkpoint in
/// `c.image_path`; its init is our child when this returns.
pub fn restore(
    store: &Store,
    o: &RestoreOpts,
    c: &CriuOpts,
    trace: &mut Trace,
) -> Result<Restored> {
    check_modes(c)?;
    state::validate_id(&o.id)?;
    if c.pre_dump || c.leave_running || c.parent_path.is_some() || c.page_server.is_some() {
        bail!(
            kind = Kind::InvalidArgument,
            "restore: --pre-dump, --leave-running, --parent-path and --page-server are checkpoint flags"
        );
    }
    let inventory = c.image_path.join("inventory.img");
    if !inventory.exists() {
        bail!(
            kind = Kind::NotFound,
            "--image-path {}: no checkpoint there (inventory.img is missing)",
            c.image_path.display()
        );
    }
    let config = Config::load(&o.bundle)?;
    trace.mark("config_parse");
    let spec = &config.spec;
    let process = spec
        .process()
        .as_ref()
        .ok_or_else(|| Error::msg("process: missing (nothing to run)"))?;
    if process.terminal().unwrap_or(false) {
        bail!(
            kind = Kind::InvalidArgument,
            "process.terminal: sprout cannot restore a container with a terminal (CRIU returns \
             its pty only over RPC)"
        );
    }
    let linux = spec.linux().as_ref();
    if ns_path(spec, LinuxNamespaceType::Cgroup).is_some() {
        bail!(
            kind = Kind::InvalidArgument,
            "linux.namespaces: CRIU cannot restore into a joined cgroup namespace"
        );
    }
    let ext: ExternalFile = match std::fs::read(c.image_path.join(EXTERNAL_FILE)) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            Error::msg(format!(
                "{}: {e}",
                c.image_path.join(EXTERNAL_FILE).display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ExternalFile::default(),
        Err(e) => return Err(Error::os(c.image_path.join(EXTERNAL_FILE).display(), e)),
    };
    let descriptors: Vec<String> = match std::fs::read(c.image_path.join(DESCRIPTORS_FILE)) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    if let Some(w) = &c.work_path {
        mkdir_0700(w, "--work-path")?;
    }

    let dir = store.create_dir(&o.id)?;
    let mut undo = Undo {
        store,
        id: o.id.clone(),
        cgroup: None,
        pid: None,
        armed: true,
    };
    let layout = sprout_cgroups::Layout::detect()?;
    let mut cg = sprout_cgroups::Manager::with_layout(
        layout,
        linux
            .and_then(|l| l.cgroups_path().as_ref())
            .and_then(|p| p.to_str()),
        &o.id,
        o.systemd_cgroup,
    )?;
    let mut st = State {
        id: o.id.clone(),
        pid: 0,
        pid_start: 0,
        bundle: config.bundle.clone(),
        rootfs: config.rootfs.clone(),
        created: sys::now_rfc3339(),
        owner: String::new(),
        annotations: spec.annotations().clone().unwrap_or_default(),
        cgroup: Some(cg.clone()),
        own_pid_ns: ns_path(spec, LinuxNamespaceType::Pid).is_none()
            && linux
                .and_then(|l| l.namespaces().as_ref())
                .is_some_and(|n| n.iter().any(|n| n.typ() == LinuxNamespaceType::Pid)),
        systemd_cgroup: o.systemd_cgroup,
        cgroup_pending: true,
        has_hooks: spec.hooks().as_ref().is_some_and(|h| {
            h.poststart().as_ref().is_some_and(|v| !v.is_empty())
                || h.poststop().as_ref().is_some_and(|v| !v.is_empty())
        }),
    };
    store.save(&st)?;
    std::fs::File::create(dir.join(state::CREATING_FILE))
        .map_err(|e| Error::os("creating the state marker", e))?;
    let resources = linux.and_then(|l| l.resources().as_ref());
    cg.create_for(resources)?;
    undo.cgroup = Some(cg.clone());
    st.cgroup = Some(cg.clone());
    st.cgroup_pending = false;
    store.save(&st)?;
    if let Some(res) = resources {
        let res = crate::create::with_default_device_rules(
            res,
            linux.and_then(|l| l.devices().as_deref()).unwrap_or(&[]),
        );
        cg.apply(&res)?;
    }
    trace.mark("cgroup");

    make_bind_mountpoints(&config)?;

    // The command line.
    let criu_root = dir.join(CRIU_ROOT);
    std::fs::create_dir(&criu_root).map_err(|e| Error::os(criu_root.display(), e))?;
    let pidfile = dir.join(PIDFILE);
    let log_name = "restore.log";
    let mut args: Vec<OsString> = vec!["restore".into(), "-D".into(), c.image_path.clone().into()];
    if let Some(w) = &c.work_path {
        args.push("-W".into());
        args.push(w.clone().into());
    }
    args.extend([
        "-o".into(),
        log_name.into(),
        "-v4".into(),
        "--root".into(),
        criu_root.clone().into(),
        "--restore-detached".into(),
        "--restore-sibling".into(),
        "--evasive-devices".into(),
        "--pidfile".into(),
        pidfile.clone().into(),
    ]);
    common_args(c, &mut args);
    if let Some(p) = &c.lsm_profile {
        args.push("--lsm-profile".into());
        args.push(p.into());
    }
    if let Some(p) = &c.lsm_mount_context {
        args.push("--lsm-mount-context".into());
        args.push(p.into());
    }
    if c.manage_cgroups_mode.as_deref() != Some("ignore") {
        for r in cgroup_roots(&cg) {
            args.push("--cgroup-root".into());
            args.push(r.into());
        }
    }
    let mounts: &[Mount] = spec.mounts().as_deref().unwrap_or(&[]);
    for e in &ext.mounts {
        let src = match e {
            External::Bind { mountpoint } => mounts
                .iter()
                .filter(|m| crate::rootfs::is_bind(m))
                .find(|m| normalize(&m.destination().to_string_lossy()) == *mountpoint)
                .and_then(|m| crate::rootfs::bind_source(&config.bundle, m))
                .ok_or_else(|| {
                    Error::field(
                        "mounts",
                        format!(
                            "the checkpoint has a bind mount on {mountpoint} that the config \
                             does not have"
                        ),
                    )
                })?,
            External::Cgroup {
                mountpoint,
                hierarchy,
            } => cgroup_source(&cg, hierarchy).ok_or_else(|| {
                Error::msg(format!(
                    "the checkpoint binds the cgroup hierarchy {hierarchy:?} on {mountpoint}, \
                     which this host's cgroup layout does not have"
                ))
            })?,
            External::Device { host, .. } => PathBuf::from(host),
        };
        let mut a = OsString::from(format!("mnt[{}]:", e.mountpoint()));
        a.push(src.as_os_str());
        args.push("--external".into());
        args.push(a);
    }
    // Files criu gets for --inherit-fd, as (our fd, its number in criu, key). criu's own stdio is
    // /dev/null (what it and the tools it runs print must not reach the container's output).
    let mut passes: Vec<(OwnedFd, i32, String)> = Vec::new();
    // Stdio pipes: ours replace the dumped ones (runc's rule: only pipes).
    for (i, d) in descriptors.iter().enumerate().take(3) {
        if d.contains("pipe:") {
            let fd = dup_cloexec(i as i32)
                .map_err(|e| Error::os(format!("restore: stdio fd {i}"), e))?;
            passes.push((fd, 0, d.clone()));
        }
    }
    // Namespaces joined by path: net and pid external (an fd of the path), the others joined.
    if let Some(nss) = linux.and_then(|l| l.namespaces().as_ref()) {
        for n in nss {
            let Some(p) = n.path().as_ref().filter(|p| !p.as_os_str().is_empty()) else {
                continue;
            };
            let t = n.typ();
            if matches!(t, LinuxNamespaceType::Network | LinuxNamespaceType::Pid) {
                let f = std::fs::File::open(p)
                    .map_err(|e| Error::os(format!("linux.namespaces: {}", p.display()), e))?;
                passes.push((OwnedFd::from(f), 0, ext_ns_key(t).to_string()));
            } else {
                let name = match t {
                    LinuxNamespaceType::Ipc => "ipc",
                    LinuxNamespaceType::Uts => "uts",
                    LinuxNamespaceType::Mount => "mnt",
                    LinuxNamespaceType::User => "user",
                    LinuxNamespaceType::Time => "time",
                    _ => continue,
                };
                let mut a = OsString::from(format!("{name}:"));
                a.push(p.as_os_str());
                args.push("--join-ns".into());
                args.push(a);
            }
        }
    }
    // Numbers above every fd we hold, so that no dup2 in the child overwrites a source.
    let base = passes
        .iter()
        .map(|(fd, _, _)| fd.as_raw_fd())
        .max()
        .unwrap_or(2)
        .max(9)
        + 1;
    for (k, (_, target, key)) in passes.iter_mut().enumerate() {
        *target = base + k as i32;
        args.push("--inherit-fd".into());
        args.push(format!("fd[{target}]:{key}").into());
    }

    // criu: in a mount namespace of its own, where the rootfs is bound on criu-root, and in the
    // container's cgroup (what it restores lands there, whatever --manage-cgroups-mode says).
    let rootfs_c = sys::cstr(&config.rootfs);
    let target_c = sys::cstr(&criu_root);
    let dups: Vec<(i32, i32)> = passes
        .iter()
        .map(|(fd, target, _)| (fd.as_raw_fd(), *target))
        .collect();
    let cg_child = cg.clone();
    let criu = criu_bin(c);
    let mut cmd = Command::new(&criu);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the forked child before exec. sprout is single-threaded here
    // (no thread was started), so the allocations in add_pid cannot meet a lock held by another
    // thread at fork. unshare, mount and dup2 take integers and the NUL-terminated CStrings
    // `rootfs_c` and `target_c`, alive (moved into the closure) for the calls; every source fd
    // of `dups` is open (held by `passes` until after the child has exec'd).
    unsafe {
        cmd.pre_exec(move || {
            sys::cvt(libc::unshare(libc::CLONE_NEWNS))?;
            sys::cvt(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            sys::cvt(libc::mount(
                rootfs_c.as_ptr(),
                target_c.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            for (fd, target) in &dups {
                sys::cvt(libc::dup2(*fd, *target))?;
            }
            cg_child
                .add_pid(libc::getpid())
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            Ok(())
        });
    }
    let status = cmd.status().map_err(|e| spawn_error(&criu, e))?;
    drop(passes);
    let _ = std::fs::remove_dir(&criu_root);
    trace.mark("criu_restore");
    let pid: Option<i32> = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let _ = std::fs::remove_file(&pidfile);
    if let Some(p) = pid {
        undo.pid = sys::pidfd_open(p).ok();
    }
    if !status.success() {
        return Err(criu_failed("restore", status, &log_dir(c).join(log_name)));
    }
    let pid = pid.ok_or_else(|| Error::msg("restore: criu wrote no pid"))?;
    let pidfd = undo
        .pid
        .take()
        .ok_or_else(|| Error::msg(format!("restore: the restored init {pid} is gone")))?;
    st.pid = pid;
    st.pid_start = sys::proc_start_time(pid).map(|s| s.0).unwrap_or(0);
    store.save(&st)?;
    std::fs::write(dir.join(state::CONFIG_FILE), &config.raw)
        .map_err(|e| Error::os("saving config", e))?;
    if let Some(p) = &o.pid_file {
        if let Err(e) = crate::create::write_pid_file(p, pid) {
            undo.pid = Some(pidfd);
            return Err(e);
        }
    }
    std::fs::remove_file(dir.join(state::CREATING_FILE))
        .map_err(|e| Error::os("removing the state marker", e))?;
    undo.armed = false;
    Ok(Restored { state: st, pidfd })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: &str = "\
100 90 0:50 /var/tmp/b/rootfs / rw - ext4 /dev/vda rw
101 100 0:51 / /proc rw - proc proc rw
102 100 0:52 / /dev rw - tmpfs tmpfs rw
103 102 0:5 /fuse /dev/fuse rw - devtmpfs udev rw
104 100 0:53 / /sys/fs/cgroup rw - tmpfs tmpfs rw
105 104 0:30 /c1 /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
106 104 0:31 /x/c1 /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
107 104 0:32 /c1 /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
108 100 0:60 /home/data /data\\040x rw - ext4 /dev/vdb rw
109 100 0:61 / /sys/fs/cgroup2 rw - cgroup2 cgroup2 rw
";

    fn spec() -> Spec {
        serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "mounts": [
                {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
                {"destination": "/data x/", "type": "bind", "source": "/home/data"},
                {"destination": "/proc", "type": "proc", "source": "proc"}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn externals_are_binds_host_cgroup_dirs_and_devices() {
        let e = externals_from_mountinfo(MI, &spec());
        assert_eq!(
            e,
            vec![
                External::Device {
                    mountpoint: "/dev/fuse".into(),
                    host: "/dev/fuse".into()
                },
                External::Cgroup {
                    mountpoint: "/sys/fs/cgroup/pids".into(),
                    hierarchy: "pids".into()
                },
                External::Cgroup {
                    mountpoint: "/sys/fs/cgroup/cpu,cpuacct".into(),
                    hierarchy: "cpu,cpuacct".into()
                },
                External::Cgroup {
                    mountpoint: "/sys/fs/cgroup/unified".into(),
                    hierarchy: "unified".into()
                },
                External::Bind {
                    mountpoint: "/data x".into()
                },
            ]
        );
    }

    #[test]
    fn external_file_roundtrip() {
        let f = ExternalFile {
            mounts: externals_from_mountinfo(MI, &spec()),
        };
        let j = serde_json::to_string(&f).unwrap();
        assert!(j.contains("\"kind\":\"cgroup\""), "{j}");
        let back: ExternalFile = serde_json::from_str(&j).unwrap();
        assert_eq!(back.mounts, f.mounts);
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let o = CriuOpts {
            manage_cgroups_mode: Some("hard".into()),
            ..Default::default()
        };
        assert!(check_modes(&o)
            .unwrap_err()
            .to_string()
            .starts_with("--manage-cgroups-mode"));
        let o = CriuOpts {
            empty_ns: vec!["ipc".into()],
            ..Default::default()
        };
        assert!(check_modes(&o)
            .unwrap_err()
            .to_string()
            .starts_with("--empty-ns"));
        let o = CriuOpts {
            lazy_pages: true,
            ..Default::default()
        };
        assert!(check_modes(&o)
            .unwrap_err()
            .to_string()
            .starts_with("--lazy-pages"));
    }

    #[test]
    fn unescape_octal() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(normalize("/a//b/./c/"), "/a/b/c");
    }
}
