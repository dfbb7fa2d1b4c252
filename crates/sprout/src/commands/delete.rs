//! `delete`: remove a stopped container (`--force`: kill it first).

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::Result;

#[derive(Args)]
pub struct DeleteArgs {
    #[arg(short = 'f', long)]
    pub force: bool,
    pub id: String,
}

pub fn run(store: &Store, a: &DeleteArgs, trace: &mut Trace) -> Result<i32> {
    lifecycle::delete(store, &a.id, a.force, trace)?;
    trace.emit("delete", &a.id);
    Ok(0)
}
