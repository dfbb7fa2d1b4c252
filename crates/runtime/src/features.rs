//! `features`: what this runtime implements, per the runtime-spec's features.md.

/// Whether `linux.netDevices` is implemented.
pub const NET_DEVICES: bool = true;

pub fn features_json() -> serde_json::Value {
    let caps: Vec<String> = sprout_process::all_cap_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    serde_json::json!({
        "ociVersionMin": crate::config::OCI_VERSION_MIN,
        "ociVersionMax": crate::config::OCI_VERSION,
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": crate::rootfs::option_names(),
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"],
            "capabilities": caps,
            "cgroup": { "v1": true, "v2": true, "systemd": true, "systemdUser": true, "rdma": true },
            "seccomp": {
                "enabled": true,
                "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_NOTIFY", "SCMP_ACT_TRACE", "SCMP_ACT_TRAP"],
                "operators": ["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT", "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"],
                "archs": ["SCMP_ARCH_X86", "SCMP_ARCH_X86_64", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
                "knownFlags": ["SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_SPEC_ALLOW", "SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"],
                // TSYNC: taken, and true of a single-threaded init without doing anything.
                "supportedFlags": ["SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_SPEC_ALLOW", "SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"]
            },
            "apparmor": { "enabled": std::path::Path::new("/sys/module/apparmor/parameters/enabled").exists() },
            "selinux": { "enabled": std::path::Path::new("/sys/fs/selinux/enforce").exists() },
            // Refused with an error naming linux.intelRdt (sprout has no resctrl support).
            "intelRdt": { "enabled": false, "schemata": false, "monitoring": false },
            "memoryPolicy": { "modes": crate::numa::MODES, "flags": crate::numa::FLAGS },
            "mountExtensions": { "idmap": { "enabled": true } },
            "netDevices": { "enabled": NET_DEVICES }
        },
        // Annotations of a config that change what sprout does (a "." ends a prefix): the
        // systemd driver's unit properties and criu's configuration file.
        "potentiallyUnsafeConfigAnnotations": ["org.systemd.property.", "org.criu.config"],
        "annotations": {
            // `checkpoint` and `restore` through criu (crates/runtime/src/criu), as runc.
            "org.opencontainers.runc.checkpoint.enabled": "true",
            "io.github.sprout.version": env!("CARGO_PKG_VERSION")
        }
    })
}
