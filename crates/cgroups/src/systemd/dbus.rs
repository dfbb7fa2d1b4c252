//! A small, synchronous D-Bus client: just what the systemd cgroup driver needs.
//!
//! - Transport: a unix stream socket (`unix:path=` or `unix:abstract=` addresses).
//! - Authentication: SASL `EXTERNAL`, the identity left to the server's view of the socket
//!   credentials (`AUTH EXTERNAL` + empty `DATA`, as sd-bus clients), pipelined with `BEGIN`
//!   (and the bus `Hello` when talking to a message bus) so the handshake costs one round
//!   trip; a server that refuses that gets a second connection with an explicit uid.
//! - Wire format (D-Bus specification, "Message Protocol"): a 12-byte fixed header (endianness
//!   `l`, type, flags, version 1, body length, serial), the header fields as `a(yv)`, padding
//!   to 8, then the body. Every value is aligned to its natural alignment counted from the
//!   start of the message (the body starts 8-aligned, so counting from the body start is the
//!   same). Arrays carry their byte length without the padding that precedes the first
//!   element, and that padding is written even when the array is empty.
//! - Replies are matched by REPLY_SERIAL; signals that arrive meanwhile are kept for
//!   [`Conn::wait_signal`]. Both little- and big-endian messages are read.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

pub(crate) const METHOD_CALL: u8 = 1;
pub(crate) const METHOD_RETURN: u8 = 2;
pub(crate) const ERROR: u8 = 3;
pub(crate) const SIGNAL: u8 = 4;

/// Largest message accepted (the specification's limit is 128 MiB; systemd's replies are small).
const MAX_MESSAGE: usize = 16 << 20;
/// Deepest container nesting accepted while decoding.
const MAX_DEPTH: usize = 32;

/// A D-Bus value. Arrays keep their element signature so that empty arrays can be written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Byte(u8),
    Bool(bool),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    Double(f64),
    Str(String),
    Path(String),
    Sig(String),
    /// Element signature and elements.
    Array(String, Vec<Value>),
    Struct(Vec<Value>),
    DictEntry(Box<Value>, Box<Value>),
    Variant(Box<Value>),
    UnixFd(u32),
}

impl Value {
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }

    pub fn variant(v: Value) -> Value {
        Value::Variant(Box::new(v))
    }

    /// The single complete type of this value.
    pub fn signature(&self) -> String {
        let mut s = String::new();
        self.sig_into(&mut s);
        s
    }

    fn sig_into(&self, s: &mut String) {
        match self {
            Value::Byte(_) => s.push('y'),
            Value::Bool(_) => s.push('b'),
            Value::I16(_) => s.push('n'),
            Value::U16(_) => s.push('q'),
            Value::I32(_) => s.push('i'),
            Value::U32(_) => s.push('u'),
            Value::I64(_) => s.push('x'),
            Value::U64(_) => s.push('t'),
            Value::Double(_) => s.push('d'),
            Value::Str(_) => s.push('s'),
            Value::Path(_) => s.push('o'),
            Value::Sig(_) => s.push('g'),
            Value::Array(elem, _) => {
                s.push('a');
                s.push_str(elem);
            }
            Value::Struct(fields) => {
                s.push('(');
                for f in fields {
                    f.sig_into(s);
                }
                s.push(')');
            }
            Value::DictEntry(k, v) => {
                s.push('{');
                k.sig_into(s);
                v.sig_into(s);
                s.push('}');
            }
            Value::Variant(_) => s.push('v'),
            Value::UnixFd(_) => s.push('h'),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Path(s) | Value::Sig(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u32(&self) -> Option<u32> {
        match self {
            Value::U32(v) => Some(*v),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(crate) enum Error {
    Io(std::io::Error),
    /// Malformed data on the wire or a value that cannot be written.
    Protocol(String),
    /// An ERROR message: error name and its first string argument (if any).
    Remote(String, String),
    Timeout(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Protocol(s) => write!(f, "D-Bus protocol error: {s}"),
            Error::Remote(name, msg) if msg.is_empty() => write!(f, "{name}"),
            Error::Remote(name, msg) => write!(f, "{name}: {msg}"),
            Error::Timeout(what) => write!(f, "timed out waiting for {what}"),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            Error::Timeout("a D-Bus message".into())
        } else {
            Error::Io(e)
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

fn proto(s: impl Into<String>) -> Error {
    Error::Protocol(s.into())
}

// ------------------------------------------------------------------ signatures

/// Alignment of the type that starts `sig`.
fn align_of(c: u8) -> usize {
    match c {
        b'y' | b'g' | b'v' => 1,
        b'n' | b'q' => 2,
        b'x' | b't' | b'd' | b'(' | b'{' => 8,
        _ => 4, // b i u h s o a
    }
}

/// Split off the first single complete type of `sig`.
pub(crate) fn split_type(sig: &str) -> Result<(&str, &str)> {
    let b = sig.as_bytes();
    let end = complete_type_end(b, 0, 0)?;
    Ok((&sig[..end], &sig[end..]))
}

fn complete_type_end(b: &[u8], i: usize, depth: usize) -> Result<usize> {
    if depth > MAX_DEPTH {
        return Err(proto("signature nests too deeply"));
    }
    match b.get(i) {
        None => Err(proto("signature ends inside a type")),
        Some(b'a') => complete_type_end(b, i + 1, depth + 1),
        Some(&open @ (b'(' | b'{')) => {
            let close = if open == b'(' { b')' } else { b'}' };
            let mut j = i + 1;
            let mut n = 0;
            while b.get(j) != Some(&close) {
                j = complete_type_end(b, j, depth + 1)?;
                n += 1;
            }
            if n == 0 || (open == b'{' && n != 2) {
                return Err(proto("empty struct or malformed dict entry in signature"));
            }
            Ok(j + 1)
        }
        Some(c) if b"ybnqiuxtdsogvh".contains(c) => Ok(i + 1),
        Some(c) => Err(proto(format!("unknown type code {:?}", *c as char))),
    }
}

// ------------------------------------------------------------------ writing

/// Little-endian marshaller; offsets (for alignment) count from the start of `buf`.
#[derive(Default)]
pub(crate) struct Enc {
    pub buf: Vec<u8>,
}

impl Enc {
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn string(&mut self, s: &str) -> Result<()> {
        if s.contains('\0') {
            return Err(proto("a string contains a NUL byte"));
        }
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn sig(&mut self, s: &str) -> Result<()> {
        if s.len() > 255 {
            return Err(proto("signature longer than 255 bytes"));
        }
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    pub fn put(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::Byte(x) => self.buf.push(*x),
            Value::Bool(x) => self.u32(u32::from(*x)),
            Value::I16(x) => {
                self.pad(2);
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
            Value::U16(x) => {
                self.pad(2);
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
            Value::I32(x) => {
                self.pad(4);
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
            Value::U32(x) | Value::UnixFd(x) => self.u32(*x),
            Value::I64(x) => {
                self.pad(8);
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
            Value::U64(x) => {
                self.pad(8);
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
            Value::Double(x) => {
                self.pad(8);
                self.buf.extend_from_slice(&x.to_le_bytes());
            }
            Value::Str(s) | Value::Path(s) => self.string(s)?,
            Value::Sig(s) => self.sig(s)?,
            Value::Array(elem, items) => {
                let (t, rest) = split_type(elem)?;
                if !rest.is_empty() {
                    return Err(proto("array element signature is not one type"));
                }
                self.u32(0);
                let len_at = self.buf.len() - 4;
                self.pad(align_of(t.as_bytes()[0]));
                let start = self.buf.len();
                for it in items {
                    if it.signature() != elem.as_str() {
                        return Err(proto(format!("array of {elem} holds a {}", it.signature())));
                    }
                    self.put(it)?;
                }
                let len = (self.buf.len() - start) as u32;
                self.buf[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
            }
            Value::Struct(fields) => {
                self.pad(8);
                for f in fields {
                    self.put(f)?;
                }
            }
            Value::DictEntry(k, v) => {
                self.pad(8);
                self.put(k)?;
                self.put(v)?;
            }
            Value::Variant(inner) => {
                self.sig(&inner.signature())?;
                self.put(inner)?;
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ reading

struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Dec<'a> {
    fn align(&mut self, a: usize) -> Result<()> {
        let p = self.pos.div_ceil(a) * a;
        if p > self.buf.len() {
            return Err(proto("message truncated (padding)"));
        }
        self.pos = p;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(proto("message truncated"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.align(N)?;
        let mut a: [u8; N] = self.take(N)?.try_into().expect("length");
        if self.big {
            a.reverse();
        }
        Ok(a) // now little-endian
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.fixed::<4>()?))
    }

    fn text(&mut self, len: usize) -> Result<String> {
        let s = self.take(len + 1)?;
        if s[len] != 0 {
            return Err(proto("string not NUL-terminated"));
        }
        String::from_utf8(s[..len].to_vec()).map_err(|_| proto("string is not UTF-8"))
    }

    fn get(&mut self, t: &str, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(proto("value nests too deeply"));
        }
        let b = t.as_bytes();
        Ok(match b[0] {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => match self.u32()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                v => return Err(proto(format!("boolean value {v}"))),
            },
            b'n' => Value::I16(i16::from_le_bytes(self.fixed::<2>()?)),
            b'q' => Value::U16(u16::from_le_bytes(self.fixed::<2>()?)),
            b'i' => Value::I32(i32::from_le_bytes(self.fixed::<4>()?)),
            b'u' => Value::U32(self.u32()?),
            b'h' => Value::UnixFd(self.u32()?),
            b'x' => Value::I64(i64::from_le_bytes(self.fixed::<8>()?)),
            b't' => Value::U64(u64::from_le_bytes(self.fixed::<8>()?)),
            b'd' => Value::Double(f64::from_le_bytes(self.fixed::<8>()?)),
            b's' | b'o' => {
                let n = self.u32()? as usize;
                let s = self.text(n)?;
                if b[0] == b's' {
                    Value::Str(s)
                } else {
                    Value::Path(s)
                }
            }
            b'g' => {
                let n = self.take(1)?[0] as usize;
                Value::Sig(self.text(n)?)
            }
            b'v' => {
                let n = self.take(1)?[0] as usize;
                let sig = self.text(n)?;
                let (inner, rest) = split_type(&sig)?;
                if !rest.is_empty() {
                    return Err(proto("variant signature is not one type"));
                }
                Value::variant(self.get(inner, depth + 1)?)
            }
            b'a' => {
                let n = self.u32()? as usize;
                if n > 64 << 20 {
                    return Err(proto("array longer than 64 MiB"));
                }
                let elem = &t[1..];
                self.align(align_of(elem.as_bytes()[0]))?;
                let end = self.pos + n;
                if end > self.buf.len() {
                    return Err(proto("array runs past the message"));
                }
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.get(elem, depth + 1)?);
                }
                if self.pos != end {
                    return Err(proto("array element runs past the array"));
                }
                Value::Array(elem.to_string(), items)
            }
            b'(' | b'{' => {
                self.align(8)?;
                let mut inner = &t[1..t.len() - 1];
                let mut fields = Vec::new();
                while !inner.is_empty() {
                    let (f, rest) = split_type(inner)?;
                    fields.push(self.get(f, depth + 1)?);
                    inner = rest;
                }
                if b[0] == b'{' {
                    let v = fields.pop().expect("2 fields");
                    let k = fields.pop().expect("2 fields");
                    Value::DictEntry(Box::new(k), Box::new(v))
                } else {
                    Value::Struct(fields)
                }
            }
            c => return Err(proto(format!("unknown type code {:?}", c as char))),
        })
    }

    /// Every value of a (possibly multi-type) signature.
    fn get_all(&mut self, mut sig: &str) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        while !sig.is_empty() {
            let (t, rest) = split_type(sig)?;
            out.push(self.get(t, 0)?);
            sig = rest;
        }
        Ok(out)
    }
}

// ------------------------------------------------------------------ messages

/// Header field codes (D-Bus specification).
const F_PATH: u8 = 1;
const F_INTERFACE: u8 = 2;
const F_MEMBER: u8 = 3;
const F_ERROR_NAME: u8 = 4;
const F_REPLY_SERIAL: u8 = 5;
const F_DESTINATION: u8 = 6;
const F_SENDER: u8 = 7;
const F_SIGNATURE: u8 = 8;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Message {
    pub kind: u8,
    pub flags: u8,
    pub serial: u32,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub reply_serial: Option<u32>,
    pub destination: Option<String>,
    pub sender: Option<String>,
    pub body: Vec<Value>,
}

impl Message {
    pub fn method_call(
        destination: Option<&str>,
        path: &str,
        interface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Message {
        Message {
            kind: METHOD_CALL,
            path: Some(path.into()),
            interface: Some(interface.into()),
            member: Some(member.into()),
            destination: destination.map(Into::into),
            body,
            ..Message::default()
        }
    }

    pub fn signature(&self) -> String {
        self.body.iter().map(Value::signature).collect()
    }

    /// The whole message on the wire (little-endian).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut body = Enc::default();
        for v in &self.body {
            body.put(v)?;
        }
        let mut fields = Vec::new();
        let mut field = |code: u8, v: Value| {
            fields.push(Value::Struct(vec![Value::Byte(code), Value::variant(v)]))
        };
        if let Some(p) = &self.path {
            field(F_PATH, Value::Path(p.clone()));
        }
        if let Some(s) = &self.interface {
            field(F_INTERFACE, Value::str(s));
        }
        if let Some(s) = &self.member {
            field(F_MEMBER, Value::str(s));
        }
        if let Some(s) = &self.error_name {
            field(F_ERROR_NAME, Value::str(s));
        }
        if let Some(s) = self.reply_serial {
            field(F_REPLY_SERIAL, Value::U32(s));
        }
        if let Some(s) = &self.destination {
            field(F_DESTINATION, Value::str(s));
        }
        if let Some(s) = &self.sender {
            field(F_SENDER, Value::str(s));
        }
        let sig = self.signature();
        if !sig.is_empty() {
            field(F_SIGNATURE, Value::Sig(sig));
        }
        let mut h = Enc::default();
        h.buf.extend_from_slice(&[b'l', self.kind, self.flags, 1]);
        h.u32(body.buf.len() as u32);
        h.u32(self.serial);
        h.put(&Value::Array("(yv)".into(), fields))?;
        h.pad(8);
        h.buf.extend_from_slice(&body.buf);
        if h.buf.len() > MAX_MESSAGE {
            return Err(proto("message too large"));
        }
        Ok(h.buf)
    }

    /// Length of the whole message whose first 16 bytes are `head`.
    pub fn total_len(head: &[u8; 16]) -> Result<usize> {
        let big = match head[0] {
            b'l' => false,
            b'B' => true,
            c => return Err(proto(format!("bad endianness byte {c:#x}"))),
        };
        let rd = |b: &[u8]| {
            let a: [u8; 4] = b.try_into().expect("4");
            if big {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }
        };
        let body = rd(&head[4..8]) as usize;
        let fields = rd(&head[12..16]) as usize;
        let total = (16 + fields).div_ceil(8) * 8 + body;
        if total > MAX_MESSAGE {
            return Err(proto(format!("message of {total} bytes is too large")));
        }
        Ok(total)
    }

    pub fn decode(buf: &[u8]) -> Result<Message> {
        if buf.len() < 16 {
            return Err(proto("message shorter than its header"));
        }
        let head: &[u8; 16] = buf[..16].try_into().expect("16");
        if Message::total_len(head)? != buf.len() {
            return Err(proto("message length does not match its header"));
        }
        if buf[3] != 1 {
            return Err(proto(format!("protocol version {}", buf[3])));
        }
        let mut d = Dec {
            buf,
            pos: 4,
            big: buf[0] == b'B',
        };
        let body_len = d.u32()? as usize;
        let mut m = Message {
            kind: buf[1],
            flags: buf[2],
            serial: d.u32()?,
            ..Message::default()
        };
        let Value::Array(_, fields) = d.get("a(yv)", 0)? else {
            unreachable!()
        };
        let mut sig = String::new();
        for f in fields {
            let Value::Struct(mut f) = f else {
                unreachable!()
            };
            let (Some(Value::Variant(v)), Some(Value::Byte(code))) = (f.pop(), f.pop()) else {
                unreachable!()
            };
            let s = || v.as_str().map(String::from);
            match code {
                F_PATH => m.path = s(),
                F_INTERFACE => m.interface = s(),
                F_MEMBER => m.member = s(),
                F_ERROR_NAME => m.error_name = s(),
                F_REPLY_SERIAL => m.reply_serial = v.as_u32(),
                F_DESTINATION => m.destination = s(),
                F_SENDER => m.sender = s(),
                F_SIGNATURE => sig = s().unwrap_or_default(),
                _ => {}
            }
        }
        d.align(8)?;
        if buf.len() - d.pos != body_len {
            return Err(proto("body length does not match the header"));
        }
        let start = d.pos;
        // Decode the body with offsets counted from the body start (it is 8-aligned).
        let mut b = Dec {
            buf: &buf[start..],
            pos: 0,
            big: d.big,
        };
        m.body = b.get_all(&sig)?;
        if b.pos != body_len {
            return Err(proto("body has bytes beyond its signature"));
        }
        Ok(m)
    }
}

// ------------------------------------------------------------------ connection

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
        let dest = if self.bus { Some(destination) } else { None };
        let s = self.send(Message::method_call(dest, path, interface, member, body))?;
        self.reply(s, member)
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
