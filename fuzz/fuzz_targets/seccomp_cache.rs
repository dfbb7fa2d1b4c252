//! The on-disk seccomp cache as hostile input (a cache entry is a file the runtime reads back):
//! `cache::decode` of arbitrary bytes (with the key taken from the entry itself so the key check
//! can pass), encode/decode round trips, any single-byte corruption detected, and `cache::lookup`
//! of the bytes written as an entry file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sprout_seccomp::cache;
use std::path::PathBuf;
use std::sync::OnceLock;

fn dir() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sprout-fuzz-cache-{}", std::process::id()));
        cache::ensure_dir(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    // 1. Raw bytes as an entry.
    let mut key = [0u8; 32];
    if data.len() >= 56 {
        key.copy_from_slice(&data[24..56]);
    }
    if let Some((_flags, payload)) = cache::decode(data, &key) {
        assert_eq!(payload.len() % 8, 0);
        assert!(!payload.is_empty());
    }
    // 2. Structure-aware: flags(4) key(32) payload, encoded properly.
    if data.len() >= 36 + 8 {
        let flags = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) & 0x3f;
        let mut k = [0u8; 32];
        k.copy_from_slice(&data[4..36]);
        let mut payload = data[36..].to_vec();
        payload.truncate(payload.len() / 8 * 8);
        payload.truncate(4096 * 8);
        let enc = cache::encode(&k, flags, &payload);
        if let Some((f2, p2)) = cache::decode(&enc, &k) {
            assert_eq!(f2, flags);
            assert_eq!(p2, &payload[..]);
            // Any single-byte change must be rejected (checksum / header checks).
            let at = (data[0] as usize * 131 + data.len()) % enc.len();
            let mut bad = enc.clone();
            bad[at] ^= 1 + data[1] % 255;
            assert!(cache::decode(&bad, &k).is_none(), "corruption at byte {at} not detected");
            // A different key never matches.
            let mut k2 = k;
            k2[0] ^= 0x80;
            assert!(cache::decode(&enc, &k2).is_none());
        } else if flags == 0 && !payload.is_empty() {
            panic!("a well-formed entry (flags 0, {} payload bytes) did not decode", payload.len());
        }
        // 3. The entry read back from disk by lookup.
        let hex = sprout_seccomp::sha256::hex(&k);
        let path = dir().join(&hex);
        let which = if data[2] & 1 == 0 { &enc[..] } else { data };
        std::fs::write(&path, which).unwrap();
        let _ = cache::lookup(dir(), &hex, &k);
        let _ = std::fs::remove_file(&path);
    }
});
