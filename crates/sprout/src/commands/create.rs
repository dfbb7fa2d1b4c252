//! `create`: make a container whose process waits for `start`; the flags `run` shares.

use std::path::PathBuf;

use clap::Args;
use sprout_runtime::create::{self, CreateOpts};
use sprout_runtime::lifecycle;
use sprout_runtime::notify_socket;
use sprout_runtime::pidfd_socket::PidfdSocket;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::Result;

#[derive(Args, Clone, Default)]
pub struct CreateArgs {
    /// Path to the bundle (defaults to the current directory).
    #[arg(short = 'b', long, default_value = ".")]
    pub bundle: PathBuf,
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    #[arg(long = "no-pivot")]
    pub no_pivot: bool,
    #[arg(long = "no-new-keyring")]
    pub no_new_keyring: bool,
    #[arg(long = "preserve-fds", default_value_t = 0)]
    pub preserve_fds: u32,
    /// Send a pidfd for the container's init to this unix socket (SCM_RIGHTS).
    #[arg(long = "pidfd-socket")]
    pub pidfd_socket: Option<PathBuf>,
    pub id: String,
}

pub fn create_opts(c: &CreateArgs, systemd: bool) -> CreateOpts {
    CreateOpts {
        id: c.id.clone(),
        bundle: c.bundle.clone(),
        pid_file: c.pid_file.clone(),
        console_socket: c.console_socket.clone(),
        no_pivot: c.no_pivot,
        no_new_keyring: c.no_new_keyring,
        preserve_fds: c.preserve_fds,
        systemd_cgroup: systemd,
        // runc reads it for `create` and `run` (in the bundle directory: a relative path is the
        // bundle's). No syscall here.
        notify_socket: notify_socket::host_from_env()
            .map(|h| notify_socket::in_bundle(h, &c.bundle)),
    }
}

/// `--pidfd-socket`: connected before anything is made, so a bad path leaves nothing.
pub fn pidfd_socket(c: &CreateArgs) -> Result<Option<PidfdSocket>> {
    c.pidfd_socket
        .as_deref()
        .map(PidfdSocket::connect)
        .transpose()
}

/// Send the new init's pidfd; if that fails the container goes again (runc's create and run
/// fail and destroy it).
pub fn send_pidfd(
    store: &Store,
    id: &str,
    sock: Option<PidfdSocket>,
    created: &create::Created,
    trace: &mut Trace,
) -> Result<()> {
    let Some(s) = sock else { return Ok(()) };
    if let Err(e) = s.send(&created.pidfd) {
        let _ = lifecycle::delete(store, id, true, trace);
        return Err(e);
    }
    Ok(())
}

pub fn run(store: &Store, c: &CreateArgs, systemd: bool, trace: &mut Trace) -> Result<i32> {
    let pidfd_socket = pidfd_socket(c)?;
    let opts = create_opts(c, systemd);
    let created = create::create(store, &opts, trace, true)?;
    send_pidfd(store, &c.id, pidfd_socket, &created, trace)?;
    trace.emit("create", &c.id);
    Ok(0)
}
