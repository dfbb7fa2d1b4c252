//! The container's state as stored under `<root>/<id>/`: `state.json` (small, read by every
//! command), `config.json` (the bundle's config bytes as given, read only by the commands that need
//! the process or hooks) and `exec.fifo` while the container is `created`. The root is meant to be
//! on tmpfs (/run): nothing here is ever fsync'd. Writes are atomic (temp file + rename).

use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bail;
use crate::error::{Error, Kind, Result};
use crate::sys;

pub const STATE_FILE: &str = "state.json";
pub const CONFIG_FILE: &str = "config.json";
pub const FIFO_FILE: &str = "exec.fifo";
/// Present while `create` sets the container up (status `creating`): `run` has no fifo, and
/// nothing may exec into or be told about a container whose init is still being set up.
pub const CREATING_FILE: &str = "creating";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Creating,
    Created,
    Running,
    Paused,
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub id: String,
    pub pid: i32,
    /// Start time of `pid` in clock ticks (from /proc/PID/stat), to detect pid reuse.
    pub pid_start: u64,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub created: String,
    pub owner: String,
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub annotations: HashMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<sprout_cgroups::Manager>,
    /// Whether the init has its own pid namespace (then killing it kills every process in it).
    #[serde(default)]
    pub own_pid_ns: bool,
    #[serde(default)]
    pub systemd_cgroup: bool,
    /// Whether config.json has poststart/poststop hooks (so start/delete parse it only then).
    #[serde(default = "yes")]
    pub has_hooks: bool,
    /// Written before the cgroup directories are made: if `create` dies there, `delete --force`
    /// removes the (empty) leaves it cannot otherwise know it made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cgroup_pending: bool,
}

fn yes() -> bool {
    true
}

/// Container ids: non-empty, no '/', not '.' or '..', printable ASCII without spaces (like runc,
/// which allows `^[\w+-\.]+$`).
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        bail!(
            kind = Kind::InvalidArgument,
            "container id: must not be empty"
        );
    }
    if id == "." || id == ".." || id.contains("..") {
        bail!(
            kind = Kind::InvalidArgument,
            "container id {id:?}: must not contain '..'"
        );
    }
    if id.len() > 1024 {
        bail!(
            kind = Kind::InvalidArgument,
            "container id: longer than 1024 bytes"
        );
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '-' | '.')))
    {
        bail!(kind = Kind::InvalidArgument, "container id {id:?}: invalid character {c:?} (allowed: letters, digits, '_', '+', '-', '.')");
    }
    Ok(())
}

pub struct Store {
    pub root: PathBuf,
}

/// The seccomp BPF cache under `--root`. '@' can't appear in a container id, so no container's
/// state directory can be (or be taken for) the cache.
pub const SECCOMP_CACHE_DIR: &str = "@cache/seccomp";

impl Store {
    pub fn seccomp_cache(&self) -> PathBuf {
        self.root.join(SECCOMP_CACHE_DIR)
    }

    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Make the state directory of a new container; fails if the id is taken. The directory's
    /// existence is the lock that makes concurrent creates of one id safe.
    pub fn create_dir(&self, id: &str) -> Result<PathBuf> {
        validate_id(id)?;
        if let Err(e) = std::fs::create_dir(&self.root) {
            if e.kind() != ErrorKind::AlreadyExists {
                // The parent may be missing too (e.g. --root /run/x/y).
                std::fs::create_dir_all(&self.root)
                    .map_err(|e| Error::os(format!("--root {}", self.root.display()), e))?;
            }
        }
        let dir = self.dir(id);
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                bail!(
                    kind = Kind::AlreadyExists,
                    "container {id:?} already exists"
                )
            }
            Err(e) => Err(Error::os(format!("state directory {}", dir.display()), e)),
        }
    }

    pub fn load(&self, id: &str) -> Result<State> {
        validate_id(id)?;
        let path = self.dir(id).join(STATE_FILE);
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                bail!(kind = Kind::NotFound, "container {id:?} does not exist")
            }
            Err(e) => return Err(Error::os(format!("state of {id:?}"), e)),
        };
        serde_json::from_slice(&data)
            .map_err(|e| Error::msg(format!("state of {id:?} is corrupt: {e}")))
    }

    pub fn save(&self, st: &State) -> Result<()> {
        let data = serde_json::to_vec(st).map_err(|e| Error::msg(format!("state: {e}")))?;
        write_atomic(&self.dir(&st.id).join(STATE_FILE), &data)
    }

    pub fn ids(&self) -> Result<Vec<String>> {
        let rd = match std::fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::os(format!("--root {}", self.root.display()), e)),
        };
        let mut ids: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| self.dir(n).join(STATE_FILE).exists())
            .collect();
        ids.sort();
        Ok(ids)
    }

    pub fn remove(&self, id: &str) -> Result<()> {
        let dir = self.dir(id);
        // The usual directory holds the state and the config only: unlink those and rmdir
        // (3 syscalls); anything else there (the fifo, the creating marker, a notify socket,
        // checkpoint files) makes the rmdir fail and the whole tree is removed.
        for f in [STATE_FILE, CONFIG_FILE] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        match std::fs::remove_dir(&dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(_) => {}
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::os(format!("removing state of {id:?}"), e)),
        }
    }
}

pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, data).map_err(|e| Error::os(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::os(format!("renaming {}", path.display()), e)
    })
}

impl State {
    /// Is the recorded init still the same live process? (Zombies count as stopped.)
    pub fn init_alive(&self) -> bool {
        if self.pid <= 0 {
            return false;
        }
        match sys::proc_start_time(self.pid) {
            Ok((start, st)) => start == self.pid_start && st != 'Z' && st != 'X',
            Err(_) => false,
        }
    }

    pub fn status(&self, store: &Store) -> Status {
        if !self.init_alive() {
            return Status::Stopped;
        }
        let dir = store.dir(&self.id);
        if dir.join(CREATING_FILE).exists() {
            return Status::Creating;
        }
        if dir.join(FIFO_FILE).exists() {
            return Status::Created;
        }
        if let Some(cg) = &self.cgroup {
            if matches!(cg.freezer_state(), Ok(sprout_cgroups::FreezerState::Frozen)) {
                return Status::Paused;
            }
        }
        Status::Running
    }

    /// The state JSON of the runtime spec, as `state` prints it and hooks receive it.
    pub fn spec_json(&self, status: Status) -> serde_json::Value {
        let mut v = serde_json::json!({
            "ociVersion": crate::config::OCI_VERSION,
            "id": self.id,
            "status": status.as_str(),
            "bundle": self.bundle,
            "rootfs": self.rootfs,
            "created": self.created,
            "owner": self.owner,
        });
        if status != Status::Stopped {
            v["pid"] = self.pid.into();
        } else {
            v["pid"] = 0.into();
        }
        if !self.annotations.is_empty() {
            v["annotations"] = serde_json::to_value(&self.annotations).unwrap_or_default();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        for ok in ["a", "abc-123", "x_y.z", "A+b"] {
            validate_id(ok).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "../x", "a..b", "a b", "a\nb"] {
            assert!(validate_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn store_roundtrip() {
        let root = std::env::temp_dir().join(format!("sprout-state-test-{}", std::process::id()));
        let store = Store::new(&root);
        store.create_dir("c1").unwrap();
        let e = store.create_dir("c1").unwrap_err();
        assert_eq!(e.kind(), Kind::AlreadyExists);
        assert_eq!(e.message(), "container \"c1\" already exists");
        let st = State {
            id: "c1".into(),
            pid: std::process::id() as i32,
            pid_start: sys::proc_start_time(std::process::id() as i32).unwrap().0,
            bundle: "/b".into(),
            rootfs: "/b/rootfs".into(),
            created: sys::now_rfc3339(),
            owner: String::new(),
            annotations: HashMap::new(),
            cgroup: None,
            own_pid_ns: true,
            systemd_cgroup: false,
            has_hooks: false,
            cgroup_pending: false,
        };
        store.save(&st).unwrap();
        let back = store.load("c1").unwrap();
        assert_eq!(back.pid, st.pid);
        assert!(back.init_alive());
        assert_eq!(back.status(&store), Status::Running);
        assert_eq!(store.ids().unwrap(), vec!["c1".to_string()]);
        let mut dead = back.clone();
        dead.pid_start += 1;
        assert_eq!(dead.status(&store), Status::Stopped);
        store.remove("c1").unwrap();
        let e = store.load("c1").unwrap_err();
        assert_eq!(e.kind(), Kind::NotFound);
        assert_eq!(e.message(), "container \"c1\" does not exist");
        assert_eq!(store.load("a/b").unwrap_err().kind(), Kind::InvalidArgument);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
