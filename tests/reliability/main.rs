//! Faults, races and bad input against the real kube-apiserver: the guard converges and loses
//! nobody's data. Built only with `--features failpoints` (test-only failpoints in the binary).
//!
//! These tests stop and restart the API server of their control plane, so they run one at a
//! time (the `SERIAL` lock); the control plane is this binary's own.

#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;
use workload_update_guard::error::exit;
use workload_update_guard::{model, plan};

use support::*;

static SERIAL: Mutex<()> = Mutex::const_new(());

fn script(args: &[&str]) {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("hack/control-plane.sh"))
        .args(args)
        .arg(&control_plane().dir);
    output_ok(cmd);
}

fn stop_apiserver() {
    script(&["stop-apiserver"]);
}

fn start_apiserver() {
    script(&["start-apiserver"]);
}

/// The binary as a child process, for tests that signal it or restart the server under it.
fn spawn(
    kubeconfig: &std::path::Path,
    env: &BTreeMap<String, String>,
    term: &std::path::Path,
) -> std::process::Child {
    Command::new(BIN)
        .env_clear()
        .env("KUBECONFIG", kubeconfig)
        .env("TERMINATION_MESSAGE_PATH", term)
        .envs(env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A Harvester-like pair in a new namespace, the API server stopped, and `pre` started against
/// it. Returns the namespace, the child, and its termination-message path.
async fn pre_with_the_api_server_down(
    client: &kube::Client,
    label: &str,
) -> (String, std::process::Child, std::path::PathBuf) {
    let ns = namespace(client, label).await;
    harvester(client, &ns, Some(json!(["LiveMigrate"]))).await;
    stop_apiserver();
    let term = tempfile_dir().join("term");
    let child = spawn(&control_plane().kubeconfig(), &env_for(&ns, "pre"), &term);
    (ns, child, term)
}

fn assert_success(out: &std::process::Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn wait(child: std::process::Child) -> std::process::Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

async fn both(client: &kube::Client, ns: &str) -> (Value, Value) {
    (
        get(client, "KubeVirt", ns, "kubevirt").await,
        get(client, "ManagedChart", ns, "harvester").await,
    )
}

/// The state after a clean `pre` of a fresh Harvester-like pair, for comparison.
async fn clean_pre_state(client: &kube::Client) -> (Value, Value) {
    let ns = namespace(client, "clean").await;
    harvester(client, &ns, Some(json!(["LiveMigrate", "Evict"]))).await;
    let run = run_phase(&ns, "pre").await;
    run.ok();
    let (kv, chart) = both(client, &ns).await;
    (normalize(&kv, &ns), normalize(&chart, &ns))
}

/// Content with the namespace name replaced, so states in two namespaces compare.
fn normalize(obj: &Value, ns: &str) -> Value {
    let text = content(obj).to_string().replace(ns, "NS");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn the_phase_succeeds_when_the_api_server_comes_up_late() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let started = Instant::now();
    let (ns, child, _) = pre_with_the_api_server_down(&client, "late").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    start_apiserver();
    let out = wait(child).await;
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("transient error, retrying"),
        "it did wait: {stderr}"
    );
    let (kv, _) = both(&client, &ns).await;
    assert_eq!(
        kv["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
        json!([])
    );
    eprintln!(
        "late API server: phase done {:?} after start",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_api_server_restart_between_the_two_writes_is_survived() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let (clean_kv, clean_chart) = clean_pre_state(&client).await;
    let ns = namespace(&client, "restart").await;
    let (kv0, chart0) = harvester(&client, &ns, Some(json!(["LiveMigrate", "Evict"]))).await;
    let mut env = env_for(&ns, "pre");
    env.insert(
        "FAILPOINTS".into(),
        "after-write-managedchart=sleep(2000)".into(),
    );
    let term = tempfile_dir().join("term");
    let child = spawn(&control_plane().kubeconfig(), &env, &term);
    // The ManagedChart write happens at once; restart the server during the pause after it.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop_apiserver();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    start_apiserver();
    let out = wait(child).await;
    assert_success(&out);
    let (kv, chart) = both(&client, &ns).await;
    assert_eq!(
        (normalize(&kv, &ns), normalize(&chart, &ns)),
        (clean_kv, clean_chart)
    );
    assert_eq!(run_phase(&ns, "post").await.code, 0);
    let (kv, chart) = both(&client, &ns).await;
    assert_eq!(content(&kv)["spec"], content(&kv0)["spec"]);
    assert_eq!(content(&chart), content(&chart0));
}

/// SIGKILL after each write of pre and of post, then a rerun: the end state equals a clean run
/// and post still restores the exact original.
#[tokio::test]
async fn a_kill_after_any_write_then_a_rerun_converges() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let (clean_kv, clean_chart) = clean_pre_state(&client).await;
    let mut runs = 0;
    for original in [
        Some(json!(["LiveMigrate"])),
        Some(json!(["LiveMigrate", "Evict"])),
        Some(json!([])),
        None,
    ] {
        for (phase, point) in [
            ("pre", "after-write-managedchart"),
            ("pre", "after-write-kubevirt"),
            ("post", "after-write-kubevirt"),
            ("post", "after-write-managedchart"),
        ] {
            let ns = namespace(&client, "kill").await;
            let (kv0, chart0) = harvester(&client, &ns, original.clone()).await;
            if phase == "post" {
                assert_eq!(run_phase(&ns, "pre").await.code, 0);
            }
            let mut env = env_for(&ns, phase);
            env.insert("FALLBACK_METHODS".into(), "LiveMigrate".into());
            let mut killed = env.clone();
            killed.insert("FAILPOINTS".into(), format!("{point}=return"));
            let run = run_bin(&control_plane().kubeconfig(), killed).await;
            runs += 1;
            // Killed by the signal right after the write: no exit code, no summary.
            assert_eq!(run.code, -1, "{phase} {point}: {run:?}");
            let rerun = run_bin(&control_plane().kubeconfig(), env.clone()).await;
            rerun.ok();
            if phase == "pre" {
                let (kv, chart) = both(&client, &ns).await;
                if original == Some(json!(["LiveMigrate", "Evict"])) {
                    assert_eq!(normalize(&kv, &ns), clean_kv, "{point}");
                    assert_eq!(normalize(&chart, &ns), clean_chart, "{point}");
                }
                assert_eq!(
                    kv["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
                    json!([])
                );
                let record: plan::records::ValueRecord =
                    plan::records::read_record(&kv, model::KUBEVIRT_RECORD)
                        .unwrap()
                        .unwrap();
                assert_eq!(
                    record.value, original,
                    "{point}: the record is the first one"
                );
                let mut post = env.clone();
                post.insert("PHASE".into(), "post".into());
                assert_eq!(run_bin(&control_plane().kubeconfig(), post).await.code, 0);
            }
            let (kv, chart) = both(&client, &ns).await;
            assert_eq!(
                content(&kv)["spec"],
                content(&kv0)["spec"],
                "{original:?} {phase} {point}"
            );
            assert_eq!(
                content(&kv)["metadata"]["annotations"],
                content(&kv0)["metadata"]["annotations"]
            );
            assert_eq!(
                content(&chart),
                content(&chart0),
                "{original:?} {phase} {point}"
            );
            for obj in [&kv, &chart] {
                assert_eq!(claims_of_ours(obj), Vec::<Value>::new(), "{phase} {point}");
            }
        }
    }
    eprintln!("kill tests: {runs} killed runs, each rerun converged to the clean state");
}

/// `pre` killed after its ManagedChart write, then Fleet re-renders the KubeVirt CR from the new
/// values (methods `[]`) before anything else runs. Whether `pre` is rerun or `post` comes
/// straight away, the original comes back exactly, from the ManagedChart's copy.
#[tokio::test]
async fn a_fleet_redeploy_after_a_killed_pre_loses_no_original() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let mut runs = 0;
    for original in [Some(json!(["LiveMigrate", "Evict"])), Some(json!([])), None] {
        for rerun_pre in [true, false] {
            let ns = namespace(&client, "redeploy").await;
            let (kv0, chart0) = harvester(&client, &ns, original.clone()).await;
            let mut killed = env_for(&ns, "pre");
            killed.insert(
                "FAILPOINTS".into(),
                "after-write-managedchart=return".into(),
            );
            assert_eq!(
                run_bin(&control_plane().kubeconfig(), killed).await.code,
                -1
            );
            // Helm applies the chart with the override: the CR now says [] and has no record.
            let op = json!([{"op": "add", "path": "/spec/workloadUpdateStrategy/workloadUpdateMethods", "value": []}]);
            json_patch(&client, "KubeVirt", &ns, "kubevirt", op)
                .await
                .unwrap();
            if rerun_pre {
                assert_eq!(run_phase(&ns, "pre").await.code, 0);
                let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
                let record: plan::records::ValueRecord =
                    plan::records::read_record(&kv, model::KUBEVIRT_RECORD)
                        .unwrap()
                        .unwrap();
                assert_eq!(
                    record.value, original,
                    "the true original is recorded, not Helm's []"
                );
            }
            let mut post = env_for(&ns, "post");
            post.insert("FALLBACK_METHODS".into(), "LiveMigrate".into());
            assert_eq!(run_bin(&control_plane().kubeconfig(), post).await.code, 0);
            let (kv, chart) = both(&client, &ns).await;
            let methods = |o: &Value| {
                o.pointer("/spec/workloadUpdateStrategy/workloadUpdateMethods")
                    .cloned()
            };
            assert_eq!(methods(&kv), original, "rerun_pre={rerun_pre}");
            assert_eq!(
                content(&kv)["metadata"]["annotations"],
                content(&kv0)["metadata"]["annotations"]
            );
            assert_eq!(content(&chart), content(&chart0));
            runs += 1;
        }
    }
    eprintln!(
        "fleet redeploy after a killed pre: {runs} scenarios, each original restored exactly"
    );
}

/// Another writer adds and removes its own comparePatches entries, values keys and annotations
/// on both objects while pre and post run again and again: every change of theirs survives, and
/// the guard's writes did meet theirs (a conflict, read again and planned again: converge's
/// "conflict: read again" line). A run without one shows nothing about hazard 4: with no
/// resourceVersion test in our patches, a run met no conflict and passed the other checks.
#[tokio::test]
async fn concurrent_writers_lose_nothing() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let ns = namespace(&client, "race").await;
    let (kv0, chart0) = harvester(&client, &ns, Some(json!(["LiveMigrate", "Evict"]))).await;
    const MIN_WRITES: usize = 400;
    const PHASES: usize = 30;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, ns, stop) = (client.clone(), ns.clone(), stop.clone());
        tokio::spawn(async move { other_writer(&client, &ns, MIN_WRITES, &stop).await })
    };
    let mut guard_conflicts = 0;
    let mut env = env_for(&ns, "post");
    env.insert("FALLBACK_METHODS".into(), "LiveMigrate".into());
    env.insert("RUST_LOG".into(), "debug".into());
    for i in 0..PHASES {
        env.insert(
            "PHASE".into(),
            if i % 2 == 0 { "pre" } else { "post" }.into(),
        );
        let run = run_bin(&control_plane().kubeconfig(), env.clone()).await;
        run.ok();
        guard_conflicts += run.stderr.matches("conflict: read again").count();
    }
    stop.store(true, Ordering::SeqCst);
    let (expected, writes, conflicts) = writer.await.unwrap();
    let (kv, chart) = both(&client, &ns).await;
    // Everything the other writer left is there; nothing of ours is.
    let mut survivors = 0;
    for (kind, obj) in [("KubeVirt", &kv), ("ManagedChart", &chart)] {
        let have = theirs(obj);
        assert_eq!(have, expected[kind], "{kind}: the other writer's items");
        survivors += have.len();
        let annotations = obj["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert!(
            annotations
                .keys()
                .all(|k| !k.starts_with(model::ANNOTATION_PREFIX)),
            "{annotations:?}"
        );
    }
    assert_eq!(
        kv["spec"]["workloadUpdateStrategy"],
        kv0["spec"]["workloadUpdateStrategy"]
    );
    let ours = chart["spec"]["diff"]["comparePatches"].as_array().unwrap();
    assert_eq!(
        &ours[..3],
        &chart0["spec"]["diff"]["comparePatches"].as_array().unwrap()[..3]
    );
    assert!(
        chart
            .pointer("/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods")
            .is_none()
    );
    assert!(
        guard_conflicts > 0,
        "{PHASES} guard phases and {writes} writes of the other writer, and not one conflict for \
         the guard: its writes never met theirs, or were not conditional"
    );
    eprintln!(
        "concurrent writers: {writes} writes by the other writer ({conflicts} of its attempts met a conflict), \
         {PHASES} guard phases ({guard_conflicts} conflicts re-read and re-planned), \
         {survivors} of its items expected at the end and all present"
    );
}

/// The other writer's items on an object: comparePatches entries, values keys, feature gates,
/// annotations.
fn theirs(obj: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in obj
        .pointer("/spec/diff/comparePatches")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = e["name"].as_str().filter(|n| n.starts_with("w-")) {
            out.insert(format!("entry {n}"));
        }
    }
    let keys = |ptr: &str| -> Vec<String> {
        obj.pointer(ptr)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys().cloned())
            .collect()
    };
    for path in [
        "/spec/values/other",
        "/spec/values/kubevirt/spec/workloadUpdateStrategy",
    ] {
        for k in keys(path) {
            if k.starts_with("w-") {
                out.insert(format!("value {path}/{k}"));
            }
        }
    }
    for k in keys("/metadata/annotations") {
        if k.starts_with("other.example/w-") {
            out.insert(format!("annotation {k}"));
        }
    }
    for g in obj
        .pointer(&format!("/{}", GATES_AT.join("/")))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if g.starts_with("w-") {
            out.insert(format!("gate {g}"));
        }
    }
    out
}

/// Writes like a well-behaved controller: read, change its own items, JSON Patch conditional
/// on the resourceVersion, retry on conflict. Returns what it expects to find at the end.
async fn other_writer(
    client: &kube::Client,
    ns: &str,
    min_writes: usize,
    stop: &AtomicBool,
) -> (BTreeMap<&'static str, BTreeSet<String>>, usize, usize) {
    let mut expected: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    let mut conflicts = 0;
    let mut i = 0;
    // Bounded: it stops once the guard is done and it has made at least `min_writes` writes.
    while i < min_writes || !stop.load(Ordering::SeqCst) {
        assert!(i < 100_000, "the other writer is bounded");
        let kind = if i % 2 == 0 {
            "KubeVirt"
        } else {
            "ManagedChart"
        };
        let name = if kind == "KubeVirt" {
            "kubevirt"
        } else {
            "harvester"
        };
        loop {
            let obj = get(client, kind, ns, name).await;
            let mine = theirs(&obj);
            let remove = i % 5 == 4 && !mine.is_empty();
            let mut ops =
                vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv(&obj)})];
            let item: String;
            if remove {
                // Remove the oldest of its items.
                item = mine.iter().next().unwrap().clone();
                ops.push(remove_op(&obj, &item));
            } else {
                let key = format!("w-{i}");
                match (i / 2) % 3 {
                    0 => {
                        let ann = format!("other.example/{key}");
                        if obj["metadata"]["annotations"].is_object() {
                            ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", ann.replace('/', "~1")), "value": "x"}));
                        } else {
                            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {ann.clone(): "x"}}));
                        }
                        item = format!("annotation {ann}");
                    }
                    1 if kind == "ManagedChart" => {
                        ops.push(json!({"op": "add", "path": "/spec/diff/comparePatches/-",
                                        "value": {"apiVersion": "v1", "kind": "ConfigMap", "name": key, "jsonPointers": ["/data"]}}));
                        item = format!("entry {key}");
                    }
                    _ if kind == "KubeVirt" => {
                        // A feature gate beside our methods (KubeVirt's CRD prunes unknown fields).
                        let path = "/spec/configuration/developerConfiguration/featureGates";
                        ops.push(json!({"op": "add", "path": format!("{path}/-"), "value": key}));
                        item = format!("gate {key}");
                    }
                    _ => {
                        // A values key beside ours.
                        let path = "/spec/values/other";
                        if obj.pointer(path).is_some() {
                            ops.push(
                                json!({"op": "add", "path": format!("{path}/{key}"), "value": i}),
                            );
                        } else if obj.pointer("/spec/values").is_some() {
                            ops.push(json!({"op": "add", "path": path, "value": {key.clone(): i}}));
                        } else {
                            ops.push(json!({"op": "add", "path": "/spec/values", "value": {"other": {key.clone(): i}}}));
                        }
                        item = format!("value {path}/{key}");
                    }
                }
            }
            match json_patch(client, kind, ns, name, Value::Array(ops)).await {
                Ok(_) => {
                    let set = expected.entry(kind).or_default();
                    if remove {
                        set.remove(&item);
                    } else {
                        set.insert(item);
                    }
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => conflicts += 1,
                Err(e) => panic!("other writer: {e}"),
            }
        }
        i += 1;
    }
    expected.entry("KubeVirt").or_default();
    expected.entry("ManagedChart").or_default();
    (expected, i, conflicts)
}

fn remove_op(obj: &Value, item: &str) -> Value {
    if let Some(ann) = item.strip_prefix("annotation ") {
        json!({"op": "remove", "path": format!("/metadata/annotations/{}", ann.replace('/', "~1"))})
    } else if let Some(name) = item.strip_prefix("entry ") {
        let i = obj["spec"]["diff"]["comparePatches"]
            .as_array()
            .unwrap()
            .iter()
            .position(|e| e["name"] == name)
            .unwrap();
        json!({"op": "remove", "path": format!("/spec/diff/comparePatches/{i}")})
    } else if let Some(gate) = item.strip_prefix("gate ") {
        let i = obj[GATES_AT[0]][GATES_AT[1]][GATES_AT[2]][GATES_AT[3]]
            .as_array()
            .unwrap()
            .iter()
            .position(|g| g == gate)
            .unwrap();
        json!({"op": "remove", "path": format!("/{}/{i}", GATES_AT.join("/"))})
    } else {
        json!({"op": "remove", "path": item.strip_prefix("value ").unwrap()})
    }
}

/// Where the other writer's KubeVirt feature gates are.
const GATES_AT: [&str; 4] = [
    "spec",
    "configuration",
    "developerConfiguration",
    "featureGates",
];

#[tokio::test]
async fn sigterm_during_a_retry_loop_exits_promptly_with_the_interrupted_code() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let (_, child, term) = pre_with_the_api_server_down(&client, "sigterm").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = Instant::now();
    // SAFETY: kill(2) to our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let out = wait(child).await;
    let took = sent.elapsed();
    start_apiserver();
    assert_eq!(
        out.status.code(),
        Some(i32::from(exit::INTERRUPTED)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_secs(2),
        "exited {took:?} after SIGTERM"
    );
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&term).unwrap()).unwrap();
    assert_eq!(summary["exitCode"], json!(exit::INTERRUPTED));
    assert_eq!(summary["error"], "interrupted by SIGTERM");
    eprintln!("SIGTERM: exited {took:?} after the signal");
}

#[tokio::test]
async fn an_unreachable_api_server_ends_at_the_deadline_with_the_transient_code() {
    let _serial = SERIAL.lock().await;
    // A kubeconfig for a port where nothing listens.
    let dir = tempfile_dir();
    let kubeconfig = dir.join("kubeconfig");
    insecure_kubeconfig(&kubeconfig, &format!("https://127.0.0.1:{}", free_port()));
    let mut env = env_for("harvester-system", "pre");
    env.insert("DEADLINE_SECONDS".into(), "3".into());
    let started = Instant::now();
    let run = run_bin(&kubeconfig, env).await;
    assert_eq!(run.code, i32::from(exit::TRANSIENT), "{run:?}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let error = run.summary.unwrap()["error"].as_str().unwrap().to_string();
    assert!(
        error.starts_with("deadline of 3s exceeded while retrying; last error:"),
        "{error}"
    );
    assert!(error.to_lowercase().contains("connect"), "{error}");
}

/// Every invalid setting and every malformed object: one clear line, the documented exit
/// code, and no write to either object.
#[tokio::test]
async fn bad_input_gives_one_line_the_documented_code_and_no_write() {
    let _serial = SERIAL.lock().await;
    let (client, ns) = new_harvester("bad", json!(["LiveMigrate"])).await;
    let (kv0, chart0) = both(&client, &ns).await;
    let bad_env: &[(&str, &str)] = &[
        ("PHASE", "upgrade"),
        ("KUBEVIRT_NAMESPACE", "Not_A_Namespace"),
        ("KUBEVIRT_NAME", ""),
        ("MANAGEDCHART_NAMESPACE", "x".repeat(64).leak()),
        ("MANAGEDCHART_NAME", "UPPER"),
        ("STEP_KUBEVIRT", "maybe"),
        ("STEP_COMPARE_PATCHES", "2"),
        ("STEP_CHART_VALUES", "on"),
        ("FALLBACK_METHODS", "LiveMigrate,Restart"),
        ("DRY_RUN", "perhaps"),
        ("DEADLINE_SECONDS", "-1"),
        ("LOG_FORMAT", "xml"),
        ("TERMINATION_MESSAGE_PATH", "relative"),
    ];
    let mut cases = 0;
    for (var, value) in bad_env {
        for phase in ["pre", "post", "status"] {
            let mut env = env_for(&ns, phase);
            env.insert(var.to_string(), value.to_string());
            let run = run_bin(&control_plane().kubeconfig(), env).await;
            assert_eq!(run.code, i32::from(exit::CONFIG), "{var}={value}: {run:?}");
            let lines: Vec<&str> = run.stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{var}: one line: {run:?}");
            assert!(
                lines[0].starts_with("error: ") && lines[0].contains(var),
                "{var}: {}",
                lines[0]
            );
            cases += 1;
        }
    }
    assert_eq!(
        both(&client, &ns).await,
        (kv0.clone(), chart0.clone()),
        "no write on bad configuration"
    );

    // Malformed objects: each on one object, the other one healthy; neither is written.
    let record_key = |k: &str| format!("/metadata/annotations/{}", k.replace('/', "~1"));
    let malformed: Vec<(&str, &str, Value, &str)> = vec![
        (
            "ManagedChart",
            "harvester",
            json!({"op": "add", "path": "/spec/values/kubevirt", "value": "oops"}),
            "spec.values.kubevirt is not a map",
        ),
        (
            "ManagedChart",
            "harvester",
            json!({"op": "add", "path": "/spec/values/kubevirt/spec", "value": [1]}),
            "spec.values.kubevirt.spec is not a map",
        ),
        (
            "ManagedChart",
            "harvester",
            json!({"op": "add", "path": "/metadata/annotations", "value": {model::VALUES_RECORD: "{broken"}}),
            "is corrupted",
        ),
        (
            "ManagedChart",
            "harvester",
            json!({"op": "add", "path": "/metadata/annotations", "value": {model::COMPARE_RECORD: r#"{"added":"all"}"#}}),
            // A value this version does not know: a later version's record (records.rs).
            "written by a later version",
        ),
        (
            "ManagedChart",
            "harvester",
            json!({"op": "add", "path": "/metadata/annotations", "value": {model::KUBEVIRT_COPY: "[]"}}),
            "is corrupted",
        ),
        (
            "KubeVirt",
            "kubevirt",
            json!({"op": "add", "path": record_key(model::KUBEVIRT_RECORD), "value": r#"{"present":true,"value":"LiveMigrate"}"#}),
            "is corrupted",
        ),
        (
            "KubeVirt",
            "kubevirt",
            json!({"op": "add", "path": record_key(model::KUBEVIRT_RECORD), "value": "LiveMigrate"}),
            "is corrupted",
        ),
    ];
    for (kind, name, op, want) in malformed {
        for phase in ["pre", "post"] {
            let ns = harvester_ns(&client, "malformed", json!(["LiveMigrate"])).await;
            json_patch(&client, kind, &ns, name, json!([op]))
                .await
                .unwrap();
            let before = both(&client, &ns).await;
            let run = run_phase(&ns, phase).await;
            assert_eq!(
                run.code,
                i32::from(exit::PERMANENT),
                "{kind} {want}: {run:?}"
            );
            let error = run.summary.as_ref().unwrap()["error"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(
                error.contains(want) && error.contains("malformed object") && !error.contains('\n'),
                "{error}"
            );
            assert_eq!(
                run.stderr.lines().filter(|l| l.contains("ERROR")).count(),
                1,
                "{run:?}"
            );
            assert_eq!(
                both(&client, &ns).await,
                before,
                "{kind} {want}: no write at all"
            );
            cases += 1;
        }
    }
    // What the schema forbids never reaches the guard: the API server refuses it first.
    let ns2 = harvester_ns(&client, "schema", None).await;
    for (kind, name, op) in [
        (
            "KubeVirt",
            "kubevirt",
            json!({"op": "add", "path": "/spec/workloadUpdateStrategy/workloadUpdateMethods", "value": "LiveMigrate"}),
        ),
        (
            "ManagedChart",
            "harvester",
            json!({"op": "add", "path": "/spec/diff/comparePatches", "value": {"a": 1}}),
        ),
    ] {
        let err = json_patch(&client, kind, &ns2, name, json!([op]))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 422),
            "{err}"
        );
    }
    eprintln!("bad input: {cases} cases, each one line, the documented code, no write");
}

/// Runs a phase with `FAILPOINTS` set; `None` expects a normal success.
async fn phase_with(ns: &str, phase: &str, failpoints: Option<&str>) -> Run {
    let mut env = env_for(ns, phase);
    if let Some(f) = failpoints {
        env.insert("FAILPOINTS".into(), f.into());
    }
    run_bin(&control_plane().kubeconfig(), env).await
}

/// The control case of the lifetime tests: a `post` without its release writes leaves our claim,
/// and the next chart change of the methods conflicts with `workload-update-guard`, exactly the
/// upstream failure (harvester#10677, #10899). A rerun of `post` releases the claim and the same
/// chart change applies.
#[tokio::test]
async fn without_the_release_a_chart_change_conflicts_with_the_guard() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "control").await;
    assert_eq!(phase_with(&ns, "pre", None).await.code, 0);
    fleet_deploy(&client, &ns, &chart)
        .await
        .expect("redeploy while suspended");
    let post = phase_with(&ns, "post", Some("skip-release=return")).await;
    post.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    fleet_deploy(&client, &ns, &chart)
        .await
        .expect("the redeploy of the same value applies");
    let next = chart_version(&json!(["LiveMigrate", "Evict"]));
    let err = fleet_deploy(&client, &ns, &next).await.unwrap_err();
    assert!(
        err.contains("conflict") && err.contains("workload-update-guard"),
        "{err}"
    );
    // post is rerun (a retried Job): nothing to restore, but the claim goes.
    let rerun = phase_with(&ns, "post", None).await;
    rerun.ok();
    assert_eq!(methods_owners(&client, &ns).await, ["helm/Apply"]);
    fleet_deploy(&client, &ns, &next)
        .await
        .expect("the chart change applies now");
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!(["LiveMigrate", "Evict"])
    );
}

/// Killed Jobs in the field's life: `pre` killed between its two writes, Fleet redeploys, `pre`
/// is rerun; `post` killed right after its KubeVirt write (before the release), then rerun. The
/// field goes back to Helm, and the next chart change applies without conflict.
#[tokio::test]
async fn killed_phases_in_the_field_s_life_leave_no_claim() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "killed-life").await;
    let killed = phase_with(&ns, "pre", Some("after-write-managedchart=return")).await;
    assert_eq!(killed.code, -1, "{killed:?}");
    fleet_deploy(&client, &ns, &chart)
        .await
        .expect("Fleet renders the override");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    assert_eq!(phase_with(&ns, "pre", None).await.code, 0);
    let killed = phase_with(&ns, "post", Some("after-write-kubevirt=return")).await;
    assert_eq!(killed.code, -1, "{killed:?}");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
    assert_ne!(
        claims_of_ours(&kv),
        Vec::<Value>::new(),
        "killed before the release"
    );
    assert!(
        kv["metadata"]["annotations"][model::OWNERS_TO_RETURN].is_string(),
        "the restore noted whom to give the field back to: {kv}"
    );
    let rerun = phase_with(&ns, "post", None).await;
    rerun.ok();
    for (kind, name) in [("KubeVirt", "kubevirt"), ("ManagedChart", "harvester")] {
        let obj = get(&client, kind, &ns, name).await;
        assert_eq!(claims_of_ours(&obj), Vec::<Value>::new(), "{kind}");
    }
    // The owner recorded from the ManagedChart's copy (before Fleet's redeploy) gets it back.
    assert_eq!(methods_owners(&client, &ns).await, ["helm/Apply"]);
    fleet_deploy(&client, &ns, &chart)
        .await
        .expect("redeploy after post");
    let next = chart_version(&json!(["Evict"]));
    fleet_deploy(&client, &ns, &next)
        .await
        .expect("the chart change applies");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["Evict"]));
}

/// The window between `post`'s writes: the CR is restored while the ManagedChart's values still
/// hold `pre`'s `[]`. `post` is killed there (after its KubeVirt restore, or after the release
/// too) and Fleet's Helm applies the chart before the rerun. After the restore the field is ours,
/// so that apply conflicts with us and changes nothing; after the release it is Helm's, so the
/// apply sets `[]` again. Either way the rerun restores the original (from the ManagedChart's
/// copy in the second case), and Fleet's next deploy leaves the field as a never-cycled
/// install's: the original, owned by `helm` alone, with no claim of ours.
#[tokio::test]
async fn a_helm_apply_between_posts_writes_is_survived() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    for (point, the_apply_conflicts) in [
        ("after-write-kubevirt=return", true),
        ("after-write-kubevirt=1*off->return", false),
    ] {
        let (ns, chart) = helm_installed(&client, "post-window").await;
        let chart0 = get(&client, "ManagedChart", &ns, "harvester").await;
        assert_eq!(phase_with(&ns, "pre", None).await.code, 0);
        let killed = phase_with(&ns, "post", Some(point)).await;
        assert_eq!(killed.code, -1, "{point}: {killed:?}");
        assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
        match fleet_deploy(&client, &ns, &chart).await {
            Err(e) if the_apply_conflicts => assert!(
                e.contains("conflict") && e.contains("workload-update-guard"),
                "{point}: {e}"
            ),
            Ok(()) if !the_apply_conflicts => {
                assert_eq!(kubevirt_methods(&client, &ns).await, json!([]), "{point}")
            }
            other => panic!("{point}: {other:?}"),
        }
        let rerun = phase_with(&ns, "post", None).await;
        assert_eq!(rerun.code, 0, "{point}: {rerun:?}");
        fleet_deploy(&client, &ns, &chart)
            .await
            .expect("Fleet's next deploy");
        assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
        assert_eq!(
            methods_owners(&client, &ns).await,
            ["helm/Apply"],
            "{point}"
        );
        let mc = get(&client, "ManagedChart", &ns, "harvester").await;
        assert_eq!(content(&mc), content(&chart0), "{point}");
        for (kind, name) in [("KubeVirt", "kubevirt"), ("ManagedChart", "harvester")] {
            let obj = get(&client, kind, &ns, name).await;
            assert_eq!(claims_of_ours(&obj), Vec::<Value>::new(), "{point}: {kind}");
        }
    }
}

/// KubeVirt without Rancher/Fleet: the ManagedChart CRD is not served. `pre` fails at once with
/// the hint to switch the chart steps off; `status` reports the KubeVirt half and the problem.
/// (It removes the CRD of this binary's own control plane, so it lives here, serialized.)
#[tokio::test]
async fn without_the_managedchart_crd_the_message_says_what_to_set() {
    let _serial = SERIAL.lock().await;
    let (client, ns) = new_harvester("no-fleet", json!(["LiveMigrate"])).await;
    let crd = repo_root().join("tests/fixtures/crds/managedchart.yaml");
    let crd = crd.to_str().unwrap();
    kubectl_ok(&["delete", "-f", crd, "--wait=true"]);
    let pre = phase_with(&ns, "pre", None).await;
    let status = phase_with(&ns, "status", None).await;
    let mut json_env = env_for(&ns, "status");
    json_env.insert("LOG_FORMAT".into(), "json".into());
    let json_status = run_bin(&control_plane().kubeconfig(), json_env).await;
    kubectl_ok(&["apply", "-f", crd]);
    kubectl_ok(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout=60s",
        "-f",
        crd,
    ]);

    assert_eq!(pre.code, i32::from(exit::PERMANENT), "{pre:?}");
    let error = pre.summary.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(error.contains("MANAGEDCHART_NAME= (empty)"), "{error}");
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!(["LiveMigrate"]),
        "nothing written"
    );
    status.ok();
    assert!(
        status
            .stdout
            .starts_with("NOT SUSPENDED: automated updates on"),
        "{status:?}"
    );
    let report: Value = serde_json::from_str(&json_status.stdout).unwrap();
    assert_eq!(report["kubevirt"]["found"], true);
    assert!(
        report["managedChart"]["problems"][0]
            .as_str()
            .unwrap()
            .contains("MANAGEDCHART_NAME= (empty)"),
        "{report}"
    );
}

/// The reverse order of surprises around a Kubernetes upgrade: `pre` killed right after its first
/// write, the API server upgraded (v1.34 → v1.35, same etcd), `pre` rerun on the new version, the
/// next chart applied by Helm 4, then `post` restores both objects exactly.
#[tokio::test]
async fn a_killed_pre_an_api_server_upgrade_and_a_rerun_restore_exactly() {
    // Its own control plane, but one at a time all the same: the others' timings stay as they are.
    let _serial = SERIAL.lock().await;
    support::upgrade::harvester_upgrade(Some("after-write-managedchart")).await;
}

/// The resident guard (`PHASE=watch`) as a child process, its log in a file; `extra` settings
/// (`FAILPOINTS`, `DEADLINE_SECONDS`) set.
fn resident(ns: &str, extra: &[(&str, &str)]) -> (Resident, std::path::PathBuf) {
    let dir = tempfile_dir();
    let log = dir.join("guard.log");
    let mut env = env_with(ns, "watch", extra);
    env.insert("WATCH_STATE_DIR".into(), dir.display().to_string());
    env.entry("WATCH_RESYNC_SECONDS".into())
        .or_insert_with(|| "30".into());
    // No metrics: these tests may run several guards at once.
    env.entry("METRICS_PORT".into())
        .or_insert_with(|| "0".into());
    let child = Command::new(BIN)
        .env_clear()
        .env("KUBECONFIG", control_plane().kubeconfig())
        .env("TERMINATION_MESSAGE_PATH", "")
        .envs(&env)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    (Resident(child), log)
}

/// The Upgrade through `UpgradingNodes` to `Succeeded`: the resident guard restores `methods`
/// within `within`, then says so.
async fn ends_and_is_restored(
    (client, ns): (&kube::Client, &str),
    up: &support::harvester::Upgrade,
    log: &std::path::Path,
    methods: &Value,
    within: Duration,
) {
    up.set_state(client, "UpgradingNodes").await;
    up.finish(client, true).await;
    methods_become(client, ns, methods, within).await;
    said_within(log, "post done", Duration::from_secs(10)).await;
}

/// Waits until the log says `words`.
async fn said_within(log: &std::path::Path, words: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let said = std::fs::read_to_string(log).unwrap_or_default();
        if said.contains(words) {
            return;
        }
        assert!(
            start.elapsed() < within,
            "{words:?} not said within {within:?}: {said}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A resident guard's process, stopped (SIGTERM, by PID) when dropped, so that a failing test
/// leaves no process behind; not signalled once it has exited (its PID may be another's then).
struct Resident(std::process::Child);

impl Drop for Resident {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            // SAFETY: kill(2) of our own child, by its PID, while it runs.
            unsafe {
                libc::kill(self.0.id() as i32, libc::SIGTERM);
            }
        }
        let _ = self.0.wait();
    }
}

/// The resident guard killed between its two writes of `pre` (the ManagedChart written, the CR
/// not yet): a new process (a new pod) goes on where it stopped, from what the objects say, and
/// restores the exact original at the upgrade's end.
#[tokio::test]
async fn a_resident_guard_killed_between_its_writes_goes_on_where_it_stopped() {
    let _serial = SERIAL.lock().await;
    let client = admin().await;
    let ns = namespace(&client, "resident-kill").await;
    let both = json!(["LiveMigrate", "Evict"]);
    harvester(&client, &ns, Some(both.clone())).await;
    let (mut killed, log) = resident(&ns, &[("FAILPOINTS", "after-write-managedchart=return")]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let up = support::harvester::Upgrade::start(&client, &ns, "hvst-upgrade-k", "v1.7.1").await;
    let out = loop {
        if let Some(status) = killed.0.try_wait().unwrap() {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        !out.success(),
        "killed by its failpoint: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        both,
        "the CR not yet written"
    );
    let (guard, log) = resident(&ns, &[]);
    methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    ends_and_is_restored((&client, &ns), &up, &log, &both, Duration::from_secs(10)).await;
    drop(guard);
}

/// A resident guard (with `extra` settings) suspended for an Upgrade to v1.7.1 named `upgrade`;
/// then the API server stopped.
async fn suspended_then_the_server_stopped(
    label: &str,
    upgrade: &str,
    extra: &[(&str, &str)],
) -> (
    String,
    (Resident, std::path::PathBuf),
    support::harvester::Upgrade,
) {
    let (client, ns) = new_harvester(label, json!(["LiveMigrate"])).await;
    let guard = resident(&ns, extra);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let up = support::harvester::Upgrade::start(&client, &ns, upgrade, "v1.7.1").await;
    methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    stop_apiserver();
    (ns, guard, up)
}

/// The API server started again; the Upgrade's end: `[LiveMigrate]` restored within 40 s.
async fn the_server_back_then_restored(
    ns: &str,
    up: &support::harvester::Upgrade,
    log: &std::path::Path,
) {
    start_apiserver();
    let client = admin().await;
    let within = Duration::from_secs(40);
    ends_and_is_restored((&client, ns), up, log, &live_migrate(), within).await;
}

/// The API server restarted while the resident guard waits for the upgrade's end: its watch
/// resumes (kube's watcher backs off and watches again) and it restores at the end.
#[tokio::test]
async fn a_resident_guard_waits_through_an_api_server_restart() {
    let _serial = SERIAL.lock().await;
    let (ns, (guard, log), up) =
        suspended_then_the_server_stopped("resident-restart", "hvst-upgrade-rs", &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The watch is back within its backoff, or the 30 s read finds the end.
    the_server_back_then_restored(&ns, &up, &log).await;
    drop(guard);
}

/// An outage longer than `DEADLINE_SECONDS` while the resident guard waits for the upgrade's
/// end: the read that runs into it fails at its deadline, is logged, and is tried again; the
/// process stays (a Job's run ends at its deadline; the resident guard must outlive an API
/// server's outage), and it restores at the end.
#[tokio::test]
async fn a_resident_guard_outlives_an_outage_longer_than_its_deadline() {
    let _serial = SERIAL.lock().await;
    let deadline = [("DEADLINE_SECONDS", "3")];
    let (ns, (mut guard, log), up) =
        suspended_then_the_server_stopped("resident-outage", "hvst-upgrade-out", &deadline).await;
    // The next read (30 s at the most) fails after its 3 s.
    said_within(&log, "read failed", Duration::from_secs(45)).await;
    assert!(
        guard.0.try_wait().unwrap().is_none(),
        "still running: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    the_server_back_then_restored(&ns, &up, &log).await;
    drop(guard);
}

/// Every Harvester upgrade restarts the API server on each server node. After a 20 s outage,
/// with the resync at its default 300 s, the upgrade's end is restored within 5 s: only a watch
/// can wake the guard that soon (src/cluster/watches.rs). The end is written once the guard's
/// passes rest: while a watch fails, the loop reads every second (`WATCH_FAILING_PAUSE`), and an
/// end written right after the server's return was restored by such a read, even by a guard
/// whose watches woke nothing after the outage (6 runs of 12).
#[tokio::test]
async fn after_a_20_s_outage_the_end_is_restored_within_5_s() {
    let _serial = SERIAL.lock().await;
    let resync = [("WATCH_RESYNC_SECONDS", "300")];
    let (ns, (guard, log), up) =
        suspended_then_the_server_stopped("resident-outage-20s", "hvst-upgrade-20s", &resync).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let back = std::time::SystemTime::now();
    start_apiserver();
    let client = admin().await;
    let state_dir = log.parent().unwrap();
    // Five times the pause while a watch fails: the watches are back.
    let rested = passes_rest(state_dir, back, Duration::from_secs(5), &log).await;
    up.set_state(&client, "UpgradingNodes").await;
    up.finish(&client, true).await;
    let ended = Instant::now();
    methods_become(&client, &ns, &live_migrate(), Duration::from_secs(5)).await;
    eprintln!(
        "reliability: after a 20 s outage, the guard at rest {:.1} s after the server's start; \
         restored {:.1} s after the end",
        rested.as_secs_f64(),
        ended.elapsed().as_secs_f64()
    );
    // The guard's own restore (its post), not another writer's.
    said_within(&log, "post done", Duration::from_secs(5)).await;
    drop(guard);
}

/// Waits until the resident guard's loop rests: a pass since `since` (each pass that read
/// everything touches the `ready` probe file in `state_dir`), then none for `quiet`. From then
/// on, nothing but a watch wakes it before the resync. How long the wait took.
async fn passes_rest(
    state_dir: &std::path::Path,
    since: std::time::SystemTime,
    quiet: Duration,
    log: &std::path::Path,
) -> Duration {
    let start = Instant::now();
    let within = Duration::from_secs(60);
    let ready = state_dir.join("ready");
    loop {
        let last_pass = std::fs::metadata(&ready).and_then(|m| m.modified()).ok();
        if let Some(last) = last_pass.filter(|t| *t > since)
            && last.elapsed().unwrap_or_default() >= quiet
        {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "the guard's passes did not rest for {quiet:?} within {within:?} of the server's \
             start (last pass {last_pass:?}): {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
