//! The engine: handler cache (idle sandboxes, hot then frozen, LRU eviction within the memory
//! budget), start paths (hot / warm / zygote / cold), zygotes keyed by package set (import
//! cache), install cache, and the request path. Synchronous code on blocking-pool threads;
//! the HTTP layer (http.rs) is async.
//!
//! One `impl Engine`, split by concern: this file holds the types, start-up and shutdown and
//! the handler look-up; `request` the request path (a sandbox for a request, the call);
//! `cache` the idle cache, eviction and housekeeping; `start` a new sandbox's start paths;
//! `zygote` the zygote tree and its spares; `status` /status and the gauges; `policy` the
//! pure choices (eviction order, which zygote serves a package set), unit-tested.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use sprout_cgroups::{PoolCgroup as PoolCg, ResidentPool};

use crate::config::{Config, HandlerConfig};
use crate::error::{Error, Kind};
use crate::install::{self, InstallCache};
use crate::locked::Locked;
use crate::metrics::Metrics;
use crate::rootfs;

mod cache;
mod place;
mod policy;
mod request;
mod start;
mod status;
mod zygote;

/// The v1 hierarchies a sandbox joins (the others stay the engine's).
const JOIN_V1: &[&str] = &["memory", "pids", "cpu", "cpuacct", "freezer"];

/// The sandbox cgroup pool (sprout-cgroups' [`ResidentPool`]): `<own cgroup>/<cgroup_name>/sb<N>`
/// in the hierarchies a sandbox joins, its record `<run_dir>/cgroups`.
fn new_pool(
    layout: sprout_cgroups::Layout,
    cfg: &Config,
    limits: oci_spec::runtime::LinuxResources,
) -> ResidentPool {
    ResidentPool::new(
        layout,
        &cfg.cgroup_name,
        limits,
        &cfg.run_dir.join("cgroups"),
    )
    .joining_v1(JOIN_V1)
}

/// Most processes and threads of a source build (pip, its build backend, a compiler's).
const BUILD_PIDS: i64 = 1024;

/// A source build's pool cgroup: given back (what is left in it killed, the pool's limits
/// written back) when dropped.
struct BuildCgroup<'a> {
    pool: &'a ResidentPool,
    cg: Option<sprout_cgroups::PoolCgroup>,
}

impl Drop for BuildCgroup<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.cg.take() {
            self.pool.put(c);
        }
    }
}

/// A sandbox's (or a zygote's) cgroup limits. `cpu_milli` 0 is written as no quota (-1),
/// so that a pool cgroup given back after a handler's own quota (handler.toml `cpu_milli`)
/// loses it.
pub fn pool_resources(mem_mb: u64, pids: i64, cpu_milli: u64) -> oci_spec::runtime::LinuxResources {
    let mut v = serde_json::json!({
        "memory": {"limit": (mem_mb as i64) << 20},
        "pids": {"limit": pids},
    });
    v["cpu"] = if cpu_milli > 0 {
        serde_json::json!({"quota": (cpu_milli as i64) * 100, "period": 100000u64})
    } else {
        serde_json::json!({"quota": -1})
    };
    serde_json::from_value(v).expect("static resources shape")
}

/// Kill and remove what an engine with this config recorded (`cleanup`, the watchdog): how
/// many recorded pool cgroups were there, and which are still there (kept in the record).
pub fn clean_recorded(cfg: &Config) -> crate::error::Result<sprout_cgroups::Cleaned> {
    let layout = sprout_cgroups::Layout::detect()?;
    Ok(new_pool(layout, cfg, pool_resources(1, 1, 0)).cleanup_previous())
}

#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub msg: String,
    pub extra: Option<Value>,
}

impl ApiError {
    pub fn new(status: u16, kind: &'static str, msg: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            msg: msg.into(),
            extra: None,
        }
    }
    pub fn body(&self) -> Vec<u8> {
        let mut v = json!({"error": self.msg, "kind": self.kind});
        if let Some(Value::Object(m)) = &self.extra {
            for (k, x) in m {
                v[k] = x.clone();
            }
        }
        serde_json::to_vec(&v).unwrap()
    }
}

/// A request's own fault, from the kind of the error: 400 with the `"kind"` a client reads
/// (`bad_request` for a handler name, `bad_json` for a body, `bad_requirements`,
/// `install_failed`); anything else is the engine's, 500 `engine`.
impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let (status, kind) = match e.kind() {
            Kind::InvalidName => (400, "bad_request"),
            Kind::InvalidEvent => (400, "bad_json"),
            Kind::InvalidRequirements => (400, "bad_requirements"),
            Kind::Install => (400, "install_failed"),
            _ => (500, "engine"),
        };
        ApiError::new(status, kind, e.to_string())
    }
}

pub struct RunOk {
    pub body: Vec<u8>,
    pub path: &'static str,
}

pub struct Sandbox {
    id: u64,
    handler: String,
    version: String,
    sock: UnixStream,
    cg: Option<PoolCg>,
    root: PathBuf,
    frozen: bool,
    last_used: Instant,
    mem: u64,
    /// Package-set key of its handler (the zygote it keeps in use).
    zkey: String,
    /// The zygote of exactly its package set it was forked from, until its first request
    /// succeeded (the sample that zygote's spares learn their pre-faulting from).
    zyg: Option<Arc<Zygote>>,
}

struct Zygote {
    key: String,
    /// Package keys (`name-version`), sorted.
    pkgs: Vec<String>,
    /// The zygote this one was forked from (None: exec'd, the root zygote).
    parent: Option<String>,
    ctl: Mutex<UnixStream>,
    pid: i32,
    cg: Mutex<Option<PoolCg>>,
    root: PathBuf,
    forks: AtomicU64,
    /// Forked, in their cgroup and namespaces, waiting for a handler.
    spares: Mutex<Vec<(UnixStream, PoolCg)>>,
    /// Last fork taken for a sandbox (or when it became ready): the LRU clock for eviction.
    last_take: Mutex<Instant>,
    imported: Vec<String>,
    /// Memory charged to its cgroup plus its spares' (refreshed by housekeeping).
    mem: AtomicU64,
    /// Pages its spares pre-fault (learned from the first request of one of its sandboxes;
    /// `zygote_learn_prewarm`), and whether that was tried.
    hot_pages: AtomicU64,
    learned: std::sync::atomic::AtomicBool,
    /// A thread is refilling its spares (one per zygote at most).
    refilling: std::sync::atomic::AtomicBool,
    /// Torn down: set under the `spares` lock, so a refill still running gives back what it
    /// forked instead of adding it to a zygote nobody looks at.
    gone: std::sync::atomic::AtomicBool,
}

/// One creation in progress (a sandbox, a zygote, a refill of spares), counted in `Engine::creating`
/// while it lives: shutdown waits for those that began before it.
struct Creating<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Creating<'a> {
    fn new(n: &'a std::sync::atomic::AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Creating(n)
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Job {
    Destroy(Box<Sandbox>),
    Detach(PathBuf),
    DropZygote(Arc<Zygote>),
    /// Remove free pool cgroups that went unused for a while, keeping this many.
    ShrinkPool(usize),
}

/// Janitor threads (destroying sandboxes and zygotes, detaching roots, shrinking the pool).
const JANITORS: usize = 4;

enum ZSlot {
    /// Being started, forked from the zygote with this key (None: exec'd).
    Starting(Option<String>),
    Ready(Arc<Zygote>),
    Failed(Instant, String),
}

#[derive(Default)]
struct State {
    idle: Vec<Sandbox>,
    live: usize,
    live_per: HashMap<String, usize>,
    mem: u64,
    /// Sandboxes handed to the janitors and not destroyed yet, and their memory: they still
    /// hold processes, mounts and a cgroup, so they count against `max_sandboxes` and the
    /// memory budget until they are gone.
    dying: usize,
    dying_mem: u64,
    /// Requests waiting for room for a new sandbox of a handler that has none: they may
    /// evict (on `Engine::cv`).
    want: usize,
    /// Per handler: requests waiting for one of its own sandboxes (all busy, no room for
    /// another without evicting a recently used one), and what they wait on: a sandbox of
    /// the handler coming back wakes one of them, not every waiting request.
    waiters: HashMap<String, (Arc<Condvar>, usize)>,
}

pub struct HandlerInfo {
    pub name: String,
    pub dir: PathBuf,
    pub version: String,
    pub packages: Vec<(String, PathBuf)>,
    pub cfg: HandlerConfig,
}

pub struct Engine {
    pub cfg: Config,
    /// Who runs now, who waits (per handler, bounded), who is turned away.
    pub admission: crate::admission::Admission,
    pool: ResidentPool,
    seccomp: Option<sprout_seccomp::Prepared>,
    bpf_hex: String,
    base: PathBuf,
    mp_dir: PathBuf,
    roots: PathBuf,
    /// Sandboxes' and zygotes' stdout/stderr: a pipe each, drained into `sandbox_log`.
    logs: Arc<crate::logsink::LogSink>,
    /// `/dev/null`: every sandbox's and zygote's stdin.
    null_fd: OwnedFd,
    installs: InstallCache,
    pub metrics: Metrics,
    st: Mutex<State>,
    cv: Condvar,
    zygotes: Mutex<HashMap<String, ZSlot>>,
    next_id: AtomicU64,
    janitor: Mutex<mpsc::Sender<Job>>,
    this: std::sync::OnceLock<std::sync::Weak<Engine>>,
    /// SPROUT_SERVE_TRACE=1: per-start phase timings on stderr.
    trace: bool,
    /// SPROUT_SERVE_FAILPOINT=panic:HANDLER (tests only): a request for HANDLER panics while
    /// it holds the engine's state lock, to show what a panic in one request does (a 500 for
    /// it; the engine and every other request go on).
    panic_for: Option<String>,
    stopping: std::sync::atomic::AtomicBool,
    /// Sandbox creations under way (`create`): shutdown waits for them, so that none mounts a
    /// root after the run dir's teardown.
    creating: std::sync::atomic::AtomicUsize,
    hk_tick: AtomicU64,
    /// Held for each housekeeping tick: shutdown waits for the tick in progress, so no freeze
    /// lands after its cleanup thawed and killed everything (a v1-frozen task does not die).
    hk_lock: Mutex<()>,
    /// Plain cold start without zygotes: processes forked ahead into a pool cgroup and new
    /// pid/ipc/uts namespaces, waiting for a root to exec python in (spawn.rs).
    cold_spares: Mutex<Vec<(UnixStream, PoolCg)>>,
    cold_last_take: Mutex<Instant>,
    cold_spares_used: AtomicU64,
}

/// The default seccomp profile: allow everything but a deny-list of syscalls a handler has
/// no business making (EPERM).
pub fn default_seccomp() -> oci_spec::runtime::LinuxSeccomp {
    let names = [
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "swapon",
        "swapoff",
        "reboot",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "bpf",
        "perf_event_open",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "keyctl",
        "add_key",
        "request_key",
        "open_by_handle_at",
        "name_to_handle_at",
        "setns",
        "unshare",
        "userfaultfd",
        "acct",
        "quotactl",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "syslog",
        "iopl",
        "ioperm",
        "fsopen",
        "fsmount",
        "fsconfig",
        "move_mount",
        "open_tree",
        "fspick",
        "mount_setattr",
        "vhangup",
        "lookup_dcookie",
        "uselib",
        "sethostname",
        "setdomainname",
        // io_uring: a large kernel attack surface of its own, and its operations (openat,
        // connect, ...) run without passing through this filter.
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
    ];
    serde_json::from_value(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": names.to_vec(), "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]
    }))
    .expect("static profile")
}

/// CLOCK_MONOTONIC in seconds (Python's time.monotonic()).
fn monotonic_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The one check of a handler name, for every way one comes in (`handler add`, `handler
/// remove`, `POST /run/<name>`): 1-64 ASCII letters, digits, `-` and `_`, so a name is always
/// one plain entry of the registry (no `/`, no `..`, not absolute, not hidden). The error is
/// one line naming the bad name, kind [`Kind::InvalidName`].
pub fn check_handler_name(n: &str) -> crate::error::Result<()> {
    let ok = !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            Kind::InvalidName,
            format!(
                "bad handler name '{}' (1-64 letters, digits, - and _)",
                n.escape_debug()
            ),
        ))
    }
}

fn mtime(p: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .map(|m| format!("{}.{}", m.mtime(), m.mtime_nsec()))
        .unwrap_or_default()
}

fn open_dir_path(p: &Path) -> std::io::Result<OwnedFd> {
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(p)?
        .into())
}

impl Engine {
    /// Put the source build jail `pid` (started, waiting to be placed) into a pool cgroup
    /// with the build's limits: `pip_build_memory_mb` of memory, [`BUILD_PIDS`] processes,
    /// no CPU quota. Given back when the returned guard is dropped.
    fn build_cgroup(&self, pid: i32) -> std::io::Result<Box<dyn Send + '_>> {
        let mut cg = self
            .pool
            .get()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let r = pool_resources(self.cfg.pip_build_memory_mb, BUILD_PIDS, 0);
        let placed = self
            .pool
            .set_limits(&mut cg, &r)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|()| cg.place(pid));
        let guard = BuildCgroup {
            pool: &self.pool,
            cg: Some(cg),
        };
        placed?;
        Ok(Box::new(guard))
    }

    pub fn start(cfg: Config) -> crate::error::Result<Arc<Engine>> {
        let run = cfg.run_dir.clone();
        std::fs::create_dir_all(&run).map_err(|e| Error::io(Kind::Io, run.display(), e))?;
        // One engine per run dir.
        let pidf = run.join("engine.pid");
        if let Ok(old) = std::fs::read_to_string(&pidf) {
            if let Ok(p) = old.trim().parse::<i32>() {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                if p != std::process::id() as i32 && comm.trim().starts_with("sprout-serve") {
                    return Err(Error::new(
                        Kind::InUse,
                        format!("another sprout-serve (pid {p}) uses {}", run.display()),
                    ));
                }
            }
        }
        std::fs::write(&pidf, std::process::id().to_string())?;
        // Held until we exit: a previous engine's watchdog, still cleaning up after it, is
        // done before we look at what it left (watchdog.rs).
        let run_lock = crate::watchdog::lock_run_dir(&run, true)
            .map_err(|e| Error::io(Kind::Io, run.join("engine.lock").display(), e))?;
        std::mem::forget(run_lock);
        // Before the reaper thread starts: it waits for any child, the compiler's included.
        let python_dir = cfg
            .python_dir
            .clone()
            .unwrap_or_else(crate::config::default_python_dir);
        let pylib = rootfs::prepare_pylib(&run, &python_dir, &cfg.python)
            .map_err(|e| Error::io(Kind::Io, "python dir", e))?;
        crate::reaper::start();
        let layout = sprout_cgroups::Layout::detect()?;
        let sb = &cfg.sandbox;
        let pool = new_pool(
            layout,
            &cfg,
            pool_resources(sb.memory_mb, sb.pids, sb.cpu_milli),
        )
        .with_parent_shares(match cfg.pool_cpu_shares {
            Some(s) => Some(s),
            None => Some(1024 * std::thread::available_parallelism().map_or(1, |n| n.get()) as u64),
        });
        let stale_cg = pool.cleanup_previous().found;
        let stale_mounts =
            rootfs::prepare_run_dir(&run).map_err(|e| Error::io(Kind::Io, "run dir", e))?;
        if stale_cg + stale_mounts > 0 {
            eprintln!("sprout-serve: cleaned up after a previous instance: {stale_cg} cgroups, {stale_mounts} mounts");
        }
        let base = rootfs::build_base(&run, cfg.base_rootfs.as_deref(), &pylib)
            .map_err(|e| Error::io(Kind::Io, "base root", e))?;
        let mp_dir = match &cfg.base_rootfs {
            Some(c) => c.join("packages"),
            None => base.join("packages"),
        };
        pool.prealloc(cfg.pool_prealloc.min(cfg.max_sandboxes))
            .map_err(|e| Error::from(e).context("cgroup pool"))?;
        let (seccomp, bpf_hex) = if sb.seccomp {
            let (p, _) =
                sprout_seccomp::prepare(&default_seccomp(), Some(&run.join("seccomp-cache")))?;
            let hex: String = p.bpf_bytes().iter().map(|b| format!("{b:02x}")).collect();
            (Some(p), hex)
        } else {
            (None, String::new())
        };
        let logs = crate::logsink::LogSink::start(&cfg.sandbox_log, cfg.sandbox_log_bytes)
            .map_err(|e| Error::io(Kind::Io, "sandbox_log", e))?;
        let null = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/dev/null")
            .map_err(|e| Error::io(Kind::Io, "/dev/null", e))?;
        let (tx, rx) = mpsc::channel::<Job>();
        let jail = cfg.pip_build_sdists.then(|| crate::buildjail::Jail {
            base: base.clone(),
            scratch: run.join("roots"),
            uid: sb.uid,
            gid: sb.gid,
            memory_mb: cfg.pip_build_memory_mb,
            cpu_s: cfg.pip_timeout_s.max(1),
            seccomp: sb.seccomp,
            own_net: cfg.pip_args.iter().any(|a| a == "--no-index"),
        });
        let installs = InstallCache::new(
            cfg.package_cache.clone(),
            cfg.pip.clone(),
            cfg.pip_args.clone(),
            jail,
            Duration::from_secs(cfg.pip_timeout_s),
        );
        let eng = Arc::new(Engine {
            admission: crate::admission::Admission::new(
                cfg.max_per_handler,
                cfg.max_queue_per_handler,
                cfg.max_sandboxes,
            ),
            pool,
            seccomp,
            bpf_hex,
            base,
            mp_dir,
            roots: run.join("roots"),
            logs,
            null_fd: null.into(),
            installs,
            metrics: Metrics::default(),
            st: Mutex::new(State::default()),
            cv: Condvar::new(),
            zygotes: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            janitor: Mutex::new(tx),
            this: std::sync::OnceLock::new(),
            trace: std::env::var_os("SPROUT_SERVE_TRACE").is_some(),
            panic_for: std::env::var("SPROUT_SERVE_FAILPOINT")
                .ok()
                .and_then(|v| v.strip_prefix("panic:").map(str::to_string)),
            stopping: Default::default(),
            creating: Default::default(),
            hk_tick: AtomicU64::new(0),
            hk_lock: Mutex::new(()),
            cold_spares: Mutex::new(Vec::new()),
            cold_last_take: Mutex::new(Instant::now()),
            cold_spares_used: AtomicU64::new(0),
            cfg,
        });
        let _ = eng.this.set(Arc::downgrade(&eng));
        // Several janitors: a destroy mostly waits (for the kill to land, a v1 rmdir, an RCU
        // grace period in umount), and under an eviction storm one thread fell hundreds of
        // sandboxes behind.
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..JANITORS {
            let e2 = eng.clone();
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("janitor{i}"))
                .spawn(move || loop {
                    let job = rx.locked().recv();
                    let Ok(job) = job else { return };
                    match job {
                        Job::Destroy(sb) => e2.destroy(*sb),
                        // umount2(MNT_DETACH) waits for an RCU grace period: not on the request path.
                        Job::Detach(p) => {
                            let _ = rootfs::umount_detach(&p);
                        }
                        Job::DropZygote(z) => e2.teardown_zygote(&z),
                        Job::ShrinkPool(keep) => e2.pool.shrink(keep),
                    }
                })
                .unwrap();
        }
        let e3 = eng.clone();
        std::thread::Builder::new()
            .name("housekeeping".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(20));
                e3.housekeeping();
            })
            .unwrap();
        // Zygote spares off the housekeeping thread: placing one in its cgroup (a v1 pid
        // write) can wait for an RCU grace period, and housekeeping (freezing, the memory
        // budget) must not wait with it. This thread only looks; each zygote's refill runs on
        // a thread of its own (Engine::replenish_spares).
        let e5 = eng.clone();
        std::thread::Builder::new()
            .name("spares".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(20));
                // A refill started past this point sees `stopping` itself (Engine::refill).
                if e5.stopping.load(Ordering::SeqCst) {
                    return;
                }
                e5.replenish_spares();
            })
            .unwrap();
        if eng.cfg.zygotes {
            let e4 = eng.clone();
            std::thread::spawn(move || e4.ensure_zygote(&[], &[], None));
        }
        Ok(eng)
    }

    /// Clean shutdown: kill every sandbox and zygote, remove cgroups and mounts.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _hk = self.hk_lock.locked();
        // Requests still running may start sandboxes: from here on none gets a new cgroup, so
        // every cgroup is in the record that the cleanup reads.
        self.pool.close();
        // A creation that began before `stopping` may be between its root mount and its
        // cgroup: let it finish or fail (it removes its own root then), briefly, before the
        // run dir is torn down and the process exits under it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.creating.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Cgroups first: the pool finds its directories through files in the run dir.
        let cleaned = self.pool.cleanup_previous();
        let _ = std::fs::remove_file(self.cfg.run_dir.join("engine.pid"));
        // The record of cgroups still busy outlives the run dir's teardown, for `cleanup`
        // and the next start (the pool warned which).
        let record = self.pool.record_path();
        let kept = (!cleaned.left.is_empty())
            .then(|| std::fs::read(record).ok())
            .flatten();
        rootfs::teardown_run_dir(&self.cfg.run_dir);
        if let Some(k) = kept {
            let _ =
                std::fs::create_dir_all(&self.cfg.run_dir).and_then(|()| std::fs::write(record, k));
        }
    }

    // ------------------------------------------------------------------ handlers

    /// `name` is a registered handler (a valid name with an f.py): one stat.
    pub fn is_handler(&self, name: &str) -> bool {
        check_handler_name(name).is_ok() && self.cfg.registry.join(name).join("f.py").is_file()
    }

    /// How long a request may wait for its turn: what it may wait for a sandbox in run().
    pub fn queue_wait(&self) -> Duration {
        Duration::from_millis(self.cfg.timeout_ms.max(self.cfg.start_timeout_ms))
    }

    pub fn handler_info(&self, name: &str) -> Result<HandlerInfo, ApiError> {
        check_handler_name(name)?;
        let dir = self.cfg.registry.join(name);
        let f = dir.join("f.py");
        if !f.is_file() {
            return Err(ApiError::new(
                404,
                "unknown_handler",
                format!("no handler '{name}'"),
            ));
        }
        let req = dir.join("requirements.txt");
        let ht = dir.join("handler.toml");
        let version = format!("{}/{}/{}", mtime(&f), mtime(&req), mtime(&ht));
        let pkgs = match std::fs::read_to_string(&req) {
            Ok(raw) => install::parse_requirements(&raw)?,
            Err(_) => vec![],
        };
        let cfg: HandlerConfig = match std::fs::read_to_string(&ht) {
            Ok(raw) => HandlerConfig::parse(&raw).map_err(|e| {
                ApiError::new(400, "bad_handler_config", format!("handler.toml: {e}"))
            })?,
            Err(_) => HandlerConfig::default(),
        };
        let mut packages = Vec::new();
        for p in &pkgs {
            let d = self.installs.ensure(p, &|pid| self.build_cgroup(pid))?;
            packages.push((p.key(), d));
        }
        Ok(HandlerInfo {
            name: name.to_string(),
            dir,
            version,
            packages,
            cfg,
        })
    }
}
