//! Foreground `run` with process.terminal and no --console-socket: sprout receives the pty master
//! itself (over an internal socketpair) and proxies it to its own stdin/stdout, in raw mode when
//! stdin is a terminal, resizing on SIGWINCH, until the container's init exits.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::{Error, Result};
use crate::sys;

/// An internal console socket pair: (the end the init sends on, the end we receive on).
pub fn console_pair() -> Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| Error::os("console socketpair", e.into()))
}

pub fn recv_master(sock: &OwnedFd) -> Result<OwnedFd> {
    let mut buf = [0u8; 256];
    let (_, fd) = sys::recv_fd(sock.as_raw_fd(), &mut buf)
        .map_err(|e| Error::os("receiving the pty master", e))?;
    fd.ok_or_else(|| Error::msg("process.terminal: the container sent no pty"))
}

struct RawMode {
    saved: Option<libc::termios>,
}

impl RawMode {
    fn enter() -> RawMode {
        // SAFETY: isatty takes an fd; termios is plain data (all-zero is valid); tcgetattr writes
        // the live local `t`, cfmakeraw edits it in place and tcsetattr reads it. fd 0 is our
        // stdin, which nothing owns as an OwnedFd.
        unsafe {
            if libc::isatty(0) != 1 {
                return RawMode { saved: None };
            }
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return RawMode { saved: None };
            }
            let saved = t;
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(0, libc::TCSANOW, &t);
            RawMode { saved: Some(saved) }
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            // SAFETY: tcsetattr reads the borrowed termios `t` saved by `enter`.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}

fn copy_winsize(master: RawFd) {
    // SAFETY: winsize is plain integers (all-zero is valid); TIOCGWINSZ writes the live local `ws`
    // and TIOCSWINSZ reads it. A closed `master` fails with EBADF.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(master, libc::TIOCSWINSZ, &ws);
        }
    }
}

/// Proxy stdin → master and master → stdout until the process behind `pidfd` exits; forward
/// signals; return its exit code.
pub fn proxy_and_wait(pidfd: &OwnedFd, pid: i32, master: OwnedFd) -> Result<i32> {
    let _raw = RawMode::enter();
    copy_winsize(master.as_raw_fd());
    // SAFETY: sigprocmask and signalfd read the live local `set`; signalfd's fd (or -1, then poll
    // ignores that entry and it never reports) is closed once at the end and never handed out. poll
    // gets the live 4-element `fds` with nfds 4; an fd of -1 (stdin once closed) is ignored. Every
    // read writes at most buf.len() bytes into the live local `buf` (8192 bytes), or
    // size_of::<signalfd_siginfo>() into the live local `si` (all-zero is valid for that plain
    // struct), and only the r > 0 bytes read are passed on. `m` is the fd of `master`, which this
    // function owns and keeps open until after the block.
    unsafe {
        let set = crate::lifecycle::forwarded_set();
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let sfd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        let m = master.as_raw_fd();
        let mut stdin_open = true;
        let mut buf = [0u8; 8192];
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: m,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if stdin_open { 0 } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let n = libc::poll(fds.as_mut_ptr(), 4, -1);
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            if fds[2].revents & libc::POLLIN != 0 {
                let r = libc::read(m, buf.as_mut_ptr().cast(), buf.len());
                if r > 0 {
                    let _ = sys::write_all_fd(1, &buf[..r as usize]);
                }
            }
            if fds[3].revents & (libc::POLLIN | libc::POLLHUP) != 0 {
                let r = libc::read(0, buf.as_mut_ptr().cast(), buf.len());
                if r > 0 {
                    let _ = sys::write_all_fd(m, &buf[..r as usize]);
                } else {
                    stdin_open = false;
                    // End of input: send EOF (^D) to the terminal like an interactive user would.
                    let _ = sys::write_all_fd(m, &[4]);
                }
            }
            if fds[1].revents != 0 {
                let mut si: libc::signalfd_siginfo = std::mem::zeroed();
                if libc::read(
                    sfd,
                    std::ptr::from_mut::<libc::signalfd_siginfo>(&mut si).cast(),
                    std::mem::size_of::<libc::signalfd_siginfo>(),
                ) > 0
                {
                    if si.ssi_signo as i32 == libc::SIGWINCH {
                        copy_winsize(m);
                    } else {
                        let _ = sys::pidfd_send_signal(pidfd, si.ssi_signo as i32);
                    }
                }
            }
            if fds[0].revents != 0 {
                // Drain what the process wrote last.
                loop {
                    let mut p = libc::pollfd {
                        fd: m,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    if libc::poll(&mut p, 1, 0) <= 0 || p.revents & libc::POLLIN == 0 {
                        break;
                    }
                    let r = libc::read(m, buf.as_mut_ptr().cast(), buf.len());
                    if r <= 0 {
                        break;
                    }
                    let _ = sys::write_all_fd(1, &buf[..r as usize]);
                }
                break;
            }
        }
        if sfd >= 0 {
            libc::close(sfd);
        }
    }
    crate::lifecycle::wait_forwarding(pidfd, pid)
}
