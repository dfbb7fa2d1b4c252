#!/usr/bin/env python3
"""Parse libtest runs (`--show-output`) into per-test results.

usage: libtest.py LOG RC [NAME]
           one test executable's run: prints TSV lines STATUS<TAB>TEST<TAB>DETAIL
           (STATUS pass|fail|skip)
       libtest.py --cargo LOG RC
           a whole `cargo test ... -- --show-output` log (one run per test executable): prints
           the skips and failures, then `cargo-test: N passed, N failed, N skipped`

A test that passed but printed a line saying it skipped itself ("skipped: ...", "SKIPPED ...",
"...; skipped") is reported as skip with that line, never as pass; #[ignore]d tests are skip.
A binary that died (timeout, abort) without a summary line adds one fail named <binary>.
"""
import re
import sys

RES = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored(?:, .*)?)$")
SKIP = re.compile(r"(?i)(^|[\s;:(])skip(ped)?\b")


def parse(lines, rc, name="binary"):
    """[(status, test, detail)] for one test executable's output `lines` and exit code `rc`."""
    status = {}
    order = []
    for ln in lines:
        m = RES.match(ln)
        if m:
            t, s = m.group(1), m.group(2)
            if t not in status:
                order.append(t)
            status[t] = "pass" if s == "ok" else "fail" if s == "FAILED" else "skip"

    # captured output blocks: "---- NAME stdout ----" ... in the successes: and failures: sections
    blocks = {}
    cur = None
    for ln in lines:
        m = re.match(r"^---- (\S+) stdout ----$", ln)
        if m:
            cur = m.group(1)
            blocks.setdefault(cur, [])
            continue
        if cur is not None:
            if ln in ("successes:", "failures:") or ln.startswith("test result:"):
                cur = None
                continue
            blocks[cur].append(ln)

    out = []
    for t in order:
        s = status[t]
        detail = ""
        b = blocks.get(t, [])
        if s == "pass":
            hits = [l.strip() for l in b if SKIP.search(l)]
            if hits:
                s = "skip"
                detail = hits[0]
        elif s == "fail":
            keep = []
            for i, l in enumerate(b):
                if "panicked at" in l:
                    for x in b[i:i + 12]:
                        if "note: run with" in x:
                            break
                        if x.strip():
                            keep.append(x.strip())
                    break
            if not keep:
                keep = [l.strip() for l in b if l.strip()][-4:]
            detail = " | ".join(keep)[:1200]
        elif s == "skip":
            detail = "#[ignore]"
        out.append((s, t, detail))

    if not any(l.startswith("test result:") for l in lines) or (
        rc != 0 and not any(s == "fail" for s, _, _ in out)
    ):
        tail = " | ".join(l.strip() for l in lines[-5:] if l.strip())[:400]
        out.append(("fail", f"<{name}: exit {rc}, no complete result>", tail))
    return out


def cargo(log, rc):
    """Summarise a whole `cargo test` log: each `Running`/`Doc-tests` part is one executable."""
    lines = open(log, errors="replace").read().splitlines()
    parts = []
    for ln in lines:
        m = re.match(r"^\s+(Running|Doc-tests) (.*)$", ln)
        if m:
            # "Running tests/serve.rs (target/.../deps/serve-0123456789abcdef)": the executable's
            # name without its hash; "Doc-tests sprout_runtime": the crate.
            exe = re.search(r"\(([^)]*)\)\s*$", m.group(2))
            name = exe.group(1) if exe else m.group(2).split()[0]
            parts.append((name, []))
        elif parts:
            parts[-1][1].append(ln)
    results = []
    for name, body in parts:
        short = re.sub(r"-[0-9a-f]{16}$", "", name.rsplit("/", 1)[-1])
        for s, t, d in parse(body, 0, short):
            results.append((s, f"{short}::{t}", d))
    if rc != 0 and not any(s == "fail" for s, _, _ in results):
        results.append(("fail", f"<cargo test: exit {rc}>", " | ".join(lines[-3:])[:400]))
    if not parts:
        results.append(("fail", "<cargo test: no test executable ran>", ""))
    n = {k: sum(1 for s, _, _ in results if s == k) for k in ("pass", "fail", "skip")}
    for s, t, d in results:
        if s == "skip":
            print(f"    skip {t} :: {d}")
    for s, t, d in results:
        if s == "fail":
            print(f"    FAIL {t} :: {d}")
    print(f"cargo-test: {n['pass']} passed, {n['fail']} failed, {n['skip']} skipped")


if __name__ == "__main__":
    if sys.argv[1] == "--cargo":
        cargo(sys.argv[2], int(sys.argv[3]))
    else:
        log, rc = sys.argv[1], int(sys.argv[2])
        name = sys.argv[3] if len(sys.argv) > 3 else "binary"
        for s, t, d in parse(open(log, errors="replace").read().splitlines(), rc, name):
            print(f"{s}\t{t}\t{d}")
