//! The waiting loop's state, all of it in one place ([`LoopState`]), and its pure step: what a
//! pass read, with the state, to the decision and whether to act on it now; then what the act
//! came to, with the state, to the state. The loop (`crate::waiting`, `crate::phase::watch`) reads,
//! acts and says; it decides nothing itself.
//!
//! An act runs once per decision and what it read, as kube-runtime's controller reconciles once
//! per change and requeues at the resync. An act that succeeded but leaves the same decision (a
//! `post` that leaves something of ours: both records of the original lost, no
//! `FALLBACK_METHODS`) is not run again until what it read changes or the resync is due. The read
//! right after the act holds the act's own writes (and Fleet's answer to them, which the act
//! waited for): that read is what a later one is compared with, so the watch events of the
//! guard's own writes never run the act again. A failed act is not remembered as done: it is
//! tried again at the next event or after a short pause.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::harvester_upgrade::Upgrade;
use super::ownership::ours;
use super::upgrade_progress::{PlanView, record_time};
use super::watch_decision::{Decision, Memory, answer_turned_on, decide};

/// What the waiting loop keeps from one pass to the next. Nothing of it is needed to decide
/// right (the state lives on the objects: a new pod decides the same); it keeps the loop from
/// doing or saying the same thing twice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopState {
    /// What it remembers of the upgrades (which it ran `pre` for, which one it awaits).
    pub memory: Memory,
    /// The last act that succeeded, until the decision changes.
    acted: Option<Acted>,
    /// How the last `pre` ended, in words (the unprotected upgrade's Warning says it).
    pub last_pre: Option<String>,
    /// The last act failed: the loop reads again after a short pause, not at the resync.
    pub act_failed: bool,
}

/// What a pass read, as the step takes it.
#[derive(Debug, Clone, Copy)]
pub struct PassRead<'a> {
    pub kubevirt: Option<&'a Value>,
    pub chart: Option<&'a Value>,
    pub upgrade: Option<&'a Upgrade>,
    pub plans: &'a [PlanView],
}

/// The loop's clocks: its own (monotonic, for the resync) and the wall's, in whole seconds (a
/// suspension whose record is not read yet is taken as made now).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub loop_time: Duration,
    pub wall: Timestamp,
}

/// A step's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub decision: Decision,
    pub next: Next,
    /// The suspension was held after another failed Upgrade (or the hold lifted): said once.
    pub held_changed: bool,
}

impl LoopState {
    /// One pass: the decision on what it read (`decide`, then `answer_turned_on`) and what to do
    /// with it now. `suspends`: the resident guard (the armed `post` only restores, and acts on
    /// no step: it restores once); `resync`: `WATCH_RESYNC_SECONDS`.
    pub fn step(&mut self, read: &PassRead, suspends: bool, now: Now, resync: Duration) -> Step {
        let PassRead {
            kubevirt,
            chart,
            upgrade,
            plans,
        } = *read;
        let on_objects: Vec<&Value> = kubevirt.into_iter().chain(chart).collect();
        let anything_ours = on_objects.iter().any(|o| ours(o));
        let since = record_time(&on_objects).unwrap_or(now.wall);
        let held_before = self.memory.held.clone();
        let memory = &mut self.memory;
        let decision = decide(upgrade, plans, anything_ours, since, suspends, memory);
        let decision = answer_turned_on(decision, kubevirt, upgrade, plans, suspends);
        let held_changed = self.memory.held != held_before;
        let inputs = || ActInputs::of(kubevirt, chart, upgrade, plans);
        let acted = self.acted.take();
        let (next, acted) = next(&decision, inputs, acted, now.loop_time, resync);
        self.acted = acted;
        Step {
            decision,
            next,
            held_changed,
        }
    }

    /// What an act came to (`Err`: its error, in words): `pre` runs once per upgrade (the
    /// upgrade is remembered once it has succeeded), a failed act is tried again soon, one that
    /// succeeded is not run again on the read it leaves (`next`).
    pub fn after_act(&mut self, decision: &Decision, result: Result<(), String>, at: Duration) {
        if let Decision::Suspend { upgrade, .. } | Decision::Resuspend { upgrade, .. } = decision {
            self.last_pre = Some(match &result {
                Ok(()) => "succeeded".to_string(),
                Err(e) => format!("failed: {e}"),
            });
            if result.is_ok() && !self.memory.ran_pre(upgrade) {
                self.memory.suspended_for.push(upgrade.clone());
            }
        }
        self.act_failed = result.is_err();
        self.acted = result.is_ok().then(|| Acted::now(decision.clone(), at));
    }
}

/// What an act reads, less what moves without changing what it would do: the objects' `status`
/// (KubeVirt's count of outdated VMIs, written by its updater every few seconds of an upgrade;
/// Fleet's view of the ManagedChart), their `resourceVersion`, and the times in `managedFields`.
/// Their spec, annotations, labels and field owners count; the Upgrade and the UpgradePlans as
/// the decision reads them (their state and times) count.
#[derive(Debug, Clone, PartialEq)]
struct ActInputs {
    kubevirt: Option<ObjectInputs>,
    chart: Option<ObjectInputs>,
    upgrade: Option<Upgrade>,
    plans: Vec<PlanView>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct ObjectInputs {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Value,
}

impl ObjectInputs {
    /// `None` for an object that does not parse as one: compared as absent, and the act that
    /// reads it refuses it (a malformed object) anyway.
    fn of(object: &Value) -> Option<Self> {
        let mut read = ObjectInputs::deserialize(object).ok()?;
        let meta = &mut read.metadata;
        meta.resource_version = None;
        if let Some(entries) = &mut meta.managed_fields {
            entries.retain(|e| e.subresource.as_deref() != Some("status"));
            entries.iter_mut().for_each(|e| e.time = None);
        }
        Some(read)
    }
}

impl ActInputs {
    fn of(
        kubevirt: Option<&Value>,
        chart: Option<&Value>,
        upgrade: Option<&Upgrade>,
        plans: &[PlanView],
    ) -> Self {
        ActInputs {
            kubevirt: kubevirt.and_then(ObjectInputs::of),
            chart: chart.and_then(ObjectInputs::of),
            upgrade: upgrade.cloned(),
            plans: plans.to_vec(),
        }
    }
}

/// The last act that succeeded: its decision, when it ran (the loop's clock), and the read right
/// after it (`None` until that read).
#[derive(Debug, Clone, PartialEq)]
struct Acted {
    decision: Decision,
    at: Duration,
    after: Option<ActInputs>,
}

impl Acted {
    /// Remembered once the act has succeeded.
    fn now(decision: Decision, at: Duration) -> Self {
        Acted {
            decision,
            at,
            after: None,
        }
    }
}

/// What the loop does with a pass's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Run the act (`pre` or `post`).
    Act,
    /// The same decision, read right after the act that made it: said once, not run again.
    SameRightAfter,
    /// The same decision, on the same read as right after the act, within the resync: nothing.
    AlreadyActed,
    /// A hold or a wait: no act.
    Nothing,
}

/// The pass's decision and what it read, with the last act, to what now and the act
/// remembered. `now`: the loop's clock; `resync`: `WATCH_RESYNC_SECONDS`. What the pass read is
/// taken apart (`read`) only where the decision is the last act's: most passes are waits.
fn next(
    decision: &Decision,
    read: impl FnOnce() -> ActInputs,
    acted: Option<Acted>,
    now: Duration,
    resync: Duration,
) -> (Next, Option<Acted>) {
    if matches!(decision, Decision::Hold { .. } | Decision::Wait(_)) {
        return (Next::Nothing, None);
    }
    let Some(acted) = acted.filter(|a| a.decision == *decision) else {
        return (Next::Act, None);
    };
    let read = read();
    match &acted.after {
        None => {
            let after = Some(read);
            (Next::SameRightAfter, Some(Acted { after, ..acted }))
        }
        Some(after) if *after == read && now.saturating_sub(acted.at) < resync => {
            (Next::AlreadyActed, Some(acted))
        }
        Some(_) => (Next::Act, None),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::plan::watch_decision::{Restore, Wait};

    const RESYNC: Duration = Duration::from_secs(300);

    fn kubevirt(methods: Value, rv: &str, outdated: u64) -> Value {
        json!({
            "metadata": {"name": "kubevirt", "resourceVersion": rv, "annotations": {"a": "b"},
                "managedFields": [
                    {"manager": "workload-update-guard", "operation": "Apply",
                     "time": format!("2026-12-06T00:00:{:02}Z", outdated % 60),
                     "fieldsV1": {"f:spec": {}}},
                    {"manager": "virt-controller", "operation": "Update", "subresource": "status",
                     "time": "2026-12-06T00:00:00Z", "fieldsV1": {"f:status": {"f:x": {}}}}]},
            "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": methods}},
            "status": {"outdatedVirtualMachineInstanceWorkloads": outdated},
        })
    }

    fn read(kv: &Value) -> ActInputs {
        ActInputs::of(Some(kv), None, None, &[])
    }

    fn restore() -> Decision {
        Decision::Restore(Restore::NothingLeft)
    }

    #[test]
    fn an_act_is_not_run_again_on_the_read_it_left_until_the_resync() {
        let left = kubevirt(json!([]), "8", 3);
        let acted = Some(Acted::now(restore(), Duration::from_secs(10)));
        let s = Duration::from_secs;
        // The read right after it: said, not run.
        let (next1, acted) = next(&restore(), || read(&left), acted, s(11), RESYNC);
        assert_eq!(next1, Next::SameRightAfter);
        // The watch event of its own write, KubeVirt's status moving: nothing.
        let moved = kubevirt(json!([]), "9", 7);
        let (next2, acted) = next(&restore(), || read(&moved), acted, s(12), RESYNC);
        assert_eq!(next2, Next::AlreadyActed);
        // The resync: run again.
        let (next3, acted) = next(&restore(), || read(&moved), acted, s(310), RESYNC);
        assert_eq!((next3, acted), (Next::Act, None));
    }

    #[test]
    fn a_change_of_what_the_act_read_runs_it_again() {
        let s = Duration::from_secs;
        let acted = Some(Acted::now(restore(), s(10)));
        let (_, acted) = next(
            &restore(),
            || read(&kubevirt(json!([]), "8", 3)),
            acted,
            s(11),
            RESYNC,
        );
        let edited = kubevirt(json!(["LiveMigrate"]), "9", 3);
        assert_eq!(
            next(&restore(), || read(&edited), acted, s(12), RESYNC).0,
            Next::Act
        );
    }

    #[test]
    fn another_decision_or_none_remembered_acts_and_a_wait_forgets() {
        let s = Duration::from_secs;
        let kv = read(&kubevirt(json!([]), "8", 3));
        assert_eq!(
            next(&restore(), || kv.clone(), None, s(1), RESYNC).0,
            Next::Act
        );
        let suspend = Decision::Suspend {
            upgrade: "u".into(),
            describe: "the Upgrade u".into(),
        };
        let acted = Some(Acted::now(suspend, s(0)));
        assert_eq!(
            next(&restore(), || kv.clone(), acted.clone(), s(1), RESYNC).0,
            Next::Act
        );
        let wait = Decision::Wait(Wait::Idle);
        assert_eq!(
            next(&wait, || kv.clone(), acted, s(1), RESYNC),
            (Next::Nothing, None)
        );
    }

    fn under_way(name: &str) -> Upgrade {
        let labels = json!({crate::plan::harvester_upgrade::LATEST_LABEL: "true",
            crate::plan::harvester_upgrade::STATE_LABEL: "PreparingLoggingInfra"});
        Upgrade::read(
            &json!({"metadata": {"namespace": "harvester-system", "name": name,
            "labels": labels, "creationTimestamp": "2026-12-01T11:00:00Z"},
            "spec": {"version": "v1.7.1"}}),
        )
        .unwrap()
    }

    fn at(seconds: u64) -> Now {
        Now {
            loop_time: Duration::from_secs(seconds),
            wall: "2026-12-01T12:00:00Z".parse().unwrap(),
        }
    }

    /// The resident guard at an upgrade's creation: suspend; a `pre` that failed is tried again
    /// at the next pass; one that succeeded is remembered, and the upgrade is not suspended for
    /// again (the state the loop keeps, nothing else).
    #[test]
    fn a_suspend_is_acted_until_it_succeeds_then_never_again_for_that_upgrade() {
        let u = under_way("u1");
        let kv = kubevirt(json!(["LiveMigrate"]), "1", 0);
        let read = PassRead {
            kubevirt: Some(&kv),
            chart: None,
            upgrade: Some(&u),
            plans: &[],
        };
        let mut state = LoopState::default();
        let first = state.step(&read, true, at(1), RESYNC);
        assert!(
            matches!(first.decision, Decision::Suspend { .. }),
            "{first:?}"
        );
        assert_eq!(first.next, Next::Act);
        state.after_act(&first.decision, Err("403".into()), Duration::from_secs(1));
        assert!(state.act_failed);
        assert_eq!(state.last_pre.as_deref(), Some("failed: 403"));
        let again = state.step(&read, true, at(2), RESYNC);
        assert_eq!(
            (&again.decision, &again.next),
            (&first.decision, &Next::Act)
        );
        state.after_act(&again.decision, Ok(()), Duration::from_secs(2));
        assert!(!state.act_failed);
        // Our `[]` on the CR now: the upgrade is under way, and ours.
        let suspended = kubevirt(json!([]), "2", 0);
        let read = PassRead {
            kubevirt: Some(&suspended),
            ..read
        };
        let after = state.step(&read, true, at(3), RESYNC);
        assert!(matches!(after.decision, Decision::Wait(_)), "{after:?}");
        assert_eq!(after.next, Next::Nothing);
        assert_eq!(
            state.memory.suspended_for,
            vec!["Upgrade harvester-system/u1"]
        );
    }

    /// The armed `post` (it never suspends) restores at once where nothing of ours is left.
    #[test]
    fn the_armed_post_is_told_to_restore_and_never_to_suspend() {
        let u = under_way("u1");
        let read = PassRead {
            kubevirt: None,
            chart: None,
            upgrade: Some(&u),
            plans: &[],
        };
        let mut state = LoopState::default();
        let step = state.step(&read, false, at(1), Duration::MAX);
        assert_eq!(step.decision, Decision::Restore(Restore::NothingLeft));
    }

    proptest! {
        /// However its own writes and KubeVirt's status move, an act that leaves the same
        /// decision runs once per resync period.
        #[test]
        fn the_same_decision_on_the_same_spec_acts_once_per_resync(
            steps in proptest::collection::vec((1u64..120, 0u64..50), 1..40),
        ) {
            let mut now = Duration::ZERO;
            let mut acted = None;
            let mut acts: Vec<Duration> = Vec::new();
            for (i, (gap, outdated)) in steps.into_iter().enumerate() {
                now += Duration::from_secs(gap);
                let kv = kubevirt(json!([]), &i.to_string(), outdated);
                let (n, kept) = next(&restore(), || read(&kv), acted, now, RESYNC);
                acted = kept;
                if n == Next::Act {
                    if let Some(last) = acts.last() {
                        prop_assert!(now - *last >= RESYNC, "acted at {last:?} and {now:?}");
                    }
                    acts.push(now);
                    acted = Some(Acted::now(restore(), now));
                }
            }
            prop_assert!(!acts.is_empty());
        }
    }
}
