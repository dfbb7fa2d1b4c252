//! `run`: create and start a container; in the foreground, wait and return its exit status.

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::Result;

use super::create::{self, CreateArgs};
use sprout_runtime::notify_socket::NotifySocket;
use std::os::fd::{AsFd, OwnedFd};

#[derive(Args)]
pub struct RunArgs {
    #[arg(short = 'd', long)]
    pub detach: bool,
    #[arg(long = "keep")]
    pub keep: bool,
    /// Accepted for runc's command line: sprout never makes itself a child subreaper (a
    /// container's orphans go to the caller's subreaper or pid 1, as with runc's flag).
    #[arg(long = "no-subreaper")]
    pub no_subreaper: bool,
    #[command(flatten)]
    pub c: CreateArgs,
}

pub fn run(store: &Store, a: &RunArgs, systemd: bool, trace: &mut Trace) -> Result<i32> {
    let RunArgs {
        detach, keep, c, ..
    } = a;
    let (detach, keep) = (*detach, *keep);
    if !detach {
        // From now on the signals we forward wait in the queue for the container
        // (a SIGTERM during create must not kill us and orphan it).
        lifecycle::block_forwarded_signals();
    }
    let pidfd_socket = create::pidfd_socket(c)?;
    let opts = create::create_opts(c, systemd);
    let mut created = sprout_runtime::create::create(store, &opts, trace, detach)?;
    create::send_pidfd(store, &c.id, pidfd_socket, &created, trace)?;
    if detach {
        // NOTIFY_SOCKET: the socket is bound before the container is started (as runc's run).
        let notify = match &opts.notify_socket {
            Some(host) => match NotifySocket::bind(&store.dir(&c.id), host.clone()) {
                Ok(n) => Some(n),
                Err(e) => {
                    let _ = lifecycle::delete(store, &c.id, true, trace);
                    return Err(e);
                }
            },
            None => None,
        };
        // As runc's run: a container whose start failed (a poststart hook) is removed.
        if let Err(e) = lifecycle::start(store, &c.id, trace) {
            let _ = lifecycle::delete(store, &c.id, true, trace);
            return Err(e);
        }
        if let Some(n) = notify {
            // As runc's `run -d`: returns once the container said READY=1 (forwarded with
            // MAINPID=<its init>) or its init is gone; a failure to forward does not fail the
            // command (runc ignores it; here it is a warning).
            if let Err(e) = n.wait_ready(created.pidfd.as_fd(), created.state.pid) {
                sprout_runtime::log::warn(e.message());
            }
        }
        trace.emit("run", &c.id);
        return Ok(0);
    }
    if let Some(n) = created.notify.take() {
        forward_ready_in_background(n, &created.pidfd);
    }
    // Foreground: the init did not wait for a fifo; poststart hooks run now.
    if let Some(h) = created.config.spec.hooks() {
        if h.poststart().as_ref().is_some_and(|v| !v.is_empty()) {
            if let Err(e) = lifecycle::run_poststart(&created.state, h) {
                if !keep {
                    let _ = lifecycle::delete_reaped(store, &created.state, trace);
                }
                return Err(e);
            }
        }
    }
    trace.mark("started");
    let code = match &created.console_rx {
        Some(rx) => {
            let master = sprout_runtime::tty::recv_master(rx)?;
            sprout_runtime::tty::proxy_and_wait(&created.pidfd, created.state.pid, master)?
        }
        None => lifecycle::wait_forwarding(&created.pidfd, created.state.pid)?,
    };
    trace.reset_last();
    if !keep {
        lifecycle::delete_reaped(store, &created.state, trace)?;
    }
    trace.emit("run", &c.id);
    Ok(code)
}

/// Foreground `run` with NOTIFY_SOCKET: a thread waits for the container's READY=1 and forwards
/// it with MAINPID=<our pid> (as runc's foreground run: the runtime is the process systemd
/// watches then), while this one goes on proxying and forwarding signals (the thread inherits
/// their blocked mask, so the signalfd of the wait still gets them). It ends when the container
/// does; runc's foreground wait, on its own pid, would wait for ever there.
fn forward_ready_in_background(n: NotifySocket, pidfd: &OwnedFd) {
    let pidfd = match pidfd.try_clone() {
        Ok(fd) => fd,
        Err(e) => {
            sprout_runtime::log::warn(&format!("NOTIFY_SOCKET: not forwarded: {e}"));
            return;
        }
    };
    let me = std::process::id() as i32;
    let spawned = std::thread::Builder::new()
        .name("notify".into())
        .spawn(move || {
            if let Err(e) = n.wait_ready(pidfd.as_fd(), me) {
                sprout_runtime::log::warn(e.message());
            }
        });
    if let Err(e) = spawned {
        sprout_runtime::log::warn(&format!("NOTIFY_SOCKET: not forwarded: {e}"));
    }
}
