# shellcheck shell=bash disable=SC2154
# The resident guard (PHASE=watch), sourced by hack/bench.sh (which defines BIN,
# KUBECTL, work, dir, audit_lines and run): its start with nothing to do (the 30 s warm-up: the
# watches' first lists and the first read; no write); over a quiet period with no upgrade, its
# requests a minute (the audit log, after the warm-up) and its RSS (steady: VmRSS at the end;
# peak: VmHWM); then its reaction to a modelled v1.7.1 Upgrade: from the Upgrade's creation to
# the CR's [] (the suspension), and from the label Succeeded to the original back (the restore),
# polled every 50 ms; last, a new guard started with one restore due (pre's suspension, an
# upgrade begun and ended since): its requests over 20 s, one post's writes, once. Through the
# quiet period its metrics are scraped every 30 s, as Prometheus would (GET /metrics on a free
# loopback port): a scrape reads what the loop decided and adds no request to the API server,
# so the requests a minute are measured with the scrapes in.
#   BENCH_RESIDENT_SECONDS   the quiet period (default 300: one resync and one watch renewal)

resident_methods() {
  "$KUBECTL" -n harvester-system get kubevirt kubevirt -o jsonpath='{.spec.workloadUpdateStrategy.workloadUpdateMethods}'
}

# resident_until WANT: ms until the methods are WANT (at most 60 s).
resident_until() {
  local want="$1" start
  start=$(date +%s%N)
  while [[ "$(resident_methods)" != "$want" ]]; do
    (( $(date +%s%N) - start < 60000000000 )) || { echo "bench: methods not $want within 60 s" >&2; return 1; }
    sleep 0.05
  done
  echo $(( ($(date +%s%N) - start) / 1000000 ))
}

# resident_upgrade NAME STATE: a modelled Upgrade to v1.7.1, Harvester's latest, in STATE.
resident_upgrade() {
  "$KUBECTL" -n harvester-system create -f - >/dev/null <<YAML
apiVersion: harvesterhci.io/v1beta1
kind: Upgrade
metadata:
  name: $1
  namespace: harvester-system
  labels: {harvesterhci.io/latestUpgrade: "true", harvesterhci.io/upgradeState: $2}
spec: {version: v1.7.1}
YAML
}

# resident_scrape PORT: one GET /metrics, its body on stdout (python3: no curl needed).
resident_scrape() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "http://127.0.0.1:$1/metrics"
}

resident_run() {
  local quiet="${BENCH_RESIDENT_SECONDS:-300}" pid before after original port scraper scrapes
  # Nothing of ours on the objects: the state between upgrades.
  run guard post resident
  original="$(resident_methods)"
  mkdir -p "$work/resident"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  # Before the start: its first requests come within milliseconds of it.
  local started
  started=$(audit_lines)
  PHASE=watch WATCH_STATE_DIR="$work/resident" TERMINATION_MESSAGE_PATH="" RUST_LOG=info \
    METRICS_PORT="$port" "$BIN" >/dev/null 2>"$work/resident.log" &
  pid=$!
  sleep 30
  before=$(audit_lines)
  sed -n "$((started + 1)),${before}p" "$dir/audit.log" > "$work/audit-resident-start.log"
  : > "$work/resident-scrapes.txt"
  ( while :; do resident_scrape "$port" >> "$work/resident-scrapes.txt" || true; sleep 30; done ) &
  scraper=$!
  sleep "$quiet"
  after=$(audit_lines)
  kill "$scraper"
  wait "$scraper" 2>/dev/null || true
  # A whole scrape ends with OpenMetrics's `# EOF`.
  scrapes=$(grep -c '^# EOF' "$work/resident-scrapes.txt" || true)
  sed -n "$((before + 1)),${after}p" "$dir/audit.log" > "$work/audit-resident.log"
  local rss hwm
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
  resident_upgrade hvst-upgrade-bench PreparingLoggingInfra
  local suspend_ms restore_ms
  suspend_ms=$(resident_until "[]")
  "$KUBECTL" -n harvester-system label upgrades.harvesterhci.io hvst-upgrade-bench --overwrite \
    harvesterhci.io/upgradeState=UpgradingNodes >/dev/null
  sleep 2
  "$KUBECTL" -n harvester-system label upgrades.harvesterhci.io hvst-upgrade-bench --overwrite \
    harvesterhci.io/upgradeState=Succeeded >/dev/null
  restore_ms=$(resident_until "$original")
  kill -TERM "$pid"
  wait "$pid" || true
  "$KUBECTL" -n harvester-system delete upgrades.harvesterhci.io hvst-upgrade-bench >/dev/null
  echo "$quiet $rss $hwm $suspend_ms $restore_ms $scrapes" > "$work/resident.txt"
  resident_restore_due "$original"
}

# resident_restore_due ORIGINAL: pre's suspension (a Job), an upgrade begun after its record and
# ended, then a new guard: one post, restoring ORIGINAL; its requests over 20 s after its start.
resident_restore_due() {
  local original="$1" pid started after
  run guard pre resident
  # After the record's second: an upgrade created in it counts as before the suspension.
  sleep 1.1
  resident_upgrade hvst-upgrade-due Succeeded
  started=$(audit_lines)
  PHASE=watch WATCH_STATE_DIR="$work/resident" TERMINATION_MESSAGE_PATH="" RUST_LOG=info \
    METRICS_PORT=0 "$BIN" >/dev/null 2>"$work/resident-due.log" &
  pid=$!
  resident_until "$original" >/dev/null
  sleep 20
  after=$(audit_lines)
  kill -TERM "$pid"
  wait "$pid" || true
  sed -n "$((started + 1)),${after}p" "$dir/audit.log" > "$work/audit-resident-due.log"
  grep -c "running post" "$work/resident-due.log" > "$work/resident-due.txt" || true
  "$KUBECTL" -n harvester-system delete upgrades.harvesterhci.io hvst-upgrade-due >/dev/null
}
