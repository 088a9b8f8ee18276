#!/usr/bin/env bash
# The main job with a Harvester-like cluster state (hack/demo/harvester.yaml):
#
#   bash hack/demo.sh          the real way: the guard's image (hack/image.sh) run as Jobs by a
#                              real node (hack/node.sh): `kubectl apply -k manifests/PHASE` for
#                              status -> pre -> status -> pre -> post -> post -> status, each
#                              Job's outcome, its pod's termination message, and the Events
#   bash hack/demo.sh --fast   the quick look: no node, the release binary run on this machine
#                              with each Job's environment and the ServiceAccount's token only
#
# Both end by checking that the KubeVirt CR and the ManagedChart are exactly as before pre.
# Everything is torn down after (the node by hack/node.sh down, also if this script is killed).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
command -v jq >/dev/null || { echo "demo: jq is required (apt-get install jq)" >&2; exit 1; }
fast=0
case "${1:-}" in
  --fast) fast=1 ;;
  "") ;;
  *) echo "usage: bash hack/demo.sh [--fast]" >&2; exit 2 ;;
esac

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "build"
KUBECTL="$(bash hack/control-plane.sh bin-dir)/kubectl"
if (( fast )); then
  bash hack/control-plane.sh build
  cargo build --release --quiet
  BIN="$REPO_ROOT/target/release/workload-update-guard"
  step "control plane"
  dir="$(bash hack/control-plane.sh up)"
  trap 'bash "$REPO_ROOT/hack/control-plane.sh" down "$dir"' EXIT
else
  bash hack/node.sh build
  bash hack/image.sh build
  step "node: kubelet on containerd + runc, bridge CNI, kube-proxy, controller-manager, scheduler"
  dir="$(NODE_OWNER_PID=$$ bash hack/node.sh up)"
  trap 'bash "$REPO_ROOT/hack/node.sh" down "$dir"' EXIT
fi
k() { "$KUBECTL" --kubeconfig "$dir/kubeconfig" "$@"; }
(( fast )) || k get node -o wide

step "Harvester-like state: KubeVirt harvester-system/kubevirt, ManagedChart fleet-local/harvester"
# Server-side, as manager helm: the field ownership Helm 4 (so Fleet) leaves on the KubeVirt CR.
k apply --server-side --field-manager helm -f hack/demo/harvester.yaml
k -n harvester-system patch kubevirt kubevirt --subresource=status --type=merge -p \
  '{"status":{"phase":"Deployed","observedKubeVirtVersion":"v1.4.1","targetKubeVirtVersion":"v1.5.2","outdatedVirtualMachineInstanceWorkloads":2}}' >/dev/null
k -n default patch vmim kubevirt-workload-update-x7k2p --subresource=status --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null
k apply -k manifests/base

if (( fast )); then
  # The ServiceAccount's token, from the TokenRequest API: the run has only what the Job has.
  token="$(k -n harvester-system create token workload-update-guard --duration=10m)"
  cat > "$dir/sa-kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$(k config view -o jsonpath='{.clusters[0].cluster.server}')", certificate-authority: $dir/ca.crt}}]
users: [{name: sa, user: {token: "$token"}}]
contexts: [{name: local, context: {cluster: local, user: sa}}]
current-context: local
KC
fi

# run PHASE: `kubectl apply -k manifests/PHASE` (a rerun replaces the finished Job), then the
# Job's outcome, its pod's termination message (the run's summary) and, for status, its logs.
run_job() {
  local phase="$1" job="workload-update-guard-$1" start outcome="" pod
  step "kubectl apply -k manifests/$phase"
  k -n harvester-system delete job "$job" --ignore-not-found --cascade=foreground --wait >/dev/null
  start=$(date +%s%3N)
  k apply -k "manifests/$phase" | grep -E '^job' || true
  while [[ -z "$outcome" ]]; do
    outcome="$(k -n harvester-system get job "$job" -o json | jq -r '
      [.status.conditions[]? | select((.type == "Complete" or .type == "Failed") and .status == "True")
       | "\(.type) (\(.reason))"] | first // empty')"
    [[ -n "$outcome" ]] || sleep 0.2
  done
  pod="$(k -n harvester-system get pods -l "job-name=$job" -o jsonpath='{.items[0].metadata.name}')"
  echo "Job $job: $outcome after $(( $(date +%s%3N) - start )) ms; pod $pod"
  echo "termination message:"
  k -n harvester-system get pod "$pod" -o json \
    | jq '.status.containerStatuses[0].state.terminated | {exitCode, message: (.message | fromjson? // .)}'
  if [[ "$phase" == status ]]; then
    echo "logs:"; k -n harvester-system logs "$pod" | sed 's/^/  /'
  fi
  [[ "$outcome" == Complete* ]]
}

# run PHASE: the binary with the environment of the Job in manifests/PHASE (logs as text, to read).
run() {
  (( fast )) || { run_job "$@"; return; }
  local phase="$1" lines env=()
  lines="$(k kustomize "manifests/$phase" | k create --dry-run=client -o json -f - \
        | jq -rs '.[] | select(.kind == "Job") | .spec.template.spec.containers[0].env[] | select(.name != "LOG_FORMAT") | "\(.name)=\(.value)"')"
  mapfile -t env <<<"$lines"
  step "PHASE=$phase  (${env[*]})"
  local code=0
  env -i PATH="$PATH" KUBECONFIG="$dir/sa-kubeconfig" TERMINATION_MESSAGE_PATH="$dir/termination-log" \
    LOG_FORMAT=text "${env[@]}" "$BIN" || code=$?
  echo "exit code: $code"
  echo "termination message: $(cat "$dir/termination-log")"
  return "$code"
}
methods() {
  echo "KubeVirt workloadUpdateMethods: $(k -n harvester-system get kubevirt kubevirt -o jsonpath='{.spec.workloadUpdateStrategy.workloadUpdateMethods}')"
  echo "KubeVirt annotations:"; k -n harvester-system get kubevirt kubevirt -o json | jq '.metadata.annotations'
  echo "ManagedChart values.kubevirt.spec: $(k -n fleet-local get managedchart harvester -o json | jq -c '.spec.values.kubevirt.spec')"
  echo "ManagedChart comparePatches KubeVirt entries: $(k -n fleet-local get managedchart harvester -o json | jq -c '[.spec.diff.comparePatches[] | select(.kind == "KubeVirt")]')"
  owners
}
# Who owns the methods field (managedFields): an Update owner blocks a Helm-4 apply that changes it.
owners() {
  echo "owners of .spec.workloadUpdateStrategy.workloadUpdateMethods:"
  k -n harvester-system get kubevirt kubevirt -o json --show-managed-fields | jq -r '
    [.metadata.managedFields[]
     | select(.fieldsV1["f:spec"]["f:workloadUpdateStrategy"]["f:workloadUpdateMethods"] != null)
     | "  \(.manager) (\(.operation), \(.time))"] | if length == 0 then "  (none)" else .[] end'
  echo "managers with any claim on the CR: $(k -n harvester-system get kubevirt kubevirt -o json --show-managed-fields | jq -c '[.metadata.managedFields[].manager]')"
}
snapshot() { # snapshot FILE: both objects without what the server manages
  { k -n harvester-system get kubevirt kubevirt -o json | jq -S -f hack/snapshot.jq
    k -n fleet-local get managedchart harvester -o json | jq -S -f hack/snapshot.jq; } > "$1"
}

snapshot "$dir/before.json"
step "before pre"
owners
run status
run pre
methods
run status
run pre   # a rerun: already so, the first record is kept
run post
methods
run post  # a rerun: nothing to do
run status

step "Events on the KubeVirt CR (kubectl describe kubevirt)"
k -n harvester-system describe kubevirt kubevirt | sed -n '/^Events:/,$p'
if (( ! fast )); then
  step "Events of the Jobs"
  k -n harvester-system get events --field-selector involvedObject.kind=Job --sort-by=.lastTimestamp \
    -o custom-columns=TIME:.lastTimestamp,TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message
fi

step "exactly restored?"
snapshot "$dir/after.json"
claims=$( { k -n harvester-system get kubevirt kubevirt -o json --show-managed-fields
            k -n fleet-local get managedchart harvester -o json --show-managed-fields; } \
          | jq -s '[.[].metadata.managedFields[] | select(.manager == "workload-update-guard")] | length')
diff "$dir/before.json" "$dir/after.json" && [[ "$claims" == 0 ]] \
  && echo "yes: the KubeVirt CR and the ManagedChart are exactly as before pre, and no claim of ours is left"
