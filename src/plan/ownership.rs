//! Field ownership: who owns the methods field (`managedFields`), and `post`'s release of our
//! claim (DESIGN §4.3, "A claim outlives the write"). The only room that edits
//! `metadata.managedFields`; it never changes a field's value.

use serde::Serialize;
use serde_json::{Value, json};

use super::editor::{Editor, Malformed, Plan};
use super::records::{annotation, methods};
use crate::model::{CHART_RECORDS, FIELD_MANAGER, KUBEVIRT_RECORDS, Kind, METHODS_PATH, pointer};

/// Whether our field manager owns `workloadUpdateMethods` according to `managedFields`.
pub fn methods_owned_by_us(obj: &Value) -> bool {
    owners(obj, METHODS_PATH)
        .iter()
        .any(|o| o.manager == FIELD_MANAGER)
}

/// One `managedFields` entry's claim on a field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    pub manager: String,
    /// `Apply` (server-side apply) or `Update` (any other write).
    pub operation: String,
    pub time: Option<String>,
}

impl Owner {
    /// An `Update` owner is not an applier: the next server-side apply (Helm 4, so Fleet) that
    /// changes the field conflicts with it, unless it forces.
    pub fn blocks_apply(&self) -> bool {
        self.operation == "Update"
    }
}

fn managed_fields(obj: &Value) -> &[Value] {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The managers that own the field at `path`, in `managedFields` order.
pub fn owners(obj: &Value, path: &[&str]) -> Vec<Owner> {
    let fields: Vec<String> = path.iter().map(|s| format!("f:{s}")).collect();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    let ptr = format!("/fieldsV1{}", pointer(&fields));
    let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    managed_fields(obj)
        .iter()
        .filter(|e| e.pointer(&ptr).is_some())
        .map(|e| Owner {
            manager: text(e, "manager"),
            operation: text(e, "operation"),
            time: e.get("time").and_then(Value::as_str).map(str::to_string),
        })
        .collect()
}

/// The fields an entry's `fieldsV1` owns, as dotted paths (`.spec.x`), for logs.
fn owned_fields(fields: &Value, prefix: &str, out: &mut Vec<String>) {
    let Value::Object(map) = fields else { return };
    let children: Vec<_> = map.iter().filter(|(k, _)| k.as_str() != ".").collect();
    if children.is_empty() && !prefix.is_empty() {
        out.push(prefix.to_string());
    }
    for (k, v) in children {
        let seg = k
            .strip_prefix("f:")
            .map_or_else(|| format!("[{k}]"), |f| format!(".{f}"));
        owned_fields(v, &format!("{prefix}{seg}"), out);
    }
}

/// `post`'s last write on an object: our `managedFields` entries removed, so that no claim of
/// ours outlives the suspension. Every write that changes a field makes its manager an owner of
/// it, and the restore is such a write; a later Helm-4 apply that changes the field (a new
/// chart default, an operator's values edit) would then conflict with us (DESIGN §4.3). The
/// server takes a write whose only change is to `managedFields` as it is, so this must be a
/// write of its own, after the restore. Each removal is guarded by a `test` of the entry's
/// manager, so an entry that moved is never removed by index.
///
/// Nothing is released while one of our records is still on the object (that part is still
/// suspended), nor while the KubeVirt CR stays at our own `[]` without a record: that claim is
/// what lets a later `post` with a fallback act (README "No record").
pub fn release(obj: &Value, kind: Kind) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    let records = match kind {
        Kind::KubeVirt => KUBEVIRT_RECORDS,
        _ => CHART_RECORDS,
    };
    if let Some(key) = records.iter().find(|k| annotation(obj, k).is_some()) {
        ed.note(format!("our claim stays: the record {key} is still there"));
        return Ok(ed.finish());
    }
    if kind == Kind::KubeVirt && methods(obj)? == Some(json!([])) && methods_owned_by_us(obj) {
        ed.note("our claim on [] stays: it marks the suspension as ours for a later post with a fallback");
        return Ok(ed.finish());
    }
    let entries = managed_fields(obj);
    let ours: Vec<usize> = (0..entries.len())
        .filter(|&i| {
            entries[i]["manager"] == FIELD_MANAGER
                && entries[i]["fieldsV1"]
                    .as_object()
                    .is_some_and(|f| !f.is_empty())
        })
        .collect();
    if ours.is_empty() {
        return Ok(ed.finish());
    }
    if ours.len() == entries.len() {
        // The API server ignores a write that empties managedFields.
        ed.note("our managedFields entry is the only one and cannot be removed");
        return Ok(ed.finish());
    }
    let mut fields = Vec::new();
    for &i in ours.iter().rev() {
        owned_fields(&entries[i]["fieldsV1"], "", &mut fields);
        let path = format!("/metadata/managedFields/{i}");
        ed.push(json!({"op": "test", "path": format!("{path}/manager"), "value": FIELD_MANAGER}));
        ed.remove(&path);
    }
    ed.note(format!(
        "released our field-manager claim on {}",
        fields.join(", ")
    ));
    Ok(ed.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::*;

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
        alone["metadata"]["managedFields"] =
            json!([entry(FIELD_MANAGER, "Update", methods_fields())]);
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
}
