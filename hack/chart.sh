#!/usr/bin/env bash
# The resident guard's Helm chart (manifests/chart), with the helm said below.
#
#   hack/chart.sh lint                 helm lint --strict (hack/lint.sh runs it)
#   hack/chart.sh template [ARGS...]   helm template of the chart, ARGS passed on (--set ...)
#   hack/chart.sh package DIR [URL]    the chart packaged into DIR and DIR/index.yaml written
#                                      (merged with an index already there); URL: where DIR will
#                                      be served, written into the index (default: relative
#                                      links, which work from wherever DIR is served)
#   hack/chart.sh where [WHAT]         where a release puts what (all, or one of home, image,
#                                      charts, oci, runbooks): each derived from the one home of
#                                      the project's address, Chart.yaml's `home`
#   hack/chart.sh push DIR oci://REGISTRY/PATH [ARGS...]
#                                      DIR/workload-update-guard-VERSION.tgz (package's) pushed
#                                      by `helm push` (Helm 3.8+: an OCI registry as the chart's
#                                      home), ARGS passed on (--ca-file FILE); prints
#                                      REGISTRY/PATH/workload-update-guard:VERSION@sha256:DIGEST.
#                                      A login: `helm registry login REGISTRY` first.
#
# Serve DIR with any HTTP server; the Addon's spec.repo (or `helm repo add NAME URL`) is its URL.
# Or install from the registry: `helm install NAME oci://REGISTRY/PATH/workload-update-guard
# --version VERSION` (docs/chart.md, "Air-gapped: the release through a file").
# Helm 3 or 4: HELM if set, else a `helm` on PATH (yours, air-gapped too), else hack/helm.sh's
# cached build; none is built unasked (`bash hack/helm.sh build` builds the pinned one).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$REPO_ROOT/manifests/chart"

die() { echo "chart: ERROR: $*" >&2; exit 1; }

helm_bin() {
  if [[ -n "${HELM:-}" ]]; then echo "$HELM"; return; fi
  if command -v helm >/dev/null; then command -v helm; return; fi
  local bin
  bin="$(bash "$REPO_ROOT/hack/helm.sh" path)"
  [[ -x "$bin" ]] || die "no helm: set HELM=PATH, put helm (3 or 4) on PATH, or build the pinned one: bash hack/helm.sh build"
  echo "$bin"
}

# Chart.yaml's version and appVersion are Cargo.toml's version: one release, one number.
check_versions() {
  local cargo chart app
  cargo="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -1)"
  chart="$(chart_version)"
  app="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART/Chart.yaml")"
  [[ "$chart" == "$cargo" && "$app" == "$cargo" ]] \
    || die "manifests/chart/Chart.yaml has version '$chart' and appVersion '$app'; Cargo.toml has '$cargo': make them equal"
}

chart_version() { sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART/Chart.yaml"; }

# The release's addresses, from Chart.yaml's `home` (https://github.com/OWNER/NAME): the image on
# ghcr.io, the chart repository on GitHub Pages (.github/workflows/release.yml publishes both),
# the chart as OCI beside the image (under charts/, apart from the image's own repository), and
# this version's runbooks (main's for a `-dev` build, as templates/prometheusrule.yaml derives
# them).
where() {
  local home owner name version tree
  home="$(sed -n 's/^home: *\(.*\)$/\1/p' "$CHART/Chart.yaml")"
  [[ "$home" =~ ^https://github\.com/([^/]+)/([^/]+)$ ]] \
    || die "manifests/chart/Chart.yaml: home '$home' is not https://github.com/OWNER/NAME"
  owner="${BASH_REMATCH[1],,}" name="${BASH_REMATCH[2]}"
  version="$(chart_version)"
  tree="v$version"; [[ "$version" != *-* ]] || tree=main
  local -A at=(
    [home]="$home"
    [image]="ghcr.io/$owner/$name"
    [charts]="https://$owner.github.io/$name"
    [oci]="oci://ghcr.io/$owner/charts/$name"
    [runbooks]="$home/blob/$tree/docs/troubleshooting.md"
  )
  if [[ -n "${1:-}" ]]; then
    [[ -n "${at[$1]:-}" ]] || die "where: no '$1' (home, image, charts, oci, runbooks)"
    echo "${at[$1]}"
    return
  fi
  local k
  for k in home image charts oci runbooks; do printf '%-9s %s\n' "$k" "${at[$k]}"; done
}

cmd="${1:-}"; shift || true
case "$cmd" in
  lint)
    check_versions
    "$(helm_bin)" lint --strict "$CHART"
    ;;
  template)
    # No cluster to ask: told that ValidatingAdmissionPolicy is served, as it is by every
    # Kubernetes the chart's kubeVersion admits (the chart refuses a cluster without it).
    "$(helm_bin)" template workload-update-guard "$CHART" --namespace harvester-system \
      --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy "$@"
    ;;
  package)
    dir="${1:?usage: hack/chart.sh package DIR [URL]}"
    url="${2:-}"
    check_versions
    mkdir -p "$dir"
    helm="$(helm_bin)"
    "$helm" package "$CHART" --destination "$dir" >&2
    index=(repo index "$dir")
    [[ -z "$url" ]] || index+=(--url "$url")
    [[ ! -f "$dir/index.yaml" ]] || index+=(--merge "$dir/index.yaml")
    "$helm" "${index[@]}"
    echo "chart: $dir/index.yaml and $dir/workload-update-guard-$(chart_version).tgz: serve $dir over HTTP(S)" >&2
    ;;
  push)
    dir="${1:?usage: hack/chart.sh push DIR oci://REGISTRY/PATH [ARGS...]}"
    dest="${2:?usage: hack/chart.sh push DIR oci://REGISTRY/PATH [ARGS...]}"
    [[ "$dest" == oci://* ]] || die "push: the destination is oci://REGISTRY/PATH, not '$dest'"
    check_versions
    tgz="$dir/workload-update-guard-$(chart_version).tgz"
    [[ -f "$tgz" ]] || die "push: no $tgz: hack/chart.sh package $dir first"
    # Helm 4 says "Pushed: REF" and "Digest: sha256:..." on stdout, Helm 3 on stderr.
    said="$("$(helm_bin)" push "$tgz" "$dest" "${@:3}" 2>&1)" || die "helm push $tgz $dest: $said"
    ref="$(sed -n 's/^Pushed: *//p' <<<"$said")" digest="$(sed -n 's/^Digest: *//p' <<<"$said")"
    [[ -n "$ref" && "$digest" == sha256:* ]] || die "helm push said no reference and digest: $said"
    echo "chart: pushed $tgz to $dest" >&2
    echo "$ref@$digest"
    ;;
  where)
    where "$@"
    ;;
  *)
    echo "usage: hack/chart.sh lint | template [ARGS...] | package DIR [URL] | push DIR oci://REGISTRY/PATH [ARGS...] | where [WHAT]" >&2
    exit 2
    ;;
esac
