#!/usr/bin/env bash
# KubeVirt's own virt-controller (its workload updater is what the guard stops) and KubeVirt's
# own CRDs, built from the Go module proxy (kubevirt.io/kubevirt with its staging modules
# kubevirt.io/api and kubevirt.io/client-go of the same version), cached like Kubernetes.
#
#   hack/kubevirt.sh build [VERSION...]   build (or reuse) virt-controller and the CRDs of each
#                                         version (default: $KUBEVIRT_VERSION)
#   hack/kubevirt.sh crds                 print the file of $KUBEVIRT_VERSION's CRDs (a JSON List)
#   hack/kubevirt.sh bin                  print the cached virt-controller's path
#   hack/kubevirt.sh run DIR KUBECONFIG NAMESPACE LAUNCHER_IMAGE
#                                         start virt-controller in DIR (its log DIR/virt-controller.log,
#                                         its PID DIR/virt-controller.pid) for the KubeVirt CR's
#                                         namespace; it runs until `stop DIR`
#   hack/kubevirt.sh disruption DIR KUBECONFIG
#                                         start Kubernetes' own disruption controller in DIR
#                                         (kube-controller-manager --controllers=disruption, the
#                                         binary of hack/node.sh build; log DIR/disruption.log)
#   hack/kubevirt.sh stop DIR             stop exactly the processes started in DIR
#   hack/kubevirt.sh versions             the supported versions, one a line (the default first)
#
# Environment:
#   KUBEVIRT_VERSION   kubevirt.io/kubevirt version (default v1.6.0; supported: see SUPPORTED)
#   CP_CACHE_DIR       cache root, shared with hack/control-plane.sh
#   KV_OWNER_PID       if set, virt-controller is stopped when that process exits (the tests)
#
# The versions: the newest patch of each KubeVirt minor that Harvester ships and whose three
# modules the Go module proxy serves (docs/testing.md, "The real KubeVirt" has the table): 1.6 is
# the target of the upgrade path where the guard acts (Harvester v1.6 -> v1.7), 1.7 ships in
# v1.8, 1.8.4 in v1.9, 1.4 in v1.5 (v1.6 ships 1.5.2, whose client-go the proxy refuses).
# kubevirt v1.6.3, v1.6.6, v1.7.4 and kubevirt.io/api v1.4.1 were refused, so 1.6.0, 1.7.0 and
# 1.4.0 are the newest patches buildable here; v1.9.0 is served but needs
# kubevirt.io/virt-template-{api,client-go} v0.2.0, which the proxy refuses (403, 2026-12-05).
set -euo pipefail

SUPPORTED="v1.6.0 v1.7.0 v1.8.4 v1.4.0"
KUBEVIRT_VERSION="${KUBEVIRT_VERSION:-v1.6.0}"
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
# shellcheck source=hack/lib/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/process.sh"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off

die() { echo "kubevirt: ERROR: $*" >&2; exit 1; }
supported() { [[ " $SUPPORTED " == *" $1 "* ]] || die "KubeVirt $1 is not supported (supported: $SUPPORTED)"; }
dir_of() { echo "$CACHE_ROOT/kubevirt-$1"; }
built() { [[ -x "$(dir_of "$1")/bin/virt-controller" && -s "$(dir_of "$1")/crds.json" ]]; }

module_dir() { # module_dir MODULE@VERSION: where the module cache unpacked it (downloaded once)
  local json
  json="$(cd / && go mod download -json "$1")" || die "the Go module proxy did not serve $1: $json"
  jq -r '.Dir' <<<"$json"
}

build_one() {
  local v="$1" out src start=$SECONDS m kv
  supported "$v"
  out="$(dir_of "$v")"
  cached kubevirt "$out" built "$v" && return 0
  need_go "build virt-controller"
  command -v jq >/dev/null || die "jq is required to build virt-controller (apt-get install jq)"
  # The module zip leaves out the staging modules its go.mod replaces (./staging/src/kubevirt.io/
  # {api,client-go}): put back those of the same version; vendor/ goes (-mod=mod).
  kv="$(module_dir "kubevirt.io/kubevirt@$v")"
  src="$out/src"
  rm -rf "$src"
  cp -r "$kv" "$src"
  chmod -R u+w "$src"
  rm -rf "$src/vendor"
  for m in api client-go; do
    rm -rf "$src/staging/src/kubevirt.io/$m"
    mkdir -p "$src/staging/src/kubevirt.io"
    cp -r "$(module_dir "kubevirt.io/$m@$v")" "$src/staging/src/kubevirt.io/$m"
    chmod -R u+w "$src/staging/src/kubevirt.io/$m"
  done
  # v1.4's go.mod also replaces github.com/golang/glog by a staging copy the zip lacks: the
  # module it names instead (logging only; the updater does not depend on it).
  local old new
  while read -r old new; do
    [[ -e "$src/$new/go.mod" ]] || (cd "$src" && go mod edit -dropreplace "$old")
  done < <(cd "$src" && go mod edit -json \
    | jq -r '.Replace[]? | select(.New.Path | startswith("./staging/")) | "\(.Old.Path) \(.New.Path)"')
  # The CRDs: our small main calling virt-operator's own generators (the list its install
  # strategy deploys, read from install/strategy.go, plus the KubeVirt CRD), printed as JSON.
  mkdir -p "$src/cmd/wug-crds"
  {
    sed -n '/^package/,/^\/\/ END IMPORTS/p' "$REPO_ROOT/hack/kubevirt/crds.go"
    echo "var generators = []func() (*extv1.CustomResourceDefinition, error){"
    echo "	components.NewKubeVirtCrd,"
    grep -o 'components\.New[A-Za-z]*Crd\b' "$src/pkg/virt-operator/resource/generate/install/strategy.go" \
      | sort -u | sed 's/$/,/; s/^/	/'
    echo "}"
    sed -n '/^\/\/ END IMPORTS/,$p' "$REPO_ROOT/hack/kubevirt/crds.go" | tail -n +2
  } > "$src/cmd/wug-crds/main.go"
  mkdir -p "$out/bin"
  (cd "$src" && go build "${GO_BUILD_FLAGS[@]}" -ldflags "-s -w" -o "$out/bin/" ./cmd/virt-controller ./cmd/wug-crds) \
    || die "building virt-controller $v failed"
  "$out/bin/wug-crds" > "$out/crds.json.tmp" || die "generating KubeVirt $v's CRDs failed"
  mv "$out/crds.json.tmp" "$out/crds.json"
  rm -rf "$src"
  echo "kubevirt: built virt-controller and the CRDs of $v in $((SECONDS - start))s" >&2
}

# run DIR KUBECONFIG NAMESPACE LAUNCHER_IMAGE
run() {
  local dir="$1" kubeconfig="$2" ns="$3" image="$4" bin
  supported "$KUBEVIRT_VERSION"
  built "$KUBEVIRT_VERSION" || die "KubeVirt $KUBEVIRT_VERSION is not built: run hack/kubevirt.sh build $KUBEVIRT_VERSION"
  bin="$(dir_of "$KUBEVIRT_VERSION")/bin/virt-controller"
  # The metrics certificate in a directory of its own: virt-controller watches the certificate's
  # directory (pkg/certificates/bootstrap/cert-manager.go, fsnotify on filepath.Dir) and logs each
  # reload, so beside its own log every line it wrote reloaded the certificate and wrote another:
  # a loop that took a core per virt-controller.
  mkdir -p "$dir/tls"
  [[ -s "$dir/tls/tls.crt" ]] || openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=virt-controller \
    -keyout "$dir/tls/tls.key" -out "$dir/tls/tls.crt" 2>/dev/null || die "openssl could not make the metrics certificate"
  # Its namespace comes from the ServiceAccount file only (client-go util.GetNamespace, else
  # "kubevirt"): a private mount namespace with a tmpfs on /run gives it one, the host untouched.
  # Loopback only: it talks to the API server of KUBECONFIG, serves its metrics and health on
  # 127.0.0.1 (ports picked free by the caller's range) and elects itself leader on a Lease: short
  # enough that the rollout's new process takes over within seconds, with a renew deadline that a
  # loaded machine meets (1.5 s was lost once while three versions' suites ran side by side).
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # It exits when it loses its Lease (application.go's OnStoppedLeading: golog.Fatal), as a
  # loaded machine can make it; the kubelet restarts its container then, and so does this loop
  # (one process, the PID file's, that stops it on SIGTERM and itself with it).
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid unshare -m --propagation private sh -c '
    mount -t tmpfs -o size=1m tmpfs /run || exit 1
    mkdir -p /run/secrets/kubernetes.io/serviceaccount
    echo "$1" > /run/secrets/kubernetes.io/serviceaccount/namespace
    shift
    child=""
    stop() { [ -z "$child" ] || { kill "$child" 2>/dev/null; wait "$child"; }; exit 0; }
    trap stop TERM INT
    while :; do
      "$@" & child=$!
      wait "$child"
      echo "hack/kubevirt.sh: virt-controller exited ($?): restarting it, as the kubelet would" >&2
      sleep 1
    done' sh "$ns" "$bin" --kubeconfig "$kubeconfig" --launcher-image "$image" \
    --listen 127.0.0.1 --port "$port" \
    --prom-cert-file "$dir/tls/tls.crt" --prom-key-file "$dir/tls/tls.key" \
    --leader-elect-lease-duration 6s --leader-elect-renew-deadline 5s --leader-elect-retry-period 1s \
    > "$dir/virt-controller.log" 2>&1 < /dev/null &
  echo $! > "$dir/virt-controller.pid"
  if [[ -n "${KV_OWNER_PID:-}" ]]; then
    local pid
    pid="$(cat "$dir/virt-controller.pid")"
    (while kill -0 "$KV_OWNER_PID" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1; done
     kill "$pid" 2>/dev/null || true) > /dev/null 2>&1 &
  fi
}

# disruption DIR KUBECONFIG: the PodDisruptionBudgets' status, which KubeVirt's migration
# controller reads: v1.4.0 creates no target pod until the evacuation's PDB, expanded to
# minAvailable 2, says so (pkg/virt-controller/watch/migration/migration.go
# `isMigrationProtected`: status.desiredHealthy 2 at the PDB's generation). A cluster has it in
# kube-controller-manager; here it is that binary with that one controller, on loopback.
disruption() {
  local dir="$1" kubeconfig="$2" bin
  bin="$(KUBE_VERSION="${KUBE_VERSION:-}" bash "$REPO_ROOT/hack/node.sh" bin-dir)/kube-controller-manager"
  [[ -x "$bin" ]] || die "kube-controller-manager is not built: run hack/node.sh build"
  mkdir -p "$dir"
  setsid "$bin" --kubeconfig "$kubeconfig" --controllers disruption --leader-elect=false \
    --use-service-account-credentials=false --bind-address 127.0.0.1 --secure-port 0 \
    > "$dir/disruption.log" 2>&1 < /dev/null &
  echo $! > "$dir/disruption.pid"
  if [[ -n "${KV_OWNER_PID:-}" ]]; then
    local pid=$!
    (while kill -0 "$KV_OWNER_PID" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1; done
     kill "$pid" 2>/dev/null || true) > /dev/null 2>&1 &
  fi
}

stop() { stop_pid "$1/virt-controller.pid"; stop_pid "$1/disruption.pid"; }

case "${1:-}" in
  build)
    shift
    (( $# )) || set -- "$KUBEVIRT_VERSION"
    for v in "$@"; do build_one "$v"; done ;;
  crds) supported "$KUBEVIRT_VERSION"; echo "$(dir_of "$KUBEVIRT_VERSION")/crds.json" ;;
  bin) supported "$KUBEVIRT_VERSION"; echo "$(dir_of "$KUBEVIRT_VERSION")/bin/virt-controller" ;;
  run) [[ $# -eq 5 ]] || die "usage: hack/kubevirt.sh run DIR KUBECONFIG NAMESPACE LAUNCHER_IMAGE"; shift; run "$@" ;;
  disruption) [[ $# -eq 3 ]] || die "usage: hack/kubevirt.sh disruption DIR KUBECONFIG"; shift; disruption "$@" ;;
  stop) [[ $# -eq 2 ]] || die "usage: hack/kubevirt.sh stop DIR"; stop "$2" ;;
  versions) tr ' ' '\n' <<<"$SUPPORTED" ;;
  *) sed -n '2,23s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
