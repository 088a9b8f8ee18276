#!/usr/bin/env bash
# Benchmark: N full pre+post cycles of (a) the release binary and (b) the kubectl-script way
# (hack/bench/kubectl-guard.sh), on a real control plane with the demo's Harvester-like state.
# Prints wall time per cycle (median, spread), the ratio a/b, API requests per phase (from the
# API server's audit log), peak RSS (/usr/bin/time -v) and the release binary size, and checks
# the targets (hack/bench/report.py): ratio <= 0.2 (gated by the full run only); object requests per phase: pre <= 4 (a read and a
# write per object), post <= 6 (also the release of our field-manager claim on each object), plus
# 1 Event each (pre: 1 more, the warning of the demo state's migrations under way), plus the lists
# (pre: Harvester's Upgrades and Versions, and the migrations; post: the Upgrades); RSS <= 20 MiB;
# size <= 10 MiB. The demo's
# ManagedChart has no Fleet status, so these phases have nothing to wait for. Then the armed post
# while it waits (BENCH_ARMED_SECONDS, default 90): its requests per minute and its peak RSS.
# Apart from those figures, the wait for Fleet (docs/design.md, "Waiting for Fleet"): BENCH_FLEET_RUNS
# runs (default 3) of the integration test that deploys with the Fleet model (tests/support/fleet.rs,
# a 5 s deploy by the real Helm 4); per phase, how long the model's deploy took and how long after
# its Ready the phase exited (target: under 1 s).
# Then the real workload updater (hack/bench/updater.sh, not in --quick): KubeVirt's own
# virt-controller of each version of BENCH_KUBEVIRT (default "v1.6.0 v1.7.0 v1.8.4"), timed by the
# integration tests: from the restore (post) to the first workload-update migration (goal <= 35 s:
# KubeVirt requeues every 30 s) and, the control, from KubeVirt's upgrade to the first migration
# without the guard (there must be migrations) (hack/bench/updater_report.py).
# Last, the scale run (hack/bench/scale.sh: a large cluster holds tens of thousands): 10,000 and 30,000 migrations
# (BENCH_SCALE), the peak RSS and time of `pre` and `status` against `kubectl get`, then at the
# largest N with 2,000 VMIs the resident guard's peak RSS without and with an upgrade's record
# open (BENCH_RECORD_SECONDS each), with the goals (hack/bench/scale_report.py); its figures go
# to docs/figures/bench-scale.md.
#   hack/bench.sh            (BENCH_CYCLES=N, default 20; BENCH_FLEET_RUNS=M, default 3;
#                             BENCH_SCALE="10000 30000"; BENCH_SCALE_RUNS=R, default 3;
#                             BENCH_RECORD_SECONDS=S, default 40)
#   hack/bench.sh --quick    CI's check with a shorter run: 10 cycles, the
#                             resident guard's quiet period 60 s (no resync falls in it), one
#                             Fleet run, one scale run of 10,000 migrations, the record's two
#                             runs 20 s each at it; its figures go to
#                             target/bench/, never to docs/figures/ (those are the full run's).
#                             It gates only what does not move with the machine's load (CI's
#                             machine may be building beside it): request counts, memory, the
#                             binary's size, and the reaction bounds with 3x their room; the
#                             ratios of times (the cycle against the kubectl script, scale's
#                             status against kubectl get) are printed, "gated by the full run"
#   hack/bench.sh scale      the scale run alone, on a control plane of its own
#   hack/bench.sh resident   the resident guard alone (BENCH_RESIDENT_SECONDS, default 300)
#   hack/bench.sh kubevirt   the real updater's timings alone (BENCH_KUBEVIRT), its figures to
#                             docs/figures/bench-updater.md
#   hack/bench.sh upgrade    the whole upgrade, drains included (hack/bench/upgrade.sh): what the
#                             guard saves, with and without it, for BENCH_UPGRADE_VMS (default
#                             "12 60") on 3 nodes and each of BENCH_KUBEVIRT; its figures to
#                             docs/figures/bench-upgrade.md
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0
QUICK_ARG=()
if [[ "${1:-}" == --quick ]]; then
  QUICK=1
  QUICK_ARG=(--quick)
  shift
  : "${BENCH_CYCLES:=10}" "${BENCH_RESIDENT_SECONDS:=60}" "${BENCH_FLEET_RUNS:=1}" "${BENCH_SCALE_RUNS:=1}"
  # One size: 10,000 migrations, the record's run at it (30,000 is the full run's: creating the
  # 20,000 more took 68 s in the bare CI run of af04bef, for no goal CI checks otherwise).
  : "${BENCH_RECORD_SECONDS:=20}" "${BENCH_SCALE=10000}"
  export BENCH_CYCLES BENCH_RESIDENT_SECONDS BENCH_FLEET_RUNS BENCH_SCALE_RUNS BENCH_RECORD_SECONDS BENCH_SCALE
fi
MODE="${1:-all}"
[[ "$MODE" == all || "$MODE" == scale || "$MODE" == resident || "$MODE" == kubevirt || "$MODE" == upgrade ]] \
  || { echo "usage: hack/bench.sh [--quick] [scale|resident|kubevirt|upgrade]" >&2; exit 2; }
(( ! QUICK )) || [[ "$MODE" != kubevirt && "$MODE" != upgrade ]] || { echo "bench: $MODE has no --quick (CI runs those tests: hack/test.sh)" >&2; exit 2; }
N="${BENCH_CYCLES:-20}"
(( N >= 20 || (QUICK && N >= 10) )) || { echo "bench: BENCH_CYCLES must be at least 20 (10 with --quick)" >&2; exit 2; }
# Where the figures go: docs/figures/ (cited by the docs) only from a full run.
FIGURES="$REPO_ROOT/docs/figures"
if (( QUICK )); then
  FIGURES="$REPO_ROOT/target/bench"
  echo "bench: --quick: the load-independent targets checked with a shorter run (ratios of times printed, gated by the full run) ($N cycles, resident quiet ${BENCH_RESIDENT_SECONDS} s, ${BENCH_FLEET_RUNS} Fleet run, ${BENCH_SCALE_RUNS} scale run each); figures to target/bench/. The figures in docs/figures/ come from the full run: bash hack/bench.sh" >&2
fi
# shellcheck source=hack/bench/scale.sh
source "$REPO_ROOT/hack/bench/scale.sh"
# shellcheck source=hack/bench/resident.sh
source "$REPO_ROOT/hack/bench/resident.sh"
# shellcheck source=hack/bench/updater.sh
source "$REPO_ROOT/hack/bench/updater.sh"
# shellcheck source=hack/bench/upgrade.sh
source "$REPO_ROOT/hack/bench/upgrade.sh"
for tool in jq /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required (apt-get install jq time python3)" >&2; exit 1; }
done

cd "$REPO_ROOT"
# The real updater's figures, in their own file (docs/testing.md, "Performance").
updater_figures() {
  local rc=0
  python3 hack/bench/updater_report.py "$work" > "$work/updater-report.txt" || rc=$?
  cat "$work/updater-report.txt"
  mkdir -p "$FIGURES"
  {
    echo "# The last run of the real updater's timings (\`bash hack/bench.sh\` or \`bash hack/bench.sh kubevirt\`)"
    echo
    echo "Written by \`hack/bench.sh\` after its updater run; do not edit by hand."
    echo "KubeVirt upgraded with no node drained, then \`post\`: how fast the updater reacts to the restore,"
    echo "not what a complete upgrade leaves (its drains move every VM first: [bench-upgrade.md](bench-upgrade.md))."
    echo "When: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); load average at the end $(cut -d' ' -f1-3 /proc/loadavg); exit status $rc."
    echo
    echo '```'
    cat "$work/updater-report.txt"
    echo '```'
  } > "$FIGURES/bench-updater.md"
  return "$rc"
}
if [[ "$MODE" == kubevirt ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  updater_run
  updater_figures
  exit
fi
if [[ "$MODE" == upgrade ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  upgrade_run
  upgrade_figures
  exit
fi
cargo build --release --quiet
BIN="$REPO_ROOT/target/release/workload-update-guard"
BIN_DIR="$(bash hack/control-plane.sh bin-dir)"
export KUBECTL="$BIN_DIR/kubectl"

dir="$(CP_AUDIT=1 bash hack/control-plane.sh up)"
work="$(mktemp -d)"
trap 'bash "$REPO_ROOT/hack/control-plane.sh" down "$dir"; rm -rf "$work"' EXIT
export KUBECONFIG="$dir/kubeconfig"
# kubectl keeps its discovery cache here, warm after the first call: the baseline's best case.
real_home="$HOME"
export HOME="$work/home"; mkdir -p "$HOME"
"$KUBECTL" apply -f hack/demo/harvester.yaml >/dev/null
"$KUBECTL" -n harvester-system patch kubevirt kubevirt --subresource=status --type=merge \
  -p '{"status":{"phase":"Deployed","outdatedVirtualMachineInstanceWorkloads":2}}' >/dev/null
snapshot() {
  { "$KUBECTL" -n harvester-system get kubevirt kubevirt -o json | jq -S -f hack/snapshot.jq
    "$KUBECTL" -n fleet-local get managedchart harvester -o json | jq -S -f hack/snapshot.jq; }
}
snapshot > "$work/initial.json"

audit_lines() { wc -l < "$dir/audit.log"; }

# The scale run's figures, in the file the docs point to (docs/testing.md, "Performance").
scale_figures() {
  local rc=0
  python3 hack/bench/scale_report.py "$work" "${QUICK_ARG[@]}" > "$work/scale-report.txt" || rc=$?
  cat "$work/scale-report.txt"
  mkdir -p "$FIGURES"
  {
    echo "# The last scale run of \`bash hack/bench.sh\` (or \`bash hack/bench.sh scale\`)"
    echo
    echo "Written by \`hack/bench.sh\` at the end of its scale run; do not edit by hand."
    echo "When: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); load average at the end $(cut -d' ' -f1-3 /proc/loadavg); exit status $rc."
    echo
    echo '```'
    cat "$work/scale-report.txt"
    echo '```'
  } > "$FIGURES/bench-scale.md"
  return "$rc"
}
if [[ "$MODE" == scale ]]; then
  scale_run
  scale_figures
  exit
fi
# run TOOL PHASE CYCLE: one phase under /usr/bin/time; appends "tool phase cycle rss_kb requests" to results.
run() {
  local tool="$1" phase="$2" cycle="$3" before after
  before=$(audit_lines)
  if [[ "$tool" == guard ]]; then
    PHASE="$phase" TERMINATION_MESSAGE_PATH="" RUST_LOG=warn FALLBACK_METHODS=LiveMigrate \
      /usr/bin/time -f "%M" -o "$work/rss" "$BIN" >/dev/null
  else
    /usr/bin/time -f "%M" -o "$work/rss" bash hack/bench/kubectl-guard.sh "$phase"
  fi
  after=$(audit_lines)
  sed -n "$((before + 1)),${after}p" "$dir/audit.log" > "$work/audit-$tool-$phase-$cycle.log"
  echo "$tool $phase $cycle $(tail -1 "$work/rss")" >> "$work/phases.txt"
}
if [[ "$MODE" == resident ]]; then
  resident_run
  python3 hack/bench/report.py "$work" "$BIN" 0 resident "${QUICK_ARG[@]}"
  exit
fi

for tool in guard kubectl; do
  # One warm-up cycle (page cache, kubectl's discovery cache), not measured.
  run "$tool" pre 0; run "$tool" post 0
  for i in $(seq 1 "$N"); do
    start=$(date +%s%N)
    run "$tool" pre "$i"
    run "$tool" post "$i"
    echo "$tool $i $(( ($(date +%s%N) - start) / 1000 ))" >> "$work/cycles.txt"
    snapshot > "$work/now.json"
    cmp -s "$work/initial.json" "$work/now.json" || { echo "bench: $tool cycle $i did not restore the state" >&2; diff "$work/initial.json" "$work/now.json" >&2; exit 1; }
  done
done

# The armed post while it waits (it must stay cheap for hours or days): after a pre, ARM=true at its
# default pace (ARM_POLL_SECONDS=30) with no upgrade begun, for ARMED_SECONDS; its requests (the
# audit log) per minute and its peak RSS. SIGTERM ends it (exit 5), as a drain would.
ARMED_SECONDS="${BENCH_ARMED_SECONDS:-90}"
run guard pre armed
before=$(audit_lines)
armed_start=$(date +%s%N)
PHASE=post ARM=true TERMINATION_MESSAGE_PATH="" RUST_LOG=warn \
  /usr/bin/time -f "%M" -o "$work/armed-rss" timeout -s TERM "$ARMED_SECONDS" "$BIN" >/dev/null 2>&1 || true
armed_ms=$(( ($(date +%s%N) - armed_start) / 1000000 ))
after=$(audit_lines)
sed -n "$((before + 1)),${after}p" "$dir/audit.log" > "$work/audit-armed.log"
echo "$armed_ms $(tail -1 "$work/armed-rss")" > "$work/armed.txt"

# The resident guard over a quiet period, then its reaction to an upgrade (hack/bench/resident.sh).
resident_run

# The Fleet wait, apart: its own control plane per run (the test binary starts one).
for i in $(seq 1 "${BENCH_FLEET_RUNS:-3}"); do
  HOME="$real_home" FLEET_FIGURES="$work/fleet.txt" cargo test --quiet --test integration \
    fleet::pre_and_post_end_only_after_fleet_has_deployed -- --exact >"$work/fleet-test-$i.log" 2>&1 \
    || { echo "bench: the Fleet wait run $i failed:" >&2; tail -30 "$work/fleet-test-$i.log" >&2; exit 1; }
done

(( QUICK )) || updater_run

scale_run

rc=0
python3 hack/bench/report.py "$work" "$BIN" "$N" "${QUICK_ARG[@]}" > "$work/report.txt" || rc=$?
cat "$work/report.txt"
scale_figures || rc=1
if (( ! QUICK )); then updater_figures || rc=1; fi
# The figures, in the one place the docs point to (docs/testing.md, "Performance"): refreshed by
# every full run, so commit it with the change it measured (--quick: target/bench/).
mkdir -p "$FIGURES"
{
  if (( QUICK )); then echo "# The last run of \`bash hack/bench.sh --quick\` (a shorter run: the load-independent targets, not the figures)"
  else echo "# The last run of \`bash hack/bench.sh\`"; fi
  echo
  echo "Written by \`hack/bench.sh\` at the end of its run; do not edit by hand."
  echo "When: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); load average at the end $(cut -d' ' -f1-3 /proc/loadavg); exit status $rc."
  echo "The scale run's figures (10,000 and 30,000 migrations): [bench-scale.md](bench-scale.md)."
  (( QUICK )) || echo "The real updater's timings (KubeVirt's virt-controller): [bench-updater.md](bench-updater.md)."
  echo
  echo '```'
  cat "$work/report.txt"
  echo '```'
} > "$FIGURES/bench.md"
if (( QUICK )); then
  echo "bench: --quick run (a shorter run; the load-independent targets gated, the ratios of times printed): exit status $rc; figures in $FIGURES, not docs/figures/" >&2
fi
exit "$rc"
