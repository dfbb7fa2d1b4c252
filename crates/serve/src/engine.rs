//! The engine: handler cache (idle sandboxes, hot then frozen, LRU eviction within the memory
//! budget), start paths (hot / warm / zygote / cold), zygotes keyed by package set (import
//! cache), install cache, and the request path. Synchronous code on blocking-pool threads;
//! the HTTP layer (http.rs) is async.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cgpool::{self, CgPool, PoolCg};
use crate::config::{Config, HandlerConfig};
use crate::install::{self, InstallCache};
use crate::locked::Locked;
use crate::metrics::Metrics;
use crate::{proto, rootfs, spawn};

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
    pool: CgPool,
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
/// one line naming the bad name.
pub fn check_handler_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bad handler name '{}' (1-64 letters, digits, - and _)",
            n.escape_debug()
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
    pub fn start(cfg: Config) -> Result<Arc<Engine>, String> {
        let run = cfg.run_dir.clone();
        std::fs::create_dir_all(&run).map_err(|e| format!("{}: {e}", run.display()))?;
        // One engine per run dir.
        let pidf = run.join("engine.pid");
        if let Ok(old) = std::fs::read_to_string(&pidf) {
            if let Ok(p) = old.trim().parse::<i32>() {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                if p != std::process::id() as i32 && comm.trim().starts_with("sprout-serve") {
                    return Err(format!(
                        "another sprout-serve (pid {p}) uses {}",
                        run.display()
                    ));
                }
            }
        }
        std::fs::write(&pidf, std::process::id().to_string()).map_err(|e| e.to_string())?;
        // Held until we exit: a previous engine's watchdog, still cleaning up after it, is
        // done before we look at what it left (watchdog.rs).
        let run_lock = crate::watchdog::lock_run_dir(&run, true)
            .map_err(|e| format!("{}: {e}", run.join("engine.lock").display()))?;
        std::mem::forget(run_lock);
        // Before the reaper thread starts: it waits for any child, the compiler's included.
        let python_dir = cfg
            .python_dir
            .clone()
            .unwrap_or_else(crate::config::default_python_dir);
        let pylib = rootfs::prepare_pylib(&run, &python_dir, &cfg.python)
            .map_err(|e| format!("python dir: {e}"))?;
        crate::reaper::start();
        let layout = sprout_cgroups::Layout::detect().map_err(|e| e.to_string())?;
        let sb = &cfg.sandbox;
        let pool = CgPool::new(
            layout,
            &cfg.cgroup_name,
            cgpool::resources(sb.memory_mb, sb.pids, sb.cpu_milli),
            &run,
        )
        .with_parent_shares(match cfg.pool_cpu_shares {
            Some(s) => Some(s),
            None => Some(1024 * std::thread::available_parallelism().map_or(1, |n| n.get()) as u64),
        });
        let stale_cg = pool.cleanup_previous();
        let stale_mounts = rootfs::prepare_run_dir(&run).map_err(|e| format!("run dir: {e}"))?;
        if stale_cg + stale_mounts > 0 {
            eprintln!("sprout-serve: cleaned up after a previous instance: {stale_cg} cgroups, {stale_mounts} mounts");
        }
        let base = rootfs::build_base(&run, cfg.base_rootfs.as_deref(), &pylib)
            .map_err(|e| format!("base root: {e}"))?;
        let mp_dir = match &cfg.base_rootfs {
            Some(c) => c.join("packages"),
            None => base.join("packages"),
        };
        pool.prealloc(cfg.pool_prealloc.min(cfg.max_sandboxes))
            .map_err(|e| format!("cgroup pool: {e}"))?;
        let (seccomp, bpf_hex) = if sb.seccomp {
            let (p, _) =
                sprout_seccomp::prepare(&default_seccomp(), Some(&run.join("seccomp-cache")))
                    .map_err(|e| e.to_string())?;
            let hex: String = p.bpf_bytes().iter().map(|b| format!("{b:02x}")).collect();
            (Some(p), hex)
        } else {
            (None, String::new())
        };
        let logs = crate::logsink::LogSink::start(&cfg.sandbox_log, cfg.sandbox_log_bytes)
            .map_err(|e| format!("sandbox_log: {e}"))?;
        let null = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/dev/null")
            .map_err(|e| format!("/dev/null: {e}"))?;
        let (tx, rx) = mpsc::channel::<Job>();
        let installs = InstallCache::new(
            cfg.package_cache.clone(),
            cfg.pip.clone(),
            cfg.pip_args.clone(),
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
        // Cgroups first: the pool finds its directories through files in the run dir.
        self.pool.cleanup_previous();
        let _ = std::fs::remove_file(self.cfg.run_dir.join("engine.pid"));
        rootfs::teardown_run_dir(&self.cfg.run_dir);
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
        if let Err(e) = check_handler_name(name) {
            return Err(ApiError::new(400, "bad_request", e));
        }
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
            Ok(raw) => install::parse_requirements(&raw)
                .map_err(|e| ApiError::new(400, "bad_requirements", e))?,
            Err(_) => vec![],
        };
        let cfg: HandlerConfig = match std::fs::read_to_string(&ht) {
            Ok(raw) => toml::from_str(&raw).map_err(|e| {
                ApiError::new(400, "bad_handler_config", format!("handler.toml: {e}"))
            })?,
            Err(_) => HandlerConfig::default(),
        };
        let mut packages = Vec::new();
        for p in &pkgs {
            let d = self
                .installs
                .ensure(p)
                .map_err(|e| ApiError::new(400, "install_failed", e))?;
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

    // ------------------------------------------------------------------ request path

    pub fn run(&self, name: &str, event: &[u8]) -> Result<RunOk, ApiError> {
        let t0 = Instant::now();
        let failed = |e: ApiError| {
            self.metrics
                .request("none", e.status, t0.elapsed().as_secs_f64());
            e
        };
        let h = self.handler_info(name).map_err(failed)?;
        if self.panic_for.as_deref() == Some(name) {
            let _st = self.st.locked();
            panic!("SPROUT_SERVE_FAILPOINT: a request for {name:?} panics holding the state lock");
        }
        let timeout = Duration::from_millis(h.cfg.timeout_ms(&self.cfg));
        let deadline =
            Instant::now() + timeout.max(Duration::from_millis(self.cfg.start_timeout_ms));
        let (sb, path) = self.acquire(&h, deadline).map_err(failed)?;
        let mut req = Vec::with_capacity(event.len() + 10);
        req.extend_from_slice(b"{\"event\":");
        req.extend_from_slice(event);
        req.push(b'}');
        let t_acq = t0.elapsed();
        let r = self.call(sb, &req, timeout, h.cfg.reuse());
        if self.trace && path != "hot" {
            eprintln!(
                "sprout-serve: trace run {name} {path}: acquire {:?} call {:?}",
                t_acq,
                t0.elapsed() - t_acq
            );
        }
        let status = match &r {
            Ok(_) => 200,
            Err(e) => e.status,
        };
        self.metrics
            .request(path, status, t0.elapsed().as_secs_f64());
        r.map(|body| RunOk { body, path })
    }

    /// One request to `sb`: the handler's run and its whole reply within `timeout` from now
    /// (one deadline, however the reply trickles in), the reply at most `max_reply_bytes`.
    /// The reply is not parsed into a tree: its `result` is passed on as the bytes the
    /// sandbox sent (validated JSON), so the engine holds at most twice the cap per request.
    fn call(
        &self,
        sb: Sandbox,
        req: &[u8],
        timeout: Duration,
        reuse: bool,
    ) -> Result<Vec<u8>, ApiError> {
        let deadline = Instant::now() + timeout;
        let _ = sb
            .sock
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))));
        let res = match proto::send(&sb.sock, req, &[]) {
            Ok(()) => proto::recv_until(&sb.sock, deadline, self.cfg.max_reply_bytes),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(proto::RecvError::Timeout)
            }
            Err(e) => Err(proto::RecvError::Io(e)),
        };
        // Back to the cache, unless the handler asked for a fresh sandbox per request or
        // left processes behind (forks that outlive the request, a fork bomb that hit the
        // pids limit).
        let done = |sb: Sandbox| {
            if !reuse {
                self.discard(sb, "no_reuse");
            } else if sb.cg.as_ref().map_or(0, |c| c.nprocs()) > 1 {
                self.discard(sb, "leftover_processes");
            } else {
                self.release(sb);
            }
        };
        match res {
            Ok(reply) => {
                #[derive(serde::Deserialize)]
                struct Reply<'a> {
                    ok: Option<bool>,
                    #[serde(borrow)]
                    result: Option<&'a serde_json::value::RawValue>,
                    kind: Option<&'a str>,
                    error: Option<String>,
                    traceback: Option<Value>,
                }
                let v: Reply = match serde_json::from_slice(&reply) {
                    Ok(v) => v,
                    Err(_) => {
                        self.discard(sb, "protocol");
                        return Err(ApiError::new(
                            502,
                            "protocol",
                            "sandbox sent a malformed reply",
                        ));
                    }
                };
                if v.ok == Some(true) {
                    let body = v
                        .result
                        .map_or(&b"null"[..], |r| r.get().as_bytes())
                        .to_vec();
                    drop(reply);
                    let mut sb = sb;
                    if let Some(z) = sb.zyg.take() {
                        if self.cfg.zygote_learn_prewarm && !z.learned.swap(true, Ordering::SeqCst)
                        {
                            self.learn_prewarm(&z, &sb);
                        }
                    }
                    done(sb);
                    return Ok(body);
                }
                let kind = if v.kind == Some("result") {
                    "bad_result"
                } else {
                    "raised"
                };
                let mut e = ApiError::new(
                    500,
                    kind,
                    v.error.unwrap_or_else(|| "handler failed".to_string()),
                );
                if let Some(tb) = v.traceback {
                    e.extra = Some(json!({ "traceback": tb }));
                }
                done(sb);
                Err(e)
            }
            Err(proto::RecvError::Timeout) => {
                self.discard(sb, "timeout");
                Err(ApiError::new(
                    504,
                    "timeout",
                    format!(
                        "handler did not answer within {} ms; sandbox killed",
                        timeout.as_millis()
                    ),
                ))
            }
            Err(proto::RecvError::TooLarge(n)) => {
                self.discard(sb, "reply_too_large");
                Err(ApiError::new(
                    502,
                    "reply_too_large",
                    format!(
                        "handler's reply of {n} bytes is over max_reply_bytes ({}); sandbox killed",
                        self.cfg.max_reply_bytes
                    ),
                ))
            }
            Err(proto::RecvError::Io(err)) => {
                if self.trace {
                    eprintln!("sprout-serve: trace sandbox s{}: {err}", sb.id);
                }
                // Give the kernel a moment to account an OOM kill.
                let oom = |sb: &Sandbox| sb.cg.as_ref().is_some_and(|c| c.oom_kills() > c.oom_base);
                let mut is_oom = oom(&sb);
                if !is_oom {
                    std::thread::sleep(Duration::from_millis(2));
                    is_oom = oom(&sb);
                }
                if is_oom {
                    self.discard(sb, "oom");
                    Err(ApiError::new(
                        502,
                        "oom",
                        format!(
                            "sandbox killed: out of memory (limit {} MiB)",
                            self.cfg.sandbox.memory_mb
                        ),
                    ))
                } else {
                    self.discard(sb, "exited");
                    Err(ApiError::new(
                        502,
                        "exited",
                        "sandbox exited during the request",
                    ))
                }
            }
        }
    }

    fn acquire(
        &self,
        h: &HandlerInfo,
        deadline: Instant,
    ) -> Result<(Sandbox, &'static str), ApiError> {
        let budget = self.cfg.memory_budget_mb << 20;
        let mut st = self.st.locked();
        loop {
            // Idle sandboxes of an older version of this handler go.
            while let Some(i) = st
                .idle
                .iter()
                .position(|s| s.handler == h.name && s.version != h.version)
            {
                let sb = st.idle.swap_remove(i);
                self.forget(&mut st, &sb);
                self.to_janitor(sb);
            }
            // Hot first (most recently used), then warm.
            let pick = st
                .idle
                .iter()
                .enumerate()
                .filter(|(_, s)| s.handler == h.name)
                .max_by_key(|(_, s)| (!s.frozen, s.last_used))
                .map(|(i, _)| i);
            if let Some(i) = pick {
                let mut sb = st.idle.swap_remove(i);
                drop(st);
                if !sb.frozen {
                    return Ok((sb, "hot"));
                }
                let ok = sb.cg.as_ref().map(|c| c.mgr.thaw());
                if let Some(Ok(())) = ok {
                    sb.frozen = false;
                    return Ok((sb, "warm"));
                }
                self.discard(sb, "thaw_failed");
                st = self.st.locked();
                continue;
            }
            let per = st.live_per.get(&h.name).copied().unwrap_or(0);
            if per < self.cfg.max_per_handler {
                let est = 8 << 20;
                // Dying sandboxes still hold what a live one does (processes, mounts, a
                // cgroup): they count until the janitors are done with them.
                if st.live + st.dying >= self.cfg.max_sandboxes {
                    // LRU eviction among idle sandboxes (of any handler).
                    if self.evict_lru(&mut st, false) {
                        continue;
                    }
                } else if st.mem + st.dying_mem + self.zygote_mem() + est > budget
                    && self.evict_lru(&mut st, true)
                {
                    continue;
                }
                if st.live + st.dying < self.cfg.max_sandboxes {
                    st.live += 1;
                    *st.live_per.entry(h.name.clone()).or_default() += 1;
                    drop(st);
                    return match self.create(h) {
                        Ok((sb, path)) => {
                            let mut st = self.st.locked();
                            st.mem += sb.mem;
                            Ok((sb, path))
                        }
                        Err(e) => {
                            let mut st = self.st.locked();
                            st.live -= 1;
                            *st.live_per.entry(h.name.clone()).or_default() -= 1;
                            self.cv.notify_all();
                            Err(e)
                        }
                    };
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ApiError::new(
                    503,
                    "busy",
                    format!("no sandbox for '{}' became free in time", h.name),
                ));
            }
            st = self.cv.wait_timeout(st, deadline - now).unwrap().0;
        }
    }

    /// Memory held by the import cache: every ready zygote and its spares.
    fn zygote_mem(&self) -> u64 {
        self.zygotes
            .locked()
            .values()
            .map(|s| match s {
                ZSlot::Ready(z) => z.mem.load(Ordering::Relaxed),
                _ => 0,
            })
            .sum()
    }

    /// Evict the least recently used of the idle sandboxes and (with `zygotes`) the leaf
    /// zygotes: ready, not the root (empty package set), no child zygote ready or starting.
    /// One LRU over both caches, as they share the memory budget. Returns whether something
    /// was evicted. Lock order: state, then zygotes.
    fn evict_lru(&self, st: &mut State, zygotes: bool) -> bool {
        let sb = st
            .idle
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.last_used)
            .map(|(i, s)| (i, s.last_used));
        let mut zs = self.zygotes.locked();
        let leaf = if zygotes {
            let parents: std::collections::HashSet<&str> = zs
                .values()
                .filter_map(|s| match s {
                    ZSlot::Ready(z) => z.parent.as_deref(),
                    ZSlot::Starting(p) => p.as_deref(),
                    ZSlot::Failed(..) => None,
                })
                .collect();
            zs.values()
                .filter_map(|s| match s {
                    ZSlot::Ready(z) if !z.pkgs.is_empty() && !parents.contains(z.key.as_str()) => {
                        Some((z.key.clone(), *z.last_take.locked()))
                    }
                    _ => None,
                })
                .min_by_key(|(_, t)| *t)
        } else {
            None
        };
        match (sb, leaf) {
            (Some((i, ts)), l) if l.as_ref().is_none_or(|(_, tz)| ts <= *tz) => {
                drop(zs);
                let sb = st.idle.swap_remove(i);
                self.forget(st, &sb);
                self.metrics.evicted();
                self.to_janitor(sb);
                true
            }
            (_, Some((key, _))) => {
                if let Some(ZSlot::Ready(z)) = zs.remove(&key) {
                    drop(zs);
                    eprintln!(
                        "sprout-serve: evicting zygote [{key}] ({} KiB)",
                        z.mem.load(Ordering::Relaxed) >> 10
                    );
                    self.metrics.zygote_evicted();
                    let _ = self.janitor.locked().send(Job::DropZygote(z));
                }
                true
            }
            _ => false,
        }
    }

    /// `sb` leaves the cache for the janitors (the caller hands it to [`Self::to_janitor`]):
    /// from live to dying.
    fn forget(&self, st: &mut State, sb: &Sandbox) {
        st.live -= 1;
        if let Some(n) = st.live_per.get_mut(&sb.handler) {
            *n -= 1;
        }
        st.mem = st.mem.saturating_sub(sb.mem);
        st.dying += 1;
        st.dying_mem += sb.mem;
    }

    fn to_janitor(&self, sb: Sandbox) {
        let _ = self.janitor.locked().send(Job::Destroy(Box::new(sb)));
    }

    fn release(&self, mut sb: Sandbox) {
        sb.last_used = Instant::now();
        // A zygote stays as recently used as the handlers of its package set.
        if let Some(ZSlot::Ready(z)) = self.zygotes.locked().get(&sb.zkey) {
            *z.last_take.locked() = sb.last_used;
        }
        let mut st = self.st.locked();
        st.idle.push(sb);
        drop(st);
        self.cv.notify_all();
    }

    fn discard(&self, sb: Sandbox, why: &str) {
        self.metrics.killed(why);
        let mut st = self.st.locked();
        self.forget(&mut st, &sb);
        drop(st);
        self.cv.notify_all();
        self.to_janitor(sb);
    }

    fn destroy(&self, mut sb: Sandbox) {
        let mem = sb.mem;
        if let Some(cg) = sb.cg.take() {
            let _ = cg.mgr.kill_all(libc::SIGKILL);
            drop(sb.sock);
            self.pool.put(cg);
        }
        rootfs::remove_root(&sb.root);
        let mut st = self.st.locked();
        st.dying = st.dying.saturating_sub(1);
        st.dying_mem = st.dying_mem.saturating_sub(mem);
        drop(st);
        self.cv.notify_all();
    }

    fn housekeeping(&self) {
        let _hk = self.hk_lock.locked();
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        let freeze_after = Duration::from_millis(self.cfg.freeze_after_ms);
        let evict_after = Duration::from_millis(self.cfg.idle_evict_ms);
        let mut to_freeze = Vec::new();
        {
            let mut st = self.st.locked();
            let mut i = 0;
            while i < st.idle.len() {
                let s = &st.idle[i];
                if s.frozen && self.cfg.idle_evict_ms > 0 && s.last_used.elapsed() > evict_after {
                    let sb = st.idle.swap_remove(i);
                    self.forget(&mut st, &sb);
                    self.metrics.evicted();
                    self.to_janitor(sb);
                } else if !s.frozen && s.last_used.elapsed() >= freeze_after {
                    to_freeze.push(st.idle.swap_remove(i));
                } else {
                    i += 1;
                }
            }
        }
        self.replenish_spares();
        self.replenish_cold_spares();
        self.freeze(to_freeze);
        // Zygote memory is re-read every ~200 ms (a file read per zygote and spare).
        let tick = self.hk_tick.fetch_add(1, Ordering::Relaxed);
        if tick.is_multiple_of(10) {
            self.enforce_budget();
        }
        // Every ~2 s the pool gives back the free cgroups that were not needed since the last
        // look (each holds ~9 fds and a directory per hierarchy).
        if tick % 100 == 99 {
            let _ = self
                .janitor
                .locked()
                .send(Job::ShrinkPool(self.cfg.pool_prealloc));
        }
    }

    fn freeze(&self, to_freeze: Vec<Sandbox>) {
        if to_freeze.is_empty() {
            return;
        }
        let mut back = Vec::new();
        for mut sb in to_freeze {
            let r = sb.cg.as_ref().map(|c| c.mgr.freeze());
            match r {
                Some(Ok(())) => {
                    sb.frozen = true;
                    let m = sb.cg.as_ref().map_or(0, |c| c.memory_usage());
                    back.push((sb, m));
                }
                _ => self.discard(sb, "freeze_failed"),
            }
        }
        let mut st = self.st.locked();
        for (mut sb, m) in back {
            st.mem = st.mem.saturating_sub(sb.mem) + m;
            sb.mem = m;
            st.idle.push(sb);
        }
        drop(st);
        self.cv.notify_all();
    }

    // ------------------------------------------------------------------ sandbox creation

    fn unshare_flags(&self, h: &HandlerInfo) -> i32 {
        let mut f = spawn::CLONE_NEWPID | spawn::CLONE_NEWIPC | spawn::CLONE_NEWUTS;
        if h.cfg.mount_ns(&self.cfg) {
            f |= spawn::CLONE_NEWNS;
        }
        if h.cfg.network_ns(&self.cfg) {
            f |= spawn::CLONE_NEWNET;
        }
        f
    }

    fn setup_msg(&self, h: &HandlerInfo, flags: i32) -> Value {
        let mut env = self.base_env();
        env["SPROUT_HANDLER"] = json!(h.name);
        let mut paths: Vec<String> = vec!["/handler".into()];
        paths.extend(h.packages.iter().map(|(k, _)| format!("/packages/{k}")));
        json!({
            "op": "fork",
            "unshare": flags,
            "uid": self.cfg.sandbox.uid,
            "gid": self.cfg.sandbox.gid,
            "hostname": "sandbox",
            "paths": paths,
            "env": env,
            "module": "f",
            "function": "f",
            "trace": self.trace,
            "unshare_late": self.late_flags(flags),
        })
    }

    /// A sandbox's environment without its handler's name; zygotes run with it, so that a
    /// forked sandbox only adds SPROUT_HANDLER.
    fn base_env(&self) -> Value {
        json!({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp"})
    }

    fn zkey(pkgs: &[(String, PathBuf)]) -> String {
        pkgs.iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn create(&self, h: &HandlerInfo) -> Result<(Sandbox, &'static str), ApiError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let root = self.roots.join(format!("s{id}"));
        if let Err(e) = rootfs::make_root(
            &self.base,
            &self.mp_dir,
            &root,
            Some(&h.dir),
            &h.packages,
            self.cfg.sandbox.scratch_mb,
        ) {
            return Err(ApiError::new(500, "engine", format!("sandbox root: {e}")));
        }
        let t_root = t0.elapsed();
        let flags = self.unshare_flags(h);
        let setup = self.setup_msg(h, flags);
        // The sandbox's stdout/stderr: a pipe the engine drains and tags (never a host file).
        let logw = match self.logs.pipe(format!("{} s{id}", h.name)) {
            Ok(w) => w,
            Err(e) => {
                rootfs::remove_root(&root);
                return Err(ApiError::new(500, "engine", format!("log pipe: {e}")));
            }
        };
        let mut started: Option<(UnixStream, PoolCg, &'static str)> = None;
        let mut from_zygote = None;
        if self.cfg.zygotes {
            let key = Self::zkey(&h.packages);
            if let Some(z) = self.zygote_ready(&key, h) {
                if z.key == key && !z.learned.load(Ordering::Relaxed) {
                    from_zygote = Some(z.clone());
                }
                match self.take_spare(&z) {
                    Ok((sock, cg)) => {
                        // Hand the spare its root (dir fd), its stdout/stderr and handler.
                        let sent = open_dir_path(&root).and_then(|fd| {
                            proto::send(
                                &sock,
                                &serde_json::to_vec(&setup).unwrap(),
                                &[fd.as_raw_fd(), logw.as_raw_fd()],
                            )
                        });
                        match sent {
                            Ok(()) => started = Some((sock, cg, "zygote")),
                            Err(e) => {
                                eprintln!(
                                    "sprout-serve: spare of zygote [{}] is gone ({e})",
                                    z.key
                                );
                                let _ = cg.mgr.kill_all(libc::SIGKILL);
                                self.pool.put(cg);
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("sprout-serve: zygote [{}] failed ({e}); dropping it", z.key);
                        self.drop_zygote(&z);
                    }
                }
            }
        }
        if started.is_none() {
            from_zygote = None;
        }
        let (sock, cg, path) = match started {
            Some(s) => s,
            None => match self.start_cold(&root, flags, &setup, logw.as_raw_fd()) {
                Ok((sock, cg)) => (sock, cg, "cold"),
                Err(e) => {
                    rootfs::remove_root(&root);
                    return Err(e);
                }
            },
        };
        drop(logw);
        let t_spawn = t0.elapsed();
        let mut sb = Sandbox {
            id,
            handler: h.name.clone(),
            version: h.version.clone(),
            sock,
            cg: Some(cg),
            root: root.clone(),
            frozen: false,
            last_used: Instant::now(),
            mem: 0,
            zkey: Self::zkey(&h.packages),
            zyg: from_zygote,
        };
        let _ = sb
            .sock
            .set_read_timeout(Some(Duration::from_millis(self.cfg.start_timeout_ms)));
        match proto::recv_json(&sb.sock) {
            Ok(v) if v.get("ready") == Some(&Value::Bool(true)) => {
                if self.trace {
                    eprintln!(
                        "sprout-serve: trace sandbox s{id} (ms since fork): {}",
                        v.get("trace").unwrap_or(&Value::Null)
                    );
                }
            }
            Ok(v) => {
                let msg = v
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_string();
                self.destroy(sb);
                return Err(ApiError::new(
                    500,
                    "start_failed",
                    format!("handler '{}' failed to start: {msg}", h.name),
                ));
            }
            Err(e) => {
                let oom = sb.cg.as_ref().is_some_and(|c| c.oom_kills() > c.oom_base);
                if let Some(cg) = &sb.cg {
                    // What the sandbox was doing: a start should never time out.
                    let fz = cg
                        .mgr
                        .freezer_state()
                        .map(|f| format!("{f:?}"))
                        .unwrap_or_default();
                    for p in cg.mgr.pids().unwrap_or_default() {
                        let rd = |f: &str| {
                            std::fs::read_to_string(format!("/proc/{p}/{f}")).unwrap_or_default()
                        };
                        let status = rd("status");
                        let state = status.lines().find(|l| l.starts_with("State:"));
                        eprintln!(
                            "sprout-serve: s{id} ({path}) not ready ({e}): sb{} freezer {fz}, pid {p} {} wchan {} syscall {}",
                            cg.idx,
                            state.unwrap_or(""),
                            rd("wchan"),
                            rd("syscall").trim()
                        );
                    }
                }
                self.destroy(sb);
                let why = if oom {
                    "out of memory".to_string()
                } else {
                    e.to_string()
                };
                return Err(ApiError::new(
                    500,
                    "start_failed",
                    format!("handler '{}' failed to start: {why}", h.name),
                ));
            }
        }
        let t_ready = t0.elapsed();
        if flags & spawn::CLONE_NEWNS != 0 {
            // The sandbox unshared its mount namespace after chrooting: its copy holds its
            // root's mounts. Detach the host's copy (the table every new mount namespace
            // copies stays small; the sandbox's mounts go away with it).
            let _ = self.janitor.locked().send(Job::Detach(root.clone()));
        }
        sb.mem = sb.cg.as_ref().map_or(0, |c| c.memory_usage());
        self.metrics.started(path);
        if self.trace {
            eprintln!(
                "sprout-serve: trace start {path} s{id}: root {:?} spawn/assign {:?} ready {:?} total {:?}",
                t_root,
                t_spawn - t_root,
                t_ready - t_spawn,
                t0.elapsed()
            );
        }
        Ok((sb, path))
    }

    /// Plain cold start: a pool cgroup and a fresh python (spawn.rs).
    fn start_cold(
        &self,
        root: &Path,
        flags: i32,
        setup: &Value,
        logw: RawFd,
    ) -> Result<(UnixStream, PoolCg), ApiError> {
        *self.cold_last_take.locked() = Instant::now();
        let spare = self.cold_spares.locked().pop();
        if let Some((a, cg)) = spare {
            let late = self.late_flags(flags);
            let mut setup = setup.clone();
            if self.trace {
                // The cold init reports its marks relative to this (CLOCK_MONOTONIC).
                setup["t0"] = json!(monotonic_s());
            }
            let sent = spawn::assign_cold_spare(&a, root, late, logw)
                .and_then(|_| proto::send(&a, &serde_json::to_vec(&setup).unwrap(), &[]));
            match sent {
                Ok(()) => {
                    self.cold_spares_used.fetch_add(1, Ordering::Relaxed);
                    return Ok((a, cg));
                }
                Err(e) => {
                    eprintln!("sprout-serve: cold spare is gone ({e})");
                    drop(a);
                    self.pool.put(cg);
                }
            }
        }
        let cg = self
            .pool
            .get()
            .map_err(|e| ApiError::new(500, "engine", e))?;
        let (a, b) = match proto::pair() {
            Ok(p) => p,
            Err(e) => {
                self.pool.put(cg);
                return Err(ApiError::new(500, "engine", format!("socketpair: {e}")));
            }
        };
        let procs: Vec<RawFd> = cg.procs.iter().map(|f| f.as_raw_fd()).collect();
        let spec = spawn::ColdSpec {
            python: &self.cfg.python,
            root,
            procs: &procs,
            sock: b.as_raw_fd(),
            log_fd: logw,
            null_fd: self.null_fd.as_raw_fd(),
            unshare: flags,
            uid: self.cfg.sandbox.uid,
            gid: self.cfg.sandbox.gid,
            seccomp: self.seccomp.as_ref(),
        };
        if let Err(e) = spawn::spawn_cold(&spec) {
            self.pool.put(cg);
            return Err(ApiError::new(500, "engine", format!("fork: {e}")));
        }
        drop(b);
        let mut setup = setup.clone();
        if self.trace {
            setup["t0"] = json!(monotonic_s());
        }
        let _ = proto::send(&a, &serde_json::to_vec(&setup).unwrap(), &[]);
        Ok((a, cg))
    }

    /// Keep `zygote_spares` cold spares ready when zygotes are off (refilled once cold starts
    /// have been quiet for 10 ms, as zygote spares are).
    fn replenish_cold_spares(&self) {
        let want = self.cfg.zygote_spares;
        if self.cfg.zygotes || want == 0 {
            return;
        }
        if self.cold_last_take.locked().elapsed() < Duration::from_millis(10) {
            return;
        }
        while self.cold_spares.locked().len() < want {
            let Ok(cg) = self.pool.get() else { return };
            let Ok((a, b)) = proto::pair() else {
                self.pool.put(cg);
                return;
            };
            let procs: Vec<RawFd> = cg.procs.iter().map(|f| f.as_raw_fd()).collect();
            let spec = spawn::ColdSpec {
                python: &self.cfg.python,
                root: &self.roots,
                procs: &procs,
                sock: b.as_raw_fd(),
                // Its own stdout/stderr comes with the assignment.
                log_fd: -1,
                null_fd: self.null_fd.as_raw_fd(),
                unshare: self.early_flags(),
                uid: self.cfg.sandbox.uid,
                gid: self.cfg.sandbox.gid,
                seccomp: self.seccomp.as_ref(),
            };
            if let Err(e) = spawn::spawn_cold_spare(&spec) {
                eprintln!("sprout-serve: cold spare: fork: {e}");
                self.pool.put(cg);
                return;
            }
            drop(b);
            self.cold_spares.locked().push((a, cg));
        }
    }

    /// Namespaces a spare makes ahead of time. The mount namespace waits until the spare
    /// has chrooted into its root (so its copy holds the root's mounts, and the host's copy
    /// can be detached), the network namespace for the handler's choice.
    /// Namespaces a spare makes ahead of any request: pid/ipc/uts, and the network namespace
    /// when every sandbox gets one (`sandbox.network_ns`, the default; a handler cannot turn
    /// it off), so that its creation is off the request path too.
    fn early_flags(&self) -> i32 {
        let mut f = spawn::CLONE_NEWPID | spawn::CLONE_NEWIPC | spawn::CLONE_NEWUTS;
        if self.cfg.sandbox.network_ns {
            f |= spawn::CLONE_NEWNET;
        }
        f
    }

    /// Namespaces made when a spare is assigned a handler: what `flags` asks beyond the
    /// spare's early ones.
    fn late_flags(&self, flags: i32) -> i32 {
        flags & (spawn::CLONE_NEWNS | spawn::CLONE_NEWNET) & !self.early_flags()
    }

    fn take_spare(&self, z: &Zygote) -> std::io::Result<(UnixStream, PoolCg)> {
        *z.last_take.locked() = Instant::now();
        if let Some(s) = z.spares.locked().pop() {
            return Ok(s);
        }
        // None ready (a burst): fork `zygote_fork_batch` in one message, this request takes
        // one, the next requests the others. The zygote's per-message work (receive, decode,
        // reply: Python, and the copy-on-write faults it takes after each fork) is paid once
        // per batch. Under the control lock: requests that queued behind a batch find its
        // spares instead of forking batches of their own.
        let ctl = z.ctl.locked();
        if let Some(s) = z.spares.locked().pop() {
            return Ok(s);
        }
        // Forked for requests that are waiting: pre-warming (paying the copy-on-write faults
        // ahead of a request) would only add to their latency.
        // (At most 8: each spare's socket and cgroup fds ride on the one message. None left
        // over when spares are off.)
        let n = if self.cfg.zygote_spares == 0 {
            1
        } else {
            self.cfg.zygote_fork_batch.clamp(1, 8)
        };
        let mut v = self.fork_spares(z, &ctl, n, false)?;
        drop(ctl);
        let first = v.swap_remove(0);
        z.spares.locked().extend(v);
        Ok(first)
    }

    /// Fork a spare from `z`: it joins a pool cgroup, makes its namespaces, and waits for a
    /// handler. All of that (fork, the v1 cgroup migration that can cost an RCU grace period,
    /// unshare, the pid-namespace fork) stays off the request path.
    fn new_spare(&self, z: &Zygote, prewarm: bool) -> std::io::Result<(UnixStream, PoolCg)> {
        let ctl = z.ctl.locked();
        let mut v = self.fork_spares(z, &ctl, 1, prewarm)?;
        Ok(v.swap_remove(0))
    }

    /// Fork `n` (≥ 1) spares from `z` in one message (`ctl` is its locked control socket):
    /// each gets a socket and a pool cgroup. Returns at least one, or the error.
    fn fork_spares(
        &self,
        z: &Zygote,
        ctl: &UnixStream,
        n: usize,
        prewarm: bool,
    ) -> std::io::Result<Vec<(UnixStream, PoolCg)>> {
        let mut cgs = Vec::with_capacity(n);
        for _ in 0..n {
            match self.pool.get() {
                Ok(cg) => cgs.push(cg),
                Err(e) if cgs.is_empty() => return Err(std::io::Error::other(e)),
                Err(_) => break,
            }
        }
        let r = (|| {
            let mut socks = Vec::with_capacity(cgs.len());
            let mut fds = Vec::new();
            let mut nfds = Vec::new();
            let mut ends = Vec::new();
            for cg in &cgs {
                let (a, b) = proto::pair()?;
                fds.push(b.as_raw_fd());
                fds.extend(cg.procs.iter().map(|f| f.as_raw_fd()));
                nfds.push(1 + cg.procs.len());
                socks.push(a);
                ends.push(b);
            }
            let msg = json!({"op": "fork", "unshare": self.early_flags(), "trace": self.trace,
                             "prewarm": prewarm, "nfds": nfds});
            proto::send(ctl, &serde_json::to_vec(&msg).unwrap(), &fds)?;
            drop(ends);
            let v = proto::recv_json(ctl)?;
            // {"pids": [...]} (one per spare forked, in order), plus "error" if the zygote
            // could not fork them all.
            let forked = v
                .get("pids")
                .and_then(Value::as_array)
                .map_or(0, |p| p.len())
                .min(socks.len());
            if forked == 0 {
                return Err(std::io::Error::other(format!("zygote: {v}")));
            }
            z.forks.fetch_add(forked as u64, Ordering::Relaxed);
            socks.truncate(forked);
            Ok(socks)
        })();
        match r {
            Ok(socks) => {
                let mut out = Vec::with_capacity(socks.len());
                let mut cgs = cgs.into_iter();
                for (a, cg) in socks.into_iter().zip(cgs.by_ref()) {
                    out.push((a, cg));
                }
                for cg in cgs {
                    self.pool.put(cg);
                }
                Ok(out)
            }
            Err(e) => {
                for cg in cgs {
                    self.pool.put(cg);
                }
                Err(e)
            }
        }
    }

    /// `zygote_learn_prewarm`: after the first request of a sandbox forked from `z` (its
    /// exact package set), the pages it wrote that it still shared with `z` at the fork are
    /// what the next sandboxes of that set will copy on write on their request path (the
    /// reference counts and caches the handler's imports and first call touch: ~650 pages,
    /// ~4 ms, for a numpy + pandas handler). Those pages are read from the sandbox's page
    /// map (present, exclusively mapped, anonymous) and kept where `z` still has a page,
    /// coalesced into address ranges and sent to `z`: spares it forks ahead of time
    /// pre-fault them (`MADV_POPULATE_WRITE`, which skips what is not mapped) while they
    /// wait. Learned once per zygote; the first sandbox's memory is idle while it is read.
    fn learn_prewarm(&self, z: &Zygote, sb: &Sandbox) {
        let t0 = Instant::now();
        let pid = sb
            .cg
            .as_ref()
            .and_then(|c| c.mgr.pids().ok())
            .and_then(|p| p.first().copied());
        let Some(pid) = pid else {
            return;
        };
        let ranges = match hot_ranges(pid, z.pid) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("sprout-serve: zygote [{}]: learning pre-faults: {e}", z.key);
                return;
            }
        };
        let pages: u64 = ranges.iter().map(|(_, n)| n / 4096).sum();
        let msg = json!({"op": "hot", "ranges": ranges});
        let r = {
            let ctl = z.ctl.locked();
            proto::send(&ctl, &serde_json::to_vec(&msg).unwrap(), &[])
                .and_then(|_| proto::recv_json(&ctl))
        };
        match r {
            Ok(v) if v.get("ok") == Some(&Value::Bool(true)) => {
                z.hot_pages.store(pages, Ordering::Relaxed);
            }
            Ok(v) => eprintln!("sprout-serve: zygote [{}]: hot pages: {v}", z.key),
            Err(e) => eprintln!("sprout-serve: zygote [{}]: hot pages: {e}", z.key),
        }
        if self.trace {
            eprintln!(
                "sprout-serve: trace zygote [{}] learned {pages} pages in {} ranges from pid {pid} in {:?}",
                z.key,
                ranges.len(),
                t0.elapsed()
            );
        }
    }

    /// Refresh the zygotes' memory (their cgroup and their spares'), then evict LRU (idle
    /// sandboxes and leaf zygotes) while the accounted total is over the budget.
    fn enforce_budget(&self) {
        let zs: Vec<Arc<Zygote>> = self
            .zygotes
            .locked()
            .values()
            .filter_map(|s| match s {
                ZSlot::Ready(z) => Some(z.clone()),
                _ => None,
            })
            .collect();
        for z in &zs {
            let own = z.cg.locked().as_ref().map_or(0, |c| c.memory_usage());
            let spares: u64 = z
                .spares
                .locked()
                .iter()
                .map(|(_, c)| c.memory_usage())
                .sum();
            z.mem.store(own + spares, Ordering::Relaxed);
        }
        let budget = self.cfg.memory_budget_mb << 20;
        let mut st = self.st.locked();
        while st.mem + self.zygote_mem() > budget {
            if !self.evict_lru(&mut st, true) {
                break;
            }
        }
    }

    fn replenish_spares(&self) {
        let want = self.cfg.zygote_spares;
        if want == 0 {
            return;
        }
        let zs: Vec<Arc<Zygote>> = self
            .zygotes
            .locked()
            .values()
            .filter_map(|s| {
                if let ZSlot::Ready(z) = s {
                    Some(z.clone())
                } else {
                    None
                }
            })
            .collect();
        for z in zs {
            // Refill once the zygote has been quiet for a moment: a fork right next to a
            // sandbox that is importing its handler competes with it for the CPU.
            if z.last_take.locked().elapsed() < Duration::from_millis(10) {
                continue;
            }
            while z.spares.locked().len() < want {
                match self.new_spare(&z, true) {
                    Ok(s) => z.spares.locked().push(s),
                    Err(e) => {
                        eprintln!("sprout-serve: zygote [{}] failed ({e}); dropping it", z.key);
                        self.drop_zygote(&z);
                        break;
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------------ zygotes (import cache)

    /// The zygote to fork a sandbox of `h` from: the one for its package set when ready, else
    /// the ready zygote with the largest subset of its packages (the root zygote, with none,
    /// is a subset of every set): the sandbox then imports the rest itself. A missing zygote
    /// for the exact set is started in the background, forked from that same best subset
    /// (SOCK's zygote tree: it imports only the packages its parent lacks).
    fn zygote_ready(&self, key: &str, h: &HandlerInfo) -> Option<Arc<Zygote>> {
        let want: Vec<&str> = h.packages.iter().map(|(k, _)| k.as_str()).collect();
        let mut zs = self.zygotes.locked();
        if let Some(ZSlot::Ready(z)) = zs.get(key) {
            return Some(z.clone());
        }
        let best = Self::best_subset(&zs, &want);
        let start = match zs.get(key) {
            Some(ZSlot::Starting(_)) => false,
            Some(ZSlot::Failed(t, _)) if t.elapsed() < Duration::from_secs(30) => false,
            _ => {
                zs.values()
                    .filter(|s| matches!(s, ZSlot::Ready(_) | ZSlot::Starting(_)))
                    .count()
                    < self.cfg.max_zygotes
            }
        };
        if start {
            let parent = best.as_ref().map(|z| z.key.clone());
            zs.insert(key.to_string(), ZSlot::Starting(parent.clone()));
            let pkgs = h.packages.clone();
            let preload = h.cfg.preload.clone();
            if let Some(me) = self.this.get().and_then(|w| w.upgrade()) {
                std::thread::spawn(move || me.ensure_zygote(&pkgs, &preload, parent));
            }
        }
        best
    }

    /// The ready zygote whose package set is the largest subset of `want` (ties: the most
    /// recently used).
    fn best_subset(zs: &HashMap<String, ZSlot>, want: &[&str]) -> Option<Arc<Zygote>> {
        zs.values()
            .filter_map(|s| match s {
                ZSlot::Ready(z) if z.pkgs.iter().all(|p| want.contains(&p.as_str())) => Some(z),
                _ => None,
            })
            .max_by_key(|z| (z.pkgs.len(), *z.last_take.locked()))
            .cloned()
    }

    fn ensure_zygote(&self, pkgs: &[(String, PathBuf)], extra: &[String], parent: Option<String>) {
        let key = Self::zkey(pkgs);
        self.zygotes
            .locked()
            .insert(key.clone(), ZSlot::Starting(parent.clone()));
        let parent = parent.and_then(|p| match self.zygotes.locked().get(&p) {
            Some(ZSlot::Ready(z)) => Some(z.clone()),
            _ => None,
        });
        match self.start_zygote(&key, pkgs, extra, parent) {
            Ok(z) => {
                self.zygotes.locked().insert(key, ZSlot::Ready(Arc::new(z)));
            }
            Err(e) => {
                eprintln!("sprout-serve: zygote [{key}] failed: {e}");
                self.zygotes
                    .locked()
                    .insert(key, ZSlot::Failed(Instant::now(), e));
            }
        }
    }

    /// A zygote that failed: marked failed (not retried for 30 s) and torn down, unless it
    /// was evicted or replaced meanwhile.
    fn drop_zygote(&self, z: &Arc<Zygote>) {
        let mut zs = self.zygotes.locked();
        if !matches!(zs.get(&z.key), Some(ZSlot::Ready(x)) if Arc::ptr_eq(x, z)) {
            return;
        }
        zs.insert(z.key.clone(), ZSlot::Failed(Instant::now(), "died".into()));
        drop(zs);
        self.teardown_zygote(z);
    }

    /// Kill a zygote (already out of the map) and its spares; give back their cgroups.
    fn teardown_zygote(&self, z: &Zygote) {
        for (sock, cg) in std::mem::take(&mut *z.spares.locked()) {
            drop(sock);
            let _ = cg.mgr.kill_all(libc::SIGKILL);
            self.pool.put(cg);
        }
        if let Some(cg) = z.cg.locked().take() {
            let _ = cg.mgr.kill_all(libc::SIGKILL);
            self.pool.put(cg);
        }
        rootfs::remove_root(&z.root);
    }

    fn start_zygote(
        &self,
        key: &str,
        pkgs: &[(String, PathBuf)],
        extra: &[String],
        parent: Option<Arc<Zygote>>,
    ) -> Result<Zygote, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut cg = self.pool.get()?;
        // A zygote's cgroup also carries what its children are charged before they move to
        // their own (page tables, the first copy-on-write pages): it gets the zygote limit.
        let sb = &self.cfg.sandbox;
        let zres = cgpool::resources(
            self.cfg.zygote_memory_mb.max(sb.memory_mb),
            sb.pids.max(1024),
            0,
        );
        if let Err(e) = self.pool.set_limits(&mut cg, &zres) {
            self.pool.put(cg);
            return Err(format!("zygote cgroup limits: {e}"));
        }
        let root = self.roots.join(format!("z{id}"));
        if let Err(e) = rootfs::make_root(&self.base, &self.mp_dir, &root, None, pkgs, 1) {
            self.pool.put(cg);
            return Err(e.to_string());
        }
        let fail = |cg: PoolCg, e: String| {
            let _ = cg.mgr.kill_all(libc::SIGKILL);
            self.pool.put(cg);
            rootfs::remove_root(&root);
            e
        };
        // Forked from a parent: import only what it lacks. Exec'd: the root zygote's preload.
        let mut preload: Vec<String> = match &parent {
            None if pkgs.is_empty() => self.cfg.zygote_preload.clone(),
            _ => vec![],
        };
        for (k, d) in pkgs {
            if !parent.as_ref().is_some_and(|p| p.pkgs.contains(k)) {
                preload.extend(install::top_level_modules(d));
            }
        }
        preload.extend(extra.iter().cloned());
        let paths: Vec<String> = pkgs.iter().map(|(k, _)| format!("/packages/{k}")).collect();
        let (a, b) = proto::pair().map_err(|e| e.to_string())?;
        let rootfd = match open_dir_path(&root) {
            Ok(f) => f,
            Err(e) => return Err(fail(cg, e.to_string())),
        };
        let _ = a.set_read_timeout(Some(Duration::from_secs(120)));
        let r = if let Some(p) = &parent {
            // SOCK's zygote tree: the parent forks the child, which joins its own cgroup,
            // chroots into its root (the parent's packages + the new ones) and imports.
            let mut fds = vec![b.as_raw_fd(), rootfd.as_raw_fd()];
            fds.extend(cg.procs.iter().map(|f| f.as_raw_fd()));
            let msg = json!({"op": "zygote", "paths": paths, "preload": preload});
            let forked = {
                let ctl = p.ctl.locked();
                proto::send(&ctl, &serde_json::to_vec(&msg).unwrap(), &fds)
                    .and_then(|_| proto::recv_json(&ctl))
            };
            drop(b);
            match forked {
                Ok(v) if v.get("pid").is_some() => {
                    p.forks.fetch_add(1, Ordering::Relaxed);
                    proto::recv_json(&a)
                }
                Ok(v) => Err(std::io::Error::other(format!("parent zygote: {v}"))),
                Err(e) => Err(std::io::Error::other(format!(
                    "parent zygote [{}]: {e}",
                    p.key
                ))),
            }
        } else {
            let tag = if key.is_empty() {
                "zygote root".to_string()
            } else {
                format!("zygote {key}")
            };
            let logw = match self.logs.pipe(tag) {
                Ok(w) => w,
                Err(e) => return Err(fail(cg, format!("zygote log pipe: {e}"))),
            };
            if let Err(e) = spawn::spawn_zygote(
                &self.cfg.python,
                &self.cfg.zygote_script(),
                &b,
                logw.as_raw_fd(),
                self.null_fd.as_raw_fd(),
            ) {
                return Err(fail(cg, format!("spawn zygote: {e}")));
            }
            drop(b);
            let mut fds = vec![rootfd.as_raw_fd()];
            fds.extend(cg.procs.iter().map(|f| f.as_raw_fd()));
            let setup = json!({"paths": paths, "preload": preload, "seccomp": self.bpf_hex,
                               "text_ptes": self.cfg.zygote_text_ptes,
                               "env": self.base_env()});
            proto::send(&a, &serde_json::to_vec(&setup).unwrap(), &fds)
                .and_then(|_| proto::recv_json(&a))
        };
        drop(rootfd);
        let v = match r {
            Ok(v) if v.get("ready") == Some(&Value::Bool(true)) => v,
            Ok(v) => return Err(fail(cg, format!("zygote: {v}"))),
            Err(e) => return Err(fail(cg, format!("zygote did not start: {e}"))),
        };
        let _ = a.set_read_timeout(Some(Duration::from_secs(10)));
        let imported: Vec<String> = v["imported"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let mem = cg.memory_usage();
        let pid = v
            .get("pid")
            .and_then(Value::as_i64)
            .map_or(-1, |p| p as i32);
        Ok(Zygote {
            key: key.to_string(),
            pkgs: pkgs.iter().map(|(k, _)| k.clone()).collect(),
            parent: parent.as_ref().map(|p| p.key.clone()),
            ctl: Mutex::new(a),
            pid,
            cg: Mutex::new(Some(cg)),
            root,
            forks: AtomicU64::new(0),
            spares: Mutex::new(Vec::new()),
            last_take: Mutex::new(Instant::now()),
            imported,
            mem: AtomicU64::new(mem),
            hot_pages: AtomicU64::new(0),
            learned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    // ------------------------------------------------------------------ status

    pub fn status(&self) -> Value {
        let st = self.st.locked();
        let hot = st.idle.iter().filter(|s| !s.frozen).count();
        let warm = st.idle.iter().filter(|s| s.frozen).count();
        let busy = st.live - st.idle.len();
        let mut per: HashMap<String, Value> = HashMap::new();
        for (h, n) in &st.live_per {
            if *n == 0 {
                continue;
            }
            let idle: Vec<&Sandbox> = st.idle.iter().filter(|s| &s.handler == h).collect();
            per.insert(
                h.clone(),
                json!({
                    "live": n,
                    "queued": self.admission.waiting(h),
                    "hot": idle.iter().filter(|s| !s.frozen).count(),
                    "warm": idle.iter().filter(|s| s.frozen).count(),
                    "idle_memory_bytes": idle.iter().map(|s| s.mem).collect::<Vec<_>>(),
                }),
            );
        }
        let frozen_mem: Vec<u64> = st.idle.iter().filter(|s| s.frozen).map(|s| s.mem).collect();
        let mem = st.mem;
        drop(st);
        let zmem = self.zygote_mem();
        let zs = self.zygotes.locked();
        let zygotes: Vec<Value> = zs
            .iter()
            .map(|(k, s)| match s {
                ZSlot::Ready(z) => json!({"packages": k, "state": "ready", "pid": z.pid, "parent": z.parent,
                                          "forks": z.forks.load(Ordering::Relaxed), "hot_pages": z.hot_pages.load(Ordering::Relaxed), "spares": z.spares.locked().len(),
                                          "imported": z.imported, "memory_bytes": z.mem.load(Ordering::Relaxed),
                                          "idle_ms": z.last_take.locked().elapsed().as_millis() as u64}),
                ZSlot::Starting(p) => json!({"packages": k, "state": "starting", "parent": p}),
                ZSlot::Failed(_, e) => json!({"packages": k, "state": "failed", "error": e}),
            })
            .collect();
        drop(zs);
        let (n, bytes) = self.installs.stats();
        json!({
            "sandboxes": {"hot": hot, "warm": warm, "busy": busy, "total": hot + warm + busy},
            "handlers": per,
            "zygotes": zygotes,
            "memory": {"accounted_bytes": mem + zmem, "sandbox_bytes": mem, "zygote_bytes": zmem,
                       "budget_bytes": self.cfg.memory_budget_mb << 20,
                       "frozen_sandbox_bytes": frozen_mem},
            "cgroup_pool": {"free": self.pool.free_len(), "created": self.pool.created.load(Ordering::Relaxed)},
            "cold_spares": self.cold_spares.locked().len(),
            "cold_spares_used": self.cold_spares_used.load(Ordering::Relaxed),
            "install_cache": {"packages": n, "bytes": bytes, "dir": self.cfg.package_cache},
        })
    }

    pub fn gauges(&self) -> Vec<(&'static str, &'static str, f64)> {
        let st = self.st.locked();
        let hot = st.idle.iter().filter(|s| !s.frozen).count() as f64;
        let warm = st.idle.iter().filter(|s| s.frozen).count() as f64;
        let busy = (st.live - st.idle.len()) as f64;
        let mem = st.mem as f64;
        drop(st);
        let zmem = self.zygote_mem() as f64;
        let z = self
            .zygotes
            .locked()
            .values()
            .filter(|s| matches!(s, ZSlot::Ready(_)))
            .count() as f64;
        vec![
            ("sprout_serve_sandboxes", "{state=\"hot\"}", hot),
            ("sprout_serve_sandboxes", "{state=\"warm\"}", warm),
            ("sprout_serve_sandboxes", "{state=\"busy\"}", busy),
            ("sprout_serve_zygotes", "", z),
            ("sprout_serve_memory_accounted_bytes", "", mem + zmem),
            ("sprout_serve_zygote_memory_bytes", "", zmem),
            (
                "sprout_serve_cgroup_pool_free",
                "",
                self.pool.free_len() as f64,
            ),
        ]
    }

    #[allow(dead_code)]
    pub fn sandbox_ids(&self) -> Vec<u64> {
        self.st.locked().idle.iter().map(|s| s.id).collect()
    }
}

/// Pages of process `pid` (a sandbox after its first request) that are present, mapped only
/// by it and anonymous (what it copied on write, or allocated), in its private writable
/// mappings, where the zygote `zpid` it was forked from still has a page: as (address,
/// length) ranges of adjacent pages. From /proc/PID/pagemap (bit 63 present, 61 file or
/// shared anonymous, 56 exclusively mapped).
fn hot_ranges(pid: i32, zpid: i32) -> std::io::Result<Vec<(u64, u64)>> {
    use std::os::unix::fs::FileExt;
    const PAGE: u64 = 4096;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let pm = std::fs::File::open(format!("/proc/{pid}/pagemap"))?;
    let zpm = std::fs::File::open(format!("/proc/{zpid}/pagemap"))?;
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut buf = Vec::new();
    let mut zbuf = Vec::new();
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(perms)) = (it.next(), it.next()) else {
            continue;
        };
        let p = perms.as_bytes();
        if p.len() < 4 || p[0] != b'r' || p[1] != b'w' || p[3] != b'p' {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        let n = ((hi - lo) / PAGE) as usize;
        if n == 0 || n > (1 << 22) {
            continue;
        }
        buf.resize(n * 8, 0);
        zbuf.resize(n * 8, 0);
        let off = lo / PAGE * 8;
        let got = pm.read_at(&mut buf, off)? / 8;
        let zgot = zpm.read_at(&mut zbuf, off).unwrap_or(0) / 8;
        for i in 0..got.min(zgot) {
            let e = u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
            let ze = u64::from_le_bytes(zbuf[i * 8..i * 8 + 8].try_into().unwrap());
            let hot = e >> 63 & 1 == 1 && e >> 56 & 1 == 1 && e >> 61 & 1 == 0;
            if !hot || ze >> 63 & 1 == 0 {
                continue;
            }
            let a = lo + i as u64 * PAGE;
            match out.last_mut() {
                Some((s, l)) if *s + *l == a => *l += PAGE,
                _ => out.push((a, PAGE)),
            }
        }
    }
    Ok(out)
}
