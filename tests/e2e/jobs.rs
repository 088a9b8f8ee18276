//! The phases as Jobs: pre, status and post through the unmodified manifests; the upgrade
//! orchestrator's sequencing; the time from `kubectl apply -k` to Job Complete.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::node::*;
use crate::support::upgrade::render_kubevirt;
use crate::support::{content, harvester_chart};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// `kubectl apply -k manifests/PHASE`, then the Job's outcome and how long it took.
fn run_phase(phase: &str) -> (Outcome, Duration) {
    let start = Instant::now();
    k(&["apply", "-k", &format!("manifests/{phase}")]);
    let outcome = wait_job(&format!("workload-update-guard-{phase}"), JOB_TIMEOUT);
    (outcome, start.elapsed())
}

fn complete() -> Outcome {
    Outcome {
        condition: "Complete".into(),
        reason: "CompletionsReached".into(),
    }
}

/// The termination message of the Job's one pod: the run's summary, as JSON.
fn summary_of(job: &str) -> Value {
    let pods = pods_of(job);
    assert_eq!(pods.len(), 1, "one pod for {job}");
    let t = terminated(&pods[0]);
    assert_eq!(t["exitCode"], 0, "{t:#}");
    serde_json::from_str(t["message"].as_str().expect("a termination message"))
        .unwrap_or_else(|e| panic!("the termination message is the summary JSON: {e}: {t:#}"))
}

#[test]
fn pre_status_post_as_jobs_restore_exactly() {
    let _turn = turn();
    harvester_state();
    let before = snapshot();
    assert_eq!(methods(), json!(["LiveMigrate"]));

    let (outcome, took) = run_phase("pre");
    assert_eq!(outcome, complete());
    figure(&format!(
        "pre Job Complete {:.2} s after kubectl apply -k",
        took.as_secs_f64()
    ));
    assert_eq!(methods(), json!([]), "pre suspended the updates");
    let summary = summary_of("workload-update-guard-pre");
    assert_eq!(summary["phase"], "pre", "{summary:#}");
    assert_eq!(summary["exitCode"], 0, "{summary:#}");
    let steps = summary["steps"].as_array().expect("steps");
    assert_eq!(
        steps.len(),
        2,
        "the KubeVirt CR and the ManagedChart: {summary:#}"
    );

    let (outcome, _) = run_phase("status");
    assert_eq!(outcome, complete());
    let logs = k(&["-n", NS, "logs", "job/workload-update-guard-status"]);
    assert!(
        logs.contains("harvester-system/kubevirt") && logs.contains("fleet-local/harvester"),
        "the status report names both objects:\n{logs}"
    );
    let summary = summary_of("workload-update-guard-status");
    assert_eq!(summary["phase"], "status", "{summary:#}");

    let (outcome, _) = run_phase("post");
    assert_eq!(outcome, complete());
    let summary = summary_of("workload-update-guard-post");
    assert_eq!(summary["phase"], "post", "{summary:#}");
    assert_eq!(methods(), json!(["LiveMigrate"]));
    let after = snapshot();
    assert_eq!(after.0, before.0, "the KubeVirt CR exactly as before pre");
    assert_eq!(after.1, before.1, "the ManagedChart exactly as before pre");
}

/// The RBAC and the Job of the e2e "upgrade": the pinned static kubectl (no shell in its image)
/// bumps the ManagedChart's version in an init container, as Harvester's upgrade controller
/// does, then applies the next chart's KubeVirt CR the Helm 4 way (server-side, field manager
/// `helm`, no force), as Fleet does.
fn upgrade_objects(next: &Value) -> Vec<Value> {
    let image = kubectl_image();
    let kubectl = |name: &str, args: Value| {
        json!({"name": name, "image": image, "imagePullPolicy": "Never", "args": args,
               "env": [{"name": "HOME", "value": "/tmp"}],
               "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                {"name": "chart", "mountPath": "/chart"}],
               "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                   "capabilities": {"drop": ["ALL"]}}})
    };
    let role = |ns: &str, group: &str, resource: &str| {
        json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "wug-upgrade", "namespace": ns},
                "rules": [{"apiGroups": [group], "resources": [resource], "verbs": ["get", "patch"]}]},
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "wug-upgrade", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "wug-upgrade"},
                "subjects": [{"kind": "ServiceAccount", "name": "wug-upgrade", "namespace": NS}]}])
    };
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "wug-upgrade", "namespace": NS}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "wug-next-chart", "namespace": NS},
               "data": {"kubevirt.json": next.to_string()}}),
    ];
    for r in [
        role(NS, "kubevirt.io", "kubevirts"),
        role(CHART_NS, "management.cattle.io", "managedcharts"),
    ] {
        objects.extend(r.as_array().unwrap().iter().cloned());
    }
    objects.push(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "wug-upgrade", "namespace": NS},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "serviceAccountName": "wug-upgrade", "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [kubectl("bump-chart", json!(["-n", CHART_NS, "patch", "managedchart", "harvester",
                "--type=json", "-p", r#"[{"op":"replace","path":"/spec/version","value":"1.8.0"}]"#]))],
            "containers": [kubectl("helm-apply", json!(["apply", "--server-side", "--field-manager", "helm",
                "-f", "/chart/kubevirt.json"]))],
            "volumes": [{"name": "tmp", "emptyDir": {}},
                        {"name": "chart", "configMap": {"name": "wug-next-chart"}}]}}}}));
    objects
}

/// The job's Complete time and its first pod's start, for the ordering.
fn finished_at(job: &str) -> String {
    let j = get_json(&["-n", NS, "job", job]);
    j["status"]["completionTime"].as_str().unwrap().to_string()
}

fn started_at(job: &str) -> String {
    pods_of(job)[0]["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_string()
}

/// upgrade-toolkit's order: the pre Job, then the upgrade, then the post Job, each started only
/// once the one before is Complete (the only thing it reads of a Job).
#[test]
fn orchestrator_pre_upgrade_post() {
    let _turn = turn();
    harvester_state();
    delete_kubevirt_and_chart();
    // Harvester 1.7.0's chart, installed by Helm 4 (Fleet).
    let chart0 = harvester_chart(CHART_NS);
    apply(std::slice::from_ref(&chart0));
    let chart0 = get_json(&["-n", CHART_NS, "managedchart", "harvester"]);
    let kv_rendered = render_kubevirt(NS, "1.7.0", &chart0);
    crate::support::upgrade::helm_apply(&node().control_plane(), &kv_rendered).unwrap();
    set_kubevirt_status(
        NS,
        r#"{"phase":"Deployed","observedKubeVirtVersion":"v1.6.0","targetKubeVirtVersion":"v1.7.0"}"#,
    );
    let kv0 = get_json(&["-n", NS, "kubevirt", "kubevirt"]);

    let (outcome, _) = run_phase("pre");
    assert_eq!(outcome, complete(), "pre");
    // Fleet renders the next chart from the ManagedChart as pre left it.
    let chart_pre = get_json(&["-n", CHART_NS, "managedchart", "harvester"]);
    let next = render_kubevirt(NS, "1.8.0", &chart_pre);
    assert_eq!(
        next["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
        json!([])
    );
    apply(&upgrade_objects(&next));
    let outcome = wait_job("wug-upgrade", JOB_TIMEOUT);
    assert_eq!(outcome, complete(), "the upgrade Job");
    assert!(started_at("wug-upgrade") >= finished_at("workload-update-guard-pre"));
    assert_eq!(methods(), json!([]), "still suspended after the upgrade");

    let (outcome, _) = run_phase("post");
    assert_eq!(outcome, complete(), "post");
    assert!(started_at("workload-update-guard-post") >= finished_at("wug-upgrade"));
    // Both objects as before pre, plus what the upgrade changed.
    let kv1 = get_json(&["-n", NS, "kubevirt", "kubevirt"]);
    let mut want_kv = render_kubevirt(NS, "1.8.0", &chart0);
    want_kv["metadata"] = content(&kv0)["metadata"].clone();
    want_kv["status"] = kv0["status"].clone();
    assert_eq!(content(&kv1), want_kv, "the KubeVirt CR");
    let mut want_chart = content(&chart0);
    want_chart["spec"]["version"] = json!("1.8.0");
    assert_eq!(
        content(&get_json(&["-n", CHART_NS, "managedchart", "harvester"])),
        want_chart,
        "the ManagedChart"
    );
    for o in ["serviceaccount", "configmap"] {
        let name = if o == "configmap" {
            "wug-next-chart"
        } else {
            "wug-upgrade"
        };
        k(&["-n", NS, "delete", o, name]);
    }
}

/// The pinned kubectl's image (hack/image.sh), by the name the kubelet resolves.
pub fn kubectl_image() -> String {
    built_image(|l| l.contains("wug-kubectl"))
}

/// The image resolves host names (glibc's NSS `files` and `dns` live in its libc.so.6): the
/// status Job with a kubeconfig whose server is a name, found in the pod's /etc/hosts
/// (hostAliases: the node's address), with the ServiceAccount's projected token and CA; the
/// in-cluster variables point nowhere.
#[test]
fn image_reaches_the_api_server_by_host_name() {
    let _turn = turn();
    harvester_state();
    let port = std::fs::read_to_string(node().dir.join("cp/api.port")).unwrap();
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let kubeconfig = json!({"apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": format!("https://kubernetes.default.svc:{}", port.trim()),
                                               "certificate-authority": format!("{sa}/ca.crt")}}],
        "users": [{"name": "u", "user": {"tokenFile": format!("{sa}/token")}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]});
    let mut objects = rendered_with("manifests/status", |job| {
        set_env(job, "KUBECONFIG", "/kubeconfig/config");
        // The in-cluster address leads nowhere: only the kubeconfig's name can reach the server.
        set_env(job, "KUBERNETES_SERVICE_HOST", "127.0.0.1");
        set_env(job, "KUBERNETES_SERVICE_PORT", "9");
        let spec = &mut job["spec"]["template"]["spec"];
        spec["hostAliases"] = json!([{"ip": NODE_IP, "hostnames": ["kubernetes.default.svc"]}]);
        spec["volumes"] =
            json!([{"name": "kubeconfig", "secret": {"secretName": "wug-kubeconfig"}}]);
        spec["containers"][0]["volumeMounts"] =
            json!([{"name": "kubeconfig", "mountPath": "/kubeconfig", "readOnly": true}]);
    });
    objects.push(json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "wug-kubeconfig", "namespace": NS},
                        "stringData": {"config": kubeconfig.to_string()}}));
    apply(&objects);
    let outcome = wait_job("workload-update-guard-status", JOB_TIMEOUT);
    let logs = k(&["-n", NS, "logs", "job/workload-update-guard-status"]);
    assert_eq!(outcome, complete(), "{logs}");
    assert!(
        logs.contains("KubeVirt harvester-system/kubevirt"),
        "{logs}"
    );
    k(&["-n", NS, "delete", "secret", "wug-kubeconfig"]);
}
