//! The fields the planner reads of the objects, typed (serde): what names an object, its
//! `managedFields` (k8s-openapi's `ManagedFieldsEntry`, entry by entry), the
//! KubeVirt CR's status and the settings its updater runs with, the ManagedChart's Fleet status
//! and a `comparePatches` entry. Each field is read as the code before it read it by hand: one
//! that is absent or of another type is `None` (or empty), never an error; what must be checked
//! (the methods, the values override, our records) is checked where it is planned
//! (`records::methods`, `json::lookup`).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// `None` where the field is of another type than `T` (as a read by hand would take it).
pub(crate) fn lenient<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// A text field: empty where absent or not a string.
pub(crate) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(lenient(d)?.unwrap_or_default())
}

/// What names an object, and its generation: each field on its own (a malformed object's
/// message still names it).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Named {
    #[serde(deserialize_with = "text")]
    kind: String,
    metadata: NamedMeta,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct NamedMeta {
    #[serde(deserialize_with = "text")]
    namespace: String,
    #[serde(deserialize_with = "text")]
    name: String,
    #[serde(deserialize_with = "lenient")]
    generation: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    uid: Option<String>,
    #[serde(deserialize_with = "lenient")]
    resource_version: Option<String>,
}

fn named(object: &Value) -> Named {
    Named::deserialize(object).unwrap_or_default()
}

/// `kind`, and the namespace and name (empty where absent), for messages.
pub fn identity(object: &Value) -> (String, String, String) {
    let Named { kind, metadata } = named(object);
    (kind, metadata.namespace, metadata.name)
}

/// Namespace, name, uid and resourceVersion, where the object has them (an Event's
/// `regarding`, whose kind the caller knows).
pub fn reference(object: &Value) -> ObjectReference {
    let meta = named(object).metadata;
    let some = |s: String| Some(s).filter(|s| !s.is_empty());
    ObjectReference {
        namespace: some(meta.namespace),
        name: some(meta.name),
        uid: meta.uid,
        resource_version: meta.resource_version,
        ..ObjectReference::default()
    }
}

/// `metadata.generation`.
pub fn generation(object: &Value) -> Option<i64> {
    named(object).metadata.generation
}

/// The object's `managedFields`, in their order (a patch names an entry by its index): one that
/// does not parse is an empty entry, which owns nothing.
pub fn managed_fields(object: &Value) -> Vec<ManagedFieldsEntry> {
    let metadata = object.get("metadata");
    let entries = metadata.and_then(|m| m.get("managedFields"));
    let entries = entries.and_then(Value::as_array).into_iter().flatten();
    let entry = |e| ManagedFieldsEntry::deserialize(e).unwrap_or_default();
    entries.map(entry).collect()
}

/// The node of the field at `path` (`spec`, `workloadUpdateStrategy`, …) in an entry's
/// `fieldsV1`, a trie keyed `f:<field>`.
pub fn owned_field<'a>(entry: &'a ManagedFieldsEntry, path: &[&str]) -> Option<&'a Value> {
    let mut node = &entry.fields_v1.as_ref()?.0;
    for field in path {
        node = node.get(format!("f:{field}"))?;
    }
    Some(node)
}

/// What the guard reads of the KubeVirt CR beyond its methods: KubeVirt's count of outdated
/// VMIs, and the settings its workload updater and migration controller run with.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct KubeVirtRead {
    spec: KubeVirtSpec,
    status: KubeVirtStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct KubeVirtSpec {
    configuration: KubeVirtConfiguration,
    workload_update_strategy: UpdateStrategy,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct KubeVirtConfiguration {
    migrations: MigrationSettings,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct MigrationSettings {
    #[serde(deserialize_with = "lenient")]
    parallel_migrations_per_cluster: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    parallel_outbound_migrations_per_node: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct UpdateStrategy {
    #[serde(deserialize_with = "lenient")]
    batch_eviction_size: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    batch_eviction_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct KubeVirtStatus {
    #[serde(deserialize_with = "lenient")]
    outdated_virtual_machine_instance_workloads: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    phase: Option<String>,
    #[serde(deserialize_with = "lenient")]
    observed_kube_virt_version: Option<String>,
    #[serde(deserialize_with = "lenient")]
    target_kube_virt_version: Option<String>,
}

impl KubeVirtRead {
    pub fn of(kubevirt: &Value) -> Self {
        KubeVirtRead::deserialize(kubevirt).unwrap_or_default()
    }

    /// KubeVirt's `status.outdatedVirtualMachineInstanceWorkloads`.
    pub fn outdated(&self) -> Option<i64> {
        self.status.outdated_virtual_machine_instance_workloads
    }

    /// virt-operator's `status.phase`, and the versions it runs and deploys (`status`'s report).
    pub fn deployment(&self) -> (Option<String>, Option<String>, Option<String>) {
        let s = &self.status;
        let versions = (
            s.observed_kube_virt_version.clone(),
            s.target_kube_virt_version.clone(),
        );
        (s.phase.clone(), versions.0, versions.1)
    }

    /// `parallelMigrationsPerCluster`, `parallelOutboundMigrationsPerNode`.
    pub fn parallel_migrations(&self) -> (Option<i64>, Option<i64>) {
        let m = &self.spec.configuration.migrations;
        let cluster = m.parallel_migrations_per_cluster;
        (cluster, m.parallel_outbound_migrations_per_node)
    }

    /// `batchEvictionSize`, `batchEvictionInterval`.
    pub fn eviction_batches(&self) -> (Option<i64>, Option<&str>) {
        let s = &self.spec.workload_update_strategy;
        (s.batch_eviction_size, s.batch_eviction_interval.as_deref())
    }
}

/// What the guard reads of the ManagedChart beyond its values and `comparePatches`: whether it
/// is paused, and Fleet's status as Rancher copies it from the Bundle.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChartRead {
    spec: ChartSpec,
    #[serde(deserialize_with = "lenient")]
    status: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChartSpec {
    #[serde(deserialize_with = "lenient")]
    paused: Option<bool>,
}

/// Fleet's status: its fields as rancher/fleet's `BundleStatus` names them.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct FleetStatus {
    #[serde(deserialize_with = "lenient")]
    pub observed_generation: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    pub conditions: Option<Vec<Condition>>,
    pub summary: Summary,
    pub display: Display,
    #[serde(deserialize_with = "lenient")]
    pub unavailable: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Condition {
    #[serde(rename = "type", deserialize_with = "text")]
    pub kind: String,
    #[serde(deserialize_with = "text")]
    pub status: String,
    #[serde(deserialize_with = "text")]
    pub message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Summary {
    #[serde(deserialize_with = "lenient")]
    pub desired_ready: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    pub ready: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    pub err_applied: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    pub modified: Option<i64>,
    #[serde(deserialize_with = "lenient")]
    pub non_ready_resources: Option<Vec<NonReady>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NonReady {
    #[serde(deserialize_with = "text")]
    pub name: String,
    #[serde(deserialize_with = "text")]
    pub message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Display {
    #[serde(deserialize_with = "text")]
    pub state: String,
}

impl ChartRead {
    pub fn of(chart: &Value) -> Self {
        ChartRead::deserialize(chart).unwrap_or_default()
    }

    pub fn paused(&self) -> bool {
        self.spec.paused == Some(true)
    }

    /// Whether Fleet ever wrote a status: one of the fields it always writes is there.
    pub fn has_status(&self) -> bool {
        let keys = ["observedGeneration", "conditions", "summary", "display"];
        let status = self.status.as_ref().and_then(Value::as_object);
        status.is_some_and(|s| keys.iter().any(|k| s.contains_key(*k)))
    }

    /// Fleet's status (empty where there is none, or a field does not parse).
    pub fn fleet(&self) -> FleetStatus {
        let status = self.status.as_ref();
        status
            .and_then(|s| FleetStatus::deserialize(s).ok())
            .unwrap_or_default()
    }
}

impl FleetStatus {
    /// A condition's status and message.
    pub fn condition(&self, kind: &str) -> Option<(&str, &str)> {
        let conditions = self.conditions.iter().flatten();
        let c = conditions.into_iter().find(|c| c.kind == kind)?;
        Some((c.status.as_str(), c.message.as_str()))
    }
}

/// A `comparePatches` entry's object, as Fleet matches it (its `jsonPointers` are planned on as
/// JSON: they are what the guard writes).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CompareEntry {
    #[serde(deserialize_with = "text")]
    pub api_version: String,
    #[serde(deserialize_with = "text")]
    pub kind: String,
    #[serde(deserialize_with = "text")]
    pub name: String,
    #[serde(deserialize_with = "text")]
    pub namespace: String,
}

impl CompareEntry {
    pub fn of(entry: &Value) -> Self {
        CompareEntry::deserialize(entry).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_field_of_another_type_reads_as_absent_and_the_rest_still_reads() {
        let kv = json!({"spec": {"configuration": {"migrations": {
            "parallelMigrationsPerCluster": "five", "parallelOutboundMigrationsPerNode": 3}}},
            "status": {"outdatedVirtualMachineInstanceWorkloads": 4}});
        let read = KubeVirtRead::of(&kv);
        assert_eq!(read.parallel_migrations(), (None, Some(3)));
        assert_eq!(read.outdated(), Some(4));
        let chart = json!({"spec": {"paused": "yes"}, "status": {"observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "False", "message": 7}]}});
        let read = ChartRead::of(&chart);
        assert!(!read.paused());
        assert!(read.has_status());
        let fleet = read.fleet();
        assert_eq!(fleet.observed_generation, Some(2));
        assert_eq!(fleet.condition("Ready"), Some(("False", "")));
    }

    #[test]
    fn managed_fields_keep_their_places_and_read_their_trie() {
        let obj = json!({"metadata": {"name": "kubevirt", "managedFields": [
            {"manager": "a", "operation": "Apply", "fieldsV1": {"f:spec": {"f:x": {}}}},
            "not an entry",
            {"manager": "b", "operation": "Update", "time": "2026-12-06T00:00:01Z"}]}});
        let entries = managed_fields(&obj);
        assert_eq!(entries.len(), 3);
        assert!(owned_field(&entries[0], &["spec", "x"]).is_some());
        assert!(owned_field(&entries[0], &["spec", "y"]).is_none());
        assert_eq!(entries[1].manager, None);
        assert_eq!(entries[2].manager.as_deref(), Some("b"));
        let kind = identity(&obj);
        assert_eq!(kind, (String::new(), String::new(), "kubevirt".to_string()));
    }
}
