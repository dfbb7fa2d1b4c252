//! linux.seccomp end to end: a filter's errno reaches the init and `exec` processes, and a
//! SCMP_ACT_NOTIFY filter's listener fd reaches linux.seccomp.listenerPath, for the init
//! (state "creating") and for each `exec` (state "running").

use serde_json::{json, Value};
use sprout_integration_tests::*;
use std::os::fd::OwnedFd;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixListener;
use std::time::Duration;

const SLEEP: &[&str] = &["sleep", "1000"];

fn profile(action: &str) -> Value {
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": action, "errnoRet": 1}]
    })
}

#[test]
fn errno_rule_applies_to_init_and_exec() {
    let ctx = Ctx::new("secerrno");
    let mut b = ctx.bundle(SLEEP);
    // With TSYNC, which `features` lists as supported (runc's profiles set it).
    let mut p = profile("SCMP_ACT_ERRNO");
    p["flags"] = json!(["SECCOMP_FILTER_FLAG_TSYNC"]);
    b.set("/linux/seccomp", p);
    b.create().assert_ok();
    b.start_and_wait_exec();
    let o = b.exec(&[], &["sh", "-c", "mkdir /tmp/y 2>&1; echo rc=$?"]);
    assert!(
        o.stdout.contains("Operation not permitted") && o.stdout.contains("rc=1"),
        "exec: mkdir must fail with EPERM under the container's filter: {}",
        o.describe()
    );
    // The init (pid 1) and the exec'd process are both filtered (mode 2).
    let o = b.exec(
        &[],
        &["sh", "-c", "grep Seccomp: /proc/1/status /proc/self/status"],
    );
    assert_eq!(
        o.stdout.matches("Seccomp:\t2").count(),
        2,
        "{}",
        o.describe()
    );
}

/// Receive one message with an fd (SCM_RIGHTS) from an accepted connection.
fn recv_with_fd(l: &UnixListener) -> (Value, OwnedFd) {
    l.set_nonblocking(false).unwrap();
    let (s, _) = l.accept().expect("accept on listenerPath");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 65536];
    let got = sprout_process::fdpass::recv(s.as_raw_fd(), &mut buf).expect("recvmsg");
    let fd = got.fds.into_iter().next().expect("no fd was passed");
    let v: Value = serde_json::from_slice(&buf[..got.len]).expect("listener message is JSON");
    (v, fd)
}

fn fd_target(fd: &OwnedFd) -> String {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

#[test]
fn notify_listener_reaches_listener_path_for_init_and_exec() {
    let ctx = Ctx::new("secnotify");
    let sock = ctx.scratch("sock").join("agent.sock");
    let l = UnixListener::bind(&sock).unwrap();
    let mut b = ctx.bundle(SLEEP);
    let mut p = profile("SCMP_ACT_NOTIFY");
    p["listenerPath"] = json!(sock.display().to_string());
    p["listenerMetadata"] = json!("agent-meta");
    b.set("/linux/seccomp", p);
    // create blocks until the agent took the fd: accept in a thread.
    let t = std::thread::spawn(move || {
        let first = recv_with_fd(&l);
        (l, first)
    });
    b.create().assert_ok();
    let (l, (v, fd)) = t.join().unwrap();
    assert_eq!(v["fds"], json!(["seccompFd"]), "{v}");
    assert_eq!(v["metadata"], json!("agent-meta"), "{v}");
    assert_eq!(v["state"]["status"], json!("creating"), "{v}");
    assert_eq!(v["state"]["id"], json!(b.id), "{v}");
    assert!(fd_target(&fd).contains("seccomp"), "{}", fd_target(&fd));
    b.start_and_wait_exec();

    let t = std::thread::spawn(move || recv_with_fd(&l));
    let o = b.exec(&[], &["true"]);
    o.assert_ok();
    let (v, fd2) = t.join().unwrap();
    assert_eq!(v["state"]["status"], json!("running"), "{v}");
    assert_eq!(v["state"]["id"], json!(b.id), "{v}");
    assert!(fd_target(&fd2).contains("seccomp"), "{}", fd_target(&fd2));
}
