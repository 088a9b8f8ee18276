//! Every reason the guard gives: the Warning reasons in the order of docs/configuration.md's
//! table "Warnings: nothing is left off in silence" (checked by the tests), then the Normal
//! Events' reasons (its table "Events"). The tables say what each means.

/// A warning, with the reason its Event carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub reason: &'static str,
    pub message: String,
}

pub const STILL_SUSPENDED: &str = "WorkloadUpdatesStillSuspended";
pub const CHANGED_WHILE_SUSPENDED: &str = "WorkloadUpdateMethodsChangedWhileSuspended";
pub const COMPARE_PATCH_GONE: &str = "ComparePatchRemovedByOthers";
pub const UPDATE_CLAIM_LEFT: &str = "WorkloadUpdateMethodsUpdateClaim";
pub const HARVESTER_SUSPENDED: &str = "HarvesterUpgradeSuspendedUpdates";
pub const RESTORED_DURING_UPGRADE: &str = "RestoredDuringUpgrade";
pub const CONFLICT: &str = "FleetDeployWillConflict";
pub const FLEET_DEPLOY_BLOCKED: &str = "FleetDeployBlockedByClaim";
pub const PAUSED: &str = "ManagedChartPaused";
pub const NOT_APPLIED: &str = "ManagedChartNotApplied";
pub const LEFT_BY_SKIPPED_STEP: &str = "RecordsLeftBySkippedStep";
pub const SKIPPED_NOT_FOUND: &str = "SkippedNotFound";
pub const SKIPPED_NOT_CHECKED: &str = "SkippedObjectNotChecked";
pub const MIGRATIONS_UNDER_WAY: &str = "WorkloadUpdateMigrationsUnderWay";
pub const PRE_LATE: &str = "PreAfterKubeVirtUpgrade";
pub const SUSPENDED_BY_ANOTHER: &str = "WorkloadUpdatesSuspendedByAnother";
pub const HELD_AFTER_FAILURE: &str = "SuspensionHeldAfterFailedUpgrade";
pub const UPGRADE_HELD_BY_POLICY: &str = "UpgradeHeldByPolicy";
pub const UPGRADE_UNPROTECTED: &str = "UpgradeUnprotected";
pub const TURNED_ON_DURING_UPGRADE: &str = "WorkloadUpdatesTurnedOnDuringUpgrade";
pub const RECORD_NOT_KEPT: &str = "UpgradeRecordNotKept";
pub const EVENTS_NOT_RECORDED: &str = "EventsNotRecorded";

// The Normal Events' reasons.
pub const SUSPENDED: &str = "WorkloadUpdatesSuspended";
pub const NOT_NEEDED: &str = "WorkloadUpdateGuardNotNeeded";
pub const RESIDENT: &str = "ResidentGuardDecided";
pub const NO_LONGER_NEEDED: &str = "WorkloadUpdateGuardNoLongerNeeded";
pub const RESTORED: &str = "WorkloadUpdatesRestored";
pub const RECORDED: &str = "UpgradeRecorded";

#[cfg(test)]
mod tests {
    use super::*;

    /// Every Warning reason this file declares, in its order: the `pub const`s before the Normal
    /// Events' (read from the source, so that a reason added here and nowhere else fails).
    fn declared_reasons() -> Vec<String> {
        let source = include_str!("warnings.rs");
        let (warnings, _) = source
            .split_once("// The Normal Events' reasons.")
            .expect("the Normal Events' marker");
        warnings
            .lines()
            .filter_map(|l| l.strip_prefix("pub const ")?.split('"').nth(1))
            .map(str::to_string)
            .collect()
    }

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
        let declared = declared_reasons();
        assert!(
            declared.contains(&FLEET_DEPLOY_BLOCKED.to_string()),
            "{declared:?}"
        );
        assert_eq!(documented_reasons(), declared);
    }
}
