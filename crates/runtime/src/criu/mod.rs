//! `checkpoint` and `restore` through CRIU (criu(8), found as `--criu`, else `criu` on $PATH),
//! with runc's flags and files.
//!
//! sprout talks to `criu swrk` over its RPC socket as runc does ([`rpc`]: one request, its
//! notifications, one answer), because two things containers need exist only there: a
//! terminal's pty master comes back as an fd (`orphan-pts-master`, sent to `--console-socket`),
//! and criu runs as sprout's child with sprout's fds. What goes in the request:
//!
//! - **Mounts CRIU cannot see the source of** are marked external at dump and given their new
//!   source at restore: the config's bind mounts (key: the destination; restore: the bundle's
//!   source), the host's v1 cgroup directories bound into a container without a cgroup namespace
//!   (key: the mount point; restore: the new container's directory of that hierarchy), on a
//!   cgroup2 host such a container's whole hierarchy (restore: the host's cgroup2 mount), and /dev
//!   nodes bound from the host's devtmpfs (user namespaces). They are read from the init's own
//!   mountinfo at dump and written to `sprout-criu.json` in the image directory.
//! - **Stdio**: the init's fds 0-2 go to `descriptors.json` (runc's file, same format); at restore
//!   a pipe among them is replaced by the restoring process's own fd of that number
//!   (`inherit_fd`), as runc does, so conmon's (or the shim's) new pipes carry the output.
//! - **Namespaces the config joins by path**: the network and pid namespaces are external
//!   (`net[INODE]:extRootNetNS`, restored from an fd of the same path); the others are joined
//!   (`join_ns`).
//! - **cgroups**: `restore` makes the container's cgroup and applies `linux.resources` first, as
//!   `create` does; criu runs inside it and puts the restored tasks there (`cg_root`). On a
//!   cgroup2 host criu gets the host's hierarchy in a cgroup yard (`CriuYard`) at dump and
//!   restore, instead of mounting cgroup2 itself (which resets the hierarchy's options).
//! - **The rootfs** must be a mount point for criu's `root`: criu runs in a mount namespace of its
//!   own where the rootfs is bound on `<state dir>/criu-root`; nothing is mounted in the
//!   caller's namespace.
//! - criu's configuration file: the annotation `org.criu.config` (empty: none), else
//!   /etc/criu/runc.conf, as runc (so a host configured for runc's checkpoints works the same).

pub mod rpc;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rpc::{opt, Msg};

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
    /// The whole cgroup2 hierarchy, the cgroup mount of a container without cgroup and user
    /// namespaces on a cgroup2 host (create binds the host's, see rootfs/cgroup.rs): restore
    /// binds the host's cgroup2 mount again. Left to criu, it mounted cgroup2 anew in the
    /// initial cgroup namespace, which resets the hierarchy's options for the whole host
    /// (systemd's nsdelegate and memory_recursiveprot; runc issue 5258).
    Hierarchy { mountpoint: String },
}

impl External {
    fn mountpoint(&self) -> &str {
        match self {
            External::Bind { mountpoint }
            | External::Cgroup { mountpoint, .. }
            | External::Device { mountpoint, .. }
            | External::Hierarchy { mountpoint } => mountpoint,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ExternalFile {
    mounts: Vec<External>,
    /// Not read from the images but derived from the config ([`externals_from_config`]): a
    /// cgroup hierarchy this host's new cgroup lacks is left out instead of refused.
    #[serde(skip)]
    derived: bool,
}

/// Images without sprout-criu.json (another runtime's: runc's) name their external mounts as
/// runc does, by destination: the config's bind mounts, each v1 hierarchy bound under a cgroup
/// mount when there is no cgroup namespace, the devices. So restore maps those from the config,
/// as runc's restore does; criu ignores a key the images do not have.
fn externals_from_config(spec: &Spec, rootfs: &Path) -> ExternalFile {
    let mut mounts = Vec::new();
    let cgroupns = has_ns(spec, LinuxNamespaceType::Cgroup);
    for m in spec.mounts().iter().flatten() {
        let dest = m.destination().to_string_lossy();
        if crate::rootfs::is_bind(m) {
            mounts.push(External::Bind {
                mountpoint: resolve_in_rootfs(rootfs, &dest),
            });
        } else if m.typ().as_deref() == Some("cgroup") && !cgroupns {
            let names = std::fs::read_dir("/sys/fs/cgroup")
                .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                .unwrap_or_default();
            for n in names {
                let n = n.to_string_lossy();
                mounts.push(External::Cgroup {
                    mountpoint: format!("{}/{n}", normalize(&dest)),
                    hierarchy: n.into_owned(),
                });
            }
        }
    }
    let devices = spec.linux().as_ref().and_then(|l| l.devices().as_ref());
    let paths = crate::rootfs::default_devices()
        .iter()
        .map(|(p, _, _)| format!("/dev/{p}"))
        .chain(
            devices
                .into_iter()
                .flatten()
                .map(|d| normalize(&d.path().to_string_lossy())),
        )
        .collect::<Vec<_>>();
    for p in paths {
        mounts.push(External::Device {
            mountpoint: p.clone(),
            host: p,
        });
    }
    ExternalFile {
        mounts,
        derived: true,
    }
}

/// The config gives the container a namespace of type `t` (new or joined).
fn has_ns(spec: &Spec, t: LinuxNamespaceType) -> bool {
    spec.linux()
        .as_ref()
        .and_then(|l| l.namespaces().as_ref())
        .is_some_and(|n| n.iter().any(|n| n.typ() == t))
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
/// `dest` (a mount destination) as the container sees it once its symlinks are followed inside
/// `rootfs` (RESOLVE_IN_ROOT), as the kernel followed them when the init mounted there: a bind
/// whose destination is a symlink is mounted where the link points (runc's securejoin). The
/// normalised `dest` where that cannot be resolved.
pub fn resolve_in_rootfs(rootfs: &Path, dest: &str) -> String {
    let plain = normalize(dest);
    let Ok(canon) = std::fs::canonicalize(rootfs) else {
        return plain;
    };
    let Ok(root) = std::fs::File::open(&canon) else {
        return plain;
    };
    match sys::open_in_root(root.as_raw_fd(), Path::new(&plain), libc::O_PATH, 0) {
        Ok(fd) => std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .ok()
            .and_then(|p| {
                p.strip_prefix(&canon)
                    .ok()
                    .map(|r| normalize(&r.to_string_lossy()))
            })
            .unwrap_or(plain),
        Err(_) => plain,
    }
}

pub fn externals_from_mountinfo(
    mountinfo: &str,
    spec: &Spec,
    resolve: impl Fn(&str) -> String,
) -> Vec<External> {
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
        .map(|m| resolve(&m.destination().to_string_lossy()))
        .collect();
    // A cgroup2 mount whose root is the hierarchy's is the whole tree only without cgroup and
    // user namespaces (in a cgroup namespace the root shown is the container's cgroup, seen
    // from here; in a user namespace the mount is refused and the container's cgroup bound).
    let host_tree =
        !has_ns(spec, LinuxNamespaceType::Cgroup) && !has_ns(spec, LinuxNamespaceType::User);
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
        } else if fstype == "cgroup2" && root == "/" && *mp == cgroup_dest && host_tree {
            External::Hierarchy {
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

/// A close-on-exec duplicate of our stdio fd `i` (0, 1 or 2).
fn dup_stdio(i: usize) -> std::io::Result<OwnedFd> {
    use std::os::fd::AsFd;
    match i {
        0 => std::io::stdin().as_fd().try_clone_to_owned(),
        1 => std::io::stdout().as_fd().try_clone_to_owned(),
        _ => std::io::stderr().as_fd().try_clone_to_owned(),
    }
}

fn criu_bin(o: &CriuOpts) -> PathBuf {
    o.criu.clone().unwrap_or_else(|| PathBuf::from("criu"))
}

fn check_modes(o: &CriuOpts) -> Result<()> {
    if let Some(m) = &o.manage_cgroups_mode {
        if rpc::cg_mode(m).is_none() {
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

/// What dump and restore share (runc's CriuOpts in criu_opts).
fn common_opts(o: &CriuOpts, images: &OwnedFd, work: Option<&OwnedFd>, log: &str) -> Msg {
    let mut m = Msg::default();
    m.int(opt::IMAGES_DIR_FD, images.as_raw_fd())
        .int(opt::LOG_LEVEL, 4)
        .str(opt::LOG_FILE, log)
        .flag(opt::NOTIFY_SCRIPTS, true)
        .flag(opt::MANAGE_CGROUPS, true)
        .flag(opt::ORPHAN_PTS_MASTER, true)
        .flag(opt::TCP_ESTABLISHED, o.tcp_established)
        .flag(opt::TCP_SKIP_IN_FLIGHT, o.tcp_skip_in_flight)
        .flag(opt::LINK_REMAP, o.link_remap)
        .flag(opt::EXT_UNIX_SK, o.ext_unix_sk)
        .flag(opt::SHELL_JOB, o.shell_job)
        .flag(opt::FILE_LOCKS, o.file_locks)
        .flag(opt::AUTO_DEDUP, o.auto_dedup);
    if let Some(w) = work {
        m.int(opt::WORK_DIR_FD, w.as_raw_fd());
    }
    if !o.empty_ns.is_empty() {
        m.uint(opt::EMPTY_NS, libc::CLONE_NEWNET as u64);
    }
    if let Some(mode) = o.manage_cgroups_mode.as_deref().and_then(rpc::cg_mode) {
        m.uint(opt::MANAGE_CGROUPS_MODE, mode);
    }
    m
}

/// runc's rule for criu's configuration file.
fn config_file(m: &mut Msg, annotations: Option<&std::collections::HashMap<String, String>>) {
    match annotations.and_then(|a| a.get("org.criu.config")) {
        Some(f) if f.is_empty() => {}
        Some(f) => {
            m.str(opt::CONFIG_FILE, f);
        }
        None => {
            m.str(opt::CONFIG_FILE, "/etc/criu/runc.conf");
        }
    }
}

fn open_dir(p: &Path, flag: &str) -> Result<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(p)
        .map(OwnedFd::from)
        .map_err(|e| Error::os(format!("{flag} {}", p.display()), e))
}

/// The request: criu_req { type, opts }.
fn request(typ: u64, opts: &Msg) -> Msg {
    let mut r = Msg::default();
    r.uint(1, typ).msg(2, opts);
    r
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

/// The error of a failed criu call: criu's own message and errno when it sent them, its exit
/// status, and the first and last `Error` lines of its log.
fn criu_failed(
    what: &str,
    resp: Option<&rpc::Resp>,
    status: Option<std::process::ExitStatus>,
    log: &Path,
) -> Error {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error (") && !l.contains("RLIMIT_NOFILE"))
        .collect();
    // The first error is the cause (the later ones are criu giving up); the last says how it
    // ended.
    let lines = match (errors.first(), errors.last()) {
        (Some(a), Some(b)) if a != b => format!("{}; ...; {}", a.trim(), b.trim()),
        (Some(a), _) => a.trim().to_string(),
        _ => String::new(),
    };
    let mut why = Vec::new();
    if let Some(m) = resp
        .and_then(|r| r.errmsg.as_deref())
        .filter(|m| !m.is_empty())
    {
        why.push(m.trim().to_string());
    }
    if let Some(e) = resp.and_then(|r| r.errno).filter(|e| *e != 0) {
        why.push(format!(
            "errno {e} ({})",
            std::io::Error::from_raw_os_error(e)
        ));
    }
    if let Some(s) = status.filter(|s| !s.success()) {
        why.push(format!("{s}"));
    }
    Error::msg(format!(
        "{what}: criu failed{}{}; log: {}",
        if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join(", "))
        },
        if lines.is_empty() {
            String::new()
        } else {
            format!(": {lines}")
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
    if let Some(p) = &o.parent_path {
        // criu's parent_img is relative to the image directory (runc's rule too).
        if p.is_absolute() {
            bail!(
                kind = Kind::InvalidArgument,
                "--parent-path {}: must be relative to --image-path",
                p.display()
            );
        }
        // Checked before the image directory is made (a refused checkpoint leaves nothing):
        // `..` taken lexically, as criu takes it from inside that directory.
        let parent = o
            .image_path
            .join(p)
            .components()
            .fold(PathBuf::new(), |mut acc, c| {
                match c {
                    std::path::Component::ParentDir => {
                        acc.pop();
                    }
                    std::path::Component::CurDir => {}
                    c => acc.push(c),
                }
                acc
            });
        if !parent.is_dir() {
            bail!(
                kind = Kind::NotFound,
                "--parent-path {}: no such directory under --image-path {}",
                p.display(),
                o.image_path.display()
            );
        }
    }
    mkdir_0700(&o.image_path, "--image-path")?;
    let images = open_dir(&o.image_path, "--image-path")?;
    let work = match &o.work_path {
        Some(w) => {
            mkdir_0700(w, "--work-path")?;
            Some(open_dir(w, "--work-path")?)
        }
        None => None,
    };
    let pid = st.pid;
    let log_name = if o.pre_dump {
        "pre-dump.log"
    } else {
        "dump.log"
    };
    let mut m = common_opts(o, &images, work.as_ref(), log_name);
    m.int(opt::PID, pid)
        .str(opt::ROOT, &st.rootfs.to_string_lossy())
        .flag(opt::LEAVE_RUNNING, o.leave_running);
    config_file(&mut m, spec.annotations().as_ref());
    if let Some(p) = &o.parent_path {
        m.str(opt::PARENT_IMG, &p.to_string_lossy());
    }
    if o.pre_dump || o.parent_path.is_some() {
        m.flag(opt::TRACK_MEM, true);
    }
    if let Some(ps) = &o.page_server {
        let (addr, port) = ps
            .rsplit_once(':')
            .and_then(|(a, p)| Some((a, p.parse::<i32>().ok()?)))
            .ok_or_else(|| {
                Error::new(
                    Kind::InvalidArgument,
                    format!("--page-server {ps:?}: expected ADDRESS:PORT"),
                )
            })?;
        let mut info = Msg::default();
        info.str(1, addr).int(2, port);
        m.msg(opt::PS, &info);
    }
    // CRIU freezes with the container's freezer cgroup (runc does too), else with ptrace.
    if let Some(cg) = &st.cgroup {
        let freezer = match cg.layout() {
            sprout_cgroups::Layout::V2 => cg.unified_path(),
            _ => cg.v1_path("freezer"),
        };
        if let Some(f) = freezer {
            m.str(opt::FREEZE_CGROUP, &f.to_string_lossy());
        }
    }
    for (t, name) in [
        (LinuxNamespaceType::Network, "net"),
        (LinuxNamespaceType::Pid, "pid"),
    ] {
        if ns_path(&spec, t).is_some() {
            use std::os::unix::fs::MetadataExt;
            let link = format!("/proc/{pid}/ns/{name}");
            let md = std::fs::metadata(&link).map_err(|e| Error::os(&link, e))?;
            m.str(
                opt::EXTERNAL,
                &format!("{name}[{}]:{}", md.ino(), ext_ns_key(t)),
            );
        }
    }
    if !o.pre_dump {
        let mi = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .map_err(|e| Error::os(format!("container {id:?}: reading its mounts"), e))?;
        let ext = externals_from_mountinfo(&mi, &spec, |d| resolve_in_rootfs(&st.rootfs, d));
        for e in &ext {
            m.str(opt::EXTERNAL, &format!("mnt[{0}]:{0}", e.mountpoint()));
        }
        let file = ExternalFile {
            mounts: ext,
            derived: false,
        };
        state::write_atomic(
            &o.image_path.join(EXTERNAL_FILE),
            &serde_json::to_vec_pretty(&file).unwrap_or_default(),
        )?;
        // runc's descriptors.json: what the init's stdio were, for restore's inherit_fd.
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
    let yard = CriuYard::new(&store.dir(id))?;
    if let Some(y) = &yard {
        m.str(opt::CGROUP_YARD, &y.dir.to_string_lossy());
    }
    trace.mark("criu_prepare");
    let criu = criu_bin(o);
    let enter = yard
        .as_ref()
        .map(|y| (y.tree.as_raw_fd(), y.unified.clone()));
    let typ = if o.pre_dump { rpc::PRE_DUMP } else { rpc::DUMP };
    let what = if o.pre_dump { "pre-dump" } else { "checkpoint" };
    let log = log_dir(o).join(log_name);
    let called = rpc::start(&criu, move || match &enter {
        Some((tree, unified)) => CriuYard::enter(*tree, unified),
        None => Ok(()),
    })
    .map_err(|e| spawn_error(&criu, e))
    .and_then(|sw| {
        sw.call(&request(typ, &m), |_, _, _| Ok(()))
            .map_err(|e| e.context(format!("{what}: criu ({})", criu.display())))
    });
    if let Some(y) = &yard {
        y.remove();
    }
    let (resp, status) = called?;
    trace.mark("criu_dump");
    // A pre-dump's criu waits for further requests and exits on EOF with a failure status.
    if !resp.success || (!o.pre_dump && !status.success()) {
        return Err(criu_failed(what, Some(&resp), Some(status), &log));
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
        // The rootfs bound for criu (in this process's own mount namespace) keeps the state
        // directory busy.
        let t = sys::cstr(self.store.dir(&self.id).join(CRIU_ROOT));
        // SAFETY: umount2 reads the NUL-terminated CString `t`, alive for the call; EINVAL when
        // nothing is mounted there.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
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

/// cg_root entries: every hierarchy's path (relative to its mount) of the new cgroup, by
/// controller; cgroup2's has none (the root of every hierarchy not named).
fn cgroup_roots(cg: &sprout_cgroups::Manager) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for (name, _) in cg.v1_paths() {
        if let Some((dir, mount)) = cg.v1_dir_and_mount(name) {
            if let Ok(rel) = dir.strip_prefix(mount) {
                out.push((Some(name.to_string()), format!("/{}", rel.display())));
            }
        }
    }
    if let (Some(dir), Some(mount)) = (cg.unified_path(), cg.unified_mount()) {
        if let Ok(rel) = dir.strip_prefix(mount) {
            out.push((None, format!("/{}", rel.display())));
        }
    }
    out
}

/// The mount points of the config's bind mounts, made in the rootfs as `create` makes them
/// (criu mounts on them and does not make them), unless a tmpfs of the config holds them (criu
/// restores a tmpfs's whole content, its mount points with it). `root` is the rootfs bound in
/// this process's own mount namespace: each bind is mounted there in the config's order while
/// the later mount points are made, so that one nested in an earlier bind is made in that
/// bind's source, as at create; they are unmounted again before criu runs. runc does the same.
fn make_bind_mountpoints(config: &Config, root: &Path) -> Result<()> {
    let mounts: &[Mount] = config.spec.mounts().as_deref().unwrap_or(&[]);
    let tmpfs: Vec<String> = mounts
        .iter()
        .filter(|m| m.typ().as_deref() == Some("tmpfs"))
        .map(|m| normalize(&m.destination().to_string_lossy()))
        .collect();
    let root_fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(root)
        .map_err(|e| Error::os(format!("root.path {}", config.rootfs.display()), e))?
        .into();
    let mut mounted: Vec<OwnedFd> = Vec::new();
    let r = (|| -> Result<()> {
        for (i, m) in mounts.iter().enumerate() {
            if !crate::rootfs::is_bind(m) {
                continue;
            }
            let dest = normalize(&m.destination().to_string_lossy());
            if tmpfs.iter().any(|t| dest.starts_with(&format!("{t}/"))) {
                continue;
            }
            let Some(src) = crate::rootfs::bind_source(&config.bundle, m) else {
                continue;
            };
            let file = std::fs::metadata(&src).is_ok_and(|md| !md.is_dir());
            let target = crate::rootfs::ensure_in_root(&root_fd, Path::new(&dest), file)
                .map_err(|e| e.context(format!("mounts[{i}]: making the mount point {dest}")))?;
            // Through the O_PATH fd of the target: what ensure_in_root resolved inside the
            // rootfs, never a path a symlink could lead out of it.
            let t = sys::fd_path(&target);
            let s = sys::cstr(&src);
            // SAFETY: mount reads the NUL-terminated CStrings `s` and `t`, alive for the call.
            let ok = unsafe {
                libc::mount(
                    s.as_ptr(),
                    t.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            } == 0;
            if ok {
                // The bind's root, resolved again inside the rootfs, to unmount it by fd.
                if let Ok(fd) = crate::rootfs::ensure_in_root(&root_fd, Path::new(&dest), file) {
                    mounted.push(fd);
                }
            }
        }
        Ok(())
    })();
    for fd in mounted.iter().rev() {
        let p = sys::fd_path(fd);
        // SAFETY: umount2 reads the NUL-terminated CString `p`, alive for the call.
        unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
    }
    r
}

/// The highest file descriptor number open in this process (from /proc/self/fd; 2 if it
/// cannot be read).
fn highest_open_fd() -> i32 {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .max()
                .unwrap_or(2)
        })
        .unwrap_or(2)
}

/// criu's cgroup yard under a container's state directory: where criu finds each hierarchy by
/// name (`unified` for cgroup2) instead of mounting it.
const CGROUP_YARD: &str = "criu-cgroup-yard";

/// The host's cgroup2 hierarchy for criu, on a cgroup2 host where this process is in the
/// initial cgroup and user namespaces (`rootfs::host_hierarchy`): criu mounts every hierarchy
/// it reads or restores cgroups in (dump and restore alike), and a cgroup2 mount made in the
/// initial cgroup namespace resets the hierarchy's options for the whole host (systemd's
/// nsdelegate and memory_recursiveprot; with runc too). Given a yard (`cgroup_yard`) whose
/// `unified` already holds the hierarchy, it mounts nothing. The yard's directories are made
/// under `dir`; the clone is attached in criu's own mount namespace only
/// ([`CriuYard::enter`]), so no other process, and no removal of `dir`, ever sees it.
struct CriuYard {
    dir: PathBuf,
    unified: std::ffi::CString,
    tree: OwnedFd,
}

impl CriuYard {
    /// `None` where criu's own mount changes nothing (a cgroup namespace, a user namespace, no
    /// cgroup2 at /sys/fs/cgroup: v1 and hybrid hosts; there criu mounts as before).
    fn new(dir: &Path) -> Result<Option<CriuYard>> {
        let Some(tree) = crate::rootfs::host_hierarchy() else {
            return Ok(None);
        };
        let yard = dir.join(CGROUP_YARD);
        let unified = yard.join("unified");
        std::fs::create_dir_all(&unified).map_err(|e| Error::os(unified.display(), e))?;
        Ok(Some(CriuYard {
            dir: yard,
            unified: sys::cstr(&unified),
            tree,
        }))
    }

    /// In criu's child before exec: a mount namespace of its own (every mount a slave, so
    /// nothing propagates out) with the hierarchy attached on `<yard>/unified`. Only raw
    /// syscalls on what was prepared before the fork.
    fn enter(tree: i32, unified: &std::ffi::CStr) -> std::io::Result<()> {
        // The child of a fork is single-threaded.
        slave_mount_ns()?;
        crate::rootfs::move_mount_to_path(tree, unified)
    }

    /// The directories made for the yard (empty: the mount lived in criu's namespace only).
    fn remove(&self) {
        let _ = std::fs::remove_dir(self.dir.join("unified"));
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Move this process to a mount namespace of its own whose every mount is a slave: nothing
/// mounted there propagates out. The caller must be single-threaded (unshare(CLONE_NEWNS)
/// with CLONE_FS unshared).
fn slave_mount_ns() -> std::io::Result<()> {
    // SAFETY: unshare takes a flag; mount reads C string literals and null pointers.
    unsafe {
        sys::cvt(libc::unshare(libc::CLONE_NEWNS))?;
        sys::cvt(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ))?;
    }
    Ok(())
}

/// Move this process to a mount namespace of its own (slave: nothing propagates back to the
/// caller's, and every mount keeps its peer group as its master, which criu copies to a bind
/// mount it restores from an external source: on a host whose / is shared, systemd's default,
/// a private namespace makes that copy fail with EINVAL) and bind `rootfs` on `target` there.
fn private_mount_ns_with(rootfs: &Path, target: &Path) -> Result<()> {
    let (r, t) = (sys::cstr(rootfs), sys::cstr(target));
    // This process is single-threaded (CLONE_FS is not shared).
    slave_mount_ns().map_err(|e| Error::os("restore: a mount namespace for criu", e))?;
    // SAFETY: mount reads the NUL-terminated CStrings `r` and `t`, alive for the call.
    unsafe {
        sys::cvt(libc::mount(
            r.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ))
        .map_err(|e| Error::os(format!("restore: binding {} for criu", rootfs.display()), e))?;
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
    if c.lsm_mount_context.is_some() {
        bail!(
            kind = Kind::InvalidArgument,
            "--lsm-mount-context: not supported by sprout"
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
    // A terminal's new pty master goes to --console-socket (criu's orphan-pts-master).
    let console = match (process.terminal().unwrap_or(false), &o.console_socket) {
        (true, Some(p)) => Some(crate::console::connect(p)?),
        (true, None) => bail!(
            kind = Kind::InvalidArgument,
            "process.terminal: restoring a container with a terminal needs --console-socket"
        ),
        (false, _) => None,
    };
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
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            externals_from_config(spec, &config.rootfs)
        }
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
    let mut cg = crate::create::cgroup_manager(&config, layout, &o.id, o.systemd_cgroup)?;
    let own_pid_ns = ns_path(spec, LinuxNamespaceType::Pid).is_none()
        && linux
            .and_then(|l| l.namespaces().as_ref())
            .is_some_and(|n| n.iter().any(|n| n.typ() == LinuxNamespaceType::Pid));
    let mut st = crate::create::new_state(&config, &o.id, &cg, own_pid_ns, o.systemd_cgroup);
    store.save(&st)?;
    std::fs::File::create(dir.join(state::CREATING_FILE))
        .map_err(|e| Error::os("creating the state marker", e))?;
    let resources = linux.and_then(|l| l.resources().as_ref());
    cg.create_for(resources)?;
    undo.cgroup = Some(cg.clone());
    st.cgroup = Some(cg.clone());
    st.cgroup_pending = false;
    store.save(&st)?;
    crate::create::apply_resources(&cg, linux)?;
    trace.mark("cgroup");

    // criu needs the rootfs as a mount point. This process moves to a mount namespace of its
    // own (nothing is mounted in the caller's), binds the rootfs on criu-root there, and opens
    // the images and work directories there too: criu reaches them through /proc/<our
    // pid>/fd, and mounts its cgroup yard in the work directory, which must be a mount of its
    // own namespace (the one criu inherits from us).
    let criu_root = dir.join(CRIU_ROOT);
    std::fs::create_dir(&criu_root).map_err(|e| Error::os(criu_root.display(), e))?;
    private_mount_ns_with(&config.rootfs, &criu_root)?;
    make_bind_mountpoints(&config, &criu_root)?;
    let images = open_dir(&c.image_path, "--image-path")?;
    let work = match &c.work_path {
        Some(w) => Some(open_dir(w, "--work-path")?),
        None => None,
    };
    let log_name = "restore.log";
    let mut m = common_opts(c, &images, work.as_ref(), log_name);
    m.str(opt::ROOT, &criu_root.to_string_lossy())
        .flag(opt::RST_SIBLING, true)
        .flag(opt::EVASIVE_DEVICES, true);
    config_file(&mut m, spec.annotations().as_ref());
    if let Some(p) = &c.lsm_profile {
        m.str(opt::LSM_PROFILE, p);
    }
    if c.manage_cgroups_mode.as_deref() != Some("ignore") {
        for (ctrl, path) in cgroup_roots(&cg) {
            let mut r = Msg::default();
            if let Some(ctrl) = ctrl {
                r.str(1, &ctrl);
            }
            r.str(2, &path);
            m.msg(opt::CG_ROOT, &r);
        }
    }
    let mounts: &[Mount] = spec.mounts().as_deref().unwrap_or(&[]);
    for e in &ext.mounts {
        let src = match e {
            External::Bind { mountpoint } => mounts
                .iter()
                .filter(|m| crate::rootfs::is_bind(m))
                .find(|m| {
                    resolve_in_rootfs(&config.rootfs, &m.destination().to_string_lossy())
                        == *mountpoint
                        || normalize(&m.destination().to_string_lossy()) == *mountpoint
                })
                .and_then(|m| crate::rootfs::bind_source(&config.bundle, m))
                // Without `.` components ("<bundle>/." for a source "."): criu looks for the
                // mount by the path's dirname and fails on a trailing "." ("Failed to get
                // bname"). Lexical: only `.` goes, `..` stays.
                .map(|p| p.components().collect::<PathBuf>())
                .ok_or_else(|| {
                    Error::field(
                        "mounts",
                        format!(
                            "the checkpoint has a bind mount on {mountpoint} that the config \
                             does not have"
                        ),
                    )
                })?,
            External::Cgroup { hierarchy, .. }
                if ext.derived && cgroup_source(&cg, hierarchy).is_none() =>
            {
                continue
            }
            External::Cgroup {
                mountpoint,
                hierarchy,
            } => cgroup_source(&cg, hierarchy).ok_or_else(|| {
                Error::msg(format!(
                    "the checkpoint binds the cgroup hierarchy {hierarchy:?} on {mountpoint}, \
                     which this host's cgroup layout does not have"
                ))
            })?,
            // Only where the config mounts cgroups without cgroup and user namespaces (where
            // create binds the same tree): the images may come from an archive and must not
            // choose where the host's hierarchy appears.
            External::Hierarchy { mountpoint } => {
                let cgroup_mount = mounts.iter().any(|m| {
                    matches!(m.typ().as_deref(), Some("cgroup" | "cgroup2"))
                        && normalize(&m.destination().to_string_lossy()) == *mountpoint
                });
                if !cgroup_mount
                    || has_ns(spec, LinuxNamespaceType::Cgroup)
                    || has_ns(spec, LinuxNamespaceType::User)
                {
                    return Err(Error::field(
                        "mounts",
                        format!(
                            "the checkpoint binds the host's cgroup2 hierarchy on {mountpoint}, \
                             where the config has no cgroup mount without cgroup and user \
                             namespaces"
                        ),
                    ));
                }
                cg.unified_mount().map(Path::to_path_buf).ok_or_else(|| {
                    Error::msg(format!(
                        "the checkpoint binds the host's cgroup2 hierarchy on {mountpoint}, \
                         which this host's cgroup layout does not have"
                    ))
                })?
            }
            // Only a device the config gives the container (or a default one), at its own path,
            // as runc (its restore maps each linux.devices path to itself): the images may come
            // from an archive (podman restore --import) and must not choose what of the host's
            // /dev is bound into the container.
            External::Device { mountpoint, host } => {
                let allowed = host == mountpoint
                    && (crate::rootfs::default_devices()
                        .iter()
                        .any(|(p, _, _)| format!("/dev/{p}") == *host)
                        || linux.and_then(|l| l.devices().as_ref()).is_some_and(|d| {
                            d.iter()
                                .any(|d| normalize(&d.path().to_string_lossy()) == *host)
                        }));
                if !allowed {
                    return Err(Error::field(
                        "linux.devices",
                        format!(
                            "the checkpoint binds the host's {host} on {mountpoint}, which the \
                             config does not give the container"
                        ),
                    ));
                }
                PathBuf::from(host)
            }
        };
        m.str(
            opt::EXTERNAL,
            &format!("mnt[{}]:{}", e.mountpoint(), src.to_string_lossy()),
        );
    }
    // Files criu gets as inherit_fd, as (our fd, its number in criu, key). criu's own stdio is
    // /dev/null (what it and the tools it runs print must not reach the container's output).
    let mut passes: Vec<(OwnedFd, i32, String)> = Vec::new();
    // Stdio pipes: ours replace the dumped ones (runc's rule: only pipes).
    for (i, d) in descriptors.iter().enumerate().take(3) {
        if d.contains("pipe:") {
            let fd = dup_stdio(i).map_err(|e| Error::os(format!("restore: stdio fd {i}"), e))?;
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
                let mut j = Msg::default();
                j.str(1, name).str(2, &p.to_string_lossy());
                m.msg(opt::JOIN_NS, &j);
            }
        }
    }
    // criu's cgroup yard first: its tree is an fd the child uses after the dups below.
    let yard = CriuYard::new(&dir)?;
    if let Some(y) = &yard {
        m.str(opt::CGROUP_YARD, &y.dir.to_string_lossy());
    }
    // Numbers above every fd this process holds (the sources, the yard's tree, a systemd
    // connection) and above the two the criu socket pair is about to take, so that no dup2 in
    // the child overwrites one it still needs. (Counting the sources alone let a target land on
    // the tree: restore after a pre-dump, whose stdio pipes are passed, failed with EINVAL from
    // move_mount.)
    // (+8: room for the socket pair and any fd opened before the spawn.)
    let base = highest_open_fd().max(7) + 8;
    for (k, (_, target, key)) in passes.iter_mut().enumerate() {
        *target = base + k as i32;
        let mut f = Msg::default();
        f.str(1, key).int(2, *target);
        m.msg(opt::INHERIT_FD, &f);
    }

    // criu: in the container's cgroup (what it restores lands there, whatever
    // --manage-cgroups-mode says), the inherited files at their numbers.
    let dups: Vec<(i32, i32)> = passes
        .iter()
        .map(|(fd, target, _)| (fd.as_raw_fd(), *target))
        .collect();
    let enter = yard
        .as_ref()
        .map(|y| (y.tree.as_raw_fd(), y.unified.clone()));
    let cg_child = cg.clone();
    let criu = criu_bin(c);
    // The closure runs in the forked child before exec. sprout is single-threaded here (no
    // thread was started), so the allocations in add_pid cannot meet a lock held by another
    // thread at fork.
    let setup = move || -> std::io::Result<()> {
        for (fd, target) in &dups {
            // SAFETY: dup2 takes integers; every source fd of `dups` is open (held by `passes`
            // until criu has exec'd).
            sys::cvt(unsafe { libc::dup2(*fd, *target) })?;
        }
        cg_child
            .add_pid(std::process::id() as i32)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if let Some((tree, unified)) = &enter {
            CriuYard::enter(*tree, unified)?;
        }
        Ok(())
    };
    let sw = rpc::start(&criu, setup).map_err(|e| spawn_error(&criu, e))?;
    drop(passes);
    let log = log_dir(c).join(log_name);
    let mut console = console;
    let mut notified_pid: Option<i32> = None;
    let called = sw.call(&request(rpc::RESTORE, &m), |script, pid, fd| {
        match script {
            "orphan-pts-master" => {
                let master = fd.ok_or_else(|| Error::msg("restore: criu sent no pty master"))?;
                if let Some(sock) = console.take() {
                    sys::send_fd(sock.as_raw_fd(), b"/dev/ptmx", master.as_raw_fd())
                        .map_err(|e| Error::os("--console-socket: sending the pty master", e))?;
                }
            }
            "post-restore" => notified_pid = pid,
            _ => {}
        }
        Ok(())
    });
    let t = sys::cstr(&criu_root);
    // SAFETY: umount2 reads the NUL-terminated CString `t`, alive for the call.
    unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    let _ = std::fs::remove_dir(&criu_root);
    if let Some(y) = &yard {
        y.remove();
    }
    trace.mark("criu_restore");
    let (resp, status) = match called {
        Ok(r) => r,
        Err(e) => {
            if let Some(p) = notified_pid {
                undo.pid = sys::pidfd_open(p).ok();
            }
            return Err(e.context(format!("restore: criu ({})", criu.display())));
        }
    };
    let pid = resp.restored_pid.or(notified_pid);
    if let Some(p) = pid {
        undo.pid = sys::pidfd_open(p).ok();
    }
    if !resp.success || !status.success() {
        return Err(criu_failed("restore", Some(&resp), Some(status), &log));
    }
    let pid = pid.ok_or_else(|| Error::msg("restore: criu sent no pid"))?;
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

    #[test]
    fn images_of_another_runtime_map_what_runc_maps_from_the_config() {
        // runc's images have no sprout-criu.json: its keys are the binds' destinations, the
        // v1 hierarchies under the cgroup mount, the devices; all from the config here.
        let mut sp = spec();
        let linux: oci_spec::runtime::Linux = serde_json::from_value(serde_json::json!({
            "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]
        }))
        .unwrap();
        sp.set_linux(Some(linux));
        let ext = externals_from_config(&sp, Path::new("/nonexistent-rootfs"));
        assert!(ext.derived);
        assert!(ext.mounts.contains(&External::Bind {
            mountpoint: "/data x".into()
        }));
        for d in ["/dev/null", "/dev/fuse"] {
            assert!(ext.mounts.contains(&External::Device {
                mountpoint: d.into(),
                host: d.into()
            }));
        }
        for m in &ext.mounts {
            if let External::Cgroup {
                mountpoint,
                hierarchy,
            } = m
            {
                assert_eq!(*mountpoint, format!("/sys/fs/cgroup/{hierarchy}"));
            }
        }
        // A cgroup namespace: the cgroup mount is a real mount, nothing of it external.
        let linux: oci_spec::runtime::Linux = serde_json::from_value(serde_json::json!({
            "namespaces": [{"type": "cgroup"}]
        }))
        .unwrap();
        sp.set_linux(Some(linux));
        let ext = externals_from_config(&sp, Path::new("/nonexistent-rootfs"));
        assert!(!ext
            .mounts
            .iter()
            .any(|m| matches!(m, External::Cgroup { .. })));
        // Not written to the images: the file sprout writes has no such field.
        let j = serde_json::to_string(&ext).unwrap();
        assert!(!j.contains("derived"), "{j}");
    }

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
        let e = externals_from_mountinfo(MI, &spec(), normalize);
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
    fn the_whole_cgroup2_tree_is_external_only_without_cgroup_and_user_namespaces() {
        // A pure cgroup v2 host: the container's /sys/fs/cgroup is the hierarchy's root (the
        // host's mount bound at create), a second cgroup2 mount elsewhere is not the cgroup
        // mount of the config.
        const V2: &str = "\
100 90 0:50 /var/tmp/b/rootfs / rw - ext4 /dev/vda rw
104 100 0:32 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
109 100 0:32 / /sys/fs/cgroup2 rw - cgroup2 cgroup2 rw
";
        let e = externals_from_mountinfo(V2, &spec(), normalize);
        assert_eq!(
            e,
            vec![External::Hierarchy {
                mountpoint: "/sys/fs/cgroup".into()
            }]
        );
        let j = serde_json::to_string(&e[0]).unwrap();
        assert_eq!(j, r#"{"kind":"hierarchy","mountpoint":"/sys/fs/cgroup"}"#);
        for ns in ["cgroup", "user"] {
            let mut sp = spec();
            let linux: oci_spec::runtime::Linux = serde_json::from_value(serde_json::json!({
                "namespaces": [{"type": ns}]
            }))
            .unwrap();
            sp.set_linux(Some(linux));
            assert_eq!(externals_from_mountinfo(V2, &sp, normalize), vec![], "{ns}");
        }
    }

    #[test]
    fn external_file_roundtrip() {
        let f = ExternalFile {
            mounts: externals_from_mountinfo(MI, &spec(), normalize),
            derived: false,
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
