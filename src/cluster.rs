//! All I/O with the API server: read, conditional write, retry, and the Event.
//!
//! One retry layer: kube's own 429/503/504 retry is switched off (`default_retry = false`) and
//! transient errors are retried here with `backon`, bounded only by the run's deadline for
//! requests ([`Deadline`]), which `main` enforces around the whole run; its clock stops while
//! [`Cluster::poll`] sleeps between two reads, and a wait has a bound of its own. Conflicts
//! (409, or 422 from the failed resourceVersion `test`) are answered by one fresh read and a new
//! plan.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use json_patch::Patch as JsonPatch;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use serde_json::Value;
use tracing::{debug, warn};

use crate::error::{Error, Subject, with_causes};
use crate::model::{FIELD_MANAGER, Kind, Target};
use crate::plan::{Plan, Refusal};

/// What a conditional write came to.
#[derive(Debug)]
pub enum Written {
    /// The patch was applied (or, in a dry run, accepted); the object as the server returned it.
    Changed { plan: Plan, object: Value },
    /// Nothing to do: the object (as last read) already is as planned.
    Unchanged { plan: Plan, object: Value },
    /// The object was deleted under us.
    Missing,
}

/// How an API error is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    Transient,
    Conflict,
    NotFound,
    Permanent,
}

/// 429, 5xx and connection-level failures are transient; 409 and the failed `test` (422 with
/// no details) are conflicts; everything else the server says is final.
pub fn classify(e: &kube::Error) -> Class {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => Class::Conflict,
            422 if s
                .details
                .as_ref()
                .is_none_or(|d| d.causes.is_empty() && d.name.is_empty()) =>
            {
                Class::Conflict
            }
            404 => Class::NotFound,
            429 | 500 | 502 | 503 | 504 => Class::Transient,
            _ => Class::Permanent,
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) if tls_failure(e).is_some() => {
            Class::Permanent
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => Class::Transient,
        _ => Class::Permanent,
    }
}

/// The TLS reason, if a connection failed because the server's certificate was refused (an
/// unknown authority, a name mismatch, an expired certificate) or ours was: retrying cannot
/// mend that. Found in the error's source chain, whose innermost error is rustls'.
pub fn tls_failure(e: &kube::Error) -> Option<String> {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut found = None;
    while let Some(err) = source {
        let text = err.to_string();
        if [
            "invalid peer certificate",
            "received fatal alert",
            "peer is incompatible",
        ]
        .iter()
        .any(|m| text.contains(m))
        {
            found = Some(text);
        }
        source = err.source();
    }
    found
}

/// The last transient error seen, for the message when the deadline cuts the retries short.
#[derive(Debug, Clone, Default)]
pub struct LastError(Arc<Mutex<Option<String>>>);

impl LastError {
    pub fn set(&self, e: String) {
        *self.0.lock().expect("not poisoned") = Some(e);
    }
    /// The last transient error, if any was seen.
    pub fn peek(&self) -> Option<String> {
        self.0.lock().expect("not poisoned").clone()
    }
    pub fn get(&self) -> String {
        self.0
            .lock()
            .expect("not poisoned")
            .clone()
            .unwrap_or_else(|| "none (a request was still in flight)".into())
    }
}

pub struct Cluster {
    client: Client,
    /// The API server's URL, for messages.
    server: String,
    dry_run: bool,
    last_error: LastError,
    deadline: Deadline,
    /// Whether a retry was logged yet.
    retried: AtomicBool,
    /// The Events that could not be made, for the termination message's warnings.
    event_failures: Mutex<Vec<String>>,
}

/// `DEADLINE_SECONDS`: the bound of the run's requests and their retries. Its clock stops while a
/// [`Cluster::poll`] sleeps between reads: a wait's time is bounded by the wait's own bound.
#[derive(Debug, Clone, Default)]
pub struct Deadline(Arc<Mutex<Clock>>);

#[derive(Debug, Default)]
struct Clock {
    /// `DEADLINE_SECONDS`, named by the first retry's WARN line.
    bound: Option<Duration>,
    /// When it passes (`None`: never, as for a test client).
    at: Option<tokio::time::Instant>,
    /// Since when its clock is stopped.
    stopped: Option<tokio::time::Instant>,
}

impl Deadline {
    pub fn new(bound: Duration) -> Self {
        Self(Arc::new(Mutex::new(Clock {
            bound: Some(bound),
            at: Some(tokio::time::Instant::now() + bound),
            stopped: None,
        })))
    }

    /// Its bound (`None`: a test client's, which never passes).
    pub fn bound(&self) -> Option<Duration> {
        self.0.lock().expect("not poisoned").bound
    }

    /// When it passes, unless its clock is stopped.
    fn at(&self) -> Option<tokio::time::Instant> {
        let c = self.0.lock().expect("not poisoned");
        c.at.filter(|_| c.stopped.is_none())
    }

    /// Returns when the deadline has passed (never while its clock is stopped).
    pub async fn passed(&self) {
        loop {
            match self.at() {
                Some(at) if at <= tokio::time::Instant::now() => return,
                Some(at) => tokio::time::sleep_until(at).await,
                None => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// Sleeps `d` with the clock stopped; it moves on by the time slept.
    async fn sleep_apart(&self, d: Duration) {
        struct Resume<'a>(&'a Deadline);
        impl Drop for Resume<'_> {
            fn drop(&mut self) {
                let mut c = (self.0).0.lock().expect("not poisoned");
                if let (Some(at), Some(since)) = (c.at, c.stopped.take()) {
                    c.at = Some(at + since.elapsed());
                }
            }
        }
        self.0.lock().expect("not poisoned").stopped = Some(tokio::time::Instant::now());
        let _resume = Resume(self);
        tokio::time::sleep(d).await;
    }
}

/// What one read of a [`Cluster::poll`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll<T> {
    /// Done: the poll returns this.
    Ready(T),
    /// Not yet: what is seen, for the progress lines and the message when the bound passes.
    Pending(String),
}

/// How long a poll sleeps between two reads.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How often a poll says what it is waiting for.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The longest wait between two attempts: a restarted API server is noticed within it.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// 100 ms doubling to half of [`MAX_BACKOFF`]; the jitter adds up to as much again.
fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(MAX_BACKOFF / 2)
        .with_factor(2.0)
        .with_jitter()
        .with_jitter_seed(jitter_seed())
        .without_max_times()
}

/// A seed of its own for each backoff. Without its `std` feature, backon seeds every process
/// alike, and Jobs that fail together would retry in lockstep. `RandomState`'s keys come from
/// the OS once per thread and change with each `new()`; the pid and the clock only add to that.
fn jitter_seed() -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    std::hash::RandomState::new().hash_one((std::process::id(), now))
}

impl Cluster {
    /// A client from KUBECONFIG (or ~/.kube/config), else the in-cluster config, with kube's own
    /// retry layer off.
    pub async fn connect(
        dry_run: bool,
        last_error: LastError,
        deadline: Deadline,
    ) -> Result<Self, Error> {
        let mut config = Config::infer().await.map_err(|e| {
            // kube quotes a path with `Debug` inside its own quotes: '"/x"'. Once is enough.
            let causes = with_causes(&e).replace("'\"", "'").replace("\"'", "'");
            Error::Config(one_line(format!(
                "cannot load Kubernetes client configuration (KUBECONFIG, ~/.kube/config, or in-cluster): {causes}"
            )))
        })?;
        config.default_retry = false;
        let server = config.cluster_url.to_string();
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(30));
        config.write_timeout = Some(Duration::from_secs(30));
        let client = Client::try_from(config).map_err(|e| {
            Error::Config(one_line(format!(
                "cannot build the Kubernetes client: {}",
                with_causes(&e)
            )))
        })?;
        Ok(Self {
            client,
            server,
            dry_run,
            last_error,
            deadline,
            retried: AtomicBool::new(false),
            event_failures: Mutex::default(),
        })
    }

    pub fn from_client(client: Client, dry_run: bool) -> Self {
        Self {
            client,
            server: "(test client)".into(),
            dry_run,
            last_error: LastError::default(),
            deadline: Deadline::default(),
            retried: AtomicBool::new(false),
            event_failures: Mutex::default(),
        }
    }

    /// The one polling helper (for Fleet's status now, for a list of objects as well): calls
    /// `read` (whose requests go through the retry layer like any other) every
    /// [`POLL_INTERVAL`] until it returns [`Poll::Ready`], for at most `bound`. At the first
    /// "not yet" and then every [`PROGRESS_EVERY`] it hands `progress` the time waited and what
    /// the last read saw. The run's deadline does not count the sleeps between reads, only the
    /// reads; SIGTERM stops a poll as it stops everything (`main` drops the run).
    /// `Ok(Err(last))`: the bound passed, with what was last seen (and a read in flight then,
    /// cut short, says so).
    pub async fn poll<T>(
        &self,
        bound: Duration,
        mut read: impl AsyncFnMut() -> Result<Poll<T>, Error>,
        mut progress: impl FnMut(Duration, &str),
    ) -> Result<Result<T, String>, Error> {
        let start = tokio::time::Instant::now();
        let end = start + bound;
        let mut said: Option<tokio::time::Instant> = None;
        let mut last = "nothing read yet".to_string();
        let errors_before = self.last_error.peek();
        loop {
            match tokio::time::timeout_at(end, read()).await {
                Ok(Ok(Poll::Ready(t))) => return Ok(Ok(t)),
                Ok(Ok(Poll::Pending(seen))) => last = seen,
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    let retrying = match self.last_error.peek() {
                        Some(e) if Some(&e) != errors_before.as_ref() => {
                            format!(" (reads were failing: {e})")
                        }
                        _ => String::new(),
                    };
                    return Ok(Err(format!("{last}{retrying}")));
                }
            }
            let now = tokio::time::Instant::now();
            if now >= end {
                return Ok(Err(last));
            }
            if said.is_none_or(|t| now - t >= PROGRESS_EVERY) {
                said = Some(now);
                progress(now - start, &last);
            }
            self.deadline
                .sleep_apart(POLL_INTERVAL.min(end - now))
                .await;
            if tokio::time::Instant::now() >= end {
                return Ok(Err(last));
            }
        }
    }

    fn api(&self, target: &Target) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &target.key.namespace,
            &target.kind.resource(),
        )
    }

    /// Runs one request, retrying transient failures until the run's deadline drops it.
    async fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, kube::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        f.retry(backoff())
            .sleep(tokio::time::sleep)
            .when(|e| classify(e) == Class::Transient)
            .notify(|e, wait| {
                let e = with_causes(e);
                let wait_ms = wait.as_millis() as u64;
                if self.retried.swap(true, Ordering::Relaxed) {
                    warn!(request = what, error = %e, retry_in_ms = wait_ms, "transient error, retrying");
                } else {
                    warn!(request = what, error = %e, retry_in_ms = wait_ms, "{}", first_retry(self.deadline.bound()));
                }
                self.last_error.set(one_line(format!("{what} at {}: {e}", self.server)));
            })
            .await
    }

    /// The object's JSON, or `None` if it does not exist. A 404 for the resource itself (no CRD)
    /// is a permanent error.
    pub async fn get(&self, target: &Target) -> Result<Option<Value>, Error> {
        let api = self.api(target);
        let what = format!("get {target}");
        match self.call(&what, || api.get(&target.key.name)).await {
            Ok(obj) => Ok(Some(serde_json::to_value(obj).expect("objects serialize"))),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                if s.details
                    .as_ref()
                    .is_some_and(|d| d.name == target.key.name)
                {
                    Ok(None)
                } else {
                    Err(Error::NotServed {
                        subject: Subject::Object(target.clone()),
                        plural: target.kind.plural(),
                        hint: match target.kind {
                            Kind::ManagedChart => {
                                "; for KubeVirt without Rancher/Fleet, set MANAGEDCHART_NAME= (empty)"
                            }
                            _ => "",
                        },
                        message: s.message.trim().to_string(),
                    })
                }
            }
            Err(e) => Err(self.permanent(Subject::Object(target.clone()), e)),
        }
    }

    /// Plans against `current` and writes the plan conditionally; on a conflict, reads again and
    /// plans again, until the plan applies or there is nothing to do.
    pub async fn converge(
        &self,
        target: &Target,
        mut current: Value,
        plan: impl Fn(&Value) -> Result<Plan, Refusal>,
    ) -> Result<Written, Error> {
        let mut conflicts = backoff().with_min_delay(Duration::from_millis(10)).build();
        loop {
            let p = plan(&current)?;
            let Some(patch) = p.patch.clone() else {
                return Ok(Written::Unchanged {
                    plan: p,
                    object: current,
                });
            };
            match self.patch(target, &patch).await {
                Ok(object) => return Ok(Written::Changed { plan: p, object }),
                Err(e) if classify(&e) == Class::NotFound => return Ok(Written::Missing),
                Err(e) if classify(&e) == Class::Conflict => {
                    // Back off before the fresh read, never between read and write: the plan
                    // must go out while its resourceVersion is still current.
                    tokio::time::sleep(conflicts.next().unwrap_or_default()).await;
                    let before = rv(&current).map(str::to_string);
                    current = match self.get(target).await? {
                        Some(obj) => obj,
                        None => return Ok(Written::Missing),
                    };
                    // A failed patch on an unchanged object is not a conflict: it would fail forever.
                    if rv(&current) == before.as_deref() {
                        return Err(self.permanent(Subject::Object(target.clone()), e));
                    }
                    debug!(object = %target, resource_version = rv(&current), "conflict: read again");
                }
                Err(e) => return Err(self.permanent(Subject::Object(target.clone()), e)),
            }
        }
    }

    async fn patch(&self, target: &Target, patch: &JsonPatch) -> Result<Value, kube::Error> {
        let api = self.api(target);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            dry_run: self.dry_run,
            ..Default::default()
        };
        let what = format!("patch {target}");
        let obj = self
            .call(&what, || async {
                api.patch(&target.key.name, &params, &Patch::<()>::Json(patch.clone()))
                    .await
            })
            .await?;
        Ok(serde_json::to_value(obj).expect("objects serialize"))
    }

    /// The error for a request that failed for good.
    fn permanent(&self, subject: Subject, e: kube::Error) -> Error {
        if let Some(tls) = tls_failure(&e) {
            return Error::Client {
                subject,
                message: format!("cannot connect to {}: TLS: {tls}", self.server),
            };
        }
        match e {
            kube::Error::Api(s) => Error::Refused {
                subject,
                code: s.code,
                message: one_line(s.message),
            },
            other => Error::Client {
                subject,
                message: one_line(format!("{} ({})", with_causes(&other), self.server)),
            },
        }
    }

    /// Migrations whose names start with `prefix`, in all namespaces (`status`, and `pre`'s
    /// warning of those under way).
    pub async fn list_migrations(&self, prefix: &str) -> Result<Vec<Value>, Error> {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &Kind::Migration.resource());
        let mut out = Vec::new();
        // From the watch cache, as Harvester's lists (see there): a report and a warning, where a
        // few ms of staleness mean nothing and a consistent list waited ~55 ms. kube drops the
        // resourceVersion of a list with a limit, and the cache answers in one page anyway.
        let mut params = ListParams::default().match_any();
        loop {
            let page = self
                .call("list virtualmachineinstancemigrations", || {
                    api.list(&params)
                })
                .await
                .map_err(|e| self.permanent(Subject::Migrations, e))?;
            out.extend(
                page.items
                    .into_iter()
                    .filter(|m| {
                        m.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(prefix))
                    })
                    .map(|m| serde_json::to_value(m).expect("objects serialize")),
            );
            match page.metadata.continue_ {
                // A continued list names no resourceVersion (the token holds it).
                Some(c) if !c.is_empty() => {
                    params = ListParams::default().limit(500).continue_token(&c)
                }
                _ => return Ok(out),
            }
        }
    }

    /// Harvester's objects of `kind` in `namespace` (with a label selector, if any); `None` when
    /// the resource is not served (not a Harvester cluster). One page: there are a handful.
    pub async fn list_harvester(
        &self,
        kind: Kind,
        namespace: &str,
        selector: Option<&str>,
    ) -> Result<Option<Vec<Value>>, Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource());
        // From the API server's watch cache (resourceVersion 0): a consistent list waits up to
        // ~100 ms for the cache to catch up with etcd; a few ms of staleness mean nothing here
        // (the wait reads again, and Harvester's steps are minutes apart).
        let mut params = ListParams::default().match_any();
        if let Some(s) = selector {
            params = params.labels(s);
        }
        let subject = || Subject::Listed {
            kind,
            namespace: namespace.to_string(),
        };
        let what = format!("list {}", subject());
        match self.call(&what, || api.list(&params)).await {
            Ok(list) => Ok(Some(
                list.items
                    .into_iter()
                    .map(|o| serde_json::to_value(o).expect("objects serialize"))
                    .collect(),
            )),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(self.permanent(subject(), e)),
        }
    }

    /// The `value` of Harvester's cluster-scoped `Setting` `name`; `None` when it, or the
    /// resource, is not there (not a Harvester cluster).
    pub async fn harvester_setting(&self, name: &str) -> Result<Option<String>, Error> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &Kind::Setting.resource());
        let subject = || Subject::Listed {
            kind: Kind::Setting,
            namespace: "(cluster)".into(),
        };
        match self
            .call(&format!("get {} {name}", subject()), || api.get(name))
            .await
        {
            Ok(o) => Ok(o
                .data
                .get("value")
                .and_then(Value::as_str)
                .map(str::to_string)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(self.permanent(subject(), e)),
        }
    }

    /// An Event (events.k8s.io/v1) about the KubeVirt CR, so `kubectl describe kubevirt` tells
    /// the story. Best effort: a failure is logged, never fatal.
    pub async fn event(&self, kubevirt: &Value, kind: EventKind, reason: &str, note: &str) {
        if self.dry_run {
            return;
        }
        let meta = &kubevirt["metadata"];
        let text = |k: &str| meta[k].as_str().map(str::to_string);
        let namespace = text("namespace").unwrap_or_default();
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                // client-go's recorder names Events `<object>.<unix nanos in hex>`.
                name: Some(format!(
                    "{}.{:x}",
                    text("name").unwrap_or_default(),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(reason.into()),
            reason: Some(reason.into()),
            // The API server takes at most 1 kB of note.
            note: Some({
                let mut note = note.to_string();
                crate::model::truncate_bytes(&mut note, 1024);
                note
            }),
            type_: Some(kind.as_str().into()),
            reporting_controller: Some(FIELD_MANAGER.into()),
            reporting_instance: Some(
                std::env::var("HOSTNAME").unwrap_or_else(|_| FIELD_MANAGER.into()),
            ),
            regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(Kind::KubeVirt.api_version().into()),
                kind: Some(Kind::KubeVirt.name().into()),
                name: text("name"),
                namespace: text("namespace"),
                uid: text("uid"),
                resource_version: text("resourceVersion"),
                ..Default::default()
            }),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        // One attempt: an Event is not worth delaying the upgrade for.
        if let Err(e) = api.create(&params, &event).await {
            let e = with_causes(&e);
            warn!(error = %e, reason, "could not record the Event on the KubeVirt CR");
            let mut failures = self.event_failures.lock().expect("not poisoned");
            failures.push(format!("{reason}: {e}"));
        }
    }

    /// The Events that could not be made so far (`REASON: error`), in order.
    pub fn event_failures(&self) -> Vec<String> {
        self.event_failures.lock().expect("not poisoned").clone()
    }
}

/// An Event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

impl EventKind {
    fn as_str(self) -> &'static str {
        match self {
            EventKind::Normal => "Normal",
            EventKind::Warning => "Warning",
        }
    }
}

/// The first retry's WARN message: what bounds the retries, and what happens then.
pub fn first_retry(deadline: Option<Duration>) -> String {
    let bound = match deadline {
        Some(d) => format!("DEADLINE_SECONDS={}", d.as_secs()),
        None => "DEADLINE_SECONDS".to_string(),
    };
    format!(
        "transient error, retrying (at most 2 s apart) until the run's deadline, {bound}, runs \
         out; then exit 4. Set DEADLINE_SECONDS to wait less or longer"
    )
}

fn one_line(s: String) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn rv(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests;
