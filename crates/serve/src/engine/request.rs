//! The request path: a request's turn, its sandbox (hot, warm, or a new one), the call.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::locked::Locked;
use crate::proto;

use super::policy::{self, Admit, Room};
use super::{ApiError, Engine, HandlerInfo, RunOk, Sandbox, State};

/// What a new sandbox is assumed to take until it is measured (bytes).
const NEW_SANDBOX_ESTIMATE: u64 = 8 << 20;

impl Engine {
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
        let r = self.call(sb, &req, timeout, &h);
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
    pub(super) fn call(
        &self,
        sb: Sandbox,
        req: &[u8],
        timeout: Duration,
        h: &HandlerInfo,
    ) -> Result<Vec<u8>, ApiError> {
        let reuse = h.cfg.reuse();
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
                            h.cfg.limits(&self.cfg).0
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

    /// A sandbox for a request of `h`: an idle one of the handler (hot, then warm), else a
    /// new one when [`policy::admit`] finds room (evicting what it needs), else wait. At the
    /// cap a handler that already has sandboxes (all busy) waits for one of its own rather
    /// than evict another handler's recently used one ([`policy::eviction_victim`],
    /// `growing`): under a cyclic access pattern over more sandboxes than fit, evicting to
    /// start turned every request into a start.
    pub(super) fn acquire(
        &self,
        h: &HandlerInfo,
        deadline: Instant,
    ) -> Result<(Sandbox, &'static str), ApiError> {
        let mut st = self.st.locked();
        // Counted in `st.want` (a handler without a sandbox, waiting for room).
        let mut wanting = false;
        let unwant = |st: &mut State, wanting: &mut bool| {
            if std::mem::take(wanting) {
                st.want -= 1;
            }
        };
        let mut nothing_to_evict = false;
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
                unwant(&mut st, &mut wanting);
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
            let growing = per > 0;
            if growing {
                // Its handler has sandboxes now: it waits for them, it no longer needs room.
                unwant(&mut st, &mut wanting);
            }
            if per < self.cfg.max_per_handler {
                let room = Room {
                    live: st.live,
                    dying: st.dying,
                    max: self.cfg.max_sandboxes,
                    mem: st.mem,
                    dying_mem: st.dying_mem,
                    zygote_mem: self.zygote_mem(),
                    est: NEW_SANDBOX_ESTIMATE,
                    budget: self.cfg.memory_budget_mb << 20,
                    others_waiting: st.want - usize::from(wanting),
                    growing,
                    nothing_to_evict,
                };
                match policy::admit(&room) {
                    Admit::Start => {
                        unwant(&mut st, &mut wanting);
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
                                self.wake_all(&st);
                                Err(e)
                            }
                        };
                    }
                    Admit::Evict => {
                        if !growing && !wanting {
                            st.want += 1;
                            wanting = true;
                        }
                        // Zygotes only for the memory budget (the cap counts sandboxes).
                        let at_cap = st.live + st.dying >= self.cfg.max_sandboxes;
                        nothing_to_evict = !self.evict_lru(&mut st, !at_cap, growing);
                        continue;
                    }
                    Admit::Wait => {
                        if !growing && !wanting {
                            st.want += 1;
                            wanting = true;
                        }
                    }
                }
            }
            nothing_to_evict = false;
            let now = Instant::now();
            if now >= deadline {
                unwant(&mut st, &mut wanting);
                return Err(ApiError::new(
                    503,
                    "busy",
                    format!("no sandbox for '{}' became free in time", h.name),
                ));
            }
            // A safety net only: every change that can let a waiter on is notified.
            let wait = (deadline - now).min(Duration::from_millis(100));
            if growing && !wanting {
                // Wait for one of the handler's own sandboxes.
                let c = {
                    let e = st
                        .waiters
                        .entry(h.name.clone())
                        .or_insert_with(|| (Arc::new(Condvar::new()), 0));
                    e.1 += 1;
                    e.0.clone()
                };
                st = c
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                if let Some(e) = st.waiters.get_mut(&h.name) {
                    e.1 -= 1;
                    if e.1 == 0 {
                        st.waiters.remove(&h.name);
                    }
                }
            } else {
                st = self
                    .cv
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}
