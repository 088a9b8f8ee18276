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
use serde_json::Value;

use super::editor::Editor;
use super::harvester_upgrade::Upgrade;
use super::ownership::owners;
use super::records::methods_as_they_are;
use super::upgrade_progress::{ENDED, PlanView, key_of, plan_key, upgrade_under_way};
use crate::model::{FIELD_MANAGER, METHODS_PATH};
use crate::plan::fields::KubeVirtRead;
use crate::vocabulary::{Malformed, Plan};

mod seen;
mod tally;

pub use seen::{Cause, EVACUATION_ANNOTATION, MigrationSeen, OUTDATED_LABEL, VmiSeen};
pub use tally::{Listed, Seen, Tally};

/// The ConfigMap's key that holds the records, a JSON list, oldest first.
pub const DATA_KEY: &str = "upgrades.json";

/// How many records are kept: a year of monthly upgrades and their retries.
pub const KEPT: usize = 20;

/// How many VMs shut down are named in a record; the rest are counted by reason.
pub const NAMED: usize = 10;

/// How many unfinished migrations a record lists for a new pod to go on from.
const OPEN_KEPT: usize = 200;

/// After the upgrade's end and the restore, the record waits this long for the updater's wave
/// (it acts about 5 s after the CR changes, then every 30 s while work remains), and at most
/// [`CLOSE_AT_LATEST`] after the end.
const WAVE_WINDOW: SignedDuration = SignedDuration::from_secs(60);
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
    /// Unfinished migrations beyond [`OPEN_KEPT`]: their failures may go uncounted.
    pub open_overflow: usize,
}

/// An upgrade under way, as a record begins it.
#[derive(Debug, Clone, PartialEq)]
pub struct UnderWay {
    pub key: String,
    pub to: String,
    pub started: Timestamp,
}

/// The upgrade under way, Harvester's first, then the add-on's plans.
pub fn under_way(
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
    now: Timestamp,
) -> Option<UnderWay> {
    let upgrade = upgrade.filter(|u| upgrade_under_way(u)).map(|u| UnderWay {
        key: key_of(u),
        to: u.version.clone(),
        started: u.created.unwrap_or(now),
    });
    let plan = || {
        let p = plans.iter().find(|p| p.under_way())?;
        Some(UnderWay {
            key: plan_key(&p.name),
            to: p.version.clone(),
            started: p.created.unwrap_or(now),
        })
    };
    upgrade.or_else(plan)
}

/// When and how the recorded upgrade ended, if it has: its end state, or `Deleted` once it is
/// gone (or another Upgrade is the latest).
fn ended(
    r: &Record,
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
    now: Timestamp,
) -> Option<(Timestamp, String)> {
    let same = |created: Option<Timestamp>| created.is_none_or(|c| c == r.started);
    if let Some(u) = upgrade.filter(|u| key_of(u) == r.upgrade && same(u.created)) {
        let outcome = if ENDED.contains(&u.state.as_str()) {
            u.state.clone()
        } else {
            "Deleted".into()
        };
        return (!upgrade_under_way(u)).then(|| (u.ended.unwrap_or(now), outcome));
    }
    if let Some(p) = plans
        .iter()
        .find(|p| plan_key(&p.name) == r.upgrade && same(p.created))
    {
        let outcome = if ENDED.contains(&p.phase.as_str()) {
            p.phase.clone()
        } else {
            "Deleted".into()
        };
        return (!p.under_way()).then(|| (p.ended.unwrap_or(now), outcome));
    }
    Some((now, "Deleted".into()))
}

/// What a pass read, as the record takes it.
pub struct RecordRead<'a> {
    pub kubevirt: Option<&'a Value>,
    pub upgrade: Option<&'a Upgrade>,
    pub plans: &'a [PlanView],
    /// Harvester's own version, where the pass read it.
    pub current: Option<&'a str>,
    pub now: Timestamp,
}

impl Record {
    pub fn begin(u: &UnderWay, read: &RecordRead) -> Record {
        let kubevirt = read.kubevirt.map(KubeVirtRead::of).unwrap_or_default();
        Record {
            upgrade: u.key.clone(),
            started: u.started,
            to: u.to.clone(),
            from: read.current.map(str::to_string),
            kubevirt_before: kubevirt.deployment().1,
            kubevirt_after: None,
            ended: None,
            outcome: None,
            suspended_by: None,
            suspended_at: None,
            restored_at: None,
            vms: Vms::default(),
            migrations: Migrations::default(),
            after_restore: AfterRestore::default(),
            shut_down: ShutDown::default(),
            saved: 0,
            complete: false,
            kept_at: None,
            counting: None,
        }
    }

    /// The workload-update migrations the updater would have made without the suspension (the
    /// outdated live-migratable VMIs once KubeVirt was upgraded), less those it made anyway
    /// (during the upgrade, and the wave after the restore). Nobody suspended: 0.
    pub fn saved(&self) -> u64 {
        if self.suspended_by.as_deref().is_none_or(|s| s == "nobody") {
            return 0;
        }
        let made = self.migrations.workload_update + self.after_restore.workload_update;
        self.vms.outdated_migratable_peak.saturating_sub(made)
    }

    /// One line: the Event at its close, the first of `status`'s.
    pub fn line(&self) -> String {
        let m = &self.migrations;
        let to = match &self.from {
            Some(from) => format!("{from} to {}", self.to),
            None => format!("to {}", self.to),
        };
        let outcome = self.outcome.as_deref().unwrap_or("under way");
        format!(
            "{} ({to}, {outcome}): {} live migrations ({} by the drains, {} workload update, \
             {} after the restore, {} other; {} failed), {} VMs shut down, {} migrations saved",
            self.upgrade,
            m.workload_update + m.evacuation + m.other + self.after_restore.workload_update,
            m.evacuation,
            m.workload_update,
            self.after_restore.workload_update,
            m.other,
            m.failed,
            self.shut_down.total,
            self.saved()
        )
    }

    /// `status`'s lines after [`Record::line`].
    pub fn details(&self) -> Vec<String> {
        let at = |t: Option<Timestamp>| t.map_or("-".to_string(), |t| t.to_string());
        let by = self.suspended_by.as_deref().unwrap_or("nobody yet");
        let kv = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        let v = &self.vms;
        let mut lines = vec![
            format!(
                "started {}, ended {}; suspended by {by} at {}, restored at {}",
                self.started,
                at(self.ended),
                at(self.suspended_at),
                at(self.restored_at)
            ),
            format!(
                "KubeVirt {} to {}; VMs running at the start {}, not live-migratable {}, outdated \
                 at most {} (live-migratable {}); outdated at the restore {}",
                kv(&self.kubevirt_before),
                kv(&self.kubevirt_after),
                v.running_at_start,
                v.not_live_migratable_at_start,
                v.outdated_peak,
                v.outdated_migratable_peak,
                self.after_restore
                    .outdated
                    .map_or("-".into(), |o| o.to_string())
            ),
        ];
        let s = &self.shut_down;
        if s.total > 0 {
            let by: Vec<String> = (s.by_reason.iter())
                .map(|(r, n)| format!("{n} {}", r.words()))
                .collect();
            let named: Vec<String> = (s.named.iter())
                .map(|n| format!("{} on {} ({})", n.vm, n.node, detail(n)))
                .collect();
            let more = s.total.saturating_sub(s.named.len() as u64);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            lines.push(format!(
                "shut down: {} ({}): {}{more}",
                s.total,
                by.join(", "),
                named.join(", ")
            ));
        }
        if let Some(c) = self.counting.as_ref().filter(|c| c.open_overflow > 0) {
            lines.push(format!(
                "a restart found {} unfinished migrations beyond those kept: their failures may be uncounted",
                c.open_overflow
            ));
        }
        lines
    }
}

fn detail(n: &ShutDownVm) -> String {
    if n.detail.is_empty() {
        n.reason.words().to_string()
    } else {
        format!("{}: {}", n.reason.words(), n.detail)
    }
}

/// Who wrote the `[]` the methods hold, in words.
fn suspender(kubevirt: &Value) -> String {
    let managers: Vec<String> = owners(kubevirt, METHODS_PATH)
        .into_iter()
        .map(|o| o.manager)
        .collect();
    let words = |m: &str| match m {
        FIELD_MANAGER => "the guard".to_string(),
        "harvester" => "Harvester".to_string(),
        "upgrade-toolkit" => "the add-on".to_string(),
        other => other.to_string(),
    };
    // Several claim an atomic list's `[]` only when each wrote the same: the guard first.
    let first = managers
        .iter()
        .find(|m| *m == FIELD_MANAGER)
        .or(managers.first());
    first.map_or_else(|| "unknown".into(), |m| words(m))
}

impl Tally {
    /// What a pass read: who suspended, when the updates came back, KubeVirt's version, the
    /// methods (`Evict`), the end.
    pub fn from_pass(&mut self, read: &RecordRead) {
        let before = self.record.clone();
        if let Some(kv) = read.kubevirt {
            let methods = methods_as_they_are(kv);
            let empty = methods
                .as_ref()
                .is_some_and(|m| m.as_array().is_some_and(Vec::is_empty));
            let outdated_now = self.outdated_now();
            let r = &mut self.record;
            if empty && r.suspended_by.is_none() {
                r.suspended_by = Some(suspender(kv));
                r.suspended_at = Some(read.now);
            }
            if !empty && r.suspended_by.is_some() && r.restored_at.is_none() {
                r.restored_at = Some(read.now);
                r.after_restore.outdated = Some(outdated_now);
            }
            let evict = methods.as_ref().and_then(Value::as_array);
            self.evict_listed = evict.is_some_and(|m| m.iter().any(|v| v == "Evict"));
            let observed = KubeVirtRead::of(kv).deployment().1;
            if observed != self.record.kubevirt_before {
                self.record.kubevirt_after = observed;
            }
        }
        if self.record.ended.is_none() {
            let end = ended(&self.record, read.upgrade, read.plans, read.now);
            if let Some((at, outcome)) = end {
                self.record.ended = Some(at);
                self.record.outcome = Some(outcome);
            }
        }
        self.record.saved = self.record.saved();
        self.changed |= self.record != before;
    }

    /// The record as it is kept now, with what a new pod goes on from while it is open.
    pub fn to_keep(&mut self, now: Timestamp) -> Record {
        self.record.kept_at = Some(now);
        if !self.record.complete {
            self.record.counting = Some(self.counting());
        }
        self.changed = false;
        self.record.clone()
    }

    /// Closed: nothing more to count.
    pub fn close(&mut self) {
        let r = &mut self.record;
        r.suspended_by.get_or_insert_with(|| "nobody".into());
        r.complete = true;
        r.counting = None;
        r.saved = r.saved();
        self.changed = true;
    }
}

/// What the record of the upgrade under way comes to on a pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// An upgrade under way with no record open (a new one, or one a pod before kept).
    Open(UnderWay),
    /// The record open is complete: the upgrade has ended, the updates are back (or were never
    /// suspended), and the wave after the restore is over. Then, if another is under way, open it.
    Close,
    Count,
    Nothing,
}

pub fn next(open: Option<&Tally>, read: &RecordRead) -> Next {
    let Some(t) = open else {
        return match under_way(read.upgrade, read.plans, read.now) {
            Some(u) => Next::Open(u),
            None => Next::Nothing,
        };
    };
    let r = &t.record;
    let Some(end) = r.ended else {
        return Next::Count;
    };
    let suspended_still = r.suspended_by.is_some() && r.restored_at.is_none();
    let since = r.restored_at.map_or(end, |at| at.max(end));
    let quiet = read.now >= since + WAVE_WINDOW && t.wave_running() == 0;
    if (!suspended_still && quiet) || read.now >= end + CLOSE_AT_LATEST {
        Next::Close
    } else {
        Next::Count
    }
}

/// The records in the ConfigMap, oldest first; none where the key is missing.
pub fn kept(configmap: &Value) -> Result<Vec<Record>, Malformed> {
    let Some(data) = configmap.get("data").and_then(|d| d.get(DATA_KEY)) else {
        return Ok(vec![]);
    };
    let text = data.as_str().unwrap_or_default();
    serde_json::from_str(text)
        .map_err(|e| Malformed(format!("data.{DATA_KEY} does not parse: {e}")))
}

/// The record of `u` a pod before this one left open, to go on from.
pub fn resumable(records: &[Record], u: &UnderWay) -> Option<Record> {
    let same = |r: &&Record| r.upgrade == u.key && r.started == u.started && !r.complete;
    records.iter().find(same).cloned()
}

/// The patch that keeps `record` in the ConfigMap as read: in place of its earlier self, else
/// appended; the oldest dropped beyond [`KEPT`]. A key that does not parse is refused, not
/// overwritten (an operator's edit gone wrong is theirs to see).
pub fn save_plan(configmap: &Value, record: &Record) -> Result<Plan, Malformed> {
    let mut records = kept(configmap)?;
    let same = |r: &Record| r.upgrade == record.upgrade && r.started == record.started;
    match records.iter_mut().find(|r| same(r)) {
        Some(r) => *r = record.clone(),
        None => records.push(record.clone()),
    }
    let excess = records.len().saturating_sub(KEPT);
    records.drain(..excess);
    let text = serde_json::to_string(&records).expect("records serialize");
    let mut ed = Editor::new(configmap)?;
    ed.ensure(
        &["data", DATA_KEY],
        Value::String(text),
        "the upgrades' records",
    )?;
    Ok(ed.finish())
}

#[cfg(test)]
mod tests;
