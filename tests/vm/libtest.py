#!/usr/bin/env python3
"""Parse one libtest run (`EXE --test-threads=N --show-output`) into per-test results.

usage: libtest.py LOG RC   prints TSV lines: STATUS<TAB>TEST<TAB>DETAIL (STATUS pass|fail|skip)

A test that passed but printed a line saying it skipped itself ("skipped: ...", "SKIPPED ...",
"...; skipped") is reported as skip with that line, never as pass; #[ignore]d tests are skip.
A binary that died (timeout, abort) without a summary line adds one fail named <binary>.
"""
import re
import sys

log, rc = sys.argv[1], int(sys.argv[2])
name = sys.argv[3] if len(sys.argv) > 3 else "binary"
lines = open(log, errors="replace").read().splitlines()
status = {}
order = []
res = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored(?:, .*)?)$")
for ln in lines:
    m = res.match(ln)
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

skip_re = re.compile(r"(?i)(^|[\s;:(])skip(ped)?\b")
for t in order:
    s = status[t]
    detail = ""
    b = blocks.get(t, [])
    if s == "pass":
        hits = [l.strip() for l in b if skip_re.search(l)]
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
    print(f"{s}\t{t}\t{detail}")

if not any(l.startswith("test result:") for l in lines) or (rc != 0 and "fail" not in status.values()):
    tail = " | ".join(l.strip() for l in lines[-5:] if l.strip())[:400]
    print(f"fail\t<{name}: exit {rc}, no complete result>\t{tail}")
