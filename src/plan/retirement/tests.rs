use super::*;
use proptest::prelude::*;

fn offer(versions: &[&str]) -> Vec<(String, Handling)> {
    versions
        .iter()
        .map(|v| (v.to_string(), Handling::of(v)))
        .collect()
}

fn answer(current: &str, on_offer: &[&str], addon: bool) -> Retirement {
    let on_offer = offer(on_offer);
    retirement(&Facts {
        current: Some(current),
        on_offer: &on_offer,
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

/// By the cluster's own version: up to v1.7.0 a release without handling is next; from v1.7.0
/// v1.8.0 is next until the cluster is past it (its own patch of the CR is a claim Fleet's deploy
/// stops on, whatever the methods); from v1.8.0 on, every next release restores what was there.
#[test]
fn by_the_clusters_version() {
    for (current, no_longer) in [
        ("v1.5.2", false),
        ("v1.6.1", false),
        ("v1.7.0", false),
        ("v1.7.1", false),
        ("v1.7.2", false),
        ("v1.7.3", false),
        ("v1.8.0", true),
        ("v1.8.1", true),
        ("v1.9.0", true),
    ] {
        let r = answer(current, &[], false);
        assert_eq!(r.no_longer_needed(), no_longer, "{current}: {r:?}");
        assert!(r.why().contains(current), "names the version: {r:?}");
    }
}

#[test]
fn the_reasons_name_what_needs_it() {
    let r = answer("v1.6.1", &[], false);
    assert!(r.why().contains("v1.6.x and v1.7.x"), "{r:?}");
    assert!(r.why().contains("up to v1.7.1"), "{r:?}");
    let r = answer("v1.7.2", &[], false);
    assert_eq!(
        r.why(),
        "Harvester v1.7.2 can upgrade next to v1.8.0, which patches the KubeVirt CR to [] itself: \
         a claim that Fleet's deploy of its chart stops on unless the guard's values render [] \
         too (harvester#10677)"
    );
    let r = answer("v1.8.1", &["v1.9.0"], false);
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
}

/// The add-on patches the CR on any release: installed, it needs the guard, even where
/// Harvester's own releases do not (harvester#10899).
#[test]
fn the_addon_installed_needs_it() {
    assert!(answer("v1.8.1", &[], false).no_longer_needed());
    let r = answer("v1.8.1", &[], true);
    assert!(!r.no_longer_needed());
    assert!(r.why().contains("upgrade add-on is installed"), "{r:?}");
    assert!(r.why().contains("harvester#10899"), "{r:?}");
}

/// What is on offer counts too: a release without handling (offered by hand), or v1.8.0.
#[test]
fn a_release_on_offer_that_needs_it() {
    let r = answer("v1.7.3", &["v1.7.1"], false);
    assert!(!r.no_longer_needed());
    assert!(r.why().starts_with("v1.7.1 is on offer"), "{r:?}");
    assert!(!answer("v1.8.0", &["v1.8.0-rc1"], false).no_longer_needed());
    assert!(answer("v1.8.0", &["v1.8.1", "v1.9.0"], false).no_longer_needed());
}

#[test]
fn not_while_it_has_work_or_cannot_tell() {
    let on_offer = offer(&[]);
    let seen = Facts {
        current: Some("v1.9.0"),
        on_offer: &on_offer,
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
    /// methods (up to v1.7.1) or patches the CR itself (v1.8.0), nor with the add-on installed.
    #[test]
    fn never_retired_while_a_next_release_needs_it(
        minor in 0u64..12, patch in 0u64..4, addon: bool,
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
        let r = answer(&current, &refs, addon);
        let reachable = |v: (u64, u64, u64)| v > now && (v.1 == minor || v.1 == minor + 1);
        let without_handling = (0..=7).flat_map(|m| (0..4).map(move |p| (1, m, p)))
            .any(|v| v <= LAST_WITHOUT_HANDLING && reachable(v));
        let offered_without = names.iter().any(|v| Handling::of(v) == Handling::None);
        let v180 = reachable(HARD_CODED_RESTORE) || names.iter().any(|v| v == "v1.8.0");
        let needed = without_handling || offered_without || v180 || addon;
        prop_assert_eq!(!r.no_longer_needed(), needed, "{} {:?}: {:?}", current, names, r);
    }
}
