//! The ManagedChart's values override and comparePatches pointer or entry, each switchable;
//! `post` removes exactly what `pre` added. The comparePatches list belongs to everyone
//! (docs/design.md, "The objects"): never rewrite or reorder other entries.

use serde_json::{Value, json};

use super::editor::Editor;
use super::fields::CompareEntry;
use super::harvester_upgrade::blind_restorer;
use super::json::lookup;
use super::ownership::{note_return, recorded_owners};
use super::records::{
    Added, CompareRecord, RecordedObject, ValueRecord, describe, kubevirt_copy, read_record,
    value_record,
};
use super::releases;
use crate::model::{
    COMPARE_PATH, COMPARE_RECORD, KUBEVIRT_COPY, Kind, METHODS_POINTER, ObjectKey, Target,
    VALUES_PATH, VALUES_RECORD, pointer,
};
use crate::vocabulary::Steps;
use crate::vocabulary::{Malformed, Plan};
use crate::warnings::{CHANGED_WHILE_SUSPENDED, COMPARE_PATCH_GONE};

/// `pre` on the ManagedChart, with a copy of the KubeVirt CR's `kubevirt_original` (once).
pub fn chart_pre(
    obj: &Value,
    kubevirt: &ObjectKey,
    steps: &Steps,
    kubevirt_original: Option<&ValueRecord>,
) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    if let Some(original) = kubevirt_original
        && kubevirt_copy(obj)?.is_none()
    {
        let copied = describe(&original.original());
        ed.note(format!(
            "copied the KubeVirt CR's original methods {copied}"
        ));
        ed.write_record(KUBEVIRT_COPY, original)?;
    }
    if steps.values {
        suspend_values(&mut ed, obj)?;
    }
    if steps.compare {
        ignore_methods(&mut ed, obj, kubevirt)?;
    }
    Ok(ed.finish())
}

/// `pre`'s values override `[]`, and its record (once).
fn suspend_values(ed: &mut Editor, obj: &Value) -> Result<(), Malformed> {
    let current = lookup(obj, VALUES_PATH)?.cloned();
    let record: Option<ValueRecord> = read_record(obj, VALUES_RECORD)?;
    let created = ed.ensure(VALUES_PATH, json!([]), "values override")?;
    if record.is_none() {
        let original = describe(&current);
        ed.note(format!("recorded original values override {original}"));
        let record = value_record(current, created, recorded_owners(obj, VALUES_PATH));
        ed.write_record(VALUES_RECORD, &record)?;
    }
    Ok(())
}

/// `pre`'s comparePatches pointer for the KubeVirt CR, and the record of what it added (once).
fn ignore_methods(ed: &mut Editor, obj: &Value, kubevirt: &ObjectKey) -> Result<(), Malformed> {
    let record: Option<CompareRecord> = read_record(obj, COMPARE_RECORD)?;
    let list = compare_list(obj)?;
    let ours = Target::new(Kind::KubeVirt, kubevirt);
    let entries = pointer(COMPARE_PATH);
    let mut covering = list.into_iter().flatten().enumerate();
    let mut created = Vec::new();
    let added = if find_pointer(list, kubevirt)?.is_some() {
        ed.note(format!(
            "comparePatches already ignores the methods of {ours}"
        ));
        Added::Nothing
    } else if let Some((i, entry)) = covering.find(|(_, e)| entry_covers(e, kubevirt)) {
        let pointers = format!("{entries}/{i}/jsonPointers");
        let entry_for = format!("the comparePatches entry for {}", entry_name(entry));
        if entry.get("jsonPointers").is_some() {
            ed.add(&format!("{pointers}/-"), json!(METHODS_POINTER));
            ed.note(format!("appended our pointer to {entry_for}"));
            Added::Pointer
        } else {
            ed.add(&pointers, json!([METHODS_POINTER]));
            ed.note(format!(
                "added jsonPointers with our pointer to {entry_for}"
            ));
            Added::PointerList
        }
    } else if list.is_some() {
        ed.add(&format!("{entries}/-"), our_entry(kubevirt));
        ed.note(format!("appended a comparePatches entry for {ours}"));
        Added::Entry
    } else {
        created = ed.ensure(COMPARE_PATH, json!([our_entry(kubevirt)]), "comparePatches")?;
        created.push(entries);
        ed.note(format!("created comparePatches with an entry for {ours}"));
        Added::Entry
    };
    if record.is_some() {
        return Ok(());
    }
    let record = CompareRecord {
        added,
        object: Some(RecordedObject {
            api_version: Kind::KubeVirt.api_version().into(),
            kind: Kind::KubeVirt.name().into(),
            namespace: kubevirt.namespace.clone(),
            name: kubevirt.name.clone(),
        }),
        pointer: Some(METHODS_POINTER.into()),
        created_parents: created,
        owners: match added {
            Added::Nothing => Vec::new(),
            _ => recorded_owners(obj, COMPARE_PATH),
        },
    };
    ed.write_record(COMPARE_RECORD, &record)
}

/// `post` on the ManagedChart: the values as recorded, and only the pointer or entry we added.
pub fn chart_post(obj: &Value, kubevirt: &ObjectKey, steps: &Steps) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    kubevirt_copy(obj)?;
    // Both fields go back to every recorded owner, `Update` ones included: nothing is known to
    // apply the ManagedChart server-side, so no claim here can block a chart change.
    // Only a field whose value our write decides goes back: not a later choice kept on the
    // values, nor a list whose pointer someone else removed (their write owns it now).
    let values = read_record::<ValueRecord>(obj, VALUES_RECORD)?.filter(|_| steps.values);
    let later = values_choice(obj)?;
    if let Some(r) = &values
        && later.is_none()
    {
        note_return(&mut ed, VALUES_PATH, r.owners.clone(), Vec::new());
    }
    let compare = read_record::<CompareRecord>(obj, COMPARE_RECORD)?.filter(|_| steps.compare);
    let list = steps.compare.then(|| compare_list(obj)).transpose()?;
    let list = list.flatten();
    let key = |r: &CompareRecord| {
        r.object
            .as_ref()
            .map_or(kubevirt.clone(), RecordedObject::key)
    };
    if let Some(r) = &compare
        && (r.added == Added::Nothing || find_pointer(list, &key(r))?.is_some())
    {
        note_return(&mut ed, COMPARE_PATH, r.owners.clone(), Vec::new());
    }
    ed.remove_annotation(KUBEVIRT_COPY);
    if steps.values {
        restore_values(&mut ed, obj, values, later)?;
    }
    match compare {
        Some(r) => {
            if r.added != Added::Nothing {
                remove_our_pointer(&mut ed, list, &key(&r), r.added)?;
            }
            ed.remove_empty(&r.created_parents);
            ed.remove_annotation(COMPARE_RECORD);
        }
        None if steps.compare => {
            ed.note("no record of a comparePatches change: list left as it is")
        }
        None => {}
    }
    Ok(ed.finish())
}

/// `post`'s values override: the recorded original back, or a later choice kept (warned).
fn restore_values(
    ed: &mut Editor,
    obj: &Value,
    values: Option<ValueRecord>,
    later: Option<Value>,
) -> Result<(), Malformed> {
    let current = lookup(obj, VALUES_PATH)?.cloned();
    let Some(r) = values else {
        ed.note("no record of the values override: values left as they are");
        return Ok(());
    };
    match later {
        Some(later) => ed.warn(
            CHANGED_WHILE_SUSPENDED,
            format!(
                "the values override was changed to {later} while suspended; that later \
                 choice is kept, and the KubeVirt CR follows it unless it holds a later choice \
                 of its own (its Warning then says so, and Fleet's next deploy renders this one \
                 over it) (the recorded original was {})",
                describe(&r.original())
            ),
        ),
        None => {
            if let Some(who) = blind_restorer(obj, VALUES_PATH, &current) {
                ed.note(format!(
                    "{who} wrote a hard-coded {} into the values (Harvester's upgrade \
                     cleanup without a backup); the recorded original goes back",
                    describe(&current)
                ));
            }
            ed.restore(VALUES_PATH, &r, "values override")?;
        }
    }
    ed.remove_annotation(VALUES_RECORD);
    Ok(())
}

/// The values override's later choice: with a record of ours, a value other than our `[]`, the
/// recorded original and Harvester's blind restores. `post` keeps it on both objects (the CR
/// follows what Fleet renders), as it keeps the CR's own later choice. `None` with the key absent
/// too (the chart's default then, which `post` cannot know: the CR's record decides).
pub fn values_choice(obj: &Value) -> Result<Option<Value>, Malformed> {
    let Some(record) = read_record::<ValueRecord>(obj, VALUES_RECORD)? else {
        return Ok(None);
    };
    let current = lookup(obj, VALUES_PATH)?.cloned();
    let later = current.as_ref().is_some_and(|v| {
        *v != json!([])
            && Some(v) != record.original().as_ref()
            && blind_restorer(obj, VALUES_PATH, &current).is_none()
    });
    Ok(current.filter(|_| later))
}

fn remove_our_pointer(
    ed: &mut Editor,
    list: Option<&Vec<Value>>,
    kubevirt: &ObjectKey,
    added: Added,
) -> Result<(), Malformed> {
    let ours = Target::new(Kind::KubeVirt, kubevirt);
    let Some((i, j)) = find_pointer(list, kubevirt)? else {
        ed.warn(
            COMPARE_PATCH_GONE,
            format!(
                "our comparePatches pointer for {ours} was removed by someone else (Harvester \
                 {}'s upgrade cleanup and the upgrade add-on's Finalize remove it); nothing to \
                 remove",
                releases::name(releases::HARD_CODED_RESTORE)
            ),
        );
        return Ok(());
    };
    let entry = &list.expect("a pointer was found")[i];
    let base = format!("{}/{i}", pointer(COMPARE_PATH));
    let entry_for = format!("the comparePatches entry for {}", entry_name(entry));
    let pointers = entry["jsonPointers"].as_array().map_or(0, Vec::len);
    if added == Added::Entry && *entry == our_entry(kubevirt) {
        ed.remove(&base);
        ed.note(format!("removed our comparePatches entry for {ours}"));
    } else if added == Added::PointerList && pointers == 1 {
        ed.remove(&format!("{base}/jsonPointers"));
        ed.note(format!("removed the jsonPointers we added to {entry_for}"));
    } else {
        ed.remove(&format!("{base}/jsonPointers/{j}"));
        ed.note(format!("removed our pointer from {entry_for}"));
    }
    Ok(())
}

/// `KubeVirt ns/name` of a comparePatches entry (`*` for an empty namespace, which matches any).
fn entry_name(entry: &Value) -> String {
    let e = CompareEntry::of(entry);
    let ns = Some(e.namespace.as_str()).filter(|ns| !ns.is_empty());
    format!("{} {}/{}", e.kind, ns.unwrap_or("*"), e.name)
}

fn our_entry(kubevirt: &ObjectKey) -> Value {
    json!({
        "apiVersion": Kind::KubeVirt.api_version(),
        "kind": Kind::KubeVirt.name(),
        "name": kubevirt.name,
        "namespace": kubevirt.namespace,
        "jsonPointers": [METHODS_POINTER],
    })
}

/// Fleet matches an entry to an object by apiVersion, kind, name and namespace; an empty
/// namespace matches any. An entry for the same name that covers our namespace covers our object.
pub fn entry_covers(entry: &Value, kubevirt: &ObjectKey) -> bool {
    let e = CompareEntry::of(entry);
    e.api_version == Kind::KubeVirt.api_version()
        && e.kind == Kind::KubeVirt.name()
        && e.name == kubevirt.name
        && (e.namespace.is_empty() || e.namespace == kubevirt.namespace)
}

/// The (entry, pointer) indexes of our pointer in an entry that covers the KubeVirt CR.
pub fn find_pointer(
    list: Option<&Vec<Value>>,
    kubevirt: &ObjectKey,
) -> Result<Option<(usize, usize)>, Malformed> {
    let covering = list.into_iter().flatten().enumerate();
    for (i, entry) in covering.filter(|(_, e)| entry_covers(e, kubevirt)) {
        match entry.get("jsonPointers") {
            None => {}
            Some(Value::Array(p)) => {
                if let Some(j) = p.iter().position(|p| p == METHODS_POINTER) {
                    return Ok(Some((i, j)));
                }
            }
            Some(_) => {
                let at = format!("spec.diff.comparePatches[{i}].jsonPointers");
                return Err(Malformed(format!("{at} is not a list")));
            }
        }
    }
    Ok(None)
}

/// `spec.diff.comparePatches`, which must be a list when present.
pub fn compare_list(obj: &Value) -> Result<Option<&Vec<Value>>, Malformed> {
    match lookup(obj, COMPARE_PATH)? {
        None => Ok(None),
        Some(Value::Array(list)) => Ok(Some(list)),
        Some(_) => Err(Malformed("spec.diff.comparePatches is not a list".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::json::annotation;
    use crate::plan::records::methods;
    use crate::plan::testing::*;
    use crate::vocabulary::{Objects, Phase};

    const VALUES_PTR: &str =
        "/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods";

    fn suspended_pair(original: Option<Value>) -> Objects {
        let start = Objects {
            kubevirt: Some(kubevirt(original)),
            chart: Some(chart(json!({}), None)),
            foreign: None,
        };
        run_phase(Phase::Pre, &start)
    }

    /// One rule for both objects: a later choice is kept on both or on neither.
    #[test]
    fn a_later_choice_on_the_values_is_kept_on_both_objects() {
        let mut now = suspended_pair(Some(json!(["LiveMigrate"])));
        let later = json!(["LiveMigrate", "Evict"]);
        let chart = now.chart.as_mut().unwrap();
        *chart.pointer_mut(VALUES_PTR).unwrap() = later.clone();
        chart["metadata"]["managedFields"] =
            json!([entry("kubectl-edit", "Update", field_set(VALUES_PATH))]);
        assert_eq!(values_choice(chart).unwrap(), Some(later.clone()));
        let end = run_phase(Phase::Post, &now);
        let (kv, ch) = (end.kubevirt.unwrap(), end.chart.unwrap());
        assert_eq!(methods(&kv).unwrap(), Some(later.clone()));
        assert_eq!(lookup(&ch, VALUES_PATH).unwrap(), Some(&later));
        assert_eq!(
            read_record::<ValueRecord>(&ch, VALUES_RECORD).unwrap(),
            None
        );
        // The later choice's writer keeps it: nothing is given back on the values.
        assert!(
            annotation(&ch, crate::model::OWNERS_TO_RETURN)
                .is_none_or(|n| { !n.as_str().unwrap_or("").contains("workloadUpdateMethods") })
        );
    }

    #[test]
    fn a_later_choice_on_the_values_is_a_warning_that_names_it() {
        let mut now = suspended_pair(None);
        let chart = now.chart.as_mut().unwrap();
        *chart.pointer_mut(VALUES_PTR).unwrap() = json!(["Evict"]);
        let plan = chart_post(chart, &kv(), &Steps::ALL).unwrap();
        assert_eq!(plan.warnings.len(), 1);
        assert_eq!(plan.warnings[0].reason, CHANGED_WHILE_SUSPENDED);
        assert!(plan.warnings[0].message.contains(r#"["Evict"]"#));
        assert!(plan.warnings[0].message.contains("absent"));
    }

    /// Harvester's legacy cleanup (no backup) writes a hard-coded [LiveMigrate] into the values
    /// as `harvester`: not a later choice; the recorded original goes back on both.
    #[test]
    fn harvesters_blind_restore_of_the_values_is_undone() {
        let mut now = suspended_pair(Some(json!(["LiveMigrate"])));
        let chart = now.chart.as_mut().unwrap();
        *chart.pointer_mut(VALUES_PTR).unwrap() = json!(["LiveMigrate"]);
        chart["metadata"]["managedFields"] =
            json!([entry("harvester", "Update", field_set(VALUES_PATH))]);
        assert_eq!(values_choice(chart).unwrap(), None);
        let plan = chart_post(chart, &kv(), &Steps::ALL).unwrap();
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
        assert!(
            plan.actions
                .iter()
                .any(|a| a.contains("harvester wrote a hard-coded"))
        );
        let end = run_phase(Phase::Post, &now);
        assert_eq!(
            lookup(&end.chart.unwrap(), VALUES_PATH).unwrap().cloned(),
            None,
            "absent, as before"
        );
        assert_eq!(
            methods(&end.kubevirt.unwrap()).unwrap(),
            Some(json!(["LiveMigrate"]))
        );
        // The same list by an operator's kubectl is their later choice.
        let mut by_hand = suspended_pair(None);
        let chart = by_hand.chart.as_mut().unwrap();
        *chart.pointer_mut(VALUES_PTR).unwrap() = json!(["LiveMigrate"]);
        chart["metadata"]["managedFields"] =
            json!([entry("kubectl-edit", "Update", field_set(VALUES_PATH))]);
        assert_eq!(values_choice(chart).unwrap(), Some(json!(["LiveMigrate"])));
    }

    /// A comparePatches list that someone else rewrote (Harvester v1.8.0's cleanup removed our
    /// pointer) is theirs now: our record goes, nothing is given back on it.
    #[test]
    fn a_list_whose_pointer_someone_removed_is_not_given_back() {
        let now = suspended_pair(Some(json!(["LiveMigrate"])));
        let mut chart = now.chart.unwrap();
        chart["spec"]["diff"]["comparePatches"] = json!([longhorn_entry()]);
        let plan = chart_post(&chart, &kv(), &Steps::ALL).unwrap();
        let after = apply(&chart, &plan);
        let note = annotation(&after, crate::model::OWNERS_TO_RETURN)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        assert!(!note.contains("comparePatches"), "{note}");
        assert_eq!(
            after["spec"]["diff"]["comparePatches"],
            json!([longhorn_entry()])
        );
        assert_eq!(
            read_record::<CompareRecord>(&after, COMPARE_RECORD).unwrap(),
            None
        );
        assert_eq!(plan.warnings[0].reason, COMPARE_PATCH_GONE);
        assert!(plan.warnings[0].message.contains("v1.8.0"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Whoever changes what while suspended, post follows the values-choice rule
        /// (docs/design.md, "One rule for both objects"): the CR keeps a later choice of its own,
        /// else follows the values' later choice, else gets the original back; the values keep
        /// their later choice, else lose our override. Each later choice kept is warned about, on
        /// the object that holds it, and nothing else is; so where the values render something
        /// other than what the CR holds, a warning says why.
        #[test]
        fn after_post_the_two_objects_agree_or_a_warning_says_why(
            original in methods_strategy(),
            // `[LiveMigrate]` is often the original too: the CR put back by someone else.
            cr_later in prop::option::of(prop::sample::select(vec![json!(["Evict"]), json!(["LiveMigrate"]), json!(["LiveMigrate", "Evict"])])),
            // `[]` on the values is our own override, not a later choice.
            values_later in prop::option::of(prop::sample::select(vec![json!([]), json!(["Evict"]), json!(["LiveMigrate"]), json!(["LiveMigrate", "Evict"])])),
        ) {
            let mut now = suspended_pair(original.clone());
            if let Some(v) = &cr_later {
                now.kubevirt.as_mut().unwrap()["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = v.clone();
            }
            if let Some(v) = &values_later {
                *now.chart.as_mut().unwrap().pointer_mut(VALUES_PTR).unwrap() = v.clone();
            }
            let intent = intent(Phase::Post);
            let (mut cr_warnings, mut chart_warnings) = (Vec::new(), Vec::new());
            let mut end = now.clone();
            for step in crate::plan::order::steps(&intent) {
                if let Some(plan) = crate::plan::order::plan_step(&intent, &step, &end).unwrap() {
                    let reasons = plan.warnings.iter().map(|w| w.reason);
                    match step.target.kind {
                        Kind::KubeVirt => cr_warnings.extend(reasons),
                        _ => chart_warnings.extend(reasons),
                    }
                    let obj = end.get(step.target.kind).unwrap();
                    end.set(step.target.kind, Some(apply(obj, &plan)));
                }
            }
            // A later choice: another value than the one recorded, or than our `[]`. The values
            // had no override before pre, so any but `[]` is one (no blind restorer here).
            let cr_choice = cr_later.clone().filter(|c| Some(c) != original.as_ref());
            let values_choice = values_later.clone().filter(|v| *v != json!([]));
            let cr = methods(end.kubevirt.as_ref().unwrap()).unwrap();
            let values = lookup(end.chart.as_ref().unwrap(), VALUES_PATH).unwrap().cloned();
            let case = format!("cr {cr:?} values {values:?} original {original:?}");
            let expected_cr = cr_later.clone().or(values_choice.clone()).or(original.clone());
            prop_assert_eq!(&cr, &expected_cr, "the CR: {}", case);
            prop_assert_eq!(&values, &values_choice, "the values: {}", case);
            let said = |choice: &Option<Value>| match choice {
                Some(_) => vec![CHANGED_WHILE_SUSPENDED],
                None => Vec::new(),
            };
            prop_assert_eq!(&cr_warnings, &said(&cr_choice), "the CR's warnings: {}", case);
            prop_assert_eq!(&chart_warnings, &said(&values_choice), "the values' warnings: {}", case);
            // What Fleet renders: the values key if set, else the chart's default (the original).
            let renders = values.clone().or(original.clone());
            let warned = !cr_warnings.is_empty() || !chart_warnings.is_empty();
            prop_assert!(cr == renders || warned, "they disagree, unwarned: {}", case);
        }
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
                let restored = apply(&kv, &kubevirt_post(&kv, None, copy.as_ref(), None).unwrap());
                assert_eq!(methods(&restored).unwrap(), original);
            }
            assert_eq!(post_chart(&chart1), chart0);
        }
    }

    /// `pre`'s ManagedChart write, then a Helm render of the CR from the new values (methods `[]`).

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
                &"removed our comparePatches entry for KubeVirt harvester-system/kubevirt"
                    .to_string()
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
        #![proptest_config(ProptestConfig::with_cases(2000))]

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

    /// A pointer that was there before pre means pre did not change the list: no owners are
    /// recorded, so post gives nothing back.
    #[test]
    fn owners_of_the_list_are_recorded_only_when_pre_changes_it() {
        let mut ours = our_entry(&kv());
        ours["name"] = json!("kubevirt");
        let mut obj = chart(json!({}), Some(json!([longhorn_entry(), ours])));
        obj["metadata"]["managedFields"] = json!([entry(
            "rancher",
            "Update",
            json!({"f:spec": {"f:diff": {"f:comparePatches": {}}}})
        )]);
        let after = pre_chart(&obj);
        let record: CompareRecord = read_record(&after, COMPARE_RECORD).unwrap().unwrap();
        assert_eq!(record.added, Added::Nothing);
        assert!(record.owners.is_empty(), "{record:?}");
        let mut fresh = chart(json!({}), Some(json!([longhorn_entry()])));
        fresh["metadata"]["managedFields"] = obj["metadata"]["managedFields"].clone();
        let record: CompareRecord = read_record(&pre_chart(&fresh), COMPARE_RECORD)
            .unwrap()
            .unwrap();
        assert_eq!(record.owners[0].manager, "rancher");
    }
}
