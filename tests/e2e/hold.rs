//! The hold end to end (docs/hold.md): the chart installed with the real Helm 4 on the real
//! kubelet, the policy on (the default); the guard scaled to 0; a modelled Harvester upgrade to
//! v1.7.1 (`support::harvester_controller`: whole-object Updates as `harvester`, lasso's backoff
//! on a compressed time scale) held at `PreparingNodes`, the API server refusing its
//! `NodesPrepared=True` with the policy's message; the guard scaled back: it suspends, the
//! model's next retry passes, the upgrade goes on to its end, and the guard restores.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::chart::{Helm, status_by_exec};
use crate::node::*;
use crate::support::harvester::Upgrade;
use crate::support::harvester_controller::{TIME_SCALE, lasso_delay, wait_in_force, wrangler};
use crate::support::{client_for, repo_root};

const RELEASE: &str = "workload-update-guard";
const DEPLOYMENT: &str = "workload-update-guard-watch";
const UPGRADE: &str = "hvst-upgrade-e2e-hold";
/// The selector of the guard's pods (the chart's labels).
const GUARD_PODS: &str =
    "app.kubernetes.io/instance=workload-update-guard,app.kubernetes.io/component=watch";
const ESCAPE: &str = "workload-update-guard.harvesterhci.io/allow-unprotected";

/// The release and the Upgrade, whatever the test leaves.
struct Leftovers<'a>(&'a Helm);

impl Drop for Leftovers<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .run(&["uninstall", RELEASE, "-n", NS, "--no-hooks", "--wait"]);
        delete_all_upgrades();
    }
}

fn guard_pods() -> usize {
    pods_with(GUARD_PODS).len()
}

#[test]
fn the_hold_keeps_an_upgrade_at_preparing_nodes_while_the_guard_is_down() {
    let _turn = turn();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(held_while_the_guard_is_down());
}

async fn held_while_the_guard_is_down() {
    harvester_state();
    no_upgrades_yet();
    let helm = Helm::new();
    let _leftovers = Leftovers(&helm);
    let original = methods();
    assert_eq!(original, json!(["LiveMigrate"]));
    let client = client_for(&node().dir.join("kubeconfig")).await;

    // 1. Installed with the policy (the default).
    let chart = repo_root().join("manifests/chart");
    let install = helm.waiting(&[
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "--set",
        "image.repository=workload-update-guard",
    ]);
    assert!(install.ok, "helm install: {install:?}");
    let policies = k(&[
        "get",
        "validatingadmissionpolicies,validatingadmissionpolicybindings",
        "-o",
        "name",
    ]);
    assert!(
        policies.contains(&format!(
            "validatingadmissionpolicy.admissionregistration.k8s.io/{DEPLOYMENT}-hold"
        )) && policies.contains(&format!(
            "validatingadmissionpolicybinding.admissionregistration.k8s.io/{DEPLOYMENT}-hold"
        )),
        "{policies}"
    );

    wait_in_force(&client, NS).await;

    // 2. The guard down.
    k(&["-n", NS, "scale", "deployment", DEPLOYMENT, "--replicas=0"]);
    wait_until("the guard's pod gone", Duration::from_secs(60), || {
        guard_pods() == 0
    });

    // 3. The upgrade to v1.7.1 comes to NodesPrepared: refused, retried, held.
    let up = Upgrade::start(&client, NS, UPGRADE, "v1.7.1").await;
    let hv = up.controller(&client);
    hv.up_to_nodes_prepared().await;
    let (retrying, seen) = hv.nodes_prepared_in_background(Duration::from_secs(300));
    let held_since = Instant::now();
    // Refused at once, then for 5 s.
    while seen.lock().unwrap().refusals.is_empty() {
        assert!(
            seen.lock().unwrap().passed.is_none(),
            "passed with the guard down: the hold is not in force"
        );
        assert!(
            held_since.elapsed() < Duration::from_secs(5),
            "no refusal within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = seen.lock().unwrap().clone();
    assert!(held.passed.is_none(), "{held:?}");
    let message = held.refusals.last().unwrap();
    for words in [
        "held by workload-update-guard",
        &format!("Upgrade {UPGRADE} to v1.7.1 waits before NodesPrepared"),
        &format!("KubeVirt {NS}/kubevirt still has workloadUpdateMethods [LiveMigrate]"),
        &format!("kubectl -n {NS} get deploy {DEPLOYMENT}"),
        &format!("kubectl -n {NS} annotate upgrades.harvesterhci.io {UPGRADE} {ESCAPE}=true"),
    ] {
        assert!(message.contains(words), "{words:?} not in {message:?}");
    }
    let now = hv.get().await;
    assert_eq!(
        now["metadata"]["labels"]["harvesterhci.io/upgradeState"],
        "PreparingNodes"
    );
    assert_eq!(wrangler::status(&now, "NodesPrepared"), "Unknown");
    assert_eq!(methods(), original, "nothing suspended: no guard runs");
    figure(&format!(
        "hold: with the guard scaled to 0, NodesPrepared=True refused {} times in {:.1} s",
        held.refusals.len(),
        held_since.elapsed().as_secs_f64()
    ));
    // With no pod there is no status by exec and no scrape: the alert WorkloadUpdateGuardDown
    // is what tells (tests/promtool/alerts.test.yaml).

    // 4. The guard back, but unable to act: its Role may no longer patch the KubeVirt CR (a
    // RBAC mistake). Its pre fails with a 403; the hold stays, and the guard says so: status by
    // exec first, and the metrics.
    let role = get_json(&["-n", NS, "role", DEPLOYMENT]);
    let mut broken = role.clone();
    for rule in broken["rules"].as_array_mut().unwrap() {
        if rule["resources"] == json!(["kubevirts"]) {
            // Its watch of the CR stays: only the patch is taken away.
            rule["verbs"] = json!(["get", "list", "watch"]);
        }
    }
    k_stdin(&["replace", "-f", "-"], &broken.to_string());
    k(&["-n", NS, "scale", "deployment", DEPLOYMENT, "--replicas=1"]);
    k(&[
        "-n",
        NS,
        "rollout",
        "status",
        "deployment",
        DEPLOYMENT,
        "--timeout=90s",
    ]);
    let mut scraped = String::new();
    wait_until("the guard says held", Duration::from_secs(60), || {
        scraped = scrape_guard(GUARD_PODS, 9090);
        metric(&scraped, "workload_update_guard_upgrade_held") == Some(1.0)
    });
    assert_eq!(
        metric(&scraped, "workload_update_guard_upgrade_unprotected"),
        Some(1.0),
        "{scraped}"
    );
    let status = status_by_exec();
    let first = status.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "HELD BY THE POLICY: Harvester Upgrade {UPGRADE} to v1.7.1 is under way"
        )) && first.contains("holds it before NodesPrepared"),
        "{status}"
    );
    assert!(status.contains("UpgradeHeldByPolicy"), "{status}");
    assert!(
        seen.lock().unwrap().passed.is_none(),
        "passed while unprotected"
    );
    figure(
        "hold: the guard back without the right to patch: status by exec says HELD BY THE POLICY; the metrics upgrade_held 1",
    );

    // 5. The right back: the guard's next try of pre (20 s at most) suspends, and the model's
    // next retry passes.
    let back = Instant::now();
    let mut fixed = role.clone();
    fixed["metadata"] = json!({"name": DEPLOYMENT, "namespace": NS,
                               "labels": role["metadata"]["labels"]});
    k_stdin(&["apply", "-f", "-"], &fixed.to_string());
    wait_until("the methods suspended", Duration::from_secs(60), || {
        methods() == json!([])
    });
    let suspended = Instant::now();
    let passed = retrying.await.unwrap();
    let at = passed
        .passed
        .expect("NodesPrepared passes after the suspension");
    // At the model's first requeue after the suspension: after 30 refusals lasso requeues in
    // its slow lane (120 s, 6 s here), so a fixed 5 s failed whenever the suspension fell early
    // in such a wait (seen in CI: 5.4 s).
    let after = at.saturating_duration_since(suspended);
    let requeue = lasso_delay(passed.refusals.len() as u32) / TIME_SCALE;
    assert!(
        after < requeue + Duration::from_secs(2),
        "passed {after:?} after the suspension; the model's requeue {requeue:?}"
    );
    figure(&format!(
        "hold: the right to patch given back, suspended {:.1} s later; NodesPrepared passed {:.1} s after the suspension ({} refusals in all)",
        suspended.duration_since(back).as_secs_f64(),
        after.as_secs_f64(),
        passed.refusals.len()
    ));
    let status = status_by_exec();
    assert!(status.starts_with("SUSPENDED since "), "{status}");
    let scraped = scrape_guard(GUARD_PODS, 9090);
    for (series, want) in [
        ("workload_update_guard_suspension_in_place", 1.0),
        ("workload_update_guard_upgrade_unprotected", 0.0),
        ("workload_update_guard_upgrade_held", 0.0),
    ] {
        assert_eq!(metric(&scraped, series), Some(want), "{series}: {scraped}");
    }

    // 6. The upgrade goes on to its end; the guard restores.
    hv.apply_manifests().await;
    hv.system_services_upgraded(true).await;
    hv.upgrading_nodes().await;
    hv.node_upgraded("node-0", true).await;
    let ended = Instant::now();
    wait_until("the methods restored", Duration::from_secs(10), || {
        methods() == original
    });
    figure(&format!(
        "hold: restored {:.1} s after the end",
        ended.elapsed().as_secs_f64()
    ));
    let status = status_by_exec();
    assert!(
        status.starts_with("NOT SUSPENDED: automated updates on"),
        "{status}"
    );
    let scraped = scrape_guard(GUARD_PODS, 9090);
    assert_eq!(
        metric(&scraped, "workload_update_guard_suspension_in_place"),
        Some(0.0),
        "{scraped}"
    );
    hv.cleanup().await;
    hv.delete().await;
    let uninstall = helm.waiting(&["uninstall", RELEASE]);
    assert!(uninstall.ok, "helm uninstall: {uninstall:?}");
    assert_eq!(methods(), original);
}
