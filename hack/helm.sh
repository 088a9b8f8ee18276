#!/usr/bin/env bash
# Real Helm 4 (it applies server-side, as Fleet's Helm SDK does), built from the Go module proxy.
#
#   hack/helm.sh build    build (or reuse) the pinned helm CLI
#   hack/helm.sh path     print the cached binary's path
#
# Environment:
#   HELM_VERSION   helm.sh/helm/v4 release (default v4.3.1)
#   CP_CACHE_DIR   cache root, shared with hack/control-plane.sh
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v4.3.1}"
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
BIN="$CACHE_ROOT/helm-$HELM_VERSION/bin/helm"

die() { echo "helm: ERROR: $*" >&2; exit 1; }

built() { [[ -x "$BIN" ]] && "$BIN" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; }

build() {
  cached helm "$(dirname "$BIN")" built && return 0
  need_go "build helm"
  local start=$SECONDS
  GOBIN="$(dirname "$BIN")" GOTOOLCHAIN=local CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" || die "building helm $HELM_VERSION failed"
  "$BIN" version --short | grep -q "^$HELM_VERSION" \
    || die "$BIN reports $("$BIN" version --short), not $HELM_VERSION"
  echo "helm: built $HELM_VERSION in $((SECONDS - start))s" >&2
}

case "${1:-}" in
  build) build ;;
  path) echo "$BIN" ;;
  *) echo "usage: hack/helm.sh build|path" >&2; exit 2 ;;
esac
