//! Which namespaces the container's init is cloned into and which it joins by path.
//!
//! The fast path is one clone(2) with every new namespace's flag but the network one, which the
//! init unshares first thing (its set-up then overlaps the runtime's). Namespaces given with a `path`
//! are opened in the parent (so a bad path fails before anything exists) and joined by the child
//! with setns(2); a pid namespace path is joined by the parent itself before the clone, since
//! setns(CLONE_NEWPID) only affects children.

use std::os::fd::{AsRawFd, OwnedFd};

use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

use crate::bail;
use crate::config::ns_name;
use crate::error::{Error, Result};
use crate::sys::{cstr, cvt};

pub fn clone_flag(t: LinuxNamespaceType) -> libc::c_int {
    match t {
        LinuxNamespaceType::Pid => libc::CLONE_NEWPID,
        LinuxNamespaceType::Network => libc::CLONE_NEWNET,
        LinuxNamespaceType::Mount => libc::CLONE_NEWNS,
        LinuxNamespaceType::Ipc => libc::CLONE_NEWIPC,
        LinuxNamespaceType::Uts => libc::CLONE_NEWUTS,
        LinuxNamespaceType::User => libc::CLONE_NEWUSER,
        LinuxNamespaceType::Cgroup => libc::CLONE_NEWCGROUP,
        LinuxNamespaceType::Time => 0x80, // CLONE_NEWTIME (clone3 only)
    }
}

#[derive(Default)]
pub struct Plan {
    /// Flags for clone3: namespaces created at clone time.
    pub clone_flags: u64,
    /// Namespaces the child creates with unshare(2) after joining (cgroup: only once it has been
    /// placed in its cgroup, so that the namespace's root is the container's cgroup).
    pub unshare_flags: libc::c_int,
    /// Namespaces to join by path, in the order they must be joined (user first).
    pub joins: Vec<(LinuxNamespaceType, OwnedFd)>,
    /// A pid namespace to join (by the parent, before clone).
    pub pid_join: Option<OwnedFd>,
    pub new_user: bool,
    pub new_mount: bool,
    pub new_pid: bool,
    pub new_net: bool,
    pub new_uts: bool,
    pub new_cgroup: bool,
    pub new_time: bool,
    pub join_mount: bool,
    /// A new pid namespace for a container that joins a user namespace by path: it must be
    /// owned by that user namespace, so the init makes it after the joins (unshare applies to
    /// children only) and forks once; the child is the container's pid 1.
    pub fork_for_pid: bool,
}

impl Plan {
    /// With linux.timeOffsets the time namespace can't be made at clone time (offsets can only be
    /// written before any process is inside it): the init unshares it, writes the offsets and
    /// enters it through time_for_children (see `enter_time_ns_with_offsets`).
    pub fn defer_time_ns(&mut self) {
        if self.new_time {
            self.clone_flags &= !(clone_flag(LinuxNamespaceType::Time) as u64);
            self.unshare_flags &= !clone_flag(LinuxNamespaceType::Time);
        }
    }

    pub fn from_spec(namespaces: &[LinuxNamespace]) -> Result<Plan> {
        let mut p = Plan::default();
        for ns in namespaces {
            let t = ns.typ();
            match ns.path() {
                Some(path) => {
                    let f = std::fs::File::open(path).map_err(|e| {
                        Error::os(
                            format!("linux.namespaces: {} path {}", ns_name(t), path.display()),
                            e,
                        )
                    })?;
                    let fd: OwnedFd = f.into();
                    // Check that the file really is a namespace of that type.
                    // SAFETY: ioctl(NS_GET_NSTYPE) takes no argument and touches no memory of ours;
                    // `fd` is an OwnedFd we just opened.
                    if unsafe {
                        libc::ioctl(fd.as_raw_fd(), 0xb703 /* NS_GET_NSTYPE */)
                    } != clone_flag(t)
                    {
                        bail!(
                            "linux.namespaces: {} is not a {} namespace",
                            path.display(),
                            ns_name(t)
                        );
                    }
                    match t {
                        LinuxNamespaceType::Pid => p.pid_join = Some(fd),
                        LinuxNamespaceType::User => p.joins.insert(0, (t, fd)),
                        _ => {
                            if t == LinuxNamespaceType::Mount {
                                // The rootfs is set up (and pivot_root'ed) in a joined mount
                                // namespace; in our own one that would move the host's processes.
                                let ours = std::fs::metadata("/proc/self/ns/mnt").ok();
                                let theirs = std::fs::metadata(path).ok();
                                if let (Some(a), Some(b)) = (ours, theirs) {
                                    use std::os::unix::fs::MetadataExt;
                                    if a.ino() == b.ino() && a.dev() == b.dev() {
                                        bail!("linux.namespaces: {} is the runtime's own mount namespace; a container cannot share it", path.display());
                                    }
                                }
                                p.join_mount = true;
                            }
                            p.joins.push((t, fd))
                        }
                    }
                }
                None => {
                    let f = clone_flag(t);
                    match t {
                        LinuxNamespaceType::User => p.new_user = true,
                        LinuxNamespaceType::Mount => p.new_mount = true,
                        LinuxNamespaceType::Pid => p.new_pid = true,
                        LinuxNamespaceType::Network => p.new_net = true,
                        LinuxNamespaceType::Uts => p.new_uts = true,
                        LinuxNamespaceType::Cgroup => p.new_cgroup = true,
                        LinuxNamespaceType::Time => p.new_time = true,
                        _ => {}
                    }
                    if t == LinuxNamespaceType::Cgroup {
                        p.unshare_flags |= f;
                    } else {
                        p.clone_flags |= f as u64;
                    }
                }
            }
        }
        let joins_user = p.joins.iter().any(|(t, _)| *t == LinuxNamespaceType::User);
        if !p.joins.is_empty() && (p.new_user || joins_user) {
            // Namespaces created after joining a user namespace must be owned by it, and
            // namespaces joined after creating one would be owned by the host: both mean creating
            // them with unshare(2) after the joins instead of at clone time.
            if p.new_pid && p.new_user {
                bail!("linux.namespaces: a new pid namespace together with a new user namespace and namespaces joined by path is not supported");
            }
            p.unshare_flags |= (p.clone_flags as libc::c_int) & !libc::CLONE_NEWPID;
            p.clone_flags &= libc::CLONE_NEWPID as u64;
            if p.new_pid {
                // Joining a user namespace (Kubernetes' hostUsers: false, a podman pod's shared
                // user namespace): the pid namespace must be the joined one's, made after the
                // joins.
                p.fork_for_pid = true;
                p.clone_flags &= !(libc::CLONE_NEWPID as u64);
            }
        }
        if p.clone_flags & libc::CLONE_NEWNET as u64 != 0 {
            // A new network namespace costs ~0.5 ms of kernel set-up (setup_net: every pernet
            // subsystem, sysctl tables, lo), far more than the other namespaces (<= 35 us each).
            // Made by the init with unshare(2) as its first step, it is paid on the init's side,
            // in parallel with the runtime's own work after clone (cgroups on v1, state), not
            // before clone returns. Same result: the init is in it before anything else happens,
            // owned by the same user namespace (a new one from clone3 gives the init every
            // capability in it, which unshare needs).
            p.clone_flags &= !(libc::CLONE_NEWNET as u64);
            p.unshare_flags |= libc::CLONE_NEWNET;
        }
        Ok(p)
    }

    /// The new network namespace can be made by the runtime's helper (netns.rs) and joined by
    /// the init: the init would unshare it in the runtime's own user namespace (none new, none
    /// joined) and no pid 1 is forked for a joined one.
    pub fn netns_beside(&self) -> bool {
        self.unshare_flags & libc::CLONE_NEWNET != 0
            && !self.new_user
            && !self.fork_for_pid
            && !self
                .joins
                .iter()
                .any(|(t, _)| *t == LinuxNamespaceType::User)
    }

    /// [`Plan::netns_beside`] read from the raw config.json, before the whole of it is parsed:
    /// `linux.namespaces` only, as `from_spec` reads it (a network namespace without a path, or
    /// with an empty one; no user namespace, new or joined). A hint: the plan made from the
    /// parsed config decides (`create` drops the helper if they disagree). Anything this
    /// reader does not follow (malformed JSON, escapes in the names it compares) gives false.
    ///
    /// A structural scan, not serde: a second derived deserializer cost ~200 KB of resident
    /// text (code is faulted in 64 KB at a time) for a few fields.
    pub fn netns_beside_raw(raw: &[u8]) -> bool {
        let mut r = raw::Reader { b: raw, i: 0 };
        let Some(ns) = r.linux_namespaces() else {
            return false;
        };
        ns.iter()
            .any(|(t, p)| *t == b"network" && p.is_none_or(<[u8]>::is_empty))
            && !ns.iter().any(|(t, _)| *t == b"user")
    }

    /// Child side: join the namespaces given by path, then create those left for unshare.
    ///
    /// As runc's nsexec: the namespaces other than the user one are joined first, with the
    /// runtime's own privileges, which cover a namespace the joined user namespace does not own
    /// (a host network namespace, runc's "wrong userns owner" test); one refused (EPERM) is
    /// tried again once inside the user namespace, which may own it.
    /// `net_elsewhere`: the new network namespace is made by the runtime's helper (netns.rs)
    /// and joined afterwards, not unshared here.
    pub fn join_and_unshare(&self, unshare_cgroup_now: bool, net_elsewhere: bool) -> Result<()> {
        let join = |t: LinuxNamespaceType, fd: &OwnedFd| {
            // SAFETY: setns takes a borrowed (open) fd and a namespace flag; it changes the
            // namespaces of this single-threaded child only and touches no memory of ours.
            cvt(unsafe { libc::setns(fd.as_raw_fd(), clone_flag(t)) })
                .map(drop)
                .map_err(|e| Error::os(format!("joining {} namespace", ns_name(t)), e))
        };
        let mut later: Vec<&(LinuxNamespaceType, OwnedFd)> = Vec::new();
        for j in self
            .joins
            .iter()
            .filter(|(t, _)| *t != LinuxNamespaceType::User)
        {
            match join(j.0, &j.1) {
                Err(e) if e.errno() == Some(libc::EPERM) => later.push(j),
                r => r?,
            }
        }
        for (t, fd) in self
            .joins
            .iter()
            .filter(|(t, _)| *t == LinuxNamespaceType::User)
        {
            join(*t, fd)?;
        }
        for (t, fd) in later {
            join(*t, fd)?;
        }
        let mut flags = self.unshare_flags;
        if !unshare_cgroup_now {
            flags &= !libc::CLONE_NEWCGROUP;
        }
        if net_elsewhere {
            flags &= !libc::CLONE_NEWNET;
        }
        if flags != 0 {
            // SAFETY: unshare takes flags only and touches no memory of ours.
            cvt(unsafe { libc::unshare(flags) }).map_err(|e| Error::os("unshare namespaces", e))?;
        }
        Ok(())
    }
}

/// The text of a uid_map/gid_map ("inside outside count" per line).
pub(crate) fn map_text(m: &[oci_spec::runtime::LinuxIdMapping]) -> String {
    m.iter()
        .map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size()))
        .collect()
}

/// Whether a map needs the setuid helper (newuidmap/newgidmap) rather than a direct write, as
/// runc and crun decide: only an unprivileged caller (euid != 0) needs it, and only for more
/// than the one mapping of its own id that the kernel lets it write itself.
pub fn needs_id_helper(euid: u32, own: u32, m: &[oci_spec::runtime::LinuxIdMapping]) -> bool {
    euid != 0 && !matches!(m, [one] if one.host_id() == own && one.size() == 1)
}

/// The arguments of `newuidmap`/`newgidmap`: `PID inside outside count ...`.
pub fn id_helper_args(pid: i32, m: &[oci_spec::runtime::LinuxIdMapping]) -> Vec<String> {
    let mut a = vec![pid.to_string()];
    for m in m {
        a.extend([
            m.container_id().to_string(),
            m.host_id().to_string(),
            m.size().to_string(),
        ]);
    }
    a
}

/// `name` in $PATH, else in the usual places (/usr/bin, /bin, /usr/sbin, /sbin).
fn find_helper(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(Into::into))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Run newuidmap/newgidmap for `pid`.
fn run_id_helper(
    name: &str,
    field: &str,
    pid: i32,
    m: &[oci_spec::runtime::LinuxIdMapping],
) -> Result<()> {
    let Some(bin) = find_helper(name) else {
        bail!(
            "{field}: {name} not found (an unprivileged user can map only its own id itself; \
             install uidmap / shadow-utils and give the user ranges in /etc/subuid and /etc/subgid)"
        );
    };
    let args = id_helper_args(pid, m);
    let out = std::process::Command::new(&bin)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| Error::os(format_args!("{field}: running {}", bin.display()), e))?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr);
        let msg = msg.trim().replace('\n', "; ");
        bail!(
            "{field}: {} {} failed ({}): {msg}",
            bin.display(),
            args.join(" "),
            out.status
        );
    }
    Ok(())
}

/// Write one map: directly, or with the setuid helper when [`needs_id_helper`] says so or
/// the direct write is refused (EPERM) to a non-root caller.
/// One of /proc/PID/{uid,gid}_map (`kind`); errors name `field`. With `euid` 0 the direct
/// write only (newuidmap/newgidmap are an unprivileged caller's fallback).
pub(crate) fn write_one_map(
    pid: i32,
    kind: &str,
    field: &str,
    helper: &str,
    euid: u32,
    own: u32,
    m: &[oci_spec::runtime::LinuxIdMapping],
) -> Result<()> {
    if m.is_empty() {
        return Ok(());
    }
    if needs_id_helper(euid, own, m) {
        return run_id_helper(helper, field, pid, m);
    }
    if euid != 0 && kind == "gid_map" {
        // An unprivileged writer: the kernel wants setgroups denied before the gid map.
        let _ = std::fs::write(format!("/proc/{pid}/setgroups"), "deny");
    }
    match std::fs::write(format!("/proc/{pid}/{kind}"), map_text(m)) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && euid != 0 => {
            run_id_helper(helper, field, pid, m)
        }
        Err(e) => Err(Error::os(format_args!("{field}: writing {kind}"), e)),
    }
}

/// Write /proc/PID/{uid,gid}_map from the spec's mappings (parent side). As root (euid 0,
/// in the initial namespace or in a rootless podman's) directly; an unprivileged caller
/// writes the single mapping of its own id directly (setgroups denied first for the gid
/// map, as the kernel requires) and goes through newuidmap/newgidmap for anything more.
pub fn write_id_maps(
    pid: i32,
    uid: &[oci_spec::runtime::LinuxIdMapping],
    gid: &[oci_spec::runtime::LinuxIdMapping],
) -> Result<()> {
    let (euid, egid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    write_one_map(
        pid,
        "uid_map",
        "linux.uidMappings",
        "newuidmap",
        euid,
        euid,
        uid,
    )?;
    write_one_map(
        pid,
        "gid_map",
        "linux.gidMappings",
        "newgidmap",
        euid,
        egid,
        gid,
    )
}

/// Join every namespace of a running container's init, for `exec` (child side).
/// Join every namespace of `types` of the process behind `pidfd` in one setns. A pid namespace
/// applies to the caller's children only.
pub fn join_all_of(pidfd: &OwnedFd, types: &[LinuxNamespaceType]) -> Result<()> {
    let mut flags = 0;
    for t in types {
        flags |= clone_flag(*t);
    }
    if flags == 0 {
        return Ok(());
    }
    // SAFETY: setns takes the borrowed (open) pidfd and namespace flags; no memory of ours is
    // touched.
    cvt(unsafe { libc::setns(pidfd.as_raw_fd(), flags) })
        .map_err(|e| Error::os("joining the container's namespaces", e))?;
    Ok(())
}

pub fn path_of(pid: i32, t: LinuxNamespaceType) -> std::ffi::CString {
    let n = match t {
        LinuxNamespaceType::Pid => "pid",
        LinuxNamespaceType::Network => "net",
        LinuxNamespaceType::Mount => "mnt",
        LinuxNamespaceType::Ipc => "ipc",
        LinuxNamespaceType::Uts => "uts",
        LinuxNamespaceType::User => "user",
        LinuxNamespaceType::Cgroup => "cgroup",
        LinuxNamespaceType::Time => "time",
    };
    cstr(format!("/proc/{pid}/ns/{n}"))
}

/// Child side of `Plan::defer_time_ns`: a new time namespace with the spec's offsets.
pub fn enter_time_ns_with_offsets(
    offsets: &std::collections::HashMap<String, oci_spec::runtime::LinuxTimeOffset>,
) -> Result<()> {
    // SAFETY: unshare takes a flag only and touches no memory of ours.
    cvt(unsafe { libc::unshare(clone_flag(LinuxNamespaceType::Time)) })
        .map_err(|e| Error::os("unshare time namespace", e))?;
    let mut text = String::new();
    for (clock, off) in offsets {
        let name = match clock.as_str() {
            "monotonic" | "boottime" => clock.as_str(),
            other => bail!("linux.timeOffsets: unknown clock {other:?} (monotonic or boottime)"),
        };
        text.push_str(&format!(
            "{name} {} {}\n",
            off.secs().unwrap_or(0),
            off.nanosecs().unwrap_or(0)
        ));
    }
    std::fs::write("/proc/self/timens_offsets", text)
        .map_err(|e| Error::os("linux.timeOffsets: writing timens_offsets", e))?;
    let f = std::fs::File::open("/proc/self/ns/time_for_children")
        .map_err(|e| Error::os("linux.timeOffsets", e))?;
    // SAFETY: setns takes the fd of the open File `f` and a flag; no memory of ours is touched.
    cvt(unsafe { libc::setns(f.as_raw_fd(), clone_flag(LinuxNamespaceType::Time)) })
        .map_err(|e| Error::os("entering the time namespace", e))?;
    Ok(())
}

/// The few steps of JSON [`Plan::netns_beside_raw`] needs: objects, arrays, strings (raw bytes,
/// escapes kept as written), other values skipped. No recursion: a nested value is skipped by
/// counting brackets outside strings.
mod raw {
    pub(super) struct Reader<'a> {
        pub(super) b: &'a [u8],
        pub(super) i: usize,
    }

    /// One `linux.namespaces` entry: its `type` and `path` as written.
    pub(super) type Entry<'a> = (&'a [u8], Option<&'a [u8]>);

    impl<'a> Reader<'a> {
        fn ws(&mut self) {
            while self.b.get(self.i).is_some_and(u8::is_ascii_whitespace) {
                self.i += 1;
            }
        }

        fn eat(&mut self, c: u8) -> Option<()> {
            self.ws();
            (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
        }

        fn peek(&mut self) -> Option<u8> {
            self.ws();
            self.b.get(self.i).copied()
        }

        /// A string's bytes between its quotes (escapes not decoded).
        fn string(&mut self) -> Option<&'a [u8]> {
            self.eat(b'"')?;
            let start = self.i;
            loop {
                match *self.b.get(self.i)? {
                    b'\\' => self.i += 2,
                    b'"' => {
                        self.i += 1;
                        return Some(&self.b[start..self.i - 1]);
                    }
                    _ => self.i += 1,
                }
            }
        }

        fn skip_value(&mut self) -> Option<()> {
            match self.peek()? {
                b'"' => self.string().map(drop),
                b'{' | b'[' => {
                    let mut depth = 0usize;
                    loop {
                        match *self.b.get(self.i)? {
                            b'"' => {
                                self.string()?;
                                continue;
                            }
                            b'{' | b'[' => depth += 1,
                            b'}' | b']' => {
                                depth -= 1;
                                if depth == 0 {
                                    self.i += 1;
                                    return Some(());
                                }
                            }
                            _ => {}
                        }
                        self.i += 1;
                    }
                }
                _ => {
                    // A number or a literal: up to the next delimiter.
                    let start = self.i;
                    while self.b.get(self.i).is_some_and(|c| {
                        !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace()
                    }) {
                        self.i += 1;
                    }
                    (self.i > start).then_some(())
                }
            }
        }

        /// The members of the object at the cursor: `f(reader, key)` is called with the cursor
        /// on each value and must consume it.
        fn object(&mut self, mut f: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
            self.eat(b'{')?;
            if self.eat(b'}').is_some() {
                return Some(());
            }
            loop {
                let key = self.string()?;
                self.eat(b':')?;
                f(self, key)?;
                if self.eat(b',').is_none() {
                    return self.eat(b'}');
                }
            }
        }

        /// The entries of `linux.namespaces`, if the document has that array of objects.
        pub(super) fn linux_namespaces(&mut self) -> Option<Vec<Entry<'a>>> {
            let mut found = None;
            self.object(|r, key| {
                if key != b"linux" || r.peek()? != b'{' {
                    return r.skip_value();
                }
                r.object(|r, key| {
                    if key != b"namespaces" || r.peek()? != b'[' {
                        return r.skip_value();
                    }
                    let mut v = Vec::new();
                    r.eat(b'[')?;
                    if r.eat(b']').is_none() {
                        loop {
                            let (mut typ, mut path) = (None, None);
                            r.object(|r, key| {
                                match key {
                                    b"type" => typ = Some(r.string()?),
                                    b"path" if r.peek()? == b'"' => path = Some(r.string()?),
                                    _ => r.skip_value()?,
                                }
                                Some(())
                            })?;
                            v.push((typ?, path));
                            if r.eat(b',').is_none() {
                                r.eat(b']')?;
                                break;
                            }
                        }
                    }
                    found = Some(v);
                    Some(())
                })
            })?;
            found
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxIdMapping, LinuxIdMappingBuilder};

    /// The raw pre-reading agrees with the plan made from the parsed config, for the shapes
    /// of `linux.namespaces` that decide it.
    #[test]
    fn netns_beside_raw_agrees_with_the_plan() {
        for (namespaces, want) in [
            (
                r#"[{"type":"pid"},{"type":"network"},{"type":"mount"}]"#,
                true,
            ),
            (r#"[{"type":"network","path":""}]"#, true),
            (r#"[{"type":"network","path":"/proc/1/ns/net"}]"#, false),
            (r#"[{"type":"network"},{"type":"user"}]"#, false),
            (
                r#"[{"type":"network"},{"type":"user","path":"/proc/1/ns/user"}]"#,
                false,
            ),
            (r#"[{"type":"pid"},{"type":"mount"}]"#, false),
            ("[]", false),
        ] {
            let raw = format!(
                r#"{{"ociVersion":"1.0.2","annotations":{{"a":"network"}},"linux":{{"namespaces":{namespaces},"maskedPaths":["/proc/kcore"]}},"root":{{"path":"r"}}}}"#
            );
            assert_eq!(Plan::netns_beside_raw(raw.as_bytes()), want, "{namespaces}");
            let spec: oci_spec::runtime::Spec = serde_json::from_str(&raw).unwrap();
            let ns = spec.linux().as_ref().unwrap().namespaces().clone().unwrap();
            // Paths of other processes' namespaces are opened by from_spec: pid 1's exist.
            let ns: Vec<_> = ns
                .into_iter()
                .map(|mut n| {
                    if n.path().as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                        n.set_path(None);
                    }
                    n
                })
                .collect();
            if let Ok(plan) = Plan::from_spec(&ns) {
                assert_eq!(plan.netns_beside(), want, "plan: {namespaces}");
            }
        }
        for raw in [
            &b"{}"[..],
            b"not json",
            br#"{"linux":null}"#,
            br#"{"linux":{"namespaces":null}}"#,
            br#"{"linux":{"namespaces":[{"type":"network"}]"#,
            br#"{"linux":{"namespaces":[{"type":"net\u0077ork"}]}}"#,
            br#"{"linux":{"namespaces":[{"type":"network"},{"type":"user"}]}}"#,
        ] {
            assert!(
                !Plan::netns_beside_raw(raw),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        // Whitespace, nesting, strings with brackets and escaped quotes before the entries, a
        // key named like ours elsewhere, a null path.
        let raw = br#" { "annotations" : { "x" : "}]\"{[" , "linux" : "no" } ,
            "process": {"args": ["a", "b]"], "env": [], "user": {"uid": 0}, "n": -1.5e3, "t": true},
            "linux" : { "resources": {"devices": [{"allow": false}]}, "namespaces" : [
              { "path" : null , "type" : "network" } , {"type": "pid"} ] } } "#;
        assert!(Plan::netns_beside_raw(raw));
        // What `runc spec` writes.
        let spec = crate::spec_default::default_spec(false);
        assert!(Plan::netns_beside_raw(spec.to_string().as_bytes()));
        assert!(Plan::netns_beside_raw(
            serde_json::to_vec_pretty(&spec).unwrap().as_slice()
        ));
    }

    fn m(inside: u32, outside: u32, size: u32) -> LinuxIdMapping {
        LinuxIdMappingBuilder::default()
            .container_id(inside)
            .host_id(outside)
            .size(size)
            .build()
            .unwrap()
    }

    #[test]
    fn id_helper_only_for_unprivileged_callers_with_more_than_their_own_id() {
        // root writes anything itself.
        assert!(!needs_id_helper(
            0,
            0,
            &[m(0, 1000, 1), m(1, 100000, 65536)]
        ));
        // An unprivileged user: its own id alone is written directly...
        assert!(!needs_id_helper(1000, 1000, &[m(0, 1000, 1)]));
        // ... anything else goes through newuidmap/newgidmap.
        assert!(needs_id_helper(
            1000,
            1000,
            &[m(0, 1000, 1), m(1, 100000, 65536)]
        ));
        assert!(needs_id_helper(1000, 1000, &[m(0, 1001, 1)]));
        assert!(needs_id_helper(1000, 1000, &[m(0, 1000, 2)]));
    }

    #[test]
    fn id_helper_arguments() {
        assert_eq!(
            id_helper_args(42, &[m(0, 1000, 1), m(1, 100000, 65536)]),
            ["42", "0", "1000", "1", "1", "100000", "65536"]
        );
        assert_eq!(
            map_text(&[m(0, 1000, 1), m(1, 100000, 65536)]),
            "0 1000 1\n1 100000 65536\n"
        );
    }
}
