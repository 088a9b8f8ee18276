use super::*;
use crate::model::KUBEVIRT_RECORD;
use crate::plan::harvester_upgrade::{LATEST_LABEL, STATE_LABEL};
use proptest::prelude::*;
use serde_json::json;

fn kubevirt(methods: Option<Value>, ours: bool) -> Value {
    let mut kv = json!({"metadata": {"namespace": "harvester-system", "name": "kubevirt"},
                        "spec": {"workloadUpdateStrategy": {}}});
    if let Some(m) = methods {
        kv["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = m;
    }
    if ours {
        kv["metadata"]["annotations"] =
            json!({KUBEVIRT_RECORD: "{\"original\":[\"LiveMigrate\"]}"});
    }
    kv
}

fn upgrade(version: &str, state: &str, prepared: bool, escape: bool) -> Upgrade {
    let mut u = json!({"metadata": {"namespace": "harvester-system", "name": "hvst-upgrade-x",
                                    "uid": "u-1", "labels": {LATEST_LABEL: "true", STATE_LABEL: state}},
                       "spec": {"version": version},
                       "status": {"conditions": [{"type": "NodesPrepared",
                                                  "status": if prepared {"True"} else {"Unknown"}}]}});
    if escape {
        u["metadata"]["annotations"] = json!({ALLOW_UNPROTECTED: "true"});
    }
    Upgrade::read(&u).unwrap()
}

fn seen<'a>(kv: &'a Value, u: Option<&'a Upgrade>, hold: bool) -> Seen<'a> {
    Seen {
        kubevirt: Some(kv),
        chart: None,
        upgrade: u,
        admission_hold: hold,
        held_after_failure: false,
        retirement: None,
    }
}

#[test]
fn a_suspension_is_ours_only_with_our_empty_list() {
    let on = kubevirt(Some(json!(["LiveMigrate"])), false);
    let ours = kubevirt(Some(json!([])), true);
    let theirs = kubevirt(Some(json!([])), false);
    let restored_record_left = kubevirt(Some(json!(["LiveMigrate"])), true);
    assert!(gauges(&seen(&ours, None, false)).suspension_in_place);
    for kv in [&on, &theirs, &restored_record_left] {
        assert!(!gauges(&seen(kv, None, false)).suspension_in_place, "{kv}");
    }
    let none = Seen {
        kubevirt: None,
        ..seen(&on, None, false)
    };
    assert_eq!(gauges(&none), Gauges::default());
}

#[test]
fn unprotected_is_a_path_a_upgrade_under_way_with_updates_on() {
    let on = kubevirt(Some(json!(["LiveMigrate"])), false);
    let off = kubevirt(Some(json!([])), true);
    let absent = kubevirt(None, false);
    let v171 = upgrade("v1.7.1", "PreparingNodes", false, false);
    let v172 = upgrade("v1.7.2", "PreparingNodes", false, false);
    let ended = upgrade("v1.7.1", "Failed", false, false);
    let g = gauges(&seen(&on, Some(&v171), false));
    assert!(g.upgrade_unprotected && !g.upgrade_held);
    let g = gauges(&seen(&on, Some(&v171), true));
    assert!(g.upgrade_unprotected && g.upgrade_held);
    for (kv, u) in [(&off, &v171), (&absent, &v171), (&on, &v172), (&on, &ended)] {
        let g = gauges(&seen(kv, Some(u), true));
        assert!(!g.upgrade_unprotected && !g.upgrade_held, "{kv} {u:?}");
    }
    assert!(!gauges(&seen(&on, None, true)).upgrade_unprotected);
}

#[test]
fn the_policy_holds_until_nodes_prepared_and_accepted_migrations_are_neither() {
    let on = kubevirt(Some(json!(["LiveMigrate", "Evict"])), false);
    let to_v161 = |state, prepared, accepted| upgrade("v1.6.1", state, prepared, accepted);
    for (u, unprotected, held) in [
        (to_v161("PreparingNodes", false, false), true, true),
        (to_v161("UpgradingSystemServices", true, false), true, false),
        (to_v161("PreparingNodes", false, true), false, false),
        (to_v161("UpgradingSystemServices", true, true), false, false),
    ] {
        let g = gauges(&seen(&on, Some(&u), true));
        assert_eq!(g.upgrade_unprotected, unprotected, "{u:?}");
        assert_eq!(g.upgrade_held, held, "{u:?}");
    }
}

#[test]
fn the_hold_and_the_retirement_come_from_the_loop() {
    let kv = kubevirt(Some(json!([])), true);
    let gone = Retirement::NoLongerNeeded(crate::plan::retirement::Covered {
        current: "v1.9.0".into(),
        next: "v1.9.x and v1.10.x".into(),
        offer: "none on offer".into(),
    });
    let needed = Retirement::Needed(crate::plan::retirement::Need::OnOffer("v1.7.1".into()));
    let mut s = seen(&kv, None, false);
    s.held_after_failure = true;
    s.retirement = Some(&gone);
    let g = gauges(&s);
    assert!(g.hold_after_failed_upgrade && g.no_longer_needed);
    s.retirement = Some(&needed);
    assert!(!gauges(&s).no_longer_needed);
}

#[test]
fn the_warning_names_the_error_and_the_way_out() {
    let on = kubevirt(Some(json!(["LiveMigrate"])), false);
    let u = upgrade("v1.7.1", "PreparingNodes", false, false);
    let (key, held) =
        unprotected_warning(&seen(&on, Some(&u), true), "failed: HTTP 403 Forbidden").unwrap();
    assert_eq!(held.reason, UPGRADE_HELD_BY_POLICY);
    assert!(key.held);
    for words in [
        "hvst-upgrade-x to v1.7.1",
        "harvester-system/kubevirt",
        "[\"LiveMigrate\"]",
        "failed: HTTP 403 Forbidden",
        "annotate upgrades.harvesterhci.io hvst-upgrade-x workload-update-guard.harvesterhci.io/allow-unprotected=true",
        "accept the migrations",
    ] {
        assert!(held.message.contains(words), "{words}: {}", held.message);
    }
    let (key2, open) =
        unprotected_warning(&seen(&on, Some(&u), false), "failed: HTTP 403 Forbidden").unwrap();
    assert_eq!(open.reason, UPGRADE_UNPROTECTED);
    assert!(
        open.message.contains("admissionPolicy.enabled=false"),
        "{}",
        open.message
    );
    // Said again when the hold begins or ends, not when only the words change.
    assert_ne!(key, key2);
    let (key3, _) = unprotected_warning(&seen(&on, Some(&u), true), "failed: timeout").unwrap();
    assert_eq!(key, key3);
    assert!(
        open.message.contains("accept the migrations"),
        "{}",
        open.message
    );
    // Accepted migrations: nothing to warn of.
    let accepted = upgrade("v1.7.1", "PreparingNodes", false, true);
    assert!(unprotected_warning(&seen(&on, Some(&accepted), true), "x").is_none());
    let off = kubevirt(Some(json!([])), true);
    assert!(unprotected_warning(&seen(&off, Some(&u), true), "x").is_none());
}

proptest! {
    /// Whatever was read: held implies unprotected, the Warning is there exactly when the
    /// gauge says unprotected, and its reason says whether the policy holds it.
    #[test]
    fn the_gauges_and_the_warning_agree(
        methods in prop::option::of(prop::sample::select(vec![
            json!([]), json!(["LiveMigrate"]), json!(["Evict"]), json!(["LiveMigrate", "Evict"]), json!("x"),
        ])),
        ours in any::<bool>(),
        version in prop::sample::select(vec!["v1.6.1", "v1.7.0", "v1.7.1", "v1.7.2", "v1.8.0", "v1.8.1", "dev"]),
        state in prop::sample::select(vec!["PreparingNodes", "UpgradingSystemServices", "Succeeded", "Failed"]),
        prepared in any::<bool>(),
        escape in any::<bool>(),
        any_upgrade in any::<bool>(),
        hold in any::<bool>(),
    ) {
        let kv = kubevirt(methods, ours);
        let u = upgrade(version, state, prepared, escape);
        let s = seen(&kv, any_upgrade.then_some(&u), hold);
        let g = gauges(&s);
        prop_assert!(!g.upgrade_held || g.upgrade_unprotected);
        prop_assert!(!(g.suspension_in_place && g.upgrade_unprotected));
        let w = unprotected_warning(&s, "failed: x");
        prop_assert_eq!(w.is_some(), g.upgrade_unprotected);
        if let Some((key, w)) = w {
            prop_assert_eq!(key.held, g.upgrade_held);
            let reason = if g.upgrade_held { UPGRADE_HELD_BY_POLICY } else { UPGRADE_UNPROTECTED };
            prop_assert_eq!(w.reason, reason);
        }
    }
}

#[test]
fn status_says_held_by_the_policy_or_unprotected_first() {
    let on = kubevirt(Some(json!(["LiveMigrate"])), false);
    let held = upgrade("v1.7.1", "PreparingNodes", false, false);
    let v = unprotected_verdict(Some(&on), Some(&held)).expect("held");
    for words in [
        "HELD BY THE POLICY: Harvester Upgrade hvst-upgrade-x to v1.7.1",
        "[\"LiveMigrate\"]",
        "holds it before NodesPrepared",
        &format!("annotate upgrades.harvesterhci.io hvst-upgrade-x {ALLOW_UNPROTECTED}=true"),
    ] {
        assert!(v.contains(words), "{words:?} in {v}");
    }
    let past = upgrade("v1.7.1", "UpgradingSystemServices", true, false);
    let v = unprotected_verdict(Some(&on), Some(&past)).expect("unprotected");
    assert!(
        v.starts_with("UNPROTECTED: Harvester Upgrade hvst-upgrade-x to v1.7.1")
            && v.contains("nothing holds it (it is past NodesPrepared)"),
        "{v}"
    );
    assert!(v.contains("To accept the migrations: kubectl"), "{v}");
    let accepted = upgrade("v1.7.1", "PreparingNodes", false, true);
    let v = unprotected_verdict(Some(&on), Some(&accepted)).expect("accepted");
    assert!(
        v.starts_with("MIGRATIONS ACCEPTED: Harvester Upgrade hvst-upgrade-x to v1.7.1")
            && v.contains("the guard does not suspend for it"),
        "{v}"
    );
    // Suspended, a release that suspends itself, or no upgrade: nothing to say first.
    let ours = kubevirt(Some(json!([])), true);
    let own = upgrade("v1.7.3", "PreparingNodes", false, false);
    assert_eq!(unprotected_verdict(Some(&ours), Some(&held)), None);
    assert_eq!(unprotected_verdict(Some(&on), Some(&own)), None);
    assert_eq!(unprotected_verdict(Some(&on), None), None);
}

/// The add-on's `[]` by a merge patch (upgrade-toolkit's Update claim), and a ManagedChart
/// whose deploy Fleet has not applied: what `status` and the Event name.
fn claimed_and_waiting() -> (Value, Value) {
    let mut kv = kubevirt(Some(json!([])), false);
    let methods = json!({"f:spec": {"f:workloadUpdateStrategy": {"f:workloadUpdateMethods": {}}}});
    kv["metadata"]["managedFields"] = json!([
        {"manager": "helm", "operation": "Apply", "apiVersion": "kubevirt.io/v1",
         "fieldsType": "FieldsV1", "fieldsV1": methods},
        {"manager": "upgrade-toolkit", "operation": "Update", "apiVersion": "kubevirt.io/v1",
         "fieldsType": "FieldsV1", "fieldsV1": methods},
    ]);
    let chart = json!({
        "metadata": {"namespace": "fleet-local", "name": "harvester", "generation": 3},
        "spec": {"values": {}},
        "status": {"observedGeneration": 3, "summary": {"desiredReady": 1, "ready": 0, "waitApplied": 1},
                   "conditions": [{"type": "Ready", "status": "False",
                                   "message": "WaitApplied(1) [Cluster fleet-local/local]"}]},
    });
    (kv, chart)
}

#[test]
fn a_deploy_waiting_on_a_claim_is_a_gauge_and_a_warning_naming_the_manager() {
    let (kv, chart) = claimed_and_waiting();
    let s = Seen {
        chart: Some(&chart),
        ..seen(&kv, None, false)
    };
    assert!(gauges(&s).fleet_deploy_blocked);
    let (key, w) = blocked_deploy_warning(&kv, &chart, false).expect("a warning");
    assert_eq!(
        (key.as_str(), w.reason),
        ("upgrade-toolkit@3", FLEET_DEPLOY_BLOCKED)
    );
    for part in [
        "ManagedChart fleet-local/harvester",
        "upgrade-toolkit holds an Update claim",
        "conflict with \"upgrade-toolkit\"",
    ] {
        assert!(w.message.contains(part), "{part}: {}", w.message);
    }
    assert!(!w.message.contains("suspends now"), "{}", w.message);
    let (_, w) = blocked_deploy_warning(&kv, &chart, true).unwrap();
    assert!(
        w.message
            .contains("the guard suspends now through the values"),
        "{}",
        w.message
    );
    // Without the chart (not read), no gauge.
    assert!(!gauges(&seen(&kv, None, false)).fleet_deploy_blocked);
    // Applied: nothing to say.
    let mut applied = chart.clone();
    applied["status"]["conditions"][0] = json!({"type": "Ready", "status": "True"});
    applied["status"]["summary"]["ready"] = json!(1);
    assert_eq!(blocked_deploy_warning(&kv, &applied, false), None);
}

/// Updates turned on mid-upgrade: the Warning's command runs as printed (the latest Upgrade's
/// namespace and name); for the add-on's plan, which has no accept annotation, it says so.
#[test]
fn the_turned_on_warning_names_a_command_that_runs_as_printed() {
    let u = upgrade("v1.7.1", "UpgradingNodes", true, false);
    let said = turned_on_during_upgrade("set by kubectl-edit", &key_of(&u), Some(&u));
    assert!(
        said.ends_with(
            "To accept this upgrade's migrations: kubectl -n harvester-system annotate \
             upgrades.harvesterhci.io hvst-upgrade-x \
             workload-update-guard.harvesterhci.io/allow-unprotected=true"
        ),
        "{said}"
    );
    let plan = turned_on_during_upgrade("set by kubectl-edit", "UpgradePlan p1", Some(&u));
    assert!(
        plan.ends_with("no accept annotation: the guard restores at its end"),
        "{plan}"
    );
    assert!(!plan.contains("annotate upgrades"), "{plan}");
}
