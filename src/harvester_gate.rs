//! Harvester's own upgrade around a phase (docs/design.md, "Harvester's own handling").

use serde_json::Value;
use tracing::info;

use crate::cluster::{EventKind, Poll};
use crate::config::Config;
use crate::context::Run;
use crate::error::Error;
use crate::model::Kind;
use crate::outcome::Done;
use crate::plan::harvester_upgrade::{CLEANUP_DONE, CLEANUP_LABEL};
use crate::plan::ownership::anything_of_ours;
use crate::plan::pre_advice::{self, Advice, PreGate, pre_gate};
use crate::plan::records::{is_suspended, methods};
use crate::plan::suspenders::foreign_suspension;
use crate::plan::upgrade_progress::post_must_wait;
use crate::upgrades::{self, View};
use crate::vocabulary::{ForeignOriginal, Objects, Refusal};
use crate::warnings::{
    HARVESTER_SUSPENDED, NOT_NEEDED, PRE_LATE, RESTORED_DURING_UPGRADE, SUSPENDED_BY_ANOTHER,
    Warning,
};

async fn warn(run: &mut Run<'_>, kubevirt: Option<&Value>, reason: &'static str, message: String) {
    run.warned(kubevirt, None, Warning { reason, message })
        .await;
}

fn note(notes: &mut Vec<String>, line: String) {
    info!("{line}");
    notes.push(line);
}

/// `false`: `pre` writes nothing (Harvester's upgrade holds the suspension, or it is not needed).
pub async fn before_pre(run: &mut Run<'_>, objects: &mut Objects) -> Result<bool, Error> {
    let view = upgrades::read(run.cluster, run.cfg).await?;
    let (kv, upgrade) = (objects.kubevirt.as_ref(), view.upgrade.as_ref());
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
            Ok(proceed(run, objects, &view, notes, ours, &current).await)
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
                let normal = EventKind::Normal;
                run.cluster.event(kv, normal, NOT_NEEDED, &line).await;
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
        let listed = run.cluster.migrations_under_way().await;
        let message = late.message(listed.as_deref().map_err(String::as_str));
        warn(run, objects.kubevirt.as_ref(), PRE_LATE, message).await;
    }
    run.noted(notes);
    true
}

fn nothing_written(run: &mut Run<'_>, objects: &Objects, actions: Vec<String>) {
    let (keys, kinds) = (&run.cfg.intent.keys, [Kind::ManagedChart, Kind::KubeVirt]);
    let read = kinds.map(|kind| objects.get(kind).and(keys.target(kind)));
    for target in read.into_iter().flatten() {
        run.push(Done::noted(target, actions.clone()));
    }
}

/// Waits while an upgrade is under way (updates turned on mid-upgrade start the wave the guard
/// exists to prevent) or its cleanup may still write the methods; one bound for all, then exit 7.
pub async fn before_post(run: &mut Run<'_>, objects: &mut Objects) -> Result<(), Error> {
    let (cfg, cluster) = (run.cfg, run.cluster);
    let ours = anything_of_ours(objects);
    let view = upgrades::read(cluster, cfg).await?;
    let Some(reason) = post_must_wait(view.upgrade.as_ref(), &view.plans, ours) else {
        return Ok(());
    };
    if cfg.restore_during_upgrade {
        let why = format!(
            "RESTORE_DURING_UPGRADE=true: restoring anyway, though {reason}; updates are turned \
             on now, and a pending cleanup may still write the methods"
        );
        warn(run, objects.kubevirt.as_ref(), RESTORED_DURING_UPGRADE, why).await;
        return Ok(());
    }
    if cfg.dry_run {
        run.said(format!(
            "would wait first (dry run: planned against the objects as they are): {reason}"
        ));
        return Ok(());
    }
    let (started, bound) = (tokio::time::Instant::now(), cfg.cleanup_wait);
    let read = async || {
        let view = upgrades::read(cluster, cfg).await?;
        let why = post_must_wait(view.upgrade.as_ref(), &view.plans, ours);
        Ok(why.map_or(Poll::Ready(()), Poll::Pending))
    };
    let progress = |waited: std::time::Duration, seen: &str| {
        let (waited_s, bound_s) = (waited.as_secs(), bound.as_secs());
        info!(waited_s, bound_s, "waiting: {seen}")
    };
    // 0: no wait (the chart's uninstall hook). What was just read is what is under way: a poll
    // bounded by 0 would be cut before its first read and could only say "nothing read yet".
    let waited = match bound.is_zero() {
        true => Err(reason.clone()),
        false => cluster.poll(bound, read, progress).await?,
    };
    if let Err(last) = waited {
        let message = pending_message(cfg, &view, bound, &last);
        return Err(Error::CleanupPending(message));
    }
    let took = started.elapsed().as_secs_f64();
    let line =
        format!("waited {took:.1} s for the upgrade to end and Harvester's cleanup ({reason})");
    info!("{line}");
    // The cleanup may have written either object: plan against what it left.
    let (keys, kinds) = (&cfg.intent.keys, [Kind::KubeVirt, Kind::ManagedChart]);
    let read = kinds.map(|kind| objects.get(kind).and(keys.target(kind)));
    for target in read.into_iter().flatten() {
        objects.set(target.kind, cluster.get(&target).await?);
    }
    run.noted(vec![line]);
    Ok(())
}

/// Exit 7's one line: what was last seen, that nothing was written, and what to do.
fn pending_message(cfg: &Config, view: &View, bound: std::time::Duration, last: &str) -> String {
    let ns = &cfg.intent.keys.kubevirt.namespace;
    let check = match (&view.upgrade, view.plans.iter().find(|p| p.under_way())) {
        (Some(u), _) => format!(
            "kubectl -n {} get upgrades.harvesterhci.io {} -o yaml",
            u.namespace, u.name
        ),
        (None, Some(p)) => format!(
            "kubectl get upgradeplans.management.harvesterhci.io {}",
            p.name
        ),
        (None, None) => format!("kubectl -n {ns} get upgrades.harvesterhci.io"),
    };
    format!(
        "waited {}s: {last}; nothing was written. Check it ({check}), then run post again once \
         the upgrade has ended and, for a release that handles the methods, the Upgrade carries \
         {CLEANUP_LABEL}={CLEANUP_DONE}; or delete the Upgrade if it is stuck (Harvester's \
         cleanup runs on deletion), or raise HARVESTER_CLEANUP_WAIT_SECONDS, or set \
         RESTORE_DURING_UPGRADE=true to restore anyway",
        bound.as_secs()
    )
}
