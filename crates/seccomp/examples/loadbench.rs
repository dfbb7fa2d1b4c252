//! `loadbench CONFIG.json [N]`: cost of loading the config's linux.seccomp filter, per
//! compiled form (libseccomp linear, libseccomp tree, sprout's). For each level: the program length, and the median / p25 / p75
//! of the `seccomp(2)` call itself over N fresh children (each sets no_new_privs and loads the
//! filter once, as a container's init does). Needs nothing but a kernel with seccomp.

use std::time::Instant;

fn child_load_ns(p: &sprout_seccomp::compile::Compiled) -> u64 {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a live [c_int; 2], the two slots pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: this example is single-threaded, so the child is a full copy of the process
    // (no lock held by another thread) and may allocate; it ends with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes integers only and affects this child alone.
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
        let t = Instant::now();
        let r = sprout_seccomp::load::load_filter(&p.filter, p.flags, p.listener);
        let ns = if r.is_ok() {
            t.elapsed().as_nanos() as u64
        } else {
            u64::MAX
        };
        // SAFETY: writes the 8 bytes of the live local `ns` to the pipe's write end; _exit
        // skips the parent's atexit handlers and stdio buffers this child copied.
        unsafe {
            libc::write(
                fds[1],
                std::ptr::from_ref::<u64>(&ns).cast::<libc::c_void>(),
                8,
            );
            libc::_exit(0);
        }
    }
    let mut ns = 0u64;
    // SAFETY: reads at most 8 bytes into the live local `ns` (a u64, any bit pattern valid);
    // the two fds are this function's pipe, closed once here; `pid` is our own child.
    unsafe {
        libc::read(
            fds[0],
            std::ptr::from_mut::<u64>(&mut ns).cast::<libc::c_void>(),
            8,
        );
        libc::close(fds[0]);
        libc::close(fds[1]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    assert_ne!(ns, u64::MAX, "load failed");
    ns
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&args[1]).expect("read config")).expect("json");
    let n: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(200);
    let profile: oci_spec::runtime::LinuxSeccomp =
        serde_json::from_value(cfg["linux"]["seccomp"].clone()).expect("linux.seccomp");
    // libseccomp linear, libseccomp tree, and what sprout stores (tree + compact.rs).
    let levels = [
        "libseccomp optimize 1",
        "libseccomp optimize 2",
        "sprout (compile)",
    ];
    let progs = [
        sprout_seccomp::compile::compile_with(&profile, 1).expect("compile"),
        sprout_seccomp::compile::compile_with(&profile, 2).expect("compile"),
        sprout_seccomp::compile::compile(&profile).expect("compile"),
    ];
    // Interleave the levels so that load on the machine hits them alike.
    let mut times: Vec<Vec<u64>> = vec![Vec::new(); levels.len()];
    for _ in 0..n {
        for (i, p) in progs.iter().enumerate() {
            times[i].push(child_load_ns(p));
        }
    }
    for (i, l) in levels.iter().enumerate() {
        let t = &mut times[i];
        t.sort();
        let q = |f: f64| t[((t.len() - 1) as f64 * f) as usize] as f64 / 1000.0;
        println!(
            "{l}: {} instructions, seccomp(2) median {:.0} us (p25 {:.0}, p75 {:.0})",
            progs[i].filter.len(),
            q(0.5),
            q(0.25),
            q(0.75)
        );
    }
}
