use super::*;
use crate::plan::upgrade_progress::UPGRADE_STATES as STATES;
use crate::plan::upgrade_progress::state_ended as ended;
use proptest::prelude::*;
use serde_json::json;

fn upgrade(version: &str, state: &str) -> Upgrade {
    Upgrade {
        namespace: "harvester-system".into(),
        name: "hvst-upgrade-x".into(),
        version: version.into(),
        state: state.into(),
        backup: crate::plan::harvester_upgrade::Backup::None,
        cleaned_up: false,
        deleting: false,
        created: None,
        ended: None,
        uid: String::new(),
        nodes_prepared: false,
        allow_unprotected: false,
    }
}

fn offer(versions: &[&str]) -> Vec<(String, Handling)> {
    versions
        .iter()
        .map(|v| (v.to_string(), Handling::of(v)))
        .collect()
}

fn kind(a: &Advice) -> &'static str {
    match a {
        Advice::NotNeeded(_) => "not needed",
        Advice::Needed(_) => "needed",
        Advice::Unknown(_) => "unknown",
    }
}

/// The methods the tests try: the default, others, none, the suspension.
fn methods_cases() -> Vec<Option<Value>> {
    vec![
        Some(json!(["LiveMigrate"])),
        Some(json!(["LiveMigrate", "Evict"])),
        Some(json!(["Evict"])),
        Some(json!([])),
        None,
    ]
}

/// Every release family against every value of the methods, by each way the release is known
/// (the Upgrade under way, the one release on offer) and the add-on.
#[test]
fn each_release_answers_by_what_its_handling_restores() {
    let releases = [
        // (release, restores any methods, and its suspension is no claim Fleet's deploy meets)
        ("v1.6.2", false),
        ("v1.7.1", false),
        ("v1.7.2", true),
        ("v1.7.3", true),
        ("v1.8.0", false),
        ("v1.8.1", true),
        ("v1.9.0", true),
    ];
    for (release, covered) in releases {
        for methods in methods_cases() {
            let want = if covered { "not needed" } else { "needed" };
            for coming in [
                Coming::of(Some(&upgrade(release, "PreparingRepo")), None, &[]),
                Coming::of(None, None, &offer(&[release])),
            ] {
                let a = advise(&coming, &methods);
                assert_eq!(kind(&a), want, "{release} {methods:?}: {a:?}");
                assert!(a.line().contains(release), "names the release: {a:?}");
            }
        }
    }
    for methods in methods_cases() {
        let a = advise(
            &Coming::of(None, Some(("hvst-upgrade-plan", "v1.9.0")), &[]),
            &methods,
        );
        // Whatever the methods: its patch of the CR meets Fleet's deploy (harvester#10899).
        assert_eq!(kind(&a), "needed", "add-on {methods:?}: {a:?}");
        assert!(a.line().contains("hvst-upgrade-plan"), "{a:?}");
        assert!(a.line().contains("harvester#10899"), "{a:?}");
        let other_methods = methods != Some(json!(["LiveMigrate"]));
        assert_eq!(
            a.line().contains("post puts that back"),
            other_methods,
            "{a:?}"
        );
    }
}

#[test]
fn the_target_is_the_upgrade_under_way_then_the_add_on_then_the_one_release_on_offer() {
    let two = offer(&["v1.8.1", "v1.7.1"]);
    // An Upgrade under way wins over what is on offer.
    let u = upgrade("v1.7.1", "UpgradingNodes");
    assert!(matches!(
        Coming::of(Some(&u), None, &offer(&["v1.8.1"])),
        Coming::Upgrade { version, .. } if version == "v1.7.1"
    ));
    // An ended or deleted Upgrade is no target: the offer decides.
    for state in ["Succeeded", "Failed", "Completed"] {
        let done = upgrade("v1.7.1", state);
        assert_eq!(
            Coming::of(Some(&done), None, &offer(&["v1.8.1"])),
            Coming::Offered {
                version: "v1.8.1".into()
            }
        );
    }
    let mut deleting = upgrade("v1.7.1", "UpgradingNodes");
    deleting.deleting = true;
    assert!(matches!(
        Coming::of(Some(&deleting), None, &[]),
        Coming::Unknown { .. }
    ));
    // An Upgrade without a version says nothing of the release.
    assert!(matches!(
        Coming::of(Some(&upgrade("", "PreparingRepo")), None, &[]),
        Coming::Unknown { .. }
    ));
    // The add-on's plan before the offer.
    assert!(matches!(
        Coming::of(None, Some(("p", "v1.9.0")), &two),
        Coming::AddOn { .. }
    ));
    // Two releases on offer (one without handling): not known; they are named.
    let c = Coming::of(None, None, &two);
    assert_eq!(
        c,
        Coming::Unknown {
            on_offer: vec!["v1.8.1".into(), "v1.7.1".into()]
        }
    );
    let a = advise(&c, &Some(json!(["LiveMigrate"])));
    assert_eq!(kind(&a), "unknown");
    assert!(a.line().contains("v1.8.1, v1.7.1"), "{a:?}");
}

#[test]
fn an_unknown_target_names_the_releases_that_would_make_pre_unnecessary() {
    let c = Coming::of(None, None, &[]);
    let default = advise(&c, &Some(json!(["LiveMigrate"])));
    assert_eq!(
        default.line(),
        "pre is needed unless the upgrade goes to v1.7.2+, v1.8.1+ or v1.9 (Harvester suspends \
         and restores any methods itself): the release the cluster upgrades to is not known (no \
         Upgrade under way, no release on offer), so pre suspends"
    );
    let other = advise(&c, &Some(json!(["LiveMigrate", "Evict"])));
    assert_eq!(other, default, "the same whatever the methods");
}

#[test]
fn pre_is_late_from_kubevirts_upgrade_on_or_with_outdated_workloads() {
    let kv = |n: Option<u64>| match n {
        Some(n) => json!({"status": {"outdatedVirtualMachineInstanceWorkloads": n}}),
        None => json!({"status": {}}),
    };
    let late_from = STATES
        .iter()
        .position(|s| *s == "UpgradingSystemServices")
        .unwrap();
    for (i, state) in STATES.iter().enumerate() {
        let u = upgrade("v1.7.1", state);
        let want = i >= late_from && !ended(state);
        assert_eq!(
            late(Some(&u), Some(&kv(None))).is_some(),
            want,
            "state {state}"
        );
        // Outdated workloads make it late in every state.
        let l = late(Some(&u), Some(&kv(Some(3)))).expect("outdated");
        assert_eq!(l.outdated, Some(3));
        assert_eq!(l.upgrade.is_some(), want);
    }
    assert_eq!(late(None, Some(&kv(Some(0)))), None);
    assert_eq!(late(None, None), None);
    let mut deleting = upgrade("v1.7.1", "UpgradingNodes");
    deleting.deleting = true;
    assert_eq!(late(Some(&deleting), None), None);
}

#[test]
fn the_late_warning_names_the_upgrade_its_state_and_the_migrations() {
    let u = upgrade("v1.7.1", "UpgradingSystemServices");
    let l = late(
        Some(&u),
        Some(&json!({"status": {"outdatedVirtualMachineInstanceWorkloads": 1}})),
    )
    .unwrap();
    let m = |i: usize| Migration {
        namespace: "vms".into(),
        name: format!("kubevirt-workload-update-{i}"),
        phase: "Running".into(),
    };
    let one = [m(1)];
    let msg = l.message(Ok(&one));
    assert_eq!(
        msg,
        "pre came late: Harvester Upgrade harvester-system/hvst-upgrade-x (to v1.7.1, state \
         UpgradingSystemServices) has reached KubeVirt's upgrade; the KubeVirt CR counts 1 \
         outdated workload (status.outdatedVirtualMachineInstanceWorkloads). The suspension \
         stops the rest of the wave, not the migrations already created; workload-update \
         migrations under way: vms/kubevirt-workload-update-1 (Running)"
    );
    let many: Vec<Migration> = (0..12).map(m).collect();
    assert!(l.message(Ok(&many)).ends_with("and 2 more"));
    assert!(
        l.message(Ok(&[]))
            .ends_with("no workload-update migration is under way")
    );
    assert!(
        l.message(Err("forbidden"))
            .contains("not known (forbidden)")
    );
}

proptest! {
    /// Whatever the Upgrade and the offer, the answer is the one of the release that `Coming`
    /// picks, and "not needed" only where that release's handling restores what is there.
    #[test]
    fn not_needed_only_where_the_release_restores_what_is_there(
        minor in 5u64..11, patch in 0u64..4, state in proptest::sample::select(STATES),
        offered in proptest::collection::vec((5u64..11, 0u64..4), 0..3),
        methods in proptest::sample::select(methods_cases()),
        with_upgrade: bool,
    ) {
        let version = format!("v1.{minor}.{patch}");
        let u = upgrade(&version, state);
        let offered: Vec<String> = offered.iter().map(|(m, p)| format!("v1.{m}.{p}")).collect();
        let offered = offer(&offered.iter().map(String::as_str).collect::<Vec<_>>());
        let coming = Coming::of(with_upgrade.then_some(&u), None, &offered);
        let a = advise(&coming, &methods);
        let release = match &coming {
            Coming::Upgrade { version, .. } | Coming::Offered { version } => Some(version.clone()),
            _ => None,
        };
        match release {
            None => prop_assert_eq!(kind(&a), "unknown"),
            Some(r) => {
                let restores = match Handling::of(&r) {
                    Handling::None => false,
                    // Its own patch of the CR meets Fleet's deploy (harvester#10677).
                    Handling::PatchAndHardCodedRestore => false,
                    Handling::BackupAndRestore => true,
                };
                prop_assert_eq!(kind(&a) == "not needed", restores);
                prop_assert!(a.line().contains(&r));
            }
        }
    }
}
