//! Real loads in forked children: the filters do what the profile says.

mod common;

use common::{exit_code, in_nnp_child, profile, sys};
use serde_json::json;
use sprout_seccomp::{compile, compile_profile, prepare, Prepared};

fn pid() -> libc::c_long {
    // SAFETY: getpid(2) takes no arguments and always succeeds.
    unsafe { libc::c_long::from(libc::getpid()) }
}

/// Loads `p` in a child, runs `check` there, returns the child's exit code.
fn run(p: &Prepared, check: fn() -> i32) -> i32 {
    exit_code(in_nnp_child(|| match p.load() {
        Ok(None) => check(),
        Ok(Some(_)) => 101,
        Err(_) => 102,
    }))
}

#[test]
fn errno_rules_and_argument_conditions() {
    let p = profile(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {"names": ["getppid", "no_such_syscall_sprout"], "action": "SCMP_ACT_ERRNO", "errnoRet": 42},
            // Two conditions on the same index: ORed (split into two rules, as runc does).
            {"names": ["fcntl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 44, "args": [
                {"index": 1, "value": libc::F_GETFD, "op": "SCMP_CMP_EQ"},
                {"index": 1, "value": libc::F_GETFL, "op": "SCMP_CMP_EQ"}]},
            // Conditions on different indexes: ANDed.
            {"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 46, "args": [
                {"index": 0, "value": 1, "op": "SCMP_CMP_NE"},
                {"index": 1, "value": 0, "op": "SCMP_CMP_EQ"}]},
            // (arg0 & 7) == 2
            {"names": ["umask"], "action": "SCMP_ACT_ERRNO", "errnoRet": 45, "args": [
                {"index": 0, "value": 7, "valueTwo": 2, "op": "SCMP_CMP_MASKED_EQ"}]},
            // No errnoRet: EPERM.
            {"names": ["getpgid"], "action": "SCMP_ACT_ERRNO"},
            {"names": ["getsid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 0},
            {"names": ["getpriority"], "action": "SCMP_ACT_ERRNO", "args": [
                {"index": 0, "value": 5, "op": "SCMP_CMP_GT"}]}
        ]
    }));
    let (prep, _) = prepare(&p, None).unwrap();
    assert!(!prep.wants_listener());
    let code = run(&prep, || {
        if sys(libc::SYS_getppid, 0, 0, 0) != Err(42) {
            return 10;
        }
        if sys(libc::SYS_fcntl, 0, i64::from(libc::F_GETFD), 0) != Err(44) {
            return 11;
        }
        if sys(libc::SYS_fcntl, 0, i64::from(libc::F_GETFL), 0) != Err(44) {
            return 12;
        }
        if sys(libc::SYS_fcntl, 0, i64::from(libc::F_GETOWN), 0).is_err() {
            return 13;
        }
        if sys(libc::SYS_kill, pid(), 0, 0) != Err(46) {
            return 14;
        }
        if sys(libc::SYS_kill, 1, 0, 0) == Err(46) {
            return 15;
        }
        if sys(libc::SYS_umask, 0o022, 0, 0) != Err(45) {
            return 16; // 0o022 & 7 == 2
        }
        if sys(libc::SYS_umask, 0o027, 0, 0).is_err() {
            return 17;
        }
        if sys(libc::SYS_getpgid, 0, 0, 0) != Err(libc::EPERM) {
            return 18;
        }
        // errnoRet 0: the syscall "succeeds" with 0 without running.
        if sys(libc::SYS_getsid, 0, 0, 0) != Ok(0) {
            return 19;
        }
        if sys(libc::SYS_getpriority, 6, 0, 0) != Err(libc::EPERM) {
            return 20;
        }
        if sys(libc::SYS_getpriority, i64::from(libc::PRIO_PROCESS), 0, 0).is_err() {
            return 21;
        }
        0
    });
    assert_eq!(code, 0, "check {code} failed in the child");
}

#[test]
fn default_errno_ret() {
    let mk = |d: Option<u32>| {
        let mut v = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "syscalls": [{"names": ["exit_group", "exit", "getpid"], "action": "SCMP_ACT_ALLOW"}]
        });
        if let Some(d) = d {
            v["defaultErrnoRet"] = json!(d);
        }
        compile_profile(&profile(v)).unwrap()
    };
    let p = mk(Some(libc::EXDEV as u32));
    let code = run(&p, || {
        if sys(libc::SYS_getppid, 0, 0, 0) != Err(libc::EXDEV) {
            return 10;
        }
        if sys(libc::SYS_getpid, 0, 0, 0).is_err() {
            return 11;
        }
        0
    });
    assert_eq!(code, 0);
    let p = mk(None);
    let code = run(&p, || {
        if sys(libc::SYS_getppid, 0, 0, 0) != Err(libc::EPERM) {
            10
        } else {
            0
        }
    });
    assert_eq!(code, 0);
}

fn killed_by(p: &Prepared) -> Option<i32> {
    let st = in_nnp_child(|| match p.load() {
        Ok(_) => {
            let _ = sys(libc::SYS_getppid, 0, 0, 0);
            0
        }
        Err(_) => 102,
    });
    libc::WIFSIGNALED(st).then(|| libc::WTERMSIG(st))
}

fn one_rule(action: &str, errno: Option<u32>) -> Prepared {
    let mut rule = json!({"names": ["getppid"], "action": action});
    if let Some(e) = errno {
        rule["errnoRet"] = json!(e);
    }
    compile_profile(&profile(
        json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [rule]}),
    ))
    .unwrap()
}

#[test]
fn kill_and_trap_actions() {
    for a in [
        "SCMP_ACT_KILL",
        "SCMP_ACT_KILL_THREAD",
        "SCMP_ACT_KILL_PROCESS",
        "SCMP_ACT_TRAP",
    ] {
        assert_eq!(killed_by(&one_rule(a, None)), Some(libc::SIGSYS), "{a}");
    }
}

#[test]
fn log_allow_and_trace_actions() {
    // LOG and ALLOW let the call through.
    for a in ["SCMP_ACT_LOG", "SCMP_ACT_ALLOW"] {
        let code = run(&one_rule(a, None), || {
            match sys(libc::SYS_getppid, 0, 0, 0) {
                Ok(p) if p > 0 => 0,
                _ => 10,
            }
        });
        assert_eq!(code, 0, "{a}");
    }
    // TRACE without a tracer: the kernel fails the call with ENOSYS.
    let code = run(&one_rule("SCMP_ACT_TRACE", Some(7)), || {
        if sys(libc::SYS_getppid, 0, 0, 0) != Err(libc::ENOSYS) {
            10
        } else {
            0
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn all_flags_load() {
    let p = compile_profile(&profile(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "flags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
                  "SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"],
        "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 9}]
    })))
    .unwrap();
    // TSYNC ignored; WAIT_KILLABLE_RECV dropped without a listener (the kernel would refuse it).
    assert_eq!(
        p.flags(),
        compile::SECCOMP_FILTER_FLAG_LOG | compile::SECCOMP_FILTER_FLAG_SPEC_ALLOW
    );
    let code = run(&p, || {
        if sys(libc::SYS_getppid, 0, 0, 0) != Err(9) {
            10
        } else {
            0
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn notify_returns_a_listener_fd() {
    let p = profile(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "listenerPath": "/run/seccomp-agent.sock",
        "flags": ["SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"],
        "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_NOTIFY"}]
    }));
    let (prep, _) = prepare(&p, None).unwrap();
    assert!(prep.wants_listener());
    assert_ne!(prep.flags() & compile::SECCOMP_FILTER_FLAG_NEW_LISTENER, 0);
    // WAIT_KILLABLE_RECV needs kernel 5.19; run the load with and without it.
    let code = exit_code(in_nnp_child(|| match prep.load() {
        Ok(Some(fd)) => {
            use std::os::fd::AsRawFd;
            let fd = fd.as_raw_fd();
            // SAFETY: F_GETFD takes no pointer; `fd` is the listener owned by the OwnedFd
            // above, alive for both calls.
            let fd_flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            if fd < 0 || fd_flags < 0 {
                return 10;
            }
            // Close-on-exec is set on the listener by the kernel.
            if fd_flags & libc::FD_CLOEXEC == 0 {
                return 11;
            }
            0
        }
        Ok(None) => 12,
        Err(sprout_seccomp::Error::Io(e)) => 20 + e.raw_os_error().unwrap_or(0).min(200),
        Err(_) => 13,
    }));
    assert_eq!(code, 0);

    // NOTIFY without listenerPath is refused.
    let bad = profile(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_NOTIFY"}]
    }));
    assert!(matches!(
        prepare(&bad, None),
        Err(sprout_seccomp::Error::Invalid(_))
    ));
}

/// A real notification round trip: the child's `getppid` is answered by the parent-side agent
/// (another thread of the child) with a chosen value.
#[test]
fn notify_round_trip() {
    let p = profile(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "listenerPath": "/run/seccomp-agent.sock",
        "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_NOTIFY"}]
    }));
    let (prep, _) = prepare(&p, None).unwrap();
    let prep: &'static Prepared = Box::leak(Box::new(prep));
    // The child is single-threaded at load time; the agent runs in a forked grandchild that
    // inherits the listener fd.
    let code = exit_code(in_nnp_child(|| {
        let fd = match prep.load() {
            Ok(Some(fd)) => fd,
            _ => return 10,
        };
        use std::os::fd::AsRawFd;
        let raw = fd.as_raw_fd();
        // SAFETY: this child of the test process is single-threaded (in_nnp_child forked only the
        // calling thread), so the grandchild may run any code; it ends with _exit.
        let agent = unsafe { libc::fork() };
        if agent == 0 {
            // seccomp_notif / seccomp_notif_resp (linux/seccomp.h)
            #[repr(C)]
            struct Notif {
                id: u64,
                pid: u32,
                flags: u32,
                nr: i32,
                arch: u32,
                ip: u64,
                args: [u64; 6],
            }
            #[repr(C)]
            struct Resp {
                id: u64,
                val: i64,
                error: i32,
                flags: u32,
            }
            const RECV: libc::c_ulong = 0xc0502100; // SECCOMP_IOCTL_NOTIF_RECV
            const SEND: libc::c_ulong = 0xc0182101; // SECCOMP_IOCTL_NOTIF_SEND
                                                    // SAFETY: Notif is repr(C) integers only: all-zero is a valid value (and what
                                                    // SECCOMP_IOCTL_NOTIF_RECV requires of its buffer).
            let mut n: Notif = unsafe { std::mem::zeroed() };
            // SAFETY: RECV writes one seccomp_notif (80 bytes, the size encoded in the ioctl
            // number, matching Notif's repr(C) layout) into the live local `n`.
            if unsafe { libc::ioctl(raw, RECV, &mut n) } != 0 {
                // SAFETY: _exit ends this forked agent without running the harness's code.
                unsafe { libc::_exit(1) };
            }
            let r = Resp {
                id: n.id,
                val: 4242,
                error: 0,
                flags: 0,
            };
            // SAFETY: SEND reads one seccomp_notif_resp (24 bytes, the size in the ioctl
            // number, matching Resp's repr(C) layout) from the live local `r`.
            if unsafe { libc::ioctl(raw, SEND, &r) } != 0 {
                // SAFETY: as above.
                unsafe { libc::_exit(2) };
            }
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        drop(fd);
        let got = sys(libc::SYS_getppid, 0, 0, 0);
        let mut st = 0;
        // SAFETY: `agent` is our own child; `st` is a live c_int for its status.
        unsafe { libc::waitpid(agent, &mut st, 0) };
        if !libc::WIFEXITED(st) || libc::WEXITSTATUS(st) != 0 {
            return 11;
        }
        if got != Ok(4242) {
            return 12;
        }
        0
    }));
    assert_eq!(code, 0);
}

#[test]
fn podman_default_profile_behaves() {
    let (prep, _) = prepare(&common::podman_profile(), None).unwrap();
    let code = run(&prep, || {
        // Allowed.
        if sys(libc::SYS_getpid, 0, 0, 0).is_err() {
            return 10;
        }
        // Listed with errnoRet 1.
        if sys(libc::SYS_sethostname, 0, 0, 0) != Err(libc::EPERM) {
            return 11;
        }
        if sys(libc::SYS_kexec_load, 0, 0, 0) != Err(libc::EPERM) {
            return 12;
        }
        // socket(AF_NETLINK, *, NETLINK_AUDIT): errnoRet 22 (two args ANDed).
        if sys(
            libc::SYS_socket,
            i64::from(libc::AF_NETLINK),
            i64::from(libc::SOCK_RAW),
            9,
        ) != Err(libc::EINVAL)
        {
            return 13;
        }
        // Not listed: the default action, ERRNO(ENOSYS).
        if sys(libc::SYS_add_key, 0, 0, 0) != Err(libc::ENOSYS) {
            return 14;
        }
        if sys(1000, 0, 0, 0) != Err(libc::ENOSYS) {
            return 15;
        }
        // personality(0) is allowed by an argument rule; personality(0xdead) is not.
        if sys(libc::SYS_personality, 0, 0, 0).is_err() {
            return 16;
        }
        if sys(libc::SYS_personality, 0xdead, 0, 0) != Err(libc::ENOSYS) {
            return 17;
        }
        0
    });
    assert_eq!(code, 0, "check {code} failed in the child");
}
