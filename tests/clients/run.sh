#!/usr/bin/env bash
# Drive sprout from real container engines (podman, containerd/ctr, Docker), end to end,
# each check also run with runc as the reference.
#
#   tests/clients/run.sh [--only podman|containerd|docker|cri|cri2] [--no-ref] [--keep]
#
# Env: SPROUT (default: <repo>/target/release/sprout), REF_RUNC (default: runc on PATH),
#      CRITEST (critest binary; default: critest on PATH or ~/go/bin/critest; its images are
#      made by critest-images.sh), CRITEST_SKIP, CRITEST_ARGS, CRITEST_TIMEOUT,
#      CRI2_VERSIONS (containerd 2 versions for the cri2 checks; tests/clients/containerd2.sh).
# Needs root. Everything lives in a fresh temp dir: a private podman --root/--runroot,
# a private containerd and a private dockerd (own sockets, data and state dirs), all
# stopped by pid and removed at exit. Nothing shared with other users of the host is used or
# touched: the podman checks run on a bridge network of their own (unique name, unique bridge
# interface, a subnet no host route or address uses), containerd's CRI pods on a CNI bridge of
# their own, dockerd runs with --bridge=none and its own cgroup parent, ctr in a namespace of its
# own; each is removed at exit (never docker0, cni-podman0/podman0 or the `podman` network that
# another podman on the host may have). Images are built locally from busybox-static
# (nothing is pulled). Prints PASS/FAIL/SKIP lines and "N passed, N failed" (sprout);
# runc's results are printed as REF lines and counted separately. Exit status: 0 when no
# sprout check failed.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SPROUT=${SPROUT:-$REPO/target/release/sprout}
REF_RUNC=${REF_RUNC:-$(command -v runc || echo /usr/sbin/runc)}
PTY="python3 $HERE/pty_run.py"
CG2=$([ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] && echo 1 || true)  # pure cgroup v2 host: v2 file names in the checks
ONLY=""
WITH_REF=1
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    --no-ref) WITH_REF=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
case "$ONLY" in ""|podman|containerd|docker|cri|cri2) ;; *) echo "--only: podman|containerd|docker|cri|cri2" >&2; exit 2 ;; esac
want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }

[ "$(id -u)" = 0 ] || { echo "run.sh: needs root" >&2; exit 2; }
[ -x "$SPROUT" ] || { echo "run.sh: no sprout binary at $SPROUT (build it: scripts/build.sh)" >&2; exit 2; }
exec </dev/null   # never read the caller's stdin (CI)

TMP=$(mktemp -d /tmp/sprout-clients.XXXXXX)
# This run's own suffix for every name other users of the host could also use (podman network,
# bridge interfaces, ctr namespace, cgroup parents): the temp dir's random part, lower case.
RUN_ID=$(printf '%s' "${TMP##*.}" | tr 'A-Z' 'a-z')
[ -n "$RUN_ID" ] && [ -d "$TMP" ] || { echo "run.sh: mktemp failed" >&2; exit 2; }
# Work from the scratch dir: conmon writes an empty `oom` file into its working directory when a
# container is OOM-killed (pm_oom), and nothing of this suite may land in the caller's tree.
SPROUT=$(realpath "$SPROUT")
cd "$TMP"
IMG=localhost/busybox:sprout
PAUSE_IMG=localhost/pause:sprout
T=60   # per-command timeout (s)

NPASS=0 NFAIL=0 NSKIP=0 RPASS=0 RFAIL=0
FAILED=()
# result LABEL(sprout|runc) CLIENT NAME STATUS(0=pass) [DETAIL]
result() {
  local who=$1 client=$2 name=$3 st=$4 detail=${5:-}
  if [ "$who" = sprout ]; then
    if [ "$st" = 0 ]; then NPASS=$((NPASS + 1)); echo "PASS $client/$name"
    else NFAIL=$((NFAIL + 1)); FAILED+=("$client/$name"); echo "FAIL $client/$name"; fi
  else
    if [ "$st" = 0 ]; then RPASS=$((RPASS + 1)); echo "REF  $client/$name [runc: PASS]"
    else RFAIL=$((RFAIL + 1)); echo "REF  $client/$name [runc: FAIL]"; fi
  fi
  if [ "$st" != 0 ] && [ -n "$detail" ]; then printf '%s\n' "$detail" | head -20 | sed 's/^/    | /'; fi
}
skip() { NSKIP=$((NSKIP + 1)); echo "SKIP $1 ($2)"; }

# Checks print their diagnostics and return non-zero on failure.
# check WHO CLIENT NAME FUNC ARGS...
check() {
  local who=$1 client=$2 name=$3; shift 3
  local out st
  out=$("$@" 2>&1); st=$?
  result "$who" "$client" "$name" "$st" "$out"
}
# Helpers for the check bodies.
eq() { [ "$1" = "$2" ] || { echo "expected: $(printf %q "$2")"; echo "got:      $(printf %q "$1")"; return 1; }; }
has() { printf '%s' "$1" | grep -Eq -- "$2" || { echo "expected output matching /$2/, got:"; printf '%s\n' "$1"; return 1; }; }
hasline() { printf '%s\n' "$1" | grep -Fxq -- "$2" || { echo "expected a line $(printf %q "$2") in:"; printf '%s\n' "$1"; return 1; }; }
hasnt() { ! printf '%s' "$1" | grep -Eq -- "$2" || { echo "unexpected /$2/ in:"; printf '%s\n' "$1"; return 1; }; }
to() { timeout -k 5 "$T" "$@"; }
# Run (out, rc) in one go: sets OUT and RC.
cap() { OUT=$("$@" 2>&1); RC=$?; }
# Wait until CMD's output matches REGEX (up to WAIT_S seconds, default 30: a loaded host is slow,
# and a passing check never waits that long).
WAIT_S=${WAIT_S:-30}
wait_for() { local re=$1; shift; local end=$((SECONDS + WAIT_S))
  while :; do "$@" 2>&1 | grep -Eq -- "$re" && return 0; [ "$SECONDS" -lt "$end" ] || break; sleep 0.2; done
  echo "timed out (${WAIT_S}s) waiting for /$re/ from: $*"; "$@" 2>&1; return 1; }

# pick_subnet [EXCLUDE_CIDR...]: a free 10.x.y.0/24, overlapping no IPv4 address or route of
# the host (any table) nor the CIDRs given; empty output when none is found.
pick_subnet() {
  { ip -4 -o addr show; ip -4 route show table all; } 2>/dev/null | python3 -c '
import ipaddress, random, re, sys
used = [ipaddress.ip_network(m, strict=False)
        for m in re.findall(r"(?<![0-9.])([0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(?:/[0-9]+)?)", sys.stdin.read())
        if not m.startswith("0.0.0.0")]
used += [ipaddress.ip_network(a, strict=False) for a in sys.argv[1:] if a]
rng = random.Random()
for _ in range(2000):
    n = ipaddress.ip_network("10.%d.%d.0/24" % (rng.randrange(100, 250), rng.randrange(0, 256)))
    if not any(n.overlaps(u) for u in used):
        print(n); break
' "$@"
}
# free_ifname PREFIX: PREFIX + RUN_ID (at most 15 characters), or with a digit added while an
# interface of that name exists (another run's, never ours to touch).
free_ifname() {
  local base=${1}${RUN_ID} n i
  n=${base:0:14}
  for i in "" 0 1 2 3 4 5 6 7 8 9; do
    ip link show "$n$i" >/dev/null 2>&1 || { echo "$n$i"; return 0; }
  done
  return 1
}

PIDS_TO_STOP=()
stop_pid() { # pid: TERM, wait up to 15s, KILL
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 75); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null; sleep 0.2
}
umount_under() { # unmount everything mounted below $1, deepest first
  local m
  for m in $(awk -v p="$1" '$5 == p || index($5, p "/") == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
}
CLEANUPS=()
cleanup() {
  local i
  for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do eval "${CLEANUPS[$i]}" >/dev/null 2>&1; done
  for i in "${PIDS_TO_STOP[@]}"; do stop_pid "$i"; done
  umount_under "$TMP"
  if [ "$KEEP" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP" 2>/dev/null || { umount_under "$TMP"; rm -rf "$TMP"; }; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# overlay on overlay does not work: pick vfs/native where the temp dir is itself on overlayfs.
FSTYPE=$(stat -f -c %T "$TMP")
if [ "$FSTYPE" = overlayfs ]; then PM_DRIVER=vfs; CTD_SNAP=native; DK_DRIVER=vfs; else PM_DRIVER=overlay; CTD_SNAP=overlayfs; DK_DRIVER=overlay2; fi

echo "# sprout: $SPROUT ($("$SPROUT" --version 2>&1 | head -1))"
echo "# reference: $REF_RUNC ($("$REF_RUNC" --version 2>&1 | head -1)); temp dir $TMP ($FSTYPE)"

# ---------------------------------------------------------------------------------------
# Images: a busybox rootfs from busybox-static, imported with podman (or built by hand as
# an OCI/docker archive when podman is missing), saved for ctr and docker.
build_rootfs() {
  local bb r=$TMP/rootfs a
  bb=$(command -v busybox || echo /bin/busybox)
  [ -x "$bb" ] || { echo "no busybox (apt-get install busybox-static)"; return 1; }
  if ldd "$bb" >/dev/null 2>&1; then echo "$bb is dynamically linked: install busybox-static"; return 1; fi
  mkdir -p "$r"/{bin,etc,tmp,proc,sys,dev,root,var}
  chmod 1777 "$r/tmp"
  cp "$bb" "$r/bin/busybox"
  for a in $("$r/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  tar -C "$r" -cf "$TMP/busybox.tar" .
}
# A docker-archive (docker load / ctr import) made without podman, from the rootfs tarball.
make_docker_archive() { # out.tar repo:tag [entrypoint-json]
  local cfg=""
  [ -z "${3:-}" ] || cfg="{\"Entrypoint\": $3, \"Cmd\": null}"
  python3 "$HERE/docker_archive.py" "$TMP/busybox.tar" "$1" "$2" "$cfg"
}
build_images() {
  build_rootfs || return 1
  make_docker_archive "$TMP/busybox-docker.tar" "$IMG" || return 1
  make_docker_archive "$TMP/pause-docker.tar" "$PAUSE_IMG" '["/bin/sleep","inf"]' || return 1
}

# ---------------------------------------------------------------------------------------
# podman
# The runtimes keep their state in their default --root (/run/sprout, /run/runc): podman's
# `container cleanup` (run by conmon at exit) does not forward --runtime-flag, so a private
# --root would only leak state.
# podman with the test's storage and the runtime under test: "${PODMAN[@]}" (pmset after PMRT changes)
pmset() { PODMAN=(podman --root "$TMP/podman/root" --runroot "$TMP/podman/runroot" --storage-driver "$PM_DRIVER" --runtime "$PMRT"); }
pm() { pmset; to "${PODMAN[@]}" "$@"; }
# The podman checks' own network (pm_net_setup): name, bridge interface, subnet.
PM_NET="" PM_BR="" PM_SUBNET=""
pm_setup() {
  mkdir -p "$TMP/podman"/{root,runroot,tmp,net}
  CLEANUPS+=("pm_net_cleanup")   # runs after the `rm -af` below (CLEANUPS run last-first)
  local hn hu
  hn=$(ulimit -Hn); hu=$(ulimit -Hu)
  [ "$hn" = unlimited ] && hn=1048576; [ "$hu" = unlimited ] && hu=4194304
  [ "$hn" -gt 1024 ] && hn=1024; [ "$hu" -gt 4096 ] && hu=4096
  cat >"$TMP/podman/containers.conf" <<EOF
[containers]
# No CAP_SYS_RESOURCE on some hosts: podman's defaults (nofile=1048576) cannot be set there.
default_ulimits = ["nofile=$hn:$hn", "nproc=$hu:$hu"]
netns = "none"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$TMP/podman/events.log"
tmp_dir = "$TMP/podman/tmp"
[engine.runtimes]
sprout = ["$SPROUT"]
runc = ["$REF_RUNC"]
[network]
network_config_dir = "$TMP/podman/net"
EOF
  export CONTAINERS_CONF=$TMP/podman/containers.conf
  PMRT=runc
  pm import "$TMP/busybox.tar" "$IMG" >/dev/null 2>&1 || return 1
  CLEANUPS+=("PMRT=sprout; pm rm -af -t 0; PMRT=runc; pm rm -af -t 0; pm rmi -af; pm_kill_leftovers")
  pm save --format docker-archive -o "$TMP/busybox-podman-docker.tar" "$IMG" >/dev/null 2>&1 &&
  pm save --format oci-archive -o "$TMP/busybox-podman-oci.tar" "$IMG" >/dev/null 2>&1 || return 1
  # Without it only the checks on a network fail (pm_need_net), not the whole podman part.
  pm_net_setup || echo "# podman network setup failed: the network checks will fail"
  return 0
}
pm_need_net() { [ -n "$PM_NET" ] || { echo "no network of the suite's own (its setup failed, see above)"; return 1; }; }
# A bridge network of this run's own, in the private network_config_dir, made the default
# (`--network bridge` and pods land on it too): the built-in default network `podman` would use
# the host-wide bridge cni-podman0 (CNI) / podman0 (netavark) and 10.88.0.0/16, which another
# podman on the host may hold with another address (the bridge plugin then refuses to set up any
# container). --internal: no gateway address on the bridge, no masquerading, so the host's routing
# and NAT do not change. podman 4.3 has no --interface-name and would name the bridge
# cni-podman<N>/podman<N> (a name another podman may use): pm_net_own_config renames it.
pm_net_setup() {
  PM_SUBNET=$(pick_subnet) && [ -n "$PM_SUBNET" ] || { echo "# no free 10.x.y.0/24 subnet on this host"; return 1; }
  PM_BR=$(free_ifname sprpm) || { echo "# no free bridge interface name"; return 1; }
  PM_NET=sprout-test-$RUN_ID
  PMRT=runc
  cap pm network create --driver bridge --internal --disable-dns --subnet "$PM_SUBNET" "$PM_NET"
  [ "$RC" = 0 ] || { echo "# podman network create: $OUT"; PM_NET=""; return 1; }
  cap pm_net_own_config; [ "$RC" = 0 ] || { echo "# podman network config: $OUT"; return 1; }
  cap pm network inspect --format '{{.NetworkInterface}}' "$PM_NET"
  [ "$OUT" = "$PM_BR" ] || { echo "# podman network $PM_NET: interface '$OUT', not $PM_BR"; return 1; }
  printf 'default_network = "%s"\n' "$PM_NET" >>"$TMP/podman/containers.conf"   # [network] is the last table
  echo "# podman network $PM_NET: bridge $PM_BR, subnet $PM_SUBNET (internal)"
}
# Rewrite the network's config file (private network_config_dir) so that it uses only what is
# this run's: the bridge interface $PM_BR; for CNI also IPAM state in the temp dir (not
# /var/lib/cni/networks) and no portmap/firewall plugins (they add rules to the host-wide
# CNI-FORWARD/CNI-HOSTPORT chains). netavark: the interface name only (it adds no firewall
# rules for an internal network).
pm_net_own_config() {
  python3 - "$TMP/podman/net" "$PM_NET" "$PM_BR" "$TMP/podman/cni-ipam" <<'PY'
import json, os, sys
d, name, br, ipam = sys.argv[1:]
p = os.path.join(d, name + ".conflist")
if os.path.exists(p):
    c = json.load(open(p))
    c["plugins"] = [x for x in c["plugins"] if x.get("type") not in ("portmap", "firewall")]
    for x in c["plugins"]:
        if x.get("type") == "bridge":
            x["bridge"] = br
            x.setdefault("ipam", {})["dataDir"] = ipam
else:
    p = os.path.join(d, name + ".json")
    c = json.load(open(p))
    c["network_interface"] = br
with open(p + ".tmp", "w") as f:
    json.dump(c, f, indent=1)
os.rename(p + ".tmp", p)
PY
}
pm_net_cleanup() { # only what pm_net_setup made: the network, its bridge, CNI's IPAM/cache files for it
  [ -n "$PM_NET" ] || return 0
  PMRT=runc; pm network rm -f "$PM_NET"
  [ -n "$PM_BR" ] && ip link show "$PM_BR" >/dev/null 2>&1 && ip link del "$PM_BR"
  rm -rf "/var/lib/cni/networks/$PM_NET"
  rm -f /var/lib/cni/results/"$PM_NET"-* 2>/dev/null
  return 0
}

pm_kill_leftovers() { # should `podman rm -a` have failed: container inits, then their conmons, by pid
  local f p
  for f in "$TMP"/podman/runroot/overlay-containers/*/userdata/pidfile "$TMP"/podman/runroot/vfs-containers/*/userdata/pidfile; do
    [ -f "$f" ] && p=$(cat "$f") && [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
  done
  for f in "$TMP"/podman/runroot/*-containers/*/userdata/conmon.pid; do
    [ -f "$f" ] && p=$(cat "$f") && [ -n "$p" ] && stop_pid "$p"
  done
}
pm_run_rm() { cap pm run --rm "$IMG" echo hello; eq "$OUT" hello && eq "$RC" 0; }
pm_exit_code() { cap pm run --rm "$IMG" sh -c 'exit 3'; eq "$RC" 3; }
pm_exit_code_255() { cap pm run --rm "$IMG" sh -c 'exit 255'; eq "$RC" 255; }
pm_enoent() { cap pm run --rm "$IMG" /nonexistent; echo "$OUT"; [ "$RC" = 127 ] || [ "$RC" = 126 ] || { echo "rc=$RC, want 126/127"; return 1; }; }
pm_eacces() { cap pm run --rm "$IMG" /etc/passwd; echo "$OUT"; eq "$RC" 126; }
pm_enoent_create() { # runc reports a missing executable at create time (podman: "executable file not found")
  cap pm create --name enoent-$PMRT "$IMG" /nonexistent; cap pm start enoent-$PMRT; local r=$RC o=$OUT
  pm rm -f enoent-$PMRT >/dev/null 2>&1; echo "start rc=$r: $o"; [ "$r" != 0 ] && has "$o" 'no such file|not found'
}
pm_stdin() { pmset; OUT=$(echo piped-in | to "${PODMAN[@]}" run --rm -i "$IMG" cat 2>&1); eq "$OUT" piped-in; }
pm_detached() {
  local n=d-$PMRT
  cap pm run -d --name $n "$IMG" sh -c 'echo to-stdout; echo to-stderr >&2; trap "echo got-term; exit 0" TERM; while :; do sleep 0.1; done' || return 1
  [ "$RC" = 0 ] || { echo "run -d: $OUT"; return 1; }
  wait_for "^running" pm inspect -f "{{.State.Status}}" $n || return 1
  wait_for to-stderr pm logs $n || return 1
  cap pm logs $n; has "$OUT" to-stdout || return 1
  cap pm inspect -f '{{.OCIRuntime}} {{.State.Status}} {{.State.Pid}}' $n; has "$OUT" "^$PMRT running [1-9]" || return 1
  local id; id=$(pm inspect -f '{{.Id}}' $n)   # really run by that runtime: its state is under its root
  [ -d "/run/$PMRT/$id" ] || { echo "no /run/$PMRT/$id"; return 1; }
  cap pm exec $n sh -c 'echo exec-ok; exit 4'; eq "$OUT" exec-ok && eq "$RC" 4 || return 1
  cap pm exec --user 65534 -w /tmp -e FOO=bar $n sh -c 'echo $(id -u) $(pwd) $FOO'; eq "$OUT" "65534 /tmp bar" || return 1
  cap pm top $n; has "$OUT" 'sh -c' || return 1
  cap pm stop -t 10 $n; eq "$RC" 0 || { echo "stop: $OUT"; return 1; }
  cap pm inspect -f '{{.State.Status}} {{.State.ExitCode}}' $n; eq "$OUT" "exited 0" || return 1
  cap pm logs $n; has "$OUT" got-term || return 1
  cap pm start $n; eq "$RC" 0 || { echo "start: $OUT"; return 1; }
  wait_for "^running" pm inspect -f "{{.State.Status}}" $n || return 1
  cap pm kill $n; eq "$RC" 0 || { echo "kill: $OUT"; return 1; }
  wait_for "exited" pm inspect -f '{{.State.Status}}' $n || return 1
  cap pm restart -t 1 $n; eq "$RC" 0 || { echo "restart: $OUT"; return 1; }
  wait_for "^running" pm inspect -f "{{.State.Status}}" $n || return 1
  cap pm kill -s KILL $n; wait_for "exited 137" pm inspect -f '{{.State.Status}} {{.State.ExitCode}}' $n || return 1
  cap pm rm $n; eq "$RC" 0 || { echo "rm: $OUT"; return 1; }
  cap pm ps -a --format '{{.Names}}'; hasnt "$OUT" "^$n\$"
}
pm_pause() {
  local n=p-$PMRT
  pm run -d --name $n "$IMG" sleep 1000 >/dev/null || return 1
  cap pm pause $n; eq "$RC" 0 || { echo "pause: $OUT"; pm rm -f -t0 $n; return 1; }
  cap pm inspect -f '{{.State.Status}}' $n; eq "$OUT" paused || { pm rm -f -t0 $n; return 1; }
  # The process is really frozen
  local pid st; pid=$(pm inspect -f '{{.State.Pid}}' $n); st=$(awk '{print $3}' /proc/$pid/stat)
  cap pm unpause $n; eq "$RC" 0 || { echo "unpause: $OUT"; pm rm -f -t0 $n; return 1; }
  cap pm inspect -f '{{.State.Status}}' $n; eq "$OUT" running || { pm rm -f -t0 $n; return 1; }
  cap pm exec $n true; eq "$RC" 0 || { pm rm -f -t0 $n; return 1; }
  pm rm -f -t0 $n >/dev/null; [ "$st" = D ] || [ "$st" = S ] || { echo "paused state $st"; return 1; }
}
pm_pause_rm_force() { # rm -f of a paused container
  local n=pf-$PMRT
  pm run -d --name $n "$IMG" sleep 1000 >/dev/null && pm pause $n >/dev/null || return 1
  cap pm rm -f -t 0 $n; eq "$RC" 0 || { echo "$OUT"; return 1; }
}
pm_tty() {
  pmset
  OUT=$(to $PTY --timeout 40 --send 'tty; echo "cols=$(stty size)"; echo MARK$((40+2))\n' --send 'exit 5\n' -- \
    "${PODMAN[@]}" run --rm -it "$IMG" sh); RC=$?
  has "$OUT" '/dev/pts/0' && has "$OUT" MARK42 && has "$OUT" 'cols=37 101' && eq "$RC" 5
}
pm_tty_exec() {
  local n=te-$PMRT
  pm run -d --name $n "$IMG" sleep 1000 >/dev/null || return 1
  pmset; OUT=$(to $PTY --timeout 30 -- "${PODMAN[@]}" exec -it $n sh -c 'tty; exit 6'); RC=$?
  pm rm -f -t0 $n >/dev/null
  has "$OUT" '/dev/pts/[0-9]' && eq "$RC" 6
}
pm_net_none() { cap pm run --rm --network none "$IMG" ip -o link; echo "$OUT"
  [ "$(printf '%s\n' "$OUT" | grep -c '^[0-9]')" = 1 ] || { echo "want only lo"; return 1; }
  has "$OUT" 'lo: <LOOPBACK,UP'  # runc/crun bring lo up in a new network namespace
}
pm_net_host() { cap pm run --rm --network host "$IMG" ip -o link; eq "$(printf '%s\n' "$OUT" | grep -c '^[0-9]')" "$(ip -o link | grep -c '^[0-9]')"; }
pm_net_bridge() { # on the suite's own network: an address from its subnet, on eth0
  pm_need_net || return 1
  cap pm run --rm --network "$PM_NET" "$IMG" ip -o -4 addr show eth0; has "$OUT" "inet ${PM_SUBNET%.0/24}\\.[0-9]+/24" || return 1
  # `--network bridge` means the configured default network: the suite's too, never cni-podman0
  cap pm run --rm --network bridge "$IMG" ip -o -4 addr show eth0; has "$OUT" "inet ${PM_SUBNET%.0/24}\\.[0-9]+/24"; }
pm_memory() { cap pm run --rm --memory 64m "$IMG" sh -c 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max'; eq "$OUT" 67108864; }
pm_pids() { cap pm run --rm --pids-limit 33 "$IMG" sh -c 'cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max'; eq "$OUT" 33; }
pm_cpus() { cap pm run --rm --cpus 0.5 "$IMG" sh -c 'cat /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d" " -f1 /sys/fs/cgroup/cpu.max'; eq "$OUT" 50000; }
pm_ulimits() { cap pm run --rm "$IMG" sh -c 'echo $(ulimit -n) $(ulimit -u)'; has "$OUT" '^[0-9]+ [0-9]+$'; }
pm_user() { cap pm run --rm --user 65534:65534 "$IMG" id; has "$OUT" 'uid=65534.*gid=65534'; }
pm_readonly() { cap pm run --rm --read-only "$IMG" sh -c 'touch /x 2>&1; touch /tmp/y && echo tmp-ok'; has "$OUT" 'Read-only file system' && has "$OUT" tmp-ok; }
pm_capdrop() { cap pm run --rm --cap-drop all "$IMG" sh -c 'grep CapEff /proc/self/status'; has "$OUT" 'CapEff:\s+0+$'; }
pm_init() { cap pm run --rm --init "$IMG" sh -c 'cat /proc/1/cmdline | tr "\0" " "'; has "$OUT" 'catatonit|init'; }
pm_volume() { mkdir -p "$TMP/vol"; echo vol-data >"$TMP/vol/f"; cap pm run --rm -v "$TMP/vol:/data:ro" "$IMG" cat /data/f; eq "$OUT" vol-data; }
pm_env_workdir() { cap pm run --rm -e A=b -w /tmp -h myhost "$IMG" sh -c 'echo $A $(pwd) $(hostname)'; eq "$OUT" "b /tmp myhost"; }
pm_pid_host() { cap pm run --rm --pid host "$IMG" sh -c 'ps -o pid | grep -c "^ *1$"; test -d /proc/$PPID'; eq "$RC" 0; }
pm_userns() { cap pm run --rm --uidmap 0:200000:65536 --gidmap 0:200000:65536 "$IMG" sh -c 'cat /proc/self/uid_map; id -u'
  has "$OUT" '^ +0 +200000 +65536' && has "$OUT" '^0$'; }
pm_privileged() { cap pm run --rm --privileged "$IMG" sh -c 'grep CapEff /proc/self/status; ls /dev | wc -l'; has "$OUT" 'CapEff:\s+0*1?f+'; }
pm_seccomp() { cap pm run --rm "$IMG" sh -c 'grep Seccomp: /proc/self/status'; has "$OUT" 'Seccomp:\s+2' || return 1
  cap pm run --rm --security-opt seccomp=unconfined "$IMG" sh -c 'grep Seccomp: /proc/self/status'; has "$OUT" 'Seccomp:\s+0'; }
pm_tmpfs_shm() { cap pm run --rm --tmpfs /scratch:size=1m --shm-size 8m "$IMG" sh -c 'df -k /scratch /dev/shm | tail -2'
  has "$OUT" 'tmpfs +1024 ' && has "$OUT" 'shm +8192 |tmpfs +8192 '; }
pm_sysctl() { pm_need_net || return 1; cap pm run --rm --sysctl net.ipv4.ip_forward=1 --network "$PM_NET" "$IMG" cat /proc/sys/net/ipv4/ip_forward; eq "$OUT" 1; }
pm_device() { cap pm run --rm --device /dev/null:/dev/mynull "$IMG" sh -c 'echo x > /dev/mynull && echo dev-ok'; eq "$OUT" dev-ok; }
pm_stats() { local n=st-$PMRT; pm run -d --name $n "$IMG" sleep 1000 >/dev/null || return 1
  cap pm stats --no-stream --format '{{.Name}} {{.PIDs}}' $n; pm rm -f -t0 $n >/dev/null; has "$OUT" "^$n 1"; }
pm_oom() { cap pm run --rm --memory 20m --memory-swap 20m "$IMG" sh -c 'tail /dev/zero'; eq "$RC" 137; }
pm_error_surfaces() { # a runtime create error reaches the podman user
  cap pm run --rm --sysctl net.ipv4.no_such_knob=1 "$IMG" true; echo "rc=$RC: $OUT"
  [ "$RC" != 0 ] && has "$OUT" 'no_such_knob'; }
pm_cgroupns_private() { # the cgroup mount shows the container's own cgroup, not the host's tree
  cap pm run --rm --cgroupns private --memory 64m "$IMG" sh -c 'cat /proc/self/cgroup | grep -c ":/$"; cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max'
  has "$OUT" '^67108864$'; }
pm_pod() { # a pod: the infra container's namespaces joined by path
  local pod=pod-$PMRT
  cap pm pod create --name $pod --share net,ipc,uts --hostname podhost; [ "$RC" = 0 ] || { echo "pod create: $OUT"; return 1; }
  cap pm run -d --pod $pod --name $pod-a "$IMG" sh -c 'echo shared > /dev/shm/x; sleep 1000'; [ "$RC" = 0 ] || { echo "run a: $OUT"; pm pod rm -f $pod; return 1; }
  wait_for '^shared$' pm exec $pod-a cat /dev/shm/x || { pm pod rm -f -t 0 $pod >/dev/null 2>&1; return 1; }
  cap pm run --rm --pod $pod "$IMG" sh -c 'hostname; cat /dev/shm/x; readlink /proc/self/ns/net'; local o=$OUT
  local na; na=$(pm exec $pod-a readlink /proc/self/ns/net)
  pm pod rm -f -t 0 $pod >/dev/null 2>&1
  has "$o" '^podhost$' && has "$o" '^shared$' && hasline "$o" "$na"; }
pm_exec_paused() { local n=ep-$PMRT
  pm run -d --name $n "$IMG" sleep 1000 >/dev/null && pm pause $n >/dev/null || return 1
  pmset; cap timeout 20 "${PODMAN[@]}" exec $n true; local r=$RC o=$OUT
  pm unpause $n >/dev/null; pm rm -f -t0 $n >/dev/null
  echo "rc=$r: $o"; [ "$r" != 0 ] && [ "$r" != 124 ]; }
# cpu.weight for cpu.shares 512 with runtime $1: 59 with the conversion of runc >= 1.3.2 and
# crun >= 1.23, which sprout follows; 20 with the linear one of the older runc and crun that
# Debian ships (the peers this script runs beside sprout)
weight_of_512() { if [ "$1" = sprout ]; then echo 59; else echo 20; fi; }
pm_misc_flags() {
  # v2: cpu.shares 512 is cpu.weight 59 (runc >= 1.3.2's and crun >= 1.23's conversion; 20 with
  # the linear one of the older runc and crun that Debian ships), the reservation is memory.low,
  # and swappiness has no v2 file (podman drops it with a warning)
  local files='/sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/memory/memory.soft_limit_in_bytes /sys/fs/cgroup/memory/memory.swappiness' want="300 512 33554432 10 0 0"
  [ -z "$CG2" ] || { files='/sys/fs/cgroup/cpu.weight /sys/fs/cgroup/memory.low'; want="300 $(weight_of_512 "$PMRT") 33554432 0 0"; }
  cap pm run --rm --personality LINUX32 --oom-score-adj 300 --cpu-shares 512 --memory-reservation 32m --memory-swappiness 10 \
    --device-cgroup-rule 'c 1:3 rwm' --security-opt mask=/etc/group --annotation a.b=c \
    --tmpfs /run:exec,mode=1777 --mount type=bind,source=$TMP/vol,target=/mnt,bind-propagation=rslave "$IMG" sh -c \
    "uname -m; cat /proc/self/oom_score_adj $files; wc -c < /etc/group; grep ' /run ' /proc/self/mountinfo | grep -c noexec"
  # personality: runc 1.1 ignores it (uname stays x86_64), sprout applies it (i686)
  echo "$OUT" | head -1; eq "$(printf '%s\n' "$OUT" | tail -n +2 | tr '\n' ' ' | sed 's/ $//')" "$want"; }
pm_rshared_volume() { # -v SRC:DST:rshared: podman asks for a shared rootfsPropagation, and its
  # rootfs is an overlay mount of its own, shared where the host's mounts are (systemd): such a
  # rootfs made pivot_root fail until sprout made that mount private (with an rshared "/" on any
  # host: critest's rshared spec). A mount the container makes below DST shows on the host.
  local v=$TMP/rshared-$PMRT
  mkdir -p "$v/x" && mount --bind "$v" "$v" && mount --make-rshared "$v" || return 1
  cap pm run --rm --privileged -v "$v:/mnt:rshared" "$IMG" sh -c \
    'mount -t tmpfs sprout-clients /mnt/x && echo seen > /mnt/x/f && grep -c " /mnt " /proc/self/mountinfo'
  local seen; seen=$(cat "$v/x/f" 2>&1)
  umount -l "$v/x" 2>/dev/null; umount -l "$v"
  echo "$OUT"; eq "$RC" 0 && eq "$seen" seen; }
pm_hooks() { # OCI hooks (podman --hooks-dir): prestart/poststop run by the runtime
  mkdir -p "$TMP/hooks"
  cat >"$TMP/hooks/h.sh" <<EOF2
#!/bin/sh
read -r state
echo "\$1 \$(echo "\$state" | grep -o '"status": *"[a-z]*"')" >> "$TMP/hooks/ran-$PMRT"
EOF2
  chmod +x "$TMP/hooks/h.sh"
  printf '{"version":"1.0.0","hook":{"path":"%s","args":["h.sh","prestart"]},"when":{"annotations":{"^sprout-test-hook$":"yes"}},"stages":["prestart"]}' "$TMP/hooks/h.sh" >"$TMP/hooks/pre.json"
  printf '{"version":"1.0.0","hook":{"path":"%s","args":["h.sh","poststop"]},"when":{"annotations":{"^sprout-test-hook$":"yes"}},"stages":["poststop"]}' "$TMP/hooks/h.sh" >"$TMP/hooks/post.json"
  rm -f "$TMP/hooks/ran-$PMRT"
  cap pm --hooks-dir "$TMP/hooks" run --rm --annotation sprout-test-hook=yes "$IMG" true; [ "$RC" = 0 ] || { echo "$OUT"; return 1; }
  wait_for '^poststop' cat "$TMP/hooks/ran-$PMRT" >/dev/null; OUT=$(cat "$TMP/hooks/ran-$PMRT" 2>&1); echo "$OUT"
  # the state's status for prestart: runc 1.1 says "creating", sprout "created"; both are fine
  has "$OUT" 'prestart "status": *"creat(ing|ed)"' && has "$OUT" '^poststop "status": *"stopped"'; }
pm_failed_create_cleanup() { # after a failed create podman runs `delete --force`, which must succeed quietly
  cap pm run --rm --sysctl net.ipv4.no_such_knob=1 "$IMG" true; [ "$RC" != 0 ] || return 1
  hasnt "$OUT" 'does not exist|Removing container .* from runtime after creation failed'; }
# podman container checkpoint / restore (CRIU through the runtime's checkpoint and restore): a
# counter's memory, stdio and rootfs changes survive. Run only where `criu check` passes.
# The count is appended, one write per number, and read as the file's last line: with `>` the file
# is empty between the shell's truncating open and its write, which a checkpoint's freeze can
# catch (a read right after the resume, or after a restore, then found nothing).
PM_COUNTER='i=0; while :; do i=$((i+1)); echo $i >> /tmp/count; echo tick $i; sleep 0.1; done'
pm_checkpoint() {
  local n=ck-$PMRT at id
  pm run -d --name $n "$IMG" sh -c "$PM_COUNTER" >/dev/null || return 1
  wait_for "tick 5" pm logs $n || { pm rm -f -t0 $n; return 1; }
  cap pm container checkpoint $n; eq "$RC" 0 || { echo "checkpoint: $OUT"; pm rm -f -t0 $n; return 1; }
  cap pm inspect -f '{{.State.Status}}' $n; eq "$OUT" exited || { pm rm -f -t0 $n; return 1; }
  at=$(pm logs $n | tail -1 | awk '{print $2}')
  cap pm container restore $n; eq "$RC" 0 || { echo "restore: $OUT"; pm rm -f -t0 $n; return 1; }
  wait_for "^running" pm inspect -f "{{.State.Status}}" $n || { pm rm -f -t0 $n; return 1; }
  wait_for "tick $((at + 3))" pm logs $n || { pm rm -f -t0 $n; return 1; }
  # It went on from where it stopped (its memory came back), not from 1 again.
  cap pm logs $n; [ "$(printf '%s\n' "$OUT" | grep -c '^tick 1$')" = 1 ] \
    || { echo "the counter restarted:"; printf '%s\n' "$OUT" | head; pm rm -f -t0 $n; return 1; }
  id=$(pm inspect -f '{{.Id}}' $n)   # restored by that runtime: its state is under its root
  [ -d "/run/$PMRT/$id" ] || { echo "no /run/$PMRT/$id"; pm rm -f -t0 $n; return 1; }
  cap pm rm -f -t 0 $n; eq "$RC" 0
}
pm_checkpoint_export() { # --export, rm, restore --import: a new container on a new rootfs
  local n=cke-$PMRT f=$TMP/ck-$PMRT.tar.gz at
  pm run -d --name $n "$IMG" sh -c "$PM_COUNTER" >/dev/null || return 1
  wait_for "tick 5" pm logs $n || { pm rm -f -t0 $n; return 1; }
  cap pm container checkpoint --export "$f" $n; eq "$RC" 0 || { echo "checkpoint: $OUT"; pm rm -f -t0 $n; return 1; }
  at=$(pm logs $n | tail -1 | awk '{print $2}')
  cap pm rm -f -t 0 $n; eq "$RC" 0 || return 1
  cap pm container restore --import "$f"; eq "$RC" 0 || { echo "restore --import: $OUT"; pm rm -f -t0 $n; return 1; }
  wait_for "^running" pm inspect -f "{{.State.Status}}" $n || { pm rm -f -t0 $n; return 1; }
  # "running" can come before the restored loop's next write (it was in its `sleep 0.1`): wait
  # for two more numbers, then check it went on from the checkpoint and never began again at 1.
  wait_for "^$((at + 2))\$" pm exec $n grep -x "$((at + 2))" /tmp/count || { pm rm -f -t0 $n; return 1; }
  local c; c=$(pm exec $n tail -n 1 /tmp/count 2>&1)
  [ -n "$c" ] && [ "$c" -gt "$at" ] || { echo "count $c after restore, $at at the checkpoint"; pm rm -f -t0 $n; return 1; }
  cap pm exec $n grep -cx 1 /tmp/count; eq "$OUT" 1 || { echo "the counter restarted ($OUT lines '1')"; pm rm -f -t0 $n; return 1; }
  cap pm rm -f -t 0 $n; eq "$RC" 0
}
pm_oci_archive() { # the OCI archive round-trips (image load through podman, run)
  cap pm load -q -i "$TMP/busybox-podman-oci.tar"; [ "$RC" = 0 ] || { echo "$OUT"; return 1; }
  cap pm run --rm "$IMG" true; eq "$RC" 0
}

run_podman() {
  command -v podman >/dev/null || { skip podman "podman not installed"; return; }
  echo "## podman $(CONTAINERS_CONF=/dev/null podman --version | awk '{print $3}')"
  pm_setup || { result sprout podman setup 1 "podman setup failed (above)"; return; }
  local c rts="sprout"
  [ "$WITH_REF" = 1 ] && rts="sprout runc"
  for c in run_rm exit_code exit_code_255 enoent eacces enoent_create stdin detached pause pause_rm_force tty tty_exec \
           net_none net_host net_bridge memory pids cpus ulimits user readonly capdrop init volume env_workdir \
           pid_host userns privileged seccomp tmpfs_shm sysctl device stats oom cgroupns_private pod exec_paused misc_flags rshared_volume hooks error_surfaces failed_create_cleanup oci_archive; do
    for PMRT in $rts; do check $PMRT podman "$c" pm_$c; done
  done
  local why
  if why=$(criu check 2>&1); then
    for c in checkpoint checkpoint_export; do
      for PMRT in $rts; do check $PMRT podman "$c" pm_$c; done
    done
  else
    skip podman/checkpoint "criu check fails here: $(printf '%s\n' "$why" | grep -m1 Error)"
  fi
  # Every container podman made is gone from the runtime's state dir (ids from podman's event log).
  PMRT=sprout; pm rm -af -t 0 >/dev/null 2>&1
  local left="" id
  for id in $(grep -o '"ID":"[0-9a-f]\{64\}"' "$TMP/podman/events.log" 2>/dev/null | cut -d'"' -f4 | sort -u); do
    [ -e "/run/sprout/$id" ] && left="$left $id"
  done
  [ -z "$left" ]; result sprout podman no-leftover-state $? "left in /run/sprout:$left"
}

# ---------------------------------------------------------------------------------------
# containerd (private instance) + ctr
CTD=$TMP/containerd
# This run's ctr namespace (also the default cgroup parent of ctr's containers, /<namespace>) and
# CRI network: names of its own, so that nothing another containerd user has is touched.
CT_NS=sprout-clients-$RUN_ID
CTD_NET=sprout-test-ctd-$RUN_ID CTD_BR="" CTD_SUBNET=""
ct() { to ctr --address "$CTD/containerd.sock" -n "$CT_NS" "$@"; }
ct_run() { ct run --runc-binary "$CTBIN" --runc-root "$CTD/rt-$CTWHO" "$@"; }
ctd_config() { # the runtime entries documented in docs/compatibility.md
  mkdir -p "$CTD"/{root,state,cni}
  cat >"$CTD/config.toml" <<EOF
version = 2
root = "$CTD/root"
state = "$CTD/state"
[grpc]
  address = "$CTD/containerd.sock"
[ttrpc]
  address = "$CTD/containerd.sock.ttrpc"
[debug]
  address = "$CTD/debug.sock"
  level = "debug"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMG"
  enable_selinux = false
  # Sandboxes ask for oom_score_adj -998, which needs CAP_SYS_RESOURCE (missing on some CI hosts).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$CTD_SNAP"
    default_runtime_name = "${CTD_DEFAULT_RUNTIME:-sprout}"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$REF_RUNC"
        Root = "$CTD/cri-runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sprout]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sprout.options]
        BinaryName = "$SPROUT"
        Root = "$CTD/cri-sprout"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CTD/cni"
EOF
  # A private CNI bridge for CRI pods (no gateway, no masquerade; IPAM state in the temp dir;
  # the bridge is deleted at exit): its own network name, bridge interface and a free subnet.
  if [ -z "$CTD_BR" ]; then
    CTD_BR=$(free_ifname sprct) || { echo "no free bridge interface name"; return 1; }
    CTD_SUBNET=$(pick_subnet $PM_SUBNET); [ -n "$CTD_SUBNET" ] || { echo "no free 10.x.y.0/24 subnet"; return 1; }
  fi
  cat >"$CTD/cni/10-sprout-test.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "$CTD_NET", "plugins": [{"type": "bridge", "bridge": "$CTD_BR", "isGateway": false,
 "ipMasq": false, "ipam": {"type": "host-local", "subnet": "$CTD_SUBNET", "dataDir": "$CTD/cni-ipam"}}]}
EOF
}
ctd_start() {
  ctd_config || return 1
  containerd --config "$CTD/config.toml" >"$CTD/containerd.log" 2>&1 &
  CTD_PID=$!
  PIDS_TO_STOP+=("$CTD_PID")
  local i
  for i in $(seq 100); do [ -S "$CTD/containerd.sock" ] && ctr --address "$CTD/containerd.sock" version >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "containerd did not start:"; tail -20 "$CTD/containerd.log"; return 1
}
ctd_stop() {
  # Task/containers first, so the shims (and their containers) go away with the daemon.
  local c
  for c in $(ct c ls -q 2>/dev/null); do ct t kill -s KILL "$c" >/dev/null 2>&1; sleep 0.2; ct t rm -f "$c" >/dev/null 2>&1; ct c rm "$c" >/dev/null 2>&1; done
  for c in $(ctr --address "$CTD/containerd.sock" -n k8s.io c ls -q 2>/dev/null); do
    ctr --address "$CTD/containerd.sock" -n k8s.io t kill -s KILL "$c" >/dev/null 2>&1; sleep 0.2
    ctr --address "$CTD/containerd.sock" -n k8s.io t rm -f "$c" >/dev/null 2>&1; ctr --address "$CTD/containerd.sock" -n k8s.io c rm "$c" >/dev/null 2>&1
  done
  stop_pid "$CTD_PID"
  [ -n "$CTD_BR" ] && ip link show "$CTD_BR" >/dev/null 2>&1 && ip link del "$CTD_BR" >/dev/null 2>&1
  rm -f /var/lib/cni/results/"$CTD_NET"-* 2>/dev/null   # CNI's cache of this run's attachments
  # ctr's default cgroup parent is /<namespace>; containerd leaves it behind. Only this run's
  # (names with RUN_ID, never empty: checked at start), only when empty (rmdir).
  rmdir /sys/fs/cgroup/*/"$CT_NS"/* /sys/fs/cgroup/*/"$CT_NS" /sys/fs/cgroup/*/"$CT_NS"-test/* \
        /sys/fs/cgroup/*/"$CT_NS"-test /sys/fs/cgroup/"$CT_NS" /sys/fs/cgroup/"$CT_NS"-test 2>/dev/null
  # Shims outlive containerd by design: stop the ones serving our temp dir (by pid).
  local p
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTD/containerd.sock" 2>/dev/null); do stop_pid "$p"; done
}
ctd_images() {
  ct images import "$TMP/busybox-docker.tar" >/dev/null && ct images import "$TMP/pause-docker.tar" >/dev/null
}

ct_run_rm() { cap ct_run --rm "$IMG" rm-$CTWHO echo hello; eq "$OUT" hello && eq "$RC" 0; }
ct_exit_code() { cap ct_run --rm "$IMG" ec-$CTWHO sh -c 'exit 3'; eq "$RC" 3; }
ct_stdin() { OUT=$(echo piped-in | timeout -k 5 $T ctr --address "$CTD/containerd.sock" -n "$CT_NS" run --runc-binary "$CTBIN" --runc-root "$CTD/rt-$CTWHO" --rm "$IMG" in-$CTWHO cat 2>&1); eq "$OUT" piped-in; }
ct_tty() {
  OUT=$(to $PTY --timeout 30 -- ctr --address "$CTD/containerd.sock" -n "$CT_NS" run --runc-binary "$CTBIN" \
    --runc-root "$CTD/rt-$CTWHO" --rm -t "$IMG" tty-$CTWHO sh -c 'tty; exit 2'); RC=$?
  has "$OUT" '/dev/pts/0' && eq "$RC" 2
}
ct_detached() {
  local n=d-$CTWHO
  cap ct_run -d "$IMG" $n sh -c 'trap "exit 0" TERM; while :; do sleep 0.1; done'; [ "$RC" = 0 ] || { echo "run -d: $OUT"; return 1; }
  wait_for "^$n +[0-9]+ +RUNNING" ct task ls || return 1
  [ -d "$CTD/rt-$CTWHO/$CT_NS/$n" ] || { echo "no runtime state in $CTD/rt-$CTWHO/$CT_NS/$n"; return 1; }
  cap ct task exec --exec-id e1 $n sh -c 'echo exec-ok; exit 4'; eq "$OUT" exec-ok && eq "$RC" 4 || return 1
  OUT=$(to $PTY --timeout 20 -- ctr --address "$CTD/containerd.sock" -n "$CT_NS" task exec -t --exec-id e2 $n sh -c 'tty; exit 5'); RC=$?
  has "$OUT" '/dev/pts/' && eq "$RC" 5 || return 1
  cap ct task ps $n; [ "$(printf '%s\n' "$OUT" | grep -c '^[0-9]')" -ge 1 ] || { echo "$OUT"; return 1; }
  cap ct task pause $n; eq "$RC" 0 || { echo "pause: $OUT"; return 1; }
  wait_for "^$n +[0-9]+ +PAUSED" ct task ls || return 1
  cap ct task resume $n; eq "$RC" 0 || { echo "resume: $OUT"; return 1; }
  wait_for "^$n +[0-9]+ +RUNNING" ct task ls || return 1
  cap ct task kill $n; eq "$RC" 0 || { echo "kill: $OUT"; return 1; }
  wait_for "^$n +[0-9]+ +STOPPED" ct task ls || return 1
  cap ct task rm $n; eq "$RC" 0 || { echo "task rm: $OUT"; return 1; }
  cap ct container rm $n; eq "$RC" 0 || { echo "container rm: $OUT"; return 1; }
  [ ! -e "$CTD/rt-$CTWHO/$CT_NS/$n" ] || { echo "runtime state left: $CTD/rt-$CTWHO/$CT_NS/$n"; return 1; }
}
ct_kill_sigkill() {
  local n=k-$CTWHO
  ct_run -d "$IMG" $n sleep 1000 >/dev/null || return 1
  cap ct task kill -s SIGKILL $n; wait_for "^$n +[0-9]+ +STOPPED" ct task ls || return 1
  cap ct task rm $n; has "$OUT" '137|^$' || return 1
  ct container rm $n
}
ct_exec_more() { # exec --user/--cwd, kill --exec-id, kill --all on a running task, metrics
  local n=x-$CTWHO
  ct_run -d "$IMG" $n sh -c 'sleep 1000 & sleep 1000 & wait' >/dev/null || return 1
  wait_for "^$n +[0-9]+ +RUNNING" ct task ls || return 1
  cap ct task exec --exec-id u1 --user 65534 --cwd /tmp $n sh -c 'echo $(id -u) $(pwd)'; local o1=$OUT
  ct task exec -d --exec-id long $n sleep 1000 >/dev/null 2>&1 &
  # until the exec'd process is in the task (sh + 2 sleeps + it), not a fixed second
  local i; for i in $(seq $((WAIT_S * 5))); do [ "$(ct task ps $n 2>/dev/null | grep -c '^[0-9]')" -ge 4 ] && break; sleep 0.2; done
  cap ct task kill --exec-id long -s SIGKILL $n; local r2=$RC o2=$OUT
  wait
  cap ct task metrics $n; local r3=$RC o3=$OUT
  cap ct task kill --all -s SIGKILL $n; local r4=$RC o4=$OUT
  wait_for "^$n +[0-9]+ +STOPPED" ct task ls; local r5=$?
  ct task rm -f $n >/dev/null 2>&1; ct container rm $n >/dev/null 2>&1
  eq "$o1" "65534 /tmp" && { eq "$r2" 0 || { echo "kill --exec-id: $o2"; false; }; } && { eq "$r3" 0 || { echo "metrics: $o3"; false; }; } &&
    { eq "$r4" 0 || { echo "kill --all: $o4"; false; }; } && eq "$r5" 0
}
ct_rm_paused() { # task rm -f of a paused task
  local n=rp-$CTWHO
  ct_run -d "$IMG" $n sleep 1000 >/dev/null && ct task pause $n >/dev/null || return 1
  # ctr sends `kill --all <id> KILL` then waits: the runtime must thaw the frozen cgroup.
  OUT=$(timeout -k 5 20 ctr --address "$CTD/containerd.sock" -n "$CT_NS" task rm -f $n 2>&1); local r=$? o=$OUT
  if [ "$r" != 0 ]; then ct task kill -s SIGKILL $n >/dev/null 2>&1; sleep 1; ct task rm -f $n >/dev/null 2>&1; fi
  ct container rm $n >/dev/null 2>&1
  eq "$r" 0 || { echo "$o"; return 1; }
}
ct_error_surfaces() { # a create error reaches ctr through the shim (the runtime's --log, JSON)
  cap ct_run --rm "$IMG" err-$CTWHO no-such-command; ct container rm err-$CTWHO >/dev/null 2>&1
  [ "$RC" != 0 ] && has "$OUT" 'OCI runtime create failed' && has "$OUT" 'no-such-command'
}
ct_error_surfaces_race() { # early init errors without a new netns (fast init): the reason, not a pipe error, 10 times
  local i bad=0
  for i in $(seq 10); do
    # a cwd under a regular file: the init fails in its setup, before the parent's GO
    cap ct_run --rm --net-host --cwd /etc/passwd/sub "$IMG" er$i-$CTWHO true; ct container rm er$i-$CTWHO >/dev/null 2>&1
    printf '%s' "$OUT" | grep -q '/etc/passwd/sub\|not a directory' || { bad=$((bad + 1)); echo "try $i: $OUT"; }
  done
  [ $bad = 0 ]
}
ct_enoent_abs() { # an absolute path that does not exist: runc fails create; exit 127 at start is tolerated by most clients
  cap ct_run --rm "$IMG" ea-$CTWHO /nonexistent; ct container rm ea-$CTWHO >/dev/null 2>&1; echo "rc=$RC: $OUT"
  [ "$RC" != 0 ] && has "$OUT" 'OCI runtime create failed'
}
ct_memory() { # ctr mounts no cgroupfs in the container: read the limit on the host
  local n=m-$CTWHO r=0
  ct_run -d --memory-limit 67108864 --cgroup "/$CT_NS-test/$n" "$IMG" $n sleep 1000 >/dev/null || return 1
  OUT=$(cat /sys/fs/cgroup/memory/$CT_NS-test/$n/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/$CT_NS-test/$n/memory.max 2>&1)
  eq "$OUT" 67108864 || r=1
  ct task kill -s SIGKILL $n >/dev/null; sleep 0.5; ct task rm -f $n >/dev/null 2>&1; ct container rm $n >/dev/null 2>&1
  return $r
}
ct_env_cwd() { cap ct_run --rm --cwd /tmp --env A=b "$IMG" ec-$CTWHO sh -c 'echo $A $(pwd)'; eq "$OUT" "b /tmp"; }
ct_readonly() { cap ct_run --rm --read-only "$IMG" ro-$CTWHO sh -c 'touch /x'; has "$OUT" 'Read-only'; }
ct_net_host() { cap ct_run --rm --net-host "$IMG" nh-$CTWHO ip -o link; eq "$(printf '%s\n' "$OUT" | grep -c '^[0-9]')" "$(ip -o link | grep -c '^[0-9]')"; }
ct_lo_up() { cap ct_run --rm "$IMG" lo-$CTWHO ip -o link show lo; has "$OUT" '<LOOPBACK,UP'; }

ct_checkpoint() { # container checkpoint --task (the shim runs the runtime's checkpoint), rm, container restore --live (its restore)
  local n=ck-$CTWHO ref=localhost/ck-$CTWHO:$RUN_ID at c
  ct_run -d "$IMG" $n sh -c "$PM_COUNTER" >/dev/null || return 1
  wait_for "^$n +[0-9]+ +RUNNING" ct task ls || return 1
  wait_for '^[3-9]|^[1-9][0-9]' ct task exec --exec-id w1 $n tail -n 1 /tmp/count || return 1
  cap ct container checkpoint --task --rw $n $ref; eq "$RC" 0 || { echo "checkpoint: $OUT"; ct_rm_task $n; return 1; }
  at=$(ct task exec --exec-id c1 $n tail -n 1 /tmp/count 2>&1)
  ct_rm_task $n
  cap ct container restore --live --rw $n $ref; eq "$RC" 0 || { echo "restore: $OUT"; ct image rm $ref >/dev/null 2>&1; return 1; }
  cap ct task start -d $n; [ "$RC" = 0 ] || has "$OUT" 'already' || { echo "start: $OUT"; ct_rm_task $n; ct image rm $ref >/dev/null 2>&1; return 1; }
  wait_for "^$n +[0-9]+ +RUNNING" ct task ls || { ct_rm_task $n; ct image rm $ref >/dev/null 2>&1; return 1; }
  sleep 0.5; c=$(ct task exec --exec-id c2 $n tail -n 1 /tmp/count 2>&1)
  ct_rm_task $n; ct image rm $ref >/dev/null 2>&1
  # The memory came back: the counter went on from the checkpoint (the restored rw layer holds
  # the file as it was then), not from 1.
  [ -n "$c" ] && [ -n "$at" ] && [ "$c" -ge "$at" ] || { echo "count $c after restore, $at at the checkpoint"; return 1; }
}
ct_rm_task() { ct task kill -s KILL "$1" >/dev/null 2>&1; sleep 0.3; ct task rm -f "$1" >/dev/null 2>&1; ct container rm "$1" >/dev/null 2>&1; }
run_containerd() {
  command -v containerd >/dev/null && command -v ctr >/dev/null || { skip containerd "containerd/ctr not installed"; return; }
  echo "## containerd $(containerd --version | awk '{print $3}')"
  CLEANUPS+=("ctd_stop")
  ctd_start || { result sprout containerd setup 1 "containerd did not start"; return; }
  ctd_images || { result sprout containerd setup 1 "ctr images import failed"; return; }
  local c who
  local whos="sprout"; [ "$WITH_REF" = 1 ] && whos="sprout runc"
  local cks=""
  if criu check >/dev/null 2>&1; then cks="checkpoint"; else skip containerd/checkpoint "criu check fails here"; fi
  for c in run_rm exit_code stdin tty detached exec_more kill_sigkill rm_paused error_surfaces error_surfaces_race enoent_abs memory env_cwd readonly net_host lo_up $cks; do
    for who in $whos; do
      CTWHO=$who; if [ $who = sprout ]; then CTBIN=$SPROUT; else CTBIN=$REF_RUNC; fi
      check $who containerd "$c" ct_$c
    done
  done
}

# ---------------------------------------------------------------------------------------
# Docker (private dockerd)
DK=$TMP/docker
# The containers' cgroup parent: this run's own (dockerd's default, /docker, is the host's dockerd's).
DK_CGPARENT=sprout-clients-$RUN_ID-docker
DOCKER_BIN=/usr/bin/docker
[ -x $DOCKER_BIN ] || DOCKER_BIN=$(command -v docker 2>/dev/null || echo docker)
dk() { to $DOCKER_BIN -H "unix://$DK/docker.sock" "$@"; }
dk_start() {
  mkdir -p "$DK"/{data,exec}
  local hn; hn=$(ulimit -Hn); [ "$hn" = unlimited ] && hn=1048576; [ "$hn" -gt 1048576 ] && hn=1048576
  # cgroupfs driver: the suite's own cgroup parent is a plain path (a systemd host's default
  # driver, systemd, would refuse it: it wants a "xxx.slice"); on hosts without systemd it is
  # dockerd's default anyway.
  cat >"$DK/daemon.json" <<EOF
{
  "runtimes": { "sprout": { "path": "$SPROUT" } },
  "cgroup-parent": "/$DK_CGPARENT",
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "default-ulimits": { "nofile": { "Name": "nofile", "Hard": $hn, "Soft": $hn } }
}
EOF
  dockerd --config-file "$DK/daemon.json" --data-root "$DK/data" --exec-root "$DK/exec" -H "unix://$DK/docker.sock" \
    --pidfile "$DK/docker.pid" --iptables=false --ip6tables=false --bridge=none --storage-driver "$DK_DRIVER" \
    >"$DK/dockerd.log" 2>&1 &
  DK_PID=$!
  PIDS_TO_STOP+=("$DK_PID")
  local i
  for i in $(seq 150); do dk version >/dev/null 2>&1 && return 0; kill -0 $DK_PID 2>/dev/null || break; sleep 0.2; done
  echo "dockerd did not start:"; tail -20 "$DK/dockerd.log"; return 1
}
dk_stop() {
  local c
  for c in $(dk ps -aq 2>/dev/null); do dk rm -f "$c" >/dev/null 2>&1; done
  stop_pid "$DK_PID"
  # dockerd's own containerd (under exec-root) goes with it; shims that stayed are ours to stop.
  local p
  for p in $(pgrep -f "containerd-shim-runc-v2 .*$DK/exec" 2>/dev/null); do stop_pid "$p"; done
  for p in $(pgrep -f "containerd --config $DK/exec" 2>/dev/null); do stop_pid "$p"; done
  rmdir /sys/fs/cgroup/*/"$DK_CGPARENT"/* /sys/fs/cgroup/*/"$DK_CGPARENT" /sys/fs/cgroup/"$DK_CGPARENT" 2>/dev/null   # ours, if empty
}
dk_run_rm() { cap dk run --runtime $DKRT --rm "$IMG" echo hello; eq "$OUT" hello && eq "$RC" 0; }
dk_exit_code() { cap dk run --runtime $DKRT --rm "$IMG" sh -c 'exit 3'; eq "$RC" 3; }
dk_enoent() { cap dk run --runtime $DKRT --rm "$IMG" /nonexistent; echo "$OUT"; eq "$RC" 127; }
dk_notinpath() { cap dk run --runtime $DKRT --rm "$IMG" no-such-command; echo "$OUT"; eq "$RC" 127 || return 1
  cap dk inspect -f '{{.State.ExitCode}}' "$(dk ps -aq -l)"; true; }
dk_eacces() { cap dk run --runtime $DKRT --rm "$IMG" /etc/passwd; echo "$OUT"; eq "$RC" 126; }
dk_stdin() { OUT=$(echo piped-in | timeout -k 5 $T $DOCKER_BIN -H "unix://$DK/docker.sock" run --runtime $DKRT --rm -i "$IMG" cat 2>&1); eq "$OUT" piped-in; }
dk_tty() {
  OUT=$(to $PTY --timeout 40 --send 'tty; echo "cols=$(stty size)"; echo MARK$((40+2))\n' --send 'exit 5\n' -- \
    $DOCKER_BIN -H "unix://$DK/docker.sock" run --runtime $DKRT --rm -it "$IMG" sh); RC=$?
  has "$OUT" '/dev/pts/0' && has "$OUT" MARK42 && has "$OUT" 'cols=37 101' && eq "$RC" 5
}
dk_detached() {
  local n=d-$DKRT
  cap dk run --runtime $DKRT -d --name $n "$IMG" sh -c 'echo to-stdout; trap "echo got-term; exit 0" TERM; while :; do sleep 0.1; done'
  [ "$RC" = 0 ] || { echo "run -d: $OUT"; return 1; }
  cap dk inspect -f '{{.HostConfig.Runtime}} {{.State.Status}}' $n; eq "$OUT" "$DKRT running" || return 1
  local id; id=$(dk inspect -f '{{.Id}}' $n)   # really run by that runtime: its state is under its --root
  # dockerd 20.10 gives every runtime the same --root (<exec-root>/runtime-runc/moby)
  local bin=$REF_RUNC; [ $DKRT = sprout ] && bin=$SPROUT
  cap $bin --root "$DK/exec/runtime-runc/moby" state $id; has "$OUT" '"status": *"running"' || return 1
  cap dk exec $n sh -c 'echo exec-ok; exit 4'; eq "$OUT" exec-ok && eq "$RC" 4 || return 1
  OUT=$(to $PTY --timeout 20 -- $DOCKER_BIN -H "unix://$DK/docker.sock" exec -it $n sh -c 'tty; exit 6'); RC=$?
  has "$OUT" '/dev/pts/' && eq "$RC" 6 || return 1
  cap dk top $n; has "$OUT" 'sh -c' || return 1
  cap dk pause $n; eq "$RC" 0 || { echo "pause: $OUT"; return 1; }
  cap dk inspect -f '{{.State.Status}}' $n; eq "$OUT" paused || return 1
  cap dk unpause $n; eq "$RC" 0 || { echo "unpause: $OUT"; return 1; }
  cap dk update --memory 96m --memory-swap 96m $n; eq "$RC" 0 || { echo "update: $OUT"; return 1; }
  cap dk exec $n sh -c 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max'; eq "$OUT" 100663296 || return 1
  cap dk stop -t 10 $n; eq "$RC" 0 || { echo "stop: $OUT"; return 1; }
  cap dk inspect -f '{{.State.Status}} {{.State.ExitCode}}' $n; eq "$OUT" "exited 0" || return 1
  cap dk logs $n; has "$OUT" to-stdout && has "$OUT" got-term || return 1
  cap dk start $n; eq "$RC" 0 || { echo "start: $OUT"; return 1; }
  cap dk restart -t 1 $n; eq "$RC" 0 || { echo "restart: $OUT"; return 1; }
  cap dk kill $n; eq "$RC" 0 || { echo "kill: $OUT"; return 1; }
  wait_for "exited 137" dk inspect -f '{{.State.Status}} {{.State.ExitCode}}' $n || return 1
  cap dk rm $n; eq "$RC" 0 || { echo "rm: $OUT"; return 1; }
}
dk_rm_paused() {
  local n=rp-$DKRT
  dk run --runtime $DKRT -d --name $n "$IMG" sleep 1000 >/dev/null && dk pause $n >/dev/null || return 1
  cap dk rm -f $n; eq "$RC" 0 || { echo "$OUT"; return 1; }
}
dk_net_none() { cap dk run --runtime $DKRT --rm --network none "$IMG" ip -o link; [ "$(printf '%s\n' "$OUT" | grep -c '^[0-9]')" = 1 ] && has "$OUT" 'lo: <LOOPBACK,UP'; }
dk_net_host() { cap dk run --runtime $DKRT --rm --network host "$IMG" ip -o link; eq "$(printf '%s\n' "$OUT" | grep -c '^[0-9]')" "$(ip -o link | grep -c '^[0-9]')"; }
dk_resources() { local c='cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us'
  [ -z "$CG2" ] || c='cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max; cut -d" " -f1 /sys/fs/cgroup/cpu.max'
  cap dk run --runtime $DKRT --rm --memory 64m --pids-limit 20 --cpus 0.5 "$IMG" sh -c "$c"
  eq "$(echo $OUT)" "67108864 20 50000"; }
dk_user_readonly() { cap dk run --runtime $DKRT --rm --user 65534 --read-only --tmpfs /tmp "$IMG" sh -c 'id -u; touch /x 2>&1; touch /tmp/y && echo tmp-ok'
  has "$OUT" '^65534' && has "$OUT" 'Read-only' && has "$OUT" tmp-ok; }
dk_caps() { cap dk run --runtime $DKRT --rm --cap-drop ALL --security-opt no-new-privileges "$IMG" sh -c 'grep -E "CapEff|NoNewPrivs" /proc/self/status'
  has "$OUT" 'CapEff:\s+0+' && has "$OUT" 'NoNewPrivs:\s+1'; }
dk_init() { cap dk run --runtime $DKRT --rm --init "$IMG" sh -c 'cat /proc/1/cmdline | tr "\0" " "'; has "$OUT" 'init'; }
dk_seccomp() { cap dk run --runtime $DKRT --rm "$IMG" grep Seccomp: /proc/self/status; has "$OUT" 'Seccomp:\s+2'; }
dk_userns_pidhost() { cap dk run --runtime $DKRT --rm --pid host --ipc host --uts host "$IMG" sh -c 'test "$(hostname)" = "$(cat /proc/1/root/etc/hostname 2>/dev/null || hostname)"; ps -o pid | grep -c "^ *1$"'; eq "$RC" 0; }
dk_stats() { local n=st-$DKRT; dk run --runtime $DKRT -d --name $n "$IMG" sleep 1000 >/dev/null || return 1
  cap dk stats --no-stream --format '{{.Name}} {{.PIDs}}' $n; dk rm -f $n >/dev/null; has "$OUT" "^$n 1"; }
dk_oom() { local n=oom-$DKRT
  cap dk run --runtime $DKRT --name $n --memory 20m --memory-swap 20m "$IMG" sh -c 'tail /dev/zero'; local rc=$RC
  cap dk inspect -f '{{.State.OOMKilled}} {{.State.ExitCode}}' $n; dk rm -f $n >/dev/null; eq "$rc" 137 && eq "$OUT" "true 137"; }
dk_update() { local n=up-$DKRT
  dk run --runtime $DKRT -d --name $n --cpus 1 --pids-limit 50 "$IMG" sleep 1000 >/dev/null || return 1
  cap dk update --cpus 0.5 --pids-limit 40 --cpu-shares 512 $n; local r=$RC o=$OUT
  # v2: cpu.shares 512 is cpu.weight 59 (weight_of_512)
  local c='cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/cpu/cpu.shares' want="50000 40 512"
  [ -z "$CG2" ] || { c='cut -d" " -f1 /sys/fs/cgroup/cpu.max; cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.weight'; want="50000 40 $(weight_of_512 "$DKRT")"; }
  cap dk exec $n sh -c "$c"
  dk rm -f $n >/dev/null; eq "$r" 0 || { echo "update: $o"; return 1; }; eq "$(echo $OUT)" "$want"; }
dk_misc_flags() { cap dk run --runtime $DKRT --rm --cpuset-cpus 0 --oom-score-adj 500 --ulimit nofile=512:512 --group-add 1234 \
    --cap-add SYS_ADMIN --hostname hh --shm-size 16m "$IMG" sh -c \
    'cat /sys/fs/cgroup/cpuset/cpuset.cpus /proc/self/oom_score_adj; ulimit -n; id -G; hostname; grep -c " /sys/fs/cgroup/" /proc/self/mountinfo; df -k /dev/shm | tail -1'
  has "$OUT" '^0$' && has "$OUT" '^500$' && has "$OUT" '^512$' && has "$OUT" '1234' && has "$OUT" '^hh$' && has "$OUT" '16384'; }
dk_cgroupns_private() { # the cgroup mount shows the container's own cgroup, not the host's tree
  cap dk run --runtime $DKRT --rm --cgroupns private --memory 64m --cpuset-cpus 0 "$IMG" sh -c \
    'cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpuset/cpuset.cpus 2>/dev/null || cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpuset.cpus'
  eq "$(echo $OUT)" "67108864 0"; }
dk_share_ns() { # --network/--pid/--ipc container:<id>: namespaces joined by path
  local n=sh-$DKRT
  dk run --runtime $DKRT -d --name $n --ipc shareable "$IMG" sh -c 'echo shared > /dev/shm/x; sleep 1000' >/dev/null || return 1
  wait_for '^shared$' dk exec $n cat /dev/shm/x || { dk rm -f $n >/dev/null; return 1; }
  cap dk run --runtime $DKRT --rm --network container:$n --pid container:$n --ipc container:$n "$IMG" sh -c \
    'cat /dev/shm/x; ps -o args | grep -c "[s]leep 1000"; readlink /proc/self/ns/net'; local o=$OUT
  local na; na=$(dk exec $n readlink /proc/self/ns/net)
  dk rm -f $n >/dev/null
  has "$o" '^shared$' && has "$o" '^1$' && hasline "$o" "$na"; }
dk_exec_opts() { local n=eo-$DKRT
  dk run --runtime $DKRT -d --name $n "$IMG" sleep 1000 >/dev/null || return 1
  cap dk exec -u 65534 -w /tmp -e X=y $n sh -c 'echo $(id -u) $(pwd) $X; grep CapEff /proc/self/status'; local o1=$OUT
  cap dk exec -d $n sh -c 'echo detached > /tmp/d'; wait_for '^detached$' dk exec $n cat /tmp/d >/dev/null; cap dk exec $n cat /tmp/d; local o3=$OUT
  dk rm -f $n >/dev/null
  has "$o1" '^65534 /tmp y' && has "$o1" 'CapEff:\s+0+$' && eq "$o3" detached; }
dk_restart_policy() { # the daemon restarts a dying container through the runtime
  local n=rs-$DKRT
  dk run --runtime $DKRT -d --name $n --restart on-failure:2 "$IMG" sh -c 'sleep 0.3; exit 1' >/dev/null || return 1
  wait_for '^2 exited' dk inspect -f '{{.RestartCount}} {{.State.Status}}' $n; local r=$?
  dk rm -f $n >/dev/null; return $r
}

run_docker() {
  command -v dockerd >/dev/null || { skip docker "dockerd not installed"; return; }
  echo "## docker $(dockerd --version | awk '{print $3}' | tr -d ,)"
  CLEANUPS+=("dk_stop")
  dk_start || { result sprout docker setup 1 "dockerd did not start"; return; }
  cap dk load -i "$TMP/busybox-docker.tar"; [ "$RC" = 0 ] || { result sprout docker load 1 "$OUT"; return; }
  local c rts="sprout"; [ "$WITH_REF" = 1 ] && rts="sprout runc"
  for c in run_rm exit_code enoent notinpath eacces stdin tty detached rm_paused net_none net_host resources user_readonly caps init seccomp userns_pidhost stats oom update misc_flags cgroupns_private share_ns exec_opts restart_policy; do
    for DKRT in $rts; do check $DKRT docker "$c" dk_$c; done
  done
}

# ---------------------------------------------------------------------------------------
# CRI: containerd's CRI plugin with the runtime selected by handler (what a Kubernetes
# RuntimeClass does). cri/ is a small CRI client (pod sandbox, create/start, logs, exec, update,
# stop/remove, exit codes, errors); critest runs too when a binary is given (CRITEST) or on PATH.
ctd_cri_images() {
  ctr --address "$CTD/containerd.sock" -n k8s.io images import "$TMP/busybox-docker.tar" >/dev/null &&
  ctr --address "$CTD/containerd.sock" -n k8s.io images import "$TMP/pause-docker.tar" >/dev/null
}
ctd_critest_images() { # the stand-ins critest-images.sh made; its pause image replaces run.sh's
  local t
  ctr --address "$CTD/containerd.sock" -n k8s.io images rm "$PAUSE_IMG" >/dev/null 2>&1
  for t in "$TMP"/critest-images/*.tar; do
    ctr --address "$CTD/containerd.sock" -n k8s.io images import "$t" >/dev/null || return 1
  done
}
ctd_k8s_cleanup() {
  local c
  for c in $(ctr --address "$CTD/containerd.sock" -n k8s.io c ls -q 2>/dev/null); do
    ctr --address "$CTD/containerd.sock" -n k8s.io t kill -s KILL "$c" >/dev/null 2>&1; sleep 0.2
    ctr --address "$CTD/containerd.sock" -n k8s.io t rm -f "$c" >/dev/null 2>&1; ctr --address "$CTD/containerd.sock" -n k8s.io c rm "$c" >/dev/null 2>&1
  done
}
run_cri() {
  command -v containerd >/dev/null || { skip cri "containerd not installed"; return; }
  echo "## CRI (containerd $(containerd --version | awk '{print $3}') CRI plugin, runtime handler per RuntimeClass)"
  CLEANUPS+=("ctd_stop")
  CTD_DEFAULT_RUNTIME=runc
  ctd_start || { result sprout cri setup 1 "containerd did not start"; return; }
  ctd_cri_images || { result sprout cri setup 1 "ctr -n k8s.io images import failed"; return; }
  local smoke=$TMP/cri-smoke who line
  if command -v go >/dev/null && (cd "$HERE/cri" && GOFLAGS=-mod=mod timeout 600 go build -o "$smoke" . >"$TMP/cri-build.log" 2>&1); then
    local whos="sprout"; [ "$WITH_REF" = 1 ] && whos="sprout runc"
    for who in $whos; do
      mkdir -p "$TMP/cri-logs"
      while IFS= read -r line; do
        case "$line" in
          "PASS "*) result $who cri "${line#PASS cri/}" 0 ;;
          "FAIL "*) result $who cri "${line#FAIL cri/}" 1 ;;
          "    | "*|"# "*) echo "$line" ;;
        esac
      done < <(timeout -k 5 300 "$smoke" -endpoint "unix://$CTD/containerd.sock" -handler $who -image "$IMG" -logdir "$TMP/cri-logs" 2>&1)
      ctd_k8s_cleanup
    done
  else
    skip cri-smoke "go build of tests/clients/cri failed (no Go toolchain or module proxy): $(tail -2 "$TMP/cri-build.log" 2>/dev/null | tr '\n' ' ')"
  fi
  local crit=${CRITEST:-$(command -v critest || echo "$HOME/go/bin/critest")}
  if [ -x "$crit" ]; then
    # critest's own images, made here (critest-images.sh): nothing can be pulled.
    if ! bash "$HERE/critest-images.sh" "$TMP/critest-images" >"$TMP/critest-images.log" 2>&1; then
      result sprout critest setup 1 "critest-images.sh failed: $(tail -2 "$TMP/critest-images.log" | tr '\n' ' ')"
      return
    fi
    for who in sprout runc; do
      [ $who = runc ] && [ "$WITH_REF" = 0 ] && continue
      ctd_stop; CTD_DEFAULT_RUNTIME=$who
      ctd_start && ctd_cri_images && ctd_critest_images || { result $who critest setup 1 "containerd did not start or an image import failed"; continue; }
      local log=$TMP/critest-$who.log
      # Skipped by default: what needs a registry (pulls, the image manager's listings), host
      # ports and port forwarding, a route to the pod network, and MaskedPaths, whose check
      # (`ls` of a masked /bin/ls) busybox's shell answers in-process (every runtime fails it).
      timeout -k 10 ${CRITEST_TIMEOUT:-2700} "$crit" --runtime-endpoint "unix://$CTD/containerd.sock" \
        --image-endpoint "unix://$CTD/containerd.sock" --ginkgo.no-color \
        --ginkgo.skip "${CRITEST_SKIP:-[Pp]ull|Image Manager|[Pp]ort mapping|[Pp]ortforward|should support network|MaskedPaths}" \
        ${CRITEST_ARGS:-} >"$log" 2>&1
      local st=$?
      echo "# critest ($who): $(grep -E '^(Ran [0-9]+ of|FAIL!|SUCCESS!)' "$log" | tail -2 | tr '\n' ' ')"
      grep -E '^\s*\[(FAIL|Fail)\]' "$log" | sort -u | head -40 | sed 's/^/#   /'
      cp "$log" "/tmp/critest-$who.log" 2>/dev/null
      result $who critest cri-validation $st "full log: /tmp/critest-$who.log"
      ctd_k8s_cleanup
    done
  else
    skip critest "no critest binary (sigs.k8s.io/cri-tools is not served by the Go module proxy here; set CRITEST=/path/to/critest)"
  fi
  ctd_k8s_cleanup
}

# ---------------------------------------------------------------------------------------
# CRI on containerd 2 (built from the Go module proxy by tests/clients/containerd2.sh, cached):
# kubelet's checkpoint API, the CRI CheckpointContainer RPC (containerd >= 2.0; Debian's 1.6 has
# none), per runtime handler: cri/checkpoint.go checkpoints a running counter into an archive,
# checks the archive and that the container keeps running; with containerd 2.3 also the restore
# through CreateContainer (the archive as the image, in a new pod), which containerd 2.4 removed.
# Versions: CRI2_VERSIONS (default: containerd2.sh --versions, "2.4.2 2.3.7": the newest, and the
# newest with the restore).
CTD2=""   # $TMP/containerd2-VERSION-HANDLER: a fresh instance per handler
CRI2_VERSIONS=${CRI2_VERSIONS:-$("$HERE/containerd2.sh" --versions)}
CTD2_NET=sprout-test-ctd2-$RUN_ID CTD2_BR="" CTD2_SUBNET="" CTD2_PID=""
CRI2_CGPARENT=/sprout-clients-$RUN_ID-cri2   # the pods' cgroup parent: this run's own
ctd2_config() { # VERSION
  local v=$1 restore=""
  case "$v" in 2.[0-3].*) restore="enable_experimental_restore_via_create = true" ;; esac
  mkdir -p "$CTD2"/{root,state,cni}
  cat >"$CTD2/config.toml" <<EOF
version = 3
root = "$CTD2/root"
state = "$CTD2/state"
[grpc]
  address = "$CTD2/containerd.sock"
[ttrpc]
  address = "$CTD2/containerd.sock.ttrpc"
[debug]
  address = "$CTD2/debug.sock"
  level = "debug"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "$CTD_SNAP"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMG"
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  $restore
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$REF_RUNC"
        Root = "$CTD2/cri-runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.sprout]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.sprout.options]
        BinaryName = "$SPROUT"
        Root = "$CTD2/cri-sprout"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$CTD2/cni"
EOF
  if [ -z "$CTD2_BR" ]; then
    CTD2_BR=$(free_ifname sprc2) || { echo "no free bridge interface name"; return 1; }
    CTD2_SUBNET=$(pick_subnet $PM_SUBNET $CTD_SUBNET); [ -n "$CTD2_SUBNET" ] || { echo "no free 10.x.y.0/24 subnet"; return 1; }
  fi
  cat >"$CTD2/cni/10-sprout-test.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "$CTD2_NET", "plugins": [{"type": "bridge", "bridge": "$CTD2_BR", "isGateway": false,
 "ipMasq": false, "ipam": {"type": "host-local", "subnet": "$CTD2_SUBNET", "dataDir": "$CTD2/cni-ipam"}}]}
EOF
}
ctr2() { to ctr --address "$CTD2/containerd.sock" -n k8s.io "$@"; }   # Debian's ctr: the API is the same
ctd2_start() { # BINDIR VERSION: that containerd, its own shim first on PATH
  ctd2_config "$2" || return 1
  PATH="$1:$PATH" "$1/containerd" --config "$CTD2/config.toml" >"$CTD2.log" 2>&1 &
  CTD2_PID=$!
  PIDS_TO_STOP+=("$CTD2_PID")
  local i
  for i in $(seq 150); do [ -S "$CTD2/containerd.sock" ] && ctr2 version >/dev/null 2>&1 && break; sleep 0.2; done
  ctr2 version >/dev/null 2>&1 || { echo "containerd $2 did not start:"; tail -20 "$CTD2.log"; return 1; }
  ctr2 images import "$TMP/busybox-docker.tar" >/dev/null && ctr2 images import "$TMP/pause-docker.tar" >/dev/null \
    || { echo "ctr -n k8s.io images import failed"; return 1; }
}
ctd2_stop() {
  [ -n "$CTD2_PID" ] || return 0
  local c p
  for c in $(ctr2 c ls -q 2>/dev/null); do
    ctr2 t kill -s KILL "$c" >/dev/null 2>&1; sleep 0.2; ctr2 t rm -f "$c" >/dev/null 2>&1; ctr2 c rm "$c" >/dev/null 2>&1
  done
  stop_pid "$CTD2_PID"; CTD2_PID=""
  # Shims outlive containerd by design: stop the ones serving this instance (by pid).
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTD2/containerd.sock" 2>/dev/null); do stop_pid "$p"; done
  [ -n "$CTD2_BR" ] && ip link show "$CTD2_BR" >/dev/null 2>&1 && ip link del "$CTD2_BR" >/dev/null 2>&1
  rm -f /var/lib/cni/results/"$CTD2_NET"-* 2>/dev/null
  # This run's cgroup parent (its name has RUN_ID), only when empty (rmdir).
  rmdir /sys/fs/cgroup/*/"${CRI2_CGPARENT#/}"/* /sys/fs/cgroup/*/"${CRI2_CGPARENT#/}" \
        /sys/fs/cgroup/"${CRI2_CGPARENT#/}"/* /sys/fs/cgroup/"${CRI2_CGPARENT#/}" 2>/dev/null
  umount_under "$CTD2"
  return 0
}
run_cri2() {
  echo "## CRI on containerd 2 (tests/clients/containerd2.sh): kubelet's checkpoint API"
  local why v bin smoke=$TMP/cri-smoke who line restore st whos="sprout"
  [ "$WITH_REF" = 1 ] && whos="sprout runc"
  if ! why=$(criu check 2>&1); then
    skip cri2/checkpoint "criu check fails here: $(printf '%s\n' "$why" | grep -m1 -i error)"; return
  fi
  command -v go >/dev/null || { skip cri2/checkpoint "no Go toolchain (containerd 2 and the CRI client are built with it)"; return; }
  if [ ! -x "$smoke" ] && ! (cd "$HERE/cri" && GOFLAGS=-mod=mod timeout 600 go build -o "$smoke" . >"$TMP/cri-build.log" 2>&1); then
    skip cri2/checkpoint "go build of tests/clients/cri failed: $(tail -2 "$TMP/cri-build.log" | tr '\n' ' ')"; return
  fi
  CLEANUPS+=("ctd2_stop")
  for v in $CRI2_VERSIONS; do
    if ! bin=$(timeout 1200 "$HERE/containerd2.sh" "$v" 2>"$TMP/containerd2-$v.log"); then
      skip "cri2@$v/checkpoint" "containerd $v could not be installed from the Go module proxy: $(tail -2 "$TMP/containerd2-$v.log" | tr '\n' ' ')"
      continue
    fi
    echo "# containerd $("$bin/containerd" --version | awk '{print $3}') ($bin)"
    restore=""; case "$v" in 2.[0-3].*) restore=-restore ;; esac
    for who in $whos; do
      # A fresh containerd per handler: what one handler leaves behind cannot fail the other.
      CTD2=$TMP/containerd2-$v-$who
      ctd2_start "$bin" "$v" >"$TMP/ctd2-start.log" 2>&1 || { result $who "cri2@$v" setup 1 "$(cat "$TMP/ctd2-start.log")"; ctd2_stop; continue; }
      mkdir -p "$TMP/cri2-logs"
      st=0
      while IFS= read -r line; do
        case "$line" in
          "PASS "*) line=${line#PASS }; result $who "${line%%/*}" "${line#*/}" 0 ;;
          "FAIL "*) line=${line#FAIL }; result $who "${line%%/*}" "${line#*/}" 1; st=1 ;;
          "    | "*|"# "*) echo "$line" ;;
        esac
      done < <(timeout -k 5 300 "$smoke" -test checkpoint $restore -endpoint "unix://$CTD2/containerd.sock" -handler $who \
                 -image "$IMG" -logdir "$TMP/cri2-logs" -prefix "cri2@$v" -cgroup-parent "$CRI2_CGPARENT" 2>&1)
      if [ "$st" != 0 ]; then
        echo "#   containerd $v log, its checkpoint/restore errors:"
        grep -E 'level=(error|warning)' "$CTD2.log" | grep -iE 'checkpoint|restore|criu' | grep -v 'Failed to handle event' | tail -6 | cut -c1-600 | sed 's/^/#     /'
        cp "$CTD2.log" "/tmp/containerd-$v-$who.log" 2>/dev/null && echo "#   full log: /tmp/containerd-$v-$who.log"
      fi
      ctd2_stop
    done
    # A node restores what another runtime checkpointed (kubelet moves archives between nodes):
    # runc's archive restored by sprout, sprout's by runc. sprout's checks either way (its
    # restore of runc's images; its images as runc reads them), also with --no-ref.
    # sprout's archive restored by runc fails on a hybrid host: sprout mounts the host's
    # /sys/fs/cgroup/unified in its containers and marks it external, runc mounts only the v1
    # hierarchies and has no mapping for it. There it runs only with CRI2_CROSS=1.
    [ -n "$restore" ] && [ -x "$REF_RUNC" ] || continue
    local from to
    for from in runc sprout; do
      if [ $from = runc ]; then to=sprout; else to=runc; fi
      if [ $from = sprout ] && [ -e /sys/fs/cgroup/unified/cgroup.procs ] && [ "${CRI2_CROSS:-0}" != 1 ]; then
        skip "cri2@$v:sprout-to-runc/restore" "hybrid cgroup host: runc's restore has no mapping for the /sys/fs/cgroup/unified bind sprout mounts (docs/compatibility.md); CRI2_CROSS=1 runs it"
        continue
      fi
      CTD2=$TMP/containerd2-$v-$from-$to
      ctd2_start "$bin" "$v" >"$TMP/ctd2-start.log" 2>&1 || { result sprout "cri2@$v:$from-to-$to" setup 1 "$(cat "$TMP/ctd2-start.log")"; ctd2_stop; continue; }
      st=0
      while IFS= read -r line; do
        case "$line" in
          "PASS "*) line=${line#PASS }; result sprout "${line%%/*}" "${line#*/}" 0 ;;
          "FAIL "*) line=${line#FAIL }; result sprout "${line%%/*}" "${line#*/}" 1; st=1 ;;
          "    | "*) echo "$line" ;;
        esac
      done < <(timeout -k 5 300 "$smoke" -test checkpoint -restore -endpoint "unix://$CTD2/containerd.sock" -handler $from \
                 -restore-handler $to -image "$IMG" -logdir "$TMP/cri2-logs" -prefix "cri2@$v:$from-to-$to" \
                 -cgroup-parent "$CRI2_CGPARENT" 2>&1)
      if [ "$st" != 0 ]; then
        cp "$CTD2.log" "/tmp/containerd-$v-$from-to-$to.log" 2>/dev/null && echo "#   containerd log: /tmp/containerd-$v-$from-to-$to.log"
      fi
      ctd2_stop
    done
  done
}

# ---------------------------------------------------------------------------------------
build_images || { echo "FAIL setup/images"; echo "0 passed, 1 failed"; exit 1; }
want podman && run_podman
want containerd && run_containerd
want docker && run_docker
want cri && run_cri
want cri2 && run_cri2

echo
[ "$WITH_REF" = 1 ] && echo "reference (runc): $RPASS passed, $RFAIL failed"
[ ${#FAILED[@]} -gt 0 ] && echo "failed: ${FAILED[*]}"
[ "$NSKIP" -gt 0 ] && echo "skipped: $NSKIP"
echo "$NPASS passed, $NFAIL failed"
[ "$NFAIL" = 0 ]
