//! A seccomp profile (linux.seccomp) as hostile input: the cache key (canonical serialisation +
//! SHA-256), the flag checks, and the libseccomp compile that `prepare` runs on a cache miss.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(profile) = serde_json::from_slice::<oci_spec::runtime::LinuxSeccomp>(data) else { return };
    let k = sprout_seccomp::key(&profile);
    assert_eq!(k.len(), 64, "key must be 64 hex chars: {k}");
    assert_eq!(k, sprout_seccomp::key(&profile.clone()));
    assert_eq!(sprout_seccomp::sha256::hex(&sprout_seccomp::canon::key_bytes(&profile)), k);
    let flags = sprout_seccomp::compile::filter_flags(&profile);
    // Compile (libseccomp) only small profiles: the expensive part is libseccomp itself.
    let n: usize = profile.syscalls().iter().flatten().map(|s| s.names().len()).sum();
    if flags.is_ok() && n <= 64 {
        if let Ok(p) = sprout_seccomp::compile_profile(&profile) {
            assert!(!p.is_empty());
            assert!(p.len() <= sprout_seccomp::compile::BPF_MAXINSNS);
            assert_eq!(p.bpf_bytes().len(), p.len() * 8);
        }
    }
});
