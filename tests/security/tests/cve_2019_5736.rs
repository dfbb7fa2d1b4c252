//! CVE-2019-5736: a process in the container gets hold of the runtime's binary through
//! /proc/<pid>/exe of a runtime process that is inside the container (the init before it execs,
//! an `exec` child entering the container, or the runtime re-executed by a `#!/proc/self/exe`
//! script), then reopens it for writing once the runtime has exited and overwrites the host's
//! binary.
//!
//! The tests run a COPY of the runtime binary (so nothing real can be harmed), start the static
//! probe's `attack` mode inside the container (it scans /proc, SIGSTOPs every new process to widen
//! any window, opens /proc/<pid>/exe of every process whose exe is the copy, and keeps trying to
//! write to it), drive the runtime the way a host would, and then check that the copy's hash is
//! unchanged and that the attacker never held it. A positive control proves the attacker and the
//! checks do detect a successful overwrite.

use serde_json::json;
use sprout_security_tests::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Setup {
    ctx: Ctx,
    copy: PathBuf,
    hash: String,
    dev: u64,
    ino: u64,
}

fn setup(name: &str) -> Setup {
    let mut ctx = Ctx::new(name);
    let dir = ctx.scratch("bin");
    let copy = dir.join("sprout");
    fs::copy(runtime_bin(), &copy).expect("copy the runtime binary");
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    ctx.bin = copy.clone();
    let hash = file_hash(&copy);
    let (dev, ino) = dev_ino(&copy);
    Setup {
        ctx,
        copy,
        hash,
        dev,
        ino,
    }
}

/// Start the attacker in the container (detached exec); returns the host path of its log.
fn start_attacker(b: &Bundle, out: &Path, dev: u64, ino: u64, secs: f64) -> PathBuf {
    start_attacker_opt(b, out, dev, ino, secs, true)
}

/// `stop`: SIGSTOP every new process (only with the container's own pid namespace!).
fn start_attacker_opt(
    b: &Bundle,
    out: &Path,
    dev: u64,
    ino: u64,
    secs: f64,
    stop: bool,
) -> PathBuf {
    let log = out.join("attack.log");
    let (d, i, s) = (dev.to_string(), ino.to_string(), format!("{secs}"));
    let mut args = vec!["/probe", "attack", &d, &i, &s, "/out/attack.log"];
    if !stop {
        args.push("nostop");
    }
    let o = b.exec(&["-d"], &args);
    o.assert_ok();
    wait_for("attacker start", Duration::from_secs(10), || {
        fs::read_to_string(&log)
            .ok()
            .filter(|s| s.contains("START"))
            .map(|_| ())
    });
    log
}

fn wait_attacker_end(log: &Path, secs: f64) -> String {
    wait_for("attacker end", Duration::from_secs_f64(secs + 20.0), || {
        fs::read_to_string(log).ok().filter(|s| s.contains("END "))
    })
}

fn bundle_with_attacker<'a>(ctx: &'a Ctx, args: &[&str]) -> (Bundle<'a>, PathBuf) {
    let mut b = ctx.bundle(args);
    let out = b.bind_host_dir("/out");
    b.install_probe();
    (b, out)
}

/// Give the rootfs the host's dynamic loader and the libraries the runtime binary needs (as any
/// distro image has), so that the kernel can actually run the runtime binary inside the container
/// (a busybox-only rootfs would fail the exec with ENOENT and hide the attack).
fn add_runtime_libs(b: &Bundle, bin: &Path) {
    let o = std::process::Command::new("ldd")
        .arg(bin)
        .output()
        .expect("ldd");
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let path = l.split_whitespace().find(|w| w.starts_with('/'));
        if let Some(p) = path {
            let dst = b.rootfs().join(p.trim_start_matches('/'));
            fs::create_dir_all(dst.parent().unwrap()).unwrap();
            fs::copy(p, &dst).unwrap();
            // Same path through the usrmerge symlinks too (/lib64 -> usr/lib64 on the host).
            let real = fs::canonicalize(p).unwrap();
            let dst2 = b
                .rootfs()
                .join(real.to_string_lossy().trim_start_matches('/'));
            fs::create_dir_all(dst2.parent().unwrap()).unwrap();
            let _ = fs::copy(&real, &dst2);
        }
    }
}

fn assert_not_escaped(s: &Setup, log: &str, what: &str) {
    let after = file_hash(&s.copy);
    let got: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("GOT_EXE") || l.starts_with("ESCAPED"))
        .collect();
    assert_eq!(after, s.hash, "{what}: the runtime binary copy {} was MODIFIED from inside the container; attacker log:\n{log}", s.copy.display());
    assert!(got.is_empty(), "{what}: the attacker got hold of the runtime binary through /proc/<pid>/exe: {got:?}\nfull log:\n{log}");
    let escaped = log
        .lines()
        .any(|l| l.starts_with("END ") && !l.ends_with("escaped=0"));
    assert!(!escaped, "{what}: attacker reports success:\n{log}");
}

/// The attacker and the hash check detect a successful overwrite: point the attacker at a binary
/// that a container process runs (a copy of the probe, the container's own file) and watch it win.
#[test]
fn positive_control_attacker_detects_a_writable_exe() {
    let s = setup("5736ctl");
    let (b, out) = bundle_with_attacker(&s.ctx, &["sleep", "60"]);
    let victim = b.rootfs().join("victim");
    fs::copy(probe_bin(), &victim).unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o755)).unwrap();
    let before = file_hash(&victim);
    let (dev, ino) = dev_ino(&victim);
    b.create().assert_ok();
    b.start().assert_ok();
    let log = start_attacker(&b, &out, dev, ino, 6.0);
    // The victim runs for a moment, then exits: the attacker holds its exe and then writes it.
    b.exec(&["-d"], &["/victim", "spin", "1"]).assert_ok();
    let log = wait_attacker_end(&log, 6.0);
    assert!(
        log.contains("GOT_EXE"),
        "positive control: attacker never saw the victim's exe:\n{log}"
    );
    assert!(
        log.contains("ESCAPED"),
        "positive control: attacker could not write the victim:\n{log}"
    );
    assert_ne!(
        file_hash(&victim),
        before,
        "positive control: victim unchanged although the attacker reports success"
    );
}

/// The init before execve (container in the `created` state) is a runtime process inside the
/// container: a process exec'd into the created container must not get /proc/1/exe.
#[test]
fn init_before_exec_binary_not_reachable() {
    let s = setup("5736init");
    let (b, out) = bundle_with_attacker(&s.ctx, &["sleep", "60"]);
    b.create().assert_ok();
    let secs = 6.0;
    let log = start_attacker(&b, &out, s.dev, s.ino, secs);
    // Let the attacker look at the waiting init for a while, then start it; afterwards no runtime
    // process runs, so a held fd could be reopened for writing (no ETXTBSY).
    std::thread::sleep(Duration::from_millis(1500));
    b.start().assert_ok();
    let log = wait_attacker_end(&log, secs);
    eprintln!("attacker log (init):\n{log}");
    assert_not_escaped(&s, &log, "create/exec/start");
}

/// `exec` children entering the container: many execs while the attacker scans and freezes
/// every new process.
#[test]
fn exec_child_binary_not_reachable() {
    let s = setup("5736exec");
    let (b, out) = bundle_with_attacker(&s.ctx, &["sleep", "60"]);
    b.create().assert_ok();
    b.start().assert_ok();
    let secs = 12.0;
    let log = start_attacker(&b, &out, s.dev, s.ino, secs);
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < Duration::from_secs(8) {
        let o = b.exec(&[], &["true"]);
        o.assert_ok();
        n += 1;
    }
    let log = wait_attacker_end(&log, secs);
    let denied = log
        .lines()
        .filter(|l| l.starts_with("SEEN ") && l.ends_with(&format!(" {}", libc::EACCES)))
        .count();
    eprintln!("{n} execs; the attacker saw {denied} processes whose exe it could not open (non-dumpable exec children)");
    assert_not_escaped(&s, &log, "exec");
}

/// The original exploit: the program the host runs with `exec` is a script whose interpreter is
/// /proc/self/exe, so the kernel runs the runtime's own binary inside the container.
#[test]
fn exec_of_proc_self_exe_script() {
    let s = setup("5736sheb");
    let (b, out) = bundle_with_attacker(&s.ctx, &["sleep", "60"]);
    fs::write(b.rootfs().join("evil"), "#!/proc/self/exe\n").unwrap();
    fs::set_permissions(b.rootfs().join("evil"), fs::Permissions::from_mode(0o755)).unwrap();
    add_runtime_libs(&b, &s.copy);
    b.create().assert_ok();
    b.start().assert_ok();
    let secs = 10.0;
    let log = start_attacker(&b, &out, s.dev, s.ino, secs);
    let t = Instant::now();
    let mut outs = Vec::new();
    while t.elapsed() < Duration::from_secs(4) {
        let o = b.exec(&[], &["/evil", "state", "x"]);
        outs.push(format!(
            "exit {:?} stderr {:?}",
            o.code,
            o.stderr.lines().next().unwrap_or("")
        ));
    }
    // No runtime process may run now (a running one makes the binary ETXTBSY): just wait.
    let log = wait_attacker_end(&log, secs);
    eprintln!("exec /evil results: {:?}", &outs[..outs.len().min(3)]);
    eprintln!(
        "attacker log (shebang):\n{}",
        log.lines()
            .filter(|l| !l.starts_with("SEEN") || l.contains("target"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_not_escaped(&s, &log, "exec of a #!/proc/self/exe script");
}

/// Same with the container's own process.args: the init runs a #!/proc/self/exe script. The
/// container shares the host's pid namespace here (else the attacker dies with the init), so the
/// attacker does not freeze processes ("nostop": it must never signal host processes).
#[test]
fn init_of_proc_self_exe_script() {
    let s = setup("5736shinit");
    let (mut b, out) = bundle_with_attacker(&s.ctx, &["/evil"]);
    b.remove_namespace("pid");
    fs::write(b.rootfs().join("evil"), "#!/proc/self/exe\n").unwrap();
    fs::set_permissions(b.rootfs().join("evil"), fs::Permissions::from_mode(0o755)).unwrap();
    add_runtime_libs(&b, &s.copy);
    b.set("/process/args", json!(["/evil", "list"]));
    b.create().assert_ok();
    let secs = 8.0;
    let log = start_attacker_opt(&b, &out, s.dev, s.ino, secs, false);
    std::thread::sleep(Duration::from_millis(500));
    let _ = b.start();
    let log = wait_attacker_end(&log, secs);
    eprintln!(
        "attacker log (init shebang):\n{}",
        log.lines()
            .filter(|l| !l.starts_with("SEEN") || l.contains("target"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_not_escaped(&s, &log, "init running a #!/proc/self/exe script");
}

/// Same exec storm in a container that holds CAP_SYS_PTRACE (debug containers often do): the
/// exec child must still be out of reach once its capabilities are the container's.
#[test]
fn exec_child_binary_not_reachable_with_sys_ptrace() {
    let s = setup("5736ptrace");
    let (mut b, out) = bundle_with_attacker(&s.ctx, &["sleep", "60"]);
    let caps = json!([
        "CAP_AUDIT_WRITE",
        "CAP_KILL",
        "CAP_NET_BIND_SERVICE",
        "CAP_SYS_PTRACE"
    ]);
    for k in ["bounding", "effective", "permitted"] {
        b.set(&format!("/process/capabilities/{k}"), caps.clone());
    }
    b.create().assert_ok();
    b.start().assert_ok();
    let secs = 10.0;
    let log = start_attacker(&b, &out, s.dev, s.ino, secs);
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < Duration::from_secs(6) {
        b.exec(&[], &["true"]).assert_ok();
        n += 1;
    }
    let log = wait_attacker_end(&log, secs);
    eprintln!("{n} execs with CAP_SYS_PTRACE in the container");
    assert_not_escaped(&s, &log, "exec (container has CAP_SYS_PTRACE)");
}

/// The plainest form of the shebang attack, for `run` and for create + start: the container's
/// program is a `#!/proc/self/exe --help` script. The kernel resolves /proc/self/exe while the
/// init is still exec'ing, so it names whatever the init was last: were that the runtime's binary
/// (an init that execs the program itself), the runtime (static, runnable anywhere) would start
/// inside the container, where nothing stops its process from reopening its own exe, and would
/// print its help to the container's stdout. The init was the trampoline, which takes no command
/// line of this shape and exits 127: nothing of sprout's on stdout, and the binary's hash is
/// unchanged. (An init that skipped the trampoline for `run`, where nothing waits between set-up
/// and the program, saved ~0.1 ms a start and failed this: the runtime answered inside the
/// container; tried 2026-11-30, not kept.)
#[test]
fn proc_self_exe_script_as_program_never_runs_the_runtime() {
    let s = setup("5736shrun");
    let b = s.ctx.bundle(&["/evil"]);
    fs::write(b.rootfs().join("evil"), "#!/proc/self/exe --help\n").unwrap();
    fs::set_permissions(b.rootfs().join("evil"), fs::Permissions::from_mode(0o755)).unwrap();
    // A dynamically linked build needs its libraries in the rootfs to run there at all.
    add_runtime_libs(&b, &s.copy);
    // The kernel runs `/proc/self/exe --help /evil`: the runtime would print its usage.
    let ran_sprout = |out: &str| out.contains("Usage:") || out.contains("runc-compatible");
    let o = b.run();
    assert!(
        !ran_sprout(&o.stdout) && !ran_sprout(&o.stderr),
        "run: the runtime's binary ran inside the container: {o:?}"
    );
    assert_eq!(o.code, Some(127), "run: {o:?}");
    // create + start: the container's stdout is the file `create` was given.
    b.write_config();
    let out = s.ctx.dir.join("container.out");
    let bd = b.bundle_arg();
    let c = s.ctx.rt_opts(
        &["create", "--bundle", &bd, &b.id],
        &CmdOpts {
            stdout_to: Some(out.clone()),
            ..Default::default()
        },
    );
    c.assert_ok();
    b.start().assert_ok();
    b.wait_status("stopped");
    let got = fs::read_to_string(&out).unwrap_or_default();
    assert!(
        !ran_sprout(&got),
        "create + start: the runtime's binary ran inside the container: {got:?}"
    );
    assert_eq!(
        file_hash(&s.copy),
        s.hash,
        "the runtime binary copy was modified"
    );
}
