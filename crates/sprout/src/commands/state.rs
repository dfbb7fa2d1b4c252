//! `state`: print the state of a container as JSON.

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::Result;

#[derive(Args)]
pub struct StateArgs {
    pub id: String,
}

pub fn run(store: &Store, a: &StateArgs) -> Result<i32> {
    super::print_json(&lifecycle::state_json(store, &a.id)?)?;
    Ok(0)
}
