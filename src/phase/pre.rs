//! `PHASE=pre`: suspends KubeVirt's automated workload updates before an upgrade. Top to bottom:
//! read the two objects; Harvester's upgrade decides whether `pre` writes at all (left to
//! Harvester's own suspension, not needed for the release upgraded to, or late: the wave has
//! begun); plan and write; say what it leaves on what it skipped; wait for Fleet to apply the
//! ManagedChart's change.

use std::io::Write as Output;

use serde_json::Value;
use tracing::info;

use super::{Read, objects, steps};
use crate::cluster::EventKind;
use crate::context::Run;
use crate::error::Error;
use crate::model::{Kind, Target};
use crate::outcome::Done;
use crate::plan::ownership::anything_of_ours;
use crate::plan::pre_advice::{self, Advice, PreGate, pre_gate};
use crate::plan::records::{is_suspended, methods};
use crate::plan::suspenders::foreign_suspension;
use crate::upgrades::{self, View};
use crate::vocabulary::{ForeignOriginal, Objects, Refusal};
use crate::warnings::{HARVESTER_SUSPENDED, NOT_NEEDED, PRE_LATE, SUSPENDED_BY_ANOTHER, Warning};
use crate::{fleet_wait, leftovers_check};

/// `read`: the resident guard's pass (its objects and upgrades, with the releases on offer); a
/// Job reads them here.
pub async fn pre(
    run: &mut Run<'_>,
    out: &mut impl Output,
    read: Option<Read>,
) -> Result<(), Error> {
    let (objects_read, view) = read.map(|r| (r.objects, r.view)).unzip();
    let mut objects = objects(run, objects_read).await?;
    let skipped = leftovers_check::read_skipped(run).await;
    let view = match view {
        Some(view) => view,
        None => upgrades::read(run.cluster, run.cfg).await?,
    };
    let write = before_pre(run, &mut objects, &view).await?;
    let chart_as_read = objects.chart.clone();
    if write {
        without_the_cr_nothing(run, &mut objects);
        steps::write(run, &mut objects, out).await?;
    }
    leftovers_check::after_steps(run, &objects, skipped).await;
    fleet_wait::wait(run, chart_as_read.as_ref(), &objects).await
}

/// `ALLOW_MISSING`: a `pre` without the KubeVirt CR writes nothing, not even the chart.
fn without_the_cr_nothing(run: &mut Run<'_>, objects: &mut Objects) {
    let intent = &run.cfg.intent;
    if intent.steps.kubevirt
        && objects.kubevirt.is_none()
        && let Some(key) = objects.chart.take().and(intent.keys.chart.as_ref())
    {
        let left = "left alone: the KubeVirt CR is missing, so there is nothing to guard";
        let target = Target::new(Kind::ManagedChart, key);
        run.push(Done::noted(target, vec![left.into()]));
    }
}

async fn warn(run: &mut Run<'_>, kubevirt: Option<&Value>, reason: &'static str, message: String) {
    run.warned(kubevirt, None, Warning { reason, message })
        .await;
}

fn note(notes: &mut Vec<String>, line: String) {
    info!("{line}");
    notes.push(line);
}

/// `false`: `pre` writes nothing (Harvester's upgrade holds the suspension, or it is not needed).
async fn before_pre(run: &mut Run<'_>, objects: &mut Objects, view: &View) -> Result<bool, Error> {
    let kv = objects.kubevirt.as_ref();
    let upgrade = view.upgrade.as_ref();
    let target = run.kubevirt();
    let refused = |reason| Refusal {
        target: target.clone(),
        reason,
    };
    let mut current = kv.map(methods).transpose().map_err(refused)?.flatten();
    let mut notes = Vec::new();
    if let Some(line) = view.offered_line() {
        note(&mut notes, line);
    }
    let ours = anything_of_ours(objects);
    // Another suspender's `[]` is no original (`post` would put it back: updates off for good).
    let foreign = match kv {
        Some(kv) if !ours => {
            let chart = objects.chart.as_ref();
            foreign_suspension(kv, chart, upgrade, &view.plans).map_err(refused)?
        }
        _ => None,
    };
    if let Some(f) = &foreign {
        let line = f.line();
        warn(run, kv, SUSPENDED_BY_ANOTHER, line.clone()).await;
        notes.push(line.clone());
        let record = serde_json::to_value(&f.original).expect("records serialize");
        objects.foreign = Some(ForeignOriginal { record, line });
        current = f.original.original();
    }
    match pre_gate(upgrade, ours, &current, foreign.is_some()) {
        PreGate::Proceed(more) => {
            more.into_iter().for_each(|line| note(&mut notes, line));
            Ok(proceed(run, objects, view, notes, ours, &current).await)
        }
        PreGate::LeaveToHarvester(why) => {
            warn(run, kv, HARVESTER_SUSPENDED, why).await;
            let left = "left to Harvester's upgrade: nothing written";
            nothing_written(run, objects, vec![left.to_string()]);
            Ok(false)
        }
    }
}

/// `false`: not needed for the coming release (a Normal Event says so).
async fn proceed(
    run: &mut Run<'_>,
    objects: &Objects,
    view: &View,
    mut notes: Vec<String>,
    ours: bool,
    current: &Option<Value>,
) -> bool {
    let advice = pre_advice::advise(&view.coming(), current);
    // A rerun keeps (and completes) its own suspension whatever the release.
    let line = match (&advice, ours, run.cfg.even_if_not_needed) {
        (Advice::NotNeeded(why), false, false) => {
            let line = format!(
                "{why}: nothing written (PRE_EVEN_IF_NOT_NEEDED=true suspends anyway); no post \
                 is needed"
            );
            info!(reason = NOT_NEEDED, "{line}");
            if let Some(kv) = &objects.kubevirt {
                run.event(kv, EventKind::Normal, NOT_NEEDED, &line).await;
            }
            notes.push(line);
            nothing_written(run, objects, notes);
            return false;
        }
        (Advice::NotNeeded(why), true, _) => {
            format!("{why}; an earlier pre's suspension is on the objects: kept")
        }
        (Advice::NotNeeded(why), false, true) => {
            format!("{why}; PRE_EVEN_IF_NOT_NEEDED=true: pre suspends anyway")
        }
        (a, ..) => a.line().to_string(),
    };
    note(&mut notes, line);
    // Our own `[]` already on the CR (a rerun, or a resident guard's new pod after a drain)
    // stopped the wave when it was written: that `pre` said whether it was late.
    let already = ours && is_suspended(current);
    let late = pre_advice::late(view.upgrade.as_ref(), objects.kubevirt.as_ref());
    if let Some(late) = late.filter(|_| !already) {
        let listed = run.migrations_under_way().await;
        let message = late.message(listed.as_deref().map_err(String::as_str));
        warn(run, objects.kubevirt.as_ref(), PRE_LATE, message).await;
    }
    run.noted(notes);
    true
}

fn nothing_written(run: &mut Run<'_>, objects: &Objects, actions: Vec<String>) {
    let keys = &run.cfg.intent.keys;
    let kinds = [Kind::ManagedChart, Kind::KubeVirt];
    let read = kinds.map(|kind| objects.get(kind).and(keys.target(kind)));
    for target in read.into_iter().flatten() {
        run.push(Done::noted(target, actions.clone()));
    }
}
