//! `status`'s report as text: one `Display` per section (the KubeVirt CR, the migrations under
//! way, the ManagedChart, Harvester's own upgrade), in the order the operator reads them.

use std::fmt::{Display, Formatter, Result};

use serde_json::Value;

use super::data::{ChartReport, HarvesterReport, KubeVirtReport, Report};
use crate::model::{FIELD_MANAGER, METHODS_FIELD};
use crate::plan::harvester_upgrade::CleanupWrite;
use crate::plan::kubevirt::Source;
use crate::plan::migrations::Migration;
use crate::plan::records::{Added, ValueRecord, describe};

/// One `  label   value` line of the human report.
fn row(f: &mut Formatter<'_>, label: &str, value: impl Display) -> Result {
    // At least one space: a label longer than the column still ends before its value.
    writeln!(f, "  {label:<27} {value}")
}

fn json(v: &Option<Value>) -> String {
    describe(v)
}

fn record(r: &Option<ValueRecord>) -> String {
    r.as_ref().map_or_else(
        || "none".into(),
        |r| format!("original was {}", json(&r.original())),
    )
}

fn or(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".into())
}

impl Display for Report {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        writeln!(f, "{}", self.verdict)?;
        for w in &self.warnings {
            writeln!(f, "WARNING: {w}")?;
        }
        write!(f, "{}", self.kubevirt)?;
        write!(f, "{}", Migrations(&self.unfinished_migrations))?;
        if let Some(c) = &self.managed_chart {
            write!(f, "{c}")?;
        }
        if let Some(h) = &self.harvester {
            write!(f, "{h}")?;
        }
        if let Some(r) = &self.retirement {
            writeln!(f, "{}", r.line())?;
        }
        Ok(())
    }
}

impl KubeVirtReport {
    /// The owners of the methods field, each with what its claim means for a chart change.
    fn owners(&self, f: &mut Formatter<'_>) -> Result {
        let none = if self.methods_owners.is_empty() {
            "none"
        } else {
            ""
        };
        row(f, &format!("owners of {METHODS_FIELD}"), none)?;
        for o in &self.methods_owners {
            let claim = match (o.blocks_chart_change, o.owner.manager == FIELD_MANAGER) {
                (false, _) => "",
                (true, true) => " <- our claim while suspended: post releases it",
                (true, false) => {
                    " <- Update claim: a chart (Helm 4) change of the field will conflict with \
                     it; a pre/post cycle of this guard releases it"
                }
            };
            writeln!(
                f,
                "    {} ({}, {}){claim}",
                o.owner.manager,
                o.owner.operation,
                o.owner.time.as_deref().unwrap_or("-")
            )?;
        }
        Ok(())
    }
}

impl Display for KubeVirtReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        let k = self;
        writeln!(f, "{}", k.object)?;
        if !k.found {
            row(f, "not found", "")?;
        } else {
            let methods = &k.workload_update_methods;
            let off = methods
                .as_ref()
                .is_none_or(|m| m.as_array().is_some_and(Vec::is_empty));
            row(f, "phase", or(&k.phase))?;
            let versions = format!(
                "{} / {}",
                or(&k.observed_kube_virt_version),
                or(&k.target_kube_virt_version)
            );
            row(f, "observed / target version", versions)?;
            row(f, "workloadUpdateMethods", json(methods))?;
            row(f, "automated updates", if off { "off" } else { "on" })?;
            if off {
                row(f, "while off", crate::plan::kubevirt::HOTPLUG_NOTICE)?;
            }
            row(f, "saved original", record(&k.saved_original))?;
            if let Some(r) = &k.post_will_restore {
                let what = match r.source {
                    Source::Nothing | Source::LaterChoice => {
                        let why = r.reason.strip_prefix("nothing to restore: ");
                        format!("nothing: {}", why.unwrap_or(&r.reason))
                    }
                    _ => format!("{}, from {}", json(&r.methods), r.reason),
                };
                row(f, "post would restore", what)?;
            }
            let outdated = k.outdated_virtual_machine_instance_workloads;
            let held = match outdated {
                Some(n) if off && n > 0 => format!(
                    "{n} (held back while updates are off; the wave after the restore moves them)"
                ),
                Some(n) => n.to_string(),
                None => "-".into(),
            };
            row(f, "outdated VMI workloads", held)?;
            k.owners(f)?;
            for p in &k.problems {
                row(f, "PROBLEM", p)?;
            }
        }
        Ok(())
    }
}

/// The workload-update migrations not finished.
struct Migrations<'a>(&'a [Migration]);

impl Display for Migrations<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        writeln!(
            f,
            "workload-update migrations not finished: {}",
            self.0.len()
        )?;
        for m in self.0 {
            writeln!(f, "  {}/{} ({})", m.namespace, m.name, m.phase)?;
        }
        Ok(())
    }
}

impl Display for ChartReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        let c = self;
        writeln!(f, "{}", c.object)?;
        if !c.found {
            row(f, "not found", "")?;
        } else {
            row(f, "paused", c.paused)?;
            let pointer = if c.compare_patches_pointer {
                "present"
            } else {
                "absent"
            };
            row(f, "comparePatches pointer", pointer)?;
            row(f, "values override", json(&c.values_override))?;
            row(f, "values record", record(&c.values_record))?;
            let compare = c
                .compare_patch_record
                .as_ref()
                .map_or("none", |r| match r.added {
                    Added::Entry => "pre added our entry (post removes it)",
                    Added::Pointer => {
                        "pre appended our pointer to an existing entry (post removes it)"
                    }
                    Added::PointerList => {
                        "pre gave an existing entry jsonPointers with ours (post removes them)"
                    }
                    Added::Nothing => "our pointer was there before pre (post leaves it)",
                });
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
                    row(
                        f,
                        "Fleet observedGeneration",
                        fl.observed_generation.map_or("-".into(), |g| g.to_string()),
                    )?;
                    let applied = if fl.current_spec_applied {
                        "yes: the current spec, with our last change, is deployed"
                    } else {
                        "no: not deployed yet (or failed), see the message"
                    };
                    row(f, "last change applied", applied)?;
                }
            }
            for p in &c.problems {
                row(f, "PROBLEM", p)?;
            }
        }
        Ok(())
    }
}

impl Display for HarvesterReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        let h = self;
        writeln!(f, "Harvester's own upgrade")?;
        match &h.latest_upgrade {
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
                    format!(
                        "pending: it {}",
                        h.cleanup_writes
                            .as_ref()
                            .map_or("-".into(), CleanupWrite::describe)
                    )
                };
                row(f, "its cleanup", cleanup)?;
            }
        }
        let offered: Vec<&str> = h.offered.iter().map(|(v, _)| v.as_str()).collect();
        let offered = if offered.is_empty() {
            "none that handle the methods themselves".to_string()
        } else {
            format!(
                "{} (these suspend the methods themselves)",
                offered.join(", ")
            )
        };
        row(f, "upgrades on offer", offered)?;
        row(f, "pre", &h.pre_needed)?;
        Ok(())
    }
}
