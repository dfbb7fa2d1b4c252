//! The cgroup pool on a real v1/hybrid host: slots beside the container's cgroup, taken by
//! rename, given back reset. Everything nests under this test process's own cgroups.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{read, spawn_sleep, unique, wait_for, Reap};
use oci_spec::runtime::*;
use sprout_cgroups::{Layout, Manager, Pool, POOL_PREFIX};

fn resources() -> LinuxResources {
    let mut deny_null = LinuxDeviceCgroup::default();
    deny_null.set_allow(false);
    deny_null.set_typ(Some(LinuxDeviceType::C));
    deny_null.set_major(Some(1));
    deny_null.set_minor(Some(3));
    deny_null.set_access(Some("rw".into()));
    LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(64i64 << 20)
                .swappiness(7u64)
                .build()
                .unwrap(),
        )
        .cpu(
            LinuxCpuBuilder::default()
                .shares(512u64)
                .quota(20000i64)
                .period(50000u64)
                .build()
                .unwrap(),
        )
        .pids(LinuxPidsBuilder::default().limit(42i64).build().unwrap())
        .devices(vec![deny_null])
        .build()
        .unwrap()
}

fn slot_dirs(m: &Manager, n: usize) -> Vec<std::path::PathBuf> {
    [
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "devices",
        "freezer",
        "blkio",
        "pids",
        "name=systemd",
    ]
    .iter()
    .filter_map(|c| m.v1_path(c))
    .map(|p| p.parent().unwrap().join(format!("{POOL_PREFIX}{n}")))
    .collect()
}

#[test]
fn pool_take_give_back_reset_and_drain() {
    skip_unless!(Layout::V1, Layout::Hybrid);
    let parent = unique("pool");
    let mut pm = Manager::new(Some(&parent), "x", false).unwrap();
    pm.create().unwrap();
    let pool = Pool::new(2);
    // On a failed assertion: remove every container cgroup and slot under the parent.
    struct Cleanup(Manager);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                return;
            }
            for d in self.0.created() {
                if let Ok(rd) = std::fs::read_dir(d) {
                    for e in rd.flatten().filter(|e| e.path().is_dir()) {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            let _ = self.0.destroy();
        }
    }
    let _cleanup = Cleanup(pm.clone());
    let mk = |id: &str| Manager::new(Some(&format!("{parent}/{id}")), id, false).unwrap();

    let m0 = mk("c0");
    assert_eq!(pool.available(&m0), 0);
    assert_eq!(pool.fill(&m0).unwrap(), 2);
    assert_eq!(pool.fill(&m0).unwrap(), 0);
    assert_eq!(pool.available(&m0), 2);
    for d in slot_dirs(&m0, 0).iter().chain(&slot_dirs(&m0, 1)) {
        assert!(d.is_dir(), "{}", d.display());
    }
    let cpus = read(pm.v1_path("cpuset").unwrap().join("cpuset.cpus"));
    assert_eq!(read(slot_dirs(&m0, 1)[2].join("cpuset.cpus")), cpus);

    // take: slot 0 renamed into place in every v1 hierarchy
    let mut m = mk("c1");
    assert!(m.create_pooled(&pool).unwrap());
    assert_eq!(pool.available(&m), 1);
    for d in slot_dirs(&m, 0) {
        assert!(!d.exists(), "{} still there", d.display());
    }
    let mem = m.v1_path("memory").unwrap().to_path_buf();
    assert!(mem.is_dir());
    assert!(m.created().contains(&mem));
    if let Some(u) = m.unified_path() {
        assert!(u.is_dir(), "hybrid leaf mkdir'd");
    }
    m.apply(&resources()).unwrap();
    let mut child = Reap(spawn_sleep());
    m.add_pid(child.0.id() as i32).unwrap();
    assert_eq!(read(m.v1_path("cpuset").unwrap().join("cpuset.cpus")), cpus);

    // kill first, as delete does
    m.kill_all(libc::SIGKILL).unwrap();
    child.0.wait().unwrap();
    wait_for("empty", Duration::from_secs(5), || {
        m.pids().unwrap().is_empty().then_some(())
    });

    // give back: reset and renamed to the free slot 0
    assert!(m.destroy_pooled(&pool).unwrap());
    assert!(!mem.exists());
    if let Some(u) = m.unified_path() {
        assert!(!u.exists());
    }
    assert_eq!(pool.available(&m), 2);
    let s0 = slot_dirs(&m, 0);
    let at = |ctrl: &str, file: &str| {
        let p = m
            .v1_path(ctrl)
            .unwrap()
            .parent()
            .unwrap()
            .join(format!("{POOL_PREFIX}0"))
            .join(file);
        read(p)
    };
    let fresh = |ctrl: &str, file: &str| {
        let p = m
            .v1_path(ctrl)
            .unwrap()
            .parent()
            .unwrap()
            .join(format!("{POOL_PREFIX}1"))
            .join(file);
        read(p)
    };
    for (c, f) in [
        ("memory", "memory.limit_in_bytes"),
        ("memory", "memory.swappiness"),
        ("cpu", "cpu.shares"),
        ("cpu", "cpu.cfs_quota_us"),
        ("cpu", "cpu.cfs_period_us"),
        ("pids", "pids.max"),
        ("devices", "devices.list"),
        ("freezer", "freezer.state"),
        ("cpuset", "cpuset.cpus"),
    ] {
        assert_eq!(at(c, f), fresh(c, f), "{c} {f} not reset");
    }
    // the watermark is reset to the current usage (a few pages of kernel memory the killed
    // process left charged can remain after force_empty)
    assert_eq!(
        at("memory", "memory.max_usage_in_bytes"),
        at("memory", "memory.usage_in_bytes")
    );
    assert!(s0.iter().all(|d| d.is_dir()));

    // the pool is full now: the next give-back destroys
    let mut m2 = mk("c2");
    assert!(m2.create_pooled(&pool).unwrap());
    let mut m3 = mk("c3");
    assert!(m3.create_pooled(&pool).unwrap());
    let mut m4 = mk("c4");
    assert!(
        !m4.create_pooled(&pool).unwrap(),
        "pool empty: plain create"
    );
    assert!(m2.destroy_pooled(&pool).unwrap());
    assert!(m3.destroy_pooled(&pool).unwrap());
    assert!(!m4.destroy_pooled(&pool).unwrap(), "pool full: destroyed");
    assert!(!m4.v1_path("memory").unwrap().exists());

    // a cgroup with a child cgroup is not pooled
    let mut m5 = mk("c5");
    assert!(m5.create_pooled(&pool).unwrap());
    let sub = m5.v1_path("pids").unwrap().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let r = m5.destroy_pooled(&pool);
    assert!(!r.unwrap(), "nested cgroup: not pooled");
    // Destroyed instead, with the sub-cgroup inside it (as runc removes them).
    assert!(!sub.exists(), "{} left", sub.display());
    m5.destroy().unwrap();

    // m5 took slot 0 and was not given back: only slot 1 is left
    assert_eq!(pool.drain(&m).unwrap(), slot_dirs(&m, 1).len());
    assert_eq!(pool.available(&m), 0);
    pm.destroy().unwrap();
    assert!(!Path::new(pm.v1_path("memory").unwrap()).exists());
}

/// Concurrent takers and give-backs never share a slot and never lose a hierarchy.
#[test]
fn pool_concurrent_take_and_give_back() {
    skip_unless!(Layout::V1, Layout::Hybrid);
    let parent = unique("poolc");
    let mut pm = Manager::new(Some(&parent), "x", false).unwrap();
    pm.create().unwrap();
    let pool = Pool::new(3);
    let par = parent.clone();
    let mk = move |id: String| Manager::new(Some(&format!("{par}/{id}")), &id, false).unwrap();
    pool.fill(&mk("probe".into())).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let mk = mk.clone();
            std::thread::spawn(move || {
                let mut pooled = 0;
                for i in 0..25 {
                    let mut m = mk(format!("t{t}-{i}"));
                    let took = m.create_pooled(&pool).unwrap();
                    for c in ["cpu", "memory", "cpuset", "pids", "freezer"] {
                        if let Some(d) = m.v1_path(c) {
                            assert!(d.is_dir(), "{} missing", d.display());
                        }
                    }
                    if let Some(d) = m.v1_path("cpuset") {
                        assert!(!read(d.join("cpuset.cpus")).is_empty());
                    }
                    pooled += usize::from(took);
                    m.destroy_pooled(&pool).unwrap();
                    assert!(!m.v1_path("memory").unwrap().exists());
                }
                pooled
            })
        })
        .collect();
    let pooled: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("{pooled} of 100 concurrent creates came from the pool");
    assert!(pooled > 0);
    let probe = mk("probe".into());
    assert!(pool.available(&probe) <= 3);
    pool.drain(&probe).unwrap();
    pm.destroy().unwrap();
    assert!(!pm.v1_path("memory").unwrap().exists());
}
