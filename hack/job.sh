#!/usr/bin/env bash
# Run a phase of the guard as a Job, by hand or as an orchestrator would, so that a rerun is never
# mistaken for success: every run is a new Job and a new pod, the wait returns as soon as the Job
# is Complete or Failed and says which, and a pod that cannot get its image fails the Job. Needs
# only kubectl and jq. Run without arguments for usage.
set -euo pipefail

usage() {
  cat >&2 <<'USAGE'
usage: hack/job.sh COMMAND PHASE [OPTIONS]     PHASE: pre, post, status or post-armed
       hack/job.sh arm [OPTIONS]
       hack/job.sh images [--image IMAGE] [--no-pull] [--pull-secret NAME]...
       hack/job.sh uninstall [--force] [--image IMAGE] [--pull-secret NAME]... [--timeout SECONDS]

  arm           right after pre: create the armed post Job (manifests/post-armed,
                workload-update-guard-post-armed), which waits for the next upgrade to begin and
                to end (cleanup included, at most ARM_WAIT_SECONDS, a week), then restores as
                post does. Refused while an armed Job still runs (one at a time). It does not
                wait: `hack/job.sh run status` names it, `hack/job.sh wait post-armed` waits.

  run PHASE     run the phase again, and wait as `wait` does:
                - refuses while the phase's Job is still running (it never starts a second run
                  of a phase, and never kills one);
                - prints how the previous run ended, then deletes that finished Job and its pods;
                - applies the ServiceAccount and RBAC, and creates the Job (`kubectl create`:
                  never "configured", never a no-op).
  wait PHASE    wait until the Job is Complete or Failed; print which, with each pod's exit code
                and termination message (the run's summary). Exit 0 if Complete, 1 if Failed,
                124 on --timeout, 2 on any other error. While waiting, a pod whose image cannot be
                pulled for --pull-timeout seconds is marked and deleted, which fails the Job at
                once (podFailurePolicy); the message, naming the image, is printed here and left
                on the Job (annotation workload-update-guard.harvesterhci.io/failure).
  render PHASE  print the objects `run` creates, as one JSON List
  images        check, on every node, what the Jobs' pod will find there: a short pod per node,
                pinned to it, with imagePullPolicy Never (a node without the image answers
                ErrImageNeverPull at once, whatever the kubelet's image list shows); on a node
                without it, a second one with IfNotPresent, the Jobs' policy: the kubelet pulls
                it now (and keeps it). One line per node: `NODE true` (present), `NODE true
                (pulled now)`, or `NODE false (REASON)` naming why it cannot be pulled (auth, TLS,
                not found, unreachable) and the kubelet's message. Exit 0 only if every node
                has it or pulled it. --no-pull: only the first check. --pull-secret NAME
                (repeatable): the pull pods pull with that kubernetes.io/dockerconfigjson Secret
                of harvester-system, as the chart's imagePullSecrets make its pods do (give the
                same to run, arm, render and uninstall).
  uninstall     remove what the manifests installed (the Jobs of every phase, then the
                ServiceAccount, RBAC and NetworkPolicy of manifests/base). Refused while a
                suspension of ours is in place: it runs `status` first (a Job: --image,
                --pull-secret and --timeout as for run) and goes on only if the
                verdict is NOT SUSPENDED or NOT FOUND (run post first); refused while an armed
                post waits. --force: remove them anyway (the suspension and its record stay).

options:
  --plan PLAN         upgrade-toolkit's conventions: the Job `PLAN-workload-update-guard-PHASE`,
                      labelled management.harvesterhci.io/upgrade-plan=PLAN and
                      management.harvesterhci.io/upgrade-component=workload-update-guard-PHASE
                      (the Job and its pods), owned by the UpgradePlan PLAN (which must exist: the
                      Job and its pods go with it), ttlSecondsAfterFinished 604800 (7 days), and
                      UPGRADE_PLAN=PLAN in its environment (post does not wait for the plan that
                      runs it to end)
  --image IMAGE       the guard's image (default: the one manifests/job/kustomization.yaml names)
  --pull-secret NAME  (repeatable) the Job's pod pulls the image with that
                      kubernetes.io/dockerconfigjson Secret of harvester-system (a registry that
                      needs a login), as the chart's imagePullSecrets
  --timeout SECONDS   how long `wait` waits (default: the Job's own bound, its
                      activeDeadlineSeconds, and 60 s more: 1860 for pre and status, 2760 for
                      post, whose Job waits for an upgrade under way and its cleanup)
  --pull-timeout SECONDS
                      how long a pod may fail to pull its image before the Job is failed
                      (default 120; 0 never). ErrImageNeverPull and InvalidImageName fail at once.
  --env NAME=VALUE    set a variable of the guard (repeatable): any of the configuration table's
                      (docs/configuration.md), e.g. --env FLEET_WAIT_SECONDS=900; it replaces the
                      manifest's value. An unknown name is refused before anything is created;
                      PHASE is the command's (and ARM is arm's, UPGRADE_PLAN --plan's).

environment: KUBECTL (default: kubectl on PATH), and kubectl's own (KUBECONFIG).
USAGE
}

NS=harvester-system
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUBECTL="${KUBECTL:-kubectl}"
# The pod condition `wait` sets on a pod that cannot get its image; manifests/job/job.yaml's
# podFailurePolicy fails the Job on it.
IMAGE_CONDITION=workload-update-guard.harvesterhci.io/ImageUnavailable
# ... and the annotation it leaves on the Job, with the same message.
FAILURE_ANNOTATION=workload-update-guard.harvesterhci.io/failure
PULL_REASONS='["ErrImagePull","ImagePullBackOff","ErrImageNeverPull","InvalidImageName","RegistryUnavailable"]'
PERMANENT_PULL_REASONS='["ErrImageNeverPull","InvalidImageName"]'

die() { echo "job: ERROR: $*" >&2; exit 2; }
# bad MESSAGE: a wrong command line: the one-line error, then a one-line hint (not the usage).
bad() {
  echo "job: ERROR: $*" >&2
  echo "usage: hack/job.sh run|wait|render pre|post|status|post-armed | arm [--plan PLAN] [--image IMAGE] [--env NAME=VALUE] [--timeout SECONDS] [--pull-timeout SECONDS] (hack/job.sh --help says more)" >&2
  exit 2
}
say() { echo "job: $*" >&2; }
k() { "$KUBECTL" "$@"; }

cmd="${1:-}"; phase="${2:-}"
case "$cmd" in
  -h|--help|help) usage; exit 0 ;;
  run|wait|render) ;;
  # The image of the status Job (the same in every phase's), unless --image says otherwise.
  images) phase=status; set -- "$1" status "${@:2}" ;;
  # uninstall runs status first.
  uninstall) phase=status; set -- "$1" status "${@:2}" ;;
  # arm is `run post-armed` without the wait (which lasts until the upgrade's end).
  arm) phase=post-armed; set -- "$cmd" "$phase" "${@:2}" ;;
  "") usage; exit 2 ;;
  *) bad "unknown command '$cmd': expected run, wait, render, arm, images or uninstall" ;;
esac
case "$phase" in
  pre|post|status|post-armed) ;;
  "") bad "$cmd needs a PHASE: pre, post or status" ;;
  *) bad "PHASE must be pre, post, status or post-armed, not '$phase'" ;;
esac
shift 2
plan="" image="" timeout="" pull_timeout=120 env_json="[]" no_pull=0 force=0 pull_secrets="[]"
# The variables --env may set: the configuration table's (docs/configuration.md, as
# hack/docs_check.py reads it), but the ones this script's commands set themselves.
documented_vars() {
  awk '/^## Configuration/ {on = 1; next} on && /^## / {exit}
       on && /^\| `[A-Z_]+` \|/ {split($0, c, "`"); print c[2]}' "$REPO_ROOT/docs/configuration.md"
}
add_env() { # add_env NAME=VALUE
  local name="${1%%=*}" value="${1#*=}"
  [[ "$1" == *=* && -n "$name" ]] || bad "--env takes NAME=VALUE, not '$1'"
  case "$name" in
    PHASE) bad "--env PHASE: the phase is the command's (run pre|post|status)" ;;
    ARM) bad "--env ARM: hack/job.sh arm sets it" ;;
    UPGRADE_PLAN) bad "--env UPGRADE_PLAN: --plan sets it" ;;
  esac
  grep -qxF -- "$name" <(documented_vars) \
    || bad "--env $name: not a variable of the guard (the table in docs/configuration.md: $(documented_vars | grep -v -x -e PHASE -e ARM -e UPGRADE_PLAN | paste -sd, -))"
  env_json="$(jq -c --arg n "$name" --arg v "$value" 'map(select(.name != $n)) + [{name: $n, value: $v}]' <<<"$env_json")"
}
command -v jq >/dev/null || die "jq is required"
while (( $# )); do
  case "$1" in
    --plan) plan="${2:?--plan needs a value}"; shift 2 ;;
    --env) add_env "${2:?--env needs NAME=VALUE}"; shift 2 ;;
    --no-pull) [[ "$cmd" == images ]] || bad "--no-pull is for images"; no_pull=1; shift ;;
    --pull-secret)
      [[ "$cmd" =~ ^(images|run|arm|render|uninstall)$ ]] || bad "--pull-secret is for images, run, arm, render and uninstall (the pod's imagePullSecrets)"
      pull_secrets="$(jq -c --arg n "${2:?--pull-secret needs the name of a Secret}" '. + [{name: $n}] | unique' <<<"$pull_secrets")"; shift 2 ;;
    --force) [[ "$cmd" == uninstall ]] || bad "--force is for uninstall"; force=1; shift ;;
    --image) image="${2:?--image needs a value}"; shift 2 ;;
    --timeout) timeout="${2:?--timeout needs a value}"; shift 2 ;;
    --pull-timeout) pull_timeout="${2:?--pull-timeout needs a value}"; shift 2 ;;
    *) bad "unknown option '$1'" ;;
  esac
done
[[ ( -z "$timeout" || "$timeout" =~ ^[0-9]+$ ) && "$pull_timeout" =~ ^[0-9]+$ ]] || die "--timeout and --pull-timeout take seconds"
command -v "$KUBECTL" >/dev/null || die "kubectl is required (KUBECTL=$KUBECTL is not found)"

# Every command needs the API server (even render: kubectl converts the manifests with the
# server's API list). Unreachable, that is said once, with kubectl's own reason, and nothing
# downstream blames the manifests or a missing Job.
reachable() {
  local out server
  if out="$(k get --raw /version --request-timeout=10s 2>&1 >/dev/null)"; then return 0; fi
  server="$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null || true)"
  # kubectl's last line is the reason; the lines before it are client-go's log (E1201 ...).
  out="$(grep -v '^[EWI][0-9]\{4\} ' <<<"$out" | sed '/^$/d' | tail -n 1)"
  case "$out" in
    *Unauthorized* | *orbidden*) die "the API server${server:+ at $server} refused kubectl's credentials: $out (check KUBECONFIG${KUBECONFIG:+=$KUBECONFIG})" ;;
  esac
  die "the cluster is unreachable${server:+ at $server}: ${out:-kubectl get --raw /version failed} (check KUBECONFIG${KUBECONFIG:+=$KUBECONFIG} and the network)"
}
reachable

component="workload-update-guard-$phase"
job="$component"
if [[ -n "$plan" ]]; then
  job="$plan-$component"
  # The Job controller labels its pods with the Job's name, which a label value limits to 63.
  (( ${#job} <= 63 )) || die "the Job name '$job' is over 63 characters: use a shorter plan name"
fi

render() { # the kustomization of the phase, with --image and --plan applied, as one JSON List
  local yaml objects uid=""
  yaml="$(k kustomize "$REPO_ROOT/manifests/$phase")" || die "kubectl kustomize manifests/$phase failed"
  objects="$(k create --dry-run=client -o json -f - <<<"$yaml")" || die "cannot convert the manifests"
  if [[ -n "$plan" ]]; then
    uid="$(k get upgradeplans.management.harvesterhci.io "$plan" -o jsonpath='{.metadata.uid}')" \
      || die "no UpgradePlan '$plan' to own the Job"
  fi
  jq -s --arg job "$job" --arg image "$image" --arg plan "$plan" --arg uid "$uid" \
    --arg component "$component" --argjson env "$env_json" --argjson secrets "$pull_secrets" '
    [.[] | if .kind == "List" then .items[] else . end]
    | map(if .kind != "Job" then . else
        .metadata.name = $job
        | if $image != "" then .spec.template.spec.containers[0].image = $image else . end
        | if $secrets != [] then .spec.template.spec.imagePullSecrets = $secrets else . end
        | ([$env[].name]) as $names
        | .spec.template.spec.containers[0].env
            |= ([.[]? | select(.name as $n | $names | index($n) | not)] + $env)
        | if $plan == "" then . else
            ({"management.harvesterhci.io/upgrade-plan": $plan,
              "management.harvesterhci.io/upgrade-component": $component}) as $labels
            | .metadata.labels += $labels
            | .spec.template.metadata.labels += $labels
            | .metadata.ownerReferences = [{"apiVersion": "management.harvesterhci.io/v1beta1",
                "kind": "UpgradePlan", "name": $plan, "uid": $uid,
                "controller": true, "blockOwnerDeletion": true}]
            | .spec.ttlSecondsAfterFinished = 604800
            | .spec.template.spec.containers[0].env += [{"name": "UPGRADE_PLAN", "value": $plan}]
          end
      end)
    | {"apiVersion": "v1", "kind": "List", "items": .}' <<<"$objects"
}

job_json() { k -n "$NS" get job "$job" -o json 2>/dev/null; }

# finished JOB_JSON: "Complete" or "Failed" if that condition is True, else nothing.
finished() {
  jq -r '[.status.conditions[]? | select(.status == "True" and (.type == "Complete" or .type == "Failed"))
          | .type][0] // empty' <<<"$1"
}

report() { # report JOB_JSON: how the Job ended, and each pod's exit code and termination message
  local j="$1"
  jq -r '.status.conditions[]? | select(.status == "True" and (.type == "Complete" or .type == "Failed"))
         | "job: \(.type)" + (if .reason then " (\(.reason))" else "" end)
           + (if .message then ": \(.message)" else "" end)' <<<"$j" >&2
  jq -r --arg a "$FAILURE_ANNOTATION" '.metadata.annotations[$a] // empty | "job: \(.)"' <<<"$j" >&2
  k -n "$NS" get pods -l "job-name=$job" -o json 2>/dev/null | jq -r --arg cond "$IMAGE_CONDITION" '
    .items | sort_by(.metadata.creationTimestamp)[]
    | .metadata.name as $pod
    | ([.status.conditions[]? | select(.type == $cond) | .message][0]) as $pull
    | (.status.containerStatuses[0].state // {}) as $s
    | if $pull then "job: pod \($pod): \($pull)"
      elif $s.terminated then
        "job: pod \($pod): exit \($s.terminated.exitCode) \($s.terminated.message // "" | gsub("\n$"; ""))"
      elif $s.waiting then "job: pod \($pod): waiting: \($s.waiting.reason) \($s.waiting.message // "")"
      else "job: pod \($pod): \(.status.phase) \(.status.reason // "")" end' >&2 || true
  # The run's warnings (a half-restored post, migrations pre cannot stop, skips), one a line, so
  # that none hides in the JSON above.
  k -n "$NS" get pods -l "job-name=$job" -o json 2>/dev/null | jq -r '
    .items | sort_by(.metadata.creationTimestamp)[]
    | (.status.containerStatuses[0].state.terminated.message // "" | fromjson? // {}) | .warnings[]?
    | "job: WARNING: \(.)"' >&2 || true
}

# fail_unpullable: a pod of the Job that cannot get its image (a pull reason for --pull-timeout
# seconds since the kubelet took it, or a permanent one) gets the ImageUnavailable condition,
# naming the image, and is deleted: it ends Failed, and the podFailurePolicy fails the Job. A pod
# that never ran has no exit code, so no other rule can see it.
fail_unpullable() {
  (( pull_timeout > 0 )) || return 0
  local pods line pod msg
  pods="$(k -n "$NS" get pods -l "job-name=$job" -o json 2>/dev/null)" || return 0
  while IFS=$'\t' read -r pod msg; do
    [[ -n "$pod" ]] || continue
    line="$(jq -cn --arg t "$IMAGE_CONDITION" --arg m "$msg" \
      '[{"op": "add", "path": "/status/conditions/-", "value":
         {"type": $t, "status": "True", "reason": "ImagePullFailed", "message": $m}}]')"
    say "$msg: failing the Job"
    # The pod goes once it is Failed: the Job keeps the message.
    if ! k -n "$NS" annotate --overwrite job "$job" "$FAILURE_ANNOTATION=$msg" >/dev/null \
      || ! k -n "$NS" patch pod "$pod" --subresource=status --type=json -p "$line" >/dev/null \
      || ! k -n "$NS" delete pod "$pod" --wait=false >/dev/null; then
      say "could not mark and delete pod $pod"
    fi
  done < <(jq -r --argjson reasons "$PULL_REASONS" --argjson permanent "$PERMANENT_PULL_REASONS" \
      --arg cond "$IMAGE_CONDITION" --argjson limit "$pull_timeout" '
    (now | floor) as $now
    | .items[]
    | select(.metadata.deletionTimestamp == null and .status.startTime != null)
    | select([.status.conditions[]? | select(.type == $cond)] | length == 0)
    | . as $p
    | .status.containerStatuses[]? | select(.state.waiting.reason as $r | any($reasons[]; . == $r))
    | ($now - ($p.status.startTime | fromdateiso8601)) as $age
    | select((.state.waiting.reason as $r | any($permanent[]; . == $r)) or $age >= $limit)
    | [$p.metadata.name,
       "the image \(.image) cannot be pulled on node \($p.spec.nodeName // "?"): \(.state.waiting.reason)"
       + " for \($age) s: \(.state.waiting.message // "")"]
    | @tsv' <<<"$pods")
}

wait_job() {
  local start=$SECONDS j outcome last_pull_check=-10
  j="$(job_json)" || die "job $NS/$job not found"
  # By default the Job's own bound and a minute more, so a Job still within its bound never
  # reads as 124.
  if [[ -z "$timeout" ]]; then
    timeout="$(jq -r '(.spec.activeDeadlineSeconds // 1800) + 60' <<<"$j")"
  fi
  say "waiting for job $NS/$job (Complete or Failed, at most $timeout s)"
  while :; do
    j="$(job_json)" || die "job $NS/$job not found"
    outcome="$(finished "$j")"
    if [[ -n "$outcome" ]]; then
      report "$j"
      say "job $NS/$job $outcome after $((SECONDS - start)) s of waiting"
      [[ "$outcome" == Complete ]] && return 0
      return 1
    fi
    if (( SECONDS - start >= timeout )); then
      report "$j"
      say "job $NS/$job neither Complete nor Failed after $timeout s"
      return 124
    fi
    if (( SECONDS - last_pull_check >= 2 )); then
      last_pull_check=$SECONDS
      fail_unpullable
    fi
    sleep 0.5
  done
}

run() {
  local j objects outcome
  if j="$(job_json)"; then
    outcome="$(finished "$j")"
    [[ "$phase" != post-armed || -n "$outcome" ]] || die "an armed post is already waiting (job $NS/$job, since $(jq -r '.metadata.creationTimestamp' <<<"$j")): a second arm is refused; hack/job.sh run status names it"
    [[ -n "$outcome" ]] || die "job $NS/$job is still running: wait for it (hack/job.sh wait $phase${plan:+ --plan $plan}), or delete it yourself"
    say "the previous run of $job ended $outcome ($(jq -r '.metadata.creationTimestamp' <<<"$j")):"
    report "$j"
    k -n "$NS" delete job "$job" --cascade=foreground --wait --timeout=120s >/dev/null \
      || die "could not delete the previous job $NS/$job"
  fi
  objects="$(render)"
  jq '.items |= map(select(.kind != "Job"))' <<<"$objects" | k apply -f - >/dev/null \
    || die "kubectl apply of the ServiceAccount and RBAC failed"
  jq '.items |= map(select(.kind == "Job"))' <<<"$objects" | k create -f - >/dev/null \
    || die "kubectl create job $NS/$job failed"
  say "created job $NS/$job"
  if [[ "$cmd" == arm ]]; then
    say "armed: it waits for the next upgrade to begin and to end, then restores (hack/job.sh wait post-armed waits with it)"
    return 0
  fi
  wait_job
}

# images: one pod per node, pinned to it (nodeName: no scheduler, every taint tolerated), running
# the image's `--version`: first with imagePullPolicy Never (present, it exits 0; absent, the
# kubelet says ErrImageNeverPull at once), then, on the nodes without it, with IfNotPresent, as
# the Jobs' pod: the kubelet pulls it, or says why it cannot. The pods go at the end, whatever
# happened.
delete_checks() {
  local p
  for p in "${pods[@]}"; do k -n "$NS" delete pod "$p" --wait=false >/dev/null 2>&1 || true; done
}
check_pod_name() { # check_pod_name NODE SUFFIX: at most 63 characters (a label value)
  printf 'workload-update-guard-image-%s-%s%s' "$(printf '%s' "$1" | tr -c 'a-z0-9-' '-' | cut -c1-22)" \
    "$(printf '%s' "$1" | cksum | cut -c1-6)" "$2"
}
create_check() { # create_check POD NODE IMAGE POLICY
  jq -n --arg name "$1" --arg node "$2" --arg image "$3" --arg policy "$4" --arg ns "$NS" --argjson secrets "$pull_secrets" '{
    apiVersion: "v1", kind: "Pod",
    metadata: {name: $name, namespace: $ns, labels: {"app.kubernetes.io/name": "workload-update-guard-image-check"}},
    spec: {nodeName: $node, restartPolicy: "Never", automountServiceAccountToken: false,
      tolerations: [{operator: "Exists"}], imagePullSecrets: $secrets,
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: "RuntimeDefault"}},
      containers: [{name: "guard", image: $image, imagePullPolicy: $policy, args: ["--version"],
        resources: {requests: {cpu: "10m", memory: "16Mi"}, limits: {cpu: "200m", memory: "64Mi"}},
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, privileged: false, capabilities: {drop: ["ALL"]}}}]}}' \
    | { k -n "$NS" delete pod "$1" --wait >/dev/null 2>&1 || true; k create -f - >/dev/null; } \
    || die "cannot create the check pod on node $2"
}
# pull_reason MESSAGE: what kind of failure the kubelet's pull message is.
pull_reason() {
  case "$1" in
    *x509* | *certificate* | *tls:* | *"TLS handshake"*) echo TLS ;;
    *"401 Unauthorized"* | *"403 Forbidden"* | *nauthorized* | *"authorization failed"* | *"authentication required"* | *denied*) echo auth ;;
    *"not found"* | *"manifest unknown"* | *"name unknown"* | *"404 Not Found"*) echo "not found" ;;
    *refused* | *"no such host"* | *unreachable* | *timeout* | *"no route"* | *dial*) echo unreachable ;;
    *) echo error ;;
  esac
}
check_state() { # check_state POD: "" while undecided, else true, false (...), or pull:REASON\tMESSAGE
  k -n "$NS" get pod "$1" -o json | jq -r '
    (.status.containerStatuses[0].state // {}) as $s
    | if .status.phase == "Succeeded" then "true"
      elif $s.waiting.reason == "ErrImageNeverPull" then "false (ErrImageNeverPull)"
      elif $s.waiting.reason == "InvalidImageName" then "false (InvalidImageName: \($s.waiting.message // ""))"
      elif $s.waiting.reason == "ErrImagePull" or $s.waiting.reason == "ImagePullBackOff" then
        "pull:\($s.waiting.reason)\t\($s.waiting.message // "")"
      elif .status.phase == "Failed" then "false (exit \($s.terminated.exitCode // "?"))"
      else "" end'
}
images() {
  local img nodes node pod missing=0 state deadline i
  local -a node_list=() states=() pull_pods=()
  pods=()
  img="$(render | jq -r '[.items[] | select(.kind == "Job")][0].spec.template.spec.containers[0].image')"
  nodes="$(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')" || die "cannot list the nodes"
  [[ -n "$nodes" ]] || die "the cluster has no node"
  mapfile -t node_list <<<"$nodes"
  local secret
  for secret in $(jq -r '.[].name' <<<"$pull_secrets"); do
    [[ "$(k -n "$NS" get secret "$secret" -o jsonpath='{.type}' 2>/dev/null)" == kubernetes.io/dockerconfigjson ]] \
      || die "--pull-secret $secret: no Secret of type kubernetes.io/dockerconfigjson by that name in $NS (kubectl -n $NS create secret docker-registry $secret ...)"
  done
  local with=""
  [[ "$pull_secrets" == "[]" ]] || with=" (pulling with the Secret $(jq -r 'map(.name) | join(", ")' <<<"$pull_secrets"))"
  say "checking every node for $img$with"
  trap delete_checks EXIT
  for node in "${node_list[@]}"; do
    pod="$(check_pod_name "$node" "")"
    pods+=("$pod")
    create_check "$pod" "$node" "$img" Never
  done
  for i in "${!node_list[@]}"; do
    deadline=$((SECONDS + 60))
    while :; do
      state="$(check_state "${pods[$i]}")" || state=""
      [[ -z "$state" && $SECONDS -lt $deadline ]] || break
      sleep 0.5
    done
    states[i]="${state:-false (no answer within 60 s: is the node Ready?)}"
  done
  # The nodes without it: can the kubelet pull it there now (as the Jobs' pod would)?
  if (( ! no_pull )); then
    for i in "${!node_list[@]}"; do
      pull_pods[i]=""
      [[ "${states[$i]}" == "false (ErrImageNeverPull)" ]] || continue
      pod="$(check_pod_name "${node_list[$i]}" "-pull")"
      pods+=("$pod")
      pull_pods[i]="$pod"
      create_check "$pod" "${node_list[$i]}" "$img" IfNotPresent
    done
    for i in "${!node_list[@]}"; do
      [[ -n "${pull_pods[$i]}" ]] || continue
      deadline=$((SECONDS + 120))
      while :; do
        state="$(check_state "${pull_pods[$i]}")" || state=""
        [[ -z "$state" && $SECONDS -lt $deadline ]] || break
        sleep 0.5
      done
      case "$state" in
        true) states[i]="true (pulled now)" ;;
        pull:*)
          local msg="${state#*$'\t'}" kubelet_reason="${state%%$'\t'*}"
          states[i]="false (not present, cannot pull: $(pull_reason "$msg"): ${kubelet_reason#pull:}: $msg)" ;;
        "") states[i]="false (not present, and no pull within 120 s)" ;;
        *) states[i]="false (not present, pulled: $state)" ;;
      esac
    done
  fi
  for i in "${!node_list[@]}"; do
    echo "${node_list[$i]} ${states[$i]}"
    [[ "${states[$i]}" == true* ]] || missing=$((missing + 1))
  done
  (( missing == 0 )) || { say "$missing node(s) without $img, that cannot pull it now (docs/jobs.md, \"The image\")"; return 1; }
  say "every node has $img or pulled it now"
}

# uninstall: status first (a Job: the same image and RBAC), then the Jobs, then manifests/base.
uninstall() {
  local verdict armed
  armed="$(k -n "$NS" get job workload-update-guard-post-armed -o json 2>/dev/null || true)"
  if [[ -n "$armed" && -z "$(finished "$armed")" ]] && (( ! force )); then
    die "uninstall refused: an armed post waits (job $NS/workload-update-guard-post-armed): it restores after the upgrade; --force removes it (and the suspension stays)"
  fi
  if (( ! force )); then
    say "uninstall: running status first"
    local out=0
    run || out=$?
    verdict="$(k -n "$NS" get pods -l "job-name=$job" -o json \
      | jq -r '[.items[] | .status.containerStatuses[0].state.terminated.message // "" | fromjson? // {} | .verdict // empty][0] // empty')"
    if (( out != 0 )) || [[ -z "$verdict" ]]; then die "uninstall refused: status did not run (exit $out), so whether a suspension is in place is not known; --force removes anyway"; fi
    case "$verdict" in
      "NOT SUSPENDED: automated updates on"* | "NOT SUSPENDED: methods absent"* | "NOT FOUND"*) ;;
      *) die "uninstall refused: $verdict. Run hack/job.sh run post first (docs/jobs.md, \"Uninstall\"); --force removes the guard and leaves this as it is" ;;
    esac
    say "uninstall: status says: $verdict"
  else
    say "uninstall: --force: not checking for a suspension (one in place stays, with its record)"
  fi
  k -n "$NS" delete jobs -l app.kubernetes.io/name=workload-update-guard --cascade=foreground --wait --timeout=120s >&2 \
    || die "could not delete the Jobs"
  k delete -k "$REPO_ROOT/manifests/base" --ignore-not-found --wait --timeout=120s >&2 \
    || die "kubectl delete -k manifests/base failed"
  say "uninstalled: the Jobs, the ServiceAccount, the RBAC and the NetworkPolicy are gone"
}

case "$cmd" in
  render) render ;;
  wait) wait_job ;;
  run | arm) run ;;
  images) images ;;
  uninstall) uninstall ;;
esac
