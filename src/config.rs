//! Configuration from environment variables. Every invalid value is one line naming the
//! variable and what it accepts; nothing is sent to the API server before this succeeds.

use std::path::PathBuf;
use std::time::Duration;

use crate::model::{ObjectKey, defaults};
use crate::vocabulary::{Intent, Keys, Phase, Steps};

mod args;
mod armed;
mod names;
mod raw;
pub use args::{Command, by_hand, command};
pub use armed::probe_settings;
pub use armed::{ALIVE_EVERY, ALIVE_WITHIN, Arm, Watch};
use armed::{arm, optional_name, watch};
use names::{name, namespace};
use raw::Raw;

/// The git commit the binary was built from (build.rs), or `unknown`.
pub const COMMIT: &str = env!("WUG_GIT_COMMIT");

/// The `--version` line.
pub fn version() -> String {
    format!(
        "workload-update-guard {} (commit {COMMIT})\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// The default of a variable that has none: `--help` says it must be set.
pub const REQUIRED: &str = "required";

/// Name, default and meaning of every variable: `--help` prints this table.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    (
        "PHASE",
        REQUIRED,
        "pre | post | status | watch (the resident guard)",
    ),
    (
        "KUBEVIRT_NAMESPACE",
        defaults::KUBEVIRT_NAMESPACE,
        "namespace of the KubeVirt CR",
    ),
    (
        "KUBEVIRT_NAME",
        defaults::KUBEVIRT_NAME,
        "name of the KubeVirt CR",
    ),
    (
        "MANAGEDCHART_NAMESPACE",
        defaults::CHART_NAMESPACE,
        "namespace of the ManagedChart",
    ),
    (
        "MANAGEDCHART_NAME",
        defaults::CHART_NAME,
        "name of the ManagedChart; empty switches the ManagedChart steps off",
    ),
    (
        "STEP_KUBEVIRT",
        "true",
        "patch the KubeVirt CR's workloadUpdateMethods",
    ),
    (
        "STEP_COMPARE_PATCHES",
        "true",
        "add/remove the ManagedChart comparePatches pointer",
    ),
    (
        "STEP_CHART_VALUES",
        "true",
        "set/restore the ManagedChart values override",
    ),
    (
        "FALLBACK_METHODS",
        "empty (none)",
        "comma-separated LiveMigrate,Evict; post applies it only without any record and with our own [] in place (the one our field manager wrote)",
    ),
    (
        "ALLOW_MISSING",
        "false",
        "a missing KubeVirt CR or ManagedChart is skipped with a warning instead of failing (exit 6)",
    ),
    (
        "DRY_RUN",
        "false",
        "print the planned patches and send them with server-side dry run; change nothing",
    ),
    (
        "DEADLINE_SECONDS",
        defaults::DEADLINE_SECONDS,
        "deadline for the run's requests, retries included (1..=86400); the Fleet wait is apart",
    ),
    (
        "FLEET_WAIT_SECONDS",
        defaults::FLEET_WAIT_SECONDS,
        "pre/post: how long to wait for Fleet to apply the ManagedChart change (0..=86400; 0: do not wait)",
    ),
    (
        "HARVESTER_CLEANUP_WAIT_SECONDS",
        defaults::CLEANUP_WAIT_SECONDS,
        "post: its one bound on waiting, before restoring, for an upgrade under way (Harvester's latest Upgrade, the add-on's UpgradePlans) to end and for the latest Upgrade's cleanup (0..=86400; past it, exit 7, nothing written)",
    ),
    (
        "RESTORE_DURING_UPGRADE",
        "false",
        "post: restore even while an upgrade is under way or its cleanup pending (an Upgrade stuck for good), with a RestoredDuringUpgrade warning naming it",
    ),
    (
        "ARM",
        "false",
        "post: the armed post: wait for the next upgrade (a Harvester Upgrade or UpgradePlan created after pre's record, or one under way) to begin and to end, cleanup included, then restore as post does (hack/job.sh arm); nothing of ours left: ends 0 at once",
    ),
    (
        "ARM_WAIT_SECONDS",
        defaults::ARM_WAIT_SECONDS,
        "ARM=true: the bound of that wait (1..=2592000); past it, exit 9, nothing written, the suspension stays",
    ),
    (
        "ARM_POLL_SECONDS",
        defaults::ARM_POLL_SECONDS,
        "ARM=true: seconds between two reads of the upgrade (1..=30): at most twice a minute",
    ),
    (
        "WATCH_RESYNC_SECONDS",
        defaults::WATCH_RESYNC_SECONDS,
        "watch: seconds between two reads of the upgrade when no watch event comes (30..=3600): the safety net under the watches",
    ),
    (
        "WATCH_STATE_DIR",
        "/tmp",
        "watch: an absolute, writable directory for the probe files `alive` and `ready` (--probe live|ready reads them)",
    ),
    (
        "METRICS_PORT",
        defaults::METRICS_PORT,
        "watch: the metrics' port (GET /metrics); 0: none",
    ),
    (
        "ADMISSION_HOLD",
        "false",
        "watch: the chart's admission policy holds unprotected upgrades",
    ),
    (
        "UPGRADE_PLAN",
        "empty (none)",
        "post: the UpgradePlan that runs this post (hack/job.sh --plan sets it); post does not wait for that plan to end",
    ),
    (
        "PRE_EVEN_IF_NOT_NEEDED",
        "false",
        "pre: suspend even where the release the cluster upgrades to (the Upgrade under way, or the one release on offer) restores the methods itself; by default pre then writes nothing and says \"not needed\"",
    ),
    (
        "LOG_FORMAT",
        "text",
        "text | json (json also makes `status` print JSON)",
    ),
    (
        "RUST_LOG",
        "info",
        "tracing filter, e.g. debug or workload_update_guard=debug",
    ),
    (
        "TERMINATION_MESSAGE_PATH",
        defaults::TERMINATION_MESSAGE_PATH,
        "where the one-line JSON summary goes; the default only if it exists (the kubelet makes it); empty: nowhere",
    ),
    (
        "KUBECONFIG",
        "~/.kube/config, else in-cluster",
        "kubeconfig for runs outside a pod",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// What to do. `keys.chart: None` (MANAGEDCHART_NAME empty) switches the ManagedChart
    /// steps off.
    pub intent: Intent,
    pub dry_run: bool,
    pub deadline: Duration,
    /// `post`'s bound on waiting for Harvester's upgrade cleanup (outside `deadline`).
    pub cleanup_wait: Duration,
    /// How long `pre` and `post` wait for Fleet to apply their ManagedChart change; zero: not at
    /// all. Apart from `deadline`, which bounds the requests.
    pub fleet_wait: Duration,
    pub log_format: LogFormat,
    pub termination_message: Option<TerminationMessage>,
    /// Skip a missing object with a warning instead of failing.
    pub allow_missing: bool,
    /// `pre` suspends even where Harvester's own handling of the coming release makes it
    /// unnecessary (`PRE_EVEN_IF_NOT_NEEDED`).
    pub even_if_not_needed: bool,
    /// `post` restores even while an upgrade is under way (`RESTORE_DURING_UPGRADE`).
    pub restore_during_upgrade: bool,
    /// The UpgradePlan that runs this `post` (`UPGRADE_PLAN`): not waited for.
    pub upgrade_plan: Option<String>,
    /// The armed `post` (`ARM`): its bound and its pace; `None`: not armed.
    pub arm: Option<Arm>,
    /// The resident guard (`PHASE=watch`): its pace and its probe files.
    pub watch: Option<Watch>,
    /// With `MANAGEDCHART_NAME` empty: the ManagedChart read read-only for what of ours an
    /// earlier `pre` left there (`MANAGEDCHART_NAMESPACE`, default `fleet-local`, and the
    /// default name `harvester`, the one a `pre` with the defaults writes).
    pub unnamed_chart: Option<ObjectKey>,
}

/// Where the summary goes. The default path is written only if it exists: outside a pod,
/// `/dev/termination-log` is not ours to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminationMessage {
    pub path: PathBuf,
    pub explicit: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A wait's bound in whole seconds, 0 (do not wait) to a day.
/// A seconds setting: a whole number from `min` (0: do not wait) to 86400, else `default`.
fn seconds(
    var: &str,
    raw: Option<String>,
    default: &str,
    min: u64,
) -> Result<Duration, ConfigError> {
    let value = raw.as_deref().unwrap_or(default);
    match value.parse::<u64>() {
        Ok(n) if (min..=86_400).contains(&n) => Ok(Duration::from_secs(n)),
        _ => Err(invalid(
            var,
            value,
            &if min == 0 {
                "a whole number of seconds from 0 (do not wait) to 86400".to_string()
            } else {
                format!("a whole number of seconds from {min} to 86400")
            },
        )),
    }
}

fn phase(raw: Option<&str>) -> Result<Phase, ConfigError> {
    match raw {
        Some("pre") => Ok(Phase::Pre),
        Some("post") => Ok(Phase::Post),
        Some("status") => Ok(Phase::Status),
        Some("watch") => Ok(Phase::Watch),
        None => Err(ConfigError(
            "PHASE is not set: expected pre, post, status or watch".into(),
        )),
        Some(other) => Err(invalid("PHASE", other, "pre, post, status or watch")),
    }
}

fn termination_message(raw: Option<&str>) -> Result<Option<TerminationMessage>, ConfigError> {
    match raw {
        None => Ok(Some(TerminationMessage {
            path: PathBuf::from(defaults::TERMINATION_MESSAGE_PATH),
            explicit: false,
        })),
        Some("") => Ok(None),
        Some(p) if p.starts_with('/') => Ok(Some(TerminationMessage {
            path: PathBuf::from(p),
            explicit: true,
        })),
        Some(p) => Err(invalid(
            "TERMINATION_MESSAGE_PATH",
            p,
            "an absolute path, or empty",
        )),
    }
}

fn invalid(var: &str, value: &str, accepted: &str) -> ConfigError {
    ConfigError(format!("{var}={value:?} is invalid: expected {accepted}"))
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let raw: Raw = envy::from_iter(vars).map_err(|e| ConfigError(e.to_string()))?;
        let phase = phase(raw.phase.as_deref())?;
        let watch = watch(phase, &raw)?;
        let kubevirt = ObjectKey {
            namespace: namespace(
                "KUBEVIRT_NAMESPACE",
                raw.kubevirt_namespace,
                defaults::KUBEVIRT_NAMESPACE,
            )?,
            name: name("KUBEVIRT_NAME", raw.kubevirt_name, defaults::KUBEVIRT_NAME)?,
        };
        let chart_namespace = namespace(
            "MANAGEDCHART_NAMESPACE",
            raw.managedchart_namespace,
            defaults::CHART_NAMESPACE,
        )?;
        let unnamed_chart = ObjectKey {
            namespace: chart_namespace.clone(),
            name: defaults::CHART_NAME.into(),
        };
        let chart = match raw.managedchart_name.as_deref() {
            Some("") => None,
            _ => Some(ObjectKey {
                namespace: chart_namespace,
                name: name(
                    "MANAGEDCHART_NAME",
                    raw.managedchart_name,
                    defaults::CHART_NAME,
                )?,
            }),
        };
        let named = chart.is_some();
        let unnamed_chart = (!named).then_some(unnamed_chart);
        let steps = Steps {
            kubevirt: boolean("STEP_KUBEVIRT", raw.step_kubevirt, true)?,
            compare: boolean("STEP_COMPARE_PATCHES", raw.step_compare_patches, true)? && named,
            values: boolean("STEP_CHART_VALUES", raw.step_chart_values, true)? && named,
        };
        let fallback = fallback(raw.fallback_methods)?;
        let allow_missing = boolean("ALLOW_MISSING", raw.allow_missing, false)?;
        let dry_run = boolean("DRY_RUN", raw.dry_run, false)?;
        let even_if_not_needed =
            boolean("PRE_EVEN_IF_NOT_NEEDED", raw.pre_even_if_not_needed, false)?;
        let restore_during_upgrade =
            boolean("RESTORE_DURING_UPGRADE", raw.restore_during_upgrade, false)?;
        let upgrade_plan = optional_name("UPGRADE_PLAN", raw.upgrade_plan)?;
        let arm = arm(phase, raw.arm, raw.arm_wait_seconds, raw.arm_poll_seconds)?;
        let deadline = seconds(
            "DEADLINE_SECONDS",
            raw.deadline_seconds,
            defaults::DEADLINE_SECONDS,
            1,
        )?;
        let cleanup_wait = seconds(
            "HARVESTER_CLEANUP_WAIT_SECONDS",
            raw.harvester_cleanup_wait_seconds,
            defaults::CLEANUP_WAIT_SECONDS,
            0,
        )?;
        let fleet_wait = seconds(
            "FLEET_WAIT_SECONDS",
            raw.fleet_wait_seconds,
            defaults::FLEET_WAIT_SECONDS,
            0,
        )?;
        let log_format = log_format(raw.log_format.as_deref())?;
        let termination_message = termination_message(raw.termination_message_path.as_deref())?;
        let config = Config {
            intent: Intent {
                phase,
                steps,
                keys: Keys { kubevirt, chart },
                fallback,
            },
            dry_run,
            deadline,
            cleanup_wait,
            fleet_wait,
            log_format,
            termination_message,
            allow_missing,
            even_if_not_needed,
            restore_during_upgrade,
            upgrade_plan,
            arm,
            watch,
            unnamed_chart,
        };
        if phase != Phase::Status && writes_nothing(&config.intent) {
            return Err(ConfigError(
                "nothing to do: STEP_KUBEVIRT is false and the ManagedChart steps are off \
                 (MANAGEDCHART_NAME empty, or STEP_COMPARE_PATCHES and STEP_CHART_VALUES false)"
                    .into(),
            ));
        }
        Ok(config)
    }
}

/// No object to write: every step off (`watch` writes what `post` writes).
fn writes_nothing(intent: &Intent) -> bool {
    let writes = Intent {
        phase: Phase::Post,
        ..intent.clone()
    };
    writes.targets().is_empty()
}

fn boolean(var: &str, value: Option<String>, default: bool) -> Result<bool, ConfigError> {
    match value.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => Ok(default),
        Some("true" | "1" | "yes") => Ok(true),
        Some("false" | "0" | "no") => Ok(false),
        Some(_) => Err(invalid(
            var,
            value.as_deref().unwrap_or_default(),
            "true or false (also 1/0, yes/no)",
        )),
    }
}

fn fallback(value: Option<String>) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let list: Vec<String> = v.split(',').map(|m| m.trim().to_string()).collect();
    let valid = list.iter().all(|m| m == "LiveMigrate" || m == "Evict");
    let unique = list.iter().enumerate().all(|(i, m)| !list[..i].contains(m));
    if valid && unique {
        Ok(Some(list))
    } else {
        Err(invalid(
            "FALLBACK_METHODS",
            &v,
            "a comma-separated list of distinct LiveMigrate and Evict, or empty",
        ))
    }
}

/// The `--help` text: the variables as a table whose columns fit the longest name and default.
pub fn help() -> String {
    let mut out = format!(
        "{}\
         Suspends KubeVirt automated workload updates before a Harvester upgrade (PHASE=pre),\n\
         restores exactly what was there after it (PHASE=post), or reports (PHASE=status).\n\n\
         Usage: workload-update-guard [status|pre|post]: a phase named here wins over PHASE=watch\n\
         (a run by hand in the resident guard's pod: kubectl exec ... -- workload-update-guard status)\n\
         and writes no termination message unless TERMINATION_MESSAGE_PATH is set.\n\n\
         Environment variables:\n",
        version()
    );
    let name_width = VARIABLES.iter().map(|(v, _, _)| v.len()).max().unwrap_or(0);
    let default_width = VARIABLES.iter().map(|(_, d, _)| d.len()).max().unwrap_or(0);
    let row = |var: &str, default: &str, meaning: &str| {
        format!("  {var:<name_width$}  {default:<default_width$}  {meaning}\n")
    };
    out.push_str(&row("VARIABLE", "DEFAULT", "MEANING"));
    for (var, default, meaning) in VARIABLES {
        out.push_str(&row(var, default, meaning));
    }
    out.push_str(
        "\nExit codes: 0 success (incl. already so); 2 bad configuration; 3 permanent refusal or\n\
         malformed object; 4 transient failures until the deadline; 5 interrupted (SIGTERM/SIGINT);\n\
         6 an object not found (see ALLOW_MISSING); 7 post: an upgrade still under way or its\n\
         cleanup pending at HARVESTER_CLEANUP_WAIT_SECONDS, nothing written; 8 written, but Fleet\n\
         did not apply the ManagedChart change (an error, or FLEET_WAIT_SECONDS passed); 9 ARM=true:\n\
         no upgrade began and ended within ARM_WAIT_SECONDS, nothing written, the suspension stays.\n",
    );
    out
}

fn log_format(v: Option<&str>) -> Result<LogFormat, ConfigError> {
    match v {
        None | Some("text") => Ok(LogFormat::Text),
        Some("json") => Ok(LogFormat::Json),
        Some(other) => Err(invalid("LOG_FORMAT", other, "text or json")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn the_resident_guards_settings() {
        let c = cfg(&[("PHASE", "watch")]).unwrap();
        assert_eq!(c.intent.phase, Phase::Watch);
        let w = c.watch.expect("watch settings");
        assert_eq!(
            (w.resync, w.state_dir),
            (Duration::from_secs(300), PathBuf::from("/tmp"))
        );
        assert_eq!(
            w.resync * 2 + Duration::from_secs(60),
            Watch {
                resync: Duration::from_secs(300),
                state_dir: "/tmp".into(),
                metrics_port: None,
                admission_hold: false,
            }
            .ready_within()
        );
        // The metrics on 9090 by default, 0 turns them off; no hold unless the chart says so.
        assert_eq!((w.metrics_port, w.admission_hold), (Some(9090), false));
        let w = cfg(&[
            ("PHASE", "watch"),
            ("METRICS_PORT", "0"),
            ("ADMISSION_HOLD", "true"),
        ])
        .unwrap()
        .watch
        .unwrap();
        assert_eq!((w.metrics_port, w.admission_hold), (None, true));
        assert_eq!(cfg(&[("PHASE", "post")]).unwrap().watch, None);
        for (var, bad) in [
            ("WATCH_RESYNC_SECONDS", "29"),
            ("WATCH_RESYNC_SECONDS", "3601"),
            ("WATCH_RESYNC_SECONDS", "5m"),
            ("WATCH_STATE_DIR", "tmp"),
            ("METRICS_PORT", "65536"),
            ("METRICS_PORT", "-1"),
            ("METRICS_PORT", "http"),
            ("ADMISSION_HOLD", "maybe"),
        ] {
            let e = cfg(&[("PHASE", "watch"), (var, bad)]).unwrap_err();
            assert!(e.0.starts_with(var) && !e.0.contains('\n'), "{e}");
        }
        // Every step off: nothing for the guard to write either.
        let e = cfg(&[
            ("PHASE", "watch"),
            ("STEP_KUBEVIRT", "false"),
            ("MANAGEDCHART_NAME", ""),
        ]);
        assert!(e.unwrap_err().0.contains("nothing to do"));
    }

    #[test]
    fn the_armed_post_and_the_order_settings() {
        let c = cfg(&[("PHASE", "post")]).unwrap();
        assert_eq!(
            (c.arm, c.restore_during_upgrade, c.upgrade_plan),
            (None, false, None)
        );
        let c = cfg(&[("PHASE", "post"), ("ARM", "true")]).unwrap();
        assert_eq!(
            c.arm,
            Some(Arm {
                wait: Duration::from_secs(604_800),
                every: Duration::from_secs(30)
            })
        );
        let e = cfg(&[("PHASE", "pre"), ("ARM", "true")]).unwrap_err();
        assert!(e.0.contains("PHASE=post"), "{e}");
        for (var, bad) in [("ARM_WAIT_SECONDS", "0"), ("ARM_POLL_SECONDS", "31")] {
            let e = cfg(&[("PHASE", "post"), ("ARM", "true"), (var, bad)]).unwrap_err();
            assert!(e.0.starts_with(var), "{e}");
        }
        let c = cfg(&[
            ("PHASE", "post"),
            ("RESTORE_DURING_UPGRADE", "true"),
            ("UPGRADE_PLAN", "hvst-upgrade-x"),
        ])
        .unwrap();
        assert!(c.restore_during_upgrade);
        assert_eq!(c.upgrade_plan.as_deref(), Some("hvst-upgrade-x"));
        assert!(cfg(&[("PHASE", "post"), ("UPGRADE_PLAN", "Bad_Name")]).is_err());
        assert_eq!(
            cfg(&[("PHASE", "post"), ("UPGRADE_PLAN", "")])
                .unwrap()
                .upgrade_plan,
            None
        );
    }

    #[test]
    fn defaults_are_harvester_ones() {
        let c = cfg(&[("PHASE", "pre")]).unwrap();
        let i = &c.intent;
        assert_eq!(
            i.keys.kubevirt,
            ObjectKey {
                namespace: "harvester-system".into(),
                name: "kubevirt".into()
            }
        );
        assert_eq!(
            i.keys.chart,
            Some(ObjectKey {
                namespace: "fleet-local".into(),
                name: "harvester".into()
            })
        );
        assert_eq!((i.steps, c.dry_run), (Steps::ALL, false));
        assert_eq!((&i.fallback, c.deadline), (&None, Duration::from_secs(300)));
        assert_eq!(c.fleet_wait, Duration::from_secs(600));
        assert_eq!(
            c.termination_message,
            Some(TerminationMessage {
                path: PathBuf::from("/dev/termination-log"),
                explicit: false
            })
        );
        assert!(!c.allow_missing);
    }

    #[test]
    fn empty_chart_name_switches_chart_steps_off() {
        let c = cfg(&[
            ("PHASE", "post"),
            ("MANAGEDCHART_NAME", ""),
            ("FALLBACK_METHODS", "LiveMigrate, Evict"),
        ])
        .unwrap();
        assert!(!c.intent.steps.writes(crate::model::Kind::ManagedChart));
        assert_eq!(
            c.intent.fallback,
            Some(vec!["LiveMigrate".into(), "Evict".into()])
        );
        // What an earlier pre may have left is looked for under the default name, in the
        // configured namespace; with a name there is no such read.
        let key = |ns: &str| ObjectKey {
            namespace: ns.into(),
            name: "harvester".into(),
        };
        assert_eq!(c.unnamed_chart, Some(key("fleet-local")));
        let c = cfg(&[
            ("PHASE", "post"),
            ("MANAGEDCHART_NAME", ""),
            ("MANAGEDCHART_NAMESPACE", "mine"),
        ])
        .unwrap();
        assert_eq!(c.unnamed_chart, Some(key("mine")));
        assert_eq!(cfg(&[("PHASE", "post")]).unwrap().unnamed_chart, None);
    }

    #[test]
    fn every_invalid_value_is_one_line_naming_the_variable() {
        // One bad variable (with PHASE=pre unless PHASE is the bad one); the error names it.
        let bad: &[(&str, &str)] = &[
            ("PHASE", "pre-upgrade"),
            ("PHASE", ""),
            ("KUBEVIRT_NAMESPACE", "Harvester_System"),
            ("KUBEVIRT_NAMESPACE", ""),
            ("KUBEVIRT_NAME", ""),
            ("KUBEVIRT_NAME", "kube virt"),
            ("MANAGEDCHART_NAMESPACE", "-x"),
            ("MANAGEDCHART_NAME", "Harvester"),
            ("STEP_KUBEVIRT", "maybe"),
            ("STEP_COMPARE_PATCHES", ""),
            ("STEP_CHART_VALUES", "2"),
            ("FALLBACK_METHODS", "LiveMigrate,Bogus"),
            ("FALLBACK_METHODS", "LiveMigrate,LiveMigrate"),
            ("FALLBACK_METHODS", "LiveMigrate,"),
            ("DRY_RUN", "yes please"),
            ("ALLOW_MISSING", "sometimes"),
            ("DEADLINE_SECONDS", "0"),
            ("DEADLINE_SECONDS", "5m"),
            ("DEADLINE_SECONDS", "86401"),
            ("HARVESTER_CLEANUP_WAIT_SECONDS", "-1"),
            ("HARVESTER_CLEANUP_WAIT_SECONDS", "15m"),
            ("HARVESTER_CLEANUP_WAIT_SECONDS", "86401"),
            ("FLEET_WAIT_SECONDS", "-1"),
            ("FLEET_WAIT_SECONDS", "10s"),
            ("FLEET_WAIT_SECONDS", "86401"),
            ("FLEET_WAIT_SECONDS", ""),
            ("LOG_FORMAT", "yaml"),
            ("TERMINATION_MESSAGE_PATH", "relative/path"),
        ];
        let mut cases: Vec<(Vec<(&str, &str)>, &str)> = bad
            .iter()
            .map(|&(var, value)| {
                let phase = (var != "PHASE").then_some(("PHASE", "pre"));
                (phase.into_iter().chain([(var, value)]).collect(), var)
            })
            .collect();
        cases.push((vec![], "PHASE"));
        cases.push((
            vec![
                ("PHASE", "pre"),
                ("STEP_KUBEVIRT", "false"),
                ("MANAGEDCHART_NAME", ""),
            ],
            "nothing to do",
        ));
        for (vars, want) in cases {
            let err = cfg(&vars).unwrap_err().to_string();
            assert!(err.contains(want), "{vars:?}: {err}");
            assert!(!err.contains('\n'), "{vars:?}: one line: {err}");
        }
    }

    #[test]
    fn valid_values_are_taken_as_given() {
        for (secs, want) in [("1", 1), ("600", 600), ("86400", 86_400)] {
            let c = cfg(&[("PHASE", "post"), ("DEADLINE_SECONDS", secs)]).unwrap();
            assert_eq!(c.deadline, Duration::from_secs(want));
        }
        for (secs, want) in [("0", 0), ("5", 5), ("86400", 86_400)] {
            let c = cfg(&[("PHASE", "pre"), ("FLEET_WAIT_SECONDS", secs)]).unwrap();
            assert_eq!(c.fleet_wait, Duration::from_secs(want));
        }
        let c = cfg(&[
            ("PHASE", "status"),
            ("TERMINATION_MESSAGE_PATH", "/tmp/summary"),
            ("ALLOW_MISSING", "YES"),
            ("DRY_RUN", "1"),
            ("LOG_FORMAT", "json"),
        ])
        .unwrap();
        assert_eq!(
            c.termination_message,
            Some(TerminationMessage {
                path: PathBuf::from("/tmp/summary"),
                explicit: true
            })
        );
        assert!(c.allow_missing && c.dry_run);
        assert_eq!(c.log_format, LogFormat::Json);
        let c = cfg(&[("PHASE", "pre"), ("TERMINATION_MESSAGE_PATH", "")]).unwrap();
        assert_eq!(c.termination_message, None);
        // Only the chart's values step on: the chart is still written.
        let c = cfg(&[
            ("PHASE", "pre"),
            ("STEP_KUBEVIRT", "false"),
            ("STEP_COMPARE_PATCHES", "no"),
        ])
        .unwrap();
        assert_eq!(
            c.intent.steps,
            Steps {
                kubevirt: false,
                values: true,
                compare: false
            }
        );
        assert!(c.intent.steps.writes(crate::model::Kind::ManagedChart));
    }

    #[test]
    fn phases_and_log_formats_are_taken_as_given() {
        let c = cfg(&[
            ("PHASE", "post"),
            ("TERMINATION_MESSAGE_PATH", "/tmp/summary"),
            ("LOG_FORMAT", "json"),
        ])
        .unwrap();
        assert_eq!(c.intent.phase, Phase::Post);
        assert_eq!(
            c.termination_message.map(|t| t.path),
            Some(PathBuf::from("/tmp/summary"))
        );
        assert_eq!(c.log_format, LogFormat::Json);
        let c = cfg(&[
            ("PHASE", "status"),
            ("TERMINATION_MESSAGE_PATH", ""),
            ("LOG_FORMAT", "text"),
        ])
        .unwrap();
        assert_eq!(c.intent.phase, Phase::Status);
        assert_eq!(c.termination_message, None);
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(
            cfg(&[("PHASE", "pre")]).unwrap().log_format,
            LogFormat::Text
        );
    }

    #[test]
    fn booleans_take_three_spellings_in_any_case() {
        for (value, want) in [
            ("true", true),
            ("1", true),
            ("yes", true),
            ("TRUE", true),
            ("Yes", true),
            ("false", false),
            ("0", false),
            ("no", false),
            ("FALSE", false),
        ] {
            let c = cfg(&[("PHASE", "pre"), ("DRY_RUN", value)]).unwrap();
            assert_eq!(c.dry_run, want, "{value}");
        }
        let c = cfg(&[("PHASE", "pre"), ("DRY_RUN", "true")]).unwrap();
        assert!(c.dry_run);
    }

    #[test]
    fn each_step_switch_turns_off_its_step_only() {
        let steps = |vars: &[(&str, &str)]| {
            let mut all = vec![("PHASE", "pre")];
            all.extend_from_slice(vars);
            cfg(&all).unwrap().intent.steps
        };
        let only = |kubevirt, compare, values| Steps {
            kubevirt,
            compare,
            values,
        };
        assert_eq!(
            steps(&[("STEP_KUBEVIRT", "false")]),
            only(false, true, true)
        );
        assert_eq!(
            steps(&[("STEP_COMPARE_PATCHES", "false")]),
            only(true, false, true)
        );
        assert_eq!(
            steps(&[("STEP_CHART_VALUES", "false")]),
            only(true, true, false)
        );
        assert_eq!(
            steps(&[("STEP_KUBEVIRT", "yes"), ("STEP_CHART_VALUES", "1")]),
            Steps::ALL
        );
        // Without a ManagedChart, only the KubeVirt step is left, whatever the switches say.
        assert_eq!(
            steps(&[
                ("MANAGEDCHART_NAME", ""),
                ("STEP_COMPARE_PATCHES", "true"),
                ("STEP_CHART_VALUES", "true"),
            ]),
            only(true, false, false)
        );
    }

    #[test]
    fn names_and_namespaces_are_taken_as_given_when_valid() {
        let long_label = "a".repeat(63);
        // 253 characters: three labels of 63 and one of 61, joined by dots.
        let longest_name = format!("{long_label}.{long_label}.{long_label}.{}", "b".repeat(61));
        assert_eq!(longest_name.len(), 253);
        let c = cfg(&[
            ("PHASE", "pre"),
            ("KUBEVIRT_NAMESPACE", &long_label),
            ("KUBEVIRT_NAME", &longest_name),
            ("MANAGEDCHART_NAMESPACE", "ns-1"),
            ("MANAGEDCHART_NAME", "my.chart-2"),
        ])
        .unwrap();
        assert_eq!(
            c.intent.keys,
            Keys {
                kubevirt: ObjectKey {
                    namespace: long_label.clone(),
                    name: longest_name.clone(),
                },
                chart: Some(ObjectKey {
                    namespace: "ns-1".into(),
                    name: "my.chart-2".into(),
                }),
            }
        );
        let too_long_label = "a".repeat(64);
        let too_long_name = format!("{longest_name}a");
        for (var, value) in [
            ("KUBEVIRT_NAMESPACE", too_long_label.as_str()),
            ("KUBEVIRT_NAMESPACE", "x-"),
            ("KUBEVIRT_NAMESPACE", "a.b"),
            ("KUBEVIRT_NAME", too_long_name.as_str()),
            ("KUBEVIRT_NAME", "a..b"),
            ("KUBEVIRT_NAME", "a-.b"),
        ] {
            let err = cfg(&[("PHASE", "pre"), (var, value)]).unwrap_err();
            assert!(
                err.0.starts_with(&format!("{var}=")),
                "{var}={value}: {err}"
            );
        }
    }

    #[test]
    fn a_blank_fallback_is_none_and_either_order_is_kept() {
        let fallback = |v: &str| {
            cfg(&[("PHASE", "post"), ("FALLBACK_METHODS", v)])
                .unwrap()
                .intent
                .fallback
        };
        assert_eq!(fallback(""), None);
        assert_eq!(fallback("  "), None);
        assert_eq!(fallback("Evict"), Some(vec!["Evict".to_string()]));
        assert_eq!(
            fallback(" Evict ,LiveMigrate"),
            Some(vec!["Evict".to_string(), "LiveMigrate".to_string()])
        );
        assert!(cfg(&[("PHASE", "post"), ("FALLBACK_METHODS", "Evict,Evict")]).is_err());
    }

    #[test]
    fn status_needs_no_step() {
        let c = cfg(&[
            ("PHASE", "status"),
            ("STEP_KUBEVIRT", "false"),
            ("MANAGEDCHART_NAME", ""),
        ])
        .unwrap();
        assert_eq!(c.intent.phase, Phase::Status);
        // With the ManagedChart steps still on, `pre` has something to do.
        let c = cfg(&[("PHASE", "pre"), ("STEP_KUBEVIRT", "false")]).unwrap();
        assert!(!c.intent.steps.kubevirt);
    }

    #[test]
    fn help_lists_every_variable() {
        let h = help();
        for (var, _, _) in VARIABLES {
            assert!(h.contains(var), "{var}");
        }
    }

    /// Every row of the table (the header included) starts its default and its meaning in the
    /// same columns, whatever the length of a name or a default.
    #[test]
    fn help_table_keeps_its_columns() {
        let h = help();
        let rows: Vec<&str> = h
            .lines()
            .skip_while(|l| !l.starts_with("  VARIABLE "))
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(rows.len(), VARIABLES.len() + 1, "{h}");
        let default_col = rows[0].find("DEFAULT").unwrap();
        let meaning_col = rows[0].find("MEANING").unwrap();
        for (row, (var, default, meaning)) in rows[1..].iter().zip(VARIABLES) {
            assert!(row.starts_with(&format!("  {var} ")), "{row}");
            assert_eq!(
                &row[default_col..default_col + default.len()],
                *default,
                "{row}"
            );
            assert_eq!(&row[meaning_col..], *meaning, "{row}");
            assert_eq!(row.as_bytes()[default_col - 1], b' ', "{row}");
            assert_eq!(row.as_bytes()[meaning_col - 1], b' ', "{row}");
        }
    }

    /// PHASE says it is required, in words; no row says "default" in its default column.
    #[test]
    fn help_says_phase_is_required() {
        let h = help();
        let phase = h.lines().find(|l| l.starts_with("  PHASE ")).unwrap();
        assert!(phase.contains(" required "), "{phase}");
        assert!(!h.contains("default (required)"), "{h}");
        assert!(!h.contains("(required)"), "{h}");
    }

    /// FALLBACK_METHODS applies only to our own `[]`: `--help` says so, as docs/configuration.md does.
    #[test]
    fn help_says_the_fallback_is_for_our_own_empty_list_only() {
        let (_, _, meaning) = VARIABLES
            .iter()
            .find(|(v, _, _)| *v == "FALLBACK_METHODS")
            .unwrap();
        assert!(meaning.contains("our own []"), "{meaning}");
        assert!(meaning.contains("without any record"), "{meaning}");
    }

    /// `--version` names the version and the commit (hex from git, or `unknown` outside a git
    /// checkout without WORKLOAD_UPDATE_GUARD_COMMIT); `--help` starts with the same line.
    #[test]
    fn version_names_the_commit() {
        let v = version();
        assert_eq!(
            v,
            format!(
                "workload-update-guard {} (commit {COMMIT})\n",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert!(
            !COMMIT.is_empty() && !COMMIT.contains(char::is_whitespace),
            "{COMMIT}"
        );
        assert!(help().starts_with(&v));
    }
}
