//! Whether an upgrade is under way: `post` never turns updates on while one is, whatever the
//! release, since every outdated VM would start live-migrating in the middle of the drains. Two
//! kinds of upgrade: Harvester's latest `Upgrade` and the add-on's cluster-scoped `UpgradePlan`.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::managed_fields;
use super::harvester_upgrade::{CLEANUP_DONE, CLEANUP_LABEL, Upgrade, being_deleted, or_if_empty};
use super::releases::Handling;
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

pub const ENDED: &[&str] = &["Succeeded", "Failed"];

/// Whether a Harvester Upgrade is under way: not in an end state (no state label yet: just
/// created) and not being deleted (its removal runs the cleanup, then it is gone).
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
    pub created: Option<Timestamp>,
    /// The release it upgrades to (`pre`'s "not needed" answer).
    pub version: String,
    /// When it ended (see [`Upgrade::ended`]): in an end phase, the latest of
    /// `status.phaseTransitionTimestamps` (one per phase), or its `deletionTimestamp` if later.
    #[serde(skip)]
    pub ended: Option<Timestamp>,
}

/// The fields of an add-on's `upgradeplans.management.harvesterhci.io` object the guard reads.
#[derive(Deserialize, Default)]
#[serde(default)]
struct PlanObject {
    metadata: ObjectMeta,
    spec: PlanSpec,
    status: PlanStatus,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PlanSpec {
    version: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PlanStatus {
    current_phase: String,
    phase: String,
    phase_transition_timestamps: Vec<PhaseStamp>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PhaseStamp {
    phase_transition_timestamp: String,
}

impl PlanView {
    /// A plan whose spec or status the add-on's schema would not allow is read by its metadata
    /// alone (no phase: under way), never refused: the add-on's objects are not ours to judge.
    pub fn read(obj: &Value) -> PlanView {
        let plan = PlanObject::deserialize(obj).unwrap_or_else(|_| PlanObject {
            metadata: ObjectMeta::deserialize(&obj["metadata"]).unwrap_or_default(),
            ..PlanObject::default()
        });
        let status = &plan.status;
        let phase = or_if_empty(&status.current_phase, &status.phase).to_string();
        let stamps = status.phase_transition_timestamps.iter();
        let phase_ended = stamps
            .filter(|_| ENDED.contains(&phase.as_str()))
            .filter_map(|s| s.phase_transition_timestamp.parse::<Timestamp>().ok())
            .max();
        let deleted_at = plan.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        PlanView {
            name: plan.metadata.name.clone().unwrap_or_default(),
            phase,
            deleting: deleted_at.is_some(),
            created: plan.metadata.creation_timestamp.as_ref().map(|t| t.0),
            version: plan.spec.version.clone(),
            ended: phase_ended.into_iter().chain(deleted_at).max(),
        }
    }

    /// Under way while its phase is not an end phase (none yet: just created) and it is not
    /// being deleted (the add-on's Finalize runs on deletion).
    pub fn under_way(&self) -> bool {
        !self.deleting && !ENDED.contains(&self.phase.as_str())
    }

    pub fn describe(&self) -> String {
        let phase = or_if_empty(&self.phase, "no phase yet");
        let deleting = being_deleted(self.deleting);
        format!("UpgradePlan {} (phase {phase}{deleting})", self.name)
    }
}

/// The plans in `plans`, skipping `exempt` (the plan that runs this `post` itself, which cannot
/// end before its post does).
pub fn plans(plans: &[Value], exempt: Option<&str>) -> Vec<PlanView> {
    plans
        .iter()
        .map(PlanView::read)
        .filter(|p| Some(p.name.as_str()) != exempt)
        .collect()
}

/// An upgrade, Harvester's or the add-on's, as the guard names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// What the guard remembers it by: `Upgrade NAMESPACE/NAME` or `UpgradePlan NAME`.
    pub key: String,
    /// For messages: its kind, name, target and state.
    pub words: String,
    /// The release it goes to.
    pub to: String,
    pub created: Option<Timestamp>,
}

/// Harvester's latest Upgrade first, then the plans: those that `upgrade_if` and `plan_if` take.
pub fn each<'a>(
    upgrade: Option<&'a Upgrade>,
    plans: &'a [PlanView],
    upgrade_if: impl Fn(&Upgrade) -> bool,
    plan_if: impl Fn(&PlanView) -> bool + 'a,
) -> impl Iterator<Item = Named> + 'a {
    let upgrade = upgrade.filter(|u| upgrade_if(u)).map(|u| Named {
        key: key_of(u),
        words: u.describe(),
        to: u.version.clone(),
        created: u.created,
    });
    let plans = plans.iter().filter(move |p| plan_if(p)).map(|p| Named {
        key: plan_key(&p.name),
        words: p.describe(),
        to: p.version.clone(),
        created: p.created,
    });
    upgrade.into_iter().chain(plans)
}

pub fn under_way(upgrade: Option<&Upgrade>, plans: &[PlanView]) -> Vec<String> {
    let running = each(upgrade, plans, upgrade_under_way, PlanView::under_way);
    running.map(|n| n.words).collect()
}

/// Whether `post` must wait before it restores, and for what: while an upgrade is under way
/// (any release: turning updates on mid-upgrade starts the wave), and while the latest Upgrade's
/// cleanup may still write the methods ([`cleanup_wait`]). Nothing of ours: no wait.
pub fn post_must_wait(upgrade: Option<&Upgrade>, plans: &[PlanView], ours: bool) -> Option<String> {
    if !ours {
        return None;
    }
    let running = under_way(upgrade, plans).join(" and ");
    let running = (!running.is_empty())
        .then(|| format!("{running} under way: post does not turn updates on during an upgrade"));
    // While the Upgrade runs, its cleanup is pending too: said once, by the line above.
    let cleanup = cleanup_wait(upgrade, ours).filter(|_| !upgrade.is_some_and(upgrade_under_way));
    let why: Vec<String> = running.into_iter().chain(cleanup).collect();
    (!why.is_empty()).then(|| why.join("; "))
}

/// Whether `post` must wait for Harvester's cleanup: acting first would be undone by it (it
/// writes its backup, which may be our `[]`, back).
pub fn cleanup_wait(upgrade: Option<&Upgrade>, ours: bool) -> Option<String> {
    let u = upgrade.filter(|u| ours && u.cleanup_pending())?;
    Some(format!(
        "{} has not finished its cleanup (label {CLEANUP_LABEL}={CLEANUP_DONE} not set), which \
         writes the methods; post restores after it",
        u.describe()
    ))
}

/// The upgrade under way, Harvester's first.
pub fn running(upgrade: Option<&Upgrade>, plans: &[PlanView]) -> Option<Named> {
    each(upgrade, plans, upgrade_under_way, PlanView::under_way).next()
}

pub fn key_of(u: &Upgrade) -> String {
    format!("Upgrade {}/{}", u.namespace, u.name)
}

pub fn plan_key(name: &str) -> String {
    format!("UpgradePlan {name}")
}

/// When `pre` recorded the suspension: the earliest, over `objects`, of the latest time of our
/// field manager's `managedFields` entries (whole seconds).
pub fn record_time(objects: &[&Value]) -> Option<Timestamp> {
    objects
        .iter()
        .filter_map(|o| {
            let ours = managed_fields(o).into_iter();
            let ours = ours.filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER));
            ours.filter_map(|e| Some(e.time?.0)).max()
        })
        .min()
}

/// Whether a suspension recorded at `since` awaits an upgrade: created then or later, under way
/// now (a `pre` that came late), or ended after `since` (under way then: the resident guard
/// suspends after an upgrade's creation, and a new process may first read once it has ended).
/// Times are whole seconds: an end in the record's second counts as before it (a `pre` right
/// after an upgrade is for the next one; the resident guard remembers its own: `ran_pre_for`).
fn awaits(
    created: Option<Timestamp>,
    under_way: bool,
    ended: Option<Timestamp>,
    since: Timestamp,
) -> bool {
    created.is_some_and(|t| t >= since) || under_way || ended.is_some_and(|t| t > since)
}

pub fn awaited_since(u: &Upgrade, since: Timestamp) -> bool {
    awaits(u.created, upgrade_under_way(u), u.ended, since)
}

/// The upgrade, in words, that a suspension recorded at `since` awaits (`awaits`).
pub fn begun(upgrade: Option<&Upgrade>, plans: &[PlanView], since: Timestamp) -> Option<String> {
    let plan_awaits = move |p: &PlanView| awaits(p.created, p.under_way(), p.ended, since);
    let mut begun = each(upgrade, plans, |u| awaited_since(u, since), plan_awaits);
    begun.next().map(|n| n.words)
}

/// After a failed upgrade (or one deleted without having succeeded) to a release that does
/// nothing to the methods itself ([`Handling::None`]), the suspension is held until the retry:
/// KubeVirt may be upgraded already and a node stuck. Releases whose own cleanup writes the
/// methods on failure (every other [`Handling`], the add-on) are followed instead: holding would
/// fight that cleanup.
/// Only the waiting `post` (armed, or the resident guard) holds; a by-hand `post` restores.
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
