use super::*;
use crate::model::FIELD_MANAGER;
use crate::plan::harvester_upgrade::{CLEANUP_DONE, CLEANUP_LABEL, LATEST_LABEL, STATE_LABEL};
use proptest::prelude::*;
use serde_json::json;

fn upgrade(version: &str, state: Option<&str>, cleaned: bool, deleting: bool) -> Upgrade {
    let mut labels = json!({LATEST_LABEL: "true"});
    if let Some(s) = state {
        labels[STATE_LABEL] = json!(s);
    }
    if cleaned {
        labels[CLEANUP_LABEL] = json!(CLEANUP_DONE);
    }
    let mut u = json!({"metadata": {"namespace": "harvester-system", "name": "hvst-upgrade-x",
                                    "labels": labels}, "spec": {"version": version}});
    if deleting {
        u["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
    }
    Upgrade::read(&u).unwrap()
}

fn plan(phase: Option<&str>, field: &str) -> Value {
    let mut p = json!({"metadata": {"name": "hvst-upgrade-plan",
                                    "creationTimestamp": "2026-12-01T09:00:00Z"}});
    if let Some(ph) = phase {
        p["status"] = json!({field: ph});
    }
    p
}

const RELEASES: &[&str] = &["v1.7.1", "v1.7.3", "v1.8.0", "v1.8.1", "v1.9.0"];

#[test]
fn every_state_but_the_end_is_under_way_for_every_release() {
    for v in RELEASES {
        for s in UPGRADE_STATES {
            let u = upgrade(v, Some(s), false, false);
            let ended = ENDED.contains(s);
            assert_eq!(upgrade_under_way(&u), !ended, "{v} {s}");
            let why = post_must_wait(Some(&u), &[], true);
            if !ended {
                let why = why.unwrap();
                assert!(
                    why.contains(s) && why.contains("hvst-upgrade-x") && why.contains("under way"),
                    "{why}"
                );
            }
        }
        // No state label yet: just created, under way.
        assert!(upgrade_under_way(&upgrade(v, None, false, false)), "{v}");
        // Being deleted: its removal runs the cleanup.
        assert!(!upgrade_under_way(&upgrade(
            v,
            Some("UpgradingNodes"),
            false,
            true
        )));
    }
}

#[test]
fn after_the_end_only_a_release_that_handles_the_methods_is_waited_for() {
    for s in ENDED {
        // v1.7.1 does nothing to the methods: its end is the end.
        assert_eq!(
            post_must_wait(Some(&upgrade("v1.7.1", Some(s), false, false)), &[], true),
            None
        );
        for v in ["v1.7.3", "v1.8.0", "v1.9.0"] {
            let why = post_must_wait(Some(&upgrade(v, Some(s), false, false)), &[], true).unwrap();
            assert!(
                why.contains(CLEANUP_LABEL) && !why.contains("under way"),
                "{why}"
            );
            assert_eq!(
                post_must_wait(Some(&upgrade(v, Some(s), true, false)), &[], true),
                None
            );
        }
    }
}

#[test]
fn nothing_of_ours_or_no_upgrade_is_never_waited_for() {
    let running = upgrade("v1.7.1", Some("UpgradingNodes"), false, false);
    assert_eq!(post_must_wait(Some(&running), &[], false), None);
    assert_eq!(post_must_wait(None, &[], true), None);
    assert!(under_way(None, &[]).is_empty());
}

#[test]
fn an_upgrade_plan_is_under_way_until_its_end_phase() {
    for field in ["currentPhase", "phase"] {
        for ph in PLAN_PHASES {
            let p = plans(&[plan(Some(ph), field)], None);
            let ended = ENDED.contains(ph);
            assert_eq!(p[0].under_way(), !ended, "{ph}");
            let why = post_must_wait(None, &p, true);
            assert_eq!(why.is_some(), !ended, "{ph}");
            if let Some(w) = why {
                assert!(
                    w.contains("UpgradePlan hvst-upgrade-plan") && w.contains(ph),
                    "{w}"
                );
            }
        }
    }
    let fresh = plans(&[plan(None, "phase")], None);
    assert!(fresh[0].under_way());
    assert!(fresh[0].describe().contains("no phase yet"));
    // The plan that runs this post is not waited for.
    assert!(plans(&[plan(None, "phase")], Some("hvst-upgrade-plan")).is_empty());
    let mut deleting = plan(Some("NodeUpgrading"), "currentPhase");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
    assert!(!plans(&[deleting], None)[0].under_way());
}

#[test]
fn both_under_way_are_named() {
    let u = upgrade("v1.7.1", Some("PreparingNodes"), false, false);
    let p = plans(&[plan(Some("ClusterUpgrading"), "currentPhase")], None);
    let why = post_must_wait(Some(&u), &p, true).unwrap();
    assert!(
        why.contains("PreparingNodes") && why.contains("ClusterUpgrading"),
        "{why}"
    );
    assert_eq!(under_way(Some(&u), &p).len(), 2);
}

proptest! {
    /// Whatever the state, the release and the plans: post waits exactly when something of ours
    /// is there and an upgrade is under way or a handled release's cleanup is pending.
    #[test]
    fn post_waits_exactly_while_under_way_or_cleanup_pending(
        state in proptest::option::of(prop::sample::select(UPGRADE_STATES.to_vec())),
        other_state in "[A-Za-z]{0,12}",
        version in prop::sample::select(RELEASES.to_vec()),
        cleaned: bool, deleting: bool, ours: bool,
        phases in prop::collection::vec(proptest::option::of(prop::sample::select(PLAN_PHASES.to_vec())), 0..3),
        use_other: bool,
    ) {
        let s = if use_other { Some(other_state.as_str()).filter(|s| !s.is_empty()) } else { state };
        let u = upgrade(version, s, cleaned, deleting);
        let ps: Vec<Value> = phases.iter().map(|p| plan(*p, "currentPhase")).collect();
        let views = plans(&ps, None);
        let running = !deleting && !matches!(s, Some("Succeeded" | "Failed" | "Completed"));
        let plan_running = phases.iter().any(|p| !matches!(p, Some("Succeeded" | "Failed")));
        let cleanup = u.cleanup_pending();
        let expected = ours && (running || plan_running || cleanup);
        prop_assert_eq!(post_must_wait(Some(&u), &views, ours).is_some(), expected);
    }
}

#[test]
fn the_record_time_is_pres_first_write() {
    let obj = |times: &[(&str, &str)]| {
        let mf: Vec<Value> = times
            .iter()
            .map(|(m, t)| json!({"manager": m, "operation": "Update", "time": t}))
            .collect();
        json!({"metadata": {"managedFields": mf}})
    };
    let chart = obj(&[
        ("helm", "2026-11-01T00:00:00Z"),
        (FIELD_MANAGER, "2026-12-01T10:00:00Z"),
    ]);
    let kv = obj(&[
        (FIELD_MANAGER, "2026-12-01T10:00:01Z"),
        ("kubectl-patch", "2026-12-02T00:00:00Z"),
    ]);
    assert_eq!(
        record_time(&[&chart, &kv])
            .map(|t| t.to_string())
            .as_deref(),
        Some("2026-12-01T10:00:00Z")
    );
    assert_eq!(
        record_time(&[&obj(&[("helm", "2026-11-01T00:00:00Z")])]),
        None
    );
}

#[test]
fn an_upgrade_has_begun_if_created_since_the_record_or_under_way() {
    let since: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
    let at = |created: &str, state: &str| {
        let mut u = upgrade("v1.7.1", Some(state), false, false);
        u.created = created.parse().ok();
        u
    };
    assert_eq!(
        begun(Some(&at("2026-11-01T00:00:00Z", "Succeeded")), &[], since),
        None
    );
    assert!(begun(Some(&at("2026-12-01T10:00:00Z", "Succeeded")), &[], since).is_some());
    assert!(
        begun(
            Some(&at("2026-11-01T00:00:00Z", "UpgradingNodes")),
            &[],
            since
        )
        .is_some()
    );
    let mut old_plan = PlanView::read(&plan(Some("Succeeded"), "currentPhase"));
    old_plan.created = "2026-11-01T00:00:00Z".parse().ok();
    assert_eq!(begun(None, std::slice::from_ref(&old_plan), since), None);
    old_plan.created = "2026-12-02T00:00:00Z".parse().ok();
    assert!(
        begun(None, &[old_plan], since)
            .unwrap()
            .contains("UpgradePlan")
    );
    assert_eq!(begun(None, &[], since), None);
}

#[test]
fn only_a_failed_path_a_upgrade_holds_the_suspension() {
    // Path A: failed, or deleted without succeeding: held, with the two ways out.
    for (state, deleting) in [
        (Some("Failed"), false),
        (Some("Failed"), true),
        (Some("UpgradingNodes"), true),
    ] {
        let u = upgrade("v1.7.1", state, false, deleting);
        let held = held_after_failure(Some(&u)).expect("held");
        for words in [
            "held after the failed",
            "hvst-upgrade-x",
            "retry",
            "post by hand",
        ] {
            assert!(held.contains(words), "{words:?} in {held}");
        }
    }
    // Not failed, or a release whose own cleanup writes the methods on failure: followed.
    for (version, state, deleting) in [
        ("v1.7.1", Some("Succeeded"), false),
        ("v1.7.1", Some("Succeeded"), true),
        ("v1.7.1", Some("UpgradingNodes"), false),
        ("v1.6.1", None, false),
        ("v1.7.3", Some("Failed"), false),
        ("v1.8.0", Some("Failed"), true),
        ("v1.9.0", Some("Failed"), false),
    ] {
        let u = upgrade(version, state, false, deleting);
        assert_eq!(
            held_after_failure(Some(&u)),
            None,
            "{version} {state:?} {deleting}"
        );
    }
    assert_eq!(held_after_failure(None), None);
}
