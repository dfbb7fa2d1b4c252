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
mod entry;
mod root;

/// musl's allocator only: glibc's is fast enough that the arena did not pay for its extra
/// resident memory there (docs/performance.md).
#[cfg(all(target_env = "musl", not(test)))]
#[global_allocator]
// SAFETY: the only Arena of the binary (Arena::new's contract).
static ALLOC: arena::Arena = unsafe { arena::Arena::new() };

/// The command line: `Top<Cmd>`, every subcommand. Building clap's tree of all of them cost
/// `run` ~0.37 ms and 450 KB of memory touched before it did anything (docs/performance.md), so
/// a command line whose subcommand is plain to see is parsed with a tree of that one subcommand
/// instead, `Top<one::Run>` and so on: the same derive of the same variant, so the same flags,
/// help and errors. Anything else (help, a typo, no subcommand) gets the whole tree.
#[derive(Parser)]
#[command(
    name = "sprout",
    about = "a fast OCI container runtime (runc-compatible command line)",
    disable_version_flag = true
)]
struct Top<S: Subcommand> {
    #[command(flatten)]
    g: Globals,
    #[command(subcommand)]
    cmd: Option<S>,
}

type Cli = Top<Cmd>;

#[derive(clap::Args)]
struct Globals {
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
}

/// The top-level options that take a value as the next word (`--root DIR`): skipped when
/// looking for the subcommand's name.
const GLOBAL_WITH_VALUE: [&str; 5] = ["--root", "--log", "--log-format", "--rootless", "--criu"];
/// The top-level flags without a value.
const GLOBAL_FLAGS: [&str; 3] = ["--debug", "--systemd-cgroup", "--trace"];

/// The subcommand's name, if the words before it are only the top-level options above.
fn plain_subcommand(argv: &[std::ffi::OsString]) -> Option<&str> {
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        let a = a.to_str()?;
        if GLOBAL_WITH_VALUE.contains(&a) {
            it.next()?;
        } else if GLOBAL_FLAGS.contains(&a)
            || GLOBAL_WITH_VALUE
                .iter()
                .any(|o| a.strip_prefix(o).is_some_and(|v| v.starts_with('=')))
        {
        } else if a.starts_with('-') {
            return None;
        } else {
            return Some(a);
        }
    }
    None
}

/// `Cmd`, and for each of its variants a one-variant enum `one::Variant` made by the same
/// derive from the same attributes, with `one::parse` choosing the one a name needs.
macro_rules! commands {
    (
        $( $(#[$m:meta])* $v:ident($t:ty) = $name:literal, )*
        ;
        $( $(#[$um:meta])* $uv:ident = $uname:literal, )*
        ;
        $( $rest:tt )*
    ) => {
        #[derive(Subcommand)]
        enum Cmd {
            $( $(#[$m])* $v($t), )*
            $( $(#[$um])* $uv, )*
            $( $rest )*
        }

        mod one {
            #![allow(clippy::large_enum_variant)]
            use super::*;
            $(
                #[derive(Subcommand)]
                pub(super) enum $v { $(#[$m])* $v($t) }
            )*
            $(
                #[derive(Subcommand)]
                pub(super) enum $uv { $(#[$um])* $uv }
            )*

            /// The command line parsed with the tree of subcommand `name` alone; None if
            /// `name` is not one of them.
            pub(super) fn parse(
                name: &str,
                argv: &[std::ffi::OsString],
            ) -> Option<std::result::Result<Cli, clap::Error>> {
                Some(match name {
                    $( $name => Top::<$v>::try_parse_from(argv).map(|t| Top {
                        g: t.g,
                        cmd: t.cmd.map(|$v::$v(a)| Cmd::$v(a)),
                    }), )*
                    $( $uname => Top::<$uv>::try_parse_from(argv).map(|t| Top {
                        g: t.g,
                        cmd: t.cmd.map(|$uv::$uv| Cmd::$uv),
                    }), )*
                    _ => return None,
                })
            }
        }
    };
}

commands! {
    /// Create a container (its process waits for `start`).
    Create(create::CreateArgs) = "create",
    /// Start a created container.
    Start(start::StartArgs) = "start",
    /// Create and start a container; in the foreground, wait and return its exit status.
    Run(run::RunArgs) = "run",
    /// Print the state of a container as JSON.
    State(state::StateArgs) = "state",
    /// Send a signal to the container's init (default SIGTERM).
    Kill(kill::KillArgs) = "kill",
    /// Delete a container.
    Delete(delete::DeleteArgs) = "delete",
    /// List containers.
    List(list::ListArgs) = "list",
    /// Run a new process inside a container.
    Exec(exec::ExecArgs) = "exec",
    /// Suspend every process of a container.
    Pause(pause::IdArg) = "pause",
    /// Resume a paused container.
    Resume(pause::IdArg) = "resume",
    /// List the processes of a container: ps(1) with the given options (default -ef), its rows
    /// of the container's processes only; `-f json`: a JSON array of their host pids.
    Ps(ps::PsArgs) = "ps",
    /// Update a container's resource limits.
    Update(update::UpdateArgs) = "update",
    /// Print container events: resource stats every --interval and OOM notifications, as JSON
    /// lines (runc's format); --stats prints the stats once.
    Events(events::EventsArgs) = "events",
    /// Checkpoint a running container with CRIU (runc's flags).
    Checkpoint(checkpoint::CheckpointArgs) = "checkpoint",
    /// Restore a container from a CRIU checkpoint (runc's flags).
    Restore(checkpoint::RestoreArgs) = "restore",
    /// Write a default config.json.
    Spec(spec::SpecArgs) = "spec",
    ;
    /// Print the runtime's features as JSON.
    Features = "features",
    ;
    /// Run the serverless engine or its CLI: execs `sprout-serve` (next to this binary, else
    /// from $PATH) with every argument (`sprout serve --help`, `handler add|remove|list`,
    /// `cleanup`, `rootfs build`). See docs/serve.md.
    #[command(disable_help_flag = true)]
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// The command line, through the one-subcommand tree where it can (see [`Top`]).
fn parse_cli(argv: &[std::ffi::OsString]) -> std::result::Result<Cli, clap::Error> {
    if let Some(r) = plain_subcommand(argv).and_then(|name| one::parse(name, argv)) {
        return r;
    }
    Cli::try_parse_from(argv)
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
    let cli = match parse_cli(&argv) {
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
    if !matches!(cli.g.log_format.as_str(), "" | "text" | "json") {
        eprintln!(
            "sprout: --log-format: invalid value {:?} (text or json)",
            cli.g.log_format
        );
        return ExitCode::from(1);
    }
    if let Some(path) = &cli.g.log {
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
        file: cli.g.log.clone(),
        json: cli.g.log_format == "json",
        debug: cli.g.debug,
    });
    if cli.g.version {
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
    let explicit_root = cli.g.root.is_some();
    let root = root::state_root(cli.g.root)?;
    let store = Store::new(&root);
    let mut trace = Trace::for_command(cli.g.trace, cli.g.debug);
    sprout_runtime::log::debug(|| {
        let args: Vec<String> = std::env::args().collect();
        format!("command line: {}", args.join(" "))
    });
    let Some(cmd) = cli.cmd else {
        return Err(Error::msg("no command given (try --help)"));
    };
    let systemd = cli.g.systemd_cgroup;
    let criu = cli.g.criu.as_deref().filter(|s| !s.is_empty());
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn argv(line: &str) -> Vec<std::ffi::OsString> {
        std::iter::once("sprout")
            .chain(line.split_whitespace())
            .map(Into::into)
            .collect()
    }

    /// What a parse gave, comparable: the error as printed, or the parsed globals and the
    /// subcommand's name.
    fn outcome(r: std::result::Result<Cli, clap::Error>) -> String {
        match r {
            Err(e) => format!("error {:?}: {}", e.kind(), e.render()),
            Ok(c) => format!(
                "ok root={:?} log={:?} fmt={} debug={} systemd={} rootless={:?} criu={:?} trace={} version={} cmd={:?}",
                c.g.root, c.g.log, c.g.log_format, c.g.debug, c.g.systemd_cgroup, c.g.rootless,
                c.g.criu, c.g.trace, c.g.version,
                c.cmd.map(|c| std::mem::discriminant(&c)),
            ),
        }
    }

    #[test]
    fn the_one_subcommand_tree_parses_as_the_whole_tree() {
        let mut lines: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .filter(|n| n != "serve")
            .flat_map(|n| {
                [
                    format!("{n} --help"),
                    format!("{n} -h"),
                    n.clone(),
                    format!("{n} id"),
                    format!("{n} --bogus id"),
                    format!("--root /r --debug {n} id"),
                    format!("--root=/r {n} --log /l --trace id"),
                    format!("{n} id a b c d e"),
                ]
            })
            .collect();
        lines.extend(
            [
                "run -b /b --pid-file /p --detach id",
                "--log-format json --systemd-cgroup --criu /c state id",
                "--rootless true kill id KILL",
                "exec -t id sh -c 'x'",
                "update --cpu-share 5 --memory -1 id",
                "run -v",
            ]
            .map(String::from),
        );
        let mut fast = 0;
        for l in &lines {
            let a = argv(l);
            if plain_subcommand(&a).is_some() {
                fast += 1;
            }
            assert_eq!(
                outcome(parse_cli(&a)),
                outcome(Cli::try_parse_from(&a)),
                "sprout {l}"
            );
        }
        assert!(
            fast > 100,
            "only {fast} command lines took the one-subcommand path"
        );
    }

    #[test]
    fn the_subcommand_is_found_after_the_top_level_options_only() {
        let name = |l: &str| plain_subcommand(&argv(l)).map(String::from);
        assert_eq!(name("run x").as_deref(), Some("run"));
        assert_eq!(
            name("--root /r --log-format json run x").as_deref(),
            Some("run")
        );
        assert_eq!(
            name("--root=/r --debug --trace state x").as_deref(),
            Some("state")
        );
        // A value that looks like a subcommand is the option's value.
        assert_eq!(name("--root run state x").as_deref(), Some("state"));
        // Help, the version, an unknown option, or nothing: the whole tree.
        for l in [
            "--help",
            "-h",
            "-v",
            "--version",
            "--bogus run x",
            "",
            "--root",
        ] {
            assert_eq!(name(l), None, "{l:?}");
        }
        // A word that names no subcommand is left to the whole tree (its error, its hints).
        assert!(one::parse("stat", &argv("stat x")).is_none());
    }
}
