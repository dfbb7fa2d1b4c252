//! Thin wrappers over the raw syscalls the start path uses. Where rustix (linux_raw backend)
//! wraps one exactly (pidfd_open, pivot_root, sched_{get,set}affinity, socket) it is called
//! without `unsafe`; it does not allocate with a `&CStr` path, so it may run in the freshly
//! cloned child. The rest use libc directly, for exact control over flags and over what
//! allocates.
//!
//! The raw `libc::syscall` glue of the crate lives here (clone3, the CLONE_PARENT clone,
//! openat2, pidfd_send_signal, close_range, keyctl, rt_sigaction, execveat), except the new
//! mount API (rootfs/mountapi.rs) and the NUMA ones, which size their masks by the spec's
//! limits (numa.rs).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::process::Pid;

pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn cvt_l(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn cstr(p: impl AsRef<Path>) -> CString {
    // Paths with interior NULs cannot come from JSON strings that reach here unescaped; map them
    // to an empty string, which every syscall rejects with ENOENT.
    CString::new(p.as_ref().as_os_str().as_bytes()).unwrap_or_default()
}

pub fn cstr_s(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

pub fn mount(
    src: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let p = |c: Option<&CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is null (an absent argument, which mount(2) allows for source,
    // fstype and data) or comes from a borrowed &CStr, NUL-terminated and alive for the call.
    cvt(unsafe { libc::mount(p(src), target.as_ptr(), p(fstype), flags, p(data).cast()) }).map(drop)
}

/// mount(2) onto the directory `dir` names (an fd opened safely, e.g. with RESOLVE_IN_ROOT): the
/// process moves there (fchdir) and mounts on ".". A path through /proc/self/fd/N would do the
/// same with a procfs walk per mount (~5 µs each here). Leaves the cwd in `dir`: for the init's
/// mount phase, which reaches everything through fds or absolute paths until it sets its cwd.
pub fn mount_at(
    src: Option<&CStr>,
    dir: &impl AsFd,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    rustix::process::fchdir(dir)?;
    mount(src, c".", fstype, flags, data)
}

/// openat2(2) with RESOLVE_IN_ROOT: `path` is resolved as if `root` were "/", so that symlinks in a
/// rootfs can never lead outside it (CVE-2021-30465 class).
pub fn open_in_root(
    root: RawFd,
    path: &Path,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
    const RESOLVE_IN_ROOT: u64 = 0x10;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: u64::from(mode),
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    let rel = path.strip_prefix("/").unwrap_or(path);
    let c = if rel.as_os_str().is_empty() {
        cstr_s(".")
    } else {
        cstr(rel)
    };
    // SAFETY: `c` is a NUL-terminated CString and `how` a live #[repr(C)] open_how whose size
    // is passed with it; the kernel only reads both. `root` is a plain fd number (a bad one
    // is EBADF).
    let fd = cvt_l(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            c.as_ptr(),
            std::ptr::from_ref::<OpenHow>(&how),
            std::mem::size_of::<OpenHow>(),
        )
    })?;
    // SAFETY: openat2 succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// "/proc/self/fd/N": the path through which mount(2) reaches an fd opened safely.
pub fn fd_path(fd: &impl AsRawFd) -> CString {
    let mut buf = itoa_buf();
    let s = fmt_fd_path(&mut buf, fd.as_raw_fd());
    CString::new(s).unwrap_or_default()
}

fn itoa_buf() -> [u8; 32] {
    [0u8; 32]
}

fn fmt_fd_path(buf: &mut [u8; 32], fd: RawFd) -> &str {
    use std::io::Write;
    let mut cur = io::Cursor::new(&mut buf[..]);
    let _ = write!(cur, "/proc/self/fd/{fd}");
    let n = cur.position() as usize;
    std::str::from_utf8(&buf[..n]).unwrap_or("")
}

// Shared with sprout-serve.
pub use sprout_process::pidfd::{pidfd_open, pidfd_send_signal};

/// Wait until the process behind `pidfd` exits, or `timeout_ms` passes (-1: forever).
/// Returns true if it exited.
pub fn pidfd_wait_exit(pidfd: &OwnedFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one live pollfd, nfds 1; the kernel writes only its `revents`.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        return Ok(r > 0);
    }
}

/// Mark every fd from `first` up as close-on-exec (one syscall, no /proc scan). This is what keeps
/// host fds from leaking into a container (CVE-2024-21626).
pub fn cloexec_from(first: u32) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range(2) takes integers only; with CLOSE_RANGE_CLOEXEC it closes nothing,
    // so no fd owned elsewhere (an OwnedFd, std's stdio) is invalidated.
    if unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) } == 0 {
        return Ok(());
    }
    // Kernels before 5.11 (or a filter that refuses close_range): walk /proc/self/fd.
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd: &RawFd| fd >= first as RawFd)
        .collect();
    for fd in fds {
        let _ = set_cloexec(fd, true);
    }
    Ok(())
}

pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD takes no argument and touches no memory; a bad fd is EBADF.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    let nf = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    if nf != flags {
        // SAFETY: F_SETFD with an integer flag set changes only the close-on-exec bit of `fd`.
        cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, nf) })?;
    }
    Ok(())
}

pub fn write_all_fd(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: the kernel reads at most buf.len() bytes from the live slice `buf`.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// fstat(2) on an fd (O_PATH fds included).
pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer for the duration of the call.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// Send `fd` over a unix socket with SCM_RIGHTS, with `data` (at least one byte) as the
/// payload: sprout-process's [`fdpass`](sprout_process::fdpass), shared with sprout-serve.
pub fn send_fd(sock: RawFd, data: &[u8], fd: RawFd) -> io::Result<()> {
    sprout_process::fdpass::send_all(sock, data, &[fd])
}

/// Receive a message and at most one fd (close-on-exec); any further fd that came with it is
/// closed.
pub fn recv_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut fd = [-1];
    let got = sprout_process::fdpass::recv_into(sock, buf, &mut fd)?;
    // SAFETY: recv_into installed this fd in this process for us alone (nfds == 1).
    let fd = (got.nfds == 1).then(|| unsafe { OwnedFd::from_raw_fd(fd[0]) });
    Ok((got.len, fd))
}

/// Field 22 of /proc/PID/stat: the process's start time in clock ticks. Stored with the pid so a
/// recycled pid is never mistaken for the container.
pub fn proc_start_time(pid: i32) -> io::Result<(u64, char)> {
    let s = format!("/proc/{pid}/stat");
    // One read: the line is ~300 bytes, and std's read_to_end took six reads (32, 32, 64, 128,
    // 256 bytes and the empty one) on every state check. A line that fills the buffer (a
    // kernel with many more fields) is read again whole.
    let fd = rustix::fs::open(
        s.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut buf = [0u8; 1024];
    let n = rustix::io::read(&fd, &mut buf)?;
    let long;
    let data: &[u8] = if n < buf.len() {
        &buf[..n]
    } else {
        long = std::fs::read(&s)?;
        &long
    };
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let close = data
        .iter()
        .rposition(|&b| b == b')')
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let rest = std::str::from_utf8(&data[close + 1..])
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut it = rest.split_ascii_whitespace();
    let state = it.next().and_then(|s| s.chars().next()).unwrap_or('?');
    // After ')' fields start at field 3 (state); start time is field 22 → index 19 from state.
    let st = it
        .nth(18)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok((st, state))
}

pub fn now_rfc3339() -> String {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    // SAFETY: `tm` is plain integers (and, on glibc, a zone pointer for which null is valid).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: gmtime_r (the reentrant one: no static buffer) reads `ts.tv_sec` and writes the
    // live local `tm`.
    unsafe { libc::gmtime_r(&ts.tv_sec, &mut tm) };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ts.tv_nsec
    )
}

pub fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// `ip link set lo up` in the current network namespace (runc and crun do it for a new netns).
/// Raw syscalls only (rustix: no errno, no allocation): the network namespace helper
/// (netns.rs), which shares the runtime's memory and thread pointer, calls it too.
pub fn loopback_up() -> io::Result<()> {
    loopback_up_on(&inet_socket()?)
}

/// A datagram socket in the current network namespace, for [`loopback_up_on`] and
/// [`netns_of_socket`]. Raw syscalls only.
pub fn inet_socket() -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    Ok(rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// The network namespace of `sock` (SIOCGSKNS, Linux 4.9): the helper's namespace without a
/// procfs path walk for /proc/self/ns/net. Raw syscalls only.
pub fn netns_of_socket(sock: &OwnedFd) -> rustix::io::Result<OwnedFd> {
    struct GetSkNs;
    // SAFETY: SIOCGSKNS reads no argument and returns a new file descriptor (an open
    // /proc/<pid>/ns/net-like file) as the ioctl's return value, which the Output owns.
    unsafe impl rustix::ioctl::Ioctl for GetSkNs {
        type Output = OwnedFd;
        const IS_MUTATING: bool = false;
        fn opcode(&self) -> rustix::ioctl::Opcode {
            0x894C // SIOCGSKNS
        }
        fn as_ptr(&mut self) -> *mut std::ffi::c_void {
            std::ptr::null_mut()
        }
        unsafe fn output_from_ptr(
            out: rustix::ioctl::IoctlOutput,
            _: *mut std::ffi::c_void,
        ) -> rustix::io::Result<OwnedFd> {
            // SAFETY: a successful SIOCGSKNS returns a new descriptor that nothing else owns.
            Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(out) })
        }
    }
    // SAFETY: GetSkNs's opcode takes no argument (a null pointer) and its output is the
    // returned descriptor (see the impl above).
    unsafe { rustix::ioctl::ioctl(sock, GetSkNs) }
}

/// [`loopback_up`] through an open socket of the namespace.
pub fn loopback_up_on(sock: &OwnedFd) -> io::Result<()> {
    use rustix::ioctl::{ioctl, Updater};
    const SIOCGIFFLAGS: rustix::ioctl::Opcode = libc::SIOCGIFFLAGS as rustix::ioctl::Opcode;
    let mut ifr = lo_ifreq();
    // SAFETY: SIOCGIFFLAGS takes a struct ifreq (the type given): it reads the NUL-terminated
    // name of the live `ifr` and writes its ifru_flags.
    unsafe { ioctl(sock, Updater::<SIOCGIFFLAGS, libc::ifreq>::new(&mut ifr)) }?;
    // SAFETY: SIOCGIFFLAGS just set ifru_flags, the union member read here.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    Ok(set_lo_flags(
        sock,
        ifr,
        flags | libc::IFF_UP as libc::c_short,
    )?)
}

/// lo up in a network namespace made an instant ago, through `sock`, a socket of it: one ioctl.
/// A new namespace's lo has exactly IFF_LOOPBACK set (loopback_setup), so its flags need no
/// reading first. Raw syscalls only (the network namespace helper's).
pub fn loopback_up_fresh(sock: &OwnedFd) -> rustix::io::Result<()> {
    let flags = (libc::IFF_UP | libc::IFF_LOOPBACK) as libc::c_short;
    set_lo_flags(sock, lo_ifreq(), flags)
}

/// A struct ifreq naming lo, all else zero.
fn lo_ifreq() -> libc::ifreq {
    // SAFETY: ifreq is a name array and a union of plain integers/addresses: all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    ifr
}

/// SIOCSIFFLAGS of lo (`ifr` from [`lo_ifreq`]) to `flags`.
fn set_lo_flags(
    sock: &OwnedFd,
    mut ifr: libc::ifreq,
    flags: libc::c_short,
) -> rustix::io::Result<()> {
    use rustix::ioctl::{ioctl, Updater};
    const SIOCSIFFLAGS: rustix::ioctl::Opcode = libc::SIOCSIFFLAGS as rustix::ioctl::Opcode;
    ifr.ifr_ifru.ifru_flags = flags;
    // SAFETY: SIOCSIFFLAGS takes a struct ifreq: it reads the live `ifr` (name and flags).
    unsafe { ioctl(sock, Updater::<SIOCSIFFLAGS, libc::ifreq>::new(&mut ifr)) }?;
    Ok(())
}

/// Restrict `pid` to `cpu` (from [`other_cpu`]); false on any error.
pub fn move_to_cpu(pid: i32, cpu: &rustix::thread::CpuSet) -> bool {
    Pid::from_raw(pid.max(0))
        .is_some_and(|pid| rustix::thread::sched_setaffinity(Some(pid), cpu).is_ok())
}

/// Where a just-cloned child (the network namespace helper, the init) starts: another CPU
/// than ours, so that it runs at once instead of waiting for us to block. Some kernels (this
/// project's VM hosts among them) place a forked child on its parent's CPU even when another
/// one idles, which serialises the parent's post-clone work (cgroups) and the child's. The set
/// of the next CPU after ours in our affinity mask (the caller resets the init's later,
/// `numa::reset_affinity`), computed once per start; None with a single allowed CPU or on any
/// error.
pub fn other_cpu() -> Option<rustix::thread::CpuSet> {
    other_cpus().0
}

/// The next two CPUs after ours in our affinity mask: the init's ([`other_cpu`]) and the
/// network namespace helper's (netns.rs), so that on a host with three or more CPUs the helper's
/// unshare and the init's own set-up run side by side. The second is None where fewer than three
/// CPUs are allowed (the helper then shares the init's).
pub fn other_cpus() -> (
    Option<rustix::thread::CpuSet>,
    Option<rustix::thread::CpuSet>,
) {
    use rustix::thread::{sched_getaffinity, CpuSet};
    // rustix's CpuSet is 128 bytes, the size of libc's cpu_set_t passed before.
    let Ok(mask) = sched_getaffinity(None) else {
        return (None, None);
    };
    let Some(cur) = current_cpu() else {
        return (None, None);
    };
    let n = CpuSet::MAX_CPU;
    let mut next = (1..n)
        .map(|i| (cur + i) % n)
        .filter(|&c| mask.is_set(c))
        .map(one_cpu);
    (next.next(), next.next())
}

/// The CPU this thread runs on now; None on error.
pub fn current_cpu() -> Option<usize> {
    // libc's: rustix's sched_getcpu would read the vDSO, which first loads the aux vector.
    // SAFETY: sched_getcpu takes nothing and touches no memory of ours.
    let cur = unsafe { libc::sched_getcpu() };
    usize::try_from(cur).ok()
}

/// The set of the one CPU `cpu`, for [`move_to_cpu`].
pub fn one_cpu(cpu: usize) -> rustix::thread::CpuSet {
    let mut one = rustix::thread::CpuSet::new();
    one.set(cpu);
    one
}

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x200000000;

/// fork-like clone3(2): returns 0 in the child, the child's pid in the parent (with its pidfd).
/// `cgroup_fd`: CLONE_INTO_CGROUP, the child starts in that (v2) cgroup. As with fork, a child
/// of a multi-threaded caller must keep to async-signal-safe work until it execs or exits; the
/// runtime clones from its single thread.
pub fn clone3(flags: u64, cgroup_fd: Option<&OwnedFd>) -> io::Result<(i32, Option<OwnedFd>)> {
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: flags | libc::CLONE_PIDFD as u64,
        pidfd: std::ptr::from_mut::<libc::c_int>(&mut pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if let Some(fd) = cgroup_fd {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    // SAFETY: `args` is a live #[repr(C)] clone_args (the kernel's 11-field, 88-byte layout,
    // its size passed with it); the one address in it, `pidfd`, is a live local c_int the
    // kernel writes for CLONE_PIDFD. No stack is given (stack 0): the child runs on a copy of
    // this stack, like fork, so returning here in both processes is sound.
    let pid = cvt_l(unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::from_mut::<CloneArgs>(&mut args),
            std::mem::size_of::<CloneArgs>(),
        )
    })?;
    if pid == 0 {
        return Ok((0, None));
    }
    // SAFETY: with CLONE_PIDFD a successful clone3 stored a new pidfd in `pidfd`, owned by
    // nothing else (the child's copy of `pidfd` is -1: it is written in the parent only).
    Ok((pid as i32, Some(unsafe { OwnedFd::from_raw_fd(pidfd) })))
}

/// fork-like raw clone(2) with CLONE_PARENT: the child is a child of our parent (a sibling of
/// ours), and SIGCHLD goes to that parent. Returns 0 in the child, its pid in the caller. No
/// pidfd; as with fork, a child of a multi-threaded caller must keep to async-signal-safe work.
pub fn clone_parent() -> io::Result<libc::pid_t> {
    // SAFETY: clone with a null stack (0) runs the child on a copy of this stack, like fork;
    // no parent_tid, child_tid or tls addresses are passed, so the kernel writes no memory of
    // ours.
    let pid = cvt_l(unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    })?;
    Ok(pid as libc::pid_t)
}

/// pivot_root(2): `new_root` becomes the root of the calling process's mount namespace and the
/// old one is stacked at `put_old`.
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> io::Result<()> {
    Ok(rustix::process::pivot_root(new_root, put_old)?)
}

/// keyctl(KEYCTL_JOIN_SESSION_KEYRING, name): a new session keyring called `name`, joined.
pub fn join_session_keyring(name: &CStr) -> io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_int = 1;
    // SAFETY: `name` is a borrowed NUL-terminated string alive for the call; the kernel only
    // reads it.
    cvt_l(unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, name.as_ptr()) })
        .map(drop)
}

/// `sig` back to SIG_DFL with the raw rt_sigaction(2): glibc's sigaction refuses its two
/// internal real-time signals (32, 33). The result is ignored, as for SIGKILL/SIGSTOP or a
/// number past the kernel's last signal there is nothing to reset.
pub fn sigaction_default(sig: libc::c_int) {
    // An all-zero kernel sigaction is SIG_DFL, no flags, no mask, whatever the architecture's
    // layout; 32 bytes cover every layout of it on Linux.
    let dfl = [0u64; 4];
    // SAFETY: the kernel reads one struct sigaction from the live local `dfl` (32 bytes, at
    // least the kernel's size of it) and, the old-action pointer being null, writes nothing.
    // The sigset size is 8, the kernel's sigset_t.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            dfl.as_ptr(),
            std::ptr::null_mut::<u64>(),
            8usize,
        )
    };
}

/// execveat(2) of the program behind `fd` itself (AT_EMPTY_PATH). Only returns on failure,
/// with the error.
///
/// # Safety
///
/// `argv` and `envp` must each point to a NULL-terminated array of pointers to NUL-terminated
/// strings, all of them alive for the call (the kernel reads them; on success this image is
/// gone, on failure nothing was written).
pub unsafe fn execveat_fd(
    fd: RawFd,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> io::Error {
    // SAFETY: the path is the empty C string literal; `argv` and `envp` are valid per this
    // function's contract.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            fd,
            c"".as_ptr(),
            argv,
            envp,
            libc::AT_EMPTY_PATH,
        )
    };
    io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn affinity(pid: i32) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is a bit array: all-zero is the empty set.
        let mut m: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the kernel writes at most size_of_val(&m) bytes into the live local `m`.
        let r = unsafe { libc::sched_getaffinity(pid, std::mem::size_of_val(&m), &mut m) };
        assert_eq!(r, 0);
        m
    }

    fn cpus(m: &libc::cpu_set_t) -> Vec<usize> {
        (0..8 * std::mem::size_of_val(m))
            // SAFETY: c < 8 * size_of_val(m): the bit tested is inside `*m`.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, m) })
            .collect()
    }

    #[test]
    fn child_starts_elsewhere_and_is_reset_to_every_cpu() {
        let ours = cpus(&affinity(0));
        // SAFETY: fork from the multi-threaded test harness: the child (a copy of this thread
        // only) calls pause and _exit, both async-signal-safe, and never returns into it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: integer-only calls; _exit leaves without running the harness's handlers.
            unsafe {
                libc::pause();
                libc::_exit(0)
            };
        }
        let moved = other_cpu().is_some_and(|cpu| move_to_cpu(pid, &cpu));
        if ours.len() < 2 {
            assert!(!moved, "one allowed CPU: nothing to move to");
        } else {
            assert!(moved, "moved");
            let now = cpus(&affinity(pid));
            assert_eq!(now.len(), 1, "pinned to one CPU: {now:?}");
            assert!(ours.contains(&now[0]));
            // What create does next: every CPU, clamped by the kernel to the cpuset.
            crate::numa::reset_affinity(pid);
            let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
            let n_online = online
                .trim()
                .split(',')
                .map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1
                })
                .sum::<usize>();
            assert!(cpus(&affinity(pid)).len() >= ours.len().min(n_online));
        }
        // SAFETY: `pid` is our own unreaped child (its pid cannot be reused before waitpid);
        // a null status pointer is allowed.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}
