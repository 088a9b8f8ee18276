#!/usr/bin/env bash
# Real kube-apiserver + etcd on loopback, for tests and the demo. Run without arguments for usage.
set -euo pipefail

# The supported Kubernetes versions: the newest patch of each minor that the Go module proxy
# serves (`go list -m -versions k8s.io/kubernetes`), each with the etcd server that release's
# go.mod requires (go.etcd.io/etcd/server/v3), but v1.34.4: v3.6.5, v1.35.4's, for its v3.6.4
# (the same minor), so that one etcd build serves both (about 70 CPU-s each, measured). `build`
# notes a pairing that differs from the go.mod.
SUPPORTED_VERSIONS="v1.33.13 v1.34.4 v1.35.4 v1.36.3 v1.37.2"
DEFAULT_KUBE_VERSION="v1.35.4"
etcd_for() { # etcd_for KUBE_VERSION: the etcd server version of a supported release, or nothing
  case "$1" in
    v1.33.13) echo v3.5.21 ;;
    v1.34.4) echo v3.6.5 ;; # its go.mod: v3.6.4 (above)
    v1.35.4) echo v3.6.5 ;;
    v1.36.3) echo v3.6.8 ;;
    v1.37.2) echo v3.7.0 ;;
  esac
}

usage() {
  cat >&2 <<EOF
usage: hack/control-plane.sh COMMAND [ARGS]

  build                   build (or reuse) kube-apiserver, etcd and kubectl for \$KUBE_VERSION
  up [DIR]                start a control plane in DIR (default: a new temp dir) and print DIR;
                          DIR/kubeconfig is the admin kubeconfig
  down DIR                stop exactly the processes started in DIR and remove it
  env DIR                 print \`export KUBECONFIG=... PATH=...\` for eval
  stop-apiserver DIR      stop the API server only (etcd keeps running)
  start-apiserver DIR     start the API server of \$KUBE_VERSION on DIR's etcd; this is also the
                          upgrade (or downgrade) of a running control plane: stop-apiserver, then
                          KUBE_VERSION=vX.Y.Z start-apiserver
  version DIR             print the version the running API server reports
  bin-dir                 print where the binaries of \$KUBE_VERSION are cached
  versions                print the supported versions, one a line
  default-version         print the version used when KUBE_VERSION is unset

Environment:
  KUBE_VERSION   Kubernetes release built from the k8s.io/kubernetes module (default $DEFAULT_KUBE_VERSION;
                 supported: $SUPPORTED_VERSIONS)
  ETCD_VERSION   go.etcd.io/etcd/server/v3 version (default: the one that release's go.mod requires;
                 v1.34.4: v3.6.5, v1.35.4's, the same minor as its v3.6.4)
  CP_OWNER_PID   if set, the control plane is stopped when that process exits (used by tests)
  CP_NODE_IP     if set, a control plane for hack/node.sh's node (run inside its network namespace):
                 the API server listens on every address there, advertises CP_NODE_IP as the
                 \`kubernetes\` Service's endpoint, has ServiceAccount admission, and its certificate
                 names CP_NODE_IP and the Service's ClusterIP $SERVICE_IP
  KUBEVIRT_VERSION  whose CRDs of KubeVirt are installed (hack/kubevirt.sh; built if not cached)
  KUBEVIRT_CRDS  \`all\`: every KubeVirt CRD (virt-controller's need), not only the KubeVirt CR's and the migrations'
  CP_AUDIT       \`1\`: every request in DIR/audit.log (Metadata level), which hack/bench.sh counts
  CP_CACHE_DIR   binary cache (default \${XDG_CACHE_HOME:-\$HOME/.cache}/workload-update-guard/control-plane),
                 one directory per version pair
EOF
}

log() { echo "control-plane: $*" >&2; }
die() { echo "control-plane: ERROR: $*" >&2; exit 1; }

KUBE_VERSION="${KUBE_VERSION:-$DEFAULT_KUBE_VERSION}"
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
# shellcheck source=hack/lib/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/process.sh"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CRD_DIR="$REPO_ROOT/tests/fixtures/crds"
SERVICE_CIDR=10.96.0.0/16 SERVICE_IP=10.96.0.1
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

release_gomod() { # the go.mod of k8s.io/kubernetes@$KUBE_VERSION, from the module cache or the proxy
  command -v go >/dev/null || die "go is required to build the control plane"
  command -v jq >/dev/null || die "jq is required to build the control plane (apt-get install jq)"
  local json gomod
  json="$(cd / && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")" \
    || die "cannot download k8s.io/kubernetes@$KUBE_VERSION: $(jq -r '.Error // empty' <<<"$json" 2>/dev/null)"
  gomod="$(jq -r '.GoMod // empty' <<<"$json")"
  [[ -f "$gomod" ]] || die "no go.mod for k8s.io/kubernetes@$KUBE_VERSION"
  echo "$gomod"
}

required_etcd() { # required_etcd GOMOD: the etcd server version that go.mod requires
  go mod edit -json "$1" | jq -r '.Require[] | select(.Path == "go.etcd.io/etcd/server/v3") | .Version'
}

resolve_version() { # sets KUBE_MINOR, ETCD_VERSION, VERSION_DIR, BIN_DIR for $KUBE_VERSION
  [[ "$KUBE_VERSION" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] \
    || die "KUBE_VERSION must look like $DEFAULT_KUBE_VERSION, not '$KUBE_VERSION'"
  KUBE_MINOR="${BASH_REMATCH[1]}"
  if [[ -z "${ETCD_VERSION:-}" ]]; then
    ETCD_VERSION="$(etcd_for "$KUBE_VERSION")"
    if [[ -z "$ETCD_VERSION" ]]; then # a version outside the table: ask its go.mod
      log "$KUBE_VERSION is not one of the supported versions ($SUPPORTED_VERSIONS)"
      ETCD_VERSION="$(required_etcd "$(release_gomod)")"
      [[ -n "$ETCD_VERSION" ]] || die "k8s.io/kubernetes@$KUBE_VERSION requires no go.etcd.io/etcd/server/v3"
    fi
  fi
  VERSION_DIR="$CACHE_ROOT/kubernetes-$KUBE_VERSION-etcd-$ETCD_VERSION"
  BIN_DIR="$VERSION_DIR/bin"
}

# The versions the three binaries report, one a line; `check_versions` compares them.
reported_versions() {
  "$BIN_DIR/kube-apiserver" --version 2>/dev/null | awk '{print $2}'
  "$BIN_DIR/kubectl" version --client -o json 2>/dev/null | jq -r '.clientVersion.gitVersion'
  etcd_version "$BIN_DIR/etcd"
}

etcd_version() { # etcd_version BINARY: the version an etcd binary reports (vX.Y.Z)
  "$1" --version 2>/dev/null | awk '/^etcd Version:/ {print "v" $3}'
}

check_versions() { # fails unless the cached binaries report KUBE_VERSION and ETCD_VERSION
  local got want
  got="$(reported_versions | tr '\n' ' ')"
  want="$KUBE_VERSION $KUBE_VERSION $ETCD_VERSION "
  [[ "$got" == "$want" ]] || {
    log "binaries in $BIN_DIR report '$got', expected kube-apiserver, kubectl, etcd: '$want'"
    return 1
  }
}

# The three binaries in BIN_DIR (they appear there only when all three are built), reporting
# the versions asked for: else the cache is wrong.
built() {
  [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/etcd" && -x "$BIN_DIR/kubectl" ]] || return 1
  check_versions || die "the cache is wrong: remove $VERSION_DIR and build again"
}

build() {
  cached control-plane "$VERSION_DIR" built && return 0
  # Go on PATH only, no fallback: "no Go" is then a PATH without it (tests/integration/control_plane.rs).
  command -v go >/dev/null || die "go is required to build the control plane"
  local gomod src="$VERSION_DIR/src" tmp="$VERSION_DIR/bin.tmp" start=$SECONDS
  gomod="$(release_gomod)"
  # GOTOOLCHAIN=local: the Go on PATH must be as new as the release's go.mod asks.
  # shellcheck source=hack/setup.sh
  source "$REPO_ROOT/hack/setup.sh"
  setup_go_at_least "$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")" \
    "to build Kubernetes $KUBE_VERSION (the go directive of its go.mod)"
  local want_etcd; want_etcd="$(required_etcd "$gomod")"
  [[ "$want_etcd" == "$ETCD_VERSION" ]] \
    || log "note: k8s.io/kubernetes@$KUBE_VERSION requires etcd $want_etcd; etcd $ETCD_VERSION runs with it (etcd_for, or as asked)"
  rm -rf "$src" "$tmp"
  mkdir -p "$src" "$tmp"
  # etcd: the same version built already for another Kubernetes version, or built from its own
  # module, with the dependencies its go.mod requires (as etcd's release builds it).
  local etcd_built="" other
  for other in "$CACHE_ROOT"/kubernetes-*-etcd-"$ETCD_VERSION"/bin/etcd; do
    [[ -x "$other" && "$other" != "$BIN_DIR/etcd" ]] || continue
    [[ "$(etcd_version "$other")" == "$ETCD_VERSION" ]] && etcd_built="$other" && break
  done
  if [[ -n "$etcd_built" ]]; then
    log "etcd $ETCD_VERSION: reusing $etcd_built"
    cp "$etcd_built" "$tmp/etcd" || die "cannot copy $etcd_built"
  else
    log "building etcd $ETCD_VERSION in $VERSION_DIR/etcd-src"
    rm -rf "$VERSION_DIR/etcd-src"
    mkdir -p "$VERSION_DIR/etcd-src"
    build_etcd "$VERSION_DIR/etcd-src" "$tmp" || die "building etcd $ETCD_VERSION failed (see the go output above)"
    rm -rf "$VERSION_DIR/etcd-src"
  fi
  # src/go.mod stays: hack/node.sh builds the node's binaries on the same module graph.
  log "building kube-apiserver/kubectl $KUBE_VERSION in $src"
  # Each step checks its own status: `set -e` does not apply inside a `( ... ) || die` subshell.
  (
    cd "$src" || exit 1
    go mod init cpwrapper 2>/dev/null || exit 1
    # The k8s.io/kubernetes module replaces its staging modules with local paths; a consumer
    # pins each to the matching v0.x.y release instead.
    local staging_ver="v0.${KUBE_VERSION#v1.}" edits=()
    while read -r mod; do
      edits+=("-replace=$mod=$mod@$staging_ver")
    done < <(go mod edit -json "$gomod" \
      | jq -r '.Replace[]? | select(.New.Path | startswith("./staging/")) | .Old.Path')
    (( ${#edits[@]} > 0 )) || { echo "no staging replacements found in $gomod" >&2; exit 1; }
    go mod edit "-require=k8s.io/kubernetes@$KUBE_VERSION" "${edits[@]}" || exit 1
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    go mod tidy || exit 1
    local ldflags
    ldflags="$(kube_ldflags "$KUBE_VERSION" "$KUBE_MINOR")"
    # One go build for the two: each link (one core) runs beside the other's compiling.
    go build "${GO_BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl || exit 1
  ) || die "building the control plane $KUBE_VERSION failed (see the go output above)"
  rm -rf "$BIN_DIR"
  mv "$tmp" "$BIN_DIR"
  exec 9>&-
  check_versions || die "the binaries just built do not report the versions asked for"
  log "built $KUBE_VERSION and etcd $ETCD_VERSION in $((SECONDS - start)) s"
}

build_etcd() { # build_etcd SRC OUT: etcd $ETCD_VERSION's server as OUT/etcd, from a module in SRC
  (
    cd "$1" || exit 1
    go mod init etcdwrapper 2>/dev/null || exit 1
    go mod edit "-require=go.etcd.io/etcd/server/v3@$ETCD_VERSION" || exit 1
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy || exit 1
    # Its binary is named after its package path without the major version: server.
    go build "${GO_BUILD_FLAGS[@]}" -ldflags "-s -w" -o "$2/" go.etcd.io/etcd/server/v3 || exit 1
    mv "$2/server" "$2/etcd"
  )
}

free_port() { # a loopback port free at this moment; a bind can still lose it, so callers retry
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() { # wait_for SECONDS CMD...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

credentials() { # credentials DIR: CA, serving and admin certificates, service-account keys
  (
    cd "$1"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=wug-ca" \
      -keyout ca.key -out ca.crt >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout serving.key -out serving.csr >/dev/null 2>&1
    # X.509 v3 everywhere: rustls refuses v1 certificates.
    local sans="IP:127.0.0.1,DNS:localhost"
    [[ -z "${CP_NODE_IP:-}" ]] || sans+=",IP:$CP_NODE_IP,IP:$SERVICE_IP,DNS:kubernetes.default.svc"
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$sans" > san.ext
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' > client.ext
    openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out serving.crt >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=wug-admin" \
      -keyout admin.key -out admin.csr >/dev/null 2>&1
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile client.ext -out admin.crt >/dev/null 2>&1
    # TokenRequest needs the service-account keys.
    openssl genrsa -out sa.key 2048 >/dev/null 2>&1
    openssl rsa -in sa.key -pubout -out sa.pub >/dev/null 2>&1
  ) || die "openssl failed creating credentials"
}

start_etcd() { # start_etcd DIR: etcd on unix sockets in DIR, so no port can be taken from it
  local dir="$1"
  # etcd wants host:port in these URLs, and takes the socket's name from it ("etcd:0" and
  # "etcd-peer:0"), relative to its working directory.
  local client="unix://etcd:0" peer="unix://etcd-peer:0" pid
  (cd "$dir" && exec "$BIN_DIR/etcd" --data-dir "$dir/etcd" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "default=$peer" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn \
    >>"$dir/etcd.log" 2>&1) &
  pid=$!
  echo "$pid" > "$dir/etcd.pid"
  local deadline=$((SECONDS + 30))
  until [[ -S "$dir/etcd:0" ]]; do
    if ! kill -0 "$pid" 2>/dev/null || (( SECONDS >= deadline )); then
      tail -20 "$dir/etcd.log" >&2
      return 1
    fi
    sleep 0.1
  done
}

write_kubeconfig() { # write_kubeconfig DIR PORT
  local dir="$1" port="$2"
  cat > "$dir/kubeconfig.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $dir/ca.crt
users:
- name: admin
  user:
    client-certificate: $dir/admin.crt
    client-key: $dir/admin.key
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
KC
  mv "$dir/kubeconfig.tmp" "$dir/kubeconfig"
}

start_apiserver() { # start_apiserver DIR: start and wait until ready; on a lost port, another port
  local dir="$1" port attempt pid
  check_versions || die "cached binaries for $KUBE_VERSION are not what they claim: remove $VERSION_DIR"
  port="$(cat "$dir/api.port" 2>/dev/null || free_port)"
  for attempt in 1 2 3 4 5; do
    echo "$port" > "$dir/api.port"
    write_kubeconfig "$dir" "$port"
    echo "--- $KUBE_VERSION on port $port (attempt $attempt)" >>"$dir/apiserver.log"
    # Without a node: --endpoint-reconciler-type none, because from v1.37 the default reconciler
    # refuses a loopback advertise address, and no test needs the `kubernetes` Service's
    # endpoints; no ServiceAccount admission, as no pod runs. With a node (CP_NODE_IP), both.
    # The audit log, if `up` made one (CP_AUDIT=1): it costs the API server about a tenth of its
    # CPU per request (measured: 3,000 GETs, 316 to 320 ticks without, 337 to 382 with), which
    # the tests that count no request need not pay.
    local audit_flags=()
    [[ ! -e "$dir/audit.log" ]] || audit_flags=(--audit-policy-file "$REPO_ROOT/hack/audit-policy.yaml"
      --audit-log-path "$dir/audit.log" --audit-log-format json --audit-log-mode blocking)
    local node_flags=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1
      --endpoint-reconciler-type none --disable-admission-plugins ServiceAccount)
    [[ -z "${CP_NODE_IP:-}" ]] || node_flags=(--bind-address 0.0.0.0 --advertise-address "$CP_NODE_IP"
      --kubelet-client-certificate "$dir/admin.crt" --kubelet-client-key "$dir/admin.key"
      --kubelet-preferred-address-types InternalIP)
    "$BIN_DIR/kube-apiserver" \
      --etcd-servers "unix://$dir/etcd:0" \
      --secure-port "$port" "${node_flags[@]}" \
      --tls-cert-file "$dir/serving.crt" --tls-private-key-file "$dir/serving.key" \
      --client-ca-file "$dir/ca.crt" \
      --authorization-mode RBAC \
      --service-account-issuer "https://kubernetes.default.svc" \
      --service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
      --api-audiences "https://kubernetes.default.svc" \
      --service-cluster-ip-range "$SERVICE_CIDR" "${audit_flags[@]}" \
      --enable-priority-and-fairness=false \
      --cert-dir "$dir/certs" \
      >>"$dir/apiserver.log" 2>&1 &
    pid=$!
    echo "$pid" > "$dir/apiserver.pid"
    if wait_ready "$dir" "$pid" 60; then
      local served
      served="$("$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" version -o json | jq -r '.serverVersion.gitVersion')"
      [[ "$served" == "$KUBE_VERSION" ]] || die "the API server reports $served, not $KUBE_VERSION"
      echo "$KUBE_VERSION" > "$dir/api.version"
      return 0
    fi
    stop_pid "$dir/apiserver.pid"
    # Lost the port to another process between choosing and binding it: choose again.
    if tail -5 "$dir/apiserver.log" | grep -q "address already in use"; then
      log "port $port was taken; trying another"
      port="$(free_port)"
      continue
    fi
    break
  done
  tail -20 "$dir/apiserver.log" >&2
  return 1
}

wait_ready() { # wait_ready DIR PID SECONDS: ready, or fail as soon as the process is gone
  local dir="$1" pid="$2" deadline=$((SECONDS + $3))
  # curl, not kubectl, every 0.2 s: each kubectl call costs about 50 ms of CPU beside the API
  # server starting (measured: `up` took 5.5 CPU-s polling with kubectl, 5.1 with curl).
  until curl -sf -o /dev/null --max-time 2 --cacert "$dir/ca.crt" --cert "$dir/admin.crt" --key "$dir/admin.key" \
      "https://127.0.0.1:$(cat "$dir/api.port")/readyz"; do
    kill -0 "$pid" 2>/dev/null || return 1
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

up() {
  build
  local dir="${1:-}"
  [[ -n "$dir" ]] || dir="$(mktemp -d "${TMPDIR:-/tmp}/wug-cp.XXXXXX")"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  # A unix socket path is at most 107 bytes.
  (( ${#dir} + 12 <= 107 )) || die "state dir path too long for etcd's socket: $dir"
  local start_ms; start_ms=$(date +%s%3N)
  credentials "$dir"
  [[ "${CP_AUDIT:-}" != 1 ]] || : > "$dir/audit.log"
  start_etcd "$dir" || { down "$dir"; die "etcd did not start"; }
  start_apiserver "$dir" || { down "$dir"; die "kube-apiserver $KUBE_VERSION did not become ready"; }
  local ready_ms; ready_ms=$(date +%s%3N)
  "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" apply -f "$CRD_DIR" >/dev/null \
    || { down "$dir"; die "installing CRD fixtures failed"; }
  # KubeVirt's own CRDs, as its virt-operator installs them (hack/kubevirt.sh, $KUBEVIRT_VERSION):
  # the KubeVirt CR's and the migrations' by default; every one with KUBEVIRT_CRDS=all, which
  # virt-controller needs to start (tests/support/kubevirt.rs). Of those, the kinds no test
  # writes (VirtualMachines, snapshots, pools, ...: only virt-controller's informers list them, and
  # find none) are served without their schema, which validates nothing here: the API server then
  # spends 6.3 CPU-s on the start, not 9.2 (their OpenAPI, 1.4 of the 1.9 MB, built at every start).
  local kv_crds
  kv_crds="$(bash "$REPO_ROOT/hack/kubevirt.sh" crds)" || { down "$dir"; die "KubeVirt's CRDs: no such version"; }
  [[ -s "$kv_crds" ]] || bash "$REPO_ROOT/hack/kubevirt.sh" build >&2 \
    || { down "$dir"; die "KubeVirt ${KUBEVIRT_VERSION:-(default)} could not be built for its CRDs"; }
  jq --arg all "${KUBEVIRT_CRDS:-}" '
    def default: .metadata.name == "kubevirts.kubevirt.io"
      or .metadata.name == "virtualmachineinstancemigrations.kubevirt.io";
    def written: default or .metadata.name == "virtualmachineinstances.kubevirt.io";
    def unvalidated: .spec.versions |= map(.schema = {openAPIV3Schema: {type: "object",
      "x-kubernetes-preserve-unknown-fields": true}});
    .items |= map(select($all == "all" or default) | if written then . else unvalidated end)' \
    "$kv_crds" > "$dir/kubevirt-crds.json"
  "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" apply --server-side -f "$dir/kubevirt-crds.json" >/dev/null \
    || { down "$dir"; die "installing KubeVirt's CRDs ($kv_crds) failed"; }
  "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" wait --for condition=Established --timeout=60s \
    -f "$CRD_DIR" -f "$dir/kubevirt-crds.json" >/dev/null || { down "$dir"; die "CRDs did not become Established"; }
  if [[ -n "${CP_OWNER_PID:-}" ]]; then
    # Reaper: when the owning process (a test run) exits, however it exits, stop everything.
    # shellcheck disable=SC2016 # the inner script's $1..$3 are its own arguments
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; "$2" down "$3"' _ \
      "$CP_OWNER_PID" "$REPO_ROOT/hack/control-plane.sh" "$dir" </dev/null >/dev/null 2>&1 &
  fi
  log "$KUBE_VERSION ready in $((ready_ms - start_ms)) ms (CRDs established after $(( $(date +%s%3N) - start_ms )) ms): $dir"
  echo "$dir"
}

down() {
  local dir="${1:?usage: down DIR}"
  [[ -d "$dir" ]] || return 0
  stop_pid "$dir/apiserver.pid"
  stop_pid "$dir/etcd.pid"
  rm -rf "$dir"
}

cmd="${1:-}"; shift || true
case "$cmd" in
  build|bin-dir|up|start-apiserver|env) resolve_version ;;
esac
case "$cmd" in
  build) build ;;
  bin-dir) echo "$BIN_DIR" ;;
  versions) tr ' ' '\n' <<<"$SUPPORTED_VERSIONS" ;;
  default-version) echo "$DEFAULT_KUBE_VERSION" ;;
  up) up "$@" ;;
  down) down "$@" ;;
  stop-apiserver) stop_pid "${1:?usage: stop-apiserver DIR}/apiserver.pid" ;;
  start-apiserver)
    d="${1:?usage: start-apiserver DIR}"
    build
    start_apiserver "$d" || die "kube-apiserver $KUBE_VERSION did not become ready"
    log "kube-apiserver $KUBE_VERSION ready on $(cat "$d/api.port")"
    ;;
  version) cat "${1:?usage: version DIR}/api.version" ;;
  env) d="${1:?usage: env DIR}"; echo "export KUBECONFIG=$d/kubeconfig PATH=$BIN_DIR:\$PATH" ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
