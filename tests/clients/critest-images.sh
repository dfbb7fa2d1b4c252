#!/usr/bin/env bash
# tests/clients/critest-images.sh OUTDIR — local stand-ins for the images critest (cri-tools)
# pulls, as docker archives for `ctr -n k8s.io images import`: nothing is pulled here.
#
# From busybox-static and two small static C programs (cc needed):
#   registry.k8s.io/e2e-test-images/busybox:1.29-2   applets as hard links (a masked /bin/ls must
#                                                    not mask busybox itself), pgrep and ipcs
#                                                    (missing from Debian's busybox) as scripts
#   registry.k8s.io/e2e-test-images/nginx:1.14-2     a process named nginx writing its pid file
#   registry.k8s.io/e2e-test-images/httpd:2.4.39-4   busybox httpd on port 80
#   registry.k8s.io/e2e-test-images/nonewprivs:1.3   a setuid-root program printing its euid
#   gcr.io/k8s-staging-cri-tools/test-image-*        the user / group images (USER set)
#   localhost/pause:sprout (pause.tar)               a pause(2) loop that reaps children: with a
#                                                    shared pod pid namespace critest looks for
#                                                    its own processes by name, and run.sh's
#                                                    `sleep inf` sandbox would match
# Exit status: 0 when every archive was written.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: critest-images.sh OUTDIR}
mkdir -p "$OUT"
W=$(mktemp -d "$OUT/work.XXXXXX")
trap 'rm -rf "$W"' EXIT
BB=$(command -v busybox || echo /bin/busybox)
[ -x "$BB" ] && ! ldd "$BB" >/dev/null 2>&1 || { echo "critest-images: needs busybox-static" >&2; exit 1; }
command -v cc >/dev/null || { echo "critest-images: needs a C compiler (cc)" >&2; exit 1; }

cat >"$W/nnp.c" <<'EOF'
#include <stdio.h>
#include <unistd.h>
int main(void) { printf("Effective uid: %d\n", (int)geteuid()); return 0; }
EOF
cat >"$W/pause.c" <<'EOF'
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
static void term(int s) { (void)s; _exit(0); }
static void chld(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0) ; }
int main(void) {
    signal(SIGINT, term); signal(SIGTERM, term); signal(SIGCHLD, chld);
    for (;;) pause();
}
EOF
cc -static -O2 -o "$W/nnp" "$W/nnp.c"
cc -static -O2 -o "$W/pause" "$W/pause.c"

base() { # rootfs dir: busybox with symlinked applets, the users and groups critest's images have
  local r=$1 a
  mkdir -p "$r"/{bin,etc,tmp,proc,sys,dev,root,var/run}
  chmod 1777 "$r/tmp"
  cp "$BB" "$r/bin/busybox"
  for a in $("$r/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'www-data:x:33:33:www-data:/var/www:/bin/false' \
    'default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh' \
    'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'www-data:x:33:' 'default-user:x:1000:' \
    'group-defined-in-image:x:50000:default-user' 'nogroup:x:65534:' >"$r/etc/group"
}
archive() { # rootfs out.tar repo:tag image-config-json (merged over Env and Cmd)
  tar -C "$1" -cf "$W/layer.tar" .
  python3 "$HERE/docker_archive.py" "$W/layer.tar" "$2" "$3" "$4"
}

R=gcr.io/k8s-staging-cri-tools
E=registry.k8s.io/e2e-test-images
base "$W/u"
archive "$W/u" "$OUT/user-uid.tar" $R/test-image-user-uid:latest '{"User":"1002"}'
archive "$W/u" "$OUT/user-username.tar" $R/test-image-user-username:latest '{"User":"www-data"}'
archive "$W/u" "$OUT/user-uid-group.tar" $R/test-image-user-uid-group:latest '{"User":"1003:1003"}'
archive "$W/u" "$OUT/user-username-group.tar" $R/test-image-user-username-group:latest '{"User":"www-data:www-data"}'
archive "$W/u" "$OUT/predefined-group.tar" $R/test-image-predefined-group:latest '{"User":"1000"}'

base "$W/n"
printf '#!/bin/sh\necho $$ > /var/run/nginx.pid\nwhile :; do sleep 1; done\n' >"$W/n/bin/nginx"
chmod 755 "$W/n/bin/nginx"
archive "$W/n" "$OUT/nginx.tar" $E/nginx:1.14-2 '{"Cmd":["/bin/nginx","nginx: master process"]}'

base "$W/h"
archive "$W/h" "$OUT/httpd.tar" $E/httpd:2.4.39-4 \
  '{"Cmd":["sh","-c","mkdir -p /www; echo It works > /www/index.html; echo httpd -D FOREGROUND; exec httpd -f -p 80 -h /www"]}'

base "$W/p"
mkdir -p "$W/p/usr/local/bin"
install -o 0 -g 0 -m 4755 "$W/nnp" "$W/p/usr/local/bin/nnp"
archive "$W/p" "$OUT/nonewprivs.tar" $E/nonewprivs:1.3 '{"Cmd":["/usr/local/bin/nnp"]}'

base "$W/b"
for a in $("$W/b/bin/busybox" --list); do [ "$a" = busybox ] || ln -f "$W/b/bin/busybox" "$W/b/bin/$a"; done
printf '%s\n' '#!/bin/sh' \
  'for d in /proc/[0-9]*; do c=$(cat $d/comm 2>/dev/null) || continue; case "$c" in *"$1"*) echo ${d#/proc/};; esac; done | grep .' \
  >"$W/b/bin/pgrep"
printf '%s\n' '#!/bin/sh' '# ipcs -m: the shared memory segments of this IPC namespace' 'cat /proc/sysvipc/shm' >"$W/b/bin/ipcs"
chmod 755 "$W/b/bin/pgrep" "$W/b/bin/ipcs"
archive "$W/b" "$OUT/busybox-e2e.tar" $E/busybox:1.29-2 '{}'

mkdir -p "$W/pz"
cp "$W/pause" "$W/pz/pause"
archive "$W/pz" "$OUT/pause.tar" localhost/pause:sprout '{"Cmd":null,"Entrypoint":["/pause"]}'
ls "$OUT"/*.tar
