//! runtime-spec 1.3 `linux.netDevices`: host network interfaces moved into the container's
//! network namespace (optionally renamed), over a NETLINK_ROUTE socket: the link is set down,
//! then one RTM_NEWLINK with IFLA_NET_NS_FD and IFLA_IFNAME moves and renames it at once (as
//! runc's devChangeNetNamespace); its permanent global addresses are added again inside (the
//! kernel drops them on the move) and it is set up there, as runc does. If create fails later, the namespace goes away with the init
//! and the kernel gives physical devices back to the host's namespace (virtual ones are
//! destroyed), as the spec's namespace lifecycle says.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use oci_spec::runtime::LinuxNetDevice;

use crate::bail;
use crate::error::{Error, Result};

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFLA_IFNAME: u16 = 3;
const IFLA_NET_NS_FD: u16 = 28;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_BROADCAST: u16 = 4;
const IFA_FLAGS: u16 = 8;
const IFA_F_PERMANENT: u32 = 0x80;
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
    if !rustix::process::geteuid().is_root() {
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
    let host = Netlink::open().map_err(|e| Error::os("linux.netDevices: netlink socket", e))?;
    let inside = Netlink::open_in(&ns)
        .map_err(|e| Error::os("linux.netDevices: netlink socket in the container", e))?;
    // Sorted: errors and moves in a stable order.
    let mut list: Vec<_> = devs.iter().collect();
    list.sort_by(|a, b| a.0.cmp(b.0));
    for (hname, d) in list {
        let name = d
            .name()
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(hname);
        let what = format!("linux.netDevices: {hname:?}");
        let chost = std::ffi::CString::new(hname.as_str()).expect("validated name");
        // SAFETY: if_nametoindex reads the NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(chost.as_ptr()) };
        if index == 0 {
            bail!("{what}: no such network device on the host");
        }
        // Down first: nothing on the host keeps using it during the move (runc).
        host.link(index, &[], Some(false))
            .map_err(|e| Error::os(format!("{what}: setting it down"), e))?;
        let addrs = host
            .global_addresses(index)
            .map_err(|e| Error::os(format!("{what}: reading its addresses"), e))?;
        let mut ifname = name.as_bytes().to_vec();
        ifname.push(0);
        let fd = (ns.as_raw_fd() as u32).to_ne_bytes();
        host.link(
            index,
            &[(IFLA_IFNAME, &ifname), (IFLA_NET_NS_FD, &fd)],
            None,
        )
        .map_err(|e| {
            Error::os(
                format!("{what}: moving it into the container as {name:?}"),
                e,
            )
        })?;
        let new_index = inside
            .index_of(name)
            .map_err(|e| Error::os(format!("{what}: finding {name:?} in the container"), e))?;
        for a in &addrs {
            inside
                .add_address(new_index, a)
                .map_err(|e| Error::os(format!("{what}: adding address {} inside", a.show()), e))?;
        }
        inside
            .link(new_index, &[], Some(true))
            .map_err(|e| Error::os(format!("{what}: setting {name:?} up inside"), e))?;
    }
    Ok(())
}

/// An address of a link: family, prefix length, the address's bytes.
struct Addr {
    family: u8,
    prefix: u8,
    addr: Vec<u8>,
}

impl Addr {
    fn show(&self) -> String {
        let ip: std::net::IpAddr = match self.addr.len() {
            4 => <[u8; 4]>::try_from(&self.addr[..]).unwrap().into(),
            16 => <[u8; 16]>::try_from(&self.addr[..]).unwrap().into(),
            _ => return format!("{:?}/{}", self.addr, self.prefix),
        };
        format!("{ip}/{}", self.prefix)
    }
}

fn push_attr(m: &mut Vec<u8>, typ: u16, data: &[u8]) {
    m.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    m.extend_from_slice(&typ.to_ne_bytes());
    m.extend_from_slice(data);
    m.resize(m.len().next_multiple_of(4), 0);
}

/// The attributes in `b` (type, payload).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut v = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let typ = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            break;
        }
        v.push((typ, &b[4..len]));
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    v
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

    /// A socket in the network namespace `ns`: made by a thread that joins it (a socket stays
    /// in the namespace it was made in; the thread and its namespace end with it).
    fn open_in(ns: &std::fs::File) -> std::io::Result<Netlink> {
        let nsfd = ns.as_raw_fd();
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns on this thread only (not shared: a fresh thread).
                if unsafe { libc::setns(nsfd, libc::CLONE_NEWNET) } < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Netlink::open()
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("thread panicked")))
        })
    }

    /// Send one request; for a dump, every reply message's payload goes to `each`. Returns at
    /// the ack (NLMSG_ERROR 0) or the end of the dump.
    fn request(
        &self,
        typ: u16,
        flags: u16,
        body: &[u8],
        mut each: impl FnMut(u16, &[u8]),
    ) -> std::io::Result<()> {
        let seq = self.seq.get();
        self.seq.set(seq + 1);
        let mut m: Vec<u8> = Vec::with_capacity(16 + body.len());
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&typ.to_ne_bytes());
        m.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
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
                std::ptr::from_ref::<libc::sockaddr_nl>(&addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 32768];
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
            let n = n as usize;
            let mut off = 0usize;
            while off + 16 <= n {
                let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
                let mtyp = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap());
                let mseq = u32::from_ne_bytes(buf[off + 8..off + 12].try_into().unwrap());
                if len < 16 || off + len > n {
                    break;
                }
                if mseq == seq {
                    match mtyp {
                        NLMSG_ERROR if len >= 20 => {
                            let err =
                                i32::from_ne_bytes(buf[off + 16..off + 20].try_into().unwrap());
                            return if err == 0 {
                                Ok(())
                            } else {
                                Err(std::io::Error::from_raw_os_error(-err))
                            };
                        }
                        NLMSG_DONE => return Ok(()),
                        t => each(t, &buf[off + 16..off + len]),
                    }
                }
                off += len.next_multiple_of(4);
            }
        }
    }

    /// RTM_NEWLINK on link `index` with `attrs`; `up` sets or clears IFF_UP. Waits for the ack.
    fn link(&self, index: u32, attrs: &[(u16, &[u8])], up: Option<bool>) -> std::io::Result<()> {
        // ifinfomsg: family, pad, type, index, flags, change.
        let mut m = vec![libc::AF_UNSPEC as u8, 0, 0, 0];
        m.extend_from_slice(&(index as i32).to_ne_bytes());
        let flags = if up == Some(true) {
            libc::IFF_UP as u32
        } else {
            0
        };
        let change = if up.is_some() { libc::IFF_UP as u32 } else { 0 };
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&change.to_ne_bytes());
        for (typ, data) in attrs {
            push_attr(&mut m, *typ, data);
        }
        self.request(RTM_NEWLINK, NLM_F_ACK, &m, |_, _| {})
    }

    /// The permanent addresses of global scope of link `index` (runc moves only those).
    fn global_addresses(&self, index: u32) -> std::io::Result<Vec<Addr>> {
        // ifaddrmsg: family, prefixlen, flags, scope, index.
        let mut m = vec![libc::AF_UNSPEC as u8, 0, 0, 0];
        m.extend_from_slice(&index.to_ne_bytes());
        let mut out = Vec::new();
        self.request(RTM_GETADDR, NLM_F_DUMP, &m, |typ, p| {
            if typ != RTM_NEWADDR || p.len() < 8 {
                return;
            }
            let (family, prefix, scope) = (p[0], p[1], p[3]);
            let idx = u32::from_ne_bytes(p[4..8].try_into().unwrap());
            let mut flags = u32::from(p[2]);
            let mut local = None;
            let mut address = None;
            for (t, d) in attrs(&p[8..]) {
                match t {
                    IFA_FLAGS if d.len() == 4 => flags = u32::from_ne_bytes(d.try_into().unwrap()),
                    IFA_LOCAL => local = Some(d.to_vec()),
                    IFA_ADDRESS => address = Some(d.to_vec()),
                    _ => {}
                }
            }
            if idx != index || scope != 0 || flags & IFA_F_PERMANENT == 0 {
                return;
            }
            if let Some(addr) = local.or(address) {
                out.push(Addr {
                    family,
                    prefix,
                    addr,
                });
            }
        })?;
        Ok(out)
    }

    /// The index of link `name` in this socket's namespace.
    fn index_of(&self, name: &str) -> std::io::Result<u32> {
        let mut m = vec![libc::AF_UNSPEC as u8, 0, 0, 0];
        m.extend_from_slice(&0i32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        let mut ifname = name.as_bytes().to_vec();
        ifname.push(0);
        push_attr(&mut m, IFLA_IFNAME, &ifname);
        let mut index = None;
        // RTM_GETLINK (18) by name: one RTM_NEWLINK back (it carries the index), then the ack.
        self.request(18, NLM_F_ACK, &m, |typ, p| {
            if typ == RTM_NEWLINK && p.len() >= 8 {
                index = Some(i32::from_ne_bytes(p[4..8].try_into().unwrap()) as u32);
            }
        })?;
        index.ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))
    }

    /// RTM_NEWADDR of `a` on link `index` (IPv4: with its broadcast address, as runc's netlink).
    fn add_address(&self, index: u32, a: &Addr) -> std::io::Result<()> {
        let mut m = vec![a.family, a.prefix, 0, 0];
        m.extend_from_slice(&index.to_ne_bytes());
        push_attr(&mut m, IFA_LOCAL, &a.addr);
        push_attr(&mut m, IFA_ADDRESS, &a.addr);
        if a.addr.len() == 4 && a.prefix < 31 {
            let ip = u32::from_be_bytes(a.addr[..4].try_into().unwrap());
            let bcast = ip | (u32::MAX >> a.prefix);
            push_attr(&mut m, IFA_BROADCAST, &bcast.to_be_bytes());
        }
        self.request(
            RTM_NEWADDR,
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            &m,
            |_, _| {},
        )
    }
}
