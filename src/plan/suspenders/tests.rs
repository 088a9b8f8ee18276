use super::*;
use crate::model::KUBEVIRT_RECORD;
use crate::plan::harvester_upgrade::{BACKUP_ANNOTATION, LATEST_LABEL, STATE_LABEL};
use crate::plan::testing::*;
use proptest::prelude::*;

/// The CR with methods `[]` written by `manager`'s `Update` (and `helm`'s `Apply` of the rest).
fn suspended_by(manager: &str) -> Value {
    let mut kv = kubevirt(Some(json!([])));
    kv["metadata"]["managedFields"] = json!([
        entry("helm", "Apply", json!({"f:spec": {"f:x": {}}})),
        entry(manager, "Update", methods_fields()),
    ]);
    kv
}

fn plan_at(phase: &str) -> PlanView {
    PlanView::read(&json!({
        "metadata": {"name": "hvst-plan", "creationTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"version": "v1.8.0"},
        "status": {"currentPhase": phase},
    }))
}

fn upgrade(version: &str, state: &str, backup: Option<&str>) -> Upgrade {
    let mut u = json!({
        "metadata": {"namespace": "harvester-system", "name": "hvst-upgrade-x",
                     "labels": {LATEST_LABEL: "true", STATE_LABEL: state}},
        "spec": {"version": version},
    });
    if let Some(b) = backup {
        u["metadata"]["annotations"] = json!({BACKUP_ANNOTATION: b});
    }
    Upgrade::read(&u).unwrap()
}

fn original(f: Option<Foreign>) -> Option<(OriginalFrom, Option<Value>)> {
    f.map(|f| (f.from, f.original.original()))
}

#[test]
fn the_addons_empty_list_stands_for_what_fleet_renders() {
    let kv = suspended_by("upgrade-toolkit");
    let plans = [plan_at("ClusterUpgrading")];
    let no_override = chart(json!({}), None);
    let f = foreign_suspension(&kv, Some(&no_override), None, &plans).unwrap();
    assert_eq!(
        original(f.clone()),
        Some((OriginalFrom::ChartDefault, Some(json!(["LiveMigrate"]))))
    );
    let line = f.unwrap().line();
    assert!(
        line.contains("UpgradePlan hvst-plan (phase ClusterUpgrading)"),
        "{line}"
    );
    assert!(line.contains("is lost"), "{line}");
    let both = json!(["LiveMigrate", "Evict"]);
    let override_ = chart(
        json!({"kubevirt": {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": both}}}}),
        None,
    );
    let f = foreign_suspension(&kv, Some(&override_), None, &plans).unwrap();
    assert_eq!(
        original(f),
        Some((OriginalFrom::ValuesOverride, Some(both)))
    );
}

#[test]
fn only_a_known_suspender_while_its_upgrade_runs() {
    let plans = [plan_at("ClusterUpgrading")];
    let c = chart(json!({}), None);
    // An administrator's own `[]` (kubectl edit) is a choice, whatever runs.
    let edited = suspended_by("kubectl-edit");
    assert_eq!(
        foreign_suspension(&edited, Some(&c), None, &plans).unwrap(),
        None
    );
    // The add-on's manager, but no plan past Initialized under way.
    let kv = suspended_by("upgrade-toolkit");
    for phase in ["Initializing", "Initialized", "Succeeded", "Failed"] {
        let f = foreign_suspension(&kv, Some(&c), None, &[plan_at(phase)]).unwrap();
        assert_eq!(f, None, "{phase}");
    }
    // Not `[]`: nothing stands in for anything.
    let mut on = suspended_by("upgrade-toolkit");
    on["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!(["LiveMigrate"]);
    assert_eq!(
        foreign_suspension(&on, Some(&c), None, &plans).unwrap(),
        None
    );
    // Our record decides: a rerun of pre.
    let mut ours = suspended_by("upgrade-toolkit");
    ours["metadata"]["annotations"] =
        json!({KUBEVIRT_RECORD: r#"{"present":true,"value":["Evict"]}"#});
    assert_eq!(
        foreign_suspension(&ours, Some(&c), None, &plans).unwrap(),
        None
    );
    // A values override of `[]` renders `[]`: the administrator's choice.
    let empty = chart(
        json!({"kubevirt": {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": []}}}}),
        None,
    );
    assert_eq!(
        foreign_suspension(&kv, Some(&empty), None, &plans).unwrap(),
        None
    );
}

#[test]
fn harvester_v180s_patch_and_v172s_backup() {
    let c = chart(json!({}), None);
    for manager in ["kubectl-patch", "harvester"] {
        let kv = suspended_by(manager);
        let running = upgrade("v1.8.0", "UpgradingSystemServices", None);
        let f = foreign_suspension(&kv, Some(&c), Some(&running), &[]).unwrap();
        assert_eq!(
            original(f),
            Some((OriginalFrom::ChartDefault, Some(json!(["LiveMigrate"])))),
            "{manager}"
        );
        // Another release's Upgrade does not make v1.8.0's managers suspenders.
        let other = upgrade("v1.7.1", "UpgradingSystemServices", None);
        assert_eq!(
            foreign_suspension(&kv, Some(&c), Some(&other), &[]).unwrap(),
            None
        );
    }
    // v1.7.3: its values `[]` rendered by Fleet (the manager is Fleet's), its backup on the Upgrade.
    let kv = suspended_by("fleetagent");
    let empty = chart(
        json!({"kubevirt": {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": []}}}}),
        None,
    );
    let backed = upgrade(
        "v1.7.3",
        "PreparingNodes",
        Some(r#"["LiveMigrate","Evict"]"#),
    );
    let f = foreign_suspension(&kv, Some(&empty), Some(&backed), &[]).unwrap();
    assert_eq!(
        original(f),
        Some((
            OriginalFrom::HarvesterBackup,
            Some(json!(["LiveMigrate", "Evict"]))
        ))
    );
    let null = upgrade("v1.7.3", "PreparingNodes", Some("null"));
    let f = foreign_suspension(&kv, Some(&empty), Some(&null), &[]).unwrap();
    assert_eq!(
        original(f),
        Some((OriginalFrom::HarvesterBackup, Some(json!(["LiveMigrate"]))))
    );
}

#[test]
fn the_suspenders_update_is_never_given_back() {
    let mut kv = suspended_by("upgrade-toolkit");
    kv["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(entry("helm", "Apply", methods_fields()));
    let f = foreign_suspension(&kv, None, None, &[plan_at("NodeUpgrading")])
        .unwrap()
        .unwrap();
    let managers: Vec<&str> = f
        .original
        .owners
        .iter()
        .map(|o| o.manager.as_str())
        .collect();
    assert_eq!(managers, ["helm"]);
}

proptest! {
    /// Whatever wrote the methods and whatever runs, the original in place of a `[]` is never
    /// `[]` or absent: a suspender's `[]` is never restored.
    #[test]
    fn the_original_in_place_is_never_a_suspension(
        methods in methods_strategy(),
        fields in managed_fields_strategy(),
        phase in prop::sample::select(PLAN_PHASES.to_vec()),
        values in leaf_strategy(),
        v180 in any::<bool>(),
    ) {
        let mut kv = kubevirt(methods);
        kv["metadata"]["managedFields"] = json!(fields);
        let c = match values {
            Some(v) => chart(json!({"kubevirt": {"spec": {"workloadUpdateStrategy":
                {"workloadUpdateMethods": v}}}}), None),
            None => chart(json!({}), None),
        };
        let running = upgrade(if v180 { "v1.8.0" } else { "v1.7.1" }, "UpgradingSystemServices", None);
        if let Ok(Some(f)) = foreign_suspension(&kv, Some(&c), Some(&running), &[plan_at(phase)]) {
            let o = f.original.original();
            prop_assert!(o.is_some() && o != Some(json!([])), "{:?}", o);
            prop_assert!(f.original.owners.iter().all(|o| o.operation == "Apply"));
        }
    }
}

/// An administrator's `[]` patched (manager `kubectl-patch`) the day before an Upgrade to v1.8.0
/// was created, or an earlier plan's `upgrade-toolkit` `[]`, is nobody's suspension of the
/// upgrade now under way: its managedFields entry is older than the upgrade. The same `[]`
/// written since the upgrade's creation is the suspender's.
#[test]
fn a_suspenders_empty_list_from_before_its_upgrade_is_not_its_suspension() {
    let written_at = |manager: &str, time: &str| {
        let mut kv = suspended_by(manager);
        kv["metadata"]["managedFields"][1]["time"] = json!(time);
        kv
    };
    let mut u = upgrade("v1.8.0", "UpgradingSystemServices", None);
    u.created = "2026-12-01T11:00:00Z".parse().ok();
    let c = chart(json!({}), None);
    for (time, foreign) in [
        ("2026-11-30T10:00:00Z", false),
        ("2026-12-01T11:05:00Z", true),
    ] {
        let kv = written_at("kubectl-patch", time);
        let f = foreign_suspension(&kv, Some(&c), Some(&u), &[]).unwrap();
        assert_eq!(f.is_some(), foreign, "v1.8.0, written at {time}: {f:?}");
    }
    let mut p = plan_at("ClusterUpgrading");
    p.created = "2026-12-01T11:00:00Z".parse().ok();
    for (time, foreign) in [
        ("2026-11-30T10:00:00Z", false),
        ("2026-12-01T11:05:00Z", true),
    ] {
        let kv = written_at(ADDON_MANAGER, time);
        let f = foreign_suspension(&kv, Some(&c), None, std::slice::from_ref(&p)).unwrap();
        assert_eq!(f.is_some(), foreign, "the add-on, written at {time}: {f:?}");
    }
}
