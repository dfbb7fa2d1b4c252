//! criu's RPC interface (`criu swrk FD`, images/rpc.proto, proto2): the few messages sprout
//! sends and reads, encoded by hand. The command line cannot do what containers need: a
//! terminal's pty master comes back only as an fd in an `orphan-pts-master` notification, and
//! `setup-namespaces`/`post-restore` tell the caller when the restored tree exists.
//!
//! One request per criu process: `criu swrk 3` gets one end of a SOCK_SEQPACKET pair as its fd
//! 3; the request goes in one record, the answers (notifications, then the final response) come
//! back one per record, a notification's fd with it (SCM_RIGHTS). Paths criu needs from the
//! caller go by fd number *in the caller* (the images and work directories): criu opens them
//! through /proc/<peer pid>/fd.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::error::{Error, Result};
use crate::sys;

/// criu_req_type.
pub const DUMP: u64 = 1;
pub const RESTORE: u64 = 2;
pub const PRE_DUMP: u64 = 4;
pub const NOTIFY: u64 = 6;

/// Field numbers of criu_opts (rpc.proto).
pub mod opt {
    pub const IMAGES_DIR_FD: u32 = 1;
    pub const PID: u32 = 2;
    pub const LEAVE_RUNNING: u32 = 3;
    pub const EXT_UNIX_SK: u32 = 4;
    pub const TCP_ESTABLISHED: u32 = 5;
    pub const EVASIVE_DEVICES: u32 = 6;
    pub const SHELL_JOB: u32 = 7;
    pub const FILE_LOCKS: u32 = 8;
    pub const LOG_LEVEL: u32 = 9;
    pub const LOG_FILE: u32 = 10;
    pub const PS: u32 = 11;
    pub const NOTIFY_SCRIPTS: u32 = 12;
    pub const ROOT: u32 = 13;
    pub const PARENT_IMG: u32 = 14;
    pub const TRACK_MEM: u32 = 15;
    pub const AUTO_DEDUP: u32 = 16;
    pub const WORK_DIR_FD: u32 = 17;
    pub const LINK_REMAP: u32 = 18;
    pub const MANAGE_CGROUPS: u32 = 24;
    pub const CG_ROOT: u32 = 25;
    pub const RST_SIBLING: u32 = 26;
    pub const INHERIT_FD: u32 = 27;
    pub const MANAGE_CGROUPS_MODE: u32 = 34;
    pub const CGROUP_YARD: u32 = 60;
    pub const EXTERNAL: u32 = 37;
    pub const EMPTY_NS: u32 = 38;
    pub const JOIN_NS: u32 = 39;
    pub const FREEZE_CGROUP: u32 = 44;
    pub const TCP_SKIP_IN_FLIGHT: u32 = 46;
    pub const ORPHAN_PTS_MASTER: u32 = 50;
    pub const CONFIG_FILE: u32 = 51;
    pub const LSM_PROFILE: u32 = 53;
}

/// criu_cg_mode for `--manage-cgroups-mode`.
pub fn cg_mode(name: &str) -> Option<u64> {
    match name {
        "ignore" => Some(0),
        "soft" => Some(3),
        "full" => Some(4),
        "strict" => Some(5),
        _ => None,
    }
}

/// A protobuf message being built (fields in any order, as proto2 allows).
#[derive(Default, Clone, Debug)]
pub struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }
    /// A varint field (uint32/uint64/enum/bool).
    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, 0);
        self.varint(v);
        self
    }
    /// An int32 field (negative values take ten bytes, sign-extended, as protobuf says).
    pub fn int(&mut self, field: u32, v: i32) -> &mut Self {
        self.uint(field, i64::from(v) as u64)
    }
    /// A bool field, written only when true (every bool sprout sends defaults to false).
    pub fn flag(&mut self, field: u32, on: bool) -> &mut Self {
        if on {
            self.uint(field, 1);
        }
        self
    }
    pub fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(&mut self, field: u32, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }
    pub fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A field read from a message: its number and value.
#[derive(Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one message, in order. Unknown wire types end it with an error.
pub fn fields(mut b: &[u8]) -> io::Result<Vec<(u32, Value<'_>)>> {
    fn varint(b: &mut &[u8]) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&c, rest) = b.split_first().ok_or_else(bad)?;
            *b = rest;
            v |= u64::from(c & 0x7f) << shift;
            if c & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad())
    }
    fn bad() -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, "malformed message from criu")
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let k = varint(&mut b)?;
        let field = (k >> 3) as u32;
        let v = match k & 7 {
            0 => Value::Varint(varint(&mut b)?),
            2 => {
                let n = varint(&mut b)? as usize;
                if n > b.len() {
                    return Err(bad());
                }
                let (v, rest) = b.split_at(n);
                b = rest;
                Value::Bytes(v)
            }
            1 | 5 => {
                let n = if k & 7 == 1 { 8 } else { 4 };
                if n > b.len() {
                    return Err(bad());
                }
                b = &b[n..];
                Value::Fixed
            }
            _ => return Err(bad()),
        };
        out.push((field, v));
    }
    Ok(out)
}

/// criu_resp: what sprout reads of it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resp {
    pub typ: u64,
    pub success: bool,
    /// restore.pid: the restored root task.
    pub restored_pid: Option<i32>,
    /// notify.script and notify.pid.
    pub script: Option<String>,
    pub notify_pid: Option<i32>,
    pub errno: Option<i32>,
    pub errmsg: Option<String>,
}

pub fn parse_resp(b: &[u8]) -> io::Result<Resp> {
    let mut r = Resp::default();
    let int = |v: u64| v as i64 as i32;
    for (f, v) in fields(b)? {
        match (f, v) {
            (1, Value::Varint(v)) => r.typ = v,
            (2, Value::Varint(v)) => r.success = v != 0,
            (4, Value::Bytes(m)) => {
                for (f, v) in fields(m)? {
                    if let (1, Value::Varint(p)) = (f, v) {
                        r.restored_pid = Some(int(p));
                    }
                }
            }
            (5, Value::Bytes(m)) => {
                for (f, v) in fields(m)? {
                    match (f, v) {
                        (1, Value::Bytes(s)) => {
                            r.script = Some(String::from_utf8_lossy(s).into_owned())
                        }
                        (2, Value::Varint(p)) => r.notify_pid = Some(int(p)),
                        _ => {}
                    }
                }
            }
            (7, Value::Varint(v)) => r.errno = Some(int(v)),
            (9, Value::Bytes(s)) => r.errmsg = Some(String::from_utf8_lossy(s).into_owned()),
            _ => {}
        }
    }
    Ok(r)
}

/// A running `criu swrk`.
pub struct Swrk {
    child: Child,
    sock: OwnedFd,
}

/// Start `criu swrk 3`: `setup` runs in the child after fork (it must not allocate unless the
/// caller is single-threaded), before the exec, and before the socket's end goes to fd 3 (so
/// a setup may still use whatever fd 3 was; its own dup2 targets must be above every fd open
/// now and above the two of the socket pair).
pub fn start(
    criu: &Path,
    mut setup: impl FnMut() -> io::Result<()> + Send + Sync + 'static,
) -> io::Result<Swrk> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into the live local array.
    sys::cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both fds were just made by socketpair and are ours alone.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let theirs_raw = theirs.as_raw_fd();
    let mut cmd = Command::new(criu);
    cmd.args(["swrk", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec: dup2 takes integers (the
    // socket end is open: `theirs` lives until spawn returns); `setup`'s own contract is the
    // caller's.
    unsafe {
        cmd.pre_exec(move || {
            // `setup` first: the fds it uses (a mount tree, the sources of its dups) may have
            // any number, 3 included; the socket end's number is below every dup target.
            setup()?;
            sys::cvt(libc::dup2(theirs_raw, 3))?;
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(theirs);
    Ok(Swrk { child, sock: ours })
}

impl Swrk {
    fn send(&self, m: &Msg) -> io::Result<()> {
        let b = m.as_bytes();
        // SAFETY: write reads b.len() bytes of the live slice `b`; one write is one record.
        let n = unsafe { libc::write(self.sock.as_raw_fd(), b.as_ptr().cast(), b.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn recv(&self) -> io::Result<(Resp, Option<OwnedFd>)> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sys::recv_fd(self.sock.as_raw_fd(), &mut buf) {
                Ok((0, _)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "criu exited without an answer",
                    ))
                }
                Ok((n, fd)) => return Ok((parse_resp(&buf[..n])?, fd)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Send `req` and answer each notification with `on_notify` (its error ends the call; criu
    /// is told it failed) until the final response, which is returned with criu's exit.
    pub fn call(
        mut self,
        req: &Msg,
        mut on_notify: impl FnMut(&str, Option<i32>, Option<OwnedFd>) -> Result<()>,
    ) -> Result<(Resp, std::process::ExitStatus)> {
        let r = (|| -> Result<Resp> {
            self.send(req)
                .map_err(|e| Error::os("sending the request to criu", e))?;
            loop {
                let (resp, fd) = self
                    .recv()
                    .map_err(|e| Error::os("reading criu's answer", e))?;
                if resp.typ != NOTIFY {
                    return Ok(resp);
                }
                let script = resp.script.clone().unwrap_or_default();
                let ok = on_notify(&script, resp.notify_pid, fd);
                let mut ack = Msg::default();
                ack.uint(1, NOTIFY).flag(3, ok.is_ok());
                let sent = self.send(&ack);
                ok?;
                sent.map_err(|e| Error::os("answering criu", e))?;
            }
        })();
        // The end of our side: criu (a pre-dump's waits for more requests) exits on EOF.
        // SAFETY: shutdown takes an fd we own and an integer.
        unsafe { libc::shutdown(self.sock.as_raw_fd(), libc::SHUT_RDWR) };
        let status = self
            .child
            .wait()
            .map_err(|e| Error::os("waiting for criu", e))?;
        r.map(|resp| (resp, status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_as_protobuf_does() {
        let mut m = Msg::default();
        m.uint(1, 2)
            .flag(3, true)
            .flag(4, false)
            .str(10, "dump.log");
        assert_eq!(
            m.as_bytes(),
            [0x08, 2, 0x18, 1, 0x52, 8, b'd', b'u', b'm', b'p', b'.', b'l', b'o', b'g']
        );
        let mut big = Msg::default();
        big.uint(1, 300).int(2, -1);
        assert_eq!(
            big.as_bytes(),
            [0x08, 0xac, 0x02, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        // Field numbers above 15 take a two-byte key.
        let mut k = Msg::default();
        k.flag(opt::ORPHAN_PTS_MASTER, true);
        assert_eq!(k.as_bytes(), [0x90, 0x03, 1]);
    }

    #[test]
    fn parses_responses() {
        let mut notify = Msg::default();
        notify.str(1, "orphan-pts-master").int(2, 42);
        let mut r = Msg::default();
        r.uint(1, NOTIFY).flag(2, true).msg(5, &notify);
        let p = parse_resp(r.as_bytes()).unwrap();
        assert_eq!(p.typ, NOTIFY);
        assert!(p.success);
        assert_eq!(p.script.as_deref(), Some("orphan-pts-master"));
        assert_eq!(p.notify_pid, Some(42));

        let mut rest = Msg::default();
        rest.int(1, 1234);
        let mut r = Msg::default();
        r.uint(1, RESTORE)
            .uint(2, 0)
            .msg(4, &rest)
            .int(7, 2)
            .str(9, "no images");
        let p = parse_resp(r.as_bytes()).unwrap();
        assert_eq!(p.restored_pid, Some(1234));
        assert!(!p.success);
        assert_eq!(p.errno, Some(2));
        assert_eq!(p.errmsg.as_deref(), Some("no images"));
        // Truncated input is an error, not a panic.
        assert!(parse_resp(&r.as_bytes()[..r.as_bytes().len() - 3]).is_err());
        assert!(fields(&[0x08]).is_err());
    }
}
