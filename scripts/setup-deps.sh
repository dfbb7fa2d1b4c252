#!/usr/bin/env bash
# setup-deps.sh — install everything sprout's build, tests and the OCI
# compliance suite need. Idempotent and fast when already done: each step
# checks before it installs anything.
#
#   1. apt packages (apt-get update only when something is missing)
#   2. cargo/rustc (rustup's ~/.cargo/bin put on PATH)
#   3. Go and the OCI runtime-tools validation programs + static runtimetest
#      + rootfs-amd64.tar.gz, pinned, cached under $SPROUT_CI_CACHE
#   4. node-tap 16 (TAP-13 consumer), in a local npm prefix in the cache
#   5. CRIU for checkpoint/restore: Debian's; where its `criu check` fails (bookworm's 3.17 on
#      kernels >= 6.15: "Unexpected rt vDSO area bounds"), trixie's criu 4.1 with the libraries
#      it needs, unpacked into the cache and run through its own loader by /usr/local/sbin/criu
#   6. containerd 2.x (tests/clients/containerd2.sh, go install from the module proxy, cached
#      under $SPROUT_CI_CACHE): the clients suite's CRI checkpoint checks (cri2); 1-1.5 min a
#      version on 2 cores when not cached; a failure here only makes those checks SKIP
#
# Environment: SPROUT_CI_CACHE (default ~/.cache/sprout-ci),
#              SETUP_DEPS_FORCE=1 to rebuild the cached Go/npm parts.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/ci-env.sh
. "$HERE/ci-env.sh"

STEP="start"
step() { STEP=$1; echo "==> setup-deps: $1"; }
on_err() {
    local rc=$?
    echo "" >&2
    echo "setup-deps.sh: FAILED in step: $STEP (exit $rc, line ${BASH_LINENO[0]})" >&2
    exit "$rc"
}
trap on_err ERR
die() { echo "setup-deps.sh: FAILED in step: $STEP: $*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo"
    SUDO="sudo -n"
fi

T0=$(date +%s)

# ---------------------------------------------------------------- 1. apt
step "apt packages"
# busybox-static..strace: what the brief lists; build-essential: cargo's
# linker; python3 + python3-pip: sprout-serve's tests (zygote, wheels);
# dbus + python3-dbus + python3-gi: the systemd cgroup driver test runs a private
# dbus-daemon with a fake systemd (tests/integration/fake-systemd);
# podman, containerd, docker.io: the real-client suite (tests/clients/run.sh, test.sh step 5),
# installed without recommends, so what that suite needs beyond them is named here:
#   catatonit: podman's pause process for pods (`pod create`: "finding pause binary") and
#     `run --init` (podman only recommends it);
#   containernetworking-plugins: podman 4.3's CNI network backend (the suite's own bridge
#     network) and the containerd CRI plugin's bin_dir /usr/lib/cni;
#   iptables: the CNI bridge/firewall plugins (and dockerd) call it; tini: docker run --init;
#   uidmap: newuidmap/newgidmap for podman's user namespaces; iproute2 (ip), procps (pgrep):
#     the suite's own host-side checks;
# musl-tools: musl-gcc for the musl build of sprout (scripts/build.sh);
# the rest is usually there already (checked, not reinstalled).
APT_PKGS=(busybox-static libseccomp-dev musl-tools pkg-config crun runc hyperfine strace
          build-essential python3 python3-pip file dbus python3-dbus python3-gi
          podman containerd docker.io
          catatonit containernetworking-plugins iptables tini uidmap iproute2 procps
          ca-certificates git util-linux coreutils tar gzip criu)
missing=()
for p in "${APT_PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
# node/npm and go may come from outside apt (nodesource, go.dev tarball);
# only fall back to Debian's packages when the commands are absent.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ! command -v go >/dev/null 2>&1; then missing+=(golang-go); fi
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install manually: ${missing[*]}"
    echo "    installing: ${missing[*]}"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    echo "    all present"
fi
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || die "busybox missing after install"

# ---------------------------------------------------------------- 2. cargo
step "rust toolchain (cargo)"
if ! command -v cargo >/dev/null 2>&1; then
    die "cargo not found (looked in PATH and ${CARGO_HOME:-$HOME/.cargo}/bin); install rustup: https://rustup.rs"
fi
cargo --version >/dev/null || die "'cargo --version' failed (rustup toolchain not installed? try: rustup default stable)"
echo "    $(cargo --version)"
# sprout itself is built for musl when this target is there (scripts/build.sh says why); without
# it the build falls back to glibc, slower to start but the same runtime, so a failed download
# is reported, not fatal.
if command -v rustup >/dev/null 2>&1; then
    if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
        rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1 \
            && echo "    added rust target x86_64-unknown-linux-musl" \
            || echo "    WARNING: rustup target add x86_64-unknown-linux-musl failed: sprout will be built against glibc" >&2
    fi
fi

# ---------------------------------------------------------------- 3. go + runtime-tools
step "go toolchain"
command -v go >/dev/null 2>&1 || die "go not found (looked in PATH and /usr/local/go/bin)"
echo "    $(go version)"

step "OCI runtime-tools validation suite ($RUNTIME_TOOLS_VERSION)"
RT_BIN="$RUNTIME_TOOLS_DIR/bin"
RT_STAMP="$RUNTIME_TOOLS_DIR/.complete"
if [ -f "$RT_STAMP" ] && [ -z "${SETUP_DEPS_FORCE:-}" ] \
   && [ -x "$RT_BIN/runtimetest" ] && [ -x "$RT_BIN/default" ] \
   && [ -s "$RUNTIME_TOOLS_DIR/rootfs-amd64.tar.gz" ]; then
    echo "    cached in $RUNTIME_TOOLS_DIR ($(ls "$RT_BIN" | wc -l) binaries)"
else
    rm -rf "$RUNTIME_TOOLS_DIR.tmp"
    mkdir -p "$RUNTIME_TOOLS_DIR.tmp/bin" "$RUNTIME_TOOLS_DIR.tmp/validation"
    # Run outside any Go module (the repo may grow a go.mod some day).
    gowork=$(mktemp -d)
    pushd "$gowork" >/dev/null
    export GOFLAGS="${GOFLAGS:--buildvcs=false}"
    STEP="runtime-tools: go mod download"
    moddir=$(go mod download -json "$RUNTIME_TOOLS_MODULE@$RUNTIME_TOOLS_VERSION" \
             | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
    [ -n "$moddir" ] && [ -d "$moddir" ] || die "could not locate module dir for $RUNTIME_TOOLS_MODULE@$RUNTIME_TOOLS_VERSION"
    cp "$moddir/rootfs-amd64.tar.gz" "$RUNTIME_TOOLS_DIR.tmp/"
    # Keep the sources of the validation programs next to the binaries:
    # handy to read why a test fails.
    cp -r "$moddir/validation/." "$RUNTIME_TOOLS_DIR.tmp/validation/"
    chmod -R u+w "$RUNTIME_TOOLS_DIR.tmp"
    STEP="runtime-tools: go install validation/..."
    GOBIN="$RUNTIME_TOOLS_DIR.tmp/bin" go install "$RUNTIME_TOOLS_MODULE/validation/...@$RUNTIME_TOOLS_VERSION"
    STEP="runtime-tools: go install cmd/runtimetest (static)"
    CGO_ENABLED=0 GOBIN="$RUNTIME_TOOLS_DIR.tmp/bin" go install -tags netgo,osusergo \
        -ldflags "-extldflags -static" "$RUNTIME_TOOLS_MODULE/cmd/runtimetest@$RUNTIME_TOOLS_VERSION"
    popd >/dev/null
    rm -rf "$gowork"
    STEP="runtime-tools: verify"
    [ -x "$RUNTIME_TOOLS_DIR.tmp/bin/runtimetest" ] || die "runtimetest was not built"
    if command -v file >/dev/null 2>&1; then
        file "$RUNTIME_TOOLS_DIR.tmp/bin/runtimetest" | grep -q 'statically linked' \
            || die "runtimetest is not statically linked"
    fi
    n=$(find "$RUNTIME_TOOLS_DIR.tmp/bin" -type f ! -name runtimetest | wc -l)
    [ "$n" -ge 50 ] || die "only $n validation programs were built (expected ~58)"
    echo "$RUNTIME_TOOLS_MODULE@$RUNTIME_TOOLS_VERSION $(go version)" > "$RUNTIME_TOOLS_DIR.tmp/.complete"
    rm -rf "$RUNTIME_TOOLS_DIR"
    mv "$RUNTIME_TOOLS_DIR.tmp" "$RUNTIME_TOOLS_DIR"
    echo "    built $n validation programs + runtimetest into $RT_BIN"
fi

# ---------------------------------------------------------------- 4. node-tap
step "node-tap $NODE_TAP_VERSION"
command -v node >/dev/null 2>&1 || die "node not found"
if [ -f "$NODE_TAP_PREFIX/.complete" ] && [ -z "${SETUP_DEPS_FORCE:-}" ] \
   && [ -f "$NODE_TAP_PREFIX/node_modules/tap-parser/package.json" ] \
   && [ -x "$NODE_TAP_PREFIX/node_modules/.bin/tap" ]; then
    echo "    cached in $NODE_TAP_PREFIX"
else
    rm -rf "$NODE_TAP_PREFIX"
    mkdir -p "$NODE_TAP_PREFIX"
    # A package.json keeps npm from walking up into a parent project.
    echo '{"name":"sprout-ci-node-tap","private":true}' > "$NODE_TAP_PREFIX/package.json"
    npm install --prefix "$NODE_TAP_PREFIX" --no-audit --no-fund --loglevel=error \
        "tap@$NODE_TAP_VERSION" 2>&1 | grep -v 'Unknown user config' || true
    [ -f "$NODE_TAP_PREFIX/node_modules/tap-parser/package.json" ] || die "npm install tap@$NODE_TAP_VERSION failed"
    node -e "require('$NODE_TAP_PREFIX/node_modules/tap-parser')" || die "tap-parser does not load"
    touch "$NODE_TAP_PREFIX/.complete"
fi
echo "    $("$NODE_TAP_PREFIX/node_modules/.bin/tap" --version 2>/dev/null | head -1)"

# ---------------------------------------------------------------- 5. CRIU
step "CRIU (checkpoint/restore)"
CRIU_DIR="$SPROUT_CI_CACHE/criu-trixie"
if criu check >/dev/null 2>&1; then
    echo "    $(command -v criu): $(criu --version 2>/dev/null | head -1), criu check passes"
else
    why=$(criu check 2>&1 | grep -m1 Error || true)
    echo "    $(command -v criu || echo criu): criu check fails here: ${why:-?}"
    if [ ! -f "$CRIU_DIR/.complete" ] || [ -n "${SETUP_DEPS_FORCE:-}" ]; then
        # Debian 13's criu and every library it loads that Debian 12 lacks or has too old,
        # downloaded (not installed) from the same mirror with a private apt state.
        rm -rf "$CRIU_DIR.tmp"; mkdir -p "$CRIU_DIR.tmp"/{lists/partial,archives/partial,debs,root}
        # The host's first apt URI (as tests/vm/image.sh picks it), else Debian's.
        MIRROR=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources \
                   /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}' || true)
        MIRROR=${MIRROR:-http://deb.debian.org/debian}
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${MIRROR%/} trixie main" \
            > "$CRIU_DIR.tmp/sources.list"
        APT_T=(-o Dir::Etc::SourceList="$CRIU_DIR.tmp/sources.list" -o Dir::Etc::SourceParts=/nonexistent
               -o Dir::State::Lists="$CRIU_DIR.tmp/lists" -o Dir::Cache="$CRIU_DIR.tmp"
               -o Dir::State::Status=/dev/null -o APT::Sandbox::User=root)
        if apt-get "${APT_T[@]}" update -qq >/dev/null 2>&1 \
           && (cd "$CRIU_DIR.tmp/debs" && apt-get "${APT_T[@]}" download -qq criu libc6 libprotobuf-c1 \
                 libnl-3-200 libnet1 libgnutls30t64 libbsd0 libnftables1 libcap2 libmd0 libnftnl11 \
                 libmnl0 libjansson4 libxtables12 libgmp10 libnettle8t64 libhogweed6t64 libidn2-0 \
                 libunistring5 libtasn1-6 libp11-kit0 libffi8 libuuid1 libedit2 libtinfo6 >/dev/null 2>&1); then
            for d in "$CRIU_DIR.tmp"/debs/*.deb; do dpkg-deb -x "$d" "$CRIU_DIR.tmp/root"; done
            rm -rf "$CRIU_DIR.tmp"/{lists,archives,debs,pkgcache.bin,srcpkgcache.bin}
            touch "$CRIU_DIR.tmp/.complete"
            rm -rf "$CRIU_DIR"; mv "$CRIU_DIR.tmp" "$CRIU_DIR"
        else
            echo "    WARNING: could not download trixie's criu from $MIRROR: the checkpoint tests will be skipped" >&2
            rm -rf "$CRIU_DIR.tmp"
        fi
    fi
    if [ -f "$CRIU_DIR/.complete" ]; then
        R="$CRIU_DIR/root"
        $SUDO install -d /usr/local/sbin
        printf '#!/bin/sh\n# Debian 13 criu with its own loader and libraries (scripts/setup-deps.sh, step 5)\nexec %s --library-path %s %s "$@"\n' \
            "$R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$R/usr/lib/x86_64-linux-gnu" "$R/usr/sbin/criu" \
            | $SUDO tee /usr/local/sbin/criu.tmp >/dev/null
        $SUDO chmod 755 /usr/local/sbin/criu.tmp
        if /usr/local/sbin/criu.tmp check >/dev/null 2>&1; then
            $SUDO mv /usr/local/sbin/criu.tmp /usr/local/sbin/criu
            echo "    /usr/local/sbin/criu: $(/usr/local/sbin/criu --version | head -1) (Debian 13), criu check passes"
        else
            $SUDO rm -f /usr/local/sbin/criu.tmp
            echo "    WARNING: trixie's criu fails criu check too: the checkpoint tests will be skipped" >&2
        fi
    fi
fi

# ---------------------------------------------------------------- 6. containerd 2
step "containerd 2 (CRI CheckpointContainer for tests/clients/run.sh cri2)"
mkdir -p "$SPROUT_CI_CACHE"
for v in $("$HERE/../tests/clients/containerd2.sh" --versions); do
    if d=$("$HERE/../tests/clients/containerd2.sh" "$v" 2>"$SPROUT_CI_CACHE/containerd-$v.log"); then
        echo "    $d: $("$d/containerd" --version | awk '{print $3}')"
    else
        echo "    WARNING: containerd $v could not be built (the cri2 checks will skip it): $(tail -1 "$SPROUT_CI_CACHE/containerd-$v.log")" >&2
    fi
done

# ---------------------------------------------------------------- kernel features
step "host checks"
[ -d /sys/fs/cgroup ] || echo "    WARNING: /sys/fs/cgroup is missing; cgroup tests will fail" >&2
unshare -m --propagation private true || die "unshare -m does not work (need root / CAP_SYS_ADMIN)"

echo "==> setup-deps: done in $(( $(date +%s) - T0 ))s"
