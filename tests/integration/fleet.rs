//! `pre` and `post` end only when Fleet has applied their ManagedChart change, and fail with
//! exit 8 and Fleet's (or the guard's own) words when it cannot: against the Fleet model of
//! `support::fleet` (Rancher's copy of the Bundle status, the real Helm 4 as the agent).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workload_update_guard::error::exit;
use workload_update_guard::warnings::{CONFLICT, NOT_APPLIED, PAUSED};

use crate::support::fleet::{FleetModel, Options};
use crate::support::*;

/// A run of `phase` in `ns` with `extra` set; the run and the instant it exited.
async fn phase(ns: &str, phase: &str, extra: &[(&str, &str)]) -> (Run, Instant) {
    let mut env: BTreeMap<String, String> = env_for(ns, phase);
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    let run = run_bin(&control_plane().kubeconfig(), env).await;
    (run, Instant::now())
}

/// The ManagedChart's `Ready` condition, as Harvester's upgrade webhook reads it.
async fn ready(client: &kube::Client, ns: &str) -> (String, Value) {
    let mc = get(client, "ManagedChart", ns, "harvester").await;
    let status = mc["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string();
    (status, mc["status"]["observedGeneration"].clone())
}

/// Where the benchmark wants the figures (`hack/bench.sh` sets it).
fn figure(line: &str) {
    eprintln!("FLEET-WAIT {line}");
    if let Ok(path) = std::env::var("FLEET_FIGURES") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
}

/// With a deploy that takes 5 s, `pre` and `post` exit after the model's `Ready` of the new
/// generation (never before), and soon after it; the change is deployed (the CR as the values
/// render it), and the summary says how long Fleet took.
#[tokio::test]
async fn pre_and_post_end_only_after_fleet_has_deployed() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-wait").await;
    let mut options = Options::helm(chart);
    options.delay = Duration::from_secs(5);
    let fleet = FleetModel::start(&client, &ns, options).await;
    for (name, methods) in [("pre", json!([])), ("post", json!(["LiveMigrate"]))] {
        let before = fleet.generation();
        let start = Instant::now();
        let (run, exited) = phase(&ns, name, &[]).await;
        assert_eq!(run.code, 0, "{name}: {run:?}");
        let generation = before + 1;
        assert_eq!(fleet.generation(), generation, "{name}: one new generation");
        let (shown, deployed) = fleet
            .deployed(generation)
            .unwrap_or_else(|| panic!("{name}: deployed: {:?}", fleet.log()));
        assert!(exited > deployed, "{name}: exited before Fleet's Ready");
        let after = exited - deployed;
        assert!(
            after < Duration::from_secs(1),
            "{name}: {after:?} after Ready"
        );
        assert!(exited - start >= Duration::from_secs(5), "{name}");
        figure(&format!(
            "{name} deploy_ms={} exit_after_ready_ms={} phase_ms={}",
            (deployed - shown).as_millis(),
            after.as_millis(),
            (exited - start).as_millis()
        ));
        assert_eq!(kubevirt_methods(&client, &ns).await, methods, "{name}");
        assert_eq!(
            ready(&client, &ns).await,
            ("True".into(), json!(generation))
        );
        let steps = run.summary.as_ref().unwrap()["steps"].to_string();
        assert!(
            steps.contains("Fleet applied the change (Bundle generation"),
            "{steps}"
        );
        run.says(&["waiting for Fleet"]);
    }
    // A rerun writes nothing and finds the current generation applied: no wait, no warning.
    let (run, _) = phase(&ns, "post", &[]).await;
    run.ok().says(&["nothing for Fleet to apply"]);
    assert!(run.warnings().is_empty(), "{run:?}");
    fleet.stop().await;
}

/// Harvester's upgrade as an orchestrator runs it: `pre` Job Complete (exit 0), then the
/// upgrade webhook's check that every ManagedChart is `Ready`: always `True`, cycle after cycle.
#[tokio::test]
async fn after_pre_exits_0_the_chart_is_always_ready() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-orch").await;
    let mut options = Options::helm(chart);
    options.delay = Duration::from_millis(700);
    let fleet = FleetModel::start(&client, &ns, options).await;
    for cycle in 0..3 {
        for name in ["pre", "post"] {
            let (run, _) = phase(&ns, name, &[]).await;
            assert_eq!(run.code, 0, "{name} #{cycle}: {run:?}");
            let (status, generation) = ready(&client, &ns).await;
            assert_eq!(status, "True", "{name} #{cycle}: {:?}", fleet.log());
            assert_eq!(generation, json!(fleet.generation()), "{name} #{cycle}");
        }
    }
    fleet.stop().await;
}

/// rancher/fleet#5219: a `Ready: True` left from the previous generation (Fleet slow to take the
/// change up) is not taken for the new one.
#[tokio::test]
async fn a_ready_of_the_previous_generation_is_not_taken() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-stale").await;
    let mut options = Options::helm(chart);
    options.take_up = Duration::from_secs(2);
    let fleet = FleetModel::start(&client, &ns, options).await;
    assert_eq!(ready(&client, &ns).await, ("True".into(), json!(1)));
    let (run, exited) = phase(&ns, "pre", &[]).await;
    run.ok();
    let (_, deployed) = fleet.deployed(2).expect("generation 2 deployed");
    assert!(exited > deployed, "{:?}", fleet.log());
    assert!(
        run.stderr.contains("has not taken the change up"),
        "{run:?}"
    );
    fleet.stop().await;
}

/// A rejected apply (the new chart's default is a value the CRD refuses): `post`, whose restore
/// of the values lets the default render, fails with exit 8 and the API server's message;
/// the writes stand; a rerun, which writes nothing, warns (not a clean success).
#[tokio::test]
async fn a_rejected_apply_fails_the_phase_with_the_servers_message() {
    let client = admin().await;
    let (ns, _) = helm_installed(&client, "fleet-reject").await;
    let fleet =
        FleetModel::start(&client, &ns, Options::helm(chart_version(&json!("Bogus")))).await;
    let (run, _) = phase(&ns, "pre", &[]).await;
    assert_eq!(run.code, 0, "the values' [] renders fine: {run:?}");
    let (run, _) = phase(&ns, "post", &[]).await;
    assert_eq!(run.code, i32::from(exit::FLEET_NOT_APPLIED), "{run:?}");
    let error = run.summary.as_ref().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    eprintln!("exit 8 (rejected): {error}");
    for part in ["Fleet reports an error", "ErrApplied", "expected list, got"] {
        assert!(error.contains(part), "{part}: {error}");
    }
    let steps = &run.summary.as_ref().unwrap()["steps"];
    assert!(
        steps
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["outcome"] == "changed"),
        "the writes stand: {steps}"
    );
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    // A rerun of post writes nothing: no wait, but not in silence.
    let (rerun, _) = phase(&ns, "post", &[]).await;
    rerun.ok();
    assert!(
        rerun
            .warnings()
            .iter()
            .any(|w| w.starts_with(NOT_APPLIED) && w.contains("expected list, got")),
        "{rerun:?}"
    );
    // A rerun of pre (our records on the chart again after a new pre) waits, and fails the same
    // way while the deploy fails: here the new pre renders [] again, which Fleet applies.
    let (run, _) = phase(&ns, "pre", &[]).await;
    run.ok();
    let (rerun, _) = phase(&ns, "pre", &[]).await;
    rerun
        .ok()
        .says(&["Fleet has applied the current generation"]);
    fleet.stop().await;
}

/// A real conflict: an administrator's `kubectl edit` (an `Update` claim) of the methods while
/// suspended; `post` keeps that choice and restores the values, whose deploy conflicts. Fleet
/// stays `WaitApplied` for ever; `post` says at once that the deploy will conflict and how to
/// release the claim, and at its bound fails with exit 8, naming `kubectl-edit`. The remedy it
/// names (a `pre`/`post` cycle) then lets Fleet apply.
#[tokio::test]
async fn a_conflict_is_named_at_once_and_the_bound_fails_the_phase() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-conflict").await;
    let fleet = FleetModel::start(&client, &ns, Options::helm(chart)).await;
    let (run, _) = phase(&ns, "pre", &[]).await;
    run.ok();
    kubectl_ok(&[
        "-n",
        &ns,
        "patch",
        "kubevirt",
        "kubevirt",
        "--type",
        "json",
        "--field-manager=kubectl-edit",
        "-p",
        r#"[{"op":"replace","path":"/spec/workloadUpdateStrategy/workloadUpdateMethods","value":["LiveMigrate","Evict"]}]"#,
    ]);
    let start = Instant::now();
    let (run, exited) = phase(&ns, "post", &[("FLEET_WAIT_SECONDS", "5")]).await;
    assert_eq!(run.code, i32::from(exit::FLEET_NOT_APPLIED), "{run:?}");
    assert!(exited - start >= Duration::from_secs(5));
    let error = run.summary.as_ref().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    eprintln!("exit 8 (conflict): {error}\n{}", run.stderr);
    assert_contains_all(
        &error,
        &[
            "not applied within FLEET_WAIT_SECONDS=5",
            "WaitApplied(1) [Cluster fleet-local/local]",
            "kubectl-edit holds an Update claim",
            "run pre and then post once more",
        ],
    );
    assert!(
        run.warnings()
            .iter()
            .any(|w| w.starts_with(CONFLICT) && w.contains("kubectl-edit")),
        "{run:?}"
    );
    // Said at once: the warning comes before the wait begins.
    let warned = run.stderr.find(CONFLICT).expect("the warning is logged");
    let waiting = run
        .stderr
        .find("waiting for Fleet")
        .expect("the wait is logged");
    assert!(warned < waiting, "{}", run.stderr);
    // The model's "agent log" has Helm's conflict; its status never left WaitApplied.
    let log = fleet.log();
    let g = fleet.generation();
    assert!(
        log.iter().any(|s| s.generation == g
            && s.state == "log"
            && s.message.contains("conflict")
            && s.message.contains("kubectl-edit")),
        "{log:?}"
    );
    assert!(!log.iter().any(|s| s.generation == g && s.state == "Ready"));
    // The remedy: one more cycle; both phases end with Fleet Ready.
    for name in ["pre", "post"] {
        let (run, _) = phase(&ns, name, &[("FLEET_WAIT_SECONDS", "60")]).await;
        assert_eq!(run.code, 0, "{name}: {run:?}");
        assert_eq!(ready(&client, &ns).await.0, "True", "{name}");
    }
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    fleet.stop().await;
}

/// A paused chart is not deployed, so not waited for: one warning says when Fleet applies it.
/// A chart no controller ever wrote a status to is not waited for either, and `FLEET_WAIT_SECONDS=0`
/// does not wait.
#[tokio::test]
async fn paused_statusless_and_zero_wait_charts_are_not_waited_for() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-paused").await;
    let fleet = FleetModel::start(&client, &ns, Options::helm(chart)).await;
    json_patch(
        &client,
        "ManagedChart",
        &ns,
        "harvester",
        json!([{"op": "replace", "path": "/spec/paused", "value": true}]),
    )
    .await
    .unwrap();
    let (run, _) = phase(&ns, "pre", &[]).await;
    run.ok();
    assert!(
        run.warnings()
            .iter()
            .any(|w| w.starts_with(PAUSED) && w.contains("unpaused")),
        "{run:?}"
    );
    assert!(!run.stderr.contains("waiting for Fleet"), "{run:?}");
    fleet.stop().await;

    // No status at all.
    let bare = namespace(&client, "fleet-bare").await;
    harvester(&client, &bare, Some(json!(["LiveMigrate"]))).await;
    for name in ["pre", "post"] {
        let (run, _) = phase(&bare, name, &[]).await;
        assert_eq!(run.code, 0, "{name}: {run:?}");
        assert!(run.stderr.contains("no Fleet status"), "{name}: {run:?}");
    }

    // FLEET_WAIT_SECONDS=0: the write, and no wait.
    let (ns, chart) = helm_installed(&client, "fleet-zero").await;
    let mut options = Options::helm(chart);
    options.delay = Duration::from_secs(30);
    let fleet = FleetModel::start(&client, &ns, options).await;
    let start = Instant::now();
    let (run, _) = phase(&ns, "pre", &[("FLEET_WAIT_SECONDS", "0")]).await;
    run.ok();
    assert!(start.elapsed() < Duration::from_secs(10));
    run.says(&["FLEET_WAIT_SECONDS=0"]);
    // DRY_RUN: nothing changed, no wait.
    let (run, _) = phase(&ns, "post", &[("DRY_RUN", "true")]).await;
    run.ok().says(&["dry run: nothing changed"]);
    fleet.stop().await;
}

/// `status` shows Fleet's view: Ready or not, the state and message, whether the last change
/// is applied.
#[tokio::test]
async fn status_shows_fleets_view() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-status").await;
    let mut options = Options::helm(chart);
    options.delay = Duration::from_secs(30);
    let fleet = FleetModel::start(&client, &ns, options).await;
    let (run, _) = phase(&ns, "pre", &[("FLEET_WAIT_SECONDS", "0")]).await;
    run.ok();
    // Wait for the model to show the new generation.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fleet.log().iter().all(|s| s.state != "WaitApplied") {
        assert!(Instant::now() < deadline, "{:?}", fleet.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (run, _) = phase(&ns, "status", &[("LOG_FORMAT", "json")]).await;
    run.ok();
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    let f = &report["managedChart"]["fleet"];
    assert_eq!(f["ready"], "False", "{report}");
    assert_eq!(f["state"], "WaitApplied");
    assert_eq!(f["message"], "WaitApplied(1) [Cluster fleet-local/local]");
    assert_eq!(f["currentSpecApplied"], false);
    assert!(
        report["warnings"].to_string().contains("refuses to start"),
        "{report}"
    );
    let (run, _) = phase(&ns, "status", &[]).await;
    assert!(
        run.stdout.contains("last change applied") && run.stdout.contains("no: not deployed yet"),
        "{run:?}"
    );
    fleet.stop().await;
}

/// SIGTERM stops the wait as it stops the rest of a run: exit 5 at once, the termination
/// message written.
#[tokio::test]
async fn sigterm_stops_the_wait() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-term").await;
    let mut options = Options::helm(chart);
    options.delay = Duration::from_secs(60);
    let fleet = FleetModel::start(&client, &ns, options).await;
    let dir = tempfile_dir();
    let term = dir.join("termination-log");
    let mut child = std::process::Command::new(BIN)
        .env_clear()
        .env("KUBECONFIG", control_plane().kubeconfig())
        .env("TERMINATION_MESSAGE_PATH", &term)
        .envs(env_for(&ns, "pre"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until the phase waits: its change has shown as WaitApplied.
    let deadline = Instant::now() + Duration::from_secs(20);
    while fleet.log().iter().all(|s| s.state != "WaitApplied") {
        assert!(Instant::now() < deadline, "{:?}", fleet.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = Instant::now();
    // SAFETY: kill(2) on the child we started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(i32::from(exit::INTERRUPTED)));
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&term).unwrap()).unwrap();
    assert_eq!(summary["exitCode"], 5, "{summary}");
    assert_eq!(summary["error"], "interrupted by SIGTERM");
    fleet.stop().await;
}

/// `pre`'s own deploy rejected (an operator's values carry a value the CRD refuses, which the
/// next deploy, the one `pre` causes, renders): exit 8 with the server's message; a rerun
/// writes nothing, finds our records on the chart and Fleet failing: exit 8 again, not 0.
#[tokio::test]
async fn a_rejected_pre_fails_and_so_does_its_rerun() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-reject-pre").await;
    json_patch(
        &client,
        "ManagedChart",
        &ns,
        "harvester",
        json!([{"op": "add", "path": "/spec/values/kubevirt/spec/workloadUpdateStrategy",
                "value": {"batchEvictionSize": "ten"}}]),
    )
    .await
    .unwrap();
    let fleet = FleetModel::start(&client, &ns, Options::helm(chart)).await;
    for run_no in 0..2 {
        let (run, _) = phase(&ns, "pre", &[]).await;
        assert_eq!(
            run.code,
            i32::from(exit::FLEET_NOT_APPLIED),
            "#{run_no}: {run:?}"
        );
        let error = run.summary.as_ref().unwrap()["error"].to_string();
        assert!(
            error.contains("ErrApplied") && error.contains("batchEvictionSize"),
            "#{run_no}: {error}"
        );
    }
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!([]),
        "the writes stand"
    );
    fleet.stop().await;
}
