//! `checkpoint` and `restore` through CRIU, with runc's flags: a container's memory, stdio pipes,
//! bind mounts and cgroup carried over into a new container, `--leave-running`, `--pre-dump`
//! with `--parent-path`, and the errors that come before criu runs.
//!
//! The CRIU tests need a `criu` whose `criu check` passes on this kernel: `$SPROUT_TEST_CRIU`,
//! else `criu` on $PATH (scripts/setup-deps.sh installs one). They report themselves skipped,
//! with criu's reason, where there is none.

use serde_json::json;
use sprout_integration_tests::*;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A counter that survives only if the process's memory does: `tick N` on stdout and a line N
/// appended to /data/count every 50 ms. Its stderr joins stdout (a host file as stdio is not
/// something CRIU can restore; pipes are what podman's conmon and containerd's shim give).
const COUNTER: &str =
    "exec 2>&1; i=0; while true; do i=$((i+1)); echo tick $i; echo $i >> /data/count; sleep 0.05; done";

fn criu() -> Option<String> {
    let bin = std::env::var("SPROUT_TEST_CRIU").unwrap_or_else(|_| "criu".into());
    match Command::new(&bin).arg("check").output() {
        Ok(o) if o.status.success() => Some(bin),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stderr).into_owned()
                + &String::from_utf8_lossy(&o.stdout);
            let why = text
                .lines()
                .find(|l| l.contains("Error"))
                .unwrap_or("criu check failed")
                .to_string();
            eprintln!("skipped: `{bin} check` fails on this kernel: {why}");
            None
        }
        Err(e) => {
            eprintln!("skipped: no criu ({bin}: {e}); set SPROUT_TEST_CRIU or install CRIU");
            None
        }
    }
}

/// The end of the criu log a runtime error names (`...; log: PATH`), for the failure message.
fn criu_log_tail(err: &str) -> String {
    let Some(p) = err.rsplit_once("log: ").map(|(_, p)| p.trim()) else {
        return String::new();
    };
    let text = fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "\n--- end of {p}:\n{}",
        lines[lines.len().saturating_sub(40)..].join("\n")
    )
}

/// A runtime call whose container keeps our pipes: stdin (held open by the returned writer) and
/// stdout (read line by line on a thread).
struct Piped {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    err: PathBuf,
}

fn spawn_piped(ctx: &Ctx, criu: &str, args: &[&str]) -> Piped {
    let err = ctx
        .dir
        .join(format!("err-{}", args.join("_").replace('/', "")));
    let mut cmd = Command::new(&ctx.bin);
    ctx.prepare_command(&mut cmd);
    let mut child = cmd
        .arg("--root")
        .arg(&ctx.root)
        .arg("--criu")
        .arg(criu)
        .args(args)
        .current_dir(&ctx.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .expect("runtime");
    let stdin = child.stdin.take();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    Piped {
        child,
        stdin,
        lines: rx,
        err,
    }
}

impl Piped {
    /// The runtime's own exit (run -d / restore -d return once the container runs).
    fn wait_ok(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                let err = fs::read_to_string(&self.err).unwrap_or_default();
                assert!(
                    s.success(),
                    "runtime failed ({s}): {err}{}",
                    criu_log_tail(&err)
                );
                return;
            }
            assert!(Instant::now() < deadline, "runtime did not return");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The next `tick N`'s N.
    fn tick(&self) -> u64 {
        let l = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a tick line from the container");
        l.strip_prefix("tick ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected line {l:?}"))
    }

    /// The pipe reaches EOF: every writer (the container) is gone.
    fn assert_eof(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                _ => assert!(
                    Instant::now() < deadline,
                    "the old container still writes to its pipe"
                ),
            }
        }
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.flush();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn counter_bundle<'a>(ctx: &'a Ctx) -> (Bundle<'a>, PathBuf) {
    let mut b = ctx.bundle(&["sh", "-c", COUNTER]);
    let data = b.bind_host_dir("/data");
    // A source relative to the bundle, as runc's checkpoint.bats writes it ("." is the bundle;
    // restore hands criu "<bundle>", not "<bundle>/.", which failed there with "Failed to get
    // bname" for a bind on a symlink or nested binds, seen in the VM).
    b.add_mount(json!({
        "destination": "/bundle", "type": "bind", "source": ".", "options": ["rbind", "ro"]
    }));
    b.write_config();
    (b, data)
}

/// The container's cgroup directories that exist.
fn cgroup_left(id: &str) -> Vec<PathBuf> {
    cgroup_dirs(id).into_iter().filter(|d| d.exists()).collect()
}

/// The counter's last value. It appends one line per tick (one write each): with `>` a
/// checkpoint's freeze could fall between the truncation and the write, and a container killed
/// by the dump then left the file empty (seen once in the TCG VM, 2026-11-27).
fn read_count(dir: &Path) -> u64 {
    fs::read_to_string(dir.join("count"))
        .ok()
        .and_then(|s| s.lines().rev().find_map(|l| l.trim().parse().ok()))
        .unwrap_or(0)
}

#[test]
fn checkpoint_and_restore_carry_memory_pipes_binds_and_cgroup_to_a_new_container() {
    let Some(criu) = criu() else { return };
    // A cgroup2 host's hierarchy options (systemd's nsdelegate,memory_recursiveprot), which a
    // cgroup2 mount criu made anew in the initial cgroup namespace would reset host-wide.
    let cg2_options = host_cgroup2_options();
    let ctx = Ctx::new("cr_basic");
    let (a, data_a) = counter_bundle(&ctx);
    let bundle_a = a.bundle_arg();
    let mut run = spawn_piped(&ctx, &criu, &["run", "-d", "--bundle", &bundle_a, &a.id]);
    run.wait_ok();
    let mut last = 0;
    for _ in 0..5 {
        last = run.tick();
    }
    assert!(last >= 5, "ticks: {last}");
    let images = ctx.scratch("images");
    let work = ctx.scratch("work");
    let o = ctx.rt(&[
        "--criu",
        &criu,
        "checkpoint",
        "--image-path",
        images.to_str().unwrap(),
        "--work-path",
        work.to_str().unwrap(),
        &a.id,
    ]);
    o.assert_ok();
    assert!(images.join("inventory.img").exists(), "no images written");
    assert!(
        work.join("dump.log").exists(),
        "criu's log is not in --work-path"
    );
    // As runc: without --leave-running the container is gone.
    ctx.rt(&["state", &a.id]).assert_fail();
    run.assert_eof();
    assert!(
        cgroup_left(&a.id).is_empty(),
        "the checkpointed container's cgroup is left: {:?}",
        cgroup_left(&a.id)
    );
    let at_dump = read_count(&data_a);
    assert!(at_dump >= last, "count {at_dump} < last tick {last}");

    // A new container (new id, new bind source) from the images, with new pipes.
    let (b, data_b) = counter_bundle(&ctx);
    let bundle_b = b.bundle_arg();
    let mut rst = spawn_piped(
        &ctx,
        &criu,
        &[
            "restore",
            "-d",
            "--bundle",
            &bundle_b,
            "--image-path",
            images.to_str().unwrap(),
            "--work-path",
            work.to_str().unwrap(),
            &b.id,
        ],
    );
    rst.wait_ok();
    let first = rst.tick();
    assert!(
        first > at_dump && first <= at_dump + 2,
        "the restored counter should go on from {at_dump}, it printed {first}"
    );
    let next = rst.tick();
    assert_eq!(next, first + 1);
    let v = wait_for("the restored counter in the new bind", POLL_TIMEOUT, || {
        let n = read_count(&data_b);
        (n > at_dump).then_some(n)
    });
    assert!(v > at_dump);
    assert_eq!(
        read_count(&data_a),
        at_dump,
        "the restored container wrote to the old bind's source"
    );
    let st = ctx.state(&b.id);
    assert_eq!(st["status"], json!("running"), "{st}");
    let pid = st["pid"].as_i64().unwrap() as i32;
    assert!(pid_alive(pid));
    // In the new container's cgroup, in every hierarchy.
    let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    // A runtime that cannot see cgroup2 (an emulated v1-only host) leaves it alone.
    let hidden = |l: &str| l.starts_with("0::") && ctx.emulating_pure_v1();
    for line in cg.lines().filter(|l| !l.is_empty() && !hidden(l)) {
        assert!(
            line.ends_with(&format!("/{}", b.id)),
            "restored init not in the new container's cgroup: {line}\n{cg}"
        );
    }
    assert!(!cgroup_left(&b.id).is_empty());
    // On a cgroup2 host the container (no cgroup namespace) sees the host's hierarchy, bound
    // again by the restore, read-only as its config says; the host's options are untouched.
    if cg2_options.is_some() {
        let mi = fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
        let line = mi
            .lines()
            .find(|l| l.split(' ').nth(4) == Some("/sys/fs/cgroup"))
            .unwrap_or_else(|| panic!("no /sys/fs/cgroup in the restored container:\n{mi}"));
        let f: Vec<&str> = line.split(' ').collect();
        assert!(
            f[3] == "/" && line.contains(" - cgroup2 ") && f[5].split(',').any(|o| o == "ro"),
            "the restored container's cgroup mount: {line}"
        );
    }
    assert_eq!(
        host_cgroup2_options(),
        cg2_options,
        "the host's cgroup2 options changed across run, checkpoint and restore"
    );
    b.kill("KILL").assert_ok();
    b.wait_status("stopped");
    b.delete().assert_ok();
    assert!(cgroup_left(&b.id).is_empty(), "{:?}", cgroup_left(&b.id));
    ctx.rt(&["state", &b.id]).assert_fail();
}

#[test]
fn pre_dump_then_leave_running_dump_keeps_the_container() {
    let Some(criu) = criu() else { return };
    // Pre-dumps track dirty memory with the kernel's soft-dirty bits (CONFIG_MEM_SOFT_DIRTY).
    let track = Command::new(&criu)
        .args(["check", "--feature", "mem_dirty_track"])
        .output()
        .is_ok_and(|o| o.status.success());
    let ctx = Ctx::new("cr_predump");
    let (a, _data) = counter_bundle(&ctx);
    let bundle_a = a.bundle_arg();
    let mut run = spawn_piped(&ctx, &criu, &["run", "-d", "--bundle", &bundle_a, &a.id]);
    run.wait_ok();
    run.tick();
    let images = ctx.scratch("images");
    let pre = images.join("pre");
    let fin = images.join("final");
    let pre_dump = ctx.rt(&[
        "--criu",
        &criu,
        "checkpoint",
        "--pre-dump",
        "--image-path",
        pre.to_str().unwrap(),
        &a.id,
    ]);
    if track {
        pre_dump.assert_ok();
    } else {
        // criu's own reason, in sprout's one line.
        pre_dump.assert_one_line_error(&["pre-dump", "criu failed", "Tracking memory"]);
        eprintln!("skipped: the pre-dump half: no soft-dirty memory tracking in this kernel");
    }
    assert_eq!(
        a.status().as_deref(),
        Some("running"),
        "pre-dump stopped it"
    );
    let t = run.tick();
    let mut args = vec!["--criu", &criu, "checkpoint", "--leave-running"];
    if track {
        args.extend(["--parent-path", "../pre"]);
    }
    let fin_s = fin.to_str().unwrap().to_string();
    args.extend(["--image-path", &fin_s, &a.id]);
    ctx.rt(&args).assert_ok();
    assert!(fin.join("inventory.img").exists());
    if track {
        // criu links the final images to their parent.
        assert!(
            fs::symlink_metadata(fin.join("parent")).is_ok(),
            "no parent link in {}",
            fin.display()
        );
    }
    assert_eq!(a.status().as_deref(), Some("running"));
    assert!(
        run.tick() > t,
        "the container stopped counting after --leave-running"
    );
    // --parent-path must be relative and exist.
    let o = ctx.rt(&[
        "--criu",
        &criu,
        "checkpoint",
        "--leave-running",
        "--parent-path",
        "../nothing",
        "--image-path",
        fin.to_str().unwrap(),
        &a.id,
    ]);
    o.assert_one_line_error(&["--parent-path"]);
    // Refused before anything is made: no image directory.
    let never = images.join("never");
    ctx.rt(&[
        "--criu",
        &criu,
        "checkpoint",
        "--parent-path",
        "../nothing",
        "--image-path",
        never.to_str().unwrap(),
        &a.id,
    ])
    .assert_one_line_error(&["--parent-path"]);
    assert!(
        !never.exists(),
        "a refused checkpoint made {}",
        never.display()
    );
}

#[test]
fn foreground_restore_returns_the_containers_exit_status() {
    let Some(criu) = criu() else { return };
    let ctx = Ctx::new("cr_fg");
    // Counts to 40 (about 2 s), then exits 7.
    let mut a = ctx.bundle(&[
        "sh",
        "-c",
        "exec 2>&1; i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo tick $i; sleep 0.05; done; exit 7",
    ]);
    a.bind_host_dir("/data");
    a.write_config();
    let bundle_a = a.bundle_arg();
    let mut run = spawn_piped(&ctx, &criu, &["run", "-d", "--bundle", &bundle_a, &a.id]);
    run.wait_ok();
    run.tick();
    let images = ctx.scratch("images");
    ctx.rt(&[
        "--criu",
        &criu,
        "checkpoint",
        "--image-path",
        images.to_str().unwrap(),
        &a.id,
    ])
    .assert_ok();
    let mut b = ctx.bundle(&["sh", "-c", "exit 0"]);
    b.bind_host_dir("/data");
    b.write_config();
    let bundle_b = b.bundle_arg();
    let rst = spawn_piped(
        &ctx,
        &criu,
        &[
            "restore",
            "--bundle",
            &bundle_b,
            "--image-path",
            images.to_str().unwrap(),
            &b.id,
        ],
    );
    let mut child = rst;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "foreground restore did not return"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(7),
        "restore should exit with the restored process's status: {}",
        fs::read_to_string(&child.err).unwrap_or_default()
    );
    // Foreground: the container is removed once it exits, as with `run`.
    ctx.rt(&["state", &b.id]).assert_fail();
    assert!(cgroup_left(&b.id).is_empty());
}

#[test]
fn checkpoint_and_restore_errors_come_before_criu_and_leave_nothing() {
    // No criu needed: every one of these fails before criu would run.
    let ctx = Ctx::new("cr_errors");
    let images = ctx.scratch("images");
    let img = images.to_str().unwrap();
    ctx.rt(&["checkpoint", "--image-path", img, "nosuch"])
        .assert_one_line_error(&["nosuch", "does not exist"]);

    let b = ctx.bundle(&["sleep", "100"]);
    b.create().assert_ok();
    ctx.rt(&["checkpoint", "--image-path", img, &b.id])
        .assert_one_line_error(&["cannot be checkpointed", "created"]);
    b.delete().assert_ok();

    // A restore with no checkpoint in --image-path: refused, and no state or cgroup is left.
    let r = ctx.bundle(&["sleep", "100"]);
    r.write_config();
    let bundle = r.bundle_arg();
    ctx.rt(&[
        "restore",
        "-d",
        "--bundle",
        &bundle,
        "--image-path",
        img,
        &r.id,
    ])
    .assert_one_line_error(&["--image-path", "no checkpoint"]);
    // containerd's shim (go-runc) writes `-no-subreaper` with one dash, as runc's parser takes.
    ctx.rt(&[
        "restore",
        "-d",
        "-no-subreaper",
        "--bundle",
        &bundle,
        "--image-path",
        img,
        &r.id,
    ])
    .assert_one_line_error(&["--image-path", "no checkpoint"]);
    ctx.rt(&["state", &r.id]).assert_fail();
    assert!(cgroup_left(&r.id).is_empty());
    assert!(!ctx.root.join(&r.id).exists(), "state directory left");

    let c = ctx.bundle(&["sleep", "100"]);
    c.run_with(&["-d"]).assert_ok();
    ctx.rt(&[
        "checkpoint",
        "--manage-cgroups-mode",
        "hard",
        "--image-path",
        img,
        &c.id,
    ])
    .assert_one_line_error(&["--manage-cgroups-mode", "hard"]);
    ctx.rt(&[
        "checkpoint",
        "--empty-ns",
        "ipc",
        "--image-path",
        img,
        &c.id,
    ])
    .assert_one_line_error(&["--empty-ns"]);
    ctx.rt(&["checkpoint", "--lazy-pages", "--image-path", img, &c.id])
        .assert_one_line_error(&["--lazy-pages"]);
    ctx.rt(&[
        "--criu",
        "/nonexistent/criu",
        "checkpoint",
        "--image-path",
        img,
        &c.id,
    ])
    .assert_one_line_error(&["criu", "not found"]);
    // Nothing happened to the container.
    assert_eq!(c.status().as_deref(), Some("running"));
    c.kill("KILL").assert_ok();
    c.wait_status("stopped");
    c.delete().assert_ok();
}

/// Accept one `--console-socket` connection, take the pty master and send every `tick N` line
/// read from it.
fn console_ticks(sock: &Path) -> Receiver<u64> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    let listener = std::os::unix::net::UnixListener::bind(sock).unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let fd = recv_fd(stream.as_raw_fd());
        // SAFETY: the fd was just received and is owned by nothing else.
        let mut master = unsafe { fs::File::from_raw_fd(fd) };
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while let Ok(1) = master.read(&mut b) {
            if b[0] != b'\n' {
                line.push(b[0]);
                continue;
            }
            let l = String::from_utf8_lossy(&line)
                .trim_end_matches('\r')
                .to_string();
            line.clear();
            if let Some(n) = l.strip_prefix("tick ").and_then(|n| n.parse().ok()) {
                if tx.send(n).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

#[test]
fn a_container_with_a_terminal_gets_a_new_pty_on_its_console_socket() {
    let Some(criu) = criu() else { return };
    let ctx = Ctx::new("cr_tty");
    let counter = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.05; done";
    let mut a = ctx.bundle(&["sh", "-c", counter]);
    a.set("/process/terminal", json!(true));
    a.bind_host_dir("/data");
    let sock_a = ctx.dir.join("console-a.sock");
    let ticks_a = console_ticks(&sock_a);
    a.create_with(&["--console-socket", sock_a.to_str().unwrap()])
        .assert_ok();
    a.start().assert_ok();
    let mut last = 0;
    for _ in 0..5 {
        last = ticks_a
            .recv_timeout(Duration::from_secs(30))
            .expect("ticks on the first pty");
    }
    let images = ctx.scratch("images");
    let img = images.to_str().unwrap();
    ctx.rt(&["--criu", &criu, "checkpoint", "--image-path", img, &a.id])
        .assert_ok();
    while let Ok(n) = ticks_a.recv_timeout(Duration::from_millis(500)) {
        last = n;
    }
    // Restored with a new terminal: its master arrives on the new console socket.
    let mut b = ctx.bundle(&["sh", "-c", counter]);
    b.set("/process/terminal", json!(true));
    b.bind_host_dir("/data");
    b.write_config();
    let bundle_b = b.bundle_arg();
    let sock_b = ctx.dir.join("console-b.sock");
    let ticks_b = console_ticks(&sock_b);
    // Without a console socket: refused before criu runs, nothing left.
    ctx.rt(&[
        "--criu",
        &criu,
        "restore",
        "-d",
        "--bundle",
        &bundle_b,
        "--image-path",
        img,
        &b.id,
    ])
    .assert_one_line_error(&["process.terminal", "--console-socket"]);
    assert!(cgroup_left(&b.id).is_empty());
    ctx.rt(&[
        "--criu",
        &criu,
        "restore",
        "-d",
        "--console-socket",
        sock_b.to_str().unwrap(),
        "--bundle",
        &bundle_b,
        "--image-path",
        img,
        &b.id,
    ])
    .assert_ok();
    let first = ticks_b
        .recv_timeout(Duration::from_secs(30))
        .expect("ticks on the restored container's new pty");
    assert!(
        first > last && first <= last + 2,
        "the counter should go on from {last} on the new pty, it printed {first}"
    );
    assert_eq!(b.status().as_deref(), Some("running"));
    b.kill("KILL").assert_ok();
    b.wait_status("stopped");
    b.delete().assert_ok();
}

#[test]
fn images_cannot_choose_which_host_paths_are_bound_in() {
    let Some(criu) = criu() else { return };
    let ctx = Ctx::new("cr_tamper");
    let (a, _data) = counter_bundle(&ctx);
    let bundle_a = a.bundle_arg();
    let mut run = spawn_piped(&ctx, &criu, &["run", "-d", "--bundle", &bundle_a, &a.id]);
    run.wait_ok();
    run.tick();
    let images = ctx.scratch("images");
    let img = images.to_str().unwrap();
    ctx.rt(&["--criu", &criu, "checkpoint", "--image-path", img, &a.id])
        .assert_ok();
    // A checkpoint archive from elsewhere (podman restore --import) that asks for the host's
    // /etc as a "device": refused, from the config's point of view, before criu restores
    // anything; nothing is left.
    let f = images.join("sprout-criu.json");
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&f).unwrap()).unwrap();
    let (b, _data_b) = counter_bundle(&ctx);
    let bundle_b = b.bundle_arg();
    // The images with `entry` added to sprout-criu.json's mounts: restore refuses them with a
    // one-line error naming `words`, before criu runs, and leaves nothing.
    let refused = |entry: serde_json::Value, words: &[&str]| {
        let mut v = v.clone();
        v["mounts"].as_array_mut().unwrap().push(entry);
        fs::write(&f, serde_json::to_vec(&v).unwrap()).unwrap();
        ctx.rt(&[
            "--criu",
            &criu,
            "restore",
            "-d",
            "--bundle",
            &bundle_b,
            "--image-path",
            img,
            &b.id,
        ])
        .assert_one_line_error(words);
        ctx.rt(&["state", &b.id]).assert_fail();
        assert!(cgroup_left(&b.id).is_empty());
        assert!(!ctx.root.join(&b.id).exists(), "state directory left");
    };
    refused(
        json!({"kind": "device", "mountpoint": "/dev/evil", "host": "/etc"}),
        &["linux.devices", "/etc"],
    );
    // Nor where the host's whole cgroup2 hierarchy appears: only on the config's cgroup mount.
    refused(
        json!({"kind": "hierarchy", "mountpoint": "/data"}),
        &["mounts", "cgroup2 hierarchy on /data"],
    );
}

#[test]
fn checkpoint_help_exits_zero() {
    // podman decides whether a runtime can checkpoint by running `<runtime> checkpoint --help`.
    let ctx = Ctx::new("cr_help");
    for cmd in ["checkpoint", "restore"] {
        let o = ctx.rt_opts(
            &[cmd, "--help"],
            &CmdOpts {
                no_root: true,
                ..Default::default()
            },
        );
        o.assert_ok();
        assert!(o.stdout.contains("--image-path"), "{}", o.stdout);
    }
}
