//! Host cgroup layout detection: one statfs on a pure-v2 host, two on a v1/hybrid host.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{Error, Layout, Result};

pub(crate) const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
pub(crate) const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
pub(crate) const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Whether `fd` (a directory, or an O_PATH or open_tree fd) is on a cgroup2 filesystem.
pub fn is_cgroup2(fd: impl std::os::fd::AsFd) -> bool {
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstatfs(fd).is_ok_and(|s| s.f_type as i64 == CGROUP2_SUPER_MAGIC)
}

/// Filesystem magic of `path`, `None` when it does not exist.
pub(crate) fn fs_magic(path: &Path) -> Result<Option<i64>> {
    let io_err = |source: std::io::Error| Error::Io {
        path: path.into(),
        source,
    };
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    let st = match rustix::fs::statfs(c.as_c_str()) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io_err(e.into())),
    };
    // f_type's width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    Ok(Some(st.f_type as i64))
}

/// Classify given the magic of `<root>` and (lazily) of `<root>/unified`.
pub(crate) fn classify(
    root: &Path,
    root_magic: Option<i64>,
    unified_magic: impl FnOnce() -> Result<Option<i64>>,
) -> Result<Layout> {
    match root_magic {
        Some(CGROUP2_SUPER_MAGIC) => Ok(Layout::V2),
        Some(TMPFS_MAGIC) => {
            if unified_magic()? == Some(CGROUP2_SUPER_MAGIC) {
                Ok(Layout::Hybrid)
            } else {
                Ok(Layout::V1)
            }
        }
        // A single v1 hierarchy mounted directly at the root: unusual but v1.
        Some(CGROUP_SUPER_MAGIC) => Ok(Layout::V1),
        Some(m) => Err(Error::Invalid(format!(
            "{} is neither a cgroup2 mount nor a tmpfs of cgroup v1 mounts (filesystem magic {m:#x})",
            root.display()
        ))),
        None => Err(Error::Invalid(format!(
            "{} does not exist: no cgroup filesystem is mounted",
            root.display()
        ))),
    }
}

pub(crate) fn detect_at(root: &Path) -> Result<Layout> {
    classify(root, fs_magic(root)?, || fs_magic(&root.join("unified")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_cases() {
        let r = Path::new("/sys/fs/cgroup");
        assert_eq!(
            classify(r, Some(CGROUP2_SUPER_MAGIC), || panic!("no 2nd statfs")).unwrap(),
            Layout::V2
        );
        assert_eq!(
            classify(r, Some(TMPFS_MAGIC), || Ok(Some(CGROUP2_SUPER_MAGIC))).unwrap(),
            Layout::Hybrid
        );
        assert_eq!(
            classify(r, Some(TMPFS_MAGIC), || Ok(None)).unwrap(),
            Layout::V1
        );
        assert_eq!(
            classify(r, Some(TMPFS_MAGIC), || Ok(Some(TMPFS_MAGIC))).unwrap(),
            Layout::V1
        );
        assert!(classify(r, Some(0x9fa0), || Ok(None))
            .unwrap_err()
            .to_string()
            .contains("0x9fa0"));
        assert!(classify(r, None, || Ok(None)).is_err());
    }

    #[test]
    fn detect_this_host() {
        // Informative: print what the host is; must not fail where /sys/fs/cgroup exists.
        match Layout::detect() {
            Ok(l) => println!("host cgroup layout: {l:?}"),
            Err(e) => println!("no cgroup layout on this host: {e}"),
        }
    }
}
