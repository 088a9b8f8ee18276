//! Models of Harvester's own handling of the methods in an upgrade, release by release, acting on
//! the real API server with the same writes as the originals (verb, patch type, field manager),
//! driven step by step by the tests (docs/design.md, "Harvester's own handling"). Read from
//! harvester/harvester (`package/upgrade/upgrade_manifests.sh`,
//! `pkg/controller/master/upgrade/upgrade_controller.go`, tags v1.7.0 to v1.9.0-rc6) and
//! harvester/upgrade-toolkit. Where their code does not say (the exact jq of a script, whether a
//! cleanup prunes an emptied map), the model takes the plainest reading and says so.
//!
//! Field managers: kubectl names its writes `kubectl-patch` and `kubectl-annotate`; Harvester's
//! controller (binary `harvester`, no field manager set) is `harvester`; the add-on (binary
//! `upgrade-toolkit`) is `upgrade-toolkit`.

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use workload_update_guard::model::METHODS_POINTER;
use workload_update_guard::plan::harvester_upgrade::{
    BACKUP_ANNOTATION, CLEANUP_DONE, CLEANUP_LABEL, STATE_LABEL,
};

use super::harvester_controller::{HarvesterController, setters};
use super::*;

fn api(client: &Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &resource(kind))
}

/// A merge patch as `manager` (kubectl's `patch --type merge`, controller-runtime's MergeFrom).
pub async fn merge_patch(
    client: &Client,
    kind: &str,
    ns: &str,
    name: &str,
    manager: &str,
    patch: Value,
) {
    let pp = PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    };
    api(client, kind, ns)
        .patch(name, &pp, &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("{manager}'s merge patch of {kind} {ns}/{name}: {e}"));
}

/// A full Update (PUT) of `obj` as `manager`: what a typed client's `Update` sends.
pub async fn put(client: &Client, kind: &str, manager: &str, obj: &Value) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap();
    let pp = PostParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    };
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    api(client, kind, ns)
        .replace(name, &pp, &o)
        .await
        .unwrap_or_else(|e| panic!("{manager}'s update of {kind} {ns}/{name}: {e}"));
}

const VALUES: &str = "/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods";

/// The ManagedChart's values key, as the script reads it (`null` when absent).
async fn values_key(client: &Client, ns: &str) -> Value {
    let mc = get(client, "ManagedChart", ns, "harvester").await;
    mc.pointer(VALUES).cloned().unwrap_or(Value::Null)
}

/// One Harvester `Upgrade` (`upgrades.harvesterhci.io/v1beta1`) in the KubeVirt CR's namespace.
pub struct Upgrade {
    pub ns: String,
    pub name: String,
}

impl Upgrade {
    /// The user's creation (a spec only), wrangler's finalizer, and the controller's first pass
    /// (`upgrade_controller.go` `resetLatestUpgradeLabel` and `initStatus`: the latest label moves
    /// to it, `PreparingLoggingInfra`, Completed Unknown), each a whole-object Update as
    /// `harvester` (`support::harvester_controller`).
    pub async fn start(client: &Client, ns: &str, name: &str, version: &str) -> Upgrade {
        HarvesterController::create(client, ns, name, version).await;
        Upgrade {
            ns: ns.into(),
            name: name.into(),
        }
    }

    /// The controller's handlers for this Upgrade.
    pub fn controller(&self, client: &Client) -> HarvesterController {
        HarvesterController {
            client: client.clone(),
            ns: self.ns.clone(),
            name: self.name.clone(),
            nodes: vec!["node-0".into()],
        }
    }

    pub async fn get(&self, client: &Client) -> Value {
        get(client, "Upgrade", &self.ns, &self.name).await
    }

    /// The backup annotation as Harvester left it, if any.
    pub async fn backup(&self, client: &Client) -> Option<String> {
        self.get(client).await["metadata"]["annotations"][BACKUP_ANNOTATION]
            .as_str()
            .map(str::to_string)
    }

    /// v1.7.2+, v1.8.1+, v1.9: `upgrade_manifests.sh` `disable_kubevirt_workload_live_migration`
    /// in the apply-manifests job (which runs with the ManagedCharts paused): the values key read as JSON (`null` when absent) and written
    /// once to the Upgrade (`kubectl annotate`, only if not there yet); unless already `[]`, the
    /// values merge-patched to `[]` (`kubectl patch --type merge`), the chart unpaused, waited
    /// for (here: Fleet's deploy, by the real Helm 4), and paused again. It never writes the CR.
    pub async fn backup_and_suspend(&self, client: &Client, chart: &Path) {
        // The upgrade has paused the ManagedCharts by then; the chart's own upgrade unpauses it.
        self.paused(true);
        let current = values_key(client, &self.ns).await;
        if self.backup(client).await.is_none() {
            kubectl_ok(&[
                "-n",
                &self.ns,
                "annotate",
                "upgrades.harvesterhci.io",
                &self.name,
                &format!("{BACKUP_ANNOTATION}={current}"),
            ]);
        }
        if current != json!([]) {
            let patch = json!({"spec": {"values": {"kubevirt": {"spec": {"workloadUpdateStrategy":
                {"workloadUpdateMethods": []}}}}}});
            self.kubectl_merge(&patch);
            self.unpaused_deploy(client, chart).await;
        }
    }

    /// The script's `unpause`, wait for the chart (Fleet's deploy), `pause` again.
    async fn unpaused_deploy(&self, client: &Client, chart: &Path) {
        self.paused(false);
        // A conflict here is Fleet stuck, which the script would wait on: the tests assert the
        // deploys that matter themselves.
        let _ = fleet_deploy(client, &self.ns, chart).await;
        self.paused(true);
    }

    /// `kubectl patch managedchart harvester --type merge` of `spec.paused`.
    fn paused(&self, paused: bool) {
        self.kubectl_merge(&json!({"spec": {"paused": paused}}));
    }

    /// The script's `kubectl patch managedchart harvester --type merge -p PATCH`.
    fn kubectl_merge(&self, patch: &Value) {
        kubectl_ok(&[
            "-n",
            &self.ns,
            "patch",
            "managedcharts.management.cattle.io",
            "harvester",
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ]);
    }

    /// Later in the upgrade, the harvester chart itself is upgraded: unpaused, and deployed by
    /// Fleet (the real Helm 4). The deploy's result is Helm's.
    pub async fn upgrade_chart(&self, client: &Client, chart: &Path) -> Result<(), String> {
        self.paused(false);
        fleet_deploy(client, &self.ns, chart).await
    }

    /// The upgrade ends, in one Update as `harvester` (`common.go` `markComplete`, called by the
    /// setter of the last condition): on success NodesUpgraded True (SystemServicesUpgraded True
    /// too, where the test skipped that step), on failure NodesUpgraded False; then Completed
    /// True or False, the state label and the cleanup label `Pending`. The conditions' times are
    /// wrangler's: `lastUpdateTime` where a value changed, never `lastTransitionTime`.
    pub async fn finish(&self, client: &Client, succeeded: bool) {
        self.controller(client)
            .must(|u| {
                let now = now_rfc3339();
                if succeeded {
                    setters::system_services(u, "True", "", "", &now);
                    setters::condition(u, "NodesUpgraded", "True", "", "", &now);
                } else {
                    let msg = "Job has reached the specified backoff limit";
                    setters::node_status(u, "node-0", "Failed", "BackoffLimitExceeded", msg, &now);
                }
            })
            .await;
    }

    /// The upgrade ends (`finish`) while `post` waits for it, which must then end within 5 s;
    /// its run. `what` names the wait in the failure.
    pub async fn finish_then_post(
        &self,
        client: &Client,
        succeeded: bool,
        post: tokio::task::JoinHandle<Run>,
        what: &str,
    ) -> Run {
        let ended = Instant::now();
        self.finish(client, succeeded).await;
        let run = tokio::time::timeout(Duration::from_secs(5), post)
            .await
            .unwrap_or_else(|_| panic!("{what} within 5 s of the end"))
            .unwrap();
        assert!(ended.elapsed() < Duration::from_secs(5));
        run
    }

    /// v1.7.2+: `upgrade_controller.go` `cleanup()` → `enableKubevirtWorkloadLiveMigrate`: a full
    /// Update of the ManagedChart as `harvester`: backup `null` deletes the key (the emptied map
    /// stays: the code deletes the one key); any other backup is put back (parent maps created);
    /// no annotation: `[LiveMigrate]` if the key exists (legacy). Then the cleanup's end label.
    pub async fn cleanup_values(&self, client: &Client) {
        let backup = self.backup(client).await;
        let mut mc = get(client, "ManagedChart", &self.ns, "harvester").await;
        let has_key = mc.pointer(VALUES).is_some();
        let write = match backup.as_deref() {
            Some("null") => {
                if let Some(s) = mc
                    .pointer_mut("/spec/values/kubevirt/spec/workloadUpdateStrategy")
                    .and_then(Value::as_object_mut)
                {
                    s.remove("workloadUpdateMethods");
                }
                has_key
            }
            Some(b) => {
                let v: Value = serde_json::from_str(b).unwrap();
                set_path(&mut mc, VALUES, v);
                true
            }
            None if has_key => {
                set_path(&mut mc, VALUES, json!(["LiveMigrate"]));
                true
            }
            None => false,
        };
        if write {
            put(client, "ManagedChart", "harvester", &mc).await;
        }
        self.cleaned_up(client).await;
    }

    /// v1.8.0 (harvester#10386), the apply-manifests job: the CR merge-patched to `[]` (kubectl,
    /// so `kubectl-patch`) and the pointer added to the ManagedChart's entry for
    /// `kubevirt.io/v1 KubeVirt kubevirt`, only if absent (a new entry if there is none; the list
    /// is rewritten whole by a merge patch, as a script with jq does).
    pub async fn v180_suspend(&self, client: &Client) {
        set_methods(client, &self.ns, "kubectl-patch", json!([])).await;
        add_pointer(client, &self.ns, "kubectl-patch").await;
    }

    /// v1.8.0, at its cleanup: an Update (PUT) of the CR to a hard-coded `[LiveMigrate]` and the
    /// pointer removed from every KubeVirt entry (an entry left with no pointer dropped), both as
    /// `harvester`. Then the cleanup's end label.
    pub async fn v180_cleanup(&self, client: &Client) {
        let mut kv = get(client, "KubeVirt", &self.ns, "kubevirt").await;
        set_path(
            &mut kv,
            "/spec/workloadUpdateStrategy/workloadUpdateMethods",
            json!(["LiveMigrate"]),
        );
        put(client, "KubeVirt", "harvester", &kv).await;
        let mut mc = get(client, "ManagedChart", &self.ns, "harvester").await;
        if remove_pointer(&mut mc) {
            put(client, "ManagedChart", "harvester", &mc).await;
        }
        self.cleaned_up(client).await;
    }

    /// The controller moves the state label on (`upgrade_controller.go` and `job_controller.go`
    /// set `harvesterhci.io/upgradeState` in a whole-object Update of the Upgrade as `harvester`).
    pub async fn set_state(&self, client: &Client, state: &str) {
        self.label(client, &[(STATE_LABEL, state)]).await;
    }

    async fn cleaned_up(&self, client: &Client) {
        self.label(client, &[(CLEANUP_LABEL, CLEANUP_DONE)]).await;
    }

    /// The controller's labels on the Upgrade (a whole-object Update as `harvester`).
    async fn label(&self, client: &Client, labels: &[(&str, &str)]) {
        self.controller(client)
            .must(|u| {
                for (k, v) in labels {
                    setters::label(u, k, v);
                }
            })
            .await;
    }

    /// The Upgrade deleted mid-way: the API server marks it (wrangler's finalizer holds it), its
    /// `OnRemove` runs the cleanup, wrangler removes the finalizer, and it is gone.
    pub async fn delete_with_cleanup(&self, client: &Client) {
        api(client, "Upgrade", &self.ns)
            .delete(&self.name, &Default::default())
            .await
            .unwrap();
        self.cleanup_values(client).await;
        self.controller(client).on_remove().await;
    }
}

/// The upgrade-manager add-on (upgrade-toolkit), PreRun of ClusterUpgrade: the CR merge-patched
/// to `[]` (controller-runtime `MergeFrom`, only if it differs; an absent field counts as `[]`),
/// and the pointer added to the ManagedChart (a merge patch of the whole list).
pub async fn addon_prerun(client: &Client, ns: &str) {
    let kv = get(client, "KubeVirt", ns, "kubevirt").await;
    let m = kv.pointer("/spec/workloadUpdateStrategy/workloadUpdateMethods");
    if m.is_some_and(|m| *m != json!([])) {
        set_methods(client, ns, "upgrade-toolkit", json!([])).await;
    }
    add_pointer(client, ns, "upgrade-toolkit").await;
}

/// The add-on's Finalize (success, failure, plan deletion): the CR merge-patched to a hard-coded
/// `[LiveMigrate]`, no backup; the pointer removed (a merge patch of the whole list).
pub async fn addon_finalize(client: &Client, ns: &str) {
    set_methods(client, ns, "upgrade-toolkit", json!(["LiveMigrate"])).await;
    let mut mc = get(client, "ManagedChart", ns, "harvester").await;
    if remove_pointer(&mut mc) {
        let list = mc["spec"]["diff"]["comparePatches"].clone();
        merge_patch(
            client,
            "ManagedChart",
            ns,
            "harvester",
            "upgrade-toolkit",
            json!({"spec": {"diff": {"comparePatches": list}}}),
        )
        .await;
    }
}

/// A merge patch of the CR's methods as `manager`.
pub async fn set_methods(client: &Client, ns: &str, manager: &str, methods: Value) {
    let patch = json!({"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": methods}}});
    merge_patch(client, "KubeVirt", ns, "kubevirt", manager, patch).await;
}

fn is_kubevirt_entry(e: &Value) -> bool {
    e["apiVersion"] == "kubevirt.io/v1" && e["kind"] == "KubeVirt" && e["name"] == "kubevirt"
}

/// Adds the pointer to the first KubeVirt entry, or a new entry; a merge patch of the list.
async fn add_pointer(client: &Client, ns: &str, manager: &str) {
    let mc = get(client, "ManagedChart", ns, "harvester").await;
    let mut list = mc["spec"]["diff"]["comparePatches"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has = list.iter().any(|e| {
        is_kubevirt_entry(e)
            && e["jsonPointers"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p == METHODS_POINTER))
    });
    if has {
        return;
    }
    match list.iter_mut().find(|e| is_kubevirt_entry(e)) {
        Some(e) => {
            let mut p = e["jsonPointers"].as_array().cloned().unwrap_or_default();
            p.push(json!(METHODS_POINTER));
            e["jsonPointers"] = Value::Array(p);
        }
        None => list.push(json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                                  "name": "kubevirt", "jsonPointers": [METHODS_POINTER]})),
    }
    merge_patch(
        client,
        "ManagedChart",
        ns,
        "harvester",
        manager,
        json!({"spec": {"diff": {"comparePatches": list}}}),
    )
    .await;
}

/// Removes the pointer from every KubeVirt entry, dropping an entry left with no pointer
/// (Harvester's `filter_compare_patches_test.go`); whether anything changed.
fn remove_pointer(mc: &mut Value) -> bool {
    let Some(list) = mc
        .pointer_mut("/spec/diff/comparePatches")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let before = list.clone();
    list.retain_mut(|e| {
        if !is_kubevirt_entry(e) {
            return true;
        }
        if let Some(p) = e["jsonPointers"].as_array_mut() {
            p.retain(|p| p != METHODS_POINTER);
            return !p.is_empty();
        }
        true
    });
    *list != before
}

/// Sets the value at a JSON pointer, creating parent maps.
fn set_path(obj: &mut Value, ptr: &str, v: Value) {
    let mut node = obj;
    let segs: Vec<&str> = ptr.trim_start_matches('/').split('/').collect();
    for seg in &segs[..segs.len() - 1] {
        node = node
            .as_object_mut()
            .unwrap()
            .entry(seg.to_string())
            .or_insert_with(|| json!({}));
    }
    node[segs[segs.len() - 1]] = v;
}

/// A `Version` the cluster can upgrade to (`versions.harvesterhci.io/v1beta1`), named after it.
pub async fn offer_version(client: &Client, ns: &str, version: &str) {
    create(
        client,
        "Version",
        ns,
        json!({"apiVersion": "harvesterhci.io/v1beta1", "kind": "Version",
               "metadata": {"name": version, "namespace": ns},
               "spec": {"isoURL": format!("https://releases.invalid/harvester/{version}/harvester-{version}-amd64.iso"),
                        "releaseDate": "2026-10-01"}}),
    )
    .await;
}

/// Harvester's own version: the cluster-scoped `Setting` `server-version` (shared by every test
/// of the binary: only releases are compared with it).
pub async fn server_version(client: &Client, version: &str) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource("Setting"));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "harvesterhci.io/v1beta1", "kind": "Setting",
        "metadata": {"name": "server-version"}, "value": version}))
    .unwrap();
    let pp = PatchParams::apply("harvester").force();
    api.patch("server-version", &pp, &Patch::Apply(&obj))
        .await
        .unwrap();
}

/// The upgrade-manager add-on's `UpgradePlan` (upgrade-toolkit `api/v1beta1/upgradeplan_types.go`,
/// cluster-scoped), created as its webhook admits it (no status yet) and moved through its
/// phases as its controller does: a merge patch of the status subresource as `upgrade-toolkit`.
pub struct UpgradePlan {
    pub name: String,
}

impl UpgradePlan {
    pub async fn create(client: &Client, name: &str, version: &str) -> UpgradePlan {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource("UpgradePlan"));
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "management.harvesterhci.io/v1beta1", "kind": "UpgradePlan",
            "metadata": {"name": name}, "spec": {"version": version}}))
        .unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
        let plan = UpgradePlan { name: name.into() };
        plan.cached(client, None).await;
        plan
    }

    /// Waits until the API server's watch cache, which the guard lists from, shows the plan
    /// (with `phase`): right after a write, a list from the cache may not show it yet, and the
    /// test's next step must not race that (an upgrade's phases are minutes apart).
    async fn cached(&self, client: &Client, phase: Option<&str>) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource("UpgradePlan"));
        for _ in 0..200 {
            let list = api
                .list(&kube::api::ListParams::default().match_any())
                .await
                .unwrap();
            let seen = list.items.iter().any(|p| {
                p.metadata.name.as_deref() == Some(self.name.as_str())
                    && phase.is_none_or(|ph| p.data["status"]["currentPhase"] == ph)
            });
            if seen {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("UpgradePlan {} not in the watch cache", self.name);
    }

    /// `status.currentPhase` (the fixture's field), and one more entry of
    /// `status.phaseTransitionTimestamps` (`{phase, phaseTransitionTimestamp}`), as
    /// upgrade-toolkit's status shows one per phase it went through.
    pub async fn set_phase(&self, client: &Client, phase: &str) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource("UpgradePlan"));
        let pp = PatchParams {
            field_manager: Some("upgrade-toolkit".into()),
            ..Default::default()
        };
        let now = api.get(&self.name).await.unwrap();
        let mut times = now.data["status"]["phaseTransitionTimestamps"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        times.push(json!({"phase": phase, "phaseTransitionTimestamp": now_rfc3339()}));
        api.patch_status(
            &self.name,
            &pp,
            &Patch::Merge(json!({"status": {"currentPhase": phase,
                "phaseTransitionTimestamps": times}})),
        )
        .await
        .unwrap();
        self.cached(client, Some(phase)).await;
    }

    pub async fn delete(&self, client: &Client) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource("UpgradePlan"));
        let _ = api.delete(&self.name, &Default::default()).await;
    }
}

/// Now, as the API server writes times: RFC 3339, whole seconds, UTC.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
