//! The state directory: `--root`, or runc's default for this process.

use std::path::PathBuf;

use sprout_runtime::{Error, Result};

/// Where state lives without `--root`, runc's rule (main.go, shouldHonorXDGRuntimeDir) with
/// sprout's name: `$XDG_RUNTIME_DIR/sprout` when rootless (a non-root euid, or euid 0 in a
/// user namespace unless `$USER` is "root") and XDG_RUNTIME_DIR is set; a rootless
/// non-root euid without it gets `/run/user/<euid>/sprout` when /run/user/<euid> exists
/// (crun's fallback; runc would try /run/runc and fail); else `/run/sprout`.
/// The bool: the directory is in XDG_RUNTIME_DIR (made 0700 + sticky, as runc does, so the
/// XDG clean-up leaves it alone).
pub(crate) fn default_root(
    euid: u32,
    rootless: bool,
    xdg_runtime_dir: Option<&str>,
    user: Option<&str>,
    run_user_exists: impl FnOnce(&str) -> bool,
) -> (PathBuf, bool) {
    let honor_xdg = rootless && (euid != 0 || user != Some("root"));
    if honor_xdg {
        if let Some(x) = xdg_runtime_dir.filter(|x| !x.is_empty()) {
            return (PathBuf::from(x).join("sprout"), true);
        }
        let run_user = format!("/run/user/{euid}");
        if euid != 0 && run_user_exists(&run_user) {
            return (PathBuf::from(run_user).join("sprout"), true);
        }
    }
    (PathBuf::from("/run/sprout"), false)
}

/// `--root`, or [`default_root`] for this process (made, 0700 + sticky, when in the user's
/// runtime directory).
pub fn state_root(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(r) = explicit {
        let abs = std::path::absolute(&r).unwrap_or(r);
        if abs == std::path::Path::new("/") {
            return Err(Error::msg("--root must not be /"));
        }
        return Ok(abs);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let xdg = std::env::var("XDG_RUNTIME_DIR").ok();
    let user = std::env::var("USER").ok();
    let (root, in_xdg) = default_root(
        euid,
        sprout_cgroups::running_rootless(),
        xdg.as_deref(),
        user.as_deref(),
        |p| std::path::Path::new(p).is_dir(),
    );
    if in_xdg {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root);
        let chmod = made.and_then(|()| {
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o1700))
        });
        if let Err(e) = chmod {
            return Err(Error::msg(format!(
                "state directory {} (the default --root when rootless): {e}",
                root.display()
            )));
        }
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::default_root;
    use std::path::PathBuf;

    #[test]
    fn default_root_follows_runc() {
        let never = |_: &str| false;
        // Real root: /run/sprout, whatever XDG_RUNTIME_DIR says (runc keeps /run/runc).
        assert_eq!(
            default_root(0, false, Some("/run/user/0"), Some("root"), never),
            (PathBuf::from("/run/sprout"), false)
        );
        // An unprivileged user: XDG_RUNTIME_DIR.
        assert_eq!(
            default_root(1000, true, Some("/run/user/1000"), Some("u"), never),
            (PathBuf::from("/run/user/1000/sprout"), true)
        );
        // Rootless podman: euid 0 in its user namespace, XDG_RUNTIME_DIR set.
        assert_eq!(
            default_root(0, true, Some("/run/user/1000"), None, never),
            (PathBuf::from("/run/user/1000/sprout"), true)
        );
        // ... unless $USER is root (runc's exception for root in a user namespace).
        assert_eq!(
            default_root(0, true, Some("/run/user/1000"), Some("root"), never),
            (PathBuf::from("/run/sprout"), false)
        );
        // No XDG_RUNTIME_DIR: /run/user/<euid> when it exists, else /run/sprout.
        assert_eq!(
            default_root(1000, true, None, None, |p| p == "/run/user/1000"),
            (PathBuf::from("/run/user/1000/sprout"), true)
        );
        assert_eq!(
            default_root(1000, true, Some(""), None, never),
            (PathBuf::from("/run/sprout"), false)
        );
    }
}
