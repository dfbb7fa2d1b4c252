#!/usr/bin/env bash
# bench/remote/run.sh: run bench/startup and bench/serve/bench.py on a host prepared only with
# the folder bench/remote/pack.sh made (plus python3 and util-linux). Needs root.
#
#   bench/remote/run.sh PACK OUTDIR [--parts startup,serve,sweep,ab] [--startup-secs S] [--serve-secs S]
#                       [--ab 'LABEL=SPROUT LABEL=SPROUT ...'] [--ab-runs N] [--light] [--quick]
#
# Parts (default startup,serve): bench/startup with every runtime of the pack; bench/serve/bench.py;
# sweep: bench/serve/sweep.py (wrk; hot and zygote with 4 wrk threads, roundrobin with 2, as on the
# development host, where two threads keep up to two sandboxes per handler);
# ab: bench/interleaved of the --ab sprout binaries (paths relative to PACK or absolute) and the
# phase trace of each (bench/startup --skip everything but the trace);
# profile: bench/profile (perf record -a -g of 1 and 16 loops of `run` podman-default, and
# bench/offcpu of one start), when the pack has perf.
# --light: bench/startup with 20 runs in 2 rounds, parallel at 1,8,16,32.
# Writes OUTDIR/{host.txt,log.txt,startup.md,startup.json,serve.txt,serve.json,sweep.txt,sweep.json,
# sweep-rr.json,ab.txt,profile-1.txt,profile-16.txt,offcpu.txt}. Each part has
# its own time limit (a part cut off still leaves what it wrote). On cgroup v2 the benches run
# from the root cgroup, as on the project's VM (bench/clients/vm.sh): a v2 cgroup that holds
# processes cannot hand controllers to the benches' child cgroups. Only this script's own
# process moves; nothing else is touched.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PACK=$(cd "${1:?usage: run.sh PACK OUTDIR}" && pwd)
OUT=${2:?usage: run.sh PACK OUTDIR}
shift 2
SSECS=330 VSECS=150 QUICK=0 LIGHT=0 PARTS=startup,serve AB="" ABRUNS=150
while [ $# -gt 0 ]; do
    case "$1" in
        --startup-secs) SSECS=$2; shift 2 ;;
        --serve-secs) VSECS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --light) LIGHT=1; shift ;;
        --parts) PARTS=$2; shift 2 ;;
        --ab) AB=$2; shift 2 ;;
        --ab-runs) ABRUNS=$2; shift 2 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
LOG=$OUT/log.txt
exec > >(tee -a "$LOG") 2>&1
t0=$(date +%s)
stamp() { echo "==> [$(( $(date +%s) - t0 )) s] $*"; }
# Libraries the host lacks, from the pack (only those: the host's own stay first).
mkdir -p /tmp/sprout-remote-lib
trap 'rm -rf /tmp/sprout-remote-lib' EXIT
for l in "$PACK"/lib/*; do
    [ -e "$l" ] || continue
    ldconfig -p 2>/dev/null | grep -q " $(basename "$l") " || ln -sf "$l" /tmp/sprout-remote-lib/
done
export LD_LIBRARY_PATH=/tmp/sprout-remote-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PACK/bin:$PATH
{
    echo "date: $(date -u +%FT%TZ)"; echo "pack: $(cat "$PACK/REVISION" 2>/dev/null)"
    echo "uname: $(uname -a)"; echo "nproc: $(nproc)"
    grep -m1 'model name' /proc/cpuinfo; grep MemTotal /proc/meminfo
    echo "loadavg: $(cat /proc/loadavg)"
    echo "cgroup mounts:"; grep cgroup /proc/self/mountinfo
    echo "own cgroup: $(cat /proc/self/cgroup | tr '\n' ' ')"
    echo "root controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>&1)"
    echo "root subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control 2>&1)"
    echo "pid 1: $(cat /proc/1/comm)"; echo "/run: $(findmnt -no FSTYPE,OPTIONS /run 2>&1)"
    echo "python3: $(command -v python3) $(python3 --version 2>&1); /usr/bin/python3: $(/usr/bin/python3 --version 2>&1)"
    echo "libs from the pack: $(ls /tmp/sprout-remote-lib | tr '\n' ' ')"
    for b in sprout crun runc hyperfine; do echo "$b: $($b --version 2>&1 | head -1)"; done
    for p in "$PACK"/peers/*; do echo "$(basename "$p"): $("$p" --version 2>&1 | head -1)"; done
    echo "unshare test: $(unshare -Urmpf --mount-proc true 2>&1 && echo ok)"
} > "$OUT/host.txt" 2>&1
cat "$OUT/host.txt"
if [ -f /sys/fs/cgroup/cgroup.controllers ] && [ "$(cat /proc/self/cgroup)" != "0::/" ]; then
    stamp "moving this script (pid $$) to the root cgroup"
    echo $$ > /sys/fs/cgroup/cgroup.procs || echo "run.sh: cannot move to the root cgroup"
fi
peers=()
only=sprout,crun
for p in "$PACK"/peers/*; do
    [ -x "$p" ] || continue
    n=$(basename "$p"); peers+=(--peer "$n=$p"); only+=",$n"
done
part() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
if part startup; then
if [ "$QUICK" = 1 ]; then
    sargs=(--quick --par-levels 1,4 --skip syscalls)
elif [ "$LIGHT" = 1 ]; then
    sargs=(--runs 20 --rounds 2 --warmup 2 --par-levels 1,8,16,32 --skip syscalls)
else
    sargs=(--runs 30 --rounds 3 --warmup 3 --par-levels 1,2,8,16,32 --skip syscalls)
fi
stamp "bench/startup (limit $SSECS s)"
timeout --signal=TERM --kill-after=20 "$SSECS" python3 -u "$REPO/bench/startup" --sprout "$PACK/bin/sprout" \
    --crun "$PACK/bin/crun" --runc "$PACK/bin/runc" --floor "$PACK/bin/floor" "${peers[@]}" --only "$only" \
    "${sargs[@]}" --out "$OUT/startup.md" --json "$OUT/startup.json"
stamp "bench/startup exit $?"
fi
if part serve; then
if [ "$QUICK" = 1 ]; then vargs=(-n 50 --new 10); else vargs=(-n 1000 --new 100 --threads 16); fi
stamp "bench/serve/bench.py (limit $VSECS s)"
SPROUT_BENCH_PKG_CACHE=/tmp/sprout-serve-bench-packages timeout --signal=TERM --kill-after=20 "$VSECS" \
    python3 -u "$REPO/bench/serve/bench.py" --bin "$PACK/bin/sprout-serve" "${vargs[@]}" \
    --json "$OUT/serve.json" > "$OUT/serve.txt" 2>&1
stamp "bench/serve/bench.py exit $?"
cat "$OUT/serve.txt"
fi
if part sweep; then
    if [ "$QUICK" = 1 ]; then wargs=(-d 1 --clients 1,16); else wargs=(-d 4); fi
    stamp "bench/serve/sweep.py (limit $VSECS s per invocation)"
    timeout --signal=TERM --kill-after=20 "$VSECS" python3 -u "$REPO/bench/serve/sweep.py" \
        --bin "$PACK/bin/sprout-serve" "${wargs[@]}" --paths hot,zygote --wrk-threads 4 \
        --json "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1
    stamp "sweep hot,zygote exit $?"
    timeout --signal=TERM --kill-after=20 "$VSECS" python3 -u "$REPO/bench/serve/sweep.py" \
        --bin "$PACK/bin/sprout-serve" "${wargs[@]}" --paths roundrobin --wrk-threads 2 \
        --json "$OUT/sweep-rr.json" >> "$OUT/sweep.txt" 2>&1
    stamp "sweep roundrobin exit $?"
    cat "$OUT/sweep.txt"
fi
if part ab && [ -n "$AB" ]; then
    abargs=()
    for x in $AB; do
        l=${x%%=*} p=${x#*=}
        case "$p" in /*) ;; *) p=$PACK/$p ;; esac
        abargs+=("$l=$p")
    done
    stamp "bench/interleaved ${abargs[*]} (--runs $ABRUNS)"
    { timeout --signal=TERM --kill-after=20 "$SSECS" python3 -u "$REPO/bench/interleaved" --runs "$ABRUNS" \
        --crun "$PACK/bin/crun" --floor "$PACK/bin/floor" "${abargs[@]}"
      for a in "${abargs[@]}"; do
          echo "### phase trace of ${a%%=*}"
          timeout 120 python3 -u "$REPO/bench/startup" --sprout "${a#*=}" --only sprout --floor "$PACK/bin/floor" \
              --skip run,split,parallel,rss,syscalls --out - 2>&1 | sed -n '/phase trace/,/^Parent phases/p'
      done; } > "$OUT/ab.txt" 2>&1
    stamp "bench/interleaved exit $?"
    cat "$OUT/ab.txt"
fi
if part profile; then
    stamp "bench/profile (limit $VSECS s)"
    psprout=$PACK/bin/sprout
    [ -x "$PACK/bin/sprout-sym" ] && psprout=$PACK/bin/sprout-sym  # the same code, with symbols
    timeout --signal=TERM --kill-after=20 "$VSECS" python3 -u "$REPO/bench/profile" --sprout "$psprout" \
        --par 1,16 --secs 6 --offcpu-runs 30 --out "$OUT"
    stamp "bench/profile exit $?"
fi
stamp done
