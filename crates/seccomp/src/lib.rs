//! OCI seccomp profiles compiled to classic BPF once, cached by profile hash, loaded with one
//! `seccomp(2)` call.
//!
//! INTERFACE CONTRACT (used by sprout-runtime; keep these signatures stable):
//!
//! - [`prepare`] runs in the runtime's process before the container's clone: it computes the cache
//!   key (hash of the canonical profile, arch, libseccomp version, sprout version), reads
//!   `<cache_dir>/<key>` if present and valid, otherwise compiles and stores it atomically.
//! - [`Prepared::load`] runs in the container's init (or an exec'd process) just before execve:
//!   one `seccomp(SECCOMP_SET_MODE_FILTER, flags, &prog)` call, no allocation. It returns the
//!   listener fd when the profile uses SCMP_ACT_NOTIFY.
//! - The caller sets no_new_privs itself (or holds CAP_SYS_ADMIN) before `load`.

use std::os::fd::OwnedFd;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("seccomp: {0}")]
    Invalid(String),
    #[error("seccomp: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// A compiled filter ready to load.
pub struct Prepared {
    // implementation-defined: the BPF program, filter flags, whether a listener is needed
}

/// Whether `prepare` hit the cache or compiled, for the phase trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cache,
    Compiled,
}

pub fn prepare(
    profile: &oci_spec::runtime::LinuxSeccomp,
    cache_dir: Option<&Path>,
) -> Result<(Prepared, Source)> {
    let _ = (profile, cache_dir);
    unimplemented!()
}

impl Prepared {
    /// True when the profile uses SCMP_ACT_NOTIFY and `load` will return a listener fd.
    pub fn wants_listener(&self) -> bool {
        unimplemented!()
    }
    pub fn load(&self) -> Result<Option<OwnedFd>> {
        unimplemented!()
    }
}
