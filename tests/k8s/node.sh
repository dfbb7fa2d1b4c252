#!/usr/bin/env bash
# tests/k8s/node.sh — runs INSIDE the test VM (tests/vm, as root): a real one-node Kubernetes
# (kubelet + containerd's CRI + the runc v2 shim; then etcd + kube-apiserver for RuntimeClasses)
# and the pod checks, each with sprout and with runc, then everything torn down again.
#
#   node.sh [--runtimes "sprout runc"] [--only CHECK,...] [--runc-checks CHECK,...] [--keep]
#
#   --runc-checks  the only phase-2 checks that also run with runc (CI's budget; default all)
#
# Env: SPROUT_K8S_BIN   kubelet, kube-apiserver, kubectl, etcd, pause (default /opt/sprout-k8s/bin;
#                       tests/k8s/build.sh builds them on the host, tests/vm/run.sh copies them in)
#      SPROUT           the sprout binary (/usr/local/bin/sprout); RUNC (runc in $PATH)
#      SPROUT_K8S_WORK  all state (/var/tmp/sprout-k8s); removed at the end unless --keep
#
# Phase 1, standalone kubelet (no API server): containerd's default runtime is sprout, then runc;
#   a static pod from the kubelet's manifest dir, checked and removed again.
# Phase 2, etcd + kube-apiserver: RuntimeClasses `sprout` (handler sprout) and `runc` (handler
#   runc), pods bound to the node by spec.nodeName (no scheduler, no controller manager); every
#   check runs once with runtimeClassName sprout and once with runc.
# Every container a check starts must be in the state dir of the runtime the check asked for.
#
# Output: `RESULT RUNTIME PASS|FAIL|SKIP CHECK :: DETAIL (N s)` per check and runtime, a table
# comparing the two, the last line `k8s: sprout N passed, N failed; runc N passed, N failed`.
# Exit: 0 every sprout check passed; 1 a sprout check failed; 2 the node could not be brought up.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${SPROUT_K8S_BIN:-/opt/sprout-k8s/bin}
W=${SPROUT_K8S_WORK:-/var/tmp/sprout-k8s}
SPROUT=${SPROUT:-/usr/local/bin/sprout}
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}
RUNTIMES="sprout runc" ONLY="" KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --runtimes) RUNTIMES=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --runc-checks) export SPROUT_K8S_RUNC_CHECKS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "node.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
exec </dev/null
NODE=sprout-node
# the kubelet refuses a loopback node IP: a dummy link of our own carries it (kubelet's port, the
# API server's way to logs/exec)
NODE_IP=10.255.0.1 NODE_LINK=sprout-k8s0
SOCK=$W/containerd/containerd.sock
API=https://127.0.0.1:16443
TOKEN=sprout-k8s-test-token
T0=$(date +%s)
RES=${W%/}.results.tsv   # outside $W: it outlives the teardown
rtbin() { case $1 in sprout) echo "$SPROUT" ;; runc) echo "$RUNC" ;; esac; }
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
die() { log "node: $*"; for f in "$W"/log/*.log; do [ -f "$f" ] && { echo "--- tail $f"; tail -15 "$f"; }; done; teardown; exit 2; }
K() { "$BIN/kubectl" --kubeconfig "$W/kubeconfig" --request-timeout=60s "$@"; }
CTR() { ctr --address "$SOCK" -n k8s.io "$@"; }
# wait_for SECONDS CMD...: until CMD succeeds (1 s apart)
wait_for() { local t=$1; shift; local end=$(( $(date +%s) + t )); until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 1; done; }
# wait_up SECONDS DAEMON CMD...: wait_for, but give up as soon as the daemon has exited
wait_up() {
  local t=$1 n=$2; shift 2; local end=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do
    kill -0 "$(cat "$W/pids/$n" 2>/dev/null)" 2>/dev/null || { log "$n exited"; return 1; }
    [ "$(date +%s)" -lt "$end" ] || return 1; sleep 1
  done
}
want() { [ -z "$ONLY" ] || case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

for b in kubelet kube-apiserver kubectl etcd pause; do [ -x "$BIN/$b" ] || { echo "node.sh: no $BIN/$b (tests/k8s/build.sh)"; exit 2; }; done
for b in containerd containerd-shim-runc-v2 ctr jq nsenter ip busybox python3 openssl "$SPROUT" "$RUNC"; do
  command -v "$b" >/dev/null || { echo "node.sh: needs $b"; exit 2; }
done
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || echo "node.sh: warning: not a pure cgroup v2 host (kubelet >= 1.35 refuses v1)"

# ------------------------------------------------------------------ daemons
start_daemon() { # NAME CMD...: in the background, own session, log in $W/log/NAME.log
  local n=$1; shift
  setsid "$@" > "$W/log/$n.log" 2>&1 < /dev/null &
  echo $! > "$W/pids/$n"
}
stop_daemon() { # NAME [SECONDS]
  local n=$1 t=${2:-30} pid
  [ -f "$W/pids/$n" ] || return 0
  pid=$(cat "$W/pids/$n"); rm -f "$W/pids/$n"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq "$t"); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  kill -KILL "$pid" 2>/dev/null; sleep 1
}

write_containerd_config() { # DEFAULT_RUNTIME
  local restrict=false
  # without CAP_SYS_RESOURCE the sandbox's oom_score_adj -998 fails with every runtime
  (( 0x$(awk '/^CapEff/{print $2}' /proc/self/status) & (1 << 24) )) || restrict=true
  cat > "$W/containerd/config.toml" <<EOF
version = 2
root = "$W/containerd/root"
state = "$W/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$W/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:k8s"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = $restrict
  disable_apparmor = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$W/cni/bin"
    conf_dir = "$W/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "$1"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        Root = "$W/rt/runc"
        SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sprout]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sprout.options]
        BinaryName = "$SPROUT"
        Root = "$W/rt/sprout"
        SystemdCgroup = true
EOF
}
start_containerd() { # DEFAULT_RUNTIME
  write_containerd_config "$1"
  start_daemon containerd containerd --config "$W/containerd/config.toml" --log-level info
  wait_up 120 containerd ctr --address "$SOCK" version || die "containerd did not come up"
}
stop_containerd() {
  stop_daemon containerd
  # its shims outlive it by design; ours (this socket) go once their containers are gone
  local p
  for p in $(pgrep -f containerd-shim-runc-v2 || true); do
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "-address $SOCK " && kill -KILL "$p" 2>/dev/null
  done
  true
}

write_kubelet_config() {
  cat > "$W/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
staticPodPath: $W/manifests
fileCheckFrequency: 2s
syncFrequency: 10s
podLogsDir: $W/log/pods
volumePluginDir: $W/kubelet/volume-plugins
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: systemd
failSwapOn: false
resolvConf: ""
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
}
start_kubelet() { # [kubeconfig]
  local a=()
  [ -n "${1:-}" ] && a=(--kubeconfig "$1")
  start_daemon kubelet "$BIN/kubelet" --config "$W/kubelet/config.yaml" --root-dir "$W/kubelet/root" \
    --cert-dir "$W/kubelet/pki" --hostname-override "$NODE" --node-ip "$NODE_IP" -v 2 "${a[@]}"
  wait_up 180 kubelet python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:10248/healthz', timeout=5)" \
    || die "kubelet not healthy"
}
stop_kubelet() { stop_daemon kubelet 60; }

start_api() {
  mkdir -p "$W/etcd" "$W/apiserver"
  start_daemon etcd "$BIN/etcd" --name node --data-dir "$W/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
    --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
    --initial-cluster node=http://127.0.0.1:12380 --listen-metrics-urls '' --log-level warn
  openssl genrsa -out "$W/apiserver/sa.key" 2048 2>/dev/null || die "openssl genrsa"
  openssl rsa -in "$W/apiserver/sa.key" -pubout -out "$W/apiserver/sa.pub" 2>/dev/null || die "openssl rsa"
  echo "$TOKEN,admin,admin,system:masters" > "$W/apiserver/tokens.csv"
  cat > "$W/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster: {server: "$API", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: "$TOKEN"}
contexts:
- name: node
  context: {cluster: node, user: admin}
current-context: node
EOF
  start_daemon apiserver "$BIN/kube-apiserver" --etcd-servers http://127.0.0.1:12379 \
    --bind-address 127.0.0.1 --advertise-address "$NODE_IP" --secure-port 16443 --cert-dir "$W/apiserver" \
    --token-auth-file "$W/apiserver/tokens.csv" --authorization-mode AlwaysAllow \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$W/apiserver/sa.pub" \
    --service-account-signing-key-file "$W/apiserver/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
    --disable-admission-plugins ServiceAccount --enable-priority-and-fairness=false --profiling=false \
    --kubelet-preferred-address-types InternalIP --allow-privileged=true
  wait_up 300 apiserver K get --raw /readyz || die "kube-apiserver not ready"
}

# ------------------------------------------------------------------ teardown
TORN=0
teardown() {
  [ "$TORN" = 1 ] && return 0; TORN=1
  if [ "$KEEP" = 1 ]; then log "--keep: left running; state in $W"; return 0; fi
  log "teardown"
  rm -f "$W"/manifests/*.yaml 2>/dev/null
  if [ -f "$W/pids/apiserver" ] && [ -f "$W/pids/kubelet" ]; then
    K delete pods --all --all-namespaces --wait=false >/dev/null 2>&1
  fi
  if [ -f "$W/pids/kubelet" ]; then
    # the kubelet tears its pods down; give it the time to
    wait_for 180 no_containers || log "teardown: containers still there after 180 s"
    # and for the sandboxes' network namespaces, which containerd removes after the containers
    wait_for 60 no_new_netns || log "teardown: pod network namespaces still there after 60 s"
  fi
  stop_kubelet; stop_daemon apiserver; stop_daemon etcd
  # anything the kubelet left: removed through the runtimes themselves
  local r id
  for r in $RUNTIMES; do
    [ -d "$W/rt/$r/k8s.io" ] || continue
    for id in $("$(rtbin "$r")" --root "$W/rt/$r/k8s.io" list -q 2>/dev/null); do
      log "teardown: $r container $id left over: delete -f"; "$(rtbin "$r")" --root "$W/rt/$r/k8s.io" delete -f "$id"
    done
  done
  if [ -f "$W/pids/containerd" ]; then
    for id in $(CTR tasks ls -q 2>/dev/null); do CTR tasks kill -s KILL "$id" >/dev/null 2>&1; CTR tasks rm -f "$id" >/dev/null 2>&1; done
    for id in $(CTR containers ls -q 2>/dev/null); do CTR containers rm "$id" >/dev/null 2>&1; done
  fi
  stop_containerd
  # the kubelet's slices (empty now), our CNI's host ends, mounts under $W, sandbox netns
  local u
  for u in $(systemctl list-units --all --plain --no-legend 'kubepods*' 2>/dev/null | awk '{print $1}' | sort -r); do
    systemctl stop "$u" 2>/dev/null
  done
  for u in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^sk' || true); do ip link del "$u" 2>/dev/null; done
  ip link del "$NODE_LINK" 2>/dev/null
  for u in $(new_netns); do umount "/run/netns/$u" 2>/dev/null; rm -f "/run/netns/$u"; log "teardown: removed netns $u"; done
  awk -v W="$W" 'index($5, W) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  rm -rf "$W"
  log "teardown done"
}
new_netns() { ls /run/netns 2>/dev/null | grep '^cni-' | sort | comm -13 <(echo "${NETNS_BEFORE:-}") -; }
no_new_netns() { [ -z "$(new_netns)" ]; }
no_containers() {
  local r
  for r in $RUNTIMES; do
    [ -z "$("$(rtbin "$r")" --root "$W/rt/$r/k8s.io" list -q 2>/dev/null)" ] || return 1
  done
}
trap 'teardown' EXIT
trap 'echo "node.sh: interrupted"; exit 2' INT TERM

# ------------------------------------------------------------------ results
result() { # RUNTIME STATUS CHECK DETAIL SECONDS
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$RES"
  echo "RESULT $1 $2 $3 :: $4 ($5 s)"
}
run_check() { # CHECK RUNTIME: ck_CHECK RUNTIME sets DETAIL, returns 0 on pass
  local c=$1 r=$2 t rc
  want "$c" || return 0
  DETAIL=""
  t=$(date +%s)
  "ck_${c//-/_}" "$r"; rc=$?
  DETAIL=$(printf '%s' "$DETAIL" | tr '\n\t' '  ' | cut -c1-600)
  if [ $rc = 0 ]; then result "$r" PASS "$c" "$DETAIL" $(( $(date +%s) - t ))
  elif [ $rc = 3 ]; then result "$r" SKIP "$c" "${DETAIL#SKIP: }" $(( $(date +%s) - t ))
  else
    result "$r" FAIL "$c" "$DETAIL" $(( $(date +%s) - t ))
    if K get pod "$c-$r" >/dev/null 2>&1; then pod_diag "$c-$r"; elif K get pod "run-$r" >/dev/null 2>&1; then pod_diag "run-$r"; fi
  fi
}
pod_diag() { # POD: what the kubelet says, to the log
  {
    echo "--- diagnostics for pod $1"
    K get pod "$1" -o jsonpath='{.status}' 2>&1 | head -c 3000; echo
    K get events --field-selector "involvedObject.name=$1" -o custom-columns=R:.reason,M:.message --no-headers 2>&1 | tail -8
    grep -a "$1" "$W/log/kubelet.log" | grep -aiE 'error|fail' | tail -5
  } | sed 's/^/    | /'
}

# ------------------------------------------------------------------ helpers for checks
IMG=localhost/busybox:k8s
# pod NAME RUNTIME_CLASS <<YAML (the spec's body after the common fields, indented 2)
pod() {
  local body; body=$(cat)
  {
    printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  labels: {sprout-k8s: "1", rc: %s}\nspec:\n' "$1" "$2"
    printf '  nodeName: %s\n  runtimeClassName: %s\n  terminationGracePeriodSeconds: 2\n' "$NODE" "$2"
    printf '%s\n' "$body"
  } | K apply -f - >/dev/null
}
ready() { [ "$(K get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
phase() { K get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
jp() { K get pod "$1" -o jsonpath="$2" 2>/dev/null; }
# cids POD: the pod's containers' ids as the runtime knows them
cids() { jp "$1" '{range .status.containerStatuses[*]}{.containerID}{"\n"}{end}' | sed 's|^containerd://||' | grep .; }
# sandbox_ids POD_UID: sandbox (and other) container ids containerd holds for the pod
ctr_ids() { CTR containers ls -q "labels.\"io.kubernetes.pod.uid\"==$1" 2>/dev/null; }
# in_runtime RUNTIME ID...: each id is a live container in that runtime's state (and not the other's)
in_runtime() {
  local r=$1 id o; shift
  for id in "$@"; do
    "$(rtbin "$r")" --root "$W/rt/$r/k8s.io" state "$id" >/dev/null 2>&1 || { DETAIL+="$id not in $r's state; "; return 1; }
    for o in $RUNTIMES; do
      [ "$o" = "$r" ] && continue
      [ ! -e "$W/rt/$o/k8s.io/$id" ] || { DETAIL+="$id also in $o's state dir; "; return 1; }
    done
  done
}
# up POD RUNTIME [SECONDS]: Ready, and every container (sandbox too) run by RUNTIME
up() {
  wait_for "${3:-180}" ready "$1" || { DETAIL+="not Ready after ${3:-180} s (phase $(phase "$1")); "; return 1; }
  local uid; uid=$(jp "$1" '{.metadata.uid}')
  # shellcheck disable=SC2046
  in_runtime "$2" $(ctr_ids "$uid")
}
X() { K exec "$@" 2>&1; }   # kubectl exec, output and errors
restarted() { [ "$(jp "$1" '{.status.containerStatuses[0].restartCount}')" -ge 1 ] 2>/dev/null; }
waiting_reason() { [ "$(jp "$1" '{.status.containerStatuses[0].state.waiting.reason}')" = "$2" ]; }
terminated() { [ -n "$(jp "$1" '{.status.containerStatuses[0].state.terminated.reason}')" ]; }

# ------------------------------------------------------------------ checks (phase 2)
ck_run() { # a pod with RuntimeClass R comes up; its sandbox and container are R's
  pod "run-$1" "$1" <<EOF
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; echo hello from k8s; while :; do sleep 1; done"]
EOF
  up "run-$1" "$1" || return 1
  DETAIL="Ready; $(ctr_ids "$(jp "run-$1" '{.metadata.uid}')" | wc -l) containers in $1's state"
}
ck_logs() {
  local l; l=$(K logs "run-$1" 2>&1)
  DETAIL="kubectl logs: $l"
  [ "$l" = "hello from k8s" ]
}
ck_exec() { # kubectl exec: output, exit status, stdin, -it on a pty
  local o rc i t
  o=$(X "run-$1" -- sh -c 'echo $((6*7))'); [ "$o" = 42 ] || { DETAIL="exec output '$o'"; return 1; }
  X "run-$1" -- sh -c 'exit 7' >/dev/null; rc=$?
  [ $rc = 7 ] || { DETAIL="exec exit status $rc (want 7)"; return 1; }
  i=$(echo stdin-ok | K exec -i "run-$1" -- cat 2>&1)
  [ "$i" = stdin-ok ] || { DETAIL="exec -i: '$i'"; return 1; }
  t=$(script -qec "$BIN/kubectl --kubeconfig $W/kubeconfig exec -it run-$1 -- sh -c 'tty; test -t 0 && echo tty-ok'" /dev/null 2>&1 | tr -d '\r')
  case $t in *"/dev/pts/"*tty-ok*) ;; *) DETAIL="exec -it: '$t'"; return 1 ;; esac
  DETAIL="output 42, exit 7, -i stdin, -it $(echo "$t" | grep -o '/dev/pts/[0-9]*' | head -1)"
}
ck_liveness() { # an exec probe that starts failing restarts the container
  pod "liveness-$1" "$1" <<EOF
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "touch /tmp/healthy; sleep 8; rm /tmp/healthy; sleep 600"]
    livenessProbe:
      exec: {command: ["cat", "/tmp/healthy"]}
      initialDelaySeconds: 2
      periodSeconds: 2
      failureThreshold: 1
EOF
  up "liveness-$1" "$1" || return 1
  wait_for 180 restarted "liveness-$1" \
    || { DETAIL="restartCount $(jp "liveness-$1" '{.status.containerStatuses[0].restartCount}') after 180 s"; return 1; }
  local reason; reason=$(K get events --field-selector "involvedObject.name=liveness-$1,reason=Unhealthy" -o jsonpath='{.items[0].message}' 2>/dev/null)
  DETAIL="restarted (restartCount $(jp "liveness-$1" '{.status.containerStatuses[0].restartCount}')); event: ${reason:0:80}"
  K delete pod "liveness-$1" --wait=false >/dev/null 2>&1
}
ck_crashloop() { # a container exiting 3 ends in CrashLoopBackOff, lastState exit 3, logs --previous
  pod "crashloop-$1" "$1" <<EOF
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "echo crashing; exit 3"]
EOF
  wait_for 180 waiting_reason "crashloop-$1" CrashLoopBackOff \
    || { DETAIL="state $(jp "crashloop-$1" '{.status.containerStatuses[0].state}')"; return 1; }
  local ec prev; ec=$(jp "crashloop-$1" '{.status.containerStatuses[0].lastState.terminated.exitCode}')
  # the previous instance's log: retried a while, the kubelet may be between a restart and the
  # garbage collection of the older instance ("unable to retrieve container logs", seen with
  # runc and with sprout in the same run)
  local i; for i in $(seq 15); do
    prev=$(K logs --previous "crashloop-$1" 2>&1); [ "$prev" = crashing ] && break; sleep 2
  done
  DETAIL="CrashLoopBackOff, last exit $ec, restarts $(jp "crashloop-$1" '{.status.containerStatuses[0].restartCount}'), logs --previous '$prev'"
  K delete pod "crashloop-$1" --wait=false >/dev/null 2>&1
  [ "$ec" = 3 ] && [ "$prev" = crashing ]
}
# cg_check POD EXPECTED...: "file=value" inside the container (its cgroup namespace root) and on
# the host at the container's systemd scope under the pod's slice
cg_check() {
  local p=$1 r=$2 uid cid f want got scope bad=0; shift 2
  uid=$(jp "$p" '{.metadata.uid}'); cid=$(cids "$p" | head -1)
  scope=$(find /sys/fs/cgroup/kubepods.slice -type d -name "cri-containerd-$cid.scope" 2>/dev/null | head -1)
  [ -n "$scope" ] || { DETAIL+="no cri-containerd-$cid.scope on the host; "; bad=1; }
  case $scope in *"kubepods-"*"pod${uid//-/_}.slice/"*) ;; *) DETAIL+="scope not under the pod's slice ($scope); "; bad=1 ;; esac
  for f in "$@"; do
    want=${f#*=}; f=${f%%=*}
    got=$(X "$p" -- cat "/sys/fs/cgroup/$f" | tr '\n' ' ' | sed 's/ $//')
    [ "$got" = "$want" ] || { DETAIL+="$f in the container '$got' (want '$want'); "; bad=1; }
    if [ -n "$scope" ]; then
      got=$(tr '\n' ' ' < "$scope/$f" | sed 's/ $//')
      [ "$got" = "$want" ] || { DETAIL+="$f on the host '$got' (want '$want'); "; bad=1; }
    fi
  done
  DETAIL+="cpu.weight $(X "$p" -- cat /sys/fs/cgroup/cpu.weight), memory.oom.group $(X "$p" -- cat /sys/fs/cgroup/memory.oom.group); ${scope#/sys/fs/cgroup/kubepods.slice/}"
  return $bad
}
ck_guaranteed() {
  pod "guaranteed-$1" "$1" <<EOF
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    resources:
      requests: {cpu: 250m, memory: 64Mi}
      limits: {cpu: 250m, memory: 64Mi}
EOF
  up "guaranteed-$1" "$1" || return 1
  local q; q=$(jp "guaranteed-$1" '{.status.qosClass}')
  [ "$q" = Guaranteed ] || { DETAIL="qosClass $q; "; return 1; }
  DETAIL="Guaranteed; "
  cg_check "guaranteed-$1" "$1" memory.max=67108864 "cpu.max=25000 100000"; local rc=$?
  K delete pod "guaranteed-$1" --wait=false >/dev/null 2>&1
  return $rc
}
ck_burstable() {
  pod "burstable-$1" "$1" <<EOF
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {memory: 96Mi}
EOF
  up "burstable-$1" "$1" || return 1
  local q; q=$(jp "burstable-$1" '{.status.qosClass}')
  [ "$q" = Burstable ] || { DETAIL="qosClass $q; "; return 1; }
  DETAIL="Burstable; "
  cg_check "burstable-$1" "$1" memory.max=100663296 "cpu.max=max 100000"; local rc=$?
  K delete pod "burstable-$1" --wait=false >/dev/null 2>&1
  return $rc
}
# OOM kills. Two things make containerd 1.7's reason flaky on cgroup v2 + systemd with any runtime:
# an OOM at the pod's slice (the sum of the limits) is not reported for the container, and with
# the kubelet's memory.oom.group=1 the whole container dies at once, systemd removes the empty
# scope and the shim may lose the race to read memory.events (reason Error, seen with runc and
# with sprout). So `oomkilled` keeps the container's shell alive (oom_score_adj -1000, exempt from
# the group kill) while its child is killed at the container's own limit, and `oom-group` checks
# the default whole-container kill by the kernel's record of where the kill happened.
ck_oomkilled() { # 64 MiB touched under the container's 32 MiB limit: OOMKilled, exit 137
  pod "oomkilled-$1" "$1" <<EOF
  restartPolicy: Never
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "echo -1000 > /proc/self/oom_score_adj; sleep 1; sh -c 'echo 0 > /proc/self/oom_score_adj; exec dd if=/dev/zero of=/dev/null bs=64M count=1'; rc=\$?; echo dd exit \$rc; sleep 2; exit \$rc"]
    securityContext:
      capabilities: {add: ["SYS_RESOURCE"]}
    resources:
      limits: {memory: 32Mi}
  - name: idle
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    resources:
      limits: {memory: 64Mi}
EOF
  wait_for 180 terminated "oomkilled-$1" \
    || { DETAIL="not terminated: $(jp "oomkilled-$1" '{.status.containerStatuses[0].state}')"; return 1; }
  local reason ec; reason=$(jp "oomkilled-$1" '{.status.containerStatuses[0].state.terminated.reason}')
  ec=$(jp "oomkilled-$1" '{.status.containerStatuses[0].state.terminated.exitCode}')
  DETAIL="reason $reason, exit $ec, log '$(K logs "oomkilled-$1" -c c 2>&1 | tr '\n' ' ')'"
  K delete pod "oomkilled-$1" --wait=false >/dev/null 2>&1
  [ "$reason" = OOMKilled ] && [ "$ec" = 137 ]
}
ck_oom_group() { # the kubelet's default: the whole container killed at its own cgroup's limit, 137
  local since; since=$(date '+%Y-%m-%d %H:%M:%S')
  pod "oom-group-$1" "$1" <<EOF
  restartPolicy: Never
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "sleep 1; dd if=/dev/zero of=/dev/null bs=64M count=1; echo survived"]
    resources:
      limits: {memory: 32Mi}
  - name: idle
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    resources:
      limits: {memory: 64Mi}
EOF
  wait_for 180 terminated "oom-group-$1" \
    || { DETAIL="not terminated: $(jp "oom-group-$1" '{.status.containerStatuses[0].state}')"; return 1; }
  local reason ec cid where
  reason=$(jp "oom-group-$1" '{.status.containerStatuses[0].state.terminated.reason}')
  ec=$(jp "oom-group-$1" '{.status.containerStatuses[0].state.terminated.exitCode}')
  cid=$(jp "oom-group-$1" '{.status.containerStatuses[0].containerID}'); cid=${cid#containerd://}
  where=$(journalctl -k --since "$since" --no-pager 2>/dev/null | grep -o "oom_memcg=[^,]*cri-containerd-$cid.scope" | head -1)
  DETAIL="exit $ec, reason $reason (OOMKilled or Error: containerd's race, see above), kernel: "
  if [ -n "$where" ]; then DETAIL+="oom-kill at the container's own scope"; else DETAIL+="no oom-kill record at cri-containerd-$cid.scope"; fi
  K delete pod "oom-group-$1" --wait=false >/dev/null 2>&1
  [ "$ec" = 137 ] && [ -n "$where" ]
}
ck_shared_net_ipc() { # two containers: one net/ipc/uts namespace (localhost, /dev/shm), own pid ns
  pod "shared-net-ipc-$1" "$1" <<EOF
  containers:
  - name: web
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /tmp/www && echo via-localhost > /tmp/www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"]
  - name: client
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; echo shm-ok > /dev/shm/x; while :; do sleep 1; done"]
EOF
  up "shared-net-ipc-$1" "$1" || return 1
  local a b n
  for n in net ipc uts pid; do
    a=$(X "shared-net-ipc-$1" -c web -- readlink /proc/self/ns/$n); b=$(X "shared-net-ipc-$1" -c client -- readlink /proc/self/ns/$n)
    if [ "$n" = pid ]; then [ "$a" != "$b" ] || { DETAIL="pid ns shared without shareProcessNamespace ($a)"; return 1; }
    else [ "$a" = "$b" ] || { DETAIL="$n ns differs: $a vs $b"; return 1; }; fi
  done
  a=$(X "shared-net-ipc-$1" -c client -- wget -qO- http://127.0.0.1:8080/)
  b=$(X "shared-net-ipc-$1" -c web -- cat /dev/shm/x)
  DETAIL="net/ipc/uts shared, pid not; client->web over localhost: '$a'; /dev/shm across containers: '$b'; pod IP $(jp "shared-net-ipc-$1" '{.status.podIP}')"
  K delete pod "shared-net-ipc-$1" --wait=false >/dev/null 2>&1
  [ "$a" = via-localhost ] && [ "$b" = shm-ok ]
}
ck_share_pid() { # shareProcessNamespace: pause is PID 1, each container sees the other's processes
  pod "share-pid-$1" "$1" <<EOF
  shareProcessNamespace: true
  containers:
  - name: a
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1001; done"]
  - name: b
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1002; done"]
EOF
  up "share-pid-$1" "$1" || return 1
  local ps1 p1
  ps1=$(X "share-pid-$1" -c a -- ps -o pid,args)
  p1=$(X "share-pid-$1" -c b -- cat /proc/1/cmdline | tr '\0' ' ')
  DETAIL="PID 1: '$p1'; a sees sleep 1002: $(echo "$ps1" | grep -c 'sleep 1002')"
  K delete pod "share-pid-$1" --wait=false >/dev/null 2>&1
  case $p1 in /pause*) ;; *) return 1 ;; esac
  echo "$ps1" | grep -q 'sleep 1002'
}
ck_security() { # runAsUser/Group, fsGroup, seccomp RuntimeDefault, drop ALL, no new privs, read-only root
  pod "security-$1" "$1" <<EOF
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    fsGroup: 2000
    seccompProfile: {type: RuntimeDefault}
  volumes:
  - name: data
    emptyDir: {}
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    volumeMounts:
    - {name: data, mountPath: /data}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: ["ALL"]}
EOF
  up "security-$1" "$1" || return 1
  local id st data ro bad=0
  id=$(X "security-$1" -- id)
  st=$(X "security-$1" -- grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' /proc/self/status | awk '{printf "%s%s ", $1, $2}')
  data=$(X "security-$1" -- sh -c 'stat -c "%g %a" /data; touch /data/f && stat -c "%u:%g" /data/f')
  ro=$(X "security-$1" -- sh -c 'touch /rootfile 2>&1; echo rc=$?')
  DETAIL="$id | $st| /data: $(echo "$data" | tr '\n' ' ')| root: $(echo "$ro" | tail -1)"
  case $id in "uid=1000 gid=3000 groups="*2000*) ;; *) bad=1 ;; esac
  case $st in *"Seccomp:2 "*) ;; *) bad=1 ;; esac
  case $st in *"NoNewPrivs:1 "*) ;; *) bad=1 ;; esac
  case $st in *"CapEff:0000000000000000 CapBnd:0000000000000000 "*|*"CapBnd:0000000000000000 CapEff:0000000000000000 "*) ;; *) bad=1 ;; esac
  [ "$(echo "$data" | head -1)" = "2000 2777" ] && [ "$(echo "$data" | tail -1)" = "1000:2000" ] || bad=1
  case $ro in *"Read-only file system"*"rc=1") ;; *) bad=1 ;; esac
  K delete pod "security-$1" --wait=false >/dev/null 2>&1
  return $bad
}
ck_delete() { # kubectl delete: the pod goes, its containers leave the runtime, its cgroup slice goes
  local uid ids slice
  uid=$(jp "run-$1" '{.metadata.uid}')
  [ -n "$uid" ] || { DETAIL="no pod run-$1"; return 1; }
  ids=$(ctr_ids "$uid")
  K delete pod "run-$1" --timeout=180s >/dev/null 2>&1 || { DETAIL="delete did not finish in 180 s"; return 1; }
  local id left=""
  wait_for 60 sh -c "! ctr --address '$SOCK' -n k8s.io containers ls -q 'labels.\"io.kubernetes.pod.uid\"==$uid' | grep -q ." || DETAIL+="(containerd still listed the pod's containers after 60 s: the kubelet's GC removes them later) "
  for id in $ids; do
    "$(rtbin "$1")" --root "$W/rt/$1/k8s.io" state "$id" >/dev/null 2>&1 && left+="$id "
  done
  slice=$(find /sys/fs/cgroup/kubepods.slice -type d -name "*pod${uid//-/_}.slice" 2>/dev/null)
  DETAIL+="pod gone from the API; $(echo "$ids" | wc -w) containers gone from $1's state${left:+ EXCEPT $left}${slice:+; slice left: $slice}"
  [ -z "$left" ] && [ -z "$slice" ]
}
ck_no_leftovers() { # after every check's pods are deleted: nothing in the runtime's state dir
  K delete pods -l "sprout-k8s=1,rc=$1" --timeout=180s >/dev/null 2>&1 || true
  wait_for 120 sh -c "[ -z \"\$('$(rtbin "$1")' --root '$W/rt/$1/k8s.io' list -q 2>/dev/null)\" ]"
  local l; l=$("$(rtbin "$1")" --root "$W/rt/$1/k8s.io" list 2>&1 | tail -n +2)
  DETAIL="$(rtbin "$1") list: ${l:-empty}"
  [ -z "$l" ]
}

# ------------------------------------------------------------------ sprout-serve as a pod (deploy/)
# The image deploy/Dockerfile describes, assembled from what the VM has (nothing is fetched):
# sprout-serve and the shared libraries it links, python/sprout_zygote.py where the engine looks
# for it (<exe dir>/../share/sprout/python), python3 with its standard library (the engine's
# quick-start base binds the container's /usr, /lib*, /bin, /sbin into every sandbox, so this is
# what handlers run) and busybox (a shell for the registrar pod). No pip: the check's handler has
# no requirements.txt.
SERVE_BIN=${SPROUT_SERVE:-/usr/local/bin/sprout-serve}
SERVE_IMG=localhost/sprout-serve:k8s
SERVE_NS=sprout-serve
DEPLOY=$(cd "$HERE/../.." && pwd)/deploy
build_serve_image() {
  local R=$W/img/serve py pyver f l
  py=$(readlink -f /usr/bin/python3); pyver=$(basename "$py")
  rm -rf "$R"; mkdir -p "$R"/usr/{bin,sbin,lib64,local/bin,local/share/sprout/python} "$R"/{etc,tmp,root,proc,sys,dev,run,var/tmp}
  chmod 1777 "$R/tmp" "$R/var/tmp"
  for l in bin sbin lib lib64; do ln -s "usr/$l" "$R/$l"; done
  mkdir -p "$R/usr/lib"
  install -m755 "$SERVE_BIN" "$R/usr/local/bin/sprout-serve"
  install -m644 "$HERE/../../python/sprout_zygote.py" "$R/usr/local/share/sprout/python/sprout_zygote.py"
  cp -a "$py" "$R/usr/bin/$pyver"; ln -s "$pyver" "$R/usr/bin/python3"
  tar -C / -cf - --exclude="usr/lib/$pyver/test" --exclude="usr/lib/$pyver/idlelib" --exclude="usr/lib/$pyver/tkinter" \
    --exclude="usr/lib/$pyver/turtledemo" --exclude="usr/lib/$pyver/ensurepip" --exclude="usr/lib/$pyver/config-*" \
    "usr/lib/$pyver" | tar -C "$R" -xf - || return 1
  # every shared library the engine, python and python's extension modules load, at its path
  for f in $( { ldd "$SERVE_BIN"; ldd "$py"; for l in "$R/usr/lib/$pyver"/lib-dynload/*.so; do ldd "$l"; done; } 2>/dev/null \
      | grep -o '/[^ ]*\.so[^ ]*' | sort -u); do
    [ -e "$R$f" ] && continue
    mkdir -p "$R$(dirname "$f")" && cp -L "$f" "$R$f" || return 1
  done
  cp "$(command -v busybox)" "$R/usr/bin/busybox"
  for l in sh cp mkdir ls cat; do ln -s busybox "$R/usr/bin/$l"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' > "$R/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
  python3 "$HERE/mkimage.py" "$W/img/serve.tar" "$SERVE_IMG" "$R" '["/usr/local/bin/sprout-serve"]' '[]' || return 1
  echo "$(du -sm "$R" | cut -f1) MiB, $pyver"
}
# serve_req PATH[|BODY]...: HTTP requests to the engine at the pod's IP, one after the other from
# one process (no interpreter start between them); a line "STATUS X-SPROUT-PATH BODY" each
serve_req() {
  python3 - "$SERVE_IP" "$@" <<'PY' 2>&1
import sys, urllib.request, urllib.error
ip = sys.argv[1]
for spec in sys.argv[2:]:
    path, _, body = spec.partition("|")
    req = urllib.request.Request(f"http://{ip}:8080{path}", data=body.encode() if body else None,
                                 method="POST" if body else "GET")
    try:
        r = urllib.request.urlopen(req, timeout=60)
        print(r.status, r.headers.get("x-sprout-path", "-"), r.read().decode().replace("\n", " "))
    except urllib.error.HTTPError as e:
        print(e.code, e.headers.get("x-sprout-path", "-"), e.read().decode().replace("\n", " "))
    except Exception as e:
        print("000 - " + repr(e))
PY
}
status_json() { serve_req /status | cut -d' ' -f3-; }
root_zygote_ready() { status_json | python3 -c 'import json,sys; z=json.load(sys.stdin)["zygotes"]; z=z.values() if isinstance(z, dict) else z; sys.exit(not any(x.get("state")=="ready" and not x.get("packages") for x in z))'; }
handler_frozen() { status_json | python3 -c 'import json,sys; h=json.load(sys.stdin)["handlers"].get("hello") or {}; sys.exit(not (h.get("warm",0) >= 1 and h.get("hot",0) == 0))'; }
serve_objects() { # the deploy/ objects as the API server takes them (JSON list), image replaced
  K create --dry-run=client -o json -f "$DEPLOY/sprout-serve.yaml" \
    | jq -s --arg img "$SERVE_IMG" '{apiVersion: "v1", kind: "List", items: map(if .kind == "DaemonSet" then .spec.template.spec.containers[0].image = $img | .spec.template.spec.containers[0].imagePullPolicy = "Never" else . end)}'
}
serve_procs() { pgrep -af 'sprout_zygote|sprout-serve' | grep -v -e pgrep -e node.sh | sort; }
serve_mounts() { awk '$5 ~ /sprout-serve/ {print $5}' /proc/self/mountinfo | sort; }
ck_serve() { # sprout-serve as the DaemonSet's pod (RuntimeClass R): handler registered, hot/warm/zygote served
  local objs pod regpod out t0 r1 r2 r3 ok=1
  [ -x "$SERVE_BIN" ] || { DETAIL="SKIP: no $SERVE_BIN"; return 3; }
  [ -f "$W/img/serve-imported" ] || { DETAIL="sprout-serve image: $SERVE_IMG_ERR"; return 1; }
  objs=$(serve_objects) || { DETAIL="kubectl could not read deploy/sprout-serve.yaml"; return 1; }
  # what was there before (the VM's serve suite runs sprout-serve too): only new ones count below
  local procs0 mounts0; procs0=$(serve_procs); mounts0=$(serve_mounts)
  # Every object of deploy/sprout-serve.yaml goes to the API server (its validation is a check of
  # the file). No controller manager runs here: nothing turns the DaemonSet into pods, binds the
  # PVC or gives the Service endpoints, so the pod the DaemonSet controller would make is made
  # from its template, with the RWX PVC and the package cache's hostPath replaced by directories
  # under the test's work dir.
  echo "$objs" | K apply -f - >/dev/null 2>"$W/log/serve-apply.err" || { DETAIL="kubectl apply deploy/sprout-serve.yaml: $(head -c 300 "$W/log/serve-apply.err")"; return 1; }
  mkdir -p "$W/serve/registry" "$W/serve/packages" "$W/serve/src"
  pod=$(echo "$objs" | jq --arg node "$NODE" --arg rc "$1" --arg w "$W/serve" '
    .items[] | select(.kind == "DaemonSet") | {apiVersion: "v1", kind: "Pod",
      metadata: {name: "sprout-serve-node", namespace: .metadata.namespace, labels: (.spec.template.metadata.labels + {"sprout-k8s": "1", rc: $rc})},
      spec: (.spec.template.spec + {nodeName: $node, runtimeClassName: $rc}
        | .volumes |= map(if .name == "registry" then {name: "registry", hostPath: {path: ($w + "/registry"), type: "Directory"}}
                          elif .name == "packages" then {name: "packages", hostPath: {path: ($w + "/packages"), type: "Directory"}} else . end))}')
  echo "$pod" | K apply -f - >/dev/null || { DETAIL="engine pod rejected: $(echo "$pod" | head -c 200)"; return 1; }
  t0=$(date +%s)
  wait_for 300 sh -c "'$BIN/kubectl' --kubeconfig '$W/kubeconfig' -n $SERVE_NS get pod sprout-serve-node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" \
    || { DETAIL="engine pod not Ready after 300 s: $(K -n $SERVE_NS get pod sprout-serve-node -o jsonpath='{.status.containerStatuses[0]}' | head -c 300); engine log: $(K -n $SERVE_NS logs sprout-serve-node 2>&1 | tail -5)"; return 1; }
  local uid; uid=$(K -n $SERVE_NS get pod sprout-serve-node -o jsonpath='{.metadata.uid}')
  # shellcheck disable=SC2046
  in_runtime "$1" $(ctr_ids "$uid") || return 1
  SERVE_IP=$(K -n $SERVE_NS get pod sprout-serve-node -o jsonpath='{.status.podIP}')
  DETAIL="engine pod Ready in $(( $(date +%s) - t0 )) s at $SERVE_IP:8080 (readiness /healthz); "
  # the handler goes into the registry from another pod that mounts it read-write (deploy/README.md)
  cat > "$W/serve/src/f.py" <<'PY'
import os
n = 0
def f(event):
    global n
    n += 1
    return {"hello": (event or {}).get("name", "world"), "n": n, "uid": os.getuid()}
PY
  K -n $SERVE_NS create configmap hello-handler --from-file=f.py="$W/serve/src/f.py" >/dev/null || { DETAIL+="configmap hello-handler"; return 1; }
  regpod=$(echo "$objs" | jq --arg node "$NODE" --arg rc "$1" --arg w "$W/serve" --arg img "$SERVE_IMG" '
    (.items[] | select(.kind == "DaemonSet") | .metadata.namespace) as $ns | {apiVersion: "v1", kind: "Pod",
      metadata: {name: "sprout-serve-register", namespace: $ns, labels: {"sprout-k8s": "1", rc: $rc}},
      spec: {nodeName: $node, runtimeClassName: $rc, restartPolicy: "Never", terminationGracePeriodSeconds: 2,
        containers: [{name: "add", image: $img, imagePullPolicy: "Never", command: ["sh", "-c",
          "mkdir -p /tmp/hello && cp -L /src/f.py /tmp/hello/ && exec sprout-serve --config /etc/sprout-serve/sprout-serve.toml handler add hello /tmp/hello"],
          volumeMounts: [{name: "config", mountPath: "/etc/sprout-serve"}, {name: "registry", mountPath: "/registry"}, {name: "src", mountPath: "/src"}]}],
        volumes: [{name: "config", configMap: {name: "sprout-serve-config"}},
                  {name: "registry", hostPath: {path: ($w + "/registry"), type: "Directory"}},
                  {name: "src", configMap: {name: "hello-handler"}}]}}')
  echo "$regpod" | K apply -f - >/dev/null || { DETAIL+="registrar pod rejected"; return 1; }
  wait_for 180 sh -c "'$BIN/kubectl' --kubeconfig '$W/kubeconfig' -n $SERVE_NS get pod sprout-serve-register -o jsonpath='{.status.phase}' | grep -qx -e Succeeded -e Failed"
  out=$(K -n $SERVE_NS logs sprout-serve-register 2>&1 | tr '\n' ' ')
  [ "$(K -n $SERVE_NS get pod sprout-serve-register -o jsonpath='{.status.phase}')" = Succeeded ] && [ -f "$W/serve/registry/hello/f.py" ] \
    || { DETAIL+="registrar pod: phase $(K -n $SERVE_NS get pod sprout-serve-register -o jsonpath='{.status.phase}'), log '$out', registry: $(ls -A "$W/serve/registry" | tr '\n' ' ')"; return 1; }
  DETAIL+="registrar pod: '${out% }'; "
  # zygote: the first request, once the root zygote is up; hot: at once after it (same sandbox);
  # warm: after freeze_after_ms (1000 in deploy/'s config) the idle sandbox is frozen, then thawed
  wait_for 120 root_zygote_ready || { DETAIL+="root zygote not ready after 120 s: $(status_json | head -c 300)"; return 1; }
  out=$(serve_req '/run/hello|{"name": "k8s"}' '/run/hello|{"name": "k8s"}')
  r1=$(echo "$out" | sed -n 1p); r2=$(echo "$out" | sed -n 2p)
  wait_for 30 handler_frozen || DETAIL+="(not frozen after 30 s: $(status_json | jq -c .handlers 2>/dev/null)) "
  r3=$(serve_req '/run/hello|{"name": "k8s"}')
  # the handler's module global n counts the calls one sandbox served: 1, 2, 3 = the same one
  local r paths=""
  for r in "$r1" "$r2" "$r3"; do paths+="$(echo "$r" | cut -d' ' -f1-2) n=$(echo "$r" | grep -o '"n":[0-9]*' | cut -d: -f2), "; done
  DETAIL+="requests: ${paths%, }; "
  case $r1 in "200 zygote "*'"hello":"k8s"'*'"n":1'*) ;; *) ok=0; DETAIL+="1st: ${r1:0:120}; " ;; esac
  case $r2 in "200 hot "*'"n":2'*) ;; *) ok=0; DETAIL+="2nd: ${r2:0:120}; " ;; esac
  case $r3 in "200 warm "*'"n":3'*) ;; *) ok=0; DETAIL+="3rd: ${r3:0:120}; " ;; esac
  case $r1 in *'"uid":65534'*) ;; *) DETAIL+="sandbox uid not 65534; "; ok=0 ;; esac
  local m; m=$(serve_req /metrics | grep -o 'sprout_serve_requests_total{path="[a-z]*",status="200"} [0-9]*' | sed 's/.*path="\([a-z]*\)".*} /\1=/' | tr '\n' ' ')
  DETAIL+="metrics ${m% }; "
  # where the sandboxes' cgroups went (the engine's own cgroup is the container's scope)
  local cg; cg=$(find /sys/fs/cgroup/kubepods.slice -type d -name 'sb[0-9]*' 2>/dev/null | head -1)
  cg=${cg%/sb*}; DETAIL+="sandbox cgroups: $(echo "$cg" | sed 's|.*/\(kubepods-[a-z]*-\)\{0,1\}pod[^/]*\.slice/|<pod slice>/|'); "
  # SIGTERM (pod deletion): the engine removes its sandboxes, zygotes, cgroups and mounts
  K -n $SERVE_NS delete pod sprout-serve-node sprout-serve-register --timeout=120s >/dev/null 2>&1 || { DETAIL+="pod deletion did not finish in 120 s; "; ok=0; }
  local left=""
  left+=$(comm -13 <(echo "$procs0") <(serve_procs) | cut -c1-80 | tr '\n' ' ')
  left+=$(find /sys/fs/cgroup/kubepods.slice -type d -name 'sprout-serve' 2>/dev/null | tr '\n' ' ')
  left+=$(comm -13 <(echo "$mounts0") <(serve_mounts) | tr '\n' ' ')
  if [ -n "$left" ]; then DETAIL+="after deletion left: $left"; ok=0; else DETAIL+="pods deleted: no engine, zygote, sandbox cgroup or mount left"; fi
  K delete -f "$DEPLOY/sprout-serve.yaml" --wait=false >/dev/null 2>&1
  K -n $SERVE_NS delete configmap hello-handler --wait=false >/dev/null 2>&1
  [ "$ok" = 1 ]
}

# ------------------------------------------------------------------ phase 1 check
ck_static_pod() { # standalone kubelet, default runtime R: a static pod runs, logs, goes when removed
  local f=$W/manifests/static-$1.yaml logf ids
  # written under a hidden name first: the kubelet reads every other file in the dir as a pod
  cat > "$W/manifests/.static-$1.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: static-$1
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; echo static hello; while :; do sleep 1; done"]
    resources:
      limits: {memory: 48Mi}
EOF
  mv "$W/manifests/.static-$1.yaml" "$f"
  wait_for 180 sh -c "[ \$('$(rtbin "$1")' --root '$W/rt/$1/k8s.io' list -q 2>/dev/null | wc -l) -ge 2 ]" \
    || { DETAIL="no sandbox + container in $1's state after 180 s: $(CTR containers ls 2>&1 | tail -n +2 | tr '\n' ' ')"; return 1; }
  # (the other runtime's round left its stopped sandbox in containerd: select by pod name)
  ids=$(CTR containers ls -q "labels.\"io.kubernetes.pod.name\"==static-$1-$NODE")
  in_runtime "$1" $ids || return 1
  wait_for 60 sh -c "cat '$W'/log/pods/*static-$1*/c/0.log 2>/dev/null | grep -q 'static hello'" || { DETAIL+="no 'static hello' in the pod log; "; return 1; }
  logf=$(ls "$W"/log/pods/*static-"$1"*/c/0.log)
  local cid mem
  cid=$(for i in $ids; do CTR containers info "$i" | jq -r 'select(.Labels["io.cri-containerd.kind"]=="container") | .ID'; done | head -1)
  mem=$(cat "$(find /sys/fs/cgroup/kubepods.slice -type d -name "cri-containerd-$cid.scope" | head -1)/memory.max" 2>/dev/null)
  DETAIL="$(echo "$ids" | wc -w) containers in $1's state, log $(sed 's/^[^ ]* [^ ]* [^ ]* //' "$logf" | head -1), memory.max $mem; "
  [ "$mem" = 50331648 ] || { DETAIL+="(want 50331648) "; return 1; }
  rm -f "$f"
  wait_for 120 sh -c "[ -z \"\$('$(rtbin "$1")' --root '$W/rt/$1/k8s.io' list -q 2>/dev/null)\" ]" \
    || { DETAIL+="containers left after the manifest went: $("$(rtbin "$1")" --root "$W/rt/$1/k8s.io" list -q | tr '\n' ' ')"; return 1; }
  DETAIL+="gone after the manifest was removed"
}

# ------------------------------------------------------------------ setup
log "node test: $("$BIN/kubelet" --version), $(containerd --version | awk '{print $1, $3}'), sprout $("$SPROUT" --version | head -1 | awk '{print $NF}'), runc $("$RUNC" --version | head -1 | awk '{print $3}'), $(uname -r), $(systemctl --version | head -1)"
if [ -e "$W" ]; then   # a previous run's (--keep, or killed): its daemons, containers, mounts
  log "tearing down a previous run in $W"
  k=$KEEP; KEEP=0; teardown; TORN=0; KEEP=$k
fi
rm -rf "$W"
NETNS_BEFORE=$(ls /run/netns 2>/dev/null | grep '^cni-' | sort)
mkdir -p "$W"/{log,pids,manifests,containerd,kubelet/pki,kubelet/root,rt/runc,rt/sprout,cni/bin,cni/conf,cni/state,img}
: > "$RES"

# images: busybox-static with its applets, and our static pause
R=$W/img/busybox
mkdir -p "$R"/{bin,etc,tmp,root,proc,sys,dev}
chmod 1777 "$R/tmp"
cp "$(command -v busybox)" "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
python3 "$HERE/mkimage.py" "$W/img/busybox.tar" "$IMG" "$R" '[]' '["sh"]' || die "busybox image"
mkdir -p "$W/img/pause" && cp "$BIN/pause" "$W/img/pause/pause"
python3 "$HERE/mkimage.py" "$W/img/pause.tar" localhost/pause:k8s "$W/img/pause" '["/pause"]' '[]' || die "pause image"
SERVE_IMG_ERR=""
if want serve; then
  if [ ! -x "$SERVE_BIN" ]; then SERVE_IMG_ERR="no $SERVE_BIN"
  elif o=$(build_serve_image 2>&1); then log "sprout-serve image: $(echo "$o" | tail -1)"
  else SERVE_IMG_ERR="image build failed: $(echo "$o" | tail -3 | tr '\n' ' ')"; log "sprout-serve image: $SERVE_IMG_ERR"; fi
fi

# CNI
install -m755 "$HERE/cni/sprout-ptp" "$W/cni/bin/sprout-ptp"
install -m755 "$HERE/cni/sprout-ptp" "$W/cni/bin/loopback"
cat > "$W/cni/conf/10-sprout.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "sprout-k8s",
 "plugins": [{"type": "sprout-ptp", "dataDir": "$W/cni/state", "subnet": "10.244.0"}]}
EOF
modprobe veth 2>/dev/null || true
modprobe dummy 2>/dev/null || true
ip link add "$NODE_LINK" type dummy && ip addr add "$NODE_IP/32" dev "$NODE_LINK" && ip link set "$NODE_LINK" up \
  || die "no dummy link for the node IP"
write_kubelet_config

# ------------------------------------------------------------------ phase 1: standalone kubelet
for r in $RUNTIMES; do
  want static-pod || break
  log "phase 1 ($r): containerd (default runtime $r) + standalone kubelet"
  start_containerd "$r"
  if [ ! -f "$W/img/imported" ]; then
    CTR images import --platform linux/amd64 "$W/img/busybox.tar" >/dev/null && \
    CTR images import --platform linux/amd64 "$W/img/pause.tar" >/dev/null || die "ctr images import"
    touch "$W/img/imported"
  fi
  start_kubelet
  run_check static-pod "$r"
  rm -f "$W"/manifests/*.yaml   # (a failed check may have left its pod)
  wait_for 120 no_containers || log "phase 1 ($r): containers left"
  stop_kubelet
  stop_containerd
done

# ------------------------------------------------------------------ phase 2: API server
CHECKS="run logs exec liveness crashloop guaranteed burstable oomkilled oom-group shared-net-ipc share-pid security serve delete no-leftovers"
# serve runs once, with this RuntimeClass (sprout when it is among the runtimes)
SERVE_RT=${SPROUT_K8S_SERVE_RC:-$(case " $RUNTIMES " in *" sprout "*) echo sprout ;; *) echo "${RUNTIMES%% *}" ;; esac)}
# RUNC_CHECKS (env SPROUT_K8S_RUNC_CHECKS, comma-separated): the only phase-2 checks run with runc
# (CI's budget); empty: all of them
RUNC_CHECKS=${SPROUT_K8S_RUNC_CHECKS:-}
any=0; for c in $CHECKS; do want "$c" && any=1; done
if [ $any = 1 ]; then
log "phase 2: etcd + kube-apiserver, containerd (default runc), kubelet registered"
start_containerd runc
if [ ! -f "$W/img/imported" ]; then
  CTR images import --platform linux/amd64 "$W/img/busybox.tar" >/dev/null && \
  CTR images import --platform linux/amd64 "$W/img/pause.tar" >/dev/null || die "ctr images import"
  touch "$W/img/imported"
fi
if want serve && [ -z "$SERVE_IMG_ERR" ]; then
  t=$(date +%s)
  if CTR images import --platform linux/amd64 "$W/img/serve.tar" >/dev/null; then touch "$W/img/serve-imported"; log "sprout-serve image imported in $(( $(date +%s) - t )) s"
  else SERVE_IMG_ERR="ctr images import failed"; fi
  rm -f "$W/img/serve.tar"
fi
start_api
log "kube-apiserver ready ($(K version -o json 2>/dev/null | jq -r .serverVersion.gitVersion))"
for r in $RUNTIMES; do
  printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: %s\nhandler: %s\n' "$r" "$r" | K apply -f - >/dev/null \
    || die "RuntimeClass $r"
done
start_kubelet "$W/kubeconfig"
wait_for 180 K get node "$NODE" || die "node $NODE not registered"
wait_for 180 sh -c "'$BIN/kubectl' --kubeconfig '$W/kubeconfig' get node '$NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" \
  || log "node not Ready yet: $(K get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')"
log "node $NODE registered; RuntimeClasses: $(K get runtimeclass -o jsonpath='{range .items[*]}{.metadata.name}={.handler} {end}')"

for c in $CHECKS; do
  for r in $RUNTIMES; do
    [ "$c" = serve ] && [ "$r" != "$SERVE_RT" ] && continue
    [ "$r" = runc ] && [ -n "$RUNC_CHECKS" ] && case ",$RUNC_CHECKS," in *",$c,"*) ;; *) continue ;; esac
    run_check "$c" "$r"
  done
done
fi

# ------------------------------------------------------------------ teardown, then what is left
teardown
if [ "$KEEP" = 0 ]; then
  t=$(date +%s) left=""
  p=$(pgrep -af -- "$W" | grep -v -e "node.sh" -e pgrep | cut -c1-120)
  [ -z "$p" ] || left+="processes: $p; "
  m=$(awk -v W="$W" 'index($5, W) == 1 {print $5}' /proc/self/mountinfo)
  [ -z "$m" ] || left+="mounts: $m; "
  [ ! -d /sys/fs/cgroup/kubepods.slice ] || left+="cgroup kubepods.slice; "
  l=$(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^(sk[0-9a-f]{12}|$NODE_LINK)$")
  [ -z "$l" ] || left+="links: $l; "
  n=$(new_netns)
  [ -z "$n" ] || left+="netns: $n; "
  [ ! -e "$W" ] || left+="$W; "
  for r in $RUNTIMES; do
    if [ -z "$left" ]; then result "$r" PASS teardown "nothing left: no process, mount, kubepods cgroup, veth/dummy link, netns or state dir" $(( $(date +%s) - t ))
    else result "$r" FAIL teardown "left: $left" $(( $(date +%s) - t )); fi
  done
fi

# ------------------------------------------------------------------ report
echo ""
echo "== k8s node checks (kubelet $("$BIN/kubelet" --version | awk '{print $2}'), containerd $(containerd --version | awk '{print $3}'))"
cols=""; for r in $RUNTIMES; do cols+=$(printf ' %-8s' "$r"); done
printf '%-16s%s  %s\n' check "$cols" "same as runc"
for c in static-pod $CHECKS teardown; do
  want "$c" || [ "$c" = teardown ] || continue
  line=$(printf '%-16s' "$c"); s=""; ref=""
  for r in $RUNTIMES; do
    st=$(awk -F'\t' -v R="$r" -v C="$c" '$1==R && $3==C {print $2}' "$RES" | tail -1)
    line+=$(printf ' %-8s' "${st:--}")
    [ "$r" = sprout ] && s=$st; [ "$r" = runc ] && ref=$st
  done
  same=""; [ -n "$s" ] && [ -n "$ref" ] && { [ "$s" = "$ref" ] && same=yes || same=NO; }
  echo "$line  $same"
done
summary=""
for r in $RUNTIMES; do
  summary+="$r $(awk -F'\t' -v R="$r" '$1==R && $2=="PASS"' "$RES" | wc -l) passed, $(awk -F'\t' -v R="$r" '$1==R && $2=="FAIL"' "$RES" | wc -l) failed"
  n=$(awk -F'\t' -v R="$r" '$1==R && $2=="SKIP"' "$RES" | wc -l); [ "$n" = 0 ] || summary+=", $n skipped"
  summary+="; "
done
echo "k8s: ${summary%; } (in $(( $(date +%s) - T0 )) s)"
awk -F'\t' '$1=="sprout" && $2=="FAIL" {bad=1} END{exit bad}' "$RES"
