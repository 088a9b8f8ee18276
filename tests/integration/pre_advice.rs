//! `pre` before each release (is it needed at all; does it come late), with the models of
//! `support::harvester`
//! on the real API server: where the release the cluster upgrades to restores what is there now,
//! `pre` writes nothing (both objects byte for byte, `managedFields` included) and says "not
//! needed"; `PRE_EVEN_IF_NOT_NEEDED=true` suspends as before; where it does not, `pre` suspends;
//! and a `pre` after KubeVirt's upgrade has begun suspends and warns that it came late.

use kube::Client;
use serde_json::{Value, json};
use workload_update_guard::plan::harvester_upgrade::STATE_LABEL;
use workload_update_guard::warnings::PRE_LATE;

use crate::support::harvester::*;
use crate::support::*;

/// Each release family: (release, the methods an administrator set, if any, not needed).
/// v1.8.0 needs the guard whatever the methods: its own patch of the CR is a claim that its
/// chart's deploy stops on (harvester#10677).
const CASES: &[(&str, Option<&str>, bool)] = &[
    ("v1.7.1", None, false),
    ("v1.7.2", None, true),
    ("v1.7.3", Some("Evict"), true),
    ("v1.8.0", None, false),
    ("v1.8.0", Some("Evict"), false),
    ("v1.8.1", Some("Evict"), true),
    ("v1.9.0", None, true),
];

async fn install(client: &Client, label: &str, admin: Option<&str>) -> String {
    let (ns, chart) = helm_installed(client, label).await;
    if let Some(m) = admin {
        let op = json!([{"op": "add", "path": "/spec/values/kubevirt/spec/workloadUpdateStrategy",
                         "value": {"workloadUpdateMethods": ["LiveMigrate", m]}}]);
        json_patch(client, "ManagedChart", &ns, "harvester", op)
            .await
            .unwrap();
        fleet_deploy(client, &ns, &chart).await.unwrap();
    }
    ns
}

async fn run(ns: &str, phase: &str, extra: &[(&str, &str)]) -> Run {
    let mut env = env_for(ns, phase);
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    let run = run_bin(&control_plane().kubeconfig(), env).await;
    assert_eq!(run.code, 0, "{phase} {extra:?}: {run:?}");
    run
}

async fn both(client: &Client, ns: &str) -> (Value, Value) {
    (
        get(client, "KubeVirt", ns, "kubevirt").await,
        get(client, "ManagedChart", ns, "harvester").await,
    )
}

/// Harvester's Upgrade `hvst-upgrade-1` to `release`, its state label at `state` (a merge patch
/// as `harvester`).
async fn upgrade_at(client: &Client, ns: &str, release: &str, state: &str) {
    let up = Upgrade::start(client, ns, "hvst-upgrade-1", release).await;
    let labels = json!({"metadata": {"labels": {STATE_LABEL: state}}});
    merge_patch(client, "Upgrade", ns, &up.name, "harvester", labels).await;
}

/// By the Upgrade under way (state `PreparingRepo`, before KubeVirt's upgrade) and by the one
/// release on offer: `status` and `pre` give the same answer; not needed: nothing written, and
/// the override suspends; needed: suspended.
#[tokio::test]
async fn pre_stands_aside_where_the_coming_release_restores_what_is_there() {
    let client = admin().await;
    for (i, (release, admin_choice, not_needed)) in CASES.iter().enumerate() {
        // By offer only for releases newer than any `server-version` another test sets (v1.7.3):
        // the setting is cluster-wide, and only newer releases count as on offer.
        for by_offer in [false, true] {
            if by_offer && release.as_bytes() <= b"v1.7.3".as_slice() {
                continue;
            }
            let ns = install(&client, &format!("pa-{i}-{by_offer}"), *admin_choice).await;
            if by_offer {
                offer_version(&client, &ns, release).await;
            } else {
                upgrade_at(&client, &ns, release, "PreparingRepo").await;
            }
            let case = format!("{release} {admin_choice:?} by offer {by_offer}");
            let status = run(&ns, "status", &[]).await;
            let before = both(&client, &ns).await;
            let pre = run(&ns, "pre", &[]).await;
            let said = pre.summary.as_ref().unwrap().to_string();
            assert!(said.contains(release), "{case}: {said}");
            if *not_needed {
                assert!(said.contains("pre is not needed"), "{case}: {said}");
                assert!(
                    status.stdout.contains("pre is not needed"),
                    "{case}: {}",
                    status.stdout
                );
                assert_eq!(both(&client, &ns).await, before, "{case}: nothing written");
                assert_eq!(
                    kubevirt_methods(&client, &ns).await,
                    before.0["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"]
                );
                run(&ns, "pre", &[("PRE_EVEN_IF_NOT_NEEDED", "true")]).await;
            } else {
                assert!(said.contains("pre is needed"), "{case}: {said}");
                assert!(
                    status.stdout.contains("pre is needed"),
                    "{case}: {}",
                    status.stdout
                );
            }
            assert_eq!(
                kubevirt_methods(&client, &ns).await,
                json!([]),
                "{case}: suspended"
            );
            // A rerun keeps its own suspension, whatever the release.
            let again = run(&ns, "pre", &[]).await;
            assert_eq!(
                kubevirt_methods(&client, &ns).await,
                json!([]),
                "{case}: {again:?}"
            );
            // (No post while the modelled Upgrade is under way: it would wait for its cleanup.)
            if by_offer {
                run(&ns, "post", &[]).await;
            }
        }
    }
}

/// No Upgrade, two releases on offer: not known; `pre` suspends and names the releases that
/// would make it unnecessary.
#[tokio::test]
async fn an_unknown_target_is_suspended_and_the_releases_that_would_do_are_named() {
    let client = admin().await;
    let ns = install(&client, "pa-unknown", None).await;
    offer_version(&client, &ns, "v9.1.0").await;
    offer_version(&client, &ns, "v9.2.0").await;
    let pre = run(&ns, "pre", &[]).await;
    let said = pre.summary.as_ref().unwrap().to_string();
    assert!(said.contains("v1.7.2+, v1.8.1+ or v1.9"), "{said}");
    assert!(said.contains("v9.2.0, v9.1.0"), "{said}");
    assert!(pre.stderr.contains("not known"), "{}", pre.stderr);
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    run(&ns, "post", &[]).await;
}

/// Late: the Upgrade at `UpgradingSystemServices` or `UpgradingNodes` (a release whose handling
/// does not restore what is there), or the CR counting outdated workloads: `pre` suspends, exits
/// 0 and warns, naming the Upgrade, its state and the migrations under way.
#[tokio::test]
async fn a_late_pre_suspends_and_says_so() {
    let client = admin().await;
    let cases: &[(&str, Option<&str>, &str, u64)] = &[
        ("v1.7.1", None, "UpgradingSystemServices", 0),
        ("v1.7.1", None, "UpgradingNodes", 2),
        ("v1.8.0", Some("Evict"), "UpgradingNodes", 0),
        // The add-on's upgrade (no Harvester Upgrade): KubeVirt's outdated count says it.
        ("", None, "", 4),
    ];
    for (i, (release, admin_choice, state, outdated)) in cases.iter().enumerate() {
        let ns = install(&client, &format!("pa-late-{i}"), *admin_choice).await;
        let name = format!("kubevirt-workload-update-late{i}");
        migration(&client, &ns, &name, "Running").await;
        if !release.is_empty() {
            upgrade_at(&client, &ns, release, state).await;
        }
        if *outdated > 0 {
            set_status(
                &client,
                "KubeVirt",
                &ns,
                "kubevirt",
                json!({"outdatedVirtualMachineInstanceWorkloads": outdated}),
            )
            .await;
        }
        let pre = run(&ns, "pre", &[]).await;
        assert_eq!(
            kubevirt_methods(&client, &ns).await,
            json!([]),
            "{release} {state}"
        );
        let late = pre.warnings_of(PRE_LATE);
        assert_eq!(late.len(), 1, "{pre:?}");
        let w = &late[0];
        assert!(w.contains(&format!("{ns}/{name} (Running)")), "{w}");
        if !release.is_empty() {
            assert!(
                w.contains("hvst-upgrade-1") && w.contains(state) && w.contains(release),
                "{w}"
            );
        }
        if *outdated > 0 {
            assert!(w.contains(&format!("counts {outdated} outdated")), "{w}");
        }
        if release.is_empty() {
            run(&ns, "post", &[]).await;
        }
    }
}
