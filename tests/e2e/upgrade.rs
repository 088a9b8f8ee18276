//! The upgrade's bad hours, on the real node, with upgrade-toolkit modelled in test code from
//! what its source does: per-plan Jobs `<plan>-<component>` in harvester-system, labelled with the
//! plan and the component, owned by the `UpgradePlan` (tests/fixtures/crds/upgradeplan.yaml), read
//! only through their `Complete`/`Failed` conditions; `pre` at the start of ClusterUpgrade, `post`
//! in Finalize, on success and on failure. The guard's Jobs come from `hack/job.sh --plan`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::jobs::kubectl_image;
use crate::node::*;

const PLAN_LABEL: &str = "management.harvesterhci.io/upgrade-plan";
const COMPONENT_LABEL: &str = "management.harvesterhci.io/upgrade-component";

fn complete() -> Outcome {
    Outcome {
        condition: "Complete".into(),
        reason: "CompletionsReached".into(),
    }
}

/// The orchestrator runs a phase of the guard for `plan`: `hack/job.sh run PHASE --plan PLAN`,
/// which waits for Complete or Failed. Returns the run and the Job.
fn guard_phase(plan: &str, phase: &str) -> (ScriptRun, Value) {
    let run = job_sh(&["run", phase, "--plan", plan, "--timeout", "120"]);
    let job = get_json(&[
        "-n",
        NS,
        "job",
        &format!("{plan}-workload-update-guard-{phase}"),
    ]);
    (run, job)
}

/// upgrade-toolkit's conventions on a Job of ours: the name, the labels on the Job and its pod
/// template, the owner reference, the TTL.
fn assert_conventions(job: &Value, plan: &Value, phase: &str) {
    let name = plan["metadata"]["name"].as_str().unwrap();
    let component = format!("workload-update-guard-{phase}");
    assert_eq!(job["metadata"]["name"], format!("{name}-{component}"));
    for labels in [
        &job["metadata"]["labels"],
        &job["spec"]["template"]["metadata"]["labels"],
    ] {
        assert_eq!(labels[PLAN_LABEL], name, "{job:#}");
        assert_eq!(labels[COMPONENT_LABEL], component.as_str(), "{job:#}");
    }
    assert_eq!(
        job["metadata"]["ownerReferences"],
        json!([{"apiVersion": "management.harvesterhci.io/v1beta1", "kind": "UpgradePlan",
                "name": name, "uid": plan["metadata"]["uid"], "controller": true,
                "blockOwnerDeletion": true}])
    );
    assert_eq!(job["spec"]["ttlSecondsAfterFinished"], 7 * 24 * 3600);
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
}

/// The orchestrator's own cluster-upgrade Job, failing (the pinned kubectl asked for an output
/// format that does not exist: exit 1), with its conventions.
fn failing_upgrade_job(plan: &Value) -> Value {
    let name = plan["metadata"]["name"].as_str().unwrap();
    let labels = json!({PLAN_LABEL: name, COMPONENT_LABEL: "cluster-upgrade"});
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{name}-cluster-upgrade"), "namespace": NS, "labels": labels,
                     "ownerReferences": [{"apiVersion": "management.harvesterhci.io/v1beta1",
                        "kind": "UpgradePlan", "name": name, "uid": plan["metadata"]["uid"],
                        "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 604800,
                 "template": {"metadata": {"labels": labels}, "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
            "containers": [{"name": "upgrade", "image": kubectl_image(), "imagePullPolicy": "Never",
                            "args": ["version", "--client", "--output=none"]}]}}}})
}

/// The failed upgrade: pre Complete → the cluster-upgrade Job Failed → the node left cordoned
/// and tainted `kubevirt.io/drain` (what a failed node upgrade leaves on a single-node cluster),
/// and with the taints of an RKE2 control-plane/etcd-only node, a CriticalAddonsOnly node and an
/// arch-tainted node besides, so every toleration is needed → Finalize runs post: Complete, on
/// that node, and both objects are exactly as before pre.
#[test]
fn failed_upgrade_post_runs_on_the_cordoned_drain_tainted_node() {
    let _turn = turn();
    harvester_state();
    let before = snapshot();
    let node_before = NodeAsFound::record();
    let plan = create_plan("hvst-upgrade-failed");

    // ClusterUpgrade: pre first.
    let (run, job) = guard_phase("hvst-upgrade-failed", "pre");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("job: Complete"), "{run:?}");
    assert_conventions(&job, &plan, "pre");
    assert_eq!(methods(), json!([]), "pre suspended the updates");

    // The cluster upgrade fails.
    apply(&[failing_upgrade_job(&plan)]);
    let outcome = wait_job(
        "hvst-upgrade-failed-cluster-upgrade",
        Duration::from_secs(60),
    );
    assert_eq!(outcome.condition, "Failed", "{outcome:?}");

    // What the failed upgrade leaves on the node.
    k(&["cordon", NODE_NAME]);
    for taint in [
        "kubevirt.io/drain=draining:NoSchedule",
        "node-role.kubernetes.io/control-plane=true:NoExecute",
        "node-role.kubernetes.io/etcd=true:NoExecute",
        "CriticalAddonsOnly=true:NoExecute",
        "kubernetes.io/arch=amd64:NoSchedule",
    ] {
        k(&["taint", "node", NODE_NAME, taint]);
    }

    // Finalize: post, on that node.
    let (run, job) = guard_phase("hvst-upgrade-failed", "post");
    assert_eq!(run.code, 0, "post on the cordoned, tainted node: {run:?}");
    assert_conventions(&job, &plan, "post");
    let pods = pods_of("hvst-upgrade-failed-workload-update-guard-post");
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["spec"]["nodeName"], NODE_NAME);
    assert_eq!(terminated(&pods[0])["exitCode"], 0);
    let after = snapshot();
    assert_eq!(after.0, before.0, "the KubeVirt CR exactly as before pre");
    assert_eq!(after.1, before.1, "the ManagedChart exactly as before pre");

    node_before.restore();
    assert_eq!(node_spec(), node_before.spec, "the node as found");
    k(&["delete", "upgradeplan", "hvst-upgrade-failed", "--wait"]);
}

/// A real `kubectl drain` of the node while the pre pod runs (paused after its first write by
/// the failpoints image, on the runtime, so it answers the SIGTERM with exit 5 as a real run
/// does): the pod is evicted, its replacement runs on the cordoned node, the Job ends Complete and
/// the eviction is not counted (backoffLimit 0 would fail the Job on one).
#[test]
fn kubectl_drain_during_a_phase_is_not_counted() {
    let _turn = turn();
    harvester_state();
    let node_before = NodeAsFound::record();
    let failpoints_image = built_image(|l| l.ends_with("-failpoints"));
    let mut objects = job_sh_render(&["pre", "--image", &failpoints_image]);
    let job = objects.iter_mut().find(|o| o["kind"] == "Job").unwrap();
    job["spec"]["backoffLimit"] = json!(0);
    set_env(job, "FAILPOINTS", "pause-after-write=return(6000)");
    apply(&objects);
    const PRE: &str = "workload-update-guard-pre";
    let mut first = String::new();
    wait_until("a running pre pod", Duration::from_secs(60), || {
        let pods = pods_of(PRE);
        match pods.first() {
            Some(p) if p["status"]["containerStatuses"][0]["state"]["running"].is_object() => {
                first = p["metadata"]["name"].as_str().unwrap().to_string();
                true
            }
            _ => false,
        }
    });
    let start = Instant::now();
    let (drain, drained) = drain_node("60s");
    assert!(
        drain.contains(&format!("evicting pod {NS}/{first}")) || drain.contains(&first),
        "the drain evicted the running pod: {drain}"
    );
    let outcome = wait_job(PRE, Duration::from_secs(120));
    let done = start.elapsed();
    assert_eq!(outcome, complete(), "an eviction does not fail the Job");
    assert_succeeded_without_failures(PRE);
    let pods = pods_of(PRE);
    assert_eq!(pods.len(), 1, "the replacement only");
    assert_ne!(pods[0]["metadata"]["name"], first.as_str());
    assert_eq!(
        pods[0]["spec"]["nodeName"], NODE_NAME,
        "the replacement ran on the cordoned node"
    );
    assert_eq!(node_spec()["unschedulable"], true, "still cordoned");
    assert_eq!(methods(), json!([]));
    figure(&format!(
        "kubectl drain during pre: drain returned in {:.1} s, the Job Complete {:.1} s after the drain began",
        drained.as_secs_f64(),
        done.as_secs_f64()
    ));
    node_before.restore();
    assert_eq!(node_spec(), node_before.spec);
}

/// Finalize done, the plan is deleted: the real kube-controller-manager's garbage collector
/// removes our Jobs and their pods through the owner reference. And upgrade-toolkit's cleanup,
/// which deletes Jobs by the component label, leaves nothing of ours either.
#[test]
fn plan_deleted_jobs_and_pods_are_garbage_collected() {
    let _turn = turn();
    harvester_state();
    let plan = "hvst-upgrade-gc";
    create_plan(plan);
    for phase in ["pre", "post"] {
        let (run, _) = guard_phase(plan, phase);
        assert_eq!(run.code, 0, "{phase}: {run:?}");
    }
    let selector = format!("{PLAN_LABEL}={plan}");
    let ours = jobs_and_pods(&selector);
    assert_eq!(ours.len(), 4, "two Jobs and their pods, labelled: {ours:?}");
    k(&["delete", "upgradeplan", plan, "--wait"]);
    let took = wait_until(
        "the Jobs and pods of the deleted plan gone",
        Duration::from_secs(60),
        || jobs_and_pods(&selector).is_empty(),
    );
    figure(&format!(
        "plan deleted: its Jobs and pods garbage-collected in {:.1} s",
        took.as_secs_f64()
    ));

    // The orchestrator's cleanup: Jobs deleted by component label (background propagation, as
    // a client's DeleteAllOf); their pods go too.
    let plan = "hvst-upgrade-cleanup";
    create_plan(plan);
    let (run, _) = guard_phase(plan, "status");
    assert_eq!(run.code, 0, "{run:?}");
    let component = format!("{COMPONENT_LABEL}=workload-update-guard-status");
    assert_eq!(jobs_and_pods(&component).len(), 2);
    k(&["-n", NS, "delete", "jobs", "-l", &component]);
    wait_until(
        "nothing of ours after the cleanup by label",
        Duration::from_secs(60),
        || jobs_and_pods(&component).is_empty(),
    );
    assert!(
        jobs_and_pods(&format!("{PLAN_LABEL}={plan}")).is_empty(),
        "nothing labelled with the plan"
    );
    k(&["delete", "upgradeplan", plan, "--wait"]);
}

/// Stops the kubelet; starts it again when dropped if the test did not (a failing test must not
/// leave the next one a NotReady node).
struct KubeletStopped;

impl KubeletStopped {
    fn stop() -> KubeletStopped {
        node().script("stop-kubelet", &[]);
        KubeletStopped
    }

    fn start(self) {
        node().script("start-kubelet", &[]);
        std::mem::forget(self);
    }
}

impl Drop for KubeletStopped {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(crate::support::repo_root().join("hack/node.sh"))
            .arg("start-kubelet")
            .arg(&node().dir)
            .output();
    }
}

/// post while the node is NotReady: the kubelet stopped (as in a node upgrade that restarts
/// RKE2), the node goes NotReady (Unknown) and gets the unreachable taints; the post Job is
/// created then; its pod waits, unscheduled (the NoSchedule half of the unreachable taint is
/// not tolerated, as by upgrade-toolkit's own Jobs); the kubelet starts again; the pod runs at
/// once and the Job is Complete, both objects restored.
#[test]
fn post_runs_once_the_not_ready_node_is_back() {
    let _turn = turn();
    harvester_state();
    let before = snapshot();
    let run = job_sh(&["run", "pre", "--timeout", "120"]);
    assert_eq!(run.code, 0, "{run:?}");

    let stopped = KubeletStopped::stop();
    let not_ready = wait_until("the node NotReady", Duration::from_secs(90), || {
        node_ready() != "True"
    });
    let taints = node_spec()["taints"].to_string();
    assert!(
        taints.contains("node.kubernetes.io/unreachable"),
        "the unreachable taints: {taints}"
    );
    // The orchestrator creates the post Job now (hack/job.sh run would wait; create it and wait
    // below).
    let post = "workload-update-guard-post";
    let objects = job_sh_render(&["post"]);
    apply(&objects);
    std::thread::sleep(Duration::from_secs(3));
    let pods = pods_of(post);
    assert_eq!(pods.len(), 1, "{pods:#?}");
    assert!(
        pods[0]["spec"]["nodeName"].is_null(),
        "not scheduled on the NotReady node: {:#}",
        pods[0]
    );
    let started = Instant::now();
    stopped.start();
    let ready = started.elapsed();
    let outcome = wait_job(post, Duration::from_secs(120));
    let complete_after = started.elapsed();
    assert_eq!(outcome, complete());
    let after = snapshot();
    assert_eq!(after.0, before.0, "the KubeVirt CR exactly as before pre");
    assert_eq!(after.1, before.1, "the ManagedChart exactly as before pre");
    wait_until(
        "the unreachable taints removed",
        Duration::from_secs(30),
        || node_spec()["taints"].is_null(),
    );
    figure(&format!(
        "kubelet stopped: node NotReady after {:.1} s; kubelet started: Ready after {:.1} s, the waiting post Job Complete {:.1} s after the start",
        not_ready.as_secs_f64(),
        ready.as_secs_f64(),
        complete_after.as_secs_f64()
    ));
}
