//! The resident guard's monitoring (docs/monitoring.md): its metrics scraped from the real
//! process on the real API server through a modelled upgrade and checked by `promtool check
//! metrics`; the chart's alerts by `promtool check rules` and `test rules`
//! (tests/promtool/alerts.test.yaml); its ServiceMonitor and PrometheusRule by a server-side dry
//! run against the Prometheus operator's own CRDs; the values that render them.
//!
//! promtool and the CRDs come from `hack/promtool.sh` (the Go module proxy, cached): if they
//! cannot be had, these tests FAIL with its message. They never skip.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workload_update_guard::plan::harvester_upgrade::ALLOW_UNPROTECTED;
use workload_update_guard::plan::upgrade_progress::{ENDED, UPGRADE_STATES};
use workload_update_guard::warnings::{
    FLEET_DEPLOY_BLOCKED, UPGRADE_HELD_BY_POLICY, UPGRADE_UNPROTECTED,
};

use crate::chart::{APPLY, deployment, ensure_namespaces, kind, render, template_yaml};
use crate::resident::Guard;
use crate::support::fleet::{FleetModel, Options};
use crate::support::harvester::*;
use crate::support::*;

const RELEASE_NS: &str = "harvester-system";
const SERVICE: &str = "workload-update-guard-watch-metrics";

/// `hack/promtool.sh ARGS`: its stdout, or a panic with its message.
fn promtool_script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/promtool.sh"))
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .expect("run hack/promtool.sh");
    assert!(
        out.status.success(),
        "the monitoring tests need promtool and the monitoring CRDs, and `hack/promtool.sh {}` \
         failed: {}\nThese tests never skip.",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The pinned promtool, built or reused once per test binary.
fn promtool() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        promtool_script(&["build"]);
        PathBuf::from(promtool_script(&["path"]))
    })
}

/// `promtool ARGS` (with `input` on stdin, if any): (success, stdout and stderr).
fn run_promtool(args: &[&str], dir: &Path, input: Option<&str>) -> (bool, String) {
    let mut child = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    if let Some(text) = input {
        stdin.write_all(text.as_bytes()).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The Prometheus operator's ServiceMonitor and PrometheusRule CRDs, applied once.
fn monitoring_crds() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let dir = PathBuf::from(promtool_script(&["crds"]));
        for crd in ["servicemonitors", "prometheusrules", "alertmanagerconfigs"] {
            let file = dir.join(format!("monitoring.coreos.com_{crd}.yaml"));
            kubectl_ok(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                file.to_str().unwrap(),
            ]);
            // kubectl wait fails at once, not waits, while a new CRD has no conditions yet.
            let name = format!("crd/{crd}.monitoring.coreos.com");
            let start = std::time::Instant::now();
            while !control_plane()
                .kubectl()
                .args([
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    &name,
                ])
                .status()
                .unwrap()
                .success()
            {
                assert!(start.elapsed().as_secs() < 60, "{name} not Established");
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    });
}

/// Both on, the runbooks' base given (an image of the tests' own is not the release's: the chart
/// refuses to default the runbooks to github.com for it).
const BOTH_ON: &[&str] = &[
    "--set",
    "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.prometheusRule.runbookBase=https://example.test/runbook",
];

/// `hack/chart.sh where WHAT`: the release's address of that kind, from the chart's `home`.
fn chart_where(what: &str) -> String {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/chart.sh"))
        .args(["where", what])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The chart's PrometheusRule (on, with the release's image: the runbooks default), as JSON.
fn prometheus_rule() -> Value {
    monitoring_crds();
    let released = format!("image.repository={}", chart_where("image"));
    kind(
        &render(&[
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            &released,
        ]),
        "PrometheusRule",
        "workload-update-guard-watch",
    )
    .clone()
}

/// The alerts' runbooks by default (`runbookBase` empty), with the release's image: the release's
/// own page at Chart.yaml's `home`, at its tag; main's for an unreleased build (a version with
/// `-dev`), whose pages describe it. With another image (a copy air-gapped, maybe), refused.
#[test]
fn the_runbooks_default_to_the_releases_own_pages() {
    monitoring_crds();
    let released = format!("image.repository={}", chart_where("image"));
    let rule_on = "metrics.prometheusRule.enabled=true";
    let refused = crate::chart::helm_template_of(
        &repo_root().join("manifests/chart"),
        "workload-update-guard",
        &["--set", rule_on],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("metrics.prometheusRule.runbookBase is empty"),
        "{said}"
    );
    let urls = |app_version: &str| -> Vec<String> {
        let dir = tempfile_dir();
        let copy = dir.join("chart");
        let cp = Command::new("cp")
            .arg("-r")
            .arg(repo_root().join("manifests/chart"))
            .arg(&copy)
            .status()
            .unwrap();
        assert!(cp.success());
        let chart_yaml = copy.join("Chart.yaml");
        let text = std::fs::read_to_string(&chart_yaml).unwrap();
        let text: String = text
            .lines()
            .map(|l| match l.starts_with("appVersion:") {
                true => format!("appVersion: \"{app_version}\"\n"),
                false => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&chart_yaml, text).unwrap();
        let args = ["--set", rule_on, "--set", &released];
        let out = crate::chart::helm_template_of(&copy, "workload-update-guard", &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let objects = yaml_objects(&String::from_utf8(out.stdout).unwrap());
        let rule = kind(&objects, "PrometheusRule", "workload-update-guard-watch");
        rule["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["annotations"]["runbook_url"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let base = format!("{}/blob", chart_where("home"));
    for (version, tree) in [("9.9.9", "v9.9.9"), ("9.10.0-dev", "main")] {
        let urls = urls(version);
        assert_eq!(urls.len(), 6, "{urls:?}");
        let page = format!("{base}/{tree}/docs/troubleshooting.md#");
        assert!(
            urls.iter().all(|u| u.starts_with(&page)),
            "{version}: {urls:?}"
        );
    }
}

/// `promtool check rules` on the rendered rule groups, and `test rules` on them with
/// tests/promtool/alerts.test.yaml: each alert firing and not firing. The test compares of the
/// annotations `runbook_url` and `description` (its commands, with the labels expanded);
/// `summary` is checked for being there.
#[test]
fn the_alerts_pass_promtool_check_and_their_unit_tests() {
    let rule = prometheus_rule();
    let dir = tempfile_dir();
    let groups = json!({"groups": rule["spec"]["groups"]});
    std::fs::write(dir.join("rules.yaml"), groups.to_string()).unwrap();
    let (ok, out) = run_promtool(&["check", "rules", "rules.yaml"], &dir, None);
    assert!(ok, "promtool check rules: {out}");
    assert!(out.contains("SUCCESS: 6 rules found"), "{out}");

    let mut compared = groups.clone();
    for r in compared["groups"][0]["rules"].as_array_mut().unwrap() {
        let a = &r["annotations"];
        for key in ["summary", "description", "runbook_url"] {
            assert!(a[key].as_str().is_some_and(|s| !s.is_empty()), "{key}: {r}");
        }
        // Useful without the runbook (air-gapped): the first action comes first.
        let description = a["description"].as_str().unwrap();
        let head: String = description.chars().take(60).collect();
        assert!(
            head.contains("First: ") || head.starts_with("Usually nothing"),
            "{description}"
        );
        // Each names the namespace in the command it gives.
        assert!(
            description.contains("kubectl -n harvester-system "),
            "{description}"
        );
        r["annotations"] = json!({"runbook_url": a["runbook_url"], "description": description});
    }
    std::fs::write(dir.join("alerts.rules.yaml"), compared.to_string()).unwrap();
    std::fs::copy(
        repo_root().join("tests/promtool/alerts.test.yaml"),
        dir.join("alerts.test.yaml"),
    )
    .unwrap();
    let (ok, out) = run_promtool(&["test", "rules", "alerts.test.yaml"], &dir, None);
    assert!(ok, "promtool test rules: {out}");
    let names: Vec<&str> = groups["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    let tests = std::fs::read_to_string(dir.join("alerts.test.yaml")).unwrap();
    for name in &names {
        assert!(
            tests.contains(&format!("alertname: {name}")),
            "{name} has no unit test"
        );
    }
}

/// docs/monitoring.md's "Routing for the night", its values as the page gives them: the
/// AlertmanagerConfig passes the API server's validation against the operator's own CRD, and
/// each alert the chart renders routes through it (with the `namespace` matcher the operator's
/// default strategy adds) as the page says: the critical one to `page`, the warnings to
/// `notify`, nothing else at all.
#[tokio::test]
async fn the_alerts_route_as_the_page_says_only_the_critical_one_pages() {
    let _turn = APPLY.lock().await;
    ensure_namespaces();
    monitoring_crds();
    let page = std::fs::read_to_string(repo_root().join("docs/monitoring.md")).unwrap();
    let section = page.split("### Routing for the night").nth(1).unwrap();
    let values = section
        .split("```yaml\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let dir = tempfile_dir();
    let file = dir.join("values.yaml");
    std::fs::write(&file, values).unwrap();
    let args = [BOTH_ON[0], BOTH_ON[1], "-f", file.to_str().unwrap()];

    let mut apply = control_plane().kubectl();
    apply.args(["apply", "--dry-run=server", "-f", "-"]);
    let out = pipe(apply, &template_yaml(&args));
    let applied = "alertmanagerconfig.monitoring.coreos.com/workload-update-guard-watch";
    assert!(
        out.lines()
            .any(|l| l.starts_with(applied) && l.ends_with("(server dry run)")),
        "{out}"
    );

    let objects = render(&args);
    let config = kind(
        &objects,
        "AlertmanagerConfig",
        "workload-update-guard-watch",
    );
    let namespace = config["metadata"]["namespace"].as_str().unwrap();
    assert_eq!(namespace, RELEASE_NS);
    let matches = |route: &Value, labels: &Value| {
        route["matchers"].as_array().unwrap().iter().all(|m| {
            let value = labels[m["name"].as_str().unwrap()].as_str().unwrap_or("");
            let want = m["value"].as_str().unwrap();
            match m["matchType"].as_str().unwrap() {
                "=" => value == want,
                "=~" => regex_full_match(want, value),
                other => panic!("matchType {other}"),
            }
        })
    };
    // Alertmanager's routing: the top route (with the operator's namespace matcher), then the
    // first child route that matches, else the top route's receiver.
    let route_of = |labels: &Value| -> Option<String> {
        let top = &config["spec"]["route"];
        if labels["namespace"] != namespace || !matches(top, labels) {
            return None;
        }
        let child = top["routes"].as_array().unwrap().iter();
        let receiver = child.clone().find(|r| matches(r, labels)).unwrap_or(top)["receiver"]
            .as_str()
            .unwrap()
            .to_string();
        Some(receiver)
    };
    let rules = prometheus_rule()["spec"]["groups"][0]["rules"].clone();
    let mut paged = vec![];
    for r in rules.as_array().unwrap() {
        let mut labels = r["labels"].clone();
        labels["alertname"] = r["alert"].clone();
        labels["namespace"] = json!(RELEASE_NS);
        let to = route_of(&labels).unwrap_or_else(|| panic!("{labels} routed nowhere"));
        match labels["severity"].as_str().unwrap() {
            "critical" => {
                assert_eq!(to, "on-call", "{labels}");
                paged.push(labels["alertname"].clone());
            }
            _ => assert_eq!(to, "team-mail", "{labels}"),
        }
    }
    assert_eq!(paged, [json!("WorkloadUpdateGuardUpgradeUnprotected")]);
    let others = [
        json!({"alertname": "KubeNodeNotReady", "severity": "critical", "namespace": RELEASE_NS}),
        json!({"alertname": "WorkloadUpdateGuardUpgradeUnprotected", "severity": "critical",
               "namespace": "elsewhere"}),
    ];
    for labels in others {
        assert_eq!(route_of(&labels), None, "{labels}");
    }
    let refused = crate::chart::render_refused(&[
        "--set",
        "metrics.alertmanagerConfig.enabled=true,metrics.alertmanagerConfig.page=on-call",
    ]);
    assert!(
        refused.contains("metrics.alertmanagerConfig.page is \"on-call\""),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A regular expression of Alertmanager's matchers (anchored, as Alertmanager anchors them), for
/// the one form the chart uses: a literal prefix then `.+`.
fn regex_full_match(pattern: &str, value: &str) -> bool {
    match pattern.strip_suffix(".+") {
        Some(prefix) if !prefix.contains(['.', '*', '+', '(', '[', '|']) => {
            value.len() > prefix.len() && value.starts_with(prefix)
        }
        _ => panic!("the test reads only `literal.+` patterns, not {pattern}"),
    }
}

/// The ServiceMonitor and the PrometheusRule pass the API server's validation against the
/// Prometheus operator's own CRDs, with both values on; the values' labels reach them.
#[tokio::test]
async fn the_service_monitor_and_the_rule_pass_the_real_crds() {
    let _turn = APPLY.lock().await;
    ensure_namespaces();
    monitoring_crds();
    let args = [
        BOTH_ON[0],
        BOTH_ON[1],
        "--set",
        "metrics.serviceMonitor.labels.release=rancher-monitoring,metrics.prometheusRule.labels.release=rancher-monitoring",
        "--set",
        "metrics.serviceMonitor.interval=30s",
    ];
    let yaml = template_yaml(&args);
    let mut apply = control_plane().kubectl();
    apply.args(["apply", "--dry-run=server", "-f", "-"]);
    let out = pipe(apply, &yaml);
    for object in [
        "servicemonitor.monitoring.coreos.com/workload-update-guard-watch",
        "prometheusrule.monitoring.coreos.com/workload-update-guard-watch",
        &format!("service/{SERVICE}"),
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(object) && l.ends_with("(server dry run)")),
            "{object}: {out}"
        );
    }
    let objects = render(&args);
    let monitor = kind(&objects, "ServiceMonitor", "workload-update-guard-watch");
    let rule = kind(&objects, "PrometheusRule", "workload-update-guard-watch");
    for o in [monitor, rule] {
        assert_eq!(o["metadata"]["labels"]["release"], "rancher-monitoring");
        assert_eq!(o["metadata"]["namespace"], RELEASE_NS);
    }
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "metrics", "path": "/metrics", "interval": "30s"}])
    );
    // The ServiceMonitor selects the Service, which selects the guard's pod (not the hook's).
    let service = kind(&objects, "Service", SERVICE);
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][k], v, "{k}");
    }
    let pod_labels = &deployment(&objects)["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "{k}");
    }
    // The guard-down alert reads the Service's job, in the release's namespace.
    let down = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "WorkloadUpdateGuardDown")
        .unwrap();
    assert_eq!(
        down["expr"],
        format!(
            "absent(up{{job=\"{SERVICE}\",namespace=\"{RELEASE_NS}\"}}) or up{{job=\"{SERVICE}\",namespace=\"{RELEASE_NS}\"}} == 0"
        )
    );
}

/// The values: by default the port, the Service and the NetworkPolicy's one ingress rule (from
/// cattle-monitoring-system to 9090), METRICS_PORT and ADMISSION_HOLD set, no ServiceMonitor and
/// no PrometheusRule; `metrics.enabled=false` leaves no port, no Service, no ingress, and
/// METRICS_PORT=0; the port, the namespace, the resync and the runbooks' base are followed.
#[test]
fn the_metrics_values_render_the_port_the_service_and_the_ingress() {
    let objects = render(&[]);
    let d = deployment(&objects);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["ports"],
        json!([{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}])
    );
    let env = container_env(d);
    assert_eq!(env["METRICS_PORT"], "9090");
    assert_eq!(env["ADMISSION_HOLD"], "true");
    let service = kind(&objects, "Service", SERVICE);
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}])
    );
    let policy = kind(&objects, "NetworkPolicy", "workload-update-guard-watch");
    assert_eq!(
        policy["spec"]["ingress"],
        json!([{"from": [{"namespaceSelector": {"matchLabels":
                    {"kubernetes.io/metadata.name": "cattle-monitoring-system"}}}],
                "ports": [{"protocol": "TCP", "port": 9090}]}])
    );
    // No monitoring CRDs served (`helm template` has no cluster): neither. Served, both, by
    // default (`.Capabilities`); `false` leaves each out all the same.
    assert!(
        objects
            .iter()
            .all(|o| o["kind"] != "ServiceMonitor" && o["kind"] != "PrometheusRule")
    );
    monitoring_crds();
    let served = [
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
    ];
    let mut auto_args = served.to_vec();
    auto_args.extend([
        "--set",
        "metrics.prometheusRule.runbookBase=https://example.test/runbook",
    ]);
    let auto = render(&auto_args);
    kind(&auto, "ServiceMonitor", "workload-update-guard-watch");
    kind(&auto, "PrometheusRule", "workload-update-guard-watch");
    let mut off_args = served.to_vec();
    off_args.extend([
        "--set",
        "metrics.serviceMonitor.enabled=false,metrics.prometheusRule.enabled=false",
    ]);
    assert!(
        render(&off_args)
            .iter()
            .all(|o| o["kind"] != "ServiceMonitor" && o["kind"] != "PrometheusRule")
    );

    let off = render(&[
        "--set",
        "metrics.enabled=false,metrics.serviceMonitor.enabled=true,admissionPolicy.enabled=false",
    ]);
    let d = deployment(&off);
    assert!(
        d["spec"]["template"]["spec"]["containers"][0]
            .get("ports")
            .is_none()
    );
    let env = container_env(d);
    assert_eq!(
        (env["METRICS_PORT"].as_str(), env["ADMISSION_HOLD"].as_str()),
        ("0", "false")
    );
    assert!(
        off.iter()
            .all(|o| o["kind"] != "Service" && o["kind"] != "ServiceMonitor")
    );
    let policy = kind(&off, "NetworkPolicy", "workload-update-guard-watch");
    assert!(policy["spec"].get("ingress").is_none(), "{policy}");

    monitoring_crds();
    let moved = render(&[
        BOTH_ON[0],
        BOTH_ON[1],
        "--set",
        "metrics.port=9464,metrics.scrapeNamespace=monitoring,guard.watchResyncSeconds=60,guard.kubevirtNamespace=kv",
        "--set",
        "metrics.prometheusRule.runbookBase=https://example.test/runbook",
    ]);
    let c = &deployment(&moved)["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["ports"][0]["containerPort"], 9464);
    assert_eq!(container_env(deployment(&moved))["METRICS_PORT"], "9464");
    let policy = kind(&moved, "NetworkPolicy", "workload-update-guard-watch");
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], 9464);
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    let rules = kind(&moved, "PrometheusRule", "workload-update-guard-watch")["spec"]["groups"][0]
        ["rules"]
        .clone();
    let by_name = |name: &str| {
        rules
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["alert"] == name)
            .unwrap()
            .clone()
    };
    // The accept command: the latest Upgrade, where the Upgrades are (the KubeVirt CR's namespace).
    let accept = "`kubectl -n kv annotate upgrades.harvesterhci.io -l harvesterhci.io/latestUpgrade=true \
                  workload-update-guard.harvesterhci.io/allow-unprotected=true`";
    for alert in [
        "WorkloadUpdateGuardUpgradeUnprotected",
        "WorkloadUpdateGuardUpgradeHeld",
    ] {
        let description = by_name(alert)["annotations"]["description"].clone();
        assert!(
            description.as_str().unwrap().contains(accept),
            "{alert}: {description}"
        );
    }
    assert_eq!(
        by_name("WorkloadUpdateGuardReadsFailing")["expr"],
        "time() - workload_update_guard_last_successful_read_timestamp_seconds > 120"
    );
    for (alert, anchor, severity) in [
        (
            "WorkloadUpdateGuardUpgradeUnprotected",
            "upgrade-under-way-unprotected",
            "critical",
        ),
        (
            "WorkloadUpdateGuardUpgradeHeld",
            "upgrade-held-by-the-policy",
            "warning",
        ),
        (
            "WorkloadUpdateGuardReadsFailing",
            "reads-failing",
            "warning",
        ),
        (
            "WorkloadUpdateGuardHoldAfterFailedUpgrade",
            "hold-after-a-failed-upgrade",
            "warning",
        ),
        (
            "WorkloadUpdateGuardFleetDeployBlocked",
            "fleets-deploy-stopped-on-a-claim",
            "warning",
        ),
        ("WorkloadUpdateGuardDown", "guard-down", "warning"),
    ] {
        let r = by_name(alert);
        assert_eq!(
            r["annotations"]["runbook_url"],
            format!("https://example.test/runbook#{anchor}")
        );
        assert_eq!(r["labels"]["severity"], severity, "{alert}");
    }
    // The anchors are headings of docs/troubleshooting.md.
    let runbooks = std::fs::read_to_string(repo_root().join("docs/troubleshooting.md")).unwrap();
    let slugs: Vec<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| {
            h.to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    for anchor in [
        "upgrade-under-way-unprotected",
        "upgrade-held-by-the-policy",
        "reads-failing",
        "hold-after-a-failed-upgrade",
        "guard-down",
    ] {
        assert!(
            slugs.iter().any(|s| s == anchor),
            "docs/troubleshooting.md has no heading for #{anchor}: {slugs:?}"
        );
    }

    let err = crate::chart::render_refused(&["--set", "metrics.port=0"]);
    assert!(err.contains("port"), "{err}");
    let err = crate::chart::render_refused(&["--set", "metrics.bogus=1"]);
    assert!(err.contains("bogus"), "{err}");
}

/// `GET /metrics` on the loopback port: the body, or `None` while nothing answers.
pub fn scrape(port: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: guard\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    Some(body.to_string())
}

/// A series' value in a scrape.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Scrapes until `series` is `want` (the loop sets it after its pass or act); it sleeps on the
/// runtime, so that the test's own tasks (the Fleet model) go on meanwhile.
async fn metric_becomes(
    guard: &Guard,
    port: u16,
    series: &str,
    want: f64,
    within: Duration,
) -> String {
    let start = Instant::now();
    loop {
        let text = scrape(port).unwrap_or_default();
        if value(&text, series) == Some(want) {
            return text;
        }
        assert!(
            start.elapsed() < within,
            "{series} not {want} within {within:?}: {text}\nlog: {}",
            guard.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const IN_PLACE: &str = "workload_update_guard_suspension_in_place";
const UNPROTECTED: &str = "workload_update_guard_upgrade_unprotected";
const HELD: &str = "workload_update_guard_upgrade_held";
const OUTDATED: &str = "workload_update_guard_outdated_vmis";
const BLOCKED: &str = "workload_update_guard_fleet_deploy_blocked";

/// `promtool check metrics` on a scrape: the format and Prometheus's naming rules. promtool
/// parses the Prometheus text format, where a counter's HELP and TYPE name its sample
/// (`..._total`); OpenMetrics names the family without the suffix and ends with `# EOF`. The
/// scrape is checked as Prometheus stores it: the counters' families named by their samples, the
/// end marker (checked here) dropped.
fn check_metrics(text: &str) {
    assert!(text.ends_with("# EOF\n"), "{text}");
    let counters: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let prometheus_text: String = text
        .lines()
        .filter(|l| *l != "# EOF")
        .map(|l| {
            for c in &counters {
                for head in ["# HELP ", "# TYPE "] {
                    if let Some(rest) = l.strip_prefix(&format!("{head}{c} ")) {
                        return format!("{head}{c}_total {rest}\n");
                    }
                }
            }
            format!("{l}\n")
        })
        .collect();
    let (ok, out) = run_promtool(
        &["check", "metrics"],
        &tempfile_dir(),
        Some(&prometheus_text),
    );
    assert!(ok, "promtool check metrics: {out}\n{prometheus_text}");
}

/// The Events of `reason` in `ns` about objects of `kind`.
fn events_about(ns: &str, reason: &str, kind: &str) -> Vec<Value> {
    events_in(ns)
        .into_iter()
        .filter(|e| e["reason"] == reason && e["regarding"]["kind"] == kind)
        .collect()
}

/// The resident guard's metrics through a modelled v1.7.1 upgrade: nothing in place, then its
/// suspension in place, then restored; the acts counted; every scrape passes `promtool check
/// metrics`; the last successful read moves.
#[tokio::test]
async fn the_metrics_follow_a_modelled_upgrade() {
    let (client, ns) = new_harvester("metrics", json!(["LiveMigrate"])).await;
    let port = free_port();
    let port_text = port.to_string();
    let guard = Guard::spawn_with(
        &control_plane().kubeconfig(),
        &ns,
        0,
        &[("METRICS_PORT", &port_text), ("CHART_VERSION", "9.9.9")],
    );
    guard.wait_for("watching for the next one", Duration::from_secs(20));
    let first = metric_becomes(&guard, port, IN_PLACE, 0.0, Duration::from_secs(10)).await;
    check_metrics(&first);
    assert_eq!(value(&first, UNPROTECTED), Some(0.0), "{first}");
    let read = value(
        &first,
        "workload_update_guard_last_successful_read_timestamp_seconds",
    );
    assert!(read.is_some_and(|t| t > 1.7e9), "{first}");
    assert_eq!(
        value(
            &first,
            &format!(
                "workload_update_guard_build_info{{version=\"{}\",revision=\"{}\",chart=\"9.9.9\"}}",
                env!("CARGO_PKG_VERSION"),
                workload_update_guard::build::COMMIT
            )
        ),
        Some(1.0),
        "{first}"
    );
    // The log's first line names the same build, and the chart.
    let log = guard.log();
    let start = log.lines().next().unwrap_or_default();
    assert!(
        start.contains(env!("CARGO_PKG_VERSION"))
            && start.contains(workload_update_guard::build::COMMIT)
            && start.contains("9.9.9"),
        "{log}"
    );

    let up = Upgrade::start(&client, &ns, "hvst-upgrade-m", "v1.7.1").await;
    methods_become(&client, &ns, &json!([]), Duration::from_secs(10)).await;
    let during = metric_becomes(&guard, port, IN_PLACE, 1.0, Duration::from_secs(10)).await;
    check_metrics(&during);
    assert_eq!(value(&during, UNPROTECTED), Some(0.0), "{during}");
    assert_eq!(
        value(
            &during,
            "workload_update_guard_acts_total{phase=\"pre\",result=\"ok\"}"
        ),
        Some(1.0),
        "{during}"
    );
    for state in UPGRADE_STATES.iter().filter(|s| !ENDED.contains(s)) {
        up.set_state(&client, state).await;
    }
    up.finish(&client, true).await;
    methods_become(&client, &ns, &live_migrate(), Duration::from_secs(10)).await;
    let after = metric_becomes(&guard, port, IN_PLACE, 0.0, Duration::from_secs(10)).await;
    check_metrics(&after);
    assert_eq!(
        value(
            &after,
            "workload_update_guard_acts_total{phase=\"post\",result=\"ok\"}"
        ),
        Some(1.0),
        "{after}"
    );
    let later = value(
        &after,
        "workload_update_guard_last_successful_read_timestamp_seconds",
    );
    assert!(later >= read, "{after}");
}

/// KubeVirt's outdated count changes with no Upgrade or UpgradePlan event (its updater, its
/// evacuations, a node's launchers refreshed): the gauge follows it through the CR's watch, well
/// within the resync (30 s here), and `status` (a read of the CR) says the same.
#[tokio::test]
async fn the_outdated_gauge_follows_kubevirts_count_with_no_upgrade_event() {
    let (client, ns) = new_harvester("metrics-outdated", json!(["LiveMigrate"])).await;
    let port = free_port();
    let port_text = port.to_string();
    let guard = Guard::spawn_with(
        &control_plane().kubeconfig(),
        &ns,
        0,
        &[("METRICS_PORT", &port_text)],
    );
    guard.wait_for("watching for the next one", Duration::from_secs(20));
    // The fixture's count.
    metric_becomes(&guard, port, OUTDATED, 3.0, Duration::from_secs(10)).await;
    for count in [7, 0, 5] {
        let changed = Instant::now();
        let status = json!({"outdatedVirtualMachineInstanceWorkloads": count});
        set_status(&client, "KubeVirt", &ns, "kubevirt", status).await;
        metric_becomes(&guard, port, OUTDATED, count as f64, Duration::from_secs(5)).await;
        eprintln!(
            "metrics: outdated {count} shown after {:?}",
            changed.elapsed()
        );
        let mut env = env_for(&ns, "status");
        env.insert("LOG_FORMAT".into(), "json".into());
        let report = run_bin(&control_plane().kubeconfig(), env).await;
        let report: Value = serde_json::from_str(&report.stdout).unwrap();
        assert_eq!(
            report["kubevirt"]["outdatedVirtualMachineInstanceWorkloads"],
            json!(count)
        );
    }
    assert!(!guard.log().contains("running pre"), "{}", guard.log());
}

/// A guard whose ServiceAccount may read everything but patch nothing: its `pre` fails with a
/// 403. The upgrade to v1.7.1 is unprotected and, with the chart's policy (`ADMISSION_HOLD`),
/// held: both gauges 1, the failed acts counted, one Warning `UpgradeHeldByPolicy` on the
/// Upgrade and one on the KubeVirt CR naming the 403 and the escape, not repeated by the next
/// failing pass; past `NodesPrepared` it is `UpgradeUnprotected` (held 0), said once more;
/// `status` says `HELD BY THE POLICY` while it is the guard's last word. The operator accepts
/// the migrations (the escape annotation): both gauges 0, `status` `MIGRATIONS ACCEPTED`, and
/// the guard, even once it may patch, does not suspend that upgrade; the next one it does.
#[tokio::test]
async fn a_guard_that_cannot_suspend_says_the_upgrade_is_unprotected_and_held() {
    let (client, ns) = new_harvester("unprotected", json!(["LiveMigrate"])).await;
    let reader = format!("{ns}-reader");
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": reader},
        "rules": [
            {"apiGroups": ["kubevirt.io", "management.cattle.io", "harvesterhci.io", "management.harvesterhci.io"],
             "resources": ["*"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "list"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": reader},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]});
    kubectl_ok(&["-n", &ns, "create", "serviceaccount", "reader"]);
    for o in [&role, &binding] {
        let mut apply = control_plane().kubectl();
        apply.args(["apply", "-f", "-"]);
        pipe(apply, &o.to_string());
    }
    let kubeconfig = token_kubeconfig(&sa_token(&ns, "reader"));
    let port = free_port();
    let port_text = port.to_string();
    let guard = Guard::spawn_with(
        &kubeconfig,
        &ns,
        0,
        &[
            ("METRICS_PORT", &port_text),
            ("ADMISSION_HOLD", "true"),
            // The resync out of the way: the retry of a failed act is not it.
            ("WATCH_RESYNC_SECONDS", "300"),
        ],
    );
    guard.wait_for("watching for the next one", Duration::from_secs(20));

    let up = Upgrade::start(&client, &ns, "hvst-upgrade-u", "v1.7.1").await;
    let held = metric_becomes(&guard, port, HELD, 1.0, Duration::from_secs(15)).await;
    check_metrics(&held);
    assert_eq!(value(&held, UNPROTECTED), Some(1.0), "{held}");
    assert_eq!(value(&held, IN_PLACE), Some(0.0), "{held}");
    assert!(
        value(
            &held,
            "workload_update_guard_acts_total{phase=\"pre\",result=\"error\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{held}"
    );
    let said = |reason: &str, kind: &str| events_about(&ns, reason, kind);
    let start = Instant::now();
    while said(UPGRADE_HELD_BY_POLICY, "Upgrade").is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", guard.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let on_upgrade = said(UPGRADE_HELD_BY_POLICY, "Upgrade");
    assert_eq!(on_upgrade[0]["type"], "Warning");
    assert_eq!(on_upgrade[0]["regarding"]["name"], "hvst-upgrade-u");
    let note = on_upgrade[0]["note"].as_str().unwrap();
    for words in ["403", ALLOW_UNPROTECTED, "accept the migrations"] {
        assert!(note.contains(words), "{words}: {note}");
    }
    assert_eq!(said(UPGRADE_HELD_BY_POLICY, "KubeVirt").len(), 1);
    // `status` says it too: first, and the guard's last word below.
    let status = run_bin(&control_plane().kubeconfig(), env_for(&ns, "status")).await;
    assert!(
        status.stdout.starts_with(
            "HELD BY THE POLICY: Harvester Upgrade hvst-upgrade-u to v1.7.1 is under way"
        ) && status
            .stdout
            .lines()
            .next()
            .unwrap()
            .contains("holds it before NodesPrepared"),
        "{status:?}"
    );
    assert!(
        status
            .stdout
            .contains(&format!("resident guard  {UPGRADE_HELD_BY_POLICY} at ")),
        "{status:?}"
    );

    // Another pass (woken by the Upgrade's change), another failed pre: nothing said again.
    let failed_before = guard.log().matches("pre failed").count();
    up.set_state(&client, "PreparingRepo").await;
    let start = Instant::now();
    while guard.log().matches("pre failed").count() == failed_before {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", guard.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(said(UPGRADE_HELD_BY_POLICY, "Upgrade").len(), 1);
    assert_eq!(said(UPGRADE_HELD_BY_POLICY, "KubeVirt").len(), 1);

    // Past NodesPrepared (the hold has nothing left to hold): unprotected, said once as such.
    merge_patch(
        &client,
        "Upgrade",
        &ns,
        "hvst-upgrade-u",
        "harvester",
        json!({"status": {"conditions": [{"type": "NodesPrepared", "status": "True"}]}}),
    )
    .await;
    let open = metric_becomes(&guard, port, HELD, 0.0, Duration::from_secs(10)).await;
    assert_eq!(value(&open, UNPROTECTED), Some(1.0), "{open}");
    let start = Instant::now();
    while said(UPGRADE_UNPROTECTED, "Upgrade").is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", guard.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(said(UPGRADE_UNPROTECTED, "KubeVirt").len(), 1);
    let note = said(UPGRADE_UNPROTECTED, "Upgrade")[0]["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.contains("To accept the migrations"), "{note}");

    // The operator accepts the migrations: nothing unprotected any more, `status` says so, and
    // the guard stops trying, even once it may patch (woken by the Upgrade's changes).
    kubectl_ok(&[
        "-n",
        &ns,
        "annotate",
        "upgrades.harvesterhci.io",
        "hvst-upgrade-u",
        &format!("{ALLOW_UNPROTECTED}=true"),
    ]);
    let accepted = metric_becomes(&guard, port, UNPROTECTED, 0.0, Duration::from_secs(10)).await;
    assert_eq!(value(&accepted, HELD), Some(0.0), "{accepted}");
    let mut writer = role.clone();
    writer["rules"].as_array_mut().unwrap().push(json!(
        {"apiGroups": ["kubevirt.io", "management.cattle.io"],
         "resources": ["kubevirts", "managedcharts"], "verbs": ["patch"]}));
    let mut apply = control_plane().kubectl();
    apply.args(["apply", "-f", "-"]);
    pipe(apply, &writer.to_string());
    let errors = guard.log().matches("pre failed").count();
    up.set_state(&client, "UpgradingSystemServices").await;
    up.set_state(&client, "UpgradingNodes").await;
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        kubevirt_methods(&client, &ns).await,
        json!(["LiveMigrate"]),
        "accepted: not suspended mid-upgrade: {}",
        guard.log()
    );
    assert_eq!(
        guard.log().matches("pre failed").count(),
        errors,
        "no pre tried"
    );
    assert_eq!(
        said(UPGRADE_UNPROTECTED, "Upgrade").len(),
        1,
        "nothing more said"
    );
    let status = run_bin(&control_plane().kubeconfig(), env_for(&ns, "status")).await;
    assert!(
        status.stdout.starts_with(
            "MIGRATIONS ACCEPTED: Harvester Upgrade hvst-upgrade-u to v1.7.1 is under way"
        ) && status.stdout.contains("its migrations are accepted"),
        "{status:?}"
    );

    // The next upgrade, without the annotation: the guard (which may patch now) suspends it.
    up.finish(&client, true).await;
    Upgrade::start(&client, &ns, "hvst-upgrade-w", "v1.7.1").await;
    let granted = Instant::now();
    methods_become(&client, &ns, &json!([]), Duration::from_secs(30)).await;
    eprintln!(
        "monitoring: the next upgrade suspended {:.1} s after its creation",
        granted.elapsed().as_secs_f64()
    );
    let protected = metric_becomes(&guard, port, IN_PLACE, 1.0, Duration::from_secs(10)).await;
    assert_eq!(value(&protected, UNPROTECTED), Some(0.0), "{protected}");
    assert_eq!(value(&protected, HELD), Some(0.0), "{protected}");
    check_metrics(&protected);
    // Protected: `status` no longer says it (the guard's later decision is its last word).
    let status = run_bin(&control_plane().kubeconfig(), env_for(&ns, "status")).await;
    assert!(
        status.stdout.contains("resident guard  ") && !status.stdout.contains("Unprotected at "),
        "{status:?}"
    );
    kubectl_ok(&["delete", "clusterrolebinding", &reader]);
    kubectl_ok(&["delete", "clusterrole", &reader]);
}

/// Fleet's deploy stuck on another manager's claim (the kind of harvester#10899, whose merge patch
/// is an `Update` claim; here an operator's `kubectl-edit`), between upgrades: a change of the
/// ManagedChart's spec that the model deploys with the real Helm (server-side, no force)
/// conflicts and stays `WaitApplied`. The resident guard names it at its next pass (the chart is
/// not watched: the resync, 30 s here): its gauge 1, one Warning `FleetDeployBlockedByClaim` on
/// the KubeVirt CR naming the manager, not repeated by the next pass; `status` says what the
/// deploy waits on. The way out they name (a `pre`/`post` cycle) lets the retried deploy through
/// and the gauge goes back to 0.
#[tokio::test]
async fn a_fleet_deploy_stuck_on_a_claim_is_named_by_the_gauge_an_event_and_status() {
    let client = admin().await;
    let (ns, chart) = helm_installed(&client, "fleet-blocked").await;
    let fleet = FleetModel::start(&client, &ns, Options::helm(chart)).await;
    let port = free_port();
    let port_text = port.to_string();
    let kubeconfig = control_plane().kubeconfig();
    let guard = Guard::spawn_with(&kubeconfig, &ns, 0, &[("METRICS_PORT", &port_text)]);
    guard.wait_for("watching for the next one", Duration::from_secs(20));
    metric_becomes(&guard, port, BLOCKED, 0.0, Duration::from_secs(10)).await;

    set_methods(
        &client,
        &ns,
        "kubectl-edit",
        json!(["LiveMigrate", "Evict"]),
    )
    .await;
    // A change of the chart's spec (another value), which Fleet deploys: Helm's conflict.
    let op = json!([{"op": "add", "path": "/spec/values/longhorn/replicas", "value": 2}]);
    json_patch(&client, "ManagedChart", &ns, "harvester", op)
        .await
        .expect("a spec change");
    let stuck = Instant::now();
    let scraped = metric_becomes(&guard, port, BLOCKED, 1.0, Duration::from_secs(45)).await;
    check_metrics(&scraped);
    eprintln!(
        "metrics: the blocked deploy shown after {:?}",
        stuck.elapsed()
    );
    let log = fleet.log();
    assert!(
        log.iter()
            .any(|s| s.state == "log" && s.message.contains("kubectl-edit")),
        "the model's agent log has Helm's conflict: {log:?}"
    );
    let warnings = events_about(&ns, FLEET_DEPLOY_BLOCKED, "KubeVirt");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_contains_all(
        warnings[0]["note"].as_str().unwrap(),
        &[
            &format!("ManagedChart {ns}/harvester"),
            "kubectl-edit holds an Update claim",
            "run pre and then post once more",
        ],
    );
    let status = run_bin(&kubeconfig, env_for(&ns, "status")).await;
    assert!(
        status
            .stdout
            .contains("its deploy waits on a claim: kubectl-edit holds an Update claim"),
        "{}",
        status.stdout
    );

    run_bin(&kubeconfig, env_for(&ns, "pre")).await.ok();
    run_bin(&kubeconfig, env_for(&ns, "post")).await.ok();
    metric_becomes(&guard, port, BLOCKED, 0.0, Duration::from_secs(45)).await;
    let g = fleet.generation();
    assert!(fleet.deployed(g).is_some(), "{:?}", fleet.log());
    assert_eq!(events_about(&ns, FLEET_DEPLOY_BLOCKED, "KubeVirt").len(), 1);
    fleet.stop().await;
}
