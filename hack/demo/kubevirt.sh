# shellcheck shell=bash
# The real workload updater, for `bash hack/demo.sh --kubevirt` (sourced by hack/demo.sh, which
# defines k, section, step, dir, BIN, KUBECTL and REPO_ROOT): KubeVirt's own virt-controller of
# $KV_VERSION (hack/kubevirt.sh run, in harvester-system, as on Harvester) with KV_VMIS running
# VMIs on KV_NODES nodes, beside the resident guard (the release binary with PHASE=watch, as the
# chart's Deployment runs it, here a process on this machine with the admin's kubeconfig).
#
#   1. before the upgrade: 0 outdated, 0 migrations;
#   2. the modelled Harvester Upgrade to v1.7.1 is created: the guard suspends (methods []);
#   3. KubeVirt "upgraded" as virt-operator rolls out (the CR Deploying toward a new deployment,
#      virt-controller restarted with a new --launcher-image, the CR Deployed): every VM
#      outdated, and 0 workload-update migrations for KV_HOLD seconds;
#   4. the Upgrade Succeeded: the guard restores the methods, and the wave is counted;
#   5. the contrast, on a control plane of its own (KubeVirt takes one CR per cluster): the same
#      KubeVirt upgrade without the guard, and the migrations it starts.
#
# Each figure printed is counted in the run. The demo plays what is missing (no node): the
# scheduler and the kubelet (each launcher pod bound, its status Running), virt-handler (the VMI
# Running on its node with its launcher image: a merge patch of the object, as the VMI CRD has no
# status subresource) and virt-operator (the CR's status).
# shellcheck disable=SC2154 # k, dir, BIN, KUBECTL, REPO_ROOT: hack/demo.sh's

KV_VERSION="${KUBEVIRT_VERSION:-v1.6.0}"
KV_NS=harvester-system
KV_VM_NS=vms
KV_NODES=2
KV_VMIS=4
KV_HOLD="${KV_HOLD:-40}"
KV_LABEL=demo.workload-update-guard/vmi
KV_WORKLOAD_UPDATE=kubevirt.io/workloadUpdateMigration
# The launcher images before and after the modelled KubeVirt upgrade (names only: no node pulls them).
KV_LAUNCHER_BEFORE=localhost/virt-launcher:v1.6.0
KV_LAUNCHER_AFTER=localhost/virt-launcher:v1.6.1

# The run's counts, for its figures (target/demo-run.md): one line each.
kv_figures=()
kv_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
kv_ms() { date +%s%3N; }
kv_s() { awk -v m="$1" 'BEGIN { printf "%.1f", m / 1000 }'; } # kv_s MS: seconds, one decimal

# kv_state KUBECONFIG: the demo's Harvester-like state without its two fixture migrations (the
# real updater's own are counted here), the VMs' namespace and KV_NODES Ready nodes. The nodes
# have no kubelet: tainted, so that the scheduler places nothing there (the guard's pod, on the
# chart's node); the demo binds each VM's launcher pod itself.
kv_state() {
  local kc="$1" i now
  awk 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } !/\nkind: VirtualMachineInstanceMigration\n/' \
    "$REPO_ROOT/hack/demo/harvester.yaml" \
    | "$KUBECTL" --kubeconfig "$kc" apply --server-side --field-manager helm -f - >/dev/null
  "$KUBECTL" --kubeconfig "$kc" create namespace "$KV_VM_NS" >/dev/null
  now="$(kv_now)"
  for i in $(seq 0 $((KV_NODES - 1))); do
    "$KUBECTL" --kubeconfig "$kc" create -f - >/dev/null <<JSON
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-$i",
 "labels": {"kubevirt.io/schedulable": "true", "kubernetes.io/hostname": "node-$i"}},
 "spec": {"taints": [{"key": "demo.workload-update-guard/no-kubelet", "effect": "NoSchedule"}]}}
JSON
    "$KUBECTL" --kubeconfig "$kc" patch node "node-$i" --subresource=status --type=merge -p '{"status": {
      "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "modelled",
                      "lastHeartbeatTime": "'"$now"'", "lastTransitionTime": "'"$now"'"}],
      "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
      "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}' >/dev/null
  done
}

# kv_heartbeat KUBECONFIG: the kubelet's heartbeat for the KV_NODES nodes (their Leases renewed
# every 5 s), where a controller-manager would otherwise find them NotReady after its grace period
# and taint them; in the background, until killed.
kv_heartbeat() {
  local i
  while :; do
    for i in $(seq 0 $((KV_NODES - 1))); do
      "$KUBECTL" --kubeconfig "$1" apply --server-side --field-manager kubelet -f - >/dev/null <<JSON || true
{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "node-$i", "namespace": "kube-node-lease"},
 "spec": {"holderIdentity": "node-$i", "leaseDurationSeconds": 40, "renewTime": "$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"}}
JSON
    done
    sleep 5
  done
}

# kv_reset DIR KUBECONFIG: virt-controller stopped, the VMs, their launcher pods and their
# migrations removed (no virt-handler or kubelet finishes them: finalizers dropped, pods forced).
kv_reset() {
  local kind o
  bash "$REPO_ROOT/hack/kubevirt.sh" stop "$1/virt-controller"
  for kind in virtualmachineinstancemigrations virtualmachineinstances; do
    for o in $("$KUBECTL" --kubeconfig "$2" -n "$KV_VM_NS" get "$kind" -o name); do
      "$KUBECTL" --kubeconfig "$2" -n "$KV_VM_NS" patch "$o" --type merge -p '{"metadata": {"finalizers": null}}' >/dev/null
    done
    "$KUBECTL" --kubeconfig "$2" -n "$KV_VM_NS" delete "$kind" --all --wait >/dev/null
  done
  "$KUBECTL" --kubeconfig "$2" -n "$KV_VM_NS" delete pods --all --force --grace-period=0 >/dev/null 2>&1
}

# kv_status KUBECONFIG JSON: virt-operator's status of the CR.
kv_status() {
  "$KUBECTL" --kubeconfig "$1" -n "$KV_NS" patch kubevirt kubevirt --subresource=status --type=merge \
    -p "{\"status\": $2}" >/dev/null
}
kv_deployed() { # kv_deployed KUBECONFIG N: the rollout of deployment N finished
  kv_status "$1" '{"phase": "Deployed", "observedDeploymentID": "deployment-'"$2"'",
    "targetDeploymentID": "deployment-'"$2"'", "observedKubeVirtVersion": "'"$KV_VERSION"'",
    "targetKubeVirtVersion": "'"$KV_VERSION"'"}'
}

# kv_controller DIR KUBECONFIG IMAGE: KubeVirt's virt-controller, leading (its Lease held).
kv_controller() {
  KUBEVIRT_VERSION="$KV_VERSION" KV_OWNER_PID=$$ bash "$REPO_ROOT/hack/kubevirt.sh" run "$1/virt-controller" "$2" "$KV_NS" "$3"
}

# kv_vmis KUBECONFIG: KV_VMIS VMIs, each Running on its node with its launcher pod Running.
kv_vmis() {
  local kc="$1" i name pod node uid image start now
  for i in $(seq 0 $((KV_VMIS - 1))); do
    "$KUBECTL" --kubeconfig "$kc" create -f - >/dev/null <<JSON
{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
 "metadata": {"name": "vm-$i", "namespace": "$KV_VM_NS", "labels": {"$KV_LABEL": "vm-$i"}},
 "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}},
          "terminationGracePeriodSeconds": 0}}
JSON
  done
  for i in $(seq 0 $((KV_VMIS - 1))); do
    name="vm-$i" node="node-$((i % KV_NODES))" start=$SECONDS
    # virt-controller's launcher pod for the VMI (it copies the VMI's labels).
    until pod="$("$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" get pods -l "$KV_LABEL=$name" -o json | jq -ce '.items[0] // empty')"; do
      (( SECONDS - start < 60 )) || { echo "demo: virt-controller made no launcher pod for $name in 60 s" >&2; return 1; }
      sleep 0.5
    done
    # The scheduler's part: the binding; the kubelet's: the pod Running.
    jq -n --arg pod "$(jq -r .metadata.name <<<"$pod")" --arg ns "$KV_VM_NS" --arg node "$node" \
      '{apiVersion: "v1", kind: "Binding", metadata: {name: $pod, namespace: $ns},
        target: {apiVersion: "v1", kind: "Node", name: $node}}' \
      | "$KUBECTL" --kubeconfig "$kc" create --raw "/api/v1/namespaces/$KV_VM_NS/pods/$(jq -r .metadata.name <<<"$pod")/binding" -f - >/dev/null
    now="$(kv_now)"
    "$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" patch pod "$(jq -r .metadata.name <<<"$pod")" --subresource=status --type=merge \
      -p "$(jq -c --arg now "$now" '{status: {phase: "Running", podIP: "10.0.0.1", podIPs: [{ip: "10.0.0.1"}], startTime: $now,
            conditions: [{type: "Ready", status: "True", lastTransitionTime: $now},
                         {type: "PodScheduled", status: "True", lastTransitionTime: $now}],
            containerStatuses: [.spec.containers[] | {name, image, imageID: .image, ready: true, started: true,
              restartCount: 0, containerID: ("containerd://" + .name), state: {running: {startedAt: $now}}}]}}' <<<"$pod")" >/dev/null
    # virt-handler's part: the VMI Running there, with its launcher's image (no status subresource).
    uid="$(jq -r .metadata.uid <<<"$pod")"
    image="$(jq -r '.spec.containers[] | select(.name == "compute") | .image' <<<"$pod")"
    "$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" patch vmi "$name" --type=merge -p "$(jq -nc \
      --arg node "$node" --arg image "$image" --arg uid "$uid" --arg now "$now" \
      '{status: {phase: "Running", nodeName: $node, launcherContainerImageVersion: $image,
        conditions: [{type: "Ready", status: "True", lastTransitionTime: $now, lastProbeTime: null},
                     {type: "LiveMigratable", status: "True", lastTransitionTime: $now, lastProbeTime: null}],
        activePods: {($uid): $node}, migrationMethod: "BlockMigration",
        interfaces: [{ipAddress: "10.0.0.1", name: "default"}]}}')" >/dev/null
  done
}

# What the updater counts (the CR's status) and what it did (its migrations).
kv_outdated() {
  "$KUBECTL" --kubeconfig "$1" -n "$KV_NS" get kubevirt kubevirt -o jsonpath='{.status.outdatedVirtualMachineInstanceWorkloads}'
}
kv_migrations() {
  "$KUBECTL" --kubeconfig "$1" get virtualmachineinstancemigrations -A -o json \
    | jq --arg a "$KV_WORKLOAD_UPDATE" '[.items[] | select(.metadata.annotations[$a] != null)] | length'
}
# kv_until READ KUBECONFIG WANT: until READ (kv_outdated, kv_methods) reads WANT, polled every
# 0.2 s for at most 90 s.
kv_until() {
  local start=$SECONDS
  until [[ "$("$1" "$2")" == "$3" ]]; do
    (( SECONDS - start < 90 )) || { echo "demo: $1 reads $("$1" "$2"), not $3, after 90 s" >&2; return 1; }
    sleep 0.2
  done
}
kv_wait_outdated() { kv_until kv_outdated "$@"; } # kv_wait_outdated KUBECONFIG N: the updater counts N
# kv_count_wave KUBECONFIG WHAT: polls the migrations (every 0.5 s, at most 90 s) until every VM
# has one; prints when the first came and when all had, after this call.
kv_count_wave() {
  local kc="$1" what="$2" start n first="" line
  start=$(kv_ms)
  while :; do
    n="$(kv_migrations "$kc")"
    [[ -n "$first" || "$n" == 0 ]] || first=$(( $(kv_ms) - start ))
    (( n < KV_VMIS )) || break
    (( $(kv_ms) - start < 90000 )) || { echo "  $what: $n workload-update migrations in 90 s, not $KV_VMIS" ; return 1; }
    sleep 0.5
  done
  line="$what: the first workload-update migration $(kv_s "$first") s after, all $n after $(kv_s $(( $(kv_ms) - start ))) s"
  echo "  $line"
  kv_figures+=("$line")
}
kv_counts() { echo "  outdated VMs (the CR's status, virt-controller's count): $(kv_outdated "$1"); workload-update migrations: $(kv_migrations "$1")"; }

kv_methods() { "$KUBECTL" --kubeconfig "$1" -n "$KV_NS" get kubevirt kubevirt -o jsonpath='{.spec.workloadUpdateStrategy.workloadUpdateMethods}'; }
kv_wait_methods() { kv_until kv_methods "$@"; } # kv_wait_methods KUBECONFIG WANT: the methods are WANT

# kv_upgrade DIR KUBECONFIG: virt-operator's rollout of KubeVirt's new launcher image.
kv_upgrade() {
  kv_status "$2" '{"phase": "Deploying", "targetDeploymentID": "deployment-2"}'
  bash "$REPO_ROOT/hack/kubevirt.sh" stop "$1/virt-controller"
  kv_controller "$1" "$2" "$KV_LAUNCHER_AFTER"
  kv_deployed "$2" 2
}

kv_upgrade_label() { # kv_upgrade_label KUBECONFIG STATE
  "$KUBECTL" --kubeconfig "$1" -n "$KV_NS" label upgrades.harvesterhci.io hvst-upgrade-demo --overwrite \
    "harvesterhci.io/upgradeState=$2" >/dev/null
}

# kv_cluster DIR KUBECONFIG: on the state (kv_state), virt-controller before the upgrade, the VMs running.
kv_cluster() {
  kv_deployed "$2" 1
  kv_controller "$1" "$2" "$KV_LAUNCHER_BEFORE"
  kv_vmis "$2"
  kv_wait_outdated "$2" 0
}

kubevirt_story() {
  local kc="$dir/kubeconfig" guard port waited=0 n start
  section "KubeVirt $KV_VERSION's own virt-controller (its workload updater) in $KV_NS: $KV_VMIS VMs running on $KV_NODES nodes"
  kv_cluster "$dir" "$kc"
  echo "  virt-controller's launcher image: $KV_LAUNCHER_BEFORE; KubeVirt workloadUpdateMethods: $(kv_methods "$kc")"
  kv_counts "$kc"

  section "the resident guard (PHASE=watch, as the chart's Deployment runs it; here a process on this machine)"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  mkdir -p "$dir/guard"
  KUBECONFIG="$kc" PHASE=watch WATCH_STATE_DIR="$dir/guard" TERMINATION_MESSAGE_PATH="" LOG_FORMAT=text \
    RUST_LOG=info METRICS_PORT="$port" "$BIN" >/dev/null 2>"$dir/guard.log" &
  guard=$!
  sleep 3
  kill -0 "$guard" || { echo "demo: the guard exited:" >&2; cat "$dir/guard.log" >&2; return 1; }
  echo "  running (its log: $dir/guard.log); KubeVirt workloadUpdateMethods: $(kv_methods "$kc")"

  section "1. Harvester's Upgrade to v1.7.1 is created: the guard suspends the updates"
  start=$(kv_ms)
  "$KUBECTL" --kubeconfig "$kc" -n "$KV_NS" create -f - >/dev/null <<YAML
apiVersion: harvesterhci.io/v1beta1
kind: Upgrade
metadata:
  name: hvst-upgrade-demo
  namespace: $KV_NS
  labels: {harvesterhci.io/latestUpgrade: "true", harvesterhci.io/upgradeState: PreparingLoggingInfra}
spec: {version: v1.7.1}
YAML
  kv_wait_methods "$kc" "[]"
  echo "  KubeVirt workloadUpdateMethods: $(kv_methods "$kc") ($(kv_s $(( $(kv_ms) - start ))) s after the Upgrade's creation, polled every 0.2 s)"
  kv_upgrade_label "$kc" UpgradingSystemServices

  section "2. KubeVirt upgraded (virt-operator's rollout: Deploying, virt-controller restarted with $KV_LAUNCHER_AFTER, Deployed)"
  kv_upgrade "$dir" "$kc"
  kv_wait_outdated "$kc" "$KV_VMIS"
  echo "  every VM outdated (virt-controller's count: $(kv_outdated "$kc")); watching for ${KV_HOLD} s (the updater requeues every 30 s) ..."
  while (( waited < KV_HOLD )); do
    n="$(kv_migrations "$kc")"
    (( n == 0 )) || { echo "demo: $n workload-update migrations while suspended" >&2; return 1; }
    sleep 2; waited=$((waited + 2))
  done
  kv_counts "$kc"
  kv_figures+=("with the guard: KubeVirt upgraded, $(kv_outdated "$kc") of $KV_VMIS VMs outdated, 0 workload-update migrations in ${KV_HOLD} s")
  echo "  so after ${KV_HOLD} s: 0 migrations, while $(kv_outdated "$kc") VMs are outdated (the guard's status says so too:)"
  KUBECONFIG="$kc" PHASE=status TERMINATION_MESSAGE_PATH="" RUST_LOG=warn "$BIN" 2>/dev/null | grep -i 'outdated\|held back' | sed 's/^/    /' || true

  section "3. the Upgrade ends (Succeeded): the guard restores the updates, and the wave starts"
  kv_upgrade_label "$kc" UpgradingNodes
  kv_upgrade_label "$kc" Succeeded
  start=$(kv_ms)
  kv_wait_methods "$kc" '["LiveMigrate"]'
  echo "  KubeVirt workloadUpdateMethods: $(kv_methods "$kc") ($(kv_s $(( $(kv_ms) - start ))) s after Succeeded)"
  kv_count_wave "$kc" "with the guard, after the restore"
  kv_counts "$kc"
  kill -TERM "$guard"; wait "$guard" || true
  bash "$REPO_ROOT/hack/kubevirt.sh" stop "$dir/virt-controller"
  "$KUBECTL" --kubeconfig "$kc" -n "$KV_NS" delete upgrades.harvesterhci.io hvst-upgrade-demo >/dev/null

  kubevirt_contrast
}

# The same KubeVirt upgrade without the guard, on a control plane of its own.
kubevirt_contrast() {
  local d kc
  section "4. for contrast: the same KubeVirt upgrade without the guard (a control plane of its own)"
  d="$(KUBEVIRT_CRDS=all KUBEVIRT_VERSION="$KV_VERSION" step "starting another kube-apiserver and etcd" bash "$REPO_ROOT/hack/control-plane.sh" up)"
  kc="$d/kubeconfig"
  { kv_state "$kc" && kv_cluster "$d" "$kc"; } || { bash "$REPO_ROOT/hack/kubevirt.sh" stop "$d/virt-controller"; bash "$REPO_ROOT/hack/control-plane.sh" down "$d"; return 1; }
  kv_counts "$kc"
  echo "  KubeVirt workloadUpdateMethods: $(kv_methods "$kc"); KubeVirt upgraded the same way:"
  local rc=0
  { kv_upgrade "$d" "$kc" && kv_count_wave "$kc" "without the guard (the contrast), after KubeVirt's upgrade" && kv_counts "$kc"; } || rc=$?
  bash "$REPO_ROOT/hack/kubevirt.sh" stop "$d/virt-controller"
  bash "$REPO_ROOT/hack/control-plane.sh" down "$d"
  return "$rc"
}
