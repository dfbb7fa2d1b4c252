//! config.json fields: each test sets a field and checks its real effect
//! from inside the container (busybox) or from the host.

use serde_json::{json, Value};
use sprout_integration_tests::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::Duration;

fn sh<'a>(ctx: &'a Ctx, script: &str) -> Bundle<'a> {
    ctx.bundle(&["sh", "-c", script])
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn hostname_and_domainname() {
    let ctx = Ctx::new("hostname");
    let mut b = sh(&ctx, "hostname; cat /proc/sys/kernel/domainname");
    b.set("/hostname", json!("box-one"));
    b.set("/domainname", json!("example.test"));
    assert_eq!(lines(&b.run_ok()), vec!["box-one", "example.test"]);
}

#[test]
fn namespaces_are_new() {
    let ctx = Ctx::new("nsnew");
    let b = sh(
        &ctx,
        "for n in pid net ipc uts mnt; do readlink /proc/self/ns/$n; done",
    );
    let out = b.run_ok();
    let inner = lines(&out);
    for (i, n) in ["pid", "net", "ipc", "uts", "mnt"].iter().enumerate() {
        let host = fs::read_link(format!("/proc/self/ns/{n}")).unwrap();
        assert_ne!(
            inner[i],
            host.to_string_lossy(),
            "{n} namespace should be new: {out}"
        );
    }
}

#[test]
fn absent_namespace_is_shared_with_host() {
    let ctx = Ctx::new("nsshared");
    let mut b = sh(
        &ctx,
        "readlink /proc/self/ns/net; readlink /proc/self/ns/ipc",
    );
    b.remove_namespace("network").remove_namespace("ipc");
    let out = b.run_ok();
    assert_eq!(
        lines(&out),
        vec![
            fs::read_link("/proc/self/ns/net")
                .unwrap()
                .to_string_lossy()
                .as_ref(),
            fs::read_link("/proc/self/ns/ipc")
                .unwrap()
                .to_string_lossy()
                .as_ref()
        ]
    );
}

#[test]
fn pid_namespace_init_is_pid_1() {
    let ctx = Ctx::new("pidns");
    let b = sh(&ctx, "echo $$; ls /proc | grep -E '^[0-9]+$' | wc -l");
    let out = b.run_ok();
    let l = lines(&out);
    assert_eq!(l[0], "1", "{out}");
    // sh, ls, grep, wc (a pipeline) at most: no host processes visible.
    let n: u32 = l[1].trim().parse().unwrap();
    assert!(
        n <= 4,
        "only the container's processes should be visible, saw {n}"
    );
}

#[test]
fn network_namespace_has_only_lo() {
    let ctx = Ctx::new("netns");
    let b = sh(&ctx, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    assert_eq!(b.run_ok(), "lo\n");
}

#[test]
fn join_existing_uts_namespace_by_path() {
    let ctx = Ctx::new("nsjoin");
    let ready = ctx.dir.join("ready");
    let mut child = Command::new("unshare")
        .args(["--uts", "/bin/busybox", "sh", "-c"])
        .arg(format!(
            "hostname joined-uts && echo ok > {} && exec /bin/busybox sleep 1000",
            ready.display()
        ))
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare");
    let pid = child.id();
    wait_file(&ready);
    let mut b = sh(&ctx, "hostname; readlink /proc/self/ns/uts");
    let ns_path = format!("/proc/{pid}/ns/uts");
    for n in b.config["linux"]["namespaces"].as_array_mut().unwrap() {
        if n["type"] == "uts" {
            n["path"] = json!(ns_path);
        }
    }
    b.config.as_object_mut().unwrap().remove("hostname");
    let o = b.run();
    let target = fs::read_link(&ns_path).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    o.assert_ok();
    assert_eq!(
        lines(&o.stdout),
        vec!["joined-uts", target.to_string_lossy().as_ref()],
        "{}",
        o.describe()
    );
}

#[test]
fn user_namespace_with_mappings() {
    let ctx = Ctx::new("userns");
    let mut b = sh(
        &ctx,
        "cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g; touch /out/made-by-root",
    );
    let out = b.bind_host_dir("/out");
    // The mapped root owns the rootfs (as podman/docker arrange).
    b.in_user_namespace(100000, 200000);
    let o = b.run();
    o.assert_ok();
    let norm: Vec<Vec<String>> = o
        .stdout
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(norm[0], vec!["0", "100000", "65536"], "{}", o.describe());
    assert_eq!(norm[1], vec!["0", "200000", "65536"], "{}", o.describe());
    assert_eq!(norm[2], vec!["0"]);
    assert_eq!(norm[3], vec!["0"]);
    let md = fs::metadata(out.join("made-by-root")).expect("file created in user ns");
    assert_eq!(
        (md.uid(), md.gid()),
        (100000, 200000),
        "container root must map to host 100000:200000"
    );
}

/// A bind source behind a directory that only the host's root may search (0700, as podman's
/// storage under /var/lib/containers or a user's home): the root of the container's user
/// namespace cannot look it up, the runtime can, and it is the runtime that opens it (as runc
/// and crun do). Before that fix: `mounts[N] (/data): source ...: Permission denied`.
#[test]
fn user_namespace_binds_sources_only_the_runtime_can_reach() {
    let ctx = Ctx::new("usernsbind");
    let locked = ctx.scratch("locked");
    fs::create_dir_all(locked.join("dir")).unwrap();
    fs::write(locked.join("dir/hello"), "from-dir\n").unwrap();
    fs::write(locked.join("file"), "from-file\n").unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o700)).unwrap();
    let mut b = sh(&ctx, "cat /data/hello /one; id -u");
    b.add_mount(json!({"destination": "/data", "type": "bind",
        "source": locked.join("dir").to_str().unwrap(), "options": ["rbind", "ro"]}));
    b.add_mount(json!({"destination": "/one", "type": "bind",
        "source": locked.join("file").to_str().unwrap(), "options": ["bind", "ro"]}));
    b.in_user_namespace(100000, 100000);
    let o = b.run();
    o.assert_ok();
    assert_eq!(
        lines(&o.stdout),
        vec!["from-dir", "from-file", "0"],
        "{}",
        o.describe()
    );
}

#[test]
fn bind_mount_read_only() {
    let ctx = Ctx::new("bindro");
    let host = ctx.scratch("ro");
    fs::write(host.join("hello"), "from-host\n").unwrap();
    let mut b = sh(&ctx, "cat /data/hello; if echo x > /data/new 2>/dev/null; then echo WRITABLE; else echo denied; fi; grep ' /data ' /proc/self/mountinfo | cut -d' ' -f6");
    b.add_mount(json!({"destination": "/data", "type": "bind", "source": host.to_str().unwrap(), "options": ["rbind", "ro"]}));
    let out = b.run_ok();
    let l = lines(&out);
    assert_eq!(l[0], "from-host");
    assert_eq!(l[1], "denied", "write to a ro bind mount must fail");
    assert!(
        l[2].split(',').any(|o| o == "ro"),
        "mount options should contain ro: {out}"
    );
    assert!(!host.join("new").exists());
}

#[test]
fn bind_mount_read_write_and_file() {
    let ctx = Ctx::new("bindrw");
    let file = ctx.dir.join("single-file");
    fs::write(&file, "file-content\n").unwrap();
    let mut b = sh(&ctx, "echo written > /rw/out; cat /etc/single");
    let host = b.bind_host_dir("/rw");
    b.add_mount(json!({"destination": "/etc/single", "type": "bind", "source": file.to_str().unwrap(), "options": ["bind", "ro"]}));
    assert_eq!(b.run_ok(), "file-content\n");
    assert_eq!(fs::read_to_string(host.join("out")).unwrap(), "written\n");
}

#[test]
fn bind_mount_relative_source_is_relative_to_bundle() {
    let ctx = Ctx::new("bindrel");
    let mut b = sh(&ctx, "cat /rel/f");
    fs::create_dir_all(b.dir.join("reldata")).unwrap();
    fs::write(b.dir.join("reldata/f"), "relative-ok\n").unwrap();
    b.add_mount(json!({"destination": "/rel", "type": "bind", "source": "reldata", "options": ["rbind", "ro"]}));
    // The runtime is invoked from a different cwd (the test's scratch dir).
    assert_eq!(b.run_ok(), "relative-ok\n");
}

#[test]
fn tmpfs_mount_with_options() {
    let ctx = Ctx::new("tmpfs");
    let mut b = sh(&ctx, "grep ' /scratch ' /proc/self/mountinfo; stat -c %a /scratch; echo x > /scratch/f && echo wrote");
    b.add_mount(
        json!({"destination": "/scratch", "type": "tmpfs", "source": "tmpfs",
        "options": ["nosuid", "nodev", "noexec", "size=1m", "mode=1777"]}),
    );
    let out = b.run_ok();
    let l = lines(&out);
    let (pre, post) = l[0]
        .split_once(" - ")
        .unwrap_or_else(|| panic!("no /scratch mount: {out}"));
    let mopts: Vec<&str> = pre.split(' ').nth(5).unwrap().split(',').collect();
    for o in ["nosuid", "nodev", "noexec"] {
        assert!(mopts.contains(&o), "{o} missing in {out}");
    }
    assert!(post.starts_with("tmpfs "), "{out}");
    assert!(
        post.contains("size=1024k"),
        "size=1m should give size=1024k: {out}"
    );
    assert_eq!(l[1], "1777");
    assert_eq!(l[2], "wrote");
}

#[test]
fn readonly_root() {
    let ctx = Ctx::new("roroot");
    let mut b = sh(&ctx, "if touch /newfile 2>/dev/null; then echo WRITABLE; else echo denied; fi; echo ok > /tmp2/x && echo tmpok");
    b.set("/root/readonly", json!(true));
    b.add_mount(
        json!({"destination": "/tmp2", "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]}),
    );
    assert_eq!(lines(&b.run_ok()), vec!["denied", "tmpok"]);
    assert!(!b.rootfs().join("newfile").exists());
}

#[test]
fn process_user_uid_gid_groups_umask() {
    let ctx = Ctx::new("user");
    let mut b = sh(&ctx, "grep -E '^(Uid|Gid|Groups|Umask):' /proc/self/status; umask; touch /tmp/f; stat -c '%u %g %a' /tmp/f");
    b.set(
        "/process/user",
        json!({"uid": 1000, "gid": 1001, "additionalGids": [2000, 3000], "umask": 23}),
    );
    let out = b.run_ok();
    let f = |k: &str| status_field(&out, k).unwrap_or_else(|| panic!("{k} missing: {out}"));
    assert_eq!(
        f("Uid").split_whitespace().collect::<Vec<_>>(),
        vec!["1000"; 4],
        "{out}"
    );
    assert_eq!(
        f("Gid").split_whitespace().collect::<Vec<_>>(),
        vec!["1001"; 4],
        "{out}"
    );
    let groups_line = f("Groups");
    let mut groups: Vec<&str> = groups_line
        .split_whitespace()
        .filter(|g| *g != "1001")
        .collect();
    groups.sort();
    assert_eq!(groups, vec!["2000", "3000"], "additionalGids: {out}");
    assert_eq!(f("Umask"), "0027", "{out}");
    assert!(
        out.lines().any(|l| l == "1000 1001 640"),
        "file created with umask 027 by 1000:1001: {out}"
    );
}

#[test]
fn env_and_cwd() {
    let ctx = Ctx::new("envcwd");
    let mut b = sh(
        &ctx,
        "echo \"$FOO|$EMPTY|$WITH_EQ\"; pwd; ls -ld . | cut -c1",
    );
    b.add_env("FOO=bar baz")
        .add_env("EMPTY=")
        .add_env("WITH_EQ=a=b");
    b.set("/process/cwd", json!("/does/not/exist/yet"));
    assert_eq!(
        lines(&b.run_ok()),
        vec!["bar baz||a=b", "/does/not/exist/yet", "d"]
    );
}

#[test]
fn capabilities_sets() {
    let ctx = Ctx::new("caps");
    let mut b = sh(&ctx, "grep Cap /proc/self/status");
    let caps = json!(["CAP_CHOWN", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT"]);
    b.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    b.set(
        "/process/capabilities",
        json!({"bounding": caps, "effective": caps, "permitted": caps, "inheritable": caps, "ambient": caps}),
    );
    let out = b.run_ok();
    let want = cap_mask(&[0, 10, 18]);
    for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            status_field(&out, k).as_deref(),
            Some(want.as_str()),
            "{k}: {out}"
        );
    }
}

#[test]
fn capabilities_default_root_bounding() {
    let ctx = Ctx::new("capsroot");
    let b = sh(&ctx, "grep Cap /proc/self/status");
    let out = b.run_ok();
    // runc spec default: AUDIT_WRITE(29) KILL(5) NET_BIND_SERVICE(10)
    let want = cap_mask(&[5, 10, 29]);
    for k in ["CapPrm", "CapEff", "CapBnd"] {
        assert_eq!(
            status_field(&out, k).as_deref(),
            Some(want.as_str()),
            "{k}: {out}"
        );
    }
    // No inheritable set given, so the kernel cannot raise ambient caps.
    for k in ["CapInh", "CapAmb"] {
        assert_eq!(
            status_field(&out, k).as_deref(),
            Some(cap_mask(&[]).as_str()),
            "{k}: {out}"
        );
    }
}

#[test]
fn capabilities_are_enforced() {
    let ctx = Ctx::new("capsenf");
    // Without CAP_CHOWN root cannot chown a file to another user.
    let mut b = sh(
        &ctx,
        "touch /tmp/f; if chown 1234 /tmp/f 2>/dev/null; then echo chowned; else echo denied; fi",
    );
    let caps = json!(["CAP_KILL"]);
    b.set(
        "/process/capabilities",
        json!({"bounding": caps, "effective": caps, "permitted": caps}),
    );
    assert_eq!(b.run_ok(), "denied\n");
}

fn limits_line(out: &str, name: &str) -> Vec<String> {
    let l = out
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("{name} not in {out}"));
    l[name.len()..]
        .split_whitespace()
        .take(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn rlimits() {
    let ctx = Ctx::new("rlimits");
    let mut b = sh(&ctx, "cat /proc/self/limits");
    // At or below this host's hard limits (no CAP_SYS_RESOURCE here).
    let mut nofile = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let mut nproc = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: each getrlimit writes one rlimit into a live local (`nofile`, `nproc`).
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile);
        libc::getrlimit(libc::RLIMIT_NPROC, &mut nproc);
    }
    let nf_hard = nofile.rlim_max.min(4096);
    let np_hard = nproc.rlim_max.min(3000);
    b.set(
        "/process/rlimits",
        json!([
            {"type": "RLIMIT_NOFILE", "hard": nf_hard, "soft": 512},
            {"type": "RLIMIT_NPROC", "hard": np_hard, "soft": 777},
            {"type": "RLIMIT_CORE", "hard": 0, "soft": 0}
        ]),
    );
    let out = b.run_ok();
    assert_eq!(
        limits_line(&out, "Max open files"),
        vec!["512".to_string(), nf_hard.to_string()],
        "{out}"
    );
    assert_eq!(
        limits_line(&out, "Max processes"),
        vec!["777".to_string(), np_hard.to_string()],
        "{out}"
    );
    assert_eq!(
        limits_line(&out, "Max core file size"),
        vec!["0", "0"],
        "{out}"
    );
}

#[test]
fn no_new_privileges() {
    let ctx = Ctx::new("nnp");
    let mut b = sh(&ctx, "grep NoNewPrivs /proc/self/status");
    b.set("/process/noNewPrivileges", json!(true));
    assert_eq!(b.run_ok().split_whitespace().last(), Some("1"));
    let mut b = sh(&ctx, "grep NoNewPrivs /proc/self/status");
    b.set("/process/noNewPrivileges", json!(false));
    assert_eq!(b.run_ok().split_whitespace().last(), Some("0"));
}

#[test]
fn oom_score_adj() {
    let ctx = Ctx::new("oom");
    let mut b = sh(&ctx, "cat /proc/self/oom_score_adj");
    b.set("/process/oomScoreAdj", json!(500));
    assert_eq!(b.run_ok(), "500\n");
}

#[test]
fn device_node_created() {
    let ctx = Ctx::new("devices");
    let mut b = sh(&ctx, "stat -c '%F %t %T %a %u %g' /dev/fuse /dev/mydisk");
    b.set(
        "/linux/devices",
        json!([
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438, "uid": 0, "gid": 0},
            {"path": "/dev/mydisk", "type": "b", "major": 7, "minor": 200, "fileMode": 384, "uid": 1000, "gid": 1000}
        ]),
    );
    let out = b.run_ok();
    assert_eq!(
        lines(&out),
        vec![
            "character special file a e5 666 0 0",
            "block special file 7 c8 600 1000 1000"
        ]
    );
}

#[test]
fn default_devices() {
    let ctx = Ctx::new("defdev");
    let script =
        "for d in null zero full random urandom tty; do stat -c \"$d %F %t:%T %a\" /dev/$d; done; \
        for l in fd stdin stdout stderr; do echo \"$l $(readlink /dev/$l)\"; done; \
        stat -L -c 'ptmx %F %t:%T' /dev/ptmx; \
        head -c 4 /dev/zero | od -An -tx1 | tr -d ' '; \
        echo hi > /dev/null && echo null-ok; \
        if echo x > /dev/full 2>/dev/null; then echo full-WROTE; else echo full-enospc; fi; \
        head -c 8 /dev/urandom | wc -c";
    let b = sh(&ctx, script);
    let out = b.run_ok();
    let want = [
        "null character special file 1:3 666",
        "zero character special file 1:5 666",
        "full character special file 1:7 666",
        "random character special file 1:8 666",
        "urandom character special file 1:9 666",
        "tty character special file 5:0 666",
        "fd /proc/self/fd",
        "stdin /proc/self/fd/0",
        "stdout /proc/self/fd/1",
        "stderr /proc/self/fd/2",
        "ptmx character special file 5:2",
        "00000000",
        "null-ok",
        "full-enospc",
        "8",
    ];
    assert_eq!(lines(&out), want.to_vec(), "{out}");
}

#[test]
fn masked_paths() {
    let ctx = Ctx::new("masked");
    let secret = ctx.scratch("secretdir");
    fs::write(secret.join("secret"), "s3cret").unwrap();
    // A default masked /proc file that exists on this host.
    let procfile = ["/proc/kcore", "/proc/keys", "/proc/timer_list"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a maskable /proc file");
    let mut b = sh(
        &ctx,
        &format!("wc -c < {procfile}; ls -A /data/dir | wc -l; cat /data/file; echo end"),
    );
    let host = b.bind_host_dir("/data");
    fs::create_dir(host.join("dir")).unwrap();
    fs::write(host.join("dir/inside"), "x").unwrap();
    fs::write(host.join("file"), "visible-file-content").unwrap();
    b.config["linux"]["maskedPaths"]
        .as_array_mut()
        .unwrap()
        .extend([json!("/data/dir"), json!("/data/file")]);
    let out = b.run_ok();
    assert_eq!(
        lines(&out),
        vec!["0", "0", "end"],
        "masked file and dir must read empty: {out}"
    );
    // Masking happens inside the container only.
    assert!(host.join("dir/inside").exists());
    assert_eq!(
        fs::read_to_string(host.join("file")).unwrap(),
        "visible-file-content"
    );
    drop(secret);
}

#[test]
fn readonly_paths() {
    let ctx = Ctx::new("ropaths");
    let mut b = sh(
        &ctx,
        "if echo changed > /proc/sys/kernel/hostname 2>/dev/null; then echo WROTE; else echo denied; fi; hostname; \
         if echo x > /data/f 2>/dev/null; then echo WROTE; else echo denied; fi; cat /data/existing",
    );
    let host = b.bind_host_dir("/data");
    fs::write(host.join("existing"), "readable\n").unwrap();
    b.config["linux"]["readonlyPaths"]
        .as_array_mut()
        .unwrap()
        .push(json!("/data"));
    assert_eq!(
        lines(&b.run_ok()),
        vec!["denied", "sprout-test", "denied", "readable"]
    );
    assert!(!host.join("f").exists());
}

#[test]
fn sysctl_in_container_netns() {
    let ctx = Ctx::new("sysctl");
    let host_before = fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let want = if host_before.trim() == "1" { "0" } else { "1" };
    let mut b = sh(
        &ctx,
        "cat /proc/sys/net/ipv4/ip_forward /proc/sys/kernel/shmmni",
    );
    b.set(
        "/linux/sysctl",
        json!({"net.ipv4.ip_forward": want, "kernel.shmmni": "1234"}),
    );
    assert_eq!(lines(&b.run_ok()), vec![want, "1234"]);
    assert_eq!(
        fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        host_before,
        "host sysctl changed"
    );
}

fn root_mount_tags(out: &str) -> String {
    // optional fields of the "/" mount (shared:N / master:N), "" when private
    let l = out
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("no / in {out}"));
    let pre = l.split(" - ").next().unwrap();
    pre.split(' ').skip(6).collect::<Vec<_>>().join(" ")
}

#[test]
fn rootfs_propagation() {
    let ctx = Ctx::new("rprop");
    // The host's mounts are private here, so "slave" cannot be told apart
    // from "private" by looking at mountinfo; shared and private can.
    for (prop, check) in [("shared", "shared:"), ("private", "")] {
        let mut b = sh(&ctx, "cat /proc/self/mountinfo");
        b.set("/linux/rootfsPropagation", json!(prop));
        let out = b.run_ok();
        let tags = root_mount_tags(&out);
        if check.is_empty() {
            assert!(
                tags.is_empty(),
                "rootfsPropagation private: / should have no propagation tags, got {tags:?}"
            );
        } else {
            assert!(
                tags.contains(check),
                "rootfsPropagation {prop}: / should be tagged {check}, got {tags:?}"
            );
        }
    }
}

/// A rootfs that is a mount point of its own (containerd's, CRI-O's and podman's overlay) with
/// `rootfsPropagation: rshared` and an `rshared` bind of a shared host directory: a CRI
/// container with Bidirectional mount propagation (CSI node plugins; critest's "mount with
/// 'rshared'"). pivot_root refuses a shared new root, and the rshared "/" had made the rootfs's
/// own mount shared: `pivot_root: Invalid argument` until the rootfs's mount, not the one above
/// it, was made private. Then a mount made on the host below the bind shows in the container,
/// and one the container makes there shows on the host.
#[test]
fn rshared_bind_with_a_rootfs_that_is_a_mount_point() {
    let ctx = Ctx::new("rsharedmp");
    let mount = |args: &[&str]| {
        let st = Command::new("mount").args(args).status().unwrap();
        assert!(st.success(), "mount {args:?}");
    };
    let host = ctx.scratch("rshared");
    let shared = host.join("shared");
    let src = host.join("src");
    for d in [shared.join("hostmnt"), shared.join("ctmnt"), src.clone()] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(src.join("flag"), "from the host\n").unwrap();
    let s = shared.to_str().unwrap();
    mount(&["--bind", s, s]);
    // Detached with what the host and the container mount below it.
    let _shared = DetachOnDrop(shared.clone());
    mount(&["--make-rshared", s]);
    let script = format!(
        "i=0; while [ ! -e {s}/hostmnt/flag ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; \
         [ -e {s}/hostmnt/flag ] && mount -t tmpfs sprout-itest-rshared {s}/ctmnt && \
         echo from the container > {s}/ctmnt/seen"
    );
    let mut b = sh(&ctx, &script);
    b.set("/linux/rootfsPropagation", json!("rshared"));
    let caps = json!(["CAP_SYS_ADMIN"]);
    for set in ["bounding", "effective", "permitted"] {
        b.set(&format!("/process/capabilities/{set}"), caps.clone());
    }
    b.add_mount(json!({"destination": s, "type": "bind", "source": s,
                       "options": ["rbind", "rshared", "rw"]}));
    let root = b.rootfs();
    let r = root.to_str().unwrap().to_string();
    mount(&["--bind", &r, &r]);
    let _root = DetachOnDrop(root.clone());
    if ctx.emulating_pure_v1() {
        // The runtime runs in a mount namespace of the emulation's own, made private: nothing
        // propagates between it and this test. pivot_root is still checked (create succeeds);
        // the flag is a plain file there, so the container goes on at once.
        fs::write(shared.join("hostmnt/flag"), "").unwrap();
        b.create().assert_ok();
        b.start().assert_ok();
        b.wait_status("stopped");
        b.delete().assert_ok();
        println!("skipped: the propagation half: the v1-only emulation's private mount namespace");
        return;
    }
    b.create().assert_ok();
    b.start().assert_ok();
    // Host to container: the container waits for this mount's file before it mounts its own.
    mount(&["--bind", src.to_str().unwrap(), &format!("{s}/hostmnt")]);
    let seen = shared.join("ctmnt/seen");
    wait_for("the container's tmpfs on the host", POLL_TIMEOUT, || {
        fs::read_to_string(&seen).ok()
    });
    assert_eq!(
        fs::read_to_string(&seen).unwrap(),
        "from the container\n",
        "the container's mount reached the host"
    );
    b.wait_status("stopped");
    b.delete().assert_ok();
}

fn hook(dir: &str, name: &str) -> Value {
    json!({
        "path": "/bin/sh",
        "args": ["sh", "-c", format!("cat > {dir}/{name}.json; echo {name} >> {dir}/order")],
        "env": ["PATH=/usr/bin:/bin"],
        "timeout": 20
    })
}

fn order(p: &std::path::Path) -> Vec<String> {
    fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn hooks_bundle<'a>(ctx: &'a Ctx, log: &std::path::Path) -> Bundle<'a> {
    let d = log.to_str().unwrap().to_string();
    let mut b = sh(ctx, &format!("echo process >> {d}/order"));
    // Same absolute path inside and outside, so hooks work in either namespace.
    b.add_mount(json!({"destination": d, "type": "bind", "source": d, "options": ["rbind", "rw"]}));
    let mut hooks = serde_json::Map::new();
    for h in [
        "prestart",
        "createRuntime",
        "createContainer",
        "startContainer",
        "poststart",
        "poststop",
    ] {
        hooks.insert(h.to_string(), json!([hook(&d, h)]));
    }
    b.set("/hooks", Value::Object(hooks));
    b
}

/// Which hooks run at `create`: exactly prestart, createRuntime,
/// createContainer, in that order (poststart belongs to `start`).
#[test]
fn hooks_run_by_create() {
    let ctx = Ctx::new("hookscreate");
    let log = ctx.scratch("hooklog");
    let b = hooks_bundle(&ctx, &log);
    b.create().assert_ok();
    assert_eq!(
        order(&log.join("order")),
        vec!["prestart", "createRuntime", "createContainer"],
        "hooks run by create"
    );
    b.start().assert_ok();
    wait_for("process and poststart", POLL_TIMEOUT, || {
        let o = order(&log.join("order"));
        (o.contains(&"process".to_string()) && o.contains(&"poststart".to_string())).then_some(())
    });
    let o = order(&log.join("order"));
    let pos = |n: &str| {
        o.iter()
            .position(|x| x == n)
            .unwrap_or_else(|| panic!("{n} missing in {o:?}"))
    };
    assert!(
        pos("startContainer") < pos("process"),
        "startContainer must run before the process: {o:?}"
    );
    assert!(
        pos("startContainer") < pos("poststart"),
        "poststart must run after the user process was executed, so after startContainer: {o:?}"
    );
}

/// Every hook runs once, poststop last (at delete), startContainer before the
/// user process, and each receives the container state JSON on stdin.
#[test]
fn hooks_order_and_state_on_stdin() {
    let ctx = Ctx::new("hooks");
    let log = ctx.scratch("hooklog");
    let b = hooks_bundle(&ctx, &log);
    b.create().assert_ok();
    let pid = b.pid();
    b.start().assert_ok();
    wait_for("process and poststart", POLL_TIMEOUT, || {
        let o = order(&log.join("order"));
        (o.contains(&"process".to_string()) && o.contains(&"poststart".to_string())).then_some(())
    });
    b.wait_status("stopped");
    b.delete().assert_ok();
    let o = order(&log.join("order"));
    let pos = |n: &str| {
        o.iter()
            .position(|x| x == n)
            .unwrap_or_else(|| panic!("{n} missing in {o:?}"))
    };
    assert_eq!(o.len(), 7, "each hook once plus the process: {o:?}");
    assert!(pos("prestart") < pos("createRuntime"), "{o:?}");
    assert!(pos("createRuntime") < pos("createContainer"), "{o:?}");
    assert!(pos("createContainer") < pos("startContainer"), "{o:?}");
    assert!(pos("startContainer") < pos("process"), "{o:?}");
    assert_eq!(o.last().map(String::as_str), Some("poststop"), "{o:?}");

    for h in [
        "prestart",
        "createRuntime",
        "createContainer",
        "startContainer",
        "poststart",
        "poststop",
    ] {
        let text = fs::read_to_string(log.join(format!("{h}.json"))).unwrap();
        let st: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{h}: state on stdin not JSON ({e}): {text:?}"));
        assert_eq!(st["id"], json!(b.id), "{h}: {st}");
        assert!(st["ociVersion"].is_string(), "{h}: {st}");
        assert!(st["status"].is_string(), "{h}: {st}");
        assert_eq!(
            fs::canonicalize(st["bundle"].as_str().unwrap_or("")).ok(),
            fs::canonicalize(&b.dir).ok(),
            "{h}: {st}"
        );
        match h {
            "poststop" => {}
            // These run inside the container's namespaces; a pid as seen
            // from there (1) is accepted too.
            "createContainer" | "startContainer" => assert!(
                st["pid"].as_i64() == Some(i64::from(pid)) || st["pid"].as_i64() == Some(1),
                "{h}: {st}"
            ),
            _ => assert_eq!(st["pid"].as_i64(), Some(i64::from(pid)), "{h}: {st}"),
        }
    }
}

/// The state's status seen by each hook, as runc reports it: "creating"
/// while `create` is still running (prestart, createRuntime,
/// createContainer), "created" for startContainer, "stopped" for poststop.
#[test]
fn hook_state_status_values() {
    let ctx = Ctx::new("hookstatus");
    let log = ctx.scratch("hooklog");
    let b = hooks_bundle(&ctx, &log);
    b.create().assert_ok();
    b.start().assert_ok();
    b.wait_status("stopped");
    b.delete().assert_ok();
    let mut got = Vec::new();
    let mut want = Vec::new();
    for (h, w) in [
        ("prestart", "creating"),
        ("createRuntime", "creating"),
        ("createContainer", "creating"),
        ("startContainer", "created"),
        ("poststop", "stopped"),
    ] {
        let text = fs::read_to_string(log.join(format!("{h}.json"))).unwrap_or_default();
        let st: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        got.push(format!("{h}={}", st["status"].as_str().unwrap_or("?")));
        want.push(format!("{h}={w}"));
    }
    assert_eq!(got, want, "status in the state passed to hooks");
}

#[test]
fn failing_create_runtime_hook_fails_create_and_leaves_nothing() {
    let ctx = Ctx::new("hookfail");
    let mut b = sh(&ctx, "true");
    b.set(
        "/hooks/createRuntime",
        json!([{"path": "/bin/sh", "args": ["sh", "-c", "exit 7"]}]),
    );
    let pidfile = ctx.dir.join("hookfail.pid");
    let o = b.create_with(&["--pid-file", pidfile.to_str().unwrap()]);
    o.assert_fail();
    o.assert_one_line_error(&["hook", "createRuntime"]);
    ctx.assert_no_trace(&o, &b, &[], Some(&pidfile));
}

fn failing_hook_leaves_nothing(name: &str, hook: &str) {
    let ctx = Ctx::new(name);
    let mut b = sh(&ctx, "true");
    b.set(
        &format!("/hooks/{hook}"),
        json!([{"path": "/bin/sh", "args": ["sh", "-c", "exit 3"]}]),
    );
    let pidfile = ctx.dir.join("hookfail.pid");
    let o = b.create_with(&["--pid-file", pidfile.to_str().unwrap()]);
    o.assert_fail();
    o.assert_one_line_error(&["hook", hook]);
    ctx.assert_no_trace(&o, &b, &[], Some(&pidfile));
}

#[test]
fn failing_prestart_hook_fails_create_and_leaves_nothing() {
    failing_hook_leaves_nothing("prestartfail", "prestart");
}

#[test]
fn failing_create_container_hook_fails_create_and_leaves_nothing() {
    failing_hook_leaves_nothing("ccfail", "createContainer");
}

/// runtime-spec 1.3: a failing poststart hook makes `start` fail with an error naming the hook,
/// the container is stopped (its process killed and reaped) and the lifecycle goes on at delete:
/// the container is removed, its poststop hooks run (crun's start; runc runs poststart hooks at
/// create and destroys the container when one fails). Before, it was left `stopped` for
/// `delete` (crun's test_hooks.py "test-poststart-fail-deletes-container").
#[test]
fn failing_poststart_hook_fails_start_and_removes_the_container() {
    let ctx = Ctx::new("psfail");
    let mut b = sh(&ctx, "sleep 1000");
    let mark = ctx.scratch("poststop").join("ran");
    b.set(
        "/hooks/poststart",
        json!([{"path": "/bin/sh", "args": ["sh", "-c", "exit 3"]}]),
    );
    b.set(
        "/hooks/poststop",
        json!([{"path": "/bin/sh", "args": ["sh", "-c", format!("touch {}", mark.display())]}]),
    );
    b.create().assert_ok();
    let pid = b.pid();
    let o = b.start();
    o.assert_fail();
    o.assert_one_line_error(&["hook", "poststart"]);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z ")),
        "the container's process {pid} still runs after its poststart hook failed"
    );
    assert!(
        mark.exists(),
        "the poststop hook should have run: {}",
        o.describe()
    );
    ctx.assert_no_trace(&o, &b, &[], None);
    // As runc and crun: deleting what is gone is an error, unless --force.
    b.delete().assert_fail();
    ctx.rt(&["delete", "--force", &b.id]).assert_ok();
}

/// `run` (foreground and -d) with a failing poststart hook: an error naming the hook, and
/// nothing left behind (runc's run destroys the container).
#[test]
fn failing_poststart_hook_fails_run_and_leaves_nothing() {
    for (name, detach) in [("psrun", false), ("psrund", true)] {
        let ctx = Ctx::new(name);
        let mut b = sh(&ctx, "sleep 1000");
        b.set(
            "/hooks/poststart",
            json!([{"path": "/bin/sh", "args": ["sh", "-c", "exit 4"]}]),
        );
        let t = std::time::Instant::now();
        let o = if detach { b.run_with(&["-d"]) } else { b.run() };
        o.assert_fail();
        o.assert_one_line_error(&["hook", "poststart"]);
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "{name}: run waited for the container: {:?}",
            t.elapsed()
        );
        ctx.assert_no_trace(&o, &b, &[], None);
    }
}

/// A `/dev` mount with `ro` (runc's "runc run [ro /dev mount]"): sprout failed with
/// "creating /dev/pts in the rootfs: Read-only file system". Now, as runc, /dev is mounted
/// read-write, its devices, /dev/pts and symlinks are made, and it is remounted read-only
/// before the process runs.
#[test]
fn read_only_dev_mount_is_set_up_then_made_read_only() {
    let ctx = Ctx::new("rodev");
    let mut b = sh(
        &ctx,
        "grep ' /dev ' /proc/self/mounts; \
         [ -c /dev/null ] && [ -d /dev/pts ] && [ -e /dev/ptmx ] && echo devices-ok; \
         echo x > /dev/null && echo null-ok; \
         if touch /dev/new 2>/dev/null; then echo writable; else echo read-only; fi",
    );
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    let dev = mounts
        .iter_mut()
        .find(|m| m["destination"] == "/dev")
        .expect("the test bundle mounts /dev");
    dev["options"].as_array_mut().unwrap().push(json!("ro"));
    let out = b.run_ok();
    let l = lines(&out);
    assert!(
        l.first().is_some_and(|m| m
            .split(' ')
            .nth(3)
            .is_some_and(|o| o.split(',').any(|f| f == "ro"))),
        "/dev should be mounted read-only: {out}"
    );
    for want in ["devices-ok", "null-ok", "read-only"] {
        assert!(l.contains(&want), "{want}: {out}");
    }
}

#[test]
fn hook_timeout_is_enforced() {
    let ctx = Ctx::new("hooktimeout");
    let mut b = sh(&ctx, "true");
    b.set(
        "/hooks/createRuntime",
        json!([{"path": "/bin/sleep", "args": ["sleep", "30"], "timeout": 1}]),
    );
    let start = std::time::Instant::now();
    let o = b.create();
    o.assert_fail();
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "hook timeout of 1s not enforced: {:?}",
        start.elapsed()
    );
    ctx.assert_no_trace(&o, &b, &[], None);
}

#[test]
fn default_mounts_present() {
    let ctx = Ctx::new("defmounts");
    let b = sh(&ctx, "cat /proc/self/mountinfo");
    let out = b.run_ok();
    let find = |dest: &str| -> (Vec<String>, String) {
        let l = out
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some(dest))
            .unwrap_or_else(|| panic!("{dest} not mounted:\n{out}"));
        let (pre, post) = l.split_once(" - ").unwrap();
        let opts = pre
            .split(' ')
            .nth(5)
            .unwrap()
            .split(',')
            .map(str::to_string)
            .collect();
        (opts, post.split(' ').next().unwrap().to_string())
    };
    for (dest, fstype) in [
        ("/proc", "proc"),
        ("/dev", "tmpfs"),
        ("/dev/pts", "devpts"),
        ("/dev/shm", "tmpfs"),
        ("/dev/mqueue", "mqueue"),
        ("/sys", "sysfs"),
    ] {
        let (_, t) = find(dest);
        assert_eq!(t, fstype, "{dest}");
    }
    let (sys_opts, _) = find("/sys");
    assert!(
        sys_opts.contains(&"ro".to_string()),
        "/sys must be ro: {sys_opts:?}"
    );
    let (shm_opts, _) = find("/dev/shm");
    for o in ["nosuid", "nodev", "noexec"] {
        assert!(
            shm_opts.contains(&o.to_string()),
            "/dev/shm {o}: {shm_opts:?}"
        );
    }
    // The cgroup mount: something is mounted at /sys/fs/cgroup or below, read-only.
    let cg: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|m| m.starts_with("/sys/fs/cgroup"))
        })
        .collect();
    assert!(!cg.is_empty(), "no cgroup mount:\n{out}");
}

#[test]
fn bind_mount_type_none_with_options() {
    // containerd/CRI-style: "type": "none" and the bind given in options.
    let ctx = Ctx::new("bindnone");
    let host = ctx.scratch("none");
    fs::write(host.join("f"), "typed-none\n").unwrap();
    let mut b = sh(
        &ctx,
        "cat /n/f; grep ' /n ' /proc/self/mountinfo | cut -d' ' -f6",
    );
    b.add_mount(
        json!({"destination": "/n", "type": "none", "source": host.to_str().unwrap(),
        "options": ["rbind", "rprivate", "nosuid", "nodev", "ro"]}),
    );
    let out = b.run_ok();
    let l = lines(&out);
    assert_eq!(l[0], "typed-none");
    let opts: Vec<&str> = l[1].split(',').collect();
    for o in ["ro", "nosuid", "nodev"] {
        assert!(opts.contains(&o), "{o} missing: {out}");
    }
}

#[test]
fn bind_mount_without_type() {
    let ctx = Ctx::new("bindnotype");
    let host = ctx.scratch("notype");
    fs::write(host.join("f"), "no-type\n").unwrap();
    let mut b = sh(&ctx, "cat /nt/f");
    b.add_mount(
        json!({"destination": "/nt", "source": host.to_str().unwrap(), "options": ["rbind", "ro"]}),
    );
    assert_eq!(b.run_ok(), "no-type\n");
}

fn cgroup_file(id: &str, names: &[&str]) -> Option<String> {
    for d in cgroup_dirs(id) {
        for n in names {
            if let Ok(s) = fs::read_to_string(d.join(n)) {
                return Some(s.trim().to_string());
            }
        }
    }
    None
}

#[test]
fn resources_memory_and_pids_limits() {
    if skip_without_controllers(&["memory", "pids"]) {
        return;
    }
    let ctx = Ctx::new("resources");
    let mut b = ctx.bundle(&["sleep", "1000"]);
    b.set(
        "/linux/resources/memory",
        json!({"limit": 64 * 1024 * 1024}),
    );
    b.set("/linux/resources/pids", json!({"limit": 123}));
    b.create().assert_ok();
    assert_eq!(
        cgroup_file(&b.id, &["memory.limit_in_bytes", "memory.max"]).as_deref(),
        Some("67108864"),
        "memory limit in the container's cgroup"
    );
    assert_eq!(
        cgroup_file(&b.id, &["pids.max"]).as_deref(),
        Some("123"),
        "pids limit in the container's cgroup"
    );
}

#[test]
fn cgroup_namespace() {
    let ctx = Ctx::new("cgroupns");
    let mut b = sh(&ctx, "cat /proc/self/cgroup; readlink /proc/self/ns/cgroup");
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "cgroup"}));
    let out = b.run_ok();
    let host_ns = fs::read_link("/proc/self/ns/cgroup").unwrap();
    let l = lines(&out);
    assert_ne!(
        *l.last().unwrap(),
        host_ns.to_string_lossy(),
        "cgroup namespace should be new"
    );
    for line in &l[..l.len() - 1] {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        assert_eq!(
            path, "/",
            "inside a cgroup namespace the container's cgroup is the root: {out}"
        );
    }
}

#[test]
fn args_are_passed_verbatim() {
    let ctx = Ctx::new("argv");
    let b = ctx.bundle(&[
        "sh",
        "-c",
        "for a in \"$@\"; do echo \"[$a]\"; done",
        "sh",
        "a b",
        "",
        "*",
        "$HOME",
        "ü\"'",
    ]);
    assert_eq!(
        lines(&b.run_ok()),
        vec!["[a b]", "[]", "[*]", "[$HOME]", "[ü\"']"]
    );
}

/// runc sets HOME from /etc/passwd when process.env has none; Kubernetes
/// (CRI) relies on it.
#[test]
fn home_defaults_from_passwd() {
    let ctx = Ctx::new("home");
    let mut b = sh(&ctx, "echo $HOME");
    b.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    assert_eq!(b.run_ok(), "/home/user\n");
    let b = sh(&ctx, "echo $HOME");
    assert_eq!(b.run_ok(), "/root\n");
    let mut b = sh(&ctx, "echo $HOME");
    b.add_env("HOME=/custom");
    assert_eq!(b.run_ok(), "/custom\n");
}

/// Without a cgroup namespace on cgroup v2, /sys/fs/cgroup is a cgroup2 mount of the whole tree,
/// as runc makes it, so /sys/fs/cgroup + the path in /proc/self/cgroup is the container's own
/// cgroup (a privileged pod's engine, systemd or a nested runtime find their cgroup that way).
/// Before: only the container's cgroup was bound at /sys/fs/cgroup, and that path did not exist.
#[test]
fn cgroup_mount_without_a_cgroup_namespace_has_the_containers_path() {
    if skip_unless_pure_v2() {
        return;
    }
    let ctx = Ctx::new("cgnsless");
    let mut b = sh(
        &ctx,
        "p=$(cut -d: -f3 /proc/self/cgroup); echo $p; \
         test -e /sys/fs/cgroup$p/cgroup.procs && echo found; \
         grep -c \"^$$\\$\" /sys/fs/cgroup$p/cgroup.procs",
    );
    b.remove_namespace("cgroup");
    let out = b.run_ok();
    let l = lines(&out);
    assert!(l[0].len() > 1, "the container's cgroup path: {out}");
    assert_eq!(&l[1..], ["found", "1"], "{out}");
}

/// Without a cgroup namespace of its own, the container's /sys/fs/cgroup is the host's cgroup2
/// hierarchy bound, not mounted anew: every cgroup2 mount made in the initial cgroup namespace
/// sets the hierarchy's options for the whole host (the kernel's apply_cgroup_root_flags), and a
/// container's plain `cgroup` mount cleared the `nsdelegate,memory_recursiveprot` systemd mounts
/// it with (runc issue 5258: runc and crun still do). The host's options are the same after the
/// container ran, and the container's view is the whole tree, read-only.
#[test]
fn cgroup_mount_without_a_cgroup_namespace_keeps_the_hosts_cgroup2_options() {
    if skip_unless_pure_v2() {
        return;
    }
    let Some(before) = host_cgroup2_options() else {
        eprintln!("skipped: no cgroup2 mount at /sys/fs/cgroup in /proc/self/mountinfo");
        return;
    };
    if !["nsdelegate", "memory_recursiveprot", "memory_localevents"]
        .iter()
        .any(|o| before.split(',').any(|x| x == *o))
    {
        eprintln!(
            "skipped: the host's cgroup2 has no option a new mount would clear ({before}; \
             systemd mounts it with nsdelegate,memory_recursiveprot, which runc, crun or a \
             sprout before ca04c12 clear when they run a container without a cgroup namespace)"
        );
        return;
    }
    let ctx = Ctx::new("cgnsopts");
    let mut b = sh(
        &ctx,
        "grep ' /sys/fs/cgroup ' /proc/self/mountinfo; \
         p=$(cut -d: -f3 /proc/self/cgroup); test -e /sys/fs/cgroup$p/cgroup.procs && echo found; \
         mkdir /sys/fs/cgroup$p/x 2>/dev/null || echo refused",
    );
    b.remove_namespace("cgroup");
    let out = b.run_ok();
    assert_eq!(
        host_cgroup2_options().as_deref(),
        Some(before.as_str()),
        "the host's cgroup2 options changed: {out}"
    );
    let l = lines(&out);
    let f: Vec<&str> = l[0].split_whitespace().collect();
    assert_eq!(
        f[3], "/",
        "the container's cgroup mount shows the whole tree: {out}"
    );
    assert!(
        f[5].split(',').any(|o| o == "ro") && l[0].contains(" - cgroup2 "),
        "a read-only cgroup2 mount: {out}"
    );
    assert_eq!(&l[1..], ["found", "refused"], "{out}");
}
