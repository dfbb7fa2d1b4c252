//! Whether sprout runs rootless: as a non-root user, or as "root" inside a user namespace that
//! does not map the whole id range (rootless podman runs the runtime that way, with euid 0).
//! runc and crun decide the same way (runc: `userns.RunningInUserNS()` or euid != 0).

/// `true` when the effective uid is not 0, or when /proc/self/uid_map is not the initial
/// namespace's identity map (`0 0 4294967295`).
pub fn running_rootless() -> bool {
    if !rustix::process::geteuid().is_root() {
        return true;
    }
    match std::fs::read_to_string("/proc/self/uid_map") {
        Ok(m) => in_user_ns(&m),
        Err(_) => false,
    }
}

/// `uid_map` contents other than the initial namespace's single full-range line.
pub(crate) fn in_user_ns(uid_map: &str) -> bool {
    let mut lines = uid_map.lines().filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else {
        return true;
    };
    let f: Vec<&str> = first.split_whitespace().collect();
    !(f == ["0", "0", "4294967295"] && lines.next().is_none())
}

#[cfg(test)]
mod tests {
    use super::in_user_ns;

    #[test]
    fn initial_namespace_is_not_rootless() {
        assert!(!in_user_ns("         0          0 4294967295\n"));
    }

    #[test]
    fn partial_maps_are_user_namespaces() {
        assert!(in_user_ns("         0       1000          1\n"));
        assert!(in_user_ns("0 1000 1\n1 100000 65536\n"));
        assert!(in_user_ns("0 0 65536\n"));
        assert!(in_user_ns(""));
    }
}
