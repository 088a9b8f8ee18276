//! A Harvester upgrade between the guard's two phases, on a control plane of its own: `pre` on the
//! old Kubernetes, the API server replaced by the new one on the same etcd, the next chart's
//! KubeVirt CR applied the way Helm 4 applies it, then `post`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;

use serde_json::{Value, json};

use super::*;

/// The Kubernetes pair of the upgrade; default v1.34 to v1.35, override with
/// `UPGRADE_FROM`/`UPGRADE_TO` (hack/test.sh runs each pair of `UPGRADE_PAIRS`).
pub fn upgrade_versions() -> (String, String) {
    let v = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    (v("UPGRADE_FROM", "v1.34.4"), v("UPGRADE_TO", "v1.35.4"))
}

/// The Harvester upgrade that goes with a Kubernetes upgrade from `from`: Harvester v1.6 runs
/// Kubernetes 1.33, v1.7 runs 1.34, v1.8 runs 1.35. The chart versions, and KubeVirt's versions
/// before and after, in the models' names.
#[derive(Debug, Clone, Copy)]
pub struct HarvesterPair {
    pub chart_from: &'static str,
    pub chart_to: &'static str,
    pub kubevirt_from: &'static str,
    pub kubevirt_to: &'static str,
}

pub fn harvester_pair(from: &str) -> HarvesterPair {
    match from.split('.').nth(1) {
        // Harvester v1.6 → v1.7 (path A: the guard is needed).
        Some("33") => HarvesterPair {
            chart_from: "1.6.0",
            chart_to: "1.7.0",
            kubevirt_from: "v1.5.0",
            kubevirt_to: "v1.6.0",
        },
        // Harvester v1.7 → v1.8 (path C).
        Some("34") => HarvesterPair {
            chart_from: "1.7.0",
            chart_to: "1.8.0",
            kubevirt_from: "v1.6.0",
            kubevirt_to: "v1.7.0",
        },
        _ => panic!("no Harvester release pairs with an upgrade from Kubernetes {from}"),
    }
}

const METHODS: &str = "/spec/workloadUpdateStrategy/workloadUpdateMethods";

/// The KubeVirt CR as the Harvester chart `version` renders it: the chart's template under the
/// ManagedChart's `values.kubevirt.spec`, merged the way Helm merges values (maps deeply, lists
/// replaced). 1.8.0 adds a feature gate and a rollout strategy to the template of 1.6.0 and
/// 1.7.0 (the model takes those two as one: they differ in nothing the guard touches).
pub fn render_kubevirt(ns: &str, version: &str, chart: &Value) -> Value {
    let mut gates = json!(["LiveMigration", "HotplugVolumes", "HostDevices"]);
    let mut spec = json!({
        "certificateRotateStrategy": {},
        "configuration": {"developerConfiguration": {"featureGates": null}},
        "workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"],
                                   "batchEvictionSize": 10, "batchEvictionInterval": "1m0s"}});
    let minor = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok());
    if minor.is_some_and(|m| m >= 8) {
        gates
            .as_array_mut()
            .unwrap()
            .push(json!("VMLiveUpdateFeatures"));
        spec["configuration"]["vmRolloutStrategy"] = json!("LiveUpdate");
    }
    spec["configuration"]["developerConfiguration"]["featureGates"] = gates;
    if let Some(values) = chart.pointer("/spec/values/kubevirt/spec") {
        merge_values(&mut spec, values);
    }
    json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
           "metadata": {"name": "kubevirt", "namespace": ns}, "spec": spec})
}

fn merge_values(dst: &mut Value, src: &Value) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                match d.get_mut(k) {
                    Some(existing) => merge_values(existing, v),
                    None => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (d, s) => *d = s.clone(),
    }
}

/// Helm 4's install/upgrade of one object: server-side apply, field manager `helm`, no force.
pub fn helm_apply(cp: &ControlPlane, obj: &Value) -> Result<(), String> {
    let mut child = cp
        .kubectl()
        .args([
            "apply",
            "--server-side",
            "--field-manager",
            "helm",
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), obj).unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into())
    }
}

/// `fieldsV1` of `manager`'s entry for `operation` (Apply or Update).
pub fn fields_of(obj: &Value, manager: &str, operation: &str) -> Option<Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|m| m["manager"] == manager && m["operation"] == operation)
        .map(|m| m["fieldsV1"].clone())
}

pub fn managers(obj: &Value) -> BTreeSet<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str().map(String::from))
        .collect()
}

/// The whole upgrade. With `kill_pre_after` (a failpoint name; needs the `failpoints` feature),
/// the first `pre` is SIGKILLed right after that write, the API server is upgraded anyway, and
/// `pre` runs again on the new version before the chart is applied.
pub async fn harvester_upgrade(kill_pre_after: Option<&str>) {
    let (from, to) = upgrade_versions();
    let pair = harvester_pair(&from);
    let mut cp = ControlPlane::up(&[("KUBE_VERSION", &from)]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cp.server_version(), from);
    let client = client_for(&cp.kubeconfig()).await;
    let ns = namespace(&client, "upgrade").await;
    let env = |phase: &str| -> BTreeMap<String, String> { env_for(&ns, phase) };

    // The old Harvester: the ManagedChart, and the KubeVirt CR that Helm installed from its chart.
    let mut chart0 = harvester_chart(&ns);
    chart0["spec"]["version"] = json!(pair.chart_from);
    let chart0 = create(&client, "ManagedChart", &ns, chart0).await;
    helm_apply(&cp, &render_kubevirt(&ns, pair.chart_from, &chart0)).expect("helm install");
    set_status(
        &client,
        "KubeVirt",
        &ns,
        "kubevirt",
        json!({"phase": "Deployed", "observedKubeVirtVersion": pair.kubevirt_from,
               "targetKubeVirtVersion": pair.kubevirt_to, "outdatedVirtualMachineInstanceWorkloads": 3}),
    )
    .await;
    let kv0 = get(&client, "KubeVirt", &ns, "kubevirt").await;
    assert_eq!(kv0.pointer(METHODS), Some(&json!(["LiveMigrate"])));

    // pre on the old version (killed after a write, in the reliability variant).
    if let Some(point) = kill_pre_after {
        let mut killed = env("pre");
        killed.insert("FAILPOINTS".into(), format!("{point}=return"));
        let run = cp.run(killed).await;
        assert_eq!(run.code, -1, "killed by the failpoint {point}: {run:?}");
    } else {
        let run = cp.run(env("pre")).await;
        assert_eq!(run.code, 0, "{run:?}");
    }
    let kv_pre = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let chart_pre = get(&client, "ManagedChart", &ns, "harvester").await;

    // The Kubernetes upgrade: the old API server stops, the new one starts on the same etcd.
    cp.stop_apiserver();
    cp.start_apiserver(&to);
    assert_eq!(cp.server_version(), to);
    let client = client_for(&cp.kubeconfig()).await;
    let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let chart = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_eq!(
        (rv(&kv), rv(&chart)),
        (rv(&kv_pre), rv(&chart_pre)),
        "same etcd, same objects"
    );

    if kill_pre_after.is_some() {
        let run = cp.run(env("pre")).await;
        assert_eq!(run.code, 0, "pre rerun on {to}: {run:?}");
    }
    let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let chart = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_eq!(kv.pointer(METHODS), Some(&json!([])), "suspended");
    assert_eq!(
        chart.pointer(&format!("/spec/values/kubevirt{METHODS}")),
        Some(&json!([])),
        "the values override"
    );

    // The new Harvester: the upgrade controller moves the ManagedChart to the next chart, and Helm
    // applies that chart's KubeVirt CR, rendered with the values override (methods []).
    json_patch(
        &client,
        "ManagedChart",
        &ns,
        "harvester",
        json!([{"op": "replace", "path": "/spec/version", "value": pair.chart_to}]),
    )
    .await
    .expect("bump the chart");
    let chart = get(&client, "ManagedChart", &ns, "harvester").await;
    let next = render_kubevirt(&ns, pair.chart_to, &chart);
    assert_eq!(next.pointer(METHODS), Some(&json!([])));
    helm_apply(&cp, &next).expect("Helm 4's apply of the next chart meets no conflict");
    let kv_applied = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let helm_fields = fields_of(&kv_applied, "helm", "Apply").expect("helm's entry");

    // post on the new version: both objects exactly as before pre, plus what the upgrade changed.
    let post = cp.run(env("post")).await;
    assert_eq!(post.code, 0, "{post:?}");
    let kv1 = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let chart1 = get(&client, "ManagedChart", &ns, "harvester").await;
    let mut want_kv = render_kubevirt(&ns, pair.chart_to, &chart0);
    want_kv["metadata"] = content(&kv0)["metadata"].clone();
    want_kv["status"] = kv0["status"].clone();
    assert_eq!(content(&kv1), want_kv, "the KubeVirt CR");
    let mut want_chart = content(&chart0);
    want_chart["spec"]["version"] = json!(pair.chart_to);
    assert_eq!(content(&chart1), want_chart, "the ManagedChart");

    // managedFields: Helm keeps every field it applied, the methods included (post gave them
    // back), and no manager appears but the ones before, the guard and the upgrade controller.
    assert_eq!(
        fields_of(&kv1, "helm", "Apply"),
        Some(helm_fields.clone()),
        "{:#}",
        kv1["metadata"]["managedFields"]
    );
    let known: BTreeSet<String> = managers(&kv0)
        .into_iter()
        .chain(managers(&chart0))
        .chain(["workload-update-guard".into(), "another-writer".into()])
        .collect();
    for obj in [&kv1, &chart1] {
        assert!(
            managers(obj).is_subset(&known),
            "{:?} not within {known:?}",
            managers(obj)
        );
    }

    // A second post is a no-op.
    let again = cp.run(env("post")).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.outcomes(), ["unchanged", "unchanged"]);
    assert_eq!(
        rv(&get(&client, "KubeVirt", &ns, "kubevirt").await),
        rv(&kv1)
    );
    assert_eq!(
        rv(&get(&client, "ManagedChart", &ns, "harvester").await),
        rv(&chart1)
    );

    // Helm's next reconcile, now without the override, agrees with the restored methods.
    let settled = render_kubevirt(&ns, pair.chart_to, &chart1);
    assert_eq!(settled.pointer(METHODS), kv0.pointer(METHODS));
    helm_apply(&cp, &settled).expect("Helm's apply after post meets no conflict");
    assert_eq!(
        content(&get(&client, "KubeVirt", &ns, "kubevirt").await)["spec"],
        want_kv["spec"]
    );
    cp.down();
}
