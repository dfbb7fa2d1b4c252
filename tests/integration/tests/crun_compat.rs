//! Divergences found by running crun's own Python test suite (tests/test_*.py) against sprout,
//! with crun and runc as baselines (issue #16), each checked on a real container. See
//! docs/compatibility.md ("crun's test suite").

use serde_json::json;
use sprout_integration_tests::*;
use std::time::Duration;

// ---- kernel.domainname sysctl (crun's test_domainname.py) ------------------------------------

/// `kernel.domainname` is namespaced by the uts namespace, and Docker's `--domainname` is written
/// as that sysctl: with a uts namespace of its own it is allowed (runc), also next to a
/// "domainname" field of the same value; a "domainname" field of another value is refused, as
/// crun refuses it (one of the two would silently win).
#[test]
fn domainname_sysctl_is_allowed_with_a_uts_namespace() {
    let ctx = Ctx::new("sysctldomain");

    let mut b = ctx.bundle(&["cat", "/proc/sys/kernel/domainname"]);
    b.set(
        "/linux/sysctl",
        json!({ "kernel.domainname": "from-sysctl" }),
    );
    let o = b.run();
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "from-sysctl", "{}", o.describe());

    let mut b = ctx.bundle(&["cat", "/proc/sys/kernel/domainname"]);
    b.set("/domainname", json!("same"));
    b.set("/linux/sysctl", json!({ "kernel.domainname": "same" }));
    let o = b.run();
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "same", "{}", o.describe());

    let mut b = ctx.bundle(&["true"]);
    b.set("/domainname", json!("field"));
    b.set("/linux/sysctl", json!({ "kernel.domainname": "sysctl" }));
    let o = b.create();
    o.assert_fail();
    o.assert_one_line_error(&["linux.sysctl", "kernel.domainname", "domainname"]);
    assert!(
        ctx.status(&b.id).is_none(),
        "nothing left: {}",
        o.describe()
    );

    // Without a uts namespace of its own the write would change the host's: refused.
    let mut b = ctx.bundle(&["true"]);
    b.remove_namespace("uts");
    b.set("/hostname", json!(null));
    b.set("/linux/sysctl", json!({ "kernel.domainname": "host" }));
    let o = b.create();
    o.assert_fail();
    o.assert_one_line_error(&["linux.sysctl", "kernel.domainname"]);
    assert!(
        ctx.status(&b.id).is_none(),
        "nothing left: {}",
        o.describe()
    );
}

// ---- stdio owned by the process's user (crun's test_uid_gid.py) ------------------------------

/// The process's stdio (here the harness's pipes) is given to `process.user.uid` before the
/// switch, owner only, /dev/null left alone: runc's fixStdioPermissions, for the init and for
/// `exec`. sprout did it for a pty only, so a non-root process could not e.g. reopen its
/// `/proc/self/fd/1`. crun's "regular-files-chowned" (crun gives the group too).
#[test]
fn stdio_is_given_to_the_process_user() {
    let ctx = Ctx::new("stdioown");
    const SHOW: &str = "stat -L -c %u:%g /proc/self/fd/1 /proc/self/fd/2; \
                        [ -c /proc/self/fd/0 ] && stat -L -c null:%u /proc/self/fd/0; true";
    let mut b = ctx.bundle(&["sh", "-c", SHOW]);
    b.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    let o = b.run();
    o.assert_ok();
    let l: Vec<&str> = o.stdout.lines().collect();
    // The harness's pipes, made by root: the owner changes, the group stays.
    assert_eq!(&l[..2], ["1000:0", "1000:0"], "{}", o.describe());
    if let Some(null) = l.get(2) {
        // The harness's stdin is the host's /dev/null: never chowned.
        let host = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/dev/null").unwrap());
        assert_eq!(
            *null,
            format!("null:{host}"),
            "/dev/null is never chowned: {}",
            o.describe()
        );
    }

    // exec --user: the exec'd process's stdio likewise.
    let b = ctx.bundle(&["sleep", "1000"]);
    b.run_with(&["-d"]).assert_ok();
    let o = b.exec(&["--user", "1001:1001"], &["sh", "-c", SHOW]);
    o.assert_ok();
    let l: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(&l[..2], ["1001:0", "1001:0"], "{}", o.describe());
}

// ---- device nodes bound in a user namespace (crun's test_devices.py) -------------------------

/// In a user namespace the default devices are bind mounts of the host's nodes (mknod is not
/// permitted there), and each bind is nosuid and noexec, as crun makes them; they had the host
/// /dev's flags (crun's "userns-precreated-devices-flags").
#[test]
fn device_binds_in_a_user_namespace_are_nosuid_noexec() {
    let ctx = Ctx::new("usernsdevflags");
    let mut b = ctx.bundle(&["cat", "/proc/self/mountinfo"]);
    b.in_user_namespace(0, 0);
    let o = b.run();
    o.assert_ok();
    let mut seen = Vec::new();
    for l in o.stdout.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let dev = f[4];
        if [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/tty",
            "/dev/random",
            "/dev/urandom",
        ]
        .contains(&dev)
        {
            let opts: Vec<&str> = f[5].split(',').collect();
            assert!(
                opts.contains(&"nosuid") && opts.contains(&"noexec"),
                "{dev} should be nosuid,noexec: {l}"
            );
            seen.push(dev);
        }
    }
    assert_eq!(seen.len(), 6, "six default devices bound: {}", o.describe());
}

// ---- a new user namespace without id mappings (crun's test_mounts.py) ------------------------

/// A new user namespace without uidMappings/gidMappings is refused at create with runc's words,
/// naming the field, and nothing is left (crun maps the caller's ids instead; sprout failed late
/// with "becoming root in the user namespace (gid): Invalid argument"). A user namespace joined
/// by path needs no mappings.
#[test]
fn new_user_namespace_without_mappings_is_refused_naming_the_field() {
    let ctx = Ctx::new("usernsnomap");
    let mut b = ctx.bundle(&["true"]);
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    let o = b.create();
    o.assert_fail();
    o.assert_one_line_error(&[
        "linux.uidMappings",
        "no namespace path to join nor mappings",
    ]);
    ctx.assert_no_trace(&o, &b, &[], None);
}

// ---- a bind mount on /dev (crun's test_devices.py deny-devices) ------------------------------

/// A bind mount on /dev (here a directory standing for the host's /dev) gets no device nodes,
/// symlinks or `linux.devices` made in it, as runc's needsSetupDev: sprout used to unlink and
/// mknod the default devices there, which with `"source": "/dev"` replaced the host's own
/// /dev/null, /dev/zero... (found when crun's deny-devices test recreated the host's /dev/null).
#[test]
fn a_bind_mount_on_dev_gets_no_devices_made_in_it() {
    let ctx = Ctx::new("devbind");
    let host_dev = ctx.scratch("hostdev");
    std::fs::write(
        host_dev.join("null"),
        "a regular file standing for a node\n",
    )
    .unwrap();
    let mut b = ctx.bundle(&["ls", "/dev"]);
    b.add_mount(json!({"destination": "/dev", "type": "bind",
                       "source": host_dev.to_str().unwrap(), "options": ["rbind", "rw"]}));
    b.set(
        "/linux/devices",
        json!([{"path": "/dev/foo", "type": "c", "major": 1, "minor": 5}]),
    );
    // No masked paths: they are masked with /dev/null, which here is no null device and is
    // refused for it (CVE-2025-31133, tests/security cve_2025_runc.rs).
    b.set("/linux/maskedPaths", json!([]));
    let o = b.run();
    o.assert_ok();
    let meta = std::fs::symlink_metadata(host_dev.join("null")).unwrap();
    assert!(
        meta.is_file(),
        "the bound /dev's null was replaced: {}",
        o.describe()
    );
    let left: Vec<String> = std::fs::read_dir(&host_dev)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "null")
        .collect();
    assert!(
        left.is_empty(),
        "made in the bound /dev: {left:?} {}",
        o.describe()
    );
}

// ---- `state` while `create` runs (crun's test_commands.py state-created) ---------------------

/// While `create` is still running (here held in a createRuntime hook) the container does not
/// exist for `state` (nor for `list`), as with runc and crun (their state is written once the container is
/// created); once `create` returns, `state` says "created". sprout showed a passing "stopped"
/// (pid 0) or "creating", which a client polling `state` after starting `create` took for the
/// result.
#[test]
fn state_during_create_says_the_container_does_not_exist_yet() {
    let ctx = Ctx::new("statecreating");
    let dir = ctx.scratch("hook");
    let (mark, go) = (dir.join("in-hook"), dir.join("go"));
    let mut b = ctx.bundle(&["sleep", "1000"]);
    let script = format!(
        "touch {}; i=0; while [ ! -e {} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done",
        mark.display(),
        go.display()
    );
    b.set(
        "/hooks/createRuntime",
        json!([{"path": "/bin/sh", "args": ["sh", "-c", script]}]),
    );
    b.write_config();
    let bundle = b.bundle_arg();
    let create = ctx.spawn(&["create", "--bundle", &bundle, &b.id]);
    wait_for("the createRuntime hook", Duration::from_secs(10), || {
        mark.exists().then_some(())
    });
    let o = ctx.rt(&["state", &b.id]);
    // `list` does not show it either (runc lists the containers whose state it can load).
    let l = ctx.rt(&["list", "--format", "json"]);
    std::fs::write(&go, "").unwrap();
    o.assert_fail();
    o.assert_one_line_error(&["does not exist"]);
    l.assert_ok();
    assert!(
        !l.stdout.contains(&b.id),
        "list shows a container still being created: {}",
        l.stdout
    );
    create.wait(Duration::from_secs(30)).assert_ok();
    assert_eq!(b.status().as_deref(), Some("created"));
    let l = ctx.rt(&["list", "--format", "json"]);
    assert!(l.stdout.contains(&b.id), "{}", l.stdout);
}
