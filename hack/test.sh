#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit + property tests, integration tests against a
# real kube-apiserver + etcd (hack/control-plane.sh), failpoint tests, and the manifest linters.
# Integration tests FAIL (never skip) if the control plane cannot be built or started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

bash hack/control-plane.sh build
cargo fmt --check
cargo clippy --all-targets --all-features -- -D warnings
# Unit, property and integration tests with the production build of the binary.
cargo test --all-targets 2>&1 | tee -a "$log"
# Fault tests need the test-only failpoints compiled in.
cargo test --features failpoints --test reliability -- --nocapture 2>&1 | tee -a "$log"
bash hack/lint.sh

echo "hack/test.sh: ${SECONDS} s"
# One closing line over every cargo test binary above.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
