//! Retry and error classification against a `tower-test` mock. The real behaviour of the API
//! server is covered by the integration tests in `tests/`.

use super::*;
use http::{Request, Response};
use kube::client::Body;
use tower_test::mock;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

fn mock_cluster() -> (Cluster, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (
        Cluster::from_client(Client::new(service, "default"), false),
        handle,
    )
}

fn status(code: u16, details: Value) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": format!("code {code}"), "reason": "X", "code": code, "details": details});
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn object(rv: &str) -> Response<Body> {
    let body = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                      "metadata": {"name": "kubevirt", "namespace": "ns", "resourceVersion": rv},
                      "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]}}});
    Response::builder()
        .status(200)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn target() -> Target {
    Target {
        kind: Kind::KubeVirt,
        key: ObjectKey {
            namespace: "ns".into(),
            name: "kubevirt".into(),
        },
    }
}

/// Answers requests in order with `responses`; returns the methods seen.
fn serve(
    mut handle: Handle,
    responses: Vec<Response<Body>>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        for response in responses {
            let (request, send) = handle.next_request().await.expect("another request");
            seen.push(format!("{} {}", request.method(), request.uri().path()));
            send.send_response(response);
        }
        seen
    })
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_until_success() {
    let (cluster, handle) = mock_cluster();
    let server = serve(
        handle,
        vec![
            status(503, json!({})),
            status(429, json!({})),
            status(500, json!({})),
            object("1"),
        ],
    );
    let obj = cluster.get(&target()).await.unwrap().unwrap();
    assert_eq!(obj["metadata"]["resourceVersion"], "1");
    assert_eq!(server.await.unwrap().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_not_retried() {
    for code in [400, 401, 403] {
        let (cluster, handle) = mock_cluster();
        let server = serve(handle, vec![status(code, json!({}))]);
        let err = cluster.get(&target()).await.unwrap_err();
        assert_eq!(
            err.exit_code(),
            crate::error::exit::PERMANENT,
            "{code}: {err}"
        );
        assert_eq!(server.await.unwrap().len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn not_found_tells_a_missing_object_from_a_missing_crd() {
    let (cluster, handle) = mock_cluster();
    let server = serve(
        handle,
        vec![status(
            404,
            json!({"name": "kubevirt", "kind": "kubevirts"}),
        )],
    );
    assert_eq!(cluster.get(&target()).await.unwrap(), None);
    server.await.unwrap();

    let (cluster, handle) = mock_cluster();
    let server = serve(handle, vec![status(404, json!({}))]);
    let err = cluster.get(&target()).await.unwrap_err().to_string();
    assert!(err.contains("is its CRD installed"), "{err}");
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_conflict_reads_again_and_replans() {
    let (cluster, handle) = mock_cluster();
    let server = serve(
        handle,
        vec![status(409, json!({})), object("2"), object("3")],
    );
    let current = serde_json::to_value(
        json!({"metadata": {"name": "kubevirt", "resourceVersion": "1"},
        "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]}}}),
    )
    .unwrap();
    let written = cluster
        .converge(&target(), current, |o| crate::plan::kubevirt_pre(o, None))
        .await
        .unwrap();
    assert!(matches!(written, Written::Changed { .. }));
    assert_eq!(
        server.await.unwrap(),
        vec![
            "PATCH /apis/kubevirt.io/v1/namespaces/ns/kubevirts/kubevirt",
            "GET /apis/kubevirt.io/v1/namespaces/ns/kubevirts/kubevirt",
            "PATCH /apis/kubevirt.io/v1/namespaces/ns/kubevirts/kubevirt"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_patch_on_an_unchanged_object_is_permanent() {
    let (cluster, handle) = mock_cluster();
    // 422 without details, as a failed `test` gives, but the object did not change.
    let server = serve(handle, vec![status(422, json!({})), object("1")]);
    let current = json!({"metadata": {"name": "kubevirt", "resourceVersion": "1"}, "spec": {}});
    let err = cluster
        .converge(&target(), current, |o| crate::plan::kubevirt_pre(o, None))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), crate::error::exit::PERMANENT, "{err}");
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_schema_rejection_is_permanent() {
    let (cluster, handle) = mock_cluster();
    let server = serve(
        handle,
        vec![status(
            422,
            json!({"name": "kubevirt", "causes": [{"field": "spec"}]}),
        )],
    );
    let current = json!({"metadata": {"name": "kubevirt", "resourceVersion": "1"}, "spec": {}});
    let err = cluster
        .converge(&target(), current, |o| crate::plan::kubevirt_pre(o, None))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), crate::error::exit::PERMANENT, "{err}");
    assert_eq!(server.await.unwrap().len(), 1);
}
