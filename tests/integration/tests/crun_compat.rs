//! Divergences found by running crun's own Python test suite (tests/test_*.py) against sprout,
//! with crun and runc as baselines (issue #16), each checked on a real container. See
//! docs/compatibility.md ("crun's test suite").

use serde_json::json;
use sprout_integration_tests::*;

// ---- kernel.domainname sysctl (crun's test_domainname.py) ------------------------------------

/// `kernel.domainname` is namespaced by the uts namespace, and Docker's `--domainname` is written
/// as that sysctl: with a uts namespace of its own it is allowed (runc), also next to a
/// "domainname" field of the same value; a "domainname" field of another value is refused, as
/// crun refuses it (one of the two would silently win).
#[test]
fn domainname_sysctl_is_allowed_with_a_uts_namespace() {
    let ctx = Ctx::new("sysctldomain");

    let mut b = ctx.bundle(&["cat", "/proc/sys/kernel/domainname"]);
    b.set(
        "/linux/sysctl",
        json!({ "kernel.domainname": "from-sysctl" }),
    );
    let o = b.run();
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "from-sysctl", "{}", o.describe());

    let mut b = ctx.bundle(&["cat", "/proc/sys/kernel/domainname"]);
    b.set("/domainname", json!("same"));
    b.set("/linux/sysctl", json!({ "kernel.domainname": "same" }));
    let o = b.run();
    o.assert_ok();
    assert_eq!(o.stdout.trim(), "same", "{}", o.describe());

    let mut b = ctx.bundle(&["true"]);
    b.set("/domainname", json!("field"));
    b.set("/linux/sysctl", json!({ "kernel.domainname": "sysctl" }));
    let o = b.create();
    o.assert_fail();
    o.assert_one_line_error(&["linux.sysctl", "kernel.domainname", "domainname"]);
    assert!(
        ctx.status(&b.id).is_none(),
        "nothing left: {}",
        o.describe()
    );

    // Without a uts namespace of its own the write would change the host's: refused.
    let mut b = ctx.bundle(&["true"]);
    b.remove_namespace("uts");
    b.set("/hostname", json!(null));
    b.set("/linux/sysctl", json!({ "kernel.domainname": "host" }));
    let o = b.create();
    o.assert_fail();
    o.assert_one_line_error(&["linux.sysctl", "kernel.domainname"]);
    assert!(
        ctx.status(&b.id).is_none(),
        "nothing left: {}",
        o.describe()
    );
}
