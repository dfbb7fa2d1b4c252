#!/usr/bin/env bash
# tests/compliance/run.sh — run the OCI runtime-tools validation suite
# (github.com/opencontainers/runtime-tools/validation, installed by
# scripts/setup-deps.sh) against a runtime and summarise the TAP output.
#
# usage: tests/compliance/run.sh [options] [RUNTIME]
#
#   RUNTIME             runtime binary: a path or a name in PATH
#                       (default: <repo>/target/release/sprout)
#   -o, --results DIR   where per-program TAP/stderr and the summary go
#                       (default: <repo>/build/compliance/<runtime>-<UTC time>;
#                       <repo>/build/compliance/latest points at the last one)
#   -t, --timeout SECS  per-program timeout (default 120)
#   -k, --only REGEX    run only programs whose name matches (grep -E)
#   -x, --exclude REGEX skip programs whose name matches (grep -E)
#   --min-ok N          exit 1 when fewer than N test points passed
#                       ("ok" and not "# SKIP")
#   --max-not-ok N      exit 1 when more than N test points are "not ok"
#   --shared-root       don't give the runtime a private --root state dir
#   --keep-work         keep the work dir (bundles, runtime state)
#   --retry REGEX       programs whose name matches (grep -E) and that report a
#                       "not ok" or time out are run again, up to --retries
#                       times, until a run has none; the last run counts; the
#                       earlier runs' TAP/stderr stay beside it as
#                       PROG.tap.run-N / PROG.stderr.run-N and the retries are
#                       listed in RESULTS/retried.txt and printed.
#                       Default '^killsig$': its test races itself (below).
#                       --retry '' turns retries off.
#   --retries N         how many times at most (default 2)
#   -l, --list          list the validation programs and exit
#
# How it runs: every program runs serially, from a private work dir that
# holds runtimetest and rootfs-amd64.tar.gz (the programs expect both in
# their cwd, as in runtime-tools' `make localvalidation`), with
# RUNTIME=<wrapper that adds --root WORK/state>, TMPDIR=WORK/tmp, inside
# its own private mount namespace (unshare -m --propagation private), under
# `timeout`. After each program, any container left in WORK/state is
# force-deleted, stray container processes are killed, and cgroups the
# suite created (cgrouptest, testdir, <uuid>) are removed.
#
# Why killsig is retried: it starts `sh -c "trap 'touch /SIG' SIG; sleep 10 &
# wait $!"` and sends SIG as soon as `state` says running, which is as soon
# as `start` returned. A signal that reaches the container's pid 1 before the
# shell installed its trap is dropped by the kernel (pid 1 of a PID namespace
# gets no default action for signals from outside it), the shell then runs
# for 10 s and the program's 5 s wait for "stopped" gives up. How often
# depends only on scheduling (seen under TCG in tests/vm, under load with
# runc); a runtime that never sends the signal fails the retry as well.
#
# Exit status: 0 unless the harness itself broke (missing suite, cannot
# parse results...) or a --min-ok / --max-not-ok threshold is not met;
# not-ok results alone do not fail the run.
set -euo pipefail
# The whole script is one { ... } block: bash parses it completely before
# running it, so editing this file while a suite run is going is harmless.
{

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../../scripts/ci-env.sh
. "$REPO/scripts/ci-env.sh"

die() { echo "compliance/run.sh: error: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

RUNTIME_ARG=""
RESULTS=""
TIMEOUT=120
ONLY=""
EXCLUDE=""
MIN_OK=""
MAX_NOT_OK=""
PRIVATE_ROOT=1
KEEP_WORK=0
LIST=0
RETRY='^killsig$'
RETRIES=2
while [ $# -gt 0 ]; do
    case "$1" in
        -o|--results) RESULTS=$2; shift 2 ;;
        -t|--timeout) TIMEOUT=$2; shift 2 ;;
        -k|--only) ONLY=$2; shift 2 ;;
        -x|--exclude) EXCLUDE=$2; shift 2 ;;
        --min-ok) MIN_OK=$2; shift 2 ;;
        --max-not-ok) MAX_NOT_OK=$2; shift 2 ;;
        --shared-root) PRIVATE_ROOT=0; shift ;;
        --keep-work) KEEP_WORK=1; shift ;;
        --retry) RETRY=$2; shift 2 ;;
        --retries) RETRIES=$2; shift 2 ;;
        -l|--list) LIST=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$RUNTIME_ARG" ] || die "more than one RUNTIME given"; RUNTIME_ARG=$1; shift ;;
    esac
done
[ $# -eq 0 ] || { [ -z "$RUNTIME_ARG" ] && [ $# -eq 1 ] && RUNTIME_ARG=$1; } || die "too many arguments"
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "--timeout wants seconds"
[[ "$RETRIES" =~ ^[0-9]+$ ]] || die "--retries wants a number"

# ------------------------------------------------------------ the suite
BIN="$RUNTIME_TOOLS_DIR/bin"
ROOTFS_TGZ="$RUNTIME_TOOLS_DIR/rootfs-amd64.tar.gz"
[ -x "$BIN/runtimetest" ] && [ -s "$ROOTFS_TGZ" ] \
    || die "validation suite not installed in $RUNTIME_TOOLS_DIR; run scripts/setup-deps.sh"
mapfile -t PROGRAMS < <(find "$BIN" -maxdepth 1 -type f -perm -u+x ! -name runtimetest -printf '%f\n' | LC_ALL=C sort)
[ ${#PROGRAMS[@]} -gt 0 ] || die "no validation programs in $BIN"
if [ -n "$ONLY" ]; then
    mapfile -t PROGRAMS < <(printf '%s\n' "${PROGRAMS[@]}" | grep -E -- "$ONLY" || true)
fi
if [ -n "$EXCLUDE" ]; then
    mapfile -t PROGRAMS < <(printf '%s\n' "${PROGRAMS[@]}" | grep -v -E -- "$EXCLUDE" || true)
fi
[ ${#PROGRAMS[@]} -gt 0 ] || die "no validation program matches"
if [ "$LIST" = 1 ]; then printf '%s\n' "${PROGRAMS[@]}"; exit 0; fi

[ "$(id -u)" -eq 0 ] || die "must run as root (containers, cgroups, mount namespaces)"
for c in unshare timeout tar flock; do command -v "$c" >/dev/null || die "$c not found"; done

# ------------------------------------------------------------ the runtime
RUNTIME_ARG=${RUNTIME_ARG:-$REPO/target/release/sprout}
if [[ "$RUNTIME_ARG" == */* ]]; then
    RT=$(cd "$(dirname "$RUNTIME_ARG")" 2>/dev/null && pwd)/$(basename "$RUNTIME_ARG") \
        || die "runtime $RUNTIME_ARG not found"
else
    RT=$(command -v "$RUNTIME_ARG") || die "runtime $RUNTIME_ARG not found in PATH"
fi
[ -x "$RT" ] || die "runtime $RT is not an executable file (build it: scripts/build.sh)"
RT_NAME=$(basename "$RT"); RT_NAME=${RT_NAME%.sh}

# ------------------------------------------------------------ results / work
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
if [ -z "$RESULTS" ]; then
    RESULTS="$REPO/build/compliance/$RT_NAME-$STAMP"
fi
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
[ -z "$(ls -A "$RESULTS")" ] || die "results dir $RESULTS is not empty"
if [[ "$RESULTS" == "$REPO/build/compliance/"* ]]; then
    ln -sfn "$(basename "$RESULTS")" "$REPO/build/compliance/latest"
fi

# One suite run per machine at a time: programs share fixed cgroup paths
# (/cgrouptest, testdir/...), so concurrent runs would disturb each other.
LOCK=/run/lock/sprout-compliance.lock
mkdir -p /run/lock
exec 9>"$LOCK"
if ! flock -n 9; then
    echo "compliance/run.sh: another suite run holds $LOCK; waiting..." >&2
    flock 9
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sprout-compliance.XXXXXX")
mkdir -p "$WORK/tmp" "$WORK/state"
# mktemp makes a 0700 dir: containers with user namespaces (uid mappings)
# must be able to reach their bundle, as they can in the default /tmp.
chmod 0755 "$WORK"; chmod 1777 "$WORK/tmp"
cp "$BIN/runtimetest" "$ROOTFS_TGZ" "$WORK/"

# RUNTIME for the programs: the runtime, with a private state dir so that
# leftovers are easy to find and we never touch anybody else's containers.
WRAP="$WORK/runtime"
if [ "$PRIVATE_ROOT" = 1 ]; then
    printf '#!/bin/sh\nexec %q --root %q "$@"\n' "$RT" "$WORK/state" > "$WRAP"
else
    printf '#!/bin/sh\nexec %q "$@"\n' "$RT" > "$WRAP"
fi
chmod +x "$WRAP"

CG_BEFORE="$WORK/cgroups.before"
cg_list() { find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | LC_ALL=C sort; }
cg_list > "$CG_BEFORE"
UUID_RE='[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
LEFTOVERS="$RESULTS/leftovers.txt"
: > "$LEFTOVERS"

# Kill processes whose root directory is one of the bundles of this run
# (container processes that outlived their runtime).
kill_strays() {
    local keys="" d k pid
    for d in "$WORK"/tmp/*/rootfs "$WORK"/tmp/*; do
        [ -d "$d" ] || continue
        k=$(stat -c '%d:%i' "$d" 2>/dev/null) || continue
        keys="$keys $k "
    done
    [ -n "$keys" ] || return 0
    local p
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" = $$ ] && continue
        k=$(stat -L -c '%d:%i' "/proc/$pid/root" 2>/dev/null) || continue
        if [[ "$keys" == *" $k "* ]]; then
            echo "$1: killed stray process $pid ($(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-80))" >> "$LEFTOVERS"
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
}

# Force-delete containers the program left in our private state dir.
delete_containers() {
    local id pid
    [ "$PRIVATE_ROOT" = 1 ] || return 0
    local d
    for d in "$WORK"/state/* "$WORK"/state/.[!.]*; do
        [ -d "$d" ] || continue
        id=${d##*/}
        # The state dir may hold the runtime's own files (caches, locks):
        # a container is what `state` knows, or a dir named like the
        # suite's container ids (UUIDs).
        local st=""
        st=$(timeout 10 "$WRAP" state "$id" 2>/dev/null) || st=""
        if [ -z "$st" ] && ! [[ "$id" =~ ^$UUID_RE$ ]]; then continue; fi
        echo "$1: container $id left behind; deleting" >> "$LEFTOVERS"
        pid=$(printf '%s' "$st" | sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' | head -1) || true
        timeout 30 "$WRAP" kill "$id" KILL >/dev/null 2>&1 || true
        if [ -n "${pid:-}" ] && [ "$pid" -gt 1 ]; then kill -9 "$pid" 2>/dev/null || true; fi
        timeout 30 "$WRAP" delete -f "$id" >/dev/null 2>&1 || true
        if [ -d "$WORK/state/$id" ]; then
            echo "$1: '$RT_NAME delete -f $id' failed; removing its state dir" >> "$LEFTOVERS"
            rm -rf "$WORK/state/$id"
        fi
    done
}

# Remove cgroups created during the run by the suite (names it uses only,
# so that we never race with other users of this machine).
cgroup_cleanup() {
    local d n=0
    while read -r d; do
        [ -n "$d" ] || continue
        if [[ "$d" =~ /(cgrouptest|testdir)(/|$) ]] || [[ "$(basename "$d")" =~ ^$UUID_RE$ ]] \
           || [[ "$d" =~ /$UUID_RE(/|$) ]]; then
            if rmdir "$d" 2>/dev/null; then n=$((n+1)); else
                echo "$1: cannot remove cgroup $d" >> "$LEFTOVERS"; fi
        fi
    done < <(cg_list | LC_ALL=C comm -13 "$CG_BEFORE" - | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-)
    [ "$n" -eq 0 ] || echo "$1: removed $n cgroup dir(s) left by the runtime" >> "$LEFTOVERS"
}

cleanup_after() {
    delete_containers "$1"
    kill_strays "$1"
    cgroup_cleanup "$1"
    # Bundles are normally removed by the programs; mounts made by the
    # runtime lived in the program's private mount namespace only.
    rm -rf --one-file-system "$WORK"/tmp/* 2>/dev/null || true
}

on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    cleanup_after "exit" || true
    if [ "$KEEP_WORK" = 1 ]; then echo "work dir kept: $WORK" >&2
    else rm -rf --one-file-system "$WORK"; fi
    exit "$rc"
}
trap on_exit EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# ------------------------------------------------------------ run
{
    echo "runtime: $RT"
    "$RT" --version 2>&1 | head -5 || true
    echo "suite: $RUNTIME_TOOLS_MODULE@$RUNTIME_TOOLS_VERSION"
    echo "date: $STAMP"
    echo "kernel: $(uname -r)"
} > "$RESULTS/runtime.txt"
echo "compliance: ${#PROGRAMS[@]} programs against $RT ($(head -2 "$RESULTS/runtime.txt" | tail -1))"
echo "compliance: results in $RESULTS"

LIST_FILE="$RESULTS/programs.list"
: > "$LIST_FILE"
T0=$(date +%s)
i=0
# run_program P: one run of validation program P, TAP and stderr into RESULTS;
# sets rc, secs, to (1 when it timed out) and nok (its "not ok" count).
run_program() {
    local p=$1 t1
    t1=$(date +%s)
    set +e
    (
        cd "$WORK"
        exec env TMPDIR="$WORK/tmp" RUNTIME="$WRAP" \
            timeout -k 10 "$TIMEOUT" unshare -m --propagation private "$BIN/$p"
    ) > "$RESULTS/$p.tap" 2> "$RESULTS/$p.stderr" < /dev/null 9>&-
    rc=$?
    set -e
    secs=$(( $(date +%s) - t1 ))
    to=0; if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then to=1; fi
    cleanup_after "$p"
    nok=$(grep -c '^not ok' "$RESULTS/$p.tap" || true)
}
for p in "${PROGRAMS[@]}"; do
    i=$((i+1))
    run_program "$p"
    runs=1; history=""
    while [ -n "$RETRY" ] && [ "$runs" -le "$RETRIES" ] \
        && { [ "$nok" -gt 0 ] || [ "$to" = 1 ]; } \
        && printf '%s\n' "$p" | grep -qE -- "$RETRY"; do
        last="exit $rc, $nok not ok"; [ "$to" = 0 ] || last="$last, TIMEOUT"
        history="$history run $runs: $last;"
        mv "$RESULTS/$p.tap" "$RESULTS/$p.tap.run-$runs"
        mv "$RESULTS/$p.stderr" "$RESULTS/$p.stderr.run-$runs"
        echo "  retrying $p (run $runs: $last; its TAP: $RESULTS/$p.tap.run-$runs)"
        grep -A6 '^not ok' "$RESULTS/$p.tap.run-$runs" | head -20 | sed 's/^/      /'
        run_program "$p"
        runs=$((runs+1))
    done
    if [ "$runs" -gt 1 ]; then
        echo "$p:$history run $runs (counts): exit $rc, $nok not ok" >> "$RESULTS/retried.txt"
    fi
    echo "$p $rc $secs $to" >> "$LIST_FILE"
    printf '  [%2d/%d] %-34s %4ss  exit %-3s %s\n' "$i" "${#PROGRAMS[@]}" "$p" "$secs" "$rc" \
        "$( [ "$to" = 1 ] && echo TIMEOUT; [ "$nok" -gt 0 ] && echo "$nok not ok")"
done
echo "compliance: suite took $(( $(date +%s) - T0 ))s"

# ------------------------------------------------------------ summary
echo ""
echo "== OCI runtime compliance: $RT_NAME =="
SUMMARY_OK=1
if NODE_TAP_PREFIX="$NODE_TAP_PREFIX" node "$HERE/tap-summary.js" "$RESULTS" > "$RESULTS/summary.txt"; then
    cat "$RESULTS/summary.txt"
    OK=$(node -e "console.log(require('$RESULTS/summary.json').totals.pass)")
    NOTOK=$(node -e "console.log(require('$RESULTS/summary.json').totals.notOk)")
else
    SUMMARY_OK=0
    echo "compliance/run.sh: TAP consumer failed; raw counts follow" >&2
    OK=$(cat "$RESULTS"/*.tap | grep '^ok' | grep -vc '# SKIP' || true)
    NOTOK=$(cat "$RESULTS"/*.tap | grep -c '^not ok' || true)
    echo "TOTAL (raw grep): $OK passed, $NOTOK not ok"
fi
if [ -s "$RESULTS/not-ok.txt" ]; then
    echo ""
    echo "-- not ok (first 150 lines; all in $RESULTS/not-ok.txt) --"
    head -150 "$RESULTS/not-ok.txt"
fi
if [ -s "$RESULTS/retried.txt" ]; then
    echo ""
    echo "-- run again (--retry; the last run counts) --"
    cat "$RESULTS/retried.txt"
fi
if [ -s "$LEFTOVERS" ]; then
    echo ""
    echo "-- cleaned up after the runtime (see $LEFTOVERS) --"
    head -40 "$LEFTOVERS"
fi
echo ""
echo "results: $RESULTS"

[ "$SUMMARY_OK" = 1 ] || exit 2
if [ -n "$MIN_OK" ] && [ "$OK" -lt "$MIN_OK" ]; then
    echo "compliance: FAIL: $OK passed < --min-ok $MIN_OK" >&2; exit 1
fi
if [ -n "$MAX_NOT_OK" ] && [ "$NOTOK" -gt "$MAX_NOT_OK" ]; then
    echo "compliance: FAIL: $NOTOK not ok > --max-not-ok $MAX_NOT_OK" >&2; exit 1
fi
exit 0
}
