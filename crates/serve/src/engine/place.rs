//! Placing what a zygote forks into its pool cgroup, from the engine.
//!
//! A zygote runs code of the packages it imported, so it is handed no cgroup file: a
//! `cgroup.procs` opened by the engine (root) lets whoever holds it move any process it can
//! name, since the kernel checks such a write against the opener's credentials. Instead the
//! zygote answers each fork with the child's pid as its own pid namespace numbers it; the
//! engine finds that child among the zygote's children (`/proc/<zygote>/task/<zygote>/children`,
//! each one's `PPid` and `NSpid`), writes its host pid into the cgroup, checks that the pid
//! still names that child, and tells the child it is placed. A zygote can so have only its own
//! children placed, each in the cgroup the engine chose.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use sprout_cgroups::PoolCgroup as PoolCg;

/// `PPid` and `NSpid` (the process's pid in each pid namespace it is in, the reader's first)
/// of host process `pid`.
fn ids(pid: i32) -> io::Result<(i32, Vec<i32>)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let mut ppid = None;
    let mut ns = Vec::new();
    for l in s.lines() {
        if let Some(v) = l.strip_prefix("PPid:") {
            ppid = v.trim().parse().ok();
        } else if let Some(v) = l.strip_prefix("NSpid:") {
            ns = v
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
        }
    }
    match ppid {
        Some(p) if !ns.is_empty() => Ok((p, ns)),
        _ => Err(io::Error::other(format!(
            "/proc/{pid}/status: no PPid/NSpid"
        ))),
    }
}

/// Host pids of the children of `parent` (forked by its main thread, where a zygote forks):
/// its `children` file, or a scan of /proc where the kernel has none (CONFIG_PROC_CHILDREN).
fn children(parent: i32) -> io::Result<Vec<i32>> {
    match std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")) {
        Ok(s) => Ok(s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound && ids(parent).is_ok() => {
            Ok(std::fs::read_dir("/proc")?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&p| ids(p).is_ok_and(|(pp, _)| pp == parent))
                .collect())
        }
        Err(e) => Err(e),
    }
}

/// Whether host process `pid` is a child of `parent` that `parent`'s pid namespace (its
/// innermost, level `level` of `NSpid`) numbers `nspid`.
fn is_child(pid: i32, parent: i32, level: usize, nspid: i32) -> bool {
    ids(pid).is_ok_and(|(pp, ns)| pp == parent && ns.get(level) == Some(&nspid))
}

/// The level of `pid`'s own (innermost) pid namespace in `NSpid`, as we read it: where its
/// children's pids as it knows them are.
pub(super) fn ns_level(pid: i32) -> io::Result<usize> {
    Ok(ids(pid)?.1.len() - 1)
}

/// The host pid of the child of host process `parent` that `parent` knows as `nspid`.
pub(super) fn host_child(parent: i32, nspid: i32) -> io::Result<i32> {
    host_child_at(parent, ns_level(parent)?, nspid)
}

/// [`host_child`] with `parent`'s [`ns_level`] known. The children are looked at newest
/// first (the kernel lists them in fork order): a zygote with hundreds of sandboxes still
/// has the one just forked at the end, one `status` read away.
fn host_child_at(parent: i32, level: usize, nspid: i32) -> io::Result<i32> {
    children(parent)?
        .into_iter()
        .rev()
        .find(|&c| is_child(c, parent, level, nspid))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no child {nspid} of pid {parent}"),
            )
        })
}

/// Move the child of `parent` (whose [`ns_level`] is `level`) that `parent` knows as `nspid`
/// into `cg`; its host pid.
///
/// The child is pinned with a pidfd before it is checked, and the pidfd is asked after the
/// write whether that process is still there (running, or a zombie not yet reaped): if it
/// is, its pid named it all along, so the write moved the process that was checked and no
/// other that got its number in between.
pub(super) fn place_child(cg: &PoolCg, parent: i32, level: usize, nspid: i32) -> io::Result<i32> {
    let pid = host_child_at(parent, level, nspid)?;
    let pin = sprout_process::pidfd::pidfd_open(pid)?;
    // The pidfd is of the process checked now (the pid may have changed hands before it).
    if !is_child(pid, parent, level, nspid) {
        return Err(gone(pid, parent, nspid));
    }
    cg.place(pid)?;
    if !still_there(&pin) {
        return Err(gone(pid, parent, nspid));
    }
    Ok(pid)
}

fn gone(pid: i32, parent: i32, nspid: i32) -> io::Error {
    io::Error::other(format!(
        "pid {pid} (child {nspid} of {parent}) exited while it was placed"
    ))
}

/// Whether the process behind `pin` still holds its pid (running or a zombie).
fn still_there(pin: &std::os::fd::OwnedFd) -> bool {
    sprout_process::pidfd::pidfd_send_signal(pin, 0).is_ok()
}

/// Tell a placed process so: one raw byte, `P`, on its socket (ahead of any framed message;
/// it waits for it before it writes more of its parent's pages).
pub(super) fn say_placed(s: &UnixStream) -> io::Result<()> {
    (&*s).write_all(b"P")
}

/// A child zygote's first word, one raw byte `F`: it is there (pid 2 of its namespace).
pub(super) fn wait_forked(s: &UnixStream) -> io::Result<()> {
    let mut b = [0u8; 1];
    (&*s).read_exact(&mut b)?;
    if &b != b"F" {
        return Err(io::Error::other(format!("child zygote said {b:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    #[test]
    fn finds_a_child_by_its_pid_and_only_a_child() {
        // A single-threaded parent (its main thread forks, as a zygote's does) with one child.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let parent = sh.id() as i32;
        let mut line = String::new();
        std::io::BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let child: i32 = line.trim().parse().unwrap();
        assert_eq!(ids(child).unwrap().0, parent);
        assert_eq!(children(parent).unwrap(), vec![child]);
        // The same pid namespace as ours here: the parent numbers it as we do.
        assert_eq!(host_child(parent, child).unwrap(), child);
        // Not a child of the parent: the parent itself, a pid nobody has.
        assert!(host_child(parent, parent).is_err());
        assert!(host_child(parent, i32::MAX).is_err());
        let pin = sprout_process::pidfd::pidfd_open(child).unwrap();
        assert!(still_there(&pin));
        // SAFETY: kill(2) on the pid of the child read from its parent, which waits for it
        // (so the pid is not reused before the kill).
        unsafe { libc::kill(child, libc::SIGKILL) };
        sh.wait().unwrap();
        assert!(host_child(parent, child).is_err());
        // Reaped (sh waited for it before it exited itself): its pid is free for another
        // process, and the pin says so, whoever has that number now.
        assert!(!still_there(&pin));
    }
}
