//! The start path's ordering and batching (docs/performance.md): on cgroup v1 and hybrid hosts
//! the container's cgroups are made, configured and joined after clone, while the init sets up
//! its mounts; the init waits for them only at the cgroup mount (and before exec). These tests
//! check what that must not change: the container runs in its own cgroups with its limits from
//! its first instruction, sees them read-only at /sys/fs/cgroup (cgroup v2 without a cgroup
//! namespace: the whole tree, as runc mounts it, its own cgroup at the path /proc/self/cgroup
//! gives), and a failure in the cgroup set-up after clone leaves no cgroup, process, state or
//! mount behind.

use serde_json::json;
use sprout_integration_tests::*;
use std::fs;

fn own_hierarchies() -> Vec<String> {
    let s = fs::read_to_string("/proc/self/cgroup").unwrap();
    let hybrid = std::path::Path::new("/sys/fs/cgroup/unified").exists();
    s.lines()
        .filter_map(|l| {
            let ctrls = l.split(':').nth(1)?;
            let name = if ctrls.is_empty() {
                if !hybrid {
                    return None;
                }
                "unified".to_string()
            } else {
                ctrls.strip_prefix("name=").unwrap_or(ctrls).to_string()
            };
            std::path::Path::new("/sys/fs/cgroup")
                .join(&name)
                .is_dir()
                .then_some(name)
        })
        .collect()
}

fn is_v1() -> bool {
    std::path::Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists()
}

#[test]
fn first_instruction_runs_in_own_cgroups_with_limits_and_a_read_only_cgroup_mount() {
    if skip_without_controllers(&["pids"]) {
        return;
    }
    let ctx = Ctx::new("sp-cgmount");
    let mut b = ctx.bundle(&[
        "sh",
        "-c",
        "cat /proc/self/cgroup; echo ---; ls /sys/fs/cgroup; echo ---; \
         cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || \
         cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/pids.max; echo ---; \
         mkdir /sys/fs/cgroup/x 2>/dev/null && echo writable || echo read-only",
    ]);
    b.set("/linux/resources/pids", json!({"limit": 77}));
    let out = b.run_ok();
    let parts: Vec<&str> = out.split("---\n").collect();
    assert_eq!(parts.len(), 4, "{out}");
    let want = format!("sprout-test/{}", b.id);
    for line in parts[0].lines() {
        // A runtime that cannot see cgroup2 (an emulated v1-only host) leaves it alone.
        if line.starts_with("0::") && ctx.emulating_pure_v1() {
            continue;
        }
        assert!(
            line.ends_with(&want),
            "the container's process is not in its own cgroup: {line:?}\n{out}"
        );
    }
    assert_eq!(parts[2].trim(), "77", "pids.max seen inside: {out}");
    assert_eq!(parts[3].trim(), "read-only", "{out}");
    if is_v1() {
        let mut seen: Vec<&str> = parts[1].lines().collect();
        seen.sort();
        let mut want = own_hierarchies();
        if ctx.emulating_pure_v1() {
            want.retain(|h| h != "unified");
        }
        want.sort();
        assert_eq!(seen, want, "one bind per hierarchy under /sys/fs/cgroup");
    }
}

#[test]
fn v1_init_joins_its_cgroups_itself_unless_it_cannot() {
    // On v1/hybrid hosts the init writes "0" to each v1 `tasks` at GO and is cloned into the
    // cgroup2 leaf (no pid written to a cgroup.procs: create.rs); in a user namespace the
    // runtime moves it as before. Either way it is in every cgroup of its own.
    if !is_v1() {
        eprintln!("skipped: not a cgroup v1 or hybrid host");
        return;
    }
    let ctx = Ctx::new("sp-selfjoin");
    for userns in [false, true] {
        let mut b = ctx.bundle(&["cat", "/proc/self/cgroup"]);
        if userns {
            b.in_user_namespace(100000, 200000);
        }
        b.write_config();
        let o = ctx.rt(&["--trace", "run", "--bundle", &b.bundle_arg(), &b.id]);
        o.assert_ok();
        let want = format!("sprout-test/{}", b.id);
        let lines: Vec<&str> = o.stdout.lines().collect();
        assert_eq!(lines.len(), own_hierarchies().len(), "{}", o.describe());
        for line in &lines {
            if line.starts_with("0::") && ctx.emulating_pure_v1() {
                continue;
            }
            assert!(
                line.ends_with(&want),
                "userns {userns}: not in its own cgroup: {line:?}\n{}",
                o.describe()
            );
        }
        if !o.stderr.contains("sprout_trace") {
            eprintln!(
                "skipped (trace part): {} prints no phase trace",
                runtime_name()
            );
            return;
        }
        assert_eq!(
            o.stderr.contains("\"init.cgroup_join\""),
            !userns,
            "userns {userns}: the init joined itself only without a user namespace: {}",
            o.describe()
        );
    }
}

#[test]
fn container_keeps_the_callers_cpu_affinity() {
    // The runtime starts the init on another CPU than its own (pinned to one CPU until the
    // cgroups are joined): none of that may reach the container. With no cpuset limit its
    // allowed CPUs are the caller's (the container's cpuset is a copy of the caller's).
    let ours = fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Cpus_allowed_list:")
                .map(|v| v.trim().to_string())
        })
        .unwrap();
    let ctx = Ctx::new("sp-affinity");
    let b = ctx.bundle(&["sh", "-c", "grep Cpus_allowed_list: /proc/self/status"]);
    for _ in 0..3 {
        let out = b.run_ok();
        let theirs = out.split(':').nth(1).map(str::trim).unwrap_or_default();
        assert_eq!(theirs, ours, "{out}");
    }
}

#[test]
fn cgroup_failure_after_clone_leaves_nothing_behind() {
    // cpuset.cpus naming a CPU this machine lacks passes validation and is refused by the
    // kernel at apply time, after clone on v1/hybrid hosts: the init must be killed and every
    // cgroup directory, the state and the pid file removed.
    let ctx = Ctx::new("sp-cgfail");
    for cmd in ["create", "run"] {
        let mut b = ctx.bundle(&["true"]);
        b.set("/linux/resources/cpu", json!({"cpus": "4000"}));
        b.write_config();
        let pidfile = ctx.dir.join(format!("{}.pid", b.id));
        let before = mount_snapshot();
        let bd = b.bundle_arg();
        let o = ctx.rt(&[
            cmd,
            "--bundle",
            &bd,
            "--pid-file",
            pidfile.to_str().unwrap(),
            &b.id,
        ]);
        o.assert_fail();
        o.assert_one_line_error(&["cpus"]);
        ctx.assert_no_trace(&o, &b, &[], Some(&pidfile));
        assert!(!pidfile.exists(), "pid file written by a failed {cmd}");
        let new = new_mounts_since(&before, &[&b.id, ctx.root.to_str().unwrap()]);
        assert!(new.is_empty(), "mounts left by a failed {cmd}: {new:?}");
    }
}

#[test]
fn v1_device_rules_all_written() {
    // devices.allow/deny are written through one open file each, one rule per write(2).
    if !std::path::Path::new("/sys/fs/cgroup/devices").is_dir() {
        eprintln!("skipped: no v1 devices hierarchy");
        return;
    }
    let ctx = Ctx::new("sp-devices");
    let b = ctx.bundle(&["sleep", "1000"]);
    b.create().assert_ok();
    let list = cgroup_dirs(&b.id)
        .into_iter()
        .find_map(|d| fs::read_to_string(d.join("devices.list")).ok())
        .expect("the container's devices cgroup");
    let rules: Vec<&str> = list.lines().collect();
    for want in [
        "c *:* m",
        "b *:* m",
        "c 1:3 rwm",
        "c 1:5 rwm",
        "c 1:7 rwm",
        "c 1:8 rwm",
        "c 1:9 rwm",
        "c 5:0 rwm",
        "c 5:2 rwm",
        "c 10:200 rwm",
        "c 136:* rwm",
    ] {
        assert!(
            rules.contains(&want),
            "{want:?} missing from devices.list: {rules:?}"
        );
    }
    assert!(
        !rules.contains(&"a *:* rwm"),
        "the leading deny-all was not applied: {rules:?}"
    );
    assert_eq!(rules.len(), 11, "exactly the default rules: {rules:?}");
}

fn ns_ino(path: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).unwrap().ino()
}

/// Inode of the user namespace owning the namespace at `path` (ioctl NS_GET_USERNS).
fn owner_userns_ino(path: &str) -> u64 {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    let f = fs::File::open(path).unwrap();
    // SAFETY: ioctl(NS_GET_USERNS) takes no argument and returns a new fd; `f` is open.
    let fd = unsafe {
        libc::ioctl(f.as_raw_fd(), 0xb701 /* NS_GET_USERNS */)
    };
    assert!(fd >= 0, "NS_GET_USERNS on {path}");
    // SAFETY: NS_GET_USERNS succeeded, so `fd` is a new descriptor that nothing else owns.
    let owner = fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    owner.metadata().unwrap().ino()
}

#[test]
fn network_namespace_made_by_the_init_is_new_up_and_owned_like_the_others() {
    // The init unshares its network namespace instead of getting it from clone3: it must still
    // be a new one, with lo up, owned by the same user namespace as the init's other new
    // namespaces (the host's, or the container's own user namespace).
    let ctx = Ctx::new("sp-netns");
    for userns in [false, true] {
        let mut b = ctx.bundle(&["sleep", "1000"]);
        if userns {
            b.in_user_namespace(100000, 200000);
        }
        b.create().assert_ok();
        let pid = b.state()["pid"].as_i64().unwrap();
        let net = format!("/proc/{pid}/ns/net");
        assert_ne!(
            ns_ino(&net),
            ns_ino("/proc/self/ns/net"),
            "userns {userns}: new netns"
        );
        // The same owner as the uts namespace, which clone3 made.
        assert_eq!(
            owner_userns_ino(&net),
            owner_userns_ino(&format!("/proc/{pid}/ns/uts")),
            "userns {userns}: netns owner"
        );
        if userns {
            assert_eq!(
                owner_userns_ino(&net),
                ns_ino(&format!("/proc/{pid}/ns/user")),
                "the netns belongs to the container's user namespace"
            );
        }
        // lo up: the kernel then has the local 127.0.0.1 route in the namespace's FIB.
        let fib = fs::read_to_string(format!("/proc/{pid}/net/fib_trie")).unwrap();
        assert!(
            fib.contains("127.0.0.1"),
            "userns {userns}: lo is not up:\n{fib}"
        );
        b.kill("KILL").assert_ok();
        b.wait_status("stopped");
    }
}

/// A new network namespace in the runtime's own user namespace is made by a helper beside the
/// rest of the start (crates/runtime/src/netns.rs) and joined by the init (on pure v2 the helper
/// starts in the container's cgroup). What the container gets must be what the init would have
/// made: a namespace of its own (not another container's, not the host's), lo up in it, and a
/// sysfs that shows that namespace (sysfs is tied to its mounter's network namespace; the init
/// joins the helper's namespace late, just before that mount). With a new user namespace or the
/// host's network, no helper. On pure v2 nothing of the helper is left in the container's cgroup
/// once it is created: the init alone.
#[test]
fn network_namespace_from_the_helper_is_the_containers_own() {
    let ctx = Ctx::new("sp-netns-helper");
    let host_net = fs::read_link("/proc/self/ns/net").unwrap();
    let host_net = host_net.to_str().unwrap();
    let pure_v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let helper_used = |o: &Output| o.stderr.contains("\"netns.helper\"");
    // A container that keeps its namespace while the others start (a namespace's inode number
    // is reused once it is freed).
    let a = ctx.bundle(&["sleep", "1000"]);
    a.write_config();
    let o = ctx.rt(&["--trace", "create", "--bundle", &a.bundle_arg(), &a.id]);
    o.assert_ok();
    if !o.stderr.contains("sprout_trace") {
        eprintln!("skipped: {} prints no phase trace", runtime_name());
        return;
    }
    assert!(helper_used(&o), "create: {}", o.describe());
    let a_pid = a.state()["pid"].as_i64().unwrap();
    if pure_v2 {
        let cg = fs::read_to_string(format!("/proc/{a_pid}/cgroup")).unwrap();
        let path = cg.trim().strip_prefix("0::").unwrap();
        let procs = fs::read_to_string(format!("/sys/fs/cgroup{path}/cgroup.procs")).unwrap();
        assert_eq!(
            procs.split_whitespace().collect::<Vec<_>>(),
            [a_pid.to_string()],
            "create: the init alone in {path}"
        );
    }
    let a_net = fs::read_link(format!("/proc/{a_pid}/ns/net")).unwrap();
    let a_net = a_net.to_str().unwrap().to_string();
    assert_ne!(a_net, host_net, "create: a new netns");

    let script = "ls /sys/class/net; cat /sys/class/net/lo/flags; readlink /proc/self/ns/net";
    for (case, userns, host_network) in [
        ("run", false, false),
        ("userns", true, false),
        ("host network", false, true),
    ] {
        let mut b = ctx.bundle(&["sh", "-c", script]);
        if userns {
            b.in_user_namespace(100000, 200000);
        }
        if host_network {
            b.remove_namespace("network");
        }
        b.write_config();
        let o = ctx.rt(&["--trace", "run", "--bundle", &b.bundle_arg(), &b.id]);
        o.assert_ok();
        let lines: Vec<&str> = o.stdout.lines().collect();
        let ns = lines.last().copied().unwrap_or_default();
        if host_network {
            assert_eq!(ns, host_net, "{case}: the host's netns");
            assert!(
                !helper_used(&o),
                "{case}: no helper without a new netns: {}",
                o.describe()
            );
            continue;
        }
        assert_eq!(
            &lines[..lines.len() - 1],
            ["lo", "0x9"],
            "{case}: sysfs shows the container's namespace, lo up (IFF_UP|IFF_LOOPBACK): {}",
            o.describe()
        );
        assert!(
            ns != host_net && ns != a_net,
            "{case}: a netns of its own: {ns}"
        );
        assert_eq!(
            helper_used(&o),
            !userns,
            "{case}: the helper made it (no user namespace): {}",
            o.describe()
        );
    }
    a.kill("KILL").assert_ok();
    a.wait_status("stopped");
}
