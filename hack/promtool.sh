#!/usr/bin/env bash
# Prometheus's promtool (check rules, test rules, check metrics) and the prometheus-operator's
# monitoring CRDs (ServiceMonitor, PrometheusRule), both from the Go module proxy, for the
# monitoring tests (tests/integration/monitoring.rs) and CI.
#
#   hack/promtool.sh build    build (or reuse) the pinned promtool
#   hack/promtool.sh path     print the cached binary's path
#   hack/promtool.sh crds     print a directory holding the monitoring CRDs (downloaded once)
#
# Environment:
#   PROMETHEUS_VERSION           github.com/prometheus/prometheus module version (default v0.316.0)
#   PROMETHEUS_OPERATOR_VERSION  github.com/prometheus-operator/prometheus-operator (default v0.85.0)
#   CP_CACHE_DIR                 cache root, shared with hack/control-plane.sh and hack/helm.sh
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
BIN="$CACHE_ROOT/promtool-$PROMETHEUS_VERSION/bin/promtool"

die() { echo "promtool: ERROR: $*" >&2; exit 1; }

built() { [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; }

build() {
  cached promtool "$(dirname "$BIN")" built && return 0
  need_go "build promtool"
  local start=$SECONDS
  # The version is in the cache path; -X only makes `promtool --version` say it too.
  # remove_all_sd (Prometheus's own build tag, plugins/plugin_*.go): without the cloud service
  # discoveries (AWS, Azure, GCE, ...), which the rules' and metrics' checks do not use, and
  # whose SDKs were most of the build.
  GOBIN="$(dirname "$BIN")" GOTOOLCHAIN=local CGO_ENABLED=0 go install "${GO_BUILD_FLAGS[@]}" -tags remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION" \
    || die "building promtool $PROMETHEUS_VERSION failed"
  "$BIN" --version >/dev/null 2>&1 || die "$BIN does not run"
  echo "promtool: built $PROMETHEUS_VERSION in $((SECONDS - start))s" >&2
}

# The CRDs as the operator's release ships them (example/prometheus-operator-crd/), from the
# module cache: `go mod download` prints where it unpacked the module.
crds() {
  need_go "download the monitoring CRDs"
  local dir
  dir="$(cd "${TMPDIR:-/tmp}" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')" \
    || die "downloading prometheus-operator $PROMETHEUS_OPERATOR_VERSION failed"
  [[ -n "$dir" && -d "$dir/example/prometheus-operator-crd" ]] \
    || die "prometheus-operator $PROMETHEUS_OPERATOR_VERSION: no example/prometheus-operator-crd in '$dir'"
  echo "$dir/example/prometheus-operator-crd"
}

case "${1:-}" in
  build) build ;;
  path) echo "$BIN" ;;
  crds) crds ;;
  *) echo "usage: hack/promtool.sh build|path|crds" >&2; exit 2 ;;
esac
