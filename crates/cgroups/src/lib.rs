//! cgroup management for sprout on v1, v2 and hybrid hosts, with cgroupfs or systemd.
//!
//! Used by sprout-runtime (a container's cgroups), the sprout CLI (`events`, rootless
//! detection) and sprout-serve (its sandbox pool: [`ResidentPool`]); nothing outside this
//! workspace.
//!
//! What the API does:
//!
//! - [`Layout::detect`] decides v1 / v2 / hybrid with a statfs or two, never a scan of /proc/mounts.
//! - [`Manager::new`] resolves an OCI `linux.cgroupsPath` (relative paths nest under the calling
//!   process's own cgroup, per controller; `None` means `<own cgroup>/<container id>`), rejects '..'.
//!   [`Manager::with_layout`] skips a second detect.
//! - `create` makes the directories (only those that did not exist are recorded as ours, so that
//!   `destroy` removes exactly what we created); `create_for` is the runtime's create (runc's
//!   rootless and frozen-cgroup rules). `apply` writes resources, `add_pid` moves a pid in,
//!   `destroy` removes what `create` made (killing nothing), `freeze`/`thaw` wait until the state
//!   is reached, `pids` lists member processes, `kill_all` signals every member.
//! - `Manager` is Serialize/Deserialize: sprout stores it in the container's state.json and
//!   reloads it in later commands (`kill --all`, `delete`, `pause`, `ps`, `update`).
//! - `v2_dir_fd` gives an O_PATH|O_DIRECTORY fd of the unified-hierarchy leaf for clone3's
//!   CLONE_INTO_CGROUP, when the host is pure v2.
//! - [`Manager::oom_events`] ([`OomEvents`]: v1 eventfd, v2 memory.events),
//!   [`Manager::stats`] (runc `events --stats` shaped [`Stats`]), [`Manager::layout`],
//!   [`Manager::v1_path`], [`Manager::unified_path`], [`Manager::created`].
//! - [`ResidentPool`] / [`PoolCgroup`]: live cgroups one long-lived process keeps and reuses
//!   (v1, hybrid and pure v2; `cgroup.procs` fds kept open, a record file for cleanup after a
//!   crash, shrinking after a burst, bulk kill at shutdown): sprout-serve's sandbox pool.
//!
//! Known limits:
//! - cgroup v2 device rules are enforced by an eBPF program ([`ebpf`]) on pure v2 hosts; on
//!   hybrid hosts the v1 devices controller enforces them (no program on the unified leaf).
//! - `--systemd-cgroup` ([`systemd`]): the `slice:prefix:name` path becomes a transient scope
//!   unit made by systemd over D-Bus (own small client, no C library, no async runtime);
//!   without systemd it is a one-line error. Other commands drive the scope's directories
//!   through cgroupfs like any other; `update` also sends SetUnitProperties.
//! - v1 writes to cgroup.procs: the first migration after an idle period waits for one RCU
//!   grace period, the rest cost only the migration (measured in docs/performance.md, "cgroups:
//!   measured costs"); v2 avoids it via `v2_dir_fd`. The runtime keeps the init from waiting on
//!   them (sprout-runtime's DIRS message).
//!
//! Layout of the implementation (one file per concern):
//! - `lib.rs`: [`Layout`], [`Manager`] and the operations every driver shares (`new`,
//!   `sub_cgroup`, `pids`, `kill_all`), [`Error`]; the rest goes to the driver.
//! - `backend.rs`: the driver trait (`create`, `apply`, `add_pid`, `destroy`, the freezer,
//!   `stats`, `oom_events`, CLONE_INTO_CGROUP) and the freezer it names. Three drivers:
//!   - `v1/`: cgroupfs on v1 and hybrid hosts. `mod.rs`: the driver, hierarchy set-up and the
//!     order of the controllers (`CONTROLLERS` for `apply`, `STATS` for `stats`);
//!     `freezer.rs`; one file per controller with its `apply` and, where it has statistics,
//!     its `stats` (`memory`, `cpu`, `cpuacct` (statistics only), `cpuset` (also the parent
//!     copy at create), `pids`, `blkio`, `hugetlb`, `net_cls`, `net_prio`, `rdma`, `devices`,
//!     and `unified` for hybrid keys).
//!   - `v2/`: cgroupfs on pure v2. `mod.rs`: the driver, controller delegation and the order
//!     of the controllers (`CONTROLLERS`, `STATS`); `freezer.rs`; one file per controller
//!     with its `apply` and `stats` (`memory`, `cpu`, `cpuset`, `pids`, `io`, `hugetlb`,
//!     `network` (refusals), `rdma`, `unified`, `devices`). Adding a v2 controller is a file
//!     there and its lines in `CONTROLLERS` and `STATS`.
//!   - `systemd/`: the systemd driver (`mod.rs`; cgroupfs for what systemd leaves to it), the
//!     resources as unit properties, one function per controller (`props.rs`), its D-Bus
//!     client (`dbus/`) and its tests (`tests.rs`).
//! - `cgroupfs.rs`: what both cgroupfs drivers do alike (create's undo and runc's checks on an
//!   existing cgroup, `add_pid`, `destroy`).
//! - `resources.rs`: validation and conversions the controllers share, field-named errors.
//! - `detect.rs`: the layout, by statfs. `path.rs`: cgroupsPath resolution, /proc/self/cgroup.
//!   `fs.rs`: syscall-lean file helpers.
//! - `ebpf.rs`: the v2 device filter (`BPF_PROG_TYPE_CGROUP_DEVICE`). `default_devices.rs`: the
//!   device rules every container gets after its own (runc's list).
//! - `events.rs`: OOM notifications. `stats.rs`: the resource usage types, the dispatch over
//!   the drivers' `STATS` lists and the readers' helpers. `rootless.rs`: whether sprout runs
//!   rootless. `pool.rs`: the resident pool.
//! - `tests.rs` (unit tests on a fake cgroupfs tree) and `testutil.rs` (its helpers).
//!
//! Cost on the start path (hybrid host, relative path, 9 v1 hierarchies): `new` = 2 statfs +
//! one read of /proc/self/cgroup; `create` = one mkdir per hierarchy (plus the cpuset copy:
//! 2 reads + 2 writes, which the runtime's `create` defers past DIRS: `defer_cpuset_fill`); `apply` = one open+write per resource field that is set; `add_pid` =
//! one open+write per hierarchy. Nothing is initialised eagerly or globally.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use backend::{Backend, Freezer};

mod backend;
mod cgroupfs;
mod default_devices;
mod detect;
pub mod ebpf;
mod events;
mod fs;
mod path;
mod pool;
mod resources;
mod rootless;
mod stats;
pub mod systemd;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
mod v1;
mod v2;

pub use cgroupfs::SelfJoin;
pub use default_devices::{default_device_rules, with_default_device_rules, DEFAULT_DEVICES};
pub use detect::is_cgroup2;
pub use events::{OomEvents, OomWait};
pub use pool::{Cleaned, PoolCgroup, ResidentPool};
pub use rootless::running_rootless;
pub use stats::{
    BlkioEntry, BlkioStats, CpuStats, CpuUsage, CpusetStats, HugetlbStats, IntelRdtStats,
    MemoryEntry, MemoryStats, PidsStats, PsiData, PsiStats, Stats, Throttling,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cgroup: {0}")]
    Invalid(String),
    #[error("cgroup {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error for lack of permission (EACCES, EPERM, EROFS).
    pub fn is_permission(&self) -> bool {
        matches!(self, Error::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EACCES | libc::EPERM | libc::EROFS)))
    }

    /// The errno of an I/O error.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Invalid(_) => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Layout {
    /// Only v1 controller hierarchies.
    V1,
    /// v1 controllers plus a cgroup2 mounted at /sys/fs/cgroup/unified.
    Hybrid,
    /// Pure cgroup2 at /sys/fs/cgroup.
    V2,
}

/// The standard mount root of cgroup filesystems.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

impl Layout {
    /// statfs("/sys/fs/cgroup"): cgroup2 => V2; tmpfs => statfs("/sys/fs/cgroup/unified") is
    /// cgroup2 => Hybrid, else V1.
    pub fn detect() -> Result<Layout> {
        detect::detect_at(Path::new(DEFAULT_ROOT))
    }
}

/// Freezer state as reported by the cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezerState {
    Thawed,
    Frozen,
}

/// v1 controllers sprout knows how to place a container in, with their mount directory
/// under the cgroup root. Only those listed in /proc/self/cgroup (i.e. mounted as a v1
/// hierarchy) are used; a listed one whose mount point is missing is dropped at `create`.
pub(crate) const V1_CONTROLLERS: &[(&str, &str)] = &[
    ("cpu", "cpu"),
    ("cpuacct", "cpuacct"),
    ("cpuset", "cpuset"),
    ("memory", "memory"),
    ("devices", "devices"),
    ("freezer", "freezer"),
    ("blkio", "blkio"),
    ("pids", "pids"),
    ("net_cls", "net_cls"),
    ("net_prio", "net_prio"),
    ("hugetlb", "hugetlb"),
    ("rdma", "rdma"),
    ("perf_event", "perf_event"),
    ("name=systemd", "systemd"),
];

/// Where the cgroup filesystems are and what they look like. Public only so tests (unit and
/// integration) can point a [`Manager`] at a fake tree or at a privately mounted cgroup2;
/// the runtime uses [`Manager::new`].
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Host {
    /// Mount root (`/sys/fs/cgroup`).
    pub root: PathBuf,
    pub layout: Layout,
    /// Contents of /proc/self/cgroup; `None`: read the real file when needed.
    pub self_cgroup: Option<String>,
    /// Whether systemd runs; `None`: stat /run/systemd/system when needed.
    pub systemd_running: Option<bool>,
}

/// One hierarchy the container lives in.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Hier {
    /// Controller ("memory", "name=systemd") or "unified".
    pub name: String,
    /// Mount point of the hierarchy.
    pub mount: PathBuf,
    /// Existing directory the container's cgroup is created under (own cgroup or `mount`).
    pub base: PathBuf,
    /// The container's cgroup directory.
    pub dir: PathBuf,
    /// Mount point to fall back to at `create` when `mount` is missing: the co-mounted
    /// hierarchy's directory ("cpu,cpuacct") on hosts without the per-controller symlinks.
    #[serde(skip)]
    pub alt_mount: Option<PathBuf>,
}

impl Hier {
    /// Re-point at another mount point of the same hierarchy.
    pub(crate) fn rebase(&mut self, mount: PathBuf) {
        let re = |p: &Path| mount.join(p.strip_prefix(&self.mount).unwrap_or(Path::new("")));
        self.base = re(&self.base);
        self.dir = re(&self.dir);
        self.mount = mount;
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manager {
    layout: Layout,
    /// v1 hierarchies (V1 and Hybrid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    v1: Vec<Hier>,
    /// The cgroup2 leaf: the only directory on V2; the process-tracking leaf on Hybrid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unified: Option<Hier>,
    /// Directories `create` made, parents before children.
    #[serde(default)]
    created: Vec<PathBuf>,
    /// `--systemd-cgroup`: the transient unit systemd makes the cgroup for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    systemd: Option<systemd::Unit>,
    /// Rootless ([`running_rootless`]): no device program (bpf(2) needs privileges in the
    /// initial namespace), and [`Manager::create_for`] may go without a cgroup.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    rootless: bool,
    /// No `linux.cgroupsPath` was given (the default `<id>` placement).
    #[serde(skip)]
    default_path: bool,
    /// Where `create` leaves the wait for a just-made parent's delegated controllers (v2; see
    /// [`Manager::create_for_clone`]).
    #[serde(skip)]
    pub(crate) delegation: Delegation,
    /// v1 cpuset directories `create` made and left empty for [`Manager::fill_cpusets`]
    /// (after [`Manager::defer_cpuset_fill`]); `None`: filled in `create`.
    #[serde(skip)]
    pub(crate) cpuset_unfilled: Option<Vec<PathBuf>>,
    /// [`Manager::remove_idle_leaf`] removed the leaf [`Manager::procs_dir`] names: `destroy`
    /// does not rmdir it again.
    #[serde(skip)]
    pub(crate) idle_leaf_gone: Flag,
}

/// A flag a `&Manager` sets (Managers are shared between threads, and cloned).
#[derive(Debug, Default)]
pub(crate) struct Flag(std::sync::atomic::AtomicBool);

impl Flag {
    pub(crate) fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn set(&self, v: bool) {
        self.0.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clone for Flag {
    fn clone(&self) -> Flag {
        Flag(self.get().into())
    }
}

/// When the cgroup2 leaf's controllers are waited for, where its parent was made by another
/// container's create an instant ago and may not have enabled them yet (v2's `mkdirs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Delegation {
    /// In `create` (the default).
    #[default]
    AtCreate,
    /// In `apply`: the first thing that needs the controllers' files.
    AtApply,
    /// `create` left it to `apply`, which has not run yet.
    Pending,
}

/// An O_PATH|O_DIRECTORY fd of `dir` (for CLONE_INTO_CGROUP).
fn open_path(dir: &Path) -> Option<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
        .ok()
        .map(OwnedFd::from)
}

pub(crate) fn warn(msg: &str) {
    eprintln!("sprout: warning: {msg}");
}

impl Manager {
    pub fn new(cgroups_path: Option<&str>, container_id: &str, systemd: bool) -> Result<Manager> {
        Manager::with_layout(Layout::detect()?, cgroups_path, container_id, systemd)
    }

    /// [`Manager::new`] for a caller that already ran [`Layout::detect`] (saves its statfs).
    pub fn with_layout(
        layout: Layout,
        cgroups_path: Option<&str>,
        container_id: &str,
        systemd: bool,
    ) -> Result<Manager> {
        let host = Host {
            root: PathBuf::from(DEFAULT_ROOT),
            layout,
            self_cgroup: None,
            systemd_running: None,
        };
        let mut m = Manager::new_in(&host, cgroups_path, container_id, systemd)?;
        m.rootless = running_rootless();
        Ok(m)
    }

    /// Treat the caller as rootless or not (tests; [`Manager::with_layout`] detects it).
    #[doc(hidden)]
    pub fn set_rootless(&mut self, rootless: bool) {
        self.rootless = rootless;
    }

    /// [`Manager::new`] against an explicit [`Host`] (tests).
    #[doc(hidden)]
    pub fn new_in(
        host: &Host,
        cgroups_path: Option<&str>,
        container_id: &str,
        systemd: bool,
    ) -> Result<Manager> {
        let (cg, unit) = if systemd {
            let (cg, slice, name) = path::resolve_systemd_unit(cgroups_path, container_id, || {
                host.systemd_running.unwrap_or_else(systemd::running)
            })?;
            (cg, Some(systemd::Unit::new(name, slice, container_id)))
        } else {
            (path::resolve(cgroups_path, container_id)?, None)
        };
        // /proc/self/cgroup is needed for relative paths, and on v1 to know which
        // controllers are mounted; an absolute path on v2 needs nothing.
        let own = if cg.relative || host.layout != Layout::V2 {
            Some(match &host.self_cgroup {
                Some(s) => path::SelfCgroup::parse(s),
                None => path::SelfCgroup::read()?,
            })
        } else {
            None
        };
        let place = |name: &str, mount: PathBuf, own_path: Option<&str>| -> Result<Hier> {
            let base = if cg.relative {
                match own_path {
                    // cgroup v2 (runc's rule): a relative path next to a caller that sits in a
                    // systemd scope (a login session, a `systemd-run --scope`) goes beside that
                    // scope, in its slice: the scope holds processes, so no controller can be
                    // enabled below it ("no internal processes"), and it is not ours to change.
                    Some(p) if name == "unified" && host.layout == Layout::V2 => {
                        path::under(&mount, path::beside_scope(p))
                    }
                    Some(p) => path::under(&mount, p),
                    None => {
                        return Err(Error::Invalid(format!(
                            "cannot find this process's own {name} cgroup in /proc/self/cgroup"
                        )))
                    }
                }
            } else {
                mount.clone()
            };
            let dir = base.join(&cg.rel);
            Ok(Hier {
                name: name.to_string(),
                mount,
                base,
                dir,
                alt_mount: None,
            })
        };
        let mut m = Manager {
            layout: host.layout,
            v1: Vec::new(),
            unified: None,
            created: Vec::new(),
            systemd: unit,
            rootless: false,
            default_path: cgroups_path.is_none_or(str::is_empty),
            delegation: Delegation::AtCreate,
            cpuset_unfilled: None,
            idle_leaf_gone: Flag::default(),
        };
        match host.layout {
            Layout::V2 => {
                let own_path = own.as_ref().and_then(|o| o.unified.as_deref());
                m.unified = Some(place("unified", host.root.clone(), own_path)?);
            }
            Layout::V1 | Layout::Hybrid => {
                let own = own.as_ref().expect("read above for v1");
                for (ctrl, dir) in V1_CONTROLLERS {
                    let Some(own_path) = own.v1_path(ctrl) else {
                        continue;
                    };
                    let mut h = place(ctrl, host.root.join(dir), Some(own_path))?;
                    h.alt_mount = own.comounted(ctrl).map(|c| host.root.join(c));
                    m.v1.push(h);
                }
                // The hybrid cgroup2 leaf only tracks processes: without a "0::" line (odd
                // kernels, some cgroup namespaces) a relative path just goes without it.
                if host.layout == Layout::Hybrid && (!cg.relative || own.unified.is_some()) {
                    let own_path = own.unified.as_deref();
                    m.unified = Some(place("unified", host.root.join("unified"), own_path)?);
                }
            }
        }
        Ok(m)
    }

    /// Make the cgroup directories. Controllers whose hierarchy turns out not to be mounted
    /// are dropped. On failure, whatever this call created is removed again.
    ///
    /// With `--systemd-cgroup` this only connects to systemd and finds its tree; the scope
    /// is made by systemd in `add_pid` (a scope cannot exist without a process).
    pub fn create(&mut self) -> Result<()> {
        self.create_checked(false)
    }

    /// [`Manager::create`]; with `refuse_frozen`, also runc's checks that a cgroup which
    /// existed already is empty and not frozen, undone like any other failure (cgroupfs
    /// drivers; systemd makes its scope only at `add_pid`).
    fn create_checked(&mut self, refuse_frozen: bool) -> Result<()> {
        self.backend().create(self, refuse_frozen)
    }

    /// [`Manager::create`] for a container with these resources. Rootless without write access
    /// to the cgroup tree (EACCES, EPERM, EROFS), runc's rule: with no `linux.cgroupsPath` and no
    /// limits to set (device rules aside) the container goes without a cgroup of its own;
    /// otherwise a one-line error says why.
    ///
    /// Also runc's checks that a container's cgroup which existed already is empty and not
    /// frozen (cgroupfs.rs). That is for containers only: the serve engine's pool (plain
    /// [`Manager::create`]) reclaims its own pool cgroups that a killed engine left frozen.
    pub fn create_for(&mut self, res: Option<&oci_spec::runtime::LinuxResources>) -> Result<()> {
        match self.create_checked(true) {
            Err(e) if self.rootless && e.is_permission() => {
                if self.default_path && !resources::needs_limits(res) {
                    self.v1.clear();
                    self.unified = None;
                    return Ok(());
                }
                Err(Error::Invalid(format!(
                    "rootless container: {e} (without write access to the cgroup tree a \
                     rootless container needs no linux.cgroupsPath and no resource limits; \
                     or run it with --systemd-cgroup, or delegate a cgroup to this user)"
                )))
            }
            r => r,
        }
    }

    /// [`Manager::create_for`] for a cgroup the init is cloned into (CLONE_INTO_CGROUP, pure
    /// v2) before its limits are applied: what the directory's parent has to delegate is waited
    /// for by [`Manager::apply`], not here. That check reads the parent's two control files and
    /// lists the new directory (~0.1 ms); done in `apply`, it runs beside the init's set-up
    /// instead of before the clone. The init may be in the cgroup before its parent enables
    /// controllers: a v2 parent gives them to children with processes too.
    pub fn create_for_clone(
        &mut self,
        res: Option<&oci_spec::runtime::LinuxResources>,
    ) -> Result<()> {
        self.delegation = Delegation::AtApply;
        let r = self.create_for(res);
        if self.delegation == Delegation::AtApply {
            self.delegation = Delegation::AtCreate;
        }
        r
    }

    /// Let the next `create` leave the v1 cpuset directories it makes empty (cpuset.cpus and
    /// cpuset.mems unset, so that nothing can join them yet) for [`Manager::fill_cpusets`], which
    /// must come before anything joins them or sets their limits. The parent's copy, and the
    /// kernel's check of a cpuset.cpus write, take ~0.05–0.1 ms: `create` (runtime) hands the
    /// directories to the init (DIRS) first and fills them while the init mounts them.
    pub fn defer_cpuset_fill(&mut self) {
        self.cpuset_unfilled = Some(Vec::new());
    }

    /// Copy cpuset.cpus and cpuset.mems from their parents into the cpuset directories that a
    /// `create` after [`Manager::defer_cpuset_fill`] made (parents first); nothing otherwise.
    pub fn fill_cpusets(&mut self) -> Result<()> {
        match self.cpuset_unfilled.take() {
            Some(dirs) => v1::cpuset::copy_from_parent(&dirs),
            None => Ok(()),
        }
    }

    /// Whether the container has any cgroup directory (a rootless container may have none).
    pub fn has_cgroup(&self) -> bool {
        self.unified.is_some() || !self.v1.is_empty()
    }

    /// With `--systemd-cgroup`, before the unit exists (in `create`) the resources are
    /// checked and kept for `add_pid`; later (`update`) they also go to SetUnitProperties.
    pub fn apply(&self, resources: &oci_spec::runtime::LinuxResources) -> Result<()> {
        if self.rootless && !self.has_cgroup() {
            // create_for let a rootless container go without a cgroup: nothing to limit.
            return Ok(());
        }
        self.backend().apply(self, resources)
    }

    /// Write `pid` into cgroup.procs of every hierarchy (v1 controllers, then unified).
    ///
    /// With `--systemd-cgroup`, the first call of a `create` starts the transient unit with
    /// `PIDs=[pid]` instead (systemd places the pid), then joins the hierarchies systemd
    /// does not manage and writes the resources kept by `apply`.
    pub fn add_pid(&self, pid: i32) -> Result<()> {
        self.backend().add_pid(self, pid)
    }

    /// Hybrid host, cgroupfs driver: make the cgroup2 process-tracking leaf now, before the
    /// init is cloned, and return an O_PATH fd of it for CLONE_INTO_CGROUP, so that nobody
    /// writes a pid to its cgroup.procs (see [`SelfJoin`]: the v1 hierarchies are joined by
    /// the init itself). `None` (nothing changed) where there is no such leaf to make: another
    /// layout or driver, no cgroup2 mount, or a leaf that exists already (that one goes
    /// through `create`'s checks and `add_pid`). A directory made here is recorded as made by
    /// `create`, which then leaves it as it is.
    pub fn make_tracking_leaf(&mut self) -> Option<OwnedFd> {
        if self.layout != Layout::Hybrid || self.systemd.is_some() {
            return None;
        }
        let u = self.unified.as_ref()?;
        let mut created = Vec::new();
        let made =
            matches!(v1::mkdir_hier(u, &mut created), Ok(true)) && created.last() == Some(&u.dir);
        let fd = made.then(|| open_path(&u.dir)).flatten();
        if fd.is_some() {
            self.created.extend(created);
        } else {
            for d in created.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
        }
        fd
    }

    /// Hybrid host, cgroupfs driver: an O_PATH fd of the existing cgroup2 leaf, for a process
    /// cloned into it (CLONE_INTO_CGROUP; `exec`) that joins the v1 hierarchies itself.
    pub fn tracking_leaf_fd(&self) -> Option<OwnedFd> {
        if self.layout != Layout::Hybrid || self.systemd.is_some() {
            return None;
        }
        open_path(&self.unified.as_ref()?.dir)
    }

    /// The v1 hierarchies, as (name, directory), for the init to join itself with
    /// [`SelfJoin`] (cgroupfs driver on a v1 or hybrid host; empty otherwise).
    pub fn self_joins(&self) -> Vec<(String, PathBuf)> {
        if self.systemd.is_some() {
            return Vec::new();
        }
        self.v1
            .iter()
            .map(|h| (h.name.clone(), h.dir.clone()))
            .collect()
    }

    /// [`Manager::add_pid`] for the cgroup2 leaf of a hybrid host only (its v1 hierarchies
    /// joined with [`SelfJoin`]).
    pub fn add_pid_tracking(&self, pid: i32) -> Result<()> {
        cgroupfs::add_pid_to(pid, self.unified.iter())
    }

    /// Pure v2: put `pid` into the cgroup `of` is in now, if that is the container's cgroup or
    /// below it. runc's fallback for `exec` (its issue 2356): an init
    /// that moved itself into a sub-cgroup and enabled controllers in the container's cgroup
    /// leaves no room for processes there (EBUSY). A cgroup outside the container's, where an
    /// init without a cgroup namespace may have gone, is not joined: sprout writes into no
    /// cgroup it did not make or that the container's own cgroup does not hold.
    pub fn add_pid_to_cgroup_of(&self, of: i32, pid: i32) -> Result<()> {
        let u = self
            .unified
            .as_ref()
            .filter(|_| self.layout == Layout::V2)
            .ok_or_else(|| Error::Invalid("not a pure cgroup v2 host".into()))?;
        let proc = PathBuf::from(format!("/proc/{of}/cgroup"));
        let cur = fs::read(&proc)
            .map(|s| path::SelfCgroup::parse(&s))
            .map_err(|e| fs::io_err(&proc, e))?
            .unified
            .ok_or_else(|| Error::Invalid(format!("no cgroup2 entry in {}", proc.display())))?;
        let dir = path::under(&u.mount, &cur);
        if !dir.starts_with(&u.dir) || cur.split('/').any(|c| c == "..") {
            return Err(Error::Invalid(format!(
                "pid {of} is in {}, outside the container's cgroup {}",
                dir.display(),
                u.dir.display()
            )));
        }
        let procs = dir.join("cgroup.procs");
        fs::write(&procs, pid.to_string().as_bytes()).map_err(|e| fs::io_err(&procs, e))
    }

    /// O_PATH|O_DIRECTORY fd of the cgroup2 leaf for CLONE_INTO_CGROUP (pure v2 only).
    pub fn v2_dir_fd(&self) -> Option<OwnedFd> {
        if !self.backend().clone_into(self) {
            return None;
        }
        open_path(&self.unified.as_ref()?.dir)
    }

    /// The container's cgroup with some hierarchies pointed at an existing sub-cgroup, for
    /// `exec --cgroup` (runc's rules): `all` is one path for every hierarchy (cgroup v2, or
    /// every v1 hierarchy; on a hybrid host the cgroup2 tracking leaf follows where that
    /// sub-cgroup exists there too), `per_controller` (cgroup v1 only) a path per controller,
    /// the other hierarchies staying at the container's cgroup. Paths are relative to the
    /// container's cgroup, may not leave it ('..'), and must exist. Only for
    /// [`Manager::v2_dir_fd`] and [`Manager::add_pid`]: the copy owns no directory.
    pub fn sub_cgroup(
        &self,
        all: Option<&str>,
        per_controller: &[(String, String)],
    ) -> Result<Manager> {
        let rel = |p: &str| -> Result<PathBuf> {
            let r = Path::new(p.trim_start_matches('/'));
            if r.components().any(|c| {
                !matches!(
                    c,
                    std::path::Component::Normal(_) | std::path::Component::CurDir
                )
            }) {
                // runc's words first: its clients and tests read them.
                return Err(Error::Invalid(format!(
                    "bad sub cgroup path: {p} is not a sub cgroup path (it must stay inside the \
                     container's cgroup)"
                )));
            }
            Ok(r.to_path_buf())
        };
        let exists = |d: &Path| -> Result<()> {
            if d.is_dir() {
                Ok(())
            } else {
                // The words runc's error has (it fails writing the pid).
                Err(Error::Invalid(format!(
                    "adding pid to cgroup: {}/cgroup.procs: no such file or directory (the \
                     sub-cgroup must exist)",
                    d.display()
                )))
            }
        };
        if !self.has_cgroup() {
            return Err(Error::Invalid("the container has no cgroup".into()));
        }
        let mut m = self.clone();
        m.created.clear();
        if let Some(p) = all {
            let r = rel(p)?;
            for h in m.v1.iter_mut() {
                h.dir.push(&r);
                exists(&h.dir)?;
            }
            if let Some(u) = m.unified.as_mut() {
                let d = u.dir.join(&r);
                if self.layout == Layout::V2 {
                    exists(&d)?;
                    u.dir = d;
                } else if d.is_dir() {
                    u.dir = d;
                }
            }
        }
        if !per_controller.is_empty() && self.layout == Layout::V2 {
            return Err(Error::Invalid(
                "a <controller>: prefix is for cgroup v1 only; on cgroup v2 give one PATH".into(),
            ));
        }
        for (ctrl, p) in per_controller {
            let r = rel(p)?;
            let Some(h) = m.v1.iter_mut().find(|h| h.name == *ctrl) else {
                return Err(Error::Invalid(format!(
                    "unknown controller {ctrl:?} (the container's: {})",
                    self.v1
                        .iter()
                        .map(|h| h.name.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            };
            h.dir.push(&r);
            exists(&h.dir)?;
        }
        Ok(m)
    }

    /// Member pids of the container's cgroup and its descendant cgroups.
    /// Hand the container's cgroup v2 leaf to `uid` (pure v2 only): the directory and the
    /// files the kernel lists as delegatable (/sys/kernel/cgroup/delegate; before 4.15
    /// cgroup.procs, cgroup.subtree_control and cgroup.threads), a missing one skipped. For a
    /// container with a user namespace, a cgroup namespace of its own and a writable cgroupfs,
    /// whose root may then manage its own subtree (runc's OwnerUID, crun likewise). Only the
    /// container's own leaf, never a parent.
    pub fn delegate_to(&self, uid: u32) -> Result<()> {
        let Some(u) = self.unified.as_ref().filter(|_| self.layout == Layout::V2) else {
            return Ok(());
        };
        let chown = |p: &Path| match std::os::unix::fs::chown(p, Some(uid), None) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && p != u.dir => Ok(()),
            Err(e) => Err(fs::io_err(p, e)),
        };
        chown(&u.dir)?;
        let listed = std::fs::read_to_string("/sys/kernel/cgroup/delegate").ok();
        let files: Vec<&str> = match &listed {
            Some(l) => l.lines().map(str::trim).filter(|f| !f.is_empty()).collect(),
            None => vec!["cgroup.procs", "cgroup.subtree_control", "cgroup.threads"],
        };
        for f in files.iter().filter(|f| !f.contains('/')) {
            chown(&u.dir.join(f))?;
        }
        Ok(())
    }

    /// With `--systemd-cgroup`, the container's `org.systemd.property.*` annotations become
    /// extra properties of the unit `add_pid` starts (runc's rules: `...Sec` names in seconds
    /// become `...USec`; the values in GVariant's text format). A bad name or value is an error
    /// naming the annotation. Nothing to do with the cgroupfs driver (runc ignores them there).
    pub fn set_systemd_annotations(
        &self,
        annotations: &std::collections::HashMap<String, String>,
    ) -> Result<()> {
        match &self.systemd {
            Some(u) => u.set_annotations(annotations),
            None => Ok(()),
        }
    }

    /// Whether the directory [`Manager::pids`] reads exists (systemd removes a scope's once its
    /// last process is gone).
    pub fn procs_dir_exists(&self) -> bool {
        self.procs_dir().is_some_and(Path::exists)
    }

    pub fn pids(&self) -> Result<Vec<i32>> {
        let Some(dir) = self.procs_dir() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        fs::read_procs_recursive(dir, &mut out)?;
        Ok(out)
    }

    /// Signal every member, in sub-cgroups too. SIGKILL uses cgroup.kill where the unified
    /// leaf has it; on pure v2 that is all (it kills frozen tasks too). Otherwise, and on
    /// hybrid hosts after cgroup.kill (a task can be in the v1 hierarchies without being in
    /// the unified leaf, and a task frozen by the v1 freezer dies only once thawed): freeze,
    /// signal every pid, thaw (without a freezer: just signal every pid).
    pub fn kill_all(&self, signal: i32) -> Result<()> {
        let freezer = self.backend().freezer(self);
        if signal == libc::SIGKILL {
            if let Some(u) = &self.unified {
                let p = u.dir.join("cgroup.kill");
                match fs::write(&p, b"1") {
                    Ok(()) if !matches!(freezer, Freezer::V1(_)) => return Ok(()),
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(fs::io_err(p, e)),
                }
            }
        }
        let dir = match freezer {
            Freezer::V1(d) | Freezer::V2(d) => Some(d),
            Freezer::None => self.procs_dir(),
        };
        // Gone (its last task died, e.g. of the cgroup.kill above, and the cgroup was removed
        // by whoever reaped it): nothing left to signal.
        if dir.is_some_and(|d| !d.exists()) {
            return Ok(());
        }
        let frozen = match freezer {
            Freezer::None => false,
            _ => match self.freeze() {
                Ok(()) => true,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => false,
                Err(e) => {
                    warn(&format!(
                        "kill_all: could not freeze before signalling: {e}"
                    ));
                    false
                }
            },
        };
        let mut res = Ok(());
        if let Some(dir) = dir {
            let mut pids = Vec::new();
            res = match fs::read_procs_recursive(dir, &mut pids) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) => Ok(()),
                r => r,
            };
            for pid in pids {
                // SAFETY: kill(2) takes integers only and touches no memory of ours.
                if unsafe { libc::kill(pid, signal) } != 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::ESRCH) && res.is_ok() {
                        res = Err(Error::Invalid(format!("kill({pid}, {signal}): {e}")));
                    }
                }
            }
        }
        if frozen {
            match self.thaw() {
                // The signalled tasks died and whoever reaped them removed the cgroup meanwhile
                // (a foreground `run`): nothing is left to thaw. ENODEV: its files as the
                // rmdir takes it away.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) => {}
                r => r?,
            }
        }
        res
    }

    pub fn freeze(&self) -> Result<()> {
        self.backend().freezer(self).freeze()
    }

    pub fn thaw(&self) -> Result<()> {
        self.backend().freezer(self).thaw()
    }

    /// Thawed when there is no freezer at all.
    pub fn freezer_state(&self) -> Result<FreezerState> {
        self.backend().freezer(self).state()
    }

    /// For `delete` of a container whose init has exited: rmdir its own directory in the
    /// hierarchy [`Manager::pids`] reads, if `create` made it. rmdir(2) succeeds only on a
    /// cgroup with no process and no sub-cgroup, so `true` (gone, or was already) means what
    /// an empty `pids()` means, for one syscall instead of reading cgroup.procs and listing the
    /// directory; `false` (busy, or not ours, or systemd's) leaves everything as it was.
    pub fn remove_idle_leaf(&self) -> bool {
        if self.systemd.is_some() {
            return false;
        }
        let Some(dir) = self.procs_dir() else {
            return false;
        };
        if !self.created.iter().any(|c| c == dir) {
            return false;
        }
        let gone = match std::fs::remove_dir(dir) {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        self.idle_leaf_gone.set(gone);
        gone
    }

    /// For a `create` that was killed while making its directories (so `created` was never
    /// recorded): remove the container's leaf directories if they are empty. rmdir(2) refuses a
    /// cgroup with processes or children, so nothing in use can be removed.
    pub fn remove_empty_leaves(&self) {
        for h in self.v1.iter().chain(self.unified.iter()) {
            // Retried for a moment while busy: the init of a create killed after its clone
            // may still be exiting (CI, 2026-11-29: a hybrid host's cgroup2 tracking leaf
            // left once in 60 kills of the faults test, under load).
            let _ = fs::rmdir_retry(&h.dir);
        }
    }

    /// rmdir exactly the directories `create` made, deepest first; kills nothing. Keeps going
    /// past failures and reports the first one. Already-removed directories are fine. Inside
    /// the container's own cgroups (the leaves), sub-cgroups are removed first, deepest first.
    ///
    /// The container's own directories are retried for a moment while busy (tasks that were
    /// just killed take a moment to leave); a failure there is an error. An intermediate
    /// directory we created (e.g. `sprout-test` in `sprout-test/<id>`) that is still busy is
    /// in use by another container that joined it after us: it is left for the last user.
    ///
    /// With `--systemd-cgroup`: StopUnit (waiting for the job), ResetFailedUnit, then rmdir of
    /// the unit's directories that are left (hierarchies systemd does not manage).
    pub fn destroy(&self) -> Result<()> {
        self.backend().destroy(self)
    }

    /// Resource usage, shaped like runc's `events --stats` data.
    pub fn stats(&self) -> Result<Stats> {
        self.backend().stats(self)
    }

    /// Subscribe to OOM events of the container's memory cgroup (v1 `memory` hierarchy, or
    /// the cgroup2 leaf on pure v2). Errors when there is no memory controller.
    pub fn oom_events(&self) -> Result<OomEvents> {
        self.backend().oom_events(self)
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The container's directory in the v1 hierarchy of `controller` (e.g. "memory").
    pub fn v1_path(&self, controller: &str) -> Option<&Path> {
        self.v1_hier(controller).map(|h| h.dir.as_path())
    }

    /// Every v1 hierarchy the container lives in: (controller, its cgroup directory).
    pub fn v1_paths(&self) -> impl Iterator<Item = (&str, &Path)> {
        self.v1.iter().map(|h| (h.name.as_str(), h.dir.as_path()))
    }

    /// The container's cgroup2 directory (V2, or the tracking leaf on Hybrid).
    pub fn unified_path(&self) -> Option<&Path> {
        self.unified.as_ref().map(|h| h.dir.as_path())
    }

    /// Mount point of the cgroup2 hierarchy the container's unified directory is in.
    pub fn unified_mount(&self) -> Option<&Path> {
        self.unified.as_ref().map(|h| h.mount.as_path())
    }

    /// (the container's directory, the hierarchy's mount point) for a v1 controller
    /// ("memory", "name=systemd").
    pub fn v1_dir_and_mount(&self, controller: &str) -> Option<(&Path, &Path)> {
        self.v1_hier(controller)
            .map(|h| (h.dir.as_path(), h.mount.as_path()))
    }

    /// Directories `create` made (parents first); `destroy` removes exactly these.
    pub fn created(&self) -> &[PathBuf] {
        &self.created
    }

    /// Whether `create` made the container's cgroup2 directory itself (so nothing but this
    /// container is or was in it, and it has no limits until `apply`), rather than finding it.
    pub fn made_unified_leaf(&self) -> bool {
        self.unified_path()
            .is_some_and(|p| self.created.iter().any(|c| c == p))
    }

    pub(crate) fn v1_hier(&self, controller: &str) -> Option<&Hier> {
        self.v1.iter().find(|h| h.name == controller)
    }

    pub(crate) fn unified_hier(&self) -> Option<&Hier> {
        self.unified.as_ref()
    }

    /// The driver: systemd with `--systemd-cgroup`, else cgroupfs for the host's layout.
    fn backend(&self) -> &'static dyn Backend {
        if self.systemd.is_some() {
            &systemd::Driver
        } else {
            self.fs_backend()
        }
    }

    /// The cgroupfs driver for the host's layout (what the systemd driver delegates to).
    pub(crate) fn fs_backend(&self) -> &'static dyn Backend {
        match self.layout {
            Layout::V2 => &v2::Fs,
            Layout::V1 | Layout::Hybrid => &v1::Fs,
        }
    }

    /// The directory whose cgroup.procs lists the container's processes.
    pub(crate) fn procs_dir(&self) -> Option<&Path> {
        if let Some(h) = self.v1_hier("freezer") {
            return Some(&h.dir);
        }
        if let Some(u) = &self.unified {
            return Some(&u.dir);
        }
        self.v1.first().map(|h| h.dir.as_path())
    }
}
