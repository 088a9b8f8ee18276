//! Operator safety: a wrong name fails loudly and writes nothing, every "nothing done" that
//! leaves updates off is loud, a later explicit choice wins, `post` says what KubeVirt will do
//! next, and connection errors say where and why.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use serde_json::{Value, json};
use workload_update_guard::error::exit;
use workload_update_guard::plan::{CHANGED_WHILE_SUSPENDED, COMPARE_PATCH_GONE, STILL_SUSPENDED};

use crate::support::*;

fn rv(obj: &Value) -> Value {
    obj["metadata"]["resourceVersion"].clone()
}

async fn both_rvs(client: &kube::Client, ns: &str) -> (Value, Value) {
    (
        rv(&get(client, "KubeVirt", ns, "kubevirt").await),
        rv(&get(client, "ManagedChart", ns, "harvester").await),
    )
}

fn with(ns: &str, phase: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut env = env_for(ns, phase);
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    env
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
    let client = admin().await;
    let ns = namespace(&client, "wrong-name").await;
    harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
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
        let r = run(with(&ns, phase, extra)).await;
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
    let r = run(with(&ns, "status", &[("KUBEVIRT_NAME", "kubvirt")])).await;
    assert!(r.stdout.starts_with("NOT FOUND: KubeVirt"), "{r:?}");

    let r = run(with(
        &ns,
        "pre",
        &[
            ("KUBEVIRT_NAMESPACE", "kubevirt"),
            ("ALLOW_MISSING", "true"),
        ],
    ))
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        both_rvs(&client, &ns).await,
        before,
        "nothing to guard, nothing written"
    );
    let steps = &r.summary.as_ref().unwrap()["steps"];
    assert_eq!(steps[0]["outcome"], "unchanged");
    assert_eq!(steps[1]["outcome"], "missing");
    // A missing ManagedChart with ALLOW_MISSING: the CR is still suspended (plain KubeVirt).
    let r = run(with(
        &ns,
        "pre",
        &[("MANAGEDCHART_NAME", "harvestr"), ("ALLOW_MISSING", "yes")],
    ))
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
}

/// An administrator's (or a lost record's) `[]`: `post` leaves it, but loudly: a WARN line, a
/// Warning Event that says how to turn updates on, and the termination message.
#[tokio::test]
async fn updates_left_off_without_a_record_are_loud() {
    let client = admin().await;
    let ns = namespace(&client, "still-off").await;
    harvester(&client, &ns, Some(json!([]))).await;
    let r = run(with(&ns, "post", &[("MANAGEDCHART_NAME", "")])).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
    let w = r.warnings();
    assert!(
        w.len() == 1 && w[0].starts_with(STILL_SUSPENDED) && w[0].contains("kubectl"),
        "{w:?}"
    );
    assert!(
        r.stderr.contains(" WARN ") && r.stderr.contains("stay OFF"),
        "{r:?}"
    );
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
    assert_eq!(run(with(&ns, "pre", &[])).await.code, 0);
    let op = json!([{"op": "replace", "path": "/spec/workloadUpdateStrategy/workloadUpdateMethods", "value": ["Evict"]}]);
    json_patch(&client, "KubeVirt", &ns, "kubevirt", op)
        .await
        .unwrap();
    let r = run(with(&ns, "post", &[])).await;
    assert_eq!(r.code, 0, "{r:?}");
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
    let client = admin().await;
    let ns = namespace(&client, "notice").await;
    harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await; // 3 outdated VMIs
    assert_eq!(run(with(&ns, "pre", &[])).await.code, 0);
    let r = run(with(&ns, "post", &[])).await;
    assert_eq!(r.code, 0, "{r:?}");
    let notice = "the 3 outdated VMIs will be live-migrated, at most 5 at a time in the cluster \
                  and 2 at a time from any one node";
    assert!(r.stderr.contains(notice), "{r:?}");
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
    let client = admin().await;
    let ns = namespace(&client, "entry-gone").await;
    harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    assert_eq!(run(with(&ns, "pre", &[])).await.code, 0);
    let op = json!([{"op": "remove", "path": "/spec/diff/comparePatches/3"}]);
    json_patch(&client, "ManagedChart", &ns, "harvester", op)
        .await
        .unwrap();
    let r = run(with(&ns, "post", &[])).await;
    assert_eq!(r.code, 0, "{r:?}");
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
    let client = admin().await;
    let ns = namespace(&client, "term").await;
    harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
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
    let client = admin().await;
    let ns = namespace(&client, "would").await;
    harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    let r = run(with(&ns, "pre", &[("DRY_RUN", "true")])).await;
    assert_eq!(r.code, 0, "{r:?}");
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
    assert_eq!(run(with(&ns, "pre", &[])).await.code, 0);
    let before = both_rvs(&client, &ns).await;
    let r = run(with(&ns, "post", &[("DRY_RUN", "true")])).await;
    assert_eq!(r.code, 0, "{r:?}");
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
    let client = admin().await;
    let ns = namespace(&client, "json-log").await;
    harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    let r = run(with(&ns, "pre", &[("LOG_FORMAT", "json")])).await;
    assert_eq!(r.code, 0, "{r:?}");
    let last: Value = serde_json::from_str(r.stderr.lines().last().unwrap()).unwrap();
    assert_eq!(last["message"], "done");
    assert_eq!(last["summary"], *r.summary.as_ref().unwrap());
    for line in r.stderr.lines() {
        serde_json::from_str::<Value>(line).expect("every log line is JSON");
    }
}
