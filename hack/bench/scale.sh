# shellcheck shell=bash
# The scale run of hack/bench.sh (a large cluster's migrations), sourced by it: for each N in BENCH_SCALE (default
# "10000 30000", ascending), N VirtualMachineInstanceMigrations of about 2 KiB each in the
# namespace `scale` (user migrations without a phase, and 5 workload-update ones Running, beside
# the demo state's 2), then BENCH_SCALE_RUNS times each (default 3): the peak RSS and wall time
# of `pre` (late, as the demo state is: it lists the migrations for its warnings; a `post`
# after each, not measured) and of `status`, with the release binary, the migration list
# requests of each `pre` (the audit log), and the wall time of
# `kubectl get virtualmachineinstancemigrations -A -o name`. Lines "N what run ms rss_kb lists"
# in WORK/scale.txt, for hack/bench/scale_report.py. BENCH_SCALE_COMPARE=BINARY measures that
# binary's `pre` and `status` too, the same way (e.g. a build of an earlier commit), beside ours.
# Last, at the largest N, the resident guard's upgrade record (scale_record, below).
# Needs: REPO_ROOT, BIN, KUBECTL, KUBECONFIG, dir (the control plane's), work, audit_lines, real_home.
# shellcheck disable=SC2154 # those are hack/bench.sh's, which sources this file

SCALE_UNDER_WAY=5

# scale_measure N WHAT RUN CMD...: CMD under /usr/bin/time, its stdout in WORK/scale-out.
scale_measure() {
  local n="$1" what="$2" i="$3" before after start ms lists
  shift 3
  before=$(audit_lines)
  start=$(date +%s%N)
  # Its stderr apart: a late pre's WARN lines, shown only if it fails.
  /usr/bin/time -f "%M" -o "$work/scale-rss" "$@" > "$work/scale-out" 2> "$work/scale-err" \
    || { echo "bench: scale $n: $what failed:" >&2; cat "$work/scale-err" >&2; exit 1; }
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  after=$(audit_lines)
  lists=$(sed -n "$((before + 1)),${after}p" "$dir/audit.log" \
    | jq -r 'select(.stage == "ResponseComplete" and .verb == "list"
                    and .objectRef.resource == "virtualmachineinstancemigrations") | .auditID' \
    | sort -u | wc -l)
  echo "$n $what $i $ms $(tail -1 "$work/scale-rss") $lists" >> "$work/scale.txt"
}

# The release binary's environment, as the bench's cycles run it; PHASE=... and "$BIN" follow.
SCALE_GUARD=(env TERMINATION_MESSAGE_PATH= RUST_LOG=warn FALLBACK_METHODS=LiveMigrate)

scale_run() {
  local have=0 n i total started
  "$KUBECTL" create namespace scale >/dev/null
  echo "${BENCH_SCALE_COMPARE:-}" > "$work/scale-compared.txt"
  for n in ${BENCH_SCALE-10000 30000}; do
    started=$(date +%s)
    python3 "$REPO_ROOT/hack/bench/create_migrations.py" "$dir" scale "$have" "$n" \
      "$(( have == 0 ? SCALE_UNDER_WAY : 0 ))"
    have="$n"
    total=$("$KUBECTL" get virtualmachineinstancemigrations -A -o name | wc -l)
    echo "bench: scale $n: $total migrations in all, created in $(( $(date +%s) - started )) s" >&2
    echo "$n created $total $(( $(date +%s) - started ))" >> "$work/scale-created.txt"
    for i in $(seq 1 "${BENCH_SCALE_RUNS:-3}"); do
      scale_measure "$n" pre "$i" "${SCALE_GUARD[@]}" PHASE=pre "$BIN"
      "${SCALE_GUARD[@]}" PHASE=post "$BIN" >/dev/null
      scale_measure "$n" status "$i" "${SCALE_GUARD[@]}" PHASE=status "$BIN"
      # What status reports: the updater's migrations under way, no more (the bench's 5 and
      # the demo's 2).
      [[ $(grep -o 'kubevirt-workload-update-' "$work/scale-out" | wc -l) -eq $(( SCALE_UNDER_WAY + 2 )) ]] \
        || { echo "bench: scale $n: status did not name the 7 migrations under way:" >&2; cat "$work/scale-out" >&2; exit 1; }
      if [[ -n "${BENCH_SCALE_COMPARE:-}" ]]; then
        scale_measure "$n" pre-compared "$i" "${SCALE_GUARD[@]}" PHASE=pre "$BENCH_SCALE_COMPARE"
        "${SCALE_GUARD[@]}" PHASE=post "$BIN" >/dev/null
        scale_measure "$n" status-compared "$i" "${SCALE_GUARD[@]}" PHASE=status "$BENCH_SCALE_COMPARE"
      fi
      scale_measure "$n" kubectl "$i" "$KUBECTL" get virtualmachineinstancemigrations -A -o name
      [[ $(wc -l < "$work/scale-out") -eq "$total" ]] \
        || { echo "bench: scale $n: kubectl get listed $(wc -l < "$work/scale-out") of $total" >&2; exit 1; }
    done
  done
  scale_record "$n"
}

# The resident guard's upgrade record (docs/design.md, "The upgrade's record") at N migrations
# and SCALE_VMIS VMIs (about 10 KiB each, running, created beside the migrations), its
# ConfigMap present: the resident guard (PHASE=watch, its default resync of 300 s) run twice,
# BENCH_RECORD_SECONDS each (default 40, --quick 20), under /usr/bin/time: with no upgrade under
# way (no record open, nothing of the migrations or VMIs watched), then with a v1.7.1 Upgrade
# under way that carries the operator's accept annotation, so that the guard records it and runs
# no `pre` (the difference of the two peaks is the record's alone: its two watches list every
# migration and VMI page by page, and count them). Lines "N what seconds rss_kb listed_ms" in
# WORK/scale-record.txt (listed_ms: how long after its start the ConfigMap held the record with
# every VMI; -1 for the first run); the guard's requests in WORK/audit-record-WHAT.log, when its
# start had settled (RECORD_SETTLE seconds after it) in WORK/record-WHAT.settled, the record kept
# in WORK/scale-record.json.
SCALE_VMIS=2000
SCALE_OUTDATED=500
RECORD_SETTLE=10

# scale_resident N WHAT SECONDS [WANT]: the resident guard for SECONDS (with WANT, until the
# ConfigMap's record counts WANT VMIs running at its start, at most 120 s).
scale_resident() {
  local n="$1" what="$2" secs="$3" want="${4:-}" before after tpid pid="" t0 ms listed=-1 settled=""
  mkdir -p "$work/record-$what"
  before=$(audit_lines)
  t0=$(date +%s%N)
  PHASE=watch WATCH_STATE_DIR="$work/record-$what" WATCH_RESYNC_SECONDS=300 METRICS_PORT=0 TERMINATION_MESSAGE_PATH="" \
    RUST_LOG=info /usr/bin/time -f "%M" -o "$work/record-$what.rss" "$BIN" >/dev/null 2>"$work/record-$what.log" &
  tpid=$!
  # The guard is /usr/bin/time's child: SIGTERM goes to it (time would die without its figure).
  for _ in $(seq 50); do
    pid=$(ps -o pid= --ppid "$tpid" | tr -d ' ') && [[ -n "$pid" ]] && break
    sleep 0.1
  done
  [[ -n "$pid" ]] || { echo "bench: scale $n: the resident guard ($what) did not start" >&2; exit 1; }
  while ms=$(( ($(date +%s%N) - t0) / 1000000 )); (( ms < secs * 1000 )) || [[ -n "$want" && $listed -lt 0 ]]; do
    (( ms < 120000 )) || { echo "bench: scale $n: the record did not count $want VMIs within 120 s; the guard's log:" >&2; tail -20 "$work/record-$what.log" >&2; exit 1; }
    if [[ -z "$settled" ]] && (( ms >= RECORD_SETTLE * 1000 )); then
      settled=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
      echo "$settled" > "$work/record-$what.settled"
    fi
    if [[ -n "$want" && $listed -lt 0 ]] && grep -q "recording Upgrade" "$work/record-$what.log" \
      && "$KUBECTL" -n harvester-system get configmap workload-update-guard-upgrades -o jsonpath='{.data.upgrades\.json}' \
           > "$work/scale-record.json" 2>/dev/null \
      && [[ "$(jq '.[-1].vms.runningAtStart' "$work/scale-record.json" 2>/dev/null)" == "$want" ]]; then
      listed=$ms
    fi
    sleep 0.5
  done
  kill -TERM "$pid"
  wait "$tpid" || true  # exit 5: SIGTERM, as a drain ends it
  # The API server logs a watch's end once its connection has closed.
  sleep 1
  after=$(audit_lines)
  sed -n "$((before + 1)),${after}p" "$dir/audit.log" > "$work/audit-record-$what.log"
  echo "$n $what $secs $(tail -1 "$work/record-$what.rss") $listed" >> "$work/scale-record.txt"
}

scale_record() {
  local n="$1" secs="${BENCH_RECORD_SECONDS:-40}" started
  started=$(date +%s)
  # KubeVirt's VMI CRD, as the control plane's KubeVirt version has it (with its schema): the
  # bench's control plane serves the KubeVirt CR's and the migrations' only.
  jq '.items[] | select(.metadata.name == "virtualmachineinstances.kubevirt.io")' \
    "$(HOME="$real_home" bash "$REPO_ROOT/hack/kubevirt.sh" crds)" | "$KUBECTL" apply --server-side -f - >/dev/null
  # kubectl wait fails, rather than waits, on a CRD whose status has no conditions yet.
  for _ in $(seq 60); do
    "$KUBECTL" wait --for condition=Established --timeout=60s crd/virtualmachineinstances.kubevirt.io \
      >/dev/null 2>&1 && break
    sleep 1
  done
  "$KUBECTL" get virtualmachineinstances -A >/dev/null
  python3 "$REPO_ROOT/hack/bench/create_migrations.py" --vmis "$dir" scale "$SCALE_VMIS" "$SCALE_OUTDATED"
  # As the chart creates it.
  "$KUBECTL" -n harvester-system create configmap workload-update-guard-upgrades >/dev/null
  echo "bench: scale $n: $SCALE_VMIS VMIs created, the ConfigMap; the resident guard without and with the record (${secs} s each)" >&2
  scale_resident "$n" quiet "$secs"
  "$KUBECTL" -n harvester-system create -f - >/dev/null <<YAML
apiVersion: harvesterhci.io/v1beta1
kind: Upgrade
metadata:
  name: hvst-upgrade-record
  namespace: harvester-system
  labels: {harvesterhci.io/latestUpgrade: "true", harvesterhci.io/upgradeState: UpgradingNodes}
  annotations: {workload-update-guard.harvesterhci.io/allow-unprotected: "true"}
spec: {version: v1.7.1}
YAML
  scale_resident "$n" record "$secs" "$SCALE_VMIS"
  "$KUBECTL" -n harvester-system delete upgrades.harvesterhci.io hvst-upgrade-record >/dev/null
  echo "$SCALE_VMIS $(( $(date +%s) - started ))" > "$work/scale-record-vmis.txt"
}
