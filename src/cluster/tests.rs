//! Retry and error classification against a `tower-test` mock, with the requests' bodies
//! checked. The real behaviour of the API server is covered by the integration tests in `tests/`.

use std::future::Future;

use super::*;
use http::{Request, Response};
use kube::client::Body;
use serde_json::json;
use tower_test::mock;

use backon::BackoffBuilder;

use super::retry::{MAX_BACKOFF, backoff, first_retry, tls_failure};
use crate::error::{Subject, exit};
use crate::model::{FIELD_MANAGER, Kind, ObjectKey, Target};
use crate::vocabulary::{Plan, Refusal};

type Handle = mock::Handle<Request<Body>, Response<Body>>;

fn mock_cluster(dry_run: bool) -> (Cluster, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (
        Cluster::from_client(Client::new(service, "default"), dry_run),
        handle,
    )
}

/// `call` on a mock cluster that answers with `responses`: its result and the requests the
/// server saw.
async fn against<T>(
    responses: Vec<Result<Response<Body>, BoxError>>,
    call: impl AsyncFnOnce(&Cluster) -> T,
) -> (T, Vec<Seen>) {
    let (cluster, handle) = mock_cluster(false);
    let server = serve(handle, responses);
    let got = within(call(&cluster)).await;
    (got, within(server).await.unwrap())
}

/// `get(target)` against `responses`.
async fn get_against(
    target: &Target,
    responses: Vec<Result<Response<Body>, BoxError>>,
) -> (Result<Option<Value>, Error>, Vec<Seen>) {
    against(responses, async |c| c.get(target).await).await
}

/// `pre`'s suspension of a CR at resourceVersion 1, converged on a mock cluster that answers with
/// `responses`: what was written and the requests the server saw.
async fn pre_against(
    dry_run: bool,
    responses: Vec<Result<Response<Body>, BoxError>>,
) -> (Result<Written, Error>, Vec<Seen>) {
    let (cluster, handle) = mock_cluster(dry_run);
    let server = serve(handle, responses);
    let written = within(cluster.converge(&target(), kubevirt("1"), pre)).await;
    (written, within(server).await.unwrap())
}

fn names_our_field_manager(request: &Seen) {
    let query = &request.query;
    assert!(
        query.contains(&format!("fieldManager={FIELD_MANAGER}")),
        "{query}"
    );
}

/// Fails a test whose expected requests never come, instead of hanging it.
async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(600), f)
        .await
        .expect("the test finished in time")
}

fn status(code: u16, details: Value) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": format!("code {code}"), "reason": "X", "code": code, "details": details});
    respond(code, body)
}

fn respond(code: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn kubevirt(rv: &str) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
           "metadata": {"name": "kubevirt", "namespace": "ns", "resourceVersion": rv},
           "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]}}})
}

fn object(rv: &str) -> Response<Body> {
    respond(200, kubevirt(rv))
}

fn target() -> Target {
    Target::new(
        Kind::KubeVirt,
        &ObjectKey {
            namespace: "ns".into(),
            name: "kubevirt".into(),
        },
    )
}

/// A request as the mock saw it.
#[derive(Debug)]
struct Seen {
    line: String,
    query: String,
    body: Value,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Answers requests in order: `Ok(response)`, or `Err(error)` for a connection-level failure.
fn serve(
    mut handle: Handle,
    responses: Vec<Result<Response<Body>, BoxError>>,
) -> tokio::task::JoinHandle<Vec<Seen>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        for response in responses {
            let (request, send) = handle.next_request().await.expect("another request");
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            seen.push(Seen {
                line: format!("{} {}", parts.method, parts.uri.path()),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            });
            match response {
                Ok(r) => send.send_response(r),
                Err(e) => send.send_error(e),
            }
        }
        seen
    })
}

fn pre(o: &Value) -> Result<Plan, Refusal> {
    crate::plan::kubevirt::kubevirt_pre(o, None).map_err(|reason| Refusal {
        target: target(),
        reason,
    })
}

fn refused() -> BoxError {
    Box::new(std::io::Error::other("connection refused"))
}

/// A layer of a connection error as hyper-util builds them: its own text, and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{text}")]
struct Layer {
    text: &'static str,
    #[source]
    source: Option<BoxError>,
}

/// hyper-util's chain for a failed connection, down to the cause (`io::Error`).
fn connect_error(why: &'static str, cause: std::io::Error) -> BoxError {
    Box::new(Layer {
        text: "client error (Connect)",
        source: Some(Box::new(Layer {
            text: why,
            source: Some(Box::new(cause)),
        })),
    })
}

const PATH: &str = "/apis/kubevirt.io/v1/namespaces/ns/kubevirts/kubevirt";

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_until_success() {
    // More failures than any small fixed retry count: only the run's deadline stops retries.
    let mut responses: Vec<_> = [503, 429, 500, 502, 504]
        .map(|c| Ok(status(c, json!({}))))
        .into();
    responses.extend([Err(refused()), Err(refused()), Ok(object("1"))]);
    let (got, seen) = get_against(&target(), responses).await;
    assert_eq!(got.unwrap().unwrap()["metadata"]["resourceVersion"], "1");
    assert_eq!(seen.len(), 8);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_not_retried() {
    for code in [400, 401, 403] {
        // Details that name the object, as a real 403 has: still not "not found".
        let named = json!({"name": "kubevirt", "kind": "kubevirts"});
        let (got, seen) = get_against(&target(), vec![Ok(status(code, named))]).await;
        let err = got.unwrap_err();
        assert_eq!(err.exit_code(), exit::PERMANENT, "{code}: {err}");
        assert!(
            matches!(&err, Error::Refused { code: c, .. } if *c == code),
            "{err:?}"
        );
        assert_eq!(err.target(), Some(&target()));
        assert_eq!(seen.len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn not_found_tells_a_missing_object_from_a_missing_crd() {
    let named = json!({"name": "kubevirt", "kind": "kubevirts"});
    let (got, _) = get_against(&target(), vec![Ok(status(404, named))]).await;
    assert_eq!(got.unwrap(), None);

    let (got, _) = get_against(&target(), vec![Ok(status(404, json!({})))]).await;
    let err = got.unwrap_err();
    assert!(
        matches!(&err, Error::NotServed { plural: "kubevirts", hint: "", source, .. }
            if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 404)),
        "{err:?}"
    );
    assert!(err.to_string().contains("is its CRD installed"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_conflict_reads_again_and_replans_against_the_new_version() {
    let responses = vec![Ok(status(409, json!({}))), Ok(object("2")), Ok(object("3"))];
    let (written, seen) = pre_against(false, responses).await;
    assert!(matches!(written.unwrap(), Written::Changed { .. }));
    let lines: Vec<&str> = seen.iter().map(|s| s.line.as_str()).collect();
    assert_eq!(
        lines,
        [
            format!("PATCH {PATH}"),
            format!("GET {PATH}"),
            format!("PATCH {PATH}")
        ]
    );
    let rv_test = |s: &Seen| s.body[0].clone();
    assert_eq!(
        rv_test(&seen[0]),
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "1"})
    );
    assert_eq!(
        rv_test(&seen[2]),
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "2"})
    );
}

#[tokio::test(start_paused = true)]
async fn every_patch_names_our_field_manager_and_a_dry_run_says_so() {
    for dry_run in [false, true] {
        let (written, seen) = pre_against(dry_run, vec![Ok(object("2"))]).await;
        written.unwrap();
        names_our_field_manager(&seen[0]);
        assert_eq!(
            seen[0].query.contains("dryRun=All"),
            dry_run,
            "{}",
            seen[0].query
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_patch_of_a_deleted_object_is_missing() {
    let named = json!({"name": "kubevirt", "kind": "kubevirts"});
    let (written, _) = pre_against(false, vec![Ok(status(404, named))]).await;
    assert!(matches!(written, Ok(Written::Missing)), "{written:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_patch_on_an_unchanged_object_is_permanent() {
    // 422 without details, as a failed `test` gives, but the object did not change.
    let responses = vec![Ok(status(422, json!({}))), Ok(object("1"))];
    let err = pre_against(false, responses).await.0.unwrap_err();
    assert!(matches!(err, Error::Refused { code: 422, .. }), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn a_schema_rejection_is_permanent() {
    let rejected = json!({"name": "kubevirt", "causes": [{"field": "spec"}]});
    let (written, seen) = pre_against(false, vec![Ok(status(422, rejected))]).await;
    let err = written.unwrap_err();
    assert_eq!(err.exit_code(), exit::PERMANENT, "{err}");
    assert_eq!(seen.len(), 1);
}

/// A page of migrations as the API server sends it: `(name, annotated, phase)` each.
fn migrations_page(items: &[(&str, bool, Option<&str>)], next: &str) -> Response<Body> {
    let items: Vec<Value> = items
        .iter()
        .map(|(name, annotated, phase)| {
            let mut m = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name, "namespace": "vms", "managedFields": [{"manager": "x"}]},
                "spec": {"vmiName": "vm1"}});
            if *annotated {
                m["metadata"]["annotations"] = json!({"kubevirt.io/workloadUpdateMigration": ""});
            }
            if let Some(p) = phase {
                m["status"] = json!({"phase": p});
            }
            m
        })
        .collect();
    respond(
        200,
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigrationList",
               "metadata": {"continue": next, "resourceVersion": "7"}, "items": items}),
    )
}

#[tokio::test(start_paused = true)]
async fn the_migration_list_follows_pages_and_keeps_only_the_updater_s_unfinished() {
    let first = [
        ("kubevirt-workload-update-a", true, Some("Running")),
        ("mine", false, Some("Running")),
        ("kubevirt-workload-update-done", true, Some("Succeeded")),
    ];
    let second = [
        ("kubevirt-workload-update-b", false, None),
        ("renamed", true, Some("Scheduling")),
    ];
    let pages = vec![
        Ok(migrations_page(&first, "t1")),
        Ok(migrations_page(&second, "")),
    ];
    let (list, seen) = against(pages, async |c| c.list_migrations(MIGRATIONS_PAGE).await).await;
    let names: Vec<String> = list
        .unwrap()
        .iter()
        .map(|m| format!("{} {}", m.name, m.phase))
        .collect();
    assert_eq!(
        names,
        [
            "kubevirt-workload-update-a Running",
            "kubevirt-workload-update-b Pending",
            "renamed Scheduling"
        ]
    );
    // Paged and consistent: a limit, no resourceVersion (the watch cache's `0` ignores a limit).
    assert!(seen[0].query.contains("limit=500"), "{}", seen[0].query);
    assert!(
        !seen[0].query.contains("resourceVersion"),
        "{}",
        seen[0].query
    );
    assert!(
        seen[1].query.contains("continue=t1") && seen[1].query.contains("limit=500"),
        "{}",
        seen[1].query
    );

    let refused = vec![Ok(status(403, json!({})))];
    let err = against(refused, async |c| c.list_migrations(MIGRATIONS_PAGE).await)
        .await
        .0
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Refused {
                code: 403,
                subject: Subject::Migrations,
                ..
            }
        ),
        "{err:?}"
    );
}

/// An expired continue token (410) starts the list over: the pages before it are dropped, as
/// they are of another snapshot.
#[tokio::test(start_paused = true)]
async fn an_expired_continue_token_starts_the_list_over() {
    let responses = vec![
        Ok(migrations_page(
            &[("kubevirt-workload-update-old", true, None)],
            "t1",
        )),
        Ok(status(410, json!({}))),
        Ok(migrations_page(
            &[("kubevirt-workload-update-new", true, None)],
            "",
        )),
    ];
    let (list, seen) = against(responses, async |c| c.list_migrations(1).await).await;
    let list = list.unwrap();
    let names: Vec<&str> = list.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["kubevirt-workload-update-new"]);
    assert!(!seen[2].query.contains("continue"), "{}", seen[2].query);
}

/// A page of VMIs: `(name, phase, conditions)` each.
fn vmis_page(items: &[(&str, &str, Value)], next: &str) -> Response<Body> {
    let items: Vec<Value> = (items.iter())
        .map(|(name, phase, conditions)| {
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name, "namespace": "vms"}, "spec": {"domain": {}},
                "status": {"phase": phase, "conditions": conditions}})
        })
        .collect();
    respond(
        200,
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceList",
               "metadata": {"continue": next, "resourceVersion": "7"}, "items": items}),
    )
}

/// The forecast's VMIs: every page folded in (100 a page: a VMI is larger than a migration),
/// consistent, all namespaces; a 410 starts over; a refusal names the VMIs.
#[tokio::test(start_paused = true)]
async fn the_vmi_forecast_follows_pages() {
    let ok = json!([{"type": "LiveMigratable", "status": "True"}]);
    let hot = json!([{"type": "LiveMigratable", "status": "True"},
                     {"type": "HotMemoryChange", "status": "True"}]);
    let pages = vec![
        Ok(vmis_page(
            &[("a", "Running", ok.clone()), ("b", "Running", json!([]))],
            "t1",
        )),
        Ok(vmis_page(
            &[("c", "Running", hot), ("d", "Pending", json!([]))],
            "",
        )),
    ];
    let (forecast, seen) = against(pages, async |c| c.vmi_forecast(VMIS_PAGE).await).await;
    let f = forecast.unwrap().unwrap();
    assert_eq!(
        (f.running, f.not_live_migratable, f.hotplug_pending),
        (3, 1, 1)
    );
    assert_eq!(f.hotplug_named, ["vms/c"]);
    assert_eq!(
        seen[0].line,
        "GET /apis/kubevirt.io/v1/virtualmachineinstances"
    );
    assert!(seen[0].query.contains("limit=100"), "{}", seen[0].query);
    assert!(
        !seen[0].query.contains("resourceVersion"),
        "{}",
        seen[0].query
    );
    assert!(seen[1].query.contains("continue=t1"), "{}", seen[1].query);

    let expired = vec![
        Ok(vmis_page(&[("old", "Running", ok.clone())], "t1")),
        Ok(status(410, json!({}))),
        Ok(vmis_page(&[("new", "Running", json!([]))], "")),
    ];
    let (forecast, _) = against(expired, async |c| c.vmi_forecast(1).await).await;
    let f = forecast.unwrap().unwrap();
    assert_eq!((f.running, f.not_live_migratable), (1, 1));

    // Not served: no forecast; any other refusal is an error, as for the migrations.
    let not_served = vec![Ok(status(404, json!({})))];
    let none = against(not_served, async |c| c.vmi_forecast(VMIS_PAGE).await)
        .await
        .0;
    assert_eq!(none.unwrap(), None);
    let refused = vec![Ok(status(403, json!({})))];
    let err = (against(refused, async |c| c.vmi_forecast(VMIS_PAGE).await)
        .await
        .0)
        .unwrap_err();
    assert!(matches!(&err, Error::Refused { code: 403, .. }), "{err:?}");
    assert!(err.to_string().contains("virtualmachineinstances"), "{err}");
}

/// A late `pre` asks twice (its late warning, the migrations' own): one list answers both, a
/// failed one too; a new run (the resident guard's next act) lists again.
#[tokio::test(start_paused = true)]
async fn pre_lists_the_migrations_under_way_once() {
    let cfg = crate::config::Config::from_vars([("PHASE".into(), "pre".into())], None).unwrap();
    let (cluster, handle) = mock_cluster(false);
    let server = serve(
        handle,
        vec![
            Ok(migrations_page(
                &[("kubevirt-workload-update-a", true, Some("Running"))],
                "",
            )),
            Ok(migrations_page(&[], "")),
        ],
    );
    let mut done = Vec::new();
    let mut run = crate::context::Run::new(&cfg, &cluster, &mut done);
    let first = within(run.migrations_under_way()).await.unwrap();
    let second = within(run.migrations_under_way()).await.unwrap();
    assert_eq!((first.len(), first), (1, second));
    // The resident guard's next act (another upgrade, weeks later) is a run of its own.
    let mut done = Vec::new();
    let mut next = crate::context::Run::new(&cfg, &cluster, &mut done);
    let next_run = within(next.migrations_under_way()).await.unwrap();
    assert!(next_run.is_empty(), "{next_run:?}");
    assert_eq!(within(server).await.unwrap().len(), 2);

    let (cluster, handle) = mock_cluster(false);
    let server = serve(handle, vec![Ok(status(403, json!({})))]);
    let mut done = Vec::new();
    let mut run = crate::context::Run::new(&cfg, &cluster, &mut done);
    let first = within(run.migrations_under_way()).await.unwrap_err();
    let second = within(run.migrations_under_way()).await.unwrap_err();
    assert!(
        first.contains("403") && first == second,
        "{first} / {second}"
    );
    assert_eq!(within(server).await.unwrap().len(), 1);
}

#[test]
fn classification() {
    let api = |code: u16, details: Option<Value>| {
        let mut s = kube::core::Status::failure("x", "y").with_code(code);
        s.details = details.map(|d| serde_json::from_value(d).unwrap());
        kube::Error::Api(Box::new(s))
    };
    assert_eq!(classify(&api(409, None)), Class::Conflict);
    assert_eq!(classify(&api(422, None)), Class::Conflict);
    assert_eq!(
        classify(&api(422, Some(json!({"causes": [{"field": "spec"}]})))),
        Class::Permanent
    );
    assert_eq!(classify(&api(404, None)), Class::NotFound);
    for code in [429, 500, 502, 503, 504] {
        assert_eq!(classify(&api(code, None)), Class::Transient, "{code}");
    }
    for code in [400, 401, 403, 405, 410, 501] {
        assert_eq!(classify(&api(code, None)), Class::Permanent, "{code}");
    }
}

#[test]
fn no_wait_between_attempts_exceeds_the_documented_cap() {
    let mut waits = backoff().build();
    let all: Vec<Duration> = (0..40).map(|_| waits.next().unwrap()).collect();
    assert!(all.iter().all(|w| *w <= MAX_BACKOFF), "{all:?}");
    assert!(all[0] >= Duration::from_millis(100), "{all:?}");
    assert!(all[30..].iter().all(|w| *w >= MAX_BACKOFF / 2), "{all:?}");
}

#[tokio::test(start_paused = true)]
async fn the_last_transient_error_is_kept_for_the_deadline_message() {
    let (cluster, handle) = mock_cluster(false);
    assert!(cluster.last_error.get().starts_with("none"));
    let server = serve(handle, vec![Ok(status(503, json!({}))), Ok(object("1"))]);
    within(cluster.get(&target())).await.unwrap().unwrap();
    within(server).await.unwrap();
    let last = cluster.last_error.get();
    assert!(
        last.starts_with("get KubeVirt ns/kubevirt at (test client): "),
        "{last}"
    );
    assert!(last.contains("503"), "{last}");
}

#[tokio::test(start_paused = true)]
async fn a_response_that_does_not_decode_is_permanent() {
    let not_an_object = json!(["not", "an", "object"]);
    let (got, seen) = get_against(&target(), vec![Ok(respond(200, not_an_object))]).await;
    let err = got.unwrap_err();
    assert!(matches!(err, Error::Client { .. }), "{err:?}");
    assert_eq!(err.exit_code(), exit::PERMANENT, "{err}");
    assert_eq!(err.target(), Some(&target()));
    assert_eq!(seen.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_conflict_whose_reread_finds_the_object_gone_is_missing() {
    let named = json!({"name": "kubevirt", "kind": "kubevirts"});
    let responses = vec![Ok(status(409, json!({}))), Ok(status(404, named))];
    let (written, seen) = pre_against(false, responses).await;
    assert!(matches!(written, Ok(Written::Missing)), "{written:?}");
    assert_eq!(seen.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn nothing_to_do_sends_nothing() {
    let (cluster, mut handle) = mock_cluster(false);
    let mut suspended = kubevirt("1");
    let plan = pre(&suspended).unwrap();
    json_patch::patch(&mut suspended, plan.patch.as_ref().unwrap()).unwrap();
    let written = within(cluster.converge(&target(), suspended.clone(), pre))
        .await
        .unwrap();
    match written {
        Written::Unchanged { plan, object } => {
            assert_eq!(plan.patch, None);
            assert_eq!(object, suspended);
        }
        other => panic!("{other:?}"),
    }
    drop(cluster);
    assert!(within(handle.next_request()).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn an_event_about_the_kubevirt_cr_is_posted_once() {
    let mut cr = kubevirt("7");
    cr["metadata"]["uid"] = json!("u-1");
    for (kind, type_) in [
        (EventKind::Normal, "Normal"),
        (EventKind::Warning, "Warning"),
    ] {
        let (cluster, handle) = mock_cluster(false);
        // A failure is not retried and not fatal.
        let server = serve(handle, vec![Ok(status(500, json!({})))]);
        let made = within(cluster.event(&cr, kind, "Suspended", &"n".repeat(2000))).await;
        assert!(made.is_err_and(|e| e.starts_with("Suspended: ")));
        let seen = within(server).await.unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].line,
            "POST /apis/events.k8s.io/v1/namespaces/ns/events"
        );
        names_our_field_manager(&seen[0]);
        let e = &seen[0].body;
        assert_eq!(e["type"], type_);
        assert_eq!(
            (&e["reason"], &e["action"]),
            (&json!("Suspended"), &json!("Suspended"))
        );
        assert_eq!(e["note"].as_str().unwrap().len(), 1024);
        assert_eq!(e["reportingController"], FIELD_MANAGER);
        let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| FIELD_MANAGER.into());
        assert_eq!(e["reportingInstance"], instance.as_str());
        let time = e["eventTime"].as_str().unwrap();
        assert!(time.parse::<jiff::Timestamp>().is_ok(), "{time}");
        assert_eq!(e["metadata"]["namespace"], "ns");
        let name = e["metadata"]["name"].as_str().unwrap();
        let nanos = name.strip_prefix("kubevirt.").unwrap();
        assert!(u128::from_str_radix(nanos, 16).is_ok(), "{name}");
        assert_eq!(
            e["regarding"],
            json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "name": "kubevirt",
                   "namespace": "ns", "uid": "u-1", "resourceVersion": "7"})
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_posts_no_event() {
    let (cluster, mut handle) = mock_cluster(true);
    let made = within(cluster.event(&kubevirt("1"), EventKind::Normal, "Suspended", "x")).await;
    assert_eq!(made, Ok(()));
    drop(cluster);
    assert!(within(handle.next_request()).await.is_none());
}

#[tokio::test]
async fn a_refused_certificate_is_permanent_and_named() {
    let tls = kube::Error::Service(Box::new(std::io::Error::other(
        "invalid peer certificate: UnknownIssuer",
    )));
    assert_eq!(classify(&tls), Class::Permanent);
    assert_eq!(
        tls_failure(&tls).as_deref(),
        Some("invalid peer certificate: UnknownIssuer")
    );
    let refused = kube::Error::Service(Box::new(std::io::Error::other("connection refused")));
    assert_eq!(classify(&refused), Class::Transient);
    assert_eq!(tls_failure(&refused), None);
    let cluster = mock_cluster(false).0;
    let err = cluster.permanent(Subject::Migrations, tls);
    assert!(
        matches!(&err, Error::Client { subject: Subject::Migrations, message, source }
            if message == "cannot connect to (test client): TLS: invalid peer certificate: UnknownIssuer"
                && matches!(source.as_ref(), kube::Error::Service(_))),
        "{err:?}"
    );
    // The source is kept for whoever walks the chain; the message stays the one line.
    assert!(std::error::Error::source(&err).is_some());
}

#[tokio::test(start_paused = true)]
async fn refusals_keep_the_status_and_read_as_one_line() {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": "  forbidden:\nno rights  ", "reason": "Forbidden", "code": 403});
    let err = get_against(&target(), vec![Ok(respond(403, body))])
        .await
        .0
        .unwrap_err();
    assert!(
        matches!(&err, Error::Refused { code: 403, message, source, .. }
            if message == "forbidden: no rights"
                && matches!(source.as_ref(), kube::Error::Api(s) if s.reason == "Forbidden")),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_managedchart_crd_not_served_says_what_to_set() {
    let chart = Target::new(
        Kind::ManagedChart,
        &ObjectKey {
            namespace: "fleet-local".into(),
            name: "harvester".into(),
        },
    );
    let not_served = || vec![Ok(status(404, json!({})))];
    let err = get_against(&chart, not_served()).await.0.unwrap_err();
    assert!(
        matches!(&err, Error::NotServed { plural: "managedcharts", hint, .. }
            if hint.contains("set MANAGEDCHART_NAME= (empty)")),
        "{err:?}"
    );
    // The KubeVirt CRD missing has no such hint.
    let err = get_against(&target(), not_served()).await.0.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::NotServed {
                plural: "kubevirts",
                hint: "",
                ..
            }
        ),
        "{err:?}"
    );
}

/// The OS's reason reaches the retry's log line and the deadline's message. DNS is shown here
/// with a mocked chain (the integration tests resolve a name for real only where no packet can
/// leave); a refused port is shown for real in `tests/integration/process.rs`.
#[tokio::test(start_paused = true)]
async fn a_connection_error_keeps_its_cause() {
    let dns =
        std::io::Error::other("failed to lookup address information: Name or service not known");
    let timeout = std::io::Error::from(std::io::ErrorKind::TimedOut);
    let timeout_text = timeout.to_string();
    for (error, cause) in [
        (
            connect_error("dns error", dns),
            "dns error: failed to lookup address information: Name or service not known"
                .to_string(),
        ),
        (
            connect_error("tcp connect error", timeout),
            format!("tcp connect error: {timeout_text}"),
        ),
    ] {
        let (cluster, handle) = mock_cluster(false);
        let server = serve(handle, vec![Err(error), Ok(object("1"))]);
        within(cluster.get(&target())).await.unwrap().unwrap();
        within(server).await.unwrap();
        let last = cluster.last_error.get();
        assert!(
            last.ends_with(&format!("client error (Connect): {cause}")),
            "{last}"
        );
    }
}

#[test]
fn each_backoff_sleeps_a_sequence_of_its_own() {
    let sequence = || backoff().build().take(8).collect::<Vec<_>>();
    let (a, b) = (sequence(), sequence());
    assert_ne!(a, b);
    // Within the bounds: 100 ms doubling to 1 s, plus up to as much again.
    for s in [&a, &b] {
        for (i, wait) in s.iter().enumerate() {
            let base = Duration::from_millis(100 * (1 << i)).min(MAX_BACKOFF / 2);
            assert!(*wait >= base && *wait <= 2 * base, "{s:?}");
        }
    }
}

/// The polling helper: reads until ready, says what it waits for every 10 s, stops at its
/// bound with the last thing seen, and keeps the deadline's clock stopped while it sleeps.
#[tokio::test(start_paused = true)]
async fn a_poll_reads_until_ready_and_stops_at_its_bound() {
    let (cluster, _handle) = mock_cluster(false);
    let mut reads = 0;
    let mut said = Vec::new();
    let got = cluster
        .poll(
            Duration::from_secs(60),
            async || {
                reads += 1;
                Ok(if reads == 100 {
                    Poll::Ready(reads)
                } else {
                    Poll::Pending(format!("read {reads}"))
                })
            },
            |waited, last| said.push((waited.as_secs(), last.to_string())),
        )
        .await
        .unwrap();
    assert_eq!(got, Ok(100));
    // 99 sleeps of 250 ms: progress at once, at 10 s and at 20 s.
    assert_eq!(said.len(), 3, "{said:?}");
    assert_eq!((said[0].0, said[1].0, said[2].0), (0, 10, 20));
    assert_eq!(said[0].1, "read 1");
    let start = tokio::time::Instant::now();
    let timed_out = cluster
        .poll(
            Duration::from_secs(3),
            async || Ok(Poll::<()>::Pending("WaitApplied".into())),
            |_, _| {},
        )
        .await
        .unwrap();
    assert_eq!(timed_out, Err("WaitApplied".to_string()));
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    // An error of a read ends the poll with it.
    let err = cluster
        .poll(
            Duration::from_secs(3),
            async || Err::<Poll<()>, _>(Error::Interrupted("SIGTERM")),
            |_, _| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), exit::INTERRUPTED);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_does_not_count_a_polls_sleeps() {
    let deadline = Deadline::new(Duration::from_secs(1));
    let (service, _handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut cluster = Cluster::from_client(Client::new(service, "default"), false);
    cluster.deadline = deadline.clone();
    let start = tokio::time::Instant::now();
    let poll = cluster.poll(
        Duration::from_secs(5),
        async || Ok(Poll::<()>::Pending("not yet".into())),
        |_, _| {},
    );
    tokio::select! {
        r = poll => assert_eq!(r.unwrap(), Err("not yet".to_string())),
        _ = deadline.passed() => panic!("the deadline passed during the poll's sleeps"),
    }
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    // Its second left still runs out afterwards.
    deadline.passed().await;
    assert_eq!(start.elapsed(), Duration::from_secs(6));
}

/// The first retry's WARN says what bounds the retries, with its value, and what comes then.
#[test]
fn the_first_retry_names_the_deadline() {
    assert_eq!(
        first_retry(Some(Duration::from_secs(300))),
        "transient error, retrying (at most 2 s apart) until the run's deadline, \
         DEADLINE_SECONDS=300, runs out; then exit 4. Set DEADLINE_SECONDS to wait less or longer"
    );
    assert!(first_retry(None).contains("deadline, DEADLINE_SECONDS, runs out"));
}

/// An Event the server refuses is no failure of the run, but the run keeps it for the
/// termination message.
#[tokio::test]
async fn a_refused_event_is_kept_for_the_summary() {
    let cfg = crate::config::Config::from_vars([("PHASE".into(), "pre".into())], None).unwrap();
    let (cluster, handle) = mock_cluster(false);
    let server = serve(handle, vec![Ok(status(403, json!({})))]);
    let mut done = Vec::new();
    let mut run = crate::context::Run::new(&cfg, &cluster, &mut done);
    within(run.event(&kubevirt("1"), EventKind::Warning, "Why", "note")).await;
    within(server).await.unwrap();
    let failed = run.event_failures();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].starts_with("Why: "), "{failed:?}");
    assert!(failed[0].contains("403"), "{failed:?}");
}

/// The armed post's reads each get the whole deadline again: a restart moves it on from now.
#[tokio::test(start_paused = true)]
async fn a_restarted_deadline_has_its_whole_bound_again() {
    let d = Deadline::new(Duration::from_secs(10));
    tokio::time::advance(Duration::from_secs(8)).await;
    d.restart();
    tokio::time::advance(Duration::from_secs(8)).await;
    let passed = tokio::time::timeout(Duration::from_millis(1), d.passed()).await;
    assert!(
        passed.is_err(),
        "16 s in, 8 s after the restart: not passed"
    );
    tokio::time::advance(Duration::from_secs(3)).await;
    tokio::time::timeout(Duration::from_millis(1), d.passed())
        .await
        .expect("11 s after the restart: passed");
}

#[test]
fn the_last_error_is_none_until_one_is_set() {
    let last = LastError::default();
    assert_eq!(last.peek(), None);
    assert_eq!(last.get(), "none (a request was still in flight)");
    last.set("get x at y: 503".into());
    assert_eq!(last.peek().as_deref(), Some("get x at y: 503"));
    assert_eq!(last.get(), "get x at y: 503");
    // A clone shares it: `main` keeps one for the deadline's message.
    let other = last.clone();
    other.set("later".into());
    assert_eq!(last.peek().as_deref(), Some("later"));
}

#[test]
fn a_deadline_names_its_bound_and_a_test_clients_has_none() {
    assert_eq!(
        Deadline::new(Duration::from_secs(300)).bound(),
        Some(Duration::from_secs(300))
    );
    assert_eq!(Deadline::default().bound(), None);
}

/// A poll cut short by its bound while a read is in flight says that reads were failing, but
/// only for an error seen during this poll (not one left from before it).
#[tokio::test(start_paused = true)]
async fn a_poll_cut_short_names_only_its_own_failing_reads() {
    let (cluster, _handle) = mock_cluster(false);
    let hang = async |set: Option<&str>| -> Result<Poll<()>, Error> {
        if let Some(e) = set {
            cluster.last_error.set(e.into());
        }
        std::future::pending::<()>().await;
        unreachable!()
    };
    let three_s = Duration::from_secs(3);
    // E1 is from before the second poll: not named there; a new error (E2) is.
    for (set, said) in [
        (Some("E1"), "nothing read yet (reads were failing: E1)"),
        (None, "nothing read yet"),
        (Some("E2"), "nothing read yet (reads were failing: E2)"),
    ] {
        let cut = cluster.poll(three_s, async || hang(set).await, |_, _| {});
        assert_eq!(cut.await.unwrap(), Err(said.into()));
    }
    // A read that says something first, then hangs: that is the last thing seen.
    let mut reads = 0;
    let cut = cluster
        .poll(
            Duration::from_secs(3),
            async || {
                reads += 1;
                if reads == 1 {
                    return Ok(Poll::Pending("WaitApplied".into()));
                }
                hang(Some("E3")).await
            },
            |_, _| {},
        )
        .await
        .unwrap();
    assert_eq!(cut, Err("WaitApplied (reads were failing: E3)".into()));
}

/// A poll whose bound ends during a sleep, or right after a read, returns what it last saw.
#[tokio::test(start_paused = true)]
async fn a_poll_ends_at_its_bound_between_reads() {
    let (cluster, _handle) = mock_cluster(false);
    let start = tokio::time::Instant::now();
    let mut reads = 0;
    let got = cluster
        .poll(
            Duration::from_millis(600),
            async || {
                reads += 1;
                Ok(Poll::<()>::Pending(format!("read {reads}")))
            },
            |_, _| {},
        )
        .await
        .unwrap();
    // Reads at 0, 250 and 500 ms; the last sleep is cut to the 100 ms left.
    assert_eq!(got, Err("read 3".into()));
    assert_eq!(reads, 3);
    assert_eq!(start.elapsed(), Duration::from_millis(600));
    // A read that takes the whole bound: no sleep after it.
    let start = tokio::time::Instant::now();
    let got = cluster
        .poll(
            Duration::from_secs(1),
            async || {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(Poll::<()>::Pending("slow".into()))
            },
            |_, _| {},
        )
        .await
        .unwrap();
    assert!(got.is_err(), "{got:?}");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

fn list_of(kind: &str, items: Value) -> Response<Body> {
    respond(
        200,
        json!({"apiVersion": "harvesterhci.io/v1beta1", "kind": format!("{kind}List"),
               "metadata": {"resourceVersion": "7"}, "items": items}),
    )
}

#[tokio::test(start_paused = true)]
async fn harvesters_lists_give_their_items_none_without_the_resource_and_refusals() {
    let upgrade = json!({"apiVersion": "harvesterhci.io/v1beta1", "kind": "Upgrade",
                         "metadata": {"name": "hvst-upgrade-1", "namespace": "harvester-system"},
                         "status": {"previousVersion": "v1.4.0"}});
    let (cluster, handle) = mock_cluster(false);
    let server = serve(
        handle,
        vec![
            Ok(list_of("Upgrade", json!([upgrade]))),
            Ok(list_of("Upgrade", json!([]))),
            Ok(status(404, json!({}))),
            Ok(status(403, json!({}))),
        ],
    );
    let list = || cluster.list(Kind::Upgrade, Some("harvester-system"), Some("a=b"));
    let items = within(list()).await.unwrap().unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["metadata"]["name"], "hvst-upgrade-1");
    assert_eq!(items[0]["status"]["previousVersion"], "v1.4.0");
    assert_eq!(within(list()).await.unwrap(), Some(vec![]));
    assert_eq!(within(list()).await.unwrap(), None);
    let err = within(list()).await.unwrap_err();
    assert!(
        matches!(&err, Error::Refused { code: 403, subject: Subject::Listed { kind: Kind::Upgrade, namespace }, .. }
            if namespace == "harvester-system"),
        "{err:?}"
    );
    let seen = within(server).await.unwrap();
    assert_eq!(
        seen[0].line,
        "GET /apis/harvesterhci.io/v1beta1/namespaces/harvester-system/upgrades"
    );
    assert!(
        seen[0].query.contains("labelSelector=a%3Db"),
        "{}",
        seen[0].query
    );
    // Consistent: a list from a watch cache that lags etcd could miss an object created just
    // before it (`Cluster::list`).
    assert!(
        !seen[0].query.contains("resourceVersion"),
        "{}",
        seen[0].query
    );
}

#[tokio::test(start_paused = true)]
async fn a_harvester_setting_is_its_value_or_none() {
    let setting = |value: Option<&str>| {
        let mut s = json!({"apiVersion": "harvesterhci.io/v1beta1", "kind": "Setting",
                           "metadata": {"name": "server-version"}});
        if let Some(v) = value {
            s["value"] = json!(v);
        }
        respond(200, s)
    };
    let (cluster, handle) = mock_cluster(false);
    let server = serve(
        handle,
        vec![
            Ok(setting(Some("v1.5.0"))),
            Ok(setting(None)),
            Ok(status(404, json!({}))),
            Ok(status(403, json!({}))),
        ],
    );
    let read = || cluster.harvester_setting("server-version");
    assert_eq!(within(read()).await.unwrap().as_deref(), Some("v1.5.0"));
    assert_eq!(within(read()).await.unwrap(), None);
    assert_eq!(within(read()).await.unwrap(), None);
    let err = within(read()).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Refused {
                code: 403,
                subject: Subject::Listed {
                    kind: Kind::Setting,
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
    let seen = within(server).await.unwrap();
    assert_eq!(
        seen[0].line,
        "GET /apis/harvesterhci.io/v1beta1/settings/server-version"
    );
}

/// A phase's warning: one Warning Event on the KubeVirt CR with its reason and message each
/// time; none without the CR.
#[tokio::test]
async fn a_warning_is_one_warning_event_on_the_kubevirt_cr() {
    let w = crate::warnings::Warning {
        reason: "WhyNot",
        message: "because".into(),
    };
    let (cluster, handle) = mock_cluster(false);
    let server = serve(
        handle,
        vec![Ok(respond(201, json!({}))), Ok(respond(201, json!({})))],
    );
    let made = [
        within(cluster.warn(Some(&kubevirt("1")), Some(&target()), &w)).await,
        within(cluster.warn(Some(&kubevirt("1")), None, &w)).await,
    ];
    assert_eq!(made, [Ok(()), Ok(())]);
    drop(cluster);
    let seen = within(server).await.unwrap();
    // One each, with or without a target to log.
    assert_eq!(seen.len(), 2);
    for s in &seen {
        let e = &s.body;
        assert_eq!(
            (&e["type"], &e["reason"], &e["note"]),
            (&json!("Warning"), &json!("WhyNot"), &json!("because"))
        );
    }
    // Without the CR nothing is sent.
    let (cluster, handle) = mock_cluster(false);
    assert_eq!(
        within(cluster.warn(None, Some(&target()), &w)).await,
        Ok(())
    );
    drop(cluster);
    let mut handle = handle;
    assert!(within(handle.next_request()).await.is_none());
}
