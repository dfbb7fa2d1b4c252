//! One error type for the runtime: every message is a single line that names the field or the
//! operation that failed, so that the CLI can print it as is (and containerd's shim can read it).
//!
//! The line is rendered once, when the error is made (and again by each `context`), so `Display`
//! and [`Error::message`] give exactly the text clients and tests match. Beside it the error keeps
//! what the line is made of: a [`Kind`] to branch on, the typed source (an `io::Error`, whose errno
//! [`Error::errno`] gives, or the cgroups/seccomp/process crate's error, returned by `source()`),
//! the context chain and, for a config error, the field path.

use std::fmt;

/// What kind of failure an [`Error`] is, for callers that branch on it instead of on its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// The bundle's config.json (or a value derived from it) is invalid: the message (and
    /// [`Error::field`] where the constructor names it) gives the field.
    Config,
    /// An argument that is not part of the config is invalid: a container id, a signal name.
    InvalidArgument,
    /// No container of that id in the state root.
    NotFound,
    /// A container of that id already exists.
    AlreadyExists,
    /// The container is not in a status the operation needs (not running, paused, stopped).
    State,
    /// A system call or file operation failed: [`Error::errno`] gives the errno.
    Os,
    /// The cgroups crate failed (`source()` is the `sprout_cgroups::Error`).
    Cgroup,
    /// The seccomp crate failed (`source()` is the `sprout_seccomp::Error`).
    Seccomp,
    /// The process crate failed (`source()` is the `sprout_process::Error`).
    Process,
    /// An OCI hook could not run, failed or timed out.
    Hook,
    /// Anything else: a plain message.
    Other,
}

impl Kind {
    /// Every kind, in the order of their wire codes ([`Error::to_wire`]).
    const ALL: [Kind; 11] = [
        Kind::Config,
        Kind::InvalidArgument,
        Kind::NotFound,
        Kind::AlreadyExists,
        Kind::State,
        Kind::Os,
        Kind::Cgroup,
        Kind::Seccomp,
        Kind::Process,
        Kind::Hook,
        Kind::Other,
    ];
    fn code(self) -> usize {
        Kind::ALL
            .iter()
            .position(|k| *k == self)
            .unwrap_or(Kind::ALL.len() - 1)
    }
}

/// The typed error an [`Error`] wraps.
#[derive(Debug)]
enum Source {
    Io(std::io::Error),
    Cgroup(sprout_cgroups::Error),
    Seccomp(sprout_seccomp::Error),
    Process(sprout_process::Error),
}

#[derive(Debug)]
struct Inner {
    kind: Kind,
    /// The rendered one-line message (`contexts[0]: … : base`).
    msg: String,
    /// The context chain, outermost first.
    contexts: Vec<String>,
    /// The config field the error names (`mounts[3].uidMappings`), when the constructor knows it.
    field: Option<String>,
    source: Option<Source>,
}

/// Boxed so that `Result<T>` stays one pointer wide on the (hot) success path.
pub struct Error(Box<Inner>);

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    fn build(kind: Kind, msg: String, field: Option<String>, source: Option<Source>) -> Error {
        Error(Box::new(Inner {
            kind,
            msg,
            contexts: Vec::new(),
            field,
            source,
        }))
    }

    /// A plain message (kind [`Kind::Other`]).
    pub fn msg(msg: impl Into<String>) -> Error {
        Error::build(Kind::Other, msg.into(), None, None)
    }
    /// A plain message of the given kind.
    pub fn new(kind: Kind, msg: impl Into<String>) -> Error {
        Error::build(kind, msg.into(), None, None)
    }
    /// A config error naming its field: renders `field: msg`, kind [`Kind::Config`].
    pub fn field(field: impl Into<String>, msg: impl fmt::Display) -> Error {
        let field = field.into();
        Error::build(Kind::Config, format!("{field}: {msg}"), Some(field), None)
    }
    /// An OS error, prefixed with what was being done: renders `what: err`, kind [`Kind::Os`].
    pub fn os(what: impl fmt::Display, err: std::io::Error) -> Error {
        Error::build(
            Kind::Os,
            format!("{what}: {err}"),
            None,
            Some(Source::Io(err)),
        )
    }
    /// [`Error::os`] with the current `errno`.
    pub fn last_os(what: impl fmt::Display) -> Error {
        Error::os(what, std::io::Error::last_os_error())
    }
    /// A failed execve of `path` as runc words it (`field: exec PATH: no such file or
    /// directory`: the errno as Go writes it; podman and runc's tests read that text), kind
    /// [`Kind::Os`] with the errno kept.
    pub fn exec_failed(field: &str, path: &str, err: std::io::Error) -> Error {
        let text = match err.raw_os_error().and_then(go_errno_text) {
            Some(t) => t.to_string(),
            None => err.to_string(),
        };
        Error::build(
            Kind::Os,
            format!("{field}: exec {path}: {text}"),
            Some(field.to_string()),
            Some(Source::Io(err)),
        )
    }
    /// Prefix the message with what was being done (`what: message`); kind, source and field
    /// are kept.
    pub fn context(mut self, what: impl fmt::Display) -> Error {
        let what = what.to_string();
        self.0.msg = format!("{what}: {}", self.0.msg);
        self.0.contexts.insert(0, what);
        self
    }
    /// The same error, of another kind (e.g. an OS error met while running a hook is a
    /// [`Kind::Hook`] failure; its errno stays).
    pub fn with_kind(mut self, kind: Kind) -> Error {
        self.0.kind = kind;
        self
    }

    /// The one-line message (the same text as `Display`).
    pub fn message(&self) -> &str {
        &self.0.msg
    }
    pub fn kind(&self) -> Kind {
        self.0.kind
    }
    /// The config field the error names, where its constructor knew it ([`Error::field`],
    /// [`bail_field!`](crate::bail_field)).
    pub fn field_path(&self) -> Option<&str> {
        self.0.field.as_deref()
    }
    /// The context chain, outermost first (the prefixes `context` added to the message).
    pub fn contexts(&self) -> impl Iterator<Item = &str> {
        self.0.contexts.iter().map(String::as_str)
    }
    /// The errno of the OS error this error wraps, directly or inside a cgroups, seccomp or
    /// process error.
    pub fn errno(&self) -> Option<i32> {
        match self.0.source.as_ref()? {
            Source::Io(e) => e.raw_os_error(),
            Source::Cgroup(e) => e.raw_os_error(),
            Source::Seccomp(sprout_seccomp::Error::Io(e)) => e.raw_os_error(),
            Source::Seccomp(_) => None,
            Source::Process(sprout_process::Error::Sys { source, .. }) => source.raw_os_error(),
            Source::Process(_) => None,
        }
    }
}

impl Error {
    /// The error as the container's init (or exec's child) sends it to the runtime over the sync
    /// channel: `kind:errno:message` (errno empty when there is none), so that the parent's
    /// error keeps its kind and errno, not only its text.
    pub fn to_wire(&self) -> String {
        let errno = self.errno().map(|n| n.to_string()).unwrap_or_default();
        format!("{}:{errno}:{}", self.kind().code(), self.message())
    }
    /// The error [`Error::to_wire`] sent: same message, kind and errno (the errno as an
    /// `io::Error` source: a typed cgroups/seccomp/process source does not cross the channel).
    /// A payload of another form is a plain message.
    pub fn from_wire(payload: &str) -> Error {
        let mut parts = payload.splitn(3, ':');
        let (Some(kind), Some(errno), Some(msg)) = (parts.next(), parts.next(), parts.next())
        else {
            return Error::msg(payload);
        };
        let Some(kind) = kind.parse::<usize>().ok().and_then(|k| Kind::ALL.get(k)) else {
            return Error::msg(payload);
        };
        let source = match errno {
            "" => None,
            n => match n.parse::<i32>() {
                Ok(n) => Some(Source::Io(std::io::Error::from_raw_os_error(n))),
                Err(_) => return Error::msg(payload),
            },
        };
        Error::build(*kind, msg.to_string(), None, source)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.msg)
    }
}

/// Written by hand rather than with thiserror: `source()` returns the wrapped error itself (so a
/// caller can downcast it to `io::Error` or `sprout_cgroups::Error`), not a wrapper enum.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.0.source.as_ref()? {
            Source::Io(e) => Some(e),
            Source::Cgroup(e) => Some(e),
            Source::Seccomp(e) => Some(e),
            Source::Process(e) => Some(e),
        }
    }
}

impl From<sprout_cgroups::Error> for Error {
    fn from(e: sprout_cgroups::Error) -> Error {
        Error::build(Kind::Cgroup, e.to_string(), None, Some(Source::Cgroup(e)))
    }
}
impl From<sprout_seccomp::Error> for Error {
    fn from(e: sprout_seccomp::Error) -> Error {
        Error::build(Kind::Seccomp, e.to_string(), None, Some(Source::Seccomp(e)))
    }
}
impl From<sprout_process::Error> for Error {
    fn from(e: sprout_process::Error) -> Error {
        Error::build(Kind::Process, e.to_string(), None, Some(Source::Process(e)))
    }
}

/// `bail!("...")` returns an `Error::msg(format!(...))`; `bail!(kind = Kind::State, "...")` an
/// `Error::new(kind, format!(...))`.
#[macro_export]
macro_rules! bail {
    (kind = $kind:expr, $($arg:tt)*) => {
        return Err($crate::error::Error::new($kind, format!($($arg)*)))
    };
    ($($arg:tt)*) => { return Err($crate::error::Error::msg(format!($($arg)*))) };
}

/// `bail_field!(field, "...")` returns an `Error::field(field, format!(...))`: a
/// [`Kind::Config`] error rendered `field: ...` that keeps the field path.
#[macro_export]
macro_rules! bail_field {
    ($field:expr, $($arg:tt)*) => {
        return Err($crate::error::Error::field($field, format!($($arg)*)))
    };
}

/// The errors execve gives, in Go's words (lower-case strerror), as runc prints them. The
/// trampoline (trampoline.c) has the same table.
pub fn go_errno_text(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "operation not permitted",
        libc::ENOENT => "no such file or directory",
        libc::E2BIG => "argument list too long",
        libc::ENOEXEC => "exec format error",
        libc::ENOMEM => "cannot allocate memory",
        libc::EACCES => "permission denied",
        libc::ENOTDIR => "not a directory",
        libc::EISDIR => "is a directory",
        libc::ETXTBSY => "text file busy",
        libc::ENAMETOOLONG => "file name too long",
        libc::ELOOP => "too many levels of symbolic links",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io;

    #[test]
    fn exec_failed_uses_runc_words_and_keeps_errno() {
        let e = Error::exec_failed("process.args", "/run.sh", io::Error::from_raw_os_error(2));
        assert_eq!(
            e.to_string(),
            "process.args: exec /run.sh: no such file or directory"
        );
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert_eq!(e.field_path(), Some("process.args"));
        let e = Error::exec_failed(
            "process.args",
            "/x",
            io::Error::from_raw_os_error(libc::EIO),
        );
        assert!(
            e.to_string()
                .starts_with("process.args: exec /x: Input/output error"),
            "{e}"
        );
    }

    #[test]
    fn msg_renders_as_given() {
        let e = Error::msg("container has no cgroup");
        assert_eq!(e.to_string(), "container has no cgroup");
        assert_eq!(e.message(), "container has no cgroup");
        assert_eq!(e.kind(), Kind::Other);
        assert!(e.source().is_none());
        assert_eq!(e.errno(), None);
        assert_eq!(e.field_path(), None);
    }

    #[test]
    fn new_keeps_its_kind() {
        let e = Error::new(Kind::NotFound, "container \"a\" does not exist");
        assert_eq!(e.to_string(), "container \"a\" does not exist");
        assert_eq!(e.kind(), Kind::NotFound);
    }

    #[test]
    fn os_renders_what_then_the_io_error_and_keeps_the_errno() {
        let io = io::Error::from_raw_os_error(libc::ENOENT);
        let want = format!("open /x: {io}");
        let e = Error::os("open /x", io);
        assert_eq!(e.to_string(), want);
        assert_eq!(e.message(), want);
        assert_eq!(e.kind(), Kind::Os);
        assert_eq!(e.errno(), Some(libc::ENOENT));
        let src = e.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(src.and_then(io::Error::raw_os_error), Some(libc::ENOENT));
    }

    #[test]
    fn last_os_takes_errno() {
        // SAFETY: close(-1) touches no memory; it fails with EBADF, which is what we want.
        let r = unsafe { libc::close(-1) };
        assert_eq!(r, -1);
        let e = Error::last_os("close");
        assert_eq!(e.errno(), Some(libc::EBADF));
        assert_eq!(
            e.to_string(),
            format!("close: {}", io::Error::from_raw_os_error(libc::EBADF))
        );
    }

    #[test]
    fn context_prefixes_and_keeps_kind_errno_and_field() {
        let e = Error::os("mkdir /data", io::Error::from_raw_os_error(libc::EACCES))
            .context("mounts[3] (/data)")
            .context("create");
        let io = io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(
            e.to_string(),
            format!("create: mounts[3] (/data): mkdir /data: {io}")
        );
        assert_eq!(e.kind(), Kind::Os);
        assert_eq!(e.errno(), Some(libc::EACCES));
        assert_eq!(
            e.contexts().collect::<Vec<_>>(),
            ["create", "mounts[3] (/data)"]
        );

        let e = Error::msg("inner").context("outer");
        assert_eq!(e.message(), "outer: inner");
        assert_eq!(e.kind(), Kind::Other);

        let e = Error::field("mounts[3].uidMappings", "must not be empty").context("create");
        assert_eq!(
            e.message(),
            "create: mounts[3].uidMappings: must not be empty"
        );
        assert_eq!(e.field_path(), Some("mounts[3].uidMappings"));
        assert_eq!(e.kind(), Kind::Config);
    }

    #[test]
    fn field_renders_field_then_message() {
        fn f(cwd: &str) -> Result<()> {
            crate::bail_field!("process.cwd", "{cwd:?} must be an absolute path");
        }
        let e = f("x").unwrap_err();
        assert_eq!(e.message(), "process.cwd: \"x\" must be an absolute path");
        assert_eq!(e.field_path(), Some("process.cwd"));
        assert_eq!(e.kind(), Kind::Config);
    }

    #[test]
    fn with_kind_keeps_message_and_errno() {
        let e = Error::os(
            "hooks.prestart[0] (/x)",
            io::Error::from_raw_os_error(libc::ENOENT),
        )
        .with_kind(Kind::Hook);
        assert_eq!(e.kind(), Kind::Hook);
        assert_eq!(e.errno(), Some(libc::ENOENT));
    }

    #[test]
    fn the_wire_form_keeps_message_kind_and_errno() {
        let e = Error::os("mount /proc", io::Error::from_raw_os_error(libc::EACCES))
            .context("mounts[2] (/proc)");
        let back = Error::from_wire(&e.to_wire());
        assert_eq!(back.message(), e.message());
        assert_eq!(back.kind(), Kind::Os);
        assert_eq!(back.errno(), Some(libc::EACCES));

        let e = Error::new(
            Kind::Hook,
            "hooks.createContainer[0] (/h): exited with status 1",
        );
        let back = Error::from_wire(&e.to_wire());
        assert_eq!(back.message(), e.message());
        assert_eq!(back.kind(), Kind::Hook);
        assert_eq!(back.errno(), None);

        for k in Kind::ALL {
            assert_eq!(Error::from_wire(&Error::new(k, "m: x").to_wire()).kind(), k);
        }
        // Anything else is a plain message, kept whole.
        for p in ["plain: text", "x:y:z", "99::m", "1:abc:m", ""] {
            let e = Error::from_wire(p);
            assert_eq!((e.message(), e.kind()), (p, Kind::Other));
        }
    }

    #[test]
    fn from_cgroups_keeps_the_typed_source_and_errno() {
        let cg = sprout_cgroups::Error::Io {
            path: "/sys/fs/cgroup/x".into(),
            source: io::Error::from_raw_os_error(libc::EBUSY),
        };
        let want = cg.to_string();
        let e = Error::from(cg);
        assert_eq!(e.to_string(), want);
        assert_eq!(e.kind(), Kind::Cgroup);
        assert_eq!(e.errno(), Some(libc::EBUSY));
        let src = e
            .source()
            .and_then(|s| s.downcast_ref::<sprout_cgroups::Error>())
            .expect("the cgroups error is the source");
        assert!(matches!(src, sprout_cgroups::Error::Io { .. }));
        assert_eq!(src.raw_os_error(), Some(libc::EBUSY));

        let e = Error::from(sprout_cgroups::Error::Invalid("bad".into()));
        assert_eq!(e.to_string(), "cgroup: bad");
        assert_eq!(e.errno(), None);
    }

    #[test]
    fn from_seccomp_and_process_render_their_display() {
        let e = Error::from(sprout_seccomp::Error::Invalid("bad arch".into()));
        assert_eq!(e.to_string(), "seccomp: bad arch");
        assert_eq!(e.kind(), Kind::Seccomp);
        let e = Error::from(sprout_seccomp::Error::Io(io::Error::from_raw_os_error(
            libc::EINVAL,
        )));
        assert_eq!(
            e.to_string(),
            format!("seccomp: {}", io::Error::from_raw_os_error(libc::EINVAL))
        );
        assert_eq!(e.errno(), Some(libc::EINVAL));

        let e = Error::from(sprout_process::Error::Invalid(
            "process.rlimits[0]: x".into(),
        ));
        assert_eq!(e.to_string(), "process.rlimits[0]: x");
        assert_eq!(e.kind(), Kind::Process);
        let e = Error::from(sprout_process::Error::Sys {
            what: "setuid".into(),
            source: io::Error::from_raw_os_error(libc::EPERM),
        });
        assert_eq!(
            e.to_string(),
            format!("setuid: {}", io::Error::from_raw_os_error(libc::EPERM))
        );
        assert_eq!(e.errno(), Some(libc::EPERM));
        assert!(e.source().is_some_and(|s| s.is::<sprout_process::Error>()));
    }
}
