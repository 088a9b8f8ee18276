//! Errors and the exit codes they map to (the Job contract: docs/configuration.md, "Exit codes").

use crate::model::{Kind, Target};
use crate::vocabulary::Refusal;

/// Exit codes. `manifests/` names the permanent ones in each Job's `podFailurePolicy`;
/// `tests/integration/manifests.rs` checks that they agree.
pub mod exit {
    /// Done, including "already so" and a skipped missing object.
    pub const SUCCESS: u8 = 0;
    /// An invalid environment variable or an unusable kubeconfig. Nothing was sent.
    pub const CONFIG: u8 = 2;
    /// Refused for good: 401/403, a missing CRD, an invalid patch, a malformed object or record.
    pub const PERMANENT: u8 = 3;
    /// Transient failures (unreachable, timeouts, 429, 5xx) still failing at the deadline.
    pub const TRANSIENT: u8 = 4;
    /// Stopped by SIGTERM or SIGINT.
    pub const INTERRUPTED: u8 = 5;
    /// An object the phase works on was not found (and `ALLOW_MISSING` is off). Nothing was
    /// written.
    pub const MISSING: u8 = 6;
    /// `post`: the latest Harvester Upgrade's cleanup did not end within
    /// `HARVESTER_CLEANUP_WAIT_SECONDS`. Nothing was written.
    pub const CLEANUP_PENDING: u8 = 7;
    /// Fleet did not apply the phase's ManagedChart change: it reported an error for the new
    /// generation, or `FLEET_WAIT_SECONDS` passed. The writes stand; a rerun cannot fix it.
    pub const FLEET_NOT_APPLIED: u8 = 8;
    /// The armed `post` (`ARM=true`): no upgrade began and ended (cleanup included) within
    /// `ARM_WAIT_SECONDS`. Nothing was written: the suspension stays (turning updates on with
    /// no upgrade seen could start the wave just as the operator starts the upgrade).
    pub const ARMED_BOUND: u8 = 9;
}

/// What a request was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Object(Target),
    /// The cluster-wide list of workload-update migrations (`status`).
    Migrations,
    /// A list of Harvester's objects of `kind` in a namespace.
    Listed {
        kind: Kind,
        namespace: String,
    },
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Object(t) => t.fmt(f),
            Subject::Migrations => write!(f, "{} (all namespaces)", Kind::Migration.plural()),
            Subject::Listed { kind, namespace } => {
                write!(f, "{}.{} in {namespace}", kind.plural(), kind.api_version())
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Malformed(#[from] Refusal),
    #[error("{subject}: refused by the API server (HTTP {code}): {message}")]
    Refused {
        subject: Subject,
        code: u16,
        message: String,
        /// The API server's answer, as kube gave it.
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
    /// The Kubernetes client's configuration (kubeconfig, in-cluster) cannot be used: exit 2,
    /// with the words of [`Error::Config`].
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
    /// `post` waited for Harvester's upgrade cleanup past its bound; the message names the
    /// Upgrade and what to do.
    #[error("{0}")]
    CleanupPending(String),
    /// The armed `post` waited past `ARM_WAIT_SECONDS`; the message says what it saw.
    #[error("{0}")]
    ArmedBound(String),
    /// The writes were made; Fleet has not deployed them (docs/configuration.md, "Exit codes").
    #[error("{target}: written, but Fleet has not applied the change: {message}")]
    FleetNotApplied { target: Target, message: String },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::Kubeconfig { .. } => exit::CONFIG,
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

    /// The object the run failed on, if it failed on one.
    pub fn target(&self) -> Option<&Target> {
        match self {
            Error::Malformed(r) => Some(&r.target),
            Error::Missing { target, .. } => Some(target),
            Error::Refused { subject, .. }
            | Error::NotServed { subject, .. }
            | Error::Client { subject, .. } => match subject {
                Subject::Object(t) => Some(t),
                Subject::Migrations | Subject::Listed { .. } => None,
            },
            _ => None,
        }
    }
}

/// `e` followed by each cause not already in its text, joined by ": ". kube and hyper name only
/// the layer that failed ("client error (Connect)"); the innermost cause says why (connection
/// refused, a DNS failure, a timeout, a certificate).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !c.is_empty() && !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        source = cause.source();
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
