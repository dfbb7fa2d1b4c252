#!/usr/bin/env bash
# tests/clients/containerd2.sh — install containerd 2.x (containerd + containerd-shim-runc-v2) from
# the Go module proxy, once (cached by version), and print the directory holding the two binaries.
#
#   tests/clients/containerd2.sh [VERSION]   # -> $CACHE/containerd-VERSION/bin (built when missing)
#   tests/clients/containerd2.sh --versions  # the versions the clients suite uses (default list)
#
# VERSION: the argument, else $CONTAINERD2_VERSION, else the first of the default list.
# Debian 12's containerd is 1.6, whose CRI plugin has no CheckpointContainer (kubelet's checkpoint
# API; containerd#6965, 2.0). The clients suite's cri2 checks (tests/clients/run.sh, run_cri2) run:
#   2.4.2  the newest 2.x the proxy serves: CheckpointContainer
#   2.3.7  the newest with the restore through CRI CreateContainer (containerd#10365; deprecated in
#          2.3, enable_experimental_restore_via_create; removed in 2.4, RELEASES.md)
#
#   go install -tags no_btrfs github.com/containerd/containerd/v2/cmd/containerd@vVERSION \
#                             github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@vVERSION
#
# Cache: ${SPROUT_CI_CACHE:-/var/cache/sprout-ci}/containerd-VERSION/bin. Needs go >= the module's
# go directive (2.4.2: 1.26.6, 2.3.7: 1.26.8; GOTOOLCHAIN is left as it is) and the Go module proxy.
# Build time on 2 cores: 55-70 s a version with the Go build cache warm, 90 s with it empty (2.4.2,
# modules already downloaded); scripts/setup-deps.sh step 6 does it once. Cached: instant.
# Logs on stderr; stdout is the directory.
set -euo pipefail
VERSIONS="2.4.2 2.3.7"
if [ "${1:-}" = --versions ]; then
    echo "$VERSIONS"
    exit 0
fi
CACHE=${SPROUT_CI_CACHE:-/var/cache/sprout-ci}
VERSION=${1:-${CONTAINERD2_VERSION:-${VERSIONS%% *}}}
VERSION=${VERSION#v}
case "$VERSION" in 2.*) ;; *) echo "containerd2.sh: not a containerd 2.x version: $VERSION" >&2; exit 2 ;; esac
export PATH="/usr/local/go/bin:$PATH"
dir=$CACHE/containerd-$VERSION/bin

if [ -x "$dir/containerd" ] && [ -x "$dir/containerd-shim-runc-v2" ]; then
    echo "$dir"
    exit 0
fi
command -v go >/dev/null || { echo "containerd2.sh: no go toolchain (scripts/setup-deps.sh)" >&2; exit 1; }

echo "==> containerd $VERSION (go install from the module proxy)" >&2
t0=$(date +%s)
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/.containerd-$VERSION.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Outside any module (the caller's directory may be one); btrfs left out (no libbtrfs headers).
cd "$tmp"
GOBIN="$tmp/bin" GOFLAGS="-trimpath -buildvcs=false" go install -tags no_btrfs \
    "github.com/containerd/containerd/v2/cmd/containerd@v$VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v$VERSION" >&2
mkdir -p "$dir"
mv "$tmp/bin/containerd-shim-runc-v2" "$dir/"
mv "$tmp/bin/containerd" "$dir/"   # last: with the shim there, its presence marks a complete install
echo "    $("$dir/containerd" --version) in $(( $(date +%s) - t0 ))s" >&2
echo "$dir"
