//! `PHASE=status`: a read-only report, read through the same readers as the planners, so it
//! never calls "absent" what `pre` or `post` would refuse as corrupted.

use serde::Serialize;
use serde_json::Value;

use crate::model::{
    FIELD_MANAGER, KUBEVIRT_COPY, KUBEVIRT_RECORD, METHODS_FIELD, METHODS_PATH, OWNERS_TO_RETURN,
    Target, VALUES_PATH,
};
use crate::plan::chart::{compare_list, find_pointer, values_choice};
use crate::plan::fleet::{self, Fleet};
use crate::plan::harvester::{Backup, CleanupWrite, Handling, Upgrade};
use crate::plan::kubevirt::{Source, restore_source};
use crate::plan::ownership::{Owner, owners, update_claim_warnings};
use crate::plan::records::Added;
use crate::plan::records::{
    CompareRecord, ValueRecord, describe, kubevirt_copy, kubevirt_record, lookup, methods,
    read_record,
};
use crate::plan::skipped::{ChartOurs, chart_ours};
use crate::plan::{Intent, Malformed};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The answer in one line: suspended or not, and what `post` will do.
    pub verdict: String,
    /// Suspended by us: `post` has an original to restore.
    pub suspended: bool,
    /// The methods `post` would set now (`null`: nothing, or an absent field).
    pub will_restore: Option<Value>,
    pub restore_source: Option<Source>,
    pub warnings: Vec<String>,
    pub kubevirt: KubeVirtReport,
    pub managed_chart: Option<ChartReport>,
    pub unfinished_migrations: Vec<Migration>,
    /// Harvester's own upgrade (its latest Upgrade `None`, and nothing on offer, where
    /// Harvester's resources are not served).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harvester: Option<HarvesterReport>,
}

/// A workload-update migration that has not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Migration {
    pub namespace: String,
    pub name: String,
    pub phase: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtReport {
    pub object: String,
    pub found: bool,
    pub phase: Option<String>,
    pub observed_kube_virt_version: Option<String>,
    pub target_kube_virt_version: Option<String>,
    /// `None`: the field is absent.
    pub workload_update_methods: Option<Value>,
    pub saved_original: Option<ValueRecord>,
    pub outdated_virtual_machine_instance_workloads: Option<i64>,
    /// Who owns the methods field; each `Update` owner blocks a chart change of it.
    pub methods_owners: Vec<OwnerReport>,
    /// What `post` would restore now, and from where.
    pub post_will_restore: Option<RestoreReport>,
    /// Content that `pre` or `post` would refuse.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReport {
    #[serde(flatten)]
    pub owner: Owner,
    pub blocks_chart_change: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    pub source: Source,
    /// The methods `post` would set; `None` with `source: nothing`, or an absent original.
    pub methods: Option<Value>,
    pub reason: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartReport {
    pub object: String,
    pub found: bool,
    pub paused: bool,
    pub compare_patches_pointer: bool,
    pub values_override: Option<Value>,
    pub values_record: Option<ValueRecord>,
    pub compare_patch_record: Option<CompareRecord>,
    pub kubevirt_copy: Option<ValueRecord>,
    /// The values override's later choice, kept by `post` on both objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_choice: Option<Value>,
    /// Fleet's view (the Bundle's status as Rancher copies it); `None`: no Fleet status at all.
    pub fleet: Option<FleetReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Fleet's view of the ManagedChart, as Harvester's upgrade checks it (`Ready`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetReport {
    /// The `Ready` condition's status (`True`, `False`, ...), if there is one.
    pub ready: Option<String>,
    pub state: Option<String>,
    pub message: Option<String>,
    /// The Bundle's generation Fleet has seen.
    pub observed_generation: Option<i64>,
    /// The current spec, so our last change to it, is deployed: `Ready` with everything ready.
    pub current_spec_applied: bool,
    /// What Fleet says, in one line ([`fleet::said`]).
    pub said: String,
}

/// Keeps a reader's value, or notes why it is refused.
fn read<T>(problems: &mut Vec<String>, r: Result<Option<T>, Malformed>) -> Option<T> {
    r.unwrap_or_else(|m| {
        // Two readers of one record fail alike: each problem is said once.
        if !problems.contains(&m.0) {
            problems.push(m.0);
        }
        None
    })
}

fn text(obj: &Value, ptr: &str) -> Option<String> {
    obj.pointer(ptr).and_then(Value::as_str).map(str::to_string)
}

impl Report {
    /// `chart`: the ManagedChart as read, or why it could not be (its CRD is not served).
    pub fn new(
        intent: &Intent,
        (kubevirt, kv): (&Target, Option<&Value>),
        chart: Option<(&Target, Result<Option<&Value>, &String>)>,
        migrations: &[Value],
    ) -> Self {
        let chart_read = chart;
        let chart = chart.map(|(t, read)| match read {
            Ok(obj) => chart_report(t, obj, intent),
            Err(e) => {
                let mut r = chart_report(t, None, intent);
                r.problems.push(e.clone());
                r
            }
        });
        let copy = chart.as_ref().and_then(|c| c.kubevirt_copy.clone());
        let values_choice = chart.as_ref().and_then(|c| c.values_choice.clone());
        let k = kubevirt_report(kubevirt, kv, copy.as_ref(), values_choice.as_ref(), intent);
        let unfinished = unfinished(migrations);
        let restore = k.post_will_restore.as_ref();
        let source = restore.map(|r| r.source);
        let suspended = matches!(
            source,
            Some(Source::CrRecord | Source::ChartCopy | Source::Fallback | Source::ValuesChoice)
        );
        let will_restore = restore
            .filter(|_| suspended || source == Some(Source::BlindRestore))
            .and_then(|r| r.methods.clone());
        // Problems are shown once, under their object, and the verdict names the first; a
        // ManagedChart that could not be read is a warning.
        let mut warnings: Vec<String> = chart
            .iter()
            .filter(|c| !c.found)
            .flat_map(|c| c.problems.iter().cloned())
            .collect();
        warnings.extend(kv.map(update_claim_warnings).unwrap_or_default());
        if let Some(r) = restore.filter(|r| r.source == Source::LaterChoice) {
            warnings.push(r.reason.clone());
        }
        if let Some(c) = chart.as_ref().filter(|c| c.found) {
            if c.paused {
                warnings.push(format!(
                    "{} is paused: Fleet deploys nothing until it is unpaused",
                    c.object
                ));
            } else if let Some(f) = c.fleet.as_ref().filter(|f| !f.current_spec_applied) {
                warnings.push(format!(
                    "Fleet has not applied {}'s current spec ({}): Harvester refuses to start an \
                     upgrade until it is Ready",
                    c.object, f.said
                ));
            }
        }
        let refused = refusal(&k, chart.as_ref());
        let verdict = match &refused {
            Some(refused) => refused.clone(),
            None => verdict(&k, source, &will_restore),
        };
        let mut report = Report {
            verdict,
            suspended,
            will_restore,
            restore_source: source,
            warnings,
            kubevirt: k,
            managed_chart: chart,
            unfinished_migrations: unfinished,
            harvester: None,
        };
        if let (None, Some((target, Ok(Some(obj))))) = (&refused, chart_read) {
            report.account_for(target, &chart_ours(obj, &intent.keys.kubevirt), true);
        }
        // A post stopped between its restore and its release: the fields are restored, but
        // given back to nobody yet.
        let pending = kv.is_some_and(|o| {
            o.pointer("/metadata/annotations")
                .and_then(|a| a.get(OWNERS_TO_RETURN))
                .is_some()
        });
        if refused.is_none() && pending && !report.suspended {
            report.warnings.push(format!(
                "{kubevirt} still has the owners a stopped post has to give back ({OWNERS_TO_RETURN})"
            ));
            report.verdict = format!(
                "{}; but post stopped before giving the methods back to their owners: run post \
                 again to finish (hack/job.sh run post)",
                report.verdict
            );
        }
        report
    }

    /// With `MANAGEDCHART_NAME` empty: the default ManagedChart as read, for what of ours it
    /// still carries (`post` with that setting leaves it there).
    pub fn with_unnamed_chart(mut self, intent: &Intent, target: &Target, obj: &Value) -> Self {
        if !self.verdict.starts_with("REFUSED") {
            self.account_for(target, &chart_ours(obj, &intent.keys.kubevirt), false);
        }
        self
    }

    /// The verdict accounts for what of ours the ManagedChart still carries while the CR is not
    /// suspended by us: a half-restored state, which Fleet's next deploy suspends again while
    /// pre's values override `[]` is there.
    fn account_for(&mut self, target: &Target, ours: &ChartOurs, named: bool) {
        if self.suspended || !self.kubevirt.found || ours.is_empty() {
            return;
        }
        let parts: Vec<String> = [&ours.values, &ours.compare, &ours.object]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let switches = if named {
            "with the ManagedChart steps on (STEP_CHART_VALUES=true STEP_COMPARE_PATCHES=true)"
                .to_string()
        } else {
            format!(
                "with MANAGEDCHART_NAMESPACE={} MANAGEDCHART_NAME={} (MANAGEDCHART_NAME is empty \
                 here: the default was read)",
                target.key.namespace, target.key.name
            )
        };
        let finish = format!("post {switches} removes it (hack/job.sh run post)");
        let methods = &self.kubevirt.workload_update_methods;
        let on = methods
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|m| !m.is_empty());
        self.warnings.push(format!(
            "{target} still carries what pre wrote there: {}",
            parts.join(", ")
        ));
        self.verdict = if ours.suspends_at_next_deploy && on {
            format!(
                "ATTENTION: automated updates on ({}) only until Fleet's next deploy, which \
                 suspends them again: {target} still has pre's values override []; {finish}",
                json(methods)
            )
        } else {
            format!(
                "{}; but {target} still carries records of ours; {finish}",
                self.verdict
            )
        };
    }
}

/// The verdict while content of ours is corrupted or malformed: `pre` and `post` refuse (exit 3)
/// and write nothing. It names the problem (with the commands that recover, which the reader
/// puts in it) and what the other object's copy of the original says.
fn refusal(k: &KubeVirtReport, chart: Option<&ChartReport>) -> Option<String> {
    // A ManagedChart that could not be read (its CRD not served) refuses nothing by itself.
    let chart = chart.filter(|c| c.found);
    let chart_problems = chart.map_or(&[][..], |c| c.problems.as_slice());
    let (object, problem) = match (k.problems.first(), chart_problems.first()) {
        (Some(p), _) => (&k.object, p),
        (None, Some(p)) => (&chart.expect("a chart problem").object, p),
        (None, None) => return None,
    };
    let other = if k.problems.iter().any(|p| p.contains(KUBEVIRT_RECORD)) {
        match chart.and_then(|c| c.kubevirt_copy.as_ref()) {
            Some(copy) => format!(
                " The ManagedChart's copy says the original was {}.",
                json(&copy.original())
            ),
            None => " There is no copy of the original on the ManagedChart.".into(),
        }
    } else if chart_problems.iter().any(|p| p.contains(KUBEVIRT_COPY)) {
        match &k.saved_original {
            Some(r) => format!(
                " The KubeVirt CR's record says the original was {}.",
                json(&r.original())
            ),
            None => " The KubeVirt CR has no record of the original.".into(),
        }
    } else {
        String::new()
    };
    let more = k.problems.len() + chart_problems.len() - 1;
    let more = if more > 0 {
        format!(" ({more} more PROBLEM below)")
    } else {
        String::new()
    };
    Some(format!(
        "REFUSED: pre and post exit 3 and write nothing until this is fixed: {object}: \
         {problem}.{other}{more}"
    ))
}

/// The operator's question, answered first.
fn verdict(k: &KubeVirtReport, source: Option<Source>, will_restore: &Option<Value>) -> String {
    if !k.found {
        return format!(
            "NOT FOUND: {} (check KUBEVIRT_NAMESPACE and KUBEVIRT_NAME)",
            k.object
        );
    }
    let methods = json(&k.workload_update_methods);
    let since = k
        .methods_owners
        .iter()
        .find(|o| o.owner.manager == FIELD_MANAGER)
        .and_then(|o| o.owner.time.as_deref())
        .map_or(String::new(), |t| format!(" since {t}"));
    let off = k
        .workload_update_methods
        .as_ref()
        .is_none_or(|m| m.as_array().is_some_and(Vec::is_empty));
    match source {
        Some(Source::CrRecord) => format!(
            "SUSPENDED{since} by pre; post will restore {} (from the CR's record)",
            json(will_restore)
        ),
        Some(Source::ChartCopy) => format!(
            "SUSPENDED{since}, no record on the CR; post will restore {} (from the ManagedChart's copy)",
            json(will_restore)
        ),
        Some(Source::Fallback) => format!(
            "SUSPENDED{since}, record lost; post will apply the fallback {}",
            json(will_restore)
        ),
        Some(Source::ValuesChoice) => format!(
            "SUSPENDED{since} by pre; the values override was changed while suspended, so post will \
             set {} on both (what Fleet renders)",
            json(will_restore)
        ),
        Some(Source::BlindRestore) => format!(
            "ATTENTION: a hard-coded {methods} was written over the recorded original (Harvester's \
             upgrade cleanup); post will put {} back",
            json(will_restore)
        ),
        Some(Source::AlreadyRestored) => format!(
            "NOT SUSPENDED: methods back at the recorded original {methods}; post will only drop \
             its records and claims"
        ),
        Some(Source::LaterChoice) => format!(
            "ATTENTION: methods changed to {methods} while suspended; post will keep them and drop the record"
        ),
        _ if off && k.workload_update_methods.is_some() => {
            "ATTENTION: updates off ([]) with no record; post will not restore them".into()
        }
        _ if off => "NOT SUSPENDED: methods absent (no automated updates)".into(),
        _ => format!("NOT SUSPENDED: automated updates on ({methods})"),
    }
}

fn kubevirt_report(
    target: &Target,
    obj: Option<&Value>,
    copy: Option<&ValueRecord>,
    values_choice: Option<&Value>,
    intent: &Intent,
) -> KubeVirtReport {
    let mut problems = Vec::new();
    let null = Value::Null;
    let o = obj.unwrap_or(&null);
    let methods = obj.and_then(|o| read(&mut problems, methods(o).map(Some)).flatten());
    let saved_original = obj.and_then(|o| read(&mut problems, kubevirt_record(o)));
    let post_will_restore = obj.and_then(|o| {
        let r = read(
            &mut problems,
            restore_source(o, copy, intent.fallback.as_deref(), values_choice).map(Some),
        )?;
        Some(RestoreReport {
            source: r.source,
            methods: r.original.and_then(|v| v.original()),
            reason: r.reason,
        })
    });
    KubeVirtReport {
        object: target.to_string(),
        found: obj.is_some(),
        phase: text(o, "/status/phase"),
        observed_kube_virt_version: text(o, "/status/observedKubeVirtVersion"),
        target_kube_virt_version: text(o, "/status/targetKubeVirtVersion"),
        workload_update_methods: methods,
        saved_original,
        outdated_virtual_machine_instance_workloads: o
            .pointer("/status/outdatedVirtualMachineInstanceWorkloads")
            .and_then(Value::as_i64),
        methods_owners: owners(o, METHODS_PATH)
            .into_iter()
            .map(|owner| OwnerReport {
                blocks_chart_change: owner.blocks_apply(),
                owner,
            })
            .collect(),
        post_will_restore,
        problems,
    }
}

fn chart_report(target: &Target, obj: Option<&Value>, intent: &Intent) -> ChartReport {
    let mut problems = Vec::new();
    let null = Value::Null;
    let o = obj.unwrap_or(&null);
    let list = obj.and_then(|o| read(&mut problems, compare_list(o)));
    let pointer = read(
        &mut problems,
        find_pointer(list, &intent.keys.kubevirt).map(Some),
    )
    .flatten();
    ChartReport {
        object: target.to_string(),
        found: obj.is_some(),
        paused: o.pointer("/spec/paused").and_then(Value::as_bool) == Some(true),
        compare_patches_pointer: pointer.is_some(),
        values_override: obj
            .and_then(|o| read(&mut problems, lookup(o, VALUES_PATH).map(|v| v.cloned()))),
        values_record: obj
            .and_then(|o| read(&mut problems, read_record(o, crate::model::VALUES_RECORD))),
        compare_patch_record: obj
            .and_then(|o| read(&mut problems, read_record(o, crate::model::COMPARE_RECORD))),
        kubevirt_copy: obj.and_then(|o| read(&mut problems, kubevirt_copy(o))),
        values_choice: obj
            .filter(|_| intent.steps.values)
            .and_then(|o| read(&mut problems, values_choice(o))),
        fleet: obj.filter(|o| fleet::has_status(o)).map(fleet_report),
        problems,
    }
}

/// Harvester's own upgrade, as `status` shows it (docs/design.md, "Harvester's own handling").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HarvesterReport {
    pub latest_upgrade: Option<Upgrade>,
    /// What its cleanup will still write to the values key.
    pub cleanup_writes: Option<CleanupWrite>,
    /// The releases on offer that suspend the methods themselves, newest first.
    pub offered: Vec<(String, Handling)>,
}

impl Report {
    /// Adds Harvester's upgrade to the report, with a warning where its cleanup will write our
    /// `[]` back, or where it holds the suspension itself.
    pub fn with_harvester(
        mut self,
        upgrade: Option<Upgrade>,
        offered: Vec<(String, Handling)>,
    ) -> Self {
        let values = self
            .managed_chart
            .as_ref()
            .and_then(|c| c.values_override.clone());
        let values_ours = self
            .managed_chart
            .as_ref()
            .is_some_and(|c| c.values_record.is_some());
        // What `post` waits for the cleanup with (`harvester::ours`, as the report reads it).
        let ours = values_ours || self.kubevirt.saved_original.is_some();
        let cleanup_writes = upgrade.as_ref().map(|u| u.cleanup_writes(values.as_ref()));
        if let Some(u) = upgrade.as_ref().filter(|u| u.cleanup_pending()) {
            if values_ours && u.backup == Backup::Value(serde_json::json!([])) {
                self.warnings.push(format!(
                    "{} backed up pre's [] as the original: its cleanup writes [] back into the \
                     values. Run post after that cleanup (post waits for it), or updates stay off",
                    u.describe()
                ));
            } else if !ours && u.backup != Backup::None {
                self.warnings.push(format!(
                    "{} suspended the updates itself (backup {}); its cleanup {}",
                    u.describe(),
                    u.backup.describe(),
                    cleanup_writes
                        .as_ref()
                        .map_or(String::new(), CleanupWrite::describe)
                ));
            } else if ours {
                self.warnings.push(format!(
                    "{} has not finished its cleanup: post waits for it",
                    u.describe()
                ));
            }
        }
        self.harvester = Some(HarvesterReport {
            latest_upgrade: upgrade,
            cleanup_writes,
            offered,
        });
        self
    }
}

fn fleet_report(chart: &Value) -> FleetReport {
    let ready = chart
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    let field = |k: &str| {
        ready
            .and_then(|c| c.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    FleetReport {
        ready: field("status"),
        state: text(chart, "/status/display/state"),
        message: field("message"),
        observed_generation: fleet::observed_generation(chart),
        current_spec_applied: matches!(fleet::fleet_view(chart, None), Fleet::Applied(_)),
        said: fleet::said(chart),
    }
}

/// The workload-update migrations that have not finished.
pub fn unfinished(migrations: &[Value]) -> Vec<Migration> {
    migrations
        .iter()
        .filter(|m| {
            !matches!(
                m.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
        })
        .map(|m| Migration {
            namespace: text(m, "/metadata/namespace").unwrap_or_default(),
            name: text(m, "/metadata/name").unwrap_or_default(),
            phase: text(m, "/status/phase").unwrap_or_else(|| "Pending".into()),
        })
        .collect()
}

/// One `  label   value` line of the human report.
fn row(
    f: &mut std::fmt::Formatter<'_>,
    label: &str,
    value: impl std::fmt::Display,
) -> std::fmt::Result {
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

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        writeln!(f, "{}", self.verdict)?;
        for w in &self.warnings {
            writeln!(f, "WARNING: {w}")?;
        }
        let k = &self.kubevirt;
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
                row(f, "while off", crate::phases::HOTPLUG_NOTICE)?;
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
            row(
                f,
                "outdated VMI workloads",
                k.outdated_virtual_machine_instance_workloads
                    .map_or("-".into(), |n| n.to_string()),
            )?;
            let none = if k.methods_owners.is_empty() {
                "none"
            } else {
                ""
            };
            row(f, &format!("owners of {METHODS_FIELD}"), none)?;
            for o in &k.methods_owners {
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
            for p in &k.problems {
                row(f, "PROBLEM", p)?;
            }
        }
        writeln!(
            f,
            "workload-update migrations not finished: {}",
            self.unfinished_migrations.len()
        )?;
        for m in &self.unfinished_migrations {
            writeln!(f, "  {}/{} ({})", m.namespace, m.name, m.phase)?;
        }
        if let Some(c) = &self.managed_chart {
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
        }
        if let Some(h) = &self.harvester {
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
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_unfinished_workload_update_migrations_are_listed() {
        let m = |ns: &str, name: &str, phase: Option<&str>| {
            let mut v = json!({"metadata": {"namespace": ns, "name": name}});
            if let Some(p) = phase {
                v["status"] = json!({"phase": p});
            }
            v
        };
        let list = [
            m("a", "kubevirt-workload-update-1", Some("Running")),
            m("b", "kubevirt-workload-update-2", Some("Succeeded")),
            m("c", "kubevirt-workload-update-3", None),
            m("d", "kubevirt-workload-update-4", Some("Failed")),
        ];
        let names: Vec<String> = unfinished(&list)
            .iter()
            .map(|m| format!("{}/{} ({})", m.namespace, m.name, m.phase))
            .collect();
        assert_eq!(
            names,
            [
                "a/kubevirt-workload-update-1 (Running)",
                "c/kubevirt-workload-update-3 (Pending)"
            ]
        );
    }

    /// A corrupted record on the CR: one verdict that names it, what the ManagedChart's copy
    /// says and the command that recovers; the problem shown once under its object.
    #[test]
    fn a_corrupted_record_gets_a_verdict_that_says_how_to_recover() {
        use crate::model::Kind;
        use crate::plan::testing::*;
        let intent = intent(Phase::Status);
        let kv0 = kubevirt(Some(json!(["LiveMigrate"])));
        let copy = crate::plan::kubevirt::kubevirt_original(&kv0).unwrap();
        let ch0 = chart(json!({}), None);
        let key = intent.keys.chart.clone().unwrap();
        let ch1 = apply(
            &ch0,
            &crate::plan::chart::chart_pre(&ch0, &kv(), &Steps::ALL, Some(&copy)).unwrap(),
        );
        let mut kv1 = pre_kv(&kv0);
        kv1["metadata"]["annotations"][KUBEVIRT_RECORD] = json!("{not json");
        let (kt, ct) = (
            Target::new(Kind::KubeVirt, &kv()),
            Target::new(Kind::ManagedChart, &key),
        );
        let r = Report::new(&intent, (&kt, Some(&kv1)), Some((&ct, Ok(Some(&ch1)))), &[]);
        for part in [
            "REFUSED: pre and post exit 3",
            KUBEVIRT_RECORD,
            "The ManagedChart's copy says the original was [\"LiveMigrate\"]",
            &format!("kubectl -n harvester-system annotate kubevirt kubevirt {KUBEVIRT_RECORD}-"),
        ] {
            assert!(r.verdict.contains(part), "{part:?} not in {}", r.verdict);
        }
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let text = r.to_string();
        // Once in the verdict, once as the CR's PROBLEM.
        assert_eq!(text.matches("is corrupted").count(), 2, "{text}");
        assert!(!text.contains("Entry"), "{text}");
    }

    /// Fleet's view: Ready or not, the state and message, and whether the current spec is
    /// deployed; a chart without any status says so.
    #[test]
    fn status_shows_fleets_view() {
        use crate::model::Kind;
        use crate::plan::testing::*;
        let intent = intent(Phase::Status);
        let key = intent.keys.chart.clone().unwrap();
        let (kt, ct) = (
            Target::new(Kind::KubeVirt, &kv()),
            Target::new(Kind::ManagedChart, &key),
        );
        let kv_obj = kubevirt(Some(json!(["LiveMigrate"])));
        let mut ch = chart(json!({}), None);
        let text = Report::new(
            &intent,
            (&kt, Some(&kv_obj)),
            Some((&ct, Ok(Some(&ch)))),
            &[],
        )
        .to_string();
        assert!(text.contains("no status"), "{text}");
        let wait = "WaitApplied(1) [Cluster fleet-local/local]";
        ch["status"] = json!({"observedGeneration": 3, "display": {"state": "WaitApplied"},
            "summary": {"desiredReady": 1, "ready": 0, "waitApplied": 1},
            "conditions": [{"type": "Ready", "status": "False", "message": wait}]});
        let r = Report::new(
            &intent,
            (&kt, Some(&kv_obj)),
            Some((&ct, Ok(Some(&ch)))),
            &[],
        );
        let f = r.managed_chart.as_ref().unwrap().fleet.as_ref().unwrap();
        assert_eq!(
            (f.ready.as_deref(), f.state.as_deref(), f.message.as_deref()),
            (Some("False"), Some("WaitApplied"), Some(wait))
        );
        assert!(!f.current_spec_applied);
        assert!(
            r.warnings.iter().any(|w| w.contains("refuses to start")),
            "{:?}",
            r.warnings
        );
        let text = r.to_string();
        assert!(
            text.contains(wait) && text.contains("last change applied"),
            "{text}"
        );
        ch["status"]["conditions"][0] = json!({"type": "Ready", "status": "True"});
        ch["status"]["summary"]["ready"] = json!(1);
        ch["status"]["display"]["state"] = json!("Ready");
        let r = Report::new(
            &intent,
            (&kt, Some(&kv_obj)),
            Some((&ct, Ok(Some(&ch)))),
            &[],
        );
        assert!(
            r.managed_chart
                .as_ref()
                .unwrap()
                .fleet
                .as_ref()
                .unwrap()
                .current_spec_applied
        );
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert!(r.to_string().contains("yes: the current spec"));
    }

    #[test]
    fn an_empty_owner_list_says_none() {
        use crate::model::Kind;
        use crate::plan::testing::*;
        let intent = intent(Phase::Status);
        let kt = Target::new(Kind::KubeVirt, &kv());
        let obj = kubevirt(Some(json!(["LiveMigrate"])));
        let text = Report::new(&intent, (&kt, Some(&obj)), None, &[]).to_string();
        // The label is longer than its column: a space still parts it from the value.
        assert!(
            text.contains(&format!("owners of {METHODS_FIELD} none\n")),
            "{text}"
        );
        // "nothing" once, then why.
        assert!(
            text.contains(
                "  post would restore          nothing: no record of ours, and the methods are \
                 [\"LiveMigrate\"] (already restored, or never suspended)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("nothing: nothing"), "{text}");
    }

    /// The case: `pre` with the defaults, then `post MANAGEDCHART_NAME=`. The CR is on,
    /// the ManagedChart keeps pre's values override `[]`: the verdict says that Fleet's next
    /// deploy suspends the updates again and how to finish, with the ManagedChart named or read
    /// under the default name; a state that is all suspended or all restored says no such thing.
    #[test]
    fn a_half_restored_state_is_not_called_not_suspended() {
        use crate::model::Kind;
        use crate::plan::testing::*;
        let named = intent(Phase::Status);
        let start = Objects {
            kubevirt: Some(kubevirt(Some(json!(["LiveMigrate"])))),
            chart: Some(chart(json!({}), None)),
        };
        let suspended = run_phase(Phase::Pre, &start);
        let (kv1, ch1) = (suspended.kubevirt.unwrap(), suspended.chart.unwrap());
        let kv_only = post_kv(&kv1, None);
        let key = named.keys.chart.clone().unwrap();
        let (kt, ct) = (
            Target::new(Kind::KubeVirt, &kv()),
            Target::new(Kind::ManagedChart, &key),
        );
        let r = Report::new(
            &named,
            (&kt, Some(&kv_only)),
            Some((&ct, Ok(Some(&ch1)))),
            &[],
        );
        assert_eq!(
            r.verdict,
            "ATTENTION: automated updates on ([\"LiveMigrate\"]) only until Fleet's next deploy, \
             which suspends them again: ManagedChart fleet-local/harvester still has pre's values \
             override []; post with the ManagedChart steps on (STEP_CHART_VALUES=true \
             STEP_COMPARE_PATCHES=true) removes it (hack/job.sh run post)"
        );
        assert_eq!(
            r.warnings,
            [
                "ManagedChart fleet-local/harvester still carries what pre wrote there: the values \
              override [] and its record, the comparePatches pointer and its record, the copy of \
              the KubeVirt CR's original"
            ]
        );
        let mut unnamed = named.clone();
        unnamed.keys.chart = None;
        let r = Report::new(&unnamed, (&kt, Some(&kv_only)), None, &[])
            .with_unnamed_chart(&unnamed, &ct, &ch1);
        assert!(
            r.verdict.starts_with("ATTENTION: automated updates on"),
            "{}",
            r.verdict
        );
        assert!(
            r.verdict.contains(
                "post with MANAGEDCHART_NAMESPACE=fleet-local MANAGEDCHART_NAME=harvester \
                 (MANAGEDCHART_NAME is empty here: the default was read) removes it"
            ),
            "{}",
            r.verdict
        );
        // Only the comparePatches record left: not suspended, and the record is named.
        let mut compare_only = ch1.clone();
        for key in [VALUES_RECORD, KUBEVIRT_COPY] {
            compare_only["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove(key);
        }
        compare_only["spec"]["values"] = json!({});
        let r = Report::new(
            &named,
            (&kt, Some(&kv_only)),
            Some((&ct, Ok(Some(&compare_only)))),
            &[],
        );
        assert!(
            r.verdict.starts_with(
                "NOT SUSPENDED: automated updates on ([\"LiveMigrate\"]); but ManagedChart \
                 fleet-local/harvester still carries records of ours; post with"
            ),
            "{}",
            r.verdict
        );
        // All suspended, or all restored: the verdicts as before, no warning.
        let r = Report::new(&named, (&kt, Some(&kv1)), Some((&ct, Ok(Some(&ch1)))), &[]);
        assert!(r.verdict.starts_with("SUSPENDED"), "{}", r.verdict);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let end = run_phase(
            Phase::Post,
            &Objects {
                kubevirt: Some(kv1),
                chart: Some(ch1),
            },
        );
        let r = Report::new(
            &named,
            (&kt, end.kubevirt.as_ref()),
            Some((&ct, Ok(end.chart.as_ref()))),
            &[],
        );
        assert_eq!(
            r.verdict,
            "NOT SUSPENDED: automated updates on ([\"LiveMigrate\"])"
        );
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        // A post stopped between the CR's restore and its release: said, with the remedy.
        let mut stopped = end.kubevirt.clone().unwrap();
        stopped["metadata"]["annotations"] = json!({OWNERS_TO_RETURN: "[]"});
        let r = Report::new(
            &named,
            (&kt, Some(&stopped)),
            Some((&ct, Ok(end.chart.as_ref()))),
            &[],
        );
        assert_eq!(
            r.verdict,
            "NOT SUSPENDED: automated updates on ([\"LiveMigrate\"]); but post stopped before \
             giving the methods back to their owners: run post again to finish (hack/job.sh run \
             post)"
        );
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    }
}
