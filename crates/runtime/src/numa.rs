//! runtime-spec 1.3: `linux.memoryPolicy` (set_mempolicy(2) in the container's processes before
//! their execve) and `process.execCPUAffinity` (sched_setaffinity(2) of an `exec`'d process).
//! Semantics as runc 1.5's: the list format, the per-mode node counts and the error cases.

use oci_spec::runtime::{
    ExecCPUAffinity, LinuxMemoryPolicy, MemoryPolicyFlagType, MemoryPolicyModeType,
};

use crate::bail_field;
use crate::error::{Error, Result};

/// The highest CPU / node id a list may name (runc's MaxCPU): a sanity limit against a bogus
/// input allocating a huge mask.
pub const MAX_ID: usize = 64 * 1024;

const WORD_BITS: usize = libc::c_ulong::BITS as usize;

/// The spec's memory policy modes and flags, sorted (as `features` lists them).
pub const MODES: [&str; 7] = [
    "MPOL_BIND",
    "MPOL_DEFAULT",
    "MPOL_INTERLEAVE",
    "MPOL_LOCAL",
    "MPOL_PREFERRED",
    "MPOL_PREFERRED_MANY",
    "MPOL_WEIGHTED_INTERLEAVE",
];
pub const FLAGS: [&str; 3] = [
    "MPOL_F_NUMA_BALANCING",
    "MPOL_F_RELATIVE_NODES",
    "MPOL_F_STATIC_NODES",
];

/// A list in the kernel's list format ("0-3,5,7-9"; spaces around elements and empty elements
/// are allowed, as runc's) as a bit mask. An empty string is `None`; a string with no members is
/// an error. `field` names the field in errors.
pub fn parse_list(s: &str, field: &str) -> Result<Option<Vec<libc::c_ulong>>> {
    if s.is_empty() {
        return Ok(None);
    }
    let id = |v: &str| -> Result<usize> {
        let n: usize = v
            .parse()
            .map_err(|_| Error::field(field, format!("{s:?}: {v:?} is not a number")))?;
        if n > MAX_ID {
            bail_field!(
                field,
                "{s:?}: values larger than {MAX_ID} are not supported"
            );
        }
        Ok(n)
    };
    let mut ranges = Vec::new();
    for r in s.split(',') {
        let r = r.trim();
        if r.is_empty() {
            continue;
        }
        let (a, b) = match r.split_once('-') {
            Some((a, b)) => (id(a)?, id(b)?),
            None => (id(r)?, id(r)?),
        };
        if a > b {
            bail_field!(field, "{s:?}: invalid range {r:?}");
        }
        ranges.push((a, b));
    }
    let Some(max) = ranges.iter().map(|r| r.1).max() else {
        bail_field!(field, "{s:?}: no members in the list");
    };
    let mut mask = vec![0 as libc::c_ulong; max / WORD_BITS + 1];
    for (a, b) in ranges {
        for i in a..=b {
            mask[i / WORD_BITS] |= 1 << (i % WORD_BITS);
        }
    }
    Ok(Some(mask))
}

fn count(mask: &Option<Vec<libc::c_ulong>>) -> u32 {
    mask.iter().flatten().map(|w| w.count_ones()).sum()
}

/// `linux.memoryPolicy`, checked and ready for set_mempolicy(2).
#[derive(Debug, Clone)]
pub struct MemPolicy {
    /// The mode with its flags or'ed in.
    mode: libc::c_int,
    nodes: Option<Vec<libc::c_ulong>>,
}

impl MemPolicy {
    /// runc's checks: MPOL_DEFAULT and MPOL_LOCAL take no nodes; MPOL_BIND, MPOL_INTERLEAVE,
    /// MPOL_PREFERRED_MANY and MPOL_WEIGHTED_INTERLEAVE need at least one; MPOL_PREFERRED takes
    /// any number. (An unknown mode or flag fails the parse, naming the field.)
    pub fn from_spec(mp: &LinuxMemoryPolicy) -> Result<MemPolicy> {
        use MemoryPolicyModeType as M;
        // Messages carry runc's words ("invalid memory policy node", "mode requires 0 nodes but
        // got N") after the field: scripts written against runc match them.
        let nodes = parse_list(
            mp.nodes().as_deref().unwrap_or(""),
            "linux.memoryPolicy.nodes",
        )
        .map_err(|e| {
            Error::field(
                "linux.memoryPolicy.nodes",
                format!("invalid memory policy node: {}", e.message()),
            )
        })?;
        let n = count(&nodes);
        let (mode, name) = match mp.mode() {
            M::MpolDefault => (0, "MPOL_DEFAULT"),
            M::MpolPreferred => (1, "MPOL_PREFERRED"),
            M::MpolBind => (2, "MPOL_BIND"),
            M::MpolInterleave => (3, "MPOL_INTERLEAVE"),
            M::MpolLocal => (4, "MPOL_LOCAL"),
            M::MpolPreferredMany => (5, "MPOL_PREFERRED_MANY"),
            M::MpolWeightedInterleave => (6, "MPOL_WEIGHTED_INTERLEAVE"),
        };
        match mode {
            0 | 4 if n != 0 => {
                bail_field!(
                    "linux.memoryPolicy.nodes",
                    "invalid memory policy: mode {name}: mode requires 0 nodes but got {n}"
                )
            }
            2 | 3 | 5 | 6 if n == 0 => {
                bail_field!(
                    "linux.memoryPolicy.nodes",
                    "invalid memory policy: mode {name} requires at least one node"
                )
            }
            _ => {}
        }
        let mut flags = 0;
        for f in mp.flags().iter().flatten() {
            flags |= match f {
                MemoryPolicyFlagType::MpolFNumaBalancing => 1 << 13,
                MemoryPolicyFlagType::MpolFRelativeNodes => 1 << 14,
                MemoryPolicyFlagType::MpolFStaticNodes => 1 << 15,
            };
        }
        if flags & (3 << 14) == 3 << 14 {
            bail_field!(
                "linux.memoryPolicy.flags",
                "invalid memory policy flag: MPOL_F_STATIC_NODES and MPOL_F_RELATIVE_NODES exclude each other"
            );
        }
        Ok(MemPolicy {
            mode: mode | flags,
            nodes: if n == 0 { None } else { nodes },
        })
    }

    /// set_mempolicy(2) for the calling thread (inherited by its children, kept across execve).
    pub fn apply(&self) -> Result<()> {
        let (ptr, maxnode) = match &self.nodes {
            // The kernel reads maxnode - 1 bits (numactl's convention: bits + 1).
            Some(m) => (m.as_ptr(), (m.len() * WORD_BITS + 1) as libc::c_ulong),
            None => (std::ptr::null(), 0),
        };
        // SAFETY: set_mempolicy reads at most maxnode - 1 bits from `ptr`, which points into
        // `self.nodes` (len * WORD_BITS bits), or is null with maxnode 0.
        let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, self.mode, ptr, maxnode) };
        if r < 0 {
            return Err(Error::last_os("linux.memoryPolicy: set_mempolicy"));
        }
        Ok(())
    }
}

/// `process.execCPUAffinity`, checked; `None` when both lists are absent or empty.
#[derive(Debug, Clone, Default)]
pub struct CpuAffinity {
    pub initial: Option<Vec<libc::c_ulong>>,
    pub final_: Option<Vec<libc::c_ulong>>,
}

impl CpuAffinity {
    pub fn from_spec(a: Option<&ExecCPUAffinity>, field: &str) -> Result<Option<CpuAffinity>> {
        let Some(a) = a else { return Ok(None) };
        let initial = parse_list(
            a.initial().as_deref().unwrap_or(""),
            &format!("{field}.initial"),
        )?;
        let final_ = parse_list(
            a.cpu_affinity_final().as_deref().unwrap_or(""),
            &format!("{field}.final"),
        )?;
        if initial.is_none() && final_.is_none() {
            return Ok(None);
        }
        Ok(Some(CpuAffinity { initial, final_ }))
    }
}

/// sched_setaffinity(2) of `pid` (0: the calling thread).
pub fn set_affinity(pid: libc::pid_t, mask: &[libc::c_ulong]) -> std::io::Result<()> {
    // SAFETY: the kernel reads size_of_val(mask) bytes from mask.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            pid,
            std::mem::size_of_val(mask),
            mask.as_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The affinity of `pid` (0: the calling thread), as a mask.
pub fn get_affinity(pid: libc::pid_t) -> std::io::Result<Vec<libc::c_ulong>> {
    let mut mask = vec![0 as libc::c_ulong; MAX_ID / WORD_BITS];
    // SAFETY: the kernel writes at most size_of_val(mask) bytes into mask.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            pid,
            std::mem::size_of_val(&mask[..]),
            mask.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    mask.truncate((r as usize).div_ceil(std::mem::size_of::<libc::c_ulong>()));
    Ok(mask)
}

/// runc's tryResetCPUAffinity: every possible CPU (the kernel clamps the mask to its CPUs and
/// the task's cpuset), so that an `exec`'d process does not inherit the runtime's affinity.
pub fn reset_affinity(pid: libc::pid_t) {
    // Static: on every create's start path, no 8 KiB allocation per call.
    static ALL_CPUS: [libc::c_ulong; MAX_ID / WORD_BITS] = [!0; MAX_ID / WORD_BITS];
    if let Err(e) = set_affinity(pid, &ALL_CPUS) {
        crate::log::warn(&format!(
            "resetting the CPU affinity of pid {pid} failed ({e}): the process may keep the runtime's"
        ));
    }
}

/// An `exec`'d process's affinity once it is in the container's cgroups (a cpuset join resets
/// it): `final_` of process.execCPUAffinity (`field`), none given (`Some(None)`: left as it
/// is), or without execCPUAffinity every CPU, as runc (`None`).
pub fn apply_final_affinity(
    pid: libc::pid_t,
    final_: Option<Option<&[libc::c_ulong]>>,
    field: &str,
) -> Result<()> {
    match final_ {
        None => reset_affinity(pid),
        Some(None) => {}
        Some(Some(m)) => set_affinity(pid, m)
            .map_err(|e| Error::os(format!("{field}.final: sched_setaffinity"), e))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("", "f").unwrap(), None);
        assert_eq!(parse_list("0-1,3", "f").unwrap(), Some(vec![0b1011]));
        assert_eq!(parse_list(" 1 ,,64", "f").unwrap(), Some(vec![2, 1]));
        for bad in ["3-1", "x", ",", "1-", "65537"] {
            let e = parse_list(bad, "a.b").unwrap_err();
            assert!(e.message().starts_with("a.b: "), "{bad}: {}", e.message());
        }
    }
}
