//! The guard's promise against KubeVirt's own workload updater (`support::kubevirt`: the real
//! virt-controller of `$KUBEVIRT_VERSION`, KubeVirt's CRDs, running VMIs): no workload-update
//! migration and no eviction while suspended, through a KubeVirt upgrade that outdates every
//! VMI; after the restore, the wave at KubeVirt's own pace, with the administrator's settings.
//! A control without the guard shows that the same upgrade does migrate (else these tests would
//! prove nothing). Each test has its own control plane: KubeVirt takes one CR per cluster.
//!
//! `hack/test.sh` runs them once per KubeVirt version (`KUBEVIRT_VERSION`, `updater::`); the
//! integration suite's other runs skip them.

mod whole_upgrade;

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};

use crate::monitoring::scrape;
use crate::resident::Guard;
use crate::support::harvester::Upgrade;
use crate::support::kubevirt::{KubeVirtCluster, NS, VM_NS, VmiSpec, migration_api};
use crate::support::node_upgrades::upgrade_nodes;
use crate::support::*;

/// How long a suspension is watched for migrations and evictions: a whole 30 s requeue of the
/// updater, and its sync on every change of the CR.
const HELD: Duration = Duration::from_secs(30);

fn strategy(methods: Value) -> Value {
    json!({"workloadUpdateMethods": methods, "batchEvictionSize": 2, "batchEvictionInterval": "10s"})
}

async fn phase(kv: &KubeVirtCluster, phase: &str) -> Run {
    let run = run_bin(&kv.cp.kubeconfig(), env_for(NS, phase)).await;
    assert_eq!(run.code, 0, "{phase}: {run:?}");
    run
}

/// The control: without the guard, KubeVirt's upgrade live-migrates every running VM (its
/// `kubevirt-workload-update-*` migrations), `parallelMigrationsPerCluster` in its first pass.
#[tokio::test]
async fn without_the_guard_a_kubevirt_upgrade_migrates_every_vm() {
    let mut kv = KubeVirtCluster::up(3, strategy(json!(["LiveMigrate"]))).await;
    let vmis = kv.start_vmis(&[VmiSpec::default(); 8]).await;
    kv.wait_outdated(0, Duration::from_secs(60)).await;
    assert!(
        kv.workload_update_migrations().await.is_empty(),
        "none before the upgrade"
    );
    kv.upgrade_kubevirt().await;
    let upgraded = Instant::now();
    let first = kv
        .first_migration("the first workload-update migration")
        .await;
    let first_pass = kv.workload_update_migrations().await.len();
    let all = kv
        .wait_migrations("every VM migrated", Duration::from_secs(90), |m| {
            m.len() >= vmis.len()
        })
        .await;
    eprintln!(
        "updater {}: without the guard, the first migration {first:?} after the upgrade, {first_pass} \
         at first, all {} after {:?}",
        crate::support::kubevirt::version(),
        vmis.len(),
        upgraded.elapsed().max(all)
    );
    // No bound on the first look: the nodes' part completes each migration in 1 s, so a loaded
    // machine can read the updater's second pass with its first (7 of 8 were seen). Each VM
    // migrated once is what holds.
    assert_eq!(kv.workload_update_migrations().await, sorted(vmis));
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The Jobs: `pre` before the KubeVirt upgrade; every VMI outdated and no migration or eviction
/// for 30 s; `post`: the methods back exactly, and the wave (every VM once).
#[tokio::test]
async fn pre_holds_every_migration_through_the_upgrade_and_post_lets_the_wave_go() {
    let mut kv = KubeVirtCluster::up(3, strategy(json!(["LiveMigrate"]))).await;
    let vmis = kv.start_vmis(&[VmiSpec::default(); 8]).await;
    kv.wait_outdated(0, Duration::from_secs(60)).await;
    phase(&kv, "pre").await;
    assert_eq!(kubevirt_methods(&kv.client, NS).await, json!([]));
    kv.upgrade_kubevirt().await;
    kv.wait_outdated(vmis.len() as i64, Duration::from_secs(60))
        .await;
    kv.none_for(HELD).await;
    let status = run_bin(&kv.cp.kubeconfig(), env_for(NS, "status")).await;
    assert!(
        status.stdout.contains(&format!(
            "{} (updates off: each node's drain moves its VMs to the new virt-launcher; what the drains leave is migrated at the restore)",
            vmis.len()
        )),
        "status says what the suspension holds back: {}",
        status.stdout
    );
    let restored = Instant::now();
    phase(&kv, "post").await;
    assert_eq!(
        kubevirt_methods(&kv.client, NS).await,
        json!(["LiveMigrate"])
    );
    let first = kv
        .wait_migrations("the wave after post", Duration::from_secs(60), |m| {
            !m.is_empty()
        })
        .await;
    let all = kv
        .wait_migrations(
            "every VM migrated after post",
            Duration::from_secs(90),
            |m| m.len() >= vmis.len(),
        )
        .await;
    eprintln!(
        "updater {}: after post, the first migration {first:?}, all {} after {:?}",
        crate::support::kubevirt::version(),
        vmis.len(),
        restored.elapsed().max(all)
    );
    assert_eq!(kv.workload_update_migrations().await, sorted(vmis));
    assert!(kv.evicted().await.is_empty());
}

/// `[LiveMigrate, Evict]` and `[Evict]`, with VMIs that cannot migrate: nothing evicted while
/// suspended; after the restore, evictions in KubeVirt's batches (`batchEvictionSize` 2 every
/// `batchEvictionInterval` 10 s), the administrator's settings back exactly.
#[tokio::test]
async fn evict_methods_evict_nothing_while_suspended_and_in_batches_after() {
    for methods_before in [json!(["LiveMigrate", "Evict"]), json!(["Evict"])] {
        let mut kv = KubeVirtCluster::up(2, strategy(methods_before.clone())).await;
        let mut specs = vec![VmiSpec::default(); 2];
        specs.extend(
            [VmiSpec {
                not_migratable: true,
                ..Default::default()
            }; 4],
        );
        let vmis = kv.start_vmis(&specs).await;
        kv.wait_outdated(0, Duration::from_secs(60)).await;
        phase(&kv, "pre").await;
        kv.upgrade_kubevirt().await;
        kv.wait_outdated(vmis.len() as i64, Duration::from_secs(60))
            .await;
        kv.none_for(Duration::from_secs(15)).await;
        phase(&kv, "post").await;
        let cr = get(&kv.client, "KubeVirt", NS, "kubevirt").await;
        assert_eq!(
            cr["spec"]["workloadUpdateStrategy"],
            strategy(methods_before.clone()),
            "exactly the administrator's settings"
        );
        // The first batch at once, the second one interval later.
        kv.wait_evicted(1, Duration::from_secs(60)).await;
        let first_batch = kv.evicted().await.len();
        assert!(first_batch <= 2, "{methods_before}: batch of {first_batch}");
        let second = kv.wait_evicted(4, Duration::from_secs(60)).await;
        assert!(
            second >= Duration::from_secs(8),
            "{methods_before}: a second batch after the interval, not {second:?}"
        );
        if methods_before == json!(["Evict"]) {
            // `Evict` alone evicts every outdated VM, the migratable ones too (hazard 1).
            kv.wait_evicted(vmis.len(), Duration::from_secs(60)).await;
        } else {
            kv.wait_migrations(
                "the migratable VMs migrated",
                Duration::from_secs(60),
                |m| m.len() == 2,
            )
            .await;
        }
        eprintln!(
            "updater {}: {methods_before}: after post, {first_batch} evicted at once, 4 after {second:?}",
            crate::support::kubevirt::version(),
        );
    }
}

/// A VMI with a pending CPU hot-plug needs a migration even when up to date: none while
/// suspended, its migration after the restore.
#[tokio::test]
async fn a_pending_hotplug_waits_for_the_restore() {
    let kv = KubeVirtCluster::up(2, strategy(json!(["LiveMigrate"]))).await;
    phase(&kv, "pre").await;
    let vmis = kv
        .start_vmis(&[
            VmiSpec {
                hotplug: true,
                ..Default::default()
            },
            VmiSpec::default(),
        ])
        .await;
    kv.wait_outdated(1, Duration::from_secs(60)).await;
    kv.none_for(Duration::from_secs(15)).await;
    phase(&kv, "post").await;
    kv.wait_migrations("the hot-plug's migration", Duration::from_secs(60), |m| {
        m == [vmis[0].clone()]
    })
    .await;
}

/// Installed once: the resident guard through a modelled path-A upgrade (to v1.7.1, which does
/// nothing itself), KubeVirt upgraded at `UpgradingSystemServices`: no workload-update migration
/// until the upgrade has ended (the guard drained and replaced, the API server restarted, in
/// between), then the wave.
#[tokio::test]
async fn the_resident_guard_holds_the_real_updater_through_a_path_a_upgrade() {
    let mut kv = KubeVirtCluster::up(2, strategy(json!(["LiveMigrate"]))).await;
    let vmis = kv.start_vmis(&[VmiSpec::default(); 4]).await;
    kv.wait_outdated(0, Duration::from_secs(60)).await;
    let guard = Guard::start(&kv.cp.kubeconfig(), NS, 0);
    let up = Upgrade::start(&kv.client, NS, "hvst-upgrade-kv", "v1.7.1").await;
    let start = Instant::now();
    while kubevirt_methods(&kv.client, NS).await != json!([]) {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", guard.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The guard's pod drained away while the upgrade runs; another takes its place.
    drop(guard);
    let port = free_port();
    let guard = Guard::spawn_with(
        &kv.cp.kubeconfig(),
        NS,
        1,
        &[("METRICS_PORT", &port.to_string())],
    );
    guard.wait_for("under way", Duration::from_secs(20));
    // The API server restarts (10 s away) before KubeVirt's upgrade: the suspension stands, and
    // the rollout then starts virt-controller anew.
    let version = kv.cp.server_version();
    kv.cp.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(10)).await;
    kv.cp.start_apiserver(&version);
    for state in ["PreparingNodes", "UpgradingSystemServices"] {
        up.set_state(&kv.client, state).await;
    }
    kv.upgrade_kubevirt().await;
    kv.wait_outdated(vmis.len() as i64, Duration::from_secs(60))
        .await;
    up.set_state(&kv.client, "UpgradingNodes").await;
    kv.none_for(Duration::from_secs(15)).await;
    // The metric reads KubeVirt's own count, which the guard's watch of the CR brought it.
    let scraped = scrape(port).expect("the guard's metrics answer");
    assert!(
        scraped.contains(&format!(
            "workload_update_guard_outdated_vmis {}",
            vmis.len()
        )),
        "{scraped}"
    );
    up.finish(&kv.client, true).await;
    let ended = Instant::now();
    let first = kv.first_migration("the wave after the upgrade's end").await;
    assert_eq!(
        kubevirt_methods(&kv.client, NS).await,
        json!(["LiveMigrate"]),
        "{}",
        guard.log()
    );
    kv.wait_migrations("every VM migrated", Duration::from_secs(90), |m| {
        m.len() >= vmis.len()
    })
    .await;
    // The record, begun by the first pod and gone on with by the second (moved mid-upgrade, the
    // API server restarted): no drains here, so the wave moved every VM after the restore and
    // the suspension saved nothing; the count is the objects'.
    let key = format!("Upgrade {NS}/{}", up.name);
    let record = complete_record(&kv.client, NS, &key, Duration::from_secs(60)).await;
    guard.wait_for("going on from the record kept", Duration::from_secs(1));
    let wave = kv.workload_update_migrations().await.len() as u64;
    assert_eq!(record["afterRestore"]["workloadUpdate"], wave, "{record:#}");
    assert_eq!(
        record["afterRestore"]["outdated"],
        vmis.len() as u64,
        "{record:#}"
    );
    assert_eq!(record["migrations"]["workloadUpdate"], 0, "{record:#}");
    assert_eq!(
        record["vms"]["runningAtStart"],
        vmis.len() as u64,
        "{record:#}"
    );
    assert_eq!(
        record["vms"]["outdatedMigratablePeak"],
        vmis.len() as u64,
        "{record:#}"
    );
    assert_eq!(record["suspendedBy"], "the guard", "{record:#}");
    assert_eq!(record["saved"], 0, "{record:#}");
    // Its gauges, as the loop kept them.
    let scraped = scrape(port).expect("the guard's metrics answer");
    for line in [
        format!("workload_update_guard_last_upgrade_migrations{{cause=\"after_restore\"}} {wave}"),
        "workload_update_guard_last_upgrade_saved_migrations 0".to_string(),
        "workload_update_guard_last_upgrade_shut_down_vms 0".to_string(),
    ] {
        assert!(scraped.contains(&line), "{line}: {scraped}");
    }
    eprintln!(
        "updater {}: resident guard: the first migration {first:?} after the upgrade's end ({:?})",
        crate::support::kubevirt::version(),
        ended.elapsed()
    );
}

/// The number of migrations whose phase is `phase`, as the objects say.
async fn migrations_in(kv: &KubeVirtCluster, phase: &str) -> usize {
    let api: Api<DynamicObject> = Api::namespaced_with(kv.client.clone(), VM_NS, &migration_api());
    let all = api.list(&ListParams::default()).await.unwrap().items;
    all.iter()
        .filter(|m| m.data["status"]["phase"] == phase)
        .count()
}

/// A CPU hot-plug made while updates are suspended waits for the restore, and KubeVirt's
/// updater migrates it then: the resident guard's record counts that migration as the wave after
/// the restore, and says the suspension saved nothing here (nothing was outdated). The record
/// stays open while that migration runs.
#[tokio::test]
async fn the_record_counts_a_hotplug_left_for_the_restore() {
    let kv = KubeVirtCluster::up(2, strategy(json!(["LiveMigrate"]))).await;
    let guard = Guard::start(&kv.cp.kubeconfig(), NS, 0);
    let up = Upgrade::start(&kv.client, NS, "hvst-upgrade-hotplug", "v1.7.1").await;
    methods_become(&kv.client, NS, &json!([]), Duration::from_secs(10)).await;
    let hotplug = VmiSpec {
        hotplug: true,
        ..Default::default()
    };
    let vmis = kv.start_vmis(&[hotplug, VmiSpec::default()]).await;
    kv.none_for(Duration::from_secs(15)).await;
    up.finish(&kv.client, true).await;
    kv.wait_migrations("the hot-plug's migration", Duration::from_secs(60), |m| {
        m == [vmis[0].clone()]
    })
    .await;
    // Kept while it runs (the record closes once the wave is over).
    let key = format!("Upgrade {NS}/{}", up.name);
    let wave = |r: &Value| r["afterRestore"]["workloadUpdate"] == 1;
    let record = record_where(&kv.client, NS, &key, Duration::from_secs(30), wave).await;
    assert_eq!(record["migrations"]["workloadUpdate"], 0, "{record:#}");
    assert_eq!(record["saved"], 0, "{record:#}");
    drop(guard);
}

/// A migration that fails on the nodes: KubeVirt's evacuation makes another, and the drain
/// waits for it (Harvester's pre-drain waits until the node is empty). The record counts both
/// evacuations and the failure, as the objects do, and no VM shut down.
#[tokio::test]
async fn the_record_counts_a_failed_migration_and_its_retry() {
    let kv = KubeVirtCluster::up_with(
        2,
        strategy(json!(["LiveMigrate"])),
        json!({"evictionStrategy": "LiveMigrate"}),
    )
    .await;
    let fails = VmiSpec {
        first_migration_fails: true,
        ..Default::default()
    };
    kv.start_vmis(&[fails, VmiSpec::default()]).await;
    kv.wait_outdated(0, Duration::from_secs(60)).await;
    let guard = Guard::start(&kv.cp.kubeconfig(), NS, 0);
    let up = Upgrade::start(&kv.client, NS, "hvst-upgrade-failed", "v1.7.1").await;
    methods_become(&kv.client, NS, &json!([]), Duration::from_secs(10)).await;
    up.set_state(&kv.client, "UpgradingNodes").await;
    let nodes = upgrade_nodes(&kv, None, Duration::from_secs(300)).await;
    assert!(nodes.iter().all(|n| n.shut_down.is_empty()), "{nodes:?}");
    up.finish(&kv.client, true).await;
    guard
        .restored(
            &kv.client,
            NS,
            &json!(["LiveMigrate"]),
            Duration::from_secs(10),
        )
        .await;
    let key = format!("Upgrade {NS}/{}", up.name);
    let record = complete_record(&kv.client, NS, &key, Duration::from_secs(60)).await;
    let (_, evacuations) = kv.migration_counts().await;
    assert_eq!(
        migrations_in(&kv, "Failed").await,
        1,
        "{}",
        kv.migration_report().await
    );
    assert_eq!(record["migrations"]["failed"], 1, "{record:#}");
    assert_eq!(
        record["migrations"]["evacuation"], evacuations as u64,
        "{record:#}"
    );
    assert_eq!(record["shutDown"]["total"], 0, "{record:#}");
}
