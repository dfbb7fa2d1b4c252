//! Process attributes applied inside a container's init (and inside `exec`'d processes), just
//! before execve. Everything here runs in a single-threaded child after clone(2).
//!
//! INTERFACE CONTRACT (used by sprout-runtime; keep these signatures stable):
//!
//! Order the runtime calls them in the child:
//!   1. `check_lsm` in the parent, at validation time (clear error if the LSM is not active).
//!   2. `set_rlimits`, `set_oom_score_adj`, `set_io_priority`, `set_scheduler`, `set_personality`
//!   3. `set_exec_lsm_labels` (apparmor/selinux exec label, takes effect at execve)
//!   4. `finalize_privileges`: bounding-set drop, keepcaps, setgroups/setresgid/setresuid, umask,
//!      capset(effective, permitted, inheritable exactly as given: never more), ambient raise.
//!   5. `set_no_new_privs` when process.noNewPrivileges is true
//!   then the runtime loads seccomp and calls execve.

use oci_spec::runtime::{LinuxCapabilities, LinuxIOPriority, LinuxPersonality, PosixRlimit, Scheduler, User};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config field is invalid: the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// A syscall failed: the message names what was being applied.
    #[error("{what}: {source}")]
    Sys { what: String, source: std::io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn check_lsm(apparmor_profile: Option<&str>, selinux_label: Option<&str>) -> Result<()> {
    let _ = (apparmor_profile, selinux_label);
    unimplemented!()
}
pub fn set_rlimits(rlimits: &[PosixRlimit]) -> Result<()> {
    let _ = rlimits;
    unimplemented!()
}
pub fn set_oom_score_adj(score: i32) -> Result<()> {
    let _ = score;
    unimplemented!()
}
pub fn set_io_priority(prio: &LinuxIOPriority) -> Result<()> {
    let _ = prio;
    unimplemented!()
}
pub fn set_scheduler(sched: &Scheduler) -> Result<()> {
    let _ = sched;
    unimplemented!()
}
pub fn set_personality(p: &LinuxPersonality) -> Result<()> {
    let _ = p;
    unimplemented!()
}
pub fn set_exec_lsm_labels(apparmor_profile: Option<&str>, selinux_label: Option<&str>) -> Result<()> {
    let _ = (apparmor_profile, selinux_label);
    unimplemented!()
}
pub fn finalize_privileges(user: &User, caps: Option<&LinuxCapabilities>) -> Result<()> {
    let _ = (user, caps);
    unimplemented!()
}
pub fn set_no_new_privs() -> Result<()> {
    unimplemented!()
}
