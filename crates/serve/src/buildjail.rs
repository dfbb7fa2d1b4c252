//! Source builds (`pip_build_sdists = true`), confined. Building a source distribution runs
//! the package's own build code (setup.py, its build backend, a compiler it starts): code of
//! the tenant's choosing, since a handler's requirements.txt names the package. pip runs it in
//! a jail made by this module, never as the engine's root on the host:
//!
//! - new mount, pid, IPC and UTS namespaces, and a network namespace of its own (only a down
//!   lo) when `pip_args` has `--no-index` (nothing to fetch); else the host's network, which
//!   pip needs to reach the index (the build can then reach what the host's network reaches,
//!   as the sandboxes can with `network_ns = false`);
//! - a root of its own on a tmpfs: read-only binds of the sandboxes' base root (its /usr,
//!   /lib*, /bin, /sbin and minimal /etc on the quick-start base; the whole image with
//!   `base_rootfs`), the host's null, zero, full, random and urandom, a private /proc of its
//!   pid namespace, a tmpfs /tmp (HOME, TMPDIR, pip's build directories), the paths named in
//!   `pip_args` (`--find-links DIR`), read-only, and the install's target directory, read-write,
//!   at /packages. Nothing else of the host: no /run, /var, /home, /root, no registry, no
//!   install cache, no other sandbox's root, no unix socket of the host;
//! - the sandboxes' uid and gid, no capability, no_new_privs, the sandboxes' seccomp
//!   deny-list (with `sandbox.seccomp`), `pip_build_memory_mb` of address space per process
//!   and of /tmp, `pip_timeout_s` of CPU per process, no core dumps;
//! - a pool cgroup of the engine's for the build (`pip_build_memory_mb` of memory, 1024
//!   processes and threads, no CPU quota), into which the engine moves the process it
//!   started before that process does anything (it waits for a byte on its stdin);
//! - pip is pid 1 of the pid namespace: when it exits, or the engine kills the jail at
//!   `pip_timeout_s` (the jail's pid 1 dies with the process the engine started), every
//!   process the build left is killed with it, and the cgroup's given back to the pool
//!   (anything still in it killed).
//!
//! The engine makes the target directory, gives it to the sandboxes' uid for the build, and
//! afterwards gives everything in it back to root (no set-id bit, no group or other write
//! bit) before it renames it into the cache, so no sandbox user owns a cached file.
//!
//! The jail is set up by `sprout-serve __pip-build` (a fresh, single-threaded process the
//! engine starts; [`main`]), not in a forked child of the multi-threaded engine.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use oci_spec::runtime::{PosixRlimit, PosixRlimitType};

/// Where the install's target directory appears in the jail (pip's `--target`).
pub const TARGET: &str = "/packages";

/// How the engine confines a source build.
#[derive(Clone, Debug)]
pub struct Jail {
    /// The sandboxes' base root (`run_dir/base`).
    pub base: PathBuf,
    /// A directory of the engine's own whose view the jail may cover with its tmpfs
    /// (`run_dir/roots`: only in the jail's mount namespace).
    pub scratch: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub memory_mb: u64,
    pub cpu_s: u64,
    pub seccomp: bool,
    /// A network namespace of its own (`pip_args` has `--no-index`).
    pub own_net: bool,
}

impl Jail {
    /// The command that runs `pip` (the configured command, then its arguments, which name
    /// [`TARGET`]) in the jail, with `target` (a host directory) at [`TARGET`] and `keep`
    /// (host paths pip must read: find-links directories) read-only at their own paths.
    pub fn command(&self, target: &Path, keep: &[PathBuf], pip: &[String]) -> Command {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        let mut c = Command::new(exe);
        c.arg("__pip-build")
            .args(["--base".as_ref(), self.base.as_os_str()])
            .args(["--scratch".as_ref(), self.scratch.as_os_str()])
            .args(["--target".as_ref(), target.as_os_str()])
            .args(["--ids", &format!("{}:{}", self.uid, self.gid)])
            .args(["--memory-mb", &self.memory_mb.to_string()])
            .args(["--cpu-s", &self.cpu_s.to_string()])
            .args(["--seccomp", if self.seccomp { "1" } else { "0" }])
            .args(["--own-net", if self.own_net { "1" } else { "0" }]);
        for k in keep {
            c.args(["--keep".as_ref(), k.as_os_str()]);
        }
        c.arg("--").args(pip);
        c
    }
}

/// The absolute paths among `pip_args` that exist (find-links directories, a constraints
/// file): the jail shows them read-only.
pub fn paths_in(args: &[String]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = args
        .iter()
        .flat_map(|a| {
            // `--find-links=/x` as well as `--find-links /x`; a file:// URL by its path.
            let a = a.split_once('=').map_or(a.as_str(), |(_, v)| v);
            let a = a.strip_prefix("file://").unwrap_or(a);
            Some(PathBuf::from(a)).filter(|p| p.is_absolute() && p != Path::new("/") && p.exists())
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// After a build: everything under `dir` (`dir` included) owned by root, without set-id
/// bits or group/other write bits. Symlinks are changed, never followed.
pub fn give_back_to_root(dir: &Path) -> io::Result<()> {
    let md = std::fs::symlink_metadata(dir)?;
    std::os::unix::fs::lchown(dir, Some(0), Some(0))?;
    if md.file_type().is_symlink() {
        return Ok(());
    }
    let mode = md.mode() & 0o7777 & !0o6022;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    if md.is_dir() {
        for e in std::fs::read_dir(dir)? {
            give_back_to_root(&e?.path())?;
        }
    }
    Ok(())
}

#[derive(Debug)]
struct Args {
    base: PathBuf,
    scratch: PathBuf,
    target: PathBuf,
    uid: u32,
    gid: u32,
    memory_mb: u64,
    cpu_s: u64,
    seccomp: bool,
    own_net: bool,
    keep: Vec<PathBuf>,
    pip: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        base: PathBuf::new(),
        scratch: PathBuf::new(),
        target: PathBuf::new(),
        uid: 65534,
        gid: 65534,
        memory_mb: 4096,
        cpu_s: 300,
        seccomp: true,
        own_net: false,
        keep: vec![],
        pip: vec![],
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        if k == "--" {
            a.pip = it.cloned().collect();
            break;
        }
        let v = it.next().ok_or_else(|| format!("{k}: no value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{k}: not a number: {v}"))
        };
        match k.as_str() {
            "--base" => a.base = v.into(),
            "--scratch" => a.scratch = v.into(),
            "--target" => a.target = v.into(),
            "--keep" => a.keep.push(v.into()),
            "--ids" => {
                let (u, g) = v.split_once(':').ok_or("--ids: uid:gid")?;
                a.uid = num(u)? as u32;
                a.gid = num(g)? as u32;
            }
            "--memory-mb" => a.memory_mb = num(v)?,
            "--cpu-s" => a.cpu_s = num(v)?,
            "--seccomp" => a.seccomp = v == "1",
            "--own-net" => a.own_net = v == "1",
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if a.pip.is_empty() || a.base.as_os_str().is_empty() || a.target.as_os_str().is_empty() {
        return Err(
            "usage: __pip-build --base DIR --scratch DIR --target DIR ... -- PIP...".into(),
        );
    }
    if a.uid == 0 || a.gid == 0 {
        return Err("a build never runs as root (sandbox.uid/gid 0)".into());
    }
    Ok(a)
}

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("sprout-serve: source build jail: {msg}");
    std::process::exit(125)
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// `rootfs::mount_raw` (the engine's own mount helper), its error as this jail's message.
fn mount(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    crate::rootfs::mount_raw(src, dst, fstype, flags, data).map_err(|e| e.to_string())
}

fn bind(src: &Path, dst: &Path, writable: bool) -> Result<(), String> {
    mount(Some(src), dst, None, libc::MS_BIND | libc::MS_REC, None)?;
    let ro = if writable { 0 } else { libc::MS_RDONLY };
    mount(
        None,
        dst,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | ro,
        None,
    )
}

fn limits(memory_mb: u64, cpu_s: u64) -> Vec<PosixRlimit> {
    use PosixRlimitType::*;
    let mem = memory_mb << 20;
    sprout_process::rlimits::rlimit_list(&[
        (RlimitAs, mem, mem),
        (RlimitCpu, cpu_s, cpu_s + 1),
        (RlimitNofile, 1024, 1024),
        (RlimitCore, 0, 0),
    ])
}

/// `sprout-serve __pip-build ...`: make the jail and run pip in it; exits with pip's status
/// (128 + the signal that ended it; 125 when the jail could not be made).
pub fn main(args: &[String]) -> ! {
    let a = parse(args).unwrap_or_else(|e| die(e));
    // The engine moves us into the build's cgroup by pid, then sends one byte: nothing
    // forks before that.
    let mut go = [0u8; 1];
    // SAFETY: read(2) writes at most one byte into the live local array.
    if unsafe { libc::read(0, go.as_mut_ptr().cast(), 1) } != 1 || go[0] != b'g' {
        die("the engine did not place the build in its cgroup");
    }
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if a.own_net {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare takes flags only; this process is single-threaded (just exec'd).
    if unsafe { libc::unshare(flags) } != 0 {
        die(format!("unshare: {}", io::Error::last_os_error()));
    }
    // A pipe whose write end only this process holds: the jail's pid 1 checks, once its
    // parent-death signal is armed, that we are still here.
    let mut p = [0; 2];
    // SAFETY: pipe2 writes two fds into the live local array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        die(format!("pipe: {}", io::Error::last_os_error()));
    }
    // SAFETY: fork in a single-threaded process; the child runs `jail` and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        die(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: the write end is ours (the child's copy) to close.
        unsafe { libc::close(p[1]) };
        let e = jail(&a, p[0]);
        die(e);
    }
    // SAFETY: the read end is ours to close.
    unsafe { libc::close(p[0]) };
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes one c_int into the live local `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            die(format!("waitpid: {}", io::Error::last_os_error()));
        }
    }
    std::process::exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}

/// Pid 1 of the jail's pid namespace: make the root, become the sandboxes' user, exec pip.
/// Returns only on an error.
fn jail(a: &Args, alive: i32) -> String {
    match setup(a) {
        Ok(()) => {}
        Err(e) => return e,
    }
    // Armed after the last change of ids (which clears it): the jail dies with the process
    // the engine started, whom the engine kills at pip_timeout_s.
    // SAFETY: prctl takes integers only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let mut pfd = libc::pollfd {
        fd: alive,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one live pollfd above.
    if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
        return "the engine's process went away".into();
    }
    // The program by the jail's own PATH (execvp would search the engine's).
    let prog = if a.pip[0].contains('/') {
        PathBuf::from(&a.pip[0])
    } else {
        ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(&a.pip[0]))
            .find(|p| {
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| PathBuf::from(&a.pip[0]))
    };
    let prog = cstr(&prog);
    let argv: Vec<CString> = a
        .pip
        .iter()
        .map(|s| CString::new(s.as_str()).unwrap_or_default())
        .collect();
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let env: Vec<CString> = [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "HOME=/tmp",
        "TMPDIR=/tmp",
        "LANG=C.UTF-8",
        "PIP_NO_CACHE_DIR=1",
        "PIP_DISABLE_PIP_VERSION_CHECK=1",
    ]
    .iter()
    .map(|s| CString::new(*s).unwrap_or_default())
    .collect();
    let mut env_p: Vec<*const libc::c_char> = env.iter().map(|c| c.as_ptr()).collect();
    env_p.push(std::ptr::null());
    // SAFETY: every pointer is one of the NUL-terminated CStrings above (alive for the call)
    // and both arrays end with a null pointer.
    unsafe { libc::execve(prog.as_ptr(), argv_p.as_ptr(), env_p.as_ptr()) };
    format!(
        "running {} in the jail (its PATH is /usr/local/bin:/usr/bin:/bin of the sandboxes' base root): {}",
        a.pip[0],
        io::Error::last_os_error()
    )
}

fn setup(a: &Args) -> Result<(), String> {
    // pip's stdin: /dev/null, not the engine's pipe.
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    // SAFETY: dup2 takes two fds; `null` is open, and fd 0 is ours to replace.
    if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 0) } < 0 {
        return Err(format!("stdin: {}", io::Error::last_os_error()));
    }
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    // The new root: a tmpfs over the engine's scratch directory (in this namespace only).
    mount(
        Some(Path::new("tmpfs")),
        &a.scratch,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0700,size=1m"),
    )?;
    let root = a.scratch.join("jail");
    std::fs::create_dir(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    mount(
        Some(Path::new("tmpfs")),
        &root,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755,size=1m"),
    )?;
    let mk = |d: &Path| std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()));
    // The base root's entries, read-only; what the jail makes itself is left out.
    let own = ["tmp", "proc", "dev", "packages", "handler", ".sprout"];
    let rd = std::fs::read_dir(&a.base).map_err(|e| format!("{}: {e}", a.base.display()))?;
    for e in rd.flatten() {
        let name = e.file_name();
        if own.iter().any(|o| name.as_bytes() == o.as_bytes()) {
            continue;
        }
        let src = e.path();
        let dst = root.join(&name);
        let md = std::fs::symlink_metadata(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        if md.file_type().is_symlink() {
            let t = std::fs::read_link(&src).map_err(|e| format!("{}: {e}", src.display()))?;
            std::os::unix::fs::symlink(t, &dst).map_err(|e| format!("{}: {e}", dst.display()))?;
        } else if md.is_dir() {
            mk(&dst)?;
            bind(&src, &dst, false)?;
        }
    }
    // /dev: a tmpfs with the harmless nodes of the host's.
    let dev = root.join("dev");
    mk(&dev)?;
    mount(
        Some(Path::new("tmpfs")),
        &dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )?;
    for n in ["null", "zero", "full", "random", "urandom"] {
        let dst = dev.join(n);
        std::fs::write(&dst, b"").map_err(|e| format!("{}: {e}", dst.display()))?;
        mount(
            Some(&Path::new("/dev").join(n)),
            &dst,
            None,
            libc::MS_BIND,
            None,
        )?;
    }
    for (l, t) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let _ = std::os::unix::fs::symlink(t, dev.join(l));
    }
    let shm = dev.join("shm");
    mk(&shm)?;
    let small = format!("mode=1777,size={}m", (a.memory_mb / 4).max(16));
    mount(
        Some(Path::new("tmpfs")),
        &shm,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&small),
    )?;
    let tmp = root.join("tmp");
    mk(&tmp)?;
    let opts = format!("mode=1777,size={}m", a.memory_mb.max(64));
    mount(
        Some(Path::new("tmpfs")),
        &tmp,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&opts),
    )?;
    // What pip reads (find-links), read-only at its own path; the target, read-write.
    for k in &a.keep {
        let dst = root.join(k.strip_prefix("/").unwrap_or(k));
        if k.is_dir() {
            mk(&dst)?;
        } else if !dst.exists() {
            mk(dst.parent().unwrap_or(&root))?;
            std::fs::write(&dst, b"").map_err(|e| format!("{}: {e}", dst.display()))?;
        }
        bind(k, &dst, false)?;
    }
    let target = root.join(TARGET.trim_start_matches('/'));
    mk(&target)?;
    bind(&a.target, &target, true)?;
    let proc_ = root.join("proc");
    mk(&proc_)?;
    mount(
        Some(Path::new("proc")),
        &proc_,
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    // Into it: pivot_root(".", ".") stacks the old root on the new one; detach it.
    std::env::set_current_dir(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    // SAFETY: pivot_root takes two NUL-terminated strings (literals).
    if unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) } != 0 {
        return Err(format!("pivot_root: {}", io::Error::last_os_error()));
    }
    // SAFETY: umount2 takes a NUL-terminated literal and a flag.
    if unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(format!(
            "detaching the host's root: {}",
            io::Error::last_os_error()
        ));
    }
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )?;
    std::env::set_current_dir("/tmp").map_err(|e| format!("chdir /tmp: {e}"))?;
    let host = b"sprout-build";
    // SAFETY: sethostname reads `host.len()` bytes of the live array (in our UTS namespace).
    unsafe { libc::sethostname(host.as_ptr().cast(), host.len()) };
    let seccomp = if a.seccomp {
        Some(
            sprout_seccomp::prepare(&crate::engine::default_seccomp(), None)
                .map_err(|e| format!("the sandboxes' seccomp filter: {e}"))?
                .0,
        )
    } else {
        None
    };
    sprout_process::rlimits::set_rlimits(&limits(a.memory_mb, a.cpu_s))
        .map_err(|e| format!("rlimits: {e}"))?;
    sprout_process::caps::drop_all_privileges(a.uid, a.gid, Some(&[])).map_err(|(s, e)| {
        format!(
            "becoming {}:{} ({s:?}): {}",
            a.uid,
            a.gid,
            io::Error::from_raw_os_error(e)
        )
    })?;
    if let Some(s) = &seccomp {
        s.load().map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_args_paths_are_the_absolute_existing_ones() {
        let args: Vec<String> = [
            "--no-index",
            "--find-links",
            "/",
            "--find-links=/proc",
            "-f",
            "file:///dev",
            "relative",
            "/no/such/dir",
            "https://example.org/simple",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            paths_in(&args),
            vec![PathBuf::from("/dev"), PathBuf::from("/proc")]
        );
    }

    #[test]
    fn the_jail_never_runs_as_root_and_names_a_bad_option() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = s(&[
            "--base", "/b", "--target", "/t", "--ids", "1:2", "--", "pip",
        ]);
        let a = parse(&ok).unwrap();
        assert_eq!(
            (a.uid, a.gid, a.pip.clone()),
            (1, 2, vec!["pip".to_string()])
        );
        let root = s(&[
            "--base", "/b", "--target", "/t", "--ids", "0:2", "--", "pip",
        ]);
        assert!(parse(&root).unwrap_err().contains("never runs as root"));
        let bad = s(&["--bogus", "1", "--", "pip"]);
        assert_eq!(parse(&bad).unwrap_err(), "unknown option --bogus");
    }
}
