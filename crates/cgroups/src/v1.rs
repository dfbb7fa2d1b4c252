//! cgroup v1 (and hybrid) hierarchy set-up and the v1 freezer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fs::{self, MkdirError};
use crate::{Error, FreezerState, Hier, Manager, Result};

pub(crate) const FREEZE_TIMEOUT: Duration = Duration::from_secs(5);

/// mkdir one hierarchy's leaf; `Ok(false)` when the hierarchy is not mounted.
pub(crate) fn mkdir_hier(h: &Hier, created: &mut Vec<PathBuf>) -> Result<bool> {
    match fs::mkdir_below(&h.base, &h.dir, created) {
        Ok(()) => Ok(true),
        Err(MkdirError::Io(p, e)) => Err(fs::io_err(p, e)),
        Err(MkdirError::BaseMissing) => {
            if h.base == h.mount || !h.mount.exists() {
                Ok(false)
            } else {
                Err(Error::Invalid(format!(
                    "this process's own {} cgroup {} does not exist",
                    h.name,
                    h.base.display()
                )))
            }
        }
    }
}

pub(crate) fn create(m: &mut Manager, created: &mut Vec<PathBuf>) -> Result<()> {
    // On error nothing in `m` changes (the caller rolls back what was created).
    let mut unmounted = Vec::new();
    for (i, h) in m.v1.iter_mut().enumerate() {
        let start = created.len();
        if !mkdir_hier(h, created)? {
            // e.g. /sys/fs/cgroup/cpu missing but /sys/fs/cgroup/cpu,cpuacct mounted.
            let alt = h.alt_mount.take().filter(|a| a.is_dir());
            let Some(alt) = alt else {
                unmounted.push(i);
                continue;
            };
            h.rebase(alt);
            if !mkdir_hier(h, created)? {
                unmounted.push(i);
                continue;
            }
        }
        if h.name == "cpuset" {
            copy_cpuset(&created[start..])?;
        }
    }
    create_unified(m, created);
    let mut i = 0;
    m.v1.retain(|_| {
        i += 1;
        !unmounted.contains(&(i - 1))
    });
    Ok(())
}

/// Hybrid: also the cgroup2 leaf, for process tracking (and cgroup.kill / cgroup.freeze).
/// Best effort: it only tracks processes (a read-only /sys/fs/cgroup/unified, as some nested
/// set-ups have, must not stop the container).
pub(crate) fn create_unified(m: &mut Manager, created: &mut Vec<PathBuf>) {
    let unified_mounted = match &m.unified {
        Some(u) => match mkdir_hier(u, created) {
            Ok(b) => b,
            Err(e) => {
                crate::warn(&format!(
                    "hybrid: not tracking the container in cgroup2: {e}"
                ));
                false
            }
        },
        None => false,
    };
    if !unified_mounted {
        m.unified = None;
    }
}

/// A new v1 cpuset cgroup starts with empty cpuset.cpus/mems, and no task can join it until
/// they are set: copy them from the parent, top-down over the directories we created.
pub(crate) fn copy_cpuset(new_dirs: &[PathBuf]) -> Result<()> {
    for (i, d) in new_dirs.iter().enumerate() {
        let parent = d.parent().unwrap_or(Path::new("/"));
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let mut v = fs::read_at(parent, file)?;
            if v.trim().is_empty() && i == 0 {
                // A parent this create did not make may have been made an instant ago by
                // another container's create (a shared `sprout-test/`), which fills it right
                // after its mkdir: give that a moment rather than fail; it is not ours to fill.
                let mut last = String::new();
                fs::wait_until(
                    std::time::Duration::from_secs(2),
                    |_| Ok(()),
                    || {
                        last = fs::read_at(parent, file)?;
                        Ok(!last.trim().is_empty())
                    },
                )?;
                v = last;
            }
            let v = v.trim();
            if v.is_empty() {
                return Err(Error::Invalid(format!(
                    "cannot initialise {}: parent's {file} is empty",
                    d.display()
                )));
            }
            fs::write_at(d, file, v)?;
        }
    }
    Ok(())
}

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
pub(crate) fn freezer_state(dir: &Path) -> Result<FreezerState> {
    Ok(match read_state(dir)?.as_str() {
        "FROZEN" => FreezerState::Frozen,
        _ => FreezerState::Thawed,
    })
}
