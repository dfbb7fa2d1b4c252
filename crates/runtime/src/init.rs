//! The container's init between clone and execve: everything here runs in the cloned child,
//! inside the new namespaces, single-threaded. It never returns: it execs the container process
//! or reports the error to the parent and exits.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use oci_spec::runtime::{Process, Spec};
use rustix::fs::{Mode, OFlags};
use rustix::process::{DumpableBehavior, Gid, Uid};
use rustix::thread::{set_thread_res_gid, set_thread_res_uid};

use crate::error::{Error, Result};
use crate::namespaces::Plan;
use crate::rootfs;
use crate::sync::{self, Channel};
use crate::sys::{cstr, cstr_s, cvt};
use crate::trace::ChildTrace;

pub struct InitCtx<'a> {
    pub id: &'a str,
    pub spec: &'a Spec,
    pub rootfs: &'a Path,
    pub bundle: &'a Path,
    pub plan: &'a Plan,
    pub chan: &'a Channel,
    /// The exec fifo, opened O_RDWR by the parent: reading a byte from it is the `start` signal.
    pub fifo: Option<&'a OwnedFd>,
    pub console: Option<&'a OwnedFd>,
    /// `console` leads to sprout itself (a foreground `run` without --console-socket).
    pub console_is_ours: bool,
    pub seccomp: Option<&'a sprout_seccomp::Prepared>,
    pub no_pivot: bool,
    pub no_new_keyring: bool,
    pub preserve_fds: u32,
    /// The host's cgroup layout, detected once by the parent.
    pub layout: sprout_cgroups::Layout,
    pub has_runtime_hooks: bool,
    pub trace: bool,
    /// The runtime's helper makes the new network namespace (netns.rs): the init joins what
    /// arrives in sync::NETNS instead of unsharing one.
    pub netns_sent: bool,
    /// The exec trampoline's memfd, made by the runtime before clone (off the init's path; the
    /// init inherits it). None: the init makes it if it needs one.
    pub trampoline: Option<RawFd>,
    /// The runtime sends sync::JOIN after DIRS: the init joins those v1 cgroups itself at GO.
    pub self_join: bool,
    /// Pure v2: the init was cloned into the container's cgroup (CLONE_INTO_CGROUP), where
    /// nothing moves it later. Its cgroup namespace and cgroup mounts then need no GO (which
    /// follows the limits and the device program): only what runs of the container does.
    pub in_cgroup: bool,
}

/// Entry point in the child. Never returns.
pub fn run(ctx: &InitCtx) -> ! {
    unblock_all_signals();
    // Until execve replaces our image, /proc/<pid>/exe of this process is the runtime's binary on
    // the host. Non-dumpable: nothing in the container (without CAP_SYS_PTRACE over the host's
    // user namespace) can open it (CVE-2019-5736). execve restores dumpability for the program.
    // With a new user namespace the parent (or newuidmap/newgidmap, which check that
    // /proc/PID is owned by the caller) must open /proc/PID/{uid,gid}_map first: a
    // non-dumpable process's /proc files belong to root, which an unprivileged parent cannot
    // open. Stay dumpable until the maps are written (runc's nsexec does the same).
    if !ctx.plan.new_user {
        let _ = rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable);
    }
    let mut tr = ChildTrace::new(ctx.trace);
    let mut go = GoLatch {
        waited: false,
        dirs: None,
        sources: Vec::new(),
        trees: Vec::new(),
        netns: None,
        join: None,
        join_us: 0,
    };
    let r = setup(ctx, &mut tr, &mut go);
    match r {
        Ok((exec, tramp)) => {
            let e = exec_now(ctx, exec, tramp, &mut tr);
            // Only reachable when execve failed after the parent was told we're ready.
            let msg = format!("sprout: container init: {e}\n");
            let _ = crate::sys::write_all_fd(2, msg.as_bytes());
            // SAFETY: _exit takes an integer; the init (the cloned child) must not unwind into the
            // runtime's frames that clone3 returned through, nor run its atexit handlers.
            unsafe { libc::_exit(127) }
        }
        Err(e) => {
            let _ = ctx.chan.send(sync::ERROR, e.to_wire().as_bytes());
            // Stay until the parent's GO has been read (or the parent gives up): closing with
            // GO unread would make the parent's recv fail with ECONNRESET before it reads our
            // message, and the reason would be lost.
            let _ = go.wait(ctx);
            // SAFETY: _exit takes an integer; as above, the cloned init leaves without returning
            // into the frames clone3 returned through.
            unsafe { libc::_exit(1) }
        }
    }
}

/// Stdio that is the host's /dev/null (a `run -d` under conmon without `-i`, a shim's null
/// stdin) becomes the container's own /dev/null, as runc does (reOpenDevNull): the process holds
/// no file of the host's /dev, and CRIU can checkpoint it (it cannot restore a file on a mount
/// outside the container). Best effort: left as it is when the container has no /dev/null.
fn reopen_dev_null() {
    let null_dev = libc::makedev(1, 3);
    let is_null = |fd: i32| {
        // SAFETY: fstat writes one `stat` into the live local; all-zero is a valid value for it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above; fd is an integer the kernel checks.
        (unsafe { libc::fstat(fd, &mut st) } == 0)
            && st.st_mode & libc::S_IFMT == libc::S_IFCHR
            && st.st_rdev == null_dev
    };
    let nulls = [is_null(0), is_null(1), is_null(2)];
    if !nulls.contains(&true) {
        return;
    }
    // rustix's open: libc's may add an fcntl(F_SETFD) after O_CLOEXEC (musl). Closed on drop.
    // Not followed: a symlink there (the image's /dev) is not the null device either.
    let Ok(fd) = rustix::fs::open(
        c"/dev/null",
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    if is_null(fd.as_raw_fd()) {
        for (target, _) in nulls.iter().enumerate().filter(|(_, n)| **n) {
            // SAFETY: dup3 onto a stdio fd that no OwnedFd of ours holds; flags 0 (stdio stays
            // open across execve).
            unsafe { libc::dup3(fd.as_raw_fd(), target as i32, 0) };
        }
    }
}

/// After chdir: the cwd must be reachable from the container's root. A cwd reached through a
/// leaked host fd (/proc/self/fd/N) is outside it, and getcwd(2) then fails with ENOENT
/// ("(unreachable)"): refuse it (CVE-2024-21626).
pub fn check_cwd_inside(cwd: &Path) -> Result<()> {
    let mut buf = [0u8; 4096];
    // SAFETY: getcwd writes at most buf.len() bytes (NUL included) into the live local `buf`.
    let p = unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    if p.is_null() || buf[0] != b'/' {
        return Err(Error::msg(format!(
            "process.cwd {}: the working directory is outside the container's root",
            cwd.display()
        )));
    }
    Ok(())
}

/// `run` blocks the signals it forwards before it clones; the container starts with none blocked.
pub fn unblock_all_signals() {
    // SAFETY: an all-zero sigset_t is valid (sigemptyset then makes it empty); sigprocmask reads
    // the live local `set` and, the old-set pointer being null, writes nothing.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// The id-mapped tree of `mounts[i]`, whose source is inside the rootfs: asked of the runtime
/// now that the mounts before it exist (sync::TREE_REQ), answered with sync::TREE.
fn request_late_tree(ctx: &InitCtx, i: usize) -> Result<OwnedFd> {
    let what = || format!("mounts[{i}]: waiting for the id-mapped tree");
    ctx.chan
        .send(sync::TREE_REQ, i.to_string().as_bytes())
        .map_err(|e| Error::os(what(), e))?;
    match ctx.chan.recv().map_err(|e| Error::os(what(), e))? {
        (sync::TREE, _, Some(fd)) => Ok(fd),
        _ => Err(Error::msg(format!("{}: the runtime went away", what()))),
    }
}

/// Waits for the parent's GO (cgroup joined, id maps written) at the first point that needs it,
/// keeping the optional DIRS message (cgroup directories made) that comes before it.
struct GoLatch {
    waited: bool,
    dirs: Option<rootfs::CgroupBinds>,
    /// Bind sources the parent opened for us (sync::SOURCE), by mount index.
    sources: Vec<(usize, OwnedFd)>,
    /// Id-mapped trees the parent made for us (sync::TREE), by mount index.
    trees: Vec<(usize, OwnedFd)>,
    /// sync::NETNS once it came: the namespace (None: make it here) and whether the helper
    /// brings lo up in it (it does so before the runtime sends GO).
    netns: Option<(Option<OwnedFd>, bool)>,
    /// sync::JOIN: the v1 cgroups to join at GO (the runtime does not move us into them), their
    /// `tasks` files opened as it is read (always before the pivot: `open_joins`).
    join: Option<sprout_cgroups::SelfJoin>,
    /// How long that join took (µs; with the trace only).
    join_us: u64,
}

/// What `GoLatch::recv_until` reads up to.
#[derive(PartialEq)]
enum Until {
    Go,
    Dirs,
    Netns,
    Join,
}

impl GoLatch {
    /// Read messages until GO (which ends every wait), or until DIRS or NETNS.
    fn recv_until(&mut self, ctx: &InitCtx, until: Until) -> Result<()> {
        loop {
            let (tag, payload, fd) = ctx
                .chan
                .recv()
                .map_err(|e| Error::os("waiting for the runtime", e))?;
            match tag {
                sync::SOURCE => {
                    if let (Ok(i), Some(fd)) = (payload.parse::<usize>(), fd) {
                        self.sources.push((i, fd));
                    }
                }
                sync::TREE => {
                    if let (Ok(i), Some(fd)) = (payload.parse::<usize>(), fd) {
                        self.trees.push((i, fd));
                    }
                }
                sync::GO => {
                    self.waited = true;
                    // In our cgroups from GO on, as when the runtime moved us in before it
                    // (after the limits; before anything of the container runs).
                    if let Some(j) = self.join.take() {
                        let t0 = if ctx.trace {
                            crate::sys::monotonic_us()
                        } else {
                            0
                        };
                        j.join()?;
                        if ctx.trace {
                            self.join_us = crate::sys::monotonic_us() - t0;
                        }
                    }
                    return Ok(());
                }
                sync::JOIN => {
                    let b = rootfs::decode_cgroup_binds(&payload);
                    self.join = Some(sprout_cgroups::SelfJoin::open(&b)?);
                    if until == Until::Join {
                        return Ok(());
                    }
                }
                sync::DIRS => {
                    self.dirs = Some(rootfs::decode_cgroup_binds(&payload));
                    if until == Until::Dirs {
                        return Ok(());
                    }
                }
                sync::NETNS => {
                    self.netns = Some((fd, payload == "lo"));
                    if until == Until::Netns {
                        return Ok(());
                    }
                }
                _ => return Err(Error::msg("waiting for the runtime: parent went away")),
            }
        }
    }

    /// With `ctx.self_join`: read JOIN (sent right after DIRS) now if it has not come yet, so
    /// that the `tasks` files it names are opened while the host's cgroup mounts are still in
    /// view (before the pivot).
    fn open_joins(&mut self, ctx: &InitCtx) -> Result<()> {
        if ctx.self_join && self.join.is_none() && !self.waited {
            self.recv_until(ctx, Until::Join)?;
        }
        Ok(())
    }

    fn wait(&mut self, ctx: &InitCtx) -> Result<()> {
        if !self.waited {
            self.recv_until(ctx, Until::Go)?;
        }
        Ok(())
    }

    /// The network namespace the runtime's helper made (sent right after clone, before
    /// anything else), and whether lo is up in it; `(None, false)`: make it here.
    fn wait_netns(&mut self, ctx: &InitCtx) -> Result<(Option<OwnedFd>, bool)> {
        if self.netns.is_none() && !self.waited {
            self.recv_until(ctx, Until::Netns)?;
        }
        Ok(self.netns.take().unwrap_or((None, false)))
    }

    /// The binds of the cgroup mount as soon as the parent has made the directories (DIRS),
    /// or `None` once GO came without them (then the init is in its cgroups: read its own).
    fn wait_dirs(&mut self, ctx: &InitCtx) -> Result<Option<rootfs::CgroupBinds>> {
        if self.dirs.is_none() && !self.waited {
            self.recv_until(ctx, Until::Dirs)?;
        }
        Ok(self.dirs.take())
    }
}

pub struct Exec {
    pub(crate) path: CString,
    pub(crate) argv: Vec<CString>,
    pub(crate) envp: Vec<CString>,
    nnp: bool,
}

/// Find the program like execvp would, with the container's PATH, so that a missing binary is an
/// error of `create`, not a process that dies after `start`.
pub fn resolve_program(arg0: &str, env: &[String]) -> Result<CString> {
    if arg0.contains('/') {
        let c = cstr_s(arg0);
        // Worded as runc (Go's errors): docker maps "no such file or directory" to exit 127 and
        // "permission denied" to 126.
        let st = match rustix::fs::stat(c.as_c_str()) {
            Ok(st) => st,
            Err(e) => {
                let what = if e == rustix::io::Errno::NOENT {
                    "no such file or directory".to_string()
                } else {
                    std::io::Error::from(e).to_string()
                };
                return Err(Error::msg(format!(
                    "process.args: exec: {arg0:?}: stat {arg0}: {what}"
                )));
            }
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mode & 0o111 == 0 {
            return Err(Error::msg(format!(
                "process.args: exec: {arg0:?}: permission denied (not an executable file)"
            )));
        }
        return Ok(c);
    }
    // As runc: the lookup uses process.env's PATH only. Without one (or with an empty one) a
    // name without a slash is not found: there is no default PATH (Go's exec.LookPath in runc's
    // init, whose environment holds only process.env).
    let Some(path) = env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .filter(|p| !p.is_empty())
    else {
        return Err(Error::msg(format!(
            "process.args: exec: {arg0:?}: executable file not found in $PATH (process.env has no PATH)"
        )));
    };
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let cand = format!("{dir}/{arg0}");
        let c = cstr_s(&cand);
        if let Ok(st) = rustix::fs::stat(c.as_c_str()) {
            if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_mode & 0o111 != 0 {
                return Ok(c);
            }
        }
    }
    Err(Error::msg(format!(
        "process.args: exec: {arg0:?}: executable file not found in $PATH ({path})"
    )))
}

/// `Plan::fork_for_pid`: make the pid namespace now (owned by the user namespace just joined;
/// unshare(CLONE_NEWPID) applies to children only) and fork its pid 1, a child of the runtime
/// (CLONE_PARENT) like this process, which carries on as the init. This process reports its pid
/// (sync::PID1) and exits; the runtime reaps it. Single-threaded here, as after any fork.
fn fork_pid1(ctx: &InitCtx) -> Result<()> {
    // SAFETY: unshare takes a flag only and touches no memory of ours.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWPID) })
        .map_err(|e| Error::os("unshare pid namespace", e))?;
    let pid =
        crate::sys::clone_parent().map_err(|e| Error::os("forking the container's pid 1", e))?;
    if pid == 0 {
        return Ok(());
    }
    let _ = ctx.chan.send(sync::PID1, pid.to_string().as_bytes());
    // SAFETY: _exit takes an integer; this process leaves without unwinding or atexit handlers
    // (the child carries on with everything).
    unsafe { libc::_exit(0) }
}

/// Join the network namespace the runtime's helper made (`InitCtx::netns_sent`), or make one
/// if it could not, and bring lo up in it unless the helper did. The wait for the helper is
/// traced (`netns_wait`).
fn join_helper_netns(ctx: &InitCtx, go: &mut GoLatch, tr: &mut ChildTrace) -> Result<()> {
    let lo_up = match tr.waiting("netns_wait", || go.wait_netns(ctx))? {
        (Some(fd), lo_up) => {
            rustix::thread::move_into_link_name_space(
                fd.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(|e| Error::os("joining the new network namespace", e.into()))?;
            lo_up
        }
        // The helper failed: made here, the error is our own attempt's.
        (None, _) => {
            // SAFETY: unshare takes a flag only and touches no memory of ours.
            cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) })
                .map_err(|e| Error::os("unshare namespaces", e))?;
            false
        }
    };
    if !lo_up {
        crate::sys::loopback_up()
            .map_err(|e| Error::os("bringing up lo in the new network namespace", e))?;
    }
    Ok(())
}

fn setup(ctx: &InitCtx, tr: &mut ChildTrace, go: &mut GoLatch) -> Result<(Exec, Option<OwnedFd>)> {
    let spec = ctx.spec;
    let plan = ctx.plan;
    let linux = spec.linux().as_ref();
    let process = spec
        .process()
        .as_ref()
        .ok_or_else(|| Error::msg("process: missing"))?;

    plan.join_and_unshare(false, ctx.netns_sent)?;
    // A mount namespace joined by path is the container's too: the rootfs is set up in it, as
    // runc does.
    let has_mount_ns = plan.new_mount || plan.join_mount;
    // The namespace the runtime's helper made (netns.rs) is joined as late as it may be: before
    // the first sysfs mount (a sysfs shows the network devices of the namespace it was mounted
    // in), else after the mounts; so the mounts before it overlap the helper's unshare, which on
    // pure v2 starts only just before the clone. Nothing before that point depends on the network
    // namespace: the other mounts, the hostname. Without a mount namespace: here.
    let mut net_pending = ctx.netns_sent;
    if net_pending && !has_mount_ns {
        join_helper_netns(ctx, go, tr)?;
        net_pending = false;
    }
    if !plan.new_user
        && plan
            .joins
            .iter()
            .any(|(t, _)| *t == oci_spec::runtime::LinuxNamespaceType::User)
    {
        // Joined a user namespace: its root, as runc's nsexec becomes, so that what the init
        // makes (mount points, /dev nodes) has mapped owners (EOVERFLOW otherwise).
        // The raw per-thread syscalls (the init is a raw clone: single-threaded).
        set_thread_res_gid(Gid::ROOT, Gid::ROOT, Gid::ROOT)
            .map_err(|e| Error::os("becoming root in the joined user namespace (gid)", e.into()))?;
        set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT)
            .map_err(|e| Error::os("becoming root in the joined user namespace (uid)", e.into()))?;
    }
    if plan.fork_for_pid {
        fork_pid1(ctx)?;
    }
    // As runc's nsexec: the init leads a session and process group of its own (with a terminal,
    // TIOCSCTTY makes the pty its controlling terminal later). Nothing aimed at the caller's
    // session or process group reaches the container, and CRIU can checkpoint it: it refuses a
    // process tree whose session leader is outside its pid namespace.
    // SAFETY: setsid takes nothing and touches no memory of ours; it fails (EPERM) only for a
    // process group leader, which a freshly cloned child is not.
    unsafe { libc::setsid() };
    if spec.hooks().is_some() {
        let _ = HOST_PID.set(host_pid());
    }
    if let Some(off) = linux
        .and_then(|l| l.time_offsets().as_ref())
        .filter(|o| !o.is_empty())
    {
        crate::namespaces::enter_time_ns_with_offsets(off)?;
    }
    let in_new_userns = plan.new_user;
    if in_new_userns {
        if plan.clone_flags & libc::CLONE_NEWUSER as u64 == 0 {
            ctx.chan
                .send(sync::MAPS, b"")
                .map_err(|e| Error::os("asking for id maps", e))?;
        }
        go.wait(ctx)?;
        // The maps are written: non-dumpable from here on (see `run`).
        let _ = rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable);
        // 0 is mapped in the user namespace whose maps the parent wrote before GO.
        set_thread_res_gid(Gid::ROOT, Gid::ROOT, Gid::ROOT)
            .map_err(|e| Error::os("becoming root in the user namespace (gid)", e.into()))?;
        set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT)
            .map_err(|e| Error::os("becoming root in the user namespace (uid)", e.into()))?;
    }
    let joined_user = plan
        .joins
        .iter()
        .any(|(t, _)| *t == oci_spec::runtime::LinuxNamespaceType::User);
    tr.mark("namespaces");

    if plan.new_uts
        || plan
            .joins
            .iter()
            .any(|(t, _)| *t == oci_spec::runtime::LinuxNamespaceType::Uts)
    {
        if let Some(h) = spec.hostname().as_deref().filter(|h| !h.is_empty()) {
            rustix::system::sethostname(h.as_bytes())
                .map_err(|e| Error::os("hostname", e.into()))?;
        }
        if let Some(d) = spec.domainname().as_deref().filter(|d| !d.is_empty()) {
            rustix::system::setdomainname(d.as_bytes())
                .map_err(|e| Error::os("domainname", e.into()))?;
        }
    }

    if plan.new_net && !ctx.netns_sent {
        crate::sys::loopback_up()
            .map_err(|e| Error::os("bringing up lo in the new network namespace", e))?;
    }

    // A read-only /dev mount is made read-write and remounted read-only once set up.
    let mut dev_ro = false;
    // A bind mount on /dev (typically the host's /dev): nothing is made in it (runc's
    // needsSetupDev), or the host's own nodes would be replaced; nor is /dev/console bound.
    let mut dev_bound = false;
    if has_mount_ns {
        rootfs::prepare_root(
            ctx.rootfs,
            linux.and_then(|l| l.rootfs_propagation().as_deref()),
        )?;
        let root_fd = open_dir(ctx.rootfs)?;
        // The cgroup mount must see the container's own cgroup. On v1/hybrid without a cgroup
        // namespace the parent sends its directories (DIRS) once made, and the mounts go on
        // while it moves us in; on pure v2, cloned into it, we are there already; otherwise
        // (systemd, a cgroup namespace on v1) the parent's GO (cgroup made and joined) is
        // awaited here. The paths are read from /proc/self/cgroup.
        // Either way the mounts before the first cgroup mount overlap the parent's cgroup work.
        // The host paths of our cgroups, read before a cgroup namespace hides them (inside it
        // every path in /proc/self/cgroup is "/").
        // `Some(None)`: read from /proc/self/cgroup when a mount asks (a v2 cgroup mount that
        // binds the host's hierarchy never does: ~6 syscalls off the init's path there).
        let binds: std::cell::OnceCell<Option<rootfs::CgroupBinds>> = std::cell::OnceCell::new();
        let own_binds = std::cell::OnceCell::new();
        let binds_fn = || match binds.get() {
            Some(Some(b)) => b.clone(),
            Some(None) => own_binds
                .get_or_init(|| rootfs::own_cgroup_binds(ctx.layout))
                .clone(),
            None => Vec::new(),
        };
        let mut dev_tmpfs = false;
        // In a new user namespace GO came already, and with it every SOURCE.
        let sources = std::mem::take(&mut go.sources);
        let devices = linux
            .and_then(|l| l.devices().as_ref())
            .map(|v| v.as_slice())
            .unwrap_or(&[]);
        let mut devices_made = false;
        let n_mounts = spec.mounts().as_ref().map_or(0, |v| v.len());
        for (i, m) in spec.mounts().iter().flatten().enumerate() {
            let is_cg = matches!(m.typ().as_deref(), Some("cgroup") | Some("cgroup2"));
            if is_cg && binds.get().is_none() {
                // The last mount (as in the configs runc, podman and containerd write) and
                // about to wait for the parent's directories (v1, hybrid): /dev is complete, so
                // its nodes are made now, while the parent still makes the cgroups, instead of
                // after (init.cgroup_wait 108 -> 58 µs, minimal 2.96 -> 2.83 ms; 2026-11-30).
                // Traced as `devices`, inside `mounts`.
                if !ctx.in_cgroup && !plan.new_cgroup && i + 1 == n_mounts && !dev_bound {
                    tr.waiting("devices", || {
                        rootfs::create_devices(
                            &root_fd,
                            devices,
                            in_new_userns || joined_user,
                            dev_tmpfs,
                        )
                    })?;
                    devices_made = true;
                }
                let early = if ctx.in_cgroup {
                    None
                } else {
                    tr.waiting("cgroup_wait", || {
                        if plan.new_cgroup {
                            go.wait(ctx).map(|()| None)
                        } else {
                            go.wait_dirs(ctx)
                        }
                    })?
                };
                let _ = binds.set(match early {
                    Some(b) => Some(b),
                    // Without a cgroup namespace /proc/self/cgroup reads the same later: read
                    // when the mount needs it.
                    None if !plan.new_cgroup => None,
                    // v2 with a cgroup namespace mounts cgroup2 and needs no binds, unless
                    // that mount may be refused (EBUSY under a bind of the host's /sys, as
                    // `spec --rootless` writes; EPERM in a user namespace): then it binds this
                    // cgroup, whose host path must be read before the unshare.
                    None if ctx.layout != sprout_cgroups::Layout::V2
                        || plan.new_user
                        || binds_host_sys(spec) =>
                    {
                        Some(rootfs::own_cgroup_binds(ctx.layout))
                    }
                    None => Some(Vec::new()),
                });
                if plan.new_cgroup {
                    // Enter the cgroup namespace now that we are in our cgroup, so cgroup2
                    // mounts at it.
                    // SAFETY: unshare(CLONE_NEWCGROUP) takes a flag only and touches no memory of
                    // ours.
                    cvt(unsafe { libc::unshare(libc::CLONE_NEWCGROUP) })
                        .map_err(|e| Error::os("unshare cgroup namespace", e))?;
                }
            }
            // An id-mapped tree comes before GO (made once the init's maps are written).
            let mut tree = None;
            if crate::idmap::is_idmapped(m) {
                go.wait(ctx)?;
                if let Some(k) = go.trees.iter().position(|(j, _)| *j == i) {
                    tree = Some(go.trees.swap_remove(k).1);
                } else if crate::idmap::source_in_rootfs(ctx.bundle, ctx.rootfs, m) {
                    tree = Some(request_late_tree(ctx, i)?);
                }
            }
            let mctx = rootfs::MountCtx {
                rootfs_fd: &root_fd,
                bundle: ctx.bundle,
                cgroup_v2: ctx.layout == sprout_cgroups::Layout::V2,
                cgroup_binds: &binds_fn,
                sources: &sources,
                tree: std::cell::Cell::new(tree),
            };
            if net_pending && m.typ().as_deref() == Some("sysfs") {
                join_helper_netns(ctx, go, tr)?;
                net_pending = false;
            }
            match rootfs::dev_mount_options_rw(m) {
                Some(rw) => {
                    let mut m = m.clone();
                    m.set_options(Some(rw));
                    rootfs::mount_one(&mctx, i, &m)?;
                    dev_ro = true;
                }
                None => rootfs::mount_one(&mctx, i, m)?,
            }
            if m.destination() == Path::new("/dev") {
                dev_tmpfs = true;
                dev_bound |= crate::rootfs::is_bind(m);
            }
        }
        if net_pending {
            join_helper_netns(ctx, go, tr)?;
        }
        tr.mark("mounts");
        if !devices_made {
            if !dev_bound {
                rootfs::create_devices(&root_fd, devices, in_new_userns || joined_user, dev_tmpfs)?;
            }
            tr.mark("devices");
        }
    }

    // The v1 cgroups we join at GO: opened now, before the pivot hides their paths.
    go.open_joins(ctx)?;
    // Also with linux.netDevices: the runtime moves them while we wait here.
    if ctx.has_runtime_hooks {
        go.wait(ctx)?;
        ctx.chan
            .send(sync::HOOKS, b"")
            .map_err(|e| Error::os("hooks", e))?;
        ctx.chan
            .wait_go()
            .map_err(|e| Error::os("hooks.createRuntime", e))?;
    }
    if let Some(hooks) = spec.hooks() {
        if hooks
            .create_container()
            .as_ref()
            .is_some_and(|h| !h.is_empty())
        {
            let st = hook_state(ctx, "creating");
            // runc runs them from the container's root filesystem (they inherit our cwd; the
            // pivot below sets its own).
            std::env::set_current_dir(ctx.rootfs)
                .map_err(|e| Error::os("hooks.createContainer: chdir to the rootfs", e))?;
            crate::hooks::run_all("createContainer", hooks.create_container().as_ref(), &st)?;
        }
    }

    // Without a mount namespace the container shares the host's devpts and its rootfs gets no
    // /dev: the pty master is opened here, before the chroot.
    let early_ptmx = if !has_mount_ns && process.terminal().unwrap_or(false) {
        Some(crate::console::open_ptmx()?)
    } else {
        None
    };
    if has_mount_ns && !ctx.no_pivot {
        rootfs::pivot(ctx.rootfs)?;
    } else if has_mount_ns {
        rootfs::move_and_chroot(ctx.rootfs)?;
    } else if !has_mount_ns {
        let c = cstr(ctx.rootfs);
        rustix::process::chroot(c.as_c_str()).map_err(|e| Error::os("chroot", e.into()))?;
        rustix::process::chdir(c"/").map_err(|e| Error::os("chdir /", e.into()))?;
    }
    if has_mount_ns {
        rootfs::apply_root_propagation(linux.and_then(|l| l.rootfs_propagation().as_deref()))?;
        reopen_dev_null();
    }
    tr.mark("pivot_root");

    if plan.new_cgroup {
        if !ctx.in_cgroup {
            go.wait(ctx)?;
        }
        // Harmless if already done above (unshare again would make a nested one: guard).
        let needs_cg = spec
            .mounts()
            .iter()
            .flatten()
            .any(|m| matches!(m.typ().as_deref(), Some("cgroup") | Some("cgroup2")));
        if !(has_mount_ns && needs_cg) {
            // SAFETY: unshare(CLONE_NEWCGROUP) takes a flag only and touches no memory of ours.
            cvt(unsafe { libc::unshare(libc::CLONE_NEWCGROUP) })
                .map_err(|e| Error::os("unshare cgroup namespace", e))?;
        }
    }

    if let Some(l) = linux {
        // Sysctls go in before /proc/sys is made read-only.
        if let Some(s) = l.sysctl() {
            rootfs::set_sysctls(s)?;
        }
        if has_mount_ns {
            if let Some(m) = l.masked_paths() {
                rootfs::mask_paths(m)?;
            }
            if let Some(r) = l.readonly_paths() {
                rootfs::readonly_paths(r)?;
            }
        }
        tr.mark("masked_paths");
    }
    // cwd: created if missing (as root, before privileges are dropped), and before the root is
    // made read-only (runc creates it while preparing the rootfs).
    let cwd = process.cwd();
    let ccwd = cstr(cwd);
    if rustix::process::chdir(ccwd.as_c_str()).is_err() {
        std::fs::create_dir_all(cwd)
            .map_err(|e| Error::os(format!("process.cwd {}", cwd.display()), e))?;
        rustix::process::chdir(ccwd.as_c_str())
            .map_err(|e| Error::os(format!("process.cwd {}", cwd.display()), e.into()))?;
    }
    check_cwd_inside(cwd)?;

    if process.terminal().unwrap_or(false) {
        let sock = ctx
            .console
            .ok_or_else(|| Error::msg("process.terminal: needs --console-socket"))?;
        let size = process.console_size().map(|b| (b.height(), b.width()));
        let master = match early_ptmx {
            Some(m) => m,
            None => crate::console::open_ptmx()?,
        };
        crate::console::setup_pty_on(
            master,
            sock.as_raw_fd(),
            size,
            crate::console::PtyOpts {
                ctty: true,
                uid: process.user().uid(),
                clear_onlcr: ctx.console_is_ours,
            },
        )?;
        if has_mount_ns && !dev_bound {
            // The slave is our stdin now. Before /dev or the root may be made read-only.
            // SAFETY: fd 0 is open (setup_pty_on just made it the slave) and stays open for
            // the call.
            crate::console::bind_console(unsafe { std::os::fd::BorrowedFd::borrow_raw(0) })?;
        }
    }

    if dev_ro {
        rootfs::readonly_dev()?;
    }
    if spec
        .root()
        .as_ref()
        .and_then(|r| r.readonly())
        .unwrap_or(false)
        && has_mount_ns
    {
        rootfs::readonly_root()?;
    }

    if !ctx.no_new_keyring {
        // A fresh session keyring, so the container can't see the host's keys. Failure is
        // tolerated (keyrings may be unavailable, e.g. in some user namespaces).
        let _ = crate::sys::join_session_keyring(c"_ses.sprout");
    }

    let exec = prepare_exec(process)?;
    apply_process_attrs(process, linux.and_then(|l| l.personality().as_ref()))?;
    if let Some(mp) = linux.and_then(|l| l.memory_policy().as_ref()) {
        crate::numa::MemPolicy::from_spec(mp)?.apply()?;
    }
    // The wait for GO, and apart from it the v1 cgroup join that GO may have set off.
    let join_before = go.join_us;
    let t0 = if ctx.trace {
        crate::sys::monotonic_us()
    } else {
        0
    };
    go.wait(ctx)?;
    if ctx.trace {
        let waited = crate::sys::monotonic_us() - t0;
        tr.add("go_wait", waited.saturating_sub(go.join_us - join_before));
        if go.join_us > 0 {
            tr.add("cgroup_join", go.join_us);
        }
    }
    // In its cgroups now (GO): the kernel judges SCHED_DEADLINE against the affinity the cpuset
    // gives.
    apply_scheduler(process, cpus_restricted(linux))?;
    // From here on a process exec'd into the container (or a pod sibling) can see us: hand over
    // to the trampoline before we report ready (CVE-2019-5736, trampoline.rs). startContainer
    // hooks run in this process after `start`, so with them the init stays the runtime until
    // then (docs/security.md).
    let tramp = if has_start_container_hooks(ctx.spec) {
        None
    } else if let Some(fd) = ctx.trampoline {
        // SAFETY: the runtime's memfd, inherited at clone: this process's copy of it is ours
        // alone (the runtime closes its own).
        Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    } else {
        match crate::trampoline::memfd() {
            Ok(t) => Some(t),
            Err(e) => {
                let _ = ctx.chan.send(
                    sync::TRAMPOLINE_OFF,
                    format!("no exec trampoline (memfd: {e})").as_bytes(),
                );
                None
            }
        }
    };
    // With the trampoline, a no_new_privs filter is loaded now: only the trampoline's read of
    // the fifo and its execve run under it before the program.
    lock_down(
        process,
        &exec.path,
        ctx.seccomp,
        ctx.chan,
        ctx.preserve_fds,
        tramp.is_some(),
    )?;
    tr.mark("process");
    let ready = if tramp.is_some() {
        sync::READY_EXEC
    } else {
        sync::READY
    };
    ctx.chan
        .send(ready, tr.buf.as_bytes())
        .map_err(|e| Error::os("reporting ready", e))?;
    Ok((exec, tramp))
}

/// With the process's own ids and capabilities: may it execute `program`? Go's exec.LookPath in
/// runc's init asks the kernel the same (faccessat2 with AT_EACCESS) once it has become the
/// container's user, so a program on a `noexec` mount, or one its user may not execute (mode
/// bits that `resolve_program`, run as root, cannot judge), fails `create` with "permission
/// denied" (docker and podman: exit 126) instead of a container that dies at its exec after
/// `start`. EPERM or ENOSYS (a seccomp profile that refuses the call) leaves it to the exec, as
/// Go does.
fn check_may_exec(program: &CStr, process: &Process) -> Result<()> {
    match rustix::fs::accessat(
        rustix::fs::CWD,
        program,
        rustix::fs::Access::EXEC_OK,
        rustix::fs::AtFlags::EACCESS,
    ) {
        Err(rustix::io::Errno::ACCESS) => {
            let arg0 = process
                .args()
                .as_ref()
                .and_then(|a| a.first())
                .map(String::as_str)
                .unwrap_or_default();
            Err(Error::msg(format!(
                "process.args: exec: {arg0:?}: permission denied ({} may not be executed by \
                 uid {}: a noexec mount, or its mode)",
                program.to_string_lossy(),
                process.user().uid()
            )))
        }
        _ => Ok(()),
    }
}

pub(crate) fn has_start_container_hooks(spec: &Spec) -> bool {
    spec.hooks()
        .as_ref()
        .and_then(|h| h.start_container().as_ref())
        .is_some_and(|h| !h.is_empty())
}

/// The last steps before execve, shared by the init and `exec`: close-on-exec for every host fd,
/// seccomp (before dropping capabilities when no_new_privs is off, since loading then needs
/// CAP_SYS_ADMIN), capabilities and identity, no_new_privs. With no_new_privs the filter is
/// loaded here only if `nnp_filter_now` (the init loads it later, after the exec fifo).
pub fn lock_down(
    process: &Process,
    program: &CStr,
    seccomp: Option<&sprout_seccomp::Prepared>,
    chan: &Channel,
    preserve_fds: u32,
    nnp_filter_now: bool,
) -> Result<()> {
    // Nothing of the host may reach the container: every fd past stdio and the preserved ones is
    // closed at execve (CVE-2024-21626). Done before seccomp, which may not allow close_range.
    crate::sys::cloexec_from(3 + preserve_fds)
        .map_err(|e| Error::os("marking fds close-on-exec", e))?;
    for fd in 3..3 + preserve_fds as RawFd {
        let _ = crate::sys::set_cloexec(fd, false);
    }
    // stdio goes to the process's user (runc's fixStdioPermissions), while we are still root
    // and before a filter that might refuse fchown.
    crate::console::give_stdio_to(process.user().uid())?;
    let nnp = process.no_new_privileges().unwrap_or(false);
    if let (Some(sc), false) = (seccomp, nnp) {
        load_seccomp(chan, sc)?;
    }
    sprout_process::finalize_privileges(process.user(), process.capabilities().as_ref())?;
    check_may_exec(program, process)?;
    if nnp {
        sprout_process::set_no_new_privs()?;
        if let (Some(sc), true) = (seccomp, nnp_filter_now) {
            load_seccomp(chan, sc)?;
        }
    }
    Ok(())
}

/// Process attributes from the config, for the init and each `exec` (linux.personality is
/// per process: every process of the container gets it, as with runc).
pub fn apply_process_attrs(
    process: &Process,
    personality: Option<&oci_spec::runtime::LinuxPersonality>,
) -> Result<()> {
    if let Some(p) = personality {
        sprout_process::set_personality(p)?;
    }
    if let Some(r) = process.rlimits() {
        sprout_process::set_rlimits(r)?;
    }
    if let Some(o) = process.oom_score_adj() {
        sprout_process::set_oom_score_adj(o)?;
    }
    if let Some(p) = process.io_priority() {
        sprout_process::set_io_priority(p)?;
    }
    sprout_process::set_exec_lsm_labels(
        process.apparmor_profile().as_deref(),
        process.selinux_label().as_deref(),
    )?;
    Ok(())
}

/// process.scheduler, once the process is in its cgroups (its cpuset decides whether the
/// kernel accepts SCHED_DEADLINE).
pub fn apply_scheduler(process: &Process, cpus_restricted: bool) -> Result<()> {
    apply_scheduler_of(0, process, cpus_restricted)
}

/// [`apply_scheduler`] for `pid` (0: this process).
pub fn apply_scheduler_of(
    pid: libc::pid_t,
    process: &Process,
    cpus_restricted: bool,
) -> Result<()> {
    if let Some(s) = process.scheduler() {
        sprout_process::set_scheduler_of(pid, s).map_err(|e| match e {
            // sched_setattr(2): EPERM when the task's affinity does not cover every CPU (a
            // deadline task on a cpuset); runc's message.
            sprout_process::Error::Sys { ref source, .. }
                if cpus_restricted && source.raw_os_error() == Some(libc::EPERM) =>
            {
                Error::field(
                    "process.scheduler",
                    "process scheduler can't be used together with AllowedCPUs (linux.resources.cpu.cpus)",
                )
            }
            e => e.into(),
        })?;
    }
    Ok(())
}

/// Whether linux.resources.cpu.cpus restricts the container to some CPUs.
pub fn cpus_restricted(linux: Option<&oci_spec::runtime::Linux>) -> bool {
    linux
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.cpu().as_ref())
        .and_then(|c| c.cpus().as_deref())
        .is_some_and(|c| !c.trim().is_empty())
}

fn load_seccomp(chan: &Channel, sc: &sprout_seccomp::Prepared) -> Result<()> {
    if let Some(listener) = sc.load()? {
        // The parent forwards the listener fd to linux.seccomp.listenerPath.
        let _ = chan.send_with_fd(sync::LISTENER, listener.as_raw_fd());
    }
    Ok(())
}

pub fn prepare_exec(process: &Process) -> Result<Exec> {
    let args = process
        .args()
        .as_ref()
        .ok_or_else(|| Error::msg("process.args: missing"))?;
    let raw_env: &[String] = process.env().as_deref().unwrap_or(&[]);
    // resolve_program takes the last PATH given, as the deduplicated env keeps it.
    let path = resolve_program(&args[0], raw_env)?;
    let env = dedup_env(raw_env);
    let argv = args.iter().map(|a| cstr_s(a)).collect();
    let mut envp: Vec<CString> = env.iter().map(|e| cstr_s(e)).collect();
    if !env.iter().any(|e| e.starts_with("HOME=")) {
        // runc sets HOME when the config doesn't, or sets it empty (from /etc/passwd; "/" as
        // the fallback).
        envp.push(cstr_s(&format!("HOME={}", home_of(process.user().uid()))));
    }
    Ok(Exec {
        path,
        argv,
        envp,
        nnp: process.no_new_privileges().unwrap_or(false),
    })
}

/// process.env as runc's prepareEnv makes it: one entry per name, the last value given, in the
/// order of those last occurrences; an empty `HOME=` is dropped (the caller adds the user's).
/// Borrowed, and a linear scan: an env has a handful of entries and this is on the start path.
pub(crate) fn dedup_env(env: &[String]) -> Vec<&str> {
    fn key(kv: &str) -> &str {
        kv.split_once('=').map_or(kv, |(k, _)| k)
    }
    let mut out: Vec<&str> = Vec::with_capacity(env.len());
    // The dropped `HOME=` still counts as HOME's last value.
    let mut home_seen = false;
    for kv in env.iter().rev() {
        let k = key(kv);
        if out.iter().any(|o| key(o) == k) || (k == "HOME" && home_seen) {
            continue;
        }
        if k == "HOME" {
            home_seen = true;
            if kv == "HOME=" {
                continue;
            }
        }
        out.push(kv);
    }
    out.reverse();
    out
}

fn read_to_string_raw(path: &std::ffi::CStr) -> std::io::Result<String> {
    use std::io::Read;
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut s = String::new();
    std::fs::File::from(fd).read_to_string(&mut s)?;
    Ok(s)
}

fn home_of(uid: u32) -> String {
    // rustix's open: libc's may add an fcntl after O_CLOEXEC (musl).
    if let Ok(s) = read_to_string_raw(c"/etc/passwd") {
        for line in s.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() >= 6 && f[2].parse::<u32>().ok() == Some(uid) {
                return f[5].to_string();
            }
        }
    }
    "/".into()
}

fn exec_now(ctx: &InitCtx, exec: Exec, tramp: Option<OwnedFd>, tr: &mut ChildTrace) -> Error {
    let filter_loaded = tramp.is_some();
    if let Some(t) = tramp {
        let e = crate::trampoline::exec_init(&t, ctx.fifo.map(|f| f.as_raw_fd()), &exec);
        // Still here: e.g. a seccomp profile that refuses execveat. Carry on without it; the
        // parent logs why.
        let _ = ctx.chan.send(
            sync::TRAMPOLINE_OFF,
            format!("exec of the trampoline failed: {e}").as_bytes(),
        );
    }
    if let Some(fifo) = ctx.fifo {
        let mut b = [0u8; 1];
        while let Err(rustix::io::Errno::INTR) = rustix::io::read(fifo, &mut b) {}
    }
    // The no_new_privs filter (when the trampoline did not take it) goes on before the
    // startContainer hooks: they run in the container under its seccomp filter, as runc's
    // (seccomp.bats), and after the fifo read, which stays outside it.
    if let (Some(sc), true, false) = (ctx.seccomp, exec.nnp, filter_loaded) {
        if let Err(e) = load_seccomp(ctx.chan, sc) {
            return e;
        }
    }
    if let Some(hooks) = ctx.spec.hooks() {
        if let Some(list) = hooks.start_container().as_ref().filter(|h| !h.is_empty()) {
            // As runc (SetDefaultEnv): a startContainer hook without `env` gets the
            // container process's environment.
            let env: Vec<String> = exec
                .envp
                .iter()
                .map(|e| e.to_string_lossy().into_owned())
                .collect();
            let list: Vec<oci_spec::runtime::Hook> = list
                .iter()
                .map(|h| {
                    let mut h = h.clone();
                    if h.env().is_none() {
                        h.set_env(Some(env.clone()));
                    }
                    h
                })
                .collect();
            let st = hook_state(ctx, "created");
            if let Err(e) = crate::hooks::run_all("startContainer", Some(&list), &st) {
                return e;
            }
        }
    }
    let _ = tr;
    do_execve(&exec)
}

/// Every signal back to SIG_DFL, right before the exec that leads to the container's program:
/// an ignored signal stays ignored across execve, and ours (Rust ignores SIGPIPE) or our
/// caller's must not leak into the container, where a shell can't even trap a signal that was
/// ignored on entry (crun resets them too; podman's kill tests trap SIGPIPE). Done last, since
/// the runtime itself relies on SIGPIPE being ignored while it writes to hooks' stdin.
///
/// Only an ignored signal needs it (execve resets the handled ones): the ignored set is read
/// from /proc/self/status (`SigIgn`, usually SIGPIPE alone), 3 syscalls and one reset where
/// resetting all 62 took 62. Without a readable status (no /proc in the container) every
/// signal is reset as before.
pub fn reset_signal_dispositions() {
    let ignored = ignored_signals().unwrap_or(u64::MAX);
    // The raw syscall (sys::sigaction_default): glibc's wrappers refuse its two internal
    // real-time signals (32, 33), which a caller may have ignored too.
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP || ignored & (1u64 << (sig - 1)) == 0 {
            continue;
        }
        crate::sys::sigaction_default(sig);
    }
}

/// The `SigIgn` mask of /proc/self/status (bit n-1 = signal n).
fn ignored_signals() -> Option<u64> {
    // One read into a buffer that holds the whole file (~1.4 KB; SigIgn is in its first half):
    // read_to_string's growing reads took 8 here.
    let mut buf = [0u8; 4096];
    let status = sprout_process::read_small(c"/proc/self/status", &mut buf)?;
    parse_sig_ign(std::str::from_utf8(status).ok()?)
}

fn parse_sig_ign(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

pub fn do_execve(exec: &Exec) -> Error {
    reset_signal_dispositions();
    let mut argv: Vec<*const libc::c_char> = exec.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = exec.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: execve reads `exec.path` (a CString) and `argv`/`envp`, NULL-terminated arrays of
    // pointers into the CStrings of `exec`, all alive for the call; it returns only on failure.
    unsafe { libc::execve(exec.path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    let err = std::io::Error::last_os_error();
    Error::exec_failed("process.args", &exec.path.to_string_lossy(), err)
}

fn hook_state(ctx: &InitCtx, status: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "ociVersion": crate::config::OCI_VERSION,
        "id": ctx.id,
        "status": status,
        "pid": HOST_PID.get().copied().unwrap_or(0),
        "bundle": ctx.bundle,
        "annotations": ctx.spec.annotations().clone().unwrap_or_default(),
    }))
    .unwrap_or_default()
}

/// Our pid as the runtime's namespace sees it, read before pivot_root (for hook state).
static HOST_PID: std::sync::OnceLock<i32> = std::sync::OnceLock::new();

/// "/proc/self" of the host's proc (only meaningful before pivot_root).
fn host_pid() -> i32 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

fn open_dir(p: &Path) -> Result<OwnedFd> {
    let c = cstr(p);
    rustix::fs::open(
        c.as_c_str(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::os(format!("root.path {}", p.display()), e.into()))
}

/// Whether the config bind-mounts something onto /sys (the host's, as `spec --rootless` does).
fn binds_host_sys(spec: &oci_spec::runtime::Spec) -> bool {
    spec.mounts().iter().flatten().any(|m| {
        m.destination() == Path::new("/sys")
            && (m.typ().as_deref() == Some("bind")
                || m.options()
                    .iter()
                    .flatten()
                    .any(|o| o == "bind" || o == "rbind"))
    })
}

#[cfg(test)]
mod sig_tests {
    use super::parse_sig_ign;

    #[test]
    fn the_ignored_mask_is_read_from_status() {
        let st = "Name:\tsh\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000001001\nSigCgt:\t0\n";
        assert_eq!(parse_sig_ign(st), Some(0x1001));
        assert_eq!(parse_sig_ign("Name:\tsh\n"), None);
        assert_eq!(parse_sig_ign("SigIgn:\tzz\n"), None);
        // This process: whatever it ignores, the mask parses.
        assert!(super::ignored_signals().is_some());
    }
}

#[cfg(test)]
mod env_tests {
    use super::dedup_env;

    #[test]
    fn env_is_deduplicated_as_runc_does() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(dedup_env(&v(&["A=1", "B=2", "A=3"])), v(&["B=2", "A=3"]));
        assert_eq!(
            dedup_env(&v(&["ONE=two", "ONE=", "PATH=/bin"])),
            v(&["ONE=", "PATH=/bin"])
        );
        assert_eq!(dedup_env(&v(&["HOME=/override", "HOME="])), v(&[]));
        assert_eq!(dedup_env(&v(&["HOME=", "HOME=/h"])), v(&["HOME=/h"]));
        assert!(dedup_env(&[]).is_empty());
    }
}
