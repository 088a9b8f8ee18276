//! The armed `post` reads at its own pace (`ARM_POLL_SECONDS`), watches nothing, never suspends.

use tokio::time::Instant;
use tracing::info;

use super::{Loop, since};
use crate::context::Run;
use crate::error::Error;
use crate::model::Kind;
use crate::plan::ownership::anything_of_ours;
use crate::plan::watch_decision::Decision;
use crate::vocabulary::Objects;

/// Before `post`'s gate: waits for the next upgrade to begin and end (cleanup included; held
/// after a failed path-A upgrade), then returns with the objects read again, for `post` to
/// restore. Past `ARM_WAIT_SECONDS`: exit 9, nothing written.
pub async fn armed(run: &mut Run<'_>, objects: &mut Objects) -> Result<(), Error> {
    let cfg = run.cfg;
    let cluster = run.cluster;
    let Some(arm) = cfg.arm else {
        return Ok(());
    };
    if !anything_of_ours(objects) {
        info!("armed post: nothing of ours to restore (a post has run): nothing to wait for");
        return Ok(());
    }
    let since = since(objects);
    let waits_for = format!(
        "the next upgrade (a Harvester Upgrade or UpgradePlan created at or after pre's record, \
         {since}, or one under way) to begin and to end, cleanup included"
    );
    if cfg.dry_run {
        run.noted(vec![format!("armed: would wait for {waits_for}")]);
        return Ok(());
    }
    info!(since = %since, "armed post: waiting for {waits_for}");
    let mut lp = Loop::new(cfg, cluster, None);
    let end = Instant::now() + arm.wait;
    loop {
        let pass = lp.pass().await?;
        lp.say(&pass).await;
        if let Decision::Restore(why) = &pass.decision {
            for kind in [Kind::KubeVirt, Kind::ManagedChart] {
                if objects.get(kind).is_some() {
                    objects.set(kind, pass.objects.get(kind).cloned());
                }
            }
            run.said(format!("armed: {why}; restoring"));
            cluster.restart_deadline();
            return Ok(());
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::ArmedBound(format!(
                "armed post: waited {}s (ARM_WAIT_SECONDS) for {waits_for}: {}; nothing was \
                 written, the suspension stays (turning updates on with no upgrade seen could \
                 start the wave as the upgrade starts). Run post by hand once the upgrade has \
                 ended, or arm again (hack/job.sh arm)",
                arm.wait.as_secs(),
                pass.decision.line()
            )));
        }
        cluster.pause(arm.every.min(left), &mut lp.wake).await;
    }
}
