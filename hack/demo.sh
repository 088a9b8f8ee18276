#!/usr/bin/env bash
# The main job on a local control plane with a Harvester-like cluster state:
# builds the release binary, starts kube-apiserver + etcd, applies hack/demo/harvester.yaml and
# the RBAC of manifests/, then runs status -> pre -> status -> post -> status exactly as the
# Jobs would (their environment, the ServiceAccount's token only). Everything is torn down after.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
command -v jq >/dev/null || { echo "demo: jq is required (apt-get install jq)" >&2; exit 1; }

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "build"
bash hack/control-plane.sh build
cargo build --release --quiet
BIN="$REPO_ROOT/target/release/workload-update-guard"
KUBECTL="$(bash hack/control-plane.sh bin-dir)/kubectl"

step "control plane"
dir="$(bash hack/control-plane.sh up)"
trap 'bash "$REPO_ROOT/hack/control-plane.sh" down "$dir"' EXIT
k() { "$KUBECTL" --kubeconfig "$dir/kubeconfig" "$@"; }

step "Harvester-like state: KubeVirt harvester-system/kubevirt, ManagedChart fleet-local/harvester"
# Server-side, as manager helm: the field ownership Helm 4 (so Fleet) leaves on the KubeVirt CR.
k apply --server-side --field-manager helm -f hack/demo/harvester.yaml
k -n harvester-system patch kubevirt kubevirt --subresource=status --type=merge -p \
  '{"status":{"phase":"Deployed","observedKubeVirtVersion":"v1.4.1","targetKubeVirtVersion":"v1.5.2","outdatedVirtualMachineInstanceWorkloads":2}}' >/dev/null
k -n default patch vmim kubevirt-workload-update-x7k2p --subresource=status --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null
k apply -k manifests/base

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

# run PHASE: the binary with the environment of the Job in manifests/PHASE (logs as text, to read).
run() {
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

step "exactly restored?"
snapshot "$dir/after.json"
claims=$( { k -n harvester-system get kubevirt kubevirt -o json --show-managed-fields
            k -n fleet-local get managedchart harvester -o json --show-managed-fields; } \
          | jq -s '[.[].metadata.managedFields[] | select(.manager == "workload-update-guard")] | length')
diff "$dir/before.json" "$dir/after.json" && [[ "$claims" == 0 ]] \
  && echo "yes: the KubeVirt CR and the ManagedChart are exactly as before pre, and no claim of ours is left"
