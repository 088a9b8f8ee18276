//! The order kept by the guard: `post` never turns updates on while an
//! upgrade is under way, for every release, whether it handles the methods itself or not. The
//! models of `support::harvester` move Harvester's Upgrade through its real states in order
//! (`upgrade_controller.go` `initStatus`, then the job controller's states) and the add-on's
//! UpgradePlan through upgrade-toolkit's phases.

use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};
use workload_update_guard::error::exit;
use workload_update_guard::plan::upgrade_progress::{ENDED, PLAN_PHASES, UPGRADE_STATES};
use workload_update_guard::warnings::RESTORED_DURING_UPGRADE;

use crate::support::harvester::*;
use crate::support::*;

/// The states in which an upgrade is under way, in order.
fn running(states: &[&'static str]) -> Vec<&'static str> {
    states
        .iter()
        .copied()
        .filter(|s| !ENDED.contains(s))
        .collect()
}

use crate::support::env_with as env;

/// Both objects' resourceVersions: unchanged means nothing was written.
async fn versions(client: &Client, ns: &str) -> (Value, Value) {
    (
        get(client, "KubeVirt", ns, "kubevirt").await["metadata"]["resourceVersion"].clone(),
        get(client, "ManagedChart", ns, "harvester").await["metadata"]["resourceVersion"].clone(),
    )
}

/// The upgrade through each state before its end, `pause` in each: the waiting `post` (`what`)
/// has not ended, and both objects are still at `before` (`versions`); then its end
/// (`succeeded` or failed): `post` ends within 5 s, exit 0, and its run is returned.
async fn waits_through_the_upgrade(
    (client, ns): (&Client, &str),
    before: &(Value, Value),
    (up, succeeded): (&Upgrade, bool),
    post: tokio::task::JoinHandle<Run>,
    pause: Duration,
    what: &str,
) -> Run {
    for state in running(UPGRADE_STATES) {
        up.set_state(client, state).await;
        tokio::time::sleep(pause).await;
        assert!(!post.is_finished(), "{what} ended during {state}");
        assert_eq!(
            versions(client, ns).await,
            *before,
            "{state}: nothing written"
        );
    }
    let run = up
        .finish_then_post(client, succeeded, post, &format!("{what} restores"))
        .await;
    run.ok();
    run
}

/// The pair, and `pre` run on it.
async fn suspended(client: &Client, kubeconfig: &std::path::Path, label: &str) -> String {
    let ns = namespace(client, label).await;
    harvester(client, &ns, Some(json!(["LiveMigrate"]))).await;
    let pre = run_bin(kubeconfig, env(&ns, "pre", &[])).await;
    pre.ok();
    assert_eq!(kubevirt_methods(client, &ns).await, json!([]));
    ns
}

/// `post` with a bound of 1 s while `what` is in `state`: exit 7, nothing written, and the one
/// line names the object and its state.
async fn post_waits_and_gives_up(
    client: &Client,
    kubeconfig: &std::path::Path,
    ns: &str,
    what: &str,
    state: &str,
) {
    let before = versions(client, ns).await;
    let run = run_bin(
        kubeconfig,
        env(ns, "post", &[("HARVESTER_CLEANUP_WAIT_SECONDS", "1")]),
    )
    .await;
    assert_eq!(
        run.code,
        i32::from(exit::CLEANUP_PENDING),
        "{state}: {run:?}"
    );
    let error = run.summary.as_ref().unwrap()["error"].as_str().unwrap();
    assert_contains_all(
        error,
        &[
            what,
            state,
            "under way",
            "nothing was written",
            "RESTORE_DURING_UPGRADE",
        ],
    );
    assert!(!error.contains('\n'));
    // The progress line at once names it too.
    assert!(
        run.stderr.contains("waiting:") && run.stderr.contains(state),
        "{}",
        run.stderr
    );
    assert_eq!(
        versions(client, ns).await,
        before,
        "{state}: nothing written"
    );
    assert_eq!(kubevirt_methods(client, ns).await, json!([]));
}

/// Harvester's Upgrade, release by release (v1.7.1: no handling of its own; v1.7.3: backup and
/// restore; v1.8.0: patch and hard-coded restore): `post` started in each state waits and
/// writes nothing.
#[tokio::test]
async fn post_started_in_each_state_of_each_release_waits_and_writes_nothing() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    let one = async |version: &str| {
        let ns = suspended(&client, &kubeconfig, "order-states").await;
        let up = Upgrade::start(&client, &ns, "hvst-upgrade-order", version).await;
        for state in running(UPGRADE_STATES) {
            up.set_state(&client, state).await;
            post_waits_and_gives_up(&client, &kubeconfig, &ns, "hvst-upgrade-order", state).await;
        }
    };
    tokio::join!(one("v1.7.1"), one("v1.7.3"), one("v1.8.0"));
}

/// v1.7.1 (Harvester does nothing to the methods, so there is no cleanup to wait for): a `post`
/// started as the upgrade begins waits through every state, writes nothing, and restores within
/// 5 s of `Succeeded`, never before.
#[tokio::test]
async fn post_across_a_whole_v171_upgrade_restores_at_its_end_and_never_before() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    for succeeded in [true, false] {
        let ns = suspended(&client, &kubeconfig, "order-whole").await;
        let up = Upgrade::start(&client, &ns, "hvst-upgrade-whole", "v1.7.1").await;
        let before = versions(&client, &ns).await;
        let post = {
            let (ns, kc) = (ns.clone(), kubeconfig.clone());
            tokio::spawn(async move { run_bin(&kc, env(&ns, "post", &[])).await })
        };
        let pause = Duration::from_millis(700);
        let run = waits_through_the_upgrade(
            (&client, &ns),
            &before,
            (&up, succeeded),
            post,
            pause,
            "post",
        )
        .await;
        assert!(
            run.stderr.contains("PreparingLoggingInfra"),
            "{}",
            run.stderr
        );
        assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    }
}

/// An Upgrade stuck for good: `RESTORE_DURING_UPGRADE=true` restores anyway, with a warning that
/// names the Upgrade and its state.
#[tokio::test]
async fn the_override_restores_during_an_upgrade_with_a_warning() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    let ns = suspended(&client, &kubeconfig, "order-override").await;
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-stuck-for-good", "v1.7.1").await;
    up.set_state(&client, "UpgradingNodes").await;
    let run = run_bin(
        &kubeconfig,
        env(&ns, "post", &[("RESTORE_DURING_UPGRADE", "true")]),
    )
    .await;
    run.ok();
    assert!(
        run.warnings()
            .iter()
            .any(|w| w.starts_with(RESTORED_DURING_UPGRADE)
                && w.contains("hvst-upgrade-stuck-for-good")
                && w.contains("UpgradingNodes")),
        "{run:?}"
    );
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
}

/// The add-on (upgrade-toolkit): `post` started in each phase of its UpgradePlan waits and
/// writes nothing; one started at its start restores within 5 s of `Succeeded`; the plan that
/// runs the post itself (`UPGRADE_PLAN`, set by hack/job.sh --plan) is not waited for. On a
/// control plane of its own: UpgradePlans are cluster-scoped, and would hold up every other
/// test's `post`.
#[tokio::test]
async fn the_addons_upgrade_plan_is_waited_for_in_every_phase() {
    let (cp, client) = ControlPlane::own().await;
    let kubeconfig = cp.kubeconfig();
    let ns = suspended(&client, &kubeconfig, "order-addon").await;
    let plan = UpgradePlan::create(&client, "hvst-upgrade-addon", "v1.8.0").await;
    // With the add-on's plan under way, `pre` knows the target, and suspends whatever the
    // methods: the add-on's own patch of the CR is a claim that Fleet's deploy of the new chart
    // stops on unless the values render `[]` too (harvester#10899).
    for methods in [json!(["LiveMigrate"]), json!(["LiveMigrate", "Evict"])] {
        let other = namespace(&client, "order-addon-pre").await;
        harvester(&client, &other, Some(methods.clone())).await;
        let pre = run_bin(&kubeconfig, env(&other, "pre", &[])).await;
        pre.ok();
        pre.says(&["pre is needed", "hvst-upgrade-addon", "harvester#10899"]);
        assert_eq!(
            kubevirt_methods(&client, &other).await,
            json!([]),
            "{pre:?}"
        );
    }
    post_waits_and_gives_up(
        &client,
        &kubeconfig,
        &ns,
        "UpgradePlan hvst-upgrade-addon",
        "no phase yet",
    )
    .await;
    for phase in running(PLAN_PHASES) {
        plan.set_phase(&client, phase).await;
        post_waits_and_gives_up(
            &client,
            &kubeconfig,
            &ns,
            "UpgradePlan hvst-upgrade-addon",
            phase,
        )
        .await;
    }
    let post = {
        let (ns, kc) = (ns.clone(), kubeconfig.clone());
        tokio::spawn(async move { run_bin(&kc, env(&ns, "post", &[])).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!post.is_finished());
    let ended = Instant::now();
    plan.set_phase(&client, "Succeeded").await;
    let run = tokio::time::timeout(Duration::from_secs(5), post)
        .await
        .expect("post restores within 5 s of the end")
        .unwrap();
    run.ok();
    assert!(ended.elapsed() < Duration::from_secs(5));
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));

    // The plan's own post (upgrade-toolkit runs it inside the plan) does not wait for it.
    let pre = run_bin(&kubeconfig, env(&ns, "pre", &[])).await;
    pre.ok();
    let own = UpgradePlan::create(&client, "hvst-upgrade-own", "v1.8.0").await;
    own.set_phase(&client, "CleaningUp").await;
    let run = run_bin(
        &kubeconfig,
        env(
            &ns,
            "post",
            &[
                ("UPGRADE_PLAN", "hvst-upgrade-own"),
                ("HARVESTER_CLEANUP_WAIT_SECONDS", "1"),
            ],
        ),
    )
    .await;
    run.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    plan.delete(&client).await;
    own.delete(&client).await;
    cp.down();
}

/// The armed `post` (`ARM=true`, reads every second here: `ARM_POLL_SECONDS=1`; 30 s by
/// default), started right after `pre`: it waits while no upgrade has begun, through every state
/// of a v1.7.1 upgrade, and restores within 5 s of its end, never before. A by-hand `post` first:
/// the armed one then has nothing to do and ends 0, as does a new pod of it. At its bound: exit
/// 9, nothing written, the suspension stays.
#[tokio::test]
async fn the_armed_post_restores_once_after_the_next_upgrade_and_never_before() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    let armed = |ns: &str, extra: &[(&str, &str)]| {
        let mut e = env(ns, "post", &[("ARM", "true"), ("ARM_POLL_SECONDS", "1")]);
        for (k, v) in extra {
            e.insert((*k).into(), (*v).into());
        }
        let kc = kubeconfig.clone();
        tokio::spawn(async move { run_bin(&kc, e).await })
    };
    let ns = suspended(&client, &kubeconfig, "order-armed").await;
    let before = versions(&client, &ns).await;
    let post = armed(&ns, &[]);
    // Its Job (no kubelet here: the object alone), which status names.
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "workload-update-guard-post-armed", "namespace": ns},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "guard", "image": "workload-update-guard"}]}}}}))
    .unwrap();
    kube::Api::namespaced(client.clone(), &ns)
        .create(&Default::default(), &job)
        .await
        .unwrap();
    let status = run_bin(&kubeconfig, env(&ns, "status", &[])).await;
    assert!(
        status.stdout.contains("armed post    Job")
            && status.stdout.contains("waits for the next upgrade"),
        "{}",
        status.stdout
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !post.is_finished(),
        "no upgrade has begun: the armed post waits"
    );
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-armed", "v1.7.1").await;
    let pause = Duration::from_millis(1500);
    let what = "the armed post";
    let run =
        waits_through_the_upgrade((&client, &ns), &before, (&up, true), post, pause, what).await;
    assert!(run.stderr.contains("hvst-upgrade-armed"), "{}", run.stderr);
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    // A new pod of the same Job after the restore: nothing to do.
    let again = armed(&ns, &[]).await.unwrap();
    again.ok();
    assert!(again.stderr.contains("nothing of ours"), "{}", again.stderr);

    // pre again (the last upgrade is over, created before this record); a by-hand post first.
    let pre = run_bin(&kubeconfig, env(&ns, "pre", &[])).await;
    pre.ok();
    let post = armed(&ns, &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!post.is_finished(), "the old upgrade is not the next one");
    let by_hand = run_bin(&kubeconfig, env(&ns, "post", &[])).await;
    by_hand.ok();
    let run = tokio::time::timeout(Duration::from_secs(5), post)
        .await
        .expect("the armed post sees the by-hand restore")
        .unwrap();
    run.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));

    // The bound: no upgrade within ARM_WAIT_SECONDS.
    let pre = run_bin(&kubeconfig, env(&ns, "pre", &[])).await;
    pre.ok();
    let before = versions(&client, &ns).await;
    let run = armed(&ns, &[("ARM_WAIT_SECONDS", "2")]).await.unwrap();
    assert_eq!(run.code, i32::from(exit::ARMED_BOUND), "{run:?}");
    let error = run.summary.as_ref().unwrap()["error"].as_str().unwrap();
    assert_contains_all(
        error,
        &[
            "ARM_WAIT_SECONDS",
            "nothing was written",
            "the suspension stays",
            "no upgrade has begun",
        ],
    );
    assert_eq!(versions(&client, &ns).await, before);
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
}
