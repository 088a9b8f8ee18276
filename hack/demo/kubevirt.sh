# shellcheck shell=bash
# The real workload updater, for `bash hack/demo.sh --kubevirt` (sourced by hack/demo.sh, which
# defines k, section, step, dir, BIN, KUBECTL and REPO_ROOT): KubeVirt's own virt-controller of
# $KV_VERSION (hack/kubevirt.sh run, in harvester-system, as on Harvester) with KV_VMIS running
# VMIs on KV_NODES nodes, beside the resident guard (the release binary with PHASE=watch, as the
# chart's Deployment runs it, here a process on this machine with the admin's kubeconfig).
#
#   1. before the upgrade: 0 outdated, 0 migrations;
#   2. the modelled Harvester Upgrade to v1.7.1 is created: the guard suspends (methods []);
#   3. UpgradingSystemServices: KubeVirt "upgraded" as virt-operator rolls out (the CR Deploying
#      toward a new deployment, virt-controller restarted with a new --launcher-image, the CR
#      Deployed): every VM outdated, and 0 workload-update migrations for KV_HOLD seconds;
#   4. UpgradingNodes: the nodes drained one at a time as Harvester's upgrade_node.sh pre-drain
#      does (kv_upgrade_nodes): KubeVirt's evacuation controller migrates each node's VMs, onto
#      the new launcher; the outdated count after each node, down to 0;
#   5. the Upgrade Succeeded: the guard restores the methods, and no wave follows (0
#      workload-update migrations in KV_AFTER seconds): the drains already moved every VM;
#   6. the contrast, on a control plane of its own (KubeVirt takes one CR per cluster): the same
#      upgrade without the guard: the wave after KubeVirt's upgrade, then the drains move every
#      VM again, each counted.
#
# Each figure printed is counted in the run. The demo plays what is missing (no node): the
# scheduler and the kubelet (each launcher pod bound, its status Running), virt-handler (the VMI
# Running on its node with its launcher image: a merge patch of the object, as the VMI CRD has no
# status subresource; each migration's node part: hack/demo/virt-handler.sh), virt-operator (the
# CR's status) and Harvester's node upgrades (kv_upgrade_nodes).
# shellcheck disable=SC2154 # k, dir, BIN, KUBECTL, REPO_ROOT: hack/demo.sh's

KV_VERSION="${KUBEVIRT_VERSION:-v1.6.0}"
KV_NS=harvester-system
KV_VM_NS=vms
KV_NODES=3
KV_VMIS=6
KV_HOLD="${KV_HOLD:-40}"
KV_AFTER="${KV_AFTER:-20}" # seconds watched for a wave after the restore
KV_LABEL=demo.workload-update-guard/vmi
KV_WORKLOAD_UPDATE=kubevirt.io/workloadUpdateMigration
KV_EVACUATION=kubevirt.io/evacuationMigration
# The launcher images before and after the modelled KubeVirt upgrade (names only: no node pulls them).
KV_LAUNCHER_BEFORE=localhost/virt-launcher:v1.6.0
KV_LAUNCHER_AFTER=localhost/virt-launcher:v1.6.1

# shellcheck source=hack/demo/virt-handler.sh
source "$REPO_ROOT/hack/demo/virt-handler.sh"

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
  # The evacuation controller moves a drained node's VMIs whose eviction strategy asks for it:
  # the CR's (as tests/support/kubevirt.rs KubeVirtCluster::up_with sets it), or the VMI's own
  # LiveMigrateIfPossible (Harvester's VMs carry it; kv_vmis gives it to half of them). Not as
  # manager helm: its next apply would drop the field from what it owns.
  "$KUBECTL" --kubeconfig "$kc" -n "$KV_NS" patch kubevirt kubevirt --type=merge \
    -p '{"spec": {"configuration": {"evictionStrategy": "LiveMigrate"}}}' >/dev/null
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

# kv_vmis KUBECONFIG: KV_VMIS VMIs, each Running on its node with its launcher pod Running (as
# tests/support/kubevirt.rs start_vmis and run_vmi leave them); the even ones carry Harvester's
# evictionStrategy LiveMigrateIfPossible, the others take the CR's.
kv_vmis() {
  local kc="$1" i name pod node uid image start now
  for i in $(seq 0 $((KV_VMIS - 1))); do
    jq -n --arg name "vm-$i" --arg ns "$KV_VM_NS" --arg key "$KV_LABEL" --argjson own "$(( i % 2 == 0 ))" \
      '{apiVersion: "kubevirt.io/v1", kind: "VirtualMachineInstance",
        metadata: {name: $name, namespace: $ns, labels: {($key): $name}},
        spec: {domain: {devices: {}, resources: {requests: {memory: "64Mi"}}}, terminationGracePeriodSeconds: 0}}
       | if $own == 1 then .spec.evictionStrategy = "LiveMigrateIfPossible" else . end' \
      | "$KUBECTL" --kubeconfig "$kc" create -f - >/dev/null || return 1
  done
  for i in $(seq 0 $((KV_VMIS - 1))); do
    name="vm-$i" node="node-$((i % KV_NODES))" start=$SECONDS
    # virt-controller's launcher pod for the VMI (it copies the VMI's labels).
    until pod="$("$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" get pods -l "$KV_LABEL=$name" -o json | jq -ce '.items[0] // empty')"; do
      (( SECONDS - start < 60 )) || { echo "demo: virt-controller made no launcher pod for $name in 60 s" >&2; return 1; }
      sleep 0.5
    done
    # The scheduler's part: the binding; the kubelet's: the pod Running.
    kv_run_pod "$kc" "$pod" "$node" || return 1
    # virt-handler's part: the VMI Running there, with its launcher's image (no status subresource).
    now="$(kv_now)"
    uid="$(jq -r .metadata.uid <<<"$pod")"
    image="$(jq -r '.spec.containers[] | select(.name == "compute") | .image' <<<"$pod")"
    kv_vmi_patch "$kc" "$name" "$(jq -nc \
      --arg node "$node" --arg image "$image" --arg uid "$uid" --arg now "$now" \
      '{metadata: {labels: {"kubevirt.io/nodeName": $node}},
        status: {phase: "Running", nodeName: $node, selinuxContext: "none", launcherContainerImageVersion: $image,
        conditions: [{type: "Ready", status: "True", lastTransitionTime: $now, lastProbeTime: null},
                     {type: "LiveMigratable", status: "True", lastTransitionTime: $now, lastProbeTime: null}],
        activePods: {($uid): $node}, migrationMethod: "BlockMigration",
        interfaces: [{ipAddress: "10.0.0.1", name: "default"}]}}')" || return 1
  done
}

# What the updater counts (the CR's status) and what it did (its migrations).
kv_outdated() {
  "$KUBECTL" --kubeconfig "$1" -n "$KV_NS" get kubevirt kubevirt -o jsonpath='{.status.outdatedVirtualMachineInstanceWorkloads}'
}
kv_migrations() { kv_annotated "$1" "$KV_WORKLOAD_UPDATE"; } # the workload updater's migrations
kv_evacuations() { kv_annotated "$1" "$KV_EVACUATION"; }       # the evacuation controller's
kv_annotated() { # kv_annotated KUBECONFIG ANNOTATION: the migrations virt-controller annotated so
  "$KUBECTL" --kubeconfig "$1" get virtualmachineinstancemigrations -A -o json \
    | jq --arg a "$2" '[.items[] | select(.metadata.annotations[$a] != null)] | length'
}
# The running VMIs whose launcher is not the new one, as the VMI controller records it.
kv_old_launchers() {
  "$KUBECTL" --kubeconfig "$1" -n "$KV_VM_NS" get virtualmachineinstances -o json \
    | jq --arg new "$KV_LAUNCHER_AFTER" '[.items[] | select(.status.phase == "Running" and .status.launcherContainerImageVersion != $new)] | length'
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

# kv_report KUBECONFIG: the migrations, VMIs and launcher pods as they stand, for a failure.
kv_report() {
  "$KUBECTL" --kubeconfig "$1" -n "$KV_VM_NS" get virtualmachineinstancemigrations -o json \
    | jq -r '.items[] | "migration \(.metadata.name) of \(.spec.vmiName): \(.status.phase)"'
  "$KUBECTL" --kubeconfig "$1" -n "$KV_VM_NS" get virtualmachineinstances -o json \
    | jq -r '.items[] | "vmi \(.metadata.name): \(.status.phase) on \(.status.nodeName) launcher \(.status.launcherContainerImageVersion) migrationState \(.status.migrationState | tojson)"'
  "$KUBECTL" --kubeconfig "$1" -n "$KV_VM_NS" get pods -o json \
    | jq -r '.items[] | "pod \(.metadata.name): \(.status.phase) on \(.spec.nodeName)"'
}

# kv_settled KUBECONFIG: until the updater's count (the CR's status) matches the VMIs not on the
# new launcher (the VMI controller's record), for at most 10 s: its sync follows the VMIs' changes.
kv_settled() {
  local start=$SECONDS
  until [[ "$(kv_outdated "$1")" == "$(kv_old_launchers "$1")" ]] || (( SECONDS - start >= 10 )); do sleep 0.3; done
}

# kv_upgrade_nodes KUBECONFIG WHAT [STATE_FN]: Harvester's node upgrades at UpgradingNodes, one
# node at a time, as package/upgrade/upgrade_node.sh runs them (the same steps in every release
# read, v1.5 to v1.8; tests/support/node_upgrades.rs models the same for the tests):
# command_pre_drain (vm-live-migrate-detector NODE --shutdown stops the VMs that cannot
# live-migrate: every VM here can; the node tainted kubevirt.io/drain=draining:NoSchedule, so
# KubeVirt's evacuation controller migrates its VMIs away; wait_vms_out_or_shutdown: no VMI
# labelled kubevirt.io/nodeName=NODE whose phase is not Succeeded; wait_evacuation_pdb_gone: no
# PDB named kubevirt-migration-pdb-kubevirt-evacuation-*); Rancher's drain and RKE2's upgrade
# (nothing of KubeVirt's left there); command_post_drain (the taint removed). STATE_FN NODE STATE
# writes the Upgrade's node states (Pre-draining, Pre-drained, Post-draining, Succeeded) where an
# Upgrade is modelled. Polled every 0.5 s (the script: every 5 s). After each node: how long its
# VMs took to leave, KubeVirt's outdated count, the migrations so far; kv_drained has the figures.
kv_upgrade_nodes() {
  local kc="$1" what="$2" fn="${3:-}" i node start left drain outdated=() drains=()
  for i in $(seq 0 $((KV_NODES - 1))); do
    node="node-$i"
    [[ -z "$fn" ]] || "$fn" "$node" Pre-draining
    "$KUBECTL" --kubeconfig "$kc" taint node "$node" --overwrite "$KV_DRAIN_TAINT=draining:NoSchedule" >/dev/null
    start=$(kv_ms)
    while left="$("$KUBECTL" --kubeconfig "$kc" get virtualmachineinstances -A -l "kubevirt.io/nodeName=$node" -o json \
                   | jq -r '[.items[] | select(.status.phase != "Succeeded") | .metadata.name] | join(" ")')"
          [[ -n "$left" ]]; do
      if (( $(kv_ms) - start > 180000 )); then
        echo "demo: $node: VMIs $left still there 180 s after its drain taint; virt-controller's log: $(dirname "$kc")/virt-controller/" >&2
        kv_report "$kc" >&2
        return 1
      fi
      sleep 0.5
    done
    drain=$(( $(kv_ms) - start ))
    until [[ "$("$KUBECTL" --kubeconfig "$kc" get poddisruptionbudgets -A -o json \
                | jq '[.items[] | select(.metadata.name | startswith("kubevirt-migration-pdb-kubevirt-evacuation-"))] | length')" == 0 ]]; do
      (( $(kv_ms) - start < 180000 )) || { echo "demo: $node: KubeVirt's evacuation PDBs stay" >&2; return 1; }
      sleep 0.5
    done
    [[ -z "$fn" ]] || { "$fn" "$node" Pre-drained; "$fn" "$node" Post-draining; }
    "$KUBECTL" --kubeconfig "$kc" taint node "$node" "$KV_DRAIN_TAINT-" >/dev/null
    [[ -z "$fn" ]] || "$fn" "$node" Succeeded
    kv_settled "$kc"
    outdated+=("$(kv_outdated "$kc")")
    drains+=("$(kv_s "$drain")")
    echo "  $node: tainted $KV_DRAIN_TAINT=draining:NoSchedule, its VMs gone in $(kv_s "$drain") s, untainted;" \
      "outdated VMs: $(kv_outdated "$kc"); migrations so far: $(kv_migrations "$kc") workload-update, $(kv_evacuations "$kc") evacuation"
  done
  kv_drained="the drains (one node at a time) took $(IFS=/; echo "${drains[*]}") s, the outdated count after each $(IFS=,; echo "${outdated[*]}")"
}

# kv_all_new KUBECONFIG: until every running VMI is on the new launcher and nothing is outdated;
# then the VMIs as they stand.
kv_all_new() {
  kv_until kv_old_launchers "$1" 0
  kv_wait_outdated "$1" 0
  "$KUBECTL" --kubeconfig "$1" -n "$KV_VM_NS" get virtualmachineinstances \
    -o custom-columns='VMI:.metadata.name,PHASE:.status.phase,NODE:.status.nodeName,LAUNCHER:.status.launcherContainerImageVersion' | sed 's/^/    /'
}

# kv_no_wave KUBECONFIG WHAT: no workload-update migration for KV_AFTER seconds (polled every
# 0.5 s); the figure.
kv_no_wave() {
  local start n line
  start=$(kv_ms)
  while (( $(kv_ms) - start < KV_AFTER * 1000 )); do
    n="$(kv_migrations "$1")"
    (( n == 0 )) || { echo "demo: $n workload-update migrations $(kv_s $(( $(kv_ms) - start ))) s after the restore" >&2; return 1; }
    sleep 0.5
  done
  line="$2: $(kv_outdated "$1") outdated, 0 workload-update migrations in $KV_AFTER s"
  echo "  $line"
  kv_figures+=("$line")
}

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
  kv_deployed "$2" 1 && kv_controller "$1" "$2" "$KV_LAUNCHER_BEFORE" && kv_vmis "$2" && kv_wait_outdated "$2" 0
}

kubevirt_story() {
  local kc="$dir/kubeconfig" guard port waited=0 n start
  kv_nodes_start "$kc" "$dir/virt-handler.log"
  section "KubeVirt $KV_VERSION's own virt-controller (its workload updater) in $KV_NS: $KV_VMIS VMs running on $KV_NODES nodes"
  kv_cluster "$dir" "$kc"
  echo "  virt-controller's launcher image: $KV_LAUNCHER_BEFORE; KubeVirt workloadUpdateMethods: $(kv_methods "$kc")"
  echo "  the nodes' part of each migration (virt-handler, the kubelet, the scheduler's binding) played by hack/demo/virt-handler.sh (its log: $dir/virt-handler.log)"
  kv_counts "$kc"

  section "the resident guard (PHASE=watch, as the chart's Deployment runs it; here a process on this machine)"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  mkdir -p "$dir/guard"
  KUBECONFIG="$kc" PHASE=watch WATCH_STATE_DIR="$dir/guard" TERMINATION_MESSAGE_PATH="" LOG_FORMAT=text \
    RUST_LOG=info METRICS_PORT="$port" "$BIN" >/dev/null 2>"$dir/guard.log" &
  guard=$!
  kv_pids+=("$guard")
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

  section "2. UpgradingSystemServices: KubeVirt upgraded (virt-operator's rollout: Deploying, virt-controller restarted with $KV_LAUNCHER_AFTER, Deployed)"
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

  section "3. UpgradingNodes: each node drained in turn (upgrade_node.sh's pre-drain); KubeVirt's evacuation moves its VMs to the new launcher"
  kv_upgrade_label "$kc" UpgradingNodes
  kv_upgrade_nodes "$kc" "with the guard"
  echo "  every VM on the new launcher (the VMI controller's record):"
  kv_all_new "$kc"
  n="$(kv_migrations "$kc")"
  (( n == 0 )) || { echo "demo: $n workload-update migrations during the upgrade" >&2; return 1; }
  kv_figures+=("with the guard: $kv_drained; $(kv_evacuations "$kc") evacuation migrations, 0 workload-update; every VM on the new launcher")

  section "4. the Upgrade ends (Succeeded): the guard restores the updates, and there is nothing left to update"
  kv_upgrade_label "$kc" Succeeded
  start=$(kv_ms)
  kv_wait_methods "$kc" '["LiveMigrate"]'
  echo "  KubeVirt workloadUpdateMethods: $(kv_methods "$kc") ($(kv_s $(( $(kv_ms) - start ))) s after Succeeded); watching for ${KV_AFTER} s ..."
  kv_no_wave "$kc" "with the guard, after the restore"
  kv_counts "$kc"
  kill -TERM "$guard"; wait "$guard" || true
  kv_nodes_stop
  bash "$REPO_ROOT/hack/kubevirt.sh" stop "$dir/virt-controller"
  "$KUBECTL" --kubeconfig "$kc" -n "$KV_NS" delete upgrades.harvesterhci.io hvst-upgrade-demo >/dev/null

  kubevirt_contrast 5
}

# kubevirt_contrast N: the same KubeVirt upgrade and node drains without the guard, on a control
# plane of its own (section N): the wave, then the drains, each counted.
kubevirt_contrast() {
  local kc rc=0
  section "$1. for contrast: the same upgrade without the guard (a control plane of its own: KubeVirt takes one CR per cluster)"
  kv_contrast_dir="$(KUBEVIRT_CRDS=all KUBEVIRT_VERSION="$KV_VERSION" step "starting another kube-apiserver and etcd" bash "$REPO_ROOT/hack/control-plane.sh" up)"
  kc="$kv_contrast_dir/kubeconfig"
  { kv_state "$kc" && kv_nodes_start "$kc" "$kv_contrast_dir/virt-handler.log" && kv_cluster "$kv_contrast_dir" "$kc" && kv_contrast "$kc"; } || rc=$?
  kv_cleanup
  return "$rc"
}
kv_contrast() {
  local kc="$1" w e
  kv_counts "$kc"
  echo "  KubeVirt workloadUpdateMethods: $(kv_methods "$kc"); KubeVirt upgraded the same way:"
  kv_upgrade "$kv_contrast_dir" "$kc" || return 1
  kv_count_wave "$kc" "without the guard, after KubeVirt's upgrade" || return 1
  echo "  the wave migrates every VM to the new launcher (the system services' upgrade lasts minutes: it is over before the first drain):"
  kv_all_new "$kc" || return 1
  echo "  then UpgradingNodes: the same drains move each VM again"
  kv_upgrade_nodes "$kc" "without the guard" || return 1
  w="$(kv_migrations "$kc")" e="$(kv_evacuations "$kc")"
  echo "  so, without the guard: $w workload-update + $e evacuation = $((w + e)) migrations for $KV_VMIS VMs"
  kv_figures+=("without the guard: the wave, $w workload-update migrations, then $kv_drained; $e evacuation migrations: $((w + e)) in all")
}

# kv_cleanup: the stand-ins stopped by their PIDs, the contrast's control plane (if any) down;
# hack/demo.sh's exit trap calls it too.
kv_cleanup() {
  kv_nodes_stop
  if [[ -n "${kv_contrast_dir:-}" ]]; then
    bash "$REPO_ROOT/hack/kubevirt.sh" stop "$kv_contrast_dir/virt-controller"
    bash "$REPO_ROOT/hack/control-plane.sh" down "$kv_contrast_dir"
    kv_contrast_dir=""
  fi
}
