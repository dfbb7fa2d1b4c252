//! `features`: what this runtime implements, as JSON (runtime-spec features.md).

use sprout_runtime::Result;

pub fn run() -> Result<i32> {
    super::print_json(&sprout_runtime::features::features_json())?;
    Ok(0)
}
