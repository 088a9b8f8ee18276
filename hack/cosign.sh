#!/usr/bin/env bash
# Sigstore's cosign, from its Go module proxy like hack/promtool.sh builds promtool: what an
# operator verifies the release's image with (docs/chart.md, "Verifying the image"), and what the
# signing test (tests/e2e_registry/signed.rs) signs and verifies with, against the tests' registry.
#
#   hack/cosign.sh build    build (or reuse) the pinned cosign
#   hack/cosign.sh path     print the cached binary's path
#
# Environment:
#   COSIGN_VERSION   github.com/sigstore/cosign/v3 module version (default v3.1.3)
#   CP_CACHE_DIR     cache root, shared with hack/control-plane.sh and hack/promtool.sh
set -euo pipefail

COSIGN_VERSION="${COSIGN_VERSION:-v3.1.3}"
MODULE=github.com/sigstore/cosign/v3
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
BIN="$CACHE_ROOT/cosign-$COSIGN_VERSION/bin/cosign"

die() { echo "cosign: ERROR: $*" >&2; exit 1; }

# `cosign version` prints "GitVersion:    v3.1.3" (sigs.k8s.io/release-utils/version), stamped below.
built() { [[ -x "$BIN" ]] && "$BIN" version 2>/dev/null | grep -q "^GitVersion: *$COSIGN_VERSION\$"; }

build() {
  cached cosign "$(dirname "$BIN")" built && return 0
  need_go "build cosign"
  local start=$SECONDS src
  src="$(dirname "$BIN")/src"
  rm -rf "$src"
  mkdir -p "$src"
  # cmd/cosign/main.go of this version (github.com/sigstore/cosign, tag v3.1.3) without its four
  # KMS providers (AWS, Azure, GCP, Vault: `--key awskms://...`), which no test and no documented
  # command uses and whose SDKs are a good part of the build; the same commands otherwise. Its
  # rewrite of single-dash flags (internal/ui's warning, not importable from here) is left out:
  # nothing here spells a flag with one dash.
  cat > "$src/main.go" <<GO
package main

import (
	"errors"
	"log"
	"os"

	"$MODULE/cmd/cosign/cli"
	cosignError "$MODULE/cmd/cosign/errors"
)

func main() {
	if err := cli.New().Execute(); err != nil {
		var cosignError *cosignError.CosignError
		if errors.As(err, &cosignError) {
			log.Printf("error during command execution: %v", err)
			os.Exit(cosignError.ExitCode())
		}
		log.Fatalf("error during command execution: %v", err)
	}
}
GO
  (
    cd "$src" || exit 1
    export GOTOOLCHAIN=local CGO_ENABLED=0
    go mod init wug-cosign 2>/dev/null || exit 1
    go mod edit "-require=$MODULE@$COSIGN_VERSION" || exit 1
    go mod tidy || exit 1
    # The version stamp as cosign's Makefile sets it (LDFLAGS: release-utils' gitVersion).
    go build "${GO_BUILD_FLAGS[@]}" \
      -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
      -o "$BIN" . || exit 1
  ) || die "building cosign $COSIGN_VERSION failed"
  rm -rf "$src"
  exec 9>&-
  built || die "$BIN reports '$("$BIN" version 2>&1 | grep GitVersion)', not $COSIGN_VERSION"
  echo "cosign: built $COSIGN_VERSION in $((SECONDS - start)) s" >&2
}

case "${1:-}" in
  build) build ;;
  path) echo "$BIN" ;;
  *) echo "usage: hack/cosign.sh build|path" >&2; exit 2 ;;
esac
