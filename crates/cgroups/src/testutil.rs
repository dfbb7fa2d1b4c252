//! Test helpers: a self-deleting temp dir and a fake cgroupfs tree.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "sprout-cgroups-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Create empty (or given) interface files in `dir`, as the kernel would.
pub(crate) fn files(dir: &Path, names: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (n, v) in names {
        std::fs::write(dir.join(n), v).unwrap();
    }
}

pub(crate) fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
        .trim()
        .to_string()
}

/// Every file under `root` with its contents (to tell what a call wrote).
pub(crate) fn snapshot(root: &Path) -> std::collections::BTreeMap<PathBuf, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.clone(), std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

/// The files whose contents differ between two snapshots.
pub(crate) fn changed(
    before: &std::collections::BTreeMap<PathBuf, String>,
    after: &std::collections::BTreeMap<PathBuf, String>,
) -> Vec<PathBuf> {
    after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(*v))
        .map(|(p, _)| p.clone())
        .collect()
}
