//! The node of `hack/node.sh`, shared by the whole test binary, and kubectl on it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{ControlPlane, output_ok, pipe, repo_root, script_up};

pub const NS: &str = "harvester-system";
pub const CHART_NS: &str = "fleet-local";
/// The node's address (hack/node.sh), inside its network namespace only.
pub const NODE_IP: &str = "10.88.0.2";

pub struct Node {
    pub dir: PathBuf,
    /// kubectl and friends of the node's version.
    pub bin_dir: PathBuf,
}

/// The node of `$KUBE_VERSION`, started on first use and taken down when this process exits.
/// If it cannot start, the first test fails with the script's message and every later test
/// fails at once with the same message.
pub fn node() -> &'static Node {
    static NODE: OnceLock<Result<Node, String>> = OnceLock::new();
    match NODE.get_or_init(Node::up) {
        Ok(n) => n,
        Err(message) => panic!("{message}"),
    }
}

/// One test at a time: they all work on the same fixed objects.
pub fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    fn up() -> Result<Node, String> {
        let start = Instant::now();
        let dir = script_up(
            "hack/node.sh",
            "NODE_OWNER_PID",
            &[],
            "e2e tests need a real node",
        )?;
        let _ = std::fs::remove_file(figures_file());
        figure(&format!(
            "node up in {:.1} s",
            start.elapsed().as_secs_f64()
        ));
        let bin = Command::new("bash")
            .arg(repo_root().join("hack/control-plane.sh"))
            .arg("bin-dir")
            .output()
            .map_err(|e| e.to_string())?;
        Ok(Node {
            dir,
            bin_dir: PathBuf::from(String::from_utf8_lossy(&bin.stdout).trim()),
        })
    }

    /// The node's API server as the integration tests' `ControlPlane` (for their helpers).
    pub fn control_plane(&self) -> ControlPlane {
        ControlPlane {
            dir: self.dir.clone(),
            bin_dir: self.bin_dir.clone(),
        }
    }

    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.bin_dir.join("kubectl"));
        c.arg("--kubeconfig").arg(self.dir.join("kubeconfig"));
        c.current_dir(repo_root());
        c
    }

    /// `hack/node.sh SUBCOMMAND DIR ARGS`: its stdout.
    pub fn script(&self, sub: &str, args: &[&str]) -> String {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/node.sh"))
            .arg(sub)
            .arg(&self.dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "hack/node.sh {sub} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// kubectl ARGS on the node; its stdout, or a panic with its output.
pub fn k(args: &[&str]) -> String {
    let mut cmd = node().kubectl();
    cmd.args(args);
    output_ok(cmd)
}

/// The name of the image `hack/image.sh list` gives that matches `which`.
pub fn built_image(which: impl Fn(&str) -> bool) -> String {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("hack/image.sh")).arg("list");
    output_ok(cmd)
        .lines()
        .find(|l| which(l))
        .expect("hack/image.sh list names the image")
        .to_string()
}

/// Merges `status` into the KubeVirt CR's status in `ns`, as KubeVirt would report it.
pub fn set_kubevirt_status(ns: &str, status: &str) {
    let patch = format!(r#"{{"status":{status}}}"#);
    k(&[
        "-n",
        ns,
        "patch",
        "kubevirt",
        "kubevirt",
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ]);
}

/// kubectl ARGS with `input` on stdin.
pub fn k_stdin(args: &[&str], input: &str) -> String {
    let mut cmd = node().kubectl();
    cmd.args(args);
    pipe(cmd, input)
}

pub fn get_json(args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&k(&a)).unwrap()
}

/// The objects `kubectl kustomize DIR` renders (DIR relative to the repository), as JSON.
pub fn rendered(dir: &str) -> Vec<Value> {
    let yaml = k(&["kustomize", dir]);
    // One JSON document per object.
    let json = k_stdin(
        &["create", "--dry-run=client", "-o", "json", "-f", "-"],
        &yaml,
    );
    serde_json::Deserializer::from_str(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

/// `rendered(dir)`, with `edit` applied to its Job.
pub fn rendered_with(dir: &str, edit: impl FnOnce(&mut Value)) -> Vec<Value> {
    let mut objects = rendered(dir);
    let job = objects
        .iter_mut()
        .find(|o| o["kind"] == "Job")
        .unwrap_or_else(|| panic!("{dir} has a Job"));
    edit(job);
    objects
}

/// Sets the guard container's variable `name`.
pub fn set_env(job: &mut Value, name: &str, value: &str) {
    let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap();
    env.retain(|e| e["name"] != name);
    env.push(json!({"name": name, "value": value}));
}

/// `kubectl apply` of these objects.
pub fn apply(objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    k_stdin(&["apply", "-f", "-"], &list.to_string());
}

/// How a Job ended.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub condition: String,
    pub reason: String,
}

/// Waits until the Job is Complete or Failed (the only conditions upgrade-toolkit reads).
pub fn wait_job(name: &str, timeout: Duration) -> Outcome {
    let deadline = Instant::now() + timeout;
    loop {
        let out = node()
            .kubectl()
            .args(["-n", NS, "get", "job", name, "-o", "json"])
            .output()
            .unwrap();
        if out.status.success() {
            let job: Value = serde_json::from_slice(&out.stdout).unwrap();
            for c in job["status"]["conditions"].as_array().into_iter().flatten() {
                let t = c["type"].as_str().unwrap_or_default();
                if (t == "Complete" || t == "Failed") && c["status"] == "True" {
                    return Outcome {
                        condition: t.into(),
                        reason: c["reason"].as_str().unwrap_or_default().into(),
                    };
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "job {name} not finished after {timeout:?}: {}\npods: {}",
            k(&["-n", NS, "get", "job", name, "-o", "yaml"]),
            k(&[
                "-n",
                NS,
                "get",
                "pods",
                "-l",
                &format!("job-name={name}"),
                "-o",
                "yaml"
            ])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The Job's pods, oldest first.
/// The Job `name` succeeded once and counted no failed pod (an eviction is not counted).
pub fn assert_succeeded_without_failures(name: &str) {
    let job = get_json(&["-n", NS, "job", name]);
    assert_eq!(job["status"]["succeeded"], 1, "{job:#}");
    let failed = job["status"].get("failed").and_then(Value::as_i64);
    assert_eq!(
        failed.unwrap_or(0),
        0,
        "the eviction is not counted: {job:#}"
    );
}

pub fn pods_of(job: &str) -> Vec<Value> {
    pods_with(&format!("job-name={job}"))
}

/// The pods in harvester-system that carry the label selector `selector`, oldest first.
pub fn pods_with(selector: &str) -> Vec<Value> {
    let list = get_json(&["-n", NS, "pods", "-l", selector]);
    let mut pods = list["items"].as_array().unwrap().clone();
    pods.sort_by_key(|p| {
        p["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .to_string()
    });
    pods
}

/// The guard container's terminated state in `pod`.
pub fn terminated(pod: &Value) -> Value {
    pod["status"]["containerStatuses"][0]["state"]["terminated"].clone()
}

/// Every Job in harvester-system gone, with its pods.
pub fn delete_jobs() {
    k(&[
        "-n",
        NS,
        "delete",
        "jobs",
        "--all",
        "--cascade=foreground",
        "--wait",
    ]);
    k(&["-n", NS, "delete", "pods", "--all", "--wait"]);
}

/// The KubeVirt CR and the `harvester` ManagedChart deleted, if there.
pub fn delete_kubevirt_and_chart() {
    for (ns, kind, name) in [
        (NS, "kubevirt", "kubevirt"),
        (CHART_NS, "managedchart", "harvester"),
    ] {
        k(&[
            "-n",
            ns,
            "delete",
            kind,
            name,
            "--ignore-not-found",
            "--wait",
        ]);
    }
}

/// The Harvester-like state of `hack/demo/harvester.yaml`, fresh, and the manifests' RBAC.
pub fn harvester_state() {
    delete_jobs();
    delete_kubevirt_and_chart();
    k(&[
        "apply",
        "--server-side",
        "--field-manager",
        "helm",
        "-f",
        "hack/demo/harvester.yaml",
    ]);
    set_kubevirt_status(
        NS,
        r#"{"phase":"Deployed","observedKubeVirtVersion":"v1.6.0","targetKubeVirtVersion":"v1.7.0","outdatedVirtualMachineInstanceWorkloads":2}"#,
    );
    k(&["apply", "-k", "manifests/base"]);
}

/// Both objects without what the server manages (`hack/snapshot.jq`, as the demo compares).
pub fn snapshot() -> (Value, Value) {
    let kv = crate::support::content(&get_json(&["-n", NS, "kubevirt", "kubevirt"]));
    let chart = crate::support::content(&get_json(&["-n", CHART_NS, "managedchart", "harvester"]));
    (kv, chart)
}

pub fn methods() -> Value {
    get_json(&["-n", NS, "kubevirt", "kubevirt"])["spec"]["workloadUpdateStrategy"]
        ["workloadUpdateMethods"]
        .clone()
}

fn figures_file() -> PathBuf {
    repo_root().join("target/e2e-figures.txt")
}

/// A figure of this run: on stderr, and in target/e2e-figures.txt, which hack/test.sh prints.
pub fn figure(line: &str) {
    use std::io::Write;
    eprintln!("e2e: {line}");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(figures_file())
    {
        let _ = writeln!(f, "{line}");
    }
}

/// The node's name (hack/node.sh).
pub const NODE_NAME: &str = "wug-node";

/// How a run of `hack/job.sh` ended.
pub struct ScriptRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl std::fmt::Debug for ScriptRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {} after {:.1} s\nstdout: {}\nstderr: {}",
            self.code,
            self.took.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }
}

/// `hack/job.sh ARGS` with the node's kubectl and kubeconfig, as an operator runs it.
pub fn job_sh_cmd(args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg(repo_root().join("hack/job.sh"))
        .args(args)
        .env("KUBECTL", node().bin_dir.join("kubectl"))
        .env("KUBECONFIG", node().dir.join("kubeconfig"))
        .current_dir(repo_root());
    c
}

/// `hack/job.sh ARGS`, to its end.
pub fn job_sh(args: &[&str]) -> ScriptRun {
    let start = Instant::now();
    let out = job_sh_cmd(args).output().unwrap();
    ScriptRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
        took: start.elapsed(),
    }
}

/// The objects `hack/job.sh render ARGS` prints.
pub fn job_sh_render(args: &[&str]) -> Vec<Value> {
    let mut a = vec!["render"];
    a.extend_from_slice(args);
    let run = job_sh(&a);
    assert_eq!(run.code, 0, "{run:?}");
    let list: Value = serde_json::from_str(&run.stdout).unwrap();
    list["items"].as_array().unwrap().clone()
}

/// An UpgradePlan of the fixture CRD (cluster-scoped, as upgrade-toolkit's), as its controller
/// would create it.
pub fn create_plan(name: &str) -> Value {
    let plan = json!({"apiVersion": "management.harvesterhci.io/v1beta1", "kind": "UpgradePlan",
                      "metadata": {"name": name}, "spec": {"version": "v1.8.0"}});
    k_stdin(&["create", "-f", "-"], &plan.to_string());
    get_json(&["upgradeplan", name])
}

/// The node's spec as the test found it, put back when dropped (a cordon, taints), so that a
/// failing test leaves no cordoned or tainted node to the next one.
pub struct NodeAsFound {
    pub spec: Value,
}

impl NodeAsFound {
    pub fn record() -> NodeAsFound {
        NodeAsFound { spec: node_spec() }
    }

    /// Puts back `unschedulable` and `taints` as they were.
    pub fn restore(&self) {
        let patch = json!({"spec": {"unschedulable": self.spec.get("unschedulable"),
                                    "taints": self.spec.get("taints")}});
        let mut cmd = node().kubectl();
        cmd.args([
            "patch",
            "node",
            NODE_NAME,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
        let _ = cmd.output();
    }
}

impl Drop for NodeAsFound {
    fn drop(&mut self) {
        self.restore();
    }
}

/// `kubectl drain` of the node as an upgrade drains it (DaemonSets stay, emptyDir data goes, the
/// Eviction API, so a PodDisruptionBudget would block it): its output and how long it took.
pub fn drain_node(timeout: &str) -> (String, Duration) {
    let start = Instant::now();
    let timeout = format!("--timeout={timeout}");
    let out = k(&[
        "drain",
        NODE_NAME,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        "--disable-eviction=false",
        &timeout,
    ]);
    (out, start.elapsed())
}

/// The node's spec, without what the node lifecycle controller adds on its own.
pub fn node_spec() -> Value {
    get_json(&["node", NODE_NAME])["spec"].clone()
}

/// The node's Ready condition status: "True", "False" or "Unknown".
pub fn node_ready() -> String {
    k(&[
        "get",
        "node",
        NODE_NAME,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ])
}

/// Waits until `check` holds, polling every 100 ms; panics with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < timeout, "{what}: not after {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

/// The names of the Jobs and pods in harvester-system that carry the label selector `selector`.
pub fn jobs_and_pods(selector: &str) -> Vec<String> {
    let out = k(&["-n", NS, "get", "jobs,pods", "-l", selector, "-o", "name"]);
    out.lines().map(str::to_string).collect()
}

/// Harvester's Upgrade CRD (tests/fixtures/crds, applied by hack/control-plane.sh), applied
/// again (a node kept from an older checkout may hold an older fixture); and no Upgrade left in
/// the namespace by an earlier test.
pub fn no_upgrades_yet() {
    k(&["apply", "-f", "tests/fixtures/crds/harvester-upgrade.yaml"]);
    k(&[
        "wait",
        "--for=condition=Established",
        "crd/upgrades.harvesterhci.io",
        "--timeout=30s",
    ]);
    delete_all_upgrades();
    let left = k(&["-n", NS, "get", "upgrades.harvesterhci.io", "-o", "name"]);
    assert!(left.trim().is_empty(), "Upgrades left: {left}");
}

/// Every Upgrade in NS gone, whatever a test left: wrangler's finalizer (which the model of
/// Harvester's controller adds) taken off first, as its OnRemove would. Never panics (the
/// leftovers' Drops call it); the tests that need none check for themselves.
pub fn delete_all_upgrades() {
    let mut list = node().kubectl();
    list.args(["-n", NS, "get", "upgrades.harvesterhci.io", "-o", "name"]);
    let names = list.output().map(|o| o.stdout).unwrap_or_default();
    for name in String::from_utf8_lossy(&names).lines() {
        let mut cmd = node().kubectl();
        cmd.args(["-n", NS, "patch", name, "--type=merge"])
            .args(["-p", r#"{"metadata":{"finalizers":null}}"#]);
        let _ = cmd.output();
    }
    let mut cmd = node().kubectl();
    cmd.args([
        "-n",
        NS,
        "delete",
        "upgrades.harvesterhci.io",
        "--all",
        "--wait",
    ]);
    let _ = cmd.output();
}

/// A merge patch of an Upgrade as Harvester's controller (binary `harvester`): labels and
/// conditions alike go to the object, as the real CRD has no status subresource.
pub fn patch_upgrade(name: &str, patch: &Value) {
    let p = patch.to_string();
    k(&[
        "-n",
        NS,
        "patch",
        "upgrades.harvesterhci.io",
        name,
        "--type=merge",
        "--field-manager=harvester",
        "-p",
        &p,
    ]);
}

/// The resident guard's metrics, scraped from its running pod as Prometheus would, through the
/// API server's proxy to the pod's port (the API server and the pods share the node's network
/// namespace): one `GET /metrics`.
pub fn scrape_guard(selector: &str, port: u16) -> String {
    let pods = get_json(&[
        "-n",
        NS,
        "pods",
        "-l",
        selector,
        "--field-selector=status.phase=Running",
    ]);
    let name = pods["items"]
        .as_array()
        .and_then(|p| {
            p.iter()
                .find(|p| p["metadata"]["deletionTimestamp"].is_null())
        })
        .and_then(|p| p["metadata"]["name"].as_str())
        .unwrap_or_else(|| panic!("no running pod with {selector}: {pods}"))
        .to_string();
    k(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{NS}/pods/{name}:{port}/proxy/metrics"),
    ])
}

/// A series' value in a scrape (`name{labels} value`), if there.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// A field of a Chart.yaml (`version: 0.1.0`, `appVersion: "0.1.0"`).
pub fn chart_field(chart: &std::path::Path, field: &str) -> String {
    let text = std::fs::read_to_string(chart.join("Chart.yaml")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("no {field} in {}/Chart.yaml", chart.display()))
}

/// The previous release's commit (hack/previous-release), abbreviated as its `--version` says it.
pub fn previous_commit() -> String {
    let text = std::fs::read_to_string(repo_root().join("hack/previous-release")).unwrap();
    let commit = text
        .lines()
        .find(|l| !l.starts_with('#') && l.len() == 40)
        .expect("hack/previous-release holds a commit");
    commit[..7].to_string()
}

/// Pod `name`'s image and what its binary's `--version` says (exec in the pod).
pub fn image_and_version(name: &str) -> (String, String) {
    let pod = get_json(&["-n", NS, "pod", name]);
    let image = pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string();
    let version = k(&[
        "-n",
        NS,
        "exec",
        name,
        "--",
        "workload-update-guard",
        "--version",
    ]);
    (image, version.trim().to_string())
}
