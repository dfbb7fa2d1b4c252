//! `prepare CONFIG.json [CACHE_DIR]`: prepares the config's linux.seccomp (a cache hit when
//! CACHE_DIR holds it) and prints the source, the program size and the time `prepare` took.
//! For measuring a cold process's hit path, e.g. `hyperfine -N 'prepare cfg.json /tmp/c'`.

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&args[1]).expect("read config")).expect("json");
    let profile: oci_spec::runtime::LinuxSeccomp =
        serde_json::from_value(cfg["linux"]["seccomp"].clone()).expect("linux.seccomp");
    let t0 = Instant::now();
    let (p, src) =
        sprout_seccomp::prepare(&profile, args.get(2).map(std::path::Path::new)).expect("prepare");
    let d = t0.elapsed();
    println!(
        "{src:?}: {} instructions, flags {:#x}, prepare took {d:?}",
        p.len(),
        p.flags()
    );
}
