//! Each hazard of docs/design.md ("The hazards, and the answer to each"), end to end: the real
//! binary against the real API server.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use workload_update_guard::cluster::{Cluster, Written};
use workload_update_guard::model::{self, Kind, METHODS_POINTER, ObjectKey, Target};
use workload_update_guard::plan;

use crate::support::*;

fn methods(kv: &Value) -> Option<&Value> {
    kv.pointer("/spec/workloadUpdateStrategy/workloadUpdateMethods")
}

async fn kubevirt_rv(client: &kube::Client, ns: &str) -> String {
    rv(&get(client, "KubeVirt", ns, "kubevirt").await)
}

fn assert_ok(run: &Run) {
    run.ok();
}

/// Hazards 1, 2, 5 and 6: every starting value comes back exactly; reruns change nothing.
#[tokio::test]
async fn pre_then_post_restores_every_original_exactly() {
    let client = admin().await;
    for original in [
        Some(json!(["LiveMigrate"])),
        Some(json!(["LiveMigrate", "Evict"])),
        Some(json!(["Evict", "LiveMigrate"])),
        Some(json!(["Evict"])),
        Some(json!([])),
        None,
    ] {
        let ns = namespace(&client, "exact").await;
        let (kv0, chart0) = harvester(&client, &ns, original.clone()).await;

        assert_ok(&run_phase(&ns, "pre").await);
        let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
        let chart = get(&client, "ManagedChart", &ns, "harvester").await;
        // Suspended with [], never by dropping LiveMigrate alone ([Evict] evicts every VM).
        assert_eq!(methods(&kv), Some(&json!([])), "{original:?}");
        assert_eq!(
            kv["spec"]["workloadUpdateStrategy"]["batchEvictionSize"],
            json!(10)
        );
        assert_eq!(
            chart
                .pointer("/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods"),
            Some(&json!([]))
        );
        let list = chart["spec"]["diff"]["comparePatches"].as_array().unwrap();
        assert_eq!(
            &list[..3],
            chart0["spec"]["diff"]["comparePatches"]
                .as_array()
                .unwrap()
                .as_slice()
        );
        assert_eq!(list[3]["jsonPointers"], json!([METHODS_POINTER]));
        let record: plan::records::ValueRecord =
            plan::records::read_record(&kv, model::KUBEVIRT_RECORD)
                .unwrap()
                .unwrap();
        assert_eq!(record.value, original);

        // Record once: a second pre keeps the first record and writes nothing.
        let again = run_phase(&ns, "pre").await;
        assert_ok(&again);
        assert_eq!(again.outcomes(), ["unchanged", "unchanged"]);
        assert_eq!(kubevirt_rv(&client, &ns).await, rv(&kv));

        // post with the Harvester fallback configured: the record wins.
        let mut env = env_for(&ns, "post");
        env.insert("FALLBACK_METHODS".into(), "LiveMigrate".into());
        let post = run_bin(&control_plane().kubeconfig(), env.clone()).await;
        assert_ok(&post);
        assert_eq!(post.outcomes(), ["changed", "changed"]);
        let kv1 = get(&client, "KubeVirt", &ns, "kubevirt").await;
        let chart1 = get(&client, "ManagedChart", &ns, "harvester").await;
        assert_eq!(content(&kv1)["spec"], content(&kv0)["spec"], "{original:?}");
        assert_eq!(content(&kv1)["metadata"], content(&kv0)["metadata"]);
        assert_eq!(content(&chart1), content(&chart0));

        // A second post is a no-op.
        let again = run_bin(&control_plane().kubeconfig(), env).await;
        assert_ok(&again);
        assert_eq!(again.outcomes(), ["unchanged", "unchanged"]);
        assert_eq!(kubevirt_rv(&client, &ns).await, rv(&kv1));
    }
}

/// Hazard 2: without a record, post changes nothing, unless the ManagedChart's copy of the
/// original is there, or a fallback is set and the methods are an `[]` that we wrote (our
/// record was lost). An administrator's `[]` is never touched.
#[tokio::test]
async fn post_without_a_record_applies_the_fallback_only_to_our_own_empty_list() {
    let client = admin().await;
    let ns = namespace(&client, "norecord").await;
    let (kv0, _) = harvester(&client, &ns, Some(json!([]))).await;
    let mut with_fallback = env_for(&ns, "post");
    with_fallback.insert("FALLBACK_METHODS".into(), "LiveMigrate".into());
    for env in [env_for(&ns, "post"), with_fallback.clone()] {
        let run = run_bin(&control_plane().kubeconfig(), env).await;
        assert_ok(&run);
        assert_eq!(run.outcomes(), ["unchanged", "unchanged"]);
        let warnings = &run.summary.as_ref().unwrap()["warnings"];
        assert!(
            warnings[0]
                .as_str()
                .unwrap()
                .starts_with(workload_update_guard::warnings::STILL_SUSPENDED),
            "{warnings}"
        );
        assert_eq!(kubevirt_rv(&client, &ns).await, rv(&kv0));
    }

    // Our suspension whose record on the CR was lost (someone stripped the annotation): the
    // ManagedChart's copy restores the exact original.
    let ns = harvester_ns(&client, "lostrecord", json!(["Evict", "LiveMigrate"])).await;
    assert_ok(&run_phase(&ns, "pre").await);
    strip_kubevirt_record(&client, &ns).await;
    let run = run_phase(&ns, "post").await;
    assert_ok(&run);
    let actions = run.summary.as_ref().unwrap()["steps"][0]["actions"].to_string();
    assert!(actions.contains("the ManagedChart's copy"), "{actions}");
    let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
    assert_eq!(methods(&kv), Some(&json!(["Evict", "LiveMigrate"])));

    // Plain KubeVirt (no ManagedChart, so no copy): only the fallback can help, and only with it.
    let ns = harvester_ns(&client, "lostplain", json!(["LiveMigrate"])).await;
    let mut plain = env_for(&ns, "pre");
    plain.insert("MANAGEDCHART_NAME".into(), String::new());
    assert_ok(&run_bin(&control_plane().kubeconfig(), plain.clone()).await);
    strip_kubevirt_record(&client, &ns).await;
    plain.insert("PHASE".into(), "post".into());
    assert_ok(&run_bin(&control_plane().kubeconfig(), plain.clone()).await);
    assert_eq!(
        methods(&get(&client, "KubeVirt", &ns, "kubevirt").await),
        Some(&json!([])),
        "no fallback configured"
    );
    plain.insert("FALLBACK_METHODS".into(), "LiveMigrate".into());
    assert_ok(&run_bin(&control_plane().kubeconfig(), plain).await);
    assert_eq!(
        methods(&get(&client, "KubeVirt", &ns, "kubevirt").await),
        Some(&json!(["LiveMigrate"]))
    );
}

async fn strip_kubevirt_record(client: &kube::Client, ns: &str) {
    let key = model::KUBEVIRT_RECORD.replace('/', "~1");
    let op = json!([{"op": "remove", "path": format!("/metadata/annotations/{key}")}]);
    json_patch(client, "KubeVirt", ns, "kubevirt", op)
        .await
        .unwrap();
}

/// Hazard 6: an existing entry for our object gets our pointer; post takes only our pointer.
#[tokio::test]
async fn an_existing_kubevirt_entry_is_extended_not_duplicated() {
    let (client, ns) = new_harvester("entry", json!(["LiveMigrate"])).await;
    let entry = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt", "namespace": "",
                       "jsonPointers": ["/spec/configuration/developerConfiguration"]});
    append_compare_patch(&client, &ns, entry).await;
    let chart0 = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_ok(&run_phase(&ns, "pre").await);
    let chart = get(&client, "ManagedChart", &ns, "harvester").await;
    let list = chart["spec"]["diff"]["comparePatches"].as_array().unwrap();
    assert_eq!(list.len(), 4, "no second KubeVirt entry");
    assert_eq!(
        list[3]["jsonPointers"],
        json!([
            "/spec/configuration/developerConfiguration",
            METHODS_POINTER
        ])
    );
    assert_ok(&run_phase(&ns, "post").await);
    assert_eq!(
        content(&get(&client, "ManagedChart", &ns, "harvester").await),
        content(&chart0)
    );
}

/// Hazard 6: a pointer that was there before pre is still there after post.
#[tokio::test]
async fn a_pointer_that_was_there_before_stays_after_post() {
    let (client, ns) = new_harvester("ours", json!(["LiveMigrate"])).await;
    let entry = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt", "namespace": ns,
                       "jsonPointers": [METHODS_POINTER]});
    append_compare_patch(&client, &ns, entry).await;
    let chart0 = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_ok(&run_phase(&ns, "pre").await);
    assert_ok(&run_phase(&ns, "post").await);
    assert_eq!(
        content(&get(&client, "ManagedChart", &ns, "harvester").await),
        content(&chart0)
    );
}

/// Hazard 4: a writer that inserts an entry between our read and our write loses nothing. Our
/// plan appends our pointer to the existing KubeVirt entry by its index, so it holds only for the
/// list it was made from: the write must be refused, the object read again and planned again.
#[tokio::test]
async fn a_write_between_our_read_and_our_write_is_not_lost() {
    let client = admin().await;
    let ns = namespace(&client, "lost").await;
    harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    let kv_pointers = json!(["/spec/configuration/developerConfiguration"]);
    let kv_entry = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt",
                          "namespace": ns, "jsonPointers": kv_pointers});
    append_compare_patch(&client, &ns, kv_entry).await;
    // Our read: the KubeVirt entry is at index 3.
    let stale = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_eq!(
        stale["spec"]["diff"]["comparePatches"][3]["kind"],
        "KubeVirt"
    );
    // Another writer inserts its entry at index 3: the KubeVirt entry moves to 4, and theirs,
    // which has jsonPointers too, takes the index our plan names. A stale plan would append our
    // pointer to their entry, without any error.
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "theirs", "jsonPointers": ["/data"]});
    let insert = json!([{"op": "add", "path": "/spec/diff/comparePatches/3", "value": theirs}]);
    let overwritten = json_patch(&client, "ManagedChart", &ns, "harvester", insert)
        .await
        .unwrap();
    let cluster = Cluster::from_client(client.clone(), false);
    let target = Target {
        kind: Kind::ManagedChart,
        key: ObjectKey {
            namespace: ns.clone(),
            name: "harvester".into(),
        },
    };
    let kv = ObjectKey {
        namespace: ns.clone(),
        name: "kubevirt".into(),
    };
    // Each object a plan was made from: the stale one, then the one read after the conflict.
    let planned_from = std::sync::Mutex::new(Vec::new());
    let written = cluster
        .converge(&target, stale.clone(), |o| {
            planned_from.lock().unwrap().push(o.clone());
            plan::chart::chart_pre(o, &kv, &workload_update_guard::vocabulary::Steps::ALL, None)
                .map_err(|reason| workload_update_guard::vocabulary::Refusal {
                    target: target.clone(),
                    reason,
                })
        })
        .await
        .unwrap();
    let planned_from = planned_from.into_inner().unwrap();
    let rvs: Vec<String> = planned_from.iter().map(rv).collect();
    assert_eq!(
        rvs,
        [rv(&stale), rv(&overwritten)],
        "planned from our read, then, after the conflict, from the object their write left"
    );
    assert_eq!(
        planned_from[1]["spec"]["diff"]["comparePatches"],
        overwritten["spec"]["diff"]["comparePatches"],
        "the second plan saw their entry"
    );
    let Written::Changed { object, .. } = written else {
        panic!("our pointer written: {written:?}")
    };
    assert_ne!(rv(&object), rv(&overwritten), "written over their write");
    let chart = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_eq!(rv(&chart), rv(&object));
    let list = chart["spec"]["diff"]["comparePatches"].as_array().unwrap();
    let before = overwritten["spec"]["diff"]["comparePatches"]
        .as_array()
        .unwrap();
    assert_eq!(
        list.len(),
        before.len(),
        "no entry added or lost: {list:#?}"
    );
    assert_eq!(list[3], theirs, "their entry, as they wrote it");
    assert_eq!(
        list[4]["jsonPointers"],
        json!([kv_pointers[0], METHODS_POINTER]),
        "ours appended to the KubeVirt entry"
    );
    for (i, (now, was)) in list.iter().zip(before).enumerate() {
        if i != 4 {
            assert_eq!(now, was, "entry {i} untouched");
        }
    }
    let ours = list
        .iter()
        .flat_map(|e| e["jsonPointers"].as_array().into_iter().flatten())
        .filter(|p| *p == METHODS_POINTER)
        .count();
    assert_eq!(ours, 1, "ours exactly once: {list:#?}");
}

/// The KubeVirt CR as Helm would render it: the chart default under the ManagedChart's values.
fn rendered(ns: &str, chart: &Value) -> Value {
    let mut spec = json!({"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]}});
    if let Some(Value::Object(values)) = chart.pointer("/spec/values/kubevirt/spec") {
        for (k, v) in values {
            match (spec.get_mut(k), v) {
                (Some(Value::Object(dst)), Value::Object(src)) => dst.extend(src.clone()),
                _ => {
                    spec[k] = v.clone();
                }
            }
        }
    }
    json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt", "namespace": ns}, "spec": spec})
}

async fn helm_apply(client: &kube::Client, ns: &str) -> Result<Value, kube::Error> {
    let chart = get(client, "ManagedChart", ns, "harvester").await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource("KubeVirt"));
    let obj: DynamicObject = serde_json::from_value(rendered(ns, &chart)).unwrap();
    // Helm 4 server-side apply: field manager `helm`, no force.
    api.patch("kubevirt", &PatchParams::apply("helm"), &Patch::Apply(&obj))
        .await
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Hazard 3: a Helm-4-like apply before pre, after pre and after post never meets a conflict.
#[tokio::test]
async fn helm_server_side_apply_never_conflicts_with_the_guard() {
    let client = admin().await;
    let ns = namespace(&client, "helm").await;
    let chart = create(&client, "ManagedChart", &ns, harvester_chart(&ns)).await;
    // Helm installs the KubeVirt CR: `helm` owns workloadUpdateMethods.
    let kv = helm_apply(&client, &ns).await.expect("install");
    assert_eq!(methods(&kv), Some(&json!(["LiveMigrate"])));
    helm_apply(&client, &ns).await.expect("apply before pre");

    assert_ok(&run_phase(&ns, "pre").await);
    let kv = helm_apply(&client, &ns)
        .await
        .expect("apply after pre: no conflict");
    assert_eq!(
        methods(&kv),
        Some(&json!([])),
        "Helm's desired state agrees with the suspension"
    );
    let managers: Vec<&str> = kv["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"workload-update-guard"), "{managers:?}");

    assert_ok(&run_phase(&ns, "post").await);
    let kv = helm_apply(&client, &ns)
        .await
        .expect("apply after post: no conflict");
    assert_eq!(methods(&kv), Some(&json!(["LiveMigrate"])));
    assert_eq!(
        content(&get(&client, "ManagedChart", &ns, "harvester").await),
        content(&chart)
    );
}

/// The control for the test above: without the values step, the direct patch alone makes
/// Helm's apply conflict. This is the upstream failure the values override prevents.
#[tokio::test]
async fn without_the_values_override_helm_apply_conflicts() {
    let client = admin().await;
    let ns = namespace(&client, "helmctl").await;
    create(&client, "ManagedChart", &ns, harvester_chart(&ns)).await;
    helm_apply(&client, &ns).await.expect("install");
    let mut env = env_for(&ns, "pre");
    env.insert("STEP_CHART_VALUES".into(), "false".into());
    assert_ok(&run_bin(&control_plane().kubeconfig(), env).await);
    let err = helm_apply(&client, &ns).await.unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 409, "{s:?}");
    assert!(s.message.contains("workload-update-guard"), "{}", s.message);
}

/// DRY_RUN prints the exact patches, sends them with server-side dry run, changes nothing.
#[tokio::test]
async fn dry_run_prints_the_patches_and_changes_nothing() {
    let client = admin().await;
    let ns = namespace(&client, "dryrun").await;
    let (kv0, chart0) = harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    let mut env = env_for(&ns, "pre");
    env.insert("DRY_RUN".into(), "true".into());
    let run = run_bin(&control_plane().kubeconfig(), env).await;
    assert_ok(&run);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert_eq!(lines[0]["object"], format!("ManagedChart {ns}/harvester"));
    let kv = ObjectKey {
        namespace: ns.clone(),
        name: "kubevirt".into(),
    };
    let original = plan::kubevirt::kubevirt_original(&kv0).unwrap();
    let chart_plan = plan::chart::chart_pre(
        &chart0,
        &kv,
        &workload_update_guard::vocabulary::Steps::ALL,
        Some(&original),
    )
    .unwrap();
    assert_eq!(
        lines[0]["patch"],
        serde_json::to_value(chart_plan.patch).unwrap()
    );
    assert_eq!(
        lines[1]["patch"],
        serde_json::to_value(plan::kubevirt::kubevirt_pre(&kv0, None).unwrap().patch).unwrap()
    );
    assert_eq!(kubevirt_rv(&client, &ns).await, rv(&kv0));
    assert_eq!(
        rv(&get(&client, "ManagedChart", &ns, "harvester").await),
        rv(&chart0)
    );
    assert_eq!(run.summary.unwrap()["dryRun"], json!(true));
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
    assert!(
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// `kubectl describe kubevirt` tells the story: one Event for suspend, one for restore.
#[tokio::test]
async fn events_record_suspend_and_restore_on_the_kubevirt_cr() {
    let (client, ns) = new_harvester("events", json!(["LiveMigrate"])).await;
    assert_ok(&run_phase(&ns, "pre").await);
    assert_ok(&run_phase(&ns, "post").await);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
    let mut reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .inspect(|e| assert_eq!(e.involved_object.kind.as_deref(), Some("KubeVirt")))
        .filter_map(|e| e.reason)
        .collect();
    reasons.sort();
    // The model's CR counts 3 outdated workloads (KubeVirt upgraded already): pre came late, and
    // its Warning says so (`PreAfterKubeVirtUpgrade`).
    assert_eq!(
        reasons,
        [
            "PreAfterKubeVirtUpgrade",
            "WorkloadUpdatesRestored",
            "WorkloadUpdatesSuspended"
        ]
    );
    let described = kubectl_ok(&["-n", &ns, "describe", "kubevirt", "kubevirt"]);
    assert!(
        described.contains("WorkloadUpdatesSuspended"),
        "{described}"
    );
}

/// `status` reports without writing: methods, record, outdated count, pending migrations.
#[tokio::test]
async fn status_reports_read_only() {
    let (client, ns) = new_harvester("status", json!(["LiveMigrate"])).await;
    for (name, phase) in [
        ("kubevirt-workload-update-aaaa", "Running"),
        ("kubevirt-workload-update-bbbb", "Succeeded"),
        ("manual-migration", "Running"),
    ] {
        migration(&client, &ns, name, phase).await;
    }
    // pre names the workload-update migrations under way, and says that [] does not stop them
    // (other tests' migrations may be listed too: the list is cluster-wide).
    let pre = run_phase(&ns, "pre").await;
    assert_ok(&pre);
    let under_way = pre.warnings_of("WorkloadUpdateMigrationsUnderWay: ");
    assert_eq!(under_way.len(), 1, "{pre:?}");
    assert_contains_all(
        &under_way[0],
        &[
            &format!("{ns}/kubevirt-workload-update-aaaa (Running)"),
            "created before pre",
            "Setting the methods to [] stops new ones but cancels none of these",
            "PHASE=status lists those not finished",
        ],
    );
    assert!(!under_way[0].contains("bbbb") && !under_way[0].contains("manual-migration"));
    pre.says(&[" WARN ", "kubevirt-workload-update-aaaa"]);
    let before = kubevirt_rv(&client, &ns).await;
    let text = run_phase(&ns, "status").await;
    assert_ok(&text);
    assert!(
        text.stdout.starts_with("SUSPENDED since ")
            && text
                .stdout
                .lines()
                .next()
                .unwrap()
                .ends_with(r#"by pre; post will restore ["LiveMigrate"] (from the CR's record)"#),
        "{}",
        text.stdout
    );
    assert_contains_all(
        &text.stdout,
        &[
            "Deployed",
            "v1.6.0 / v1.7.0",
            &format!("{ns}/kubevirt-workload-update-aaaa (Running)"),
        ],
    );
    assert!(!text.stdout.contains("bbbb") && !text.stdout.contains("manual-migration"));
    let mut env = env_for(&ns, "status");
    env.insert("LOG_FORMAT".into(), "json".into());
    let json_run = run_bin(&control_plane().kubeconfig(), env).await;
    assert_ok(&json_run);
    let report: Value = serde_json::from_str(&json_run.stdout).unwrap();
    assert_eq!(report["kubevirt"]["workloadUpdateMethods"], json!([]));
    assert_eq!(
        report["kubevirt"]["outdatedVirtualMachineInstanceWorkloads"],
        json!(3)
    );
    assert_eq!(
        report["kubevirt"]["savedOriginal"]["value"],
        json!(["LiveMigrate"])
    );
    assert_eq!(
        report["kubevirt"]["savedOriginal"]["owners"][0]["manager"],
        json!("unknown"),
        "the owner before pre is recorded: {report}"
    );
    assert_eq!(
        report["kubevirt"]["postWillRestore"]["source"],
        json!("crRecord")
    );
    assert_eq!(report["managedChart"]["comparePatchesPointer"], json!(true));
    assert_eq!(report["managedChart"]["valuesOverride"], json!([]));
    assert_eq!(report["suspended"], json!(true));
    assert_eq!(report["willRestore"], json!(["LiveMigrate"]));
    assert_eq!(report["restoreSource"], json!("crRecord"));
    assert_eq!(report["warnings"], json!([]));
    assert_eq!(
        report["unfinishedMigrations"],
        json!([{"namespace": ns, "name": "kubevirt-workload-update-aaaa", "phase": "Running"}])
    );
    assert!(report["verdict"].as_str().unwrap().starts_with("SUSPENDED"));
    assert_eq!(
        kubevirt_rv(&client, &ns).await,
        before,
        "status writes nothing"
    );
}

/// A permanent refusal (403) fails at once with the permanent exit code.
#[tokio::test]
async fn forbidden_is_a_permanent_failure() {
    let (_, ns) = new_harvester("forbid", json!(["LiveMigrate"])).await;
    kubectl_ok(&["-n", &ns, "create", "serviceaccount", "nobody"]);
    let started = std::time::Instant::now();
    let run = run_bin(
        &token_kubeconfig(&sa_token(&ns, "nobody")),
        env_for(&ns, "pre"),
    )
    .await;
    assert_eq!(run.code, 3, "{run:?}");
    assert!(started.elapsed().as_secs() < 10, "no retries on 403");
    let error = run.summary.unwrap()["error"].as_str().unwrap().to_string();
    assert!(error.contains("HTTP 403"), "{error}");
}
