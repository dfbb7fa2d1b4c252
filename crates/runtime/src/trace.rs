//! The phase trace: `SPROUT_TRACE=1` (or `--trace`) prints one JSON line per command with each
//! phase's duration in microseconds. When off, a mark is one branch on a bool.

use std::fmt::Write;

use crate::sys::monotonic_us;

pub struct Trace {
    enabled: bool,
    /// Print the JSON line to stderr (`--trace`, SPROUT_TRACE); without it, an enabled trace
    /// only feeds `--debug`'s log line.
    print: bool,
    start: u64,
    last: u64,
    phases: Vec<(&'static str, u64)>,
    /// Phases measured in another process (the container's init), already formatted.
    extra: String,
}

impl Trace {
    pub fn new(enabled: bool) -> Trace {
        let now = if enabled { monotonic_us() } else { 0 };
        Trace {
            enabled,
            print: enabled,
            start: now,
            last: now,
            phases: Vec::new(),
            extra: String::new(),
        }
    }

    pub fn from_env(flag: bool) -> Trace {
        Trace::new(
            flag || std::env::var_os("SPROUT_TRACE").is_some_and(|v| v != "0" && !v.is_empty()),
        )
    }

    /// [`Trace::from_env`], also recording (not printing) when `--debug` asks for the phases in
    /// the log.
    pub fn for_command(flag: bool, debug: bool) -> Trace {
        let t = Trace::from_env(flag);
        if t.enabled || !debug {
            return t;
        }
        Trace {
            print: false,
            ..Trace::new(true)
        }
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Close the current phase under `name`.
    #[inline]
    pub fn mark(&mut self, name: &'static str) {
        if self.enabled {
            let now = monotonic_us();
            self.phases.push((name, now - self.last));
            self.last = now;
        }
    }

    /// Add phases measured elsewhere ("name=us,name=us"), prefixed, e.g. by "init.".
    pub fn add_remote(&mut self, prefix: &str, encoded: &str) {
        if !self.enabled {
            return;
        }
        for item in encoded.split(',').filter(|s| !s.is_empty()) {
            if let Some((k, v)) = item.split_once('=') {
                let _ = write!(self.extra, ",\"{prefix}{k}\":{v}");
            }
        }
    }

    /// Restart the clock for phases that follow a wait we do not want to count.
    pub fn reset_last(&mut self) {
        if self.enabled {
            self.last = monotonic_us();
        }
    }

    pub fn render(&self, cmd: &str, id: &str) -> Option<String> {
        if !self.enabled {
            return None;
        }
        let mut s = String::with_capacity(256);
        let _ = write!(
            s,
            "{{\"sprout_trace\":{{\"cmd\":\"{cmd}\",\"id\":{},\"phases_us\":{{",
            serde_json::Value::from(id)
        );
        for (i, (k, v)) in self.phases.iter().enumerate() {
            let _ = write!(s, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
        }
        s.push_str(&self.extra);
        let _ = write!(
            s,
            "}},\"total_us\":{}}}}}",
            self.last.saturating_sub(self.start)
        );
        Some(s)
    }

    /// Print the trace line to stderr (one line, JSON), and with `--debug` log it as a debug
    /// line (where each microsecond of the command went).
    pub fn emit(&self, cmd: &str, id: &str) {
        if let Some(line) = self.render(cmd, id) {
            if self.print {
                eprintln!("{line}");
            }
            crate::log::debug(|| format!("phases: {line}"));
        }
    }
}

/// A child-side recorder: encodes phases as "name=us,..." to send with the ready message.
pub struct ChildTrace {
    enabled: bool,
    last: u64,
    pub buf: String,
}

impl ChildTrace {
    pub fn new(enabled: bool) -> ChildTrace {
        ChildTrace {
            enabled,
            last: if enabled { monotonic_us() } else { 0 },
            buf: String::new(),
        }
    }
    #[inline]
    pub fn mark(&mut self, name: &str) {
        if self.enabled {
            let now = monotonic_us();
            let _ = write!(self.buf, "{name}={},", now - self.last);
            self.last = now;
        }
    }

    /// A part of the current phase (which still counts it) timed elsewhere: `us` as `name`.
    #[inline]
    pub fn add(&mut self, name: &str, us: u64) {
        if self.enabled {
            let _ = write!(self.buf, "{name}={us},");
        }
    }

    /// Time `f` as `name`, a wait inside the current phase (which still counts it).
    #[inline]
    pub fn waiting<T>(&mut self, name: &str, f: impl FnOnce() -> T) -> T {
        if !self.enabled {
            return f();
        }
        let t0 = monotonic_us();
        let r = f();
        let _ = write!(self.buf, "{name}={},", monotonic_us() - t0);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing() {
        let mut t = Trace::new(false);
        t.mark("a");
        assert!(t.render("create", "x").is_none());
    }

    #[test]
    fn renders_json() {
        let mut t = Trace::new(true);
        t.mark("parse");
        t.mark("clone");
        t.add_remote("init.", "mounts=12,pivot=3,");
        let line = t.render("run", "c\"1").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let p = &v["sprout_trace"]["phases_us"];
        assert!(p["parse"].is_u64() && p["clone"].is_u64());
        assert_eq!(p["init.mounts"], 12);
        assert_eq!(v["sprout_trace"]["id"], "c\"1");
    }
}
