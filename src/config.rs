//! Configuration from environment variables, parsed by envy, checked before anything is sent.

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::model::ObjectKey;
use crate::vocabulary::{Intent, Keys, Phase, Steps};

mod values;
use values::{AbsolutePath, Flag, Methods, Name, Namespace, Port, Seconds, empty_is_none};

/// `--help`'s text after the version line, with the variables table (its comment says how).
const HELP: &str = include_str!("config/help.txt");

pub fn help() -> String {
    let text = HELP.lines().filter(|l| !l.starts_with('#'));
    crate::build::version() + &text.map(|l| format!("{l}\n")).collect::<String>()
}

/// A row a variable: name, default, meaning.
pub fn variables() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    let mut rows = HELP.lines().skip_while(|l| !l.starts_with("  VARIABLE "));
    let header = rows.next().expect("the variables table");
    let column = |word| header.find(word).expect("the header names its columns");
    let d = column("DEFAULT");
    let m = column("MEANING");
    let rows = rows.take_while(|row| !row.is_empty());
    rows.map(move |r| (r[..d].trim(), r[d..m].trim(), &r[m..]))
}

/// The value a variable takes when unset (`None`: `required`, it must be set; `empty`: "").
pub fn unset_value(name: &str) -> Option<&'static str> {
    match variables().find(|v| v.0 == name).expect("a variable").1 {
        "required" => None,
        "empty" => Some(""),
        value => Some(value),
    }
}

/// The resident guard: how often its loop touches `alive` (no request), and how old it may be.
pub const ALIVE_EVERY: Duration = Duration::from_secs(30);
pub const ALIVE_WITHIN: Duration = Duration::from_secs(90);

/// The environment, typed: a field a variable (envy's lower-case name), checked in any phase.
#[derive(Deserialize)]
struct Env {
    phase: Option<Phase>,
    kubevirt_namespace: Namespace,
    kubevirt_name: Name,
    managedchart_namespace: Namespace,
    #[serde(deserialize_with = "empty_is_none")]
    managedchart_name: Option<Name>,
    step_kubevirt: Flag,
    step_compare_patches: Flag,
    step_chart_values: Flag,
    fallback_methods: Methods,
    allow_missing: Flag,
    dry_run: Flag,
    deadline_seconds: Seconds<1, 86_400>,
    fleet_wait_seconds: Seconds<0, 86_400>,
    harvester_cleanup_wait_seconds: Seconds<0, 86_400>,
    restore_during_upgrade: Flag,
    arm: Flag,
    arm_wait_seconds: Seconds<1, 2_592_000>,
    arm_poll_seconds: Seconds<1, 30>,
    watch_resync_seconds: Seconds<30, 3_600>,
    watch_state_dir: AbsolutePath,
    metrics_port: Port,
    admission_hold: Flag,
    #[serde(deserialize_with = "empty_is_none")]
    chart_version: Option<String>,
    #[serde(deserialize_with = "empty_is_none")]
    upgrade_plan: Option<Name>,
    pre_even_if_not_needed: Flag,
    log_format: LogFormat,
    #[serde(deserialize_with = "empty_is_none")]
    termination_message_path: Option<AbsolutePath>,
}

/// A value refused is said with its variable and what that accepts.
fn read_env(given: &[(String, String)]) -> Result<Env, ConfigError> {
    let set = |name: &str| given.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let unset = variables().filter(|(name, ..)| !set(name));
    let defaults = unset.filter_map(|(name, ..)| Some((name.into(), unset_value(name)?.into())));
    // envy reads each value as it takes its pair: the last pair taken is the value refused.
    let last = RefCell::default();
    let vars = given.iter().cloned().chain(defaults);
    envy::from_iter(vars.inspect(|pair| *last.borrow_mut() = pair.clone())).map_err(|e| {
        let (var, value): (String, String) = last.take();
        // serde's words for an enum: "unknown variant `x`, expected one of `a`, `b`".
        let why = e.to_string().replace('`', "");
        let accepted = why.rsplit("expected ").next().unwrap_or_default();
        ConfigError(format!("{var}={value:?} is invalid: expected {accepted}"))
    })
}

/// The phase: `PHASE`'s, or the one named on the command line (`argument`: a run by hand),
/// which wins over the resident guard's own `PHASE=watch` (the environment a `kubectl exec`
/// into its pod inherits); another `PHASE` is a mistake, said rather than guessed.
fn phase(argument: Option<Phase>, var: Option<Phase>) -> Result<Phase, ConfigError> {
    match (argument, var) {
        (None, None) => Err(ConfigError(
            "PHASE is not set: expected one of pre, post, status, watch".into(),
        )),
        (Some(arg), Some(var)) if var != arg && var != Phase::Watch => Err(ConfigError(format!(
            "PHASE=\"{var}\" and the argument {arg} disagree: give one of them"
        ))),
        (Some(phase), _) | (None, Some(phase)) => Ok(phase),
    }
}

impl Env {
    fn intent(&self, phase: Phase) -> Result<Intent, ConfigError> {
        let chart = (self.managedchart_name.as_ref()).map(|n| self.chart_key(&n.0));
        let steps = Steps {
            kubevirt: self.step_kubevirt.0,
            compare: self.step_compare_patches.0 && chart.is_some(),
            values: self.step_chart_values.0 && chart.is_some(),
        };
        if phase != Phase::Status && !(steps.kubevirt || steps.compare || steps.values) {
            return Err(ConfigError(
                "nothing to do: STEP_KUBEVIRT is false and the ManagedChart steps are off \
                 (MANAGEDCHART_NAME empty, or STEP_COMPARE_PATCHES and STEP_CHART_VALUES false)"
                    .into(),
            ));
        }
        let kubevirt = ObjectKey {
            namespace: self.kubevirt_namespace.0.clone(),
            name: self.kubevirt_name.0.clone(),
        };
        Ok(Intent {
            phase,
            steps,
            keys: Keys { kubevirt, chart },
            fallback: self.fallback_methods.0.clone(),
        })
    }

    fn chart_key(&self, name: &str) -> ObjectKey {
        let namespace = self.managedchart_namespace.0.clone();
        let name = name.into();
        ObjectKey { namespace, name }
    }

    fn watch(&self) -> Watch {
        Watch {
            resync: self.watch_resync_seconds.0,
            state_dir: self.watch_state_dir.0.clone(),
            metrics_port: self.metrics_port.0,
            admission_hold: self.admission_hold.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// What to do; `keys.chart: None` (`MANAGEDCHART_NAME` empty): no ManagedChart step.
    pub intent: Intent,
    pub dry_run: bool,
    pub deadline: Duration,
    /// `post`'s bound on waiting for Harvester's upgrade cleanup (outside `deadline`).
    pub cleanup_wait: Duration,
    /// How long `pre` and `post` wait for Fleet to apply their ManagedChart change (0: not at all).
    pub fleet_wait: Duration,
    pub log_format: LogFormat,
    pub termination_message: Option<TerminationMessage>,
    pub allow_missing: bool,
    pub even_if_not_needed: bool,
    pub restore_during_upgrade: bool,
    /// The UpgradePlan that runs this `post` (`UPGRADE_PLAN`): not waited for.
    pub upgrade_plan: Option<String>,
    pub chart_version: Option<String>,
    pub arm: Option<Arm>,
    pub watch: Option<Watch>,
    /// With `MANAGEDCHART_NAME` empty: the default one, read for what an earlier `pre` left there.
    pub unnamed_chart: Option<ObjectKey>,
}

/// Where the summary goes. The default path is written only if it exists: outside a pod,
/// `/dev/termination-log` is not ours to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminationMessage {
    pub path: PathBuf,
    pub explicit: bool,
}

/// The armed `post`'s bound (`ARM_WAIT_SECONDS`) and time between reads (`ARM_POLL_SECONDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm {
    pub wait: Duration,
    pub every: Duration,
}

/// The resident guard's settings (`PHASE=watch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub resync: Duration,
    pub state_dir: PathBuf,
    pub metrics_port: Option<u16>,
    pub admission_hold: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Config {
    /// `argument`: the phase named on the command line, if any (see `phase`). A run by hand
    /// writes no termination message unless `TERMINATION_MESSAGE_PATH` is set, and reports in
    /// text whatever the guard's pod's `LOG_FORMAT` (the chart's `json`, for its log collector).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
        argument: Option<Phase>,
    ) -> Result<Config, ConfigError> {
        let given: Vec<(String, String)> = vars.into_iter().collect();
        let path_set = given.iter().any(|(k, _)| k == "TERMINATION_MESSAGE_PATH");
        let env = read_env(&given)?;
        let phase = phase(argument, env.phase)?;
        if env.arm.0 && phase != Phase::Post {
            return Err(ConfigError(format!(
                "ARM=true is for PHASE=post (the armed post), not PHASE={phase}"
            )));
        }
        let intent = env.intent(phase)?;
        Ok(Config {
            dry_run: env.dry_run.0,
            deadline: env.deadline_seconds.0,
            cleanup_wait: env.harvester_cleanup_wait_seconds.0,
            fleet_wait: env.fleet_wait_seconds.0,
            log_format: match argument.is_some() && env.phase == Some(Phase::Watch) {
                true => LogFormat::Text,
                false => env.log_format,
            },
            termination_message: (env.termination_message_path.clone())
                .filter(|_| argument.is_none() || path_set)
                .map(|p| TerminationMessage {
                    path: p.0,
                    explicit: path_set,
                }),
            allow_missing: env.allow_missing.0,
            even_if_not_needed: env.pre_even_if_not_needed.0,
            restore_during_upgrade: env.restore_during_upgrade.0,
            upgrade_plan: env.upgrade_plan.clone().map(|n| n.0),
            chart_version: env.chart_version.clone(),
            arm: env.arm.0.then_some(Arm {
                wait: env.arm_wait_seconds.0,
                every: env.arm_poll_seconds.0,
            }),
            watch: (phase == Phase::Watch).then(|| env.watch()),
            unnamed_chart: unset_value("MANAGEDCHART_NAME")
                .filter(|_| intent.keys.chart.is_none())
                .map(|name| env.chart_key(name)),
            intent,
        })
    }
}

/// `--probe`'s settings: `WATCH_RESYNC_SECONDS` and `WATCH_STATE_DIR`, from the environment
/// (the Deployment's, which the kubelet's exec probe inherits, and which the guard has read).
pub fn probe_settings() -> Result<Watch, ConfigError> {
    read_env(&std::env::vars().collect::<Vec<_>>()).map(|env| env.watch())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            None,
        )
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
        let summary = Some(PathBuf::from("/tmp/summary"));
        for (phase, path, format, expected) in [
            (
                "post",
                "/tmp/summary",
                "json",
                (Phase::Post, summary, LogFormat::Json),
            ),
            ("status", "", "text", (Phase::Status, None, LogFormat::Text)),
        ] {
            let vars = [
                ("PHASE", phase),
                ("TERMINATION_MESSAGE_PATH", path),
                ("LOG_FORMAT", format),
            ];
            let c = cfg(&vars).unwrap();
            let got = (
                c.intent.phase,
                c.termination_message.map(|t| t.path),
                c.log_format,
            );
            assert_eq!(got, expected, "{phase}");
        }
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
        for (var, _, _) in variables() {
            assert!(h.contains(&format!("\n  {var} ")), "{var}");
        }
        assert_eq!(variables().count(), 29);
    }

    /// Every row of the table (the header included) starts its default and its meaning in the
    /// same columns, names a variable and gives a default: `variables` reads it by the header's
    /// columns.
    #[test]
    fn help_table_keeps_its_columns() {
        let h = help();
        let rows: Vec<&str> = h
            .lines()
            .skip_while(|l| !l.starts_with("  VARIABLE "))
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(rows.len(), variables().count() + 1, "{h}");
        let default_col = rows[0].find("DEFAULT").unwrap();
        let meaning_col = rows[0].find("MEANING").unwrap();
        for (row, (var, default, meaning)) in rows[1..].iter().zip(variables()) {
            assert!(row.starts_with(&format!("  {var} ")), "{row}");
            assert!(
                var.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
                "{row}"
            );
            assert!(!default.is_empty() && !meaning.is_empty(), "{row}");
            assert_eq!(&row[default_col..default_col + default.len()], default);
            assert_eq!(&row[meaning_col..], meaning, "{row}");
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
        assert_eq!(unset_value("PHASE"), None);
        assert_eq!(unset_value("UPGRADE_PLAN"), Some(""));
        assert_eq!(unset_value("DEADLINE_SECONDS"), Some("300"));
    }

    /// FALLBACK_METHODS applies only to our own `[]`: `--help` says so, as docs/configuration.md does.
    #[test]
    fn help_says_the_fallback_is_for_our_own_empty_list_only() {
        let (_, _, meaning) = variables()
            .find(|(v, _, _)| *v == "FALLBACK_METHODS")
            .unwrap();
        assert!(meaning.contains("our own []"), "{meaning}");
        assert!(meaning.contains("without any record"), "{meaning}");
    }

    /// Each `*_SECONDS` variable's meaning gives the range its type accepts (declared once, with
    /// its field), and the type says it when it refuses a value.
    #[test]
    fn help_gives_each_seconds_range_as_its_type_checks_it() {
        for (var, _, meaning) in variables().filter(|(v, ..)| v.ends_with("_SECONDS")) {
            let e = cfg(&[("PHASE", "post"), (var, "x")]).unwrap_err().0;
            let numbers: Vec<&str> = e
                .split(|c: char| !c.is_ascii_digit())
                .filter(|n| !n.is_empty())
                .collect();
            let [min, max] = numbers[..] else {
                panic!("{e}")
            };
            assert!(
                meaning.contains(&format!("({min}..={max}")),
                "{var}: {meaning}; {e}"
            );
        }
    }

    /// The objects a run with nothing set works on are the table's defaults, as the code
    /// reads them (not as a test names them): the KubeVirt CR and the ManagedChart the steps
    /// write, and, with `MANAGEDCHART_NAME` empty, the ManagedChart read for what an earlier
    /// `pre` left there.
    #[test]
    fn the_tables_defaults_are_the_codes() {
        let default = |namespace, name| ObjectKey {
            namespace: unset_value(namespace).expect("a default").into(),
            name: unset_value(name).expect("a default").into(),
        };
        let chart = default("MANAGEDCHART_NAMESPACE", "MANAGEDCHART_NAME");
        let nothing_set = Config::from_vars(Vec::new(), Some(Phase::Pre)).unwrap();
        let keys = nothing_set.intent.keys;
        assert_eq!(keys.chart, Some(chart.clone()), "the ManagedChart written");
        let kubevirt = default("KUBEVIRT_NAMESPACE", "KUBEVIRT_NAME");
        assert_eq!(keys.kubevirt, kubevirt, "the KubeVirt CR written");
        let unnamed = Config::from_vars(vars(&[("MANAGEDCHART_NAME", "")]), Some(Phase::Post));
        let read = unnamed.unwrap().unnamed_chart;
        assert_eq!(read, Some(chart), "the ManagedChart read, with no name set");
    }

    #[test]
    fn help_starts_with_the_version_line() {
        assert!(help().starts_with(&crate::build::version()));
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The resident guard's pod: `status` by hand reads as `PHASE=status` does, without the
    /// watch's settings and without the container's termination message.
    #[test]
    fn status_by_hand_in_the_resident_guards_pod() {
        let pod = vars(&[
            ("PHASE", "watch"),
            ("WATCH_STATE_DIR", "/tmp"),
            ("WATCH_RESYNC_SECONDS", "300"),
            ("LOG_FORMAT", "json"),
        ]);
        let c = Config::from_vars(pod.clone(), Some(Phase::Status)).unwrap();
        assert_eq!(c.intent.phase, Phase::Status);
        assert_eq!(
            c.log_format,
            crate::config::LogFormat::Text,
            "the report, read by a person"
        );
        assert_eq!(c.watch, None);
        assert_eq!(c.termination_message, None);
        let mut job = c.clone();
        job.termination_message = Config::from_vars(vars(&[("PHASE", "status")]), None)
            .unwrap()
            .termination_message;
        assert_eq!(
            Config::from_vars(
                vars(&[
                    ("PHASE", "status"),
                    ("WATCH_STATE_DIR", "/tmp"),
                    ("WATCH_RESYNC_SECONDS", "300")
                ]),
                None
            )
            .unwrap(),
            job
        );
        let guard = Config::from_vars(pod, None).unwrap();
        assert_eq!(guard.intent.phase, Phase::Watch);
        assert_eq!(guard.log_format, crate::config::LogFormat::Json);
        assert!(guard.termination_message.is_some());
        let explicit = vars(&[("PHASE", "watch"), ("TERMINATION_MESSAGE_PATH", "/x/log")]);
        let c = Config::from_vars(explicit, Some(Phase::Post)).unwrap();
        assert_eq!(
            c.termination_message.unwrap().path,
            std::path::PathBuf::from("/x/log")
        );
        let e = Config::from_vars(vars(&[("PHASE", "pre")]), Some(Phase::Status));
        assert!(e.unwrap_err().0.contains("disagree"));
    }

    #[test]
    fn the_argument_wins_over_the_resident_guards_own_phase_only() {
        use Phase::*;
        assert_eq!(phase(None, Some(Pre)), Ok(Pre));
        assert!(
            phase(None, None)
                .unwrap_err()
                .0
                .starts_with("PHASE is not set")
        );
        let status = Some(Status);
        for var in [Some(Watch), None, Some(Status)] {
            assert_eq!(phase(status, var), Ok(Status));
        }
        for other in [Pre, Post] {
            let e = phase(status, Some(other)).unwrap_err().0;
            assert!(e.contains("disagree"), "{e}");
        }
        // A PHASE that is no phase is said as such, whatever the argument.
        let e = Config::from_vars(vars(&[("PHASE", "bogus")]), status)
            .unwrap_err()
            .0;
        assert!(e.starts_with("PHASE=\"bogus\" is invalid"), "{e}");
    }
}
