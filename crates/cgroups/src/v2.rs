//! cgroup v2 set-up (controller delegation) and the v2 freezer.
//!
//! Exercised for real (tests/v2_private_mount.rs): mkdir/rmdir, cgroup.subtree_control
//! enabling (hugetlb, the one controller free on the dev host's unified hierarchy),
//! `hugetlb.<size>.max`, cgroup.procs, cgroup.freeze + cgroup.events, cgroup.kill, pids/stats
//! reading; memory/cpu/io/pids writers only against the fake tree in unit tests.

use std::path::{Path, PathBuf};

use crate::fs;
use crate::v1::{mkdir_hier, FREEZE_TIMEOUT};
use crate::{Error, FreezerState, Manager, Result};

pub(crate) fn create(m: &mut Manager, created: &mut Vec<PathBuf>) -> Result<()> {
    let Some(u) = m.unified.as_ref() else {
        return Ok(());
    };
    if !mkdir_hier(u, created)? {
        return Err(Error::Invalid(format!(
            "no cgroup2 hierarchy mounted at {}",
            u.mount.display()
        )));
    }
    if created.is_empty() {
        return Ok(()); // joined an existing cgroup: leave its parents alone
    }
    // Delegate every controller the base offers down to the leaf. Only directories from
    // our base (own cgroup, or the root for absolute paths) down are touched.
    let avail = fs::read_at(&u.base, "cgroup.controllers")?;
    let ctrls: Vec<&str> = avail.split_whitespace().collect();
    enable_chain(&u.base, &u.dir, &ctrls);
    Ok(())
}

/// Write "+c1 +c2 .." to cgroup.subtree_control of `base` and every directory between it and
/// `leaf` (exclusive). Failures are tolerated (e.g. EBUSY on an own cgroup that still holds
/// processes): `apply` then reports the missing interface files precisely.
pub(crate) fn enable_chain(base: &Path, leaf: &Path, ctrls: &[&str]) {
    if ctrls.is_empty() {
        return;
    }
    let line: String = ctrls
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut dirs = vec![base.to_path_buf()];
    if let Ok(rest) = leaf.strip_prefix(base) {
        let mut cur = base.to_path_buf();
        let comps: Vec<_> = rest.components().collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            cur.push(c);
            dirs.push(cur.clone());
        }
    }
    for d in dirs {
        let p = d.join("cgroup.subtree_control");
        if fs::write(&p, line.as_bytes()).is_err() && ctrls.len() > 1 {
            for c in ctrls {
                let _ = fs::write(&p, format!("+{c}").as_bytes());
            }
        }
    }
}

fn frozen(dir: &Path) -> Result<bool> {
    let ev = fs::read_at(dir, "cgroup.events")?;
    let frozen = fs::flat_keyed(&ev).any(|(k, v)| k == "frozen" && v == 1);
    Ok(frozen)
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

pub(crate) fn freezer_state(dir: &Path) -> Result<FreezerState> {
    Ok(if frozen(dir)? {
        FreezerState::Frozen
    } else {
        FreezerState::Thawed
    })
}
