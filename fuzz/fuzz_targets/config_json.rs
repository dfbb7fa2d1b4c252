//! config.json as hostile input: parse (serde_path_to_error over oci-spec), validate against a
//! real bundle directory, then every pure helper `create` runs on the parsed spec before touching
//! the host (mount option parsing, the device cgroup rules, the seccomp flags and cache key).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn bundle() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sprout-fuzz-bundle-{}", std::process::id()));
        std::fs::create_dir_all(d.join("rootfs")).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let spec = match sprout_runtime::config::parse_spec(data, "config.json") {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = sprout_runtime::config::validate(&spec, bundle());
    for m in spec.mounts().iter().flatten() {
        let _ = sprout_runtime::rootfs::parse_options(m.options().as_deref().unwrap_or(&[]));
    }
    if let Some(l) = spec.linux() {
        if let Some(r) = l.resources() {
            // The rules the runtime applies, compiled as for a pure-v2 host's device filter.
            let r =
                sprout_cgroups::with_default_device_rules(r, l.devices().as_deref().unwrap_or(&[]));
            let _ = sprout_cgroups::ebpf::device_filter(r.devices().as_deref().unwrap_or(&[]));
        }
        for d in l.devices().iter().flatten() {
            let _ = sprout_runtime::rootfs::device_kind(d.typ());
        }
        if let Some(p) = l.rootfs_propagation() {
            let _ = sprout_runtime::rootfs::propagation_flag(p);
        }
        if let Some(sc) = l.seccomp() {
            let _ = sprout_seccomp::compile::filter_flags(sc);
            let k1 = sprout_seccomp::key(sc);
            let k2 = sprout_seccomp::key(&sc.clone());
            assert_eq!(k1, k2, "seccomp cache key is not deterministic");
        }
    }
});
