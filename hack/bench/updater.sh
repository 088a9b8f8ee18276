# shellcheck shell=bash
# The real workload updater's timings (KubeVirt's own virt-controller, hack/kubevirt.sh), sourced
# by hack/bench.sh: for each version of BENCH_KUBEVIRT (default: every version the updater tests
# pass on, "v1.6.0 v1.7.0 v1.8.4"), the two integration tests that time it
# (tests/integration/updater.rs, on a control plane of their own each, one at a time so that
# neither slows the other):
#   - the control, without the guard: from KubeVirt's upgrade (virt-controller restarted with a
#     new launcher image, the CR's rollout Deployed) to its first workload-update migration;
#   - the Jobs: from `post` (the restore, after 30 s of holding every VMI outdated) to the first
#     migration of the wave.
# Their lines "updater vX: ..." go to WORK/updater.txt, for hack/bench/updater_report.py. Not in
# --quick: CI runs these tests anyway (hack/test.sh, on each version).
# Needs: REPO_ROOT, work; real_home if HOME was changed (the bench's kubectl cache).
# shellcheck disable=SC2154 # those are hack/bench.sh's, which sources this file

UPDATER_TESTS=(updater::without_the_guard updater::pre_holds)

updater_run() {
  local v log
  : > "$work/updater.txt"
  for v in ${BENCH_KUBEVIRT-v1.6.0 v1.7.0 v1.8.4}; do
    # Cached after the first build (about 5 minutes on 2 cores), in the real HOME's cache (the
    # bench points HOME elsewhere for kubectl's discovery cache).
    HOME="${real_home:-$HOME}" bash "$REPO_ROOT/hack/kubevirt.sh" build "$v"
    log="$work/updater-$v.log"
    echo "bench: the real updater of KubeVirt $v: ${UPDATER_TESTS[*]} (about 2 minutes)" >&2
    HOME="${real_home:-$HOME}" KUBEVIRT_VERSION="$v" cargo test --quiet --test integration -- \
      "${UPDATER_TESTS[@]}" --nocapture --test-threads=1 > "$log" 2>&1 \
      || { echo "bench: the updater tests on KubeVirt $v failed:" >&2; tail -40 "$log" >&2; exit 1; }
    grep -E '^updater v' "$log" >> "$work/updater.txt" || true
  done
}
