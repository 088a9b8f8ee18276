//! Whether an upgrade is under way: `post` never turns updates on while one
//! is, whatever the release, since every outdated VM would start live-migrating in the middle of
//! the drains. Two kinds of upgrade: Harvester's `Upgrade` (its latest, read by
//! [`harvester_upgrade::latest`]) and the upgrade-manager add-on's cluster-scoped `UpgradePlan`.
//! Pure: the objects' JSON in, a decision out.

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use super::harvester_upgrade::{self, CLEANUP_DONE, CLEANUP_LABEL, Handling, Upgrade};
use crate::model::FIELD_MANAGER;

/// Harvester's states of an Upgrade (label `harvesterhci.io/upgradeState`), in the order its
/// controller sets them (harvester/harvester `pkg/controller/master/upgrade/common.go` and
/// `upgrade_controller.go`, `initStatus` and the job controller), the end states last.
/// KubeVirt is upgraded in `UpgradingSystemServices`.
pub const UPGRADE_STATES: &[&str] = &[
    "PreparingLoggingInfra",
    "LoggingInfraPrepared",
    "CreatingUpgradeImage",
    "PreparingRepo",
    "RepoPrepared",
    "PreparingNodes",
    "UpgradingSystemServices",
    "UpgradingNodes",
    "Succeeded",
    "Failed",
];

/// The add-on's phases of an UpgradePlan (harvester/upgrade-toolkit
/// `api/v1beta1/upgradeplan_types.go`), in order, the end phases last.
pub const PLAN_PHASES: &[&str] = &[
    "Initializing",
    "Initialized",
    "ISODownloading",
    "ISODownloaded",
    "RepoCreating",
    "RepoCreated",
    "MetadataPopulating",
    "MetadataPopulated",
    "ImagePreloading",
    "ImagePreloaded",
    "ClusterUpgrading",
    "ClusterUpgraded",
    "NodeUpgrading",
    "NodeUpgraded",
    "CleaningUp",
    "CleanedUp",
    "Succeeded",
    "Failed",
];

/// The states (and phases) in which an upgrade has ended.
pub const ENDED: &[&str] = &["Succeeded", "Failed"];

/// Whether a Harvester Upgrade is under way: its state is not an end state (an Upgrade with no
/// state label yet has just been created: under way) and it is not being deleted (its removal
/// runs the cleanup, then it is gone). `Completed` is the reader's name for a Completed=True
/// condition without a state label.
pub fn upgrade_under_way(u: &Upgrade) -> bool {
    !u.deleting && !state_ended(&u.state)
}

/// An end state of an Upgrade (`Completed`: the condition older releases name the end by).
pub fn state_ended(state: &str) -> bool {
    ENDED.contains(&state) || state == "Completed"
}

/// One of the add-on's UpgradePlans, as the guard reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub name: String,
    /// `status.currentPhase` (the and the fixture's field), else `status.phase` (the
    /// field upgrade-toolkit's main branch names); empty when neither is set yet.
    pub phase: String,
    pub deleting: bool,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `spec.version`: the release it upgrades to (`pre`'s "not needed" answer).
    pub version: String,
    /// When it ended (see [`Upgrade::ended`]): in an end phase, the latest of
    /// `status.phaseTransitionTimestamps` (upgrade-toolkit appends one per phase); being deleted,
    /// its `deletionTimestamp` if later.
    #[serde(skip)]
    pub ended: Option<Timestamp>,
}

impl PlanView {
    pub fn from_json(obj: &Value) -> PlanView {
        let text = |ptr: &str| obj.pointer(ptr).and_then(Value::as_str).unwrap_or("");
        let phase = match text("/status/currentPhase") {
            "" => text("/status/phase"),
            p => p,
        };
        let phase_ended = ENDED.contains(&phase).then(|| {
            obj.pointer("/status/phaseTransitionTimestamps")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| harvester_upgrade::time(t["phaseTransitionTimestamp"].as_str()))
                .max()
        });
        let ended = harvester_upgrade::ended_at(phase_ended.flatten(), obj);
        PlanView {
            name: text("/metadata/name").to_string(),
            phase: phase.to_string(),
            deleting: obj.pointer("/metadata/deletionTimestamp").is_some(),
            created: harvester_upgrade::created(obj),
            version: text("/spec/version").to_string(),
            ended,
        }
    }

    /// Under way while its phase is not an end phase (none yet: just created) and it is not
    /// being deleted (the add-on's Finalize runs on deletion).
    pub fn under_way(&self) -> bool {
        !self.deleting && !ENDED.contains(&self.phase.as_str())
    }

    /// `UpgradePlan NAME (phase X)`.
    pub fn describe(&self) -> String {
        let phase = if self.phase.is_empty() {
            "no phase yet"
        } else {
            &self.phase
        };
        format!(
            "UpgradePlan {} (phase {phase}{})",
            self.name,
            if self.deleting { ", being deleted" } else { "" }
        )
    }
}

/// The plans in `plans`, skipping `exempt` (the plan that runs this `post` itself, which cannot
/// end before its post does).
pub fn plans(plans: &[Value], exempt: Option<&str>) -> Vec<PlanView> {
    plans
        .iter()
        .map(PlanView::from_json)
        .filter(|p| Some(p.name.as_str()) != exempt)
        .collect()
}

/// What is under way, in words, one entry per upgrade (empty: nothing).
pub fn under_way(upgrade: Option<&Upgrade>, plans: &[PlanView]) -> Vec<String> {
    let mut out: Vec<String> = upgrade
        .filter(|u| upgrade_under_way(u))
        .map(Upgrade::describe)
        .into_iter()
        .collect();
    out.extend(
        plans
            .iter()
            .filter(|p| p.under_way())
            .map(PlanView::describe),
    );
    out
}

/// Whether `post` must wait before it restores, and for what: while an upgrade is under way
/// (any release: turning updates on mid-upgrade starts the wave), and while the latest Upgrade's
/// cleanup may still write the methods ([`cleanup_wait`]). Nothing of ours
/// on the objects: nothing to restore, nothing to wait for.
pub fn post_must_wait(upgrade: Option<&Upgrade>, plans: &[PlanView], ours: bool) -> Option<String> {
    if !ours {
        return None;
    }
    let running = under_way(upgrade, plans);
    let mut why = Vec::new();
    if !running.is_empty() {
        why.push(format!(
            "{} under way: post does not turn updates on during an upgrade",
            running.join(" and ")
        ));
    }
    // While the Upgrade runs, its cleanup is pending too: said once, by the line above.
    if let Some(cleanup) = cleanup_wait(upgrade, ours)
        && !upgrade.is_some_and(upgrade_under_way)
    {
        why.push(cleanup);
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Whether `post` must wait for Harvester's cleanup first: while the latest Upgrade's cleanup
/// may still write the methods and we have something to restore, acting first would be undone
/// by it (it writes its backup, which may be our `[]`, back).
pub fn cleanup_wait(upgrade: Option<&Upgrade>, ours: bool) -> Option<String> {
    let u = upgrade.filter(|u| ours && u.cleanup_pending())?;
    Some(format!(
        "{} has not finished its cleanup (label {CLEANUP_LABEL}={CLEANUP_DONE} not set), which \
         writes the methods; post restores after it",
        u.describe()
    ))
}

/// The upgrade under way, as a stable key (kind and name) and in words: Harvester's latest
/// Upgrade first, then an UpgradePlan of the add-on.
pub fn running(upgrade: Option<&Upgrade>, plans: &[PlanView]) -> Option<(String, String)> {
    if let Some(u) = upgrade.filter(|u| upgrade_under_way(u)) {
        return Some((key_of(u), u.describe()));
    }
    plans
        .iter()
        .find(|p| p.under_way())
        .map(|p| (plan_key(&p.name), p.describe()))
}

/// An Upgrade's key, as [`running`] gives it.
pub fn key_of(u: &Upgrade) -> String {
    format!("Upgrade {}/{}", u.namespace, u.name)
}

/// An UpgradePlan's key, as [`running`] gives it.
pub fn plan_key(name: &str) -> String {
    format!("UpgradePlan {name}")
}

/// When `pre` recorded the suspension: the earliest, over `objects`, of the latest time of our
/// field manager's `managedFields` entries (pre writes the ManagedChart first), as the API server
/// writes it (whole seconds).
pub fn record_time(objects: &[&Value]) -> Option<Timestamp> {
    objects
        .iter()
        .filter_map(|o| {
            o.pointer("/metadata/managedFields")
                .and_then(Value::as_array)?
                .iter()
                .filter(|e| e["manager"] == FIELD_MANAGER)
                .filter_map(|e| harvester_upgrade::time(e["time"].as_str()))
                .max()
        })
        .min()
}

/// The armed `post` and the resident guard: the upgrade that began since `since` (created then or
/// later), or one under way now (a `pre` that came late), or one that ended after `since`
/// (it was under way when the suspension was recorded: the resident guard suspends after an
/// upgrade's creation, and a new process after a drain may first read once it has ended), in
/// words; `None`: none yet.
pub fn begun(upgrade: Option<&Upgrade>, plans: &[PlanView], since: Timestamp) -> Option<String> {
    let upgrade = upgrade
        .filter(|u| awaited_since(u, since))
        .map(Upgrade::describe);
    let plan = plans
        .iter()
        .find(|p| {
            p.created.is_some_and(|t| t >= since)
                || p.under_way()
                || p.ended.is_some_and(|t| t > since)
        })
        .map(PlanView::describe);
    upgrade.or(plan)
}

/// Whether a suspension recorded at `since` awaits this Upgrade's end: created then or later,
/// under way now, or ended after `since`. Times are whole seconds: an end in the same second as
/// the record counts as before it (a `pre` run right after an upgrade is for the next one; the
/// resident guard's own `pre` for an upgrade that ends within that second is remembered by the
/// process, `watch_decision`'s `ran_pre_for`).
pub fn awaited_since(u: &Upgrade, since: Timestamp) -> bool {
    u.created.is_some_and(|t| t >= since)
        || upgrade_under_way(u)
        || u.ended.is_some_and(|t| t > since)
}

/// After a failed upgrade to a release that does nothing to the methods itself (v1.6.x to
/// v1.7.1, Harvester's path A), the suspension is held until the retry:
/// KubeVirt may be upgraded already and a node stuck, so turning updates on now would
/// live-migrate every outdated VM in a half-upgraded cluster that the retry drains again. An
/// Upgrade being deleted without having succeeded counts as failed. Releases whose own cleanup
/// writes the methods on failure (v1.7.2+, v1.8.0, the add-on) are followed instead: holding
/// would fight that cleanup. `None`: nothing to hold for. Only the waiting `post` (armed, or the
/// resident guard) holds; a by-hand `post` is the operator's explicit choice and restores.
pub fn held_after_failure(upgrade: Option<&Upgrade>) -> Option<String> {
    let u = upgrade.filter(|u| u.handling() == Handling::None)?;
    let failed = u.state == "Failed"
        || (u.deleting && !matches!(u.state.as_str(), "Succeeded" | "Completed"));
    failed.then(|| {
        format!(
            "held after the failed {}: the suspension stays until the retry has ended well \
             (KubeVirt may be upgraded already and nodes cordoned: turning updates on now would \
             live-migrate every outdated VM in a half-upgraded cluster). Ways out: retry the \
             upgrade (the guard restores once it has succeeded), or run post by hand to turn \
             updates on now",
            u.describe()
        )
    })
}

#[cfg(test)]
mod tests;
