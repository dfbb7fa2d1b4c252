//! One file per command (runc's names); each has its flags (a clap `Args` struct) and a
//! `run` that calls the runtime library and returns the exit status.

use std::io::Write;

use sprout_runtime::{Error, Result};

pub mod checkpoint;
pub mod create;
pub mod delete;
pub mod events;
pub mod exec;
pub mod features;
pub mod kill;
pub mod list;
pub mod pause;
pub mod ps;
pub mod run;
pub mod serve;
pub mod spec;
pub mod start;
pub mod state;
pub mod update;

pub fn print_json(v: &serde_json::Value) -> Result<()> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Error::msg(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
    Ok(())
}
