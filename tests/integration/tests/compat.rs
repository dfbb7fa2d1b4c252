//! How containerd / podman / docker drive a runc-compatible runtime:
//! --log/--log-format json, --console-socket with a terminal, --preserve-fds,
//! --no-pivot, --no-new-keyring, stdio pass-through, ps, kill --all,
//! pause/resume, --pidfd-socket.

use serde_json::{json, Value};
use sprout_integration_tests::*;
use std::fs;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const SLEEP: &[&str] = &["sleep", "1000"];

#[test]
fn log_format_json_on_error() {
    let ctx = Ctx::new("logjson");
    let b = ctx.bundle(&["true"]);
    fs::write(b.dir.join("config.json"), b"{ not json").unwrap();
    let log = ctx.dir.join("log.json");
    let bd = b.bundle_arg();
    let o = ctx.rt(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        &bd,
        &b.id,
    ]);
    o.assert_fail();
    let text = fs::read_to_string(&log).unwrap_or_default();
    let entries: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l:?}"))
        })
        .collect();
    assert!(
        entries
            .iter()
            .any(|e| e["level"] == json!("error")
                && e["msg"].as_str().is_some_and(|m| !m.is_empty())),
        "the --log file should hold a JSON {{\"level\":\"error\",\"msg\":...}} entry: {text:?}{}",
        o.describe()
    );
    for e in &entries {
        assert!(
            e["level"].is_string() && e["msg"].is_string() && e["time"].is_string(),
            "log entry fields: {e}"
        );
    }
}

#[test]
fn log_flags_accepted_on_success() {
    let ctx = Ctx::new("logok");
    let b = ctx.bundle(&["sh", "-c", "echo fine"]);
    b.write_config();
    let log = ctx.dir.join("log.json");
    let bd = b.bundle_arg();
    let o = ctx.rt(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "run",
        "--bundle",
        &bd,
        &b.id,
    ]);
    o.assert_ok();
    assert_eq!(o.stdout, "fine\n");
    for l in fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        let v: Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l:?}"));
        assert_ne!(v["level"], json!("error"), "no error on success: {v}");
    }
}

#[test]
fn stdio_is_passed_through() {
    let ctx = Ctx::new("stdio");
    let b = ctx.bundle(&["sh", "-c", "cat; echo to-stderr >&2"]);
    b.write_config();
    let bd = b.bundle_arg();
    let o = ctx.rt_opts(
        &["run", "--bundle", &bd, &b.id],
        &CmdOpts {
            stdin: Some(b"line one\nline two\n".to_vec()),
            ..Default::default()
        },
    );
    o.assert_ok();
    assert_eq!(o.stdout, "line one\nline two\n");
    assert!(o.stderr.contains("to-stderr"), "{}", o.describe());
}

#[test]
fn preserve_fds() {
    let ctx = Ctx::new("preservefds");
    let b = ctx.bundle(&[
        "sh",
        "-c",
        "echo via-fd3 >&3; ls /proc/self/fd | sort -n | tr '\\n' ' '",
    ]);
    b.write_config();
    let target = ctx.dir.join("fd3.txt");
    let f = fs::File::create(&target).unwrap();
    let fd = f.as_raw_fd();
    let out = ctx.dir.join("pf.out");
    let err = ctx.dir.join("pf.err");
    let mut cmd = Command::new(runtime_bin());
    cmd.arg("--root").arg(&ctx.root).args([
        "run",
        "--bundle",
        &b.bundle_arg(),
        "--preserve-fds",
        "1",
        &b.id,
    ]);
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap());
    // SAFETY: the pre_exec closure runs in the forked child before exec and only calls fcntl and
    // dup2 (async-signal-safe, integers only) on `fd`, a Copy integer captured by value; it
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if fd == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let status = wait_for("run --preserve-fds", CMD_TIMEOUT, || {
        child.try_wait().unwrap()
    });
    let so = fs::read_to_string(&out).unwrap();
    let se = fs::read_to_string(&err).unwrap();
    assert!(
        status.success(),
        "run --preserve-fds failed: {status:?} {se}"
    );
    assert_eq!(
        fs::read_to_string(&target).unwrap(),
        "via-fd3\n",
        "stdout {so:?} stderr {se:?}"
    );
    // 0 1 2 3 and the fd ls itself opens for /proc/self/fd; nothing else leaks.
    let fds: Vec<u32> = so
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    assert!(
        fds.starts_with(&[0, 1, 2, 3]) && fds.len() <= 5,
        "container fds: {so:?}"
    );
}

#[test]
fn no_leaked_fds_in_container() {
    let ctx = Ctx::new("fdleak");
    let b = ctx.bundle(&["sh", "-c", "ls -l /proc/self/fd"]);
    let out = b.run_ok();
    let fds: Vec<&str> = out.lines().filter(|l| l.contains("->")).collect();
    // 0,1,2 and the directory fd of ls itself.
    assert!(
        fds.len() <= 4,
        "unexpected fds in the container process: {out}"
    );
}

#[test]
fn no_pivot_and_no_new_keyring_accepted() {
    let ctx = Ctx::new("nopivot");
    let b = ctx.bundle(&[
        "sh",
        "-c",
        "cat /proc/self/status | grep -c . >/dev/null; ls /",
    ]);
    let o = b.run_with(&["--no-pivot", "--no-new-keyring"]);
    o.assert_ok();
    let names: Vec<&str> = o.stdout.split_whitespace().collect();
    assert!(
        names.contains(&"bin") && names.contains(&"etc") && !names.contains(&"rootfs"),
        "{}",
        o.describe()
    );
}

#[test]
fn ps_lists_container_processes() {
    let ctx = Ctx::new("ps");
    let mut b = ctx.bundle(SLEEP);
    let out = b.bind_host_dir("/out");
    b.create().assert_ok();
    b.start().assert_ok();
    let pidfile = ctx.dir.join("e.pid");
    b.exec(
        &["-d", "--pid-file", pidfile.to_str().unwrap()],
        &["sh", "-c", "touch /out/up; exec sleep 1000"],
    )
    .assert_ok();
    wait_for("exec'd process", POLL_TIMEOUT, || {
        out.join("up").exists().then_some(())
    });
    let epid: i64 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let o = ctx.rt(&["ps", "--format", "json", &b.id]);
    o.assert_ok();
    let mut pids: Vec<i64> = o
        .json()
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|p| p.as_i64())
        .collect();
    pids.sort();
    let mut want = vec![i64::from(b.pid()), epid];
    want.sort();
    assert_eq!(pids, want, "{}", o.describe());
    let o = ctx.rt(&["ps", &b.id]);
    o.assert_ok();
    assert!(
        o.stdout.lines().count() >= 3,
        "table with a header and 2 processes: {}",
        o.describe()
    );
}

#[test]
fn kill_all_without_pid_namespace() {
    let ctx = Ctx::new("killall");
    let mut b = ctx.bundle(SLEEP);
    b.remove_namespace("pid");
    let out = b.bind_host_dir("/out");
    b.create().assert_ok();
    b.start().assert_ok();
    let pidfile = ctx.dir.join("e.pid");
    b.exec(
        &["-d", "--pid-file", pidfile.to_str().unwrap()],
        &["sh", "-c", "touch /out/up; exec sleep 1000"],
    )
    .assert_ok();
    wait_for("exec'd process", POLL_TIMEOUT, || {
        out.join("up").exists().then_some(())
    });
    let epid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let init = b.pid();
    ctx.rt(&["kill", "--all", &b.id, "KILL"]).assert_ok();
    wait_for("all processes killed", POLL_TIMEOUT, || {
        ((!pid_alive(init) || is_zombie(init)) && (!pid_alive(epid) || is_zombie(epid)))
            .then_some(())
    });
    b.wait_status("stopped");
}

fn freezer_state(id: &str) -> Option<String> {
    for d in cgroup_dirs(id) {
        if let Ok(s) = fs::read_to_string(d.join("freezer.state")) {
            return Some(s.trim().to_string());
        }
        if let Ok(s) = fs::read_to_string(d.join("cgroup.freeze")) {
            return Some(if s.trim() == "1" {
                "FROZEN".into()
            } else {
                "THAWED".into()
            });
        }
    }
    None
}

#[test]
fn pause_and_resume() {
    let ctx = Ctx::new("pause");
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "i=0; while true; do i=$((i+1)); echo $i > /out/n; sleep 0.02; done",
    ]);
    let out = b.bind_host_dir("/out");
    b.create().assert_ok();
    b.start().assert_ok();
    wait_file(&out.join("n"));
    ctx.rt(&["pause", &b.id]).assert_ok();
    assert_eq!(b.status().as_deref(), Some("paused"));
    assert_eq!(freezer_state(&b.id).as_deref(), Some("FROZEN"));
    let a = fs::read_to_string(out.join("n")).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        fs::read_to_string(out.join("n")).unwrap(),
        a,
        "a paused container must not make progress"
    );
    ctx.rt(&["resume", &b.id]).assert_ok();
    assert_eq!(b.status().as_deref(), Some("running"));
    wait_for("progress after resume", POLL_TIMEOUT, || {
        (fs::read_to_string(out.join("n")).unwrap() != a).then_some(())
    });
}

#[test]
fn console_socket_terminal() {
    let ctx = Ctx::new("console");
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "tty; [ -t 0 ] && [ -t 1 ] && echo stdio-is-tty; stty size; echo done",
    ]);
    b.set("/process/terminal", json!(true));
    b.set("/process/consoleSize", json!({"height": 33, "width": 99}));
    let sock_path = ctx.dir.join("console.sock");
    let rx = pty_reader(&sock_path, None);
    let o = b.create_with(&["--console-socket", sock_path.to_str().unwrap()]);
    o.assert_ok();
    b.start().assert_ok();
    b.wait_status("stopped");
    let text = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("pty output (master fd received and slave closed)");
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    assert!(
        lines.first().is_some_and(|l| l.starts_with("/dev/pts/")),
        "tty should be a pts: {text:?}"
    );
    assert!(lines.contains(&"stdio-is-tty"), "{text:?}");
    assert!(
        lines.contains(&"33 99"),
        "consoleSize should set the window size: {text:?}"
    );
    assert!(lines.contains(&"done"), "{text:?}");
}

/// `docker exec -it` through containerd: exec --detach --tty
/// --console-socket --pid-file.
#[test]
fn exec_tty_console_socket() {
    let ctx = Ctx::new("exectty");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let sock = ctx.dir.join("exec-console.sock");
    let rx = pty_reader(&sock, None);
    let pidf = ctx.dir.join("exec.pid");
    let o = b.exec(
        &[
            "--detach",
            "--tty",
            "--console-socket",
            sock.to_str().unwrap(),
            "--pid-file",
            pidf.to_str().unwrap(),
        ],
        &[
            "sh",
            "-c",
            "tty; [ -t 0 ] && [ -t 1 ] && echo stdio-is-tty; exit 4",
        ],
    );
    o.assert_ok();
    let text = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("pty output");
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    assert!(
        lines.first().is_some_and(|l| l.starts_with("/dev/pts/")),
        "{text:?}"
    );
    assert!(lines.contains(&"stdio-is-tty"), "{text:?}");
    assert!(
        fs::read_to_string(&pidf).is_ok_and(|p| p.trim().parse::<i32>().is_ok()),
        "exec pid file"
    );
}

#[test]
fn terminal_without_console_socket_fails_cleanly() {
    let ctx = Ctx::new("termnosock");
    let mut b = ctx.bundle(&["true"]);
    b.set("/process/terminal", json!(true));
    let o = b.create();
    o.assert_fail();
    o.assert_one_line_error(&["console", "socket", "terminal"]);
    ctx.assert_no_trace(&o, &b, &[], None);
}

#[test]
fn exec_inherits_config_env_and_user() {
    let ctx = Ctx::new("execenv");
    let mut b = ctx.bundle(SLEEP);
    b.add_env("FROM_CONFIG=yes");
    b.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    b.create().assert_ok();
    b.start().assert_ok();
    let o = b.exec(&[], &["sh", "-c", "echo $FROM_CONFIG; id -u"]);
    o.assert_ok();
    assert_eq!(o.stdout, "yes\n1000\n", "{}", o.describe());
    let o = b.exec(
        &["--env", "FROM_CONFIG=overridden", "--user", "0"],
        &["sh", "-c", "echo $FROM_CONFIG; id -u"],
    );
    o.assert_ok();
    assert_eq!(o.stdout, "overridden\n0\n", "{}", o.describe());
}

#[test]
fn exec_stdin_passthrough() {
    let ctx = Ctx::new("execstdin");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let o = ctx.rt_opts(
        &["exec", &b.id, "sh", "-c", "tr a-z A-Z"],
        &CmdOpts {
            stdin: Some(b"shout\n".to_vec()),
            ..Default::default()
        },
    );
    o.assert_ok();
    assert_eq!(o.stdout, "SHOUT\n");
}

/// containerd reads a container's output from the stdio `create` was given.
#[test]
fn create_stdio_becomes_container_stdio() {
    let ctx = Ctx::new("createstdio");
    let b = ctx.bundle(&["sh", "-c", "echo out-line; echo err-line >&2"]);
    b.write_config();
    let outf = ctx.dir.join("container.out");
    let bd = b.bundle_arg();
    let o = ctx.rt_opts(
        &["create", "--bundle", &bd, &b.id],
        &CmdOpts {
            stdout_to: Some(outf.clone()),
            ..Default::default()
        },
    );
    o.assert_ok();
    assert_eq!(
        fs::read_to_string(&outf).unwrap(),
        "",
        "nothing may be written before start"
    );
    b.start().assert_ok();
    b.wait_status("stopped");
    assert_eq!(fs::read_to_string(&outf).unwrap(), "out-line\n");
    assert!(o.stderr.is_empty() || !o.stderr.contains("err-line"));
}

/// containerd's exec: `exec --process p.json --detach --pid-file f id`,
/// output through the stdio the runtime was given.
#[test]
fn exec_process_detach_pid_file_stdio() {
    let ctx = Ctx::new("execcontainerd");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let p = ctx.dir.join("process.json");
    fs::write(
        &p,
        serde_json::to_vec(&json!({
            "terminal": false, "user": {"uid": 0, "gid": 0},
            "args": ["sh", "-c", "sleep 0.2; echo exec-output; exit 5"],
            "env": ["PATH=/bin"], "cwd": "/"
        }))
        .unwrap(),
    )
    .unwrap();
    let outf = ctx.dir.join("exec.out");
    let pidf = ctx.dir.join("exec.pid");
    let o = ctx.rt_opts(
        &[
            "exec",
            "--process",
            p.to_str().unwrap(),
            "--detach",
            "--pid-file",
            pidf.to_str().unwrap(),
            &b.id,
        ],
        &CmdOpts {
            stdout_to: Some(outf.clone()),
            ..Default::default()
        },
    );
    o.assert_ok();
    let pid: i32 = fs::read_to_string(&pidf)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(pid > 0);
    assert_eq!(wait_file(&outf), "exec-output\n");
}

/// The pid behind a pidfd (its fdinfo's `Pid:` line).
fn pidfd_pid(fd: i32) -> i32 {
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .unwrap_or_else(|| panic!("fd {fd} is not a pidfd: {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// runc's `--pidfd-socket` (create, run -d, exec -d; runc's pidfd-socket.bats): the caller gets
/// a pidfd for the container's init or the exec'd process over its unix socket and can signal
/// it with pidfd_send_signal(2). A socket that cannot be reached fails the command naming the
/// flag, with nothing left.
#[test]
fn pidfd_socket_hands_over_the_process() {
    let ctx = Ctx::new("pidfdsock");
    let sock_path = ctx.dir.join("pidfd.sock");
    let listener = UnixListener::bind(&sock_path).unwrap();
    let sock = sock_path.to_str().unwrap();
    let take = || {
        let (conn, _) = listener.accept().unwrap();
        recv_fd(conn.as_raw_fd())
    };
    let kill = |fd: i32, sig: i32| {
        // SAFETY: pidfd_send_signal on a pidfd this test owns; no memory is passed.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd, sig, 0usize, 0u32) };
        assert_eq!(
            r,
            0,
            "pidfd_send_signal: {}",
            std::io::Error::last_os_error()
        );
    };
    for verb in ["create", "run -d"] {
        let b = ctx.bundle(SLEEP);
        let o = if verb == "create" {
            b.create_with(&["--pidfd-socket", sock])
        } else {
            b.run_with(&["-d", "--pidfd-socket", sock])
        };
        o.assert_ok();
        let fd = take();
        assert_eq!(pidfd_pid(fd), b.pid(), "{verb}");
        kill(fd, libc::SIGKILL);
        b.wait_status("stopped");
        // SAFETY: closing the fd received above, owned by this test.
        unsafe { libc::close(fd) };
        b.delete().assert_ok();
    }
    // exec -d: the pidfd is the exec'd process's, not the init's.
    let b = running(&ctx);
    let pid_file = ctx.dir.join("exec.pid");
    b.exec(
        &[
            "-d",
            "--pid-file",
            pid_file.to_str().unwrap(),
            "--pidfd-socket",
            sock,
        ],
        &["sleep", "1001"],
    )
    .assert_ok();
    let fd = take();
    let pid: i32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pidfd_pid(fd), pid);
    assert_ne!(pid, b.pid());
    kill(fd, libc::SIGKILL);
    let gone = || {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.contains(") Z ") || s.contains(") X "))
    };
    wait_for("the exec'd process to die", Duration::from_secs(10), || {
        gone().then_some(())
    });
    assert_eq!(b.status().as_deref(), Some("running"));
    // SAFETY: closing the pidfd received above, owned by this test, once.
    unsafe { libc::close(fd) };
    // A path nobody listens on: one line naming the flag, nothing made.
    let b2 = ctx.bundle(SLEEP);
    let missing = ctx.dir.join("nobody.sock");
    let o = b2.create_with(&["--pidfd-socket", missing.to_str().unwrap()]);
    o.assert_fail();
    o.assert_one_line_error(&["--pidfd-socket"]);
    ctx.assert_no_trace(&o, &b2, &[&b.id], None);
    let o = b.exec(
        &["-d", "--pidfd-socket", missing.to_str().unwrap()],
        &["true"],
    );
    o.assert_fail();
    o.assert_one_line_error(&["--pidfd-socket"]);
}

/// runc: `exec -t` in the foreground without --console-socket gets a pty that the runtime
/// holds and proxies to its own stdio (ONLCR cleared, as foreground `run`), and the exit
/// status of the process; detached it needs a console socket.
#[test]
fn exec_tty_in_the_foreground_without_a_console_socket() {
    let ctx = Ctx::new("exectty2");
    let b = running(&ctx);
    let o = b.exec(
        &["-t"],
        &[
            "sh",
            "-c",
            "tty; [ -t 0 ] && [ -t 1 ] && echo stdio-is-tty; exit 3",
        ],
    );
    assert_eq!(o.code, Some(3), "{}", o.describe());
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(
        lines.first().is_some_and(|l| l.starts_with("/dev/pts/")),
        "{}",
        o.describe()
    );
    assert!(lines.contains(&"stdio-is-tty"), "{}", o.describe());
    assert!(
        !o.stdout.contains('\r'),
        "ONLCR should be cleared: {}",
        o.describe()
    );
    let o = b.exec(&["-t", "-d"], &["true"]);
    o.assert_fail();
    o.assert_one_line_error(&["--console-socket"]);
}
