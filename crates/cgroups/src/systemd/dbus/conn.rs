//! The connection: D-Bus addresses, SASL `EXTERNAL` authentication and [`Conn`], which sends
//! method calls, matches replies by serial and keeps the signals that arrive meanwhile.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::message::Message;
use super::{proto, Error, Result, Value, ERROR, METHOD_RETURN, SIGNAL};

/// A D-Bus address we can connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Addr {
    Path(String),
    Abstract(String),
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Path(p) => write!(f, "unix:path={p}"),
            Addr::Abstract(p) => write!(f, "unix:abstract={p}"),
        }
    }
}

/// Parse a D-Bus server address list ("unix:path=/x,guid=..;tcp:..."): the first unix
/// path or abstract entry. A bare absolute path is taken as `unix:path=`.
pub(crate) fn parse_address(s: &str) -> std::result::Result<Addr, String> {
    if s.starts_with('/') {
        return Ok(Addr::Path(s.to_string()));
    }
    for entry in s.split(';') {
        let Some(kv) = entry.strip_prefix("unix:") else {
            continue;
        };
        for pair in kv.split(',') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = unescape(v)?;
            match k {
                "path" => return Ok(Addr::Path(v)),
                "abstract" => return Ok(Addr::Abstract(v)),
                _ => {}
            }
        }
    }
    Err(format!("{s:?} has no unix:path= or unix:abstract= entry"))
}

fn unescape(v: &str) -> std::result::Result<String, String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = v
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in {v:?}"))?;
            out.push(h);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{v:?} is not UTF-8"))
}

/// The SASL lines sent at once: the NUL byte, `AUTH EXTERNAL` with `uid` (hex of its decimal
/// digits) or without identity followed by an empty `DATA`, then `BEGIN`.
pub(crate) fn auth_lines(uid: Option<u32>) -> String {
    match uid {
        Some(uid) => {
            let hex: String = uid
                .to_string()
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("\0AUTH EXTERNAL {hex}\r\nBEGIN\r\n")
        }
        None => "\0AUTH EXTERNAL\r\nDATA\r\nBEGIN\r\n".to_string(),
    }
}

#[derive(Debug)]
pub(crate) struct Conn {
    sock: UnixStream,
    serial: u32,
    /// Signals read while waiting for a reply.
    signals: Vec<Message>,
    /// Bytes read past the SASL "OK" line.
    rbuf: Vec<u8>,
    /// Talking to a message bus (Hello sent, destinations needed), not a direct peer.
    pub bus: bool,
    /// Read timeout of one call.
    timeout: Duration,
}

impl Conn {
    /// Connect, authenticate with EXTERNAL and, on a message bus, say Hello.
    ///
    /// The identity is left to the server first (`AUTH EXTERNAL` then an empty `DATA`, as
    /// sd-bus clients do): it takes the uid from the socket's credentials as IT sees them,
    /// which is right whatever user namespace this process is in (rootless podman runs the
    /// runtime as uid 0 of its namespace; systemd sees the user's own uid). A server that
    /// refuses that is asked again with `uid_hint` spelled out (runc's way: the host uid).
    pub fn connect(addr: &Addr, bus: bool, timeout: Duration, uid_hint: u32) -> Result<Conn> {
        match Conn::connect_with(addr, bus, timeout, None) {
            Err(Error::Protocol(e)) if e.starts_with("authentication refused") => {
                Conn::connect_with(addr, bus, timeout, Some(uid_hint))
            }
            r => r,
        }
    }

    /// One connection attempt; `uid`: the identity to send (`None`: empty, the server's view).
    pub fn connect_with(
        addr: &Addr,
        bus: bool,
        timeout: Duration,
        uid: Option<u32>,
    ) -> Result<Conn> {
        let sock = match addr {
            Addr::Path(p) => UnixStream::connect(p)?,
            Addr::Abstract(n) => {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(n.as_bytes())?;
                UnixStream::connect_addr(&a)?
            }
        };
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
        let mut c = Conn {
            sock,
            serial: 0,
            signals: Vec::new(),
            rbuf: Vec::new(),
            bus,
            timeout,
        };
        let mut out = auth_lines(uid).into_bytes();
        let hello_serial = if bus {
            let m = c.next_call(Message::method_call(
                Some("org.freedesktop.DBus"),
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "Hello",
                vec![],
            ));
            out.extend_from_slice(&m.encode()?);
            Some(m.serial)
        } else {
            None
        };
        c.sock.write_all(&out)?;
        loop {
            let line = c.read_line()?;
            // The server's empty challenge to an AUTH EXTERNAL without identity.
            if line.trim_end() == "DATA" && uid.is_none() {
                continue;
            }
            if line.starts_with("OK ") {
                break;
            }
            return Err(proto(format!(
                "authentication refused: {}",
                line.trim_end()
            )));
        }
        if let Some(s) = hello_serial {
            c.reply(s, "Hello")?;
        }
        Ok(c)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut chunk = [0u8; 256];
        loop {
            if let Some(i) = self.rbuf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.rbuf.drain(..i + 2).collect();
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            if self.rbuf.len() > 4096 {
                return Err(proto("authentication line too long"));
            }
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                return Err(proto("connection closed during authentication"));
            }
            self.rbuf.extend_from_slice(&chunk[..n]);
        }
    }

    fn fill(&mut self, n: usize) -> Result<()> {
        let mut chunk = [0u8; 4096];
        while self.rbuf.len() < n {
            let got = self.sock.read(&mut chunk)?;
            if got == 0 {
                return Err(proto("connection closed by the peer"));
            }
            self.rbuf.extend_from_slice(&chunk[..got]);
        }
        Ok(())
    }

    pub fn read_message(&mut self) -> Result<Message> {
        self.fill(16)?;
        let head: [u8; 16] = self.rbuf[..16].try_into().expect("16");
        let total = Message::total_len(&head)?;
        self.fill(total)?;
        let raw: Vec<u8> = self.rbuf.drain(..total).collect();
        Message::decode(&raw)
    }

    fn next_call(&mut self, mut m: Message) -> Message {
        self.serial = self.serial.wrapping_add(1).max(1);
        m.serial = self.serial;
        m
    }

    /// Send a method call; its serial.
    pub fn send(&mut self, m: Message) -> Result<u32> {
        let m = self.next_call(m);
        self.sock.write_all(&m.encode()?)?;
        Ok(m.serial)
    }

    /// Read until the reply to `serial`; keep signals, drop anything else.
    pub fn reply(&mut self, serial: u32, what: &str) -> Result<Vec<Value>> {
        loop {
            let m = self.read_message().map_err(|e| match e {
                Error::Timeout(_) => Error::Timeout(format!("the reply to {what}")),
                e => e,
            })?;
            match m.kind {
                METHOD_RETURN | ERROR if m.reply_serial == Some(serial) => {
                    if m.kind == ERROR {
                        let msg = m.body.first().and_then(Value::as_str).unwrap_or("");
                        return Err(Error::Remote(
                            m.error_name.clone().unwrap_or_default(),
                            msg.to_string(),
                        ));
                    }
                    return Ok(m.body);
                }
                SIGNAL => self.signals.push(m),
                _ => {}
            }
        }
    }

    /// Call `member` and wait for its reply.
    pub fn call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Result<Vec<Value>> {
        let s = self.send_call(destination, path, interface, member, body)?;
        self.reply(s, member)
    }

    /// Send a call to `member` without waiting for its reply ([`Conn::reply`] with the
    /// serial returned reads it).
    pub fn send_call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Result<u32> {
        let dest = if self.bus { Some(destination) } else { None };
        self.send(Message::method_call(dest, path, interface, member, body))
    }

    /// Wait (until `deadline`) for a signal that `pred` accepts; earlier signals included.
    pub fn wait_signal(
        &mut self,
        deadline: Instant,
        what: &str,
        mut pred: impl FnMut(&Message) -> bool,
    ) -> Result<Message> {
        if let Some(i) = self.signals.iter().position(&mut pred) {
            return Ok(self.signals.remove(i));
        }
        let r = self.wait_new_signal(deadline, what, pred);
        self.sock.set_read_timeout(Some(self.timeout))?;
        r
    }

    fn wait_new_signal(
        &mut self,
        deadline: Instant,
        what: &str,
        mut pred: impl FnMut(&Message) -> bool,
    ) -> Result<Message> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(what.to_string()));
            }
            self.sock.set_read_timeout(Some(left))?;
            let m = self.read_message().map_err(|e| match e {
                Error::Timeout(_) => Error::Timeout(what.to_string()),
                e => e,
            })?;
            if m.kind == SIGNAL && pred(&m) {
                return Ok(m);
            }
        }
    }

    /// Peer credentials of the socket (the process at the other end of a direct connection).
    pub fn peer_pid(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        // SAFETY: ucred is three integers (pid, uid, gid): all-zero is a valid value.
        let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: SO_PEERCRED writes at most `len` (= size_of ucred) bytes into the live local
        // `cred` and updates the live local `len`; the socket fd is owned by `self`.
        let r = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                std::ptr::from_mut(&mut cred).cast::<libc::c_void>(),
                &mut len,
            )
        };
        (r == 0 && cred.pid > 0).then_some(cred.pid)
    }
}
