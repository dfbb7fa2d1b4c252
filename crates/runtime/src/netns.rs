//! The container's new network namespace, made beside the runtime's own work.
//!
//! A new network namespace is the slowest namespace the kernel makes (~0.5 ms here: setup_net
//! runs every pernet subsystem, registers lo with its sysfs and sysctl entries; lo up another
//! ~0.1 ms), about a third of the init's whole set-up. runc and crun make it in their init,
//! which does nothing else meanwhile. sprout makes it in a helper started as soon as the raw
//! config.json says one is wanted (`Plan::netns_beside_raw`, before the whole parse): a
//! `CLONE_FILES` child that unshares it, sends it to the init itself (sync::NETNS on the
//! runtime's end of the channel), then brings lo up in it while the init goes on, on another
//! CPU, while the runtime parses the config, writes the state, clones the init and makes its
//! cgroups: the runtime never waits for it. The init joins it with setns(2) where it would have
//! made it.
//!
//! Used only where the result is the namespace the init would have made: created in the
//! runtime's own user namespace (no new or joined user namespace), and charged to the cgroup
//! the init's own would be. On cgroup v1 and hybrid hosts the init makes its namespaces before
//! it is moved into its cgroups, so the helper starts at once, in the caller's cgroup. On pure
//! v2 the init is cloned straight into the container's cgroup, so the helper is too
//! (CLONE_INTO_CGROUP, fork-like clone3), once the runtime has made that cgroup: it then runs
//! beside the seccomp program's load, the clone and the init's first mounts, and the init joins
//! its namespace just before the first sysfs mount (which shows the network devices of its
//! mounter's namespace). 16-core pure-v2 machine, 300 interleaved rounds: podman-default
//! 4.34 → 4.12 ms, minimal 3.66 → 3.48 ms (2026-11-27).
//!
//! The helper has its own copy of our memory, not ours (no `CLONE_VM`): while it runs, the
//! runtime clones the init and then writes to pages that clone made copy-on-write, and each such
//! fault in an address space that is live on another CPU (the helper's, in its ~0.6 ms unshare)
//! flushes that CPU's TLB with an inter-processor interrupt and waits for it: 3 % of a `run`'s
//! CPU samples here, 0.4 % without `CLONE_VM` (`perf record -g`, minimal). What it writes for the
//! runtime (`Shared`) is in a shared page of its own. It runs rustix's raw syscalls only (no
//! errno, no allocation, no thread-local state) on a stack of its own, and exits. It dies with
//! the runtime (its parent-death signal is SIGKILL): a runtime killed mid-create leaves no
//! helper at work that `delete --force` could not find (docs/security.md, finding 10).

use std::ffi::c_void;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::sync::{self, Channel};

/// Written by the helper, read by the runtime once the helper has exited.
struct Shared {
    /// The runtime's end of the channel to the init (in the shared fd table).
    chan: i32,
    /// 1 once NETNS went out; else -errno of the step that failed.
    sent: AtomicI32,
    /// 1 once lo is up (after NETNS, which told the init so); -errno if that failed; 0 if the
    /// helper did not try (no socket: NETNS then told the init to do it).
    lo: AtomicI32,
    /// With the trace on: when the helper started and when NETNS went out (monotonic µs).
    trace: bool,
    t_start: AtomicU64,
    t_sent: AtomicU64,
    /// The CPU the helper runs on (`sys::other_cpu`, the caller's), set by the helper itself
    /// first thing.
    cpu: Option<rustix::thread::CpuSet>,
    /// The runtime's pid: the helper's parent, unless the runtime died before the helper could
    /// ask for its parent-death signal.
    parent: rustix::process::Pid,
}

/// The running helper; [`Pending::finish`] reaps it and, if it could not send NETNS, sends
/// one without a namespace (the init then makes it itself). Dropped (a create that fails
/// before the init is cloned), it is reaped.
pub struct Pending {
    pid: libc::pid_t,
    shared: SharedPage,
    _stack: Vec<MaybeUninit<u8>>,
    reaped: bool,
}

/// Why [`Pending::finish`] failed.
#[derive(Debug)]
pub enum Finish {
    /// Sending the init its NETNS (without a namespace) failed.
    Send(io::Error),
    /// The helper could not bring lo up, which its NETNS told the init it would.
    Loopback(io::Error),
}

/// The helper's frames need well under 4 KiB (no recursion, no large locals).
const STACK: usize = 32 * 1024;

// The message the helper writes by hand: the tag, then "lo" when the helper brings lo up.
const _: () = assert!(sync::NETNS == b'N');

extern "C" fn helper(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Shared` that `spawn` boxed, kept alive by `Pending` until this
    // process has been reaped.
    let sh = unsafe { &*(arg as *const Shared) };
    // Dies with the runtime: orphaned, outside the container's cgroups on v1 and hybrid hosts,
    // it would go on making a namespace for nobody where `delete --force` cannot find it
    // (docs/security.md, finding 10). The check covers a runtime that died before the prctl.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if rustix::process::getppid() != Some(sh.parent) {
        return 0;
    }
    // Off the runtime's CPU before anything else. The kernel may run a new child first, on its
    // parent's CPU, before the parent could move it: the runtime then waited for the whole
    // unshare (~0.6 ms, not preemptible in a PREEMPT_NONE kernel), half of the starts on this
    // project's 2-core host. The runtime's own move after clone covers the other order.
    if let Some(cpu) = &sh.cpu {
        let _ = rustix::thread::sched_setaffinity(None, cpu);
    }
    if sh.trace {
        sh.t_start
            .store(crate::sys::monotonic_us(), Ordering::Relaxed);
    }
    let r = make_and_send(sh);
    sh.sent.store(
        match &r {
            Ok(_) => 1,
            Err(e) => -e.raw_os_error(),
        },
        Ordering::Release,
    );
    if sh.trace {
        sh.t_sent
            .store(crate::sys::monotonic_us(), Ordering::Relaxed);
    }
    // lo after NETNS: the init joins the namespace and mounts on meanwhile; it needs lo only
    // once the container runs, after GO, which the runtime sends once this helper is reaped
    // (and fails the create instead where this failed: the init was told lo is up).
    if let Ok(Some(sock)) = r {
        sh.lo.store(
            match crate::sys::loopback_up_fresh(&sock) {
                Ok(()) => 1,
                Err(e) => -e.raw_os_error(),
            },
            Ordering::Release,
        );
    }
    0
}

/// The helper's work: raw syscalls only. Returns the socket in the new namespace (None where
/// there is none), through which lo is to be brought up: NETNS said it would be ("lo").
fn make_and_send(sh: &Shared) -> rustix::io::Result<Option<OwnedFd>> {
    // SAFETY: NEWNET changes only this process's network namespace; no fd table is unshared.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }?;
    // One socket in the new namespace gives both its descriptor (SIOCGSKNS, no procfs path
    // walk) and lo; /proc/self/ns/net where the kernel lacks SIOCGSKNS (before 4.9).
    let sock = crate::sys::inet_socket().ok();
    let ns = match sock.as_ref().map(crate::sys::netns_of_socket) {
        Some(Ok(ns)) => ns,
        _ => rustix::fs::open(
            c"/proc/self/ns/net",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?,
    };
    // "lo": this helper brings it up (as runc and crun set it), once the init has the
    // namespace; without a socket the init does.
    let msg: &[u8] = if sock.is_some() { b"Nlo" } else { b"N" };
    let fds = [ns.as_fd()];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)) {
        return Err(rustix::io::Errno::NOBUFS);
    }
    // SAFETY: `chan` is the runtime's end of the channel, open until the helper is reaped.
    let chan = unsafe { BorrowedFd::borrow_raw(sh.chan) };
    rustix::net::sendmsg(
        chan,
        &[io::IoSlice::new(msg)],
        &mut control,
        rustix::net::SendFlags::NOSIGNAL,
    )?;
    // `ns` is closed here: the init holds the namespace now (the message does, until read).
    Ok(sock)
}

/// Start the helper, which sends the namespace on `chan` (the runtime's end of the channel to
/// the init, which will be cloned later). `cgroup`: a v2 cgroup to start it in
/// (CLONE_INTO_CGROUP), the container's, so that the namespace is charged where the init's own
/// would be. An error (no stack, clone refused) means the init makes the namespace itself, as
/// without the helper.
pub fn spawn(
    chan: &Channel,
    trace: bool,
    cpu: Option<rustix::thread::CpuSet>,
    cgroup: Option<&OwnedFd>,
) -> io::Result<Pending> {
    let shared = SharedPage::new(Shared {
        chan: chan.raw(),
        sent: AtomicI32::new(0),
        lo: AtomicI32::new(0),
        trace,
        t_start: AtomicU64::new(0),
        t_sent: AtomicU64::new(0),
        cpu,
        parent: rustix::process::getpid(),
    })?;
    let arg = shared.0.cast::<c_void>();
    let (pid, stack) = if let Some(cg) = cgroup {
        // Into the cgroup: clone3, fork-like (the child runs on a copy of this stack, so it
        // needs none of its own), with our fd table.
        let (pid, pidfd) = crate::sys::clone3(libc::CLONE_FILES as u64, Some(cg))?;
        if pid == 0 {
            helper(arg);
            // SAFETY: _exit ends this child (a copy of the runtime's memory, sharing its fd
            // table) without running anything of the runtime's: no destructors, no atexit, no
            // flush of buffers that belong to the runtime.
            unsafe { libc::_exit(0) };
        }
        // Reaped by pid (waitid(P_PID)) like the other kind: the pidfd is not needed.
        drop(pidfd);
        (pid, Vec::new())
    } else {
        // Not zeroed: a memset would touch every page (the CLI's arena is fresh .bss); the
        // helper touches only the top few. The stack grows down from its 16-byte aligned top.
        let mut stack: Vec<MaybeUninit<u8>> = Vec::with_capacity(STACK);
        let top = (stack.as_mut_ptr() as usize + STACK) & !15;
        // SAFETY: the child runs `helper` on `stack` (alive in the returned Pending until the
        // child is reaped), in a copy of our memory with `shared` in a page we share (no
        // CLONE_VM: see the module's doc) and our fd table (CLONE_FILES); `helper` touches
        // only `shared` and makes raw syscalls. SIGCHLD: an ordinary child, reaped with
        // waitid(P_PID) by `finish` or Drop.
        let pid = unsafe {
            libc::clone(
                helper,
                top as *mut c_void,
                libc::CLONE_FILES | libc::SIGCHLD,
                arg,
            )
        };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        (pid, stack)
    };
    // The helper moves itself if it runs first; if it did not run yet, it starts over there.
    if let Some(cpu) = &shared.cpu {
        crate::sys::move_to_cpu(pid, cpu);
    }
    Ok(Pending {
        pid,
        shared,
        _stack: stack,
        reaped: false,
    })
}

/// `Shared` in a page of its own, shared with the helper (which has its own copy of the rest
/// of our memory).
struct SharedPage(*mut Shared);

impl SharedPage {
    fn new(v: Shared) -> io::Result<SharedPage> {
        // SAFETY: a fresh anonymous shared mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let p = p.cast::<Shared>();
        // SAFETY: `p` is a fresh, writable, page-aligned mapping at least as large as Shared.
        unsafe { p.write(v) };
        Ok(SharedPage(p))
    }
}

impl std::ops::Deref for SharedPage {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        // SAFETY: written in `new`, unmapped only in Drop.
        unsafe { &*self.0 }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: our mapping from `new`; Shared has no destructor to run.
        unsafe { libc::munmap(self.0.cast(), std::mem::size_of::<Shared>()) };
    }
}

impl Pending {
    /// Move a helper that is still at work (lo, its exit: the teardown of its copy of our
    /// memory) onto our CPU, where we are about to wait for it, off the init's.
    fn pull_to_our_cpu(&mut self) {
        // SAFETY: siginfo_t is plain data: all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes one siginfo_t into the live local `info`; WNOWAIT leaves the
        // helper (a child of ours) to `reap`.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid reads the union field waitid wrote (0: no child has exited yet).
        if r != 0 || unsafe { info.si_pid() } != 0 {
            return;
        }
        if let Some(cur) = crate::sys::current_cpu() {
            crate::sys::move_to_cpu(self.pid, &crate::sys::one_cpu(cur));
        }
    }

    fn reap(&mut self) {
        if self.reaped {
            return;
        }
        self.reaped = true;
        // SAFETY: siginfo_t is plain data: all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: waitid writes one siginfo_t into the live local `info`; P_PID with the
            // helper's pid reaps that child of ours only.
            let r = unsafe {
                libc::waitid(
                    libc::P_PID,
                    self.pid as libc::id_t,
                    &mut info,
                    libc::WEXITED,
                )
            };
            if r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
    }

    /// Reap the helper (long done by the time the init is released) and make sure the init got
    /// its NETNS: one without a namespace if the helper failed. Returns the helper's start and
    /// send times (monotonic µs; 0 without the trace). Fails with [`Finish::Send`] where that
    /// NETNS could not be sent, and with [`Finish::Loopback`] (the helper's errno) where lo,
    /// which the init was told the helper would bring up, did not come up.
    pub fn finish(mut self, chan: &Channel, join_us: bool) -> Result<(u64, u64), Finish> {
        if join_us {
            self.pull_to_our_cpu();
        }
        self.reap();
        if self.shared.sent.load(Ordering::Acquire) != 1 {
            chan.send(sync::NETNS, b"").map_err(Finish::Send)?;
        } else {
            let lo = self.shared.lo.load(Ordering::Acquire);
            if lo < 0 {
                return Err(Finish::Loopback(io::Error::from_raw_os_error(-lo)));
            }
        }
        Ok((
            self.shared.t_start.load(Ordering::Relaxed),
            self.shared.t_sent.load(Ordering::Relaxed),
        ))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.reap();
    }
}
