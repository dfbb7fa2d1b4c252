//! `NOTIFY_SOCKET` (systemd's sd_notify protocol) as runc passes it through: when the runtime's
//! own environment names a socket (systemd's, or conmon's for podman `--sdnotify=container`),
//!
//! - `create` and `run` give the container a directory of its own, `notify/` in the state
//!   directory, bind-mounted read-only (nosuid, noexec, nodev) at `/run/notify`, and set
//!   `NOTIFY_SOCKET=/run/notify/notify.sock` in the process's environment (after the config's
//!   own entries: the last one wins);
//! - the command that releases the container (`start`, `run -d`, a foreground `run`) binds a
//!   datagram socket at `notify/notify.sock` (mode 0777, so any user of the container may send)
//!   before it does, and then waits until the container sends a datagram with a `READY=` line,
//!   or until the container's init exits (then nothing is sent). The `READY=` line, then
//!   `MAINPID=<pid>` (the init's host pid; for a foreground `run`, the runtime's own, which is
//!   what systemd should watch then), then `BARRIER=1` with the write end of a pipe go to the
//!   host's socket; the barrier waits (at most 30 s, then a warning) until the host's side has
//!   closed the pipe, i.e. has read the messages.
//!
//! Nothing of this runs, and no syscall is added, when `NOTIFY_SOCKET` is unset: the start path
//! only reads the environment.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The variable, in the runtime's environment and in the container's.
pub const ENV: &str = "NOTIFY_SOCKET";
/// The container's directory, in the state directory.
pub const DIR: &str = "notify";
/// The socket, in [`DIR`].
pub const SOCKET: &str = "notify.sock";
/// Where [`DIR`] is mounted in the container.
pub const CONTAINER_DIR: &str = "/run/notify";
/// What the container's `NOTIFY_SOCKET` says.
pub const CONTAINER_SOCKET: &str = "/run/notify/notify.sock";
/// How long the barrier waits for the host to close its pipe (runc's 30 s).
const BARRIER_TIMEOUT_MS: i32 = 30_000;
/// The longest datagram read (runc's buffer): the rest of a longer one is dropped.
const MAX_DATAGRAM: usize = 4096;

/// The host's socket from the runtime's own environment (`NOTIFY_SOCKET`, unset or empty:
/// none). Reads the environment only: no syscall.
pub fn host_from_env() -> Option<OsString> {
    std::env::var_os(ENV).filter(|v| !v.is_empty())
}

/// The host's socket for `create`/`run`, which runc runs in the bundle directory: a relative
/// path is the bundle's (`start` keeps its own working directory's). Path work only.
pub fn in_bundle(host: OsString, bundle: &Path) -> OsString {
    if host.as_bytes().starts_with(b"@") || Path::new(&host).is_absolute() {
        host
    } else {
        bundle.join(host).into_os_string()
    }
}

/// The container's notify directory in the state directory `state_dir`.
pub fn dir_of(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR)
}

/// Give the container the notify directory and the variable (in memory: the spec the init
/// follows; config.json in the state directory stays the bundle's, as runc's `exec` reads the
/// bundle's). The mount goes after the config's own, so that a tmpfs on /run does not hide it.
pub fn setup_spec(spec: &mut oci_spec::runtime::Spec, state_dir: &Path) {
    let mut m = oci_spec::runtime::Mount::default();
    m.set_destination(PathBuf::from(CONTAINER_DIR));
    m.set_source(Some(dir_of(state_dir)));
    m.set_typ(None);
    m.set_options(Some(
        ["bind", "nosuid", "noexec", "nodev", "ro"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
    ));
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    mounts.push(m);
    spec.set_mounts(Some(mounts));
    if let Some(mut p) = spec.process().clone() {
        let mut env = p.env().clone().unwrap_or_default();
        env.push(format!("{ENV}={CONTAINER_SOCKET}"));
        p.set_env(Some(env));
        spec.set_process(Some(p));
    }
}

/// Make the notify directory (0755) in a new container's state directory.
pub fn make_dir(state_dir: &Path) -> Result<()> {
    let d = dir_of(state_dir);
    std::fs::create_dir(&d).map_err(|e| Error::os(format_args!("{ENV}: mkdir {}", d.display()), e))
}

/// The container's notify socket, bound, and the host's socket its `READY=` goes to.
pub struct NotifySocket {
    sock: UnixDatagram,
    path: PathBuf,
    host: OsString,
}

impl NotifySocket {
    /// Bind `notify/notify.sock` in `state_dir` (which [`make_dir`] made) and open it to every
    /// user (runc's chmod 0777). `host`: the runtime's `NOTIFY_SOCKET`.
    pub fn bind(state_dir: &Path, host: OsString) -> Result<NotifySocket> {
        let path = dir_of(state_dir).join(SOCKET);
        let sock = UnixDatagram::bind(&path)
            .map_err(|e| Error::os(format_args!("{ENV}: bind {}", path.display()), e))?;
        if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)) {
            let _ = std::fs::remove_file(&path);
            return Err(Error::os(
                format_args!("{ENV}: chmod {}", path.display()),
                e,
            ));
        }
        Ok(NotifySocket { sock, path, host })
    }

    /// Undo [`NotifySocket::bind`]: for a command that failed before the container ran.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// Wait until the container sends a `READY=` line, then forward it with `MAINPID=mainpid`
    /// and a barrier to the host's socket; or until the process behind `pidfd` (the
    /// container's init) exits: then `Ok` and nothing sent. The host's socket is connected
    /// first: if that fails, the error comes at once, without waiting (as runc).
    pub fn wait_ready(&self, pidfd: BorrowedFd<'_>, mainpid: i32) -> Result<()> {
        let host = connect_host(&self.host)?;
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let [sock_ready, exited] = poll_in([self.sock.as_fd(), pidfd], -1)
                .map_err(|e| Error::os(format_args!("{ENV}: waiting for READY"), e))?;
            if sock_ready {
                // A datagram at a time; one sent before the exit is still read first.
                let n = match self.sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        return Err(Error::os(
                            format_args!("{ENV}: reading {}", self.path.display()),
                            e,
                        ))
                    }
                };
                if let Some(line) = ready_line(&buf[..n]) {
                    return notify_host(&host, &self.host, line, mainpid);
                }
            } else if exited {
                return Ok(());
            }
        }
    }

    /// [`NotifySocket::wait_ready`] for the init of `pid` (not our child: `start`). A pid that
    /// is gone already waits for nothing.
    pub fn wait_ready_pid(&self, pid: i32) -> Result<()> {
        match crate::sys::pidfd_open(pid) {
            Ok(fd) => self.wait_ready(fd.as_fd(), pid),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            Err(e) => Err(Error::os(format_args!("{ENV}: pidfd_open of pid {pid}"), e)),
        }
    }
}

/// The first line of a datagram that starts with `READY=` (`READY=1`), which is what is
/// forwarded; other datagrams (`STATUS=`, `WATCHDOG=`, ...) are dropped while waiting. A
/// `READY=` line after others in one datagram counts too (runc only looks at the datagram's
/// start: such a container would make it wait for ever).
pub fn ready_line(datagram: &[u8]) -> Option<&[u8]> {
    datagram
        .split(|&b| b == b'\n')
        .find(|l| l.starts_with(b"READY="))
}

/// The host's socket as sd_notify reads `NOTIFY_SOCKET`: `@name` is an abstract socket,
/// anything else a path (a relative one from the runtime's working directory, as runc's).
fn host_addr(host: &OsStr) -> std::io::Result<SocketAddr> {
    match host.as_bytes().strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(host),
    }
}

fn connect_host(host: &OsStr) -> Result<UnixDatagram> {
    let what = || format!("{ENV}: connecting to {}", host.to_string_lossy());
    let s = UnixDatagram::unbound().map_err(|e| Error::os(what(), e))?;
    let addr = host_addr(host).map_err(|e| Error::os(what(), e))?;
    s.connect_addr(&addr).map_err(|e| Error::os(what(), e))?;
    Ok(s)
}

/// `READY=...`, `MAINPID=<pid>` and `BARRIER=1`, each a datagram of its own (runc's).
fn notify_host(host: &UnixDatagram, name: &OsStr, ready: &[u8], mainpid: i32) -> Result<()> {
    let what = || format!("{ENV}: sending to {}", name.to_string_lossy());
    let mut msg = ready.to_vec();
    msg.push(b'\n');
    host.send(&msg).map_err(|e| Error::os(what(), e))?;
    host.send(format!("MAINPID={mainpid}\n").as_bytes())
        .map_err(|e| Error::os(what(), e))?;
    barrier(host, name)
}

/// sd_notify_barrier(3): `BARRIER=1` with the write end of a pipe, then wait until the host has
/// closed it (EOF). A host that does not speak the barrier protocol never reads the fd: after
/// 30 s a warning, and success, as runc.
fn barrier(host: &UnixDatagram, name: &OsStr) -> Result<()> {
    let what = || format!("{ENV}: barrier with {}", name.to_string_lossy());
    let (mut r, w) = std::io::pipe().map_err(|e| Error::os(what(), e))?;
    crate::sys::send_fd(host.as_raw_fd(), b"BARRIER=1", w.as_raw_fd())
        .map_err(|e| Error::os(what(), e))?;
    drop(w);
    let [readable] = poll_in([r.as_fd()], BARRIER_TIMEOUT_MS).map_err(|e| Error::os(what(), e))?;
    if !readable {
        crate::log::warn(&format!(
            "{ENV}: no answer to BARRIER=1 from {} in 30 s; ignored",
            name.to_string_lossy()
        ));
        return Ok(());
    }
    let mut b = [0u8; 1];
    match r.read(&mut b) {
        Ok(0) => Ok(()),
        Ok(_) => Err(Error::msg(format!(
            "{}: unexpected read from the synchronization pipe",
            what()
        ))),
        Err(e) => Err(Error::os(what(), e)),
    }
}

/// poll(2) for input (or hang-up/error) on each fd; `timeout_ms` -1: no timeout. Returns which
/// fds are ready; all false on a timeout. EINTR is retried.
fn poll_in<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout_ms: i32,
) -> std::io::Result<[bool; N]> {
    let mut p = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    loop {
        // SAFETY: `p` is a live local array of N pollfds and nfds is N; the kernel writes only
        // their `revents`. The fds are borrowed, so open for the call.
        let r = unsafe { libc::poll(p.as_mut_ptr(), N as libc::nfds_t, timeout_ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(p.map(|p| p.revents != 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line_is_found_and_others_are_not() {
        assert_eq!(ready_line(b"READY=1"), Some(&b"READY=1"[..]));
        assert_eq!(ready_line(b"READY=1\nSTATUS=up\n"), Some(&b"READY=1"[..]));
        assert_eq!(ready_line(b"STATUS=up\nREADY=1"), Some(&b"READY=1"[..]));
        assert_eq!(ready_line(b"STATUS=starting"), None);
        assert_eq!(ready_line(b"WATCHDOG=1\nXREADY=1"), None);
        assert_eq!(ready_line(b""), None);
    }

    #[test]
    fn setup_spec_adds_the_mount_and_the_last_env_entry() {
        let mut spec = oci_spec::runtime::Spec::default();
        let mut p = spec.process().clone().unwrap_or_default();
        p.set_env(Some(vec!["NOTIFY_SOCKET=/x".into(), "A=b".into()]));
        spec.set_process(Some(p));
        setup_spec(&mut spec, Path::new("/run/sprout/c1"));
        let m = spec.mounts().as_ref().unwrap().last().unwrap().clone();
        assert_eq!(m.destination(), Path::new("/run/notify"));
        assert_eq!(
            m.source().as_deref(),
            Some(Path::new("/run/sprout/c1/notify"))
        );
        assert_eq!(
            m.options().as_deref().unwrap(),
            ["bind", "nosuid", "noexec", "nodev", "ro"]
        );
        let env = spec.process().as_ref().unwrap().env().clone().unwrap();
        assert_eq!(env.last().unwrap(), "NOTIFY_SOCKET=/run/notify/notify.sock");
    }

    #[test]
    fn relative_host_paths_are_the_bundles() {
        let b = Path::new("/b/x");
        assert_eq!(in_bundle("@n".into(), b), OsString::from("@n"));
        assert_eq!(in_bundle("/h.sock".into(), b), OsString::from("/h.sock"));
        assert_eq!(in_bundle("h.sock".into(), b), OsString::from("/b/x/h.sock"));
        assert_eq!(
            in_bundle("h.sock".into(), Path::new(".")),
            OsString::from("./h.sock")
        );
    }

    #[test]
    fn host_addresses_abstract_and_paths() {
        let a = host_addr(OsStr::new("@sprout-test-name")).unwrap();
        assert_eq!(a.as_abstract_name(), Some(&b"sprout-test-name"[..]));
        let p = host_addr(OsStr::new("rel/notify.sock")).unwrap();
        assert_eq!(p.as_pathname(), Some(Path::new("rel/notify.sock")));
    }

    /// A datagram `READY=1` read by the socket is forwarded with MAINPID and a barrier whose
    /// pipe the host closes (here: by receiving it without taking the fd).
    #[test]
    fn ready_is_forwarded_with_mainpid_and_barrier() {
        let dir = std::env::temp_dir().join(format!("sprout-notify-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        make_dir(&dir).unwrap();
        let host_path = dir.join("host.sock");
        let host = UnixDatagram::bind(&host_path).unwrap();
        let ns = NotifySocket::bind(&dir, host_path.clone().into_os_string()).unwrap();
        let mode = std::fs::metadata(dir.join("notify/notify.sock"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o777);
        let c = UnixDatagram::unbound().unwrap();
        c.send_to(b"STATUS=starting", dir.join("notify/notify.sock"))
            .unwrap();
        c.send_to(b"READY=1", dir.join("notify/notify.sock"))
            .unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut b = [0u8; 256];
            for _ in 0..3 {
                let n = host.recv(&mut b).unwrap();
                got.push(String::from_utf8_lossy(&b[..n]).into_owned());
            }
            got
        });
        let me = crate::sys::pidfd_open(std::process::id() as i32).unwrap();
        ns.wait_ready(me.as_fd(), 4242).unwrap();
        let got = reader.join().unwrap();
        assert_eq!(got, ["READY=1\n", "MAINPID=4242\n", "BARRIER=1"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A process that exits without READY ends the wait: Ok, nothing sent.
    #[test]
    fn an_exit_without_ready_ends_the_wait() {
        let dir =
            std::env::temp_dir().join(format!("sprout-notify-unit-exit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        make_dir(&dir).unwrap();
        let host_path = dir.join("host.sock");
        let host = UnixDatagram::bind(&host_path).unwrap();
        let ns = NotifySocket::bind(&dir, host_path.clone().into_os_string()).unwrap();
        UnixDatagram::unbound()
            .unwrap()
            .send_to(b"STATUS=not yet", dir.join("notify/notify.sock"))
            .unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pidfd = crate::sys::pidfd_open(child.id() as i32).unwrap();
        child.wait().unwrap();
        ns.wait_ready(pidfd.as_fd(), 1).unwrap();
        host.set_nonblocking(true).unwrap();
        assert!(host.recv(&mut [0u8; 64]).is_err(), "nothing sent");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
