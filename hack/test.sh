#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit + property tests, integration tests against a
# real kube-apiserver + etcd (hack/control-plane.sh), end-to-end tests of the image and the
# manifests as Jobs on a real node (hack/image.sh, hack/node.sh), failpoint tests, and the linters.
# Integration and e2e tests FAIL (never skip) if the control plane or the node cannot be built or
# started.
#
# Kubernetes versions (README "Kubernetes versions"):
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
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=hack/setup.sh
source hack/setup.sh
setup_install build node test || exit 1
setup_rust rustfmt clippy
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

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

# Go, for whatever of these is not built yet.
builds=()
for v in "$primary" "${versions[@]}" "${upgrade_versions[@]}"; do builds+=("cp:$v"); done
setup_go "${builds[@]}" "node:$primary" helm
# Every version first (each cached by version), so that a version that cannot be built fails here.
declare -A built=()
for v in "$primary" "${versions[@]}" "${upgrade_versions[@]}"; do
  [[ -z "${built[$v]:-}" ]] || continue
  built[$v]=1
  step "building kube-apiserver, etcd and kubectl $v (cached after the first build)" \
    env KUBE_VERSION="$v" bash hack/control-plane.sh build
done
# Helm 4, which plays Fleet in the lifetime tests.
step "building Helm 4 (cached after the first build)" bash hack/helm.sh build
# The e2e node's kubelet, kube-controller-manager, kube-scheduler and kube-proxy (cached by
# version), and the images it runs (the guard's, built from the Dockerfile without a registry).
start=$SECONDS
step "building the node's binaries $primary (cached after the first build)" bash hack/node.sh build
step "building the images: the guard's, with failpoints, pause, kubectl (two release builds)" \
  bash hack/image.sh build
times=("node binaries and images: $((SECONDS - start)) s")
step "cargo fmt --check" cargo fmt --check
step "cargo clippy (builds the tests too)" cargo clippy --all-targets --all-features -- -D warnings
# Unit, property, integration and e2e tests with the production build of the binary.
start=$SECONDS
rm -f target/e2e-figures.txt
cargo test --all-targets 2>&1 | tee -a "$log"
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
  KUBE_VERSION="$v" cargo test --test integration -- --skip upgrade:: 2>&1 | tee -a "$log"
  times+=("integration on $v: $((SECONDS - start)) s")
done
# Fault tests need the test-only failpoints compiled in.
start=$SECONDS
cargo test --features failpoints --test reliability -- --nocapture 2>&1 | tee -a "$log"
times+=("reliability on $primary: $((SECONDS - start)) s")
# The upgrade tests again for each other Kubernetes pair (the last ran above).
for pair in "${pairs[@]:0:${#pairs[@]}-1}"; do
  start=$SECONDS
  echo "hack/test.sh: the upgrade tests from Kubernetes ${pair%%:*} to ${pair##*:}"
  UPGRADE_FROM="${pair%%:*}" UPGRADE_TO="${pair##*:}" \
    cargo test --test integration upgrade:: 2>&1 | tee -a "$log"
  UPGRADE_FROM="${pair%%:*}" UPGRADE_TO="${pair##*:}" \
    cargo test --features failpoints --test reliability a_killed_pre_an_api_server_upgrade 2>&1 | tee -a "$log"
  times+=("upgrade tests ${pair%%:*} to ${pair##*:}: $((SECONDS - start)) s")
done

# A control plane (or a node) that cannot start fails every test of the binary at once with the
# script's message, instead of one start-up timeout per test.
# expect_fail_fast WHAT MIN_FAILED CARGO_TEST_ARGS...
expect_fail_fast() {
  local what="$1" min="$2" out failed messages start=$SECONDS
  shift 2
  out="$(KUBE_VERSION=v0.0.0 cargo test "$@" 2>&1)" && {
    echo "hack/test.sh: the tests passed without a $what" >&2; exit 1; }
  failed="$(sed -n 's/^test result: FAILED\. [0-9]* passed; \([0-9]*\) failed.*/\1/p' <<<"$out")"
  messages="$(grep -c "ERROR: KUBE_VERSION must look like" <<<"$out" || true)"
  if (( SECONDS - start > 60 )) || [[ -z "$failed" ]] || (( failed < min || messages < failed )); then
    echo "$out" | tail -40 >&2
    echo "hack/test.sh: without a $what, expected every test to fail at once with the script's" \
      "message; got $failed failed, $messages messages, $((SECONDS - start)) s" >&2
    exit 1
  fi
  times+=("without a $what: $failed tests failed in $((SECONDS - start)) s")
}
expect_fail_fast "control plane" 10 --test integration -- --skip upgrade::
expect_fail_fast node 14 --test e2e

bash hack/lint.sh

printf 'hack/test.sh: %s\n' "${times[@]}"
echo "hack/test.sh: ${SECONDS} s"
# One closing line over every cargo test binary above.
total="$(awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed", p, f }' "$log")"
echo "$total"
# The figures of this run, in the one place the docs point to (docs/testing.md): refreshed by
# every full run, so commit it with the change it measured.
mkdir -p docs/figures
{
  echo "# The last full run of \`bash hack/test.sh\`"
  echo
  echo "Written by \`hack/test.sh\` at the end of its run; do not edit by hand."
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
} > docs/figures/test-run.md
