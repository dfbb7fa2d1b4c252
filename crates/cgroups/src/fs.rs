//! Minimal-syscall file helpers for cgroupfs.
//!
//! - writes: `open(O_WRONLY|O_TRUNC|O_CLOEXEC)` + one `write` (never O_CREAT: a missing
//!   control file means the kernel lacks the feature and must surface as an error);
//! - reads: `open` + `read` until a short read or EOF (cgroup files are seq_files, which fill
//!   the buffer as far as they can), no fstat.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Error, Result};

pub(crate) fn write(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    let n = f.write(data)?;
    if n != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short write to cgroup file",
        ));
    }
    Ok(())
}

pub(crate) fn read(path: &Path) -> io::Result<String> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 512];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        let room = buf.len() - len;
        let n = match f.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        len += n;
        if n == 0 || n < room {
            break;
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub(crate) fn io_err(path: impl Into<PathBuf>, source: io::Error) -> Error {
    Error::Io {
        path: path.into(),
        source,
    }
}

pub(crate) fn read_at(dir: &Path, file: &str) -> Result<String> {
    let p = dir.join(file);
    read(&p).map_err(|e| io_err(p, e))
}

pub(crate) fn write_at(dir: &Path, file: &str, data: &str) -> Result<()> {
    let p = dir.join(file);
    write(&p, data.as_bytes()).map_err(|e| io_err(p, e))
}

/// Parse a whole-file number; "max" reads as `u64::MAX`.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    if s == "max" {
        return Some(u64::MAX);
    }
    s.parse().ok()
}

/// Read a single-number file; `None` when the file does not exist.
pub(crate) fn read_u64_opt(dir: &Path, file: &str) -> Result<Option<u64>> {
    let p = dir.join(file);
    match read(&p) {
        Ok(s) => Ok(parse_u64(&s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(p, e)),
    }
}

/// Parse "key value" lines (memory.stat, cpu.stat, cgroup.events ...).
pub(crate) fn flat_keyed(s: &str) -> impl Iterator<Item = (&str, u64)> {
    s.lines().filter_map(|l| {
        let mut it = l.split_whitespace();
        let k = it.next()?;
        let v = parse_u64(it.next()?)?;
        Some((k, v))
    })
}

/// Read cgroup.procs as pids.
pub(crate) fn read_procs(dir: &Path) -> Result<Vec<i32>> {
    let s = read_at(dir, "cgroup.procs")?;
    // A member outside our pid namespace reads as 0: it has no pid we could signal (and
    // kill(0, ...) would signal our own process group).
    Ok(s.lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|&p: &i32| p > 0)
        .collect())
}

/// Member pids of `dir` and all its descendant cgroups.
pub(crate) fn read_procs_recursive(dir: &Path, out: &mut Vec<i32>) -> Result<()> {
    out.extend(read_procs(dir)?);
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return Err(io_err(dir, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| io_err(dir, e))?;
        if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            read_procs_recursive(&ent.path(), out)?;
        }
    }
    Ok(())
}

/// rmdir, retrying while the kernel still reports the cgroup busy (tasks that were just
/// killed take a moment to leave). A directory already gone is success.
pub(crate) fn rmdir_retry(dir: &Path) -> Result<()> {
    let mut delay = Duration::from_millis(1);
    let mut tries = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 10 => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(100));
                tries += 1;
            }
            Err(e) => return Err(io_err(dir, e)),
        }
    }
}

/// rmdir `dir` after every cgroup below it, deepest first, each with [`rmdir_retry`]: the
/// container's processes may have made sub-cgroups of their own (as runc's RemovePath does).
/// Only directories are descended into (a cgroup's other entries are its control files), and
/// never through a symlink. A directory already gone is success.
///
/// The usual cgroup has no sub-cgroups and no tasks left, so one rmdir is tried first: only
/// if the kernel refuses it (EBUSY: sub-cgroups or tasks; ENOTEMPTY) is the directory read.
/// Listing a cgroup directory (open, getdents of its 10–35 control files, close) cost more
/// than the rmdir itself, ten times per `delete` on a hybrid host.
pub(crate) fn rmdir_tree_retry(dir: &Path) -> Result<()> {
    match std::fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::ENOTEMPTY)) => {}
        Err(e) => return Err(io_err(dir, e)),
    }
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| io_err(dir, e))?;
        if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            rmdir_tree_retry(&ent.path())?;
        }
    }
    rmdir_retry(dir)
}

pub(crate) enum MkdirError {
    /// The base directory (own cgroup or hierarchy root) is missing.
    BaseMissing,
    Io(PathBuf, io::Error),
}

/// mkdir `dir` and any missing ancestors below `base` (which must exist), appending every
/// directory actually created to `created`, parents first. One mkdir in the common case.
///
/// An ancestor can vanish between its mkdir and its child's: a shared parent (the relative
/// cgroupsPath `parent/<id>` of containers started side by side) is removed again by another
/// container's delete when that container made it and finds it empty. The ancestors are then
/// made again, a bounded number of times, instead of failing the create.
pub(crate) fn mkdir_below(
    base: &Path,
    dir: &Path,
    created: &mut Vec<PathBuf>,
) -> std::result::Result<(), MkdirError> {
    mkdir_below_then(base, dir, created, &mut |_| {})
}

/// [`mkdir_below`], calling `made` on each ancestor of `dir` this call creates, right after its
/// mkdir and before its child's (cgroup v2 enables the controllers of a new parent there, so a
/// concurrent create that finds the parent already existing sees it complete sooner).
pub(crate) fn mkdir_below_then(
    base: &Path,
    dir: &Path,
    created: &mut Vec<PathBuf>,
    made: &mut dyn FnMut(&Path),
) -> std::result::Result<(), MkdirError> {
    if dir == base {
        return Err(MkdirError::BaseMissing);
    }
    let mut last = None;
    for _ in 0..MKDIR_TRIES {
        match std::fs::create_dir(dir) {
            Ok(()) => {
                if !created.iter().any(|c| c == dir) {
                    created.push(dir.to_path_buf());
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = dir.parent().ok_or(MkdirError::BaseMissing)?;
                let before = created.len();
                mkdir_below_then(base, parent, created, made)?;
                if created.len() > before && created.last().is_some_and(|c| c == parent) {
                    made(parent);
                }
                last = Some(e);
            }
            Err(e) => return Err(MkdirError::Io(dir.to_path_buf(), e)),
        }
    }
    Err(MkdirError::Io(
        dir.to_path_buf(),
        last.unwrap_or_else(|| io::ErrorKind::NotFound.into()),
    ))
}

const MKDIR_TRIES: usize = 100;

/// Poll `check` with a short, growing sleep until it returns true or `timeout` elapses.
pub(crate) fn wait_until(
    timeout: Duration,
    mut every: impl FnMut(u32) -> Result<()>,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<bool> {
    let start = std::time::Instant::now();
    let mut delay = Duration::from_micros(100);
    let mut i = 0u32;
    loop {
        if check()? {
            return Ok(true);
        }
        if start.elapsed() >= timeout {
            return Ok(false);
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(10));
        i += 1;
        every(i)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_roundtrip_and_no_create() {
        let d = crate::testutil::TempDir::new("fs");
        let f = d.path().join("x");
        assert_eq!(write(&f, b"1").unwrap_err().kind(), io::ErrorKind::NotFound);
        std::fs::write(&f, "long old value").unwrap();
        write(&f, b"42\n").unwrap();
        assert_eq!(read(&f).unwrap(), "42\n");
        let big = "a".repeat(5000);
        std::fs::write(&f, &big).unwrap();
        assert_eq!(read(&f).unwrap(), big);
    }

    #[test]
    fn mkdir_below_records_only_new() {
        let d = crate::testutil::TempDir::new("mk");
        let base = d.path().join("own");
        std::fs::create_dir(&base).unwrap();
        std::fs::create_dir(base.join("a")).unwrap();
        let mut created = vec![];
        assert!(mkdir_below(&base, &base.join("a/b/c"), &mut created).is_ok());
        assert_eq!(created, vec![base.join("a/b"), base.join("a/b/c")]);
        created.clear();
        assert!(mkdir_below(&base, &base.join("a/b/c"), &mut created).is_ok());
        assert!(created.is_empty());
        let missing = d.path().join("nope");
        assert!(matches!(
            mkdir_below(&missing, &missing.join("x/y"), &mut created),
            Err(MkdirError::BaseMissing)
        ));
    }

    #[test]
    fn keyed() {
        let v: Vec<_> = flat_keyed("a 1\nb max\nbad\nc x\n").collect();
        assert_eq!(v, vec![("a", 1), ("b", u64::MAX)]);
    }
}
