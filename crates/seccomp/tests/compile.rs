//! Compile-time semantics: what is accepted, ignored and refused.

mod common;

use common::profile;
use serde_json::json;
use sprout_seccomp::{compile_profile, Error};

fn bytes(v: serde_json::Value) -> Vec<u8> {
    compile_profile(&profile(v)).unwrap().bpf_bytes().to_vec()
}

#[test]
fn every_action_compiles() {
    for a in [
        "SCMP_ACT_KILL",
        "SCMP_ACT_KILL_PROCESS",
        "SCMP_ACT_KILL_THREAD",
        "SCMP_ACT_TRAP",
        "SCMP_ACT_ERRNO",
        "SCMP_ACT_TRACE",
        "SCMP_ACT_ALLOW",
        "SCMP_ACT_LOG",
        "SCMP_ACT_NOTIFY",
    ] {
        for d in [
            "SCMP_ACT_ALLOW",
            "SCMP_ACT_ERRNO",
            "SCMP_ACT_KILL_PROCESS",
            "SCMP_ACT_LOG",
        ] {
            let p = compile_profile(&profile(json!({
                "defaultAction": d,
                "listenerPath": "/run/agent.sock",
                "syscalls": [{"names": ["getppid"], "action": a, "errnoRet": 3}]
            })))
            .unwrap_or_else(|e| panic!("{a} / default {d}: {e}"));
            assert!(!p.is_empty());
            assert_eq!(p.bpf_bytes().len() % 8, 0);
            assert_eq!(p.wants_listener(), a == "SCMP_ACT_NOTIFY");
        }
    }
}

#[test]
fn unknown_syscall_names_are_ignored() {
    let with = bytes(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["getppid", "sprout_no_such_call", "also_missing"], "action": "SCMP_ACT_ERRNO"},
        {"names": ["entirely_unknown"], "action": "SCMP_ACT_KILL"}]}));
    let without = bytes(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["getppid"], "action": "SCMP_ACT_ERRNO"}]}));
    assert_eq!(with, without);
}

#[test]
fn rule_with_the_default_action_is_a_no_op() {
    let a = bytes(
        json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38, "syscalls": [
        {"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
        {"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}),
    );
    let b = bytes(
        json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38, "syscalls": [
        {"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}),
    );
    assert_eq!(a, b);
    // ... but not when the errno differs.
    let c = bytes(
        json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38, "syscalls": [
        {"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 37},
        {"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}),
    );
    assert_ne!(a, c);
}

#[test]
fn multiple_architectures() {
    let one = compile_profile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_ERRNO"}]})))
    .unwrap();
    let three = compile_profile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_ERRNO"}]})))
    .unwrap();
    assert!(three.len() > one.len());
    // Foreign architectures libseccomp may not know are skipped, never an error.
    compile_profile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_LOONGARCH64", "SCMP_ARCH_SH"]})))
    .unwrap();
}

#[test]
fn invalid_profiles_are_refused() {
    let cases = [
        (
            "errnoRet too big",
            json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 70000}]}),
        ),
        (
            "defaultErrnoRet too big",
            json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 65536}),
        ),
        (
            "arg index 6",
            json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "args": [
                {"index": 6, "value": 0, "op": "SCMP_CMP_EQ"}]}]}),
        ),
        (
            "NOTIFY without listenerPath",
            json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["getppid"], "action": "SCMP_ACT_NOTIFY"}]}),
        ),
        (
            "default NOTIFY without listenerPath",
            json!({"defaultAction": "SCMP_ACT_NOTIFY"}),
        ),
        (
            "default NOTIFY (runc refuses it)",
            json!({"defaultAction": "SCMP_ACT_NOTIFY", "listenerPath": "/x"}),
        ),
        (
            "NOTIFY on write (runc refuses it: the init would block)",
            json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/x", "syscalls": [
            {"names": ["getppid", "write"], "action": "SCMP_ACT_NOTIFY"}]}),
        ),
    ];
    for (name, v) in cases {
        match compile_profile(&profile(v.clone())) {
            Err(Error::Invalid(msg)) => assert!(!msg.is_empty(), "{name}"),
            Err(e) => panic!("{name}: unexpected error {e}"),
            Ok(_) => panic!("{name}: accepted"),
        }
        // prepare refuses it too, with or without a cache.
        let dir = common::TempDir::new("invalid");
        assert!(
            sprout_seccomp::prepare(&profile(v), Some(dir.path())).is_err(),
            "{name}"
        );
    }
}

#[test]
fn flags_map_to_seccomp_flags() {
    use sprout_seccomp::compile::*;
    let f = |flags: serde_json::Value, notify: bool| {
        let mut v = json!({"defaultAction": "SCMP_ACT_ALLOW", "flags": flags,
            "listenerPath": "/x"});
        if notify {
            v["syscalls"] = json!([{"names": ["getppid"], "action": "SCMP_ACT_NOTIFY"}]);
        }
        compile_profile(&profile(v)).unwrap().flags()
    };
    assert_eq!(f(json!([]), false), 0);
    assert_eq!(
        f(json!(["SECCOMP_FILTER_FLAG_LOG"]), false),
        SECCOMP_FILTER_FLAG_LOG
    );
    assert_eq!(
        f(json!(["SECCOMP_FILTER_FLAG_SPEC_ALLOW"]), false),
        SECCOMP_FILTER_FLAG_SPEC_ALLOW
    );
    assert_eq!(f(json!(["SECCOMP_FILTER_FLAG_TSYNC"]), false), 0);
    assert_eq!(
        f(json!(["SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"]), false),
        0
    );
    assert_eq!(
        f(
            json!([
                "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
                "SECCOMP_FILTER_FLAG_LOG"
            ]),
            true
        ),
        SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
            | SECCOMP_FILTER_FLAG_LOG
            | SECCOMP_FILTER_FLAG_NEW_LISTENER
    );
    assert_eq!(f(json!([]), true), SECCOMP_FILTER_FLAG_NEW_LISTENER);
}
