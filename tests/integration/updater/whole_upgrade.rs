//! The whole upgrade, drains included, against KubeVirt's own controllers: virt-controller of
//! `$KUBEVIRT_VERSION` (its evacuation, migration, VMI and workload-update controllers decide
//! every migration), the nodes' part played by `support::virt_handler` (1 s a migration), Harvester's node
//! upgrades by `support::node_upgrades` (`upgrade_node.sh`'s pre-drain, one node at a time).
//!
//! What the guard saves in a real upgrade: every VM that lives through the node upgrades reaches
//! the new launcher at its node's drain (KubeVirt's evacuation renders the target pod with the
//! new launcher image), so the workload updater's wave would move each VM once more for nothing.
//! With the guard: no workload-update migration at all, and nothing outdated at the restore;
//! without a suspension (the control, which must show the wave, else these tests prove
//! nothing): the wave, then the evacuations. In both, the guard's record of the upgrade equals
//! the test's own count of the objects.
//!
//! `hack/test.sh` runs them once per KubeVirt version, with the other updater tests
//! (`updater::`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::resident::Guard;
use crate::support::harvester::Upgrade;
use crate::support::harvester_controller::setters;
use crate::support::kubevirt::{KubeVirtCluster, LAUNCHER_AFTER, NS, VmiSpec, version};
use crate::support::node_upgrades::{NodeUpgrade, upgrade_nodes};
use crate::support::*;
use workload_update_guard::plan::harvester_upgrade::ALLOW_UNPROTECTED;

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
/// nodes_phase P outdated O,O,O", then the guard's record of it where it ran: "record
/// workload_update W evacuation E after_restore R shut_down S saved X".
#[allow(clippy::too_many_arguments)]
fn said(
    case: &str,
    vms: usize,
    running: usize,
    nodes: &[NodeUpgrade],
    counts: (usize, usize),
    restore: usize,
    phase: Duration,
    record: Option<&Value>,
) {
    let drains: Vec<String> = nodes
        .iter()
        .map(|n| format!("{:.2}", n.drain.as_secs_f64()))
        .collect();
    let outdated: Vec<String> = nodes
        .iter()
        .map(|n| n.outdated_after.map_or("-".into(), |o| o.to_string()))
        .collect();
    let record = record.map_or(String::new(), |r| {
        let n = |pointer: &str| r.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
        format!(
            " record workload_update {} evacuation {} after_restore {} shut_down {} saved {}",
            n("/migrations/workloadUpdate"),
            n("/migrations/evacuation"),
            n("/afterRestore/workloadUpdate"),
            n("/shutDown/total"),
            n("/saved")
        )
    });
    eprintln!(
        "whole upgrade {} {case}: vms {vms} running {running} workload_update {} evacuation {} \
         restore {restore} drains {} nodes_phase {:.2} outdated {}{record}",
        version(),
        counts.0,
        counts.1,
        drains.join(","),
        phase.as_secs_f64(),
        outdated.join(",")
    );
}

/// The guard's record of the upgrade, against the count of the objects themselves: the
/// migrations by cause (none deleted yet: KubeVirt keeps five per VMI, and each VM here moves at
/// most three times), the VM that could not live-migrate shut down, named, with its reason.
fn record_equals_the_count(
    record: &Value,
    vmis: &[String],
    counts: (usize, usize),
    restore: usize,
    shut_down: &[&String],
) {
    let n = |pointer: &str| {
        record
            .pointer(pointer)
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX)
    };
    assert_eq!(
        n("/migrations/workloadUpdate") + n("/afterRestore/workloadUpdate"),
        (counts.0 + restore) as u64,
        "{record:#}"
    );
    assert_eq!(n("/migrations/evacuation"), counts.1 as u64, "{record:#}");
    assert_eq!(
        n("/migrations/other") + n("/migrations/failed"),
        0,
        "{record:#}"
    );
    assert_eq!(n("/vms/runningAtStart"), vmis.len() as u64, "{record:#}");
    assert_eq!(n("/vms/notLiveMigratableAtStart"), 1, "{record:#}");
    assert_eq!(n("/shutDown/total"), shut_down.len() as u64, "{record:#}");
    let named: Vec<&str> = (record["shutDown"]["named"].as_array().unwrap().iter())
        .map(|v| v["vm"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = shut_down.iter().map(|s| format!("vms/{s}")).collect();
    assert_eq!(named, expected, "{record:#}");
    assert_eq!(
        record["shutDown"]["named"][0]["reason"], "notLiveMigratable",
        "{record:#}"
    );
    assert_eq!(record["outcome"], "Succeeded", "{record:#}");
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
    // The record: complete once the upgrade has ended, the updates are back and the updater has
    // nothing left to move; what it saved, one migration per migratable VM.
    let record = complete_record(
        &kv.client,
        NS,
        &format!("Upgrade {NS}/{}", up.name),
        Duration::from_secs(60),
    )
    .await;
    said(
        "guarded",
        vmis.len(),
        migratable,
        &nodes,
        during,
        restore,
        phase,
        Some(&record),
    );
    record_equals_the_count(&record, &vmis, during, restore, &shut_down);
    assert_eq!(record["suspendedBy"], "the guard", "{record:#}");
    assert_eq!(record["saved"], migratable as u64, "{record:#}");
    assert_eq!(
        record["vms"]["outdatedMigratablePeak"], migratable as u64,
        "{record:#}"
    );
    assert_eq!(record["afterRestore"]["outdated"], 0, "{record:#}");
    guard.wait_for("resident guard: recorded Upgrade", Duration::from_secs(5));
    assert_eq!(kv.outdated().await, Some(0));
    hv.cleanup().await;
}

/// The control: the same upgrade with nothing suspended (the guard installed, its migrations
/// accepted by the operator, so that it only records). KubeVirt's upgrade starts the wave, which
/// moves every migratable VM (the system services' upgrade lasts minutes: the wave is over before
/// the first drain); then the drains move each of them again. The saving is the wave: one
/// migration per migratable VM; the record says it, and that nothing was saved.
#[tokio::test]
async fn without_the_guard_a_whole_upgrade_migrates_each_vm_once_more() {
    let (mut kv, vmis) = cluster(vm_count()).await;
    let migratable = vmis.len() - 1;
    // Accepted before the guard starts: it never suspends for it.
    let up = Upgrade::start(&kv.client, NS, "hvst-upgrade-control", "v1.7.1").await;
    let mut hv = up.controller(&kv.client);
    hv.nodes = (0..kv.nodes).map(|i| format!("node-{i}")).collect();
    hv.must(|u| setters::annotate(u, ALLOW_UNPROTECTED, "true"))
        .await;
    let guard = Guard::spawn(&kv.cp.kubeconfig(), NS, 0);
    guard.wait_for("accepted", Duration::from_secs(20));
    hv.up_to_nodes_prepared().await;
    let prepared = hv
        .nodes_prepared(Duration::from_secs(10), &Default::default())
        .await;
    assert!(prepared.passed.is_some(), "{prepared:?}");
    hv.apply_manifests().await;
    kv.upgrade_kubevirt().await;
    let within = pace(vmis.len());
    kv.wait_migrations("the wave over every migratable VM", within, |m| {
        m.len() >= migratable
    })
    .await;
    // The wave done: only the VM that cannot migrate is left outdated.
    kv.wait_outdated(1, within).await;
    hv.system_services_upgraded(true).await;
    hv.upgrading_nodes().await;
    let phase = Instant::now();
    let nodes = upgrade_nodes(&kv, Some(&hv), pace(vmis.len())).await;
    let phase = phase.elapsed();
    let counts = kv.migration_counts().await;
    let record = complete_record(
        &kv.client,
        NS,
        &format!("Upgrade {NS}/{}", up.name),
        Duration::from_secs(60),
    )
    .await;
    said(
        "control",
        vmis.len(),
        migratable,
        &nodes,
        counts,
        0,
        phase,
        Some(&record),
    );
    let shut_down: Vec<&String> = nodes.iter().flat_map(|n| &n.shut_down).collect();
    record_equals_the_count(&record, &vmis, counts, 0, &shut_down);
    assert_eq!(record["suspendedBy"], "nobody", "{record:#}");
    assert_eq!(record["saved"], 0, "{record:#}");
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
        None,
    );
    assert!(counts.0 >= 1, "the wave ran beside the drains: {counts:?}");
    assert!(
        counts.0 + counts.1 > migratable,
        "more migrations than migratable VMs: {counts:?}"
    );
}
