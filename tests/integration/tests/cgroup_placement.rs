//! Where a container's cgroup goes, and what the runtime may write on the way (issue #12):
//! - the caller's cgroup and its parent are never changed (type, subtree_control), whatever
//!   the container's path: no cgroupsPath, a relative path, a nested relative path;
//! - a nested relative path gets the controllers its limits need on the directories the
//!   runtime made (and only there), and `delete` removes exactly those.
//!
//! On a pure cgroup v2 host the caller usually sits in a systemd scope (a login session): a
//! relative path then goes beside the scope, in its slice, as runc places it. On a hybrid host
//! the v1 hierarchies carry the limits and the cgroup2 leaf only tracks processes.

use serde_json::json;
use sprout_integration_tests::*;
use std::fs;
use std::path::{Path, PathBuf};

const CG: &str = "/sys/fs/cgroup";

fn pure_v2() -> bool {
    Path::new(CG).join("cgroup.controllers").exists()
}

/// Where cgroup2 is mounted: /sys/fs/cgroup on pure v2, /sys/fs/cgroup/unified on hybrid.
fn v2_mount() -> PathBuf {
    if pure_v2() {
        PathBuf::from(CG)
    } else {
        Path::new(CG).join("unified")
    }
}

/// This process's cgroup2 directory (pure v2: under /sys/fs/cgroup; hybrid: under unified/).
fn own_v2_dir() -> Option<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let p = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    v2_mount()
        .join(p.trim_start_matches('/'))
        .canonicalize()
        .ok()
        .filter(|d| d.join("cgroup.procs").exists())
}

/// (path, cgroup.type, cgroup.subtree_control) of the caller's cgroup and of its parent.
fn snapshot(own: &Path) -> Vec<(PathBuf, String, String)> {
    let mut dirs = vec![own.to_path_buf()];
    if let Some(p) = own.parent().filter(|p| p.join("cgroup.procs").exists()) {
        dirs.push(p.to_path_buf());
    }
    dirs.into_iter()
        .map(|d| {
            let r = |f: &str| fs::read_to_string(d.join(f)).unwrap_or_default();
            (d.clone(), r("cgroup.type"), r("cgroup.subtree_control"))
        })
        .collect()
}

/// The container init's cgroup directory for `controller` ("pids") as the host sees it: the
/// v1 hierarchy where that controller is mounted, else the cgroup2 directory.
fn init_cgroup_dir(pid: i32, controller: &str) -> PathBuf {
    let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("/proc/<pid>/cgroup");
    for l in cg.lines() {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        if ctrls.split(',').any(|c| c == controller) {
            return Path::new(CG)
                .join(controller)
                .join(path.trim_start_matches('/'));
        }
    }
    let p = cg
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a 0:: line");
    v2_mount().join(p.trim_start_matches('/'))
}

fn check_untouched(before: &[(PathBuf, String, String)], own: &Path, what: &str) {
    let after = snapshot(own);
    assert_eq!(
        before, after,
        "{what}: the caller's cgroup (or its parent) changed: (dir, cgroup.type, \
         cgroup.subtree_control) before {before:?}, after {after:?}"
    );
}

#[test]
fn callers_cgroup_is_never_changed() {
    let Some(own) = own_v2_dir() else {
        eprintln!("SKIP: no cgroup2 directory for this process");
        return;
    };
    let before = snapshot(&own);
    let ctx = Ctx::new("cg_untouched");
    for (label, path) in [
        ("no cgroupsPath", None),
        ("relative cgroupsPath", Some("rel")),
        ("nested relative cgroupsPath", Some("nest")),
    ] {
        let mut b = ctx.bundle(&["sh", "-c", "cat /proc/self/cgroup"]);
        match path {
            None => {
                b.config["linux"]
                    .as_object_mut()
                    .expect("config.linux")
                    .remove("cgroupsPath");
            }
            Some("rel") => {
                b.set("/linux/cgroupsPath", json!(format!("sprout-test/{}", b.id)));
            }
            Some(_) => {
                b.set(
                    "/linux/cgroupsPath",
                    json!(format!("sprout-test/n{}/a/b/{}", b.id, b.id)),
                );
            }
        }
        b.write_config();
        b.run().assert_ok();
        check_untouched(&before, &own, label);
        b.delete();
        check_untouched(&before, &own, label);
    }
}

/// A nested relative path whose directories the runtime makes itself: pids.max is set on the
/// leaf (the controller enabled on the way down, on the runtime's own directories only), and
/// `delete` removes the whole chain it made.
#[test]
fn nested_relative_path_gets_its_limits() {
    let Some(own) = own_v2_dir() else {
        eprintln!("SKIP: no cgroup2 directory for this process");
        return;
    };
    let before = snapshot(&own);
    let ctx = Ctx::new("cg_nested");
    let mut b = ctx.bundle(&["sleep", "1000"]);
    let top = format!("n{}", b.id);
    b.set(
        "/linux/cgroupsPath",
        json!(format!("sprout-test/{top}/a/b/{}", b.id)),
    );
    b.set("/linux/resources/pids", json!({"limit": 17}));
    b.write_config();
    let out = b.create();
    if !out.ok() && pure_v2() {
        // The only acceptable failure: the caller's slice does not delegate pids to us, said
        // in one line naming the field.
        out.assert_one_line_error(&["pids", "subtree_control"]);
        check_untouched(&before, &own, "failed create");
        eprintln!(
            "SKIP: pids is not delegated to the caller's slice here: {}",
            out.stderr
        );
        return;
    }
    out.assert_ok();
    let pid = b.pid();
    let dir = init_cgroup_dir(pid, "pids");
    assert!(
        dir.ends_with(format!("sprout-test/{top}/a/b/{}", b.id)),
        "the init's pids cgroup {dir:?} should end with the nested path"
    );
    assert_eq!(
        fs::read_to_string(dir.join("pids.max")).unwrap().trim(),
        "17",
        "pids.max of {dir:?}"
    );
    check_untouched(&before, &own, "nested create");
    let top_dir = dir.ancestors().nth(3).unwrap().to_path_buf();
    assert!(top_dir.ends_with(&top), "{top_dir:?}");
    ctx.rt(&["delete", "--force", &b.id]).assert_ok();
    assert!(
        !top_dir.exists(),
        "delete should remove the chain it made ({top_dir:?} is still there)"
    );
    check_untouched(&before, &own, "nested delete");
}
