//! A Job's `post` (the orchestrator's, by hand, the chart's uninstall hook) after an upgrade the
//! resident guard did not record: the upgrade's record from what the cluster still shows, and
//! what it could not count (docs/design.md, "The upgrade's record"). Best effort: a record not
//! kept is said, and the restore goes on.

use tracing::info;

use crate::context::Run;
use crate::model::{Kind, ObjectKey, RECORDS_CONFIGMAP, Target};
use crate::plan::upgrade_record::{Record, RecordRead, Tally, kept, last_ended, save_plan};
use crate::upgrades::{self, View};
use crate::vocabulary::{Objects, Refusal};

/// What a record made after the upgrade cannot count.
const AFTER_THE_FACT: &str = "counted by post after the upgrade, from what the cluster still \
    shows: KubeVirt keeps five finished migrations per VMI and deletes a VMI's with it, so a VM \
    moved more often, or deleted since, is undercounted; a VM shut down and deleted since is not \
    counted; the VMs at the start are those running at post; what the suspension saved is not \
    known (it needs the VMs outdated when KubeVirt was upgraded: the resident guard counts it)";

/// `view`: the upgrades as `post` read them, if they have not moved since.
pub(super) async fn after_the_fact(run: &mut Run<'_>, objects: &Objects, view: Option<View>) {
    if run.cfg.dry_run {
        return;
    }
    let view = match view {
        Some(view) => view,
        None => match upgrades::read(run.cluster, run.cfg).await {
            Ok(view) => view,
            Err(e) => return not_kept(run, &format!("the upgrades not read: {e}")),
        },
    };
    let Some(ended) = last_ended(view.upgrade.as_ref(), &view.plans) else {
        return;
    };
    let key = ObjectKey {
        namespace: run.cfg.intent.keys.kubevirt.namespace.clone(),
        name: RECORDS_CONFIGMAP.into(),
    };
    let target = Target::new(Kind::ConfigMap, &key);
    let configmap = match run.cluster.get(&target).await {
        Ok(Some(cm)) => cm,
        // Not asked for (the chart creates it; the Jobs' operator may): the log only.
        Ok(None) => {
            let create = format!(
                "kubectl -n {} create configmap {RECORDS_CONFIGMAP}",
                key.namespace
            );
            info!("no record of the upgrade kept: {target} is missing (to keep one: {create})");
            return;
        }
        Err(e) => return not_kept(run, &e.to_string()),
    };
    // The resident guard's record of it, or an earlier post's: nothing to add.
    let recorded = kept(&configmap).unwrap_or_default();
    if (recorded.iter()).any(|r| r.upgrade == ended.key && r.started == ended.started) {
        return;
    }
    let seen = match run.cluster.seen_by_a_list().await {
        Ok(seen) => seen,
        Err(e) => return not_kept(run, &format!("the migrations and VMIs not listed: {e}")),
    };
    let now = jiff::Timestamp::now();
    let read = RecordRead {
        kubevirt: objects.kubevirt.as_ref(),
        upgrade: view.upgrade.as_ref(),
        plans: &view.plans,
        current: view.current.as_deref(),
        now,
    };
    let mut record = Record::begin(&ended, &read);
    // KubeVirt's version now is the one the upgrade left; the one before is not known.
    record.kubevirt_after = record.kubevirt_before.take();
    record.after_the_fact = Some(AFTER_THE_FACT.into());
    let mut tally = Tally::new(record);
    seen.into_iter().for_each(|s| tally.observe(s));
    tally.from_pass(&read);
    tally.close();
    let record = tally.to_keep(now);
    let plan = |cm: &serde_json::Value| {
        save_plan(cm, &record).map_err(|reason| Refusal {
            target: target.clone(),
            reason,
        })
    };
    match run.cluster.converge(&target, configmap, plan).await {
        Ok(_) => {
            let line = format!("recorded {} (after the fact)", record.line());
            info!("{line}");
            run.noted(vec![line]);
        }
        Err(e) => not_kept(run, &e.to_string()),
    }
}

/// Said in the log and the termination message; the restore goes on.
fn not_kept(run: &mut Run<'_>, why: &str) {
    let line = format!("the upgrade's record not kept: {why}");
    info!("{line}");
    run.noted(vec![line]);
}
