//! Thin wrappers over the raw syscalls the start path uses. libc is used directly (rather than a
//! higher-level crate) where we need exact control over flags and over what allocates, since most
//! of this runs in a freshly cloned child.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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
    cvt(unsafe { libc::mount(p(src), target.as_ptr(), p(fstype), flags, p(data).cast()) }).map(drop)
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
        mode: mode as u64,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    let rel = path.strip_prefix("/").unwrap_or(path);
    let c = if rel.as_os_str().is_empty() {
        cstr_s(".")
    } else {
        cstr(rel)
    };
    let fd = cvt_l(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })?;
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

pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    let fd = cvt_l(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub fn pidfd_send_signal(pidfd: &OwnedFd, sig: i32) -> io::Result<()> {
    cvt_l(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

/// Wait until the process behind `pidfd` exits, or `timeout_ms` passes (-1: forever).
/// Returns true if it exited.
pub fn pidfd_wait_exit(pidfd: &OwnedFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
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
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    let nf = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    if nf != flags {
        cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, nf) })?;
    }
    Ok(())
}

pub fn write_all_fd(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
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

/// Send `fd` over a unix socket with SCM_RIGHTS, with `data` as the payload.
/// fstat(2) on an fd (O_PATH fds included).
pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer for the duration of the call.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

pub fn send_fd(sock: RawFd, data: &[u8], fd: RawFd) -> io::Result<()> {
    unsafe {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: data.len(),
        };
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let mut cbuf = [0u8; 64];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
        cvt(libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) as libc::c_int)?;
    }
    Ok(())
}

/// Receive a message and at most one fd.
pub fn recv_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    unsafe {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut cbuf = [0u8; 64];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.len() as _;
        let n = loop {
            let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            break n as usize;
        };
        let mut fd = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const RawFd);
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok((n, fd))
    }
}

/// Field 22 of /proc/PID/stat: the process's start time in clock ticks. Stored with the pid so a
/// recycled pid is never mistaken for the container.
pub fn proc_start_time(pid: i32) -> io::Result<(u64, char)> {
    let s = format!("/proc/{pid}/stat");
    let data = std::fs::read(&s)?;
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
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
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
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// `ip link set lo up` in the current network namespace (runc and crun do it for a new netns).
pub fn loopback_up() -> io::Result<()> {
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut ifr) })?;
    unsafe { ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &ifr) })?;
    Ok(())
}

/// Start a just-cloned child on another CPU than ours, so that it runs at once instead of
/// waiting for us to block: some kernels (this project's VM hosts among them) place a forked
/// child on its parent's CPU even when another one idles, which serialises the parent's
/// post-clone work (cgroups) and the init's set-up. Restricts `pid` to the next CPU after ours
/// in our affinity mask and returns that mask, which [`restore_affinity`] gives back to the
/// child; `None` (nothing changed) with a single allowed CPU or on any error.
pub fn start_on_other_cpu(pid: i32) -> Option<libc::cpu_set_t> {
    let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut mask) } < 0 {
        return None;
    }
    let cur = unsafe { libc::sched_getcpu() };
    if cur < 0 {
        return None;
    }
    let n = 8 * size;
    let other = (1..n)
        .map(|i| (cur as usize + i) % n)
        .find(|&c| unsafe { libc::CPU_ISSET(c, &mask) })?;
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(other, &mut one) };
    (unsafe { libc::sched_setaffinity(pid, size, &one) } == 0).then_some(mask)
}

/// Give `pid` back the affinity [`start_on_other_cpu`] took from it (the one it inherited).
pub fn restore_affinity(pid: i32, mask: &libc::cpu_set_t) -> io::Result<()> {
    cvt(unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), mask) })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn affinity(pid: i32) -> libc::cpu_set_t {
        let mut m: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::sched_getaffinity(pid, std::mem::size_of_val(&m), &mut m) };
        assert_eq!(r, 0);
        m
    }

    fn cpus(m: &libc::cpu_set_t) -> Vec<usize> {
        (0..8 * std::mem::size_of_val(m))
            .filter(|&c| unsafe { libc::CPU_ISSET(c, m) })
            .collect()
    }

    #[test]
    fn child_starts_elsewhere_and_gets_its_affinity_back() {
        let ours = cpus(&affinity(0));
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                libc::pause();
                libc::_exit(0)
            };
        }
        let moved = start_on_other_cpu(pid);
        if ours.len() < 2 {
            assert!(moved.is_none(), "one allowed CPU: nothing to move to");
        } else {
            let mask = moved.expect("moved");
            let now = cpus(&affinity(pid));
            assert_eq!(now.len(), 1, "pinned to one CPU: {now:?}");
            assert!(ours.contains(&now[0]));
            assert_eq!(
                cpus(&mask),
                ours,
                "the mask handed back is the inherited one"
            );
            restore_affinity(pid, &mask).unwrap();
            assert_eq!(cpus(&affinity(pid)), ours);
        }
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}
