//! Shared helpers for the security tests in `tests/` (escapes, faults, hostile input):
//! the harness of `sprout-test-support` (see there for `SPROUT_BIN`,
//! `SPROUT_GLOBAL_ARGS` and the isolation rules) for the [`Security`] suite, with
//! per-run directories of their own (`/run/sprout-sectest`, `/tmp/sprout-sectest` or
//! `/var/tmp/sprout-sectest` where /tmp is nosuid/nodev),
//! and a static C probe ([`probe_bin`]) that the tests copy into a rootfs to attack
//! the runtime from inside a container.
//!
//! Every test gets its own `--root` below `/run/sprout-sectest/<pid>/` and its own
//! scratch directory below `/tmp/sprout-sectest/<pid>/`; every container's
//! `linux.cgroupsPath` is the relative `sprout-sectest/<id>`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The security suite: `/run/sprout-sectest`, `/tmp/sprout-sectest`, cgroups
/// `sprout-sectest/<id>`, ids `st<pid>-...` (also the bundle directory names),
/// markers `SPROUT_SECTEST_CALL` and `SPROUT_SECTEST_ID`; leftover processes
/// are found by marker only.
pub enum Security {}

impl sprout_test_support::Suite for Security {
    const RUN_DIR: &'static str = "sprout-sectest";
    const CGROUP_PARENT: &'static str = "sprout-sectest";
    const ID_PREFIX: &'static str = "st";
    const CALL_MARKER: &'static str = "SPROUT_SECTEST_CALL";
    const CONTAINER_MARKER: &'static str = "SPROUT_SECTEST_ID";
    const POLL_TIMEOUT: Duration = Duration::from_secs(20);
    const BUNDLE_DIR_IS_ID: bool = true;
    const TRACK_UNMARKED: bool = false;
}

sprout_test_support::suite_api!(Security);

/// Places where something is mounted now that were not in the [`mount_snapshot`] `before`
/// ([`new_mount_points_since`]), except below the per-run directories of the test harness
/// (other tests' bundles and roots, checked separately per test).
pub fn new_host_mount_points(before: &[String]) -> Vec<String> {
    new_mount_points_since(before)
        .into_iter()
        .filter(|m| {
            !m.starts_with("/tmp/sprout-sectest/")
                && !m.starts_with("/var/tmp/sprout-sectest/")
                && !m.starts_with("/run/sprout-sectest/")
        })
        .collect()
}

/// The static probe (helpers/probe.c), compiled once per test run with `cc -static`.
pub fn probe_bin() -> PathBuf {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("helpers/probe.c");
            let out = Ctx::run_tmp().join("probe");
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let o = Command::new(&cc)
                .args(["-static", "-O2", "-Wall", "-o"])
                .arg(&out)
                .arg(&src)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {cc} to build the probe: {e}"));
            assert!(
                o.status.success(),
                "building the probe failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            out
        })
        .clone()
}

/// `bundle.install_probe()`: the static probe in a bundle's rootfs.
pub trait InstallProbe {
    /// Copy the static probe into the rootfs as /probe.
    fn install_probe(&self);
}

impl InstallProbe for Bundle<'_> {
    fn install_probe(&self) {
        let dst = self.rootfs().join("probe");
        fs::copy(probe_bin(), &dst).unwrap();
        fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// SHA-256 of a file (via sha256sum, always on Debian).
pub fn file_hash(p: &Path) -> String {
    let o = Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// (st_dev, st_ino) of a path.
pub fn dev_ino(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(p).unwrap();
    (m.dev(), m.ino())
}

/// A small deterministic RNG (xorshift64*) so fault runs are reproducible from the logged seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    /// Seed from SECTEST_SEED or the clock (always printed by the caller).
    pub fn seed_from_env() -> u64 {
        std::env::var("SECTEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            })
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545F4914F6CDD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// open(2) `path` with `flags` and move it to an fd number >= 100 (close-on-exec in this process),
/// for [`CmdOpts::extra_fds`].
pub fn high_fd(path: &Path, flags: i32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call; the fd is checked below.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    assert!(
        fd >= 0,
        "open {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    // SAFETY: F_DUPFD_CLOEXEC takes integers; `fd` is ours, open (checked above).
    let hi = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100) };
    assert!(hi >= 0);
    // SAFETY: `fd` is ours and closed once, here (its duplicate `hi` stays open).
    unsafe { libc::close(fd) };
    // SAFETY: `hi` (>= 0, checked) is a new fd that nothing else owns.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(hi) }
}

/// Parse `probe fds` output: (fd, target) pairs.
pub fn parse_fds(out: &str) -> Vec<(i32, String)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("FD "))
        .filter_map(|r| {
            let (n, t) = r.split_once(' ').unwrap_or((r, ""));
            Some((n.parse().ok()?, t.to_string()))
        })
        .collect()
}
