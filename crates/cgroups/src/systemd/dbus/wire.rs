//! Marshalling of D-Bus values (D-Bus specification, "Type System" and "Marshaling"):
//! signatures, the little-endian encoder [`Enc`] and the decoder [`Dec`] (either byte order).
//! Every value is aligned to its natural alignment counted from the start of the buffer.

use super::{proto, Result, Value, MAX_DEPTH};

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
    pub(super) fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    pub(super) fn u32(&mut self, v: u32) {
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

pub(super) struct Dec<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    /// Big-endian message (`B`); values are turned little-endian as they are read.
    pub big: bool,
}

impl<'a> Dec<'a> {
    pub fn align(&mut self, a: usize) -> Result<()> {
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

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.fixed::<4>()?))
    }

    fn text(&mut self, len: usize) -> Result<String> {
        let s = self.take(len + 1)?;
        if s[len] != 0 {
            return Err(proto("string not NUL-terminated"));
        }
        String::from_utf8(s[..len].to_vec()).map_err(|_| proto("string is not UTF-8"))
    }

    pub fn get(&mut self, t: &str, depth: usize) -> Result<Value> {
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
    pub fn get_all(&mut self, mut sig: &str) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        while !sig.is_empty() {
            let (t, rest) = split_type(sig)?;
            out.push(self.get(t, 0)?);
            sig = rest;
        }
        Ok(out)
    }
}
