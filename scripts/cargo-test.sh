#!/usr/bin/env bash
# scripts/cargo-test.sh LOG CMD... — run a `cargo test ... -- --show-output` command for
# scripts/test.sh and tell the truth about skips.
#
# libtest has no run-time skip: a test that cannot run on this host (no v1 hierarchy, no base
# rootfs, not root) prints "skipped: <why>" and returns, and cargo counts it as passed. With
# --show-output that line is in the log, so after cargo's own output this prints each such
# test as a skip with its reason, every failure, and one line
#     cargo-test: N passed, N failed, N skipped
# (tests/vm/libtest.py, the same reading the VM stage does). The console gets cargo's usual
# output without the captured output of the passing tests (it stays in LOG).
# Exit status: cargo's.
set -uo pipefail
LOG=$1
shift
mkdir -p "$(dirname "$LOG")"
# cargo writes to the log file, not to a pipe: a process a test leaks (a frozen sandbox) keeps
# its stdout open, and a pipe would then never reach EOF. The console follows the file until
# cargo exits.
"$@" > "$LOG" 2>&1 < /dev/null &
pid=$!
trap 'kill "$pid" 2>/dev/null' INT TERM
tail -n +1 -s 0.2 --pid="$pid" -f "$LOG" |
    awk '/^successes:$/ {hide = 1; next} /^failures:$/ || /^test result:/ {hide = 0} !hide'
wait "$pid"
rc=$?
trap - INT TERM
echo ""
echo "==> cargo test: run-time skips and failures (full output: $LOG)"
python3 "$(dirname "${BASH_SOURCE[0]}")/../tests/vm/libtest.py" --cargo "$LOG" "$rc" ||
    echo "cargo-test.sh: could not summarise $LOG (cargo's exit status $rc stands)"
exit "$rc"
