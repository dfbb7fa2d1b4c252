//! Plain cold start: clone + exec a fresh python straight into a sandbox. The clone makes the
//! pid/ipc/uts namespaces (the sandbox is pid 1 of its pid namespace: one process, no
//! intermediate). Everything between clone and exec is raw syscalls on pre-built buffers (the
//! engine is multi-threaded): join the pool cgroup (write "0" to the pre-opened cgroup.procs
//! fds), chroot, unshare the mount (and network) namespace, a private
//! /proc (with the mount namespace), hostname,
//! drop the capability bounding set, setgroups/setresgid/setresuid, no_new_privs (one call:
//! sprout-process's `caps::drop_all_privileges`, the runtime's pieces), seccomp (from the BPF
//! cache), then exec `python3 -I -S /.sprout/sprout_init.py sandbox 3` (sprout_zygote.py from its .pyc).

use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub const CLONE_NEWNS: i32 = libc::CLONE_NEWNS;
pub const CLONE_NEWUTS: i32 = libc::CLONE_NEWUTS;
pub const CLONE_NEWIPC: i32 = libc::CLONE_NEWIPC;
pub const CLONE_NEWPID: i32 = libc::CLONE_NEWPID;
pub const CLONE_NEWNET: i32 = libc::CLONE_NEWNET;

pub struct ColdSpec<'a> {
    pub python: &'a str,
    pub root: &'a Path,
    pub procs: &'a [RawFd],
    pub sock: RawFd,
    /// The sandbox's stdout/stderr (the write end of its log pipe); a cold spare gets its
    /// own with the assignment instead.
    pub log_fd: RawFd,
    /// `/dev/null`, the sandbox's stdin (never the engine's own fd 0).
    pub null_fd: RawFd,
    pub unshare: i32,
    pub uid: u32,
    pub gid: u32,
    pub seccomp: Option<&'a sprout_seccomp::Prepared>,
}

/// Mark every fd from `first` up close-on-exec: one close_range(2) (Linux 5.11+); on an older
/// kernel (ENOSYS/EINVAL) a loop over the fd table's size (raw fcntl only: this also runs
/// between a raw clone and exec). Async-signal-safe.
pub fn cloexec_from(first: u32) {
    // SAFETY: close_range and fcntl(F_GETFD/F_SETFD) take integers and only change fd flags;
    // getrlimit writes one rlimit into the live local `rl`, for which all-zero is a valid
    // value. No allocation, no lock: fine between a raw clone and exec.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return;
        }
        let mut rl: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 {
            rl.rlim_cur.min(1 << 20) as i32
        } else {
            1024
        };
        for fd in first as i32..max {
            let fl = libc::fcntl(fd, libc::F_GETFD);
            if fl >= 0 && fl & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, fl | libc::FD_CLOEXEC);
            }
        }
    }
}

/// In a child after a raw clone: put `null` on fd 0, `log` on 1 and 2 (each when >= 0) and
/// `sock` on 3, then close every fd from 4 up (close_range; a loop over the table's size on a
/// kernel without it). Returns the socket's new number, 3. The engine's fds 0-2 are always
/// open (Rust's runtime opens /dev/null on any that are not at start-up), so `sock`, `null`
/// and `log` are >= 3 and moving one never clobbers another that is still to be moved but 3:
/// `null` and `log` are moved off 3 first.
///
/// # Safety
/// Only in a child with its own fd table (no CLONE_FILES), which owns every fd it closes.
unsafe fn keep_only(sock: RawFd, null: RawFd, log: RawFd) -> RawFd {
    // SAFETY: dup2/close_range/close on this process's own fd table; no memory is touched.
    unsafe {
        if null >= 0 {
            libc::dup2(null, 0);
        }
        if log >= 0 {
            libc::dup2(log, 1);
            libc::dup2(log, 2);
        }
        if sock != 3 && libc::dup2(sock, 3) != 3 {
            child_fail(sock, b"dup2");
        }
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) != 0 {
            let mut rl: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 {
                rl.rlim_cur.min(1 << 20) as i32
            } else {
                1024
            };
            for fd in 4..max {
                libc::close(fd);
            }
        }
    }
    3
}

/// Write `{"ready":false,"error":"setup: <what> failed (errno N)"}` as a frame, no allocation.
fn child_fail(sock: RawFd, what: &[u8]) -> ! {
    // SAFETY: __errno_location returns this thread's errno slot, valid and aligned for the
    // life of the thread.
    let errno = unsafe { *libc::__errno_location() };
    let mut buf = [0u8; 160];
    let mut n = 4;
    let mut put = |b: &[u8], n: &mut usize| {
        for &c in b {
            if *n < buf.len() {
                buf[*n] = c;
                *n += 1;
            }
        }
    };
    put(b"{\"ready\":false,\"error\":\"sandbox setup: ", &mut n);
    put(what, &mut n);
    put(b" failed (errno ", &mut n);
    let mut digits = [0u8; 12];
    let mut k = 0;
    let mut e = errno.unsigned_abs();
    loop {
        digits[k] = b'0' + (e % 10) as u8;
        k += 1;
        e /= 10;
        if e == 0 {
            break;
        }
    }
    while k > 0 {
        k -= 1;
        put(&digits[k..k + 1], &mut n);
    }
    put(b")\"}", &mut n);
    let len = (n - 4) as u32;
    buf[..4].copy_from_slice(&len.to_le_bytes());
    // SAFETY: writes the first n <= 160 bytes of the live local `buf`; _exit ends the child
    // without running any of the engine's code (atexit handlers, destructors).
    unsafe {
        libc::write(sock, buf.as_ptr().cast(), n);
        libc::_exit(127)
    }
}

/// Clone the cold sandbox (pid 1 of its new pid namespace). Returns its pid.
pub fn spawn_cold(s: &ColdSpec) -> std::io::Result<i32> {
    spawn(s, false)
}

/// Clone a *cold spare* into new pid/ipc/uts namespaces (`s.unshare` minus mnt/net): it
/// joins its cgroup and sets the hostname, then blocks until
/// [`assign_cold_spare`] sends it the root (dir fd) and the late namespace flags; then as
/// [`spawn_cold`]: chroot, mount/net namespaces, /proc, privileges, seccomp, exec python. The
/// cgroup v1 migrations (which can wait for an RCU grace period) and the namespaces stay off
/// the request path. `s.root` is ignored. EOF: it exits.
pub fn spawn_cold_spare(s: &ColdSpec) -> std::io::Result<i32> {
    spawn(s, true)
}

/// Hand a cold spare its root, late namespace flags (CLONE_NEWNS / CLONE_NEWNET) and its
/// stdout/stderr (`log`: the write end of its log pipe).
pub fn assign_cold_spare(
    sock: &std::os::unix::net::UnixStream,
    root: &Path,
    late: i32,
    log: RawFd,
) -> std::io::Result<()> {
    let fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)?;
    crate::proto::send(sock, &late.to_le_bytes(), &[fd.as_raw_fd(), log])
}

/// Child side of a cold spare's hand-over: exactly 8 bytes (length 4 + flags), the root dir fd
/// and the log pipe riding on them. Raw syscalls only. None on EOF or a malformed message.
///
/// # Safety
///
/// Only in the cold-spare child between its raw clone and exec, with `sock` its own socket
/// (fd 3): it allocates nothing and takes no lock, and the fds it returns are raw, owned by
/// the caller (no `OwnedFd`, whose destructor must not run there).
unsafe fn wait_assignment(sock: RawFd) -> Option<(RawFd, i32, RawFd)> {
    let mut buf = [0u8; 8];
    let mut fds = [-1; 2];
    // sprout-process's SCM_RIGHTS receive: no allocation, no lock, the fds close-on-exec.
    let got = sprout_process::fdpass::recv_into(sock, &mut buf, &mut fds).ok()?;
    if got.len == 0 || got.nfds == 0 {
        for &fd in &fds[..got.nfds] {
            // SAFETY: an fd recv_into just installed for this child alone.
            unsafe { libc::close(fd) };
        }
        return None;
    }
    let (fd, log) = (fds[0], if got.nfds > 1 { fds[1] } else { -1 });
    let mut got = got.len;
    while got < 8 {
        // SAFETY: got < 8, so buf[got..8] is in bounds and 8 - got bytes are writable there.
        let k = unsafe { libc::read(sock, buf.as_mut_ptr().add(got).cast(), 8 - got) };
        if k <= 0 {
            return None;
        }
        got += k as usize;
    }
    let late = i32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    Some((fd, late, log))
}

fn spawn(s: &ColdSpec, spare: bool) -> std::io::Result<i32> {
    let python = CString::new(s.python).unwrap();
    let root = CString::new(s.root.as_os_str().as_bytes()).unwrap();
    let args: Vec<CString> = [
        s.python,
        "-I",
        "-S",
        "/.sprout/sprout_init.py",
        "sandbox",
        "3",
    ]
    .iter()
    .map(|a| CString::new(*a).unwrap())
    .collect();
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envs = python_env();
    let mut envp: Vec<*const libc::c_char> = envs.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let slash = c"/";
    let hostname = b"sandbox";
    let zero = b"0";

    let mut flags = s.unshare;
    // A spare makes its mount namespace only once it has a root (the copy must hold the
    // root's mounts); a network namespace it is given early, it makes at once.
    let early = if spare { flags & !CLONE_NEWNS } else { flags };
    // The pid, ipc and uts namespaces are made by the clone itself: the child is pid 1 of its
    // pid namespace at once. (Before: fork, unshare, fork again and exit the intermediate,
    // i.e. two copies of the engine's address space and one teardown per cold start.) A raw
    // clone skips glibc's fork handlers: the child only makes raw syscalls (no allocation,
    // no locks), as it did after fork.
    let at_clone = early & (CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS);
    // SAFETY: the child runs only the block below (raw syscalls on buffers built above, no
    // allocation, no lock; glibc's fork handlers are skipped) and ends in execve or _exit,
    // never returning into the engine's code.
    let pid = unsafe { raw_clone(at_clone) }?;
    if pid > 0 {
        return Ok(pid);
    }
    // ---- child: async-signal-safe only ----
    // SAFETY: raw syscalls on this child's own copy of the fd table and memory, on buffers
    // built before the clone (NUL-terminated CStrings, NULL-terminated argv/envp arrays of
    // pointers into them, all alive until execve); nothing here allocates or takes a lock.
    // keep_only and wait_assignment are called where their contracts ask: in this child,
    // which has its own fd table (no CLONE_FILES). Prepared::load is one seccomp(2) call on a
    // pre-built program, without allocation.
    unsafe {
        for &fd in s.procs {
            if libc::write(fd, zero.as_ptr().cast(), 1) != 1 {
                child_fail(s.sock, b"joining cgroup");
            }
        }
        // The clone copied every fd of the engine: its listening socket, the other spares'
        // and sandboxes' sockets, pool cgroup fds. A spare may wait for minutes before its
        // exec (and a spare no cleanup reaches would never see EOF on its socket while it
        // held the others), so keep only what the child needs from here on: /dev/null on 0,
        // the log on 1 and 2 (a spare: /dev/null until its assignment brings its log), the
        // socket on 3; close the rest now.
        let sock = keep_only(s.sock, s.null_fd, if spare { s.null_fd } else { s.log_fd });
        if !spare {
            if libc::chroot(root.as_ptr()) != 0 {
                child_fail(sock, b"chroot");
            }
            if libc::chdir(slash.as_ptr()) != 0 {
                child_fail(sock, b"chdir");
            }
        }
        let rest = early & !at_clone;
        if rest != 0 && libc::unshare(rest) != 0 {
            child_fail(sock, b"unshare");
        }
        if early & CLONE_NEWUTS != 0
            && libc::sethostname(hostname.as_ptr().cast(), hostname.len()) != 0
        {
            child_fail(sock, b"sethostname");
        }
        let mut log_fd = -1;
        if spare {
            let Some((rootfd, late, log)) = wait_assignment(sock) else {
                libc::_exit(0)
            };
            if libc::fchdir(rootfd) != 0 || libc::chroot(c".".as_ptr()) != 0 {
                child_fail(sock, b"chroot");
            }
            if libc::chdir(slash.as_ptr()) != 0 {
                child_fail(sock, b"chdir");
            }
            libc::close(rootfd);
            log_fd = log;
            flags = early | late;
            if late != 0 && libc::unshare(late) != 0 {
                child_fail(sock, b"unshare");
            }
        }
        if flags & CLONE_NEWNS != 0
            && libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) != 0
        {
            child_fail(sock, b"mount /proc");
        }
        // The privilege drop is sprout-process's (the runtime's pieces): bounding set
        // emptied, setgroups/setresgid/setresuid as raw syscalls (glibc's wrappers broadcast
        // the id change to every thread glibc believes exists, SIGSETXID + futex wait, and
        // after a raw clone of the multi-threaded engine the child still has the parent's
        // thread list: it would wait forever), no_new_privs. No allocation.
        if let Err((step, errno)) =
            sprout_process::caps::drop_all_privileges(s.uid, s.gid, Some(&[][..]))
        {
            use sprout_process::caps::DropStep;
            use sprout_process::identity::IdStep;
            *libc::__errno_location() = errno;
            child_fail(
                sock,
                match step {
                    DropStep::Bounding(_) => b"dropping the bounding set",
                    DropStep::Identity(IdStep::Setgroups) => b"setgroups",
                    DropStep::Identity(IdStep::Setresgid) => b"setresgid",
                    DropStep::Identity(IdStep::Setresuid) => b"setresuid",
                    DropStep::NoNewPrivs => b"no_new_privs",
                },
            );
        }
        if log_fd >= 0 {
            libc::dup2(log_fd, 2);
            libc::dup2(log_fd, 1);
        }
        if let Some(p) = s.seccomp {
            if p.load().is_err() {
                child_fail(sock, b"seccomp");
            }
        }
        if sock == 3 {
            let fl = libc::fcntl(3, libc::F_GETFD);
            libc::fcntl(3, libc::F_SETFD, fl & !libc::FD_CLOEXEC);
        } else if libc::dup2(sock, 3) != 3 {
            child_fail(sock, b"dup2");
        }
        // Nothing but 0-3 crosses the exec, whatever the engine holds or inherited.
        cloexec_from(4);
        libc::execve(python.as_ptr(), argv.as_ptr(), envp.as_ptr());
        child_fail(3, b"exec python");
    }
}

/// The environment python starts with, in a cold sandbox and in the root zygote.
fn python_env() -> Vec<CString> {
    [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "HOME=/tmp",
        "LANG=C.UTF-8",
        "PYTHONDONTWRITEBYTECODE=1",
    ]
    .iter()
    .map(|a| CString::new(*a).unwrap())
    .collect()
}

/// clone(2) with `flags | SIGCHLD` and nothing else: no CLONE_VM, no stack, no tid pointers,
/// so like fork the child gets a copy-on-write copy of this address space and goes on on its
/// copy of this stack; the kernel writes no memory of ours. Ok(0) in the child, the child's
/// pid in the parent.
///
/// # Safety
/// The engine is multi-threaded and glibc's fork handlers do not run: in the child only
/// async-signal-safe code (raw syscalls on buffers built before the call, no allocation, no
/// lock) until execve or _exit, never a return into the engine's code.
unsafe fn raw_clone(flags: i32) -> std::io::Result<i32> {
    // SAFETY: the arguments are integers and null pointers; the caller keeps the child to
    // async-signal-safe code (this function's contract).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    } as i32;
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(pid)
}

/// The identities of the zygotes' user namespace: its root maps to the host's `zygote`
/// (uid, gid), the sandboxes' ids to themselves (a sandbox forked from a zygote is the same
/// host user as a cold one).
pub struct ZygoteIds {
    pub zygote: (u32, u32),
    pub sandbox: (u32, u32),
}

impl ZygoteIds {
    fn map(z: u32, sb: u32) -> String {
        if sb == 0 {
            format!("0 {z} 1\n")
        } else {
            format!("0 {z} 1\n{sb} {sb} 1\n")
        }
    }
}

/// What [`spawn_zygote`] starts: the interpreter, its script, the engine's end of the socket
/// (fd 3 in the zygote), its stdout/stderr (`log_fd`) and stdin (`null_fd`; -1: inherited),
/// its namespace's identities, and whether it gets a network namespace of its own.
pub struct ZygoteSpawn<'a> {
    pub python: &'a str,
    pub script: &'a Path,
    pub sock: &'a std::os::unix::net::UnixStream,
    pub log_fd: RawFd,
    pub null_fd: RawFd,
    pub ids: &'a ZygoteIds,
    pub own_net: bool,
}

/// Exec the root zygote: `python -I -S /proc/self/fd/4 zygote 3 4` (the script passed as an
/// fd: the zygote may not be allowed to reach it by its path), cloned into a user namespace
/// and a pid namespace of its own (it is pid 1 there; every zygote and every sandbox forked
/// from one lives below it), and IPC, UTS and (`z.own_net`) network namespaces owned by it.
/// The namespace maps its root to `z.ids.zygote` and the sandboxes' ids to themselves; the
/// child waits for the maps and for `place` (which moves it into its cgroup, by pid), becomes
/// that root, then execs, so python starts with the namespace's capabilities and none of the
/// host's, and every page of its start-up is charged to its own cgroup. Returns its pid.
pub fn spawn_zygote(
    z: &ZygoteSpawn,
    place: &dyn Fn(i32) -> std::io::Result<()>,
) -> std::io::Result<i32> {
    let ZygoteSpawn {
        python,
        script,
        sock,
        log_fd,
        null_fd,
        ids,
        own_net,
    } = *z;
    let py = CString::new(python).unwrap();
    let args: Vec<CString> = vec![
        CString::new(python).unwrap(),
        c"-I".into(),
        c"-S".into(),
        c"/proc/self/fd/4".into(),
        c"zygote".into(),
        c"3".into(),
        c"4".into(),
    ];
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envs = python_env();
    let mut envp: Vec<*const libc::c_char> = envs.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let script = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(script)?;
    // The child waits on it for its maps (close-on-exec, as std makes every pipe).
    let (go_r, mut go_w) = std::io::pipe()?;
    let fd = sock.as_raw_fd();
    let sfd = script.as_raw_fd();
    let gr = go_r.as_raw_fd();
    // IPC and UTS namespaces of its own, and a network namespace (lo down) unless the
    // operator gives sandboxes the host's network (every sandbox makes its own on top).
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if own_net {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: the child runs only the block below (raw syscalls on buffers built above, no
    // allocation, no lock) and ends in execve or _exit, never returning into the engine's
    // code.
    let pid = unsafe { raw_clone(flags) }?;
    if pid == 0 {
        // ---- child: async-signal-safe only ----
        // SAFETY: raw syscalls on this child's own fd table and memory, on buffers built
        // before the clone (NUL-terminated CStrings, NULL-terminated pointer arrays into
        // them, alive until execve); no allocation, no lock. _exit if anything fails.
        unsafe {
            // The engine writes our maps and places us in our cgroup, then one byte; EOF: it
            // gave up.
            let mut b = 0u8;
            loop {
                let r = libc::read(gr, std::ptr::from_mut(&mut b).cast(), 1);
                if r == 1 {
                    break;
                }
                if r < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                libc::_exit(126);
            }
            // Root of the new namespace (the host's zygote ids), no supplementary groups.
            if libc::syscall(libc::SYS_setresgid, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresuid, 0, 0, 0) != 0
            {
                libc::_exit(125);
            }
            libc::setsid();
            // Above every fd the moves below write to, then into place.
            let s_hi = libc::fcntl(sfd, libc::F_DUPFD, 10);
            let k_hi = libc::fcntl(fd, libc::F_DUPFD, 10);
            if s_hi < 0 || k_hi < 0 {
                libc::_exit(124);
            }
            if log_fd >= 0 {
                libc::dup2(log_fd, 2);
                libc::dup2(log_fd, 1);
            }
            if null_fd >= 0 {
                libc::dup2(null_fd, 0);
            }
            if libc::dup2(k_hi, 3) != 3 || libc::dup2(s_hi, 4) != 4 {
                libc::_exit(124);
            }
            cloexec_from(5);
            libc::execve(py.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    drop(go_r);
    let go = (|| {
        std::fs::write(
            format!("/proc/{pid}/uid_map"),
            ZygoteIds::map(ids.zygote.0, ids.sandbox.0),
        )?;
        std::fs::write(
            format!("/proc/{pid}/gid_map"),
            ZygoteIds::map(ids.zygote.1, ids.sandbox.1),
        )
    })()
    .map_err(|e| std::io::Error::new(e.kind(), format!("the zygote's user namespace maps: {e}")))
    // Into its cgroup before python starts: placed after the exec, python's own start-up
    // (~3-5 MiB) raced the write, and what it had touched by then stayed charged to the
    // engine's cgroup (the zygote's charge varied 2.0-5.5 MiB between starts).
    .and_then(|()| {
        place(pid).map_err(|e| std::io::Error::new(e.kind(), format!("the zygote's cgroup: {e}")))
    })
    .and_then(|()| std::io::Write::write_all(&mut go_w, b"1"));
    if let Err(e) = go {
        // SAFETY: kill takes integers only; `pid` is the child we just cloned, not yet reaped
        // (the engine's reaper collects it).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        return Err(e);
    }
    Ok(pid)
}
