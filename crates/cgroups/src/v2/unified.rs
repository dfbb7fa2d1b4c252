//! The runtime-spec's `unified`: raw cgroup v2 interface files, written as given (in key order).

use std::collections::HashMap;
use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::resources::{invalid, set};
use crate::{Hier, Manager, Result};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    match res.unified() {
        Some(x) => write(&u.dir, x),
        None => Ok(()),
    }
}

/// Raw cgroup v2 key/value pairs, in key order.
pub(crate) fn write(d: &Path, map: &HashMap<String, String>) -> Result<()> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in &keys {
        if k.is_empty()
            || k.contains('/')
            || k.starts_with('.')
            || matches!(
                k.as_str(),
                "cgroup.procs" | "cgroup.threads" | "cgroup.kill" | "cgroup.subtree_control"
            )
        {
            return Err(invalid(
                "unified",
                format_args!("key {k:?} is not a resource interface file"),
            ));
        }
    }
    for k in keys {
        set(d, k, &map[k], &format!("unified.{k}"), true)?;
    }
    Ok(())
}
