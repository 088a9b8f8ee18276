//! How the waiting loop acts: it runs `pre` or `post` exactly as their Jobs do (passed in as
//! [`RunPhase`]: `runner::run_phase`), each act a run of its own (its deadline, its summary).

use tracing::{error, info};

use super::{ACT_RETRY_PAUSE, Loop};
use crate::context::Run;
use crate::error::Error;
use crate::plan::watch_decision::Decision;
use crate::summary::Summary;
use crate::vocabulary::Phase;

/// How the loop runs a phase (`runner::run_phase`, which runs the armed `post` by this loop:
/// passed in, so the two modules do not import each other).
pub trait RunPhase: AsyncFnMut(&mut Run<'_>) -> Result<(), Error> {}
impl<F: AsyncFnMut(&mut Run<'_>) -> Result<(), Error>> RunPhase for F {}

impl Loop<'_> {
    /// Acts on a decision as the phase's Job does, its summary logged: `pre` for a suspend (the
    /// upgrade remembered once it succeeded), `post` for a restore. `true`: an act ran and
    /// succeeded.
    pub(super) async fn act_on(&mut self, decision: &Decision, run: &mut impl RunPhase) -> bool {
        let (phase, why) = match decision {
            Decision::Suspend { describe, .. } => (Phase::Pre, format!("{describe} is under way")),
            Decision::Restore(why) => (Phase::Post, why.to_string()),
            Decision::Hold { .. } | Decision::Wait(_) => return false,
        };
        info!("{}: {why}: running {phase}", self.name());
        self.cluster.begin_run();
        let cfg = self.as_phase(phase);
        let mut done = Vec::new();
        let mut this_run = Run::new(&cfg, self.cluster, &mut done);
        let result = tokio::select! {
            r = run(&mut this_run) => r,
            e = self.cluster.deadline_passed() => Err(e),
        };
        let line = Summary::of_run(&cfg.intent, cfg.dry_run, &done, &result).to_line();
        if let Some(m) = &self.metrics {
            m.acted(phase, result.is_ok());
        }
        let ended = match &result {
            Ok(()) => {
                info!(summary = %line, "{}: {phase} done", self.name());
                "succeeded".to_string()
            }
            Err(e) => {
                error!(
                    summary = %line,
                    "{}: {phase} failed ({e}); it is tried again at the next event or in {} s",
                    self.name(),
                    ACT_RETRY_PAUSE.as_secs()
                );
                format!("failed: {e}")
            }
        };
        if phase == Phase::Pre {
            self.last_pre = Some(ended);
        }
        if let (Ok(()), Decision::Suspend { upgrade, .. }) = (&result, decision) {
            self.memory.suspended_for.push(upgrade.clone());
        }
        self.act_failed = result.is_err();
        result.is_ok()
    }
}
