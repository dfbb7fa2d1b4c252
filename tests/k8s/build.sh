#!/usr/bin/env bash
# tests/k8s/build.sh — build (or reuse) the Kubernetes binaries the node test needs, on the host:
# kubelet, kube-apiserver, kubectl and etcd from the Go module proxy, plus the test's own static
# `pause` (tests/k8s/pause). containerd, its runc shim and runc come from the VM image (Debian 13).
#
#   bash tests/k8s/build.sh        prints the directory holding the binaries on the last line
#
# Cache: $SPROUT_K8S_CACHE (default /var/cache/sprout-k8s, outside the repo), one directory per
# version (k8s-$K8S_VERSION/bin, `complete` when done); pause in pause-<sha of its source>/. Nothing
# fetched is ever written into the repo.
# How: `go mod download k8s.io/kubernetes@$K8S_VERSION`, copied to a scratch dir (go.work and the
# empty vendor/ dropped, the ./staging/src/k8s.io/* replaces swapped for the published k8s.io/*
# modules at v0.$MINOR.$PATCH), CGO_ENABLED=0 -trimpath, one `go build` at a time under nice.
# etcd is etcdmain.Main from go.etcd.io/etcd/server/v3 (the version Kubernetes' go.mod pins),
# behind a three-line main package written into the scratch module.
# Cold: ~850 CPU-s (kubelet ~570 of it, ~2 GB peak RSS), ~10-15 min on 2 cores; cached: 0 s.
# Env: K8S_VERSION (v1.37.2), SPROUT_K8S_CACHE, GOFLAGS/GOPROXY as usual.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=${K8S_VERSION:-v1.37.2}
CACHE=${SPROUT_K8S_CACHE:-/var/cache/sprout-k8s}
OUT=$CACHE/k8s-$K8S_VERSION
log() { echo "k8s-build: $*" >&2; }
export PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { log "needs Go (go.dev/dl or golang-go)"; exit 2; }
mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
flock 9

# ---- pause: the sandbox's init (sleeps, reaps children, exits 0 on SIGTERM/SIGINT)
PH=$(cat "$HERE/pause/main.go" "$HERE/pause/go.mod" | sha256sum | cut -c1-12)
PAUSE=$CACHE/pause-$PH/pause
if [ ! -x "$PAUSE" ]; then
  mkdir -p "$CACHE/pause-$PH"
  (cd "$HERE/pause" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -o "$PAUSE.tmp" .)
  mv "$PAUSE.tmp" "$PAUSE"
fi

if [ ! -f "$OUT/complete" ]; then
  t0=$(date +%s)
  ver=${K8S_VERSION#v}; staging=v0.${ver#*.}          # v1.37.2 -> v0.37.2
  log "building Kubernetes $K8S_VERSION (staging modules $staging) into $OUT"
  dir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { log "go mod download k8s.io/kubernetes@$K8S_VERSION failed"; exit 1; }
  SRC=$CACHE/src-$K8S_VERSION
  rm -rf "$SRC"; mkdir -p "$SRC"
  cp -a "$dir/." "$SRC/"; chmod -R u+w "$SRC"
  # A build ended part-way (the CI's exit trap ends it when the tests finish first) leaves
  # neither its scratch copy nor half a bin.tmp behind.
  trap 'rm -rf "$SRC" "$OUT/bin.tmp"' EXIT
  cd "$SRC"
  rm -rf go.work go.work.sum vendor
  edits=()
  while read -r mod; do edits+=(-dropreplace="$mod" -require="$mod@$staging"); done \
    < <(go mod edit -json | python3 -c 'import json,sys; [print(r["Old"]["Path"]) for r in json.load(sys.stdin).get("Replace") or [] if r["New"]["Path"].startswith("./staging/")]')
  go mod edit "${edits[@]}"
  mkdir -p cmd/sprout-etcd
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > cmd/sprout-etcd/main.go
  V=k8s.io/component-base/version
  LD="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=${ver%%.*} -X $V.gitMinor=$(echo "$ver" | cut -d. -f2) -X $V.gitTreeState=clean -X $V.buildDate=1970-01-01T00:00:00Z"
  rm -rf "$OUT/bin.tmp"; mkdir -p "$OUT/bin.tmp"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod
  for b in kubelet:./cmd/kubelet kube-apiserver:./cmd/kube-apiserver kubectl:./cmd/kubectl etcd:./cmd/sprout-etcd; do
    t1=$(date +%s)
    nice -n 10 go build -trimpath -ldflags="$LD" -o "$OUT/bin.tmp/${b%%:*}" "${b#*:}"
    log "${b%%:*}: $(( $(date +%s) - t1 )) s"
  done
  rm -rf "$OUT/bin"; mv "$OUT/bin.tmp" "$OUT/bin"
  echo "$(( $(date +%s) - t0 ))" > "$OUT/build-seconds"
  go version > "$OUT/go-version"
  touch "$OUT/complete"
  cd /; rm -rf "$SRC"; trap - EXIT
  log "done in $(cat "$OUT/build-seconds") s"
fi
install -m755 "$PAUSE" "$OUT/bin/pause"
echo "$OUT/bin"
