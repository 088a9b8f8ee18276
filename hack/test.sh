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
#                                            (default: v1.34.4 v1.35.4 v1.37.2)
#   KUBE_VERSION=vX.Y.Z bash hack/test.sh    everything on that one version
# The upgrade tests run for each Kubernetes pair of $UPGRADE_PAIRS (FROM:TO, default
# "v1.33.13:v1.34.4 v1.34.4:v1.35.4": Harvester v1.6 → v1.7, path A, and v1.7 → v1.8, path C), on
# the same etcd, whatever the version under test. The last pair runs with the whole suite; the
# others run the upgrade tests (integration and reliability) again. UPGRADE_FROM and UPGRADE_TO,
# if both set, are the one pair.
#
# On a bare Debian or Ubuntu machine it installs the packages it needs first (hack/setup.sh,
# hack/packages.txt) and checks the Rust and Go versions; each build says what it builds and
# how long it took.
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
  local what="$1" code=0 line start=$SECONDS
  shift
  "$@" 2>&1 | tee "$out" || code=$?
  cat "$out" >> "$log"
  step_record "$((SECONDS - start))" "$code" "$what"
  (( code == 0 )) && return 0
  failures+=("$what (exit $code)")
  # cargo's "     Running tests/x/main.rs (target/...)" names the binary; "test a::b ... FAILED"
  # its failing tests.
  while IFS= read -r line; do failed_tests+=("$what: $line"); done < <(awk '
    /^ +Running / { bin = $2 } /^ +Doc-tests / { bin = "doc-tests " $2 }
    /^test .* \.\.\. FAILED$/ { print bin ": " $2 }' "$out")
  return 0
}

primary="${KUBE_VERSION:-$(bash hack/control-plane.sh default-version)}"
if [[ -n "${KUBE_VERSION:-}" ]]; then
  versions=("$KUBE_VERSION")
else
  # Spaces or newlines between versions (`hack/control-plane.sh versions` prints all of them).
  read -r -d '' -a versions <<<"${KUBE_VERSIONS:-v1.34.4 v1.35.4 v1.37.2}" || true
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
# `bash hack/test.sh versions`: the Kubernetes versions it builds, the one under test first, one a
# line (.ci/run builds them ahead, beside the Rust builds).
if [[ "${1:-}" == versions ]]; then
  printf '%s\n' "$primary" "${versions[@]}" "${upgrade_versions[@]}" | awk '!seen[$0]++'
  exit 0
fi
# shellcheck source=hack/setup.sh
source hack/setup.sh
setup_install build node test || exit 1
setup_rust rustfmt clippy
log="$(mktemp)" out="$(mktemp)"
trap 'rm -f "$log" "$out"' EXIT

# Go, for whatever of these is not built yet.
builds=()
for v in "$primary" "${versions[@]}" "${upgrade_versions[@]}"; do builds+=("cp:$v"); done
setup_go "${builds[@]}" "node:$primary" helm registry actionlint promtool
# Every version first (each cached by version): a version that cannot be built is reported here,
# and its suites fail later, each reported too.
declare -A built=()
for v in "$primary" "${versions[@]}" "${upgrade_versions[@]}"; do
  [[ -z "${built[$v]:-}" ]] || continue
  built[$v]=1
  check "building Kubernetes $v" step "building kube-apiserver, etcd and kubectl $v (cached after the first build)" \
    env KUBE_VERSION="$v" bash hack/control-plane.sh build
done
# Helm 4, which plays Fleet in the lifetime tests.
check "building Helm 4" step "building Helm 4 (cached after the first build)" bash hack/helm.sh build
# promtool, which checks the chart's alerts and the guard's metrics (tests/integration/monitoring.rs).
check "building promtool" step "building promtool (cached after the first build)" bash hack/promtool.sh build
# The reference registry (CNCF distribution), which the e2e tests push the image to and the
# node pulls it from (tests/e2e_registry/registry.rs).
check "building the registry" step "building the registry (cached after the first build)" bash hack/registry.sh build
# The e2e node's kubelet, kube-controller-manager, kube-scheduler and kube-proxy (cached by
# version), and the images it runs (the guard's, built from the Dockerfile without a registry).
start=$SECONDS
check "building the node's binaries" step "building the node's binaries $primary (cached after the first build)" bash hack/node.sh build
check "building the images" step "building the images: the guard's, with failpoints, pause, kubectl (two release builds)" \
  bash hack/image.sh build --test-images
times=("node binaries and images: $((SECONDS - start)) s")
# The previous release's binary, image and chart (hack/previous-release), which the
# upgrade-in-place e2e tests install first: a debug build on the dependencies cargo test uses.
start=$SECONDS
check "building the previous release" step "building the previous release's image and chart (one debug build of the crate)" \
  bash hack/image.sh build --previous
times+=("the previous release's image and chart: $((SECONDS - start)) s")
check "cargo fmt --check" step "cargo fmt --check" cargo fmt --check
check "cargo clippy" step "cargo clippy (builds the tests too)" cargo clippy --all-targets --all-features -- -D warnings
# Unit, property, integration and e2e tests with the production build of the binary.
start=$SECONDS
rm -f target/e2e-figures.txt
suite "all targets on $primary" cargo test --no-fail-fast --all-targets
times+=("all targets (e2e included) on $primary: $((SECONDS - start)) s")
# The e2e tests' figures: node start, Job and bare-pod times.
if [[ -f target/e2e-figures.txt ]]; then
  while IFS= read -r line; do times+=("e2e: $line"); done < target/e2e-figures.txt
fi
# The integration suite on each other version (the upgrade test has its versions already).
for v in "${versions[@]}"; do
  [[ "$v" != "$primary" ]] || continue
  start=$SECONDS
  echo "hack/test.sh: the integration suite on Kubernetes $v"
  suite "integration on $v" env KUBE_VERSION="$v" cargo test --no-fail-fast --test integration -- --skip upgrade::
  times+=("integration on $v: $((SECONDS - start)) s")
done
# Fault tests need the test-only failpoints compiled in.
start=$SECONDS
suite "reliability on $primary" cargo test --no-fail-fast --features failpoints --test reliability -- --nocapture
times+=("reliability on $primary: $((SECONDS - start)) s")
# The upgrade tests again for each other Kubernetes pair (the last ran above).
for pair in "${pairs[@]:0:${#pairs[@]}-1}"; do
  start=$SECONDS
  echo "hack/test.sh: the upgrade tests from Kubernetes ${pair%%:*} to ${pair##*:}"
  suite "upgrade tests $pair" env UPGRADE_FROM="${pair%%:*}" UPGRADE_TO="${pair##*:}" \
    cargo test --no-fail-fast --test integration upgrade::
  suite "reliability upgrade test $pair" env UPGRADE_FROM="${pair%%:*}" UPGRADE_TO="${pair##*:}" \
    cargo test --no-fail-fast --features failpoints --test reliability a_killed_pre_an_api_server_upgrade
  times+=("upgrade tests ${pair%%:*} to ${pair##*:}: $((SECONDS - start)) s")
done

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
expect_fail_fast "control plane" 10 --test integration -- --skip upgrade::
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
  echo "- Kubernetes $primary (integration also on: ${versions[*]}); upgrade tests ${pairs[*]}"
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
