//! The order of a phase's writes (docs/design.md, "What each phase does") and what each object's
//! plan needs of the other (the ManagedChart's copy of the CR's original, and back). It decides
//! nothing about an object's content: that is the other rooms' work.

use super::chart::{chart_post, chart_pre, values_choice};
use super::kubevirt::{kubevirt_original, kubevirt_post, kubevirt_pre};
use super::ownership::release;
use super::records::{ValueRecord, kubevirt_copy};
use crate::model::Kind;
use crate::vocabulary::{Intent, Malformed, Objects, Phase, Plan, Refusal, Step, Write};

/// The writes of a phase, in order: `post` releases our claim on each object right after its
/// restore (a separate write: one that also changes a field claims that field again).
pub fn steps(intent: &Intent) -> Vec<Step> {
    let writes: &[Write] = match intent.phase {
        Phase::Post => &[Write::Change, Write::Release],
        _ => &[Write::Change],
    };
    intent
        .targets()
        .into_iter()
        .flat_map(|target| {
            writes.iter().map(move |&write| Step {
                target: target.clone(),
                write,
            })
        })
        .collect()
}

/// Plans one write against the objects as they are now; `None` when its object was not found.
/// Each object's plan sees the other: `pre` copies the KubeVirt CR's original to the
/// ManagedChart, and the KubeVirt plans read that copy.
pub fn plan_step(intent: &Intent, step: &Step, objects: &Objects) -> Result<Option<Plan>, Refusal> {
    // A refusal names the object whose content is at fault, which may be the other one.
    let refuse = |kind: Kind| {
        let target = intent
            .keys
            .target(kind)
            .unwrap_or_else(|| step.target.clone());
        move |reason| Refusal { target, reason }
    };
    let Some(obj) = objects.get(step.target.kind) else {
        return Ok(None);
    };
    let copy = || match &objects.chart {
        Some(chart) => kubevirt_copy(chart).map_err(refuse(Kind::ManagedChart)),
        None => Ok(None),
    };
    let kv = &intent.keys.kubevirt;
    let own = refuse(step.target.kind);
    let plan = match (intent.phase, step.target.kind, step.write) {
        (Phase::Pre, Kind::KubeVirt, Write::Change) => {
            // Another suspender's `[]`: its original stands in for a copy that is not there yet.
            let copy = copy()?.or(foreign(objects).map_err(own.clone())?);
            kubevirt_pre(obj, copy.as_ref()).map(|mut plan| {
                // Where that original came from, first among the actions the Event carries.
                if let (Some(f), Some(_)) = (&objects.foreign, &plan.patch) {
                    plan.actions.insert(0, f.line.clone());
                }
                plan
            })
        }
        (Phase::Pre, Kind::ManagedChart, Write::Change) => {
            let original = match (&objects.kubevirt, foreign(objects).map_err(own.clone())?) {
                (Some(o), None) => Some(kubevirt_original(o).map_err(refuse(Kind::KubeVirt))?),
                (_, foreign) => foreign,
            };
            chart_pre(obj, kv, &intent.steps, original.as_ref())
        }
        (Phase::Post, Kind::KubeVirt, Write::Change) => {
            // A later choice on the values is what Fleet renders: the CR follows it.
            let values_choice = match &objects.chart {
                Some(chart) if intent.steps.values => {
                    values_choice(chart).map_err(refuse(Kind::ManagedChart))?
                }
                _ => None,
            };
            kubevirt_post(
                obj,
                intent.fallback.as_deref(),
                copy()?.as_ref(),
                values_choice.as_ref(),
            )
        }
        (Phase::Post, Kind::ManagedChart, Write::Change) => chart_post(obj, kv, &intent.steps),
        (_, kind, Write::Release) => release(obj, kind),
        _ => Ok(Plan::default()),
    };
    plan.map(Some).map_err(own)
}

/// The original that stands in for another suspender's `[]`, if `pre` found one.
fn foreign(objects: &Objects) -> Result<Option<ValueRecord>, Malformed> {
    let record = objects.foreign.as_ref().map(|f| f.record.clone());
    let record = record.map(serde_json::from_value).transpose();
    record.map_err(|e| Malformed(format!("the original in place of a foreign []: {e}")))
}

/// Plans the whole phase against the objects as read, each write against the result of the
/// ones before it (the server's own `managedFields` bookkeeping aside). Any malformed object
/// refuses the whole phase, so nothing is written. `phase::steps` writes these one by one, planning
/// each again against the object as the server last returned it.
pub fn plan_phase(intent: &Intent, objects: &Objects) -> Result<Vec<(Step, Plan)>, Refusal> {
    let mut now = objects.clone();
    let mut out = Vec::new();
    for step in steps(intent) {
        let Some(plan) = plan_step(intent, &step, &now)? else {
            continue;
        };
        if let (Some(patch), Some(obj)) = (&plan.patch, now.get(step.target.kind)) {
            let mut next = obj.clone();
            json_patch::patch(&mut next, patch)
                .expect("a plan applies to what it was planned from");
            now.set(step.target.kind, Some(next));
        }
        out.push((step, plan));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::*;

    #[test]
    fn the_phases_write_in_the_documented_order() {
        let both = Objects {
            kubevirt: Some(kubevirt(Some(json!(["LiveMigrate"])))),
            chart: Some(chart(json!({}), None)),
            foreign: None,
        };
        let pre = plan_phase(&intent(Phase::Pre), &both).unwrap();
        assert_eq!(
            kinds(&pre),
            [
                (Kind::ManagedChart, Write::Change),
                (Kind::KubeVirt, Write::Change)
            ]
        );
        assert!(pre.iter().all(|(_, p)| p.patch.is_some()));
        // The CR's plan already sees the copy that the ManagedChart's plan writes.
        assert!(
            pre[0].1.actions.iter().any(|a| a.contains("copied")),
            "{:?}",
            pre[0].1.actions
        );
        let post = plan_phase(&intent(Phase::Post), &run_phase(Phase::Pre, &both)).unwrap();
        assert_eq!(
            kinds(&post),
            [
                (Kind::KubeVirt, Write::Change),
                (Kind::KubeVirt, Write::Release),
                (Kind::ManagedChart, Write::Change),
                (Kind::ManagedChart, Write::Release),
            ]
        );
        assert!(
            plan_phase(&intent(Phase::Status), &both)
                .unwrap()
                .is_empty()
        );
        // A missing object has no step; switched-off steps have none either.
        let only_kv = Objects {
            chart: None,
            ..both.clone()
        };
        assert_eq!(
            kinds(&plan_phase(&intent(Phase::Pre), &only_kv).unwrap()),
            [(Kind::KubeVirt, Write::Change)]
        );
        let mut no_chart = intent(Phase::Post);
        no_chart.steps = Steps {
            values: false,
            compare: false,
            kubevirt: true,
        };
        assert_eq!(no_chart.targets().len(), 1);
        no_chart.steps = Steps {
            kubevirt: false,
            ..Steps::ALL
        };
        assert_eq!(
            no_chart
                .targets()
                .iter()
                .map(|t| t.kind)
                .collect::<Vec<_>>(),
            [Kind::ManagedChart]
        );
    }

    #[test]
    fn a_malformed_object_refuses_the_whole_phase_and_names_it() {
        let good_kv = kubevirt(Some(json!(["LiveMigrate"])));
        let good_chart = chart(json!({}), None);
        let bad_kv = kubevirt(Some(json!("LiveMigrate")));
        let mut bad_chart = good_chart.clone();
        bad_chart["metadata"]["annotations"] = json!({KUBEVIRT_COPY: "{"});
        for phase in [Phase::Pre, Phase::Post] {
            for (kv_obj, chart_obj, at_fault) in [
                (&bad_kv, &good_chart, Kind::KubeVirt),
                (&good_kv, &bad_chart, Kind::ManagedChart),
            ] {
                let objects = Objects {
                    kubevirt: Some(kv_obj.clone()),
                    chart: Some(chart_obj.clone()),
                    foreign: None,
                };
                let err = plan_phase(&intent(phase), &objects).unwrap_err();
                assert_eq!(err.target.kind, at_fault, "{phase:?}: {err}");
                assert!(!err.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn the_original_copied_to_the_chart_drops_the_parents_the_cr_record_lists() {
        let mut bare = kubevirt(None);
        bare["spec"] = json!({});
        let absent = pre_kv(&bare);
        let record: ValueRecord = read_record(&absent, KUBEVIRT_RECORD).unwrap().unwrap();
        assert_eq!(record.created_parents, ["/spec/workloadUpdateStrategy"]);
        let original = kubevirt_original(&absent).unwrap();
        assert!(original.created_parents.is_empty());
        assert_eq!(original.present, record.present);
    }

    #[test]
    fn pre_records_the_original_in_place_of_a_foreign_empty_list_on_both_objects() {
        let both = json!(["LiveMigrate", "Evict"]);
        let record = value_record(Some(both.clone()), Vec::new(), Vec::new());
        let start = Objects {
            kubevirt: Some(kubevirt(Some(json!([])))),
            chart: Some(chart(json!({}), None)),
            foreign: Some(crate::vocabulary::ForeignOriginal {
                record: serde_json::to_value(&record).unwrap(),
                line: "the methods are [] by the add-on's suspension".into(),
            }),
        };
        let plans = plan_phase(&intent(Phase::Pre), &start).unwrap();
        let kv_plan = &plans
            .iter()
            .find(|(s, _)| s.target.kind == Kind::KubeVirt)
            .unwrap()
            .1;
        assert!(
            kv_plan.actions[0].contains("add-on's suspension"),
            "{:?}",
            kv_plan.actions
        );
        let end = run_phase(Phase::Pre, &start);
        let on_cr = kubevirt_record(end.kubevirt.as_ref().unwrap())
            .unwrap()
            .unwrap();
        let copy = kubevirt_copy(end.chart.as_ref().unwrap()).unwrap().unwrap();
        assert_eq!(on_cr.original(), Some(both.clone()));
        assert_eq!(copy.original(), Some(both.clone()));
        // And post, after the suspender's blind `[LiveMigrate]`, puts the original back.
        let mut after = end.clone();
        after.foreign = None;
        after.kubevirt.as_mut().unwrap()["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] =
            json!(["LiveMigrate"]);
        let kv = after.kubevirt.as_mut().unwrap();
        kv["metadata"]["managedFields"] =
            json!([entry("upgrade-toolkit", "Update", methods_fields())]);
        let restored = run_phase(Phase::Post, &after);
        assert_eq!(
            restored.kubevirt.unwrap()["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"],
            both
        );
    }

    // ---- what a plan says it does ----

    #[test]
    fn each_plan_says_what_it_does_one_action_per_change() {
        let live = json!(["LiveMigrate"]);
        let on = kubevirt(Some(live.clone()));
        let suspended = pre_kv(&on);
        let as_is = value_record(Some(live.clone()), Vec::new(), Vec::new());
        let other = value_record(Some(json!(["Evict"])), Vec::new(), Vec::new());
        let mut changed = suspended.clone();
        changed["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] = json!(["Evict"]);
        let count = |plan: Result<Plan, Malformed>| plan.unwrap().actions.len();
        // pre: the change and the record; a copy adds nothing over a value, and over an `[]` that
        // it differs from it says so.
        assert_eq!(count(kubevirt_pre(&on, None)), 2);
        assert_eq!(count(kubevirt_pre(&on, Some(&as_is))), 2);
        assert_eq!(count(kubevirt_pre(&on, Some(&other))), 2);
        assert_eq!(
            count(kubevirt_pre(&kubevirt(Some(json!([]))), Some(&other))),
            2
        );
        // Already [] (no change, only the record), or already suspended (nothing but the record kept).
        assert_eq!(count(kubevirt_pre(&kubevirt(Some(json!([]))), None)), 1);
        assert_eq!(count(kubevirt_pre(&suspended, None)), 1);
        // post: where the original comes from, the change, and what KubeVirt will now do; a change
        // made while suspended is a warning, and the one action is the record removed.
        assert_eq!(count(kubevirt_post(&suspended, None, None, None)), 3);
        assert_eq!(count(kubevirt_post(&changed, None, None, None)), 1);
        assert_eq!(
            kubevirt_post(&changed, None, None, None)
                .unwrap()
                .warnings
                .len(),
            1
        );
        // Nothing to restore from: only why.
        assert_eq!(count(kubevirt_post(&on, None, Some(&other), None)), 1);
        assert_eq!(count(kubevirt_post(&on, None, None, None)), 1);
    }

    #[test]
    fn either_chart_step_alone_writes_the_chart() {
        for steps in [
            Steps {
                kubevirt: false,
                values: true,
                compare: false,
            },
            Steps {
                kubevirt: false,
                values: false,
                compare: true,
            },
        ] {
            assert!(steps.writes(Kind::ManagedChart), "{steps:?}");
            assert!(!steps.writes(Kind::KubeVirt), "{steps:?}");
            let mut i = intent(Phase::Pre);
            i.steps = steps;
            assert_eq!(
                i.targets().iter().map(|t| t.kind).collect::<Vec<_>>(),
                [Kind::ManagedChart]
            );
        }
        assert!(!Steps::ALL.writes(Kind::Migration));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_full_run_restores_both_objects_even_if_fleet_redeploys_in_between(
            kv0 in kubevirt_strategy(),
            chart0 in chart_strategy(),
            redeploy in any::<bool>(),
            rerun_pre in any::<bool>(),
        ) {
            let start = Objects { kubevirt: Some(kv0.clone()), chart: Some(chart0.clone()), foreign: None };
            // pre: the ManagedChart (with the copy) first; maybe the run is killed right after it
            // and Fleet re-renders the CR from the new values before the rerun.
            let mut now = if redeploy {
                let (kv1, chart1) = fleet_redeploys_after_the_chart_write(&kv0, &chart0);
                Objects { kubevirt: Some(kv1), chart: Some(chart1), foreign: None }
            } else {
                run_phase(Phase::Pre, &start)
            };
            prop_assert!(kubevirt_copy(now.chart.as_ref().unwrap()).unwrap().is_some());
            if rerun_pre {
                now = run_phase(Phase::Pre, &now);
                prop_assert_eq!(methods(now.kubevirt.as_ref().unwrap()).unwrap(), Some(json!([])));
            }
            // post: KubeVirt, then ManagedChart.
            let end = run_phase(Phase::Post, &now);
            prop_assert_eq!(methods(end.kubevirt.as_ref().unwrap()).unwrap(), methods(&kv0).unwrap());
            prop_assert_eq!(end.chart.as_ref(), Some(&chart0));
            if !redeploy {
                prop_assert_eq!(end.kubevirt.as_ref(), Some(&kv0));
            }
            // post twice equals post once.
            prop_assert_eq!(run_phase(Phase::Post, &end), end);
        }
    }

    #[test]
    fn a_phase_is_shown_as_the_variable_spells_it() {
        let shown: Vec<String> = [Phase::Pre, Phase::Post, Phase::Status]
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["pre", "post", "status"]);
    }
}
