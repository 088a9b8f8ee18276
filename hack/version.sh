#!/usr/bin/env bash
# The one version: Cargo.toml's package version. The image's tag (hack/image.sh), the binary's
# --version (env!("CARGO_PKG_VERSION")), manifests/job/kustomization.yaml's newTag (checked by
# hack/docs_check.py) and the chart's appVersion all say this.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
v="$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -1)"
[[ -n "$v" ]] || { echo "version: ERROR: no version in $REPO_ROOT/Cargo.toml's [package]" >&2; exit 1; }
echo "$v"
