//! sprout: the runc-compatible command line over sprout-runtime. Thin by design: parse, call the
//! library, print, map errors to one line on stderr (and the --log file) and a non-zero exit.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sprout_runtime::log::{self, LogConfig};
use sprout_runtime::state::Store;
use sprout_runtime::trace::Trace;
use sprout_runtime::{Error, Result};

use commands::*;

#[cfg_attr(not(target_env = "musl"), allow(dead_code))]
mod arena;
mod commands;
mod root;

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
    /// Path to the criu binary for checkpoint and restore [default: criu on $PATH].
    #[arg(long, global = true)]
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

#[derive(Subcommand)]
enum Cmd {
    /// Create a container (its process waits for `start`).
    Create(create::CreateArgs),
    /// Start a created container.
    Start(start::StartArgs),
    /// Create and start a container; in the foreground, wait and return its exit status.
    Run(run::RunArgs),
    /// Print the state of a container as JSON.
    State(state::StateArgs),
    /// Send a signal to the container's init (default SIGTERM).
    Kill(kill::KillArgs),
    /// Delete a container.
    Delete(delete::DeleteArgs),
    /// List containers.
    List(list::ListArgs),
    /// Run a new process inside a container.
    Exec(exec::ExecArgs),
    /// Suspend every process of a container.
    Pause(pause::IdArg),
    /// Resume a paused container.
    Resume(pause::IdArg),
    /// List the processes of a container: ps(1) with the given options (default -ef), its rows
    /// of the container's processes only; `-f json`: a JSON array of their host pids.
    Ps(ps::PsArgs),
    /// Update a container's resource limits.
    Update(update::UpdateArgs),
    /// Print container events: resource stats every --interval and OOM notifications, as JSON
    /// lines (runc's format); --stats prints the stats once.
    Events(events::EventsArgs),
    /// Checkpoint a running container with CRIU (runc's flags).
    Checkpoint(checkpoint::CheckpointArgs),
    /// Restore a container from a CRIU checkpoint (runc's flags).
    Restore(checkpoint::RestoreArgs),
    /// Write a default config.json.
    Spec(spec::SpecArgs),
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

/// A panic ends the process at once (after the usual message), as `panic = "abort"` would: the
/// container's init and `exec`'s helper run this binary's code after clone3, and an unwinding
/// panic there would run the parent's code in the child. The workspace keeps unwinding for
/// sprout-serve (Cargo.toml); this one take/set of the hook is all it costs here.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

fn main() -> ExitCode {
    abort_on_panic();
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // go-runc (containerd's shim) spells restore's --no-subreaper with one dash, which runc's
    // flag parser takes. restore has no process arguments, so the word cannot be one of those.
    if argv.iter().any(|a| a == "restore") {
        for a in argv.iter_mut().filter(|a| *a == "-no-subreaper") {
            *a = "--no-subreaper".into();
        }
    }
    if let Some(args) = serve::serve_args(&argv) {
        return serve::exec_serve(&args);
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
    let fail_code = if matches!(cli.cmd, Some(Cmd::Exec(_))) {
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

fn run(cli: Cli) -> Result<i32> {
    let explicit_root = cli.root.is_some();
    let root = root::state_root(cli.root)?;
    let store = Store::new(&root);
    let mut trace = Trace::for_command(cli.trace, cli.debug);
    sprout_runtime::log::debug(|| {
        let args: Vec<String> = std::env::args().collect();
        format!("command line: {}", args.join(" "))
    });
    let Some(cmd) = cli.cmd else {
        return Err(Error::msg("no command given (try --help)"));
    };
    let systemd = cli.systemd_cgroup;
    let criu = cli.criu.as_deref().filter(|s| !s.is_empty());
    match cmd {
        Cmd::Create(a) => create::run(&store, &a, systemd, &mut trace),
        Cmd::Start(a) => start::run(&store, &a, &mut trace),
        Cmd::Run(a) => run::run(&store, &a, systemd, &mut trace),
        Cmd::State(a) => state::run(&store, &a),
        Cmd::Kill(a) => kill::run(&store, &a),
        Cmd::Delete(a) => delete::run(&store, &a, &mut trace),
        Cmd::List(a) => list::run(&store, &a, explicit_root),
        Cmd::Exec(a) => exec::run(&store, a, &mut trace),
        Cmd::Pause(a) => pause::pause(&store, &a),
        Cmd::Resume(a) => pause::resume(&store, &a),
        Cmd::Ps(a) => ps::run(&store, &a),
        Cmd::Update(a) => update::run(&store, a),
        Cmd::Events(a) => events::run(&store, &a),
        Cmd::Checkpoint(a) => checkpoint::checkpoint(&store, &a, criu, &mut trace),
        Cmd::Restore(a) => checkpoint::restore(&store, &a, criu, systemd, &mut trace),
        Cmd::Spec(a) => spec::run(&a),
        Cmd::Features => features::run(),
        Cmd::Serve { args } => {
            let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
            serve::exec_serve(&args);
            Ok(1)
        }
    }
}
