//! CVE-2024-21626 ("Leaky Vessels"): a host fd reaching the container. runc leaked an fd on the
//! host's /sys/fs/cgroup into its init; a config with `process.cwd = /proc/self/fd/7` (or
//! `exec --cwd /proc/self/fd/7`) then left the container process with its working directory on
//! the host. Here: the container process sees only fds 0, 1, 2 (plus exactly the --preserve-fds
//! ones), also when the runtime itself was started with extra inherited fds, and no cwd of the
//! /proc/self/fd/N kind reaches outside the container's root (it fails, or stays inside).

use serde_json::json;
use sprout_security_tests::*;
use std::os::fd::AsRawFd;
use std::path::Path;

fn only_stdio(out: &str, what: &str, extra_ok: &[i32]) {
    let fds = parse_fds(out);
    assert!(!fds.is_empty(), "{what}: the probe printed no fds: {out:?}");
    let bad: Vec<_> = fds
        .iter()
        .filter(|(n, _)| *n > 2 && !extra_ok.contains(n))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: fds beyond stdio{} visible in the container: {bad:?} (all: {fds:?})",
        if extra_ok.is_empty() {
            String::new()
        } else {
            format!(" and {extra_ok:?}")
        }
    );
    for n in [0, 1, 2].iter().chain(extra_ok) {
        assert!(
            fds.iter().any(|(f, _)| f == n),
            "{what}: fd {n} missing: {fds:?}"
        );
    }
}

/// Host fds the runtime is started with (a directory, a file, a host dir O_PATH): the
/// classic leak surface. Not preserved, so none may reach the container.
fn host_fds(ctx: &Ctx) -> (Vec<std::os::fd::OwnedFd>, Vec<(i32, i32)>) {
    let scratch = ctx.scratch("hostfd");
    std::fs::write(scratch.join("secret"), "host secret").unwrap();
    let a = high_fd(&scratch, libc::O_RDONLY | libc::O_DIRECTORY);
    let b = high_fd(&scratch.join("secret"), libc::O_RDONLY);
    let c = high_fd(Path::new("/"), libc::O_PATH | libc::O_DIRECTORY);
    let map = vec![
        (3, a.as_raw_fd()),
        (4, b.as_raw_fd()),
        (5, c.as_raw_fd()),
        (9, a.as_raw_fd()),
    ];
    (vec![a, b, c], map)
}

#[test]
fn run_sees_only_stdio() {
    let ctx = Ctx::new("21626run");
    let b = ctx.bundle(&["/probe", "fds"]);
    b.install_probe();
    let out = b.run_ok();
    only_stdio(&out, "run", &[]);
}

#[test]
fn run_with_inherited_host_fds_sees_only_stdio() {
    let ctx = Ctx::new("21626inh");
    let b = ctx.bundle(&["/probe", "fds"]);
    b.install_probe();
    b.write_config();
    let (_keep, map) = host_fds(&ctx);
    let ba = b.bundle_arg();
    let o = ctx.rt_opts(
        &["run", "--bundle", &ba, &b.id],
        &CmdOpts {
            extra_fds: map,
            ..Default::default()
        },
    );
    o.assert_ok();
    only_stdio(
        &o.stdout,
        "run (runtime started with host fds 3,4,5,9)",
        &[],
    );
}

#[test]
fn run_preserve_fds_exact() {
    let ctx = Ctx::new("21626pres");
    let b = ctx.bundle(&["/probe", "fds"]);
    b.install_probe();
    b.write_config();
    let (_keep, map) = host_fds(&ctx);
    let ba = b.bundle_arg();
    // fds 3 and 4 preserved; 5 and 9 (also inherited) must not appear.
    let o = ctx.rt_opts(
        &["run", "--preserve-fds", "2", "--bundle", &ba, &b.id],
        &CmdOpts {
            extra_fds: map,
            ..Default::default()
        },
    );
    o.assert_ok();
    only_stdio(&o.stdout, "run --preserve-fds 2", &[3, 4]);
}

#[test]
fn exec_sees_only_stdio() {
    let ctx = Ctx::new("21626exec");
    let b = ctx.bundle(&["sleep", "60"]);
    b.install_probe();
    b.create().assert_ok();
    b.start().assert_ok();
    let o = b.exec(&[], &["/probe", "fds"]);
    o.assert_ok();
    only_stdio(&o.stdout, "exec", &[]);
    let (_keep, map) = host_fds(&ctx);
    let o = ctx.rt_opts(
        &["exec", &b.id, "/probe", "fds"],
        &CmdOpts {
            extra_fds: map.clone(),
            ..Default::default()
        },
    );
    o.assert_ok();
    only_stdio(
        &o.stdout,
        "exec (runtime started with host fds 3,4,5,9)",
        &[],
    );
    let o = ctx.rt_opts(
        &["exec", "--preserve-fds", "1", &b.id, "/probe", "fds"],
        &CmdOpts {
            extra_fds: map,
            ..Default::default()
        },
    );
    o.assert_ok();
    only_stdio(&o.stdout, "exec --preserve-fds 1", &[3]);
}

/// `probe cwd` output: the directory reached by walking ".." from the cwd must be the container's
/// own root.
fn cwd_inside(out: &str) -> Result<(), String> {
    let root = out
        .lines()
        .find_map(|l| l.strip_prefix("DOT "))
        .and_then(|r| r.split(" ROOT ").nth(1))
        .map(str::to_string);
    let top = out
        .lines()
        .find_map(|l| l.strip_prefix("TOP "))
        .map(str::to_string);
    match (root, top) {
        (Some(r), Some(t)) if r == t => Ok(()),
        (r, t) => Err(format!("cwd is OUTSIDE the container root (walking '..' reached {t:?}, the root is {r:?}): {out}")),
    }
}

/// Control for the check above: a process whose cwd is outside its root (chroot without chdir,
/// made here on the host) is detected.
#[test]
fn cwd_check_detects_outside() {
    use std::os::unix::process::CommandExt;
    let ctx = Ctx::new("21626ctl");
    let dir = ctx.scratch("chroot");
    std::fs::copy(probe_bin(), dir.join("probe")).unwrap();
    let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let mut cmd = std::process::Command::new("/probe");
    cmd.arg("cwd").current_dir(&ctx.dir);
    // SAFETY: chroot(2) only, between fork and exec; the cwd stays outside the new root.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(c.as_ptr()) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let o = cmd.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        cwd_inside(&out).is_err(),
        "control: cwd outside a chroot not detected: {out}"
    );
}

/// process.cwd = /proc/self/fd/N for N = 3..=24, with host fds inherited by the runtime: each
/// must fail to start or leave the process inside its root.
#[test]
fn process_cwd_proc_self_fd_stays_inside() {
    let ctx = Ctx::new("21626cwd");
    let (_keep, map) = host_fds(&ctx);
    let mut failures = Vec::new();
    let mut started = 0;
    for n in 3..=24 {
        let mut b = ctx.bundle(&["/probe", "cwd"]);
        b.install_probe();
        b.set("/process/cwd", json!(format!("/proc/self/fd/{n}")));
        b.write_config();
        let ba = b.bundle_arg();
        let o = ctx.rt_opts(
            &["run", "--bundle", &ba, &b.id],
            &CmdOpts {
                extra_fds: map.clone(),
                ..Default::default()
            },
        );
        if o.ok() {
            started += 1;
            if let Err(e) = cwd_inside(&o.stdout) {
                failures.push(format!("cwd /proc/self/fd/{n}: {e}"));
            }
        }
    }
    eprintln!("{started} of 22 /proc/self/fd/N cwds started (the rest failed cleanly)");
    assert!(
        failures.is_empty(),
        "process.cwd escaped the container:\n{}",
        failures.join("\n")
    );
}

#[test]
fn exec_cwd_proc_self_fd_stays_inside() {
    let ctx = Ctx::new("21626ecwd");
    let b = ctx.bundle(&["sleep", "60"]);
    b.install_probe();
    b.create().assert_ok();
    b.start().assert_ok();
    let (_keep, map) = host_fds(&ctx);
    let mut failures = Vec::new();
    let mut started = 0;
    for n in 3..=24 {
        let cwd = format!("/proc/self/fd/{n}");
        for preserve in ["0", "3"] {
            let o = ctx.rt_opts(
                &[
                    "exec",
                    "--preserve-fds",
                    preserve,
                    "--cwd",
                    &cwd,
                    &b.id,
                    "/probe",
                    "cwd",
                ],
                &CmdOpts {
                    extra_fds: map.clone(),
                    ..Default::default()
                },
            );
            if o.ok() {
                started += 1;
                // With --preserve-fds the user deliberately hands fds 3.. to the process; only an
                // fd the user did NOT pass may never become the cwd.
                if preserve == "3" && n <= 5 {
                    continue;
                }
                if let Err(e) = cwd_inside(&o.stdout) {
                    failures.push(format!("exec --preserve-fds {preserve} --cwd {cwd}: {e}"));
                }
            }
        }
    }
    eprintln!("{started} of 44 exec --cwd /proc/self/fd/N started");
    assert!(
        failures.is_empty(),
        "exec --cwd escaped the container:\n{}",
        failures.join("\n")
    );
}
