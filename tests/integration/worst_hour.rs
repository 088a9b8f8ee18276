//! The worst hour (another suspender's `[]`; a failed upgrade), on the real API server with the
//! models of
//! `support::harvester` (each makes the writes of its original, with its field manager):
//! another suspender's `[]` is never recorded as an original, whichever suspender wrote it; and
//! a failed upgrade to a release that does nothing to the methods itself holds the armed `post`
//! until the retry, while a by-hand `post` restores at once.

use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};
use workload_update_guard::model::KUBEVIRT_RECORD;
use workload_update_guard::warnings::{HELD_AFTER_FAILURE, SUSPENDED_BY_ANOTHER};

use crate::support::harvester::*;
use crate::support::*;

use crate::support::env_with as env;

/// The administrator's methods, on the CR and in the ManagedChart's values (what Fleet renders).
async fn admin_methods(client: &Client, ns: &str, methods: &Value) {
    harvester(client, ns, Some(methods.clone())).await;
    let op = json!([{"op": "add", "path": "/spec/values",
                     "value": {"kubevirt": {"spec": {"workloadUpdateStrategy":
                        {"workloadUpdateMethods": methods}}}}}]);
    json_patch(client, "ManagedChart", ns, "harvester", op)
        .await
        .unwrap();
}

/// The original recorded on the CR, as JSON.
async fn recorded(client: &Client, ns: &str) -> Option<Value> {
    let kv = get(client, "KubeVirt", ns, "kubevirt").await;
    let record = kv["metadata"]["annotations"][KUBEVIRT_RECORD].as_str()?;
    serde_json::from_str::<Value>(record)
        .ok()?
        .get("value")
        .cloned()
}

/// The add-on's plan (to v1.8.0) is at `ClusterUpgrading`, its PreRun has written `[]`: a `pre`
/// now records what Fleet renders, never that `[]`; after the add-on's Finalize (a blind
/// `[LiveMigrate]`), `post` puts the administrator's methods back. Where what Fleet renders is
/// what the add-on restores anyway, `pre` suspends all the same (its values override lets
/// Fleet's deploy past the add-on's claim, harvester#10899) and `post` ends as the add-on would.
/// On a control plane of its own: UpgradePlans are cluster-scoped, and would hold up every
/// other test's `post`.
#[tokio::test]
async fn a_late_pre_in_the_addons_plan_records_what_fleet_renders_not_its_empty_list() {
    let (cp, client) = ControlPlane::own().await;
    let kubeconfig = cp.kubeconfig();
    let both = json!(["LiveMigrate", "Evict"]);
    let custom = namespace(&client, "wh-addon-custom").await;
    admin_methods(&client, &custom, &both).await;
    let default = namespace(&client, "wh-addon-default").await;
    harvester(&client, &default, Some(json!(["LiveMigrate"]))).await;
    let plan = UpgradePlan::create(&client, "hvst-upgrade-wh", "v1.8.0").await;
    for phase in [
        "Initialized",
        "ISODownloading",
        "ImagePreloaded",
        "ClusterUpgrading",
    ] {
        plan.set_phase(&client, phase).await;
    }
    for ns in [&custom, &default] {
        addon_prerun(&client, ns).await;
        assert_eq!(kubevirt_methods(&client, ns).await, json!([]));
    }
    let pre = run_bin(&kubeconfig, env(&custom, "pre", &[])).await;
    pre.ok().says(&[
        SUSPENDED_BY_ANOTHER,
        "UpgradePlan hvst-upgrade-wh",
        "values override",
        "is lost",
    ]);
    assert_eq!(recorded(&client, &custom).await, Some(both.clone()));
    let pre = run_bin(&kubeconfig, env(&default, "pre", &[])).await;
    pre.ok()
        .says(&[SUSPENDED_BY_ANOTHER, "chart's default", "harvester#10899"]);
    assert_eq!(recorded(&client, &default).await, Some(live_migrate()));
    for ns in [&custom, &default] {
        addon_finalize(&client, ns).await;
    }
    plan.set_phase(&client, "Succeeded").await;
    for (ns, want) in [(&custom, both.clone()), (&default, json!(["LiveMigrate"]))] {
        let post = run_bin(&kubeconfig, env(ns, "post", &[])).await;
        post.ok();
        assert_eq!(
            kubevirt_methods(&client, ns).await,
            want,
            "{ns}: as before the plan"
        );
    }
    plan.delete(&client).await;
}

/// Harvester v1.8.0 at `UpgradingSystemServices`, its script's `[]` written (`kubectl-patch`):
/// `pre` records the administrator's methods, and after the cleanup's hard-coded
/// `[LiveMigrate]` `post` puts them back. v1.7.3, its values `[]` and its backup on the Upgrade:
/// `pre` leaves it to Harvester, whose cleanup restores them.
#[tokio::test]
async fn a_late_pre_after_harvesters_own_suspension_ends_as_before_the_upgrade() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    let both = json!(["LiveMigrate", "Evict"]);
    let ns = namespace(&client, "wh-v180").await;
    admin_methods(&client, &ns, &both).await;
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-wh", "v1.8.0").await;
    up.set_state(&client, "UpgradingSystemServices").await;
    up.v180_suspend(&client).await;
    let pre = run_bin(&kubeconfig, env(&ns, "pre", &[])).await;
    pre.ok();
    assert!(pre.stderr.contains(SUSPENDED_BY_ANOTHER), "{}", pre.stderr);
    assert_eq!(recorded(&client, &ns).await, Some(both.clone()));
    up.finish(&client, true).await;
    up.v180_cleanup(&client).await;
    let post = run_bin(&kubeconfig, env(&ns, "post", &[])).await;
    post.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, both);

    let (ns, chart) = helm_installed(&client, "wh-v173").await;
    let op = json!([{"op": "add", "path": "/spec/values/kubevirt/spec/workloadUpdateStrategy",
                     "value": {"workloadUpdateMethods": both}}]);
    json_patch(&client, "ManagedChart", &ns, "harvester", op)
        .await
        .unwrap();
    fleet_deploy(&client, &ns, &chart).await.unwrap();
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-wh", "v1.7.3").await;
    up.set_state(&client, "UpgradingSystemServices").await;
    up.backup_and_suspend(&client, &chart).await;
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    let pre = run_bin(&kubeconfig, env(&ns, "pre", &[])).await;
    pre.ok();
    assert_eq!(
        recorded(&client, &ns).await,
        None,
        "left to Harvester: {}",
        pre.stderr
    );
    up.finish(&client, true).await;
    up.cleanup_values(&client).await;
    up.upgrade_chart(&client, &chart).await.unwrap();
    let post = run_bin(&kubeconfig, env(&ns, "post", &[])).await;
    post.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, both);
}

/// `pre` with `[LiveMigrate]`, then the armed `post` (reads every second).
async fn armed_after_pre(
    client: &Client,
    label: &str,
    methods: Value,
) -> (String, tokio::task::JoinHandle<Run>) {
    let ns = namespace(client, label).await;
    harvester(client, &ns, Some(methods)).await;
    let kubeconfig = control_plane().kubeconfig();
    let pre = run_bin(&kubeconfig, env(&ns, "pre", &[])).await;
    pre.ok();
    let e = env(&ns, "post", &[("ARM", "true"), ("ARM_POLL_SECONDS", "1")]);
    (
        ns,
        tokio::spawn(async move { run_bin(&kubeconfig, e).await }),
    )
}

/// The states of an upgrade under way, in order.
const UNDER_WAY: [&str; 3] = [
    "PreparingNodes",
    "UpgradingSystemServices",
    "UpgradingNodes",
];

/// Path A (to v1.7.1): the upgrade fails at `UpgradingNodes`, then is deleted, then retried.
/// The armed `post` holds through the failure and the deletion (a Warning names the failed
/// Upgrade and the ways out; `status` says it is held), and restores within 5 s of the retry's
/// success. A by-hand `post` after a failure restores at once.
#[tokio::test]
async fn a_failed_path_a_upgrade_holds_the_armed_post_until_the_retry() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    let (ns, post) = armed_after_pre(&client, "wh-held", json!(["LiveMigrate"])).await;
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-try1", "v1.7.1").await;
    for state in UNDER_WAY {
        up.set_state(&client, state).await;
    }
    up.finish(&client, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!post.is_finished(), "held after the failure");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    let status = run_bin(&kubeconfig, env(&ns, "status", &[])).await;
    assert!(
        status.stdout.contains("held after the failed"),
        "{}",
        status.stdout
    );
    // Deleted as Harvester's does it: wrangler's finalizer removed by its OnRemove.
    up.controller(&client).delete().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!post.is_finished(), "held after the deletion");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    let retry = Upgrade::start(&client, &ns, "hvst-upgrade-try2", "v1.7.1").await;
    for state in UNDER_WAY {
        retry.set_state(&client, state).await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(!post.is_finished(), "the retry is under way: {state}");
    }
    let run = retry
        .finish_then_post(&client, true, post, "restored after the retry's success")
        .await;
    run.ok().says(&[
        HELD_AFTER_FAILURE,
        "hvst-upgrade-try1",
        "post by hand",
        "hvst-upgrade-try2",
    ]);
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));

    // By hand after a failure: the operator's choice, at once.
    let ns = harvester_ns(&client, "wh-by-hand", json!(["LiveMigrate"])).await;
    assert_eq!(run_bin(&kubeconfig, env(&ns, "pre", &[])).await.code, 0);
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-try1", "v1.7.1").await;
    up.finish(&client, false).await;
    let started = Instant::now();
    let post = run_bin(&kubeconfig, env(&ns, "post", &[])).await;
    post.ok();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
}

/// v1.8.0 restores on failure itself (its cleanup's blind `[LiveMigrate]`): the armed `post`
/// follows it and ends with the administrator's methods.
#[tokio::test]
async fn a_failed_v180_upgrade_still_ends_with_the_administrators_methods() {
    let client = admin().await;
    let both = json!(["LiveMigrate", "Evict"]);
    let (ns, post) = armed_after_pre(&client, "wh-v180-failed", both.clone()).await;
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-wh", "v1.8.0").await;
    up.set_state(&client, "UpgradingSystemServices").await;
    up.v180_suspend(&client).await;
    up.finish(&client, false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!post.is_finished(), "its cleanup is pending");
    up.v180_cleanup(&client).await;
    let run = tokio::time::timeout(Duration::from_secs(5), post)
        .await
        .expect("restored within 5 s of the cleanup")
        .unwrap();
    run.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, both);
}
