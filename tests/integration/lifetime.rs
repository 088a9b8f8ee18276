//! The whole life of the methods field, with real Helm 4 playing Fleet: install, then upgrade
//! cycles (`pre`, maybe a redeploy with the override, `post`, a redeploy, a change of the
//! methods by the chart or the operator). No claim of ours may outlive a cycle: a server-side
//! apply that changes the field must never conflict with `workload-update-guard`.

use serde_json::{Value, json};
use workload_update_guard::plan::ownership::update_claim_warning;
use workload_update_guard::warnings::CHANGED_WHILE_SUSPENDED;

use crate::support::*;

async fn phase_ok(ns: &str, phase: &str) {
    let run = run_phase(ns, phase).await;
    assert_eq!(run.code, 0, "{phase}: {run:?}");
}

/// What changes the methods at the end of a cycle.
enum Change {
    /// The next chart version ships another default.
    ChartDefault(Value),
    /// The operator sets a values override on the ManagedChart (`kubectl edit managedchart`).
    OperatorValues(Value),
}

/// One upgrade cycle; returns the chart in use at its end.
async fn cycle(
    client: &kube::Client,
    ns: &str,
    chart: std::path::PathBuf,
    redeploy_while_suspended: bool,
    change: Change,
    expected_after: Value,
) -> std::path::PathBuf {
    let before = kubevirt_methods(client, ns).await;
    phase_ok(ns, "pre").await;
    assert_eq!(kubevirt_methods(client, ns).await, json!([]));
    if redeploy_while_suspended {
        fleet_deploy(client, ns, &chart)
            .await
            .expect("a redeploy with the override while suspended");
        assert_eq!(kubevirt_methods(client, ns).await, json!([]));
    }
    phase_ok(ns, "post").await;
    assert_eq!(
        kubevirt_methods(client, ns).await,
        before,
        "exactly restored"
    );
    for (kind, name) in [("KubeVirt", "kubevirt"), ("ManagedChart", "harvester")] {
        let obj = get(client, kind, ns, name).await;
        assert_eq!(
            claims_of_ours(&obj),
            Vec::<Value>::new(),
            "{kind} after post"
        );
    }
    fleet_deploy(client, ns, &chart)
        .await
        .expect("the redeploy after post");
    assert_eq!(kubevirt_methods(client, ns).await, before);
    let chart = match change {
        Change::ChartDefault(methods) => chart_version(&methods),
        Change::OperatorValues(methods) => {
            let op = json!([{"op": "add", "path": "/spec/values/kubevirt/spec/workloadUpdateStrategy",
                             "value": {"workloadUpdateMethods": methods}}]);
            json_patch(client, "ManagedChart", ns, "harvester", op)
                .await
                .expect("the operator's values edit");
            chart
        }
    };
    fleet_deploy(client, ns, &chart)
        .await
        .expect("a change of the methods applies without conflict");
    assert_eq!(kubevirt_methods(client, ns).await, expected_after);
    assert_eq!(methods_owners(client, ns).await, ["helm/Apply"]);
    chart
}

/// Three cycles: a chart default change, an operator's values edit with the chart paused during
/// the upgrade (no redeploy between `pre` and `post`), and another chart change under the
/// operator's override.
#[tokio::test]
async fn three_upgrade_cycles_never_conflict_with_the_guard() {
    let client = admin().await;
    let (ns, mut chart) = helm_installed(&client, "lifetime").await;
    // (redeployed while suspended, the change, the methods after the cycle)
    for (redeploy, change, after) in [
        (
            true,
            Change::ChartDefault(json!(["LiveMigrate", "Evict"])),
            json!(["LiveMigrate", "Evict"]),
        ),
        (
            false,
            Change::OperatorValues(json!(["Evict"])),
            json!(["Evict"]),
        ),
        (
            true,
            Change::ChartDefault(json!(["LiveMigrate"])),
            json!(["Evict"]),
        ),
    ] {
        chart = cycle(&client, &ns, chart, redeploy, change, after).await;
    }
    // The operator's override survived the third cycle's restore of the values.
    let mc = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_eq!(
        mc["spec"]["values"]["kubevirt"]["spec"]["workloadUpdateStrategy"],
        json!({"workloadUpdateMethods": ["Evict"]})
    );
}

/// Clusters that went through the upstream scripts carry an `Update` claim of `kubectl-patch`
/// (harvester#10677) or `upgrade-toolkit` (harvester#10899) on the field; it blocks every chart
/// change of the field. A `pre`/`post` cycle heals it: `pre` takes the field over, `post`
/// releases it. The stale manager keeps its other fields. `status` names the blocking claim
/// before, and none after.
#[tokio::test]
async fn a_cycle_heals_stale_upstream_claims() {
    for manager in ["kubectl-patch", "upgrade-toolkit"] {
        heal(manager).await;
    }
}

async fn heal(manager: &str) {
    let client = admin().await;
    let (ns, _) = helm_installed(&client, "heal").await;
    for ops in [
        r#"[{"op":"replace","path":"/spec/workloadUpdateStrategy/workloadUpdateMethods","value":[]}]"#,
        r#"[{"op":"replace","path":"/spec/workloadUpdateStrategy/workloadUpdateMethods","value":["LiveMigrate"]},
            {"op":"add","path":"/metadata/labels/upstream","value":"patched"}]"#,
    ] {
        kubectl_patch_kubevirt(&ns, manager, ops);
    }
    assert_eq!(
        methods_owners(&client, &ns).await,
        [format!("{manager}/Update")]
    );
    let status = |ns: String| async move {
        let mut env = env_for(&ns, "status");
        env.insert("LOG_FORMAT".into(), "json".into());
        let run = run_bin(&control_plane().kubeconfig(), env).await;
        run.ok();
        let report: Value = serde_json::from_str(&run.stdout).unwrap();
        report["kubevirt"]["methodsOwners"].clone()
    };
    let owners = status(ns.clone()).await;
    assert_eq!(owners[0]["manager"], manager);
    assert_eq!(owners[0]["blocksChartChange"], true);
    // The claim blocks a chart change, as upstream saw.
    let next = chart_version(&json!(["LiveMigrate", "Evict"]));
    let err = fleet_deploy(&client, &ns, &next).await.unwrap_err();
    assert!(err.contains("conflict") && err.contains(manager), "{err}");
    phase_ok(&ns, "pre").await;
    assert_eq!(
        methods_owners(&client, &ns).await,
        ["workload-update-guard/Update"],
        "pre took the field over"
    );
    phase_ok(&ns, "post").await;
    assert_eq!(methods_owners(&client, &ns).await, Vec::<String>::new());
    assert_eq!(status(ns.clone()).await, json!([]));
    fleet_deploy(&client, &ns, &next)
        .await
        .expect("the chart change applies after the cycle");
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!(["LiveMigrate", "Evict"])
    );
    let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let stale: Vec<&Value> = kv["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["manager"] == manager)
        .collect();
    assert_eq!(
        stale[0]["fieldsV1"]["f:metadata"]["f:labels"],
        json!({"f:upstream": {}}),
        "{manager} keeps its other fields"
    );
}

/// A JSON Patch of the KubeVirt CR by `kubectl` as `manager` (an `Update`).
fn kubectl_patch_kubevirt(ns: &str, manager: &str, ops: &str) {
    let field_manager = format!("--field-manager={manager}");
    kubectl_ok(&[
        "-n",
        ns,
        "patch",
        "kubevirt",
        "kubevirt",
        "--type",
        "json",
        &field_manager,
        "-p",
        ops,
    ]);
}

pub(crate) use crate::support::as_compared;

async fn same_as_control(client: &kube::Client, control: &str, cycled: &str, when: &str) {
    for (kind, name) in [("KubeVirt", "kubevirt"), ("ManagedChart", "harvester")] {
        let a = as_compared(&get(client, kind, control, name).await, control);
        let b = as_compared(&get(client, kind, cycled, name).await, cycled);
        assert_eq!(
            b, a,
            "{kind} {when}: the cycled object (left) differs from the control"
        );
    }
}

/// Two Harvester-like installs side by side: a control that never sees the guard, and one
/// that goes through a `pre`/`post` cycle before every chart version, with and without a Fleet
/// redeploy while suspended. The chart keeps the field, changes it, drops it, and sets it again.
/// After each `post`, and after each chart version, both objects are the same as the
/// control's, `managedFields` included: the field goes back to Helm, so a chart that drops it
/// removes it on both.
#[tokio::test]
async fn a_cycled_install_stays_exactly_like_a_never_cycled_one() {
    let client = admin().await;
    let (control, mut chart) = helm_installed(&client, "control").await;
    let (cycled, _) = helm_installed(&client, "cycled").await;
    same_as_control(&client, &control, &cycled, "after install").await;
    let versions = [
        (Some(json!(["LiveMigrate"])), false),
        (Some(json!(["LiveMigrate", "Evict"])), true),
        (None, false),
        (None, true),
        (Some(json!(["LiveMigrate"])), true),
        (None, false),
    ];
    for (i, (next, redeploy)) in versions.into_iter().enumerate() {
        phase_ok(&cycled, "pre").await;
        if redeploy {
            fleet_deploy(&client, &cycled, &chart)
                .await
                .expect("a redeploy while suspended");
            assert_eq!(kubevirt_methods(&client, &cycled).await, json!([]));
        }
        phase_ok(&cycled, "post").await;
        same_as_control(&client, &control, &cycled, &format!("after post #{i}")).await;
        chart = match &next {
            Some(methods) => chart_version(methods),
            None => chart_without_methods(),
        };
        for ns in [&control, &cycled] {
            fleet_deploy(&client, ns, &chart)
                .await
                .unwrap_or_else(|e| panic!("chart #{i} ({next:?}) in {ns}: {e}"));
        }
        let methods = kubevirt_methods(&client, &cycled).await;
        assert_eq!(methods, next.clone().unwrap_or(Value::Null), "chart #{i}");
        same_as_control(&client, &control, &cycled, &format!("after chart #{i}")).await;
    }
}

/// An administrator changes the methods with `kubectl edit` (an `Update`) while suspended. The
/// claim makes every deploy of another value conflict (the upstream hazard, made by hand): the
/// upgrade's deploy of the chart while suspended, and after `post`, which keeps that choice and
/// restores the values, the next deploy. `post` warns and names the claim. The remedy it names,
/// a `pre`/`post` cycle, releases the claim: the choice stays, and the values decide again at the
/// next deploy.
#[tokio::test]
async fn a_kubectl_edit_while_suspended_is_named_and_a_cycle_releases_it() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "admin-edit").await;
    phase_ok(&ns, "pre").await;
    kubectl_patch_kubevirt(
        &ns,
        "kubectl-edit",
        r#"[{"op":"replace","path":"/spec/workloadUpdateStrategy/workloadUpdateMethods","value":["LiveMigrate","Evict"]}]"#,
    );
    let conflicts = || async {
        let err = fleet_deploy(&client, &ns, &chart).await.unwrap_err();
        assert!(
            err.contains("conflict") && err.contains("kubectl-edit"),
            "{err}"
        );
    };
    // The upgrade's own deploy of the chart (the values hold pre's `[]`) conflicts already.
    conflicts().await;
    let run = run_phase(&ns, "post").await;
    run.ok();
    let kept = json!(["LiveMigrate", "Evict"]);
    assert_eq!(kubevirt_methods(&client, &ns).await, kept);
    assert_eq!(methods_owners(&client, &ns).await, ["kubectl-edit/Update"]);
    let claim = update_claim_warning("kubectl-edit");
    assert!(
        run.warnings()
            .iter()
            .any(|w| w.starts_with(CHANGED_WHILE_SUSPENDED) && w.ends_with(&claim)),
        "{run:?}"
    );
    conflicts().await;
    phase_ok(&ns, "pre").await;
    phase_ok(&ns, "post").await;
    assert_eq!(kubevirt_methods(&client, &ns).await, kept, "still kept");
    assert_eq!(methods_owners(&client, &ns).await, Vec::<String>::new());
    fleet_deploy(&client, &ns, &chart)
        .await
        .expect("no conflict after the cycle");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    assert_eq!(methods_owners(&client, &ns).await, ["helm/Apply"]);
}
