//! The armed `post` on the real kubelet: armed right after `pre`, its pod is
//! evicted by a real `kubectl drain` while the next upgrade runs (Ignored: the Job neither fails
//! nor counts it), a new pod takes over after the uncordon, and the methods come back once the
//! modelled Harvester Upgrade reaches `Succeeded`, never before.
//!
//! The Upgrade is moved with kubectl as tests/support/harvester.rs's `Upgrade` model does (which
//! follows harvester's `upgrade_controller.go`): created with the latest label and the first state
//! (`initStatus`), then merge patches of the state label as `harvester`, and at the end the
//! `Completed` condition on the status subresource and `Succeeded` with the cleanup label
//! `Pending` (`finish`). A v1.7.1 target handles no methods, so no cleanup is waited for.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::node::*;

const ARMED: &str = "workload-update-guard-post-armed";
const UPGRADE: &str = "hvst-upgrade-e2e-armed";
const STATE_LABEL: &str = "harvesterhci.io/upgradeState";
const LATEST_LABEL: &str = "harvesterhci.io/latestUpgrade";
const CLEANUP_LABEL: &str = "harvesterhci.io/upgradeCleanup";

/// Now, as wrangler's `touchTS` writes it: RFC 3339, whole seconds, UTC.
fn now_utc() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn set_state(state: &str) {
    patch_upgrade(
        UPGRADE,
        &json!({"metadata": {"labels": {STATE_LABEL: state}}}),
    );
}

/// The running pod of the armed Job, if one runs: its uid and name.
fn running_pod() -> Option<(String, String)> {
    pods_of(ARMED).into_iter().find_map(|p| {
        let running = p["status"]["containerStatuses"][0]["state"]["running"].is_object()
            && p["metadata"]["deletionTimestamp"].is_null();
        running.then(|| {
            (
                p["metadata"]["uid"].as_str().unwrap().to_string(),
                p["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
    })
}

/// The Job's condition `t` is True.
fn job_condition(job: &Value, t: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == t && c["status"] == "True")
}

/// The armed Job, asserted not failed and with no failure counted (an eviction is Ignored).
fn armed_job_not_failed(context: &str) {
    let job = get_json(&["-n", NS, "job", ARMED]);
    assert!(!job_condition(&job, "Failed"), "not failed: {job:#}");
    let failed = job["status"].get("failed").and_then(Value::as_i64);
    assert_eq!(failed.unwrap_or(0), 0, "{context}: {job:#}");
}

/// pre, the armed post, its pod evicted by `kubectl drain` during the upgrade (Ignored), a new
/// pod after the uncordon, the Upgrade through its states to Succeeded: the methods restored
/// within 10 s of Succeeded and not before, the Job Complete.
#[test]
fn armed_post_survives_a_drain_and_restores_after_the_upgrade() {
    let _turn = turn();
    harvester_state();
    let node_before = NodeAsFound::record();
    no_upgrades_yet();
    let original = methods();
    assert_ne!(original, json!([]), "something to restore");

    // 1. pre, then the armed Job. `hack/job.sh arm` takes no env override: the objects it
    // creates (`hack/job.sh render post-armed`, manifests/post-armed), with ARM_POLL_SECONDS=1,
    // applied here instead.
    let run = job_sh(&["run", "pre", "--timeout", "120"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(methods(), json!([]), "pre suspended the updates");
    let mut objects = job_sh_render(&["post-armed"]);
    let job = objects.iter_mut().find(|o| o["kind"] == "Job").unwrap();
    assert_eq!(job["metadata"]["name"], ARMED);
    set_env(job, "ARM_POLL_SECONDS", "1");
    apply(&objects);

    // 2. Its pod runs; then the next upgrade begins (created after pre's record: the record has
    // second precision, creationTimestamp too).
    let mut first = (String::new(), String::new());
    wait_until("the armed pod running", Duration::from_secs(60), || {
        running_pod().map(|p| first = p).is_some()
    });
    std::thread::sleep(Duration::from_millis(1100));
    let upgrade = json!({"apiVersion": "harvesterhci.io/v1beta1", "kind": "Upgrade",
        "metadata": {"name": UPGRADE, "namespace": NS,
                     "labels": {LATEST_LABEL: "true", STATE_LABEL: "PreparingLoggingInfra"}},
        "spec": {"version": "v1.7.1"}});
    k_stdin(
        &["create", "--field-manager=harvester", "-f", "-"],
        &upgrade.to_string(),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(running_pod().is_some(), "the armed pod waits");
    assert_eq!(methods(), json!([]), "nothing written yet");

    // 3. The drain evicts the armed pod (DisruptionTarget): Ignored.
    let (drain, drained) = drain_node("90s");
    assert!(
        drain.contains(&first.1),
        "the drain evicted {}: {drain}",
        first.1
    );
    let evicted = get_json(&["-n", NS, "pods", "-l", &format!("job-name={ARMED}")]);
    armed_job_not_failed(&format!(
        "the eviction is not counted (Ignore); pods: {evicted:#}"
    ));
    k(&["uncordon", NODE_NAME]);
    let uncordoned = Instant::now();
    let mut second = (String::new(), String::new());
    wait_until("a new armed pod running", Duration::from_secs(90), || {
        running_pod()
            .filter(|p| p.0 != first.0)
            .map(|p| second = p)
            .is_some()
    });
    let new_pod = uncordoned.elapsed();
    armed_job_not_failed("after the new pod");

    // 4. The upgrade goes on: nothing restored before its end.
    for state in ["UpgradingSystemServices", "UpgradingNodes"] {
        set_state(state);
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(methods(), json!([]), "{state}: nothing restored");
        let job = get_json(&["-n", NS, "job", ARMED]);
        assert!(
            !job_condition(&job, "Complete") && !job_condition(&job, "Failed"),
            "{state}: the armed Job waits: {job:#}"
        );
    }
    // The end (`markComplete`): the condition and the labels in one write, as wrangler sets it.
    let succeeded = Instant::now();
    patch_upgrade(
        UPGRADE,
        &json!({"metadata": {"labels": {STATE_LABEL: "Succeeded", CLEANUP_LABEL: "Pending"}},
                "status": {"conditions": [{"type": "Completed", "status": "True",
                                           "lastUpdateTime": now_utc()}]}}),
    );
    wait_until(
        "the methods restored within 10 s of Succeeded",
        Duration::from_secs(10).saturating_sub(succeeded.elapsed()),
        || methods() == original,
    );
    let restored = succeeded.elapsed();
    let outcome = wait_job(ARMED, Duration::from_secs(60));
    let complete = succeeded.elapsed();
    assert_eq!(outcome.condition, "Complete", "{outcome:?}");
    armed_job_not_failed("complete");
    let pods = pods_of(ARMED);
    let last = pods.last().unwrap();
    assert_eq!(last["metadata"]["uid"], second.0.as_str());
    assert_eq!(terminated(last)["exitCode"], 0, "{last:#}");
    figure(&format!(
        "armed post: kubectl drain evicted its pod in {:.1} s (not counted), a new pod ran {:.1} s after the uncordon; methods restored {:.1} s after Succeeded, the Job Complete {:.1} s after it",
        drained.as_secs_f64(),
        new_pod.as_secs_f64(),
        restored.as_secs_f64(),
        complete.as_secs_f64()
    ));

    node_before.restore();
    assert_eq!(node_spec(), node_before.spec, "the node as found");
    delete_all_upgrades();
}
