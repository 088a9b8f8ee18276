#!/usr/bin/env bash
# The reference container registry (CNCF distribution's `registry`), built from its Go module
# proxy like hack/helm.sh builds Helm, served with TLS as a Harvester site's private registry is:
# a CA and a server certificate made here with openssl. The e2e tests push the guard's image to
# it (hack/image.sh push) and the node's containerd pulls through it (hack/node.sh registry-up).
#
#   hack/registry.sh build                build (or reuse) the pinned registry binary
#   hack/registry.sh path                 print the cached binary's path
#   hack/registry.sh up DIR ADDR:PORT [NAME_OR_IP...]
#                                         a CA (DIR/certs/ca.crt, alone), a certificate for NAME_OR_IP
#                                         (default: ADDR's), and the registry on ADDR:PORT with
#                                         its blobs in DIR/data; DIR/registry.pid, DIR/registry.log.
#                                         With REGISTRY_NETNS_PID, inside that process's network
#                                         namespace (the node's); with REGISTRY_HTPASSWD=FILE (bcrypt,
#                                         `htpasswd -B`), only for those logins (HTTP basic auth).
#   hack/registry.sh down DIR             stop it (by its PID) and remove DIR
#
# Environment:
#   REGISTRY_VERSION   github.com/distribution/distribution/v3 version (default v3.1.2)
#   CP_CACHE_DIR       cache root, shared with hack/control-plane.sh
set -euo pipefail

REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
MODULE=github.com/distribution/distribution/v3
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
# shellcheck source=hack/lib/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/process.sh"
BIN="$CACHE_ROOT/registry-$REGISTRY_VERSION/bin/registry"

log() { echo "registry: $*" >&2; }
die() { echo "registry: ERROR: $*" >&2; exit 1; }

built() { [[ -x "$BIN" ]] && "$BIN" --version 2>/dev/null | grep -q " $REGISTRY_VERSION"; }

build() {
  cached registry "$(dirname "$BIN")" built && return 0
  need_go "build the registry"
  local start=$SECONDS src
  src="$(dirname "$BIN")/src"
  rm -rf "$src"
  mkdir -p "$src"
  # cmd/registry's main.go of this version without the cloud storage drivers (Azure, GCS, S3, and
  # CloudFront's middleware, whose SDKs were about half of the build: 127 CPU-s, 74 without,
  # measured) which no test configures: the same registry, auth, proxy and filesystem storage.
  cat > "$src/main.go" <<GO
package main

import (
	_ "net/http/pprof"

	"$MODULE/registry"
	_ "$MODULE/registry/auth/htpasswd"
	_ "$MODULE/registry/auth/silly"
	_ "$MODULE/registry/auth/token"
	_ "$MODULE/registry/proxy"
	_ "$MODULE/registry/storage/driver/filesystem"
	_ "$MODULE/registry/storage/driver/inmemory"
	_ "$MODULE/registry/storage/driver/middleware/redirect"
	_ "$MODULE/registry/storage/driver/middleware/rewrite"
)

func main() {
	registry.RootCmd.Execute()
}
GO
  (
    cd "$src" || exit 1
    export GOTOOLCHAIN=local CGO_ENABLED=0
    go mod init wug-registry 2>/dev/null || exit 1
    go mod edit "-require=$MODULE@$REGISTRY_VERSION" || exit 1
    go mod tidy || exit 1
    go build "${GO_BUILD_FLAGS[@]}" -ldflags "-s -w -X $MODULE/version.version=$REGISTRY_VERSION" \
      -o "$BIN" . || exit 1
  ) || die "building the registry $REGISTRY_VERSION failed"
  rm -rf "$src"
  exec 9>&-
  "$BIN" --version | grep -q " $REGISTRY_VERSION" \
    || die "$BIN reports '$("$BIN" --version)', not $REGISTRY_VERSION"
  log "built $REGISTRY_VERSION in $((SECONDS - start)) s"
}

certs() { # certs DIR NAME_OR_IP...: the CA for clients alone in DIR/certs/ca.crt (a --cert-dir
  # for buildah, a `ca` for containerd); its key and the server's in DIR/pki
  local c="$1/pki" san="" n
  for n in "${@:2}"; do
    if [[ "$n" =~ ^[0-9.]+$ ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
  done
  mkdir -p "$c"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=wug test registry CA" \
    -keyout "$c/ca.key" -out "$c/ca.crt" 2>/dev/null || die "openssl: the CA"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$c/tls.key" -out "$c/tls.csr" \
    2>/dev/null || die "openssl: the server's key"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "${san%,}" > "$c/ext.cnf"
  openssl x509 -req -in "$c/tls.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial -days 2 \
    -extfile "$c/ext.cnf" -out "$c/tls.crt" 2>/dev/null || die "openssl: the server's certificate"
  rm -f "$c/tls.csr" "$c/ext.cnf" "$c/ca.srl"
  mkdir -p "$1/certs"
  cp "$c/ca.crt" "$1/certs/ca.crt"
}

in_netns() { # CMD in REGISTRY_NETNS_PID's network namespace, or here
  if [[ -n "${REGISTRY_NETNS_PID:-}" ]]; then nsenter -t "$REGISTRY_NETNS_PID" -n -- "$@"; else "$@"; fi
}

up() {
  local dir="${1:?usage: up DIR ADDR:PORT [NAME_OR_IP...]}" listen="${2:?usage: up DIR ADDR:PORT}"
  local names=("${@:3}")
  (( ${#names[@]} )) || names=("${listen%:*}")
  [[ -n "${names[0]}" && "${names[0]}" != 0.0.0.0 ]] || die "up: name the certificate's address (NAME_OR_IP)"
  build
  command -v openssl >/dev/null || die "openssl is required"
  mkdir -p "$dir/data"
  dir="$(cd "$dir" && pwd)"
  certs "$dir" "${names[@]}"
  cat > "$dir/config.yml" <<YAML
version: 0.1
log:
  level: info
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: $dir/data}
  delete: {enabled: true}
http:
  addr: $listen
  tls:
    certificate: $dir/pki/tls.crt
    key: $dir/pki/tls.key
YAML
  if [[ -n "${REGISTRY_HTPASSWD:-}" ]]; then
    [[ -s "$REGISTRY_HTPASSWD" ]] || die "REGISTRY_HTPASSWD: no such file, or empty: $REGISTRY_HTPASSWD"
    printf 'auth:\n  htpasswd: {realm: wug-test-registry, path: %s}\n' "$REGISTRY_HTPASSWD" >> "$dir/config.yml"
  fi
  # Its PID is the registry's: nsenter execs it (no fork without a PID namespace). No tracing
  # exporter (it would try localhost:4318 every few seconds).
  local serve=(env OTEL_TRACES_EXPORTER=none OTEL_SDK_DISABLED=true "$BIN" serve "$dir/config.yml")
  if [[ -n "${REGISTRY_NETNS_PID:-}" ]]; then
    nsenter -t "$REGISTRY_NETNS_PID" -n -- "${serve[@]}" </dev/null >>"$dir/registry.log" 2>&1 &
  else
    "${serve[@]}" </dev/null >>"$dir/registry.log" 2>&1 &
  fi
  echo $! > "$dir/registry.pid"
  local deadline=$((SECONDS + 20)) port="${listen##*:}" addr="${listen%:*}"
  [[ -n "$addr" && "$addr" != 0.0.0.0 ]] || addr=127.0.0.1
  # Up: /v2/ answers 200, or 401 when it asks for a login.
  until [[ "$(in_netns curl -sS -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$dir/certs/ca.crt" \
      --connect-to "::$addr:$port" "https://${names[0]}:$port/v2/" 2>/dev/null)" =~ ^(200|401)$ ]]; do
    if ! kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null || (( SECONDS >= deadline )); then
      down "$dir"
      die "the registry did not start on $listen: $(tail -3 "$dir/registry.log" 2>/dev/null)"
    fi
    sleep 0.2
  done
  log "registry $REGISTRY_VERSION on https://$listen (CA $dir/certs/ca.crt)"
  echo "$dir"
}

stop() { stop_pid "$1/registry.pid"; } # stop DIR: the registry; DIR stays (its blobs, certificates)

down() {
  local dir="${1:?usage: down DIR}"
  [[ -d "$dir" ]] || return 0
  stop "$dir"
  rm -rf "$dir"
}

cmd="${1:-}"; shift || true
case "$cmd" in
  build) build ;;
  path) echo "$BIN" ;;
  up) up "$@" ;;
  stop) stop "${1:?usage: stop DIR}" ;;
  down) down "$@" ;;
  *) echo "usage: hack/registry.sh build|path|up DIR ADDR:PORT [NAME_OR_IP...]|stop DIR|down DIR" >&2; exit 2 ;;
esac
