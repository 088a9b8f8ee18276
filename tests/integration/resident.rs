//! The resident guard (`PHASE=watch`) on the real API server, with the models of
//! Harvester's upgrade (`support::harvester`) moving through their states in order, release by
//! release: when it writes and when it does not, the restore within 2 s of the end, a failed
//! upgrade and its retry, two guards at once, and the add-on's UpgradePlan.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workload_update_guard::model::{KUBEVIRT_COPY, KUBEVIRT_RECORD};
use workload_update_guard::plan::harvester_upgrade::ALLOW_UNPROTECTED;
use workload_update_guard::plan::harvester_upgrade::{
    CLEANUP_DONE, CLEANUP_LABEL, LATEST_LABEL, STATE_LABEL,
};
use workload_update_guard::plan::upgrade_progress::{ENDED, UPGRADE_STATES};
use workload_update_guard::warnings::{
    HELD_AFTER_FAILURE, NO_LONGER_NEEDED, RESIDENT, SUSPENDED, TURNED_ON_DURING_UPGRADE,
};

use crate::support::harvester::*;
use crate::support::*;

/// One resident guard process, stopped (SIGTERM, by PID) when dropped.
pub struct Guard {
    child: Child,
    dir: PathBuf,
}

impl Guard {
    /// Started, with nothing to do: its first decision is to watch for the next upgrade.
    pub fn start(kubeconfig: &std::path::Path, ns: &str, n: usize) -> Guard {
        let guard = Guard::spawn(kubeconfig, ns, n);
        guard.wait_for("watching for the next one", Duration::from_secs(20));
        guard
    }

    /// Started; its first decision may be an act. No metrics: several guards run at once.
    pub fn spawn(kubeconfig: &std::path::Path, ns: &str, n: usize) -> Guard {
        Guard::spawn_with(kubeconfig, ns, n, &[])
    }

    /// [`Guard::spawn`] with more variables (`METRICS_PORT`, `ADMISSION_HOLD`).
    pub fn spawn_with(
        kubeconfig: &std::path::Path,
        ns: &str,
        n: usize,
        extra: &[(&str, &str)],
    ) -> Guard {
        // As the chart installs it.
        create_records_configmap(kubeconfig, ns);
        let dir = tempfile_dir();
        let log = std::fs::File::create(dir.join(format!("guard-{n}.log"))).unwrap();
        let mut env = env_for(ns, "watch");
        env.insert("WATCH_STATE_DIR".into(), dir.display().to_string());
        env.insert("WATCH_RESYNC_SECONDS".into(), "30".into());
        env.insert("TERMINATION_MESSAGE_PATH".into(), String::new());
        env.insert("METRICS_PORT".into(), "0".into());
        for (k, v) in extra {
            env.insert((*k).into(), (*v).into());
        }
        let child = Command::new(BIN)
            .env_clear()
            .env("KUBECONFIG", kubeconfig)
            .envs(&env)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the resident guard");
        Guard { child, dir }
    }

    pub fn log(&self) -> String {
        let mut all = String::new();
        for e in std::fs::read_dir(&self.dir).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".log") {
                all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        all
    }

    /// Waits until the log says `words`.
    pub fn wait_for(&self, words: &str, within: Duration) {
        let start = Instant::now();
        while !self.log().contains(words) {
            assert!(
                start.elapsed() < within,
                "{words:?} not said within {within:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the CR's methods are `methods` (for at most `within`), then until this guard
    /// says its restore is done.
    pub async fn restored(
        &self,
        client: &kube::Client,
        ns: &str,
        methods: &Value,
        within: Duration,
    ) {
        methods_become(client, ns, methods, within).await;
        self.wait_for("post done", Duration::from_secs(5));
    }

    pub fn probe(&self, which: &str) -> bool {
        Command::new(BIN)
            .args(["--probe", which])
            .env_clear()
            .env("WATCH_STATE_DIR", &self.dir)
            .env("WATCH_RESYNC_SECONDS", "30")
            .output()
            .unwrap()
            .status
            .success()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: kill(2) of our own child, by its PID.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// The Events on the KubeVirt CR with `reason`.
async fn events(ns: &str, reason: &str) -> usize {
    events_in(ns)
        .iter()
        .filter(|e| e["reason"] == reason)
        .count()
}

/// (release, the administrator's methods, whether the guard suspends). v1.6.x to v1.7.1 do
/// nothing themselves; v1.8.0 patches the CR itself, a claim its chart's deploy stops on, and
/// writes a hard-coded `[LiveMigrate]` at its cleanup (the guard suspends whatever the methods);
/// v1.7.3 and v1.8.1 restore whatever was there.
const RELEASES: &[(&str, &[&str], bool)] = &[
    ("v1.6.1", &["LiveMigrate"], true),
    ("v1.7.1", &["LiveMigrate"], true),
    ("v1.7.3", &["LiveMigrate", "Evict"], false),
    ("v1.8.0", &["LiveMigrate"], true),
    ("v1.8.0", &["LiveMigrate", "Evict"], true),
    ("v1.8.1", &["LiveMigrate", "Evict"], false),
];

/// Installed once, a guard per namespace sees a modelled upgrade through its states: it
/// suspends within 10 s of the Upgrade's creation where the release needs it, writes nothing
/// where it does not (and says so), and restores at the end (cleanup included) when the watch
/// wakes it; `status` names it and what it last decided.
#[tokio::test]
async fn the_resident_guard_suspends_at_creation_and_restores_at_the_end_for_each_release() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    let one = async |(i, (release, methods, suspends)): (usize, &(&str, &[&str], bool))| {
        let methods = json!(methods);
        let ns = harvester_ns(&client, &format!("resident-{i}"), methods.clone()).await;
        let guard = Guard::start(&kubeconfig, &ns, 0);
        assert!(
            guard.probe("live") && guard.probe("ready"),
            "{}",
            guard.log()
        );
        let created = Instant::now();
        let up = Upgrade::start(&client, &ns, "hvst-upgrade-r", release).await;
        if *suspends {
            methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
            assert!(created.elapsed() < Duration::from_secs(10));
        } else {
            guard.wait_for("not needed", Duration::from_secs(10));
            assert_eq!(
                kubevirt_methods(&client, &ns).await,
                methods,
                "{release}: nothing written"
            );
        }
        for state in UPGRADE_STATES.iter().filter(|s| !ENDED.contains(s)) {
            up.set_state(&client, state).await;
            if *state == "UpgradingSystemServices" && *release == "v1.8.0" {
                up.v180_suspend(&client).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if *suspends {
                assert_eq!(
                    kubevirt_methods(&client, &ns).await,
                    json!([]),
                    "{release} {state}"
                );
            }
        }
        up.finish(&client, true).await;
        let ended = Instant::now();
        match *release {
            "v1.8.0" => up.v180_cleanup(&client).await,
            "v1.7.3" | "v1.8.1" => up.cleanup_values(&client).await,
            _ => {}
        }
        // Woken by the watch, not by the 30 s read: within 5 s here, on a loaded test machine
        // (hack/bench.sh measures the reaction against its 2 s goal).
        methods_become(&client, &ns, &methods, Duration::from_secs(5)).await;
        if *suspends {
            guard.wait_for("post done", Duration::from_secs(5));
        }
        assert!(
            events(&ns, RESIDENT).await >= 1,
            "the guard says what it decided"
        );
        // The upgrade's record: who suspended (nobody where the release needs no guard and
        // handles nothing here), and its end.
        let key = format!("Upgrade {ns}/hvst-upgrade-r");
        let record = complete_record(&client, &ns, &key, Duration::from_secs(40)).await;
        let by = if *suspends { "the guard" } else { "nobody" };
        assert_eq!(record["suspendedBy"], by, "{release}: {record:#}");
        assert_eq!(record["outcome"], "Succeeded", "{release}: {record:#}");
        assert_eq!(record["to"], *release, "{record:#}");
        let status = run_bin(&kubeconfig, env_for(&ns, "status")).await;
        assert!(
            status.stdout.contains("resident guard  "),
            "{}",
            status.stdout
        );
        (release.to_string(), ended.elapsed())
    };
    let results = futures::future::join_all(RELEASES.iter().enumerate().map(one)).await;
    eprintln!("resident: restored after the end: {results:?}");
}

/// The guard's pod is replaced while the upgrade runs (a drain, a reboot, an exit) and the new
/// one starts only once the upgrade has ended: it remembers nothing, the Upgrade was created
/// before the suspension was recorded and is no longer under way, and it restores all the same
/// (the Upgrade's end, after the record, says it was the one awaited). Its first read after the
/// end is also the last: no later upgrade is needed to wake it.
#[tokio::test]
async fn a_new_guard_after_the_end_restores_what_the_last_one_suspended() {
    let methods = json!(["LiveMigrate"]);
    let (client, ns) = new_harvester("resident-restart", methods.clone()).await;
    let kubeconfig = control_plane().kubeconfig();
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-restart", "v1.7.1").await;
    // The record a second or more after the Upgrade's creation (times are whole seconds), as
    // when the guard suspends seconds after it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let first = Guard::spawn(&kubeconfig, &ns, 0);
    methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    up.set_state(&client, "UpgradingSystemServices").await;
    drop(first);
    // The end a second or more after the record, as an upgrade's minutes make it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    up.finish(&client, true).await;
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!([]),
        "no guard ran"
    );
    let second = Guard::spawn(&kubeconfig, &ns, 1);
    second
        .restored(&client, &ns, &methods, Duration::from_secs(10))
        .await;
}

/// A `post` that succeeds but leaves something of ours (here: both records of the original lost,
/// no `FALLBACK_METHODS`, so it keeps its `[]` and its claim, and warns) runs once: the same
/// restore right after it, and at the watch events of its own writes, is not run again until
/// what it read changes or the resync (30 s here) is due (`plan::acting`).
#[tokio::test]
async fn a_restore_that_leaves_ours_is_not_run_again_at_once() {
    let (client, ns) = new_harvester("resident-again", json!(["LiveMigrate"])).await;
    let kubeconfig = control_plane().kubeconfig();
    let pre = run_bin(&kubeconfig, env_for(&ns, "pre")).await;
    assert_eq!(pre.code, 0, "{}", pre.stderr);
    let lose = |kind: &str, name: &str, keys: &[&str]| {
        let mut args = vec!["-n".to_string(), ns.clone(), "annotate".into()];
        args.push(format!("{kind}/{name}"));
        args.extend(keys.iter().map(|k| format!("{k}-")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl_ok(&args);
    };
    lose("kubevirt", "kubevirt", &[KUBEVIRT_RECORD]);
    lose("managedchart", "harvester", &[KUBEVIRT_COPY]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-again", "v1.7.1").await;
    up.finish(&client, true).await;
    let guard = Guard::spawn(&kubeconfig, &ns, 0);
    guard.wait_for("again, right after it ran", Duration::from_secs(15));
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The watches listed before the first read (their first lists wake nothing), and the events
    // of the post's own writes leave the read as the post left it: one post.
    let runs = guard.log().matches("running post").count();
    assert_eq!(runs, 1, "{runs} posts: {}", guard.log());
}

/// A path-A upgrade fails, is deleted, and is retried: the guard holds through the failure and
/// the deletion, and restores once the retry has succeeded. Two guards at once make one
/// suspension and one restore, without a conflict.
#[tokio::test]
async fn two_resident_guards_hold_after_a_failure_and_restore_once_after_the_retry() {
    let (client, ns) = new_harvester("resident-failed", json!(["LiveMigrate"])).await;
    let kubeconfig = control_plane().kubeconfig();
    let guards = [
        Guard::start(&kubeconfig, &ns, 0),
        Guard::start(&kubeconfig, &ns, 1),
    ];
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-try1", "v1.7.1").await;
    methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    up.set_state(&client, "UpgradingNodes").await;
    up.finish(&client, false).await;
    for g in &guards {
        g.wait_for("held after the failed", Duration::from_secs(5));
    }
    // Deleted as Harvester's does it: wrangler's finalizer removed by its OnRemove.
    up.controller(&client).delete().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!([]),
        "held after the deletion"
    );
    let retry = Upgrade::start(&client, &ns, "hvst-upgrade-try2", "v1.7.1").await;
    retry.set_state(&client, "UpgradingNodes").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    retry.finish(&client, true).await;
    methods_become(&client, &ns, &live_migrate(), Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(events(&ns, SUSPENDED).await, 1, "one suspension");
    assert_eq!(
        events(&ns, "WorkloadUpdatesRestored").await,
        1,
        "one restore"
    );
    assert!(events(&ns, HELD_AFTER_FAILURE).await >= 1);
    for g in &guards {
        let log = g.log();
        assert!(!log.contains("failed ("), "no act failed: {log}");
    }
}

/// The add-on's UpgradePlan, installed after the guard started (its CRD is there; the plan
/// appears later): suspended at the plan's creation (methods other than `[LiveMigrate]`), and
/// restored after its Finalize's hard-coded `[LiveMigrate]`. On a control plane of its own:
/// UpgradePlans are cluster-scoped.
#[tokio::test]
async fn the_resident_guard_follows_the_addons_upgrade_plan() {
    let (cp, client) = ControlPlane::own().await;
    let kubeconfig = cp.kubeconfig();
    let both = json!(["LiveMigrate", "Evict"]);
    let ns = harvester_ns(&client, "resident-addon", both.clone()).await;
    let guard = Guard::start(&kubeconfig, &ns, 0);
    let plan = UpgradePlan::create(&client, "hvst-upgrade-resident", "v1.8.0").await;
    methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    for phase in ["Initialized", "ImagePreloaded", "ClusterUpgrading"] {
        plan.set_phase(&client, phase).await;
    }
    addon_prerun(&client, &ns).await;
    plan.set_phase(&client, "NodeUpgrading").await;
    addon_finalize(&client, &ns).await;
    let ended = Instant::now();
    plan.set_phase(&client, "Succeeded").await;
    methods_become(&client, &ns, &both, Duration::from_secs(5)).await;
    assert!(
        ended.elapsed() < Duration::from_secs(3),
        "{:?}",
        ended.elapsed()
    );
    guard.wait_for("post done", Duration::from_secs(5));
    let key = "UpgradePlan hvst-upgrade-resident";
    let record = complete_record(&client, &ns, key, Duration::from_secs(40)).await;
    assert_eq!(record["suspendedBy"], "the guard", "{record:#}");
    assert_eq!(record["outcome"], "Succeeded", "{record:#}");
    plan.delete(&client).await;
}

/// v1.7.3 suspends and restores itself (the values `[]`, its backup on the Upgrade, Fleet's
/// deploy by the real Helm 4): the guard stands aside and records who suspended, Harvester,
/// and when the updates came back.
#[tokio::test]
async fn where_harvester_suspends_itself_the_record_names_it() {
    let client = admin().await;
    let kubeconfig = control_plane().kubeconfig();
    let (ns, chart) = helm_installed(&client, "record-v173").await;
    let guard = Guard::start(&kubeconfig, &ns, 0);
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-rec", "v1.7.3").await;
    guard.wait_for("not needed", Duration::from_secs(10));
    up.set_state(&client, "UpgradingSystemServices").await;
    up.backup_and_suspend(&client, &chart).await;
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    up.finish(&client, true).await;
    up.cleanup_values(&client).await;
    up.upgrade_chart(&client, &chart).await.unwrap();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    let key = format!("Upgrade {ns}/hvst-upgrade-rec");
    let record = complete_record(&client, &ns, &key, Duration::from_secs(40)).await;
    assert_eq!(record["suspendedBy"], "Harvester", "{record:#}");
    assert!(record["restoredAt"].is_string(), "{record:#}");
    assert_eq!(record["outcome"], "Succeeded", "{record:#}");
    let status = run_bin(&kubeconfig, env_for(&ns, "status")).await;
    // "(FROM to v1.7.3, …)": FROM is the server-version Setting, cluster-wide, which other
    // tests on this control plane set.
    let said = format!("last upgrade  {key} (");
    let line = status.stdout.lines().find(|l| l.starts_with(&said));
    assert!(
        line.is_some_and(|l| l.contains("v1.7.3, Succeeded): ")),
        "{}",
        status.stdout
    );
    // Every record kept, in the JSON report.
    let mut json_env = env_for(&ns, "status");
    json_env.insert("LOG_FORMAT".into(), "json".into());
    let report = run_bin(&kubeconfig, json_env).await.stdout;
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        report["upgrades"][0]["suspendedBy"], "Harvester",
        "{report:#}"
    );
}

/// harvester/harvester#10899: the add-on's PreRun merge-patches the CR's methods to `[]` as
/// `upgrade-toolkit`, and Fleet's deploy of the new harvester chart (real Helm 4, server-side,
/// no force, the chart's default `[LiveMigrate]`) then meets that claim: the upgrade stops.
/// Three clusters' worth, the chart installed by Helm in each, the default methods:
/// - without the guard (the control): the deploy fails on `upgrade-toolkit`'s claim, and the
///   claim is still there after the plan, so a later chart with another default fails too;
/// - the resident guard, there before the plan: it suspends through the values at the plan's
///   creation, the deploy during `ClusterUpgrading` goes through (the chart renders the same
///   `[]`), the methods are `[LiveMigrate]` after the plan, owned by the chart's Apply alone, and
///   the later chart deploys cleanly;
/// - a guard that comes after the PreRun (`pre` by hand once the deploy has failed): the
///   retried deploy goes through.
///
/// On a control plane of its own: UpgradePlans are cluster-scoped.
#[tokio::test]
async fn the_addons_claim_does_not_stop_fleets_deploy_where_the_guard_runs() {
    let (cp, client) = ControlPlane::own().await;
    let kubeconfig = cp.kubeconfig();
    let (control, _) = helm_installed_to(&kubeconfig, &client, "addon-control").await;
    let (guarded, _) = helm_installed_to(&kubeconfig, &client, "addon-guarded").await;
    let (late, _) = helm_installed_to(&kubeconfig, &client, "addon-late").await;
    let guard = Guard::start(&kubeconfig, &guarded, 0);
    let plan = UpgradePlan::create(&client, "hvst-upgrade-10899", "v1.9.0").await;
    methods_become(&client, &guarded, &json!([]), Duration::from_secs(10)).await;
    for phase in ["Initialized", "ImagePreloaded", "ClusterUpgrading"] {
        plan.set_phase(&client, phase).await;
    }
    for ns in [&control, &guarded, &late] {
        addon_prerun(&client, ns).await;
    }
    // The new release's chart, rendered from each ManagedChart's values as Fleet's agent does.
    let next = chart_version(&live_migrate());
    let deploy = |ns: String| {
        let (kubeconfig, client, next) = (kubeconfig.clone(), client.clone(), next.clone());
        async move { fleet_deploy_to(&kubeconfig, &client, &ns, &next).await }
    };
    let conflict = |e: &str| e.contains("conflict") && e.contains("upgrade-toolkit");
    let e = deploy(control.clone()).await.unwrap_err();
    assert!(conflict(&e), "the control meets #10899: {e}");
    deploy(guarded.clone())
        .await
        .expect("the chart renders the guard's []: nothing to conflict on");
    assert_eq!(kubevirt_methods(&client, &guarded).await, json!([]));
    let e = deploy(late.clone()).await.unwrap_err();
    assert!(conflict(&e), "before the guard: {e}");
    let pre = run_bin(&kubeconfig, env_for(&late, "pre")).await;
    pre.ok().says(&["pre is needed", "harvester#10899"]);
    deploy(late.clone())
        .await
        .expect("the retried deploy goes through once pre has run");

    plan.set_phase(&client, "NodeUpgrading").await;
    for ns in [&control, &guarded, &late] {
        addon_finalize(&client, ns).await;
    }
    plan.set_phase(&client, "Succeeded").await;
    methods_become(&client, &guarded, &live_migrate(), Duration::from_secs(5)).await;
    guard.wait_for("post done", Duration::from_secs(5));
    run_bin(&kubeconfig, env_for(&late, "post")).await.ok();
    let later = chart_version(&json!(["LiveMigrate", "Evict"]));
    for ns in [&guarded, &late] {
        // The chart's next deploy (Fleet's after the values override went) keeps the field the
        // chart's alone.
        deploy(ns.clone()).await.expect("the same chart again");
        assert_eq!(methods_owners(&client, ns).await, ["helm/Apply"], "{ns}");
        fleet_deploy_to(&kubeconfig, &client, ns, &later)
            .await
            .expect("a chart with another default deploys cleanly");
        assert_eq!(
            kubevirt_methods(&client, ns).await,
            json!(["LiveMigrate", "Evict"])
        );
    }
    let e = fleet_deploy_to(&kubeconfig, &client, &control, &later)
        .await
        .unwrap_err();
    assert!(conflict(&e), "without the guard the claim stays: {e}");
    plan.delete(&client).await;
}

/// Waits until the Events with `reason` in `ns` are `n`; their notes.
async fn notes_become(ns: &str, reason: &str, n: usize, within: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let notes: Vec<String> = events_in(ns)
            .iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| e["note"].as_str().unwrap_or_default().to_string())
            .collect();
        if notes.len() == n {
            return notes;
        }
        assert!(start.elapsed() < within, "{reason}: {notes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A path-A upgrade at `PreparingNodes`, suspended by the resident guard: an operator's `kubectl
/// patch` of the CR to `[LiveMigrate]` (a runbook from before the guard) is answered through the
/// CR's watch, not at the resync (30 s here): the methods are `[]` again within 10 s, a Warning
/// names the field manager that wrote them, and the original recorded before the upgrade is what
/// the restore puts back. With the accept annotation on the Upgrade, the operator's write stands.
#[tokio::test]
async fn an_operators_patch_mid_upgrade_is_suspended_again_within_seconds() {
    let original = json!(["LiveMigrate", "Evict"]);
    let (client, ns) = new_harvester("resident-turned-on", original.clone()).await;
    let kubeconfig = control_plane().kubeconfig();
    let guard = Guard::start(&kubeconfig, &ns, 0);
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-on", "v1.7.1").await;
    methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    up.set_state(&client, "PreparingNodes").await;
    guard.wait_for("post does not turn updates on", Duration::from_secs(10));

    let patched = Instant::now();
    set_methods(&client, &ns, "kubectl-patch", live_migrate()).await;
    let took = methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    assert!(patched.elapsed() < Duration::from_secs(10), "{took:?}");
    eprintln!("resident: the operator's patch answered in {took:?}");
    let notes = notes_become(&ns, TURNED_ON_DURING_UPGRADE, 1, Duration::from_secs(5)).await;
    assert_contains_all(
        &notes[0],
        &[
            "workloadUpdateMethods set to [\"LiveMigrate\"] by kubectl-patch (Update)",
            "Upgrade",
            "hvst-upgrade-on",
            "suspending again",
            ALLOW_UNPROTECTED,
        ],
    );

    // Accepted: the operator's next write is theirs to make.
    let annotation = format!("{ALLOW_UNPROTECTED}=true");
    kubectl_ok(&[
        "-n",
        &ns,
        "annotate",
        "upgrade/hvst-upgrade-on",
        &annotation,
    ]);
    set_methods(&client, &ns, "kubectl-patch", live_migrate()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(kubevirt_methods(&client, &ns).await, live_migrate());
    assert_eq!(events(&ns, TURNED_ON_DURING_UPGRADE).await, 1);
    set_methods(&client, &ns, "kubectl-patch", json!([])).await;
    let removed = format!("{ALLOW_UNPROTECTED}-");
    kubectl_ok(&["-n", &ns, "annotate", "upgrade/hvst-upgrade-on", &removed]);

    // The record of the original is the first one: the restore puts it back.
    up.finish(&client, true).await;
    guard
        .restored(&client, &ns, &original, Duration::from_secs(10))
        .await;
    assert!(!guard.log().contains("failed ("), "{}", guard.log());
}

/// Harvester v1.8.1, without the add-on: every release it can upgrade to next (later v1.8.x,
/// v1.9.x) suspends and restores the methods itself, so the guard is no longer needed: the
/// resident guard says so once (its log, one Normal Event on the KubeVirt CR, not again at its
/// next pass), and `status` says it. Once the add-on is installed (its UpgradePlans served) it is
/// needed again, and `status` names why. On a control plane of its own: the `server-version`
/// Setting and the UpgradePlan CRD are cluster-wide.
#[tokio::test]
async fn the_resident_guard_says_once_when_it_is_no_longer_needed() {
    let (cp, client) = ControlPlane::own().await;
    let kubeconfig = cp.kubeconfig();
    let upgrade_plans = repo_root().join("tests/fixtures/crds/upgradeplan.yaml");
    let kubectl = |args: &[&str]| {
        let out = cp.kubectl().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kubectl(&["delete", "-f", upgrade_plans.to_str().unwrap(), "--wait"]);
    server_version(&client, "v1.8.1").await;
    let ns = harvester_ns(&client, "retire", json!(["LiveMigrate", "Evict"])).await;
    offer_version(&client, &ns, "v1.9.0").await;
    let guard = Guard::start(&kubeconfig, &ns, 0);
    let line = "the guard is no longer needed: Harvester v1.8.1: every release it can upgrade to \
                next (v1.8.x and v1.9.x; on offer: v1.9.0) suspends the methods itself and \
                restores them";
    guard.wait_for(line, Duration::from_secs(10));
    let start = Instant::now();
    let events = |ns: String, reason: &'static str| {
        let cp = &cp;
        async move {
            let out = cp
                .kubectl()
                .args(["-n", &ns, "get", "events.events.k8s.io", "-o", "json"])
                .output()
                .unwrap();
            let list: Value = serde_json::from_slice(&out.stdout).unwrap();
            let items = list["items"].as_array().cloned().unwrap_or_default();
            items.iter().filter(|e| e["reason"] == reason).count()
        }
    };
    while events(ns.clone(), NO_LONGER_NEEDED).await != 1 {
        assert!(start.elapsed() < Duration::from_secs(5), "{}", guard.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = run_bin(&kubeconfig, env_for(&ns, "status")).await;
    status.ok();
    assert!(status.stdout.contains(line), "{}", status.stdout);
    // Another pass (woken by an ended Upgrade, which is no upgrade under way): said once only.
    let ready = std::fs::metadata(guard.dir.join("ready"))
        .unwrap()
        .modified()
        .unwrap();
    create(
        &client,
        "Upgrade",
        &ns,
        json!({"apiVersion": "harvesterhci.io/v1beta1", "kind": "Upgrade",
               "metadata": {"name": "hvst-upgrade-old", "namespace": ns,
                            "labels": {LATEST_LABEL: "true", STATE_LABEL: "Succeeded",
                                       CLEANUP_LABEL: CLEANUP_DONE}},
               "spec": {"version": "v1.8.1"}}),
    )
    .await;
    let start = Instant::now();
    while std::fs::metadata(guard.dir.join("ready"))
        .unwrap()
        .modified()
        .unwrap()
        == ready
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no pass: {}",
            guard.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        events(ns.clone(), NO_LONGER_NEEDED).await,
        1,
        "{}",
        guard.log()
    );
    assert_eq!(
        guard.log().matches("the guard is no longer needed").count(),
        1,
        "{}",
        guard.log()
    );
    drop(guard);

    // The add-on installed: it patches the CR itself on any release, a claim that Fleet's deploy
    // stops on (harvester#10899), so the guard is needed again.
    kubectl(&["apply", "-f", upgrade_plans.to_str().unwrap()]);
    kubectl(&[
        "wait",
        "--for",
        "condition=Established",
        "crd/upgradeplans.management.harvesterhci.io",
    ]);
    let status = run_bin(&kubeconfig, env_for(&ns, "status")).await;
    status.ok();
    assert!(
        status.stdout.contains(
            "the guard is still needed: the upgrade add-on is installed (its UpgradePlans are \
             served), which patches the KubeVirt CR to [] itself"
        ),
        "{}",
        status.stdout
    );
}
