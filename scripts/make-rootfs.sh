#!/usr/bin/env bash
# make-rootfs.sh DIR — build a minimal busybox root filesystem in DIR.
#
# Copies the static busybox (package busybox-static) to DIR/bin/busybox,
# symlinks every applet it reports with `busybox --list` into DIR/bin,
# and writes etc/passwd and etc/group (root and nobody) plus the usual
# empty mount-point directories. Idempotent: running it again on the
# same DIR refreshes the binary/links and leaves everything else alone.
set -euo pipefail

die() { echo "make-rootfs.sh: error: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 DIR"
DIR=$1

BUSYBOX=${BUSYBOX:-}
if [ -z "$BUSYBOX" ]; then
    for c in /bin/busybox /usr/bin/busybox; do
        if [ -x "$c" ]; then BUSYBOX=$c; break; fi
    done
fi
[ -n "$BUSYBOX" ] && [ -x "$BUSYBOX" ] || die "busybox not found (apt-get install busybox-static, or run scripts/setup-deps.sh)"
# A dynamically linked busybox would not run inside the container rootfs.
if command -v file >/dev/null 2>&1 && file -L "$BUSYBOX" | grep -q 'dynamically linked'; then
    die "$BUSYBOX is dynamically linked; install busybox-static"
fi

mkdir -p "$DIR"
cd "$DIR"
mkdir -p bin sbin usr/bin usr/sbin etc proc sys dev tmp root home var/tmp run
chmod 1777 tmp var/tmp
chmod 0700 root

# Copy (not hard-link: the rootfs may live on another filesystem and must
# not share an inode with the host binary). Only rewrite when it differs.
if ! cmp -s "$BUSYBOX" bin/busybox 2>/dev/null; then
    rm -f bin/busybox
    cp "$BUSYBOX" bin/busybox.tmp.$$
    chmod 0755 bin/busybox.tmp.$$
    mv -f bin/busybox.tmp.$$ bin/busybox
fi

# One symlink per applet, all in bin/ (simple PATH=/bin:/sbin:... works).
for applet in $("$BUSYBOX" --list); do
    [ "$applet" = busybox ] && continue
    link="bin/$applet"
    if [ "$(readlink "$link" 2>/dev/null || true)" != busybox ]; then
        ln -sfn busybox "$link"
    fi
done

if [ ! -e etc/passwd ]; then
    cat > etc/passwd <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
fi
if [ ! -e etc/group ]; then
    cat > etc/group <<'GROUP'
root:x:0:
nobody:x:65534:
GROUP
fi
[ -e etc/hostname ] || echo sprout > etc/hostname
[ -e etc/hosts ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' > etc/hosts
[ -e etc/resolv.conf ] || : > etc/resolv.conf
