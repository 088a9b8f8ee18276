//! The order of the steps. `pre` changes the ManagedChart first and the KubeVirt CR second;
//! `post` the reverse, so the values Helm would apply always agree with what we own (DESIGN §4.3).
//! Every object is read and planned before the first write: a malformed object means no write.

use std::io::Write;

use serde_json::{Value, json};
use tracing::{info, warn};

use crate::cluster::{Cluster, Kind, Target, Written};
use crate::config::{Config, LogFormat, Phase};
use crate::error::Error;
use crate::plan::{self, Malformed, Plan, ValueRecord};
use crate::report::{self, MIGRATION_PREFIX, Report};
use crate::summary::{Outcome, Summary};

pub async fn run(
    cfg: &Config,
    cluster: &Cluster,
    summary: &mut Summary,
    out: &mut impl Write,
) -> Result<(), Error> {
    match cfg.phase {
        Phase::Status => status(cfg, cluster, out).await,
        Phase::Pre | Phase::Post => change(cfg, cluster, summary, out).await,
    }
}

fn targets(cfg: &Config) -> Vec<Target> {
    let kubevirt = Target {
        kind: Kind::KubeVirt,
        key: cfg.kubevirt.clone(),
    };
    let chart = cfg.chart.clone().map(|key| Target {
        kind: Kind::ManagedChart,
        key,
    });
    match cfg.phase {
        Phase::Pre => chart.into_iter().chain([kubevirt]).collect(),
        _ => [kubevirt].into_iter().chain(chart).collect(),
    }
}

fn enabled(cfg: &Config, kind: Kind) -> bool {
    match kind {
        Kind::KubeVirt => cfg.step_kubevirt,
        Kind::ManagedChart => cfg.chart_step(),
    }
}

/// What one object's plan needs to know of the other: the KubeVirt CR's original (for `pre`
/// to copy to the ManagedChart) and the ManagedChart's copy of it (for the KubeVirt plan).
#[derive(Default)]
struct Hints {
    kubevirt_original: Option<ValueRecord>,
    chart_copy: Option<ValueRecord>,
}

impl Hints {
    /// Learns from an object as read or written.
    fn learn(&mut self, kind: Kind, obj: &Value) -> Result<(), Malformed> {
        match kind {
            Kind::KubeVirt => self.kubevirt_original = Some(plan::kubevirt_original(obj)?),
            Kind::ManagedChart => self.chart_copy = plan::kubevirt_copy(obj)?,
        }
        Ok(())
    }
}

fn plan_for(cfg: &Config, kind: Kind, obj: &Value, hints: &Hints) -> Result<Plan, Malformed> {
    let kv = &cfg.kubevirt;
    let (values, compare) = (cfg.step_chart_values, cfg.step_compare_patches);
    let copy = hints.chart_copy.as_ref();
    match (cfg.phase, kind) {
        (Phase::Pre, Kind::KubeVirt) => plan::kubevirt_pre(obj, copy),
        (Phase::Pre, Kind::ManagedChart) => {
            plan::chart_pre(obj, kv, values, compare, hints.kubevirt_original.as_ref())
        }
        (_, Kind::KubeVirt) => plan::kubevirt_post(obj, cfg.fallback.as_deref(), copy),
        (_, Kind::ManagedChart) => plan::chart_post(obj, kv, values, compare),
    }
}

async fn change(
    cfg: &Config,
    cluster: &Cluster,
    summary: &mut Summary,
    out: &mut impl Write,
) -> Result<(), Error> {
    let mut work = Vec::new();
    for target in targets(cfg) {
        if !enabled(cfg, target.kind) {
            summary.step(target.to_string(), Outcome::Disabled, vec![]);
            continue;
        }
        summary.step(target.to_string(), Outcome::NotReached, vec![]);
        work.push(target);
    }
    // Read and plan everything first.
    let mut read = Vec::new();
    let mut hints = Hints::default();
    for target in work {
        match cluster.get(&target).await? {
            None => {
                warn!(object = %target, "not found: step skipped");
                summary.step(target.to_string(), Outcome::Missing, vec![]);
            }
            Some(obj) => {
                hints
                    .learn(target.kind, &obj)
                    .map_err(|m| failed(summary, &target, m))?;
                read.push((target, obj));
            }
        }
    }
    for (target, obj) in &read {
        plan_for(cfg, target.kind, obj, &hints).map_err(|m| failed(summary, target, m))?;
    }
    for (target, obj) in read {
        let written = cluster
            .converge(&target, obj, |o| plan_for(cfg, target.kind, o, &hints))
            .await;
        let written =
            written.inspect_err(|_| summary.step(target.to_string(), Outcome::Failed, vec![]))?;
        let object = match written {
            Written::Missing => {
                warn!(object = %target, "deleted while we worked: step skipped");
                summary.step(target.to_string(), Outcome::Missing, vec![]);
                continue;
            }
            Written::Unchanged { plan, object } => {
                info!(object = %target, actions = ?plan.actions, "already as wanted: nothing to write");
                summary.step(target.to_string(), Outcome::Unchanged, plan.actions);
                object
            }
            Written::Changed { plan, object } => {
                if cfg.dry_run {
                    let patch = plan.patch.as_ref().expect("a change has a patch");
                    let line =
                        json!({"object": target.to_string(), "dryRun": true, "patch": patch});
                    writeln!(out, "{line}").ok();
                }
                info!(object = %target, dry_run = cfg.dry_run, actions = ?plan.actions, "written");
                if target.kind == Kind::KubeVirt {
                    event(cfg, cluster, &object, &plan).await;
                }
                summary.step(target.to_string(), Outcome::Changed, plan.actions);
                #[cfg(feature = "failpoints")]
                failpoint_after_write(target.kind);
                object
            }
        };
        hints
            .learn(target.kind, &object)
            .map_err(|m| failed(summary, &target, m))?;
    }
    Ok(())
}

/// The Event on the KubeVirt CR that says what this phase did to it.
async fn event(cfg: &Config, cluster: &Cluster, kubevirt: &Value, plan: &Plan) {
    let (reason, verb) = match cfg.phase {
        Phase::Pre => (
            "WorkloadUpdatesSuspended",
            "Suspended automated workload updates",
        ),
        _ => (
            "WorkloadUpdatesRestored",
            "Restored automated workload updates",
        ),
    };
    let message = format!(
        "{verb} ({}): {}",
        crate::cluster::FIELD_MANAGER,
        plan.actions.join("; ")
    );
    cluster.event(kubevirt, reason, &message).await;
}

/// Marks the step failed and makes the error for a malformed object.
fn failed(summary: &mut Summary, target: &Target, m: Malformed) -> Error {
    summary.step(target.to_string(), Outcome::Failed, vec![]);
    Error::Malformed {
        object: target.to_string(),
        reason: m.0,
    }
}

async fn status(cfg: &Config, cluster: &Cluster, out: &mut impl Write) -> Result<(), Error> {
    let kubevirt = Target {
        kind: Kind::KubeVirt,
        key: cfg.kubevirt.clone(),
    };
    let kv = cluster.get(&kubevirt).await?;
    let chart = match &cfg.chart {
        Some(key) => {
            let target = Target {
                kind: Kind::ManagedChart,
                key: key.clone(),
            };
            let obj = cluster.get(&target).await?;
            Some(report::chart(
                target.to_string(),
                obj.as_ref(),
                &cfg.kubevirt,
            ))
        }
        None => None,
    };
    let migrations = cluster.list_migrations(MIGRATION_PREFIX).await?;
    let report = Report {
        kubevirt: Some(report::kubevirt(kubevirt.to_string(), kv.as_ref())),
        managed_chart: chart,
        unfinished_migrations: report::unfinished(&migrations),
    };
    match cfg.log_format {
        LogFormat::Json => writeln!(
            out,
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        ),
        LogFormat::Text => write!(out, "{report}"),
    }
    .map_err(|e| Error::Permanent {
        object: "stdout".into(),
        message: e.to_string(),
    })
}

/// Test builds only: `FAILPOINTS=after-write-managedchart=return` kills the process with SIGKILL
/// right after that write; `...=sleep(3000)` pauses there (for API server restarts).
#[cfg(feature = "failpoints")]
fn failpoint_after_write(kind: Kind) {
    let name = match kind {
        Kind::KubeVirt => "after-write-kubevirt",
        Kind::ManagedChart => "after-write-managedchart",
    };
    fail::fail_point!(name, |_| {
        // SAFETY: kill(2) on our own pid; nothing is left to clean up, which is the point.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    });
}
