//! Fleet's view of the ManagedChart, and what a phase waits for (docs/design.md, "Waiting for
//! Fleet"); `fleet_wait` polls.
//!
//! Rancher copies the Bundle's status onto the ManagedChart as it is
//! (`pkg/controllers/provisioningv2/managedchart/managedchart.go`, `status.BundleStatus =
//! bundle.Status`), so `observedGeneration` is the **Bundle's** generation, which only a
//! change of the ManagedChart's spec moves ([`changes_deployed_spec`]). A `Ready: True` whose
//! observedGeneration has not moved past the one before the write is the previous generation's
//! (rancher/fleet#5219: `summary` and `Ready` have been seen not to change during an update).

use serde::Serialize;
use serde_json::Value;

use super::fields::{ChartRead, FleetStatus};
use super::json::{annotation, lookup};
use super::ownership::{Owner, update_claims};
use super::records::{describe, methods};
use crate::model::{CHART_RECORDS, METHODS_FIELD, Target, VALUES_PATH};
use crate::vocabulary::Phase;
use crate::warnings::{NOT_APPLIED, PAUSED, Warning};

/// What Fleet says of the ManagedChart's current spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "said", rename_all = "camelCase")]
pub enum Fleet {
    /// Deployed; the Bundle's generation, if Fleet gave one.
    Applied(Option<i64>),
    Waiting(String),
    Failed(String),
    /// `spec.paused: true`: Fleet deploys nothing until the chart is unpaused.
    Paused,
    /// No Fleet status at all: no controller ever wrote one.
    NoStatus,
}

/// Fleet's states whose `Ready: False` only means "not yet" (rancher/fleet's docs, "Cluster and
/// Bundle state"); any other (`ErrApplied`, `Modified`, a message naming no state) is an error.
const NOT_YET: &[&str] = &[
    "WaitApplied",
    "Pending",
    "NotReady",
    "OutOfSync",
    "WaitCheckIn",
];

/// The Bundle's generation Fleet has seen, as copied onto the ManagedChart.
pub fn observed_generation(chart: &Value) -> Option<i64> {
    ChartRead::of(chart).fleet().observed_generation
}

pub fn has_status(chart: &Value) -> bool {
    ChartRead::of(chart).has_status()
}

/// The state a Fleet message starts with (`WaitApplied(1) [Cluster fleet-local/local]`).
fn leading_state(message: &str) -> &str {
    let end = message.find(|c: char| !c.is_ascii_alphanumeric());
    &message[..end.unwrap_or(message.len())]
}

/// What Fleet says, in one line: its display state, the Ready condition's message, and the
/// messages of the resources it names as not ready (the API server's words on a rejected apply).
pub fn said(chart: &Value) -> String {
    said_of(&ChartRead::of(chart).fleet())
}

fn said_of(fleet: &FleetStatus) -> String {
    let ready = fleet.condition("Ready");
    let message = ready.map_or("", |(_, m)| m);
    let state = Some(fleet.display.state.as_str()).filter(|s| !s.is_empty());
    let state = state.map(|s| format!("state {s}"));
    let ready = ready.map(|(status, m)| {
        let status = if status.is_empty() { "Unknown" } else { status };
        match m {
            "" => format!("Ready {status}"),
            m => format!("Ready {status}: {m}"),
        }
    });
    let resources = fleet.summary.non_ready_resources.iter().flatten();
    let resources = resources.filter_map(|r| {
        let m = Some(r.message.as_str()).filter(|m| !m.is_empty() && !message.contains(m))?;
        let name = Some(r.name.as_str()).filter(|n| !n.is_empty());
        Some(format!("{}: {m}", name.unwrap_or("a resource")))
    });
    let mut parts: Vec<String> = state.into_iter().chain(ready).chain(resources).collect();
    parts.push(match fleet.observed_generation {
        Some(g) => format!("observedGeneration {g}"),
        None => "no observedGeneration".into(),
    });
    parts.join("; ")
}

/// `before`: the observedGeneration read before our first write of the deployed spec, which
/// Fleet must move past; `None` (no such write: a rerun) judges the current generation.
pub fn fleet_view(chart: &Value, before: Option<i64>) -> Fleet {
    let read = ChartRead::of(chart);
    if read.paused() {
        return Fleet::Paused;
    }
    if !read.has_status() {
        return Fleet::NoStatus;
    }
    let fleet = read.fleet();
    // Rancher's own error: it could not make the Bundle from the ManagedChart (wrangler's
    // generating handler sets `Defined: False` with it). No new generation will come.
    if let Some(("False", message)) = fleet.condition("Defined") {
        let message = format!("Rancher cannot make the Bundle (Defined False): {message}");
        return Fleet::Failed(message);
    }
    let seen = fleet.observed_generation;
    if let Some(b) = before
        && seen.is_none_or(|g| g <= b)
    {
        return Fleet::Waiting(format!(
            "Fleet has not taken the change up yet (observedGeneration {}, and {b} before the \
             write; what it says is of the previous generation: {})",
            seen.map_or("none".into(), |g| g.to_string()),
            said_of(&fleet)
        ));
    }
    let summary = &fleet.summary;
    let ready = fleet.condition("Ready");
    let error_message = ready.is_some_and(|(s, m)| {
        s == "False" && !m.is_empty() && !NOT_YET.contains(&leading_state(m))
    });
    if summary.err_applied > Some(0) || summary.modified > Some(0) || error_message {
        return Fleet::Failed(said_of(&fleet));
    }
    let desired = summary.desired_ready;
    let ready_now = summary.ready;
    let unavailable = fleet.unavailable.unwrap_or(0);
    match ready {
        Some(("True", _)) if desired == ready_now && unavailable == 0 => Fleet::Applied(seen),
        Some(("True", _)) => Fleet::Waiting(format!(
            "Ready True but {} of {} ready, {unavailable} unavailable; {}",
            ready_now.unwrap_or(0),
            desired.unwrap_or(0),
            said_of(&fleet)
        )),
        _ => Fleet::Waiting(said_of(&fleet)),
    }
}

/// Whether a write changed what Rancher copies into the Bundle (anything under `spec`), so that
/// Fleet deploys a new generation. An annotation-only write (a record) or a `managedFields`-only
/// one (the release) does not, and is never waited for.
pub fn changes_deployed_spec(before: &Value, after: &Value) -> bool {
    before.get("spec") != after.get("spec")
}

/// Whether any record of ours is on the ManagedChart (`pre` has suspended it).
pub fn records_on_chart(chart: &Value) -> bool {
    CHART_RECORDS.iter().any(|k| annotation(chart, k).is_some())
}

/// Another manager's `Update` claim on the KubeVirt CR's methods that Fleet's next deploy will
/// conflict with: its value is not the one the ManagedChart's values render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    /// The CR's methods now (the value the claim holds).
    pub value: Option<Value>,
    /// The values override of the methods; `None`: no override, the chart's default is deployed.
    pub rendered: Option<Value>,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let manager = &self.manager;
        let value = describe(&self.value);
        let what = match &self.rendered {
            Some(r) => format!("Fleet's deploy of {r} will conflict with it"),
            None => format!(
                "the ManagedChart's values set no override, so Fleet's deploy of the chart's \
                 default will conflict with it unless that default is {value}"
            ),
        };
        write!(
            f,
            "{manager} holds an Update claim on {METHODS_FIELD} of the KubeVirt CR (value {value}): \
             {what} (Helm: conflict with \"{manager}\"), and the chart stays WaitApplied. To release \
             it, run pre and then post once more (the cycle releases the claim and keeps the \
             value until the values decide), or set the ManagedChart's values override to \
             {value}",
        )
    }
}

/// The claims that Fleet's deploy of the ManagedChart's values will conflict with. Without an
/// override any claim may conflict with the chart's default, and is named, with that said.
pub fn conflicts(kubevirt: &Value, chart: &Value) -> Vec<Conflict> {
    let Ok(value) = methods(kubevirt) else {
        return Vec::new();
    };
    let rendered = lookup(chart, VALUES_PATH).ok().flatten().cloned();
    if rendered.is_some() && rendered == value {
        return Vec::new();
    }
    let conflict = |o: Owner| Conflict {
        manager: o.manager,
        value: value.clone(),
        rendered: rendered.clone(),
    };
    update_claims(kubevirt).map(conflict).collect()
}

/// The claim that Fleet's deploy of the ManagedChart's current spec waits on: Fleet has not
/// applied it, and another manager's `Update` claim holds the methods at a value the values do
/// not render (Fleet's agent deploys with Helm, server-side and without force, and a conflict
/// keeps the Bundle `WaitApplied`: its message never names the claim). `status`, the resident
/// guard's Event and its metric name it.
pub fn deploy_blocked_by(kubevirt: &Value, chart: &Value) -> Option<Conflict> {
    let waiting = matches!(
        fleet_view(chart, None),
        Fleet::Waiting(_) | Fleet::Failed(_)
    );
    waiting
        .then(|| conflicts(kubevirt, chart))
        .and_then(|c| c.into_iter().next())
}

/// Whether the wait for Fleet waits, decided from the ManagedChart as read at the start of the
/// phase and as the phase left it (docs/design.md, "Waiting for Fleet").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// No wait; the log line says why.
    No(&'static str),
    /// No wait, and a warning.
    Warn(Warning),
    /// Wait until Fleet applies a generation past `after` (`None`: the current generation).
    For { after: Option<i64> },
}

/// Whether to wait: a phase waits when it changed the deployed spec, or, a `pre` that wrote
/// nothing (a rerun), when our records are on the chart, so that a Complete `pre` always means
/// "Fleet has applied the suspension". A `post` that writes nothing cannot tell an earlier
/// run's restore from anyone else's change (or from a `pre` that never wrote): it does not wait,
/// but says so if Fleet has not applied the spec.
pub fn wait_for(phase: Phase, target: &Target, before: &Value, chart: &Value) -> Wait {
    let wrote = changes_deployed_spec(before, chart);
    let pre_rerun = phase == Phase::Pre && records_on_chart(chart);
    if !wrote && !pre_rerun {
        return match fleet_view(chart, None) {
            Fleet::Waiting(said) | Fleet::Failed(said) => Wait::Warn(Warning {
                reason: NOT_APPLIED,
                message: format!(
                    "Fleet has not applied {target}'s current spec ({said}); this run wrote \
                     nothing to it, so it does not wait: an earlier run's change or someone \
                     else's is not deployed yet"
                ),
            }),
            _ => Wait::No("the deployed spec was not changed: nothing for Fleet to apply; no wait"),
        };
    }
    let after = wrote.then(|| observed_generation(before).unwrap_or(0));
    match fleet_view(chart, after) {
        Fleet::Paused => Wait::Warn(Warning {
            reason: PAUSED,
            message: format!(
                "{target} is paused (spec.paused: true): Fleet deploys the change when the chart \
                 is unpaused; Harvester refuses to start an upgrade until it is Ready again"
            ),
        }),
        Fleet::NoStatus if !has_status(before) => {
            Wait::No("no Fleet status on the ManagedChart (no controller reports on it): no wait")
        }
        Fleet::Applied(_) if !wrote => {
            Wait::No("Fleet has applied the current generation: no wait")
        }
        _ => Wait::For { after },
    }
}

/// One look during the wait at the ManagedChart (`None`: deleted): `Ok` a final verdict, `Err`
/// what Fleet says while it is not done.
pub fn poll_view(now: Option<&Value>, after: Option<i64>) -> Result<Fleet, String> {
    match now.map(|now| fleet_view(now, after)) {
        None => Ok(Fleet::Failed("the ManagedChart was deleted".into())),
        Some(Fleet::Waiting(said)) => Err(said),
        Some(Fleet::NoStatus) => Err("no Fleet status".into()),
        Some(verdict) => Ok(verdict),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    Applied(String),
    Paused(Warning),
    /// Not applied (exit 8): the error's message.
    NotApplied(String),
}

/// `polled` is `Err` when FLEET_WAIT_SECONDS (`bound`) passed; the first of `conflicts` is named
/// as the cause.
pub fn waited(
    target: &Target,
    polled: Result<Fleet, String>,
    bound: u64,
    took: f64,
    conflicts: &[Conflict],
) -> Waited {
    let cause = |c: &Conflict| format!("; the cause the guard sees: {c}");
    let cause = conflicts.first().map_or(String::new(), cause);
    match polled {
        Ok(Fleet::Applied(generation)) => {
            let generation =
                generation.map_or(String::new(), |g| format!(" (Bundle generation {g})"));
            Waited::Applied(format!(
                "Fleet applied the change{generation} {took:.1} s after the write"
            ))
        }
        Ok(Fleet::Paused) => Waited::Paused(Warning {
            reason: PAUSED,
            message: format!(
                "{target} was paused while waiting: Fleet deploys the change when it is unpaused"
            ),
        }),
        Ok(Fleet::Failed(said)) => Waited::NotApplied(format!(
            "Fleet reports an error for the new generation: {said}{cause}"
        )),
        Ok(other) => unreachable!("the poll returns a final verdict: {other:?}"),
        Err(last) => Waited::NotApplied(format!(
            "not applied within FLEET_WAIT_SECONDS={bound}; Fleet last said: {last}{cause}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same, from a planned patch: does any of its operations write under `/spec`?
    fn patch_changes_deployed_spec(patch: &json_patch::Patch) -> bool {
        let under_spec = |p: &str| p == "/spec" || p.starts_with("/spec/");
        patch.0.iter().any(|op| {
            use json_patch::PatchOperation as Op;
            match op {
                Op::Test(_) => false,
                Op::Add(o) => under_spec(o.path.as_str()),
                Op::Remove(o) => under_spec(o.path.as_str()),
                Op::Replace(o) => under_spec(o.path.as_str()),
                Op::Move(o) => under_spec(o.path.as_str()) || under_spec(o.from.as_str()),
                Op::Copy(o) => under_spec(o.path.as_str()),
            }
        })
    }

    use crate::plan::testing::*;

    /// A ManagedChart with the status Rancher copies from the Bundle.
    fn with_status(gen_: i64, ready: &str, message: &str, summary: Value) -> Value {
        let mut c = chart(json!({}), None);
        let mut s = json!({"desiredReady": 1, "ready": if ready == "True" {1} else {0}});
        merge(&mut s, &summary);
        c["status"] = json!({
            "observedGeneration": gen_,
            "unavailable": 0,
            "display": {"state": leading_state(message).to_string()},
            "summary": s,
            "conditions": [
                {"type": "Defined", "status": "True"},
                {"type": "Ready", "status": ready, "message": message},
            ],
        });
        c
    }

    fn merge(into: &mut Value, from: &Value) {
        if let (Some(a), Some(b)) = (into.as_object_mut(), from.as_object()) {
            for (k, v) in b {
                a.insert(k.clone(), v.clone());
            }
        }
    }

    const WAIT: &str = "WaitApplied(1) [Cluster fleet-local/local]";
    const ERR: &str = "ErrApplied(1) [Cluster fleet-local/local: server-side apply failed for object harvester-system/kubevirt: Unsupported value: \"Bogus\"]";

    #[test]
    fn ready_for_the_new_generation_is_applied() {
        let c = with_status(5, "True", "", json!({}));
        assert_eq!(fleet_view(&c, Some(4)), Fleet::Applied(Some(5)));
        assert_eq!(fleet_view(&c, None), Fleet::Applied(Some(5)));
    }

    #[test]
    fn a_ready_true_of_the_previous_generation_is_not_taken() {
        // rancher/fleet#5219: Ready True left over from before the write.
        for seen in [3, 4] {
            let c = with_status(seen, "True", "", json!({}));
            match fleet_view(&c, Some(4)) {
                Fleet::Waiting(s) => assert!(s.contains("not taken the change up"), "{s}"),
                other => panic!("{other:?}"),
            }
        }
        // Even an error of the previous generation is not ours.
        let c = with_status(4, "False", ERR, json!({"errApplied": 1}));
        assert!(matches!(fleet_view(&c, Some(4)), Fleet::Waiting(_)));
        // No observedGeneration at all: not moved either.
        let mut c = with_status(5, "True", "", json!({}));
        c["status"]
            .as_object_mut()
            .unwrap()
            .remove("observedGeneration");
        assert!(matches!(fleet_view(&c, Some(4)), Fleet::Waiting(_)));
        assert_eq!(fleet_view(&c, None), Fleet::Applied(None));
    }

    #[test]
    fn wait_applied_is_waiting_with_fleets_words() {
        let c = with_status(5, "False", WAIT, json!({"waitApplied": 1}));
        match fleet_view(&c, Some(4)) {
            Fleet::Waiting(s) => {
                assert!(s.contains(WAIT) && s.contains("state WaitApplied"), "{s}");
                assert!(s.contains("observedGeneration 5"), "{s}");
            }
            other => panic!("{other:?}"),
        }
        for m in [
            "NotReady(1) [Cluster fleet-local/local]",
            "OutOfSync(1) [Cluster fleet-local/local]",
            "Pending(1)",
            "",
        ] {
            let c = with_status(5, "False", m, json!({}));
            assert!(matches!(fleet_view(&c, Some(4)), Fleet::Waiting(_)), "{m}");
        }
        // Ready with something not ready or unavailable: not yet.
        let c = with_status(5, "True", "", json!({"ready": 0}));
        assert!(matches!(fleet_view(&c, Some(4)), Fleet::Waiting(_)));
        let mut c = with_status(5, "True", "", json!({}));
        c["status"]["unavailable"] = json!(1);
        assert!(matches!(fleet_view(&c, Some(4)), Fleet::Waiting(_)));
        // A status with no Ready condition yet.
        let mut c = with_status(5, "True", "", json!({}));
        c["status"]["conditions"] = json!([]);
        assert!(matches!(fleet_view(&c, Some(4)), Fleet::Waiting(_)));
    }

    #[test]
    fn errors_of_the_new_generation_fail_with_the_servers_message() {
        let mut c = with_status(5, "False", ERR, json!({"errApplied": 1}));
        c["status"]["summary"]["nonReadyResources"] = json!([
            {"name": "mcc-harvester", "bundleState": "ErrApplied",
             "message": "server-side apply failed for object harvester-system/kubevirt: Unsupported value: \"Bogus\""}]);
        match fleet_view(&c, Some(4)) {
            Fleet::Failed(s) => {
                assert!(s.contains("Unsupported value: \"Bogus\""), "{s}");
                // The resource's message is already in Ready's: said once.
                assert_eq!(s.matches("Unsupported value").count(), 1, "{s}");
            }
            other => panic!("{other:?}"),
        }
        // Only in the summary: still named.
        let mut c = with_status(5, "False", "", json!({"errApplied": 1}));
        c["status"]["summary"]["nonReadyResources"] =
            json!([{"name": "mcc-harvester", "message": "boom"}]);
        match fleet_view(&c, Some(4)) {
            Fleet::Failed(s) => assert!(s.contains("mcc-harvester: boom"), "{s}"),
            other => panic!("{other:?}"),
        }
        for (m, summary) in [
            (
                "Modified(1) [Cluster fleet-local/local; kubevirt.kubevirt.io harvester-system/kubevirt modified]",
                json!({"modified": 1}),
            ),
            (ERR, json!({})),
            ("chart harvester not found", json!({})),
        ] {
            let c = with_status(5, "False", m, summary);
            assert!(matches!(fleet_view(&c, Some(4)), Fleet::Failed(_)), "{m}");
        }
        // Rancher's Defined False: no generation will come, fail whatever the generation.
        let mut c = with_status(4, "True", "", json!({}));
        c["status"]["conditions"][0] =
            json!({"type": "Defined", "status": "False", "message": "no chart"});
        match fleet_view(&c, Some(4)) {
            Fleet::Failed(s) => assert!(s.contains("(Defined False): no chart"), "{s}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn paused_and_statusless_charts_are_said_so() {
        let mut c = with_status(5, "False", WAIT, json!({}));
        c["spec"]["paused"] = json!(true);
        assert_eq!(fleet_view(&c, Some(4)), Fleet::Paused);
        let mut bare = chart(json!({}), None);
        assert_eq!(fleet_view(&bare, Some(4)), Fleet::NoStatus);
        bare["status"] = json!({});
        assert_eq!(fleet_view(&bare, None), Fleet::NoStatus);
        bare["spec"]["paused"] = json!(false);
        assert_eq!(fleet_view(&bare, None), Fleet::NoStatus);
    }

    #[test]
    fn only_spec_writes_make_a_new_generation() {
        let c0 = chart(json!({}), Some(json!([longhorn_entry()])));
        // pre: values and comparePatches, with the records: a spec change.
        let pre = chart_pre(&c0, &kv(), &Steps::ALL, None).unwrap();
        let c1 = apply(&c0, &pre);
        assert!(changes_deployed_spec(&c0, &c1));
        assert!(patch_changes_deployed_spec(pre.patch.as_ref().unwrap()));
        // A second pre: nothing; a record alone: annotations only.
        assert_eq!(
            chart_pre(&c1, &kv(), &Steps::ALL, None).unwrap().patch,
            None
        );
        let mut rec = c0.clone();
        rec["metadata"]["annotations"] = json!({"a": "b"});
        assert!(!changes_deployed_spec(&c0, &rec));
        let ops: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/spec/values", "value": {}},
            {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
            {"op": "remove", "path": "/metadata/managedFields/1"},
            {"op": "replace", "path": "/metadata/managedFields/0/fieldsV1", "value": {}},
            {"op": "add", "path": "/specials", "value": 1},
        ]))
        .unwrap();
        assert!(!patch_changes_deployed_spec(&ops));
        for op in [
            json!({"op": "replace", "path": "/spec/paused", "value": true}),
            json!({"op": "add", "path": "/spec/version", "value": "1.7"}),
            json!({"op": "remove", "path": "/spec/diff"}),
            json!({"op": "move", "from": "/spec/a", "path": "/metadata/b"}),
            json!({"op": "copy", "from": "/metadata/a", "path": "/spec/b"}),
            json!({"op": "replace", "path": "/spec", "value": {}}),
        ] {
            let p: json_patch::Patch = serde_json::from_value(json!([op])).unwrap();
            assert!(patch_changes_deployed_spec(&p), "{op}");
        }
    }

    #[test]
    fn a_claim_on_another_value_is_a_conflict_and_named() {
        let mut kv_obj = kubevirt(Some(json!(["LiveMigrate", "Evict"])));
        kv_obj["metadata"]["managedFields"] = json!([
            entry("fleetagent", "Apply", methods_fields()),
            entry("kubectl-edit", "Update", methods_fields()),
            entry(FIELD_MANAGER, "Update", methods_fields()),
        ]);
        let values = |m: Value| {
            chart(
                json!({"kubevirt": {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": m}}}}),
                None,
            )
        };
        let c = conflicts(&kv_obj, &values(json!([])));
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].manager, "kubectl-edit");
        let text = c[0].to_string();
        for part in [
            "kubectl-edit holds an Update claim",
            "conflict with \"kubectl-edit\"",
            "run pre and then post once more",
            "[\"LiveMigrate\",\"Evict\"]",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        // The values render the claim's value: no conflict.
        assert!(conflicts(&kv_obj, &values(json!(["LiveMigrate", "Evict"]))).is_empty());
        // No override: named, with the chart's default as the condition.
        let c = conflicts(&kv_obj, &chart(json!({}), None));
        assert!(
            c[0].to_string().contains("unless that default is"),
            "{}",
            c[0]
        );
        // Appliers and our own claim are no conflict.
        kv_obj["metadata"]["managedFields"] = json!([
            entry("fleetagent", "Apply", methods_fields()),
            entry(FIELD_MANAGER, "Update", methods_fields()),
        ]);
        assert!(conflicts(&kv_obj, &values(json!([]))).is_empty());
    }

    #[test]
    fn a_deploy_waiting_with_a_conflicting_claim_is_blocked_by_it() {
        // The add-on's PreRun: `[]` by a merge patch, as upgrade-toolkit; the chart renders the
        // default (no override) or our override.
        let mut kv_obj = kubevirt(Some(json!([])));
        kv_obj["metadata"]["managedFields"] = json!([
            entry("helm", "Apply", methods_fields()),
            entry("upgrade-toolkit", "Update", methods_fields()),
        ]);
        let with_values = |mut c: Value, values: Value| {
            c["spec"]["values"] = values;
            c
        };
        let waiting = with_status(5, "False", WAIT, json!({"waitApplied": 1}));
        let blocked = deploy_blocked_by(&kv_obj, &waiting).expect("blocked");
        assert_eq!(blocked.manager, "upgrade-toolkit");
        assert_eq!(blocked.rendered, None);
        // Applied: the claim will meet the next deploy, but nothing waits on it now.
        let applied = with_status(5, "True", "", json!({}));
        assert_eq!(deploy_blocked_by(&kv_obj, &applied), None);
        // The guard's override renders the claim's value: the deploy goes through.
        let ours = json!({"kubevirt": {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": []}}}});
        assert_eq!(
            deploy_blocked_by(&kv_obj, &with_values(waiting.clone(), ours)),
            None
        );
        // No claim but the chart's own apply: waiting is only waiting.
        kv_obj["metadata"]["managedFields"] = json!([entry("helm", "Apply", methods_fields())]);
        assert_eq!(deploy_blocked_by(&kv_obj, &waiting), None);
    }

    #[test]
    fn records_on_the_chart_are_seen() {
        let c0 = chart(json!({}), None);
        assert!(!records_on_chart(&c0));
        assert!(records_on_chart(&pre_chart(&c0)));
        assert!(!records_on_chart(&post_chart(&pre_chart(&c0))));
    }

    fn mc() -> Target {
        Target::new(crate::model::Kind::ManagedChart, &kv())
    }

    fn reason(w: &Wait) -> &'static str {
        match w {
            Wait::Warn(w) => w.reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_write_of_the_spec_waits_past_the_generation_before_it() {
        let before = with_status(4, "True", "", json!({}));
        let after = pre_chart(&before);
        for phase in [Phase::Pre, Phase::Post] {
            assert_eq!(
                wait_for(phase, &mc(), &before, &after),
                Wait::For { after: Some(4) }
            );
        }
        // No observedGeneration before the write: any generation Fleet reports is new.
        let mut before = before;
        before["status"]
            .as_object_mut()
            .unwrap()
            .remove("observedGeneration");
        let after = pre_chart(&before);
        assert_eq!(
            wait_for(Phase::Pre, &mc(), &before, &after),
            Wait::For { after: Some(0) }
        );
        // Fleet's status gone after the write, though it was there before: still waited for.
        let mut gone = pre_chart(&with_status(4, "True", "", json!({})));
        gone.as_object_mut().unwrap().remove("status");
        assert_eq!(
            wait_for(
                Phase::Post,
                &mc(),
                &with_status(4, "True", "", json!({})),
                &gone
            ),
            Wait::For { after: Some(4) }
        );
    }

    #[test]
    fn a_phase_that_wrote_nothing_waits_only_for_pres_records() {
        // post, nothing written: no wait, a warning only if Fleet has not applied the spec.
        let applied = with_status(5, "True", "", json!({}));
        match wait_for(Phase::Post, &mc(), &applied, &applied) {
            Wait::No(why) => assert!(why.contains("not changed"), "{why}"),
            other => panic!("{other:?}"),
        }
        for (ready, message) in [("False", WAIT), ("False", ERR)] {
            let c = with_status(5, ready, message, json!({}));
            let w = wait_for(Phase::Post, &mc(), &c, &c);
            assert_eq!(reason(&w), NOT_APPLIED);
            let Wait::Warn(w) = w else { unreachable!() };
            assert!(
                w.message.contains("this run wrote nothing"),
                "{}",
                w.message
            );
            assert!(w.message.contains(&mc().to_string()), "{}", w.message);
        }
        // pre, nothing written, our records on the chart (a rerun): waits for the current
        // generation, unless Fleet has applied it.
        let rerun = pre_chart(&with_status(5, "True", "", json!({})));
        match wait_for(Phase::Pre, &mc(), &rerun, &rerun) {
            Wait::No(why) => assert!(why.contains("applied the current generation"), "{why}"),
            other => panic!("{other:?}"),
        }
        let waiting = pre_chart(&with_status(5, "False", WAIT, json!({})));
        assert_eq!(
            wait_for(Phase::Pre, &mc(), &waiting, &waiting),
            Wait::For { after: None }
        );
        // The same chart at post (nothing written): a warning, no wait.
        assert_eq!(
            reason(&wait_for(Phase::Post, &mc(), &waiting, &waiting)),
            NOT_APPLIED
        );
        // pre, nothing written, no records: as post.
        let bare = with_status(5, "False", WAIT, json!({}));
        assert_eq!(
            reason(&wait_for(Phase::Pre, &mc(), &bare, &bare)),
            NOT_APPLIED
        );
    }

    #[test]
    fn a_paused_or_statusless_chart_is_not_waited_for() {
        let before = with_status(4, "True", "", json!({}));
        let mut after = pre_chart(&before);
        after["spec"]["paused"] = json!(true);
        let w = wait_for(Phase::Pre, &mc(), &before, &after);
        assert_eq!(reason(&w), PAUSED);
        let Wait::Warn(w) = w else { unreachable!() };
        assert!(w.message.contains("spec.paused: true"), "{}", w.message);
        // No controller ever reported on the chart: no wait.
        let bare = chart(json!({}), None);
        match wait_for(Phase::Pre, &mc(), &bare, &pre_chart(&bare)) {
            Wait::No(why) => assert!(why.contains("no Fleet status"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_look_during_the_wait_is_final_or_says_what_fleet_says() {
        assert_eq!(
            poll_view(None, Some(4)),
            Ok(Fleet::Failed("the ManagedChart was deleted".into()))
        );
        let applied = with_status(5, "True", "", json!({}));
        assert_eq!(
            poll_view(Some(&applied), Some(4)),
            Ok(Fleet::Applied(Some(5)))
        );
        let waiting = with_status(5, "False", WAIT, json!({}));
        assert_eq!(
            poll_view(Some(&waiting), Some(4)),
            Err(match fleet_view(&waiting, Some(4)) {
                Fleet::Waiting(said) => said,
                other => panic!("{other:?}"),
            })
        );
        let bare = chart(json!({}), None);
        assert_eq!(poll_view(Some(&bare), None), Err("no Fleet status".into()));
        let failed = with_status(5, "False", ERR, json!({"errApplied": 1}));
        assert!(matches!(
            poll_view(Some(&failed), Some(4)),
            Ok(Fleet::Failed(_))
        ));
        let mut paused = waiting.clone();
        paused["spec"]["paused"] = json!(true);
        assert_eq!(poll_view(Some(&paused), Some(4)), Ok(Fleet::Paused));
    }

    #[test]
    fn the_end_of_the_wait_names_the_generation_the_bound_and_the_cause() {
        assert_eq!(
            waited(&mc(), Ok(Fleet::Applied(Some(7))), 30, 1.26, &[]),
            Waited::Applied(
                "Fleet applied the change (Bundle generation 7) 1.3 s after the write".into()
            )
        );
        assert_eq!(
            waited(&mc(), Ok(Fleet::Applied(None)), 30, 0.0, &[]),
            Waited::Applied("Fleet applied the change 0.0 s after the write".into())
        );
        match waited(&mc(), Ok(Fleet::Paused), 30, 0.0, &[]) {
            Waited::Paused(w) => {
                assert_eq!(w.reason, PAUSED);
                assert!(
                    w.message.starts_with(&format!("{} was paused", mc())),
                    "{}",
                    w.message
                );
            }
            other => panic!("{other:?}"),
        }
        let conflict = Conflict {
            manager: "kubectl-edit".into(),
            value: Some(json!(["LiveMigrate"])),
            rendered: None,
        };
        let cause = format!("; the cause the guard sees: {conflict}");
        assert_eq!(
            waited(&mc(), Ok(Fleet::Failed("boom".into())), 30, 0.0, &[]),
            Waited::NotApplied("Fleet reports an error for the new generation: boom".into())
        );
        assert_eq!(
            waited(
                &mc(),
                Ok(Fleet::Failed("boom".into())),
                30,
                0.0,
                std::slice::from_ref(&conflict)
            ),
            Waited::NotApplied(format!(
                "Fleet reports an error for the new generation: boom{cause}"
            ))
        );
        assert_eq!(
            waited(
                &mc(),
                Err("WaitApplied".into()),
                30,
                30.0,
                &[conflict.clone(), conflict]
            ),
            Waited::NotApplied(format!(
                "not applied within FLEET_WAIT_SECONDS=30; Fleet last said: WaitApplied{cause}"
            ))
        );
    }

    fn status_strategy() -> impl Strategy<Value = Value> {
        let state = prop::sample::select(vec![
            "WaitApplied",
            "ErrApplied",
            "Modified",
            "NotReady",
            "OutOfSync",
            "Pending",
            "Ready",
            "",
        ]);
        (
            proptest::option::of(0i64..8),
            prop::sample::select(vec!["True", "False", "Unknown", ""]),
            state,
            0i64..2,
            0i64..2,
            0i64..2,
            0i64..2,
            0i64..2,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(og, ready, state, rdy, err, modified, unavailable, desired, paused, defined)| {
                    let mut c = chart(json!({}), None);
                    c["spec"]["paused"] = json!(paused);
                    let message = if state.is_empty() { String::new() } else { format!("{state}(1) [Cluster fleet-local/local]") };
                    c["status"] = json!({
                        "unavailable": unavailable,
                        "summary": {"desiredReady": desired, "ready": rdy, "errApplied": err, "modified": modified},
                        "conditions": [
                            {"type": "Defined", "status": if defined {"True"} else {"False"}},
                            {"type": "Ready", "status": ready, "message": message},
                        ],
                    });
                    if let Some(g) = og {
                        c["status"]["observedGeneration"] = json!(g);
                    }
                    c
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Every ManagedChart write of a full run (pre, a rerun, post with its release): the
        /// planned patch and the objects before and after it agree on whether the deployed spec
        /// changed; the records-only and release writes never change it.
        #[test]
        fn the_patch_and_the_objects_agree_on_a_new_generation(
            kv0 in kubevirt_strategy(),
            chart0 in chart_strategy(),
        ) {
            let i_pre = intent(Phase::Pre);
            let i_post = intent(Phase::Post);
            let start = Objects { kubevirt: Some(kv0), chart: Some(chart0), foreign: None };
            let after_pre = run_phase(Phase::Pre, &start);
            for (i, objects) in [(&i_pre, &start), (&i_pre, &after_pre), (&i_post, &after_pre)] {
                let mut now = objects.clone();
                for step in steps(i) {
                    let Some(plan) = plan_step(i, &step, &now).unwrap() else { continue };
                    let obj = now.get(step.target.kind).unwrap().clone();
                    let next = apply(&obj, &plan);
                    if step.target.kind == Kind::ManagedChart {
                        let by_patch = plan.patch.as_ref().is_some_and(patch_changes_deployed_spec);
                        prop_assert_eq!(by_patch, changes_deployed_spec(&obj, &next));
                        if step.write == Write::Release {
                            prop_assert!(!by_patch, "a release is managedFields only");
                        }
                    }
                    now.set(step.target.kind, Some(next));
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Every status, every generation before: applied only when Fleet says so of a newer
        /// generation; errors only when Fleet reports one; paused and missing status said so.
        #[test]
        fn the_verdict_follows_only_what_fleet_says_of_the_new_generation(
            c in status_strategy(),
            before in proptest::option::of(0i64..8),
        ) {
            let v = fleet_view(&c, before);
            let s = &c["status"];
            let og = s["observedGeneration"].as_i64();
            let moved = before.is_none_or(|b| og.is_some_and(|g| g > b));
            let paused = c["spec"]["paused"] == json!(true);
            let defined_false = s["conditions"][0]["status"] == "False";
            match &v {
                Fleet::Paused => prop_assert!(paused),
                Fleet::NoStatus => prop_assert!(false, "a status was written"),
                Fleet::Applied(g) => {
                    prop_assert!(!paused && moved && !defined_false);
                    prop_assert_eq!(*g, og);
                    prop_assert_eq!(&s["conditions"][1]["status"], "True");
                    prop_assert_eq!(&s["summary"]["ready"], &s["summary"]["desiredReady"]);
                    prop_assert_eq!(&s["unavailable"], 0);
                    prop_assert_eq!(&s["summary"]["errApplied"], 0);
                    prop_assert_eq!(&s["summary"]["modified"], 0);
                }
                Fleet::Failed(m) => {
                    prop_assert!(!paused && !m.is_empty());
                    prop_assert!(defined_false || moved);
                    let msg = s["conditions"][1]["message"].as_str().unwrap();
                    prop_assert!(defined_false
                        || s["summary"]["errApplied"] == 1
                        || s["summary"]["modified"] == 1
                        || (s["conditions"][1]["status"] == "False"
                            && (msg.starts_with("ErrApplied") || msg.starts_with("Modified") || msg.starts_with("Ready("))));
                }
                Fleet::Waiting(m) => {
                    prop_assert!(!paused && !defined_false && !m.is_empty());
                }
            }
            // Not moved past `before`: never applied, never failed for Fleet's counts.
            if !moved && !paused && !defined_false {
                prop_assert!(matches!(v, Fleet::Waiting(_)), "{:?}", v);
            }
        }
    }
}
