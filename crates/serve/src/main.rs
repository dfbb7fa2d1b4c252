//! sprout-serve: a SOCK-style serverless engine on sprout's runtime crates.
//! See docs/serve.md.

mod admission;
mod buildjail;
mod compile;
mod config;
mod engine;
mod error;
mod http;
mod install;
mod locked;
mod logsink;
mod metrics;
mod proto;
mod reaper;
mod rootfs;
mod spawn;
mod watchdog;

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

const USAGE: &str = "usage:
  sprout-serve [--config FILE] [daemon]          run the engine (HTTP on 127.0.0.1:8080 by default)
  sprout-serve [--config FILE] handler add NAME DIR
  sprout-serve [--config FILE] handler remove NAME
  sprout-serve [--config FILE] handler list
  sprout-serve [--config FILE] cleanup           remove what a killed engine left (cgroups, mounts, processes)
  sprout-serve rootfs build DIR [--mirror URL]   debootstrap a minbase + python3 base root into DIR
config: --config FILE, else $SPROUT_SERVE_CONFIG, else /etc/sprout-serve.toml if present, else defaults";

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("sprout-serve: {msg}");
    std::process::exit(1)
}

fn main() {
    // Whatever started us may have left fds open (a pipe on fd 251, a socket): none of them
    // may reach a zygote or a sandbox (or pip, or the compiler). Before any thread exists.
    spawn::cloexec_from(3);
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "__pip-build") {
        // The engine's source-build jail (buildjail.rs), started by the engine itself.
        buildjail::main(&args[1..]);
    }
    let mut cfg_path: Option<PathBuf> = std::env::var_os("SPROUT_SERVE_CONFIG").map(PathBuf::from);
    if let Some(i) = args.iter().position(|a| a == "--config") {
        if i + 1 >= args.len() {
            die(USAGE);
        }
        cfg_path = Some(PathBuf::from(args.remove(i + 1)));
        args.remove(i);
    }
    if cfg_path.is_none() && Path::new("/etc/sprout-serve.toml").exists() {
        cfg_path = Some("/etc/sprout-serve.toml".into());
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    if matches!(a.as_slice(), ["-h" | "--help" | "help"]) {
        println!("{USAGE}");
        return;
    }
    if let ["rootfs", "build", dir, rest @ ..] = a.as_slice() {
        let mirror = match rest {
            ["--mirror", m] => Some(*m),
            [] => None,
            _ => die(USAGE),
        };
        rootfs_build(Path::new(dir), mirror);
        return;
    }
    let cfg = config::Config::load(cfg_path.as_deref()).unwrap_or_else(|e| die(e));
    match a.as_slice() {
        [] | ["daemon"] => daemon(cfg),
        ["handler", "add", name, dir] => handler_add(&cfg, name, Path::new(dir)),
        ["handler", "remove", name] => {
            engine::check_handler_name(name).unwrap_or_else(|e| die(e));
            let d = cfg.registry.join(name);
            if !d.join("f.py").exists() {
                die(format!("no handler '{name}'"));
            }
            std::fs::remove_dir_all(&d).unwrap_or_else(|e| die(e));
        }
        ["handler", "list"] => {
            let mut v: Vec<String> = std::fs::read_dir(&cfg.registry)
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.path().join("f.py").exists())
                        .map(|e| e.file_name().to_string_lossy().to_string())
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            for n in v {
                let req = std::fs::read_to_string(cfg.registry.join(&n).join("requirements.txt"))
                    .unwrap_or_default();
                let pk: Vec<&str> = req
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .collect();
                println!("{n}\t{}", pk.join(" "));
            }
        }
        ["cleanup"] => {
            let c = engine::clean_recorded(&cfg).unwrap_or_else(|e| die(e));
            if !c.left.is_empty() {
                // The run dir (with the record naming them) stays for the next try.
                die(format!(
                    "{} of {} pool cgroups still busy: run cleanup again",
                    c.left.len(),
                    c.found
                ));
            }
            let m = rootfs::mounts_under(&cfg.run_dir).len();
            rootfs::teardown_run_dir(&cfg.run_dir);
            println!("removed {} cgroups, {m} mounts", c.found);
        }
        _ => die(USAGE),
    }
}

fn handler_add(cfg: &config::Config, name: &str, dir: &Path) {
    engine::check_handler_name(name).unwrap_or_else(|e| die(e));
    if !dir.join("f.py").is_file() {
        die(format!("{}/f.py not found", dir.display()));
    }
    if let Ok(raw) = std::fs::read_to_string(dir.join("requirements.txt")) {
        if let Err(e) = install::parse_requirements(&raw) {
            die(e);
        }
    }
    if let Ok(raw) = std::fs::read_to_string(dir.join("handler.toml")) {
        if let Err(e) = config::HandlerConfig::parse(&raw) {
            die(format!("{}/handler.toml: {e}", dir.display()));
        }
    }
    // Root's only where it is made here: sandboxes get their handler through a bind mount,
    // and nothing else (a zygote out of its chroot) should read other handlers' code.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&cfg.registry)
        .unwrap_or_else(|e| die(e));
    let tmp = cfg
        .registry
        .join(format!(".add-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let root =
        std::fs::canonicalize(dir).unwrap_or_else(|e| die(format!("{}: {e}", dir.display())));
    if let Err(e) = copy_dir(&root, dir, &tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        die(format!("copying {}: {e}", dir.display()));
    }
    // The handler's bytecode, compiled now rather than in every plain cold sandbox, where a
    // fresh interpreter's first compile() of even a one-line module costs ~0.7 ms; confined
    // as a sandbox is (compile.rs). A handler that does not compile is registered all the
    // same: its sandbox reports the error.
    if let Err(e) = compile::handler(cfg, &tmp.join("f.py"), "/handler/f.py") {
        eprintln!("sprout-serve: warning: handler {name}: f.py not compiled ahead: {e}");
    }
    let dst = cfg.registry.join(name);
    let old = cfg
        .registry
        .join(format!(".old-{name}-{}", std::process::id()));
    let _ = std::fs::rename(&dst, &old);
    if let Err(e) = std::fs::rename(&tmp, &dst) {
        // Nothing half-added stays in the registry: the copy (and its bytecode) goes, and
        // the previous version comes back.
        let _ = std::fs::remove_dir_all(&tmp);
        let _ = std::fs::rename(&old, &dst);
        die(e);
    }
    let _ = std::fs::remove_dir_all(&old);
    println!("added {name}");
}

/// Copy a handler's directory: regular files and directories, and symlinks whose target lies
/// inside the handler's directory `root` (canonical) as what they point at, so a ConfigMap or
/// Secret volume (`f.py -> ..data/f.py`) registers whole; its `..data`/`..<timestamp>`
/// entries (Kubernetes' atomic-writer internals) are not copied themselves. A symlink leading
/// out of the directory is skipped with a warning: registering copies no file from elsewhere.
fn copy_dir(root: &Path, src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let name = e.file_name();
        if name.to_string_lossy().starts_with("..") || name == "__pycache__" {
            continue;
        }
        let mut t = e.file_type()?;
        let mut from = e.path();
        if t.is_symlink() {
            match std::fs::canonicalize(&from) {
                Ok(target) if target.starts_with(root) => {
                    t = std::fs::metadata(&target)?.file_type();
                    from = target;
                }
                _ => {
                    eprintln!(
                        "sprout-serve: warning: {}: a symlink leading out of {} (or nowhere): not copied",
                        from.display(),
                        root.display()
                    );
                    continue;
                }
            }
        }
        let to = dst.join(&name);
        if t.is_dir() {
            copy_dir(root, &from, &to)?;
        } else if t.is_file() {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

fn rootfs_build(dir: &Path, mirror: Option<&str>) {
    let Some(deb) = ["/usr/sbin/debootstrap", "/usr/bin/debootstrap"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        die("debootstrap not found (apt-get install debootstrap), or use the quick-start base (no base_rootfs in the config)");
    };
    let mut cmd = std::process::Command::new(deb);
    cmd.args(["--variant=minbase", "--include=python3", "bookworm"])
        .arg(dir);
    if let Some(m) = mirror {
        cmd.arg(m);
    }
    let st = cmd.status().unwrap_or_else(|e| die(e));
    if !st.success() {
        die(format!("debootstrap failed: {st}"));
    }
    for d in ["handler", "packages", "tmp", ".sprout", "proc"] {
        std::fs::create_dir_all(dir.join(d)).unwrap_or_else(|e| die(e));
    }
    println!(
        "base root in {}: set base_rootfs = \"{}\" in the config",
        dir.display(),
        dir.display()
    );
}

fn daemon(cfg: config::Config) {
    let listen = cfg.listen.clone();
    // Before the engine has threads: a fork is safe, and the watchdog holds nothing of it.
    watchdog::start(&cfg).unwrap_or_else(|e| die(format!("watchdog: {e}")));
    let eng = engine::Engine::start(cfg).unwrap_or_else(|e| die(e));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Requests hold a blocking thread only once admitted (at most max_sandboxes at once);
        // the rest is housekeeping's and pip's.
        .max_blocking_threads(512.max(eng.cfg.max_sandboxes + 64))
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(e));
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&listen).await {
            Ok(l) => l,
            Err(e) => {
                eng.shutdown();
                die(format!("listen {listen}: {e}"));
            }
        };
        eprintln!(
            "sprout-serve: listening on http://{}",
            listener.local_addr().unwrap()
        );
        let e2 = eng.clone();
        tokio::spawn(http::serve(e2, listener));
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("sprout-serve: shutting down");
        eng.shutdown();
    });
    std::process::exit(0);
}
