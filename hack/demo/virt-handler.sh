# shellcheck shell=bash
# The node's part of a live migration, for the demo (sourced by hack/demo/kubevirt.sh, which
# defines KUBECTL, KV_VM_NS, kv_now and kv_ms), played as KubeVirt's virt-handler and the kubelet
# play it, exactly as tests/support/virt_handler.rs plays it for the tests, so that KubeVirt's
# own virt-controller (its evacuation, migration, VMI and workload-update controllers) decides
# everything else. Nothing here creates, paces or ends a migration by itself: it answers what the
# migration controller asks of the nodes, in the order the real ones answer it.
#
# Followed (KubeVirt v1.6.0; the same fields and order in v1.4.0 to v1.9.0):
# - the scheduler and the kubelet: the target pod the migration controller renders
#   (pkg/virt-controller/watch/migration/migration.go handleTargetPodCreation) is bound to
#   another node, one without the drain taint (the pod tolerates none), and Running and Ready;
#   the controller then hands off (handleTargetPodHandoff: migrationState.targetNode,
#   targetPod, the kubevirt.io/migrationTargetNodeName label);
# - the target's virt-handler (pkg/virt-handler/migration-target.go updateStatus):
#   targetNodeAddress and targetDirectMigrationNodePorts (PreparingTarget -> TargetReady);
# - the source's virt-handler (migration-source.go setMigrationProgressStatus): startTimestamp
#   and mode (-> Running); the migration then takes KV_MIGRATION_TIME seconds;
# - the target: targetNodeDomainDetected, targetNodeDomainReadyTimestamp; the source: completed
#   (updateStatus, once the target has the running domain); the target's ack
#   (ackMigrationCompletion): endTimestamp, the VMI's node and its kubevirt.io/nodeName label
#   moved to the target, launcherContainerImageVersion cleared (the VMI controller sets it again
#   from the VMI's current pod: pkg/virt-controller/watch/vmi/lifecycle.go
#   setLauncherContainerInfo), the outdated and target labels removed (-> Succeeded);
# - the source's kubelet: the source virt-launcher exits once its domain has left: the pod
#   Succeeded, so that the VMI has one active pod again (the evacuation controller waits for that
#   before it migrates the VMI a second time).
#
# The VMI CRD has no status subresource: each write is a merge patch of the object, as
# virt-handler's are patches of the VMI. Polled every 0.4 s (kubectl and jq), in the background
# (kv_nodes_start), stopped by its PID (kv_pids, which hack/demo.sh's exit trap kills).

KV_MIGRATION_TIME="${KV_MIGRATION_TIME:-1}" # seconds from a migration's start to its completion
KV_DRAIN_TAINT=kubevirt.io/drain
KV_MIGRATION_UID_LABEL=kubevirt.io/migrationJobUID # virt-controller's label on a target pod
kv_pids=()

# kv_run_pod KUBECONFIG POD_JSON NODE: the scheduler's binding (unless bound already) and the
# kubelet's status: the pod Running and Ready on NODE.
kv_run_pod() {
  local kc="$1" pod="$2" node="$3" name now
  name="$(jq -r .metadata.name <<<"$pod")"
  if [[ -z "$(jq -r '.spec.nodeName // ""' <<<"$pod")" ]]; then
    jq -n --arg pod "$name" --arg ns "$KV_VM_NS" --arg node "$node" \
      '{apiVersion: "v1", kind: "Binding", metadata: {name: $pod, namespace: $ns},
        target: {apiVersion: "v1", kind: "Node", name: $node}}' \
      | "$KUBECTL" --kubeconfig "$kc" create --raw "/api/v1/namespaces/$KV_VM_NS/pods/$name/binding" -f - >/dev/null || return 1
  fi
  now="$(kv_now)"
  "$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" patch pod "$name" --subresource=status --type=merge \
    -p "$(jq -c --arg now "$now" '{status: {phase: "Running", podIP: "10.0.0.1", podIPs: [{ip: "10.0.0.1"}], startTime: $now,
          conditions: [{type: "Ready", status: "True", lastTransitionTime: $now},
                       {type: "PodScheduled", status: "True", lastTransitionTime: $now}],
          containerStatuses: [.spec.containers[] | {name, image, imageID: .image, ready: true, started: true,
            restartCount: 0, containerID: ("containerd://" + .name), state: {running: {startedAt: $now}}}]}}' <<<"$pod")" >/dev/null
}

kv_vmi_patch() { # kv_vmi_patch KUBECONFIG VMI JSON: a merge patch of the VMI, as virt-handler's
  "$KUBECTL" --kubeconfig "$1" -n "$KV_VM_NS" patch vmi "$2" --type=merge -p "$3" >/dev/null
}

# kv_complete KUBECONFIG VMI_JSON TARGET_NODE: the end of a migration, in the nodes' order: the
# target has the running domain, the source reports completion, the target acknowledges and
# takes the VMI, the source pod exits.
kv_complete() {
  local kc="$1" vmi="$2" target="$3" name source_pod pod now
  name="$(jq -r .metadata.name <<<"$vmi")"
  kv_vmi_patch "$kc" "$name" "$(jq -nc --arg now "$(kv_now)" \
    '{status: {migrationState: {targetNodeDomainDetected: true, targetNodeDomainReadyTimestamp: $now}}}')" || return 1
  kv_vmi_patch "$kc" "$name" '{"status": {"migrationState": {"completed": true}}}' || return 1
  kv_vmi_patch "$kc" "$name" "$(jq -nc --arg node "$target" --arg now "$(kv_now)" \
    '{metadata: {labels: {"kubevirt.io/nodeName": $node, "kubevirt.io/outdatedLauncherImage": null,
                          "kubevirt.io/migrationTargetNodeName": null}},
      status: {nodeName: $node, launcherContainerImageVersion: "", evacuationNodeName: null,
               migrationTransport: "Unix", migrationState: {endTimestamp: $now}}}')" || return 1
  source_pod="$(jq -r '.status.migrationState.sourcePod // empty' <<<"$vmi")"
  if [[ -z "$source_pod" ]]; then
    # Older migration states name no source pod: the VMI's launcher on the source node.
    source_pod="$("$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" get pods -o json | jq -r \
      --arg node "$(jq -r '.status.migrationState.sourceNode // ""' <<<"$vmi")" --arg uid "$(jq -r .metadata.uid <<<"$vmi")" \
      'first(.items[] | select(.spec.nodeName == $node and any(.metadata.ownerReferences[]?; .uid == $uid)) | .metadata.name) // empty')" || return 1
  fi
  [[ -n "$source_pod" ]] || return 0
  pod="$("$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" get pod "$source_pod" -o json)" || return 1
  now="$(kv_now)"
  "$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" patch pod "$source_pod" --subresource=status --type=merge \
    -p "$(jq -c --arg now "$now" '{status: {phase: "Succeeded",
          conditions: [{type: "Ready", status: "False", lastTransitionTime: $now}],
          containerStatuses: [.spec.containers[] | {name, image, imageID: .image, ready: false, restartCount: 0,
            state: {terminated: {exitCode: 0, reason: "Completed", startedAt: $now, finishedAt: $now}}}]}}' <<<"$pod")" >/dev/null
}

# KV_PASS_JQ: what kv_handler_pass reads from the migrations under way, the VMIs, the pods and
# the nodes (one jq a pass: the machine may be busy): for each migration of a VMI that exists,
# shell assignments (@sh) of
#   uid, name        the migration's UID, its VMI;
#   target_json      its target pod if not Running yet (else empty), and target_node: the node
#                    it is bound to, else the scheduler's choice: a node other than the source,
#                    matching the pod's nodeSelector (kubevirt.io/schedulable=true: not the
#                    chart's real node), without the drain taint, with the fewest running pods (spreading, as the
#                    default scheduler's scoring does for equal nodes; the first by name among
#                    equals), empty if none;
#   handed           1 once the migration controller handed off (migrationState.migrationUid is
#                    this migration's, targetNode set);
#   step             the node's next answer: address, start, complete, or empty;
#   state_target     migrationState.targetNode; vmi_json the VMI.
# shellcheck disable=SC2016 # jq's own variables
KV_PASS_JQ='
  .[0] as $ms | .[1] as $vmis | .[2] as $pods | .[3] as $nodes
  | def least_loaded($source; $selector):
      [$nodes.items[] | select(.metadata.name != $source)
        | select(.metadata.labels as $l | $selector | to_entries | all(.value == $l[.key]))
        | select(any(.spec.taints[]?; .key == $taint) | not) | .metadata.name] as $names
      | [$names[] as $n | {n: $n, load: ([$pods.items[] | select(.status.phase == "Running" and .spec.nodeName == $n)] | length)}]
      | sort_by(.load, .n) | first | .n // "";
    $ms[] | .metadata.uid as $uid | (.spec.vmiName // "") as $name | select($name != "")
  | (first($vmis.items[] | select(.metadata.name == $name)) // null) as $vmi | select($vmi != null)
  | ($vmi.status.nodeName // "") as $source
  | (first($pods.items[] | select(.metadata.labels[$uid_label] == $uid)) // null) as $target
  | ($vmi.status.migrationState // {}) as $st
  | {uid: $uid, name: $name,
     target_json: (if $target != null and $target.status.phase != "Running" then $target | tojson else "" end),
     target_node: (if $target == null then "" else ($target.spec.nodeName // least_loaded($source; $target.spec.nodeSelector // {})) end),
     handed: (if $st.migrationUid == $uid and ($st.targetNode // "") != "" then "1" else "" end),
     step: (if $st.targetNodeAddress == null then "address" elif $st.startTimestamp == null then "start"
            elif $st.completed != true then "complete" else "" end),
     state_target: ($st.targetNode // ""), vmi_json: ($vmi | tojson)}
  | @sh "uid=\(.uid) name=\(.name) target_json=\(.target_json) target_node=\(.target_node) handed=\(.handed) step=\(.step) state_target=\(.state_target) vmi_json=\(.vmi_json)"'

# kv_handler_pass KUBECONFIG: one look at the migrations under way, and the node's next answer to
# each (`started`, the start of each migration by its UID, is kv_virt_handler's).
kv_handler_pass() {
  local kc="$1" migrations vmis pods nodes line uid name target_json target_node handed step state_target vmi_json began
  migrations="$("$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" get virtualmachineinstancemigrations -o json \
    | jq -c '[.items[] | select(.status.phase != "Succeeded" and .status.phase != "Failed")]')" || return 1
  [[ "$migrations" != "[]" ]] || return 0
  vmis="$("$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" get virtualmachineinstances -o json)" || return 1
  pods="$("$KUBECTL" --kubeconfig "$kc" -n "$KV_VM_NS" get pods -o json)" || return 1
  nodes="$("$KUBECTL" --kubeconfig "$kc" get nodes -o json)" || return 1
  while IFS= read -r line; do
    eval "$line"
    # The scheduler and the kubelet: the target pod placed and running.
    if [[ -n "$target_json" ]]; then
      [[ -n "$target_node" ]] || continue # no node to go to: the pod stays Pending
      kv_run_pod "$kc" "$target_json" "$target_node" || return 1
    fi
    [[ -n "$handed" ]] || continue # not handed off yet
    case "$step" in
      address)
        kv_vmi_patch "$kc" "$name" '{"status": {"migrationState": {
          "targetNodeAddress": "10.0.0.2", "targetDirectMigrationNodePorts": {"49152": 0}}}}' || return 1 ;;
      start)
        kv_vmi_patch "$kc" "$name" '{"status": {"migrationState": {"startTimestamp": "'"$(kv_now)"'", "mode": "PreCopy"}}}' || return 1
        started[$uid]=$(kv_ms) ;;
      complete)
        began="${started[$uid]:-}"
        [[ -n "$began" ]] || { began=$(kv_ms); started[$uid]=$began; }
        (( $(kv_ms) - began >= KV_MIGRATION_TIME * 1000 )) || continue
        kv_complete "$kc" "$vmi_json" "$state_target" || return 1
        unset "started[$uid]" ;;
    esac
  done < <(printf '%s\n' "$migrations" "$vmis" "$pods" "$nodes" \
             | jq -rs --arg uid_label "$KV_MIGRATION_UID_LABEL" --arg taint "$KV_DRAIN_TAINT" "$KV_PASS_JQ")
}

# kv_virt_handler KUBECONFIG: every node's virt-handler and kubelet, until killed (or the demo
# gone); a pass that met a conflict or a restarting API server is followed by another, which
# reads again, as an informer's resync would.
kv_virt_handler() {
  local -A started=()
  local owner=$$
  while kill -0 "$owner" 2>/dev/null; do
    kv_handler_pass "$1" || echo "virt-handler stand-in: a pass failed; the next one reads again" >&2
    sleep 0.4
  done
}

# kv_nodes_start KUBECONFIG LOG: the stand-in in the background (its PID in kv_pids).
kv_nodes_start() {
  kv_virt_handler "$1" 2>>"$2" &
  kv_pids+=("$!")
}
# kv_nodes_stop: the stand-ins stopped, by their PIDs.
kv_nodes_stop() {
  local p
  for p in ${kv_pids[@]+"${kv_pids[@]}"}; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  kv_pids=()
}
