//! Another suspender's `[]` is never an original. During an upgrade the methods may already be
//! `[]` when `pre` reads them, written by the upgrade's own suspension ([`Handling`]): the
//! add-on's PreRun, the hard-coded restore's release's apply-manifests script, or a later
//! release's values override with its backup on the Upgrade. Recorded as the original, `post`
//! would put that `[]` back after the suspender's own restore: updates off for good, silently. So `pre` records the suspender's
//! own record where there is one (Harvester's backup), else what Fleet renders, and says which.

use serde::Serialize;
use serde_json::{Value, json};

use super::harvester_upgrade::{Backup, Upgrade, blind_value};
use super::json::lookup;
use super::ownership::{recorded_owners, update_claims};
use super::records::{ValueRecord, describe, is_suspended, kubevirt_record, methods};
use super::releases::Handling;
use super::upgrade_progress::{PLAN_PHASES, PlanView};
use crate::model::{METHODS_PATH, VALUES_PATH};
use crate::vocabulary::Malformed;

/// The add-on's suspender (upgrade-toolkit's PreRun of ClusterUpgrade merge-patches the CR;
/// client-go names the manager after the binary).
const ADDON_MANAGER: &str = "upgrade-toolkit";
/// The suspenders of the hard-coded restore's release ([`Handling::PatchAndHardCodedRestore`]):
/// `kubectl patch` in `upgrade_manifests.sh`, and the controller.
const V180_MANAGERS: &[&str] = &["kubectl-patch", "harvester"];

/// Where the original of a foreign suspension comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum OriginalFrom {
    HarvesterBackup,
    ValuesOverride,
    ChartDefault,
}

/// Another suspender's `[]` on the KubeVirt CR, and the original `pre` records in its place.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Foreign {
    pub suspender: String,
    pub from: OriginalFrom,
    /// What `pre` records as the original (owners: the appliers only, never the suspender's
    /// `Update`, which would be the conflict again).
    pub original: ValueRecord,
}

impl Foreign {
    /// The line `pre` logs, notes and puts in its Event; `status` says the same.
    pub fn line(&self) -> String {
        let from = match self.from {
            OriginalFrom::HarvesterBackup => "Harvester's backup on its Upgrade",
            OriginalFrom::ValuesOverride => {
                "the ManagedChart's values override, what Fleet renders"
            }
            OriginalFrom::ChartDefault => {
                "the chart's default, what Fleet renders (no values override)"
            }
        };
        format!(
            "the methods are [] by {}'s suspension, not an original: the original is {} from {from}; \
             a value set on the CR by hand (kubectl edit) before that suspension is not recorded \
             anywhere and is lost",
            self.suspender,
            describe(&self.original.original()),
        )
    }
}

/// Whether the KubeVirt CR's `[]` is a known suspender's while its upgrade is under way, and
/// the original to record instead. `None`: the methods are not `[]`, or a record of ours is on
/// the CR, or nobody we know wrote that `[]` (then it is taken as anybody's choice), or the
/// values override renders `[]` itself (the administrator's choice, whoever wrote the CR).
pub fn foreign_suspension(
    kubevirt: &Value,
    chart: Option<&Value>,
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
) -> Result<Option<Foreign>, Malformed> {
    if !is_suspended(&methods(kubevirt)?) || kubevirt_record(kubevirt)?.is_some() {
        return Ok(None);
    }
    let values = chart.map(|c| lookup(c, VALUES_PATH)).transpose()?;
    let values = values.flatten().cloned();
    let Some((suspender, from, value)) = suspender(kubevirt, values, upgrade, plans) else {
        return Ok(None);
    };
    if value == json!([]) {
        return Ok(None);
    }
    let mut owners = recorded_owners(kubevirt, METHODS_PATH);
    owners.retain(|o| o.operation == "Apply");
    Ok(Some(Foreign {
        suspender,
        from,
        original: ValueRecord {
            present: true,
            value: Some(value),
            created_parents: Vec::new(),
            owners,
        },
    }))
}

/// Who suspended (in words), where the original comes from and what it is: Harvester's backup
/// ([`Handling::BackupAndRestore`]), the add-on's plan, or the hard-coded restore's release's
/// patch, each only by its own write.
fn suspender(
    kubevirt: &Value,
    values: Option<Value>,
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
) -> Option<(String, OriginalFrom, Value)> {
    let updaters: Vec<_> = update_claims(kubevirt).collect();
    // A suspender's write is one made since its upgrade was created (the managedFields entry's
    // time is its last write): the same manager's `[]` from before (an administrator's `kubectl
    // patch`, an earlier plan's) is nobody's suspension of this upgrade.
    let wrote = |names: &[&str], since: Option<jiff::Timestamp>| {
        updaters.iter().any(|o| {
            let at: Option<jiff::Timestamp> = o.time.as_deref().and_then(|t| t.parse().ok());
            names.contains(&o.manager.as_str()) && at.zip(since).is_none_or(|(t, s)| t >= s)
        })
    };
    let running = upgrade.filter(|u| u.cleanup_pending() && !u.deleting);
    let backup = running.filter(|u| {
        u.handling() == Handling::BackupAndRestore
            && values == Some(json!([]))
            && u.backup != Backup::None
    });
    if let Some(u) = backup {
        let value = match &u.backup {
            Backup::Value(v) => v.clone(),
            _ => blind_value(),
        };
        return Some((u.describe(), OriginalFrom::HarvesterBackup, value));
    }
    let addon = plans
        .iter()
        .find(|p| p.under_way() && past_initialized(&p.phase))
        .filter(|p| wrote(&[ADDON_MANAGER], p.created));
    let v180 = running.filter(|u| {
        u.handling() == Handling::PatchAndHardCodedRestore && wrote(V180_MANAGERS, u.created)
    });
    let who = match (addon, v180) {
        (Some(p), _) => format!("the upgrade add-on's {}", p.describe()),
        (None, Some(u)) => u.describe(),
        (None, None) => return None,
    };
    Some(match values {
        Some(v) => (who, OriginalFrom::ValuesOverride, v),
        None => (who, OriginalFrom::ChartDefault, blind_value()),
    })
}

/// The add-on suspends in its ClusterUpgrade PreRun; before `Initialized` ends nothing of it
/// has run yet.
fn past_initialized(phase: &str) -> bool {
    let at = |name: &str| PLAN_PHASES.iter().position(|p| *p == name);
    at(phase) > at("Initialized")
}

#[cfg(test)]
mod tests;
