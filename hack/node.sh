#!/usr/bin/env bash
# A real single-node Kubernetes cluster for the end-to-end tests and the demo. Run without
# arguments for usage.
set -euo pipefail

usage() {
  cat >&2 <<USAGE
usage: hack/node.sh COMMAND [ARGS]

  build        build (or reuse) kubelet, kube-controller-manager, kube-scheduler and kube-proxy
               for \$KUBE_VERSION, next to hack/control-plane.sh's binaries of that version
  bin-dir      print where the node binaries of \$KUBE_VERSION are cached
  up [DIR]     start a node in DIR (default: a new temp dir) and print DIR: the control plane of
               hack/control-plane.sh, containerd + runc, bridge CNI, kubelet, kube-proxy,
               kube-controller-manager and kube-scheduler, all inside a network and mount
               namespace of their own; the images of hack/image.sh are imported first.
               DIR/kubeconfig is the admin kubeconfig, through 127.0.0.1 on the host.
  down DIR     stop exactly what was started in DIR, undo what the node changed on the host
               (sysctls, cgroups) and remove DIR
  exec DIR CMD run CMD inside the node's network and mount namespaces (e.g. iptables-save)
  ctr DIR ARGS containerd's ctr on the node, in its k8s.io namespace
  stop-kubelet DIR   stop the node's kubelet (SIGKILL), as a crashed or stopped kubelet: the node
               goes NotReady within about 20 s; containers keep running under containerd
  start-kubelet DIR  start it again (the same configuration and state), and wait until the node
               is Ready
  env DIR      print \`export KUBECONFIG=... PATH=...\` for eval
  registry-up DIR    a TLS registry (hack/registry.sh) in the node's namespace on
               $REGISTRY_IP:5000, and containerd's hosts.toml for it as RKE2 renders Harvester's
               containerd-registry setting: $MIRROR_NAME mirrored to it, and its own
               name, both with its CA ($MIRROR_NO_CA: the same mirror without its CA); with
               REGISTRY_LOGIN=USER:PASSWORD it takes only that login (htpasswd, basic auth).
               Prints \`REGISTRY=... MIRROR=... PUSH=... CA_DIR=...\`:
               PUSH is a loopback address on the host that reaches it (for hack/image.sh push
               --cert-dir CA_DIR)
  registry-up DIR PORT  another registry beside it, on $REGISTRY_IP:PORT (a site's own, e.g.
               the one a release's image is copied into), its own name only in hosts.toml
  registry-stop DIR [PORT]  stop that registry (its blobs stay): pulls through it fail
  registry-down DIR [PORT]  stop it, remove its blobs and its hosts.toml files

The node: $NODE_IP on its network namespace's own loopback interface (the kubelet's and the API
server's address), pods on the bridge $POD_SUBNET, Services in 10.96.0.0/16. None of these
addresses exist outside that namespace, which has no route out: nothing can leave it.

Environment:
  KUBE_VERSION    as for hack/control-plane.sh (default: its default version)
  NODE_OWNER_PID  if set, the node is taken down when that process exits (used by tests)
USAGE
}

log() { echo "node: $*" >&2; }
die() { echo "node: ERROR: $*" >&2; exit 1; }
# shellcheck source=hack/lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
# shellcheck source=hack/lib/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/process.sh"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVICE_IP=10.96.0.1
CP="$REPO_ROOT/hack/control-plane.sh"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
NODE_BINARIES=(kubelet kube-controller-manager kube-scheduler kube-proxy)
# The test registry (registry-up): its own address on the namespace's loopback, and the name
# the node pulls through it as through a mirror (no DNS: only the hosts.toml knows it).
REGISTRY_IP=10.88.0.3 MIRROR_NAME=registry.wug.test MIRROR_NO_CA=registry-no-ca.wug.test
NODE_IP=10.88.0.2 POD_SUBNET=10.244.0.0/24 POD_GATEWAY=10.244.0.1 NODE_NAME=wug-node
# The host-wide sysctls the kubelet sets (pkg/kubelet/cm: setupKernelTunables); restored by down.
HOST_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

resolve() { # sets CP_BIN (the control plane's binaries), NODE_DIR, NODE_BIN
  CP_BIN="$("$CP" bin-dir)" || die "hack/control-plane.sh bin-dir failed"
  NODE_DIR="$(dirname "$CP_BIN")/node"
  NODE_BIN="$NODE_DIR/bin"
  KUBE_VERSION="${KUBE_VERSION:-$("$CP" default-version)}"
  [[ "$KUBE_VERSION" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "KUBE_VERSION must look like v1.35.4, not '$KUBE_VERSION'"
  KUBE_MINOR="${BASH_REMATCH[1]}"
}

check_node_versions() { # fails unless every node binary reports KUBE_VERSION
  local b got
  for b in "${NODE_BINARIES[@]}"; do
    got="$("$NODE_BIN/$b" --version 2>/dev/null | awk '{print $2}')"
    [[ "$got" == "$KUBE_VERSION" ]] || { log "$NODE_BIN/$b reports '$got', expected $KUBE_VERSION"; return 1; }
  done
}

# Every node binary in NODE_BIN (they appear there only when all are built), reporting
# KUBE_VERSION: else the cache is wrong.
node_built() {
  local b
  for b in "${NODE_BINARIES[@]}"; do [[ -x "$NODE_BIN/$b" ]] || return 1; done
  check_node_versions || die "the cache is wrong: remove $NODE_DIR and build again"
}

build() {
  "$CP" build || die "hack/control-plane.sh build failed"
  resolve
  cached node "$NODE_DIR" node_built && return 0
  local src="$NODE_DIR/src" tmp="$NODE_DIR/bin.tmp" cpsrc start=$SECONDS
  cpsrc="$(dirname "$CP_BIN")/src"
  [[ -f "$cpsrc/go.mod" ]] || die "no $cpsrc/go.mod: build the control plane of $KUBE_VERSION first"
  log "building ${NODE_BINARIES[*]} $KUBE_VERSION in $src"
  rm -rf "$src" "$tmp"
  mkdir -p "$src" "$tmp"
  (
    # The control plane's wrapper module already pins k8s.io/kubernetes and its staging modules.
    cp "$cpsrc/go.mod" "$cpsrc/go.sum" "$src/" || exit 1
    cd "$src" || exit 1
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
    go mod tidy || exit 1
    local ldflags
    ldflags="$(kube_ldflags "$KUBE_VERSION" "$KUBE_MINOR")"
    # One go build for all: each binary's link (one core) runs beside the others' compiling.
    go build "${GO_BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$tmp/" "${NODE_BINARIES[@]/#/k8s.io/kubernetes/cmd/}" || exit 1
  ) || die "building the node binaries $KUBE_VERSION failed (see the go output above)"
  rm -rf "$NODE_BIN"
  mv "$tmp" "$NODE_BIN"
  exec 9>&-
  check_node_versions || die "the node binaries just built do not report $KUBE_VERSION"
  log "built the node binaries $KUBE_VERSION in $((SECONDS - start)) s"
}

own_ns() { # own_ns PID: PID is in a network and a mount namespace other than this script's
  local net mnt
  net="$(readlink "/proc/$1/ns/net" 2>/dev/null)" && mnt="$(readlink "/proc/$1/ns/mnt" 2>/dev/null)" \
    && [[ -n "$net" && -n "$mnt" && "$net" != "$(readlink /proc/$$/ns/net)" && "$mnt" != "$(readlink /proc/$$/ns/mnt)" ]]
}

holder_ready() { # the holder has its namespaces and has set them up: it runs `sleep` in them
  local pid="$1"
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == sleep ]] && own_ns "$pid"
}

in_ns() { # in_ns DIR CMD...: CMD in the node's network and mount namespaces
  local dir="$1" holder; shift
  holder="$(cat "$dir/holder.pid")"
  # Never the host's own namespaces, whatever happened to the holder.
  holder_ready "$holder" || die "the node's namespace holder $holder is not ready or gone"
  nsenter -t "$holder" -n -m -- "$@"
}

start_in_ns() { # start_in_ns DIR NAME CMD...: a daemon in the namespaces, DIR/NAME.pid, DIR/NAME.log
  local dir="$1" name="$2" holder; shift 2
  holder="$(cat "$dir/holder.pid")"
  holder_ready "$holder" || die "the node's namespace holder $holder is not ready or gone"
  # nsenter enters the namespaces and execs CMD: the PID is CMD's.
  nsenter -t "$holder" -n -m -- "$@" >>"$dir/$name.log" 2>&1 </dev/null &
  echo $! > "$dir/$name.pid"
}

wait_for() { # wait_for SECONDS WHAT CMD...
  local deadline=$((SECONDS + $1)) what="$2"; shift 2
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { log "timed out waiting for $what"; return 1; }
    sleep 0.2
  done
}

cgroup_dirs() { # the node's cgroup in every v1 hierarchy (and the v2 one of a hybrid host)
  local name="$1" c
  for c in /sys/fs/cgroup/*/; do
    [[ -d "$c" ]] && echo "${c%/}/$name"
  done
}

write_configs() { # write_configs DIR
  local dir="$1" cp="$1/cp"
  mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/cni/ipam" "$dir/kubelet" "$dir/kubelet-plugins"
  cat > "$dir/containerd/config.toml" <<TOML
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
# Nothing under /opt, no snapshotters this kernel lacks, no tracing.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  # The pause image of hack/image.sh, imported before the kubelet starts: never pulled.
  sandbox_image = "registry.k8s.io/pause:wug"
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below its own.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    # Mirrors and registry CAs as RKE2 renders Harvester's containerd-registry setting: one
    # hosts.toml per registry name (registry-up writes them; none by default).
    config_path = "$dir/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
TOML
  cat > "$dir/cni/net.d/10-wug.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "wug",
  "plugins": [{
    "type": "bridge", "bridge": "wug-br0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": "$dir/cni/ipam",
      "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GATEWAY"}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
JSON
  cat > "$dir/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$dir/containerd.sock
# The host has cgroup v1: allowed with the cgroupfs driver. The pods' cgroups live under
# /$CGROUP_NAME in every hierarchy, which down removes.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: /$CGROUP_NAME
failSwapOn: false
address: $NODE_IP
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $cp/ca.crt}
authorization: {mode: Webhook}
# No DNS for the pods: the guard reaches the API server by the Service's IP.
resolvConf: ""
rotateCertificates: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# Renewed every quarter of this (2.5 s); see --node-monitor-grace-period in up.
nodeLeaseDurationSeconds: 10
YAML
  cat > "$dir/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $cp/kubeconfig}
mode: iptables
clusterCIDR: $POD_SUBNET
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Zero: kube-proxy leaves the conntrack sysctls alone (nf_conntrack_max is host-wide).
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

start_kubelet() { # start_kubelet DIR: the kubelet, DIR/kubelet.pid
  start_in_ns "$1" kubelet "$NODE_BIN/kubelet" --config "$1/kubelet/config.yaml" \
    --kubeconfig "$1/cp/kubeconfig" --root-dir "$1/kubelet" --cert-dir "$1/kubelet/pki" \
    --volume-plugin-dir "$1/kubelet-plugins" --node-ip "$NODE_IP" --hostname-override "$NODE_NAME"
}

node_ready() { # node_ready DIR
  [[ "$("$CP_BIN/kubectl" --kubeconfig "$1/kubeconfig" get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

service_routed() { # kube-proxy has written the `kubernetes` Service's rules
  in_ns "$1" iptables-save -t nat | grep -q -- "-d ${SERVICE_IP}/32 .* --dport 443"
}

up() {
  build >/dev/null
  resolve
  if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! command -v iptables >/dev/null \
    || [[ ! -x /usr/lib/cni/bridge ]]; then
    die "the node needs containerd, runc, containernetworking-plugins and iptables (apt-get install)"
  fi
  local dir="${1:-}"
  [[ -n "$dir" ]] || dir="$(mktemp -d "${TMPDIR:-/tmp}/wug-node.XXXXXX")"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  (( ${#dir} + 30 <= 107 )) || die "state dir path too long for the sockets: $dir"
  local start_ms; start_ms=$(date +%s%3N)
  CGROUP_NAME="$(basename "$dir")"
  echo "$CGROUP_NAME" > "$dir/cgroup.name"
  # What the node changes on the host, recorded first so that down can undo it.
  local s
  for s in "${HOST_SYSCTLS[@]}"; do echo "$s $(cat "/proc/sys/$s")"; done > "$dir/sysctls"
  if [[ -n "${NODE_OWNER_PID:-}" ]]; then
    # Reaper: when the owning process (a test run) exits, however it exits, take the node down.
    # shellcheck disable=SC2016 # the inner script's $1..$3 are its own arguments
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; "$2" down "$3"' _ \
      "$NODE_OWNER_PID" "$REPO_ROOT/hack/node.sh" "$dir" </dev/null >/dev/null 2>&1 &
  fi
  # The namespaces: a process that only holds them. Mounts made inside (containerd's snapshots,
  # the kubelet's volumes) are never seen on the host and go with it. tmpfs on /run, /var/log
  # and /var/lib there keep what the node writes to fixed paths (runc's and the shims' state,
  # /var/log/pods, /var/lib/kubelet/device-plugins, /var/lib/cni) off the host's disk.
  # unshare creates them and sets the propagation, then execs sleep: only then is it ready, and
  # nothing enters before (it would be the host's own namespaces).
  unshare --net --mount --propagation slave sleep infinity </dev/null >/dev/null 2>&1 &
  echo $! > "$dir/holder.pid"
  wait_for 10 "the namespaces" holder_ready "$(cat "$dir/holder.pid")" \
    || fail "$dir" "cannot create the namespaces (unshare --net --mount)"
  in_ns "$dir" sh -euc "
    mount -t tmpfs -o mode=755 wug-run /run
    mount -t tmpfs -o mode=755 wug-log /var/log
    mount -t tmpfs -o mode=755 wug-lib /var/lib
    ip link set lo up
    ip addr add $NODE_IP/32 dev lo" || fail "$dir" "cannot set up the node's namespaces"
  local c
  while read -r c; do
    mkdir -p "$c"
    if [[ -f "$(dirname "$c")/cpuset.cpus" ]]; then
      cat "$(dirname "$c")/cpuset.cpus" > "$c/cpuset.cpus"
      cat "$(dirname "$c")/cpuset.mems" > "$c/cpuset.mems"
    fi
  done < <(cgroup_dirs "$CGROUP_NAME")
  write_configs "$dir"
  # The control plane, inside the namespace, with a loopback forwarder for the host.
  if ! in_ns "$dir" env CP_NODE_IP="$NODE_IP" "$CP" up "$dir/cp" >/dev/null 2>"$dir/control-plane.log"; then
    cat "$dir/control-plane.log" >&2
    fail "$dir" "the control plane did not start: $(grep ERROR "$dir/control-plane.log" | tail -3)"
  fi
  python3 "$REPO_ROOT/hack/netns-forward.py" "$(cat "$dir/holder.pid")" "$(cat "$dir/cp/api.port")" \
    "$dir/host.port" </dev/null >>"$dir/forward.log" 2>&1 &
  echo $! > "$dir/forward.pid"
  wait_for 10 "the forwarder" test -s "$dir/host.port" || fail "$dir" "the loopback forwarder did not start"
  sed "s#server: https://127.0.0.1:.*#server: https://127.0.0.1:$(cat "$dir/host.port")#" \
    "$dir/cp/kubeconfig" > "$dir/kubeconfig"
  start_in_ns "$dir" containerd containerd --config "$dir/containerd/config.toml"
  wait_for 30 "containerd" ctr --address "$dir/containerd.sock" version \
    || fail "$dir" "containerd did not start: $(tail -5 "$dir/containerd.log")"
  bash "$REPO_ROOT/hack/image.sh" import "$dir/containerd.sock" || fail "$dir" "importing the images failed"
  start_kubelet "$dir"
  # A node whose kubelet stops is NotReady after 20 s (the default is 50 s), checked every 2 s:
  # the e2e test of a NotReady node takes seconds instead of a minute. The kubelet renews its
  # lease every 2.5 s (nodeLeaseDurationSeconds: 10), so a live node never comes near it.
  start_in_ns "$dir" kube-controller-manager "$NODE_BIN/kube-controller-manager" \
    --node-monitor-grace-period 20s --node-monitor-period 2s \
    --kubeconfig "$dir/cp/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
    --service-account-private-key-file "$dir/cp/sa.key" --root-ca-file "$dir/cp/ca.crt" \
    --use-service-account-credentials=false --controllers '*' \
    --flex-volume-plugin-dir "$dir/kubelet-plugins"
  start_in_ns "$dir" kube-scheduler "$NODE_BIN/kube-scheduler" \
    --kubeconfig "$dir/cp/kubeconfig" --leader-elect=false --bind-address 127.0.0.1
  start_in_ns "$dir" kube-proxy "$NODE_BIN/kube-proxy" --config "$dir/kube-proxy.yaml"
  wait_for 120 "node $NODE_NAME Ready" node_ready "$dir" \
    || fail "$dir" "node $NODE_NAME did not become Ready: $(tail -5 "$dir/kubelet.log")"
  wait_for 60 "the kubernetes Service's rules" service_routed "$dir" \
    || fail "$dir" "kube-proxy did not route the kubernetes Service: $(tail -5 "$dir/kube-proxy.log")"
  local p
  for p in containerd kubelet kube-controller-manager kube-scheduler kube-proxy; do
    kill -0 "$(cat "$dir/$p.pid")" 2>/dev/null || fail "$dir" "$p exited: $(tail -5 "$dir/$p.log")"
  done
  log "$NODE_NAME $KUBE_VERSION Ready in $(( $(date +%s%3N) - start_ms )) ms: $dir"
  echo "$dir"
}

registry_dir() { # registry_dir DIR PORT: the registry's state (5000's: DIR/registry)
  if [[ "$2" == 5000 ]]; then echo "$1/registry"; else echo "$1/registry-$2"; fi
}

hosts_toml() { # hosts_toml DIR [PORT]: certs.d/*/hosts.toml, as RKE2 renders Harvester's setting
  local port="${2:-5000}" ca d="$1/containerd/certs.d" name
  ca="$(registry_dir "$1" "$port")/certs/ca.crt"
  if [[ "$port" != 5000 ]]; then
    mkdir -p "$d/$REGISTRY_IP:$port"
    printf 'server = "https://%s"\n\n[host."https://%s"]\n  capabilities = ["pull", "resolve"]\n  ca = ["%s"]\n' \
      "$REGISTRY_IP:$port" "$REGISTRY_IP:$port" "$ca" > "$d/$REGISTRY_IP:$port/hosts.toml"
    return
  fi
  mkdir -p "$d/$MIRROR_NAME" "$d/$REGISTRY_IP:5000" "$d/$MIRROR_NO_CA"
  # registries.yaml: mirrors: {"$MIRROR_NAME": {endpoint: ["https://$REGISTRY_IP:5000"]}},
  # configs: {"$REGISTRY_IP:5000": {tls: {ca_file: CA}}}; the registry by its own address too.
  # (containerd 1.6 ignores a top-level `ca`, for `server`: the CA goes on the host.)
  for name in "$MIRROR_NAME" "$REGISTRY_IP:5000"; do
    cat > "$d/$name/hosts.toml" <<TOML
server = "https://$name"

[host."https://$REGISTRY_IP:5000"]
  capabilities = ["pull", "resolve"]
  ca = ["$ca"]
TOML
  done
  # The same mirror with its CA forgotten: pulls fail on TLS (hack/job.sh images' TLS case).
  cat > "$d/$MIRROR_NO_CA/hosts.toml" <<TOML
server = "https://$MIRROR_NO_CA"

[host."https://$REGISTRY_IP:5000"]
  capabilities = ["pull", "resolve"]
TOML
}

registry_up() { # registry_up DIR [PORT]
  local dir="$1" port="${2:-5000}" holder reg
  [[ "$port" =~ ^[0-9]+$ ]] || die "registry-up: PORT must be a number, not '$port'"
  reg="$(registry_dir "$dir" "$port")"
  bash "$REPO_ROOT/hack/registry.sh" build >/dev/null || die "building the registry failed"
  holder="$(cat "$dir/holder.pid")"
  holder_ready "$holder" || die "the node's namespace holder $holder is not ready or gone"
  in_ns "$dir" sh -c "ip addr show dev lo | grep -q ' $REGISTRY_IP/32 ' || ip addr add $REGISTRY_IP/32 dev lo" \
    || die "cannot add $REGISTRY_IP to the node's loopback"
  if [[ -f "$reg/registry.pid" ]] && alive "$(cat "$reg/registry.pid")"; then
    die "the registry of $dir is already running"
  fi
  rm -rf "$reg"
  local htpasswd=""
  if [[ -n "${REGISTRY_LOGIN:-}" ]]; then
    [[ "$REGISTRY_LOGIN" == ?*:?* ]] || die "REGISTRY_LOGIN must be USER:PASSWORD"
    command -v htpasswd >/dev/null || die "htpasswd is required for REGISTRY_LOGIN (Debian's apache2-utils: hack/packages.txt)"
    mkdir -p "$reg"
    htpasswd -Bbn "${REGISTRY_LOGIN%%:*}" "${REGISTRY_LOGIN#*:}" > "$reg/htpasswd" || die "htpasswd failed"
    htpasswd="$reg/htpasswd"
  fi
  REGISTRY_NETNS_PID="$holder" REGISTRY_HTPASSWD="$htpasswd" bash "$REPO_ROOT/hack/registry.sh" up "$reg" ":$port" "$REGISTRY_IP" 127.0.0.1 \
    >/dev/null || die "the registry did not start"
  # The host reaches it only through a loopback forward (nothing is added to its interfaces).
  python3 "$REPO_ROOT/hack/netns-forward.py" "$holder" "$port" "$reg/host.port" </dev/null \
    >>"$reg/forward.log" 2>&1 &
  echo $! > "$reg/forward.pid"
  wait_for 10 "the registry's forwarder" test -s "$reg/host.port" || die "the registry's forwarder did not start"
  hosts_toml "$dir" "$port"
  local mirrors=""
  [[ "$port" != 5000 ]] || mirrors=" MIRROR=$MIRROR_NAME MIRROR_NO_CA=$MIRROR_NO_CA"
  echo "REGISTRY=$REGISTRY_IP:$port$mirrors PUSH=127.0.0.1:$(cat "$reg/host.port") CA_DIR=$reg/certs"
}

registry_down() { # registry_down DIR [PORT]
  local port="${2:-5000}" reg
  reg="$(registry_dir "$1" "$port")"
  kill_pid "$reg/forward.pid"
  [[ ! -d "$reg" ]] || bash "$REPO_ROOT/hack/registry.sh" down "$reg"
  rm -rf "$1/containerd/certs.d/$REGISTRY_IP:$port"
  [[ "$port" != 5000 ]] || rm -rf "$1/containerd/certs.d/$MIRROR_NAME" "$1/containerd/certs.d/$MIRROR_NO_CA"
}

fail() { # fail DIR MESSAGE: take the half-started node down, then die with MESSAGE
  local msg="$2"
  down "$1" >/dev/null 2>&1 || true
  die "$msg"
}

ns_pids() { # the processes in the namespaces of PID (by namespace inode), but not PID itself
  local holder="$1" net mnt p
  net="$(readlink "/proc/$holder/ns/net" 2>/dev/null)" || return 0
  mnt="$(readlink "/proc/$holder/ns/mnt" 2>/dev/null)" || return 0
  for p in /proc/[0-9]*; do
    p="${p#/proc/}"
    [[ "$p" != "$holder" ]] || continue
    if [[ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" == "$net" \
       || "$(readlink "/proc/$p/ns/mnt" 2>/dev/null)" == "$mnt" ]]; then
      echo "$p"
    fi
  done
}

cgroup_pids() { # the processes in the node's cgroups (the pods' containers)
  local c
  while read -r c; do
    [[ -d "$c" ]] && find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null
  done < <(cgroup_dirs "$1") | sort -u
}

down() {
  local dir="${1:?usage: down DIR}"
  [[ -d "$dir" ]] || return 0
  [[ -f "$dir/sysctls" ]] || die "$dir is not a node's directory"
  # Every step goes on whatever the one before did: down must leave the host as it found it.
  set +e
  exec 8>"$dir/down.lock"
  flock 8
  local name="" p holder="" c key value
  name="$(cat "$dir/cgroup.name" 2>/dev/null)"
  holder="$(cat "$dir/holder.pid" 2>/dev/null)"
  # A test node: nothing to shut down gracefully, and SIGKILL is quick. The kubelet first, then
  # the host-wide sysctls it set, as they were.
  for p in kubelet kube-proxy kube-scheduler kube-controller-manager; do kill_pid "$dir/$p.pid"; done
  for p in "$dir"/registry "$dir"/registry-*; do
    kill_pid "$p/registry.pid"
    kill_pid "$p/forward.pid"
  done
  while read -r key value; do
    [[ "$(cat "/proc/sys/$key")" == "$value" ]] || echo "$value" > "/proc/sys/$key"
  done < "$dir/sysctls"
  # The pods' processes, by the node's cgroups; then containerd and its shims, by namespace.
  if [[ -n "$name" ]]; then
    for p in $(cgroup_pids "$name"); do kill -9 "$p" 2>/dev/null; done
  fi
  kill_pid "$dir/containerd.pid"
  [[ ! -d "$dir/cp" ]] || "$CP" down "$dir/cp"
  kill_pid "$dir/forward.pid"
  if [[ -n "$holder" ]] && alive "$holder"; then
    # Only the node's own namespaces: never the processes of the host's.
    if own_ns "$holder"; then
      for p in $(ns_pids "$holder"); do kill -9 "$p" 2>/dev/null; done
    fi
    kill -9 "$holder" 2>/dev/null
    for _ in $(seq 50); do alive "$holder" || break; sleep 0.1; done
  fi
  # Every cgroup the kubelet and runc made under the node's, deepest first.
  if [[ -n "$name" ]]; then
    for _ in $(seq 20); do
      for p in $(cgroup_pids "$name"); do kill -9 "$p" 2>/dev/null; done
      while read -r c; do
        [[ ! -d "$c" ]] || find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
      done < <(cgroup_dirs "$name")
      [[ -n "$(while read -r c; do [[ ! -d "$c" ]] || echo "$c"; done < <(cgroup_dirs "$name"))" ]] || break
      sleep 0.5
    done
  fi
  exec 8>&-
  rm -rf "$dir"
  set -e
}

cmd="${1:-}"; shift || true
case "$cmd" in
  build) build ;;
  bin-dir) resolve; echo "$NODE_BIN" ;;
  up) up "$@" ;;
  down) resolve; down "$@" ;;
  exec) d="${1:?usage: exec DIR CMD...}"; shift; in_ns "$d" "$@" ;;
  ctr) d="${1:?usage: ctr DIR ARGS...}"; shift; ctr --address "$d/containerd.sock" -n k8s.io "$@" ;;
  stop-kubelet) d="${1:?usage: stop-kubelet DIR}"; kill_pid "$d/kubelet.pid" ;;
  start-kubelet)
    d="${1:?usage: start-kubelet DIR}"; resolve
    [[ ! -f "$d/kubelet.pid" ]] || ! alive "$(cat "$d/kubelet.pid")" || die "the kubelet of $d is running"
    start_kubelet "$d"
    wait_for 120 "node $NODE_NAME Ready" node_ready "$d" \
      || die "node $NODE_NAME did not become Ready again: $(tail -5 "$d/kubelet.log")" ;;
  registry-up) registry_up "${1:?usage: registry-up DIR [PORT]}" "${2:-5000}" ;;
  registry-stop)
    d="${1:?usage: registry-stop DIR [PORT]}"
    bash "$REPO_ROOT/hack/registry.sh" stop "$(registry_dir "$d" "${2:-5000}")" ;;
  registry-down) registry_down "${1:?usage: registry-down DIR [PORT]}" "${2:-5000}" ;;
  env) resolve; d="${1:?usage: env DIR}"; echo "export KUBECONFIG=$d/kubeconfig PATH=$CP_BIN:\$PATH" ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
