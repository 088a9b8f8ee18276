#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit + property tests, integration tests against a
# real kube-apiserver + etcd (hack/control-plane.sh), end-to-end tests of the image and the
# manifests as Jobs on a real node (hack/image.sh, hack/node.sh), failpoint tests, and the linters.
# Integration and e2e tests FAIL (never skip) if the control plane or the node cannot be built or
# started.
#
# Kubernetes versions (docs/testing.md, "Kubernetes versions"):
#   bash hack/test.sh                        everything on the default version, and the integration
#                                            suite again on each other version of $KUBE_VERSIONS
#                                            (default: v1.34.4 v1.35.4, what Harvester v1.7 and
#                                            v1.8 run; the newest, v1.37.2, by hand: the budget)
#   KUBE_VERSION=vX.Y.Z bash hack/test.sh    everything on that one version
# The upgrade tests run for each Kubernetes pair of $UPGRADE_PAIRS (FROM:TO, default
# "v1.33.13:v1.34.4 v1.34.4:v1.35.4": Harvester v1.6 → v1.7, path A, and v1.7 → v1.8, path C), on
# the same etcd, whatever the version under test. The last pair runs with the whole suite; the
# others run the upgrade tests (integration and reliability) again. UPGRADE_FROM and UPGRADE_TO,
# if both set, are the one pair.
#
# The tests with KubeVirt's own workload updater (tests/integration/updater.rs: the real
# virt-controller, hack/kubevirt.sh) run with the integration suite on the first of
# $KUBEVIRT_VERSIONS (default "v1.6.0 v1.7.0", Harvester v1.7's and v1.8's, the releases where
# the guard acts; v1.8.4, v1.9's, and v1.4.0, v1.5's, by hand, for the budget; the first's CRDs
# are every control plane's), then again on each other, but for the
# whole upgrade's drains (`updater::whole_upgrade`), which `hack/bench.sh upgrade` runs on each.
#
# On a bare Debian or Ubuntu machine it installs the packages it needs first (hack/setup.sh,
# hack/packages.txt) and checks the Rust and Go versions; each build says what it builds and
# how long it took.
#
# The end-to-end suites run beside the others (each waits mostly on its own processes); their
# output comes after the others'.
#
# A failure does not stop the run: every build, suite, version and pair runs (`cargo test
# --no-fail-fast`), each failing step and each failing test is collected, and the run ends by
# listing them all, with exit 1; exit 0 only when everything passed. Only a failed setup (the
# packages, Rust, Go) stops it at once.
#
# The figures of the run (each test binary's counts, each step's time, the end-to-end figures)
# go to target/test-run.md, so a run leaves the clone clean; WRITE_FIGURES=1 writes them to
# docs/figures/test-run.md instead, the copy the docs cite (commit it with the change it measured).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# What failed: one entry per failing step ("what (exit N)"), one per failing test ("  binary:
# test"), listed at the end.
failures=() failed_tests=()
# check WHAT CMD...: a step whose failure is recorded; the run goes on.
check() {
  local what="$1" code=0
  shift
  "$@" || code=$?
  (( code == 0 )) || failures+=("$what (exit $code)")
  return 0
}
# suite WHAT CMD...: a test command (cargo test ...), its output on the terminal and in $log; a
# failure is recorded with the failing tests of each test binary, and the run goes on.
suite() {
  local what="$1" code=0 start=$SECONDS
  shift
  "$@" 2>&1 | tee "$out" || code=$?
  suite_verdict "$what" "$code" "$start" "$out"
}
# suite_verdict WHAT EXIT_CODE START OUTPUT_FILE: the output added to $log, the step's time
# recorded, and a failure with its failing tests.
suite_verdict() {
  local what="$1" code="$2" line
  cat "$4" >> "$log"
  step_record "$((SECONDS - $3))" "$code" "$what"
  (( code == 0 )) && return 0
  failures+=("$what (exit $code)")
  # cargo's "     Running tests/x/main.rs (target/...)" names the binary; "test a::b ... FAILED"
  # its failing tests.
  while IFS= read -r line; do failed_tests+=("$what: $line"); done < <(awk '
    /^ +Running / { bin = $2 } /^ +Doc-tests / { bin = "doc-tests " $2 }
    /^test .* \.\.\. FAILED$/ { print bin ": " $2 }' "$4")
  return 0
}
# suite_beside WHAT CMD...: a test command run in the background, its output in a file of its
# own; suite_beside_wait then shows it and records its verdict as `suite` does.
suite_beside() {
  beside_what="$1" beside_start=$SECONDS beside_out="$(mktemp)"
  shift
  ( "$@" > "$beside_out" 2>&1 ) &
  beside_pid=$!
}
suite_beside_wait() {
  local code=0
  wait "$beside_pid" || code=$?
  echo "hack/test.sh: the output of '$beside_what' (run beside the suites above):"
  cat "$beside_out"
  suite_verdict "$beside_what" "$code" "$beside_start" "$beside_out"
  rm -f "$beside_out"
}

primary="${KUBE_VERSION:-$(bash hack/control-plane.sh default-version)}"
if [[ -n "${KUBE_VERSION:-}" ]]; then
  versions=("$KUBE_VERSION")
else
  # Spaces or newlines between versions (`hack/control-plane.sh versions` prints all of them).
  read -r -d '' -a versions <<<"${KUBE_VERSIONS:-v1.34.4 v1.35.4}" || true
fi
export KUBE_VERSION="$primary"
if [[ -n "${UPGRADE_FROM:-}" && -n "${UPGRADE_TO:-}" ]]; then
  pairs=("$UPGRADE_FROM:$UPGRADE_TO")
else
  read -r -d '' -a pairs <<<"${UPGRADE_PAIRS:-v1.33.13:v1.34.4 v1.34.4:v1.35.4}" || true
fi
upgrade_versions=()
for pair in "${pairs[@]}"; do
  [[ "$pair" =~ ^(v[0-9.]+):(v[0-9.]+)$ ]] || { echo "hack/test.sh: bad upgrade pair '$pair' (FROM:TO)" >&2; exit 1; }
  upgrade_versions+=("${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
done
# The whole suite runs with the last pair.
export UPGRADE_FROM="${upgrade_versions[-2]}" UPGRADE_TO="${upgrade_versions[-1]}"
# The versions the first suites need: the one under test and the last pair's; the others are
# built just before their own suite, so that a build running beside the first suites (.ci/run's,
# in the background) is not waited for before them.
first_versions=("$primary" "$UPGRADE_FROM" "$UPGRADE_TO")
# The KubeVirt versions whose real workload updater the updater tests run against
# (tests/integration/updater.rs, hack/kubevirt.sh): the first with the whole integration suite
# (its CRDs are every control plane's), the others after it, each built just before its suite.
read -r -d '' -a kubevirt_versions <<<"${KUBEVIRT_VERSIONS:-v1.6.0 v1.7.0}" || true
export KUBEVIRT_VERSION="${kubevirt_versions[0]}"
# `bash hack/test.sh kubevirt-versions`: those, one a line (.ci/run builds them).
if [[ "${1:-}" == kubevirt-versions ]]; then printf '%s\n' "${kubevirt_versions[@]}"; exit 0; fi
# `bash hack/test.sh versions first|later`: the Kubernetes versions it builds, one a line: those
# the first suites need (the one under test first), or the others (.ci/run builds these last).
if [[ "${1:-}" == versions ]]; then
  for v in "${first_versions[@]}" "${versions[@]}" "${upgrade_versions[@]}"; do
    if [[ " ${first_versions[*]} " == *" $v "* ]]; then [[ "${2:-}" != first ]] || echo "$v"
    else [[ "${2:-}" != later ]] || echo "$v"; fi
  done | awk '!seen[$0]++'
  exit 0
fi
# shellcheck source=hack/setup.sh
source hack/setup.sh
setup_install build node test || exit 1
setup_rust rustfmt clippy
log="$(mktemp)" out="$(mktemp)"
# A suite running beside (suite_beside) is waited for, whatever ends the run: no test process is
# left behind.
trap 'if [[ -n "${beside_pid:-}" ]] && kill -0 "$beside_pid" 2>/dev/null; then wait "$beside_pid"; fi; rm -f "$log" "$out" "${beside_out:-}"' EXIT

# Go, for whatever of these is not built yet.
builds=()
for v in "$primary" "${versions[@]}" "${upgrade_versions[@]}"; do builds+=("cp:$v"); done
for v in "${kubevirt_versions[@]}"; do builds+=("kubevirt:$v"); done
setup_go "${builds[@]}" "node:$primary" helm helm3 registry actionlint promtool cosign
# build_version V: Kubernetes V built (cached by version; hack/control-plane.sh waits for a build
# of V already running); a version that cannot be built is reported, and its suites fail too.
declare -A built=()
build_version() {
  [[ -z "${built[$1]:-}" ]] || return 0
  built[$1]=1
  check "building Kubernetes $1" step "building kube-apiserver, etcd and kubectl $1 (cached after the first build)" \
    env KUBE_VERSION="$1" bash hack/control-plane.sh build
}
# First what the end-to-end suites need, so that they start as early as can be: the version
# under test (the node's control plane), KubeVirt's CRDs (every control plane installs those of the
# first version), Helm 4 and 3, the registry, the node's binaries, the images and the previous
# release; the rest after they have started.
build_version "$primary"
# KubeVirt's virt-controller and CRDs.
declare -A kv_built=()
build_kubevirt() {
  [[ -z "${kv_built[$1]:-}" ]] || return 0
  kv_built[$1]=1
  check "building KubeVirt $1" step "building KubeVirt $1's virt-controller and CRDs (cached after the first build)" \
    bash hack/kubevirt.sh build "$1"
}
build_kubevirt "$KUBEVIRT_VERSION"
# Helm 4, which plays Fleet in the lifetime tests and installs the chart in the e2e tests, and
# Helm 3, which an e2e test installs, upgrades and uninstalls the chart with.
check "building Helm 4" step "building Helm 4 (cached after the first build)" bash hack/helm.sh build
check "building Helm 3" step "building Helm 3 (cached after the first build)" bash hack/helm.sh build 3
# The reference registry (CNCF distribution), which the e2e tests push the image to and the
# node pulls it from (tests/e2e_registry/registry.rs).
check "building the registry" step "building the registry (cached after the first build)" bash hack/registry.sh build
# The e2e node's kubelet, kube-controller-manager, kube-scheduler and kube-proxy (cached by
# version), and the images it runs (the guard's, built from the Dockerfile without a registry).
start=$SECONDS
check "building the node's binaries" step "building the node's binaries $primary (cached after the first build)" bash hack/node.sh build
check "building the images" step "building the images: the guard's, with failpoints, pause, kubectl (a release build, a debug one)" \
  bash hack/image.sh build --test-images
times=("node binaries and images: $((SECONDS - start)) s")
# The previous release's binary, image and chart (hack/previous-release), which the
# upgrade-in-place e2e tests install first: a debug build on the dependencies cargo test uses.
start=$SECONDS
check "building the previous release" step "building the previous release's image and chart (one debug build of the crate)" \
  bash hack/image.sh build --previous
times+=("the previous release's image and chart: $((SECONDS - start)) s")
# The end-to-end suites (the node, the registry) run beside all the others: they wait mostly on
# the kubelet and containerd, the others on their own API servers, so that the two share the 2
# cores instead of taking turns (the run is their sum otherwise), and they are the longest.
# cosign, which the signing test signs and verifies the pushed image with
# (tests/e2e_registry/signed.rs), is not built here: that test, one of the last, builds it or
# waits for the build under way (.ci/run's Go chain) or reuses it (hack/cosign.sh, its lock), so
# that no suite here waits for it.
rm -f target/e2e-figures.txt
suite_beside "e2e on $primary" cargo test --no-fail-fast --test e2e --test e2e_registry
# The first suites' other Kubernetes versions (the upgrade pair's), and promtool, which checks
# the chart's alerts and the guard's metrics (tests/integration/monitoring.rs).
for v in "${first_versions[@]}"; do build_version "$v"; done
check "building promtool" step "building promtool (cached after the first build)" bash hack/promtool.sh build
check "cargo fmt --check" step "cargo fmt --check" cargo fmt --check
check "cargo clippy" step "cargo clippy (builds the tests too)" cargo clippy --all-targets --all-features -- -D warnings
check "cargo doc" step "cargo doc (no broken or private links)" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib
start=$SECONDS
# Unit, property and integration tests with the production build of the binary; every test
# target but the end-to-end ones and reliability (its own run below, with failpoints).
suite "unit and integration on $primary" cargo test --no-fail-fast --lib --bins --test integration
times+=("unit and integration on $primary: $((SECONDS - start)) s")
# Fault tests need the test-only failpoints compiled in.
start=$SECONDS
suite "reliability on $primary" cargo test --no-fail-fast --features failpoints --test reliability -- --nocapture
times+=("reliability on $primary: $((SECONDS - start)) s")
# The tests with KubeVirt's real workload updater on each other KubeVirt version (the first ran
# with the integration suite), each built just before it; the versions side by side, and beside
# the integration suites on the other Kubernetes versions below, each output shown after all.
# They are not idle: one version's suite alone took 241 s and 198 CPU-s, 0.8 of a core (its API
# servers 104 CPU-s, virt-controller 29, etcd 15), so side by side they share the CPU; four
# tests at a time per version loaded the machine to 44 and made a bound fail: two, cargo's default
# here.
kv_start=$SECONDS
kv_runs=()
for v in "${kubevirt_versions[@]:1}"; do
  build_kubevirt "$v"
  kv_out="$(mktemp)"
  # The record's own counting of a failed migration and of a hot-plug (`updater::the_record_*`)
  # runs on the first version only: what it counts is the guard's, and the updater's part in it
  # (a hot-plug held until the restore) runs on each version in `a_pending_hotplug_*`. So does
  # the whole upgrade with its drains (`updater::whole_upgrade`, three nodes drained, guarded and
  # not: the heaviest tests), which `hack/bench.sh upgrade` runs on every version, its record
  # against its own count; each version's updater is held here by `pre` and by the resident guard.
  ( env KUBEVIRT_VERSION="$v" cargo test --no-fail-fast --test integration updater:: -- \
      --skip updater::the_record_ --skip updater::whole_upgrade:: > "$kv_out" 2>&1 ) &
  kv_runs+=("$!:$v:$kv_out")
done
# The integration suite on each other version (the upgrade test has its versions already), each
# built just before it: a build running beside (.ci/run's) has had every suite above to finish.
for v in "${versions[@]}"; do
  [[ "$v" != "$primary" ]] || continue
  start=$SECONDS
  build_version "$v"
  echo "hack/test.sh: the integration suite on Kubernetes $v"
  suite "integration on $v" env KUBE_VERSION="$v" cargo test --no-fail-fast --test integration -- --skip upgrade:: --skip updater::
  times+=("integration on $v (its build, if not cached, included): $((SECONDS - start)) s")
done
# The upgrade tests again for each other Kubernetes pair (the last ran above).
for pair in "${pairs[@]:0:${#pairs[@]}-1}"; do
  start=$SECONDS
  build_version "${pair%%:*}"
  build_version "${pair##*:}"
  echo "hack/test.sh: the upgrade tests from Kubernetes ${pair%%:*} to ${pair##*:}"
  suite "upgrade tests $pair" env UPGRADE_FROM="${pair%%:*}" UPGRADE_TO="${pair##*:}" \
    cargo test --no-fail-fast --test integration upgrade::
  suite "reliability upgrade test $pair" env UPGRADE_FROM="${pair%%:*}" UPGRADE_TO="${pair##*:}" \
    cargo test --no-fail-fast --features failpoints --test reliability a_killed_pre_an_api_server_upgrade
  times+=("upgrade tests ${pair%%:*} to ${pair##*:} (builds, if not cached, included): $((SECONDS - start)) s")
done
for run in "${kv_runs[@]}"; do
  IFS=: read -r kv_pid v kv_out <<<"$run"
  code=0
  wait "$kv_pid" || code=$?
  echo "hack/test.sh: the tests with KubeVirt $v's workload updater:"
  cat "$kv_out"
  suite_verdict "the real KubeVirt updater $v" "$code" "$kv_start" "$kv_out"
  rm -f "$kv_out"
done
times+=("the real KubeVirt updater on ${kubevirt_versions[*]:1}, side by side and beside the suites above (builds, if not cached, included): $((SECONDS - kv_start)) s")
start=$SECONDS
suite_beside_wait
times+=("e2e on $primary, beside the above: waited for $((SECONDS - start)) s after them")
# The e2e tests' figures: node start, Job and bare-pod times.
if [[ -f target/e2e-figures.txt ]]; then
  while IFS= read -r line; do times+=("e2e: $line"); done < target/e2e-figures.txt
fi

# A control plane (or a node) that cannot start fails every test of the binary at once with the
# script's message, instead of one start-up timeout per test.
# expect_fail_fast WHAT MIN_FAILED CARGO_TEST_ARGS...
expect_fail_fast() {
  local what="$1" min="$2" out failed messages start=$SECONDS
  shift 2
  out="$(KUBE_VERSION=v0.0.0 cargo test "$@" 2>&1)" && {
    echo "hack/test.sh: the tests passed without a $what" >&2
    failures+=("without a $what: the tests passed"); return 0; }
  failed="$(sed -n 's/^test result: FAILED\. [0-9]* passed; \([0-9]*\) failed.*/\1/p' <<<"$out")"
  messages="$(grep -c "ERROR: KUBE_VERSION must look like" <<<"$out" || true)"
  if (( SECONDS - start > 60 )) || [[ -z "$failed" ]] || (( failed < min || messages < failed )); then
    echo "$out" | tail -40 >&2
    echo "hack/test.sh: without a $what, expected every test to fail at once with the script's" \
      "message; got $failed failed, $messages messages, $((SECONDS - start)) s" >&2
    failures+=("without a $what: expected every test to fail at once; got ${failed:-no} failed, $messages messages, $((SECONDS - start)) s")
    return 0
  fi
  times+=("without a $what: $failed tests failed in $((SECONDS - start)) s")
}
expect_fail_fast "control plane" 10 --test integration -- --skip upgrade:: --skip updater::
expect_fail_fast node 14 --test e2e

check "hack/lint.sh" step "hack/lint.sh" bash hack/lint.sh

printf 'hack/test.sh: %s\n' "${times[@]}"
echo "hack/test.sh: ${SECONDS} s"
# One closing line over every cargo test binary above.
total="$(awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed", p, f }' "$log")"
echo "$total"
# The figures of this run: target/test-run.md (the clone stays clean), or with WRITE_FIGURES=1
# docs/figures/test-run.md, the copy docs/testing.md cites.
if [[ "${WRITE_FIGURES:-}" == 1 ]]; then figures=docs/figures/test-run.md; else figures=target/test-run.md; fi
mkdir -p "$(dirname "$figures")"
{
  echo "# The last full run of \`bash hack/test.sh\`"
  echo
  echo "Written by \`hack/test.sh\` at the end of its run (to docs/figures/ with WRITE_FIGURES=1); do not edit by hand."
  echo
  echo "- when: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "- machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), Linux $(uname -r), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- Kubernetes $primary (integration also on: ${versions[*]}); upgrade tests ${pairs[*]}; KubeVirt's real updater: ${kubevirt_versions[*]}"
  echo "- $total in ${SECONDS} s"
  echo
  echo "Per test binary (in the order run):"
  echo
  grep -E '^     Running |^test result:' "$log" | sed -E 's/^ +Running (.*) \(.*/\1/' |
    awk '/^test result:/ { print "- " name ": " $4 " passed, " $6 " failed (" $NF ")"; next } { name = $0 }'
  echo
  echo "Steps and the end-to-end figures (milliseconds unless a unit is given):"
  echo
  printf -- '- %s\n' "${times[@]}"
  if (( ${#failures[@]} )); then
    echo
    echo "What failed:"
    echo
    printf -- '- %s\n' "${failures[@]}" "${failed_tests[@]}"
  fi
} > "$figures"
echo "hack/test.sh: the figures of this run: $figures"

# Every failure of the run, then the verdict: exit 1 if anything failed.
if (( ${#failures[@]} )); then
  echo
  echo "hack/test.sh: FAILED: ${#failures[@]} step(s) and ${#failed_tests[@]} test(s):"
  printf '  %s\n' "${failures[@]}"
  if (( ${#failed_tests[@]} )); then
    echo "the failing tests (suite: binary: test):"
    printf '  %s\n' "${failed_tests[@]}"
  fi
  exit 1
fi
echo "hack/test.sh: everything passed"
