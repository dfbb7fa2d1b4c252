//! Keys of `linux.resources` in another case (`pagesize`, `CPU`, `Cpus`), as Go's JSON decoder
//! (and so runc) matches struct fields case-insensitively (an exact match first). oci-spec
//! matches them exactly and ignores the rest, so a hand-written `"CPU": {...}` would be dropped
//! without a word. [`normalize_resources`] renames such keys to the spec's spelling, using the
//! spec's own names per object; maps (`unified`, `rdma`) keep their keys.
//!
//! Where it runs: `update --resources` (always), and config.json when the plain parse failed
//! or left a hugepage limit's `pageSize` empty (written `pagesize`). The plain parse of a valid
//! config, the start path, does not pay for a second pass: an optional key in another case there
//! is still ignored (docs/compatibility.md).

use serde_json::Value;

/// The spec's field names of each object below `linux.resources` (runtime-spec 1.3).
fn fields(path: &str) -> &'static [&'static str] {
    match path {
        "" => &[
            "devices",
            "memory",
            "cpu",
            "pids",
            "blockIO",
            "hugepageLimits",
            "network",
            "rdma",
            "unified",
        ],
        "devices[]" => &["allow", "type", "major", "minor", "access"],
        "memory" => &[
            "limit",
            "reservation",
            "swap",
            "kernel",
            "kernelTCP",
            "swappiness",
            "disableOOMKiller",
            "useHierarchy",
            "checkBeforeUpdate",
        ],
        "cpu" => &[
            "shares",
            "quota",
            "burst",
            "period",
            "realtimeRuntime",
            "realtimePeriod",
            "cpus",
            "mems",
            "idle",
        ],
        "pids" => &["limit"],
        "blockIO" => &[
            "weight",
            "leafWeight",
            "weightDevice",
            "throttleReadBpsDevice",
            "throttleWriteBpsDevice",
            "throttleReadIOPSDevice",
            "throttleWriteIOPSDevice",
        ],
        "blockIO.weightDevice[]" => &["major", "minor", "weight", "leafWeight"],
        "blockIO.throttleReadBpsDevice[]"
        | "blockIO.throttleWriteBpsDevice[]"
        | "blockIO.throttleReadIOPSDevice[]"
        | "blockIO.throttleWriteIOPSDevice[]" => &["major", "minor", "rate"],
        "hugepageLimits[]" => &["pageSize", "limit"],
        "network" => &["classID", "priorities"],
        "network.priorities[]" => &["name", "priority"],
        _ => &[],
    }
}

/// Rename the keys of `resources` (the `linux.resources` object, or `update`'s) that match a
/// spec field only case-insensitively. Returns whether anything was renamed.
pub fn normalize_resources(resources: &mut Value) -> bool {
    walk(resources, "")
}

fn walk(v: &mut Value, path: &str) -> bool {
    match v {
        Value::Object(map) => {
            let names = fields(path);
            let mut changed = false;
            if !names.is_empty() {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    if names.contains(&k.as_str()) {
                        continue;
                    }
                    let Some(canon) = names.iter().find(|n| n.eq_ignore_ascii_case(&k)) else {
                        continue;
                    };
                    // An exact key wins, as in Go; the other spelling is then dropped.
                    if let Some(val) = map.remove(&k) {
                        map.entry(canon.to_string()).or_insert(val);
                        changed = true;
                    }
                }
            }
            for (k, child) in map.iter_mut() {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if fields(&sub).is_empty() && fields(&format!("{sub}[]")).is_empty() {
                    continue;
                }
                changed |= walk(child, &sub);
            }
            changed
        }
        Value::Array(items) => {
            let elem = format!("{path}[]");
            let mut changed = false;
            for i in items {
                changed |= walk(i, &elem);
            }
            changed
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_in_another_case_take_the_specs_spelling() {
        let mut r = json!({
            "CPU": {"Cpus": "0", "MEMS": "0", "shares": 2},
            "hugepageLimits": [{"pagesize": "2MB", "limit": 1}],
            "blockio": {"throttleReadBpsDevice": [{"MAJOR": 8, "minor": 0, "Rate": 1}]},
            "unified": {"Memory.Max": "1"},
            "memory": {"limit": 5, "LIMIT": 6}
        });
        assert!(normalize_resources(&mut r));
        assert_eq!(
            r,
            json!({
                "cpu": {"cpus": "0", "mems": "0", "shares": 2},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 1}],
                "blockIO": {"throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1}]},
                "unified": {"Memory.Max": "1"},
                "memory": {"limit": 5}
            })
        );
        let mut same = json!({"cpu": {"cpus": "0"}, "unified": {"cpu.max": "max"}});
        assert!(!normalize_resources(&mut same));
    }
}
