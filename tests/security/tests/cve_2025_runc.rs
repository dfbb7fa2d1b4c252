//! runc's escapes of November 2025, tried against sprout. Each redirects one of the runtime's
//! own mounts or writes through a file the container controls:
//!
//! - CVE-2025-31133: masked paths are masked by binding the container's /dev/null over them.
//!   Where /dev is the image's (no /dev tmpfs in the config) or a shared volume, /dev/null can
//!   be a symlink to a host-wide procfs file (kernel.core_pattern): the bind then puts that
//!   file, writable, where a masked path was. A missing /dev/null left the paths unmasked.
//! - CVE-2025-52565: the same through /dev/console, over which the runtime binds the pty.
//! - CVE-2025-52881: the runtime's writes to /proc (sysctls, oom_score_adj, LSM labels) go to
//!   whatever is mounted over the file: a decoy here, /proc/sysrq-trigger in the advisory.
//!
//! No test writes to a host-wide file: where the runtime would have bound one, the container
//! only reads it back, and the assertions are on the runtime's refusal and on decoy files.

use serde_json::json;
use sprout_security_tests::*;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// A bundle whose config mounts no /dev: the rootfs's own /dev is the container's, as with an
/// image that brings its /dev (or a volume there).
fn image_dev_bundle<'a>(ctx: &'a Ctx, script: &str) -> Bundle<'a> {
    let mut b = ctx.bundle(&["sh", "-c", script]);
    b.set(
        "/mounts",
        json!([
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]}
        ]),
    );
    let dev = b.rootfs().join("dev");
    fs::create_dir_all(&dev).unwrap();
    for e in fs::read_dir(&dev).unwrap().flatten() {
        let _ = fs::remove_file(e.path());
    }
    b
}

/// `o` failed with one line naming every one of `words` (case-insensitive).
fn assert_error_names(o: &Output, words: &[&str]) {
    o.assert_one_line_error(words);
    let low = o.stderr.to_lowercase();
    for w in words {
        assert!(
            low.contains(&w.to_lowercase()),
            "the error does not name {w:?}: {}",
            o.describe()
        );
    }
}

fn mknod_dev(path: &std::path::Path, major: u32, minor: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mknod reads the NUL-terminated `c`, alive for the call.
    let r = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(r, 0, "mknod {}", path.display());
}

fn mknod_null(path: &std::path::Path) {
    mknod_dev(path, 1, 3);
}

const MASK_PROBE: &str = "stat -c '%t:%T %i' /proc/timer_list; head -c 64 /proc/timer_list | wc -c";

/// CVE-2025-31133: /dev/null a symlink to /proc/sys/kernel/core_pattern. runc before 1.2.8
/// bound core_pattern over /proc/timer_list, writable (an escape through the core dump
/// helper); sprout must refuse to start, naming the masked path and /dev/null.
#[test]
fn masked_path_through_a_dev_null_symlink_is_refused() {
    let ctx = Ctx::new("c31133-link");
    let b = image_dev_bundle(&ctx, MASK_PROBE);
    std::os::unix::fs::symlink("/proc/sys/kernel/core_pattern", b.rootfs().join("dev/null"))
        .unwrap();
    let o = b.run();
    assert_error_names(&o, &["linux.maskedPaths", "/dev/null", "symlink"]);
    assert!(
        o.stdout.is_empty(),
        "the container ran (its /proc/timer_list: {:?})",
        o.stdout
    );
    assert!(b.status().is_none(), "a refused run left its container");
}

/// CVE-2025-31133's other half: with /dev/null missing, runc skipped every masked file
/// (the mount's ENOENT was taken for a missing target) and the container read them.
#[test]
fn masked_paths_without_dev_null_are_refused_not_skipped() {
    let ctx = Ctx::new("c31133-gone");
    let b = image_dev_bundle(&ctx, MASK_PROBE);
    let o = b.run();
    assert_error_names(&o, &["linux.maskedPaths", "/dev/null"]);
    assert!(o.stdout.is_empty(), "the container ran: {:?}", o.stdout);
}

/// Another character device at /dev/null (here /dev/zero's 1:5) is refused too.
#[test]
fn masked_paths_with_another_device_at_dev_null_are_refused() {
    let ctx = Ctx::new("c31133-zero");
    let b = image_dev_bundle(&ctx, MASK_PROBE);
    mknod_dev(&b.rootfs().join("dev/null"), 1, 5);
    assert_error_names(&b.run(), &["linux.maskedPaths", "/dev/null", "1:5"]);
}

/// Control: the image's /dev/null, a real null device, masks as before (the masked file reads
/// empty and is the null device).
#[test]
fn masked_paths_with_the_images_real_dev_null_work() {
    let ctx = Ctx::new("c31133-ok");
    let b = image_dev_bundle(&ctx, MASK_PROBE);
    mknod_null(&b.rootfs().join("dev/null"));
    let out = b.run_ok();
    let mut lines = out.lines();
    let st = lines.next().unwrap_or_default();
    assert!(
        st.starts_with("1:3 "),
        "/proc/timer_list is not the null device: {out:?}"
    );
    assert_eq!(lines.next().map(str::trim), Some("0"), "{out:?}");
}

/// A terminal container: its pty bound over /dev/console (runtime-spec's default devices;
/// runc and crun). `run` in the foreground without --console-socket holds the master itself.
#[test]
fn dev_console_is_the_containers_pty() {
    let ctx = Ctx::new("console");
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "stat -c '%t:%T' /dev/console; stat -L -c '%t:%T' /proc/self/fd/0; tty",
    ]);
    b.set("/process/terminal", json!(true));
    let out = b.run_ok();
    let l: Vec<&str> = out.lines().map(str::trim).collect();
    assert!(l.len() >= 3, "{out:?}");
    assert_eq!(
        l[0], l[1],
        "/dev/console is not the container's terminal: {out:?}"
    );
    // 136 = 0x88, the pty slaves' major.
    assert!(l[0].starts_with("88:"), "{out:?}");
    assert!(l[2].starts_with("/dev/pts/"), "{out:?}");
}

/// CVE-2025-52565: /dev/console a symlink (to kernel.core_pattern): runc bound the pty over
/// the symlink's target. sprout refuses, and the target is not a mount point afterwards.
#[test]
fn dev_console_symlink_is_refused() {
    let ctx = Ctx::new("c52565");
    let mut b = image_dev_bundle(&ctx, "stat -c '%t:%T' /dev/console");
    mknod_null(&b.rootfs().join("dev/null"));
    b.set("/process/terminal", json!(true));
    // The pty from a devpts of the container's own, through the image's /dev/ptmx.
    b.add_mount(
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
                        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666"]}),
    );
    std::os::unix::fs::symlink("pts/ptmx", b.rootfs().join("dev/ptmx")).unwrap();
    // The symlink leads to a file of the rootfs: a bind over it would show in the container's
    // mountinfo, and nothing of the host is at stake if the runtime followed it.
    fs::write(b.rootfs().join("target"), "target\n").unwrap();
    std::os::unix::fs::symlink("/target", b.rootfs().join("dev/console")).unwrap();
    let o = b.run();
    assert_error_names(&o, &["process.terminal", "/dev/console", "symlink"]);
    assert!(b.status().is_none());
    // Control: without the symlink, the same bundle runs and /dev/console is the pty.
    fs::remove_file(b.rootfs().join("dev/console")).unwrap();
    assert!(b.run_ok().trim().starts_with("88:"));
}

/// The pty master comes from the container's /dev/ptmx; in an image-provided /dev that is the
/// image's, and one that is not the pty multiplexer (here a link to the null device) is
/// refused, as runc verifies it since the same release.
#[test]
fn dev_ptmx_that_is_not_the_multiplexer_is_refused() {
    let ctx = Ctx::new("ptmx");
    let mut b = image_dev_bundle(&ctx, "true");
    mknod_null(&b.rootfs().join("dev/null"));
    b.set("/process/terminal", json!(true));
    std::os::unix::fs::symlink("null", b.rootfs().join("dev/ptmx")).unwrap();
    assert_error_names(&b.run(), &["process.terminal", "/dev/ptmx", "5:2"]);
}

/// CVE-2025-52881, through a config mount: a decoy bound over a sysctl's file or the init's
/// own /proc/1/oom_score_adj, where the runtime's write would land in the decoy (in the
/// advisory, a bind of /proc/sysrq-trigger over them). As runc (checkProcMount), a mount inside
/// /proc is refused unless it covers a file lxcfs emulates, also when the destination reaches
/// /proc through a symlink of the rootfs.
#[test]
fn mounts_inside_proc_are_refused() {
    let ctx = Ctx::new("c52881-mount");
    let decoy_dir = ctx.scratch("decoy");
    let decoy = decoy_dir.join("file");
    fs::write(&decoy, "untouched\n").unwrap();
    let bind = |dest: &str| json!({"destination": dest, "type": "bind", "source": decoy, "options": ["bind"]});
    // `b` run: refused naming `dest`, the decoy untouched.
    let refused = |b: &Bundle, dest: &str| {
        let o = b.run();
        assert_eq!(
            fs::read_to_string(&decoy).unwrap(),
            "untouched\n",
            "{}",
            o.describe()
        );
        assert_error_names(&o, &["mounts[", dest, "inside /proc"]);
    };
    let mut b = ctx.bundle(&["cat", "/proc/sys/net/ipv4/ip_forward"]);
    b.set("/linux/sysctl", json!({"net.ipv4.ip_forward": "1"}));
    b.add_mount(bind("/proc/sys/net/ipv4/ip_forward"));
    refused(&b, "/proc/sys/net/ipv4/ip_forward");

    let mut b = ctx.bundle(&["cat", "/proc/self/oom_score_adj"]);
    b.set("/process/oomScoreAdj", json!(123));
    b.add_mount(bind("/proc/1/oom_score_adj"));
    refused(&b, "/proc/1/oom_score_adj");

    // Through a symlink of the rootfs: /data leads into /proc/sys.
    let mut b = ctx.bundle(&["true"]);
    std::os::unix::fs::symlink("/proc/sys/net/ipv4", b.rootfs().join("data")).unwrap();
    b.add_mount(bind("/data/ip_forward"));
    refused(&b, "/data/ip_forward");

    // Control: lxcfs's files may be covered, and the container reads the bind.
    let mut c = ctx.bundle(&["cat", "/proc/cpuinfo"]);
    c.add_mount(bind("/proc/cpuinfo"));
    assert_eq!(c.run_ok(), "untouched\n");
    // A procfs elsewhere than the container's /proc is not guarded, as with runc (which
    // compares the resolved path with /proc).
    let mut c = ctx.bundle(&["cat", "/proc2/uptime"]);
    c.add_mount(json!({"destination": "/proc2", "type": "proc", "source": "proc"}));
    c.add_mount(bind("/proc2/uptime"));
    assert_eq!(c.run_ok(), "untouched\n");
    // And the sysctl and the OOM score without a decoy are set in the container.
    let mut c = ctx.bundle(&[
        "sh",
        "-c",
        "cat /proc/sys/net/ipv4/ip_forward /proc/self/oom_score_adj",
    ]);
    c.set("/linux/sysctl", json!({"net.ipv4.ip_forward": "1"}));
    c.set("/process/oomScoreAdj", json!(123));
    assert_eq!(
        c.run_ok().split_whitespace().collect::<Vec<_>>(),
        ["1", "123"]
    );
}

/// A container with a user namespace of its own and CAP_SYS_ADMIN in it, running `sh -c
/// SCRIPT` after it mounted a tmpfs over its /proc with fake `self` and `thread-self`
/// directories (what CVE-2025-52881's `exec` variant plants). Returns the bundle, created and
/// started, once the fake /proc is in place.
fn fake_proc_container(ctx: &Ctx) -> Bundle<'_> {
    let script = "mount -t tmpfs none /proc && \
                  mkdir -p /proc/self/attr/apparmor /proc/thread-self/attr/apparmor && \
                  for f in self/oom_score_adj thread-self/oom_score_adj self/attr/exec \
                           self/attr/apparmor/exec thread-self/attr/exec \
                           thread-self/attr/apparmor/exec; do echo untouched > /proc/$f; done && \
                  touch /tmp/ready && sleep 30";
    let mut b = ctx.bundle(&["sh", "-c", script]);
    b.in_user_namespace(100000, 100000);
    let caps = json!(["CAP_SYS_ADMIN", "CAP_DAC_OVERRIDE"]);
    b.set(
        "/process/capabilities",
        json!({"bounding": caps, "effective": caps, "permitted": caps}),
    );
    b.set("/linux/maskedPaths", json!([]));
    b.set("/linux/readonlyPaths", json!([]));
    b.chown_rootfs(100000, 100000);
    b.create().assert_ok();
    b.start().assert_ok();
    let ready = b.rootfs().join("tmp/ready");
    wait_for(
        "the container's fake /proc",
        std::time::Duration::from_secs(20),
        || ready.exists().then_some(()),
    );
    b
}

/// The fake /proc's files, read through the init's root (they all still say "untouched").
fn fake_proc_untouched(b: &Bundle) -> Result<(), String> {
    let pid = b.pid();
    for f in [
        "self/oom_score_adj",
        "thread-self/oom_score_adj",
        "self/attr/exec",
        "self/attr/apparmor/exec",
        "thread-self/attr/exec",
        "thread-self/attr/apparmor/exec",
    ] {
        let p = format!("/proc/{pid}/root/proc/{f}");
        let got = fs::read_to_string(&p).map_err(|e| format!("{p}: {e}"))?;
        if got != "untouched\n" {
            return Err(format!(
                "the runtime wrote {got:?} into the container's fake /proc/{f}"
            ));
        }
    }
    Ok(())
}

/// CVE-2025-52881 for `exec`, the OOM score: sprout's `exec` writes it from outside, through
/// the host's /proc/<pid> (as runc does), so a fake /proc in the container neither receives it
/// nor keeps it from the process. The process reads its real score through a procfs it mounts.
#[test]
fn exec_oom_score_adj_under_a_fake_proc_reaches_the_process() {
    let ctx = Ctx::new("c52881-exec");
    let b = fake_proc_container(&ctx);
    let mut p = b.config["process"].clone();
    p["args"] = json!([
        "sh",
        "-c",
        "mkdir -p /tmp/realproc && mount -t proc proc /tmp/realproc && \
         cat /tmp/realproc/self/oom_score_adj"
    ]);
    p["oomScoreAdj"] = json!(321);
    let pj = ctx.scratch("process").join("process.json");
    fs::write(&pj, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = b.exec(&["--process", pj.to_str().unwrap()], &[]);
    fake_proc_untouched(&b).unwrap();
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "321", "{}", o.describe());
    let _ = b.kill("KILL");
}

/// CVE-2025-52881 for `exec`, the AppArmor label: runc's `exec` wrote it from inside the
/// container, where a fake /proc received it and the process ran unconfined. sprout's `exec`
/// helper writes its attributes through the host's /proc before it joins the container (it is
/// not in the container's pid namespace until then): the fake /proc never sees the label and
/// the `exec` runs. Needs AppArmor (the VM test host has it).
#[test]
fn exec_apparmor_label_under_a_fake_proc_stays_out_of_it() {
    if !sprout_process_apparmor_enabled() {
        println!("SKIPPED: AppArmor is not enabled on this host");
        return;
    }
    let ctx = Ctx::new("c52881-aa");
    let b = fake_proc_container(&ctx);
    let mut p = b.config["process"].clone();
    p["args"] = json!([
        "sh",
        "-c",
        "mkdir -p /tmp/realproc && mount -t proc proc /tmp/realproc && \
         cat /tmp/realproc/self/attr/current"
    ]);
    p["apparmorProfile"] = json!("unconfined");
    let pj = ctx.scratch("process").join("process.json");
    fs::write(&pj, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = b.exec(&["--process", pj.to_str().unwrap()], &[]);
    fake_proc_untouched(&b).unwrap();
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "unconfined", "{}", o.describe());
    let _ = b.kill("KILL");
}

fn sprout_process_apparmor_enabled() -> bool {
    fs::read("/sys/module/apparmor/parameters/enabled")
        .map(|b| b.first() == Some(&b'Y'))
        .unwrap_or(false)
}

/// What the tests above rely on: the host's kernel.core_pattern is never a mount point.
#[test]
fn zz_host_core_pattern_untouched() {
    let m = fs::metadata("/proc/sys/kernel/core_pattern").unwrap();
    assert!(!m.file_type().is_char_device());
    assert!(m.ino() != 0);
    assert!(
        !mount_points()
            .iter()
            .any(|p| p == "/proc/sys/kernel/core_pattern"),
        "something is mounted over the host's core_pattern"
    );
}
