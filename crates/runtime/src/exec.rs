//! `exec`: start another process inside a running container. The runtime forks (clone3, fork
//! semantics: no re-exec of itself), the child joins every namespace of the init in one
//! setns(pidfd) call, and applies the process's attributes before execve.
//!
//! CVE-2019-5736: the child is made non-dumpable before it joins the container, so no process
//! in the container can open /proc/<pid>/exe (our binary) while it is in there; at execve the
//! image is replaced by the container's program.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use oci_spec::runtime::{Capability, LinuxCapabilities, LinuxNamespaceType, Process, Spec};

use crate::bail;
use crate::config::parse_spec;
use crate::create::clone3;
use crate::error::{Error, Result};
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
}

fn build_process(spec: &Spec, o: &ExecOpts) -> Result<Process> {
    if let Some(p) = &o.process_json {
        let raw =
            std::fs::read(p).map_err(|e| Error::os(format!("--process {}", p.display()), e))?;
        let de = &mut serde_json::Deserializer::from_slice(&raw);
        let proc: Process = serde_path_to_error::deserialize(de)
            .map_err(|e| Error::msg(format!("process.json: {}: {}", e.path(), e.inner())))?;
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
        let mut caps = p
            .capabilities()
            .clone()
            .unwrap_or_else(|| LinuxCapabilities::default());
        for name in &o.caps {
            let full = if name.to_ascii_uppercase().starts_with("CAP_") {
                name.to_ascii_uppercase()
            } else {
                format!("CAP_{}", name.to_ascii_uppercase())
            };
            let cap: Capability =
                serde_json::from_value(serde_json::Value::String(full.clone()))
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
        s => bail!("container {:?} is {}: cannot exec in it", o.id, s.as_str()),
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
    let console = match (&o.console_socket, tty) {
        (Some(p), true) => Some(crate::console::connect(p)?),
        (None, true) => bail!("exec --tty needs --console-socket"),
        _ => None,
    };
    let linux = spec.linux().as_ref();
    let types: Vec<LinuxNamespaceType> = linux
        .and_then(|l| l.namespaces().as_ref())
        .map(|v| v.iter().map(|n| n.typ()).collect())
        .unwrap_or_default();
    let seccomp = match linux.and_then(|l| l.seccomp().as_ref()) {
        Some(p) => Some(sprout_seccomp::prepare(p, Some(&store.root.join("cache/seccomp")))?.0),
        None => None,
    };
    let pidfd = crate::lifecycle::init_pidfd(&st)
        .ok_or_else(|| Error::msg(format!("container {:?} is not running", o.id)))?;
    if types.contains(&LinuxNamespaceType::Pid)
        && unsafe { libc::setns(pidfd.as_raw_fd(), libc::CLONE_NEWPID) } < 0
    {
        return Err(Error::last_os("joining the container's pid namespace"));
    }
    let cg = st.cgroup.as_ref();
    let cg_fd = cg.and_then(|c| c.v2_dir_fd());
    let (parent_chan, child_chan) = Channel::pair().map_err(|e| Error::os("socketpair", e))?;
    trace.mark("prepare");

    let (pid, child_pidfd) = clone3(0, cg_fd.as_ref()).map_err(|e| Error::os("clone3", e))?;
    if pid == 0 {
        drop(parent_chan);
        let e = exec_child(
            &pidfd,
            &types,
            &process,
            console.as_ref(),
            seccomp.as_ref(),
            &child_chan,
            o.preserve_fds,
        );
        let _ = child_chan.send(sync::ERROR, e.message().as_bytes());
        unsafe { libc::_exit(127) };
    }
    let child_pidfd = child_pidfd.expect("pidfd");
    drop(child_chan);
    drop(console);
    let fail = |e: Error| {
        let _ = sys::pidfd_send_signal(&child_pidfd, libc::SIGKILL);
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::waitid(
                libc::P_PIDFD,
                child_pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED,
            )
        };
        e
    };
    if cg_fd.is_none() {
        if let Some(cg) = cg {
            cg.add_pid(pid).map_err(|e| fail(e.into()))?;
        }
    }
    parent_chan
        .send(sync::GO, b"")
        .map_err(|e| fail(Error::os("exec", e)))?;
    // EOF (the channel is close-on-exec) means execve succeeded.
    let (tag, payload, _) = parent_chan.recv().map_err(|e| fail(Error::os("exec", e)))?;
    if tag == sync::ERROR {
        return Err(fail(Error::msg(payload)));
    }
    trace.mark("exec");
    if let Some(p) = &o.pid_file {
        crate::create::write_pid_file(p, pid)?;
    }
    if o.detach {
        return Ok(0);
    }
    crate::lifecycle::wait_forwarding(&child_pidfd, pid)
}

fn exec_child(
    init: &OwnedFd,
    types: &[LinuxNamespaceType],
    process: &Process,
    console: Option<&OwnedFd>,
    seccomp: Option<&sprout_seccomp::Prepared>,
    chan: &Channel,
    preserve_fds: u32,
) -> Error {
    let r = (|| -> Result<init::Exec> {
        init::unblock_all_signals();
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        chan.wait_go()
            .map_err(|e| Error::os("waiting for the runtime", e))?;
        crate::namespaces::join_all_of(init, types)?;
        if types.contains(&LinuxNamespaceType::User) {
            unsafe {
                libc::setresgid(0, 0, 0);
                libc::setresuid(0, 0, 0);
            }
        }
        if process.terminal().unwrap_or(false) {
            let sock = console.ok_or_else(|| Error::msg("exec --tty needs --console-socket"))?;
            crate::console::setup_pty(
                sock.as_raw_fd(),
                process.console_size().map(|b| (b.height(), b.width())),
            )?;
        }
        let cwd = cstr(process.cwd());
        if unsafe { libc::chdir(cwd.as_ptr()) } < 0 {
            return Err(Error::last_os(format!(
                "process.cwd {}",
                process.cwd().display()
            )));
        }
        init::check_cwd_inside(process.cwd())?;
        init::apply_process_attrs(process, None)?;
        let exec = init::prepare_exec(process)?;
        // The channel is close-on-exec (lock_down marks every fd): its EOF is the success.
        init::lock_down(process, seccomp, chan, preserve_fds, true)?;
        Ok(exec)
    })();
    match r {
        Ok(exec) => init::do_execve(&exec),
        Err(e) => e,
    }
}
