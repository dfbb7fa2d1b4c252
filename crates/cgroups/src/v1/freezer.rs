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

pub(crate) fn freeze(dir: &Path) -> Result<()> {
    fs::write_at(dir, "freezer.state", "FROZEN")?;
    let mut last = String::new();
    let ok = fs::wait_until(
        FREEZE_TIMEOUT,
        // A freeze can get stuck in FREEZING when a task forks at the wrong moment;
        // asking again moves it along (as runc does).
        |i| {
            if i % 16 == 0 {
                fs::write_at(dir, "freezer.state", "FROZEN")
            } else {
                Ok(())
            }
        },
        || {
            last = read_state(dir)?;
            Ok(last == "FROZEN")
        },
    )?;
    if ok {
        return Ok(());
    }
    let _ = fs::write_at(dir, "freezer.state", "THAWED");
    Err(Error::Invalid(format!(
        "freezing {} timed out after {:?} (freezer.state {last}); thawed again",
        dir.display(),
        FREEZE_TIMEOUT
    )))
}

pub(crate) fn thaw(dir: &Path) -> Result<()> {
    fs::write_at(dir, "freezer.state", "THAWED")?;
    let mut last = String::new();
    let ok = fs::wait_until(
        FREEZE_TIMEOUT,
        |i| {
            if i % 16 == 0 {
                fs::write_at(dir, "freezer.state", "THAWED")
            } else {
                Ok(())
            }
        },
        || {
            last = read_state(dir)?;
            Ok(last == "THAWED")
        },
    )?;
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "thawing {} timed out (freezer.state {last})",
            dir.display()
        )))
    }
}

/// FREEZING (a freeze in progress or stuck) reports as Thawed: not every task is stopped.
pub(crate) fn state(dir: &Path) -> Result<FreezerState> {
    Ok(match read_state(dir)?.as_str() {
        "FROZEN" => FreezerState::Frozen,
        _ => FreezerState::Thawed,
    })
}
