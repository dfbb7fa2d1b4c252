//! `spec`: the default config.json, the same shape `runc spec` writes (and `--rootless`):
//! runc's libcontainer/specconv `Example` (a cgroup namespace on a cgroup v2 host) and
//! `ToRootless` (no network namespace, a user namespace mapping root to the caller's euid and
//! egid, /sys bind-mounted, no uid=/gid= mount options, no resources).

/// The spec for this host and caller.
pub fn default_spec(rootless: bool) -> serde_json::Value {
    let v2 = matches!(
        sprout_cgroups::Layout::detect(),
        Ok(sprout_cgroups::Layout::V2)
    );
    // SAFETY: no preconditions, cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    spec_for(rootless, v2, euid, egid)
}

/// The spec given whether the host is cgroup v2 only and the caller's euid/egid.
pub fn spec_for(rootless: bool, cgroup2: bool, euid: u32, egid: u32) -> serde_json::Value {
    let caps = serde_json::json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]);
    let mut namespaces = vec![
        serde_json::json!({"type": "pid"}),
        serde_json::json!({"type": "ipc"}),
        serde_json::json!({"type": "uts"}),
        serde_json::json!({"type": "mount"}),
    ];
    if !rootless {
        namespaces.insert(1, serde_json::json!({"type": "network"}));
    }
    if cgroup2 {
        namespaces.push(serde_json::json!({"type": "cgroup"}));
    }
    if rootless {
        namespaces.push(serde_json::json!({"type": "user"}));
    }
    let mut mounts = vec![
        serde_json::json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        serde_json::json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        serde_json::json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        serde_json::json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        serde_json::json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        serde_json::json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
        serde_json::json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}),
    ];
    if rootless {
        mounts[2]["options"] = serde_json::json!([
            "nosuid",
            "noexec",
            "newinstance",
            "ptmxmode=0666",
            "mode=0620"
        ]);
        mounts[5] = serde_json::json!({"destination": "/sys", "type": "none", "source": "/sys", "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]});
    }
    let mut linux = serde_json::json!({
        "namespaces": namespaces,
        "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    });
    if rootless {
        linux["uidMappings"] = serde_json::json!([{"containerID": 0, "hostID": euid, "size": 1}]);
        linux["gidMappings"] = serde_json::json!([{"containerID": 0, "hostID": egid, "size": 1}]);
    } else {
        linux["resources"] = serde_json::json!({"devices": [{"allow": false, "access": "rwm"}]});
    }
    serde_json::json!({
        "ociVersion": crate::config::OCI_VERSION,
        "process": {
            "terminal": true,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "sprout",
        "mounts": mounts,
        "linux": linux
    })
}

#[cfg(test)]
mod tests {
    use super::spec_for;
    use serde_json::json;

    fn ns(v: &serde_json::Value) -> Vec<&str> {
        v["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn like_runc_spec() {
        let v = spec_for(false, false, 0, 0);
        assert_eq!(ns(&v), ["pid", "network", "ipc", "uts", "mount"]);
        assert_eq!(v["linux"]["resources"]["devices"][0]["access"], "rwm");
        assert!(v["process"]["capabilities"].get("ambient").is_none());
        assert_eq!(v["mounts"].as_array().unwrap().len(), 7);
        let v = spec_for(false, true, 0, 0);
        assert_eq!(ns(&v), ["pid", "network", "ipc", "uts", "mount", "cgroup"]);
    }

    #[test]
    fn like_runc_spec_rootless() {
        let v = spec_for(true, true, 1000, 1001);
        assert_eq!(ns(&v), ["pid", "ipc", "uts", "mount", "cgroup", "user"]);
        assert_eq!(
            v["linux"]["uidMappings"],
            json!([{"containerID": 0, "hostID": 1000, "size": 1}])
        );
        assert_eq!(
            v["linux"]["gidMappings"],
            json!([{"containerID": 0, "hostID": 1001, "size": 1}])
        );
        assert!(v["linux"].get("resources").is_none());
        let mounts = v["mounts"].as_array().unwrap();
        // The 7 mounts of the default spec: /sys an rbind, /sys/fs/cgroup kept, no gid=5.
        assert_eq!(mounts.len(), 7);
        assert_eq!(
            mounts[5],
            json!({"destination": "/sys", "type": "none", "source": "/sys",
                   "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]})
        );
        assert_eq!(mounts[6]["destination"], "/sys/fs/cgroup");
        assert!(!mounts
            .iter()
            .any(
                |m| m["options"].as_array().is_some_and(|o| o.iter().any(|o| o
                    .as_str()
                    .is_some_and(|o| o.starts_with("gid=") || o.starts_with("uid="))))
            ));
        assert_eq!(
            ns(&spec_for(true, false, 1000, 1000)),
            ["pid", "ipc", "uts", "mount", "user"]
        );
    }
}
