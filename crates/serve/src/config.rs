//! Engine configuration (TOML). Every field has a default that works out of the box.

use serde::Deserialize;
use std::path::PathBuf;

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP listen address (keep it on loopback unless fronted by something).
    pub listen: String,
    /// Handler registry: one directory per handler (f.py, optional requirements.txt).
    pub registry: PathBuf,
    /// Install cache: one read-only directory per `name-version`.
    pub package_cache: PathBuf,
    /// Run dir: sandbox roots, the record of what to clean after a crash (removed by a clean
    /// shutdown).
    pub run_dir: PathBuf,
    /// Where the engine writes what sandboxes and zygotes print (stdout/stderr), each line
    /// tagged `[<handler> s<id>]` or `[zygote <packages>]`; appended to, never removed.
    pub sandbox_log: PathBuf,
    /// Most bytes of output the engine keeps per sandbox (the rest is read and dropped).
    pub sandbox_log_bytes: u64,
    /// Base root file system. Empty: quick-start (read-only binds of the host's /usr, /lib,
    /// /lib64, /bin and a minimal /etc). Otherwise a directory (e.g. built by `rootfs build`).
    pub base_rootfs: Option<PathBuf>,
    /// Python inside the sandbox root.
    pub python: String,
    /// Directory holding sprout_zygote.py (on the host).
    pub python_dir: Option<PathBuf>,
    /// Name of the cgroup (nested under the engine's own cgroup) that holds the pool.
    pub cgroup_name: String,
    /// Total memory the handler cache may hold (idle + busy sandboxes), MiB.
    pub memory_budget_mb: u64,
    /// Most sandboxes alive at once (cgroup pool size limit).
    pub max_sandboxes: usize,
    /// Cgroups created ahead of time at start.
    pub pool_prealloc: usize,
    /// CPU weight of the pool's parent cgroup (`<own>/<cgroup_name>`), v1 `cpu.shares` scale
    /// (v2: converted to `cpu.weight`): what all sandboxes and zygotes together weigh against
    /// the host's other tasks. Unset: 1024 per CPU (as many busy host processes as CPUs);
    /// 0: leave the kernel's default (1024, one task's worth for all of them).
    pub pool_cpu_shares: Option<u64>,
    /// Most concurrent sandboxes per handler; further requests queue.
    pub max_per_handler: usize,
    /// Idle sandboxes stay running (hot) this long, then are frozen (warm).
    pub freeze_after_ms: u64,
    /// Frozen sandboxes idle longer than this are evicted (0: only by LRU/budget).
    pub idle_evict_ms: u64,
    pub sandbox: SandboxLimits,
    /// Request timeout (handler run time), ms.
    pub timeout_ms: u64,
    /// Sandbox start timeout (until the handler is imported), ms.
    pub start_timeout_ms: u64,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Zygotes: fork new sandboxes from pre-imported python processes.
    pub zygotes: bool,
    /// Modules the root zygote (empty package set) pre-imports.
    pub zygote_preload: Vec<String>,
    /// Most zygotes (one per package set).
    pub max_zygotes: usize,
    /// Children each zygote keeps forked ahead of time (in a pool cgroup and their
    /// namespaces, waiting for a handler).
    pub zygote_spares: usize,
    /// Spares refilled ahead of time pre-fault (copy-on-write) the zygote pages that the
    /// first request of a sandbox of the same package set wrote, learned once per zygote
    /// from that sandbox's page map: those faults then happen while the spare waits, not
    /// on the request path.
    pub zygote_learn_prewarm: bool,
    /// Spares a zygote forks in one message when a request finds none ready (a burst): the
    /// request takes one, the next requests the others (1-8; 1 when `zygote_spares` is 0).
    pub zygote_fork_batch: usize,
    /// The root zygote gives its read-only file mappings (python's and its libraries' code)
    /// an anon_vma once, so that fork copies their page table entries instead of every
    /// sandbox faulting its code in again (see `_text_ptes` in sprout_zygote.py).
    pub zygote_text_ptes: bool,
    /// Memory limit of each zygote's cgroup, MiB (its imports plus what its children are
    /// charged before they join their own cgroup).
    pub zygote_memory_mb: u64,
    /// pip used to fill the install cache.
    pub pip: Vec<String>,
    /// Extra pip arguments (e.g. ["--no-index", "--find-links", "/wheels"]).
    pub pip_args: Vec<String>,
    /// pip timeout per package, seconds.
    pub pip_timeout_s: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxLimits {
    pub memory_mb: u64,
    pub pids: i64,
    /// CPU quota in milli-CPUs (1000 = one CPU); 0: unlimited.
    pub cpu_milli: u64,
    /// Scratch (/tmp tmpfs) size, MiB.
    pub scratch_mb: u64,
    pub uid: u32,
    pub gid: u32,
    /// New network namespace (only lo) for every sandbox; a handler overrides it with
    /// `network_ns = true|false` in its handler.toml.
    pub network_ns: bool,
    /// New mount namespace for every sandbox, with a private /proc of its own pid namespace
    /// (pid/ipc/uts are always new). Off by default, as SOCK's lean containers: a sandbox
    /// then has no /proc at all (its root is the engine's read-only tree, which has none
    /// mounted), and each new sandbox is spared an unshare(CLONE_NEWNS) plus a procfs mount
    /// (~0.2 ms of CPU). A handler asks for it with `mount_ns = true` in its handler.toml.
    pub mount_ns: bool,
    /// Load the default seccomp deny-list.
    pub seccomp: bool,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_mb: 128,
            pids: 64,
            cpu_milli: 1000,
            scratch_mb: 64,
            uid: 65534,
            gid: 65534,
            network_ns: false,
            mount_ns: false,
            seccomp: true,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".into(),
            registry: "/var/lib/sprout-serve/handlers".into(),
            package_cache: "/var/lib/sprout-serve/packages".into(),
            run_dir: "/run/sprout-serve".into(),
            sandbox_log: "/var/log/sprout-serve/sandboxes.log".into(),
            sandbox_log_bytes: 1 << 20,
            base_rootfs: None,
            python: "/usr/bin/python3".into(),
            python_dir: None,
            cgroup_name: "sprout-serve".into(),
            memory_budget_mb: 2048,
            max_sandboxes: 256,
            pool_prealloc: 8,
            pool_cpu_shares: None,
            max_per_handler: 8,
            freeze_after_ms: 1000,
            idle_evict_ms: 0,
            sandbox: SandboxLimits::default(),
            timeout_ms: 10_000,
            start_timeout_ms: 10_000,
            max_body_bytes: 1 << 20,
            zygotes: true,
            zygote_preload: vec![
                "json".into(),
                "ctypes".into(),
                "importlib".into(),
                "traceback".into(),
            ],
            max_zygotes: 16,
            zygote_spares: 2,
            zygote_learn_prewarm: true,
            zygote_fork_batch: 4,
            zygote_text_ptes: true,
            zygote_memory_mb: 1024,
            pip: vec!["python3".into(), "-m".into(), "pip".into()],
            pip_args: vec![],
            pip_timeout_s: 300,
        }
    }
}

impl Config {
    pub fn load(path: Option<&std::path::Path>) -> Result<Config, String> {
        let mut c = match path {
            None => Config::default(),
            Some(p) => {
                let raw =
                    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
                toml::from_str(&raw).map_err(|e| format!("{}: {e}", p.display()))?
            }
        };
        if c.python_dir.is_none() {
            c.python_dir = Some(default_python_dir());
        }
        if c.max_per_handler == 0 || c.max_sandboxes == 0 {
            return Err("max_per_handler and max_sandboxes must be > 0".into());
        }
        Ok(c)
    }

    pub fn zygote_script(&self) -> PathBuf {
        self.python_dir
            .clone()
            .unwrap_or_else(default_python_dir)
            .join("sprout_zygote.py")
    }
}

/// `<exe dir>/../share/sprout/python` when installed, else the source tree's python/.
pub fn default_python_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            let p = d.join("../share/sprout/python");
            if p.join("sprout_zygote.py").exists() {
                return p;
            }
        }
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python"))
}

/// Per-handler settings: `handler.toml` next to f.py (all optional).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandlerConfig {
    pub timeout_ms: Option<u64>,
    /// New network namespace (only lo): overrides `sandbox.network_ns`.
    pub network_ns: Option<bool>,
    /// New mount namespace with a private /proc: overrides `sandbox.mount_ns`.
    pub mount_ns: Option<bool>,
    /// Extra modules to pre-import in the zygote for this handler's package set.
    pub preload: Vec<String>,
}
