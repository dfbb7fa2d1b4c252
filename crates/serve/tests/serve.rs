//! End-to-end tests of sprout-serve: a real daemon, real namespaces, cgroups and mounts.
//! Root only (skipped otherwise). Python is the host's /usr/bin/python3 via the quick-start base.

mod common;
use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
    };
}

const ECHO: &str = "def f(event):\n    return {'echo': event}\n";

#[test]
fn start_paths_hot_warm_zygote() {
    need_root!();
    // A second: the next request must come within it to find the sandbox hot, which 100 ms
    // did not leave on a loaded host (the VM under TCG saw "warm").
    let d = Daemon::start("paths", "freeze_after_ms = 1000\n");
    d.add("echo", ECHO, &[]);
    // The root zygote starts in the background: wait for it so the first start is a fork.
    assert!(
        eventually(10_000, || d.status()["zygotes"][0]["state"] == "ready"),
        "{}",
        d.status()
    );
    let r = d.post("echo", r#"{"a": [1, 2, "x"]}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), serde_json::json!({"echo": {"a": [1, 2, "x"]}}));
    assert_eq!(r.header("x-sprout-path"), Some("zygote"));
    let r = d.post("echo", "2");
    assert_eq!(r.header("x-sprout-path"), Some("hot"), "{}", r.body);
    assert_eq!(r.json()["echo"], 2);
    // Idle past freeze_after_ms: frozen, then thawed for the next request.
    assert!(
        eventually(10_000, || d.status()["sandboxes"]["warm"] == 1),
        "{}",
        d.status()
    );
    let st = d.status();
    let frozen = st["memory"]["frozen_sandbox_bytes"][0].as_u64().unwrap();
    assert!(
        frozen > 0 && frozen < 16 << 20,
        "frozen sandbox charged {frozen} bytes"
    );
    let r = d.post("echo", "3");
    assert_eq!(r.header("x-sprout-path"), Some("warm"), "{}", r.body);
    assert_eq!(r.json()["echo"], 3);
    // Empty body is null.
    assert_eq!(d.post("echo", "").json()["echo"], serde_json::Value::Null);
    let m = d.get("/metrics").body;
    for p in ["hot", "warm", "zygote"] {
        assert!(
            m.contains(&format!(
                "sprout_serve_request_seconds_count{{path=\"{p}\"}}"
            )),
            "{m}"
        );
    }
    assert!(
        m.contains("sprout_serve_requests_total{path=\"hot\",status=\"200\"}"),
        "{m}"
    );
    // Re-registering a handler replaces its cached sandboxes.
    d.add("echo", "def f(event):\n    return 'v2'\n", &[]);
    assert_eq!(d.post("echo", "1").json(), "v2");
}

/// `handler add` compiles f.py with the sandboxes' python; a cold sandbox runs that code
/// object instead of compiling (a fresh interpreter's first compile costs ~0.7 ms), and only
/// while the .pyc matches f.py's mtime and size.
#[test]
fn cold_sandbox_runs_the_bytecode_compiled_at_add() {
    need_root!();
    let d = Daemon::start("pyc", "zygotes = false\nfreeze_after_ms = 60000\n");
    d.add("h", "def f(event):\n    return 'from source'\n", &[]);
    let reg = d.dir.join("registry/h");
    let pyc: Vec<std::path::PathBuf> = std::fs::read_dir(reg.join("__pycache__"))
        .expect("handler add made __pycache__")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("f.") && n.ends_with(".pyc")
        })
        .collect();
    assert_eq!(pyc.len(), 1, "{pyc:?}");
    // Swap in bytecode that answers differently, under the same header (magic, flags,
    // f.py's mtime and size): the sandbox must run it, not the source.
    // The sandboxes' interpreter (the engine's `python` default), which compiled the .pyc.
    let other = std::process::Command::new("/usr/bin/python3")
        .args(["-I", "-S", "-c"])
        .arg(
            "import marshal, sys; sys.stdout.buffer.write(marshal.dumps(compile(\"def f(event):\\n    return 'from pyc'\\n\", '/handler/f.py', 'exec')))",
        )
        .output()
        .unwrap();
    assert!(other.status.success(), "{other:?}");
    let mut data = std::fs::read(&pyc[0]).unwrap();
    data.truncate(16);
    data.extend_from_slice(&other.stdout);
    std::fs::write(&pyc[0], &data).unwrap();
    let r = d.post("h", "{}");
    assert_eq!(r.header("x-sprout-path"), Some("cold"), "{}", r.body);
    assert_eq!(r.json(), "from pyc", "{}", d.log());
    // A .pyc that no longer matches f.py (another mtime) is ignored: the source runs.
    d.add("g", "def f(event):\n    return 'g from source'\n", &[]);
    let g = d.dir.join("registry/g/f.py");
    let f = std::fs::File::options().write(true).open(&g).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    drop(f);
    let r = d.post("g", "{}");
    assert_eq!(r.json(), "g from source", "{}", d.log());
}

/// `handler add` compiles a tenant's f.py confined as a sandbox (crates/serve/src/compile.rs):
/// as the sandboxes' uid, under their memory as its address-space limit. A source whose
/// compile needs more (a 600 KB list literal: ~0.2 GB in the compiler, which the host's root
/// gave it before) gets no .pyc and a warning, and is registered all the same; so is one
/// that does not compile, with the compiler's own words.
#[test]
fn handler_add_compiles_within_a_sandboxs_limits() {
    need_root!();
    let d = Daemon::config("compile", "[sandbox]\nmemory_mb = 128\n");
    let pycs = |name: &str| -> Vec<String> {
        std::fs::read_dir(d.dir.join("registry").join(name).join("__pycache__"))
            .map(|r| {
                r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("f.") && n.ends_with(".pyc"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let add = |name: &str, code: &str| {
        let src = d.dir.join("src").join(name);
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("f.py"), code).unwrap();
        let out = d.cli(&["handler", "add", name, src.to_str().unwrap()]);
        assert!(out.status.success(), "handler add {name}: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    let warn = add("small", "def f(event):\n    return event\n");
    assert!(warn.is_empty(), "{warn}");
    assert_eq!(pycs("small").len(), 1, "a plain handler is compiled ahead");

    let big = format!(
        "X = [{}]\ndef f(event):\n    return len(X)\n",
        "1,".repeat(300_000)
    );
    let t = std::time::Instant::now();
    let warn = add("big", &big);
    assert!(
        warn.contains("handler big: f.py not compiled ahead")
            && warn.contains("ran out of memory (128 MiB"),
        "{warn}"
    );
    assert!(
        pycs("big").is_empty(),
        "compiled past the limit: {:?}",
        pycs("big")
    );
    assert!(d.dir.join("registry/big/f.py").is_file(), "not registered");
    println!("the over-limit compile was refused after {:?}", t.elapsed());

    let warn = add("bad", "def f(event:\n    return 1\n");
    assert!(
        warn.contains("handler bad: f.py not compiled ahead: SyntaxError"),
        "{warn}"
    );
    assert!(d.dir.join("registry/bad/f.py").is_file(), "not registered");
}

#[test]
fn plain_cold_without_zygotes() {
    need_root!();
    let d = Daemon::start("cold", "zygotes = false\n");
    d.add("echo", ECHO, &[]);
    let r = d.post("echo", "[1]");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sprout-path"), Some("cold"));
    assert_eq!(d.post("echo", "[2]").header("x-sprout-path"), Some("hot"));
    d.add("iso", ISOLATION, &[("handler.toml", "mount_ns = true\n")]);
    // Cold spares (forked ahead into a pool cgroup and new pid/ipc/uts namespaces) are ready:
    // the next cold start takes one; the isolation checks below cover that path.
    assert!(
        eventually(5_000, || d.status()["cold_spares"] == 2),
        "{}",
        d.status()
    );
    let used = d.status()["cold_spares_used"].as_u64().unwrap();
    let v = d.post("iso", "{}").json();
    assert_eq!(d.status()["cold_spares_used"], used + 1);
    assert_eq!(
        (v["uid"].as_u64(), v["pid"].as_u64()),
        (Some(65534), Some(1)),
        "{v}"
    );
    assert_eq!(
        (v["seccomp_mode"].as_u64(), v["no_new_privs"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(v["cap_sys_admin_in_bset"], 0);
    assert_eq!(v["proc_pids"], serde_json::json!([1]));
    assert_eq!(v["/usr/x"], "Read-only file system");
    assert_eq!(v["/tmp/x"], "ok");
    let l = d.cli(&["handler", "list"]);
    assert!(String::from_utf8_lossy(&l.stdout).contains("echo"));
    assert!(d.cli(&["handler", "remove", "echo"]).status.success());
    assert_eq!(d.post("echo", "[3]").status, 404);
}

const ISOLATION: &str = r#"
import os, socket, ctypes
def f(event):
    out = {}
    for p in ["/etc/x", "/usr/x", "/handler/x", "/x", "/tmp/x", "/packages/x"]:
        try:
            with open(p, "w") as fh:
                fh.write("hi")
            out[p] = "ok"
        except OSError as e:
            out[p] = e.strerror
    libc = ctypes.CDLL(None, use_errno=True)
    out["uid"] = os.getuid()
    out["gid"] = os.getgid()
    out["pid"] = os.getpid()
    out["hostname"] = socket.gethostname()
    out["seccomp_mode"] = libc.prctl(21, 0, 0, 0, 0)        # PR_GET_SECCOMP
    out["no_new_privs"] = libc.prctl(39, 0, 0, 0, 0)        # PR_GET_NO_NEW_PRIVS
    out["cap_sys_admin_in_bset"] = libc.prctl(23, 21, 0, 0, 0)  # PR_CAPBSET_READ
    out["root_entries"] = sorted(os.listdir("/"))
    try:
        out["proc_pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    except OSError as e:
        out["proc_pids"] = e.strerror
    try:
        open("/proc/sys/kernel/hostname", "w").write("x")
        out["proc_sys"] = "writable"
    except OSError as e:
        out["proc_sys"] = e.strerror
    return out
"#;

#[test]
fn isolation_and_failures_are_contained() {
    need_root!();
    // 3 s: under software emulation (the VM test host) faulting in the 64 MiB that the `mem`
    // handler needs to reach its limit takes ~1 s alone, and 1.5 s turned its OOM into a timeout.
    let d = Daemon::start(
        "fail",
        "timeout_ms = 3000\nmax_body_bytes = 65536\nfreeze_after_ms = 60000\n[sandbox]\nmemory_mb = 64\npids = 24\n",
    );
    d.add("echo", ECHO, &[]);
    d.add("iso", ISOLATION, &[("handler.toml", "mount_ns = true\n")]);
    // Without a mount namespace (the default) a sandbox has no /proc at all: never the host's.
    d.add("isodefault", ISOLATION, &[]);
    let v = d.post("isodefault", "{}").json();
    assert_eq!(v["pid"], 1, "{v}");
    assert!(
        v["proc_pids"] == serde_json::json!([]) || v["proc_pids"] == "No such file or directory",
        "a sandbox without mount_ns sees no processes in /proc: {v}"
    );
    let v = d.post("iso", "{}").json();
    assert_eq!(v["/tmp/x"], "ok", "{v}");
    for p in ["/etc/x", "/usr/x", "/handler/x", "/x", "/packages/x"] {
        assert_eq!(v[p], "Read-only file system", "{p}: {v}");
    }
    assert_eq!(v["uid"], 65534);
    assert_eq!(v["gid"], 65534);
    assert_eq!(v["pid"], 1, "sandbox is pid 1 of its own pid namespace");
    assert_eq!(v["hostname"], "sandbox");
    assert_eq!(v["seccomp_mode"], 2, "seccomp filter loaded");
    assert_eq!(v["no_new_privs"], 1);
    assert_eq!(v["cap_sys_admin_in_bset"], 0, "bounding set dropped");
    assert_eq!(
        v["proc_pids"],
        serde_json::json!([1]),
        "private /proc of the sandbox's pid namespace"
    );
    assert_ne!(v["proc_sys"], "writable");
    assert!(
        !v["root_entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "root" || e == "home" || e == "var"),
        "{v}"
    );

    // A handler that raises: 500 with the exception, the sandbox is reused.
    d.add("raise", "def f(e):\n    raise ValueError('boom')\n", &[]);
    let r = d.post("raise", "{}");
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["kind"], "raised");
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("ValueError: boom"));
    assert!(r.json()["traceback"]
        .as_str()
        .unwrap()
        .contains("/handler/f.py"));
    assert_eq!(d.post("raise", "{}").header("x-sprout-path"), None);

    // Non-JSON result.
    d.add("badresult", "def f(e):\n    return object()\n", &[]);
    let r = d.post("badresult", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (500, Some("bad_result"))
    );

    // Exits.
    d.add("exit", "import os\ndef f(e):\n    os._exit(3)\n", &[]);
    let r = d.post("exit", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (502, Some("exited")),
        "{}",
        r.body
    );

    // Loops forever: killed at the timeout through its cgroup.
    d.add("loop", "def f(e):\n    while True:\n        pass\n", &[]);
    let t = Instant::now();
    let r = d.post("loop", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (504, Some("timeout")),
        "{}",
        r.body
    );
    assert!(t.elapsed() < Duration::from_secs(8));

    // Fork bomb: stopped by the pids limit; the sandbox (with its leftovers) is not reused.
    d.add(
        "forkbomb",
        "import os, time\ndef f(e):\n    n = 0\n    try:\n        while n < 10000:\n            if os.fork() == 0:\n                time.sleep(60)\n                os._exit(0)\n            n += 1\n    except OSError as x:\n        return {'forked': n, 'error': x.strerror}\n    return {'forked': n}\n",
        &[],
    );
    let r = d.post("forkbomb", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    let forked = r.json()["forked"].as_u64().unwrap();
    assert!(forked < 24, "pids limit: forked {forked}");
    assert!(
        eventually(3_000, || d.status()["handlers"]["forkbomb"].is_null()),
        "{}",
        d.status()
    );

    // Unbounded allocation: OOM-killed inside its memory cgroup.
    d.add(
        "mem",
        "def f(e):\n    a = []\n    while True:\n        a.append(bytearray(1 << 20))\n",
        &[],
    );
    let r = d.post("mem", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (502, Some("oom")),
        "{}",
        r.body
    );

    // Network: a network namespace of its own by default (only lo, down): not even the
    // engine's API on loopback is reachable (more in sandboxes_reach_no_other_sandbox...).
    let net = format!(
        "import socket\ndef f(e):\n    s = socket.socket()\n    s.settimeout(1)\n    try:\n        s.connect(('127.0.0.1', {}))\n        return 'connected'\n    except OSError as x:\n        return x.strerror\n",
        d.port
    );
    d.add("net", &net, &[]);
    assert_eq!(d.post("net", "{}").json(), "Network is unreachable");
    d.add("netns", &net, &[("handler.toml", "network_ns = true\n")]);
    assert_eq!(d.post("netns", "{}").json(), "Network is unreachable");

    // Request errors.
    let r = d.post("echo", "{not json");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (400, Some("bad_json"))
    );
    let r = d.post("nope", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (404, Some("unknown_handler"))
    );
    let r = d.post("../etc", "{}");
    assert!(r.status == 400 || r.status == 404, "{}", r.body);
    let big = format!("\"{}\"", "a".repeat(70_000));
    assert_eq!(d.post("echo", &big).status, 413);
    assert_eq!(d.get("/run/echo").status, 405);
    d.add("badreq", ECHO, &[]);
    std::fs::write(d.dir.join("registry/badreq/requirements.txt"), "requests\n").unwrap();
    let r = d.post("badreq", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (400, Some("bad_requirements")),
        "{}",
        r.body
    );

    // And the engine still serves.
    let r = d.post("echo", "42");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["echo"], 42);
    let m = d.get("/metrics").body;
    for st in ["400", "404", "413"] {
        assert!(
            m.contains(&format!(
                "sprout_serve_requests_total{{path=\"none\",status=\"{st}\"}}"
            )),
            "{m}"
        );
    }
    for k in ["timeout", "oom", "exited"] {
        assert!(
            m.contains(&format!(
                "sprout_serve_sandboxes_killed_total{{reason=\"{k}\"}}"
            )),
            "{m}"
        );
    }
}

#[test]
fn concurrency_limit_queues() {
    need_root!();
    let d = Daemon::start("conc", "max_per_handler = 2\n");
    d.add(
        "sleep",
        "import time\ndef f(e):\n    time.sleep(0.3)\n    return e\n",
        &[],
    );
    let t = Instant::now();
    let rs: Vec<Resp> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let d = &d;
                s.spawn(move || d.post("sleep", &i.to_string()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in rs.iter().enumerate() {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json(), i as u64);
    }
    // Two sandboxes, four requests: at least two rounds.
    assert!(
        t.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(d.status()["handlers"]["sleep"]["live"], 2, "{}", d.status());
}

fn make_wheel(dir: &std::path::Path) {
    make_pkg_wheel(dir, "tinypkg", "VALUE = 42\n");
}

/// Run `code` with the host's python3 (building test packages); it must succeed.
fn run_python(code: &str) {
    let st = std::process::Command::new("python3")
        .arg("-c")
        .arg(code)
        .status()
        .unwrap();
    assert!(st.success(), "python3 -c failed: {st}");
}

/// A pure-Python wheel `NAME-1.0` whose `NAME/__init__.py` is `init`, into `dir`.
fn make_pkg_wheel(dir: &std::path::Path, name: &str, init: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let py = format!(
        r#"
import zipfile, base64, hashlib
n = "{name}"
files = {{n + "/__init__.py": {init},
         n + "-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: " + n + "\nVersion: 1.0\n",
         n + "-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
         n + "-1.0.dist-info/top_level.txt": n + "\n"}}
rec = []
with zipfile.ZipFile("{dir}/" + n + "-1.0-py3-none-any.whl", "w") as z:
    for f, c in files.items():
        z.writestr(f, c)
        h = base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b"=").decode()
        rec.append("%s,sha256=%s,%d" % (f, h, len(c)))
    rec.append(n + "-1.0.dist-info/RECORD,,")
    z.writestr(n + "-1.0.dist-info/RECORD", "\n".join(rec) + "\n")
"#,
        init = serde_json::to_string(init).unwrap(),
        dir = dir.display()
    );
    run_python(&py);
}

#[test]
fn install_cache_and_package_zygote() {
    need_root!();
    let wheels = std::path::PathBuf::from(format!("/tmp/serve-test-wheels-{}", std::process::id()));
    make_wheel(&wheels);
    let d = Daemon::start(
        "pkgs",
        &format!(
            "pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\nmax_per_handler = 4\n",
            wheels.display()
        ),
    );
    let code = "import tinypkg\ndef f(e):\n    return {'value': tinypkg.VALUE, 'file': tinypkg.__file__}\n";
    d.add("pkg", code, &[("requirements.txt", "tinypkg==1.0\n")]);
    let r = d.post("pkg", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["value"], 42);
    assert_eq!(
        r.json()["file"],
        "/packages/tinypkg-1.0/tinypkg/__init__.py"
    );
    assert!(d
        .dir
        .join("packages/tinypkg-1.0/tinypkg/__init__.py")
        .exists());
    // A zygote for the package set {tinypkg-1.0} comes up; new sandboxes then fork from it.
    assert!(
        eventually(10_000, || d.status()["zygotes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|z| z["packages"] == "tinypkg-1.0" && z["state"] == "ready")),
        "{}",
        d.status()
    );
    let z = d.status()["zygotes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["packages"] == "tinypkg-1.0")
        .unwrap()
        .clone();
    assert_eq!(z["imported"], serde_json::json!(["tinypkg"]));
    // Two concurrent requests: one hot, one new sandbox from the package zygote.
    let rs: Vec<Resp> = std::thread::scope(|s| {
        let a = s.spawn(|| d.post("pkg", "1"));
        let b = s.spawn(|| d.post("pkg", "2"));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    let paths: Vec<&str> = rs
        .iter()
        .filter_map(|r| r.header("x-sprout-path"))
        .collect();
    assert!(rs.iter().all(|r| r.status == 200));
    assert_eq!(d.status()["install_cache"]["packages"], 1);
    // A package that does not exist: clear 400, the engine keeps going.
    d.add(
        "missing",
        ECHO,
        &[("requirements.txt", "sprout-no-such-package==9.9\n")],
    );
    let r = d.post("missing", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (400, Some("install_failed")),
        "{}",
        r.body
    );
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("sprout-no-such-package==9.9"));
    assert_eq!(d.post("pkg", "{}").status, 200);
    let _ = std::fs::remove_dir_all(&wheels);
    let _ = paths;
}

/// POST `body` to `handler` from a thread that holds the connection open for `hold` and
/// never reads the answer (a request in flight when something happens to the engine).
fn post_in_background(port: u16, handler: &str, body: &str, hold: Duration) {
    let req = format!(
        "POST /run/{handler} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    std::thread::spawn(move || {
        let _ = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            use std::io::Write;
            s.write_all(req.as_bytes())?;
            std::thread::sleep(hold);
            Ok(())
        });
    });
}

/// Every process in the engine's pool cgroups (the first hierarchy of `cgroup_dirs`).
fn pool_procs(d: &Daemon) -> Vec<i32> {
    let mut pids = vec![];
    for dir in pool_dirs(d) {
        if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            pids.extend(s.lines().map(|l| l.parse::<i32>().unwrap()));
        }
    }
    pids
}

/// `p` exists and is not a zombie.
fn alive(p: &i32) -> bool {
    std::fs::read_to_string(format!("/proc/{p}/stat"))
        .is_ok_and(|s| !s.contains(") Z ") && !s.contains(") X "))
}

#[test]
fn restart_cleans_up_after_a_killed_engine() {
    need_root!();
    let mut d = Daemon::start("crash", "freeze_after_ms = 50\n");
    d.add("echo", ECHO, &[]);
    d.add("sleep", "import time\ndef f(e):\n    time.sleep(30)\n", &[]);
    assert_eq!(d.post("echo", "1").status, 200);
    // A frozen sandbox, plus one busy in a request when the engine dies.
    assert!(eventually(2_000, || d.status()["sandboxes"]["warm"] == 1));
    post_in_background(d.port, "sleep", "{}", Duration::from_secs(5));
    assert!(!d.cgroup_dirs().is_empty());
    let procs = || pool_procs(&d);
    assert!(
        eventually(5_000, || procs().len() >= 3),
        "zygote + 2 sandboxes: {:?}",
        procs()
    );
    let pids = procs();
    d.crash();
    assert!(!d.mounts().is_empty(), "a crashed engine leaves mounts");
    // A new instance cleans up: old processes gone, stale mounts gone, then serves.
    d.spawn();
    assert!(
        d.log().contains("cleaned up after a previous instance"),
        "{}",
        d.log()
    );
    for p in &pids {
        assert!(!alive(p), "pid {p} of the killed engine survived");
    }
    assert_eq!(d.post("echo", "2").status, 200);
    // A clean stop leaves nothing: no mount, no cgroup, not even the run directory.
    assert!(
        d.stop(),
        "the engine did not shut down within {:?}",
        STOP_WAIT
    );
    assert!(d.mounts().is_empty(), "{:?}", d.mounts());
    assert!(d.cgroup_dirs().is_empty(), "{:?}", d.cgroup_dirs());
    assert!(!d.run_dir.exists(), "{} left behind", d.run_dir.display());
}

/// Wait until the root zygote is ready (it starts in the background; slow under TCG).
fn root_zygote_ready(d: &Daemon) -> bool {
    eventually(60_000, || {
        zygote(&d.status(), "").is_some_and(|z| z["state"] == "ready")
    })
}

/// Wait until the root zygote holds `n` spares (the engine's own count, /status).
fn root_spares_at_least(d: &Daemon, n: u64) -> bool {
    eventually(60_000, || {
        zygote(&d.status(), "").is_some_and(|z| z["spares"].as_u64() >= Some(n))
    })
}

/// Read every file of the sandboxes' python (its stdlib, compiled modules and the binary).
fn warm_python_files() {
    let out = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import os, sys, sysconfig; print(sysconfig.get_paths()['stdlib']); print(os.path.realpath(sys.executable))",
        ])
        .output()
        .unwrap();
    fn read_all(p: &std::path::Path) {
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return;
        };
        if md.is_dir() {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                read_all(&e.path());
            }
        } else if md.is_file() {
            let _ = std::fs::read(p);
        }
    }
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        read_all(std::path::Path::new(l.trim()));
    }
}

#[test]
fn lru_eviction_within_memory_budget() {
    need_root!();
    // What the import cache (the root zygote) and one sandbox take differs between hosts and
    // kernels, so both are measured here with a roomy budget, then the budget allows the
    // cache + one idle sandbox + 4 MiB: room to keep the newest sandbox, and 4 MiB short of
    // the 8 MiB the engine reserves before it makes another, so each new handler's sandbox
    // evicts the least recently used one.
    //
    // No spares (`zygote_spares = 0`: each request forks its child from the zygote): a
    // zygote's spares come and go (taken by a request, refilled after it, a batch forked
    // when a request finds none, pre-faulted once learned), and with them the cache's size
    // by several MiB between the probe and the run's decisions, more than the 4 MiB margin:
    // a run once fitted all four sandboxes because its zygote weighed 6.4 MB where the
    // probe's had weighed ~12.7 MB. Without spares the cache is the zygote alone.
    const CFG: &str = "freeze_after_ms = 50\nzygote_spares = 0\n";
    // A page of a file is charged to the cgroup that reads it first: an engine whose zygote
    // first read python's stdlib weighed ~9 MB where the next one weighed 2 MB, and with the
    // other serve tests reading the same files beside this one, which engine that is varies
    // (the CI's fresh machines failed here twice). Read them all from this test's own cgroup
    // first, so that neither engine's zygote is charged for them.
    warm_python_files();
    let (zmem, sbmem) = {
        let mut p = Daemon::start("lru-probe", CFG);
        assert!(root_zygote_ready(&p), "{}", p.status());
        for h in ["a", "b", "c"] {
            p.add(h, ECHO, &[]);
            let r = p.post(h, "1");
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(r.header("x-sprout-path"), Some("zygote"));
        }
        // The budget check re-reads the zygotes every ~200 ms; sandboxes are measured when
        // frozen. The zygote's cgroup is taken at its smallest reading: its charge moves
        // (a child forked and not yet placed is charged to it, so are the pages it reads
        // first), and once a probe's largest reading, ~10 MB where the run's zygote weighed
        // 2.3 MB (under the parallel tests' load), made a budget that kept all four.
        let (mut z, mut s) = (u64::MAX, 0u64);
        for _ in 0..15 {
            std::thread::sleep(Duration::from_millis(200));
            let st = p.status();
            z = z.min(st["memory"]["zygote_bytes"].as_u64().unwrap());
            for h in ["a", "b", "c"] {
                for m in st["handlers"][h]["idle_memory_bytes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    s = s.max(m.as_u64().unwrap());
                }
            }
        }
        p.stop();
        (z, s)
    };
    assert!(
        zmem > 0 && zmem < u64::MAX && sbmem > 0,
        "zygote {zmem} B, sandbox {sbmem} B"
    );
    let run = |name: &str, budget_mb: u64| {
        let d = Daemon::start(name, &format!("memory_budget_mb = {budget_mb}\n{CFG}"));
        for h in ["a", "b", "c", "d"] {
            d.add(h, ECHO, &[]);
        }
        assert!(root_zygote_ready(&d), "{}", d.status());
        for h in ["a", "b", "c", "d"] {
            let r = d.post(h, "1");
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(r.header("x-sprout-path"), Some("zygote"));
        }
        let st = d.status();
        (d, st)
    };
    let (mut zmem, mut sbmem) = (zmem, sbmem);
    let mut budget_mb = (zmem + sbmem + (4 << 20)).div_ceil(1 << 20);
    let (mut d, mut st) = run("lru", budget_mb);
    // The budget is made from the probe's sizes, and a run's own can differ from them either
    // way. On a fresh machine (CI) the probe's zygote once weighed ~9 MB where the run's
    // weighed 2 MB (the pages a first engine reads are charged to it: a cold page cache): the
    // budget then kept all four. Another run's zygote weighed 7.6 MB where the probe's had
    // weighed ~2.5 (its placement raced python's start-up then; it is placed before its exec
    // now, test the_root_zygotes_start_up_is_charged_to_its_own_cgroup): the root zygote,
    // which is never evicted, and one sandbox did not fit the budget at all. Where a run's
    // own sizes make another budget (smaller with all four kept, or larger), the run is made
    // again with that one, at most twice: the assertions below judge a run whose budget held
    // its cache, one sandbox and 4 MiB.
    for again in 1..=2 {
        let run_z = st["memory"]["zygote_bytes"].as_u64().unwrap();
        let run_s = st["handlers"]
            .as_object()
            .into_iter()
            .flat_map(|h| h.values())
            .flat_map(|h| {
                h["idle_memory_bytes"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|m| m.as_u64())
            .max()
            .unwrap_or(sbmem);
        let own = (run_z + run_s + (4 << 20)).div_ceil(1 << 20);
        let roomy = st["sandboxes"]["total"].as_u64() == Some(4) && own < budget_mb;
        if !roomy && own <= budget_mb {
            break;
        }
        eprintln!(
            "run {again}: budget {budget_mb} MiB from zygote {zmem} B + sandbox {sbmem} B; this run's zygote {run_z} B + sandbox {run_s} B make {own} MiB: again"
        );
        d.stop();
        (zmem, sbmem) = (run_z, run_s);
        budget_mb = own;
        (d, st) = run(&format!("lru-again{again}"), budget_mb);
    }
    // The engine's own accounting stays within the budget, and the budget did not keep every
    // handler: the count asserted is only "not all four", and the order below is LRU's.
    let total = st["sandboxes"]["total"].as_u64().unwrap();
    assert!(total <= 3, "budget exceeded: {st}");
    assert!(
        st["memory"]["accounted_bytes"].as_u64().unwrap() <= budget_mb << 20,
        "{st}"
    );
    let m = d.get("/metrics").body;
    let ev: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("sprout_serve_evictions_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(ev >= 1, "{m}");
    // The most recently used handler is still cached (hot or warm), the oldest is not.
    let r = d.post("d", "2");
    assert!(
        matches!(r.header("x-sprout-path"), Some("hot" | "warm")),
        "{:?} (budget {budget_mb} MiB from zygote {zmem} B + sandbox {sbmem} B + 4 MiB): {}",
        r.header("x-sprout-path"),
        d.status()
    );
    let r = d.post("a", "3");
    assert!(
        matches!(r.header("x-sprout-path"), Some("zygote" | "cold")),
        "{:?}",
        r.header("x-sprout-path")
    );
}

/// The root zygote is moved into its cgroup before it execs python, so every page of python's
/// start-up is charged there (the memory budget counts it), none to the engine's cgroup. It
/// was placed after the exec once, racing python's start-up: its cgroup was charged 2.0-5.5
/// MiB of its ~7 MiB of anonymous memory, varying from one engine to the next.
#[test]
fn the_root_zygotes_start_up_is_charged_to_its_own_cgroup() {
    need_root!();
    let d = Daemon::start("zcharge", "zygote_spares = 0\n");
    assert!(root_zygote_ready(&d), "{}", d.status());
    let st = d.status();
    let pid = zygote(&st, "").and_then(|z| z["pid"].as_i64()).unwrap();
    let kb = |text: &str, key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    // What the zygote's pages are, as the kernel counts them in its own address space.
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let anon_kib = kb(&rollup, "Anonymous:").unwrap();
    // Its cgroup: the pool cgroup (memory hierarchy on v1, the v2 tree otherwise) that holds it.
    let base = d
        .cgroup_dirs()
        .into_iter()
        .next()
        .expect("the engine's cgroups");
    let cg = std::fs::read_dir(&base)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            std::fs::read_to_string(p.join("cgroup.procs"))
                .is_ok_and(|s| s.split_whitespace().any(|x| x == pid.to_string()))
        })
        .unwrap_or_else(|| panic!("zygote {pid} in no cgroup under {}", base.display()));
    let stat = std::fs::read_to_string(cg.join("memory.stat")).unwrap();
    // Anonymous memory charged to it: v1 `rss`, v2 `anon` (bytes).
    let charged = kb(&stat, "rss ").or_else(|| kb(&stat, "anon ")).unwrap();
    assert!(
        charged >= anon_kib * 1024 * 9 / 10,
        "zygote {pid}: {charged} B of anonymous memory charged to {}, {anon_kib} KiB in its address space",
        cg.display()
    );
}

/// A debootstrap base (`sprout-serve rootfs build DIR`) instead of the host's /usr. Runs when
/// $SPROUT_SERVE_TEST_ROOTFS (default /var/tmp/sprout-serve-rootfs) holds one; skipped otherwise.
#[test]
fn custom_base_rootfs() {
    need_root!();
    let dir = std::env::var("SPROUT_SERVE_TEST_ROOTFS")
        .unwrap_or_else(|_| "/var/tmp/sprout-serve-rootfs".into());
    if !std::path::Path::new(&dir).join("usr/bin/python3").exists()
        || !std::path::Path::new(&dir).join(".sprout").is_dir()
    {
        eprintln!("skipped: no base rootfs at {dir} (sprout-serve rootfs build {dir})");
        return;
    }
    let d = Daemon::start("rootfs", &format!("base_rootfs = \"{dir}\"\n"));
    d.add(
        "os",
        "import sys, os\ndef f(e):\n    return {'python': sys.version.split()[0], 'debian': open('/etc/debian_version').read().strip(), 'proc': os.listdir('/proc') != []}\n",
        &[("handler.toml", "mount_ns = true\n")],
    );
    let r = d.post("os", "{}");
    assert_eq!(r.status, 200, "{} {}", r.body, d.log());
    eprintln!("custom base: {}", r.body);
    assert!(
        r.json()["debian"].as_str().unwrap().starts_with("12"),
        "{}",
        r.body
    );
    assert_eq!(r.json()["proc"], true);
    assert_eq!(d.post("os", "{}").header("x-sprout-path"), Some("hot"));
}

fn zygote<'a>(st: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    st["zygotes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["packages"] == key)
}

fn proc_field(pid: i64, field: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_string()))
        .unwrap()
}

fn memory_cgroup(pid: i64) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    // The v1 memory hierarchy's line where there is one, else the unified one ("0::").
    s.lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|x| x == "memory"))
        })
        .or_else(|| s.lines().find(|l| l.starts_with("0::")))
        .unwrap()
        .to_string()
}

/// Which packages were already imported (inherited from the zygote) when f.py started.
const PRE: &str =
    "import sys\nPRE = {m: m in sys.modules for m in ('pkga', 'pkgb')}\nimport pkga\n";

/// SOCK's zygote tree: the zygote for {a, b} is forked from the zygote for {a} (itself forked
/// from the root zygote) and imports only b; sandboxes fork from the best-matching zygote.
#[test]
fn zygote_tree_forks_children_from_parents() {
    need_root!();
    let wheels = std::path::PathBuf::from(format!(
        "/tmp/serve-test-tree-wheels-{}",
        std::process::id()
    ));
    make_pkg_wheel(&wheels, "pkga", "A = 1\n");
    make_pkg_wheel(&wheels, "pkgb", "B = 2\n");
    let d = Daemon::start(
        "tree",
        &format!(
            "pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\n",
            wheels.display()
        ),
    );
    assert!(eventually(10_000, || zygote(&d.status(), "")
        .is_some_and(|z| z["state"] == "ready")));
    let root_pid = zygote(&d.status(), "").unwrap()["pid"].as_i64().unwrap();
    let code_a = format!("{PRE}def f(e):\n    return PRE\n");
    d.add("a", &code_a, &[("requirements.txt", "pkga==1.0\n")]);
    // No zygote for {a} yet: forked from the root zygote, imports pkga itself.
    let r = d.post("a", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sprout-path"), Some("zygote"));
    assert_eq!(r.json(), serde_json::json!({"pkga": false, "pkgb": false}));
    assert!(
        eventually(10_000, || zygote(&d.status(), "pkga-1.0")
            .is_some_and(|z| z["state"] == "ready")),
        "{}",
        d.status()
    );
    let st = d.status();
    let za = zygote(&st, "pkga-1.0").unwrap();
    let za_pid = za["pid"].as_i64().unwrap();
    assert_eq!(za["parent"], "", "{za}");
    assert_eq!(za["imported"], serde_json::json!(["pkga"]), "{za}");
    // Pid 2 of a pid namespace of its own, under a holder (pid 1 there) forked by the root
    // zygote: what its packages run can name nothing outside that namespace.
    let holder_a: i64 = proc_field(za_pid, "PPid:").parse().unwrap();
    assert_eq!(proc_field(holder_a, "PPid:"), root_pid.to_string());
    assert!(
        proc_field(za_pid, "NSpid:").ends_with("\t2"),
        "{}",
        proc_field(za_pid, "NSpid:")
    );
    assert!(proc_field(holder_a, "NSpid:").ends_with("\t1"));
    assert_ne!(memory_cgroup(za_pid), memory_cgroup(root_pid));

    d.add(
        "ab",
        &format!("{PRE}import pkgb\ndef f(e):\n    return PRE\n"),
        &[("requirements.txt", "pkga==1.0\npkgb==1.0\n")],
    );
    // Best match {a}: pkga is inherited, pkgb imported by the sandbox.
    let r = d.post("ab", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), serde_json::json!({"pkga": true, "pkgb": false}));
    let key = "pkga-1.0,pkgb-1.0";
    assert!(
        eventually(10_000, || zygote(&d.status(), key)
            .is_some_and(|z| z["state"] == "ready")),
        "{}",
        d.status()
    );
    let st = d.status();
    let zab = zygote(&st, key).unwrap();
    let zab_pid = zab["pid"].as_i64().unwrap();
    assert_eq!(zab["parent"], "pkga-1.0", "{zab}");
    assert_eq!(zab["imported"], serde_json::json!(["pkgb"]), "{zab}");
    let holder_ab: i64 = proc_field(zab_pid, "PPid:").parse().unwrap();
    assert_eq!(proc_field(holder_ab, "PPid:"), za_pid.to_string());
    assert_eq!(
        proc_field(zab_pid, "NSpid:").split('\t').count(),
        proc_field(za_pid, "NSpid:").split('\t').count() + 1
    );
    assert_ne!(memory_cgroup(zab_pid), memory_cgroup(za_pid));
    // Chrooted into a root with both packages (the parent's has only pkga).
    assert!(
        std::fs::read_link(format!("/proc/{zab_pid}/root")).unwrap()
            != std::fs::read_link(format!("/proc/{za_pid}/root")).unwrap()
    );
    // A new sandbox of ab now forks from the {a, b} zygote: both inherited.
    d.add(
        "ab",
        &format!("{PRE}import pkgb\ndef f(e):\n    return PRE\n"),
        &[("requirements.txt", "pkga==1.0\npkgb==1.0\n")],
    );
    let r = d.post("ab", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), serde_json::json!({"pkga": true, "pkgb": true}));
    assert!(zygote(&d.status(), key).unwrap()["forks"].as_u64().unwrap() >= 1);
    let m = d.get("/metrics").body;
    assert!(m.contains("sprout_serve_zygote_evictions_total 0"), "{m}");
    let _ = std::fs::remove_dir_all(&wheels);
}

/// Zygotes count in the memory budget and are evicted LRU, leaves first; the root zygote
/// stays. Packages that allocate 16 MiB at import make the sizes unambiguous: the root zygote
/// (6-12 MiB with its spares and python's own start-up, by host: measured first by a probe
/// engine) + ~0.5 MiB per child zygote's holder + one package zygote (~21 MiB with its
/// spares) + the 8 MiB the engine reserves for a new sandbox fit in the root + 32 MiB, two
/// package zygotes do not.
#[test]
fn zygotes_evicted_lru_leaves_first_under_memory_pressure() {
    need_root!();
    let wheels = std::path::PathBuf::from(format!(
        "/tmp/serve-test-evict-wheels-{}",
        std::process::id()
    ));
    let blob = "BLOB = b'x' * (16 << 20)\n";
    make_pkg_wheel(&wheels, "big1", blob);
    make_pkg_wheel(&wheels, "big2", blob);
    make_pkg_wheel(&wheels, "small", "S = 1\n");
    // The root zygote once a request has taught it what its spares pre-fault and they are
    // refilled, as it will be below: the largest of a few reads.
    let root_mib = {
        let p = Daemon::start("evict-probe", "freeze_after_ms = 50\n");
        p.add("a", ECHO, &[]);
        assert!(root_spares_at_least(&p, 2), "{}", p.status());
        assert_eq!(p.post("a", "1").status, 200);
        assert!(root_spares_at_least(&p, 2), "{}", p.status());
        let mut z = 0u64;
        for _ in 0..6 {
            std::thread::sleep(Duration::from_millis(200));
            z = z.max(
                zygote(&p.status(), "").unwrap()["memory_bytes"]
                    .as_u64()
                    .unwrap(),
            );
        }
        z.div_ceil(1 << 20)
    };
    let budget_mib = root_mib + 32;
    eprintln!("root zygote {root_mib} MiB: budget {budget_mib} MiB");
    let d = Daemon::start(
        "evict",
        &format!(
            "pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\nmemory_budget_mb = {budget_mib}\nfreeze_after_ms = 50\n",
            wheels.display()
        ),
    );
    let ready = |k: &str| zygote(&d.status(), k).is_some_and(|z| z["state"] == "ready");
    assert!(eventually(10_000, || ready("")));
    let code = |m: &str| format!("import {m}\ndef f(e):\n    return len({m}.__name__)\n");
    d.add("one", &code("big1"), &[("requirements.txt", "big1==1.0\n")]);
    d.add("two", &code("big2"), &[("requirements.txt", "big2==1.0\n")]);
    d.add(
        "three",
        &code("small"),
        &[("requirements.txt", "big2==1.0\nsmall==1.0\n")],
    );
    assert_eq!(d.post("one", "{}").status, 200);
    assert!(eventually(10_000, || ready("big1-1.0")), "{}", d.status());
    let budget = budget_mib << 20;
    let under = || d.status()["memory"]["accounted_bytes"].as_u64().unwrap() <= budget;
    assert!(eventually(5_000, under), "{}", d.status());
    assert_eq!(d.post("two", "{}").status, 200);
    assert!(eventually(10_000, || ready("big2-1.0")), "{}", d.status());
    // {big1} was used least recently: evicted to make room for {big2}.
    assert!(
        eventually(5_000, || zygote(&d.status(), "big1-1.0").is_none()
            && under()),
        "{}",
        d.status()
    );
    assert!(ready("") && ready("big2-1.0"), "{}", d.status());
    // A child of {big2}: {big2, small}. Then pressure again (a new big1 sandbox): the leaf
    // {big2, small} goes before its parent {big2}, although the parent was used earlier.
    assert_eq!(d.post("three", "{}").status, 200);
    assert!(
        eventually(10_000, || ready("big2-1.0,small-1.0")),
        "{}",
        d.status()
    );
    assert_eq!(
        zygote(&d.status(), "big2-1.0,small-1.0").unwrap()["parent"],
        "big2-1.0",
        "{}",
        d.status()
    );
    assert_eq!(d.post("one", "{}").status, 200);
    assert!(eventually(5_000, under), "{}", d.status());
    assert!(
        ready(""),
        "the root zygote is never evicted: {}",
        d.status()
    );
    let log = d.log();
    let evicted: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("sprout-serve: evicting zygote ["))
        .filter_map(|l| l.split(']').next())
        .collect();
    eprintln!("zygotes evicted, in order: {evicted:?}");
    assert_eq!(evicted.first(), Some(&"big1-1.0"), "{log}");
    let child = evicted.iter().position(|k| *k == "big2-1.0,small-1.0");
    assert!(child.is_some(), "{log}\n{}", d.status());
    if let Some(parent) = evicted.iter().position(|k| *k == "big2-1.0") {
        assert!(
            child.unwrap() < parent,
            "parent evicted before its child: {evicted:?}"
        );
    }
    let m = d.get("/metrics").body;
    let n: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("sprout_serve_zygote_evictions_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert_eq!(n as usize, evicted.len(), "{m}");
    let _ = std::fs::remove_dir_all(&wheels);
}

/// Host pids whose parent is `ppid`.
fn children_of(ppid: i64) -> Vec<i64> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i64>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("PPid:").map(|v| v.trim().to_string()))
                })
                .is_some_and(|v| v == ppid.to_string())
        })
        .collect()
}

#[test]
fn zygote_forks_once_into_a_new_pid_namespace() {
    need_root!();
    let d = Daemon::start("onefork", "zygote_spares = 2\n");
    assert!(eventually(10_000, || zygote(&d.status(), "")
        .is_some_and(|z| z["state"] == "ready")));
    let zpid = zygote(&d.status(), "").unwrap()["pid"].as_i64().unwrap();
    // Done once in the zygote for all its children: bounding set, groups, no_new_privs.
    assert_eq!(proc_field(zpid, "CapBnd:"), "0000000000000000");
    assert_eq!(proc_field(zpid, "NoNewPrivs:"), "1");
    assert_eq!(proc_field(zpid, "Groups:"), "");
    let code = "import os, sys\n\
                def f(event):\n    \
                    if event == 'raise':\n        \
                        raise ValueError('boom')\n    \
                    return {'pid': os.getpid(), 'env': dict(os.environ), 'file': __file__,\n            \
                            'name': __name__, 'mod': sys.modules[__name__].__name__}\n";
    let names = ["p0", "p1", "p2", "p3", "p4", "p5"];
    for h in names {
        d.add(h, code, &[]);
    }
    for h in names {
        let r = d.post(h, "{}");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-sprout-path"), Some("zygote"));
        let v = r.json();
        assert_eq!(v["pid"], 1, "{v}");
        assert_eq!(v["file"], "/handler/f.py", "{v}");
        assert_eq!(v["name"], "f", "{v}");
        assert_eq!(v["mod"], "f", "{v}");
        // The zygote's base environment + the handler's name, nothing of the zygote's own.
        assert_eq!(
            v["env"],
            serde_json::json!({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
                               "LANG": "C.UTF-8", "TMPDIR": "/tmp", "SPROUT_HANDLER": h}),
            "{v}"
        );
    }
    // zygote_learn_prewarm (default): the first request taught the zygote which of its pages
    // a child copies on write; spares forked since pre-fault them, and serve like the others.
    assert!(eventually(5_000, || zygote(&d.status(), "")
        .is_some_and(|z| z["hot_pages"].as_u64().unwrap_or(0) > 0)));
    std::thread::sleep(Duration::from_millis(300)); // spares refilled meanwhile
    for h in ["p6", "p7"] {
        d.add(h, code, &[]);
        let r = d.post(h, "{}");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-sprout-path"), Some("zygote"));
        let v = r.json();
        assert_eq!(v["pid"], 1, "{v}");
        assert_eq!(v["env"]["SPROUT_HANDLER"], h, "{v}");
    }
    // A traceback still shows the handler's source line (linecache reads /handler/f.py).
    let r = d.post("p0", "\"raise\"");
    assert_eq!(r.status, 500, "{}", r.body);
    let tb = r.json()["traceback"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        tb.contains("/handler/f.py\", line 4") && tb.contains("raise ValueError('boom')"),
        "{tb}"
    );
    // One fork: every sandbox (and spare) is a child of the zygote itself, pid 1 of a pid
    // namespace of its own; the zygote is pid 1 of the zygotes' pid namespace (owned by
    // their user namespace), below the engine's.
    let own_ns = std::fs::read_link(format!("/proc/{zpid}/ns/pid")).unwrap();
    assert_ne!(
        own_ns,
        std::fs::read_link(format!("/proc/{}/ns/pid", d.pid())).unwrap()
    );
    assert_eq!(proc_field(zpid, "NSpid:"), format!("{zpid}\t1"));
    // zygote_text_ptes (default): python's code mapping has an anonymous page (so fork
    // copies its page table entries), and the zygote no longer holds the host's /proc.
    let smaps = std::fs::read_to_string(format!("/proc/{zpid}/smaps")).unwrap();
    let mut lines = smaps.lines();
    let mut text_anon = None;
    while let Some(l) = lines.next() {
        if l.contains(" r-xp ") && l.contains("python3") {
            text_anon = lines
                .by_ref()
                .take_while(|l| !l.contains(" r--p ") && !l.contains(" rw-p "))
                .find_map(|l| l.strip_prefix("Anonymous:"))
                .map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap());
            break;
        }
    }
    assert!(text_anon.is_some_and(|kb| kb > 0), "{text_anon:?}");
    for fd in std::fs::read_dir(format!("/proc/{zpid}/fd")).unwrap() {
        let l = std::fs::read_link(fd.unwrap().path()).unwrap_or_default();
        assert_ne!(l, std::path::Path::new("/proc"));
    }
    let kids = children_of(zpid);
    assert!(kids.len() >= names.len(), "{kids:?}");
    let mut seen = std::collections::HashSet::new();
    for k in &kids {
        let nspid = proc_field(*k, "NSpid:");
        let ids: Vec<&str> = nspid.split_whitespace().collect();
        assert_eq!(ids.len(), 3, "pid {k}: NSpid {nspid}");
        assert_eq!(ids[2], "1", "pid {k}: NSpid {nspid}");
        let ns = std::fs::read_link(format!("/proc/{k}/ns/pid")).unwrap();
        assert_ne!(ns, own_ns);
        assert!(seen.insert(ns), "two sandboxes share a pid namespace");
        // No fd of the zygote's pid namespace leaked into a sandbox, nor (spares are forked
        // in batches when none is ready) another spare's socket or cgroup fds: one socket,
        // no cgroup file. A spare the housekeeping is refilling right now still holds its
        // own cgroup.procs fds until it has joined (a write that can wait for an RCU grace
        // period), then closes them: what leaked stays, so look until it is gone.
        let fds_of = |k: i64| -> Vec<String> {
            std::fs::read_dir(format!("/proc/{k}/fd"))
                .map(|rd| {
                    rd.flatten()
                        .map(|fd| {
                            let l = std::fs::read_link(fd.path()).unwrap_or_default();
                            l.to_string_lossy().to_string()
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let clean = |fds: &[String]| {
            fds.iter()
                .all(|l| !l.starts_with("pid:") && !l.contains("cgroup") && !l.starts_with("/proc"))
                && fds.iter().filter(|l| l.starts_with("socket:")).count() == 1
        };
        assert!(
            eventually(5_000, || clean(&fds_of(*k)) || !alive(&(*k as i32))),
            "pid {k}: {:?}",
            fds_of(*k)
        );
    }
    // Sandbox roots are mount points on a tmpfs of the run dir.
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let roots = d.run_dir.join("roots");
    assert!(
        mi.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.get(4) == Some(&roots.to_str().unwrap())
                && l.split(" - ")
                    .nth(1)
                    .is_some_and(|t| t.starts_with("tmpfs "))
        }),
        "{mi}"
    );
    // Pool cgroups exist only in the hierarchies a sandbox joins (v1/hybrid hosts).
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let dir_in = |ctrl: &str| {
        own.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, c, p) = (it.next()?, it.next()?, it.next()?);
            c.split(',').any(|x| x == ctrl).then(|| {
                std::path::Path::new("/sys/fs/cgroup")
                    .join(ctrl)
                    .join(p.trim_start_matches('/'))
                    .join(&d.cgroup_name)
            })
        })
    };
    if let Some(mem) = dir_in("memory") {
        assert!(mem.join("sb1").is_dir(), "{}", mem.display());
        for ctrl in ["cpuset", "blkio", "devices", "net_cls", "perf_event"] {
            if let Some(dir) = dir_in(ctrl) {
                assert!(!dir.exists(), "{} created", dir.display());
            }
        }
    }
    // pool_cpu_shares unset: the pool's parent weighs 1024 per CPU (v1 cpu.shares).
    if let Some(cpu) = dir_in("cpu").filter(|d| d.join("cpu.shares").exists()) {
        let n = std::thread::available_parallelism().unwrap().get() as u64;
        let shares = std::fs::read_to_string(cpu.join("cpu.shares")).unwrap();
        assert_eq!(shares.trim(), (1024 * n).to_string(), "{}", cpu.display());
    }
}

#[test]
fn pool_never_hands_out_an_occupied_or_frozen_cgroup() {
    need_root!();
    // Pool directories that already exist with a (frozen) process in them, as a killed
    // engine with the same cgroup name can leave them: a sandbox joining a frozen v1 freezer
    // cgroup would freeze in the middle of its start (a 10 s start timeout).
    let mut d = Daemon::config("poolclean", "zygotes = false\nzygote_spares = 0\n");
    // v1: the freezer hierarchy (freezer.state); pure v2: the unified one (cgroup.freeze),
    // with the controllers a previous engine would have enabled in the directory it made.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let v1 = own.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, c, p) = (it.next()?, it.next()?, it.next()?);
        (c == "freezer").then(|| p.to_string())
    });
    let base = match (&v1, common::v2_pool_base(&d.cgroup_name)) {
        (Some(fpath), _) => std::path::Path::new("/sys/fs/cgroup/freezer")
            .join(fpath.trim_start_matches('/'))
            .join(&d.cgroup_name),
        (None, Some(b)) => {
            std::fs::create_dir_all(&b).unwrap();
            let offered = std::fs::read_to_string(b.join("cgroup.controllers")).unwrap();
            let line: Vec<String> = offered
                .split_whitespace()
                .map(|c| format!("+{c}"))
                .collect();
            std::fs::write(b.join("cgroup.subtree_control"), line.join(" ")).unwrap();
            b
        }
        (None, None) => {
            eprintln!("skipped: no v1 freezer hierarchy and not a pure cgroup v2 host");
            return;
        }
    };
    let (file, on, state, frozen) = if v1.is_some() {
        ("freezer.state", "FROZEN", "freezer.state", "FROZEN")
    } else {
        ("cgroup.freeze", "1", "cgroup.events", "frozen 1")
    };
    // Whatever happens below, the processes planted here go: thawed (a SIGKILL waits while
    // a task is frozen) and killed. A failed start of the engine left one frozen for good,
    // holding the test run's stdout.
    struct Planted(
        Vec<(std::process::Child, std::path::PathBuf)>,
        &'static str,
        &'static str,
    );
    impl Drop for Planted {
        fn drop(&mut self) {
            for (c, dir) in &mut self.0 {
                let _ = std::fs::write(dir.join(self.1), self.2);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut planted = Planted(vec![], file, if v1.is_some() { "THAWED" } else { "0" });
    for sb in ["sb1", "sb2"] {
        let dir = base.join(sb);
        std::fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .unwrap();
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).unwrap();
        std::fs::write(dir.join(file), on).unwrap();
        assert!(eventually(2_000, || std::fs::read_to_string(
            dir.join(state)
        )
        .unwrap()
        .lines()
        .any(|l| l.trim() == frozen)));
        planted.0.push((child, dir));
    }
    d.spawn();
    for h in ["a", "b", "c"] {
        d.add(h, ECHO, &[]);
        let t = Instant::now();
        let r = d.post(h, "1");
        assert_eq!(r.status, 200, "{}\n{}", r.body, d.log());
        assert_eq!(r.header("x-sprout-path"), Some("cold"));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
    for (c, _) in &mut planted.0 {
        let dead = eventually(3_000, || c.try_wait().unwrap().is_some());
        assert!(dead, "a process planted in a pool cgroup survived");
    }
}

#[test]
fn cold_start_is_one_clone_and_a_compiled_init() {
    need_root!();
    let d = Daemon::start("coldone", "zygotes = false\nzygote_spares = 1\n");
    // The init module is pre-compiled: sprout_zygote.py is imported from its .pyc.
    let cache = d.run_dir.join("pylib/__pycache__");
    let pyc = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.starts_with("sprout_zygote.cpython-") && n.ends_with(".pyc")
        });
    assert!(pyc, "no .pyc in {}", cache.display());
    let code = "import os, sys\n\
                def f(event):\n    \
                    m = sys.modules.get('sprout_zygote')\n    \
                    return {'pid': os.getpid(), 'uid': os.getuid(), 'gid': os.getgid(),\n            \
                            'groups': os.getgroups(), 'init': m.__file__ if m else None,\n            \
                            'main': sys.modules['__main__'].__file__, 'env': dict(os.environ)}\n";
    for h in ["c0", "c1", "c2"] {
        d.add(h, code, &[]);
        let r = d.post(h, "{}");
        assert_eq!(r.status, 200, "{}\n{}", r.body, d.log());
        assert_eq!(r.header("x-sprout-path"), Some("cold"));
        let v = r.json();
        assert_eq!(v["pid"], 1, "{v}");
        assert_eq!(
            (v["uid"].clone(), v["gid"].clone()),
            (65534.into(), 65534.into())
        );
        assert_eq!(v["groups"], serde_json::json!([]), "{v}");
        assert_eq!(v["init"], "/.sprout/sprout_zygote.py", "{v}");
        assert_eq!(v["main"], "/.sprout/sprout_init.py", "{v}");
        // The init sets the environment without importing os; os.environ, built later by
        // the handler's own `import os`, has exactly the sandbox's.
        assert_eq!(
            v["env"],
            serde_json::json!({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
                               "LANG": "C.UTF-8", "TMPDIR": "/tmp", "SPROUT_HANDLER": h}),
            "{v}"
        );
    }
    // One process per sandbox, a direct child of the engine (no intermediate), pid 1 of a
    // pid namespace of its own.
    let kids: Vec<i64> = children_of(i64::from(d.pid()))
        .into_iter()
        .filter(|k| proc_field(*k, "NSpid:").split_whitespace().count() == 2)
        .collect();
    assert!(kids.len() >= 3, "{kids:?}");
    let mut seen = std::collections::HashSet::new();
    for k in &kids {
        assert!(
            proc_field(*k, "NSpid:").ends_with("\t1") || proc_field(*k, "NSpid:").ends_with(" 1")
        );
        assert!(seen.insert(std::fs::read_link(format!("/proc/{k}/ns/pid")).unwrap()));
        // A cold spare cloned by the housekeeping right now is still on its way into its
        // pool cgroup (a v1 migration can wait for an RCU grace period): it must get there.
        let (mut cg, mut n) = (String::new(), 0);
        let alone = eventually(2_000, || {
            cg = memory_cgroup(*k);
            // v1 memory hierarchy, or the unified one on a pure v2 host ("0::/path")
            let mount = if cg.starts_with("0::") {
                "/sys/fs/cgroup"
            } else {
                "/sys/fs/cgroup/memory"
            };
            n = std::fs::read_to_string(
                std::path::Path::new(mount)
                    .join(cg.rsplit(':').next().unwrap().trim_start_matches('/'))
                    .join("cgroup.procs"),
            )
            .unwrap()
            .lines()
            .count();
            n == 1
        });
        assert!(alone, "pid {k}: {n} processes in {cg}");
    }
}

const LIST_FDS: &str = r#"
import os
def f(event):
    fds = []
    for fd in range(4096):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            pass
    return {"fds": fds, "stdin_rdev": os.fstat(0).st_rdev}
"#;

/// Issue #17: an fd the engine inherited from whatever started it (here a pipe on fd 251)
/// reached the zygote and every sandbox. Now a sandbox holds exactly 0-3 (stdin /dev/null,
/// stdout/stderr, its socket) on the zygote, cold-spare and plain cold paths.
#[test]
fn inherited_fds_do_not_reach_sandboxes() {
    need_root!();
    for (name, extra, path) in [
        ("fdz", "", "zygote"),
        ("fdc", "zygotes = false\n", "cold"),
        ("fdn", "zygotes = false\nzygote_spares = 0\n", "cold"),
    ] {
        let mut d = Daemon::config(name, extra);
        let _r = d.spawn_with_extra_fd(251);
        d.add("fds", LIST_FDS, &[]);
        if path == "zygote" {
            assert!(
                eventually(10_000, || d.status()["zygotes"][0]["state"] == "ready"),
                "{}",
                d.status()
            );
        } else if name == "fdc" {
            assert!(
                eventually(5_000, || d.status()["cold_spares"] == 2),
                "{}",
                d.status()
            );
        }
        let r = d.post("fds", "{}");
        assert_eq!(r.status, 200, "{name}: {}", r.body);
        assert_eq!(r.header("x-sprout-path"), Some(path), "{name}: {}", r.body);
        let v = r.json();
        // stdin, stdout, stderr and the sandbox's socket (fd 3 when exec'd; a forked
        // sandbox keeps the number its zygote received it on).
        let fds = v["fds"].as_array().unwrap();
        assert_eq!(fds.len(), 4, "{name}: {v}");
        assert_eq!(fds[..3], [0, 1, 2], "{name}: {v}");
        assert!(!fds.contains(&251.into()), "{name}: {v}");
        // /dev/null is char device 1:3.
        assert_eq!(v["stdin_rdev"], 0x103, "{name}: {v}");
        if name == "fdz" {
            let z = d.status()["zygotes"][0]["pid"].as_i64().unwrap();
            assert!(
                std::fs::metadata(format!("/proc/{z}/fd/251")).is_err(),
                "the zygote holds fd 251"
            );
        }
    }
}

/// Issue #17: a cold spare is a raw clone of the engine that waits, before its exec, for a
/// handler. It used to keep a copy of every fd the engine had until then: the listening
/// socket, the other spares' sockets, pool cgroup fds, whatever the engine inherited. Now a
/// waiting spare holds exactly 0-2 on /dev/null and its own socket on 3.
#[test]
fn waiting_cold_spares_hold_none_of_the_engines_fds() {
    need_root!();
    let mut d = Daemon::config("fdspare", "zygotes = false\n");
    let _r = d.spawn_with_extra_fd(251);
    assert!(
        eventually(5_000, || d.status()["cold_spares"] == 2),
        "{}",
        d.status()
    );
    let engine = d.child.as_ref().unwrap().id();
    let engine_fds = std::fs::read_dir(format!("/proc/{engine}/fd"))
        .unwrap()
        .count();
    // The engine counts a spare once it is cloned; the spare joins its cgroup (with the
    // pool's fds) and closes the rest right after: wait for that, then look at each.
    let settled = || {
        let p = pool_procs(&d);
        p.len() == 2
            && p.iter()
                .all(|p| std::fs::read_dir(format!("/proc/{p}/fd")).is_ok_and(|rd| rd.count() <= 4))
    };
    eventually(5_000, settled);
    assert_eq!(pool_procs(&d).len(), 2, "{:?}", pool_procs(&d));
    for p in pool_procs(&d) {
        let mut fds: Vec<(i32, String)> = std::fs::read_dir(format!("/proc/{p}/fd"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let fd = e.file_name().to_str().unwrap().parse().unwrap();
                let to = std::fs::read_link(e.path()).unwrap();
                (fd, to.to_string_lossy().into_owned())
            })
            .collect();
        fds.sort();
        let nums: Vec<i32> = fds.iter().map(|(fd, _)| *fd).collect();
        assert_eq!(
            nums,
            [0, 1, 2, 3],
            "spare {p} (the engine has {engine_fds}): {fds:?}"
        );
        for (fd, to) in &fds[..3] {
            assert_eq!(to, "/dev/null", "spare {p} fd {fd}: {fds:?}");
        }
        assert!(fds[3].1.starts_with("socket:"), "spare {p}: {fds:?}");
    }
    // The spares still work after the hand-over.
    d.add("fds", LIST_FDS, &[]);
    let r = d.post("fds", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sprout-path"), Some("cold"), "{}", r.body);
    assert_eq!(r.json()["fds"].as_array().unwrap().len(), 4, "{}", r.body);
}

/// Issue #17: `handler remove ../victim` and `handler remove /abs/path` deleted directories
/// outside the registry. Every command takes the name through one check: a one-line error
/// naming it, a non-zero exit, nothing touched.
#[test]
fn handler_names_are_checked_everywhere() {
    let d = Daemon::config("names", "");
    let reg = d.dir.join("registry");
    std::fs::create_dir_all(&reg).unwrap();
    let victim = d.dir.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("f.py"), ECHO).unwrap();
    let src = d.dir.join("src-ok");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f.py"), ECHO).unwrap();
    let abs = victim.to_str().unwrap().to_string();
    for name in [
        "../victim",
        abs.as_str(),
        "..",
        ".",
        "",
        "a/../../victim",
        "x y",
        &"n".repeat(65),
    ] {
        for args in [
            vec!["handler", "remove", name],
            vec!["handler", "add", name, src.to_str().unwrap()],
        ] {
            let out = d.cli(&args);
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(!out.status.success(), "{args:?} succeeded: {err}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.contains("bad handler name") && err.contains(&format!("'{name}'")),
                "{args:?}: {err}"
            );
            assert!(victim.join("f.py").is_file(), "{args:?} removed the victim");
        }
    }
    // Nothing was added either.
    let left: Vec<_> = std::fs::read_dir(&reg).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(std::fs::read_dir(&d.dir).unwrap().count(), 4); // config, registry, victim, src-ok
                                                               // A good name still works both ways.
    assert!(d
        .cli(&["handler", "add", "ok", src.to_str().unwrap()])
        .status
        .success());
    assert!(d.cli(&["handler", "remove", "ok"]).status.success());
    assert!(!reg.join("ok").exists());
}

/// `handler add` from a ConfigMap-style directory (`f.py -> ..data/f.py`, `..data ->
/// ..2026_x`): the handler is registered whole (the symlinks inside the directory followed, the
/// atomic-writer entries not copied), and a symlink leading out of the directory is not
/// followed. Before: symlinks were skipped, so the registry got no f.py.
#[test]
fn handler_add_follows_symlinks_inside_the_directory_only() {
    use std::os::unix::fs::symlink;
    let d = Daemon::config("cmadd", "");
    let reg = d.dir.join("registry");
    let src = d.dir.join("cm");
    let stamp = src.join("..2026_11_25_23_00_00.123");
    std::fs::create_dir_all(stamp.join("lib")).unwrap();
    std::fs::write(stamp.join("f.py"), ECHO).unwrap();
    std::fs::write(stamp.join("lib/x.txt"), "x").unwrap();
    symlink("..2026_11_25_23_00_00.123", src.join("..data")).unwrap();
    symlink("..data/f.py", src.join("f.py")).unwrap();
    symlink("..data/lib", src.join("lib")).unwrap();
    let outside = d.dir.join("secret.txt");
    std::fs::write(&outside, "host secret").unwrap();
    symlink(&outside, src.join("leak.txt")).unwrap();
    let out = d.cli(&["handler", "add", "cm", src.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    let h = reg.join("cm");
    assert_eq!(std::fs::read_to_string(h.join("f.py")).unwrap(), ECHO);
    assert!(!std::fs::symlink_metadata(h.join("f.py"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(h.join("lib/x.txt")).unwrap(), "x");
    assert!(
        !h.join("leak.txt").exists(),
        "a symlink out of the directory was followed"
    );
    assert!(err.contains("leak.txt"), "{err}");
    let names: Vec<String> = std::fs::read_dir(&h)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".."))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

const LOGS: &str = r#"
import os, sys
def f(event):
    out = {}
    for name, call in [("ftruncate", lambda: os.ftruncate(1, 0)),
                       ("fallocate", lambda: os.posix_fallocate(1, 0, 1 << 24)),
                       ("lseek", lambda: os.lseek(2, 0, 0))]:
        try:
            call()
            out[name] = "ok"
        except OSError as e:
            out[name] = e.errno
    print("hello from the handler", flush=True)
    sys.stderr.write("an error line\n[other s999] forged line\n")
    sys.stderr.flush()
    if event and event.get("flood"):
        chunk = b"x" * 65535 + b"\n"
        for _ in range(int(event["flood"])):
            os.write(1, chunk)
    return out
"#;

/// Issue #17: a sandbox's stdout/stderr was the engine's own log file: a tenant could
/// truncate it, fallocate it to any size or forge lines. Now each sandbox writes into a pipe
/// the engine drains (a byte cap per sandbox), every line tagged by the engine with the
/// handler and sandbox id; the log stays where the operator put it after a clean shutdown.
#[test]
fn sandbox_output_is_a_capped_tagged_pipe() {
    need_root!();
    for (name, extra) in [("logz", ""), ("logc", "zygotes = false\n")] {
        let mut d = Daemon::start(name, extra);
        d.add("logs", LOGS, &[]);
        let log = d.sandbox_log();
        let r = d.post("logs", "{}");
        assert_eq!(r.status, 200, "{name}: {}", r.body);
        let v = r.json();
        for k in ["ftruncate", "fallocate", "lseek"] {
            assert!(
                v[k] == libc::EINVAL || v[k] == libc::ESPIPE,
                "{name}: {k} on the sandbox's stdout: {v}"
            );
        }
        let text = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            eventually(5_000, || text().contains("an error line")),
            "{name}: {}",
            text()
        );
        let lines: Vec<String> = text().lines().map(String::from).collect();
        let hello = lines
            .iter()
            .find(|l| l.contains("hello from the handler"))
            .unwrap_or_else(|| panic!("{name}: {lines:?}"));
        assert!(hello.starts_with("[logs s"), "{name}: {hello}");
        let forged = lines.iter().find(|l| l.contains("forged line")).unwrap();
        assert!(forged.starts_with("[logs s"), "{name}: {forged}");
        // 64 lines of 64 KiB: the engine keeps the sandbox's first sandbox_log_bytes.
        let before = std::fs::metadata(&log).unwrap().len();
        let r = d.post("logs", r#"{"flood": 64}"#);
        assert_eq!(r.status, 200, "{name}: {}", r.body);
        assert!(
            eventually(5_000, || text().contains("capped")),
            "{name}: no cap notice"
        );
        let grown = std::fs::metadata(&log).unwrap().len() - before;
        assert!(
            grown < (1 << 20) + (64 << 10),
            "{name}: log grew by {grown}"
        );
        d.stop();
        assert!(log.is_file(), "{name}: the log went with the shutdown");
    }
}

const IO_URING: &str = r#"
import ctypes, os
def f(event):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)
    out = {}
    for name, nr, args in [("setup", 425, (1, params)),
                           ("enter", 426, (-1, 0, 0, 0, None, 0)),
                           ("register", 427, (-1, 0, None, 0))]:
        ctypes.set_errno(0)
        r = libc.syscall(nr, *args)
        out[name] = [r, ctypes.get_errno()]
        if r >= 0:
            os.close(r)
    return out
"#;

/// Issue #17: io_uring (a large kernel attack surface, and a way around per-syscall
/// filtering) was allowed by the sandbox's seccomp deny list. Now EPERM on both start paths.
#[test]
fn io_uring_is_denied() {
    need_root!();
    for (name, extra, path) in [("urz", "", "zygote"), ("urc", "zygotes = false\n", "cold")] {
        let d = Daemon::start(name, extra);
        d.add("ur", IO_URING, &[]);
        if path == "zygote" {
            assert!(eventually(10_000, || d.status()["zygotes"][0]["state"] == "ready"));
        }
        let r = d.post("ur", "{}");
        assert_eq!(r.status, 200, "{name}: {}", r.body);
        assert_eq!(r.header("x-sprout-path"), Some(path));
        let v = r.json();
        for k in ["setup", "enter", "register"] {
            assert_eq!(v[k], serde_json::json!([-1, libc::EPERM]), "{name}: {v}");
        }
    }
}

/// Issue #17: bodies that serde accepts but the sandbox's python cannot take (100k-deep
/// nesting, invalid UTF-8 inside a string, an integer over python's 4300-digit limit) cost
/// a cached sandbox and answered 502. The engine rejects them with 400 before any sandbox
/// sees them; the sandbox that served before serves again (hot).
#[test]
fn bodies_python_cannot_take_are_rejected_by_the_engine() {
    need_root!();
    let d = Daemon::start("bodies", "freeze_after_ms = 60000\n");
    d.add("echo", ECHO, &[]);
    assert_eq!(d.post("echo", "1").status, 200);
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep101 = format!("{}{}", "[".repeat(101), "]".repeat(101));
    let digits = "1".repeat(5001);
    let in_obj = format!("{{\"a\": [true, -{}]}}", "9".repeat(4301));
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("100k deep", deep.into_bytes()),
        ("101 deep", deep101.into_bytes()),
        ("5001 digits", digits.into_bytes()),
        ("4301 digits in an object", in_obj.into_bytes()),
        ("invalid UTF-8", b"{\"s\": \"\xff\xfe\"}".to_vec()),
        ("overlong UTF-8", b"\"\xc0\xaf\"".to_vec()),
    ];
    for (what, body) in bad {
        let r = d.try_req("POST", "/run/echo", &body).unwrap();
        assert_eq!(
            (r.status, r.json()["kind"].as_str()),
            (400, Some("bad_json")),
            "{what}: {}",
            r.body
        );
        let r = d.post("echo", "2");
        assert_eq!(r.status, 200, "after {what}: {}", r.body);
        assert_eq!(r.header("x-sprout-path"), Some("hot"), "after {what}");
    }
    // At the limits: 100 deep, 4300 digits, a long float, escaped non-ASCII: served.
    let ok100 = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let r = d.post("echo", &ok100);
    assert_eq!(r.status, 200, "{}", r.body);
    // (Not echoed: the engine's reply parser takes no integer beyond f64's range.)
    d.add("len", "def f(event):\n    return len(str(event))\n", &[]);
    let r = d.post("len", &"7".repeat(4300));
    assert_eq!((r.status, r.body.as_str()), (200, "4300"), "{}", r.body);
    let r = d.post(
        "echo",
        &format!("[1.{}, \"\\u00e9\\ud83d\\ude00\", \"é\"]", "5".repeat(5000)),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sprout-path"), Some("hot"), "{}", r.body);
}

/// Writes its reply straight to the sandbox's socket, one byte every 0.25 s (a valid reply
/// of 22 bytes in 5.5 s), then sleeps: a per-read timeout never fires on it.
const TRICKLE: &str = r#"
import os, stat, time
def f(e):
    fd = next(i for i in range(3, 256) if _sock(i))
    body = b'{"ok":true,"result":1}'
    os.write(fd, len(body).to_bytes(4, "little"))
    for b in body:
        os.write(fd, bytes([b]))
        time.sleep(0.25)
    time.sleep(60)
def _sock(i):
    try:
        return stat.S_ISSOCK(os.fstat(i).st_mode)
    except OSError:
        return False
"#;

#[test]
fn one_deadline_per_request_and_handler_config_only_tightens() {
    need_root!();
    let d = Daemon::start(
        "deadline",
        "timeout_ms = 2000\n[sandbox]\nnetwork_ns = true\n",
    );
    // A handler that asks for an endless timeout and no network namespace gets neither.
    let loosen = [(
        "handler.toml",
        "timeout_ms = 9223372036854775807\nnetwork_ns = false\n",
    )];
    d.add("trickle", TRICKLE, &loosen);
    let t = Instant::now();
    let r = d.post("trickle", "1");
    let took = t.elapsed();
    assert_eq!(r.status, 504, "{} after {took:?}", r.body);
    assert_eq!(r.json()["kind"], "timeout", "{}", r.body);
    assert!(took < Duration::from_millis(4_500), "504 after {took:?}");
    d.add(
        "nets",
        "import socket\ndef f(e):\n    return sorted(n for _, n in socket.if_nameindex())\n",
        &loosen,
    );
    let r = d.post("nets", "1");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), serde_json::json!(["lo"]), "{}", r.body);
    // A shorter timeout of its own holds.
    d.add(
        "short",
        "import time\ndef f(e):\n    time.sleep(3)\n",
        &[("handler.toml", "timeout_ms = 300\n")],
    );
    let t = Instant::now();
    assert_eq!(d.post("short", "1").status, 504);
    assert!(
        t.elapsed() < Duration::from_millis(2_500),
        "{:?}",
        t.elapsed()
    );
}

fn vm_hwm_kib(pid: i32) -> u64 {
    proc_field(i64::from(pid), "VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn replies_are_capped_and_not_parsed_into_a_tree() {
    need_root!();
    let d = Daemon::start("replycap", "max_reply_bytes = 4194304\n");
    d.add("big", "def f(n):\n    return [0] * n\n", &[]);
    assert_eq!(d.post("big", "10").status, 200);
    let before = vm_hwm_kib(d.pid());
    // 3 MB of `0,`: a tree of 1.5 M values (~48 MB) if the engine parsed it.
    let r = d.post("big", "1500000");
    assert_eq!(r.status, 200, "{}", &r.body[..r.body.len().min(200)]);
    assert_eq!(r.body.len(), 3_000_001);
    let grew = vm_hwm_kib(d.pid()).saturating_sub(before);
    assert!(
        grew < 20 * 1024,
        "engine peak RSS grew {grew} KiB for a 3 MB reply"
    );
    // Over the cap: not read, the sandbox goes, the next request gets a fresh one.
    let r = d.post("big", "3000000");
    assert_eq!(r.status, 502, "{}", &r.body[..r.body.len().min(200)]);
    assert_eq!(r.json()["kind"], "reply_too_large", "{}", r.body);
    let grew = vm_hwm_kib(d.pid()).saturating_sub(before);
    assert!(grew < 20 * 1024, "engine peak RSS grew {grew} KiB");
    assert_eq!(d.post("big", "3").status, 200);
}

#[test]
fn a_slow_handler_queues_boundedly_and_delays_no_other() {
    need_root!();
    let d = Daemon::start(
        "starve",
        "max_per_handler = 2\nmax_queue_per_handler = 3\ntimeout_ms = 30000\n",
    );
    d.add(
        "slow",
        "import time\ndef f(e):\n    time.sleep(3)\n    return e\n",
        &[],
    );
    d.add("echo", ECHO, &[]);
    assert_eq!(d.post("echo", "0").status, 200);
    let rs: Vec<(Resp, Duration)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..12)
            .map(|i| {
                let d = &d;
                s.spawn(move || {
                    let t = Instant::now();
                    let r = d.post("slow", &i.to_string());
                    (r, t.elapsed())
                })
            })
            .collect();
        // While two run and three wait, another handler answers at once.
        std::thread::sleep(Duration::from_millis(1_000));
        assert_eq!(
            d.status()["handlers"]["slow"]["queued"],
            3,
            "{}",
            d.status()
        );
        let t = Instant::now();
        let r = d.post("echo", "1");
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "echo took {:?}",
            t.elapsed()
        );
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = rs.iter().filter(|(r, _)| r.status == 200).count();
    let busy: Vec<&(Resp, Duration)> = rs.iter().filter(|(r, _)| r.status == 503).collect();
    assert_eq!(
        ok,
        5,
        "2 running + 3 queued: {:?}",
        rs.iter().map(|(r, _)| r.status).collect::<Vec<_>>()
    );
    assert_eq!(busy.len(), 7);
    for (r, took) in busy {
        assert_eq!(r.json()["kind"], "busy", "{}", r.body);
        assert!(*took < Duration::from_secs(2), "503 after {took:?}");
    }
}

#[test]
fn sandboxes_die_with_a_killed_engine() {
    need_root!();
    let mut d = Daemon::start("orphans", "freeze_after_ms = 50\n");
    d.add("echo", ECHO, &[]);
    d.add("spin", "def f(e):\n    while True:\n        pass\n", &[]);
    assert_eq!(d.post("echo", "1").status, 200);
    assert!(eventually(2_000, || d.status()["sandboxes"]["warm"] == 1));
    post_in_background(d.port, "spin", "1", Duration::from_secs(20));
    assert!(eventually(5_000, || d.status()["handlers"]["spin"]["live"] == 1));
    std::thread::sleep(Duration::from_millis(300));
    let pids = pool_procs(&d);
    assert!(pids.len() >= 3, "zygote + 2 sandboxes: {pids:?}");
    d.crash();
    // Nobody runs `cleanup` or a new engine: they die by themselves, and their cgroups go.
    assert!(
        eventually(5_000, || !pids.iter().any(alive)),
        "still running after the engine was killed: {:?}",
        pids.iter().filter(|p| alive(p)).collect::<Vec<_>>()
    );
    assert!(
        eventually(5_000, || d.cgroup_dirs().is_empty()),
        "{:?}",
        d.cgroup_dirs()
    );
    // The mounts are the next start's (or cleanup's) to remove, as before.
    d.spawn();
    assert_eq!(d.post("echo", "2").status, 200);
    assert!(
        d.stop(),
        "the engine did not shut down within {:?}",
        STOP_WAIT
    );
    assert!(d.mounts().is_empty(), "{:?}", d.mounts());
    assert!(d.cgroup_dirs().is_empty(), "{:?}", d.cgroup_dirs());
}

#[test]
fn reuse_false_gives_every_request_a_fresh_sandbox() {
    need_root!();
    let d = Daemon::start("noreuse", "");
    let code = "N = 0\ndef f(e):\n    global N\n    N += 1\n    return N\n";
    d.add("shared", code, &[]);
    d.add("fresh", code, &[("handler.toml", "reuse = false\n")]);
    let calls = |h: &str| (0..3).map(|_| d.post(h, "0").json()).collect::<Vec<_>>();
    // By default one caller's module state is the next caller's (docs/serve.md).
    assert_eq!(calls("shared"), [1, 2, 3]);
    assert_eq!(calls("fresh"), [1, 1, 1]);
}

/// Accepted client connections open in the engine: its fds that are TCP sockets on `port`
/// (the kernel's /proc/net/tcp, matched by inode).
fn client_conns(pid: i32, port: u16) -> usize {
    let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap();
    let inodes: std::collections::HashSet<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            // Not the listening socket (state 0A).
            (local_port == port && f.get(3)? != &"0A").then(|| f.get(9).unwrap().to_string())
        })
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().to_string();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .filter(|i| inodes.contains(i))
        .count()
}

/// The server closed `s`: a read gives EOF (or a reset) within `ms`.
fn closed_within(s: &mut std::net::TcpStream, ms: u64) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_millis(ms))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a response (e.g. 408) before the close
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

#[test]
fn idle_and_slow_clients_are_cut_off_and_connections_capped() {
    need_root!();
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let d = Daemon::start(
        "slowloris",
        "header_timeout_ms = 1000\nmax_connections = 8\n",
    );
    d.add("echo", ECHO, &[]);
    assert_eq!(d.post("echo", "1").status, 200);
    let connect = || TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    // Silent, half a header, a body that never comes, idle after a keep-alive request.
    let mut silent = connect();
    let mut partial = connect();
    partial
        .write_all(b"POST /run/echo HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut nobody = connect();
    nobody
        .write_all(b"POST /run/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n1")
        .unwrap();
    let mut idle = connect();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = [0u8; 512];
    let n = idle.read(&mut got).unwrap();
    assert!(
        got[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got[..n])
    );
    let t = Instant::now();
    for (what, s) in [
        ("silent", &mut silent),
        ("partial header", &mut partial),
        ("missing body", &mut nobody),
        ("idle keep-alive", &mut idle),
    ] {
        assert!(
            closed_within(s, 4_000),
            "{what} connection still open after {:?}",
            t.elapsed()
        );
    }
    // 30 connections at once: at most max_connections are accepted (the rest wait in the
    // backlog), and each is cut off in turn, so a real request gets through.
    // (Read until the engine has accepted some: on a slow host (the TCG VM) none may be
    // accepted yet 300 ms after the connects; never more than 8 in any read.)
    let held: Vec<TcpStream> = (0..30).map(|_| connect()).collect();
    let mut open = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        open = client_conns(d.pid(), d.port);
        assert!(
            open <= 8,
            "{open} client connections open in the engine (max_connections = 8)"
        );
        if open >= 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        (1..=8).contains(&open),
        "{open} client connections open in the engine (max_connections = 8)"
    );
    let r = d.post("echo", "2");
    assert_eq!(r.status, 200, "{}", r.body);
    drop(held);
}

fn pool_dirs(d: &Daemon) -> Vec<std::path::PathBuf> {
    let Some(base) = d.cgroup_dirs().into_iter().next() else {
        return vec![];
    };
    std::fs::read_dir(&base)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("sb"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
fn an_eviction_storm_stays_within_the_cap_and_the_pool_shrinks_back() {
    need_root!();
    let d = Daemon::start(
        "storm",
        "max_sandboxes = 10\nmemory_budget_mb = 48\nfreeze_after_ms = 50\nidle_evict_ms = 300\nzygote_fork_batch = 1\n",
    );
    for i in 0..30 {
        d.add(&format!("h{i}"), ECHO, &[]);
    }
    assert_eq!(d.post("h0", "0").status, 200);
    let fds_before = fd_count(d.pid());
    // 6 clients round-robin over 30 handlers, 10 sandboxes at most: every request evicts.
    let replies: Vec<(u16, String)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..6)
            .map(|t| {
                let d = &d;
                s.spawn(move || {
                    (0..25)
                        .map(|i| {
                            let r = d.post(&format!("h{}", (t * 5 + i) % 30), "1");
                            (r.status, r.body)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let statuses: Vec<u16> = replies.iter().map(|r| r.0).collect();
    let failed: Vec<&(u16, String)> = replies.iter().filter(|r| r.0 != 200).collect();
    assert!(
        statuses.iter().all(|s| *s == 200),
        "{statuses:?}\nnot 200: {failed:?}\nengine log:\n{}",
        d.log()
    );
    // Every pool cgroup the engine ever made is in its record: with dying sandboxes counted
    // against max_sandboxes, it never needed more than the cap plus the zygote's (itself and
    // its spares; no batches here: spares of a batch wait for later requests) and the
    // preallocated ones.
    let made = std::fs::read_to_string(d.run_dir.join("cgroups"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    assert!(
        made <= 10 + 1 + 2 + 1 + 2,
        "{made} pool cgroups made for max_sandboxes = 10"
    );
    // Idle: the sandboxes are evicted, the pool gives back what it no longer needs (its
    // directories, and the ~10 fds the engine keeps open per pool cgroup).
    let what = || {
        let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .map(|l| l.to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    };
    assert!(
        eventually(10_000, || pool_dirs(&d).len() <= 2 + 1 + 2 + 1
            && fd_count(d.pid()) <= fds_before + 20),
        "{} pool cgroups left after the storm, engine fds {fds_before} -> {}: {:?}",
        pool_dirs(&d).len(),
        fd_count(d.pid()),
        what()
    );
    assert_eq!(d.post("h1", "2").status, 200);
}

/// A pool cgroup that cannot be removed when the engine shuts down (here a sub-cgroup the
/// engine did not make keeps it busy; on a loaded host, a member that takes long to die)
/// stays in the record, which outlives the run dir's teardown: `cleanup` fails while it is
/// busy and removes it afterwards. The record used to go with the run dir, and the cgroup
/// stayed on the host for good.
#[test]
fn a_pool_cgroup_busy_at_shutdown_stays_recorded_for_cleanup() {
    need_root!();
    let mut d = Daemon::start("busy", "zygotes = false\n");
    d.add("echo", ECHO, &[]);
    assert_eq!(d.post("echo", "[1]").status, 200);
    let base = d.pool_dirs_left();
    let sb = base
        .iter()
        .flat_map(|b| std::fs::read_dir(b).into_iter().flatten().flatten())
        .map(|e| e.path())
        .find(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("sb"))
        })
        .unwrap_or_else(|| panic!("no pool cgroup under {base:?}"));
    std::fs::create_dir(sb.join("held")).unwrap();
    let held = Scratch(vec![sb.join("held")]);
    assert!(d.stop(), "the engine did not shut down: {}", d.log());
    assert!(
        d.log().contains("still busy after the clean-up"),
        "{}",
        d.log()
    );
    let out = d.cli(&["cleanup"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success() && err.contains("pool cgroups still busy: run cleanup again"),
        "{err}"
    );
    assert!(sb.is_dir());
    drop(held);
    let out = d.cli(&["cleanup"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!sb.exists(), "{}", sb.display());
    assert_eq!(d.pool_dirs_left(), Vec::<PathBuf>::new());
}

#[test]
fn shutdown_with_requests_in_flight_leaves_nothing() {
    need_root!();
    let mut d = Daemon::start("midstop", "max_per_handler = 16\n");
    d.add(
        "slow",
        "import time\ndef f(e):\n    time.sleep(5)\n    return e\n",
        &[],
    );
    let port = d.port;
    let clients: Vec<_> = (0..30)
        .map(|_| {
            std::thread::spawn(move || {
                let _ = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
                    use std::io::{Read, Write};
                    s.write_all(
                        b"POST /run/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n1",
                    )?;
                    let mut b = Vec::new();
                    s.read_to_end(&mut b).map(|_| ())
                });
            })
        })
        .collect();
    // Sandboxes starting and running while the engine is told to stop. A poll may fail beside
    // the 30 connections (one was reset in a fresh-clone CI run under TCG): it is retried, and
    // the engine must still be running when it is told to stop.
    assert!(eventually(5_000, || d
        .try_status()
        .and_then(|s| s["handlers"]["slow"]["live"].as_u64())
        .is_some_and(|n| n >= 4)));
    assert!(d.alive(), "the engine exited under 30 connections");
    // Its own clean shutdown, not the watchdog's clean-up after a kill (which the checks below
    // could race).
    let t = std::time::Instant::now();
    assert!(
        d.stop(),
        "the engine did not shut down within {:?}",
        STOP_WAIT
    );
    eprintln!("shutdown took {:?}", t.elapsed());
    let inside = |p: &std::path::Path| {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| {
                        let procs = std::fs::read_to_string(e.path().join("cgroup.procs"));
                        format!("{:?}: {procs:?}", e.file_name())
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let left = d.cgroup_dirs();
    assert!(
        left.is_empty(),
        "{:?}",
        left.iter().map(|p| (p, inside(p))).collect::<Vec<_>>()
    );
    assert!(d.mounts().is_empty(), "{:?}", d.mounts());
    assert!(!d.run_dir.exists(), "{} left behind", d.run_dir.display());
    for c in clients {
        c.join().unwrap();
    }
}

/// A stop that comes while the root zygote starts (in the background, set off by the first
/// request) leaves nothing either: the start is waited for, or refused, before the pool's
/// cgroups are removed. A zygote placed in its cgroup after the shutdown's clean-up had
/// killed that cgroup's members once kept it (and the pool's parent) on the host.
#[test]
fn a_stop_while_the_root_zygote_starts_leaves_nothing() {
    need_root!();
    for i in 0..4u64 {
        let mut d = Daemon::start(&format!("zstop{i}"), "");
        d.add("echo", ECHO, &[]);
        assert_eq!(d.post("echo", "1").status, 200);
        // A different point of the zygote's start each time.
        std::thread::sleep(Duration::from_millis(i * 25));
        assert!(
            d.stop(),
            "the engine did not shut down within {:?}",
            STOP_WAIT
        );
        let left = d.cgroup_dirs();
        assert!(left.is_empty(), "stop {i}: {left:?}\n{}", d.log());
        assert!(d.mounts().is_empty(), "stop {i}: {:?}", d.mounts());
        assert!(!d.run_dir.exists(), "{} left behind", d.run_dir.display());
    }
}

/// Listens on TCP port `event` on loopback and on the abstract unix socket
/// `@sprout-test-<event>`, answers whatever connected since the last call (non-blocking).
const LISTENER: &str = r#"
import socket
S = []
def f(e):
    if not S:
        t = socket.socket()
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        t.bind(("127.0.0.1", int(e)))
        t.listen(8)
        u = socket.socket(socket.AF_UNIX)
        u.bind("\0sprout-test-%d" % int(e))
        u.listen(8)
        for x in (t, u):
            x.setblocking(False)
        S.extend((t, u))
    got = 0
    for x in S:
        try:
            while True:
                x.accept()[0].close()
                got += 1
        except BlockingIOError:
            pass
    return got
"#;

/// Tries the engine's port, the listener's TCP port and its abstract unix socket.
const PROBE: &str = r#"
import socket
def f(e):
    out = {}
    for name, fam, addr in (("engine", socket.AF_INET, ("127.0.0.1", e["engine"])),
                            ("tcp", socket.AF_INET, ("127.0.0.1", e["port"])),
                            ("abstract", socket.AF_UNIX, "\0sprout-test-%d" % e["port"])):
        s = socket.socket(fam)
        s.settimeout(1)
        try:
            s.connect(addr)
            out[name] = "connected"
        except OSError as x:
            out[name] = x.strerror
        s.close()
    return out
"#;

#[test]
fn sandboxes_reach_no_other_sandbox_nor_the_engine_by_default() {
    need_root!();
    let probe = |d: &Daemon, port: u16| {
        let ev = format!("{{\"engine\": {}, \"port\": {port}}}", d.port);
        let r = d.post("probe", &ev);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    // Default: a network namespace per sandbox.
    let d = Daemon::start("xtenant", "freeze_after_ms = 50\n");
    d.add("listener", LISTENER, &[]);
    d.add("probe", PROBE, &[]);
    let port = 20000 + (std::process::id() % 20000) as u16;
    assert_eq!(d.post("listener", &port.to_string()).json(), 0);
    // The listener is frozen (warm) while the probe tries it, as in the issue's reproduction.
    assert!(eventually(3_000, || d.status()["handlers"]["listener"]
        ["warm"]
        == 1));
    let got = probe(&d, port);
    for k in ["engine", "tcp", "abstract"] {
        assert_ne!(got[k], "connected", "{k}: {got}");
    }
    assert_eq!(
        d.post("listener", &port.to_string()).json(),
        0,
        "something got through"
    );
    drop(d);
    // The operator's opt-out: the host's network, shared (what the threat model documents).
    let d = Daemon::start(
        "xtenant-off",
        "freeze_after_ms = 50\n[sandbox]\nnetwork_ns = false\n",
    );
    d.add("listener", LISTENER, &[]);
    d.add("probe", PROBE, &[]);
    assert_eq!(d.post("listener", &(port + 1).to_string()).json(), 0);
    let got = probe(&d, port + 1);
    assert_eq!(got["engine"], "connected", "{got}");
    assert_eq!(got["abstract"], "connected", "{got}");
}

/// A panic in one request (the failpoint panics while holding the engine's state lock) answers
/// that request 500 `engine`; the engine stays up, the poisoned lock does not break the next
/// requests, other handlers and the same one keep working. Before (release `panic = "abort"`)
/// the first such request took the whole engine down.
#[test]
fn a_panic_in_one_request_does_not_take_the_engine_down() {
    need_root!();
    let mut d = Daemon::config("panic", "");
    d.spawn_env(&[("SPROUT_SERVE_FAILPOINT", "panic:boom")]);
    d.add("boom", ECHO, &[]);
    d.add("echo", ECHO, &[]);
    assert_eq!(d.post("echo", "1").status, 200);
    for round in 0..2 {
        let r = d.post("boom", "1");
        assert_eq!(r.status, 500, "round {round}: {}", d.log());
        assert_eq!(r.json()["kind"], "engine", "round {round}");
        let r = d.post("echo", "2");
        assert_eq!(r.status, 200, "round {round}: {}", d.log());
        assert_eq!(r.json(), serde_json::json!({"echo": 2}));
        assert_eq!(d.get("/status").status, 200);
    }
    // SAFETY: kill with signal 0 only checks that our own daemon (its pid) still exists.
    assert_eq!(unsafe { libc::kill(d.pid(), 0) }, 0, "the engine died");
    assert!(d.log().contains("SPROUT_SERVE_FAILPOINT"), "{}", d.log());
}

/// The engine's counters from /metrics: (sandboxes started on every path, sandboxes evicted).
fn starts_and_evictions(d: &Daemon) -> (u64, u64) {
    let m = d.get("/metrics").body;
    let mut starts = 0;
    let mut ev = 0;
    for l in m.lines() {
        let v = || {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap()
        };
        if l.starts_with("sprout_serve_sandboxes_started_total{") {
            starts += v();
        } else if l.starts_with("sprout_serve_evictions_total ") {
            ev = v();
        }
    }
    (starts, ev)
}

/// A new handler's first request at `max_sandboxes` evicts one idle sandbox (the least
/// recently used), not every idle one: the sandboxes on their way out count against the cap
/// until destroyed, and an eviction does not lower live + dying, so the engine used to evict
/// again and again until no idle sandbox was left (every handler's next request a start).
#[test]
fn a_start_at_the_cap_evicts_one_sandbox_not_every_idle_one() {
    need_root!();
    let d = Daemon::start(
        "capone",
        "max_sandboxes = 3\nfreeze_after_ms = 60000\nmemory_budget_mb = 4096\n",
    );
    for h in ["a", "b", "c", "d"] {
        d.add(h, ECHO, &[]);
    }
    for h in ["a", "b", "c"] {
        assert_eq!(d.post(h, "1").status, 200);
    }
    assert_eq!(starts_and_evictions(&d), (3, 0), "{}", d.status());
    let r = d.post("d", "1");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        starts_and_evictions(&d),
        (4, 1),
        "one start at the cap evicts one sandbox: {}",
        d.status()
    );
    // a (the least recently used) went; b and c are still hot.
    for h in ["b", "c"] {
        assert_eq!(d.post(h, "2").header("x-sprout-path"), Some("hot"), "{h}");
    }
    assert_eq!(starts_and_evictions(&d), (4, 1));
}

/// More concurrent demand than `max_sandboxes` over handlers that each have a sandbox (the
/// round-robin sweep's collapse, in small): once at the cap, a request whose handler's
/// sandboxes are all busy waits for one of them instead of evicting another handler's
/// recently used sandbox to start its own. Before, every such request evicted and started
/// (a cyclic access pattern under LRU: each eviction made the victim's next request a start
/// too), and throughput fell to the start rate.
#[test]
fn demand_past_the_cap_queues_on_busy_sandboxes_instead_of_thrashing() {
    need_root!();
    // Nothing freezes during the test: every cached sandbox stays recently used.
    let d = Daemon::start(
        "capq",
        "max_sandboxes = 6\nfreeze_after_ms = 60000\nmemory_budget_mb = 4096\n",
    );
    let slow = "import time\ndef f(e):\n    time.sleep(0.02)\n    return e\n";
    for i in 0..4 {
        d.add(&format!("h{i}"), slow, &[]);
    }
    for i in 0..4 {
        assert_eq!(d.post(&format!("h{i}"), "0").status, 200);
    }
    assert_eq!(starts_and_evictions(&d), (4, 0));
    // 12 clients cycling over the 4 handlers: up to 3 requests per handler in flight,
    // 12 wanted sandboxes against a cap of 6.
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..12)
            .map(|t| {
                let d = &d;
                s.spawn(move || {
                    (0..30)
                        .map(|i| d.post(&format!("h{}", (t + i) % 4), "1").status)
                        .collect::<Vec<u16>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let (starts, ev) = starts_and_evictions(&d);
    assert_eq!(
        ev,
        0,
        "{starts} starts, {ev} evictions for 360 requests: {}",
        d.status()
    );
    assert!(
        starts <= 6,
        "{starts} starts for a cap of 6: {}",
        d.status()
    );
    assert_eq!(d.status()["sandboxes"]["total"], 6, "{}", d.status());
}

/// The privileges of the running sandboxes as the kernel records them (/proc/PID/status,
/// read from the host), on both start paths: a sandbox forked from a zygote (which drops
/// the bounding set and the groups and sets no_new_privs once for all its children, and
/// keeps its effective capabilities) ends where a cold one (sprout-process's
/// `drop_all_privileges`, then exec) does.
#[test]
fn zygote_forked_and_cold_sandboxes_drop_the_same_privileges() {
    need_root!();
    let status_of = |d: &Daemon| -> Vec<(String, String)> {
        // The sandbox: the pool process chrooted into a sandbox root (roots/sN); spares and
        // zygotes are elsewhere.
        let roots = d.run_dir.join("roots");
        let pid = pool_procs(d)
            .into_iter()
            .find(|p| {
                std::fs::read_link(format!("/proc/{p}/root")).is_ok_and(|r| {
                    r.parent() == Some(roots.as_path())
                        && r.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('s'))
                })
            })
            .unwrap_or_else(|| panic!("no sandbox process among {:?}", pool_procs(d)));
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        st.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect()
    };
    let want = [
        ("CapEff", "0000000000000000"),
        ("CapPrm", "0000000000000000"),
        ("CapBnd", "0000000000000000"),
        ("CapAmb", "0000000000000000"),
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
        ("Uid", "65534\t65534\t65534\t65534"),
        ("Gid", "65534\t65534\t65534\t65534"),
        ("Groups", ""),
    ];
    let mut seen = vec![];
    for (name, extra, path) in [
        ("privz", "", "zygote"),
        ("privc", "zygotes = false\nzygote_spares = 0\n", "cold"),
    ] {
        let d = Daemon::start(name, extra);
        d.add("a", ECHO, &[]);
        if path == "zygote" {
            // Before the root zygote is up a request starts cold.
            assert!(root_spares_at_least(&d, 1), "{}", d.status());
        }
        let r = d.post("a", "1");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-sprout-path"), Some(path));
        let st = status_of(&d);
        let get = |k: &str| {
            st.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {k} in /proc/PID/status"))
        };
        for (k, v) in want {
            assert_eq!(get(k), v, "{path} sandbox: {k}");
        }
        seen.push(get("CapInh"));
    }
    // The inheritable set is the engine's on both paths (neither touches it; without
    // permitted capabilities it grants nothing).
    assert_eq!(seen[0], seen[1], "CapInh: zygote vs cold");
}

/// What a package's own code does when a zygote imports it (the packages are the handlers'
/// choice): it breaks out of the zygote's chroot (a chroot into a subdirectory, then `..` up
/// from the old working directory) and tries what host root could: write into a root-owned
/// directory of the host, read /etc/shadow, write a sysctl, list the other sandboxes' roots,
/// read another handler's code in the registry, connect to the engine's API on 127.0.0.1.
/// The zygotes run as root of a user namespace of their own (pid 1 of a pid namespace it
/// owns, with network, IPC and UTS namespaces of their own), mapped to the unprivileged
/// `zygote_uid`, with only the capabilities forking needs, and their roots lie in a directory
/// only host root may enter: all of it is refused, as the kernel records it (the zygote's
/// host uid and capabilities in /proc/PID/status, its namespaces). Before that the zygote was
/// host root in the host's namespaces: every attempt succeeded. (The sysctl is written with
/// its own value.)
#[test]
fn packages_imported_by_a_zygote_cannot_reach_the_host() {
    need_root!();
    let wheels =
        std::path::PathBuf::from(format!("/tmp/serve-escape-wheels-{}", std::process::id()));
    // A root-owned directory any user may enter but only root may write into.
    let target =
        std::path::PathBuf::from(format!("/tmp/serve-escape-target-{}", std::process::id()));
    std::fs::create_dir_all(&target).unwrap();
    std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let marker = target.join("written-by-a-package");
    let _scratch = Scratch(vec![wheels.clone(), target.clone()]);
    let d = Daemon::start(
        "escape",
        &format!(
            "pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\n",
            wheels.display()
        ),
    );
    // Another tenant's handler, whose code the package tries to read.
    d.add("other", "SECRET = 1\ndef f(e):\n    return SECRET\n", &[]);
    let registry = d.dir.join("registry");
    assert!(registry.join("other/f.py").is_file());
    let init = format!(
        r#"import os
RESULT = {{"uid": os.getuid()}}
def _try(name, fn):
    try:
        RESULT[name] = fn()
    except Exception as e:
        RESULT[name] = "refused: " + type(e).__name__
def _escape():
    os.makedirs("/tmp/esc", exist_ok=True)
    os.chroot("/tmp/esc")
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    os.chdir("/")
    return os.path.isdir("{target}")
def _write():
    with open("{marker}", "w") as f:
        f.write("host root")
    return "written"
def _shadow():
    with open("/etc/shadow") as f:
        return "read %d bytes" % len(f.read())
def _sysctl():
    with open("/proc/sys/vm/swappiness") as f:
        cur = f.read()
    with open("/proc/sys/vm/swappiness", "w") as f:
        f.write(cur)
    return "written"
def _roots():
    return os.listdir("{roots}")
def _registry():
    with open("{registry}/other/f.py") as f:
        return f.read()
def _engine():
    import socket
    s = socket.socket()
    s.settimeout(2)
    s.connect((b"127.0.0.1", {port}))
    s.close()
    return "connected"
_try("escaped", _escape)
_try("write", _write)
_try("shadow", _shadow)
_try("sysctl", _sysctl)
_try("roots", _roots)
_try("registry", _registry)
_try("engine", _engine)
def _sigint():
    os.kill(1, 2)  # pid 1 of the zygotes' pid namespace: the root zygote
    return "sent"
_try("sigint", _sigint)
"#,
        target = target.display(),
        marker = marker.display(),
        roots = d.run_dir.join("roots").display(),
        registry = registry.display(),
        port = d.port,
    );
    make_pkg_wheel(&wheels, "escapepkg", &init);
    let code = "import escapepkg\ndef f(e):\n    return escapepkg.RESULT\n";
    // Every request in a fresh sandbox (no hot one is reused).
    d.add(
        "esc",
        code,
        &[
            ("requirements.txt", "escapepkg==1.0\n"),
            ("handler.toml", "reuse = false\n"),
        ],
    );
    assert!(
        eventually(10_000, || zygote(&d.status(), "")
            .is_some_and(|z| z["state"] == "ready")),
        "{}",
        d.status()
    );
    let root_pid = zygote(&d.status(), "").unwrap()["pid"].as_i64().unwrap();
    // The first request starts the zygote of {escapepkg-1.0}, which runs the package's code
    // as it imports it; a sandbox forked from it returns what the package recorded then.
    // (This first one imports the package itself, in a sandbox forked from the root zygote,
    // where its SIGINT to pid 1 interrupts that very sandbox: a 500.)
    let _ = d.post("esc", "{}");
    let st = |d: &Daemon| d.status();
    assert!(
        eventually(20_000, || zygote(&st(&d), "escapepkg-1.0")
            .is_some_and(|z| z["state"] == "ready")),
        "{}",
        d.status()
    );
    let z = zygote(&d.status(), "escapepkg-1.0").unwrap().clone();
    assert_eq!(z["imported"], serde_json::json!(["escapepkg"]), "{z}");
    let r = d.post("esc", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sprout-path"), Some("zygote"), "{}", r.body);
    let v = r.json();
    // Root inside its namespace, but not out of its chroot: the walk up stops at the
    // directory of the roots, which only host root may enter (and nothing of the host's
    // would be its to change there: see the ids and capabilities below).
    assert_eq!(v["uid"], 0, "{v}");
    assert_eq!(v["escaped"], "refused: PermissionError", "{v}");
    for k in ["write", "shadow", "sysctl", "roots", "registry"] {
        assert!(
            v[k].as_str().is_some_and(|s| s.starts_with("refused: ")),
            "{k}: {v}"
        );
    }
    // Its network namespace has only lo, down.
    assert_eq!(v["engine"], "refused: OSError", "{v}");
    assert!(!marker.exists(), "a package wrote {}", marker.display());
    // The root zygote (pid 1 of the zygotes' namespace) got a SIGINT from the package and
    // ignored it: still there, still forking for the other handlers.
    assert_eq!(v["sigint"], "sent", "{v}");
    assert_eq!(proc_field(root_pid, "NSpid:"), format!("{root_pid}\t1"));
    assert_eq!(zygote(&d.status(), "").unwrap()["pid"], root_pid);
    let r = d.post("other", "{}");
    assert_eq!(
        (r.status, r.header("x-sprout-path")),
        (200, Some("zygote")),
        "{}",
        r.body
    );
    // As the kernel records it: the zygote is the unprivileged zygote_uid (default 65533) on
    // the host, in user, pid and network namespaces that are not the engine's, and holds
    // only CAP_SETGID, CAP_SETUID, CAP_SYS_CHROOT and CAP_SYS_ADMIN, in its namespace.
    let zpid = z["pid"].as_i64().unwrap();
    assert_eq!(proc_field(zpid, "Uid:"), "65533\t65533\t65533\t65533");
    assert_eq!(proc_field(zpid, "Gid:"), "65533\t65533\t65533\t65533");
    assert_eq!(proc_field(zpid, "CapEff:"), "00000000002400c0");
    assert_eq!(proc_field(zpid, "CapPrm:"), "00000000002400c0");
    for ns in ["user", "pid", "net", "ipc", "uts"] {
        assert_ne!(
            std::fs::read_link(format!("/proc/{zpid}/ns/{ns}")).unwrap(),
            std::fs::read_link(format!("/proc/{}/ns/{ns}", d.pid())).unwrap(),
            "{ns} namespace"
        );
    }
    let _ = std::fs::remove_dir_all(&wheels);
    let _ = std::fs::remove_dir_all(&target);
}

/// A package published only as a source distribution whose build runs its own code: an
/// in-tree PEP 517 backend (no build dependencies needed) that, when pip loads it to build
/// the wheel, writes a marker file as whoever runs pip. By default pip installs wheels only
/// (`pip_build_sdists = false`: `--only-binary=:all:`): the install fails with a clear 400
/// naming the package and the setting, and no code of the package ran on the host. With the
/// opt-in, pip runs the backend in the source-build jail, whose /tmp is its own: the marker
/// is not written on the host either (until the jail, the host's root wrote it there).
#[test]
fn install_runs_no_package_code_unless_sdist_builds_are_allowed() {
    need_root!();
    let id = std::process::id();
    let wheels = std::path::PathBuf::from(format!("/tmp/serve-sdist-{id}"));
    let marker = std::path::PathBuf::from(format!("/tmp/serve-sdist-marker-{id}"));
    std::fs::create_dir_all(&wheels).unwrap();
    let _ = std::fs::remove_file(&marker);
    let _scratch = Scratch(vec![wheels.clone(), marker.clone()]);
    let src = std::path::PathBuf::from(format!("/tmp/serve-sdist-src-evil-{id}"));
    let _src = Scratch(vec![src.clone()]);
    write_sdist(
        &src,
        &wheels,
        "evilsdist",
        &format!(
            "open(\"{}\", \"w\").write(\"build code ran\")\ndef get_requires_for_build_wheel(config_settings=None):\n    return []\ndef build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n    raise RuntimeError(\"no wheel\")\n",
            marker.display()
        ),
    );
    for (name, extra, built) in [
        ("sdist", "", false),
        ("sdistok", "pip_build_sdists = true\n", true),
    ] {
        let d = Daemon::start(
            name,
            &format!(
                "pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\n{extra}",
                wheels.display()
            ),
        );
        d.add("h", ECHO, &[("requirements.txt", "evilsdist==1.0\n")]);
        let r = d.post("h", "{}");
        assert_eq!(
            (r.status, r.json()["kind"].as_str()),
            (400, Some("install_failed")),
            "{}",
            r.body
        );
        let err = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(err.contains("evilsdist==1.0"), "{err}");
        assert_eq!(err.contains("pip_build_sdists = false"), !built, "{err}");
        // Allowed, the build code runs in the jail (a_source_build_runs_in_the_jail): the
        // file goes to the jail's own /tmp, never the host's. Before the jail it was written
        // here, by the host's root.
        assert!(!marker.exists(), "{name}: {err}");
        let _ = std::fs::remove_file(&marker);
    }
    let _ = std::fs::remove_dir_all(&wheels);
}

/// A handler's import-time code runs in the process that tells the engine it is ready, and
/// can write on that socket itself: a "ready" announced as 60 MB of `[0,0,...]` (a JSON tree
/// of 30 M values, ~1 GB in the engine had it been read and parsed) is refused on its header,
/// the engine's peak RSS unmoved; a "ready" trickled one byte every 0.4 s (each read within
/// the old per-read timeout) fails at the start timeout instead of holding an engine thread
/// and a sandbox for as long as the handler likes. Both answer 500 `start_failed`, and the
/// engine serves the next request.
#[test]
fn a_handlers_ready_message_is_capped_and_timed() {
    need_root!();
    let d = Daemon::start("readycap", "start_timeout_ms = 1500\n");
    let code = |mode: &str| {
        format!(
            r#"import os, stat, time
def _sock():
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        except OSError:
            pass
_fd = _sock()
if "{mode}" == "huge":
    chunk = b"0," * (1 << 20)
    os.write(_fd, (3 + 30 * len(chunk)).to_bytes(4, "little"))
    os.write(_fd, b"[")
    for _ in range(30):
        _v = memoryview(chunk)
        while _v:
            _v = _v[os.write(_fd, _v):]
    os.write(_fd, b"0]")
else:
    body = b'{{"ready": true}}'
    os.write(_fd, len(body).to_bytes(4, "little"))
    for b in body:
        time.sleep(0.4)
        os.write(_fd, bytes([b]))
def f(e):
    return 1
"#
        )
    };
    d.add("huge", &code("huge"), &[]);
    d.add("trickle", &code("trickle"), &[]);
    d.add("echo", ECHO, &[]);
    assert_eq!(d.post("echo", "1").status, 200);
    let before = vm_hwm_kib(d.pid());
    let r = d.post("huge", "{}");
    let grew = vm_hwm_kib(d.pid()).saturating_sub(before);
    assert!(
        grew < 20 * 1024,
        "engine peak RSS grew {grew} KiB: {}",
        r.body
    );
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (500, Some("start_failed")),
        "{}",
        r.body
    );
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap_or_default()
            .contains("control message of"),
        "{}",
        r.body
    );
    let t = Instant::now();
    let r = d.post("trickle", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (500, Some("start_failed")),
        "{}",
        r.body
    );
    assert!(
        t.elapsed() < Duration::from_millis(4000),
        "{:?}: {}",
        t.elapsed(),
        r.body
    );
    assert_eq!(d.post("echo", "2").status, 200);
}

/// A daemon `name` (with `extra` config) that installs packages only from a local wheel
/// directory (returned; removed by the returned guard), once its root zygote is ready.
fn with_local_wheels(name: &str, extra: &str) -> (Daemon, std::path::PathBuf, Scratch) {
    let wheels =
        std::path::PathBuf::from(format!("/tmp/serve-{name}-wheels-{}", std::process::id()));
    let scratch = Scratch(vec![wheels.clone()]);
    let d = Daemon::start(
        name,
        &format!(
            "{extra}pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\n",
            wheels.display()
        ),
    );
    assert!(
        eventually(10_000, || zygote(&d.status(), "")
            .is_some_and(|z| z["state"] == "ready")),
        "{}",
        d.status()
    );
    (d, wheels, scratch)
}

/// What a package's code can do to *another tenant's* sandbox from the zygote that imported
/// it (the zygote keeps CAP_SETUID, CAP_SETGID and CAP_SYS_ADMIN in its user namespace, for
/// the sandboxes it forks). Another handler, without the package, has a hot sandbox (forked
/// from the root zygote) that counts its requests. The package, as its zygote imports it:
/// forks a helper that becomes the sandbox user (65534, mapped in the zygotes' user
/// namespace) and sends SIGKILL to every process it may signal (pids 2-4095); and wraps the
/// zygote's `socket.recv_fds` to keep a copy of every regular file (a cgroup's
/// `cgroup.procs`) the engine passes it. The other handler's sandbox must still answer (its
/// count goes on), the helper must find nobody to signal, and the zygote must have been
/// handed no cgroup file (with one, opened by root, it could move any process it can name
/// into that cgroup).
#[test]
fn a_package_reaches_no_other_tenants_sandbox() {
    need_root!();
    let (d, wheels, _scratch) = with_local_wheels("tenant", "zygote_spares = 2\n");
    d.add(
        "counter",
        "N = [0]\ndef f(e):\n    N[0] += 1\n    return N[0]\n",
        &[],
    );
    let r = d.post("counter", "{}");
    assert_eq!((r.status, r.body.trim()), (200, "1"), "{}", r.body);
    assert_eq!(r.header("x-sprout-path"), Some("zygote"));
    let init = r#"import os, socket, stat
RESULT = {"pid": os.getpid()}
def _kill_all():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            n = 0
            for p in range(2, 4096):
                if p == os.getpid():
                    continue
                try:
                    os.kill(p, 0)
                except OSError:
                    continue
                os.kill(p, 9)
                n += 1
            os.write(w, b"killed %d" % n)
        except OSError as e:
            os.write(w, type(e).__name__.encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 100).decode()
    os.close(r)
    return out
RESULT["kill"] = _kill_all()
KEPT = []
_recv_fds = socket.recv_fds
def _spy(sock, bufsize, maxfds, flags=0):
    msg, fds, fl, addr = _recv_fds(sock, bufsize, maxfds, flags)
    for fd in fds:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                KEPT.append(os.dup(fd))
        except OSError:
            pass
    return msg, fds, fl, addr
socket.recv_fds = _spy
"#;
    make_pkg_wheel(&wheels, "tenantpkg", init);
    d.add(
        "evil",
        "import tenantpkg\ndef f(e):\n    return dict(tenantpkg.RESULT, kept=len(tenantpkg.KEPT))\n",
        &[
            ("requirements.txt", "tenantpkg==1.0\n"),
            ("handler.toml", "reuse = false\n"),
        ],
    );
    // The first request imports the package in a sandbox of the root zygote (its own pid
    // namespace, already the sandbox user: nobody else to signal there) and starts the
    // package's zygote.
    let r = d.post("evil", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["kill"], "killed 0", "{}", r.body);
    assert!(
        eventually(20_000, || zygote(&d.status(), "tenantpkg-1.0")
            .is_some_and(|z| z["state"] == "ready")),
        "{}",
        d.status()
    );
    // Spares forked from the package's zygote since (each fork message passed through it).
    std::thread::sleep(Duration::from_millis(300));
    let r = d.post("evil", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sprout-path"), Some("zygote"), "{}", r.body);
    let v = r.json();
    assert_eq!(v["kill"], "killed 0", "{v}");
    assert_eq!(v["kept"], 0, "the zygote was handed cgroup files: {v}");
    // The other tenant's sandbox is the same process, its count goes on.
    let r = d.post("counter", "{}");
    assert_eq!((r.status, r.body.trim()), (200, "2"), "{}", r.body);
}

/// A zygote's answers are read by a deadline, not a timeout per read: a package that makes
/// its zygote trickle them (one byte a second, each read well within any per-read timeout)
/// holds its zygote's refill for at most `ZYGOTE_REPLY` (10 s): then the zygote is dropped.
/// (With a timeout per read the ~19-byte answer to a fork came whole after ~19 s and the
/// zygote stayed.) Meanwhile other zygotes' spares are refilled as usual: each refill runs
/// on a thread of its own (one spares thread for all of them waited the 10 s out).
#[test]
fn a_zygote_that_trickles_its_answers_is_dropped_by_the_deadline() {
    need_root!();
    let (d, wheels, _scratch) = with_local_wheels("trickle", "zygote_spares = 1\n");
    // In its zygote only (pid 2 of the zygote's namespace; a sandbox is pid 1 of its own):
    // every answer after "ready", one byte a second.
    let init = r#"import os, time, __main__
_send = __main__.send_msg
_n = [0]
def _trickle(sock, obj):
    _n[0] += 1
    if _n[0] == 1:
        return _send(sock, obj)
    b = __main__._dumps(obj).encode()
    for c in __main__._hdr(len(b)) + b:
        sock.sendall(bytes([c]))
        time.sleep(1)
if os.getpid() == 2:
    __main__.send_msg = _trickle
"#;
    make_pkg_wheel(&wheels, "tricklepkg", init);
    d.add(
        "trickle",
        "import tricklepkg\ndef f(e):\n    return 1\n",
        &[("requirements.txt", "tricklepkg==1.0\n")],
    );
    assert_eq!(d.post("trickle", "{}").status, 200);
    let key = "tricklepkg-1.0";
    assert!(
        eventually(20_000, || zygote(&d.status(), key)
            .is_some_and(|z| z["state"] == "ready")),
        "{}",
        d.status()
    );
    let t = Instant::now();
    // Its refill asks it for a spare at once; the answer would take ~19 s. While it is
    // stalled, the root zygote's spare, taken by another handler, is back within 3 s.
    std::thread::sleep(Duration::from_secs(1));
    d.add(
        "other",
        "def f(e):\n    return 2\n",
        &[("handler.toml", "reuse = false\n")],
    );
    let r = d.post("other", "{}");
    assert_eq!((r.status, r.header("x-sprout-path")), (200, Some("zygote")));
    assert!(
        eventually(3_000, || zygote(&d.status(), "")
            .is_some_and(|z| z["spares"].as_u64() == Some(1))),
        "{}",
        d.status()
    );
    // Served, and the root zygote refilled, while the stalled zygote still waits: its answer
    // needs ~19 s, past its 10 s deadline, so "ready" here means its refill is still stalled.
    // (No bound on the time taken so far: `add` compiles the handler in a sandbox, which took
    // the TCG VM past the 8 s once asserted here, and once past the 10 s deadline itself: a
    // "failed" seen after 8 s says nothing about an early drop, so it is only asserted sooner.)
    let state = zygote(&d.status(), key).unwrap()["state"].clone();
    let so_far = t.elapsed();
    if so_far < Duration::from_secs(8) {
        assert_eq!(state, "ready", "after {so_far:?}");
    } else {
        eprintln!("state {state} after {so_far:?}: the early-drop check needs a faster host");
    }
    assert!(
        eventually(16_000, || zygote(&d.status(), key)
            .is_some_and(|z| z["state"] == "failed")),
        "{}\n{}",
        d.status(),
        d.log()
    );
    assert!(t.elapsed() >= Duration::from_secs(8), "{:?}", t.elapsed());
    assert!(
        d.log()
            .contains(&format!("zygote [{key}] failed (no message in time)")),
        "{}",
        d.log()
    );
    let r = d.post("other", "{}");
    assert_eq!((r.status, r.header("x-sprout-path")), (200, Some("zygote")));
}

/// The memory and pids limits of a handler's pool cgroup as the kernel has them (v1: the
/// memory hierarchy's `memory.limit_in_bytes`; v2: `memory.max`), for every pool cgroup.
fn pool_memory_limits(d: &Daemon) -> Vec<u64> {
    pool_dirs(d)
        .iter()
        .filter_map(|p| {
            std::fs::read_to_string(p.join("memory.limit_in_bytes"))
                .or_else(|_| std::fs::read_to_string(p.join("memory.max")))
                .ok()
        })
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// handler.toml `memory_mb` and `pids` tighten the operator's limits for that handler's
/// sandboxes (set on the pool cgroup before its code is imported), never loosen them, and the
/// pool's own limits come back with the cgroup; bad values are refused naming the field.
#[test]
fn a_handlers_own_memory_and_pids_limits_tighten_the_pools() {
    need_root!();
    let d = Daemon::start(
        "hlimits",
        "zygote_memory_mb = 1024\n[sandbox]\nmemory_mb = 128\npids = 64\n",
    );
    // `mb` MiB written (every page touched), or up to `forks` children that stay.
    let code = "import os, time\ndef f(e):\n    if e.get('mb'):\n        a = [b'\\x01' * (1 << 20) for _ in range(e['mb'])]\n        return len(a)\n    n = 0\n    try:\n        while n < e['forks']:\n            if os.fork() == 0:\n                time.sleep(30)\n                os._exit(0)\n            n += 1\n    except OSError:\n        pass\n    return n\n";
    d.add("wide", code, &[]);
    d.add(
        "narrow",
        code,
        &[("handler.toml", "memory_mb = 32\npids = 8\n")],
    );
    d.add(
        "loose",
        code,
        &[("handler.toml", "memory_mb = 100000\npids = 100000\n")],
    );
    // 48 MiB: within the operator's 128, past the handler's 32.
    let r = d.post("wide", r#"{"mb": 48}"#);
    assert_eq!(
        (r.status, r.json()),
        (200, serde_json::json!(48)),
        "{}",
        r.body
    );
    let r = d.post("narrow", r#"{"mb": 48}"#);
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (502, Some("oom")),
        "{}",
        r.body
    );
    assert!(r.body.contains("limit 32 MiB"), "{}", r.body);
    // 20 children: within the operator's 64, past the handler's 8 (python is one of them).
    let r = d.post("wide", r#"{"forks": 20}"#);
    assert_eq!(
        (r.status, r.json()),
        (200, serde_json::json!(20)),
        "{}",
        r.body
    );
    let r = d.post("narrow", r#"{"forks": 20}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let n = r.json().as_u64().unwrap();
    assert!(n < 8, "pids = 8 let the sandbox fork {n} children");
    // Asking for more than the operator gives changes nothing.
    let r = d.post("loose", r#"{"forks": 100}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let n = r.json().as_u64().unwrap();
    assert!(n < 64, "a handler's pids = 100000 let it fork {n} children");
    let r = d.post("loose", r#"{"mb": 48}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    // Every pool cgroup has the sandboxes' 128 MiB or, for each zygote, its 1 GiB.
    let zygotes = d.status()["zygotes"].as_array().map_or(0, |z| z.len());
    let pool_limits_only = |limits: &[u64]| {
        limits.iter().all(|&l| l == 128 << 20 || l == 1024 << 20)
            && limits.iter().filter(|&&l| l == 1024 << 20).count() <= zygotes
    };
    // The sandboxes that forked were discarded (children left behind), and the OOM-killed
    // one too: their cgroups come back to the pool with its limits (a discard may finish
    // after the reply). loose's live sandbox is among them.
    assert!(
        eventually(5_000, || pool_limits_only(&pool_memory_limits(&d))),
        "pool cgroups whose limits did not come back: {:?}, {zygotes} zygotes",
        pool_memory_limits(&d)
    );
    assert!(!pool_memory_limits(&d).is_empty());
    // A bad value: refused at `handler add`, and at request time if written there after.
    let out = d.try_add("bad", ECHO, &[("handler.toml", "memory_mb = 0\n")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("handler.toml: memory_mb must be > 0"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    std::fs::write(
        d.dir.join("registry/narrow/handler.toml"),
        "pids = \"many\"\n",
    )
    .unwrap();
    let r = d.post("narrow", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (400, Some("bad_handler_config")),
        "{}",
        r.body
    );
    assert!(
        r.json()["error"].as_str().unwrap().contains("pids"),
        "{}",
        r.body
    );
}

/// handler.toml `[env]` sets variables in that handler's sandboxes only: another handler
/// forked from the same zygote right after does not see them, and `SPROUT_HANDLER` stays the
/// engine's. A bad name is refused with one line naming it.
#[test]
fn a_handlers_env_reaches_its_own_sandboxes_only() {
    need_root!();
    let d = Daemon::start("henv", "zygote_spares = 1\n");
    let code = "import os\ndef f(e):\n    return [os.environ.get('GREETING'), os.environ.get('SPROUT_HANDLER'), os.environ.get('PATH')]\n";
    d.add(
        "withenv",
        code,
        &[(
            "handler.toml",
            "reuse = false\n[env]\nGREETING = \"hi there\"\nSPROUT_HANDLER = \"forged\"\n",
        )],
    );
    d.add("plain", code, &[("handler.toml", "reuse = false\n")]);
    for _ in 0..2 {
        for (h, greeting) in [
            ("withenv", serde_json::json!("hi there")),
            ("plain", serde_json::Value::Null),
        ] {
            let r = d.post(h, "{}");
            assert_eq!(r.status, 200, "{}", r.body);
            let v = r.json();
            assert_eq!(v[0], greeting, "{h}: {v}");
            assert_eq!(v[1], h, "{h}: {v}");
            assert_eq!(v[2], "/usr/local/bin:/usr/bin:/bin", "{h}: {v}");
        }
    }
    let out = d.try_add(
        "badenv",
        ECHO,
        &[("handler.toml", "[env]\n\"A=B\" = \"x\"\n")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("env: \"A=B\" is not a variable name"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A source distribution (`pip_build_sdists = true`) whose build code is a tenant's: its
/// in-tree build backend probes, while pip builds it, what host root could do, and puts what
/// it saw into the package it builds. The build runs in the engine's jail (buildjail.rs): as
/// the sandboxes' uid with no capability, no_new_privs and the seccomp deny-list (as the
/// kernel records them in /proc/self/status), in a pid namespace of its own (it sees only the
/// jail's processes and cannot signal a process of the host, here a `sleep` of the same
/// uid), in a pool cgroup of the engine's, in a network namespace of its own (`--no-index`:
/// the engine's API is unreachable),
/// in a root where the registry does not exist and the find-links directory (0777 on the
/// host) is read-only; a process it leaves running dies with the build. The installed files
/// are root's. Before the jail, pip ran the build as the host's root: uid 0, every capability.
#[test]
fn a_source_build_runs_in_the_jail() {
    need_root!();
    let pid = std::process::id();
    let links = std::path::PathBuf::from(format!("/tmp/serve-sdist-links-{pid}"));
    let src = std::path::PathBuf::from(format!("/tmp/serve-sdist-src-{pid}"));
    let _scratch = Scratch(vec![links.clone(), src.clone()]);
    std::fs::create_dir_all(&links).unwrap();
    std::fs::set_permissions(&links, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // A process of the sandboxes' uid on the host, which the build tries to kill.
    let mut victim = std::process::Command::new("sleep");
    std::os::unix::process::CommandExt::uid(&mut victim, 65534);
    std::os::unix::process::CommandExt::gid(&mut victim, 65534);
    let mut victim = victim.arg("300").spawn().unwrap();
    let orphan_mark = format!("sprout-sdist-orphan-{pid}");
    let d = Daemon::start(
        "sdjail",
        &format!(
            "pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\npip_build_sdists = true\n",
            links.display()
        ),
    );
    d.add("other", "SECRET = 1\ndef f(e):\n    return SECRET\n", &[]);
    let registry = d.dir.join("registry");
    let backend = format!(
        r#"import os, json, zipfile, base64, hashlib, subprocess, socket
def _try(res, name, fn):
    try:
        res[name] = fn()
    except Exception as e:
        res[name] = "refused: " + type(e).__name__
def _status():
    st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
    return {{k: st[k].strip() for k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")}}
def _write_links():
    open("{links}/written-by-a-build", "w").write("x")
    return "written"
def _registry():
    return open("{registry}/other/f.py").read()
def _engine():
    s = socket.socket()
    s.settimeout(2)
    s.connect(("127.0.0.1", {port}))
    return "connected"
def _kill():
    os.kill({victim}, 9)
    return "killed"
def _orphan():
    # Its own output elsewhere: pip reads the backend's output until every writer is gone.
    d = subprocess.DEVNULL
    subprocess.Popen(["python3", "-c", "import time; time.sleep(300)", "{mark}"],
                     start_new_session=True, stdin=d, stdout=d, stderr=d)
    return "started"
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    res = {{"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}}
    _try(res, "status", _status)
    res["procs"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    res["cgroup"] = open("/proc/self/cgroup").read()
    _try(res, "write_links", _write_links)
    _try(res, "registry", _registry)
    _try(res, "engine", _engine)
    _try(res, "kill", _kill)
    _try(res, "orphan", _orphan)
    files = {{
        "probe/__init__.py": ("RESULT = " + repr(json.dumps(res)) + "\n").encode(),
        "probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: probe\nVersion: 1.0\n",
        "probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }}
    rec = ""
    for k, v in files.items():
        h = base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b"=").decode()
        rec += "%s,sha256=%s,%d\n" % (k, h, len(v))
    rec += "probe-1.0.dist-info/RECORD,,\n"
    name = "probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr("probe-1.0.dist-info/RECORD", rec)
    return name
"#,
        links = links.display(),
        registry = registry.display(),
        port = d.port,
        victim = victim.id(),
        mark = orphan_mark,
    );
    write_sdist(&src, &links, "probe", &backend);
    d.add(
        "sd",
        "import json, probe\ndef f(e):\n    return json.loads(probe.RESULT)\n",
        &[("requirements.txt", "probe==1.0\n")],
    );
    let r = d.post("sd", "{}");
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(
        (v["uid"].as_i64(), v["gid"].as_i64()),
        (Some(65534), Some(65534)),
        "{v}"
    );
    assert_eq!(v["groups"], serde_json::json!([]), "{v}");
    assert_eq!(v["status"]["CapEff"], "0000000000000000", "{v}");
    assert_eq!(v["status"]["CapBnd"], "0000000000000000", "{v}");
    assert_eq!(v["status"]["NoNewPrivs"], "1", "{v}");
    assert_eq!(v["status"]["Seccomp"], "2", "{v}");
    // pip (pid 1), the build backend's python, perhaps the orphan: the host has hundreds.
    assert!(
        v["procs"].as_i64().is_some_and(|n| (1..10).contains(&n)),
        "{v}"
    );
    // In a pool cgroup of the engine's, in every hierarchy it has (v1 and the unified one).
    let cg = v["cgroup"].as_str().unwrap_or_default();
    let pool = format!("/{}/sb", d.cgroup_name);
    assert!(
        cg.lines().filter(|l| l.contains(&pool)).count() >= 2
            || cg.starts_with("0::") && cg.contains(&pool),
        "{cg}"
    );
    assert_eq!(v["write_links"], "refused: OSError", "{v}");
    assert!(!links.join("written-by-a-build").exists());
    assert_eq!(v["registry"], "refused: FileNotFoundError", "{v}");
    assert_eq!(v["engine"], "refused: OSError", "{v}");
    assert_eq!(v["kill"], "refused: ProcessLookupError", "{v}");
    assert_eq!(v["orphan"], "started", "{v}");
    // The orphan died with the build's pid namespace.
    let orphan_alive = || a_process_names(&orphan_mark);
    assert!(
        eventually(5_000, || !orphan_alive()),
        "the build's orphan outlived it"
    );
    // Everything installed is root's, with no group/other write bit.
    let pkg = d.dir.join("packages/probe-1.0");
    for p in [
        pkg.clone(),
        pkg.join("probe"),
        pkg.join("probe/__init__.py"),
    ] {
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(
            (
                std::os::unix::fs::MetadataExt::uid(&md),
                std::os::unix::fs::MetadataExt::gid(&md)
            ),
            (0, 0),
            "{}",
            p.display()
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::mode(&md) & 0o6022,
            0,
            "{}",
            p.display()
        );
    }
}

/// An sdist `NAME-1.0.tar.gz` in `links`, made from `src/NAME-1.0`: an in-tree PEP 517
/// backend (`backend.py`, no build dependencies) and the metadata pip needs.
fn write_sdist(src: &std::path::Path, links: &std::path::Path, name: &str, backend: &str) {
    let tree = src.join(format!("{name}-1.0"));
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("backend.py"), backend).unwrap();
    std::fs::write(
        tree.join("pyproject.toml"),
        format!("[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n[project]\nname = \"{name}\"\nversion = \"1.0\"\n"),
    )
    .unwrap();
    std::fs::write(
        tree.join("PKG-INFO"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"),
    )
    .unwrap();
    let st = std::process::Command::new("tar")
        .arg("-C")
        .arg(src)
        .arg("-czf")
        .arg(links.join(format!("{name}-1.0.tar.gz")))
        .arg(format!("{name}-1.0"))
        .status()
        .unwrap();
    assert!(st.success());
}

/// Whether a process on the host has `mark` in its command line.
fn a_process_names(mark: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(mark))
    })
}

/// The CFS quota of every pool cgroup as the kernel has it, per period of 100 ms (v1: the
/// cpu hierarchy's `cpu.cfs_quota_us`, -1 for none; v2: `cpu.max`'s first field, "max").
fn pool_cpu_quotas(d: &Daemon) -> Vec<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let v1 = own.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, c, p) = (it.next()?, it.next()?, it.next()?);
        c.split(',').any(|x| x == "cpu").then(|| {
            std::path::Path::new("/sys/fs/cgroup/cpu")
                .join(p.trim_start_matches('/'))
                .join(&d.cgroup_name)
        })
    });
    let (base, file) = match v1 {
        Some(b) => (b, "cpu.cfs_quota_us"),
        None => match pool_dirs(d)
            .first()
            .and_then(|p| p.parent().map(|p| p.to_path_buf()))
        {
            Some(b) => (b, "cpu.max"),
            None => return vec![],
        },
    };
    std::fs::read_dir(&base)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("sb"))
                .filter_map(|e| std::fs::read_to_string(e.path().join(file)).ok())
                .filter_map(|s| s.split_whitespace().next().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// handler.toml `cpu_milli` lowers the CPU quota of that handler's sandboxes: while one of
/// them spins for 1.5 s its pool cgroup has the handler's quota (10 ms per 100 ms), and the
/// kernel's CPU accounting of the spinning process stays near it; a larger value is ignored
/// (the operator's stays), and every pool cgroup has the operator's quota back afterwards.
#[test]
fn a_handlers_cpu_milli_lowers_its_sandboxes_quota() {
    need_root!();
    let mut d = Daemon::start("hcpu", "[sandbox]\ncpu_milli = 1000\n");
    let code = "import time\ndef f(e):\n    t = time.monotonic()\n    while time.monotonic() - t < e['s']:\n        pass\n    return time.process_time()\n";
    // A fresh sandbox for each request: its cgroup goes back to the pool after it.
    d.add(
        "slow",
        code,
        &[("handler.toml", "cpu_milli = 100\nreuse = false\n")],
    );
    d.add("loose", code, &[("handler.toml", "cpu_milli = 100000\n")]);
    let r = d.post("loose", r#"{"s": 0.1}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        pool_cpu_quotas(&d).iter().all(|q| q == "100000"),
        "{:?}",
        pool_cpu_quotas(&d)
    );
    let (r, seen) = std::thread::scope(|s| {
        let t = s.spawn(|| d.post("slow", r#"{"s": 1.5}"#));
        let seen = eventually(1_400, || pool_cpu_quotas(&d).iter().any(|q| q == "10000"));
        (t.join().unwrap(), seen)
    });
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        seen,
        "no pool cgroup had the handler's quota: {:?}",
        pool_cpu_quotas(&d)
    );
    // 10 % of a CPU for 1.5 s: ~0.15 s, with a period's slack and the start; unthrottled it
    // spins up to 1.5 s.
    let cpu = r.json().as_f64().unwrap();
    assert!(
        cpu < 0.5,
        "the sandbox used {cpu} s of CPU in 1.5 s under 100 milli-CPUs"
    );
    // Its cgroup came back to the pool with the operator's quota.
    assert!(
        eventually(5_000, || {
            let q = pool_cpu_quotas(&d);
            !q.is_empty() && q.iter().all(|q| q == "100000")
        }),
        "{:?}",
        pool_cpu_quotas(&d)
    );
    let out = d.try_add("bad", ECHO, &[("handler.toml", "cpu_milli = 5\n")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("handler.toml: cpu_milli must be at least 10"),
        "{err}"
    );
    d.stop();
    // With no quota from the operator (0) the handler's applies, and is lifted again when
    // its cgroup comes back (the pool writes "no quota", -1 or max, where it wrote nothing).
    let d = Daemon::start("hcpu0", "[sandbox]\ncpu_milli = 0\n");
    d.add(
        "slow",
        code,
        &[("handler.toml", "cpu_milli = 100\nreuse = false\n")],
    );
    let (r, seen) = std::thread::scope(|s| {
        let t = s.spawn(|| d.post("slow", r#"{"s": 1.0}"#));
        let seen = eventually(900, || pool_cpu_quotas(&d).iter().any(|q| q == "10000"));
        (t.join().unwrap(), seen)
    });
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        seen,
        "no pool cgroup had the handler's quota: {:?}",
        pool_cpu_quotas(&d)
    );
    assert!(
        eventually(5_000, || {
            let q = pool_cpu_quotas(&d);
            !q.is_empty() && q.iter().all(|q| q == "-1" || q == "max")
        }),
        "{:?}",
        pool_cpu_quotas(&d)
    );
}

/// A source build that outlives `pip_timeout_s` (its backend waits on a child that sleeps):
/// the install fails with a clear 400 naming the timeout, and nothing of the build is left
/// on the host: the engine kills the jail's first process, the jail's pid 1 dies with it
/// (its parent-death signal), its pid namespace with it, and the cgroup is emptied.
#[test]
fn a_source_build_past_its_timeout_leaves_nothing() {
    need_root!();
    let pid = std::process::id();
    let links = std::path::PathBuf::from(format!("/tmp/serve-sdist-slow-{pid}"));
    let src = std::path::PathBuf::from(format!("/tmp/serve-sdist-slow-src-{pid}"));
    let _scratch = Scratch(vec![links.clone(), src.clone()]);
    let mark = format!("sprout-sdist-sleeper-{pid}");
    std::fs::create_dir_all(&links).unwrap();
    write_sdist(
        &src,
        &links,
        "slow",
        &format!(
            "import subprocess\ndef build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n    subprocess.run([\"python3\", \"-c\", \"import time; time.sleep(600)\", \"{mark}\"])\n    raise RuntimeError(\"woke up\")\n"
        ),
    );
    let sleeper_alive = || a_process_names(&mark);
    let d = Daemon::start(
        "sdslow",
        &format!(
            "pip_args = [\"--no-index\", \"--find-links\", \"{}\"]\npip_build_sdists = true\npip_timeout_s = {}\n",
            links.display(),
            3 * slow()
        ),
    );
    d.add("h", ECHO, &[("requirements.txt", "slow==1.0\n")]);
    let r = d.post("h", "{}");
    assert_eq!(
        (r.status, r.json()["kind"].as_str()),
        (400, Some("install_failed")),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("pip timed out after") && r.body.contains("(pip_timeout_s)"),
        "{}",
        r.body
    );
    assert!(
        eventually(5_000, || !sleeper_alive()),
        "the build's sleeping child outlived the timeout"
    );
    assert!(!d.dir.join("packages/slow-1.0").exists());
}
