//! `/status` and the metrics gauges.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use crate::locked::Locked;

use super::{Engine, Sandbox, ZSlot};

impl Engine {
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
