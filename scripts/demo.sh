#!/usr/bin/env bash
# scripts/demo.sh — the main job: build sprout, make a busybox bundle, start containers, report
# the start time.
#
# usage: scripts/demo.sh [--runs N]
#
# 1. installs what it needs (scripts/setup-deps.sh --demo: busybox-static, libseccomp-dev)
# 2. scripts/build.sh (cargo, release; sprout linked static-pie)
# 3. builds two bundles in /run/sprout-demo: "minimal" (the config `sprout spec` writes, running
#    `true`) and "podman-default" (the config podman generates, with its seccomp profile)
# 4. runs one visible container (prints hostname, pid, capabilities, mounts), then N silent
#    starts of each bundle, and prints the median wall time of `sprout run` and the phase trace
#    of the median start.
set -euo pipefail

RUNS=20
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "demo.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
cd "$REPO"
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (containers need it)" >&2; exit 1; }

echo "==> installing dependencies (busybox-static, libseccomp-dev, pkg-config) if missing"
missing=()
for p in busybox-static libseccomp-dev pkg-config; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || { echo "demo.sh: cargo not found (install Rust with rustup)" >&2; exit 1; }

echo "==> building sprout (release)"
bash "$HERE/build.sh"
SPROUT="$REPO/target/release/sprout"
"$SPROUT" --version

WORK=/run/sprout-demo
STATE=$WORK/state
rm -rf "$WORK"
mkdir -p "$WORK"
cleanup() {
    for id in $("$SPROUT" --root "$STATE" list -q 2>/dev/null); do
        "$SPROUT" --root "$STATE" delete --force "$id" >/dev/null 2>&1 || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "==> making bundles in $WORK"
"$HERE/make-rootfs.sh" "$WORK/rootfs" >/dev/null
python3 "$HERE/make-bundles.py" "$SPROUT" "$WORK" "$REPO/bench/podman-default.json"

echo "==> one container, visibly"
(cd "$WORK/minimal-show" && "$SPROUT" --root "$STATE" run demo-show)

echo "==> $RUNS starts of each bundle"
python3 - "$SPROUT" "$STATE" "$WORK" "$RUNS" <<'PY'
import json, os, statistics, subprocess, sys, time
sprout, state, work, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
env = dict(os.environ, SPROUT_TRACE="1")
for bundle in ("minimal", "podman-default"):
    walls, traces = [], []
    for i in range(runs + 3):
        t0 = time.perf_counter()
        p = subprocess.run([sprout, "--root", state, "run", f"demo-{bundle}"], cwd=f"{work}/{bundle}",
                           env=env, capture_output=True, text=True)
        dt = (time.perf_counter() - t0) * 1000
        if p.returncode != 0:
            sys.exit(f"demo: sprout run failed on {bundle}: {p.stderr.strip()}")
        if i < 3:
            continue  # warm-up: page cache, seccomp BPF cache
        walls.append(dt)
        line = [l for l in p.stderr.splitlines() if l.startswith('{"sprout_trace"')]
        traces.append((dt, json.loads(line[-1])["sprout_trace"] if line else None))
    med = statistics.median(walls)
    traces.sort(key=lambda t: t[0])
    mid = traces[len(traces) // 2][1]
    print(f"{bundle:15s} sprout run: median {med:6.2f} ms  (min {min(walls):.2f}, max {max(walls):.2f}, n={len(walls)})")
    if mid:
        phases = ", ".join(f"{k} {v}" for k, v in mid["phases_us"].items())
        print(f"{'':15s} phase trace of the median start (µs): {phases}")
PY
echo "==> demo done (see bench/startup for the side-by-side comparison with crun and runc)"
