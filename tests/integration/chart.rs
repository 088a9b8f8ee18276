//! The resident guard's Helm chart (`manifests/chart`), rendered by the real Helm 4
//! (`hack/helm.sh`) and checked against the real API server: a server-side dry run of
//! everything it renders, the Deployment hardened as the Jobs are, its probes, `Recreate` and no
//! PodDisruptionBudget, the RBAC's verbs and names (and, applied, what its ServiceAccount may
//! and may not do), the uninstall hook, and the values.
//!
//! The objects are named `workload-update-guard-watch`, apart from manifests/base's; the tests
//! that apply them take turns.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{Value, json};
use workload_update_guard::error::exit;

use crate::support::*;

const NS: &str = "harvester-system";
const NAME: &str = "workload-update-guard-watch";
const PROBE: &str = "/usr/local/bin/workload-update-guard";

/// `helm template` has no cluster to ask: the chart's refusal of a cluster without
/// ValidatingAdmissionPolicy (every Kubernetes its kubeVersion admits serves it) is told it is.
pub(crate) const SERVED_VAP: &str = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";

pub(crate) static APPLY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(crate) fn helm_template(args: &[&str]) -> std::process::Output {
    helm_template_release("workload-update-guard", args)
}

/// `helm template RELEASE` of the chart into harvester-system with `args`.
pub(crate) fn helm_template_release(release: &str, args: &[&str]) -> std::process::Output {
    helm_template_of(&repo_root().join("manifests/chart"), release, args)
}

/// `helm template RELEASE` of the chart in `chart` (a copy of ours) with `args`.
pub(crate) fn helm_template_of(
    chart: &std::path::Path,
    release: &str,
    args: &[&str],
) -> std::process::Output {
    let dir = tempfile_dir();
    let out = Command::new(helm_bin())
        .args(["template", release])
        .arg(chart)
        .args(["--namespace", NS])
        .args(["--api-versions", SERVED_VAP])
        .args(args)
        .env("HELM_CONFIG_HOME", dir.join("config"))
        .env("HELM_CACHE_HOME", dir.join("cache"))
        .env("HELM_DATA_HOME", dir.join("data"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// `helm template` of the chart with `args` (`--set ...`), hooks included: its YAML.
pub(crate) fn template_yaml(args: &[&str]) -> String {
    release_yaml("workload-update-guard", args)
}

/// `helm template RELEASE` of the chart with `args`, hooks included: its YAML.
pub(crate) fn release_yaml(release: &str, args: &[&str]) -> String {
    let out = helm_template_release(release, args);
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects rendered, as JSON (kubectl converts).
pub(crate) fn render(args: &[&str]) -> Vec<Value> {
    yaml_objects(&template_yaml(args))
}

/// Helm's refusal of `args`: its message.
pub(crate) fn render_refused(args: &[&str]) -> String {
    let out = helm_template(args);
    assert!(!out.status.success(), "helm template {args:?} renders");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn kind<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {objects:#?}"))
}

pub(crate) fn deployment(objects: &[Value]) -> &Value {
    kind(objects, "Deployment", NAME)
}

fn hook(objects: &[Value]) -> &Value {
    kind(objects, "Job", &format!("{NAME}-uninstall"))
}

/// manifests/job's Job, rendered by kustomize: the hardening the chart must match.
fn the_job() -> Value {
    let path = repo_root().join("manifests/pre");
    let yaml = kubectl_ok(&["kustomize", path.to_str().unwrap()]);
    let mut convert = control_plane().kubectl();
    convert.args(["create", "--dry-run=client", "-o", "json", "-f", "-"]);
    let json = pipe(convert, &yaml);
    serde_json::Deserializer::from_str(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .find(|o| o["kind"] == "Job")
        .unwrap()
}

pub(crate) fn ensure_namespaces() {
    for ns in [NS, "fleet-local"] {
        let yaml = kubectl_ok(&["create", "namespace", ns, "--dry-run=client", "-o", "yaml"]);
        let mut apply = control_plane().kubectl();
        apply.args(["apply", "-f", "-"]);
        pipe(apply, &yaml);
    }
}

/// Chart.yaml's `version` and `appVersion` are the binary's (Cargo.toml's): one release, one
/// number, and the image's default tag is the appVersion.
#[test]
fn the_chart_version_is_the_binary_version() {
    let chart = std::fs::read_to_string(repo_root().join("manifests/chart/Chart.yaml")).unwrap();
    let field = |key: &str| {
        chart
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} in Chart.yaml"))
            .trim()
            .trim_matches('"')
            .to_string()
    };
    assert_eq!(field("version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field("appVersion"), env!("CARGO_PKG_VERSION"));
    let objects = render(&[]);
    assert_eq!(
        deployment(&objects)["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("workload-update-guard:{}", env!("CARGO_PKG_VERSION"))
    );
}

/// Everything the chart renders, hooks included, passes the API server's own validation.
#[tokio::test]
async fn the_chart_passes_server_side_dry_run() {
    let _turn = APPLY.lock().await;
    ensure_namespaces();
    let yaml = template_yaml(&[]);
    let mut apply = control_plane().kubectl();
    apply.args(["apply", "--dry-run=server", "-f", "-"]);
    let out = pipe(apply, &yaml);
    let kinds: BTreeSet<&str> = out
        .lines()
        .map(|l| l.split('/').next().unwrap().split('.').next().unwrap())
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "clusterrole",
            "clusterrolebinding",
            "configmap",
            "deployment",
            "job",
            "networkpolicy",
            "role",
            "rolebinding",
            "service",
            "serviceaccount",
            "validatingadmissionpolicy",
            "validatingadmissionpolicybinding"
        ]),
        "{out}"
    );
    assert!(
        out.lines().all(|l| l.ends_with("(server dry run)")),
        "{out}"
    );
}

/// One replica, `Recreate`, no PodDisruptionBudget; the pod hardened exactly as the Jobs' (pod and
/// container security contexts, resources, termination message; their tolerations but two, for
/// a pod that stays), PHASE=watch, the
/// probes exec the binary, and the probe files on an emptyDir at /tmp (WATCH_STATE_DIR).
#[test]
fn the_deployment_is_the_jobs_hardened_pod_with_meaningful_probes() {
    let objects = render(&[]);
    assert!(
        objects.iter().all(|o| o["kind"] != "PodDisruptionBudget"),
        "no PDB: every node is drained during the upgrade"
    );
    let d = deployment(&objects);
    assert_eq!(d["metadata"]["namespace"], NS);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["strategy"], json!({"type": "Recreate"}));
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let job = the_job();
    let job_pod = &job["spec"]["template"]["spec"];
    let job_c = &job_pod["containers"][0];
    assert_eq!(pod["securityContext"], job_pod["securityContext"]);
    // The Jobs' tolerations, but a cordoned node (a drain moves the pod on, to another node or,
    // on a single node, back after the uncordon) and an unreachable or not-ready node for 60 s
    // only, not for ever.
    let unschedulable = json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"});
    let mut want: Vec<Value> = job_pod["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| **t != unschedulable && t["key"] != "node.kubernetes.io/unreachable")
        .cloned()
        .collect();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        want.insert(0, json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}));
    }
    assert_eq!(pod["tolerations"], json!(want));
    for key in [
        "securityContext",
        "resources",
        "imagePullPolicy",
        "terminationMessagePath",
        "terminationMessagePolicy",
    ] {
        assert_eq!(c[key], job_c[key], "{key}");
    }
    assert_eq!(c["name"], "guard");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["serviceAccountName"], NAME);
    assert!(pod.get("nodeSelector").is_none());
    // One port: the metrics (tests/integration/monitoring.rs has the rest).
    assert_eq!(c["ports"][0]["name"], "metrics");

    let env = container_env(d);
    assert_eq!(env["PHASE"], "watch");
    assert_eq!(env["WATCH_STATE_DIR"], "/tmp");
    assert_eq!(env["KUBEVIRT_NAMESPACE"], "harvester-system");
    assert_eq!(env["KUBEVIRT_NAME"], "kubevirt");
    assert_eq!(env["MANAGEDCHART_NAMESPACE"], "fleet-local");
    assert_eq!(env["MANAGEDCHART_NAME"], "harvester");
    assert_eq!(env["LOG_FORMAT"], "json");
    assert_eq!(env["METRICS_PORT"], "9090");
    assert_eq!(env["ADMISSION_HOLD"], "true");
    assert_eq!(env["CHART_VERSION"], env!("CARGO_PKG_VERSION"));
    // The binary's defaults are not repeated.
    assert_eq!(env.len(), 10, "{env:?}");

    for (probe, which) in [
        ("startupProbe", "live"),
        ("livenessProbe", "live"),
        ("readinessProbe", "ready"),
    ] {
        assert_eq!(
            c[probe]["exec"]["command"],
            json!([PROBE, "--probe", which]),
            "{probe}"
        );
    }
    // Liveness: the loop touches `alive` every 30 s and the probe allows 90 s; restarting takes
    // three failures in a row, well past one missed touch.
    let live = &c["livenessProbe"];
    assert!(
        live["periodSeconds"].as_u64().unwrap() * live["failureThreshold"].as_u64().unwrap() >= 90
    );
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0]["mountPath"], "/tmp");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mounts[0]["name"])
        .unwrap();
    assert!(volume["emptyDir"].is_object(), "{volume}");
    // The NetworkPolicy selects the guard's pod and the hook's.
    let policy = kind(&objects, "NetworkPolicy", NAME);
    let selector = policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap();
    for workload in [d, hook(&objects)] {
        let labels = &workload["spec"]["template"]["metadata"]["labels"];
        for (k, v) in selector {
            assert_eq!(&labels[k], v, "{k}");
        }
    }
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    // Ingress: the metrics port only, from the monitoring namespace.
    assert_eq!(policy["spec"]["ingress"].as_array().unwrap().len(), 1);
}

/// The RBAC: exactly the rules of the contract (the Jobs' writer's, plus the watch), named where
/// the names are known, no wildcard, no Secret, all bound to the chart's ServiceAccount.
#[test]
fn the_rbac_is_the_writers_and_the_watch_and_nothing_more() {
    let objects = render(&[]);
    let rules = |kind_: &str, ns: Option<&str>| -> Vec<Value> {
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == kind_
                    && o["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(NAME))
                    && ns.is_none_or(|ns| o["metadata"]["namespace"] == ns)
            })
            .unwrap_or_else(|| panic!("{kind_} {ns:?}"));
        role["rules"].as_array().unwrap().clone()
    };
    assert_eq!(
        rules("Role", Some(NS)),
        [
            json!({"apiGroups": ["kubevirt.io"], "resources": ["kubevirts"], "resourceNames": ["kubevirt"], "verbs": ["get", "list", "watch", "patch"]}),
            json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "list"]}),
            json!({"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": ["workload-update-guard-post-armed"], "verbs": ["get"]}),
            json!({"apiGroups": ["harvesterhci.io"], "resources": ["upgrades"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": ["harvesterhci.io"], "resources": ["versions"], "verbs": ["get", "list"]}),
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["workload-update-guard-upgrades"], "verbs": ["get", "patch"]}),
        ]
    );
    assert_eq!(
        rules("Role", Some("fleet-local")),
        [
            json!({"apiGroups": ["management.cattle.io"], "resources": ["managedcharts"], "resourceNames": ["harvester"], "verbs": ["get", "patch"]})
        ]
    );
    assert_eq!(
        rules("ClusterRole", None),
        [
            json!({"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancemigrations"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": ["harvesterhci.io"], "resources": ["settings"], "resourceNames": ["server-version"], "verbs": ["get"]}),
            json!({"apiGroups": ["management.harvesterhci.io"], "resources": ["upgradeplans"], "verbs": ["list", "watch"]}),
        ]
    );
    let subject = json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NS}]);
    let bindings: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
        .collect();
    assert_eq!(bindings.len(), 3);
    for b in bindings {
        assert_eq!(b["subjects"], subject, "{b}");
        // Each binding binds its own role (the ManagedChart's has its own name, so that both
        // Roles can be in one namespace).
        assert_eq!(b["roleRef"]["name"], b["metadata"]["name"], "{b}");
    }
    // The names follow the values: another KubeVirt CR and ManagedChart, and none (no Fleet:
    // only read, for what an earlier pre left).
    let other = render(&[
        "--set",
        "guard.kubevirtNamespace=kubevirt,guard.kubevirtName=kv,guard.managedChartName=",
    ]);
    let role = |ns: &str| {
        other
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == ns)
            .unwrap()["rules"][0]
            .clone()
    };
    assert_eq!(role("kubevirt")["resourceNames"], json!(["kv"]));
    assert_eq!(role("fleet-local")["resourceNames"], json!(["harvester"]));
    assert_eq!(role("fleet-local")["verbs"], json!(["get"]));
    assert_eq!(container_env(deployment(&other))["MANAGEDCHART_NAME"], "");
}

/// The RBAC applied for real: the ServiceAccount may do what the guard does, by name, and is
/// refused everything else (`kubectl auth can-i` asks the API server's authorizer).
#[tokio::test]
async fn the_service_account_may_watch_and_write_only_its_two_objects() {
    let _turn = APPLY.lock().await;
    ensure_namespaces();
    apply_rbac(&[]);
    let sa = format!("system:serviceaccount:{NS}:{NAME}");
    let can = |args: &[&str]| -> bool {
        let mut cmd = control_plane().kubectl();
        cmd.args(["auth", "can-i", "--as", &sa]).args(args);
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(said == "yes" || said == "no", "{args:?}: {said} {out:?}");
        said == "yes"
    };
    let allowed: &[&[&str]] = &[
        &["-n", NS, "get", "kubevirts.kubevirt.io/kubevirt"],
        &["-n", NS, "patch", "kubevirts.kubevirt.io/kubevirt"],
        // The watch of the one CR (`metadata.name=kubevirt`): authorized by its name.
        &["-n", NS, "list", "kubevirts.kubevirt.io/kubevirt"],
        &["-n", NS, "watch", "kubevirts.kubevirt.io/kubevirt"],
        &["-n", NS, "create", "events.events.k8s.io"],
        &["-n", NS, "list", "events.events.k8s.io"],
        &[
            "-n",
            NS,
            "get",
            "jobs.batch/workload-update-guard-post-armed",
        ],
        &["-n", NS, "list", "upgrades.harvesterhci.io"],
        &["-n", NS, "watch", "upgrades.harvesterhci.io"],
        &["-n", NS, "get", "versions.harvesterhci.io/v1.7.1"],
        &["-n", NS, "list", "versions.harvesterhci.io"],
        &[
            "-n",
            "fleet-local",
            "get",
            "managedcharts.management.cattle.io/harvester",
        ],
        &[
            "-n",
            "fleet-local",
            "patch",
            "managedcharts.management.cattle.io/harvester",
        ],
        &["get", "settings.harvesterhci.io/server-version"],
        &["list", "upgradeplans.management.harvesterhci.io"],
        &["watch", "upgradeplans.management.harvesterhci.io"],
        &["-A", "list", "virtualmachineinstancemigrations.kubevirt.io"],
        &[
            "-A",
            "watch",
            "virtualmachineinstancemigrations.kubevirt.io",
        ],
        &["-n", NS, "get", "configmaps/workload-update-guard-upgrades"],
        &[
            "-n",
            NS,
            "patch",
            "configmaps/workload-update-guard-upgrades",
        ],
    ];
    let refused: &[&[&str]] = &[
        &["-n", NS, "get", "kubevirts.kubevirt.io/other"],
        &["-n", NS, "list", "kubevirts.kubevirt.io"],
        &["-n", NS, "watch", "kubevirts.kubevirt.io"],
        &["-n", NS, "watch", "kubevirts.kubevirt.io/other"],
        &["-n", NS, "update", "kubevirts.kubevirt.io/kubevirt"],
        &["-n", NS, "delete", "kubevirts.kubevirt.io/kubevirt"],
        &["-n", NS, "patch", "upgrades.harvesterhci.io/x"],
        &["-n", NS, "get", "secrets"],
        &["-n", NS, "list", "secrets"],
        &["-n", NS, "create", "pods"],
        &["-n", "default", "list", "upgrades.harvesterhci.io"],
        &[
            "-n",
            "fleet-local",
            "get",
            "managedcharts.management.cattle.io/other",
        ],
        &[
            "-n",
            "fleet-local",
            "list",
            "managedcharts.management.cattle.io",
        ],
        &["get", "settings.harvesterhci.io/other"],
        &["patch", "upgradeplans.management.harvesterhci.io/x"],
        &[
            "-n",
            "default",
            "delete",
            "virtualmachineinstancemigrations.kubevirt.io/x",
        ],
        &["-n", NS, "get", "deployments"],
        &["-n", NS, "get", "jobs.batch/other"],
        &["-n", NS, "list", "jobs.batch"],
        &["-n", NS, "delete", "events.events.k8s.io/x"],
        &["-n", NS, "get", "configmaps/other"],
        &["-n", NS, "list", "configmaps"],
        &["-n", NS, "create", "configmaps"],
        &[
            "-n",
            NS,
            "delete",
            "configmaps/workload-update-guard-upgrades",
        ],
        &[
            "-n",
            "default",
            "patch",
            "virtualmachineinstancemigrations.kubevirt.io/x",
        ],
    ];
    for args in allowed {
        assert!(can(args), "allowed: {args:?}");
    }
    for args in refused {
        assert!(!can(args), "refused: {args:?}");
    }
    // The VMIs: listed (the forecast) and watched (an upgrade's record), never read one by one
    // or changed. Their CRD is not on
    // this control plane, so kubectl cannot map the name: the authorizer is asked directly.
    let may = |verb: &str, namespace: &str| -> bool {
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": sa, "resourceAttributes": {"group": "kubevirt.io",
                "resource": "virtualmachineinstances", "verb": verb, "namespace": namespace}}});
        let mut cmd = control_plane().kubectl();
        cmd.args(["create", "-f", "-", "-o", "jsonpath={.status.allowed}"]);
        pipe(cmd, &review.to_string()).trim() == "true"
    };
    assert!(may("list", ""), "list VMIs in all namespaces");
    assert!(may("watch", ""), "watch VMIs in all namespaces");
    for verb in ["get", "patch", "delete"] {
        assert!(!may(verb, "default"), "{verb} VMIs");
    }
}

/// The chart's ServiceAccount and RBAC rendered with `args`, applied (not the Deployment, not
/// the hook).
fn apply_rbac(args: &[&str]) {
    let objects: Vec<Value> = render(args)
        .into_iter()
        .filter(|o| o["kind"] != "Deployment" && o["kind"] != "Job")
        // The hold is no right of the ServiceAccount's (tests/integration/hold.rs applies it).
        .filter(|o| o["apiVersion"] != "admissionregistration.k8s.io/v1")
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut apply = control_plane().kubectl();
    apply.args(["apply", "-f", "-"]);
    pipe(apply, &list.to_string());
}

/// `kubectl exec deploy/workload-update-guard-watch -- workload-update-guard status`, as the
/// binary sees it: the Deployment's environment (`PHASE=watch`), the word `status`, the chart's
/// ServiceAccount's token. The same report as `PHASE=status` run by an administrator, every read
/// allowed (the resident guard's last decision, from the Events, included); exit 0, nothing
/// written.
#[tokio::test]
async fn status_by_hand_in_the_pod_is_phase_status_with_the_charts_service_account() {
    let _turn = APPLY.lock().await;
    ensure_namespaces();
    let client = admin().await;
    let ns = namespace(&client, "chart-status").await;
    let names = format!("guard.kubevirtNamespace={ns},guard.managedChartNamespace={ns}");
    apply_rbac(&["--set", &names]);
    let (kv, _) = harvester(&client, &ns, Some(json!(["LiveMigrate", "Evict"]))).await;
    let guard = workload_update_guard::cluster::Cluster::from_client(client.clone(), false);
    guard
        .event(
            &kv,
            workload_update_guard::cluster::EventKind::Normal,
            workload_update_guard::warnings::RESIDENT,
            "resident guard: no upgrade under way: watching for the next one",
        )
        .await
        .expect("the Event made");
    let admin_config = control_plane().kubeconfig();
    let pre = run_bin(&admin_config, env_for(&ns, "pre")).await;
    pre.ok();
    let pod_env = container_env(deployment(&render(&["--set", &names])));
    assert_eq!(pod_env["PHASE"], "watch");
    let sa = token_kubeconfig(&sa_token(NS, NAME));
    let before = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let by_hand = run_words(&sa, &pod_env, &["status"]);
    // By hand: text, whatever the pod's LOG_FORMAT (json); the Job's report in text too.
    let mut job_env = pod_env.clone();
    job_env.insert("PHASE".into(), "status".into());
    job_env.insert("LOG_FORMAT".into(), "text".into());
    let job = run_bin(&admin_config, job_env).await;
    assert_eq!((by_hand.code, job.code), (0, 0), "{by_hand:?}\n{job:?}");
    assert_eq!(by_hand.stdout, job.stdout, "{by_hand:?}");
    assert!(by_hand.stdout.contains("resident guard "), "{by_hand:?}");
    // Not "403": a log line's timestamp may hold those digits.
    let refused = by_hand.stderr.to_lowercase().contains("forbidden");
    assert!(!refused, "{by_hand:?}");
    let after = get(&client, "KubeVirt", &ns, "kubevirt").await;
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    // A word that is not a phase of a run by hand, or a PHASE that disagrees: one line, exit 2.
    for (words, phase) in [
        (&["watch"][..], "watch"),
        (&["status", "x"][..], "watch"),
        (&["post"][..], "pre"),
    ] {
        let mut env = pod_env.clone();
        env.insert("PHASE".into(), phase.into());
        let refused = run_words(&sa, &env, words);
        assert_eq!(
            refused.code,
            i32::from(exit::CONFIG),
            "{words:?}: {refused:?}"
        );
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
    }
}

/// The binary run with `words` after its name, `env` and `kubeconfig` only.
fn run_words(
    kubeconfig: &std::path::Path,
    env: &std::collections::BTreeMap<String, String>,
    words: &[&str],
) -> Run {
    let out = Command::new(BIN)
        .args(words)
        .env_clear()
        .env("KUBECONFIG", kubeconfig)
        .envs(env)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
        summary: None,
    }
}

/// The uninstall hook: a pre-delete Job that runs `post` at once (no wait for an upgrade under
/// way: exit 7 fails it, and the uninstall), as the release's ServiceAccount (still there during
/// a pre-delete hook), with the Jobs' hardening, deleted when it succeeds and kept when it fails,
/// and bounded below Helm's default 5-minute timeout.
#[test]
fn the_uninstall_hook_runs_post_without_waiting() {
    let objects = render(&[]);
    let job = hook(&objects);
    let annotations = &job["metadata"]["annotations"];
    assert_eq!(annotations["helm.sh/hook"], "pre-delete");
    assert_eq!(
        annotations["helm.sh/hook-delete-policy"],
        "before-hook-creation,hook-succeeded"
    );
    let env = container_env(job);
    assert_eq!(env["PHASE"], "post");
    assert_eq!(env["HARVESTER_CLEANUP_WAIT_SECONDS"], "0");
    assert_eq!(env["FALLBACK_METHODS"], "LiveMigrate");
    assert_eq!(env["KUBEVIRT_NAME"], "kubevirt");
    assert!(!env.contains_key("WATCH_RESYNC_SECONDS"));
    let deadline: u64 = env["DEADLINE_SECONDS"].parse().unwrap();
    let fleet: u64 = env["FLEET_WAIT_SECONDS"].parse().unwrap();
    let active = job["spec"]["activeDeadlineSeconds"].as_u64().unwrap();
    assert!(deadline + fleet < active && active < 300, "{active}");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], NAME);
    assert_eq!(pod["restartPolicy"], "Never");
    let d = deployment(&objects);
    let d_pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"], d_pod["securityContext"]);
    // A Job: it also runs on a cordoned node (all of them may be), as the Jobs do.
    let mut tolerations = vec![
        json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    ];
    tolerations.extend(d_pod["tolerations"].as_array().unwrap().iter().cloned());
    assert_eq!(pod["tolerations"], json!(tolerations));
    assert_eq!(
        annotations["helm.sh/hook-output-log-policy"], "hook-failed",
        "helm uninstall prints the refusal"
    );
    assert_eq!(env["LOG_FORMAT"], "text");
    let (c, d_c) = (&pod["containers"][0], &d_pod["containers"][0]);
    for key in ["image", "securityContext", "resources"] {
        assert_eq!(c[key], d_c[key], "{key}");
    }
    let rules = job["spec"]["podFailurePolicy"]["rules"].as_array().unwrap();
    assert_eq!(rules[0]["onPodConditions"][0]["type"], "DisruptionTarget");
    assert_eq!(
        rules[1],
        json!({"action": "FailJob", "onExitCodes": {"containerName": "guard", "operator": "In",
            "values": [exit::CONFIG, exit::PERMANENT, exit::MISSING, exit::CLEANUP_PENDING, exit::FLEET_NOT_APPLIED]}})
    );
    // A fallback of the operator's goes to the hook too.
    let other = render(&["--set", "guard.fallbackMethods=LiveMigrate\\,Evict"]);
    assert_eq!(
        env_of(hook(&other), "FALLBACK_METHODS"),
        "LiveMigrate,Evict"
    );
    assert_eq!(
        env_of(deployment(&other), "FALLBACK_METHODS"),
        "LiveMigrate,Evict"
    );
}

fn env_of(workload: &Value, name: &str) -> String {
    container_env(workload)
        .remove(name)
        .unwrap_or_else(|| panic!("no {name}"))
}

/// The values: the image by tag or digest, the guard's settings as their documented variables
/// (and nothing else: a key the binary does not document is refused), extraEnv appended, a
/// variable set twice refused, scheduling.
#[test]
fn the_values_set_the_image_the_settings_and_the_scheduling() {
    let image = |args: &[&str]| -> String {
        let objects = render(args);
        let d = deployment(&objects);
        let image = d["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        assert_eq!(
            hook(&objects)["spec"]["template"]["spec"]["containers"][0]["image"],
            image
        );
        image.as_str().unwrap().to_string()
    };
    assert_eq!(
        image(&[
            "--set",
            "image.repository=registry.example:5000/wug,image.tag=0.2.0-rc1"
        ]),
        "registry.example:5000/wug:0.2.0-rc1"
    );
    // By default the chart's appVersion.
    assert_eq!(
        image(&[]),
        format!("workload-update-guard:{}", env!("CARGO_PKG_VERSION"))
    );
    // A digest is tied to its version: the tag, which must be this chart's appVersion. An upgrade
    // that keeps the previous version's tag and digest (or a digest alone) is refused, naming
    // the fix, rather than running the old build under the new chart.
    let digest = format!("sha256:{}", "a1".repeat(32));
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        image(&[
            "--set",
            &format!("image.tag={version},image.digest={digest}")
        ]),
        format!("workload-update-guard:{version}@{digest}")
    );
    let err = render_refused(&["--set", &format!("image.tag=0.1.0,image.digest={digest}")]);
    assert!(
        err.contains("pins a build of version 0.1.0")
            && err.contains(&format!("this chart is version {version}"))
            && err.contains(&format!("--set image.tag={version},image.digest=")),
        "{err}"
    );
    let err = render_refused(&["--set", &format!("image.digest={digest}")]);
    assert!(err.contains("needs image.tag"), "{err}");
    // Not a digest: refused by the schema.
    let err = render_refused(&["--set", "image.digest=latest"]);
    assert!(err.contains("digest"), "{err}");

    let objects = render(&[
        "--set",
        "guard.watchResyncSeconds=3600,guard.fleetWaitSeconds=30,guard.preEvenIfNotNeeded=true,guard.rustLog=debug,guard.logFormat=text",
        "--set",
        "extraEnv[0].name=EXAMPLE,extraEnv[0].value=1000000",
        "--set",
        "nodeSelector.kubernetes\\.io/os=linux",
    ]);
    let d = deployment(&objects);
    let env = container_env(d);
    assert_eq!(env["WATCH_RESYNC_SECONDS"], "3600");
    assert_eq!(env["FLEET_WAIT_SECONDS"], "30");
    assert_eq!(env["PRE_EVEN_IF_NOT_NEEDED"], "true");
    assert_eq!(env["RUST_LOG"], "debug");
    assert_eq!(env["LOG_FORMAT"], "text");
    assert_eq!(
        env["EXAMPLE"], "1000000",
        "a number as a string, without an exponent"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["nodeSelector"],
        json!({"kubernetes.io/os": "linux"})
    );
    // The hook keeps its own bounds, and the watch's setting stays with the watch.
    let hook_env = container_env(hook(&objects));
    assert_eq!(hook_env["FLEET_WAIT_SECONDS"], "120");
    assert!(!hook_env.contains_key("WATCH_RESYNC_SECONDS"));

    // Every variable `guard:` can set is one the binary documents (its --help table) or the
    // watch's own.
    let documented: BTreeSet<&str> = workload_update_guard::config::variables()
        .map(|v| v.0)
        .collect();
    let helpers =
        std::fs::read_to_string(repo_root().join("manifests/chart/templates/_helpers.tpl"))
            .unwrap();
    let mapping = helpers
        .split("define \"wug.guardEnvNames\" -}}")
        .nth(1)
        .unwrap()
        .split("{{- end")
        .next()
        .unwrap();
    let names: Vec<&str> = mapping
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(_, v)| v.trim()))
        .collect();
    assert!(names.len() >= 10, "{mapping}");
    for name in &names {
        assert!(
            documented.contains(name),
            "{name} is not in the binary's variables table"
        );
    }

    let err = render_refused(&["--set", "guard.bogus=1"]);
    assert!(err.contains("bogus"), "{err}");
    let err = render_refused(&["--set", "extraEnv[0].name=PHASE,extraEnv[0].value=pre"]);
    assert!(err.contains("PHASE"), "{err}");
    let err = render_refused(&["--set", "guard.fallbackMethods=Never"]);
    assert!(err.contains("fallbackMethods"), "{err}");
}

/// The values operators expect of a chart: `imagePullSecrets`, `podAnnotations`, `podLabels`,
/// `priorityClassName` and `affinity`, on the Deployment's pod and the uninstall hook's alike;
/// none of them rendered by default; a malformed one, or a label the chart selects by, refused.
#[tokio::test]
async fn the_pull_secrets_pod_metadata_and_placement_reach_both_pods() {
    let values = tempfile_dir().join("operator-values.yaml");
    std::fs::write(
        &values,
        "imagePullSecrets: [{name: regcred}]\n\
         podAnnotations: {example.com/team: platform}\n\
         podLabels: {example.com/tier: critical}\n\
         priorityClassName: system-cluster-critical\n\
         affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      \
         nodeSelectorTerms:\n      - matchExpressions:\n        \
         - {key: node-role.kubernetes.io/control-plane, operator: Exists}\n",
    )
    .unwrap();
    let objects = render(&["--values", values.to_str().unwrap()]);
    let pods = [
        (&deployment(&objects)["spec"]["template"], "watch"),
        (&hook(&objects)["spec"]["template"], "uninstall"),
    ];
    for (pod, component) in pods {
        let spec = &pod["spec"];
        assert_eq!(
            spec["imagePullSecrets"],
            json!([{"name": "regcred"}]),
            "{component}"
        );
        assert_eq!(spec["priorityClassName"], "system-cluster-critical");
        assert_eq!(
            spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchExpressions"][0],
            json!({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"})
        );
        assert_eq!(
            pod["metadata"]["annotations"],
            json!({"example.com/team": "platform"})
        );
        let labels = &pod["metadata"]["labels"];
        assert_eq!(labels["example.com/tier"], "critical");
        assert_eq!(labels["app.kubernetes.io/component"], component);
        assert_eq!(
            labels["app.kubernetes.io/instance"],
            "workload-update-guard"
        );
    }
    let d = deployment(&objects);
    for (key, value) in d["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&d["spec"]["template"]["metadata"]["labels"][key], value);
    }
    // And the API server takes them.
    let _turn = APPLY.lock().await;
    ensure_namespaces();
    let mut apply = control_plane().kubectl();
    apply.args(["apply", "--dry-run=server", "-f", "-"]);
    let out = pipe(
        apply,
        &template_yaml(&["--values", values.to_str().unwrap()]),
    );
    assert!(
        out.lines().all(|l| l.ends_with("(server dry run)")),
        "{out}"
    );

    let objects = render(&[]);
    for pod in [
        &deployment(&objects)["spec"]["template"],
        &hook(&objects)["spec"]["template"],
    ] {
        for key in ["imagePullSecrets", "priorityClassName", "affinity"] {
            assert!(pod["spec"].get(key).is_none(), "{key}: {pod}");
        }
        assert!(pod["metadata"].get("annotations").is_none(), "{pod}");
    }

    for (set, named) in [
        (
            "podLabels.app\\.kubernetes\\.io/instance=other",
            "podLabels",
        ),
        ("podLabels.tier=not a label", "podLabels"),
        ("imagePullSecrets[0].nam=regcred", "imagePullSecrets"),
        ("imagePullSecrets=regcred", "imagePullSecrets"),
        ("priorityClassName=Not_A_Class", "priorityClassName"),
        ("affinity.nodeAfinity.x=y", "affinity"),
        ("podAnnotations.example\\.com/n=1", "podAnnotations"),
    ] {
        let err = render_refused(&["--set", set]);
        assert!(err.contains(named), "{set}: {err}");
    }
}

/// The Harvester Addon (manifests/addon) installs this chart, at this version, in
/// harvester-system, as a third-party add-on; its `valuesContent` renders with the chart.
#[test]
fn the_addon_installs_this_chart_at_this_version() {
    let text =
        std::fs::read_to_string(repo_root().join("manifests/addon/workload-update-guard.yaml"))
            .unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    for want in [
        "apiVersion: harvesterhci.io/v1beta1".to_string(),
        "kind: Addon".into(),
        "  name: workload-update-guard".into(),
        "  namespace: harvester-system".into(),
        "    addon.harvesterhci.io/experimental: \"true\"".into(),
        "  chart: workload-update-guard".into(),
        format!("  version: {}", env!("CARGO_PKG_VERSION")),
        "  enabled: true".into(),
    ] {
        assert!(lines.contains(&want.as_str()), "{want:?} in {text}");
    }
    assert!(
        lines.iter().any(|l| l.starts_with("  repo: http")),
        "an HTTP(S) repository: {text}"
    );
    let start = lines
        .iter()
        .position(|l| l.starts_with("  valuesContent: |"))
        .expect("valuesContent");
    let values: String = lines[start + 1..]
        .iter()
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    assert!(values.contains("image:"), "{values}");
    let file = tempfile_dir().join("addon-values.yaml");
    std::fs::write(&file, &values).unwrap();
    let objects = render(&["--values", file.to_str().unwrap()]);
    assert_eq!(
        deployment(&objects)["spec"]["template"]["spec"]["containers"][0]["image"],
        format!(
            "registry.example.internal/workload-update-guard:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// The README's install "from the release", as it is written: the chart fetched by Helm from a
/// chart repository (`hack/chart.sh package`, served on loopback, standing for the release's
/// GitHub Pages) at the README's `--repo "$(bash hack/chart.sh where charts)"`, the image at
/// `$(bash hack/chart.sh where image)` pinned by tag and digest. `helm template` in place of
/// `helm install` (no cluster here; the e2e suite installs from a repository on a real node).
#[test]
fn the_readmes_install_from_the_release_fetches_the_chart_and_pins_the_image() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let command = readme
        .split("```sh\n")
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("--repo"))
        .expect("README: an install with --repo");
    let command: String = command
        .lines()
        .take_while(|l| !l.starts_with("kubectl"))
        .map(|l| l.trim_end_matches('\\').trim())
        .collect::<Vec<_>>()
        .join(" ");

    let dir = tempfile_dir();
    let served = dir.join("charts");
    let package = Command::new("bash")
        .arg(repo_root().join("hack/chart.sh"))
        .args(["package", served.to_str().unwrap()])
        .env("HELM", helm_bin())
        .output()
        .unwrap();
    assert!(package.status.success(), "{package:?}");
    let port = free_port();
    let mut server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--directory")
        .arg(&served)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let image = {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/chart.sh"))
            .args(["where", "image"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let version = env!("CARGO_PKG_VERSION");
    let digest = format!("sha256:{}", "a".repeat(64));
    let command = command
        .replace("\"$(bash hack/chart.sh where charts)\"", &url)
        .replace("\"$(bash hack/chart.sh where image)\"", &image)
        .replace("sha256:DIGEST", &digest)
        .replace("VERSION", version);
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[..2], ["helm", "install"], "{command}");

    let start = std::time::Instant::now();
    let rendered = loop {
        let out = Command::new(helm_bin())
            .arg("template")
            .args(&words[2..])
            .args(["--api-versions", SERVED_VAP])
            .env("HELM_CONFIG_HOME", dir.join("config"))
            .env("HELM_CACHE_HOME", dir.join("cache"))
            .env("HELM_DATA_HOME", dir.join("data"))
            .output()
            .unwrap();
        // The server may not listen yet.
        if out.status.success() || start.elapsed().as_secs() > 10 {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        rendered.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let objects = yaml_objects(&String::from_utf8(rendered.stdout).unwrap());
    let d = deployment(&objects);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("{image}:{version}@{digest}")
    );
}
