//! A pool of pre-created, empty cgroups for repeated container starts (SOCK-style).
//!
//! The pool has no state besides the directories themselves: slot `n` is a directory named
//! `sprout-pool-<n>` beside the container's cgroup (in the leaf's parent) in every v1
//! hierarchy. That way separate runtime invocations (`create` and `delete` are different
//! processes) share it, and concurrent ones need no lock file:
//!
//! - **take** ([`Manager::create_pooled`]): rename(2) slot `n` to the container's name in the
//!   first hierarchy; whoever wins that rename owns the slot. Then the same slot in the other
//!   hierarchies. A hierarchy where the slot is missing (a racing fill or give-back) just gets
//!   an ordinary mkdir, so a partial slot is never a correctness problem, only a slower take.
//! - **give back** ([`Manager::destroy_pooled`]) and **fill** ([`Pool::fill`]) go in the
//!   opposite order, the first hierarchy last: a slot is visible to takers only when it is
//!   complete (and its cpuset.cpus/mems are set).
//!
//! Only cgroup v1 directories can be renamed: cgroup2 refuses rename(2) (EPERM,
//! `cgroup1_rename` is the only kernfs rename op). So on a pure v2 host the pool is not used
//! (`create_pooled` is `create`), and on hybrid hosts the cgroup2 tracking leaf is an ordinary
//! mkdir/rmdir.
//!
//! Giving a cgroup back resets what `apply` may have changed to what a new cgroup has (limits
//! unlimited, cpu.shares 1024, cpuset and devices copied from the parent, ...) and clears the
//! counters (memory.force_empty reclaims what the old container left charged, max_usage,
//! failcnt, cpuacct.usage). A cgroup that still has processes or child cgroups, or whose reset
//! fails, is destroyed instead.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::fs;
use crate::{Layout, Manager, Result};

/// Slot directory name prefix.
pub const POOL_PREFIX: &str = "sprout-pool-";

/// Pool configuration: how many empty cgroups to keep beside each container parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool {
    size: usize,
}

fn slot_name(n: usize) -> String {
    format!("{POOL_PREFIX}{n}")
}

/// The (hierarchy name, parent dir, leaf dir) triples a pool slot covers for `m`, in take
/// order. Empty on pure v2 (no rename there).
fn pooled_hiers(m: &Manager) -> Vec<(&str, &Path, &Path)> {
    if m.layout == Layout::V2 {
        return Vec::new();
    }
    m.v1.iter()
        .filter_map(|h| Some((h.name.as_str(), h.dir.parent()?, h.dir.as_path())))
        .collect()
}

fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)
}

impl Pool {
    /// A pool keeping up to `size` empty cgroups per parent.
    pub fn new(size: usize) -> Pool {
        Pool { size }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Top the pool beside `m`'s cgroup up to `size` complete slots (mkdir in every v1
    /// hierarchy whose parent exists, cpuset initialised, the first hierarchy last). Meant to
    /// run off the start path (after a start, or in a `delete`). Returns how many slots were
    /// made. Nothing on pure v2.
    pub fn fill(&self, m: &Manager) -> Result<usize> {
        let hs = pooled_hiers(m);
        let Some(&(_, parent0, _)) = hs.first() else {
            return Ok(0);
        };
        if !parent0.is_dir() {
            return Ok(0);
        }
        let mut made = 0;
        for n in 0..self.size {
            let name = slot_name(n);
            if parent0.join(&name).exists() {
                continue;
            }
            for &(ctrl, parent, _) in hs.iter().rev() {
                let d = parent.join(&name);
                match std::fs::create_dir(&d) {
                    Ok(()) => {
                        if ctrl == "cpuset" {
                            if let Err(e) = crate::v1::copy_cpuset(std::slice::from_ref(&d)) {
                                let _ = std::fs::remove_dir(&d);
                                return Err(e);
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    // A hierarchy that is not mounted (or whose parent is gone): takers
                    // fall back to mkdir there.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(fs::io_err(d, e)),
                }
            }
            made += 1;
        }
        Ok(made)
    }

    /// Complete slots ready beside `m`'s cgroup (counted in the first hierarchy).
    pub fn available(&self, m: &Manager) -> usize {
        let hs = pooled_hiers(m);
        let Some(&(_, parent0, _)) = hs.first() else {
            return 0;
        };
        (0..self.size)
            .filter(|&n| parent0.join(slot_name(n)).exists())
            .count()
    }

    /// Remove every slot beside `m`'s cgroup (any index, also beyond `size`). Returns how
    /// many directories were removed.
    pub fn drain(&self, m: &Manager) -> Result<usize> {
        let mut removed = 0;
        for (_, parent, _) in pooled_hiers(m) {
            let rd = match std::fs::read_dir(parent) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(fs::io_err(parent, e)),
            };
            for ent in rd.flatten() {
                let name = ent.file_name();
                let Some(name) = name.to_str() else { continue };
                if let Some(n) = name.strip_prefix(POOL_PREFIX) {
                    if n.parse::<usize>().is_ok() {
                        match std::fs::remove_dir(ent.path()) {
                            Ok(()) => removed += 1,
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                            Err(e) => return Err(fs::io_err(ent.path(), e)),
                        }
                    }
                }
            }
        }
        Ok(removed)
    }
}

impl Manager {
    /// [`Manager::create`], but taking a pre-created cgroup from `pool` (renamed to the
    /// container's name) when one is ready. `Ok(true)`: a pool slot was used; `Ok(false)`: an
    /// ordinary `create` ran (empty pool, pure v2, the container's directory already exists,
    /// ...). Either way [`Manager::created`] lists the leaf directories afterwards, so plain
    /// [`Manager::destroy`] still works.
    pub fn create_pooled(&mut self, pool: &Pool) -> Result<bool> {
        let hs: Vec<(String, PathBuf, PathBuf)> = pooled_hiers(self)
            .into_iter()
            .map(|(c, p, d)| (c.to_string(), p.to_path_buf(), d.to_path_buf()))
            .collect();
        let Some((_, parent0, dir0)) = hs.first() else {
            return self.create().map(|()| false);
        };
        // Claim a slot: the rename in the first hierarchy decides.
        let mut slot = None;
        for n in 0..pool.size {
            match rename(&parent0.join(slot_name(n)), dir0) {
                Ok(()) => {
                    slot = Some(n);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                // EEXIST/ENOTEMPTY: the container's cgroup exists already (join it as
                // `create` does); anything else: let `create` report or handle it.
                Err(_) => break,
            }
        }
        let Some(n) = slot else {
            return self.create().map(|()| false);
        };
        let mut renamed = vec![dir0.clone()];
        for (_, parent, dir) in &hs[1..] {
            match rename(&parent.join(slot_name(n)), dir) {
                Ok(()) => renamed.push(dir.clone()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {} // mkdir'd by create below
                Err(e) => {
                    // Put back what we took (best effort) and fail like create would.
                    self.unclaim(n, &renamed);
                    return Err(fs::io_err(dir, e));
                }
            }
        }
        if renamed.len() == hs.len() {
            // Every v1 hierarchy came from the slot: only the hybrid cgroup2 leaf is left.
            let mut created = Vec::new();
            crate::v1::create_unified(self, &mut created);
            self.created.extend(renamed);
            self.created.extend(created);
            return Ok(true);
        }
        // Everything not renamed in (missing slot dirs, the hybrid cgroup2 leaf, alternative
        // mounts) the ordinary way; it skips the directories that exist now.
        match self.create() {
            Ok(()) => {
                let mut created = renamed;
                created.append(&mut self.created);
                self.created = created;
                Ok(true)
            }
            Err(e) => {
                self.unclaim(n, &renamed);
                Err(e)
            }
        }
    }

    fn unclaim(&self, n: usize, renamed: &[PathBuf]) {
        for d in renamed.iter().rev() {
            if let Some(p) = d.parent() {
                if rename(d, &p.join(slot_name(n))).is_err() {
                    let _ = std::fs::remove_dir(d);
                }
            }
        }
    }

    /// [`Manager::destroy`], but giving the container's (empty) cgroup back to `pool`: reset,
    /// then renamed to a free slot. `Ok(true)`: pooled; `Ok(false)`: destroyed instead (pool
    /// full, pure v2, the cgroup still has processes or child cgroups, not created by us, a
    /// reset that failed). The hybrid cgroup2 leaf and intermediate directories are removed as
    /// `destroy` does.
    pub fn destroy_pooled(&self, pool: &Pool) -> Result<bool> {
        let hs = pooled_hiers(self);
        let Some(&(_, parent0, _)) = hs.first() else {
            return self.destroy().map(|()| false);
        };
        let ours = hs
            .iter()
            .all(|(_, _, d)| self.created.iter().any(|c| c == d));
        if !ours || !self.poolable(&hs) {
            return self.destroy().map(|()| false);
        }
        let Some(n) = (0..pool.size).find(|&n| !parent0.join(slot_name(n)).exists()) else {
            return self.destroy().map(|()| false);
        };
        for &(ctrl, parent, dir) in &hs {
            if reset(ctrl, parent, dir).is_err() {
                return self.destroy().map(|()| false);
            }
        }
        // Reverse order: the slot appears in the first hierarchy last, complete.
        let mut given = Vec::new();
        for &(_, parent, dir) in hs.iter().rev() {
            match rename(dir, &parent.join(slot_name(n))) {
                Ok(()) => given.push(dir),
                // Another give-back claimed slot n meanwhile (or a stale partial slot): this
                // one goes; takers mkdir where a slot dir is missing.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) => {
                    fs::rmdir_retry(dir)?;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(fs::io_err(dir, e)),
            }
        }
        // The rest (cgroup2 leaf on hybrid, intermediate directories) as destroy does;
        // renamed leaves are gone from their old place, so rmdir sees NotFound there.
        self.destroy()?;
        Ok(true)
    }

    /// No processes and no child cgroups in any pooled hierarchy (kernfs directories have
    /// nlink = 2 + number of subdirectories: one stat each).
    fn poolable(&self, hs: &[(&str, &Path, &Path)]) -> bool {
        for &(_, _, dir) in hs {
            match std::fs::metadata(dir) {
                Ok(md) if md.nlink() == 2 => {}
                _ => return false,
            }
        }
        let Some(procs) = self.procs_dir() else {
            return false;
        };
        matches!(fs::read_at(procs, "cgroup.procs"), Ok(s) if s.trim().is_empty())
    }
}

/// Put one v1 hierarchy's cgroup back to what a new child of `parent` has. ENOENT (a file
/// this kernel lacks) is fine; any other failure means "do not pool this one".
pub(crate) fn reset(ctrl: &str, parent: &Path, dir: &Path) -> Result<()> {
    let set = |file: &str, v: &str| -> Result<()> {
        match fs::write(&dir.join(file), v.as_bytes()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(fs::io_err(dir.join(file), e)),
        }
    };
    // "maj:min value" lists: write "maj:min <zero>" for every line present.
    let clear_list = |file: &str, zero: &str| -> Result<()> {
        let cur = match fs::read(&dir.join(file)) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(fs::io_err(dir.join(file), e)),
        };
        for l in cur.lines() {
            if let Some(k) = l.split_whitespace().next().filter(|k| k.contains(':')) {
                set(file, &format!("{k} {zero}"))?;
            }
        }
        Ok(())
    };
    match ctrl {
        "memory" => {
            // memsw >= limit always holds: raise memsw first.
            set("memory.memsw.limit_in_bytes", "-1")?;
            set("memory.limit_in_bytes", "-1")?;
            set("memory.soft_limit_in_bytes", "-1")?;
            set("memory.kmem.tcp.limit_in_bytes", "-1")?;
            // A new memcg inherits swappiness and oom_kill_disable from its parent.
            if let Ok(s) = fs::read_at(parent, "memory.swappiness") {
                set("memory.swappiness", s.trim())?;
            }
            if let Ok(s) = fs::read_at(parent, "memory.oom_control") {
                let v = fs::flat_keyed(&s)
                    .find(|(k, _)| *k == "oom_kill_disable")
                    .map_or(0, |(_, v)| v);
                set("memory.oom_control", &v.to_string())?;
            }
            // Uncharge what the previous container left (page cache). force_empty costs
            // ~4ms even on an empty memcg (lru_add_drain_all waits on every CPU): only
            // when something is charged.
            let charged = fs::read_u64_opt(dir, "memory.usage_in_bytes")?.unwrap_or(0);
            if charged > 0 {
                set("memory.force_empty", "0")?;
            }
            set("memory.max_usage_in_bytes", "0")?;
            set("memory.memsw.max_usage_in_bytes", "0")?;
            set("memory.failcnt", "0")?;
            set("memory.memsw.failcnt", "0")?;
        }
        "cpu" => {
            set("cpu.shares", "1024")?;
            set("cpu.cfs_quota_us", "-1")?;
            set("cpu.cfs_period_us", "100000")?;
            set("cpu.cfs_burst_us", "0")?;
            set("cpu.rt_runtime_us", "0")?;
            set("cpu.rt_period_us", "1000000")?;
            set("cpu.idle", "0")?;
        }
        "cpuacct" => set("cpuacct.usage", "0")?,
        "cpuset" => {
            for f in ["cpuset.cpus", "cpuset.mems"] {
                let v = fs::read_at(parent, f)?;
                set(f, v.trim())?;
            }
        }
        "devices" => {
            // A new devices cgroup copies its parent's list.
            let list = fs::read_at(parent, "devices.list")?;
            set("devices.deny", "a")?;
            for l in list.lines().filter(|l| !l.trim().is_empty()) {
                set(
                    "devices.allow",
                    if l.trim() == "a *:* rwm" {
                        "a"
                    } else {
                        l.trim()
                    },
                )?;
            }
        }
        "freezer" => set("freezer.state", "THAWED")?,
        "pids" => set("pids.max", "max")?,
        "blkio" => {
            // Legacy CFQ default weight 500, BFQ's 100.
            set("blkio.weight", "500")?;
            set("blkio.leaf_weight", "500")?;
            set("blkio.bfq.weight", "100")?;
            for f in [
                "blkio.throttle.read_bps_device",
                "blkio.throttle.write_bps_device",
                "blkio.throttle.read_iops_device",
                "blkio.throttle.write_iops_device",
            ] {
                clear_list(f, "0")?;
            }
            for f in [
                "blkio.weight_device",
                "blkio.leaf_weight_device",
                "blkio.bfq.weight_device",
            ] {
                clear_list(f, "0")?;
            }
        }
        "hugetlb" => {
            let rd = std::fs::read_dir(dir).map_err(|e| fs::io_err(dir, e))?;
            for ent in rd.flatten() {
                let n = ent.file_name();
                let Some(n) = n.to_str() else { continue };
                if n.starts_with("hugetlb.") && n.ends_with(".limit_in_bytes") {
                    set(n, "-1")?;
                }
            }
        }
        "net_cls" => set("net_cls.classid", "0")?,
        "net_prio" => {
            if let Ok(s) = fs::read_at(dir, "net_prio.ifpriomap") {
                for l in s.lines() {
                    let mut it = l.split_whitespace();
                    if let (Some(ifn), Some(p)) = (it.next(), it.next()) {
                        if p != "0" {
                            set("net_prio.ifpriomap", &format!("{ifn} 0"))?;
                        }
                    }
                }
            }
        }
        "rdma" => {
            if let Ok(s) = fs::read_at(dir, "rdma.max") {
                for l in s.lines() {
                    if let Some(dev) = l.split_whitespace().next() {
                        set("rdma.max", &format!("{dev} hca_handle=max hca_object=max"))?;
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}
