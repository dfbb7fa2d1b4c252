//! The v2 freezer (cgroup.freeze, cgroup.events' `frozen`).

use std::path::Path;

use crate::v1::freezer::FREEZE_TIMEOUT;
use crate::{fs, Error, FreezerState, Result};

fn frozen(dir: &Path) -> Result<bool> {
    let ev = fs::read_at(dir, "cgroup.events")?;
    let frozen = fs::flat_keyed(&ev).any(|(k, v)| k == "frozen" && v == 1);
    Ok(frozen)
}

/// Whether `dir` is frozen or being frozen: its cgroup.freeze is 1, or an ancestor's freeze
/// reached it (cgroup.events "frozen 1"); either way a process joining it stops.
pub(crate) fn freeze_requested(dir: &Path) -> Result<bool> {
    Ok(fs::read_at(dir, "cgroup.freeze")?.trim() == "1" || frozen(dir)?)
}

pub(crate) fn freeze(dir: &Path) -> Result<()> {
    set_freeze(dir, true)
}

pub(crate) fn thaw(dir: &Path) -> Result<()> {
    set_freeze(dir, false)
}

fn set_freeze(dir: &Path, on: bool) -> Result<()> {
    let p = dir.join("cgroup.freeze");
    if let Err(e) = fs::write(&p, if on { b"1" } else { b"0" }) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Err(Error::Invalid(format!(
                "{}: no cgroup.freeze (cgroup v2 freezer needs Linux 5.2+)",
                dir.display()
            )));
        }
        return Err(fs::io_err(p, e));
    }
    let ok = fs::wait_until(FREEZE_TIMEOUT, |_| Ok(()), || Ok(frozen(dir)? == on))?;
    if ok {
        return Ok(());
    }
    if on {
        let _ = fs::write(&p, b"0");
    }
    Err(Error::Invalid(format!(
        "{} {} timed out after {:?}",
        if on { "freezing" } else { "thawing" },
        dir.display(),
        FREEZE_TIMEOUT
    )))
}

pub(crate) fn state(dir: &Path) -> Result<FreezerState> {
    Ok(if frozen(dir)? {
        FreezerState::Frozen
    } else {
        FreezerState::Thawed
    })
}
