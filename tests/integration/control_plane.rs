//! The control plane itself enforces what the guard relies on.

use serde_json::json;

use crate::support::*;

/// KubeVirt's own CRD (`hack/kubevirt.sh`, the version under test) takes the methods as an atomic
/// list of strings without an enum: a method KubeVirt does not know is stored (the updater ignores
/// it), so the guard records and restores whatever is there; a value that is not a list is refused.
#[tokio::test]
async fn the_kubevirt_schema_takes_any_method_in_a_list_and_refuses_a_non_list() {
    let client = admin().await;
    let ns = namespace(&client, "schema").await;
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), &ns, &resource("KubeVirt"));
    let kubevirt = |methods: serde_json::Value| {
        serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt"}, "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": methods}}}))
        .unwrap()
    };
    let err = api
        .create(&Default::default(), &kubevirt(json!("LiveMigrate")))
        .await
        .unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 422);
    assert!(s.message.contains("must be of type array"), "{}", s.message);
    let created = api
        .create(&Default::default(), &kubevirt(json!(["Bogus"])))
        .await
        .expect("no enum in KubeVirt's CRD");
    assert_eq!(
        created.data["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
        json!(["Bogus"])
    );
}

#[tokio::test]
async fn a_stale_resource_version_test_is_rejected_and_a_fresh_one_applies() {
    let client = admin().await;
    let ns = namespace(&client, "rvtest").await;
    let (kv, _) = harvester(&client, &ns, Some(json!(["LiveMigrate"]))).await;
    let rv = kv["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Someone else writes: our resourceVersion is now stale.
    json_patch(
        &client,
        "KubeVirt",
        &ns,
        "kubevirt",
        json!([{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]),
    )
    .await
    .unwrap();
    let ops = |rv: &str| {
        json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                                 {"op": "add", "path": "/spec/workloadUpdateStrategy/workloadUpdateMethods", "value": []}])
    };
    let err = json_patch(&client, "KubeVirt", &ns, "kubevirt", ops(&rv))
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 422, "{s:?}");
    // The guard's classification calls this a conflict (re-read and retry).
    assert_eq!(
        workload_update_guard::cluster::classify(&err),
        workload_update_guard::cluster::Class::Conflict
    );
    let fresh = get(&client, "KubeVirt", &ns, "kubevirt").await;
    let done = json_patch(
        &client,
        "KubeVirt",
        &ns,
        "kubevirt",
        ops(fresh["metadata"]["resourceVersion"].as_str().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(
        done["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
        json!([])
    );
}

#[tokio::test]
async fn a_token_without_rbac_is_forbidden() {
    let (_, ns) = new_harvester("norbac", None).await;
    kubectl_ok(&["-n", &ns, "create", "serviceaccount", "nobody"]);
    let nobody = client_for(&token_kubeconfig(&sa_token(&ns, "nobody"))).await;
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(nobody, &ns, &resource("KubeVirt"));
    let err = api.get("kubevirt").await.unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err}")
    };
    assert_eq!(s.code, 403, "{s:?}");
}

#[test]
fn a_control_plane_that_cannot_be_built_fails_loudly() {
    // No cached binaries and no Go: `up` must fail with a clear message, never succeed quietly.
    let cache = tempfile_dir();
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("hack/control-plane.sh"))
        .arg("up")
        .env("CP_CACHE_DIR", &cache)
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &cache)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&cache);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ERROR: go is required"), "{stderr}");
}
