//! `spec`: the default config.json, the same shape `runc spec` writes (and `--rootless`).

pub fn default_spec(rootless: bool) -> serde_json::Value {
    let caps = serde_json::json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]);
    let mut namespaces = vec![
        serde_json::json!({"type": "pid"}),
        serde_json::json!({"type": "ipc"}),
        serde_json::json!({"type": "uts"}),
        serde_json::json!({"type": "mount"}),
    ];
    if !rootless {
        namespaces.insert(1, serde_json::json!({"type": "network"}));
    } else {
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
        mounts.pop();
    }
    let mut linux = serde_json::json!({
        "namespaces": namespaces,
        "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    });
    if rootless {
        let uid = unsafe { libc::geteuid() };
        let gid = unsafe { libc::getegid() };
        linux["uidMappings"] = serde_json::json!([{"containerID": 0, "hostID": uid, "size": 1}]);
        linux["gidMappings"] = serde_json::json!([{"containerID": 0, "hostID": gid, "size": 1}]);
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
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "ambient": caps},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "sprout",
        "mounts": mounts,
        "linux": linux
    })
}
