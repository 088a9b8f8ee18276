//! `status`'s forecast of an upgrade's node drains, from the running VMIs: each drain
//! live-migrates its node's VMs onto the new virt-launcher, so what the workload updater finds at
//! the restore is what the drains cannot move. Two kinds are known before the upgrade:
//!
//! - a VMI that cannot live-migrate (KubeVirt's `LiveMigratable` condition not `True`): Harvester
//!   shuts it down at its node's pre-drain (`upgrade_node.sh`, `vm-live-migrate-detector
//!   --shutdown`);
//! - a VMI waiting on a CPU or memory hot-plug: it needs a migration even on the new launcher, so
//!   the updater counts it until one runs, and a suspension holds it back.
//!
//! A cluster holds thousands of VMIs, each many kilobytes: a listed VMI is read into
//! [`ListedVmi`] (name, phase, conditions) straight from each page and folded into the
//! [`Forecast`] at once, so the memory is flat in their number (the Jobs' 64 MiB).

use serde::{Deserialize, Serialize};

/// How many VMIs waiting on a hot-plug are named; the rest are counted.
pub const NAMED: usize = 10;

/// KubeVirt's condition types (`kubevirt.io/api` `core/v1/types.go`): `LiveMigratable`
/// (`VirtualMachineInstanceIsMigratable`), `HotVCPUChange` (`VirtualMachineInstanceVCPUChange`),
/// `HotMemoryChange` (`VirtualMachineInstanceMemoryChange`), `MigrationRequired`.
const LIVE_MIGRATABLE: &str = "LiveMigratable";
const HOT_VCPU: &str = "HotVCPUChange";
const HOT_MEMORY: &str = "HotMemoryChange";
const MIGRATION_REQUIRED: &str = "MigrationRequired";

/// What the running VMIs say of the coming drains.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// VMIs in phase `Running`; the two counts below are of these.
    pub running: usize,
    /// `LiveMigratable` not `True` (absent or `False`).
    pub not_live_migratable: usize,
    /// Waiting on a CPU or memory hot-plug.
    pub hotplug_pending: usize,
    /// The first [`NAMED`] of those, `namespace/name`, in the order listed.
    pub hotplug_named: Vec<String>,
}

/// One listed VMI, as much of it as is decided on: the rest (its spec, kilobytes) is skipped as
/// it is parsed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ListedVmi {
    #[serde(default)]
    metadata: Meta,
    status: Option<Status>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Meta {
    namespace: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Status {
    phase: Option<String>,
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    kind: Option<String>,
    status: Option<String>,
}

impl ListedVmi {
    fn condition(&self, kind: &str) -> Option<&str> {
        let status = self.status.as_ref()?;
        let c = status
            .conditions
            .iter()
            .find(|c| c.kind.as_deref() == Some(kind))?;
        Some(c.status.as_deref().unwrap_or(""))
    }

    fn running(&self) -> bool {
        self.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    }

    /// KubeVirt's `IsMigratable`: the condition `True`, nothing else.
    fn live_migratable(&self) -> bool {
        self.condition(LIVE_MIGRATABLE) == Some("True")
    }

    /// The workload updater's `isHotplugInProgress` (`workload-updater.go`, v1.6.0 to v1.9.0):
    /// `HotVCPUChange` counts whatever its status, the other two only when `True`.
    fn hotplug_pending(&self) -> bool {
        self.condition(HOT_VCPU).is_some()
            || self.condition(HOT_MEMORY) == Some("True")
            || self.condition(MIGRATION_REQUIRED) == Some("True")
    }
}

impl Forecast {
    /// Counts one listed VMI in: only a running one counts, as only those are migrated.
    pub fn add(&mut self, vmi: ListedVmi) {
        if !vmi.running() {
            return;
        }
        self.running += 1;
        if !vmi.live_migratable() {
            self.not_live_migratable += 1;
        }
        if vmi.hotplug_pending() {
            self.hotplug_pending += 1;
            if self.hotplug_named.len() < NAMED {
                let meta = vmi.metadata;
                let (ns, name) = (
                    meta.namespace.unwrap_or_default(),
                    meta.name.unwrap_or_default(),
                );
                self.hotplug_named.push(format!("{ns}/{name}"));
            }
        }
    }

    /// The hot-plug VMIs as said: the names, then how many more.
    pub fn hotplug_said(&self) -> String {
        let names = self.hotplug_named.join(", ");
        match self.hotplug_pending - self.hotplug_named.len() {
            0 => names,
            more => format!("{names} and {more} more"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn vmi(name: &str, phase: &str, conditions: Value) -> ListedVmi {
        let item = json!({"metadata": {"namespace": "vms", "name": name},
            "status": {"phase": phase, "conditions": conditions}});
        serde_json::from_value(item).unwrap()
    }

    fn forecast(vmis: impl IntoIterator<Item = ListedVmi>) -> Forecast {
        let mut f = Forecast::default();
        vmis.into_iter().for_each(|v| f.add(v));
        f
    }

    #[test]
    fn counts_the_running_the_unmigratable_and_names_the_hotplugs() {
        let migratable = json!([{"type": "LiveMigratable", "status": "True"}]);
        let f = forecast([
            vmi("a", "Running", migratable.clone()),
            vmi(
                "b",
                "Running",
                json!([{"type": "LiveMigratable", "status": "False"}]),
            ),
            vmi("c", "Running", json!([])),
            vmi(
                "d",
                "Running",
                json!([{"type": "LiveMigratable", "status": "True"},
                                        {"type": "HotVCPUChange", "status": "False"}]),
            ),
            vmi(
                "e",
                "Running",
                json!([{"type": "LiveMigratable", "status": "True"},
                                        {"type": "HotMemoryChange", "status": "True"}]),
            ),
            vmi(
                "f",
                "Running",
                json!([{"type": "LiveMigratable", "status": "True"},
                                        {"type": "MigrationRequired", "status": "True"}]),
            ),
            // Not pending: the memory and migration conditions count only when True.
            vmi(
                "g",
                "Running",
                json!([{"type": "LiveMigratable", "status": "True"},
                                        {"type": "HotMemoryChange", "status": "False"},
                                        {"type": "MigrationRequired", "status": "Unknown"}]),
            ),
            // Not running: neither counted nor named, whatever it carries.
            vmi(
                "h",
                "Scheduling",
                json!([{"type": "HotVCPUChange", "status": "True"}]),
            ),
            vmi("i", "Succeeded", json!([])),
        ]);
        assert_eq!(
            f,
            Forecast {
                running: 7,
                not_live_migratable: 2,
                hotplug_pending: 3,
                hotplug_named: vec!["vms/d".into(), "vms/e".into(), "vms/f".into()],
            }
        );
        assert_eq!(f.hotplug_said(), "vms/d, vms/e, vms/f");
    }

    /// As the API server sends one: the spec and every other field skipped, a missing status or
    /// condition list is a VMI that is not running, or carries no condition.
    #[test]
    fn deserialized_from_a_list_item() {
        let item = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "vms", "uid": "u",
                "labels": {"kubevirt.io/outdatedLauncherImage": ""}},
            "spec": {"domain": {"cpu": {"sockets": 4}, "devices": {}}},
            "status": {"phase": "Running", "nodeName": "n1",
                "conditions": [{"type": "LiveMigratable", "status": "True", "reason": ""},
                               {"type": "Ready", "status": "True"}]}});
        let v: ListedVmi = serde_json::from_value(item).unwrap();
        assert_eq!(
            v,
            vmi(
                "vm1",
                "Running",
                json!([{"type": "LiveMigratable", "status": "True"},
                                                    {"type": "Ready", "status": "True"}])
            )
        );
        let bare: ListedVmi = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert_eq!(forecast([bare]), Forecast::default());
        let no_conditions: ListedVmi =
            serde_json::from_value(json!({"status": {"phase": "Running"}})).unwrap();
        let f = forecast([no_conditions]);
        assert_eq!(
            (f.running, f.not_live_migratable, f.hotplug_pending),
            (1, 1, 0)
        );
    }

    proptest! {
        /// The counts are exact whatever the number; the first [`NAMED`] hot-plugs are named in
        /// the listed order and the rest counted.
        #[test]
        fn the_first_ten_hotplugs_are_named_the_rest_counted(
            vmis in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 0..40)
        ) {
            let listed = vmis.iter().enumerate().map(|(i, (running, migratable, hotplug))| {
                let mut conditions = vec![json!({"type": "LiveMigratable",
                    "status": if *migratable { "True" } else { "False" }})];
                if *hotplug {
                    conditions.push(json!({"type": "HotVCPUChange", "status": "True"}));
                }
                vmi(&format!("v{i}"), if *running { "Running" } else { "Pending" }, json!(conditions))
            });
            let f = forecast(listed);
            let running: Vec<_> = vmis.iter().enumerate().filter(|(_, v)| v.0).collect();
            prop_assert_eq!(f.running, running.len());
            prop_assert_eq!(f.not_live_migratable, running.iter().filter(|(_, v)| !v.1).count());
            let hot: Vec<String> = running.iter().filter(|(_, v)| v.2)
                .map(|(i, _)| format!("vms/v{i}")).collect();
            prop_assert_eq!(f.hotplug_pending, hot.len());
            prop_assert_eq!(&f.hotplug_named[..], &hot[..hot.len().min(NAMED)]);
            let said = f.hotplug_said();
            if hot.len() > NAMED {
                let more = format!(" and {} more", hot.len() - NAMED);
                prop_assert!(said.ends_with(&more), "{}", said);
            } else {
                prop_assert_eq!(said, hot.join(", "));
            }
        }
    }
}
