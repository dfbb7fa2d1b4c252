//! The three cgroup drivers behind [`Manager`]: cgroupfs on v1 (and hybrid) hosts, cgroupfs on
//! pure v2, and systemd (which delegates to the cgroupfs driver of the host's layout for what
//! systemd leaves to it).
//!
//! [`Manager`] holds the container's hierarchies and what `create` made (serialized into
//! state.json); [`Manager::backend`] picks the driver from the layout and `--systemd-cgroup`
//! on every call, so a Manager loaded from state.json drives its cgroup with the same driver
//! that created it. Operations that read the same files on every driver (`pids`, `kill_all`,
//! `sub_cgroup`) stay on [`Manager`] and ask the driver only for its [`Freezer`].
//!
//! Resources are written by one file per controller per cgroupfs driver (`v1/<controller>.rs`,
//! `v2/<controller>.rs`), each with an `apply`; the driver's `CONTROLLERS` list fixes their
//! order.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::{Error, FreezerState, Manager, OomEvents, Result, Stats};

pub(crate) trait Backend: Sync {
    /// Make the container's cgroup. With `refuse_frozen` (the runtime's `create_for`) a
    /// cgroup that existed already must be empty and not frozen (runc's checks). On failure
    /// nothing this call made is left.
    fn create(&self, m: &mut Manager, refuse_frozen: bool) -> Result<()>;

    /// Write the resources.
    fn apply(&self, m: &Manager, res: &LinuxResources) -> Result<()>;

    /// Move `pid` into the container's cgroup (cgroupfs: its cgroup.procs in every hierarchy).
    fn add_pid(&self, m: &Manager, pid: i32) -> Result<()> {
        crate::cgroupfs::add_pid(m, pid)
    }

    /// Remove what `create` made, killing nothing (cgroupfs: rmdir, deepest first).
    fn destroy(&self, m: &Manager) -> Result<()> {
        crate::cgroupfs::destroy(m)
    }

    /// Which freezer holds the container.
    fn freezer<'m>(&self, m: &'m Manager) -> Freezer<'m>;

    /// Resource usage.
    fn stats(&self, m: &Manager) -> Result<Stats>;

    /// OOM notifications of the container's memory cgroup.
    fn oom_events(&self, m: &Manager) -> Result<OomEvents>;

    /// Whether a child can be cloned straight into the leaf (CLONE_INTO_CGROUP): pure v2, and
    /// the cgroup exists already.
    fn clone_into(&self, m: &Manager) -> bool;
}

/// The freezer a driver uses: the v1 freezer hierarchy's directory, or the cgroup2 leaf.
#[derive(Clone, Copy)]
pub(crate) enum Freezer<'a> {
    V1(&'a Path),
    V2(&'a Path),
    None,
}

impl Freezer<'_> {
    pub(crate) fn freeze(self) -> Result<()> {
        match self {
            Freezer::V1(d) => crate::v1::freezer::freeze(d),
            Freezer::V2(d) => crate::v2::freezer::freeze(d),
            Freezer::None => Err(Error::Invalid(
                "cannot freeze: no freezer cgroup (v1 freezer not mounted, no cgroup2 leaf)".into(),
            )),
        }
    }

    pub(crate) fn thaw(self) -> Result<()> {
        match self {
            Freezer::V1(d) => crate::v1::freezer::thaw(d),
            Freezer::V2(d) => crate::v2::freezer::thaw(d),
            Freezer::None => Err(Error::Invalid(
                "cannot thaw: no freezer cgroup (v1 freezer not mounted, no cgroup2 leaf)".into(),
            )),
        }
    }

    /// Thawed when there is no freezer at all.
    pub(crate) fn state(self) -> Result<FreezerState> {
        match self {
            Freezer::V1(d) => crate::v1::freezer::state(d),
            Freezer::V2(d) => crate::v2::freezer::state(d),
            Freezer::None => Ok(FreezerState::Thawed),
        }
    }
}
