//! The runtime-spec's `unified`: raw cgroup v2 interface files, written as given (in key order;
//! a value of several lines one write per line, as the kernel parses one entry per write).

use std::collections::HashMap;
use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::resources::{invalid, missing, set};
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
        let field = format!("unified.{k}");
        let v = &map[k];
        if v.trim_end_matches('\n').contains('\n') {
            set_by_line(d, k, v, &field)?;
        } else {
            set(d, k, v, &field, true)?;
        }
    }
    Ok(())
}

/// A value of several lines (`io.max` for two devices: "8:0 riops=333\n8:16 riops=555\n"),
/// one write(2) per line on one open file: the kernel's `io.max`, `io.weight` and the like
/// parse one entry per write and would refuse the whole, or take the first line only. runc
/// writes such values line by line too.
fn set_by_line(d: &Path, file: &str, value: &str, field: &str) -> Result<()> {
    use std::io::Write;
    let p = d.join(file);
    let mut f = match std::fs::OpenOptions::new().write(true).open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(missing(d, file, field, true))
        }
        Err(e) => return Err(invalid(field, format_args!("opening {}: {e}", p.display()))),
    };
    for line in value.split_inclusive('\n') {
        f.write_all(line.as_bytes()).map_err(|e| {
            invalid(
                field,
                format_args!("writing {line:?} to {}: {e}", p.display()),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{files, read, TempDir};

    /// Each line in order on one open file (a plain file here keeps them all; the kernel's
    /// files take one entry per write, checked in the VM by the integration test
    /// `unified_value_of_several_lines_is_written_line_by_line`); a missing file names the key.
    #[test]
    fn several_lines_go_in_order_and_a_missing_file_names_the_key() {
        let t = TempDir::new("unilines");
        let d = t.path().join("cg");
        files(&d, &[("io.max", ""), ("io.weight", "")]);
        let mut m = HashMap::new();
        m.insert(
            "io.max".to_string(),
            "8:0 riops=1\n8:16 riops=2\n".to_string(),
        );
        m.insert("io.weight".to_string(), "default 100".to_string());
        write(&d, &m).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("io.max")).unwrap(),
            "8:0 riops=1\n8:16 riops=2\n"
        );
        assert_eq!(read(d.join("io.weight")), "default 100");
        let mut m = HashMap::new();
        m.insert(
            "io.latency".to_string(),
            "8:0 target=1\n8:16 target=2".to_string(),
        );
        let e = write(&d, &m).unwrap_err().to_string();
        assert!(e.contains("unified.io.latency"), "{e}");
    }
}
