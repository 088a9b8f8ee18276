//! The KubeVirt CR's suspension and restore, with the one precedence rule for the original
//! ([`restore_source`]). It must not touch the ManagedChart or `managedFields`: those are
//! `chart` and `ownership`.

use serde::Serialize;
use serde_json::{Value, json};

use super::editor::Editor;
use super::fields::{KubeVirtRead, identity};
use super::harvester_upgrade::blind_restorer;
use super::ownership::{
    methods_owned_by_us, note_return, recorded_owners, update_claim_warning, update_claim_warnings,
    update_claims,
};
use super::records::{ValueRecord, describe, is_suspended, kubevirt_record, methods, value_record};
use crate::model::{KUBEVIRT_RECORD, METHODS_PATH};
use crate::vocabulary::{Malformed, Plan};
use crate::warnings::{CHANGED_WHILE_SUSPENDED, STILL_SUSPENDED, UPDATE_CLAIM_LEFT};

/// `pre` on the KubeVirt CR: methods to `[]`, the original recorded once. Without a record on
/// the CR, the original is the ManagedChart's `copy` if there is one, else the current value.
pub fn kubevirt_pre(obj: &Value, copy: Option<&ValueRecord>) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    let current = methods(obj)?;
    let record = kubevirt_record(obj)?;
    let created = ed.ensure(METHODS_PATH, json!([]), "workloadUpdateMethods")?;
    if record.is_some() {
        ed.note("kept the existing record of the original");
        return Ok(ed.finish());
    }
    // The owners go with the value: the copy's, or those of the field as it is now. The copy
    // wins only over an `[]` (Fleet rendered the override after a killed `pre`), as in
    // `restore_source`: a copy left by a `post` killed before its ManagedChart write must not
    // replace a value someone set since.
    let (original, owners) = match copy {
        Some(c) if is_suspended(&current) && c.original() != current => {
            let now = describe(&current);
            ed.note(format!("the CR's methods are {now} but the original is known elsewhere (the ManagedChart's copy, or the value in place of another suspender's [])"));
            (c.original(), c.owners.clone())
        }
        _ => (current, recorded_owners(obj, METHODS_PATH)),
    };
    let recorded = describe(&original);
    ed.note(format!(
        "recorded original workloadUpdateMethods {recorded}"
    ));
    ed.write_record(KUBEVIRT_RECORD, &value_record(original, created, owners))?;
    Ok(ed.finish())
}

/// What `pre` records as the KubeVirt CR's original: its record if it has one, else its
/// current methods. `pre` copies this to the ManagedChart.
pub fn kubevirt_original(obj: &Value) -> Result<ValueRecord, Malformed> {
    let owners = recorded_owners(obj, METHODS_PATH);
    Ok(match kubevirt_record(obj)? {
        Some(r) => ValueRecord {
            created_parents: Vec::new(),
            ..r
        },
        None => value_record(methods(obj)?, Vec::new(), owners),
    })
}

/// Where `post` takes the KubeVirt CR's original from, in this order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// The record `pre` wrote on the CR, in the same write as the suspension.
    CrRecord,
    /// A record, but the methods were changed from `[]` while suspended: that later, explicit
    /// choice is kept, and the record dropped.
    LaterChoice,
    /// A record, but the methods are back at the recorded original already (Harvester's
    /// cleanup, or Fleet rendering the restored values): only the record is removed.
    AlreadyRestored,
    /// A record, and the methods were set to the hard-coded `[LiveMigrate]` by one of Harvester's
    /// blind restores (`BLIND_RESTORERS`): the recorded original goes back.
    BlindRestore,
    /// A record, methods `[]`, and the ManagedChart's values override was changed while
    /// suspended: that later choice is what Fleet renders, so the CR follows it.
    ValuesChoice,
    /// No record on the CR, methods `[]`: the copy `pre` wrote on the ManagedChart first.
    ChartCopy,
    /// No record or copy, and the `[]` is ours (our field manager owns it): FALLBACK_METHODS.
    Fallback,
    /// Nothing to restore from: the methods are left as they are.
    Nothing,
}

/// What `post` will restore on the KubeVirt CR, and from where.
#[derive(Debug, Clone, PartialEq)]
pub struct Restore {
    pub source: Source,
    /// The value to restore; `None` with [`Source::Nothing`].
    pub original: Option<ValueRecord>,
    pub reason: String,
}

impl Restore {
    fn new(source: Source, original: Option<ValueRecord>, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self {
            source,
            original,
            reason,
        }
    }
}

/// The one precedence rule for the original's source: the CR's record, then the ManagedChart's
/// copy (only while the methods are `[]`), then the fallback (only for a `[]` that we wrote).
/// A `[]` that anyone else set, including an administrator's own `[]` that an earlier `post`
/// restored, is left alone, so a rerun of `post` is a no-op.
pub fn restore_source(
    kubevirt: &Value,
    copy: Option<&ValueRecord>,
    fallback: Option<&[String]>,
    values_choice: Option<&Value>,
) -> Result<Restore, Malformed> {
    let current = methods(kubevirt)?;
    Ok(match (kubevirt_record(kubevirt)?, copy) {
        (Some(r), _) => from_record(kubevirt, r, &current, values_choice),
        (None, Some(c)) if is_suspended(&current) => Restore::new(
            Source::ChartCopy,
            Some(c.clone()),
            "the ManagedChart's copy of the original, as the CR has no record",
        ),
        (None, Some(_)) => Restore::new(
            Source::Nothing,
            None,
            format!(
                "already restored on the CR: no record there, and its methods are {}",
                describe(&current)
            ),
        ),
        (None, None) => from_fallback(kubevirt, &current, fallback),
    })
}

fn from_record(
    kubevirt: &Value,
    r: ValueRecord,
    current: &Option<Value>,
    values_choice: Option<&Value>,
) -> Restore {
    let recorded = describe(&r.original());
    match (
        values_choice,
        blind_restorer(kubevirt, METHODS_PATH, current),
    ) {
        (Some(v), _) if is_suspended(current) => Restore::new(
            Source::ValuesChoice,
            Some(value_record(Some(v.clone()), Vec::new(), r.owners)),
            format!(
                "the ManagedChart's values override, changed to {v} while suspended (the \
                 recorded original was {recorded}): the CR follows what Fleet renders"
            ),
        ),
        _ if is_suspended(current) => Restore::new(Source::CrRecord, Some(r), "the CR's record"),
        _ if r.original() == *current => Restore::new(
            Source::AlreadyRestored,
            None,
            format!(
                "already back at the recorded original {} (restored by someone else, e.g. \
                 Harvester's upgrade cleanup)",
                describe(current)
            ),
        ),
        (_, Some(blind)) => Restore::new(
            Source::BlindRestore,
            Some(r),
            format!(
                "the CR's record: {blind} wrote a hard-coded {} over the recorded original \
                 {recorded} (Harvester's upgrade cleanup), which goes back",
                describe(current),
            ),
        ),
        (_, None) => Restore::new(
            Source::LaterChoice,
            None,
            format!(
                "workloadUpdateMethods was changed to {} while suspended; that later choice is kept \
                 (the recorded original was {recorded})",
                describe(current),
            ),
        ),
    }
}

fn from_fallback(
    kubevirt: &Value,
    current: &Option<Value>,
    fallback: Option<&[String]>,
) -> Restore {
    let suspended = is_suspended(current);
    let ours = methods_owned_by_us(kubevirt);
    let nothing = match fallback {
        Some(list) if suspended && ours => {
            let original = value_record(Some(json!(list)), Vec::new(), Vec::new());
            let reason =
                "FALLBACK_METHODS, as no record of the original is left and the [] is ours";
            return Restore::new(Source::Fallback, Some(original), reason);
        }
        _ if !suspended => format!(
            "nothing to restore: no record of ours, and the methods are {} (already restored, or \
             never suspended)",
            describe(current)
        ),
        _ if ours => {
            "no record of the original and no FALLBACK_METHODS: the [] that pre wrote stays".into()
        }
        _ => "no record of ours, and this [] was not written by the guard: it stays".into(),
    };
    Restore::new(Source::Nothing, None, nothing)
}

/// `post` on the KubeVirt CR: the original from [`restore_source`] back, exactly, and the record
/// removed; when it turns updates back on, it says what KubeVirt will do.
pub fn kubevirt_post(
    obj: &Value,
    fallback: Option<&[String]>,
    copy: Option<&ValueRecord>,
    values_choice: Option<&Value>,
) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    let restore = restore_source(obj, copy, fallback, values_choice)?;
    let current = methods(obj)?;
    match (&restore.original, restore.source) {
        (Some(original), _) => {
            ed.note(format!("restoring from {}", restore.reason));
            ed.restore(METHODS_PATH, original, "workloadUpdateMethods")?;
            // Only appliers get the field back: a recorded `Update` claim on the methods is the
            // upstream hazard (a stale kubectl-patch or upgrade-toolkit claim that makes the next
            // chart change conflict), which one cycle of the guard heals.
            let appliers = original.owners.iter();
            let appliers = appliers.filter(|o| o.operation == "Apply").cloned().collect();
            note_return(&mut ed, METHODS_PATH, appliers, Vec::new());
            if (is_suspended(&current) || restore.source == Source::BlindRestore)
                && let Some(notice) = update_notice(obj, &original.original())
            {
                ed.note(notice);
            }
        }
        // A later choice made by an `Update` (kubectl edit or patch) holds a claim that the
        // restored values' next deploy conflicts with: say so where the choice is kept.
        (None, Source::LaterChoice) => {
            let kept = describe(&current);
            ed.note(format!("removed our record of the original; kept the methods {kept} set while suspended"));
            let mut text = vec![restore.reason];
            text.extend(update_claim_warnings(obj));
            ed.warn(CHANGED_WHILE_SUSPENDED, text.join("; "))
        }
        // Back at the original already. An upgrade's hard-coded restore (the add-on's Finalize,
        // that release's cleanup) left its `Update` claim, which the next chart change would
        // conflict with (harvester#10899): the field goes back to the owners it had before the
        // upgrade, the claim with it. Anyone else's claim stays, and is named, as `status` names it.
        (None, Source::AlreadyRestored) => {
            ed.note(restore.reason);
            let blind = blind_restorer(obj, METHODS_PATH, &current);
            if let (Some(blind), Some(record)) = (&blind, kubevirt_record(obj)?) {
                let appliers = record.owners.into_iter();
                let appliers = appliers.filter(|o| o.operation == "Apply").collect();
                note_return(&mut ed, METHODS_PATH, appliers, vec![blind.clone()]);
            }
            for other in update_claims(obj).filter(|o| Some(&o.manager) != blind.as_ref()) {
                ed.warn(UPDATE_CLAIM_LEFT, update_claim_warning(&other.manager));
            }
        }
        (None, _) if is_suspended(&current) => ed.warn(
            STILL_SUSPENDED,
            format!(
                "automated workload updates stay OFF: {}. If that is not an administrator's \
                 choice, set the methods again (e.g. kubectl -n {} patch kubevirt {} --type merge \
                 -p '{{\"spec\":{{\"workloadUpdateStrategy\":{{\"workloadUpdateMethods\":[\"LiveMigrate\"]}}}}}}')",
                restore.reason,
                identity(obj).1,
                identity(obj).2,
            ),
        ),
        (None, _) => ed.note(restore.reason),
    }
    ed.remove_annotation(KUBEVIRT_RECORD);
    Ok(ed.finish())
}

/// What KubeVirt's workload updater will do once `methods` turn updates back on, from its
/// source (docs/design.md, "What KubeVirt does next"): it acts about 5 s after the CR changes;
/// each pass creates up to `parallelMigrationsPerCluster` (default 5) migrations minus the
/// active ones, so Pending objects can outnumber that; the migration controller runs at most that
/// many in the cluster and `parallelOutboundMigrationsPerNode` (default 2) from any one node;
/// only live-migratable VMIs migrate; `Evict` goes in batches; `[]` cancels nothing created.
pub fn update_notice(kubevirt: &Value, methods: &Option<Value>) -> Option<String> {
    let list = methods.as_ref().and_then(Value::as_array);
    let has = |m: &str| list.is_some_and(|l| l.iter().any(|v| v == m));
    let migrate = has("LiveMigrate");
    let evict = has("Evict");
    if !migrate && !evict {
        return None;
    }
    let read = KubeVirtRead::of(kubevirt);
    let outdated = match read.outdated() {
        Some(1) => "the 1 outdated VMI".to_string(),
        Some(n) => format!("the {n} outdated VMIs"),
        None => "the outdated VMIs (KubeVirt reports no count)".into(),
    };
    // KubeVirt's defaults where the CR sets none.
    let (cluster, node) = read.parallel_migrations();
    let (cluster, node) = (cluster.unwrap_or(5), node.unwrap_or(2));
    let (batch, interval) = read.eviction_batches();
    let (batch, interval) = (batch.unwrap_or(10), interval.unwrap_or("1m0s"));
    let migrated = format!(
        "live-migrated, at most {cluster} at a time in the cluster and {node} at a time from any \
         one node (it may create more migration objects than that: they wait Pending for a slot)"
    );
    let evicted = format!("evicted in batches of {batch} every {interval}");
    let what = match (migrate, evict) {
        (true, false) => format!(
            "{outdated} will be {migrated}; those that cannot live-migrate stay outdated until \
             restarted"
        ),
        (true, true) => {
            format!("{outdated} will be {migrated}; those that cannot live-migrate are {evicted}")
        }
        _ => format!("{outdated} will be {evicted}, migratable or not"),
    };
    Some(format!(
        "KubeVirt's workload updater acts within about 5 s: {what}. Setting the methods to [] \
         again stops new ones but cancels none already created. The count is KubeVirt's \
         (status.outdatedVirtualMachineInstanceWorkloads): after a complete upgrade, only what \
         the node drains did not move (each drain moves its VMs to the new virt-launcher), such \
         as VMs waiting on a CPU or memory hot-plug"
    ))
}

/// What suspension costs while it lasts (Harvester's docs; kubevirt#17329).
pub const HOTPLUG_NOTICE: &str = "While updates are suspended, CPU and memory hot-plug of running \
     VMs is not applied live (it needs the live migration that the workload updater would start); \
     it is applied after post, or when a VM restarts";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ownership::update_claim_warning;
    use crate::plan::testing::*;

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
        let obj =
            json!({"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}, "spec": {}});
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
                created_parents: vec!["/spec/workloadUpdateStrategy".into()],
                owners: vec![],
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

    /// A copy left on the ManagedChart by a `post` killed before its ManagedChart write is
    /// stale: the next `pre` records the value someone set since, not the copy. Over an `[]`
    /// (Fleet rendered a killed `pre`'s override) the copy is the original.
    #[test]
    fn pre_takes_the_copy_only_over_an_empty_list() {
        let stale = value_record(Some(json!(["LiveMigrate"])), Vec::new(), Vec::new());
        for (current, recorded) in [
            (Some(json!(["Evict"])), Some(json!(["Evict"]))),
            (None, None),
            (Some(json!([])), Some(json!(["LiveMigrate"]))),
        ] {
            let obj = kubevirt(current.clone());
            let after = apply(&obj, &kubevirt_pre(&obj, Some(&stale)).unwrap());
            let record = kubevirt_record(&after).unwrap().unwrap();
            assert_eq!(record.original(), recorded, "{current:?}");
        }
    }

    #[test]
    fn second_pre_keeps_the_first_record() {
        let obj = kubevirt(Some(json!(["LiveMigrate"])));
        let once = pre_kv(&obj);
        assert_eq!(kubevirt_pre(&once, None).unwrap().patch, None);
        // Something put LiveMigrate back in between: pre suspends again but keeps the first record.
        let mut reverted = once.clone();
        reverted["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] =
            json!(["LiveMigrate"]);
        let again = pre_kv(&reverted);
        assert_eq!(again, once);
    }

    #[test]
    fn post_without_record_changes_nothing_unless_fallback_and_empty() {
        let fallback = vec!["LiveMigrate".to_string()];
        for m in [None, Some(json!(["Evict"])), Some(json!(["LiveMigrate"]))] {
            let obj = kubevirt(m);
            assert_eq!(
                kubevirt_post(&obj, Some(&fallback), None, None)
                    .unwrap()
                    .patch,
                None
            );
        }
        // An [] that someone else set (an administrator, or the original an earlier post restored).
        let mut obj = kubevirt(Some(json!([])));
        obj["metadata"]["managedFields"] = json!([{"manager": "kubectl-patch", "operation": "Update",
        "fieldsV1": {"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}}}]);
        assert_eq!(
            kubevirt_post(&obj, Some(&fallback), None, None)
                .unwrap()
                .patch,
            None
        );
        // Our [] whose record was lost: the fallback applies.
        obj["metadata"]["managedFields"][0]["manager"] = json!(FIELD_MANAGER);
        assert_eq!(kubevirt_post(&obj, None, None, None).unwrap().patch, None);
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
                kubevirt_post(&obj, None, None, None).unwrap_err(),
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
                // A value this version does not know: a later version's record (records.rs).
                "written by a later version",
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

    #[test]
    fn restore_source_precedence() {
        let live = json!(["LiveMigrate"]);
        let copy = value_record(Some(json!(["Evict"])), Vec::new(), Vec::new());
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
        // Back at the original already (Harvester's cleanup, or Fleet rendering it).
        let mut restored = recorded.clone();
        restored["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = live.clone();
        // An administrator's [LiveMigrate, Evict], blindly overwritten with [LiveMigrate] by
        // Harvester v1.8.0's cleanup (an Update as `harvester`), or by an operator's kubectl.
        let both = json!(["LiveMigrate", "Evict"]);
        let mut blind = pre_kv(&kubevirt(Some(both.clone())));
        blind["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = live.clone();
        let mut by_operator = blind.clone();
        blind["metadata"]["managedFields"] =
            json!([entry("harvester", "Update", methods_fields())]);
        by_operator["metadata"]["managedFields"] =
            json!([entry("kubectl-edit", "Update", methods_fields())]);
        let values_later = json!(["LiveMigrate", "Evict"]);
        type Case<'a> = (
            &'a Value,
            Option<&'a ValueRecord>,
            Option<&'a [String]>,
            Option<&'a Value>,
            Source,
        );
        let cases: Vec<Case> = vec![
            (
                &recorded,
                Some(&copy),
                Some(&fallback),
                None,
                Source::CrRecord,
            ),
            (&ours, Some(&copy), Some(&fallback), None, Source::ChartCopy),
            (&ours, None, Some(&fallback), None, Source::Fallback),
            (&ours, None, None, None, Source::Nothing),
            // Not []: the copy and the fallback do not apply.
            (&on, Some(&copy), Some(&fallback), None, Source::Nothing),
            (&absent, None, Some(&fallback), None, Source::Nothing),
            // [] that is not ours: the fallback does not apply.
            (&theirs, None, Some(&fallback), None, Source::Nothing),
            // A record, but someone set [Evict] while suspended: their later choice stands.
            (
                &changed,
                Some(&copy),
                Some(&fallback),
                None,
                Source::LaterChoice,
            ),
            (&restored, Some(&copy), None, None, Source::AlreadyRestored),
            (&blind, None, None, None, Source::BlindRestore),
            (&by_operator, None, None, None, Source::LaterChoice),
            // The values were changed while suspended: the CR follows them.
            (
                &recorded,
                None,
                None,
                Some(&values_later),
                Source::ValuesChoice,
            ),
        ];
        for (obj, copy, fallback, values, want) in cases {
            let r = restore_source(obj, copy, fallback, values).unwrap();
            assert_eq!(r.source, want, "{obj}");
            assert_eq!(
                r.original.is_some(),
                !matches!(
                    want,
                    Source::Nothing | Source::LaterChoice | Source::AlreadyRestored
                )
            );
            // kubevirt_post acts on exactly this source.
            let after = apply(obj, &kubevirt_post(obj, fallback, copy, values).unwrap());
            let expected = match want {
                Source::CrRecord => Some(live.clone()),
                Source::ChartCopy => Some(json!(["Evict"])),
                Source::Fallback => Some(json!(fallback.unwrap())),
                Source::BlindRestore => Some(both.clone()),
                Source::ValuesChoice => Some(values_later.clone()),
                Source::Nothing | Source::LaterChoice | Source::AlreadyRestored => {
                    methods(obj).unwrap()
                }
            };
            assert_eq!(
                read_record::<ValueRecord>(&after, KUBEVIRT_RECORD).unwrap(),
                None,
                "{want:?}: the record goes"
            );
            assert_eq!(methods(&after).unwrap(), expected, "{want:?}");
        }
    }

    // ---- operator safety: nothing left off in silence, later choices kept, what happens next ----

    #[test]
    fn post_keeps_a_change_made_while_suspended_and_warns() {
        let suspended = pre_kv(&kubevirt(Some(json!(["LiveMigrate"]))));
        for later in [json!(["Evict"]), json!(["LiveMigrate", "Evict"])] {
            let mut changed = suspended.clone();
            changed["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = later.clone();
            let plan = kubevirt_post(&changed, None, None, None).unwrap();
            let after = apply(&changed, &plan);
            assert_eq!(methods(&after).unwrap(), Some(later.clone()));
            assert_eq!(
                read_record::<ValueRecord>(&after, KUBEVIRT_RECORD).unwrap(),
                None
            );
            assert_eq!(plan.warnings.len(), 1);
            assert_eq!(plan.warnings[0].reason, CHANGED_WHILE_SUSPENDED);
            assert!(plan.warnings[0].message.contains(r#"["LiveMigrate"]"#));
            // The write says what it did: the record removed, the later choice kept.
            assert_eq!(
                plan.actions,
                [format!(
                    "removed our record of the original; kept the methods {later} set while suspended"
                )]
            );
        }
    }

    #[test]
    fn a_kept_change_names_the_update_claim_that_a_chart_change_conflicts_with() {
        let mut changed = pre_kv(&kubevirt(Some(json!(["LiveMigrate"]))));
        changed["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!(["Evict"]);
        // Whoever made the change: an `Update` (kubectl edit) blocks, an `Apply` does not.
        for (operation, claim) in [("Update", true), ("Apply", false)] {
            changed["metadata"]["managedFields"] = json!([
                entry("helm", "Apply", json!({"f:spec": {"f:x": {}}})),
                entry("kubectl-edit", operation, methods_fields()),
            ]);
            let plan = kubevirt_post(&changed, None, None, None).unwrap();
            assert_eq!(plan.warnings.len(), 1);
            let message = &plan.warnings[0].message;
            assert!(message.starts_with("workloadUpdateMethods was changed"));
            assert_eq!(
                message.ends_with(&format!("; {}", update_claim_warning("kubectl-edit"))),
                claim,
                "{operation}: {message}"
            );
            let named = "kubectl-edit holds an Update claim on \
                         .spec.workloadUpdateStrategy.workloadUpdateMethods: a chart (Helm 4) \
                         change of the field will conflict with it";
            assert_eq!(message.contains(named), claim, "{operation}: {message}");
        }
    }

    #[test]
    fn post_that_leaves_updates_off_without_a_record_warns() {
        let off = kubevirt(Some(json!([])));
        let plan = kubevirt_post(&off, None, None, None).unwrap();
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
                kubevirt_post(&kubevirt(m), None, None, None)
                    .unwrap()
                    .warnings,
                []
            );
        }
        // A normal restore warns of nothing.
        let suspended = pre_kv(&kubevirt(Some(json!(["LiveMigrate"]))));
        assert_eq!(
            kubevirt_post(&suspended, None, None, None)
                .unwrap()
                .warnings,
            []
        );
    }

    #[test]
    fn turning_updates_back_on_says_what_kubevirt_will_do() {
        let mut obj = kubevirt(Some(json!(["LiveMigrate"])));
        obj["status"] = json!({"outdatedVirtualMachineInstanceWorkloads": 7});
        obj["spec"]["configuration"] = json!({"migrations": {"parallelMigrationsPerCluster": 3}});
        obj["spec"]["configuration"]["migrations"]["parallelOutboundMigrationsPerNode"] = json!(1);
        let plan = kubevirt_post(&pre_kv(&obj), None, None, None).unwrap();
        let said = plan.actions.join("\n");
        for fact in [
            "acts within about 5 s",
            "the 7 outdated VMIs will be live-migrated",
            "at most 3 at a time in the cluster and 1 at a time from any one node",
            "they wait Pending for a slot",
            "those that cannot live-migrate stay outdated until restarted",
            "cancels none already created",
            // Not a wave of every VM: the drains moved the rest.
            "only what the node drains did not move",
            "such as VMs waiting on a CPU or memory hot-plug",
        ] {
            assert!(said.contains(fact), "{fact:?} not in {said}");
        }
        let notice = |m: Value, status: Value| {
            let mut o = kubevirt(None);
            o["status"] = status;
            update_notice(&o, &Some(m))
        };
        assert_eq!(notice(json!([]), json!({})), None);
        let defaults = notice(json!(["LiveMigrate"]), json!({})).unwrap();
        assert!(
            defaults.contains("the outdated VMIs (KubeVirt reports no count) will be live-migrated, at most 5 at a time in the cluster and 2 at a time from any one node"),
            "{defaults}"
        );
        let evict = notice(
            json!(["Evict"]),
            json!({"outdatedVirtualMachineInstanceWorkloads": 1}),
        )
        .unwrap();
        assert!(
            evict.contains(
                "the 1 outdated VMI will be evicted in batches of 10 every 1m0s, migratable or not"
            ),
            "{evict}"
        );
        let both = notice(json!(["LiveMigrate", "Evict"]), json!({})).unwrap();
        assert!(
            both.contains("those that cannot live-migrate are evicted in batches"),
            "{both}"
        );
        // Restoring an original that keeps updates off says nothing of the kind.
        let off = pre_kv(&kubevirt(None));
        assert!(
            kubevirt_post(&off, None, None, None)
                .unwrap()
                .actions
                .iter()
                .all(|a| !a.contains("workload updater"))
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Whatever was there, whatever is set while suspended (other than []), post keeps it.
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
            prop_assert_eq!(kubevirt_post(&restored, None, None, None).unwrap().patch, None);
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
    }

    /// Each way of having nothing to restore says which it is.
    #[test]
    fn nothing_to_restore_says_why() {
        let reason = |obj: &Value| restore_source(obj, None, None, None).unwrap().reason;
        let on = kubevirt(Some(json!(["LiveMigrate"])));
        assert!(
            reason(&on).contains("already restored, or never suspended"),
            "{}",
            reason(&on)
        );
        let theirs = kubevirt(Some(json!([])));
        assert!(
            reason(&theirs).contains("not written by the guard"),
            "{}",
            reason(&theirs)
        );
        let mut ours = theirs.clone();
        ours["metadata"]["managedFields"] =
            json!([entry(FIELD_MANAGER, "Update", methods_fields())]);
        assert!(
            reason(&ours).contains("the [] that pre wrote stays"),
            "{}",
            reason(&ours)
        );
        for obj in [&on, &theirs, &ours] {
            assert_eq!(
                restore_source(obj, None, None, None).unwrap().source,
                Source::Nothing
            );
        }
    }

    /// What pre copies to the ManagedChart carries the owners of the field as it is.
    #[test]
    fn the_original_copied_to_the_chart_carries_its_owners() {
        let mut obj = kubevirt(Some(json!(["LiveMigrate"])));
        obj["metadata"]["managedFields"] = json!([entry("helm", "Apply", methods_fields())]);
        let original = kubevirt_original(&obj).unwrap();
        assert_eq!(original.owners.len(), 1);
        assert_eq!(original.owners[0].manager, "helm");
        assert_eq!(original.owners[0].operation, "Apply");
    }
}
