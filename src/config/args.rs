//! The command line: `--help`, `--version`, `--probe live|ready`, or one phase as a word
//! (`status`, `pre`, `post`). The word is for a run by hand in the resident guard's own pod
//! (`kubectl exec deploy/... -- workload-update-guard status`), whose environment says
//! `PHASE=watch`: the word wins over that, and such a run is not the container's own process, so
//! it leaves the container's termination message alone.

use super::{Config, ConfigError, phase};
use crate::vocabulary::Phase;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Version,
    /// `--probe` and its word (checked by the probe itself).
    Probe(Option<String>),
    /// Run a phase: the one named on the command line, else `PHASE`'s.
    Run(Option<Phase>),
}

/// The command from the arguments (the program's name left out).
pub fn command(args: &[String]) -> Result<Command, ConfigError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] => Ok(Command::Run(None)),
        ["--help" | "-h", ..] => Ok(Command::Help),
        ["--version" | "-V", ..] => Ok(Command::Version),
        ["--probe", rest @ ..] => Ok(Command::Probe(rest.first().map(|w| w.to_string()))),
        [word @ ("pre" | "post" | "status")] => Ok(Command::Run(Some(
            phase(Some(word)).expect("a phase's own word"),
        ))),
        ["watch"] => Err(ConfigError(
            "unexpected argument \"watch\": the resident guard is its container's own process \
             (PHASE=watch); a run by hand takes status, pre or post"
                .into(),
        )),
        [word @ ("pre" | "post" | "status"), more @ ..] => Err(ConfigError(format!(
            "unexpected argument {:?} after {word}: one phase at most (see --help)",
            more[0]
        ))),
        [other, ..] => Err(ConfigError(format!(
            "unexpected argument {other:?}: expected status, pre or post, or none (PHASE \
             then says the phase; see --help)"
        ))),
    }
}

/// The `PHASE` a run uses: the argument's, which wins over the resident guard's own
/// `PHASE=watch` (the environment a `kubectl exec` into its pod inherits); another `PHASE` that
/// differs from it is a mistake, said rather than guessed.
pub fn phase_var(
    argument: Option<Phase>,
    var: Option<&str>,
) -> Result<Option<String>, ConfigError> {
    let Some(arg) = argument else {
        return Ok(var.map(str::to_string));
    };
    match var {
        None | Some("watch") => Ok(Some(arg.to_string())),
        Some(v) if v == arg.to_string() => Ok(Some(arg.to_string())),
        Some(v) => Err(ConfigError(format!(
            "PHASE={v:?} and the argument {arg} disagree: give one of them"
        ))),
    }
}

impl Config {
    /// The configuration from the environment, with the phase named on the command line
    /// (`argument`), if any: see [`phase_var`]. A run by hand writes no termination message
    /// unless `TERMINATION_MESSAGE_PATH` names one: the file a pod has is its container's.
    pub fn from_env_and_argument(argument: Option<Phase>) -> Result<Config, ConfigError> {
        Self::from_vars_and_argument(std::env::vars(), argument)
    }

    pub fn from_vars_and_argument(
        vars: impl IntoIterator<Item = (String, String)>,
        argument: Option<Phase>,
    ) -> Result<Config, ConfigError> {
        let mut vars: Vec<(String, String)> = vars.into_iter().collect();
        let var = vars
            .iter()
            .find(|(k, _)| k == "PHASE")
            .map(|(_, v)| v.as_str());
        // By hand in the resident guard's pod: the report is for the person at the terminal, not
        // for the pod's log collector, whose `LOG_FORMAT` (the chart's `json`) it would inherit.
        let in_guards_pod = argument.is_some() && var == Some("watch");
        let phase = phase_var(argument, var)?;
        vars.retain(|(k, _)| k != "PHASE" && !(in_guards_pod && k == "LOG_FORMAT"));
        vars.extend(phase.map(|p| ("PHASE".to_string(), p)));
        let mut config = Config::from_vars(vars)?;
        if argument.is_some()
            && config
                .termination_message
                .as_ref()
                .is_some_and(|t| !t.explicit)
        {
            config.termination_message = None;
        }
        Ok(config)
    }
}

/// Whether the command line names the phase: such a run is by hand, and a bad setting is said on
/// stderr only (the termination message is its container's).
pub fn by_hand(command: &Command) -> bool {
    matches!(command, Command::Run(Some(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_phase_word_a_flag_or_nothing() {
        assert_eq!(command(&args(&[])), Ok(Command::Run(None)));
        for (word, p) in [
            ("status", Phase::Status),
            ("pre", Phase::Pre),
            ("post", Phase::Post),
        ] {
            assert_eq!(command(&args(&[word])), Ok(Command::Run(Some(p))));
        }
        assert_eq!(command(&args(&["--help"])), Ok(Command::Help));
        assert_eq!(command(&args(&["-h", "x"])), Ok(Command::Help));
        assert_eq!(command(&args(&["--version"])), Ok(Command::Version));
        assert_eq!(
            command(&args(&["--probe", "live"])),
            Ok(Command::Probe(Some("live".into())))
        );
        assert_eq!(command(&args(&["--probe"])), Ok(Command::Probe(None)));
    }

    #[test]
    fn anything_else_is_one_line_naming_it() {
        for (words, says) in [
            (&["watch"][..], "\"watch\""),
            (&["status", "post"][..], "\"post\" after status"),
            (&["Status"][..], "\"Status\""),
            (&["--phase=status"][..], "\"--phase=status\""),
        ] {
            let e = command(&args(words)).unwrap_err().0;
            assert!(e.contains(says), "{words:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
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
        let c = Config::from_vars_and_argument(pod.clone(), Some(Phase::Status)).unwrap();
        assert_eq!(c.intent.phase, Phase::Status);
        assert_eq!(
            c.log_format,
            crate::config::LogFormat::Text,
            "the report, read by a person"
        );
        assert_eq!(c.watch, None);
        assert_eq!(c.termination_message, None);
        let mut job = c.clone();
        job.termination_message = Config::from_vars(vars(&[("PHASE", "status")]))
            .unwrap()
            .termination_message;
        assert_eq!(
            Config::from_vars(vars(&[
                ("PHASE", "status"),
                ("WATCH_STATE_DIR", "/tmp"),
                ("WATCH_RESYNC_SECONDS", "300")
            ]))
            .unwrap(),
            job
        );
        let guard = Config::from_vars_and_argument(pod, None).unwrap();
        assert_eq!(guard.intent.phase, Phase::Watch);
        assert_eq!(guard.log_format, crate::config::LogFormat::Json);
        assert!(guard.termination_message.is_some());
        let explicit = vars(&[("PHASE", "watch"), ("TERMINATION_MESSAGE_PATH", "/x/log")]);
        let c = Config::from_vars_and_argument(explicit, Some(Phase::Post)).unwrap();
        assert_eq!(
            c.termination_message.unwrap().path,
            std::path::PathBuf::from("/x/log")
        );
        let e = Config::from_vars_and_argument(vars(&[("PHASE", "pre")]), Some(Phase::Status));
        assert!(e.unwrap_err().0.contains("disagree"));
        assert!(by_hand(&Command::Run(Some(Phase::Status))));
        assert!(!by_hand(&Command::Run(None)));
    }

    #[test]
    fn the_argument_wins_over_the_resident_guards_own_phase_only() {
        assert_eq!(phase_var(None, Some("pre")), Ok(Some("pre".into())));
        assert_eq!(phase_var(None, None), Ok(None));
        let status = Some(Phase::Status);
        assert_eq!(phase_var(status, Some("watch")), Ok(Some("status".into())));
        assert_eq!(phase_var(status, None), Ok(Some("status".into())));
        assert_eq!(phase_var(status, Some("status")), Ok(Some("status".into())));
        for other in ["pre", "post", "", "bogus"] {
            let e = phase_var(status, Some(other)).unwrap_err().0;
            assert!(e.contains("disagree"), "{e}");
        }
    }
}
