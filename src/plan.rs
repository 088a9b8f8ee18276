//! What to change: pure functions from the objects' current JSON to conditional JSON Patches.
//!
//! - [`plan_phase`] holds a phase's order of writes and what each object's plan needs of the
//!   other; [`plan_step`] plans one write against the objects as they are now.
//! - The per-object planners below it ([`kubevirt_pre`], [`chart_post`], [`release`], ...) and
//!   the readers ([`methods`], [`read_record`], [`restore_source`], [`owners`]) are shared with
//!   `report`.
//!
//! Every patch starts with a `test` of `/metadata/resourceVersion`, so it applies only to the
//! exact state it was planned from (DESIGN §4.4). The original value is recorded in an annotation
//! in the same patch as the change (DESIGN §5), and a record, once written, is never overwritten.

use json_patch::{Patch, PatchOperation};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::model::{
    CHART_RECORDS, COMPARE_PATH, COMPARE_RECORD, FIELD_MANAGER, KUBEVIRT_COPY, KUBEVIRT_RECORD,
    KUBEVIRT_RECORDS, Kind, METHODS_PATH, METHODS_POINTER, ObjectKey, Target, VALUES_PATH,
    VALUES_RECORD, pointer,
};

/// An object that cannot be planned for. Nothing is written when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// The outcome of planning: a conditional patch, or nothing to do; and what it does, in words.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub patch: Option<Patch>,
    pub actions: Vec<String>,
    /// What the operator must hear about: logged as warnings, in the termination message, and
    /// (for the KubeVirt CR) in a Warning Event.
    pub warnings: Vec<Warning>,
}

/// A warning, with the reason its Event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    pub reason: &'static str,
    pub message: String,
}

/// Warning reasons.
pub const STILL_SUSPENDED: &str = "WorkloadUpdatesStillSuspended";
pub const CHANGED_WHILE_SUSPENDED: &str = "WorkloadUpdateMethodsChangedWhileSuspended";
pub const COMPARE_PATCH_GONE: &str = "ComparePatchRemovedByOthers";

/// Which steps run (DESIGN §4.3), each switchable. The one place that decides whether an object
/// is written at all is [`Steps::writes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    /// The direct patch of the KubeVirt CR's methods.
    pub kubevirt: bool,
    /// The ManagedChart's values override.
    pub values: bool,
    /// The ManagedChart's comparePatches pointer.
    pub compare: bool,
}

impl Steps {
    pub const ALL: Steps = Steps {
        kubevirt: true,
        values: true,
        compare: true,
    };

    pub fn writes(&self, kind: Kind) -> bool {
        match kind {
            Kind::KubeVirt => self.kubevirt,
            Kind::ManagedChart => self.values || self.compare,
            Kind::Migration => false,
        }
    }
}

/// The objects' names. `chart: None` is plain KubeVirt without Fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub kubevirt: ObjectKey,
    pub chart: Option<ObjectKey>,
}

/// What to do: everything a plan depends on besides the objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub phase: Phase,
    pub steps: Steps,
    pub keys: Keys,
    /// The methods `post` applies to our own `[]` when every record is lost.
    pub fallback: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Pre,
    Post,
    Status,
}

/// The two kinds of write on an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// `pre`'s suspension or `post`'s restore, with the records.
    Change,
    /// `post`'s last write: drop our `managedFields` claim (see [`release`]).
    Release,
}

/// One write of a phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub target: Target,
    pub write: Write,
}

/// The objects as last read or written; `None`: not read (step off) or not found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objects {
    pub kubevirt: Option<Value>,
    pub chart: Option<Value>,
}

impl Objects {
    pub fn get(&self, kind: Kind) -> Option<&Value> {
        match kind {
            Kind::KubeVirt => self.kubevirt.as_ref(),
            Kind::ManagedChart => self.chart.as_ref(),
            Kind::Migration => None,
        }
    }

    pub fn set(&mut self, kind: Kind, obj: Option<Value>) {
        match kind {
            Kind::KubeVirt => self.kubevirt = obj,
            Kind::ManagedChart => self.chart = obj,
            Kind::Migration => {}
        }
    }
}

/// A plan that cannot be made, and the object whose content is at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{target}: malformed object: {reason}")]
pub struct Refusal {
    pub target: Target,
    pub reason: Malformed,
}

/// The objects a phase works on, in its order of writes (DESIGN §4.3): `pre` the ManagedChart
/// first, so the values Helm would apply agree with the CR before the CR is touched; `post`
/// the reverse. Only the objects whose steps are on.
pub fn targets(intent: &Intent) -> Vec<Target> {
    let order = match intent.phase {
        Phase::Pre => [Kind::ManagedChart, Kind::KubeVirt],
        Phase::Post => [Kind::KubeVirt, Kind::ManagedChart],
        Phase::Status => return Vec::new(),
    };
    order
        .into_iter()
        .filter(|&k| intent.steps.writes(k))
        .filter_map(|k| intent.keys.target(k))
        .collect()
}

impl Keys {
    /// The named object of `kind` (no ManagedChart without a name).
    pub fn target(&self, kind: Kind) -> Option<Target> {
        match kind {
            Kind::KubeVirt => Some(Target::new(kind, &self.kubevirt)),
            Kind::ManagedChart => self.chart.as_ref().map(|k| Target::new(kind, k)),
            Kind::Migration => None,
        }
    }
}

/// The writes of a phase, in order: `post` releases our claim on each object right after its
/// restore (a separate write: one that also changes a field claims that field again).
pub fn steps(intent: &Intent) -> Vec<Step> {
    let writes: &[Write] = match intent.phase {
        Phase::Post => &[Write::Change, Write::Release],
        _ => &[Write::Change],
    };
    targets(intent)
        .into_iter()
        .flat_map(|target| {
            writes.iter().map(move |&write| Step {
                target: target.clone(),
                write,
            })
        })
        .collect()
}

/// Plans one write against the objects as they are now; `None` when its object was not found.
/// Each object's plan sees the other: `pre` copies the KubeVirt CR's original to the
/// ManagedChart, and the KubeVirt plans read that copy.
pub fn plan_step(intent: &Intent, step: &Step, objects: &Objects) -> Result<Option<Plan>, Refusal> {
    // A refusal names the object whose content is at fault, which may be the other one.
    let refuse = |kind: Kind| {
        let target = intent
            .keys
            .target(kind)
            .unwrap_or_else(|| step.target.clone());
        move |reason| Refusal { target, reason }
    };
    let Some(obj) = objects.get(step.target.kind) else {
        return Ok(None);
    };
    let copy = || match &objects.chart {
        Some(chart) => kubevirt_copy(chart).map_err(refuse(Kind::ManagedChart)),
        None => Ok(None),
    };
    let kv = &intent.keys.kubevirt;
    let own = refuse(step.target.kind);
    let plan = match (intent.phase, step.target.kind, step.write) {
        (Phase::Pre, Kind::KubeVirt, Write::Change) => kubevirt_pre(obj, copy()?.as_ref()),
        (Phase::Pre, Kind::ManagedChart, Write::Change) => {
            let original = match &objects.kubevirt {
                Some(o) => Some(kubevirt_original(o).map_err(refuse(Kind::KubeVirt))?),
                None => None,
            };
            chart_pre(obj, kv, &intent.steps, original.as_ref())
        }
        (Phase::Post, Kind::KubeVirt, Write::Change) => {
            kubevirt_post(obj, intent.fallback.as_deref(), copy()?.as_ref())
        }
        (Phase::Post, Kind::ManagedChart, Write::Change) => chart_post(obj, kv, &intent.steps),
        (_, kind, Write::Release) => release(obj, kind),
        _ => Ok(Plan::default()),
    };
    plan.map(Some).map_err(own)
}

/// Plans the whole phase against the objects as read, each write against the result of the
/// ones before it (the server's own `managedFields` bookkeeping aside). Any malformed object
/// refuses the whole phase, so nothing is written. `phases` writes these one by one, planning
/// each again against the object as the server last returned it.
pub fn plan_phase(intent: &Intent, objects: &Objects) -> Result<Vec<(Step, Plan)>, Refusal> {
    let mut now = objects.clone();
    let mut out = Vec::new();
    for step in steps(intent) {
        let Some(plan) = plan_step(intent, &step, &now)? else {
            continue;
        };
        if let (Some(patch), Some(obj)) = (&plan.patch, now.get(step.target.kind)) {
            let mut next = obj.clone();
            json_patch::patch(&mut next, patch)
                .expect("a plan applies to what it was planned from");
            now.set(step.target.kind, Some(next));
        }
        out.push((step, plan));
    }
    Ok(out)
}

/// Record of a single value: whether it was present, its exact value, and the parent maps that
/// the guard created to hold its replacement (removed again by `post` when they are empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueRecord {
    pub present: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_parents: Vec<String>,
}

impl ValueRecord {
    /// The recorded value: `None` when it was absent.
    pub fn original(&self) -> Option<Value> {
        self.value.clone().filter(|_| self.present)
    }
}

/// What `pre` added to the comparePatches list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Added {
    /// The pointer was already there: `post` leaves it.
    Nothing,
    /// The pointer was appended to an existing entry's `jsonPointers`.
    Pointer,
    /// An existing entry had no `jsonPointers`; the guard created the list.
    PointerList,
    /// A new entry was appended.
    Entry,
}

/// What `pre` did to comparePatches, and for which object, so `post` removes exactly that,
/// whatever names it is configured with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareRecord {
    pub added: Added,
    /// The object the pointer is for (records of earlier versions lack it: the configured
    /// names are used then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<RecordedObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_parents: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedObject {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl RecordedObject {
    fn key(&self) -> ObjectKey {
        ObjectKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

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
    let original = match copy.map(ValueRecord::original) {
        Some(o) if o != current => {
            ed.note(format!(
                "the CR was changed to {} after the ManagedChart was written; the ManagedChart's copy holds the original",
                describe(&current)
            ));
            o
        }
        _ => current,
    };
    ed.note(format!(
        "recorded original workloadUpdateMethods {}",
        describe(&original)
    ));
    ed.write_record(KUBEVIRT_RECORD, &value_record(original, created))?;
    Ok(ed.finish())
}

/// What `pre` records as the KubeVirt CR's original: its record if it has one, else its
/// current methods. `pre` copies this to the ManagedChart.
pub fn kubevirt_original(obj: &Value) -> Result<ValueRecord, Malformed> {
    match kubevirt_record(obj)? {
        Some(r) => Ok(ValueRecord {
            created_parents: Vec::new(),
            ..r
        }),
        None => Ok(value_record(methods(obj)?, Vec::new())),
    }
}

/// The ManagedChart's copy of the KubeVirt CR's original, if `pre` left one.
pub fn kubevirt_copy(chart: &Value) -> Result<Option<ValueRecord>, Malformed> {
    let copy = read_record::<ValueRecord>(chart, KUBEVIRT_COPY)?;
    if let Some(c) = &copy {
        check_methods_record(c)
            .map_err(|_| Malformed(format!("annotation {KUBEVIRT_COPY} is corrupted")))?;
    }
    Ok(copy)
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
    /// No record on the CR, methods `[]`: the copy `pre` wrote on the ManagedChart first.
    ChartCopy,
    /// No record or copy, and the `[]` is ours (our field manager owns it): the configured
    /// fallback.
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
    /// Why, in words.
    pub reason: String,
}

/// The one precedence rule for the original's source: the CR's record, then the ManagedChart's
/// copy (only while the methods are `[]`), then the fallback (only for a `[]` that we wrote).
/// A `[]` that anyone else set, including an administrator's own `[]` that an earlier `post`
/// restored, is left alone, so a rerun of `post` is a no-op.
pub fn restore_source(
    kubevirt: &Value,
    copy: Option<&ValueRecord>,
    fallback: Option<&[String]>,
) -> Result<Restore, Malformed> {
    let current = methods(kubevirt)?;
    let suspended = current.as_ref() == Some(&json!([]));
    let (source, original, reason) = match (kubevirt_record(kubevirt)?, copy) {
        (Some(r), _) if suspended => (Source::CrRecord, Some(r), "the CR's record".to_string()),
        (Some(r), _) => (
            Source::LaterChoice,
            None,
            format!(
                "workloadUpdateMethods was changed to {} while suspended; that later choice is kept \
                 (the recorded original was {})",
                describe(&current),
                describe(&r.original())
            ),
        ),
        (None, Some(c)) if suspended => (
            Source::ChartCopy,
            Some(c.clone()),
            "no record on the CR; the ManagedChart's copy of the original".to_string(),
        ),
        (None, Some(_)) => (
            Source::Nothing,
            None,
            format!(
                "no record on the CR, and its methods are {}, not []: left as they are",
                describe(&current)
            ),
        ),
        (None, None) => match fallback {
            Some(list) if suspended && methods_owned_by_us(kubevirt) => (
                Source::Fallback,
                Some(value_record(Some(json!(list)), Vec::new())),
                "no record of the original; the configured fallback".to_string(),
            ),
            _ => (
                Source::Nothing,
                None,
                format!(
                    "no record of the original and no fallback applies (methods are {}, {}): nothing to restore",
                    describe(&current),
                    if methods_owned_by_us(kubevirt) {
                        "set by us"
                    } else {
                        "not set by us"
                    }
                ),
            ),
        },
    };
    Ok(Restore {
        source,
        original,
        reason,
    })
}

/// `post` on the KubeVirt CR: the original from [`restore_source`] back, exactly, and the
/// record removed. Loud where updates stay off without a record, or where someone changed the
/// methods while suspended; and when it turns updates back on, it says what KubeVirt will do.
pub fn kubevirt_post(
    obj: &Value,
    fallback: Option<&[String]>,
    copy: Option<&ValueRecord>,
) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    let restore = restore_source(obj, copy, fallback)?;
    let current = methods(obj)?;
    match (&restore.original, restore.source) {
        (Some(original), _) => {
            ed.note(format!("restoring from {}", restore.reason));
            ed.restore(METHODS_PATH, original, "workloadUpdateMethods")?;
            if current.as_ref() == Some(&json!([]))
                && let Some(notice) = update_notice(obj, &original.original())
            {
                ed.note(notice);
            }
        }
        (None, Source::LaterChoice) => ed.warn(CHANGED_WHILE_SUSPENDED, restore.reason),
        (None, _) if current.as_ref() == Some(&json!([])) => ed.warn(
            STILL_SUSPENDED,
            format!(
                "automated workload updates stay OFF: {}. If that is not an administrator's \
                 choice, set the methods again (e.g. kubectl -n {} patch kubevirt {} --type merge \
                 -p '{{\"spec\":{{\"workloadUpdateStrategy\":{{\"workloadUpdateMethods\":[\"LiveMigrate\"]}}}}}}')",
                restore.reason,
                text_at(obj, "/metadata/namespace"),
                text_at(obj, "/metadata/name"),
            ),
        ),
        (None, _) => ed.note(restore.reason),
    }
    ed.remove_annotation(KUBEVIRT_RECORD);
    Ok(ed.finish())
}

fn text_at<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    obj.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// What KubeVirt's workload updater will do once `methods` turn updates back on (DESIGN §8):
/// the outdated VMIs it counts, migrated at most `parallelMigrationsPerCluster` (default 5) at
/// a time, or evicted in batches.
pub fn update_notice(kubevirt: &Value, methods: &Option<Value>) -> Option<String> {
    let has = |m: &str| {
        methods
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().any(|v| v == m))
    };
    let (migrate, evict) = (has("LiveMigrate"), has("Evict"));
    if !migrate && !evict {
        return None;
    }
    let outdated = match kubevirt
        .pointer("/status/outdatedVirtualMachineInstanceWorkloads")
        .and_then(Value::as_i64)
    {
        Some(n) => format!("{n} outdated VMIs"),
        None => "the outdated VMIs (KubeVirt reports no count)".into(),
    };
    let number = |ptr: &str, default: i64| {
        kubevirt
            .pointer(ptr)
            .and_then(Value::as_i64)
            .unwrap_or(default)
    };
    let parallel = number(
        "/spec/configuration/migrations/parallelMigrationsPerCluster",
        5,
    );
    let batch = number("/spec/workloadUpdateStrategy/batchEvictionSize", 10);
    let interval = kubevirt
        .pointer("/spec/workloadUpdateStrategy/batchEvictionInterval")
        .and_then(Value::as_str)
        .unwrap_or("1m0s");
    let evicted = format!("evicted in batches of {batch} every {interval}");
    Some(match (migrate, evict) {
        (true, false) => {
            format!("{outdated} will now be live-migrated, at most {parallel} at a time")
        }
        (true, true) => format!(
            "{outdated} will now be live-migrated, at most {parallel} at a time; those that cannot migrate are {evicted}"
        ),
        _ => format!("{outdated} will now be {evicted}, migratable or not"),
    })
}

/// The KubeVirt CR's record of its original, checked.
pub fn kubevirt_record(obj: &Value) -> Result<Option<ValueRecord>, Malformed> {
    let record: Option<ValueRecord> = read_record(obj, KUBEVIRT_RECORD)?;
    if let Some(r) = &record {
        check_methods_record(r)?;
    }
    Ok(record)
}

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

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
}

/// `pre` on the ManagedChart: the values override and the comparePatches pointer, each
/// switchable, and a copy of the KubeVirt CR's `kubevirt_original` (once).
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
        ed.note(format!(
            "copied the KubeVirt CR's original methods {}",
            describe(&original.original())
        ));
        ed.write_record(KUBEVIRT_COPY, original)?;
    }
    if steps.values {
        let current = lookup(obj, VALUES_PATH)?.cloned();
        let record: Option<ValueRecord> = read_record(obj, VALUES_RECORD)?;
        let created = ed.ensure(VALUES_PATH, json!([]), "values override")?;
        if record.is_none() {
            ed.note(format!(
                "recorded original values override {}",
                describe(&current)
            ));
            ed.write_record(VALUES_RECORD, &value_record(current, created))?;
        }
    }
    if steps.compare {
        let record: Option<CompareRecord> = read_record(obj, COMPARE_RECORD)?;
        let list = compare_list(obj)?;
        let ours = format!("KubeVirt {}/{}", kubevirt.namespace, kubevirt.name);
        let (added, created) = if find_pointer(list, kubevirt)?.is_some() {
            ed.note(format!(
                "comparePatches already ignores the methods of {ours}"
            ));
            (Added::Nothing, Vec::new())
        } else if let Some(i) = find_entry(list, kubevirt) {
            let entry = &list.expect("an entry was found")[i];
            if entry.get("jsonPointers").is_some() {
                ed.add(
                    &format!("{}/{i}/jsonPointers/-", pointer(COMPARE_PATH)),
                    json!(METHODS_POINTER),
                );
                ed.note(format!(
                    "appended our pointer to the comparePatches entry for {}",
                    entry_name(entry)
                ));
                (Added::Pointer, Vec::new())
            } else {
                ed.add(
                    &format!("{}/{i}/jsonPointers", pointer(COMPARE_PATH)),
                    json!([METHODS_POINTER]),
                );
                ed.note(format!(
                    "added jsonPointers with our pointer to the comparePatches entry for {}",
                    entry_name(entry)
                ));
                (Added::PointerList, Vec::new())
            }
        } else if list.is_some() {
            ed.add(&format!("{}/-", pointer(COMPARE_PATH)), our_entry(kubevirt));
            ed.note(format!("appended a comparePatches entry for {ours}"));
            (Added::Entry, Vec::new())
        } else {
            let mut created =
                ed.ensure(COMPARE_PATH, json!([our_entry(kubevirt)]), "comparePatches")?;
            created.push(pointer(COMPARE_PATH));
            ed.note(format!("created comparePatches with an entry for {ours}"));
            (Added::Entry, created)
        };
        if record.is_none() {
            ed.write_record(
                COMPARE_RECORD,
                &CompareRecord {
                    added,
                    object: Some(RecordedObject {
                        api_version: Kind::KubeVirt.api_version().into(),
                        kind: Kind::KubeVirt.name().into(),
                        namespace: kubevirt.namespace.clone(),
                        name: kubevirt.name.clone(),
                    }),
                    pointer: Some(METHODS_POINTER.into()),
                    created_parents: created,
                },
            )?;
        }
    }
    Ok(ed.finish())
}

/// `post` on the ManagedChart: the values as recorded, and only the pointer or entry we added.
pub fn chart_post(obj: &Value, kubevirt: &ObjectKey, steps: &Steps) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    kubevirt_copy(obj)?;
    ed.remove_annotation(KUBEVIRT_COPY);
    if steps.values {
        lookup(obj, VALUES_PATH)?;
        match read_record::<ValueRecord>(obj, VALUES_RECORD)? {
            Some(r) => {
                ed.restore(VALUES_PATH, &r, "values override")?;
                ed.remove_annotation(VALUES_RECORD);
            }
            None => ed.note("no record of the values override: values left as they are"),
        }
    }
    if steps.compare {
        let list = compare_list(obj)?;
        match read_record::<CompareRecord>(obj, COMPARE_RECORD)? {
            Some(r) => {
                let key = r
                    .object
                    .as_ref()
                    .map_or_else(|| kubevirt.clone(), RecordedObject::key);
                if r.added != Added::Nothing {
                    remove_our_pointer(&mut ed, list, &key, r.added)?;
                }
                ed.remove_empty(&r.created_parents);
                ed.remove_annotation(COMPARE_RECORD);
            }
            None => ed.note("no record of a comparePatches change: list left as it is"),
        }
    }
    Ok(ed.finish())
}

fn remove_our_pointer(
    ed: &mut Editor,
    list: Option<&Vec<Value>>,
    kubevirt: &ObjectKey,
    added: Added,
) -> Result<(), Malformed> {
    let ours = format!("KubeVirt {}/{}", kubevirt.namespace, kubevirt.name);
    let Some((i, j)) = find_pointer(list, kubevirt)? else {
        ed.warn(
            COMPARE_PATCH_GONE,
            format!(
                "our comparePatches pointer for {ours} was removed by someone else; nothing to remove"
            ),
        );
        return Ok(());
    };
    let entry = &list.expect("a pointer was found")[i];
    let base = format!("{}/{i}", pointer(COMPARE_PATH));
    let pointers = entry["jsonPointers"].as_array().map_or(0, Vec::len);
    if added == Added::Entry && *entry == our_entry(kubevirt) {
        ed.remove(&base);
        ed.note(format!("removed our comparePatches entry for {ours}"));
    } else if added == Added::PointerList && pointers == 1 {
        ed.remove(&format!("{base}/jsonPointers"));
        ed.note(format!(
            "removed the jsonPointers we added to the comparePatches entry for {}",
            entry_name(entry)
        ));
    } else {
        ed.remove(&format!("{base}/jsonPointers/{j}"));
        ed.note(format!(
            "removed our pointer from the comparePatches entry for {}",
            entry_name(entry)
        ));
    }
    Ok(())
}

/// `KubeVirt ns/name` of a comparePatches entry (`*` for an empty namespace, which matches any).
fn entry_name(entry: &Value) -> String {
    let field = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("");
    let ns = match field("namespace") {
        "" => "*",
        ns => ns,
    };
    format!("{} {ns}/{}", field("kind"), field("name"))
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
    let field = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("");
    field("apiVersion") == Kind::KubeVirt.api_version()
        && field("kind") == Kind::KubeVirt.name()
        && field("name") == kubevirt.name
        && (field("namespace").is_empty() || field("namespace") == kubevirt.namespace)
}

fn find_entry(list: Option<&Vec<Value>>, kubevirt: &ObjectKey) -> Option<usize> {
    list?.iter().position(|e| entry_covers(e, kubevirt))
}

/// The (entry, pointer) indexes of our pointer in an entry that covers the KubeVirt CR.
pub fn find_pointer(
    list: Option<&Vec<Value>>,
    kubevirt: &ObjectKey,
) -> Result<Option<(usize, usize)>, Malformed> {
    let Some(list) = list else { return Ok(None) };
    for (i, entry) in list
        .iter()
        .enumerate()
        .filter(|(_, e)| entry_covers(e, kubevirt))
    {
        let pointers = match entry.get("jsonPointers") {
            None => continue,
            Some(Value::Array(p)) => p,
            Some(_) => {
                return Err(Malformed(format!(
                    "spec.diff.comparePatches[{i}].jsonPointers is not a list"
                )));
            }
        };
        if let Some(j) = pointers.iter().position(|p| p == METHODS_POINTER) {
            return Ok(Some((i, j)));
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

/// The KubeVirt CR's methods: absent, or a list of strings.
pub fn methods(obj: &Value) -> Result<Option<Value>, Malformed> {
    let current = lookup(obj, METHODS_PATH)?.cloned();
    match &current {
        Some(v) if !is_string_list(v) => Err(Malformed(format!(
            "spec.workloadUpdateStrategy.workloadUpdateMethods is not a list of strings: {v}"
        ))),
        _ => Ok(current),
    }
}

/// The value at `path`, checking that every parent present is a map.
pub fn lookup<'a>(obj: &'a Value, path: &[&str]) -> Result<Option<&'a Value>, Malformed> {
    let mut node = obj;
    for (depth, seg) in path.iter().enumerate() {
        let Value::Object(map) = node else {
            return Err(Malformed(format!(
                "{} is not a map",
                path[..depth].join(".")
            )));
        };
        match map.get(*seg) {
            Some(next) => node = next,
            None => return Ok(None),
        }
    }
    Ok(Some(node))
}

/// Reads one of our annotations; a value that does not parse is a corrupted record.
pub fn read_record<T: DeserializeOwned>(obj: &Value, key: &str) -> Result<Option<T>, Malformed> {
    let annotations = match obj.pointer("/metadata/annotations") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(a)) => a,
        Some(_) => return Err(Malformed("metadata.annotations is not a map".into())),
    };
    match annotations.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => serde_json::from_str(s)
            .map(Some)
            .map_err(|e| Malformed(format!("annotation {key} is corrupted ({e}): {s:?}"))),
        Some(other) => Err(Malformed(format!(
            "annotation {key} is not a string: {other}"
        ))),
    }
}

fn check_methods_record(r: &ValueRecord) -> Result<(), Malformed> {
    match (&r.present, &r.value) {
        (true, Some(v)) if is_string_list(v) => Ok(()),
        (false, None) => Ok(()),
        _ => Err(Malformed(format!(
            "annotation {KUBEVIRT_RECORD} is corrupted: {}",
            serde_json::to_string(r).unwrap_or_default()
        ))),
    }
}

fn is_string_list(v: &Value) -> bool {
    v.as_array().is_some_and(|l| l.iter().all(Value::is_string))
}

fn value_record(current: Option<Value>, created_parents: Vec<String>) -> ValueRecord {
    ValueRecord {
        present: current.is_some(),
        value: current,
        created_parents,
    }
}

/// A value for logs: `absent`, or its compact JSON.
pub fn describe(v: &Option<Value>) -> String {
    v.as_ref()
        .map_or_else(|| "absent".to_string(), Value::to_string)
}

/// Builds a patch op by op, applying each to a working copy so later decisions see its effect.
struct Editor {
    doc: Value,
    ops: Vec<PatchOperation>,
    actions: Vec<String>,
    warnings: Vec<Warning>,
}

impl Editor {
    fn new(obj: &Value) -> Result<Self, Malformed> {
        if !obj.is_object() {
            return Err(Malformed("the object is not a JSON map".into()));
        }
        let rv = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            .ok_or_else(|| Malformed("metadata.resourceVersion is missing".into()))?;
        let mut ed = Self {
            doc: obj.clone(),
            ops: Vec::new(),
            actions: Vec::new(),
            warnings: Vec::new(),
        };
        ed.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
        Ok(ed)
    }

    fn note(&mut self, action: impl Into<String>) {
        self.actions.push(action.into());
    }

    fn warn(&mut self, reason: &'static str, message: impl Into<String>) {
        self.warnings.push(Warning {
            reason,
            message: message.into(),
        });
    }

    fn push(&mut self, op: Value) {
        let op: PatchOperation = serde_json::from_value(op).expect("planned ops are well-formed");
        json_patch::patch(&mut self.doc, std::slice::from_ref(&op))
            .expect("planned ops apply to the document they were planned from");
        self.ops.push(op);
    }

    fn add(&mut self, path: &str, value: Value) {
        self.push(json!({"op": "add", "path": path, "value": value}));
    }

    fn remove(&mut self, path: &str) {
        self.push(json!({"op": "remove", "path": path}));
    }

    /// Sets `path` to `value` unless it already is; missing parent maps are created in the same
    /// op. Returns the pointers of the maps it created.
    fn ensure(
        &mut self,
        path: &[&str],
        value: Value,
        what: &str,
    ) -> Result<Vec<String>, Malformed> {
        let current = lookup(&self.doc, path)?;
        if current == Some(&value) {
            return Ok(Vec::new());
        }
        let before = describe(&current.cloned());
        // Depth of the first missing parent map, if any.
        let missing =
            (1..path.len()).find(|&d| lookup(&self.doc, &path[..d]).ok().flatten().is_none());
        let created = match missing {
            None => {
                self.add(&pointer(path), value.clone());
                Vec::new()
            }
            Some(d) => {
                let nested = path[d..].iter().rev().fold(value.clone(), |v, seg| {
                    Value::Object(Map::from_iter([(seg.to_string(), v)]))
                });
                self.add(&pointer(&path[..d]), nested);
                (d..path.len()).map(|e| pointer(&path[..e])).collect()
            }
        };
        if !path.starts_with(&["metadata"]) {
            self.note(format!("set {what} to {value} (was {before})"));
        }
        Ok(created)
    }

    /// Puts a recorded value back: the exact value, or no value and no parents we created.
    fn restore(
        &mut self,
        path: &[&str],
        record: &ValueRecord,
        what: &str,
    ) -> Result<(), Malformed> {
        if record.present {
            self.ensure(path, record.value.clone().unwrap_or(Value::Null), what)?;
        } else if lookup(&self.doc, path)?.is_some() {
            self.remove(&pointer(path));
            self.note(format!("removed {what} (it was absent before)"));
        }
        self.remove_empty(&record.created_parents);
        Ok(())
    }

    /// Removes the maps or lists we created, deepest first, where they are now empty.
    fn remove_empty(&mut self, created: &[String]) {
        let mut created: Vec<&String> = created.iter().collect();
        created.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
        for p in created {
            let empty = match self.doc.pointer(p) {
                Some(Value::Object(m)) => m.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if empty {
                self.remove(p);
            }
        }
    }

    fn write_record<T: Serialize>(&mut self, key: &str, record: &T) -> Result<(), Malformed> {
        let text = serde_json::to_string(record).expect("records serialize");
        self.ensure(&["metadata", "annotations", key], Value::String(text), key)?;
        Ok(())
    }

    fn remove_annotation(&mut self, key: &str) {
        if self
            .doc
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .is_some()
        {
            self.remove(&pointer(&["metadata", "annotations", key]));
        }
        if self
            .doc
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            self.remove("/metadata/annotations");
        }
    }

    fn finish(self) -> Plan {
        // Only the resourceVersion test: nothing to do.
        let patch = (self.ops.len() > 1).then_some(Patch(self.ops));
        Plan {
            patch,
            actions: self.actions,
            warnings: self.warnings,
        }
    }
}

#[cfg(test)]
mod tests;
