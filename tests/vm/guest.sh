#!/usr/bin/env bash
# tests/vm/guest.sh — runs INSIDE the test VM (as root), called by tests/vm/run.sh over ssh.
#
#   guest.sh cargo SUITE LABEL RUNTIME   the suite's test executables (target/vm-tests.tsv) with
#                                        SPROUT_BIN=RUNTIME, --test-threads=2 --show-output
#   guest.sh clients LABEL RUNTIME [ref] tests/clients/run.sh with SPROUT=RUNTIME (sprout + ref: with
#                                        its runc reference, whose REF lines give the runc column)
#   guest.sh podman LABEL RUNTIME        tests/vm/podman-matrix.sh (root + rootless, both managers)
#   guest.sh compliance LABEL RUNTIME    tests/compliance/run.sh RUNTIME (runtime-tools validation)
#   guest.sh k8s LABEL RUNTIME [ARGS]    tests/k8s/node.sh ARGS with SPROUT=RUNTIME (its RESULT lines
#                                        give the sprout and the runc column)
#
# Prints the suite's own output, then machine-readable lines for run.sh:
#   @@RESULT SUITE LABEL PASS FAIL SKIP SECONDS
#   @@FAIL SUITE LABEL NAME :: DETAIL          @@SKIP SUITE LABEL NAME :: REASON
# Logs: /var/tmp/vm-results/SUITE-LABEL.*
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUTD=/var/tmp/vm-results
mkdir -p "$OUTD"
kind=$1 suite=$2; shift 2
case "$kind" in cargo) label=$1 rt=$2 ;; *) label=$suite rt=$1; suite=$kind ;; esac
T0=$(date +%s)
RES=$OUTD/$suite-$label.tsv
: > "$RES"
exec </dev/null

# emit: read TSV STATUS NAME DETAIL from $RES, print the @@ lines
emit() {
  local p f s
  p=$(grep -c '^pass' "$RES"); f=$(grep -c '^fail' "$RES"); s=$(grep -c '^skip' "$RES")
  awk -F'\t' -v S="$suite" -v L="$label" '$1=="fail"{print "@@FAIL " S " " L " " $2 " :: " $3} $1=="skip"{print "@@SKIP " S " " L " " $2 " :: " $3}' "$RES"
  echo "@@RESULT $suite $label $p $f $s $(( $(date +%s) - T0 ))"
}

case "$kind" in
cargo)
  per_exe_timeout=${SPROUT_VM_TEST_TIMEOUT:-1800}
  # Under TCG (systemd-detect-virt says "qemu"; "kvm" with KVM) a start takes ~10x as long: the
  # tests' polling bounds (bounds for a hang, not timings) are stretched 3x.
  if [ -z "${SPROUT_TEST_SLOW:-}" ] && [ "$(systemd-detect-virt 2>/dev/null)" = qemu ]; then
    export SPROUT_TEST_SLOW=3
    echo "== guest runs under TCG: SPROUT_TEST_SLOW=3"
  fi
  while IFS=$'\t' read -r s pkgdir exe; do
    [ "$s" = "$suite" ] || continue
    log=$OUTD/$suite-$label-$(basename "$exe").log
    echo "== $suite/$label: $(basename "$exe") (SPROUT_BIN=$rt)"
    t1=$(date +%s)
    (cd "$pkgdir" && SPROUT_BIN=$rt timeout -k 20 "$per_exe_timeout" "$exe" --test-threads=2 --show-output) > "$log" 2>&1
    rc=$?
    grep -E '^test .* \.\.\. ' "$log" | grep -v '\.\.\. ok$' | head -60
    grep -E '^test result:' "$log" | tail -1
    echo "   ($(( $(date +%s) - t1 )) s, exit $rc)"
    python3 "$HERE/libtest.py" "$log" "$rc" "$(basename "$exe")" | sed "s|\t|\t$(basename "$exe" | sed 's/-[0-9a-f]\{16\}$//')::|" >> "$RES"
  done < "$REPO/target/vm-tests.tsv"
  emit ;;
clients)
  log=$OUTD/clients-$label.log
  ref=${3:-noref}
  if [ "$label" = sprout ] && [ "$ref" = ref ]; then
    SPROUT=$rt bash "$REPO/tests/clients/run.sh" 2>&1 | tee "$log"
  else
    SPROUT=$rt bash "$REPO/tests/clients/run.sh" --no-ref 2>&1 | tee "$log"
  fi
  sed -n 's/^PASS \(.*\)$/pass\t\1\t/p; s/^FAIL \(.*\)$/fail\t\1\t/p; s/^SKIP \([^ ]*\) (\(.*\))$/skip\t\1\t\2/p' "$log" >> "$RES"
  # details of failures: the indented "    | " lines after a FAIL line
  awk '/^FAIL /{n=$2; next} n!="" && /^    \| /{d[n]=d[n] substr($0,7) " | "; if (++c[n]>=3) n=""; next} {n=""} END{for (k in d) print k "\t" d[k]}' "$log" > "$OUTD/clients-$label.details"
  # (FILENAME, not NR==FNR: with no failure the details file is empty and NR==FNR held for $RES)
  awk -F'\t' 'FILENAME==ARGV[1]{d[$1]=$2; next} $1=="fail" && ($2 in d){$3=substr(d[$2],1,500)} {print $1 "\t" $2 "\t" $3}' "$OUTD/clients-$label.details" "$RES" > "$RES.x" && mv "$RES.x" "$RES"
  emit
  if [ "$label" = sprout ] && [ "$ref" = ref ]; then   # the runc reference column from the same run
    suite=clients label=runc T0=$T0 RES=$OUTD/clients-runc.tsv
    sed -n 's/^REF  \(.*\) \[runc: PASS\]$/pass\t\1\t/p; s/^REF  \(.*\) \[runc: FAIL\]$/fail\t\1\t/p' "$log" > "$RES"
    emit
  fi ;;
podman|podman-rootless)
  log=$OUTD/$suite-$label.log
  bash "$HERE/podman-matrix.sh" "$rt" 2>&1 | tee "$log"
  sed -n 's/^PASS \(.*\)$/pass\t\1\t/p; s/^SKIP \([^ ]*\) (\(.*\))$/skip\t\1\t\2/p' "$log" >> "$RES"
  sed -n 's/^FAIL \([^ ]*\) :: \(.*\)$/fail\t\1\t\2/p' "$log" >> "$RES"
  emit ;;
compliance)
  log=$OUTD/compliance-$label.log
  rdir=$OUTD/compliance-$label
  rm -rf "$rdir"
  bash "$REPO/tests/compliance/run.sh" -o "$rdir" "$rt" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # count test points ourselves: ok (not SKIP) / not ok / ok # SKIP; a program that timed out or
  # produced no TAP is one fail
  for tap in "$rdir"/*.tap; do
    [ -e "$tap" ] || continue
    p=$(basename "$tap" .tap)
    awk -v P="$p" '
      /^ok / && /# [Ss][Kk][Ii][Pp]/ {sub(/^ok [0-9]* *-? */,""); print "skip\t" P ": " $0 "\t"; next}
      /^ok / {n++; print "pass\t" P "#" n "\t"; next}
      /^not ok / {d=$0; sub(/^not ok [0-9]* *-? */,"",d); print "fail\t" P ": " d "\t"}' "$tap" >> "$RES"
    # passing points per program, for run.sh's comparison with crun's
    echo "@@OKS compliance $label $p $(grep '^ok ' "$tap" | grep -vic '# skip')"
    if ! grep -q '^1\.\.[0-9]' "$tap"; then
      echo -e "fail\t$p: no TAP plan (crashed or timed out)\t$(tail -3 "$rdir/$p.stderr" 2>/dev/null | tr '\n' ' ' | cut -c1-300)" >> "$RES"
    fi
  done
  # programs run again (compliance/run.sh --retry: a test that races itself), for the report
  [ -s "$rdir/retried.txt" ] && sed "s/^/@@RETRIED compliance $label /" "$rdir/retried.txt"
  [ "$rc" = 0 ] || echo "compliance/run.sh exit $rc"
  emit ;;
k8s)
  log=$OUTD/k8s.log
  shift 1   # (node.sh's own arguments follow RUNTIME)
  SPROUT=$rt bash "$REPO/tests/k8s/node.sh" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  for l in sprout runc; do
    label=$l RES=$OUTD/k8s-$l.tsv
    sed -n "s/^RESULT $l PASS \([^ ]*\) :: .*\$/pass\t\1\t/p; s/^RESULT $l SKIP \([^ ]*\) :: \(.*\)\$/skip\t\1\t\2/p; s/^RESULT $l FAIL \([^ ]*\) :: \(.*\)\$/fail\t\1\t\2/p" "$log" > "$RES"
    # the node never came up (exit 2): one failure saying so, not an empty pass
    [ "$rc" != 2 ] || echo -e "fail\tnode-setup\t$(grep -a 'node: ' "$log" | tail -1 | cut -c1-300)" >> "$RES"
    emit
  done ;;
*) echo "guest.sh: unknown kind $kind" >&2; exit 2 ;;
esac
