//! The v1 freezer (`freezer.state`).

use std::path::Path;
use std::time::Duration;

use crate::{fs, Error, FreezerState, Result};

/// How long a freeze or thaw may take (v1 and v2).
pub(crate) const FREEZE_TIMEOUT: Duration = Duration::from_secs(5);

/// freezer.state as the kernel reports it: THAWED, FREEZING or FROZEN.
pub(crate) fn read_state(dir: &Path) -> Result<String> {
    Ok(fs::read_at(dir, "freezer.state")?.trim().to_string())
}

/// Write `want` to freezer.state and wait until the kernel reports it, writing it again every
/// 16th poll: a freeze can get stuck in FREEZING when a task forks at the wrong moment, and
/// asking again moves it along (as runc does). `Err(last state seen)` when the wait times out.
fn set_state(dir: &Path, want: &str) -> Result<std::result::Result<(), String>> {
    fs::write_at(dir, "freezer.state", want)?;
    let mut last = String::new();
    let ok = fs::wait_until(
        FREEZE_TIMEOUT,
        |i| {
            if i % 16 == 0 {
                fs::write_at(dir, "freezer.state", want)
            } else {
                Ok(())
            }
        },
        || {
            last = read_state(dir)?;
            Ok(last == want)
        },
    )?;
    Ok(if ok { Ok(()) } else { Err(last) })
}

pub(crate) fn freeze(dir: &Path) -> Result<()> {
    set_state(dir, "FROZEN")?.map_err(|last| {
        let _ = fs::write_at(dir, "freezer.state", "THAWED");
        Error::Invalid(format!(
            "freezing {} timed out after {:?} (freezer.state {last}); thawed again",
            dir.display(),
            FREEZE_TIMEOUT
        ))
    })
}

pub(crate) fn thaw(dir: &Path) -> Result<()> {
    set_state(dir, "THAWED")?.map_err(|last| {
        Error::Invalid(format!(
            "thawing {} timed out (freezer.state {last})",
            dir.display()
        ))
    })
}

/// FREEZING (a freeze in progress or stuck) reports as Thawed: not every task is stopped.
pub(crate) fn state(dir: &Path) -> Result<FreezerState> {
    Ok(match read_state(dir)?.as_str() {
        "FROZEN" => FreezerState::Frozen,
        _ => FreezerState::Thawed,
    })
}
