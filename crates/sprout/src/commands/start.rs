//! `start`: start a created container.

use clap::Args;
use sprout_runtime::lifecycle;
use sprout_runtime::notify_socket::{self, NotifySocket};
use sprout_runtime::state::Status;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::Result;

#[derive(Args)]
pub struct StartArgs {
    pub id: String,
}

pub fn run(store: &Store, a: &StartArgs, trace: &mut Trace) -> Result<i32> {
    // NOTIFY_SOCKET (only read here: no syscall without it): as runc's start, the container's
    // socket is bound before it starts, and `start` returns once it said READY=1 (forwarded
    // with MAINPID=<its init>) or its init is gone.
    let Some(host) = notify_socket::host_from_env() else {
        lifecycle::start(store, &a.id, trace)?;
        trace.emit("start", &a.id);
        return Ok(0);
    };
    let notify = match store.load(&a.id) {
        Ok(st) if st.status(store) == Status::Created => {
            let dir = store.dir(&a.id);
            // A container created without NOTIFY_SOCKET has no notify directory: nothing to
            // wait for (runc's start fails to bind there and does not start it).
            if notify_socket::dir_of(&dir).is_dir() {
                Some((NotifySocket::bind(&dir, host)?, st.pid))
            } else {
                None
            }
        }
        // Not there, or not created: `start` says so below.
        _ => None,
    };
    if let Err(e) = lifecycle::start(store, &a.id, trace) {
        if let Some((n, _)) = notify {
            n.remove();
        }
        return Err(e);
    }
    if let Some((n, pid)) = notify {
        n.wait_ready_pid(pid)?;
    }
    trace.emit("start", &a.id);
    Ok(0)
}
