//! The device rules every container gets after its own (runc's list): one place for the
//! runtime's create and restore, the device filter's tests and its load-time example.

use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxResources};

/// The character devices a container may always use: (its path in the container, major,
/// minor; `None`: every minor). A path is given where the config may list the device itself
/// (`linux.devices`); then it gets no default rule. No rule for /dev/console's 5:1: the
/// container's console is a bind of its pty (136:*).
pub const DEFAULT_DEVICES: [(&str, i64, Option<i64>); 9] = [
    ("/dev/null", 1, Some(3)),
    ("/dev/random", 1, Some(8)),
    ("/dev/full", 1, Some(7)),
    ("/dev/tty", 5, Some(0)),
    ("/dev/zero", 1, Some(5)),
    ("/dev/urandom", 1, Some(9)),
    ("", 136, None),     // /dev/pts/*
    ("", 5, Some(2)),    // /dev/ptmx
    ("", 10, Some(200)), // /dev/net/tun (kept by runc for old clients)
];

fn allow(
    t: LinuxDeviceType,
    major: Option<i64>,
    minor: Option<i64>,
    access: &str,
) -> LinuxDeviceCgroup {
    let mut r = LinuxDeviceCgroup::default();
    r.set_allow(true);
    r.set_typ(Some(t));
    r.set_major(major);
    r.set_minor(minor);
    r.set_access(Some(access.to_string()));
    r
}

/// The rules that follow a config's own: mknod of any character or block device (access
/// still needs a rule), then rwm of each of [`DEFAULT_DEVICES`] that `listed` (the config's
/// `linux.devices`) does not name by path.
pub fn default_device_rules(listed: &[LinuxDevice]) -> Vec<LinuxDeviceCgroup> {
    let mut rules = vec![
        allow(LinuxDeviceType::C, None, None, "m"),
        allow(LinuxDeviceType::B, None, None, "m"),
    ];
    for (path, major, minor) in DEFAULT_DEVICES {
        if !path.is_empty() && listed.iter().any(|d| d.path().as_os_str() == path) {
            continue;
        }
        rules.push(allow(LinuxDeviceType::C, Some(major), minor, "rwm"));
    }
    rules
}

/// `res` with [`default_device_rules`] after its `devices`, so that a leading deny-all does not
/// shadow them. The config's `linux.devices` get no rule of their own: `resources.devices`
/// decides (a deny-all denies them, as with runc), and a default device the config lists by
/// path loses its default rule too.
pub fn with_default_device_rules(res: &LinuxResources, devices: &[LinuxDevice]) -> LinuxResources {
    let mut rules = res.devices().clone().unwrap_or_default();
    rules.extend(default_device_rules(devices));
    let mut out = res.clone();
    out.set_devices(Some(rules));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(path: &str) -> LinuxDevice {
        let mut d = LinuxDevice::default();
        d.set_path(path.into());
        d
    }

    #[test]
    fn a_listed_default_device_loses_its_rule_and_the_config_rules_come_first() {
        let all = default_device_rules(&[]);
        assert_eq!(all.len(), 2 + DEFAULT_DEVICES.len());
        let fewer = default_device_rules(&[dev("/dev/null"), dev("/dev/fuse")]);
        assert_eq!(fewer.len(), all.len() - 1);
        assert!(!fewer
            .iter()
            .any(|r| r.major() == Some(1) && r.minor() == Some(3)));
        assert!(all.iter().all(|r| r.allow()));
        assert!(
            !all.iter()
                .any(|r| r.major() == Some(5) && r.minor() == Some(1)),
            "console"
        );

        let mut deny = LinuxDeviceCgroup::default();
        deny.set_allow(false);
        deny.set_access(Some("rwm".into()));
        let mut res = LinuxResources::default();
        res.set_devices(Some(vec![deny]));
        let out = with_default_device_rules(&res, &[]);
        let rules = out.devices().as_ref().unwrap();
        assert!(!rules[0].allow());
        assert_eq!(rules.len(), 1 + all.len());
    }
}
