//! Unit tests against a fake cgroupfs tree in a temp dir. The fake tree cannot make
//! interface files appear on mkdir, so tests create the files a kernel would.

use std::collections::HashMap;
use std::path::Path;

use oci_spec::runtime::*;

use crate::testutil::{files, read, TempDir};
use crate::*;

const HYBRID_SELF: &str = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n\
4:memory:/process_api/h1\n2:cpuacct:/\n1:cpu:/\n10:hugetlb:/\n0::/\n";

fn hybrid_host(t: &TempDir) -> Host {
    let root = t.path().to_path_buf();
    // hugetlb is listed in /proc/self/cgroup but its mount point is missing.
    for d in [
        "cpu",
        "cpuacct",
        "memory/process_api/h1",
        "devices",
        "freezer",
        "blkio",
        "pids",
        "systemd",
        "unified",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    Host {
        root,
        layout: Layout::Hybrid,
        self_cgroup: Some(HYBRID_SELF.into()),
        systemd_running: Some(false),
    }
}

const V1_FILES: &[(&str, &[&str])] = &[
    (
        "cpu",
        &[
            "cpu.shares",
            "cpu.cfs_period_us",
            "cpu.cfs_quota_us",
            "cpu.cfs_burst_us",
            "cpu.rt_period_us",
            "cpu.rt_runtime_us",
            "cpu.idle",
        ],
    ),
    (
        "memory/process_api/h1",
        &[
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "memory.soft_limit_in_bytes",
            "memory.swappiness",
            "memory.oom_control",
            "memory.use_hierarchy",
            "memory.kmem.tcp.limit_in_bytes",
            "memory.usage_in_bytes",
        ],
    ),
    ("pids", &["pids.max"]),
    (
        "blkio",
        &[
            "blkio.bfq.weight",
            "blkio.bfq.weight_device",
            "blkio.throttle.read_bps_device",
            "blkio.throttle.write_bps_device",
            "blkio.throttle.read_iops_device",
            "blkio.throttle.write_iops_device",
        ],
    ),
    ("devices", &["devices.allow", "devices.deny"]),
    ("freezer", &["freezer.state"]),
];

/// Give the container's v1 leaves (under `rel`) the interface files a kernel would.
fn populate_v1(root: &Path, rel: &str) {
    for (ctrl, names) in V1_FILES {
        let v: Vec<(&str, &str)> = names.iter().map(|n| (*n, "")).collect();
        files(&root.join(ctrl).join(rel), &v);
    }
}

#[test]
fn hybrid_paths_nest_under_own_cgroup_per_controller() {
    let t = TempDir::new("paths");
    let host = hybrid_host(&t);
    let m = Manager::new_in(&host, None, "ctr1", false).unwrap();
    let r = t.path();
    assert_eq!(
        m.v1_path("memory").unwrap(),
        r.join("memory/process_api/h1/ctr1")
    );
    assert_eq!(m.v1_path("cpu").unwrap(), r.join("cpu/ctr1"));
    assert_eq!(m.v1_path("name=systemd").unwrap(), r.join("systemd/ctr1"));
    assert_eq!(m.v1_path("cpuset"), None, "not in /proc/self/cgroup");
    assert_eq!(m.unified_path().unwrap(), r.join("unified/ctr1"));

    let m = Manager::new_in(&host, Some("/abs/x"), "ctr1", false).unwrap();
    assert_eq!(m.v1_path("memory").unwrap(), r.join("memory/abs/x"));
    assert_eq!(m.unified_path().unwrap(), r.join("unified/abs/x"));

    let m = Manager::new_in(&host, Some("rel/x"), "ctr1", false).unwrap();
    assert_eq!(
        m.v1_path("memory").unwrap(),
        r.join("memory/process_api/h1/rel/x")
    );

    let e = Manager::new_in(&host, Some("a/../../b"), "c", false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("linux.cgroupsPath") && e.contains(".."), "{e}");
    let e = Manager::new_in(&host, Some("system.slice:docker:abc"), "c", true).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cgroup: --systemd-cgroup: systemd is not running on this host"),
        "{e}"
    );
}

#[test]
fn create_records_only_new_dirs_and_destroy_removes_exactly_those() {
    let t = TempDir::new("create");
    let host = hybrid_host(&t);
    let r = t.path();
    std::fs::create_dir_all(r.join("cpu/pre")).unwrap(); // pre-existing: not ours
    let mut m = Manager::new_in(&host, Some("pre/ctr"), "x", false).unwrap();
    m.create().unwrap();
    assert!(
        m.v1_path("hugetlb").is_none(),
        "unmounted hierarchy dropped"
    );
    let created: Vec<_> = m.created().to_vec();
    assert!(created.contains(&r.join("cpu/pre/ctr")));
    assert!(!created.contains(&r.join("cpu/pre")));
    assert!(created.contains(&r.join("memory/process_api/h1/pre")));
    assert!(created.contains(&r.join("memory/process_api/h1/pre/ctr")));
    assert!(created.contains(&r.join("unified/pre/ctr")));
    assert!(m.made_unified_leaf());
    // parents before children
    let pos = |p: &Path| created.iter().position(|c| c == p).unwrap();
    assert!(
        pos(&r.join("memory/process_api/h1/pre")) < pos(&r.join("memory/process_api/h1/pre/ctr"))
    );

    // Serialize round trip, as state.json does.
    let json = serde_json::to_string(&m).unwrap();
    let m2: Manager = serde_json::from_str(&json).unwrap();
    assert_eq!(m2.created(), m.created());

    // A foreign dir inside ours is not ours: destroy must fail on that one and leave it.
    m2.destroy().unwrap();
    for c in &created {
        assert!(!c.exists(), "{} left", c.display());
    }
    assert!(r.join("cpu/pre").is_dir());
    assert!(r.join("memory/process_api/h1").is_dir());
    m2.destroy().unwrap(); // idempotent
}

#[test]
fn destroy_removes_sub_cgroups_inside_the_container_only() {
    let t = TempDir::new("subcg");
    let host = hybrid_host(&t);
    let r = t.path();
    std::fs::create_dir_all(r.join("cpu/pre")).unwrap(); // pre-existing: not ours
    let mut m = Manager::new_in(&host, Some("pre/ctr"), "x", false).unwrap();
    m.create().unwrap();
    let leaves: Vec<_> = m
        .v1_paths()
        .map(|(_, p)| p.to_path_buf())
        .chain(m.unified_path().map(Path::to_path_buf))
        .collect();
    assert!(leaves.len() > 3);
    // Sub-cgroups the container's processes made, two levels deep, one with a sibling.
    for l in &leaves {
        std::fs::create_dir_all(l.join("sub/sub2")).unwrap();
        std::fs::create_dir_all(l.join("other")).unwrap();
    }
    // Beside the container, in a directory it did not make: never touched.
    std::fs::create_dir_all(r.join("cpu/pre/sibling/sub")).unwrap();
    m.destroy().unwrap();
    for l in &leaves {
        assert!(!l.exists(), "{} left", l.display());
    }
    for c in m.created() {
        assert!(!c.exists(), "{} left", c.display());
    }
    assert!(r.join("cpu/pre/sibling/sub").is_dir());
    // A file that is not a directory stops the removal there with an error (a real cgroupfs
    // has none a process can make): nothing outside is removed either.
    let mut m = Manager::new_in(&host, Some("pre/ctr2"), "y", false).unwrap();
    m.create().unwrap();
    let cpu = m.v1_path("cpu").unwrap().to_path_buf();
    std::fs::create_dir_all(cpu.join("sub")).unwrap();
    std::fs::write(cpu.join("sub/file"), "").unwrap();
    let e = m.destroy().unwrap_err().to_string();
    assert!(e.contains("sub"), "{e}");
    assert!(cpu.join("sub/file").exists());
    assert!(r.join("cpu/pre/sibling/sub").is_dir());
}

#[test]
fn remove_idle_leaf_removes_only_an_empty_leaf_it_made() {
    let t = TempDir::new("idleleaf");
    let host = hybrid_host(&t);
    let r = t.path();
    // An empty leaf we made: removed (the freezer's, the hierarchy `pids` reads); the others
    // are left to destroy, which then takes the freezer's as already gone.
    let mut m = Manager::new_in(&host, Some("a/ctr"), "x", false).unwrap();
    m.create().unwrap();
    let freezer = m.v1_path("freezer").unwrap().to_path_buf();
    assert!(m.remove_idle_leaf());
    assert!(!freezer.exists());
    assert!(m.v1_path("cpu").unwrap().is_dir());
    assert!(m.remove_idle_leaf(), "already gone is idle too");
    // destroy does not rmdir the removed leaf again: a directory made there since is not ours.
    std::fs::create_dir(&freezer).unwrap();
    m.destroy().unwrap();
    assert!(
        freezer.is_dir(),
        "destroy removed a freezer leaf made after ours was gone"
    );
    // Its parent, which we made, is left to its last user, as when another container is in it.
    assert!(freezer.parent().unwrap().is_dir());
    std::fs::remove_dir(&freezer).unwrap();
    m.destroy().unwrap();
    for c in m.created() {
        assert!(!c.exists(), "{} left", c.display());
    }
    // A leaf with a sub-cgroup (here a directory: rmdir refuses it, as a cgroup with
    // processes or children): false, nothing removed.
    let mut m = Manager::new_in(&host, Some("a/ctr2"), "y", false).unwrap();
    m.create().unwrap();
    let freezer = m.v1_path("freezer").unwrap().to_path_buf();
    std::fs::create_dir(freezer.join("sub")).unwrap();
    assert!(!m.remove_idle_leaf());
    assert!(freezer.join("sub").is_dir());
    m.destroy().unwrap();
    // A leaf that existed before the container (not in `created`): never removed.
    std::fs::create_dir_all(r.join("freezer/pre/ctr3")).unwrap();
    let mut m = Manager::new_in(&host, Some("pre/ctr3"), "z", false).unwrap();
    m.create().unwrap();
    assert!(!m.remove_idle_leaf());
    assert!(r.join("freezer/pre/ctr3").is_dir());
    m.destroy().unwrap();
    assert!(r.join("freezer/pre/ctr3").is_dir());

    // A leaf that is there already is found, not made.
    std::fs::create_dir_all(r.join("unified/pre/ctr4")).unwrap();
    let mut m4 = Manager::new_in(&host, Some("pre/ctr4"), "x", false).unwrap();
    m4.create().unwrap();
    assert!(!m4.made_unified_leaf());
    assert!(!m4.created().contains(&r.join("unified/pre/ctr4")));
    m4.destroy().unwrap();
}

#[test]
fn create_fails_cleanly_when_own_cgroup_is_missing() {
    let t = TempDir::new("ownmissing");
    let host = hybrid_host(&t);
    std::fs::remove_dir_all(t.path().join("memory/process_api")).unwrap();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    let e = m.create().unwrap_err().to_string();
    assert!(e.contains("own memory cgroup"), "{e}");
    // rolled back: nothing left from this attempt
    assert!(!t.path().join("cpu/c").exists());
    assert!(m.created().is_empty());
}

#[test]
fn cpuset_copy_from_parent() {
    let t = TempDir::new("cpuset");
    let r = t.path();
    files(
        &r.join("cpuset"),
        &[("cpuset.cpus", "0-3\n"), ("cpuset.mems", "0\n")],
    );
    files(
        &r.join("cpuset/a"),
        &[("cpuset.cpus", ""), ("cpuset.mems", "")],
    );
    files(
        &r.join("cpuset/a/b"),
        &[("cpuset.cpus", ""), ("cpuset.mems", "")],
    );
    let self_cg = "3:cpuset:/\n";
    let host = Host {
        root: r.into(),
        layout: Layout::V1,
        self_cgroup: Some(self_cg.into()),
        systemd_running: None,
    };
    // Pretend create made a and a/b (the fake fs cannot make the files appear on mkdir).
    let mut m = Manager::new_in(&host, Some("a/b"), "x", false).unwrap();
    m.create().unwrap(); // both exist: nothing created, nothing copied
    assert!(m.created().is_empty());
    assert_eq!(read(r.join("cpuset/a/cpuset.cpus")), "");
    v1_copy_cpuset_for_test(&[r.join("cpuset/a"), r.join("cpuset/a/b")]);
    assert_eq!(read(r.join("cpuset/a/b/cpuset.cpus")), "0-3");
    assert_eq!(read(r.join("cpuset/a/b/cpuset.mems")), "0");
}

fn v1_copy_cpuset_for_test(dirs: &[std::path::PathBuf]) {
    crate::v1::cpuset::copy_from_parent(dirs).unwrap();
}

pub(crate) fn full_resources() -> LinuxResources {
    let mut rdma = HashMap::new();
    rdma.insert(
        "mlx4_0".to_string(),
        LinuxRdmaBuilder::default()
            .hca_handles(2u32)
            .build()
            .unwrap(),
    );
    LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(100_000_000i64)
                .swap(200_000_000i64)
                .reservation(50_000_000i64)
                .swappiness(10u64)
                .disable_oom_killer(true)
                .build()
                .unwrap(),
        )
        .cpu(
            LinuxCpuBuilder::default()
                .shares(1024u64)
                .quota(50_000i64)
                .period(100_000u64)
                .burst(1000u64)
                .idle(1i64)
                .build()
                .unwrap(),
        )
        .pids(LinuxPidsBuilder::default().limit(42i64).build().unwrap())
        .block_io(
            LinuxBlockIoBuilder::default()
                .weight(500u16)
                .weight_device(vec![LinuxWeightDeviceBuilder::default()
                    .major(8i64)
                    .minor(0i64)
                    .weight(300u16)
                    .build()
                    .unwrap()])
                .throttle_read_bps_device(vec![LinuxThrottleDeviceBuilder::default()
                    .major(8i64)
                    .minor(0i64)
                    .rate(1048576u64)
                    .build()
                    .unwrap()])
                .throttle_write_iops_device(vec![LinuxThrottleDeviceBuilder::default()
                    .major(8i64)
                    .minor(16i64)
                    .rate(100u64)
                    .build()
                    .unwrap()])
                .build()
                .unwrap(),
        )
        .devices(vec![
            LinuxDeviceCgroupBuilder::default()
                .allow(false)
                .access("rwm")
                .build()
                .unwrap(),
            LinuxDeviceCgroupBuilder::default()
                .allow(true)
                .typ(LinuxDeviceType::C)
                .major(1i64)
                .minor(3i64)
                .access("rwm")
                .build()
                .unwrap(),
        ])
        .rdma(rdma)
        .build()
        .unwrap()
}

#[test]
fn apply_v1_writes_every_set_field() {
    let t = TempDir::new("applyv1");
    let host = hybrid_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    populate_v1(r, "c");
    files(
        &r.join("memory/process_api/h1/c"),
        &[("memory.limit_in_bytes", "9223372036854771712")],
    );
    let mut res = full_resources();
    res.set_rdma(None);
    m.apply(&res).unwrap();
    let mem = r.join("memory/process_api/h1/c");
    assert_eq!(read(mem.join("memory.limit_in_bytes")), "100000000");
    assert_eq!(read(mem.join("memory.memsw.limit_in_bytes")), "200000000");
    assert_eq!(read(mem.join("memory.soft_limit_in_bytes")), "50000000");
    assert_eq!(read(mem.join("memory.swappiness")), "10");
    assert_eq!(read(mem.join("memory.oom_control")), "1");
    assert_eq!(
        read(mem.join("memory.use_hierarchy")),
        "",
        "unset field not written"
    );
    let cpu = r.join("cpu/c");
    assert_eq!(read(cpu.join("cpu.shares")), "1024");
    assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read(cpu.join("cpu.cfs_burst_us")), "1000");
    assert_eq!(read(cpu.join("cpu.idle")), "1");
    assert_eq!(read(cpu.join("cpu.rt_period_us")), "");
    assert_eq!(read(r.join("pids/c/pids.max")), "42");
    let blk = r.join("blkio/c");
    assert_eq!(
        read(blk.join("blkio.bfq.weight")),
        "500",
        "falls back to BFQ"
    );
    assert_eq!(read(blk.join("blkio.bfq.weight_device")), "8:0 300");
    assert_eq!(
        read(blk.join("blkio.throttle.read_bps_device")),
        "8:0 1048576"
    );
    assert_eq!(
        read(blk.join("blkio.throttle.write_iops_device")),
        "8:16 100"
    );
    assert_eq!(read(r.join("devices/c/devices.deny")), "a *:* rwm");
    assert_eq!(read(r.join("devices/c/devices.allow")), "c 1:3 rwm");

    // pids -1 => max
    m.apply(
        &LinuxResourcesBuilder::default()
            .pids(LinuxPidsBuilder::default().limit(-1i64).build().unwrap())
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(read(r.join("pids/c/pids.max")), "max");
}

#[test]
fn apply_v1_errors_name_the_field() {
    let t = TempDir::new("errv1");
    let host = hybrid_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    populate_v1(r, "c");
    let err = |res: LinuxResources| m.apply(&res).unwrap_err().to_string();

    std::fs::remove_file(r.join("blkio/c/blkio.bfq.weight")).unwrap();
    let e = err(LinuxResourcesBuilder::default()
        .block_io(
            LinuxBlockIoBuilder::default()
                .weight(100u16)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert_eq!(
        e,
        "cgroup: linux.resources.blockIO.weight: not supported by this kernel (no blkio.weight)"
    );

    let e = err(LinuxResourcesBuilder::default()
        .block_io(
            LinuxBlockIoBuilder::default()
                .leaf_weight(100u16)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(
        e.contains("blockIO.leafWeight") && e.contains("no blkio.leaf_weight"),
        "{e}"
    );

    let e = err(LinuxResourcesBuilder::default()
        .memory(LinuxMemoryBuilder::default().limit(-7i64).build().unwrap())
        .build()
        .unwrap());
    assert!(
        e.contains("linux.resources.memory.limit") && e.contains("-7"),
        "{e}"
    );

    let e = err(LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(100i64)
                .swap(50i64)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(e.contains("memory.swap"), "{e}");

    let e = err(LinuxResourcesBuilder::default()
        .cpu(LinuxCpuBuilder::default().shares(1u64).build().unwrap())
        .build()
        .unwrap());
    assert!(e.contains("cpu.shares"), "{e}");

    let e = err(LinuxResourcesBuilder::default()
        .cpu(LinuxCpuBuilder::default().cpus("0-1").build().unwrap())
        .build()
        .unwrap());
    assert!(
        e.contains("cpu.cpus") && e.contains("cpuset") && e.contains("not mounted"),
        "{e}"
    );

    let e = err(LinuxResourcesBuilder::default()
        .hugepage_limits(vec![LinuxHugepageLimitBuilder::default()
            .page_size("2MB")
            .limit(1i64 << 21)
            .build()
            .unwrap()])
        .build()
        .unwrap());
    assert!(
        e.contains("hugepageLimits") && e.contains("hugetlb.2MB.max"),
        "hybrid routes hugetlb to cgroup2: {e}"
    );

    let e = err(LinuxResourcesBuilder::default()
        .network(
            LinuxNetworkBuilder::default()
                .class_id(7u32)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(
        e.contains("network.classID") && e.contains("net_cls"),
        "{e}"
    );

    let e = err(LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .swappiness(101u64)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(e.contains("memory.swappiness"), "{e}");

    // checkBeforeUpdate
    std::fs::write(
        r.join("memory/process_api/h1/c/memory.usage_in_bytes"),
        "5000",
    )
    .unwrap();
    let e = err(LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(4096i64)
                .check_before_update(true)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(
        e.contains("rejecting memory limit 4096 <= usage 5000") && e.contains("memory.limit"),
        "{e}"
    );
    // The memory+swap total first, in runc's words; a limit equal to the usage is refused too.
    let e = err(LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(4000i64)
                .swap(4999i64)
                .check_before_update(true)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(
        e.contains("rejecting memory+swap limit 4999 <= usage 5000"),
        "{e}"
    );

    // memsw missing: explicit extra swap is an error, swap == limit is fine.
    std::fs::remove_file(r.join("memory/process_api/h1/c/memory.memsw.limit_in_bytes")).unwrap();
    let e = err(LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(4096i64)
                .swap(8192i64)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(
        e.contains("memory.swap") && e.contains("memory.memsw.limit_in_bytes"),
        "{e}"
    );
    m.apply(
        &LinuxResourcesBuilder::default()
            .memory(
                LinuxMemoryBuilder::default()
                    .limit(4096i64)
                    .swap(4096i64)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap(),
    )
    .unwrap();
    m.apply(
        &LinuxResourcesBuilder::default()
            .memory(LinuxMemoryBuilder::default().limit(-1i64).build().unwrap())
            .build()
            .unwrap(),
    )
    .unwrap();
}

#[test]
fn unified_keys_rejected_on_v1() {
    let t = TempDir::new("unifiedv1");
    let mut host = hybrid_host(&t);
    host.layout = Layout::V1;
    let m = Manager::new_in(&host, None, "c", false).unwrap();
    let mut u = HashMap::new();
    u.insert("memory.high".to_string(), "1000".to_string());
    let e = m
        .apply(&LinuxResourcesBuilder::default().unified(u).build().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("linux.resources.unified") && e.contains("v1"),
        "{e}"
    );
}

fn v2_host(t: &TempDir) -> Host {
    let root = t.path().to_path_buf();
    files(
        &root,
        &[
            ("cgroup.controllers", "cpuset cpu io memory hugetlb pids\n"),
            ("cgroup.subtree_control", ""),
        ],
    );
    files(
        &root.join("user.slice/me"),
        &[
            ("cgroup.controllers", "cpu io memory pids\n"),
            ("cgroup.subtree_control", ""),
        ],
    );
    Host {
        root,
        layout: Layout::V2,
        self_cgroup: Some("0::/user.slice/me\n".into()),
        systemd_running: None,
    }
}

#[test]
fn v2_create_changes_no_cgroup_it_did_not_make() {
    let t = TempDir::new("v2create");
    let host = v2_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, Some("pod/ctr"), "x", false).unwrap();
    assert_eq!(m.unified_path().unwrap(), r.join("user.slice/me/pod/ctr"));
    m.create().unwrap();
    assert_eq!(
        m.created(),
        &[r.join("user.slice/me/pod"), r.join("user.slice/me/pod/ctr")]
    );
    // Controllers are enabled only in directories this create made (a fake tree has no
    // cgroup.controllers in them: nothing to enable); the caller's cgroup and everything above
    // it are not ours (tests/integration/tests/cgroup_placement.rs checks the real kernel).
    assert_eq!(
        read(r.join("user.slice/me/cgroup.subtree_control")),
        "",
        "the caller's cgroup: untouched"
    );
    assert_eq!(
        read(r.join("cgroup.subtree_control")),
        "",
        "above our own cgroup: untouched"
    );
    assert!(m.v2_dir_fd().is_some());
    m.destroy().unwrap();
    assert!(!r.join("user.slice/me/pod").exists());
    assert!(r.join("user.slice/me").exists());

    // A caller in a systemd scope: relative paths go beside the scope, in its slice.
    let scoped = Host {
        self_cgroup: Some("0::/user.slice/me/session-3.scope\n".into()),
        ..host.clone()
    };
    let m = Manager::new_in(&scoped, Some("pod/ctr"), "x", false).unwrap();
    assert_eq!(m.unified_path().unwrap(), r.join("user.slice/me/pod/ctr"));
    let m = Manager::new_in(&scoped, None, "x", false).unwrap();
    assert_eq!(m.unified_path().unwrap(), r.join("user.slice/me/x"));

    // An absolute path on v2 does not even need /proc/self/cgroup.
    let host2 = Host {
        self_cgroup: Some("garbage".into()),
        ..host
    };
    let m = Manager::new_in(&host2, Some("/a/b"), "x", false).unwrap();
    assert_eq!(m.unified_path().unwrap(), r.join("a/b"));
}

#[test]
fn apply_v2_conversions() {
    let t = TempDir::new("applyv2");
    let host = v2_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    let d = r.join("user.slice/me/c");
    let names = [
        "memory.max",
        "memory.swap.max",
        "memory.low",
        "memory.current",
        "cpu.weight",
        "cpu.max",
        "cpu.max.burst",
        "cpu.idle",
        "pids.max",
        "io.weight",
        "io.max",
        "hugetlb.2MB.max",
        "rdma.max",
        "memory.high",
        "cpuset.cpus",
    ];
    let v: Vec<(&str, &str)> = names.iter().map(|n| (*n, "")).collect();
    files(&d, &v);
    let mut res = full_resources();
    res.set_devices(None);
    res.set_hugepage_limits(Some(vec![LinuxHugepageLimitBuilder::default()
        .page_size("2048kB")
        .limit(-1i64)
        .build()
        .unwrap()]));
    let mut u = HashMap::new();
    u.insert("memory.high".to_string(), "90000000".to_string());
    res.set_unified(Some(u));
    if let Some(c) = res.cpu_mut() {
        c.set_cpus(Some("0".into()));
    }
    if let Some(mm) = res.memory_mut() {
        mm.set_swappiness(None);
        mm.set_disable_oom_killer(None);
    }
    m.apply(&res).unwrap();
    assert_eq!(read(d.join("memory.max")), "100000000");
    assert_eq!(
        read(d.join("memory.swap.max")),
        "100000000",
        "swap total minus limit"
    );
    assert_eq!(read(d.join("memory.low")), "50000000");
    assert_eq!(read(d.join("cpu.weight")), "100");
    assert_eq!(read(d.join("cpu.max")), "50000 100000");
    assert_eq!(read(d.join("cpu.max.burst")), "1000");
    assert_eq!(read(d.join("cpu.idle")), "1");
    assert_eq!(read(d.join("cpuset.cpus")), "0");
    assert_eq!(read(d.join("pids.max")), "42");
    // the fake file keeps only the last write
    assert_eq!(read(d.join("io.weight")), "8:0 2930");
    assert_eq!(read(d.join("io.max")), "8:16 wiops=100");
    assert_eq!(read(d.join("hugetlb.2MB.max")), "max");
    assert_eq!(read(d.join("rdma.max")), "mlx4_0 hca_handle=2");
    assert_eq!(read(d.join("memory.high")), "90000000");

    // blkio weight alone -> io.weight "default N"
    m.apply(
        &LinuxResourcesBuilder::default()
            .block_io(
                LinuxBlockIoBuilder::default()
                    .weight(10u16)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(read(d.join("io.weight")), "default 1");
    // period alone keeps the quota
    std::fs::write(d.join("cpu.max"), "max 100000\n").unwrap();
    m.apply(
        &LinuxResourcesBuilder::default()
            .cpu(LinuxCpuBuilder::default().period(20000u64).build().unwrap())
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(read(d.join("cpu.max")), "max 20000");
    m.apply(
        &LinuxResourcesBuilder::default()
            .cpu(LinuxCpuBuilder::default().quota(-1i64).build().unwrap())
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(read(d.join("cpu.max")), "max");
    m.apply(
        &LinuxResourcesBuilder::default()
            .memory(
                LinuxMemoryBuilder::default()
                    .limit(-1i64)
                    .swap(-1i64)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(read(d.join("memory.max")), "max");
    assert_eq!(read(d.join("memory.swap.max")), "max");
}

#[test]
fn v2_create_for_clone_leaves_the_delegation_wait_to_apply() {
    // A parent another container's create made an instant ago offers pids but has not
    // enabled it yet. `create_for_clone` (the init is cloned into the leaf before its limits)
    // does not wait for it; `apply` does, then finds pids.max.
    let t = TempDir::new("v2deleg");
    let host = v2_host(&t);
    let r = t.path();
    files(
        &r.join("user.slice/me/pod"),
        &[
            ("cgroup.controllers", "pids\n"),
            ("cgroup.subtree_control", ""),
        ],
    );
    let res = LinuxResourcesBuilder::default()
        .pids(LinuxPidsBuilder::default().limit(5i64).build().unwrap())
        .build()
        .unwrap();
    let mut m = Manager::new_in(&host, Some("pod/ctr"), "x", false).unwrap();
    let t0 = std::time::Instant::now();
    m.create_for_clone(Some(&res)).unwrap();
    assert!(
        t0.elapsed() < std::time::Duration::from_millis(500),
        "create_for_clone waited for the parent ({:?}; the wait gives up after 1 s)",
        t0.elapsed()
    );
    assert_eq!(m.created(), &[r.join("user.slice/me/pod/ctr")]);
    let leaf = r.join("user.slice/me/pod/ctr");
    // The other create enables pids now; the kernel then gives the leaf its files.
    let (go, gate) = std::sync::mpsc::channel::<()>();
    let (pod, leaf2) = (r.join("user.slice/me/pod"), leaf.clone());
    let other = std::thread::spawn(move || {
        gate.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        files(&leaf2, &[("pids.max", "max")]);
        files(&pod, &[("cgroup.subtree_control", "pids\n")]);
    });
    go.send(()).unwrap();
    m.apply(&res).unwrap();
    other.join().unwrap();
    assert_eq!(read(leaf.join("pids.max")), "5");

    // Without the other create, `apply` reports the missing file as before (after the wait).
    let mut m = Manager::new_in(&host, Some("pod/ctr2"), "y", false).unwrap();
    files(
        &r.join("user.slice/me/pod"),
        &[("cgroup.subtree_control", "")],
    );
    m.create_for_clone(Some(&res)).unwrap();
    let e = m.apply(&res).unwrap_err().to_string();
    assert!(e.contains("no pids.max"), "{e}");

    // A container without limits needs no controller (nor do device rules, an eBPF program
    // on v2): no wait at all for a parent that nobody delegates.
    let mut m = Manager::new_in(&host, Some("pod/ctr3"), "z", false).unwrap();
    let no_limits = LinuxResources::default();
    m.create_for_clone(Some(&no_limits)).unwrap();
    let t0 = std::time::Instant::now();
    m.apply(&no_limits).unwrap();
    assert!(
        t0.elapsed() < std::time::Duration::from_millis(500),
        "apply without limits waited for the parent's controllers ({:?})",
        t0.elapsed()
    );
}

#[test]
fn apply_v2_errors() {
    let t = TempDir::new("errv2");
    let host = v2_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    let d = r.join("user.slice/me/c");
    files(&d, &[("memory.max", "")]);
    let err = |res: LinuxResources| m.apply(&res).unwrap_err().to_string();

    let e = err(LinuxResourcesBuilder::default()
        .pids(LinuxPidsBuilder::default().limit(5i64).build().unwrap())
        .build()
        .unwrap());
    assert!(
        e.contains("linux.resources.pids.limit")
            && e.contains("no pids.max")
            && e.contains("subtree_control"),
        "{e}"
    );

    let e = err(LinuxResourcesBuilder::default()
        .memory(LinuxMemoryBuilder::default().swap(5000i64).build().unwrap())
        .build()
        .unwrap());
    assert!(
        e.contains("memory.swap") && e.contains("without a memory limit"),
        "{e}"
    );

    let e = err(LinuxResourcesBuilder::default()
        .cpu(
            LinuxCpuBuilder::default()
                .realtime_runtime(1000i64)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(e.contains("cpu.realtimeRuntime"), "{e}");

    let e = err(LinuxResourcesBuilder::default()
        .network(
            LinuxNetworkBuilder::default()
                .class_id(1u32)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap());
    assert!(e.contains("network.classID"), "{e}");

    // devices: allow-all needs no program (fine on the fake tree); anything else is an eBPF
    // program, which cannot attach to a plain directory (tests/v2_devices.rs does it for real)
    m.apply(
        &LinuxResourcesBuilder::default()
            .devices(vec![LinuxDeviceCgroupBuilder::default()
                .allow(true)
                .access("rwm")
                .build()
                .unwrap()])
            .build()
            .unwrap(),
    )
    .unwrap();
    let e = err(LinuxResourcesBuilder::default()
        .devices(vec![LinuxDeviceCgroupBuilder::default()
            .allow(false)
            .build()
            .unwrap()])
        .build()
        .unwrap());
    assert!(
        e.contains("linux.resources.devices")
            && e.contains("not a cgroup2 directory")
            && e.contains("eBPF"),
        "{e}"
    );
    let e = err(LinuxResourcesBuilder::default()
        .devices(full_resources().devices().clone().unwrap())
        .build()
        .unwrap());
    assert!(
        e.contains("linux.resources.devices") && e.contains("eBPF"),
        "{e}"
    );
    // invalid rules are caught before anything is written
    let e = err(LinuxResourcesBuilder::default()
        .pids(LinuxPidsBuilder::default().limit(5i64).build().unwrap())
        .devices(vec![LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .access("xyz")
            .build()
            .unwrap()])
        .build()
        .unwrap());
    assert!(e.contains("devices[0]") && e.contains("xyz"), "{e}");

    let mut u = HashMap::new();
    u.insert("../../etc/passwd".to_string(), "x".to_string());
    let e = err(LinuxResourcesBuilder::default().unified(u).build().unwrap());
    assert!(e.contains("linux.resources.unified"), "{e}");
    let mut u = HashMap::new();
    u.insert("io.latency".to_string(), "x".to_string());
    let e = err(LinuxResourcesBuilder::default().unified(u).build().unwrap());
    assert!(
        e.contains("linux.resources.unified.io.latency") && e.contains("no io.latency"),
        "{e}"
    );
}

#[test]
fn freezer_and_pids_on_fake_tree() {
    let t = TempDir::new("freeze");
    let host = hybrid_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    files(
        &r.join("freezer/c"),
        &[("freezer.state", "THAWED\n"), ("cgroup.procs", "11\n12\n")],
    );
    // A member outside our pid namespace reads as 0: never listed (nor signalled).
    files(&r.join("freezer/c/sub"), &[("cgroup.procs", "13\n0\n")]);
    assert_eq!(m.freezer_state().unwrap(), FreezerState::Thawed);
    m.freeze().unwrap();
    assert_eq!(m.freezer_state().unwrap(), FreezerState::Frozen);
    m.thaw().unwrap();
    assert_eq!(read(r.join("freezer/c/freezer.state")), "THAWED");
    let mut p = m.pids().unwrap();
    p.sort();
    assert_eq!(p, vec![11, 12, 13]);

    // v2 freezer: cgroup.freeze + cgroup.events
    let t2 = TempDir::new("freeze2");
    let host2 = v2_host(&t2);
    let mut m2 = Manager::new_in(&host2, None, "c", false).unwrap();
    m2.create().unwrap();
    let d = t2.path().join("user.slice/me/c");
    files(
        &d,
        &[
            ("cgroup.freeze", "0"),
            ("cgroup.events", "populated 0\nfrozen 1\n"),
            ("cgroup.kill", ""),
            ("cgroup.procs", ""),
        ],
    );
    m2.freeze().unwrap();
    assert_eq!(read(d.join("cgroup.freeze")), "1");
    assert_eq!(m2.freezer_state().unwrap(), FreezerState::Frozen);
    m2.kill_all(libc::SIGKILL).unwrap();
    assert_eq!(read(d.join("cgroup.kill")), "1");
    assert!(m2.pids().unwrap().is_empty());
}

#[test]
fn stats_from_fake_trees() {
    let t = TempDir::new("statsv2");
    let host = v2_host(&t);
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    let d = t.path().join("user.slice/me/c");
    files(&d, &[
        ("cpu.stat", "usage_usec 10\nuser_usec 6\nsystem_usec 4\nnr_periods 3\nnr_throttled 1\nthrottled_usec 2\n"),
        ("memory.current", "4096\n"), ("memory.max", "max\n"), ("memory.peak", "8192\n"),
        ("memory.stat", "anon 1\nfile 2\n"), ("pids.current", "3\n"), ("pids.max", "10\n"),
        ("io.stat", "8:0 rbytes=100 wbytes=200 rios=1 wios=2 dbytes=0 dios=0\n"),
        ("hugetlb.2MB.current", "0\n"), ("hugetlb.2MB.events", "max 4\n"),
        ("cpu.pressure", "some avg10=1.50 avg60=0.25 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=56\n"),
    ]);
    let s = m.stats().unwrap();
    let psi = s.cpu.psi.as_ref().expect("cpu.pressure read");
    assert_eq!(
        (psi.some.avg10, psi.some.avg60, psi.some.total),
        (1.5, 0.25, 1234)
    );
    assert_eq!(psi.full.total, 56);
    // No memory.pressure / io.pressure files here: no psi member (runc: nil, omitted).
    assert!(s.memory.psi.is_none() && s.blkio.psi.is_none());
    assert_eq!(s.cpu.usage.total, 10_000);
    assert_eq!(s.cpu.usage.user, 6_000);
    assert_eq!(s.cpu.throttling.throttled_time, 2_000);
    assert_eq!(s.memory.usage.usage, 4096);
    assert_eq!(s.memory.usage.limit, u64::MAX);
    assert_eq!(s.memory.usage.max, 8192);
    // No memory.swap.* files: swap is memory alone (runc's memory+swap on v2).
    assert_eq!((s.memory.swap.usage, s.memory.swap.limit), (4096, u64::MAX));
    assert_eq!(s.memory.cache, 2);
    assert_eq!(
        s.pids,
        PidsStats {
            current: 3,
            limit: 10
        }
    );
    assert_eq!(s.blkio.io_service_bytes_recursive.len(), 2);
    assert_eq!(s.blkio.io_service_bytes_recursive[1].op, "Write");
    assert_eq!(s.hugetlb["2MB"].failcnt, 4);
    let j = serde_json::to_value(&s).unwrap();
    assert_eq!(j["memory"]["usage"]["usage"], 4096);
    assert_eq!(j["blkio"]["ioServiceBytesRecursive"][0]["op"], "Read");

    let t = TempDir::new("statsv1");
    let host = hybrid_host(&t);
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    let r = t.path();
    files(
        &r.join("cpuacct/c"),
        &[
            ("cpuacct.usage", "123\n"),
            ("cpuacct.usage_percpu", "100 23 \n"),
            ("cpuacct.usage_all", "cpu user system\n0 70 30\n1 20 3\n"),
        ],
    );
    files(
        &r.join("memory/process_api/h1/c"),
        &[
            ("memory.usage_in_bytes", "77\n"),
            ("memory.limit_in_bytes", "1000\n"),
            ("memory.stat", "cache 5\ntotal_cache 6\n"),
        ],
    );
    files(
        &r.join("pids/c"),
        &[("pids.current", "2\n"), ("pids.max", "max\n")],
    );
    files(
        &r.join("blkio/c"),
        &[(
            "blkio.throttle.io_service_bytes_recursive",
            "8:0 Read 10\n8:0 Write 20\nTotal 30\n",
        )],
    );
    let s = m.stats().unwrap();
    assert_eq!(s.cpu.usage.total, 123);
    assert_eq!(s.cpu.usage.percpu, vec![100, 23]);
    assert_eq!(s.memory.usage.usage, 77);
    assert_eq!(s.memory.usage.limit, 1000);
    assert_eq!(s.memory.cache, 6);
    // "max": 0 in runc's stats (no limit).
    assert_eq!(s.pids.limit, 0);
    assert_eq!(
        (
            s.cpu.usage.percpu_user.clone(),
            s.cpu.usage.percpu_kernel.clone()
        ),
        (vec![70, 20], vec![30, 3])
    );
    assert_eq!(s.blkio.io_service_bytes_recursive.len(), 2);
}

#[test]
fn hybrid_unified_keys_and_rdma_and_empty_resources() {
    let t = TempDir::new("hyb");
    let mut host = hybrid_host(&t);
    host.self_cgroup = Some(format!("{HYBRID_SELF}11:rdma:/\n"));
    std::fs::create_dir_all(t.path().join("rdma")).unwrap();
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    // Nothing set: nothing written, no controller needed.
    m.apply(&LinuxResources::default()).unwrap();
    files(&r.join("unified/c"), &[("memory.high", "")]);
    files(&r.join("rdma/c"), &[("rdma.max", "")]);
    let mut u = HashMap::new();
    u.insert("memory.high".to_string(), "12345".to_string());
    let mut rd = HashMap::new();
    rd.insert(
        "mlx5_1".to_string(),
        LinuxRdmaBuilder::default()
            .hca_handles(3u32)
            .hca_objects(9u32)
            .build()
            .unwrap(),
    );
    m.apply(
        &LinuxResourcesBuilder::default()
            .unified(u)
            .rdma(rd)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(read(r.join("unified/c/memory.high")), "12345");
    // A key of a controller bound to v1 here, absent from the v2 leaf: runc's words, the field.
    let mut u = HashMap::new();
    u.insert("memory.min".to_string(), "131072".to_string());
    let e = m
        .apply(&LinuxResourcesBuilder::default().unified(u).build().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("linux.resources.unified.memory.min: invalid configuration: the memory controller is on cgroup v1"),
        "{e}"
    );
    assert_eq!(
        read(r.join("rdma/c/rdma.max")),
        "mlx5_1 hca_handle=3 hca_object=9"
    );
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json["layout"], "Hybrid");
    assert!(json["v1"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["name"] == "memory"));
}

#[test]
fn v2_dir_fd_only_on_pure_v2() {
    let t = TempDir::new("fd");
    let host = hybrid_host(&t);
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    assert!(
        m.v2_dir_fd().is_none(),
        "hybrid: no CLONE_INTO_CGROUP (v1 controllers need joining too)"
    );
}

#[test]
fn comounted_hierarchy_without_symlinks() {
    let t = TempDir::new("comount");
    let r = t.path();
    std::fs::create_dir_all(r.join("cpu,cpuacct/own")).unwrap();
    let host = Host {
        root: r.into(),
        layout: Layout::V1,
        self_cgroup: Some("2:cpu,cpuacct:/own\n".into()),
        systemd_running: None,
    };
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    assert_eq!(m.v1_path("cpu").unwrap(), r.join("cpu,cpuacct/own/c"));
    assert_eq!(m.v1_path("cpuacct").unwrap(), r.join("cpu,cpuacct/own/c"));
    assert_eq!(m.created(), &[r.join("cpu,cpuacct/own/c")]);
    m.destroy().unwrap();
    assert!(!r.join("cpu,cpuacct/own/c").exists());
}

#[test]
fn hybrid_without_unified_line_goes_without_tracking_leaf() {
    let t = TempDir::new("nounified");
    let mut host = hybrid_host(&t);
    host.self_cgroup = Some(HYBRID_SELF.replace("0::/\n", ""));
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    assert!(m.unified_path().is_none());
    m.create().unwrap();
    assert!(m.v1_path("memory").unwrap().is_dir());
    m.destroy().unwrap();
}

#[test]
fn kill_all_without_any_freezer_signals_listed_pids() {
    use std::os::unix::process::ExitStatusExt;
    let t = TempDir::new("nofreezer");
    let r = t.path();
    std::fs::create_dir_all(r.join("pids")).unwrap();
    let host = Host {
        root: r.into(),
        layout: Layout::V1,
        self_cgroup: Some("8:pids:/\n".into()),
        systemd_running: None,
    };
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    // Only a pid we spawned ourselves goes into the fake cgroup.procs.
    let mut child = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    files(
        &r.join("pids/c"),
        &[("cgroup.procs", &format!("{}\n", child.id()))],
    );
    assert_eq!(m.freezer_state().unwrap(), FreezerState::Thawed);
    assert!(m.freeze().unwrap_err().to_string().contains("no freezer"));
    m.kill_all(libc::SIGTERM).unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
}

/// Hybrid: cgroup.kill in the unified leaf is not enough. A task in the v1 hierarchies but not
/// in the unified leaf (or frozen by the v1 freezer, where it dies only once thawed) must be
/// signalled by pid too, and the freezer thawed; before, kill_all returned after cgroup.kill
/// and this child lived on.
#[test]
fn hybrid_sigkill_also_signals_v1_members_and_thaws() {
    use std::os::unix::process::ExitStatusExt;
    let t = TempDir::new("hybridkill");
    let host = hybrid_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let pid = child.id();
    files(
        &r.join("unified/c"),
        &[("cgroup.kill", ""), ("cgroup.procs", "")],
    );
    files(
        &r.join("freezer/c"),
        &[
            ("freezer.state", "FROZEN\n"),
            ("cgroup.procs", &format!("{pid}\n")),
        ],
    );
    m.kill_all(libc::SIGKILL).unwrap();
    assert_eq!(read(r.join("unified/c/cgroup.kill")), "1");
    assert_eq!(read(r.join("freezer/c/freezer.state")), "THAWED");
    // Bounded: the child is ours; if kill_all missed it, kill it and fail.
    for _ in 0..200 {
        if let Some(st) = child.try_wait().unwrap() {
            assert_eq!(st.signal(), Some(libc::SIGKILL));
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("kill_all(SIGKILL) on a hybrid host left pid {pid} alive");
}

/// A shared parent removed again (another container's delete finding it empty) between the
/// mkdir of the parent and that of the leaf: the create makes the parent again instead of
/// failing. Plain directories race the same way cgroup directories do. Each round the
/// "other delete" removes the parent once, as soon as it sees it made, as a real one would.
#[test]
fn mkdir_below_survives_a_parent_removed_meanwhile() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    const ROUNDS: usize = 2000;
    let t = TempDir::new("mkrace");
    let base = t.path().to_path_buf();
    let parent = base.join("shared");
    let round = Arc::new(AtomicUsize::new(usize::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let remover = {
        let (parent, round, stop) = (parent.clone(), round.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut seen, mut removed) = (usize::MAX, 0usize);
            while !stop.load(Ordering::Relaxed) {
                let r = round.load(Ordering::Acquire);
                if r == seen || !parent.exists() {
                    continue;
                }
                seen = r;
                if std::fs::remove_dir(&parent).is_ok() {
                    removed += 1;
                }
            }
            removed
        })
    };
    for i in 0..ROUNDS {
        let leaf = parent.join(format!("c{i}"));
        round.store(i, Ordering::Release);
        let mut created = Vec::new();
        if let Err(e) = crate::fs::mkdir_below(&base, &leaf, &mut created) {
            let why = match e {
                crate::fs::MkdirError::BaseMissing => "base missing".to_string(),
                crate::fs::MkdirError::Io(p, e) => format!("{}: {e}", p.display()),
            };
            stop.store(true, Ordering::Relaxed);
            panic!("round {i}: mkdir_below failed: {why}");
        }
        assert!(leaf.is_dir(), "round {i}");
        assert_eq!(created.last(), Some(&leaf), "round {i}: {created:?}");
        let n = created.len();
        created.dedup();
        assert_eq!(created.len(), n, "round {i}: a directory recorded twice");
        // Start the next round with no parent, so that the create makes it again.
        std::fs::remove_dir(&leaf).unwrap();
        while parent.exists() && std::fs::remove_dir(&parent).is_err() {}
    }
    stop.store(true, Ordering::Relaxed);
    let removed = remover.join().unwrap();
    assert!(
        removed > 0,
        "the parent was never removed under a create: the race was not exercised"
    );
    eprintln!("parent removed under a create in {removed} of {ROUNDS} rounds");
}

#[test]
fn sub_cgroup_points_hierarchies_at_existing_sub_cgroups() {
    let t = TempDir::new("subcg");
    let host = hybrid_host(&t);
    let r = t.path();
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    m.create().unwrap();
    // Plain form: every v1 hierarchy must have it; the hybrid tracking leaf follows if it has.
    let e = m.sub_cgroup(Some("s"), &[]).unwrap_err().to_string();
    assert!(e.contains("no such file or directory"), "{e}");
    for (_, d) in m.v1_paths() {
        std::fs::create_dir(d.join("s")).unwrap();
    }
    let s = m.sub_cgroup(Some("/s"), &[]).unwrap();
    assert_eq!(s.v1_path("pids").unwrap(), r.join("pids/c/s"));
    assert_eq!(s.unified_path().unwrap(), r.join("unified/c"));
    assert!(s.created().is_empty(), "the copy owns nothing");
    std::fs::create_dir(r.join("unified/c/s")).unwrap();
    let s = m.sub_cgroup(Some("s"), &[]).unwrap();
    assert_eq!(s.unified_path().unwrap(), r.join("unified/c/s"));
    // Per controller: only those move.
    let s = m.sub_cgroup(None, &[("pids".into(), "s".into())]).unwrap();
    assert_eq!(s.v1_path("pids").unwrap(), r.join("pids/c/s"));
    assert_eq!(
        s.v1_path("memory").unwrap(),
        r.join("memory/process_api/h1/c")
    );
    assert_eq!(s.unified_path().unwrap(), r.join("unified/c"));
    for (all, per) in [
        (Some("../x"), vec![]),
        (None, vec![("pids".to_string(), "s/../../x".to_string())]),
        (None, vec![("nosuch".to_string(), "s".to_string())]),
        (None, vec![("pids".to_string(), "missing".to_string())]),
    ] {
        assert!(m.sub_cgroup(all, &per).is_err(), "{all:?} {per:?}");
    }

    // v2: the plain form only.
    let t2 = TempDir::new("subcg2");
    let host2 = v2_host(&t2);
    let mut m2 = Manager::new_in(&host2, None, "c", false).unwrap();
    m2.create().unwrap();
    let d = t2.path().join("user.slice/me/c");
    std::fs::create_dir(d.join("s")).unwrap();
    let s = m2.sub_cgroup(Some("s"), &[]).unwrap();
    assert_eq!(s.unified_path().unwrap(), d.join("s"));
    assert!(s.v2_dir_fd().is_some());
    let e = m2
        .sub_cgroup(None, &[("pids".into(), "s".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cgroup v1 only"), "{e}");
}

#[test]
fn create_refuses_an_existing_frozen_cgroup_and_leaves_it_alone() {
    // Hybrid: the v1 freezer leaf was there, FROZEN; what create made is removed again.
    let t = TempDir::new("frozen1");
    let host = hybrid_host(&t);
    let r = t.path();
    files(&r.join("freezer/c"), &[("freezer.state", "FROZEN\n")]);
    let mut m = Manager::new_in(&host, None, "c", false).unwrap();
    let e = m.create_for(None).unwrap_err().to_string();
    assert!(e.contains("container's cgroup unexpectedly frozen"), "{e}");
    assert!(m.created().is_empty());
    assert!(!r.join("pids/c").exists() && !r.join("unified/c").exists());
    assert_eq!(read(r.join("freezer/c/freezer.state")), "FROZEN");
    std::fs::write(r.join("freezer/c/freezer.state"), "FREEZING\n").unwrap();
    assert!(m.create_for(None).is_err(), "FREEZING is refused too");
    std::fs::write(r.join("freezer/c/freezer.state"), "THAWED\n").unwrap();
    m.create_for(None).unwrap();
    assert!(!m.created().contains(&r.join("freezer/c")));
    m.destroy().unwrap();
    assert!(r.join("freezer/c").exists(), "not ours to remove");
    // Plain create, the serve engine's pool, which reclaims its own pool cgroups that a killed
    // engine left frozen (kills and thaws them): not refused.
    std::fs::write(r.join("freezer/c/freezer.state"), "FROZEN\n").unwrap();
    Manager::new_in(&host, None, "c", false)
        .unwrap()
        .create()
        .unwrap();

    // v2: cgroup.freeze 1, or frozen by an ancestor (cgroup.events).
    let t2 = TempDir::new("frozen2");
    let host2 = v2_host(&t2);
    let d = t2.path().join("user.slice/me/c");
    for (freeze, events, refused) in [
        ("1", "populated 0\nfrozen 1\n", true),
        ("0", "populated 0\nfrozen 1\n", true),
        ("0", "populated 0\nfrozen 0\n", false),
    ] {
        files(&d, &[("cgroup.freeze", freeze), ("cgroup.events", events)]);
        let mut m2 = Manager::new_in(&host2, None, "c", false).unwrap();
        match m2.create_for(None) {
            Err(e) => {
                assert!(refused, "{e}");
                assert!(e.to_string().contains("unexpectedly frozen"), "{e}");
            }
            Ok(()) => assert!(!refused, "freeze {freeze}, events {events:?}"),
        }
        assert_eq!(read(d.join("cgroup.freeze")), freeze, "left as it was");
    }
}
