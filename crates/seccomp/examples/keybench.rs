//! `keybench CONFIG.json [N]`: the hashing a cache hit does on the start path, timed in-process.
//! For the config's linux.seccomp: the cache key (`key_bytes`: SHA-256 of the environment and
//! the canonical profile, many small writes) and the entry check (`cache::decode`: SHA-256 of
//! the 56-byte header and the compiled BPF). Prints the median / p25 / p75 of N rounds (default
//! 20000) of each, in ns, and the first call of each (the cold path a `sprout run` pays once).

use std::time::Instant;

fn stats(mut v: Vec<u64>) -> (u64, u64, u64) {
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() / 4], v[v.len() * 3 / 4])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&args[1]).expect("read config")).expect("json");
    let n: usize = args.get(2).map_or(20000, |s| s.parse().expect("N"));
    let profile: oci_spec::runtime::LinuxSeccomp =
        serde_json::from_value(cfg["linux"]["seccomp"].clone()).expect("linux.seccomp");
    // Compile first (the libseccomp version the key reads is then cached, as on a real start).
    let prep = sprout_seccomp::compile_profile(&profile).expect("compile");

    let t = Instant::now();
    let key = sprout_seccomp::canon::key_bytes(&profile);
    let key_first = t.elapsed().as_nanos() as u64;
    let entry = sprout_seccomp::cache::encode(&key, prep.flags(), prep.bpf_bytes());
    let t = Instant::now();
    let ok = sprout_seccomp::cache::decode(&entry, &key).is_some();
    let decode_first = t.elapsed().as_nanos() as u64;
    assert!(ok, "entry does not decode");

    let mut keys = Vec::with_capacity(n);
    let mut decodes = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let k = std::hint::black_box(sprout_seccomp::canon::key_bytes(std::hint::black_box(
            &profile,
        )));
        keys.push(t.elapsed().as_nanos() as u64);
        assert_eq!(k, key);
        let t = Instant::now();
        let d = sprout_seccomp::cache::decode(std::hint::black_box(&entry), &key).is_some();
        decodes.push(t.elapsed().as_nanos() as u64);
        assert!(d);
    }
    let (km, k25, k75) = stats(keys);
    let (dm, d25, d75) = stats(decodes);
    println!("key {}", sprout_seccomp::sha256::hex(&key));
    println!("key_bytes      median {km} ns (p25 {k25}, p75 {k75}), first call {key_first} ns");
    println!(
        "cache::decode  median {dm} ns (p25 {d25}, p75 {d75}), first call {decode_first} ns ({} payload bytes)",
        prep.bpf_bytes().len()
    );
}
