//! Every reason the guard gives: the Warning reasons (Events, the termination message's
//! `warnings`, WARN log lines), in the order of docs/configuration.md's table "Warnings: nothing
//! is left off in silence", and the Normal Events' reasons (its table "Events"). One place, so the table and the code agree
//! (`tests::the_reasons_are_the_documented_table_in_its_order`).

use serde::Serialize;

/// A warning, with the reason its Event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    pub reason: &'static str,
    pub message: String,
}

/// The CR is at `[]` and nothing says what to restore: updates stay off.
pub const STILL_SUSPENDED: &str = "WorkloadUpdatesStillSuspended";
/// Someone set the methods while suspended: that later choice is kept.
pub const CHANGED_WHILE_SUSPENDED: &str = "WorkloadUpdateMethodsChangedWhileSuspended";
/// Our comparePatches pointer is gone from the ManagedChart.
pub const COMPARE_PATCH_GONE: &str = "ComparePatchRemovedByOthers";
/// The methods are back at the original, but another manager's `Update` claim on them is left
/// (Harvester v1.8.0's or the add-on's restore).
pub const UPDATE_CLAIM_LEFT: &str = "WorkloadUpdateMethodsUpdateClaim";
/// Harvester's own upgrade suspended the updates: `pre` leaves them to it.
pub const HARVESTER_SUSPENDED: &str = "HarvesterUpgradeSuspendedUpdates";
/// `post` restored with `RESTORE_DURING_UPGRADE=true` while an upgrade was under way (or its
/// cleanup pending).
pub const RESTORED_DURING_UPGRADE: &str = "RestoredDuringUpgrade";
/// Another manager's `Update` claim holds a value the values do not render: Helm will conflict.
pub const CONFLICT: &str = "FleetDeployWillConflict";
/// The ManagedChart is paused: Fleet applies nothing until it is unpaused.
pub const PAUSED: &str = "ManagedChartPaused";
/// Fleet has not applied the ManagedChart's current spec (a `post` that writes nothing).
pub const NOT_APPLIED: &str = "ManagedChartNotApplied";
/// A skipped object still carries what `pre` wrote.
pub const LEFT_BY_SKIPPED_STEP: &str = "RecordsLeftBySkippedStep";
/// `ALLOW_MISSING`: an object is not there and is skipped.
pub const SKIPPED_NOT_FOUND: &str = "SkippedNotFound";
/// A skipped object could not be read to check for records of ours.
pub const SKIPPED_NOT_CHECKED: &str = "SkippedObjectNotChecked";
/// `pre`: workload-update migrations created before it are not finished.
pub const MIGRATIONS_UNDER_WAY: &str = "WorkloadUpdateMigrationsUnderWay";
/// `pre` came late: KubeVirt is (being) upgraded, or the CR counts outdated workloads.
pub const PRE_LATE: &str = "PreAfterKubeVirtUpgrade";
/// `pre` found the methods `[]` by another suspender's upgrade (the add-on, Harvester v1.8.0 or
/// v1.7.2+): that `[]` is not recorded as the original; what it stands in for is.
pub const SUSPENDED_BY_ANOTHER: &str = "WorkloadUpdatesSuspendedByAnother";
/// The waiting `post` (armed, or the resident guard) holds the suspension after a failed
/// upgrade to a release without handling of its own, until the retry.
pub const HELD_AFTER_FAILURE: &str = "SuspensionHeldAfterFailedUpgrade";
/// The resident guard: an upgrade that needs it is under way with automated updates still on,
/// held by the chart's admission policy before `NodesPrepared`.
pub const UPGRADE_HELD_BY_POLICY: &str = "UpgradeHeldByPolicy";
/// The same, and nothing holds it: the policy is off, or the Upgrade is past `NodesPrepared`.
/// (An Upgrade whose migrations the operator accepted is neither: nothing is said of it.)
pub const UPGRADE_UNPROTECTED: &str = "UpgradeUnprotected";
/// An Event could not be made (once per run, in the termination message only).
pub const EVENTS_NOT_RECORDED: &str = "EventsNotRecorded";

/// Every Warning reason, in the documented order.
pub const ALL: &[&str] = &[
    STILL_SUSPENDED,
    CHANGED_WHILE_SUSPENDED,
    COMPARE_PATCH_GONE,
    UPDATE_CLAIM_LEFT,
    HARVESTER_SUSPENDED,
    RESTORED_DURING_UPGRADE,
    CONFLICT,
    PAUSED,
    NOT_APPLIED,
    LEFT_BY_SKIPPED_STEP,
    SKIPPED_NOT_FOUND,
    SKIPPED_NOT_CHECKED,
    MIGRATIONS_UNDER_WAY,
    PRE_LATE,
    SUSPENDED_BY_ANOTHER,
    HELD_AFTER_FAILURE,
    UPGRADE_HELD_BY_POLICY,
    UPGRADE_UNPROTECTED,
    EVENTS_NOT_RECORDED,
];

/// The Normal Event of a `pre` that suspended.
pub const SUSPENDED: &str = "WorkloadUpdatesSuspended";
/// The Normal Event of a `pre` that stood aside: the coming release restores the methods itself.
pub const NOT_NEEDED: &str = "WorkloadUpdateGuardNotNeeded";
/// The Normal Event of the resident guard when its decision changes (watching, suspending,
/// waiting for the end, restoring).
pub const RESIDENT: &str = "ResidentGuardDecided";
/// The Normal Event of the resident guard when it finds itself no longer needed: no release the
/// cluster can upgrade to next, and no upgrade path installed, needs it with the methods it sees.
pub const NO_LONGER_NEEDED: &str = "WorkloadUpdateGuardNoLongerNeeded";
/// The Normal Event of a `post` that restored.
pub const RESTORED: &str = "WorkloadUpdatesRestored";

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasons of docs/configuration.md's warning table, in its order (`EventsNotRecorded` last).
    fn documented_reasons() -> Vec<String> {
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/configuration.md"
        ))
        .expect("docs/configuration.md");
        let (_, section) = page
            .split_once("## Warnings: nothing is left off in silence")
            .expect("docs/configuration.md's warning table");
        let rows = section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2);
        rows.filter_map(|l| l.split('`').nth(1).map(str::to_string))
            .collect()
    }

    #[test]
    fn the_reasons_are_the_documented_table_in_its_order() {
        assert_eq!(documented_reasons(), ALL);
    }
}
