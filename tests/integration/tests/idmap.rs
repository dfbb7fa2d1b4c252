//! Id-mapped bind mounts (runtime-spec 1.3: a mount's `uidMappings`/`gidMappings`, the options
//! `idmap` and `ridmap`), on real containers, after runc's tests/integration/idmap.bats: a file
//! owned on disk by `containerID + n` is seen through the mount as `hostID + n` (as the
//! container's own user namespace then shows it). Needs root and a filesystem that supports
//! id-mapped mounts (ext4, xfs, btrfs, tmpfs on kernel ≥ 6.3); skipped with the reason
//! otherwise.

use serde_json::{json, Value};
use sprout_integration_tests::*;
use std::fs;
use std::os::unix::fs::{chown, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

fn sh<'a>(ctx: &'a Ctx, script: &str) -> Bundle<'a> {
    ctx.bundle(&["sh", "-c", script])
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

fn maps(c: u32, h: u32, n: u32) -> Value {
    json!([{"containerID": c, "hostID": h, "size": n}])
}

/// `dir` with files owned by (uid, gid) each: `name -> (uid, gid)`.
fn source(ctx: &Ctx, name: &str, files: &[(&str, u32, u32)]) -> PathBuf {
    let dir = ctx.scratch(name);
    for (f, u, g) in files {
        fs::write(dir.join(f), "x").unwrap();
        chown(dir.join(f), Some(*u), Some(*g)).unwrap();
    }
    dir
}

fn stat_script(paths: &[&str]) -> String {
    format!("for f in {}; do stat -c %n=%u:%g $f; done", paths.join(" "))
}

/// The kernel and the scratch filesystem support id-mapped mounts: `None`, or why not.
fn unsupported(ctx: &Ctx) -> Option<String> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .trim()
        .split(['.', '-'])
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    if (major, minor) < (5, 12) {
        return Some(format!("kernel {release} predates id-mapped mounts (5.12)"));
    }
    // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
    if unsafe { libc::geteuid() } != 0 {
        return Some("id-mapped mounts need root".into());
    }
    let probe = ctx.scratch("probe");
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(&probe)
        .output()
        .ok()?;
    let fstype = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let ok = ["ext2/ext3", "ext4", "xfs", "btrfs", "tmpfs"];
    (!ok.contains(&fstype.as_str())).then(|| {
        format!("the scratch filesystem ({fstype}) is not known to support id-mapped mounts")
    })
}

macro_rules! require_idmap {
    ($ctx:expr) => {
        if let Some(why) = unsupported(&$ctx) {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

fn bind(dest: &str, src: &Path, opts: &[&str]) -> Value {
    json!({"destination": dest, "type": "bind", "source": src.to_str().unwrap(), "options": opts})
}

/// No user namespace: the mount alone maps on-disk 0.. to 100000.., a plain bind of the same
/// directory still shows the on-disk owners, and root (uid 0, unmapped in the mount) cannot
/// create a file there (EOVERFLOW, as with runc).
#[test]
fn idmapped_bind_without_a_user_namespace_shows_the_mapped_owners() {
    let ctx = Ctx::new("idmapplain");
    require_idmap!(ctx);
    let src = source(&ctx, "src", &[("a", 0, 0), ("b", 1, 1), ("c", 100, 211)]);
    let mut b = sh(
        &ctx,
        &(stat_script(&["/m/a", "/m/b", "/m/c", "/plain/c"])
            + "; touch /m/new 2>/dev/null && echo CREATED || echo refused"),
    );
    let mut m = bind("/m", &src, &["bind"]);
    m["uidMappings"] = maps(0, 100000, 65536);
    m["gidMappings"] = maps(0, 100000, 65536);
    b.add_mount(m);
    b.add_mount(bind("/plain", &src, &["bind"]));
    let o = b.run();
    o.assert_ok();
    assert_eq!(
        lines(&o.stdout),
        vec![
            "/m/a=100000:100000",
            "/m/b=100001:100001",
            "/m/c=100100:100211",
            "/plain/c=100:211",
            "refused"
        ],
        "{}",
        o.describe()
    );
    assert!(!src.join("new").exists());
    // The host's view of the source is unchanged.
    assert_eq!(fs::metadata(src.join("c")).unwrap().uid(), 100);
}

/// In a user namespace mapping 0 → 100000: through a mount with the same mapping the files
/// show their on-disk owners, a plain bind shows them unmapped (the overflow id), and a file
/// the container's root creates through the mount is owned by 0 on disk.
#[test]
fn idmapped_bind_in_a_user_namespace_round_trips_the_owners() {
    let ctx = Ctx::new("idmapuserns");
    require_idmap!(ctx);
    let src = source(&ctx, "src", &[("a", 0, 0), ("b", 1, 1)]);
    let overflow = fs::read_to_string("/proc/sys/kernel/overflowuid").unwrap();
    let mut b = sh(
        &ctx,
        &(stat_script(&["/m/a", "/m/b", "/plain/a"]) + "; touch /m/new && stat -c %n=%u:%g /m/new"),
    );
    let mut m = bind("/m", &src, &["bind"]);
    m["uidMappings"] = maps(0, 100000, 65536);
    m["gidMappings"] = maps(0, 100000, 65536);
    b.add_mount(m);
    b.add_mount(bind("/plain", &src, &["bind"]));
    b.in_user_namespace(100000, 100000);
    let o = b.run();
    o.assert_ok();
    let ov = overflow.trim();
    assert_eq!(
        lines(&o.stdout),
        vec![
            "/m/a=0:0".to_string(),
            "/m/b=1:1".to_string(),
            format!("/plain/a={ov}:{ov}"),
            "/m/new=0:0".to_string()
        ],
        "{}",
        o.describe()
    );
    let md = fs::metadata(src.join("new")).unwrap();
    assert_eq!(
        (md.uid(), md.gid()),
        (0, 0),
        "created through the id-mapped mount"
    );
}

/// `idmap` without mappings of its own uses the container's user namespace; the same source
/// mounted twice with different mappings shows different owners (one user namespace per
/// mapping); twelve mounts with one mapping share one (and leave no fd behind: the container
/// runs with RLIMIT_NOFILE 16).
#[test]
fn idmap_option_and_many_mappings() {
    let ctx = Ctx::new("idmapmany");
    require_idmap!(ctx);
    let src = source(&ctx, "src", &[("f", 100, 211)]);
    let mut paths = vec!["/own/f".to_string(), "/alt/f".to_string()];
    let mut b = sh(&ctx, "");
    b.add_mount(bind("/own", &src, &["rbind", "idmap"]));
    let mut alt = bind("/alt", &src, &["bind", "ro"]);
    alt["uidMappings"] = maps(100, 101000, 1000);
    alt["gidMappings"] = maps(200, 102000, 1000);
    b.add_mount(alt);
    for k in 0..12 {
        let d = format!("/same{k}");
        let mut m = bind(&d, &src, &["bind"]);
        m["uidMappings"] = maps(0, 100000, 65536);
        m["gidMappings"] = maps(0, 100000, 65536);
        b.add_mount(m);
        paths.push(format!("{d}/f"));
    }
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    b.set(
        "/process/args",
        json!([
            "sh",
            "-c",
            stat_script(&refs) + "; ls /proc/self/fd | wc -l"
        ]),
    );
    b.set(
        "/process/rlimits",
        json!([{"type": "RLIMIT_NOFILE", "soft": 16, "hard": 16}]),
    );
    b.in_user_namespace(100000, 100000);
    let o = b.run();
    o.assert_ok();
    let l = lines(&o.stdout);
    assert_eq!(l[0], "/own/f=100:211", "{}", o.describe());
    // on disk 100:211 → host 101000:102011 → in the container 1000:2011.
    assert_eq!(l[1], "/alt/f=1000:2011", "{}", o.describe());
    for (k, line) in l[2..14].iter().enumerate() {
        assert_eq!(*line, format!("/same{k}/f=100:211"), "{}", o.describe());
    }
    let fds: u32 = l[14].trim().parse().unwrap();
    assert!(
        fds <= 5,
        "the container's shell has {fds} fds open: {}",
        o.describe()
    );
}

/// `rbind` with a mapping id-maps the top mount only; `ridmap` every mount of the tree.
#[test]
fn ridmap_maps_the_submounts_too() {
    let ctx = Ctx::new("idmaprec");
    require_idmap!(ctx);
    let src = source(&ctx, "tree", &[("top", 1, 1)]);
    let sub = src.join("sub");
    fs::create_dir(&sub).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "sprout-itest-idmap"])
        .arg(&sub)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs on {}", sub.display());
    let _guard = DetachOnDrop(sub.clone());
    fs::write(sub.join("low"), "x").unwrap();
    chown(sub.join("low"), Some(5), Some(5)).unwrap();
    let mut b = sh(
        &ctx,
        &stat_script(&["/top/top", "/top/sub/low", "/rec/top", "/rec/sub/low"]),
    );
    for (dest, opts) in [("/top", ["rbind"]), ("/rec", ["ridmap"])] {
        let mut o = opts.to_vec();
        o.push("rbind");
        let mut m = bind(dest, &src, &o);
        m["uidMappings"] = maps(0, 100000, 65536);
        m["gidMappings"] = maps(0, 100000, 65536);
        b.add_mount(m);
    }
    let o = b.run();
    o.assert_ok();
    assert_eq!(
        lines(&o.stdout),
        vec![
            "/top/top=100001:100001",
            "/top/sub/low=5:5",
            "/rec/top=100001:100001",
            "/rec/sub/low=100005:100005"
        ],
        "{}",
        o.describe()
    );
}

/// What runc refuses, refused at create with one line naming the mount, nothing left behind:
/// a mapping on a non-bind mount, `idmap` with neither mappings nor a user namespace, one
/// map without the other.
#[test]
fn idmapped_mount_errors_name_the_mount_and_leave_nothing() {
    let ctx = Ctx::new("idmaperr");
    let src = ctx.scratch("src");
    let cases: Vec<(Value, &[&str])> = vec![
        (
            json!({"destination": "/t", "type": "tmpfs", "source": "tmpfs",
                "uidMappings": maps(0, 100000, 10), "gidMappings": maps(0, 100000, 10)}),
            &["mounts[", "only supported for bind mounts"],
        ),
        (
            bind("/t", &src, &["bind", "idmap"]),
            &["mounts[", "user namespace"],
        ),
        (
            {
                let mut m = bind("/t", &src, &["bind"]);
                m["uidMappings"] = maps(0, 100000, 10);
                m
            },
            &["gidMappings", "both"],
        ),
    ];
    for (m, words) in cases {
        let mut b = sh(&ctx, "true");
        b.add_mount(m);
        let o = b.create();
        o.assert_fail();
        o.assert_one_line_error(words);
        ctx.assert_no_trace(&o, &b, &[], None);
    }
}

/// `features` says id-mapped mounts work and lists the options.
#[test]
fn features_report_idmap() {
    let ctx = Ctx::new("idmapfeat");
    let o = ctx.rt(&["features"]);
    o.assert_ok();
    let v = o.json();
    assert_eq!(
        v["linux"]["mountExtensions"]["idmap"]["enabled"],
        json!(true)
    );
    let opts = v["mountOptions"].as_array().unwrap();
    assert!(opts.contains(&json!("idmap")) && opts.contains(&json!("ridmap")));
}

/// runc's mounts.bats "[mount order, container idmap source]": an id-mapped bind whose source is
/// inside the rootfs, on a mount an earlier entry makes, is cloned when the init reaches it (in
/// the container's mount namespace), with and without a user namespace; and a symlink of the
/// image on the way to such a source is followed inside the rootfs, never to the host's files.
/// Before: "cloning <rootfs>/mnt: No such file or directory" (cloned before the earlier mount).
#[test]
fn idmapped_source_inside_the_rootfs_on_an_earlier_mount() {
    let ctx = Ctx::new("idmaplate");
    require_idmap!(ctx);
    for userns in [false, true] {
        let src = source(&ctx, &format!("late{userns}"), &[("a", 0, 0), ("b", 1, 1)]);
        let mut b = sh(&ctx, &stat_script(&["/mnt/a", "/final/a", "/final/b"]));
        fs::create_dir_all(b.rootfs().join("mnt")).unwrap();
        fs::create_dir_all(b.rootfs().join("final")).unwrap();
        b.add_mount(bind("/mnt", &src, &["rbind"]));
        let inside = b.rootfs().join("mnt");
        let mut m = bind("/final", &inside, &["rbind", "idmap"]);
        if !userns {
            m["uidMappings"] = maps(0, 100000, 65536);
            m["gidMappings"] = maps(0, 100000, 65536);
        }
        b.add_mount(m);
        let want = if userns {
            b.in_user_namespace(100000, 100000);
            // Through the container's own mapping: the on-disk owners; the plain bind shows
            // them unmapped.
            let ov = fs::read_to_string("/proc/sys/kernel/overflowuid").unwrap();
            let ov = ov.trim().to_string();
            vec![
                format!("/mnt/a={ov}:{ov}"),
                "/final/a=0:0".into(),
                "/final/b=1:1".into(),
            ]
        } else {
            vec![
                "/mnt/a=0:0".to_string(),
                "/final/a=100000:100000".into(),
                "/final/b=100001:100001".into(),
            ]
        };
        let o = b.run();
        o.assert_ok();
        assert_eq!(lines(&o.stdout), want, "userns {userns}: {}", o.describe());
    }

    // A symlink in the image on the source's path points at "/": followed inside the rootfs (its
    // own /etc), not to the host's /etc.
    let mut b = sh(&ctx, "cat /final/marker");
    let root = b.rootfs();
    fs::create_dir_all(root.join("final")).unwrap();
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("etc/marker"), "rootfs\n").unwrap();
    let _ = fs::remove_file(root.join("escape"));
    std::os::unix::fs::symlink("/", root.join("escape")).unwrap();
    let mut m = bind("/final", &root.join("escape/etc"), &["rbind"]);
    m["uidMappings"] = maps(0, 100000, 65536);
    m["gidMappings"] = maps(0, 100000, 65536);
    b.add_mount(m);
    let o = b.run();
    o.assert_ok();
    assert_eq!(o.stdout, "rootfs\n", "{}", o.describe());
}
