//! `manifests/` used for real: server-side dry run of every kustomization, the RBAC applied and
//! its ServiceAccount token running every phase, and the Job contract tied to the binary.
//!
//! These tests own the Harvester namespaces (`harvester-system`, `fleet-local`) of the shared
//! control plane; every other test works in namespaces of its own.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Value, json};
use workload_update_guard::config::unset_value;
use workload_update_guard::error::exit;

use crate::support::*;

const KUSTOMIZATIONS: &[&str] = &["base", "job", "pre", "post", "status"];

/// The tests that apply `manifests/base` to the shared control plane take turns: a server-side
/// dry run that reads "absent" and then meets another test's real create fails with AlreadyExists.
static BASE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn ensure_harvester_namespaces() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for ns in ["harvester-system", "fleet-local"] {
            let yaml = kubectl_ok(&["create", "namespace", ns, "--dry-run=client", "-o", "yaml"]);
            let mut apply = control_plane().kubectl();
            apply.args(["apply", "-f", "-"]);
            pipe(apply, &yaml);
        }
    });
}

/// The rendered kustomization as a list of objects.
fn render(dir: &str) -> Vec<Value> {
    let path = repo_root().join("manifests").join(dir);
    yaml_objects(&kubectl_ok(&["kustomize", path.to_str().unwrap()]))
}

fn job(dir: &str) -> Value {
    render(dir)
        .into_iter()
        .find(|o| o["kind"] == "Job")
        .expect("a Job")
}

#[test]
fn every_kustomization_passes_server_side_dry_run() {
    let _turn = BASE.blocking_lock();
    ensure_harvester_namespaces();
    for dir in KUSTOMIZATIONS {
        let path = repo_root().join("manifests").join(dir);
        let out = kubectl_ok(&["apply", "--dry-run=server", "-k", path.to_str().unwrap()]);
        assert!(out.contains("(server dry run)"), "{dir}: {out}");
    }
}

/// An operator's second `kubectl apply -k manifests/base` changes nothing: every object is
/// `unchanged` and `kubectl diff` finds no difference (a field the server drops, such as an empty
/// `ingress: []`, would report its object `configured` on every run).
#[test]
fn applying_the_base_again_changes_nothing() {
    let _turn = BASE.blocking_lock();
    ensure_harvester_namespaces();
    let path = repo_root().join("manifests/base");
    let path = path.to_str().unwrap();
    kubectl_ok(&["apply", "-k", path]);
    let out = kubectl_ok(&["apply", "-k", path]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        render("base").len(),
        "one line per object: {out}"
    );
    for line in lines {
        assert!(line.ends_with(" unchanged"), "{line} (in {out})");
    }
    let mut diff = control_plane().kubectl();
    diff.args(["diff", "-k", path]);
    let diff = diff.output().unwrap();
    assert_eq!(
        diff.status.code(),
        Some(0),
        "kubectl diff -k manifests/base: {}{}",
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );
}

#[test]
fn the_pod_failure_policy_names_the_binary_exit_codes() {
    for dir in ["pre", "post", "status"] {
        let job = job(dir);
        let rules = job["spec"]["podFailurePolicy"]["rules"].as_array().unwrap();
        let codes = |action: &str| -> Vec<u8> {
            rules
                .iter()
                .filter(|r| r["action"] == action && r.get("onExitCodes").is_some())
                .flat_map(|r| {
                    r["onExitCodes"]["values"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap() as u8)
                })
                .collect()
        };
        assert_eq!(
            codes("FailJob"),
            [
                exit::CONFIG,
                exit::PERMANENT,
                exit::MISSING,
                exit::CLEANUP_PENDING,
                exit::FLEET_NOT_APPLIED
            ],
            "{dir}"
        );
        assert_eq!(
            codes("Count"),
            [exit::TRANSIENT, exit::INTERRUPTED],
            "{dir}"
        );
        assert!(rules.iter().all(|r| r["onExitCodes"].is_null() || r["onExitCodes"]["containerName"] == "guard"));
        // The first matching rule decides, and an evicted guard exits 5 (SIGTERM): the eviction's
        // Ignore must come before the Count of exit 5.
        assert_eq!(
            (&rules[0]["action"], &rules[0]["onPodConditions"][0]["type"]),
            (&json!("Ignore"), &json!("DisruptionTarget")),
            "{dir}"
        );
    }
}

#[test]
fn the_jobs_are_hardened_and_outlast_the_tool_deadline() {
    for (dir, phase) in [("pre", "pre"), ("post", "post"), ("status", "status")] {
        let job = job(dir);
        let spec = &job["spec"];
        let pod = &spec["template"]["spec"];
        let c = &pod["containers"][0];
        let env = container_env(&job);
        assert_eq!(env["PHASE"], phase);
        assert_eq!(
            env.get("FALLBACK_METHODS").map(String::as_str),
            (phase == "post").then_some("LiveMigrate")
        );
        let deadline: u64 = env["DEADLINE_SECONDS"].parse().unwrap();
        let attempts = spec["backoffLimit"].as_u64().unwrap() + 1;
        let active = spec["activeDeadlineSeconds"].as_u64().unwrap();
        assert!(active > attempts * deadline, "{dir}");
        // The waits are apart from DEADLINE_SECONDS, and passing a bound fails the Job (exits 7
        // and 8), so one of each is added on top of the attempts: Fleet's in pre and post, and
        // Harvester's cleanup (with the binary's default bound) in post.
        let wait: u64 = env["FLEET_WAIT_SECONDS"].parse().unwrap();
        assert_eq!(wait, 600, "{dir}: the default, said in the Job");
        let cleanup: u64 = if phase == "post" {
            unset_value("HARVESTER_CLEANUP_WAIT_SECONDS")
                .unwrap()
                .parse()
                .unwrap()
        } else {
            0
        };
        assert!(active >= attempts * deadline + wait + cleanup, "{dir}");
        assert!(spec["ttlSecondsAfterFinished"].as_u64().is_some());
        assert_eq!(pod["restartPolicy"], "Never");
        // The read-only report never runs with a right to write.
        let sa = if phase == "status" {
            "workload-update-guard-status"
        } else {
            "workload-update-guard"
        };
        assert_eq!(pod["serviceAccountName"], sa, "{dir}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(c["terminationMessagePolicy"], "FallbackToLogsOnError");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert!(
            c["resources"]["limits"]["memory"].is_string()
                && c["resources"]["requests"]["cpu"].is_string()
        );
    }
}

/// The Jobs schedule wherever upgrade-toolkit's own Jobs do: the same tolerations, exactly.
#[test]
fn the_jobs_tolerate_what_upgrade_toolkit_jobs_tolerate() {
    let want = json!([
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node-role.kubernetes.io/etcd", "operator": "Exists", "effect": "NoExecute"},
        {"key": "kubernetes.io/arch", "operator": "Equal", "value": "amd64", "effect": "NoSchedule"},
        {"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"},
        {"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm", "effect": "NoSchedule"},
        {"key": "kubevirt.io/drain", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "CriticalAddonsOnly", "operator": "Exists"}
    ]);
    for dir in ["pre", "post", "status"] {
        assert_eq!(
            job(dir)["spec"]["template"]["spec"]["tolerations"],
            want,
            "{dir}"
        );
    }
}

#[test]
fn the_rbac_names_its_objects_and_grants_no_wildcards_or_secrets() {
    for obj in render("base") {
        if let Some(rules) = obj["rules"].as_array() {
            for rule in rules {
                let text = rule.to_string();
                assert!(!text.contains('*') && !text.contains("secrets"), "{text}");
                let verbs: Vec<&str> = rule["verbs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                let names = rule["resourceNames"].as_array();
                // create cannot be limited by name, nor list and watch of objects whose names are
                // not known in advance (Harvester's Upgrades, the add-on's UpgradePlans); every
                // other verb on our objects is.
                assert!(
                    verbs == ["create"]
                        || verbs == ["list"]
                        || verbs == ["list", "watch"]
                        || names.is_some_and(|n| n.len() == 1),
                    "{text}"
                );
            }
        }
    }
}

/// The ServiceAccounts of `manifests/` run pre and post (the writer) and status (the reader) with
/// only their own tokens, and are refused everything else.
#[tokio::test]
async fn the_service_account_token_runs_every_phase_and_nothing_else() {
    let _turn = BASE.lock().await;
    ensure_harvester_namespaces();
    let client = admin().await;
    kubectl_ok(&[
        "apply",
        "-k",
        repo_root().join("manifests/base").to_str().unwrap(),
    ]);
    let kv_ns = "harvester-system";
    let kv0 = create(&client, "KubeVirt", kv_ns, json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt"},
        "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"], "batchEvictionSize": 10}}})).await;
    let mut chart = harvester_chart("fleet-local");
    chart["metadata"]["namespace"] = json!("fleet-local");
    let chart0 = create(&client, "ManagedChart", "fleet-local", chart).await;
    // Fleet's status, as Rancher copies it: pre and post wait for it with `get` alone.
    let fleet = crate::support::fleet::FleetModel::start(
        &client,
        "fleet-local",
        crate::support::fleet::Options {
            deploy: crate::support::fleet::Deploy::StatusOnly,
            take_up: std::time::Duration::ZERO,
            delay: std::time::Duration::from_millis(300),
        },
    )
    .await;
    create(
        &client,
        "KubeVirt",
        kv_ns,
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "other"}, "spec": {}}),
    )
    .await;
    let mut other_chart = harvester_chart("fleet-local");
    other_chart["metadata"]["name"] = json!("other");
    create(&client, "ManagedChart", "fleet-local", other_chart).await;

    let kubeconfig = token_kubeconfig(&sa_token(kv_ns, "workload-update-guard"));
    let reader = token_kubeconfig(&sa_token(kv_ns, "workload-update-guard-status"));
    for dir in ["pre", "status", "post"] {
        let env = container_env(&job(dir));
        let token = if dir == "status" {
            &reader
        } else {
            &kubeconfig
        };
        let run = run_bin(token, env).await;
        assert_eq!(run.code, 0, "{dir}: {run:?}");
        if dir == "pre" {
            let kv = get(&client, "KubeVirt", kv_ns, "kubevirt").await;
            assert_eq!(
                kv["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
                json!([])
            );
        }
        if dir == "status" {
            assert!(run.stdout.contains("automated updates"), "{run:?}");
            // The reader lists the VMIs for the forecast: a 403 would fail status (exit 3). The
            // API server authorizes before it routes, so this control plane's missing VMI CRD
            // (a 404, no forecast line) does not hide a missing right.
            assert!(!run.stdout.contains("running VMIs"), "{run:?}");
        } else {
            let steps = run.summary.as_ref().unwrap()["steps"].to_string();
            assert!(steps.contains("Fleet applied the change"), "{dir}: {steps}");
        }
    }
    fleet.stop().await;
    assert_eq!(
        content(&get(&client, "KubeVirt", kv_ns, "kubevirt").await)["spec"],
        content(&kv0)["spec"]
    );
    let without_status = |mut o: Value| {
        o.as_object_mut().unwrap().remove("status");
        content(&o)
    };
    assert_eq!(
        without_status(get(&client, "ManagedChart", "fleet-local", "harvester").await),
        without_status(chart0)
    );
    // The Role's `create events` was enough for both Events.
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client.clone(), kv_ns);
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for want in ["WorkloadUpdatesSuspended", "WorkloadUpdatesRestored"] {
        assert!(reasons.iter().any(|r| r == want), "{want} in {reasons:?}");
    }

    // The same token, anywhere else: 403.
    let sa = client_for(&kubeconfig).await;
    let add_label = json!([{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]);
    for (kind, ns) in [("KubeVirt", kv_ns), ("ManagedChart", "fleet-local")] {
        let err = json_patch(&sa, kind, ns, "other", add_label.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{kind} other: {err}"
        );
    }
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(sa.clone(), kv_ns);
    let err = secrets.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    let err = secrets.get("anything").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    // The writer lists the migrations (pre names those under way) and may not change one; the
    // reader writes nothing.
    let migrations = kube::Api::<kube::api::DynamicObject>::all_with(
        sa.clone(),
        &resource("VirtualMachineInstanceMigration"),
    );
    migrations
        .list(&Default::default())
        .await
        .expect("the writer lists the migrations");
    let in_ns = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        sa.clone(),
        "default",
        &resource("VirtualMachineInstanceMigration"),
    );
    let err = in_ns.delete("any", &Default::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    let read_only = client_for(&reader).await;
    for (kind, ns, name) in [
        ("KubeVirt", kv_ns, "kubevirt"),
        ("ManagedChart", "fleet-local", "harvester"),
    ] {
        let err = json_patch(&read_only, kind, ns, name, add_label.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{kind} {name}: {err}"
        );
    }
    let mut env = container_env(&job("pre"));
    env.insert("DEADLINE_SECONDS".into(), "5".into());
    let run = run_bin(&reader, env).await;
    assert_eq!(
        run.code,
        i32::from(exit::PERMANENT),
        "pre as the reader: {run:?}"
    );
    // And the binary pointed at the other KubeVirt fails permanently, writing nothing.
    let mut env = container_env(&job("pre"));
    env.insert("KUBEVIRT_NAME".into(), "other".into());
    env.insert("MANAGEDCHART_NAME".into(), String::new());
    let run = run_bin(&kubeconfig, env).await;
    assert_eq!(run.code, i32::from(exit::PERMANENT), "{run:?}");
}

/// The armed post (manifests/post-armed): post with ARM=true under its fixed name (the lock),
/// evictions Ignored first, exit 9 failing the Job, room for a node's reboots, and a bound above
/// ARM_WAIT_SECONDS and post's own.
#[test]
fn the_armed_post_job_outlasts_its_bound_and_survives_drains() {
    let armed = job("post-armed");
    let post = job("post");
    let spec = &armed["spec"];
    assert_eq!(
        armed["metadata"]["name"],
        "workload-update-guard-post-armed"
    );
    let env = container_env(&armed);
    assert_eq!(env["PHASE"], "post");
    assert_eq!(env["ARM"], "true");
    let wait: u64 = env["ARM_WAIT_SECONDS"].parse().unwrap();
    assert_eq!(wait.to_string(), unset_value("ARM_WAIT_SECONDS").unwrap());
    let active = spec["activeDeadlineSeconds"].as_u64().unwrap();
    assert!(active > wait + post["spec"]["activeDeadlineSeconds"].as_u64().unwrap());
    assert!(spec["backoffLimit"].as_u64().unwrap() >= 10);
    let rules = spec["podFailurePolicy"]["rules"].as_array().unwrap();
    assert_eq!(rules[0]["action"], "Ignore");
    assert_eq!(rules[0]["onPodConditions"][0]["type"], "DisruptionTarget");
    assert_eq!(
        rules[1]["onExitCodes"]["values"],
        json!([
            exit::CONFIG,
            exit::PERMANENT,
            exit::MISSING,
            exit::CLEANUP_PENDING,
            exit::FLEET_NOT_APPLIED,
            exit::ARMED_BOUND
        ])
    );
    assert_eq!(
        armed["spec"]["template"]["spec"]["serviceAccountName"],
        "workload-update-guard"
    );
}

/// `hack/job.sh ARGS` against the shared control plane: its exit code, stdout and stderr.
fn job_sh(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("hack/job.sh"))
        .args(args)
        .env("KUBECTL", control_plane().bin_dir.join("kubectl"))
        .env("KUBECONFIG", control_plane().kubeconfig())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `hack/job.sh arm` creates the armed Job and returns at once; a second arm is refused while it
/// runs (no kubelet here: the Job never ends, as one that waits for the upgrade).
#[tokio::test]
async fn a_second_arm_is_refused_while_one_waits() {
    let _turn = BASE.lock().await;
    ensure_harvester_namespaces();
    let (code, _, err) = job_sh(&["arm"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("created job harvester-system/workload-update-guard-post-armed"),
        "{err}"
    );
    assert!(err.contains("armed:"), "{err}");
    let (code, _, err) = job_sh(&["arm"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a second arm is refused"), "{err}");
    kubectl_ok(&[
        "-n",
        "harvester-system",
        "delete",
        "job",
        "workload-update-guard-post-armed",
        "--wait",
    ]);
}

/// `hack/job.sh --env NAME=VALUE` (repeatable) puts a documented variable in the Job's
/// container, replacing the manifest's value; an unknown name, or one the script's commands set
/// themselves, is refused (exit 2, one line and the hint) before anything is created.
#[tokio::test]
async fn job_sh_env_passes_a_documented_setting_and_refuses_an_unknown_one() {
    let env_of = |stdout: &str| -> BTreeMap<String, String> {
        let list: Value = serde_json::from_str(stdout).unwrap();
        let job = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kind"] == "Job")
            .unwrap()
            .clone();
        let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap();
        let names: Vec<&str> = env.iter().map(|e| e["name"].as_str().unwrap()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "each variable once: {names:?}");
        env.iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["value"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let (code, out, err) = job_sh(&["render", "pre"]);
    assert_eq!(code, Some(0), "{err}");
    let before = env_of(&out);
    assert_ne!(
        before.get("FLEET_WAIT_SECONDS").map(String::as_str),
        Some("900")
    );
    let (code, out, err) = job_sh(&[
        "render",
        "pre",
        "--env",
        "FLEET_WAIT_SECONDS=900",
        "--env",
        "RUST_LOG=debug",
        "--env",
        "DEADLINE_SECONDS=120",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let env = env_of(&out);
    assert_eq!(env["FLEET_WAIT_SECONDS"], "900");
    assert_eq!(env["RUST_LOG"], "debug");
    assert_eq!(env["DEADLINE_SECONDS"], "120", "replaces the manifest's");
    assert_eq!(env["PHASE"], "pre", "the rest as the manifest has it");

    for (arg, says) in [
        ("NOPE=1", "--env NOPE: not a variable of the guard"),
        ("PHASE=post", "--env PHASE: the phase is the command's"),
        ("FLEET_WAIT_SECONDS", "--env takes NAME=VALUE"),
    ] {
        // `run`, not `render`: refused before the script reaches the cluster.
        let (code, _, err) = job_sh(&["run", "pre", "--env", arg]);
        assert_eq!(code, Some(2), "{arg}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{arg}: {err}");
        assert!(
            lines[0].starts_with(&format!("job: ERROR: {says}")),
            "{err}"
        );
        assert!(lines[1].starts_with("usage: hack/job.sh"), "{err}");
    }
    assert!(
        kubectl_ok(&["-n", "harvester-system", "get", "jobs", "-o", "name"])
            .lines()
            .all(|l| !l.ends_with("workload-update-guard-pre")),
        "nothing created"
    );
}
