//! One error type for the runtime: every message is a single line that names the field or the
//! operation that failed, so that the CLI can print it as is (and containerd's shim can read it).

use std::fmt;

#[derive(Debug)]
pub struct Error {
    msg: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn msg(msg: impl Into<String>) -> Error {
        Error { msg: msg.into() }
    }
    /// An OS error, prefixed with what was being done.
    pub fn os(what: impl fmt::Display, err: std::io::Error) -> Error {
        Error {
            msg: format!("{what}: {err}"),
        }
    }
    pub fn last_os(what: impl fmt::Display) -> Error {
        Error::os(what, std::io::Error::last_os_error())
    }
    pub fn context(self, what: impl fmt::Display) -> Error {
        Error {
            msg: format!("{what}: {}", self.msg),
        }
    }
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<sprout_cgroups::Error> for Error {
    fn from(e: sprout_cgroups::Error) -> Error {
        Error::msg(e.to_string())
    }
}
impl From<sprout_seccomp::Error> for Error {
    fn from(e: sprout_seccomp::Error) -> Error {
        Error::msg(e.to_string())
    }
}
impl From<sprout_process::Error> for Error {
    fn from(e: sprout_process::Error) -> Error {
        Error::msg(e.to_string())
    }
}

/// `bail!("...")` returns an `Error::msg(format!(...))`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::Error::msg(format!($($arg)*))) };
}
