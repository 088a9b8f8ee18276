//! Errors and the exit codes they map to (the Job contract, DESIGN §6).

/// Exit codes. `manifests/` names the permanent ones in each Job's `podFailurePolicy`;
/// `tests/manifests.rs` checks that they agree.
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
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{object}: malformed object: {reason}")]
    Malformed { object: String, reason: String },
    #[error("{object}: refused by the API server (HTTP {code}): {message}")]
    Refused {
        object: String,
        code: u16,
        message: String,
    },
    #[error("{object}: {message}")]
    Permanent { object: String, message: String },
    #[error("deadline of {seconds}s exceeded while retrying; last error: {last}")]
    Deadline { seconds: u64, last: String },
    #[error("interrupted by {0}")]
    Interrupted(&'static str),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) => exit::CONFIG,
            Error::Malformed { .. } | Error::Refused { .. } | Error::Permanent { .. } => {
                exit::PERMANENT
            }
            Error::Deadline { .. } => exit::TRANSIENT,
            Error::Interrupted(_) => exit::INTERRUPTED,
        }
    }
}
