//! `PHASE=status`: a read-only report built from the objects' JSON.

use serde::Serialize;
use serde_json::Value;

use crate::plan::{self, COMPARE_RECORD, KUBEVIRT_COPY, KUBEVIRT_RECORD, ObjectKey, VALUES_RECORD};

/// Migrations that KubeVirt's workload updater creates carry this name prefix.
pub const MIGRATION_PREFIX: &str = "kubevirt-workload-update-";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub kubevirt: Option<KubeVirtReport>,
    pub managed_chart: Option<ChartReport>,
    pub unfinished_migrations: Vec<String>,
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
    pub saved_original: Option<String>,
    pub outdated_virtual_machine_instance_workloads: Option<i64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartReport {
    pub object: String,
    pub found: bool,
    pub paused: bool,
    pub compare_patches_pointer: bool,
    pub values_override: Option<Value>,
    pub values_record: Option<String>,
    pub compare_patch_record: Option<String>,
    pub kubevirt_copy: Option<String>,
}

fn text(obj: &Value, ptr: &str) -> Option<String> {
    obj.pointer(ptr).and_then(Value::as_str).map(str::to_string)
}

fn annotation(obj: &Value, key: &str) -> Option<String> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

pub fn kubevirt(object: String, obj: Option<&Value>) -> KubeVirtReport {
    let obj = obj.cloned().unwrap_or(Value::Null);
    KubeVirtReport {
        object,
        found: !obj.is_null(),
        phase: text(&obj, "/status/phase"),
        observed_kube_virt_version: text(&obj, "/status/observedKubeVirtVersion"),
        target_kube_virt_version: text(&obj, "/status/targetKubeVirtVersion"),
        workload_update_methods: obj.pointer(plan::METHODS_POINTER).cloned(),
        saved_original: annotation(&obj, KUBEVIRT_RECORD),
        outdated_virtual_machine_instance_workloads: obj
            .pointer("/status/outdatedVirtualMachineInstanceWorkloads")
            .and_then(Value::as_i64),
    }
}

pub fn chart(object: String, obj: Option<&Value>, kubevirt: &ObjectKey) -> ChartReport {
    let obj = obj.cloned().unwrap_or(Value::Null);
    let list = obj
        .pointer("/spec/diff/comparePatches")
        .and_then(Value::as_array);
    ChartReport {
        object,
        found: !obj.is_null(),
        paused: obj
            .pointer("/spec/paused")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        compare_patches_pointer: plan::find_pointer(list, kubevirt).ok().flatten().is_some(),
        values_override: obj
            .pointer("/spec/values/kubevirt/spec/workloadUpdateStrategy/workloadUpdateMethods")
            .cloned(),
        values_record: annotation(&obj, VALUES_RECORD),
        compare_patch_record: annotation(&obj, COMPARE_RECORD),
        kubevirt_copy: annotation(&obj, KUBEVIRT_COPY),
    }
}

/// `namespace/name (phase)` of each workload-update migration that has not finished.
pub fn unfinished(migrations: &[Value]) -> Vec<String> {
    migrations
        .iter()
        .filter(|m| {
            !matches!(
                m.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
        })
        .map(|m| {
            format!(
                "{}/{} ({})",
                text(m, "/metadata/namespace").unwrap_or_default(),
                text(m, "/metadata/name").unwrap_or_default(),
                text(m, "/status/phase").unwrap_or_else(|| "Pending".into())
            )
        })
        .collect()
}

/// One `  label   value` line of the human report.
fn row(
    f: &mut std::fmt::Formatter<'_>,
    label: &str,
    value: impl std::fmt::Display,
) -> std::fmt::Result {
    writeln!(f, "  {label:<28}{value}")
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |v: &Option<String>, d: &str| v.clone().unwrap_or_else(|| d.to_string());
        let json = |v: &Option<Value>| {
            v.as_ref()
                .map_or_else(|| "absent".to_string(), Value::to_string)
        };
        if let Some(k) = &self.kubevirt {
            writeln!(f, "{}", k.object)?;
            if !k.found {
                row(f, "not found", "")?;
            } else {
                let methods = &k.workload_update_methods;
                let off = methods
                    .as_ref()
                    .is_none_or(|m| m.as_array().is_some_and(Vec::is_empty));
                row(f, "phase", or(&k.phase, "-"))?;
                let versions = format!(
                    "{} / {}",
                    or(&k.observed_kube_virt_version, "-"),
                    or(&k.target_kube_virt_version, "-")
                );
                row(f, "observed / target version", versions)?;
                row(f, "workloadUpdateMethods", json(methods))?;
                row(f, "automated updates", if off { "off" } else { "on" })?;
                row(f, "saved original", or(&k.saved_original, "none"))?;
                let outdated = k.outdated_virtual_machine_instance_workloads;
                row(
                    f,
                    "outdated VMI workloads",
                    outdated.map_or("-".into(), |n| n.to_string()),
                )?;
            }
        }
        writeln!(
            f,
            "workload-update migrations not finished: {}",
            self.unfinished_migrations.len()
        )?;
        for m in &self.unfinished_migrations {
            writeln!(f, "  {m}")?;
        }
        if let Some(c) = &self.managed_chart {
            writeln!(f, "{}", c.object)?;
            if !c.found {
                row(f, "not found", "")?;
            } else {
                row(f, "paused", c.paused)?;
                row(
                    f,
                    "comparePatches pointer",
                    if c.compare_patches_pointer {
                        "present"
                    } else {
                        "absent"
                    },
                )?;
                row(f, "values override", json(&c.values_override))?;
                row(f, "values record", or(&c.values_record, "none"))?;
                row(
                    f,
                    "compare-patch record",
                    or(&c.compare_patch_record, "none"),
                )?;
                row(f, "copy of KubeVirt original", or(&c.kubevirt_copy, "none"))?;
            }
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
        assert_eq!(
            unfinished(&list),
            vec![
                "a/kubevirt-workload-update-1 (Running)",
                "c/kubevirt-workload-update-3 (Pending)"
            ]
        );
    }
}
