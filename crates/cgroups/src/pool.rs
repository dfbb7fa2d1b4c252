//! [`ResidentPool`]: live cgroups that one long-lived process keeps and reuses (sprout-serve's
//! sandbox pool), handed out as [`PoolCgroup`]s.
//!
//! An earlier rename-slot pool for the runtime (`sprout-pool-<n>` v1 directories renamed into
//! place) was measured and removed: create and delete together cost more than mkdir and rmdir
//! (bench/results/performance-rounds-2026.md, "Evaluated and not adopted").

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::fs;
use crate::{Error, Layout, Manager, Result};

/// Leaf names of a [`ResidentPool`]: `<base>/sb<N>`.
const RESIDENT_PREFIX: &str = "sb";

/// A pool of live cgroups that one long-lived process keeps and reuses (sprout-serve's
/// sandbox pool, SOCK §4): `<own cgroup>/<base>/sb<N>` in the v1 hierarchies it joins (or all
/// of them) and the cgroup2 leaf, on v1, hybrid and pure v2 hosts alike. Nothing is renamed:
/// a cgroup is made once with the pool's limits, handed out with its `cgroup.procs` fds open
/// (a child joins by writing "0" to them, no path lookup), emptied and taken back, and removed
/// when the pool [shrinks](ResidentPool::shrink) after a burst.
///
/// Every index made is appended to a record file first, so that a later process (a restart,
/// `cleanup`, a watchdog) can kill what is left in them and remove them
/// ([`ResidentPool::cleanup_previous`]) without touching any cgroup the pool did not make.
pub struct ResidentPool {
    layout: Layout,
    base: String,
    resources: oci_spec::runtime::LinuxResources,
    /// The v1 hierarchies a member joins (None: all); the others stay the caller's.
    join_v1: Option<&'static [&'static str]>,
    free: std::sync::Mutex<Vec<PoolCgroup>>,
    /// False once shutdown began: no cgroup is made after the record was read for cleanup
    /// (a request still running made one, and it was left behind, empty). Held for reading
    /// from the record line to the mkdir.
    open: std::sync::RwLock<bool>,
    /// Fewest free cgroups since the last [`ResidentPool::shrink`]: those were never needed.
    low_water: std::sync::atomic::AtomicUsize,
    next: std::sync::Mutex<usize>,
    record: PathBuf,
    /// Cgroups made so far.
    pub created: std::sync::atomic::AtomicUsize,
    /// CPU weight (v1 `cpu.shares` scale) of the pool's parent directory, set once when its
    /// first cgroup is made; None: left as the kernel made it.
    parent_shares: Option<u64>,
    parent_weighted: std::sync::atomic::AtomicBool,
}

/// One cgroup of a [`ResidentPool`], handed out by [`ResidentPool::get`] and given back with
/// [`ResidentPool::put`].
pub struct PoolCgroup {
    /// Its index (`sb<idx>`).
    pub idx: usize,
    pub mgr: Manager,
    /// Write-only `cgroup.procs` of every hierarchy joined (close-on-exec).
    pub procs: Vec<std::os::fd::OwnedFd>,
    /// memory controller dir (for usage / oom counters).
    pub memory_dir: Option<PathBuf>,
    /// oom_kill count when handed out.
    pub oom_base: u64,
    /// Read-only `cgroup.procs` of the cgroup2 leaf: the process count on the hot path (none
    /// on a v1-only host, where a kept v1 cgroup.procs serves a stale list).
    procs_r: Option<std::fs::File>,
    /// Limits other than the pool's were applied: reset on give-back.
    custom: bool,
    /// Kept open: read at every start, freeze and give-back (pread, no open/close each time).
    usage_f: Option<std::fs::File>,
    /// `memory.oom_control` (v1) or `memory.events` (v2), kept open likewise.
    oom_f: Option<std::fs::File>,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn pool_warn(msg: &str) {
    eprintln!("cgroup pool: {msg}");
}

impl ResidentPool {
    /// A pool under `<own cgroup>/<base>` whose cgroups get `resources`, recording the
    /// indexes it makes in the file `record`. Makes nothing yet.
    pub fn new(
        layout: Layout,
        base: &str,
        resources: oci_spec::runtime::LinuxResources,
        record: &Path,
    ) -> ResidentPool {
        ResidentPool {
            layout,
            base: base.to_string(),
            resources,
            join_v1: None,
            free: Default::default(),
            open: std::sync::RwLock::new(true),
            low_water: Default::default(),
            next: Default::default(),
            record: record.to_path_buf(),
            created: Default::default(),
            parent_shares: None,
            parent_weighted: Default::default(),
        }
    }

    /// Make the pool's cgroups only in these v1 hierarchies (plus the cgroup2 leaf): a
    /// member stays in its parent's cgroup of every other one, whose directories would be
    /// pure cost (kernel CPU per v1 mkdir: docs/performance.md, "cgroups: measured costs";
    /// cpuset's also rebuilds the scheduling domains). Ignored on pure v2, and whenever one of
    /// them is not mounted at its usual place (e.g. "cpu,cpuacct" without the per-controller
    /// links): then all of them.
    pub fn joining_v1(mut self, controllers: &'static [&'static str]) -> ResidentPool {
        self.join_v1 = Some(controllers);
        self
    }

    /// The CPU weight of `<own cgroup>/<base>` (v1 `cpu.shares`; on v2 converted to
    /// `cpu.weight`), written when the first pool cgroup is made. All members sit below that
    /// one directory, so against the host's other tasks they weigh, together, what it says:
    /// the kernel's default (1024) is one task's worth for all of them.
    pub fn with_parent_shares(mut self, shares: Option<u64>) -> ResidentPool {
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
                crate::resources::shares_to_weight(shares.clamp(2, 262_144)),
            ),
        };
        let Some(file) = file else {
            return;
        };
        if let Err(e) = std::fs::write(&file, value.to_string()) {
            pool_warn(&format!("{}: {e} (left as is)", file.display()));
        }
    }

    /// Free cgroups ready to hand out.
    pub fn free_len(&self) -> usize {
        lock(&self.free).len()
    }

    fn manager(&self, idx: usize) -> Result<Manager> {
        let name = format!("{RESIDENT_PREFIX}{idx}");
        Manager::with_layout(
            self.layout,
            Some(&format!("{}/{name}", self.base)),
            &name,
            false,
        )
    }

    /// [`Self::manager`] narrowed to the hierarchies a member joins ([`Self::joining_v1`]).
    fn joined_manager(&self, idx: usize) -> Result<Manager> {
        let mut m = self.manager(idx)?;
        let Some(keep) = self.join_v1 else {
            return Ok(m);
        };
        if m.layout == Layout::V2 {
            return Ok(m);
        }
        let narrowed: Vec<_> =
            m.v1.iter()
                .filter(|h| keep.contains(&h.name.as_str()))
                .cloned()
                .collect();
        if narrowed.iter().all(|h| h.mount.is_dir()) {
            m.v1 = narrowed;
        }
        Ok(m)
    }

    /// Append `idx` to the record of pool cgroups (what [`Self::cleanup_previous`] removes).
    fn record(&self, idx: usize) -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.record)
            .map_err(|e| fs::io_err(&self.record, e))?;
        // One write(2) per line: `writeln!` on a File issues the number and the newline as
        // separate writes, and two threads creating cgroups at once interleaved them
        // ("130131\n\n"): both indexes were lost from the record, so shutdown and cleanup
        // never removed those cgroups nor killed their (frozen) members.
        f.write_all(format!("{idx}\n").as_bytes())
            .map_err(|e| fs::io_err(&self.record, e))
    }

    /// No cgroup is made from now on; waits for one being made to be recorded and created.
    pub fn close(&self) {
        *self.open.write().unwrap_or_else(|e| e.into_inner()) = false;
    }

    fn make(&self) -> Result<PoolCgroup> {
        let open = self.open.read().unwrap_or_else(|e| e.into_inner());
        if !*open {
            return Err(Error::Invalid("pool closed: shutting down".into()));
        }
        let idx = {
            let mut n = lock(&self.next);
            *n += 1;
            *n
        };
        self.record(idx)?;
        let mut mgr = self.joined_manager(idx)?;
        mgr.create()
            .map_err(|e| Error::Invalid(format!("creating pool cgroup: {e}")))?;
        self.weigh_parent(&mgr);
        if let Err(e) = mgr.apply(&self.resources) {
            let _ = mgr.destroy();
            return Err(Error::Invalid(format!("limiting pool cgroup: {e}")));
        }
        // The joined hierarchies' cgroup.procs (all of them when the manager could not be
        // narrowed: a member still joins only those), and the cgroup2 leaf's.
        let mut dirs: Vec<&Path> = match self.join_v1 {
            Some(keep) => keep.iter().filter_map(|c| mgr.v1_path(c)).collect(),
            None => mgr.v1.iter().map(|h| h.dir.as_path()).collect(),
        };
        dirs.extend(mgr.unified_path());
        let mut procs = Vec::with_capacity(dirs.len());
        for d in dirs {
            let p = d.join("cgroup.procs");
            match std::fs::OpenOptions::new().write(true).open(&p) {
                Ok(f) => procs.push(f.into()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(fs::io_err(p, e)),
            }
        }
        let memory_dir = mgr.v1_path("memory").map(Path::to_path_buf).or_else(|| {
            if self.layout == Layout::V2 {
                mgr.unified_path().map(Path::to_path_buf)
            } else {
                None
            }
        });
        // The cgroup2 leaf's where there is one. Not a v1 cgroup.procs: read again from offset
        // 0 through the same open file it serves the pid list cached at the previous read
        // (kept for a second), so a member that joined since went unseen (on a v1-only host a
        // sandbox's leftover children, and the sandbox went back to the cache). There, each
        // count opens the file anew (`Manager::pids`).
        let procs_r = mgr
            .unified_path()
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
        Ok(PoolCgroup {
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

    /// Make `n` cgroups ahead and put them on the free list.
    pub fn prealloc(&self, n: usize) -> Result<()> {
        for _ in 0..n {
            let c = self.make()?;
            lock(&self.free).push(c);
        }
        Ok(())
    }

    /// An empty, thawed cgroup with the pool limits: a reused one, or a new one.
    pub fn get(&self) -> Result<PoolCgroup> {
        if !*self.open.read().unwrap_or_else(|e| e.into_inner()) {
            return Err(Error::Invalid("pool closed: shutting down".into()));
        }
        loop {
            let c = {
                let mut f = lock(&self.free);
                let c = f.pop();
                self.low_water
                    .fetch_min(f.len(), std::sync::atomic::Ordering::Relaxed);
                c
            };
            let mut c = match c {
                Some(c) => c,
                None => self.make()?,
            };
            // Never hand out a cgroup with members or frozen: a new member joining a frozen
            // v1 freezer cgroup freezes in the middle of its start. (Seen when a directory of
            // a previous process with the same base name still held its processes.)
            if (c.nprocs() > 0 || c.frozen()) && !c.clean(Duration::from_millis(500)) {
                pool_warn(&format!(
                    "{RESIDENT_PREFIX}{} has processes it should not; not used",
                    c.idx
                ));
                continue;
            }
            c.oom_base = c.oom_kills();
            return Ok(c);
        }
    }

    /// Other limits for `c` (e.g. a zygote's cgroup), until it is given back.
    pub fn set_limits(
        &self,
        c: &mut PoolCgroup,
        r: &oci_spec::runtime::LinuxResources,
    ) -> Result<()> {
        c.custom = true;
        c.mgr.apply(r)
    }

    /// Kill what is left in `c`, wait until it is empty, take it back (or drop it, left in
    /// the record, if it will not empty). Once the pool is closed: remove it instead.
    pub fn put(&self, mut c: PoolCgroup) {
        if !*self.open.read().unwrap_or_else(|e| e.into_inner()) {
            // Closed: the owner is shutting down and nothing takes a cgroup again. One given
            // back now (by a start that held it across the shutdown) is emptied and removed
            // here, as the shutdown's clean-up may have passed it already; then the pool's
            // parent, once empty (one try: other cgroups may remain).
            if c.clean(Duration::from_secs(2)) {
                remove(c);
            } else {
                pool_warn(&format!(
                    "{RESIDENT_PREFIX}{} did not empty; left at shutdown",
                    c.idx
                ));
            }
            self.remove_base(false);
            return;
        }
        if !c.clean(Duration::from_secs(2)) {
            pool_warn(&format!(
                "{RESIDENT_PREFIX}{} did not empty; not reused",
                c.idx
            ));
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
        lock(&self.free).push(c);
    }

    /// Remove the free cgroups that stayed unused since the last call (the fewest free ones
    /// seen), keeping at least `keep` free: the pool shrinks back after a burst, and a
    /// steady load (which takes from the free list all the time) keeps what it uses.
    pub fn shrink(&self, keep: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let gone: Vec<PoolCgroup> = {
            let mut f = lock(&self.free);
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
            remove(c);
        }
    }

    /// The pool's parent directory in every hierarchy; `patient`: while its last members
    /// leave ([`rmdir_patient`]), else one try.
    fn remove_base(&self, patient: bool) {
        if let Ok(m) = Manager::with_layout(self.layout, Some(&self.base), "base", false) {
            for d in all_dirs(&m) {
                if patient {
                    rmdir_patient(&d);
                } else {
                    let _ = std::fs::remove_dir(d);
                }
            }
        }
    }

    /// Kill and remove the pool cgroups in the record (a previous process's at start-up,
    /// this one's at shutdown), then the pool's parent directory and the record. Only
    /// recorded indexes are touched. A cgroup still there afterwards (a member that did not
    /// leave in time, on a loaded host) stays in the record, rewritten to name only those,
    /// so that the next cleanup (`sprout-serve cleanup`, the next start) takes it up again:
    /// a record removed over a cgroup left it on the host for good.
    pub fn cleanup_previous(&self) -> Cleaned {
        let Ok(raw) = std::fs::read_to_string(&self.record) else {
            return Cleaned::default();
        };
        let mut live: Vec<(usize, Manager)> = Vec::new();
        for line in raw.lines() {
            let Ok(idx) = line.trim().parse::<usize>() else {
                continue;
            };
            let Ok(m) = self.manager(idx) else { continue };
            if all_dirs(&m).iter().any(|d| d.exists()) {
                live.push((idx, m));
            }
        }
        // Kill everything first (frozen tasks die once thawed), then wait and remove.
        for (_, m) in &live {
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
                    for (_, m) in part {
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
                            rmdir_patient(&d);
                        }
                    }
                });
            }
        });
        let left: Vec<usize> = live
            .iter()
            .filter(|(_, m)| all_dirs(m).iter().any(|d| d.exists()))
            .map(|(i, _)| *i)
            .collect();
        if left.is_empty() {
            self.remove_base(true);
            let _ = std::fs::remove_file(&self.record);
        } else {
            // New cgroups are numbered past them: `sb<N>` still there is not made anew.
            let top = left.iter().copied().max().unwrap_or(0);
            {
                let mut n = lock(&self.next);
                *n = (*n).max(top);
            }
            let text: String = left.iter().map(|i| format!("{i}\n")).collect();
            let tmp = self.record.with_extension("left");
            if std::fs::write(&tmp, text)
                .and_then(|()| std::fs::rename(&tmp, &self.record))
                .is_err()
            {
                let _ = std::fs::remove_file(&tmp);
            }
            pool_warn(&format!(
                "{} pool cgroup(s) still busy after the clean-up, kept in {}: {}",
                left.len(),
                self.record.display(),
                left.iter()
                    .map(|i| format!("{RESIDENT_PREFIX}{i}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        Cleaned {
            found: live.len(),
            left,
        }
    }

    /// The record file (the indexes [`Self::cleanup_previous`] takes up).
    pub fn record_path(&self) -> &Path {
        &self.record
    }
}

/// What [`ResidentPool::cleanup_previous`] did.
#[derive(Debug, Default)]
pub struct Cleaned {
    /// Recorded cgroups that still existed.
    pub found: usize,
    /// The indexes of those still there afterwards (kept in the record).
    pub left: Vec<usize>,
}

/// rmdir, retried while killed tasks finish leaving (EBUSY): up to 3 s, since tens of
/// members killed at once on a loaded host took more than the 0.5 s this used to allow (the
/// pool's parent directory then stayed behind after a shutdown).
fn rmdir_patient(d: &Path) {
    for _ in 0..600 {
        match std::fs::remove_dir(d) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => return,
        }
    }
}

/// Remove an emptied pool cgroup's directories (its fds closed first).
fn remove(c: PoolCgroup) {
    let dirs = all_dirs(&c.mgr);
    drop(c);
    for d in dirs {
        rmdir_patient(&d);
    }
}

/// Every directory `m` names (each v1 hierarchy's and the cgroup2 leaf), once.
fn all_dirs(m: &Manager) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = m.v1_paths().map(|(_, d)| d.to_path_buf()).collect();
    v.extend(m.unified_path().map(Path::to_path_buf));
    v.sort();
    v.dedup();
    v
}

impl PoolCgroup {
    fn frozen(&self) -> bool {
        !matches!(
            self.mgr.freezer_state(),
            Ok(crate::FreezerState::Thawed) | Err(_)
        )
    }

    /// Kill every member and thaw, until empty or `wait` passes. [`Manager::kill_all`] is the
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

    /// The memory controller's oom_kill count (0 when unknown).
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

    /// Memory charged to the cgroup, in bytes (0 when unknown).
    pub fn memory_usage(&self) -> u64 {
        let mut buf = [0u8; 32];
        pread_str(self.usage_f.as_ref(), &mut buf)
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Move process `pid` (and its threads) into this cgroup, in every hierarchy joined: its
    /// number written to each `cgroup.procs` (a v1 write takes the global threadgroup
    /// rwsem, which after an idle spell waits for an RCU grace period first: not for the
    /// request path). What a caller that hands no cgroup file to the process uses.
    pub fn place(&self, pid: i32) -> std::io::Result<()> {
        let s = pid.to_string();
        for f in &self.procs {
            let n = rustix::io::write(f, s.as_bytes())?;
            if n != s.len() {
                return Err(std::io::Error::other("short write to cgroup.procs"));
            }
        }
        Ok(())
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
mod resident_tests {
    use super::*;

    fn limits() -> oci_spec::runtime::LinuxResources {
        serde_json::from_value(serde_json::json!({
            "memory": {"limit": 64i64 << 20},
            "pids": {"limit": 16},
        }))
        .unwrap()
    }

    /// Root on a host with a cgroup hierarchy, and a scratch record dir, or why not.
    fn setup(tag: &str) -> Option<(PathBuf, String, Layout)> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return None;
        }
        let Ok(layout) = Layout::detect() else {
            eprintln!("skipped: no cgroup hierarchy");
            return None;
        };
        let run = PathBuf::from(format!("/tmp/cg-test-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&run).unwrap();
        Some((
            run,
            format!("sprout-cg-test-{tag}-{}", std::process::id()),
            layout,
        ))
    }

    /// The tests' pool: `name`, the record in `run`, the v1 hierarchies serve joins.
    fn test_pool(run: &Path, name: &str, layout: Layout) -> ResidentPool {
        ResidentPool::new(layout, name, limits(), &run.join("cgroups"))
            .joining_v1(&["memory", "pids", "cpu", "cpuacct", "freezer"])
    }

    /// Whatever happens in a test, the cgroups made and the record dir go (a failed
    /// assertion once left 30 pool cgroups in the VM).
    struct Leave<'a>(&'a ResidentPool, &'a Path);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            self.0.cleanup_previous();
            let _ = std::fs::remove_dir_all(self.1);
        }
    }

    /// A recorded cgroup that cannot be removed yet (here a sub-cgroup the pool did not make
    /// keeps it busy) stays in the record, rewritten to name it alone, and the next cleanup
    /// removes it once it can: a record removed over it left it on the host for good.
    #[test]
    fn cleanup_keeps_a_busy_cgroup_in_the_record() {
        let Some((run, name, layout)) = setup("busy") else {
            return;
        };
        let pool = test_pool(&run, &name, layout);
        let _leave = Leave(&pool, &run);
        let other = pool.get().unwrap();
        let c = pool.get().unwrap();
        let idx = c.idx;
        let dir = all_dirs(&c.mgr).into_iter().next().unwrap();
        let sub = dir.join("held");
        std::fs::create_dir(&sub).unwrap();
        // Gone before `_leave`'s cleanup, whatever happens below.
        struct Rmdir(PathBuf);
        impl Drop for Rmdir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir(&self.0);
            }
        }
        let held = Rmdir(sub);
        drop((c, other));
        let r = pool.cleanup_previous();
        assert_eq!((r.found, r.left.as_slice()), (2, [idx].as_slice()));
        assert_eq!(
            std::fs::read_to_string(run.join("cgroups")).unwrap(),
            format!("{idx}\n")
        );
        assert!(dir.is_dir());
        // The next process's pool (a restart) finds it busy still, and numbers the cgroups
        // it makes past it: `sb<idx>` is not made (found, with what is left in it) again.
        let restarted = test_pool(&run, &name, layout);
        assert_eq!(restarted.cleanup_previous().left, [idx]);
        let next = restarted.get().unwrap();
        assert!(next.idx > idx, "sb{} made again", next.idx);
        drop((held, next));
        let r = restarted.cleanup_previous();
        assert_eq!((r.found, r.left.len()), (2, 0));
        assert!(!dir.exists(), "{}", dir.display());
        assert!(!run.join("cgroups").exists());
    }

    /// Pool cgroups made by many threads at once are all in the record, and cleanup removes
    /// every one of them (a lost record line leaked the cgroup and its processes).
    #[test]
    fn concurrent_creation_records_every_cgroup() {
        let Some((run, name, layout)) = setup("record") else {
            return;
        };
        let pool = test_pool(&run, &name, layout);
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
        std::fs::write(run.join("cgroups"), "").unwrap();
        let made: Vec<PoolCgroup> = std::thread::scope(|s| {
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
        assert_eq!(pool.cleanup_previous().found, 48);
        assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?}");
    }

    /// A cgroup given back with a live, frozen member comes out of `get` again empty and
    /// thawed, with the pool's limits (a zygote's were set on it); a burst's extra cgroups go
    /// at `shrink`, down to `keep`.
    #[test]
    fn put_kills_get_reuses_shrink_removes() {
        let Some((run, name, layout)) = setup("reuse") else {
            return;
        };
        let pool = test_pool(&run, &name, layout);
        let _leave = Leave(&pool, &run);
        let mut c = pool.get().unwrap();
        assert!(!c.procs.is_empty());
        let idx = c.idx;
        let pids_max = |c: &PoolCgroup| {
            let d = c
                .mgr
                .v1_path("pids")
                .or(c.mgr.unified_path())
                .unwrap()
                .to_path_buf();
            std::fs::read_to_string(d.join("pids.max")).unwrap()
        };
        assert_eq!(pids_max(&c).trim(), "16");
        let other: oci_spec::runtime::LinuxResources =
            serde_json::from_value(serde_json::json!({"pids": {"limit": 99}})).unwrap();
        pool.set_limits(&mut c, &other).unwrap();
        assert_eq!(pids_max(&c).trim(), "99");
        // A member that joins through the pre-opened fds, then is frozen.
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        c.place(child.id() as i32).unwrap();
        assert_eq!(c.nprocs(), 1);
        c.mgr.freeze().unwrap();
        // Reaped as soon as it dies (whatever a cgroup shows of a zombie).
        let mut child = child;
        let waiter = std::thread::spawn(move || child.wait().unwrap());
        pool.put(c);
        let st = waiter.join().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        assert_eq!(pool.free_len(), 1);
        let c = pool.get().unwrap();
        assert_eq!(c.idx, idx, "the free cgroup is reused");
        assert_eq!(c.nprocs(), 0);
        assert!(!c.frozen());
        assert_eq!(pids_max(&c).trim(), "16", "the pool's limits are back");
        // A burst: three more, all given back; shrink keeps 1 (the low-water mark is 0 only
        // after a shrink call has reset it).
        let more: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
        let dirs: Vec<PathBuf> = more.iter().flat_map(|c| all_dirs(&c.mgr)).collect();
        pool.put(c);
        for c in more {
            pool.put(c);
        }
        assert_eq!(pool.free_len(), 4);
        // The first shrink after a burst removes nothing (all four were taken since the
        // mark was last set); the next, with none taken meanwhile, all but `keep`.
        pool.shrink(1);
        assert_eq!(pool.free_len(), 4);
        assert!(dirs.iter().all(|d| d.exists()));
        pool.shrink(1);
        assert_eq!(pool.free_len(), 1);
        let gone = dirs.iter().filter(|d| !d.exists()).count();
        assert!(gone > 0, "shrink removed no directory: {dirs:?}");
        assert!(pool.cleanup_previous().found >= 1);
        assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?}");
    }
}
