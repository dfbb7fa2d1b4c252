//! Test harness shared by the integration tests (`tests/integration`) and the
//! security tests (`tests/security`).
//!
//! The tests drive ANY runc-compatible binary: the path comes from the
//! environment variable `SPROUT_BIN` and defaults to
//! `<workspace>/target/release/sprout`.  Run them against runc with
//! `SPROUT_BIN=/usr/sbin/runc cargo test -p sprout-integration-tests`.
//! `SPROUT_GLOBAL_ARGS` (whitespace-separated) adds global flags before
//! `--root`, e.g. `--cgroup-manager=disabled` to try crun on a hybrid host.
//!
//! Each test crate describes itself with a [`Suite`] (its directories, cgroup
//! parent, id prefix, markers, poll deadline) and calls [`suite_api!`], which
//! gives it the non-generic names its tests use (`Ctx`, `Bundle`,
//! `cgroup_dirs`, `POLL_TIMEOUT`, ...).
//!
//! Isolation rules the helpers enforce:
//! * every test gets its own `--root` (state directory) below
//!   `/run/<RUN_DIR>/<pid>/` and its own scratch directory below
//!   `/tmp/<RUN_DIR>/<pid>/`, and every container a unique id;
//! * `linux.cgroupsPath` is always RELATIVE (`<CGROUP_PARENT>/<id>`) so the
//!   container's cgroups nest under the test process's own cgroup;
//! * every runtime invocation runs under a deadline and only processes the
//!   tests started are ever killed (by pid);
//! * the [`Bundle`] drop guard runs `delete --force` and removes the bundle
//!   (never when something is still mounted below it).

use serde_json::{json, Value};
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::marker::PhantomData;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use serde_json;

mod child;
pub use child::{exec_in_child, exit_code, in_child, in_child_status, PANICKED};

/// Default deadline for a single runtime invocation.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// What tells one test suite's containers, directories and processes from
/// another's (and from everything else on the host).
pub trait Suite: 'static {
    /// Per-run directories: `/tmp/<RUN_DIR>/<pid>/` (scratch, bundles) and
    /// `/run/<RUN_DIR>/<pid>/` (the `--root` of each test).
    const RUN_DIR: &'static str;
    /// Parent of every container's relative cgroupsPath
    /// (`<CGROUP_PARENT>/<id>`); also the containers' hostname.
    const CGROUP_PARENT: &'static str;
    /// First letters of every container id.
    const ID_PREFIX: &'static str;
    /// Environment variable placed in every runtime invocation's environment
    /// (value unique per invocation) so leftover runtime processes can be found.
    const CALL_MARKER: &'static str;
    /// Environment variable placed in every container process's environment
    /// (value = container id) so leftover container processes can be found.
    const CONTAINER_MARKER: &'static str;
    /// Default deadline when polling for a state change.
    const POLL_TIMEOUT: Duration;
    /// Name each bundle directory after its container id (else `b<n>`, which
    /// keeps paths short for long ids).
    const BUNDLE_DIR_IS_ID: bool;
    /// Find leftover processes by cgroup, cwd and bundle/root paths too (not
    /// only by marker), and let the [`Bundle`] guard kill the container
    /// processes that survive `delete --force`.
    const TRACK_UNMARKED: bool;
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn next() -> usize {
    COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// Move the calling thread (or a child before exec: only raw syscalls, no allocation) into a
/// mount namespace of its own whose every mount is private, so nothing mounted or unmounted
/// there reaches the host. A thread must not share its fs state (a fresh `std::thread` or a
/// forked child; unshare(CLONE_NEWNS) refuses otherwise).
pub fn unshare_private_mounts() -> std::io::Result<()> {
    // SAFETY: unshare takes a flag; mount reads a NUL-terminated literal and null pointers
    // (allowed for a propagation change). Both act on this thread's own fs context only.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0
            || libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Detaches the mount at its path when dropped (`umount2(MNT_DETACH)`: with every mount below
/// it), so a test's own mounts go even when an assertion fails first.
pub struct DetachOnDrop(pub PathBuf);

impl Drop for DetachOnDrop {
    fn drop(&mut self) {
        let Ok(c) = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()) else {
            return;
        };
        // SAFETY: umount2 reads the NUL-terminated path `c`, alive for the call.
        let _ = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The runtime binary under test.
pub fn runtime_bin() -> PathBuf {
    match std::env::var_os("SPROUT_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/sprout"),
    }
}

/// A short name for the runtime under test ("runc", "sprout", ...).
pub fn runtime_name() -> String {
    runtime_bin()
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// True if a process with this pid exists.
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(pid, 0) only probes for existence: integers in, no memory touched.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Mount points (as seen from this process's mount namespace).
pub fn mount_points() -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(unescape_mountinfo))
        .collect()
}

/// The super options of the cgroup2 mount at /sys/fs/cgroup (`rw,nsdelegate,...`), as this
/// process sees them; `None` where /sys/fs/cgroup is not cgroup2 (a v1 or hybrid host). They
/// are the hierarchy's, for the whole host: a cgroup2 mount made in the initial cgroup
/// namespace sets them to its own.
pub fn host_cgroup2_options() -> Option<String> {
    let mi = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mi.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let sep = f.iter().position(|x| *x == "-")?;
        (f.get(4) == Some(&"/sys/fs/cgroup") && f.get(sep + 1) == Some(&"cgroup2"))
            .then(|| f.get(sep + 3).map(|s| s.to_string()))
            .flatten()
    })
}

/// The mount table of this process's mount namespace at one moment, to compare before and
/// after a command: /proc/self/mountinfo's lines without their first two fields (the mount id
/// and the parent's id, which change on every mount), sorted. A line still says where
/// (`mount_point`), what (major:minor, root, source, fs type) and how (options) something is
/// mounted, so a remount or a mount stacked on an existing mount point is a new line too.
pub fn mount_snapshot() -> Vec<String> {
    let mut m: Vec<String> = fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .map(|l| l.splitn(3, ' ').nth(2).unwrap_or("").to_string())
        .collect();
    m.sort();
    m
}

/// The mount point (unescaped) of a [`mount_snapshot`] line.
pub fn mount_point(line: &str) -> String {
    line.split(' ')
        .nth(2)
        .map(unescape_mountinfo)
        .unwrap_or_default()
}

/// [`mount_snapshot`] lines present now but not in `before` that mention any of `needles`
/// (mount point, mount root or source); the others (other tests', other users' mounts on a
/// shared host) are not the caller's business.
pub fn new_mounts_since(before: &[String], needles: &[&str]) -> Vec<String> {
    mount_snapshot()
        .into_iter()
        .filter(|m| !before.contains(m))
        .filter(|m| needles.iter().any(|n| !n.is_empty() && m.contains(n)))
        .collect()
}

/// Mount points of the [`mount_snapshot`] now that no line of `before` had, unescaped: a new
/// place where something is mounted (unlike [`new_mounts_since`], a remount or a mount stacked
/// on a mount point that was there is not one), whatever mentions it.
pub fn new_mount_points_since(before: &[String]) -> Vec<String> {
    let old: std::collections::HashSet<String> = before.iter().map(|l| mount_point(l)).collect();
    let mut new: Vec<String> = mount_snapshot()
        .iter()
        .map(|l| mount_point(l))
        .filter(|p| !old.contains(p))
        .collect();
    new.sort();
    new.dedup();
    new
}

fn unescape_mountinfo(s: &str) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v as char);
                i += 4;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// True when something is mounted at or below `dir`.
pub fn has_mounts_below(dir: &Path) -> bool {
    let d = dir.to_string_lossy().to_string();
    mount_points()
        .iter()
        .any(|m| m == &d || m.starts_with(&format!("{d}/")))
}

/// Remove a directory tree, but never when anything is mounted below it
/// (a leaked bind mount must not make us delete host files).
pub fn safe_remove_dir(dir: &Path) {
    if !dir.exists() {
        return;
    }
    if has_mounts_below(dir) {
        eprintln!(
            "NOT removing {} : something is still mounted below it",
            dir.display()
        );
        return;
    }
    let _ = fs::remove_dir_all(dir);
}

struct RunDirs {
    suite: &'static str,
    /// `Suite::CGROUP_PARENT`, removed at exit.
    cgroup_parent: &'static str,
    tmp: PathBuf,
    run: PathBuf,
    template: PathBuf,
}

extern "C" fn remove_run_dirs() {
    if let Some(d) = RUN_DIRS.get() {
        safe_remove_dir(&d.tmp);
        let _ = fs::remove_dir(&d.run);
        remove_cgroup_parent(d.cgroup_parent);
    }
}

static RUN_DIRS: OnceLock<RunDirs> = OnceLock::new();

fn clean_stale(parent: &Path) {
    if let Ok(rd) = fs::read_dir(parent) {
        for e in rd.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                if !pid_alive(pid) {
                    safe_remove_dir(&e.path());
                }
            }
        }
    }
}

/// Where bundles and scratch files go: /tmp, unless it is mounted nosuid or nodev (Debian 13 and
/// Fedora mount a tmpfs there with both), which would make setuid binaries and device nodes in a
/// test's rootfs fail for reasons that are the host's, not the runtime's: then /var/tmp.
fn scratch_base() -> PathBuf {
    let flags = |p: &str| {
        let c = std::ffi::CString::new(p).unwrap();
        // SAFETY: statvfs is a plain C struct of integers: all-zero is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: statvfs writes one struct into the live local `st`; `c` is a NUL-terminated
        // path that outlives the call.
        let ok = unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0;
        ok.then_some(st.f_flag)
    };
    match flags("/tmp") {
        Some(f) if f & (libc::ST_NOSUID | libc::ST_NODEV) != 0 => PathBuf::from("/var/tmp"),
        _ => PathBuf::from("/tmp"),
    }
}

/// The per-run directories of this test binary (one suite per binary).
fn run_dirs<S: Suite>() -> &'static RunDirs {
    let d = RUN_DIRS.get_or_init(|| {
        let pid = std::process::id();
        let tmp_parent = scratch_base().join(S::RUN_DIR);
        let run_parent = Path::new("/run").join(S::RUN_DIR);
        fs::create_dir_all(&tmp_parent).unwrap();
        fs::create_dir_all(&run_parent).unwrap();
        clean_stale(&tmp_parent);
        clean_stale(&run_parent);
        let tmp = tmp_parent.join(pid.to_string());
        let run = run_parent.join(pid.to_string());
        fs::create_dir_all(&tmp).unwrap();
        fs::create_dir_all(&run).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
        let template = tmp.join("template-rootfs");
        build_busybox_rootfs(&template);
        // SAFETY: registers an `extern "C" fn()` taking no arguments; at exit it removes this
        // run's directories if RUN_DIRS is set, and a panic in it aborts (extern "C") instead
        // of unwinding into libc.
        unsafe {
            libc::atexit(remove_run_dirs);
        }
        RunDirs {
            suite: S::RUN_DIR,
            cgroup_parent: S::CGROUP_PARENT,
            tmp,
            run,
            template,
        }
    });
    assert_eq!(d.suite, S::RUN_DIR, "one test suite per test binary");
    d
}

/// Applets of /bin/busybox (computed once).
pub fn busybox_applets() -> &'static Vec<String> {
    static APPLETS: OnceLock<Vec<String>> = OnceLock::new();
    APPLETS.get_or_init(|| {
        let out = Command::new("/bin/busybox")
            .arg("--list")
            .output()
            .expect("run busybox --list");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s != "busybox" && !s.contains('/'))
            .collect()
    })
}

/// A busybox tree at `root`: `install_busybox` puts bin/busybox in place,
/// then one symlink per applet, etc/passwd, etc/group and a few empty
/// directories.
fn busybox_tree(root: &Path, install_busybox: impl FnOnce(&Path)) {
    fs::create_dir_all(root.join("bin")).unwrap();
    install_busybox(&root.join("bin/busybox"));
    for a in busybox_applets() {
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(a));
    }
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )
    .unwrap();
    fs::write(
        root.join("etc/group"),
        "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
    )
    .unwrap();
    for d in ["tmp", "proc", "sys", "dev", "root", "home/user"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Build a busybox rootfs at `root`: bin/busybox + one symlink per applet,
/// etc/passwd, etc/group and a few empty directories.
pub fn build_busybox_rootfs(root: &Path) {
    busybox_tree(root, |bb| {
        fs::copy("/bin/busybox", bb).expect("copy /bin/busybox");
    });
}

/// Give a bundle its own rootfs: cheap clone of the shared template
/// (busybox hard-linked, applet symlinks recreated) so tests can write to it
/// without seeing each other.
fn clone_rootfs<S: Suite>(dst: &Path) {
    let t = run_dirs::<S>().template.join("bin/busybox");
    busybox_tree(dst, |bb| {
        if fs::hard_link(&t, bb).is_err() {
            fs::copy(&t, bb).unwrap();
        }
    });
}

/// Result of one runtime invocation.
#[derive(Debug, Clone)]
pub struct Output {
    pub cmdline: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Value of the suite's call marker ([`Suite::CALL_MARKER`]) in this
    /// invocation's environment.
    pub marker: String,
}

impl Output {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
    /// Panic with full details unless the command exited 0.
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.ok(),
            "command failed (expected exit 0): {}",
            self.describe()
        );
        self
    }
    /// Panic unless the command exited non-zero (a crash by signal also fails this).
    pub fn assert_fail(&self) -> &Self {
        assert!(
            matches!(self.code, Some(c) if c != 0),
            "command should have exited non-zero: {}",
            self.describe()
        );
        self
    }
    pub fn describe(&self) -> String {
        format!(
            "\n  cmd:    {}\n  exit:   {:?} signal: {:?}\n  stdout: {:?}\n  stderr: {:?}",
            self.cmdline, self.code, self.signal, self.stdout, self.stderr
        )
    }
    /// The error message must be exactly one non-empty line and contain
    /// (case-insensitively) at least one of `keywords`.
    pub fn assert_one_line_error(&self, keywords: &[&str]) -> &Self {
        let e = self.stderr.trim();
        assert!(
            !e.is_empty(),
            "expected an error message on stderr: {}",
            self.describe()
        );
        assert_eq!(
            e.lines().count(),
            1,
            "error message should be ONE line: {}",
            self.describe()
        );
        let low = e.to_lowercase();
        assert!(
            keywords.iter().any(|k| low.contains(&k.to_lowercase())),
            "error message should name the problem (one of {:?}): {}",
            keywords,
            self.describe()
        );
        self
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.describe()))
    }
}

/// Options for one invocation.
#[derive(Default, Clone)]
pub struct CmdOpts {
    pub stdin: Option<Vec<u8>>,
    pub cwd: Option<PathBuf>,
    pub timeout: Option<Duration>,
    /// Leave out `--root` (for `spec`, `features`, `--version`).
    pub no_root: bool,
    /// Send stdout to this file (kept afterwards; a container started by
    /// `create`/`run -d`/`exec -d` inherits it and may write later).
    pub stdout_to: Option<PathBuf>,
    /// Extra fds the runtime inherits: (fd number in the runtime, fd in this process). They are
    /// dup2'd in the child, so they are open and NOT close-on-exec in the runtime.
    pub extra_fds: Vec<(i32, i32)>,
    /// Signals the runtime starts with ignored (SIG_IGN), as a caller such as nohup or a shell
    /// running it in the background hands them down.
    pub ignore_signals: Vec<i32>,
}

/// A running runtime invocation (e.g. a foreground `run` in the background).
pub struct Spawned {
    child: Child,
    out_path: PathBuf,
    err_path: PathBuf,
    cmdline: String,
    marker: String,
}

impl Spawned {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    /// Value of the suite's call marker in this invocation's environment.
    pub fn marker(&self) -> &str {
        &self.marker
    }
    /// Wait with a deadline; on timeout kill (SIGKILL) the process we started and panic.
    pub fn wait(mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait().expect("try_wait") {
                Some(s) => break s,
                None if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let out = self.collect(None, Some(9));
                    panic!("command timed out after {:?}: {}", timeout, out.describe());
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        self.collect(status.code(), status.signal())
    }
    fn collect(&self, code: Option<i32>, signal: Option<i32>) -> Output {
        let rd = |p: &Path| {
            let mut s = Vec::new();
            if let Ok(mut f) = fs::File::open(p) {
                let _ = f.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        };
        let o = Output {
            cmdline: self.cmdline.clone(),
            code,
            signal,
            stdout: rd(&self.out_path),
            stderr: rd(&self.err_path),
            marker: self.marker.clone(),
        };
        let _ = fs::remove_file(&self.out_path);
        let _ = fs::remove_file(&self.err_path);
        o
    }
}

/// Per-test context: its own `--root`, scratch directory and id prefix.
pub struct Ctx<S: Suite> {
    pub name: String,
    pub root: PathBuf,
    pub dir: PathBuf,
    /// The runtime binary this context drives (SPROUT_BIN unless overridden).
    pub bin: PathBuf,
    tag: String,
    /// Run every command in a mount namespace of its own without the cgroup2 mount at
    /// /sys/fs/cgroup/unified ([`Ctx::emulate_pure_v1`]).
    pure_v1: bool,
    suite: PhantomData<fn() -> S>,
}

impl<S: Suite> Ctx<S> {
    pub fn new(name: &str) -> Self {
        let rd = run_dirs::<S>();
        let n = next();
        let short: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(12)
            .collect();
        let tag = format!("{short}{n}");
        let root = rd.run.join(&tag);
        let dir = rd.tmp.join(&tag);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        Ctx {
            name: name.to_string(),
            root,
            dir,
            bin: runtime_bin(),
            tag,
            // The whole suite on an emulated v1-only host: SPROUT_TEST_PURE_V1=1.
            pure_v1: std::env::var_os("SPROUT_TEST_PURE_V1").is_some_and(|v| v == "1")
                && Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists(),
            suite: PhantomData,
        }
    }

    /// A cgroup v1 host without a cgroup2 hierarchy (systemd's "legacy" layout: RHEL and
    /// CentOS 7 and 8, Amazon Linux 2), on a hybrid host: every command of this context runs
    /// in a mount namespace of its own (private propagation) where /sys/fs/cgroup/unified is
    /// unmounted, as crun's wrapper on this host does. The host's mounts are not changed.
    /// `false` (and the skip line printed) where there is no such mount to take away.
    pub fn emulate_pure_v1(&mut self) -> bool {
        let hybrid = Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists()
            && Path::new("/sys/fs/cgroup/memory").is_dir();
        if !hybrid {
            eprintln!(
                "skipped: emulates a v1-only host by hiding the cgroup2 mount of a hybrid one \
                 (v1 hierarchies and /sys/fs/cgroup/unified); this host is not hybrid"
            );
            return false;
        }
        self.pure_v1 = true;
        true
    }

    /// Whether this context hides the cgroup2 mount from the runtime ([`Ctx::emulate_pure_v1`]).
    pub fn emulating_pure_v1(&self) -> bool {
        self.pure_v1
    }

    /// What every command of this context gets before it runs the runtime (a test that builds
    /// its own `Command` for it calls this): the v1-only emulation's mount namespace.
    pub fn prepare_command(&self, cmd: &mut Command) {
        if !self.pure_v1 {
            return;
        }
        use std::os::unix::process::CommandExt;
        // SAFETY: only raw syscalls (unshare, mount, umount2) on static C strings, in the
        // forked child before exec; they change this child's own mount namespace only.
        unsafe {
            cmd.pre_exec(|| {
                unshare_private_mounts()?;
                if libc::umount2(c"/sys/fs/cgroup/unified".as_ptr(), libc::MNT_DETACH) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Like [`Ctx::new`] but driving `bin` instead of SPROUT_BIN.
    pub fn with_bin(name: &str, bin: &Path) -> Self {
        let mut c = Self::new(name);
        c.bin = bin.to_path_buf();
        c
    }

    /// The per-run scratch directory shared by all contexts of this test binary.
    pub fn run_tmp() -> PathBuf {
        run_dirs::<S>().tmp.clone()
    }

    /// A new unique container id.
    pub fn new_id(&self) -> String {
        format!(
            "{}{}-{}-{}",
            S::ID_PREFIX,
            std::process::id(),
            self.tag,
            next()
        )
    }

    /// A new bundle (config.json in runc-spec default shape) running `args`.
    pub fn bundle(&self, args: &[&str]) -> Bundle<'_, S> {
        self.bundle_with_id(&self.new_id(), args)
    }

    /// A bundle whose container id is `id` (must be unique on the host, as
    /// it names the cgroup too).
    pub fn bundle_with_id(&self, id: &str, args: &[&str]) -> Bundle<'_, S> {
        let id = id.to_string();
        let dir = if S::BUNDLE_DIR_IS_ID {
            self.dir.join(&id)
        } else {
            self.dir.join(format!("b{}", next()))
        };
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        clone_rootfs::<S>(&dir.join("rootfs"));
        let config = default_config::<S>(&id, args);
        Bundle {
            ctx: self,
            id,
            dir,
            config,
        }
    }

    /// A fresh scratch directory (outside any bundle) with mode 0777.
    pub fn scratch(&self, name: &str) -> PathBuf {
        let p = self.dir.join(format!("{name}-{}", next()));
        fs::create_dir_all(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o777)).unwrap();
        p
    }

    fn command(
        &self,
        args: &[&str],
        opts: &CmdOpts,
    ) -> (Command, String, String, PathBuf, PathBuf) {
        let bin = self.bin.clone();
        let mut cmd = Command::new(&bin);
        let mut line = bin.display().to_string();
        // Extra global flags, e.g. SPROUT_GLOBAL_ARGS=--cgroup-manager=disabled for crun.
        if let Ok(g) = std::env::var("SPROUT_GLOBAL_ARGS") {
            for a in g.split_whitespace() {
                cmd.arg(a);
                line.push_str(&format!(" {a}"));
            }
        }
        if !opts.no_root {
            cmd.arg("--root").arg(&self.root);
            line.push_str(&format!(" --root {}", self.root.display()));
        }
        for a in args {
            cmd.arg(a);
            line.push(' ');
            if a.is_empty() || a.contains(' ') {
                line.push_str(&format!("'{a}'"));
            } else {
                line.push_str(a);
            }
        }
        let marker = format!("{}-{}-{}", std::process::id(), self.tag, next());
        cmd.env(S::CALL_MARKER, &marker);
        // A test run from a systemd unit of Type=notify must not make every `start` wait for a
        // READY no container sends (tests/integration/tests/notify_socket.rs sets its own).
        cmd.env_remove("NOTIFY_SOCKET");
        let out_path = self.dir.join(format!(".out-{marker}"));
        let err_path = self.dir.join(format!(".err-{marker}"));
        match &opts.stdout_to {
            Some(p) => cmd.stdout(
                fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .unwrap(),
            ),
            None => cmd.stdout(fs::File::create(&out_path).unwrap()),
        };
        cmd.stderr(fs::File::create(&err_path).unwrap());
        match &opts.stdin {
            Some(data) => {
                let p = self.dir.join(format!(".in-{marker}"));
                fs::write(&p, data).unwrap();
                cmd.stdin(fs::File::open(&p).unwrap());
                let _ = fs::remove_file(&p);
            }
            None => {
                cmd.stdin(Stdio::null());
            }
        }
        cmd.current_dir(opts.cwd.clone().unwrap_or_else(|| self.dir.clone()));
        self.prepare_command(&mut cmd);
        if !opts.ignore_signals.is_empty() {
            use std::os::unix::process::CommandExt;
            let sigs = opts.ignore_signals.clone();
            // SAFETY: only signal(2), async-signal-safe, between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    for &sig in &sigs {
                        libc::signal(sig, libc::SIG_IGN);
                    }
                    Ok(())
                });
            }
        }
        if !opts.extra_fds.is_empty() {
            use std::os::unix::process::CommandExt;
            let fds = opts.extra_fds.clone();
            // SAFETY: only async-signal-safe calls (dup2/fcntl) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    for &(dst, src) in &fds {
                        if dst == src {
                            let fl = libc::fcntl(src, libc::F_GETFD);
                            libc::fcntl(src, libc::F_SETFD, fl & !libc::FD_CLOEXEC);
                        } else if libc::dup2(src, dst) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        (cmd, line, marker, out_path, err_path)
    }

    /// Start the runtime with `args` without waiting for it.
    pub fn spawn_opts(&self, args: &[&str], opts: &CmdOpts) -> Spawned {
        let (mut cmd, cmdline, marker, out_path, err_path) = self.command(args, opts);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot execute runtime {} : {e}", self.bin.display()));
        Spawned {
            child,
            out_path,
            err_path,
            cmdline,
            marker,
        }
    }

    pub fn spawn(&self, args: &[&str]) -> Spawned {
        self.spawn_opts(args, &CmdOpts::default())
    }

    /// Run the runtime (`<bin> --root <root> args...`) under a deadline.
    pub fn rt_opts(&self, args: &[&str], opts: &CmdOpts) -> Output {
        let t = opts.timeout.unwrap_or(CMD_TIMEOUT);
        self.spawn_opts(args, opts).wait(t)
    }

    pub fn rt(&self, args: &[&str]) -> Output {
        self.rt_opts(args, &CmdOpts::default())
    }

    /// `state <id>` parsed (panics if it fails).
    pub fn state(&self, id: &str) -> Value {
        let o = self.rt(&["state", id]);
        o.assert_ok();
        o.json()
    }

    pub fn status(&self, id: &str) -> Option<String> {
        let o = self.rt(&["state", id]);
        if !o.ok() {
            return None;
        }
        o.json()["status"].as_str().map(str::to_string)
    }

    /// Poll `state` until the status is `want`.
    pub fn wait_status(&self, id: &str, want: &str) {
        let deadline = Instant::now() + S::POLL_TIMEOUT;
        loop {
            let s = self.status(id);
            if s.as_deref() == Some(want) {
                return;
            }
            if Instant::now() > deadline {
                panic!("container {id} did not reach status {want:?} (last: {s:?})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Entries of this test's state directory (`--root`), if any.
    pub fn root_entries(&self) -> Vec<String> {
        fs::read_dir(&self.root)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// After a failed invocation: nothing is left behind — no state under
    /// `--root` (other than `allowed` ids), no mounts below the bundle or the
    /// root, no cgroup for `bundle_id`, no process from that invocation or
    /// with the bundle's container marker, and the pid file (if any) does
    /// not name a live process.
    pub fn assert_no_trace(
        &self,
        failed: &Output,
        bundle: &Bundle<'_, S>,
        allowed: &[&str],
        pid_file: Option<&Path>,
    ) {
        let mut problems = Vec::new();
        let extra: Vec<String> = self
            .root_entries()
            .into_iter()
            .filter(|e| !allowed.contains(&e.as_str()))
            .collect();
        if !extra.is_empty() {
            problems.push(format!(
                "state left under --root {}: {:?}",
                self.root.display(),
                extra
            ));
        }
        for m in mount_points() {
            for d in [&bundle.dir, &self.root] {
                let d = d.to_string_lossy();
                if m == *d || m.starts_with(&format!("{d}/")) {
                    problems.push(format!("mount left: {m}"));
                }
            }
        }
        if allowed.is_empty() || !allowed.contains(&bundle.id.as_str()) {
            for c in cgroup_dirs::<S>(&bundle.id) {
                if c.exists() {
                    problems.push(format!("cgroup left: {}", c.display()));
                }
            }
        }
        let procs = if S::TRACK_UNMARKED {
            // With other containers legitimately in this --root, only the
            // failed bundle's own directory identifies leftovers.
            let paths: Vec<&Path> = if allowed.is_empty() {
                vec![&bundle.dir, &self.root]
            } else {
                vec![&bundle.dir]
            };
            find_test_processes::<S>(&failed.marker, &bundle.id, &paths)
        } else {
            find_marked_processes::<S>(&failed.marker, &bundle.id)
        };
        if !procs.is_empty() {
            problems.push(format!("processes left: {procs:?}"));
        }
        if let Some(p) = pid_file {
            if let Ok(s) = fs::read_to_string(p) {
                if let Ok(pid) = s.trim().parse::<i32>() {
                    if pid_alive(pid) && !is_zombie(pid) {
                        problems.push(format!("pid file {} names live process {pid}", p.display()));
                    }
                }
            }
        }
        assert!(
            problems.is_empty(),
            "left behind after failure: {:?}{}",
            problems,
            failed.describe()
        );
    }
}

impl<S: Suite> Drop for Ctx<S> {
    fn drop(&mut self) {
        // Containers are deleted by their Bundle guards; remove what is left.
        if self.root.exists() && !has_mounts_below(&self.root) {
            let leftovers = self.root_entries();
            if !leftovers.is_empty() {
                for id in &leftovers {
                    let _ = self.rt_opts(
                        &["delete", "--force", id],
                        &CmdOpts {
                            timeout: Some(Duration::from_secs(20)),
                            ..Default::default()
                        },
                    );
                }
            }
            safe_remove_dir(&self.root);
        }
        safe_remove_dir(&self.dir);
    }
}

pub fn is_zombie(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Whether `pid` has a SIGKILL pending (for itself or its thread group): the kernel runs none of
/// its code again, but on a loaded host it may still wait for a CPU to exit.
pub fn sigkill_pending(pid: i32) -> bool {
    let st = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    ["SigPnd", "ShdPnd"]
        .iter()
        .filter_map(|k| status_field(&st, k))
        .filter_map(|v| u64::from_str_radix(&v, 16).ok())
        .any(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
}

/// Whether `pid` is in the cgroup of container `id` (`/<CGROUP_PARENT>/<id>`) in any hierarchy.
fn in_container_cgroup<S: Suite>(pid: i32, id: &str) -> bool {
    let cg = format!("/{}/{id}", S::CGROUP_PARENT);
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.lines().any(|l| l.ends_with(&cg)))
}

/// Whether `pid` has never run since its fork: its scheduler statistics record no time on a CPU
/// (`/proc/<pid>/schedstat`). On a loaded host a new process can wait over 100 ms for its first
/// time slice.
pub fn never_ran(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().map(|t| t == "0"))
        .unwrap_or(false)
}

/// `procs` less the copies of the runtime `bin` itself (processes of the runtime's that have
/// not exec'd: sprout's network namespace helper) outside the container `id`'s cgroups that
/// will run none of their code but their exit, and are gone within `bound`: dying
/// ([`sigkill_pending`]: the helper's parent-death signal, sent when the runtime was killed) or
/// never run since their fork ([`never_ran`]: the helper's first steps are to ask for that
/// signal and to exit if its parent is already gone). What is left: every other process, and
/// such a copy still there at the bound. A process in the container's cgroups (its init, even
/// before its exec) is never waited for: `delete --force` has to have ended it.
pub fn without_dying_runtime_copies<S: Suite>(
    procs: Vec<(i32, String)>,
    bin: &Path,
    id: &str,
    bound: std::time::Duration,
) -> Vec<(i32, String)> {
    let bin = fs::canonicalize(bin).unwrap_or_else(|_| bin.to_path_buf());
    let exiting_copy = |pid: i32| {
        !in_container_cgroup::<S>(pid, id)
            && fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == bin)
            && (sigkill_pending(pid) || never_ran(pid))
    };
    let (mut exiting, mut left): (Vec<_>, Vec<_>) =
        procs.into_iter().partition(|(pid, _)| exiting_copy(*pid));
    let _ = poll(bound, || {
        exiting.retain(|(pid, _)| !is_zombie(*pid));
        exiting.is_empty().then_some(())
    });
    left.extend(
        exiting
            .into_iter()
            .map(|(pid, cmd)| (pid, format!("{cmd} (exiting, still there after {bound:?})"))),
    );
    left
}

/// Pids (not zombies, not this process) that belong to a container or a
/// runtime invocation of a test: environment with `CALL_MARKER=<call>` or
/// `CONTAINER_MARKER=<id>`, a cgroup path ending in `/<CGROUP_PARENT>/<id>`,
/// or an environment/command line that mentions one of `paths` (the bundle
/// directory, the --root directory: e.g. runc's `runc init` carries
/// `_LIBCONTAINER_STATEDIR=<root>/<id>`) or has its cwd there.
pub fn find_test_processes<S: Suite>(call: &str, id: &str, paths: &[&Path]) -> Vec<(i32, String)> {
    let needles: Vec<String> = paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.len() > 1)
        .collect();
    scan_processes::<S>(call, id, |pid, marked, env| {
        let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let env_s = String::from_utf8_lossy(env);
        let cmd_s = String::from_utf8_lossy(&cmd);
        let cwd = fs::read_link(format!("/proc/{pid}/cwd"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let hit = marked
            || (!id.is_empty() && id != "-" && in_container_cgroup::<S>(pid, id))
            || needles.iter().any(|n| {
                env_s.contains(n.as_str())
                    || cmd_s.contains(n.as_str())
                    || cwd == *n
                    || cwd.starts_with(&format!("{n}/"))
            });
        hit.then(|| cmd_s.replace('\0', " "))
    })
}

/// Pids (not zombies) whose environment contains `CALL_MARKER=<call>` or
/// `CONTAINER_MARKER=<id>`.
pub fn find_marked_processes<S: Suite>(call: &str, id: &str) -> Vec<(i32, String)> {
    scan_processes::<S>(call, id, |pid, marked, _env| {
        marked.then(|| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default()
        })
    })
}

/// Every process but this one and zombies: `pick(pid, marked, environ)`
/// returns its command line when it belongs to the test. `marked`: its
/// environment has `CALL_MARKER=<call>` or `CONTAINER_MARKER=<id>`.
fn scan_processes<S: Suite>(
    call: &str,
    id: &str,
    mut pick: impl FnMut(i32, bool, &[u8]) -> Option<String>,
) -> Vec<(i32, String)> {
    let a = format!("{}={call}", S::CALL_MARKER);
    let b = format!("{}={id}", S::CONTAINER_MARKER);
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me || is_zombie(pid) {
            continue;
        }
        let env = fs::read(format!("/proc/{pid}/environ"));
        let marked = env.as_deref().is_ok_and(|env| {
            env.split(|c| *c == 0)
                .any(|v| v == a.as_bytes() || v == b.as_bytes())
        });
        if let Some(cmd) = pick(pid, marked, env.as_deref().unwrap_or_default()) {
            out.push((pid, cmd));
        }
    }
    out
}

/// Cgroup directories that a container with cgroupsPath
/// `<CGROUP_PARENT>/<id>` could have: below this process's own cgroup in
/// every hierarchy (and, in case a runtime wrongly treats the path as
/// absolute, below each root).
pub fn cgroup_dirs<S: Suite>(id: &str) -> Vec<PathBuf> {
    cgroup_dirs_under(S::CGROUP_PARENT, id, true)
}

/// The runtime removes the parent directory of a container's cgroup only if that container's
/// create made it; with tests running side by side, the last container out finds it made by
/// another and leaves it. So the test process removes it (in every hierarchy, if empty) when
/// it exits, after all its tests (`remove_run_dirs`): not from a test's own clean-up, where
/// another test could be between making the parent and making its container's directory in it.
fn remove_cgroup_parent(parent: &str) {
    // Below this process's own cgroup only: a root-level directory of that name is not ours.
    let mut dirs: Vec<PathBuf> = cgroup_dirs_under(parent, "x", false)
        .iter()
        .filter_map(|d| d.parent().map(Path::to_path_buf))
        .collect();
    dirs.dedup();
    for d in dirs {
        // Only an empty cgroup can go; a busy or missing one is left as it is.
        let _ = fs::remove_dir(&d);
    }
}

/// The cgroup controllers among `need` that this test's containers cannot have, because they
/// are not handed down to where their cgroups are made (below [`relative_base`]): on pure v2 the
/// ones missing from that cgroup's `cgroup.subtree_control`, which a runtime must not change (it
/// did not make that cgroup; a v2 cgroup that holds processes, as the test's own does, cannot
/// enable any); on v1 and hybrid hosts those without a hierarchy of their own.
pub fn missing_controllers(need: &[&str]) -> (Vec<String>, String) {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let pure_v2 = !own.is_empty() && own.lines().all(|l| l.starts_with("0::"));
    if pure_v2 {
        let path = own
            .lines()
            .next()
            .unwrap_or("0::/")
            .trim_start_matches("0::");
        let base = relative_base(path, &own);
        let file = format!(
            "/sys/fs/cgroup{}/cgroup.subtree_control",
            base.trim_end_matches('/')
        );
        let have = fs::read_to_string(&file).unwrap_or_default();
        let missing = need
            .iter()
            .filter(|c| !have.split_whitespace().any(|h| h == **c))
            .map(|c| c.to_string())
            .collect();
        return (missing, file);
    }
    let missing = need
        .iter()
        .filter(|c| {
            !own.lines().any(|l| {
                l.split(':')
                    .nth(1)
                    .is_some_and(|ctrls| ctrls.split(',').any(|x| x == **c))
            })
        })
        .map(|c| c.to_string())
        .collect();
    (missing, "/proc/self/cgroup".to_string())
}

/// `true` (and the skip line printed) unless this is a pure cgroup v2 host.
pub fn skip_unless_pure_v2() -> bool {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return false;
    }
    eprintln!("skipped: needs a pure cgroup v2 host (this one mounts v1 hierarchies)");
    true
}

/// Print why and return true when the containers of this test cannot have the cgroup
/// controllers `need` (see [`missing_controllers`]): the test then returns, reported as skipped.
pub fn skip_without_controllers(need: &[&str]) -> bool {
    let (missing, where_) = missing_controllers(need);
    if missing.is_empty() {
        return false;
    }
    eprintln!(
        "skipped: the {} controller(s) are not handed down to this test's container cgroups \
         ({where_}); run the tests from a cgroup that delegates them",
        missing.join(", ")
    );
    true
}

/// Where a relative cgroupsPath is placed, given the caller's path in one hierarchy and its whole
/// /proc/self/cgroup: below the caller's cgroup, except on a pure cgroup v2 host (only a "0::"
/// line) when the caller sits in a systemd scope: then beside the scope, in its slice (runc's
/// rule, and sprout's).
pub fn relative_base(own_path: &str, proc_self_cgroup: &str) -> String {
    let pure_v2 = proc_self_cgroup.lines().all(|l| l.starts_with("0::"));
    if pure_v2 && own_path.ends_with(".scope") {
        match own_path.rfind('/') {
            Some(0) | None => "/".to_string(),
            Some(i) => own_path[..i].to_string(),
        }
    } else {
        own_path.to_string()
    }
}

/// `also_below_roots`: add the path below each hierarchy's root too (where a runtime that
/// wrongly took the relative path as absolute would have put it).
fn cgroup_dirs_under(parent: &str, id: &str, also_below_roots: bool) -> Vec<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mi = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in mi.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let mut pf = post.split(' ');
        let fstype = pf.next().unwrap_or("");
        let _src = pf.next();
        let sopts = pf.next().unwrap_or("");
        let f: Vec<&str> = pre.split(' ').collect();
        if f.len() < 5 {
            continue;
        }
        let mnt = PathBuf::from(unescape_mountinfo(f[4]));
        let mroot = f[3];
        let own_path = match fstype {
            "cgroup2" => own
                .lines()
                .find(|l| l.starts_with("0::"))
                .map(|l| l[3..].to_string()),
            "cgroup" => {
                let opts: Vec<&str> = sopts.split(',').collect();
                own.lines().find_map(|l| {
                    let mut p = l.splitn(3, ':');
                    let _n = p.next();
                    let ctrls = p.next()?;
                    let path = p.next()?;
                    if !ctrls.is_empty() && ctrls.split(',').all(|c| opts.contains(&c)) {
                        Some(path.to_string())
                    } else {
                        None
                    }
                })
            }
            _ => continue,
        };
        let Some(own_path) = own_path else {
            continue;
        };
        let own_path = relative_base(&own_path, &own);
        let rel = own_path
            .strip_prefix(mroot)
            .unwrap_or(&own_path)
            .trim_start_matches('/')
            .to_string();
        out.push(mnt.join(&rel).join(parent).join(id));
        if also_below_roots {
            out.push(mnt.join(parent).join(id));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Try to remove empty cgroup directories a runtime leaked for `id`.
fn rmdir_leaked_cgroups<S: Suite>(id: &str) {
    for c in cgroup_dirs::<S>(id) {
        if c.exists() {
            let _ = fs::remove_dir(&c);
        }
    }
}

/// The default config.json (same shape as `runc spec`), with terminal
/// false, a writable root, a relative cgroupsPath and the test's args.
pub fn default_config<S: Suite>(id: &str, args: &[&str]) -> Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "TERM=xterm",
                format!("{}={id}", S::CONTAINER_MARKER)
            ],
            "cwd": "/",
            "capabilities": {
                "bounding": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "effective": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "permitted": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "ambient": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": false
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": S::CGROUP_PARENT,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
        ],
        "linux": {
            "cgroupsPath": format!("{}/{id}", S::CGROUP_PARENT),
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [
                {"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}
            ],
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"
            ],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
        }
    })
}

/// A bundle directory (config.json + rootfs) and the guard for the
/// container of the same id: dropping it runs `delete --force <id>` and
/// removes the bundle.
pub struct Bundle<'a, S: Suite> {
    pub ctx: &'a Ctx<S>,
    pub id: String,
    pub dir: PathBuf,
    pub config: Value,
}

/// Set `value` at JSON pointer `ptr`, creating intermediate objects.
pub fn json_set(v: &mut Value, ptr: &str, value: Value) {
    let mut cur = v;
    let parts: Vec<&str> = ptr.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if let Value::Array(a) = cur {
            let idx: usize = p.parse().expect("array index");
            if last {
                a[idx] = value;
                return;
            }
            cur = &mut a[idx];
            continue;
        }
        if !cur.is_object() {
            *cur = json!({});
        }
        let obj = cur.as_object_mut().unwrap();
        if last {
            obj.insert(p.to_string(), value);
            return;
        }
        cur = obj.entry(p.to_string()).or_insert_with(|| json!({}));
    }
}

impl<S: Suite> Bundle<'_, S> {
    /// Set a config field by JSON pointer, e.g. `set("/process/cwd", json!("/tmp"))`.
    pub fn set(&mut self, ptr: &str, value: Value) -> &mut Self {
        json_set(&mut self.config, ptr, value);
        self
    }

    /// A new user namespace mapping container ids 0..65535 to host `uid`.. and `gid`.., with
    /// the rootfs owned by the mapped root (as podman/docker arrange).
    pub fn in_user_namespace(&mut self, uid: u32, gid: u32) -> &mut Self {
        self.config["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "user"}));
        self.set(
            "/linux/uidMappings",
            json!([{"containerID": 0, "hostID": uid, "size": 65536}]),
        );
        self.set(
            "/linux/gidMappings",
            json!([{"containerID": 0, "hostID": gid, "size": 65536}]),
        );
        self.chown_rootfs(uid, gid);
        self
    }

    /// chown -R the bundle's rootfs (busybox is un-hard-linked first so the
    /// shared template is not touched).
    pub fn chown_rootfs(&self, uid: u32, gid: u32) {
        let r = self.rootfs();
        let bb = r.join("bin/busybox");
        let _ = fs::remove_file(&bb);
        fs::copy(run_dirs::<S>().template.join("bin/busybox"), &bb).unwrap();
        fn walk(p: &Path, uid: u32, gid: u32) {
            std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();
            if fs::symlink_metadata(p).unwrap().is_dir() {
                for e in fs::read_dir(p).unwrap().flatten() {
                    walk(&e.path(), uid, gid);
                }
            }
        }
        walk(&r, uid, gid);
    }

    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// Append a mount entry.
    pub fn add_mount(&mut self, m: Value) -> &mut Self {
        self.config["mounts"].as_array_mut().unwrap().push(m);
        self
    }

    /// Bind-mount a fresh host directory (mode 0777) read-write at `dest`;
    /// returns the host path.
    pub fn bind_host_dir(&mut self, dest: &str) -> PathBuf {
        let host = self.ctx.scratch("bind");
        self.add_mount(json!({
            "destination": dest, "type": "bind", "source": host.to_string_lossy(),
            "options": ["rbind", "rw"]
        }));
        host
    }

    pub fn add_env(&mut self, kv: &str) -> &mut Self {
        self.config["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!(kv));
        self
    }

    pub fn remove_namespace(&mut self, typ: &str) -> &mut Self {
        self.config["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .retain(|n| n["type"] != typ);
        self
    }

    pub fn write_config(&self) {
        fs::write(
            self.dir.join("config.json"),
            serde_json::to_vec_pretty(&self.config).unwrap(),
        )
        .unwrap();
    }

    pub fn bundle_arg(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }

    /// Write config.json and run `<verb> --bundle <dir> [extra] <id>`.
    fn with_bundle(&self, verb: &str, extra: &[&str]) -> Output {
        self.write_config();
        let b = self.bundle_arg();
        let mut a = vec![verb, "--bundle", b.as_str()];
        a.extend_from_slice(extra);
        a.push(&self.id);
        self.ctx.rt(&a)
    }

    /// Write config.json and run `create --bundle <dir> [extra] <id>`.
    pub fn create_with(&self, extra: &[&str]) -> Output {
        self.with_bundle("create", extra)
    }

    pub fn create(&self) -> Output {
        self.create_with(&[])
    }

    /// Write config.json and run `run --bundle <dir> [extra] <id>` (foreground).
    pub fn run_with(&self, extra: &[&str]) -> Output {
        self.with_bundle("run", extra)
    }

    pub fn run(&self) -> Output {
        self.run_with(&[])
    }

    /// `run` expecting exit 0; returns stdout.
    pub fn run_ok(&self) -> String {
        let o = self.run();
        o.assert_ok();
        o.stdout
    }

    pub fn start(&self) -> Output {
        self.ctx.rt(&["start", &self.id])
    }

    pub fn state(&self) -> Value {
        self.ctx.state(&self.id)
    }

    /// `start`, then wait until the init process has exec'd the configured
    /// args (`start` may return just before the execve).
    pub fn start_and_wait_exec(&self) {
        self.start().assert_ok();
        let pid = self.pid();
        let want: String = self.config["process"]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| format!("{}\0", a.as_str().unwrap()))
            .collect();
        wait_for(
            &format!("pid {pid} to exec {want:?}"),
            S::POLL_TIMEOUT,
            || {
                let c = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                (String::from_utf8_lossy(&c) == want).then_some(())
            },
        );
    }

    pub fn status(&self) -> Option<String> {
        self.ctx.status(&self.id)
    }

    pub fn wait_status(&self, want: &str) {
        self.ctx.wait_status(&self.id, want)
    }

    pub fn kill(&self, sig: &str) -> Output {
        self.ctx.rt(&["kill", &self.id, sig])
    }

    pub fn delete(&self) -> Output {
        self.ctx.rt(&["delete", &self.id])
    }

    /// `exec [opts...] <id> args...`
    pub fn exec(&self, opts: &[&str], args: &[&str]) -> Output {
        let mut a = vec!["exec"];
        a.extend_from_slice(opts);
        a.push(&self.id);
        a.extend_from_slice(args);
        self.ctx.rt(&a)
    }

    /// The pid of the container's init process from `state`.
    pub fn pid(&self) -> i32 {
        self.state()["pid"].as_i64().expect("state.pid") as i32
    }
}

impl<S: Suite> Drop for Bundle<'_, S> {
    fn drop(&mut self) {
        let o = self.ctx.rt_opts(
            &["delete", "--force", &self.id],
            &CmdOpts {
                timeout: Some(Duration::from_secs(20)),
                ..Default::default()
            },
        );
        let _ = o;
        if S::TRACK_UNMARKED {
            // If the runtime lost track of the container, its processes (which
            // this test started: marker in their environment, in its cgroup, or
            // naming its bundle) are killed here so the suite never leaks them.
            let find = || find_test_processes::<S>("-", &self.id, &[&self.dir]);
            let left = find();
            if !left.is_empty() {
                eprintln!(
                    "{}: container {} processes survived delete --force, killing {:?}",
                    runtime_name(),
                    self.id,
                    left
                );
                for (pid, _) in &left {
                    // SAFETY: kill(2) takes integers only and touches no memory of ours.
                    unsafe {
                        libc::kill(*pid, libc::SIGKILL);
                    }
                }
                let _ = poll(Duration::from_secs(5), || find().is_empty().then_some(()));
            }
        }
        rmdir_leaked_cgroups::<S>(&self.id);
        safe_remove_dir(&self.dir);
    }
}

/// Polls `f` every 10 ms until it returns `Some` (its value) or `timeout` has passed (`None`;
/// `f` has then run at least once after the deadline). The one polling loop of the test
/// crates: [`wait_for`] is this with a panic, for test bodies; clean-up code, which must not
/// panic (a `Drop`), calls this directly. A condition that is a `bool` is `cond.then_some(())`.
///
/// `timeout` is stretched by `SPROUT_TEST_SLOW` (an integer factor; the VM stage sets 3 when
/// its guest runs under TCG): the bound is for a hang, never a timing.
pub fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let slow = std::env::var("SPROUT_TEST_SLOW")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1);
    let deadline = Instant::now() + timeout * slow;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`poll`]s `f` until it returns `Some` and returns that value; panics with "timed out
/// waiting for {what}" after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll(timeout, f).unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// Wait (up to the suite's poll deadline) until a file exists and is
/// non-empty; returns its content.
pub fn wait_file<S: Suite>(p: &Path) -> String {
    wait_for(&format!("file {}", p.display()), S::POLL_TIMEOUT, || {
        fs::read_to_string(p).ok().filter(|s| !s.is_empty())
    })
}

/// Field `key` of `/proc/<pid>/status`-like text (e.g. "CapEff").
pub fn status_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        l.strip_prefix(&format!("{key}:"))
            .map(|v| v.trim().to_string())
    })
}

/// Shortcut for an `OsStr` from a `&str`.
pub fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// Bit mask for a list of capability numbers.
pub fn cap_mask(caps: &[u32]) -> String {
    format!("{:016x}", caps.iter().fold(0u64, |m, c| m | (1u64 << c)))
}

/// The names a test crate's tests use, for the suite `$suite` (a type that
/// implements [`Suite`]): everything in this crate, with [`Ctx`] and
/// [`Bundle`] fixed to the suite, the suite's constants (`POLL_TIMEOUT`,
/// `CALL_MARKER`, `CONTAINER_MARKER`) and its `find_test_processes`,
/// `find_marked_processes`, `cgroup_dirs`, `default_config`, `wait_file`.
#[macro_export]
macro_rules! suite_api {
    ($suite:ty) => {
        pub use $crate::{
            build_busybox_rootfs, busybox_applets, cap_mask, has_mounts_below,
            host_cgroup2_options, is_zombie, json_set, missing_controllers, mount_point,
            mount_points, mount_snapshot, never_ran, new_mount_points_since, new_mounts_since, os,
            pid_alive, poll, relative_base, runtime_bin, runtime_name, safe_remove_dir, serde_json,
            sigkill_pending, skip_unless_pure_v2, skip_without_controllers, status_field, wait_for,
            CmdOpts, DetachOnDrop, Output, Spawned, CMD_TIMEOUT,
        };

        /// Per-test context: its own `--root`, scratch directory and id prefix.
        pub type Ctx = $crate::Ctx<$suite>;
        /// A bundle directory and the drop guard of its container.
        pub type Bundle<'a> = $crate::Bundle<'a, $suite>;

        /// Default deadline when polling for a state change.
        pub const POLL_TIMEOUT: ::std::time::Duration = <$suite as $crate::Suite>::POLL_TIMEOUT;
        /// Environment variable naming each runtime invocation (see [`Output::marker`]).
        pub const CALL_MARKER: &str = <$suite as $crate::Suite>::CALL_MARKER;
        /// Environment variable naming each container's processes (value = id).
        pub const CONTAINER_MARKER: &str = <$suite as $crate::Suite>::CONTAINER_MARKER;

        /// See [`sprout_test_support::find_test_processes`].
        pub fn find_test_processes(
            call: &str,
            id: &str,
            paths: &[&::std::path::Path],
        ) -> Vec<(i32, String)> {
            $crate::find_test_processes::<$suite>(call, id, paths)
        }

        /// See [`sprout_test_support::find_marked_processes`].
        pub fn find_marked_processes(call: &str, id: &str) -> Vec<(i32, String)> {
            $crate::find_marked_processes::<$suite>(call, id)
        }

        /// See [`sprout_test_support::without_dying_runtime_copies`].
        pub fn without_dying_runtime_copies(
            procs: Vec<(i32, String)>,
            bin: &::std::path::Path,
            id: &str,
            bound: ::std::time::Duration,
        ) -> Vec<(i32, String)> {
            $crate::without_dying_runtime_copies::<$suite>(procs, bin, id, bound)
        }

        /// See [`sprout_test_support::cgroup_dirs`].
        pub fn cgroup_dirs(id: &str) -> Vec<::std::path::PathBuf> {
            $crate::cgroup_dirs::<$suite>(id)
        }

        /// See [`sprout_test_support::default_config`].
        pub fn default_config(id: &str, args: &[&str]) -> $crate::serde_json::Value {
            $crate::default_config::<$suite>(id, args)
        }

        /// See [`sprout_test_support::wait_file`].
        pub fn wait_file(p: &::std::path::Path) -> String {
            $crate::wait_file::<$suite>(p)
        }
    };
}
