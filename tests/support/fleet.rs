//! A model of Fleet for the tests: a background task per test namespace, driven by the
//! `harvester` ManagedChart the way Rancher and Fleet are, writing the status Rancher copies
//! onto it to the real API server (the ManagedChart fixture CRD's status subresource).
//!
//! What it follows, and how far:
//! - rancher/rancher `pkg/controllers/provisioningv2/managedchart/managedchart.go`: the
//!   ManagedChart's spec (chart, version, values, diff, paused, ...) is copied into the Bundle
//!   `fleet-local/mcc-<name>`, and the Bundle's status is copied back as it is
//!   (`status.BundleStatus = bundle.Status`). Here there is no Bundle object: the model keeps the
//!   Bundle's generation itself, one more on each change of the ManagedChart's `spec` (and only
//!   then: an annotation or `managedFields` write makes none), and writes the status straight onto
//!   the ManagedChart.
//! - fleet-controller (the Bundle's status, summed up from its BundleDeployments, one cluster
//!   `fleet-local/local`): `observedGeneration` is the Bundle's generation; `summary` counts
//!   (`desiredReady` 1, `ready`, `waitApplied`, `errApplied`, ..., `nonReadyResources`);
//!   `unavailable`; `display.state`; the `Ready` condition, whose message is the state and
//!   cluster, `WaitApplied(1) [Cluster fleet-local/local]`, and wrangler's `Defined`.
//! - fleet-agent (deploys the BundleDeployment with Helm): here the REAL Helm 4 CLI
//!   (`support::helm_deploy`: `helm upgrade --install --reset-values --server-side`, no force)
//!   with the ManagedChart's values of that generation; Helm's field manager is `helm` (the real
//!   agent names itself `fleetagent` through Helm's SDK; the CLI has no flag for it). While it
//!   deploys: `WaitApplied` with the new generation, then `Ready`. A Helm conflict (another
//!   manager's `Update` claim on a field the chart renders differently) never becomes
//!   `ErrApplied`: `WaitApplied` for ever, retried with backoff, the cause only in the "agent's
//!   log" ([`FleetModel::log`]). A rejected apply (a value the CRD refuses): `ErrApplied` with the
//!   API server's message in the `Ready` condition and in `summary.nonReadyResources[].message`,
//!   also retried. A paused chart (`spec.paused: true`) is not deployed until unpaused.
//!
//! Measured facts it reproduces (docs: DESIGN.md §9): the status is `WaitApplied` within 0.4 s of
//! a spec write and `Ready` within 0.7 s with a two-file chart; [`Options`] adds delays (Rancher
//! and Fleet taking the change up, the deploy) for tests.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};

use super::{get_opt, helm_deploy, set_status};

/// What the model does with a new generation.
#[derive(Debug, Clone)]
pub enum Deploy {
    /// Deploy this chart with the real Helm 4 into the test namespace.
    Helm(PathBuf),
    /// Only the status (for a KubeVirt CR that no chart renders, e.g. the manifests test).
    StatusOnly,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub deploy: Deploy,
    /// Before the new generation shows (rancher/fleet#5219: the status of the previous one stays).
    pub take_up: Duration,
    /// How long a deploy takes before Helm runs.
    pub delay: Duration,
}

impl Options {
    pub fn helm(chart: PathBuf) -> Self {
        Self {
            deploy: Deploy::Helm(chart),
            take_up: Duration::ZERO,
            delay: Duration::ZERO,
        }
    }
}

/// One status the model wrote, or a line of its "agent's log".
#[derive(Debug, Clone)]
pub struct Seen {
    /// When the status write returned.
    pub at: Instant,
    pub generation: i64,
    /// `WaitApplied`, `Ready`, `ErrApplied`, `Paused` (not deployed), or `log` (Helm's error).
    pub state: String,
    pub message: String,
}

pub struct FleetModel {
    log: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl FleetModel {
    /// Starts the model on `ns`'s `harvester` ManagedChart, whose current spec counts as
    /// generation 1, deployed (`Ready`): start it after the chart's install.
    pub async fn start(client: &Client, ns: &str, options: Options) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mc = get_opt(client, "ManagedChart", ns, "harvester")
            .await
            .expect("the ManagedChart");
        let mut model = Model {
            client: client.clone(),
            ns: ns.to_string(),
            options,
            log: log.clone(),
            generation: 1,
            spec: mc["spec"].clone(),
        };
        model.write(1, "Ready", "", vec![]).await;
        let flag = stop.clone();
        let task = tokio::spawn(async move { model.run(flag).await });
        Self {
            log,
            stop,
            task: Some(task),
        }
    }

    /// Everything it wrote and logged, in order.
    pub fn log(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    /// When generation `g` was first `Ready`, and when it first showed (`WaitApplied`).
    pub fn deployed(&self, g: i64) -> Option<(Instant, Instant)> {
        let log = self.log();
        let first = |state: &str| {
            log.iter()
                .find(|s| s.generation == g && s.state == state)
                .map(|s| s.at)
        };
        Some((first("WaitApplied")?, first("Ready")?))
    }

    pub fn generation(&self) -> i64 {
        self.log().iter().map(|s| s.generation).max().unwrap_or(1)
    }

    /// Stops the task (also on drop).
    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for FleetModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

struct Model {
    client: Client,
    ns: String,
    options: Options,
    log: Arc<Mutex<Vec<Seen>>>,
    /// The Bundle's generation and the spec it was made from.
    generation: i64,
    spec: Value,
}

/// A generation not deployed yet: when to try (again), and the backoff after a failure.
struct Pending {
    generation: i64,
    values: Value,
    shown_at: Instant,
    shown: bool,
    due: Instant,
    backoff: Duration,
}

impl Model {
    async fn run(&mut self, stop: Arc<AtomicBool>) {
        let mut pending: Option<Pending> = None;
        while !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            if let Some(mc) = get_opt(&self.client, "ManagedChart", &self.ns, "harvester").await
                && mc["spec"] != self.spec
            {
                // Rancher copies the new spec into the Bundle: a new generation.
                self.generation += 1;
                self.spec = mc["spec"].clone();
                if self.spec["paused"] == json!(true) {
                    pending = None;
                    self.note("Paused", "paused: not deployed until unpaused");
                } else {
                    pending = Some(Pending {
                        generation: self.generation,
                        values: self.spec["values"].clone(),
                        shown_at: now + self.options.take_up,
                        shown: false,
                        due: now + self.options.take_up + self.options.delay,
                        backoff: Duration::from_millis(500),
                    });
                }
            }
            if let Some(p) = pending.as_mut() {
                if !p.shown && now >= p.shown_at {
                    p.shown = true;
                    let msg = "WaitApplied(1) [Cluster fleet-local/local]";
                    self.write(p.generation, "WaitApplied", msg, vec![]).await;
                }
                if p.shown && now >= p.due {
                    match self.deploy(&p.values).await {
                        Ok(()) => {
                            self.write(p.generation, "Ready", "", vec![]).await;
                            pending = None;
                        }
                        Err(e) => {
                            self.note("log", &e);
                            if !e.contains("conflict") {
                                let message =
                                    format!("ErrApplied(1) [Cluster fleet-local/local: {e}]");
                                let resource = json!({"kind": "Bundle", "apiVersion": "fleet.cattle.io/v1alpha1",
                                    "namespace": "fleet-local", "name": "mcc-harvester",
                                    "bundleState": "ErrApplied", "message": e});
                                self.write(p.generation, "ErrApplied", &message, vec![resource])
                                    .await;
                            }
                            p.due = Instant::now() + p.backoff;
                            p.backoff = (p.backoff * 2).min(Duration::from_secs(4));
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn deploy(&self, values: &Value) -> Result<(), String> {
        match &self.options.deploy {
            Deploy::StatusOnly => Ok(()),
            Deploy::Helm(chart) => helm_deploy(&self.ns, chart, values)
                .await
                .map_err(|e| fleet_message(&e)),
        }
    }

    fn note(&self, state: &str, message: &str) {
        self.log.lock().unwrap().push(Seen {
            at: Instant::now(),
            generation: self.generation,
            state: state.into(),
            message: message.into(),
        });
    }

    /// The Bundle's status as fleet-controller sums it up, copied onto the ManagedChart.
    async fn write(&self, generation: i64, state: &str, message: &str, resources: Vec<Value>) {
        let ready = state == "Ready";
        let n = |s: &str| i64::from(state == s);
        let status = json!({
            "observedGeneration": generation,
            "unavailable": 0,
            "unavailablePartitions": 0,
            "maxUnavailable": 1,
            "maxUnavailablePartitions": 0,
            "display": {"readyClusters": if ready {"1/1"} else {"0/1"}, "state": state},
            "summary": {"desiredReady": 1, "ready": n("Ready"), "waitApplied": n("WaitApplied"),
                        "errApplied": n("ErrApplied"), "modified": 0, "notReady": 0, "outOfSync": 0,
                        "pending": 0, "nonReadyResources": resources},
            "conditions": [
                {"type": "Defined", "status": "True"},
                {"type": "Ready", "status": if ready {"True"} else {"False"}, "message": message,
                 "reason": if ready {""} else {"Error"}},
            ],
        });
        set_status(&self.client, "ManagedChart", &self.ns, "harvester", status).await;
        self.log.lock().unwrap().push(Seen {
            at: Instant::now(),
            generation,
            state: state.into(),
            message: message.into(),
        });
    }
}

/// Helm's error as the agent reports it: one line, Helm's own log lines and its
/// `Error: UPGRADE FAILED: ` left out.
fn fleet_message(helm: &str) -> String {
    let line = helm.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = line
        .rsplit_once("Error: ")
        .map_or(line.as_str(), |(_, e)| e);
    line.strip_prefix("UPGRADE FAILED: ")
        .unwrap_or(line)
        .to_string()
}
