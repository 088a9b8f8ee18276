//! `status`'s report as data: the JSON of `LOG_FORMAT=json`, what the text is made from.

use serde::Serialize;
use serde_json::Value;

use crate::plan::forecast::Forecast;
use crate::plan::harvester_upgrade::{CleanupWrite, Upgrade};
use crate::plan::kubevirt::Source;
use crate::plan::migrations::Migration;
use crate::plan::ownership::Owner;
use crate::plan::records::{CompareRecord, ValueRecord};
use crate::plan::releases::Handling;

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
    /// The running VMIs, for the coming drains (`None`: not served).
    pub vmi_forecast: Option<Forecast>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harvester: Option<HarvesterReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retirement: Option<crate::plan::retirement::Retirement>,
    /// The upgrades' records the resident guard keeps, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub upgrades: Vec<crate::plan::upgrade_record::Record>,
}

/// An object as read (`found: false`: not there, every other field empty), with the content
/// that `pre` or `post` would refuse (`problems`).
#[derive(Debug, Default, Serialize)]
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
    pub methods_owners: Vec<OwnerReport>,
    pub post_will_restore: Option<RestoreReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Who owns the methods field; each `Update` owner blocks a chart change of it.
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
    /// `None` with `source: nothing`, or an absent original.
    pub methods: Option<Value>,
    pub reason: String,
}

#[derive(Debug, Default, Serialize)]
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
    /// `None`: no Fleet status at all.
    pub fleet: Option<FleetReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Fleet's view of the ManagedChart (the Bundle's status), as Harvester's upgrade checks it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetReport {
    pub ready: Option<String>,
    pub state: Option<String>,
    pub message: Option<String>,
    pub observed_generation: Option<i64>,
    /// The current spec, so our last change to it, is deployed: `Ready` with everything ready.
    pub current_spec_applied: bool,
    pub said: String,
}

/// Harvester's own upgrade (docs/design.md, "Harvester's own handling").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HarvesterReport {
    pub latest_upgrade: Option<Upgrade>,
    pub cleanup_writes: Option<CleanupWrite>,
    /// The releases on offer that suspend the methods themselves, newest first.
    pub offered: Vec<(String, Handling)>,
    /// `pre`'s own answer for the coming release, before it runs.
    pub pre_needed: String,
}
