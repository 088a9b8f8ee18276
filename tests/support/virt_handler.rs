//! The node's part of a live migration, played as KubeVirt's virt-handler and the kubelet play
//! it, so that KubeVirt's own virt-controller (its evacuation, migration, VMI and workload-update
//! controllers) decides everything else. Nothing here creates, paces or ends a migration by
//! itself: it answers what the migration controller asks of the nodes, in the order the real
//! ones answer it.
//!
//! Followed (KubeVirt v1.6.0; the same fields and order in v1.4.0 to v1.9.0, which the tests run):
//! - the scheduler and the kubelet: the target pod the migration controller renders
//!   (`pkg/virt-controller/watch/migration/migration.go` `handleTargetPodCreation`) is bound to
//!   another node, one without the drain taint (the pod tolerates none), and Running and Ready;
//!   the controller then hands off (`handleTargetPodHandoff`: `migrationState.targetNode`,
//!   `targetPod`, the `kubevirt.io/migrationTargetNodeName` label);
//! - the target's virt-handler (`pkg/virt-handler/migration-target.go` `updateStatus`):
//!   `targetNodeAddress` and `targetDirectMigrationNodePorts` (PreparingTarget → TargetReady);
//! - the source's virt-handler (`migration-source.go` `setMigrationProgressStatus`):
//!   `startTimestamp` and `mode` (→ Running); the migration then takes `migration_time`;
//! - the target: `targetNodeDomainDetected`, `targetNodeDomainReadyTimestamp`; the source:
//!   `completed` (`updateStatus`, once the target has the running domain); the target's ack
//!   (`ackMigrationCompletion`): `endTimestamp`, the VMI's node and its `kubevirt.io/nodeName`
//!   label moved to the target, `launcherContainerImageVersion` cleared (the VMI controller sets
//!   it again from the VMI's current pod: `pkg/virt-controller/watch/vmi/lifecycle.go`
//!   `setLauncherContainerInfo`), the outdated and target labels removed (→ Succeeded);
//! - the source's kubelet: the source virt-launcher exits once its domain has left: the pod
//!   `Succeeded`, so that the VMI has one active pod again (the evacuation controller waits for
//!   that before it migrates the VMI a second time).
//!
//! The VMI CRD has no status subresource: each write is a merge patch of the object, as
//! virt-handler's are patches of the VMI.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::harvester::now_rfc3339;
use super::kubevirt::{DRAIN_TAINT, VM_NS, migration_api, run_pod, vmi_api};

/// virt-controller's label on a migration's target pod.
const MIGRATION_UID_LABEL: &str = "kubevirt.io/migrationJobUID";

/// A test's label on a VMI whose first migration fails: the copy fails once its time is up, and
/// the source's virt-handler reports it (`migration-source.go`: `completed` and `failed`, an
/// `endTimestamp` and a `failureReason`), the target's launcher exits; the migration controller
/// then marks the migration `Failed`, and the evacuation controller makes another.
pub const FAILS_FIRST: &str = "wug.test/first-migration-fails";

/// The stand-in of every node's virt-handler and kubelet, running until dropped.
pub struct VirtHandler {
    task: tokio::task::JoinHandle<()>,
}

impl VirtHandler {
    /// Starts answering migrations; each one runs `migration_time` from its start to its
    /// completion (a guest's memory copied), so that KubeVirt's limits pace them
    /// (`parallelMigrationsPerCluster`, `parallelOutboundMigrationsPerNode`).
    pub fn start(client: &Client, migration_time: Duration) -> VirtHandler {
        let client = client.clone();
        let task = tokio::spawn(async move {
            let mut started: HashMap<String, Instant> = HashMap::new();
            let mut failed: HashSet<String> = HashSet::new();
            loop {
                if let Err(e) = pass(&client, migration_time, &mut started, &mut failed).await {
                    // A pass that met a conflict or a restarting API server: the next one reads
                    // again, as an informer's resync would.
                    eprintln!("virt-handler stand-in: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        VirtHandler { task }
    }
}

impl Drop for VirtHandler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One look at the migrations under way, and the node's next answer to each.
async fn pass(
    client: &Client,
    migration_time: Duration,
    started: &mut HashMap<String, Instant>,
    failed: &mut HashSet<String>,
) -> Result<(), kube::Error> {
    let migrations: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), VM_NS, &migration_api());
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), VM_NS, &vmi_api());
    let pods: Api<Pod> = Api::namespaced(client.clone(), VM_NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let under_way: Vec<DynamicObject> = migrations
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|m| {
            !matches!(
                m.data["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        })
        .collect();
    if under_way.is_empty() {
        return Ok(());
    }
    let pod_list = pods.list(&ListParams::default()).await?.items;
    // One list of the VMIs a pass, as virt-handler's informer holds them, not a read per migration.
    let vmi_list = vmis.list(&ListParams::default()).await?.items;
    let node_list = nodes.list(&ListParams::default()).await?.items;
    for m in under_way {
        let uid = m.metadata.uid.clone().unwrap_or_default();
        let Some(vmi_name) = m.data["spec"]["vmiName"].as_str() else {
            continue;
        };
        let Some(vmi) = vmi_list
            .iter()
            .find(|v| v.metadata.name.as_deref() == Some(vmi_name))
        else {
            continue;
        };
        let source_node = vmi.data["status"]["nodeName"].as_str().unwrap_or_default();
        // The scheduler and the kubelet: the target pod placed and running.
        let target = pod_list.iter().find(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MIGRATION_UID_LABEL))
                == Some(&uid)
        });
        if let Some(target) = target {
            // Only a pod not yet started: the kubelet never runs a Failed pod again. A failed
            // copy's target is still listed here until virt-controller marks its migration
            // Failed; set Running again (a loaded machine, once), it counted as a VMI's second
            // active pod, and KubeVirt's evacuation waits while there is one
            // (`evacuation.go`, `VMIActivePodsCount(vmi, …) > 1`, v1.6.0): no retry, ever.
            let phase = target.status.as_ref().and_then(|s| s.phase.as_deref());
            let pending = matches!(phase, None | Some("Pending"));
            let bound = target.spec.as_ref().and_then(|s| s.node_name.clone());
            if pending {
                let node = match bound {
                    Some(node) => node,
                    None => match least_loaded(&node_list, &pod_list, source_node) {
                        Some(node) => node,
                        None => continue, // no node to go to: the pod stays Pending
                    },
                };
                let pod = serde_json::to_value(target).unwrap();
                run_pod(client, &pod, &node).await?;
            }
        }
        let state = &vmi.data["status"]["migrationState"];
        if state["migrationUid"].as_str() != Some(uid.as_str()) || state["targetNode"].is_null() {
            continue; // not handed off yet
        }
        let target_node = state["targetNode"].as_str().unwrap_or_default().to_string();
        if state["targetNodeAddress"].is_null() {
            patch_vmi(
                &vmis,
                vmi_name,
                json!({"status": {"migrationState": {
                "targetNodeAddress": "10.0.0.2", "targetDirectMigrationNodePorts": {"49152": 0}}}}),
            )
            .await?;
        } else if state["startTimestamp"].is_null() {
            patch_vmi(
                &vmis,
                vmi_name,
                json!({"status": {"migrationState": {
                "startTimestamp": now_rfc3339(), "mode": "PreCopy"}}}),
            )
            .await?;
            started.insert(uid.clone(), Instant::now());
        } else if state["completed"] != json!(true) {
            let began = *started.entry(uid.clone()).or_insert_with(Instant::now);
            if began.elapsed() < migration_time {
                continue;
            }
            let fails = vmi
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(FAILS_FIRST));
            if fails && failed.insert(vmi_name.to_string()) {
                fail(&vmis, &pods, vmi).await?;
            } else {
                complete(&vmis, &pods, vmi, &target_node).await?;
            }
            started.remove(&uid);
        }
    }
    Ok(())
}

/// The end of a migration, in the nodes' order: the target has the running domain, the source
/// reports completion, the target acknowledges and takes the VMI, the source pod exits.
async fn complete(
    vmis: &Api<DynamicObject>,
    pods: &Api<Pod>,
    vmi: &DynamicObject,
    target_node: &str,
) -> Result<(), kube::Error> {
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let state = &vmi.data["status"]["migrationState"];
    patch_vmi(
        vmis,
        name,
        json!({"status": {"migrationState": {
        "targetNodeDomainDetected": true, "targetNodeDomainReadyTimestamp": now_rfc3339()}}}),
    )
    .await?;
    patch_vmi(
        vmis,
        name,
        json!({"status": {"migrationState": {"completed": true}}}),
    )
    .await?;
    patch_vmi(
        vmis,
        name,
        json!({
        "metadata": {"labels": {"kubevirt.io/nodeName": target_node,
            "kubevirt.io/outdatedLauncherImage": null,
            "kubevirt.io/migrationTargetNodeName": null}},
        "status": {"nodeName": target_node, "launcherContainerImageVersion": "",
            "evacuationNodeName": null, "migrationTransport": "Unix",
            "migrationState": {"endTimestamp": now_rfc3339()}}}),
    )
    .await?;
    let source_pod = state["sourcePod"].as_str().map(str::to_string);
    let source_pod = match source_pod {
        Some(p) => Some(p),
        None => {
            // Older migration states name no source pod: the VMI's launcher on the source node.
            let source_node = state["sourceNode"].as_str().unwrap_or_default();
            let vmi_uid = vmi.metadata.uid.clone().unwrap_or_default();
            pods.list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(source_node)
                        && p.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| o.uid == vmi_uid)
                })
                .and_then(|p| p.metadata.name)
        }
    };
    if let Some(source_pod) = source_pod {
        let now = now_rfc3339();
        let pod = pods.get(&source_pod).await?;
        let statuses: Vec<Value> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| {
                json!({"name": c.name, "image": c.image, "imageID": c.image, "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": now, "finishedAt": now}}})
            })
            .collect();
        pods.patch_status(
            &source_pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded",
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
                "containerStatuses": statuses}})),
        )
        .await?;
    }
    Ok(())
}

/// A migration that failed, in the nodes' order: the source reports it (the domain stays on the
/// source), the target's launcher exits.
async fn fail(
    vmis: &Api<DynamicObject>,
    pods: &Api<Pod>,
    vmi: &DynamicObject,
) -> Result<(), kube::Error> {
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let state = &vmi.data["status"]["migrationState"];
    patch_vmi(
        vmis,
        name,
        json!({"status": {"migrationState": {"completed": true, "failed": true,
            "endTimestamp": now_rfc3339(), "failureReason": "a test's failed copy"}}}),
    )
    .await?;
    if let Some(target_pod) = state["targetPod"].as_str() {
        pods.patch_status(
            target_pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await?;
    }
    Ok(())
}

async fn patch_vmi(vmis: &Api<DynamicObject>, name: &str, patch: Value) -> Result<(), kube::Error> {
    vmis.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

/// The scheduler's choice for a target pod: a Ready node other than the source, without the
/// drain taint, with the fewest running launcher pods (spreading, as the default scheduler's
/// scoring does for equal nodes).
fn least_loaded(nodes: &[Node], pods: &[Pod], source: &str) -> Option<String> {
    let mut load: BTreeMap<String, usize> = nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(source))
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == DRAIN_TAINT))
        })
        .filter_map(|n| n.metadata.name.clone())
        .map(|n| (n, 0))
        .collect();
    for p in pods {
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_ref())
            && running
            && let Some(n) = load.get_mut(node)
        {
            *n += 1;
        }
    }
    load.into_iter()
        .min_by_key(|(_, n)| *n)
        .map(|(node, _)| node)
}
