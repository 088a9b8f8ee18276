//! What one step of a run came to: written by `runner`, read by `summary` (and `main`), so
//! neither of those imports the other.

use serde::Serialize;

use crate::model::Target;
use crate::warnings::Warning;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Written.
    Changed,
    /// A dry run: the server accepted the write (or, for a release, it was planned) and kept
    /// nothing.
    WouldChange,
    /// Already as wanted: nothing written.
    Unchanged,
    /// The object does not exist: step skipped with a warning.
    Missing,
    /// Switched off by configuration.
    Disabled,
    /// The run stopped before this step.
    NotReached,
    Failed,
}

/// What one step came to. `main` makes the summary from these and the error, if any.
#[derive(Debug, Clone)]
pub struct Done {
    pub target: Target,
    pub outcome: Outcome,
    pub actions: Vec<String>,
    pub warnings: Vec<Warning>,
}

impl Done {
    /// A warning on `target` that changed nothing, recorded for the termination message.
    pub fn warned(target: Target, warning: Warning) -> Done {
        Done {
            target,
            outcome: Outcome::Unchanged,
            actions: vec![],
            warnings: vec![warning],
        }
    }
}
