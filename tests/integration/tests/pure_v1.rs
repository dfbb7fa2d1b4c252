//! A cgroup v1 host without a cgroup2 hierarchy (systemd's "legacy" layout: RHEL and CentOS 7
//! and 8, Amazon Linux 2), emulated on a hybrid host: every command runs in a mount namespace
//! of its own where /sys/fs/cgroup/unified is unmounted (`Ctx::emulate_pure_v1`). The v1
//! hierarchies carry the container's cgroup, its limits, updates, freezing and statistics;
//! the runtime, which cannot see the cgroup2 hierarchy, leaves the init in the caller's
//! cgroup2 cgroup; `delete` removes every directory it made. Skipped elsewhere (pure v2: the
//! VM; a pure v1 host would run the rest of the suite that way anyway).

use serde_json::json;
use sprout_integration_tests::*;
use std::fs;
use std::path::{Path, PathBuf};

/// The init's directory in the v1 hierarchy of `controller`, from /proc/<pid>/cgroup.
fn v1_dir(cgroup: &str, controller: &str) -> PathBuf {
    cgroup
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            ctrls.split(',').any(|c| c == controller).then(|| {
                Path::new("/sys/fs/cgroup")
                    .join(controller)
                    .join(path.trim_start_matches('/'))
            })
        })
        .unwrap_or_else(|| panic!("no {controller} line in {cgroup}"))
}

fn read(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

/// The container's own /sys/fs/cgroup: its v1 hierarchies, each its own cgroup, and nothing
/// for a cgroup2 hierarchy the runtime cannot see. The kernel lists the cgroup2 line in
/// /proc/self/cgroup once anything has mounted cgroup2 (always, on this emulated host), and the
/// cgroup mount took it for a hierarchy: an empty directory of the host's cgroup tmpfs bound on
/// /sys/fs/cgroup/unified, or, on a real v1-only host without that directory, the tmpfs itself
/// bound over all the others.
#[test]
fn a_v1_only_hosts_container_sees_its_v1_hierarchies_only() {
    let mut ctx = Ctx::new("purev1view");
    if !ctx.emulate_pure_v1() {
        return;
    }
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "ls /sys/fs/cgroup; echo limit $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes); \
         echo pids $(cat /sys/fs/cgroup/pids/pids.max)",
    ]);
    b.set("/linux/resources/memory", json!({"limit": 48 << 20}));
    b.set("/linux/resources/pids", json!({"limit": 30}));
    b.write_config();
    let out = b.run_ok();
    let names: Vec<&str> = out
        .lines()
        .take_while(|l| !l.starts_with("limit "))
        .collect();
    assert!(!names.contains(&"unified"), "{out}");
    for h in ["memory", "pids", "freezer"] {
        assert!(
            names.contains(&h),
            "no {h} in the container's /sys/fs/cgroup: {out}"
        );
    }
    assert!(
        out.contains(&format!("limit {}", 48u64 << 20)),
        "the container's memory cgroup: {out}"
    );
    assert!(
        out.contains("pids 30"),
        "the container's pids cgroup: {out}"
    );
}

#[test]
fn a_v1_only_host_gets_limits_updates_freezing_stats_and_a_clean_delete() {
    let mut ctx = Ctx::new("purev1");
    if !ctx.emulate_pure_v1() {
        return;
    }
    let mut b = ctx.bundle(&["sleep", "1000"]);
    b.set("/linux/resources/memory", json!({"limit": 64 << 20}));
    b.set("/linux/resources/pids", json!({"limit": 50}));
    b.set("/linux/resources/cpu", json!({"shares": 512}));
    b.write_config();
    b.create().assert_ok();
    let id = b.id.clone();
    let pid = b.pid();
    let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    // In its cgroup in every v1 hierarchy, by the path the config gives.
    let want = format!("/sprout-test/{id}");
    let v1: Vec<&str> = cg.lines().filter(|l| !l.starts_with("0::")).collect();
    assert!(v1.len() >= 4, "v1 hierarchies of the init: {cg}");
    for l in &v1 {
        assert!(l.ends_with(&want), "{l} does not end with {want} ({cg})");
    }
    // In the caller's cgroup2 cgroup still: nothing was written to a hierarchy the runtime
    // could not see.
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    let v2 = |s: &str| s.lines().find(|l| l.starts_with("0::")).map(str::to_string);
    assert_eq!(v2(&cg), v2(&own), "the init's cgroup2 line");
    let dirs: Vec<PathBuf> = ["memory", "pids", "cpu", "freezer"]
        .iter()
        .map(|c| v1_dir(&cg, c))
        .collect();
    let (mem, pids, cpu, freezer) = (&dirs[0], &dirs[1], &dirs[2], &dirs[3]);
    assert_eq!(
        read(mem, "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    assert_eq!(read(pids, "pids.max"), "50");
    assert_eq!(read(cpu, "cpu.shares"), "512");

    b.start().assert_ok();
    ctx.rt(&[
        "update",
        "--memory",
        &(32u64 << 20).to_string(),
        "--pids-limit",
        "40",
        &id,
    ])
    .assert_ok();
    assert_eq!(
        read(mem, "memory.limit_in_bytes"),
        (32u64 << 20).to_string()
    );
    assert_eq!(read(pids, "pids.max"), "40");

    ctx.rt(&["pause", &id]).assert_ok();
    assert_eq!(read(freezer, "freezer.state"), "FROZEN");
    assert_eq!(ctx.status(&id).as_deref(), Some("paused"));
    ctx.rt(&["resume", &id]).assert_ok();
    assert_eq!(read(freezer, "freezer.state"), "THAWED");
    assert_eq!(ctx.status(&id).as_deref(), Some("running"));

    let stats = ctx.rt(&["events", "--stats", &id]);
    stats.assert_ok();
    let d = &stats.json()["data"];
    assert_eq!(d["memory"]["usage"]["limit"], json!(32u64 << 20), "{d}");
    assert!(d["memory"]["usage"]["usage"].as_u64() > Some(0), "{d}");
    assert_eq!(d["pids"]["current"], json!(1), "{d}");
    assert_eq!(d["pids"]["limit"], json!(40), "{d}");

    ctx.rt(&["kill", &id, "KILL"]).assert_ok();
    ctx.wait_status(&id, "stopped");
    ctx.rt(&["delete", &id]).assert_ok();
    let left: Vec<String> = v1
        .iter()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            // `name=systemd` is mounted at /sys/fs/cgroup/systemd.
            let mnt = ctrls.split(',').next()?.trim_start_matches("name=");
            let d = Path::new("/sys/fs/cgroup")
                .join(mnt)
                .join(path.trim_start_matches('/'));
            d.exists().then(|| d.display().to_string())
        })
        .collect();
    assert!(left.is_empty(), "left after delete: {left:?}");
}
