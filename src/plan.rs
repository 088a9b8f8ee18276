//! What to change: pure functions from an object's current JSON to a conditional JSON Patch.
//!
//! Every patch starts with a `test` of `/metadata/resourceVersion`, so it applies only to the
//! exact state it was planned from (DESIGN §4.4). The original value is recorded in an annotation
//! in the same patch as the change (DESIGN §5), and a record, once written, is never overwritten.

use json_patch::{Patch, PatchOperation};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Every annotation the guard writes sits under this prefix.
pub const ANNOTATION_PREFIX: &str = "workload-update-guard.harvesterhci.io/";
/// On the KubeVirt CR: the original `spec.workloadUpdateStrategy.workloadUpdateMethods`.
pub const KUBEVIRT_RECORD: &str =
    "workload-update-guard.harvesterhci.io/original-workload-update-methods";
/// On the ManagedChart: the original `spec.values.kubevirt.spec.workloadUpdateStrategy.workloadUpdateMethods`.
pub const VALUES_RECORD: &str =
    "workload-update-guard.harvesterhci.io/original-values-workload-update-methods";
/// On the ManagedChart: a copy of the KubeVirt CR's original methods, written by `pre` in the
/// first write (before the CR is touched) and removed by `post` in the last. If Fleet re-renders
/// the CR with `[]` between our two writes (say the Job was killed in between), this copy still
/// holds the true original.
pub const KUBEVIRT_COPY: &str =
    "workload-update-guard.harvesterhci.io/kubevirt-original-workload-update-methods";
/// On the ManagedChart: what the guard added to `spec.diff.comparePatches`.
pub const COMPARE_RECORD: &str = "workload-update-guard.harvesterhci.io/compare-patch";

/// The field manager of every write, so `managedFields` says who changed what.
pub const FIELD_MANAGER: &str = "workload-update-guard";

/// The pointer that Fleet must ignore on the KubeVirt CR.
pub const METHODS_POINTER: &str = "/spec/workloadUpdateStrategy/workloadUpdateMethods";
const METHODS_PATH: &[&str] = &["spec", "workloadUpdateStrategy", "workloadUpdateMethods"];
const VALUES_PATH: &[&str] = &[
    "spec",
    "values",
    "kubevirt",
    "spec",
    "workloadUpdateStrategy",
    "workloadUpdateMethods",
];
const COMPARE_PATH: &[&str] = &["spec", "diff", "comparePatches"];
const KUBEVIRT_API_VERSION: &str = "kubevirt.io/v1";

/// An object that cannot be planned for. Nothing is written when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// The outcome of planning: a conditional patch, or nothing to do; and what it does, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub patch: Option<Patch>,
    pub actions: Vec<String>,
}

/// A namespaced object's name: the KubeVirt CR or the ManagedChart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareRecord {
    pub added: Added,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_parents: Vec<String>,
}

/// `pre` on the KubeVirt CR: methods to `[]`, the original recorded once. Without a record on
/// the CR, the original is the ManagedChart's `copy` if there is one, else the current value.
pub fn kubevirt_pre(obj: &Value, copy: Option<&ValueRecord>) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    let current = methods(obj)?;
    let record: Option<ValueRecord> = read_record(obj, KUBEVIRT_RECORD)?;
    if let Some(r) = &record {
        check_methods_record(r)?;
    }
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
    match read_record::<ValueRecord>(obj, KUBEVIRT_RECORD)? {
        Some(r) => {
            check_methods_record(&r)?;
            Ok(ValueRecord {
                created_parents: Vec::new(),
                ..r
            })
        }
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

/// `post` on the KubeVirt CR: the recorded original back, exactly. Without a record on the CR
/// but with the ManagedChart's `copy`, and methods `[]`: the copy. Without either, the fallback
/// list, and only if the methods are `[]` *and* that `[]` was written by us (our field manager
/// owns it): then our record was lost. A `[]` that anyone else set, including an administrator's
/// own `[]` that an earlier `post` restored, is left alone, so a rerun of `post` is a no-op.
pub fn kubevirt_post(
    obj: &Value,
    fallback: Option<&[String]>,
    copy: Option<&ValueRecord>,
) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    let current = methods(obj)?;
    let suspended = current.as_ref() == Some(&json!([]));
    match (read_record::<ValueRecord>(obj, KUBEVIRT_RECORD)?, copy) {
        (Some(r), _) => {
            check_methods_record(&r)?;
            if !suspended {
                ed.note(format!(
                    "workloadUpdateMethods was changed to {} while suspended; restoring the recorded original",
                    describe(&current)
                ));
            }
            ed.restore(METHODS_PATH, &r, "workloadUpdateMethods")?;
            ed.remove_annotation(KUBEVIRT_RECORD);
        }
        (None, Some(copy)) if suspended => {
            ed.note("no record on the CR; restoring the ManagedChart's copy of the original");
            ed.restore(METHODS_PATH, copy, "workloadUpdateMethods")?;
        }
        (None, Some(_)) => ed.note(format!(
            "no record on the CR, and its methods are {}, not []: left as they are",
            describe(&current)
        )),
        (None, None) => match fallback {
            Some(list) if suspended && methods_owned_by_us(obj) => {
                ed.note("no record of the original; applying the configured fallback");
                ed.ensure(METHODS_PATH, json!(list), "workloadUpdateMethods")?;
            }
            _ => ed.note(format!(
                "no record of the original and no fallback applies (methods are {}, {}): nothing to restore",
                describe(&current),
                if methods_owned_by_us(obj) { "set by us" } else { "not set by us" }
            )),
        },
    }
    Ok(ed.finish())
}

/// Whether our field manager owns `workloadUpdateMethods` according to `managedFields`.
pub fn methods_owned_by_us(obj: &Value) -> bool {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries.iter().any(|e| {
                e["manager"] == FIELD_MANAGER
                    && e.pointer(
                        "/fieldsV1/f:spec/f:workloadUpdateStrategy/f:workloadUpdateMethods",
                    )
                    .is_some()
            })
        })
}

/// `pre` on the ManagedChart: the values override and the comparePatches pointer, each
/// switchable, and a copy of the KubeVirt CR's `kubevirt_original` (once).
pub fn chart_pre(
    obj: &Value,
    kubevirt: &ObjectKey,
    values: bool,
    compare: bool,
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
    if values {
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
    if compare {
        let record: Option<CompareRecord> = read_record(obj, COMPARE_RECORD)?;
        let list = compare_list(obj)?;
        let (added, created) = if find_pointer(list, kubevirt)?.is_some() {
            ed.note("comparePatches already ignores workloadUpdateMethods");
            (Added::Nothing, Vec::new())
        } else if let Some(i) = find_entry(list, kubevirt) {
            let entry = &list.expect("an entry was found")[i];
            if entry.get("jsonPointers").is_some() {
                ed.add(
                    &format!("{}/{i}/jsonPointers/-", pointer(COMPARE_PATH)),
                    json!(METHODS_POINTER),
                );
                ed.note(format!("appended the pointer to comparePatches entry {i}"));
                (Added::Pointer, Vec::new())
            } else {
                ed.add(
                    &format!("{}/{i}/jsonPointers", pointer(COMPARE_PATH)),
                    json!([METHODS_POINTER]),
                );
                ed.note(format!("added jsonPointers to comparePatches entry {i}"));
                (Added::PointerList, Vec::new())
            }
        } else if list.is_some() {
            ed.add(&format!("{}/-", pointer(COMPARE_PATH)), our_entry(kubevirt));
            ed.note("appended a comparePatches entry for the KubeVirt CR");
            (Added::Entry, Vec::new())
        } else {
            let mut created =
                ed.ensure(COMPARE_PATH, json!([our_entry(kubevirt)]), "comparePatches")?;
            created.push(pointer(COMPARE_PATH));
            ed.note("created comparePatches with an entry for the KubeVirt CR");
            (Added::Entry, created)
        };
        if record.is_none() {
            ed.write_record(
                COMPARE_RECORD,
                &CompareRecord {
                    added,
                    created_parents: created,
                },
            )?;
        }
    }
    Ok(ed.finish())
}

/// `post` on the ManagedChart: the values as recorded, and only the pointer or entry we added.
pub fn chart_post(
    obj: &Value,
    kubevirt: &ObjectKey,
    values: bool,
    compare: bool,
) -> Result<Plan, Malformed> {
    let mut ed = Editor::new(obj)?;
    kubevirt_copy(obj)?;
    ed.remove_annotation(KUBEVIRT_COPY);
    if values {
        lookup(obj, VALUES_PATH)?;
        match read_record::<ValueRecord>(obj, VALUES_RECORD)? {
            Some(r) => {
                ed.restore(VALUES_PATH, &r, "values override")?;
                ed.remove_annotation(VALUES_RECORD);
            }
            None => ed.note("no record of the values override: values left as they are"),
        }
    }
    if compare {
        let list = compare_list(obj)?;
        match read_record::<CompareRecord>(obj, COMPARE_RECORD)? {
            Some(r) => {
                if r.added != Added::Nothing {
                    remove_our_pointer(&mut ed, list, kubevirt, r.added)?;
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
    let Some((i, j)) = find_pointer(list, kubevirt)? else {
        ed.note("our comparePatches pointer is already gone");
        return Ok(());
    };
    let entry = &list.expect("a pointer was found")[i];
    let base = format!("{}/{i}", pointer(COMPARE_PATH));
    let pointers = entry["jsonPointers"].as_array().map_or(0, Vec::len);
    if added == Added::Entry && *entry == our_entry(kubevirt) {
        ed.remove(&base);
        ed.note(format!("removed our comparePatches entry {i}"));
    } else if added == Added::PointerList && pointers == 1 {
        ed.remove(&format!("{base}/jsonPointers"));
        ed.note(format!(
            "removed the jsonPointers we added to comparePatches entry {i}"
        ));
    } else {
        ed.remove(&format!("{base}/jsonPointers/{j}"));
        ed.note(format!("removed our pointer from comparePatches entry {i}"));
    }
    Ok(())
}

fn our_entry(kubevirt: &ObjectKey) -> Value {
    json!({
        "apiVersion": KUBEVIRT_API_VERSION,
        "kind": "KubeVirt",
        "name": kubevirt.name,
        "namespace": kubevirt.namespace,
        "jsonPointers": [METHODS_POINTER],
    })
}

/// Fleet matches an entry to an object by apiVersion, kind, name and namespace; an empty
/// namespace matches any. An entry for the same name that covers our namespace covers our object.
pub fn entry_covers(entry: &Value, kubevirt: &ObjectKey) -> bool {
    let field = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("");
    field("apiVersion") == KUBEVIRT_API_VERSION
        && field("kind") == "KubeVirt"
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

/// A JSON pointer from path segments (RFC 6901 escaping).
pub fn pointer(segments: &[&str]) -> String {
    segments
        .iter()
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Builds a patch op by op, applying each to a working copy so later decisions see its effect.
struct Editor {
    doc: Value,
    ops: Vec<PatchOperation>,
    actions: Vec<String>,
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
        };
        ed.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
        Ok(ed)
    }

    fn note(&mut self, action: impl Into<String>) {
        self.actions.push(action.into());
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
        }
    }
}

#[cfg(test)]
mod tests;
