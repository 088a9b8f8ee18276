# shellcheck shell=bash
# What the guard saves in a whole upgrade, drains included, sourced by hack/bench.sh
# (`bash hack/bench.sh upgrade`): for each version of BENCH_KUBEVIRT (default: every version the
# updater tests pass on) and each count of BENCH_UPGRADE_VMS (default "12 60") on 3 nodes, the
# integration tests of tests/integration/updater/whole_upgrade.rs, one at a time (KubeVirt's own
# virt-controller decides every migration; the nodes' part is played, 1 s a migration):
#   - guarded: the resident guard through a path-A upgrade and its node upgrades;
#   - control: nothing suspended (the guard records only: the Upgrade's migrations accepted), the
#     wave over before the first drain;
#   - wave-and-drains: no guard, the drains begun while the wave runs.
# Their lines "whole upgrade vX CASE: ..." (with the guard's record of the guarded and control
# upgrades beside the test's own count) go to WORK/upgrade.txt, for
# hack/bench/upgrade_report.py, which prints the figures and checks the targets. Not in --quick:
# CI runs the same tests with 6 VMIs (hack/test.sh, on each version), gating their counts.
# Needs: REPO_ROOT, work; real_home if HOME was changed.
# shellcheck disable=SC2154 # those are hack/bench.sh's, which sources this file

UPGRADE_TESTS=(updater::whole_upgrade::)

upgrade_run() {
  local v n log
  : > "$work/upgrade.txt"
  for v in ${BENCH_KUBEVIRT-v1.6.0 v1.7.0 v1.8.4 v1.4.0}; do
    HOME="${real_home:-$HOME}" bash "$REPO_ROOT/hack/kubevirt.sh" build "$v"
    for n in ${BENCH_UPGRADE_VMS-12 60}; do
      log="$work/upgrade-$v-$n.log"
      echo "bench: the whole upgrade with KubeVirt $v, $n VMIs on 3 nodes: guarded, control, wave-and-drains" >&2
      HOME="${real_home:-$HOME}" KUBEVIRT_VERSION="$v" WHOLE_UPGRADE_VMS="$n" cargo test --quiet --test integration -- \
        "${UPGRADE_TESTS[@]}" --nocapture --test-threads=1 > "$log" 2>&1 \
        || { mkdir -p "$REPO_ROOT/target/bench"; cp "$log" "$REPO_ROOT/target/bench/"
             echo "bench: the whole-upgrade tests on KubeVirt $v with $n VMIs failed (whole log: target/bench/$(basename "$log")):" >&2
             grep -v '"component"' "$log" | grep -A12 'panicked' | head -60 >&2; exit 1; }
      grep -E '^whole upgrade v' "$log" >> "$work/upgrade.txt" || true
    done
  done
}

upgrade_figures() {
  local rc=0
  python3 "$REPO_ROOT/hack/bench/upgrade_report.py" "$work/upgrade.txt" > "$work/upgrade-report.txt" || rc=$?
  cat "$work/upgrade-report.txt"
  mkdir -p "$FIGURES"
  {
    echo "# The last run of the whole upgrade, drains included (\`bash hack/bench.sh upgrade\`)"
    echo
    echo "Written by \`hack/bench.sh upgrade\`; do not edit by hand. $(nproc) cores; $(date -u +%Y-%m-%dT%H:%M:%SZ),"
    echo "commit $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown); load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Each migration takes 1 s on the modelled nodes: the counts are KubeVirt's, the seconds the machine's."
    echo
    cat "$work/upgrade-report.txt"
  } > "$FIGURES/bench-upgrade.md"
  return "$rc"
}
