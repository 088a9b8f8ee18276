//! The one retry layer: transient errors ([`classify`]) retried until the run's deadline.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tracing::warn;

use super::{Cluster, one_line};
use crate::error::{Error, Subject, with_causes};

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
        kube::Error::Api(s) => {
            let bare =
                (s.details.as_ref()).is_none_or(|d| d.causes.is_empty() && d.name.is_empty());
            match s.code {
                409 => Class::Conflict,
                422 if bare => Class::Conflict,
                404 => Class::NotFound,
                429 | 500 | 502 | 503 | 504 => Class::Transient,
                _ => Class::Permanent,
            }
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) if tls_failure(e).is_none() => {
            Class::Transient
        }
        _ => Class::Permanent,
    }
}

/// The TLS reason, if a connection failed because the server's certificate was refused (an
/// unknown authority, a name mismatch, an expired certificate) or ours was: retrying cannot
/// mend that. Found in the error's source chain, whose innermost error is rustls'.
pub fn tls_failure(e: &kube::Error) -> Option<String> {
    const REFUSED: [&str; 3] = [
        "invalid peer certificate",
        "received fatal alert",
        "peer is incompatible",
    ];
    std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .filter(|text| REFUSED.iter().any(|m| text.contains(m)))
        .last()
}

/// The last transient error seen, for the message when the deadline cuts the retries short.
#[derive(Debug, Clone, Default)]
pub struct LastError(Arc<Mutex<Option<String>>>);

impl LastError {
    pub fn set(&self, e: String) {
        *self.0.lock().expect("not poisoned") = Some(e);
    }
    pub fn peek(&self) -> Option<String> {
        self.0.lock().expect("not poisoned").clone()
    }
    pub fn get(&self) -> String {
        (self.peek()).unwrap_or_else(|| "none (a request was still in flight)".into())
    }
}

/// The longest wait between two attempts: a restarted API server is noticed within it.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// 100 ms doubling to half of [`MAX_BACKOFF`]; the jitter adds up to as much again.
pub(super) fn backoff() -> ExponentialBuilder {
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

pub fn first_retry(deadline: Option<Duration>) -> String {
    let value = deadline.map(|d| format!("={}", d.as_secs()));
    let bound = format!("DEADLINE_SECONDS{}", value.unwrap_or_default());
    format!(
        "transient error, retrying (at most 2 s apart) until the run's deadline, {bound}, runs \
         out; then exit 4. Set DEADLINE_SECONDS to wait less or longer"
    )
}

impl Cluster {
    pub(super) async fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, kube::Error>
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
                let message = match self.retried.swap(true, Ordering::Relaxed) {
                    true => "transient error, retrying".into(),
                    false => first_retry(self.deadline.bound()),
                };
                warn!(request = what, error = %e, retry_in_ms = wait_ms, "{message}");
                self.last_error
                    .set(one_line(format!("{what} at {}: {e}", self.server)));
            })
            .await
    }

    pub(super) fn permanent(&self, subject: Subject, e: kube::Error) -> Error {
        if let Some(tls) = tls_failure(&e) {
            return Error::Client {
                subject,
                message: format!("cannot connect to {}: TLS: {tls}", self.server),
                source: Box::new(e),
            };
        }
        match e {
            kube::Error::Api(ref s) => Error::Refused {
                subject,
                code: s.code,
                message: one_line(s.message.clone()),
                source: Box::new(e),
            },
            other => Error::Client {
                subject,
                message: one_line(format!("{} ({})", with_causes(&other), self.server)),
                source: Box::new(other),
            },
        }
    }
}
