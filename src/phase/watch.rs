//! `PHASE=watch`: the resident guard, the chart's Deployment. It waits in the one waiting loop
//! ([`crate::waiting`]: read, decide) and acts on each decision as the Jobs would: `pre` at an
//! upgrade's creation, `post` at its end (cleanup included), nothing while a failed upgrade is
//! held. Until SIGTERM.

use std::io::Write as Output;

use tracing::{error, info};

use super::Read;
use super::post::post;
use super::pre::pre;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::context::Run;
use crate::error::Error;
use crate::plan::acting::Next;
use crate::plan::watch_decision::Decision;
use crate::summary::Summary;
use crate::vocabulary::Phase;
use crate::waiting::{ACT_RETRY_PAUSE, Loop, Pass, start_probes_and_metrics};

/// `PHASE=watch`: the resident guard, until SIGTERM. At an upgrade's creation it runs `pre`
/// (which decides whether it is needed, or late); at its end (cleanup included) `post`; after a
/// failed path-A upgrade it holds until the retry.
pub async fn resident_guard(
    cfg: &Config,
    cluster: &Cluster,
    out: &mut impl Output,
) -> Result<(), Error> {
    let settings = cfg.watch.clone().expect("PHASE=watch has its settings");
    let resync = settings.resync.as_secs();
    let metrics = start_probes_and_metrics(cfg, &settings).await;
    let mut lp = Loop::new(cfg, cluster, Some(metrics));
    // The watches first, and the first read once they have listed: what they listed, it reads.
    lp.start_watches();
    lp.watches_settled().await;
    loop {
        // Each pass has the whole deadline, from before the race below starts.
        cluster.restart_deadline();
        let pass = tokio::select! {
            r = lp.pass() => r,
            e = cluster.deadline_passed() => Err(e),
        };
        match pass {
            Ok(p) => {
                lp.record(&p).await;
                lp.say_retirement(&p).await;
                lp.say_blocked_deploy(&p).await;
                match p.next {
                    Next::SameRightAfter => info!(
                        "resident guard: {} again, right after it ran: run again once what it read changes (not by the guard's own writes), or in {resync} s",
                        p.decision.kind()
                    ),
                    Next::AlreadyActed => {}
                    Next::Act | Next::Nothing => {
                        lp.say(&p).await;
                        // After an act, read again at once: the objects and the decision have moved.
                        if p.next == Next::Act && act_on(&mut lp, &p, out).await {
                            continue;
                        }
                    }
                }
                // No act, or a failed one: what this pass read is what holds now.
                lp.report(&p).await;
            }
            Err(e) => error!(
                "resident guard: read failed ({e}); reading again at the next event or in {resync} s"
            ),
        }
        let pause = lp.pause_for(settings.resync);
        cluster.pause(pause, &mut lp.wake).await;
    }
}

/// `true`: an act ran and succeeded. The phase goes on from what the pass read.
async fn act_on(lp: &mut Loop<'_>, pass: &Pass, out: &mut impl Output) -> bool {
    let decision = &pass.decision;
    let (phase, why) = match decision {
        Decision::Suspend { describe, .. } => (Phase::Pre, format!("{describe} is under way")),
        Decision::Resuspend { .. } => (Phase::Pre, decision.line()),
        Decision::Restore(why) => (Phase::Post, why.to_string()),
        Decision::Hold { .. } | Decision::Wait(_) => return false,
    };
    info!("{}: {why}: running {phase}", lp.name());
    lp.cluster.restart_deadline();
    let cfg = lp.as_phase(phase);
    let mut done = Vec::new();
    let mut this_run = Run::new(&cfg, lp.cluster, &mut done);
    let read = Read {
        objects: pass.objects.clone(),
        view: pass.view.clone(),
    };
    let acting = async {
        match phase {
            // The pass that decided to suspend has read the releases on offer for `pre`.
            Phase::Pre => pre(&mut this_run, out, Some(read)).await,
            _ => post(&mut this_run, out, Some(read)).await,
        }
    };
    let result = tokio::select! {
        r = acting => r,
        e = lp.cluster.deadline_passed() => Err(e),
    };
    let line = Summary::of_run(&cfg.intent, cfg.dry_run, &done, &result).to_line();
    if let Some(m) = &lp.metrics {
        m.acted(phase, result.is_ok());
    }
    match &result {
        Ok(()) => info!(summary = %line, "{}: {phase} done", lp.name()),
        Err(e) => error!(
            summary = %line,
            "{}: {phase} failed ({e}); it is tried again at the next event or in {} s",
            lp.name(),
            ACT_RETRY_PAUSE.as_secs()
        ),
    }
    let ended = result.as_ref().map(|_| ()).map_err(ToString::to_string);
    let at = lp.clock();
    lp.state.after_act(decision, ended, at);
    result.is_ok()
}
