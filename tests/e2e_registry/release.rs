//! The chart's release on the registry tests' node, shared by its tests: Helm 4 with a home of
//! its own, the guard's newest pod, the kubelet's events about it, and the cleanup.

use std::process::{Command, Output};

use serde_json::Value;

use crate::node::*;
use crate::support::helm_in;

pub const RELEASE: &str = "workload-update-guard";
pub const HOOK: &str = "workload-update-guard-watch-uninstall";

/// `helm ARGS` against the node, with a home of its own; its success and output.
pub fn helm(args: &[&str]) -> (bool, String) {
    let home = node().dir.join("helm-home-registry");
    helm_in(&home, &node().dir.join("kubeconfig"), args)
}

pub fn helm_ok(args: &[&str]) -> String {
    let (ok, out) = helm(args);
    assert!(ok, "helm {args:?}: {out}");
    out
}

/// The release, its hook's Job and `secret` gone (the hook skipped), however the test ends.
pub struct Cleanup {
    pub secret: Option<&'static str>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = helm(&["uninstall", RELEASE, "-n", NS, "--no-hooks", "--wait"]);
        let mut cmd = node().kubectl();
        cmd.args([
            "-n",
            NS,
            "delete",
            &format!("job/{HOOK}"),
            "job/workload-update-guard-status",
        ]);
        cmd.args(self.secret.map(|s| format!("secret/{s}")));
        cmd.args(["--ignore-not-found", "--wait"]);
        let _ = cmd.output();
    }
}

/// The kubelet's events of `reason` for the pods whose name starts with `prefix`: their
/// messages.
pub fn events(prefix: &str, reason: &str) -> Vec<String> {
    let list = get_json(&[
        "-n",
        NS,
        "events",
        "--field-selector",
        &format!("reason={reason}"),
    ]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["involvedObject"]["kind"] == "Pod"
                && e["involvedObject"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
        })
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The guard's newest pod (the Deployment's).
pub fn newest_guard_pod() -> Option<Value> {
    pods_with(&format!(
        "app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=watch"
    ))
    .pop()
}

/// Whether `pod` is Ready and not going away.
pub fn is_ready(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// A pull Secret as operators make it (`kubectl create secret docker-registry`, chart.md's "A
/// registry that needs a login") in the guard's namespace.
pub fn create_pull_secret(name: &str, server: &str, user: &str, password: &str) {
    k(&[
        "-n",
        NS,
        "create",
        "secret",
        "docker-registry",
        name,
        &format!("--docker-server={server}"),
        &format!("--docker-username={user}"),
        &format!("--docker-password={password}"),
    ]);
}

/// `skopeo ARGS`, failing the test with what to install when skopeo is missing.
pub fn skopeo(args: &[&str]) -> Output {
    Command::new("skopeo")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("skopeo: {e}: install it (Debian's skopeo; hack/packages.txt, group test)")
        })
}
