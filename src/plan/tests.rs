use super::*;
use crate::model::{ANNOTATION_PREFIX, METHODS_FIELD};
use proptest::prelude::*;
use serde_json::json;

fn kv() -> ObjectKey {
    ObjectKey {
        namespace: "harvester-system".into(),
        name: "kubevirt".into(),
    }
}

/// Applies a plan the way the API server would (the `test` op included).
fn apply(obj: &Value, plan: &Plan) -> Value {
    let mut doc = obj.clone();
    if let Some(p) = &plan.patch {
        json_patch::patch(&mut doc, p).expect("plan applies to the object it was planned from");
    }
    doc
}

fn ops(plan: &Plan) -> Value {
    serde_json::to_value(plan.patch.as_ref().expect("a patch")).unwrap()
}

fn pre_kv(obj: &Value) -> Value {
    apply(obj, &kubevirt_pre(obj, None).unwrap())
}
fn post_kv(obj: &Value, fallback: Option<&[String]>) -> Value {
    apply(obj, &kubevirt_post(obj, fallback, None).unwrap())
}
fn pre_chart(obj: &Value) -> Value {
    apply(obj, &chart_pre(obj, &kv(), &Steps::ALL, None).unwrap())
}
fn post_chart(obj: &Value) -> Value {
    apply(obj, &chart_post(obj, &kv(), &Steps::ALL).unwrap())
}

fn kubevirt(methods: Option<Value>) -> Value {
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

#[test]
fn pre_sets_empty_list_and_records_original_in_one_conditional_patch() {
    let obj = kubevirt(Some(json!(["LiveMigrate", "Evict"])));
    let plan = kubevirt_pre(&obj, None).unwrap();
    assert_eq!(
        ops(&plan),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "add", "path": "/spec/workloadUpdateStrategy/workloadUpdateMethods", "value": []},
            {"op": "add", "path": "/metadata/annotations",
             "value": {KUBEVIRT_RECORD: r#"{"present":true,"value":["LiveMigrate","Evict"]}"#}},
        ])
    );
    let after = apply(&obj, &plan);
    // Never [Evict]: that would evict every outdated VM.
    assert_eq!(
        after["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
        json!([])
    );
    assert_eq!(
        after["spec"]["workloadUpdateStrategy"]["batchEvictionSize"],
        json!(10)
    );
}

#[test]
fn pre_records_an_absent_field_and_the_parents_it_creates() {
    let obj = json!({"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}, "spec": {}});
    let after = pre_kv(&obj);
    assert_eq!(
        after["spec"],
        json!({"workloadUpdateStrategy": {"workloadUpdateMethods": []}})
    );
    let record: ValueRecord = read_record(&after, KUBEVIRT_RECORD).unwrap().unwrap();
    assert_eq!(
        record,
        ValueRecord {
            present: false,
            value: None,
            created_parents: vec!["/spec/workloadUpdateStrategy".into()]
        }
    );
    assert_eq!(post_kv(&after, None), obj);
}

#[test]
fn pre_on_an_empty_list_still_records_it_so_post_does_not_apply_the_fallback() {
    let obj = kubevirt(Some(json!([])));
    let after = pre_kv(&obj);
    assert_eq!(after["spec"], obj["spec"]);
    let fallback = vec!["LiveMigrate".to_string()];
    assert_eq!(post_kv(&after, Some(&fallback)), obj);
}

#[test]
fn second_pre_keeps_the_first_record() {
    let obj = kubevirt(Some(json!(["LiveMigrate"])));
    let once = pre_kv(&obj);
    assert_eq!(kubevirt_pre(&once, None).unwrap().patch, None);
    // Something put LiveMigrate back in between: pre suspends again but keeps the first record.
    let mut reverted = once.clone();
    reverted["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!(["LiveMigrate"]);
    let again = pre_kv(&reverted);
    assert_eq!(again, once);
}

#[test]
fn post_without_record_changes_nothing_unless_fallback_and_empty() {
    let fallback = vec!["LiveMigrate".to_string()];
    for m in [None, Some(json!(["Evict"])), Some(json!(["LiveMigrate"]))] {
        let obj = kubevirt(m);
        assert_eq!(
            kubevirt_post(&obj, Some(&fallback), None).unwrap().patch,
            None
        );
    }
    // An [] that someone else set (an administrator, or the original an earlier post restored).
    let mut obj = kubevirt(Some(json!([])));
    obj["metadata"]["managedFields"] = json!([{"manager": "kubectl-patch", "operation": "Update",
        "fieldsV1": {"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}}}]);
    assert_eq!(
        kubevirt_post(&obj, Some(&fallback), None).unwrap().patch,
        None
    );
    // Our [] whose record was lost: the fallback applies.
    obj["metadata"]["managedFields"][0]["manager"] = json!(FIELD_MANAGER);
    assert_eq!(kubevirt_post(&obj, None, None).unwrap().patch, None);
    let restored = post_kv(&obj, Some(&fallback));
    assert_eq!(
        restored["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
        json!(["LiveMigrate"])
    );
}

#[test]
fn malformed_objects_are_refused_with_a_clear_message() {
    let cases = [
        (
            kubevirt(Some(json!("LiveMigrate"))),
            "workloadUpdateMethods is not a list",
        ),
        (
            kubevirt(Some(json!([1]))),
            "workloadUpdateMethods is not a list",
        ),
        (
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"workloadUpdateStrategy": 3}}),
            "spec.workloadUpdateStrategy is not a map",
        ),
        (
            json!({"metadata": {}, "spec": {}}),
            "resourceVersion is missing",
        ),
        (
            json!({"metadata": {"resourceVersion": "1", "annotations": {KUBEVIRT_RECORD: "{oops"}}}),
            "is corrupted",
        ),
        (
            json!({"metadata": {"resourceVersion": "1", "annotations": {KUBEVIRT_RECORD: r#"{"present":true}"#}}}),
            "is corrupted",
        ),
        (
            json!({"metadata": {"resourceVersion": "1", "annotations": {KUBEVIRT_RECORD: r#"{"present":true,"value":["x",2]}"#}}}),
            "is corrupted",
        ),
        (
            json!({"metadata": {"resourceVersion": "1", "annotations": "x"}}),
            "annotations is not a map",
        ),
        (json!([]), "not a JSON map"),
    ];
    for (obj, want) in cases {
        for err in [
            kubevirt_pre(&obj, None).unwrap_err(),
            kubevirt_post(&obj, None, None).unwrap_err(),
        ] {
            assert!(
                err.0.contains(want),
                "{obj}: {err} does not mention {want:?}"
            );
            assert!(!err.0.contains('\n'), "one line: {err}");
        }
    }
    let chart_cases = [
        (
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"values": {"kubevirt": []}}}),
            "spec.values.kubevirt is not a map",
        ),
        (
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"values": {"kubevirt": {"spec": "x"}}}}),
            "spec.values.kubevirt.spec is not a map",
        ),
        (
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"diff": {"comparePatches": {}}}}),
            "comparePatches is not a list",
        ),
        (
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"diff": []}}),
            "spec.diff is not a map",
        ),
        (
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"diff": {"comparePatches": [
            {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt", "jsonPointers": "x"}]}}}),
            "jsonPointers is not a list",
        ),
        (
            json!({"metadata": {"resourceVersion": "1", "annotations": {COMPARE_RECORD: r#"{"added":"everything"}"#}}, "spec": {}}),
            "is corrupted",
        ),
        (
            json!({"metadata": {"resourceVersion": "1", "annotations": {VALUES_RECORD: "absent"}}, "spec": {}}),
            "is corrupted",
        ),
    ];
    for (obj, want) in chart_cases {
        let err = chart_pre(&obj, &kv(), &Steps::ALL, None).unwrap_err();
        assert!(
            err.0.contains(want),
            "{obj}: {err} does not mention {want:?}"
        );
        // post only inspects what it has a record of.
        if !want.contains("jsonPointers") {
            let err = chart_post(&obj, &kv(), &Steps::ALL).unwrap_err();
            assert!(
                err.0.contains(want),
                "{obj}: {err} does not mention {want:?}"
            );
        }
    }
}

fn chart(values: Value, compare: Option<Value>) -> Value {
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

fn longhorn_entry() -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "name": "harvester-longhorn",
           "jsonPointers": ["/metadata/annotations"]})
}

#[test]
fn chart_pre_appends_an_entry_and_overrides_values_in_one_patch() {
    let obj = chart(
        json!({"kubevirt": {"spec": {"configuration": {"x": 1}}}}),
        Some(json!([longhorn_entry()])),
    );
    let plan = chart_pre(&obj, &kv(), &Steps::ALL, None).unwrap();
    assert_eq!(
        ops(&plan),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "add", "path": "/spec/values/kubevirt/spec/workloadUpdateStrategy",
             "value": {"workloadUpdateMethods": []}},
            {"op": "add", "path": "/metadata/annotations", "value": {VALUES_RECORD:
              r#"{"present":false,"createdParents":["/spec/values/kubevirt/spec/workloadUpdateStrategy"]}"#}},
            {"op": "add", "path": "/spec/diff/comparePatches/-", "value": {
              "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt",
              "namespace": "harvester-system", "jsonPointers": [METHODS_POINTER]}},
            {"op": "add", "path": "/metadata/annotations/workload-update-guard.harvesterhci.io~1compare-patch",
             "value": r#"{"added":"entry","object":{"apiVersion":"kubevirt.io/v1","kind":"KubeVirt","namespace":"harvester-system","name":"kubevirt"},"pointer":"/spec/workloadUpdateStrategy/workloadUpdateMethods"}"#},
        ])
    );
    let after = apply(&obj, &plan);
    assert_eq!(after["spec"]["diff"]["comparePatches"][0], longhorn_entry());
    assert_eq!(post_chart(&after), obj);
}

#[test]
fn chart_pre_appends_to_an_existing_entry_for_the_same_object() {
    for ns in [json!(""), json!("harvester-system"), Value::Null] {
        let mut entry = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt",
                               "jsonPointers": ["/spec/configuration"]});
        if !ns.is_null() {
            entry["namespace"] = ns.clone();
        }
        let named = match ns.as_str() {
            Some("harvester-system") => "harvester-system",
            _ => "*",
        };
        let obj = chart(json!({}), Some(json!([longhorn_entry(), entry])));
        let plan = chart_pre(&obj, &kv(), &Steps::ALL, None).unwrap();
        let said = format!(
            "appended our pointer to the comparePatches entry for KubeVirt {named}/kubevirt"
        );
        assert!(plan.actions.contains(&said), "{:?}", plan.actions);
        let after = apply(&obj, &plan);
        let list = after["spec"]["diff"]["comparePatches"].as_array().unwrap();
        assert_eq!(list.len(), 2, "no second entry");
        assert_eq!(
            list[1]["jsonPointers"],
            json!(["/spec/configuration", METHODS_POINTER])
        );
        assert_eq!(post_chart(&after), obj);
    }
}

#[test]
fn a_preexisting_pointer_is_left_in_place_by_post() {
    let entry = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt",
                       "namespace": "harvester-system", "jsonPointers": [METHODS_POINTER]});
    let obj = chart(json!({}), Some(json!([entry])));
    let after = pre_chart(&obj);
    assert_eq!(after["spec"]["diff"], obj["spec"]["diff"]);
    let restored = post_chart(&after);
    assert_eq!(restored, obj);
}

#[test]
fn entries_for_other_objects_do_not_cover_ours() {
    let others = [
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "other", "jsonPointers": [METHODS_POINTER]}),
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt", "namespace": "kubevirt", "jsonPointers": [METHODS_POINTER]}),
        json!({"apiVersion": "kubevirt.io/v1alpha3", "kind": "KubeVirt", "name": "kubevirt", "jsonPointers": [METHODS_POINTER]}),
    ];
    for other in others {
        let obj = chart(json!({}), Some(json!([other.clone()])));
        let after = pre_chart(&obj);
        assert_eq!(
            after["spec"]["diff"]["comparePatches"]
                .as_array()
                .unwrap()
                .len(),
            2,
            "{other}"
        );
        assert_eq!(after["spec"]["diff"]["comparePatches"][0], other);
        assert_eq!(post_chart(&after), obj);
    }
}

#[test]
fn post_keeps_pointers_others_added_to_our_entry() {
    let obj = chart(json!({}), None);
    let mut after = pre_chart(&obj);
    after["spec"]["diff"]["comparePatches"][0]["jsonPointers"]
        .as_array_mut()
        .unwrap()
        .push(json!("/spec/configuration"));
    after["spec"]["diff"]["comparePatches"]
        .as_array_mut()
        .unwrap()
        .push(longhorn_entry());
    let restored = post_chart(&after);
    assert_eq!(
        restored["spec"]["diff"]["comparePatches"],
        json!([
            {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt",
             "namespace": "harvester-system", "jsonPointers": ["/spec/configuration"]},
            longhorn_entry(),
        ])
    );
    assert!(restored["metadata"].get("annotations").is_none());
}

#[test]
fn switches_limit_the_chart_plan_to_the_enabled_steps() {
    let obj = chart(json!({}), None);
    let only_values = apply(
        &obj,
        &chart_pre(
            &obj,
            &kv(),
            &Steps {
                compare: false,
                ..Steps::ALL
            },
            None,
        )
        .unwrap(),
    );
    assert!(only_values["spec"].get("diff").is_none());
    let only_compare = apply(
        &obj,
        &chart_pre(
            &obj,
            &kv(),
            &Steps {
                values: false,
                ..Steps::ALL
            },
            None,
        )
        .unwrap(),
    );
    assert_eq!(only_compare["spec"]["values"], json!({}));
    assert_eq!(
        chart_pre(
            &obj,
            &kv(),
            &Steps {
                values: false,
                compare: false,
                kubevirt: true
            },
            None
        )
        .unwrap()
        .patch,
        None
    );
}

#[test]
fn a_corrupted_copy_on_the_chart_is_refused() {
    let obj = json!({"metadata": {"resourceVersion": "1", "annotations": {KUBEVIRT_COPY: r#"{"present":true,"value":"x"}"#}}, "spec": {}});
    let original = kubevirt_original(&kubevirt(None)).unwrap();
    for err in [
        chart_pre(&obj, &kv(), &Steps::ALL, Some(&original)).unwrap_err(),
        chart_post(&obj, &kv(), &Steps::ALL).unwrap_err(),
        kubevirt_copy(&obj).unwrap_err(),
    ] {
        assert!(
            err.0.contains(KUBEVIRT_COPY) && err.0.contains("corrupted"),
            "{err}"
        );
    }
}

/// Hazard: the Job is killed after the ManagedChart write, and Fleet re-renders the KubeVirt CR
/// with the new values (`[]`) before the rerun. The ManagedChart's copy still has the original.
#[test]
fn a_fleet_redeploy_between_the_writes_loses_no_original() {
    for original in [Some(json!(["LiveMigrate", "Evict"])), Some(json!([])), None] {
        let kv0 = kubevirt(original.clone());
        let chart0 = chart(json!({}), Some(json!([longhorn_entry()])));
        let (kv1, chart1) = fleet_redeploys_after_the_chart_write(&kv0, &chart0);
        assert_eq!(methods(&kv1).unwrap(), Some(json!([])));
        let copy = kubevirt_copy(&chart1).unwrap();
        // Either a rerun of pre, then post; or post straight away.
        let kv2 = apply(&kv1, &kubevirt_pre(&kv1, copy.as_ref()).unwrap());
        let record: ValueRecord = read_record(&kv2, KUBEVIRT_RECORD).unwrap().unwrap();
        assert_eq!(record.value, original, "the record is the true original");
        for kv in [kv2, kv1] {
            let restored = apply(&kv, &kubevirt_post(&kv, None, copy.as_ref()).unwrap());
            assert_eq!(methods(&restored).unwrap(), original);
        }
        assert_eq!(post_chart(&chart1), chart0);
    }
}

/// `pre`'s ManagedChart write, then a Helm render of the CR from the new values (methods `[]`).
fn fleet_redeploys_after_the_chart_write(kv0: &Value, chart0: &Value) -> (Value, Value) {
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

fn methods_strategy() -> impl Strategy<Value = Option<Value>> {
    let name = prop_oneof![Just("LiveMigrate"), Just("Evict")];
    prop_oneof![
        Just(None),
        proptest::collection::vec(name, 0..4).prop_map(|v| Some(json!(v))),
    ]
}

fn annotations_strategy() -> impl Strategy<Value = Option<Value>> {
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
    fn kubevirt_strategy()(
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

fn entry_strategy() -> impl Strategy<Value = Value> {
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

fn leaf_strategy() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        methods_strategy(),
        Just(Some(json!("LiveMigrate"))),
        Just(Some(Value::Null))
    ]
}

prop_compose! {
    fn chart_strategy()(
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
fn untouched(obj: &Value) -> Value {
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

fn prune_empty(v: &mut Value) {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn kubevirt_post_pre_is_identity(s in kubevirt_strategy()) {
        let after = pre_kv(&s);
        prop_assert_eq!(&after["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"], &json!([]));
        prop_assert_eq!(post_kv(&after, None), s.clone());
        // A configured fallback never overrides a record.
        prop_assert_eq!(post_kv(&after, Some(&["LiveMigrate".to_string()])), s);
    }

    #[test]
    fn kubevirt_pre_and_post_are_idempotent(s in kubevirt_strategy()) {
        let once = pre_kv(&s);
        prop_assert_eq!(kubevirt_pre(&once, None).unwrap().patch, None);
        let restored = post_kv(&once, None);
        prop_assert_eq!(kubevirt_post(&restored, None, None).unwrap().patch, None);
    }

    #[test]
    fn kubevirt_pre_touches_only_methods_and_records(s in kubevirt_strategy()) {
        let mut a = pre_kv(&s);
        let mut b = s.clone();
        for o in [&mut a, &mut b] {
            if let Some(st) = o.pointer_mut("/spec/workloadUpdateStrategy").and_then(Value::as_object_mut) {
                st.remove("workloadUpdateMethods");
            }
        }
        prop_assert_eq!(untouched(&a), untouched(&b));
    }

    #[test]
    fn chart_post_pre_is_identity(s in chart_strategy()) {
        let after = pre_chart(&s);
        prop_assert_eq!(&after["spec"]["values"]["kubevirt"]["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"], &json!([]));
        prop_assert!(find_pointer(compare_list(&after).unwrap(), &kv()).unwrap().is_some());
        prop_assert_eq!(post_chart(&after), s);
    }

    #[test]
    fn chart_pre_and_post_are_idempotent(s in chart_strategy()) {
        let once = pre_chart(&s);
        prop_assert_eq!(chart_pre(&once, &kv(), &Steps::ALL, None).unwrap().patch, None);
        let restored = post_chart(&once);
        prop_assert_eq!(chart_post(&restored, &kv(), &Steps::ALL).unwrap().patch, None);
    }

    #[test]
    fn chart_pre_never_changes_other_entries_or_fields(s in chart_strategy()) {
        let after = pre_chart(&s);
        prop_assert_eq!(untouched(&after), untouched(&s));
        // Entries that do not cover our object keep their order and content.
        let others = |o: &Value| -> Vec<Value> {
            compare_list(o).unwrap().map(|l| l.iter().filter(|e| !entry_covers(e, &kv())).cloned().collect()).unwrap_or_default()
        };
        prop_assert_eq!(others(&after), others(&s));
    }

    #[test]
    fn a_full_run_restores_both_objects_even_if_fleet_redeploys_in_between(
        kv0 in kubevirt_strategy(),
        chart0 in chart_strategy(),
        redeploy in any::<bool>(),
        rerun_pre in any::<bool>(),
    ) {
        let start = Objects { kubevirt: Some(kv0.clone()), chart: Some(chart0.clone()) };
        // pre: the ManagedChart (with the copy) first; maybe the run is killed right after it
        // and Fleet re-renders the CR from the new values before the rerun.
        let mut now = if redeploy {
            let (kv1, chart1) = fleet_redeploys_after_the_chart_write(&kv0, &chart0);
            Objects { kubevirt: Some(kv1), chart: Some(chart1) }
        } else {
            run_phase(Phase::Pre, &start)
        };
        prop_assert!(kubevirt_copy(now.chart.as_ref().unwrap()).unwrap().is_some());
        if rerun_pre {
            now = run_phase(Phase::Pre, &now);
            prop_assert_eq!(methods(now.kubevirt.as_ref().unwrap()).unwrap(), Some(json!([])));
        }
        // post: KubeVirt, then ManagedChart.
        let end = run_phase(Phase::Post, &now);
        prop_assert_eq!(methods(end.kubevirt.as_ref().unwrap()).unwrap(), methods(&kv0).unwrap());
        prop_assert_eq!(end.chart.as_ref(), Some(&chart0));
        if !redeploy {
            prop_assert_eq!(end.kubevirt.as_ref(), Some(&kv0));
        }
        // post twice equals post once.
        prop_assert_eq!(run_phase(Phase::Post, &end), end);
    }

    #[test]
    fn others_changes_between_pre_and_post_survive(s in chart_strategy(), extra in entry_strategy()) {
        let mut after = pre_chart(&s);
        // Someone else appends an entry and an annotation while the upgrade runs.
        if let Some(list) = after.pointer_mut("/spec/diff/comparePatches").and_then(Value::as_array_mut) {
            list.push(extra.clone());
        }
        after["metadata"]["annotations"]["someone/else"] = json!("x");
        let restored = post_chart(&after);
        let list = compare_list(&restored).unwrap().cloned().unwrap_or_default();
        prop_assert!(list.contains(&extra));
        prop_assert_eq!(&restored["metadata"]["annotations"]["someone/else"], &json!("x"));
    }
}

// ---- the phase planner ----

fn intent(phase: Phase) -> Intent {
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

/// Every write of a phase applied in turn, as `phases` does (minus the server's bookkeeping).
fn run_phase(phase: Phase, objects: &Objects) -> Objects {
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

fn kinds(steps: &[(Step, Plan)]) -> Vec<(Kind, Write)> {
    steps
        .iter()
        .map(|(s, _)| (s.target.kind, s.write))
        .collect()
}

#[test]
fn the_phases_write_in_the_documented_order() {
    let both = Objects {
        kubevirt: Some(kubevirt(Some(json!(["LiveMigrate"])))),
        chart: Some(chart(json!({}), None)),
    };
    let pre = plan_phase(&intent(Phase::Pre), &both).unwrap();
    assert_eq!(
        kinds(&pre),
        [
            (Kind::ManagedChart, Write::Change),
            (Kind::KubeVirt, Write::Change)
        ]
    );
    assert!(pre.iter().all(|(_, p)| p.patch.is_some()));
    // The CR's plan already sees the copy that the ManagedChart's plan writes.
    assert!(
        pre[0].1.actions.iter().any(|a| a.contains("copied")),
        "{:?}",
        pre[0].1.actions
    );
    let post = plan_phase(&intent(Phase::Post), &run_phase(Phase::Pre, &both)).unwrap();
    assert_eq!(
        kinds(&post),
        [
            (Kind::KubeVirt, Write::Change),
            (Kind::KubeVirt, Write::Release),
            (Kind::ManagedChart, Write::Change),
            (Kind::ManagedChart, Write::Release),
        ]
    );
    assert!(
        plan_phase(&intent(Phase::Status), &both)
            .unwrap()
            .is_empty()
    );
    // A missing object has no step; switched-off steps have none either.
    let only_kv = Objects {
        chart: None,
        ..both.clone()
    };
    assert_eq!(
        kinds(&plan_phase(&intent(Phase::Pre), &only_kv).unwrap()),
        [(Kind::KubeVirt, Write::Change)]
    );
    let mut no_chart = intent(Phase::Post);
    no_chart.steps = Steps {
        values: false,
        compare: false,
        kubevirt: true,
    };
    assert_eq!(targets(&no_chart).len(), 1);
    no_chart.steps = Steps {
        kubevirt: false,
        ..Steps::ALL
    };
    assert_eq!(
        targets(&no_chart)
            .iter()
            .map(|t| t.kind)
            .collect::<Vec<_>>(),
        [Kind::ManagedChart]
    );
}

#[test]
fn a_malformed_object_refuses_the_whole_phase_and_names_it() {
    let good_kv = kubevirt(Some(json!(["LiveMigrate"])));
    let good_chart = chart(json!({}), None);
    let bad_kv = kubevirt(Some(json!("LiveMigrate")));
    let mut bad_chart = good_chart.clone();
    bad_chart["metadata"]["annotations"] = json!({KUBEVIRT_COPY: "{"});
    for phase in [Phase::Pre, Phase::Post] {
        for (kv_obj, chart_obj, at_fault) in [
            (&bad_kv, &good_chart, Kind::KubeVirt),
            (&good_kv, &bad_chart, Kind::ManagedChart),
        ] {
            let objects = Objects {
                kubevirt: Some(kv_obj.clone()),
                chart: Some(chart_obj.clone()),
            };
            let err = plan_phase(&intent(phase), &objects).unwrap_err();
            assert_eq!(err.target.kind, at_fault, "{phase:?}: {err}");
            assert!(!err.to_string().contains('\n'));
        }
    }
}

#[test]
fn restore_source_precedence() {
    let live = json!(["LiveMigrate"]);
    let copy = value_record(Some(json!(["Evict"])), Vec::new());
    let fallback = ["LiveMigrate".to_string(), "Evict".to_string()];
    let mut ours = kubevirt(Some(json!([])));
    ours["metadata"]["managedFields"] = json!([
        {"manager": "helm", "operation": "Apply", "fieldsV1": {"f:spec": {}}},
        {"manager": FIELD_MANAGER, "operation": "Update",
         "fieldsV1": {"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}}},
    ]);
    let recorded = pre_kv(&kubevirt(Some(live.clone())));
    let mut changed = recorded.clone();
    changed["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!(["Evict"]);
    let (on, absent, theirs) = (
        kubevirt(Some(live.clone())),
        kubevirt(None),
        kubevirt(Some(json!([]))),
    );
    type Case<'a> = (
        &'a Value,
        Option<&'a ValueRecord>,
        Option<&'a [String]>,
        Source,
    );
    let cases: Vec<Case> = vec![
        (&recorded, Some(&copy), Some(&fallback), Source::CrRecord),
        (&ours, Some(&copy), Some(&fallback), Source::ChartCopy),
        (&ours, None, Some(&fallback), Source::Fallback),
        (&ours, None, None, Source::Nothing),
        // Not []: the copy and the fallback do not apply.
        (&on, Some(&copy), Some(&fallback), Source::Nothing),
        (&absent, None, Some(&fallback), Source::Nothing),
        // [] that is not ours: the fallback does not apply.
        (&theirs, None, Some(&fallback), Source::Nothing),
        // A record, but someone set [Evict] while suspended: their later choice stands.
        (&changed, Some(&copy), Some(&fallback), Source::LaterChoice),
    ];
    for (obj, copy, fallback, want) in cases {
        let r = restore_source(obj, copy, fallback).unwrap();
        assert_eq!(r.source, want, "{obj}");
        assert_eq!(
            r.original.is_some(),
            !matches!(want, Source::Nothing | Source::LaterChoice)
        );
        // kubevirt_post acts on exactly this source.
        let after = apply(obj, &kubevirt_post(obj, fallback, copy).unwrap());
        let expected = match want {
            Source::CrRecord => Some(live.clone()),
            Source::ChartCopy => Some(json!(["Evict"])),
            Source::Fallback => Some(json!(fallback.unwrap())),
            Source::Nothing | Source::LaterChoice => methods(obj).unwrap(),
        };
        assert_eq!(methods(&after).unwrap(), expected, "{want:?}");
    }
}

#[test]
fn the_original_copied_to_the_chart_drops_the_parents_the_cr_record_lists() {
    let mut bare = kubevirt(None);
    bare["spec"] = json!({});
    let absent = pre_kv(&bare);
    let record: ValueRecord = read_record(&absent, KUBEVIRT_RECORD).unwrap().unwrap();
    assert_eq!(record.created_parents, ["/spec/workloadUpdateStrategy"]);
    let original = kubevirt_original(&absent).unwrap();
    assert!(original.created_parents.is_empty());
    assert_eq!(original.present, record.present);
}

// ---- the release of our field-manager claim ----

fn entry(manager: &str, operation: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "apiVersion": "kubevirt.io/v1",
           "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
}

fn methods_fields() -> Value {
    json!({"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}})
}

#[test]
fn release_removes_exactly_our_entry_guarded_by_its_manager() {
    let mut obj = kubevirt(Some(json!(["LiveMigrate"])));
    obj["metadata"]["managedFields"] = json!([
        entry("helm", "Apply", json!({"f:spec": {"f:x": {}}})),
        entry(FIELD_MANAGER, "Update", methods_fields()),
        entry(
            "kubectl-patch",
            "Update",
            json!({"f:metadata": {"f:labels": {}}})
        ),
    ]);
    let plan = release(&obj, Kind::KubeVirt).unwrap();
    assert_eq!(
        ops(&plan),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "test", "path": "/metadata/managedFields/1/manager", "value": FIELD_MANAGER},
            {"op": "remove", "path": "/metadata/managedFields/1"},
        ])
    );
    assert_eq!(
        plan.actions,
        [format!(
            "released our field-manager claim on {METHODS_FIELD}"
        )]
    );
    let after = apply(&obj, &plan);
    assert_eq!(owners(&after, METHODS_PATH), []);
    assert_eq!(release(&after, Kind::KubeVirt).unwrap().patch, None);
}

#[test]
fn release_keeps_our_claim_while_we_still_suspend() {
    let live = kubevirt(Some(json!(["LiveMigrate"])));
    let mut suspended = pre_kv(&live);
    suspended["metadata"]["managedFields"] = json!([
        entry("helm", "Apply", json!({"f:spec": {}})),
        entry(FIELD_MANAGER, "Update", methods_fields()),
    ]);
    // The record is still there: nothing is released.
    assert_eq!(release(&suspended, Kind::KubeVirt).unwrap().patch, None);
    // Our own [] without a record: the claim is what lets a later fallback act.
    let mut lost = suspended.clone();
    lost["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert_eq!(release(&lost, Kind::KubeVirt).unwrap().patch, None);
    assert_eq!(
        restore_source(&lost, None, Some(&["LiveMigrate".into()]))
            .unwrap()
            .source,
        Source::Fallback
    );
    // Our entry alone cannot go: the server ignores an emptied managedFields.
    let mut alone = kubevirt(Some(json!(["LiveMigrate"])));
    alone["metadata"]["managedFields"] = json!([entry(FIELD_MANAGER, "Update", methods_fields())]);
    assert_eq!(release(&alone, Kind::KubeVirt).unwrap().patch, None);
    // A chart with any of our records keeps our claim too.
    let chart_obj = pre_chart(&chart(json!({}), None));
    let mut c = chart_obj.clone();
    c["metadata"]["managedFields"] = json!([
        entry("rancher", "Update", json!({"f:spec": {}})),
        entry(FIELD_MANAGER, "Update", json!({"f:spec": {"f:diff": {}}})),
    ]);
    assert_eq!(release(&c, Kind::ManagedChart).unwrap().patch, None);
}

fn managed_fields_strategy() -> impl Strategy<Value = Vec<Value>> {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn release_drops_only_our_claims_at_any_index(
        mf in managed_fields_strategy(),
        m in methods_strategy(),
        kind in prop_oneof![Just(Kind::KubeVirt), Just(Kind::ManagedChart)],
    ) {
        let mut obj = kubevirt(m.filter(|m| m != &json!([])));
        obj["metadata"]["managedFields"] = json!(mf.clone());
        let plan = release(&obj, kind).unwrap();
        let after = apply(&obj, &plan);
        let left = after["metadata"]["managedFields"].as_array().unwrap().clone();
        let is_claim = |e: &Value| e["manager"] == FIELD_MANAGER && e["fieldsV1"] != json!({});
        let others: Vec<Value> = mf.iter().filter(|e| !is_claim(e)).cloned().collect();
        if others.is_empty() {
            // Nothing else would be left: the server would not take it.
            prop_assert_eq!(plan.patch, None);
        } else {
            // Everyone else's entries stay, in order and unchanged; ours go.
            prop_assert_eq!(left, others);
            prop_assert_eq!(release(&after, kind).unwrap().patch, None);
        }
        // Nothing else on the object changes.
        let strip = |o: &Value| { let mut o = o.clone(); o["metadata"]["managedFields"] = json!(null); o };
        prop_assert_eq!(strip(&after), strip(&obj));
    }
}

// ---- operator safety: nothing left off in silence, later choices kept, what happens next ----

#[test]
fn post_keeps_a_change_made_while_suspended_and_warns() {
    let suspended = pre_kv(&kubevirt(Some(json!(["LiveMigrate"]))));
    for later in [json!(["Evict"]), json!(["LiveMigrate", "Evict"])] {
        let mut changed = suspended.clone();
        changed["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = later.clone();
        let plan = kubevirt_post(&changed, None, None).unwrap();
        let after = apply(&changed, &plan);
        assert_eq!(methods(&after).unwrap(), Some(later));
        assert_eq!(
            read_record::<ValueRecord>(&after, KUBEVIRT_RECORD).unwrap(),
            None
        );
        assert_eq!(plan.warnings.len(), 1);
        assert_eq!(plan.warnings[0].reason, CHANGED_WHILE_SUSPENDED);
        assert!(plan.warnings[0].message.contains(r#"["LiveMigrate"]"#));
    }
}

#[test]
fn post_that_leaves_updates_off_without_a_record_warns() {
    let off = kubevirt(Some(json!([])));
    let plan = kubevirt_post(&off, None, None).unwrap();
    assert_eq!(plan.patch, None);
    assert_eq!(plan.warnings.len(), 1);
    assert_eq!(plan.warnings[0].reason, STILL_SUSPENDED);
    assert!(
        plan.warnings[0]
            .message
            .contains("kubectl -n harvester-system patch kubevirt kubevirt")
    );
    // Absent methods, or on: nothing to warn about.
    for m in [None, Some(json!(["LiveMigrate"]))] {
        assert_eq!(
            kubevirt_post(&kubevirt(m), None, None).unwrap().warnings,
            []
        );
    }
    // A normal restore warns of nothing.
    let suspended = pre_kv(&kubevirt(Some(json!(["LiveMigrate"]))));
    assert_eq!(kubevirt_post(&suspended, None, None).unwrap().warnings, []);
}

#[test]
fn turning_updates_back_on_says_what_kubevirt_will_do() {
    let mut obj = kubevirt(Some(json!(["LiveMigrate"])));
    obj["status"] = json!({"outdatedVirtualMachineInstanceWorkloads": 7});
    obj["spec"]["configuration"] = json!({"migrations": {"parallelMigrationsPerCluster": 3}});
    let plan = kubevirt_post(&pre_kv(&obj), None, None).unwrap();
    assert!(
        plan.actions.contains(
            &"7 outdated VMIs will now be live-migrated, at most 3 at a time".to_string()
        ),
        "{:?}",
        plan.actions
    );
    let notice = |m: Value, status: Value| {
        let mut o = kubevirt(None);
        o["status"] = status;
        update_notice(&o, &Some(m))
    };
    assert_eq!(notice(json!([]), json!({})), None);
    assert_eq!(
        notice(json!(["LiveMigrate"]), json!({})).unwrap(),
        "the outdated VMIs (KubeVirt reports no count) will now be live-migrated, at most 5 at a time"
    );
    assert_eq!(
        notice(
            json!(["Evict"]),
            json!({"outdatedVirtualMachineInstanceWorkloads": 2})
        )
        .unwrap(),
        "2 outdated VMIs will now be evicted in batches of 10 every 1m0s, migratable or not"
    );
    assert!(
        notice(json!(["LiveMigrate", "Evict"]), json!({}))
            .unwrap()
            .contains("cannot migrate")
    );
    // Restoring an original that keeps updates off says nothing of the kind.
    let off = pre_kv(&kubevirt(None));
    assert!(
        kubevirt_post(&off, None, None)
            .unwrap()
            .actions
            .iter()
            .all(|a| !a.contains("will now"))
    );
}

#[test]
fn post_removes_the_recorded_entry_even_under_other_configured_names() {
    let obj = chart(json!({}), Some(json!([longhorn_entry()])));
    let suspended = pre_chart(&obj);
    let record: CompareRecord = read_record(&suspended, COMPARE_RECORD).unwrap().unwrap();
    assert_eq!(record.object.as_ref().unwrap().name, "kubevirt");
    assert_eq!(record.pointer.as_deref(), Some(METHODS_POINTER));
    let other = ObjectKey {
        namespace: "kubevirt".into(),
        name: "kubvirt".into(),
    };
    let plan = chart_post(&suspended, &other, &Steps::ALL).unwrap();
    assert_eq!(apply(&suspended, &plan), obj);
    assert!(
        plan.actions.contains(
            &"removed our comparePatches entry for KubeVirt harvester-system/kubevirt".to_string()
        ),
        "{:?}",
        plan.actions
    );
    // A record from an earlier version (no object): the configured names.
    let mut old = suspended.clone();
    old["metadata"]["annotations"][COMPARE_RECORD] = json!(r#"{"added":"entry"}"#);
    assert_eq!(
        apply(&old, &chart_post(&old, &kv(), &Steps::ALL).unwrap()),
        obj
    );
}

#[test]
fn post_warns_when_our_compare_patch_was_removed_by_someone_else() {
    let suspended = pre_chart(&chart(json!({}), Some(json!([longhorn_entry()]))));
    let mut gone = suspended.clone();
    gone["spec"]["diff"]["comparePatches"] = json!([longhorn_entry()]);
    let plan = chart_post(&gone, &kv(), &Steps::ALL).unwrap();
    assert_eq!(plan.warnings.len(), 1, "{plan:?}");
    assert_eq!(plan.warnings[0].reason, COMPARE_PATCH_GONE);
    assert!(
        plan.warnings[0]
            .message
            .contains("KubeVirt harvester-system/kubevirt")
    );
    assert_eq!(
        read_record::<CompareRecord>(&apply(&gone, &plan), COMPARE_RECORD).unwrap(),
        None
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Whatever was there, whatever someone sets while suspended (other than []), post keeps it.
    #[test]
    fn a_later_explicit_choice_wins(s in kubevirt_strategy(), later in methods_strategy()) {
        let mut changed = pre_kv(&s);
        match &later {
            Some(m) => changed["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = m.clone(),
            None => { changed["spec"]["workloadUpdateStrategy"].as_object_mut().unwrap().remove("workloadUpdateMethods"); }
        }
        let after = post_kv(&changed, Some(&["LiveMigrate".to_string()]));
        if later == Some(json!([])) {
            prop_assert_eq!(after, s);
        } else {
            prop_assert_eq!(methods(&after).unwrap(), later);
            prop_assert_eq!(read_record::<ValueRecord>(&after, KUBEVIRT_RECORD).unwrap(), None);
        }
    }
}

// ---- what a plan says it does ----

#[test]
fn each_plan_says_what_it_does_one_action_per_change() {
    let live = json!(["LiveMigrate"]);
    let on = kubevirt(Some(live.clone()));
    let suspended = pre_kv(&on);
    let as_is = value_record(Some(live.clone()), Vec::new());
    let other = value_record(Some(json!(["Evict"])), Vec::new());
    let mut changed = suspended.clone();
    changed["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!(["Evict"]);
    let count = |plan: Result<Plan, Malformed>| plan.unwrap().actions.len();
    // pre: the change and the record; a copy that agrees adds nothing, one that differs says so.
    assert_eq!(count(kubevirt_pre(&on, None)), 2);
    assert_eq!(count(kubevirt_pre(&on, Some(&as_is))), 2);
    assert_eq!(count(kubevirt_pre(&on, Some(&other))), 3);
    // Already [] (no change, only the record), or already suspended (nothing but the record kept).
    assert_eq!(count(kubevirt_pre(&kubevirt(Some(json!([]))), None)), 1);
    assert_eq!(count(kubevirt_pre(&suspended, None)), 1);
    // post: where the original comes from, the change, and what KubeVirt will now do; a change
    // made while suspended is a warning, not an action.
    assert_eq!(count(kubevirt_post(&suspended, None, None)), 3);
    assert_eq!(count(kubevirt_post(&changed, None, None)), 0);
    assert_eq!(
        kubevirt_post(&changed, None, None).unwrap().warnings.len(),
        1
    );
    // Nothing to restore from: only why.
    assert_eq!(count(kubevirt_post(&on, None, Some(&other))), 1);
    assert_eq!(count(kubevirt_post(&on, None, None)), 1);
}

#[test]
fn describe_says_absent_or_gives_the_compact_json() {
    assert_eq!(describe(&None), "absent");
    assert_eq!(
        describe(&Some(json!(["LiveMigrate", "Evict"]))),
        r#"["LiveMigrate","Evict"]"#
    );
}

#[test]
fn only_an_update_owner_blocks_an_apply() {
    let owner = |operation: &str| Owner {
        manager: "m".into(),
        operation: operation.into(),
        time: None,
    };
    assert!(owner("Update").blocks_apply());
    assert!(!owner("Apply").blocks_apply());
}

#[test]
fn either_chart_step_alone_writes_the_chart() {
    for steps in [
        Steps {
            kubevirt: false,
            values: true,
            compare: false,
        },
        Steps {
            kubevirt: false,
            values: false,
            compare: true,
        },
    ] {
        assert!(steps.writes(Kind::ManagedChart), "{steps:?}");
        assert!(!steps.writes(Kind::KubeVirt), "{steps:?}");
        let mut i = intent(Phase::Pre);
        i.steps = steps;
        assert_eq!(
            targets(&i).iter().map(|t| t.kind).collect::<Vec<_>>(),
            [Kind::ManagedChart]
        );
    }
    assert!(!Steps::ALL.writes(Kind::Migration));
}

#[test]
fn a_kubevirt_record_keeps_our_claim_whatever_the_methods_are() {
    // Suspended by us, then someone set the methods again: the record still marks the suspension.
    let mut obj = pre_kv(&kubevirt(Some(json!(["LiveMigrate"]))));
    obj["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!(["Evict"]);
    obj["metadata"]["managedFields"] = json!([
        entry("kubectl-patch", "Update", methods_fields()),
        entry(
            FIELD_MANAGER,
            "Update",
            json!({"f:metadata": {"f:annotations": {}}})
        ),
    ]);
    assert_eq!(release(&obj, Kind::KubeVirt).unwrap().patch, None);
    // Without the record the claim goes.
    let mut lost = obj.clone();
    lost["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert!(release(&lost, Kind::KubeVirt).unwrap().patch.is_some());
}

#[test]
fn post_releases_our_claim_on_both_objects_after_their_restore() {
    let both = Objects {
        kubevirt: Some(kubevirt(Some(json!(["LiveMigrate"])))),
        chart: Some(chart(json!({}), None)),
    };
    let mut suspended = run_phase(Phase::Pre, &both);
    // What the server's bookkeeping would add for our writes, next to an earlier owner's.
    for (kind, ours) in [
        (Kind::KubeVirt, methods_fields()),
        (Kind::ManagedChart, json!({"f:spec": {"f:diff": {}}})),
    ] {
        let mut obj = suspended.get(kind).unwrap().clone();
        obj["metadata"]["managedFields"] = json!([
            entry("helm", "Apply", json!({"f:spec": {}})),
            entry(FIELD_MANAGER, "Update", ours),
        ]);
        suspended.set(kind, Some(obj));
    }
    let post = plan_phase(&intent(Phase::Post), &suspended).unwrap();
    let releases: Vec<&Plan> = post
        .iter()
        .filter(|(s, _)| s.write == Write::Release)
        .map(|(_, p)| p)
        .collect();
    assert_eq!(releases.len(), 2);
    assert!(releases.iter().all(|p| p.patch.is_some()), "{releases:?}");
    let after = run_phase(Phase::Post, &suspended);
    for kind in [Kind::KubeVirt, Kind::ManagedChart] {
        let managers: Vec<&Value> = after.get(kind).unwrap()["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["manager"])
            .collect();
        assert_eq!(managers, [&json!("helm")], "{kind:?}");
    }
}
