#!/usr/bin/env bash
# Benchmark: N full pre+post cycles of (a) the release binary and (b) the kubectl-script way
# (hack/bench/kubectl-guard.sh), on a real control plane with the demo's Harvester-like state.
# Prints wall time per cycle (median, spread), the ratio a/b, API requests per phase (from the
# API server's audit log), peak RSS (/usr/bin/time -v) and the release binary size, and checks
# the targets: ratio <= 0.2, <= 4 object requests + 1 Event per phase, RSS <= 20 MiB, size <= 10 MiB.
#   hack/bench.sh            (BENCH_CYCLES=N, default 20)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${BENCH_CYCLES:-20}"
(( N >= 20 )) || { echo "bench: BENCH_CYCLES must be at least 20" >&2; exit 2; }
for tool in jq /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required (apt-get install jq time python3)" >&2; exit 1; }
done

cd "$REPO_ROOT"
cargo build --release --quiet
BIN="$REPO_ROOT/target/release/workload-update-guard"
BIN_DIR="$(bash hack/control-plane.sh bin-dir)"
export KUBECTL="$BIN_DIR/kubectl"

dir="$(bash hack/control-plane.sh up)"
work="$(mktemp -d)"
trap 'bash "$REPO_ROOT/hack/control-plane.sh" down "$dir"; rm -rf "$work"' EXIT
export KUBECONFIG="$dir/kubeconfig"
# kubectl keeps its discovery cache here, warm after the first call: the baseline's best case.
export HOME="$work/home"; mkdir -p "$HOME"
"$KUBECTL" apply -f hack/demo/harvester.yaml >/dev/null
"$KUBECTL" -n harvester-system patch kubevirt kubevirt --subresource=status --type=merge \
  -p '{"status":{"phase":"Deployed","outdatedVirtualMachineInstanceWorkloads":2}}' >/dev/null
snapshot() {
  { "$KUBECTL" -n harvester-system get kubevirt kubevirt -o json | jq -S 'del(.metadata.resourceVersion, .metadata.managedFields, .metadata.generation)'
    "$KUBECTL" -n fleet-local get managedchart harvester -o json | jq -S 'del(.metadata.resourceVersion, .metadata.managedFields, .metadata.generation)'; }
}
snapshot > "$work/initial.json"

audit_lines() { wc -l < "$dir/audit.log"; }
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

python3 - "$work" "$BIN" "$N" <<'PY'
import json, os, statistics, sys, glob, collections
work, binary, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cycles = collections.defaultdict(list)
for line in open(f"{work}/cycles.txt"):
    tool, _, us = line.split()
    cycles[tool].append(int(us) / 1000)
rss = collections.defaultdict(int)
for line in open(f"{work}/phases.txt"):
    tool, phase, cycle, kb = line.split()
    if cycle != "0":
        rss[tool] = max(rss[tool], int(kb))

def requests(tool, phase):
    counts = []
    for f in sorted(glob.glob(f"{work}/audit-{tool}-{phase}-*.log")):
        if f.endswith("-0.log"):
            continue
        events = [json.loads(l) for l in open(f) if l.strip()]
        mine = [e for e in events if e.get("stage") == "ResponseComplete" and e["user"]["username"] == "wug-admin"]
        counts.append(mine)
    return counts

def describe(events):
    c = collections.Counter()
    for e in events:
        ref = e.get("objectRef") or {}
        c[f'{e["verb"]} {ref.get("resource") or e["requestURI"].split("?")[0]}'] += 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items()))

print(f"\nbenchmark: {n} pre+post cycles per tool on {os.cpu_count()} cores, {os.uname().release}")
print(f"{'tool':<10}{'median ms':>11}{'min':>9}{'p10':>9}{'p90':>9}{'max':>9}{'peak RSS MiB':>14}")
for tool in ("guard", "kubectl"):
    xs = sorted(cycles[tool])
    q = statistics.quantiles(xs, n=10)
    print(f"{tool:<10}{statistics.median(xs):>11.1f}{xs[0]:>9.1f}{q[0]:>9.1f}{q[-1]:>9.1f}{xs[-1]:>9.1f}{rss[tool] / 1024:>14.1f}")
ratio = statistics.median(cycles["guard"]) / statistics.median(cycles["kubectl"])
print(f"ratio guard/kubectl (median cycle wall time): {ratio:.3f}")

ok = True
for tool in ("guard", "kubectl"):
    for phase in ("pre", "post"):
        runs = requests(tool, phase)
        per_run = sorted({len(r) for r in runs})
        print(f"API requests per {phase:<4} {tool:<8}: {per_run} -- {describe(runs[0])}")
        if tool == "guard":
            for r in runs:
                events = sum(1 for e in r if (e.get("objectRef") or {}).get("resource") == "events")
                objects = len(r) - events
                if objects > 4 or events > 1 or any(e["verb"] not in ("get", "patch", "create") for e in r):
                    ok = False
size = os.path.getsize(binary)
print(f"release binary: {size / 1048576:.2f} MiB ({size} bytes, stripped)")
targets = [
    ("cycle wall time <= 0.2x the kubectl script", ratio <= 0.2, f"{ratio:.3f}"),
    ("<= 1 read + 1 write per object (4) + <= 1 Event per phase, no discovery", ok, "see above"),
    ("peak RSS <= 20 MiB", rss["guard"] <= 20 * 1024, f"{rss['guard'] / 1024:.1f} MiB"),
    ("stripped release binary <= 10 MiB", size <= 10 * 1048576, f"{size / 1048576:.2f} MiB"),
]
print("\ntargets:")
for name, passed, got in targets:
    print(f"  {'PASS' if passed else 'FAIL'}  {name}: {got}")
sys.exit(0 if all(p for _, p, _ in targets) else 1)
PY
