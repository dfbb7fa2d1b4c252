//! `run`: create and start a container; in the foreground, wait and return its exit status.

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::Result;

use super::create::{self, CreateArgs};

#[derive(Args)]
pub struct RunArgs {
    #[arg(short = 'd', long)]
    pub detach: bool,
    #[arg(long = "keep")]
    pub keep: bool,
    #[command(flatten)]
    pub c: CreateArgs,
}

pub fn run(store: &Store, a: &RunArgs, systemd: bool, trace: &mut Trace) -> Result<i32> {
    let RunArgs { detach, keep, c } = a;
    let (detach, keep) = (*detach, *keep);
    if !detach {
        // From now on the signals we forward wait in the queue for the container
        // (a SIGTERM during create must not kill us and orphan it).
        lifecycle::block_forwarded_signals();
    }
    let pidfd_socket = create::pidfd_socket(c)?;
    let opts = create::create_opts(c, systemd);
    let created = sprout_runtime::create::create(store, &opts, trace, detach)?;
    create::send_pidfd(store, &c.id, pidfd_socket, &created, trace)?;
    if detach {
        // As runc's run: a container whose start failed (a poststart hook) is removed.
        if let Err(e) = lifecycle::start(store, &c.id, trace) {
            let _ = lifecycle::delete(store, &c.id, true, trace);
            return Err(e);
        }
        trace.emit("run", &c.id);
        return Ok(0);
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
