//! The wait for Fleet after a phase (docs/design.md, "Waiting for Fleet"); exit 8 if not applied.

use serde_json::Value;
use tracing::info;

use crate::cluster::Poll;
use crate::context::Run;
use crate::error::Error;
use crate::model::{Kind, Target};
use crate::outcome::Done;
use crate::plan::fleet_status::{self, Wait, Waited};
use crate::vocabulary::Objects;
use crate::warnings::{CONFLICT, Warning};

/// `read`: the ManagedChart before our first write of its spec. A rerun `pre` waits too while our
/// records are on the chart: a Complete `pre` means "Fleet has applied the suspension".
pub async fn wait(run: &mut Run<'_>, read: Option<&Value>, left: &Objects) -> Result<(), Error> {
    let cfg = run.cfg;
    let intent = &run.cfg.intent;
    let target = intent.keys.target(Kind::ManagedChart);
    let Some(target) = target.filter(|_| intent.steps.writes(Kind::ManagedChart)) else {
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
    let kubevirt = left.kubevirt.as_ref();
    let after = match fleet_status::wait_for(intent.phase, &target, before, chart) {
        Wait::No(why) => {
            info!(object = %target, "{why}");
            return Ok(());
        }
        Wait::Warn(w) => {
            run.warned(kubevirt, Some(target), w).await;
            return Ok(());
        }
        Wait::For { after } => after,
    };
    // A claim Fleet's deploy will conflict with is said at once (a wait that runs out repeats it).
    let kv = match kubevirt {
        Some(kv) => Some(kv.clone()),
        None => run.cluster.get(&run.kubevirt()).await.ok().flatten(),
    };
    let conflicts = kv.map_or_else(Vec::new, |kv| fleet_status::conflicts(&kv, chart));
    for c in &conflicts {
        let reason = CONFLICT;
        let message = c.to_string();
        run.warned(kubevirt, Some(target.clone()), Warning { reason, message })
            .await;
    }
    if cfg.fleet_wait.is_zero() {
        info!(object = %target, "FLEET_WAIT_SECONDS=0: no wait for Fleet to apply the change");
        return Ok(());
    }
    poll_until_applied(run, kubevirt, target, after, &conflicts).await
}

async fn poll_until_applied(
    run: &mut Run<'_>,
    kubevirt: Option<&Value>,
    target: Target,
    after: Option<i64>,
    conflicts: &[fleet_status::Conflict],
) -> Result<(), Error> {
    let cfg = run.cfg;
    let cluster = run.cluster;
    let bound = cfg.fleet_wait.as_secs();
    info!(object = %target, bound_s = bound, "waiting for Fleet to apply the change");
    let start = std::time::Instant::now();
    let read = async || {
        let now = cluster.get(&target).await?;
        let verdict = fleet_status::poll_view(now.as_ref(), after);
        Ok(verdict.map_or_else(Poll::Pending, Poll::Ready))
    };
    let progress = |waited: std::time::Duration, said: &str| {
        info!(object = %target, waited_s = waited.as_secs(), "waiting for Fleet: {said}");
    };
    let polled = cluster.poll(cfg.fleet_wait, read, progress).await?;
    let took = start.elapsed().as_secs_f64();
    match fleet_status::waited(&target, polled, bound, took, conflicts) {
        Waited::Applied(action) => {
            info!(object = %target, took_s = took, "{action}");
            run.push(Done::noted(target, vec![action]));
            Ok(())
        }
        Waited::Paused(w) => {
            run.warned(kubevirt, Some(target), w).await;
            Ok(())
        }
        Waited::NotApplied(message) => Err(Error::FleetNotApplied { target, message }),
    }
}
