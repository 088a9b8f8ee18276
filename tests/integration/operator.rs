//! Operator safety: a wrong name fails loudly and writes nothing, every "nothing done" that
//! leaves updates off is loud, a later explicit choice wins, `post` says what KubeVirt will do
//! next, and connection errors say where and why.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use serde_json::{Value, json};
use workload_update_guard::error::exit;
use workload_update_guard::warnings::{
    CHANGED_WHILE_SUSPENDED, COMPARE_PATCH_GONE, STILL_SUSPENDED,
};

use crate::support::*;

async fn both_rvs(client: &kube::Client, ns: &str) -> (String, String) {
    (
        rv(&get(client, "KubeVirt", ns, "kubevirt").await),
        rv(&get(client, "ManagedChart", ns, "harvester").await),
    )
}

async fn run(env: BTreeMap<String, String>) -> Run {
    run_bin(&control_plane().kubeconfig(), env).await
}

/// Reasons and notes of the Events on the KubeVirt CR in `ns`, with their types.
async fn events(client: &kube::Client, ns: &str) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// A typo in a name fails with exit 6, names the object and what to check, and writes nothing,
/// the other object included. ALLOW_MISSING keeps the skip; a `pre` without the KubeVirt CR
/// then still writes nothing, as there is nothing to guard.
#[tokio::test]
async fn a_wrong_name_fails_loudly_and_writes_nothing() {
    let (client, ns) = new_harvester("wrong-name", json!(["LiveMigrate"])).await;
    let before = both_rvs(&client, &ns).await;
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            "pre",
            &[("KUBEVIRT_NAMESPACE", "kubevirt")],
            "KUBEVIRT_NAMESPACE",
        ),
        ("pre", &[("KUBEVIRT_NAME", "kubvirt")], "KUBEVIRT_NAME"),
        (
            "pre",
            &[("MANAGEDCHART_NAME", "harvestr")],
            "MANAGEDCHART_NAME",
        ),
        (
            "pre",
            &[
                ("MANAGEDCHART_NAME", ""),
                ("KUBEVIRT_NAMESPACE", "kubevirt"),
            ],
            "KUBEVIRT_NAMESPACE",
        ),
        ("post", &[("KUBEVIRT_NAME", "kubvirt")], "KUBEVIRT_NAME"),
        ("status", &[("KUBEVIRT_NAME", "kubvirt")], "KUBEVIRT_NAME"),
        (
            "status",
            &[("MANAGEDCHART_NAME", "harvestr")],
            "MANAGEDCHART_NAME",
        ),
    ];
    for (phase, extra, names) in cases {
        let r = run(env_with(&ns, phase, extra)).await;
        assert_eq!(r.code, i32::from(exit::MISSING), "{phase} {extra:?}: {r:?}");
        let error = r.summary.as_ref().unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            error.contains("not found") && error.contains(names),
            "{error}"
        );
        assert!(error.contains("ALLOW_MISSING"), "{error}");
        assert_eq!(
            both_rvs(&client, &ns).await,
            before,
            "{phase} {extra:?} wrote"
        );
    }
    // status still prints its verdict before failing.
    let r = run(env_with(&ns, "status", &[("KUBEVIRT_NAME", "kubvirt")])).await;
    assert!(r.stdout.starts_with("NOT FOUND: KubeVirt"), "{r:?}");

    let r = run(env_with(
        &ns,
        "pre",
        &[
            ("KUBEVIRT_NAMESPACE", "kubevirt"),
            ("ALLOW_MISSING", "true"),
        ],
    ))
    .await;
    r.ok();
    assert_eq!(
        both_rvs(&client, &ns).await,
        before,
        "nothing to guard, nothing written"
    );
    let steps = &r.summary.as_ref().unwrap()["steps"];
    assert_eq!(steps[0]["outcome"], "unchanged");
    assert_eq!(steps[1]["outcome"], "missing");
    // A missing ManagedChart with ALLOW_MISSING: the CR is still suspended (plain KubeVirt).
    let r = run(env_with(
        &ns,
        "pre",
        &[("MANAGEDCHART_NAME", "harvestr"), ("ALLOW_MISSING", "yes")],
    ))
    .await;
    r.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
}

/// An administrator's (or a lost record's) `[]`: `post` leaves it, but loudly: a WARN line, a
/// Warning Event that says how to turn updates on, and the termination message.
#[tokio::test]
async fn updates_left_off_without_a_record_are_loud() {
    let (client, ns) = new_harvester("still-off", json!([])).await;
    let r = run(env_with(&ns, "post", &[("MANAGEDCHART_NAME", "")])).await;
    r.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    let w = r.warnings();
    assert!(
        w.len() == 1 && w[0].starts_with(STILL_SUSPENDED) && w[0].contains("kubectl"),
        "{w:?}"
    );
    r.says(&[" WARN ", "stay OFF"]);
    let ev = events(&client, &ns).await;
    assert!(
        ev.iter().any(|(t, reason, note)| t == "Warning"
            && reason == STILL_SUSPENDED
            && note.contains("patch kubevirt")),
        "{ev:?}"
    );
}

/// Someone sets `[Evict]` while suspended: `post` keeps it, drops our record and the values
/// override, and warns.
#[tokio::test]
async fn a_change_while_suspended_is_kept_with_a_warning() {
    let client = admin().await;
    let ns = namespace(&client, "later-choice").await;
    let (_, chart0) = harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    assert_eq!(run(env_with(&ns, "pre", &[])).await.code, 0);
    let op = json!([{"op": "replace", "path": "/spec/workloadUpdateStrategy/workloadUpdateMethods", "value": ["Evict"]}]);
    json_patch(&client, "KubeVirt", &ns, "kubevirt", op)
        .await
        .unwrap();
    let r = run(env_with(&ns, "post", &[])).await;
    r.ok();
    // The write says what it did (an earlier version said `actions=[]`, which told nothing).
    let step = &r.summary.as_ref().unwrap()["steps"][0];
    assert_eq!(step["outcome"], "changed", "{step}");
    assert_eq!(
        step["actions"],
        json!([
            "removed our record of the original; kept the methods [\"Evict\"] set while suspended"
        ]),
        "{step}"
    );
    assert!(!r.stderr.contains("actions=[]"), "{r:?}");
    let kv = get(&client, "KubeVirt", &ns, "kubevirt").await;
    assert_eq!(
        kv["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
        json!(["Evict"])
    );
    assert_eq!(
        kv["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("workload-update-guard"))
            .count(),
        0
    );
    let chart = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_eq!(
        content(&chart),
        content(&chart0),
        "override and entry removed"
    );
    let w = r.warnings();
    assert!(
        w.iter()
            .any(|w| w.starts_with(CHANGED_WHILE_SUSPENDED) && w.contains("[\"Evict\"]")),
        "{w:?}"
    );
    let ev = events(&client, &ns).await;
    assert!(
        ev.iter()
            .any(|(t, reason, _)| t == "Warning" && reason == CHANGED_WHILE_SUSPENDED),
        "{ev:?}"
    );
    assert!(
        !ev.iter()
            .any(|(_, reason, _)| reason == "WorkloadUpdatesRestored"),
        "nothing was restored: {ev:?}"
    );
    // status agrees before, and says it in its first line.
    assert_eq!(claims_of_ours(&kv), Vec::<Value>::new());
}

/// Turning updates back on says how many VMIs KubeVirt will now migrate, and how fast: in the
/// log, the Restored Event and the termination message.
#[tokio::test]
async fn post_says_what_kubevirt_will_do_next() {
    let (client, ns) = new_harvester("notice", json!(["LiveMigrate"])).await; // 3 outdated VMIs
    assert_eq!(run(env_with(&ns, "pre", &[])).await.code, 0);
    let r = run(env_with(&ns, "post", &[])).await;
    r.ok();
    let notice = "the 3 outdated VMIs will be live-migrated, at most 5 at a time in the cluster \
                  and 2 at a time from any one node";
    r.says(&[notice]);
    let actions = r.summary.as_ref().unwrap()["steps"][0]["actions"].to_string();
    assert!(actions.contains(notice), "{actions}");
    let ev = events(&client, &ns).await;
    assert!(
        ev.iter()
            .any(|(_, reason, note)| reason == "WorkloadUpdatesRestored" && note.contains(notice)),
        "{ev:?}"
    );
}

/// Someone removed our comparePatches entry while suspended: `post` says so, in words.
#[tokio::test]
async fn a_removed_compare_patch_is_reported() {
    let (client, ns) = new_harvester("entry-gone", json!(["LiveMigrate"])).await;
    assert_eq!(run(env_with(&ns, "pre", &[])).await.code, 0);
    let op = json!([{"op": "remove", "path": "/spec/diff/comparePatches/3"}]);
    json_patch(&client, "ManagedChart", &ns, "harvester", op)
        .await
        .unwrap();
    let r = run(env_with(&ns, "post", &[])).await;
    r.ok();
    let w = r.warnings();
    assert!(
        w.iter()
            .any(|w| w.starts_with(COMPARE_PATCH_GONE)
                && w.contains(&format!("KubeVirt {ns}/kubevirt"))),
        "{w:?}"
    );
}

/// A wrong CA fails at once (exit 3), naming the server and the TLS reason; a refused port is
/// retried to the deadline (exit 4), and the message names the server. No per-retry ERROR line
/// from the client library.
#[tokio::test]
async fn connection_errors_say_where_and_why() {
    let cp = control_plane();
    let dir = tempfile_dir();
    let kubeconfig = |server: &str, ca: &std::path::Path| {
        let path = dir.join(format!("kc-{}", server.replace([':', '/'], "_")));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
                 users:\n- name: u\n  user:\n    token: nothing\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
                ca.display()
            ),
        )
        .unwrap();
        path
    };
    // The serving certificate is no CA: verification fails.
    let wrong_ca = kubeconfig(&cp.server(), &cp.dir.join("serving.crt"));
    let start = Instant::now();
    let r = run_bin(&wrong_ca, env_for("default", "status")).await;
    assert_eq!(r.code, i32::from(exit::PERMANENT), "{r:?}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let error = r.summary.as_ref().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains(&cp.server()) && error.contains("TLS"),
        "{error}"
    );

    let refused = kubeconfig("https://127.0.0.1:1", &cp.dir.join("ca.crt"));
    let mut env = env_for("default", "status");
    env.insert("DEADLINE_SECONDS".into(), "3".into());
    let r = run_bin(&refused, env).await;
    assert_eq!(r.code, i32::from(exit::TRANSIENT), "{r:?}");
    let error = r.summary.as_ref().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("https://127.0.0.1:1"), "{error}");
    assert!(
        !r.stderr.contains("kube_client::client::builder"),
        "{}",
        r.stderr
    );
    // The first retry says what bounds the retries, once.
    let warns: Vec<&str> = r.stderr.lines().filter(|l| l.contains(" WARN ")).collect();
    assert!(
        warns[0].contains("until the run's deadline, DEADLINE_SECONDS=3, runs out; then exit 4"),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("DEADLINE_SECONDS=3").count(),
        1,
        "{}",
        r.stderr
    );
}

/// Outside a pod, the default termination-message path is not created; a given one is written.
#[tokio::test]
async fn the_default_termination_path_is_written_only_where_the_kubelet_made_it() {
    let default = std::path::Path::new("/dev/termination-log");
    assert!(
        !default.exists(),
        "this test needs a host without {}",
        default.display()
    );
    let (_, ns) = new_harvester("term", json!(["LiveMigrate"])).await;
    let out = std::process::Command::new(BIN)
        .env_clear()
        .env("KUBECONFIG", control_plane().kubeconfig())
        .envs(env_for(&ns, "status"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!default.exists(), "the default path was created");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("termination message"));
}

/// `DRY_RUN` logs what it would do, in words.
#[tokio::test]
async fn a_dry_run_says_would() {
    let (client, ns) = new_harvester("would", json!(["LiveMigrate"])).await;
    let r = run(env_with(&ns, "pre", &[("DRY_RUN", "true")])).await;
    r.ok();
    assert!(
        r.stderr.contains("would write (dry run: nothing changed)"),
        "{r:?}"
    );
    assert!(
        r.stderr.contains(&format!(
            "appended a comparePatches entry for KubeVirt {ns}/kubevirt"
        )),
        "{r:?}"
    );
    assert!(!r.stderr.contains(" written "), "{r:?}");
    // A dry-run post after a real pre: every restore is accepted by the server's dry run, each
    // release is planned against that result and shown, and nothing changes.
    assert_eq!(run(env_with(&ns, "pre", &[])).await.code, 0);
    let before = both_rvs(&client, &ns).await;
    let r = run(env_with(&ns, "post", &[("DRY_RUN", "true")])).await;
    r.ok();
    let objects: Vec<String> = r
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["object"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        objects,
        [
            format!("KubeVirt {ns}/kubevirt"),
            format!("KubeVirt {ns}/kubevirt"),
            format!("ManagedChart {ns}/harvester"),
            format!("ManagedChart {ns}/harvester"),
        ],
        "{r:?}"
    );
    assert_eq!(both_rvs(&client, &ns).await, before);
    let summary = r.summary.as_ref().unwrap();
    for step in summary["steps"].as_array().unwrap() {
        assert_eq!(step["outcome"], "would-change", "{summary}");
    }
}

/// With `LOG_FORMAT=json`, the run's last log line carries the summary as a JSON object.
#[tokio::test]
async fn the_json_log_carries_the_summary_as_an_object() {
    let (_, ns) = new_harvester("json-log", json!(["LiveMigrate"])).await;
    let r = run(env_with(&ns, "pre", &[("LOG_FORMAT", "json")])).await;
    r.ok();
    let last: Value = serde_json::from_str(r.stderr.lines().last().unwrap()).unwrap();
    assert_eq!(last["message"], "done");
    assert_eq!(last["summary"], *r.summary.as_ref().unwrap());
    for line in r.stderr.lines() {
        serde_json::from_str::<Value>(line).expect("every log line is JSON");
    }
}

/// Half restored: `pre` with the defaults, then `post MANAGEDCHART_NAME=`. The CR is restored,
/// the ManagedChart keeps pre's values override `[]` (Fleet's next deploy would suspend the
/// updates again): post says so loudly (WARN, Warning Event, termination message) with the
/// command that finishes, `status` does not call it NOT SUSPENDED, and a `post` with the
/// defaults finishes the job.
#[tokio::test]
async fn a_post_that_skips_the_chart_is_not_called_success() {
    let client = admin().await;
    let ns = namespace(&client, "half").await;
    let (_, chart0) = harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    assert_eq!(run(env_with(&ns, "pre", &[])).await.code, 0);
    let r = run(env_with(&ns, "post", &[("MANAGEDCHART_NAME", "")])).await;
    r.ok();
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));
    let left = r.warnings_of("RecordsLeftBySkippedStep: ");
    assert_eq!(left.len(), 1, "{r:?}");
    assert_contains_all(
        &left[0],
        &[
            &format!("NOT FULLY RESTORED: ManagedChart {ns}/harvester keeps what pre wrote there"),
            "the values override [] and its record",
            "the comparePatches pointer and its record",
            "MANAGEDCHART_NAME is empty",
            "Fleet's next deploy of the chart renders that [] on the KubeVirt CR and suspends the \
         automated updates again",
            &format!("run post again with MANAGEDCHART_NAMESPACE={ns} MANAGEDCHART_NAME=harvester"),
            "hack/job.sh run post",
        ],
    );
    r.says(&[" WARN ", "NOT FULLY RESTORED"]);
    let ev = events(&client, &ns).await;
    assert!(
        ev.iter().any(|(t, reason, note)| t == "Warning"
            && reason == "RecordsLeftBySkippedStep"
            && note.contains("NOT FULLY RESTORED")),
        "{ev:?}"
    );
    // status, with the chart named or not: the verdict says Fleet's next deploy suspends again.
    for extra in [&[][..], &[("MANAGEDCHART_NAME", "")][..]] {
        let s = run(env_with(&ns, "status", extra)).await;
        s.ok();
        let verdict = s.summary.as_ref().unwrap()["verdict"].as_str().unwrap();
        assert!(
            verdict.starts_with(
                "ATTENTION: automated updates on ([\"LiveMigrate\"]) only until Fleet's next \
                 deploy, which suspends them again"
            ) && verdict.contains("hack/job.sh run post"),
            "{extra:?}: {verdict}"
        );
        assert!(s.stdout.starts_with(verdict), "{s:?}");
        assert!(
            s.warnings()
                .iter()
                .any(|w| w.contains("still carries what pre wrote there")),
            "{s:?}"
        );
    }
    // The command it names finishes the job.
    let r = run(env_with(&ns, "post", &[])).await;
    r.ok();
    assert_eq!(r.warnings(), Vec::<String>::new(), "{r:?}");
    let chart = get(&client, "ManagedChart", &ns, "harvester").await;
    assert_eq!(content(&chart), content(&chart0));
    let s = run(env_with(&ns, "status", &[])).await;
    assert_eq!(
        s.summary.as_ref().unwrap()["verdict"],
        "NOT SUSPENDED: automated updates on ([\"LiveMigrate\"])"
    );
}

/// Every skip is in the termination message's `warnings`: ALLOW_MISSING's included (the file
/// the kubelet would read, written by the run).
#[tokio::test]
async fn every_skip_is_in_the_termination_message() {
    let (_, ns) = new_harvester("skips", json!(["LiveMigrate"])).await;
    for (phase, extra, object) in [
        (
            "pre",
            &[("KUBEVIRT_NAMESPACE", "kubevirt")][..],
            "KubeVirt kubevirt/kubevirt",
        ),
        (
            "post",
            &[("KUBEVIRT_NAMESPACE", "kubevirt")][..],
            "KubeVirt kubevirt/kubevirt",
        ),
        (
            "pre",
            &[("MANAGEDCHART_NAME", "harvestr")][..],
            &format!("ManagedChart {ns}/harvestr"),
        ),
        (
            "status",
            &[("KUBEVIRT_NAME", "kubvirt")][..],
            &format!("KubeVirt {ns}/kubvirt"),
        ),
    ] {
        let mut env = env_with(&ns, phase, extra);
        env.insert("ALLOW_MISSING".into(), "true".into());
        let r = run(env).await;
        assert_eq!(r.code, 0, "{phase} {extra:?}: {r:?}");
        let w = r.warnings();
        let want = format!("SkippedNotFound: {object} not found: skipped (ALLOW_MISSING=true)");
        assert!(w.iter().any(|w| w.starts_with(&want)), "{want:?} in {w:?}");
        assert!(
            w.iter().any(|w| w.contains("check ")),
            "says what to check: {w:?}"
        );
    }
    // The read-only status never says that nothing was written.
    let r = run(env_with(&ns, "status", &[("KUBEVIRT_NAME", "kubvirt")])).await;
    assert_eq!(r.code, i32::from(exit::MISSING), "{r:?}");
    let error = r.summary.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(!error.contains("written"), "{error}");
    // A step switched off that leaves pre's record on the CR: named too.
    assert_eq!(run(env_with(&ns, "pre", &[])).await.code, 0);
    let r = run(env_with(&ns, "post", &[("STEP_KUBEVIRT", "false")])).await;
    r.ok();
    assert!(
        r.warnings().iter().any(|w| w.starts_with(&format!(
            "RecordsLeftBySkippedStep: NOT FULLY RESTORED: KubeVirt {ns}/kubevirt keeps what pre \
             wrote there: the methods [] that pre set, pre's record of the original"
        )) && w.contains("STEP_KUBEVIRT=true")
            && w.contains("stay OFF")),
        "{r:?}"
    );
}

/// The messages, in the words an operator reads.
#[tokio::test]
async fn the_messages_say_what_they_mean() {
    // A kubeconfig that is not there: its path quoted once.
    let r = run_bin(
        std::path::Path::new("/nonexistent/kubeconfig"),
        env_for("default", "status"),
    )
    .await;
    assert_eq!(r.code, i32::from(exit::CONFIG), "{r:?}");
    let error = r.summary.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(error.contains("'/nonexistent/kubeconfig'"), "{error}");
    assert!(!error.contains("'\"") && !error.contains("\"'"), "{error}");

    // (A change made while suspended: `a_change_while_suspended_is_kept_with_a_warning`.)
    let (client, ns) = new_harvester("said", json!(["LiveMigrate"])).await;

    // status: "nothing" said once, and the owners' label parted from its value.
    let mut plain = env_with(&ns, "status", &[]);
    plain.insert("KUBEVIRT_NAME".into(), "other".into());
    create(
        &client,
        "KubeVirt",
        &ns,
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "other"},
               "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]}}}),
    )
    .await;
    let s = run(plain).await;
    assert!(
        s.stdout
            .contains("post would restore          nothing: no record of ours, and the methods"),
        "{s:?}"
    );
    assert!(!s.stdout.contains("nothing: nothing"), "{s:?}");
    assert!(
        s.stdout
            .contains(".spec.workloadUpdateStrategy.workloadUpdateMethods "),
        "{s:?}"
    );
    assert!(!s.stdout.contains("workloadUpdateMethodsnone"), "{s:?}");
}

/// hack/job.sh: a wrong command line is one line and a one-line hint; an unreachable cluster is
/// called unreachable, not a problem of the manifests.
#[test]
fn job_sh_says_what_is_wrong_in_one_line() {
    let kubectl = control_plane().bin_dir.join("kubectl");
    let dir = tempfile_dir();
    let closed = dir.join("closed-kubeconfig");
    std::fs::write(
        &closed,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\n\
         users:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
    )
    .unwrap();
    let job = |args: &[&str]| {
        let out = std::process::Command::new("bash")
            .arg(repo_root().join("hack/job.sh"))
            .args(args)
            .env("KUBECTL", &kubectl)
            .env("KUBECONFIG", &closed)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = job(&["run", "during"]);
    assert_eq!(code, Some(2));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(
        lines[0],
        "job: ERROR: PHASE must be pre, post, status or post-armed, not 'during'"
    );
    assert!(lines[1].starts_with("usage: hack/job.sh run|wait|render pre|post|status"));
    for args in [
        &["run", "pre"][..],
        &["render", "status"],
        &["wait", "post"],
        &["arm"],
    ] {
        let (code, err) = job(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("job: ERROR: the cluster is unreachable at https://127.0.0.1:1: ")
                && err.contains("refused"),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("manifests") && !err.contains("--validate"),
            "{args:?}: {err}"
        );
    }
}
