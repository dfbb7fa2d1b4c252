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
//!
//! Layout, one file per concern: this file holds the data model shared by all ([`Value`], the
//! message types, [`Error`]); [`wire`] the marshalling of values (signatures, [`Enc`], the
//! decoder `Dec`); [`message`] a whole message (fixed header, header fields, body) on top of
//! it; [`conn`] the transport (addresses, SASL authentication, [`Conn`]: calls, replies,
//! signals). The systemd method calls themselves live in the parent module (systemd/mod.rs).

mod conn;
mod message;
mod wire;

#[cfg(test)]
pub(crate) use conn::auth_lines;
pub(crate) use conn::{parse_address, Addr, Conn};
pub(crate) use message::Message;
#[cfg(test)]
pub(crate) use wire::{split_type, Enc};

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

/// The decoder on hostile bytes, for `fuzz/fuzz_targets/dbus_decode.rs` and the randomized test
/// in systemd/tests.rs (a reply from the bus is input sprout does not control). Frames `data`
/// as [`Conn::read_message`] does (the length from the first 16 bytes), decodes it, and when it
/// decodes checks the round trip: a message that re-encodes decodes again to the same bytes.
/// Returns whether `data` is one valid message. Panics only on a bug: a panic or an
/// out-of-bounds read (which in Rust is a panic) in the decoder, or a broken round trip.
pub fn check_decode(data: &[u8]) -> bool {
    if let Some(head) = data.first_chunk::<16>() {
        // Framing a prefix must agree with decoding the whole.
        if let Ok(n) = Message::total_len(head) {
            if n != data.len() {
                assert!(
                    Message::decode(data).is_err(),
                    "length {n} != {}",
                    data.len()
                );
                return false;
            }
        }
    }
    let Ok(m) = Message::decode(data) else {
        return false;
    };
    // Strings with a NUL byte, header fields of the wrong type (dropped) and the like cannot
    // be written back; everything that can must read back as itself.
    if let Ok(enc) = m.encode() {
        let again = Message::decode(&enc)
            .unwrap_or_else(|e| panic!("re-encoded message does not decode: {e}"));
        assert_eq!(again.encode().ok().as_deref(), Some(&enc[..]), "round trip");
    }
    true
}
