#!/usr/bin/env bash
# scripts/fuzz-short.sh [SECONDS] — a short run of every cargo-fuzz target in fuzz/ (CI's fuzz
# step; longer runs by hand: see docs/security.md).
#
# Builds the targets with the stable toolchain: the same sanitizer-coverage instrumentation
# cargo-fuzz uses (`--sanitizer none`), so neither nightly nor cargo-fuzz is needed. Each target
# runs SECONDS (default 15) from the checked-in seeds and corpus; new inputs go to a temporary
# directory, never into the repository. Any crash, panic, timeout or OOM fails the script, and
# the reproducer is kept under target/fuzz-artifacts/.
set -euo pipefail
SECS=${1:-15}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR="$REPO/target/fuzz-stable"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target keeps RUSTFLAGS away from build scripts (they can't link the coverage hooks).
(cd "$REPO/fuzz" && cargo build --release --bins --target "$TRIPLE")
BIN="$CARGO_TARGET_DIR/$TRIPLE/release"
ART="$REPO/target/fuzz-artifacts"
mkdir -p "$ART"
WORK=$(mktemp -d /tmp/sprout-fuzz.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail=0
for t in config_json process_json seccomp_key seccomp_cache dbus_decode; do
    mkdir -p "$WORK/$t"
    dirs=("$WORK/$t")
    for d in "$REPO/fuzz/seeds/$t" "$REPO/fuzz/corpus/$t"; do [ -d "$d" ] && dirs+=("$d"); done
    echo "fuzz-short: $t for ${SECS}s"
    if "$BIN/$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$ART/$t-" "${dirs[@]}" > "$WORK/$t.log" 2>&1; then
        grep -E "^(stat::number_of_executed_units|Done)" "$WORK/$t.log" | tail -1 | sed 's/^/    /'
    else
        fail=1
        echo "fuzz-short: $t FAILED; last lines:" >&2
        tail -30 "$WORK/$t.log" >&2
    fi
done
if [ "$fail" = 1 ]; then
    echo "fuzz-short: a target crashed (reproducers in $ART)" >&2
    exit 1
fi
echo "fuzz-short: all targets ran ${SECS}s without a crash"
