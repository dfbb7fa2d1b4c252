#!/usr/bin/env bash
# bench/remote/pack.sh: put everything bench/startup and bench/serve/bench.py need into one folder,
# for a benchmark host that has python3 and nothing else of ours (no Rust, no compiler, no network:
# e.g. a 16-core pure cgroup-v2 machine). bench/remote/run.sh runs the benches there.
#
#   bench/remote/pack.sh DIR        (run here after scripts/build.sh --workspace and bench/peers.sh)
#
# DIR/bin: the static sprout, sprout-serve, crun and runc as Debian ships them, hyperfine, GNU time,
#          busybox-static, wrk and perf (if installed), a static bench/floor.c; DIR/peers: runc and youki from bench/peers.sh's
#          cache; DIR/lib: the shared libraries these programs need beyond libc/libm/libgcc_s
#          (run.sh adds only those the host lacks); DIR/share/sprout/python: the zygote sources,
#          where sprout-serve looks beside its binary.
# Everything copied is a binary from a package registry or this tree: nothing is built from
# fetched source here.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${1:?usage: bench/remote/pack.sh DIR}
PEERS=${SPROUT_BENCH_PEERS:-/var/cache/sprout-bench/peers}
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/peers" "$DIR/lib" "$DIR/share/sprout"
sprout=$REPO/target/release/sprout
file -L "$sprout" | grep -q 'static' || { echo "pack.sh: $sprout is not static (run scripts/build.sh --workspace)" >&2; exit 1; }
cp "$sprout" "$REPO/target/release/sprout-serve" "$DIR/bin/"
# The same build with its symbols (scripts/build.sh leaves it in the musl target dir), for
# run.sh's profile part: only when stripping it gives exactly bin/sprout.
sym=${SPROUT_SYM:-$REPO/target/x86_64-unknown-linux-musl/release/sprout}
if [ -f "$sym" ] && strip -o "$DIR/bin/sprout-sym" "$sym" 2>/dev/null && cmp -s "$DIR/bin/sprout-sym" "$sprout"; then
    cp "$sym" "$DIR/bin/sprout-sym"
else
    rm -f "$DIR/bin/sprout-sym"
fi
for t in hyperfine busybox crun runc; do
    p=$(command -v "$t") || { echo "pack.sh: $t not found (apt-get install hyperfine busybox-static crun runc)" >&2; exit 1; }
    cp "$p" "$DIR/bin/$t"
done
cp /usr/bin/time "$DIR/bin/time"
# perf for run.sh's profile part (bench/profile, bench/offcpu), when installed (apt-get install
# linux-perf); its libraries come along below like every other program's.
if command -v perf >/dev/null; then cp "$(readlink -f "$(command -v perf)")" "$DIR/bin/perf"; fi
# wrk for bench/serve/sweep.py, when installed (apt-get install wrk)
if command -v wrk >/dev/null; then cp "$(command -v wrk)" "$DIR/bin/wrk"; fi
cc -O2 -static -o "$DIR/bin/floor" "$REPO/bench/floor.c"
for d in "$PEERS"/*/; do
    n=$(basename "$d")
    for b in "$d"bin/*; do
        [ -x "$b" ] && cp "$b" "$DIR/peers/$n" && strip "$DIR/peers/$n" 2>/dev/null || true
    done
done
cp -r "$REPO/python" "$DIR/share/sprout/python"
find "$DIR/share" -name __pycache__ -prune -exec rm -rf {} +
for b in "$DIR"/bin/* "$DIR"/peers/*; do
    { ldd "$b" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so.*|libm.so.*|libgcc_s.so.*|ld-linux*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
        *) cp -L "$lib" "$DIR/lib/" ;;
    esac
done
git -C "$REPO" rev-parse --short HEAD > "$DIR/REVISION"
du -sh "$DIR"
