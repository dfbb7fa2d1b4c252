//! The podman 4.3 default profile: compiles, caches, a hit returns identical bytes; timings.

mod common;

use std::time::{Duration, Instant};

use common::{podman_profile, TempDir};
use sprout_seccomp::{cache, prepare, Source};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn podman_default_compiles_caches_and_hits_identically() {
    let p = podman_profile();
    assert_eq!(p.syscalls().as_ref().unwrap().len(), 22);
    let t = TempDir::new("podman");
    let dir = t.path().join("seccomp");

    let (compiled, s) = prepare(&p, Some(&dir)).unwrap();
    assert_eq!(s, Source::Compiled);
    assert!(!compiled.wants_listener());
    assert_eq!(compiled.flags(), 0);
    let (hit, s) = prepare(&p, Some(&dir)).unwrap();
    assert_eq!(s, Source::Cache);
    assert_eq!(hit.bpf_bytes(), compiled.bpf_bytes());
    let entry = common::entry_path(&dir, &p);
    assert_eq!(
        std::fs::metadata(&entry).unwrap().len() as usize,
        cache::HEADER_LEN + compiled.bpf_bytes().len()
    );

    // Timings (noisy; printed for the record, loosely asserted).
    let n = 30;
    let compile: Vec<Duration> = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            let (x, _) = prepare(&p, None).unwrap();
            let d = t0.elapsed();
            assert_eq!(x.bpf_bytes(), compiled.bpf_bytes());
            d
        })
        .collect();
    let hits: Vec<Duration> = (0..n * 10)
        .map(|_| {
            let t0 = Instant::now();
            let (x, s) = prepare(&p, Some(&dir)).unwrap();
            let d = t0.elapsed();
            assert_eq!(s, Source::Cache);
            assert_eq!(x.len(), compiled.len());
            d
        })
        .collect();
    let keys: Vec<Duration> = (0..n * 10)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(sprout_seccomp::canon::key_bytes(&p));
            t0.elapsed()
        })
        .collect();
    let (c, h, k) = (median(compile), median(hits), median(keys));
    eprintln!(
        "podman-default: {} BPF instructions ({} bytes); compile (no cache) median {:?}, \
         cache hit median {:?} (of which key hashing {:?}); {} build",
        compiled.len(),
        compiled.bpf_bytes().len(),
        c,
        h,
        k,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    assert!(h < c, "a cache hit ({h:?}) must beat compiling ({c:?})");
}
