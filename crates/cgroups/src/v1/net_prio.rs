//! v1 `net_prio`: net_prio.ifpriomap, one line per interface (the runtime-spec's
//! `network.priorities`).

use oci_spec::runtime::LinuxResources;

use super::dir;
use crate::resources::{invalid, set};
use crate::{Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(n) = res.network() else {
        return Ok(());
    };
    let prios = n.priorities().as_deref().unwrap_or(&[]);
    if prios.is_empty() {
        return Ok(());
    }
    let d = dir(m, "net_prio", "network.priorities")?;
    for (i, p) in prios.iter().enumerate() {
        let field = format!("network.priorities[{i}]");
        if p.name().is_empty() || p.name().contains(char::is_whitespace) {
            return Err(invalid(
                &field,
                format_args!("invalid interface name {:?}", p.name()),
            ));
        }
        set(
            d,
            "net_prio.ifpriomap",
            &format!("{} {}", p.name(), p.priority()),
            &field,
            false,
        )?;
    }
    Ok(())
}
