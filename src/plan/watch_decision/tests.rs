use super::*;
use crate::plan::harvester_upgrade::{CLEANUP_DONE, CLEANUP_LABEL, LATEST_LABEL, STATE_LABEL};
use crate::plan::upgrade_progress::{PLAN_PHASES, UPGRADE_STATES};
use proptest::prelude::*;
use serde_json::json;

const SINCE: &str = "2026-12-01T10:00:00Z";

/// [`super::decide`], with the record's time as the API server writes it.
fn decide(
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
    ours: bool,
    since: &str,
    suspends: bool,
    memory: &mut Memory,
) -> Decision {
    let since = since.parse().expect("a time");
    super::decide(upgrade, plans, ours, since, suspends, memory)
}

fn upgrade(name: &str, version: &str, state: &str, cleaned: bool, deleting: bool) -> Upgrade {
    let mut labels = json!({LATEST_LABEL: "true", STATE_LABEL: state});
    if cleaned {
        labels[CLEANUP_LABEL] = json!(CLEANUP_DONE);
    }
    let mut u = json!({"metadata": {"namespace": "harvester-system", "name": name,
        "labels": labels, "creationTimestamp": "2026-12-01T11:00:00Z"},
        "spec": {"version": version}});
    if deleting {
        u["metadata"]["deletionTimestamp"] = json!("2026-12-01T12:00:00Z");
    }
    Upgrade::read(&u).unwrap()
}

fn plan(phase: &str) -> PlanView {
    PlanView::read(&json!({"metadata": {"name": "plan-1",
        "creationTimestamp": "2026-12-01T11:00:00Z"}, "status": {"currentPhase": phase}}))
}

/// What the resident guard remembers after suspending for `what` (an Upgrade or a plan).
fn suspended_for(what: &str) -> Memory {
    Memory {
        suspended_for: vec![what.into()],
        ..Memory::default()
    }
}

/// The resident guard through a whole upgrade, `ours` as the objects would say after each act.
#[test]
fn the_resident_guard_suspends_once_at_creation_and_restores_at_the_end() {
    let mut m = Memory::default();
    let idle = decide(None, &[], false, SINCE, true, &mut m);
    assert_eq!(idle.kind(), "wait");
    let created = upgrade("u1", "v1.7.1", "PreparingLoggingInfra", false, false);
    let d = decide(Some(&created), &[], false, SINCE, true, &mut m);
    assert!(
        matches!(&d, Decision::Suspend { upgrade, .. } if upgrade == "Upgrade harvester-system/u1")
    );
    m.suspended_for.push("Upgrade harvester-system/u1".into());
    // After pre: ours, through every state under way: wait.
    for state in UPGRADE_STATES
        .iter()
        .filter(|s| !["Succeeded", "Failed"].contains(s))
    {
        let u = upgrade("u1", "v1.7.1", state, false, false);
        let d = decide(Some(&u), &[], true, SINCE, true, &mut m);
        assert_eq!(d.kind(), "wait", "{state}: {d:?}");
    }
    let ended = upgrade("u1", "v1.7.1", "Succeeded", false, false);
    let d = decide(Some(&ended), &[], true, SINCE, true, &mut m);
    assert!(
        matches!(&d, Decision::Restore(why) if why.to_string().contains("u1")),
        "{d:?}"
    );
    // After post: nothing of ours, the upgrade over: idle, no second pre for it.
    assert_eq!(
        decide(Some(&ended), &[], false, SINCE, true, &mut m).kind(),
        "wait"
    );
}

/// An Upgrade whose migrations the operator accepted (the escape annotation): never a `pre` for
/// it, not even a retry once the annotation comes after failed tries; the next Upgrade without
/// it is suspended as usual. A suspension already in place still waits for its end.
#[test]
fn accepted_migrations_mean_no_suspension_for_that_upgrade() {
    let accept = |mut u: Upgrade| {
        u.allow_unprotected = true;
        u
    };
    let mut m = Memory::default();
    let created = upgrade("u1", "v1.7.1", "PreparingNodes", false, false);
    // pre failed (nothing recorded): the next pass would try again ...
    assert_eq!(
        decide(Some(&created), &[], false, SINCE, true, &mut m).kind(),
        "suspend"
    );
    // ... until the operator accepts the migrations: then never, through the upgrade.
    for state in [
        "PreparingNodes",
        "UpgradingSystemServices",
        "UpgradingNodes",
    ] {
        let u = accept(upgrade("u1", "v1.7.1", state, false, false));
        let d = decide(Some(&u), &[], false, SINCE, true, &mut m);
        assert!(
            matches!(&d, Decision::Wait(Wait::Accepted(_))) && d.event().is_some(),
            "{state}: {d:?}"
        );
    }
    let next = upgrade("u2", "v1.7.1", "PreparingLoggingInfra", false, false);
    assert_eq!(
        decide(Some(&next), &[], false, SINCE, true, &mut m).kind(),
        "suspend"
    );
    // Suspended before the annotation: held to the end, then restored.
    let mut m = Memory::default();
    m.suspended_for.push("Upgrade harvester-system/u1".into());
    let u = accept(upgrade("u1", "v1.7.1", "UpgradingNodes", false, false));
    assert_eq!(
        decide(Some(&u), &[], true, SINCE, true, &mut m).kind(),
        "wait"
    );
    let ended = accept(upgrade("u1", "v1.7.1", "Succeeded", false, false));
    assert_eq!(
        decide(Some(&ended), &[], true, SINCE, true, &mut m).kind(),
        "restore"
    );
}

#[test]
fn a_release_with_a_cleanup_is_restored_after_it() {
    let mut m = suspended_for("Upgrade harvester-system/u1");
    for version in ["v1.7.3", "v1.8.0"] {
        let ended = upgrade("u1", version, "Succeeded", false, false);
        assert_eq!(
            decide(Some(&ended), &[], true, SINCE, true, &mut m).kind(),
            "wait"
        );
        let cleaned = upgrade("u1", version, "Succeeded", true, false);
        assert_eq!(
            decide(Some(&cleaned), &[], true, SINCE, true, &mut m).kind(),
            "restore"
        );
        m.began = None;
    }
}

#[test]
fn a_failed_path_a_upgrade_holds_until_the_retry_has_succeeded() {
    let mut m = suspended_for("Upgrade harvester-system/u1");
    let failed = upgrade("u1", "v1.7.1", "Failed", false, false);
    let d = decide(Some(&failed), &[], true, SINCE, false, &mut m);
    assert!(
        matches!(&d, Decision::Hold { upgrade, .. } if upgrade == "u1"),
        "{d:?}"
    );
    assert_eq!(m.held.as_deref(), Some("u1"));
    // Deleted: gone from the list; still held, named.
    let d = decide(None, &[], true, SINCE, false, &mut m);
    assert!(
        matches!(&d, Decision::Wait(w) if w.to_string().contains("held after the failed Upgrade u1")),
        "{d:?}"
    );
    // The retry: a new Upgrade, under way, then its end.
    let retry = upgrade("u2", "v1.7.1", "UpgradingNodes", false, false);
    assert_eq!(
        decide(Some(&retry), &[], true, SINCE, false, &mut m).kind(),
        "wait"
    );
    let done = upgrade("u2", "v1.7.1", "Succeeded", false, false);
    assert_eq!(
        decide(Some(&done), &[], true, SINCE, false, &mut m).kind(),
        "restore"
    );
    // v1.8.0's own cleanup writes on failure: followed, not held.
    let mut m = Memory::default();
    let v180 = upgrade("u3", "v1.8.0", "Failed", true, false);
    assert_eq!(
        decide(Some(&v180), &[], true, SINCE, false, &mut m).kind(),
        "restore"
    );
}

#[test]
fn the_armed_post_never_suspends_and_ends_without_anything_of_ours() {
    let mut m = Memory::default();
    let created = upgrade("u1", "v1.7.1", "PreparingRepo", false, false);
    assert_eq!(
        decide(Some(&created), &[], true, SINCE, false, &mut m).kind(),
        "wait"
    );
    assert_eq!(
        decide(Some(&created), &[], false, SINCE, false, &mut m).kind(),
        "restore"
    );
    // The add-on's plan is awaited the same way.
    let mut m = Memory::default();
    assert_eq!(
        decide(None, &[plan("NodeUpgrading")], true, SINCE, false, &mut m).kind(),
        "wait"
    );
    assert_eq!(
        decide(None, &[plan("Succeeded")], true, SINCE, false, &mut m).kind(),
        "restore"
    );
}

proptest! {
    /// Whatever the objects say: never a restore while an upgrade is under way, and the
    /// resident guard runs pre at most once per upgrade.
    #[test]
    fn never_a_restore_during_an_upgrade_and_one_pre_per_upgrade(
        version in prop::sample::select(vec!["v1.6.1", "v1.7.1", "v1.7.3", "v1.8.0", "v1.9.0"]),
        states in prop::collection::vec(prop::sample::select(UPGRADE_STATES.to_vec()), 1..12),
        phases in prop::collection::vec(prop::sample::select(PLAN_PHASES.to_vec()), 1..12),
        ours in prop::collection::vec(any::<bool>(), 12),
    ) {
        let mut m = Memory::default();
        let mut suspends = 0;
        for (i, state) in states.iter().enumerate() {
            let u = upgrade("u1", version, state, false, false);
            let p = plan(phases[i % phases.len()]);
            let d = decide(Some(&u), std::slice::from_ref(&p), ours[i], SINCE, true, &mut m);
            if let Decision::Suspend { upgrade, .. } = &d {
                suspends += 1;
                m.suspended_for.push(upgrade.clone());
            }
            if matches!(d, Decision::Restore(_)) {
                prop_assert!(running(Some(&u), std::slice::from_ref(&p)).is_none(), "{:?}", d);
            }
        }
        // One key for the Upgrade, one for the plan: at most two.
        prop_assert!(suspends <= 2, "{} suspends", suspends);
    }
}

/// The resident guard suspends after the Upgrade's creation: that Upgrade, created before the
/// record, is still the one awaited, and its failure holds.
#[test]
fn an_upgrade_created_before_the_suspension_is_awaited_and_its_failure_holds() {
    let later = "2026-12-01T11:30:00Z";
    let mut m = Memory::default();
    let running = upgrade("u1", "v1.7.1", "UpgradingNodes", false, false);
    assert_eq!(
        decide(Some(&running), &[], true, later, true, &mut m).kind(),
        "suspend"
    );
    m.suspended_for.push("Upgrade harvester-system/u1".into());
    assert_eq!(
        decide(Some(&running), &[], true, later, true, &mut m).kind(),
        "wait"
    );
    let failed = upgrade("u1", "v1.7.1", "Failed", false, false);
    let d = decide(Some(&failed), &[], true, later, true, &mut m);
    assert_eq!(d.kind(), "hold", "{d:?}");
    let succeeded = upgrade("u2", "v1.7.1", "Succeeded", false, false);
    let d = decide(Some(&succeeded), &[], true, SINCE, true, &mut m);
    assert!(
        matches!(&d, Decision::Restore(w) if w.to_string().contains("state Succeeded")),
        "{d:?}"
    );
}

/// An upgrade created at 11:00:00, suspended for by the resident guard at 11:00:07 (after its
/// creation), that ended at 11:40:00: its `Completed` condition's time, as Harvester sets it
/// (wrangler's `lastUpdateTime`, no `lastTransitionTime`).
fn ended_upgrade(version: &str, state: &str, cleaned: bool) -> Upgrade {
    let mut labels = json!({LATEST_LABEL: "true", STATE_LABEL: state});
    if cleaned {
        labels[CLEANUP_LABEL] = json!(CLEANUP_DONE);
    }
    let status = if state == "Succeeded" {
        "True"
    } else {
        "False"
    };
    Upgrade::read(
        &json!({"metadata": {"namespace": "harvester-system", "name": "u1",
        "labels": labels, "creationTimestamp": "2026-12-01T11:00:00Z"},
        "spec": {"version": version},
        "status": {"conditions": [{"type": "Completed", "status": status,
            "lastUpdateTime": "2026-12-01T11:40:00Z"}]}}),
    )
    .unwrap()
}

/// A plan created at 11:00:00 in `phase`, its last phase change at `last`.
fn plan_at(name: &str, phase: &str, created: &str, last: &str) -> PlanView {
    PlanView::read(
        &json!({"metadata": {"name": name, "creationTimestamp": created},
        "status": {"currentPhase": phase, "phaseTransitionTimestamps": [
            {"phase": "Initializing", "phaseTransitionTimestamp": created},
            {"phase": phase, "phaseTransitionTimestamp": last}]}}),
    )
}

const RECORDED: &str = "2026-12-01T11:00:07Z";

/// A new pod (after a drain, a reboot, an exit) whose first read comes after the end of the
/// upgrade the last pod suspended for: it remembers nothing, the upgrade was created before the
/// record, and it is no longer under way; its end after the record says it was the one awaited.
/// Restored, for every release and for the add-on's plan; and a suspension recorded after the
/// upgrade's end (a by-hand `pre` for the next one) still waits.
#[test]
fn a_new_pod_after_the_end_restores_what_the_last_one_suspended() {
    for (version, cleaned) in [("v1.7.1", false), ("v1.8.0", true), ("v1.7.3", true)] {
        let ended = ended_upgrade(version, "Succeeded", cleaned);
        let d = decide(
            Some(&ended),
            &[],
            true,
            RECORDED,
            true,
            &mut Memory::default(),
        );
        assert_eq!(d.kind(), "restore", "{version}: {d:?}");
        let later = "2026-12-03T09:00:00Z";
        let d = decide(Some(&ended), &[], true, later, true, &mut Memory::default());
        assert_eq!(d.kind(), "wait", "{version}, recorded after the end: {d:?}");
    }
    // A failed one to v1.7.1, seen first after its end: held, not restored.
    let failed = ended_upgrade("v1.7.1", "Failed", false);
    let d = decide(
        Some(&failed),
        &[],
        true,
        RECORDED,
        true,
        &mut Memory::default(),
    );
    assert_eq!(d.kind(), "hold", "{d:?}");
    let p = plan_at(
        "p1",
        "Succeeded",
        "2026-12-01T11:00:00Z",
        "2026-12-01T11:40:00Z",
    );
    let d = decide(None, &[p], true, RECORDED, true, &mut Memory::default());
    assert_eq!(d.kind(), "restore", "{d:?}");
}

/// The resident guard restored after the upgrade it suspended for; then an operator suspends by
/// hand for the next one (`pre` as a Job) before it is created. The ended upgrade is not the one
/// that suspension awaits: it waits, and is not restored at once.
#[test]
fn a_suspension_by_hand_after_a_restore_waits_for_the_next_upgrade() {
    let mut m = suspended_for("Upgrade harvester-system/u1");
    let ended = ended_upgrade("v1.7.1", "Succeeded", false);
    let d = decide(Some(&ended), &[], true, RECORDED, true, &mut m);
    assert_eq!(d.kind(), "restore", "{d:?}");
    // The pass after the restore: nothing of ours left.
    let d = decide(Some(&ended), &[], false, RECORDED, true, &mut m);
    assert_eq!(d, Decision::Wait(Wait::Idle));
    let by_hand = "2026-12-03T09:00:00Z";
    let d = decide(Some(&ended), &[], true, by_hand, true, &mut m);
    assert!(
        matches!(d, Decision::Wait(Wait::NoneBegun(_))),
        "the suspension by hand stands: {d:?}"
    );
}

/// The add-on's plan failed while the resident guard's own `pre` still ran (a quick pre-check
/// failure, its Finalize already done): no pass saw it under way, and it ended before the record.
/// What `pre` ran for is awaited all the same.
#[test]
fn an_upgrade_that_ended_during_our_pre_is_still_awaited() {
    let mut m = suspended_for("UpgradePlan p1");
    let failed = plan_at(
        "p1",
        "Failed",
        "2026-12-01T11:00:00Z",
        "2026-12-01T11:00:05Z",
    );
    let d = decide(None, &[failed], true, RECORDED, true, &mut m);
    assert_eq!(d.kind(), "restore", "{d:?}");
}

/// A failed Upgrade u1 to v1.7.1 (a release that restores nothing itself) is held; the retry is made with the add-on (an UpgradePlan created
/// later), not a new Upgrade, so u1 stays the latest Upgrade. The plan is suspended for, and once
/// it has succeeded the hold is over: restored.
#[test]
fn a_hold_ends_when_the_retry_is_an_upgrade_plan_that_succeeded() {
    let mut m = suspended_for("Upgrade harvester-system/u1");
    let failed = ended_upgrade("v1.7.1", "Failed", false);
    assert_eq!(
        decide(Some(&failed), &[], true, RECORDED, true, &mut m).kind(),
        "hold"
    );
    let (created, later) = ("2026-12-02T09:00:00Z", "2026-12-02T10:00:00Z");
    let running = plan_at("p1", "NodeUpgrading", created, created);
    let d = decide(
        Some(&failed),
        std::slice::from_ref(&running),
        true,
        RECORDED,
        true,
        &mut m,
    );
    assert_eq!(d.kind(), "suspend", "{d:?}");
    m.suspended_for.push("UpgradePlan p1".into());
    let d = decide(Some(&failed), &[running], true, RECORDED, true, &mut m);
    assert_eq!(d.kind(), "wait", "{d:?}");
    let done = plan_at("p1", "Succeeded", created, later);
    let d = decide(Some(&failed), &[done], true, RECORDED, true, &mut m);
    assert_eq!(d.kind(), "restore", "{d:?}");
    // An older plan (before the failed Upgrade) is no retry: still held.
    let old = plan_at(
        "p0",
        "Succeeded",
        "2026-11-01T09:00:00Z",
        "2026-11-01T10:00:00Z",
    );
    let d = decide(
        Some(&failed),
        &[old],
        true,
        RECORDED,
        true,
        &mut Memory::default(),
    );
    assert_eq!(d.kind(), "hold", "{d:?}");
}

/// A KubeVirt CR whose methods are `methods`, the field owned by each `(manager, operation,
/// time)`.
fn kubevirt_owned(methods: Value, owners: &[(&str, &str, &str)]) -> Value {
    let field = json!({"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}});
    let entries: Vec<Value> = owners
        .iter()
        .map(|(m, op, t)| {
            json!({"manager": m, "operation": op, "apiVersion": "kubevirt.io/v1", "time": t,
                "fieldsType": "FieldsV1", "fieldsV1": field})
        })
        .collect();
    json!({"metadata": {"name": "kubevirt", "managedFields": entries},
        "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": methods}}})
}

/// An operator's `kubectl patch` to `[LiveMigrate]` turns updates on, named by its manager
/// (newest owner first); `[]`, an absent field and a blind restorer's `[LiveMigrate]` do not.
#[test]
fn a_write_that_turns_updates_on_is_named_by_its_field_manager() {
    let owners = [
        ("helm", "Apply", "2026-12-01T09:00:00Z"),
        ("kubectl-patch", "Update", "2026-12-01T11:30:00Z"),
        (crate::model::FIELD_MANAGER, "Update", SINCE),
    ];
    let on = turned_on(&kubevirt_owned(json!(["LiveMigrate"]), &owners));
    assert_eq!(
        on.as_deref(),
        Some(
            r#"workloadUpdateMethods set to ["LiveMigrate"] by kubectl-patch (Update) (field owners also: helm (Apply))"#
        )
    );
    let suspended = kubevirt_owned(json!([]), &[("kubectl-patch", "Update", SINCE)]);
    assert_eq!(turned_on(&suspended), None);
    let absent = json!({"metadata": {"name": "kubevirt"}, "spec": {}});
    assert_eq!(turned_on(&absent), None);
    for restorer in crate::plan::harvester_upgrade::BLIND_RESTORERS {
        let blind = kubevirt_owned(json!(["LiveMigrate"]), &[(restorer, "Update", SINCE)]);
        assert_eq!(turned_on(&blind), None, "{restorer}");
        // Another list by the same manager is no blind restore.
        let other = kubevirt_owned(json!(["Evict"]), &[(restorer, "Update", SINCE)]);
        assert!(turned_on(&other).is_some(), "{restorer}");
    }
    let nobody = json!({"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["Evict"]}}});
    let nobody = turned_on(&nobody).unwrap();
    assert!(nobody.ends_with("by a writer that managedFields does not name"));
}

/// Mid-upgrade, with a suspension of ours on the objects, a write that turned updates on makes
/// the resident guard suspend again; not the armed `post`, not without ours (the guard stood
/// aside), not for an accepted Upgrade, and not once no upgrade is under way (the restore).
#[test]
fn a_write_that_turns_updates_on_mid_upgrade_is_answered_by_pre_again() {
    // Our record on the CR: `pre` suspended it.
    let recorded = |mut kv: Value| {
        let record = json!({"present": true, "value": ["LiveMigrate"]}).to_string();
        kv["metadata"]["annotations"] = json!({crate::model::KUBEVIRT_RECORD: record});
        kv
    };
    let never_suspended = kubevirt_owned(
        json!(["LiveMigrate"]),
        &[("kubectl-patch", "Update", SINCE)],
    );
    let on = recorded(never_suspended.clone());
    let off = recorded(kubevirt_owned(
        json!([]),
        &[(crate::model::FIELD_MANAGER, "Update", SINCE)],
    ));
    let under_way = upgrade("u1", "v1.7.1", "PreparingNodes", false, false);
    let mut m = suspended_for("Upgrade harvester-system/u1");
    let waiting = decide(Some(&under_way), &[], true, SINCE, true, &mut m);
    assert_eq!(waiting.kind(), "wait");
    let answer = |d: &Decision, kv: &Value, u: Option<&Upgrade>, plans: &[PlanView], suspends| {
        answer_turned_on(d.clone(), Some(kv), u, plans, suspends)
    };
    let d = answer(&waiting, &on, Some(&under_way), &[], true);
    let Decision::Resuspend { upgrade: key, .. } = &d else {
        panic!("{d:?}")
    };
    assert_eq!(key, "Upgrade harvester-system/u1");
    assert_eq!(d.kind(), "suspend again");
    assert_eq!(
        d.line(),
        r#"workloadUpdateMethods set to ["LiveMigrate"] by kubectl-patch (Update) while Harvester Upgrade harvester-system/u1 (to v1.7.1, state PreparingNodes) is under way: suspending again"#
    );
    assert!(d.event().is_some());
    // The add-on's plan in the middle of its phases, the same; a new pod's first suspend too.
    let mid = [plan("ClusterUpgrading")];
    let d = answer(&waiting, &on, None, &mid, true);
    assert!(matches!(&d, Decision::Resuspend { upgrade: k, .. } if k == "UpgradePlan plan-1"));
    let first = decide(
        Some(&under_way),
        &[],
        true,
        SINCE,
        true,
        &mut Memory::default(),
    );
    assert_eq!(first.kind(), "suspend");
    let d = answer(&first, &on, Some(&under_way), &[], true);
    assert_eq!(d.kind(), "suspend again");
    // Not the armed post, not on a CR our pre never suspended (it failed before its write: a
    // new suspend, whose failure the unprotected Warning says), not without a write, not once no
    // upgrade runs.
    for (kv, suspends) in [(&on, false), (&never_suspended, true), (&off, true)] {
        let d = answer(&waiting, kv, Some(&under_way), &[], suspends);
        assert_eq!(d, waiting, "{suspends}");
        let d = answer(&first, kv, Some(&under_way), &[], suspends);
        assert_eq!(d, first, "{suspends}");
    }
    let ended = upgrade("u1", "v1.7.1", "Succeeded", false, false);
    let restore = decide(Some(&ended), &[], true, SINCE, true, &mut m);
    assert_eq!(restore.kind(), "restore");
    assert_eq!(answer(&restore, &on, Some(&ended), &[], true), restore);
    // The operator accepted this upgrade's migrations: their write stands.
    let mut accepted = under_way.clone();
    accepted.allow_unprotected = true;
    let d = answer(&waiting, &on, Some(&accepted), &[], true);
    assert_eq!(d, waiting);
}
