//! CVE-2022-29162: runc gave exec'd processes a non-empty *inheritable* capability set, so a
//! program with file capabilities could gain them past the container's bounding set. The
//! container's CapInh must be exactly the config's inheritable set (empty by default), for the
//! init and for `exec`, and `exec --cap` adds to bounding/effective/permitted/ambient only.

use serde_json::json;
use sprout_security_tests::*;

fn cap_line(out: &str, key: &str) -> u64 {
    let v = status_field(out, key).unwrap_or_else(|| panic!("no {key} in {out:?}"));
    u64::from_str_radix(&v, 16).unwrap()
}

const CAP_KILL: u32 = 5;
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_NET_RAW: u32 = 13;
const CAP_AUDIT_WRITE: u32 = 29;

fn mask(c: &[u32]) -> u64 {
    c.iter().fold(0, |m, c| m | (1u64 << c))
}

#[test]
fn init_inheritable_empty_by_default() {
    let ctx = Ctx::new("capinh");
    let b = ctx.bundle(&["cat", "/proc/self/status"]);
    let out = b.run_ok();
    assert_eq!(
        cap_line(&out, "CapInh"),
        0,
        "init CapInh must be empty when the config sets none:\n{out}"
    );
    let def = mask(&[CAP_AUDIT_WRITE, CAP_KILL, CAP_NET_BIND_SERVICE]);
    assert_eq!(cap_line(&out, "CapBnd"), def, "CapBnd");
    assert_eq!(cap_line(&out, "CapEff"), def, "CapEff");
}

#[test]
fn init_inheritable_exactly_config() {
    let ctx = Ctx::new("capinhcfg");
    let mut b = ctx.bundle(&["cat", "/proc/self/status"]);
    b.set("/process/capabilities/inheritable", json!(["CAP_KILL"]));
    let out = b.run_ok();
    assert_eq!(
        cap_line(&out, "CapInh"),
        mask(&[CAP_KILL]),
        "CapInh must be exactly the config's:\n{out}"
    );
    // Also as a non-root user: still exactly the config's.
    let mut b = ctx.bundle(&["cat", "/proc/self/status"]);
    b.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    b.set("/process/capabilities/inheritable", json!(["CAP_KILL"]));
    let out = b.run_ok();
    assert_eq!(
        cap_line(&out, "CapInh"),
        mask(&[CAP_KILL]),
        "uid 1000: CapInh:\n{out}"
    );
}

#[test]
fn exec_inheritable_not_widened() {
    let ctx = Ctx::new("capexec");
    let b = ctx.bundle(&["sleep", "60"]);
    b.create().assert_ok();
    b.start().assert_ok();
    let o = b.exec(&[], &["cat", "/proc/self/status"]);
    o.assert_ok();
    assert_eq!(
        cap_line(&o.stdout, "CapInh"),
        0,
        "exec CapInh:\n{}",
        o.stdout
    );
    for cap in ["CAP_SYS_ADMIN", "sys_admin", "NET_RAW"] {
        let o = b.exec(&["--cap", cap], &["cat", "/proc/self/status"]);
        o.assert_ok();
        assert_eq!(
            cap_line(&o.stdout, "CapInh"),
            0,
            "exec --cap {cap} added to CapInh:\n{}",
            o.stdout
        );
        let want = if cap.contains("RAW") {
            CAP_NET_RAW
        } else {
            CAP_SYS_ADMIN
        };
        assert_ne!(
            cap_line(&o.stdout, "CapEff") & mask(&[want]),
            0,
            "exec --cap {cap}: not effective:\n{}",
            o.stdout
        );
    }
    // As a non-root user with --cap: inheritable still empty.
    let o = b.exec(
        &["--user", "1000:1000", "--cap", "CAP_NET_RAW"],
        &["cat", "/proc/self/status"],
    );
    o.assert_ok();
    assert_eq!(
        cap_line(&o.stdout, "CapInh"),
        0,
        "exec --user 1000 --cap CapInh:\n{}",
        o.stdout
    );
}

/// exec --process with a process.json whose inheritable set is the config's: exactly that.
#[test]
fn exec_process_json_inheritable_exact() {
    let ctx = Ctx::new("capexecpj");
    let mut b = ctx.bundle(&["sleep", "60"]);
    b.set("/process/capabilities/inheritable", json!(["CAP_KILL"]));
    b.create().assert_ok();
    b.start().assert_ok();
    let pj = ctx.scratch("pj").join("process.json");
    let mut p = b.config["process"].clone();
    p["args"] = json!(["cat", "/proc/self/status"]);
    std::fs::write(&pj, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = b.exec(&["--process", pj.to_str().unwrap()], &[]);
    o.assert_ok();
    assert_eq!(
        cap_line(&o.stdout, "CapInh"),
        mask(&[CAP_KILL]),
        "exec --process CapInh:\n{}",
        o.stdout
    );
    let o = b.exec(&[], &["cat", "/proc/self/status"]);
    o.assert_ok();
    assert_eq!(
        cap_line(&o.stdout, "CapInh"),
        mask(&[CAP_KILL]),
        "exec CapInh (config's inheritable):\n{}",
        o.stdout
    );
}
