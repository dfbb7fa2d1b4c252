//! `ps`: the processes of a container, runc's way.

use std::io::Write;

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::{Error, Result};

#[derive(Args)]
pub struct PsArgs {
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    pub id: String,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub ps_args: Vec<String>,
}

/// runc's ps: `-f json` prints the pids; the table is ps(1)'s own output (`ps -ef` unless
/// options follow the id), its header and the rows whose PID column is one of the container's.
pub fn run(store: &Store, a: &PsArgs) -> Result<i32> {
    let (id, format, ps_args) = (a.id.as_str(), a.format.as_str(), a.ps_args.as_slice());
    if !matches!(format, "table" | "json") {
        return Err(Error::msg(format!(
            "--format {format:?}: expected table or json"
        )));
    }
    let pids = lifecycle::pids(store, id)?;
    if format == "json" {
        let line = serde_json::to_string(&pids).map_err(|e| Error::msg(e.to_string()))?;
        println!("{line}");
        return Ok(0);
    }
    let args: Vec<&str> = if ps_args.is_empty() {
        vec!["-ef"]
    } else {
        ps_args.iter().map(String::as_str).collect()
    };
    let out = std::process::Command::new("ps")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::os("ps: running ps(1)", e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.split_whitespace().collect::<Vec<_>>().join(" ");
        return Err(Error::msg(format!(
            "ps {}: {}: {err}",
            args.join(" "),
            out.status
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let Some(col) = header.split_whitespace().position(|f| f == "PID") else {
        return Err(Error::msg(format!(
            "ps {}: couldn't find PID field in ps output",
            args.join(" ")
        )));
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{header}");
    for line in lines.filter(|l| !l.is_empty()) {
        let pid = line
            .split_whitespace()
            .nth(col)
            .and_then(|f| f.parse::<i32>().ok())
            .ok_or_else(|| Error::msg(format!("ps: unable to parse pid in {line:?}")))?;
        if pids.contains(&pid) {
            let _ = writeln!(stdout, "{line}");
        }
    }
    Ok(0)
}
