//! The whole upgrade, drains included, against KubeVirt's own controllers: virt-controller of
//! `$KUBEVIRT_VERSION` (its evacuation, migration, VMI and workload-update controllers decide
//! every migration), the nodes' part played by `support::virt_handler` (1 s a migration), Harvester's node
//! upgrades by `support::node_upgrades` (`upgrade_node.sh`'s pre-drain, one node at a time).
//!
//! What the guard saves in a real upgrade: every VM that lives through the node upgrades reaches
//! the new launcher at its node's drain (KubeVirt's evacuation renders the target pod with the
//! new launcher image), so the workload updater's wave would move each VM once more for nothing.
//! With the guard: no workload-update migration at all, and nothing outdated at the restore;
//! without it (the control, which must show the wave, else these tests prove nothing): the
//! wave, then the evacuations.
//!
//! `hack/test.sh` runs them once per KubeVirt version, with the other updater tests
//! (`updater::`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::resident::Guard;
use crate::support::harvester::Upgrade;
use crate::support::kubevirt::{KubeVirtCluster, LAUNCHER_AFTER, NS, VmiSpec, version};
use crate::support::node_upgrades::{NodeUpgrade, upgrade_nodes};
use crate::support::*;

/// How many VMIs (`WHOLE_UPGRADE_VMS`, default 6; `hack/bench.sh upgrade` runs 12 and 60).
fn vm_count() -> usize {
    std::env::var("WHOLE_UPGRADE_VMS")
        .ok()
        .map(|n| n.parse().expect("WHOLE_UPGRADE_VMS: a number of VMIs"))
        .unwrap_or(6)
}

/// A bound for KubeVirt's pace over `vms` VMIs, a generous one: a node can hold two thirds of
/// them by its turn, two at a time leave it (`parallelOutboundMigrationsPerNode`), and a loaded
/// machine was seen taking 5 s a migration.
fn pace(vms: usize) -> Duration {
    Duration::from_secs(120 + 8 * vms as u64)
}

fn strategy() -> Value {
    json!({"workloadUpdateMethods": ["LiveMigrate"]})
}

/// Harvester's VMs: `LiveMigrateIfPossible` in their own spec; the others take the CR's
/// `evictionStrategy: LiveMigrate`; one cannot live-migrate (Harvester shuts it down).
fn harvester_vms(n: usize) -> Vec<VmiSpec> {
    (0..n)
        .map(|i| VmiSpec {
            migrate_if_possible: i % 2 == 0,
            not_migratable: i == n - 1,
            ..Default::default()
        })
        .collect()
}

/// Three nodes, the CR's `evictionStrategy: LiveMigrate`, and `n` VMIs running on the old
/// launcher (none outdated).
async fn cluster(n: usize) -> (KubeVirtCluster, Vec<String>) {
    let kv =
        KubeVirtCluster::up_with(3, strategy(), json!({"evictionStrategy": "LiveMigrate"})).await;
    let vmis = kv.start_vmis(&harvester_vms(n)).await;
    kv.wait_outdated(0, Duration::from_secs(60)).await;
    (kv, vmis)
}

/// Every running VMI on the new launcher, as the VMI controller records it.
async fn all_on_the_new_launcher(kv: &KubeVirtCluster, running: usize) {
    let start = Instant::now();
    loop {
        let launchers = kv.launchers().await;
        let old: Vec<_> = launchers
            .iter()
            .filter(|(_, (image, _))| image != LAUNCHER_AFTER)
            .collect();
        if launchers.len() == running && old.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "every running VMI on {LAUNCHER_AFTER}: {launchers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The figures of one run, one line that `hack/bench/upgrade_report.py` reads: "whole upgrade
/// VERSION CASE: vms N running M workload_update W evacuation E restore R drains S,S,S
/// nodes_phase P outdated O,O,O".
fn said(
    case: &str,
    vms: usize,
    running: usize,
    nodes: &[NodeUpgrade],
    counts: (usize, usize),
    restore: usize,
    phase: Duration,
) {
    let drains: Vec<String> = nodes
        .iter()
        .map(|n| format!("{:.2}", n.drain.as_secs_f64()))
        .collect();
    let outdated: Vec<String> = nodes
        .iter()
        .map(|n| n.outdated_after.map_or("-".into(), |o| o.to_string()))
        .collect();
    eprintln!(
        "whole upgrade {} {case}: vms {vms} running {running} workload_update {} evacuation {} \
         restore {restore} drains {} nodes_phase {:.2} outdated {}",
        version(),
        counts.0,
        counts.1,
        drains.join(","),
        phase.as_secs_f64(),
        outdated.join(",")
    );
}

/// Installed once, through a path-A upgrade (to v1.7.1) with its node upgrades: no
/// workload-update migration from the Upgrade's creation to its end; the drains move every
/// migratable VM to the new launcher and the outdated count falls node by node; at the restore
/// nothing is outdated and the updater creates nothing.
#[tokio::test]
async fn the_resident_guard_through_a_whole_upgrade_leaves_each_vm_to_its_drain() {
    let (mut kv, vmis) = cluster(vm_count()).await;
    let migratable = vmis.len() - 1;
    // The operator's forecast before the upgrade, from the real VMIs.
    let status = run_bin(&kv.cp.kubeconfig(), env_for(NS, "status")).await;
    assert_contains_all(
        &status.stdout,
        &[
            &format!("running VMIs: {}", vmis.len()),
            "cannot live-migrate: 1 ",
            "waiting on a CPU or memory hot-plug: 0 ",
        ],
    );
    let guard = Guard::start(&kv.cp.kubeconfig(), NS, 0);
    let up = Upgrade::start(&kv.client, NS, "hvst-upgrade-whole", "v1.7.1").await;
    let mut hv = up.controller(&kv.client);
    hv.nodes = (0..kv.nodes).map(|i| format!("node-{i}")).collect();
    methods_become(&kv.client, NS, &json!([]), Duration::from_secs(10)).await;
    hv.up_to_nodes_prepared().await;
    let prepared = hv
        .nodes_prepared(Duration::from_secs(10), &Default::default())
        .await;
    assert!(prepared.passed.is_some(), "{prepared:?}");
    hv.apply_manifests().await;
    kv.upgrade_kubevirt().await;
    kv.wait_outdated(vmis.len() as i64, Duration::from_secs(60))
        .await;
    hv.system_services_upgraded(true).await;
    hv.upgrading_nodes().await;
    let phase = Instant::now();
    let nodes = upgrade_nodes(&kv, Some(&hv), pace(vmis.len())).await;
    let phase = phase.elapsed();
    let during = kv.migration_counts().await;
    assert_eq!(
        during.0, 0,
        "no workload-update migration during the upgrade"
    );
    assert!(
        during.1 >= migratable,
        "each migratable VM evacuated at least once: {during:?}"
    );
    let shut_down: Vec<&String> = nodes.iter().flat_map(|n| &n.shut_down).collect();
    assert_eq!(
        shut_down,
        [&vmis[vmis.len() - 1]],
        "the VM that cannot migrate, shut down"
    );
    let falls: Vec<i64> = nodes.iter().filter_map(|n| n.outdated_after).collect();
    assert!(
        falls.windows(2).all(|w| w[0] >= w[1]),
        "the outdated count falls node by node: {falls:?}"
    );
    all_on_the_new_launcher(&kv, migratable).await;
    kv.wait_outdated(0, Duration::from_secs(30)).await;
    // The last node's Succeeded completed the upgrade: updates back on, and the updater finds
    // nothing to move.
    guard
        .restored(
            &kv.client,
            NS,
            &json!(["LiveMigrate"]),
            Duration::from_secs(10),
        )
        .await;
    kv.none_for(Duration::from_secs(15)).await;
    let restore = kv.migration_counts().await.0;
    said(
        "guarded",
        vmis.len(),
        migratable,
        &nodes,
        during,
        restore,
        phase,
    );
    assert_eq!(kv.outdated().await, Some(0));
    hv.cleanup().await;
}

/// The control: the same upgrade with no guard. KubeVirt's upgrade starts the wave, which moves
/// every migratable VM (the system services' upgrade lasts minutes: the wave is over before the
/// first drain); then the drains move each of them again. The saving is the wave: one
/// migration per migratable VM.
#[tokio::test]
async fn without_the_guard_a_whole_upgrade_migrates_each_vm_once_more() {
    let (mut kv, vmis) = cluster(vm_count()).await;
    let migratable = vmis.len() - 1;
    kv.upgrade_kubevirt().await;
    let within = pace(vmis.len());
    kv.wait_migrations("the wave over every migratable VM", within, |m| {
        m.len() >= migratable
    })
    .await;
    // The wave done: only the VM that cannot migrate is left outdated.
    kv.wait_outdated(1, within).await;
    let phase = Instant::now();
    let nodes = upgrade_nodes(&kv, None, pace(vmis.len())).await;
    let phase = phase.elapsed();
    let counts = kv.migration_counts().await;
    said("control", vmis.len(), migratable, &nodes, counts, 0, phase);
    assert_eq!(
        counts.0, migratable,
        "the control shows the wave: {counts:?}"
    );
    assert!(
        counts.1 >= migratable,
        "and the drains move each VM again: {counts:?}"
    );
}

/// The worst of it: the drains begin while the wave runs (an upgrade whose system services go
/// fast, or a wave slowed by big VMs), and the first node's evacuations queue behind the wave
/// for KubeVirt's migration slots (`parallelMigrationsPerCluster`). Measured, not gated: its
/// drain time is printed against the guarded run's by `hack/bench.sh upgrade`.
#[tokio::test]
async fn without_the_guard_the_wave_holds_the_first_drain() {
    let (mut kv, vmis) = cluster(vm_count()).await;
    let migratable = vmis.len() - 1;
    kv.upgrade_kubevirt().await;
    kv.first_migration("the wave after KubeVirt's upgrade")
        .await;
    let phase = Instant::now();
    let nodes = upgrade_nodes(&kv, None, pace(vmis.len())).await;
    let phase = phase.elapsed();
    all_on_the_new_launcher(&kv, migratable).await;
    let counts = kv.migration_counts().await;
    said(
        "wave-and-drains",
        vmis.len(),
        migratable,
        &nodes,
        counts,
        0,
        phase,
    );
    assert!(counts.0 >= 1, "the wave ran beside the drains: {counts:?}");
    assert!(
        counts.0 + counts.1 > migratable,
        "more migrations than migratable VMs: {counts:?}"
    );
}
