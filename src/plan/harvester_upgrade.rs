//! Harvester's own upgrade, which in later releases suspends and restores the methods itself
//! ([`Handling`], docs/design.md, "Harvester's own handling"): the readers of its `Upgrade` and
//! `Version` objects, and a value written by its blind restores told from an operator's choice.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::identity;
use super::ownership::{Owner, owners};
use super::releases::{Handling, parse_version};
use crate::vocabulary::Malformed;

/// Harvester's backup of the ManagedChart's values key, on the `Upgrade` object
/// (`package/upgrade/upgrade_manifests.sh`, `disable_kubevirt_workload_live_migration`).
pub const BACKUP_ANNOTATION: &str = "harvesterhci.io/kubevirt-workload-update-methods";
pub const LATEST_LABEL: &str = "harvesterhci.io/latestUpgrade";
/// The end of the Upgrade's cleanup (`upgrade_controller.go` `cleanup()`).
pub const CLEANUP_LABEL: &str = "harvesterhci.io/upgradeCleanup";
pub const CLEANUP_DONE: &str = "Succeeded";
/// The operator's escape on an Upgrade: the chart's admission policy lets it go on unprotected.
pub const ALLOW_UNPROTECTED: &str = "workload-update-guard.harvesterhci.io/allow-unprotected";
/// The label of the Upgrade's state (`Succeeded`, `Failed`, or the step under way).
pub const STATE_LABEL: &str = "harvesterhci.io/upgradeState";

/// The field managers whose `Update` of the methods is a hard-coded `[LiveMigrate]` at an
/// upgrade's end: Harvester's controller (binary `harvester`; the hard-coded restore's cleanup
/// PUTs the CR, a later release's legacy branch the ManagedChart) and the add-on
/// (upgrade-toolkit's Finalize merge patch). client-go names an `Update`'s manager after the
/// binary when the code sets none.
pub const BLIND_RESTORERS: &[&str] = &["harvester", "upgrade-toolkit"];

/// The value those restores write: what Harvester's chart renders without a values override
/// since v1.6 (for CPU and memory hot-plug; harvester/charts `charts/harvester/values.yaml`,
/// `kubevirt.spec`), the chart's default.
pub fn blind_value() -> Value {
    serde_json::json!(["LiveMigrate"])
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "camelCase")]
pub enum Backup {
    /// No annotation (yet).
    None,
    /// `null`: the key was absent; the cleanup deletes it.
    Absent,
    /// The key's value; the cleanup writes it back.
    Value(Value),
}

impl Backup {
    /// Harvester's backup annotation on the Upgrade `name`, checked: JSON in a string.
    fn read(annotation: Option<&String>, name: &str) -> Result<Backup, Malformed> {
        let Some(text) = annotation else {
            return Ok(Backup::None);
        };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Null) => Ok(Backup::Absent),
            Ok(v) => Ok(Backup::Value(v)),
            Err(e) => Err(Malformed(format!(
                "Upgrade {name}: annotation {BACKUP_ANNOTATION} is not JSON ({e}): {text:?}"
            ))),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Backup::None => "none yet".into(),
            Backup::Absent => "null (the values key was absent)".into(),
            Backup::Value(v) => v.to_string(),
        }
    }
}

/// What Harvester's cleanup ([`Handling::BackupAndRestore`]) will write to the ManagedChart's
/// values key.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "camelCase")]
pub enum CleanupWrite {
    Nothing,
    RemoveKey,
    Set(Value),
}

impl CleanupWrite {
    pub fn describe(&self) -> String {
        match self {
            CleanupWrite::Nothing => "nothing to the methods".into(),
            CleanupWrite::RemoveKey => "removes the values key".into(),
            CleanupWrite::Set(v) => format!("sets the values key to {v}"),
        }
    }
}

/// The latest Harvester Upgrade, as the guard reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Upgrade {
    pub namespace: String,
    pub name: String,
    pub version: String,
    pub state: String,
    pub backup: Backup,
    pub cleaned_up: bool,
    /// Being deleted: its cleanup runs, then it is gone.
    pub deleting: bool,
    /// `metadata.creationTimestamp` (the armed `post`: an upgrade begun after `pre`).
    #[serde(skip)]
    pub created: Option<Timestamp>,
    /// When it ended: the later of its `Completed` condition's time (set True or False at the
    /// end: `condition_time`) and its `deletionTimestamp`. An upgrade that ended after a
    /// suspension was recorded was under way then: the one to await.
    #[serde(skip)]
    pub ended: Option<Timestamp>,
    /// The Warning Events of an unprotected upgrade name the object.
    #[serde(skip)]
    pub uid: String,
    /// Its `NodesPrepared` condition is `True`: the admission policy has nothing left to hold
    /// (the next step upgrades KubeVirt).
    #[serde(skip)]
    pub nodes_prepared: bool,
    /// It carries [`ALLOW_UNPROTECTED`]: the operator accepts its migrations (a suspension
    /// already in place stays until its end).
    #[serde(skip)]
    pub allow_unprotected: bool,
}

/// The fields of an `upgrades.harvesterhci.io` object the guard reads, and nothing more.
#[derive(Deserialize, Default)]
#[serde(default)]
struct UpgradeObject {
    metadata: ObjectMeta,
    spec: UpgradeSpec,
    status: UpgradeStatus,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UpgradeSpec {
    version: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UpgradeStatus {
    conditions: Vec<Condition>,
}

/// A condition of Harvester's (wrangler's `condition.Cond`): its times as written, parsed where
/// used.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    last_update_time: String,
    last_transition_time: String,
}

impl UpgradeObject {
    fn read(obj: &Value) -> Result<UpgradeObject, Malformed> {
        UpgradeObject::deserialize(obj).map_err(|e| {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            Malformed(format!("Upgrade {name}: {e}"))
        })
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&String> {
        self.metadata.annotations.as_ref()?.get(key)
    }

    fn condition(&self, kind: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.kind == kind)
    }

    fn created(&self) -> Option<Timestamp> {
        self.metadata.creation_timestamp.as_ref().map(|t| t.0)
    }
}

/// When a condition of Harvester's last changed: `lastUpdateTime`, the only time wrangler's
/// `condition.Cond` writes (v3 `pkg/condition/condition.go`: `setValue` → `touchTS`), which
/// moves whenever its status (or message) changes. `lastTransitionTime` (in Harvester's
/// `Condition` type, never written by its controller) only where `lastUpdateTime` is missing:
/// an object written by other tools keeps an end rather than none.
fn condition_time(c: &Condition) -> Option<Timestamp> {
    let time = [&c.last_update_time, &c.last_transition_time]
        .into_iter()
        .find(|t| !t.is_empty())?;
    time.parse().ok()
}

pub(super) fn or_if_empty<'a>(text: &'a str, none: &'a str) -> &'a str {
    if text.is_empty() { none } else { text }
}

pub(super) fn being_deleted(deleting: bool) -> &'static str {
    if deleting { ", being deleted" } else { "" }
}

impl Upgrade {
    pub fn read(obj: &Value) -> Result<Upgrade, Malformed> {
        Upgrade::of(UpgradeObject::read(obj)?)
    }

    fn of(read: UpgradeObject) -> Result<Upgrade, Malformed> {
        let name = read.metadata.name.clone().unwrap_or_default();
        let backup = Backup::read(read.annotation(BACKUP_ANNOTATION), &name)?;
        let completed = read
            .condition("Completed")
            .filter(|c| c.status == "True" || c.status == "False");
        let state = match (read.label(STATE_LABEL), completed) {
            (Some(s), _) if !s.is_empty() => s.to_string(),
            (_, Some(c)) if c.status == "True" => "Completed".into(),
            (_, Some(_)) => "Failed".into(),
            _ => "unknown".into(),
        };
        let deleted_at = read.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        let ended = completed
            .and_then(condition_time)
            .into_iter()
            .chain(deleted_at)
            .max();
        Ok(Upgrade {
            namespace: read.metadata.namespace.clone().unwrap_or_default(),
            version: read.spec.version.clone(),
            state,
            backup,
            cleaned_up: read.label(CLEANUP_LABEL) == Some(CLEANUP_DONE),
            deleting: deleted_at.is_some(),
            created: read.created(),
            ended,
            uid: read.metadata.uid.clone().unwrap_or_default(),
            nodes_prepared: read
                .condition("NodesPrepared")
                .is_some_and(|c| c.status == "True"),
            allow_unprotected: read
                .annotation(ALLOW_UNPROTECTED)
                .is_some_and(|a| a == "true"),
            name,
        })
    }

    pub fn handling(&self) -> Handling {
        Handling::of(&self.version)
    }

    /// Whether Harvester's cleanup may still write the methods.
    pub fn cleanup_pending(&self) -> bool {
        self.handling() != Handling::None && !self.cleaned_up
    }

    /// What the backing-up releases' cleanup will write to the values key
    /// (`enableKubevirtWorkloadLiveMigrate`): the backup back (`null` deletes the key); without a backup, `[LiveMigrate]` if the key
    /// exists (the legacy branch).
    pub fn cleanup_writes(&self, values_key: Option<&Value>) -> CleanupWrite {
        if self.handling() != Handling::BackupAndRestore || self.cleaned_up {
            return CleanupWrite::Nothing;
        }
        match (&self.backup, values_key) {
            (Backup::Absent, None) | (Backup::None, None) => CleanupWrite::Nothing,
            (Backup::Absent, Some(_)) => CleanupWrite::RemoveKey,
            (Backup::Value(v), Some(now)) if v == now => CleanupWrite::Nothing,
            (Backup::Value(v), _) => CleanupWrite::Set(v.clone()),
            (Backup::None, Some(_)) => CleanupWrite::Set(blind_value()),
        }
    }

    pub fn describe(&self) -> String {
        let ns = &self.namespace;
        let name = &self.name;
        let state = &self.state;
        let to = or_if_empty(&self.version, "an unknown version");
        let deleting = being_deleted(self.deleting);
        format!("Harvester Upgrade {ns}/{name} (to {to}, state {state}{deleting})")
    }
}

/// The one labelled `latestUpgrade=true`, the newest by creation if several are.
pub fn latest(upgrades: &[Value]) -> Result<Option<Upgrade>, Malformed> {
    let mut labelled = Vec::new();
    for u in upgrades {
        // Only the newest is read whole: an older one's spec or status is not ours to refuse.
        let meta = ObjectMeta::deserialize(&u["metadata"]).unwrap_or_default();
        let latest = meta.labels.as_ref().and_then(|l| l.get(LATEST_LABEL));
        if latest.is_some_and(|l| l == "true") {
            let created = meta.creation_timestamp.map(|t| t.0);
            labelled.push(((created, meta.name), u));
        }
    }
    let newest = labelled.into_iter().max_by(|a, b| a.0.cmp(&b.0));
    newest.map(|(_, u)| Upgrade::read(u)).transpose()
}

/// Every release on offer (newer than `current`, when known), newest first, with its handling.
pub fn on_offer(versions: &[Value], current: Option<&str>) -> Vec<(String, Handling)> {
    let current = current.and_then(parse_version);
    let newer = |v: Option<_>| current.zip(v).is_none_or(|(now, v)| v > now);
    let mut out: Vec<(String, Handling)> = versions
        .iter()
        .map(|v| identity(v).2)
        .filter(|name| !name.is_empty() && newer(parse_version(name)))
        .map(|name| (name.clone(), Handling::of(&name)))
        .collect();
    out.sort_by_key(|(name, _)| std::cmp::Reverse(parse_version(name)));
    out
}

/// Which of [`BLIND_RESTORERS`] wrote the hard-coded `[LiveMigrate]` at `path` by an `Update`.
pub fn blind_restorer(obj: &Value, path: &[&str], value: &Option<Value>) -> Option<String> {
    let restorer = |o: &Owner| o.blocks_apply() && BLIND_RESTORERS.contains(&o.manager.as_str());
    let manager = owners(obj, path).into_iter().find(restorer)?.manager;
    (value.as_ref() == Some(&blind_value())).then_some(manager)
}

#[cfg(test)]
mod tests;
