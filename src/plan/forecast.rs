//! `status`'s forecast of the drains (docs/design.md, "The forecast"): each drain moves its node's
//! VMs to the new virt-launcher, so the restore finds what they cannot move.

use serde::Serialize;
use serde_json::Value;

/// How many VMIs waiting on a hot-plug are named; the rest are counted.
pub const NAMED: usize = 10;

/// What the running VMIs say of the coming drains.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// Phase `Running`; the counts below are of these, as the updater counts only those.
    pub running: usize,
    /// `LiveMigratable` not `True`: Harvester shuts them down at their node's pre-drain.
    pub not_live_migratable: usize,
    /// Waiting on a CPU or memory hot-plug; the first [`NAMED`] as `namespace/name`.
    pub hotplug_pending: usize,
    pub hotplug_named: Vec<String>,
}

impl Forecast {
    /// Counts one listed VMI in, then drops it: only a page of them is ever held.
    pub fn add(&mut self, vmi: Value) {
        let status = &vmi["status"];
        if status["phase"] != "Running" {
            return;
        }
        let conditions = status["conditions"].as_array().into_iter().flatten();
        let conditions = conditions.map(|c| (&c["type"], &c["status"]));
        // KubeVirt's `core/v1/types.go`; hot-plug as its updater's `isHotplugInProgress` (v1.6.0 to
        // v1.9.0): `HotVCPUChange` whatever its status, the others only when `True`.
        let (mut migratable, mut hotplug) = (false, false);
        for (kind, s) in conditions {
            migratable |= kind == "LiveMigratable" && s == "True";
            hotplug |= kind == "HotVCPUChange"
                || ((kind == "HotMemoryChange" || kind == "MigrationRequired") && s == "True");
        }
        self.running += 1;
        self.not_live_migratable += usize::from(!migratable);
        self.hotplug_pending += usize::from(hotplug);
        if hotplug && self.hotplug_named.len() < NAMED {
            let meta = |k: &str| vmi["metadata"][k].as_str().unwrap_or("").to_string();
            let name = format!("{}/{}", meta("namespace"), meta("name"));
            self.hotplug_named.push(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn vmi(name: &str, phase: &str, conditions: Value) -> Value {
        json!({"metadata": {"namespace": "vms", "name": name},
            "status": {"phase": phase, "conditions": conditions}})
    }

    fn forecast(vmis: impl IntoIterator<Item = Value>) -> Forecast {
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
    }

    /// As the API server sends one, fields not decided on around; a VMI without status or
    /// conditions is not running, or carries no condition; a malformed one counts as nothing.
    #[test]
    fn a_list_item_as_sent() {
        let item = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "vms", "uid": "u",
                "labels": {"kubevirt.io/outdatedLauncherImage": ""}},
            "spec": {"domain": {"cpu": {"sockets": 4}, "devices": {}}},
            "status": {"phase": "Running", "nodeName": "n1",
                "conditions": [{"type": "LiveMigratable", "status": "True", "reason": ""},
                               {"type": "HotVCPUChange", "status": "True"}]}});
        let f = forecast([
            item,
            json!({"metadata": {"name": "x"}}),
            json!(null),
            json!([1]),
        ]);
        assert_eq!(
            (f.running, f.not_live_migratable, f.hotplug_named.len()),
            (1, 0, 1)
        );
        assert_eq!(f.hotplug_named, ["vms/vm1"]);
        let f = forecast([json!({"status": {"phase": "Running", "conditions": "x"}})]);
        assert_eq!(
            (f.running, f.not_live_migratable, f.hotplug_pending),
            (1, 1, 0)
        );
        let f = forecast([json!({"status": {"phase": "Running"}})]);
        assert_eq!(
            (f.running, f.not_live_migratable, f.hotplug_pending),
            (1, 1, 0)
        );
    }

    proptest! {
        /// The counts are exact whatever the number; the first [`NAMED`] hot-plugs are named in
        /// the listed order and the rest counted, in the data and in `status`'s text.
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
            let said = f.to_string();
            let more = hot.len().saturating_sub(NAMED);
            let mut named = hot[..hot.len().min(NAMED)].to_vec();
            named.extend((more > 0).then(|| format!("and {more} more")));
            let colon = if hot.is_empty() { "" } else { ": " };
            let want = format!("on a CPU or memory hot-plug: {} (migrated once updates are on){colon}{}\n", hot.len(), named.join(", "));
            prop_assert!(said.ends_with(&want), "{} / {}", said, want);
        }
    }
}
