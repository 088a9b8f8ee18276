use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::seen::{Outcome, uid_key};
use super::*;
use crate::plan::upgrade_progress::{PlanView, plan_key};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn record() -> Record {
    let u = UnderWay {
        key: "Upgrade harvester-system/hvst-upgrade-a".into(),
        to: "v1.7.1".into(),
        started: t(0),
    };
    let read = RecordRead {
        kubevirt: None,
        upgrade: None,
        plans: &[],
        current: Some("v1.7.0"),
        now: t(0),
    };
    Record::begin(&u, &read)
}

fn migration(uid: &str, cause: Cause, outcome: Outcome, created: i64, vmi: &str) -> MigrationSeen {
    MigrationSeen {
        key: uid_key(uid),
        cause,
        outcome,
        created: Some(t(created)),
        vmi: format!("vms/{vmi}"),
    }
}

fn vmi(name: &str, phase: &str, migratable: bool, outdated: bool) -> VmiSeen {
    VmiSeen {
        name: format!("vms/{name}"),
        phase: phase.into(),
        live_migratable: Some(migratable),
        not_migratable_reason: if migratable {
            ""
        } else {
            "DisksNotLiveMigratable"
        }
        .into(),
        outdated,
        phase_since: Some(t(5)),
        node: "node-0".into(),
    }
}

fn listed(tally: &mut Tally, kind: Listed, seen: Vec<Seen>) {
    tally.observe(Seen::ListBegins(kind));
    seen.into_iter().for_each(|s| tally.observe(s));
    tally.observe(Seen::ListDone(kind));
}

#[test]
fn reads_the_cause_from_kubevirts_marks_and_the_vmi_from_its_status() {
    let m = json!({"metadata": {"namespace": "vms", "name": "kubevirt-evacuation-x", "uid": "u1",
        "creationTimestamp": "2027-01-15T08:00:00Z", "annotations": {EVACUATION_ANNOTATION: "node-1",
        "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"vmiName": "vm-1"}, "status": {"phase": "Failed"}});
    let seen = MigrationSeen::read(&m);
    assert_eq!(seen.cause, Cause::Evacuation);
    assert_eq!(seen.outcome, Outcome::Failed);
    assert_eq!(seen.vmi, "vms/vm-1");
    let wu = json!({"metadata": {"name": "kubevirt-workload-update-abc"}});
    assert_eq!(MigrationSeen::read(&wu).cause, Cause::WorkloadUpdate);
    assert_eq!(
        MigrationSeen::read(&json!({"metadata": {"name": "mine"}})).cause,
        Cause::Other
    );
    // A field of another type reads as absent; the object still counts.
    let odd = json!({"metadata": {"name": "m", "annotations": "x"}, "status": {"phase": 3}});
    assert_eq!(MigrationSeen::read(&odd).outcome, Outcome::Unfinished);
    let v = json!({"metadata": {"namespace": "vms", "name": "vm-1",
        "labels": {OUTDATED_LABEL: ""}}, "status": {"phase": "Succeeded", "nodeName": "node-2",
        "conditions": [{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable"}],
        "phaseTransitionTimestamps": [{"phase": "Running", "phaseTransitionTimestamp": "2027-01-15T07:00:00Z"},
            {"phase": "Succeeded", "phaseTransitionTimestamp": "2027-01-15T08:00:00Z"}]}});
    let seen = VmiSeen::read(&v);
    assert!(seen.ended() && seen.outdated);
    assert_eq!(seen.live_migratable, Some(false));
    assert_eq!(seen.not_migratable_reason, "DisksNotLiveMigratable");
    assert_eq!(
        seen.phase_since,
        Some("2027-01-15T08:00:00Z".parse().unwrap())
    );
    assert_eq!(seen.node, "node-2");
}

#[test]
fn each_migration_counts_once_by_cause_whatever_the_lists_repeat() {
    let mut tally = Tally::new(record());
    let before = migration("old", Cause::Other, Outcome::Succeeded, -10, "vm-0");
    let evac = |o| migration("e1", Cause::Evacuation, o, 10, "vm-1");
    let wu = |o| migration("w1", Cause::WorkloadUpdate, o, 11, "vm-2");
    listed(
        &mut tally,
        Listed::Migrations,
        vec![Seen::Migration(before.clone())],
    );
    tally.observe(Seen::Migration(evac(Outcome::Unfinished)));
    tally.observe(Seen::Migration(evac(Outcome::Failed)));
    tally.observe(Seen::Migration(wu(Outcome::Unfinished)));
    // A relist after the server's 410: the same objects again.
    let again = vec![before, evac(Outcome::Failed), wu(Outcome::Succeeded)];
    listed(
        &mut tally,
        Listed::Migrations,
        again.into_iter().map(Seen::Migration).collect(),
    );
    let m = &tally.record.migrations;
    assert_eq!(
        (m.evacuation, m.workload_update, m.other, m.failed),
        (1, 1, 0, 1)
    );
}

#[test]
fn a_new_pod_goes_on_from_the_kept_record_without_counting_twice() {
    let mut first = Tally::new(record());
    let open = migration("e1", Cause::Evacuation, Outcome::Unfinished, 10, "vm-1");
    let done = migration("e2", Cause::Evacuation, Outcome::Succeeded, 10, "vm-2");
    first.observe(Seen::Migration(open.clone()));
    first.observe(Seen::Migration(done.clone()));
    let kept = first.to_keep(t(12));
    let kept: Record = serde_json::from_str(&serde_json::to_string(&kept).unwrap()).unwrap();
    let mut second = Tally::new(kept);
    let later = migration("e3", Cause::Evacuation, Outcome::Succeeded, 10, "vm-3");
    let failed = MigrationSeen {
        outcome: Outcome::Failed,
        ..open
    };
    listed(
        &mut second,
        Listed::Migrations,
        vec![
            Seen::Migration(failed),
            Seen::Migration(done),
            Seen::Migration(later),
        ],
    );
    let m = &second.record.migrations;
    assert_eq!((m.evacuation, m.failed), (3, 1), "{m:?}");
}

#[test]
fn a_vm_shut_down_is_named_with_its_reason() {
    let mut tally = Tally::new(record());
    listed(
        &mut tally,
        Listed::Vmis,
        vec![
            Seen::Vmi(vmi("a", "Running", false, false)),
            Seen::Vmi(vmi("b", "Running", true, false)),
            Seen::Vmi(vmi("c", "Running", true, false)),
            Seen::Vmi(VmiSeen {
                phase_since: Some(t(-100)),
                ..vmi("gone-before", "Succeeded", true, false)
            }),
        ],
    );
    assert_eq!(tally.record.vms.running_at_start, 3);
    assert_eq!(tally.record.vms.not_live_migratable_at_start, 1);
    tally.observe(Seen::Vmi(vmi("a", "Succeeded", false, true)));
    tally.observe(Seen::Migration(migration(
        "m",
        Cause::Evacuation,
        Outcome::Unfinished,
        9,
        "b",
    )));
    tally.observe(Seen::Migration(migration(
        "m",
        Cause::Evacuation,
        Outcome::Failed,
        9,
        "b",
    )));
    tally.observe(Seen::VmiDeleted(vmi("b", "Running", true, true)));
    tally.observe(Seen::Vmi(vmi("c", "Failed", true, false)));
    // Seen again ended: not twice.
    tally.observe(Seen::Vmi(vmi("c", "Failed", true, false)));
    let s = &tally.record.shut_down;
    assert_eq!(s.total, 3);
    let by: BTreeMap<Reason, u64> = [
        (Reason::NotLiveMigratable, 1),
        (Reason::FailedMigration, 1),
        (Reason::Stopped, 1),
    ]
    .into();
    assert_eq!(s.by_reason, by);
    assert_eq!(s.named[0].vm, "vms/a");
    assert_eq!(s.named[0].detail, "DisksNotLiveMigratable");
    let lines = tally.record.details().join("\n");
    assert!(
        lines.contains("vms/a on node-0 (not live-migratable: DisksNotLiveMigratable)"),
        "{lines}"
    );
}

#[test]
fn with_evict_listed_an_outdated_vm_shut_down_was_evicted_by_the_updater() {
    let mut tally = Tally::new(record());
    tally.evict_listed = true;
    tally.observe(Seen::Vmi(vmi("a", "Running", true, true)));
    tally.observe(Seen::Vmi(vmi("a", "Succeeded", true, true)));
    assert_eq!(
        tally.record.shut_down.named[0].reason,
        Reason::EvictedByTheUpdater
    );
}

#[test]
fn a_new_pod_counts_a_vm_that_ended_since_the_last_kept_record_only() {
    let mut first = Tally::new(record());
    listed(
        &mut first,
        Listed::Vmis,
        vec![Seen::Vmi(vmi("a", "Running", false, false))],
    );
    first.observe(Seen::Vmi(vmi("a", "Succeeded", false, false)));
    let kept = first.to_keep(t(20));
    let mut second = Tally::new(kept);
    let ended_later = VmiSeen {
        phase_since: Some(t(30)),
        ..vmi("b", "Succeeded", false, false)
    };
    listed(
        &mut second,
        Listed::Vmis,
        vec![
            Seen::Vmi(vmi("a", "Succeeded", false, false)),
            Seen::Vmi(ended_later),
        ],
    );
    assert_eq!(second.record.shut_down.total, 2);
    assert_eq!(
        second.record.vms.running_at_start, 1,
        "kept, not listed again"
    );
}

#[test]
fn a_pod_stopped_before_its_first_list_leaves_the_vms_at_the_start_to_the_next() {
    let mut first = Tally::new(record());
    let kept = first.to_keep(t(1));
    let mut second = Tally::new(kept);
    listed(
        &mut second,
        Listed::Vmis,
        vec![
            Seen::Vmi(vmi("a", "Running", true, false)),
            Seen::Vmi(vmi("b", "Running", false, false)),
        ],
    );
    assert_eq!(second.record.vms.running_at_start, 2);
    assert_eq!(second.record.vms.not_live_migratable_at_start, 1);
}

#[test]
fn saved_is_what_the_suspension_spared_and_nothing_where_nobody_suspended() {
    let mut r = record();
    r.vms.outdated_migratable_peak = 5;
    assert_eq!(r.saved(), 0, "nobody suspended");
    r.suspended_by = Some("the guard".into());
    assert_eq!(r.saved(), 5);
    r.after_restore.workload_update = 2;
    assert_eq!(r.saved(), 3);
    r.migrations.workload_update = 9;
    assert_eq!(r.saved(), 0);
}

#[test]
fn the_peak_of_migratable_outdated_vms_stops_at_the_restore() {
    let mut tally = Tally::new(record());
    tally.observe(Seen::Vmi(vmi("a", "Running", true, true)));
    tally.observe(Seen::Vmi(vmi("b", "Running", false, true)));
    assert_eq!(tally.record.vms.outdated_peak, 2);
    assert_eq!(tally.record.vms.outdated_migratable_peak, 1);
    tally.record.restored_at = Some(t(50));
    tally.observe(Seen::Vmi(vmi("c", "Running", true, true)));
    assert_eq!(tally.record.vms.outdated_migratable_peak, 1);
    assert_eq!(tally.outdated_now(), 3);
    // A workload-update migration after the restore is the wave.
    tally.observe(Seen::Migration(migration(
        "w",
        Cause::WorkloadUpdate,
        Outcome::Unfinished,
        55,
        "c",
    )));
    assert_eq!(tally.record.after_restore.workload_update, 1);
    assert_eq!(tally.wave_running(), 1);
}

fn kubevirt(methods: Value, manager: &str) -> Value {
    json!({"metadata": {"managedFields": [{"manager": manager, "operation": "Update",
        "fieldsV1": {"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}}}]},
        "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": methods}},
        "status": {"observedKubeVirtVersion": "v1.6.0"}})
}

fn read<'a>(kv: Option<&'a Value>, now: i64) -> RecordRead<'a> {
    RecordRead {
        kubevirt: kv,
        upgrade: None,
        plans: &[],
        current: None,
        now: t(now),
    }
}

#[test]
fn the_pass_says_who_suspended_when_the_updates_came_back_and_the_end() {
    let mut tally = Tally::new(record());
    let suspended = kubevirt(json!([]), "harvester");
    let mut r = read(Some(&suspended), 3);
    // The Upgrade is still the latest, under way.
    let plan = PlanView::read(&json!({"metadata": {"name": "p"}}));
    let plans = [plan];
    r.plans = &plans;
    tally.record.upgrade = plan_key("p");
    tally.record.started = t(0);
    let plan_created_now = PlanView {
        created: Some(t(0)),
        ..plans[0].clone()
    };
    let plans = [plan_created_now];
    r.plans = &plans;
    tally.from_pass(&r);
    assert_eq!(tally.record.suspended_by.as_deref(), Some("Harvester"));
    assert_eq!(tally.record.ended, None);
    let restored = kubevirt(json!(["LiveMigrate", "Evict"]), "harvester");
    tally.from_pass(&read(Some(&restored), 40));
    assert_eq!(tally.record.restored_at, Some(t(40)));
    assert!(tally.evict_listed);
    assert_eq!(
        tally.record.outcome.as_deref(),
        Some("Deleted"),
        "the plan is gone"
    );
    assert_eq!(
        next(Some(&tally), &read(None, 50)),
        Next::Count,
        "the updater's first pass"
    );
    assert_eq!(
        next(Some(&tally), &read(None, 55)),
        Next::Close,
        "nothing outdated"
    );
    tally.close();
    assert!(tally.record.complete && tally.record.counting.is_none());
}

#[test]
fn an_outdated_vm_left_keeps_the_record_open_for_the_wave_at_most_five_minutes() {
    let mut tally = Tally::new(record());
    tally.observe(Seen::Vmi(vmi("a", "Running", false, true)));
    tally.record.ended = Some(t(100));
    assert_eq!(next(Some(&tally), &read(None, 200)), Next::Count);
    assert_eq!(next(Some(&tally), &read(None, 400)), Next::Close);
}

#[test]
fn a_retry_under_way_closes_the_failed_upgrades_record_at_once() {
    let mut tally = Tally::new(record());
    tally.record.suspended_by = Some("the guard".into());
    tally.record.ended = Some(t(100));
    tally.record.outcome = Some("Failed".into());
    let retry = PlanView {
        created: Some(t(120)),
        ..PlanView::read(&json!({"metadata": {"name": "retry"}}))
    };
    let plans = [retry];
    let mut r = read(None, 130);
    assert_eq!(next(Some(&tally), &r), Next::Count, "held: not restored");
    r.plans = &plans;
    assert_eq!(next(Some(&tally), &r), Next::Close);
    assert!(matches!(next(None, &r), Next::Open(u) if u.key == "UpgradePlan retry"));
}

#[test]
fn a_suspension_never_restored_closes_at_the_latest_half_an_hour_after_the_end() {
    let mut tally = Tally::new(record());
    tally.record.suspended_by = Some("the guard".into());
    tally.record.ended = Some(t(100));
    assert_eq!(next(Some(&tally), &read(None, 1000)), Next::Count);
    assert_eq!(next(Some(&tally), &read(None, 1900)), Next::Close);
}

#[test]
fn the_configmap_keeps_the_last_twenty_and_each_record_in_its_place() {
    let mut cm = json!({"metadata": {"resourceVersion": "1"}});
    for i in 0..25 {
        let mut r = record();
        r.started = t(i);
        let plan = save_plan(&cm, &r).unwrap();
        assert_eq!(
            plan.patch.as_ref().unwrap().0[0],
            serde_json::from_value(
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "1"})
            )
            .unwrap()
        );
        json_patch::patch(&mut cm, &plan.patch.unwrap()).unwrap();
    }
    let records = kept(&cm).unwrap();
    assert_eq!(records.len(), KEPT);
    assert_eq!(records[0].started, t(5));
    let mut again = records[KEPT - 1].clone();
    again.saved = 7;
    let plan = save_plan(&cm, &again).unwrap();
    json_patch::patch(&mut cm, &plan.patch.unwrap()).unwrap();
    let records = kept(&cm).unwrap();
    assert_eq!((records.len(), records[KEPT - 1].saved), (KEPT, 7));
    let broken = json!({"metadata": {"resourceVersion": "1"}, "data": {DATA_KEY: "{"}});
    assert!(kept(&broken).unwrap_err().0.contains("does not parse"));
}

/// One migration's life: its cause, whether it was made during the upgrade, how it ends.
fn a_migration() -> impl Strategy<Value = (u8, bool, u8)> {
    (0u8..3, any::<bool>(), 0u8..3)
}

proptest! {
    /// Whatever the watches repeat (relists after errors) and wherever a pod is replaced (a new
    /// one going on from the kept record), each migration made during the upgrade is counted
    /// once by its cause, and each failure once: the independent count's figures.
    #[test]
    fn the_count_equals_the_migrations_made_whatever_the_relists_and_restarts(
        lives in proptest::collection::vec(a_migration(), 0..40),
        relists in proptest::collection::vec(0usize..120, 0..6),
        restarts in proptest::collection::vec(0usize..120, 0..3),
    ) {
        let cause = |c: u8| [Cause::WorkloadUpdate, Cause::Evacuation, Cause::Other][c as usize];
        let ends = |o: u8| [Outcome::Unfinished, Outcome::Succeeded, Outcome::Failed][o as usize];
        // Each migration's events: created (unfinished), then its end if it has one; all the
        // events in order of creation, two seconds apart per migration.
        let mut events = vec![];
        for (i, (c, during, o)) in lives.iter().enumerate() {
            let created = if *during { 1 + i as i64 / 2 } else { -5 };
            let m = migration(&format!("uid-{i}"), cause(*c), Outcome::Unfinished, created, "vm");
            events.push(m.clone());
            if *o > 0 {
                events.push(MigrationSeen { outcome: ends(*o), ..m });
            }
        }
        let mut tally = Tally::new(record());
        let mut now: BTreeMap<u64, MigrationSeen> = BTreeMap::new();
        for (step, e) in events.into_iter().enumerate() {
            now.insert(e.key, e.clone());
            tally.observe(Seen::Migration(e));
            if relists.contains(&step) {
                listed(&mut tally, Listed::Migrations, now.values().cloned().map(Seen::Migration).collect());
            }
            if restarts.contains(&step) {
                let kept = tally.to_keep(t(100));
                tally = Tally::new(kept);
                listed(&mut tally, Listed::Migrations, now.values().cloned().map(Seen::Migration).collect());
            }
        }
        let made = |c: u8| lives.iter().filter(|(k, d, _)| *k == c && *d).count() as u64;
        let failed = lives.iter().filter(|(_, d, o)| *d && *o == 2).count() as u64;
        let m = &tally.record.migrations;
        prop_assert_eq!((m.workload_update, m.evacuation, m.other, m.failed),
            (made(0), made(1), made(2), failed));
    }
}

#[test]
fn after_the_fact_the_last_ended_upgrade_is_recorded_and_nothing_counted_as_saved() {
    let ended = |name: &str, created: i64| PlanView {
        phase: "Succeeded".into(),
        created: Some(t(created)),
        ..PlanView::read(&json!({"metadata": {"name": name}}))
    };
    let running = PlanView {
        created: Some(t(50)),
        ..PlanView::read(&json!({"metadata": {"name": "running"}}))
    };
    let plans = [ended("older", 1), ended("newer", 20), running];
    let last = last_ended(None, &plans).unwrap();
    assert_eq!(
        (last.key.as_str(), last.started),
        ("UpgradePlan newer", t(20))
    );
    assert_eq!(last_ended(None, &plans[2..]), None);
    let mut r = record();
    r.suspended_by = Some("the guard".into());
    r.vms.outdated_migratable_peak = 4;
    r.after_the_fact = Some("counted after the fact".into());
    assert_eq!(r.saved(), 0);
    assert!(
        r.line().contains("migrations saved not known"),
        "{}",
        r.line()
    );
}
