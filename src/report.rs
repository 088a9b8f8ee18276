//! `PHASE=status`: a read-only report, read through the same readers as the planners, so it
//! never calls "absent" what `pre` or `post` would refuse as corrupted.

use serde_json::Value;

use crate::model::{
    COMPARE_RECORD, METHODS_PATH, OWNERS_TO_RETURN, Target, VALUES_PATH, VALUES_RECORD,
};
use crate::plan::chart::{compare_list, find_pointer, values_choice};
use crate::plan::fields::{ChartRead, KubeVirtRead};
use crate::plan::fleet_status::{self, Fleet};
use crate::plan::forecast::Forecast;
use crate::plan::harvester_upgrade::{Backup, CleanupWrite, Upgrade};
use crate::plan::json::{annotation, lookup};
use crate::plan::kubevirt::{Source, restore_source};
use crate::plan::leftovers::chart_ours;
use crate::plan::migrations::Migration;
use crate::plan::ownership::{owners, update_claim_warnings};
use crate::plan::pre_advice::{self, Coming};
use crate::plan::records::{describe, kubevirt_copy, kubevirt_record, methods, read_record};
use crate::plan::releases::Handling;
use crate::plan::upgrade_progress;
use crate::vocabulary::{Intent, Malformed};
use text::{refusal, verdict};

mod data;
mod text;

pub use data::*;

/// Each problem is noted once: two readers of one record fail alike.
fn read<T>(problems: &mut Vec<String>, r: Result<Option<T>, Malformed>) -> Option<T> {
    r.unwrap_or_else(|m| {
        if !problems.contains(&m.0) {
            problems.push(m.0);
        }
        None
    })
}

impl Report {
    /// `chart`: the ManagedChart as read, or why it could not be (its CRD is not served).
    pub fn new(
        intent: &Intent,
        (kubevirt, kv): (&Target, Option<&Value>),
        chart: Option<(&Target, Result<Option<&Value>, &String>)>,
        unfinished: &[Migration],
        vmi_forecast: Option<Forecast>,
    ) -> Self {
        let managed_chart = chart.map(|(t, read)| chart_report(t, read, intent));
        let chart_read = chart.and_then(|(_, read)| read.ok().flatten());
        let blocked_by = kv
            .zip(chart_read)
            .and_then(|(kv, c)| fleet_status::deploy_blocked_by(kv, c));
        let k = kubevirt_report(kubevirt, kv, managed_chart.as_ref(), intent);
        let restore = k.post_will_restore.as_ref();
        let source = restore.map(|r| r.source);
        use Source::*;
        let suspended = matches!(source, Some(CrRecord | ChartCopy | Fallback | ValuesChoice));
        let will_restore = restore
            .filter(|_| suspended || source == Some(BlindRestore))
            .and_then(|r| r.methods.clone());
        let mut report = Report {
            verdict: refusal(&k, managed_chart.as_ref())
                .unwrap_or_else(|| verdict(&k, source, &will_restore)),
            warnings: warnings(managed_chart.as_ref(), kv, restore, blocked_by),
            suspended,
            will_restore,
            restore_source: source,
            kubevirt: k,
            managed_chart,
            unfinished_migrations: unfinished.to_vec(),
            vmi_forecast,
            harvester: None,
            retirement: None,
            upgrades: Vec::new(),
        };
        if let Some((target, Ok(Some(obj)))) = chart {
            report.account_for(intent, target, obj, true);
        }
        // A post stopped between its restore and its release: the fields are restored, but
        // given back to nobody yet.
        let pending = kv.is_some_and(|o| annotation(o, OWNERS_TO_RETURN).is_some());
        if pending && !report.suspended && !report.refused() {
            report.warnings.push(format!(
                "{kubevirt} still has the owners a stopped post has to give back ({OWNERS_TO_RETURN})"
            ));
            report.verdict += "; but post stopped before giving the methods back to their owners: \
                               run post again to finish (hack/job.sh run post)";
        }
        report
    }

    fn refused(&self) -> bool {
        self.verdict.starts_with("REFUSED")
    }

    /// The verdict accounts for what of ours the ManagedChart still carries while the CR is not
    /// suspended by us: a half-restored state, which Fleet's next deploy suspends again while
    /// pre's values override `[]` is there. `named: false`: `MANAGEDCHART_NAME` is empty and the
    /// default ManagedChart was read (`post` with that setting leaves it there).
    pub fn account_for(&mut self, intent: &Intent, target: &Target, obj: &Value, named: bool) {
        let ours = chart_ours(obj, &intent.keys.kubevirt);
        if self.refused() || self.suspended || !self.kubevirt.found || ours.is_empty() {
            return;
        }
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
        let on = matches!(methods, Some(Value::Array(m)) if !m.is_empty());
        let parts = ours.all().join(", ");
        let warning = format!("{target} still carries what pre wrote there: {parts}");
        self.warnings.push(warning);
        self.verdict = if ours.suspends_at_next_deploy && on {
            format!(
                "ATTENTION: automated updates on ({}) only until Fleet's next deploy, which \
                 suspends them again: {target} still has pre's values override []; {finish}",
                describe(methods)
            )
        } else {
            let verdict = &self.verdict;
            format!("{verdict}; but {target} still carries records of ours; {finish}")
        };
    }

    pub fn with_harvester(
        mut self,
        upgrade: Option<Upgrade>,
        offered: Vec<(String, Handling)>,
        coming: Coming,
    ) -> Self {
        let chart = self.managed_chart.as_ref();
        let values = chart.and_then(|c| c.values_override.as_ref());
        let values_ours = chart.is_some_and(|c| c.values_record.is_some());
        // `post` waits only with something of ours on the objects (`ownership::anything_of_ours`).
        let ours = values_ours || self.kubevirt.saved_original.is_some();
        let cleanup_writes = upgrade.as_ref().map(|u| u.cleanup_writes(values));
        if let Some(u) = upgrade.as_ref().filter(|u| u.cleanup_pending()) {
            let upgrade = u.describe();
            let warning = if values_ours && u.backup == Backup::Value(serde_json::json!([])) {
                Some(format!(
                    "{upgrade} backed up pre's [] as the original: its cleanup writes [] back \
                     into the values. Run post after that cleanup (post waits for it), or updates \
                     stay off"
                ))
            } else if !ours && u.backup != Backup::None {
                let writes = cleanup_writes.as_ref();
                let writes = writes.map_or(String::new(), CleanupWrite::describe);
                let backup = u.backup.describe();
                Some(format!(
                    "{upgrade} suspended the updates itself (backup {backup}); its cleanup {writes}"
                ))
            } else {
                ours.then(|| format!("{upgrade} has not finished its cleanup: post waits for it"))
            };
            self.warnings.extend(warning);
        }
        // After a failed Upgrade to a release that leaves the methods alone (`Handling::None`), the
        // waiting post holds (`upgrade_progress::held_after_failure`): said here too.
        if ours && let Some(held) = upgrade_progress::held_after_failure(upgrade.as_ref()) {
            let who = "the armed post and the resident guard hold; a by-hand post restores now";
            self.warnings.push(format!("{held} ({who})"));
        }
        let pre_needed = if ours {
            "pre has run (its records are on the objects): post restores".to_string()
        } else {
            let methods = &self.kubevirt.workload_update_methods;
            pre_advice::advise(&coming, methods).line().to_string()
        };
        self.harvester = Some(HarvesterReport {
            latest_upgrade: upgrade,
            cleanup_writes,
            offered,
            pre_needed,
        });
        self
    }
}

fn kubevirt_report(
    target: &Target,
    obj: Option<&Value>,
    chart: Option<&ChartReport>,
    intent: &Intent,
) -> KubeVirtReport {
    let object = target.to_string();
    let Some(o) = obj else {
        return KubeVirtReport {
            object,
            ..Default::default()
        };
    };
    let copy = chart.and_then(|c| c.kubevirt_copy.as_ref());
    let choice = chart.and_then(|c| c.values_choice.as_ref());
    let restore = restore_source(o, copy, intent.fallback.as_deref(), choice).map(Some);
    let mut problems = Vec::new();
    let read_kv = KubeVirtRead::of(o);
    let (phase, observed_kube_virt_version, target_kube_virt_version) = read_kv.deployment();
    KubeVirtReport {
        object,
        found: true,
        phase,
        observed_kube_virt_version,
        target_kube_virt_version,
        workload_update_methods: read(&mut problems, methods(o)),
        saved_original: read(&mut problems, kubevirt_record(o)),
        outdated_virtual_machine_instance_workloads: read_kv.outdated(),
        methods_owners: owners(o, METHODS_PATH)
            .into_iter()
            .map(|owner| OwnerReport {
                blocks_chart_change: owner.blocks_apply(),
                owner,
            })
            .collect(),
        post_will_restore: read(&mut problems, restore).map(|r| RestoreReport {
            source: r.source,
            methods: r.original.and_then(|v| v.original()),
            reason: r.reason,
        }),
        problems,
    }
}

fn chart_report(
    target: &Target,
    as_read: Result<Option<&Value>, &String>,
    intent: &Intent,
) -> ChartReport {
    let object = target.to_string();
    let Ok(Some(o)) = as_read else {
        let problems = as_read.err().cloned().into_iter().collect();
        return ChartReport {
            object,
            problems,
            ..Default::default()
        };
    };
    let mut problems = Vec::new();
    let list = read(&mut problems, compare_list(o));
    let pointer = read(&mut problems, find_pointer(list, &intent.keys.kubevirt));
    ChartReport {
        object,
        found: true,
        paused: ChartRead::of(o).paused(),
        compare_patches_pointer: pointer.is_some(),
        values_override: read(&mut problems, lookup(o, VALUES_PATH).map(|v| v.cloned())),
        values_record: read(&mut problems, read_record(o, VALUES_RECORD)),
        compare_patch_record: read(&mut problems, read_record(o, COMPARE_RECORD)),
        kubevirt_copy: read(&mut problems, kubevirt_copy(o)),
        values_choice: (intent.steps.values)
            .then(|| read(&mut problems, values_choice(o)))
            .flatten(),
        fleet: fleet_status::has_status(o).then(|| fleet_report(o)),
        problems,
    }
}

/// A found object's problems are no warnings: they are shown under it, and the verdict names
/// the first.
/// `blocked_by`: the claim Fleet's deploy waits on, named as the cause of its not applying.
fn warnings(
    chart: Option<&ChartReport>,
    kv: Option<&Value>,
    restore: Option<&RestoreReport>,
    blocked_by: Option<fleet_status::Conflict>,
) -> Vec<String> {
    let unread = chart.filter(|c| !c.found).map(|c| c.problems.clone());
    let mut warnings = unread.unwrap_or_default();
    warnings.extend(kv.map(update_claim_warnings).unwrap_or_default());
    let later = restore.filter(|r| r.source == Source::LaterChoice);
    warnings.extend(later.map(|r| r.reason.clone()));
    let Some(c) = chart.filter(|c| c.found) else {
        return warnings;
    };
    let object = &c.object;
    if c.paused {
        warnings.push(format!(
            "{object} is paused: Fleet deploys nothing until it is unpaused"
        ));
    } else if let Some(f) = c.fleet.as_ref().filter(|f| !f.current_spec_applied) {
        let cause = blocked_by.map_or(String::new(), |c| {
            format!("; its deploy waits on a claim: {c}")
        });
        warnings.push(format!(
            "Fleet has not applied {object}'s current spec ({}): Harvester refuses to start an \
             upgrade until it is Ready{cause}",
            f.said
        ));
    }
    warnings
}

fn fleet_report(chart: &Value) -> FleetReport {
    let fleet = ChartRead::of(chart).fleet();
    let ready = fleet.condition("Ready");
    let some = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
    FleetReport {
        ready: ready.and_then(|(status, _)| some(status)),
        state: some(&fleet.display.state),
        message: ready.and_then(|(_, message)| some(message)),
        observed_generation: fleet.observed_generation,
        current_spec_applied: matches!(fleet_status::fleet_view(chart, None), Fleet::Applied(_)),
        said: fleet_status::said(chart),
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use serde_json::json;

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
        let r = Report::new(
            &intent,
            (&kt, Some(&kv1)),
            Some((&ct, Ok(Some(&ch1)))),
            &[],
            None,
        );
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

    /// The forecast of the drains: the running VMIs, those that cannot live-migrate, the
    /// hot-plugs by name; in the JSON too.
    #[test]
    fn status_forecasts_the_drains() {
        use crate::model::Kind;
        use crate::plan::testing::*;
        let intent = intent(Phase::Status);
        let kt = Target::new(Kind::KubeVirt, &kv());
        let kv_obj = kubevirt(Some(json!(["LiveMigrate"])));
        let forecast = Forecast {
            running: 14,
            not_live_migratable: 2,
            hotplug_pending: 12,
            hotplug_named: (0..10).map(|i| format!("vms/v{i}")).collect(),
        };
        let r = Report::new(&intent, (&kt, Some(&kv_obj)), None, &[], Some(forecast));
        let text = r.to_string();
        for line in [
            "running VMIs: 14 (each node's drain live-migrates its VMs to the new virt-launcher)",
            "  cannot live-migrate: 2 (LiveMigratable not True: Harvester shuts them down at their \
             node's drain)",
            "  waiting on a CPU or memory hot-plug: 12 (migrated once updates are on): vms/v0, \
             vms/v1, vms/v2, vms/v3, vms/v4, vms/v5, vms/v6, vms/v7, vms/v8, vms/v9, and 2 more",
        ] {
            assert!(
                text.contains(&format!("{line}\n")),
                "{line:?} not in {text}"
            );
        }
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["vmiForecast"]["notLiveMigratable"], 2);
        assert_eq!(json["vmiForecast"]["hotplugNamed"][9], "vms/v9");
        // Not served (no VMI CRD): no line, and the rest of the report.
        let r = Report::new(&intent, (&kt, Some(&kv_obj)), None, &[], None);
        assert!(!r.to_string().contains("running VMIs"), "{r}");
        assert!(r.to_string().starts_with("NOT SUSPENDED"), "{r}");
        assert_eq!(
            serde_json::to_value(&r).unwrap()["vmiForecast"],
            Value::Null
        );
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
            None,
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
            None,
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
        assert!(
            !r.warnings.iter().any(|w| w.contains("waits on a claim")),
            "{:?}",
            r.warnings
        );
        // The add-on's `[]` by a merge patch: the deploy waits on upgrade-toolkit's claim.
        let mut claimed = kubevirt(Some(json!([])));
        claimed["metadata"]["managedFields"] = json!([
            entry("helm", "Apply", methods_fields()),
            entry("upgrade-toolkit", "Update", methods_fields()),
        ]);
        let blocked = Report::new(
            &intent,
            (&kt, Some(&claimed)),
            Some((&ct, Ok(Some(&ch)))),
            &[],
            None,
        );
        assert!(
            blocked
                .warnings
                .iter()
                .any(|w| w.contains("refuses to start")
                    && w.contains(
                        "its deploy waits on a claim: upgrade-toolkit holds an Update claim"
                    )),
            "{:?}",
            blocked.warnings
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
            None,
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
        let text = Report::new(&intent, (&kt, Some(&obj)), None, &[], None).to_string();
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
            foreign: None,
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
            None,
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
        let mut r = Report::new(&unnamed, (&kt, Some(&kv_only)), None, &[], None);
        r.account_for(&unnamed, &ct, &ch1, false);
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
            None,
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
        let r = Report::new(
            &named,
            (&kt, Some(&kv1)),
            Some((&ct, Ok(Some(&ch1)))),
            &[],
            None,
        );
        assert!(r.verdict.starts_with("SUSPENDED"), "{}", r.verdict);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let end = run_phase(
            Phase::Post,
            &Objects {
                kubevirt: Some(kv1),
                chart: Some(ch1),
                foreign: None,
            },
        );
        let r = Report::new(
            &named,
            (&kt, end.kubevirt.as_ref()),
            Some((&ct, Ok(end.chart.as_ref()))),
            &[],
            None,
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
            None,
        );
        assert_eq!(
            r.verdict,
            "NOT SUSPENDED: automated updates on ([\"LiveMigrate\"]); but post stopped before \
             giving the methods back to their owners: run post again to finish (hack/job.sh run \
             post)"
        );
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    }

    /// `status` gives `pre`'s own answer before `pre` runs, and says when `pre` has run.
    #[test]
    fn status_says_whether_pre_is_needed() {
        use crate::model::Kind;
        use crate::plan::testing::*;
        let intent = intent(Phase::Status);
        let kt = Target::new(Kind::KubeVirt, &kv());
        let kv0 = kubevirt(Some(json!(["LiveMigrate"])));
        for (offer, want) in [
            (
                "v1.7.3",
                "pre is not needed: Harvester v1.7.3, the one release on offer",
            ),
            (
                "v1.8.0",
                "pre is needed: Harvester v1.8.0, the one release on offer patches the KubeVirt CR \
                 to [] itself",
            ),
            (
                "v1.7.1",
                "pre is needed: Harvester v1.7.1, the one release on offer",
            ),
        ] {
            let coming = Coming::of(None, None, &[(offer.into(), Handling::of(offer))]);
            let text = Report::new(&intent, (&kt, Some(&kv0)), None, &[], None)
                .with_harvester(None, vec![], coming)
                .to_string();
            assert!(text.contains(want), "{text}");
        }
        let unknown = Coming::of(None, None, &[]);
        let text = Report::new(&intent, (&kt, Some(&pre_kv(&kv0))), None, &[], None)
            .with_harvester(None, vec![], unknown)
            .to_string();
        assert!(text.contains("pre has run"), "{text}");
    }
}
