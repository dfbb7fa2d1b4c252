//! `create` (and the first half of `run`): the parent side of a container start.
//!
//! One clone3(2) puts the init into every new namespace at once (and, on cgroup v2, straight into
//! its cgroup with CLONE_INTO_CGROUP); no re-exec of the runtime, no copy of the binary. The
//! parent and the init talk over a SOCK_SEQPACKET pair (see sync.rs). Every failure path undoes
//! what was made: the init is killed, the cgroup removed, the state directory deleted.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::init::{self, InitCtx};
use crate::namespaces::{self, Plan};
use crate::notify_socket::{self, NotifySocket};
use crate::state::{self, State, Status, Store};
use crate::sync::{self, Channel};
use crate::sys::{self, cstr};
use crate::trace::Trace;

#[derive(Default, Clone)]
pub struct CreateOpts {
    pub id: String,
    pub bundle: PathBuf,
    pub pid_file: Option<PathBuf>,
    pub console_socket: Option<PathBuf>,
    pub no_pivot: bool,
    pub no_new_keyring: bool,
    pub preserve_fds: u32,
    pub systemd_cgroup: bool,
    /// The host's `NOTIFY_SOCKET` (the runtime's own environment): the container gets the
    /// notify directory and variable (see notify_socket.rs). None: nothing of it.
    pub notify_socket: Option<std::ffi::OsString>,
}

pub struct Created {
    pub state: State,
    /// pidfd of the init (we are its parent: `run` waits on it).
    pub pidfd: OwnedFd,
    pub config: Config,
    /// Where the pty master arrives, for a foreground `run` with a terminal.
    pub console_rx: Option<OwnedFd>,
    /// With [`CreateOpts::notify_socket`], for `run` in the foreground (no exec fifo): the
    /// container's notify socket, bound before the init was released.
    pub notify: Option<NotifySocket>,
}

/// Undo-log for a failing create.
struct Cleanup<'a> {
    store: &'a Store,
    id: String,
    dir_made: bool,
    cgroup: Option<sprout_cgroups::Manager>,
    child: Option<OwnedFd>,
    armed: bool,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(pidfd) = &self.child {
            let _ = sys::pidfd_send_signal(pidfd, libc::SIGKILL);
            // SAFETY: siginfo_t is plain data: all-zero is a valid value.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid writes one siginfo_t into the live local `info`; P_PIDFD with our
            // child's pidfd (borrowed, still open) reaps that child only.
            unsafe {
                libc::waitid(
                    libc::P_PIDFD,
                    pidfd.as_raw_fd() as libc::id_t,
                    &mut info,
                    libc::WEXITED,
                )
            };
        }
        if let Some(cg) = &self.cgroup {
            let _ = cg.destroy();
        }
        if self.dir_made {
            let _ = self.store.remove(&self.id);
        }
    }
}

/// [`sys::clone3`] straight into the cgroup of `cgroup_fd` (CLONE_INTO_CGROUP) when one is given.
/// Where the kernel refuses that placement (EOPNOTSUPP: the target is not a domain cgroup,
/// e.g. threaded or "domain invalid"; EBUSY: it has controllers in its cgroup.subtree_control;
/// EACCES/EPERM: no write access to its cgroup.procs or to that of the common ancestor), the
/// child is cloned where the caller is and the third value is `false`: the caller moves it with
/// a write to cgroup.procs, whose error then names the cgroup and the reason.
pub fn clone3_into(
    flags: u64,
    cgroup_fd: Option<&OwnedFd>,
) -> std::io::Result<(i32, Option<OwnedFd>, bool)> {
    match sys::clone3(flags, cgroup_fd) {
        Ok((pid, fd)) => Ok((pid, fd, cgroup_fd.is_some())),
        Err(e)
            if cgroup_fd.is_some()
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EBUSY | libc::EACCES | libc::EPERM)
                ) =>
        {
            sys::clone3(flags, None).map(|(pid, fd)| (pid, fd, false))
        }
        Err(e) => Err(e),
    }
}

/// `wait_for_start`: true for `create` (the init waits on the exec fifo for `start`), false for
/// `run`, which starts at once and needs no fifo.
pub fn create(
    store: &Store,
    opts: &CreateOpts,
    trace: &mut Trace,
    wait_for_start: bool,
) -> Result<Created> {
    state::validate_id(&opts.id)?;
    let layout = sprout_cgroups::Layout::detect()?;
    // The CPUs that the init and the network namespace helper start on (sys::other_cpus): once.
    let (other_cpu, helper_cpu) = sys::other_cpus();
    // Only one CPU besides ours: the helper and the init would share it (see the clone below).
    let two_cpus = helper_cpu.is_none();
    let helper_cpu = helper_cpu.or(other_cpu);
    // The channel to the init comes first: the network namespace helper sends on it.
    let (mut parent_chan, mut child_chan) =
        Channel::pair().map_err(|e| Error::os("socketpair", e))?;
    // The network namespace, made beside everything that follows (netns.rs), from as soon as
    // config.json says it is wanted: on v1 and hybrid hosts, where the init too makes it
    // before it is moved into its cgroups. (On pure v2 the helper starts in the container's
    // cgroup once it is made, below.)
    let mut netns_helper = None;
    let with_trace = trace.enabled();
    let mut config = Config::load_then(&opts.bundle, |raw| {
        if layout != sprout_cgroups::Layout::V2 && Plan::netns_beside_raw(raw) {
            netns_helper = crate::netns::spawn(&parent_chan, with_trace, helper_cpu, None).ok();
        }
    })?;
    if opts.notify_socket.is_some() {
        notify_socket::setup_spec(&mut config.spec, &store.dir(&opts.id));
    }
    trace.mark("config_parse");
    let spec = &config.spec;
    let process = spec
        .process()
        .as_ref()
        .ok_or_else(|| Error::msg("process: missing (nothing to run)"))?;
    sprout_process::check_lsm(
        process.apparmor_profile().as_deref(),
        process.selinux_label().as_deref(),
    )?;
    let linux = spec.linux().as_ref();
    let mut plan = Plan::from_spec(linux.and_then(|l| l.namespaces().as_deref()).unwrap_or(&[]))?;
    if netns_helper.is_some() && !plan.netns_beside() {
        // The raw reading disagreed with the whole config: the helper's namespace is not
        // wanted, and neither is its message, which goes with the channel.
        netns_helper = None;
        (parent_chan, child_chan) = Channel::pair().map_err(|e| Error::os("socketpair", e))?;
    }
    let time_offsets = linux
        .and_then(|l| l.time_offsets().as_ref())
        .filter(|o| !o.is_empty());
    if time_offsets.is_some() {
        if !plan.new_time {
            return Err(Error::msg(
                "linux.timeOffsets: needs a new time namespace in linux.namespaces",
            ));
        }
        plan.defer_time_ns();
    }
    if !(plan.new_mount || plan.join_mount) {
        warn_no_mount_ns(spec);
    }
    let terminal = process.terminal().unwrap_or(false);
    // A foreground `run` with a terminal and no --console-socket keeps the pty master itself.
    let mut console_rx = None;
    let console =
        match (&opts.console_socket, terminal) {
            (Some(p), true) => Some(crate::console::connect(p)?),
            (None, true) if !wait_for_start => {
                let (tx, rx) = crate::tty::console_pair()?;
                console_rx = Some(rx);
                Some(tx)
            }
            (None, true) => return Err(Error::msg(
                "process.terminal: a terminal needs --console-socket (or `run` in the foreground)",
            )),
            _ => None,
        };

    let dir = store.create_dir(&opts.id)?;
    let mut cleanup = Cleanup {
        store,
        id: opts.id.clone(),
        dir_made: true,
        cgroup: None,
        child: None,
        armed: true,
    };
    // Declared after `cleanup`, so dropped (the helper reaped) before it: on pure v2 the helper
    // is in the container's cgroup, which a failed create then removes without waiting for it.
    let mut netns_helper = netns_helper;
    trace.mark("state_dir");
    // The notify directory before the init can mount it; the socket of a foreground `run`
    // (whose init is not held by the fifo) before the init is released.
    let notify = match &opts.notify_socket {
        Some(host) => {
            notify_socket::make_dir(&dir)?;
            if wait_for_start {
                None
            } else {
                Some(NotifySocket::bind(&dir, host.clone())?)
            }
        }
        None => None,
    };

    let mut cg = cgroup_manager(&config, layout, &opts.id, opts.systemd_cgroup)?;
    // The whole state is known now; it is written before the cgroup directories are made and
    // once more after clone with the init's pid, so that `delete --force` can undo a create
    // killed at any point (cgroup_pending: the directories may be half made).
    let mut st = new_state(&config, &opts.id, &cg, plan.new_pid, opts.systemd_cgroup);
    store.save(&st)?;
    // On pure v2 the cgroup is made before clone, which places the init in it with
    // CLONE_INTO_CGROUP. On v1 and hybrid hosts the init has to be moved in with writes to
    // cgroup.procs anyway, so the cgroups are made after clone. On both, the limits (on v2 with
    // the device filter's eBPF program, the slow part: ~0.3 ms of the verifier) are applied
    // after clone: the parent's cgroup work then overlaps the init's namespace and mount set-up
    // (its network namespace is ~0.3 ms on its own; it needs the directories, DIRS, at its cgroup
    // mount and GO only before it locks down) instead of preceding the clone. Nothing of the
    // container runs before GO, which follows the limits. runc, too, applies them to an init
    // already in its cgroup.
    let cgroup_first = layout == sprout_cgroups::Layout::V2;
    if cgroup_first {
        // The check that a just-made parent delegated its controllers waits for `apply`.
        cg.create_for_clone(linux.and_then(|l| l.resources().as_ref()))?;
        cleanup.cgroup = Some(cg.clone());
        trace.mark("cgroup");
    } else {
        // Layout detection, the cgroup paths and the first state write: their own phase, so
        // that the next one (seccomp) measures only itself.
        trace.mark("cgroup_plan");
    }
    // On v1 and hybrid hosts (cgroupfs driver; no new or joined user or cgroup namespace, no
    // joined mount namespace: the init must reach the host's cgroup files as root) the init joins
    // its v1 hierarchies itself after GO (JOIN), and on a hybrid host it is cloned into the
    // cgroup2 leaf, made now: nothing writes its pid to a cgroup.procs. Such a write takes the
    // kernel's global cgroup_threadgroup_rwsem, which after an idle spell first waits for an RCU
    // grace period, 5–23 ms on the development host: every start that did not follow another
    // within ~20 ms paid it (runc and crun do).
    let self_join = !cgroup_first
        && !opts.systemd_cgroup
        && !plan.new_user
        && !plan.new_cgroup
        && !plan.joins.iter().any(|(t, _)| {
            matches!(
                t,
                oci_spec::runtime::LinuxNamespaceType::User
                    | oci_spec::runtime::LinuxNamespaceType::Mount
                    | oci_spec::runtime::LinuxNamespaceType::Cgroup
            )
        });
    let cg_fd = if cgroup_first {
        cg.v2_dir_fd()
    } else if self_join {
        let fd = cg.make_tracking_leaf();
        if fd.is_some() {
            cleanup.cgroup = Some(cg.clone());
        }
        fd
    } else {
        None
    };

    // Pure v2: the helper starts now, cloned into the container's cgroup (as the init will be):
    // its namespace is charged there, as the init's own would be. It then runs beside the
    // seccomp program's load, the clone and the init's first steps (~0.25 ms on the 16-core
    // pure-v2 machine) instead of the ~0.5 ms unshare running on the init's path. It is gone
    // (reaped) before GO: nothing of it is in the cgroup once the container runs. Only in a
    // cgroup this create made, which has no limits before `cgroup_apply`: in an existing one a
    // pids.max would count the helper and could refuse the init's clone.
    if cgroup_first && cg.made_unified_leaf() && netns_helper.is_none() && plan.netns_beside() {
        if let Some(fd) = &cg_fd {
            netns_helper = crate::netns::spawn(&parent_chan, with_trace, helper_cpu, Some(fd)).ok();
        }
    }

    let seccomp = match linux.and_then(|l| l.seccomp().as_ref()) {
        Some(profile) => {
            let (p, src) = sprout_seccomp::prepare(profile, Some(&store.seccomp_cache()))?;
            trace.mark(if src == sprout_seccomp::Source::Cache {
                "seccomp_cache_hit"
            } else {
                "seccomp_compile"
            });
            Some(p)
        }
        None => None,
    };

    let creating = dir.join(state::CREATING_FILE);
    std::fs::File::create(&creating).map_err(|e| Error::os("creating the state marker", e))?;
    let fifo = if wait_for_start {
        let path = dir.join(state::FIFO_FILE);
        let c = cstr(&path);
        // SAFETY: mkfifo reads the NUL-terminated CString `c`, alive for the call.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } < 0 {
            return Err(Error::last_os("creating the exec fifo"));
        }
        // SAFETY: open reads the NUL-terminated CString `c`, alive for the call; flags only, no
        // mode.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("opening the exec fifo"));
        }
        // SAFETY: open succeeded, so `fd` is a new descriptor that nothing else owns.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    } else {
        None
    };

    if let Some(pidns) = &plan.pid_join {
        // SAFETY: setns takes an fd (the borrowed, open `pidns`) and a flag; CLONE_NEWPID only
        // changes the pid namespace of the children we clone from here on.
        if unsafe { libc::setns(pidns.as_raw_fd(), libc::CLONE_NEWPID) } < 0 {
            return Err(Error::last_os(
                "linux.namespaces: joining the pid namespace",
            ));
        }
    }
    let hooks = spec.hooks().as_ref();
    let has_runtime_hooks = hooks.is_some_and(|h| {
        h.create_runtime().as_ref().is_some_and(|v| !v.is_empty())
            || h.prestart().as_ref().is_some_and(|v| !v.is_empty())
    });
    let no_devices = std::collections::HashMap::new();
    let net_devices = linux
        .and_then(|l| l.net_devices().as_ref())
        .unwrap_or(&no_devices);
    // The exec trampoline's memfd, made here (the init would make it on its own critical path;
    // here the init is not born yet). A failure leaves it to the init, which reports it.
    let trampoline = (!init::has_start_container_hooks(spec))
        .then(crate::trampoline::memfd)
        .and_then(|r| r.ok());
    let ctx = InitCtx {
        id: &opts.id,
        spec,
        rootfs: &config.rootfs,
        bundle: &config.bundle,
        plan: &plan,
        chan: &child_chan,
        fifo: fifo.as_ref(),
        console: console.as_ref(),
        console_is_ours: console_rx.is_some(),
        seccomp: seccomp.as_ref(),
        no_pivot: opts.no_pivot,
        no_new_keyring: opts.no_new_keyring,
        preserve_fds: opts.preserve_fds,
        layout,
        // The init stops in its namespaces (HOOKS) for the hooks and for linux.netDevices.
        has_runtime_hooks: has_runtime_hooks || !net_devices.is_empty(),
        trace: trace.enabled(),
        netns_sent: netns_helper.is_some(),
        trampoline: trampoline.as_ref().map(|t| t.as_raw_fd()),
        self_join,
        in_cgroup: false,
    };
    trace.mark("prepare");

    let (pid, pidfd, joined) =
        clone3_into(plan.clone_flags, cg_fd.as_ref()).map_err(|e| Error::os("clone3", e))?;
    if pid == 0 {
        drop(parent_chan);
        init::run(&InitCtx {
            in_cgroup: joined && cgroup_first,
            ..ctx
        });
    }
    let pidfd = pidfd.expect("pidfd");
    drop(child_chan);
    drop(trampoline);
    let (pid, pidfd) = if plan.fork_for_pid {
        adopt_pid1(&parent_chan, pid, pidfd)?
    } else {
        (pid, pidfd)
    };
    // The parent's cgroup work and the init's set-up overlap only if the init gets a CPU of its
    // own now; its affinity is reset before GO (and on v1 before it joins its cgroups: cpuset),
    // long before it runs anything of the container. With two CPUs on pure v2 the network
    // namespace helper already has the other one, in its unshare (~0.6 ms, not preemptible on a
    // PREEMPT_NONE kernel): the init stays on ours, where the parent has only `cgroup_apply`
    // left before it waits (2-core host, emulated pure v2, 150 interleaved rounds: minimal
    // 2.68 -> 2.46 ms, podman-default 3.01 -> 2.86). On v1 and hybrid hosts the parent still
    // makes the cgroups after clone, and sharing its CPU measured slower (3.36 -> 3.53 ms).
    if let Some(cpu) = other_cpu
        .as_ref()
        .filter(|_| !(two_cpus && cgroup_first && netns_helper.is_some()))
    {
        sys::move_to_cpu(pid, cpu);
    }
    drop(console);
    trace.mark("clone");
    cleanup.child = Some(pidfd);
    st.pid = pid;
    let mut init_joins = false;
    if !cgroup_first {
        // mkdir only (what `delete` has to undo); apply after the state names the directories.
        // The v1 cpusets are filled once the init has them (below).
        cg.defer_cpuset_fill();
        cg.create_for(linux.and_then(|l| l.resources().as_ref()))?;
        cleanup.cgroup = Some(cg.clone());
        // The init may mount its cgroups now, before it is moved in (the slow part on v1:
        // ~10 cgroup.procs writes, the first one waiting for an RCU grace period), unless it
        // has to be inside them first: a cgroup namespace is rooted where its creator is, and
        // with systemd the directories exist only once the unit does (`add_pid`).
        if !plan.new_cgroup && !opts.systemd_cgroup {
            if let Some(b) = crate::rootfs::planned_cgroup_binds(&cg) {
                let payload = crate::rootfs::encode_cgroup_binds(&b);
                if payload.len() < 4096 {
                    send_or_init_error(&parent_chan, sync::DIRS, &payload)?;
                }
            }
        }
        if self_join {
            // Always sent (the init waits for it); empty where the list is too long for one
            // message: then we move the init in.
            let mut payload = crate::rootfs::encode_cgroup_binds(&cg.self_joins());
            init_joins = payload.len() < 4096;
            if !init_joins {
                payload.clear();
            }
            send_or_init_error(&parent_chan, sync::JOIN, &payload)?;
        }
        // The cpuset copy from the parent, left empty by `create_for` so that the init gets
        // DIRS sooner (it waits there): before anything joins them or sets their limits
        // (nothing can join an empty cpuset).
        cg.fill_cpusets()?;
    }
    // Read once the init has its directories (DIRS): on v1 and hybrid hosts it waits for them.
    st.pid_start = sys::proc_start_time(pid).map(|s| s.0).unwrap_or(0);
    st.cgroup = Some(cg.clone());
    st.cgroup_pending = false;
    store.save(&st)?;

    // Id maps (the child asks first if it made its user namespace with unshare), then the cgroup,
    // then GO.
    if plan.new_user {
        if plan.clone_flags & libc::CLONE_NEWUSER as u64 == 0 {
            expect(&parent_chan, sync::MAPS)?;
        }
        let l = linux.expect("user namespace implies linux");
        namespaces::write_id_maps(
            pid,
            l.uid_mappings().as_deref().unwrap_or(&[]),
            l.gid_mappings().as_deref().unwrap_or(&[]),
        )?;
        // Bind sources are looked up by us, not by the root of the new user namespace (a
        // clone-made mount namespace only: one unshared later would not hold these mounts).
        let both = (libc::CLONE_NEWUSER | libc::CLONE_NEWNS) as u64;
        if plan.clone_flags & both == both {
            if let (Some(pfd), Some(mounts)) = (cleanup.child.as_ref(), spec.mounts().as_deref()) {
                for (i, fd) in
                    crate::rootfs::open_bind_sources(pfd, &config.bundle, &config.rootfs, mounts)
                {
                    parent_chan
                        .send_fd_payload(sync::SOURCE, i.to_string().as_bytes(), fd.as_raw_fd())
                        .map_err(|e| Error::os("sending a bind source to the init", e))?;
                }
            }
            trace.mark("bind_sources");
        }
    }
    // Id-mapped bind mounts: the trees are made here (the init's maps are written) and sent
    // before GO; the init waits for GO at its first id-mapped mount.
    if let Some(mounts) = spec
        .mounts()
        .as_deref()
        .filter(|m| m.iter().any(crate::idmap::is_idmapped))
    {
        for (i, tree) in
            crate::idmap::make_trees(&config.bundle, &config.rootfs, mounts, linux, pid)?
        {
            parent_chan
                .send_fd_payload(sync::TREE, i.to_string().as_bytes(), tree.as_raw_fd())
                .map_err(|e| Error::os("sending an id-mapped mount to the init", e))?;
        }
        trace.mark("idmap_trees");
    }
    apply_resources(&cg, linux)?;
    trace.mark(if cgroup_first {
        "cgroup_apply"
    } else {
        "cgroup"
    });
    // As runc: the init may run on every CPU (the kernel clamps the mask to its cpuset), not only
    // on the one it was started on (`other_cpu`) nor on the runtime's own (a `taskset`
    // caller's). Before the join, so the cpuset decides.
    crate::numa::reset_affinity(pid);
    if init_joins {
        if !joined {
            cg.add_pid_tracking(pid)?;
        }
    } else if !(joined && cgroup_first) {
        cg.add_pid(pid)?;
    }
    if let Some(uid) = cgroup_owner(spec, plan.new_user && plan.new_cgroup) {
        cg.delegate_to(uid)?;
    }
    // The helper sent the init its network namespace long ago; one that failed is answered
    // here, before GO (the init, waiting for NETNS first, then makes the namespace itself).
    // (On pure v2 the helper may still be at work: GO then waits for it, which costs nothing,
    // as the init waits for its NETNS before it needs GO. Reaping it only once the init is
    // ready measured no faster on the 16-core machine, 2026-11-27.)
    if let Some(h) = netns_helper.take() {
        finish_netns_helper(h, &parent_chan, trace, two_cpus && !cgroup_first)?;
    }
    send_or_init_error(&parent_chan, sync::GO, b"")?;
    trace.mark("cgroup_join");

    let mut trampoline_follows = false;
    loop {
        let (tag, payload, fd) = parent_chan
            .recv()
            .map_err(|e| Error::os("waiting for the init", e))?;
        match tag {
            sync::READY_EXEC => {
                trace.mark("init");
                trace.add_remote("init.", &payload);
                trampoline_follows = true;
                break;
            }
            // No trampoline for this init (its message says why): it waits for `start` itself.
            sync::TRAMPOLINE_OFF => warn_no_trampoline(&st.id, &payload),
            sync::HOOKS => {
                // The init is in its namespaces: the devices are there before the hooks run
                // and before anything of the container does.
                crate::netdev::move_all(net_devices, pid)?;
                // The create operation is still under way: "creating" (as runc; runtime-tools'
                // hooks_stdin expects "created" here, see docs/compliance.md).
                let sj = serde_json::to_vec(&st.spec_json(Status::Creating)).unwrap_or_default();
                if let Some(h) = hooks {
                    crate::hooks::run_all("prestart", h.prestart().as_ref(), &sj)?;
                    crate::hooks::run_all("createRuntime", h.create_runtime().as_ref(), &sj)?;
                }
                parent_chan
                    .send(sync::GO, b"")
                    .map_err(|e| Error::os("resuming the init", e))?;
                trace.reset_last();
            }
            // Forwarded at once: the init's next syscalls may be ones its filter notifies, and
            // they wait for the agent (runc's seccomp-notify "important syscalls").
            sync::LISTENER => {
                if let Some(l) = fd {
                    send_listener(spec, &st, Status::Creating, l)?;
                }
            }
            sync::READY => {
                trace.mark("init");
                trace.add_remote("init.", &payload);
                break;
            }
            // An id-mapped mount whose source is inside the rootfs: made now, in the init's
            // mount namespace, once the mounts before it are there.
            sync::TREE_REQ => {
                let i: usize = payload.trim().parse().map_err(|_| {
                    Error::msg("the init asked for an id-mapped tree without index")
                })?;
                let pidfd = cleanup
                    .child
                    .as_ref()
                    .ok_or_else(|| Error::msg("the init has no pidfd"))?;
                let tree = crate::idmap::make_late_tree(
                    &config.bundle,
                    &config.rootfs,
                    spec.mounts().as_deref().unwrap_or(&[]),
                    linux,
                    pid,
                    pidfd,
                    i,
                )?;
                parent_chan
                    .send_fd_payload(sync::TREE, i.to_string().as_bytes(), tree.as_raw_fd())
                    .map_err(|e| Error::os("sending an id-mapped mount to the init", e))?;
            }
            sync::ERROR => return Err(Error::from_wire(&payload)),
            0 => return Err(Error::msg("the container's init exited during setup")),
            other => {
                return Err(Error::msg(format!(
                    "unexpected message {other} from the init"
                )))
            }
        }
    }

    std::fs::write(dir.join(state::CONFIG_FILE), &config.raw)
        .map_err(|e| Error::os("saving config", e))?;
    if let Some(p) = &opts.pid_file {
        write_pid_file(p, pid)?;
    }
    trace.mark("state_save");
    if trampoline_follows {
        // The init is exec'ing the trampoline meanwhile; only once it has (its channel end
        // closed at execve) is the container `created`: from then on nothing entering it can
        // see a process backed by our binary.
        wait_trampoline(&parent_chan, &st.id)?;
        trace.mark("trampoline");
    }
    std::fs::remove_file(&creating).map_err(|e| Error::os("removing the state marker", e))?;
    cleanup.armed = false;
    let pidfd = cleanup.child.take().expect("pidfd");
    Ok(Created {
        state: st,
        pidfd,
        config,
        console_rx,
        notify,
    })
}

/// Reap the network namespace helper; the init gets a NETNS without a namespace if the helper
/// could not send one.
/// `join_us`: the helper shares its CPU with the init (two CPUs, v1/hybrid): it finishes on ours.
fn finish_netns_helper(
    h: crate::netns::Pending,
    chan: &Channel,
    trace: &mut Trace,
    join_us: bool,
) -> Result<()> {
    use crate::netns::Finish;
    let (t0, t1) = h.finish(chan, join_us).map_err(|e| match e {
        Finish::Send(e) => Error::os("sending the init word of its network namespace", e),
        Finish::Loopback(e) => Error::os("bringing up lo in the new network namespace", e),
    })?;
    if t1 > t0 {
        trace.add_remote("netns.", &format!("helper={}", t1 - t0));
    }
    Ok(())
}

/// The container's cgroup manager (not made yet) for `config`'s cgroupsPath.
pub(crate) fn cgroup_manager(
    config: &Config,
    layout: sprout_cgroups::Layout,
    id: &str,
    systemd: bool,
) -> Result<sprout_cgroups::Manager> {
    let path = config
        .spec
        .linux()
        .as_ref()
        .and_then(|l| l.cgroups_path().as_ref())
        .and_then(|p| p.to_str());
    let m = sprout_cgroups::Manager::with_layout(layout, path, id, systemd)?;
    if let Some(a) = config.spec.annotations() {
        m.set_systemd_annotations(a)?;
    }
    Ok(m)
}

/// The host uid that gets the container's cgroup (`Manager::delegate_to`), as runc decides
/// it: with a user namespace and a cgroup namespace of its own (`private`), a cgroup
/// filesystem mounted writable on /sys/fs/cgroup, and the process's uid mapped; the host uid
/// of `process.user.uid`.
fn cgroup_owner(spec: &oci_spec::runtime::Spec, private: bool) -> Option<u32> {
    if !private {
        return None;
    }
    let rw_cgroupfs = spec.mounts().as_deref()?.iter().any(|m| {
        let cg = matches!(m.typ().as_deref(), Some("cgroup" | "cgroup2"))
            || m.source().as_deref() == Some(Path::new("cgroup"));
        // components() drops repeated and trailing slashes and `.`, as filepath.Clean.
        cg && m
            .destination()
            .components()
            .eq(Path::new("/sys/fs/cgroup").components())
            && !m
                .options()
                .as_deref()
                .unwrap_or(&[])
                .iter()
                .any(|o| o == "ro")
    });
    if !rw_cgroupfs {
        return None;
    }
    let uid = spec.process().as_ref().map_or(0, |p| p.user().uid());
    spec.linux()
        .as_ref()?
        .uid_mappings()
        .as_deref()?
        .iter()
        .find(|m| uid >= m.container_id() && uid - m.container_id() < m.size())
        .map(|m| m.host_id() + (uid - m.container_id()))
}

/// The state of a container being made from `config` (no init yet, its cgroup pending), as
/// `create` and `restore` first write it.
pub(crate) fn new_state(
    config: &Config,
    id: &str,
    cg: &sprout_cgroups::Manager,
    own_pid_ns: bool,
    systemd: bool,
) -> State {
    let spec = &config.spec;
    State {
        id: id.to_string(),
        pid: 0,
        pid_start: 0,
        bundle: config.bundle.clone(),
        rootfs: config.rootfs.clone(),
        created: sys::now_rfc3339(),
        owner: String::new(),
        annotations: spec.annotations().clone().unwrap_or_default(),
        cgroup: Some(cg.clone()),
        own_pid_ns,
        systemd_cgroup: systemd,
        cgroup_pending: true,
        has_hooks: spec.hooks().as_ref().is_some_and(|h| {
            h.poststart().as_ref().is_some_and(|v| !v.is_empty())
                || h.poststop().as_ref().is_some_and(|v| !v.is_empty())
        }),
    }
}

/// `Plan::fork_for_pid`: the process we cloned forks the container's pid 1 (our child too,
/// CLONE_PARENT), reports its pid and exits. Reap it and go on with pid 1 and a pidfd on it (our
/// unreaped child: its pid cannot be reused meanwhile).
fn adopt_pid1(chan: &Channel, first: i32, first_fd: OwnedFd) -> Result<(i32, OwnedFd)> {
    let r = match chan.recv() {
        Ok((sync::PID1, payload, _)) => payload
            .trim()
            .parse::<i32>()
            .map_err(|_| Error::msg(format!("bad pid {payload:?} from the init"))),
        Ok((sync::ERROR, payload, _)) => Err(Error::from_wire(&payload)),
        Ok(_) => Err(Error::msg("the container's init exited during setup")),
        Err(e) => Err(Error::os("waiting for the init", e)),
    };
    if r.is_err() {
        let _ = sys::pidfd_send_signal(&first_fd, libc::SIGKILL);
    }
    // SAFETY: waitpid on our own child `first` (just exited or killed); null status is allowed.
    unsafe { libc::waitpid(first, std::ptr::null_mut(), 0) };
    let pid = r?;
    match sys::pidfd_open(pid) {
        Ok(fd) => Ok((pid, fd)),
        Err(e) => {
            // Our unreaped child (CLONE_PARENT): end it rather than leave it running.
            // SAFETY: kill/waitpid on our own child `pid`; null status is allowed.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            Err(Error::os("pidfd_open of the container's pid 1", e))
        }
    }
}

/// Send to the init; when it is gone already, its own message says why.
fn send_or_init_error(chan: &Channel, tag: u8, payload: &[u8]) -> Result<()> {
    chan.send(tag, payload).map_err(|e| match chan.recv() {
        Ok((sync::ERROR, msg, _)) => Error::from_wire(&msg),
        _ => Error::os("starting the init", e),
    })
}

/// Without a mount namespace the container is chrooted into its rootfs in the host's mount
/// namespace, and sprout does not mount there (runc makes the host's `/` a recursive slave and
/// leaves the container's mounts in the host's table): what the config asks of mounts is not
/// done, and said once.
fn warn_no_mount_ns(spec: &oci_spec::runtime::Spec) {
    let linux = spec.linux().as_ref();
    let mut skipped = Vec::new();
    if spec.mounts().as_ref().is_some_and(|m| !m.is_empty()) {
        skipped.push("mounts");
    }
    if linux
        .and_then(|l| l.masked_paths().as_ref())
        .is_some_and(|m| !m.is_empty())
    {
        skipped.push("linux.maskedPaths");
    }
    if linux
        .and_then(|l| l.readonly_paths().as_ref())
        .is_some_and(|m| !m.is_empty())
    {
        skipped.push("linux.readonlyPaths");
    }
    if spec.root().as_ref().and_then(|r| r.readonly()) == Some(true) {
        skipped.push("root.readonly");
    }
    if !skipped.is_empty() {
        crate::log::warn(&format!(
            "{}: not applied: linux.namespaces has no mount namespace, and sprout does not \
             mount in the host's",
            skipped.join(", ")
        ));
    }
}

fn warn_no_trampoline(id: &str, why: &str) {
    crate::log::warn(&format!(
        "container {id}: {why}; /proc/<init>/exe is the runtime's binary until start (CVE-2019-5736)"
    ));
}

fn wait_trampoline(chan: &Channel, id: &str) -> Result<()> {
    let (tag, payload, _) = chan
        .recv()
        .map_err(|e| Error::os("waiting for the init", e))?;
    match tag {
        0 => Ok(()),
        sync::TRAMPOLINE_OFF => {
            warn_no_trampoline(id, &payload);
            Ok(())
        }
        sync::ERROR => Err(Error::from_wire(&payload)),
        other => Err(Error::msg(format!(
            "unexpected message {other} from the init"
        ))),
    }
}

/// `linux.resources` with the default device rules after its own. Also without
/// `linux.resources`: the device rules are an allowlist, so a config that sets no limits still
/// gets the default devices and no others (as with runc), not every device of the host.
pub(crate) fn apply_resources(
    cg: &sprout_cgroups::Manager,
    linux: Option<&oci_spec::runtime::Linux>,
) -> Result<()> {
    let none = oci_spec::runtime::LinuxResources::default();
    let res = sprout_cgroups::with_default_device_rules(
        linux.and_then(|l| l.resources().as_ref()).unwrap_or(&none),
        linux.and_then(|l| l.devices().as_deref()).unwrap_or(&[]),
    );
    cg.apply(&res)?;
    Ok(())
}

fn expect(chan: &Channel, want: u8) -> Result<()> {
    let (tag, payload, _) = chan
        .recv()
        .map_err(|e| Error::os("waiting for the init", e))?;
    match tag {
        t if t == want => Ok(()),
        sync::ERROR => Err(Error::from_wire(&payload)),
        _ => Err(Error::msg("the container's init exited during setup")),
    }
}

/// Send the seccomp notify fd and the state to linux.seccomp.listenerPath.
/// `status`: creating (the init's filter) or running (an `exec`'s).
pub(crate) fn send_listener(
    spec: &oci_spec::runtime::Spec,
    st: &State,
    status: Status,
    fd: OwnedFd,
) -> Result<()> {
    let sc = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref());
    let Some(path) = sc.and_then(|s| s.listener_path().as_ref()) else {
        return Ok(());
    };
    let sock = std::os::unix::net::UnixStream::connect(path).map_err(|e| {
        // runc's words after the field: its clients and tests look for them.
        Error::os(
            format_args!(
                "linux.seccomp.listenerPath: failed to connect with seccomp agent at {}",
                path.display()
            ),
            e,
        )
    })?;
    let mut msg = serde_json::json!({
        "ociVersion": crate::config::OCI_VERSION,
        "fds": ["seccompFd"],
        "pid": st.pid,
        "metadata": sc.and_then(|s| s.listener_metadata().clone()).unwrap_or_default(),
        "state": st.spec_json(status),
    });
    msg["state"]["status"] = status.as_str().into();
    let data = serde_json::to_vec(&msg).unwrap_or_default();
    sys::send_fd(sock.as_raw_fd(), &data, fd.as_raw_fd())
        .map_err(|e| Error::os("linux.seccomp.listenerPath: sending the listener fd", e))
}

pub fn write_pid_file(p: &Path, pid: i32) -> Result<()> {
    // Absolute path for the temp file so rename stays on one filesystem.
    state::write_atomic(p, pid.to_string().as_bytes()).map_err(|e| e.context("--pid-file"))
}
