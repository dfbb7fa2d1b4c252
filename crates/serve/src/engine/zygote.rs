//! The zygote tree (import cache): which zygote serves a package set, starting, dropping
//! and tearing zygotes down, their spares, and learning what spares pre-fault.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{Error, Kind};
use crate::install;
use crate::locked::Locked;
use crate::{proto, rootfs, spawn};
use sprout_cgroups::PoolCgroup as PoolCg;

use super::{open_dir_path, Engine, HandlerInfo, Sandbox, ZSlot, Zygote};
use super::{place, policy};

/// How long a zygote may take to start (python, its imports: numpy and pandas take seconds on
/// a slow host) and to answer one message (a fork, a batch of them): whole answers, by a
/// deadline, however their bytes are trickled. Code of the packages a zygote imported runs
/// in it, and its refills and starts wait on its answers: past the deadline the zygote is
/// dropped.
const ZYGOTE_START: Duration = Duration::from_secs(120);
const ZYGOTE_REPLY: Duration = Duration::from_secs(10);

impl Engine {
    // ------------------------------------------------------------------ zygotes (import cache)

    /// The zygote to fork a sandbox of `h` from: the one for its package set when ready, else
    /// the ready zygote with the largest subset of its packages (the root zygote, with none,
    /// is a subset of every set): the sandbox then imports the rest itself. A missing zygote
    /// for the exact set is started in the background, forked from that same best subset
    /// (SOCK's zygote tree: it imports only the packages its parent lacks).
    pub(super) fn zygote_ready(&self, key: &str, h: &HandlerInfo) -> Option<Arc<Zygote>> {
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
    pub(super) fn best_subset(zs: &HashMap<String, ZSlot>, want: &[&str]) -> Option<Arc<Zygote>> {
        let ready: Vec<&Arc<Zygote>> = zs
            .values()
            .filter_map(|s| match s {
                ZSlot::Ready(z) => Some(z),
                _ => None,
            })
            .collect();
        let views: Vec<(&[String], Instant)> = ready
            .iter()
            .map(|z| (z.pkgs.as_slice(), *z.last_take.locked()))
            .collect();
        policy::zygote_choice(&views, want).map(|i| ready[i].clone())
    }

    pub(super) fn ensure_zygote(
        &self,
        pkgs: &[(String, PathBuf)],
        extra: &[String],
        parent: Option<String>,
    ) {
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
                    .insert(key, ZSlot::Failed(Instant::now(), e.to_string()));
            }
        }
    }

    /// A zygote that failed: marked failed (not retried for 30 s) and torn down, unless it
    /// was evicted or replaced meanwhile.
    pub(super) fn drop_zygote(&self, z: &Arc<Zygote>) {
        let mut zs = self.zygotes.locked();
        if !matches!(zs.get(&z.key), Some(ZSlot::Ready(x)) if Arc::ptr_eq(x, z)) {
            return;
        }
        zs.insert(z.key.clone(), ZSlot::Failed(Instant::now(), "died".into()));
        drop(zs);
        self.teardown_zygote(z);
    }

    /// Kill what is in a zygote's or spare's pool cgroup and give the cgroup back.
    fn kill_and_put(&self, cg: PoolCg) {
        let _ = cg.mgr.kill_all(libc::SIGKILL);
        self.pool.put(cg);
    }

    /// Kill a zygote (already out of the map) and its spares; give back their cgroups.
    pub(super) fn teardown_zygote(&self, z: &Zygote) {
        let spares = {
            let mut s = z.spares.locked();
            z.gone.store(true, Ordering::SeqCst);
            std::mem::take(&mut *s)
        };
        for (sock, cg) in spares {
            drop(sock);
            self.kill_and_put(cg);
        }
        if let Some(cg) = z.cg.locked().take() {
            self.kill_and_put(cg);
        }
        rootfs::remove_root(&z.root);
    }

    /// Start the zygote for package set `key`: forked from `parent`, or exec'd (the root
    /// zygote). An error is of kind [`Kind::Zygote`], its source the cgroup or I/O error
    /// where there was one; what was made for the zygote is given back.
    pub(super) fn start_zygote(
        &self,
        key: &str,
        pkgs: &[(String, PathBuf)],
        extra: &[String],
        parent: Option<Arc<Zygote>>,
    ) -> Result<Zygote, Error> {
        let zerr = |e: Error| e.with_kind(Kind::Zygote);
        // Counted before `stopping` is read (both SeqCst), as a sandbox's creation is: shutdown
        // waits for this start before it removes the pool's cgroups (a zygote placed in one
        // after that clean-up had killed its members kept it on the host), or this start sees
        // `stopping` and makes nothing.
        let _creating = super::Creating::new(&self.creating);
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Error::new(Kind::Zygote, "the engine is shutting down"));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut cg = self.pool.get().map_err(|e| zerr(e.into()))?;
        // A zygote's cgroup also carries what its children are charged before they move to
        // their own (page tables, the first copy-on-write pages): it gets the zygote limit.
        let sb = &self.cfg.sandbox;
        let zres = super::pool_resources(
            self.cfg.zygote_memory_mb.max(sb.memory_mb),
            sb.pids.max(1024),
            // The sandboxes' quota, which the pool cgroup has already.
            sb.cpu_milli,
        );
        if let Err(e) = self.pool.set_limits(&mut cg, &zres) {
            self.pool.put(cg);
            return Err(zerr(Error::from(e).context("zygote cgroup limits")));
        }
        let root = self.roots.join(format!("z{id}"));
        if let Err(e) = rootfs::make_root(&self.base, &self.mp_dir, &root, None, pkgs, 1) {
            self.pool.put(cg);
            return Err(zerr(e.into()));
        }
        let fail = |cg: PoolCg, e: Error| {
            self.kill_and_put(cg);
            rootfs::remove_root(&root);
            zerr(e)
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
        let (a, b) = proto::pair().map_err(|e| zerr(e.into()))?;
        let rootfd = match open_dir_path(&root) {
            Ok(f) => f,
            Err(e) => return Err(fail(cg, e.into())),
        };
        let started = Instant::now();
        let _ = a.set_read_timeout(Some(ZYGOTE_START));
        let mut spawned = None;
        let r = if let Some(p) = &parent {
            // SOCK's zygote tree: the parent forks the child (pid 2 of a pid namespace of
            // its own, under a holder that is pid 1 there), which says it is there; placed
            // in its own cgroup by us, it chroots into its root (the parent's packages + the
            // new ones) and imports.
            let fds = [b.as_raw_fd(), rootfd.as_raw_fd()];
            let msg = json!({"op": "zygote", "paths": paths, "preload": preload});
            let forked = {
                let ctl = p.ctl.locked();
                proto::send(&ctl, &serde_json::to_vec(&msg).unwrap(), &fds)
                    .and_then(|_| proto::recv_json_until(&ctl, Instant::now() + ZYGOTE_REPLY))
            };
            drop(b);
            match forked {
                Ok(v) if v.get("pid").is_some() => {
                    p.forks.fetch_add(1, Ordering::Relaxed);
                    let holder = v["pid"].as_i64().unwrap_or(-1) as i32;
                    (|| {
                        let holder = place::host_child(p.pid, holder)?;
                        place::wait_forked(&a)?;
                        let level = place::ns_level(holder)?;
                        let pid = place::place_child(&cg, holder, level, 2)?;
                        spawned = Some(pid);
                        place::say_placed(&a)?;
                        proto::recv_json_until(&a, started + ZYGOTE_START)
                    })()
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
                Err(e) => return Err(fail(cg, Error::io(Kind::Zygote, "zygote log pipe", e))),
            };
            let ids = spawn::ZygoteIds {
                zygote: (self.cfg.zygote_uid, self.cfg.zygote_gid),
                sandbox: (self.cfg.sandbox.uid, self.cfg.sandbox.gid),
            };
            let script = self.cfg.zygote_script();
            let z = spawn::ZygoteSpawn {
                python: &self.cfg.python,
                script: &script,
                sock: &b,
                log_fd: logw.as_raw_fd(),
                null_fd: self.null_fd.as_raw_fd(),
                ids: &ids,
                own_net: self.cfg.sandbox.network_ns,
            };
            match spawn::spawn_zygote(
                &z,
                // Into its cgroup before it execs python (and reads its setup, and imports).
                &|pid| cg.place(pid),
            ) {
                Ok(p) => spawned = Some(p),
                Err(e) => return Err(fail(cg, Error::io(Kind::Zygote, "spawn zygote", e))),
            }
            drop(b);
            let fds = [rootfd.as_raw_fd()];
            let setup = json!({"paths": paths, "preload": preload, "seccomp": self.bpf_hex,
                               "text_ptes": self.cfg.zygote_text_ptes,
                               "env": self.base_env()});
            proto::send(&a, &serde_json::to_vec(&setup).unwrap(), &fds)
                .and_then(|_| proto::recv_json_until(&a, started + ZYGOTE_START))
        };
        drop(rootfd);
        let v = match r {
            Ok(v) if v.get("ready") == Some(&Value::Bool(true)) => v,
            Ok(v) => return Err(fail(cg, Error::new(Kind::Zygote, format!("zygote: {v}")))),
            Err(e) => return Err(fail(cg, Error::io(Kind::Zygote, "zygote did not start", e))),
        };
        let _ = a.set_read_timeout(Some(ZYGOTE_REPLY));
        let imported: Vec<String> = v["imported"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let mem = cg.memory_usage();
        // The zygote's pid as the host sees it (it reports its own, in its pid namespace):
        // the root's from its clone, a child's as it was placed.
        let pid = spawned.unwrap_or(-1);
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
            refilling: std::sync::atomic::AtomicBool::new(false),
            gone: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Start a refill of the spares of each ready zygote that lacks some and has been quiet
    /// for a moment, each on a thread of its own: a zygote is slow to answer (or made so by
    /// code of a package it imported, up to `ZYGOTE_REPLY`) for its own package set only,
    /// never for another zygote's refills.
    pub(super) fn replenish_spares(&self) {
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
            if z.last_take.locked().elapsed() < Duration::from_millis(10)
                || z.spares.locked().len() >= want
                || z.refilling.swap(true, Ordering::SeqCst)
            {
                continue;
            }
            let Some(me) = self.this.get().and_then(|w| w.upgrade()) else {
                z.refilling.store(false, Ordering::SeqCst);
                return;
            };
            let z2 = z.clone();
            let spawned = std::thread::Builder::new()
                .name("spares".into())
                .spawn(move || {
                    me.refill(&z2, want);
                    z2.refilling.store(false, Ordering::SeqCst);
                });
            if spawned.is_err() {
                z.refilling.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Fork spares from `z` until it has `want`; a zygote that fails is dropped.
    fn refill(&self, z: &Arc<Zygote>, want: usize) {
        let _creating = super::Creating::new(&self.creating);
        while z.spares.locked().len() < want {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            match self.new_spare(z, true) {
                Ok(s) => {
                    if !self.keep_spares(z, vec![s]) {
                        return;
                    }
                }
                Err(e) => {
                    // Not a failure of the zygote's when the engine stops (the pool refuses
                    // cgroups) or the zygote was torn down under us (evicted).
                    if !self.stopping.load(Ordering::SeqCst) && !z.gone.load(Ordering::SeqCst) {
                        eprintln!("sprout-serve: zygote [{}] failed ({e}); dropping it", z.key);
                        self.drop_zygote(z);
                    }
                    return;
                }
            }
        }
    }

    /// Add forked spares to `z`'s, unless it was torn down meanwhile: then they are killed
    /// and their cgroups given back (false).
    fn keep_spares(&self, z: &Zygote, v: Vec<(UnixStream, PoolCg)>) -> bool {
        {
            let mut spares = z.spares.locked();
            if !z.gone.load(Ordering::SeqCst) {
                spares.extend(v);
                return true;
            }
        }
        for (sock, cg) in v {
            drop(sock);
            self.kill_and_put(cg);
        }
        false
    }

    pub(super) fn take_spare(&self, z: &Zygote) -> std::io::Result<(UnixStream, PoolCg)> {
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
        // (At most 8, each with its socket on the one message. None left over when spares
        // are off.)
        let n = if self.cfg.zygote_spares == 0 {
            1
        } else {
            self.cfg.zygote_fork_batch.clamp(1, 8)
        };
        let mut v = self.fork_spares(z, &ctl, n, false)?;
        drop(ctl);
        let first = v.swap_remove(0);
        self.keep_spares(z, v);
        Ok(first)
    }

    /// Fork a spare from `z`: it joins a pool cgroup, makes its namespaces, and waits for a
    /// handler. All of that (fork, the v1 cgroup migration that can cost an RCU grace period,
    /// unshare, the pid-namespace fork) stays off the request path.
    pub(super) fn new_spare(
        &self,
        z: &Zygote,
        prewarm: bool,
    ) -> std::io::Result<(UnixStream, PoolCg)> {
        let ctl = z.ctl.locked();
        let mut v = self.fork_spares(z, &ctl, 1, prewarm)?;
        Ok(v.swap_remove(0))
    }

    /// Fork `n` (≥ 1) spares from `z` in one message (`ctl` is its locked control socket):
    /// each gets a socket and a pool cgroup. Returns at least one, or the error.
    pub(super) fn fork_spares(
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
            for _ in &cgs {
                let (a, b) = proto::pair()?;
                fds.push(b.as_raw_fd());
                nfds.push(1);
                socks.push(a);
                ends.push(b);
            }
            let msg = json!({"op": "fork", "unshare": self.early_flags(), "trace": self.trace,
                             "prewarm": prewarm, "nfds": nfds});
            proto::send(ctl, &serde_json::to_vec(&msg).unwrap(), &fds)?;
            drop(ends);
            let v = proto::recv_json_until(ctl, Instant::now() + ZYGOTE_REPLY)?;
            // {"pids": [...]} (one per spare forked, in order, as the zygote's pid namespace
            // numbers them), plus "error" if the zygote could not fork them all.
            let pids: Vec<i32> = v
                .get("pids")
                .and_then(Value::as_array)
                .map(|p| p.iter().map(|x| x.as_i64().unwrap_or(-1) as i32).collect())
                .unwrap_or_default();
            let forked = pids.len().min(socks.len());
            if forked == 0 {
                return Err(std::io::Error::other(format!("zygote: {v}")));
            }
            z.forks.fetch_add(forked as u64, Ordering::Relaxed);
            socks.truncate(forked);
            let level = place::ns_level(z.pid)?;
            Ok((socks.into_iter().zip(pids).collect::<Vec<_>>(), level))
        })();
        match r {
            Ok((socks, level)) => {
                // Each into its pool cgroup, by us: the zygote holds no cgroup file. A spare
                // that cannot be placed is dropped (it sees its socket close and exits).
                let mut out = Vec::with_capacity(socks.len());
                let mut cgs = cgs.into_iter();
                let mut err = None;
                for ((a, nspid), cg) in socks.into_iter().zip(cgs.by_ref()) {
                    let placed = place::place_child(&cg, z.pid, level, nspid)
                        .and_then(|_| place::say_placed(&a));
                    match placed {
                        Ok(()) => out.push((a, cg)),
                        Err(e) => {
                            drop(a);
                            self.kill_and_put(cg);
                            err = Some(e);
                        }
                    }
                }
                for cg in cgs {
                    self.pool.put(cg);
                }
                match (out.is_empty(), err) {
                    (true, Some(e)) => Err(e),
                    _ => Ok(out),
                }
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
    pub(super) fn learn_prewarm(&self, z: &Zygote, sb: &Sandbox) {
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
                .and_then(|_| proto::recv_json_until(&ctl, Instant::now() + ZYGOTE_REPLY))
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
