//! Waiting for Fleet after a phase (docs/design.md, "Waiting for Fleet"): once `pre` or `post`
//! has changed the ManagedChart's deployed spec, it ends only when Fleet reports that change
//! applied, and fails (exit 8) when Fleet reports an error or the bound passes. The verdicts are
//! in `plan::fleet`; the polling is `Cluster::poll`; this module puts them in order.

use serde_json::Value;
use tracing::{info, warn};

use crate::cluster::{Cluster, EventKind, Poll};
use crate::config::Config;
use crate::error::Error;
use crate::model::{Kind, Target};
use crate::outcome::{Done, Outcome};
use crate::plan::fleet_status::{self, Fleet};
use crate::vocabulary::{Objects, Phase};
use crate::warnings::{CONFLICT, NOT_APPLIED, PAUSED};

/// After the steps: waits until Fleet has applied the phase's change of the ManagedChart's
/// deployed spec (docs/design.md, "Waiting for Fleet"). `read`: the ManagedChart as read at the
/// start of the phase (the observedGeneration before our first write of the spec); `left`: the
/// objects as the phase left them. A `pre` that wrote nothing to the spec (a rerun) waits the
/// same way for the current generation when our records are on the chart, so that a Complete
/// `pre` always means "Fleet has applied the suspension".
pub async fn wait(
    cfg: &Config,
    cluster: &Cluster,
    read: Option<&Value>,
    left: &Objects,
    done: &mut Vec<Done>,
) -> Result<(), Error> {
    let intent = &cfg.intent;
    let Some(target) = intent
        .keys
        .target(Kind::ManagedChart)
        .filter(|_| intent.steps.writes(Kind::ManagedChart))
    else {
        info!("the ManagedChart steps are off: no wait for Fleet");
        return Ok(());
    };
    let (Some(before), Some(chart)) = (read, left.chart.as_ref()) else {
        return Ok(());
    };
    if cfg.dry_run {
        info!(object = %target, "dry run: nothing changed, so there is nothing for Fleet to apply; no wait");
        return Ok(());
    }
    let wrote = fleet_status::changes_deployed_spec(before, chart);
    // A rerun waits only for `pre`'s suspension (our records on the chart). A `post` that writes
    // nothing cannot tell an earlier run's restore from anyone else's change (or from a `pre`
    // that never wrote): it does not wait, but says so if Fleet has not applied the spec.
    let pre_rerun = intent.phase == Phase::Pre && fleet_status::records_on_chart(chart);
    if !wrote && !pre_rerun {
        match fleet_status::fleet_view(chart, None) {
            Fleet::Waiting(said) | Fleet::Failed(said) => {
                let message = format!(
                    "Fleet has not applied {target}'s current spec ({said}); this run wrote \
                     nothing to it, so it does not wait: an earlier run's change or someone \
                     else's is not deployed yet"
                );
                fleet_warning(cluster, left, done, &target, NOT_APPLIED, message).await;
            }
            _ => {
                info!(object = %target, "the deployed spec was not changed: nothing for Fleet to apply; no wait");
            }
        }
        return Ok(());
    }
    let after = wrote.then(|| fleet_status::observed_generation(before).unwrap_or(0));
    match fleet_status::fleet_view(chart, after) {
        Fleet::Paused => {
            let message = format!(
                "{target} is paused (spec.paused: true): Fleet deploys the change when the chart is \
                 unpaused; Harvester refuses to start an upgrade until it is Ready again"
            );
            fleet_warning(cluster, left, done, &target, PAUSED, message).await;
            return Ok(());
        }
        Fleet::NoStatus if !fleet_status::has_status(before) => {
            info!(object = %target, "no Fleet status on the ManagedChart (no controller reports on it): no wait");
            return Ok(());
        }
        Fleet::Applied(_) if !wrote => {
            info!(object = %target, "Fleet has applied the current generation: no wait");
            return Ok(());
        }
        _ => {}
    }
    // A claim that Fleet's deploy will conflict with is said at once, with how to release it.
    let kubevirt = match &left.kubevirt {
        Some(kv) => Some(kv.clone()),
        None => match intent.keys.target(Kind::KubeVirt) {
            Some(t) => cluster.get(&t).await.ok().flatten(),
            None => None,
        },
    };
    let conflicts = kubevirt
        .as_ref()
        .map(|kv| fleet_status::conflicts(kv, chart))
        .unwrap_or_default();
    for c in &conflicts {
        fleet_warning(cluster, left, done, &target, CONFLICT, c.to_string()).await;
    }
    let cause = match conflicts.first() {
        Some(c) => format!("; the cause the guard sees: {c}"),
        None => String::new(),
    };
    if cfg.fleet_wait.is_zero() {
        info!(object = %target, "FLEET_WAIT_SECONDS=0: no wait for Fleet to apply the change");
        return Ok(());
    }
    let bound = cfg.fleet_wait.as_secs();
    info!(object = %target, bound_s = bound, "waiting for Fleet to apply the change");
    let start = std::time::Instant::now();
    let polled = cluster
        .poll(
            cfg.fleet_wait,
            async || {
                let Some(now) = cluster.get(&target).await? else {
                    return Ok(Poll::Ready(Fleet::Failed(
                        "the ManagedChart was deleted".into(),
                    )));
                };
                Ok(match fleet_status::fleet_view(&now, after) {
                    Fleet::Waiting(said) => Poll::Pending(said),
                    Fleet::NoStatus => Poll::Pending("no Fleet status".into()),
                    verdict => Poll::Ready(verdict),
                })
            },
            |waited, said| {
                info!(object = %target, waited_s = waited.as_secs(), "waiting for Fleet: {said}");
            },
        )
        .await?;
    let took = start.elapsed().as_secs_f64();
    match polled {
        Ok(Fleet::Applied(generation)) => {
            let generation =
                generation.map_or(String::new(), |g| format!(" (Bundle generation {g})"));
            let action =
                format!("Fleet applied the change{generation} {took:.1} s after the write");
            info!(object = %target, took_s = took, "{action}");
            done.push(Done {
                target,
                outcome: Outcome::Unchanged,
                actions: vec![action],
                warnings: vec![],
            });
            Ok(())
        }
        Ok(Fleet::Paused) => {
            let message = format!(
                "{target} was paused while waiting: Fleet deploys the change when it is unpaused"
            );
            fleet_warning(cluster, left, done, &target, PAUSED, message).await;
            Ok(())
        }
        Ok(Fleet::Failed(said)) => Err(Error::FleetNotApplied {
            target,
            message: format!("Fleet reports an error for the new generation: {said}{cause}"),
        }),
        Ok(other) => unreachable!("the poll returns a final verdict: {other:?}"),
        Err(last) => Err(Error::FleetNotApplied {
            target,
            message: format!(
                "not applied within FLEET_WAIT_SECONDS={bound}; Fleet last said: {last}{cause}"
            ),
        }),
    }
}

/// A warning of the Fleet wait: logged, an Event on the KubeVirt CR, and in the summary.
async fn fleet_warning(
    cluster: &Cluster,
    left: &Objects,
    done: &mut Vec<Done>,
    target: &Target,
    reason: &'static str,
    message: String,
) {
    warn!(object = %target, reason, "{message}");
    if let Some(kv) = &left.kubevirt {
        cluster
            .event(kv, EventKind::Warning, reason, &message)
            .await;
    }
    done.push(Done {
        target: target.clone(),
        outcome: Outcome::Unchanged,
        actions: vec![],
        warnings: vec![crate::warnings::Warning { reason, message }],
    });
}
