#!/usr/bin/env bash
# Real Helm, built from the Go module proxy: Helm 4 by default (it applies server-side, as Fleet's
# Helm SDK does), or with `3` the pinned Helm 3 (operators' own helm, and the add-on's
# helm-controller, are often 3.x; an e2e test installs, upgrades and uninstalls the chart with it).
#
#   hack/helm.sh build [3]    build (or reuse) the pinned helm CLI
#   hack/helm.sh path [3]     print the cached binary's path
#
# Environment:
#   HELM_VERSION   helm.sh/helm/v4 (or /v3) release, without `3` (default: Helm 4's pin)
#   CP_CACHE_DIR   cache root, shared with hack/control-plane.sh
set -euo pipefail

# The pins: the one home of both versions.
HELM4=v4.3.1 HELM3=v3.22.0
case "${2:-}" in
  "") HELM_VERSION="${HELM_VERSION:-$HELM4}" ;;
  3) HELM_VERSION="$HELM3" ;;
  *) echo "usage: hack/helm.sh build|path [3]" >&2; exit 2 ;;
esac
# The module's major version: helm.sh/helm/v4, helm.sh/helm/v3.
MAJOR="${HELM_VERSION%%.*}"
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
BIN="$CACHE_ROOT/helm-$HELM_VERSION/bin/helm"

die() { echo "helm: ERROR: $*" >&2; exit 1; }

built() { [[ -x "$BIN" ]] && "$BIN" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; }

build() {
  cached helm "$(dirname "$BIN")" built && return 0
  need_go "build helm"
  local start=$SECONDS
  GOBIN="$(dirname "$BIN")" GOTOOLCHAIN=local CGO_ENABLED=0 go install "${GO_BUILD_FLAGS[@]}" \
    -ldflags "-s -w -X helm.sh/helm/$MAJOR/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/$MAJOR/cmd/helm@$HELM_VERSION" || die "building helm $HELM_VERSION failed"
  "$BIN" version --short | grep -q "^$HELM_VERSION" \
    || die "$BIN reports $("$BIN" version --short), not $HELM_VERSION"
  echo "helm: built $HELM_VERSION in $((SECONDS - start))s" >&2
}

case "${1:-}" in
  build) build ;;
  path) echo "$BIN" ;;
  *) echo "usage: hack/helm.sh build|path [3]" >&2; exit 2 ;;
esac
