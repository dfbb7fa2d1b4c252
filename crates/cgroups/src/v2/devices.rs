//! v2 `devices`: cgroup v2 enforces device access only through an eBPF program
//! (BPF_PROG_TYPE_CGROUP_DEVICE) attached to the cgroup ([`crate::ebpf`]). The rules are checked
//! before any resource is written ([`validate`]) and the program is attached after every other
//! resource ([`apply`], last): a failure there leaves the limits written, as runc does.

use oci_spec::runtime::LinuxResources;

use crate::{Hier, Manager, Result};

pub(super) fn validate(res: &LinuxResources) -> Result<()> {
    if let Some(x) = res.devices() {
        crate::ebpf::parse_rules(x)?;
    }
    Ok(())
}

pub(super) fn apply(m: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    // Rootless: no device program (bpf(2) needs CAP_BPF/CAP_SYS_ADMIN in the initial user
    // namespace, and BPF_PROG_QUERY fails before it), as runc and crun; such a container
    // cannot mknod devices or reach host device nodes it was not given anyway.
    if let Some(x) = res.devices().as_ref().filter(|_| !m.rootless) {
        crate::ebpf::attach_device_filter(&u.dir, x)?;
    }
    Ok(())
}
