//! The container-start sequence against the real host, timed; run under
//! `strace -e trace=!write` to see exactly the syscalls between the MARK lines.
//!   cargo run --release -p sprout-cgroups --example start_path
use std::time::Instant;

use oci_spec::runtime::*;
use sprout_cgroups::Manager;

static mut T0: Option<Instant> = None;
static mut PHASES: String = String::new();

#[allow(static_mut_refs)]
fn mark(s: &str) {
    unsafe {
        let now = Instant::now();
        if let Some(t) = T0 {
            PHASES.push_str(&format!(" {:?}", now - t));
        }
        PHASES.push_str(&format!(" [{s}]"));
        T0 = Some(now);
    }
    // one write(2) per marker, easy to find in strace output
    unsafe { libc::write(2, format!("MARK {s}\n").as_ptr().cast(), s.len() + 6) };
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
    #[allow(static_mut_refs)]
    let phases = unsafe { PHASES.clone() };
    eprintln!(
        "layout {:?}: new+create+apply+add_pid took {:?}:{phases}",
        m.layout(),
        start
    );
}
