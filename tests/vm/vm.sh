#!/usr/bin/env bash
# tests/vm/vm.sh — the pure cgroup-v2 + systemd test VM (image from tests/vm/image.sh).
#
#   vm.sh start                      build the image if needed, boot it, wait for ssh (prints
#                                    the boot time); writes the ssh command to /tmp/sprout-vm-ready
#   vm.sh stop                       poweroff, then kill the recorded qemu pid (only that one)
#   vm.sh status                     running or not, pid, port, image
#   vm.sh ssh [-u USER] CMD...       run CMD in the VM (as root by default); `ssh [-u U] -`
#                                    runs a bash script from stdin; no CMD: interactive shell
#   vm.sh push LOCAL... DEST         copy files/dirs into the VM (as root)
#   vm.sh pull SRC DST               copy a file/dir out of the VM
#   vm.sh sshcmd                     print the plain ssh command line (for other tools)
#   vm.sh stress-textpoke [SECONDS]  flip a kernel static key each second in the running VM (the
#                                    TCG text-patching race, see ensure_qemu); 1 if it oopsed
#
# qemu: 2 vCPUs, 4 GiB, the image as a raw backing file under a qcow2 overlay (recreated on
# every start; the image stays clean), user-mode network, ssh forwarded on 127.0.0.1 only.
# Acceleration: KVM when /dev/kvm is a real hardware KVM; TCG when it is the nested `kvm-pvm`
# (it cannot run a stock Debian kernel) or absent: boot 45-150 s under TCG.
# Env: SPROUT_VM_DIR (/var/tmp/sprout-vm), SPROUT_VM_PORT (10122), SPROUT_VM_MEM (4G),
#      SPROUT_VM_CPUS (2), SPROUT_VM_ACCEL (kvm|tcg), SPROUT_VM_BOOT_TIMEOUT (600 s).
# Exit status: 0 ok; 1 failure (boot, ssh); 2 usage; ssh/scp pass their own status through.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VMROOT=${SPROUT_VM_DIR:-/var/tmp/sprout-vm}
RUN=$VMROOT/run
PORT=${SPROUT_VM_PORT:-10122}
MEM=${SPROUT_VM_MEM:-4G}
CPUS=${SPROUT_VM_CPUS:-2}
PIDFILE=$RUN/qemu.pid
KEY=$RUN/id_ed25519
READY=/tmp/sprout-vm-ready
OPTS=(-i "$KEY" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
      -o BatchMode=yes -o ConnectTimeout=20 -o ServerAliveInterval=30 -o ServerAliveCountMax=20
      -o ControlMaster=auto -o "ControlPath=$RUN/ssh-%r.sock" -o ControlPersist=30m)
log() { echo "vm: $*" >&2; }

# the pid of our qemu, if it is running (checked against its command line, not just the number)
qemu_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid; pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$RUN/overlay.qcow2" || return 1
  echo "$pid"
}
ssh_run() { local u=$1; shift; ssh -p "$PORT" "${OPTS[@]}" "$u@127.0.0.1" "$@"; }

# A guest kernel that panics while it boots (seen under TCG: "Fatal exception in interrupt" in
# get_page_from_freelist, 2026-11-26, one boot of many) is booted once more instead of waiting
# out the ssh timeout; a second panic fails the start.
cmd_start() {
  if pid=$(qemu_pid); then log "already running (pid $pid, port $PORT)"; return 0; fi
  local try rc
  for try in 1 2; do
    boot_once && return 0
    rc=$?
    [ "$rc" = 2 ] && [ "$try" = 1 ] || return 1
    cp "$RUN/serial.log" "$RUN/serial-panic.log" 2>/dev/null || true
    log "the guest kernel panicked while booting (kept in $RUN/serial-panic.log); booting again"
  done
  return 1
}

# QEMU older than 10 under multi-threaded TCG lets a vCPU run a stale `int3` after the guest
# kernel has finished patching its own text (text_poke_bp: every static key flip): "Oops: int3"
# in __schedule, "Kernel panic - not syncing: Fatal exception in interrupt". Measured here
# 2026-11-26 with `vm.sh stress-textpoke` (a perf event opened and closed each second flips the
# perf_sched_events key patched into __schedule): QEMU 7.2 (Debian 12) panicked within ~150 s;
# QEMU 10.0 (bookworm-backports) ran 390 s (664 flips) without. CI lost whole suites to it.
# On a Debian host whose QEMU is older, install the backports one (same mirror); if that fails,
# go on with a warning (run.sh reruns a suite once after a panic).
QEMU_MIN_MAJOR=10
qemu_new_enough() {
  local v; v=$(qemu-system-x86_64 --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p')
  [ -n "$v" ] && [ "$v" -ge "$QEMU_MIN_MAJOR" ]
}
ensure_qemu() {
  qemu_new_enough && return 0
  local code mirror
  code=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}' || true)
  if [ -n "$code" ] && [ -n "$mirror" ] && [ "$(id -u)" = 0 ]; then
    log "$(qemu-system-x86_64 --version 2>/dev/null | head -1) is older than $QEMU_MIN_MAJOR under TCG (guest kernel text patching races): installing qemu-system-x86 from $code-backports"
    echo "deb $mirror $code-backports main" > /etc/apt/sources.list.d/sprout-vm-backports.list
    local A=(-o DPkg::Lock::Timeout=600)
    if apt-get "${A[@]}" update -qq >&2 \
        && DEBIAN_FRONTEND=noninteractive apt-get "${A[@]}" install -y -qq --no-install-recommends -t "$code-backports" qemu-system-x86 qemu-utils >&2; then
      qemu_new_enough && { log "$(qemu-system-x86_64 --version | head -1)"; return 0; }
    fi
  fi
  log "WARNING: $(qemu-system-x86_64 --version 2>/dev/null | head -1): older than $QEMU_MIN_MAJOR under TCG; the guest kernel may panic (int3) while it patches its text"
}

boot_once() {
  local img; img=$(bash "$HERE/image.sh" | tail -1)
  [ -f "$img/complete" ] || { log "no image"; return 1; }
  mkdir -p "$RUN"
  install -m600 "$img/id_ed25519" "$KEY"
  echo "$img" > "$RUN/image"
  rm -f "$RUN"/ssh-*.sock "$RUN/overlay.qcow2" "$RUN/boot-seconds" "$RUN/serial.log"
  qemu-img create -q -f qcow2 -b "$img/rootfs.img" -F raw "$RUN/overlay.qcow2"
  local accel=${SPROUT_VM_ACCEL:-}
  if [ -z "$accel" ]; then
    if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then accel=kvm; else accel=tcg; fi
  fi
  [ "$accel" = kvm ] || ensure_qemu
  local aopts
  if [ "$accel" = kvm ]; then aopts=(-enable-kvm -cpu "${SPROUT_VM_CPU:-host,-arch-capabilities}")
  else aopts=(-accel tcg,thread=multi,tb-size=1024 -cpu "${SPROUT_VM_CPU:-max}"); fi
  if ss -ltn 2>/dev/null | awk '{print $4}' | grep -qE "(^|:)$PORT\$"; then
    log "port $PORT is in use on this host; set SPROUT_VM_PORT"; return 1
  fi
  log "booting $img (accel $accel, $CPUS cpus, $MEM, ssh 127.0.0.1:$PORT)"
  local t0; t0=$(date +%s.%N)
  qemu-system-x86_64 "${aopts[@]}" -smp "$CPUS" -m "$MEM" -name sprout-vm \
    -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 ${SPROUT_VM_KAPPEND:-}" \
    -drive "file=$RUN/overlay.qcow2,format=qcow2,if=virtio,cache=unsafe,discard=unmap" \
    -netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$PORT-:22" -device virtio-net-pci,netdev=n0 \
    -device virtio-rng-pci \
    -display none -serial "file:$RUN/serial.log" -monitor none \
    -daemonize -pidfile "$PIDFILE"
  local deadline=$(( $(date +%s) + ${SPROUT_VM_BOOT_TIMEOUT:-600} ))
  until ssh -p "$PORT" "${OPTS[@]}" -o ControlMaster=no -o ConnectTimeout=10 root@127.0.0.1 true 2>/dev/null; do
    if ! qemu_pid >/dev/null; then log "qemu exited; see $RUN/serial.log"; tail -20 "$RUN/serial.log" >&2; return 1; fi
    if grep -q "Kernel panic - not syncing" "$RUN/serial.log" 2>/dev/null; then
      tail -5 "$RUN/serial.log" >&2; cmd_stop; return 2
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then log "no ssh after ${SPROUT_VM_BOOT_TIMEOUT:-600} s; see $RUN/serial.log"; cmd_stop; return 1; fi
    sleep 1
  done
  local secs; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  echo "$secs" > "$RUN/boot-seconds"
  log "boot to ssh: $secs s"
  # wait for systemd to settle (user manager of `tester` up: rootless podman needs it)
  ssh_run root 'systemctl is-system-running --wait >/dev/null 2>&1; loginctl enable-linger tester; systemctl start user@1000.service' || true
  ssh_run root 'echo "vm: cgroup fs $(stat -fc %T /sys/fs/cgroup), kernel $(uname -r), $(systemctl --version | head -1), $(systemctl is-system-running)"' >&2 || true
  printf '%s\n' "$(cmd_sshcmd) [CMD]   # or: bash $HERE/vm.sh ssh [-u tester] CMD" > "$READY"
}

cmd_stop() {
  local pid
  if ! pid=$(qemu_pid); then log "not running"; rm -f "$PIDFILE" "$READY"; return 0; fi
  rm -f "$READY"
  timeout 20 ssh -p "$PORT" "${OPTS[@]}" -o ControlMaster=no root@127.0.0.1 'systemctl poweroff' >/dev/null 2>&1 || true
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then kill "$pid"; sleep 2; fi
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  ssh -O exit -p "$PORT" "${OPTS[@]}" root@127.0.0.1 >/dev/null 2>&1 || true
  rm -f "$PIDFILE" "$RUN"/ssh-*.sock "$RUN/overlay.qcow2"
  log "stopped (pid $pid)"
}

cmd_sshcmd() {
  printf 'ssh -p %s -i %s -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR root@127.0.0.1' "$PORT" "$KEY"
}

[ $# -ge 1 ] || { sed -n 2,22p "$0"; exit 2; }
sub=$1; shift
case "$sub" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status)
    if pid=$(qemu_pid); then echo "running: pid $pid, ssh 127.0.0.1:$PORT, image $(cat "$RUN/image" 2>/dev/null), booted in $(cat "$RUN/boot-seconds" 2>/dev/null || echo ?) s"
    else echo "not running"; exit 1; fi ;;
  ssh)
    U=root; if [ "${1:-}" = -u ]; then U=$2; shift 2; fi
    qemu_pid >/dev/null || { log "not running (vm.sh start)"; exit 1; }
    if [ "${1:-}" = - ]; then exec ssh -p "$PORT" "${OPTS[@]}" "$U@127.0.0.1" bash -s; fi
    if [ $# -eq 0 ]; then exec ssh -t -p "$PORT" "${OPTS[@]}" "$U@127.0.0.1"; fi
    exec ssh -p "$PORT" "${OPTS[@]}" "$U@127.0.0.1" "$@" ;;
  push)
    [ $# -ge 2 ] || { log "push LOCAL... DEST"; exit 2; }
    dst=${*: -1}; set -- "${@:1:$#-1}"
    exec scp -q -r -P "$PORT" "${OPTS[@]}" "$@" "root@127.0.0.1:$dst" ;;
  pull)
    [ $# -eq 2 ] || { log "pull SRC DST"; exit 2; }
    exec scp -q -r -P "$PORT" "${OPTS[@]}" "root@127.0.0.1:$1" "$2" ;;
  sshcmd) cmd_sshcmd; echo ;;
  stress-textpoke)
    # the reproducer above: SECONDS (120) of perf_sched_events flips beside two busy loops in the
    # running VM; exit 1 when the guest's kernel logged an Oops (or died)
    secs=${1:-120}
    qemu_pid >/dev/null || { log "not running (vm.sh start)"; exit 1; }
    ssh_run root "cat > /tmp/textpoke-stress.py" < "$HERE/textpoke-stress.py"
    timeout $((secs + 120)) ssh -p "$PORT" "${OPTS[@]}" root@127.0.0.1 "(timeout $((secs + 5)) sh -c 'while :; do :; done') & (timeout $((secs + 5)) sh -c 'while :; do ls /proc >/dev/null; done') &
      python3 /tmp/textpoke-stress.py $secs; wait" || true
    if grep -q -E "Oops|Kernel panic" "$RUN/serial.log" 2>/dev/null; then
      grep -E "Oops|RIP|Kernel panic" "$RUN/serial.log" | head -4 >&2; log "$(qemu-system-x86_64 --version | head -1): the guest kernel oopsed"; exit 1
    fi
    log "$(qemu-system-x86_64 --version | head -1): no Oops in $secs s" ;;
  *) sed -n 2,22p "$0"; exit 2 ;;
esac
