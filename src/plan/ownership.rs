//! Field ownership: who owns the methods field (`managedFields`), and `post`'s release of our
//! claim (docs/design.md, "Field ownership"). The only room that edits
//! `metadata.managedFields`; it never changes a field's value.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

use super::editor::Editor;
use super::fields::{managed_fields, owned_field};
use super::json::{annotation, lookup};
use super::records::{RecordedOwner, Return, is_suspended, methods, read_record};
use crate::model::{
    ANNOTATION_PREFIX, CHART_RECORDS, FIELD_MANAGER, KUBEVIRT_RECORDS, Kind, METHODS_FIELD,
    METHODS_PATH, OWNERS_TO_RETURN,
};
use crate::vocabulary::{Malformed, Objects, Plan};

/// One `managedFields` entry's claim on a field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Owner {
    pub manager: String,
    /// `Apply` (server-side apply) or `Update` (any other write).
    pub operation: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    pub time: Option<String>,
}

impl Owner {
    fn of(e: &ManagedFieldsEntry) -> Owner {
        let text = |t: &Option<String>| t.clone().unwrap_or_default();
        Owner {
            manager: text(&e.manager),
            operation: text(&e.operation),
            api_version: text(&e.api_version),
            subresource: text(&e.subresource),
            // As the API server writes it (RFC 3339, whole seconds): the newest sorts last.
            time: e.time.as_ref().map(|t| t.0.to_string()),
        }
    }

    /// An `Update` owner is not an applier: the next server-side apply (Helm 4, so Fleet) that
    /// changes the field conflicts with it, unless it forces.
    pub fn blocks_apply(&self) -> bool {
        self.operation == "Update"
    }

    fn is(&self, r: &RecordedOwner) -> bool {
        (
            &self.manager,
            &self.operation,
            &self.api_version,
            &self.subresource,
        ) == (&r.manager, &r.operation, &r.api_version, &r.subresource)
    }
}

/// Each `managedFields` entry in its place (a patch names it by its index), with its owner.
fn entries(obj: &Value) -> Vec<(ManagedFieldsEntry, Owner)> {
    let claim = |e: ManagedFieldsEntry| {
        let owner = Owner::of(&e);
        (e, owner)
    };
    managed_fields(obj).into_iter().map(claim).collect()
}

/// An entry's `fieldsV1` set (null where it has none).
fn fields_of(e: &ManagedFieldsEntry) -> &Value {
    static NONE: Value = Value::Null;
    e.fields_v1.as_ref().map_or(&NONE, |f| &f.0)
}

pub fn owners(obj: &Value, path: &[&str]) -> Vec<Owner> {
    let owns = |(e, o): (ManagedFieldsEntry, Owner)| owned_field(&e, path).map(|_| o);
    entries(obj).into_iter().filter_map(owns).collect()
}

pub fn methods_owned_by_us(obj: &Value) -> bool {
    let owners = owners(obj, METHODS_PATH);
    owners.iter().any(|o| o.manager == FIELD_MANAGER)
}

pub fn update_claims(obj: &Value) -> impl Iterator<Item = Owner> {
    let owners = owners(obj, METHODS_PATH).into_iter();
    owners.filter(|o| o.blocks_apply() && o.manager != FIELD_MANAGER)
}

/// In the words that `status` and `post` both use.
pub fn update_claim_warning(manager: &str) -> String {
    format!(
        "{manager} holds an Update claim on {METHODS_FIELD}: a chart (Helm 4) change of the field \
         will conflict with it; a pre/post cycle of this guard releases it"
    )
}

pub fn update_claim_warnings(obj: &Value) -> Vec<String> {
    update_claims(obj)
        .map(|o| update_claim_warning(&o.manager))
        .collect()
}

/// What `pre` records about the owners of the field at `path`: every entry but ours, with the
/// parent maps each owned.
pub fn recorded_owners(obj: &Value, path: &[&str]) -> Vec<RecordedOwner> {
    let owned_map = |e: &ManagedFieldsEntry, d| {
        owned_field(e, &path[..d]).is_some_and(|node| node.get(".").is_some())
    };
    entries(obj)
        .into_iter()
        .filter(|(e, o)| o.manager != FIELD_MANAGER && owned_field(e, path).is_some())
        .map(|(e, o)| RecordedOwner {
            manager: o.manager,
            operation: o.operation,
            api_version: o.api_version,
            subresource: o.subresource,
            parents: (1..path.len())
                .filter(|&d| owned_map(&e, d))
                .map(|d| path[..d].join("."))
                .collect(),
        })
        .collect()
}

fn who(o: &RecordedOwner) -> String {
    format!("{}/{}", o.manager, o.operation)
}

/// Notes, in the restore's own write, the owners that the release after it gives `path` back
/// to, and the managers whose `Update` claim on it it drops (merged with a note already there).
/// Nothing when there is no one to give it to or take it from.
pub(super) fn note_return(
    ed: &mut Editor,
    path: &[&str],
    owners: Vec<RecordedOwner>,
    taken_from: Vec<String>,
) {
    if owners.is_empty() && taken_from.is_empty() {
        return;
    }
    let mut returns: Vec<Return> = read_record(&ed.doc, OWNERS_TO_RETURN)
        .ok()
        .flatten()
        .unwrap_or_default();
    let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
    returns.retain(|r| r.path != path);
    let who: Vec<String> = owners.iter().map(who).collect();
    if !who.is_empty() {
        ed.note(format!(
            "{} goes back to {} in the release that follows",
            path.join("."),
            who.join(", ")
        ));
    }
    if !taken_from.is_empty() {
        ed.note(format!(
            "the Update claim of {} on {} goes in the release that follows",
            taken_from.join(", "),
            path.join(".")
        ));
    }
    returns.push(Return {
        path,
        owners,
        taken_from,
    });
    ed.write_record(OWNERS_TO_RETURN, &returns)
        .expect("annotations are a map: the object was planned from");
}

/// Gives the field of each noted [`Return`] back to its recorded owners: the entry's `fieldsV1`
/// with the field (and the parent maps it owned) merged in, guarded by `test`s of the entry's
/// manager and operation (and the whole patch by the resourceVersion's). Nothing is added
/// where the entry is gone, already owns the field, or the field is no longer on the object.
///
/// Returns the entries left with no field by a [`Return::taken_from`] (their indexes), for
/// [`remove_entries`] to remove with ours.
fn give_back(ed: &mut Editor, obj: &Value, returns: &[Return]) -> Result<Vec<usize>, Malformed> {
    let entries = entries(obj);
    let mut emptied = Vec::new();
    for r in returns {
        let path: Vec<&str> = r.path.iter().map(String::as_str).collect();
        let field = path.join(".");
        if lookup(obj, &path)?.is_none() {
            ed.note(format!("{field} is gone: no ownership to give back"));
            continue;
        }
        for owner in &r.owners {
            let who = who(owner);
            let Some(i) = entries.iter().position(|(_, o)| o.is(owner)) else {
                ed.note(format!(
                    "{who} no longer has a managedFields entry: {field} not given back to it"
                ));
                continue;
            };
            let fields = fields_of(&entries[i].0);
            if !fields.is_object() {
                continue;
            }
            if owned_field(&entries[i].0, &path).is_some() {
                ed.note(format!("{who} owns {field} already"));
                continue;
            }
            let base = format!("/metadata/managedFields/{i}");
            ed.test(&format!("{base}/manager"), &owner.manager);
            ed.test(&format!("{base}/operation"), &owner.operation);
            let merged = with_field(fields, &path, &owner.parents);
            ed.push(json!({"op": "replace", "path": format!("{base}/fieldsV1"), "value": merged}));
            ed.note(format!("gave {field} back to {who}"));
        }
        emptied.extend(take_claims(ed, &entries, &path, &r.taken_from));
    }
    Ok(emptied)
}

/// Drops the `Update` claims of `managers` on the field at `path`: the field out of each such
/// entry's `fieldsV1` (the maps left empty with it), guarded by `test`s of the entry's manager
/// and operation. An entry that owned nothing else is returned (its index), to be removed.
fn take_claims(
    ed: &mut Editor,
    entries: &[(ManagedFieldsEntry, Owner)],
    path: &[&str],
    managers: &[String],
) -> Vec<usize> {
    let field = path.join(".");
    let mut emptied = Vec::new();
    for (i, (entry, owner)) in entries.iter().enumerate() {
        if !managers.contains(&owner.manager)
            || owner.operation != "Update"
            || owned_field(entry, path).is_none()
        {
            continue;
        }
        let left = without_field(fields_of(entry), path);
        if left.as_object().is_some_and(|m| m.is_empty()) {
            emptied.push(i);
        } else {
            let base = format!("/metadata/managedFields/{i}");
            ed.test(&format!("{base}/manager"), &owner.manager);
            ed.test(&format!("{base}/operation"), &owner.operation);
            ed.push(json!({"op": "replace", "path": format!("{base}/fieldsV1"), "value": left}));
        }
        ed.note(format!(
            "dropped {}'s Update claim on {field}",
            owner.manager
        ));
    }
    emptied
}

/// The `fieldsV1` set without the field at `path`, and without the maps that held only it.
fn without_field(fields: &Value, path: &[&str]) -> Value {
    fn strip(node: &mut Value, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let Some(map) = node.as_object_mut() else {
            return;
        };
        let key = format!("f:{first}");
        if rest.is_empty() {
            map.remove(&key);
            return;
        }
        if let Some(child) = map.get_mut(&key) {
            strip(child, rest);
            if child.as_object().is_some_and(|c| c.is_empty()) {
                map.remove(&key);
            }
        }
    }
    let mut left = fields.clone();
    strip(&mut left, path);
    left
}

/// The `fieldsV1` set with the field at `path` added, and the parent maps (`.`) in `parents`.
fn with_field(fields: &Value, path: &[&str], parents: &[String]) -> Value {
    let mut merged = fields.clone();
    let mut node = &mut merged;
    for (d, seg) in path.iter().enumerate() {
        let Some(map) = node.as_object_mut() else {
            break;
        };
        node = map.entry(format!("f:{seg}")).or_insert(json!({}));
        if let Some(map) = node.as_object_mut()
            && parents.contains(&path[..=d].join("."))
        {
            map.entry(".").or_insert(json!({}));
        }
    }
    merged
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

/// `post`'s last write on an object: the restored fields given back to the owners they had
/// before `pre` (as `note_return` noted them), and our `managedFields` entries removed, so that
/// no claim of ours outlives the suspension: the restore made us an owner, and a later Helm-4
/// apply that changes the field would conflict with us (docs/design.md, "Field ownership"). It
/// is a write of its own, after the restore: the server takes a write whose only change is to
/// `managedFields` as it is. Each removal is guarded by a `test` of the entry's manager.
///
/// Nothing is released while one of our records is still on the object (that part is still
/// suspended), nor while the KubeVirt CR stays at our own `[]` without a record: that claim lets
/// a later `post` with a fallback act (docs/configuration.md, "Warnings: nothing is left off in
/// silence").
pub fn release(obj: &Value, kind: Kind) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    let records = match kind {
        Kind::KubeVirt => KUBEVIRT_RECORDS,
        _ => CHART_RECORDS,
    };
    if let Some(key) = records.iter().find(|k| annotation(obj, k).is_some()) {
        ed.note(format!("our claim stays: the record {key} is still there"));
    } else if kind == Kind::KubeVirt && is_suspended(&methods(obj)?) && methods_owned_by_us(obj) {
        ed.note("our claim on [] stays: it marks the suspension as ours for a later post with a fallback");
    } else {
        let returns: Vec<Return> = read_record(obj, OWNERS_TO_RETURN)?.unwrap_or_default();
        let emptied = give_back(&mut ed, obj, &returns)?;
        ed.remove_annotation(OWNERS_TO_RETURN);
        remove_entries(&mut ed, obj, emptied);
    }
    Ok(ed.finish())
}

/// Removes our entries and the `emptied` ones (another manager's, left with no field by
/// [`take_claims`]), from the last, so that each removal leaves the earlier indexes as they were;
/// each guarded by a `test` of the entry's manager.
fn remove_entries(ed: &mut Editor, obj: &Value, emptied: Vec<usize>) {
    let entries = entries(obj);
    let ours: Vec<usize> = (0..entries.len())
        .filter(|&i| {
            let (e, o) = &entries[i];
            o.manager == FIELD_MANAGER && fields_of(e).as_object().is_some_and(|f| !f.is_empty())
        })
        .collect();
    let mut gone: Vec<usize> = ours.iter().chain(&emptied).copied().collect();
    gone.sort_unstable();
    gone.dedup();
    if gone.is_empty() {
        return;
    }
    if gone.len() == entries.len() {
        // The API server ignores a write that empties managedFields.
        return ed.note("our managedFields entry is the only one and cannot be removed");
    }
    let mut fields = Vec::new();
    for &i in gone.iter().rev() {
        let (entry, owner) = &entries[i];
        if owner.manager == FIELD_MANAGER {
            owned_fields(fields_of(entry), "", &mut fields);
        }
        let path = format!("/metadata/managedFields/{i}");
        ed.test(&format!("{path}/manager"), &owner.manager);
        ed.remove(&path);
    }
    if !ours.is_empty() {
        ed.note(format!(
            "released our field-manager claim on {}",
            fields.join(", ")
        ));
    }
}

/// Whether anything of ours is on `obj`: a record annotation, or our claim on the methods
/// (`post` has something to restore or release).
pub fn ours(obj: &Value) -> bool {
    let annotations = obj.get("metadata").and_then(|m| m.get("annotations"));
    let annotations = annotations.and_then(Value::as_object);
    let annotated = annotations.is_some_and(|a| a.keys().any(|k| k.starts_with(ANNOTATION_PREFIX)));
    annotated || methods_owned_by_us(obj)
}

/// Whether anything of ours is on either object: `post` has something to restore.
pub fn anything_of_ours(objects: &Objects) -> bool {
    objects.kubevirt.iter().chain(&objects.chart).any(ours)
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

    /// The add-on's Finalize wrote the original `[LiveMigrate]` back as `upgrade-toolkit` (an
    /// `Update`, which took the field from everyone): `post` finds it restored already, and its
    /// release drops that claim and gives the field back to Helm's `Apply`, so that the next
    /// chart change deploys (harvester#10899). Another manager's claim stays, and is named.
    #[test]
    fn a_hard_coded_restore_of_the_original_leaves_no_claim_of_the_restorer() {
        use crate::plan::kubevirt::kubevirt_post;
        let mut live = kubevirt(Some(json!(["LiveMigrate"])));
        live["metadata"]["managedFields"] = json!([entry("helm", "Apply", methods_fields())]);
        let mut finalized = pre_kv(&live);
        finalized["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] =
            json!(["LiveMigrate"]);
        let toolkit = json!({"f:metadata": {"f:labels": {"f:x": {}}},
            "f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}});
        finalized["metadata"]["managedFields"] = json!([
            entry("helm", "Apply", json!({"f:spec": {"f:configuration": {}}})),
            entry(
                FIELD_MANAGER,
                "Update",
                json!({"f:metadata": {"f:annotations": {}}})
            ),
            entry("upgrade-toolkit", "Update", toolkit),
        ]);
        let post = kubevirt_post(&finalized, None, None, None).unwrap();
        assert!(post.warnings.is_empty(), "{:?}", post.warnings);
        let restored = apply(&finalized, &post);
        let released = apply(&restored, &release(&restored, Kind::KubeVirt).unwrap());
        let owners: Vec<String> = owners(&released, METHODS_PATH)
            .iter()
            .map(|o| format!("{}/{}", o.manager, o.operation))
            .collect();
        assert_eq!(owners, ["helm/Apply"]);
        let entries = released["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:x": {}}}}),
            "upgrade-toolkit keeps its other fields: {entries:#?}"
        );
        // Where the restorer's entry owned only the methods, the entry goes.
        finalized["metadata"]["managedFields"][2]["fieldsV1"] = methods_fields();
        let restored = apply(
            &finalized,
            &kubevirt_post(&finalized, None, None, None).unwrap(),
        );
        let released = apply(&restored, &release(&restored, Kind::KubeVirt).unwrap());
        let managers: Vec<&str> = released["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["helm"]);
        // An operator's claim on the same value is theirs: it stays, and is named.
        finalized["metadata"]["managedFields"][2]["manager"] = json!("kubectl-patch");
        let post = kubevirt_post(&finalized, None, None, None).unwrap();
        assert_eq!(post.warnings.len(), 1, "{:?}", post.warnings);
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
            restore_source(&lost, None, Some(&["LiveMigrate".into()]), None)
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
            api_version: String::new(),
            subresource: String::new(),
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
            foreign: None,
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

    // ---- ownership given back (docs/design.md, "Field ownership") ----

    fn with_fields(mut obj: Value, entries: Value) -> Value {
        obj["metadata"]["managedFields"] = entries;
        obj
    }

    /// The content a user sees is as before (`managedFields` are each test's own subject).
    fn assert_content_as_before(after: &Value, before: &Value) {
        assert_eq!(after["spec"], before["spec"]);
        assert_eq!(
            after["metadata"]["annotations"],
            before["metadata"]["annotations"]
        );
    }

    /// A whole cycle on the CR, the server's ownership bookkeeping modelled: pre, post's restore,
    /// post's release.
    fn kubevirt_cycle(obj: &Value) -> Value {
        let suspended = write_as_server(obj, &kubevirt_pre(obj, None).unwrap(), METHODS_PATH);
        let restored = write_as_server(
            &suspended,
            &kubevirt_post(&suspended, None, None, None).unwrap(),
            METHODS_PATH,
        );
        apply(&restored, &release(&restored, Kind::KubeVirt).unwrap())
    }

    #[test]
    fn a_cycle_gives_the_methods_back_to_helm_and_heals_a_stale_update_claim() {
        let mut helm_fields = methods_fields();
        helm_fields["f:spec"]["f:configuration"] = json!({});
        let obj = with_fields(
            kubevirt(Some(json!(["LiveMigrate"]))),
            json!([
                entry("helm", "Apply", helm_fields.clone()),
                entry("kubectl-patch", "Update", methods_fields()),
                entry("virt-operator", "Update", json!({"f:status": {}})),
            ]),
        );
        let after = kubevirt_cycle(&obj);
        assert_content_as_before(&after, &obj);
        // Helm's entry is exactly as before; the stale Update claim is healed, not given back.
        assert_eq!(
            after["metadata"]["managedFields"],
            json!([
                entry("helm", "Apply", helm_fields),
                entry("virt-operator", "Update", json!({"f:status": {}})),
            ])
        );
    }

    #[test]
    fn the_field_goes_back_only_to_an_entry_that_still_exists_and_lacks_it() {
        let obj = with_fields(
            kubevirt(Some(json!(["LiveMigrate"]))),
            json!([
                entry("helm", "Apply", methods_fields()),
                entry("virt-operator", "Update", json!({"f:status": {}})),
            ]),
        );
        let suspended = write_as_server(&obj, &kubevirt_pre(&obj, None).unwrap(), METHODS_PATH);
        let restored = write_as_server(
            &suspended,
            &kubevirt_post(&suspended, None, None, None).unwrap(),
            METHODS_PATH,
        );
        let note = read_record::<Vec<Return>>(&restored, OWNERS_TO_RETURN).unwrap();
        assert_eq!(note.unwrap()[0].owners[0].manager, "helm");
        // Helm applied again between the restore and the release: it owns the field already.
        let mut reapplied = restored.clone();
        reapplied["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(entry("helm", "Apply", methods_fields()));
        let plan = release(&reapplied, Kind::KubeVirt).unwrap();
        assert!(
            plan.actions.iter().any(|a| a.contains("owns")),
            "{:?}",
            plan.actions
        );
        let after = apply(&reapplied, &plan);
        assert_eq!(
            after["metadata"]["managedFields"][1],
            entry("helm", "Apply", methods_fields())
        );
        // Helm's entry is gone (an uninstall, say): nothing is added to anyone.
        let plan = release(&restored, Kind::KubeVirt).unwrap();
        let after = apply(&restored, &plan);
        assert_eq!(
            after["metadata"]["managedFields"],
            json!([entry("virt-operator", "Update", json!({"f:status": {}}))])
        );
        assert!(annotation(&after, OWNERS_TO_RETURN).is_none());
        // The field is gone since: nothing to own.
        let mut gone = restored.clone();
        gone["spec"]["workloadUpdateStrategy"] = json!({});
        let after = apply(&gone, &release(&gone, Kind::KubeVirt).unwrap());
        assert_eq!(owners(&after, METHODS_PATH), vec![]);
    }

    #[test]
    fn a_record_of_the_previous_release_restores_without_giving_ownership_back() {
        let obj = with_fields(
            kubevirt(Some(json!(["LiveMigrate"]))),
            json!([
                entry("helm", "Apply", methods_fields()),
                entry("virt-operator", "Update", json!({"f:status": {}})),
            ]),
        );
        let mut suspended = write_as_server(&obj, &kubevirt_pre(&obj, None).unwrap(), METHODS_PATH);
        // The previous release wrote no owners.
        suspended["metadata"]["annotations"][KUBEVIRT_RECORD] =
            json!(r#"{"present":true,"value":["LiveMigrate"]}"#);
        let restored = write_as_server(
            &suspended,
            &kubevirt_post(&suspended, None, None, None).unwrap(),
            METHODS_PATH,
        );
        assert!(annotation(&restored, OWNERS_TO_RETURN).is_none());
        let after = apply(&restored, &release(&restored, Kind::KubeVirt).unwrap());
        assert_eq!(after["spec"], obj["spec"]);
        assert_eq!(owners(&after, METHODS_PATH), vec![]);
        assert!(claims_of(&after).is_empty());
    }

    fn claims_of(obj: &Value) -> Vec<Value> {
        obj["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["manager"] == FIELD_MANAGER)
            .cloned()
            .collect()
    }

    #[test]
    fn a_chart_cycle_gives_values_and_compare_patches_back_to_their_owners() {
        // An entry that owned nothing else would be dropped by pre's write, and not come back.
        let mut edit_fields = field_set(VALUES_PATH);
        edit_fields["f:spec"]["f:paused"] = json!({});
        let obj = with_fields(
            chart(
                json!({"kubevirt": {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]}}}}),
                Some(json!([longhorn_entry()])),
            ),
            json!([
                entry(
                    "rancher",
                    "Update",
                    json!({"f:spec": {"f:diff": {".": {}, "f:comparePatches": {}}, "f:chart": {}}})
                ),
                entry("kubectl-edit", "Update", edit_fields),
            ]),
        );
        // One write changes both fields: the server moves each to us.
        let server = |o: &Value, p: &Plan| {
            let values = write_as_server(o, p, VALUES_PATH);
            let mid = with_fields(o.clone(), values["metadata"]["managedFields"].clone());
            server_update(&mid, &values, FIELD_MANAGER, COMPARE_PATH)
        };
        let kv = ObjectKey {
            namespace: "harvester-system".into(),
            name: "kubevirt".into(),
        };
        let suspended = server(&obj, &chart_pre(&obj, &kv, &Steps::ALL, None).unwrap());
        assert_eq!(owners(&suspended, VALUES_PATH)[0].manager, FIELD_MANAGER);
        let restored = server(
            &suspended,
            &chart_post(&suspended, &kv, &Steps::ALL).unwrap(),
        );
        let after = apply(&restored, &release(&restored, Kind::ManagedChart).unwrap());
        assert_content_as_before(&after, &obj);
        assert_eq!(
            after["metadata"]["managedFields"],
            obj["metadata"]["managedFields"]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Wherever the recorded owner's entry and ours sit, the release adds exactly the field to
        /// that entry, leaves every other entry as it was and in order, drops ours, and a second
        /// release has nothing to do.
        #[test]
        fn the_field_goes_back_to_the_recorded_entry_at_any_index(
            mf in managed_fields_strategy(),
            at in any::<prop::sample::Index>(),
            helm_fields in prop_oneof![
                Just(json!({})),
                Just(json!({"f:spec": {}})),
                Just(json!({"f:spec": {"f:configuration": {}}})),
                Just(json!({"f:spec": {"f:workloadUpdateStrategy": {"f:batchEvictionSize": {}}}})),
            ],
        ) {
            let mut mf: Vec<Value> = mf.into_iter().filter(|e| e["manager"] != "helm").collect();
            let i = at.index(mf.len() + 1);
            let mut helm = entry("helm", "Apply", helm_fields.clone());
            mf.insert(i, helm.clone());
            let mut obj = with_fields(kubevirt(Some(json!(["LiveMigrate"]))), json!(mf.clone()));
            let owner = RecordedOwner {
                manager: "helm".into(), operation: "Apply".into(),
                api_version: "kubevirt.io/v1".into(), subresource: String::new(), parents: vec![],
            };
            let note = vec![Return { path: METHODS_PATH.iter().map(|s| s.to_string()).collect(), owners: vec![owner], taken_from: vec![] }];
            obj["metadata"]["annotations"] = json!({OWNERS_TO_RETURN: serde_json::to_string(&note).unwrap()});
            let after = apply(&obj, &release(&obj, Kind::KubeVirt).unwrap());
            let mut expected = helm_fields;
            merge_sets(&mut expected, &methods_fields());
            helm["fieldsV1"] = expected;
            let want: Vec<Value> = mf.iter()
                .filter(|e| e["manager"] != FIELD_MANAGER || e["fieldsV1"] == json!({}))
                .map(|e| if e["manager"] == "helm" { helm.clone() } else { e.clone() })
                .collect();
            prop_assert_eq!(after["metadata"]["managedFields"].as_array().unwrap(), &want);
            prop_assert!(annotation(&after, OWNERS_TO_RETURN).is_none());
            prop_assert_eq!(release(&after, Kind::KubeVirt).unwrap().patch, None);
            prop_assert_eq!(&after["spec"], &obj["spec"]);
        }
    }
}
