//! `PHASE=status`: read-only; the [`Report`], the armed `post`'s Job, the guard's last word.

use std::io::Write;

use k8s_openapi::api::batch::v1::Job;
use serde_json::Value;

use crate::cluster::{MIGRATIONS_PAGE, VMIS_PAGE};
use crate::config::LogFormat;
use crate::context::Run;
use crate::error::Error;
use crate::leftovers_check;
use crate::model::{Kind, ObjectKey, RECORDS_CONFIGMAP, Target};
use crate::outcome::Done;
use crate::plan;
use crate::plan::retirement;
use crate::plan::upgrade_record::{self, Record};
use crate::report::Report;
use crate::upgrades;
use crate::vocabulary::Objects;
use crate::warnings::{self, Warning};

/// The name of the armed `post`'s Job (manifests/post-armed): one at a time.
const ARMED_JOB: &str = "workload-update-guard-post-armed";

/// Returns the verdict, for the termination message.
pub async fn status(run: &mut Run<'_>, out: &mut impl Write) -> Result<String, Error> {
    let cfg = run.cfg;
    let cluster = run.cluster;
    let kubevirt = run.kubevirt();
    let kv = cluster.get(&kubevirt).await?;
    let chart = read_chart(run).await?;
    let migrations = cluster.list_migrations(MIGRATIONS_PAGE).await?;
    let view = upgrades::read(cluster, cfg).await?;
    // Without a name, the default ManagedChart is read too, for what of ours it still carries.
    let unnamed = match &cfg.unnamed_chart {
        Some(key) => leftovers_check::peek(run, Target::new(Kind::ManagedChart, key), false).await,
        None => None,
    };
    let read_chart = chart
        .as_ref()
        .map(|(t, r)| (t, r.as_ref().map(Option::as_ref)));
    let mut report = Report::new(
        &cfg.intent,
        (&kubevirt, kv.as_ref()),
        read_chart,
        &migrations,
        cluster.vmi_forecast(VMIS_PAGE).await?,
    )
    .with_harvester(view.upgrade.clone(), view.offered(), view.coming());
    if let Some((target, obj)) = &unnamed {
        report.account_for(&cfg.intent, target, obj, false);
    }
    let mut objects = Objects::default();
    objects.set(Kind::KubeVirt, kv.clone());
    if let Some((_, Ok(obj))) = &chart {
        objects.set(Kind::ManagedChart, obj.clone());
    }
    judge_upgrades(&mut report, &view, &objects);
    let mismatch = crate::build::mismatch(cfg.chart_version.as_deref());
    report.warnings.extend(mismatch);
    // The report's warnings are the termination message's too.
    let mut warned = Done::noted(kubevirt.clone(), vec![]);
    warned.warnings = (report.warnings.iter())
        .map(|message| Warning {
            reason: "",
            message: message.clone(),
        })
        .collect();
    run.push(warned);
    let records = read_records(run).await;
    report.upgrades = records.clone().unwrap_or_default();
    let sections = sections(run, &records).await;
    let text = match cfg.log_format {
        LogFormat::Json => serde_json::to_string(&report).expect("report serializes") + "\n",
        LogFormat::Text => format!("{report}{sections}"),
    };
    let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    written.map_err(|e| Error::Output(e.to_string()))?;
    if kv.is_none() {
        run.push(Done::missing(cfg.allow_missing, kubevirt, "")?);
    }
    // Like the other phases: a ManagedChart that is not there (its CRD is) is a wrong name.
    if let Some((target, Ok(None))) = chart {
        run.push(Done::missing(cfg.allow_missing, target, "")?);
    }
    Ok(report.verdict)
}

/// The ManagedChart, none, or why its kind is not served (without Fleet its CRD is missing).
async fn read_chart(
    run: &Run<'_>,
) -> Result<Option<(Target, Result<Option<Value>, String>)>, Error> {
    let Some(key) = &run.cfg.intent.keys.chart else {
        return Ok(None);
    };
    let target = Target::new(Kind::ManagedChart, key);
    let read = match run.cluster.get(&target).await {
        Ok(obj) => Ok(obj),
        Err(e @ Error::NotServed { .. }) => Err(e.to_string()),
        Err(e) => return Err(e),
    };
    Ok(Some((target, read)))
}

/// An upgrade under way unprotected comes first in the verdict. Whether the guard is still
/// needed only where Harvester's upgrades are served: elsewhere there is no release to go by.
fn judge_upgrades(report: &mut Report, view: &upgrades::View, objects: &Objects) {
    let kv = objects.kubevirt.as_ref();
    if let Some(v) = plan::monitoring::unprotected_verdict(kv, view.upgrade.as_ref()) {
        report.verdict = v;
    }
    let current = view.current.as_deref();
    let upgrade = view.upgrade.as_ref();
    report.retirement = view.upgrades_served.then(|| {
        let plans = &view.plans;
        let served = view.plans_served;
        retirement::still_needed(current, &view.on_offer, upgrade, plans, served, objects)
    });
}

/// Each line after the report is a step of the termination message too.
async fn sections(run: &mut Run<'_>, records: &Result<Vec<Record>, String>) -> String {
    let ns = &run.cfg.intent.keys.kubevirt.namespace;
    let armed = armed_lines(run.cluster.job(ns, ARMED_JOB).await.as_ref()).unwrap_or_default();
    let mut resident = resident_lines(run).await;
    resident.extend(record_lines(records));
    if !armed.is_empty() {
        run.noted(vec![armed.join(" ")]);
    }
    if !resident.is_empty() {
        run.noted(resident.clone());
    }
    let lines = armed.iter().chain(&resident).map(|l| format!("{l}\n"));
    lines.collect::<String>() + &crate::build::line(run.cfg.chart_version.as_deref())
}

/// The resident guard keeps nothing but its Events: its last decision, and its last Warning
/// while that is newer (a suspension that succeeds, or the upgrade's end, is a new decision).
async fn resident_lines(run: &Run<'_>) -> Vec<String> {
    let ns = &run.cfg.intent.keys.kubevirt.namespace;
    let cluster = run.cluster;
    let Some((time, pod, note)) = cluster.latest_event(ns, warnings::RESIDENT).await else {
        return Vec::new();
    };
    let decided = format!("resident guard  {pod} last decided at {time}: {note}");
    // A suspension made since (its `Suspended` Event) is a later word too: what was unprotected
    // is protected now.
    let suspended = cluster.latest_event(ns, warnings::SUSPENDED).await;
    let mut last = suspended.map_or(time, |(t, ..)| t.max(time));
    let mut newer = None;
    for reason in [
        warnings::UPGRADE_HELD_BY_POLICY,
        warnings::UPGRADE_UNPROTECTED,
        warnings::HELD_AFTER_FAILURE,
    ] {
        if let Some((t, _, note)) = cluster.latest_event(ns, reason).await
            && t > last
        {
            last = t;
            newer = Some(format!("resident guard  {reason} at {t}: {note}"));
        }
    }
    [decided].into_iter().chain(newer).collect()
}

/// `None`: no such Job.
fn armed_lines(job: Option<&Job>) -> Option<Vec<String>> {
    let job = job?;
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let since = job.metadata.creation_timestamp.as_ref();
    let since = since.map(|t| t.0.to_string()).unwrap_or_default();
    let head = format!("armed post    Job {ns}/{ARMED_JOB}, since {since}");
    let mut conditions = job
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten());
    let ended =
        conditions.find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"));
    Some(match ended {
        None => vec![
            head,
            "              waits for the next upgrade (a Harvester Upgrade or UpgradePlan created \
             after pre's record, or one under way) to begin and to end, cleanup included; then \
             it restores"
                .to_string(),
        ],
        Some(c) if c.type_ == "Complete" => vec![format!("{head}: ended (Complete)")],
        Some(c) => vec![format!(
            "{head}: FAILED ({}); at its bound (exit 9) it leaves the suspension: run post once \
             the upgrade has ended, or arm again",
            c.message.as_deref().unwrap_or_default()
        )],
    })
}

/// The upgrades' records the resident guard keeps (none without it); why they could not be read.
async fn read_records(run: &Run<'_>) -> Result<Vec<Record>, String> {
    let ns = &run.cfg.intent.keys.kubevirt.namespace;
    let key = ObjectKey {
        namespace: ns.clone(),
        name: RECORDS_CONFIGMAP.into(),
    };
    let read = run.cluster.get(&Target::new(Kind::ConfigMap, &key)).await;
    let why = |e: String| format!("ConfigMap {ns}/{RECORDS_CONFIGMAP}: {e}");
    match read {
        Ok(Some(cm)) => upgrade_record::kept(&cm).map_err(|e| why(e.to_string())),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(why(e.to_string())),
    }
}

/// The last upgrade's record in a few lines; every one kept is in the JSON report.
fn record_lines(records: &Result<Vec<Record>, String>) -> Vec<String> {
    let last = match records {
        Err(e) => return vec![format!("last upgrade  not read: {e}")],
        Ok(records) => records.last(),
    };
    let Some(last) = last else {
        return Vec::new();
    };
    let indent = |l: String| format!("              {l}");
    let mut lines = vec![format!("last upgrade  {}", last.line())];
    lines.extend(last.details().into_iter().map(indent));
    let kept = records.as_ref().map_or(0, Vec::len);
    lines.push(indent(format!(
        "{kept} upgrades kept: every one with LOG_FORMAT=json (its \"upgrades\")"
    )));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_names_the_armed_job_and_what_it_waits_for() {
        assert_eq!(armed_lines(None), None);
        let typed = |j: &Value| serde_json::from_value::<Job>(j.clone()).unwrap();
        let mut job = json!({"metadata": {"namespace": "harvester-system", "name": ARMED_JOB,
                                          "creationTimestamp": "2026-12-01T10:00:00Z"}});
        let lines = armed_lines(Some(&typed(&job))).unwrap();
        assert!(
            lines[0].contains(ARMED_JOB) && lines[0].contains("2026-12-01T10:00:00Z"),
            "{lines:?}"
        );
        assert!(lines[1].contains("next upgrade"), "{lines:?}");
        job["status"] =
            json!({"conditions": [{"type": "Failed", "status": "True", "message": "exit 9"}]});
        assert!(armed_lines(Some(&typed(&job))).unwrap()[0].contains("FAILED"));
        job["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}]});
        assert!(armed_lines(Some(&typed(&job))).unwrap()[0].contains("Complete"));
    }
}
