//! Process attributes applied inside a container's init (and inside `exec`'d processes), just
//! before execve. Everything here runs in a single-threaded child after clone(2).
//!
//! Used by sprout-runtime only (the container's init and `exec`'d processes); nothing outside
//! this workspace depends on it, so its API changes with the runtime's needs.
//!
//! Order the runtime calls them in the child:
//!   1. `check_lsm` in the parent, at validation time (clear error if the LSM is not active).
//!   2. `set_rlimits`, `set_oom_score_adj`, `set_io_priority`, `set_scheduler`, `set_personality`
//!   3. `set_exec_lsm_labels` (apparmor/selinux exec label, takes effect at execve)
//!   4. `finalize_privileges`: bounding-set drop, keepcaps, setgroups/setresgid/setresuid, umask,
//!      capset(effective, permitted, inheritable exactly as given: never more), ambient raise.
//!   5. `set_no_new_privs` when process.noNewPrivileges is true
//!   then the runtime loads seccomp and calls execve.
//!
//! Parent-side (validation time) helpers, all pure and cheap, so that config errors surface
//! before anything is forked: [`validate_capabilities`], [`unsupported_caps`],
//! [`validate_rlimits`], [`validate_oom_score_adj`], [`validate_io_priority`],
//! [`validate_scheduler`], [`validate_personality`], [`check_lsm`].
//!
//! Every error message is one line that starts with the config field it is about
//! (e.g. `process.capabilities.ambient: CAP_SYS_ADMIN is not in the permitted and inheritable
//! sets`).
//!
//! Nothing in this crate panics; the syscalls used are issued directly (`syscall(2)`) where glibc
//! would otherwise do multi-thread bookkeeping (setresuid & co), so the functions are safe to
//! call in a child created with a raw clone(2).

#![allow(clippy::doc_lazy_continuation)]

use oci_spec::runtime::{
    LinuxCapabilities, LinuxIOPriority, LinuxPersonality, PosixRlimit, Scheduler, User,
};

pub mod caps;
pub mod fdpass;
pub mod identity;
pub mod lsm;
pub mod pidfd;
pub mod procfs;
pub mod rlimits;
pub mod sched;

pub use caps::{
    all_cap_names, cap_from_name, cap_name, cap_number, classify_cap_name, last_cap,
    unraisable_ambient, unsupported_caps, validate_capabilities, CapMasks, CapNameKind,
};
pub use identity::{read_small, set_identity, set_umask, setgroups_allowed};
pub use rlimits::{rlimit_name, validate_rlimits};
pub use sched::{
    personality_flag_from_name, set_oom_score_adj_pid, validate_io_priority,
    validate_oom_score_adj, validate_personality, validate_scheduler,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config field is invalid: the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// A syscall failed: the message names what was being applied.
    #[error("{what}: {source}")]
    Sys {
        what: String,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// `Error::Sys` from the current `errno`.
    pub(crate) fn last_os(what: impl Into<String>) -> Error {
        Error::Sys {
            what: what.into(),
            source: std::io::Error::last_os_error(),
        }
    }
    /// A failed rustix call: the errno it returned (rustix leaves `errno` alone).
    pub(crate) fn sys(what: impl Into<String>, errno: rustix::io::Errno) -> Error {
        Error::Sys {
            what: what.into(),
            source: errno.into(),
        }
    }
    pub(crate) fn invalid(msg: impl Into<String>) -> Error {
        Error::Invalid(msg.into())
    }
}

/// Refuse (in the parent, at validation time) an LSM label the host cannot apply:
/// `process.apparmorProfile` needs AppArmor enabled, `process.selinuxLabel` needs SELinux
/// (selinuxfs mounted at /sys/fs/selinux). Empty strings count as unset.
pub fn check_lsm(apparmor_profile: Option<&str>, selinux_label: Option<&str>) -> Result<()> {
    lsm::check_lsm_at(
        std::path::Path::new("/sys"),
        apparmor_profile,
        selinux_label,
    )
}

/// setrlimit(2) for each entry (validated first: soft <= hard, no duplicate types).
pub fn set_rlimits(rlimits: &[PosixRlimit]) -> Result<()> {
    rlimits::set_rlimits(rlimits)
}

/// Write `process.oomScoreAdj` to /proc/self/oom_score_adj (lowering it needs CAP_SYS_RESOURCE).
pub fn set_oom_score_adj(score: i32) -> Result<()> {
    sched::set_oom_score_adj(score)
}

/// ioprio_set(IOPRIO_WHO_PROCESS, 0, class << 13 | priority).
pub fn set_io_priority(prio: &LinuxIOPriority) -> Result<()> {
    sched::set_io_priority(prio)
}

/// sched_setattr(0, attr, 0) for `process.scheduler` (validated first).
pub fn set_scheduler(sched: &Scheduler) -> Result<()> {
    sched::set_scheduler(sched)
}

/// `process.scheduler` for another process (an `exec`'d one, by the runtime).
pub fn set_scheduler_of(pid: libc::pid_t, sched: &Scheduler) -> Result<()> {
    sched::set_scheduler_of(pid, sched)
}

/// personality(2) for `linux.personality` (domain LINUX / LINUX32 plus known flag names).
pub fn set_personality(p: &LinuxPersonality) -> Result<()> {
    sched::set_personality(p)
}

/// Set the AppArmor exec profile and/or SELinux exec label: they take effect at the next execve.
/// `None` and empty strings are skipped.
pub fn set_exec_lsm_labels(
    apparmor_profile: Option<&str>,
    selinux_label: Option<&str>,
) -> Result<()> {
    lsm::set_exec_lsm_labels(apparmor_profile, selinux_label)
}

/// Drop to the container's credentials: bounding-set drop (while CAP_SETPCAP is still held),
/// PR_SET_KEEPCAPS, setgroups/setresgid/setresuid, PR_SET_KEEPCAPS=0, umask, capset with the
/// effective/permitted/inheritable sets exactly as given, then ambient raise.
/// `caps: None` means every set is empty.
pub fn finalize_privileges(user: &User, caps: Option<&LinuxCapabilities>) -> Result<()> {
    caps::finalize_privileges(user, caps)
}

pub use identity::set_setgroups_hint;

/// prctl(PR_SET_NO_NEW_PRIVS, 1).
pub fn set_no_new_privs() -> Result<()> {
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| Error::sys("process.noNewPrivileges: prctl(PR_SET_NO_NEW_PRIVS)", e))?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod testutil;

#[cfg(test)]
mod tests {
    //! The whole sequence in the runtime's order, then execve, checked from the exec'd process.
    use super::*;
    use crate::testutil::*;
    use oci_spec::runtime::{
        Capabilities, Capability, IOPriorityClass, LinuxCapabilitiesBuilder,
        LinuxIOPriorityBuilder, LinuxPersonalityBuilder, LinuxPersonalityDomain,
        LinuxSchedulerPolicy, PosixRlimitBuilder, PosixRlimitType, SchedulerBuilder, UserBuilder,
    };

    fn set(caps: &[Capability]) -> Capabilities {
        caps.iter().copied().collect()
    }

    fn mask(status: &str, key: &str) -> u64 {
        u64::from_str_radix(&status_field(status, key), 16).unwrap_or(u64::MAX)
    }

    #[test]
    fn full_sequence_non_root_then_exec() {
        let (code, out) = exec_in_child(
            || {
                let s = |e: Error| e.to_string();
                check_lsm(None, None).map_err(s)?;
                set_rlimits(&[PosixRlimitBuilder::default()
                    .typ(PosixRlimitType::RlimitNofile)
                    .soft(100u64)
                    .hard(200u64)
                    .build()
                    .unwrap()])
                .map_err(s)?;
                set_oom_score_adj(999).map_err(s)?;
                set_io_priority(
                    &LinuxIOPriorityBuilder::default()
                        .class(IOPriorityClass::IoprioClassBe)
                        .priority(5)
                        .build()
                        .unwrap(),
                )
                .map_err(s)?;
                set_scheduler(
                    &SchedulerBuilder::default()
                        .policy(LinuxSchedulerPolicy::SchedBatch)
                        .nice(3)
                        .build()
                        .unwrap(),
                )
                .map_err(s)?;
                set_personality(
                    &LinuxPersonalityBuilder::default()
                        .domain(LinuxPersonalityDomain::PerLinux)
                        .build()
                        .unwrap(),
                )
                .map_err(s)?;
                set_exec_lsm_labels(None, None).map_err(s)?;
                let user = UserBuilder::default()
                    .uid(1000u32)
                    .gid(1000u32)
                    .additional_gids(vec![4u32])
                    .build()
                    .unwrap();
                let nb = set(&[Capability::NetBindService]);
                let caps = LinuxCapabilitiesBuilder::default()
                    .bounding(set(&[Capability::NetBindService, Capability::Kill]))
                    .effective(nb.clone())
                    .permitted(nb.clone())
                    .inheritable(nb.clone())
                    .ambient(nb)
                    .build()
                    .unwrap();
                finalize_privileges(&user, Some(&caps)).map_err(s)?;
                set_no_new_privs().map_err(s)?;
                Ok(())
            },
            &[
                "/bin/cat",
                "/proc/self/status",
                "/proc/self/limits",
                "/proc/self/oom_score_adj",
            ],
        );
        assert_eq!(code, 0, "{out}");
        // Non-root after execve: the ambient capability is what survives, in every set.
        let nb = 1u64 << 10;
        assert_eq!(mask(&out, "CapBnd"), nb | 1 << 5, "{out}");
        assert_eq!(mask(&out, "CapAmb"), nb, "{out}");
        assert_eq!(mask(&out, "CapInh"), nb, "{out}");
        assert_eq!(mask(&out, "CapPrm"), nb, "{out}");
        assert_eq!(mask(&out, "CapEff"), nb, "{out}");
        assert_eq!(status_field(&out, "Uid"), "1000\t1000\t1000\t1000");
        assert_eq!(status_field(&out, "Gid"), "1000\t1000\t1000\t1000");
        assert_eq!(status_field(&out, "Groups"), "4");
        assert_eq!(status_field(&out, "NoNewPrivs"), "1");
        let files = out
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        assert_eq!(
            files.split_whitespace().skip(3).collect::<Vec<_>>(),
            ["100", "200", "files"]
        );
        assert_eq!(out.lines().last().unwrap().trim(), "999");
    }

    #[test]
    fn root_with_empty_inheritable_execs_without_inheritable_caps() {
        // CVE-2022-29162 shape: the runtime has inheritable capabilities; the container's
        // process must not, even across execve.
        let (code, out) = exec_in_child(
            || {
                let mut st = caps::capget().map_err(|e| e.to_string())?;
                st.inheritable = st.permitted;
                caps::capset(&st).map_err(|e| e.to_string())?;
                let user = UserBuilder::default().uid(0u32).gid(0u32).build().unwrap();
                let c = set(&[Capability::Kill, Capability::Chown]);
                let caps = LinuxCapabilitiesBuilder::default()
                    .bounding(c.clone())
                    .effective(c.clone())
                    .permitted(c)
                    .inheritable(set(&[]))
                    .ambient(set(&[]))
                    .build()
                    .unwrap();
                finalize_privileges(&user, Some(&caps)).map_err(|e| e.to_string())
            },
            &["/bin/cat", "/proc/self/status"],
        );
        assert_eq!(code, 0, "{out}");
        assert_eq!(mask(&out, "CapInh"), 0, "{out}");
        assert_eq!(mask(&out, "CapAmb"), 0, "{out}");
        assert_eq!(mask(&out, "CapBnd"), 1 | 1 << 5, "{out}");
        // uid 0 execve: permitted = bounding (the kernel's root rule).
        assert_eq!(mask(&out, "CapPrm"), 1 | 1 << 5, "{out}");
        assert_eq!(status_field(&out, "NoNewPrivs"), "0");
    }

    #[test]
    fn no_new_privs_in_child() {
        in_child(|| {
            set_no_new_privs().map_err(|e| e.to_string())?;
            check_eq(
                "NoNewPrivs",
                status_field(&proc_status(), "NoNewPrivs"),
                "1".to_string(),
            )?;
            // SAFETY: prctl with integer arguments.
            let v = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
            check_eq("PR_GET_NO_NEW_PRIVS", v, 1)
        });
    }
}
