//! Engine configuration (TOML). Every field has a default that works out of the box.

use crate::error::{Error, Kind};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP listen address (keep it on loopback unless fronted by something).
    pub listen: String,
    /// Most client connections open at once; past it the engine stops accepting (new ones
    /// wait in the kernel's backlog) until one closes.
    pub max_connections: usize,
    /// A client must send a request's headers within this long of connecting or of its
    /// previous response (idle keep-alive), and its body within this long of the headers;
    /// otherwise the connection is closed. ms.
    pub header_timeout_ms: u64,
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
    /// Most requests of one handler waiting for one of its sandboxes (beyond
    /// `max_per_handler` running); the next get 503 `busy` at once. Waiting costs no thread:
    /// one slow handler cannot delay another's requests.
    pub max_queue_per_handler: usize,
    /// Idle sandboxes stay running (hot) this long, then are frozen (warm).
    pub freeze_after_ms: u64,
    /// Frozen sandboxes idle longer than this are evicted (0: only by LRU/budget).
    pub idle_evict_ms: u64,
    pub sandbox: SandboxLimits,
    /// Request timeout, ms: one absolute deadline for the handler's run and its whole reply
    /// (past it the sandbox is killed). A handler's handler.toml may only shorten it.
    pub timeout_ms: u64,
    /// Sandbox start timeout (until the handler is imported), ms.
    pub start_timeout_ms: u64,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Largest reply a handler may send, bytes (its JSON result). A longer one is not read:
    /// the sandbox is killed and the request answers 502 `reply_too_large`. The engine's
    /// memory per request is bounded by this, not by what a handler sends.
    pub max_reply_bytes: usize,
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
    /// The host uid and gid that root inside the zygotes' user namespace maps to. Zygotes
    /// import the packages handlers declare, i.e. code of the tenants' choosing: they run as
    /// root of a user namespace of their own (and pid 1 of a pid namespace owned by it), with
    /// only the capabilities forking a sandbox needs, which count there and not on the host;
    /// to the host they are this unprivileged user. Must be neither 0 nor the sandboxes'
    /// uid/gid (which the namespace maps to itself); pick one no other process uses.
    pub zygote_uid: u32,
    pub zygote_gid: u32,
    /// pip used to fill the install cache.
    pub pip: Vec<String>,
    /// Extra pip arguments (e.g. ["--no-index", "--find-links", "/wheels"]).
    pub pip_args: Vec<String>,
    /// pip timeout per package, seconds.
    pub pip_timeout_s: u64,
    /// Let pip build packages that have no wheel for this python (source distributions).
    /// Off by default: pip then installs wheels only (`--only-binary=:all:`), which runs
    /// none of a package's code, as root on the host. On, pip and the package's own build
    /// code (setup.py, its build backend, a compiler) run in a jail (buildjail.rs): the
    /// sandboxes' uid/gid without capabilities, the sandboxes' seccomp deny-list, a root of
    /// the sandboxes' base with a tmpfs /tmp, its own mount/pid/IPC/UTS namespaces (network
    /// too when `pip_args` has `--no-index`), `pip_build_memory_mb` and `pip_timeout_s`.
    pub pip_build_sdists: bool,
    /// A source build's address space per process and its /tmp, MiB.
    pub pip_build_memory_mb: u64,
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
    /// New network namespace (only lo, down) for every sandbox (the default): no sandbox can
    /// reach another's sockets (TCP, UDP, abstract unix), the engine's API or any host
    /// service. Spares make it ahead of their request. `false` gives sandboxes the host's
    /// network (SOCK's lean default); a handler may then still ask for one with
    /// `network_ns = true` in its handler.toml (it can never turn it off).
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
            network_ns: true,
            mount_ns: false,
            seccomp: true,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".into(),
            max_connections: 512,
            header_timeout_ms: 10_000,
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
            max_queue_per_handler: 64,
            freeze_after_ms: 1000,
            idle_evict_ms: 0,
            sandbox: SandboxLimits::default(),
            timeout_ms: 10_000,
            start_timeout_ms: 10_000,
            max_body_bytes: 1 << 20,
            max_reply_bytes: 6 << 20,
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
            zygote_uid: 65533,
            zygote_gid: 65533,
            pip: vec!["python3".into(), "-m".into(), "pip".into()],
            pip_args: vec![],
            pip_timeout_s: 300,
            pip_build_sdists: false,
            pip_build_memory_mb: 4096,
        }
    }
}

impl HandlerConfig {
    /// The request timeout: the handler's if shorter than the operator's.
    pub fn timeout_ms(&self, op: &Config) -> u64 {
        self.timeout_ms
            .map_or(op.timeout_ms, |t| t.min(op.timeout_ms))
    }
    /// A new network namespace: the operator's or the handler's asking for one.
    pub fn network_ns(&self, op: &Config) -> bool {
        op.sandbox.network_ns || self.network_ns == Some(true)
    }
    /// A new mount namespace: the operator's or the handler's asking for one.
    pub fn mount_ns(&self, op: &Config) -> bool {
        op.sandbox.mount_ns || self.mount_ns == Some(true)
    }
    pub fn reuse(&self) -> bool {
        self.reuse != Some(false)
    }
    /// A handler.toml's text, parsed and checked: one line naming the field on an error.
    pub fn parse(raw: &str) -> Result<HandlerConfig, String> {
        let h: HandlerConfig = toml::from_str(raw).map_err(|e| {
            // toml's own rendering spans lines (the source line, a caret): one line here,
            // with the line it points at, which names the key.
            let Some(span) = e.span() else {
                return e.message().to_string();
            };
            let start = raw[..span.start].rfind('\n').map_or(0, |i| i + 1);
            let end = raw[span.start..]
                .find('\n')
                .map_or(raw.len(), |i| span.start + i);
            let line = raw[..span.start].matches('\n').count() + 1;
            format!(
                "line {line} ({:?}): {}",
                raw[start..end].trim(),
                e.message()
            )
        })?;
        if h.memory_mb == Some(0) {
            return Err("memory_mb must be > 0".into());
        }
        if h.pids.is_some_and(|p| p < 1) {
            return Err("pids must be > 0".into());
        }
        if h.cpu_milli.is_some_and(|c| c < 10) {
            // 10 milli-CPUs: a CFS quota of 1 ms per 100 ms period, the kernel's least.
            return Err("cpu_milli must be at least 10 (1 % of a CPU)".into());
        }
        let mut bytes = 0;
        for (k, v) in &h.env {
            if k.is_empty() || k.contains(['=', '\0']) {
                return Err(format!("env: {k:?} is not a variable name"));
            }
            if v.contains('\0') {
                return Err(format!("env.{k}: a value cannot hold a NUL byte"));
            }
            bytes += k.len() + v.len() + 2;
        }
        if bytes > ENV_MAX_BYTES {
            return Err(format!("env: {bytes} bytes, more than {ENV_MAX_BYTES}"));
        }
        Ok(h)
    }
    /// The memory limit (MiB), pids limit and CPU quota (milli-CPUs) of this handler's
    /// sandboxes: the operator's, or the handler's where lower (an operator's `pids` below 1
    /// and `cpu_milli` 0 are no limit).
    pub fn limits(&self, op: &Config) -> (u64, i64, u64) {
        let mem = self
            .memory_mb
            .map_or(op.sandbox.memory_mb, |m| m.min(op.sandbox.memory_mb));
        let pids = match self.pids {
            Some(p) if op.sandbox.pids < 1 || p < op.sandbox.pids => p,
            _ => op.sandbox.pids,
        };
        let cpu = match self.cpu_milli {
            Some(c) if op.sandbox.cpu_milli == 0 || c < op.sandbox.cpu_milli => c,
            _ => op.sandbox.cpu_milli,
        };
        (mem, pids, cpu)
    }
}

impl Config {
    /// The config at `path` (defaults without one), checked. An error is of kind
    /// [`Kind::Config`] (with the errno where the file could not be read).
    pub fn load(path: Option<&std::path::Path>) -> crate::error::Result<Config> {
        let mut c = match path {
            None => Config::default(),
            Some(p) => {
                let raw = std::fs::read_to_string(p)
                    .map_err(|e| Error::io(Kind::Config, p.display(), e))?;
                toml::from_str(&raw)
                    .map_err(|e| Error::new(Kind::Config, format!("{}: {e}", p.display())))?
            }
        };
        if c.python_dir.is_none() {
            c.python_dir = Some(default_python_dir());
        }
        if c.max_per_handler == 0 || c.max_sandboxes == 0 || c.max_connections == 0 {
            return Err(Error::new(
                Kind::Config,
                "max_per_handler, max_sandboxes and max_connections must be > 0",
            ));
        }
        for (what, z, sb) in [
            ("zygote_uid", c.zygote_uid, c.sandbox.uid),
            ("zygote_gid", c.zygote_gid, c.sandbox.gid),
        ] {
            if z == 0 || z == sb {
                return Err(Error::new(
                    Kind::Config,
                    format!("{what} must be neither 0 nor the sandboxes' id ({sb})"),
                ));
            }
        }
        if c.header_timeout_ms == 0 {
            return Err(Error::new(Kind::Config, "header_timeout_ms must be > 0"));
        }
        if c.pip_build_sdists && c.pip_build_memory_mb < 64 {
            return Err(Error::new(
                Kind::Config,
                "pip_build_memory_mb must be at least 64 (a python with pip)",
            ));
        }
        if c.pip_build_sdists && (c.sandbox.uid == 0 || c.sandbox.gid == 0) {
            return Err(Error::new(
                Kind::Config,
                "pip_build_sdists: source builds run as sandbox.uid/gid, which must not be 0",
            ));
        }
        if c.max_reply_bytes == 0 || c.max_reply_bytes > crate::proto::MAX_REPLY {
            return Err(Error::new(
                Kind::Config,
                format!(
                    "max_reply_bytes must be between 1 and {}",
                    crate::proto::MAX_REPLY
                ),
            ));
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

/// Per-handler settings: `handler.toml` next to f.py (all optional). The handler's author
/// is a tenant: these may only tighten what the operator's config gives (a shorter timeout,
/// a namespace the operator did not ask for), never loosen it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandlerConfig {
    /// Shorter request timeout than the engine's `timeout_ms` (a longer one is ignored).
    pub timeout_ms: Option<u64>,
    /// `true`: a new network namespace (only lo) even where `sandbox.network_ns` is off.
    /// `false` cannot turn off the operator's `sandbox.network_ns = true`.
    pub network_ns: Option<bool>,
    /// `true`: a new mount namespace with a private /proc even where `sandbox.mount_ns` is
    /// off; `false` cannot turn off the operator's.
    pub mount_ns: Option<bool>,
    /// `false`: a fresh sandbox for every request (the one that served a request is
    /// destroyed after it), for handlers that must not share state between callers. By
    /// default a handler's sandboxes are reused: module globals and /tmp persist from one
    /// request to the next, whoever made it.
    pub reuse: Option<bool>,
    /// Extra modules to pre-import in the zygote for this handler's package set.
    pub preload: Vec<String>,
    /// A lower memory limit (MiB) than the operator's `sandbox.memory_mb` for this
    /// handler's sandboxes (a higher one is ignored). Set on the sandbox's pool cgroup before
    /// the handler's code is imported; the pool's limits come back when the cgroup is.
    pub memory_mb: Option<u64>,
    /// Fewer processes and threads than the operator's `sandbox.pids` (more are ignored).
    pub pids: Option<i64>,
    /// A smaller CPU quota (milli-CPUs, at least 10) than the operator's `sandbox.cpu_milli`
    /// (a larger one is ignored; with the operator's 0, no quota, it applies).
    pub cpu_milli: Option<u64>,
    /// Environment variables of this handler's sandboxes, over the engine's base set
    /// (`SPROUT_HANDLER` stays the engine's). At most [`ENV_MAX_BYTES`] in all.
    pub env: std::collections::BTreeMap<String, String>,
}

/// The most a handler.toml's `env` may hold, keys and values together (AWS Lambda allows 4 KB).
pub const ENV_MAX_BYTES: usize = 32 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_build_settings_are_checked_naming_the_field() {
        let dir = std::env::temp_dir().join(format!("serve-cfg-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |raw: &str| {
            let p = dir.join("c.toml");
            std::fs::write(&p, format!("python_dir = \"/\"\n{raw}")).unwrap();
            Config::load(Some(&p))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert!(load("pip_build_sdists = true\n").is_ok());
        let e = load("pip_build_sdists = true\npip_build_memory_mb = 8\n").unwrap_err();
        assert!(e.contains("pip_build_memory_mb must be at least 64"), "{e}");
        let e = load("pip_build_sdists = true\n[sandbox]\nuid = 0\n").unwrap_err();
        assert!(e.contains("sandbox.uid/gid"), "{e}");
        // Without source builds neither matters.
        assert!(load("pip_build_memory_mb = 8\n").is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn handler_config_only_tightens() {
        let mut op = Config {
            timeout_ms: 2000,
            ..Config::default()
        };
        op.sandbox.network_ns = true;
        let h: HandlerConfig = toml::from_str(
            "timeout_ms = 9223372036854775807\nnetwork_ns = false\nmount_ns = false\n",
        )
        .unwrap();
        assert_eq!(h.timeout_ms(&op), 2000);
        assert!(
            h.network_ns(&op),
            "a handler turned off the operator's network_ns"
        );
        assert!(!h.mount_ns(&op));
        let h: HandlerConfig = toml::from_str("timeout_ms = 500\nmount_ns = true\n").unwrap();
        assert_eq!(h.timeout_ms(&op), 500);
        assert!(h.mount_ns(&op));
        op.sandbox.network_ns = false;
        assert!(!HandlerConfig::default().network_ns(&op));
        assert!(HandlerConfig::default().reuse());
        let h: HandlerConfig = toml::from_str("reuse = false\n").unwrap();
        assert!(!h.reuse());
    }

    #[test]
    fn handler_limits_only_tighten_and_bad_ones_name_the_field() {
        let mut op = Config::default();
        op.sandbox.memory_mb = 128;
        op.sandbox.pids = 64;
        op.sandbox.cpu_milli = 1000;
        assert_eq!(HandlerConfig::default().limits(&op), (128, 64, 1000));
        let h = HandlerConfig::parse("memory_mb = 32\npids = 8\ncpu_milli = 100\n").unwrap();
        assert_eq!(h.limits(&op), (32, 8, 100));
        let h = HandlerConfig::parse("memory_mb = 4096\npids = 1000\ncpu_milli = 4000\n").unwrap();
        assert_eq!(
            h.limits(&op),
            (128, 64, 1000),
            "a handler loosened the operator's limits"
        );
        op.sandbox.pids = 0;
        op.sandbox.cpu_milli = 0;
        assert_eq!(h.limits(&op), (128, 1000, 4000));
        for (raw, field) in [
            ("memory_mb = 0\n", "memory_mb"),
            ("pids = -1\n", "pids"),
            ("memory_mb = \"lots\"\n", "memory_mb"),
            ("cpu_milli = 5\n", "cpu_milli"),
            ("[env]\n\"A=B\" = \"x\"\n", "env"),
            ("[env]\nA = \"x\\u0000\"\n", "env.A"),
            ("[env]\nA = 1\n", "A = 1"),
        ] {
            let e = HandlerConfig::parse(raw).unwrap_err();
            assert!(e.contains(field) && !e.contains('\n'), "{raw}: {e}");
        }
    }
}
