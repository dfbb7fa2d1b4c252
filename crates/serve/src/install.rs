//! Install cache (SOCK §4): every pinned `name==version` from a handler's requirements.txt is
//! installed once with `pip install --no-deps --target <cache>/<name>-<version>` into its own
//! directory, which sandboxes get as a read-only bind at /packages/<name>-<version>.
//! requirements.txt must be the full pinned closure (`pip freeze` output): no resolver runs at
//! request time, and two handlers share a package directory exactly when they pin the same
//! version.

use crate::error::{Error, Kind, Result};
use crate::locked::Locked;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pkg {
    pub name: String,
    pub version: String,
}

impl Pkg {
    pub fn key(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }
}

fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+' | '!'))
}

/// Parse requirements.txt: `name==version` lines, comments and blanks ignored. An error is
/// of kind [`Kind::InvalidRequirements`].
pub fn parse_requirements(raw: &str) -> Result<Vec<Pkg>> {
    let mut out = Vec::new();
    for (i, line) in raw.lines().enumerate() {
        let l = line.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let Some((n, v)) = l.split_once("==") else {
            return Err(Error::new(
                Kind::InvalidRequirements,
                format!(
                    "requirements.txt line {}: '{l}' is not pinned (name==version)",
                    i + 1
                ),
            ));
        };
        let (n, v) = (n.trim(), v.trim());
        if !valid_token(n) || !valid_token(v) || v.contains("==") {
            return Err(Error::new(
                Kind::InvalidRequirements,
                format!("requirements.txt line {}: bad requirement '{l}'", i + 1),
            ));
        }
        // PEP 503 normalised name.
        let name = n.to_ascii_lowercase().replace(['_', '.'], "-");
        out.push(Pkg {
            name,
            version: v.to_string(),
        });
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Puts a source build's jail (by the pid of the process the engine started, before it does
/// anything) into a cgroup of its own, where it stays until the returned guard is dropped.
pub type Place<'a> = &'a dyn Fn(i32) -> std::io::Result<Box<dyn Send + 'a>>;

pub struct InstallCache {
    dir: PathBuf,
    pip: Vec<String>,
    pip_args: Vec<String>,
    /// `None` (the default, `pip_build_sdists = false`): pip installs wheels only
    /// (`--only-binary=:all:`) and runs none of a package's code. `Some`: pip may build
    /// source distributions, which runs their build code (setup.py, a build backend): it
    /// then runs in this jail (buildjail.rs), never as the host's root.
    jail: Option<crate::buildjail::Jail>,
    timeout: Duration,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Recent failures (not retried for a minute).
    failed: Mutex<HashMap<String, (Instant, Error)>>,
}

impl InstallCache {
    pub fn new(
        dir: PathBuf,
        pip: Vec<String>,
        pip_args: Vec<String>,
        jail: Option<crate::buildjail::Jail>,
        timeout: Duration,
    ) -> InstallCache {
        InstallCache {
            dir,
            pip,
            pip_args,
            jail,
            timeout,
            locks: Default::default(),
            failed: Default::default(),
        }
    }

    pub fn path(&self, p: &Pkg) -> PathBuf {
        self.dir.join(p.key())
    }

    /// (entries, bytes) of the cache directory (bytes: du-like walk, for /status).
    pub fn stats(&self) -> (usize, u64) {
        let mut n = 0;
        let mut bytes = 0;
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                n += 1;
                bytes += du(&e.path());
            }
        }
        (n, bytes)
    }

    /// The installed directory of `p`, installing it first if needed. An error is of kind
    /// [`Kind::Install`] (with the errno where the failure had one).
    pub fn ensure(&self, p: &Pkg, place: Place<'_>) -> Result<PathBuf> {
        let dst = self.path(p);
        if dst.is_dir() {
            return Ok(dst);
        }
        let key = p.key();
        if let Some((t, e)) = self.failed.locked().get(&key) {
            if t.elapsed() < Duration::from_secs(60) {
                return Err(e.clone());
            }
        }
        let lock = self.locks.locked().entry(key.clone()).or_default().clone();
        let _g = lock.locked();
        if dst.is_dir() {
            return Ok(dst);
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io(Kind::Install, self.dir.display(), e))?;
        let tmp = self.dir.join(format!(".tmp-{key}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let r = self.pip_install(p, &tmp, place);
        match r {
            Ok(()) => {
                if self.jail.is_some() {
                    // Built as the sandboxes' user: nothing of it stays theirs.
                    crate::buildjail::give_back_to_root(&tmp).map_err(|e| {
                        let _ = std::fs::remove_dir_all(&tmp);
                        Error::io(Kind::Install, tmp.display(), e)
                    })?;
                }
                std::fs::rename(&tmp, &dst)
                    .map_err(|e| Error::io(Kind::Install, dst.display(), e))?;
                Ok(dst)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                self.failed
                    .locked()
                    .insert(key, (Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    fn pip_install(&self, p: &Pkg, target: &Path, place: Place<'_>) -> Result<()> {
        let spec = format!("{}=={}", p.name, p.version);
        let mut pip: Vec<String> = self.pip.clone();
        pip.extend(
            [
                "install",
                "--no-deps",
                "--no-compile",
                "--disable-pip-version-check",
                "--quiet",
            ]
            .map(String::from),
        );
        let mut cmd = match &self.jail {
            None => {
                pip.extend(["--target".into(), target.display().to_string()]);
                pip.push("--only-binary=:all:".into());
                pip.extend(self.pip_args.iter().cloned());
                pip.push(spec.clone());
                let mut c = std::process::Command::new(&pip[0]);
                c.args(&pip[1..]);
                c
            }
            Some(jail) => {
                // The target, made here and lent to the sandboxes' user for the build.
                std::fs::create_dir(target)
                    .and_then(|()| std::os::unix::fs::chown(target, Some(jail.uid), Some(jail.gid)))
                    .map_err(|e| Error::io(Kind::Install, target.display(), e))?;
                pip.extend(["--target".into(), crate::buildjail::TARGET.into()]);
                pip.extend(self.pip_args.iter().cloned());
                pip.push(spec.clone());
                jail.command(target, &crate::buildjail::paths_in(&self.pip_args), &pip)
            }
        };
        // The jail waits on its stdin until it has been placed in its cgroup.
        cmd.stdin(if self.jail.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(Kind::Install, format!("running {}", pip.join(" ")), e))?;
        let pid = child.id() as i32;
        let mut _placed = None;
        if let Some(mut go) = child.stdin.take() {
            match place(pid) {
                Ok(g) => {
                    _placed = Some(g);
                    let _ = std::io::Write::write_all(&mut go, b"g");
                }
                Err(e) => {
                    // SAFETY: kill(2) takes integers only; `pid` is our child, not reaped
                    // yet (it waits for the byte it will not get).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    let _ = crate::reaper::wait_pid(pid, self.timeout);
                    return Err(Error::io(
                        Kind::Install,
                        format!("installing {spec}: the build's cgroup"),
                        e,
                    ));
                }
            }
        }
        let mut err = child.stderr.take().unwrap();
        let errt = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let mut out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = out.read_to_end(&mut s);
        });
        let status = crate::reaper::wait_pid(pid, self.timeout);
        if status.is_none() {
            // Killed before its stderr is read to the end: pip holds it open while it runs
            // (until 2026-11-29 the read came first, and a pip that hung held the request,
            // the install lock and the thread for ever).
            // SAFETY: kill(2) takes integers only; `pid` is our child (wait_pid timed out).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let stderr = errt.join().unwrap_or_default();
        match status {
            Some(0) => Ok(()),
            Some(code) => {
                let tail: String = stderr
                    .lines()
                    .rfind(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .chars()
                    .take(400)
                    .collect();
                let hint = if self.jail.is_none() {
                    " (wheels only: pip_build_sdists = false)"
                } else {
                    ""
                };
                Err(Error::new(
                    Kind::Install,
                    format!("installing {spec} failed (pip exit {code}): {tail}{hint}"),
                ))
            }
            None => Err(Error::new(
                Kind::Install,
                format!(
                    "installing {spec}: pip timed out after {} s (pip_timeout_s)",
                    self.timeout.as_secs()
                ),
            )),
        }
    }
}

fn du(p: &Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if md.is_dir() {
        std::fs::read_dir(p)
            .map(|rd| rd.flatten().map(|e| du(&e.path())).sum())
            .unwrap_or(0)
    } else {
        md.len()
    }
}

/// Top-level importable modules of an installed package directory.
pub fn top_level_modules(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return v;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('_')
            || name.starts_with('.')
            || name.ends_with(".dist-info")
            || name.ends_with(".data")
            || name == "bin"
        {
            continue;
        }
        let p = e.path();
        if p.is_dir() && p.join("__init__.py").exists() {
            v.push(name);
        } else if let Some(m) = name.strip_suffix(".py") {
            v.push(m.to_string());
        }
    }
    v.sort();
    v
}
