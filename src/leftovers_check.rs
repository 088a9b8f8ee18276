//! What a phase leaves, said after its steps (docs/design.md, "What a phase skips").

use serde_json::Value;
use tracing::info;

use crate::cluster::EventKind;
use crate::context::Run;
use crate::error::Error;
use crate::model::{Kind, Target};
use crate::outcome::{Done, Outcome};
use crate::plan::leftovers;
use crate::plan::pre_advice::names;
use crate::vocabulary::{Objects, Phase};
use crate::warnings::{EVENTS_NOT_RECORDED, MIGRATIONS_UNDER_WAY, SKIPPED_NOT_CHECKED, Warning};

pub async fn read_skipped(run: &mut Run<'_>) -> Objects {
    let cfg = run.cfg;
    let intent = &run.cfg.intent;
    let mut read = Objects::default();
    if !intent.steps.kubevirt {
        read.kubevirt = peek(run, run.kubevirt(), true).await.map(|(_, kv)| kv);
    }
    let chart = match (&intent.keys.chart, &cfg.unnamed_chart) {
        (Some(key), _) if !intent.steps.writes(Kind::ManagedChart) => Some((key, true)),
        (None, Some(key)) => Some((key, false)),
        _ => None,
    };
    if let Some((key, loud)) = chart {
        let target = Target::new(Kind::ManagedChart, key);
        read.chart = peek(run, target, loud).await.map(|(_, chart)| chart);
    }
    read
}

/// `loud`: a failed read is a warning; otherwise (the unnamed ManagedChart, which KubeVirt without
/// Fleet may not let us read) an INFO line.
pub async fn peek(run: &mut Run<'_>, target: Target, loud: bool) -> Option<(Target, Value)> {
    match run.cluster.get(&target).await {
        Ok(Some(obj)) => Some((target, obj)),
        // Not there, or no such kind (no Fleet): nothing of ours can be left on it.
        Ok(None) | Err(Error::NotServed { .. }) => None,
        Err(e @ Error::Refused { .. }) if !loud => {
            info!(object = %target, error = %e, "not read: records of ours left there are not checked (MANAGEDCHART_NAME is empty)");
            None
        }
        Err(e) => {
            let message = format!(
                "could not read it to check for records of ours left there (its step is off): {e}"
            );
            let reason = SKIPPED_NOT_CHECKED;
            let w = Warning { reason, message };
            run.warned(None, Some(target), w).await;
            None
        }
    }
}

pub async fn after_steps(run: &mut Run<'_>, objects: &Objects, skipped: Objects) {
    let cfg = run.cfg;
    let intent = &run.cfg.intent;
    let kubevirt = objects.kubevirt.as_ref().or(skipped.kubevirt.as_ref());
    let key = intent.keys.chart.as_ref().or(cfg.unnamed_chart.as_ref());
    let chart_target = key.map(|key| Target::new(Kind::ManagedChart, key));
    let chart = objects.chart.as_ref().or(skipped.chart.as_ref());
    let chart = chart_target.as_ref().zip(chart);
    let mut warnings = leftovers::leftovers(intent, kubevirt, chart);
    if intent.phase == Phase::Pre
        && kubevirt.is_some()
        && let Some(w) = migrations_under_way(run).await
    {
        warnings.push((run.kubevirt(), w));
    }
    for (target, w) in warnings {
        run.warned(kubevirt, Some(target), w).await;
    }
    // The objects skipped as missing (logged when found missing) get their Event too.
    if let Some(kv) = kubevirt {
        let missing = run.done.iter().filter(|d| d.outcome == Outcome::Missing);
        let warnings: Vec<Warning> = missing.flat_map(|d| d.warnings.clone()).collect();
        for w in warnings {
            run.event(kv, EventKind::Warning, w.reason, &w.message)
                .await;
        }
    }
    // An Event that could not be made (e.g. no `create` on events) is no failure, but said.
    let failed = run.event_failures().to_vec();
    if let Some(first) = failed.first() {
        let message = format!(
            "{} Event(s) could not be recorded on the KubeVirt CR (the first: {first}); the \
             warnings and actions are in this message and the log",
            failed.len()
        );
        let reason = EVENTS_NOT_RECORDED;
        run.push(Done::warned(run.kubevirt(), Warning { reason, message }));
    }
}

/// `pre`: the migrations `[]` does not stop. Best effort, at most 10 s: the suspension is written
/// already. A late `pre` listed them before its writes: that list is taken, not made again.
async fn migrations_under_way(run: &mut Run<'_>) -> Option<Warning> {
    let message = match run.migrations_under_way().await {
        Ok(unfinished) if unfinished.is_empty() => {
            info!("no workload-update migration is under way");
            return None;
        }
        Ok(unfinished) => {
            let n = unfinished.len();
            let first = &unfinished[0];
            let (s, are) = if n == 1 { ("", "is") } else { ("s", "are") };
            format!(
                "{n} workload-update migration{s} created before pre {are} not finished: {}. \
                 Setting the methods to [] stops new ones but cancels none of these: they go on \
                 moving their VMs during the upgrade. To cancel one, delete it (e.g. kubectl -n \
                 {} delete virtualmachineinstancemigration {}); PHASE=status lists those not \
                 finished (hack/job.sh run status)",
                names(&unfinished),
                first.namespace,
                first.name,
            )
        }
        Err(e) => format!(
            "could not list the workload-update migrations under way ({e}): [] stops new ones \
             but cancels none already created; PHASE=status lists them (hack/job.sh run status)"
        ),
    };
    let reason = MIGRATIONS_UNDER_WAY;
    Some(Warning { reason, message })
}
