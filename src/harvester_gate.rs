//! Harvester's own upgrade around a phase (docs/design.md, "Harvester's own handling"): before
//! the phase writes, `pre` leaves a suspension that Harvester holds a backup of to Harvester (or
//! stands aside where it is not needed), and `post` waits while an upgrade is under way or its
//! cleanup pending. Each reads ([`crate::upgrades`]), decides ([`crate::plan::pre_advice`],
//! [`crate::plan::upgrade_progress`]) and acts, once.

use serde_json::Value;
use tracing::info;

use crate::cluster::{Cluster, Poll};
use crate::config::Config;
use crate::context::Run;
use crate::error::Error;
use crate::model::Kind;
use crate::outcome::{Done, Outcome};
use crate::plan::harvester_upgrade::{CLEANUP_DONE, CLEANUP_LABEL};
use crate::plan::ownership::anything_of_ours;
use crate::plan::pre_advice::{self, Advice, PreGate, pre_gate};
use crate::plan::records::{self, methods};
use crate::plan::suspenders;
use crate::plan::upgrade_progress;
use crate::upgrades::{self, View, offered_line};
use crate::vocabulary::{ForeignOriginal, Malformed, Objects, Phase, Refusal};
use crate::warnings::{
    HARVESTER_SUSPENDED, NOT_NEEDED, PRE_LATE, RESTORED_DURING_UPGRADE, SUSPENDED_BY_ANOTHER,
    Warning,
};

fn warning(reason: &'static str, message: String) -> Warning {
    Warning { reason, message }
}

/// The gate before a phase's writes: `false` when the phase must write nothing.
pub async fn gate(run: &mut Run<'_>, objects: &mut Objects) -> Result<bool, Error> {
    match run.cfg.intent.phase {
        Phase::Pre => before_pre(run, objects).await,
        Phase::Post => before_post(run, objects).await.map(|()| true),
        Phase::Status | Phase::Watch => Ok(true),
    }
}

/// The KubeVirt CR's row that `pre`'s gate fills as it goes: its notes, and its warnings (each
/// said, a WARN line and its Event, when it was found).
#[derive(Default)]
struct Row {
    notes: Vec<String>,
    warnings: Vec<Warning>,
}

/// `pre`, before its writes: `false` when Harvester's upgrade already holds the suspension, or
/// `pre` is not needed, so nothing is written (each read object gets a `Done` that says why).
/// One pass: read (the upgrades, the methods), decide ([`pre_gate`], then [`proceed`]), say.
async fn before_pre(run: &mut Run<'_>, objects: &mut Objects) -> Result<bool, Error> {
    let view = upgrades::read(run.cluster, run.cfg).await?;
    let kubevirt = run.kubevirt();
    let refused = |reason| Refusal {
        target: kubevirt.clone(),
        reason,
    };
    let current = match &objects.kubevirt {
        Some(kv) => methods(kv).map_err(refused)?,
        None => None,
    };
    let mut row = Row::default();
    if let Some(line) = offered_line(&view) {
        info!("{line}");
        row.notes.push(line);
    }
    let ours = anything_of_ours(objects);
    // Another suspender's `[]` is never an original: what it stands in for is (else `post`
    // would put that `[]` back: updates off for good).
    let foreign = match ours {
        false => in_place_of_foreign(run.cluster, &view, objects, &mut row)
            .await
            .map_err(refused)?,
        true => None,
    };
    let current = foreign.clone().unwrap_or(current);
    Ok(
        match pre_gate(view.upgrade.as_ref(), ours, &current, foreign.is_some()) {
            PreGate::Proceed(more) => {
                for n in &more {
                    info!("{n}");
                }
                row.notes.extend(more);
                proceed(run, objects, &view, row, ours, &current).await
            }
            PreGate::LeaveToHarvester(why) => {
                leave_to_harvester(run, objects, why).await;
                false
            }
        },
    )
}

/// `pre` past Harvester's gate: whether it is needed for the coming release (else it stands
/// aside: `false`), and whether it comes late; the KubeVirt CR's row says it all.
async fn proceed(
    run: &mut Run<'_>,
    objects: &Objects,
    view: &View,
    mut row: Row,
    ours: bool,
    current: &Option<Value>,
) -> bool {
    let advice = pre_advice::advise(&view.coming(), current);
    // A rerun keeps (and completes) its own suspension whatever the release.
    if let (Advice::NotNeeded(why), false, false) = (&advice, ours, run.cfg.even_if_not_needed) {
        stand_aside(run, objects, row.notes, why).await;
        return false;
    }
    let line = match (&advice, ours) {
        (Advice::NotNeeded(why), true) => {
            format!("{why}; an earlier pre's suspension is on the objects: kept")
        }
        (Advice::NotNeeded(why), false) => {
            format!("{why}; PRE_EVEN_IF_NOT_NEEDED=true: pre suspends anyway")
        }
        (a, _) => a.line().to_string(),
    };
    info!("{line}");
    row.notes.push(line);
    // Our own `[]` already on the CR (a rerun, or a resident guard's new pod after a drain)
    // stopped the wave when it was written: that `pre` said whether it was late.
    let already = ours && records::is_suspended(current);
    let late = pre_advice::late(view.upgrade.as_ref(), objects.kubevirt.as_ref());
    if let Some(late) = late.filter(|_| !already) {
        let listed = run.cluster.migrations_under_way().await;
        let message = late.message(listed.as_deref().map_err(String::as_str));
        let said = warning(PRE_LATE, message);
        run.cluster
            .warn(objects.kubevirt.as_ref(), None, &said)
            .await;
        row.warnings.push(said);
    }
    let target = run.kubevirt();
    run.push(Done {
        target,
        outcome: Outcome::Unchanged,
        actions: row.notes,
        warnings: row.warnings,
    });
    true
}

/// `pre` where Harvester's upgrade holds the suspension itself: said (a Warning and its Event),
/// nothing written, each read object's `Done` says why.
async fn leave_to_harvester(run: &mut Run<'_>, objects: &Objects, why: String) {
    let said = warning(HARVESTER_SUSPENDED, why);
    run.cluster
        .warn(objects.kubevirt.as_ref(), None, &said)
        .await;
    let left = vec!["left to Harvester's upgrade: nothing written".to_string()];
    nothing_written(run, objects, left, Some(said));
}

/// `pre` writes nothing: each object it read gets a row with `actions` (the KubeVirt CR's with
/// `warning`, already said, if any).
fn nothing_written(
    run: &mut Run<'_>,
    objects: &Objects,
    actions: Vec<String>,
    warning: Option<Warning>,
) {
    for kind in [Kind::ManagedChart, Kind::KubeVirt] {
        if let Some(target) = run.cfg.intent.keys.target(kind)
            && objects.get(kind).is_some()
        {
            let warnings = warning.iter().filter(|_| kind == Kind::KubeVirt);
            run.push(Done {
                target,
                outcome: Outcome::Unchanged,
                actions: actions.clone(),
                warnings: warnings.cloned().collect(),
            });
        }
    }
}

/// `pre`: the original in place of another suspender's `[]` on the CR (`plan::suspenders`), put
/// on `objects` for the plans, said (a note, a Warning and its Event); `None`: no such `[]`.
async fn in_place_of_foreign(
    cluster: &Cluster,
    view: &View,
    objects: &mut Objects,
    row: &mut Row,
) -> Result<Option<Option<Value>>, Malformed> {
    let Some(kv) = &objects.kubevirt else {
        return Ok(None);
    };
    let upgrade = view.upgrade.as_ref();
    let Some(f) = suspenders::foreign_suspension(kv, objects.chart.as_ref(), upgrade, &view.plans)?
    else {
        return Ok(None);
    };
    let line = f.line();
    let said = warning(SUSPENDED_BY_ANOTHER, line.clone());
    cluster.warn(objects.kubevirt.as_ref(), None, &said).await;
    row.warnings.push(said);
    row.notes.push(line.clone());
    objects.foreign = Some(ForeignOriginal {
        record: serde_json::to_value(&f.original).expect("records serialize"),
        line,
    });
    Ok(Some(f.original.original()))
}

/// `pre` is not needed for the coming release: nothing is written; each read object says so,
/// with a Normal Event on the KubeVirt CR.
async fn stand_aside(run: &mut Run<'_>, objects: &Objects, notes: Vec<String>, why: &str) {
    let line = format!(
        "{why}: nothing written (PRE_EVEN_IF_NOT_NEEDED=true suspends anyway); no post is needed"
    );
    info!(reason = NOT_NEEDED, "{line}");
    if let Some(kv) = &objects.kubevirt {
        let kind = crate::cluster::EventKind::Normal;
        run.cluster.event(kv, kind, NOT_NEEDED, &line).await;
    }
    let mut actions = notes;
    actions.push(line);
    nothing_written(run, objects, actions, None);
}

/// `post`, before its writes: while an upgrade is under way (any release: turning updates on
/// mid-upgrade starts the wave the guard exists to prevent), or the latest Upgrade's cleanup may
/// still write the methods, and something of ours is on the objects, wait ([`Cluster::poll`],
/// one bound for the whole wait: `HARVESTER_CLEANUP_WAIT_SECONDS`); then the objects are read
/// again, as the cleanup may have written them. Past the bound: exit 7, nothing written.
/// `RESTORE_DURING_UPGRADE=true`: no wait, a warning naming what is under way.
async fn before_post(run: &mut Run<'_>, objects: &mut Objects) -> Result<(), Error> {
    let (cfg, cluster) = (run.cfg, run.cluster);
    let ours = anything_of_ours(objects);
    let view = upgrades::read(cluster, cfg).await?;
    let Some(reason) = upgrade_progress::post_must_wait(view.upgrade.as_ref(), &view.plans, ours)
    else {
        return Ok(());
    };
    if cfg.restore_during_upgrade {
        let why = format!(
            "RESTORE_DURING_UPGRADE=true: restoring anyway, though {reason}; updates are turned \
             on now, and a pending cleanup may still write the methods"
        );
        let said = warning(RESTORED_DURING_UPGRADE, why);
        run.warned(objects.kubevirt.as_ref(), None, said).await;
        return Ok(());
    }
    if cfg.dry_run {
        run.said(format!(
            "would wait first (dry run: planned against the objects as they are): {reason}"
        ));
        return Ok(());
    }
    wait_for_the_end(run, objects, &view, ours, &reason).await
}

/// `post`'s wait ([`Cluster::poll`], bounded by `HARVESTER_CLEANUP_WAIT_SECONDS`) until no
/// upgrade is under way and no cleanup pending, then the objects read again. `reason`: why it
/// waits, as first read.
async fn wait_for_the_end(
    run: &mut Run<'_>,
    objects: &mut Objects,
    view: &View,
    ours: bool,
    reason: &str,
) -> Result<(), Error> {
    let (cfg, cluster) = (run.cfg, run.cluster);
    let started = tokio::time::Instant::now();
    let bound = cfg.cleanup_wait;
    // 0: no wait (the chart's uninstall hook). What was just read is what is under way: a poll
    // bounded by 0 would be cut before its first read and could only say "nothing read yet".
    if bound.is_zero() {
        return Err(Error::CleanupPending(pending_message(
            cfg, view, bound, reason,
        )));
    }
    let waited = cluster
        .poll(
            bound,
            async || {
                let view = upgrades::read(cluster, cfg).await?;
                Ok(
                    match upgrade_progress::post_must_wait(view.upgrade.as_ref(), &view.plans, ours)
                    {
                        None => Poll::Ready(()),
                        Some(why) => Poll::Pending(why),
                    },
                )
            },
            |waited, seen| {
                info!(
                    waited_s = waited.as_secs(),
                    bound_s = bound.as_secs(),
                    "waiting: {seen}"
                )
            },
        )
        .await?;
    if let Err(last) = waited {
        return Err(Error::CleanupPending(pending_message(
            cfg, view, bound, &last,
        )));
    }
    let took = started.elapsed().as_secs_f64();
    let line =
        format!("waited {took:.1} s for the upgrade to end and Harvester's cleanup ({reason})");
    info!("{line}");
    // The cleanup may have written either object: plan against what it left.
    for kind in [Kind::KubeVirt, Kind::ManagedChart] {
        if objects.get(kind).is_some()
            && let Some(target) = cfg.intent.keys.target(kind)
        {
            objects.set(kind, cluster.get(&target).await?);
        }
    }
    run.noted(vec![line]);
    Ok(())
}

/// Exit 7's one line: what was last seen (naming the Upgrade or UpgradePlan and its state),
/// that nothing was written, and what to do.
fn pending_message(cfg: &Config, view: &View, bound: std::time::Duration, last: &str) -> String {
    let check = match (&view.upgrade, view.plans.iter().find(|p| p.under_way())) {
        (Some(u), _) => format!(
            "kubectl -n {} get upgrades.harvesterhci.io {} -o yaml",
            u.namespace, u.name
        ),
        (None, Some(p)) => format!(
            "kubectl get upgradeplans.management.harvesterhci.io {}",
            p.name
        ),
        (None, None) => format!(
            "kubectl -n {} get upgrades.harvesterhci.io",
            cfg.intent.keys.kubevirt.namespace
        ),
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
