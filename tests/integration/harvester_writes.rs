//! The guard against Harvester's Upgrade as Harvester really writes it (`support::
//! harvester_controller`: whole-object Updates as `harvester`, no status subresource, conditions
//! as wrangler v3's `condition.Cond` sets them, with `lastUpdateTime` and never
//! `lastTransitionTime`).

use std::time::Duration;

use serde_json::json;

use crate::resident::Guard;
use crate::support::harvester::*;
use crate::support::harvester_controller::wrangler;
use crate::support::*;

/// A `pre` run late (the upgrade to v1.7.1 already at `UpgradingNodes`), the upgrade's end while
/// no resident guard runs, then a resident guard started after the end: it reads the end from
/// `Completed`'s `lastUpdateTime` (after the suspension's record), knows that upgrade as the one
/// the suspension was for, and restores.
#[tokio::test]
async fn a_late_pre_then_an_end_unseen_then_a_resident_guard_restores() {
    let methods = json!(["LiveMigrate"]);
    let (client, ns) = new_harvester("wrangler-late", methods.clone()).await;
    let kubeconfig = control_plane().kubeconfig();
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-late", "v1.7.1").await;
    let hv = up.controller(&client);
    hv.up_to_nodes_prepared().await;
    let seen = Default::default();
    let prepared = hv.nodes_prepared(Duration::from_secs(5), &seen).await;
    assert!(prepared.passed.is_some(), "no policy here: {prepared:?}");
    hv.apply_manifests().await;
    hv.system_services_upgraded(true).await;
    hv.upgrading_nodes().await;
    // The record a second or more after the Upgrade's creation (times are whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let pre = run_bin(&kubeconfig, env_for(&ns, "pre")).await;
    pre.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    // The end a second or more after the record, as an upgrade's minutes make it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    hv.node_upgraded("node-0", true).await;
    let ended = hv.get().await;
    let completed = condition(&ended, "Completed").unwrap();
    assert_eq!(wrangler::status(&ended, "Completed"), "True");
    assert!(
        completed["lastUpdateTime"].is_string() && completed.get("lastTransitionTime").is_none(),
        "as wrangler writes it: {completed}"
    );
    assert_eq!(
        ended["metadata"]["labels"]["harvesterhci.io/upgradeState"],
        "Succeeded"
    );
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!([]),
        "no guard ran"
    );
    let guard = Guard::spawn(&kubeconfig, &ns, 0);
    guard
        .restored(&client, &ns, &methods, Duration::from_secs(10))
        .await;
}
