//! What the cgroup pool saves per container start/delete on this host, against plain
//! mkdir+rmdir, across every v1 hierarchy (+ the cgroup2 leaf on hybrid hosts).
//!   cargo run --release -p sprout-cgroups --example pool_bench [iterations]
//! Everything nests under this process's own cgroups (a `sprout-poolbench-<pid>` parent).
use std::path::PathBuf;
use std::time::{Duration, Instant};

use oci_spec::runtime::*;
use sprout_cgroups::{Manager, Pool};

fn resources() -> LinuxResources {
    LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(256i64 << 20)
                .build()
                .unwrap(),
        )
        .cpu(LinuxCpuBuilder::default().shares(512u64).build().unwrap())
        .pids(LinuxPidsBuilder::default().limit(100i64).build().unwrap())
        .build()
        .unwrap()
}

struct T {
    name: &'static str,
    v: Vec<Duration>,
}
impl T {
    fn new(name: &'static str) -> T {
        T {
            name,
            v: Vec::new(),
        }
    }
    fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.v.push(t.elapsed());
        r
    }
    fn med(&self) -> Duration {
        let mut v = self.v.clone();
        v.sort();
        v[v.len() / 2]
    }
    fn mean(&self) -> Duration {
        self.v.iter().sum::<Duration>() / self.v.len() as u32
    }
    fn p90(&self) -> Duration {
        let mut v = self.v.clone();
        v.sort();
        v[v.len() * 9 / 10]
    }
    fn show(&self) {
        println!(
            "  {:<28} median {:>8.1?}  mean {:>8.1?}  p90 {:>8.1?}",
            self.name,
            self.med(),
            self.mean(),
            self.p90()
        );
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let parent = format!("sprout-poolbench-{}", std::process::id());
    let mut pm = Manager::new(Some(&parent), "x", false).unwrap();
    pm.create().unwrap();
    let res = resources();
    let mk = |i: usize| Manager::new(Some(&format!("{parent}/c{i}")), "c", false).unwrap();
    println!(
        "layout {:?}, {} v1 hierarchies{}, {n} iterations, apply = memory+cpu+pids limits",
        pm.layout(),
        [
            "cpu",
            "cpuacct",
            "cpuset",
            "memory",
            "devices",
            "freezer",
            "blkio",
            "pids",
            "net_cls",
            "net_prio",
            "hugetlb",
            "rdma",
            "perf_event",
            "name=systemd"
        ]
        .iter()
        .filter(|c| pm.v1_path(c).is_some())
        .count(),
        if pm.unified_path().is_some() {
            " + cgroup2 leaf"
        } else {
            ""
        }
    );

    // Interleave the two strategies so host noise hits both alike.
    let (mut c_create, mut c_destroy, mut p_create, mut p_destroy) = (
        T::new("mkdir: create"),
        T::new("mkdir: destroy (rmdir)"),
        T::new("pool: create_pooled"),
        T::new("pool: destroy_pooled"),
    );
    let pool = Pool::new(4);
    pool.fill(&mk(0)).unwrap();
    for i in 0..n {
        let mut m = mk(2 * i);
        c_create.time(|| m.create().unwrap());
        m.apply(&res).unwrap();
        c_destroy.time(|| m.destroy().unwrap());

        let mut m = mk(2 * i + 1);
        let took = p_create.time(|| m.create_pooled(&pool).unwrap());
        assert!(took, "pool ran dry");
        m.apply(&res).unwrap();
        let back = p_destroy.time(|| m.destroy_pooled(&pool).unwrap());
        assert!(back);
    }
    println!("per container (all hierarchies):");
    for t in [&c_create, &p_create, &c_destroy, &p_destroy] {
        t.show();
    }
    let saved_start = c_create.med().as_secs_f64() - p_create.med().as_secs_f64();
    let saved_all = (c_create.med() + c_destroy.med()).as_secs_f64()
        - (p_create.med() + p_destroy.med()).as_secs_f64();
    println!(
        "saved on the start path (median): {:.1}us; start+delete: {:.1}us",
        saved_start * 1e6,
        saved_all * 1e6
    );

    // Raw per-hierarchy syscall costs.
    println!("per hierarchy (median, p90, mean of {n}): mkdir | rename | rmdir");
    let dirs: Vec<(String, PathBuf)> = pm
        .v1_paths()
        .map(|(c, d)| (c.to_string(), d.to_path_buf()))
        .chain(
            pm.unified_path()
                .map(|p| ("unified".to_string(), p.to_path_buf())),
        )
        .collect();
    for (c, d) in &dirs {
        let (mut mk_t, mut mv_t, mut rm_t) = (T::new("mkdir"), T::new("rename"), T::new("rmdir"));
        let (a, b) = (d.join("bench-a"), d.join("bench-b"));
        let mut rename_ok = true;
        for _ in 0..n {
            mk_t.time(|| std::fs::create_dir(&a).unwrap());
            let r = mv_t.time(|| std::fs::rename(&a, &b));
            let last = if r.is_ok() {
                &b
            } else {
                rename_ok = false;
                &a
            };
            rm_t.time(|| std::fs::remove_dir(last).unwrap());
        }
        let f = |t: &T| format!("{:>7.1?} {:>7.1?} {:>7.1?}", t.med(), t.p90(), t.mean());
        let mv = if rename_ok {
            f(&mv_t)
        } else {
            format!("{:>23}", "EPERM")
        };
        println!("  {c:<13} {} | {mv} | {}", f(&mk_t), f(&rm_t));
    }
    println!("pool slots drained: {}", pool.drain(&mk(0)).unwrap());
    pm.destroy().unwrap();
}
