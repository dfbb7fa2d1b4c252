//! sprout: the runc-compatible command line over sprout-runtime. Thin by design: parse, call the
//! library, print, map errors to one line on stderr (and the --log file) and a non-zero exit.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use sprout_runtime::create::{self, CreateOpts};
use sprout_runtime::exec::{self, ExecOpts};
use sprout_runtime::lifecycle;
use sprout_runtime::log::{self, LogConfig};
use sprout_runtime::pidfd_socket::PidfdSocket;
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::{Error, Result};

#[cfg_attr(not(target_env = "musl"), allow(dead_code))]
mod arena;

/// musl's allocator only: glibc's is fast enough that the arena did not pay for its extra
/// resident memory there (docs/performance.md).
#[cfg(all(target_env = "musl", not(test)))]
#[global_allocator]
// SAFETY: the only Arena of the binary (Arena::new's contract).
static ALLOC: arena::Arena = unsafe { arena::Arena::new() };

#[derive(Parser)]
#[command(
    name = "sprout",
    about = "a fast OCI container runtime (runc-compatible command line)",
    disable_version_flag = true
)]
struct Cli {
    /// Directory for container state (should be on tmpfs) [default: /run/sprout; rootless:
    /// $XDG_RUNTIME_DIR/sprout, else /run/user/<euid>/sprout when that directory exists].
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// Log file (errors are always written here too).
    #[arg(long, global = true)]
    log: Option<PathBuf>,
    /// Log format: text or json.
    #[arg(long = "log-format", global = true, default_value = "text")]
    log_format: String,
    #[arg(long, global = true)]
    debug: bool,
    /// Use systemd for cgroups (needs a running systemd).
    #[arg(long = "systemd-cgroup", global = true)]
    systemd_cgroup: bool,
    /// Accepted for runc compatibility (rootless is detected from the euid).
    #[arg(long = "rootless", id = "global_rootless")]
    rootless: Option<String>,
    /// Accepted for runc compatibility.
    #[arg(long)]
    criu: Option<String>,
    /// Print the phase trace (also SPROUT_TRACE=1).
    #[arg(long, global = true)]
    trace: bool,
    /// Print the version.
    #[arg(short = 'v', long = "version")]
    version: bool,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Args, Clone, Default)]
struct CreateArgs {
    /// Path to the bundle (defaults to the current directory).
    #[arg(short = 'b', long, default_value = ".")]
    bundle: PathBuf,
    #[arg(long = "pid-file")]
    pid_file: Option<PathBuf>,
    #[arg(long = "console-socket")]
    console_socket: Option<PathBuf>,
    #[arg(long = "no-pivot")]
    no_pivot: bool,
    #[arg(long = "no-new-keyring")]
    no_new_keyring: bool,
    #[arg(long = "preserve-fds", default_value_t = 0)]
    preserve_fds: u32,
    /// Send a pidfd for the container's init to this unix socket (SCM_RIGHTS).
    #[arg(long = "pidfd-socket")]
    pidfd_socket: Option<PathBuf>,
    id: String,
}

/// `update`'s flags, runc's names. The byte sizes, --cpu-quota, --cpu-rt-runtime and
/// --pids-limit take -1 for unlimited (`--memory -1` as well as `--memory=-1`).
#[derive(Args)]
struct UpdateArgs {
    #[arg(short = 'r', long)]
    resources: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    memory: Option<String>,
    #[arg(long = "memory-swap", allow_negative_numbers = true)]
    memory_swap: Option<String>,
    #[arg(long = "memory-reservation", allow_negative_numbers = true)]
    memory_reservation: Option<String>,
    /// CPU shares (runc spells it --cpu-share; both are accepted).
    #[arg(long = "cpu-shares", visible_alias = "cpu-share")]
    cpu_shares: Option<u64>,
    #[arg(long = "cpu-quota", allow_negative_numbers = true)]
    cpu_quota: Option<i64>,
    #[arg(long = "cpu-period")]
    cpu_period: Option<u64>,
    /// CPU realtime period in microseconds (cgroup v1 cpu.rt_period_us).
    #[arg(long = "cpu-rt-period")]
    cpu_rt_period: Option<u64>,
    /// CPU realtime runtime in microseconds within the period (cgroup v1 cpu.rt_runtime_us).
    #[arg(long = "cpu-rt-runtime", allow_negative_numbers = true)]
    cpu_rt_runtime: Option<i64>,
    #[arg(long = "cpuset-cpus")]
    cpuset_cpus: Option<String>,
    #[arg(long = "cpuset-mems")]
    cpuset_mems: Option<String>,
    #[arg(long = "pids-limit", allow_negative_numbers = true)]
    pids_limit: Option<i64>,
    #[arg(long = "blkio-weight")]
    blkio_weight: Option<u16>,
    id: String,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a container (its process waits for `start`).
    Create(CreateArgs),
    /// Start a created container.
    Start { id: String },
    /// Create and start a container; in the foreground, wait and return its exit status.
    Run {
        #[arg(short = 'd', long)]
        detach: bool,
        #[arg(long = "keep")]
        keep: bool,
        #[command(flatten)]
        c: CreateArgs,
    },
    /// Print the state of a container as JSON.
    State { id: String },
    /// Send a signal to the container's init (default SIGTERM).
    Kill {
        #[arg(short = 'a', long)]
        all: bool,
        id: String,
        signal: Option<String>,
    },
    /// Delete a container.
    Delete {
        #[arg(short = 'f', long)]
        force: bool,
        id: String,
    },
    /// List containers.
    List {
        #[arg(short = 'q', long)]
        quiet: bool,
        #[arg(short = 'f', long, default_value = "table")]
        format: String,
    },
    /// Run a new process inside a container.
    Exec {
        #[arg(short = 'p', long = "process")]
        process: Option<PathBuf>,
        #[arg(short = 't', long)]
        tty: bool,
        #[arg(long)]
        cwd: Option<PathBuf>,
        #[arg(short = 'e', long = "env")]
        env: Vec<String>,
        #[arg(short = 'u', long)]
        user: Option<String>,
        #[arg(short = 'g', long = "additional-gids")]
        additional_gids: Vec<u32>,
        #[arg(short = 'c', long = "cap")]
        cap: Vec<String>,
        #[arg(short = 'd', long)]
        detach: bool,
        #[arg(long = "pid-file")]
        pid_file: Option<PathBuf>,
        #[arg(long = "console-socket")]
        console_socket: Option<PathBuf>,
        #[arg(long = "preserve-fds", default_value_t = 0)]
        preserve_fds: u32,
        #[arg(long = "process-label")]
        process_label: Option<String>,
        #[arg(long)]
        apparmor: Option<String>,
        #[arg(long = "no-new-privs")]
        no_new_privs: bool,
        /// Allow exec in a paused container (the process runs once it is resumed).
        #[arg(long = "ignore-paused")]
        ignore_paused: bool,
        /// Send a pidfd for the process to this unix socket (SCM_RIGHTS).
        #[arg(long = "pidfd-socket")]
        pidfd_socket: Option<PathBuf>,
        /// Run the process in an existing sub-cgroup of the container's: [CTRL[,CTRL]:]PATH
        /// (the controller form is cgroup v1 only, repeatable).
        #[arg(long = "cgroup")]
        cgroup: Vec<String>,
        id: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Suspend every process of a container.
    Pause { id: String },
    /// Resume a paused container.
    Resume { id: String },
    /// List the processes of a container: ps(1) with the given options (default -ef), its rows
    /// of the container's processes only; `-f json`: a JSON array of their host pids.
    Ps {
        #[arg(short = 'f', long, default_value = "table")]
        format: String,
        id: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        ps_args: Vec<String>,
    },
    /// Update a container's resource limits.
    Update(UpdateArgs),
    /// Print container events: resource stats every --interval and OOM notifications, as JSON
    /// lines (runc's format); --stats prints the stats once.
    Events {
        #[arg(long)]
        stats: bool,
        #[arg(long, default_value = "5s")]
        interval: String,
        id: String,
    },
    /// Write a default config.json.
    Spec {
        #[arg(short = 'b', long, default_value = ".")]
        bundle: PathBuf,
        #[arg(long)]
        rootless: bool,
    },
    /// Print the runtime's features as JSON.
    Features,
    /// Run the serverless engine or its CLI: execs `sprout-serve` (next to this binary, else
    /// from $PATH) with every argument (`sprout serve --help`, `handler add|remove|list`,
    /// `cleanup`, `rootfs build`). See docs/serve.md.
    #[command(disable_help_flag = true)]
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// `sprout [global options] serve ARGS...`: the arguments after `serve`, verbatim (clap would
/// take `--debug`, `--trace`, ... after the subcommand as sprout's own global options).
fn serve_args(argv: &[std::ffi::OsString]) -> Option<Vec<std::ffi::OsString>> {
    const WITH_VALUE: &[&str] = &["--root", "--log", "--log-format", "--rootless", "--criu"];
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].to_str()?;
        if a == "serve" {
            return Some(argv[i + 1..].to_vec());
        }
        if WITH_VALUE.contains(&a) {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return None;
        }
    }
    None
}

/// Exec `sprout-serve` (the daemon stays a separate binary: tokio and hyper are not linked
/// into `sprout`, whose start path stays small). Returns only on failure.
fn exec_serve(args: &[std::ffi::OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    const NAME: &str = "sprout-serve";
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(NAME)))
        .filter(|p| p.is_file());
    let found = beside.or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(NAME))
                .find(|p| p.is_file())
        })
    });
    let Some(bin) = found else {
        eprintln!(
            "sprout: serve: {NAME} not found next to {} or in $PATH (build it: cargo build --release -p sprout-serve)",
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "sprout".into())
        );
        return ExitCode::from(127);
    };
    let err = std::process::Command::new(&bin)
        .arg0(NAME)
        .args(args)
        .exec();
    eprintln!("sprout: serve: exec {}: {err}", bin.display());
    ExitCode::from(126)
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(args) = serve_args(&argv) {
        return exec_serve(&args);
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // As runc (configLogrus): a bad --log-format or a --log file that cannot be opened fails
    // every command before it does anything.
    if !matches!(cli.log_format.as_str(), "" | "text" | "json") {
        eprintln!(
            "sprout: --log-format: invalid value {:?} (text or json)",
            cli.log_format
        );
        return ExitCode::from(1);
    }
    if let Some(path) = &cli.log {
        if let Err(e) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            eprintln!("sprout: --log {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    log::init(LogConfig {
        file: cli.log.clone(),
        json: cli.log_format == "json",
        debug: cli.debug,
    });
    if cli.version {
        println!(
            "sprout version {}\nspec: {}",
            env!("CARGO_PKG_VERSION"),
            sprout_runtime::config::OCI_VERSION
        );
        return ExitCode::SUCCESS;
    }
    // runc exits 255 when `exec` fails (fatalWithCode(..., 255)), 1 for every other command, so
    // that a caller can tell a failed exec from the process's own exit status.
    let fail_code = if matches!(cli.cmd, Some(Cmd::Exec { .. })) {
        255
    } else {
        1
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            let msg = e.to_string();
            log::error(&msg);
            eprintln!("sprout: {msg}");
            ExitCode::from(fail_code)
        }
    }
}

fn print_json(v: &serde_json::Value) -> Result<()> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Error::msg(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
    Ok(())
}

fn create_opts(c: &CreateArgs, systemd: bool) -> CreateOpts {
    CreateOpts {
        id: c.id.clone(),
        bundle: c.bundle.clone(),
        pid_file: c.pid_file.clone(),
        console_socket: c.console_socket.clone(),
        no_pivot: c.no_pivot,
        no_new_keyring: c.no_new_keyring,
        preserve_fds: c.preserve_fds,
        systemd_cgroup: systemd,
    }
}

/// Where state lives without `--root`, runc's rule (main.go, shouldHonorXDGRuntimeDir) with
/// sprout's name: `$XDG_RUNTIME_DIR/sprout` when rootless (a non-root euid, or euid 0 in a
/// user namespace unless `$USER` is "root") and XDG_RUNTIME_DIR is set; a rootless
/// non-root euid without it gets `/run/user/<euid>/sprout` when /run/user/<euid> exists
/// (crun's fallback; runc would try /run/runc and fail); else `/run/sprout`.
/// The bool: the directory is in XDG_RUNTIME_DIR (made 0700 + sticky, as runc does, so the
/// XDG clean-up leaves it alone).
fn default_root(
    euid: u32,
    rootless: bool,
    xdg_runtime_dir: Option<&str>,
    user: Option<&str>,
    run_user_exists: impl FnOnce(&str) -> bool,
) -> (PathBuf, bool) {
    let honor_xdg = rootless && (euid != 0 || user != Some("root"));
    if honor_xdg {
        if let Some(x) = xdg_runtime_dir.filter(|x| !x.is_empty()) {
            return (PathBuf::from(x).join("sprout"), true);
        }
        let run_user = format!("/run/user/{euid}");
        if euid != 0 && run_user_exists(&run_user) {
            return (PathBuf::from(run_user).join("sprout"), true);
        }
    }
    (PathBuf::from("/run/sprout"), false)
}

/// `--root`, or [`default_root`] for this process (made, 0700 + sticky, when in the user's
/// runtime directory).
fn state_root(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(r) = explicit {
        let abs = std::path::absolute(&r).unwrap_or(r);
        if abs == std::path::Path::new("/") {
            return Err(Error::msg("--root must not be /"));
        }
        return Ok(abs);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let xdg = std::env::var("XDG_RUNTIME_DIR").ok();
    let user = std::env::var("USER").ok();
    let (root, in_xdg) = default_root(
        euid,
        sprout_cgroups::running_rootless(),
        xdg.as_deref(),
        user.as_deref(),
        |p| std::path::Path::new(p).is_dir(),
    );
    if in_xdg {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root);
        let chmod = made.and_then(|()| {
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o1700))
        });
        if let Err(e) = chmod {
            return Err(Error::msg(format!(
                "state directory {} (the default --root when rootless): {e}",
                root.display()
            )));
        }
    }
    Ok(root)
}

/// `--pidfd-socket`: connected before anything is made, so a bad path leaves nothing.
fn pidfd_socket(c: &CreateArgs) -> Result<Option<PidfdSocket>> {
    c.pidfd_socket
        .as_deref()
        .map(PidfdSocket::connect)
        .transpose()
}

/// Send the new init's pidfd; if that fails the container goes again (runc's create and run
/// fail and destroy it).
fn send_pidfd(
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

fn run(cli: Cli) -> Result<i32> {
    let root = state_root(cli.root)?;
    let store = Store::new(&root);
    let mut trace = Trace::from_env(cli.trace);
    let Some(cmd) = cli.cmd else {
        return Err(Error::msg("no command given (try --help)"));
    };
    match cmd {
        Cmd::Create(c) => {
            let pidfd_socket = pidfd_socket(&c)?;
            let opts = create_opts(&c, cli.systemd_cgroup);
            let created = create::create(&store, &opts, &mut trace, true)?;
            send_pidfd(&store, &c.id, pidfd_socket, &created, &mut trace)?;
            trace.emit("create", &c.id);
            Ok(0)
        }
        Cmd::Start { id } => {
            lifecycle::start(&store, &id, &mut trace)?;
            trace.emit("start", &id);
            Ok(0)
        }
        Cmd::Run { detach, keep, c } => {
            if !detach {
                // From now on the signals we forward wait in the queue for the container
                // (a SIGTERM during create must not kill us and orphan it).
                lifecycle::block_forwarded_signals();
            }
            let pidfd_socket = pidfd_socket(&c)?;
            let opts = create_opts(&c, cli.systemd_cgroup);
            let created = create::create(&store, &opts, &mut trace, detach)?;
            send_pidfd(&store, &c.id, pidfd_socket, &created, &mut trace)?;
            if detach {
                // As runc's run: a container whose start failed (a poststart hook) is removed.
                if let Err(e) = lifecycle::start(&store, &c.id, &mut trace) {
                    let _ = lifecycle::delete(&store, &c.id, true, &mut trace);
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
                            let _ = lifecycle::delete_reaped(&store, &created.state, &mut trace);
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
                lifecycle::delete_reaped(&store, &created.state, &mut trace)?;
            }
            trace.emit("run", &c.id);
            Ok(code)
        }
        Cmd::State { id } => {
            print_json(&lifecycle::state_json(&store, &id)?)?;
            Ok(0)
        }
        Cmd::Kill { all, id, signal } => {
            let sig = lifecycle::parse_signal(signal.as_deref().unwrap_or("SIGTERM"))?;
            lifecycle::kill(&store, &id, sig, all)?;
            Ok(0)
        }
        Cmd::Delete { force, id } => {
            lifecycle::delete(&store, &id, force, &mut trace)?;
            trace.emit("delete", &id);
            Ok(0)
        }
        Cmd::List { quiet, format } => list(&store, quiet, &format),
        Cmd::Exec {
            process,
            tty,
            cwd,
            env,
            user,
            additional_gids,
            cap,
            detach,
            pid_file,
            console_socket,
            preserve_fds,
            process_label,
            apparmor,
            no_new_privs,
            ignore_paused,
            pidfd_socket,
            cgroup,
            id,
            args,
        } => {
            let o = ExecOpts {
                id: id.clone(),
                process_json: process,
                args,
                tty,
                cwd,
                env,
                user,
                additional_gids,
                caps: cap,
                detach,
                pid_file,
                console_socket,
                preserve_fds,
                process_label,
                apparmor,
                no_new_privs,
                ignore_paused,
                pidfd_socket,
                cgroup,
            };
            if !o.detach {
                lifecycle::block_forwarded_signals();
            }
            let code = exec::exec(&store, &o, &mut trace)?;
            trace.emit("exec", &id);
            Ok(code)
        }
        Cmd::Pause { id } => lifecycle::pause(&store, &id).map(|_| 0),
        Cmd::Resume { id } => lifecycle::resume(&store, &id).map(|_| 0),
        Cmd::Ps {
            format,
            id,
            ps_args,
        } => ps(&store, &id, &format, &ps_args),
        Cmd::Update(a) => update(&store, a),
        Cmd::Events {
            stats,
            interval,
            id,
        } => events(&store, &id, stats, &interval),
        Cmd::Spec { bundle, rootless } => {
            let path = bundle.join("config.json");
            if path.exists() {
                return Err(Error::msg(format!(
                    "{}: already exists, remove it first",
                    path.display()
                )));
            }
            let s =
                serde_json::to_string_pretty(&sprout_runtime::spec_default::default_spec(rootless))
                    .unwrap_or_default();
            std::fs::write(&path, s + "\n").map_err(|e| Error::os(path.display(), e))?;
            Ok(0)
        }
        Cmd::Features => {
            print_json(&sprout_runtime::features::features_json())?;
            Ok(0)
        }
        Cmd::Serve { args } => {
            let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
            exec_serve(&args);
            Ok(1)
        }
    }
}

/// runc's ps: `-f json` prints the pids; the table is ps(1)'s own output (`ps -ef` unless
/// options follow the id), its header and the rows whose PID column is one of the container's.
fn ps(store: &Store, id: &str, format: &str, ps_args: &[String]) -> Result<i32> {
    if !matches!(format, "table" | "json") {
        return Err(Error::msg(format!(
            "--format {format:?}: expected table or json"
        )));
    }
    let pids = lifecycle::pids(store, id)?;
    if format == "json" {
        let line = serde_json::to_string(&pids).map_err(|e| Error::msg(e.to_string()))?;
        println!("{line}");
        return Ok(0);
    }
    let args: Vec<&str> = if ps_args.is_empty() {
        vec!["-ef"]
    } else {
        ps_args.iter().map(String::as_str).collect()
    };
    let out = std::process::Command::new("ps")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::os("ps: running ps(1)", e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.split_whitespace().collect::<Vec<_>>().join(" ");
        return Err(Error::msg(format!(
            "ps {}: {}: {err}",
            args.join(" "),
            out.status
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let Some(col) = header.split_whitespace().position(|f| f == "PID") else {
        return Err(Error::msg(format!(
            "ps {}: couldn't find PID field in ps output",
            args.join(" ")
        )));
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{header}");
    for line in lines.filter(|l| !l.is_empty()) {
        let pid = line
            .split_whitespace()
            .nth(col)
            .and_then(|f| f.parse::<i32>().ok())
            .ok_or_else(|| Error::msg(format!("ps: unable to parse pid in {line:?}")))?;
        if pids.contains(&pid) {
            let _ = writeln!(stdout, "{line}");
        }
    }
    Ok(0)
}

/// One `list --format json` entry: runc's fields, in runc's order.
#[derive(serde::Serialize)]
struct ListEntry<'a> {
    #[serde(rename = "ociVersion")]
    oci_version: &'a str,
    id: &'a str,
    pid: i32,
    status: &'a str,
    bundle: &'a std::path::Path,
    rootfs: &'a std::path::Path,
    created: &'a str,
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    annotations: &'a std::collections::HashMap<String, String>,
    owner: &'a str,
}

fn list(store: &Store, quiet: bool, format: &str) -> Result<i32> {
    let ids = store.ids()?;
    if quiet {
        for id in ids {
            println!("{id}");
        }
        return Ok(0);
    }
    let mut rows = Vec::new();
    for id in &ids {
        if let Ok(st) = store.load(id) {
            let status = st.status(store);
            rows.push((st, status));
        }
    }
    match format {
        "json" => {
            let v: Vec<ListEntry> = rows
                .iter()
                .map(|(st, status)| ListEntry {
                    oci_version: sprout_runtime::config::OCI_VERSION,
                    id: &st.id,
                    pid: if *status == sprout_runtime::state::Status::Stopped {
                        0
                    } else {
                        st.pid
                    },
                    status: status.as_str(),
                    bundle: &st.bundle,
                    rootfs: &st.rootfs,
                    created: &st.created,
                    annotations: &st.annotations,
                    owner: if st.owner.is_empty() {
                        "root"
                    } else {
                        st.owner.as_str()
                    },
                })
                .collect();
            let line = serde_json::to_string(&v).map_err(|e| Error::msg(e.to_string()))?;
            println!("{line}");
        }
        "table" => {
            println!(
                "{:<20} {:<8} {:<10} {:<40} {:<32} OWNER",
                "ID", "PID", "STATUS", "BUNDLE", "CREATED"
            );
            for (st, status) in rows {
                let pid = if status == sprout_runtime::state::Status::Stopped {
                    0
                } else {
                    st.pid
                };
                println!(
                    "{:<20} {:<8} {:<10} {:<40} {:<32} root",
                    st.id,
                    pid,
                    status.as_str(),
                    st.bundle.display(),
                    st.created
                );
            }
        }
        other => {
            return Err(Error::msg(format!(
                "--format {other:?}: expected table or json"
            )))
        }
    }
    Ok(0)
}

fn parse_interval(s: &str) -> Result<std::time::Duration> {
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .parse()
        .map_err(|_| Error::msg(format!("--interval {s:?}: expected e.g. 5s, 500ms")))?;
    if v <= 0.0 {
        return Err(Error::msg(format!("--interval {s:?}: must be positive")));
    }
    Ok(std::time::Duration::from_secs_f64(v * mult))
}

fn events(store: &Store, id: &str, once: bool, interval: &str) -> Result<i32> {
    let every = parse_interval(interval)?;
    let st = store.load(id)?;
    let cg = st
        .cgroup
        .clone()
        .ok_or_else(|| Error::msg(format!("container {id:?} has no cgroup")))?;
    let emit = |typ: &str, data: serde_json::Value| {
        let line = serde_json::json!({"type": typ, "id": id, "data": data});
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let stats = || -> Result<serde_json::Value> {
        serde_json::to_value(cg.stats()?).map_err(|e| Error::msg(e.to_string()))
    };
    if once {
        emit("stats", stats()?);
        return Ok(0);
    }
    let mut oom = cg.oom_events().ok();
    loop {
        if st.status(store) == sprout_runtime::state::Status::Stopped {
            return Ok(0);
        }
        emit("stats", stats()?);
        match oom.as_mut() {
            Some(o) => match o.wait(Some(every))? {
                sprout_cgroups::OomWait::Oom(_) => emit("oom", serde_json::Value::Null),
                sprout_cgroups::OomWait::Gone => return Ok(0),
                _ => {}
            },
            None => std::thread::sleep(every),
        }
    }
}

fn parse_bytes(flag: &str, s: &str) -> Result<i64> {
    let s = s.trim();
    if s == "-1" {
        return Ok(-1);
    }
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_lowercase();
            let m: i64 = match unit.trim_end_matches('b').trim_end_matches('i') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(Error::msg(format!("{flag} {s:?}: unknown unit"))),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    let n: i64 = num
        .trim()
        .parse()
        .map_err(|_| Error::msg(format!("{flag} {s:?}: not a size")))?;
    if n < 0 {
        return Err(Error::msg(format!(
            "{flag} {s:?}: must be -1 (unlimited) or a size"
        )));
    }
    Ok(n * mult)
}

fn update(store: &Store, a: UpdateArgs) -> Result<i32> {
    let UpdateArgs {
        resources,
        memory,
        memory_swap,
        memory_reservation,
        cpu_shares,
        cpu_quota,
        cpu_period,
        cpu_rt_period,
        cpu_rt_runtime,
        cpuset_cpus,
        cpuset_mems,
        pids_limit,
        blkio_weight,
        id,
    } = a;
    let id = id.as_str();
    let st = store.load(id)?;
    if st.status(store) == sprout_runtime::state::Status::Stopped {
        return Err(Error::msg(format!(
            "container {id:?} is stopped: cannot update it"
        )));
    }
    let mut res: serde_json::Value = match resources {
        Some(p) => {
            let raw = if p == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| Error::os("reading resources from stdin", e))?;
                s
            } else {
                std::fs::read_to_string(&p).map_err(|e| Error::os(format!("--resources {p}"), e))?
            };
            serde_json::from_str(&raw)
                .map_err(|e| Error::msg(format!("--resources: invalid JSON: {e}")))?
        }
        None => serde_json::json!({}),
    };
    let obj = res
        .as_object_mut()
        .ok_or_else(|| Error::msg("--resources: expected a JSON object"))?;
    let mut set = |section: &str, key: &str, v: serde_json::Value| {
        let e = obj
            .entry(section.to_string())
            .or_insert_with(|| serde_json::json!({}));
        e[key] = v;
    };
    if let Some(m) = memory {
        set("memory", "limit", parse_bytes("--memory", &m)?.into());
    }
    if let Some(m) = memory_swap {
        set("memory", "swap", parse_bytes("--memory-swap", &m)?.into());
    }
    if let Some(m) = memory_reservation {
        set(
            "memory",
            "reservation",
            parse_bytes("--memory-reservation", &m)?.into(),
        );
    }
    if let Some(v) = cpu_shares {
        set("cpu", "shares", v.into());
    }
    if let Some(v) = cpu_quota {
        set("cpu", "quota", v.into());
    }
    if let Some(v) = cpu_period {
        set("cpu", "period", v.into());
    }
    if let Some(v) = cpu_rt_period {
        set("cpu", "realtimePeriod", v.into());
    }
    if let Some(v) = cpu_rt_runtime {
        set("cpu", "realtimeRuntime", v.into());
    }
    if let Some(v) = cpuset_cpus {
        set("cpu", "cpus", v.into());
    }
    if let Some(v) = cpuset_mems {
        set("cpu", "mems", v.into());
    }
    if let Some(v) = pids_limit {
        set("pids", "limit", v.into());
    }
    if let Some(v) = blkio_weight {
        set("blockIO", "weight", v.into());
    }
    let r: oci_spec::runtime::LinuxResources =
        serde_json::from_value(res).map_err(|e| Error::msg(format!("--resources: {e}")))?;
    st.cgroup
        .as_ref()
        .ok_or_else(|| Error::msg("container has no cgroup"))?
        .apply(&r)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::default_root;
    use std::path::PathBuf;

    #[test]
    fn default_root_follows_runc() {
        let never = |_: &str| false;
        // Real root: /run/sprout, whatever XDG_RUNTIME_DIR says (runc keeps /run/runc).
        assert_eq!(
            default_root(0, false, Some("/run/user/0"), Some("root"), never),
            (PathBuf::from("/run/sprout"), false)
        );
        // An unprivileged user: XDG_RUNTIME_DIR.
        assert_eq!(
            default_root(1000, true, Some("/run/user/1000"), Some("u"), never),
            (PathBuf::from("/run/user/1000/sprout"), true)
        );
        // Rootless podman: euid 0 in its user namespace, XDG_RUNTIME_DIR set.
        assert_eq!(
            default_root(0, true, Some("/run/user/1000"), None, never),
            (PathBuf::from("/run/user/1000/sprout"), true)
        );
        // ... unless $USER is root (runc's exception for root in a user namespace).
        assert_eq!(
            default_root(0, true, Some("/run/user/1000"), Some("root"), never),
            (PathBuf::from("/run/sprout"), false)
        );
        // No XDG_RUNTIME_DIR: /run/user/<euid> when it exists, else /run/sprout.
        assert_eq!(
            default_root(1000, true, None, None, |p| p == "/run/user/1000"),
            (PathBuf::from("/run/user/1000/sprout"), true)
        );
        assert_eq!(
            default_root(1000, true, Some(""), None, never),
            (PathBuf::from("/run/sprout"), false)
        );
    }
}
