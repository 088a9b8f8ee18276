# shellcheck shell=bash disable=SC2154,SC2016
# The main job, for hack/demo.sh (sourced by it, which defines k, section, dir, REPO_ROOT and
# HELM, and sources hack/demo/kubevirt.sh): the chart installed with Helm 4 on the real node,
# beside KubeVirt's own virt-controller with KV_VMIS running VMs on KV_NODES nodes of their own
# (no kubelet there: the demo plays the nodes' part of each migration, hack/demo/virt-handler.sh),
# then a modelled Harvester upgrade to v1.7.1 through its stages, twice, then the contrast:
#
#   1. the guard running: the suspension within seconds of the Upgrade's creation, `status` by
#      `kubectl exec`, NodesPrepared passing, KubeVirt upgraded at UpgradingSystemServices (every
#      VM outdated, and no workload-update migration for KV_HOLD seconds), UpgradingNodes: this
#      node drained (the guard's pod evicted, Pending on the cordoned node, back after the
#      uncordon), then the VMs' nodes drained one at a time as upgrade_node.sh's pre-drain does
#      (KubeVirt's evacuation moves every VM onto the new launcher, the outdated count falls to
#      0), the restore at the end and no wave after it;
#   2. the same upgrade with the guard made unable to act (scaled to 0): the hold (the chart's
#      ValidatingAdmissionPolicy refuses Harvester's NodesPrepared=True, the upgrade waits at
#      PreparingNodes), the guard back: it suspends, Harvester's next retry passes, the drains,
#      the restore, no wave;
#   3. the same upgrade without the guard, on a control plane of its own (kubevirt_contrast): the
#      wave after KubeVirt's upgrade, then the drains move every VM again, each counted.
#
# Harvester's controller is modelled as tests/support/harvester_controller.rs models it: every
# write a whole-object Update (PUT) of the Upgrade as `harvester` (the real CRD has no status
# subresource), conditions as wrangler writes them (`lastUpdateTime` only), retried on refusal.
# hack/demo.sh then checks the exact restore, as for the Jobs.

RELEASE=workload-update-guard NS=harvester-system DEPLOY=workload-update-guard-watch
SELECTOR="app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=watch"
NODE=wug-node
HOLD="held by workload-update-guard"

helm_() {
  HELM_CONFIG_HOME="$dir/helm/config" HELM_CACHE_HOME="$dir/helm/cache" \
    HELM_DATA_HOME="$dir/helm/data" KUBECONFIG="$dir/kubeconfig" "$HELM" "$@"
}
methods_now() { k -n "$NS" get kubevirt kubevirt -o jsonpath='{.spec.workloadUpdateStrategy.workloadUpdateMethods}'; }
guard_pods() {
  k -n "$NS" get pods -l "$SELECTOR" --no-headers \
    -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase' | sed 's/^/  /'
}
# guard_status [full]: status by hand in the guard's own pod (its ServiceAccount, nothing to
# clone or apply): the whole report, or its verdict, the latest Upgrade and the guard's last
# decision. Its log lines (stderr) are shown only if it fails.
guard_status() {
  local report
  echo "\$ kubectl -n $NS exec deploy/$DEPLOY -- workload-update-guard status"
  report="$(k -n "$NS" exec "deploy/$DEPLOY" -- workload-update-guard status 2>"$dir/status.err")" \
    || { cat "$dir/status.err" >&2; exit 1; }
  if [[ "${1:-}" == full ]]; then
    sed 's/^/  /' <<<"$report"
  else
    sed -n '1p; /^ *latest Upgrade /p; /^ *resident guard /p' <<<"$report" | sed 's/^ */  /'
    echo "  (…)"
  fi
}
# wait_methods WANT SECONDS: until the KubeVirt CR's methods are WANT; says after how long.
wait_methods() {
  local want="$1" limit="$2" start
  start=$(date +%s%3N)
  until [[ "$(methods_now)" == "$want" ]]; do
    if (( $(date +%s%3N) - start > limit * 1000 )); then
      echo "demo: the methods are $(methods_now), not $want, after ${limit} s; the guard's log:" >&2
      k -n "$NS" logs "deploy/$DEPLOY" --tail=20 >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  echo "KubeVirt workloadUpdateMethods: $want, $(( $(date +%s%3N) - start )) ms later"
}

# kubevirt_running: KubeVirt's own virt-controller (hack/demo/kubevirt.sh) with KV_VMIS VMs
# running, all up to date: a cluster between upgrades.
kubevirt_running() {
  kv_cluster "$dir" "$dir/kubeconfig"
  echo "KubeVirt $KV_VERSION's own virt-controller (its workload updater) runs $KV_VMIS VMs on $KV_NODES nodes (no kubelet: the demo plays virt-handler);" \
    "$(kv_outdated "$dir/kubeconfig") outdated, $(kv_migrations "$dir/kubeconfig") workload-update migrations"
}

# Harvester's writes (jq on the Upgrade as read), wrangler's condition setters among them.
HV_JQ='def stamp: now | strftime("%Y-%m-%dT%H:%M:%SZ");
def ensure($t): .status //= {} | .status.conditions //= []
  | if any(.status.conditions[]; .type == $t) then . else .status.conditions += [{type: $t, status: "Unknown"}] end;
def cond($t; $s): stamp as $ts | ensure($t)
  | .status.conditions |= map(if .type == $t and .status != $s then .status = $s | .lastUpdateTime = $ts else . end);
def state($s): .metadata.labels["harvesterhci.io/upgradeState"] = $s;
def node($n; $s): .status.nodeStatuses[$n] = {state: $s};
def nodes($s): reduce ("'"$NODE"'", "node-" + (range('"$KV_NODES"') | tostring)) as $n (.; node($n; $s));'
# hv_try NAME FILTER: one Update of Upgrade NAME as Harvester makes it (conflicts redone); the
# API server's refusal in $refusal.
hv_try() {
  local name="$1" filter="$2" obj i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    obj="$(k -n "$NS" get upgrades.harvesterhci.io "$name" -o json | jq "$HV_JQ $filter")"
    if refusal="$(k replace --field-manager=harvester -f - <<<"$obj" 2>&1 >/dev/null)"; then
      return 0
    fi
    [[ "$refusal" == *"the object has been modified"* ]] || return 1
    (( i < 10 )) || return 1
  done
}
# hv NAME STATE FILTER: a write that must pass; prints the state it leaves.
hv() {
  hv_try "$1" "$3" || { echo "demo: Harvester's Update of $1 refused: $refusal" >&2; exit 1; }
  [[ -z "$2" ]] || echo "  Upgrade $1: $2"
}
# upgrade_created NAME: the user's creation (a spec only), then the controller's first pass.
upgrade_created() {
  local other
  for other in $(k -n "$NS" get upgrades.harvesterhci.io -l harvesterhci.io/latestUpgrade=true -o name); do
    hv "${other#*/}" "" 'del(.metadata.labels["harvesterhci.io/latestUpgrade"])'
  done
  k create -f - >/dev/null <<UPGRADE
apiVersion: harvesterhci.io/v1beta1
kind: Upgrade
metadata: {name: $1, namespace: $NS}
spec: {version: v1.7.1}
UPGRADE
  echo "  Upgrade $1 to v1.7.1 created"
  hv "$1" "PreparingLoggingInfra" 'ensure("Completed") | state("PreparingLoggingInfra")
    | .metadata.labels["harvesterhci.io/latestUpgrade"] = "true" | .status.previousVersion = "v1.7.0"
    | ensure("LogReady")'
}
# to_preparing_nodes NAME: the logging infrastructure, the image, the repo, the image preload.
to_preparing_nodes() {
  hv "$1" "LoggingInfraPrepared" 'state("LoggingInfraPrepared") | cond("LogReady"; "True")'
  hv "$1" "" '.status.imageID = "'"$NS/$1"'" | cond("ImageReady"; "True")'
  hv "$1" "PreparingRepo" 'state("PreparingRepo") | ensure("RepoReady")'
  hv "$1" "RepoPrepared" 'state("RepoPrepared") | cond("RepoReady"; "True")'
  hv "$1" "PreparingNodes (images preloading on $NODE and the VMs' nodes)" 'state("PreparingNodes")
    | ensure("NodesPrepared") | nodes("Images preloading")'
  hv "$1" "" 'nodes("Images preloaded")'
}
# nodes_prepared NAME SECONDS: NodesPrepared=True, retried as Harvester retries a refused Update
# (here every second); exit 0 once it passed, 1 if still refused after SECONDS.
nodes_prepared() {
  local start=$SECONDS said="" refused=0
  until hv_try "$1" 'cond("NodesPrepared"; "True")'; do
    refused=$((refused + 1))
    [[ "$refusal" == *"$HOLD"* ]] || { echo "demo: NodesPrepared refused, not by the hold: $refusal" >&2; exit 1; }
    if [[ -z "$said" ]]; then
      said=1
      echo "  NodesPrepared=True refused by the API server (Harvester retries it by itself):"
      sed -n 's/.*\(held by workload-update-guard\)/\1/p' <<<"$refusal" | fold -s -w 96 | sed 's/^/    /'
    fi
    if (( SECONDS - start >= $2 )); then
      echo "  refused $refused times in $((SECONDS - start)) s"
      return 1
    fi
    sleep 1
  done
  echo "  Upgrade $1: NodesPrepared=True passed${said:+ (after $refused refusals)}"
}
# hv_node_state NODE STATE: Harvester's job controller writes the node's state on the Upgrade
# HV_UPGRADE (kv_upgrade_nodes' STATE_FN).
hv_node_state() { hv "$HV_UPGRADE" "" 'node("'"$1"'"; "'"$2"'")'; }
# to_the_end NAME DRAIN: KubeVirt's upgrade at UpgradingSystemServices (every VM outdated, no
# workload-update migration for KV_HOLD seconds), then UpgradingNodes: this node (drained, the
# guard's pod on it, if DRAIN is 1), then the VMs' nodes one at a time, each drained as
# upgrade_node.sh's pre-drain does (kv_upgrade_nodes: KubeVirt's evacuation moves their VMs onto
# the new launcher); the end.
to_the_end() {
  local upgraded n
  hv "$1" "UpgradingSystemServices (the apply-manifests Job upgrades KubeVirt)" \
    'state("UpgradingSystemServices") | ensure("SystemServicesUpgraded")'
  kv_upgrade "$dir" "$dir/kubeconfig"
  kv_wait_outdated "$dir/kubeconfig" "$KV_VMIS"
  upgraded=$SECONDS
  echo "  KubeVirt upgraded (virt-operator's rollout modelled: virt-controller restarted with $KV_LAUNCHER_AFTER):" \
    "$(kv_outdated "$dir/kubeconfig") VMs outdated (virt-controller's count); KubeVirt workloadUpdateMethods: $(methods_now), so no wave"
  no_wave_since "$upgraded" "$1"
  hv "$1" "" 'cond("SystemServicesUpgraded"; "True")'
  hv "$1" "UpgradingNodes" 'state("UpgradingNodes") | ensure("NodesUpgraded")'
  HV_UPGRADE="$1"
  hv_node_state "$NODE" Pre-draining
  hv_node_state "$NODE" Pre-drained
  echo "  $NODE pre-drained"
  if [[ "$2" == 1 ]]; then
    echo "the guard's pod before the drain:"; guard_pods
    echo "\$ kubectl drain $NODE --ignore-daemonsets --delete-emptydir-data --force"
    k drain "$NODE" --ignore-daemonsets --delete-emptydir-data --force --timeout=120s 2>&1 \
      | { grep -E "evicting|evicted|drained" || true; } | sed 's/^/  /'
    sleep 3
    echo "the guard's pod while the node is cordoned (the only node with a kubelet: Pending, as expected):"; guard_pods
    echo "KubeVirt workloadUpdateMethods meanwhile: $(methods_now) (the suspension is on the objects)"
    k uncordon "$NODE" >/dev/null
    k -n "$NS" rollout status "deploy/$DEPLOY" --timeout=120s >/dev/null
    echo "after the uncordon, a new pod, Ready:"; guard_pods
  fi
  hv_node_state "$NODE" Post-draining
  hv_node_state "$NODE" Succeeded
  echo "  $NODE upgraded; then the VMs' nodes, one at a time (upgrade_node.sh's pre-drain: the drain taint, KubeVirt's evacuation):"
  kv_upgrade_nodes "$dir/kubeconfig" "Upgrade $1" hv_node_state
  echo "  every VM on the new launcher (the VMI controller's record):"
  kv_all_new "$dir/kubeconfig"
  n="$(kv_migrations "$dir/kubeconfig")"
  (( n == 0 )) || { echo "demo: $n workload-update migrations during the upgrade" >&2; exit 1; }
  kv_figures+=("Upgrade $1: $kv_drained; $(kv_evacuations "$dir/kubeconfig") evacuation migrations, 0 workload-update; every VM on the new launcher")
  hv "$1" "Succeeded" 'cond("NodesUpgraded"; "True") | cond("Completed"; "True")
    | state("Succeeded") | .metadata.labels["harvesterhci.io/upgradeCleanup"] = "Pending"'
}
# no_wave_since SECONDS NAME: 0 workload-update migrations from then (KubeVirt's upgrade) until
# KV_HOLD seconds have passed (the updater also requeues every 30 s), checked every 2 s.
no_wave_since() {
  local n
  while :; do
    n="$(kv_migrations "$dir/kubeconfig")"
    (( n == 0 )) || { echo "demo: $n workload-update migrations while suspended" >&2; exit 1; }
    (( SECONDS - $1 < KV_HOLD )) || break
    sleep 2
  done
  echo "  $((SECONDS - $1)) s since KubeVirt's upgrade, $(kv_outdated "$dir/kubeconfig") VMs outdated: 0 workload-update migrations"
  kv_figures+=("Upgrade $2: KubeVirt upgraded during it, $(kv_outdated "$dir/kubeconfig") of $KV_VMIS VMs outdated: 0 workload-update migrations in $((SECONDS - $1)) s")
}
cleaned_up() {
  hv "$1" "cleaned up" '.metadata.annotations["harvesterhci.io/longhorn-settings-restored"] = "true"
    | .metadata.labels["harvesterhci.io/upgradeCleanup"] = "Succeeded"'
}

# The hold is in force once the API server refuses a NodesPrepared=True (a dry run of a probe
# Upgrade, which the guard does not follow: it is not the latest).
hold_in_force() {
  local i
  k create -f - >/dev/null <<PROBE
apiVersion: harvesterhci.io/v1beta1
kind: Upgrade
metadata: {name: hold-probe, namespace: $NS}
spec: {version: v1.7.1}
PROBE
  for i in $(seq 1 100); do
    if ! k -n "$NS" get upgrades.harvesterhci.io hold-probe -o json | jq "$HV_JQ"' cond("NodesPrepared"; "True")' \
      | k replace --dry-run=server -f - >/dev/null 2>&1; then
      k -n "$NS" delete upgrades.harvesterhci.io hold-probe --wait >/dev/null
      echo "the hold is in force (the policy refuses a probe's NodesPrepared=True)"
      return 0
    fi
    sleep 0.2
  done
  echo "demo: the hold is not in force 20 s after the install" >&2
  exit 1
}

chart_story() {
  kv_heartbeat "$dir/kubeconfig" &
  # shellcheck disable=SC2034 # hack/demo.sh's exit trap stops it
  heartbeat=$!
  kv_nodes_start "$dir/kubeconfig" "$dir/virt-handler.log"
  kubevirt_running
  section "helm install (Helm $("$HELM" version --short)): the chart, between upgrades"
  echo "\$ helm install $RELEASE manifests/chart -n $NS --set image.repository=workload-update-guard --wait"
  helm_ install "$RELEASE" "$REPO_ROOT/manifests/chart" -n "$NS" \
    --set image.repository=workload-update-guard --wait --timeout 120s | awk '/^NOTES:/ {skip = 1} !skip {print "  " $0}'
  k -n "$NS" get deploy "$DEPLOY"
  k get validatingadmissionpolicies,validatingadmissionpolicybindings -o name
  hold_in_force
  section "before the upgrade"
  guard_status full

  section "1. an upgrade to v1.7.1 with the guard running"
  upgrade_created hvst-upgrade-demo
  wait_methods '[]' 10
  to_preparing_nodes hvst-upgrade-demo
  guard_status
  nodes_prepared hvst-upgrade-demo 10 || { echo "demo: NodesPrepared refused while suspended" >&2; exit 1; }
  to_the_end hvst-upgrade-demo 1
  wait_methods '["LiveMigrate"]' 10
  kv_no_wave "$dir/kubeconfig" "Upgrade hvst-upgrade-demo: after the restore"
  cleaned_up hvst-upgrade-demo
  guard_status

  section "2. the same upgrade with the guard unable to act (scaled to 0): the hold"
  # The same cluster as before the first: VMs on the old launcher again (made anew, with
  # virt-controller restarted with the old launcher image).
  kv_reset "$dir" "$dir/kubeconfig"
  kubevirt_running
  k -n "$NS" scale deploy "$DEPLOY" --replicas=0 >/dev/null
  k -n "$NS" wait --for=delete pod -l "$SELECTOR" --timeout=60s >/dev/null 2>&1 || true
  echo "\$ kubectl -n $NS scale deploy $DEPLOY --replicas=0; the guard's pods: $(k -n "$NS" get pods -l "$SELECTOR" -o name | wc -l)"
  upgrade_created hvst-upgrade-demo-2
  to_preparing_nodes hvst-upgrade-demo-2
  if nodes_prepared hvst-upgrade-demo-2 5; then
    echo "demo: NodesPrepared passed with the guard down: the hold is not in force" >&2
    exit 1
  fi
  echo "  Upgrade hvst-upgrade-demo-2: still $(k -n "$NS" get upgrades.harvesterhci.io hvst-upgrade-demo-2 \
    -o jsonpath='{.metadata.labels.harvesterhci\.io/upgradeState}'), KubeVirt not upgraded ($(kv_outdated "$dir/kubeconfig") VMs outdated);" \
    "KubeVirt workloadUpdateMethods: $(methods_now)"
  echo "\$ kubectl -n $NS scale deploy $DEPLOY --replicas=1   # the guard back"
  k -n "$NS" scale deploy "$DEPLOY" --replicas=1 >/dev/null
  wait_methods '[]' 60
  nodes_prepared hvst-upgrade-demo-2 130 || { echo "demo: the hold not released after the suspension" >&2; exit 1; }
  k -n "$NS" rollout status "deploy/$DEPLOY" --timeout=60s >/dev/null
  guard_status
  to_the_end hvst-upgrade-demo-2 0
  wait_methods '["LiveMigrate"]' 10
  kv_no_wave "$dir/kubeconfig" "Upgrade hvst-upgrade-demo-2: after the restore"
  cleaned_up hvst-upgrade-demo-2
  guard_status

  kubevirt_contrast 3
}

# After the check of the exact restore: the uninstall, whose hook has nothing to restore.
chart_uninstall() {
  section "helm uninstall (its hook runs post: nothing of ours left, so it proceeds)"
  helm_ uninstall "$RELEASE" -n "$NS" --wait --timeout 120s | sed 's/^/  /'
}
