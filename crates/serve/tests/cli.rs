//! `sprout serve ...`: the `sprout` CLI execs `sprout-serve` (found next to the running `sprout`,
//! else in $PATH) with every argument passed through. Real binaries, real exec.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `sprout` binary: $SPROUT_BIN (scripts/test.sh), beside sprout-serve in this target dir,
/// the workspace's target/release; else built here (same target dir and profile as this test).
fn sprout_bin() -> PathBuf {
    let serve = Path::new(BIN);
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cands: Vec<PathBuf> = std::env::var_os("SPROUT_BIN")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    cands.push(serve.with_file_name("sprout"));
    cands.push(ws.join("target/release/sprout"));
    // A stale build (from before `serve` existed) does not count.
    let has_serve = |p: &PathBuf| {
        p.is_file()
            && Command::new(p)
                .arg("--help")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\n  serve "))
    };
    if let Some(p) = cands.iter().find(|p| has_serve(p)) {
        return p.clone();
    }
    let profile_dir = serve.parent().unwrap();
    let target_dir = profile_dir.parent().unwrap();
    eprintln!(
        "sprout binary not found ({cands:?}): building it into {}",
        target_dir.display()
    );
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "sprout", "--target-dir"])
        .arg(target_dir)
        .current_dir(&ws);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("running cargo");
    assert!(st.success(), "cargo build -p sprout: {st}");
    let p = serve.with_file_name("sprout");
    assert!(p.is_file(), "{} not built", p.display());
    p
}

fn copy_exe(from: &Path, dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let to = dir.join(name);
    // Copied by a cp(1) process, not std::fs::copy: while this (multi-threaded) test process
    // held the copy open for writing, a fork on the other test thread could inherit that fd
    // until its exec, and exec'ing the copy then failed with ETXTBSY (seen in the suite).
    let st = Command::new("cp")
        .arg(from)
        .arg(&to)
        .status()
        .unwrap_or_else(|e| panic!("cp {}: {e}", from.display()));
    assert!(st.success(), "cp {} {}: {st}", from.display(), to.display());
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(bin: &Path, path_env: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin)
        .args(args)
        .env("PATH", path_env)
        .env_remove("SPROUT_SERVE_CONFIG")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[test]
fn sprout_serve_subcommand_execs_sprout_serve() {
    let tmp = Tmp(PathBuf::from(format!(
        "/tmp/serve-cli-{}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let sprout = sprout_bin();
    // a/: sprout and sprout-serve side by side. b/: sprout alone. c/: sprout-serve alone.
    let a = copy_exe(&sprout, &tmp.0.join("a"), "sprout");
    copy_exe(Path::new(BIN), &tmp.0.join("a"), "sprout-serve");
    let b = copy_exe(&sprout, &tmp.0.join("b"), "sprout");
    copy_exe(Path::new(BIN), &tmp.0.join("c"), "sprout-serve");
    let cfg = tmp.0.join("config.toml");
    std::fs::write(
        &cfg,
        format!("registry = \"{}/registry\"\n", tmp.0.display()),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let src = tmp.0.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f.py"), "def f(e):\n    return e\n").unwrap();
    std::fs::write(src.join("requirements.txt"), "six==1.16.0\n").unwrap();
    // A PATH without any sprout-serve.
    let bare = "/usr/sbin:/usr/bin:/sbin:/bin";
    for d in bare.split(':') {
        assert!(
            !Path::new(d).join("sprout-serve").exists(),
            "{d}/sprout-serve exists: the PATH tests below would not test anything"
        );
    }

    // Beside the running binary; global options before `serve` are sprout's, everything after
    // it goes to sprout-serve verbatim (including --config, which sprout does not know).
    let o = run(
        &a,
        bare,
        &[
            "--root",
            "/tmp/serve-cli-unused",
            "serve",
            "--config",
            cfg,
            "handler",
            "add",
            "h1",
            src.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), "added h1");
    assert!(tmp.0.join("registry/h1/f.py").is_file());
    let o = run(&a, bare, &["serve", "--config", cfg, "handler", "list"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "h1\tsix==1.16.0\n");
    // Flags clap would otherwise take (--help, --debug) reach sprout-serve.
    let o = run(&a, bare, &["serve", "--help"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("sprout-serve [--config FILE] handler add NAME DIR"));
    let o = run(&a, bare, &["serve", "--config", cfg, "--debug"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).starts_with("sprout-serve: usage:"),
        "{}",
        text(&o.stderr)
    );

    // From $PATH when there is none beside sprout.
    let via_path = format!("{}:{bare}", tmp.0.join("c").display());
    let o = run(
        &b,
        &via_path,
        &["serve", "--config", cfg, "handler", "remove", "h1"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(
        &b,
        &via_path,
        &["serve", "--config", cfg, "handler", "list"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");

    // Missing: one clear line, exit 127.
    let o = run(&b, bare, &["serve", "handler", "list"]);
    assert_eq!(o.status.code(), Some(127));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("sprout: serve: sprout-serve not found next to ")
            && err.contains(&b.display().to_string())
            && err.contains("$PATH"),
        "{err}"
    );
}

#[test]
fn sprout_serve_runs_the_daemon() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = Tmp(PathBuf::from(format!(
        "/tmp/serve-cli-daemon-{}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let a = copy_exe(&sprout_bin(), &tmp.0, "sprout");
    copy_exe(Path::new(BIN), &tmp.0, "sprout-serve");
    let mut d = Daemon::config("clidaemon", "zygotes = false\n");
    d.spawn_with(&a, &["serve"]);
    // exec, not a child: the daemon process is sprout-serve itself.
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", d.pid())).unwrap();
    assert_eq!(comm.trim(), "sprout-serve");
    let exe = std::fs::read_link(format!("/proc/{}/exe", d.pid())).unwrap();
    assert_eq!(exe, tmp.0.join("sprout-serve"));
    d.add("echo", "def f(event):\n    return {'echo': event}\n", &[]);
    let r = d.post("echo", "[7]");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), serde_json::json!({"echo": [7]}));
}
