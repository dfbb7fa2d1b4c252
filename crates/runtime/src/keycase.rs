//! Keys of `linux.resources` in another case (`pagesize`, `CPU`, `Cpus`), as Go's JSON decoder
//! (and so runc) matches struct fields case-insensitively (an exact match first). oci-spec
//! matches them exactly and ignores the rest, so a hand-written `"CPU": {...}` would be dropped
//! without a word. [`normalize_resources`] renames such keys to the spec's spelling, using the
//! spec's own names per object; maps (`unified`, `rdma`) keep their keys.
//!
//! Where it runs: `update --resources` (always), and config.json when the plain parse failed,
//! left a hugepage limit's `pageSize` empty (written `pagesize`), or [`resources_in_another_case`]
//! (a byte scan of the `resources` object, a few µs) saw such a key. A valid config in the spec's
//! spelling, the start path, does not pay for a second pass.

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

/// Whether a key of a `"resources"` object in the raw JSON matches a `linux.resources` field
/// only case-insensitively (`"CPU"`, `"Cpus"`, `"pagesize"`): then config.json takes the
/// second, case-renaming pass. Compared with the names of every object below `resources` at
/// once (a name's spelling is the same wherever it occurs); a map's key that happens to match
/// (`unified`) only costs that pass, which leaves maps as they are. Invalid JSON: `false` (the
/// parse reports it).
///
/// A plain scan, not `memchr::memmem`: memmem picks its SIMD routine at run time, and that
/// first detection runs CPUID (std_detect), which traps to the hypervisor in a VM: ~40 µs of
/// every `run` on the development host (perf, 200 starts), for a search over a few KB.
pub fn resources_in_another_case(raw: &[u8]) -> bool {
    const KEY: &[u8] = b"\"resources\"";
    let quotes = raw.iter().enumerate().filter(|&(_, &c)| c == b'"');
    quotes
        .filter(|&(i, _)| raw[i..].starts_with(KEY))
        .any(|(at, _)| {
            let rest = &raw[at + KEY.len()..];
            let rest = skip_ws(rest);
            let Some(rest) = rest.strip_prefix(b":") else {
                return false;
            };
            object_has_key_in_another_case(skip_ws(rest))
        })
}

fn skip_ws(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(b.len());
    &b[n..]
}

/// Walks the object `b` starts with, to its end; true at its first key (at any depth) that
/// differs from a spec name in case only.
fn object_has_key_in_another_case(b: &[u8]) -> bool {
    if b.first() != Some(&b'{') {
        return false;
    }
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return false;
                }
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                if j >= b.len() {
                    return false;
                }
                if skip_ws(&b[j + 1..]).first() == Some(&b':') && another_case(&b[start..j]) {
                    return true;
                }
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// The objects below `linux.resources` that [`fields`] names the fields of.
const PATHS: &[&str] = &[
    "",
    "devices[]",
    "memory",
    "cpu",
    "pids",
    "blockIO",
    "blockIO.weightDevice[]",
    "blockIO.throttleReadBpsDevice[]",
    "hugepageLimits[]",
    "network",
    "network.priorities[]",
];

fn another_case(key: &[u8]) -> bool {
    // Compared with the names of every object at once: a name's spelling is the same
    // wherever it occurs. (The throttle lists' names are throttleReadBpsDevice[]'s.)
    PATHS.iter().flat_map(|p| fields(p)).any(|f| {
        f.len() == key.len() && f.as_bytes() != key && f.as_bytes().eq_ignore_ascii_case(key)
    })
}

/// Rename the keys of `resources` (the `linux.resources` object, or `update`'s) that match a
/// spec field only case-insensitively. Returns whether anything was renamed.
pub fn normalize_resources(resources: &mut Value) -> bool {
    walk(resources, "")
}

/// `other`'s members into `into` where both are objects, recursively; elsewhere `into` stays.
fn merge(into: &mut Value, other: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, other) {
        for (k, v) in b {
            match a.get_mut(&k) {
                Some(x) => merge(x, v),
                None => {
                    a.insert(k, v);
                }
            }
        }
    }
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
                    // Both spellings: Go decodes each into the same field, so two objects
                    // merge (runc's update.bats has `cpu` with the quota and `CPU` with the
                    // cpus); where both set one value the exact key's is kept (Go keeps the
                    // later one in the file, whose order this map does not hold).
                    if let Some(val) = map.remove(&k) {
                        match map.get_mut(*canon) {
                            Some(exact) => merge(exact, val),
                            None => {
                                map.insert(canon.to_string(), val);
                            }
                        }
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
            "memory": {"limit": 5, "LIMIT": 6},
            "pids": {"limit": 1},
            "PIDS": {"Limit": 2}
        });
        assert!(normalize_resources(&mut r));
        assert_eq!(
            r,
            json!({
                "cpu": {"cpus": "0", "mems": "0", "shares": 2},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 1}],
                "blockIO": {"throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1}]},
                "unified": {"Memory.Max": "1"},
                "memory": {"limit": 5},
                "pids": {"limit": 1}
            })
        );
        // runc's update.bats: `cpu` from the setup, `CPU` from the test: one cpu object.
        let mut both =
            json!({"cpu": {"shares": 100, "quota": 500000}, "CPU": {"Cpus": "0", "Mems": "0"}});
        assert!(normalize_resources(&mut both));
        assert_eq!(
            both,
            json!({"cpu": {"shares": 100, "quota": 500000, "cpus": "0", "mems": "0"}})
        );
        let mut same = json!({"cpu": {"cpus": "0"}, "unified": {"cpu.max": "max"}});
        assert!(!normalize_resources(&mut same));
    }

    #[test]
    fn the_scan_sees_a_key_in_another_case_and_only_that() {
        assert!(PATHS.iter().all(|p| !fields(p).is_empty()));
        let yes: &[&str] = &[
            r#"{"linux":{"resources":{"CPU":{"cpus":"0"}}}}"#,
            r#"{"linux":{"resources" : {"cpu":{"Cpus":"0"}}}}"#,
            r#"{"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}],"hugepageLimits":[{"pagesize":"2MB","limit":1}]}}}"#,
            r#"{"linux":{"resources":{"blockio":{}}}}"#,
        ];
        for j in yes {
            assert!(resources_in_another_case(j.as_bytes()), "{j}");
        }
        let no: &[&str] = &[
            r#"{"linux":{"resources":{"cpu":{"cpus":"0","mems":"0"},"unified":{"memory.max":"1"}}}}"#,
            // A value, a string with an escaped quote, a key after the object's end.
            r#"{"linux":{"resources":{"devices":[{"type":"CPU","access":"a\"Cpus\":"}]}},"CPU":1}"#,
            r#"{"annotations":{"resources":"CPU"},"process":{"args":["Cpus"]}}"#,
            r#"{"linux":{"resources":{"#,
            "",
        ];
        for j in no {
            assert!(!resources_in_another_case(j.as_bytes()), "{j}");
        }
        // The scan and the second pass agree: config.json with `"CPU"` gets its cpus.
        let raw = br#"{"ociVersion":"1.0.0","root":{"path":"rootfs"},"linux":{"resources":{"CPU":{"Cpus":"0","Mems":"0"}}}}"#;
        let spec = crate::config::parse_spec(raw, "config.json").unwrap();
        let cpu = spec
            .linux()
            .as_ref()
            .unwrap()
            .resources()
            .as_ref()
            .unwrap()
            .cpu()
            .clone();
        assert_eq!(cpu.unwrap().cpus().as_deref(), Some("0"));
    }
}
