//! Sandbox and zygote output. Each sandbox gets the write end of a pipe of its own as
//! stdout/stderr; one engine thread drains every read end (epoll) and writes the lines to the
//! operator's log (`sandbox_log`), each prefixed by the engine with `[<handler> s<id>]` (or
//! `[zygote <packages>]`). A tenant never holds an fd to a host file: it cannot seek,
//! truncate or fallocate the log (ESPIPE/EINVAL on a pipe), its lines cannot pass for
//! another's (the tag comes first, control bytes are replaced) and what it can add is capped
//! (`sandbox_log_bytes` per pipe; the rest is read and dropped, so a chatty handler never
//! blocks on a full pipe).

use crate::locked::Locked;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A line longer than this is cut (the rest follows as further lines, same tag).
const MAX_LINE: usize = 4096;

struct Stream {
    fd: OwnedFd,
    tag: String,
    written: u64,
    capped: bool,
    partial: Vec<u8>,
}

pub struct LogSink {
    ep: OwnedFd,
    streams: Mutex<HashMap<u64, Stream>>,
    next: AtomicU64,
    cap: u64,
}

impl LogSink {
    /// Open (append, create) `path` and start the draining thread.
    pub fn start(path: &Path, cap: u64) -> io::Result<Arc<LogSink>> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        // SAFETY: epoll_create1(2) takes an integer flag; the result is checked below.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        let sink = Arc::new(LogSink {
            // SAFETY: `ep` (>= 0) is the epoll fd just created, owned by nothing else.
            ep: unsafe { OwnedFd::from_raw_fd(ep) },
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            cap,
        });
        let s2 = sink.clone();
        std::thread::Builder::new()
            .name("sandbox-log".into())
            .spawn(move || s2.run(out))?;
        Ok(sink)
    }

    /// A new pipe whose lines go to the log tagged `[tag]`. Returns the write end (close-on-
    /// exec: the caller dup2s it onto 1 and 2 of the sandbox, or hands it over by
    /// SCM_RIGHTS, and drops its own copy).
    pub fn pipe(&self, tag: String) -> io::Result<OwnedFd> {
        // Both ends close-on-exec.
        let (r, w) = io::pipe()?;
        let (r, w) = (OwnedFd::from(r), OwnedFd::from(w));
        // Only the engine's end is non-blocking (the sandbox's writes block as on a file).
        // SAFETY: F_SETFL takes an integer; `r` is owned here.
        unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: id,
        };
        let rfd = r.as_raw_fd();
        let mut st = self.streams.locked();
        st.insert(
            id,
            Stream {
                fd: r,
                tag,
                written: 0,
                capped: false,
                partial: Vec::new(),
            },
        );
        // SAFETY: `ev` is a live epoll_event the kernel copies; `rfd` is owned by the Stream
        // just inserted, which stays in the map (under the lock held here) unless this fails.
        if unsafe { libc::epoll_ctl(self.ep.as_raw_fd(), libc::EPOLL_CTL_ADD, rfd, &mut ev) } != 0 {
            let e = io::Error::last_os_error();
            st.remove(&id);
            return Err(e);
        }
        Ok(w)
    }

    fn run(&self, mut out: File) {
        let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
        let mut buf = vec![0u8; 64 << 10];
        let mut text = Vec::with_capacity(80 << 10);
        loop {
            // SAFETY: the kernel writes at most evs.len() (64) events into the live `evs`.
            let n = unsafe {
                libc::epoll_wait(self.ep.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, -1)
            };
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return;
            }
            for ev in &evs[..n as usize] {
                let id = ev.u64;
                let mut st = self.streams.locked();
                let Some(s) = st.get_mut(&id) else { continue };
                // SAFETY: reads at most buf.len() bytes into the live `buf`; the fd is owned by
                // `s`, which the held lock keeps in the map for the call.
                let r = unsafe { libc::read(s.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if r > 0 {
                    self.take(s, &buf[..r as usize], &mut text);
                } else if r < 0
                    && matches!(
                        io::Error::last_os_error().raw_os_error(),
                        Some(libc::EAGAIN) | Some(libc::EINTR)
                    )
                {
                    continue;
                } else {
                    // EOF (every writer gone) or an error: the last partial line, then done
                    // (closing the read end takes it out of the epoll set).
                    if !s.partial.is_empty() {
                        let line = std::mem::take(&mut s.partial);
                        emit(&s.tag, &line, &mut text);
                    }
                    st.remove(&id);
                }
                drop(st);
                if !text.is_empty() {
                    let _ = out.write_all(&text);
                    text.clear();
                }
            }
        }
    }

    /// Account and split what a stream sent into tagged lines (appended to `text`).
    fn take(&self, s: &mut Stream, data: &[u8], text: &mut Vec<u8>) {
        if s.capped {
            return;
        }
        let room = self.cap.saturating_sub(s.written);
        let keep = (data.len() as u64).min(room) as usize;
        s.written += keep as u64;
        let mut rest = &data[..keep];
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    if s.partial.is_empty() {
                        emit_long(&s.tag, &rest[..i], text);
                    } else {
                        s.partial.extend_from_slice(&rest[..i]);
                        let line = std::mem::take(&mut s.partial);
                        emit_long(&s.tag, &line, text);
                    }
                    rest = &rest[i + 1..];
                }
                None => {
                    s.partial.extend_from_slice(rest);
                    while s.partial.len() >= MAX_LINE {
                        let line: Vec<u8> = s.partial.drain(..MAX_LINE).collect();
                        emit(&s.tag, &line, text);
                    }
                    break;
                }
            }
        }
        if keep < data.len() {
            if !s.partial.is_empty() {
                let line = std::mem::take(&mut s.partial);
                emit(&s.tag, &line, text);
            }
            s.capped = true;
            let note = format!(
                "(output capped at {} bytes: the rest of this sandbox's output is dropped)",
                self.cap
            );
            emit(&s.tag, note.as_bytes(), text);
        }
    }
}

fn emit_long(tag: &str, line: &[u8], text: &mut Vec<u8>) {
    if line.is_empty() {
        emit(tag, line, text);
    }
    for part in line.chunks(MAX_LINE) {
        emit(tag, part, text);
    }
}

/// `[tag] line\n`, control bytes (but tab) replaced by `?`: nothing a tenant writes can start
/// a line of its own or move an operator's terminal.
fn emit(tag: &str, line: &[u8], text: &mut Vec<u8>) {
    text.push(b'[');
    text.extend_from_slice(tag.as_bytes());
    text.extend_from_slice(b"] ");
    text.extend(line.iter().map(|&b| {
        if (b < 0x20 && b != b'\t') || b == 0x7f {
            b'?'
        } else {
            b
        }
    }));
    text.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_tagged_cut_and_capped() {
        // SAFETY: epoll_create1 and dup take integers; both results are checked just below.
        let (ep, dup) = unsafe { (libc::epoll_create1(libc::EPOLL_CLOEXEC), libc::dup(0)) };
        assert!(ep >= 0 && dup >= 0);
        let sink = LogSink {
            // SAFETY: a new epoll fd that nothing else owns.
            ep: unsafe { OwnedFd::from_raw_fd(ep) },
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            cap: 20,
        };
        let mut s = Stream {
            // SAFETY: a new duplicate of fd 0 that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(dup) },
            tag: "h s1".into(),
            written: 0,
            capped: false,
            partial: Vec::new(),
        };
        let mut t = Vec::new();
        sink.take(&mut s, b"ab\ncd\r[x s2] e", &mut t);
        sink.take(&mut s, b"f\n0123456789", &mut t);
        let t = String::from_utf8(t).unwrap();
        assert_eq!(
            t,
            "[h s1] ab\n[h s1] cd?[x s2] ef\n[h s1] 0123\n[h s1] (output capped at 20 bytes: the rest of this sandbox's output is dropped)\n"
        );
        assert!(s.capped);
    }
}
