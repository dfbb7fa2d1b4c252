//! `exec`: start another process inside a running container. The runtime forks (clone3, fork
//! semantics: no re-exec of itself); the child joins every namespace of the init in one
//! setns(pidfd) call (the pid namespace for its children only), applies the process's attributes
//! and drops to the process's credentials and seccomp filter, all still invisible to the
//! container (it is in the host's pid namespace). It then execs the trampoline (trampoline.rs),
//! which forks the process that enters the container's pid namespace (CLONE_PARENT: it is our
//! child) and execs the program. So no process the container can see is ever backed by our
//! binary or holds more privilege than the container (CVE-2019-5736, and ptrace by a container
//! holding CAP_SYS_PTRACE).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

use oci_spec::runtime::{Capability, LinuxNamespaceType, Process, Spec};
use rustix::process::{Gid, Uid};

use crate::bail;
use crate::config::parse_spec;
use crate::create::clone3_into;
use crate::error::{Error, Kind, Result};
use crate::init;
use crate::state::{self, Status, Store};
use crate::sync::{self, Channel};
use crate::sys::{self, cstr};
use crate::trace::Trace;

#[derive(Default, Clone)]
pub struct ExecOpts {
    pub id: String,
    pub process_json: Option<PathBuf>,
    pub args: Vec<String>,
    pub tty: bool,
    pub cwd: Option<PathBuf>,
    pub env: Vec<String>,
    pub user: Option<String>,
    pub additional_gids: Vec<u32>,
    pub caps: Vec<String>,
    pub detach: bool,
    pub pid_file: Option<PathBuf>,
    pub console_socket: Option<PathBuf>,
    pub preserve_fds: u32,
    pub process_label: Option<String>,
    pub apparmor: Option<String>,
    pub no_new_privs: bool,
    /// Exec into a paused container too (runc's --ignore-paused): the process starts frozen and
    /// runs once the container is resumed.
    pub ignore_paused: bool,
    /// Send a pidfd for the process to this unix socket (runc's --pidfd-socket).
    pub pidfd_socket: Option<PathBuf>,
    /// runc's --cgroup: `[CTRL[,CTRL]:]PATH`, an existing sub-cgroup of the container's cgroup
    /// to run the process in (repeatable with a controller prefix, cgroup v1 only).
    pub cgroup: Vec<String>,
}

/// Parsed `--cgroup` arguments: the PATH for every hierarchy, (controller, PATH) pairs.
type SubCgroups<'a> = (Option<&'a str>, Vec<(String, String)>);

/// `--cgroup` arguments as runc parses them: one PATH for every hierarchy, or
/// `CTRL[,CTRL]:PATH` per v1 controller (each controller once).
fn parse_sub_cgroups(args: &[String]) -> Result<SubCgroups<'_>> {
    let mut all = None;
    let mut per = Vec::<(String, String)>::new();
    for a in args {
        match a.split_once(':') {
            Some((ctrls, path)) => {
                for c in ctrls.split(',') {
                    if c.is_empty() {
                        bail!("--cgroup {a:?}: empty <controller> prefix");
                    }
                    if per.iter().any(|(x, _)| x == c) {
                        bail!("--cgroup: controller {c} given more than once");
                    }
                    per.push((c.to_string(), path.to_string()));
                }
            }
            None if args.len() == 1 => all = Some(a.as_str()),
            None => bail!("--cgroup {a:?}: missing <controller>: prefix (a PATH alone can only be given once)"),
        }
    }
    Ok((all, per))
}

fn build_process(spec: &Spec, o: &ExecOpts) -> Result<Process> {
    if let Some(p) = &o.process_json {
        let raw =
            std::fs::read(p).map_err(|e| Error::os(format!("--process {}", p.display()), e))?;
        let mut v: serde_json::Value = serde_json::from_slice(&raw)
            .map_err(|e| Error::msg(format!("process.json: invalid JSON: {e}")))?;
        if let Some(obj) = v.as_object_mut() {
            // runc's Process.User is a struct, not a pointer: absent means uid 0, gid 0.
            obj.entry("user")
                .or_insert_with(|| serde_json::json!({"uid": 0, "gid": 0}));
        }
        crate::config::drop_unknown_caps(&mut v, "process.json: capabilities")?;
        crate::config::map_scheduler_flags(&mut v, "process.json: scheduler.flags")?;
        let proc: Process = crate::config::spec_from_value(v, "process.json")?;
        if proc.args().as_ref().is_none_or(|a| a.is_empty()) {
            bail!("process.json: args: must name at least the program to run");
        }
        return Ok(proc);
    }
    if o.args.is_empty() {
        bail!("exec: no command given (pass ARGS or --process)");
    }
    let mut p = spec.process().clone().unwrap_or_default();
    p.set_args(Some(o.args.clone()));
    p.set_terminal(Some(o.tty));
    if let Some(c) = &o.cwd {
        p.set_cwd(c.clone());
    }
    if !o.env.is_empty() {
        let mut env = p.env().clone().unwrap_or_default();
        for kv in &o.env {
            let key = kv.split('=').next().unwrap_or("");
            env.retain(|e| e.split('=').next() != Some(key));
            env.push(kv.clone());
        }
        p.set_env(Some(env));
    }
    if let Some(u) = &o.user {
        let (uid, gid) = match u.split_once(':') {
            Some((a, b)) => (a, Some(b)),
            None => (u.as_str(), None),
        };
        let uid: u32 = uid.parse().map_err(|_| {
            Error::msg(format!(
                "--user {u:?}: expected UID[:GID] (names are not resolved)"
            ))
        })?;
        let mut user = p.user().clone();
        user.set_uid(uid);
        if let Some(g) = gid {
            user.set_gid(
                g.parse()
                    .map_err(|_| Error::msg(format!("--user {u:?}: bad GID")))?,
            );
        }
        if !o.additional_gids.is_empty() {
            user.set_additional_gids(Some(o.additional_gids.clone()));
        }
        p.set_user(user);
    }
    if !o.caps.is_empty() {
        let mut caps = p.capabilities().clone().unwrap_or_default();
        for name in &o.caps {
            let n = match sprout_process::classify_cap_name(name) {
                sprout_process::CapNameKind::Known(n) => n,
                sprout_process::CapNameKind::Unknown => {
                    crate::log::warn(&format!(
                        "--cap {name:?}: ignoring a capability unknown to this runtime and kernel"
                    ));
                    continue;
                }
                sprout_process::CapNameKind::Invalid => {
                    bail!("--cap {name:?}: not a capability name")
                }
            };
            let full = sprout_process::cap_name(n).unwrap_or_default();
            let cap: Capability = serde_json::from_value(serde_json::Value::String(full.into()))
                .map_err(|_| Error::msg(format!("--cap {name:?}: unknown capability")))?;
            // Added to bounding, effective, permitted and ambient; never to inheritable
            // (CVE-2022-29162).
            let add = |set: Option<std::collections::HashSet<Capability>>| {
                let mut s = set.unwrap_or_default();
                s.insert(cap);
                Some(s)
            };
            caps.set_bounding(add(caps.bounding().clone()));
            caps.set_effective(add(caps.effective().clone()));
            caps.set_permitted(add(caps.permitted().clone()));
            caps.set_ambient(add(caps.ambient().clone()));
        }
        p.set_capabilities(Some(caps));
    }
    if let Some(l) = &o.process_label {
        p.set_selinux_label(Some(l.clone()));
    }
    if let Some(a) = &o.apparmor {
        p.set_apparmor_profile(Some(a.clone()));
    }
    if o.no_new_privs {
        p.set_no_new_privileges(Some(true));
    }
    Ok(p)
}

/// Returns the exit code to exit with (0 when detached).
pub fn exec(store: &Store, o: &ExecOpts, trace: &mut Trace) -> Result<i32> {
    let st = store.load(&o.id)?;
    match st.status(store) {
        Status::Running | Status::Created => {}
        Status::Paused if o.ignore_paused => {}
        // runc's words (cgroups.bats "runc exec should refuse a paused container").
        Status::Paused => {
            bail!(
                kind = Kind::State,
                "cannot exec in a paused container (use --ignore-paused to override)"
            )
        }
        s => bail!(
            kind = Kind::State,
            "container {:?} is {}: cannot exec in it",
            o.id,
            s.as_str()
        ),
    }
    let raw = std::fs::read(store.dir(&o.id).join(state::CONFIG_FILE))
        .map_err(|e| Error::os("container config", e))?;
    let spec = parse_spec(&raw, "container config")?;
    let process = build_process(&spec, o)?;
    sprout_process::check_lsm(
        process.apparmor_profile().as_deref(),
        process.selinux_label().as_deref(),
    )?;
    let tty = process.terminal().unwrap_or(false);
    // runc: a foreground exec with a terminal and no --console-socket gets a pty that sprout
    // holds itself (an internal socketpair, as foreground `run`) and proxies to its own stdio.
    let mut console_rx = None;
    let console = match (&o.console_socket, tty) {
        (Some(p), true) => Some(crate::console::connect(p)?),
        (None, true) if !o.detach => {
            let (tx, rx) = crate::tty::console_pair()?;
            console_rx = Some(rx);
            Some(tx)
        }
        (None, true) => bail!("exec --tty --detach needs --console-socket"),
        _ => None,
    };
    let pidfd_socket = o
        .pidfd_socket
        .as_deref()
        .map(crate::pidfd_socket::PidfdSocket::connect)
        .transpose()?;
    let linux = spec.linux().as_ref();
    let mut types: Vec<LinuxNamespaceType> = linux
        .and_then(|l| l.namespaces().as_ref())
        .map(|v| v.iter().map(|n| n.typ()).collect())
        .unwrap_or_default();
    // An init CRIU restored lives in a time namespace criu made (its clocks go on from the
    // checkpoint) that the config does not name: the process joins it too, or the next
    // checkpoint holds a tree criu cannot restore (a child in another time namespace).
    if !types.contains(&LinuxNamespaceType::Time) && other_time_ns(st.pid) {
        types.push(LinuxNamespaceType::Time);
    }
    let seccomp = match linux.and_then(|l| l.seccomp().as_ref()) {
        Some(p) => Some(sprout_seccomp::prepare(p, Some(&store.seccomp_cache()))?.0),
        None => None,
    };
    let mpol = match linux.and_then(|l| l.memory_policy().as_ref()) {
        Some(mp) => Some(crate::numa::MemPolicy::from_spec(mp)?),
        None => None,
    };
    // process.json's execCPUAffinity, else the config's (runc).
    let (aff, aff_field) = match process.exec_cpu_affinity() {
        Some(a) if o.process_json.is_some() => (Some(a), "process.json: execCPUAffinity"),
        Some(a) => (Some(a), "process.execCPUAffinity"),
        None => (
            spec.process()
                .as_ref()
                .and_then(|p| p.exec_cpu_affinity().as_ref()),
            "process.execCPUAffinity",
        ),
    };
    let aff = crate::numa::CpuAffinity::from_spec(aff, aff_field)?;
    let pidfd = crate::lifecycle::init_pidfd(&st)
        .ok_or_else(|| Error::new(Kind::State, format!("container {:?} is not running", o.id)))?;
    let sub_cg = if o.cgroup.is_empty() {
        None
    } else {
        let (all, per) = parse_sub_cgroups(&o.cgroup)?;
        let Some(cg) = st.cgroup.as_ref() else {
            bail!("--cgroup: the container has no cgroup");
        };
        Some(cg.sub_cgroup(all, &per).map_err(|e| match e {
            sprout_cgroups::Error::Invalid(m) => Error::new(Kind::Cgroup, format!("--cgroup: {m}")),
            e => Error::from(e).context("--cgroup"),
        })?)
    };
    let cg = sub_cg.as_ref().or(st.cgroup.as_ref());
    // v1/hybrid (cgroupfs driver): the helper joins the v1 hierarchies itself, first thing,
    // and on a hybrid host it is cloned into the cgroup2 leaf: no pid written to a cgroup.procs
    // (whose first write after an idle spell waits for an RCU grace period; create.rs).
    let joins = cg.map(|c| c.self_joins()).unwrap_or_default();
    let cg_fd = cg.and_then(|c| {
        c.v2_dir_fd()
            .or_else(|| (!joins.is_empty()).then(|| c.tracking_leaf_fd()).flatten())
    });
    let (parent_chan, child_chan) = Channel::pair().map_err(|e| Error::os("socketpair", e))?;
    trace.mark("prepare");

    // The helper that joins the container starts with the initial affinity (runc: the setns
    // process inherits it from a thread of the runtime's); this thread gets its own back after.
    let saved_affinity = match aff.as_ref().and_then(|a| a.initial.as_ref()) {
        Some(m) => {
            let old = crate::numa::get_affinity(0).ok();
            crate::numa::set_affinity(0, m)
                .map_err(|e| Error::os(format!("{aff_field}.initial: sched_setaffinity"), e))?;
            old
        }
        None => None,
    };
    let cloned = clone3_into(0, cg_fd.as_ref());
    if !matches!(cloned, Ok((0, _, _))) {
        if let Some(old) = &saved_affinity {
            let _ = crate::numa::set_affinity(0, old);
        }
    }
    let (helper, helper_pidfd, joined) = cloned.map_err(|e| Error::os("clone3", e))?;
    if helper == 0 {
        drop(parent_chan);
        let e = exec_child(
            &joins,
            (aff.as_ref().map(|a| a.final_.as_deref()), aff_field),
            &pidfd,
            st.pid,
            &types,
            &process,
            console.as_ref(),
            console_rx.is_some(),
            seccomp.as_ref(),
            mpol.as_ref(),
            linux.and_then(|l| l.personality().as_ref()),
            &child_chan,
            o.preserve_fds,
        );
        let _ = child_chan.send(sync::ERROR, e.to_wire().as_bytes());
        // SAFETY: _exit takes an integer; the helper (a clone of this process) leaves without
        // unwinding into the caller's frames or running its atexit handlers.
        unsafe { libc::_exit(127) };
    }
    let helper_pidfd = helper_pidfd.expect("pidfd");
    drop(child_chan);
    drop(console);
    let reap = |fd: &OwnedFd| {
        // P_PIDFD with a pidfd of our own child reaps that child only.
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(fd.as_fd()),
            rustix::process::WaitIdOptions::EXITED,
        );
    };
    let kill_and_reap = |fd: &OwnedFd| {
        let _ = sys::pidfd_send_signal(fd, libc::SIGKILL);
        reap(fd);
    };
    if !joined {
        if let Some(cg) = cg {
            let r = if joins.is_empty() {
                cg.add_pid(helper)
            } else {
                cg.add_pid_tracking(helper)
            };
            // runc's fallback on pure v2: where the container's cgroup can hold no process
            // (its init moved into a sub-cgroup and enabled controllers), the init's cgroup,
            // unless --cgroup named one.
            let r = r.or_else(|e| {
                if sub_cg.is_none() && joins.is_empty() {
                    cg.add_pid_to_cgroup_of(st.pid, helper)
                        .map(|_| ())
                        .map_err(|_| e)
                } else {
                    Err(e)
                }
            });
            if let Err(e) = r {
                kill_and_reap(&helper_pidfd);
                return Err(e.into());
            }
        }
    }
    // The final affinity once the helper is in the container's cgroup (moving into a cpuset
    // resets it); without execCPUAffinity, every CPU, as runc (not the runtime's own affinity).
    // The process the helper spawns inherits it. A helper that joins itself sets its own.
    let final_aff = aff.as_ref().map(|a| a.final_.as_deref());
    if joins.is_empty() {
        if let Err(e) = crate::numa::apply_final_affinity(helper, final_aff, aff_field) {
            kill_and_reap(&helper_pidfd);
            return Err(e);
        }
    }
    if let Err(e) = parent_chan.send(sync::GO, b"") {
        kill_and_reap(&helper_pidfd);
        return Err(Error::os("exec", e));
    }
    // Until EOF (every copy of the channel closed: the helper exited and the process exec'd):
    // the process's pid from the trampoline, or an error from the helper or the process.
    let mut child: Option<(i32, OwnedFd)> = None;
    let mut err: Option<Error> = None;
    let path = process
        .args()
        .as_ref()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or_default();
    loop {
        let (tag, payload, fd) = match parent_chan.recv() {
            Ok(m) => m,
            Err(e) => {
                err.get_or_insert(Error::os("exec", e));
                break;
            }
        };
        match tag {
            0 => break,
            // Forwarded at once: the process's next syscalls may be ones its filter notifies,
            // and they wait for the agent.
            sync::LISTENER => {
                if let Some(l) = fd {
                    if let Err(e) = crate::create::send_listener(&spec, &st, Status::Running, l) {
                        err.get_or_insert(e);
                    }
                }
            }
            sync::ERROR => {
                err.get_or_insert(Error::from_wire(&payload));
            }
            sync::TRAMPOLINE_OFF => crate::log::warn(&format!(
                "exec in {}: {payload}; the process was backed by the runtime's binary until execve (CVE-2019-5736)",
                o.id
            )),
            tag => match crate::trampoline::parse_report(tag, &payload, &path) {
                // Our child (CLONE_PARENT) and not yet reaped: its pid cannot be reused.
                Ok(pid) => match sys::pidfd_open(pid) {
                    Ok(fd) => {
                        // process.scheduler on the process itself, as soon as it exists (its
                        // execve may already be under way; runc sets it just before).
                        let restricted = init::cpus_restricted(linux);
                        if let Err(e) = init::apply_scheduler_of(pid, &process, restricted) {
                            err.get_or_insert(e);
                        }
                        child = Some((pid, fd));
                    }
                    Err(e) => {
                        err.get_or_insert(Error::os("pidfd_open", e));
                    }
                },
                Err(e) => {
                    err.get_or_insert(e);
                }
            },
        }
    }
    reap(&helper_pidfd);
    if let Some(e) = err {
        if let Some((_, fd)) = &child {
            kill_and_reap(fd);
        }
        return Err(e);
    }
    let Some((pid, child_pidfd)) = child else {
        return Err(Error::msg("exec: the process was not started"));
    };
    trace.mark("exec");
    if let Some(p) = &o.pid_file {
        crate::create::write_pid_file(p, pid)?;
    }
    if let Some(s) = &pidfd_socket {
        if let Err(e) = s.send(&child_pidfd) {
            kill_and_reap(&child_pidfd);
            return Err(e);
        }
    }
    if o.detach {
        return Ok(0);
    }
    if let Some(rx) = &console_rx {
        let master = match crate::tty::recv_master(rx) {
            Ok(m) => m,
            Err(e) => {
                kill_and_reap(&child_pidfd);
                return Err(e);
            }
        };
        return crate::tty::proxy_and_wait(&child_pidfd, pid, master);
    }
    crate::lifecycle::wait_forwarding(&child_pidfd, pid)
}

/// The helper: joins the container, becomes the process (credentials, seccomp), then hands over
/// to the trampoline, which spawns the process inside the container's pid namespace.
#[allow(clippy::too_many_arguments)]
fn exec_child(
    joins: &[(String, std::path::PathBuf)],
    (final_aff, aff_field): (Option<Option<&[libc::c_ulong]>>, &str),
    init: &OwnedFd,
    init_pid: i32,
    types: &[LinuxNamespaceType],
    process: &Process,
    console: Option<&OwnedFd>,
    console_is_ours: bool,
    seccomp: Option<&sprout_seccomp::Prepared>,
    mpol: Option<&crate::numa::MemPolicy>,
    personality: Option<&oci_spec::runtime::LinuxPersonality>,
    chan: &Channel,
    preserve_fds: u32,
) -> Error {
    let r = (|| -> Result<(init::Exec, Option<OwnedFd>)> {
        init::unblock_all_signals();
        let _ =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
        chan.wait_go()
            .map_err(|e| Error::os("waiting for the runtime", e))?;
        if !joins.is_empty() {
            // Into the container's v1 cgroups by itself (the runtime wrote no pid), then the
            // affinity the runtime would have set after moving it (the cpuset join resets it).
            sprout_cgroups::SelfJoin::open(joins)?.join()?;
            crate::numa::apply_final_affinity(0, final_aff, aff_field)?;
        }
        // Before seccomp, which may not allow memfd_create.
        let tramp = match crate::trampoline::memfd() {
            Ok(t) => Some(t),
            Err(e) => {
                let _ = chan.send(
                    sync::TRAMPOLINE_OFF,
                    format!("no exec trampoline (memfd: {e})").as_bytes(),
                );
                None
            }
        };
        // Everything that goes through /proc/self happens before the joins: this helper stays in
        // the host's pid namespace, so the container's /proc has no entry for it.
        // linux.personality too: a process's own, kept by the trampoline's fork and the execve.
        // process.scheduler is set by the runtime on the process the trampoline forks: a
        // SCHED_DEADLINE helper could not fork (EAGAIN), and RESET_ON_FORK would drop it.
        init::apply_process_attrs(process, personality)?;
        if types.contains(&LinuxNamespaceType::User) {
            let sg = std::fs::read_to_string(format!("/proc/{init_pid}/setgroups"))
                .map_err(|e| Error::os("reading the container's setgroups policy", e))?;
            sprout_process::set_setgroups_hint(!sg.starts_with("deny"));
        }
        crate::namespaces::join_all_of(init, types)?;
        if let Some(mp) = mpol {
            mp.apply()?;
        }
        if types.contains(&LinuxNamespaceType::User) {
            // Root of the user namespace just joined, where the init's maps make 0 valid. The
            // raw per-thread syscalls: this helper is a raw clone, single-threaded, whose libc
            // thread list is stale.
            let _ = rustix::thread::set_thread_res_gid(Gid::ROOT, Gid::ROOT, Gid::ROOT);
            let _ = rustix::thread::set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT);
        }
        let tty = process.terminal().unwrap_or(false);
        if tty {
            let sock = console.ok_or_else(|| Error::msg("exec --tty needs --console-socket"))?;
            crate::console::setup_pty(
                sock.as_raw_fd(),
                process.console_size().map(|b| (b.height(), b.width())),
                crate::console::PtyOpts {
                    ctty: false,
                    uid: process.user().uid(),
                    // As runc's tty.go when it holds the master itself (no --console-socket).
                    clear_onlcr: console_is_ours,
                },
            )?;
        }
        let cwd = cstr(process.cwd());
        rustix::process::chdir(cwd.as_c_str())
            .map_err(|e| Error::os(format!("process.cwd {}", process.cwd().display()), e.into()))?;
        init::check_cwd_inside(process.cwd())?;
        let exec = init::prepare_exec(process)?;
        // The channel is close-on-exec (lock_down marks every fd).
        init::lock_down(process, &exec.path, seccomp, chan, preserve_fds, true)?;
        Ok((exec, tramp))
    })();
    let (exec, tramp) = match r {
        Ok(x) => x,
        Err(e) => return e,
    };
    let tty = process.terminal().unwrap_or(false);
    if let Some(t) = tramp {
        let e = crate::trampoline::exec_spawn(&t, chan.raw(), tty, &exec);
        let _ = chan.send(
            sync::TRAMPOLINE_OFF,
            format!("exec of the trampoline failed: {e}").as_bytes(),
        );
    }
    spawn_without_trampoline(chan, tty, &exec)
}

/// Whether `pid` is in another time namespace than this process.
fn other_time_ns(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    match (
        ino(&format!("/proc/{pid}/ns/time")),
        ino("/proc/self/ns/time"),
    ) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// The trampoline's spawn, done by the runtime itself (when the trampoline can't run): the
/// process is a clone of the runtime until its execve.
fn spawn_without_trampoline(chan: &Channel, tty: bool, exec: &init::Exec) -> Error {
    let pid = match sys::clone_parent() {
        Ok(pid) => pid,
        Err(e) => return Error::os("forking the process", e),
    };
    if pid == 0 {
        // Its own session and process group inside the container, as runc (and the trampoline);
        // a fresh child is never a group leader, so this does not fail.
        let _ = rustix::process::setsid();
        if tty {
            if let Err(e) = rustix::process::ioctl_tiocsctty(rustix::stdio::stdin()) {
                let e = Error::os("process.terminal: TIOCSCTTY", e.into());
                let _ = chan.send(sync::ERROR, e.to_wire().as_bytes());
                // SAFETY: _exit takes an integer; the child leaves without running the
                // runtime's atexit handlers.
                unsafe { libc::_exit(127) };
            }
        }
        let e = init::do_execve(exec);
        let _ = chan.send(sync::ERROR, e.to_wire().as_bytes());
        // SAFETY: _exit takes an integer; the child leaves without running the runtime's atexit
        // handlers.
        unsafe { libc::_exit(127) };
    }
    let _ = chan.send(b'P', pid.to_string().as_bytes());
    // SAFETY: _exit takes an integer; the helper is done (the process it forked reports to the
    // runtime) and leaves without unwinding into the caller's frames.
    unsafe { libc::_exit(0) };
}
