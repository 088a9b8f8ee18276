//! `PHASE=post`: restores exactly what was there before `pre`, once the upgrade has ended. Top to
//! bottom: read the two objects; the armed `post` waits for the next upgrade to begin and end;
//! wait while an upgrade is under way or its cleanup may still write the methods (bounded, then
//! exit 7); plan and write; say what it leaves on what it skipped; wait for Fleet to apply the
//! ManagedChart's change.

use std::io::Write as Output;

use tracing::info;

use super::{Read, objects, post_record, steps};
use crate::cluster::Poll;
use crate::config::Config;
use crate::context::Run;
use crate::error::Error;
use crate::model::Kind;
use crate::plan::harvester_upgrade::{CLEANUP_DONE, CLEANUP_LABEL};
use crate::plan::ownership::anything_of_ours;
use crate::plan::upgrade_progress::post_must_wait;
use crate::upgrades::{self, View};
use crate::vocabulary::Objects;
use crate::warnings::{RESTORED_DURING_UPGRADE, Warning};
use crate::{fleet_wait, leftovers_check, waiting};

/// `read`: the resident guard's pass (its objects and upgrades); a Job reads them here (the
/// upgrades after the armed wait).
pub async fn post(
    run: &mut Run<'_>,
    out: &mut impl Output,
    read: Option<Read>,
) -> Result<(), Error> {
    // The resident guard keeps its own record of each upgrade; a Job's post makes one after the
    // fact.
    let a_job = read.is_none();
    let (objects_read, view) = read.map(|r| (r.objects, r.view)).unzip();
    let mut objects = objects(run, objects_read).await?;
    let skipped = leftovers_check::read_skipped(run).await;
    // The wait below reads the objects again after Harvester's cleanup, so Fleet's generation is
    // taken after it.
    waiting::armed(run, &mut objects).await?;
    let view = wait_for_the_upgrades_end(run, &mut objects, view).await?;
    if a_job {
        // Before the restore: the methods still say who suspended.
        post_record::after_the_fact(run, &objects, view).await;
    }
    let chart_as_read = objects.chart.clone();
    steps::write(run, &mut objects, out).await?;
    leftovers_check::after_steps(run, &objects, skipped).await;
    fleet_wait::wait(run, chart_as_read.as_ref(), &objects).await
}

/// Waits while an upgrade is under way (updates turned on mid-upgrade start the wave the guard
/// exists to prevent) or its cleanup may still write the methods; one bound for all, then exit 7.
/// The upgrades as read, where nothing was waited for (after a wait, `None`: they have moved).
async fn wait_for_the_upgrades_end(
    run: &mut Run<'_>,
    objects: &mut Objects,
    view: Option<View>,
) -> Result<Option<View>, Error> {
    let cfg = run.cfg;
    let cluster = run.cluster;
    let ours = anything_of_ours(objects);
    let view = match view {
        Some(view) => view,
        None => upgrades::read(cluster, cfg).await?,
    };
    let Some(reason) = post_must_wait(view.upgrade.as_ref(), &view.plans, ours) else {
        return Ok(Some(view));
    };
    if cfg.restore_during_upgrade {
        let why = format!(
            "RESTORE_DURING_UPGRADE=true: restoring anyway, though {reason}; updates are turned \
             on now, and a pending cleanup may still write the methods"
        );
        let w = Warning {
            reason: RESTORED_DURING_UPGRADE,
            message: why,
        };
        run.warned(objects.kubevirt.as_ref(), None, w).await;
        return Ok(Some(view));
    }
    if cfg.dry_run {
        run.said(format!(
            "would wait first (dry run: planned against the objects as they are): {reason}"
        ));
        return Ok(Some(view));
    }
    let started = tokio::time::Instant::now();
    let bound = cfg.cleanup_wait;
    let read = async || {
        let view = upgrades::read(cluster, cfg).await?;
        let why = post_must_wait(view.upgrade.as_ref(), &view.plans, ours);
        Ok(why.map_or(Poll::Ready(()), Poll::Pending))
    };
    let progress = |waited: std::time::Duration, seen: &str| {
        let waited_s = waited.as_secs();
        let bound_s = bound.as_secs();
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
    let keys = &cfg.intent.keys;
    let kinds = [Kind::KubeVirt, Kind::ManagedChart];
    let read = kinds.map(|kind| objects.get(kind).and(keys.target(kind)));
    for target in read.into_iter().flatten() {
        objects.set(target.kind, cluster.get(&target).await?);
    }
    run.noted(vec![line]);
    Ok(None)
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
