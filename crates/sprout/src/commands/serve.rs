//! `serve`: exec `sprout-serve` (the engine and its CLI) with every argument.

use std::process::ExitCode;

/// `sprout [global options] serve ARGS...`: the arguments after `serve`, verbatim (clap would
/// take `--debug`, `--trace`, ... after the subcommand as sprout's own global options).
pub fn serve_args(argv: &[std::ffi::OsString]) -> Option<Vec<std::ffi::OsString>> {
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
pub fn exec_serve(args: &[std::ffi::OsString]) -> ExitCode {
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
