//! `pause` and `resume`: freeze and thaw every process of a container.

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::Result;

#[derive(Args)]
pub struct IdArg {
    pub id: String,
}

pub fn pause(store: &Store, a: &IdArg) -> Result<i32> {
    lifecycle::pause(store, &a.id).map(|_| 0)
}

pub fn resume(store: &Store, a: &IdArg) -> Result<i32> {
    lifecycle::resume(store, &a.id).map(|_| 0)
}
