//! The workload-update migrations under way: which of the listed `kubevirt-workload-update-*`
//! migrations have not finished (`pre`'s warning and `status`'s list).

use serde::Serialize;
use serde_json::Value;

/// A workload-update migration that has not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Migration {
    pub namespace: String,
    pub name: String,
    pub phase: String,
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

fn text(obj: &Value, ptr: &str) -> Option<String> {
    obj.pointer(ptr).and_then(Value::as_str).map(str::to_string)
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
}
