//! start, kill, delete, state, list, pause, resume, ps, and `run`'s wait.

use std::os::fd::{AsRawFd, OwnedFd};

use crate::bail;
use crate::error::{Error, Kind, Result};
use crate::state::{self, State, Status, Store};
use crate::sys;
use crate::trace::Trace;

fn load_hooks(store: &Store, id: &str) -> Option<oci_spec::runtime::Hooks> {
    let raw = std::fs::read(store.dir(id).join(state::CONFIG_FILE)).ok()?;
    #[derive(serde::Deserialize)]
    struct HooksOnly {
        hooks: Option<oci_spec::runtime::Hooks>,
    }
    serde_json::from_slice::<HooksOnly>(&raw).ok()?.hooks
}

/// `start`: release the init waiting on the exec fifo, then run poststart hooks.
pub fn start(store: &Store, id: &str, trace: &mut Trace) -> Result<()> {
    let st = store.load(id)?;
    match st.status(store) {
        Status::Created => {}
        s => bail!(
            kind = Kind::State,
            "container {id:?} cannot be started: it is {}",
            s.as_str()
        ),
    }
    let fifo = store.dir(id).join(state::FIFO_FILE);
    let c = sys::cstr(&fifo);
    let hooks = if st.has_hooks {
        load_hooks(store, id)
    } else {
        None
    };
    let poststart = hooks
        .as_ref()
        .is_some_and(|h| h.poststart().as_ref().is_some_and(|v| !v.is_empty()));
    // With poststart hooks, `start` must return only after the process was executed: a read end
    // opened before our write sees POLLHUP once the init's close-on-exec fifo fd is gone.
    let watch = if poststart {
        // SAFETY: open reads the NUL-terminated CString `c` (the fifo's path), alive for the call;
        // flags only, no mode.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        // SAFETY: open succeeded (fd >= 0), so `fd` is a new descriptor that nothing else owns.
        (fd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
    } else {
        None
    };
    // SAFETY: open reads the NUL-terminated CString `c`, alive for the call; flags only, no mode.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Error::last_os(format!(
            "container {id:?}: opening the exec fifo"
        )));
    }
    // SAFETY: write reads 1 byte from the static b"0".
    let r = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    // SAFETY: `fd` is the raw fd opened above, owned by nothing else and closed once, here.
    unsafe { libc::close(fd) };
    if r != 1 {
        return Err(Error::last_os(format!(
            "container {id:?}: signalling start"
        )));
    }
    let _ = std::fs::remove_file(&fifo);
    if let Some(w) = watch {
        wait_hup(&w, 10_000);
    }
    trace.mark("start_signal");
    if let Some(h) = hooks {
        if poststart {
            if let Err(e) = run_poststart(&st, &h) {
                // The lifecycle goes on at delete (runtime-spec 1.3: "stop the container, and
                // continue the lifecycle at step 12"): the container is removed, poststop hooks
                // included, as crun's start does; runc runs poststart hooks at create, whose
                // failure destroys the container, so nothing is left with either.
                let _ = remove(store, &st, Status::Stopped, trace);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The poststart hooks, once the user process was executed (`start`, and foreground `run`).
/// runtime-spec 1.3 (as runc): if one fails, the runtime MUST generate an error and stop the
/// container: its processes are killed and waited for and the error is returned; the callers
/// then remove the container (`start`, and `run` unless `--keep`). Before 1.3 this was a
/// warning.
pub fn run_poststart(st: &State, hooks: &oci_spec::runtime::Hooks) -> Result<()> {
    let sj = serde_json::to_vec(&st.spec_json(Status::Running)).unwrap_or_default();
    if let Err(e) = crate::hooks::run_all("poststart", hooks.poststart().as_ref(), &sj) {
        let _ = kill_and_wait(st);
        return Err(e);
    }
    Ok(())
}

/// Wait (bounded) until every writer of the fifo behind `fd` is gone.
fn wait_hup(fd: &OwnedFd, timeout_ms: i32) {
    let deadline = sys::monotonic_us() + timeout_ms as u64 * 1000;
    loop {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        let left = deadline.saturating_sub(sys::monotonic_us()) / 1000;
        // SAFETY: one live local pollfd, nfds 1; the kernel writes only its `revents`.
        let r = unsafe { libc::poll(&mut p, 1, left as i32) };
        if r > 0 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0 || r == 0 || left == 0 {
            return;
        }
        if r > 0 {
            // POLLIN only (the byte not yet read by the init): drain-free wait a moment.
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// Signal names (with or without SIG) and numbers.
pub fn parse_signal(s: &str) -> Result<i32> {
    if let Ok(n) = s.parse::<i32>() {
        // 0: no signal, only the checks (kill(2)); runc takes it (`kill ID 0`).
        if (0..=64).contains(&n) {
            return Ok(n);
        }
        bail!(kind = Kind::InvalidArgument, "signal {s:?}: out of range");
    }
    let up = s.to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    let n = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "ILL" => libc::SIGILL,
        "TRAP" => libc::SIGTRAP,
        "ABRT" | "IOT" => libc::SIGABRT,
        "BUS" => libc::SIGBUS,
        "FPE" => libc::SIGFPE,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "SEGV" => libc::SIGSEGV,
        "USR2" => libc::SIGUSR2,
        "PIPE" => libc::SIGPIPE,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        "STKFLT" => libc::SIGSTKFLT,
        "CHLD" | "CLD" => libc::SIGCHLD,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "TSTP" => libc::SIGTSTP,
        "TTIN" => libc::SIGTTIN,
        "TTOU" => libc::SIGTTOU,
        "URG" => libc::SIGURG,
        "XCPU" => libc::SIGXCPU,
        "XFSZ" => libc::SIGXFSZ,
        "VTALRM" => libc::SIGVTALRM,
        "PROF" => libc::SIGPROF,
        "WINCH" => libc::SIGWINCH,
        "IO" | "POLL" => libc::SIGIO,
        "PWR" => libc::SIGPWR,
        "SYS" => libc::SIGSYS,
        _ => {
            if let Some(rest) = name.strip_prefix("RTMIN") {
                let off: i32 = if rest.is_empty() {
                    0
                } else {
                    rest.trim_start_matches('+').parse().map_err(|_| {
                        Error::new(Kind::InvalidArgument, format!("unknown signal {s:?}"))
                    })?
                };
                return Ok(libc::SIGRTMIN() + off);
            }
            if let Some(rest) = name.strip_prefix("RTMAX") {
                let off: i32 = if rest.is_empty() {
                    0
                } else {
                    rest.trim_start_matches('-').parse().map_err(|_| {
                        Error::new(Kind::InvalidArgument, format!("unknown signal {s:?}"))
                    })?
                };
                return Ok(libc::SIGRTMAX() - off);
            }
            bail!(kind = Kind::InvalidArgument, "unknown signal {s:?}")
        }
    };
    Ok(n)
}

/// A pidfd for the container's init, verified to be the process we started (not a reused pid).
pub fn init_pidfd(st: &State) -> Option<OwnedFd> {
    let fd = sys::pidfd_open(st.pid).ok()?;
    // Verify after opening: if the start time still matches, the pidfd is for our process.
    if st.init_alive() {
        Some(fd)
    } else {
        None
    }
}

pub fn kill(store: &Store, id: &str, sig: i32, all: bool) -> Result<()> {
    let st = store.load(id)?;
    let status = st.status(store);
    // runc (issue 4047): without a pid namespace of its own, killing the init does not end
    // the container's other processes, so SIGKILL goes to every process of its cgroup (and
    // works when the init is gone already).
    let all = all || (sig == libc::SIGKILL && !st.own_pid_ns && st.cgroup.is_some());
    if status == Status::Stopped && !all {
        bail!(kind = Kind::State, "container not running ({id:?})");
    }
    if all {
        // runc: --all (-a) signals every process of the container's cgroup and never fails
        // because the container has stopped. Signal 0 delivers nothing: the container exists,
        // and a paused one stays paused.
        if sig == 0 {
            return Ok(());
        }
        match &st.cgroup {
            Some(cg) => {
                let r = cg.kill_all(sig);
                if status == Status::Stopped {
                    return Ok(());
                }
                r?;
                if status == Status::Paused {
                    // Frozen tasks can't act on the signal (runc: freeze, signal, thaw).
                    cg.thaw()?;
                }
                return Ok(());
            }
            None if status == Status::Stopped => return Ok(()),
            None => {}
        }
    }
    let fd = init_pidfd(&st)
        .ok_or_else(|| Error::new(Kind::State, format!("container not running ({id:?})")))?;
    sys::pidfd_send_signal(&fd, sig).map_err(|e| Error::os(format!("kill {id:?}"), e))?;
    if status == Status::Paused && (sig == libc::SIGKILL || sig == libc::SIGTERM) {
        // A frozen process can't act on the signal until thawed.
        if let Some(cg) = &st.cgroup {
            let _ = cg.thaw();
        }
    }
    Ok(())
}

/// Kill everything of the container and wait until the init is gone.
fn kill_and_wait(st: &State) -> Result<()> {
    let fd = init_pidfd(st);
    if let Some(cg) = &st.cgroup {
        let _ = cg.kill_all(libc::SIGKILL);
        let _ = cg.thaw();
    }
    if let Some(fd) = &fd {
        let _ = sys::pidfd_send_signal(fd, libc::SIGKILL);
        // We may be its parent (run); reap if so, otherwise wait for its exit.
        // SAFETY: siginfo_t is plain data: all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes one siginfo_t into the live local `info`; P_PIDFD with the init's
        // pidfd (borrowed, open) reaps only that process, and only if it is our child.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                fd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED,
            )
        };
        if r < 0 {
            let _ = sys::pidfd_wait_exit(fd, 10_000);
        }
    }
    // Processes in the cgroup that were not in the init's pid namespace: wait until it is empty.
    if let Some(cg) = &st.cgroup {
        for _ in 0..200 {
            match cg.pids() {
                Ok(p) if p.is_empty() => break,
                Err(_) => break,
                Ok(_) => {
                    let _ = cg.kill_all(libc::SIGKILL);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
    }
    Ok(())
}

pub fn delete(store: &Store, id: &str, force: bool, trace: &mut Trace) -> Result<()> {
    let st = match store.load(id) {
        Ok(st) => st,
        Err(e) => {
            // --force on a half-created container (no state.json yet): remove the directory.
            // A bad id is refused: it may name no directory of ours.
            if force && e.kind() != Kind::InvalidArgument {
                // Like runc: --force on a container that does not exist (or never finished
                // create) succeeds, removing whatever directory is left.
                if store.dir(id).exists() {
                    store.remove(id)?;
                }
                return Ok(());
            }
            return Err(e);
        }
    };
    let status = st.status(store);
    match status {
        Status::Stopped | Status::Created => {}
        Status::Running | Status::Paused | Status::Creating if !force => {
            bail!(
                kind = Kind::State,
                "container {id:?} is {}: stop it first or use delete --force",
                status.as_str()
            )
        }
        _ => {}
    }
    remove(store, &st, status, trace)
}

/// `delete` for the caller that has just reaped the container's init (foreground `run`): its
/// state is the one in hand and its status is known, so neither is read again.
pub fn delete_reaped(store: &Store, st: &State, trace: &mut Trace) -> Result<()> {
    remove(store, st, Status::Stopped, trace)
}

fn remove(store: &Store, st: &State, status: Status, trace: &mut Trace) -> Result<()> {
    let id = &st.id;
    if status != Status::Stopped {
        kill_and_wait(st)?;
    } else if let Some(cg) = &st.cgroup {
        // The init is gone but children outside its pid namespace may remain. The usual
        // case, none, is told by removing the leaf they would be in.
        if !cg.remove_idle_leaf() && cg.pids().map(|p| !p.is_empty()).unwrap_or(false) {
            kill_and_wait(st)?;
        }
    }
    trace.mark("kill");
    if let Some(cg) = &st.cgroup {
        cg.destroy()?;
        if st.cgroup_pending {
            cg.remove_empty_leaves();
        }
    }
    trace.mark("cgroup_remove");
    let hooks = if st.has_hooks {
        load_hooks(store, id)
    } else {
        None
    };
    store.remove(id)?;
    trace.mark("state_remove");
    if let Some(h) = hooks {
        if h.poststop().as_ref().is_some_and(|v| !v.is_empty()) {
            let sj = serde_json::to_vec(&st.spec_json(Status::Stopped)).unwrap_or_default();
            crate::hooks::run_all_warn("poststop", h.poststop().as_ref(), &sj);
        }
    }
    Ok(())
}

/// `state`. A container still being created (no init recorded yet, or its init still setting
/// up) does not exist for `state` yet, as with runc and crun, which write their state once the
/// container is created: a client polling `state` after starting `create` sees "created" first,
/// not a passing "stopped" (pid 0) or "creating" (crun's test_commands.py state-created).
pub fn state_json(store: &Store, id: &str) -> Result<serde_json::Value> {
    let st = store.load(id)?;
    let status = st.status(store);
    if st.pid == 0 || status == Status::Creating {
        bail!(kind = Kind::NotFound, "container {id:?} does not exist");
    }
    Ok(st.spec_json(status))
}

pub fn pause(store: &Store, id: &str) -> Result<()> {
    let st = store.load(id)?;
    match st.status(store) {
        Status::Running | Status::Created => {}
        s => bail!(
            kind = Kind::State,
            "container {id:?} cannot be paused: it is {}",
            s.as_str()
        ),
    }
    st.cgroup
        .as_ref()
        .ok_or_else(|| Error::msg("container has no cgroup"))?
        .freeze()?;
    Ok(())
}

pub fn resume(store: &Store, id: &str) -> Result<()> {
    let st = store.load(id)?;
    match st.status(store) {
        Status::Paused => {}
        s => bail!(
            kind = Kind::State,
            "container {id:?} cannot be resumed: it is {}",
            s.as_str()
        ),
    }
    st.cgroup
        .as_ref()
        .ok_or_else(|| Error::msg("container has no cgroup"))?
        .thaw()?;
    Ok(())
}

pub fn pids(store: &Store, id: &str) -> Result<Vec<i32>> {
    let st = store.load(id)?;
    match &st.cgroup {
        Some(cg) => match cg.pids() {
            Ok(p) => Ok(p),
            // The cgroup went with the container's last process (systemd removes a scope once
            // it is empty): nothing to list, as runc (`ps` of a stopped container prints
            // nothing and exits 0).
            Err(_) if !st.init_alive() && !cg.procs_dir_exists() => Ok(vec![]),
            Err(e) => Err(e.into()),
        },
        None => Ok(if st.init_alive() {
            vec![st.pid]
        } else {
            vec![]
        }),
    }
}

const FWD: [i32; 8] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
];

pub(crate) fn forwarded_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is valid and sigemptyset/sigaddset only write the live local
    // `set`; every FWD entry is a valid signal number.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FWD {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Block the signals `run`/`exec` forward, so that they queue until the wait loop reads them
/// from a signalfd. Children unblock them (init::unblock_all_signals).
pub fn block_forwarded_signals() {
    let set = forwarded_set();
    // SAFETY: sigprocmask reads the live local `set`; the old-set pointer is null, so it writes
    // nothing.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Wait for our child (the init of `run`, or an exec'd process) while forwarding the usual
/// signals to it; returns the exit code as a shell would (128+signal).
pub fn wait_forwarding(pidfd: &OwnedFd, pid: i32) -> Result<i32> {
    // SAFETY: sigprocmask and signalfd read the live local `set`; signalfd returns a new fd (or -1,
    // then only the pidfd is polled) that this block closes once at the end and never hands out.
    // poll gets the live 2-element `fds` with nfds <= 2. read writes at most
    // size_of::<signalfd_siginfo>() bytes into the live local `si` (all-zero is valid for that
    // plain struct, as for `info`). waitid writes one siginfo_t into `info`, for the caller's pidfd
    // (borrowed, open); si_status is read after waitid succeeded, when the kernel has filled the
    // CLD_* fields.
    unsafe {
        let set = forwarded_set();
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let sfd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            let n = libc::poll(fds.as_mut_ptr(), if sfd >= 0 { 2 } else { 1 }, -1);
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            if fds[0].revents != 0 {
                break;
            }
            if sfd >= 0 && fds[1].revents != 0 {
                let mut si: libc::signalfd_siginfo = std::mem::zeroed();
                let r = libc::read(
                    sfd,
                    std::ptr::from_mut::<libc::signalfd_siginfo>(&mut si).cast(),
                    std::mem::size_of::<libc::signalfd_siginfo>(),
                );
                if r > 0 {
                    let _ = sys::pidfd_send_signal(pidfd, si.ssi_signo as i32);
                }
            }
        }
        if sfd >= 0 {
            libc::close(sfd);
        }
        let mut info: libc::siginfo_t = std::mem::zeroed();
        if libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED,
        ) < 0
        {
            return Err(Error::last_os(format!("waiting for process {pid}")));
        }
        let status = info.si_status();
        Ok(match info.si_code {
            libc::CLD_EXITED => status,
            _ => 128 + status,
        })
    }
}
