#!/usr/bin/env bash
# tests/k8s/run.sh — the Kubernetes node test from the host: builds (or reuses) the Kubernetes
# binaries (tests/k8s/build.sh), boots the project's test VM (tests/vm) and runs tests/k8s/node.sh
# in it, through tests/vm/run.sh's `k8s` suite. Arguments go to tests/vm/run.sh (--keep-vm, --fresh).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
exec bash "$REPO/tests/vm/run.sh" --suites k8s "$@"
