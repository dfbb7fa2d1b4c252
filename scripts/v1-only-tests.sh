#!/usr/bin/env bash
# scripts/v1-only-tests.sh — the integration, security and serve suites again on a cgroup v1
# host without a cgroup2 hierarchy (systemd's "legacy" layout: RHEL and CentOS 7 and 8, Amazon
# Linux 2), emulated on a hybrid host (step 2b of scripts/test.sh):
#   - integration and security: SPROUT_TEST_PURE_V1=1, so every runtime command a test makes
#     runs in a mount namespace of its own where /sys/fs/cgroup/unified is unmounted
#     (tests/support: Ctx::emulate_pure_v1);
#   - serve: the whole test process, and so every engine it starts, in such a namespace.
# The host's mounts are not changed. On a host that is not hybrid it prints why it skipped and
# exits 77 (scripts/test.sh reports the step as skipped). Same build flags as step 2, so nothing is rebuilt. Exit status: 1 if a suite failed.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

if [ ! -e /sys/fs/cgroup/unified/cgroup.procs ] || [ ! -d /sys/fs/cgroup/memory ]; then
    echo "v1-only: skipped: emulates a v1-only host by hiding the cgroup2 mount of a hybrid one" \
        "(v1 hierarchies and /sys/fs/cgroup/unified); this host is not hybrid"
    exit 77
fi
if [ "$(id -u)" != 0 ]; then
    echo "v1-only: skipped: needs root (a mount namespace of its own)"
    exit 77
fi

if [ "${SPROUT_TEST_FULL_PROFILE:-0}" = 1 ]; then
    build=(env)
else
    build=(env CARGO_TARGET_DIR="$REPO/target/ci-tests" CARGO_PROFILE_RELEASE_LTO=off
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16)
fi

rc=0
SPROUT_TEST_PURE_V1=1 "$HERE/cargo-test.sh" "$REPO/build/v1-only-tests.log" "${build[@]}" \
    cargo test --release --no-fail-fast -p sprout-integration-tests -p sprout-security-tests \
    -- --test-threads=2 --show-output || rc=1
# shellcheck disable=SC2016
"$HERE/cargo-test.sh" "$REPO/build/v1-only-serve.log" \
    unshare -m --propagation private sh -c 'umount /sys/fs/cgroup/unified && exec "$@"' sh \
    "${build[@]}" cargo test --release --no-fail-fast -p sprout-serve --test serve \
    -- --test-threads=2 --show-output || rc=1
exit "$rc"
