//! sprout as an unprivileged user (issue #12, rootless): `spec --rootless` then `run`, the
//! way `runc spec --rootless && runc run` is used.
//!
//! - a uid with no account (setpriv): the default `--root` is `$XDG_RUNTIME_DIR/sprout`
//!   (made 0700 + sticky), the single mapping of the caller's own id is written directly
//!   (setgroups denied first), and the container runs as root of its user namespace;
//! - a user with a range in /etc/subuid and /etc/subgid (the first one found; skipped when
//!   there is none or no newuidmap): maps of more than its own id go through
//!   newuidmap/newgidmap.
//!
//! Needs setpriv (util-linux) and /bin/busybox; runs as root (to switch users).

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use sprout_integration_tests::runtime_bin;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn busybox_rootfs(root: &Path) {
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for a in ["sh", "id", "cat"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(a)).unwrap();
    }
    for d in ["proc", "sys", "dev", "tmp"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
}

/// Run the runtime as `uid:gid` (no supplementary groups) in `cwd` with `xdg` as
/// XDG_RUNTIME_DIR.
fn as_user(uid: u32, gid: u32, cwd: &Path, xdg: &Path, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(runtime_bin())
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("XDG_RUNTIME_DIR", xdg)
        .output()
        .expect("run setpriv")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A bundle owned by `uid` with `spec --rootless`'s config and `args`; the config is passed
/// through `edit` first.
fn rootless_bundle(
    top: &Path,
    uid: u32,
    gid: u32,
    xdg: &Path,
    args: &[&str],
    edit: impl FnOnce(&mut Value),
) -> PathBuf {
    let b = top.join(format!("bundle-{uid}"));
    fs::create_dir_all(&b).unwrap();
    busybox_rootfs(&b.join("rootfs"));
    chown(&b, Some(uid), Some(gid)).unwrap();
    let o = as_user(uid, gid, &b, xdg, &["spec", "--rootless"]);
    assert!(o.status.success(), "spec --rootless: {}", text(&o));
    let p = b.join("config.json");
    let mut v: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    assert_eq!(
        v["linux"]["uidMappings"],
        json!([{"containerID": 0, "hostID": uid, "size": 1}])
    );
    v["process"]["terminal"] = json!(false);
    v["process"]["args"] = json!(args);
    edit(&mut v);
    fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    b
}

fn xdg_dir(top: &Path, uid: u32, gid: u32) -> PathBuf {
    let x = top.join(format!("xdg-{uid}"));
    fs::create_dir_all(&x).unwrap();
    fs::set_permissions(&x, fs::Permissions::from_mode(0o700)).unwrap();
    chown(&x, Some(uid), Some(gid)).unwrap();
    x
}

fn tools_missing() -> Option<&'static str> {
    // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (needed to switch users)");
    }
    if !Path::new("/bin/busybox").exists() {
        return Some("/bin/busybox is missing");
    }
    let ok = Command::new("setpriv").arg("--version").output();
    if !ok.is_ok_and(|o| o.status.success()) {
        return Some("setpriv (util-linux) is missing");
    }
    None
}

fn top_dir(tag: &str) -> Dir {
    let top = PathBuf::from(format!("/tmp/sprout-rootless-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&top);
    fs::create_dir_all(&top).unwrap();
    fs::set_permissions(&top, fs::Permissions::from_mode(0o755)).unwrap();
    Dir(top)
}

#[test]
fn unprivileged_user_runs_spec_rootless_with_its_own_id() {
    if let Some(why) = tools_missing() {
        eprintln!("SKIPPED rootless test: {why}");
        return;
    }
    let top = top_dir("own");
    let (uid, gid) = (64123, 64123);
    let xdg = xdg_dir(&top.0, uid, gid);
    let b = rootless_bundle(
        &top.0,
        uid,
        gid,
        &xdg,
        &[
            "sh",
            "-c",
            "id -u; id -g; cat /proc/self/uid_map /proc/self/setgroups",
        ],
        |_| {},
    );
    let o = as_user(uid, gid, &b, &xdg, &["run", "rl-own"]);
    assert!(o.status.success(), "rootless run: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        words,
        ["0", "0", "0", &uid.to_string(), "1", "deny"],
        "{}",
        text(&o)
    );
    // The default --root: $XDG_RUNTIME_DIR/sprout, 0700 + sticky, empty again.
    let root = xdg.join("sprout");
    let meta = fs::metadata(&root).expect("default root in XDG_RUNTIME_DIR");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o1700);
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0, "state left behind");
    // `list` without --root finds the same place.
    let o = as_user(uid, gid, &b, &xdg, &["list", "-q"]);
    assert!(o.status.success(), "list: {}", text(&o));
}

/// The first account with ranges in both /etc/subuid and /etc/subgid: (uid, gid, sub start).
fn subid_user() -> Option<(u32, u32, u32)> {
    let sub = |f: &str| -> Vec<(String, u32, u32)> {
        fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                let (s, n) = (f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?);
                Some((f[0].to_string(), s, n))
            })
            .collect()
    };
    let gids = sub("/etc/subgid");
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    for (name, start, n) in sub("/etc/subuid") {
        if n < 1000 {
            continue;
        }
        let Some(&(_, gstart, gn)) = gids.iter().find(|g| g.0 == name) else {
            continue;
        };
        if gstart != start || gn < 1000 {
            continue;
        }
        let pw = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.first() == Some(&name.as_str()) && f.len() > 3)?;
        return Some((pw[2].parse().ok()?, pw[3].parse().ok()?, start));
    }
    None
}

#[test]
fn unprivileged_user_maps_a_range_through_newuidmap() {
    if let Some(why) = tools_missing() {
        eprintln!("SKIPPED rootless newuidmap test: {why}");
        return;
    }
    if !["/usr/bin/newuidmap", "/usr/bin/newgidmap"]
        .iter()
        .all(|p| Path::new(p).exists())
    {
        eprintln!(
            "SKIPPED rootless newuidmap test: newuidmap/newgidmap missing (apt-get install uidmap)"
        );
        return;
    }
    let Some((uid, gid, start)) = subid_user() else {
        eprintln!(
            "SKIPPED rootless newuidmap test: no user with ranges in /etc/subuid and /etc/subgid"
        );
        return;
    };
    let top = top_dir("range");
    let xdg = xdg_dir(&top.0, uid, gid);
    let b = rootless_bundle(
        &top.0,
        uid,
        gid,
        &xdg,
        &[
            "sh",
            "-c",
            "cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups",
        ],
        |v| {
            let map = |own: u32| {
                json!([{"containerID": 0, "hostID": own, "size": 1},
                                        {"containerID": 1, "hostID": start, "size": 1000}])
            };
            v["linux"]["uidMappings"] = map(uid);
            v["linux"]["gidMappings"] = map(gid);
        },
    );
    let o = as_user(uid, gid, &b, &xdg, &["run", "rl-range"]);
    assert!(
        o.status.success(),
        "rootless run with a range: {}",
        text(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let words: Vec<String> = out.split_whitespace().map(String::from).collect();
    let want: Vec<String> = [0, uid, 1, 1, start, 1000, 0, gid, 1, 1, start, 1000]
        .iter()
        .map(|n| n.to_string())
        .chain(["allow".to_string()])
        .collect();
    assert_eq!(words, want, "{}", text(&o));
}
