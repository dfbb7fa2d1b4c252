//! OOM notifications for `sprout events`.
//!
//! - v1 (and hybrid, where memory is a v1 controller): an eventfd registered for
//!   `memory.oom_control` through `cgroup.event_control`. Each read of the eventfd returns
//!   how many OOM situations happened since the last read. The kernel also signals the
//!   eventfd when the cgroup is removed; that is told apart by the cgroup being gone.
//! - v2: `memory.events` (its "oom" counter), woken by poll(POLLPRI) on the open file, which
//!   kernfs raises whenever the file changes; "populated 0 / the directory gone" ends it.
//!
//! [`OomEvents::as_fd`] + [`OomEvents::poll_events`] let a caller put it in its own poll
//! loop; [`OomEvents::wait`] and the `Iterator` impl block.

use std::fs::File;
use std::io::{Read, Seek};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{fs, Error, Result};

/// What [`OomEvents::wait`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomWait {
    /// This many new OOM events (at least 1).
    Oom(u64),
    /// Nothing within the timeout.
    Timeout,
    /// The cgroup was removed: no more events will come.
    Gone,
}

enum Source {
    V1 { efd: OwnedFd, _oom_control: File },
    V2 { events: File, last_oom: u64 },
}

/// A subscription to the OOM events of a container's memory cgroup.
pub struct OomEvents {
    dir: PathBuf,
    src: Source,
}

impl std::fmt::Debug for OomEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.src {
            Source::V1 { .. } => "v1 eventfd",
            Source::V2 { .. } => "v2 memory.events",
        };
        f.debug_struct("OomEvents")
            .field("dir", &self.dir)
            .field("kind", &kind)
            .finish()
    }
}

/// The "oom" counter of a memory.events text.
pub(crate) fn oom_count(events: &str) -> u64 {
    fs::flat_keyed(events)
        .find(|(k, _)| *k == "oom")
        .map_or(0, |(_, v)| v)
}

impl OomEvents {
    /// v1: eventfd + cgroup.event_control for `<dir>/memory.oom_control`.
    #[doc(hidden)]
    pub fn v1(dir: &Path) -> Result<OomEvents> {
        let ctl_path = dir.join("memory.oom_control");
        let oom_control = File::open(&ctl_path).map_err(|e| fs::io_err(&ctl_path, e))?;
        let efd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
            .map_err(|e| fs::io_err(dir, e.into()))?;
        let line = format!("{} {}", efd.as_raw_fd(), oom_control.as_raw_fd());
        fs::write_at(dir, "cgroup.event_control", &line)?;
        Ok(OomEvents {
            dir: dir.to_path_buf(),
            src: Source::V1 {
                efd,
                _oom_control: oom_control,
            },
        })
    }

    /// v2: poll(POLLPRI) on `<dir>/memory.events`.
    #[doc(hidden)]
    pub fn v2(dir: &Path) -> Result<OomEvents> {
        let p = dir.join("memory.events");
        let mut events = File::open(&p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() {
                Error::Invalid(format!(
                    "OOM events: {} has no memory.events (memory controller not enabled there)",
                    dir.display()
                ))
            } else {
                fs::io_err(&p, e)
            }
        })?;
        let mut s = String::new();
        events
            .read_to_string(&mut s)
            .map_err(|e| fs::io_err(&p, e))?;
        Ok(OomEvents {
            dir: dir.to_path_buf(),
            src: Source::V2 {
                events,
                last_oom: oom_count(&s),
            },
        })
    }

    /// The fd to poll, with [`OomEvents::poll_events`].
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.src {
            Source::V1 { efd, .. } => efd.as_fd(),
            Source::V2 { events, .. } => events.as_fd(),
        }
    }

    /// poll(2) events that mean "call [`OomEvents::wait`] with a zero timeout now".
    pub fn poll_events(&self) -> i16 {
        match self.src {
            Source::V1 { .. } => libc::POLLIN,
            Source::V2 { .. } => libc::POLLPRI | libc::POLLERR,
        }
    }

    /// Wait up to `timeout` (`None`: forever) for OOM events.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<OomWait> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            // v2: the counter may have moved before we started polling.
            if let Some(w) = self.check()? {
                return Ok(w);
            }
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() && timeout != Some(Duration::ZERO) {
                        return Ok(OomWait::Timeout);
                    }
                    left.as_millis().min(i32::MAX as u128) as i32
                }
            };
            let mut pfd = libc::pollfd {
                fd: self.as_fd().as_raw_fd(),
                events: self.poll_events(),
                revents: 0,
            };
            // SAFETY: `pfd` is one live, exclusively borrowed pollfd and nfds is 1; its fd is
            // owned by `self` for the whole call.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(fs::io_err(&self.dir, e));
            }
            if n == 0 {
                // One last look (v2 counters can move without a wake-up we saw).
                return Ok(self.check()?.unwrap_or(OomWait::Timeout));
            }
            if let Source::V1 { efd, .. } = &self.src {
                let mut buf = [0u8; 8];
                if let Ok(8) = rustix::io::read(efd, &mut buf) {
                    let n = u64::from_ne_bytes(buf);
                    // The kernel also signals on rmdir: then the cgroup is gone.
                    if !self.dir.join("cgroup.event_control").exists() {
                        return Ok(OomWait::Gone);
                    }
                    if n > 0 {
                        return Ok(OomWait::Oom(n));
                    }
                }
            }
            if timeout == Some(Duration::ZERO) {
                return Ok(self.check()?.unwrap_or(OomWait::Timeout));
            }
        }
    }

    /// v2: new "oom" count since the last look, or gone. v1: `None` (the eventfd says).
    fn check(&mut self) -> Result<Option<OomWait>> {
        let Source::V2 { events, last_oom } = &mut self.src else {
            if !self.dir.exists() {
                return Ok(Some(OomWait::Gone));
            }
            return Ok(None);
        };
        let mut s = String::new();
        let read = events.rewind().and_then(|_| events.read_to_string(&mut s));
        match read {
            Ok(_) => {}
            // kernfs: reads of a removed cgroup's open file fail with ENODEV.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(Some(OomWait::Gone)),
            Err(e) => return Err(fs::io_err(self.dir.join("memory.events"), e)),
        }
        let now = oom_count(&s);
        if now > *last_oom {
            let n = now - *last_oom;
            *last_oom = now;
            return Ok(Some(OomWait::Oom(n)));
        }
        if !self.dir.exists() {
            return Ok(Some(OomWait::Gone));
        }
        Ok(None)
    }
}

/// Blocks for the next OOM event(s); ends when the cgroup is removed.
impl Iterator for OomEvents {
    type Item = Result<u64>;
    fn next(&mut self) -> Option<Result<u64>> {
        match self.wait(None) {
            Ok(OomWait::Oom(n)) => Some(Ok(n)),
            Ok(OomWait::Gone) => None,
            Ok(OomWait::Timeout) => None, // not reached with no timeout
            Err(e) => Some(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(oom_count("low 0\nhigh 3\nmax 9\noom 2\noom_kill 1\n"), 2);
        assert_eq!(oom_count("oom_kill 5\n"), 0);
    }

    #[test]
    fn v2_on_a_fake_tree() {
        let t = crate::testutil::TempDir::new("oomv2");
        let d = t.path().join("c");
        crate::testutil::files(&d, &[("memory.events", "low 0\noom 1\noom_kill 1\n")]);
        let mut ev = OomEvents::v2(&d).unwrap();
        assert_eq!(ev.wait(Some(Duration::ZERO)).unwrap(), OomWait::Timeout);
        std::fs::write(d.join("memory.events"), "low 0\noom 4\noom_kill 2\n").unwrap();
        assert_eq!(
            ev.wait(Some(Duration::from_millis(10))).unwrap(),
            OomWait::Oom(3)
        );
        assert_eq!(ev.wait(Some(Duration::ZERO)).unwrap(), OomWait::Timeout);
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(ev.wait(Some(Duration::ZERO)).unwrap(), OomWait::Gone);
        let e = OomEvents::v2(t.path()).unwrap_err().to_string();
        assert!(e.contains("memory controller"), "{e}");
    }
}
