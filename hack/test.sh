#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit + property tests, integration tests against a
# real kube-apiserver + etcd (hack/control-plane.sh), failpoint tests, and the manifest linters.
# Integration tests FAIL (never skip) if the control plane cannot be built or started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash hack/control-plane.sh build
cargo fmt --check
cargo clippy --all-targets --all-features -- -D warnings
# Unit, property and integration tests with the production build of the binary.
cargo test --all-targets
# Fault tests need the test-only failpoints compiled in.
cargo test --features failpoints --test reliability
bash hack/lint.sh
