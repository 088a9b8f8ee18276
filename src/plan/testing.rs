//! Shared by the rooms' unit tests: sample objects, the proptest strategies and small helpers.

pub use super::chart::*;
pub use super::json::*;
pub use super::kubevirt::*;
pub use super::order::*;
pub use super::records::*;
pub use crate::model::*;
pub use crate::vocabulary::*;
pub use proptest::prelude::*;
pub use serde_json::{Value, json};

pub fn kv() -> ObjectKey {
    ObjectKey {
        namespace: "harvester-system".into(),
        name: "kubevirt".into(),
    }
}

/// Applies a plan the way the API server would (the `test` op included).
pub fn apply(obj: &Value, plan: &Plan) -> Value {
    let mut doc = obj.clone();
    if let Some(p) = &plan.patch {
        json_patch::patch(&mut doc, p).expect("plan applies to the object it was planned from");
    }
    doc
}

pub fn ops(plan: &Plan) -> Value {
    serde_json::to_value(plan.patch.as_ref().expect("a patch")).unwrap()
}

pub fn pre_kv(obj: &Value) -> Value {
    apply(obj, &kubevirt_pre(obj, None).unwrap())
}
pub fn post_kv(obj: &Value, fallback: Option<&[String]>) -> Value {
    apply(obj, &kubevirt_post(obj, fallback, None, None).unwrap())
}
pub fn pre_chart(obj: &Value) -> Value {
    apply(obj, &chart_pre(obj, &kv(), &Steps::ALL, None).unwrap())
}
pub fn post_chart(obj: &Value) -> Value {
    apply(obj, &chart_post(obj, &kv(), &Steps::ALL).unwrap())
}

pub fn kubevirt(methods: Option<Value>) -> Value {
    let mut obj = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "harvester-system", "resourceVersion": "7"},
        "spec": {"workloadUpdateStrategy": {"batchEvictionSize": 10}},
    });
    if let Some(m) = methods {
        obj["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = m;
    }
    obj
}

pub fn chart(values: Value, compare: Option<Value>) -> Value {
    let mut obj = json!({
        "apiVersion": "management.cattle.io/v3", "kind": "ManagedChart",
        "metadata": {"name": "harvester", "namespace": "fleet-local", "resourceVersion": "42"},
        "spec": {"chart": "harvester", "values": values},
    });
    if let Some(c) = compare {
        obj["spec"]["diff"] = json!({"comparePatches": c});
    }
    obj
}

pub fn longhorn_entry() -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "name": "harvester-longhorn",
           "jsonPointers": ["/metadata/annotations"]})
}

pub fn fleet_redeploys_after_the_chart_write(kv0: &Value, chart0: &Value) -> (Value, Value) {
    let original = kubevirt_original(kv0).unwrap();
    let chart1 = apply(
        chart0,
        &chart_pre(chart0, &kv(), &Steps::ALL, Some(&original)).unwrap(),
    );
    let mut kv1 = kv0.clone();
    kv1["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!([]);
    kv1["metadata"]["resourceVersion"] = json!("8");
    (kv1, chart1)
}

// ---- property tests over random states ----

pub fn methods_strategy() -> impl Strategy<Value = Option<Value>> {
    let name = prop_oneof![Just("LiveMigrate"), Just("Evict")];
    prop_oneof![
        Just(None),
        proptest::collection::vec(name, 0..4).prop_map(|v| Some(json!(v))),
    ]
}

pub fn annotations_strategy() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(
            json!({"kubevirt.io/latest-observed-api-version": "v1"})
        )),
        Just(Some(
            json!({"a/b~c": "x", "field.cattle.io/description": "keep"})
        )),
    ]
}

prop_compose! {
    pub fn kubevirt_strategy()(
        methods in methods_strategy(),
        strategy_present in any::<bool>(),
        sibling in any::<bool>(),
        spec_present in any::<bool>(),
        spec_sibling in any::<bool>(),
        annotations in annotations_strategy(),
    ) -> Value {
        let mut obj = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                             "metadata": {"name": "kubevirt", "resourceVersion": "5"}});
        if let Some(a) = annotations { obj["metadata"]["annotations"] = a; }
        if spec_present || methods.is_some() || strategy_present {
            let mut spec = json!({});
            if spec_sibling { spec["configuration"] = json!({"developerConfiguration": {"featureGates": ["HotplugVolumes"]}}); }
            if strategy_present || methods.is_some() {
                let mut s = json!({});
                if sibling { s["batchEvictionSize"] = json!(10); s["batchEvictionInterval"] = json!("1m0s"); }
                if let Some(m) = methods { s["workloadUpdateMethods"] = m; }
                spec["workloadUpdateStrategy"] = s;
            }
            obj["spec"] = spec;
        }
        obj
    }
}

pub fn entry_strategy() -> impl Strategy<Value = Value> {
    let kv_entry = (
        prop_oneof![
            Just(None),
            Just(Some("")),
            Just(Some("harvester-system")),
            Just(Some("other-ns"))
        ],
        prop_oneof![Just("kubevirt"), Just("other")],
        prop_oneof![
            Just(None),
            Just(Some(json!([]))),
            Just(Some(json!([METHODS_POINTER]))),
            Just(Some(json!(["/spec/configuration", METHODS_POINTER]))),
            Just(Some(json!(["/spec/configuration"]))),
        ],
        any::<bool>(),
    )
        .prop_map(|(ns, name, pointers, ops)| {
            let mut e = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": name});
            if let Some(ns) = ns {
                e["namespace"] = json!(ns);
            }
            if let Some(p) = pointers {
                e["jsonPointers"] = p;
            }
            if ops {
                e["operations"] = json!([{"op": "remove", "path": "/spec/x"}]);
            }
            e
        });
    prop_oneof![
        Just(longhorn_entry()),
        Just(
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                    "name": "rancher-monitoring-admission", "operations": [{"op": "remove", "path": "/webhooks"}]})
        ),
        Just(
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "name": "volumes.longhorn.io", "jsonPointers": ["/status/acceptedNames", "/status/conditions"]})
        ),
        kv_entry,
    ]
}

pub fn leaf_strategy() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        methods_strategy(),
        Just(Some(json!("LiveMigrate"))),
        Just(Some(Value::Null))
    ]
}

prop_compose! {
    pub fn chart_strategy()(
        depth in 0usize..6,
        leaf in leaf_strategy(),
        siblings in proptest::collection::vec(any::<bool>(), 5),
        diff in prop_oneof![Just(0u8), Just(1), Just(2)],
        entries in proptest::collection::vec(entry_strategy(), 0..5),
        diff_sibling in any::<bool>(),
        annotations in annotations_strategy(),
        paused in any::<bool>(),
    ) -> Value {
        let mut obj = json!({"apiVersion": "management.cattle.io/v3", "kind": "ManagedChart",
                             "metadata": {"name": "harvester", "resourceVersion": "9"},
                             "spec": {"chart": "harvester", "paused": paused}});
        if let Some(a) = annotations { obj["metadata"]["annotations"] = a; }
        // Values nested to a random depth along the path, with siblings at each level.
        let keys = ["values", "kubevirt", "spec", "workloadUpdateStrategy"];
        let mut node = &mut obj["spec"];
        for (i, key) in keys.iter().enumerate().take(depth.min(4)) {
            node[*key] = json!({});
            node = &mut node[*key];
            if siblings[i] { node[format!("sibling{i}")] = json!({"keep": i}); }
        }
        if depth > 4 && let Some(l) = leaf { node["workloadUpdateMethods"] = l; }
        if diff >= 1 {
            obj["spec"]["diff"] = json!({});
            if diff_sibling { obj["spec"]["diff"]["other"] = json!(true); }
        }
        if diff == 2 { obj["spec"]["diff"]["comparePatches"] = json!(entries); }
        obj
    }
}

/// What `pre` may touch, removed: everything else must be equal.
pub fn untouched(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(a) = o
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.retain(|k, _| !k.starts_with(ANNOTATION_PREFIX));
        if a.is_empty() {
            o["metadata"].as_object_mut().unwrap().remove("annotations");
        }
    }
    if let Some(s) = o
        .pointer_mut("/spec/values/kubevirt/spec/workloadUpdateStrategy")
        .and_then(Value::as_object_mut)
    {
        s.remove("workloadUpdateMethods");
    }
    if let Some(list) = o
        .pointer_mut("/spec/diff/comparePatches")
        .and_then(Value::as_array_mut)
    {
        list.retain(|e| !entry_covers(e, &kv()));
    }
    prune_empty(&mut o);
    o
}

pub fn prune_empty(v: &mut Value) {
    if let Value::Object(m) = v {
        for child in m.values_mut() {
            prune_empty(child);
        }
        m.retain(|_, c| {
            !matches!(c, Value::Object(x) if x.is_empty())
                && !matches!(c, Value::Array(x) if x.is_empty())
        });
    }
}

// ---- the phase planner ----

pub fn intent(phase: Phase) -> Intent {
    Intent {
        phase,
        steps: Steps::ALL,
        keys: Keys {
            kubevirt: kv(),
            chart: Some(ObjectKey {
                namespace: "fleet-local".into(),
                name: "harvester".into(),
            }),
        },
        fallback: None,
    }
}

/// Every write of a phase applied in turn, as `phase::steps` does (minus the server's bookkeeping).
pub fn run_phase(phase: Phase, objects: &Objects) -> Objects {
    let intent = intent(phase);
    let mut now = objects.clone();
    for step in steps(&intent) {
        if let Some(plan) = plan_step(&intent, &step, &now).unwrap() {
            let obj = now.get(step.target.kind).unwrap();
            now.set(step.target.kind, Some(apply(obj, &plan)));
        }
    }
    now
}

pub fn kinds(steps: &[(Step, Plan)]) -> Vec<(Kind, Write)> {
    steps
        .iter()
        .map(|(s, _)| (s.target.kind, s.write))
        .collect()
}

// ---- the release of our field-manager claim ----

pub fn entry(manager: &str, operation: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "apiVersion": "kubevirt.io/v1",
           "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
}

pub fn methods_fields() -> Value {
    json!({"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}})
}

pub fn managed_fields_strategy() -> impl Strategy<Value = Vec<Value>> {
    let manager = prop_oneof![
        Just("helm"),
        Just("kubectl-patch"),
        Just("upgrade-toolkit"),
        Just(FIELD_MANAGER)
    ];
    let operation = prop_oneof![Just("Apply"), Just("Update")];
    let fields = prop_oneof![
        Just(methods_fields()),
        Just(json!({"f:spec": {"f:x": {}}})),
        Just(json!({"f:metadata": {"f:annotations": {"f:a": {}}}})),
        Just(json!({})),
    ];
    prop::collection::vec(
        (manager, operation, fields).prop_map(|(m, o, f)| entry(m, o, f)),
        0..6,
    )
}

/// The `fieldsV1` set holding only the field at `path`.
pub fn field_set(path: &[&str]) -> Value {
    path.iter()
        .rev()
        .fold(json!({}), |v, seg| json!({ format!("f:{seg}"): v }))
}

fn remove_field(set: &mut Value, fields: &[String]) {
    let Some(map) = set.as_object_mut() else {
        return;
    };
    match fields {
        [] => {}
        [leaf] => {
            map.remove(leaf);
        }
        [first, rest @ ..] => {
            if let Some(child) = map.get_mut(first) {
                remove_field(child, rest);
                // A map whose last owned child goes is no longer owned either (as the API
                // server does; seen on spec.diff).
                if child
                    .as_object()
                    .is_some_and(|m| m.keys().all(|k| k == "."))
                {
                    map.remove(first);
                }
            }
        }
    }
}

/// What the API server does to `managedFields` when an `Update` by `manager` turns `old` into
/// `new`, modelled for the field at `path` only: a changed value moves that field to the
/// writer's `Update` entry alone, and an entry left owning nothing is dropped.
pub fn server_update(old: &Value, new: &Value, manager: &str, path: &[&str]) -> Value {
    let mut out = new.clone();
    let (before, after) = (lookup(old, path).unwrap(), lookup(new, path).unwrap());
    if before == after {
        return out;
    }
    let fields: Vec<String> = path.iter().map(|s| format!("f:{s}")).collect();
    let mut entries = old["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for e in &mut entries {
        remove_field(&mut e["fieldsV1"], &fields);
    }
    entries.retain(|e| e["fieldsV1"].as_object().is_some_and(|m| !m.is_empty()));
    if after.is_some() {
        let set = field_set(path);
        match entries
            .iter_mut()
            .find(|e| e["manager"] == manager && e["operation"] == "Update")
        {
            Some(e) => merge_sets(&mut e["fieldsV1"], &set),
            None => entries.push(entry(manager, "Update", set)),
        }
    }
    out["metadata"]["managedFields"] = json!(entries);
    out
}

/// Applies a plan as the server would for `manager`'s `Update`, ownership of `path` included.
pub fn write_as_server(obj: &Value, plan: &Plan, path: &[&str]) -> Value {
    server_update(obj, &apply(obj, plan), FIELD_MANAGER, path)
}

/// `from`'s members added to the `fieldsV1` set `into`.
pub(crate) fn merge_sets(into: &mut Value, from: &Value) {
    if let (Some(a), Some(b)) = (into.as_object_mut(), from.as_object()) {
        for (k, v) in b {
            merge_sets(a.entry(k.clone()).or_insert(json!({})), v);
        }
    }
}
