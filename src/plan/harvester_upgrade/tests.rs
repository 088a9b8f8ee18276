use super::*;
use crate::plan::pre_advice::{PreGate, pre_gate};
use crate::plan::testing::*;
use crate::plan::upgrade_progress::cleanup_wait;
use proptest::prelude::*;
use serde_json::json;

fn upgrade(version: &str, labels: Value, backup: Option<&str>) -> Value {
    let mut u = json!({
        "apiVersion": "harvesterhci.io/v1beta1", "kind": "Upgrade",
        "metadata": {"namespace": "harvester-system", "name": "hvst-upgrade-x", "labels": labels,
                     "creationTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"version": version},
    });
    if let Some(b) = backup {
        u["metadata"]["annotations"] = json!({BACKUP_ANNOTATION: b});
    }
    u
}

fn latest_label() -> Value {
    json!({LATEST_LABEL: "true"})
}

#[test]
fn each_release_has_its_handling() {
    for (v, h) in [
        ("v1.6.1", Handling::None),
        ("v1.7.0", Handling::None),
        ("v1.7.1", Handling::None),
        ("v1.7.2", Handling::BackupAndRestore),
        ("v1.7.3", Handling::BackupAndRestore),
        ("v1.8.0", Handling::PatchAndHardCodedRestore),
        ("v1.8.0-rc3", Handling::PatchAndHardCodedRestore),
        ("v1.8.1", Handling::BackupAndRestore),
        ("v1.9.0-rc6", Handling::BackupAndRestore),
        ("1.9.0", Handling::BackupAndRestore),
        ("v2.0.0", Handling::BackupAndRestore),
        ("master-head", Handling::BackupAndRestore),
        ("v1.8", Handling::BackupAndRestore),
    ] {
        assert_eq!(Handling::of(v), h, "{v}");
    }
}

#[test]
fn the_latest_upgrade_is_the_labelled_one() {
    let mut old = upgrade("v1.7.1", json!({}), None);
    old["metadata"]["name"] = json!("old");
    let new = upgrade("v1.8.1", latest_label(), Some("null"));
    let u = latest(&[old.clone(), new]).unwrap().unwrap();
    assert_eq!(u.version, "v1.8.1");
    assert_eq!(u.backup, Backup::Absent);
    assert!(u.cleanup_pending());
    assert_eq!(latest(&[old]).unwrap(), None);
    assert_eq!(latest(&[]).unwrap(), None);
}

#[test]
fn a_cleaned_up_or_unhandled_upgrade_is_not_waited_for() {
    let done = upgrade(
        "v1.8.1",
        json!({LATEST_LABEL: "true", CLEANUP_LABEL: CLEANUP_DONE}),
        Some("[]"),
    );
    let u = Upgrade::read(&done).unwrap();
    assert!(!u.cleanup_pending());
    assert_eq!(cleanup_wait(Some(&u), true), None);
    let legacy = Upgrade::read(&upgrade("v1.7.1", latest_label(), None)).unwrap();
    assert!(!legacy.cleanup_pending());
    assert_eq!(cleanup_wait(Some(&legacy), true), None);
    let running = Upgrade::read(&upgrade("v1.7.3", latest_label(), Some("[]"))).unwrap();
    assert!(
        cleanup_wait(Some(&running), true)
            .unwrap()
            .contains(CLEANUP_LABEL)
    );
    // Nothing of ours to restore: nothing to wait for.
    assert_eq!(cleanup_wait(Some(&running), false), None);
    assert_eq!(cleanup_wait(None, true), None);
}

#[test]
fn a_backup_that_is_not_json_is_malformed_and_named() {
    let bad = upgrade("v1.8.1", latest_label(), Some("[LiveMigrate"));
    let e = latest(&[bad]).unwrap_err();
    assert!(
        e.0.contains("hvst-upgrade-x") && e.0.contains(BACKUP_ANNOTATION),
        "{e}"
    );
}

#[test]
fn the_cleanup_writes_its_backup_back_or_the_legacy_list() {
    let u = |b: Option<&str>| Upgrade::read(&upgrade("v1.8.1", latest_label(), b)).unwrap();
    let empty = json!([]);
    assert_eq!(
        u(Some("[]")).cleanup_writes(Some(&empty)),
        CleanupWrite::Nothing
    );
    assert_eq!(
        u(Some("null")).cleanup_writes(Some(&empty)),
        CleanupWrite::RemoveKey
    );
    assert_eq!(u(Some("null")).cleanup_writes(None), CleanupWrite::Nothing);
    assert_eq!(
        u(Some(r#"["LiveMigrate","Evict"]"#)).cleanup_writes(Some(&empty)),
        CleanupWrite::Set(json!(["LiveMigrate", "Evict"]))
    );
    assert_eq!(
        u(None).cleanup_writes(Some(&empty)),
        CleanupWrite::Set(blind_value())
    );
    assert_eq!(u(None).cleanup_writes(None), CleanupWrite::Nothing);
    // v1.8.0 does not touch the values.
    let v180 = Upgrade::read(&upgrade("v1.8.0", latest_label(), None)).unwrap();
    assert_eq!(v180.cleanup_writes(Some(&empty)), CleanupWrite::Nothing);
}

#[test]
fn pre_leaves_a_suspension_that_harvester_backed_up_to_harvester() {
    let backed = Upgrade::read(&upgrade("v1.8.1", latest_label(), Some("null"))).unwrap();
    let suspended = Some(json!([]));
    match pre_gate(Some(&backed), false, &suspended, false) {
        PreGate::LeaveToHarvester(m) => {
            assert!(m.contains("writes nothing") && m.contains("null"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // Not rendered yet: still Harvester's.
    assert!(matches!(
        pre_gate(Some(&backed), false, &Some(json!(["LiveMigrate"])), false),
        PreGate::LeaveToHarvester(_)
    ));
    // A rerun of ours keeps its suspension.
    assert!(
        matches!(pre_gate(Some(&backed), true, &suspended, false), PreGate::Proceed(n) if n.len() == 1)
    );
    // No backup yet: pre goes first, and says that post waits.
    let early = Upgrade::read(&upgrade("v1.8.1", latest_label(), None)).unwrap();
    assert!(
        matches!(pre_gate(Some(&early), false, &suspended, false), PreGate::Proceed(n) if n[0].contains("post waits"))
    );
    // No upgrade, or one whose cleanup is done: nothing to say.
    assert_eq!(
        pre_gate(None, false, &suspended, false),
        PreGate::Proceed(vec![])
    );
    let done = Upgrade::read(&upgrade(
        "v1.8.1",
        json!({LATEST_LABEL: "true", CLEANUP_LABEL: CLEANUP_DONE}),
        Some("null"),
    ))
    .unwrap();
    assert_eq!(
        pre_gate(Some(&done), false, &suspended, false),
        PreGate::Proceed(vec![])
    );
}

/// v1.8.0's own `[]` is a claim that its retried chart deploy stops on (harvester#10677): `pre`
/// goes on after it too, its values override lets that deploy through.
#[test]
fn pre_goes_on_after_v180s_own_suspension() {
    let v180 = Upgrade::read(&upgrade("v1.8.0", latest_label(), None)).unwrap();
    match pre_gate(Some(&v180), false, &Some(json!([])), true) {
        PreGate::Proceed(n) => assert!(n[0].contains("has suspended the methods already"), "{n:?}"),
        other => panic!("{other:?}"),
    }
    // Before its patch: pre records the real original, and says what the cleanup will do.
    match pre_gate(
        Some(&v180),
        false,
        &Some(json!(["LiveMigrate", "Evict"])),
        false,
    ) {
        PreGate::Proceed(n) => assert!(n[0].contains("cleanup will write [LiveMigrate]"), "{n:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_blind_restore_is_told_by_its_writer() {
    let mut kv = kubevirt(Some(json!(["LiveMigrate"])));
    kv["metadata"]["managedFields"] = json!([entry("harvester", "Update", methods_fields())]);
    let live = Some(json!(["LiveMigrate"]));
    assert_eq!(
        blind_restorer(&kv, crate::model::METHODS_PATH, &live).as_deref(),
        Some("harvester")
    );
    // Another value, or an operator's kubectl: not a blind restore.
    assert_eq!(
        blind_restorer(&kv, crate::model::METHODS_PATH, &Some(json!(["Evict"]))),
        None
    );
    kv["metadata"]["managedFields"] = json!([entry("kubectl-edit", "Update", methods_fields())]);
    assert_eq!(blind_restorer(&kv, crate::model::METHODS_PATH, &live), None);
    // An Apply by Helm of the same value is a render, not a restore.
    kv["metadata"]["managedFields"] = json!([entry("harvester", "Apply", methods_fields())]);
    assert_eq!(blind_restorer(&kv, crate::model::METHODS_PATH, &live), None);
}

/// The releases on offer that handle the methods themselves, newest first.
fn offered(versions: &[Value], current: Option<&str>) -> Vec<(String, Handling)> {
    let mut out = on_offer(versions, current);
    out.retain(|(_, h)| *h != Handling::None);
    out
}

#[test]
fn offered_releases_are_those_that_handle_it_newest_first() {
    let v = |n: &str| json!({"metadata": {"name": n}});
    let all = [v("v1.7.1"), v("v1.8.0"), v("v1.9.0"), v("v1.7.3")];
    // Only those newer than the cluster's own version.
    assert_eq!(
        offered(&all, Some("v1.8.0")),
        [("v1.9.0".to_string(), Handling::BackupAndRestore)]
    );
    let got = offered(&all, None);
    assert_eq!(
        got,
        [
            ("v1.9.0".to_string(), Handling::BackupAndRestore),
            ("v1.8.0".to_string(), Handling::PatchAndHardCodedRestore),
            ("v1.7.3".to_string(), Handling::BackupAndRestore),
        ]
    );
}

/// The end of an Upgrade is its `Completed` condition's time as wrangler writes it
/// (`lastUpdateTime` only); `lastTransitionTime` only stands in where that is missing; an
/// `Unknown` condition (created by `initStatus`, no time) is no end.
#[test]
fn the_end_is_the_time_wrangler_writes() {
    let with = |cond: Value| {
        let mut u = upgrade("v1.7.1", latest_label(), None);
        u["status"] = json!({"conditions": [
            {"type": "LogReady", "status": "True", "lastUpdateTime": "2026-11-30T10:01:00Z"},
            cond]});
        Upgrade::read(&u).unwrap().ended
    };
    let t = |s: &str| s.parse().ok();
    assert_eq!(
        with(
            json!({"type": "Completed", "status": "True", "lastUpdateTime": "2026-11-30T11:00:00Z"})
        ),
        t("2026-11-30T11:00:00Z")
    );
    assert_eq!(
        with(
            json!({"type": "Completed", "status": "False", "reason": "x",
                    "lastUpdateTime": "2026-11-30T11:00:00Z", "lastTransitionTime": "2026-11-30T10:00:00Z"})
        ),
        t("2026-11-30T11:00:00Z"),
        "lastUpdateTime first"
    );
    assert_eq!(
        with(
            json!({"type": "Completed", "status": "True", "lastTransitionTime": "2026-11-30T10:30:00Z"})
        ),
        t("2026-11-30T10:30:00Z"),
        "lastTransitionTime where there is nothing else"
    );
    assert_eq!(
        with(
            json!({"type": "Completed", "status": "True", "lastUpdateTime": "",
                    "lastTransitionTime": "2026-11-30T10:30:00Z"})
        ),
        t("2026-11-30T10:30:00Z")
    );
    assert_eq!(
        with(json!({"type": "Completed", "status": "Unknown"})),
        None
    );
    assert_eq!(
        with(json!({"type": "Completed", "status": "True"})),
        None,
        "no time at all"
    );
}

proptest! {
    #[test]
    fn the_gates_never_leave_a_pending_cleanup_unseen(
        version in prop::sample::select(vec!["v1.7.1", "v1.7.2", "v1.8.0", "v1.8.1", "v1.9.0"]),
        cleaned in any::<bool>(),
        backup in prop::option::of(prop::sample::select(vec!["null", "[]", "[\"LiveMigrate\"]"])),
        ours in any::<bool>(),
        suspended in any::<bool>(),
    ) {
        let mut labels = latest_label();
        if cleaned {
            labels[CLEANUP_LABEL] = json!(CLEANUP_DONE);
        }
        let u = Upgrade::read(&upgrade(version, labels, backup)).unwrap();
        let methods = if suspended { Some(json!([])) } else { Some(json!(["LiveMigrate"])) };
        let pending = Handling::of(version) != Handling::None && !cleaned;
        // post waits exactly when the cleanup is pending and there is something of ours.
        prop_assert_eq!(cleanup_wait(Some(&u), ours).is_some(), pending && ours);
        // pre writes nothing exactly when Harvester holds the suspension (its backup) and
        // nothing is ours; never after v1.8.0's [] (a claim its chart's deploy stops on).
        let leave = matches!(pre_gate(Some(&u), ours, &methods, false), PreGate::LeaveToHarvester(_));
        prop_assert_eq!(leave, pending && !ours && backup.is_some());
    }
}
