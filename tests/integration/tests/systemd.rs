//! `--systemd-cgroup` against a REAL D-Bus daemon with a fake systemd on it.
//!
//! This host does not run systemd, so a private `dbus-daemon` (custom config, socket in a
//! /tmp/sd-* directory) carries `tests/integration/fake-systemd/fake_systemd.py`, which
//! answers StartTransientUnit/StopUnit/ResetFailedUnit/GetUnit/SetUnitProperties and emits
//! JobRemoved, making the scope's cgroups below THIS test process's own cgroup. The real
//! `sprout` binary is pointed at that bus with SPROUT_SYSTEMD_BUS and must:
//! - send the properties (PIDs, Delegate, Description, DefaultDependencies, resources),
//! - end up with the container's init in the scope's cgroup in every hierarchy (systemd's
//!   and the ones sprout joins itself), with the limits applied,
//! - update through SetUnitProperties + cgroupfs, pause/resume/ps through cgroupfs,
//! - StopUnit + ResetFailedUnit on delete and leave no directory behind,
//! - fail with one line and leave nothing behind on a D-Bus error reply, a failed job, a
//!   malformed `slice:prefix:name`, and when systemd is absent.
//!
//! Everything runs in ONE #[test] because SPROUT_SYSTEMD_BUS is set in this process's
//! environment (the helpers pass it on to every runtime call).
//!
//! Needs /usr/bin/dbus-daemon and python3-dbus + python3-gi (scripts/setup-deps.sh); when
//! they are missing the test says so and does nothing (it does not pretend to pass).

use serde_json::{json, Value};
use sprout_integration_tests::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PY: &str = "/usr/bin/python3";
const DAEMON: &str = "/usr/bin/dbus-daemon";

/// dbus-daemon + fake systemd, stopped (by pid) on drop.
struct FakeSystemd {
    dir: PathBuf,
    daemon: Child,
    fake: Option<Child>,
    address: String,
    log: PathBuf,
    /// hierarchy name ("memory", "unified", "name=systemd", ...) -> systemd's root dir
    roots: Vec<(String, PathBuf)>,
}

impl FakeSystemd {
    fn start() -> Result<FakeSystemd, String> {
        if !Path::new(DAEMON).exists() {
            return Err(format!("{DAEMON} is missing (apt-get install dbus)"));
        }
        let probe = Command::new(PY)
            .args(["-c", "import dbus, dbus.service, gi.repository.GLib"])
            .output()
            .map_err(|e| format!("{PY}: {e}"))?;
        if !probe.status.success() {
            return Err(format!(
                "{PY} lacks python3-dbus/python3-gi: {}",
                String::from_utf8_lossy(&probe.stderr).trim()
            ));
        }
        let dir = PathBuf::from(format!("/tmp/sd-itest-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("bus");
        let conf = dir.join("bus.conf");
        fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
</busconfig>
"#,
                sock.display()
            ),
        )
        .unwrap();
        let daemon = Command::new(DAEMON)
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--nopidfile"])
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("daemon.err")).unwrap())
            .spawn()
            .map_err(|e| format!("{DAEMON}: {e}"))?;
        let address = format!("unix:path={}", sock.display());
        let mut me = FakeSystemd {
            dir: dir.clone(),
            daemon,
            fake: None,
            address: address.clone(),
            log: dir.join("calls.jsonl"),
            roots: Vec::new(),
        };
        let t0 = Instant::now();
        while !sock.exists() {
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "dbus-daemon did not listen: {}",
                    fs::read_to_string(dir.join("daemon.err")).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-systemd/fake_systemd.py");
        let ready = dir.join("ready.json");
        let fake = Command::new(PY)
            .arg(&script)
            .args(["--address", &address])
            .args(["--tag", &format!("sd-fake-{}", std::process::id())])
            .arg("--log")
            .arg(&me.log)
            .arg("--ready")
            .arg(&ready)
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("fake.err")).unwrap())
            .spawn()
            .map_err(|e| format!("{PY}: {e}"))?;
        me.fake = Some(fake);
        let t0 = Instant::now();
        while !ready.exists() {
            let exited = me.fake.as_mut().unwrap().try_wait().ok().flatten();
            if exited.is_some() || t0.elapsed() > Duration::from_secs(20) {
                return Err(format!(
                    "fake systemd did not come up ({exited:?}): {}",
                    fs::read_to_string(dir.join("fake.err")).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let r: Value = serde_json::from_str(&fs::read_to_string(&ready).unwrap()).unwrap();
        me.roots = r["roots"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), PathBuf::from(v.as_str().unwrap())))
            .collect();
        Ok(me)
    }

    fn root(&self, hier: &str) -> Option<&Path> {
        self.roots
            .iter()
            .find(|(n, _)| n == hier)
            .map(|(_, p)| p.as_path())
    }

    fn calls(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn calls_for(&self, unit: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c["name"] == unit)
            .collect()
    }

    /// GetUnit through busctl (an independent D-Bus client): does the unit exist?
    fn unit_exists(&self, unit: &str) -> bool {
        Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args([
                "call",
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "GetUnit",
                "s",
                unit,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }
}

impl Drop for FakeSystemd {
    fn drop(&mut self) {
        if let Some(f) = &mut self.fake {
            // SAFETY: kill(2) takes integers only; `f` is our unreaped child, so its pid is live.
            unsafe { libc::kill(f.id() as i32, libc::SIGTERM) };
            let t0 = Instant::now();
            while f.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if f.try_wait().ok().flatten().is_none() {
                let _ = f.kill();
                let _ = f.wait();
            }
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn own_cgroup_of(pid: i32) -> Vec<(String, String)> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, c, p) = (it.next()?, it.next()?, it.next()?);
            Some((
                if c.is_empty() {
                    "unified".into()
                } else {
                    c.into()
                },
                p.into(),
            ))
        })
        .collect()
}

/// The cgroup directory of hierarchy `hier` where `pid` is.
fn cg_dir_of(pid: i32, hier: &str) -> Option<PathBuf> {
    let mount = match hier {
        "unified" => "/sys/fs/cgroup/unified",
        "name=systemd" => "/sys/fs/cgroup/systemd",
        h => {
            return own_cgroup_of(pid)
                .into_iter()
                .find(|(c, _)| c.split(',').any(|x| x == h))
                .map(|(c, p)| {
                    Path::new("/sys/fs/cgroup")
                        .join(c)
                        .join(p.trim_start_matches('/'))
                })
        }
    };
    own_cgroup_of(pid)
        .into_iter()
        .find(|(c, _)| c == hier)
        .map(|(_, p)| Path::new(mount).join(p.trim_start_matches('/')))
}

fn read_trim(p: &Path) -> String {
    fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// Every directory the scope `rel` (slice path/unit) could have below the fake's roots and
/// below the host roots: none may exist after delete or after a failed create.
fn scope_dirs(fake: &FakeSystemd, rel: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fake.roots.iter().map(|(_, r)| r.join(rel)).collect();
    for m in fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        v.push(m.path().join(rel));
    }
    v
}

fn assert_nothing_left(ctx: &Ctx, fake: &FakeSystemd, id: &str, unit: &str, rel: &str) {
    assert!(!fake.unit_exists(unit), "unit {unit} still exists");
    for d in scope_dirs(fake, rel) {
        assert!(!d.exists(), "{} left behind", d.display());
    }
    assert!(
        !ctx.root_entries().iter().any(|e| e == id),
        "state directory of {id} left behind: {:?}",
        ctx.root_entries()
    );
    assert!(
        find_marked_processes("-", id).is_empty(),
        "processes of {id} left behind"
    );
}

#[test]
fn systemd_cgroup_driver_against_a_fake_systemd_on_a_real_dbus_daemon() {
    let ctx = Ctx::new("systemd");

    // 1. No systemd, no SPROUT_SYSTEMD_BUS: one clear line, nothing left.
    if Path::new("/run/systemd/system").exists() {
        eprintln!("note: /run/systemd/system exists: the no-systemd case is not checked here");
    } else {
        let mut b = ctx.bundle(&["true"]);
        b.set(
            "/linux/cgroupsPath",
            json!(format!("machine.slice:sprout:{}", b.id)),
        );
        let o = b.create_with(&["--systemd-cgroup"]);
        o.assert_fail()
            .assert_one_line_error(&["systemd is not running"]);
        assert!(!ctx.root_entries().iter().any(|e| e == &b.id));
    }

    // The fake makes its units' cgroups below this test's own cgroup. On a pure v2 host that is
    // usually a systemd scope (a login session), which can delegate no controller below it.
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if own.lines().all(|l| l.starts_with("0::")) && own.trim_end().ends_with(".scope") {
        eprintln!(
            "SKIPPED systemd driver test against the fake systemd: this test runs in a systemd \
             scope on a pure cgroup v2 host ({}), below which the fake cannot get controllers; \
             here the real systemd is tested instead (tests/vm/podman-matrix.sh, \
             --cgroup-manager=systemd, rootful and rootless)",
            own.trim()
        );
        return;
    }
    let fake = match FakeSystemd::start() {
        Ok(f) => f,
        Err(why) => {
            eprintln!(
                "SKIPPED systemd driver test: cannot run a real dbus-daemon with the fake \
                 systemd: {why} (run scripts/setup-deps.sh)"
            );
            return;
        }
    };
    std::env::set_var("SPROUT_SYSTEMD_BUS", &fake.address);

    // 2. Malformed slice:prefix:name: one line naming the field.
    for bad in [
        "just-a-path",
        "/abs/path",
        "machine.slice:p:",
        "machine.slice:p:a b",
    ] {
        let mut b = ctx.bundle(&["true"]);
        b.set("/linux/cgroupsPath", json!(bad));
        let o = b.create_with(&["--systemd-cgroup"]);
        o.assert_fail()
            .assert_one_line_error(&["linux.cgroupsPath"]);
        assert!(!ctx.root_entries().iter().any(|e| e == &b.id), "{bad}");
    }

    // 3. create/start: unit with the right properties, pid in the scope, limits applied.
    let mut b = ctx.bundle(&["sleep", "1000"]);
    let unit = format!("sprout-{}.scope", b.id);
    let rel = format!("machine.slice/{unit}");
    b.set(
        "/linux/cgroupsPath",
        json!(format!("machine.slice:sprout:{}", b.id)),
    );
    b.set(
        "/linux/resources",
        json!({
            "memory": {"limit": 67108864},
            "cpu": {"shares": 512, "quota": 50000, "period": 200000},
            "pids": {"limit": 77}
        }),
    );
    b.set(
        "/annotations",
        json!({
            "org.systemd.property.RuntimeMaxSec": "3600",
            "org.systemd.property.CollectMode": "'inactive-or-failed'",
            "org.example.other": "1"
        }),
    );
    b.create_with(&["--systemd-cgroup"]).assert_ok();
    b.start_and_wait_exec();
    let pid = b.pid();

    let calls = fake.calls_for(&unit);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let c = &calls[0];
    assert_eq!(c["method"], "StartTransientUnit");
    assert_eq!(c["mode"], "replace");
    let p = &c["props"];
    assert_eq!(p["PIDs"], json!([pid]), "{p}");
    assert_eq!(p["Slice"], "machine.slice");
    assert_eq!(p["Delegate"], true);
    assert_eq!(p["DefaultDependencies"], false);
    assert!(p["Description"].as_str().unwrap().contains(&b.id), "{p}");
    // This host is hybrid (memory and cpu on v1): runc's v1 property names.
    assert_eq!(p["MemoryLimit"], 67108864);
    assert_eq!(p["CPUShares"], 512);
    // The period too (systemd >= 242; the fake says 257): without it a daemon-reload would
    // put the default 100ms back.
    assert_eq!(p["CPUQuotaPeriodUSec"], 200000);
    assert_eq!(p["CPUQuotaPerSecUSec"], 250000);
    assert_eq!(p["TasksMax"], 77);
    // The org.systemd.property.* annotations, as runc: ...Sec in seconds becomes ...USec.
    assert_eq!(p["RuntimeMaxUSec"], 3_600_000_000u64, "{p}");
    assert_eq!(p["CollectMode"], "inactive-or-failed", "{p}");
    // The device allowlist too (runc's properties): without them a `systemctl daemon-reload`
    // would make systemd write `a` to the scope's v1 devices.allow. The config has no device
    // rules: the defaults alone, on a deny-all.
    assert_eq!(p["DevicePolicy"], "strict", "{p}");
    let allow = p["DeviceAllow"].as_array().expect("DeviceAllow");
    for want in [
        json!(["/dev/char/1:3", "rwm"]),
        json!(["/dev/char/5:2", "rwm"]),
        json!(["char-*", "m"]),
        json!(["block-*", "m"]),
    ] {
        assert!(allow.contains(&want), "{want} not in {allow:?}");
    }
    assert_eq!(allow.len(), 11, "{allow:?}");

    // The init is in the scope in systemd's hierarchies (placed by the fake through PIDs=)
    // and in the others (joined by sprout), and nowhere else.
    for (hier, root) in &fake.roots {
        let want = root.join(&rel);
        assert_eq!(
            cg_dir_of(pid, hier).as_deref(),
            Some(want.as_path()),
            "pid {pid} in hierarchy {hier}: {:?}",
            own_cgroup_of(pid)
        );
    }
    let mem = fake.root("memory").unwrap().join(&rel);
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "67108864");
    let pids = fake.root("pids").unwrap().join(&rel);
    assert_eq!(read_trim(&pids.join("pids.max")), "77");
    let cpu = fake.root("cpu").unwrap().join(&rel);
    assert_eq!(read_trim(&cpu.join("cpu.shares")), "512");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "200000");
    assert!(fake.unit_exists(&unit));

    // exec joins the same scope (through cgroupfs, the unit exists already).
    let o = b.exec(&[], &["cat", "/proc/self/cgroup"]);
    o.assert_ok();
    let want = fake.root("unified").unwrap().join(&rel);
    let want = want.strip_prefix("/sys/fs/cgroup/unified").unwrap();
    // A runtime that cannot see cgroup2 (an emulated v1-only host) leaves it alone.
    assert!(
        ctx.emulating_pure_v1()
            || o.stdout
                .lines()
                .any(|l| l == format!("0::/{}", want.display())),
        "exec'd process should be in {}: {}",
        want.display(),
        o.stdout
    );
    assert_eq!(fake.calls_for(&unit).len(), 1, "exec must not call systemd");

    // A second container with the same cgroupsPath is refused with runc's words before it
    // asks systemd for anything, and the first container's unit is left alone. Before: its
    // StartTransientUnit failed with UnitExists and the failed create's clean-up sent StopUnit
    // for the first container's scope.
    let mut b2 = ctx.bundle(&["true"]);
    b2.set(
        "/linux/cgroupsPath",
        json!(format!("machine.slice:sprout:{}", b.id)),
    );
    let o = b2.create_with(&["--systemd-cgroup"]);
    o.assert_fail()
        .assert_one_line_error(&["container's cgroup is not empty"]);
    assert_eq!(
        fake.calls_for(&unit).len(),
        1,
        "the second create called systemd about the first one's unit: {:?}",
        fake.calls_for(&unit)
    );
    assert!(fake.unit_exists(&unit));
    assert_eq!(b.state()["status"], "running", "{}", b.state());

    // A bad org.systemd.property.* annotation fails the create with its name, before systemd
    // is asked for anything, and leaves no container behind.
    let mut b3 = ctx.bundle(&["true"]);
    let unit3 = format!("sprout-{}.scope", b3.id);
    b3.set(
        "/linux/cgroupsPath",
        json!(format!("machine.slice:sprout:{}", b3.id)),
    );
    b3.set("/annotations", json!({"org.systemd.property.Number1": "1"}));
    b3.create_with(&["--systemd-cgroup"])
        .assert_fail()
        .assert_one_line_error(&["org.systemd.property.Number1"]);
    assert!(
        fake.calls_for(&unit3).is_empty(),
        "{:?}",
        fake.calls_for(&unit3)
    );
    ctx.rt(&["state", &b3.id]).assert_fail();

    // ps / pause / resume work on the scope's directories.
    let ps = ctx.rt(&["ps", "--format", "json", &b.id]);
    ps.assert_ok();
    assert!(
        ps.json().as_array().unwrap().contains(&json!(pid)),
        "{}",
        ps.stdout
    );
    ctx.rt(&["pause", &b.id]).assert_ok();
    assert_eq!(b.status().as_deref(), Some("paused"));
    ctx.rt(&["resume", &b.id]).assert_ok();
    assert_eq!(b.status().as_deref(), Some("running"));

    // update: SetUnitProperties (runtime) and cgroupfs.
    ctx.rt(&[
        "update",
        "--memory",
        "134217728",
        "--pids-limit",
        "99",
        "--cpu-quota",
        "33333",
        &b.id,
    ])
    .assert_ok();
    let set: Vec<Value> = fake
        .calls_for(&unit)
        .into_iter()
        .filter(|c| c["method"] == "SetUnitProperties")
        .collect();
    assert_eq!(set.len(), 1, "{set:?}");
    assert_eq!(set[0]["runtime"], true);
    assert_eq!(set[0]["props"]["MemoryLimit"], 134217728);
    assert_eq!(set[0]["props"]["TasksMax"], 99);
    // A quota alone is per the cgroup's period (200ms): 166665us a second, which systemd keeps
    // as 17%, so 170000, and cgroupfs gets the quota that gives back (34000), as runc >= 1.4.
    assert_eq!(set[0]["props"]["CPUQuotaPeriodUSec"], 200000);
    assert_eq!(set[0]["props"]["CPUQuotaPerSecUSec"], 170000);
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "34000");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "200000");
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "134217728");
    assert_eq!(read_trim(&pids.join("pids.max")), "99");
    // A period alone keeps the quota (runc's update.bats "cpu limits"): 34000 per 100ms is
    // 340ms a second. Before: CPUQuotaPerSecUSec=infinity, and systemd lifted the quota.
    ctx.rt(&["update", "--cpu-period", "100000", &b.id])
        .assert_ok();
    let last = fake
        .calls_for(&unit)
        .into_iter()
        .rfind(|c| c["method"] == "SetUnitProperties")
        .unwrap();
    assert_eq!(last["props"]["CPUQuotaPeriodUSec"], 100000, "{last}");
    assert_eq!(last["props"]["CPUQuotaPerSecUSec"], 340000, "{last}");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "34000");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "100000");
    // checkBeforeUpdate refuses a limit below the usage before systemd hears of it (runc's
    // update.bats: with SetUnitProperties first, the OOM killer ended the container).
    let sets = |f: &FakeSystemd| {
        f.calls_for(&unit)
            .iter()
            .filter(|c| c["method"] == "SetUnitProperties")
            .count()
    };
    let before = sets(&fake);
    let r = ctx.scratch("cbu").join("r.json");
    fs::write(
        &r,
        r#"{"memory": {"limit": 1024, "checkBeforeUpdate": true}}"#,
    )
    .unwrap();
    ctx.rt(&["update", "-r", r.to_str().unwrap(), &b.id])
        .assert_fail()
        .assert_one_line_error(&["rejecting memory limit 1024 <= usage"]);
    assert_eq!(sets(&fake), before, "systemd was told of a refused limit");
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "134217728");
    assert_eq!(b.status().as_deref(), Some("running"));
    // Above the usage it goes to systemd and then to the cgroup (checked once, before both).
    fs::write(
        &r,
        r#"{"memory": {"limit": 268435456, "checkBeforeUpdate": true}}"#,
    )
    .unwrap();
    ctx.rt(&["update", "-r", r.to_str().unwrap(), &b.id])
        .assert_ok();
    assert_eq!(sets(&fake), before + 1);
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "268435456");

    // delete: StopUnit + ResetFailedUnit, nothing left in any hierarchy.
    b.kill("KILL").assert_ok();
    b.wait_status("stopped");
    b.delete().assert_ok();
    let methods: Vec<String> = fake
        .calls_for(&unit)
        .iter()
        .map(|c| c["method"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        methods,
        [
            "StartTransientUnit",
            "SetUnitProperties",
            "SetUnitProperties",
            "SetUnitProperties",
            "StopUnit",
            "ResetFailedUnit"
        ]
    );
    assert_nothing_left(&ctx, &fake, &b.id, &unit, &rel);
    drop(b);

    // 4. Foreground run, default slice (system.slice) and no prefix ("::name").
    let mut b = ctx.bundle(&["cat", "/proc/self/cgroup"]);
    let unit = format!("{}.scope", b.id);
    let rel = format!("system.slice/{unit}");
    b.set("/linux/cgroupsPath", json!(format!("::{}", b.id)));
    b.set("/linux/resources", json!({"memory": {"limit": 33554432}}));
    let o = b.run_with(&["--systemd-cgroup"]);
    o.assert_ok();
    let unified_root = fake.root("unified").unwrap();
    let want = unified_root.join(&rel);
    let want = want.strip_prefix("/sys/fs/cgroup/unified").unwrap();
    assert!(
        o.stdout
            .lines()
            .any(|l| l == format!("0::/{}", want.display())),
        "container's /proc/self/cgroup should show {}: {}",
        want.display(),
        o.stdout
    );
    let calls = fake.calls_for(&unit);
    assert_eq!(calls[0]["props"]["MemoryLimit"], 33554432);
    assert_eq!(calls[0]["props"]["Slice"], "system.slice");
    drop(b);
    // `run` without --detach deletes the container when it exits... the Bundle's
    // delete --force makes sure; then the unit must be gone.
    assert!(!fake.unit_exists(&unit));
    for d in scope_dirs(&fake, &rel) {
        assert!(!d.exists(), "{} left behind", d.display());
    }

    // 5. systemd answers StartTransientUnit with an error: one line, nothing left.
    let mut b = ctx.bundle(&["true"]);
    let unit = format!("dbuserr-{}.scope", b.id);
    b.set(
        "/linux/cgroupsPath",
        json!(format!("machine.slice:dbuserr:{}", b.id)),
    );
    let o = b.create_with(&["--systemd-cgroup"]);
    o.assert_fail()
        .assert_one_line_error(&["org.freedesktop.DBus.Error.InvalidArgs"]);
    assert!(o.stderr.contains("StartTransientUnit"), "{}", o.describe());
    assert_nothing_left(&ctx, &fake, &b.id, &unit, &format!("machine.slice/{unit}"));
    drop(b);

    // 6. The job fails: one line, the failed unit is reset, nothing left.
    let mut b = ctx.bundle(&["true"]);
    let unit = format!("jobfail-{}.scope", b.id);
    b.set(
        "/linux/cgroupsPath",
        json!(format!("machine.slice:jobfail:{}", b.id)),
    );
    let o = b.create_with(&["--systemd-cgroup"]);
    o.assert_fail().assert_one_line_error(&["job result"]);
    assert!(fake
        .calls_for(&unit)
        .iter()
        .any(|c| c["method"] == "ResetFailedUnit"));
    assert_nothing_left(&ctx, &fake, &b.id, &unit, &format!("machine.slice/{unit}"));
    drop(b);

    // 7. The fake's own tree is removed when it stops (checked after drop below).
    let roots: Vec<PathBuf> = fake.roots.iter().map(|(_, r)| r.clone()).collect();
    drop(fake);
    for r in roots {
        assert!(
            !r.exists(),
            "{} left behind by the fake systemd",
            r.display()
        );
    }
}
