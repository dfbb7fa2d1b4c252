//! `NOTIFY_SOCKET` (systemd's sd_notify protocol, podman `--sdnotify=container`) as runc 1.5
//! passes it through (issue #16), on real containers: a listener on a unix datagram socket
//! stands for systemd (or conmon) and is given to the runtime as `NOTIFY_SOCKET`; inside, a
//! tiny static helper (`/sdnotify`, built here with `cc -static`: busybox has no way to send a
//! unix datagram) sends the container's messages to the `NOTIFY_SOCKET` it sees.
//!
//! What runc does and these tests check: the container sees `NOTIFY_SOCKET=/run/notify/notify.sock`
//! (a read-only, nosuid/nodev/noexec bind of `<state dir>/notify`); `start` and `run -d`
//! return only once the container sent `READY=1`, which reached the host's socket before, with
//! `MAINPID=<init's host pid>` and `BARRIER=1` (an fd the host closes); a container whose
//! init exits without READY ends the wait, nothing sent. Where sprout goes its own way it is
//! said at the test (see docs/compatibility.md, "runc drop-in (issue 16)").

use sprout_integration_tests::*;
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The container's sender: each argument one datagram to $NOTIFY_SOCKET (`@name`: abstract).
const SDNOTIFY_C: &str = r#"
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
int main(int argc, char **argv) {
  const char *p = getenv("NOTIFY_SOCKET");
  if (!p || !*p) { fprintf(stderr, "sdnotify: NOTIFY_SOCKET unset\n"); return 2; }
  struct sockaddr_un a; memset(&a, 0, sizeof a); a.sun_family = AF_UNIX;
  size_t n = strlen(p);
  if (n >= sizeof a.sun_path) { fprintf(stderr, "sdnotify: path too long\n"); return 2; }
  memcpy(a.sun_path, p, n);
  socklen_t len = offsetof(struct sockaddr_un, sun_path) + n + 1;
  if (p[0] == '@') { a.sun_path[0] = 0; len--; }
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) { perror("sdnotify: socket"); return 1; }
  for (int i = 1; i < argc; i++)
    if (sendto(s, argv[i], strlen(argv[i]), 0, (struct sockaddr *)&a, len) < 0) {
      fprintf(stderr, "sdnotify: sendto %s: %s\n", p, strerror(errno)); return 1;
    }
  return 0;
}
"#;

/// The helper, compiled once per test binary; `Err(why)` where it cannot be.
fn sdnotify_bin() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = Ctx::run_tmp();
        let src = dir.join("sdnotify.c");
        let out = dir.join("sdnotify");
        fs::write(&src, SDNOTIFY_C).map_err(|e| format!("writing {}: {e}", src.display()))?;
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let o = Command::new(&cc)
            .args(["-static", "-O2", "-o"])
            .arg(&out)
            .arg(&src)
            .output()
            .map_err(|e| format!("no C compiler to build the static helper ({cc}: {e})"))?;
        if !o.status.success() {
            return Err(format!(
                "`{cc} -static` cannot build the helper (no static libc?): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(out)
    })
    .clone()
}

/// The helper, or `None` after printing why the test is skipped.
fn helper() -> Option<PathBuf> {
    match sdnotify_bin() {
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// A bundle running `sh -c script`, with /sdnotify in its rootfs.
fn bundle<'a>(ctx: &'a Ctx, helper: &Path, script: &str) -> Bundle<'a> {
    let b = ctx.bundle(&["sh", "-c", script]);
    let dst = b.rootfs().join("sdnotify");
    fs::copy(helper, &dst).unwrap();
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
    b
}

/// Waits in the container until the test creates `/tmp/<name>` in its rootfs.
fn wait_file_cmd(name: &str) -> String {
    format!("while [ ! -e /tmp/{name} ]; do sleep 0.05; done")
}

fn touch(b: &Bundle, name: &str) {
    fs::write(b.rootfs().join("tmp").join(name), b"").unwrap();
}

/// The listener that stands for systemd: a thread receives every datagram as it comes (the
/// fd of BARRIER=1 is closed by the kernel as it is not taken: the barrier's answer), so the
/// runtime's barrier does not wait; [`Host::manual`] leaves the receiving to the test.
struct Host {
    sock: UnixDatagram,
    /// What the runtime gets as NOTIFY_SOCKET.
    name: String,
    got: Arc<Mutex<Vec<String>>>,
}

impl Host {
    fn manual_at(sock: UnixDatagram, name: String) -> Host {
        Host {
            sock,
            name,
            got: Arc::new(Mutex::new(Vec::new())),
        }
    }
    fn listening(sock: UnixDatagram, name: String) -> Host {
        let h = Host::manual_at(sock, name);
        let sock = h.sock.try_clone().unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let got = Arc::downgrade(&h.got);
        std::thread::spawn(move || {
            let mut b = [0u8; 4096];
            loop {
                let r = sock.recv(&mut b);
                let Some(got) = got.upgrade() else { return };
                if let Ok(n) = r {
                    got.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&b[..n]).into_owned());
                }
            }
        });
        h
    }
    fn new(ctx: &Ctx) -> Host {
        let p = ctx.scratch("host").join("notify.sock");
        Host::listening(
            UnixDatagram::bind(&p).unwrap(),
            p.to_string_lossy().into_owned(),
        )
    }
    /// The test receives (and holds the barrier's fd).
    fn manual(ctx: &Ctx) -> Host {
        let p = ctx.scratch("host").join("notify.sock");
        Host::manual_at(
            UnixDatagram::bind(&p).unwrap(),
            p.to_string_lossy().into_owned(),
        )
    }
    fn at_path(p: &Path) -> Host {
        Host::listening(
            UnixDatagram::bind(p).unwrap(),
            p.to_string_lossy().into_owned(),
        )
    }
    fn abstract_(tag: &str) -> Host {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("sprout-itest-{}-{tag}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        Host::listening(UnixDatagram::bind_addr(&addr).unwrap(), format!("@{name}"))
    }
    /// Manual: the next datagram within `t`.
    fn recv(&self, t: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(t)).unwrap();
        let mut b = [0u8; 4096];
        let n = self.sock.recv(&mut b).ok()?;
        Some(String::from_utf8_lossy(&b[..n]).into_owned())
    }
    /// What arrived so far.
    fn got(&self) -> Vec<String> {
        self.got.lock().unwrap().clone()
    }
    /// What arrived, once `n` messages did or `t` passed.
    fn got_n(&self, n: usize, t: Duration) -> Vec<String> {
        let _ = poll(t, || (self.got.lock().unwrap().len() >= n).then_some(()));
        self.got()
    }
}

/// runc before 1.2 sends no BARRIER=1 (`SPROUT_BIN=/usr/sbin/runc`, 1.1.5 on Debian 12, as
/// the reference for the rest).
fn barrier_expected() -> bool {
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| {
        let o = Command::new(runtime_bin()).arg("--version").output();
        let v = o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        !v.is_ok_and(|v| v.starts_with("runc version 1.0") || v.starts_with("runc version 1.1"))
    })
}

/// What systemd gets from a container that said READY=1 with `mainpid` as its main pid.
fn ready_msgs(mainpid: i32) -> Vec<String> {
    let mut m = vec!["READY=1\n".to_string(), format!("MAINPID={mainpid}\n")];
    if barrier_expected() {
        m.push("BARRIER=1".to_string());
    }
    m
}

/// READY=1 and MAINPID=`mainpid` had reached the host when the runtime returned (the barrier:
/// the host had taken them off its queue), and BARRIER=1 came last.
fn assert_forwarded(host: &Host, mainpid: i32) {
    let want = ready_msgs(mainpid);
    let now = host.got();
    assert!(
        !barrier_expected() || now.len() >= 2 && now[..2] == want[..2],
        "when the runtime returned the host had {now:?}"
    );
    assert_eq!(host.got_n(want.len(), T), want);
}

/// One runtime call with NOTIFY_SOCKET set to `notify` (None: removed from its environment),
/// not waited for: the harness's calls inherit the test's environment as it is.
struct Call {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    cmdline: String,
    marker: String,
}

fn call(ctx: &Ctx, args: &[&str], notify: Option<&str>, cwd: Option<&Path>) -> Call {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let marker = format!("{}-notify-{n}", std::process::id());
    let out = ctx.dir.join(format!(".nout-{n}"));
    let err = ctx.dir.join(format!(".nerr-{n}"));
    let mut cmd = Command::new(&ctx.bin);
    if let Ok(g) = std::env::var("SPROUT_GLOBAL_ARGS") {
        cmd.args(g.split_whitespace());
    }
    cmd.arg("--root").arg(&ctx.root).args(args);
    match notify {
        Some(v) => cmd.env("NOTIFY_SOCKET", v),
        None => cmd.env_remove("NOTIFY_SOCKET"),
    };
    cmd.env(CALL_MARKER, &marker)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .current_dir(cwd.unwrap_or(&ctx.dir));
    let cmdline = format!(
        "NOTIFY_SOCKET={notify:?} {} --root {} {}",
        ctx.bin.display(),
        ctx.root.display(),
        args.join(" ")
    );
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot execute {}: {e}", ctx.bin.display()));
    Call {
        child,
        out,
        err,
        cmdline,
        marker,
    }
}

impl Call {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    /// Still running after `d`?
    fn still_running_after(&mut self, d: Duration) -> bool {
        std::thread::sleep(d);
        self.child.try_wait().unwrap().is_none()
    }
    fn wait(mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        use std::os::unix::process::ExitStatusExt;
        let o = Output {
            cmdline: self.cmdline.clone(),
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            stdout: fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: fs::read_to_string(&self.err).unwrap_or_default(),
            marker: self.marker.clone(),
        };
        let _ = fs::remove_file(&self.out);
        let _ = fs::remove_file(&self.err);
        assert!(
            status.is_some(),
            "timed out after {timeout:?} (killed): {}",
            o.describe()
        );
        o
    }
}

/// `<verb> --bundle <dir> [extra] <id>` with NOTIFY_SOCKET.
fn with_bundle(ctx: &Ctx, b: &Bundle, verb: &str, extra: &[&str], notify: Option<&str>) -> Call {
    b.write_config();
    let dir = b.bundle_arg();
    let mut a = vec![verb, "--bundle", dir.as_str()];
    a.extend_from_slice(extra);
    a.push(&b.id);
    call(ctx, &a, notify, None)
}

const T: Duration = Duration::from_secs(30);

// ---- create + start -----------------------------------------------------------------------

/// `create` gives the container `/run/notify` (read-only, nosuid, nodev, noexec: the state
/// directory's `notify/`) and `NOTIFY_SOCKET=/run/notify/notify.sock`, after the config's own
/// entry (the last one wins, as runc's env); `start` binds `notify/notify.sock` (0777) and
/// returns only once the container said READY=1, which the host got before, with the init's
/// host pid as MAINPID and a barrier.
#[test]
fn start_returns_after_ready_with_mainpid() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifystart");
    let host = Host::new(&ctx);
    let script = format!(
        "grep ' /run/notify ' /proc/self/mountinfo > /tmp/mountinfo; env > /tmp/env; \
         {}; /sdnotify READY=1; exec sleep 1000",
        wait_file_cmd("go")
    );
    let mut b = bundle(&ctx, &h, &script);
    b.add_env("NOTIFY_SOCKET=/from/the/config");
    with_bundle(&ctx, &b, "create", &[], Some(&host.name))
        .wait(T)
        .assert_ok();
    let notify_dir = ctx.root.join(&b.id).join("notify");
    assert!(notify_dir.is_dir(), "create makes {}", notify_dir.display());
    assert!(
        !notify_dir.join("notify.sock").exists(),
        "create binds no socket (start does)"
    );

    let mut start = call(&ctx, &["start", &b.id], Some(&host.name), None);
    assert!(
        start.still_running_after(Duration::from_millis(500)),
        "start must wait for READY=1"
    );
    let sock = notify_dir.join("notify.sock");
    let mode = fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o777, "{} mode {mode:o}", sock.display());
    assert!(host.got().is_empty(), "nothing forwarded before READY");
    touch(&b, "go");
    start.wait(T).assert_ok();
    // Everything was sent before start returned.
    assert_forwarded(&host, b.pid());

    let env = fs::read_to_string(b.rootfs().join("tmp/env")).unwrap();
    let vars: Vec<&str> = env
        .lines()
        .filter(|l| l.starts_with("NOTIFY_SOCKET="))
        .collect();
    assert_eq!(vars, ["NOTIFY_SOCKET=/run/notify/notify.sock"], "{env}");
    let mi = fs::read_to_string(b.rootfs().join("tmp/mountinfo")).unwrap();
    let line = mi
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no /run/notify mount: {mi:?}"));
    let opts = line.split_whitespace().nth(5).unwrap_or("");
    for o in ["ro", "nosuid", "nodev", "noexec"] {
        assert!(opts.split(',').any(|x| x == o), "{o} in {line}");
    }
}

/// A container whose init exits without READY=1 ends `start`'s wait: exit 0, nothing sent
/// (runc checks for the pid every 100 ms; sprout polls a pidfd).
#[test]
fn start_without_ready_ends_when_the_init_exits() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifynoready");
    let host = Host::new(&ctx);
    let script = format!("/sdnotify STATUS=starting; {}; exit 0", wait_file_cmd("go"));
    let b = bundle(&ctx, &h, &script);
    with_bundle(&ctx, &b, "create", &[], Some(&host.name))
        .wait(T)
        .assert_ok();
    let mut start = call(&ctx, &["start", &b.id], Some(&host.name), None);
    assert!(
        start.still_running_after(Duration::from_millis(500)),
        "start waits while the init lives"
    );
    touch(&b, "go");
    start.wait(T).assert_ok();
    std::thread::sleep(Duration::from_millis(100));
    assert!(host.got().is_empty(), "no READY, nothing forwarded");
}

/// Only a READY= line is forwarded: messages before it (STATUS=) are dropped, and the wait ends
/// with READY, so later ones go nowhere.
#[test]
fn only_ready_is_forwarded() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifyonly");
    let host = Host::new(&ctx);
    let b = bundle(
        &ctx,
        &h,
        "/sdnotify STATUS=starting WATCHDOG=1 READY=1; sleep 0.2; /sdnotify STATUS=after; \
         exec sleep 1000",
    );
    with_bundle(&ctx, &b, "run", &["-d"], Some(&host.name))
        .wait(T)
        .assert_ok();
    assert_forwarded(&host, b.pid());
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(host.got(), ready_msgs(b.pid()), "nothing after READY");
}

/// The barrier: `start` returns only once the host closed the pipe that came with BARRIER=1
/// (sd_notify_barrier: the host has read what came before).
#[test]
fn start_waits_for_the_barrier() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifybarrier");
    let host = Host::manual(&ctx);
    let b = bundle(&ctx, &h, "/sdnotify READY=1; exec sleep 1000");
    with_bundle(&ctx, &b, "create", &[], Some(&host.name))
        .wait(T)
        .assert_ok();
    let mut start = call(&ctx, &["start", &b.id], Some(&host.name), None);
    assert_eq!(host.recv(T).as_deref(), Some("READY=1\n"));
    assert!(host.recv(T).is_some_and(|m| m.starts_with("MAINPID=")));
    host.sock.set_read_timeout(Some(T)).unwrap();
    let fd = recv_fd(host.sock.as_raw_fd());
    // SAFETY: recv_fd returns a descriptor just received, owned by nothing else.
    let pipe = unsafe { OwnedFd::from_raw_fd(fd) };
    assert!(
        start.still_running_after(Duration::from_millis(700)),
        "start returns only after the barrier"
    );
    drop(pipe);
    start.wait(T).assert_ok();
}

/// The host's socket is connected by `start` after the container started: where it is not
/// there, `start` fails naming NOTIFY_SOCKET and the container runs on (as runc).
#[test]
fn start_with_a_missing_host_socket_fails_but_the_container_runs() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifymissing");
    let missing = ctx.dir.join("no-such.sock");
    let missing = missing.to_string_lossy();
    let b = bundle(&ctx, &h, "exec sleep 1000");
    with_bundle(&ctx, &b, "create", &[], Some(&missing))
        .wait(T)
        .assert_ok();
    let o = call(&ctx, &["start", &b.id], Some(&missing), None).wait(T);
    o.assert_fail();
    o.assert_one_line_error(&["no-such.sock"]);
    assert_eq!(b.status().as_deref(), Some("running"));

    // `run -d`: runc ignores the failure; sprout warns, exit 0.
    let b = bundle(&ctx, &h, "exec sleep 1000");
    let o = with_bundle(&ctx, &b, "run", &["-d"], Some(&missing)).wait(T);
    o.assert_ok();
    if !runtime_name().contains("runc") {
        assert!(
            o.stderr.contains("no-such.sock"),
            "a warning: {}",
            o.describe()
        );
    }
    assert_eq!(b.status().as_deref(), Some("running"));
}

/// A container created without NOTIFY_SOCKET has no notify directory; a `start` with it set
/// starts the container and waits for nothing (runc's start fails to bind there and leaves the
/// container created).
#[test]
fn start_with_notify_socket_of_a_container_created_without() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifylate");
    let host = Host::new(&ctx);
    let b = bundle(&ctx, &h, "exec sleep 1000");
    with_bundle(&ctx, &b, "create", &[], None)
        .wait(T)
        .assert_ok();
    call(&ctx, &["start", &b.id], Some(&host.name), None)
        .wait(T)
        .assert_ok();
    assert_eq!(b.status().as_deref(), Some("running"));
    std::thread::sleep(Duration::from_millis(100));
    assert!(host.got().is_empty(), "{:?}", host.got());
}

// ---- run ----------------------------------------------------------------------------------

/// `run -d` binds the socket before the container starts and returns after READY=1, with the
/// init's pid as MAINPID.
#[test]
fn run_detached_returns_after_ready() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifyrund");
    let host = Host::new(&ctx);
    let script = format!(
        "{}; /sdnotify READY=1; exec sleep 1000",
        wait_file_cmd("go")
    );
    let b = bundle(&ctx, &h, &script);
    let mut run = with_bundle(&ctx, &b, "run", &["-d"], Some(&host.name));
    assert!(
        run.still_running_after(Duration::from_millis(500)),
        "run -d must wait for READY=1"
    );
    touch(&b, "go");
    run.wait(T).assert_ok();
    assert_forwarded(&host, b.pid());
}

/// `run -d` of a container that exits without READY=1 returns 0 once it is gone (runc's
/// `run -d` waits until /proc/<init> is gone, which its unreaped child never is: it hangs).
#[test]
fn run_detached_without_ready_ends_when_the_init_exits() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifyrundx");
    let host = Host::new(&ctx);
    let b = bundle(&ctx, &h, "sleep 0.3; exit 0");
    with_bundle(&ctx, &b, "run", &["-d"], Some(&host.name))
        .wait(T)
        .assert_ok();
    std::thread::sleep(Duration::from_millis(100));
    assert!(host.got().is_empty(), "{:?}", host.got());
}

/// Foreground `run`: READY=1 is forwarded with MAINPID = the runtime's own pid (runc's: the
/// runtime is what systemd watches then) while the container runs on; its exit code is run's.
/// A container that never sends READY=1 ends the run as usual (runc's foreground run waits for
/// READY on its own pid and would hang here).
#[test]
fn foreground_run_forwards_ready_with_its_own_pid() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifyrunfg");
    let host = Host::new(&ctx);
    let script = format!("/sdnotify READY=1; {}; exit 3", wait_file_cmd("end"));
    let b = bundle(&ctx, &h, &script);
    let run = with_bundle(&ctx, &b, "run", &[], Some(&host.name));
    let want = ready_msgs(run.pid());
    assert_eq!(host.got_n(want.len(), T), want);
    touch(&b, "end");
    let o = run.wait(T);
    assert_eq!(o.code, Some(3), "{}", o.describe());

    let host = Host::new(&ctx);
    let b = bundle(&ctx, &h, "exit 4");
    let o = with_bundle(&ctx, &b, "run", &[], Some(&host.name)).wait(T);
    assert_eq!(o.code, Some(4), "{}", o.describe());
    std::thread::sleep(Duration::from_millis(100));
    assert!(host.got().is_empty(), "{:?}", host.got());
}

// ---- addresses, users ---------------------------------------------------------------------

/// `@name` is an abstract socket, as sd_notify reads it.
#[test]
fn abstract_host_socket() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifyabstract");
    let host = Host::abstract_("abs");
    let b = bundle(&ctx, &h, "/sdnotify READY=1; exec sleep 1000");
    with_bundle(&ctx, &b, "run", &["-d"], Some(&host.name))
        .wait(T)
        .assert_ok();
    assert_forwarded(&host, b.pid());
}

/// A relative NOTIFY_SOCKET: `create` and `run` work in the bundle directory (runc chdirs
/// there), so for `run -d` it is the bundle's; `start` keeps its working directory.
#[test]
fn relative_host_socket() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifyrel");
    let b = bundle(&ctx, &h, "/sdnotify READY=1; exec sleep 1000");
    let host = Host::at_path(&b.dir.join("host.sock"));
    b.write_config();
    let bundle_dir = b.bundle_arg();
    call(
        &ctx,
        &["run", "-d", "--bundle", &bundle_dir, &b.id],
        Some("host.sock"),
        Some(&ctx.scratch("elsewhere")),
    )
    .wait(T)
    .assert_ok();
    assert_forwarded(&host, b.pid());

    let cwd = ctx.scratch("cwd");
    let host = Host::at_path(&cwd.join("host.sock"));
    let b = bundle(&ctx, &h, "/sdnotify READY=1; exec sleep 1000");
    with_bundle(&ctx, &b, "create", &[], Some("host.sock"))
        .wait(T)
        .assert_ok();
    call(&ctx, &["start", &b.id], Some("host.sock"), Some(&cwd))
        .wait(T)
        .assert_ok();
    assert_forwarded(&host, b.pid());
}

/// A non-root process in a user namespace (its root is host uid 100000) can send: the socket
/// is 0777 and its directory 0755.
#[test]
fn non_root_user_in_a_user_namespace_can_notify() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifyuserns");
    let host = Host::new(&ctx);
    let mut b = bundle(
        &ctx,
        &h,
        "id -u > /tmp/uid; /sdnotify READY=1; exec sleep 1000",
    );
    b.set(
        "/process/user",
        serde_json::json!({"uid": 1000, "gid": 1000}),
    );
    b.in_user_namespace(100000, 100000);
    with_bundle(&ctx, &b, "run", &["-d"], Some(&host.name))
        .wait(T)
        .assert_ok();
    assert_forwarded(&host, b.pid());
    assert_eq!(
        fs::read_to_string(b.rootfs().join("tmp/uid"))
            .unwrap()
            .trim(),
        "1000"
    );
}

// ---- without NOTIFY_SOCKET ----------------------------------------------------------------

/// Without NOTIFY_SOCKET nothing of it: no /run/notify mount, no variable, no notify directory.
#[test]
fn without_notify_socket_nothing_is_added() {
    let Some(h) = helper() else { return };
    let ctx = Ctx::new("notifynone");
    let b = bundle(
        &ctx,
        &h,
        "grep -c ' /run/notify ' /proc/self/mountinfo; env | grep -c NOTIFY_SOCKET; true",
    );
    let o = with_bundle(&ctx, &b, "run", &[], None).wait(T);
    o.assert_ok();
    assert_eq!(
        o.stdout.split_whitespace().collect::<Vec<_>>(),
        ["0", "0"],
        "{}",
        o.describe()
    );
    assert!(
        !b.rootfs().join("run").exists(),
        "no /run/notify mount point made in the rootfs"
    );

    let b = bundle(&ctx, &h, "exec sleep 1000");
    with_bundle(&ctx, &b, "create", &[], None)
        .wait(T)
        .assert_ok();
    let d = ctx.root.join(&b.id);
    assert!(d.is_dir(), "state dir {}", d.display());
    assert!(
        !d.join("notify").exists(),
        "no notify dir without NOTIFY_SOCKET"
    );
}
