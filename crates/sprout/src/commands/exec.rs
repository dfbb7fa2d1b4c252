//! `exec`: run a new process inside a container.

use std::path::PathBuf;

use clap::Args;
use sprout_runtime::exec::{self, ExecOpts};
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::Result;

#[derive(Args)]
pub struct ExecArgs {
    #[arg(short = 'p', long = "process")]
    pub process: Option<PathBuf>,
    #[arg(short = 't', long)]
    pub tty: bool,
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    #[arg(short = 'e', long = "env")]
    pub env: Vec<String>,
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    #[arg(short = 'g', long = "additional-gids")]
    pub additional_gids: Vec<u32>,
    #[arg(short = 'c', long = "cap")]
    pub cap: Vec<String>,
    #[arg(short = 'd', long)]
    pub detach: bool,
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    #[arg(long = "preserve-fds", default_value_t = 0)]
    pub preserve_fds: u32,
    #[arg(long = "process-label")]
    pub process_label: Option<String>,
    #[arg(long)]
    pub apparmor: Option<String>,
    #[arg(long = "no-new-privs")]
    pub no_new_privs: bool,
    /// Allow exec in a paused container (the process runs once it is resumed).
    #[arg(long = "ignore-paused")]
    pub ignore_paused: bool,
    /// Send a pidfd for the process to this unix socket (SCM_RIGHTS).
    #[arg(long = "pidfd-socket")]
    pub pidfd_socket: Option<PathBuf>,
    /// Run the process in an existing sub-cgroup of the container's: [CTRL[,CTRL]:]PATH
    /// (the controller form is cgroup v1 only, repeatable).
    #[arg(long = "cgroup")]
    pub cgroup: Vec<String>,
    pub id: String,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(store: &Store, a: ExecArgs, trace: &mut Trace) -> Result<i32> {
    // The flags map one to one onto the library's options (runc's names: --process, --cap).
    let o = ExecOpts {
        id: a.id,
        process_json: a.process,
        args: a.args,
        tty: a.tty,
        cwd: a.cwd,
        env: a.env,
        user: a.user,
        additional_gids: a.additional_gids,
        caps: a.cap,
        detach: a.detach,
        pid_file: a.pid_file,
        console_socket: a.console_socket,
        preserve_fds: a.preserve_fds,
        process_label: a.process_label,
        apparmor: a.apparmor,
        no_new_privs: a.no_new_privs,
        ignore_paused: a.ignore_paused,
        pidfd_socket: a.pidfd_socket,
        cgroup: a.cgroup,
    };
    if !o.detach {
        lifecycle::block_forwarded_signals();
    }
    let code = exec::exec(store, &o, trace)?;
    trace.emit("exec", &o.id);
    Ok(code)
}
