//! `status`'s report as text: the verdict first, as it answers the operator's question.

use std::fmt::{Display, Formatter, Result};

use serde_json::Value;

use super::data::{ChartReport, HarvesterReport, KubeVirtReport, Report};
use crate::model::{FIELD_MANAGER, KUBEVIRT_COPY, KUBEVIRT_RECORD, METHODS_FIELD};
use crate::plan::forecast::Forecast;
use crate::plan::harvester_upgrade::CleanupWrite;
use crate::plan::kubevirt::{HOTPLUG_NOTICE, Source};
use crate::plan::records::{Added, ValueRecord, describe};

/// The first problem's text carries the commands that recover (its reader puts them in).
pub fn refusal(k: &KubeVirtReport, chart: Option<&ChartReport>) -> Option<String> {
    // A ManagedChart that could not be read (its CRD not served) refuses nothing by itself.
    let chart = chart.filter(|c| c.found);
    let chart_problems = chart.map_or(&[][..], |c| &c.problems);
    let first = k.problems.first().map(|p| (&k.object, p));
    let (object, problem) = first.or_else(|| Some((&chart?.object, chart_problems.first()?)))?;
    let more = match k.problems.len() + chart_problems.len() - 1 {
        0 => String::new(),
        n => format!(" ({n} more PROBLEM below)"),
    };
    let says = |whose: &str, r: &ValueRecord| {
        let was = describe(&r.original());
        format!(" {whose} says the original was {was}.")
    };
    let other = if k.problems.iter().any(|p| p.contains(KUBEVIRT_RECORD)) {
        match chart.and_then(|c| c.kubevirt_copy.as_ref()) {
            Some(r) => says("The ManagedChart's copy", r),
            None => " There is no copy of the original on the ManagedChart.".into(),
        }
    } else if chart.is_some_and(|c| c.problems.iter().any(|p| p.contains(KUBEVIRT_COPY))) {
        match &k.saved_original {
            Some(r) => says("The KubeVirt CR's record", r),
            None => " The KubeVirt CR has no record of the original.".into(),
        }
    } else {
        String::new()
    };
    Some(format!(
        "REFUSED: pre and post exit 3 and write nothing until this is fixed: {object}: \
         {problem}.{other}{more}"
    ))
}

impl KubeVirtReport {
    fn updates_off(&self) -> bool {
        let methods = self.workload_update_methods.as_ref();
        methods.is_none_or(|m| m.as_array().is_some_and(Vec::is_empty))
    }
}

pub fn verdict(k: &KubeVirtReport, source: Option<Source>, will_restore: &Option<Value>) -> String {
    if !k.found {
        let object = &k.object;
        return format!("NOT FOUND: {object} (check KUBEVIRT_NAMESPACE and KUBEVIRT_NAME)");
    }
    let methods = describe(&k.workload_update_methods);
    let r = describe(will_restore);
    let ours = (k.methods_owners.iter()).find(|o| o.owner.manager == FIELD_MANAGER);
    let since = ours.and_then(|o| o.owner.time.as_deref());
    let since = since.map_or(String::new(), |t| format!(" since {t}"));
    match source {
        Some(Source::CrRecord) => {
            format!("SUSPENDED{since} by pre; post will restore {r} (from the CR's record)")
        }
        Some(Source::ChartCopy) => format!(
            "SUSPENDED{since}, no record on the CR; post will restore {r} (from the ManagedChart's copy)"
        ),
        Some(Source::Fallback) => {
            format!("SUSPENDED{since}, record lost; post will apply the fallback {r}")
        }
        Some(Source::ValuesChoice) => format!(
            "SUSPENDED{since} by pre; the values override was changed while suspended, so post will \
             set {r} on both (what Fleet renders)"
        ),
        Some(Source::BlindRestore) => format!(
            "ATTENTION: a hard-coded {methods} was written over the recorded original (Harvester's \
             upgrade cleanup); post will put {r} back"
        ),
        Some(Source::AlreadyRestored) => format!(
            "NOT SUSPENDED: methods back at the recorded original {methods}; post will only drop \
             its records and claims"
        ),
        Some(Source::LaterChoice) => format!(
            "ATTENTION: methods changed to {methods} while suspended; post will keep them and drop the record"
        ),
        _ if k.updates_off() && k.workload_update_methods.is_some() => {
            "ATTENTION: updates off ([]) with no record; post will not restore them".into()
        }
        _ if k.updates_off() => "NOT SUSPENDED: methods absent (no automated updates)".into(),
        _ => format!("NOT SUSPENDED: automated updates on ({methods})"),
    }
}

/// At least one space: a label longer than the column still ends before its value.
fn row(f: &mut Formatter<'_>, label: &str, value: impl Display) -> Result {
    writeln!(f, "  {label:<27} {value}")
}

fn record(r: &Option<ValueRecord>) -> String {
    let original = |r: &ValueRecord| format!("original was {}", describe(&r.original()));
    r.as_ref().map_or("none".into(), original)
}

fn or(v: &Option<impl ToString>) -> String {
    v.as_ref().map_or("-".into(), ToString::to_string)
}

fn problems(f: &mut Formatter<'_>, problems: &[String]) -> Result {
    problems.iter().try_for_each(|p| row(f, "PROBLEM", p))
}

impl Display for Report {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        writeln!(f, "{}", self.verdict)?;
        (self.warnings.iter()).try_for_each(|w| writeln!(f, "WARNING: {w}"))?;
        write!(f, "{}", self.kubevirt)?;
        let migrations = &self.unfinished_migrations;
        let n = migrations.len();
        writeln!(f, "workload-update migrations not finished: {n}")?;
        for m in migrations {
            writeln!(f, "  {}/{} ({})", m.namespace, m.name, m.phase)?;
        }
        (self.vmi_forecast.iter()).try_for_each(|v| write!(f, "{v}"))?;
        (self.managed_chart.iter()).try_for_each(|c| write!(f, "{c}"))?;
        (self.harvester.iter()).try_for_each(|h| write!(f, "{h}"))?;
        (self.retirement.iter()).try_for_each(|r| writeln!(f, "{}", r.line()))
    }
}

/// What the node drains will meet (docs/design.md, "The forecast").
impl Display for Forecast {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        let running = self.running;
        let stuck = self.not_live_migratable;
        let n = self.hotplug_pending;
        let (mut names, more) = (self.hotplug_named.clone(), n - self.hotplug_named.len());
        names.extend((more > 0).then(|| format!("and {more} more")));
        let colon = if n > 0 { ": " } else { "" };
        let names = names.join(", ");
        writeln!(
            f,
            "running VMIs: {running} (each node's drain live-migrates its VMs to the new \
             virt-launcher)\n  cannot live-migrate: {stuck} (LiveMigratable not True: Harvester \
             shuts them down at their node's drain)\n  waiting on a CPU or memory hot-plug: {n} \
             (migrated once updates are on){colon}{names}"
        )
    }
}

impl Display for KubeVirtReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        let k = self;
        writeln!(f, "{}", k.object)?;
        if !k.found {
            return row(f, "not found", "");
        }
        let off = k.updates_off();
        row(f, "phase", or(&k.phase))?;
        let observed = &k.observed_kube_virt_version;
        let target = &k.target_kube_virt_version;
        let versions = format!("{} / {}", or(observed), or(target));
        row(f, "observed / target version", versions)?;
        let methods = describe(&k.workload_update_methods);
        row(f, "workloadUpdateMethods", methods)?;
        row(f, "automated updates", if off { "off" } else { "on" })?;
        if off {
            row(f, "while off", HOTPLUG_NOTICE)?;
        }
        row(f, "saved original", record(&k.saved_original))?;
        if let Some(r) = &k.post_will_restore {
            let what = match r.source {
                Source::Nothing | Source::LaterChoice => {
                    let why = r.reason.strip_prefix("nothing to restore: ");
                    format!("nothing: {}", why.unwrap_or(&r.reason))
                }
                _ => format!("{}, from {}", describe(&r.methods), r.reason),
            };
            row(f, "post would restore", what)?;
        }
        let held = match k.outdated_virtual_machine_instance_workloads {
            Some(n) if off && n > 0 => format!(
                "{n} (updates off: each node's drain moves its VMs to the new virt-launcher; what the \
                 drains leave is migrated at the restore)"
            ),
            n => or(&n),
        };
        row(f, "outdated VMI workloads", held)?;
        let owners = &k.methods_owners;
        let none = if owners.is_empty() { "none" } else { "" };
        row(f, &format!("owners of {METHODS_FIELD}"), none)?;
        for o in owners {
            let claim = match (o.blocks_chart_change, o.owner.manager == FIELD_MANAGER) {
                (false, _) => "",
                (true, true) => " <- our claim while suspended: post releases it",
                (true, false) => {
                    " <- Update claim: a chart (Helm 4) change of the field will conflict with it; \
                     a pre/post cycle of this guard releases it"
                }
            };
            let (o, time) = (&o.owner, o.owner.time.as_deref().unwrap_or("-"));
            writeln!(f, "    {} ({}, {time}){claim}", o.manager, o.operation)?;
        }
        problems(f, &k.problems)
    }
}

impl Display for ChartReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        let c = self;
        writeln!(f, "{}", c.object)?;
        if !c.found {
            return row(f, "not found", "");
        }
        row(f, "paused", c.paused)?;
        let on = c.compare_patches_pointer;
        let pointer = if on { "present" } else { "absent" };
        row(f, "comparePatches pointer", pointer)?;
        row(f, "values override", describe(&c.values_override))?;
        row(f, "values record", record(&c.values_record))?;
        let compare = match c.compare_patch_record.as_ref().map(|r| r.added) {
            None => "none",
            Some(Added::Entry) => "pre added our entry (post removes it)",
            Some(Added::Pointer) => {
                "pre appended our pointer to an existing entry (post removes it)"
            }
            Some(Added::PointerList) => {
                "pre gave an existing entry jsonPointers with ours (post removes them)"
            }
            Some(Added::Nothing) => "our pointer was there before pre (post leaves it)",
        };
        row(f, "compare-patch record", compare)?;
        row(f, "copy of KubeVirt original", record(&c.kubevirt_copy))?;
        match &c.fleet {
            None => row(f, "Fleet", "no status (no controller reports on it)")?,
            Some(fl) => {
                row(f, "Fleet Ready", or(&fl.ready))?;
                row(f, "Fleet state", or(&fl.state))?;
                if let Some(m) = &fl.message {
                    row(f, "Fleet message", m)?;
                }
                row(f, "Fleet observedGeneration", or(&fl.observed_generation))?;
                let applied = if fl.current_spec_applied {
                    "yes: the current spec, with our last change, is deployed"
                } else {
                    "no: not deployed yet (or failed), see the message"
                };
                row(f, "last change applied", applied)?;
            }
        }
        problems(f, &c.problems)
    }
}

impl Display for HarvesterReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        writeln!(f, "Harvester's own upgrade")?;
        match &self.latest_upgrade {
            None => row(f, "latest Upgrade", "none")?,
            Some(u) => {
                row(f, "latest Upgrade", u.describe())?;
                row(f, "its handling", u.handling().describe())?;
                row(f, "its backup", u.backup.describe())?;
                let cleanup = if u.cleaned_up {
                    "done".to_string()
                } else if !u.cleanup_pending() {
                    "nothing of the methods".to_string()
                } else {
                    let writes = self.cleanup_writes.as_ref().map(CleanupWrite::describe);
                    format!("pending: it {}", or(&writes))
                };
                row(f, "its cleanup", cleanup)?;
            }
        }
        let versions: Vec<&str> = self.offered.iter().map(|(v, _)| v.as_str()).collect();
        let versions = versions.join(", ");
        let offered = if self.offered.is_empty() {
            "none that handle the methods themselves".to_string()
        } else {
            format!("{versions} (these suspend the methods themselves)")
        };
        row(f, "upgrades on offer", offered)?;
        row(f, "pre", &self.pre_needed)
    }
}
