//! The upgrade's record (docs/design.md, "The upgrade's record"): what one upgrade did to the
//! VMs (the migrations by cause, the VMs shut down and why) and what the suspension saved, kept
//! after it in the guard's ConfigMap, where Events (an hour), the pod's log (moved by each
//! drain) and KubeVirt's migrations (five finished ones per VMI, deleted with it) are gone.
//!
//! Pure: the waiting loop opens a record when an upgrade is under way, feeds its [`Tally`] the
//! watches' events and each pass's read ([`Tally::from_pass`]), keeps it ([`save_plan`]) and
//! closes it ([`next`]) once the upgrade has ended and the wave after the restore is over.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

mod kept;
mod lifecycle;
mod seen;
mod tally;

pub use kept::{kept, resumable, save_plan};
pub use lifecycle::{Next, RecordRead, UnderWay, last_ended, next, under_way};
pub use seen::{Cause, EVACUATION_ANNOTATION, MigrationSeen, OUTDATED_LABEL, Object, VmiSeen};
pub use tally::{Listed, Seen, Tally};

/// The ConfigMap's key that holds the records, a JSON list, oldest first.
pub const DATA_KEY: &str = "upgrades.json";

/// How many records are kept: a year of monthly upgrades and their retries.
pub const KEPT: usize = 20;

/// How many VMs shut down are named in a record; the rest are counted by reason.
pub const NAMED: usize = 10;

/// How many unfinished migrations a record lists for a new pod to go on from.
const OPEN_KEPT: usize = 200;

/// After the upgrade's end and the restore, the record waits at least this long for the
/// updater's first pass (it acts about 5 s after the CR changes: a hot-plug left for the restore
/// migrates then), then until nothing is outdated and no migration of its wave runs, or
/// [`WAVE_AT_MOST`] has passed (an outdated VM it cannot move stays outdated), and closes at the
/// latest [`CLOSE_AT_LATEST`] after the end (a suspension held after a failed upgrade).
const QUIET: SignedDuration = SignedDuration::from_secs(15);
const WAVE_AT_MOST: SignedDuration = SignedDuration::from_mins(5);
const CLOSE_AT_LATEST: SignedDuration = SignedDuration::from_mins(30);

/// What one upgrade did, as kept (camelCase JSON in the ConfigMap).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `Upgrade NAMESPACE/NAME` (Harvester's) or `UpgradePlan NAME` (the add-on's).
    pub upgrade: String,
    pub started: Timestamp,
    /// The release it upgrades to, and Harvester's version at its start (where read).
    pub to: String,
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub kubevirt_before: Option<String>,
    #[serde(default)]
    pub kubevirt_after: Option<String>,
    #[serde(default)]
    pub ended: Option<Timestamp>,
    /// `Succeeded`, `Failed`, or `Deleted` (gone before it ended).
    #[serde(default)]
    pub outcome: Option<String>,
    /// Who set the methods to `[]` during it: `the guard`, `Harvester`, `the add-on`, another
    /// field manager's name; `nobody` once closed without a suspension.
    #[serde(default)]
    pub suspended_by: Option<String>,
    #[serde(default)]
    pub suspended_at: Option<Timestamp>,
    #[serde(default)]
    pub restored_at: Option<Timestamp>,
    #[serde(default)]
    pub vms: Vms,
    /// The live migrations made during it, by cause, and how many of them failed.
    #[serde(default)]
    pub migrations: Migrations,
    #[serde(default)]
    pub after_restore: AfterRestore,
    #[serde(default)]
    pub shut_down: ShutDown,
    /// The workload-update migrations the suspension spared (see [`Record::saved`]).
    #[serde(default)]
    pub saved: u64,
    /// Closed: nothing more will be counted.
    #[serde(default)]
    pub complete: bool,
    /// When it was last kept.
    #[serde(default)]
    pub kept_at: Option<Timestamp>,
    /// Made by a Job's `post` after the upgrade, from what the cluster still showed: what it
    /// could not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_the_fact: Option<String>,
    /// What the next pod goes on from while it is open; removed once complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counting: Option<Counting>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Vms {
    pub running_at_start: u64,
    pub not_live_migratable_at_start: u64,
    /// The most VMIs running on an outdated launcher at once (KubeVirt's upgrade outdates all).
    pub outdated_peak: u64,
    /// The most of those that could live-migrate, before the restore: what the updater would
    /// have moved without the suspension.
    pub outdated_migratable_peak: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Migrations {
    pub workload_update: u64,
    pub evacuation: u64,
    pub other: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AfterRestore {
    /// VMIs still outdated when updates were turned back on.
    pub outdated: Option<u64>,
    /// The updater's migrations that followed (the wave).
    pub workload_update: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ShutDown {
    pub total: u64,
    pub by_reason: std::collections::BTreeMap<Reason, u64>,
    /// The first [`NAMED`].
    pub named: Vec<ShutDownVm>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShutDownVm {
    /// `namespace/name`.
    pub vm: String,
    pub node: String,
    pub reason: Reason,
    /// KubeVirt's reason where it could not live-migrate (`DisksNotLiveMigratable`, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    #[serde(default)]
    pub at: Option<Timestamp>,
}

/// Why a VM was shut down during the upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// `LiveMigratable=False`: Harvester's pre-drain shuts it down.
    NotLiveMigratable,
    /// Its migration failed: the drain shuts it down.
    FailedMigration,
    /// The updater's `Evict`.
    EvictedByTheUpdater,
    /// Anything else: a person, its guest.
    Stopped,
}

impl Reason {
    pub fn words(self) -> &'static str {
        match self {
            Reason::NotLiveMigratable => "not live-migratable",
            Reason::FailedMigration => "a failed migration",
            Reason::EvictedByTheUpdater => "evicted by the updater",
            Reason::Stopped => "stopped",
        }
    }
}

/// What a new pod needs to count on where the last one stopped (see `tally`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Counting {
    pub through: Option<Timestamp>,
    pub at_through: Vec<String>,
    pub open: Vec<String>,
    /// Unfinished migrations beyond the 200 kept: their failures may go uncounted.
    pub open_overflow: usize,
    /// The VMs at the start have been counted (a pod stopped before its first list of the VMIs
    /// leaves them to the next, whose first list counts them).
    pub vms_listed: bool,
}

impl Record {
    /// The workload-update migrations the updater would have made without the suspension (the
    /// outdated live-migratable VMIs once KubeVirt was upgraded), less those it made anyway
    /// (during the upgrade, and the wave after the restore). Nobody suspended: 0.
    /// Not known after the fact: 0.
    pub fn saved(&self) -> u64 {
        let nobody = self.suspended_by.as_deref().is_none_or(|s| s == "nobody");
        if nobody || self.after_the_fact.is_some() {
            return 0;
        }
        let made = self.migrations.workload_update + self.after_restore.workload_update;
        self.vms.outdated_migratable_peak.saturating_sub(made)
    }
}

#[cfg(test)]
mod tests;
