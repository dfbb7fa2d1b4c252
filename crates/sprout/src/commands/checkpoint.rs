//! `checkpoint` and `restore`: CRIU, with runc's flags (crates/runtime/src/criu.rs).

use std::path::PathBuf;

use clap::Args;
use sprout_runtime::criu::{self, CriuOpts, RestoreOpts};
use sprout_runtime::lifecycle;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::{Error, Result};

/// The flags `checkpoint` and `restore` share.
#[derive(Args, Clone, Default)]
pub struct CriuArgs {
    /// Path for the criu image files [default: ./checkpoint].
    #[arg(long = "image-path")]
    pub image_path: Option<PathBuf>,
    /// Path for criu's work files and logs [default: the image path].
    #[arg(long = "work-path")]
    pub work_path: Option<PathBuf>,
    /// Allow open TCP connections.
    #[arg(long = "tcp-established")]
    pub tcp_established: bool,
    /// Skip in-flight TCP connections.
    #[arg(long = "tcp-skip-in-flight")]
    pub tcp_skip_in_flight: bool,
    /// Allow unlinked files to be linked back when possible.
    #[arg(long = "link-remap")]
    pub link_remap: bool,
    /// Allow external unix sockets.
    #[arg(long = "ext-unix-sk")]
    pub ext_unix_sk: bool,
    /// Allow shell jobs.
    #[arg(long = "shell-job")]
    pub shell_job: bool,
    /// Handle file locks.
    #[arg(long = "file-locks")]
    pub file_locks: bool,
    /// cgroups mode: soft, full, strict or ignore [default: criu's, soft].
    #[arg(long = "manage-cgroups-mode")]
    pub manage_cgroups_mode: Option<String>,
    /// Create a namespace but do not restore its properties (network only).
    #[arg(long = "empty-ns")]
    pub empty_ns: Vec<String>,
    /// Deduplicate memory images.
    #[arg(long = "auto-dedup")]
    pub auto_dedup: bool,
    /// Restore memory pages lazily with userfaultfd (not supported).
    #[arg(long = "lazy-pages")]
    pub lazy_pages: bool,
}

#[derive(Args)]
pub struct CheckpointArgs {
    #[command(flatten)]
    pub c: CriuArgs,
    /// Path of an earlier pre-dump's images, relative to --image-path.
    #[arg(long = "parent-path")]
    pub parent_path: Option<PathBuf>,
    /// Leave the container running after the checkpoint.
    #[arg(long = "leave-running")]
    pub leave_running: bool,
    /// Dump the memory only and leave the container running.
    #[arg(long = "pre-dump")]
    pub pre_dump: bool,
    /// ADDRESS:PORT of a criu page server.
    #[arg(long = "page-server")]
    pub page_server: Option<String>,
    /// criu writes \0 to this fd once lazy pages are ready (with --lazy-pages only).
    #[arg(long = "status-fd")]
    pub status_fd: Option<i32>,
    pub id: String,
}

#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub c: CriuArgs,
    /// Path to the bundle (defaults to the current directory).
    #[arg(short = 'b', long, default_value = ".")]
    pub bundle: PathBuf,
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    #[arg(short = 'd', long)]
    pub detach: bool,
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// Accepted for runc compatibility (the restored init is this process's child).
    #[arg(long = "no-subreaper")]
    pub no_subreaper: bool,
    #[arg(long = "no-pivot")]
    pub no_pivot: bool,
    /// LSM profile for the restored process (TYPE:NAME).
    #[arg(long = "lsm-profile")]
    pub lsm_profile: Option<String>,
    /// LSM mount context for the restored mounts.
    #[arg(long = "lsm-mount-context")]
    pub lsm_mount_context: Option<String>,
    pub id: String,
}

fn opts(c: &CriuArgs, criu_bin: Option<&str>) -> Result<CriuOpts> {
    let image_path = match &c.image_path {
        Some(p) if !p.as_os_str().is_empty() => p.clone(),
        _ => std::env::current_dir()
            .map_err(|e| Error::os("--image-path: the current directory", e))?
            .join("checkpoint"),
    };
    Ok(CriuOpts {
        criu: criu_bin.map(PathBuf::from),
        image_path,
        work_path: c.work_path.clone().filter(|p| !p.as_os_str().is_empty()),
        tcp_established: c.tcp_established,
        tcp_skip_in_flight: c.tcp_skip_in_flight,
        link_remap: c.link_remap,
        ext_unix_sk: c.ext_unix_sk,
        shell_job: c.shell_job,
        file_locks: c.file_locks,
        manage_cgroups_mode: c.manage_cgroups_mode.clone().filter(|m| !m.is_empty()),
        empty_ns: c.empty_ns.clone(),
        auto_dedup: c.auto_dedup,
        lazy_pages: c.lazy_pages,
        ..Default::default()
    })
}

pub fn checkpoint(
    store: &Store,
    a: &CheckpointArgs,
    criu_bin: Option<&str>,
    trace: &mut Trace,
) -> Result<i32> {
    let mut o = opts(&a.c, criu_bin)?;
    o.parent_path = a.parent_path.clone().filter(|p| !p.as_os_str().is_empty());
    o.leave_running = a.leave_running;
    o.pre_dump = a.pre_dump;
    o.page_server = a.page_server.clone().filter(|s| !s.is_empty());
    o.status_fd = a.status_fd.filter(|fd| *fd >= 0);
    criu::checkpoint(store, &a.id, &o, trace)?;
    trace.emit("checkpoint", &a.id);
    Ok(0)
}

pub fn restore(
    store: &Store,
    a: &RestoreArgs,
    criu_bin: Option<&str>,
    systemd: bool,
    trace: &mut Trace,
) -> Result<i32> {
    let mut c = opts(&a.c, criu_bin)?;
    c.lsm_profile = a.lsm_profile.clone().filter(|s| !s.is_empty());
    c.lsm_mount_context = a.lsm_mount_context.clone().filter(|s| !s.is_empty());
    let o = RestoreOpts {
        id: a.id.clone(),
        bundle: a.bundle.clone(),
        pid_file: a.pid_file.clone(),
        console_socket: a.console_socket.clone(),
        detach: a.detach,
        no_pivot: a.no_pivot,
        no_subreaper: a.no_subreaper,
        systemd_cgroup: systemd,
    };
    if !a.detach {
        lifecycle::block_forwarded_signals();
    }
    let r = criu::restore(store, &o, &c, trace)?;
    if a.detach {
        trace.emit("restore", &a.id);
        return Ok(0);
    }
    // In the foreground, as `run`: wait for the restored init and remove the container.
    let code = lifecycle::wait_forwarding(&r.pidfd, r.state.pid)?;
    lifecycle::delete_reaped(store, &r.state, trace)?;
    trace.emit("restore", &a.id);
    Ok(code)
}
