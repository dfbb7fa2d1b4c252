//! The handler cache: idle sandboxes (hot, then frozen), eviction within the memory budget
//! (one LRU over idle sandboxes and leaf zygotes), the janitors' side, housekeeping.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::locked::Locked;
use crate::rootfs;

use super::policy::{self, IdleView, Victim, ZygoteView};
use super::{Engine, Job, Sandbox, State, ZSlot, Zygote};

impl Engine {
    /// Memory held by the import cache: every ready zygote and its spares.
    pub(super) fn zygote_mem(&self) -> u64 {
        self.zygotes
            .locked()
            .values()
            .map(|s| match s {
                ZSlot::Ready(z) => z.mem.load(Ordering::Relaxed),
                _ => 0,
            })
            .sum()
    }

    /// Evict one of the idle sandboxes or (with `zygotes`) the leaf zygotes: ready, not the
    /// root (empty package set), no child zygote ready or starting. The order is
    /// [`policy::eviction_victim`]'s: surplus sandboxes (their handler keeps another) first,
    /// then one LRU over both caches, as they share the memory budget; for a `growing`
    /// handler (it has sandboxes, all busy) only a frozen sandbox. Returns whether something
    /// was evicted. Lock order: state, then zygotes.
    pub(super) fn evict_lru(&self, st: &mut State, zygotes: bool, growing: bool) -> bool {
        let idle: Vec<IdleView<Instant>> = st
            .idle
            .iter()
            .map(|s| IdleView {
                t: s.last_used,
                frozen: s.frozen,
                surplus: st.live_per.get(&s.handler).copied().unwrap_or(0) > 1,
            })
            .collect();
        let mut zs = self.zygotes.locked();
        let victim = {
            let views: Vec<ZygoteView<'_, Instant>> = if zygotes && !growing {
                zs.iter()
                    .map(|(key, s)| match s {
                        ZSlot::Ready(z) => ZygoteView {
                            key: z.key.as_str(),
                            parent: z.parent.as_deref(),
                            ready: Some((z.pkgs.len(), *z.last_take.locked())),
                        },
                        ZSlot::Starting(p) => ZygoteView {
                            key: key.as_str(),
                            parent: p.as_deref(),
                            ready: None,
                        },
                        ZSlot::Failed(..) => ZygoteView {
                            key: key.as_str(),
                            parent: None,
                            ready: None,
                        },
                    })
                    .collect()
            } else {
                Vec::new()
            };
            match policy::eviction_victim(&idle, &views, growing) {
                Some(Victim::Sandbox(i)) => Some(Ok(i)),
                Some(Victim::Zygote(j)) => Some(Err(views[j].key.to_string())),
                None => None,
            }
        };
        match victim {
            Some(Ok(i)) => {
                drop(zs);
                let sb = st.idle.swap_remove(i);
                self.forget(st, &sb);
                self.metrics.evicted();
                self.to_janitor(sb);
                true
            }
            Some(Err(key)) => {
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
            None => false,
        }
    }

    /// `sb` leaves the cache for the janitors (the caller hands it to [`Self::to_janitor`]):
    /// from live to dying.
    pub(super) fn forget(&self, st: &mut State, sb: &Sandbox) {
        st.live -= 1;
        if let Some(n) = st.live_per.get_mut(&sb.handler) {
            *n -= 1;
        }
        st.mem = st.mem.saturating_sub(sb.mem);
        st.dying += 1;
        st.dying_mem += sb.mem;
    }

    pub(super) fn to_janitor(&self, sb: Sandbox) {
        let _ = self.janitor.locked().send(Job::Destroy(Box::new(sb)));
    }

    /// Wake every waiting request: room may have appeared (a sandbox destroyed or
    /// discarded), or an evictable sandbox for a growing handler (one frozen).
    pub(super) fn wake_all(&self, st: &State) {
        self.cv.notify_all();
        for (c, _) in st.waiters.values() {
            c.notify_all();
        }
    }

    pub(super) fn release(&self, mut sb: Sandbox) {
        sb.last_used = Instant::now();
        // A zygote stays as recently used as the handlers of its package set.
        if let Some(ZSlot::Ready(z)) = self.zygotes.locked().get(&sb.zkey) {
            *z.last_take.locked() = sb.last_used;
        }
        let mut st = self.st.locked();
        // One waiter of its handler takes it; requests waiting for room may evict it.
        if let Some((c, _)) = st.waiters.get(&sb.handler) {
            c.notify_one();
        }
        if st.want > 0 {
            self.cv.notify_all();
        }
        st.idle.push(sb);
    }

    pub(super) fn discard(&self, sb: Sandbox, why: &str) {
        self.metrics.killed(why);
        let mut st = self.st.locked();
        self.forget(&mut st, &sb);
        self.wake_all(&st);
        drop(st);
        self.to_janitor(sb);
    }

    pub(super) fn destroy(&self, mut sb: Sandbox) {
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
        self.wake_all(&st);
    }

    pub(super) fn housekeeping(&self) {
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

    pub(super) fn freeze(&self, to_freeze: Vec<Sandbox>) {
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
        self.wake_all(&st);
    }

    /// Refresh the zygotes' memory (their cgroup and their spares'), then evict LRU (idle
    /// sandboxes and leaf zygotes) while the accounted total is over the budget.
    pub(super) fn enforce_budget(&self) {
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
            if !self.evict_lru(&mut st, true, false) {
                break;
            }
        }
    }
}
