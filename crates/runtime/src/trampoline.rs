//! The exec trampoline: CVE-2019-5736 closed without copying the runtime.
//!
//! Until a process execs, it is a clone of the runtime and /proc/<pid>/exe is the runtime's
//! binary on the host. A container process that opens that link keeps an fd to the host binary
//! and rewrites it once no runtime process runs (no more ETXTBSY). Non-dumpable blocks the open
//! only without CAP_SYS_PTRACE, and a `#!/proc/self/exe` script makes the kernel run the runtime
//! itself inside the container, where it is dumpable.
//!
//! runc answers with a copy of its whole binary (a sealed memfd or an overlay) per start and a
//! re-exec. sprout instead never lets the container see a process backed by its binary: after
//! setting a process up (namespaces, rootfs, credentials, seccomp), the runtime execs a
//! 1.5 KB static program (trampoline/trampoline.c, built by build.rs) from a sealed memfd, and
//! the trampoline does what is left: wait for `start` and exec the container's program (the
//! init), or fork the process that enters the container's pid namespace and exec it (`exec`).
//! /proc/<pid>/exe then leads to an anonymous, sealed memfd: there is nothing to overwrite.
//! Cost: one memfd (~10 µs) and one exec of a 1.5 KB program (~50 µs) per process.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::Error;
use crate::init::Exec;
use crate::sys::cvt;

static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/trampoline"));

const MFD_EXEC: libc::c_uint = 0x0010;

/// A sealed, close-on-exec memfd holding the trampoline.
pub fn memfd() -> io::Result<OwnedFd> {
    let name = c"sprout-trampoline";
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // MFD_EXEC (Linux 6.3): explicit, so vm.memfd_noexec=1 doesn't make it non-executable.
    // SAFETY: memfd_create reads the C string literal `name`; flags only.
    let mut fd = unsafe { libc::memfd_create(name.as_ptr(), base | MFD_EXEC) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // SAFETY: as above: memfd_create reads the C string literal `name`.
        fd = unsafe { libc::memfd_create(name.as_ptr(), base) };
    }
    // SAFETY: cvt returned the fd of a successful memfd_create, a new descriptor that nothing else
    // owns.
    let fd = unsafe { OwnedFd::from_raw_fd(cvt(fd)?) };
    crate::sys::write_all_fd(fd.as_raw_fd(), PROGRAM)?;
    // SAFETY: F_ADD_SEALS takes an integer seal set and touches no memory of ours; `fd` is open
    // (owned above).
    cvt(unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE,
        )
    })?;
    Ok(fd)
}

/// The init's last step: exec the trampoline, which waits on `fifo` (if any) and then execs the
/// container's program. Returns only on failure (the fifo is left as it was).
pub fn exec_init(tramp: &OwnedFd, fifo: Option<RawFd>, exec: &Exec) -> io::Error {
    if let Some(f) = fifo {
        if let Err(e) = crate::sys::set_cloexec(f, false) {
            return e;
        }
    }
    let fifo_arg = fifo.map_or_else(|| "-".to_string(), |f| f.to_string());
    let e = execveat(tramp, &["sprout-init", &fifo_arg], exec);
    if let Some(f) = fifo {
        let _ = crate::sys::set_cloexec(f, true);
    }
    e
}

/// `exec`'s last step: exec the trampoline, which forks the process entering the container
/// (CLONE_PARENT: the runtime's child), reports "P<pid>" on `chan`, and exits.
pub fn exec_spawn(tramp: &OwnedFd, chan: RawFd, tty: bool, exec: &Exec) -> io::Error {
    if let Err(e) = crate::sys::set_cloexec(chan, false) {
        return e;
    }
    let e = execveat(
        tramp,
        &[
            "sprout-spawn",
            &chan.to_string(),
            if tty { "t" } else { "-" },
        ],
        exec,
    );
    let _ = crate::sys::set_cloexec(chan, true);
    e
}

fn execveat(tramp: &OwnedFd, head: &[&str], exec: &Exec) -> io::Error {
    let head: Vec<CString> = head
        .iter()
        .map(|s| CString::new(*s).expect("no NUL"))
        .collect();
    let mut argv: Vec<*const libc::c_char> = head.iter().map(|a| a.as_ptr()).collect();
    argv.push(exec.path.as_ptr());
    argv.extend(exec.argv.iter().map(|a| a.as_ptr()));
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = exec.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    crate::init::reset_signal_dispositions();
    // SAFETY: `argv` and `envp` are NULL-terminated arrays of pointers into CStrings (`head`,
    // `exec.path`, `exec.argv`, `exec.envp`) that all outlive the call.
    unsafe { crate::sys::execveat_fd(tramp.as_raw_fd(), argv.as_ptr(), envp.as_ptr()) }
}

/// A trampoline report on the channel: "P<pid>", "X<errno>" (exec failed), "Y<errno>" (the
/// terminal could not be made controlling), "F<errno>" (fork failed).
pub fn parse_report(tag: u8, payload: &str, path: &str) -> Result<i32, Error> {
    let n: i32 = payload.trim().parse().unwrap_or(0);
    match tag {
        b'P' => Ok(n),
        b'X' => Err(Error::exec_failed(
            "process.args",
            path,
            io::Error::from_raw_os_error(n),
        )),
        b'Y' => Err(Error::os(
            "process.terminal: TIOCSCTTY",
            io::Error::from_raw_os_error(n),
        )),
        b'F' => Err(Error::os(
            "forking the process",
            io::Error::from_raw_os_error(n),
        )),
        other => Err(Error::msg(format!(
            "unexpected message {other} from the exec trampoline"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_is_a_small_static_elf() {
        assert_eq!(&PROGRAM[..4], b"\x7fELF");
        assert!(PROGRAM.len() < 8192, "{} bytes", PROGRAM.len());
    }

    #[test]
    fn memfd_is_sealed_against_writes() {
        let fd = memfd().unwrap();
        // SAFETY: F_GET_SEALS takes no argument and touches no memory of ours.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        assert!(seals & libc::F_SEAL_WRITE != 0 && seals & libc::F_SEAL_SEAL != 0);
        // SAFETY: pwrite reads 1 byte from the static b"x" (the write is expected to be refused).
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) };
        assert_eq!(n, -1, "a sealed memfd took a write");
        // Reopened for writing through /proc (what an attacker holding /proc/<pid>/exe does):
        // the open may succeed but no byte can change.
        let p = format!("/proc/self/fd/{}", fd.as_raw_fd());
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&p) {
            use std::io::Write;
            assert!(f.write_all(b"evil").is_err());
        }
    }
}
