//! The one-line JSON summary for the termination-message path (docs/jobs.md, "For orchestrators").

use serde::Serialize;

use crate::error::Error;
use crate::model::{Target, truncate_bytes};
use crate::outcome::{Done, Outcome};
use crate::vocabulary::{Intent, Phase, Steps};

/// The kubelet reads at most 4096 bytes of a termination message.
pub const MAX_BYTES: usize = 4096;

#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    pub object: String,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub phase: Option<Phase>,
    pub dry_run: bool,
    pub exit_code: u8,
    /// `status`: the report's verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// `pre` and `post`: one row per object (none for `status`, which writes nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRow>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Summary {
    /// One row per object of the phase in its order of writes, a switched-off one too.
    pub fn of_run(
        intent: &Intent,
        dry_run: bool,
        done: &[Done],
        result: &Result<(), Error>,
    ) -> Self {
        let mut all = intent.clone();
        all.steps = Steps::ALL;
        let error = result.as_ref().err();
        let failed = error.and_then(Error::target);
        let row = |target: Target| {
            let mine: Vec<&Done> = done.iter().filter(|d| d.target == target).collect();
            let changed = mine.iter().find(|d| d.outcome != Outcome::Unchanged);
            let writes = intent.steps.writes(target.kind);
            let outcome = match (writes, failed == Some(&target), changed) {
                (false, ..) => Outcome::Disabled,
                (_, true, _) => Outcome::Failed,
                (.., Some(d)) => d.outcome,
                _ if mine.is_empty() => Outcome::NotReached,
                _ => Outcome::Unchanged,
            };
            let actions = mine.iter().flat_map(|d| d.actions.clone()).collect();
            StepRow {
                object: target.to_string(),
                outcome,
                actions,
            }
        };
        // `status`'s warnings are the report's lines, without a reason.
        let warnings = done
            .iter()
            .flat_map(|d| &d.warnings)
            .map(|w| match w.reason {
                "" => w.message.clone(),
                reason => format!("{reason}: {}", w.message),
            });
        Summary {
            phase: Some(intent.phase),
            dry_run,
            exit_code: error.map_or(0, Error::exit_code),
            steps: all.targets().into_iter().map(row).collect(),
            warnings: warnings.collect(),
            error: error.map(Error::to_string),
            verdict: None,
        }
    }

    /// One line of JSON under [`MAX_BYTES`]: the step actions go first, then the texts are cut:
    /// the error halved first, then the verdict (a corrupted record's can be long), then the
    /// warnings, which the orchestrator must not miss (at most 500 bytes each from the start);
    /// each keeps at least its first 64 bytes.
    pub fn to_line(&self) -> String {
        let (mut short, mut cut) = (self.clone(), false);
        loop {
            let line = serde_json::to_string(&short).expect("summary serializes");
            if line.len() < MAX_BYTES {
                return line;
            }
            if !cut {
                cut = true;
                short.steps.iter_mut().for_each(|s| s.actions.clear());
                (short.warnings.iter_mut()).for_each(|w| truncate_bytes(w, 500));
                continue;
            }
            let texts = short.error.iter_mut().chain(&mut short.verdict);
            let Some(t) = texts.chain(&mut short.warnings).find(|t| t.len() > 64) else {
                return line;
            };
            let half = t.len() / 2;
            truncate_bytes(t, half);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_stays_under_4096_bytes() {
        let mut s = Summary {
            phase: Some(Phase::Pre),
            ..Summary::default()
        };
        for (object, action) in [("KubeVirt a/b", "x"), ("ManagedChart c/d", "y")] {
            s.steps.push(StepRow {
                object: object.into(),
                outcome: Outcome::Changed,
                actions: vec![action.repeat(3000)],
            });
        }
        s.error = Some("é".repeat(5000));
        let line = s.to_line();
        assert!(line.len() < MAX_BYTES, "{}", line.len());
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["steps"][1]["outcome"], "changed");
    }

    /// The bounds exactly: a line of 4096 bytes is cut (it must be under), and a text of 64
    /// bytes is never cut.
    #[test]
    fn the_bounds_are_exact() {
        let mut s = Summary {
            phase: Some(Phase::Status),
            ..Summary::default()
        };
        s.error = Some(String::new());
        let base = serde_json::to_string(&s).unwrap().len();
        s.error = Some("e".repeat(MAX_BYTES - base));
        assert_eq!(serde_json::to_string(&s).unwrap().len(), MAX_BYTES);
        assert!(s.to_line().len() < MAX_BYTES);
        s.error = Some("e".repeat(64));
        s.verdict = Some("v".repeat(5000));
        let v: serde_json::Value = serde_json::from_str(&s.to_line()).unwrap();
        assert_eq!(v["error"].as_str().unwrap().len(), 64);
    }

    /// `status` with a corrupted record: its verdict quotes the record, which can be long, and
    /// there may be several long warnings; the line still fits, each text keeps its start, and
    /// the texts are cut in order (error, verdict, warnings) no more than the line needs.
    #[test]
    fn a_long_verdict_and_many_warnings_still_fit() {
        let line = |warnings: usize| {
            let mut s = Summary {
                phase: Some(Phase::Status),
                ..Summary::default()
            };
            s.verdict = Some(format!("REFUSED: {}", "v".repeat(10_000)));
            s.warnings = (0..warnings)
                .map(|i| format!("w{i} {}", "x".repeat(3000)))
                .collect();
            s.error = Some("e".repeat(3000));
            let line = s.to_line();
            assert!(line.len() < MAX_BYTES, "{}", line.len());
            serde_json::from_str::<serde_json::Value>(&line).unwrap()
        };
        let text =
            |v: &serde_json::Value, ptr: &str| v.pointer(ptr).unwrap().as_str().unwrap().len();
        // Four warnings: each keeps its 500 bytes, and the verdict what is left.
        let v = line(4);
        assert!(v["verdict"].as_str().unwrap().starts_with("REFUSED: v"));
        assert!(text(&v, "/verdict") > 1000, "{v}");
        assert!(text(&v, "/error") <= 64, "{v}");
        for i in 0..4 {
            assert_eq!(text(&v, &format!("/warnings/{i}")), 500, "{v}");
        }
        // Twelve: the warnings are cut too, last, and all twelve stay.
        let v = line(12);
        assert_eq!(v["warnings"].as_array().unwrap().len(), 12);
        assert!(v["warnings"][11].as_str().unwrap().starts_with("w11 "));
    }
}
