//! Start paths for a new sandbox: zygote fork (or a cold start from a spare or a fresh
//! python), the namespaces and set-up message it gets.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::locked::Locked;
use crate::{proto, rootfs, spawn};
use oci_spec::runtime::LinuxResources;
use sprout_cgroups::PoolCgroup as PoolCg;

use super::{monotonic_s, open_dir_path, ApiError, Creating, Engine, HandlerInfo, Job, Sandbox};

impl Engine {
    // ------------------------------------------------------------------ sandbox creation

    pub(super) fn unshare_flags(&self, h: &HandlerInfo) -> i32 {
        let mut f = spawn::CLONE_NEWPID | spawn::CLONE_NEWIPC | spawn::CLONE_NEWUTS;
        if h.cfg.mount_ns(&self.cfg) {
            f |= spawn::CLONE_NEWNS;
        }
        if h.cfg.network_ns(&self.cfg) {
            f |= spawn::CLONE_NEWNET;
        }
        f
    }

    pub(super) fn setup_msg(&self, h: &HandlerInfo, flags: i32) -> Value {
        let mut env = self.base_env();
        for (k, v) in &h.cfg.env {
            env[k] = json!(v);
        }
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
    pub(super) fn base_env(&self) -> Value {
        json!({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp"})
    }

    /// The pool cgroup limits of `h`'s sandboxes where its handler.toml tightens the
    /// operator's (`memory_mb`, `pids`, `cpu_milli`); `None`: the pool's own.
    pub(super) fn handler_limits(&self, h: &HandlerInfo) -> Option<LinuxResources> {
        let sb = &self.cfg.sandbox;
        let (mem, pids, cpu) = h.cfg.limits(&self.cfg);
        ((mem, pids, cpu) != (sb.memory_mb, sb.pids, sb.cpu_milli))
            .then(|| super::pool_resources(mem, pids, cpu))
    }

    /// Set `h`'s own limits ([`Self::handler_limits`]) on the cgroup a sandbox of it was
    /// given, before its code runs. A limit below what the spare already uses fails (v1:
    /// EBUSY; v2 reclaims, then its OOM killer ends the spare, and the start fails with "out
    /// of memory").
    fn tighten(&self, h: &HandlerInfo, cg: &mut PoolCg) -> Result<(), ApiError> {
        let Some(r) = self.handler_limits(h) else {
            return Ok(());
        };
        self.pool.set_limits(cg, &r).map_err(|e| {
            ApiError::new(
                500,
                "start_failed",
                format!(
                    "handler '{}' failed to start: its handler.toml limits (memory_mb, pids, cpu_milli): {e}",
                    h.name
                ),
            )
        })
    }

    pub(super) fn zkey(pkgs: &[(String, PathBuf)]) -> String {
        pkgs.iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub(super) fn create(&self, h: &HandlerInfo) -> Result<(Sandbox, &'static str), ApiError> {
        // Counted before `stopping` is read (both SeqCst): shutdown either sees this creation
        // and waits for it, or this creation sees `stopping` and makes nothing.
        let _creating = Creating::new(&self.creating);
        if self.stopping.load(Ordering::SeqCst) {
            return Err(ApiError::new(
                503,
                "stopping",
                "the engine is shutting down".to_string(),
            ));
        }
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
                    Ok((sock, mut cg)) => {
                        if let Err(e) = self.tighten(h, &mut cg) {
                            drop(sock);
                            let _ = cg.mgr.kill_all(libc::SIGKILL);
                            self.pool.put(cg);
                            rootfs::remove_root(&root);
                            return Err(e);
                        }
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
            None => match self.start_cold(h, &root, flags, &setup, logw.as_raw_fd()) {
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
        // The whole "ready" by the start timeout, however its bytes come (the handler's
        // import-time code runs in the process that sends it).
        let ready_by = Instant::now() + Duration::from_millis(self.cfg.start_timeout_ms);
        match proto::recv_json_until(&sb.sock, ready_by) {
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
    pub(super) fn start_cold(
        &self,
        h: &HandlerInfo,
        root: &Path,
        flags: i32,
        setup: &Value,
        logw: RawFd,
    ) -> Result<(UnixStream, PoolCg), ApiError> {
        *self.cold_last_take.locked() = Instant::now();
        let spare = self.cold_spares.locked().pop();
        if let Some((a, mut cg)) = spare {
            if let Err(e) = self.tighten(h, &mut cg) {
                drop(a);
                let _ = cg.mgr.kill_all(libc::SIGKILL);
                self.pool.put(cg);
                return Err(e);
            }
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
        let mut cg = self
            .pool
            .get()
            .map_err(|e| ApiError::new(500, "engine", e.to_string()))?;
        if let Err(e) = self.tighten(h, &mut cg) {
            self.pool.put(cg);
            return Err(e);
        }
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
    pub(super) fn replenish_cold_spares(&self) {
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
    pub(super) fn early_flags(&self) -> i32 {
        let mut f = spawn::CLONE_NEWPID | spawn::CLONE_NEWIPC | spawn::CLONE_NEWUTS;
        if self.cfg.sandbox.network_ns {
            f |= spawn::CLONE_NEWNET;
        }
        f
    }

    /// Namespaces made when a spare is assigned a handler: what `flags` asks beyond the
    /// spare's early ones.
    pub(super) fn late_flags(&self, flags: i32) -> i32 {
        flags & (spawn::CLONE_NEWNS | spawn::CLONE_NEWNET) & !self.early_flags()
    }
}
