//! `spec`: write a default config.json (`--rootless`: one for an unprivileged user).

use std::path::PathBuf;

use clap::Args;
use sprout_runtime::{Error, Result};

#[derive(Args)]
pub struct SpecArgs {
    #[arg(short = 'b', long, default_value = ".")]
    pub bundle: PathBuf,
    #[arg(long)]
    pub rootless: bool,
}

pub fn run(a: &SpecArgs) -> Result<i32> {
    let path = a.bundle.join("config.json");
    if path.exists() {
        return Err(Error::msg(format!(
            "{}: already exists, remove it first",
            path.display()
        )));
    }
    let s = serde_json::to_string_pretty(&sprout_runtime::spec_default::default_spec(a.rootless))
        .unwrap_or_default();
    std::fs::write(&path, s + "\n").map_err(|e| Error::os(path.display(), e))?;
    Ok(0)
}
