//! Bad input: each case must exit non-zero, print a one-line error on
//! stderr that names the problem, and leave NOTHING behind (no state under
//! --root, no mounts, no cgroup, no process).

use serde_json::json;
use sprout_integration_tests::*;
use std::fs;

const SLEEP: &[&str] = &["sleep", "1000"];

/// Run `<cmd> --bundle <dir> --pid-file <f> <id>` with whatever config.json
/// is in the bundle (not rewritten), check failure + message + no trace.
fn expect_rejected(ctx: &Ctx, b: &Bundle, cmd: &str, id: &str, keywords: &[&str]) -> Output {
    let pidfile = ctx.dir.join(format!("{}-{cmd}.pid", b.id));
    let bd = b.bundle_arg();
    let before = mount_snapshot();
    let o = ctx.rt(&[
        cmd,
        "--bundle",
        &bd,
        "--pid-file",
        pidfile.to_str().unwrap(),
        id,
    ]);
    o.assert_fail();
    o.assert_one_line_error(keywords);
    ctx.assert_no_trace(&o, b, &[], Some(&pidfile));
    let new = new_mounts_since(
        &before,
        &[
            &b.id,
            ctx.dir.to_str().unwrap(),
            ctx.root.to_str().unwrap(),
            &format!("/{id}/"),
        ],
    );
    assert!(
        new.is_empty(),
        "new host mounts after a failed {cmd}: {new:?}{}",
        o.describe()
    );
    assert_no_state_files_beside_root(ctx);
    o
}

/// A runtime that resolved an id like ".." would write state next to our
/// --root: the per-run directory may only contain other tests' roots (dirs).
fn assert_no_state_files_beside_root(ctx: &Ctx) {
    let parent = ctx.root.parent().unwrap();
    if let Ok(rd) = fs::read_dir(parent) {
        for e in rd.flatten() {
            let ft = e.file_type().unwrap();
            assert!(
                ft.is_dir(),
                "unexpected file {} beside the --root",
                e.path().display()
            );
        }
    }
}

fn rejected_config(name: &str, edit: impl FnOnce(&mut Bundle), keywords: &[&str]) {
    let ctx = Ctx::new(name);
    let mut b = ctx.bundle(&["true"]);
    edit(&mut b);
    b.write_config();
    let id = b.id.clone();
    expect_rejected(&ctx, &b, "create", &id, keywords);
    // `run` must reject it the same way.
    expect_rejected(&ctx, &b, "run", &id, keywords);
}

fn rejected_raw_config(name: &str, bytes: &[u8], keywords: &[&str]) {
    let ctx = Ctx::new(name);
    let b = ctx.bundle(&["true"]);
    fs::write(b.dir.join("config.json"), bytes).unwrap();
    let id = b.id.clone();
    expect_rejected(&ctx, &b, "create", &id, keywords);
    expect_rejected(&ctx, &b, "run", &id, keywords);
}

#[test]
fn malformed_json() {
    rejected_raw_config(
        "badjson",
        b"{ \"ociVersion\": \"1.0.2\", this is not json }",
        &["json", "parse", "syntax", "config"],
    );
}

#[test]
fn truncated_config() {
    let full = serde_json::to_vec_pretty(&default_config("x", &["true"])).unwrap();
    let cut = &full[..full.len() / 2];
    rejected_raw_config(
        "truncated",
        cut,
        &["json", "eof", "end of", "parse", "config"],
    );
}

#[test]
fn empty_config_file() {
    rejected_raw_config(
        "emptycfg",
        b"",
        &["json", "eof", "end of", "parse", "config", "empty"],
    );
}

#[test]
fn missing_config_file() {
    let ctx = Ctx::new("nocfg");
    let b = ctx.bundle(&["true"]);
    let _ = fs::remove_file(b.dir.join("config.json"));
    let id = b.id.clone();
    expect_rejected(&ctx, &b, "create", &id, &["config.json", "config"]);
}

#[test]
fn unknown_namespace_type() {
    rejected_config(
        "nsunknown",
        |b| {
            b.config["linux"]["namespaces"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "bogusns"}));
        },
        &["bogusns"],
    );
}

#[test]
fn duplicate_namespace() {
    rejected_config(
        "nsdup",
        |b| {
            b.config["linux"]["namespaces"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "pid"}));
        },
        &["duplicate", "more than once", "twice", "repeated"],
    );
}

/// runtime-spec: a relative mount destination MAY be given (deprecated) and is relative to "/"
/// (runc warns and mounts it there). It used to be refused.
#[test]
fn relative_mount_destination_is_relative_to_root() {
    let ctx = Ctx::new("mntrel");
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "grep -c ' /relative/dest ' /proc/self/mountinfo",
    ]);
    b.add_mount(json!({"destination": "relative/dest", "type": "tmpfs", "source": "tmpfs"}));
    let o = b.run();
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "1", "{}", o.describe());
    assert!(
        o.stderr.contains("not absolute"),
        "no warning: {}",
        o.describe()
    );
}

#[test]
fn missing_rootfs() {
    rejected_config(
        "norootfs",
        |b| {
            b.set("/root/path", json!("no-such-rootfs-dir"));
        },
        &["no-such-rootfs-dir", "rootfs"],
    );
}

#[test]
fn empty_args() {
    rejected_config(
        "emptyargs",
        |b| {
            b.set("/process/args", json!([]));
        },
        &["args"],
    );
}

#[test]
fn unsupported_oci_version() {
    rejected_config(
        "ociv2",
        |b| {
            b.set("/ociVersion", json!("2.0.0"));
        },
        &["2.0.0", "ociVersion", "version"],
    );
}

fn rejected_id(name: &str, id: &str) {
    let ctx = Ctx::new(name);
    let b = ctx.bundle(SLEEP);
    b.write_config();
    // "id" alone would match "invalid"/"valid": ask for the id as a noun.
    let kw = [
        "container id",
        "invalid id",
        "id format",
        "id:",
        "id \"",
        "id '",
        "id cannot",
        "id must",
        "empty id",
    ];
    expect_rejected(&ctx, &b, "create", id, &kw);
    expect_rejected(&ctx, &b, "run", id, &kw);
}

#[test]
fn id_empty() {
    rejected_id("idempty", "");
}

#[test]
fn id_with_slash() {
    rejected_id("idslash", "a/b");
}

#[test]
fn id_dotdot() {
    rejected_id("iddotdot", "..");
}

#[test]
fn id_already_taken() {
    let ctx = Ctx::new("idtaken");
    let first = ctx.bundle(SLEEP);
    first.create().assert_ok();
    let pid = first.pid();
    let second = ctx.bundle(SLEEP);
    second.write_config();
    let pidfile = ctx.dir.join("second.pid");
    let bd = second.bundle_arg();
    let o = ctx.rt(&[
        "create",
        "--bundle",
        &bd,
        "--pid-file",
        pidfile.to_str().unwrap(),
        &first.id,
    ]);
    o.assert_fail();
    o.assert_one_line_error(&["exist", "already", "in use", "taken"]);
    ctx.assert_no_trace(&o, &second, &[first.id.as_str()], Some(&pidfile));
    // The first container is untouched.
    let st = first.state();
    assert_eq!(st["status"], json!("created"));
    assert_eq!(st["pid"].as_i64(), Some(i64::from(pid)));
    assert_eq!(
        st["bundle"],
        json!(first.bundle_arg()),
        "state must still point at the first bundle"
    );
    assert!(pid_alive(pid));
}

#[test]
fn start_running_container_fails() {
    let ctx = Ctx::new("startrunning");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let pid = b.pid();
    let o = b.start();
    o.assert_fail();
    o.assert_one_line_error(&["running", "not created", "created"]);
    let st = b.state();
    assert_eq!(st["status"], json!("running"));
    assert_eq!(st["pid"].as_i64(), Some(i64::from(pid)));
}

#[test]
fn start_stopped_container_fails_and_does_not_rerun() {
    let ctx = Ctx::new("startstopped");
    let mut b = ctx.bundle(&["sh", "-c", "echo ran >> /out/count"]);
    let out = b.bind_host_dir("/out");
    b.create().assert_ok();
    b.start().assert_ok();
    b.wait_status("stopped");
    let o = b.start();
    o.assert_fail();
    o.assert_one_line_error(&["stopped", "not created", "created"]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        fs::read_to_string(out.join("count")).unwrap(),
        "ran\n",
        "process must run exactly once"
    );
    assert_eq!(b.status().as_deref(), Some("stopped"));
}

#[test]
fn delete_running_without_force_fails() {
    let ctx = Ctx::new("delrunning");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let pid = b.pid();
    let o = b.delete();
    o.assert_fail();
    o.assert_one_line_error(&["running", "force"]);
    assert_eq!(b.status().as_deref(), Some("running"));
    assert!(
        pid_alive(pid) && !is_zombie(pid),
        "delete without --force must not kill the process"
    );
}

#[test]
fn delete_created_container_without_force_works() {
    // Not an error: a created (never started) container can be deleted.
    let ctx = Ctx::new("delcreated");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    let pid = b.pid();
    b.delete().assert_ok();
    wait_for("init process gone", POLL_TIMEOUT, || {
        (!pid_alive(pid) || is_zombie(pid)).then_some(())
    });
    assert!(ctx.root_entries().is_empty());
    for c in cgroup_dirs(&b.id) {
        assert!(!c.exists(), "cgroup {} left", c.display());
    }
}

#[test]
fn operations_on_unknown_container_fail() {
    let ctx = Ctx::new("unknownid");
    for args in [
        vec!["start", "nope-unknown"],
        vec!["kill", "nope-unknown", "KILL"],
        vec!["delete", "nope-unknown"],
        vec!["exec", "nope-unknown", "true"],
        vec!["state", "nope-unknown"],
    ] {
        let o = ctx.rt(&args);
        o.assert_fail();
        o.assert_one_line_error(&["nope-unknown", "not exist", "not found"]);
    }
    assert!(ctx.root_entries().is_empty());
}

#[test]
fn delete_force_unknown_container_succeeds() {
    // runc semantics: `delete --force` of a missing container is not an error.
    let ctx = Ctx::new("delforceunknown");
    ctx.rt(&["delete", "--force", "nope-unknown-2"]).assert_ok();
}

#[test]
fn kill_with_bad_signal_fails() {
    let ctx = Ctx::new("badsignal");
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start().assert_ok();
    let o = b.kill("SIGBOGUS");
    o.assert_fail();
    o.assert_one_line_error(&["SIGBOGUS", "signal"]);
    assert_eq!(b.status().as_deref(), Some("running"));
}

// Configs that pass validation but fail while the container is being set
// up: the half-built container must be torn down completely.

#[test]
fn bind_mount_source_missing() {
    rejected_config(
        "bindmissing",
        |b| {
            b.add_mount(json!({"destination": "/data", "type": "bind", "source": "/nonexistent/sprout-src", "options": ["rbind"]}));
        },
        &["/nonexistent/sprout-src", "/data"],
    );
}

#[test]
fn executable_not_found() {
    rejected_config(
        "noexec",
        |b| {
            b.set("/process/args", json!(["/bin/no-such-binary-xyz"]));
        },
        &["no-such-binary-xyz"],
    );
}

#[test]
fn executable_not_in_path() {
    rejected_config(
        "nopath",
        |b| {
            b.set("/process/args", json!(["no-such-cmd-xyz", "arg"]));
        },
        &["no-such-cmd-xyz"],
    );
}

#[test]
fn invalid_sysctl() {
    rejected_config(
        "badsysctl",
        |b| {
            b.set("/linux/sysctl", json!({"net.ipv4.no_such_knob_xyz": "1"}));
        },
        &["no_such_knob_xyz", "sysctl"],
    );
}

#[test]
fn join_nonexistent_namespace_path() {
    rejected_config(
        "badnspath",
        |b| {
            for n in b.config["linux"]["namespaces"].as_array_mut().unwrap() {
                if n["type"] == "network" {
                    n["path"] = json!("/proc/999999999/ns/net");
                }
            }
        },
        &["/proc/999999999/ns/net", "namespace"],
    );
}

#[test]
fn cwd_is_a_file() {
    rejected_config(
        "cwdfile",
        |b| {
            b.set("/process/cwd", json!("/etc/passwd"));
        },
        &["/etc/passwd", "cwd", "directory"],
    );
}
