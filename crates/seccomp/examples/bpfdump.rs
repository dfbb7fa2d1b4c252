//! `bpfdump CONFIG.json [LEVEL]`: prints the compiled BPF of the config's linux.seccomp, one
//! instruction per line (code jt jf k), for inspecting libseccomp's layout.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&args[1]).expect("read config")).expect("json");
    // LEVEL 1 or 2: libseccomp's own program at that optimisation level; none: sprout's.
    let level: Option<u32> = args.get(2).map(|s| s.parse().unwrap());
    let profile: oci_spec::runtime::LinuxSeccomp =
        serde_json::from_value(cfg["linux"]["seccomp"].clone()).expect("linux.seccomp");
    let c = match level {
        Some(l) => sprout_seccomp::compile::compile_with(&profile, l),
        None => sprout_seccomp::compile::compile(&profile),
    }
    .expect("compile");
    for (i, f) in c.filter.iter().enumerate() {
        println!("{i:5} {:04x} {:3} {:3} {:#x}", f.code, f.jt, f.jf, f.k);
    }
}
