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
CACHE_ROOT="${CP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workload-update-guard/control-plane}"
BIN="$CACHE_ROOT/helm-$HELM_VERSION/bin/helm"

die() { echo "helm: ERROR: $*" >&2; exit 1; }

built() { [[ -x "$BIN" ]] && "$BIN" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; }

build() {
  if built; then echo "helm: reusing $BIN" >&2; return 0; fi
  mkdir -p "$(dirname "$BIN")"
  # One build at a time: .ci/run builds in the background what hack/test.sh then asks for.
  exec 9>"$(dirname "$BIN")/build.lock"
  flock 9
  if built; then echo "helm: reusing $BIN (built meanwhile)" >&2; return 0; fi
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null || die "go is required to build helm"
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
