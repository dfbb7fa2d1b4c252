#!/usr/bin/env bash
# bench/clients/vm.sh: bench/startup and bench/clients/run on the project's pure cgroup-v2 +
# systemd VM (tests/vm/vm.sh: Debian 13, crun 1.21, runc 1.1.15, podman 5.4, containerd 1.7).
# Under TCG the absolute times mean nothing: report ratios only.
#
#   bench/clients/vm.sh [--sprout BIN] [--startup-runs N] [--clients-runs N] [--parts startup,clients]
#                       [--keep-vm] [--out DIR]
#
# Boots the VM with tests/vm/vm.sh (port 10122 unless SPROUT_VM_PORT; a VM already running is
# used and left running), copies in a static sprout, bench/startup (+ floor.c,
# podman-default.json), bench/clients/run with a static rtwrap and the CRI client built here, runs
#   bench/startup --skip parallel,rss,syscalls,trace (run latency and the create/start/delete split)
#   bench/clients/run --direct none (podman, ctr, cri; sprout, crun, runc)
# from the VM's root cgroup (the ssh session's scope holds processes, so on v2 it could not
# delegate controllers to the bench's cgroups), copies the outputs to DIR (default
# /tmp/sprout-bench-vm) and stops the VM (unless --keep-vm or it was running before).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SPROUT=$REPO/target/release/sprout
SRUNS=20 CRUNS=10 KEEP=0 OUT=/tmp/sprout-bench-vm PARTS=startup,clients
while [ $# -gt 0 ]; do
  case "$1" in
    --sprout) SPROUT=$2; shift 2 ;;
    --startup-runs) SRUNS=$2; shift 2 ;;
    --clients-runs) CRUNS=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    --keep-vm) KEEP=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "bench/clients/vm.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
ldd "$SPROUT" 2>&1 | grep -q '=>' && { echo "bench/clients/vm.sh: $SPROUT is not static (scripts/build.sh)" >&2; exit 2; }
VM=(bash "$REPO/tests/vm/vm.sh")
TMP=$(mktemp -d /tmp/sprout-bench-vm-build.XXXXXX)
WAS_RUNNING=0
"${VM[@]}" status >/dev/null 2>&1 && WAS_RUNNING=1
finish() {
  rm -rf "$TMP"
  if [ "$KEEP" = 0 ] && [ "$WAS_RUNNING" = 0 ]; then "${VM[@]}" stop || true; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

# Static helpers built here (the VM has no Go toolchain and no musl).
if command -v musl-gcc >/dev/null; then musl-gcc -static -O2 -o "$TMP/rtwrap" "$HERE/rtwrap.c"
else cc -static -O2 -o "$TMP/rtwrap" "$HERE/rtwrap.c"; fi
(cd "$HERE/cri" && CGO_ENABLED=0 GOFLAGS=-mod=mod PATH=$PATH:/usr/local/go/bin go build -o "$TMP/cri-bench" .)
mkdir -p "$TMP/sb/bench/clients" "$TMP/sb/target/release"
cp "$REPO/bench/startup" "$REPO/bench/floor.c" "$REPO/bench/podman-default.json" "$TMP/sb/bench/"
cp "$HERE/run" "$HERE/rtwrap.c" "$TMP/sb/bench/clients/"
cp "$SPROUT" "$TMP/sb/target/release/sprout"
COMMIT=${SPROUT_COMMIT:-$(git -C "$REPO" rev-parse --short HEAD)}

[ "$WAS_RUNNING" = 1 ] || "${VM[@]}" start
"${VM[@]}" ssh 'rm -rf /root/sb /root/sb-out; mkdir -p /root/sb-out'
"${VM[@]}" push "$TMP/sb" "$TMP/rtwrap" "$TMP/cri-bench" /root/
mkdir -p "$OUT"
"${VM[@]}" ssh - <<EOF 2>&1 | tee "$OUT/vm.log"
set -u
echo \$\$ > /sys/fs/cgroup/cgroup.procs   # this shell (and the benches) into the root cgroup
cd /root/sb
echo "# VM: \$(uname -r), \$(nproc) CPUs, cgroup \$(stat -fc %T /sys/fs/cgroup), \$(systemctl --version | head -1)"
echo "# versions: \$(crun --version | head -1); \$(runc --version | head -1); \$(podman --version); \$(containerd --version)"
echo "# sprout binary from the host, built from commit $COMMIT"
echo "# load before: \$(cat /proc/loadavg)"
case ",$PARTS," in *,startup,*) ;; *) SKIP_STARTUP=1 ;; esac
[ -n "\${SKIP_STARTUP:-}" ] || time python3 bench/startup --sprout /root/sb/target/release/sprout --runs $SRUNS --rounds 4 --warmup 2 \
  --skip parallel,rss,syscalls,trace --out /root/sb-out/startup-vm.md --json /root/sb-out/startup-vm.json \
  2> /root/sb-out/startup-vm.err; echo "bench/startup exit \$?"
echo "# load between: \$(cat /proc/loadavg)"
case ",$PARTS," in *,clients,*) ;; *) SKIP_CLIENTS=1 ;; esac
[ -n "\${SKIP_CLIENTS:-}" ] || time python3 bench/clients/run --runs $CRUNS --direct none --rtwrap /root/rtwrap --cri-bench /root/cri-bench \
  --runtime sprout=/root/sb/target/release/sprout --runtime crun=\$(command -v crun) --runtime runc=\$(command -v runc) \
  --ratios --commit "$COMMIT" --json /root/sb-out/clients-vm.json > /root/sb-out/clients-vm.md 2> /root/sb-out/clients-vm.err; echo "bench/clients exit \$?"
echo "# load after: \$(cat /proc/loadavg)"
EOF
"${VM[@]}" pull /root/sb-out "$OUT/"
echo "results in $OUT/sb-out"
