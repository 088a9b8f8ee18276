//! The writes of `pre` and `post`: the whole phase planned first (a malformed object refused
//! before any write), then each step written by [`Cluster::converge`] (a conflict re-read and
//! planned again), said, and its Event made.

use std::io::Write as Output;

use serde_json::{Value, json};
use tracing::info;

use crate::cluster::{Cluster, EventKind, Written};
use crate::config::Config;
use crate::context::Run;
use crate::error::Error;
use crate::model::{FIELD_MANAGER, Kind, Target};
use crate::outcome::{Done, Outcome};
use crate::plan;
use crate::plan::kubevirt::HOTPLUG_NOTICE;
use crate::vocabulary::{Objects, Phase, Plan, Step, Write};
use crate::warnings::{self, CHANGED_WHILE_SUSPENDED};

/// Plans the whole phase, then writes it step by step.
pub(super) async fn write(
    run: &mut Run<'_>,
    objects: &mut Objects,
    out: &mut impl Output,
) -> Result<(), Error> {
    // The whole phase is planned first only to refuse a malformed object before any write.
    plan::plan_phase(&run.cfg.intent, objects)?;
    write_steps(run, objects, out).await
}

async fn write_steps(
    run: &mut Run<'_>,
    objects: &mut Objects,
    out: &mut impl Output,
) -> Result<(), Error> {
    let cfg = run.cfg;
    let cluster = run.cluster;
    let mut steps = plan::steps(&cfg.intent).into_iter().peekable();
    while let Some(step) = steps.next() {
        let kind = step.target.kind;
        let Some(current) = objects.get(kind).cloned() else {
            continue;
        };
        #[cfg(feature = "failpoints")]
        if step.write == Write::Release && skip_release() {
            continue;
        }
        // A dry run's patch that cannot be printed fails the run (exit 3) after the step's record.
        let mut printed = Ok(());
        let (outcome, plan, object) =
            match write_step(cfg, cluster, &step, current, objects).await? {
                Written::Missing => {
                    let when = "it was deleted while the phase ran";
                    run.push(Done::missing(cfg.allow_missing, step.target.clone(), when)?);
                    objects.set(kind, None);
                    continue;
                }
                Written::Unchanged { plan, object } => (Outcome::Unchanged, plan, object),
                Written::Changed { plan, object } if cfg.dry_run => {
                    (Outcome::WouldChange, plan, object)
                }
                Written::Changed { plan, object } => (Outcome::Changed, plan, object),
            };
        if outcome != Outcome::Unchanged {
            printed = after_write(run, &step, &plan, &object, out).await;
        }
        // One "already as wanted" line per object, once its last step is done without a write.
        if steps.peek().is_none_or(|next| next.target != step.target) {
            already_as_wanted(&step.target, outcome, &plan, run.done);
        }
        objects.set(kind, Some(object));
        let done = Done {
            target: step.target,
            outcome,
            actions: plan.actions,
            warnings: plan.warnings,
        };
        run.step_done(objects.kubevirt.as_ref(), done).await;
        printed?;
    }
    Ok(())
}

/// A dry run's release is planned and shown only: against the restore's dry-run result, which
/// the server did not keep, it could not apply there.
async fn write_step(
    cfg: &Config,
    cluster: &Cluster,
    step: &Step,
    object: Value,
    objects: &Objects,
) -> Result<Written, Error> {
    let intent = &cfg.intent;
    if cfg.dry_run && step.write == Write::Release {
        let plan = plan::plan_step(intent, step, objects)?.unwrap_or_default();
        return Ok(match plan.patch {
            Some(_) => Written::Changed { plan, object },
            None => Written::Unchanged { plan, object },
        });
    }
    let kind = step.target.kind;
    cluster
        .converge(&step.target, object, |obj| {
            let mut now = objects.clone();
            now.set(kind, Some(obj.clone()));
            plan::plan_step(intent, step, &now).map(Option::unwrap_or_default)
        })
        .await
}

fn already_as_wanted(target: &Target, outcome: Outcome, plan: &Plan, done: &[Done]) {
    let of_it = || done.iter().filter(|d| d.target == *target);
    if outcome != Outcome::Unchanged || !of_it().all(|d| d.outcome == Outcome::Unchanged) {
        return;
    }
    let mut actions: Vec<&String> = of_it().flat_map(|d| &d.actions).collect();
    actions.extend(&plan.actions);
    info!(object = %target, actions = ?actions, "already as wanted: nothing to write");
}

async fn after_write(
    run: &mut Run<'_>,
    step: &Step,
    plan: &Plan,
    object: &serde_json::Value,
    out: &mut impl Output,
) -> Result<(), Error> {
    let cfg = run.cfg;
    let printed = if cfg.dry_run {
        let patch = plan.patch.as_ref().expect("a change has a patch");
        let line = json!({"object": step.target.to_string(), "dryRun": true, "patch": patch});
        let printed = writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| Error::Output(e.to_string()));
        info!(object = %step.target, actions = ?plan.actions, "would write (dry run: nothing changed)");
        printed
    } else {
        info!(object = %step.target, actions = ?plan.actions, "written");
        Ok(())
    };
    // A Normal Event for a change that did something: a `post` that keeps a later choice only
    // drops our record, and its Warning Event says why.
    let kept = |w: &warnings::Warning| w.reason == CHANGED_WHILE_SUSPENDED;
    if step.write == Write::Change
        && step.target.kind == Kind::KubeVirt
        && !plan.actions.is_empty()
        && !plan.warnings.iter().any(kept)
    {
        let note = |verb| format!("{verb} ({FIELD_MANAGER}): {}", plan.actions.join("; "));
        let (reason, note) = match cfg.intent.phase {
            Phase::Pre => {
                info!("{HOTPLUG_NOTICE}");
                let note = note("Suspended automated workload updates");
                (warnings::SUSPENDED, format!("{note}. {HOTPLUG_NOTICE}"))
            }
            _ => {
                let restored = "Restored the workload update methods as they were before pre";
                (warnings::RESTORED, note(restored))
            }
        };
        run.event(object, EventKind::Normal, reason, &note).await;
    }
    #[cfg(feature = "failpoints")]
    failpoints_after_write(step.target.kind).await;
    printed
}

/// `FAILPOINTS` (docs/testing.md): `after-write-<kind>` kills or pauses after that write;
/// `pause-after-write` sleeps on the runtime, as a failpoint's `sleep(...)` would block SIGTERM.
#[cfg(feature = "failpoints")]
async fn failpoints_after_write(kind: Kind) {
    let name = format!("after-write-{}", kind.name().to_lowercase());
    // SAFETY: kill(2) on our own pid; nothing is left to clean up, which is the point.
    fail::fail_point!(&name, |_| unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    });
    let pause = || -> Option<u64> {
        fail::fail_point!("pause-after-write", |ms| ms.and_then(|m| m.parse().ok()));
        None
    };
    if let Some(ms) = pause() {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// `FAILPOINTS=skip-release=return`: `post` without its release, the lifetime tests' control case.
#[cfg(feature = "failpoints")]
fn skip_release() -> bool {
    fail::fail_point!("skip-release", |_| true);
    false
}
