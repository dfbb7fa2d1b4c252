//! Command-line lifecycle: create/start/state/kill/delete, run, exec, list,
//! pid files, spec, features, --version.

use serde_json::{json, Value};
use sprout_integration_tests::*;
use std::fs;
use std::time::Duration;

const SLEEP: &[&str] = &["sleep", "1000"];

fn assert_state_fields(st: &Value, b: &Bundle, status: &str) {
    assert!(
        st["ociVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("1.")),
        "state.ociVersion: {st}"
    );
    assert_eq!(st["id"], json!(b.id), "state.id: {st}");
    assert_eq!(st["status"], json!(status), "state.status: {st}");
    // go-runc (containerd) decodes "created" as an RFC 3339 time.
    if let Some(c) = st.get("created") {
        let c = c
            .as_str()
            .unwrap_or_else(|| panic!("state.created should be a string: {st}"));
        let b = c.as_bytes();
        assert!(
            c.len() >= 20
                && b[4] == b'-'
                && b[7] == b'-'
                && b[10] == b'T'
                && b[13] == b':'
                && (c.ends_with('Z') || c[19..].contains(['+', '-'])),
            "state.created should be RFC 3339: {c:?}"
        );
    }
    let bundle = st["bundle"]
        .as_str()
        .unwrap_or_else(|| panic!("state.bundle missing: {st}"));
    assert_eq!(
        fs::canonicalize(bundle).ok(),
        fs::canonicalize(&b.dir).ok(),
        "state.bundle should be the bundle directory: {st}"
    );
}

#[test]
fn create_does_not_run_process_until_start() {
    let ctx = Ctx::new("create_start");
    let mut b = ctx.bundle(&["sh", "-c", "echo ran > /out/marker"]);
    let out = b.bind_host_dir("/out");
    b.create().assert_ok();

    let st = b.state();
    assert_state_fields(&st, &b, "created");
    let pid = st["pid"].as_i64().expect("state.pid") as i32;
    assert!(
        pid > 0 && pid_alive(pid),
        "created container's pid {pid} should be a live process: {st}"
    );
    // Give a wrongly-started process a moment to write the marker.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!out.join("marker").exists(), "process ran before start");

    b.start().assert_ok();
    assert_eq!(wait_file(&out.join("marker")).trim(), "ran");
    b.wait_status("stopped");
    let st = b.state();
    assert_state_fields(&st, &b, "stopped");

    b.delete().assert_ok();
    let o = ctx.rt(&["state", &b.id]);
    o.assert_fail();
    assert!(
        ctx.root_entries().is_empty(),
        "state left after delete: {:?}",
        ctx.root_entries()
    );
    for c in cgroup_dirs(&b.id) {
        assert!(!c.exists(), "cgroup {} left after delete", c.display());
    }
}

#[test]
fn start_then_running_state_has_pid() {
    let ctx = Ctx::new("running");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    let pid_created = b.pid();
    b.start().assert_ok();
    let st = b.state();
    assert_state_fields(&st, &b, "running");
    assert_eq!(
        st["pid"].as_i64().unwrap() as i32,
        pid_created,
        "pid changed between create and start"
    );
    // `start` may return just before the init process execs: poll.
    let want = "sleep\u{0}1000\u{0}";
    let mut last = String::new();
    let ok = (0..3000).any(|_| {
        last = String::from_utf8_lossy(
            &fs::read(format!("/proc/{pid_created}/cmdline")).unwrap_or_default(),
        )
        .into_owned();
        let hit = last == want;
        if !hit {
            std::thread::sleep(Duration::from_millis(10));
        }
        hit
    });
    assert!(ok, "the state pid {pid_created} should become the container process (sleep 1000), cmdline: {last:?}");
    // The container's cgroup exists and holds the pid, under our own cgroup.
    let dirs: Vec<_> = cgroup_dirs(&b.id)
        .into_iter()
        .filter(|d| d.exists())
        .collect();
    assert!(
        !dirs.is_empty(),
        "no cgroup directory for relative cgroupsPath sprout-test/{}",
        b.id
    );
    let own_cg = fs::read_to_string("/proc/self/cgroup").unwrap();
    let cg = fs::read_to_string(format!("/proc/{pid_created}/cgroup")).unwrap();
    for l in own_cg.lines() {
        // A runtime that cannot see cgroup2 (an emulated v1-only host) leaves it alone.
        if l.starts_with("0::") && ctx.emulating_pure_v1() {
            continue;
        }
        let (pre, path) = l.rsplit_once(':').unwrap();
        let base = relative_base(path, &own_cg);
        let want = format!("{pre}:{}/sprout-test/{}", base.trim_end_matches('/'), b.id);
        assert!(
            cg.lines().any(|x| x == want),
            "container cgroup should nest under ours: want {want:?} in\n{cg}"
        );
    }
}

fn kill_test(sig: &str) {
    let ctx = Ctx::new("kill");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let pid = b.pid();
    b.kill(sig).assert_ok();
    b.wait_status("stopped");
    wait_for("init process to go away", POLL_TIMEOUT, || {
        (!pid_alive(pid) || is_zombie(pid)).then_some(())
    });
    b.delete().assert_ok();
    assert!(ctx.root_entries().is_empty());
}

#[test]
fn kill_sigkill() {
    kill_test("SIGKILL");
}

#[test]
fn kill_kill() {
    kill_test("KILL");
}

#[test]
fn kill_9() {
    kill_test("9");
}

#[test]
fn kill_default_is_sigterm_and_delivered() {
    let ctx = Ctx::new("killterm");
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "trap 'echo TERM > /out/sig; exit 0' TERM; echo up > /out/up; while true; do sleep 0.05; done",
    ]);
    let out = b.bind_host_dir("/out");
    b.create().assert_ok();
    b.start().assert_ok();
    wait_file(&out.join("up"));
    ctx.rt(&["kill", &b.id]).assert_ok();
    assert_eq!(wait_file(&out.join("sig")).trim(), "TERM");
    b.wait_status("stopped");
}

#[test]
fn kill_created_container() {
    let ctx = Ctx::new("killcreated");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.kill("KILL").assert_ok();
    b.wait_status("stopped");
    b.delete().assert_ok();
}

#[test]
fn delete_force_running() {
    let ctx = Ctx::new("delforce");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let pid = b.pid();
    ctx.rt(&["delete", "--force", &b.id]).assert_ok();
    ctx.rt(&["state", &b.id]).assert_fail();
    wait_for("process killed by delete --force", POLL_TIMEOUT, || {
        (!pid_alive(pid) || is_zombie(pid)).then_some(())
    });
    assert!(ctx.root_entries().is_empty());
}

#[test]
fn run_returns_exit_code() {
    let ctx = Ctx::new("runexit");
    let b = ctx.bundle(&["sh", "-c", "echo hello; exit 3"]);
    let o = b.run();
    assert_eq!(
        o.code,
        Some(3),
        "run should return the process's exit code: {}",
        o.describe()
    );
    assert_eq!(o.stdout, "hello\n", "{}", o.describe());
}

#[test]
fn run_returns_zero_and_cleans_up() {
    let ctx = Ctx::new("run0");
    let b = ctx.bundle(&["true"]);
    b.run().assert_ok();
    // Without -d, run deletes the container when it exits.
    assert!(
        ctx.rt(&["state", &b.id]).code != Some(0),
        "container should be gone after run"
    );
    for c in cgroup_dirs(&b.id) {
        assert!(!c.exists(), "cgroup {} left after run", c.display());
    }
}

#[test]
fn run_killed_by_signal_returns_128_plus_sig() {
    let ctx = Ctx::new("runsig");
    let b = ctx.bundle(SLEEP);
    b.write_config();
    let bd = b.bundle_arg();
    let running = ctx.spawn(&["run", "--bundle", &bd, &b.id]);
    b.wait_status("running");
    b.kill("KILL").assert_ok();
    let o = running.wait(CMD_TIMEOUT);
    assert_eq!(
        o.code,
        Some(137),
        "run of a SIGKILLed process should exit 128+9: {}",
        o.describe()
    );
}

#[test]
fn run_self_signal_without_pid_ns() {
    // Not pid 1 of a pid namespace, so the shell can signal itself.
    let ctx = Ctx::new("runsigself");
    let mut b = ctx.bundle(&["sh", "-c", "kill -TERM $$; sleep 5"]);
    b.remove_namespace("pid");
    let o = b.run();
    assert_eq!(
        o.code,
        Some(143),
        "run of a SIGTERMed process should exit 128+15: {}",
        o.describe()
    );
}

#[test]
fn run_detached() {
    let ctx = Ctx::new("rund");
    let mut b = ctx.bundle(&["sh", "-c", "echo up > /out/up; exec sleep 1000"]);
    let out = b.bind_host_dir("/out");
    let pidfile = ctx.dir.join("run-d.pid");
    let o = b.run_with(&["-d", "--pid-file", pidfile.to_str().unwrap()]);
    o.assert_ok();
    wait_file(&out.join("up"));
    let st = b.state();
    assert_state_fields(&st, &b, "running");
    let pid: i32 = fs::read_to_string(&pidfile)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid file holds a pid");
    assert_eq!(
        i64::from(pid),
        st["pid"].as_i64().unwrap(),
        "pid file should match state.pid"
    );
    b.kill("KILL").assert_ok();
    b.wait_status("stopped");
    b.delete().assert_ok();
}

#[test]
fn pid_file_on_create() {
    let ctx = Ctx::new("pidfile");
    let b = ctx.bundle(SLEEP);
    let pidfile = ctx.dir.join("sub").join("c.pid");
    fs::create_dir_all(pidfile.parent().unwrap()).unwrap();
    b.create_with(&["--pid-file", pidfile.to_str().unwrap()])
        .assert_ok();
    let pid: i32 = fs::read_to_string(&pidfile)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert_eq!(pid, b.pid());
    // Relative pid file path: relative to the cwd of the runtime invocation.
    let b2 = ctx.bundle(SLEEP);
    b2.write_config();
    let bd = b2.bundle_arg();
    ctx.rt_opts(
        &["create", "--bundle", &bd, "--pid-file", "rel.pid", &b2.id],
        &CmdOpts {
            cwd: Some(ctx.dir.clone()),
            ..Default::default()
        },
    )
    .assert_ok();
    let pid2: i32 = fs::read_to_string(ctx.dir.join("rel.pid"))
        .expect("relative pid file")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid2, b2.pid());
}

fn running(ctx: &Ctx) -> Bundle<'_> {
    let mut b = ctx.bundle(SLEEP);
    b.set("/hostname", json!("exec-host"));
    b.create().assert_ok();
    b.start_and_wait_exec();
    b
}

#[test]
fn exec_args_env_cwd_user() {
    let ctx = Ctx::new("exec");
    let b = running(&ctx);
    let o = b.exec(
        &["-e", "FOO=bar baz", "--cwd", "/tmp", "-u", "1000:1000"],
        &[
            "sh",
            "-c",
            "echo \"$FOO\"; pwd; id -u; id -g; hostname; cat /proc/1/cmdline | tr '\\0' ' '",
        ],
    );
    o.assert_ok();
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(
        lines,
        vec![
            "bar baz",
            "/tmp",
            "1000",
            "1000",
            "exec-host",
            "sleep 1000 "
        ],
        "{}",
        o.describe()
    );
}

#[test]
fn exec_exit_code_propagates() {
    let ctx = Ctx::new("execexit");
    let b = running(&ctx);
    let o = b.exec(&[], &["sh", "-c", "exit 7"]);
    assert_eq!(o.code, Some(7), "{}", o.describe());
    let o = b.exec(&[], &["true"]);
    o.assert_ok();
}

#[test]
fn exec_process_json() {
    let ctx = Ctx::new("execp");
    let b = running(&ctx);
    let p = ctx.dir.join("process.json");
    fs::write(
        &p,
        serde_json::to_vec(&json!({
            "terminal": false,
            "user": {"uid": 1000, "gid": 1000},
            "args": ["sh", "-c", "echo $PJ; pwd; id -u"],
            "env": ["PATH=/bin", "PJ=from-process-json"],
            "cwd": "/home/user"
        }))
        .unwrap(),
    )
    .unwrap();
    let o = b.exec(&["-p", p.to_str().unwrap()], &[]);
    o.assert_ok();
    assert_eq!(
        o.stdout,
        "from-process-json\n/home/user\n1000\n",
        "{}",
        o.describe()
    );
}

#[test]
fn exec_detached_with_pid_file() {
    let ctx = Ctx::new("execd");
    let mut b = ctx.bundle(SLEEP);
    let out = b.bind_host_dir("/out");
    b.create().assert_ok();
    b.start().assert_ok();
    let pidfile = ctx.dir.join("exec.pid");
    let o = b.exec(
        &["-d", "--pid-file", pidfile.to_str().unwrap()],
        &["sh", "-c", "echo $$ > /out/inner; exec sleep 1000"],
    );
    o.assert_ok();
    wait_file(&out.join("inner"));
    let pid: i32 = fs::read_to_string(&pidfile)
        .expect("exec pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(pid_alive(pid), "exec -d process should still be running");
    let init = b.pid();
    assert_eq!(
        fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap(),
        fs::read_link(format!("/proc/{init}/ns/pid")).unwrap(),
        "exec'd process must be in the container's pid namespace"
    );
    assert_ne!(pid, init);
    assert_eq!(
        fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap(),
        fs::read_to_string(format!("/proc/{init}/cgroup")).unwrap(),
        "exec'd process must be in the container's cgroup"
    );
    for ns in ["mnt", "net", "ipc", "uts"] {
        assert_eq!(
            fs::read_link(format!("/proc/{pid}/ns/{ns}")).unwrap(),
            fs::read_link(format!("/proc/{init}/ns/{ns}")).unwrap(),
            "exec'd process must be in the container's {ns} namespace"
        );
    }
}

#[test]
fn exec_gets_container_security_settings() {
    let ctx = Ctx::new("execsec");
    let mut b = ctx.bundle(SLEEP);
    b.set("/process/noNewPrivileges", json!(true));
    b.create().assert_ok();
    b.start().assert_ok();
    let o = b.exec(
        &[],
        &[
            "sh",
            "-c",
            "grep -E '^(CapBnd|CapEff|NoNewPrivs)' /proc/self/status",
        ],
    );
    o.assert_ok();
    let want = cap_mask(&[5, 10, 29]);
    assert_eq!(
        status_field(&o.stdout, "CapBnd").as_deref(),
        Some(want.as_str()),
        "{}",
        o.describe()
    );
    assert_eq!(
        status_field(&o.stdout, "CapEff").as_deref(),
        Some(want.as_str()),
        "{}",
        o.describe()
    );
    assert_eq!(
        status_field(&o.stdout, "NoNewPrivs").as_deref(),
        Some("1"),
        "{}",
        o.describe()
    );
}

/// A started `sleep` container in its own user namespace (container 0..65535 = host 100000..).
fn running_in_user_namespace(ctx: &Ctx) -> Bundle<'_> {
    let mut b = ctx.bundle(SLEEP);
    b.in_user_namespace(100000, 100000);
    b.create().assert_ok();
    b.start().assert_ok();
    b
}

#[test]
fn exec_in_user_namespace_container() {
    let ctx = Ctx::new("execuserns");
    let b = running_in_user_namespace(&ctx);
    let o = b.exec(&[], &["sh", "-c", "cat /proc/self/uid_map; id -u"]);
    o.assert_ok();
    let v: Vec<Vec<&str>> = o
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        v,
        vec![vec!["0", "100000", "65536"], vec!["0"]],
        "{}",
        o.describe()
    );
}

/// `exec`'s helper stays in the host's pid namespace while it sets the process up, where the
/// container's /proc has no /proc/self for it: oomScoreAdj, rlimits and groups must still apply
/// (Docker sets oomScoreAdj on every exec; this once failed with ENOENT).
#[test]
fn exec_applies_oom_score_adj_rlimits_and_groups() {
    let ctx = Ctx::new("execattrs");
    let mut b = ctx.bundle(SLEEP);
    b.set("/process/oomScoreAdj", json!(100));
    b.set(
        "/process/rlimits",
        json!([{"type": "RLIMIT_NOFILE", "soft": 512, "hard": 1024}]),
    );
    b.create().assert_ok();
    b.start_and_wait_exec();
    let o = b.exec(
        &["-u", "1000:1000", "--additional-gids", "5"],
        &["sh", "-c", "cat /proc/self/oom_score_adj; ulimit -n; id -G"],
    );
    o.assert_ok();
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines, vec!["100", "512", "1000 5"], "{}", o.describe());
}

/// Groups in a container with a user namespace (setgroups is decided by the container's
/// namespace, read from the host's view of the init).
#[test]
fn exec_in_user_namespace_sets_groups() {
    let ctx = Ctx::new("execusergroups");
    let b = running_in_user_namespace(&ctx);
    let o = b.exec(
        &["-u", "1000:1000", "--additional-gids", "5"],
        &["sh", "-c", "id -G"],
    );
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "1000 5", "{}", o.describe());
}

/// No signal may arrive ignored in the container (an ignored signal survives execve, and a shell
/// can't trap one that was ignored on entry): the runtime ignores SIGPIPE itself, and its caller
/// may ignore more. Both the init and an `exec`'d process start with every disposition default.
#[test]
fn container_processes_start_with_no_ignored_signals() {
    let ctx = Ctx::new("sigign");
    let b = running(&ctx);
    // grep itself, not a shell (a shell may ignore SIGQUIT for its children).
    let o = b.exec(
        &[],
        &["grep", "SigIgn:", "/proc/1/status", "/proc/self/status"],
    );
    o.assert_ok();
    let ign: Vec<&str> = o
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(
        ign,
        vec!["0000000000000000", "0000000000000000"],
        "{}",
        o.describe()
    );
    // A shell in the container can trap SIGPIPE (ignored on entry, it could not).
    let o = b.exec(
        &[],
        &[
            "sh",
            "-c",
            "trap 'echo PIPE_TRAPPED' PIPE; kill -PIPE $$; echo done",
        ],
    );
    assert_eq!(o.stdout.trim(), "PIPE_TRAPPED\ndone", "{}", o.describe());
}

/// Signals the runtime's caller ignores (here SIGHUP, SIGUSR2 and a real-time signal, as
/// nohup or a background job hands them down) are not ignored in the container either: the
/// init resets exactly what it finds ignored, besides the runtime's own SIGPIPE.
#[test]
fn signals_the_caller_ignores_are_not_ignored_in_the_container() {
    let ctx = Ctx::new("sigigncaller");
    let b = ctx.bundle(&["grep", "SigIgn:", "/proc/self/status"]);
    b.write_config();
    let bd = b.bundle_arg();
    let opts = sprout_test_support::CmdOpts {
        ignore_signals: vec![libc::SIGHUP, libc::SIGUSR2, 40],
        ..Default::default()
    };
    // The runtime itself did start with them ignored.
    let o = ctx.rt_opts(&["run", "--bundle", &bd, &b.id], &opts);
    o.assert_ok();
    assert_eq!(
        o.stdout.split_whitespace().last(),
        Some("0000000000000000"),
        "{}",
        o.describe()
    );
}

#[test]
fn run_forwards_signals_to_container() {
    let ctx = Ctx::new("runfwd");
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "trap 'echo TERM > /out/sig; exit 0' TERM; echo up > /out/up; while true; do sleep 0.05; done",
    ]);
    let out = b.bind_host_dir("/out");
    b.write_config();
    let bd = b.bundle_arg();
    let running = ctx.spawn(&["run", "--bundle", &bd, &b.id]);
    wait_file(&out.join("up"));
    // SIGTERM to the runtime process we started; runc forwards it.
    // SAFETY: kill(2) takes integers only; `running` is our unreaped child, so its pid is live.
    unsafe {
        libc::kill(running.pid(), libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + POLL_TIMEOUT;
    let has_sig = || fs::read_to_string(out.join("sig")).is_ok_and(|s| !s.is_empty());
    while !has_sig() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !has_sig() {
        let o = running.wait(CMD_TIMEOUT);
        let st = ctx.rt(&["state", &b.id]);
        let k = b.kill("KILL");
        let d = ctx.rt(&["delete", "--force", &b.id]);
        std::thread::sleep(Duration::from_millis(300));
        let left = find_test_processes("-", &b.id, &[&b.dir]);
        panic!(
            "SIGTERM sent to `run` (after the container was up) was not forwarded to the container;{}\nthen state:{}\nthen kill KILL:{}\nthen delete --force:{}\ncontainer processes still alive: {left:?}",
            o.describe(), st.describe(), k.describe(), d.describe()
        );
    }
    assert_eq!(fs::read_to_string(out.join("sig")).unwrap().trim(), "TERM");
    let o = running.wait(CMD_TIMEOUT);
    assert_eq!(o.code, Some(0), "{}", o.describe());
}

#[test]
fn exec_in_stopped_container_fails() {
    let ctx = Ctx::new("execstopped");
    let b = ctx.bundle(&["true"]);
    b.create().assert_ok();
    b.start().assert_ok();
    b.wait_status("stopped");
    let o = b.exec(&[], &["true"]);
    o.assert_fail();
    o.assert_one_line_error(&["stopped", "not running", "running"]);
}

#[test]
fn list_formats() {
    let ctx = Ctx::new("list");
    let a = ctx.bundle(SLEEP);
    let b = ctx.bundle(SLEEP);
    a.create().assert_ok();
    b.create().assert_ok();
    b.start().assert_ok();

    let o = ctx.rt(&["list"]);
    o.assert_ok();
    let mut lines = o.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        header,
        vec!["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"],
        "{}",
        o.describe()
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 2, "{}", o.describe());
    let ra = rows
        .iter()
        .find(|r| r[0] == a.id)
        .unwrap_or_else(|| panic!("{} missing: {}", a.id, o.describe()));
    let rb = rows
        .iter()
        .find(|r| r[0] == b.id)
        .unwrap_or_else(|| panic!("{} missing: {}", b.id, o.describe()));
    assert_eq!(ra[1], a.pid().to_string());
    assert_eq!(ra[2], "created");
    assert_eq!(rb[2], "running");
    assert_eq!(ra[3], a.bundle_arg());

    let o = ctx.rt(&["list", "-q"]);
    o.assert_ok();
    let mut ids: Vec<&str> = o.stdout.lines().collect();
    ids.sort();
    let mut want = vec![a.id.as_str(), b.id.as_str()];
    want.sort();
    assert_eq!(ids, want, "{}", o.describe());

    let o = ctx.rt(&["list", "--format", "json"]);
    o.assert_ok();
    let v = o.json();
    let arr = v
        .as_array()
        .unwrap_or_else(|| panic!("list --format json should be an array: {}", o.describe()));
    assert_eq!(arr.len(), 2);
    for (bb, status) in [(&a, "created"), (&b, "running")] {
        let e = arr.iter().find(|e| e["id"] == json!(bb.id)).expect("entry");
        assert_eq!(e["status"], json!(status));
        assert_eq!(e["pid"].as_i64(), Some(i64::from(bb.pid())));
        assert_eq!(e["bundle"], json!(bb.bundle_arg()));
        assert!(e["created"].is_string(), "created timestamp: {e}");
    }
    let o = ctx.rt(&["list", "-f", "json"]);
    o.assert_ok();
    assert_eq!(o.json().as_array().map(|a| a.len()), Some(2));
}

#[test]
fn state_of_unknown_container_fails() {
    let ctx = Ctx::new("stateunknown");
    let o = ctx.rt(&["state", "no-such-container-xyz"]);
    o.assert_fail();
    o.assert_one_line_error(&["no-such-container-xyz", "not exist", "not found"]);
}

#[test]
fn spec_output_is_runnable() {
    let ctx = Ctx::new("spec");
    let b = ctx.bundle(&["true"]); // provides rootfs/ next to where spec writes
    let o = ctx.rt_opts(
        &["spec"],
        &CmdOpts {
            cwd: Some(b.dir.clone()),
            no_root: true,
            ..Default::default()
        },
    );
    o.assert_ok();
    let text =
        fs::read_to_string(b.dir.join("config.json")).expect("spec writes config.json in the cwd");
    let mut v: Value = serde_json::from_str(&text).expect("spec output is JSON");
    assert!(
        v["ociVersion"]
            .as_str()
            .is_some_and(|s| s.starts_with("1.")),
        "{v}"
    );
    assert_eq!(v["root"]["path"], json!("rootfs"));
    assert!(v["process"]["args"].is_array());
    let ns: Vec<&str> = v["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["type"].as_str())
        .collect();
    for t in ["pid", "network", "ipc", "uts", "mount"] {
        assert!(ns.contains(&t), "spec namespaces {ns:?} should contain {t}");
    }
    // Make it runnable without a terminal and run it as is otherwise.
    v["process"]["terminal"] = json!(false);
    v["process"]["args"] = json!(["sh", "-c", "echo spec-ok"]);
    fs::write(b.dir.join("config.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    let bd = b.bundle_arg();
    let o = ctx.rt(&["run", "--bundle", &bd, &b.id]);
    o.assert_ok();
    assert_eq!(o.stdout, "spec-ok\n");
}

#[test]
fn spec_bundle_flag_and_refuses_overwrite() {
    let ctx = Ctx::new("spec2");
    let d = ctx.scratch("specdir");
    let o = ctx.rt_opts(
        &["spec", "--bundle", d.to_str().unwrap()],
        &CmdOpts {
            no_root: true,
            ..Default::default()
        },
    );
    o.assert_ok();
    let before =
        fs::read(d.join("config.json")).expect("spec --bundle writes <bundle>/config.json");
    fs::write(d.join("config.json"), b"{\"mine\":1}").unwrap();
    let o = ctx.rt_opts(
        &["spec", "--bundle", d.to_str().unwrap()],
        &CmdOpts {
            no_root: true,
            ..Default::default()
        },
    );
    o.assert_fail();
    assert_eq!(
        fs::read(d.join("config.json")).unwrap(),
        b"{\"mine\":1}",
        "existing config.json must not be overwritten"
    );
    assert!(!before.is_empty());
}

#[test]
fn features_json() {
    let ctx = Ctx::new("features");
    let o = ctx.rt_opts(
        &["features"],
        &CmdOpts {
            no_root: true,
            ..Default::default()
        },
    );
    o.assert_ok();
    let v = o.json();
    let min = v["ociVersionMin"]
        .as_str()
        .unwrap_or_else(|| panic!("ociVersionMin: {v}"));
    let max = v["ociVersionMax"]
        .as_str()
        .unwrap_or_else(|| panic!("ociVersionMax: {v}"));
    assert!(min.starts_with("1.") && max.starts_with("1."), "{v}");
    let hooks: Vec<&str> = v["hooks"]
        .as_array()
        .map(|a| a.iter().filter_map(|h| h.as_str()).collect())
        .unwrap_or_default();
    for h in [
        "prestart",
        "createRuntime",
        "createContainer",
        "startContainer",
        "poststart",
        "poststop",
    ] {
        assert!(hooks.contains(&h), "features.hooks should list {h}: {v}");
    }
    let ns = &v["linux"]["namespaces"];
    for t in ["pid", "network", "ipc", "uts", "mount", "user"] {
        assert!(
            ns.as_array().is_some_and(|a| a.contains(&json!(t))),
            "features.linux.namespaces should list {t}: {v}"
        );
    }
    // --systemd-cgroup as root (the system manager) and rootless (the user's manager), and
    // checkpoint/restore through criu: what sprout implements, as runc says of itself.
    let cg = &v["linux"]["cgroup"];
    assert_eq!(cg["systemd"], json!(true), "{v}");
    assert_eq!(cg["systemdUser"], json!(true), "{v}");
    assert_eq!(
        v["annotations"]["org.opencontainers.runc.checkpoint.enabled"],
        json!("true"),
        "{v}"
    );
}

#[test]
fn version_flag() {
    let ctx = Ctx::new("version");
    let o = ctx.rt_opts(
        &["--version"],
        &CmdOpts {
            no_root: true,
            ..Default::default()
        },
    );
    o.assert_ok();
    let first = o.stdout.lines().next().unwrap_or("");
    assert!(
        first.contains(" version "),
        "first line should be '<name> version <x>': {}",
        o.describe()
    );
    assert!(
        o.stdout.lines().any(|l| l.starts_with("spec: 1.")),
        "a 'spec: 1.x' line (docker/containerd parse it): {}",
        o.describe()
    );
}

#[test]
fn unknown_command_fails() {
    let ctx = Ctx::new("unknowncmd");
    let o = ctx.rt(&["frobnicate"]);
    o.assert_fail();
}

#[test]
fn pid_file_on_foreground_run_and_exec() {
    // Without a pid namespace `$$` is the host pid, so it can be compared.
    let ctx = Ctx::new("pidfilefg");
    let mut b = ctx.bundle(&["sh", "-c", "echo $$ > /out/init; exec sleep 1000"]);
    b.remove_namespace("pid");
    let out = b.bind_host_dir("/out");
    b.write_config();
    let bd = b.bundle_arg();
    let run_pid = ctx.dir.join("run.pid");
    let running = ctx.spawn(&[
        "run",
        "--bundle",
        &bd,
        "--pid-file",
        run_pid.to_str().unwrap(),
        &b.id,
    ]);
    let inner = wait_file(&out.join("init"));
    let from_file = wait_file(&run_pid);
    assert_eq!(
        from_file.trim(),
        inner.trim(),
        "run --pid-file should hold the container process's pid"
    );
    let exec_pid = ctx.dir.join("exec.pid");
    let o = b.exec(
        &["--pid-file", exec_pid.to_str().unwrap()],
        &["sh", "-c", "echo $$"],
    );
    o.assert_ok();
    assert_eq!(
        fs::read_to_string(&exec_pid)
            .expect("exec --pid-file")
            .trim(),
        o.stdout.trim()
    );
    b.kill("KILL").assert_ok();
    let o = running.wait(CMD_TIMEOUT);
    assert_eq!(o.code, Some(137), "{}", o.describe());
}

#[test]
fn bundle_defaults_to_cwd_and_relative_bundle() {
    let ctx = Ctx::new("bundlecwd");
    let b = ctx.bundle(SLEEP);
    b.write_config();
    // No --bundle: the current directory is the bundle.
    ctx.rt_opts(
        &["create", &b.id],
        &CmdOpts {
            cwd: Some(b.dir.clone()),
            ..Default::default()
        },
    )
    .assert_ok();
    let st = b.state();
    assert_eq!(
        st["bundle"],
        json!(b.bundle_arg()),
        "bundle should be the absolute cwd: {st}"
    );
    // A relative --bundle is resolved against the cwd and stored absolute.
    let b2 = ctx.bundle(SLEEP);
    b2.write_config();
    let rel = b2.dir.file_name().unwrap().to_str().unwrap().to_string();
    ctx.rt_opts(
        &["create", "--bundle", &rel, &b2.id],
        &CmdOpts {
            cwd: Some(ctx.dir.clone()),
            ..Default::default()
        },
    )
    .assert_ok();
    let st = b2.state();
    assert_eq!(
        st["bundle"],
        json!(b2.bundle_arg()),
        "relative --bundle should be stored absolute: {st}"
    );
}

#[test]
fn list_empty_root() {
    let ctx = Ctx::new("listempty");
    // As runc: an explicit --root that does not exist is an error naming it ...
    let o = ctx.rt(&["list", "-q"]);
    o.assert_fail();
    o.assert_one_line_error(&["--root"]);
    // ... and an empty one an empty list (JSON: runc's `null`).
    std::fs::create_dir_all(&ctx.root).unwrap();
    let o = ctx.rt(&["list", "--format", "json"]);
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "null", "{}", o.describe());
    let o = ctx.rt(&["list", "-q"]);
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "", "{}", o.describe());
    let o = ctx.rt(&["list"]);
    o.assert_ok();
    assert!(
        o.stdout.lines().count() <= 1,
        "only a header: {}",
        o.describe()
    );
}

#[test]
fn external_death_is_noticed() {
    let ctx = Ctx::new("extdeath");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start_and_wait_exec();
    let pid = b.pid();
    // The init process is one this test started (through the runtime).
    // SAFETY: kill(2) takes integers only and touches no memory of ours.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    b.wait_status("stopped");
    b.delete().assert_ok();
    assert!(ctx.root_entries().is_empty());
    for c in cgroup_dirs(&b.id) {
        assert!(!c.exists(), "cgroup {} left after delete", c.display());
    }
}

#[test]
fn long_docker_style_id() {
    let ctx = Ctx::new("longid");
    // 64 hex characters, like docker/containerd ids.
    let seed = format!(
        "{:08x}{:08x}",
        std::process::id(),
        ctx.new_id().len() as u32 + rand_u32()
    );
    let id: String = seed.chars().cycle().take(64).collect();
    let b = ctx.bundle_with_id(&id, SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    assert_eq!(b.state()["status"], json!("running"));
    let o = b.exec(&[], &["true"]);
    o.assert_ok();
    b.kill("KILL").assert_ok();
    b.wait_status("stopped");
    b.delete().assert_ok();
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ (t.as_secs() as u32)
}

#[test]
fn same_id_under_different_roots_is_independent() {
    let a = Ctx::new("roota");
    let bctx = Ctx::new("rootb");
    let id = a.new_id();
    let b1 = a.bundle_with_id(&id, SLEEP);
    b1.create().assert_ok();
    // Same id under another --root: a different cgroup path is needed, as
    // the cgroup is host-wide.
    let mut b2 = bctx.bundle_with_id(&id, SLEEP);
    b2.set(
        "/linux/cgroupsPath",
        json!(format!("sprout-test/{id}-other")),
    );
    b2.create().assert_ok();
    assert_eq!(a.rt(&["list", "-q"]).stdout.trim(), id);
    assert_eq!(bctx.rt(&["list", "-q"]).stdout.trim(), id);
    assert_ne!(b1.pid(), b2.pid());
    b2.delete().assert_ok();
    assert_eq!(b1.state()["status"], json!("created"));
    let _ = fs::remove_dir(cgroup_dirs(&format!("{id}-other"))[0].clone());
}

#[test]
fn concurrent_creates_in_one_root() {
    let ctx = Ctx::new("concurrent");
    let bundles: Vec<Bundle> = (0..6).map(|_| ctx.bundle(&["true"])).collect();
    for b in &bundles {
        b.write_config();
    }
    std::thread::scope(|s| {
        for b in &bundles {
            let ctx = &ctx;
            s.spawn(move || {
                let bd = b.bundle_arg();
                ctx.rt(&["create", "--bundle", &bd, &b.id]).assert_ok();
                ctx.rt(&["start", &b.id]).assert_ok();
            });
        }
    });
    let o = ctx.rt(&["list", "-q"]);
    let mut ids: Vec<&str> = o.stdout.lines().collect();
    ids.sort();
    let mut want: Vec<&str> = bundles.iter().map(|b| b.id.as_str()).collect();
    want.sort();
    assert_eq!(ids, want);
    for b in &bundles {
        b.wait_status("stopped");
        b.delete().assert_ok();
    }
    assert!(ctx.root_entries().is_empty());
}

#[test]
fn concurrent_creates_same_id_exactly_one_wins() {
    let ctx = Ctx::new("raceid");
    let id = ctx.new_id();
    let bundles: Vec<Bundle> = (0..4).map(|_| ctx.bundle_with_id(&id, SLEEP)).collect();
    for b in &bundles {
        b.write_config();
    }
    let results: Vec<Output> = std::thread::scope(|s| {
        let hs: Vec<_> = bundles
            .iter()
            .map(|b| {
                let ctx = &ctx;
                let id = &id;
                s.spawn(move || {
                    let bd = b.bundle_arg();
                    ctx.rt(&["create", "--bundle", &bd, id])
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok: Vec<&Output> = results.iter().filter(|o| o.ok()).collect();
    assert_eq!(
        ok.len(),
        1,
        "exactly one create of the same id may succeed: {:?}",
        results.iter().map(|o| o.describe()).collect::<Vec<_>>()
    );
    let st = ctx.state(&id);
    assert_eq!(st["status"], json!("created"));
    assert!(pid_alive(st["pid"].as_i64().unwrap() as i32));
    // The losers left no process behind.
    for o in results.iter().filter(|o| !o.ok()) {
        let procs = find_test_processes(&o.marker, "-", &[]);
        assert!(
            procs.is_empty(),
            "a failed create left processes {procs:?}:{}",
            o.describe()
        );
    }
}
