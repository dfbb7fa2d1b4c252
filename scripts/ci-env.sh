# shellcheck shell=bash
# ci-env.sh — shared settings for scripts/setup-deps.sh, scripts/test.sh,
# tests/compliance/run.sh and .ci/run. Source it; don't execute it.
#
# Everything downloaded/built for CI lives under $SPROUT_CI_CACHE
# (default ~/.cache/sprout-ci), outside the repository, so a fresh clone on
# a machine that already ran CI once does not rebuild anything.

# Pinned OCI runtime-tools (validation suite) version: a pseudo-version of
# github.com/opencontainers/runtime-tools master (2025-05-23).
: "${RUNTIME_TOOLS_MODULE:=github.com/opencontainers/runtime-tools}"
: "${RUNTIME_TOOLS_VERSION:=v0.9.1-0.20250523060157-0ea5ed0382a2}"
# Pinned node-tap (TAP-13 consumer; we use its tap-parser).
: "${NODE_TAP_VERSION:=16.3.10}"

# CI may start us with a bare environment; Go and npm need a HOME.
if [ -z "${HOME:-}" ]; then
    HOME=$(getent passwd "$(id -u)" | cut -d: -f6); HOME=${HOME:-/root}; export HOME
fi

: "${SPROUT_CI_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/sprout-ci}"
: "${RUNTIME_TOOLS_DIR:=$SPROUT_CI_CACHE/runtime-tools-$RUNTIME_TOOLS_VERSION}"
: "${NODE_TAP_PREFIX:=$SPROUT_CI_CACHE/node-tap-$NODE_TAP_VERSION}"
export RUNTIME_TOOLS_MODULE RUNTIME_TOOLS_VERSION NODE_TAP_VERSION
export SPROUT_CI_CACHE RUNTIME_TOOLS_DIR NODE_TAP_PREFIX

# Toolchains that are usually installed outside the default PATH.
_sprout_path_add() {
    case ":$PATH:" in *":$1:"*) ;; *) if [ -d "$1" ]; then PATH="$1:$PATH"; fi ;; esac
    return 0
}
_sprout_path_add /usr/local/go/bin
_sprout_path_add "${CARGO_HOME:-$HOME/.cargo}/bin"
unset -f _sprout_path_add
export PATH

# Nobody is there to answer prompts in CI.
export DEBIAN_FRONTEND=noninteractive
