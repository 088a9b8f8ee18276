use super::*;
use proptest::prelude::*;
use serde_json::json;

fn offer(versions: &[&str]) -> Vec<(String, Handling)> {
    versions
        .iter()
        .map(|v| (v.to_string(), Handling::of(v)))
        .collect()
}

fn answer(current: &str, on_offer: &[&str], methods: Value, addon: bool) -> Retirement {
    let on_offer = offer(on_offer);
    let methods = Some(methods);
    retirement(&Facts {
        current: Some(current),
        on_offer: &on_offer,
        methods: &methods,
        addon,
        ours: false,
        under_way: None,
    })
}

impl Retirement {
    fn why(&self) -> String {
        match self {
            Retirement::Needed(why) => why.to_string(),
            Retirement::NoLongerNeeded(why) => why.to_string(),
        }
    }
}

fn default() -> Value {
    json!(["LiveMigrate"])
}

fn both() -> Value {
    json!(["LiveMigrate", "Evict"])
}

/// By the cluster's own version: up to v1.7.0 a release without handling is next; from v1.7.1
/// v1.8.0 is next until the cluster is past it, which matters only for methods other than
/// `[LiveMigrate]`; from v1.8.0 on, every next release restores what was there.
#[test]
fn by_the_clusters_version_and_the_methods() {
    for (current, methods, no_longer) in [
        ("v1.5.2", default(), false),
        ("v1.6.1", default(), false),
        ("v1.7.0", default(), false),
        ("v1.7.0", both(), false),
        ("v1.7.1", default(), true),
        ("v1.7.1", both(), false),
        ("v1.7.2", both(), false),
        ("v1.7.3", default(), true),
        ("v1.8.0", both(), true),
        ("v1.8.1", both(), true),
        ("v1.9.0", json!([]), true),
    ] {
        let r = answer(current, &[], methods.clone(), false);
        assert_eq!(
            r.no_longer_needed(),
            no_longer,
            "{current} {methods}: {r:?}"
        );
        assert!(r.why().contains(current), "names the version: {r:?}");
    }
}

#[test]
fn the_reasons_name_what_needs_it() {
    let r = answer("v1.6.1", &[], default(), false);
    assert!(r.why().contains("v1.6.x and v1.7.x"), "{r:?}");
    assert!(r.why().contains("up to v1.7.1"), "{r:?}");
    let r = answer("v1.7.2", &[], both(), false);
    assert!(r.why().contains("v1.8.0"), "{r:?}");
    assert!(r.why().contains(r#"["LiveMigrate","Evict"]"#), "{r:?}");
    let r = answer("v1.8.1", &["v1.9.0"], both(), false);
    assert_eq!(
        r.why(),
        "Harvester v1.8.1: every release it can upgrade to next (v1.8.x and v1.9.x; on offer: \
         v1.9.0) suspends the methods itself and restores them"
    );
    assert!(
        r.line()
            .starts_with("the guard is no longer needed: Harvester v1.8.1"),
        "{r:?}"
    );
    let r = answer("v1.7.3", &[], default(), true);
    assert!(
        r.why().contains(
            "v1.8.0's and the upgrade add-on's hard-coded [LiveMigrate] is the methods now"
        ),
        "{r:?}"
    );
}

/// The add-on writes `[LiveMigrate]` at its end on any release: installed, it needs the guard for
/// other methods, even where Harvester's own releases do not.
#[test]
fn the_addon_installed_needs_it_for_other_methods_only() {
    assert!(answer("v1.8.1", &[], default(), true).no_longer_needed());
    let r = answer("v1.8.1", &[], both(), true);
    assert!(!r.no_longer_needed());
    assert!(r.why().contains("upgrade add-on is installed"), "{r:?}");
    let r = answer("v1.9.0", &[], json!([]), true);
    assert!(r.why().contains("not the methods now ([])"), "{r:?}");
    // Absent methods are not [LiveMigrate]: as pre's advice reads them.
    let on_offer = offer(&[]);
    let r = retirement(&Facts {
        current: Some("v1.9.0"),
        on_offer: &on_offer,
        methods: &None,
        addon: true,
        ours: false,
        under_way: None,
    });
    assert!(r.why().contains("(absent)"), "{r:?}");
}

/// What is on offer counts too: a release without handling (offered by hand), or v1.8.0.
#[test]
fn a_release_on_offer_that_needs_it() {
    let r = answer("v1.7.3", &["v1.7.1"], default(), false);
    assert!(!r.no_longer_needed());
    assert!(r.why().starts_with("v1.7.1 is on offer"), "{r:?}");
    assert!(!answer("v1.8.0", &["v1.8.0-rc1"], both(), false).no_longer_needed());
    assert!(answer("v1.8.0", &["v1.8.1", "v1.9.0"], both(), false).no_longer_needed());
}

#[test]
fn not_while_it_has_work_or_cannot_tell() {
    let on_offer = offer(&[]);
    let methods = Some(default());
    let seen = Facts {
        current: Some("v1.9.0"),
        on_offer: &on_offer,
        methods: &methods,
        addon: false,
        ours: false,
        under_way: None,
    };
    assert!(retirement(&seen).no_longer_needed());
    let r = retirement(&Facts { ours: true, ..seen });
    assert!(r.why().contains("suspension of ours"), "{r:?}");
    let r = retirement(&Facts {
        under_way: Some("Harvester Upgrade harvester-system/x (to v1.9.1, state UpgradingNodes)"),
        ..seen
    });
    assert!(r.why().ends_with("is under way"), "{r:?}");
    let r = retirement(&Facts {
        current: None,
        ..seen
    });
    assert!(r.why().contains("server-version"), "{r:?}");
    let r = retirement(&Facts {
        current: Some("master-abc-head"),
        ..seen
    });
    assert!(r.why().contains("not a release"), "{r:?}");
    assert!(!r.no_longer_needed());
}

proptest! {
    /// Never "no longer needed" while a release the cluster can reach next does nothing to the
    /// methods (up to v1.7.1), nor where v1.8.0 or the add-on would write [LiveMigrate] over other
    /// methods.
    #[test]
    fn never_retired_while_a_next_release_needs_it(
        minor in 0u64..12, patch in 0u64..4, addon: bool, other: bool,
        offered in proptest::collection::vec((5u64..12, 0u64..4), 0..3),
    ) {
        let current = format!("v1.{minor}.{patch}");
        let now = (1, minor, patch);
        let names: Vec<String> = offered
            .iter()
            .map(|(m, p)| format!("v1.{m}.{p}"))
            .filter(|v| parse_version(v) > Some(now))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let methods = if other { both() } else { default() };
        let r = answer(&current, &refs, methods, addon);
        let reachable = |v: (u64, u64, u64)| v > now && (v.1 == minor || v.1 == minor + 1);
        let without_handling = (0..=7).flat_map(|m| (0..4).map(move |p| (1, m, p)))
            .any(|v| v <= LAST_WITHOUT_HANDLING && reachable(v));
        let offered_without = names.iter().any(|v| Handling::of(v) == Handling::None);
        let v180 = reachable(HARD_CODED_RESTORE) || names.iter().any(|v| v == "v1.8.0");
        let needed = without_handling || offered_without || (other && (v180 || addon));
        prop_assert_eq!(!r.no_longer_needed(), needed, "{} {:?} {}: {:?}", current, names, other, r);
    }
}
