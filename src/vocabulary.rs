//! The run's vocabulary, shared by the planners and the phases: plain data; it decides nothing.

use json_patch::Patch;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{Kind, ObjectKey, Target};
use crate::warnings::Warning;

/// Which steps run (docs/design.md, "What each phase does"); [`Steps::writes`] alone says
/// whether an object is written at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    pub kubevirt: bool,
    pub values: bool,
    pub compare: bool,
}

impl Steps {
    pub const ALL: Steps = Steps {
        kubevirt: true,
        values: true,
        compare: true,
    };

    pub fn writes(&self, kind: Kind) -> bool {
        match kind {
            Kind::KubeVirt => self.kubevirt,
            Kind::ManagedChart => self.values || self.compare,
            _ => false,
        }
    }
}

/// The objects' names. `chart: None` is plain KubeVirt without Fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub kubevirt: ObjectKey,
    pub chart: Option<ObjectKey>,
}

impl Keys {
    pub fn target(&self, kind: Kind) -> Option<Target> {
        match kind {
            Kind::KubeVirt => Some(Target::new(kind, &self.kubevirt)),
            Kind::ManagedChart => self.chart.as_ref().map(|k| Target::new(kind, k)),
            _ => None,
        }
    }
}

/// What to do: everything a plan depends on besides the objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub phase: Phase,
    pub steps: Steps,
    pub keys: Keys,
    /// The methods `post` applies to our own `[]` when every record is lost.
    pub fallback: Option<Vec<String>>,
}

impl Intent {
    /// The objects whose steps are on, in the phase's order of writes: `pre` the ManagedChart
    /// first, so the values Helm would apply agree with the CR before the CR is touched; `post`
    /// the reverse.
    pub fn targets(&self) -> Vec<Target> {
        let order = match self.phase {
            Phase::Pre => [Kind::ManagedChart, Kind::KubeVirt],
            Phase::Post => [Kind::KubeVirt, Kind::ManagedChart],
            Phase::Status | Phase::Watch => return Vec::new(),
        };
        order
            .into_iter()
            .filter(|&k| self.steps.writes(k))
            .filter_map(|k| self.keys.target(k))
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Pre,
    Post,
    Status,
    /// The resident guard: runs `pre` and `post` itself, around every upgrade.
    Watch,
}

impl std::fmt::Display for Phase {
    /// As the `PHASE` variable spells it (serde's `lowercase`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format!("{self:?}").to_lowercase())
    }
}

/// The two kinds of write on an object: `pre`'s suspension or `post`'s restore, with the
/// records; `post`'s last write, which drops our `managedFields` claim (`plan::ownership`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Change,
    Release,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub target: Target,
    pub write: Write,
}

/// The objects as last read or written; `None`: not read (step off) or not found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objects {
    pub kubevirt: Option<Value>,
    pub chart: Option<Value>,
    /// `pre`: the CR's `[]` is another suspender's (`plan::suspenders`); the original to record.
    pub foreign: Option<ForeignOriginal>,
}

/// The original `pre` records over another suspender's `[]`, and why, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct ForeignOriginal {
    /// A `plan::records::ValueRecord`, as JSON (this layer knows no records).
    pub record: Value,
    pub line: String,
}

impl Objects {
    pub fn get(&self, kind: Kind) -> Option<&Value> {
        match kind {
            Kind::KubeVirt => self.kubevirt.as_ref(),
            Kind::ManagedChart => self.chart.as_ref(),
            _ => None,
        }
    }

    pub fn set(&mut self, kind: Kind, obj: Option<Value>) {
        match kind {
            Kind::KubeVirt => self.kubevirt = obj,
            Kind::ManagedChart => self.chart = obj,
            _ => {}
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{target}: malformed object: {reason}")]
pub struct Refusal {
    pub target: Target,
    pub reason: Malformed,
}

/// An object that cannot be planned for. Nothing is written when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// A conditional patch (or none), what it does, and what the operator must hear about.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub patch: Option<Patch>,
    pub actions: Vec<String>,
    pub warnings: Vec<Warning>,
}
