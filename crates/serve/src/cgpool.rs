//! A pool of pre-created cgroups nested under the engine's own cgroup
//! (`<own>/<cgroup_name>/sb<N>`), reused instead of mkdir/rmdir per sandbox (SOCK §4).
//! Created, limited, frozen, killed and removed with `sprout-cgroups`' Manager; a sandbox
//! joins by writing "0" to pre-opened `cgroup.procs` fds (passed to the zygote by SCM_RIGHTS).

use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::locked::Locked;
use sprout_cgroups::{Layout, Manager};

/// The hierarchies a sandbox joins (the others stay the engine's).
const JOIN_V1: &[&str] = &["memory", "pids", "cpu", "cpuacct", "freezer"];

pub struct PoolCg {
    pub idx: usize,
    pub mgr: Manager,
    /// Write-only `cgroup.procs` of every hierarchy joined.
    pub procs: Vec<OwnedFd>,
    /// memory controller dir (for usage / oom counters).
    pub memory_dir: Option<PathBuf>,
    /// oom_kill count when handed out.
    pub oom_base: u64,
    /// Read-only `cgroup.procs` of the freezer (or unified) dir: process count on the hot path.
    procs_r: Option<std::fs::File>,
    /// Limits other than the pool's were applied (a zygote's): reset on give-back.
    custom: bool,
    /// Kept open: read at every start, freeze and give-back (pread, no open/close each time).
    usage_f: Option<std::fs::File>,
    /// `memory.oom_control` (v1) or `memory.events` (v2), kept open likewise.
    oom_f: Option<std::fs::File>,
}

pub struct CgPool {
    layout: Layout,
    base: String,
    resources: oci_spec::runtime::LinuxResources,
    free: Mutex<Vec<PoolCg>>,
    /// False once shutdown began: no cgroup is made after the record was read for cleanup
    /// (a request still running made one, and it was left behind, empty). Held for reading
    /// from the record line to the mkdir.
    open: std::sync::RwLock<bool>,
    /// Fewest free cgroups since the last [`CgPool::shrink`]: those were never needed.
    low_water: std::sync::atomic::AtomicUsize,
    next: Mutex<usize>,
    record: PathBuf,
    pub created: std::sync::atomic::AtomicUsize,
    /// CPU weight (v1 `cpu.shares` scale) of the pool's parent directory, set once when its
    /// first cgroup is made (`pool_cpu_shares`); None: left as the kernel made it.
    parent_shares: Option<u64>,
    parent_weighted: std::sync::atomic::AtomicBool,
}

fn open_procs(dir: &Path) -> std::io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join("cgroup.procs"))?;
    Ok(f.into())
}

pub fn resources(mem_mb: u64, pids: i64, cpu_milli: u64) -> oci_spec::runtime::LinuxResources {
    let mut v = serde_json::json!({
        "memory": {"limit": (mem_mb as i64) << 20},
        "pids": {"limit": pids},
    });
    if cpu_milli > 0 {
        v["cpu"] = serde_json::json!({"quota": (cpu_milli as i64) * 100, "period": 100000u64});
    }
    serde_json::from_value(v).expect("static resources shape")
}

impl CgPool {
    pub fn new(
        layout: Layout,
        base: &str,
        resources: oci_spec::runtime::LinuxResources,
        run_dir: &Path,
    ) -> CgPool {
        CgPool {
            layout,
            base: base.to_string(),
            resources,
            free: Mutex::new(Vec::new()),
            open: std::sync::RwLock::new(true),
            low_water: std::sync::atomic::AtomicUsize::new(0),
            next: Mutex::new(0),
            record: run_dir.join("cgroups"),
            created: Default::default(),
            parent_shares: None,
            parent_weighted: Default::default(),
        }
    }

    /// The CPU weight of `<own cgroup>/<cgroup_name>` (v1 `cpu.shares`; on v2 converted to
    /// `cpu.weight`), written when the first pool cgroup is made. All sandboxes sit below that
    /// one directory, so against the host's other tasks they weigh, together, what it says:
    /// the kernel's default (1024) is one task's worth for all of them.
    pub fn with_parent_shares(mut self, shares: Option<u64>) -> CgPool {
        self.parent_shares = shares.filter(|&s| s > 0);
        self
    }

    fn weigh_parent(&self, mgr: &Manager) {
        use std::sync::atomic::Ordering;
        let Some(shares) = self.parent_shares else {
            return;
        };
        if self.parent_weighted.swap(true, Ordering::SeqCst) {
            return;
        }
        let (file, value) = match mgr.v1_path("cpu") {
            Some(d) => (
                d.parent().map(|p| p.join("cpu.shares")),
                shares.clamp(2, 262_144),
            ),
            None => (
                mgr.unified_path()
                    .and_then(Path::parent)
                    .map(|p| p.join("cpu.weight")),
                (1 + (shares.clamp(2, 262_144) - 2) * 9999 / 262_142).clamp(1, 10_000),
            ),
        };
        let Some(file) = file else {
            return;
        };
        if let Err(e) = std::fs::write(&file, value.to_string()) {
            eprintln!("sprout-serve: {}: {e} (left as is)", file.display());
        }
    }

    pub fn free_len(&self) -> usize {
        self.free.locked().len()
    }

    fn manager(&self, idx: usize) -> Result<Manager, String> {
        Manager::with_layout(
            self.layout,
            Some(&format!("{}/sb{idx}", self.base)),
            &format!("sb{idx}"),
            false,
        )
        .map_err(|e| e.to_string())
    }

    /// [`Self::manager`] narrowed to the hierarchies a sandbox joins (v1: memory, pids, cpu,
    /// cpuacct, freezer; plus the unified leaf). A sandbox stays in the engine's cgroup of
    /// every other v1 hierarchy, so their directories would be pure cost: a v1 mkdir is
    /// ~0.1-0.3 ms of kernel CPU each (css allocation, populating the control files), cpuset's
    /// also rebuilds the scheduling domains. Narrowed through the manager's serialised form;
    /// the full manager when a joined hierarchy is not mounted at its usual place (e.g.
    /// "cpu,cpuacct" without the per-controller links: the full one knows the fallback).
    fn joined_manager(&self, idx: usize) -> Result<Manager, String> {
        let full = self.manager(idx)?;
        if self.layout == Layout::V2 {
            return Ok(full);
        }
        let narrowed = (|| {
            let mut v = serde_json::to_value(&full).ok()?;
            let hs = v.get_mut("v1")?.as_array_mut()?;
            hs.retain(|h| {
                h.get("name")
                    .and_then(|n| n.as_str())
                    .is_some_and(|n| JOIN_V1.contains(&n))
            });
            let all_mounted = hs.iter().all(|h| {
                h.get("mount")
                    .and_then(|m| m.as_str())
                    .is_some_and(|m| Path::new(m).is_dir())
            });
            if !all_mounted {
                return None;
            }
            serde_json::from_value::<Manager>(v).ok()
        })();
        Ok(narrowed.unwrap_or(full))
    }

    /// Append `idx` to the record of pool cgroups (what shutdown and `cleanup` remove).
    fn record(&self, idx: usize) -> Result<(), String> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.record)
            .map_err(|e| e.to_string())?;
        // One write(2) per line: `writeln!` on a File issues the number and the newline as
        // separate writes, and two threads creating cgroups at once interleaved them
        // ("130131\n\n"): both indexes were lost from the record, so shutdown and `cleanup`
        // never removed those cgroups nor killed their (frozen) sandboxes.
        f.write_all(format!("{idx}\n").as_bytes())
            .map_err(|e| e.to_string())
    }

    /// No cgroup is made from now on; waits for one being made to be recorded and created.
    pub fn close(&self) {
        *self.open.write().unwrap_or_else(|e| e.into_inner()) = false;
    }

    fn make(&self) -> Result<PoolCg, String> {
        let open = self.open.read().unwrap_or_else(|e| e.into_inner());
        if !*open {
            return Err("shutting down".into());
        }
        let idx = {
            let mut n = self.next.locked();
            *n += 1;
            *n
        };
        self.record(idx)?;
        let mut mgr = self.joined_manager(idx)?;
        mgr.create()
            .map_err(|e| format!("creating pool cgroup: {e}"))?;
        self.weigh_parent(&mgr);
        if let Err(e) = mgr.apply(&self.resources) {
            let _ = mgr.destroy();
            return Err(format!("limiting pool cgroup: {e}"));
        }
        let mut dirs: Vec<PathBuf> = JOIN_V1
            .iter()
            .filter_map(|c| mgr.v1_path(c).map(Path::to_path_buf))
            .collect();
        if let Some(u) = mgr.unified_path() {
            dirs.push(u.to_path_buf());
        }
        let mut procs = Vec::new();
        for d in &dirs {
            match open_procs(d) {
                Ok(fd) => procs.push(fd),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", d.display())),
            }
        }
        let memory_dir = mgr.v1_path("memory").map(Path::to_path_buf).or_else(|| {
            if self.layout == Layout::V2 {
                mgr.unified_path().map(Path::to_path_buf)
            } else {
                None
            }
        });
        let procs_r = mgr
            .v1_path("freezer")
            .or(mgr.unified_path())
            .and_then(|d| std::fs::File::open(d.join("cgroup.procs")).ok());
        let open_first = |names: &[&str]| {
            memory_dir.as_ref().and_then(|d| {
                names
                    .iter()
                    .find_map(|f| std::fs::File::open(d.join(f)).ok())
            })
        };
        let usage_f = open_first(&["memory.usage_in_bytes", "memory.current"]);
        let oom_f = open_first(&["memory.oom_control", "memory.events"]);
        self.created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(PoolCg {
            idx,
            mgr,
            procs,
            memory_dir,
            oom_base: 0,
            procs_r,
            custom: false,
            usage_f,
            oom_f,
        })
    }

    pub fn prealloc(&self, n: usize) -> Result<(), String> {
        for _ in 0..n {
            let c = self.make()?;
            self.free.locked().push(c);
        }
        Ok(())
    }

    /// An empty cgroup with the pool limits: a reused one, or a new one.
    pub fn get(&self) -> Result<PoolCg, String> {
        if !*self.open.read().unwrap_or_else(|e| e.into_inner()) {
            return Err("shutting down".into());
        }
        loop {
            let c = {
                let mut f = self.free.locked();
                let c = f.pop();
                self.low_water
                    .fetch_min(f.len(), std::sync::atomic::Ordering::Relaxed);
                c
            };
            let mut c = match c {
                Some(c) => c,
                None => self.make()?,
            };
            // Never hand out a cgroup with members or frozen: a new sandbox joining a frozen
            // v1 freezer cgroup freezes in the middle of its start. (Seen when a directory
            // of a previous engine with the same cgroup name still held its processes.)
            if (c.nprocs() > 0 || c.frozen()) && !c.clean(Duration::from_millis(500)) {
                eprintln!(
                    "sprout-serve: pool cgroup sb{} has processes it should not; not used",
                    c.idx
                );
                continue;
            }
            c.oom_base = c.oom_kills();
            return Ok(c);
        }
    }

    /// Other limits for `c` (a zygote's cgroup), until it is given back.
    pub fn set_limits(
        &self,
        c: &mut PoolCg,
        r: &oci_spec::runtime::LinuxResources,
    ) -> Result<(), String> {
        c.custom = true;
        c.mgr.apply(r).map_err(|e| e.to_string())
    }

    /// Kill what is left in `c`, wait until empty, give it back (or drop it if it won't empty).
    pub fn put(&self, mut c: PoolCg) {
        if !c.clean(Duration::from_secs(2)) {
            eprintln!(
                "sprout-serve: pool cgroup sb{} did not empty; not reused",
                c.idx
            );
            return;
        }
        if let Some(m) = &c.memory_dir {
            if self.layout != Layout::V2 {
                let _ = std::fs::write(m.join("memory.force_empty"), b"0");
            }
        }
        if c.custom {
            if c.mgr.apply(&self.resources).is_err() {
                return;
            }
            c.custom = false;
        }
        self.free.locked().push(c);
    }

    /// Remove the free cgroups that stayed unused since the last call (the fewest free ones
    /// seen), keeping at least `keep` free: the pool shrinks back after a burst, and a
    /// steady load (which takes from the free list all the time) keeps what it uses.
    pub fn shrink(&self, keep: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let gone: Vec<PoolCg> = {
            let mut f = self.free.locked();
            let unused = self.low_water.load(Relaxed).min(f.len());
            let n = unused
                .saturating_sub(keep)
                .min(f.len().saturating_sub(keep));
            // The oldest first (the list is used from its end).
            let gone = f.drain(..n).collect();
            self.low_water.store(f.len(), Relaxed);
            gone
        };
        for c in gone {
            let dirs = all_dirs(&c.mgr);
            drop(c);
            for d in dirs {
                rmdir_retry(&d);
            }
        }
    }

    /// Kill and remove what an engine with this config recorded (`cleanup`, the watchdog):
    /// the number of pool cgroups removed.
    pub fn clean_recorded(cfg: &crate::config::Config) -> Result<usize, String> {
        let layout = Layout::detect().map_err(|e| e.to_string())?;
        let pool = CgPool::new(layout, &cfg.cgroup_name, resources(1, 1, 0), &cfg.run_dir);
        Ok(pool.cleanup_previous())
    }

    /// Startup / shutdown: kill and remove the pool cgroups recorded in the run dir.
    pub fn cleanup_previous(&self) -> usize {
        let Ok(raw) = std::fs::read_to_string(&self.record) else {
            return 0;
        };
        let mut live: Vec<Manager> = Vec::new();
        for line in raw.lines() {
            let Ok(idx) = line.trim().parse::<usize>() else {
                continue;
            };
            let Ok(m) = self.manager(idx) else { continue };
            if all_dirs(&m).iter().any(|d| d.exists()) {
                live.push(m);
            }
        }
        // Kill everything first (frozen tasks die once thawed), then wait and remove.
        for m in &live {
            let _ = m.thaw();
            let _ = m.kill_all(libc::SIGKILL);
        }
        // rmdir of a v1 cgroup waits on the kernel (css offlining, RCU): a few ms each, ten
        // hierarchies per pool cgroup; spread over threads, it is latency, not CPU.
        let deadline = Instant::now() + Duration::from_secs(3);
        let chunk = live.len().div_ceil(16).max(1);
        std::thread::scope(|sc| {
            for part in live.chunks(chunk) {
                sc.spawn(move || {
                    for m in part {
                        // At least one kill round per cgroup, even past the deadline.
                        let mut first = true;
                        while first || Instant::now() < deadline {
                            first = false;
                            match m.pids() {
                                Ok(p) if !p.is_empty() => {
                                    // kill_all also signals the v1-only members and
                                    // thaws a v1 freezer (frozen tasks die only once thawed).
                                    let _ = m.kill_all(libc::SIGKILL);
                                    std::thread::sleep(Duration::from_millis(5));
                                }
                                _ => break,
                            }
                        }
                        for d in all_dirs(m) {
                            rmdir_retry(&d);
                        }
                    }
                });
            }
        });
        if let Ok(m) = Manager::with_layout(self.layout, Some(&self.base), "base", false) {
            for d in all_dirs(&m) {
                rmdir_retry(&d);
            }
        }
        let _ = std::fs::remove_file(&self.record);
        live.len()
    }
}

/// rmdir, retried while killed tasks finish leaving (EBUSY): up to 3 s, since tens of
/// sandboxes killed at once on a loaded host took more than the 0.5 s this used to allow
/// (the pool's parent directory then stayed behind after a shutdown).
fn rmdir_retry(d: &Path) {
    for _ in 0..600 {
        match std::fs::remove_dir(d) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => return,
        }
    }
}

fn all_dirs(m: &Manager) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = m.v1_paths().map(|(_, d)| d.to_path_buf()).collect();
    v.extend(m.unified_path().map(Path::to_path_buf));
    v.sort();
    v.dedup();
    v
}

impl PoolCg {
    fn frozen(&self) -> bool {
        !matches!(
            self.mgr.freezer_state(),
            Ok(sprout_cgroups::FreezerState::Thawed) | Err(_)
        )
    }

    /// Kill every member and thaw, until empty or `wait` passes. `Manager::kill_all` is the
    /// one kill (cgroup.kill, and on hybrid hosts every v1 member by pid with the v1 freezer
    /// thawed); repeated each round for a task that joins while it runs.
    fn clean(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            let pids = self.mgr.pids().unwrap_or_default();
            let frozen = self.frozen();
            if pids.is_empty() && !frozen {
                return true;
            }
            // kill_all also signals the v1-only members and thaws a v1 freezer; a v2 cgroup
            // left frozen (it takes cgroup.kill as it is) is thawed for its next use.
            let _ = self.mgr.kill_all(libc::SIGKILL);
            if frozen {
                let _ = self.mgr.thaw();
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn oom_kills(&self) -> u64 {
        let mut buf = [0u8; 512];
        let Some(s) = pread_str(self.oom_f.as_ref(), &mut buf) else {
            return 0;
        };
        s.lines()
            .find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|r| r.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    pub fn memory_usage(&self) -> u64 {
        let mut buf = [0u8; 32];
        pread_str(self.usage_f.as_ref(), &mut buf)
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Processes (not threads) in the cgroup: one pread of cgroup.procs.
    pub fn nprocs(&self) -> usize {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.procs_r else {
            return self.mgr.pids().map(|p| p.len()).unwrap_or(0);
        };
        let mut buf = [0u8; 256];
        match f.read_at(&mut buf, 0) {
            Ok(n) if n < buf.len() => buf[..n].iter().filter(|&&b| b == b'\n').count(),
            Ok(_) => 64,
            Err(_) => self.mgr.pids().map(|p| p.len()).unwrap_or(0),
        }
    }
}

/// One pread from offset 0 of a cgroup file kept open (cgroup files are generated on read).
fn pread_str<'a>(f: Option<&std::fs::File>, buf: &'a mut [u8]) -> Option<&'a str> {
    use std::os::unix::fs::FileExt;
    let n = f?.read_at(buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pool cgroups made by many threads at once are all in the record, and cleanup removes
    /// every one of them (a lost record line leaked the cgroup and its processes).
    #[test]
    fn concurrent_creation_records_every_cgroup() {
        // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let run = PathBuf::from(format!("/tmp/serve-test-poolrecord-{}", std::process::id()));
        std::fs::create_dir_all(&run).unwrap();
        let name = format!("sprout-serve-test-poolrecord-{}", std::process::id());
        let layout = Layout::detect().unwrap();
        let pool = CgPool::new(layout, &name, resources(64, 16, 0), &run);
        // Whatever happens below, the cgroups made and the run dir go (a failed assertion
        // left 30 pool cgroups in the VM).
        struct Leave<'a>(&'a CgPool, &'a Path);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.cleanup_previous();
                let _ = std::fs::remove_dir_all(self.1);
            }
        }
        let _leave = Leave(&pool, &run);
        // The record itself under contention first (the cgroups' mkdir leaves little overlap;
        // checked before any cgroup exists, so a failure leaves nothing behind).
        std::thread::scope(|s| {
            for t in 0..8 {
                let pool = &pool;
                s.spawn(move || {
                    for i in 0..500 {
                        pool.record(100_000 + t * 1000 + i).unwrap();
                    }
                });
            }
        });
        let raw = std::fs::read_to_string(run.join("cgroups")).unwrap();
        let all: Vec<usize> = raw
            .lines()
            .map(|l| {
                l.parse()
                    .unwrap_or_else(|_| panic!("torn record line {l:?}"))
            })
            .collect();
        assert_eq!(all.iter().filter(|&&i| i >= 100_000).count(), 4000);
        std::fs::write(
            run.join("cgroups"),
            all.iter()
                .filter(|&&i| i < 100_000)
                .map(|i| format!("{i}\n"))
                .collect::<String>(),
        )
        .unwrap();
        let made: Vec<PoolCg> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| (0..6).map(|_| pool.make().unwrap()).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let raw = std::fs::read_to_string(run.join("cgroups")).unwrap();
        let mut got: Vec<usize> = raw.lines().map(|l| l.parse().unwrap()).collect();
        got.sort();
        let mut want: Vec<usize> = made.iter().map(|c| c.idx).collect();
        want.sort();
        assert_eq!(got, want, "record:\n{raw}");
        let dirs: Vec<PathBuf> = made.iter().filter_map(|c| c.memory_dir.clone()).collect();
        assert_eq!(dirs.len(), 48);
        assert!(dirs.iter().all(|d| d.is_dir()));
        drop(made);
        assert_eq!(pool.cleanup_previous(), 48);
        assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?}");
        let _ = std::fs::remove_dir_all(&run);
    }
}
