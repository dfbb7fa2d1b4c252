//! sprout's OCI runtime library. The CLI (crates/sprout) is a thin layer over these functions.
//!
//! Start path (see docs/architecture.md): config.rs parses and validates, create.rs makes the
//! state dir, cgroup and seccomp filter, then one clone3 into every namespace; init.rs sets up the
//! rootfs and process inside and waits on the exec fifo; lifecycle.rs starts, signals, deletes.

pub mod config;
pub mod console;
pub mod create;
pub mod criu;
pub mod error;
pub mod exec;
pub mod features;
pub mod hooks;
pub mod idmap;
pub mod init;
pub mod keycase;
pub mod lifecycle;
pub mod log;
pub mod namespaces;
pub mod netdev;
pub mod netns;
pub mod notify_socket;
pub mod numa;
pub mod pidfd_socket;
pub mod rootfs;
pub mod spec_default;
pub mod state;
pub mod sync;
pub mod sys;
pub mod trace;
pub mod trampoline;
pub mod tty;

pub use error::{Error, Kind, Result};
