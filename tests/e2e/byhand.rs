//! The by-hand path of docs/jobs.md (`hack/job.sh`), on the node: a rerun the same day runs a new
//! pod, a failing phase is reported as soon as it fails, and an image that is not there fails the
//! Job in a bounded time, naming the image.

use std::time::Duration;

use crate::node::*;
use crate::support::assert_contains_all;

const STATUS: &str = "workload-update-guard-status";

fn pod_uids(job: &str) -> Vec<String> {
    pods_of(job)
        .iter()
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
        .collect()
}

/// Run the same phase twice: each run is a new Job with a new pod, the second says how the first
/// ended, and `kubectl apply -k` of the same phase would have run nothing (shown for contrast).
#[test]
fn a_rerun_runs_a_new_pod() {
    let _turn = turn();
    harvester_state();
    let first = job_sh(&["run", "status", "--timeout", "120"]);
    assert_eq!(first.code, 0, "{first:?}");
    assert!(first.stderr.contains("job: Complete"), "{first:?}");
    let pods1 = pod_uids(STATUS);
    let job1 = get_json(&["-n", NS, "job", STATUS])["metadata"]["uid"].clone();

    // The old way: apply over the finished Job changes nothing and runs nothing.
    let applied = k(&["apply", "-k", "manifests/status"]);
    assert!(
        applied.contains("job.batch/workload-update-guard-status unchanged")
            || applied.contains("job.batch/workload-update-guard-status configured"),
        "{applied}"
    );
    assert_eq!(pod_uids(STATUS), pods1, "kubectl apply ran no new pod");

    let second = job_sh(&["run", "status", "--timeout", "120"]);
    assert_eq!(second.code, 0, "{second:?}");
    assert!(
        second
            .stderr
            .contains("the previous run of workload-update-guard-status ended Complete"),
        "{second:?}"
    );
    let pods2 = pod_uids(STATUS);
    assert_eq!(pods2.len(), 1);
    assert_ne!(pods2, pods1, "a new pod ran");
    assert_ne!(
        get_json(&["-n", NS, "job", STATUS])["metadata"]["uid"],
        job1,
        "a new Job"
    );
    figure(&format!(
        "hack/job.sh run status: {:.1} s; again the same day (delete the finished Job, create, wait): {:.1} s",
        first.took.as_secs_f64(),
        second.took.as_secs_f64()
    ));
}

/// pre with the KubeVirt CR missing: exit 6, the Job Failed at once (PodFailurePolicy), and the
/// wait returns as soon as it fails, says Failed, and prints the exit code and the message.
#[test]
fn a_failing_phase_is_reported_as_soon_as_it_fails() {
    let _turn = turn();
    harvester_state();
    k(&["-n", NS, "delete", "kubevirt", "kubevirt", "--wait"]);
    let run = job_sh(&["run", "pre", "--timeout", "300"]);
    assert_eq!(run.code, 1, "Failed is exit 1: {run:?}");
    // The Job's condition, the pod's exit code, the termination message.
    assert_contains_all(
        &run.stderr,
        &["job: Failed (PodFailurePolicy)", ": exit 6 ", "not found"],
    );
    assert!(
        run.took < Duration::from_secs(60),
        "returned at the failure, not at the timeout: {run:?}"
    );
    figure(&format!(
        "hack/job.sh run pre, KubeVirt CR missing (exit 6): Failed reported after {:.1} s",
        run.took.as_secs_f64()
    ));
}

/// An image that is not on the node (and no registry: the node has no route out): the wait marks
/// the pod after --pull-timeout and deletes it, the Job fails (PodFailurePolicy) naming the
/// condition, and the message names the image. Meanwhile, a rerun is refused: the phase is still
/// running.
#[test]
fn a_missing_image_fails_the_job_naming_it() {
    let _turn = turn();
    harvester_state();
    let missing = "docker.io/library/workload-update-guard:0.0.0-missing";
    let child = job_sh_cmd(&[
        "run",
        "status",
        "--image",
        missing,
        "--pull-timeout",
        "10",
        "--timeout",
        "300",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let start = std::time::Instant::now();
    wait_until("the status Job", Duration::from_secs(30), || {
        !pods_of(STATUS).is_empty()
    });
    let refused = job_sh(&["run", "status"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("is still running"), "{refused:?}");

    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("the image {missing} cannot be pulled")),
        "{stderr}"
    );
    assert!(
        stderr.contains("job: Failed (PodFailurePolicy)"),
        "{stderr}"
    );
    let job = get_json(&["-n", NS, "job", STATUS]);
    let failed = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .unwrap_or_else(|| panic!("{job:#}"));
    assert_eq!(failed["reason"], "PodFailurePolicy");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("workload-update-guard.harvesterhci.io/ImageUnavailable"),
        "{failed:#}"
    );
    // The marked pod is gone once Failed; the Job keeps the message that names the image.
    assert_eq!(job["status"]["failed"], 1, "one pod, failed: {job:#}");
    assert!(pods_of(STATUS).is_empty(), "FailJob: no second pod");
    let note = job["metadata"]["annotations"]["workload-update-guard.harvesterhci.io/failure"]
        .as_str()
        .unwrap_or_else(|| panic!("{job:#}"));
    assert!(note.contains(missing), "{note}");
    assert!(took < Duration::from_secs(90), "bounded: {took:?}");
    figure(&format!(
        "missing image, --pull-timeout 10: Job Failed, naming the image, {:.1} s after hack/job.sh run",
        took.as_secs_f64()
    ));
}

/// `hack/job.sh images` (docs/jobs.md, "The image"): a node with the image says `true`; the same
/// check of an image no node has, with `--no-pull` (presence only), says `false
/// (ErrImageNeverPull)` at once and exits 1; no check pod is left behind. (Pulls: tests/e2e/registry.rs.)
#[test]
fn the_image_check_tells_a_node_with_the_image_from_one_without() {
    let _turn = turn();
    harvester_state();
    let there = job_sh(&["images"]);
    assert_eq!(there.code, 0, "{there:?}");
    let line = there.stdout.lines().next().unwrap_or_default().to_string();
    assert!(line.ends_with(" true"), "{there:?}");
    let absent = job_sh(&[
        "images",
        "--image",
        "workload-update-guard:0.0.0-absent",
        "--no-pull",
    ]);
    assert_eq!(absent.code, 1, "{absent:?}");
    assert!(
        absent.stdout.contains(" false (ErrImageNeverPull)"),
        "{absent:?}"
    );
    assert!(absent.stderr.contains("1 node(s) without"), "{absent:?}");
    wait_until(
        "the check pods are deleted",
        Duration::from_secs(60),
        || {
            let selector = "app.kubernetes.io/name=workload-update-guard-image-check";
            k(&["-n", NS, "get", "pods", "-l", selector, "-o", "name"])
                .trim()
                .is_empty()
        },
    );
    figure(&format!(
        "hack/job.sh images (1 node): {:.1} s with the image, {:.1} s without",
        there.took.as_secs_f64(),
        absent.took.as_secs_f64()
    ));
}

/// Uninstall (docs/jobs.md, "Uninstall"): refused while pre's suspension is in place (status runs
/// first and says SUSPENDED), nothing removed; after post, it removes the Jobs and what
/// manifests/base installed. (`--env` on the real node too: no Fleet wait here.)
#[test]
fn uninstall_is_refused_while_suspended_then_removes_the_manifests_objects() {
    let _turn = turn();
    harvester_state();
    let pre = job_sh(&[
        "run",
        "pre",
        "--env",
        "FLEET_WAIT_SECONDS=0",
        "--timeout",
        "300",
    ]);
    assert_eq!(pre.code, 0, "{pre:?}");
    assert_eq!(methods(), serde_json::json!([]), "pre suspended");
    let refused = job_sh(&["uninstall"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("job: ERROR: uninstall refused: SUSPENDED"),
        "{refused:?}"
    );
    assert!(
        !k(&[
            "-n",
            NS,
            "get",
            "serviceaccount",
            "workload-update-guard",
            "--ignore-not-found",
            "-o",
            "name"
        ])
        .trim()
        .is_empty(),
        "nothing removed"
    );
    let post = job_sh(&[
        "run",
        "post",
        "--env",
        "FLEET_WAIT_SECONDS=0",
        "--timeout",
        "300",
    ]);
    assert_eq!(post.code, 0, "{post:?}");
    let done = job_sh(&["uninstall"]);
    assert_eq!(done.code, 0, "{done:?}");
    assert!(
        done.stderr.contains("status says: NOT SUSPENDED"),
        "{done:?}"
    );
    for kind in [
        "serviceaccount",
        "role",
        "rolebinding",
        "networkpolicy",
        "jobs",
    ] {
        let left = k(&[
            "-n",
            NS,
            "get",
            kind,
            "-l",
            "app.kubernetes.io/name=workload-update-guard",
            "-o",
            "name",
        ]);
        assert!(left.trim().is_empty(), "{kind}: {left}");
    }
    let left = k(&[
        "get",
        "clusterrole,clusterrolebinding",
        "-l",
        "app.kubernetes.io/name=workload-update-guard",
        "-o",
        "name",
    ]);
    assert!(left.trim().is_empty(), "{left}");
    // The next test's state has them again.
    k(&["apply", "-k", "manifests/base"]);
    figure(&format!(
        "hack/job.sh uninstall: refused while suspended after {:.1} s (status first); after post, removed in {:.1} s",
        refused.took.as_secs_f64(),
        done.took.as_secs_f64()
    ));
}
