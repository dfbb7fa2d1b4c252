//! User identity: supplementary groups, gid, uid, umask.
//!
//! setgroups/setresgid/setresuid are issued as raw syscalls: they change only the calling
//! thread, which is what a single-threaded container child wants, and they do not depend on
//! glibc's thread list (stale after a raw clone(2)).

use oci_spec::runtime::User;

use crate::{Error, Result};

/// Whether setgroups(2) may be used: false when /proc/self/setgroups says "deny" (a user
/// namespace whose gid map was written without setgroups permission). An unreadable file
/// (no /proc, kernel < 3.19) counts as allowed.
pub fn setgroups_allowed() -> bool {
    match SETGROUPS_HINT.load(std::sync::atomic::Ordering::Relaxed) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    let mut buf = [0u8; 16];
    match read_small(c"/proc/self/setgroups", &mut buf) {
        Some(s) => !s.starts_with(b"deny"),
        None => true,
    }
}

/// 0: read /proc/self/setgroups; 1: allowed; 2: denied.
static SETGROUPS_HINT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Tell [`setgroups_allowed`] the answer instead of reading /proc/self/setgroups: for a process
/// whose /proc/self doesn't resolve (`exec`'s helper stays in the host's pid namespace while it
/// is in the container's mount namespace, so the container's /proc has no entry for it).
pub fn set_setgroups_hint(allowed: bool) {
    SETGROUPS_HINT.store(
        if allowed { 1 } else { 2 },
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// One read(2) of at most `buf.len()` bytes from `path`, without allocating: for small procfs
/// files that one read returns whole (a buffer of their full size). rustix's open: libc's may
/// add an fcntl after O_CLOEXEC (musl). None when the file cannot be opened or read.
pub fn read_small<'a>(path: &std::ffi::CStr, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    use rustix::fs::{Mode, OFlags};
    // The fd is closed when `fd` drops.
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let n = rustix::io::read(&fd, &mut *buf).ok()?;
    Some(&buf[..n])
}

/// Config checks done before anything is changed. Returns whether setgroups is allowed.
pub(crate) fn precheck(user: &User) -> Result<bool> {
    let allowed = setgroups_allowed();
    let gids = user.additional_gids().as_deref().unwrap_or(&[]);
    if !gids.is_empty() && !allowed {
        return Err(Error::invalid(
            "process.user.additionalGids: setgroups is denied in this user namespace (/proc/self/setgroups is \"deny\")",
        ));
    }
    if let Some(m) = user.umask() {
        if m > 0o777 {
            return Err(Error::invalid(format!(
                "process.user.umask: {m:#o} is not a valid umask"
            )));
        }
    }
    Ok(allowed)
}

/// setgroups(additionalGids) (skipped when setgroups is denied and none are given; an empty or
/// absent list clears the supplementary groups), setresgid(gid), setresuid(uid).
/// Call with PR_SET_KEEPCAPS set if capabilities must survive a switch away from uid 0.
pub fn set_identity(user: &User) -> Result<()> {
    let allowed = precheck(user)?;
    apply(user, allowed)
}

/// [`set_identity`] after [`precheck`].
pub(crate) fn apply(user: &User, setgroups_allowed: bool) -> Result<()> {
    let gids = user.additional_gids().as_deref().unwrap_or(&[]);
    let (uid, gid) = (user.uid(), user.gid());
    set_ids(uid, gid, setgroups_allowed.then_some(gids)).map_err(|(step, errno)| {
        let what = match step {
            IdStep::Setgroups => format!("process.user.additionalGids: setgroups({gids:?})"),
            IdStep::Setresgid => format!("process.user.gid: setresgid({gid})"),
            IdStep::Setresuid => format!("process.user.uid: setresuid({uid})"),
        };
        Error::Sys {
            what,
            source: std::io::Error::from_raw_os_error(errno),
        }
    })
}

/// The call of [`set_ids`] that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdStep {
    Setgroups,
    Setresgid,
    Setresuid,
}

/// setgroups(`groups`) (skipped when None; `Some(&[])` clears the supplementary groups),
/// setresgid(gid), setresuid(uid), as raw syscalls: the one identity change of the runtime's
/// init ([`set_identity`]) and of sprout-serve's sandboxes. No allocation and no lock (the
/// error is the step and its errno, not a message), so it may run in a child between a raw
/// clone of a multi-threaded process and exec.
pub fn set_ids(
    uid: u32,
    gid: u32,
    groups: Option<&[libc::gid_t]>,
) -> std::result::Result<(), (IdStep, i32)> {
    use rustix::process::{Gid, Uid};
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    if let Some(gids) = groups {
        // SAFETY: pointer/length of a live slice of gid_t (u32); the kernel only reads it.
        // (rustix's set_thread_groups wants a &[Gid], which a &[u32] is not without a copy.)
        let r = unsafe {
            libc::syscall(
                libc::SYS_setgroups,
                gids.len() as libc::size_t,
                gids.as_ptr(),
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err((IdStep::Setgroups, e));
        }
    }
    // The raw per-thread syscalls (not libc's all-thread setresgid/setresuid). The _unchecked
    // forms take -1 ("unchanged") as the raw syscall did.
    let gid = Gid::from_raw_unchecked(gid);
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(|e| (IdStep::Setresgid, errno(e)))?;
    let uid = Uid::from_raw_unchecked(uid);
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(|e| (IdStep::Setresuid, errno(e)))?;
    Ok(())
}

/// umask(process.user.umask), or 0022 when unset (runc's behaviour).
pub fn set_umask(user: &User) {
    let m = user.umask().unwrap_or(0o022) & 0o777;
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(m));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use oci_spec::runtime::UserBuilder;

    #[test]
    fn setgroups_allowed_on_host() {
        // The initial user namespace always allows setgroups.
        assert!(setgroups_allowed());
    }

    #[test]
    fn bad_umask_is_rejected() {
        let user = UserBuilder::default().umask(0o1777u32).build().unwrap();
        assert_eq!(
            precheck(&user).unwrap_err().to_string(),
            "process.user.umask: 0o1777 is not a valid umask"
        );
    }

    #[test]
    fn identity_change_in_child() {
        in_child(|| {
            let user = UserBuilder::default()
                .uid(2000u32)
                .gid(3000u32)
                .additional_gids(vec![3001u32, 10])
                .build()
                .unwrap();
            set_identity(&user).map_err(|e| e.to_string())?;
            let st = proc_status();
            check_eq(
                "Uid",
                status_field(&st, "Uid"),
                "2000\t2000\t2000\t2000".to_string(),
            )?;
            check_eq(
                "Gid",
                status_field(&st, "Gid"),
                "3000\t3000\t3000\t3000".to_string(),
            )?;
            check_eq("Groups", status_field(&st, "Groups"), "10 3001".to_string())?;
            // Without PR_SET_KEEPCAPS, leaving uid 0 clears the capability sets.
            check_eq(
                "CapEff",
                status_field(&st, "CapEff"),
                "0000000000000000".to_string(),
            )?;
            check_eq(
                "CapPrm",
                status_field(&st, "CapPrm"),
                "0000000000000000".to_string(),
            )?;
            Ok(())
        });
    }

    #[test]
    fn identity_change_without_privilege_fails_naming_field() {
        in_child(|| {
            let user = UserBuilder::default()
                .uid(2000u32)
                .gid(2000u32)
                .build()
                .unwrap();
            set_identity(&user).map_err(|e| e.to_string())?;
            let user = UserBuilder::default()
                .uid(0u32)
                .gid(2000u32)
                .additional_gids(vec![1u32])
                .build()
                .unwrap();
            let e = set_identity(&user).unwrap_err().to_string();
            if !e.starts_with("process.user.additionalGids: setgroups([1]): ") {
                return Err(format!("unexpected error: {e}"));
            }
            let user = UserBuilder::default()
                .uid(0u32)
                .gid(2000u32)
                .build()
                .unwrap();
            let e = set_identity(&user).unwrap_err().to_string();
            if !e.starts_with("process.user.additionalGids: setgroups([]): ") {
                return Err(format!("unexpected error: {e}"));
            }
            Ok(())
        });
    }

    /// In the child: a new user namespace mapping uid/gid 0 to the outer 0, with setgroups denied
    /// (what a rootless runtime gets).
    fn enter_userns_setgroups_denied() -> std::result::Result<(), String> {
        // SAFETY: unshare in a single-threaded child.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            return Err(format!(
                "unshare(CLONE_NEWUSER): {}",
                std::io::Error::last_os_error()
            ));
        }
        std::fs::write("/proc/self/setgroups", "deny").map_err(|e| format!("setgroups: {e}"))?;
        std::fs::write("/proc/self/uid_map", "0 0 1").map_err(|e| format!("uid_map: {e}"))?;
        std::fs::write("/proc/self/gid_map", "0 0 1").map_err(|e| format!("gid_map: {e}"))?;
        Ok(())
    }

    #[test]
    fn setgroups_denied_in_userns() {
        in_child(|| {
            enter_userns_setgroups_denied()?;
            check_eq("setgroups_allowed", setgroups_allowed(), false)?;
            let user = UserBuilder::default()
                .uid(0u32)
                .gid(0u32)
                .additional_gids(vec![0u32])
                .build()
                .unwrap();
            let e = crate::finalize_privileges(&user, None)
                .unwrap_err()
                .to_string();
            check_eq(
                "error",
                e,
                "process.user.additionalGids: setgroups is denied in this user namespace (/proc/self/setgroups is \"deny\")"
                    .to_string(),
            )?;
            // Without additionalGids setgroups is skipped and the rest goes through.
            let before = status_field(&proc_status(), "Groups");
            let user = UserBuilder::default().uid(0u32).gid(0u32).build().unwrap();
            crate::finalize_privileges(&user, None).map_err(|e| e.to_string())?;
            let st = proc_status();
            check_eq("Groups", status_field(&st, "Groups"), before)?;
            check_eq(
                "CapEff",
                status_field(&st, "CapEff"),
                "0000000000000000".to_string(),
            )?;
            check_eq(
                "CapBnd",
                status_field(&st, "CapBnd"),
                "0000000000000000".to_string(),
            )
        });
    }

    #[test]
    fn umask_default_and_explicit() {
        in_child(|| {
            // SAFETY: umask(2) takes an integer and always succeeds; this forked child's alone.
            unsafe { libc::umask(0o000) };
            set_umask(&UserBuilder::default().build().unwrap());
            check_eq("default umask", current_umask(), 0o022)?;
            set_umask(&UserBuilder::default().umask(0o007u32).build().unwrap());
            check_eq("explicit umask", current_umask(), 0o007)?;
            Ok(())
        });
    }
}
