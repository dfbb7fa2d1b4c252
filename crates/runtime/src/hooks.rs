//! Running OCI hooks: the hook's path is executed with its args and env, the container state
//! JSON on stdin, and killed if it outlives its timeout.

use std::io::Write;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};

use oci_spec::runtime::Hook;

use crate::bail;
use crate::error::{Error, Kind, Result};

pub fn run_hook(kind: &str, i: usize, hook: &Hook, state_json: &[u8]) -> Result<()> {
    let path = hook.path();
    let mut cmd = Command::new(path);
    if let Some(args) = hook.args() {
        if let Some((first, rest)) = args.split_first() {
            use std::os::unix::process::CommandExt;
            cmd.arg0(first);
            cmd.args(rest);
        }
    }
    // As runc (exec.Cmd{Env: hook.Env}): a hook without `env` inherits the runtime's
    // environment; `env` present (even empty) is the hook's whole environment.
    if let Some(env) = hook.env() {
        cmd.env_clear();
        for kv in env {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    let what = || format!("hooks.{kind}[{i}] ({})", path.display());
    let mut child = cmd.spawn().map_err(|e| Error::os(what(), e))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its stdin must not make us fail (EPIPE).
        let _ = stdin.write_all(state_json);
    }
    let timeout = hook.timeout();
    if let Some(t) = timeout {
        if t <= 0 {
            bail!("{}: timeout must be positive, got {t}", what());
        }
        let pidfd = crate::sys::pidfd_open(child.id() as i32).map_err(|e| Error::os(what(), e))?;
        let exited =
            crate::sys::pidfd_wait_exit(&pidfd, (t * 1000).min(i64::from(i32::MAX)) as i32)
                .map_err(|e| Error::os(what(), e))?;
        if !exited {
            let _ = crate::sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
            let _ = child.wait();
            bail!("{}: timed out after {t}s", what());
        }
        let _ = pidfd.as_fd();
    }
    let status = child.wait().map_err(|e| Error::os(what(), e))?;
    if !status.success() {
        // runc's words after the field ("error running <kind> hook #<i>: ..."): its bats
        // tests and scripts around it match them.
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(c), _) => bail!(
                "{}: error running {kind} hook #{i}: exit status {c}",
                what()
            ),
            (None, Some(sig)) => bail!(
                "{}: error running {kind} hook #{i}: signal: {}",
                what(),
                signal_name(sig)
            ),
            _ => bail!("{}: error running {kind} hook #{i}: killed", what()),
        }
    }
    Ok(())
}

/// Run every hook of one kind; the first failure stops the rest (createRuntime, createContainer,
/// startContainer, prestart: the spec makes it an error of the operation).
pub fn run_all(kind: &str, hooks: Option<&Vec<Hook>>, state_json: &[u8]) -> Result<()> {
    for (i, h) in hooks.into_iter().flatten().enumerate() {
        run_hook(kind, i, h, state_json).map_err(|e| e.with_kind(Kind::Hook))?;
    }
    Ok(())
}

/// poststop: a failing hook is logged as a warning and the others still run (runtime-spec).
pub fn run_all_warn(kind: &str, hooks: Option<&Vec<Hook>>, state_json: &[u8]) {
    for (i, h) in hooks.into_iter().flatten().enumerate() {
        if let Err(e) = run_hook(kind, i, h, state_json) {
            crate::log::warn(&e.to_string());
        }
    }
}

/// A signal's description in lower case, as Go prints it ("bad system call", "killed").
fn signal_name(sig: i32) -> String {
    // SAFETY: strsignal returns a pointer to a static or thread-local NUL-terminated string
    // (never null in glibc or musl); it is copied at once.
    let p = unsafe { libc::strsignal(sig) };
    if p.is_null() {
        return format!("signal {sig}");
    }
    // SAFETY: `p` is a valid NUL-terminated string (see above), read before any other call.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .to_lowercase()
}
