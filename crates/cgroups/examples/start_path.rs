//! The container-start sequence against the real host, timed; run under
//! `strace -e trace=!write` to see exactly the syscalls between the MARK lines.
//!   cargo run --release -p sprout-cgroups --example start_path
use std::sync::Mutex;
use std::time::Instant;

use oci_spec::runtime::*;
use sprout_cgroups::Manager;

/// The last mark's time and the phases so far (" <duration> [name]" each).
static PHASES: Mutex<(Option<Instant>, String)> = Mutex::new((None, String::new()));

fn mark(s: &str) {
    {
        let now = Instant::now();
        let mut p = PHASES.lock().unwrap();
        if let Some(t) = p.0 {
            p.1.push_str(&format!(" {:?}", now - t));
        }
        p.1.push_str(&format!(" [{s}]"));
        p.0 = Some(now);
    }
    // one write(2) per marker, easy to find in strace output
    let line = format!("MARK {s}\n");
    // SAFETY: writes line.len() bytes from the live String `line` to stderr.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

fn main() {
    let id = format!("sprout-startpath-{}", std::process::id());
    let res = LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(256i64 << 20)
                .build()
                .unwrap(),
        )
        .cpu(LinuxCpuBuilder::default().shares(512u64).build().unwrap())
        .pids(LinuxPidsBuilder::default().limit(100i64).build().unwrap())
        .build()
        .unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("100")
        .spawn()
        .unwrap();
    let t = Instant::now();
    mark("new");
    let mut m = Manager::new(None, &id, false).unwrap();
    mark("create");
    m.create().unwrap();
    mark("apply");
    m.apply(&res).unwrap();
    mark("add_pid");
    m.add_pid(child.id() as i32).unwrap();
    mark("done");
    let start = t.elapsed();
    m.kill_all(libc::SIGKILL).unwrap();
    child.wait().unwrap();
    m.destroy().unwrap();
    let phases = PHASES.lock().unwrap().1.clone();
    eprintln!(
        "layout {:?}: new+create+apply+add_pid took {:?}:{phases}",
        m.layout(),
        start
    );
}
