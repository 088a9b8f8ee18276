//! The annotation formats `pre` writes and their checked readers, shared with `report`. A value
//! that does not parse is a corrupted record, never a missing one. Nothing here plans a write.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::identity;
use super::json::lookup;
use crate::model::{
    COMPARE_RECORD, KUBEVIRT_COPY, KUBEVIRT_RECORD, METHODS_PATH, METHODS_POINTER, ObjectKey,
    VALUES_PATH, VALUES_RECORD, pointer,
};
use crate::vocabulary::Malformed;

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
    /// The `managedFields` entries that owned the value before `pre` wrote it (not ours).
    /// Empty in records of earlier versions: `post` then gives no ownership back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<RecordedOwner>,
}

/// A `managedFields` entry, as `pre` found it owning a field; `post` gives the field back to the
/// entry that matches all four (docs/design.md, "Field ownership").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedOwner {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    /// The field's parent maps that the entry owned as maps (`.` in `fieldsV1`), dotted
    /// (`spec.diff`): a write that takes a map's last owned child takes the map too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
}

/// What `post` gives back, written by a restore and consumed by the release that follows it
/// (a write of its own: see `ownership::release`): the owners of one field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Return {
    /// The field, as path segments (`["spec", "workloadUpdateStrategy", ...]`).
    pub path: Vec<String>,
    pub owners: Vec<RecordedOwner>,
    /// The managers whose `Update` claim on the field goes: an upgrade's hard-coded restore of
    /// the original (the add-on's Finalize, the hard-coded restore's cleanup), a claim that the
    /// next chart change would conflict with (harvester#10899). Absent in records of earlier versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taken_from: Vec<String>,
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
    /// The owners of the (atomic) list before `pre` changed it; empty in earlier records or
    /// when `pre` did not change the list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<RecordedOwner>,
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
    pub(super) fn key(&self) -> ObjectKey {
        ObjectKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

pub fn kubevirt_record(obj: &Value) -> Result<Option<ValueRecord>, Malformed> {
    methods_record(obj, KUBEVIRT_RECORD)
}

pub fn kubevirt_copy(chart: &Value) -> Result<Option<ValueRecord>, Malformed> {
    methods_record(chart, KUBEVIRT_COPY)
}

/// A record of the methods: absent, or present with a list of strings.
fn methods_record(obj: &Value, key: &str) -> Result<Option<ValueRecord>, Malformed> {
    match read_record::<ValueRecord>(obj, key)? {
        Some(r) if r.present != r.value.is_some() || !r.value.iter().all(is_string_list) => {
            let text = serde_json::to_string(&r).unwrap_or_default();
            Err(corrupted(obj, key, &text))
        }
        record => Ok(record),
    }
}

/// Whether methods are `[]`: what `pre` sets, and what Fleet renders from its values override.
pub fn is_suspended(methods: &Option<Value>) -> bool {
    matches!(methods, Some(Value::Array(list)) if list.is_empty())
}

/// The KubeVirt CR's methods: absent, or a list of strings.
pub fn methods(obj: &Value) -> Result<Option<Value>, Malformed> {
    match lookup(obj, METHODS_PATH)? {
        Some(v) if !is_string_list(v) => Err(Malformed(format!(
            "spec.workloadUpdateStrategy.workloadUpdateMethods is not a list of strings: {v}"
        ))),
        current => Ok(current.cloned()),
    }
}

/// The KubeVirt CR's methods as they are, whatever their type: for a message that says them.
pub fn methods_as_they_are(obj: &Value) -> Option<Value> {
    lookup(obj, METHODS_PATH).ok().flatten().cloned()
}

/// Reads one of our annotations; a value that does not parse is a corrupted record, or one of a
/// later version.
pub fn read_record<T: DeserializeOwned>(obj: &Value, key: &str) -> Result<Option<T>, Malformed> {
    let annotations = match obj.get("metadata").and_then(|m| m.get("annotations")) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(a)) => a,
        Some(_) => return Err(Malformed("metadata.annotations is not a map".into())),
    };
    match annotations.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => serde_json::from_str(s).map(Some).map_err(|e| {
            let detail = format!("{e}: {s:?}");
            if from_a_newer_version(&e) {
                newer(obj, key, &detail)
            } else {
                corrupted(obj, key, &detail)
            }
        }),
        Some(other) => Err(Malformed(format!(
            "annotation {key} is not a string: {other}"
        ))),
    }
}

/// A corrupted record of ours: what is wrong, and the exact commands that recover, in one line.
fn corrupted(obj: &Value, key: &str, detail: &str) -> Malformed {
    let (kind, ns, name) = identity(obj);
    let lower = kind.to_lowercase();
    let drop = format!("kubectl -n {ns} annotate {lower} {name} {key}-");
    let recovery = match key {
        KUBEVIRT_RECORD => format!(
            "to recover, remove it ({drop}): post then restores from the ManagedChart's copy \
             (PHASE=status shows it), or, without a copy, from FALLBACK_METHODS=LiveMigrate"
        ),
        KUBEVIRT_COPY => format!(
            "to recover, remove it ({drop}): post then restores from the KubeVirt CR's record"
        ),
        VALUES_RECORD => format!(
            "to recover, put spec.values.kubevirt.spec.workloadUpdateStrategy.workloadUpdateMethods \
             back as it was before pre (a stock Harvester has none: kubectl -n {ns} patch {lower} \
             {name} --type json -p '[{{\"op\":\"remove\",\"path\":\"{values}\"}}]'), then \
             remove the record ({drop})",
            values = pointer(VALUES_PATH),
        ),
        COMPARE_RECORD => format!(
            "to recover, remove the pointer {METHODS_POINTER} that pre added to \
             spec.diff.comparePatches (kubectl -n {ns} edit {lower} {name}), then remove the \
             record ({drop})"
        ),
        _ => format!("to recover, remove it ({drop})"),
    };
    Malformed(format!(
        "annotation {key} on {kind} {ns}/{name} is corrupted ({detail}); {recovery}"
    ))
}

/// Records only grow: a later version may add a field or a value, never change one. So a record
/// that is JSON but names a field or a value this version does not know was written by a later
/// version (docs/upgrading.md), not corrupted: it is refused, and kept.
fn from_a_newer_version(e: &serde_json::Error) -> bool {
    let text = e.to_string();
    e.is_data() && (text.starts_with("unknown field") || text.starts_with("unknown variant"))
}

/// A record of a later version: refused (exit 3, nothing written), with what to run instead. Not
/// "remove it": it holds the original.
fn newer(obj: &Value, key: &str, detail: &str) -> Malformed {
    let (kind, ns, name) = identity(obj);
    Malformed(format!(
        "annotation {key} on {kind} {ns}/{name} was written by a later version of \
         workload-update-guard than this {} ({detail}); keep it, and run the version that wrote \
         it or a later one (docs/upgrading.md)",
        env!("CARGO_PKG_VERSION"),
    ))
}

fn is_string_list(v: &Value) -> bool {
    v.as_array().is_some_and(|l| l.iter().all(Value::is_string))
}

pub(super) fn value_record(
    current: Option<Value>,
    created_parents: Vec<String>,
    owners: Vec<RecordedOwner>,
) -> ValueRecord {
    ValueRecord {
        owners,
        present: current.is_some(),
        value: current,
        created_parents,
    }
}

/// A value for logs: `absent`, or its compact JSON.
pub fn describe(v: &Option<Value>) -> String {
    v.as_ref().map_or("absent".into(), Value::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::*;

    #[test]
    fn describe_says_absent_or_gives_the_compact_json() {
        assert_eq!(describe(&None), "absent");
        assert_eq!(
            describe(&Some(json!(["LiveMigrate", "Evict"]))),
            r#"["LiveMigrate","Evict"]"#
        );
    }

    /// A corrupted record names the object and the recovery that fits that record.
    #[test]
    fn a_corrupted_record_says_how_to_recover_from_it() {
        let with = |mut obj: Value, key: &str| {
            obj["metadata"]["annotations"] = json!({key: "{not json"});
            read_record::<ValueRecord>(&obj, key).unwrap_err().0
        };
        let kv = kubevirt(Some(json!([])));
        let ch = chart(json!({}), None);
        for (obj, key, kind, says) in [
            (
                &kv,
                KUBEVIRT_RECORD,
                "kubevirt kubevirt",
                "restores from the ManagedChart's copy",
            ),
            (
                &ch,
                KUBEVIRT_COPY,
                "managedchart harvester",
                "restores from the KubeVirt CR's record",
            ),
            (
                &ch,
                VALUES_RECORD,
                "managedchart harvester",
                "back as it was before pre",
            ),
            (
                &ch,
                COMPARE_RECORD,
                "managedchart harvester",
                "remove the pointer",
            ),
        ] {
            let e = with(obj.clone(), key);
            assert!(e.contains(says), "{key}: {e}");
            assert!(e.contains(&format!("annotate {kind} {key}-")), "{key}: {e}");
        }
        let other = with(kv.clone(), "workload-update-guard.harvesterhci.io/other");
        assert!(other.contains("to recover, remove it ("), "{other}");
    }

    /// A record with a field or a value this version does not know is a later version's: refused
    /// (a `Malformed`, exit 3), naming this version and what to run, and never "remove it".
    #[test]
    fn a_record_of_a_later_version_is_refused_and_kept() {
        let with = |mut obj: Value, key: &str, record: &str| {
            obj["metadata"]["annotations"] = json!({key: record});
            obj
        };
        let kv = kubevirt(Some(json!([])));
        let ch = chart(json!({}), None);
        for (obj, key, record) in [
            (
                &kv,
                KUBEVIRT_RECORD,
                r#"{"present":true,"value":["LiveMigrate"],"writtenBy":"9.0.0"}"#,
            ),
            (
                &ch,
                KUBEVIRT_COPY,
                r#"{"present":false,"owners":[{"manager":"helm","operation":"Apply","since":"x"}]}"#,
            ),
            (&ch, COMPARE_RECORD, r#"{"added":"somethingNew"}"#),
        ] {
            let obj = with(obj.clone(), key, record);
            let e = if key == COMPARE_RECORD {
                read_record::<CompareRecord>(&obj, key).unwrap_err().0
            } else {
                read_record::<ValueRecord>(&obj, key).unwrap_err().0
            };
            assert!(e.contains("written by a later version"), "{key}: {e}");
            assert!(
                e.contains(&format!("than this {}", env!("CARGO_PKG_VERSION"))),
                "{e}"
            );
            assert!(e.contains(key) && e.contains("keep it"), "{e}");
            assert!(!e.contains("remove it"), "{e}");
        }
        // Not JSON, or a known field of the wrong type: corrupted, as before.
        for record in ["{not json", r#"{"present":"yes"}"#] {
            let obj = with(kv.clone(), KUBEVIRT_RECORD, record);
            let e = read_record::<ValueRecord>(&obj, KUBEVIRT_RECORD)
                .unwrap_err()
                .0;
            assert!(e.contains("is corrupted"), "{record}: {e}");
        }
    }
}
