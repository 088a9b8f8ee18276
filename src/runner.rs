//! Runs a phase: read the objects, plan the whole phase ([`plan::plan_phase`]), then write step
//! by step ([`Cluster::converge`], which plans again on a conflict), and say what each write
//! did. Nothing is written unless every plan of the phase can be made.

use serde_json::{Value, json};
use tracing::{info, warn};

use crate::cluster::{Cluster, EventKind, Written};
use crate::config::{Config, LogFormat};
use crate::error::Error;
use crate::harvester_gate;
use crate::leftovers_check;
use crate::model::{Kind, Target};
use crate::outcome::{Done, Outcome};
use crate::plan;
use crate::plan::kubevirt::HOTPLUG_NOTICE;
use crate::report::Report;
use crate::vocabulary::{Objects, Phase, Plan, Step, Write};
use crate::warnings::{self, CHANGED_WHILE_SUSPENDED, SKIPPED_NOT_FOUND, Warning};

/// Runs the configured phase; `status` also returns its verdict, for the termination message.
/// `watch` runs until SIGTERM, running `pre` and `post` by [`run_phase`] itself.
pub async fn run(
    cfg: &Config,
    cluster: &Cluster,
    done: &mut Vec<Done>,
    out: &mut impl std::io::Write,
) -> Result<Option<String>, Error> {
    match cfg.intent.phase {
        Phase::Watch => {
            let run = async |cfg: &Config, done: &mut Vec<Done>| {
                run_phase(cfg, cluster, done, out).await.map(|_| ())
            };
            crate::resident::watch(cfg, cluster, run)
                .await
                .map(|()| None)
        }
        _ => run_phase(cfg, cluster, done, out).await,
    }
}

/// Runs one phase, `pre`, `post` or `status`, as its Job does.
pub async fn run_phase(
    cfg: &Config,
    cluster: &Cluster,
    done: &mut Vec<Done>,
    out: &mut impl std::io::Write,
) -> Result<Option<String>, Error> {
    match cfg.intent.phase {
        Phase::Status => status(cfg, cluster, done, out).await.map(Some),
        Phase::Pre | Phase::Post => {
            let (read, left) = change(cfg, cluster, done, out).await?;
            crate::fleet_wait::wait(cfg, cluster, read.as_ref(), &left, done)
                .await
                .map(|()| None)
        }
        Phase::Watch => unreachable!("the resident guard runs pre and post, never itself"),
    }
}

/// Writes the phase's steps; returns the ManagedChart as read at the start and the objects as
/// the phase left them.
async fn change(
    cfg: &Config,
    cluster: &Cluster,
    done: &mut Vec<Done>,
    out: &mut impl std::io::Write,
) -> Result<(Option<Value>, Objects), Error> {
    let intent = &cfg.intent;
    let mut objects = Objects::default();
    for target in intent.targets() {
        match cluster.get(&target).await? {
            Some(obj) => objects.set(target.kind, Some(obj)),
            None => done.push(missing(cfg, target, "nothing was written")?),
        }
    }
    // What the phase skips is read too, read-only, to say what of ours it leaves there.
    let skipped = leftovers_check::read_skipped(cfg, cluster, done).await;
    // Harvester's own upgrade first: `pre` may leave the suspension to it, `post` waits for its
    // cleanup (and reads the objects again after it, so Fleet's generation is taken after it).
    // The armed `post` first waits for the next upgrade to begin and end.
    crate::resident::armed(cfg, cluster, &mut objects, done).await?;
    if !harvester_gate::gate(cfg, cluster, &mut objects, done).await? {
        leftovers_check::after_steps(cfg, cluster, &objects, skipped, done).await;
        return Ok((objects.chart.clone(), objects));
    }
    let read = objects.chart.clone();
    // With ALLOW_MISSING, a `pre` without the KubeVirt CR has nothing to guard: it writes
    // nothing at all, not even the ManagedChart.
    if intent.phase == Phase::Pre
        && intent.steps.kubevirt
        && objects.kubevirt.is_none()
        && let Some(key) = objects.chart.take().and(intent.keys.chart.as_ref())
    {
        done.push(nothing_to_guard(key));
    }
    // The whole phase is planned first only to refuse a malformed object before any write; each
    // step is planned again below against the object as the previous write left it.
    plan::plan_phase(intent, &objects)?;
    let mut steps = plan::steps(intent).into_iter().peekable();
    while let Some(step) = steps.next() {
        let kind = step.target.kind;
        let Some(current) = objects.get(kind).cloned() else {
            continue;
        };
        #[cfg(feature = "failpoints")]
        if step.write == Write::Release && skip_release() {
            continue;
        }
        let written = write_step(cfg, cluster, &step, current, &objects).await?;
        // A dry run's patch that cannot be printed fails the run (exit 3), once this step is
        // recorded as done.
        let mut printed = Ok(());
        let (outcome, plan, object) = match written {
            Written::Missing => {
                let when = "it was deleted while the phase ran";
                done.push(missing(cfg, step.target.clone(), when)?);
                objects.set(kind, None);
                continue;
            }
            Written::Unchanged { plan, object } => (Outcome::Unchanged, plan, object),
            Written::Changed { plan, object } => {
                printed = after_write(cfg, cluster, &step, &plan, &object, out).await;
                let outcome = if cfg.dry_run {
                    Outcome::WouldChange
                } else {
                    Outcome::Changed
                };
                (outcome, plan, object)
            }
        };
        // One "already as wanted" line per object, once its last step is done without a write.
        if steps.peek().is_none_or(|next| next.target != step.target) {
            already_as_wanted(&step.target, outcome, &plan, done);
        }
        // Each warning also goes on the KubeVirt CR, where `kubectl describe` shows it.
        let kubevirt = if kind == Kind::KubeVirt {
            Some(&object)
        } else {
            objects.kubevirt.as_ref()
        };
        for w in &plan.warnings {
            cluster.warn(kubevirt, Some(&step.target), w).await;
        }
        objects.set(kind, Some(object));
        done.push(Done {
            target: step.target,
            outcome,
            actions: plan.actions,
            warnings: plan.warnings,
        });
        printed?;
    }
    leftovers_check::after_steps(cfg, cluster, &objects, skipped, done).await;
    Ok((read, objects))
}

/// A `pre` whose KubeVirt CR is missing (ALLOW_MISSING) leaves the ManagedChart alone.
fn nothing_to_guard(chart: &crate::model::ObjectKey) -> Done {
    Done {
        target: Target::new(Kind::ManagedChart, chart),
        outcome: Outcome::Unchanged,
        actions: vec![
            "left alone: the KubeVirt CR is missing, so there is nothing to guard".into(),
        ],
        warnings: vec![],
    }
}

/// One step's write: converged on the server, or, a dry run's release, planned and shown only
/// (it is planned against the restore's dry-run result, which the server did not keep, so it
/// could not apply there).
async fn write_step(
    cfg: &Config,
    cluster: &Cluster,
    step: &Step,
    current: Value,
    objects: &Objects,
) -> Result<Written, Error> {
    let intent = &cfg.intent;
    if cfg.dry_run && step.write == Write::Release {
        let plan = plan::plan_step(intent, step, objects)?.unwrap_or_default();
        return Ok(match plan.patch {
            Some(_) => Written::Changed {
                plan,
                object: current,
            },
            None => Written::Unchanged {
                plan,
                object: current,
            },
        });
    }
    let kind = step.target.kind;
    cluster
        .converge(&step.target, current, |obj| {
            let mut now = objects.clone();
            now.set(kind, Some(obj.clone()));
            plan::plan_step(intent, step, &now).map(Option::unwrap_or_default)
        })
        .await
}

/// The "already as wanted" line of an object whose steps (this last one and those in `done`)
/// wrote nothing.
fn already_as_wanted(target: &Target, outcome: Outcome, plan: &Plan, done: &[Done]) {
    let of_it = || done.iter().filter(|d| d.target == *target);
    if outcome != Outcome::Unchanged || !of_it().all(|d| d.outcome == Outcome::Unchanged) {
        return;
    }
    let mut actions: Vec<&String> = of_it().flat_map(|d| &d.actions).collect();
    actions.extend(&plan.actions);
    info!(object = %target, actions = ?actions, "already as wanted: nothing to write");
}

/// A missing object: an error that names it and what to check, unless `ALLOW_MISSING` is on.
fn missing(cfg: &Config, target: Target, when: &str) -> Result<Done, Error> {
    let hint = match target.kind {
        Kind::KubeVirt => "check KUBEVIRT_NAMESPACE and KUBEVIRT_NAME (kubectl get kubevirts -A)",
        _ => {
            "check MANAGEDCHART_NAMESPACE and MANAGEDCHART_NAME (kubectl get managedcharts -A); \
             for KubeVirt without Fleet set MANAGEDCHART_NAME= (empty)"
        }
    };
    // `status` writes nothing whatever happens: it has no `when` to tell.
    let when = if when.is_empty() {
        String::new()
    } else {
        format!("; {when}")
    };
    if !cfg.allow_missing {
        return Err(Error::Missing {
            target,
            hint: format!("{hint}, or set ALLOW_MISSING=true to skip it{when}"),
        });
    }
    let message = format!("{target} not found: skipped (ALLOW_MISSING=true){when}; {hint}");
    warn!(object = %target, reason = SKIPPED_NOT_FOUND, "{message}");
    Ok(Done {
        target,
        outcome: Outcome::Missing,
        actions: vec![],
        warnings: vec![Warning {
            reason: SKIPPED_NOT_FOUND,
            message,
        }],
    })
}

/// After a write: the dry-run patch on stdout, the log line, the Event, and (test builds) the
/// failpoint. The error is a dry-run patch that stdout did not take.
async fn after_write(
    cfg: &Config,
    cluster: &Cluster,
    step: &Step,
    plan: &Plan,
    object: &serde_json::Value,
    out: &mut impl std::io::Write,
) -> Result<(), Error> {
    let mut printed = Ok(());
    if cfg.dry_run {
        let patch = plan.patch.as_ref().expect("a change has a patch");
        let line = json!({"object": step.target.to_string(), "dryRun": true, "patch": patch});
        printed = writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| Error::Output(e.to_string()));
    }
    if cfg.dry_run {
        info!(object = %step.target, actions = ?plan.actions, "would write (dry run: nothing changed)");
    } else {
        info!(object = %step.target, actions = ?plan.actions, "written");
    }
    // A Normal Event for a change that did something: a `post` that keeps a later choice only
    // drops our record, and its Warning Event says why.
    let kept = plan
        .warnings
        .iter()
        .any(|w| w.reason == CHANGED_WHILE_SUSPENDED);
    if step.write == Write::Change
        && step.target.kind == Kind::KubeVirt
        && !plan.actions.is_empty()
        && !kept
    {
        let (reason, verb) = match cfg.intent.phase {
            Phase::Pre => (warnings::SUSPENDED, "Suspended automated workload updates"),
            _ => (
                warnings::RESTORED,
                "Restored the workload update methods as they were before pre",
            ),
        };
        let mut note = format!(
            "{verb} ({}): {}",
            crate::model::FIELD_MANAGER,
            plan.actions.join("; ")
        );
        if cfg.intent.phase == Phase::Pre {
            info!("{HOTPLUG_NOTICE}");
            note = format!("{note}. {HOTPLUG_NOTICE}");
        }
        cluster
            .event(object, EventKind::Normal, reason, &note)
            .await;
    }
    #[cfg(feature = "failpoints")]
    {
        failpoint_after_write(step.target.kind);
        if let Some(ms) = pause_after_write() {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
    }
    printed
}

async fn status(
    cfg: &Config,
    cluster: &Cluster,
    done: &mut Vec<Done>,
    out: &mut impl std::io::Write,
) -> Result<String, Error> {
    let keys = &cfg.intent.keys;
    let kubevirt = Target::new(Kind::KubeVirt, &keys.kubevirt);
    let kv = cluster.get(&kubevirt).await?;
    // The ManagedChart half is reported as far as it can be: without Fleet its CRD is missing.
    let chart = match &keys.chart {
        Some(key) => {
            let target = Target::new(Kind::ManagedChart, key);
            let read = match cluster.get(&target).await {
                Ok(obj) => Ok(obj),
                Err(e @ Error::NotServed { .. }) => Err(e.to_string()),
                Err(e) => return Err(e),
            };
            Some((target, read))
        }
        None => None,
    };
    let migrations = cluster.list_migrations().await?;
    let view = harvester_gate::read(cluster, cfg).await?;
    // Without a name, the default ManagedChart is read too, for what of ours it still carries.
    let unnamed = match &cfg.unnamed_chart {
        Some(key) => {
            leftovers_check::peek(cluster, Target::new(Kind::ManagedChart, key), false, done).await
        }
        None => None,
    };
    let mut report = Report::new(
        &cfg.intent,
        (&kubevirt, kv.as_ref()),
        chart
            .as_ref()
            .map(|(t, r)| (t, r.as_ref().map(Option::as_ref))),
        &migrations,
    )
    .with_harvester(view.upgrade.clone(), view.offered.clone(), view.coming());
    if let Some((target, obj)) = &unnamed {
        report = report.with_unnamed_chart(&cfg.intent, target, obj);
    }
    let mut objects = Objects::default();
    objects.set(Kind::KubeVirt, kv.clone());
    if let Some((_, Ok(obj))) = &chart {
        objects.set(Kind::ManagedChart, obj.clone());
    }
    if let Some(v) = plan::monitoring::unprotected_verdict(kv.as_ref(), view.upgrade.as_ref()) {
        report.verdict = v;
    }
    report
        .warnings
        .extend(crate::build::mismatch(cfg.chart_version.as_deref()));
    // Said where Harvester's upgrades are served: elsewhere there is no release to go by.
    report.retirement = view.upgrades_served.then(|| {
        harvester_gate::retirement(view.current.as_deref(), &view.on_offer, &view, &objects)
    });
    // The report's warnings are the termination message's too.
    done.push(Done {
        target: kubevirt.clone(),
        outcome: Outcome::Unchanged,
        actions: vec![],
        warnings: report
            .warnings
            .iter()
            .map(|w| Warning {
                reason: "",
                message: w.clone(),
            })
            .collect(),
    });
    let mut armed = armed_section(cfg, cluster, done).await;
    armed.push_str(&resident_section(cfg, cluster, done).await);
    match cfg.log_format {
        LogFormat::Json => writeln!(
            out,
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        ),
        LogFormat::Text => write!(
            out,
            "{report}{armed}{}",
            crate::build::line(cfg.chart_version.as_deref())
        ),
    }
    .and_then(|()| out.flush())
    .map_err(|e| Error::Output(e.to_string()))?;
    if kv.is_none() {
        done.push(missing(cfg, kubevirt, "")?);
    }
    // Like the other phases: a ManagedChart that is not there (its CRD is) is a wrong name.
    if let Some((target, Ok(None))) = chart {
        done.push(missing(cfg, target, "")?);
    }
    Ok(report.verdict)
}

/// `status`: the armed `post`'s Job, if there is one: what it waits for and since
/// when, for the text report and the termination message's steps.
async fn armed_section(cfg: &Config, cluster: &Cluster, done: &mut Vec<Done>) -> String {
    let ns = &cfg.intent.keys.kubevirt.namespace;
    let job = cluster.job(ns, plan::upgrade_progress::ARMED_JOB).await;
    let Some(lines) = plan::upgrade_progress::armed_lines(job.as_ref()) else {
        return String::new();
    };
    done.push(Done {
        target: Target::new(Kind::KubeVirt, &cfg.intent.keys.kubevirt),
        outcome: Outcome::Unchanged,
        actions: vec![lines.join(" ")],
        warnings: vec![],
    });
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// `status`: the resident guard's last decision, from its newest `ResidentGuardDecided` Event on
/// the KubeVirt CR's namespace (the guard keeps nothing else): what, when, which pod. And its
/// Warning of an upgrade under way unprotected, while that is its last word: newer than its last
/// decision (a suspension that succeeds, or the upgrade's end, is a new decision).
async fn resident_section(cfg: &Config, cluster: &Cluster, done: &mut Vec<Done>) -> String {
    let ns = &cfg.intent.keys.kubevirt.namespace;
    let Some((time, pod, note)) = cluster.latest_event(ns, warnings::RESIDENT).await else {
        return String::new();
    };
    let mut lines = vec![format!(
        "resident guard  {pod} last decided at {time}: {note}"
    )];
    let at = |t: &str| t.parse::<jiff::Timestamp>().ok();
    let mut unprotected: Option<(String, &str, String)> = None;
    for reason in [
        warnings::UPGRADE_HELD_BY_POLICY,
        warnings::UPGRADE_UNPROTECTED,
    ] {
        if let Some((t, _, note)) = cluster.latest_event(ns, reason).await
            && at(&t) > at(&time)
            && unprotected.as_ref().is_none_or(|(u, _, _)| at(&t) > at(u))
        {
            unprotected = Some((t, reason, note));
        }
    }
    if let Some((t, reason, note)) = unprotected {
        lines.push(format!("resident guard  {reason} at {t}: {note}"));
    }
    done.push(Done {
        target: Target::new(Kind::KubeVirt, &cfg.intent.keys.kubevirt),
        outcome: Outcome::Unchanged,
        actions: lines.clone(),
        warnings: vec![],
    });
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Test builds only: `FAILPOINTS=after-write-managedchart=return` kills the process with SIGKILL
/// right after its first write of that object; `...=1*off->return` after its second (`post`'s
/// release); `...=sleep(3000)` pauses there (for API server restarts).
#[cfg(feature = "failpoints")]
fn failpoint_after_write(kind: Kind) {
    let name = match kind {
        Kind::KubeVirt => "after-write-kubevirt",
        _ => "after-write-managedchart",
    };
    fail::fail_point!(name, |_| {
        // SAFETY: kill(2) on our own pid; nothing is left to clean up, which is the point.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    });
}

/// Test builds only: `FAILPOINTS=pause-after-write=return(6000)` pauses 6 s after every write,
/// on the runtime, so a SIGTERM is answered at once as in a real run (a failpoint's `sleep(...)`
/// blocks the runtime, and the signal waits).
#[cfg(feature = "failpoints")]
fn pause_after_write() -> Option<u64> {
    fail::fail_point!("pause-after-write", |ms| ms.and_then(|m| m.parse().ok()));
    None
}

/// Test builds only: `FAILPOINTS=skip-release=return` runs `post` without its release writes,
/// the control case of the lifetime tests (a claim left behind must make them fail).
#[cfg(feature = "failpoints")]
fn skip_release() -> bool {
    fail::fail_point!("skip-release", |_| true);
    false
}
