//! The one waiting loop: the resident guard (`PHASE=watch`) and the armed `post`
//! (`ARM=true`) are this loop, the second stopped after one restore. Each pass reads
//! the two objects and the upgrade's (Harvester's latest Upgrade, the add-on's UpgradePlans),
//! asks [`plan::watch_decision::decide`] what now, and acts by running `pre` or `post` exactly as their
//! Jobs do ([`runner::run`]). Between passes it sleeps until a watch wakes it
//! ([`Cluster::watch`]) or the resync period passes, with the request deadline's clock stopped;
//! each pass gets the whole deadline ([`Cluster::restart_deadline`]). Nothing is kept between
//! upgrades but what the objects say: a new pod goes on where the last one stopped.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{error, info};

use crate::cluster::{Cluster, EventKind, Watcher};
use crate::config::{ALIVE_EVERY, Config};
use crate::error::Error;
use crate::metrics::{self, Metrics};
use crate::model::Kind;
use crate::plan::harvester_upgrade::Handling;
use crate::plan::harvester_upgrade::{LATEST_LABEL, Upgrade};
use crate::plan::monitoring::UnprotectedKey;
use crate::plan::ownership::anything_of_ours;
use crate::plan::retirement::Retirement;
use crate::plan::upgrade_progress::record_time;
use crate::plan::watch_decision::{Decision, Memory, decide};
use crate::upgrades::{self, View};
use crate::vocabulary::{Objects, Phase};
use crate::warnings::{HELD_AFTER_FAILURE, RESIDENT, Warning};

mod act;
mod armed_post;
mod offer;
mod reporting;

pub use act::RunPhase;

pub use armed_post::armed;

/// How often a waiting loop says what it waits for, when nothing changes.
const SAY_EVERY: Duration = Duration::from_secs(600);

/// How soon the loop reads again while a watch fails: a read that succeeds replaces it, so the
/// watches come back within about this of the API server's return.
const WATCH_FAILING_PAUSE: Duration = Duration::from_secs(1);

/// How soon a failed act is tried again (not at the resync): the cause (Fleet not ready, a RBAC
/// fix, the API server back) is often gone within a minute, and an upgrade may be held by the
/// policy until the suspension is in place. A `pre` that fails again costs a few requests.
const ACT_RETRY_PAUSE: Duration = Duration::from_secs(20);

/// How often the resident guard reads again what the cluster can upgrade to next (its version,
/// the releases on offer), for whether it is still needed: these change only with an upgrade
/// or a release, and a quiet cluster's requests stay few.
const OFFER_EVERY: Duration = Duration::from_secs(1800);

/// What one pass read and decided. `retirement`: whether the guard is still needed (the
/// resident guard only), from the objects of this pass and the last read of the offer.
pub struct Pass {
    pub decision: Decision,
    pub objects: Objects,
    pub retirement: Option<Retirement>,
    /// Harvester's latest Upgrade, as read (for what the guard says of its protection).
    pub upgrade: Option<Upgrade>,
}

/// The cluster's version and the releases on offer, as last read, and when.
type Offer = (
    Option<String>,
    Vec<(String, Handling)>,
    tokio::time::Instant,
);

/// One waiting loop: its settings, its watches and what it remembers.
struct Loop<'a> {
    cfg: &'a Config,
    cluster: &'a Cluster,
    /// The resident guard runs `pre` itself; the armed `post` only restores.
    suspends: bool,
    memory: Memory,
    wake_tx: mpsc::Sender<()>,
    wake: mpsc::Receiver<()>,
    upgrades: Option<Watcher>,
    plans: Option<Watcher>,
    /// The last decision said, and when.
    said: Option<(String, tokio::time::Instant)>,
    /// The resident guard's last read of the offer ([`OFFER_EVERY`]).
    offer: Option<Offer>,
    /// "No longer needed" has been said (once, until it is needed again).
    retirement_said: bool,
    /// The resident guard's metrics, set after each pass and act.
    metrics: Option<Arc<Metrics>>,
    /// What the last `pre` for the upgrade under way ended with, in words.
    last_pre: Option<String>,
    /// The last act failed: tried again sooner than the resync ([`ACT_RETRY_PAUSE`]).
    act_failed: bool,
    /// The unprotected upgrade said last (once per upgrade and hold, until it is protected).
    unprotected_said: Option<UnprotectedKey>,
}

impl<'a> Loop<'a> {
    fn new(cfg: &'a Config, cluster: &'a Cluster, suspends: bool) -> Self {
        let (wake_tx, wake) = mpsc::channel(1);
        Loop {
            cfg,
            cluster,
            suspends,
            memory: Memory::default(),
            wake_tx,
            wake,
            upgrades: None,
            plans: None,
            said: None,
            offer: None,
            retirement_said: false,
            metrics: None,
            last_pre: None,
            act_failed: false,
            unprotected_said: None,
        }
    }

    /// One pass: the objects and the upgrade's, read with a fresh deadline, and the decision.
    async fn pass(&mut self) -> Result<Pass, Error> {
        self.cluster.restart_deadline();
        let post = self.as_phase(Phase::Post);
        let mut now = Objects::default();
        for target in post.intent.targets() {
            now.set(target.kind, self.cluster.get(&target).await?);
        }
        let view = upgrades::read(self.cluster, &post).await?;
        self.keep_watching(&view);
        let read: Vec<&Value> = [&now.kubevirt, &now.chart].into_iter().flatten().collect();
        let since = record_time(&read).unwrap_or_else(this_second);
        let ours = anything_of_ours(&now);
        let upgrade = view.upgrade.as_ref();
        let decision = decide(
            upgrade,
            &view.plans,
            ours,
            since,
            self.suspends,
            &mut self.memory,
        );
        let retirement = self.retirement(&view, &now).await?;
        if let Some(w) = &self.cfg.watch {
            touch(&w.state_dir.join("ready"));
        }
        if let Some(m) = &self.metrics {
            m.read_everything(jiff::Timestamp::now().as_second());
        }
        Ok(Pass {
            decision,
            objects: now,
            retirement,
            upgrade: view.upgrade,
        })
    }

    /// Starts (again) the watches of what is served: Harvester's Upgrades in the KubeVirt CR's
    /// namespace (the latest only), and the add-on's UpgradePlans (installed later, too). The
    /// resident guard only: the armed `post` reads at its own pace (`ARM_POLL_SECONDS`), as its
    /// Job's contract and RBAC say.
    fn keep_watching(&mut self, view: &View) {
        if !self.suspends {
            return;
        }
        let ns = self.cfg.intent.keys.kubevirt.namespace.clone();
        let latest = format!("{LATEST_LABEL}=true");
        // Called after a successful read: the server answers, so a failing watch is replaced
        // now rather than at the end of its backoff (src/cluster/watches.rs).
        let fresh = |w: &Option<Watcher>| w.as_ref().is_some_and(|w| w.alive() && !w.failing());
        if view.upgrades_served && !fresh(&self.upgrades) {
            let tx = self.wake_tx.clone();
            self.upgrades = Some(
                self.cluster
                    .watch(Kind::Upgrade, Some(&ns), Some(&latest), tx),
            );
        }
        if view.plans_served && !fresh(&self.plans) {
            let tx = self.wake_tx.clone();
            self.plans = Some(self.cluster.watch(Kind::UpgradePlan, None, None, tx));
        }
    }

    /// How long to wait for a wake-up before reading again: the resync; a second while a watch
    /// fails (the server down, or back and the watch not yet replaced); [`ACT_RETRY_PAUSE`]
    /// after a failed act.
    fn pause_for(&self, resync: Duration) -> Duration {
        let failing = [&self.upgrades, &self.plans]
            .into_iter()
            .flatten()
            .any(Watcher::failing);
        if failing {
            resync.min(WATCH_FAILING_PAUSE)
        } else if self.act_failed {
            resync.min(ACT_RETRY_PAUSE)
        } else {
            resync
        }
    }

    /// Says a decision: its line when its kind changes, and again every [`SAY_EVERY`]; a Normal
    /// Event on the KubeVirt CR when it becomes a suspend, a restore or a stand-aside (the
    /// resident guard; a wait is the log's only); a hold's Warning once per failed Upgrade.
    async fn say(
        &mut self,
        decision: &Decision,
        kubevirt: Option<&Value>,
        held_before: &Option<String>,
    ) {
        let now = tokio::time::Instant::now();
        let changed = self.said.as_ref().is_none_or(|(k, _)| k != decision.kind());
        let again = |(_, t): &(String, tokio::time::Instant)| now - *t >= SAY_EVERY;
        if changed || self.said.as_ref().is_some_and(again) {
            let line = decision.line();
            info!(decision = decision.kind(), "{}: {line}", self.name());
            self.said = Some((decision.kind().to_string(), now));
        }
        if changed
            && self.suspends
            && let (Some(kv), Some(note)) = (kubevirt, decision.event())
        {
            self.cluster
                .event(kv, EventKind::Normal, RESIDENT, &note)
                .await;
        }
        if let Decision::Hold { why, .. } = decision
            && self.memory.held != *held_before
        {
            let said = Warning {
                reason: HELD_AFTER_FAILURE,
                message: why.clone(),
            };
            self.cluster.warn(kubevirt, None, &said).await;
        }
    }

    /// The resident guard's probe file `alive`, touched every [`ALIVE_EVERY`] by a task of its
    /// own, and its metrics (served on `METRICS_PORT`, if set).
    async fn start_probes_and_metrics(&mut self, settings: &crate::config::Watch) {
        let alive = settings.state_dir.join("alive");
        touch(&alive);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ALIVE_EVERY).await;
                touch(&alive);
            }
        });
        info!(
            resync_s = settings.resync.as_secs(),
            "resident guard: watching Harvester's Upgrades and the add-on's UpgradePlans"
        );
        let exposed = Arc::new(Metrics::new(
            env!("CARGO_PKG_VERSION"),
            crate::build::COMMIT,
            self.cfg.chart_version.as_deref().unwrap_or_default(),
        ));
        if let Some(port) = settings.metrics_port {
            metrics::start(port, exposed.clone()).await;
        }
        self.metrics = Some(exposed);
    }
}

/// Now, in whole seconds (as the API server writes its times): a record not read yet is taken
/// as made now.
fn this_second() -> jiff::Timestamp {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("now is a time")
}

/// Touches a probe file (its mtime is what `--probe` reads). A failure is logged once a pass:
/// the probe then fails, which is what it should say.
fn touch(path: &std::path::Path) {
    if let Err(e) = std::fs::write(path, this_second().to_string()) {
        error!(path = %path.display(), error = %e, "cannot write the probe file");
    }
}

/// `PHASE=watch`: the resident guard, until SIGTERM. At an upgrade's creation it runs `pre`
/// (which decides whether it is needed, or late); at its end (cleanup included) `post`; after a
/// failed path-A upgrade it holds until the retry. A failed pass or act is logged and tried again.
pub async fn resident_guard(
    cfg: &Config,
    cluster: &Cluster,
    mut run: impl RunPhase,
) -> Result<(), Error> {
    let settings = cfg.watch.clone().expect("PHASE=watch has its settings");
    let mut lp = Loop::new(cfg, cluster, true);
    lp.start_probes_and_metrics(&settings).await;
    // The act just made: the same decision right after it (a `post` that left something of ours,
    // a step switched off) waits for the next read, so that nothing runs in a tight loop.
    let mut just_did: Option<Decision> = None;
    loop {
        let held_before = lp.memory.held.clone();
        // Each pass has the whole deadline, from before the race below starts.
        cluster.restart_deadline();
        let pass = tokio::select! {
            r = lp.pass() => r,
            e = cluster.deadline_passed() => Err(e),
        };
        if let Ok(p) = &pass {
            lp.say_retirement(p.retirement.as_ref(), p.objects.kubevirt.as_ref())
                .await;
        }
        match pass {
            Ok(p) if just_did.take().as_ref() == Some(&p.decision) => {
                info!(
                    "resident guard: {} again, right after it ran: tried again at the next event or in {} s",
                    p.decision.kind(),
                    settings.resync.as_secs()
                );
                lp.report(&p).await;
            }
            Ok(p) => {
                lp.say(&p.decision, p.objects.kubevirt.as_ref(), &held_before)
                    .await;
                // After an act, read again at once: the objects and the decision have moved.
                if lp.act_on(&p.decision, &mut run).await {
                    just_did = Some(p.decision);
                    continue;
                }
                // No act, or a failed one: what this pass read is what holds now.
                lp.report(&p).await;
            }
            Err(e) => error!(
                "resident guard: read failed ({e}); reading again at the next event or in {} s",
                settings.resync.as_secs()
            ),
        }
        cluster
            .pause(lp.pause_for(settings.resync), &mut lp.wake)
            .await;
    }
}
