#!/usr/bin/env bash
# tests/vm/run.sh — the VM stage of CI: the project's suites on a pure cgroup-v2 + systemd host
# (Debian 13 VM, tests/vm/image.sh + vm.sh), against the real kernel/systemd/podman/docker there,
# each side by side with the VM's crun and runc where the suite can choose the runtime.
#
#   bash tests/vm/run.sh [--suites LIST] [--no-peers] [--keep-vm] [--fresh]
#
#   --suites LIST  comma-separated, default all (runs in this order):
#                  unit         every other workspace test executable (crates' unit tests), sprout only
#                  integration  tests/integration (SPROUT_BIN = sprout | crun | runc)
#                  security     tests/security    (SPROUT_BIN = sprout | crun | runc)
#                  serve        crates/serve's tests (sprout only)
#                  podman       tests/vm/podman-matrix.sh: rootful podman and rootless podman (user
#                               `tester`), --cgroup-manager=cgroupfs and systemd (sprout | crun | runc)
#                  clients      tests/clients/run.sh (sprout, with its runc reference; crun as SPROUT)
#                  compliance   tests/compliance/run.sh RUNTIME (sprout | crun | runc)
#                  k8s          tests/k8s/node.sh: a one-node Kubernetes (kubelet, containerd CRI,
#                               etcd, kube-apiserver) and its pod checks, RuntimeClass sprout and
#                               runc side by side, and sprout-serve as a pod (deploy/); ~15 min
#                               under TCG, plus a cold ~12 min build of the Kubernetes binaries on
#                               the host (tests/k8s/build.sh, cached in /var/cache/sprout-k8s; its
#                               own stage: when it fails the other suites still run, the run is
#                               BROKEN). SPROUT_K8S_ARGS: node.sh's arguments (--only ...);
#                               SPROUT_K8S_RUNC_CHECKS: the phase-2 checks runc runs (default all)
#   --no-peers     sprout only (no crun/runc columns); what scripts/test.sh (CI) runs: the integration
#                  suite with crun and runc took 218 + 393 s beside sprout's 94 s (2026-11-27)
#   --all-peers    crun and runc through every suite that can choose the runtime
#                  By default only tests/integration runs side by side with crun and runc: the other
#                  peers' runs were cut to stay near the ~40 min budget (TCG, 2 cores, measured
#                  2026-11-24): security 6.5 min (crun) and >15 min (runc, faults), podman 1.5-2 min
#                  per runtime and mode, clients' runc reference doubles its ~8 min, compliance ~10 min
#                  per runtime. The compliance suite's bar is crun's count of passing test points on
#                  this VM: crun's run when --all-peers ran it, else tests/vm/compliance-crun-ok.
#   --keep-vm      leave the VM running at the end (it is stopped otherwise; a VM that was already
#                  running when this started is reused and left running)
#   --fresh        reboot a VM that is already running (clean overlay)
#
# Needs: target/release/sprout (static; scripts/build.sh --workspace (re)builds it every run, with
# sprout-serve), the runtime-tools validation binaries in $RUNTIME_TOOLS_DIR (scripts/setup-deps.sh;
# compliance only). Builds the test executables here exactly as scripts/test.sh does (target/ci-tests,
# LTO off, 16 codegen units; Debian 12's glibc runs in Debian 13) and runs them in the VM at the
# same absolute paths. Logs: build/vm/<UTC time>/ (and build/vm/latest).
#
# Output: each suite's own output, a time per stage, a results table (per suite: sprout / crun / runc
# pass-fail-skip), every sprout failure and skip with its first error line, and the last line
# `vm: N passed, N failed, N skipped` (sprout). A test that cannot run in the VM is a skip with its
# reason, never a pass.
# Timing under TCG: guest.sh sets SPROUT_TEST_SLOW=3 for the cargo suites when the guest runs under
# TCG (systemd-detect-virt: qemu), stretching the tests' polling bounds (tests/support's poll,
# serve's eventually: bounds for a hang) threefold; a bound on how soon something may happen is not.
# Exit status: 0 all sprout suites passed; 1 a sprout test failed; 2 the harness broke (build, image,
# boot, copy) — the results so far are still printed.
#
# Budget (TCG, 2 cores): see the timings in the report at the end of each run; the peers' columns are
# what to cut first (--no-peers) if the stage grows past ~40 min.
set -uo pipefail
# The whole script is one { ... } block, read before it runs: editing it during a run is harmless.
{
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../../scripts/ci-env.sh
. "$REPO/scripts/ci-env.sh"
cd "$REPO"
exec </dev/null

ALL=unit,integration,security,serve,podman,clients,compliance,k8s
OPTIONAL=""   # known, run only when named in --suites
SUITES=$ALL PEERS=1 KEEP=0 FRESH=0
while [ $# -gt 0 ]; do
  case "$1" in
    --suites) SUITES=$2; shift 2 ;;
    --suites=*) SUITES=${1#--suites=}; shift ;;
    --no-peers) PEERS=0; shift ;;
    --all-peers) PEERS=2; shift ;;
    --keep-vm) KEEP=1; shift ;;
    --fresh) FRESH=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "vm/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for s in ${SUITES//,/ }; do
  case ",$ALL,$OPTIONAL," in *",$s,"*) ;; *) echo "vm/run.sh: unknown suite $s (known: $ALL,$OPTIONAL)" >&2; exit 2 ;; esac
done
want() { case ",$SUITES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

VM=(bash "$HERE/vm.sh")
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOGD=$REPO/build/vm/$STAMP
mkdir -p "$LOGD"; ln -sfn "$STAMP" "$REPO/build/vm/latest"
T_ALL=$(date +%s)
TIMES=() BROKE=() STARTED=0
stage_t0=0
stage() { stage_t0=$(date +%s); echo ""; echo "==> vm: $1"; }
stage_end() { TIMES+=("$(printf '%-34s %6ss  %s' "$1" $(( $(date +%s) - stage_t0 )) "${2:-ok}")"); }
broke() { BROKE+=("$1"); stage_end "$1" "BROKEN"; echo "vm/run.sh: $1 failed" >&2; }

cleanup() {
  if [ "$STARTED" = 1 ] && [ "$KEEP" = 0 ]; then "${VM[@]}" stop || true; fi
}
trap cleanup EXIT
trap 'echo "vm/run.sh: interrupted" >&2; exit 2' INT TERM

report() {
  local res=$LOGD/results.txt
  cat "$LOGD"/*.out 2>/dev/null | grep '^@@RESULT ' > "$res" || true
  echo ""
  echo "==> vm: times"
  printf '    %s\n' "${TIMES[@]}"
  echo ""
  echo "==> vm: results (pass/fail/skip; - = not run)"
  printf '    %-12s %-18s %-18s %-18s\n' suite sprout crun runc
  local s l cell line
  for s in ${SUITES//,/ }; do
    line=$(printf '    %-12s' "$s")
    for l in sprout crun runc; do
      cell=$(awk -v S="$s" -v L="$l" '$2==S && $3==L {print $4 "/" $5 "/" $6 " (" $7 "s)"}' "$res" | tail -1)
      line+=$(printf ' %-18s' "${cell:--}")
    done
    echo "$line"
    if [ "$s" = podman ]; then
      line=$(printf '    %-12s' "podman-rootless")
      for l in sprout crun runc; do
        cell=$(awk -v L="$l" '$2=="podman-rootless" && $3==L {print $4 "/" $5 "/" $6 " (" $7 "s)"}' "$res" | tail -1)
        line+=$(printf ' %-18s' "${cell:--}")
      done
      echo "$line"
    fi
  done
  echo ""
  local nf; nf=$(cat "$LOGD"/*.out 2>/dev/null | grep '^@@FAIL [^ ]* sprout ' | grep -vc '^@@FAIL compliance ' || true)
  if [ "$nf" -gt 0 ]; then
    echo "==> vm: sprout failures ($nf)"
    cat "$LOGD"/*.out | grep '^@@FAIL [^ ]* sprout ' | grep -v '^@@FAIL compliance ' | sed 's/^@@FAIL \([^ ]*\) sprout /    \1: /' | cut -c1-1300
    echo ""
  fi
  local nco; nco=$(cat "$LOGD"/*.out 2>/dev/null | grep -c '^@@FAIL compliance sprout ' || true)
  [ "$nco" = 0 ] || { echo "==> vm: compliance: $nco test points 'not ok' for sprout (listed in $LOGD/compliance-sprout.out; judged against crun's count below)"; echo ""; }
  local ns; ns=$(cat "$LOGD"/*.out 2>/dev/null | grep -c '^@@SKIP [^ ]* sprout ' || true)
  if [ "$ns" -gt 0 ]; then
    echo "==> vm: sprout skips ($ns)"
    # compliance's "# SKIP" test points (a config field the program did not set) are counted only
    cat "$LOGD"/*.out | grep '^@@SKIP [^ ]* sprout ' | grep -v '^@@SKIP compliance ' | sed 's/^@@SKIP \([^ ]*\) sprout /    \1: /' | cut -c1-300
    local nc; nc=$(cat "$LOGD"/*.out | grep -c '^@@SKIP compliance sprout ' || true)
    [ "$nc" = 0 ] || echo "    compliance: $nc test points '# SKIP' (listed in $LOGD/compliance-sprout.out)"
    echo ""
  fi
  [ ${#BROKE[@]} -eq 0 ] || echo "==> vm: BROKEN stages: ${BROKE[*]}"
  [ "${GUEST_REBOOTS:-0}" = 0 ] || echo "==> vm: the guest kernel panicked $GUEST_REBOOTS time(s) during a suite; each was run again in a fresh VM (serial-panic-*.log)"
  echo "    logs: $LOGD (total $(( $(date +%s) - T_ALL ))s)"
  compliance_verdict
  # compliance test points are judged against crun's (compliance_verdict), not one by one
  awk '$3=="sprout" && $2!="compliance" {p+=$4; f+=$5; s+=$6} END{printf "vm: %d passed, %d failed, %d skipped\n", p, f, s}' "$res"
}
# The compliance suite's bar on this host is crun's count of passing test points, program by
# program (runtime-tools checks v1-only cgroup files, so no runtime passes them all here): crun's
# run from this invocation when there was one (--all-peers), else the counts recorded for this
# image's crun in tests/vm/compliance-crun.tsv. sprout must score at least crun's count in every
# program but those listed, with the reason, in tests/vm/compliance-exceptions.tsv.
COMPLIANCE_OK=1
compliance_verdict() {
  local sp=$LOGD/compliance-sprout.out cr=$LOGD/compliance-crun.out src="crun in this run" base
  grep -q '^@@OKS ' "$sp" 2>/dev/null || return 0
  base=$(mktemp)
  if grep -q '^@@OKS ' "$cr" 2>/dev/null; then
    awk '$1=="@@OKS" {print $4 "\t" $5}' "$cr" > "$base"
  else
    grep -v '^#' "$HERE/compliance-crun.tsv" > "$base"; src="crun recorded in tests/vm/compliance-crun.tsv"
  fi
  local out
  out=$(awk -F'\t' -v EXC="$HERE/compliance-exceptions.tsv" '
    BEGIN { while ((getline l < EXC) > 0) if (l !~ /^#/) { split(l, f, "\t"); exc[f[1]] = 1 } }
    FILENAME==ARGV[1] { crun[$1] = $2; ct += $2; next }
    { split($0, f, " "); p = f[4]; n = f[5]; st += n; seen[p] = 1
      if (p in crun && n < crun[p]) { if (p in exc) ex = ex " " p "(" n "<" crun[p] ")"; else bad = bad " " p "(" n "<" crun[p] ")" } }
    END { for (p in crun) if (!(p in seen) && crun[p] > 0) bad = bad " " p "(not run)"
          printf "%d %d|%s|%s\n", st, ct, bad, ex }' "$base" <(grep '^@@OKS ' "$sp"))
  rm -f "$base"
  local tot=${out%%|*} rest=${out#*|}; local bad=${rest%%|*} ex=${rest#*|}
  echo ""
  echo "==> vm: compliance: sprout ${tot% *} passing points, $src ${tot#* }"
  [ -z "$ex" ] || echo "    fewer than crun, listed in tests/vm/compliance-exceptions.tsv:$ex"
  grep '^@@RETRIED ' "$sp" | sed 's/^@@RETRIED compliance sprout /    run again (the last run counts): /' || true
  if [ -n "$bad" ]; then
    COMPLIANCE_OK=0
    echo "vm: compliance: FAIL: fewer passing points than crun in:$bad"
  else
    echo "vm: compliance: sprout >= crun in every other program"
  fi
}
finish() {
  report
  if [ ${#BROKE[@]} -gt 0 ]; then exit 2; fi
  if awk '$3=="sprout" && $2!="compliance" && $5>0 {bad=1} END{exit !bad}' "$LOGD/results.txt"; then exit 1; fi
  [ "$COMPLIANCE_OK" = 1 ] || exit 1
  exit 0
}

# ---------------------------------------------------------------- 1. binaries
stage "build (sprout, sprout-serve, test executables)"
SPROUT=$REPO/target/release/sprout
# Always (cargo makes it a no-op when target/release is current, as after scripts/test.sh's own
# build): a binary left from an older tree was once tested in the VM in place of this one.
bash "$REPO/scripts/build.sh" --workspace || { broke "build"; finish; }
echo "    $("$SPROUT" --version 2>&1 | head -1)"
TSV=$REPO/target/vm-tests.tsv
if want unit || want integration || want security || want serve; then
  env CARGO_TARGET_DIR="$REPO/target/ci-tests" CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo test --workspace --release --no-run --message-format=json > "$LOGD/cargo-test.json" 2> "$LOGD/cargo-test.stderr"
  rc=$?
  if [ $rc != 0 ]; then tail -30 "$LOGD/cargo-test.stderr"; broke "build test executables"; finish; fi
  python3 - "$LOGD/cargo-test.json" > "$TSV" <<'PY' || { broke "list test executables"; finish; }
import json, os, sys
suite = {"sprout-integration-tests": "integration", "sprout-security-tests": "security", "sprout-serve": "serve"}
seen = set()
for ln in open(sys.argv[1]):
    try:
        m = json.loads(ln)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    exe = m["executable"]
    if exe in seen:
        continue
    seen.add(exe)
    if not m["profile"]["test"]:   # a binary the tests run (CARGO_BIN_EXE_*): copied, not run
        print(f"bin\t-\t{exe}")
        continue
    pkg = m["package_id"]
    # package_id: "path+file:///work/main/tests/integration#sprout-integration-tests@0.1.0" (or older form)
    name = m["target"]["name"]
    pkgname = pkg.split("#")[1].split("@")[0] if "#" in pkg else pkg.split()[0]
    if "#" in pkg and "@" not in pkg.split("#")[1]:
        pkgname = os.path.basename(pkg.split("#")[0])
    print(f"{suite.get(pkgname, 'unit')}\t{os.path.dirname(m['manifest_path'])}\t{exe}")
PY
  cut -f1 "$TSV" | sort | uniq -c | sed 's/^/    executables: /'
fi
stage_end "build"
K8S_OK=0
if want k8s; then
  # cold: ~12 min on 2 cores (Go module proxy + go build); cached per version: 0 s
  stage "build Kubernetes binaries (tests/k8s/build.sh, cache ${SPROUT_K8S_CACHE:-/var/cache/sprout-k8s})"
  if K8S_BIN=$(bash "$REPO/tests/k8s/build.sh" | tail -1) && [ -x "$K8S_BIN/kubelet" ]; then
    K8S_OK=1
    echo "    Kubernetes binaries: $K8S_BIN ($(du -shL "$K8S_BIN" | cut -f1); cold build took $(cat "$K8S_BIN/../build-seconds" 2>/dev/null || echo '?') s)"
    stage_end "build k8s"
  else
    broke "build k8s (tests/k8s/build.sh)"   # the other suites still run; k8s does not
  fi
fi

# ---------------------------------------------------------------- 2. image + boot
stage "image"
IMG=$(bash "$HERE/image.sh" | tail -1) || { broke "image"; finish; }
echo "    $IMG (built in $(cat "$IMG/build-seconds" 2>/dev/null)s; $(tr '\n' ' ' < "$IMG/versions.txt" 2>/dev/null))"
stage_end "image"
boot_vm() {
  stage "boot"
  if "${VM[@]}" status >/dev/null 2>&1; then
    if [ "$FRESH" = 1 ]; then "${VM[@]}" stop; else echo "    reusing the running VM ($("${VM[@]}" status))"; fi
  fi
  if ! "${VM[@]}" status >/dev/null 2>&1; then
    "${VM[@]}" start || { broke "boot"; finish; }
    STARTED=1
  fi
  stage_end "boot ($(cat /var/tmp/sprout-vm/run/boot-seconds 2>/dev/null || echo ?)s to ssh)"
}
boot_vm

# ---------------------------------------------------------------- 3. copy into the VM
copy_into_vm() {
  stage "copy repo, binaries and suites into the VM"
  LIST=$LOGD/push.list
  {
    git ls-files -co --exclude-standard
    echo target/release/sprout
    [ -x target/release/sprout-serve ] && echo target/release/sprout-serve
    [ -f "$TSV" ] && { echo target/vm-tests.tsv; cut -f3 "$TSV" | sed "s|^$REPO/||"; }
  } | sort -u | while read -r f; do [ -e "$f" ] && echo "$f"; done > "$LIST"
  extra=()
  if want compliance; then
    [ -x "$RUNTIME_TOOLS_DIR/bin/runtimetest" ] && extra+=("$RUNTIME_TOOLS_DIR")
    [ -d "$NODE_TAP_PREFIX/node_modules" ] && extra+=("$NODE_TAP_PREFIX")
  fi
  if command -v zstd >/dev/null; then ZIP=(zstd -q -1 -T0) UNZIP="zstd -dc"; else ZIP=(gzip -1) UNZIP="gzip -dc"; fi
  # the repo at the same absolute path (test executables have it compiled in), the suite's tools too
  if ! { tar -C "$REPO" -c -T "$LIST" --transform "s|^|${REPO#/}/|" -f - ; [ ${#extra[@]} -eq 0 ] || tar -C / -c "${extra[@]#/}" -f -; } \
      | "${ZIP[@]}" | "${VM[@]}" ssh "rm -rf '$REPO' && mkdir -p '$REPO' && $UNZIP | tar -C / -xi -f - && echo ok" > "$LOGD/push.out" 2>&1 \
      || ! grep -q ok "$LOGD/push.out"; then
    cat "$LOGD/push.out"; broke "copy"; finish
  fi
  "${VM[@]}" ssh "set -e; install -m755 '$SPROUT' /usr/local/bin/sprout
    [ ! -x '$REPO/target/release/sprout-serve' ] || install -m755 '$REPO/target/release/sprout-serve' /usr/local/bin/sprout-serve
    mkdir -p /var/tmp/vm-results && chmod 1777 /var/tmp/vm-results && rm -rf /var/tmp/vm-results/*
    echo \"    in the VM: \$(stat -fc %T /sys/fs/cgroup), kernel \$(uname -r), \$(systemctl --version | head -1), \$(systemctl is-system-running)\"
    echo \"    crun \$(crun --version | head -1 | awk '{print \$3}') at \$(command -v crun), runc \$(runc --version | head -1 | awk '{print \$3}') at \$(command -v runc), podman \$(podman --version | awk '{print \$3}')\"" \
    || { broke "copy (install)"; finish; }
  if [ "$K8S_OK" = 1 ]; then   # the Kubernetes binaries, where tests/k8s/node.sh looks for them
    tar -C "$K8S_BIN" -chf - . | "${ZIP[@]}" | "${VM[@]}" ssh "rm -rf /opt/sprout-k8s/bin && mkdir -p /opt/sprout-k8s/bin && $UNZIP | tar -C /opt/sprout-k8s/bin -xf - && echo ok" > "$LOGD/push-k8s.out" 2>&1 \
      && grep -q ok "$LOGD/push-k8s.out" || { cat "$LOGD/push-k8s.out"; K8S_OK=0; BROKE+=("copy (k8s binaries)"); }
  fi
  CRUN=$("${VM[@]}" ssh 'command -v crun') RUNC=$("${VM[@]}" ssh 'command -v runc')
  stage_end "copy"
}
copy_into_vm

# ---------------------------------------------------------------- 4. suites
# run_guest OUTNAME [-u USER] ARGS...: guest.sh in the VM, output to the terminal and $LOGD/OUTNAME.out
SERIAL=/var/tmp/sprout-vm/run/serial.log
GUEST_REBOOTS=0
run_guest() {
  local out=$1; shift
  local u=(); if [ "$1" = -u ]; then u=(-u "$2"); shift 2; fi
  local try
  for try in 1 2; do
    # SPROUT_VM_TEST_PANIC=<output name>: crash the guest's kernel at the start of that suite's
    # first try (sysrq), to exercise the recovery below.
    if [ "$try" = 1 ] && [ "${SPROUT_VM_TEST_PANIC:-}" = "$out" ]; then
      "${VM[@]}" ssh "sleep 2; echo c > /proc/sysrq-trigger" >/dev/null 2>&1 &
    fi
    timeout -k 30 "${SPROUT_VM_SUITE_TIMEOUT:-2400}" "${VM[@]}" ssh "${u[@]}" "bash '$REPO/tests/vm/guest.sh' $*" 2>&1 \
      | tee "$LOGD/$out.out" | grep --line-buffered -v '^@@' | sed -u 's/^/    /'
    if grep '^@@RESULT' "$LOGD/$out.out" | sed 's/^@@RESULT /    => /'; then return 0; fi
    # No result. A guest kernel that died under TCG (an int3 "Oops" in the kernel's own text,
    # "Fatal exception in interrupt": seen both while booting and mid-suite) takes the suite with
    # it: boot a fresh VM, copy everything in again and run this suite once more. Anything else,
    # or a second time, fails the stage.
    if [ "$try" = 1 ] && grep -q "Kernel panic - not syncing" "$SERIAL" 2>/dev/null; then
      GUEST_REBOOTS=$((GUEST_REBOOTS + 1))
      cp "$SERIAL" "$LOGD/serial-panic-$out.log" 2>/dev/null || true
      mv "$LOGD/$out.out" "$LOGD/$out.panicked.out" 2>/dev/null || true
      echo "    => the guest kernel panicked during this suite (kept in $LOGD/serial-panic-$out.log); booting a fresh VM and running it again"
      local t0=$stage_t0
      "${VM[@]}" stop >/dev/null 2>&1 || true
      boot_vm
      copy_into_vm
      stage_t0=$t0
      continue
    fi
    echo "    => no result (see $LOGD/$out.out)"
    broke "$out (no result)"
    return 1
  done
}
peers() {
  if [ "$PEERS" = 2 ] || { [ "$PEERS" = 1 ] && [ "${1:-}" = integration ]; }; then echo "sprout:/usr/local/bin/sprout crun:$CRUN runc:$RUNC"
  else echo "sprout:/usr/local/bin/sprout"; fi; }
for s in ${SUITES//,/ }; do
  case $s in
    unit|serve)
      stage "$s (sprout)"; run_guest "$s-sprout" cargo "$s" sprout /usr/local/bin/sprout; stage_end "$s sprout" ;;
    integration|security)
      for p in $(peers "$s"); do
        stage "$s (${p%%:*})"; run_guest "$s-${p%%:*}" cargo "$s" "${p%%:*}" "${p#*:}"; stage_end "$s ${p%%:*}"
      done ;;
    podman)
      for p in $(peers); do
        stage "podman rootful (${p%%:*})"; run_guest "podman-${p%%:*}" podman "${p%%:*}" "${p#*:}"; stage_end "podman rootful ${p%%:*}"
        stage "podman rootless as tester (${p%%:*})"; run_guest "podman-rootless-${p%%:*}" -u tester podman-rootless "${p%%:*}" "${p#*:}"; stage_end "podman rootless ${p%%:*}"
      done ;;
    clients)
      if [ "$PEERS" = 2 ]; then
        stage "clients (sprout, runc reference)"; run_guest clients-sprout clients sprout /usr/local/bin/sprout ref; stage_end "clients sprout+runc"
        stage "clients (crun)"; run_guest clients-crun clients crun "$CRUN"; stage_end "clients crun"
      else
        stage "clients (sprout)"; run_guest clients-sprout clients sprout /usr/local/bin/sprout; stage_end "clients sprout"
      fi ;;
    k8s)
      # shellcheck disable=SC2086
      stage "k8s node (RuntimeClass sprout and runc; sprout-serve pod)"
      if [ "$K8S_OK" = 1 ]; then
        [ -z "${SPROUT_K8S_RUNC_CHECKS:-}" ] || echo "    runc: only ${SPROUT_K8S_RUNC_CHECKS} (SPROUT_K8S_RUNC_CHECKS)"
        run_guest k8s k8s sprout /usr/local/bin/sprout ${SPROUT_K8S_RUNC_CHECKS:+--runc-checks "$SPROUT_K8S_RUNC_CHECKS"} ${SPROUT_K8S_ARGS:-}
        stage_end "k8s sprout+runc"
      else
        echo "    not run: no Kubernetes binaries (see the build/copy stage above)"; stage_end "k8s" "NOT RUN"
      fi ;;
    compliance)
      for p in $(peers compliance); do
        stage "compliance (${p%%:*})"; run_guest "compliance-${p%%:*}" compliance "${p%%:*}" "${p#*:}"; stage_end "compliance ${p%%:*}"
      done ;;
  esac
done
finish
}
