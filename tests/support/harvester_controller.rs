//! A model of Harvester's upgrade controller as it writes its `Upgrade`
//! (`upgrades.harvesterhci.io/v1beta1`), read from harvester/harvester v1.7.1
//! `pkg/controller/master/upgrade/` (the same order on v1.6 and master):
//!
//! - every write is a whole-object Update (PUT) of the Upgrade as `harvester` (the binary's name,
//!   client-go's default manager): the generated `upgradeClient.Update(toUpdate)` of a DeepCopy
//!   of the cached object. The CRD has no status subresource, so labels, annotations and
//!   conditions all go through that one verb;
//! - conditions change as wrangler v3.2.4 `pkg/condition/condition.go` changes them
//!   (`SetStatus`, `Reason`, `Message` → `setValue` → `touchTS`): a new value sets
//!   `lastUpdateTime` (RFC 3339, whole seconds, UTC); `Reason` sets without a touch;
//!   `findOrCreateCond` appends `{type, status: Unknown}` without a time; and nothing ever writes
//!   `lastTransitionTime`. Harvester's `Condition` (`pkg/apis/harvesterhci.io/v1beta1/image.go`)
//!   marshals empty strings away (`omitempty`), `status` always;
//! - a handler that gets an error from its Update returns it, and lasso requeues the key with its
//!   default rate limiter (rancher/lasso `pkg/controller/controller.go` `applyDefaultOptions`:
//!   the max of `ItemFastSlowRateLimiter(1ms, 2min, 30)` and
//!   `ItemExponentialFailureRateLimiter(5ms, 30s)`): 5 ms doubling to 30 s, then 2 min from the
//!   31st retry. The next attempt reads the cache again and redoes the same edit.
//!
//! The model's time runs `TIME_SCALE` times faster than lasso's (its 30 s are 1.5 s here), so
//! that a test sees many retries; the order of the writes and their content are Harvester's.

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use workload_update_guard::plan::harvester_upgrade::{CLEANUP_LABEL, LATEST_LABEL, STATE_LABEL};

use super::harvester::now_rfc3339;
use super::*;

/// Harvester's controller's field manager (the binary `/usr/bin/harvester`).
pub const MANAGER: &str = "harvester";
/// lasso's time, compressed for tests: one model second is `1/TIME_SCALE` s.
pub const TIME_SCALE: u32 = 20;
/// wrangler's `OnRemove` finalizer for the `harvester-upgrade-controller` handler
/// (wrangler v3 `pkg/generic/remove.go`: `wrangler.cattle.io/` + the handler's name).
pub const FINALIZER: &str = "wrangler.cattle.io/harvester-upgrade-controller";
/// `plan_controller.go` and `upgrade_controller.go` annotations the model writes.
pub const IMAGE_CLEANUP_DONE: &str = "harvesterhci.io/image-cleanup-plan-completed";
pub const LONGHORN_RESTORED: &str = "harvesterhci.io/longhorn-settings-restored";
pub const REPLICA_REPLENISHMENT: &str = "harvesterhci.io/replica-replenishment-wait-interval";

/// wrangler v3.2.4 `pkg/condition/condition.go`, on an object's `status.conditions` as JSON.
pub mod wrangler {
    use serde_json::{Value, json};

    fn conditions(obj: &mut Value) -> &mut Vec<Value> {
        if !obj["status"].is_object() {
            obj["status"] = json!({});
        }
        let list = &mut obj["status"]["conditions"];
        if !list.is_array() {
            *list = json!([]);
        }
        list.as_array_mut().unwrap()
    }

    /// `findOrCreateCond`: a new condition is `{type, status: Unknown}`, no time.
    fn find_or_create<'a>(obj: &'a mut Value, ty: &str) -> &'a mut Value {
        let list = conditions(obj);
        let i = match list.iter().position(|c| c["type"] == ty) {
            Some(i) => i,
            None => {
                list.push(json!({"type": ty, "status": "Unknown"}));
                list.len() - 1
            }
        };
        &mut list[i]
    }

    fn field<'a>(cond: &'a Value, name: &str) -> &'a str {
        cond[name].as_str().unwrap_or("")
    }

    /// `setValue`: only a changed value is written, and then `touchTS` sets `lastUpdateTime`.
    fn set_value(cond: &mut Value, name: &str, new: &str, now: &str) {
        if field(cond, name) != new {
            set_string(cond, name, new);
            set_string(cond, "lastUpdateTime", now);
        }
    }

    /// A Go string field marshalled with `omitempty` (all but `type` and `status`).
    fn set_string(cond: &mut Value, name: &str, v: &str) {
        let map = cond.as_object_mut().unwrap();
        if v.is_empty() && name != "status" {
            map.remove(name);
        } else {
            map.insert(name.into(), json!(v));
        }
    }

    /// `GetStatus`: "" when there is no such condition.
    pub fn status(obj: &Value, ty: &str) -> String {
        obj.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|l| l.iter().find(|c| c["type"] == ty))
            .map(|c| field(c, "status").to_string())
            .unwrap_or_default()
    }

    pub fn set_status(obj: &mut Value, ty: &str, status: &str, now: &str) {
        set_value(find_or_create(obj, ty), "status", status, now);
    }

    /// `Reason`: `SetString`, no touch.
    pub fn reason(obj: &mut Value, ty: &str, reason: &str) {
        set_string(find_or_create(obj, ty), "reason", reason);
    }

    pub fn message(obj: &mut Value, ty: &str, message: &str, now: &str) {
        set_value(find_or_create(obj, ty), "message", message, now);
    }

    pub fn create_unknown_if_not_exists(obj: &mut Value, ty: &str) {
        find_or_create(obj, ty);
    }

    /// `LastUpdated`: sets the time whatever the value.
    pub fn last_updated(obj: &mut Value, ty: &str, ts: &str) {
        set_string(find_or_create(obj, ty), "lastUpdateTime", ts);
    }
}

/// `common.go`'s setters and `markComplete`, on the Upgrade as JSON.
pub mod setters {
    use serde_json::{Value, json};
    use workload_update_guard::plan::harvester_upgrade::{CLEANUP_LABEL, STATE_LABEL};

    use super::wrangler;

    pub fn label(obj: &mut Value, key: &str, value: &str) {
        if !obj["metadata"]["labels"].is_object() {
            obj["metadata"]["labels"] = json!({});
        }
        obj["metadata"]["labels"][key] = json!(value);
    }

    pub fn annotate(obj: &mut Value, key: &str, value: &str) {
        if !obj["metadata"]["annotations"].is_object() {
            obj["metadata"]["annotations"] = json!({});
        }
        obj["metadata"]["annotations"][key] = json!(value);
    }

    /// `setLogReadyCondition`, `setImageReadyCondition`, `setRepoProvisionedCondition`,
    /// `setNodesPreparedCondition`, `setNodesUpgradedCondition`: status, reason, message, then
    /// `markComplete`.
    pub fn condition(
        obj: &mut Value,
        ty: &str,
        status: &str,
        reason: &str,
        message: &str,
        now: &str,
    ) {
        wrangler::set_status(obj, ty, status, now);
        wrangler::reason(obj, ty, reason);
        wrangler::message(obj, ty, message, now);
        mark_complete(obj, now);
    }

    /// `setHelmChartUpgradeStatus`: once True or False, never again.
    pub fn system_services(obj: &mut Value, status: &str, reason: &str, message: &str, now: &str) {
        let now_status = wrangler::status(obj, "SystemServicesUpgraded");
        if now_status == "True" || now_status == "False" {
            return;
        }
        condition(obj, "SystemServicesUpgraded", status, reason, message, now);
    }

    /// `setUpgradeCompletedCondition`: the state label and `Completed`, no cleanup label.
    pub fn completed(
        obj: &mut Value,
        state: &str,
        status: &str,
        reason: &str,
        message: &str,
        now: &str,
    ) {
        label(obj, STATE_LABEL, state);
        wrangler::set_status(obj, "Completed", status, now);
        wrangler::reason(obj, "Completed", reason);
        wrangler::message(obj, "Completed", message, now);
    }

    /// `markComplete`.
    pub fn mark_complete(obj: &mut Value, now: &str) {
        let is = |obj: &Value, ty: &str, s: &str| wrangler::status(obj, ty) == s;
        if is(obj, "SystemServicesUpgraded", "True") && is(obj, "NodesUpgraded", "True") {
            wrangler::set_status(obj, "Completed", "True", now);
            label(obj, STATE_LABEL, "Succeeded");
            label(obj, CLEANUP_LABEL, "Pending");
        }
        let failed = [
            "ImageReady",
            "RepoReady",
            "SystemServicesUpgraded",
            "NodesUpgraded",
        ]
        .iter()
        .any(|ty| is(obj, ty, "False"));
        if failed {
            wrangler::set_status(obj, "Completed", "False", now);
            label(obj, STATE_LABEL, "Failed");
            label(obj, CLEANUP_LABEL, "Pending");
        }
    }

    /// `setNodeUpgradeStatus`: one node's state; a failed node fails `NodesUpgraded`; at
    /// `UpgradingNodes`, every node `Succeeded` makes it True.
    pub fn node_status(
        obj: &mut Value,
        node: &str,
        state: &str,
        reason: &str,
        message: &str,
        now: &str,
    ) {
        if !obj["status"]["nodeStatuses"].is_object() {
            obj["status"]["nodeStatuses"] = json!({});
        }
        let mut entry = json!({"state": state});
        for (k, v) in [("reason", reason), ("message", message)] {
            if !v.is_empty() {
                entry[k] = json!(v);
            }
        }
        if obj["status"]["nodeStatuses"][node] == entry {
            return;
        }
        obj["status"]["nodeStatuses"][node] = entry;
        if state == "Failed" {
            condition(obj, "NodesUpgraded", "False", reason, message, now);
            return;
        }
        if obj["metadata"]["labels"][STATE_LABEL] == "UpgradingNodes" {
            let all = obj["status"]["nodeStatuses"].as_object().unwrap();
            if all.values().all(|n| n["state"] == "Succeeded") {
                condition(obj, "NodesUpgraded", "True", "", "", now);
            }
        }
    }
}

/// The refusal of an Update: the API server's status message (an admission denial, a conflict).
pub type Refusal = String;

/// The delay before lasso's `n`-th requeue (0-based) of a failing key, in lasso's time.
pub fn lasso_delay(n: u32) -> Duration {
    let fast_slow = if n < 30 {
        Duration::from_millis(1)
    } else {
        Duration::from_secs(120)
    };
    let exponential = Duration::from_millis(5)
        .saturating_mul(2u32.saturating_pow(n.min(20)))
        .min(Duration::from_secs(30));
    fast_slow.max(exponential)
}

/// What the retried write saw: the refusals in order, and when it passed (None: not yet, or not
/// within the bound). Shared, so that a test reads it while the retries go on.
#[derive(Debug, Clone, Default)]
pub struct Retried {
    pub refusals: Vec<Refusal>,
    pub passed: Option<Instant>,
}

pub type Seen = std::sync::Arc<std::sync::Mutex<Retried>>;

/// The controller's handlers for one Upgrade.
#[derive(Clone)]
pub struct HarvesterController {
    pub client: Client,
    pub ns: String,
    pub name: String,
    /// The cluster's nodes (`nodeStatuses` keys).
    pub nodes: Vec<String>,
}

impl HarvesterController {
    fn api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &resource("Upgrade"))
    }

    /// The user's (the UI's) creation: a spec only. Then wrangler's `OnRemove` adds its
    /// finalizer (an Update), and `OnChanged` initialises it (`init_status`).
    pub async fn create(
        client: &Client,
        ns: &str,
        name: &str,
        version: &str,
    ) -> HarvesterController {
        let c = HarvesterController {
            client: client.clone(),
            ns: ns.into(),
            name: name.into(),
            nodes: vec!["node-0".into()],
        };
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "harvesterhci.io/v1beta1", "kind": "Upgrade",
            "metadata": {"name": name, "namespace": ns}, "spec": {"version": version}}))
        .unwrap();
        c.api()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create Upgrade {ns}/{name}: {e}"));
        c.must(|u| {
            let fin = &mut u["metadata"]["finalizers"];
            if !fin.is_array() {
                *fin = json!([]);
            }
            fin.as_array_mut().unwrap().push(json!(FINALIZER));
        })
        .await;
        c.init_status("v1.6.1").await;
        c
    }

    pub async fn get(&self) -> Value {
        get(&self.client, "Upgrade", &self.ns, &self.name).await
    }

    /// One handler's write: the object as read, edited, PUT whole as `harvester`.
    pub async fn update(&self, edit: impl FnOnce(&mut Value)) -> Result<Value, Refusal> {
        let mut obj = self.get().await;
        edit(&mut obj);
        put_upgrade(&self.client, &obj).await
    }

    /// A write that must pass: conflicts are requeued and redone (as lasso does), any other
    /// refusal fails the test.
    pub async fn must(&self, edit: impl Fn(&mut Value)) -> Value {
        for _ in 0..20 {
            match self.update(&edit).await {
                Ok(v) => return v,
                Err(e) if e.contains("the object has been modified") => continue,
                Err(e) => panic!(
                    "Harvester's Update of Upgrade {}/{} refused: {e}",
                    self.ns, self.name
                ),
            }
        }
        panic!(
            "Harvester's Update of Upgrade {}/{} kept conflicting",
            self.ns, self.name
        )
    }

    /// The write retried on every refusal with lasso's backoff (`TIME_SCALE` times faster), for
    /// at most `within`; what it saw, also in `seen` as it goes.
    pub async fn retried(
        &self,
        edit: impl Fn(&mut Value),
        within: Duration,
        seen: &Seen,
    ) -> Retried {
        let start = Instant::now();
        let mut n = 0;
        loop {
            let result = self.update(&edit).await;
            let passed = {
                let mut s = seen.lock().unwrap();
                match result {
                    Ok(_) => s.passed = Some(Instant::now()),
                    Err(e) => s.refusals.push(e),
                }
                s.passed.is_some()
            };
            if passed || start.elapsed() >= within {
                return seen.lock().unwrap().clone();
            }
            tokio::time::sleep(lasso_delay(n) / TIME_SCALE).await;
            n += 1;
        }
    }

    /// `upgrade_controller.go` `OnChanged`, first pass: `resetLatestUpgradeLabel` (an Update of
    /// each other latest Upgrade), then `initStatus` with the log enabled: Completed Unknown,
    /// `PreparingLoggingInfra`, `latestUpgrade`, `previousVersion`, LogReady Unknown with its
    /// time (`LastUpdated`), and the UpgradeLog's name.
    pub async fn init_status(&self, previous: &str) {
        let others = self.api().list(&Default::default()).await.unwrap().items;
        for o in others {
            let is_latest = o.metadata.labels.as_ref().and_then(|l| l.get(LATEST_LABEL))
                == Some(&"true".to_string());
            if o.metadata.name.as_deref() != Some(&self.name) && is_latest {
                let mut v = serde_json::to_value(&o).unwrap();
                v["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove(LATEST_LABEL);
                put_upgrade(&self.client, &v)
                    .await
                    .expect("reset the latest label");
            }
        }
        let name = self.name.clone();
        let previous = previous.to_string();
        self.must(|u| {
            let now = now_rfc3339();
            wrangler::create_unknown_if_not_exists(u, "Completed");
            setters::label(u, STATE_LABEL, "PreparingLoggingInfra");
            setters::label(u, LATEST_LABEL, "true");
            u["status"]["previousVersion"] = json!(previous);
            u["status"]["upgradeLog"] = json!(format!("{name}-upgradelog"));
            wrangler::create_unknown_if_not_exists(u, "LogReady");
            wrangler::last_updated(u, "LogReady", &now);
        })
        .await;
    }

    /// `upgradelog/controller.go`: the logging infrastructure is up.
    pub async fn log_ready(&self) {
        self.must(|u| {
            let now = now_rfc3339();
            setters::label(u, STATE_LABEL, "LoggingInfraPrepared");
            wrangler::set_status(u, "LogReady", "True", &now);
            wrangler::reason(u, "LogReady", "");
            wrangler::message(u, "LogReady", "", &now);
        })
        .await;
    }

    /// The image from the ISO (`OnChanged`: ImageReady Unknown, `imageID`), then
    /// `image_controller.go` once imported: ImageReady True.
    pub async fn image_ready(&self) {
        let image = format!("{}/{}", self.ns, self.name);
        self.must(|u| {
            u["status"]["imageID"] = json!(image);
            wrangler::create_unknown_if_not_exists(u, "ImageReady");
        })
        .await;
        self.must(|u| setters::condition(u, "ImageReady", "True", "", "", &now_rfc3339()))
            .await;
    }

    /// The repo (`OnChanged`: `PreparingRepo`, RepoReady Unknown), then
    /// `deployment_controller.go` once it is ready: `RepoPrepared`, RepoReady True.
    pub async fn repo_ready(&self) {
        self.must(|u| {
            setters::label(u, STATE_LABEL, "PreparingRepo");
            wrangler::create_unknown_if_not_exists(u, "RepoReady");
        })
        .await;
        self.must(|u| {
            setters::label(u, STATE_LABEL, "RepoPrepared");
            setters::condition(u, "RepoReady", "True", "", "", &now_rfc3339());
        })
        .await;
    }

    /// `prepareNodesForUpgrade` with a preload Plan (`sequential`, `parallel`): the Plan created
    /// (not modelled), `PreparingNodes`, `singleNode`, `repoInfo`, NodesPrepared Unknown; then
    /// `job_controller.go` `syncPlanJob` for each node: `Images preloading`, `Images preloaded`.
    pub async fn prepare_nodes(&self) {
        let single = self.single_node();
        self.must(|u| {
            u["status"]["singleNode"] = json!(single);
            u["status"]["repoInfo"] = repo_info(u);
            setters::label(u, STATE_LABEL, "PreparingNodes");
            wrangler::create_unknown_if_not_exists(u, "NodesPrepared");
        })
        .await;
        for state in ["Images preloading", "Images preloaded"] {
            for node in &self.nodes {
                self.must(|u| setters::node_status(u, node, state, "", "", &now_rfc3339()))
                    .await;
            }
        }
    }

    /// The steps before the nodes' preparation, in order: the log, the image, the repo.
    pub async fn up_to_repo(&self) {
        self.log_ready().await;
        self.image_ready().await;
        self.repo_ready().await;
    }

    /// `up_to_repo`, then `prepare_nodes`: the upgrade waits for its NodesPrepared.
    pub async fn up_to_nodes_prepared(&self) {
        self.up_to_repo().await;
        self.prepare_nodes().await;
    }

    /// `nodes_prepared` in a task of its own (for at most `within`), and what it sees as it goes.
    pub fn nodes_prepared_in_background(
        &self,
        within: Duration,
    ) -> (tokio::task::JoinHandle<Retried>, Seen) {
        let seen: Seen = Default::default();
        let (hv, seen2) = (self.clone(), seen.clone());
        let task = tokio::spawn(async move { hv.nodes_prepared(within, &seen2).await });
        (task, seen)
    }

    /// `plan_controller.go` `OnChanged`, the preload Plan done on every node:
    /// `setNodesPreparedCondition(toUpdate, True)` and an Update, retried on refusal.
    pub async fn nodes_prepared(&self, within: Duration, seen: &Seen) -> Retried {
        self.retried(
            |u| setters::condition(u, "NodesPrepared", "True", "", "", &now_rfc3339()),
            within,
            seen,
        )
        .await
    }

    /// `prepareNodesForUpgrade` with the preload strategy `skip`: every node `Images preloaded`,
    /// `PreparingNodes`, `repoInfo` and NodesPrepared True in one Update, retried on refusal (the
    /// handler reruns from the repo info).
    pub async fn prepare_nodes_skipped(&self, within: Duration, seen: &Seen) -> Retried {
        let single = self.single_node();
        let nodes = self.nodes.clone();
        self.retried(
            |u| {
                let now = now_rfc3339();
                u["status"]["singleNode"] = json!(single);
                for node in &nodes {
                    setters::node_status(u, node, "Images preloaded", "", "", &now);
                }
                setters::label(u, STATE_LABEL, "PreparingNodes");
                u["status"]["repoInfo"] = repo_info(u);
                setters::condition(u, "NodesPrepared", "True", "", "", &now);
            },
            within,
            seen,
        )
        .await
    }

    fn single_node(&self) -> String {
        if self.nodes.len() == 1 {
            self.nodes[0].clone()
        } else {
            String::new()
        }
    }

    /// `OnChanged` once NodesPrepared is True: the `<name>-apply-manifests` Job created (here a
    /// suspended stand-in with Harvester's labels: no pod runs), then in the Update after it
    /// `UpgradingSystemServices` and SystemServicesUpgraded Unknown.
    pub async fn apply_manifests(&self) {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("{}-apply-manifests", self.name), "namespace": self.ns,
                         "labels": {"harvesterhci.io/upgrade": self.name,
                                    "harvesterhci.io/upgradeComponent": "manifest"}},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "apply", "image": "registry.invalid/harvester-upgrade:stand-in",
                                "command": ["upgrade_manifests.sh"]}]}}}});
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &kube::api::ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&()),
        );
        let job: DynamicObject = serde_json::from_value(job).unwrap();
        match api.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("the apply-manifests Job: {e}"),
        }
        self.must(|u| {
            setters::label(u, STATE_LABEL, "UpgradingSystemServices");
            setters::system_services(u, "Unknown", "", "", &now_rfc3339());
        })
        .await;
    }

    /// `job_controller.go` `syncManifestJob`: the Job's end as SystemServicesUpgraded.
    pub async fn system_services_upgraded(&self, ok: bool) {
        let (status, reason) = if ok {
            ("True", "")
        } else {
            ("False", "BackoffLimitExceeded")
        };
        self.must(|u| setters::system_services(u, status, reason, "", &now_rfc3339()))
            .await;
    }

    /// `OnChanged` once the system services are upgraded (multi-node): the Longhorn setting
    /// saved on the Upgrade, `UpgradingNodes`, NodesUpgraded Unknown.
    pub async fn upgrading_nodes(&self) {
        self.must(|u| {
            setters::annotate(u, REPLICA_REPLENISHMENT, "600");
            setters::label(u, STATE_LABEL, "UpgradingNodes");
            wrangler::create_unknown_if_not_exists(u, "NodesUpgraded");
        })
        .await;
    }

    /// `job_controller.go` `syncNodeJob` for one node: pre-drain to post-drain, then
    /// `Succeeded` (the last node's makes NodesUpgraded True, and `markComplete` the end) or
    /// `Failed` (NodesUpgraded False, the end as a failure).
    pub async fn node_upgraded(&self, node: &str, ok: bool) {
        for state in ["Pre-draining", "Pre-drained", "Post-draining"] {
            self.must(|u| setters::node_status(u, node, state, "", "", &now_rfc3339()))
                .await;
        }
        let (state, reason, message) = if ok {
            ("Succeeded", "", "")
        } else {
            (
                "Failed",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
        };
        self.must(|u| setters::node_status(u, node, state, reason, message, &now_rfc3339()))
            .await;
    }

    /// After a success: `plan_controller.go` marks the image-cleanup Plan done (an annotation),
    /// then `cleanup()` (the Longhorn settings restored, an annotation) and the cleanup's end
    /// label. After a failure, the same without the image cleanup.
    pub async fn cleanup(&self) {
        if wrangler::status(&self.get().await, "Completed") == "True" {
            self.must(|u| setters::annotate(u, IMAGE_CLEANUP_DONE, "true"))
                .await;
        }
        self.must(|u| setters::annotate(u, LONGHORN_RESTORED, "true"))
            .await;
        self.must(|u| setters::label(u, CLEANUP_LABEL, "Succeeded"))
            .await;
    }

    /// The Upgrade deleted: the API server sets `deletionTimestamp` (the finalizer holds it),
    /// then `on_remove`.
    pub async fn delete(&self) {
        self.api()
            .delete(&self.name, &Default::default())
            .await
            .unwrap();
        self.on_remove().await;
    }

    /// `OnRemove` runs `cleanup(upgrade, true)` (its Update of the Upgrade, if not done yet),
    /// then wrangler removes its finalizer (an Update) and the object is gone.
    pub async fn on_remove(&self) {
        if self.get().await["metadata"]["annotations"][LONGHORN_RESTORED].is_null() {
            self.must(|u| setters::annotate(u, LONGHORN_RESTORED, "true"))
                .await;
        }
        self.must(|u| {
            if let Some(f) = u["metadata"]["finalizers"].as_array_mut() {
                f.retain(|f| f != FINALIZER);
            }
        })
        .await;
        for _ in 0..100 {
            if get_opt(&self.client, "Upgrade", &self.ns, &self.name)
                .await
                .is_none()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "Upgrade {}/{} not gone after its finalizer",
            self.ns, self.name
        );
    }
}

/// Waits until the hold is in force in `ns` (whose KubeVirt CR has its methods on): on a probe
/// Upgrade to v1.7.1 (deleted after), a dry-run Update turning NodesPrepared True is refused and
/// a dry-run label change is not (the API server has read the policy, its binding and the
/// parameter; before it has, it may refuse every Update of an Upgrade). At most 20 s.
pub async fn wait_in_force(client: &Client, ns: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource("Upgrade"));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "harvesterhci.io/v1beta1", "kind": "Upgrade",
        "metadata": {"name": "hold-probe", "namespace": ns}, "spec": {"version": "v1.7.1"}}))
    .unwrap();
    let probe =
        serde_json::to_value(api.create(&PostParams::default(), &obj).await.unwrap()).unwrap();
    let start = Instant::now();
    loop {
        let mut turned = probe.clone();
        setters::condition(&mut turned, "NodesPrepared", "True", "", "", &now_rfc3339());
        let refused = put_upgrade_with(client, &turned, true).await.is_err();
        let mut labelled = probe.clone();
        setters::label(&mut labelled, "probe", "x");
        let label_passes = put_upgrade_with(client, &labelled, true).await.is_ok();
        if refused && label_passes {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the hold not in force in {ns} within 20 s (refused {refused}, label passes {label_passes})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.delete("hold-probe", &Default::default()).await.unwrap();
}

/// A whole-object Update (PUT) of an Upgrade as `harvester`; the refusal's message.
pub async fn put_upgrade(client: &Client, obj: &Value) -> Result<Value, Refusal> {
    put_upgrade_with(client, obj, false).await
}

/// The same Update, with `dryRun=All` if `dry_run` (admission runs, nothing is stored).
pub async fn put_upgrade_with(
    client: &Client,
    obj: &Value,
    dry_run: bool,
) -> Result<Value, Refusal> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap();
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        dry_run,
    };
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource("Upgrade"));
    match api.replace(name, &pp, &o).await {
        Ok(v) => Ok(serde_json::to_value(v).unwrap()),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => panic!("Update of Upgrade {ns}/{name}: {e}"),
    }
}

/// `repoInfo` as the repo's `harvester-release.yaml` gives it (marshalled YAML), reduced, for
/// the Upgrade's target.
fn repo_info(u: &Value) -> Value {
    let v = u["spec"]["version"].as_str().unwrap_or("");
    json!(format!("release:\n  harvester: {v}\n  os: Harvester {v}\n"))
}
