//! The waiting loop's decision (the resident guard's; the armed `post` is the same loop, stopped
//! after one restore): given the upgrade's objects as read now, whether a suspension of ours is
//! on the KubeVirt CR or the ManagedChart, and what this process remembers, what now. Pure: no
//! I/O here; `resident` reads, acts and waits.
//!
//! The state lives on the objects (our records, the Upgrade, the UpgradePlan), so a new process
//! (a drain, a reboot) decides the same from what it reads; what a process remembers only
//! keeps it from saying or doing the same thing twice.

use serde::Serialize;

use super::harvester_upgrade::Upgrade;
use super::upgrade_progress::{
    PlanView, awaited_since, begun, held_after_failure, key_of, plan_key, post_must_wait, running,
};

/// What this process remembers between two reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// The upgrades (their keys) that `pre` has run for: once per upgrade.
    pub suspended_for: Vec<String>,
    /// The upgrade that began after the suspension, in words: once seen, its end is awaited
    /// even if it is then deleted.
    pub began: Option<String>,
    /// The Upgrade (its name) that began: one created before the suspension (the resident guard
    /// suspends after its creation) is still the one awaited when it ends.
    pub awaited: Option<String>,
    /// The failed Upgrade the suspension is held after (its name): said once.
    pub held: Option<String>,
}

/// What now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "why", rename_all = "camelCase")]
pub enum Decision {
    /// Run `pre` now, for the upgrade under way with this key (it decides itself whether it is
    /// needed, late, or left to Harvester).
    Suspend { upgrade: String, describe: String },
    /// Run `post` now: the upgrade that began after the suspension has ended (cleanup
    /// included), or nothing of ours is left to wait with.
    Restore(String),
    /// Hold the suspension after a failed path-A upgrade, until the retry.
    Hold { upgrade: String, why: String },
    /// Nothing to do now; why, in words.
    Wait(String),
}

impl Decision {
    /// The line that says it.
    pub fn line(&self) -> String {
        match self {
            Decision::Suspend { describe, .. } => format!("{describe} is under way: suspending"),
            Decision::Restore(why) => format!("restoring: {why}"),
            Decision::Hold { why, .. } => why.clone(),
            Decision::Wait(why) => why.clone(),
        }
    }

    /// The kind alone (a change of kind is said as an Event; a change of words is not).
    pub fn kind(&self) -> &'static str {
        match self {
            Decision::Suspend { .. } => "suspend",
            Decision::Restore(_) => "restore",
            Decision::Hold { .. } => "hold",
            Decision::Wait(_) => "wait",
        }
    }
}

/// The upgrade this process ran `pre` for, ended before a pass saw it run (it failed, or
/// succeeded, while `pre` still waited for Fleet): begun all the same, in words.
fn ran_pre_for(upgrade: Option<&Upgrade>, plans: &[PlanView], memory: &Memory) -> Option<String> {
    let upgrade = upgrade
        .filter(|u| memory.suspended_for.contains(&key_of(u)))
        .map(Upgrade::describe);
    let plan = plans
        .iter()
        .find(|p| memory.suspended_for.contains(&plan_key(&p.name)))
        .map(PlanView::describe);
    upgrade.or(plan)
}

/// The decision. `suspends`: the resident guard (it runs `pre` when an upgrade is under way);
/// the armed `post` only restores. `ours`: a suspension of ours is on the objects; `since`: when
/// it was recorded (RFC 3339), the upgrade awaited is one created at or after it, or one under
/// way. Updates `memory` with what was seen.
pub fn decide(
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
    ours: bool,
    since: &str,
    suspends: bool,
    memory: &mut Memory,
) -> Decision {
    let under_way = running(upgrade, plans);
    if suspends
        && let Some((key, describe)) = &under_way
        && !memory.suspended_for.contains(key)
    {
        return Decision::Suspend {
            upgrade: key.clone(),
            describe: describe.clone(),
        };
    }
    if !ours {
        memory.began = None;
        memory.awaited = None;
        memory.held = None;
        return match (&under_way, suspends) {
            (_, false) => Decision::Restore("nothing of ours left (a post has run)".into()),
            (Some((_, d)), true) => Decision::Wait(format!(
                "{d} is under way; nothing of ours on the objects (pre found the guard not needed, \
                 or left the suspension to Harvester)"
            )),
            (None, true) => {
                Decision::Wait("no upgrade under way: watching for the next one".into())
            }
        };
    }
    if memory.began.is_none() {
        memory.began = begun(upgrade, plans, since).or_else(|| ran_pre_for(upgrade, plans, memory));
        memory.awaited = upgrade
            .filter(|u| {
                memory.began.is_some()
                    && (awaited_since(u, since) || memory.suspended_for.contains(&key_of(u)))
            })
            .map(|u| u.name.clone());
    }
    // The awaited Upgrade failed on a release without its own handling: hold until the retry,
    // which is a new Upgrade (so what began is forgotten), or an UpgradePlan of the add-on
    // created after it (the retry made the other way: the failed Upgrade is then no longer
    // awaited, and the plan's end is).
    // Also the Upgrade this guard ran `pre` for, even if it failed before a pass saw it begin.
    let awaited = upgrade.filter(|u| {
        let retried_by_plan = plans.iter().any(|p| p.created > u.created);
        !retried_by_plan
            && (u.created.as_str() >= since
                || memory.awaited.as_deref() == Some(u.name.as_str())
                || memory.suspended_for.contains(&key_of(u)))
    });
    if let Some(why) = held_after_failure(awaited) {
        let name = awaited.map(|u| u.name.clone()).unwrap_or_default();
        memory.began = None;
        memory.awaited = None;
        memory.held = Some(name.clone());
        return Decision::Hold { upgrade: name, why };
    }
    let Some(began) = memory.began.clone() else {
        return Decision::Wait(match &memory.held {
            Some(name) => format!(
                "held after the failed Upgrade {name} (gone now): no retry has begun yet; run post \
                 by hand to turn updates on now"
            ),
            None => format!("no upgrade has begun since the suspension ({since})"),
        });
    };
    match post_must_wait(upgrade, plans, true) {
        Some(why) => Decision::Wait(format!("{began} began: {why}")),
        // Said as it is now (its end state), not as it began.
        None => Decision::Restore(format!(
            "{} has ended",
            awaited.map_or(began, Upgrade::describe)
        )),
    }
}

#[cfg(test)]
mod tests;
