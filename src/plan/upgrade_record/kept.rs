//! The records in the ConfigMap, and how each is said (`status`, the Event at its close).

use jiff::Timestamp;
use serde_json::Value;

use super::lifecycle::UnderWay;
use super::{DATA_KEY, KEPT, Record, ShutDownVm};
use crate::plan::editor::Editor;
use crate::vocabulary::{Malformed, Plan};

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

impl Record {
    /// One line: the Event at its close, the first of `status`'s.
    pub fn line(&self) -> String {
        let m = &self.migrations;
        let to = match &self.from {
            Some(from) => format!("{from} to {}", self.to),
            None => format!("to {}", self.to),
        };
        let outcome = self.outcome.as_deref().unwrap_or("under way");
        let saved = match self.after_the_fact {
            Some(_) => "migrations saved not known (counted after the fact)".to_string(),
            None => format!("{} migrations saved", self.saved()),
        };
        format!(
            "{} ({to}, {outcome}): {} live migrations ({} by the drains, {} workload update, \
             {} after the restore, {} other; {} failed), {} VMs shut down, {saved}",
            self.upgrade,
            m.workload_update + m.evacuation + m.other + self.after_restore.workload_update,
            m.evacuation,
            m.workload_update,
            self.after_restore.workload_update,
            m.other,
            m.failed,
            self.shut_down.total,
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
        if let Some(gaps) = &self.after_the_fact {
            lines.push(gaps.clone());
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
