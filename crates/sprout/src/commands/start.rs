//! `start`: start a created container.

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::Result;

#[derive(Args)]
pub struct StartArgs {
    pub id: String,
}

pub fn run(store: &Store, a: &StartArgs, trace: &mut Trace) -> Result<i32> {
    lifecycle::start(store, &a.id, trace)?;
    trace.emit("start", &a.id);
    Ok(0)
}
