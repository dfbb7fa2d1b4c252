#!/usr/bin/env bash
# tests/vm/podman-matrix.sh RUNTIME — podman driving RUNTIME on the VM's pure cgroup v2 + systemd,
# with both cgroup managers (--cgroup-manager=cgroupfs and systemd). As root: rootful podman;
# as an unprivileged user (run.sh ssh's in as `tester`, a real login session with its lingering
# systemd user manager): rootless podman. Private podman storage under a temp dir; a local busybox
# image (busybox-static, nothing pulled). Prints PASS NAME / FAIL NAME :: DETAIL / SKIP NAME (why).
set -u
RT=${1:?runtime path}
ROOTLESS=0; [ "$(id -u)" = 0 ] || ROOTLESS=1
who=root; [ $ROOTLESS = 1 ] && who=rootless
TMP=$(mktemp -d /var/tmp/vm-podman.XXXXXX)
chmod 755 "$TMP"
if [ $ROOTLESS = 1 ]; then
  export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/run/user/$(id -u)}
  export DBUS_SESSION_BUS_ADDRESS=${DBUS_SESSION_BUS_ADDRESS:-unix:path=$XDG_RUNTIME_DIR/bus}
  RUNROOT=$XDG_RUNTIME_DIR/vm-podman-$$
else
  RUNROOT=$TMP/run
fi
P=(podman --root "$TMP/storage" --runroot "$RUNROOT" --runtime "$RT" --events-backend file)
IMG=localhost/vmbusybox:latest
T=120
cleanup() {
  "${P[@]}" rm -af -t 0 >/dev/null 2>&1
  "${P[@]}" system reset -f >/dev/null 2>&1 || true
  [ $ROOTLESS = 1 ] && podman unshare rm -rf "$TMP" 2>/dev/null
  rm -rf "$TMP" "$RUNROOT" 2>/dev/null
}
trap cleanup EXIT
exec </dev/null

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1 :: $(printf '%s' "$2" | tr '\n' ' ' | cut -c1-400)"; }
skip() { echo "SKIP $1 ($2)"; }
# chk NAME EXPECTED CMD...: stdout of CMD must equal EXPECTED and exit 0 (stderr goes in the detail)
chk() {
  local n=$1 exp=$2 out rc; shift 2
  out=$(timeout -k 5 $T "$@" 2>"$TMP/stderr"); rc=$?
  if [ $rc = 0 ] && [ "$out" = "$exp" ]; then pass "$n"; else fail "$n" "exit $rc: $out $(cat "$TMP/stderr")"; fi
}

echo "## podman $(podman --version | awk '{print $3}') $who, runtime $RT ($("$RT" --version 2>&1 | head -1))"
# image: busybox-static + applet links
R=$TMP/rootfs; mkdir -p "$R/bin" "$R/proc" "$R/sys" "$R/dev" "$R/tmp" "$R/etc"
cp /bin/busybox "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"; done
echo 'root:x:0:0:root:/:/bin/sh' > "$R/etc/passwd"; echo 'root:x:0:' > "$R/etc/group"
if ! out=$(tar -C "$R" -c . | "${P[@]}" import --change 'CMD ["/bin/sh"]' - "$IMG" 2>&1); then
  fail "$who/setup" "podman import: $out"; exit 1
fi

for mgr in cgroupfs systemd; do
  n=$who/$mgr
  Q=("${P[@]}" --cgroup-manager "$mgr")
  if [ $ROOTLESS = 1 ] && [ $mgr = systemd ] && [ ! -S "$XDG_RUNTIME_DIR/bus" ]; then
    skip "$n/*" "no user D-Bus at $XDG_RUNTIME_DIR/bus"; continue
  fi
  chk "$n/run-echo" hi "${Q[@]}" run --rm --network none "$IMG" echo hi
  out=$(timeout -k 5 $T "${Q[@]}" run --rm --network none "$IMG" sh -c 'exit 7' 2>&1); rc=$?
  [ $rc = 7 ] && pass "$n/exit-code" || fail "$n/exit-code" "want 7, got $rc: $out"
  chk "$n/cgroupns" "0::/" "${Q[@]}" run --rm --network none "$IMG" cat /proc/self/cgroup
  if [ $ROOTLESS = 1 ] && [ $mgr = cgroupfs ]; then
    skip "$n/limits" "rootless + cgroupfs: podman cannot set cgroup limits without systemd delegation"
  else
    chk "$n/limits" "$(printf '67108864\n42\n50000 100000')" "${Q[@]}" run --rm --network none \
      --memory 64m --pids-limit 42 --cpus 0.5 "$IMG" sh -c 'cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max'
  fi
  c=vmt-$mgr-$$
  out=$(timeout -k 5 $T "${Q[@]}" run -d --network none --name "$c" "$IMG" sleep 1000 2>&1); rc=$?
  if [ $rc != 0 ]; then fail "$n/run-detached" "exit $rc: $out"
  else
    pass "$n/run-detached"
    chk "$n/exec" "x" "${Q[@]}" exec "$c" echo x
    if [ $mgr = systemd ] && [ $ROOTLESS = 0 ]; then
      # The scope carries the device allowlist (DevicePolicy=strict, DeviceAllow), set so that
      # systemd does not want a daemon-reload; after one, the container still reaches what the
      # rules allow and nothing else (10:229 is no default device). podman gives no CAP_MKNOD:
      # the exec is --privileged for it (all capabilities; the device rules stay the scope's).
      pid=$(timeout -k 5 $T "${Q[@]}" inspect -f '{{.State.Pid}}' "$c" 2>/dev/null)
      unit=$(basename "$(sed -n 's/^0:://p' "/proc/$pid/cgroup" 2>/dev/null)")
      got="$(systemctl show --value -p DevicePolicy "$unit") $(systemctl show --value -p NeedDaemonReload "$unit")"
      [ "$got" = "strict no" ] && pass "$n/device-policy" || fail "$n/device-policy" "$unit: DevicePolicy, NeedDaemonReload: $got"
      timeout -k 5 $T systemctl daemon-reload
      chk "$n/devices-after-daemon-reload" "$(printf 'null ok\ndenied')" "${Q[@]}" exec --privileged "$c" sh -c \
        'echo x >/dev/null && echo null ok; mknod /tmp/xfuse c 10 229; { echo x >/tmp/xfuse; } 2>&1 | grep -q "not permitted" && echo denied || echo opened'
    fi
    if [ $ROOTLESS = 1 ] && [ $mgr = cgroupfs ]; then
      skip "$n/pause" "rootless + cgroupfs: no cgroup to freeze"
    else
      out=$( { timeout -k 5 $T "${Q[@]}" pause "$c" && timeout -k 5 $T "${Q[@]}" inspect -f '{{.State.Status}}' "$c" && timeout -k 5 $T "${Q[@]}" unpause "$c"; } 2>&1); rc=$?
      [ $rc = 0 ] && printf '%s' "$out" | grep -q paused && pass "$n/pause" || fail "$n/pause" "exit $rc: $out"
    fi
    chk "$n/stop" "$c" "${Q[@]}" stop -t 1 "$c"
    chk "$n/rm" "$c" "${Q[@]}" rm "$c"
  fi
done
# the default network (netavark as root, pasta rootless): one run
chk "$who/net-default" ok "${P[@]}" run --rm "$IMG" echo ok
