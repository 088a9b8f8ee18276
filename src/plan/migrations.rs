//! The workload-update migrations under way: which listed migrations KubeVirt's workload updater
//! made, and which of those have not finished (`pre`'s warnings and `status`'s list).
//!
//! A large cluster holds tens of thousands of migrations (KubeVirt keeps five finished ones per
//! VMI), so a listed migration is read into [`Listed`], the few fields decided on here, straight
//! from each page of the list: the rest of each object is skipped as it is parsed, never held.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::model::MIGRATION_PREFIX;

/// KubeVirt's `WorkloadUpdateMigrationAnnotation` (value `""`): its workload updater puts it on
/// every migration it creates (`pkg/virt-controller/watch/workload-updater/workload-updater.go`,
/// `sync`), and tells its own by it alone (`ListUnfinishedMigrations` in `pkg/util/migrations`),
/// as we do; the name prefix is the fallback for an object that lost it.
pub const WORKLOAD_UPDATE_ANNOTATION: &str = "kubevirt.io/workloadUpdateMigration";

/// A workload-update migration that has not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Migration {
    pub namespace: String,
    pub name: String,
    pub phase: String,
}

/// One listed migration, as much of it as is decided on.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Listed {
    #[serde(default)]
    metadata: Meta,
    status: Option<Status>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Meta {
    namespace: Option<String>,
    name: Option<String>,
    annotations: Option<Annotations>,
}

/// Only whether the workload updater's annotation is there: any other annotation (a client's
/// `last-applied-configuration` may be kilobytes) is skipped unread.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Annotations {
    #[serde(rename = "kubevirt.io/workloadUpdateMigration")]
    workload_update: Option<IgnoredAny>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Status {
    phase: Option<String>,
}

impl Listed {
    fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }

    fn is_workload_update(&self) -> bool {
        let meta = &self.metadata;
        let annotated = |a: &Annotations| a.workload_update.is_some();
        let name = meta.name.as_deref().unwrap_or_default();
        meta.annotations.as_ref().is_some_and(annotated) || name.starts_with(MIGRATION_PREFIX)
    }

    /// What is reported of it, if it is a workload-update migration that has not finished
    /// (KubeVirt's `IsFinal`: `Succeeded` or `Failed`; no phase yet is `Pending`).
    pub fn unfinished(self) -> Option<Migration> {
        if !self.is_workload_update() || matches!(self.phase(), Some("Succeeded" | "Failed")) {
            return None;
        }
        Some(Migration {
            phase: self.phase().unwrap_or("Pending").to_string(),
            namespace: self.metadata.namespace.unwrap_or_default(),
            name: self.metadata.name.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The workload-update migrations that have not finished, in the order listed.
    fn unfinished(listed: impl IntoIterator<Item = Listed>) -> Vec<Migration> {
        listed.into_iter().filter_map(Listed::unfinished).collect()
    }

    impl Listed {
        fn new(namespace: &str, name: &str, annotated: bool, phase: Option<&str>) -> Self {
            Listed {
                metadata: Meta {
                    namespace: Some(namespace.into()),
                    name: Some(name.into()),
                    annotations: Some(Annotations {
                        workload_update: annotated.then_some(IgnoredAny),
                    }),
                },
                status: Some(Status {
                    phase: phase.map(str::to_string),
                }),
            }
        }
    }

    #[test]
    fn only_unfinished_workload_update_migrations_are_listed() {
        let list = [
            Listed::new("a", "kubevirt-workload-update-1", false, Some("Running")),
            Listed::new("b", "kubevirt-workload-update-2", true, Some("Succeeded")),
            Listed::new("c", "kubevirt-workload-update-3", false, None),
            Listed::new("d", "kubevirt-workload-update-4", true, Some("Failed")),
            Listed::new("e", "renamed-by-someone", true, Some("Scheduling")),
            Listed::new("f", "manual", false, Some("Running")),
        ];
        let names: Vec<String> = unfinished(list)
            .iter()
            .map(|m| format!("{}/{} ({})", m.namespace, m.name, m.phase))
            .collect();
        assert_eq!(
            names,
            [
                "a/kubevirt-workload-update-1 (Running)",
                "c/kubevirt-workload-update-3 (Pending)",
                "e/renamed-by-someone (Scheduling)"
            ]
        );
    }

    /// As the API server sends them: what is not read is skipped, the annotation counts by its
    /// presence (KubeVirt writes `""`), a missing status is `Pending`.
    #[test]
    fn deserialized_from_a_list_item() {
        let item = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "x", "namespace": "vms", "uid": "u",
                "annotations": {"kubevirt.io/workloadUpdateMigration": "",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}"},
                "managedFields": [{"manager": "virt-controller", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"vmiName": "vm1"},
            "status": {"phase": "Running", "migrationState": {"sourceNode": "n1"}}});
        let m: Listed = serde_json::from_value(item).unwrap();
        assert_eq!(m, Listed::new("vms", "x", true, Some("Running")));
        let bare: Listed =
            serde_json::from_value(json!({"metadata": {"name": "kubevirt-workload-update-y"},
                "status": null}))
            .unwrap();
        assert_eq!(
            bare.unfinished(),
            Some(Migration {
                namespace: String::new(),
                name: "kubevirt-workload-update-y".into(),
                phase: "Pending".into()
            })
        );
        let other: Listed = serde_json::from_value(
            json!({"metadata": {"name": "mine", "annotations": {"a": "b"}}}),
        )
        .unwrap();
        assert!(!other.is_workload_update());
    }

    proptest! {
        /// A migration is reported exactly when it is the updater's (annotation or prefix) and
        /// not final; what is reported is its namespace, name and phase, in the listed order.
        #[test]
        fn reported_exactly_the_unfinished_workload_update_ones(
            items in proptest::collection::vec(
                ("[a-c]{1,2}", any::<bool>(), any::<bool>(),
                 proptest::option::of(prop_oneof![
                     Just("Pending"), Just("Scheduling"), Just("Running"),
                     Just("Succeeded"), Just("Failed")])),
                0..40)
        ) {
            let listed: Vec<Listed> = items.iter().enumerate().map(|(i, (ns, prefixed, annotated, phase))| {
                let name = if *prefixed { format!("{MIGRATION_PREFIX}{i}") } else { format!("m{i}") };
                Listed::new(ns, &name, *annotated, *phase)
            }).collect();
            let want: Vec<Migration> = items.iter().enumerate()
                .filter(|(_, (_, prefixed, annotated, phase))| {
                    (*prefixed || *annotated) && !matches!(phase, Some("Succeeded" | "Failed"))
                })
                .map(|(i, (ns, prefixed, _, phase))| Migration {
                    namespace: ns.clone(),
                    name: if *prefixed { format!("{MIGRATION_PREFIX}{i}") } else { format!("m{i}") },
                    phase: phase.unwrap_or("Pending").to_string(),
                })
                .collect();
            prop_assert_eq!(unfinished(listed), want);
        }
    }
}
