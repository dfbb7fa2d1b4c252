//! `handler add`'s compile of a handler's f.py, confined as a sandbox is: the source is a
//! tenant's, so the sandboxes' python compiles it in a child that reads it on stdin and writes
//! the .pyc to stdout, as the sandboxes' uid/gid with no capability and no_new_privs (the
//! runtime's `drop_all_privileges`), under the sandboxes' seccomp deny-list, in network and
//! IPC namespaces of its own (where the caller may make them), with the sandbox's memory as
//! its address-space limit (`sandbox.memory_mb`), the sandbox start deadline as its CPU limit
//! (`start_timeout_ms`) and no file it may write (RLIMIT_FSIZE 0). Before, the host's root
//! compiled it without limits: a 2 MB list literal took 0.7 GB and 4 s of the caller's. This
//! process writes the .pyc.
//!
//! A handler that does not compile here (a syntax error, or over a limit) is registered all
//! the same, with a warning: its sandbox compiles it under its own limits and reports the error.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};

use oci_spec::runtime::{PosixRlimit, PosixRlimitType};

use crate::config::Config;

/// What the child runs: compile stdin as `argv[1]` (the name tracebacks show), then write the
/// interpreter's cache tag, a newline and a timestamp-checked .pyc for a source of mtime
/// `argv[2]` and size `argv[3]` (what py_compile writes; `_frozen_importlib_external` is
/// always loaded, so nothing is imported from disk).
const CODE: &str = "import sys, _frozen_importlib_external as e\n\
src = sys.stdin.buffer.read()\n\
code = compile(src, sys.argv[1], 'exec', dont_inherit=True)\n\
out = sys.stdout.buffer\n\
out.write((sys.implementation.cache_tag or '').encode() + b'\\n')\n\
out.write(e._code_to_timestamp_pyc(code, int(sys.argv[2]), int(sys.argv[3])))\n";

/// Most bytes of .pyc taken from the child.
const MAX_PYC: u64 = 64 << 20;

/// The compiler's rlimits: `mem` bytes of address space, `cpu_s` seconds of CPU (SIGXCPU,
/// then SIGKILL a second later), no file written, 16 fds, no core dump.
fn limits(mem: u64, cpu_s: u64) -> Vec<PosixRlimit> {
    use PosixRlimitType::*;
    sprout_process::rlimits::rlimit_list(&[
        (RlimitAs, mem, mem),
        (RlimitCpu, cpu_s, cpu_s + 1),
        (RlimitFsize, 0, 0),
        (RlimitNofile, 16, 16),
        (RlimitCore, 0, 0),
    ])
}

/// Compile `file` (f.py in the handler's new registry copy) into `__pycache__` beside it, as
/// `shown_as` (the path the sandbox sees). `Err` says why there is no .pyc.
pub fn handler(cfg: &Config, file: &Path, shown_as: &str) -> Result<(), String> {
    let src = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let meta = src
        .metadata()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let seccomp = if cfg.sandbox.seccomp {
        Some(
            sprout_seccomp::prepare(&crate::engine::default_seccomp(), None)
                .map_err(|e| format!("the sandboxes' seccomp filter: {e}"))?
                .0,
        )
    } else {
        None
    };
    let mem = cfg.sandbox.memory_mb.max(32) << 20;
    let cpu_s = cfg.start_timeout_ms.div_ceil(1000).max(1);
    let (uid, gid) = (cfg.sandbox.uid, cfg.sandbox.gid);
    let rlimits = limits(mem, cpu_s);
    // SAFETY: getuid takes nothing and cannot fail.
    let root = unsafe { libc::getuid() } == 0;
    let mut cmd = Command::new(&cfg.python);
    cmd.args(["-I", "-S", "-c", CODE, shown_as])
        .arg(meta.mtime().to_string())
        .arg(meta.size().to_string())
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::from(src))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec; `handler add` is
    // single-threaded, and every call in it is a plain syscall wrapper (prlimit64 of limits
    // built before the fork, unshare, prctl, the ids, seccomp(2) on a filter built before the
    // fork): nothing allocates or takes a lock but on an error's way out.
    unsafe {
        cmd.pre_exec(move || {
            sprout_process::rlimits::set_rlimits(&rlimits)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            if root {
                // Best effort: a root without CAP_SYS_ADMIN (an unprivileged container's)
                // compiles in the caller's network and IPC namespaces, under every other limit.
                libc::unshare(libc::CLONE_NEWNET | libc::CLONE_NEWIPC);
                sprout_process::caps::drop_all_privileges(uid, gid, Some(&[]))
                    .map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno))?;
            } else if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(s) = &seccomp {
                s.load().map_err(|e| std::io::Error::other(e.to_string()))?;
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("running {}: {e}", cfg.python))?;
    let mut out = Vec::new();
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("no pipes to the compiler".into());
    };
    // stderr on a thread of its own: a child that fills one pipe while this reads the other
    // would otherwise stall both.
    let errs = std::thread::spawn(move || {
        let mut e = Vec::new();
        let _ = (&mut stderr).take(64 << 10).read_to_end(&mut e);
        e
    });
    let r = stdout.take(MAX_PYC + 1).read_to_end(&mut out);
    if r.is_err() || out.len() as u64 > MAX_PYC {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the compiler: {e}"))?;
    let err = errs.join().unwrap_or_default();
    if !status.success() {
        let last = String::from_utf8_lossy(&err)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        return Err(match status.signal() {
            Some(libc::SIGXCPU | libc::SIGKILL) => format!(
                "the compiler ran out of its CPU time ({cpu_s} s, the sandboxes' start_timeout_ms)"
            ),
            Some(s) => format!("the compiler was killed by signal {s}"),
            None if last.starts_with("MemoryError") => format!(
                "the compiler ran out of memory ({} MiB, the sandboxes' memory_mb)",
                mem >> 20
            ),
            None if last.is_empty() => format!("the compiler exited with {status}"),
            None => last,
        });
    }
    if out.len() as u64 > MAX_PYC {
        return Err(format!("the .pyc is over {} MiB", MAX_PYC >> 20));
    }
    let nl = out
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no cache tag from the compiler")?;
    let tag = std::str::from_utf8(&out[..nl]).unwrap_or("");
    let tag_ok = !tag.is_empty()
        && tag.len() <= 64
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !tag_ok {
        return Err(format!(
            "the sandboxes' python caches no bytecode (cache tag {tag:?})"
        ));
    }
    let pyc = &out[nl + 1..];
    if pyc.len() < 16 {
        return Err("the compiler wrote no .pyc".into());
    }
    let (Some(dir), Some(stem)) = (file.parent(), file.file_stem()) else {
        return Err(format!("{}: no directory", file.display()));
    };
    let cache = dir.join("__pycache__");
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let dst = cache.join(format!("{}.{tag}.pyc", stem.to_string_lossy()));
    // The source's mode, as py_compile gives it (readable by whom f.py is).
    let mode = (meta.mode() | 0o200) & 0o666;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&dst)
        .and_then(|mut f| std::io::Write::write_all(&mut f, pyc))
        .map_err(|e| format!("{}: {e}", dst.display()))
}
