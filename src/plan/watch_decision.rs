//! The waiting loop's decision, for the resident guard and the armed `post` (which stops after
//! one restore); `resident` reads, acts and waits.
//!
//! The state lives on the objects, so a new process (a drain, a reboot) decides the same; what a
//! process remembers only keeps it from saying or doing the same thing twice.

use jiff::Timestamp;
use serde_json::Value;

use super::harvester_upgrade::Upgrade;
use super::harvester_upgrade::{ALLOW_UNPROTECTED, blind_restorer};
use super::ownership::owners;
use super::records::{describe, is_suspended, kubevirt_record, methods};
use super::upgrade_progress::{
    PlanView, awaited_since, begun, each, held_after_failure, key_of, post_must_wait, running,
    upgrade_under_way,
};
use crate::model::{FIELD_MANAGER, METHODS_PATH};

/// What this process remembers between two reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// The upgrades (their keys) that `pre` has run for: once per upgrade.
    pub suspended_for: Vec<String>,
    /// Upgrades moved out of `suspended_for` once a pass found nothing of ours and they were no
    /// longer under way: still never suspended for again, but no later suspension (a by-hand
    /// `pre` for the next upgrade) is theirs.
    pub done_with: Vec<String>,
    /// The upgrade that began after the suspension, in words: once seen, its end is awaited
    /// even if it is then deleted.
    pub began: Option<String>,
    /// The Upgrade (its name) that began: one created before the suspension (the resident guard
    /// suspends after its creation) is still the one awaited when it ends.
    pub awaited: Option<String>,
    /// The failed Upgrade the suspension is held after (its name): said once.
    pub held: Option<String>,
}

impl Memory {
    fn forget(&mut self, held: Option<String>) {
        self.began = None;
        self.awaited = None;
        self.held = held;
    }

    /// Whether `pre` has run for this upgrade (its key), in this process.
    pub fn ran_pre(&self, key: &String) -> bool {
        self.suspended_for.contains(key) || self.done_with.contains(key)
    }

    /// Nothing of ours is left (a `post` ran, or `pre` stood aside): the upgrades `pre` ran for
    /// that are no longer under way are done with. One still under way stays: a suspension by
    /// hand during it awaits its end.
    fn set_aside_ended(&mut self, upgrade: Option<&Upgrade>, plans: &[PlanView]) {
        let now_under_way: Vec<String> =
            each(upgrade, plans, upgrade_under_way, PlanView::under_way)
                .map(|n| n.key)
                .collect();
        let (still, ended) = self
            .suspended_for
            .drain(..)
            .partition(|key| now_under_way.contains(key));
        self.suspended_for = still;
        self.done_with.extend::<Vec<String>>(ended);
    }

    /// Once per suspension: the upgrade seen to begin since it was recorded (`since`), or the one
    /// this process ran `pre` for, and the Upgrade then awaited (its name).
    fn note_begun(&mut self, upgrade: Option<&Upgrade>, plans: &[PlanView], since: Timestamp) {
        if self.began.is_some() {
            return;
        }
        self.began = begun(upgrade, plans, since).or_else(|| ran_pre_for(upgrade, plans, self));
        self.awaited = upgrade
            .filter(|u| {
                self.began.is_some()
                    && (awaited_since(u, since) || self.suspended_for.contains(&key_of(u)))
            })
            .map(|u| u.name.clone());
    }
}

/// What now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run `pre` now, for the upgrade under way with this key (`pre` decides whether it is needed).
    Suspend { upgrade: String, describe: String },
    /// Run `pre` again now: a write turned updates on while the upgrade with this key, which a
    /// suspension of ours is for, is under way ([`answer_turned_on`]).
    /// `why`: what was written, by whom, during which upgrade.
    Resuspend { upgrade: String, why: String },
    /// Run `post` now.
    Restore(Restore),
    /// Hold the suspension after a failed upgrade to a release that does nothing to the methods
    /// itself (`Handling::None`), until the retry.
    Hold { upgrade: String, why: String },
    /// Nothing to do now.
    Wait(Wait),
}

/// Why `post` runs now; its `Display` says each reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restore {
    NothingLeft,
    /// The upgrade that began after the suspension has ended, cleanup included (in words).
    Ended(String),
}

/// Why nothing is done now; its `Display` says each reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    Idle,
    StandAside(String),
    Accepted(String),
    HeldGone(String),
    NoneBegun(Timestamp),
    /// The upgrade that began (in words), and why `post` must wait; `named`: that reason names
    /// what is under way, so the beginning is not said again.
    Began {
        began: String,
        why: String,
        named: bool,
    },
}

impl std::fmt::Display for Restore {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Restore::NothingLeft => f.write_str("nothing of ours left (a post has run)"),
            Restore::Ended(upgrade) => write!(f, "{upgrade} has ended"),
        }
    }
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Wait::Idle => f.write_str("no upgrade under way: watching for the next one"),
            Wait::StandAside(upgrade) => write!(
                f,
                "{upgrade} is under way; nothing of ours on the objects (pre found the guard not \
                 needed, or left the suspension to Harvester)"
            ),
            Wait::Accepted(upgrade) => write!(
                f,
                "{upgrade} is under way and carries {ALLOW_UNPROTECTED}=true: its migrations are \
                 accepted, the guard does not suspend for it"
            ),
            Wait::HeldGone(name) => write!(
                f,
                "held after the failed Upgrade {name} (gone now): no retry has begun yet; run post \
                 by hand to turn updates on now"
            ),
            Wait::NoneBegun(since) => {
                write!(f, "no upgrade has begun since the suspension ({since})")
            }
            Wait::Began {
                why, named: true, ..
            } => f.write_str(why),
            Wait::Began { began, why, .. } => write!(f, "{began} began: {why}"),
        }
    }
}

impl Decision {
    pub fn line(&self) -> String {
        match self {
            Decision::Suspend { describe, .. } => format!("{describe} is under way: suspending"),
            Decision::Resuspend { why, .. } => format!("{why}: suspending again"),
            Decision::Restore(why) => format!("restoring: {why}"),
            Decision::Hold { why, .. } => why.clone(),
            Decision::Wait(why) => why.to_string(),
        }
    }

    /// The kind alone (a change of kind is logged; a change of words is not).
    pub fn kind(&self) -> &'static str {
        match self {
            Decision::Suspend { .. } => "suspend",
            Decision::Resuspend { .. } => "suspend again",
            Decision::Restore(_) => "restore",
            Decision::Hold { .. } => "hold",
            Decision::Wait(Wait::StandAside(_)) => "stand aside",
            Decision::Wait(Wait::Accepted(_)) => "accepted",
            Decision::Wait(_) => "wait",
        }
    }

    /// What the resident guard's Event says when this decision is new (`None`: a wait, which
    /// only the log says; a hold, which its own Warning says): suspend, restore, stand aside.
    pub fn event(&self) -> Option<String> {
        match self {
            Decision::Suspend { .. } | Decision::Resuspend { .. } | Decision::Restore(_) => {
                Some(self.line())
            }
            Decision::Wait(Wait::StandAside(upgrade)) => Some(format!(
                "standing aside: {upgrade} is under way and pre suspended nothing (the guard is \
                 not needed for it, or Harvester holds the suspension)"
            )),
            Decision::Wait(w @ Wait::Accepted(_)) => Some(format!("standing aside: {w}")),
            Decision::Hold { .. } | Decision::Wait(_) => None,
        }
    }
}

/// Whether the CR's methods turn updates on, and who wrote them (the field's owners but ours,
/// newest first). Not a blind restorer's hard-coded `[LiveMigrate]` (`harvester`,
/// `upgrade-toolkit`): their cleanup ends the suspension they made, and `post` answers it.
pub fn turned_on(kubevirt: &Value) -> Option<String> {
    let now = methods(kubevirt).ok()?;
    // An absent field turns nothing on either (KubeVirt takes it as `[]`).
    if now.is_none() || is_suspended(&now) || blind_restorer(kubevirt, METHODS_PATH, &now).is_some()
    {
        return None;
    }
    let mut by = owners(kubevirt, METHODS_PATH);
    by.retain(|o| o.manager != FIELD_MANAGER);
    // RFC 3339 times of one server, in whole seconds: the newest sorts last as text.
    by.sort_by(|a, b| b.time.cmp(&a.time));
    let by: Vec<String> = by
        .iter()
        .map(|o| format!("{} ({})", o.manager, o.operation))
        .collect();
    let by = match by.split_first() {
        None => "a writer that managedFields does not name".to_string(),
        Some((first, [])) => first.clone(),
        Some((first, rest)) => format!("{first} (field owners also: {})", rest.join(", ")),
    };
    Some(format!(
        "workloadUpdateMethods set to {} by {by}",
        describe(&now)
    ))
}

/// A write that turned updates on (an operator's `kubectl patch` from a runbook written before
/// the guard) while an upgrade is under way, on a CR that our `pre` suspended (its record is
/// there): `pre` again at once (it keeps its first record), not at the next resync, after
/// KubeVirt's updater (about 5 s) has started migrating. Not on a CR `pre` never got to suspend
/// (it failed before, say on a 403): that is no one's write, and the unprotected upgrade's
/// Warning says it. Not by the armed `post` (it never suspends), not for an Upgrade that carries
/// the accept annotation; a restore or a hold stands (nothing under way).
pub fn answer_turned_on(
    decision: Decision,
    kubevirt: Option<&Value>,
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
    suspends: bool,
) -> Decision {
    let accepted = upgrade.is_some_and(|u| upgrade_under_way(u) && u.allow_unprotected);
    let suspended_by_us = |kv: &&Value| matches!(kubevirt_record(kv), Ok(Some(_)));
    let on = kubevirt
        .filter(|_| suspends && !accepted)
        .filter(suspended_by_us)
        .and_then(turned_on);
    match (on, &decision, running(upgrade, plans)) {
        (Some(on), Decision::Wait(_) | Decision::Suspend { .. }, Some(running)) => {
            let why = format!("{on} while {} is under way", running.words);
            Decision::Resuspend {
                upgrade: running.key,
                why,
            }
        }
        _ => decision,
    }
}

/// The upgrade this process ran `pre` for, ended before a pass saw it run (it failed, or
/// succeeded, while `pre` still waited for Fleet): begun all the same, in words.
fn ran_pre_for(upgrade: Option<&Upgrade>, plans: &[PlanView], memory: &Memory) -> Option<String> {
    let mut all = each(upgrade, plans, |_| true, |_| true);
    all.find(|n| memory.suspended_for.contains(&n.key))
        .map(|n| n.words)
}

/// The decision. `suspends`: the resident guard (the armed `post` only restores); `ours`: a
/// suspension of ours is on the objects, recorded at `since`. Updates `memory` with what was seen.
pub fn decide(
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
    ours: bool,
    since: Timestamp,
    suspends: bool,
    memory: &mut Memory,
) -> Decision {
    let under_way = running(upgrade, plans);
    // The operator accepted this upgrade's migrations: no suspension for it, not even a retry.
    let accepted = upgrade.is_some_and(|u| upgrade_under_way(u) && u.allow_unprotected);
    if suspends
        && !accepted
        && let Some(running) = &under_way
        && !memory.ran_pre(&running.key)
    {
        return Decision::Suspend {
            upgrade: running.key.clone(),
            describe: running.words.clone(),
        };
    }
    if !ours {
        memory.forget(None);
        memory.set_aside_ended(upgrade, plans);
        return match (&under_way, suspends) {
            (_, false) => Decision::Restore(Restore::NothingLeft),
            (Some(running), true) if accepted => {
                Decision::Wait(Wait::Accepted(running.words.clone()))
            }
            (Some(running), true) => Decision::Wait(Wait::StandAside(running.words.clone())),
            (None, true) => Decision::Wait(Wait::Idle),
        };
    }
    memory.note_begun(upgrade, plans, since);
    let awaited = awaited(upgrade, plans, since, memory);
    if let Some(why) = held_after_failure(awaited) {
        let name = awaited.map(|u| u.name.clone()).unwrap_or_default();
        memory.forget(Some(name.clone()));
        return Decision::Hold { upgrade: name, why };
    }
    let Some(began) = memory.began.clone() else {
        return Decision::Wait(match &memory.held {
            Some(name) => Wait::HeldGone(name.clone()),
            None => Wait::NoneBegun(since),
        });
    };
    match post_must_wait(upgrade, plans, true) {
        Some(why) => Decision::Wait(Wait::Began {
            began,
            why,
            named: under_way.is_some(),
        }),
        // Said as it is now (its end state), not as it began.
        None => Decision::Restore(Restore::Ended(awaited.map_or(began, Upgrade::describe))),
    }
}

/// The Upgrade whose failure holds the suspension: created since it, the one seen to begin, or
/// the one this guard ran `pre` for (even if it failed before a pass saw it begin); not once an
/// UpgradePlan of the add-on created after it retries the other way (then the plan's end is
/// awaited). A retry by a new Upgrade forgets what began.
fn awaited<'u>(
    upgrade: Option<&'u Upgrade>,
    plans: &[PlanView],
    since: Timestamp,
    memory: &Memory,
) -> Option<&'u Upgrade> {
    upgrade.filter(|u| {
        let retried_by_plan = plans.iter().any(|p| p.created > u.created);
        !retried_by_plan
            && (u.created.is_some_and(|t| t >= since)
                || memory.awaited.as_deref() == Some(u.name.as_str())
                || memory.suspended_for.contains(&key_of(u)))
    })
}

#[cfg(test)]
mod tests;
