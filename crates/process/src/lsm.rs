//! Linux security modules: AppArmor profile and SELinux label for the container process.

use std::io::Write;
use std::path::Path;

use crate::{Error, Result};

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// AppArmor is enabled when `<sys>/module/apparmor/parameters/enabled` starts with 'Y'.
pub fn apparmor_enabled_at(sys: &Path) -> bool {
    std::fs::read(sys.join("module/apparmor/parameters/enabled"))
        .map(|b| b.first() == Some(&b'Y'))
        .unwrap_or(false)
}

/// SELinux is enabled when selinuxfs is mounted (`<sys>/fs/selinux/enforce` exists).
pub fn selinux_enabled_at(sys: &Path) -> bool {
    sys.join("fs/selinux/enforce").exists()
}

/// AppArmor enabled on this host.
pub fn apparmor_enabled() -> bool {
    apparmor_enabled_at(Path::new("/sys"))
}

/// SELinux enabled on this host.
pub fn selinux_enabled() -> bool {
    selinux_enabled_at(Path::new("/sys"))
}

/// [`crate::check_lsm`] with sysfs at `sys`.
pub fn check_lsm_at(
    sys: &Path,
    apparmor_profile: Option<&str>,
    selinux_label: Option<&str>,
) -> Result<()> {
    if non_empty(apparmor_profile).is_some() && !apparmor_enabled_at(sys) {
        return Err(Error::invalid(
            "process.apparmorProfile: AppArmor is not enabled on this host",
        ));
    }
    if non_empty(selinux_label).is_some() && !selinux_enabled_at(sys) {
        return Err(Error::invalid(
            "process.selinuxLabel: SELinux is not enabled on this host",
        ));
    }
    Ok(())
}

fn write_one(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    // One write(2): the LSM interfaces take the whole value in a single write.
    let n = f.write(data)?;
    if n != data.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "short write",
        ));
    }
    Ok(())
}

/// [`crate::set_exec_lsm_labels`] with the task's attr directory at `attr`, a plain path (the
/// tests' stand-in for /proc/<tid>/attr).
pub fn set_exec_lsm_labels_in(
    attr: &Path,
    apparmor_profile: Option<&str>,
    selinux_label: Option<&str>,
) -> Result<()> {
    set_labels_with(
        |rel, data| write_one(&attr.join(rel), data),
        apparmor_profile,
        selinux_label,
    )
}

/// The labels written through `write`, which takes a name below the attr directory.
fn set_labels_with(
    write: impl Fn(&str, &[u8]) -> std::io::Result<()>,
    apparmor_profile: Option<&str>,
    selinux_label: Option<&str>,
) -> Result<()> {
    if let Some(profile) = non_empty(apparmor_profile) {
        let mut data = Vec::with_capacity(5 + profile.len());
        data.extend_from_slice(b"exec ");
        data.extend_from_slice(profile.as_bytes());
        let r = match write("apparmor/exec", &data) {
            // Kernels without LSM stacking (before 5.1) only have attr/exec.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => write("exec", &data),
            r => r,
        };
        r.map_err(|e| Error::Sys {
            what: format!("process.apparmorProfile: setting AppArmor exec profile {profile:?}"),
            source: e,
        })?;
    }
    if let Some(label) = non_empty(selinux_label) {
        write("exec", label.as_bytes()).map_err(|e| Error::Sys {
            what: format!("process.selinuxLabel: setting SELinux exec label {label:?}"),
            source: e,
        })?;
    }
    Ok(())
}

/// See [`crate::set_exec_lsm_labels`]. Written through [`crate::procfs::ProcRoot`]: a mount over
/// /proc or over the attr files (CVE-2025-52881) is an error, never a label left unapplied.
pub fn set_exec_lsm_labels(
    apparmor_profile: Option<&str>,
    selinux_label: Option<&str>,
) -> Result<()> {
    if non_empty(apparmor_profile).is_none() && non_empty(selinux_label).is_none() {
        return Ok(());
    }
    let field = if non_empty(apparmor_profile).is_some() {
        "process.apparmorProfile"
    } else {
        "process.selinuxLabel"
    };
    let proc = crate::procfs::ProcRoot::open().map_err(|e| Error::Sys {
        what: format!("{field}: opening /proc"),
        source: e,
    })?;
    let dir = format!("{}/attr/", crate::procfs::thread_dir());
    set_labels_with(
        |rel, data| proc.write(&format!("{dir}{rel}"), data),
        apparmor_profile,
        selinux_label,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sprout-process-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn check_lsm_fake_sysfs() {
        let sys = tmpdir("sys");
        let e = check_lsm_at(&sys, Some("docker-default"), None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "process.apparmorProfile: AppArmor is not enabled on this host"
        );
        let e = check_lsm_at(&sys, None, Some("system_u:system_r:container_t:s0"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "process.selinuxLabel: SELinux is not enabled on this host"
        );
        check_lsm_at(&sys, None, None).unwrap();
        check_lsm_at(&sys, Some(""), Some("")).unwrap();

        std::fs::create_dir_all(sys.join("module/apparmor/parameters")).unwrap();
        std::fs::write(sys.join("module/apparmor/parameters/enabled"), "N\n").unwrap();
        assert!(check_lsm_at(&sys, Some("p"), None).is_err());
        std::fs::write(sys.join("module/apparmor/parameters/enabled"), "Y\n").unwrap();
        check_lsm_at(&sys, Some("p"), None).unwrap();

        std::fs::create_dir_all(sys.join("fs/selinux")).unwrap();
        std::fs::write(sys.join("fs/selinux/enforce"), "1").unwrap();
        check_lsm_at(&sys, Some("p"), Some("l")).unwrap();
        std::fs::remove_dir_all(&sys).unwrap();
    }

    #[test]
    fn check_lsm_this_host_matches_sysfs() {
        let r = crate::check_lsm(Some("unconfined"), None);
        assert_eq!(r.is_ok(), apparmor_enabled());
        let r = crate::check_lsm(None, Some("system_u:system_r:container_t:s0"));
        assert_eq!(r.is_ok(), selinux_enabled());
        crate::check_lsm(None, None).unwrap();
    }

    #[test]
    fn exec_labels_written() {
        let attr = tmpdir("attr");
        // Old kernel layout: no attr/apparmor, AppArmor uses attr/exec.
        std::fs::write(attr.join("exec"), "").unwrap();
        set_exec_lsm_labels_in(&attr, Some("docker-default"), None).unwrap();
        assert_eq!(
            std::fs::read_to_string(attr.join("exec")).unwrap(),
            "exec docker-default"
        );
        // Stacking layout: attr/apparmor/exec preferred.
        std::fs::create_dir_all(attr.join("apparmor")).unwrap();
        std::fs::write(attr.join("apparmor/exec"), "").unwrap();
        std::fs::write(attr.join("exec"), "").unwrap();
        set_exec_lsm_labels_in(
            &attr,
            Some("my-profile"),
            Some("system_u:system_r:container_t:s0:c1,c2"),
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(attr.join("apparmor/exec")).unwrap(),
            "exec my-profile"
        );
        assert_eq!(
            std::fs::read_to_string(attr.join("exec")).unwrap(),
            "system_u:system_r:container_t:s0:c1,c2"
        );
        std::fs::remove_dir_all(&attr).unwrap();

        let missing = Path::new("/nonexistent-sprout-attr");
        let e = set_exec_lsm_labels_in(missing, Some("p"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("process.apparmorProfile: setting AppArmor exec profile \"p\": "),
            "{e}"
        );
        let e = set_exec_lsm_labels_in(missing, None, Some("l"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("process.selinuxLabel: setting SELinux exec label \"l\": "),
            "{e}"
        );
    }

    #[test]
    fn exec_labels_on_this_host() {
        crate::testutil::in_child(|| {
            let r = set_exec_lsm_labels(Some("unconfined"), None);
            if apparmor_enabled() {
                return r.map_err(|e| e.to_string());
            }
            match r {
                Err(e)
                    if e.to_string().starts_with(
                        "process.apparmorProfile: setting AppArmor exec profile \"unconfined\": ",
                    ) =>
                {
                    Ok(())
                }
                other => Err(format!("unexpected: {other:?}")),
            }
        });
    }

    #[test]
    fn exec_labels_noop_when_unset() {
        set_exec_lsm_labels(None, None).unwrap();
        set_exec_lsm_labels(Some(""), Some("")).unwrap();
    }
}
