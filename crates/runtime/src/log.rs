//! `--log FILE` / `--log-format text|json` / `--debug`. containerd's shim reads the last JSON
//! error line of the log file to explain a failed runtime command, so errors always go there too.

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

#[derive(Clone, Debug)]
pub struct LogConfig {
    pub file: Option<PathBuf>,
    pub json: bool,
    pub debug: bool,
}

static LOG: OnceLock<LogConfig> = OnceLock::new();

pub fn init(cfg: LogConfig) {
    let _ = LOG.set(cfg);
}

fn line(cfg: &LogConfig, level: &str, msg: &str) -> String {
    if cfg.json {
        format!(
            "{{\"level\":\"{level}\",\"msg\":{},\"time\":\"{}\"}}\n",
            serde_json::Value::from(msg),
            crate::sys::now_rfc3339()
        )
    } else {
        format!(
            "time=\"{}\" level={level} msg={:?}\n",
            crate::sys::now_rfc3339(),
            msg
        )
    }
}

fn write(level: &str, msg: &str) {
    let Some(cfg) = LOG.get() else { return };
    let Some(path) = &cfg.file else { return };
    let line = line(cfg, level, msg);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

pub fn error(msg: &str) {
    write("error", msg);
}

pub fn warn(msg: &str) {
    write("warning", msg);
    if LOG.get().is_none_or(|c| c.file.is_none()) {
        eprintln!("sprout: warning: {msg}");
    }
}

/// A debug line (`--debug`): to the `--log` file, or without one to stderr in the same format
/// (as runc, whose debug lines go where its log goes).
pub fn debug(msg: impl FnOnce() -> String) {
    let Some(cfg) = LOG.get().filter(|c| c.debug) else {
        return;
    };
    let m = msg();
    if cfg.file.is_some() {
        write("debug", &m);
    } else {
        eprint!("{}", line(cfg, "debug", &m));
    }
}
