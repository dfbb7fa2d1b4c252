#!/bin/sh
# crun-wrapper.sh — run crun (reference runtime) on this hybrid cgroup host.
#
# crun 1.8 refuses hosts that mount cgroup v1 controllers *and* a cgroup2
# hierarchy at /sys/fs/cgroup/unified ("hybrid" mode). Each invocation runs
# crun in a private mount namespace with the unified mount removed, so
# crun sees plain cgroup v1. Nothing changes on the host.
#
#   tests/compliance/run.sh tests/compliance/crun-wrapper.sh
#
# CRUN=/path/to/crun selects the binary (default: crun in PATH).
exec unshare -m --propagation private sh -c \
    'umount /sys/fs/cgroup/unified 2>/dev/null; exec "${CRUN:-crun}" "$@"' crun "$@"
