//! The cache key covers every field of the profile (and nothing else varies it).

mod common;

use std::collections::HashMap;

use common::profile;
use serde_json::{json, Value};

fn base() -> Value {
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 38,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
        "flags": ["SECCOMP_FILTER_FLAG_LOG"],
        "listenerPath": "/run/agent.sock",
        "listenerMetadata": "meta",
        "syscalls": [
            {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 42},
            {"names": ["fcntl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 44, "args": [
                {"index": 1, "value": 1, "op": "SCMP_CMP_EQ"},
                {"index": 2, "value": 3, "op": "SCMP_CMP_GT"}
            ]},
            {"names": ["umask"], "action": "SCMP_ACT_NOTIFY", "args": [
                {"index": 0, "value": 7, "valueTwo": 2, "op": "SCMP_CMP_MASKED_EQ"}
            ]}
        ]
    })
}

fn key_of(v: &Value) -> String {
    sprout_seccomp::key(&profile(v.clone()))
}

type Mutation = (&'static str, fn(&mut Value));

fn mutations() -> Vec<Mutation> {
    vec![
        ("defaultAction", |v| {
            v["defaultAction"] = json!("SCMP_ACT_KILL_PROCESS")
        }),
        ("defaultAction kill vs kill_thread", |v| {
            v["defaultAction"] = json!("SCMP_ACT_KILL")
        }),
        ("defaultErrnoRet value", |v| {
            v["defaultErrnoRet"] = json!(39)
        }),
        ("defaultErrnoRet absent", |v| {
            v.as_object_mut().unwrap().remove("defaultErrnoRet");
        }),
        ("architectures one less", |v| {
            v["architectures"] = json!(["SCMP_ARCH_X86_64"])
        }),
        ("architectures order", |v| {
            v["architectures"] = json!(["SCMP_ARCH_X86", "SCMP_ARCH_X86_64"])
        }),
        ("architectures absent", |v| {
            v.as_object_mut().unwrap().remove("architectures");
        }),
        ("architectures empty", |v| v["architectures"] = json!([])),
        ("flags added", |v| {
            v["flags"] = json!(["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW"])
        }),
        ("flags other", |v| {
            v["flags"] = json!(["SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"])
        }),
        ("flags tsync", |v| {
            v["flags"] = json!(["SECCOMP_FILTER_FLAG_TSYNC"])
        }),
        ("flags absent", |v| {
            v.as_object_mut().unwrap().remove("flags");
        }),
        ("flags empty", |v| v["flags"] = json!([])),
        ("listenerPath", |v| {
            v["listenerPath"] = json!("/run/other.sock")
        }),
        ("listenerPath absent", |v| {
            v.as_object_mut().unwrap().remove("listenerPath");
        }),
        ("listenerMetadata", |v| {
            v["listenerMetadata"] = json!("metb")
        }),
        ("listenerMetadata absent", |v| {
            v.as_object_mut().unwrap().remove("listenerMetadata");
        }),
        ("name added", |v| {
            v["syscalls"][0]["names"] = json!(["read", "write", "close"])
        }),
        ("name changed", |v| {
            v["syscalls"][0]["names"] = json!(["read", "writev"])
        }),
        ("names order", |v| {
            v["syscalls"][0]["names"] = json!(["write", "read"])
        }),
        ("names split across boundary", |v| {
            v["syscalls"][0]["names"] = json!(["readwrite"])
        }),
        ("rule action", |v| {
            v["syscalls"][0]["action"] = json!("SCMP_ACT_LOG")
        }),
        ("rule errnoRet", |v| {
            v["syscalls"][1]["errnoRet"] = json!(43)
        }),
        ("rule errnoRet absent", |v| {
            v["syscalls"][1].as_object_mut().unwrap().remove("errnoRet");
        }),
        ("rule errnoRet on allow", |v| {
            v["syscalls"][0]["errnoRet"] = json!(1)
        }),
        ("rule action trace", |v| {
            v["syscalls"][1]["action"] = json!("SCMP_ACT_TRACE")
        }),
        ("arg index", |v| {
            v["syscalls"][2]["args"][0]["index"] = json!(0)
        }),
        ("arg value", |v| {
            v["syscalls"][2]["args"][0]["value"] = json!(2)
        }),
        ("arg valueTwo added", |v| {
            v["syscalls"][2]["args"][0]["valueTwo"] = json!(0)
        }),
        ("arg valueTwo", |v| {
            v["syscalls"][3]["args"][0]["valueTwo"] = json!(3)
        }),
        ("arg valueTwo absent", |v| {
            v["syscalls"][3]["args"][0]
                .as_object_mut()
                .unwrap()
                .remove("valueTwo");
        }),
        ("arg op", |v| {
            v["syscalls"][2]["args"][0]["op"] = json!("SCMP_CMP_NE")
        }),
        ("arg order", |v| {
            let args = v["syscalls"][2]["args"].as_array_mut().unwrap();
            args.swap(0, 1);
        }),
        ("arg removed", |v| {
            v["syscalls"][2]["args"].as_array_mut().unwrap().pop();
        }),
        ("args absent", |v| {
            v["syscalls"][2].as_object_mut().unwrap().remove("args");
        }),
        ("args empty", |v| v["syscalls"][2]["args"] = json!([])),
        ("rule order", |v| {
            v["syscalls"].as_array_mut().unwrap().swap(0, 1)
        }),
        ("rule removed", |v| {
            v["syscalls"].as_array_mut().unwrap().remove(0);
        }),
        ("rule duplicated", |v| {
            let r = v["syscalls"][0].clone();
            v["syscalls"].as_array_mut().unwrap().push(r);
        }),
        ("syscalls absent", |v| {
            v.as_object_mut().unwrap().remove("syscalls");
        }),
        ("syscalls empty", |v| v["syscalls"] = json!([])),
    ]
}

#[test]
fn key_is_deterministic_and_hex() {
    let k = key_of(&base());
    assert_eq!(k.len(), 64);
    assert!(k
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_eq!(k, key_of(&base()));
    // JSON object member order does not matter: the key is over the parsed profile.
    let reordered: Value = serde_json::from_str(
        r#"{"syscalls": [
            {"action": "SCMP_ACT_ALLOW", "names": ["read", "write"]},
            {"errnoRet": 42, "action": "SCMP_ACT_ERRNO", "names": ["getppid"]},
            {"args": [{"op": "SCMP_CMP_EQ", "value": 1, "index": 1},
                      {"value": 3, "index": 2, "op": "SCMP_CMP_GT"}],
             "names": ["fcntl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 44},
            {"names": ["umask"], "action": "SCMP_ACT_NOTIFY",
             "args": [{"valueTwo": 2, "op": "SCMP_CMP_MASKED_EQ", "index": 0, "value": 7}]}],
          "listenerMetadata": "meta", "listenerPath": "/run/agent.sock",
          "flags": ["SECCOMP_FILTER_FLAG_LOG"],
          "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
          "defaultErrnoRet": 38, "defaultAction": "SCMP_ACT_ERRNO"}"#,
    )
    .unwrap();
    assert_eq!(k, key_of(&reordered));
}

#[test]
fn every_single_field_change_changes_the_key() {
    let base_key = key_of(&base());
    let mut seen: HashMap<String, &str> = HashMap::new();
    seen.insert(base_key.clone(), "base");
    for (name, mutate) in mutations() {
        let mut v = base();
        mutate(&mut v);
        assert_ne!(v, base(), "mutation {name} changed nothing");
        let k = key_of(&v);
        if let Some(prev) = seen.insert(k, name) {
            panic!("mutation {name:?} has the same key as {prev:?}");
        }
    }
}

#[test]
fn errno_ret_changes_key_and_program() {
    // crun's cache forgets errnoRet: a stale filter with the old errno gets reused. Not here.
    let mk = |e: u32, d: u32| {
        profile(json!({
            "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": d,
            "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": e},
                         {"names": ["exit_group", "read"], "action": "SCMP_ACT_ALLOW"}]
        }))
    };
    let dir = common::TempDir::new("errno");
    let (a, sa) = sprout_seccomp::prepare(&mk(42, 38), Some(dir.path())).unwrap();
    assert_eq!(sa, sprout_seccomp::Source::Compiled);
    let (b, sb) = sprout_seccomp::prepare(&mk(43, 38), Some(dir.path())).unwrap();
    assert_eq!(
        sb,
        sprout_seccomp::Source::Compiled,
        "errnoRet change must miss"
    );
    assert_ne!(a.bpf_bytes(), b.bpf_bytes());
    let (c, sc) = sprout_seccomp::prepare(&mk(42, 39), Some(dir.path())).unwrap();
    assert_eq!(
        sc,
        sprout_seccomp::Source::Compiled,
        "defaultErrnoRet change must miss"
    );
    assert_ne!(a.bpf_bytes(), c.bpf_bytes());
    let (a2, sa2) = sprout_seccomp::prepare(&mk(42, 38), Some(dir.path())).unwrap();
    assert_eq!(sa2, sprout_seccomp::Source::Cache);
    assert_eq!(a.bpf_bytes(), a2.bpf_bytes());
}
