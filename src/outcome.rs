//! What one step of a run came to: written by the phases, read by `summary`, so that neither
//! imports the other.

use serde::Serialize;
use tracing::warn;

use crate::error::Error;
use crate::model::{Kind, Target};
use crate::warnings::{SKIPPED_NOT_FOUND, Warning};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Changed,
    /// A dry run: the server accepted the write (or a release was planned) and kept nothing.
    WouldChange,
    Unchanged,
    /// The object does not exist: step skipped with a warning.
    Missing,
    Disabled,
    NotReached,
    Failed,
}

#[derive(Debug, Clone)]
pub struct Done {
    pub target: Target,
    pub outcome: Outcome,
    pub actions: Vec<String>,
    pub warnings: Vec<Warning>,
}

impl Done {
    /// What was found on `target`, nothing written: its actions.
    pub fn noted(target: Target, actions: Vec<String>) -> Done {
        Done {
            target,
            outcome: Outcome::Unchanged,
            actions,
            warnings: vec![],
        }
    }

    /// A warning on `target` that changed nothing, recorded for the termination message.
    pub fn warned(target: Target, warning: Warning) -> Done {
        Done {
            warnings: vec![warning],
            ..Done::noted(target, vec![])
        }
    }

    /// `when` is empty for `status`, which writes nothing whatever happens.
    pub fn missing(allow_missing: bool, target: Target, when: &str) -> Result<Done, Error> {
        let hint = if target.kind == Kind::KubeVirt {
            "check KUBEVIRT_NAMESPACE and KUBEVIRT_NAME (kubectl get kubevirts -A)"
        } else {
            "check MANAGEDCHART_NAMESPACE and MANAGEDCHART_NAME (kubectl get managedcharts -A); \
             for KubeVirt without Fleet set MANAGEDCHART_NAME= (empty)"
        };
        let when = Some(when).filter(|w| !w.is_empty());
        let when = when.map_or(String::new(), |w| format!("; {w}"));
        if !allow_missing {
            let hint = format!("{hint}, or set ALLOW_MISSING=true to skip it{when}");
            return Err(Error::Missing { target, hint });
        }
        let message = format!("{target} not found: skipped (ALLOW_MISSING=true){when}; {hint}");
        warn!(object = %target, reason = SKIPPED_NOT_FOUND, "{message}");
        let warning = Warning {
            reason: SKIPPED_NOT_FOUND,
            message,
        };
        Ok(Done {
            outcome: Outcome::Missing,
            ..Done::warned(target, warning)
        })
    }
}
