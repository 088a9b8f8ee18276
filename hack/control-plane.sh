#!/usr/bin/env bash
# Real kube-apiserver + etcd on loopback, for tests and the demo.
#
#   hack/control-plane.sh build        build (or reuse) kube-apiserver, etcd, kubectl
#   hack/control-plane.sh up [DIR]     start a control plane in DIR (default: a new temp dir);
#                                      prints the state dir; $DIR/kubeconfig is the admin kubeconfig
#   hack/control-plane.sh down DIR     stop exactly the processes started in DIR and remove it
#   hack/control-plane.sh env DIR      print `export KUBECONFIG=...` etc. for eval
#   hack/control-plane.sh stop-apiserver DIR | start-apiserver DIR   (fault tests; etcd keeps running)
#   hack/control-plane.sh bin-dir      print where the binaries are cached
#
# Environment:
#   KUBE_VERSION   pinned Kubernetes release built from the k8s.io/kubernetes module (default v1.35.4)
#   ETCD_VERSION   go.etcd.io/etcd/server/v3 version (default v3.6.5, the one that release requires)
#   CP_OWNER_PID   if set, the control plane is stopped when that process exits (used by tests)
#   CP_CACHE_DIR   binary cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/workload-update-guard/control-plane)
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.5}"
CACHE_ROOT="${CP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workload-update-guard/control-plane}"
BIN_DIR="$CACHE_ROOT/$KUBE_VERSION-etcd-$ETCD_VERSION/bin"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CRD_DIR="$REPO_ROOT/tests/fixtures/crds"

log() { echo "control-plane: $*" >&2; }
die() { echo "control-plane: ERROR: $*" >&2; exit 1; }


build() {
  if [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/etcd" && -x "$BIN_DIR/kubectl" ]]; then
    log "reusing binaries in $BIN_DIR"
    return 0
  fi
  command -v go >/dev/null || die "go is required to build the control plane"
  local src="$CACHE_ROOT/$KUBE_VERSION-etcd-$ETCD_VERSION/src"
  mkdir -p "$src" "$BIN_DIR"
  log "building kube-apiserver/kubectl $KUBE_VERSION and etcd $ETCD_VERSION in $src"
  local start=$SECONDS
  (
    cd "$src"
    export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
    rm -f go.mod go.sum
    go mod init cpwrapper >/dev/null 2>&1
    # The k8s.io/kubernetes module replaces its staging modules with local paths; a consumer must
    # pin each to the matching v0.x.y release instead.
    local gomod staging_ver="v0.${KUBE_VERSION#v1.}"
    gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    [[ -f "$gomod" ]] || die "cannot download k8s.io/kubernetes@$KUBE_VERSION"
    {
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
      echo "replace ("
      sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_ver"'#p' "$gomod"
      echo ")"
    } >> go.mod
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kubectl/app"
)
GO
    go mod tidy -e >/dev/null 2>&1 || true
    go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd" go.etcd.io/etcd/server/v3
    go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
    go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/kubectl" k8s.io/kubernetes/cmd/kubectl
  ) || die "building the control plane failed (see the go output above)"
  log "built in $((SECONDS - start))s"
}

free_ports() { # free_ports N: N distinct free loopback ports, held open together while chosen
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

wait_for() { # wait_for SECONDS CMD...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
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
  local start_ms; start_ms=$(date +%s%3N)
  local etcd_port peer_port api_port
  read -r etcd_port peer_port api_port < <(free_ports 3)

  # Admin client cert, serving cert and service-account keys: TokenRequest needs the latter.
  (
    cd "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=wug-ca" \
      -keyout ca.key -out ca.crt >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout serving.key -out serving.csr >/dev/null 2>&1
    # X.509 v3 everywhere: rustls refuses v1 certificates.
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > san.ext
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' > client.ext
    openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out serving.crt >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=wug-admin" \
      -keyout admin.key -out admin.csr >/dev/null 2>&1
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile client.ext -out admin.crt >/dev/null 2>&1
    openssl genrsa -out sa.key 2048 >/dev/null 2>&1
    openssl rsa -in sa.key -pubout -out sa.pub >/dev/null 2>&1
  ) || die "openssl failed creating credentials"

  "$BIN_DIR/etcd" --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "default=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn \
    >"$dir/etcd.log" 2>&1 &
  echo $! > "$dir/etcd.pid"

  echo "$api_port" > "$dir/api.port"
  echo "$etcd_port" > "$dir/etcd.port"
  start_apiserver "$dir"

  cat > "$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$api_port
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
  wait_ready "$dir" 60 || { tail -20 "$dir/apiserver.log" >&2; down "$dir"; die "kube-apiserver did not become ready"; }
  local ready_ms; ready_ms=$(date +%s%3N)
  "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" apply -f "$CRD_DIR" >/dev/null \
    || { down "$dir"; die "installing CRD fixtures failed"; }
  "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" wait --for condition=Established --timeout=60s \
    -f "$CRD_DIR" >/dev/null || { down "$dir"; die "CRDs did not become Established"; }
  if [[ -n "${CP_OWNER_PID:-}" ]]; then
    # Reaper: when the owning process (a test run) exits, however it exits, stop everything.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; "$2" down "$3"' _ \
      "$CP_OWNER_PID" "$REPO_ROOT/hack/control-plane.sh" "$dir" </dev/null >/dev/null 2>&1 &
  fi
  log "ready in $((ready_ms - start_ms)) ms (CRDs established after $(( $(date +%s%3N) - start_ms )) ms): $dir"
  echo "$dir"
}

start_apiserver() {
  local dir="$1" api_port etcd_port
  api_port=$(cat "$dir/api.port"); etcd_port=$(cat "$dir/etcd.port")
  "$BIN_DIR/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$dir/serving.crt" --tls-private-key-file "$dir/serving.key" \
    --client-ca-file "$dir/ca.crt" \
    --authorization-mode RBAC \
    --service-account-issuer "https://kubernetes.default.svc" \
    --service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
    --api-audiences "https://kubernetes.default.svc" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --audit-policy-file "$REPO_ROOT/hack/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
    --audit-log-format json --audit-log-mode blocking \
    --enable-priority-and-fairness=false \
    --disable-admission-plugins ServiceAccount \
    --cert-dir "$dir/certs" \
    >>"$dir/apiserver.log" 2>&1 &
  echo $! > "$dir/apiserver.pid"
}

wait_ready() { # wait_ready DIR SECONDS
  local dir="$1"
  wait_for "$2" "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" get --raw /readyz
}

stop_pid() { # stop_pid PIDFILE: SIGTERM, then SIGKILL after 10 s
  local f="$1" pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
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
  build) build ;;
  bin-dir) echo "$BIN_DIR" ;;
  up) up "$@" ;;
  down) down "$@" ;;
  stop-apiserver) stop_pid "${1:?DIR}/apiserver.pid" ;;
  start-apiserver) start_apiserver "${1:?DIR}"; wait_ready "$1" 60 || die "kube-apiserver did not become ready" ;;
  env) d="${1:?usage: env DIR}"; echo "export KUBECONFIG=$d/kubeconfig PATH=$BIN_DIR:\$PATH" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
