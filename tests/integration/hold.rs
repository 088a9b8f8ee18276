//! The hold (`manifests/chart/templates/admission-policy.yaml`, docs/hold.md), rendered by the
//! real Helm 4 and applied to the real API server, against the model of Harvester's controller
//! (`support::harvester_controller`: whole-object Updates as `harvester`, retried with lasso's
//! backoff): the one Update that sets `NodesPrepared=True` on a path-A Upgrade is refused while
//! the KubeVirt CR's automated workload updates are on, and passes at the model's next retry once
//! the guard has suspended them; nothing else Harvester writes is ever refused.
//!
//! The policy and its binding are cluster-scoped: each test renders them for its own namespace
//! under its own release name.

use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};
use workload_update_guard::plan::releases::Handling;

use crate::resident::Guard;
use crate::support::harvester::*;
use crate::support::harvester_controller::*;
use crate::support::*;

const ESCAPE: &str = "workload-update-guard.harvesterhci.io/allow-unprotected";

/// The chart's policy and binding as `helm template RELEASE` renders them for the KubeVirt CR in
/// `ns`, as JSON.
fn render_policy(release: &str, ns: &str, extra: &[&str]) -> Vec<Value> {
    let kubevirt_ns = format!("guard.kubevirtNamespace={ns}");
    let args = [&["--set", kubevirt_ns.as_str()], extra].concat();
    yaml_objects(&crate::chart::release_yaml(release, &args))
        .into_iter()
        .filter(|o| o["apiVersion"] == "admissionregistration.k8s.io/v1")
        .collect()
}

/// The chart renders the policy and its binding (on by default), named after the release,
/// bound to the KubeVirt CR of the values, failing closed on the one Update it matches and
/// letting everything pass without the CR; `admissionPolicy.enabled=false` leaves both out.
#[test]
fn the_chart_renders_the_hold_and_leaves_it_out_on_request() {
    let objects = render_policy("workload-update-guard", "harvester-system", &[]);
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .unwrap();
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
        .unwrap();
    assert_eq!(
        policy["metadata"]["name"],
        "workload-update-guard-watch-hold"
    );
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    assert_eq!(
        policy["spec"]["paramKind"],
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt"})
    );
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": ["harvesterhci.io"], "apiVersions": ["*"], "operations": ["UPDATE"],
                "resources": ["upgrades"]}])
    );
    assert_eq!(
        policy["spec"]["matchConstraints"]["namespaceSelector"],
        json!({"matchLabels": {"kubernetes.io/metadata.name": "harvester-system"}})
    );
    assert_eq!(policy["spec"]["validations"].as_array().unwrap().len(), 1);
    assert_eq!(
        binding["metadata"]["name"],
        "workload-update-guard-watch-hold"
    );
    assert_eq!(
        binding["spec"]["policyName"],
        "workload-update-guard-watch-hold"
    );
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(
        binding["spec"]["paramRef"],
        json!({"name": "kubevirt", "namespace": "harvester-system", "parameterNotFoundAction": "Allow"})
    );
    assert!(policy.to_string().contains(ESCAPE));
    let other = render_policy("g", "kv-ns", &["--set", "guard.kubevirtName=kv"]);
    assert_eq!(other[1]["spec"]["paramRef"]["name"], "kv", "{other:#?}");
    assert_eq!(other[1]["spec"]["paramRef"]["namespace"], "kv-ns");
    assert!(render_policy("g", "kv-ns", &["--set", "admissionPolicy.enabled=false"]).is_empty());
}

/// The policy applied for `ns` (release `release`), and in force (`wait_in_force`).
async fn hold_in_force(client: &Client, ns: &str, release: &str) {
    let objects = render_policy(release, ns, &[]);
    assert_eq!(objects.len(), 2, "{objects:#?}");
    let mut apply = control_plane().kubectl();
    apply.args(["apply", "-f", "-"]);
    pipe(
        apply,
        &objects
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    );
    wait_in_force(client, ns).await;
}

/// A v1.7.1 upgrade with no guard running: the model's `NodesPrepared=True` is refused, with a
/// message that says what it waits for and how to pass, and retried with lasso's backoff; the
/// upgrade stays at `PreparingNodes`. The guard started: it suspends, the model's next retry
/// passes, and the upgrade goes on to its end, where the guard restores.
#[tokio::test]
async fn the_hold_keeps_kubevirts_upgrade_back_until_the_guard_suspends() {
    let methods = json!(["LiveMigrate"]);
    let (client, ns) = new_harvester("hold-guard", methods.clone()).await;
    let kubeconfig = control_plane().kubeconfig();
    hold_in_force(&client, &ns, "hold-guard").await;
    let up = Upgrade::start(&client, &ns, "hvst-upgrade-held", "v1.7.1").await;
    let hv = up.controller(&client);
    hv.up_to_nodes_prepared().await;
    let (retrying, seen) = hv.nodes_prepared_in_background(Duration::from_secs(90));
    // Held: refused, again and again, for 4 s (about 15 retries on lasso's compressed scale).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let held = seen.lock().unwrap().clone();
    assert!(held.passed.is_none(), "{held:?}");
    assert!(held.refusals.len() >= 5, "retried: {held:?}");
    let message = &held.refusals[0];
    assert_contains_all(
        message,
        &[
            "held by workload-update-guard",
            "Upgrade hvst-upgrade-held to v1.7.1 waits before NodesPrepared",
            &format!("KubeVirt {ns}/kubevirt still has workloadUpdateMethods [LiveMigrate]"),
            "kubectl -n harvester-system get deploy hold-guard-watch",
            &format!(
                "kubectl -n {ns} annotate upgrades.harvesterhci.io hvst-upgrade-held {ESCAPE}=true"
            ),
            "admissionPolicy.enabled=false",
        ],
    );
    eprintln!("hold: the refusal: {message}");
    let now = hv.get().await;
    assert_eq!(
        now["metadata"]["labels"]["harvesterhci.io/upgradeState"],
        "PreparingNodes"
    );
    assert_eq!(wrangler::status(&now, "NodesPrepared"), "Unknown");
    assert_eq!(kubevirt_methods(&client, &ns).await, methods);

    // The guard comes up: it suspends, and the model's next retry passes.
    let guard = Guard::spawn(&kubeconfig, &ns, 0);
    methods_become(&client, &ns, &json!([]), Duration::from_secs(15)).await;
    let suspended = Instant::now();
    let passed = retrying.await.unwrap();
    let at = passed.passed.expect("passed after the suspension");
    // lasso's longest delay before its 31st retry is 30 s: 1.5 s on the model's scale.
    let after = at.saturating_duration_since(suspended);
    assert!(
        after < Duration::from_secs(3),
        "passed {after:?} after the suspension"
    );
    eprintln!(
        "hold: {} refusals, passed {after:?} after the suspension",
        passed.refusals.len()
    );

    // The upgrade goes on, none of its writes refused, and ends; the guard restores.
    hv.apply_manifests().await;
    hv.system_services_upgraded(true).await;
    hv.upgrading_nodes().await;
    hv.node_upgraded("node-0", true).await;
    guard
        .restored(&client, &ns, &methods, Duration::from_secs(10))
        .await;
    hv.cleanup().await;
    hv.delete().await;
}

/// Where the guard is not needed or the operator chose, the same Update passes at once: a
/// v1.7.3 target (Harvester suspends itself), the administrator's own `[]`, and the escape
/// annotation (added mid-upgrade, while held, with `kubectl annotate`); the `skip` preload's
/// one Update is held as the Plan's is.
#[tokio::test]
async fn the_hold_lets_pass_what_needs_no_guard() {
    let client = admin().await;
    let on = json!(["LiveMigrate"]);
    let cases: &[(&str, &str, Value, bool)] = &[
        ("newer", "v1.7.3", on.clone(), false),
        ("admin-off", "v1.7.1", json!([]), false),
        ("skip", "v1.6.1", on.clone(), true),
    ];
    for (label, version, methods, skip) in cases {
        let ns = harvester_ns(&client, &format!("hold-pass-{label}"), on.clone()).await;
        hold_in_force(&client, &ns, &format!("hold-pass-{label}")).await;
        let up = Upgrade::start(&client, &ns, "hvst-upgrade-pass", version).await;
        let hv = up.controller(&client);
        hv.up_to_repo().await;
        if *methods != on {
            set_methods_by_hand(&hv, methods.clone()).await;
        }
        let seen = Default::default();
        let first = if *skip {
            hv.prepare_nodes_skipped(Duration::from_secs(2), &seen)
                .await
        } else {
            hv.prepare_nodes().await;
            hv.nodes_prepared(Duration::from_secs(2), &seen).await
        };
        if !skip {
            assert!(
                first.refusals.is_empty() && first.passed.is_some(),
                "{label}: {first:?}"
            );
            continue;
        }
        // The skip preload to a path-A target: held; the operator's annotation lets it pass.
        assert!(
            first.passed.is_none() && !first.refusals.is_empty(),
            "{first:?}"
        );
        kubectl_ok(&[
            "-n",
            &ns,
            "annotate",
            "upgrade",
            "hvst-upgrade-pass",
            &format!("{ESCAPE}=true"),
        ]);
        let seen = Default::default();
        let then = hv
            .prepare_nodes_skipped(Duration::from_secs(10), &seen)
            .await;
        assert!(then.passed.is_some(), "{then:?}");
        let now = hv.get().await;
        assert_eq!(wrangler::status(&now, "NodesPrepared"), "True");
        assert_eq!(
            now["metadata"]["labels"]["harvesterhci.io/upgradeState"],
            "PreparingNodes"
        );
        assert_eq!(kubevirt_methods(&client, &ns).await, on);
    }
}

/// Every other write of Harvester's through whole upgrades to a path-A release, with the
/// methods on and no guard: the steps before NodesPrepared, an early failure, its cleanup and
/// deletion; and past NodesPrepared (let through by a `[]` at that moment, the methods on again
/// after it): the apply-manifests step, the nodes, a failed node, the cleanup, the deletion.
/// None is refused (`must` fails the test on any refusal).
#[tokio::test]
async fn the_hold_refuses_nothing_else_harvester_writes() {
    let on = json!(["LiveMigrate"]);
    let (client, ns) = new_harvester("hold-else", on.clone()).await;
    hold_in_force(&client, &ns, "hold-else").await;

    // A failure before NodesPrepared: the repo fails, the cleanup runs, the Upgrade is deleted.
    let early = Upgrade::start(&client, &ns, "hvst-upgrade-early", "v1.7.1").await;
    let hv = early.controller(&client);
    hv.log_ready().await;
    hv.image_ready().await;
    hv.must(|u| {
        setters::label(u, "harvesterhci.io/upgradeState", "PreparingRepo");
        wrangler::create_unknown_if_not_exists(u, "RepoReady");
    })
    .await;
    hv.must(|u| {
        setters::condition(
            u,
            "RepoReady",
            "False",
            "RepoError",
            "no repo VM",
            &now_rfc3339(),
        )
    })
    .await;
    assert_eq!(wrangler::status(&hv.get().await, "Completed"), "False");
    hv.cleanup().await;
    hv.delete().await;

    // A whole upgrade past NodesPrepared, a node failing, its cleanup and deletion; then the
    // retry, which succeeds.
    for (name, node_ok) in [("hvst-upgrade-fails", false), ("hvst-upgrade-retry", true)] {
        let up = Upgrade::start(&client, &ns, name, "v1.7.1").await;
        let hv = up.controller(&client);
        hv.up_to_nodes_prepared().await;
        set_methods_by_hand(&hv, json!([])).await;
        let seen = Default::default();
        let prepared = hv.nodes_prepared(Duration::from_secs(10), &seen).await;
        assert!(prepared.passed.is_some(), "{prepared:?}");
        set_methods_by_hand_after(&client, &ns, on.clone()).await;
        hv.apply_manifests().await;
        hv.system_services_upgraded(true).await;
        hv.upgrading_nodes().await;
        hv.node_upgraded("node-0", node_ok).await;
        let done = hv.get().await;
        let want = if node_ok { "True" } else { "False" };
        assert_eq!(wrangler::status(&done, "Completed"), want, "{name}");
        hv.cleanup().await;
        if !node_ok {
            hv.delete().await;
        }
    }
    // A label of the operator's, and Harvester's pause map, on the ended one.
    let last = HarvesterController {
        client: client.clone(),
        ns: ns.clone(),
        name: "hvst-upgrade-retry".into(),
        nodes: vec!["node-0".into()],
    };
    last.must(|u| {
        setters::annotate(
            u,
            "harvesterhci.io/node-upgrade-pause-map",
            "{\"node-0\":\"unpause\"}",
        )
    })
    .await;
    last.delete().await;
}

/// The CR's methods set by hand (`kubectl patch`), and seen by the API server's param informer:
/// a dry-run of `NodesPrepared=True` on `hv`'s (path-A) Upgrade is refused exactly while they
/// are on.
async fn set_methods_by_hand(hv: &HarvesterController, methods: Value) {
    merge_patch(
        &hv.client,
        "KubeVirt",
        &hv.ns,
        "kubevirt",
        "kubectl-patch",
        json!({"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": methods.clone()}}}),
    )
    .await;
    let on = methods != json!([]);
    let start = Instant::now();
    loop {
        let mut u = hv.get().await;
        setters::condition(&mut u, "NodesPrepared", "True", "", "", &now_rfc3339());
        if put_upgrade_with(&hv.client, &u, true).await.is_err() == on {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the API server's param not {methods} within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The methods on again, once NodesPrepared is True (no probe: nothing is held any more).
async fn set_methods_by_hand_after(client: &Client, ns: &str, methods: Value) {
    set_methods(client, ns, "kubectl-patch", methods).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The expressions are total: Updates of Upgrades missing any field the policy reads (no
/// status, no conditions, no version, no annotations, NodesPrepared True already before) pass,
/// as does a NodesPrepared=True on an Upgrade without a version (unparsable: the newest).
#[tokio::test]
async fn the_hold_is_total_over_missing_fields() {
    let (client, ns) = new_harvester("hold-total", json!(["LiveMigrate"])).await;
    hold_in_force(&client, &ns, "hold-total").await;
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), &ns, &resource("Upgrade"));
    let bare = |name: &str, spec: Value| {
        serde_json::from_value::<kube::api::DynamicObject>(json!({
            "apiVersion": "harvesterhci.io/v1beta1", "kind": "Upgrade",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}))
        .unwrap()
    };
    for (name, spec) in [
        ("no-version", json!({})),
        ("empty-version", json!({"version": ""})),
    ] {
        api.create(&Default::default(), &bare(name, spec))
            .await
            .unwrap();
        let mut u = get(&client, "Upgrade", &ns, name).await;
        // A label on an Upgrade with no status at all, then conditions without NodesPrepared.
        setters::label(&mut u, "x", "1");
        let u = put_upgrade(&client, &u).await.expect("no status");
        let mut u = u;
        u["status"] = json!({"conditions": [{"type": "Completed", "status": "Unknown"}]});
        let mut u = put_upgrade(&client, &u).await.expect("no NodesPrepared");
        setters::condition(&mut u, "NodesPrepared", "True", "", "", &now_rfc3339());
        let u = put_upgrade(&client, &u).await.expect("no parsable version");
        let mut u = u;
        u["spec"]["version"] = json!("v1.7.1");
        let mut u = put_upgrade(&client, &u)
            .await
            .expect("NodesPrepared True before");
        setters::label(&mut u, "y", "2");
        put_upgrade(&client, &u).await.expect("a label after");
    }
}

/// The versions held are exactly those of the guard's table (`Handling::of` is `None`), on the
/// real API server's CEL: dry-run Updates turning NodesPrepared True with the methods on.
#[tokio::test]
async fn the_hold_holds_exactly_the_releases_the_guard_protects() {
    let (client, ns) = new_harvester("hold-versions", json!(["LiveMigrate"])).await;
    hold_in_force(&client, &ns, "hold-versions").await;
    let hv = HarvesterController::create(&client, &ns, "hvst-upgrade-v", "v1.7.1").await;
    for version in VERSIONS {
        let mut u = hv.get().await;
        u["spec"]["version"] = json!(version);
        setters::condition(&mut u, "NodesPrepared", "True", "", "", &now_rfc3339());
        let refused = put_upgrade_with(&client, &u, true).await.is_err();
        assert_eq!(
            refused,
            Handling::of(version) == Handling::None,
            "{version:?}"
        );
    }
}

const VERSIONS: &[&str] = &[
    "v1.6.0",
    "v1.6.1",
    "v1.7.0",
    "v1.7.1",
    "v1.7.1-rc2",
    "v1.7.1+dev",
    "1.7.1",
    "v1.07.01",
    "v01.7.1",
    "v0.3.0",
    "v1.5.99",
    "v1.7.2",
    "v1.7.3",
    "v1.8.0",
    "v1.8.0-rc3",
    "v1.9.0",
    "v2.0.0",
    "v1.7",
    "v1.7.1.1",
    "V1.7.1",
    "master-head",
    "",
    "v1.7.1-",
    "v1.10.0",
    "v1.7.10",
    "v1.6.x",
];

/// The policy's version expression against the guard's table over many strings: the regex in
/// the template (Rust's `regex`, the same syntax as CEL's RE2 for it) matches exactly where
/// `Handling::of` says the release does nothing itself.
#[test]
fn the_policys_versions_are_the_guards_table() {
    let template = std::fs::read_to_string(
        repo_root().join("manifests/chart/templates/admission-policy.yaml"),
    )
    .unwrap();
    let start = template.find(".matches('").unwrap() + ".matches('".len();
    let end = start + template[start..].find("')").unwrap();
    let re = regex::Regex::new(&template[start..end].replace("\\\\", "\\")).unwrap();
    let held = |v: &str| re.is_match(v);
    for v in VERSIONS {
        assert_eq!(held(v), Handling::of(v) == Handling::None, "{v:?}");
    }
    let part = proptest::prop_oneof!["[0-9]{1,3}", "0[0-9]", "[0-9a-z+]{0,2}"];
    let version = (
        proptest::option::of("[vV]"),
        part.clone(),
        part.clone(),
        part,
        proptest::option::of("[-+.][a-z0-9.]{0,4}"),
    );
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(&version, |(v, a, b, c, suffix)| {
            let s = format!(
                "{}{a}.{b}.{c}{}",
                v.unwrap_or_default(),
                suffix.unwrap_or_default()
            );
            proptest::prop_assert_eq!(held(&s), Handling::of(&s) == Handling::None, "{:?}", s);
            Ok(())
        })
        .unwrap();
}
