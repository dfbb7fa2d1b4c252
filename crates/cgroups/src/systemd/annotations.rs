//! `org.systemd.property.<Name>` annotations: extra properties of the transient unit, as runc
//! takes them (runc's `initSystemdProps`). The value is in GVariant's text format (GLib's
//! `g_variant_parse`, what `systemctl set-property` and `busctl` users write), of which the part
//! unit properties use is read here: numbers with or without a type keyword (`uint64 5`, `5` is
//! an int32, `2.5` a double), `true`/`false`, strings in single or double quotes with backslash
//! escapes, `objectpath '/x'`, and arrays of one such type (`['a', 'b']`, `@as []`). Anything
//! else is refused with the annotation's name rather than left out.
//!
//! The name must be at least 3 ASCII letters. A name ending in a lowercase letter then `Sec`
//! (`RuntimeMaxSec`, `TimeoutStopSec`: the unit-file spelling) becomes the D-Bus `…USec`
//! property with the number of seconds as microseconds (uint64), as runc converts it.

use std::collections::HashMap;

use super::dbus::Value;
use super::props::prop;
use crate::{Error, Result};

const PREFIX: &str = "org.systemd.property.";

/// The unit properties asked for by `annotations`, in key order.
pub(crate) fn properties(annotations: &HashMap<String, String>) -> Result<Vec<Value>> {
    let mut keys: Vec<&String> = annotations
        .keys()
        .filter(|k| k.starts_with(PREFIX))
        .collect();
    keys.sort();
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        let v = &annotations[k];
        let bad = |why: String| Error::Invalid(format!("annotations[{k:?}]: {why}"));
        let name = &k[PREFIX.len()..];
        check_name(name).map_err(|why| bad(format!("property name {name:?} {why}")))?;
        let value = parse(v).map_err(|why| bad(format!("value {v:?}: {why}")))?;
        let (name, value) = match sec_to_usec(name) {
            Some(usec) => (
                usec,
                Value::U64(
                    seconds_as_usec(&value).map_err(|why| bad(format!("value {v:?}: {why}")))?,
                ),
            ),
            None => (name.to_string(), value),
        };
        out.push(prop(&name, value));
    }
    Ok(out)
}

/// runc's rule: at least 3 characters, ASCII letters only.
fn check_name(name: &str) -> std::result::Result<(), &'static str> {
    if name.len() < 3 {
        return Err("is too short");
    }
    if !name.bytes().all(|c| c.is_ascii_alphabetic()) {
        return Err("has a character other than an ASCII letter");
    }
    Ok(())
}

/// `FooSec` (a lowercase letter before `Sec`) → `FooUSec`.
fn sec_to_usec(name: &str) -> Option<String> {
    let stem = name.strip_suffix("Sec")?;
    stem.bytes()
        .last()
        .filter(u8::is_ascii_lowercase)
        .map(|_| format!("{stem}USec"))
}

fn seconds_as_usec(v: &Value) -> std::result::Result<u64, String> {
    const M: u64 = 1_000_000;
    let whole = |n: i128| {
        u64::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(M))
            .ok_or_else(|| format!("{n} seconds is out of range"))
    };
    match v {
        Value::Byte(n) => whole(i128::from(*n)),
        Value::I16(n) => whole(i128::from(*n)),
        Value::U16(n) => whole(i128::from(*n)),
        Value::I32(n) => whole(i128::from(*n)),
        Value::U32(n) => whole(i128::from(*n)),
        Value::I64(n) => whole(i128::from(*n)),
        Value::U64(n) => whole(i128::from(*n)),
        Value::Double(d) if d.is_finite() && *d >= 0.0 && *d * (M as f64) < u64::MAX as f64 => {
            // Truncated to whole microseconds, as runc's uint64(float * 1e6).
            Ok((*d * M as f64) as u64)
        }
        Value::Double(d) => Err(format!("{d} seconds is out of range")),
        _ => Err("not a number (a ...Sec property takes seconds)".into()),
    }
}

/// One value in GVariant text format (the subset in the module docs).
pub(crate) fn parse(s: &str) -> std::result::Result<Value, String> {
    let mut p = Parser {
        s: s.as_bytes(),
        at: 0,
    };
    let v = p.value(None)?;
    p.skip_ws();
    if p.at != p.s.len() {
        return Err(format!("unexpected {:?} after the value", p.rest()));
    }
    Ok(v)
}

/// The type keywords of the text format and the signature each gives.
const KEYWORDS: &[(&str, &str)] = &[
    ("boolean", "b"),
    ("byte", "y"),
    ("int16", "n"),
    ("uint16", "q"),
    ("int32", "i"),
    ("uint32", "u"),
    ("int64", "x"),
    ("uint64", "t"),
    ("double", "d"),
    ("objectpath", "o"),
    ("signature", "g"),
];

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn rest(&self) -> String {
        String::from_utf8_lossy(&self.s[self.at..]).into_owned()
    }

    fn skip_ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    /// A bare word: letters, digits and the characters of a number.
    fn word(&mut self) -> &str {
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || b"+-._".contains(c))
        {
            self.at += 1;
        }
        std::str::from_utf8(&self.s[start..self.at]).unwrap_or("")
    }

    /// A value, of signature `want` where the context says (a keyword, `@type`, an array's
    /// earlier elements).
    fn value(&mut self, want: Option<&str>) -> std::result::Result<Value, String> {
        self.skip_ws();
        match self.s.get(self.at) {
            None => Err("no value".into()),
            Some(b'@') => {
                self.at += 1;
                let ty = self.word().to_string();
                let ty = ty.as_str();
                if !is_supported_type(ty) {
                    return Err(format!("type @{ty} is not supported here"));
                }
                if want.is_some_and(|w| w != ty) {
                    return Err(format!("@{ty} where {} is expected", want.unwrap_or("")));
                }
                self.value(Some(ty))
            }
            Some(b'[') => {
                let elem = match want {
                    Some(w) => Some(
                        w.strip_prefix('a')
                            .ok_or_else(|| format!("an array where {w} is expected"))?
                            .to_string(),
                    ),
                    None => None,
                };
                self.array(elem)
            }
            Some(b'\'' | b'"') => {
                let s = self.string()?;
                match want {
                    None | Some("s") => Ok(Value::Str(s)),
                    Some("o") if s.starts_with('/') => Ok(Value::Path(s)),
                    Some("g") => Ok(Value::Sig(s)),
                    Some(w) => Err(format!("a string where {w} is expected")),
                }
            }
            Some(_) => {
                let w = self.word().to_string();
                if let Some((_, sig)) = KEYWORDS.iter().find(|(k, _)| *k == w) {
                    if want.is_some_and(|x| x != *sig) {
                        return Err(format!("{w} where {} is expected", want.unwrap_or("")));
                    }
                    self.skip_ws();
                    return self.value(Some(sig));
                }
                if w.is_empty() {
                    return Err(format!("unexpected {:?}", self.rest()));
                }
                scalar(&w, want)
            }
        }
    }

    fn array(&mut self, mut elem: Option<String>) -> std::result::Result<Value, String> {
        self.at += 1; // '['
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.s.get(self.at) == Some(&b']') && items.is_empty() {
                self.at += 1;
                break;
            }
            let v = self.value(elem.as_deref())?;
            let sig = v.signature();
            if elem.as_deref().is_some_and(|e| e != sig) {
                return Err("array elements of different types".into());
            }
            elem = Some(sig);
            items.push(v);
            self.skip_ws();
            match self.s.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    break;
                }
                _ => return Err("an array without its closing ]".into()),
            }
        }
        let elem = elem.ok_or("an empty array needs its type (@as [])")?;
        Ok(Value::Array(elem, items))
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let quote = self.s[self.at];
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.at) else {
                return Err("a string without its closing quote".into());
            };
            self.at += 1;
            match c {
                _ if c == quote => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.at) else {
                        return Err("a string ending in a backslash".into());
                    };
                    self.at += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'0' => 0,
                        other => other,
                    });
                }
                _ => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| "a string that is not UTF-8".to_string())
    }
}

/// The element types an `@type` or array may have here.
fn is_supported_type(ty: &str) -> bool {
    let basic = |t: &str| t == "s" || KEYWORDS.iter().any(|(_, s)| *s == t);
    basic(ty) || ty.strip_prefix('a').is_some_and(basic)
}

/// A bare word as `want` (or, untyped: true/false a boolean, an integer an int32, a number
/// with a point or an exponent a double, as GVariant infers them).
fn scalar(w: &str, want: Option<&str>) -> std::result::Result<Value, String> {
    let int = |w: &str| -> std::result::Result<i128, String> {
        let (neg, digits) = match w.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, w.strip_prefix('+').unwrap_or(w)),
        };
        let n = match digits
            .strip_prefix("0x")
            .or_else(|| digits.strip_prefix("0X"))
        {
            Some(h) => i128::from_str_radix(h, 16),
            None => digits.parse::<i128>(),
        }
        .map_err(|_| format!("{w:?} is not a number"))?;
        Ok(if neg { -n } else { n })
    };
    let range = |w: &str, ty: &str| format!("{w} is out of range for {ty}");
    let is_float = |w: &str| {
        !w.starts_with("0x") && (w.contains('.') || w.contains(['e', 'E']))
            || w == "inf"
            || w == "nan"
    };
    match want {
        None => match w {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ if is_float(w) => w
                .parse::<f64>()
                .map(Value::Double)
                .map_err(|_| format!("{w:?} is not a number")),
            _ => i32::try_from(int(w)?)
                .map(Value::I32)
                .map_err(|_| range(w, "int32 (write int64 or uint64 before it)")),
        },
        Some("b") => match w {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(format!("{w:?} is not true or false")),
        },
        Some("d") => w
            .parse::<f64>()
            .map(Value::Double)
            .map_err(|_| format!("{w:?} is not a number")),
        Some("y") => u8::try_from(int(w)?)
            .map(Value::Byte)
            .map_err(|_| range(w, "byte")),
        Some("n") => i16::try_from(int(w)?)
            .map(Value::I16)
            .map_err(|_| range(w, "int16")),
        Some("q") => u16::try_from(int(w)?)
            .map(Value::U16)
            .map_err(|_| range(w, "uint16")),
        Some("i") => i32::try_from(int(w)?)
            .map(Value::I32)
            .map_err(|_| range(w, "int32")),
        Some("u") => u32::try_from(int(w)?)
            .map(Value::U32)
            .map_err(|_| range(w, "uint32")),
        Some("x") => i64::try_from(int(w)?)
            .map(Value::I64)
            .map_err(|_| range(w, "int64")),
        Some("t") => u64::try_from(int(w)?)
            .map(Value::U64)
            .map_err(|_| range(w, "uint64")),
        Some(t) => Err(format!("{w:?} is not a value of type {t}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Result<Vec<(String, Value)>> {
        let a: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(properties(&a)?
            .into_iter()
            .map(|p| match p {
                Value::Struct(f) => match (&f[0], &f[1]) {
                    (Value::Str(k), Value::Variant(v)) => (k.clone(), (**v).clone()),
                    _ => panic!("{f:?}"),
                },
                other => panic!("{other:?}"),
            })
            .collect())
    }

    fn one(k: &str, v: &str) -> std::result::Result<(String, Value), String> {
        props(&[(&format!("{PREFIX}{k}"), v)])
            .map(|mut p| p.remove(0))
            .map_err(|e| e.to_string())
    }

    /// runc's own table (libcontainer/specconv's TestInitSystemdProps), as facts.
    #[test]
    fn runcs_cases() {
        let usec = |n: u64| Ok(("TimeoutStopUSec".to_string(), Value::U64(n)));
        assert_eq!(
            one("TimeoutStopUSec", "uint64 123456789"),
            usec(123_456_789)
        );
        assert_eq!(one("TimeoutStopSec", "456"), usec(456_000_000));
        for ty in [
            "byte", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        ] {
            assert_eq!(
                one("TimeoutStopSec", &format!("{ty} 234")),
                usec(234_000_000),
                "{ty}"
            );
        }
        assert_eq!(one("TimeoutStopSec", "234.789"), usec(234_789_000));
        assert!(one("TimeoutStopSec", "false").is_err());
        assert!(one("TimeoutStopSec", "'covfefe'").is_err());
        assert_eq!(one("FOOSec", "123"), Ok(("FOOSec".into(), Value::I32(123))));
        assert_eq!(one("Sec", "123"), Ok(("Sec".into(), Value::I32(123))));
        assert_eq!(
            one("CollectMode", "'inactive-or-failed'"),
            Ok(("CollectMode".into(), Value::str("inactive-or-failed")))
        );
        assert!(props(&[("some.other.annotation", "0")]).unwrap().is_empty());
        let e = one("Xo", "1").unwrap_err();
        assert!(
            e.contains("org.systemd.property.Xo") && e.contains("too short"),
            "{e}"
        );
        let e = one("Number1", "1").unwrap_err();
        assert!(e.contains("Number1") && e.contains("ASCII letter"), "{e}");
        let e = one("ValidName", "invalid-value").unwrap_err();
        assert!(
            e.contains("ValidName") && e.contains("invalid-value"),
            "{e}"
        );
    }

    #[test]
    fn text_format() {
        assert_eq!(parse("true"), Ok(Value::Bool(true)));
        assert_eq!(parse("boolean false"), Ok(Value::Bool(false)));
        assert_eq!(parse(" -5 "), Ok(Value::I32(-5)));
        assert_eq!(parse("uint64 0x10"), Ok(Value::U64(16)));
        assert_eq!(parse("double 2"), Ok(Value::Double(2.0)));
        assert_eq!(parse("\"a\\\"b\""), Ok(Value::str("a\"b")));
        assert_eq!(parse("objectpath '/x/y'"), Ok(Value::Path("/x/y".into())));
        assert_eq!(
            parse("['a.service', \"b.service\"]"),
            Ok(Value::Array(
                "s".into(),
                vec![Value::str("a.service"), Value::str("b.service")]
            ))
        );
        assert_eq!(
            parse("[uint32 1, 2]"),
            Ok(Value::Array("u".into(), vec![Value::U32(1), Value::U32(2)]))
        );
        assert_eq!(parse("@as []"), Ok(Value::Array("s".into(), vec![])));
        assert_eq!(
            parse("@at [1, 2]"),
            Ok(Value::Array("t".into(), vec![Value::U64(1), Value::U64(2)]))
        );
        for bad in [
            "",
            "[]",
            "['a', 1]",
            "'open",
            "uint8 1",
            "byte 256",
            "uint64 -1",
            "3000000000",
            "1 2",
            "{'a': 1}",
            "@a{ss} {}",
            "[1, 2",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed: {:?}", parse(bad));
        }
    }
}
