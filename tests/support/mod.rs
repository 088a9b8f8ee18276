#![allow(dead_code)] // Shared by two test binaries; each uses a part.
//! One real control plane (kube-apiserver + etcd from `hack/control-plane.sh`) for the whole
//! test binary; each test works in namespaces of its own, so tests run in parallel.
//!
//! If the control plane cannot be built or started, every test that needs it FAILS with the
//! script's message, at once: the failure is kept for the whole binary. Nothing is skipped.
//! `ControlPlane::up` starts another one, of any version, for tests that restart or upgrade it.

pub mod fleet;
pub mod harvester;
pub mod harvester_controller;
pub mod kubevirt;
pub mod node_upgrades;
pub mod upgrade;
pub mod virt_handler;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};
use workload_update_guard::model::{FIELD_MANAGER, Kind, METHODS_PATH, RECORDS_CONFIGMAP};
use workload_update_guard::plan;

pub const BIN: &str = env!("CARGO_BIN_EXE_workload-update-guard");

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub struct ControlPlane {
    pub dir: PathBuf,
    pub bin_dir: PathBuf,
}

impl ControlPlane {
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn server(&self) -> String {
        format!(
            "https://127.0.0.1:{}",
            std::fs::read_to_string(self.dir.join("api.port"))
                .unwrap()
                .trim()
        )
    }

    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.bin_dir.join("kubectl"));
        c.arg("--kubeconfig").arg(self.kubeconfig());
        c
    }
}

/// The shared control plane of `$KUBE_VERSION` (the script's default if unset), started on first
/// use and stopped when this process exits. If it cannot start, the first test fails with the
/// script's message and every later test fails at once with the same message: the failure is
/// kept, not retried once per test.
pub fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    match CP.get_or_init(|| ControlPlane::up(&[])) {
        Ok(cp) => cp,
        Err(message) => panic!("{message}"),
    }
}

impl ControlPlane {
    /// Runs `hack/control-plane.sh up` with `env` added (e.g. `KUBE_VERSION`); the control plane
    /// is stopped when this process exits, or earlier by `down`. The error carries the script's
    /// message (its stderr is also shown as it happens).
    pub fn up(env: &[(&str, &str)]) -> Result<ControlPlane, String> {
        let dir = script_up(
            "hack/control-plane.sh",
            "CP_OWNER_PID",
            env,
            "integration tests need a real API server",
        )?;
        let bin_dir = script_output(&["bin-dir"], env)?;
        Ok(ControlPlane {
            dir,
            bin_dir: PathBuf::from(bin_dir),
        })
    }

    /// A control plane of the default version for one test (cluster-scoped objects that
    /// would disturb other tests), and its admin client.
    pub async fn own() -> (ControlPlane, Client) {
        Self::own_with(&[]).await
    }

    /// `own`, with every request in `dir/audit.log` (`CP_AUDIT=1`), for a test that counts them.
    pub async fn own_audited() -> (ControlPlane, Client) {
        Self::own_with(&[("CP_AUDIT", "1")]).await
    }

    async fn own_with(env: &[(&str, &str)]) -> (ControlPlane, Client) {
        let cp = ControlPlane::up(env).unwrap_or_else(|e| panic!("{e}"));
        let client = client_for(&cp.kubeconfig()).await;
        (cp, client)
    }

    /// Stops the API server; etcd keeps running.
    pub fn stop_apiserver(&self) {
        script_output(&["stop-apiserver", &self.dir.to_string_lossy()], &[]).unwrap();
    }

    /// Starts the API server of `version` on this control plane's etcd, and waits until it is
    /// ready and reports that version: with `stop_apiserver`, an upgrade of the control plane.
    pub fn start_apiserver(&mut self, version: &str) {
        let env = [("KUBE_VERSION", version)];
        script_output(&["start-apiserver", &self.dir.to_string_lossy()], &env).unwrap();
        self.bin_dir = PathBuf::from(script_output(&["bin-dir"], &env).unwrap());
    }

    /// The version the running API server reports (`/version`).
    pub fn server_version(&self) -> String {
        let out = self
            .kubectl()
            .args(["get", "--raw", "/version"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).expect("/version is JSON");
        v["gitVersion"].as_str().unwrap().to_string()
    }

    /// Stops the processes and removes the state dir.
    pub fn down(self) {
        script_output(&["down", &self.dir.to_string_lossy()], &[]).unwrap();
    }

    /// Runs the binary against this control plane (see `run_bin`).
    pub async fn run(&self, env: BTreeMap<String, String>) -> Run {
        let dir = self
            .dir
            .join(format!("test-tmp-{}", TMP.fetch_add(1, Ordering::SeqCst)));
        run_bin_in(dir, &self.kubeconfig(), env).await
    }
}

/// `hack/control-plane.sh ARGS` with `env` added; its stdout, or its stderr as the error.
fn script_output(args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/control-plane.sh"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "hack/control-plane.sh {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

pub async fn admin() -> Client {
    client_for(&control_plane().kubeconfig()).await
}

/// Runs `SCRIPT up` (with `owner_var` set to this process, so the script's reaper stops what it
/// started when this process exits) and returns the state dir it prints last. The error is
/// what the script said: these tests never skip.
pub fn script_up(
    script: &str,
    owner_var: &str,
    env: &[(&str, &str)],
    need: &str,
) -> Result<PathBuf, String> {
    let script = repo_root().join(script);
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .envs(env.iter().copied())
        .env(owner_var, std::process::id().to_string())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{need}: cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    if !out.status.success() {
        let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
        return Err(format!(
            "{need}, and `{} up` failed ({}): {}\nThese tests never skip; the script's output:\n{stderr}",
            script.display(),
            out.status,
            errors.join("; ")
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .ok_or("`up` printed no state dir")?
            .trim(),
    ))
}

/// Runs `cmd` with `input` on its stdin; its stdout, or a panic with its stderr.
pub fn pipe(mut cmd: Command, input: &str) -> String {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects of a YAML stream, as JSON (kubectl converts).
pub fn yaml_objects(yaml: &str) -> Vec<Value> {
    let mut convert = control_plane().kubectl();
    convert.args(["create", "--dry-run=client", "-o", "json", "-f", "-"]);
    let json = pipe(convert, yaml);
    serde_json::Deserializer::from_str(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

/// The crate's own resource definitions, by kind name.
pub fn resource(kind: &str) -> ApiResource {
    [
        Kind::KubeVirt,
        Kind::ManagedChart,
        Kind::Migration,
        Kind::Upgrade,
        Kind::Version,
        Kind::Setting,
        Kind::UpgradePlan,
        Kind::ConfigMap,
    ]
    .into_iter()
    .find(|k| k.name() == kind)
    .unwrap_or_else(|| panic!("unknown kind {kind}"))
    .resource()
}

/// A fresh namespace per test; the name carries the test's label and a counter.
pub async fn namespace(client: &Client, label: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "{label}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

pub async fn create(client: &Client, kind: &str, ns: &str, obj: Value) -> Value {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    serde_json::to_value(
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create"),
    )
    .unwrap()
}

/// The object, or `None` on any error (the Fleet model's reads).
pub async fn get_opt(client: &Client, kind: &str, ns: &str, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    api.get(name)
        .await
        .ok()
        .map(|o| serde_json::to_value(o).unwrap())
}

/// The guard's ConfigMap of the upgrades' records, as the chart creates it (no data); one that
/// exists already is left as it is, and a guard run with credentials that may not create it
/// (a test of a guard short of rights) goes without.
pub fn create_records_configmap(kubeconfig: &Path, ns: &str) {
    let bin_dir = script_output(&["bin-dir"], &[]).unwrap();
    let out = Command::new(Path::new(&bin_dir).join("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", ns, "create", "configmap", RECORDS_CONFIGMAP])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || said.contains("already exists") || said.contains("forbidden"),
        "the records' ConfigMap: {said}"
    );
}

/// The upgrades' records the guard keeps in `ns`, oldest first.
pub async fn upgrade_records(client: &Client, ns: &str) -> Vec<Value> {
    let Some(cm) = get_opt(client, "ConfigMap", ns, RECORDS_CONFIGMAP).await else {
        return vec![];
    };
    let text = cm["data"]["upgrades.json"].as_str().unwrap_or("[]");
    serde_json::from_str(text).expect("the records parse")
}

/// Waits until the record of `upgrade` (`Upgrade NS/NAME`) is complete, and returns it.
pub async fn complete_record(client: &Client, ns: &str, upgrade: &str, within: Duration) -> Value {
    record_where(client, ns, upgrade, within, |r| r["complete"] == true).await
}

/// Waits until the record of `upgrade`, as kept, satisfies `what` (kept every 10 s while open).
pub async fn record_where(
    client: &Client,
    ns: &str,
    upgrade: &str,
    within: Duration,
    what: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let records = upgrade_records(client, ns).await;
        let found = records.iter().find(|r| r["upgrade"] == upgrade);
        if let Some(r) = found.filter(|r| what(r)) {
            return r.clone();
        }
        assert!(
            start.elapsed() < within,
            "the record of {upgrade} as awaited within {within:?}: {records:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn get(client: &Client, kind: &str, ns: &str, name: &str) -> Value {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    serde_json::to_value(api.get(name).await.expect("get")).unwrap()
}

pub async fn json_patch(
    client: &Client,
    kind: &str,
    ns: &str,
    name: &str,
    ops: Value,
) -> Result<Value, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
    let pp = PatchParams {
        field_manager: Some("another-writer".into()),
        ..Default::default()
    };
    api.patch(name, &pp, &Patch::<()>::Json(patch))
        .await
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Appends an entry to the `harvester` ManagedChart's comparePatches, as another writer.
pub async fn append_compare_patch(client: &Client, ns: &str, entry: Value) {
    let op = json!([{"op": "add", "path": "/spec/diff/comparePatches/-", "value": entry}]);
    json_patch(client, "ManagedChart", ns, "harvester", op)
        .await
        .expect("append an entry");
}

pub async fn set_status(client: &Client, kind: &str, ns: &str, name: &str, status: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .expect("patch status");
}

/// A migration of VMI `vm1` named `name` in `ns`, in `phase` (`Running`, `Succeeded`, ...).
pub async fn migration(client: &Client, ns: &str, name: &str, phase: &str) {
    let kind = "VirtualMachineInstanceMigration";
    let obj = json!({"apiVersion": "kubevirt.io/v1", "kind": kind,
                     "metadata": {"name": name}, "spec": {"vmiName": "vm1"}});
    create(client, kind, ns, obj).await;
    set_status(client, kind, ns, name, json!({"phase": phase})).await;
}

/// A Harvester-like pair in `ns`: the KubeVirt CR (Deployed, outdated workloads) and the
/// `harvester` ManagedChart with the comparePatches entries real clusters carry.
pub async fn harvester(client: &Client, ns: &str, methods: Option<Value>) -> (Value, Value) {
    let mut strategy = json!({"batchEvictionSize": 10, "batchEvictionInterval": "1m0s"});
    if let Some(m) = methods {
        strategy["workloadUpdateMethods"] = m;
    }
    let kv = create(
        client,
        "KubeVirt",
        ns,
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
               "metadata": {"name": "kubevirt", "namespace": ns,
                            "annotations": {"kubevirt.io/latest-observed-api-version": "v1"}},
               "spec": {"configuration": {"developerConfiguration": {"featureGates": ["LiveMigration"]}},
                        "workloadUpdateStrategy": strategy}}),
    )
    .await;
    set_status(
        client,
        "KubeVirt",
        ns,
        "kubevirt",
        json!({"phase": "Deployed", "observedKubeVirtVersion": "v1.6.0", "targetKubeVirtVersion": "v1.7.0",
               "outdatedVirtualMachineInstanceWorkloads": 3}),
    )
    .await;
    let _ = kv;
    let chart = create(client, "ManagedChart", ns, harvester_chart(ns)).await;
    (get(client, "KubeVirt", ns, "kubevirt").await, chart)
}

/// A new namespace labelled `label` holding the Harvester-like pair (`harvester`), the CR's
/// methods `methods` (`None`: the field absent): the admin client and the namespace, a test's
/// usual start.
pub async fn new_harvester(label: &str, methods: impl Into<Option<Value>>) -> (Client, String) {
    let client = admin().await;
    let ns = harvester_ns(&client, label, methods).await;
    (client, ns)
}

/// A new namespace labelled `label` holding the Harvester-like pair, the CR's methods `methods`.
pub async fn harvester_ns(
    client: &Client,
    label: &str,
    methods: impl Into<Option<Value>>,
) -> String {
    let ns = namespace(client, label).await;
    harvester(client, &ns, methods.into()).await;
    ns
}

pub fn harvester_chart(ns: &str) -> Value {
    json!({"apiVersion": "management.cattle.io/v3", "kind": "ManagedChart",
           "metadata": {"name": "harvester", "namespace": ns},
           "spec": {"chart": "harvester", "releaseName": "harvester", "version": "1.7.0", "paused": false,
                    "defaultNamespace": "harvester-system",
                    "values": {"kubevirt": {"spec": {"configuration": {"vmStateStorageClass": "vmstate-persistence"}}},
                               "longhorn": {"enabled": true}},
                    "diff": {"comparePatches": [
                        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "name": "harvester-longhorn",
                         "jsonPointers": ["/metadata/annotations"]},
                        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                         "name": "engineimages.longhorn.io", "jsonPointers": ["/status/acceptedNames", "/status/conditions", "/status/storedVersions"]},
                        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                         "name": "rancher-monitoring-admission", "operations": [{"op": "remove", "path": "/webhooks"}]}]}}})
}

/// The result of one run of the binary.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub summary: Option<Value>,
}

impl Run {
    /// Asserts exit 0; the run, for what the test checks next.
    pub fn ok(&self) -> &Self {
        self.exits(0)
    }

    /// Asserts the exit code; the run, for what the test checks next.
    pub fn exits(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "{self:?}");
        self
    }

    /// Asserts that stderr (the log) contains each of `words`.
    pub fn says(&self, words: &[&str]) -> &Self {
        for w in words {
            assert!(self.stderr.contains(w), "{w:?} in {self:?}");
        }
        self
    }

    /// The outcome of each step of its termination message, in order.
    pub fn outcomes(&self) -> Vec<String> {
        self.summary.as_ref().expect("a termination message")["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["outcome"].as_str().unwrap().to_string())
            .collect()
    }

    /// The warnings of its termination message that start with `reason`.
    pub fn warnings_of(&self, reason: &str) -> Vec<String> {
        self.warnings()
            .into_iter()
            .filter(|w| w.starts_with(reason))
            .collect()
    }

    /// The warnings of its termination message.
    pub fn warnings(&self) -> Vec<String> {
        self.summary.as_ref().expect("a termination message")["warnings"]
            .as_array()
            .map(|w| w.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\nstdout: {}\nstderr: {}\nsummary: {:?}",
            self.code, self.stdout, self.stderr, self.summary
        )
    }
}

/// Environment for a run against objects in `ns` (both the KubeVirt CR and the ManagedChart).
/// [`env_for`] with more variables.
pub fn env_with(ns: &str, phase: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut env = env_for(ns, phase);
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    env
}

pub fn env_for(ns: &str, phase: &str) -> BTreeMap<String, String> {
    [
        ("PHASE", phase),
        ("KUBEVIRT_NAMESPACE", ns),
        ("MANAGEDCHART_NAMESPACE", ns),
        ("DEADLINE_SECONDS", "60"),
        ("RUST_LOG", "info"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Runs the binary (in a blocking thread) with exactly `env` plus a kubeconfig and a
/// termination-message file.
pub async fn run_bin(kubeconfig: &Path, env: BTreeMap<String, String>) -> Run {
    run_bin_in(tempfile_dir(), kubeconfig, env).await
}

/// `run_bin` with the termination-message file in `dir` (created, then removed).
pub async fn run_bin_in(dir: PathBuf, kubeconfig: &Path, env: BTreeMap<String, String>) -> Run {
    let kubeconfig = kubeconfig.to_path_buf();
    std::fs::create_dir_all(&dir).unwrap();
    tokio::task::spawn_blocking(move || {
        let term = dir.join("termination-log");
        let mut cmd = Command::new(BIN);
        cmd.env_clear()
            .env("KUBECONFIG", &kubeconfig)
            .env("TERMINATION_MESSAGE_PATH", &term)
            .envs(&env);
        let out: Output = cmd.output().expect("run the binary");
        let summary = std::fs::read_to_string(&term)
            .ok()
            .map(|s| serde_json::from_str(&s).expect("summary is JSON"));
        let _ = std::fs::remove_dir_all(&dir);
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
            summary,
        }
    })
    .await
    .unwrap()
}

pub async fn run_phase(ns: &str, phase: &str) -> Run {
    run_bin(&control_plane().kubeconfig(), env_for(ns, phase)).await
}

/// A fresh directory inside the control plane's state dir, so `down` removes it with the rest.
static TMP: AtomicUsize = AtomicUsize::new(0);

pub fn tempfile_dir() -> PathBuf {
    let n = TMP.fetch_add(1, Ordering::SeqCst);
    let dir = control_plane().dir.join(format!("test-tmp-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The metadata fields the API server manages: the one normalizer, also `hack/snapshot.jq`
/// (`cli.rs` checks that they agree).
pub const SERVER_FIELDS: &[&str] = &[
    "resourceVersion",
    "managedFields",
    "generation",
    "creationTimestamp",
    "uid",
];

/// The first container's environment of a Job, Deployment or pod template (`name` to `value`).
pub fn container_env(workload: &Value) -> BTreeMap<String, String> {
    workload["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The object without what the server manages, for comparing states.
pub fn content(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in SERVER_FIELDS {
            m.remove(*k);
        }
    }
    o
}

/// The object's `resourceVersion`.
pub fn rv(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Asserts that `text` contains each of `words`.
pub fn assert_contains_all(text: &str, words: &[&str]) {
    for w in words {
        assert!(text.contains(w), "{w:?} not in {text}");
    }
}

/// What "exactly as before" compares: the content a user sees and every `managedFields` entry
/// (its time aside), with the namespace's name taken out.
pub fn as_compared(obj: &Value, ns: &str) -> String {
    let mut o = json!({
        "labels": obj["metadata"]["labels"],
        "annotations": obj["metadata"]["annotations"],
        "spec": obj["spec"],
        "managedFields": obj["metadata"]["managedFields"],
    });
    for e in o["managedFields"].as_array_mut().into_iter().flatten() {
        e.as_object_mut().unwrap().remove("time");
    }
    serde_json::to_string_pretty(&o).unwrap().replace(ns, "NS")
}

/// A free port on the loopback interface (bound, then released for the guard).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes to `path` a kubeconfig for `server` that skips TLS verification and sends a dummy
/// token (for servers the test never lets the guard reach).
pub fn insecure_kubeconfig(path: &Path, server: &str) {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{server}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
}

/// Every Event (`events.events.k8s.io`) in `ns`, as JSON.
pub fn events_in(ns: &str) -> Vec<Value> {
    let out = kubectl_ok(&["-n", ns, "get", "events.events.k8s.io", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"].as_array().unwrap().clone()
}

/// The condition of `type` in the object's `status.conditions`, if any.
pub fn condition(obj: &Value, ty: &str) -> Option<Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .cloned()
}

/// A kubeconfig that authenticates only with `token`.
pub fn token_kubeconfig(token: &str) -> PathBuf {
    let cp = control_plane();
    let path = tempfile_dir().join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
         users:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context: {{cluster: local, user: sa}}\n\
         current-context: local\n",
        cp.server(),
        cp.dir.join("ca.crt").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A ServiceAccount token from the TokenRequest API (`kubectl create token`).
pub fn sa_token(ns: &str, sa: &str) -> String {
    kubectl_ok(&["-n", ns, "create", "token", sa, "--duration=1h"])
        .trim()
        .to_string()
}

pub fn kubectl_ok(args: &[&str]) -> String {
    let mut cmd = control_plane().kubectl();
    cmd.args(args);
    output_ok(cmd)
}

/// Runs `cmd`; its stdout, or a panic with its output.
pub fn output_ok(mut cmd: Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

// ---- Helm 4, playing Fleet's part ----

/// `helm ARGS` against `kubeconfig`, with a Helm home of its own (its config, cache and data
/// under `home`): its success, and its stdout and stderr together.
pub fn helm_in(home: &Path, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    helm_with(helm_bin(), home, kubeconfig, args)
}

/// [`helm_in`] with the Helm CLI `bin` ([`helm_bin`], [`helm3_bin`]).
pub fn helm_with(bin: &Path, home: &Path, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    helm_with_env(bin, home, kubeconfig, &[], args)
}

/// [`helm_with`] with more variables (`SSL_CERT_FILE`: the CAs it trusts, as a Job's helm is
/// given them).
pub fn helm_with_env(
    bin: &Path,
    home: &Path,
    kubeconfig: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (bool, String) {
    let out = Command::new(bin)
        .args(args)
        .envs(env.iter().copied())
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The pinned Helm 4 CLI (`hack/helm.sh`), built or reused once per test binary. Tests that
/// need it FAIL if it cannot be had.
pub fn helm_bin() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| pinned_helm(&[]))
}

/// The pinned Helm 3 CLI (`hack/helm.sh build 3`), as [`helm_bin`]: operators' own helm, and
/// the add-on's helm-controller, are often 3.x.
pub fn helm3_bin() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| pinned_helm(&["3"]))
}

/// `hack/helm.sh build ARGS`, then its path: Helm 4, or Helm 3 with `["3"]`.
fn pinned_helm(args: &[&str]) -> PathBuf {
    let script = repo_root().join("hack/helm.sh");
    let helm = |verb: &str| {
        let mut c = Command::new("bash");
        c.arg(&script).arg(verb).args(args);
        c
    };
    let build = helm("build")
        .stderr(Stdio::inherit())
        .status()
        .expect("run hack/helm.sh");
    assert!(
        build.success(),
        "these tests need the real Helm CLI (hack/helm.sh build {}), and its build failed; \
         see its message above. They never skip.",
        args.join(" ")
    );
    let path = helm("path").output().unwrap();
    PathBuf::from(String::from_utf8(path.stdout).unwrap().trim())
}

/// A copy of the chart fixture whose default methods are `methods`: a chart version.
pub fn chart_version(methods: &Value) -> PathBuf {
    let src = repo_root().join("tests/fixtures/chart/harvester");
    let dir = tempfile_dir().join("harvester");
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    for f in ["Chart.yaml", "templates/kubevirt.yaml"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let values = std::fs::read_to_string(src.join("values.yaml")).unwrap();
    let line = "workloadUpdateMethods: [LiveMigrate]";
    assert!(values.contains(line));
    std::fs::write(
        dir.join("values.yaml"),
        values.replace(line, &format!("workloadUpdateMethods: {methods}")),
    )
    .unwrap();
    dir
}

/// A chart version that no longer sets the methods (its default removed from values.yaml).
pub fn chart_without_methods() -> PathBuf {
    let dir = chart_version(&json!([]));
    let values = dir.join("values.yaml");
    let text = std::fs::read_to_string(&values).unwrap();
    let line = "      workloadUpdateMethods: []\n";
    assert!(text.contains(line), "{text}");
    std::fs::write(&values, text.replace(line, "")).unwrap();
    dir
}

/// Deploys `chart` into `ns` the way Fleet does: `helm upgrade --install --reset-values` with the
/// ManagedChart's `spec.values`; Helm 4 applies server-side (manager `helm`, no force).
/// The error is Helm's own message.
pub async fn fleet_deploy(client: &Client, ns: &str, chart: &Path) -> Result<(), String> {
    fleet_deploy_to(&control_plane().kubeconfig(), client, ns, chart).await
}

/// [`fleet_deploy`] to the control plane of `kubeconfig` (`client`'s).
pub async fn fleet_deploy_to(
    kubeconfig: &Path,
    client: &Client,
    ns: &str,
    chart: &Path,
) -> Result<(), String> {
    let mc = get(client, "ManagedChart", ns, "harvester").await;
    helm_deploy_to(kubeconfig, ns, chart, &mc["spec"]["values"]).await
}

/// `helm upgrade --install harvester CHART --reset-values --server-side true -f VALUES` into `ns`
/// (without blocking the runtime: the Fleet model runs it in the background).
pub async fn helm_deploy(ns: &str, chart: &Path, values: &Value) -> Result<(), String> {
    helm_deploy_to(&control_plane().kubeconfig(), ns, chart, values).await
}

/// [`helm_deploy`] to the control plane of `kubeconfig`.
pub async fn helm_deploy_to(
    kubeconfig: &Path,
    ns: &str,
    chart: &Path,
    values: &Value,
) -> Result<(), String> {
    let dir = tempfile_dir();
    let file = dir.join("values.json");
    std::fs::write(&file, values.to_string()).unwrap();
    let out = tokio::process::Command::new(helm_bin())
        .args(["upgrade", "--install", "harvester"])
        .arg(chart)
        .args([
            "--namespace",
            ns,
            "--reset-values",
            "--server-side",
            "true",
            "-f",
        ])
        .arg(&file)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CONFIG_HOME", dir.join("config"))
        .env("HELM_CACHE_HOME", dir.join("cache"))
        .env("HELM_DATA_HOME", dir.join("data"))
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The Harvester-like start for the lifetime tests: the ManagedChart in a new namespace, and the
/// chart (default `[LiveMigrate]`) installed by Helm from its values. Returns the namespace and
/// the chart.
pub async fn helm_installed(client: &Client, label: &str) -> (String, PathBuf) {
    helm_installed_to(&control_plane().kubeconfig(), client, label).await
}

/// [`helm_installed`] on the control plane of `kubeconfig` (`client`'s).
pub async fn helm_installed_to(
    kubeconfig: &Path,
    client: &Client,
    label: &str,
) -> (String, PathBuf) {
    let ns = namespace(client, label).await;
    create(client, "ManagedChart", &ns, harvester_chart(&ns)).await;
    let chart = chart_version(&json!(["LiveMigrate"]));
    fleet_deploy_to(kubeconfig, client, &ns, &chart)
        .await
        .expect("helm install");
    assert_eq!(methods_owners(client, &ns).await, ["helm/Apply"]);
    (ns, chart)
}

/// The KubeVirt CR's methods.
pub async fn kubevirt_methods(client: &Client, ns: &str) -> Value {
    get(client, "KubeVirt", ns, "kubevirt").await["spec"]["workloadUpdateStrategy"]
        ["workloadUpdateMethods"]
        .clone()
}

/// The chart's default methods, `[LiveMigrate]`: the CR's before a suspension and after its
/// restore.
pub fn live_migrate() -> Value {
    json!(["LiveMigrate"])
}

/// Polls the CR's methods until they are `want`, for at most `within`; how long it took.
pub async fn methods_become(client: &Client, ns: &str, want: &Value, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if kubevirt_methods(client, ns).await == *want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{ns}: methods {} not {want} within {within:?}",
            kubevirt_methods(client, ns).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The managers that own the KubeVirt CR's methods field, as `manager/operation`.
pub async fn methods_owners(client: &Client, ns: &str) -> Vec<String> {
    let kv = get(client, "KubeVirt", ns, "kubevirt").await;
    plan::ownership::owners(&kv, METHODS_PATH)
        .into_iter()
        .map(|o| format!("{}/{}", o.manager, o.operation))
        .collect()
}

/// Whether any `managedFields` entry of ours owns anything on the object.
pub fn claims_of_ours(obj: &Value) -> Vec<Value> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == FIELD_MANAGER && e["fieldsV1"] != json!({}))
        .cloned()
        .collect()
}
