//! What a watch event says of a migration or a VMI, as the record counts it: a few fields read
//! typed (serde), each lenient (a field of another type reads as absent), the rest of the object
//! skipped as it is parsed.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use jiff::Timestamp;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::model::MIGRATION_PREFIX;
use crate::plan::fields::{lenient, text};
use crate::plan::migrations::WORKLOAD_UPDATE_ANNOTATION;

/// KubeVirt's `EvacuationMigrationAnnotation` (the node's name): its evacuation controller marks
/// each migration it creates for a node with the drain taint or an eviction
/// (`pkg/virt-controller/watch/drain/evacuation/evacuation.go`), `GenerateName`
/// `kubevirt-evacuation-`.
pub const EVACUATION_ANNOTATION: &str = "kubevirt.io/evacuationMigration";
const EVACUATION_PREFIX: &str = "kubevirt-evacuation-";

/// KubeVirt's label on a VMI whose virt-launcher is not the one its virt-controller deploys
/// (`pkg/virt-controller/watch/vmi/lifecycle.go`, `setLauncherContainerInfo`).
pub const OUTDATED_LABEL: &str = "kubevirt.io/outdatedLauncherImage";

/// Why a migration was made, from KubeVirt's own marks (its annotations, else the name its
/// controller generates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cause {
    /// The workload updater (`kubevirt.io/workloadUpdateMigration`).
    WorkloadUpdate,
    /// The evacuation controller: a drain (`kubevirt.io/evacuationMigration`).
    Evacuation,
    /// An operator's, the descheduler's, another tool's.
    Other,
}

/// How a migration stands (KubeVirt's `IsFinal`: `Succeeded` or `Failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unfinished,
    Succeeded,
    Failed,
}

/// A migration, as much as is counted.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationSeen {
    /// Its uid, hashed (`uid_key`): what tells one migration from another across lists.
    pub key: u64,
    pub cause: Cause,
    pub outcome: Outcome,
    pub created: Option<Timestamp>,
    /// `namespace/vmiName`: the VMI it moves.
    pub vmi: String,
}

/// A VMI, as much as is counted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VmiSeen {
    /// `namespace/name`.
    pub name: String,
    pub phase: String,
    /// Its `LiveMigratable` condition: `Some(false)` with its reason where it is not.
    pub live_migratable: Option<bool>,
    pub not_migratable_reason: String,
    /// Carries KubeVirt's outdated-launcher label.
    pub outdated: bool,
    /// When it entered its current phase (`status.phaseTransitionTimestamps`).
    pub phase_since: Option<Timestamp>,
    /// `status.nodeName`.
    pub node: String,
}

impl VmiSeen {
    pub fn running(&self) -> bool {
        self.phase == "Running"
    }

    /// Its guest has shut down, or it failed: KubeVirt's `IsFinal`.
    pub fn ended(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }
}

/// A uid, hashed to 64 bits: a set of tens of thousands of them stays a few hundred KiB, and
/// two collide once in about 10^11 pairs. `DefaultHasher::new()` has fixed keys: the same uid
/// hashes the same in every process (a new pod goes on from the last one's record).
pub fn uid_key(uid: &str) -> u64 {
    let mut h = DefaultHasher::new();
    uid.hash(&mut h);
    h.finish()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Meta {
    #[serde(deserialize_with = "text")]
    namespace: String,
    #[serde(deserialize_with = "text")]
    name: String,
    #[serde(deserialize_with = "text")]
    uid: String,
    /// Where a watch goes on from after this object's event.
    #[serde(deserialize_with = "text")]
    resource_version: String,
    #[serde(deserialize_with = "lenient")]
    creation_timestamp: Option<Timestamp>,
    /// Only the keys read: any other (a client's `last-applied-configuration` may be kilobytes)
    /// is skipped unread.
    #[serde(deserialize_with = "lenient")]
    annotations: Option<BTreeMap<String, IgnoredAny>>,
    #[serde(deserialize_with = "lenient")]
    labels: Option<BTreeMap<String, IgnoredAny>>,
}

impl Meta {
    fn has(map: &Option<BTreeMap<String, IgnoredAny>>, key: &str) -> bool {
        map.as_ref().is_some_and(|m| m.contains_key(key))
    }
}

/// A migration or a VMI, the fields read: what the record's watches parse each object into, the
/// rest skipped as it is parsed; then read into a [`MigrationSeen`] or a [`VmiSeen`].
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Object {
    #[serde(deserialize_with = "or_default")]
    metadata: Meta,
    #[serde(deserialize_with = "or_default")]
    spec: MigrationSpec,
    #[serde(deserialize_with = "or_default")]
    status: Phase,
}

/// A `null` read as absent: one object's `"status": null` would fail its whole list page.
fn or_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct MigrationSpec {
    #[serde(deserialize_with = "text")]
    vmi_name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Phase {
    #[serde(deserialize_with = "text")]
    phase: String,
    #[serde(deserialize_with = "text")]
    node_name: String,
    #[serde(deserialize_with = "lenient")]
    conditions: Option<Vec<Condition>>,
    #[serde(deserialize_with = "lenient")]
    phase_transition_timestamps: Option<Vec<PhaseStamp>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Condition {
    #[serde(rename = "type", deserialize_with = "text")]
    kind: String,
    #[serde(deserialize_with = "text")]
    status: String,
    #[serde(deserialize_with = "text")]
    reason: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PhaseStamp {
    #[serde(deserialize_with = "text")]
    phase: String,
    #[serde(deserialize_with = "lenient")]
    phase_transition_timestamp: Option<Timestamp>,
}

impl Object {
    pub fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }
}

impl MigrationSeen {
    pub fn read(object: &Value) -> MigrationSeen {
        Object::deserialize(object).unwrap_or_default().into()
    }
}

impl From<Object> for MigrationSeen {
    fn from(m: Object) -> MigrationSeen {
        let meta = &m.metadata;
        let cause = if Meta::has(&meta.annotations, WORKLOAD_UPDATE_ANNOTATION)
            || meta.name.starts_with(MIGRATION_PREFIX)
        {
            Cause::WorkloadUpdate
        } else if Meta::has(&meta.annotations, EVACUATION_ANNOTATION)
            || meta.name.starts_with(EVACUATION_PREFIX)
        {
            Cause::Evacuation
        } else {
            Cause::Other
        };
        let outcome = match m.status.phase.as_str() {
            "Succeeded" => Outcome::Succeeded,
            "Failed" => Outcome::Failed,
            _ => Outcome::Unfinished,
        };
        MigrationSeen {
            key: uid_key(&meta.uid),
            cause,
            outcome,
            created: meta.creation_timestamp,
            vmi: format!("{}/{}", meta.namespace, m.spec.vmi_name),
        }
    }
}

impl VmiSeen {
    pub fn read(object: &Value) -> VmiSeen {
        Object::deserialize(object).unwrap_or_default().into()
    }
}

impl From<Object> for VmiSeen {
    fn from(v: Object) -> VmiSeen {
        let conditions = v.status.conditions.unwrap_or_default();
        let migratable = conditions.iter().find(|c| c.kind == "LiveMigratable");
        let stamps = v.status.phase_transition_timestamps.unwrap_or_default();
        let phase = v.status.phase;
        let since = stamps.iter().filter(|s| s.phase == phase);
        VmiSeen {
            name: format!("{}/{}", v.metadata.namespace, v.metadata.name),
            live_migratable: migratable.map(|c| c.status == "True"),
            not_migratable_reason: migratable.map(|c| c.reason.clone()).unwrap_or_default(),
            outdated: Meta::has(&v.metadata.labels, OUTDATED_LABEL),
            phase_since: since.filter_map(|s| s.phase_transition_timestamp).max(),
            node: v.status.node_name,
            phase,
        }
    }
}
