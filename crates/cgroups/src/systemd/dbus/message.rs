//! A whole D-Bus message: the 12-byte fixed header, the header fields as `a(yv)`, padding to
//! 8, then the body; [`Message::total_len`] frames a message from its first 16 bytes and
//! [`Message::decode`] checks every length against the buffer it is given.

use super::wire::{Dec, Enc};
use super::{proto, Result, Value, MAX_MESSAGE, METHOD_CALL};

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
