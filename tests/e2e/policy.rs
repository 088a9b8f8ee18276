//! Every rule of the Job's podFailurePolicy, for real, and the hardening as the runtime applied
//! it. The exit codes (manifests/job/job.yaml, src/error.rs): 2, 3, 6 and 8 FailJob; 4 and 5 Count;
//! a pod with the DisruptionTarget condition (an eviction) is ignored.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::node::*;

const PRE: &str = "workload-update-guard-pre";

fn pre_with(edit: impl FnOnce(&mut Value)) -> Vec<Value> {
    rendered_with("manifests/pre", edit)
}

/// Exit 3 (permanent: 403 without the Role) fails the Job at once: one pod, reason
/// PodFailurePolicy, and the error in the pod's termination message. manifests/pre as it is,
/// less its Role in harvester-system.
#[test]
fn exit_3_fails_the_job_after_one_pod() {
    let _turn = turn();
    harvester_state();
    k(&["-n", NS, "delete", "role", "workload-update-guard"]);
    let without_role: Vec<Value> = rendered("manifests/pre")
        .into_iter()
        .filter(|o| !(o["kind"] == "Role" && o["metadata"]["namespace"] == NS))
        .collect();
    apply(&without_role);
    let outcome = wait_job(PRE, Duration::from_secs(120));
    assert_eq!(
        outcome,
        Outcome {
            condition: "Failed".into(),
            reason: "PodFailurePolicy".into()
        }
    );
    let pods = pods_of(PRE);
    assert_eq!(pods.len(), 1, "FailJob: no second pod");
    let t = terminated(&pods[0]);
    assert_eq!(t["exitCode"], 3, "{t:#}");
    let summary: Value = serde_json::from_str(t["message"].as_str().unwrap()).unwrap();
    assert_eq!(summary["exitCode"], 3);
    let error = summary["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("403"),
        "the refusal in the termination message: {summary:#}"
    );
    assert_eq!(methods(), json!(["LiveMigrate"]), "nothing written");
    k(&["apply", "-k", "manifests/base"]);
}

/// Exit 4 (transient until the deadline: here the API server's address leads nowhere) is
/// counted: the Job retries until backoffLimit (lowered to 1 to keep the test short: the pod
/// backoff doubles from 10 s), then fails with BackoffLimitExceeded.
#[test]
fn exit_4_is_retried_up_to_backoff_limit() {
    let _turn = turn();
    harvester_state();
    apply(&pre_with(|job| {
        job["spec"]["backoffLimit"] = json!(1);
        set_env(job, "DEADLINE_SECONDS", "2");
        // Inside the pod's own network namespace: nothing listens there.
        set_env(job, "KUBERNETES_SERVICE_HOST", "127.0.0.1");
        set_env(job, "KUBERNETES_SERVICE_PORT", "9");
    }));
    let outcome = wait_job(PRE, Duration::from_secs(180));
    assert_eq!(
        outcome,
        Outcome {
            condition: "Failed".into(),
            reason: "BackoffLimitExceeded".into()
        }
    );
    let pods = pods_of(PRE);
    assert_eq!(pods.len(), 2, "backoffLimit 1: two pods");
    for p in &pods {
        assert_eq!(terminated(p)["exitCode"], 4, "{:#}", terminated(p));
    }
}

/// The container's process as the runtime started it, read from /proc on the node.
fn process_status(pid: &str) -> (String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    (status, mountinfo)
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in /proc/PID/status"))
        .trim()
}

/// A pod of the pre Job paused by a failpoint (test image only): the hardening read from the
/// running process, then an eviction through the Eviction API. The paused guard answers the
/// SIGTERM as in a real run (exit 5, which the Count rule would match), and the evicted pod
/// carries DisruptionTarget, so the Job retries without spending backoffLimit (set to 0 here:
/// one counted failure would fail the Job).
#[test]
fn running_container_hardening_and_eviction_ignored() {
    let _turn = turn();
    harvester_state();
    let failpoints_image = built_image(|l| l.ends_with("-failpoints"));
    apply(&pre_with(|job| {
        job["spec"]["backoffLimit"] = json!(0);
        let spec = &mut job["spec"]["template"]["spec"];
        spec["containers"][0]["image"] = json!(failpoints_image);
        set_env(job, "FAILPOINTS", "pause-after-write=return(6000)");
    }));
    // The first pod, running (paused after its first write).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (pod, container_id) = loop {
        let pods = pods_of(PRE);
        if let Some(p) = pods.first() {
            let cs = &p["status"]["containerStatuses"][0];
            if cs["state"]["running"].is_object() {
                break (
                    p["metadata"]["name"].as_str().unwrap().to_string(),
                    cs["containerID"]
                        .as_str()
                        .unwrap()
                        .trim_start_matches("containerd://")
                        .to_string(),
                );
            }
        }
        assert!(Instant::now() < deadline, "no running pod: {pods:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Its process, from containerd's task list on the node.
    let tasks = node().script("ctr", &["task", "ls"]);
    let pid = tasks
        .lines()
        .find(|l| l.starts_with(&container_id))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no task {container_id} in\n{tasks}"))
        .to_string();
    let (status, mountinfo) = process_status(&pid);
    assert_eq!(
        field(&status, "Uid"),
        "65532\t65532\t65532\t65532",
        "{status}"
    );
    assert_eq!(
        field(&status, "Gid"),
        "65532\t65532\t65532\t65532",
        "{status}"
    );
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(&status, cap), "0000000000000000", "{cap}: {status}");
    }
    assert_eq!(
        field(&status, "NoNewPrivs"),
        "1",
        "allowPrivilegeEscalation: false"
    );
    assert_eq!(
        field(&status, "Seccomp"),
        "2",
        "a seccomp filter (RuntimeDefault)"
    );
    let root = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .expect("the root mount");
    let options = root.split_whitespace().nth(5).unwrap();
    assert!(
        options.split(',').any(|o| o == "ro"),
        "read-only root: {root}"
    );
    // The runtime's own record agrees: the seccomp profile is containerd's default.
    let info: Value =
        serde_json::from_str(&node().script("ctr", &["containers", "info", &container_id]))
            .unwrap();
    let seccomp = &info["Spec"]["linux"]["seccomp"];
    assert_eq!(
        seccomp["defaultAction"], "SCMP_ACT_ERRNO",
        "RuntimeDefault: {seccomp:#}"
    );
    assert_eq!(info["Spec"]["root"]["readonly"], true);

    // Evict it, the way a node drain does.
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": pod, "namespace": NS}});
    let path = format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction");
    let file = node().dir.join("eviction.json");
    std::fs::write(&file, eviction.to_string()).unwrap();
    k(&["create", "--raw", &path, "-f", &file.to_string_lossy()]);
    let outcome = wait_job(PRE, Duration::from_secs(120));
    assert_eq!(
        outcome,
        Outcome {
            condition: "Complete".into(),
            reason: "CompletionsReached".into()
        },
        "an eviction does not spend backoffLimit 0"
    );
    assert_succeeded_without_failures(PRE);
    let pods = pods_of(PRE);
    assert_eq!(
        pods.len(),
        1,
        "the evicted pod is gone, its replacement succeeded"
    );
    assert_ne!(pods[0]["metadata"]["name"], pod.as_str());
    assert_eq!(methods(), json!([]));
}
