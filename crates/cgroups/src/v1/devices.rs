//! v1 `devices`: devices.allow / devices.deny, one rule per write(2).
//!
//! The rules are an allowlist (runtime-spec `linux.resources.devices`, as on v2, where the
//! device program denies what no rule allows): unless the first rule sets the whole mode
//! itself (type `a`: the kernel clears the list and takes the rule's verdict as the default),
//! `a` goes to devices.deny first. A new v1 devices cgroup inherits its parent's list, on most
//! hosts "a *:* rwm", and allow rules alone would only add to that (runc's rules emulator
//! starts from deny-all the same way).

use oci_spec::runtime::{LinuxDeviceType, LinuxResources};

use super::dir;
use crate::resources as r;
use crate::{Manager, Result};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(list) = res.devices().as_deref() else {
        return Ok(());
    };
    if list.is_empty() {
        return Ok(());
    }
    let mut rules = Vec::with_capacity(list.len() + 1);
    let sets_mode = list[0].typ().unwrap_or(LinuxDeviceType::A) == LinuxDeviceType::A;
    if !sets_mode {
        rules.push((false, "a".to_string(), 0));
    }
    for (i, d) in list.iter().enumerate() {
        rules.push((d.allow(), r::device_rule(i, d)?, i));
    }
    let d = dir(m, "devices", "devices")?;
    // devices.allow / devices.deny take one rule per write(2): each file is opened once and
    // written once per rule (runc's list makes ~13 rules per container: 2 opens, not 13).
    let mut files: [Option<std::fs::File>; 2] = [None, None];
    for (allow, rule, i) in rules {
        let file = if allow {
            "devices.allow"
        } else {
            "devices.deny"
        };
        let field = format!("devices[{i}]");
        let slot = &mut files[usize::from(allow)];
        if slot.is_none() {
            let p = d.join(file);
            match std::fs::OpenOptions::new().write(true).open(&p) {
                Ok(f) => *slot = Some(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(crate::resources::missing(d, file, &field, false))
                }
                Err(e) => {
                    return Err(r::invalid(
                        &field,
                        format_args!("opening {}: {e}", p.display()),
                    ))
                }
            }
        }
        let f = slot.as_mut().expect("opened above");
        match std::io::Write::write(f, rule.as_bytes()) {
            Ok(n) if n == rule.len() => {}
            Ok(_) => {
                return Err(r::invalid(
                    &field,
                    format_args!("short write of {rule:?} to {}", d.join(file).display()),
                ))
            }
            Err(e) => {
                return Err(r::invalid(
                    &field,
                    format_args!("writing {rule:?} to {}: {e}", d.join(file).display()),
                ))
            }
        }
    }
    Ok(())
}
