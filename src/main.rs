//! Entry point: configuration, logging, the deadline and signals around one phase, and the
//! Job contract (exit code, termination message).

use std::fmt::Display;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info};
use tracing_subscriber::EnvFilter;
use workload_update_guard::build;
use workload_update_guard::cluster::{Cluster, Deadline, LastError};
use workload_update_guard::config::{self, Config, LogFormat};
use workload_update_guard::context::Run;
use workload_update_guard::error::{Error, exit};
use workload_update_guard::outcome::Done;
use workload_update_guard::phase;
use workload_update_guard::summary::Summary;
use workload_update_guard::vocabulary::Phase;

fn main() -> ExitCode {
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let argument = match command(&args) {
        Ok(Command::Help) => return to_stdout(&config::help()),
        Ok(Command::Version) => return to_stdout(&build::version()),
        Ok(Command::Probe(which)) => return probe(which.as_deref()),
        Ok(Command::Run(phase)) => phase,
        Err(e) => return config_error(e),
    };
    let cfg = match Config::from_vars(std::env::vars(), argument) {
        Ok(cfg) => cfg,
        Err(e) => {
            let code = config_error(&e);
            // By hand, a bad setting is said on stderr only: the termination message is the
            // container's.
            if argument.is_none() {
                config_failure_message(&e.to_string());
            }
            return code;
        }
    };
    init_logging(cfg.log_format);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    ExitCode::from(runtime.block_on(run(&cfg)))
}

/// A phase named here is a run by hand, as `kubectl exec` into the guard's pod makes one (see
/// [`Config::from_vars`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Help,
    Version,
    /// `--probe` and its word (checked by the probe itself).
    Probe(Option<String>),
    Run(Option<Phase>),
}

/// `args`: the program's name left out.
fn command(args: &[String]) -> Result<Command, String> {
    let phase = match args.first().map(String::as_str) {
        None => return Ok(Command::Run(None)),
        Some("--help" | "-h") => return Ok(Command::Help),
        Some("--version" | "-V") => return Ok(Command::Version),
        Some("--probe") => return Ok(Command::Probe(args.get(1).cloned())),
        Some("pre") => Phase::Pre,
        Some("post") => Phase::Post,
        Some("status") => Phase::Status,
        Some(other) => {
            return Err(format!(
                "unexpected argument {other:?}: expected status, pre or post (a run by hand), or \
                 none (PHASE then says the phase: watch, the resident guard, is its container's \
                 own process); see --help"
            ));
        }
    };
    match args.get(1) {
        None => Ok(Command::Run(Some(phase))),
        Some(more) => Err(format!(
            "unexpected argument {more:?} after {phase}: one phase at most (see --help)"
        )),
    }
}

fn config_error(e: impl Display) -> ExitCode {
    to_stderr(&format!("error: {e}"));
    ExitCode::from(exit::CONFIG)
}

/// `kubectl describe` shows the termination message. The path itself may be what is invalid:
/// only the default is tried then.
fn config_failure_message(error: &str) {
    let summary = Summary {
        exit_code: exit::CONFIG,
        error: Some(error.to_string()),
        ..Summary::default()
    };
    let default = config::unset_value("TERMINATION_MESSAGE_PATH").unwrap_or_default();
    let path = match std::env::var("TERMINATION_MESSAGE_PATH") {
        Ok(p) if p.starts_with('/') => p,
        Err(_) if std::path::Path::new(default).exists() => default.to_string(),
        _ => return,
    };
    let _ = std::fs::write(path, summary.to_line());
}

/// The resident guard's exec probes: `live`, the runtime is not stuck (`alive` is touched with no
/// request); `ready`, its last read succeeded. Exit 0, else 1 with the reason; a bad word, exit 2.
fn probe(which: Option<&str>) -> ExitCode {
    let settings = match config::probe_settings() {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    let (file, within) = match which {
        Some("live") => ("alive", config::ALIVE_WITHIN),
        // How old `ready` may be: two missed reads and a minute's slack.
        Some("ready") => ("ready", settings.resync * 2 + Duration::from_secs(60)),
        other => return config_error(format!("--probe takes live or ready, not {other:?}")),
    };
    let path = settings.state_dir.join(file);
    let age = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .map(|t| t.elapsed().unwrap_or_default());
    let at = path.display();
    let not = match age {
        Ok(age) if age <= within => {
            to_stderr(&format!("{file}: {at} touched {}s ago", age.as_secs()));
            return ExitCode::SUCCESS;
        }
        Ok(age) => format!(
            "not {file}: {at} last touched {}s ago (at most {}s)",
            age.as_secs(),
            within.as_secs()
        ),
        Err(e) => format!("not {file}: {at}: {e}"),
    };
    to_stderr(&not);
    ExitCode::FAILURE
}

fn init_logging(format: LogFormat) {
    // kube's client builder logs every failed connection at ERROR, and our retry says it
    // already: silenced unless RUST_LOG asks for kube_client by name.
    let mut directives = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    if !directives.contains("kube_client") {
        directives.push_str(",kube_client::client::builder=off");
    }
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr);
    match format {
        LogFormat::Text => builder.with_ansi(false).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

async fn run(cfg: &Config) -> u8 {
    let mut done = Vec::new();
    let last_error = LastError::default();
    let deadline = Deadline::new(cfg.deadline);
    let signals =
        signal(SignalKind::terminate()).and_then(|t| Ok((t, signal(SignalKind::interrupt())?)));
    let (mut sigterm, mut sigint) = match signals {
        Ok(s) => s,
        Err(e) => return finish(cfg, &done, Err(Error::Signals(e.to_string()))),
    };
    info!(version = env!("CARGO_PKG_VERSION"), revision = build::COMMIT, chart = cfg.chart_version.as_deref().unwrap_or_default(), phase = %cfg.intent.phase, dry_run = cfg.dry_run, deadline_s = cfg.deadline.as_secs(), fleet_wait_s = cfg.fleet_wait.as_secs(), "starting");
    let work = async {
        let cluster = Cluster::connect(cfg.dry_run, last_error.clone(), deadline.clone()).await?;
        let mut stdout = std::io::stdout().lock();
        phase::run(&mut Run::new(cfg, &cluster, &mut done), &mut stdout).await
    };
    let result = tokio::select! {
        r = work => r,
        _ = sigterm.recv() => Err(Error::Interrupted("SIGTERM")),
        _ = sigint.recv() => Err(Error::Interrupted("SIGINT")),
        // The resident guard bounds each read and act itself, and outlives an outage.
        _ = deadline.passed(), if cfg.watch.is_none() => Err(Error::Deadline { seconds: cfg.deadline.as_secs(), last: last_error.get() }),
    };
    finish(cfg, &done, result)
}

fn finish(cfg: &Config, done: &[Done], result: Result<Option<String>, Error>) -> u8 {
    let verdict = result.as_ref().ok().cloned().flatten();
    let result = result.map(|_| ());
    let mut summary = Summary::of_run(&cfg.intent, cfg.dry_run, done, &result);
    summary.verdict = verdict;
    let line = summary.to_line();
    match (&result, cfg.log_format) {
        (Err(e), _) => error!("{e}"),
        // The summary as a JSON object in the JSON log, not as an escaped string.
        (Ok(()), LogFormat::Json) => to_stderr(
            &serde_json::json!({
                "timestamp": jiff::Timestamp::now().to_string(),
                "level": "INFO",
                "target": "workload_update_guard",
                "message": "done",
                "summary": serde_json::from_str::<serde_json::Value>(&line).expect("the summary is JSON"),
            })
            .to_string(),
        ),
        (Ok(()), LogFormat::Text) => info!(summary = %line, "done"),
    }
    if let Some(tm) = &cfg.termination_message
        && (tm.explicit || tm.path.exists())
        && let Err(e) = std::fs::write(&tm.path, &line)
    {
        error!(path = %tm.path.display(), error = %e, "cannot write the termination message");
    }
    let _ = std::io::stdout().flush();
    summary.exit_code
}

/// stderr for the logs, whose write errors are dropped. A reader that went away (`2>&1 | head`)
/// must not stop the run: tracing-subscriber reports a failed write with `eprintln!`, which
/// panics on a broken pipe. The exit code and the termination message still tell the outcome.
struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One line on stderr, never a panic (see [`LossyStderr`]).
fn to_stderr(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// `--help`'s or `--version`'s text on stdout, never a panic (`| head`), and exit 0.
fn to_stdout(text: &str) -> ExitCode {
    let _ = std::io::stdout().write_all(text.as_bytes());
    ExitCode::SUCCESS
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
            let e = command(&args(words)).unwrap_err();
            assert!(e.contains(says), "{words:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
