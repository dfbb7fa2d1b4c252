#!/usr/bin/env bash
# bench/peers.sh — install the newest peers that bench/startup compares sprout with, from the
# registries, once (cached by version), and print the bench/startup flags that add them:
#
#   runc 1.5.1   go install -tags seccomp github.com/opencontainers/runc@v1.5.1
#                (without the tag runc has no seccomp and fails on podman-default)
#   youki 0.7.0  cargo install youki --version 0.7.0 --no-default-features --features v1,v2,seccomp
#                (the default features lack cgroup v1: it fails on a hybrid host)
#   crun         as Debian ships it (apt; bench/startup runs it in its hybrid-host wrapper)
#
# usage: bench/peers.sh [--print]      (--print: only print the flags of what is installed)
#   bench/startup $(bench/peers.sh --print) ...
# Cache: $SPROUT_BENCH_PEERS (default /var/cache/sprout-bench/peers)/<name>-<version>/bin/<name>.
# Not part of the test run. Needs go (scripts/setup-deps.sh), cargo, gcc, libseccomp-dev and
# pkg-config (installed here when missing). Builds: runc ~2-3 min, youki ~10-15 min on 2 cores.
set -euo pipefail
CACHE=${SPROUT_BENCH_PEERS:-/var/cache/sprout-bench/peers}
RUNC_VERSION=${RUNC_VERSION:-1.5.1}
YOUKI_VERSION=${YOUKI_VERSION:-0.7.0}
export PATH="/usr/local/go/bin:$HOME/.cargo/bin:$PATH"
runc_bin=$CACHE/runc-$RUNC_VERSION/bin/runc
youki_bin=$CACHE/youki-$YOUKI_VERSION/bin/youki

flags() {
    [ -x "$runc_bin" ] && printf -- '--peer runc-%s=%s ' "$RUNC_VERSION" "$runc_bin"
    [ -x "$youki_bin" ] && printf -- '--peer youki-%s=%s ' "$YOUKI_VERSION" "$youki_bin"
    echo
}
if [ "${1:-}" = --print ]; then
    flags
    exit 0
fi

need=()
for p in gcc libseccomp-dev pkg-config; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${need[@]}"
fi
mkdir -p "$CACHE"
if [ ! -x "$runc_bin" ]; then
    echo "==> peers: runc $RUNC_VERSION (go install, seccomp)" >&2
    t0=$(date +%s)
    tmp=$(mktemp -d)
    GOBIN="$tmp" CGO_ENABLED=1 GOFLAGS=-trimpath go install -tags seccomp \
        "github.com/opencontainers/runc@v$RUNC_VERSION"
    mkdir -p "$(dirname "$runc_bin")" && mv "$tmp/runc" "$runc_bin" && rm -rf "$tmp"
    echo "    $("$runc_bin" --version | head -1) in $(( $(date +%s) - t0 ))s" >&2
fi
if [ ! -x "$youki_bin" ]; then
    echo "==> peers: youki $YOUKI_VERSION (cargo install, v1 + v2 + seccomp)" >&2
    t0=$(date +%s)
    cargo install --locked youki --version "$YOUKI_VERSION" --no-default-features \
        --features v1,v2,seccomp --root "$CACHE/youki-$YOUKI_VERSION" \
        --target-dir "$CACHE/.youki-build" 2>&1 | tail -3 >&2
    rm -rf "$CACHE/.youki-build"
    echo "    $("$youki_bin" --version | head -1) in $(( $(date +%s) - t0 ))s" >&2
fi
flags
