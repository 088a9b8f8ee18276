//! `status`'s judgement: the one-line verdict that answers the operator's question first
//! (suspended or not, what `post` will do), and the verdict while content of ours is corrupted.

use serde_json::Value;

use super::data::{ChartReport, KubeVirtReport};
use crate::model::{FIELD_MANAGER, KUBEVIRT_COPY, KUBEVIRT_RECORD};
use crate::plan::kubevirt::Source;
use crate::plan::records::describe;

/// The verdict while content of ours is corrupted or malformed: `pre` and `post` refuse (exit 3)
/// and write nothing. It names the problem (with the commands that recover, which the reader
/// puts in it) and what the other object's copy of the original says.
pub fn refusal(k: &KubeVirtReport, chart: Option<&ChartReport>) -> Option<String> {
    // A ManagedChart that could not be read (its CRD not served) refuses nothing by itself.
    let chart = chart.filter(|c| c.found);
    let chart_problems = chart.map_or(&[][..], |c| c.problems.as_slice());
    let (object, problem) = match (k.problems.first(), chart_problems.first()) {
        (Some(p), _) => (&k.object, p),
        (None, Some(p)) => (&chart.expect("a chart problem").object, p),
        (None, None) => return None,
    };
    let other = if k.problems.iter().any(|p| p.contains(KUBEVIRT_RECORD)) {
        match chart.and_then(|c| c.kubevirt_copy.as_ref()) {
            Some(copy) => format!(
                " The ManagedChart's copy says the original was {}.",
                describe(&copy.original())
            ),
            None => " There is no copy of the original on the ManagedChart.".into(),
        }
    } else if chart_problems.iter().any(|p| p.contains(KUBEVIRT_COPY)) {
        match &k.saved_original {
            Some(r) => format!(
                " The KubeVirt CR's record says the original was {}.",
                describe(&r.original())
            ),
            None => " The KubeVirt CR has no record of the original.".into(),
        }
    } else {
        String::new()
    };
    let more = k.problems.len() + chart_problems.len() - 1;
    let more = if more > 0 {
        format!(" ({more} more PROBLEM below)")
    } else {
        String::new()
    };
    Some(format!(
        "REFUSED: pre and post exit 3 and write nothing until this is fixed: {object}: \
         {problem}.{other}{more}"
    ))
}

/// The operator's question, answered first.
pub fn verdict(k: &KubeVirtReport, source: Option<Source>, will_restore: &Option<Value>) -> String {
    if !k.found {
        return format!(
            "NOT FOUND: {} (check KUBEVIRT_NAMESPACE and KUBEVIRT_NAME)",
            k.object
        );
    }
    let methods = describe(&k.workload_update_methods);
    let since = k
        .methods_owners
        .iter()
        .find(|o| o.owner.manager == FIELD_MANAGER)
        .and_then(|o| o.owner.time.as_deref())
        .map_or(String::new(), |t| format!(" since {t}"));
    let off = k
        .workload_update_methods
        .as_ref()
        .is_none_or(|m| m.as_array().is_some_and(Vec::is_empty));
    match source {
        Some(Source::CrRecord) => format!(
            "SUSPENDED{since} by pre; post will restore {} (from the CR's record)",
            describe(will_restore)
        ),
        Some(Source::ChartCopy) => format!(
            "SUSPENDED{since}, no record on the CR; post will restore {} (from the ManagedChart's copy)",
            describe(will_restore)
        ),
        Some(Source::Fallback) => format!(
            "SUSPENDED{since}, record lost; post will apply the fallback {}",
            describe(will_restore)
        ),
        Some(Source::ValuesChoice) => format!(
            "SUSPENDED{since} by pre; the values override was changed while suspended, so post will \
             set {} on both (what Fleet renders)",
            describe(will_restore)
        ),
        Some(Source::BlindRestore) => format!(
            "ATTENTION: a hard-coded {methods} was written over the recorded original (Harvester's \
             upgrade cleanup); post will put {} back",
            describe(will_restore)
        ),
        Some(Source::AlreadyRestored) => format!(
            "NOT SUSPENDED: methods back at the recorded original {methods}; post will only drop \
             its records and claims"
        ),
        Some(Source::LaterChoice) => format!(
            "ATTENTION: methods changed to {methods} while suspended; post will keep them and drop the record"
        ),
        _ if off && k.workload_update_methods.is_some() => {
            "ATTENTION: updates off ([]) with no record; post will not restore them".into()
        }
        _ if off => "NOT SUSPENDED: methods absent (no automated updates)".into(),
        _ => format!("NOT SUSPENDED: automated updates on ({methods})"),
    }
}
