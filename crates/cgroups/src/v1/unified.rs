//! `unified` keys on a v1 host: written to the cgroup2 leaf on a hybrid host (for the
//! controllers cgroup v2 has there), refused on a pure v1 host.

use std::collections::HashMap;
use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::resources::invalid;
use crate::{Layout, Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(x) = res.unified().as_ref().filter(|x| !x.is_empty()) else {
        return Ok(());
    };
    match (m.layout(), m.unified_hier()) {
        (Layout::Hybrid, Some(u)) => {
            hybrid_unified_keys(m, &u.dir, x)?;
            crate::v2::unified::write(&u.dir, x)
        }
        // runc's words (ErrV1NoUnified).
        _ => Err(invalid(
            "unified",
            "invalid configuration: cannot use unified on cgroup v1 (this host has no cgroup v2 \
             hierarchy)",
        )),
    }
}

/// On a hybrid host a `unified` key reaches only the controllers of the cgroup v2 hierarchy: one
/// whose controller is bound to a v1 hierarchy (memory.min with the v1 memory controller) cannot
/// be applied. Refused before any unified key is written, with runc's "invalid configuration"
/// words.
fn hybrid_unified_keys(m: &Manager, dir: &Path, map: &HashMap<String, String>) -> Result<()> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        let ctrl = k.split('.').next().unwrap_or("");
        let v1 = match ctrl {
            "io" => "blkio",
            c => c,
        };
        if ctrl != "cgroup" && m.v1_hier(v1).is_some() && !dir.join(k).exists() {
            return Err(invalid(
                &format!("unified.{k}"),
                format_args!(
                    "invalid configuration: the {v1} controller is on cgroup v1 on this hybrid \
                     host; unified keys reach only cgroup v2 controllers"
                ),
            ));
        }
    }
    Ok(())
}
