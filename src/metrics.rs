//! The resident guard's Prometheus metrics (docs/monitoring.md). The waiting loop sets them after
//! each pass and act: a scrape sends no request to the API server.

use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tracing::{debug, error, info, warn};

use crate::plan::monitoring::Gauges;
use crate::plan::releases;
use crate::plan::upgrade_record::Record;
use crate::vocabulary::Phase;

pub const PREFIX: &str = "workload_update_guard";

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A client that never sends its request's headers holds a connection this long at most.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The resident guard's gauges, one field each: a new one is a field here, its name and help in
/// [`Metrics::new`], and its value in [`Metrics::show`].
struct Families {
    suspension_in_place: Gauge,
    upgrade_unprotected: Gauge,
    upgrade_held: Gauge,
    hold_after_failed_upgrade: Gauge,
    no_longer_needed: Gauge,
    fleet_deploy_blocked: Gauge,
    outdated_vmis: Gauge,
    last_successful_read: Gauge,
    last_upgrade_failed_migrations: Gauge,
    last_upgrade_shut_down_vms: Gauge,
    last_upgrade_saved_migrations: Gauge,
}

type Labels<const N: usize> = [(&'static str, String); N];

pub struct Metrics {
    registry: Registry,
    gauges: Families,
    acts: Family<Labels<2>, Counter>,
    /// The last upgrade's live migrations by cause (its record's figures).
    last_upgrade_migrations: Family<Labels<1>, Gauge>,
}

impl Metrics {
    /// Each `acts_total` series starts at 0: a series that appears only at its first act makes
    /// `increase()` miss that act.
    pub fn new(version: &str, revision: &str, chart: &str) -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let mut gauge = |name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let gauges = Families {
            suspension_in_place: gauge(
                "suspension_in_place",
                "1 while a suspension of the guard's (its [] on the KubeVirt CR) is in place",
            ),
            upgrade_unprotected: gauge(
                "upgrade_unprotected",
                &format!(
                    "1 while an upgrade that needs the guard (to a release {}) is under way and \
                     automated workload updates are still on",
                    releases::without_handling()
                ),
            ),
            upgrade_held: gauge(
                "upgrade_held",
                "1 while such an upgrade is held by the chart's admission policy (before NodesPrepared)",
            ),
            hold_after_failed_upgrade: gauge(
                "hold_after_failed_upgrade",
                "1 while the suspension is held after a failed upgrade, until its retry",
            ),
            no_longer_needed: gauge(
                "no_longer_needed",
                "1 when no release the cluster can upgrade to next needs the guard: it can be uninstalled",
            ),
            fleet_deploy_blocked: gauge(
                "fleet_deploy_blocked",
                "1 while Fleet has not deployed the ManagedChart and another manager's Update claim holds the KubeVirt CR's workloadUpdateMethods at a value the chart does not render (Helm's conflict stops the deploy)",
            ),
            outdated_vmis: gauge(
                "outdated_vmis",
                "KubeVirt's count of VMIs its workload updater would move (the KubeVirt CR's status.outdatedVirtualMachineInstanceWorkloads): during an upgrade it falls node by node as the drains move VMs to the new virt-launcher; at the restore, what the drains did not move",
            ),
            last_successful_read: gauge(
                "last_successful_read_timestamp_seconds",
                "Unix time of the last pass that read every object the guard watches",
            ),
            last_upgrade_failed_migrations: gauge(
                "last_upgrade_failed_migrations",
                "The last upgrade's live migrations that failed (its record, in the guard's ConfigMap)",
            ),
            last_upgrade_shut_down_vms: gauge(
                "last_upgrade_shut_down_vms",
                "The last upgrade's VMs shut down instead of live-migrated (its record names them, with their reasons)",
            ),
            last_upgrade_saved_migrations: gauge(
                "last_upgrade_saved_migrations",
                "The workload-update live migrations the last upgrade's suspension spared: the outdated live-migratable VMIs once KubeVirt was upgraded, less those the updater made anyway",
            ),
        };
        let last_upgrade_migrations = Family::default();
        let help = "The last upgrade's live migrations by cause: workload_update (during it), after_restore (the updater's wave once updates were back on), evacuation (the drains), other";
        registry.register(
            "last_upgrade_migrations",
            help,
            last_upgrade_migrations.clone(),
        );
        let acts = Family::default();
        let help = "Runs of pre and post by the resident guard, by result";
        registry.register("acts", help, acts.clone());
        for phase in [Phase::Pre, Phase::Post] {
            for ok in [true, false] {
                let _ = acts.get_or_create(&act_labels(phase, ok));
            }
        }
        let build = Family::<Labels<3>, Gauge>::default();
        let help =
            "The running build: its version and git revision, and the chart's version; always 1";
        registry.register("build_info", help, build.clone());
        let labels = [
            ("version", version),
            ("revision", revision),
            ("chart", chart),
        ];
        let labels = labels.map(|(k, v)| (k, v.to_string()));
        build.get_or_create(&labels).set(1);
        Metrics {
            registry,
            gauges,
            acts,
            last_upgrade_migrations,
        }
    }

    /// The figures of the last upgrade's record, open or complete.
    pub fn recorded(&self, r: &Record) {
        let m = &r.migrations;
        let causes = [
            ("workload_update", m.workload_update),
            ("after_restore", r.after_restore.workload_update),
            ("evacuation", m.evacuation),
            ("other", m.other),
        ];
        for (cause, n) in causes {
            let labels = [("cause", cause.to_string())];
            self.last_upgrade_migrations
                .get_or_create(&labels)
                .set(n as i64);
        }
        let g = &self.gauges;
        g.last_upgrade_failed_migrations.set(m.failed as i64);
        g.last_upgrade_shut_down_vms.set(r.shut_down.total as i64);
        g.last_upgrade_saved_migrations.set(r.saved as i64);
    }

    pub fn show(&self, seen: &Gauges) {
        let g = &self.gauges;
        g.suspension_in_place.set(seen.suspension_in_place.into());
        g.upgrade_unprotected.set(seen.upgrade_unprotected.into());
        g.upgrade_held.set(seen.upgrade_held.into());
        g.hold_after_failed_upgrade
            .set(seen.hold_after_failed_upgrade.into());
        g.no_longer_needed.set(seen.no_longer_needed.into());
        g.fleet_deploy_blocked.set(seen.fleet_deploy_blocked.into());
        g.outdated_vmis.set(seen.outdated_vmis);
    }

    pub fn read_everything(&self, unix_seconds: i64) {
        self.gauges.last_successful_read.set(unix_seconds);
    }

    /// Another phase than `pre` and `post` has no series.
    pub fn acted(&self, phase: Phase, ok: bool) {
        if let Some(count) = self.acts.get(&act_labels(phase, ok)) {
            count.inc();
        }
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }
}

fn act_labels(phase: Phase, ok: bool) -> Labels<2> {
    let result = if ok { "ok" } else { "error" };
    [("phase", phase.to_string()), ("result", result.to_string())]
}

/// Every address: IPv6 (which takes IPv4 too where the node allows it), else IPv4 alone (a pod
/// without IPv6). A port that cannot be bound is an ERROR line, and the guard goes on without
/// metrics: its alerts then say the target is down.
pub async fn start(port: Option<u16>, chart: &str) -> Arc<Metrics> {
    let version = env!("CARGO_PKG_VERSION");
    let revision = crate::build::COMMIT;
    let metrics = Arc::new(Metrics::new(version, revision, chart));
    let Some(port) = port else {
        return metrics;
    };
    let listener = match TcpListener::bind((Ipv6Addr::UNSPECIFIED, port)).await {
        Err(_) => TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await,
        bound => bound,
    };
    match listener {
        Ok(listener) => {
            info!(port, "resident guard: serving its metrics on /metrics");
            tokio::spawn(serve(listener, metrics.clone()));
        }
        Err(e) => {
            error!(port, error = %e, "resident guard: cannot serve its metrics (METRICS_PORT)")
        }
    }
    metrics
}

async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, typically: a pause instead of a tight loop.
                warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = respond(&metrics, req.method(), req.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                debug!(error = %e, "metrics: connection ended with an error");
            }
        });
    }
}

fn respond(metrics: &Metrics, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let plain = |status, body: &str| (status, "text/plain; charset=utf-8", body.to_string());
    let (status, content_type, body) = match (path, method) {
        ("/metrics", &Method::GET | &Method::HEAD) => {
            (StatusCode::OK, CONTENT_TYPE, metrics.text())
        }
        ("/metrics", _) => plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n"),
        _ => plain(StatusCode::NOT_FOUND, "only /metrics is served here\n"),
    };
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a status and a header of our own")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> Option<String> {
        text.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')
                .map(str::to_string)
        })
    }

    #[test]
    fn every_metric_has_its_documented_name_and_starts_at_zero() {
        let m = Metrics::new("0.2.0", "abc1234", "0.2.0");
        let text = m.text();
        for gauge in [
            "suspension_in_place",
            "upgrade_unprotected",
            "upgrade_held",
            "hold_after_failed_upgrade",
            "no_longer_needed",
            "fleet_deploy_blocked",
            "outdated_vmis",
            "last_successful_read_timestamp_seconds",
        ] {
            let name = format!("{PREFIX}_{gauge}");
            assert!(text.contains(&format!("# TYPE {name} gauge")), "{text}");
            assert_eq!(value(&text, &name).as_deref(), Some("0"), "{text}");
        }
        for phase in ["pre", "post"] {
            for result in ["ok", "error"] {
                let series =
                    format!("{PREFIX}_acts_total{{phase=\"{phase}\",result=\"{result}\"}}");
                assert_eq!(value(&text, &series).as_deref(), Some("0"), "{text}");
            }
        }
        let build = format!(
            "{PREFIX}_build_info{{version=\"0.2.0\",revision=\"abc1234\",chart=\"0.2.0\"}}"
        );
        assert_eq!(value(&text, &build).as_deref(), Some("1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    /// Each gauge alone at 1 (or its count): a scrape shows it under its own name, every other at
    /// 0, so that no two are swapped.
    #[test]
    fn the_loop_sets_what_a_scrape_reads() {
        let one_of = |set: fn(&mut Gauges)| {
            let mut g = Gauges::default();
            set(&mut g);
            g
        };
        let cases: [(&str, Gauges); 7] = [
            (
                "suspension_in_place",
                one_of(|g| g.suspension_in_place = true),
            ),
            (
                "upgrade_unprotected",
                one_of(|g| g.upgrade_unprotected = true),
            ),
            ("upgrade_held", one_of(|g| g.upgrade_held = true)),
            (
                "hold_after_failed_upgrade",
                one_of(|g| g.hold_after_failed_upgrade = true),
            ),
            ("no_longer_needed", one_of(|g| g.no_longer_needed = true)),
            (
                "fleet_deploy_blocked",
                one_of(|g| g.fleet_deploy_blocked = true),
            ),
            ("outdated_vmis", one_of(|g| g.outdated_vmis = 1)),
        ];
        for (name, gauges) in cases {
            let m = Metrics::new("0.2.0", "abc1234", "0.2.0");
            m.show(&gauges);
            let text = m.text();
            for (other, _) in cases {
                let want = if other == name { "1" } else { "0" };
                let got = value(&text, &format!("{PREFIX}_{other}"));
                assert_eq!(
                    got.as_deref(),
                    Some(want),
                    "{name} set, {other} read: {text}"
                );
            }
        }
        let m = Metrics::new("0.2.0", "abc1234", "0.2.0");
        m.read_everything(1_780_000_000);
        m.acted(Phase::Pre, false);
        m.acted(Phase::Pre, false);
        m.acted(Phase::Post, true);
        m.acted(Phase::Status, true);
        let text = m.text();
        let v = |s: &str| value(&text, &format!("{PREFIX}_{s}"));
        assert_eq!(
            v("last_successful_read_timestamp_seconds").as_deref(),
            Some("1780000000")
        );
        assert_eq!(
            v("acts_total{phase=\"pre\",result=\"error\"}").as_deref(),
            Some("2")
        );
        assert_eq!(
            v("acts_total{phase=\"post\",result=\"ok\"}").as_deref(),
            Some("1")
        );
    }

    #[test]
    fn only_get_of_metrics_is_served() {
        let m = Metrics::new("0.2.0", "abc1234", "0.2.0");
        let ok = respond(&m, &Method::GET, "/metrics");
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        assert_eq!(
            respond(&m, &Method::POST, "/metrics").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            respond(&m, &Method::GET, "/").status(),
            StatusCode::NOT_FOUND
        );
    }
}
