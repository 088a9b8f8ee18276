#!/usr/bin/env bash
# The main job with a Harvester-like cluster state (hack/demo/harvester.yaml):
#
#   bash hack/demo.sh          the installed guard: the chart installed with Helm 4 on a real node
#                              (hack/node.sh; the guard's image from hack/image.sh), beside
#                              KubeVirt's own virt-controller (hack/kubevirt.sh, its workload
#                              updater, evacuation and migration controllers) with 6 running VMs
#                              on 3 nodes without a kubelet (hack/demo/virt-handler.sh plays the
#                              nodes' part of each migration), then a modelled Harvester upgrade
#                              to v1.7.1 through its stages: the suspension at the Upgrade's
#                              creation, `status` by `kubectl exec`, KubeVirt upgraded and 0
#                              migrations, a drain moving the guard's pod, the VMs' nodes drained
#                              one at a time as Harvester's pre-drain does (every VM onto the new
#                              launcher), the restore at the end and no wave after it; the same
#                              upgrade with the guard scaled to 0: the hold, then the guard back
#                              (hack/demo/chart-story.sh); the same upgrade without the guard on
#                              a control plane of its own: the wave, then the drains, counted;
#                              then `helm uninstall`
#   bash hack/demo.sh --jobs   the Jobs by hand (docs/jobs.md) on the real node, with
#                              `hack/job.sh run PHASE` for
#                              status -> pre -> status -> pre -> post -> post -> status: each
#                              Job's outcome, its pod's termination message, and the Events
#   bash hack/demo.sh --fast   the Jobs' quick look: no node, the release binary run on this
#                              machine with each Job's environment and its ServiceAccount's token
#   bash hack/demo.sh --keep   the node and the Harvester-like state only, kept until Ctrl-C: to
#                              follow docs/jobs.md on it, as on a real cluster
#   bash hack/demo.sh --kubevirt
#                              the real workload updater (no node; root for virt-controller's
#                              private mount namespace): KubeVirt's own virt-controller
#                              (hack/kubevirt.sh, $KUBEVIRT_VERSION, default v1.6.0) with 6 running
#                              VMs on 3 nodes beside the resident guard (the release binary,
#                              PHASE=watch): the Upgrade suspends, KubeVirt upgraded, every VM
#                              outdated and 0 migrations, the nodes drained one at a time (the
#                              outdated count down to 0), the restore and no wave; then, for
#                              contrast, the same upgrade without the guard: the wave and the
#                              drains, counted (hack/demo/kubevirt.sh)
#
# Each ends by checking that the KubeVirt CR and the ManagedChart are exactly as before (the
# install, or pre), that the same managers own the methods field, and that no claim of ours is
# left. Everything is torn down after (the node by hack/node.sh down, also if this script is
# killed). Its figures (the whole run and each build, the image's size, the closing check) go to
# target/demo-run.md; WRITE_FIGURES=1 writes them to docs/figures/demo.md instead.
#
# On a bare Debian or Ubuntu machine it installs the packages it needs first (hack/setup.sh,
# hack/packages.txt) and checks the Rust and Go versions. It builds only what it runs: the
# control plane (and the node's binaries) of the default Kubernetes version, and one release build
# of the guard (its image, for the node), Helm 4 and KubeVirt's virt-controller for the chart;
# each build is cached for the next run. Each build is one
# line ("==> building ... done in N s"); its output goes to target/demo-build.log, and is shown
# if it fails.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
fast=0 keep=0 jobs=0 kv=0
case "${1:-}" in
  --kubevirt) fast=1 kv=1 ;;
  --jobs) jobs=1 ;;
  --fast) fast=1 jobs=1 ;;
  --keep) keep=1 jobs=1 ;;
  "") ;;
  *) echo "usage: bash hack/demo.sh [--jobs | --fast | --keep | --kubevirt]" >&2; exit 2 ;;
esac
# shellcheck source=hack/setup.sh
source hack/setup.sh
kube="${KUBE_VERSION:-$(bash hack/control-plane.sh default-version)}"
if (( kv )); then
  (( EUID == 0 )) || { echo "demo: virt-controller runs in a private mount namespace (unshare -m), which needs root: run as root" >&2; exit 1; }
fi
if (( fast )); then
  setup_install build || exit 1
  setup_rust
  setup_go "cp:$kube"
else
  (( EUID == 0 )) || { echo "demo: the node (containerd, namespaces, iptables) needs root: run as root, or bash hack/demo.sh --fast" >&2; exit 1; }
  setup_install build node || exit 1
  setup_rust
  if (( jobs )); then setup_go "cp:$kube" "node:$kube"; else setup_go "cp:$kube" "node:$kube" helm; fi
fi

section() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# build DESCRIPTION FIRST CMD...: one line for the build, its output (cargo's, go's) in
# BUILD_LOG; FIRST says how long the first build takes (a cached one takes seconds), and while it
# builds a line every minute says how long so far; on a failure, the output is shown.
mkdir -p target
build_times=()
BUILD_LOG="$REPO_ROOT/target/demo-build.log"
: > "$BUILD_LOG"
build() {
  local what="$1" first="$2" start=$SECONDS code=0 from ticker
  shift 2
  from=$(( $(wc -l < "$BUILD_LOG") + 1 ))
  printf '==> %s (the first time %s; cached after) ...\n' "$what" "$first" >&2
  # The ticker: the screen is never silent for more than a minute.
  ( while sleep 60 >/dev/null 2>&1; do printf '    still building: %d min so far (output: %s)\n' "$(( (SECONDS - start) / 60 ))" "$BUILD_LOG" >&2; done ) &
  ticker=$!
  { echo "==> $what: $*"; "$@"; } >>"$BUILD_LOG" 2>&1 || code=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if (( code == 0 )); then
    printf '    done in %d s\n' "$((SECONDS - start))" >&2
    build_times+=("$what: $((SECONDS - start)) s")
    return 0
  fi
  printf '    FAILED after %d s (exit code %d); its output (%s):\n' "$((SECONDS - start))" "$code" "$BUILD_LOG" >&2
  tail -n "+$from" "$BUILD_LOG" | tail -n 60 >&2
  exit 1
}

# KubeVirt's own virt-controller (the workload updater) and its CRDs, for the chart's story and
# --kubevirt.
build_kubevirt() {
  export KUBEVIRT_VERSION="${KUBEVIRT_VERSION:-v1.6.0}"
  build "building KubeVirt $KUBEVIRT_VERSION's virt-controller and CRDs (hack/kubevirt.sh)" "takes about 5 minutes on 2 cores" \
    bash hack/kubevirt.sh build "$KUBEVIRT_VERSION"
  # virt-controller needs every KubeVirt CRD.
  export KUBEVIRT_CRDS=all
}

section "build (each cached after the first run; output in target/demo-build.log)"
KUBECTL="$(bash hack/control-plane.sh bin-dir)/kubectl"
if (( fast )); then
  build "building kube-apiserver, etcd and kubectl $kube" "takes about 9 minutes on 2 cores" bash hack/control-plane.sh build
  build "building the guard (cargo build --release)" "takes about 4 minutes" cargo build --release --locked
  BIN="$REPO_ROOT/target/release/workload-update-guard"
  (( ! kv )) || build_kubevirt
  builds_done=$SECONDS
  section "control plane"
  dir="$(step "starting kube-apiserver and etcd" bash hack/control-plane.sh up)"
  trap '! declare -F kv_cleanup >/dev/null || kv_cleanup; bash "$REPO_ROOT/hack/kubevirt.sh" stop "$dir/virt-controller"; bash "$REPO_ROOT/hack/control-plane.sh" down "$dir"' EXIT
else
  build "building kube-apiserver, etcd, kubectl and the node's binaries $kube" "takes 9 to 12 minutes on 2 cores" bash hack/node.sh build
  build "building the guard's image (cargo build --release, then buildah)" "takes about 4 to 5 minutes" bash hack/image.sh build guard
  if (( ! jobs )); then
    build "building Helm 4 (hack/helm.sh)" "takes about 2 to 3 minutes" bash hack/helm.sh build
    HELM="$(bash hack/helm.sh path)"
    build_kubevirt
  fi
  builds_done=$SECONDS
  section "node: kubelet on containerd + runc, bridge CNI, kube-proxy, controller-manager, scheduler"
  # The node imports the images built; the e2e tests' own images are not needed here.
  dir="$(IMAGE_IMPORT_QUIET=1 NODE_OWNER_PID=$$ step "starting the node" bash hack/node.sh up)"
  trap '! declare -F kv_cleanup >/dev/null || kv_cleanup; bash "$REPO_ROOT/hack/kubevirt.sh" stop "$dir/virt-controller"; [[ -z "${heartbeat:-}" ]] || kill "$heartbeat"; bash "$REPO_ROOT/hack/node.sh" down "$dir"' EXIT
fi
k() { "$KUBECTL" --kubeconfig "$dir/kubeconfig" "$@"; }
(( fast )) || k get node -o wide

section "Harvester-like state: KubeVirt harvester-system/kubevirt, ManagedChart fleet-local/harvester"
if (( kv || ! jobs )); then
  # shellcheck source=hack/demo/kubevirt.sh
  source hack/demo/kubevirt.sh
  # The same, without the state's two fixture migrations: the real updater's are counted, and
  # KubeVirt's status is virt-controller's and the modelled virt-operator's.
  kv_state "$dir/kubeconfig"
  k get kubevirt,managedchart -A
else
  # Server-side, as manager helm: the field ownership Helm 4 (so Fleet) leaves on the KubeVirt CR.
  k apply --server-side --field-manager helm -f hack/demo/harvester.yaml
  k -n harvester-system patch kubevirt kubevirt --subresource=status --type=merge -p \
    '{"status":{"phase":"Deployed","observedKubeVirtVersion":"v1.6.0","targetKubeVirtVersion":"v1.7.0","outdatedVirtualMachineInstanceWorkloads":2}}' >/dev/null
  k -n default patch vmim kubevirt-workload-update-x7k2p --subresource=status --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null
fi
(( ! jobs )) || k apply -k manifests/base

if (( keep )); then
  section "kept for you: follow docs/jobs.md, \"Before and after an upgrade\", in another shell"
  cat <<KEEP
  export KUBECONFIG=$dir/kubeconfig KUBECTL=$KUBECTL
  kubectl() { "\$KUBECTL" "\$@"; }   # the pinned kubectl, not another one on PATH
This node models an upgrade to Harvester v1.7.1 or earlier (the first row of the README's
table of releases): it has no server-version Setting (the release commands say NotFound) and no
Version or Upgrade objects (their CRDs are served, as fixtures), so pre does not know the target
and suspends. The image is already on the node, under its default name: give no --image, and
check it with
  bash hack/node.sh ctr $dir images ls -q | grep workload-update-guard
(hack/job.sh images works too). "Start the upgrade" is a no-op here: there is no Harvester
upgrade, so an armed post waits until you delete it
(kubectl -n harvester-system delete job workload-update-guard-post-armed). No KubeVirt
controller runs: the outdated count stays at 2 and the demo's two migrations never move.
Ctrl-C here (or kill $$: a SIGTERM) stops the node and removes everything this script started.
KEEP
  trap 'bash "$REPO_ROOT/hack/node.sh" down "$dir"; echo "demo: the node is stopped and its state removed" >&2' EXIT
  trap 'exit 130' INT TERM
  # In the background, so that a signal is answered at once, not after the sleep.
  while :; do sleep 3600 & wait $!; done
fi

if (( fast && ! kv )); then
  # Each ServiceAccount's token (the writer's for pre and post, the reader's for status), from the
  # TokenRequest API: a run has only what its Job has.
  server="$(k config view -o jsonpath='{.clusters[0].cluster.server}')"
  for sa in workload-update-guard workload-update-guard-status; do
    token="$(k -n harvester-system create token "$sa" --duration=10m)"
    cat > "$dir/$sa.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$server", certificate-authority: $dir/ca.crt}}]
users: [{name: sa, user: {token: "$token"}}]
contexts: [{name: local, context: {cluster: local, user: sa}}]
current-context: local
KC
  done
fi

# A log line of the guard (text logs): an RFC 3339 time, then the level.
LOG_LINE='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z +(TRACE|DEBUG|INFO|WARN|ERROR) '
# run PHASE: `hack/job.sh run PHASE`, as docs/jobs.md has the operator run it (it prints how the
# previous run ended, deletes it, creates the Job and waits for Complete or Failed, with the pod's
# exit code and termination message, the run's summary), then, for status, the report from the
# logs.
run_job() {
  local phase="$1" start code=0
  section "hack/job.sh run $phase"
  start=$(date +%s%3N)
  KUBECTL="$KUBECTL" KUBECONFIG="$dir/kubeconfig" bash hack/job.sh run "$phase" --timeout 300 2>&1 || code=$?
  echo "hack/job.sh run $phase: exit $code after $(( $(date +%s%3N) - start )) ms"
  if [[ "$phase" == status ]]; then
    # The pod's log holds both streams, which the kubelet may interleave: the report (stdout)
    # first, then the log lines (stderr: a timestamp and a level), each apart.
    local logs
    logs="$(k -n harvester-system logs job/workload-update-guard-status)"
    echo "the report (kubectl logs job/workload-update-guard-status, its stdout):"
    grep -Ev "$LOG_LINE" <<<"$logs" | sed 's/^/  /' || true
    echo "its log lines (stderr):"
    grep -E "$LOG_LINE" <<<"$logs" | sed 's/^/  /' || true
  fi
  return "$code"
}

# run PHASE: the binary with the environment of the Job in manifests/PHASE (logs as text, to read).
run() {
  (( fast )) || { run_job "$@"; return; }
  local phase="$1" job lines sa env=()
  job="$(k kustomize "manifests/$phase" | k create --dry-run=client -o json -f - | jq -s '.[] | select(.kind == "Job")')"
  lines="$(jq -r '.spec.template.spec.containers[0].env[] | select(.name != "LOG_FORMAT") | "\(.name)=\(.value)"' <<<"$job")"
  sa="$(jq -r '.spec.template.spec.serviceAccountName' <<<"$job")"
  mapfile -t env <<<"$lines"
  section "PHASE=$phase  (${env[*]})"
  local code=0
  env -i PATH="$PATH" KUBECONFIG="$dir/$sa.kubeconfig" TERMINATION_MESSAGE_PATH="$dir/termination-log" \
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
# The managers owning the methods field, and how (Apply or Update), as one sorted JSON list.
method_owners() {
  k -n harvester-system get kubevirt kubevirt -o json --show-managed-fields | jq -c '
    [.metadata.managedFields[]
     | select(.fieldsV1["f:spec"]["f:workloadUpdateStrategy"]["f:workloadUpdateMethods"] != null)
     | {manager, operation}] | sort'
}
# KubeVirt's status is virt-controller's and the modelled virt-operator's, which the guard never
# writes: compared without it, but for the Jobs by hand (no KubeVirt runs there).
kubevirt_filter=.
(( jobs && ! kv )) || kubevirt_filter='del(.status)'
snapshot() { # snapshot FILE: both objects without what the server manages
  { k -n harvester-system get kubevirt kubevirt -o json | jq -S -f hack/snapshot.jq | jq -S "$kubevirt_filter"
    k -n fleet-local get managedchart harvester -o json | jq -S -f hack/snapshot.jq; } > "$1"
}

snapshot "$dir/before.json"
method_owners > "$dir/owners-before.json"
if (( kv )); then
  kubevirt_story
elif (( jobs )); then
  section "before pre"
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
else
  # shellcheck source=hack/demo/chart-story.sh
  source hack/demo/chart-story.sh
  section "before the install"
  owners
  chart_story
fi

section "Events on the KubeVirt CR (kubectl describe kubevirt)"
k -n harvester-system describe kubevirt kubevirt | sed -n '/^Events:/,$p'
(( jobs || kv )) || chart_uninstall
if (( jobs && ! fast )); then
  section "Events of the Jobs"
  k -n harvester-system get events --field-selector involvedObject.kind=Job --sort-by=.lastTimestamp \
    -o custom-columns=TIME:.lastTimestamp,TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message
fi

section "exactly restored?"
snapshot "$dir/after.json"
method_owners > "$dir/owners-after.json"
claims=$( { k -n harvester-system get kubevirt kubevirt -o json --show-managed-fields
            k -n fleet-local get managedchart harvester -o json --show-managed-fields; } \
          | jq -s '[.[].metadata.managedFields[] | select(.manager == "workload-update-guard")] | length')
same=1
diff "$dir/before.json" "$dir/after.json" || { same=0; echo "no: the objects differ (above: < before pre, > after post)"; }
if ! diff -q "$dir/owners-before.json" "$dir/owners-after.json" >/dev/null; then
  same=0
  echo "no: the owners of the methods field differ: before pre $(cat "$dir/owners-before.json"), after post $(cat "$dir/owners-after.json")"
fi
[[ "$claims" == 0 ]] || { same=0; echo "no: $claims managedFields entries of workload-update-guard are left"; }
if (( kv )); then since="before the Upgrade, through the suspension, KubeVirt's upgrade and the restore"
elif (( jobs )); then since="before pre"; else since="before the install, through two upgrades and the uninstall"; fi
closing="no: see above"
(( ! same )) || closing="yes: the KubeVirt CR and the ManagedChart are exactly as $since, the methods field has the same owners ($(cat "$dir/owners-after.json")), and no claim of ours is left"
echo "$closing"

# The run's figures: target/demo-run.md, or (WRITE_FIGURES=1) docs/figures/demo.md, the copy the
# docs cite (commit it with the change it measured).
figures="$REPO_ROOT/target/demo-run.md"
[[ "${WRITE_FIGURES:-0}" != 1 ]] || figures="$REPO_ROOT/docs/figures/demo.md"
image="target/image/workload-update-guard_$(bash hack/version.sh).tar"
[[ -f "$image" && $fast == 0 ]] || image=""
{
  echo "# The last run of \`bash hack/demo.sh${1:+ $1}\`"
  echo
  echo "Written by \`hack/demo.sh\` at the end of its run (to docs/figures/ with WRITE_FIGURES=1); do not edit by hand."
  echo
  echo "- when: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$([[ -z "$(git status --porcelain -- . ':!docs/figures' 2>/dev/null)" ]] || echo " (with uncommitted changes)")"
  echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%d GiB", $2 / 1048576}' /proc/meminfo), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- Kubernetes $kube; the whole run: $SECONDS s, of which the builds $builds_done s and the rest (the node, the story, the checks) $((SECONDS - builds_done)) s"
  for b in "${build_times[@]}"; do echo "- $b"; done
  for f in ${kv_figures[@]+"${kv_figures[@]}"}; do echo "- KubeVirt $KUBEVIRT_VERSION's workload updater, $KV_VMIS VMs: $f"; done
  echo "- (a build of seconds reused the caches: ~/.cache/workload-update-guard/, target/)"
  [[ -z "$image" ]] || echo "- the image: $(du -b "$image" | awk '{printf "%.1f MiB (%d bytes", $1 / 1048576, $1}'), ${image#target/image/}, a docker-archive)"
  echo "- the closing check: $closing"
} > "$figures"
echo "demo: its figures in ${figures#"$REPO_ROOT"/}"
section "next"
cat <<NEXT
On a real cluster: the README (the chart or the add-on, and the checklist for each upgrade), or
docs/jobs.md (the Jobs by hand: bash hack/demo.sh --jobs, or --keep to try them on this node).
When something goes wrong: docs/troubleshooting.md.
NEXT
(( same ))
