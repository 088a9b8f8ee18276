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
# Needs: REPO_ROOT, BIN, KUBECTL, KUBECONFIG, dir (the control plane's), work, audit_lines.
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
}
