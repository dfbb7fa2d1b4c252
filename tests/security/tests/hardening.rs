//! The rest of the container's fences: masked paths, read-only paths, read-only /sys, the
//! devices cgroup, setuid binaries under noNewPrivileges, the cgroup mount in a user namespace
//! (CVE-2023-25809), and an LSM profile on a host without
//! that LSM (CVE-2019-16884 class: a requested confinement must never be silently dropped).
//! Each has a control showing the check detects the unfenced case.

use serde_json::json;
use sprout_security_tests::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[test]
fn masked_paths_unreadable() {
    let ctx = Ctx::new("masked");
    let script = "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/latency_stats; do \
                  if [ -e $f ]; then echo $f $(head -c 4096 $f 2>/dev/null | wc -c); fi; done; \
                  echo /sys/firmware $(ls -A /sys/firmware | wc -l)";
    let b = ctx.bundle(&["sh", "-c", script]);
    let out = b.run_ok();
    for l in out.lines() {
        let (p, n) = l.rsplit_once(' ').unwrap();
        assert_eq!(
            n.trim(),
            "0",
            "masked path {p} is readable (or listable) in the container:\n{out}"
        );
    }
    // /proc/kcore exists only with CONFIG_PROC_KCORE (absent on this host kernel); timer_list always.
    assert!(
        out.contains("/proc/timer_list") && out.contains("/proc/keys"),
        "{out}"
    );
    // Control: without maskedPaths the same files do have content.
    let mut c = ctx.bundle(&["sh", "-c", script]);
    c.set("/linux/maskedPaths", json!([]));
    let out = c.run_ok();
    let tl = out
        .lines()
        .find(|l| l.starts_with("/proc/timer_list"))
        .unwrap();
    assert_ne!(
        tl.rsplit_once(' ').unwrap().1,
        "0",
        "control: unmasked /proc/timer_list should be readable: {out}"
    );
}

#[test]
fn readonly_paths_and_sys_unwritable() {
    let ctx = Ctx::new("rdonly");
    let b = ctx.bundle(&["sh", "-c",
        "for f in /proc/sysrq-trigger /proc/sys/kernel/hostname /proc/sys/vm/overcommit_memory /sys/kernel/mm/transparent_hugepage/enabled /sys/fs/cgroup/x; do echo \"$f $(/probe open $f w)\"; done; \
         touch /sys/sectest 2>&1; touch /proc/sys/sectest 2>&1; echo done"]);
    b.install_probe();
    let out = b.run_ok();
    for l in out.lines().filter(|l| l.starts_with('/')) {
        assert!(
            !l.ends_with(" OK"),
            "writable in the container (opened O_WRONLY): {l}\n{out}"
        );
    }
    assert!(out.contains("/proc/sysrq-trigger ERR"), "{out}");
    assert!(
        out.contains("/sys/kernel/mm/transparent_hugepage/enabled ERR 30"),
        "/sys must be read-only (EROFS):\n{out}"
    );
    assert!(
        out.contains("/proc/sys/kernel/hostname ERR 30"),
        "/proc/sys must be read-only (EROFS):\n{out}"
    );
    // Control: the same open works on a writable procfs path (without readonlyPaths).
    let mut c = ctx.bundle(&["/probe", "open", "/proc/sys/kernel/hostname", "w"]);
    c.install_probe();
    c.set("/linux/readonlyPaths", json!([]));
    let out = c.run_ok();
    assert!(
        out.contains("OK"),
        "control: /proc/sys/kernel/hostname writable without readonlyPaths: {out}"
    );
}

/// mknod a host disk's block node (and /dev/mem) inside: the devices cgroup must deny opening
/// them even with CAP_MKNOD; an allowed node (1:3, /dev/null) opens (control).
#[test]
fn device_nodes_outside_allowlist_not_openable() {
    let ctx = Ctx::new("devices");
    let rootdev = fs::metadata("/").unwrap().dev();
    let (maj, min) = (libc::major(rootdev), libc::minor(rootdev));
    let script = format!(
        "/probe mknod /tmp/disk b {maj} {min}; echo disk $(/probe open /tmp/disk r); \
         /probe mknod /tmp/mem c 1 1; echo mem $(/probe open /tmp/mem r); \
         /probe mknod /tmp/kmsg c 1 11; echo kmsg $(/probe open /tmp/kmsg r); \
         /probe mknod /tmp/nul c 1 3; echo null $(/probe open /tmp/nul rw)"
    );
    let mut b = ctx.bundle(&["sh", "-c", &script]);
    b.install_probe();
    let caps = json!([
        "CAP_AUDIT_WRITE",
        "CAP_KILL",
        "CAP_NET_BIND_SERVICE",
        "CAP_MKNOD",
        "CAP_SYS_RAWIO",
        "CAP_SYSLOG"
    ]);
    for k in ["bounding", "effective", "permitted"] {
        b.set(&format!("/process/capabilities/{k}"), caps.clone());
    }
    let out = b.run_ok();
    eprintln!("{out}");
    for dev in ["disk", "mem", "kmsg"] {
        let l = out
            .lines()
            .find(|l| l.starts_with(dev))
            .unwrap_or_else(|| panic!("{dev}: {out}"));
        assert!(l.contains("ERR 1 "), "{dev} (not in the allowlist) must be denied with EPERM by the devices cgroup: {l}\n{out}");
    }
    assert!(
        out.lines().any(|l| l == "null OK"),
        "control: /dev/null's node (allowed) should open: {out}"
    );
    assert_eq!(
        out.lines().filter(|l| *l == "OK").count(),
        4,
        "mknod itself should work with CAP_MKNOD: {out}"
    );
}

fn suid_probe(b: &Bundle) {
    let p = b.rootfs().join("suidprobe");
    fs::copy(probe_bin(), &p).unwrap();
    std::os::unix::fs::chown(&p, Some(0), Some(0)).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o4755)).unwrap();
}

#[test]
fn setuid_binary_no_gain_with_no_new_privileges() {
    let ctx = Ctx::new("nnp");
    let mut b = ctx.bundle(&["/suidprobe", "ids"]);
    suid_probe(&b);
    b.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    b.set("/process/noNewPrivileges", json!(true));
    let out = b.run_ok();
    assert!(
        out.contains("EUID 1000"),
        "setuid-root binary gained privileges despite noNewPrivileges: {out}"
    );
    // Control: without noNewPrivileges the same binary runs with euid 0.
    let mut c = ctx.bundle(&["/suidprobe", "ids"]);
    suid_probe(&c);
    c.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    c.set("/process/noNewPrivileges", json!(false));
    let out = c.run_ok();
    assert!(
        out.contains("EUID 0"),
        "control: setuid bit should work without noNewPrivileges: {out}"
    );
    // exec: config nnp true, and --no-new-privs on a container without it.
    let mut d = ctx.bundle(&["sleep", "60"]);
    suid_probe(&d);
    d.set("/process/noNewPrivileges", json!(false));
    d.create().assert_ok();
    d.start().assert_ok();
    let o = d.exec(
        &["--user", "1000:1000", "--no-new-privs"],
        &["/suidprobe", "ids"],
    );
    o.assert_ok();
    assert!(
        o.stdout.contains("EUID 1000"),
        "exec --no-new-privs: setuid gained: {}",
        o.stdout
    );
    let o = d.exec(&["--user", "1000:1000"], &["/suidprobe", "ids"]);
    o.assert_ok();
    assert!(
        o.stdout.contains("EUID 0"),
        "control (exec without nnp): {}",
        o.stdout
    );
}

/// AppArmor is not enabled on this host: asking for a profile must fail clearly, before anything
/// runs unconfined, and leave nothing behind.
#[test]
fn apparmor_profile_without_apparmor_fails_clearly() {
    if sprout_apparmor_enabled() {
        eprintln!("AppArmor is enabled here: this test is for hosts without it; skipped");
        return;
    }
    let ctx = Ctx::new("apparmor");
    let marker = ctx.scratch("aa");
    let mut b = ctx.bundle(&["sh", "-c", "touch /out/ran"]);
    b.add_mount(json!({"destination": "/out", "type": "bind", "source": marker.to_string_lossy(), "options": ["rbind", "rw"]}));
    b.set("/process/apparmorProfile", json!("sprout-sectest-profile"));
    let o = b.run();
    o.assert_fail();
    o.assert_one_line_error(&["apparmor"]);
    assert!(
        !marker.join("ran").exists(),
        "the process ran (unconfined) although a profile was requested"
    );
    ctx.assert_no_trace(&o, &b, &[], None);
    // exec --apparmor likewise.
    let c = ctx.bundle(&["sleep", "60"]);
    c.create().assert_ok();
    c.start().assert_ok();
    let o = c.exec(&["--apparmor", "sprout-sectest-profile"], &["true"]);
    o.assert_fail();
    o.assert_one_line_error(&["apparmor"]);
    // SELinux label on a host without SELinux: the same rule.
    let mut d = ctx.bundle(&["true"]);
    d.set(
        "/process/selinuxLabel",
        json!("system_u:system_r:container_t:s0"),
    );
    let o = d.run();
    o.assert_fail();
    o.assert_one_line_error(&["selinux"]);
}

fn sprout_apparmor_enabled() -> bool {
    fs::read("/sys/module/apparmor/parameters/enabled")
        .map(|b| b.first() == Some(&b'Y'))
        .unwrap_or(false)
}

/// CVE-2023-25809 (runc < 1.1.5): in a user namespace without a cgroup namespace the cgroup
/// mount falls back to a bind of the host's hierarchy, and a bind ignores `ro` unless it is
/// remounted: the container could then write the (mapped) host cgroups. Here the container's
/// root is the host's root mapped (as `spec --rootless` run by root has it), so only the
/// mount's read-only flag stands between it and a mkdir in the host's cgroup tree. Control:
/// the same mount without `ro` lets the mkdir through (and removes it again).
#[test]
fn cgroup_mount_is_read_only_in_a_user_namespace_without_a_cgroup_namespace() {
    let ctx = Ctx::new("cgroupro");
    // Every hierarchy the container sees (v1: one directory per controller; v2: the mount
    // itself); a directory made in one is made in the host's cgroup tree.
    let script = "for d in /sys/fs/cgroup /sys/fs/cgroup/*/; do \
                  [ -e \"$d/cgroup.procs\" ] || continue; \
                  if mkdir \"$d/sprout-cve-probe\" 2>/dev/null; then echo \"$d MADE\"; rmdir \"$d/sprout-cve-probe\"; \
                  else echo \"$d $(mkdir \"$d/sprout-cve-probe\" 2>&1 | sed 's/.*: //')\"; fi; done; echo done";
    let bundle = |ro: bool| {
        let mut b = ctx.bundle(&["sh", "-c", script]);
        b.in_user_namespace(0, 0);
        let mut opts = vec!["nosuid", "noexec", "nodev", "relatime"];
        if ro {
            opts.push("ro");
        }
        let mounts = b.config["mounts"].as_array_mut().unwrap();
        let cg = mounts
            .iter_mut()
            .find(|m| m["destination"] == "/sys/fs/cgroup")
            .unwrap();
        cg["options"] = json!(opts);
        b
    };
    let out = bundle(true).run_ok();
    eprintln!("ro:\n{out}");
    let tried: Vec<&str> = out.lines().filter(|l| l.starts_with('/')).collect();
    assert!(
        !tried.is_empty(),
        "no cgroup hierarchy seen in the container:\n{out}"
    );
    for l in &tried {
        assert!(
            l.ends_with("Read-only file system"),
            "a cgroup hierarchy is writable from a user namespace without a cgroup namespace: {l}\n{out}"
        );
    }
    // Control: without `ro` the same bind is writable.
    let out = bundle(false).run_ok();
    eprintln!("control (rw):\n{out}");
    assert!(
        out.lines().any(|l| l.ends_with(" MADE")),
        "control: without ro a mkdir in the container's cgroup should work:\n{out}"
    );
}
