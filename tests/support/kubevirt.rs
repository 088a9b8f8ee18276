//! KubeVirt's own workload updater, live: a control plane of its own with every KubeVirt CRD
//! (`hack/control-plane.sh` with `KUBEVIRT_CRDS=all`), KubeVirt's real virt-controller of
//! `$KUBEVIRT_VERSION` (`hack/kubevirt.sh run`), nodes, and running VMIs with their
//! virt-launcher pods. The test plays what is missing: the scheduler and the kubelet (it binds
//! each launcher pod and sets it Running), virt-handler (the VMI Running on its node, its
//! launcher image, its conditions; each migration's part on the nodes, `support::virt_handler`),
//! and virt-operator's rollout (the CR `Deploying` with a new
//! target deployment, virt-controller restarted with the new launcher image, then `Deployed`).
//!
//! KubeVirt takes one KubeVirt CR per cluster (its updater acts on every VMI of the cluster for
//! each CR it syncs, and refuses to act with two), so each test has its own control plane. If
//! virt-controller cannot be built or started, the test FAILS with the script's message.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{ControlPlane, client_for, create, get, harvester_chart, repo_root};

/// The KubeVirt CR's namespace, as on Harvester: virt-controller runs there (its namespace is
/// the CR's), and the guard's objects (the ManagedChart, Harvester's Upgrades) are there too.
pub const NS: &str = "harvester-system";
/// The test's label on each VMI, which virt-controller copies to its launcher pod.
const VMI_LABEL: &str = "wug.test/vmi";
/// The VMs' namespace.
pub const VM_NS: &str = "vms";
/// The launcher image before and after the modelled KubeVirt upgrade (names only: no node pulls
/// them).
pub const LAUNCHER_BEFORE: &str = "localhost/virt-launcher:before";
pub const LAUNCHER_AFTER: &str = "localhost/virt-launcher:after";
/// How long one live migration takes on the modelled nodes, from its start to its completion.
pub const MIGRATION_TIME: Duration = Duration::from_secs(1);
/// virt-controller's annotation on the migrations its workload updater creates.
pub const WORKLOAD_UPDATE: &str = "kubevirt.io/workloadUpdateMigration";
/// virt-controller's annotation on the migrations its evacuation controller creates.
pub const EVACUATION: &str = "kubevirt.io/evacuationMigration";
/// The taint Harvester's pre-drain puts on a node (`kubevirt.io/drain=draining:NoSchedule`), the
/// evacuation controller's default `migrations.nodeDrainTaintKey`.
pub const DRAIN_TAINT: &str = "kubevirt.io/drain";

/// The KubeVirt version under test (`$KUBEVIRT_VERSION`, else `hack/kubevirt.sh`'s default).
pub fn version() -> String {
    std::env::var("KUBEVIRT_VERSION").unwrap_or_else(|_| "v1.6.0".into())
}

fn api(kind: &str, plural: &str, group: &str, version: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn vmi_api() -> ApiResource {
    api(
        "VirtualMachineInstance",
        "virtualmachineinstances",
        "kubevirt.io",
        "v1",
    )
}

pub fn migration_api() -> ApiResource {
    api(
        "VirtualMachineInstanceMigration",
        "virtualmachineinstancemigrations",
        "kubevirt.io",
        "v1",
    )
}

/// A VMI to start: its name and what it carries.
#[derive(Clone, Copy, Default)]
pub struct VmiSpec {
    /// `LiveMigratable` False: only `Evict` can update it.
    pub not_migratable: bool,
    /// A CPU hot-plug pending (`VCPUChange`): it needs a migration even when up to date.
    pub hotplug: bool,
    /// Its own `evictionStrategy: LiveMigrateIfPossible`, as Harvester's VMs carry it (else the
    /// CR's, if any).
    pub migrate_if_possible: bool,
    /// Its first migration fails on the nodes (`support::virt_handler`).
    pub first_migration_fails: bool,
}

/// A control plane with KubeVirt's CRDs and its live virt-controller; stopped when dropped.
pub struct KubeVirtCluster {
    pub cp: ControlPlane,
    pub client: Client,
    pub nodes: usize,
    controller_dir: PathBuf,
    launcher: String,
    deployment: u32,
    evictions: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The nodes' part of each migration (`support::virt_handler`): without it a migration
    /// stays under way, and KubeVirt counts it against `parallelMigrationsPerCluster` (v1.8 on
    /// counts a scheduled one too), so that a wave would stop at its first pass.
    _nodes: super::virt_handler::VirtHandler,
}

impl KubeVirtCluster {
    /// The control plane, `nodes` Ready nodes, the KubeVirt CR (`Deployed`, with `strategy` as
    /// its `workloadUpdateStrategy`), the `harvester` ManagedChart, and virt-controller with
    /// the launcher image `LAUNCHER_BEFORE`, leading.
    pub async fn up(nodes: usize, strategy: Value) -> KubeVirtCluster {
        Self::up_with(nodes, strategy, json!({})).await
    }

    /// `up`, the CR's `spec.configuration` merged with `configuration` (e.g. an
    /// `evictionStrategy`, which makes the evacuation controller move a drained node's VMIs).
    pub async fn up_with(nodes: usize, strategy: Value, configuration: Value) -> KubeVirtCluster {
        let v = version();
        let cp = ControlPlane::up(&[("KUBEVIRT_CRDS", "all"), ("KUBEVIRT_VERSION", &v)])
            .unwrap_or_else(|e| panic!("{e}"));
        let client = client_for(&cp.kubeconfig()).await;
        for ns in [NS, VM_NS] {
            let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
            let obj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            api.create(&PostParams::default(), &obj).await.unwrap();
        }
        let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        for i in 0..nodes {
            let name = format!("node-{i}");
            let node = serde_json::from_value(json!({"metadata": {"name": name,
                "labels": {"kubevirt.io/schedulable": "true", "kubernetes.io/hostname": name}}}))
            .unwrap();
            node_api
                .create(&PostParams::default(), &node)
                .await
                .unwrap();
            node_api
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                        "reason": "KubeletReady", "message": "modelled", "lastHeartbeatTime": super::harvester::now_rfc3339(),
                        "lastTransitionTime": super::harvester::now_rfc3339()}],
                        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}}})),
                )
                .await
                .unwrap();
        }
        create(
            &client,
            "KubeVirt",
            NS,
            json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                   "metadata": {"name": "kubevirt", "namespace": NS},
                   "spec": {"configuration": kubevirt_configuration(configuration),
                            "workloadUpdateStrategy": strategy}}),
        )
        .await;
        create(&client, "ManagedChart", NS, harvester_chart(NS)).await;
        let controller_dir = cp.dir.join("virt-controller");
        let node_part = super::virt_handler::VirtHandler::start(&client, MIGRATION_TIME);
        let mut cluster = KubeVirtCluster {
            cp,
            client,
            nodes,
            controller_dir,
            launcher: LAUNCHER_BEFORE.into(),
            deployment: 1,
            evictions: Default::default(),
            _nodes: node_part,
        };
        cluster.deployed().await;
        cluster.start_disruption_controller();
        cluster.start_controller();
        cluster
    }

    /// Kubernetes' own disruption controller, which a cluster runs in kube-controller-manager:
    /// the status of KubeVirt's evacuation PDBs, which v1.4.0's migration controller waits for.
    fn start_disruption_controller(&self) {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/kubevirt.sh"))
            .arg("disruption")
            .arg(self.disruption_dir())
            .arg(self.cp.kubeconfig())
            .env("KV_OWNER_PID", std::process::id().to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the tests with KubeVirt's controllers need Kubernetes' disruption controller (the \
             node's kube-controller-manager, hack/node.sh build), and `hack/kubevirt.sh \
             disruption` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn disruption_dir(&self) -> PathBuf {
        self.cp.dir.join("disruption")
    }

    /// virt-operator's status of a finished rollout: `Deployed`, observed = target.
    async fn deployed(&self) {
        let id = format!("deployment-{}", self.deployment);
        self.kubevirt_status(json!({"phase": "Deployed", "observedDeploymentID": id,
            "targetDeploymentID": id, "observedKubeVirtVersion": version(),
            "targetKubeVirtVersion": version()}))
            .await;
    }

    async fn kubevirt_status(&self, status: Value) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), NS, &super::resource("KubeVirt"));
        api.patch_status(
            "kubevirt",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .expect("the KubeVirt CR's status");
    }

    fn start_controller(&mut self) {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/kubevirt.sh"))
            .args(["run"])
            .arg(&self.controller_dir)
            .arg(self.cp.kubeconfig())
            .args([NS, &self.launcher])
            .env("KUBEVIRT_VERSION", version())
            .env("KV_OWNER_PID", std::process::id().to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the tests with KubeVirt's workload updater need its real virt-controller, and \
             `hack/kubevirt.sh run` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn stop_controller(&self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("hack/kubevirt.sh"))
            .arg("stop")
            .arg(&self.controller_dir)
            .output();
    }

    /// The last `n` lines of virt-controller's log.
    pub fn controller_log_tail(&self, n: usize) -> String {
        tail(&self.controller_log(), n)
    }

    /// virt-controller's log so far.
    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(self.controller_dir.join("virt-controller.log")).unwrap_or_default()
    }

    /// Starts `specs.len()` VMIs and waits until each runs on its node with its launcher pod,
    /// as virt-controller and virt-handler leave it; their names.
    pub async fn start_vmis(&self, specs: &[VmiSpec]) -> Vec<String> {
        let vmis: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), VM_NS, &vmi_api());
        let mut names = vec![];
        for (i, spec) in specs.iter().enumerate() {
            let name = format!("vm-{i}");
            let mut obj = json!({"apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance", "metadata": {"name": name, "namespace": VM_NS,
                    "labels": {VMI_LABEL: name}},
                "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}},
                         "terminationGracePeriodSeconds": 0}});
            if spec.migrate_if_possible {
                obj["spec"]["evictionStrategy"] = json!("LiveMigrateIfPossible");
            }
            if spec.first_migration_fails {
                obj["metadata"]["labels"][super::virt_handler::FAILS_FIRST] = json!("true");
            }
            let obj = serde_json::from_value(obj).unwrap();
            vmis.create(&PostParams::default(), &obj)
                .await
                .expect("create a VMI");
            names.push(name);
        }
        for (i, (name, spec)) in names.iter().zip(specs).enumerate() {
            let node = format!("node-{}", i % self.nodes);
            let pod = self.launcher_pod(name).await;
            run_pod(&self.client, &pod, &node)
                .await
                .expect("the launcher pod Running");
            self.run_vmi(name, &pod, &node, spec).await;
        }
        names
    }

    /// virt-controller's virt-launcher pod for the VMI, once it has made it.
    async fn launcher_pod(&self, vmi: &str) -> Value {
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), VM_NS);
        let start = Instant::now();
        loop {
            let list = pods
                .list(&ListParams::default().labels(&format!("{VMI_LABEL}={vmi}")))
                .await
                .unwrap();
            if let Some(p) = list.items.into_iter().next() {
                return serde_json::to_value(p).unwrap();
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "virt-controller made no launcher pod for {vmi} within 60 s; its log:\n{}",
                self.controller_log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// virt-handler's status: the VMI Running on `node` in `pod`, with the pod's launcher image
    /// and its conditions (the VMI CRD has no status subresource: a patch of the object).
    async fn run_vmi(&self, name: &str, pod: &Value, node: &str, spec: &VmiSpec) {
        let image = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "compute")
            .map(|c| c["image"].clone())
            .unwrap_or_else(|| json!(self.launcher));
        let now = super::harvester::now_rfc3339();
        let migratable = if spec.not_migratable { "False" } else { "True" };
        let mut conditions = vec![
            json!({"type": "Ready", "status": "True", "lastTransitionTime": now, "lastProbeTime": null}),
            json!({"type": "LiveMigratable", "status": migratable, "lastTransitionTime": now, "lastProbeTime": null}),
        ];
        if spec.hotplug {
            conditions.push(json!({"type": "HotVCPUChange", "status": "True",
                                   "lastTransitionTime": now, "lastProbeTime": null}));
        }
        let pod_uid = pod["metadata"]["uid"].as_str().unwrap();
        let vmis: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), VM_NS, &vmi_api());
        vmis.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"kubevirt.io/nodeName": node}},
                "status": {"phase": "Running", "nodeName": node, "selinuxContext": "none",
                "launcherContainerImageVersion": image, "conditions": conditions,
                "activePods": {pod_uid: node}, "migrationMethod": "BlockMigration",
                "interfaces": [{"ipAddress": "10.0.0.1", "name": "default"}]}}),
            ),
        )
        .await
        .expect("the VMI Running");
    }

    /// virt-operator's rollout of a new KubeVirt: the CR `Deploying` toward a new deployment,
    /// virt-controller replaced by one with the new launcher image, then `Deployed`.
    pub async fn upgrade_kubevirt(&mut self) {
        self.deployment += 1;
        let target = format!("deployment-{}", self.deployment);
        self.kubevirt_status(json!({"phase": "Deploying", "targetDeploymentID": target}))
            .await;
        self.stop_controller();
        self.launcher = LAUNCHER_AFTER.into();
        self.start_controller();
        self.deployed().await;
    }

    /// The migrations of the workload updater (virt-controller's annotation), by VMI.
    pub async fn workload_update_migrations(&self) -> Vec<String> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), VM_NS, &migration_api());
        let mut vmis: Vec<String> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|m| {
                m.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(WORKLOAD_UPDATE))
            })
            .map(|m| {
                assert!(
                    m.metadata
                        .name
                        .as_deref()
                        .unwrap_or_default()
                        .starts_with("kubevirt-workload-update-"),
                    "{:?}",
                    m.metadata.name
                );
                m.data["spec"]["vmiName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        vmis.sort();
        vmis
    }

    /// The migrations so far, as (workload-update, evacuation) counts: each kind by the
    /// annotation virt-controller puts on it.
    pub async fn migration_counts(&self) -> (usize, usize) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), VM_NS, &migration_api());
        let all = api.list(&ListParams::default()).await.unwrap().items;
        let of = |key: &str| {
            all.iter()
                .filter(|m| {
                    m.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(key))
                })
                .count()
        };
        (of(WORKLOAD_UPDATE), of(EVACUATION))
    }

    /// The migrations, VMIs and launcher pods as they stand, for a failure's message.
    pub async fn migration_report(&self) -> String {
        let migrations: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), VM_NS, &migration_api());
        let vmis: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), VM_NS, &vmi_api());
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), VM_NS);
        let mut out = vec![];
        for m in migrations.list(&ListParams::default()).await.unwrap().items {
            out.push(format!(
                "migration {} of {}: {} {}",
                m.metadata.name.unwrap_or_default(),
                m.data["spec"]["vmiName"],
                m.data["status"]["phase"],
                m.data["status"]["conditions"]
            ));
        }
        for v in vmis.list(&ListParams::default()).await.unwrap().items {
            out.push(format!(
                "vmi {}: {} on {} launcher {} migrationState {}",
                v.metadata.name.unwrap_or_default(),
                v.data["status"]["phase"],
                v.data["status"]["nodeName"],
                v.data["status"]["launcherContainerImageVersion"],
                v.data["status"]["migrationState"]
            ));
        }
        for p in pods.list(&ListParams::default()).await.unwrap().items {
            out.push(format!(
                "pod {}: {:?} on {:?}",
                p.metadata.name.unwrap_or_default(),
                p.status.and_then(|s| s.phase),
                p.spec.and_then(|s| s.node_name)
            ));
        }
        out.join("\n")
    }

    /// Each running VMI's launcher image, as the VMI controller records it, and its node.
    pub async fn launchers(&self) -> BTreeMap<String, (String, String)> {
        let vmis: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), VM_NS, &vmi_api());
        vmis.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|v| v.data["status"]["phase"] == "Running")
            .map(|v| {
                let text = |field: &str| {
                    v.data["status"][field]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                };
                (
                    v.metadata.name.clone().unwrap_or_default(),
                    (text("launcherContainerImageVersion"), text("nodeName")),
                )
            })
            .collect()
    }

    /// The VMIs whose launcher pod the workload updater evicted (`Evict`), so far. Each call
    /// also plays the kubelet and virt-handler for them: the evicted pod gone, the VMI
    /// `Succeeded` (its guest shut down), as a real node ends an eviction.
    pub async fn evicted(&self) -> Vec<String> {
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), VM_NS);
        let vmis: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), VM_NS, &vmi_api());
        let terminating = pods
            .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some());
        for pod in terminating {
            let Some(vmi) = pod.metadata.labels.as_ref().and_then(|l| l.get(VMI_LABEL)) else {
                continue;
            };
            self.evictions.lock().unwrap().insert(vmi.clone());
            let name = pod.metadata.name.clone().unwrap();
            let _ = pods
                .delete(&name, &kube::api::DeleteParams::default().grace_period(0))
                .await;
            let _ = vmis
                .patch(
                    vmi,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
                )
                .await;
        }
        self.evictions.lock().unwrap().iter().cloned().collect()
    }

    /// The CR's `status.outdatedVirtualMachineInstanceWorkloads` (virt-controller's count).
    pub async fn outdated(&self) -> Option<i64> {
        get(&self.client, "KubeVirt", NS, "kubevirt").await["status"]
            ["outdatedVirtualMachineInstanceWorkloads"]
            .as_i64()
    }

    /// Waits until the updater counts `n` outdated VMIs (its sync ran after the upgrade).
    pub async fn wait_outdated(&self, n: i64, within: Duration) {
        let start = Instant::now();
        while self.outdated().await != Some(n) {
            assert!(
                start.elapsed() < within,
                "the workload updater counted {:?} outdated VMIs, not {n}, within {within:?}; \
                 virt-controller's log:\n{}",
                self.outdated().await,
                self.controller_log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `check` holds of the workload-update migrations, for at most `within`; how
    /// long after the call it held.
    pub async fn wait_migrations(
        &self,
        what: &str,
        within: Duration,
        check: impl Fn(&[String]) -> bool,
    ) -> Duration {
        let read = async || self.workload_update_migrations().await;
        self.poll(what, within, read, |m| check(m)).await
    }

    /// Waits up to 60 s for the first workload-update migration (`what`); how long after the call.
    pub async fn first_migration(&self, what: &str) -> Duration {
        let within = Duration::from_secs(60);
        self.wait_migrations(what, within, |m| !m.is_empty()).await
    }

    /// Waits until at least `n` launcher pods are evicted, for at most `within`; how long after
    /// the call.
    pub async fn wait_evicted(&self, n: usize, within: Duration) -> Duration {
        let what = format!("{n} evictions");
        let read = async || self.evicted().await;
        self.poll(&what, within, read, |e| e.len() >= n).await
    }

    /// Reads with `read` every 100 ms until `done` holds of what it read, for at most `within`;
    /// how long after the call. A failure names `what`, the last read and virt-controller's log.
    async fn poll(
        &self,
        what: &str,
        within: Duration,
        read: impl AsyncFn() -> Vec<String>,
        done: impl Fn(&[String]) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let got = read().await;
            if done(&got) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "{what}: not within {within:?}; so far for {got:?}; virt-controller's log (tail):\n{}",
                tail(&self.controller_log(), 30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Watches for `period`: no workload-update migration and no eviction may appear.
    pub async fn none_for(&self, period: Duration) {
        let start = Instant::now();
        while start.elapsed() < period {
            let m = self.workload_update_migrations().await;
            let e = self.evicted().await;
            assert!(
                m.is_empty() && e.is_empty(),
                "while suspended, after {:?}: migrations for {m:?}, evictions of {e:?}",
                start.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The scheduler's binding (unless bound already) and the kubelet's status: the pod Running and
/// Ready on `node`.
pub async fn run_pod(client: &Client, pod: &Value, node: &str) -> Result<(), kube::Error> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        let binding = json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": VM_NS},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let req = http::Request::post(format!("/api/v1/namespaces/{VM_NS}/pods/{name}/binding"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&binding).unwrap())
            .unwrap();
        client.request_text(req).await?;
    }
    let now = super::harvester::now_rfc3339();
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": c["image"], "ready": true,
                   "started": true, "restartCount": 0, "containerID": format!("containerd://{}", c["name"].as_str().unwrap_or_default()),
                   "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), VM_NS);
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}], "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": statuses}})),
    )
    .await?;
    Ok(())
}

/// The CR's `spec.configuration`: no feature gates, and `extra` merged in.
fn kubevirt_configuration(extra: Value) -> Value {
    let mut configuration = json!({"developerConfiguration": {"featureGates": []}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        configuration[k] = v.clone();
    }
    configuration
}

/// The last `n` lines of virt-controller's log, without its certificate reloads.
fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s
        .lines()
        .filter(|l| !l.contains("certificate with common name"))
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for KubeVirtCluster {
    fn drop(&mut self) {
        self.stop_controller();
        let _ = Command::new("bash")
            .arg(repo_root().join("hack/kubevirt.sh"))
            .arg("stop")
            .arg(self.disruption_dir())
            .output();
        let _ = Command::new("bash")
            .arg(repo_root().join("hack/control-plane.sh"))
            .arg("down")
            .arg(&self.cp.dir)
            .output();
    }
}
