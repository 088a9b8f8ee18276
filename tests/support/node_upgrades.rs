//! Harvester's node upgrades, as `package/upgrade/upgrade_node.sh` runs them on each node in
//! turn at `UpgradingNodes` (the same steps in every release read, v1.5 to v1.8), against
//! KubeVirt's real virt-controller (`support::kubevirt`) with the nodes' part played by
//! `support::virt_handler`:
//!
//! - `command_pre_drain` (the node `Pre-draining`): the VMs that cannot live-migrate shut down
//!   (`upgrade-helper vm-live-migrate-detector NODE --shutdown`), the node tainted
//!   `kubevirt.io/drain=draining:NoSchedule` (KubeVirt's evacuation controller then migrates
//!   its VMIs away), `wait_vms_out_or_shutdown` (no VMI labelled `kubevirt.io/nodeName=NODE`
//!   whose phase is not `Succeeded`), `wait_evacuation_pdb_gone` (no PDB named
//!   `kubevirt-migration-pdb-kubevirt-evacuation-*`);
//! - Rancher's drain and RKE2's upgrade (`Pre-drained`): nothing of KubeVirt's is left there;
//! - `command_post_drain` (`Post-draining`): the taint removed (`kubectl taint node NODE
//!   kubevirt.io/drain-`), the OS upgraded and the node rebooted, then `Succeeded` (Harvester's
//!   `job_controller.go`, modelled by `HarvesterController::node_upgraded`'s states).
//!
//! The script polls every 5 s; the model every 200 ms, the tests' time scale.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use super::harvester::now_rfc3339;
use super::harvester_controller::{HarvesterController, setters};
use super::kubevirt::{DRAIN_TAINT, KubeVirtCluster, VM_NS, vmi_api};

/// What one node's upgrade did: how long its pre-drain waited for its VMIs to leave, and
/// KubeVirt's outdated count once the node was done.
#[derive(Debug, Clone)]
pub struct NodeUpgrade {
    pub node: String,
    pub shut_down: Vec<String>,
    pub drain: Duration,
    pub outdated_after: Option<i64>,
}

/// Every node in turn, as Harvester's node jobs go (one at a time), with the Upgrade's node
/// states written by `hv` where an Upgrade is modelled. Each pre-drain must end within `within`.
pub async fn upgrade_nodes(
    kv: &KubeVirtCluster,
    hv: Option<&HarvesterController>,
    within: Duration,
) -> Vec<NodeUpgrade> {
    let mut done = vec![];
    for i in 0..kv.nodes {
        let node = format!("node-{i}");
        node_state(hv, &node, "Pre-draining").await;
        let (shut_down, drain) = pre_drain(kv, &node, within).await;
        node_state(hv, &node, "Pre-drained").await;
        node_state(hv, &node, "Post-draining").await;
        post_drain(kv, &node).await;
        node_state(hv, &node, "Succeeded").await;
        done.push(NodeUpgrade {
            node,
            shut_down,
            drain,
            outdated_after: kv.outdated().await,
        });
    }
    done
}

async fn node_state(hv: Option<&HarvesterController>, node: &str, state: &str) {
    if let Some(hv) = hv {
        hv.must(|u| setters::node_status(u, node, state, "", "", &now_rfc3339()))
            .await;
    }
}

/// `command_pre_drain`'s steps for KubeVirt; the VMIs it shut down, and how long the node took
/// to empty from its taint.
pub async fn pre_drain(
    kv: &KubeVirtCluster,
    node: &str,
    within: Duration,
) -> (Vec<String>, Duration) {
    let vmis: Api<DynamicObject> = Api::namespaced_with(kv.client.clone(), VM_NS, &vmi_api());
    let on_node = ListParams::default().labels(&format!("kubevirt.io/nodeName={node}"));
    // vm-live-migrate-detector --shutdown: each VM whose VMI is not LiveMigratable is stopped;
    // its guest shuts down (virt-handler reports the VMI Succeeded) and its launcher exits.
    let mut shut_down = vec![];
    for vmi in vmis.list(&on_node).await.unwrap().items {
        let migratable = vmi.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "LiveMigratable" && c["status"] == "True");
        if migratable || vmi.data["status"]["phase"] != "Running" {
            continue;
        }
        let name = vmi.metadata.name.clone().unwrap();
        vmis.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
        finish_launchers(kv, &vmi).await;
        shut_down.push(name);
    }
    taint(kv, node, true).await;
    let tainted = Instant::now();
    // wait_vms_out_or_shutdown
    loop {
        let left: Vec<String> = vmis
            .list(&on_node)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|v| v.data["status"]["phase"] != "Succeeded")
            .filter_map(|v| v.metadata.name)
            .collect();
        if left.is_empty() {
            break;
        }
        if tainted.elapsed() > within {
            panic!(
                "{node}: VMIs {left:?} still there {within:?} after its drain taint; virt-controller's \
                 log (tail):\n{}\n{}",
                kv.controller_log_tail(30),
                kv.migration_report().await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drain = tainted.elapsed();
    // wait_evacuation_pdb_gone
    let pdbs: Api<PodDisruptionBudget> = Api::all(kv.client.clone());
    loop {
        let evacuation_pdbs =
            pdbs.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| {
                    p.metadata.name.as_deref().is_some_and(|n| {
                        n.starts_with("kubevirt-migration-pdb-kubevirt-evacuation-")
                    })
                })
                .count();
        if evacuation_pdbs == 0 {
            break;
        }
        assert!(tainted.elapsed() < within, "{node}: evacuation PDBs stay");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (shut_down, drain)
}

/// `command_post_drain`: the node runs the new version; its drain taint comes off.
pub async fn post_drain(kv: &KubeVirtCluster, node: &str) {
    taint(kv, node, false).await;
}

/// The drain taint on (`kubectl taint node --overwrite kubevirt.io/drain=draining:NoSchedule`)
/// or off (`kubectl taint node kubevirt.io/drain-`), the node's other taints kept.
async fn taint(kv: &KubeVirtCluster, node: &str, on: bool) {
    let nodes: Api<Node> = Api::all(kv.client.clone());
    let current = nodes.get(node).await.unwrap();
    let mut taints: Vec<_> = current
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != DRAIN_TAINT)
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    if on {
        taints.push(json!({"key": DRAIN_TAINT, "value": "draining", "effect": "NoSchedule"}));
    }
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
        .unwrap();
}

/// The kubelet's part once a guest has shut down: the VMI's launcher pods `Succeeded`.
async fn finish_launchers(kv: &KubeVirtCluster, vmi: &DynamicObject) {
    let pods: Api<Pod> = Api::namespaced(kv.client.clone(), VM_NS);
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    for pod in pods.list(&ListParams::default()).await.unwrap().items {
        let owned = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid);
        if owned {
            pods.patch_status(
                pod.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
            )
            .await
            .unwrap();
        }
    }
}
