//! The objects the guard works on, where their fields are, and the names it writes, each once.

use kube::api::ApiResource;
use kube::core::GroupVersionKind;

/// The field manager of every write, so `managedFields` says who changed what.
pub const FIELD_MANAGER: &str = "workload-update-guard";

/// Every annotation the guard writes sits under this prefix.
pub const ANNOTATION_PREFIX: &str = "workload-update-guard.harvesterhci.io/";
/// On the KubeVirt CR: the original `spec.workloadUpdateStrategy.workloadUpdateMethods`.
pub const KUBEVIRT_RECORD: &str =
    "workload-update-guard.harvesterhci.io/original-workload-update-methods";
/// On the ManagedChart: the original values override of the methods.
pub const VALUES_RECORD: &str =
    "workload-update-guard.harvesterhci.io/original-values-workload-update-methods";
/// On the ManagedChart: a copy of the KubeVirt CR's original methods, written first and removed
/// last, so a Job killed while Fleet re-renders the CR with `[]` still leaves the true original.
pub const KUBEVIRT_COPY: &str =
    "workload-update-guard.harvesterhci.io/kubevirt-original-workload-update-methods";
/// On the ManagedChart: what the guard added to `spec.diff.comparePatches`.
pub const COMPARE_RECORD: &str = "workload-update-guard.harvesterhci.io/compare-patch";
/// On either object, between `post`'s restore and its release: the owners the release gives the
/// restored fields back to (`plan::records::Return`). Not a record of a suspension.
pub const OWNERS_TO_RETURN: &str = "workload-update-guard.harvesterhci.io/owners-to-return";
/// Our annotations on each kind: while one is there, the object is (partly) suspended by us.
pub const KUBEVIRT_RECORDS: &[&str] = &[KUBEVIRT_RECORD];
pub const CHART_RECORDS: &[&str] = &[VALUES_RECORD, COMPARE_RECORD, KUBEVIRT_COPY];

/// The KubeVirt CR's methods: path segments, JSON pointer, as `managedFields`/kubectl write it.
pub const METHODS_PATH: &[&str] = &["spec", "workloadUpdateStrategy", "workloadUpdateMethods"];
pub const METHODS_POINTER: &str = "/spec/workloadUpdateStrategy/workloadUpdateMethods";
pub const METHODS_FIELD: &str = ".spec.workloadUpdateStrategy.workloadUpdateMethods";
/// The ManagedChart's values override of the methods (the chart renders the CR from it).
pub const VALUES_PATH: &[&str] = &[
    "spec",
    "values",
    "kubevirt",
    "spec",
    "workloadUpdateStrategy",
    "workloadUpdateMethods",
];
pub const COMPARE_PATH: &[&str] = &["spec", "diff", "comparePatches"];

/// Migrations that KubeVirt's workload updater creates carry this name prefix.
/// The guard's ConfigMap of the upgrades' records, in the KubeVirt CR's namespace (the chart
/// creates it, and keeps it at an uninstall).
pub const RECORDS_CONFIGMAP: &str = "workload-update-guard-upgrades";

pub const MIGRATION_PREFIX: &str = "kubevirt-workload-update-";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

/// Only KubeVirt and ManagedChart are written; Setting and UpgradePlan are cluster-scoped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    KubeVirt,
    ManagedChart,
    Migration,
    Vmi,
    Upgrade,
    Version,
    Setting,
    UpgradePlan,
    ConfigMap,
}

impl Kind {
    fn row(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::KubeVirt => ("kubevirt.io/v1", "KubeVirt", "kubevirts"),
            Kind::ManagedChart => ("management.cattle.io/v3", "ManagedChart", "managedcharts"),
            Kind::Migration => (
                "kubevirt.io/v1",
                "VirtualMachineInstanceMigration",
                "virtualmachineinstancemigrations",
            ),
            Kind::Vmi => (
                "kubevirt.io/v1",
                "VirtualMachineInstance",
                "virtualmachineinstances",
            ),
            Kind::Upgrade => ("harvesterhci.io/v1beta1", "Upgrade", "upgrades"),
            Kind::Version => ("harvesterhci.io/v1beta1", "Version", "versions"),
            Kind::Setting => ("harvesterhci.io/v1beta1", "Setting", "settings"),
            Kind::UpgradePlan => (
                "management.harvesterhci.io/v1beta1",
                "UpgradePlan",
                "upgradeplans",
            ),
            Kind::ConfigMap => ("v1", "ConfigMap", "configmaps"),
        }
    }

    pub fn api_version(self) -> &'static str {
        self.row().0
    }

    pub fn name(self) -> &'static str {
        self.row().1
    }

    pub fn plural(self) -> &'static str {
        self.row().2
    }

    pub fn resource(self) -> ApiResource {
        // The core group has none: `v1`.
        let api_version = self.api_version();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, self.name());
        ApiResource::from_gvk_with_plural(&gvk, self.plural())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub key: ObjectKey,
}

impl Target {
    pub fn new(kind: Kind, key: &ObjectKey) -> Self {
        let key = key.clone();
        Self { kind, key }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self.kind.name();
        let key = &self.key;
        write!(f, "{kind} {}/{}", key.namespace, key.name)
    }
}

/// `s` cut to at most `max` bytes, at a character boundary (API limits count bytes).
pub fn truncate_bytes(s: &mut String, max: usize) {
    if s.len() > max {
        s.truncate((0..=max).rfind(|&cut| s.is_char_boundary(cut)).unwrap_or(0));
    }
}

/// A JSON pointer from path segments (RFC 6901 escaping).
pub fn pointer(segments: &[&str]) -> String {
    let escape = |s: &&str| format!("/{}", s.replace('~', "~0").replace('/', "~1"));
    segments.iter().map(escape).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_methods_path_is_one_path_in_three_encodings() {
        assert_eq!(pointer(METHODS_PATH), METHODS_POINTER);
        assert_eq!(METHODS_FIELD.replace('.', "/"), METHODS_POINTER);
        assert_eq!(pointer(&["a/b", "c~d"]), "/a~1b/c~0d");
    }

    #[test]
    fn truncation_counts_bytes_and_keeps_characters_whole() {
        let mut s = "é".repeat(600); // 1200 bytes
        truncate_bytes(&mut s, 1024);
        assert_eq!((s.len(), s.chars().count()), (1024, 512));
        let mut s = "aé".to_string();
        truncate_bytes(&mut s, 2);
        assert_eq!(s, "a");
        let mut s = "short".to_string();
        truncate_bytes(&mut s, 5);
        assert_eq!(s, "short");
    }

    #[test]
    fn records_sit_under_the_prefix() {
        for key in KUBEVIRT_RECORDS.iter().chain(CHART_RECORDS) {
            assert!(key.starts_with(ANNOTATION_PREFIX), "{key}");
        }
    }

    #[test]
    fn resources_match_the_crds() {
        let r = Kind::ManagedChart.resource();
        assert_eq!(
            (r.group.as_str(), r.version.as_str(), r.plural.as_str()),
            ("management.cattle.io", "v3", "managedcharts")
        );
        assert_eq!(Kind::Migration.resource().api_version, "kubevirt.io/v1");
        let t = Target::new(
            Kind::KubeVirt,
            &ObjectKey {
                namespace: "a".into(),
                name: "b".into(),
            },
        );
        assert_eq!(t.to_string(), "KubeVirt a/b");
    }
}
