//! sprout-serve's error type: one line per error, as before (clients, tests and operators
//! read these lines: `sprout-serve: bad handler name '..' (1-64 letters, digits, - and _)`,
//! a 400's `"error"`), plus what the line is made of: a [`Kind`] to branch on instead of the
//! text, and the typed source (an `io::Error`, whose errno [`Error::errno`] gives, or the
//! cgroups or seccomp crate's error), returned by `source()`.
//!
//! The line is rendered when the error is made (and again by each [`Error::context`]), so
//! `Display` gives exactly today's text.

use std::sync::Arc;

/// What failed, for callers that branch on it (the HTTP status and `"kind"` of a 400, say).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A handler name that is not 1-64 ASCII letters, digits, `-` and `_`.
    InvalidName,
    /// A request body that is valid JSON but that the sandbox's python would fail on
    /// (invalid UTF-8, nested too deep, an integer of too many digits).
    InvalidEvent,
    /// A handler's requirements.txt: a line that is not a pinned `name==version`.
    InvalidRequirements,
    /// The engine's config file: unreadable, not TOML, or a value out of range.
    Config,
    /// Installing a package into the install cache: pip did not run, failed or timed out, or
    /// its directory could not be made.
    Install,
    /// Starting a zygote.
    Zygote,
    /// Another sprout-serve uses the run dir.
    InUse,
    /// The cgroups crate failed (`source()` is the `sprout_cgroups::Error`).
    Cgroup,
    /// The seccomp crate failed (`source()` is the `sprout_seccomp::Error`).
    Seccomp,
    /// A file operation or system call failed: [`Error::errno`] gives the errno.
    Io,
}

/// The typed error an [`Error`] wraps (in an `Arc`: a failed install is remembered and
/// returned again for a minute, so the error is `Clone`).
#[derive(Clone, Debug, thiserror::Error)]
enum Source {
    #[error(transparent)]
    Io(Arc<std::io::Error>),
    #[error(transparent)]
    Cgroup(Arc<sprout_cgroups::Error>),
    #[error(transparent)]
    Seccomp(Arc<sprout_seccomp::Error>),
}

#[derive(Clone, Debug, thiserror::Error)]
#[error("{msg}")]
pub struct Error {
    kind: Kind,
    /// The rendered one-line message.
    msg: String,
    #[source]
    source: Option<Source>,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A plain message of the given kind.
    pub fn new(kind: Kind, msg: impl Into<String>) -> Error {
        Error {
            kind,
            msg: msg.into(),
            source: None,
        }
    }
    /// An I/O error prefixed with what was being done (`what: err`), of the given kind; the
    /// errno is kept.
    pub fn io(kind: Kind, what: impl std::fmt::Display, err: std::io::Error) -> Error {
        Error {
            kind,
            msg: format!("{what}: {err}"),
            source: Some(Source::Io(Arc::new(err))),
        }
    }
    /// Prefix the message with what was being done (`what: message`); kind and source stay.
    pub fn context(mut self, what: impl std::fmt::Display) -> Error {
        self.msg = format!("{what}: {}", self.msg);
        self
    }
    /// The same error, of another kind (a cgroup error met while starting a zygote is a
    /// [`Kind::Zygote`] failure; its source stays).
    pub fn with_kind(mut self, kind: Kind) -> Error {
        self.kind = kind;
        self
    }
    pub fn kind(&self) -> Kind {
        self.kind
    }
    /// The errno of the OS error this error wraps, directly or inside a cgroups or seccomp
    /// error. (No caller in the engine branches on an errno yet: the unit tests read it.)
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn errno(&self) -> Option<i32> {
        match self.source.as_ref()? {
            Source::Io(e) => e.raw_os_error(),
            Source::Cgroup(e) => e.raw_os_error(),
            Source::Seccomp(e) => match &**e {
                sprout_seccomp::Error::Io(e) => e.raw_os_error(),
                _ => None,
            },
        }
    }
}

/// A bare I/O error (its own text, no prefix), kind [`Kind::Io`].
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error {
            kind: Kind::Io,
            msg: e.to_string(),
            source: Some(Source::Io(Arc::new(e))),
        }
    }
}

/// The cgroups crate's error as it renders itself, kind [`Kind::Cgroup`].
impl From<sprout_cgroups::Error> for Error {
    fn from(e: sprout_cgroups::Error) -> Error {
        Error {
            kind: Kind::Cgroup,
            msg: e.to_string(),
            source: Some(Source::Cgroup(Arc::new(e))),
        }
    }
}

/// The seccomp crate's error as it renders itself, kind [`Kind::Seccomp`].
impl From<sprout_seccomp::Error> for Error {
    fn from(e: sprout_seccomp::Error) -> Error {
        Error {
            kind: Kind::Seccomp,
            msg: e.to_string(),
            source: Some(Source::Seccomp(Arc::new(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_line_and_keeps_kind_and_errno() {
        let e = Error::io(
            Kind::Install,
            "running pip",
            std::io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert_eq!(
            e.to_string(),
            format!(
                "running pip: {}",
                std::io::Error::from_raw_os_error(libc::ENOENT)
            )
        );
        assert_eq!(e.kind(), Kind::Install);
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert!(std::error::Error::source(&e).is_some());
        let c = e.clone().context("numpy").with_kind(Kind::Zygote);
        assert!(c.to_string().starts_with("numpy: running pip: "));
        assert_eq!((c.kind(), c.errno()), (Kind::Zygote, Some(libc::ENOENT)));
        let p = Error::new(Kind::Config, "header_timeout_ms must be > 0");
        assert_eq!(p.to_string(), "header_timeout_ms must be > 0");
        assert_eq!(p.errno(), None);
        let cg: Error = sprout_cgroups::Error::Invalid("pool closed: shutting down".into()).into();
        assert_eq!(cg.to_string(), "cgroup: pool closed: shutting down");
        assert_eq!(cg.kind(), Kind::Cgroup);
    }
}
