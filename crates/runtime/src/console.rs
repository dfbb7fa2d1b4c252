//! process.terminal: the container's pty. The pty is opened inside the container (its /dev/pts),
//! the slave becomes the process's stdio and controlling terminal, and the master is sent over
//! the --console-socket with SCM_RIGHTS (what containerd, podman's conmon and runc expect).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;

use crate::error::{Error, Result};
use crate::sys::{cvt, send_fd};

/// Connect to the console socket (parent side, before clone: the child inherits the connection,
/// so it never needs to reach a host path from inside the container).
pub fn connect(path: &Path) -> Result<OwnedFd> {
    let s = UnixStream::connect(path)
        .map_err(|e| Error::os(format!("--console-socket {}", path.display()), e))?;
    Ok(s.into())
}

/// How the container's pty is set up besides its size.
#[derive(Clone, Copy, Debug, Default)]
pub struct PtyOpts {
    /// Make the slave the controlling terminal (the init; `exec` leaves it to the process it
    /// spawns, which must be the session leader: trampoline.rs).
    pub ctty: bool,
    /// The process's uid (in the container): the slave is chowned to it when it is not already
    /// its owner, as runc's fixStdioPermissions does, so a non-root process owns its terminal.
    pub uid: u32,
    /// Clear ONLCR (output "\n" stays "\n"): done when sprout itself holds the master (a
    /// foreground `run` without --console-socket), as runc's own console handling does. A
    /// --console-socket receiver gets the pty as the kernel made it, as from runc.
    pub clear_onlcr: bool,
}

/// Open a pty master at /dev/ptmx as seen from here, checked to be the pty multiplexer (5:2,
/// the node or devpts's own `ptmx`): in an image-provided /dev it is the image's, and runc
/// verifies it too since its 2025-11 fixes. (O_RDWR of a fifo there does not block.)
pub fn open_ptmx() -> Result<OwnedFd> {
    let fd = rustix::fs::open(
        c"/dev/ptmx",
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::os("process.terminal: opening /dev/ptmx", e.into()))?;
    let st =
        rustix::fs::fstat(&fd).map_err(|e| Error::os("process.terminal: /dev/ptmx", e.into()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != libc::makedev(5, 2) {
        return Err(Error::msg(
            "process.terminal: /dev/ptmx in the container is not the pty multiplexer 5:2",
        ));
    }
    Ok(fd)
}

/// Open a new pty inside the container, hand the master over `socket`, and make the slave our
/// stdio and (with `opts.ctty`) controlling terminal.
pub fn setup_pty(socket: RawFd, size: Option<(u64, u64)>, opts: PtyOpts) -> Result<()> {
    setup_pty_on(open_ptmx()?, socket, size, opts)
}

/// [`setup_pty`] with a master opened earlier (a container without a mount namespace opens the
/// host's /dev/ptmx before its chroot: it shares the host's devpts, and its rootfs has no /dev
/// of its own).
pub fn setup_pty_on(
    master: OwnedFd,
    socket: RawFd,
    size: Option<(u64, u64)>,
    opts: PtyOpts,
) -> Result<()> {
    // ioctl(TIOCSPTLCK, &0), as libc's unlockpt.
    rustix::pty::unlockpt(&master)
        .map_err(|e| Error::os("process.terminal: unlockpt", e.into()))?;
    // TIOCGPTPEER opens the slave through the master: no path lookup in /dev/pts.
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, OpenptFlags::RDWR | OpenptFlags::NOCTTY)
        .map_err(|e| Error::os("process.terminal: opening the pty slave", e.into()))?;
    if let Some((h, w)) = size {
        let ws = rustix::termios::Winsize {
            ws_row: h as u16,
            ws_col: w as u16,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // ioctl(TIOCSWINSZ); a failure leaves the kernel's default size, as before.
        let _ = rustix::termios::tcsetwinsize(&master, ws);
    }
    if opts.clear_onlcr {
        // SAFETY: termios is plain data (all-zero is valid); tcgetattr writes the live local
        // `t` and tcsetattr reads it back; `slave` is borrowed, so its fd is open.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            cvt(libc::tcgetattr(slave.as_raw_fd(), &mut t))
                .map_err(|e| Error::os("process.terminal: tcgetattr", e))?;
            t.c_oflag &= !libc::ONLCR;
            cvt(libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t))
                .map_err(|e| Error::os("process.terminal: clearing ONLCR", e))?;
        }
    }
    chown_to(&slave, opts.uid)?;
    let mut name = [0 as libc::c_char; 64];
    // SAFETY: ptsname_r writes at most name.len() bytes (NUL included) into the live local `name`.
    unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    // SAFETY: `name` was zero-filled and ptsname_r writes a NUL-terminated string of at most its
    // length (or nothing, leaving "" on failure), so there is a NUL inside the array, which
    // outlives the borrow (to_vec copies it).
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_bytes()
        .to_vec();
    send_fd(socket, &name, master.as_raw_fd())
        .map_err(|e| Error::os("--console-socket: sending the pty master", e))?;
    drop(master);
    if opts.ctty {
        // Fails (EPERM) only for a process group leader, which then keeps its session, as
        // before: the TIOCSCTTY below says whether the terminal could be taken.
        let _ = rustix::process::setsid();
        rustix::process::ioctl_tiocsctty(&slave)
            .map_err(|e| Error::os("process.terminal: TIOCSCTTY", e.into()))?;
    }
    // dup2 onto 0, 1 and 2 (rustix's stdio forms: no OwnedFd is made for the targets); `slave`
    // stays ours and is closed by its drop.
    let dup =
        |r: rustix::io::Result<()>| r.map_err(|e| Error::os("process.terminal: dup2", e.into()));
    dup(rustix::stdio::dup2_stdin(&slave))?;
    dup(rustix::stdio::dup2_stdout(&slave))?;
    dup(rustix::stdio::dup2_stderr(&slave))?;
    Ok(())
}

/// Give the terminal to `uid` (owner only: the group stays the one devpts chose, e.g. its
/// gid=5 option), unless it already is its owner. As runc, EPERM (an owner not mapped in our user
/// namespace) and EROFS leave it as it is.
fn chown_to(slave: &OwnedFd, uid: u32) -> Result<()> {
    give_to(slave.as_raw_fd(), uid, false).map_err(|(step, e)| {
        Error::os(
            format!("process.terminal: {step} of the pty to process.user.uid {uid}"),
            e,
        )
    })
}

/// Give whatever the process's stdin, stdout and stderr are (pipes, files, a terminal) to
/// `uid`, owner only, before it switches to that user: runc's fixStdioPermissions, for the init
/// and every `exec`'d process. /dev/null, a closed descriptor and one `uid` already owns are
/// left alone; so are EPERM (an owner not mapped in the user namespace) and EROFS.
pub fn give_stdio_to(uid: u32) -> Result<()> {
    for fd in 0..3 {
        match give_to(fd, uid, true) {
            Ok(()) => {}
            Err((_, e)) if e.raw_os_error() == Some(libc::EBADF) => {}
            Err((step, e)) => {
                return Err(Error::os(
                    format!("process.user.uid: {step} of stdio fd {fd} to {uid}"),
                    e,
                ))
            }
        }
    }
    Ok(())
}

/// fchown(`fd`, `uid`, unchanged group) unless `uid` owns it already or (`skip_null`) it is
/// /dev/null; EPERM and EROFS are not errors (runc). The error names the call that failed.
fn give_to(
    fd: RawFd,
    uid: u32,
    skip_null: bool,
) -> std::result::Result<(), (&'static str, std::io::Error)> {
    // SAFETY: `stat` is plain integers: all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat into the live local `st`; a closed `fd` is EBADF.
    cvt(unsafe { libc::fstat(fd, &mut st) }).map_err(|e| ("fstat", e))?;
    let dev_null = st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 3);
    if st.st_uid == uid || (skip_null && dev_null) {
        return Ok(());
    }
    // SAFETY: fchown on a descriptor fstat just accepted; gid -1 (as u32) leaves the group.
    match cvt(unsafe { libc::fchown(fd, uid, u32::MAX) }) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EROFS)) => Ok(()),
        Err(e) => Err(("chown", e)),
    }
}

/// /dev/console of a container with a terminal: its pty slave (`slave`) bound over it, as
/// runtime-spec's default devices ask and runc and crun do (programs that write to the console,
/// an init system, `agetty`, find their terminal there). The file is made where missing (an
/// empty regular file, the mount point); one that exists must be a regular file or a character
/// device: a symlink there (the image's /dev, a volume's) is refused, never followed, as runc
/// refuses it since CVE-2025-52565. The bind is a clone of the slave's own mount taken from its
/// descriptor: no path below /dev/pts is looked up.
pub fn bind_console(slave: std::os::fd::BorrowedFd<'_>) -> Result<()> {
    let err = |step: &str, e: std::io::Error| Error::os(format!("process.terminal: {step}"), e);
    let dev = rustix::fs::open(
        c"/dev",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err("opening /dev", e.into()))?;
    let open = || {
        rustix::fs::openat(
            &dev,
            c"console",
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let target = match open() {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => {
            match rustix::fs::mknodat(
                &dev,
                c"console",
                rustix::fs::FileType::RegularFile,
                Mode::from_raw_mode(0o666),
                0,
            ) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(err("making /dev/console", e.into())),
            }
            open().map_err(|e| err("opening /dev/console", e.into()))?
        }
        Err(e) => return Err(err("opening /dev/console", e.into())),
    };
    let kind = rustix::fs::fstat(&target)
        .map_err(|e| err("/dev/console", e.into()))?
        .st_mode
        & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFCHR {
        return Err(Error::msg(format!(
            "process.terminal: /dev/console in the container is {} (refused: CVE-2025-52565)",
            if kind == libc::S_IFLNK {
                "a symlink"
            } else {
                "neither a file nor a device"
            }
        )));
    }
    let tree = crate::rootfs::open_tree(slave.as_raw_fd(), c"", false)
        .map_err(|e| err("cloning the pty for /dev/console", e))?;
    crate::rootfs::move_mount_to_fd(tree.as_raw_fd(), target.as_raw_fd())
        .map_err(|e| err("binding the pty over /dev/console", e))
}
