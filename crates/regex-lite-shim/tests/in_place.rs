//! The patch is in effect: oci-spec's one pattern runs on regex-lite, and regex's Unicode
//! tables are out of the build.

use oci_spec::runtime::ExecCPUAffinity;

fn parse(list: &str) -> Result<ExecCPUAffinity, serde_json::Error> {
    serde_json::from_value(serde_json::json!({ "initial": list, "final": list }))
}

#[test]
fn exec_cpu_affinity_takes_ascii_cpu_lists() {
    for ok in ["0", "0-3", "0-3,7", "1,3,5-6,60000"] {
        assert!(parse(ok).is_ok(), "{ok:?} refused");
    }
    for bad in ["", "0-", "-1", "0-x", "0,,1", " 0", "0 "] {
        assert!(parse(bad).is_err(), "{bad:?} taken");
    }
}

/// regex's `\d` is Unicode-aware and takes any decimal digit (here ARABIC-INDIC DIGIT THREE,
/// U+0663); regex-lite's is ASCII. Through the real regex this list would pass oci-spec and
/// fail only later, in the CPU list's own parse.
#[test]
fn exec_cpu_affinity_refuses_non_ascii_digits() {
    assert!(parse("\u{663}").is_err());
    assert!(parse("0-\u{663}").is_err());
}

#[test]
fn no_unicode_tables_in_the_lock_file() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"))
        .expect("the workspace's Cargo.lock");
    for name in ["regex-syntax", "regex-automata", "aho-corasick"] {
        assert!(
            !lock.contains(&format!("name = \"{name}\"")),
            "{name} is back in Cargo.lock: something depends on the full regex again"
        );
    }
    // The one `regex` in the graph is this crate (a path package: no `source` line).
    let entry = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"regex\"\n"))
        .expect("a regex package");
    assert!(
        !entry.contains("source ="),
        "regex comes from a registry: {entry}"
    );
}
