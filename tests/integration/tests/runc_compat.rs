//! Small divergences from runc / crun (issue #16), each checked on a real container:
//! capabilities unknown to the runtime and kernel, `update --cpu-share`, bad `--log-format` /
//! `--log`, the `kernel.hostname` sysctl, the process group of an `exec`'d process, hooks'
//! environment and working directory, and a process.json without `user`.

use serde_json::{json, Value};
use sprout_integration_tests::*;
use std::fs;
use std::path::{Path, PathBuf};

const SLEEP: &[&str] = &["sleep", "1000"];

fn status_line(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
}

fn caps(list: &[&str]) -> Value {
    json!({
        "bounding": list,
        "effective": list,
        "permitted": list,
    })
}

/// A container running `sleep` (created and started), for `exec`.
fn running<'a>(ctx: &'a Ctx) -> Bundle<'a> {
    let b = ctx.bundle(SLEEP);
    b.create().assert_ok();
    b.start_and_wait_exec();
    b
}

// ---- 1. capabilities unknown to the runtime and the kernel ------------------------------------

#[test]
fn unknown_capability_in_config_is_ignored_with_a_warning() {
    let ctx = Ctx::new("capunknown");
    let mut b = ctx.bundle(&["cat", "/proc/self/status"]);
    b.set(
        "/process/capabilities",
        caps(&["CAP_CHOWN", "CAP_UNKNOWN", "CAP_KILL"]),
    );
    let o = b.run();
    o.assert_ok();
    // The known ones are granted, exactly.
    let want = cap_mask(&[0, 5]);
    for k in ["CapBnd", "CapPrm", "CapEff"] {
        assert_eq!(status_line(&o.stdout, k), want, "{k}{}", o.describe());
    }
    assert!(
        o.stderr.contains("CAP_UNKNOWN"),
        "a warning should name the ignored capability: {}",
        o.describe()
    );
}

#[test]
fn a_string_that_is_not_a_capability_name_is_refused() {
    let ctx = Ctx::new("capbad");
    let mut b = ctx.bundle(&["true"]);
    b.set("/process/capabilities", caps(&["CAP_CHOWN", "sys admin"]));
    let o = b.run();
    o.assert_fail();
    o.assert_one_line_error(&["process.capabilities.bounding"]);
    assert!(o.stderr.contains("sys admin"), "{}", o.describe());
}

#[test]
fn exec_cap_unknown_is_ignored_with_a_warning() {
    let ctx = Ctx::new("execcapunk");
    let b = running(&ctx);
    let o = b.exec(
        &["--cap", "CAP_UNKNOWN", "--cap", "CAP_SYS_PTRACE"],
        &["cat", "/proc/self/status"],
    );
    o.assert_ok();
    let bnd = u64::from_str_radix(&status_line(&o.stdout, "CapBnd"), 16).unwrap();
    assert!(
        bnd & (1 << 19) != 0,
        "the known --cap is still added: {}",
        o.describe()
    );
    assert!(o.stderr.contains("CAP_UNKNOWN"), "{}", o.describe());

    // A process.json asking for one: the same.
    let pj = ctx.dir.join("caps-process.json");
    fs::write(
        &pj,
        json!({
            "args": ["true"], "cwd": "/", "user": {"uid": 0, "gid": 0},
            "env": ["PATH=/bin:/usr/bin"],
            "capabilities": caps(&["CAP_KILL", "CAP_FUTURE_THING"]),
        })
        .to_string(),
    )
    .unwrap();
    let o = b.exec(&["--process", pj.to_str().unwrap()], &[]);
    o.assert_ok();
    assert!(o.stderr.contains("CAP_FUTURE_THING"), "{}", o.describe());

    let o = b.exec(&["--cap", "not a cap!"], &["true"]);
    o.assert_fail();
    o.assert_one_line_error(&["--cap"]);
}

// ---- 6. exec --process without user ----------------------------------------------------------------

#[test]
fn exec_process_json_without_user_runs_as_root() {
    let ctx = Ctx::new("execnouser");
    let b = running(&ctx);
    let pj = ctx.dir.join("process.json");
    fs::write(
        &pj,
        json!({"args": ["sh", "-c", "id -u; id -g"], "cwd": "/", "env": ["PATH=/bin:/usr/bin"]})
            .to_string(),
    )
    .unwrap();
    let o = b.exec(&["--process", pj.to_str().unwrap()], &[]);
    o.assert_ok();
    assert_eq!(o.stdout, "0\n0\n", "{}", o.describe());
}
