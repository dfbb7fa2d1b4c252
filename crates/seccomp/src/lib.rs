//! OCI seccomp profiles compiled to classic BPF once, cached by profile hash, loaded with one
//! `seccomp(2)` call.
//!
//! Used by sprout-runtime (the container's init, `exec`) and by sprout-serve (one filter for its
//! sandboxes); nothing outside this workspace depends on it. How the two calls work:
//!
//! - [`prepare`] runs in the runtime's process before the container's clone: it computes the cache
//!   key (hash of the canonical profile, arch, libseccomp version, sprout version), reads
//!   `<cache_dir>/<key>` if present and valid, otherwise compiles and stores it atomically.
//! - [`Prepared::load`] runs in the container's init (or an exec'd process) just before execve:
//!   one `seccomp(SECCOMP_SET_MODE_FILTER, flags, &prog)` call, no allocation. It returns the
//!   listener fd when the profile uses SCMP_ACT_NOTIFY.
//! - The caller sets no_new_privs itself (or holds CAP_SYS_ADMIN) before `load`.
//!
//! Notes for the runtime:
//!
//! - Order in init (as runc/crun do): when `process.noNewPrivileges` is true, set
//!   `PR_SET_NO_NEW_PRIVS`, finish everything else (mounts, pivot_root, setgroups/setgid/setuid,
//!   capability drop, fd cleanup) and call `load` as the very last thing before `execve`, so the
//!   filter sees only `execve` and the container's own syscalls. When it is false, the caller
//!   must still hold CAP_SYS_ADMIN to load, so `load` has to come *before* dropping
//!   capabilities / switching uid, and everything after it (capset, setuid, close, write to the
//!   sync socket, execve, ...) runs under the filter: this is runc's behaviour too.
//! - The listener fd (profiles with SCMP_ACT_NOTIFY; `listenerPath` required, else
//!   [`Error::Invalid`]) is created in the container's init and is close-on-exec. Init must hand
//!   it to the runtime (SCM_RIGHTS on the sync socket) before `execve`; the syscalls it uses for
//!   that must not themselves be NOTIFY'd, or init blocks on its own listener.
//! - SECCOMP_FILTER_FLAG_TSYNC is accepted and ignored (init is single-threaded);
//!   SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV is dropped when there is no listener (the kernel
//!   refuses it alone). On old kernels an unsupported flag makes `load` fail with EINVAL.
//! - Cache failures never fail `prepare`; only an invalid profile or a libseccomp error does.
//!   The cache directory must be private to the runtime (it is created 0700; entries not owned
//!   by the effective uid, symlinks and corrupt files are ignored and overwritten).
//! - libseccomp is linked statically (see `/.cargo/config.toml`), so a cache hit costs no
//!   dynamic loading; only a miss runs libseccomp code.
//!
//! Layout: [`canon`] (canonical profile serialisation and the cache key), [`compile`]
//! (libseccomp, the miss path), [`compact`] (shortens libseccomp's program, checked against it),
//! [`enosys`] (runc's ENOSYS stub for syscalls newer than the profile), [`cache`] (store / load / evict), [`load`] (the raw syscall),
//! [`sha256`] (the hash used by the key and the entries' checksum).

use std::os::fd::OwnedFd;
use std::path::Path;

pub mod cache;
pub mod canon;
pub mod compact;
pub mod compile;
pub mod enosys;
pub mod load;
pub mod sha256;

pub use canon::key;
pub use compile::libseccomp_version;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("seccomp: {0}")]
    Invalid(String),
    #[error("seccomp: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// A compiled filter ready to load.
#[derive(Clone)]
pub struct Prepared {
    filter: Box<[libc::sock_filter]>,
    flags: u32,
    listener: bool,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("instructions", &self.filter.len())
            .field("flags", &format_args!("{:#x}", self.flags))
            .field("listener", &self.listener)
            .finish()
    }
}

/// Whether `prepare` hit the cache or compiled, for the phase trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cache,
    Compiled,
}

/// Compiles (or fetches from `cache_dir`) the filter for `profile`.
///
/// With `cache_dir` None it always compiles. Cache failures (unreadable, corrupt, or an
/// unwritable directory: ENOSPC, EACCES, ...) never fail the call; they only cost a compile.
pub fn prepare(
    profile: &oci_spec::runtime::LinuxSeccomp,
    cache_dir: Option<&Path>,
) -> Result<(Prepared, Source)> {
    // Validates flags and NOTIFY/listenerPath, also on a cache hit.
    let (flags, listener) = compile::filter_flags(profile)?;
    let Some(dir) = cache_dir else {
        return Ok((compile_profile(profile)?, Source::Compiled));
    };
    let key = canon::key_bytes(profile);
    let key_hex = sha256::hex(&key);
    if let Some((stored_flags, filter)) = cache::lookup(dir, &key_hex, &key) {
        if stored_flags == flags {
            return Ok((
                Prepared {
                    filter,
                    flags,
                    listener,
                },
                Source::Cache,
            ));
        }
    }
    let prepared = compile_profile(profile)?;
    let _ = cache::store(dir, &key_hex, &key, prepared.flags, prepared.bpf_bytes());
    Ok((prepared, Source::Compiled))
}

/// Compiles `profile` without touching any cache.
pub fn compile_profile(profile: &oci_spec::runtime::LinuxSeccomp) -> Result<Prepared> {
    let c = compile::compile(profile)?;
    Ok(Prepared {
        filter: c.filter,
        flags: c.flags,
        listener: c.listener,
    })
}

impl Prepared {
    /// True when the profile uses SCMP_ACT_NOTIFY and `load` will return a listener fd.
    pub fn wants_listener(&self) -> bool {
        self.listener
    }

    /// Installs the filter on the calling thread (one `seccomp(2)` call, no allocation).
    /// Returns the listener fd when [`Prepared::wants_listener`].
    pub fn load(&self) -> Result<Option<OwnedFd>> {
        load::load_filter(&self.filter, self.flags, self.listener)
    }

    /// The `seccomp(2)` flags `load` passes (SECCOMP_FILTER_FLAG_*).
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// Number of BPF instructions.
    pub fn len(&self) -> usize {
        self.filter.len()
    }

    pub fn is_empty(&self) -> bool {
        self.filter.is_empty()
    }

    /// The raw `struct sock_filter` array.
    pub fn bpf_bytes(&self) -> &[u8] {
        compile::filter_bytes(&self.filter)
    }
}
