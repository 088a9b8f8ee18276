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
# The upgrade tests go from $UPGRADE_FROM to $UPGRADE_TO (default v1.34.4 to v1.35.4) whatever
# the version under test.
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
export UPGRADE_FROM="${UPGRADE_FROM:-v1.34.4}" UPGRADE_TO="${UPGRADE_TO:-v1.35.4}"

# Go, for whatever of these is not built yet.
builds=()
for v in "$primary" "${versions[@]}" "$UPGRADE_FROM" "$UPGRADE_TO"; do builds+=("cp:$v"); done
setup_go "${builds[@]}" "node:$primary" helm
# Every version first (each cached by version), so that a version that cannot be built fails here.
declare -A built=()
for v in "$primary" "${versions[@]}" "$UPGRADE_FROM" "$UPGRADE_TO"; do
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
  echo "- Kubernetes $primary (integration also on: ${versions[*]}); upgrade tests $UPGRADE_FROM to $UPGRADE_TO"
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
