#!/usr/bin/env bash
# Baseline for hack/bench.sh: the same edits as workload-update-guard on the demo state, made the
# way a shell implementation does: one `kubectl get` and one `kubectl patch` per object per phase
# (the patches are conditional on the resourceVersion too, to be as safe as the tool).
#   kubectl-guard.sh pre|post     (KUBECONFIG and KUBECTL from the environment)
set -euo pipefail
KUBECTL="${KUBECTL:-kubectl}"
PTR=/spec/workloadUpdateStrategy/workloadUpdateMethods
REC='workload-update-guard.harvesterhci.io~1'

case "$1" in
pre)
  chart=$("$KUBECTL" -n fleet-local get managedchart harvester -o json)
  ops=$(jq -c --arg ptr "$PTR" --arg rec "$REC" '
    (.spec.values.kubevirt.spec.workloadUpdateStrategy.workloadUpdateMethods) as $orig |
    [ {op: "test", path: "/metadata/resourceVersion", value: .metadata.resourceVersion},
      (if .spec.values.kubevirt.spec.workloadUpdateStrategy
       then {op: "add", path: "/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods", value: []}
       else {op: "add", path: "/spec/values/kubevirt/spec/workloadUpdateStrategy", value: {workloadUpdateMethods: []}} end),
      {op: "add", path: "/spec/diff/comparePatches/-", value: {apiVersion: "kubevirt.io/v1", kind: "KubeVirt",
        name: "kubevirt", namespace: "harvester-system", jsonPointers: [$ptr]}},
      (if .metadata.annotations then empty else {op: "add", path: "/metadata/annotations", value: {}} end),
      {op: "add", path: ("/metadata/annotations/" + $rec + "original-values-workload-update-methods"),
        value: (if $orig == null then {present: false, createdParents: ["/spec/values/kubevirt/spec/workloadUpdateStrategy"]}
                else {present: true, value: $orig} end | tojson)},
      {op: "add", path: ("/metadata/annotations/" + $rec + "compare-patch"), value: ({added: "entry"} | tojson)} ]' <<<"$chart")
  "$KUBECTL" -n fleet-local patch managedchart harvester --type=json -p "$ops" >/dev/null

  kv=$("$KUBECTL" -n harvester-system get kubevirt kubevirt -o json)
  ops=$(jq -c --arg rec "$REC" '
    (.spec.workloadUpdateStrategy.workloadUpdateMethods) as $orig |
    [ {op: "test", path: "/metadata/resourceVersion", value: .metadata.resourceVersion},
      {op: "add", path: "/spec/workloadUpdateStrategy/workloadUpdateMethods", value: []},
      {op: "add", path: ("/metadata/annotations/" + $rec + "original-workload-update-methods"),
        value: (if $orig == null then {present: false} else {present: true, value: $orig} end | tojson)} ]' <<<"$kv")
  "$KUBECTL" -n harvester-system patch kubevirt kubevirt --type=json -p "$ops" >/dev/null
  ;;
post)
  kv=$("$KUBECTL" -n harvester-system get kubevirt kubevirt -o json)
  ops=$(jq -c --arg rec "$REC" '
    (.metadata.annotations["workload-update-guard.harvesterhci.io/original-workload-update-methods"] | fromjson) as $r |
    [ {op: "test", path: "/metadata/resourceVersion", value: .metadata.resourceVersion},
      (if $r.present then {op: "add", path: "/spec/workloadUpdateStrategy/workloadUpdateMethods", value: $r.value}
       else {op: "remove", path: "/spec/workloadUpdateStrategy/workloadUpdateMethods"} end),
      {op: "remove", path: ("/metadata/annotations/" + $rec + "original-workload-update-methods")} ]' <<<"$kv")
  "$KUBECTL" -n harvester-system patch kubevirt kubevirt --type=json -p "$ops" >/dev/null

  chart=$("$KUBECTL" -n fleet-local get managedchart harvester -o json)
  ops=$(jq -c --arg ptr "$PTR" --arg rec "$REC" '
    (.metadata.annotations["workload-update-guard.harvesterhci.io/original-values-workload-update-methods"] | fromjson) as $r |
    ([.spec.diff.comparePatches | to_entries[] | select(.value.kind == "KubeVirt" and .value.name == "kubevirt"
       and (.value.jsonPointers // [] | index($ptr)))] | first | .key) as $i |
    [ {op: "test", path: "/metadata/resourceVersion", value: .metadata.resourceVersion},
      (if $r.present then {op: "add", path: "/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods", value: $r.value}
       else {op: "remove", path: ($r.createdParents[0] // "/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods")} end),
      {op: "remove", path: ("/spec/diff/comparePatches/" + ($i | tostring))},
      {op: "remove", path: ("/metadata/annotations/" + $rec + "original-values-workload-update-methods")},
      {op: "remove", path: ("/metadata/annotations/" + $rec + "compare-patch")} ]' <<<"$chart")
  "$KUBECTL" -n fleet-local patch managedchart harvester --type=json -p "$ops" >/dev/null
  ;;
*) echo "usage: $0 pre|post" >&2; exit 2 ;;
esac
