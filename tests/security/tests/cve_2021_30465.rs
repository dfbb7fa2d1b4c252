//! CVE-2021-30465: a mount destination that is (or, racing, becomes) a symlink pointing out of
//! the rootfs. The runtime must resolve every destination inside the rootfs (the symlink is
//! followed as if the rootfs were "/"), or fail; the host path must never receive the mount.
//!
//! Two views are checked: on the host, the target path is empty and unmounted (with
//! `rootfsPropagation: rshared`, a mount that landed on a host path in the container's mount
//! namespace would propagate back to the host and show up in our mountinfo); inside the
//! container, the mount is where the symlink leads *within* the rootfs.

use serde_json::json;
use sprout_security_tests::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn host_untouched(target: &Path) -> Result<(), String> {
    let t = target.to_string_lossy().to_string();
    let mounted: Vec<String> = mount_points()
        .into_iter()
        .filter(|m| m == &t || m.starts_with(&format!("{t}/")))
        .collect();
    if !mounted.is_empty() {
        return Err(format!("host path {t} has mounts: {mounted:?}"));
    }
    let entries: Vec<String> = fs::read_dir(target)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !entries.is_empty() {
        return Err(format!("host path {t} was written to: {entries:?}"));
    }
    Ok(())
}

/// Lazily unmount whatever propagated under our own bundle (rshared runs only), so the bundle
/// can be removed. Only paths below this test's own scratch dir are touched.
fn unmount_below(dir: &Path) {
    let d = dir.to_string_lossy().to_string();
    let mut ms: Vec<String> = mount_points()
        .into_iter()
        .filter(|m| m.starts_with(&format!("{d}/")))
        .collect();
    ms.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in ms {
        let c = std::ffi::CString::new(m).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

struct Case<'a> {
    b: Bundle<'a>,
    host_target: PathBuf,
    src: PathBuf,
}

/// A bundle whose rootfs has `link` (a path in the rootfs) as a symlink to `to`, plus a bind
/// mount of a host dir holding a marker file, and a tmpfs, both with destinations through the link.
fn case<'a>(
    ctx: &'a Ctx,
    link: &str,
    to: &dyn Fn(&Path) -> String,
    dests: &[&str],
    shared: bool,
) -> Case<'a> {
    let host_target = ctx.scratch("host-target");
    let src = ctx.scratch("src");
    fs::write(src.join("marker"), "from-the-bind-source").unwrap();
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "cat /proc/self/mountinfo; echo ===; for d in $DESTS; do ls -a $d; done",
    ]);
    let l = b.rootfs().join(link.trim_start_matches('/'));
    fs::create_dir_all(l.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(to(&host_target), &l).unwrap();
    for (i, d) in dests.iter().enumerate() {
        if i % 2 == 0 {
            b.add_mount(json!({"destination": d, "type": "bind", "source": src.to_string_lossy(), "options": ["rbind", "rw"]}));
        } else {
            b.add_mount(json!({"destination": d, "type": "tmpfs", "source": "tmpfs", "options": ["size=1234k"]}));
        }
    }
    b.add_env(&format!("DESTS={}", dests.join(" ")));
    if shared {
        b.set("/linux/rootfsPropagation", json!("rshared"));
    }
    Case {
        b,
        host_target,
        src,
    }
}

fn check(c: &Case, what: &str) {
    let o = c.b.run();
    let after = host_untouched(&c.host_target);
    unmount_below(&c.b.dir);
    unmount_below(&c.src);
    if let Err(e) = after {
        panic!("{what}: mount escaped the rootfs: {e}{}", o.describe());
    }
    if o.ok() {
        // It ran: the marker must be visible through the destination inside the container.
        let listing = o.stdout.split("===").nth(1).unwrap_or("");
        assert!(listing.contains("marker"), "{what}: container ran but the bind mount is not at its destination inside the rootfs:{}", o.describe());
    } else {
        eprintln!("{what}: refused: {}", o.stderr.trim());
    }
}

#[test]
fn absolute_symlink_destination() {
    let ctx = Ctx::new("30465abs");
    let c = case(
        &ctx,
        "/mnt",
        &|t| t.to_string_lossy().into_owned(),
        &["/mnt", "/mnt/sub"],
        false,
    );
    check(&c, "rootfs/mnt -> <host dir> (absolute)");
}

#[test]
fn relative_dotdot_symlink_destination() {
    let ctx = Ctx::new("30465rel");
    let c = case(
        &ctx,
        "/mnt",
        &|t| format!("../../../../../../../../../..{}", t.display()),
        &["/mnt", "/mnt/sub"],
        false,
    );
    check(&c, "rootfs/mnt -> ../../..<host dir>");
}

#[test]
fn symlinked_parent_to_host_root() {
    let ctx = Ctx::new("30465par");
    let c = case(&ctx, "/a", &|_| "/".to_string(), &[], false);
    // The destination walks through rootfs/a -> / into the host target's path.
    let ht = c.host_target.to_string_lossy().into_owned();
    let mut c = c;
    let d1 = format!("/a{ht}");
    let d2 = format!("/a{ht}/t");
    c.b.add_mount(json!({"destination": d1, "type": "bind", "source": c.src.to_string_lossy(), "options": ["rbind", "rw"]}));
    c.b.add_mount(
        json!({"destination": d2, "type": "tmpfs", "source": "tmpfs", "options": ["size=1234k"]}),
    );
    c.b.add_env(&format!("DESTS={d1}"));
    check(&c, "rootfs/a -> / then /a/<host dir>");
}

#[test]
fn absolute_symlink_destination_rshared() {
    let ctx = Ctx::new("30465shr");
    let c = case(
        &ctx,
        "/mnt",
        &|t| t.to_string_lossy().into_owned(),
        &["/mnt", "/mnt/sub"],
        true,
    );
    check(&c, "rootfs/mnt -> <host dir>, rootfsPropagation rshared");
}

/// "Becomes" a symlink: a host thread keeps swapping rootfs/mnt between a directory and a
/// symlink to the host target while containers mount onto /mnt/x (the race of the original
/// exploit, which used a shared volume). rshared so any landing on the host would be seen.
#[test]
fn racing_symlink_swap() {
    let ctx = Ctx::new("30465race");
    let iters: usize = std::env::var("SECTEST_RACE_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    let host_target = ctx.scratch("host-target");
    let src = ctx.scratch("src");
    fs::write(src.join("marker"), "x").unwrap();
    let mut escaped = Vec::new();
    let (mut ran, mut refused) = (0, 0);
    for i in 0..iters {
        let mut b = ctx.bundle(&["true"]);
        for k in 0..8 {
            b.add_mount(json!({"destination": format!("/mnt/x{k}"), "type": "bind", "source": src.to_string_lossy(), "options": ["rbind", "rw"]}));
        }
        b.set("/linux/rootfsPropagation", json!("rshared"));
        let mnt = b.rootfs().join("mnt");
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, m2, t2) = (stop.clone(), mnt.clone(), host_target.clone());
        let flipper = std::thread::spawn(move || {
            let dir_tmp = m2.with_file_name("mnt.dir");
            let link_tmp = m2.with_file_name("mnt.link");
            let mut n = 0u64;
            while !s2.load(Ordering::Relaxed) {
                let _ = fs::remove_dir_all(&dir_tmp);
                let _ = fs::remove_file(&link_tmp);
                if n.is_multiple_of(2) {
                    let _ = std::os::unix::fs::symlink(&t2, &link_tmp);
                    let _ = fs::rename(&link_tmp, &m2);
                } else if fs::create_dir(&dir_tmp).is_ok() {
                    let _ = fs::remove_file(&m2);
                    let _ = fs::rename(&dir_tmp, &m2);
                }
                n += 1;
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        let o = b.run();
        stop.store(true, Ordering::Relaxed);
        flipper.join().unwrap();
        if o.ok() {
            ran += 1
        } else {
            refused += 1
        }
        if let Err(e) = host_untouched(&host_target) {
            escaped.push(format!("iteration {i}: {e}"));
        }
        unmount_below(&b.dir);
        unmount_below(&src);
        // The flipper may have left a symlink to the host target: remove it before cleanup.
        let _ = fs::remove_file(&mnt);
    }
    eprintln!("race: {iters} runs, {ran} ran, {refused} refused");
    assert!(
        escaped.is_empty(),
        "mount landed on the host path: {escaped:?}"
    );
}

/// root.path with '..' components or through a symlink: followed as the host's admin wrote it
/// (it is the bundle author's choice), but a root.path that resolves to the host's "/" must be
/// refused, and mounts still land inside the resolved rootfs.
#[test]
fn root_path_dotdot_and_symlink() {
    let ctx = Ctx::new("30465root");
    // rootfs reached through '..': bundle/x/../rootfs
    let mut b = ctx.bundle(&["sh", "-c", "test -d /proc/self && ls /"]);
    fs::create_dir_all(b.dir.join("x")).unwrap();
    b.set("/root/path", json!("x/../rootfs"));
    let o = b.run();
    o.assert_ok();
    assert!(o.stdout.contains("bin"), "{}", o.describe());

    // rootfs as a symlink to a rootfs elsewhere.
    let mut b2 = ctx.bundle(&["true"]);
    let real = b2.dir.join("real-rootfs");
    fs::rename(b2.rootfs(), &real).unwrap();
    std::os::unix::fs::symlink("real-rootfs", b2.dir.join("rootfs")).unwrap();
    b2.set("/root/path", json!("rootfs"));
    // runc refuses a symlinked rootfs ("invalid rootfs: not an absolute path, or a symlink");
    // either answer is safe as long as a run leaves nothing outside the real rootfs.
    let before = mount_snapshot();
    let o = b2.run();
    eprintln!(
        "root.path through a symlink: {}",
        if o.ok() {
            "ran".to_string()
        } else {
            format!("refused: {}", o.stderr.trim())
        }
    );
    assert!(new_host_mount_points(&before).is_empty());
    // Undo so the Bundle guard removes a normal tree.
    fs::remove_file(b2.dir.join("rootfs")).unwrap();
    fs::rename(&real, b2.rootfs()).unwrap();

    // Resolving to the host's root: by '..' and by a symlink.
    for (label, path) in [
        ("dotdot", "rootfs/../../../../../../../../../../.."),
        ("symlink", "hostroot"),
    ] {
        let mut b3 = ctx.bundle(&["true"]);
        b3.config["mounts"] = json!([]);
        let _ = std::os::unix::fs::symlink("/", b3.dir.join("hostroot"));
        b3.set("/root/path", json!(path));
        let before = mount_snapshot();
        let o = b3.run();
        let _ = fs::remove_file(b3.dir.join("hostroot"));
        let new = new_host_mount_points(&before);
        assert!(
            new.is_empty(),
            "root.path {label}: host mounts appeared: {new:?}"
        );
        assert!(!o.ok(), "root.path {path:?} ({label}) resolves to the host's / and was accepted (a container whose rootfs is the host's root):{}", o.describe());
    }
}
