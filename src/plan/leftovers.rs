//! What a phase leaves of ours where it was told not to go: a `post` that skips an object leaves
//! it half-restored (Fleet's next deploy renders pre's `[]` again), so it says how to finish.
//!
//! With `MANAGEDCHART_NAME` empty, the default `fleet-local/harvester` is read: the one a `pre`
//! with the defaults writes, which both ServiceAccounts may `get` already (the records on the CR
//! name no ManagedChart: a new field there would make older binaries refuse the record).

use serde_json::Value;

use super::chart::{compare_list, find_pointer};
use super::json::{annotation, lookup};
use super::records::{
    Added, CompareRecord, describe, is_suspended, methods_as_they_are, read_record,
};
use crate::model::{
    COMPARE_RECORD, FIELD_MANAGER, KUBEVIRT_COPY, KUBEVIRT_RECORD, Kind, OWNERS_TO_RETURN,
    ObjectKey, Target, VALUES_PATH, VALUES_RECORD,
};
use crate::vocabulary::{Intent, Phase, Steps};
use crate::warnings::{LEFT_BY_SKIPPED_STEP, Warning};

/// A record that does not parse counts: it is ours all the same.
pub fn kubevirt_ours(kv: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let methods = methods_as_they_are(kv);
    if annotation(kv, KUBEVIRT_RECORD).is_some() {
        if is_suspended(&methods) {
            out.push("the methods [] that pre set".to_string());
        }
        out.push("pre's record of the original".to_string());
    }
    out.extend(common_ours(kv));
    out
}

/// What of ours is on the ManagedChart, by the step that removes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChartOurs {
    pub values: Vec<String>,
    pub compare: Vec<String>,
    /// Either step: the copy of the CR's original, the owners to give back, our claim.
    pub object: Vec<String>,
    /// pre's values override `[]` is there: Fleet's next deploy renders it on the CR.
    pub suspends_at_next_deploy: bool,
}

impl ChartOurs {
    pub fn is_empty(&self) -> bool {
        self.all().is_empty()
    }

    /// What the switched-off steps leave of ours on a named ManagedChart, with the switches
    /// that leave it (`STEP_…=false and …`) and those that would remove it (`STEP_…=true …`).
    fn left_by(&self, steps: &Steps) -> (Vec<String>, String, String) {
        let mut parts = Vec::new();
        let mut off = Vec::new();
        if !steps.values {
            parts.extend(self.values.clone());
            off.push("STEP_CHART_VALUES");
        }
        if !steps.compare {
            parts.extend(self.compare.clone());
            off.push("STEP_COMPARE_PATCHES");
        }
        if !steps.values && !steps.compare {
            parts.extend(self.object.clone());
        }
        let switches = |to: &str, sep: &str| {
            let each: Vec<String> = off.iter().map(|v| format!("{v}={to}")).collect();
            each.join(sep)
        };
        (parts, switches("false", " and "), switches("true", " "))
    }

    pub fn all(&self) -> Vec<String> {
        [self.values.as_slice(), &self.compare, &self.object].concat()
    }
}

pub fn chart_ours(chart: &Value, kubevirt: &ObjectKey) -> ChartOurs {
    let mut out = ChartOurs::default();
    if annotation(chart, VALUES_RECORD).is_some() {
        let current = lookup(chart, VALUES_PATH).ok().flatten().cloned();
        out.suspends_at_next_deploy = is_suspended(&current);
        let now = describe(&current);
        out.values
            .push(format!("the values override {now} and its record"));
    }
    if annotation(chart, COMPARE_RECORD).is_some() {
        // The pointer is ours unless the record says it was there already.
        let record: Option<CompareRecord> = read_record(chart, COMPARE_RECORD).ok().flatten();
        let ours = record.is_none_or(|r| r.added != Added::Nothing);
        let list = compare_list(chart).ok();
        let pointer = list.and_then(|l| find_pointer(l, kubevirt).ok().flatten());
        out.compare.push(match pointer.is_some() && ours {
            true => "the comparePatches pointer and its record".into(),
            false => "the comparePatches record".into(),
        });
    }
    if annotation(chart, KUBEVIRT_COPY).is_some() {
        out.object
            .push("the copy of the KubeVirt CR's original".to_string());
    }
    out.object.extend(common_ours(chart));
    out
}

fn common_ours(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if annotation(obj, OWNERS_TO_RETURN).is_some() {
        out.push("the owners a stopped post still has to give back".to_string());
    }
    let fields = obj["metadata"]["managedFields"].as_array();
    let claim = fields.is_some_and(|m| m.iter().any(|e| e["manager"] == FIELD_MANAGER));
    if claim {
        out.push(format!("the managedFields entry of {FIELD_MANAGER}"));
    }
    out
}

/// `chart`: the ManagedChart the phase works on, or, with no name, the default one.
pub fn leftovers(
    intent: &Intent,
    kubevirt: Option<&Value>,
    chart: Option<(&Target, &Value)>,
) -> Vec<(Target, Warning)> {
    if intent.phase == Phase::Status {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(kv) = kubevirt.filter(|_| !intent.steps.kubevirt) {
        let target = Target::new(Kind::KubeVirt, &intent.keys.kubevirt);
        let methods = methods_as_they_are(kv);
        let effect = match is_suspended(&methods) {
            true => "Automated workload updates stay OFF on the CR. ",
            false => "",
        };
        let parts = kubevirt_ours(kv);
        let off = "STEP_KUBEVIRT=false";
        let on = "STEP_KUBEVIRT=true";
        out.extend(warning(intent.phase, &target, &parts, off, effect, on));
    }
    if let Some((target, obj)) = chart {
        let ours = chart_ours(obj, &intent.keys.kubevirt);
        let (parts, why, on) = match intent.keys.chart {
            Some(_) => ours.left_by(&intent.steps),
            None => {
                let ns = &target.key.namespace;
                let name = &target.key.name;
                let switches = format!("MANAGEDCHART_NAMESPACE={ns} MANAGEDCHART_NAME={name}");
                (ours.all(), "MANAGEDCHART_NAME is empty".into(), switches)
            }
        };
        let values_left = intent.keys.chart.is_none() || !intent.steps.values;
        let effect = match values_left && ours.suspends_at_next_deploy {
            true => {
                "Fleet's next deploy of the chart renders that [] on the KubeVirt CR and \
                 suspends the automated updates again. "
            }
            false => "",
        };
        out.extend(warning(intent.phase, target, &parts, &why, effect, &on));
    }
    out
}

/// `effect` (what the leftovers do) is said by `post` only.
fn warning(
    phase: Phase,
    target: &Target,
    parts: &[String],
    why: &str,
    effect: &str,
    switches: &str,
) -> Option<(Target, Warning)> {
    if parts.is_empty() {
        return None;
    }
    let parts = parts.join(", ");
    let message = match phase {
        Phase::Post => format!(
            "NOT FULLY RESTORED: {target} keeps what pre wrote there: {parts} ({why}: this post \
             did not touch it). {effect}To finish, run post again with {switches} (the \
             defaults, as in the post Job: hack/job.sh run post)"
        ),
        _ => format!(
            "{target} carries what an earlier pre wrote there: {parts} ({why}: this pre did not \
             touch it). post removes it only with {switches} (the defaults, as in the post Job: \
             hack/job.sh run post)"
        ),
    };
    let reason = LEFT_BY_SKIPPED_STEP;
    Some((target.clone(), Warning { reason, message }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::*;

    /// The default ManagedChart, as `--help`'s table gives it and the code reads it.
    fn chart_key() -> ObjectKey {
        let default = |name| crate::config::unset_value(name).expect("a default").into();
        ObjectKey {
            namespace: default("MANAGEDCHART_NAMESPACE"),
            name: default("MANAGEDCHART_NAME"),
        }
    }

    /// Every combination of the three switches, and the ManagedChart named or not.
    fn every_intent(phase: Phase) -> Vec<Intent> {
        let mut out = Vec::new();
        for bits in 0..8u8 {
            for named in [true, false] {
                let steps = Steps {
                    kubevirt: bits & 1 != 0,
                    values: bits & 2 != 0 && named,
                    compare: bits & 4 != 0 && named,
                };
                let mut i = intent(phase);
                i.steps = steps;
                if !named {
                    i.keys.chart = None;
                }
                out.push(i);
            }
        }
        out
    }

    /// Every write of a phase, as `phase::steps` runs them, with `intent`'s switches.
    fn run_with(intent: &Intent, objects: &Objects) -> Objects {
        let mut now = objects.clone();
        for step in steps(intent) {
            if let Some(plan) = plan_step(intent, &step, &now).unwrap() {
                let obj = now.get(step.target.kind).unwrap();
                now.set(step.target.kind, Some(apply(obj, &plan)));
            }
        }
        now
    }

    fn start() -> Objects {
        Objects {
            kubevirt: Some(kubevirt(Some(json!(["LiveMigrate"])))),
            chart: Some(chart(json!({}), Some(json!([longhorn_entry()])))),
            foreign: None,
        }
    }

    /// The leftover warnings of a run of `intent` over `objects`, as `leftovers_check` computes them.
    fn warnings_of(intent: &Intent, before: &Objects) -> (Objects, Vec<Warning>) {
        let after = run_with(intent, before);
        let ct = Target::new(Kind::ManagedChart, &chart_key());
        let w = leftovers(
            intent,
            after.kubevirt.as_ref(),
            after.chart.as_ref().map(|o| (&ct, o)),
        );
        for (target, w) in &w {
            assert!(w.message.contains(&target.to_string()), "{w:?}");
        }
        (after, w.into_iter().map(|(_, w)| w).collect())
    }

    fn ours_left(objects: &Objects) -> (bool, bool, bool) {
        let kv = objects.kubevirt.as_ref().unwrap();
        let ch = chart_ours(objects.chart.as_ref().unwrap(), &kv_key());
        (
            !kubevirt_ours(kv).is_empty(),
            !ch.values.is_empty(),
            !ch.compare.is_empty() || !ch.object.is_empty(),
        )
    }

    fn kv_key() -> ObjectKey {
        kv()
    }

    /// `pre` with every combination of the switches (A), then `post` with every combination (B):
    /// whatever pre wrote and post skipped is named in one warning per object, with the switch to
    /// turn on and the command; nothing else warns; a post with the defaults then finishes the
    /// job and leaves nothing of ours.
    #[test]
    fn post_names_whatever_it_leaves_for_every_combination_of_the_switches() {
        let mut seen = 0;
        for a in every_intent(Phase::Pre) {
            let (suspended, pre_warnings) = warnings_of(&a, &start());
            assert_eq!(pre_warnings, [], "a clean pre {a:?}");
            for b in every_intent(Phase::Post) {
                let (after, w) = warnings_of(&b, &suspended);
                let (kv_left, values_left, compare_left) = ours_left(&after);
                let kv_w: Vec<&Warning> = w
                    .iter()
                    .filter(|w| {
                        w.message
                            .contains("KubeVirt harvester-system/kubevirt keeps")
                    })
                    .collect();
                let chart_w: Vec<&Warning> = w
                    .iter()
                    .filter(|w| {
                        w.message
                            .contains("ManagedChart fleet-local/harvester keeps")
                    })
                    .collect();
                assert_eq!(kv_w.len() + chart_w.len(), w.len(), "{w:?}");
                assert_eq!(kv_left, !kv_w.is_empty(), "A {a:?} B {b:?}: {w:?}");
                assert_eq!(
                    values_left || compare_left,
                    !chart_w.is_empty(),
                    "A {a:?} B {b:?}: {w:?} {after:?}"
                );
                for w in &w {
                    assert_eq!(w.reason, LEFT_BY_SKIPPED_STEP);
                    assert!(
                        w.message.starts_with("NOT FULLY RESTORED: "),
                        "{}",
                        w.message
                    );
                    assert!(w.message.contains("hack/job.sh run post"), "{}", w.message);
                }
                if kv_left {
                    let m = &kv_w[0].message;
                    assert!(m.contains("STEP_KUBEVIRT=false") && m.contains("STEP_KUBEVIRT=true"));
                    assert!(m.contains("stay OFF"), "{m}");
                }
                if let Some(m) = chart_w.first().map(|w| &w.message) {
                    if b.keys.chart.is_none() {
                        assert!(m.contains("MANAGEDCHART_NAME is empty"), "{m}");
                        assert!(m.contains("MANAGEDCHART_NAME=harvester"), "{m}");
                    }
                    if values_left {
                        assert!(m.contains("the values override [] and its record"), "{m}");
                        assert!(m.contains("suspends the automated updates again"), "{m}");
                    } else {
                        assert!(!m.contains("suspends"), "{m}");
                    }
                }
                // What B wrote is restored; what it skipped is still suspended.
                if b.steps.kubevirt && a.steps.kubevirt {
                    assert!(!kv_left, "A {a:?} B {b:?}");
                }
                // The defaults finish the job.
                let (done, w) = warnings_of(&intent(Phase::Post), &after);
                assert_eq!(w, [], "A {a:?} B {b:?}");
                assert_eq!(ours_left(&done), (false, false, false), "A {a:?} B {b:?}");
                assert_eq!(done, start(), "A {a:?} B {b:?}");
                seen += 1;
            }
        }
        assert_eq!(seen, 16 * 16);
    }

    /// `pre` with every combination after a `pre` with the defaults: what it skips, the earlier
    /// pre's records, is named, with what post needs to remove it; a `pre` that skips nothing
    /// says nothing.
    #[test]
    fn pre_names_what_an_earlier_pre_left_on_what_it_skips() {
        let (suspended, _) = warnings_of(&intent(Phase::Pre), &start());
        for a in every_intent(Phase::Pre) {
            let (_, w) = warnings_of(&a, &suspended);
            let skips_kv = !a.steps.kubevirt;
            let skips_chart = !a.steps.values || !a.steps.compare;
            assert_eq!(
                w.len(),
                usize::from(skips_kv) + usize::from(skips_chart),
                "{a:?}: {w:?}"
            );
            for w in &w {
                assert!(
                    w.message
                        .contains("carries what an earlier pre wrote there"),
                    "{w:?}"
                );
                assert!(w.message.contains("post removes it only with"), "{w:?}");
                assert!(!w.message.contains("NOT FULLY RESTORED"), "{w:?}");
            }
        }
    }

    /// The case in words: `pre` with the defaults, then `post MANAGEDCHART_NAME=`.
    #[test]
    fn a_post_without_the_chart_says_fleet_will_suspend_again_and_how_to_finish() {
        let (suspended, _) = warnings_of(&intent(Phase::Pre), &start());
        let mut b = intent(Phase::Post);
        b.keys.chart = None;
        b.steps.values = false;
        b.steps.compare = false;
        let (after, w) = warnings_of(&b, &suspended);
        assert_eq!(
            methods(after.kubevirt.as_ref().unwrap()).unwrap(),
            Some(json!(["LiveMigrate"]))
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            w[0].message,
            format!(
                "NOT FULLY RESTORED: ManagedChart fleet-local/harvester keeps what pre wrote \
                 there: the values override [] and its record, the comparePatches pointer and its \
                 record, the copy of the KubeVirt CR's original (MANAGEDCHART_NAME is empty: this \
                 post did not touch it). Fleet's next deploy of the chart renders that [] on the \
                 KubeVirt CR and suspends the automated updates again. To finish, run post again \
                 with MANAGEDCHART_NAMESPACE=fleet-local MANAGEDCHART_NAME=harvester (the \
                 defaults, as in the post Job: hack/job.sh run post)"
            )
        );
    }

    #[test]
    fn a_claim_and_a_pending_return_are_ours_too() {
        let mut obj = kubevirt(Some(json!(["LiveMigrate"])));
        assert!(kubevirt_ours(&obj).is_empty());
        obj["metadata"]["managedFields"] =
            json!([entry(FIELD_MANAGER, "Update", methods_fields())]);
        obj["metadata"]["annotations"] = json!({OWNERS_TO_RETURN: "[]"});
        let parts = kubevirt_ours(&obj).join(", ");
        assert!(
            parts.contains("a stopped post") && parts.contains("managedFields"),
            "{parts}"
        );
        // A corrupted record is still ours.
        let mut ch = chart(json!({}), None);
        ch["metadata"]["annotations"] = json!({VALUES_RECORD: "{"});
        assert_eq!(chart_ours(&ch, &kv()).values.len(), 1);
    }
}
