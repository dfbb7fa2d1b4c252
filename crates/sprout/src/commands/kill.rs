//! `kill`: send a signal to the container's init (default SIGTERM), or with `--all` to every
//! process of its cgroup.

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::Result;

#[derive(Args)]
pub struct KillArgs {
    #[arg(short = 'a', long)]
    pub all: bool,
    pub id: String,
    pub signal: Option<String>,
}

pub fn run(store: &Store, a: &KillArgs) -> Result<i32> {
    let sig = lifecycle::parse_signal(a.signal.as_deref().unwrap_or("SIGTERM"))?;
    lifecycle::kill(store, &a.id, sig, a.all)?;
    Ok(0)
}
