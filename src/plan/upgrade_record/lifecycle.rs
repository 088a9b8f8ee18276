//! When a record opens and closes, and what each pass's read adds to it (the suspension, the
//! restore, KubeVirt's version, the end).

use jiff::Timestamp;
use serde_json::Value;

use super::{
    AfterRestore, CLOSE_AT_LATEST, Migrations, QUIET, Record, ShutDown, Tally, Vms, WAVE_AT_MOST,
};
use crate::model::{FIELD_MANAGER, METHODS_PATH};
use crate::plan::fields::KubeVirtRead;
use crate::plan::harvester_upgrade::{Backup, Upgrade};
use crate::plan::ownership::owners;
use crate::plan::records::methods_as_they_are;
use crate::plan::upgrade_progress::{
    ENDED, PlanView, each, key_of, plan_key, running, upgrade_under_way,
};

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
    running(upgrade, plans).map(|n| UnderWay {
        key: n.key,
        to: n.to,
        started: n.created.unwrap_or(now),
    })
}

/// The upgrade that ended last, for a record made after it (a Job's `post`): Harvester's latest
/// Upgrade, else the add-on's plan created last.
pub fn last_ended(upgrade: Option<&Upgrade>, plans: &[PlanView]) -> Option<UnderWay> {
    let harvesters = each(upgrade, &[], |u| !upgrade_under_way(u), |_| false).next();
    let plans = || each(None, plans, |_| false, |p| !p.under_way()).max_by_key(|n| n.created);
    let n = harvesters.or_else(plans)?;
    Some(UnderWay {
        key: n.key,
        to: n.to,
        started: n.created?,
    })
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
            after_the_fact: None,
            counting: None,
        }
    }
}

/// Who wrote the `[]` the methods hold, in words, and when (their `managedFields` entry's
/// time). Helm's apply (Fleet deploying the ManagedChart's values) is Harvester's where its
/// Upgrade holds its backup of the values (v1.7.2+: `upgrade_manifests.sh` sets them to `[]`),
/// else the values' (an operator's).
fn suspender(kubevirt: &Value, upgrade: Option<&Upgrade>) -> (String, Option<Timestamp>) {
    let owners = owners(kubevirt, METHODS_PATH);
    let harvesters_backup = upgrade.is_some_and(|u| u.backup != Backup::None);
    let words = |m: &str| match m {
        FIELD_MANAGER => "the guard".to_string(),
        "harvester" => "Harvester".to_string(),
        "helm" if harvesters_backup => "Harvester".to_string(),
        "helm" => "the ManagedChart's values (Fleet's deploy)".to_string(),
        "upgrade-toolkit" => "the add-on".to_string(),
        other => other.to_string(),
    };
    // Several claim an atomic list's `[]` only when each wrote the same: the guard first.
    let first = (owners.iter())
        .find(|o| o.manager == FIELD_MANAGER)
        .or(owners.first());
    match first {
        Some(o) => (
            words(&o.manager),
            o.time.as_deref().and_then(|t| t.parse().ok()),
        ),
        None => ("unknown".into(), None),
    }
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
                let (by, at) = suspender(kv, read.upgrade);
                r.suspended_by = Some(by);
                r.suspended_at = Some(at.unwrap_or(read.now));
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
    // Another upgrade under way (a retry after a failure): this one's record closes now, so
    // that the next pass opens that one's.
    let another = under_way(read.upgrade, read.plans, read.now);
    if another.is_some_and(|u| u.key != r.upgrade || u.started != r.started) {
        return Next::Close;
    }
    let suspended_still = r.suspended_by.is_some() && r.restored_at.is_none();
    let since = r.restored_at.map_or(end, |at| at.max(end));
    let wave_over = t.wave_running() == 0 && t.outdated_now() == 0;
    let quiet = read.now >= since + QUIET && (wave_over || read.now >= since + WAVE_AT_MOST);
    if (!suspended_still && quiet) || read.now >= end + CLOSE_AT_LATEST {
        Next::Close
    } else {
        Next::Count
    }
}
