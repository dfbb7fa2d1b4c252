//! Time config.json parsing: `cargo run --release -p sprout-runtime --example parsebench -- FILE N`.
//! Plain serde_json against the path-tracking parse the runtime does (serde_path_to_error).
use std::time::Instant;

fn main() {
    let mut a = std::env::args().skip(1);
    let file = a.next().expect("FILE");
    let n: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let raw = std::fs::read(&file).expect("read");
    let time = |label: &str, f: &dyn Fn() -> bool| {
        let mut v: Vec<f64> = (0..n)
            .map(|_| {
                let t = Instant::now();
                assert!(f());
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        v.sort_by(|x, y| x.partial_cmp(y).unwrap());
        println!(
            "{label:<28} median {:>7.1} µs  p90 {:>7.1} µs",
            v[n / 2],
            v[n * 9 / 10]
        );
    };
    time("serde_json::from_slice", &|| {
        serde_json::from_slice::<oci_spec::runtime::Spec>(&raw).is_ok()
    });
    time("keycase scan (resources)", &|| {
        !sprout_runtime::keycase::resources_in_another_case(&raw)
    });
    time("runtime parse_spec", &|| {
        sprout_runtime::config::parse_spec(&raw, "config.json").is_ok()
    });
}
