//! The armed `post` (`ARM=true`, issue 28 point 2): started right after `pre`, it waits for the
//! next upgrade to begin and to end (cleanup included), then `post` restores as it always does.
//! Nothing to remember after the upgrade. Each new pod (a drain, a reboot) reads the state
//! again: with nothing of ours left (a by-hand `post`, or an earlier pod's restore) there is
//! nothing to wait for and the run ends 0, so the restore happens once. The decisions are in
//! [`plan::upgrade_progress`]; the reads go through [`Cluster::poll_paced`], at most twice a
//! minute, whose sleeps the run's request deadline does not count, and each read gets the whole
//! deadline ([`Cluster::restart_deadline`]): days of reads do not add up to `DEADLINE_SECONDS`.

use std::time::Duration;

use tracing::info;

use crate::cluster::{Cluster, Poll};
use crate::config::Config;
use crate::error::Error;
use crate::harvester_gate::{self, anything_of_ours};
use crate::model::Kind;
use crate::outcome::{Done, Outcome};
use crate::plan::upgrade_progress;
use crate::vocabulary::Objects;

/// How often the armed wait says what it waits for.
const SAY_EVERY: Duration = Duration::from_secs(600);

/// Before an armed `post`'s gate: returns once the upgrade has begun and ended (the objects read
/// again), or at once when there is nothing of ours to restore. Past `ARM_WAIT_SECONDS`: exit 9,
/// nothing written. Not armed: nothing.
pub async fn wait(
    cfg: &Config,
    cluster: &Cluster,
    objects: &mut Objects,
    done: &mut Vec<Done>,
) -> Result<(), Error> {
    let Some(arm) = cfg.arm else {
        return Ok(());
    };
    if !anything_of_ours(objects) {
        info!("armed post: nothing of ours to restore (a post has run): nothing to wait for");
        return Ok(());
    }
    let read_objects: Vec<&serde_json::Value> = [&objects.kubevirt, &objects.chart]
        .into_iter()
        .flatten()
        .collect();
    let since = upgrade_progress::record_time(&read_objects).unwrap_or_else(|| {
        jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    });
    let waits_for = format!(
        "the next upgrade (a Harvester Upgrade or UpgradePlan created at or after pre's record, \
         {since}, or one under way) to begin and to end, cleanup included"
    );
    if cfg.dry_run {
        done.push(note(cfg, format!("armed: would wait for {waits_for}")));
        return Ok(());
    }
    info!(since = %since, "armed post: waiting for {waits_for}");
    let mut seen: Option<String> = None;
    let bound = arm.wait;
    let waited = cluster
        .poll_paced(
            bound,
            (arm.every, SAY_EVERY),
            async || {
                cluster.restart_deadline();
                let mut now = Objects::default();
                for target in cfg.intent.targets() {
                    now.set(target.kind, cluster.get(&target).await?);
                }
                if !anything_of_ours(&now) {
                    return Ok(Poll::Ready(now));
                }
                let view = harvester_gate::read(cluster, cfg).await?;
                if seen.is_none() {
                    seen = upgrade_progress::begun(view.upgrade.as_ref(), &view.plans, &since);
                }
                let Some(began) = &seen else {
                    return Ok(Poll::Pending(format!(
                        "no upgrade has begun since pre's record ({since})"
                    )));
                };
                Ok(
                    match upgrade_progress::post_must_wait(view.upgrade.as_ref(), &view.plans, true)
                    {
                        None => Poll::Ready(now),
                        Some(why) => Poll::Pending(format!("{began} began: {why}")),
                    },
                )
            },
            |waited, seen| {
                info!(
                    waited_s = waited.as_secs(),
                    bound_s = bound.as_secs(),
                    "armed post, waiting: {seen}"
                )
            },
        )
        .await?;
    cluster.restart_deadline();
    match waited {
        Ok(now) => {
            for kind in [Kind::KubeVirt, Kind::ManagedChart] {
                if objects.get(kind).is_some() {
                    objects.set(kind, now.get(kind).cloned());
                }
            }
            let line = match &seen {
                Some(began) => format!("armed: {began} has ended; restoring"),
                None => "armed: nothing of ours left (a post ran meanwhile)".to_string(),
            };
            info!("{line}");
            done.push(note(cfg, line));
            Ok(())
        }
        Err(last) => Err(Error::ArmedBound(format!(
            "armed post: waited {}s (ARM_WAIT_SECONDS) for {waits_for}: {last}; nothing was \
             written, the suspension stays (turning updates on with no upgrade seen could start \
             the wave as the upgrade starts). Run post by hand once the upgrade has ended, or arm \
             again (hack/job.sh arm)",
            bound.as_secs()
        ))),
    }
}

fn note(cfg: &Config, line: String) -> Done {
    Done {
        target: cfg
            .intent
            .keys
            .target(Kind::KubeVirt)
            .expect("always named"),
        outcome: Outcome::Unchanged,
        actions: vec![line],
        warnings: vec![],
    }
}
