//! runtime-spec 1.3 `linux.netDevices`: host network interfaces moved into the container's
//! network namespace (optionally renamed), over a NETLINK_ROUTE socket: the link is set down,
//! then one RTM_NEWLINK with IFLA_NET_NS_FD and IFLA_IFNAME moves and renames it at once (as
//! runc's devChangeNetNamespace). If create fails later, the namespace goes away with the init
//! and the kernel gives physical devices back to the host's namespace (virtual ones are
//! destroyed), as the spec's namespace lifecycle says.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use oci_spec::runtime::LinuxNetDevice;

use crate::bail;
use crate::error::{Error, Result};

const RTM_NEWLINK: u16 = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const IFLA_IFNAME: u16 = 3;
const IFLA_NET_NS_FD: u16 = 28;
/// IFNAMSIZ less the terminating NUL.
const MAX_NAME: usize = 15;

/// The kernel's dev_valid_name (runc's devValidName, with the kernel's length limit).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && !name.contains(['/', ':'])
        && !name.chars().any(char::is_whitespace)
}

/// Checks before anything exists: a new network namespace, valid names on both sides.
pub fn validate(devs: &HashMap<String, LinuxNetDevice>, has_new_net: bool) -> Result<()> {
    if devs.is_empty() {
        return Ok(());
    }
    if !has_new_net {
        bail!("linux.netDevices: moving network devices needs a network namespace in linux.namespaces");
    }
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("linux.netDevices: moving network devices is not supported for rootless containers");
    }
    let mut names: Vec<&str> = Vec::new();
    for (host, d) in devs {
        if !valid_name(host) {
            bail!("linux.netDevices: {host:?} is not a valid network device name");
        }
        let name = d
            .name()
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(host);
        if !valid_name(name) {
            bail!("linux.netDevices.{host}.name: {name:?} is not a valid network device name");
        }
        if names.contains(&name) {
            bail!("linux.netDevices.{host}.name: {name:?} is given to two devices");
        }
        names.push(name);
    }
    Ok(())
}

/// Move every device into the network namespace of `pid` (the init, which has made or joined
/// it).
pub fn move_all(devs: &HashMap<String, LinuxNetDevice>, pid: i32) -> Result<()> {
    if devs.is_empty() {
        return Ok(());
    }
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| Error::os("linux.netDevices: the container's network namespace", e))?;
    let sock = Netlink::open().map_err(|e| Error::os("linux.netDevices: netlink socket", e))?;
    // Sorted: errors and moves in a stable order.
    let mut list: Vec<_> = devs.iter().collect();
    list.sort_by(|a, b| a.0.cmp(b.0));
    for (host, d) in list {
        let name = d
            .name()
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(host);
        let chost = std::ffi::CString::new(host.as_str()).expect("validated name");
        // SAFETY: if_nametoindex reads the NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(chost.as_ptr()) };
        if index == 0 {
            bail!("linux.netDevices: {host:?}: no such network device on the host");
        }
        // Down first: nothing on the host keeps using it during the move (runc).
        sock.newlink(index, &[], true)
            .map_err(|e| Error::os(format!("linux.netDevices: {host:?}: setting it down"), e))?;
        let mut ifname = name.as_bytes().to_vec();
        ifname.push(0);
        let fd = (ns.as_raw_fd() as u32).to_ne_bytes();
        sock.newlink(
            index,
            &[(IFLA_IFNAME, &ifname), (IFLA_NET_NS_FD, &fd)],
            false,
        )
        .map_err(|e| {
            Error::os(
                format!("linux.netDevices: moving {host:?} into the container as {name:?}"),
                e,
            )
        })?;
    }
    Ok(())
}

struct Netlink {
    fd: OwnedFd,
    seq: std::cell::Cell<u32>,
}

impl Netlink {
    fn open() -> std::io::Result<Netlink> {
        // SAFETY: socket(2) with constant arguments; the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Netlink {
            // SAFETY: a fresh fd nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            seq: std::cell::Cell::new(1),
        })
    }

    /// RTM_NEWLINK on link `index` with `attrs`; `down` clears IFF_UP. Waits for the ack.
    fn newlink(&self, index: u32, attrs: &[(u16, &[u8])], down: bool) -> std::io::Result<()> {
        let seq = self.seq.get();
        self.seq.set(seq + 1);
        let mut m: Vec<u8> = Vec::with_capacity(128);
        // nlmsghdr: len (filled in below), type, flags, seq, pid.
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        // ifinfomsg: family, pad, type, index, flags, change.
        m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&(index as i32).to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        let change = if down { libc::IFF_UP as u32 } else { 0 };
        m.extend_from_slice(&change.to_ne_bytes());
        for (typ, data) in attrs {
            let len = 4 + data.len();
            m.extend_from_slice(&(len as u16).to_ne_bytes());
            m.extend_from_slice(&typ.to_ne_bytes());
            m.extend_from_slice(data);
            m.resize(m.len().next_multiple_of(4), 0);
        }
        let total = m.len() as u32;
        m[..4].copy_from_slice(&total.to_ne_bytes());
        // SAFETY: a zeroed sockaddr_nl is the kernel's address (pid 0, no groups).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: m and addr are valid for the lengths given.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                m.as_ptr().cast(),
                m.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: buf is valid for writes of its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut off = 0usize;
            let n = n as usize;
            while off + 16 <= n {
                let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
                let typ = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap());
                let mseq = u32::from_ne_bytes(buf[off + 8..off + 12].try_into().unwrap());
                if len < 16 || off + len > n {
                    break;
                }
                if typ == NLMSG_ERROR && mseq == seq && len >= 20 {
                    let err = i32::from_ne_bytes(buf[off + 16..off + 20].try_into().unwrap());
                    return if err == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::from_raw_os_error(-err))
                    };
                }
                off += len.next_multiple_of(4);
            }
        }
    }
}
