//! The guard beside Harvester's own handling of the methods (docs/design.md, "Harvester's own
//! handling"), with the models of `support::harvester` and the real Helm 4 as Fleet: every
//! interleaving of `pre`/`post` with each release's backup, cleanup and restores. Each ends with
//! both objects as they would have been without the guard (a control namespace runs the same
//! upgrade without it), no record or claim of ours, and Helm's next deploy without conflict; or,
//! where Harvester's blind restore would have destroyed an administrator's setting, with that
//! setting back.

use std::path::PathBuf;

use kube::Client;
use serde_json::{Value, json};
use workload_update_guard::error::exit;
use workload_update_guard::model::{ANNOTATION_PREFIX, COMPARE_PATH, METHODS_PATH, VALUES_PATH};
use workload_update_guard::plan::ownership::owners;
use workload_update_guard::warnings::{
    HARVESTER_SUSPENDED, SUSPENDED_BY_ANOTHER, UPDATE_CLAIM_LEFT,
};

use crate::lifetime::as_compared;
use crate::support::harvester::*;
use crate::support::*;

/// Where the guard's `post` runs relative to Harvester's cleanup.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PostAt {
    /// Started while the upgrade runs: it waits for the cleanup.
    BeforeTheEnd,
    /// Started once the upgrade shows Completed, before the cleanup has run.
    BeforeTheCleanup,
    /// Once the cleanup has ended.
    AfterTheCleanup,
}

/// An install (the ManagedChart, and the chart deployed by Helm from its values), optionally
/// with an administrator's values override of the methods first.
async fn install(client: &Client, label: &str, admin: Option<Value>) -> (String, PathBuf) {
    let (ns, chart) = helm_installed(client, label).await;
    if let Some(m) = admin {
        let op = json!([{"op": "add", "path": "/spec/values/kubevirt/spec/workloadUpdateStrategy",
                         "value": {"workloadUpdateMethods": m}}]);
        json_patch(client, "ManagedChart", &ns, "harvester", op)
            .await
            .unwrap();
        fleet_deploy(client, &ns, &chart).await.unwrap();
    }
    (ns, chart)
}

async fn phase(ns: &str, phase: &str, extra: &[(&str, &str)]) -> Run {
    let mut env = env_for(ns, phase);
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    run_bin(&control_plane().kubeconfig(), env).await
}

async fn phase_ok(ns: &str, name: &str) -> Run {
    let run = phase(ns, name, &[]).await;
    assert_eq!(run.code, 0, "{name}: {run:?}");
    run
}

/// `post` started now, in the background.
fn post_in_background(ns: &str) -> tokio::task::JoinHandle<Run> {
    let ns = ns.to_string();
    tokio::spawn(async move { phase(&ns, "post", &[]).await })
}

/// A `post` started in the background is still waiting.
async fn still_waiting(post: &tokio::task::JoinHandle<Run>) {
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        !post.is_finished(),
        "post must wait for Harvester's cleanup"
    );
}

fn pruned(mut v: Value) -> Value {
    fn prune(v: &mut Value) {
        if let Value::Object(m) = v {
            m.values_mut().for_each(prune);
            m.retain(|_, c| !matches!(c, Value::Object(x) if x.is_empty()));
        }
    }
    prune(&mut v);
    v
}

fn owners_of(obj: &Value, path: &[&str]) -> Vec<String> {
    owners(obj, path)
        .into_iter()
        .map(|o| format!("{}/{}", o.manager, o.operation))
        .collect()
}

fn nothing_of_ours(obj: &Value, what: &str) {
    assert_eq!(
        claims_of_ours(obj),
        Vec::<Value>::new(),
        "{what}: a claim of ours"
    );
    let ours: Vec<&String> = obj["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flat_map(|a| a.keys())
        .filter(|k| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    assert!(ours.is_empty(), "{what}: records of ours left: {ours:?}");
}

/// The end state of the guarded namespace is the control's: the KubeVirt CR exactly
/// (`managedFields` included); the ManagedChart's labels, annotations and spec (an empty map
/// that Harvester's delete of a key leaves behind aside: the guard's `pre` made Harvester skip
/// that write) and the owners of the fields the guard writes; nothing of ours; and Helm's next
/// deploy goes through without conflict on both.
async fn same_as_without_the_guard(
    client: &Client,
    control: &str,
    guarded: &str,
    chart: &std::path::Path,
) {
    for ns in [control, guarded] {
        fleet_deploy(client, ns, chart)
            .await
            .unwrap_or_else(|e| panic!("Helm's next deploy in {ns}: {e}"));
    }
    let (kc, kg) = (
        get(client, "KubeVirt", control, "kubevirt").await,
        get(client, "KubeVirt", guarded, "kubevirt").await,
    );
    assert_eq!(
        as_compared(&kg, guarded),
        as_compared(&kc, control),
        "KubeVirt: guarded (left) vs without the guard"
    );
    let (mc, mg) = (
        get(client, "ManagedChart", control, "harvester").await,
        get(client, "ManagedChart", guarded, "harvester").await,
    );
    let seen = |o: &Value, ns: &str| {
        let shown = json!({"labels": o["metadata"]["labels"], "annotations": o["metadata"]["annotations"],
                           "spec": pruned(o["spec"].clone()),
                           "values owners": owners_of(o, VALUES_PATH),
                           "comparePatches owners": owners_of(o, COMPARE_PATH)});
        serde_json::to_string_pretty(&shown)
            .unwrap()
            .replace(ns, "NS")
    };
    assert_eq!(
        seen(&mg, guarded),
        seen(&mc, control),
        "ManagedChart: guarded (left) vs without"
    );
    nothing_of_ours(&kg, "KubeVirt");
    nothing_of_ours(&mg, "ManagedChart");
}

/// v1.7.2+ (the backup flavour), `pre` before the upgrade, `post` before the upgrade's end,
/// before its cleanup, and after it. Harvester backs up pre's `[]`; `post` waits for the cleanup
/// (which writes that `[]` back) and restores after it. Without the wait, updates stay off for
/// good (the control case at the end shows it).
#[tokio::test]
async fn backup_flavour_post_before_during_and_after_the_cleanup_restores_after_it() {
    let client = admin().await;
    for at in [
        PostAt::BeforeTheEnd,
        PostAt::BeforeTheCleanup,
        PostAt::AfterTheCleanup,
    ] {
        let (control, chart) = install(&client, "hv-control", None).await;
        let (guarded, _) = install(&client, "hv-guarded", None).await;
        phase_ok(&guarded, "pre").await;
        let mut posts = Vec::new();
        for ns in [&control, &guarded] {
            let g = ns == &guarded;
            let up = Upgrade::start(&client, ns, "hvst-upgrade-1", "v1.7.3").await;
            up.backup_and_suspend(&client, &chart).await;
            if g {
                assert_eq!(up.backup(&client).await.as_deref(), Some("[]"), "{at:?}");
                let status = phase_ok(ns, "status").await;
                assert!(
                    status.stdout.contains("backed up pre's [] as the original"),
                    "{}",
                    status.stdout
                );
            }
            if g && at == PostAt::BeforeTheEnd {
                posts.push(post_in_background(ns));
                still_waiting(&posts[0]).await;
            }
            up.upgrade_chart(&client, &chart).await.unwrap();
            assert_eq!(kubevirt_methods(&client, ns).await, json!([]));
            up.finish(&client, true).await;
            if g && at == PostAt::BeforeTheCleanup {
                posts.push(post_in_background(ns));
                still_waiting(&posts[0]).await;
            }
            up.cleanup_values(&client).await;
            if g && at == PostAt::AfterTheCleanup {
                posts.push(post_in_background(ns));
            }
        }
        let post = posts.pop().unwrap().await.unwrap();
        assert_eq!(post.code, 0, "{at:?}: {post:?}");
        if at != PostAt::AfterTheCleanup {
            assert!(post.stderr.contains("waited"), "{at:?}: {}", post.stderr);
        }
        assert_eq!(
            kubevirt_methods(&client, &guarded).await,
            json!(["LiveMigrate"])
        );
        same_as_without_the_guard(&client, &control, &guarded, &chart).await;
    }
}

/// A cleanup that never ends: `post` fails after HARVESTER_CLEANUP_WAIT_SECONDS with exit 7, a
/// one-line message that names the Upgrade and what to do, and writes nothing (0: at once).
#[tokio::test]
async fn post_waiting_on_a_cleanup_that_never_ends_fails_with_exit_7_and_writes_nothing() {
    let client = admin().await;
    let (ns, chart) = install(&client, "hv-stuck", None).await;
    phase_ok(&ns, "pre").await;
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-stuck", "v1.8.1").await;
    up.backup_and_suspend(&client, &chart).await;
    let before = (
        get(&client, "KubeVirt", &ns, "kubevirt").await,
        get(&client, "ManagedChart", &ns, "harvester").await,
    );
    let started = std::time::Instant::now();
    let run = phase(&ns, "post", &[("HARVESTER_CLEANUP_WAIT_SECONDS", "3")]).await;
    assert_eq!(run.code, i32::from(exit::CLEANUP_PENDING), "{run:?}");
    assert!(started.elapsed().as_secs_f64() >= 3.0);
    let error = run.summary.as_ref().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert_contains_all(
        &error,
        &[
            "hvst-upgrade-stuck",
            "waited 3s",
            "nothing was written",
            "harvesterhci.io/upgradeCleanup=Succeeded",
            "HARVESTER_CLEANUP_WAIT_SECONDS",
        ],
    );
    assert!(!error.contains('\n'));
    let after = (
        get(&client, "KubeVirt", &ns, "kubevirt").await,
        get(&client, "ManagedChart", &ns, "harvester").await,
    );
    assert_eq!(
        after.0["metadata"]["resourceVersion"],
        before.0["metadata"]["resourceVersion"]
    );
    assert_eq!(
        after.1["metadata"]["resourceVersion"],
        before.1["metadata"]["resourceVersion"]
    );
    // Zero: no wait at all, and the message still says what is under way (the chart's
    // uninstall hook runs post so).
    let run = phase(&ns, "post", &[("HARVESTER_CLEANUP_WAIT_SECONDS", "0")]).await;
    assert_eq!(run.code, i32::from(exit::CLEANUP_PENDING), "{run:?}");
    let error = run.summary.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(error.contains("waited 0s: "), "{error}");
    assert!(!error.contains("nothing read yet"), "{error}");
    assert!(error.contains("hvst-upgrade-stuck"), "{error}");
}

/// `pre` after Harvester's upgrade had already suspended (backup `null`, values `[]`, the CR
/// `[]` rendered by Fleet): `pre` writes nothing and says that Harvester's upgrade handles it;
/// Harvester's cleanup restores; `post` has nothing to do. Both objects end as without the guard.
#[tokio::test]
async fn pre_after_harvesters_backup_leaves_it_to_harvester() {
    let client = admin().await;
    let (control, chart) = install(&client, "hv-late-c", None).await;
    let (guarded, _) = install(&client, "hv-late-g", None).await;
    for ns in [&control, &guarded] {
        let g = ns == &guarded;
        let up = Upgrade::start(&client, ns, "hvst-upgrade-1", "v1.8.1").await;
        up.backup_and_suspend(&client, &chart).await;
        assert_eq!(up.backup(&client).await.as_deref(), Some("null"));
        assert_eq!(kubevirt_methods(&client, ns).await, json!([]));
        if g {
            let before = get(&client, "KubeVirt", ns, "kubevirt").await;
            let run = phase_ok(ns, "pre").await;
            assert!(
                run.warnings().iter().any(|w| w.starts_with(HARVESTER_SUSPENDED)
                    && w.contains("pre writes nothing")),
                "{run:?}"
            );
            let after = get(&client, "KubeVirt", ns, "kubevirt").await;
            assert_eq!(
                after["metadata"]["resourceVersion"],
                before["metadata"]["resourceVersion"]
            );
            let status = phase_ok(ns, "status").await;
            assert!(
                status.stdout.contains("suspended the updates itself"),
                "{}",
                status.stdout
            );
        }
        up.upgrade_chart(&client, &chart).await.unwrap();
        up.finish(&client, true).await;
        up.cleanup_values(&client).await;
        if g {
            phase_ok(ns, "post").await;
        }
    }
    same_as_without_the_guard(&client, &control, &guarded, &chart).await;
    assert_eq!(
        kubevirt_methods(&client, &guarded).await,
        json!(["LiveMigrate"])
    );
}

/// A failed upgrade before the backup: the cleanup's legacy branch writes a hard-coded
/// `[LiveMigrate]` into the values, where pre's `[]` override is (without the guard the key is
/// absent, and nothing is written). Fleet's deploy then conflicts with pre's claim on the CR until
/// `post`, which puts the recorded originals back on both objects. With an administrator's
/// `[LiveMigrate, Evict]` the legacy branch overwrites it in both cases: `post` puts it back.
#[tokio::test]
async fn a_failed_upgrade_before_the_backup_gets_the_recorded_original_back() {
    let client = admin().await;
    for admin_choice in [None, Some(json!(["LiveMigrate", "Evict"]))] {
        let (control, chart) = install(&client, "hv-fail-c", admin_choice.clone()).await;
        let (guarded, _) = install(&client, "hv-fail-g", admin_choice.clone()).await;
        let before = kubevirt_methods(&client, &guarded).await;
        phase_ok(&guarded, "pre").await;
        for ns in [&control, &guarded] {
            let up = Upgrade::start(&client, ns, "hvst-upgrade-1", "v1.7.2").await;
            up.finish(&client, false).await;
            up.cleanup_values(&client).await;
        }
        if admin_choice.is_none() {
            let e = fleet_deploy(&client, &guarded, &chart).await.unwrap_err();
            assert!(
                e.contains("conflict") && e.contains("workload-update-guard"),
                "{e}"
            );
        }
        let post = phase_ok(&guarded, "post").await;
        assert_eq!(kubevirt_methods(&client, &guarded).await, before);
        fleet_deploy(&client, &guarded, &chart).await.unwrap();
        assert_eq!(kubevirt_methods(&client, &guarded).await, before);
        let mc = get(&client, "ManagedChart", &guarded, "harvester").await;
        assert_eq!(
            mc.pointer(&format!("/{}", VALUES_PATH.join("/"))).cloned(),
            admin_choice
        );
        match &admin_choice {
            None => same_as_without_the_guard(&client, &control, &guarded, &chart).await,
            Some(_) => {
                // Without the guard, Harvester's legacy branch destroyed the setting.
                fleet_deploy(&client, &control, &chart).await.unwrap();
                assert_eq!(
                    kubevirt_methods(&client, &control).await,
                    json!(["LiveMigrate"])
                );
                assert!(post.stderr.contains("hard-coded"), "{}", post.stderr);
                nothing_of_ours(&mc, "ManagedChart");
            }
        }
    }
}

/// A failed upgrade after the backup, and an Upgrade deleted mid-way (its OnRemove runs the
/// cleanup): `post`, started before, waits until the cleanup (or the Upgrade) is gone.
#[tokio::test]
async fn a_failed_or_deleted_upgrade_after_the_backup_is_waited_for() {
    let client = admin().await;
    for deleted in [false, true] {
        let (control, chart) = install(&client, "hv-del-c", None).await;
        let (guarded, _) = install(&client, "hv-del-g", None).await;
        phase_ok(&guarded, "pre").await;
        let mut post = None;
        for ns in [&control, &guarded] {
            let up = Upgrade::start(&client, ns, "hvst-upgrade-1", "v1.9.0").await;
            up.backup_and_suspend(&client, &chart).await;
            if ns == &guarded {
                let p = post_in_background(ns);
                still_waiting(&p).await;
                post = Some(p);
            }
            if deleted {
                up.delete_with_cleanup(&client).await;
            } else {
                up.finish(&client, false).await;
                up.cleanup_values(&client).await;
            }
        }
        let post = post.unwrap().await.unwrap();
        post.ok();
        same_as_without_the_guard(&client, &control, &guarded, &chart).await;
    }
}

/// Two upgrades in a row, each with pre before it and post after its cleanup: the second
/// Upgrade becomes the latest, the first's end label does not count for it.
#[tokio::test]
async fn two_upgrades_in_a_row() {
    let client = admin().await;
    let (control, chart) = install(&client, "hv-two-c", None).await;
    let (guarded, _) = install(&client, "hv-two-g", None).await;
    for (name, version) in [("hvst-upgrade-1", "v1.7.3"), ("hvst-upgrade-2", "v1.8.1")] {
        phase_ok(&guarded, "pre").await;
        let mut post = None;
        for ns in [&control, &guarded] {
            let up = Upgrade::start(&client, ns, name, version).await;
            up.backup_and_suspend(&client, &chart).await;
            if ns == &guarded {
                let p = post_in_background(ns);
                still_waiting(&p).await;
                post = Some(p);
            }
            up.upgrade_chart(&client, &chart).await.unwrap();
            up.finish(&client, true).await;
            up.cleanup_values(&client).await;
        }
        assert_eq!(post.unwrap().await.unwrap().code, 0);
        same_as_without_the_guard(&client, &control, &guarded, &chart).await;
    }
}

/// v1.8.0: the CR merge-patched to `[]` (kubectl-patch), the pointer added; at the cleanup a PUT
/// of a hard-coded `[LiveMigrate]` and the pointer removed. With the chart's default, the CR is
/// back at the original when `post` runs: taken as restored, the ManagedChart restored exactly,
/// and the Update claim of Harvester's PUT dropped, the field given back to Helm (without the
/// guard the claim stays). With an administrator's `[LiveMigrate, Evict]`, the PUT destroys it:
/// `post` puts it back. Either way the field is the chart's alone after `post`, where without the
/// guard Fleet's deploy of another value conflicts with `harvester`.
#[tokio::test]
async fn v180_hard_coded_restore_is_recognized_and_a_destroyed_setting_put_back() {
    let client = admin().await;
    for admin_choice in [None, Some(json!(["LiveMigrate", "Evict"]))] {
        let (control, chart) = install(&client, "hv-180-c", admin_choice.clone()).await;
        let (guarded, _) = install(&client, "hv-180-g", admin_choice.clone()).await;
        let before = kubevirt_methods(&client, &guarded).await;
        phase_ok(&guarded, "pre").await;
        let mut post = None;
        for ns in [&control, &guarded] {
            let up = Upgrade::start(&client, ns, "hvst-upgrade-1", "v1.8.0").await;
            up.v180_suspend(&client).await;
            assert_eq!(kubevirt_methods(&client, ns).await, json!([]));
            if ns == &guarded {
                let p = post_in_background(ns);
                still_waiting(&p).await;
                post = Some(p);
            }
            up.finish(&client, true).await;
            up.v180_cleanup(&client).await;
        }
        let post = post.unwrap().await.unwrap();
        post.ok();
        assert_eq!(kubevirt_methods(&client, &guarded).await, before);
        assert!(
            !post
                .warnings()
                .iter()
                .any(|w| w.starts_with(UPDATE_CLAIM_LEFT)),
            "no claim left to name: {post:?}"
        );
        fleet_deploy(&client, &guarded, &chart).await.unwrap();
        let kv = get(&client, "KubeVirt", &guarded, "kubevirt").await;
        assert_eq!(owners_of(&kv, METHODS_PATH), ["helm/Apply"]);
        nothing_of_ours(&kv, "KubeVirt");
        nothing_of_ours(
            &get(&client, "ManagedChart", &guarded, "harvester").await,
            "ManagedChart",
        );
        let deployed = fleet_deploy(&client, &control, &chart).await;
        match &admin_choice {
            None => {
                deployed.unwrap();
                let kv = get(&client, "KubeVirt", &control, "kubevirt").await;
                let owners = owners_of(&kv, METHODS_PATH);
                assert!(owners.iter().any(|o| o == "harvester/Update"), "{owners:?}");
            }
            Some(_) => {
                let e = deployed.unwrap_err();
                assert!(e.contains("conflict") && e.contains("harvester"), "{e}");
            }
        }
    }
}

/// `pre` run during a v1.8.0 upgrade, after its patch (the guard come late): that `[]` is
/// v1.8.0's, never an original. `pre` records what Fleet renders and suspends through the
/// values, which lets the new chart's deploy past v1.8.0's claim, where the control's deploy
/// stops on it (harvester#10677). After v1.8.0's cleanup `post` leaves `[LiveMigrate]`, the field
/// the chart's alone; the control keeps v1.8.0's claim, and a chart with another default
/// conflicts there.
#[tokio::test]
async fn pre_after_v180s_patch_lets_the_chart_deploy() {
    let client = admin().await;
    let (control, chart) = install(&client, "hv-180l-c", None).await;
    let (guarded, _) = install(&client, "hv-180l-g", None).await;
    for ns in [&control, &guarded] {
        let up = Upgrade::start(&client, ns, "hvst-upgrade-1", "v1.8.0").await;
        up.v180_suspend(&client).await;
        if ns == &guarded {
            let run = phase_ok(ns, "pre").await;
            assert!(
                run.warnings()
                    .iter()
                    .any(|w| w.starts_with(SUSPENDED_BY_ANOTHER)),
                "{run:?}"
            );
        }
        // The new release's chart, deployed by Fleet in the apply-manifests job.
        let deployed = fleet_deploy(&client, ns, &chart).await;
        match deployed {
            Ok(()) => assert_eq!(ns, &guarded, "the control deployed past v1.8.0's claim"),
            Err(e) => {
                assert_eq!(ns, &control, "{e}");
                assert!(e.contains("conflict") && e.contains("kubectl-patch"), "{e}");
            }
        }
        up.finish(&client, true).await;
        up.v180_cleanup(&client).await;
        if ns == &guarded {
            phase_ok(ns, "post").await;
        }
    }
    assert_eq!(kubevirt_methods(&client, &guarded).await, live_migrate());
    fleet_deploy(&client, &guarded, &chart)
        .await
        .expect("Fleet's deploy after the values override went");
    assert_eq!(methods_owners(&client, &guarded).await, ["helm/Apply"]);
    let later = chart_version(&json!(["LiveMigrate", "Evict"]));
    fleet_deploy(&client, &guarded, &later)
        .await
        .expect("a chart with another default");
    let e = fleet_deploy(&client, &control, &later).await.unwrap_err();
    assert!(e.contains("conflict") && e.contains("harvester"), "{e}");
}

/// The upgrade-manager add-on: PreRun merge-patches the CR to `[]` and adds the pointer;
/// Finalize merge-patches a hard-coded `[LiveMigrate]` and removes the pointer. `post` after
/// Finalize: restored exactly (default), or the administrator's setting put back; either way
/// the field is the chart's alone after it, where the control keeps the add-on's claim.
#[tokio::test]
async fn addon_prerun_and_finalize() {
    let client = admin().await;
    for admin_choice in [None, Some(json!(["LiveMigrate", "Evict"]))] {
        let (control, chart) = install(&client, "hv-addon-c", admin_choice.clone()).await;
        let (guarded, _) = install(&client, "hv-addon-g", admin_choice.clone()).await;
        let before = kubevirt_methods(&client, &guarded).await;
        phase_ok(&guarded, "pre").await;
        for ns in [&control, &guarded] {
            addon_prerun(&client, ns).await;
            assert_eq!(kubevirt_methods(&client, ns).await, json!([]));
            addon_finalize(&client, ns).await;
        }
        let post = phase_ok(&guarded, "post").await;
        assert_eq!(
            kubevirt_methods(&client, &guarded).await,
            before,
            "{post:?}"
        );
        // The guarded CR is the chart's alone, whatever the methods: the add-on's claim went
        // with the restore (harvester#10899).
        fleet_deploy(&client, &guarded, &chart).await.unwrap();
        let kv = get(&client, "KubeVirt", &guarded, "kubevirt").await;
        assert_eq!(owners_of(&kv, METHODS_PATH), ["helm/Apply"]);
        nothing_of_ours(&kv, "KubeVirt");
        // The control keeps it: the same value deploys there, another conflicts.
        let deployed = fleet_deploy(&client, &control, &chart).await;
        match &admin_choice {
            None => {
                deployed.unwrap();
                let kv = get(&client, "KubeVirt", &control, "kubevirt").await;
                let owners = owners_of(&kv, METHODS_PATH);
                assert!(
                    owners.iter().any(|o| o == "upgrade-toolkit/Update"),
                    "{owners:?}"
                );
            }
            Some(_) => {
                let e = deployed.unwrap_err();
                assert!(
                    e.contains("conflict") && e.contains("upgrade-toolkit"),
                    "{e}"
                );
            }
        }
    }
}

/// The releases on offer (`Version` objects) that suspend the methods themselves: `pre` and
/// `status` say so.
#[tokio::test]
async fn pre_and_status_say_when_the_coming_upgrade_handles_it_itself() {
    let client = admin().await;
    let (ns, _) = install(&client, "hv-offer", None).await;
    offer_version(&client, &ns, "v1.7.1").await;
    offer_version(&client, &ns, "v1.8.1").await;
    // The release the cluster runs (the `server-version` setting) is not a coming upgrade.
    offer_version(&client, &ns, "v1.7.3").await;
    server_version(&client, "v1.7.3").await;
    let status = phase_ok(&ns, "status").await;
    assert!(
        status
            .stdout
            .contains("offer           v1.8.1 (these suspend the methods themselves)"),
        "{}",
        status.stdout
    );
    // The one release on offer restores what is there: pre is not needed, and says so; asked
    // to, it suspends anyway (`PRE_EVEN_IF_NOT_NEEDED`).
    let aside = phase_ok(&ns, "pre").await;
    let said = aside.summary.as_ref().unwrap().to_string();
    assert!(said.contains("pre is not needed"), "{said}");
    assert!(
        status.stdout.contains("pre is not needed"),
        "{}",
        status.stdout
    );
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    let pre = phase(&ns, "pre", &[("PRE_EVEN_IF_NOT_NEEDED", "true")]).await;
    pre.ok();
    let actions = pre.summary.as_ref().unwrap().to_string();
    assert!(
        actions.contains(
            "the cluster offers upgrades to v1.8.1: Harvester v1.8.1 suspends the methods itself"
        ),
        "{actions}"
    );
    assert!(pre.stderr.contains("hot-plug"), "{}", pre.stderr);
    phase_ok(&ns, "post").await;
}

/// The armed `post` beside v1.7.3's own handling (backup and restore): armed right
/// after `pre`, it waits through the upgrade and past its end until Harvester's cleanup has
/// written its backup back, then restores within 5 s of that cleanup; both objects end as
/// without the guard.
#[tokio::test]
async fn armed_post_waits_for_the_upgrade_and_its_cleanup_then_restores() {
    let client = admin().await;
    let (control, chart) = install(&client, "hv-arm-c", None).await;
    let (guarded, _) = install(&client, "hv-arm-g", None).await;
    phase_ok(&guarded, "pre").await;
    let armed = {
        let ns = guarded.clone();
        tokio::spawn(async move {
            phase(&ns, "post", &[("ARM", "true"), ("ARM_POLL_SECONDS", "1")]).await
        })
    };
    let mut ended = None;
    for ns in [&control, &guarded] {
        let g = ns == &guarded;
        let up = Upgrade::start(&client, ns, "hvst-upgrade-1", "v1.7.3").await;
        up.backup_and_suspend(&client, &chart).await;
        up.set_state(&client, "UpgradingSystemServices").await;
        up.upgrade_chart(&client, &chart).await.unwrap();
        up.finish(&client, true).await;
        if g {
            still_waiting(&armed).await;
            assert_eq!(kubevirt_methods(&client, ns).await, json!([]));
        }
        up.cleanup_values(&client).await;
        if g {
            ended = Some(std::time::Instant::now());
        }
    }
    let run = tokio::time::timeout(std::time::Duration::from_secs(5), armed)
        .await
        .expect("the armed post restores within 5 s of the cleanup")
        .unwrap();
    run.ok();
    assert!(ended.unwrap().elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(
        kubevirt_methods(&client, &guarded).await,
        json!(["LiveMigrate"])
    );
    same_as_without_the_guard(&client, &control, &guarded, &chart).await;
}
