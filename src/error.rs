//! Errors and the exit codes they map to (the Job contract: docs/configuration.md, "Exit codes").

use crate::model::{Kind, Target};
use crate::vocabulary::Refusal;

/// Exit codes (docs/configuration.md). Each Job's `podFailurePolicy` names the permanent ones
/// (`tests/integration/manifests.rs` checks that they agree).
pub mod exit {
    pub const SUCCESS: u8 = 0;
    /// An invalid environment variable or an unusable kubeconfig. Nothing was sent.
    pub const CONFIG: u8 = 2;
    /// Refused for good: 401/403, a missing CRD, an invalid patch, a malformed object or record.
    pub const PERMANENT: u8 = 3;
    /// Transient failures (unreachable, timeouts, 429, 5xx) still failing at the deadline.
    pub const TRANSIENT: u8 = 4;
    pub const INTERRUPTED: u8 = 5;
    pub const MISSING: u8 = 6;
    pub const CLEANUP_PENDING: u8 = 7;
    /// Fleet did not apply the ManagedChart change: the writes stand; a rerun cannot fix it.
    pub const FLEET_NOT_APPLIED: u8 = 8;
    /// The armed `post` saw no upgrade end in time: the suspension stays (turning updates on
    /// could start the wave just as the operator starts the upgrade).
    pub const ARMED_BOUND: u8 = 9;
}

/// What a request was about, as the error names it (thiserror writes its `Display`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Subject {
    #[error("{0}")]
    Object(Target),
    #[error("{} (all namespaces)", Kind::Migration.plural())]
    Migrations,
    #[error("{}.{} in {namespace}", kind.plural(), kind.api_version())]
    Listed { kind: Kind, namespace: String },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Malformed(#[from] Refusal),
    #[error("{subject}: refused by the API server (HTTP {code}): {message}")]
    Refused {
        subject: Subject,
        code: u16,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(
        "{subject}: the resource {plural} is not served (is its CRD installed?{hint}): {message}"
    )]
    NotServed {
        subject: Subject,
        plural: &'static str,
        /// What to do about it, with its leading separator.
        hint: &'static str,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{target} not found: {hint}")]
    Missing { target: Target, hint: String },
    /// A client-side failure that retrying cannot mend (a response that does not decode, ...).
    #[error("{subject}: {message}")]
    Client {
        subject: Subject,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The Kubernetes client's configuration (kubeconfig, in-cluster) cannot be used: exit 2.
    #[error("invalid configuration: {message}")]
    Kubeconfig {
        message: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot write the report to stdout: {0}")]
    Output(String),
    #[error("cannot install the signal handlers: {0}")]
    Signals(String),
    #[error("deadline of {seconds}s exceeded while retrying; last error: {last}")]
    Deadline { seconds: u64, last: String },
    #[error("interrupted by {0}")]
    Interrupted(&'static str),
    #[error("{0}")]
    CleanupPending(String),
    #[error("{0}")]
    ArmedBound(String),
    #[error("{target}: written, but Fleet has not applied the change: {message}")]
    FleetNotApplied { target: Target, message: String },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            // Every variant named: a new one must choose its documented exit code.
            Error::Kubeconfig { .. } => exit::CONFIG,
            Error::Malformed(_)
            | Error::Refused { .. }
            | Error::NotServed { .. }
            | Error::Client { .. }
            | Error::Output(_)
            | Error::Signals(_) => exit::PERMANENT,
            Error::Deadline { .. } => exit::TRANSIENT,
            Error::Interrupted(_) => exit::INTERRUPTED,
            Error::Missing { .. } => exit::MISSING,
            Error::CleanupPending(_) => exit::CLEANUP_PENDING,
            Error::FleetNotApplied { .. } => exit::FLEET_NOT_APPLIED,
            Error::ArmedBound(_) => exit::ARMED_BOUND,
        }
    }

    pub fn target(&self) -> Option<&Target> {
        match self {
            Error::Malformed(r) => Some(&r.target),
            Error::Missing { target, .. } => Some(target),
            Error::Refused { subject, .. }
            | Error::NotServed { subject, .. }
            | Error::Client { subject, .. } => match subject {
                Subject::Object(t) => Some(t),
                _ => None,
            },
            _ => None,
        }
    }
}

/// kube and hyper name only the layer that failed ("client error (Connect)"); the innermost
/// cause says why (connection refused, a DNS failure, a timeout, a certificate).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    for cause in std::iter::successors(e.source(), |c| c.source()) {
        let c = cause.to_string();
        if !c.is_empty() && !text.contains(&c) {
            text = format!("{text}: {c}");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    }

    #[test]
    fn causes_are_kept_once_each() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let io_text = io.to_string();
        let e = Layer {
            text: "client error (Connect)",
            source: Some(Box::new(Layer {
                // Already in the outer text: not repeated.
                text: "Connect",
                source: Some(Box::new(Layer {
                    text: "tcp connect error",
                    source: Some(Box::new(io)),
                })),
            })),
        };
        assert_eq!(
            with_causes(&e),
            format!("client error (Connect): tcp connect error: {io_text}")
        );
        let alone = Layer {
            text: "alone",
            source: None,
        };
        assert_eq!(with_causes(&alone), "alone");
    }
}
