//! The one waiting loop, of the resident guard and of the armed `post`: each pass reads, and the
//! loop's state takes its step on what it read ([`LoopState::step`]: the decision, and whether to
//! act on it now); the resident guard acts on it (`crate::phase::watch`), the armed `post` restores
//! once. Nothing is kept between upgrades but what the objects say: a new pod goes on where the
//! last one stopped.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{error, info};

use crate::cluster::{Cluster, FirstList, Watcher};
use crate::config::{ALIVE_EVERY, Config};
use crate::error::Error;
use crate::metrics::{self, Metrics};
use crate::model::Kind;
use crate::plan::acting::{LoopState, Next, Now, PassRead, Step};
use crate::plan::harvester_upgrade::LATEST_LABEL;
use crate::plan::monitoring::UnprotectedKey;
use crate::plan::releases::Handling;
use crate::plan::retirement::Retirement;
use crate::plan::upgrade_progress::record_time;
use crate::plan::watch_decision::Decision;
use crate::upgrades::{self, View};
use crate::vocabulary::{Objects, Phase};

mod armed_post;
mod recording;
mod reporting;

pub use armed_post::armed;

/// How often a waiting loop says what it waits for, when nothing changes.
const SAY_EVERY: Duration = Duration::from_secs(600);

/// How soon the loop reads again while a watch fails: a read that succeeds replaces it, so the
/// watches come back within about this of the API server's return.
const WATCH_FAILING_PAUSE: Duration = Duration::from_secs(1);

/// How long the first read waits for the watches' first lists: the other requests' read
/// timeout (a list answers in milliseconds; one that hangs is a server still starting).
const SETTLE_WITHIN: Duration = Duration::from_secs(30);

/// A failed act's cause (Fleet not ready, RBAC, the API server) is often gone within a minute,
/// and an upgrade may be held by the policy until the suspension is in place.
pub(crate) const ACT_RETRY_PAUSE: Duration = Duration::from_secs(20);

/// What the cluster can upgrade to next changes only with an upgrade or a release.
const OFFER_EVERY: Duration = Duration::from_secs(1800);

pub(crate) struct Pass {
    pub(crate) decision: Decision,
    /// The resident guard's: act on the decision now, or not again (`plan::acting`).
    pub(crate) next: Next,
    pub(crate) objects: Objects,
    /// `None` for the armed `post`, and where Upgrades are not served.
    retirement: Option<Retirement>,
    /// Harvester's upgrades, as read (what the guard says of its protection; what a phase it
    /// runs goes on from, reading nothing twice).
    pub(crate) view: View,
    /// The decision held the suspension after another failed Upgrade (or lifted the hold).
    held_changed: bool,
}

/// What the loop has said: each fact once, until it changes.
#[derive(Default)]
struct Said {
    /// The decision's kind, and when its line was said.
    decision: Option<(&'static str, Instant)>,
    /// "No longer needed" has been said (once, until it is needed again).
    retirement: bool,
    /// The unprotected upgrade said last (once per upgrade and hold, until it is protected).
    unprotected: Option<UnprotectedKey>,
    /// The claim a Fleet deploy waits on, said last (its manager and the Bundle's generation).
    blocked: Option<String>,
    /// Why the upgrade's record could not be kept, said last.
    record_not_kept: Option<String>,
}

/// What the resident guard watches, each kind's place in `Loop::watches`.
#[derive(Debug, Clone, Copy)]
enum Watched {
    /// Harvester's latest Upgrade (its label).
    Upgrades,
    /// The add-on's UpgradePlans.
    Plans,
    /// The one KubeVirt CR (a field selector on its name: the Role grants it by name).
    KubeVirt,
}

impl Watched {
    const ALL: [Watched; 3] = [Watched::Upgrades, Watched::Plans, Watched::KubeVirt];
}

/// The cluster's version and the releases on offer, as last read, and when (the loop's clock,
/// and the time it says).
struct Offer {
    current: Option<String>,
    on_offer: Vec<(String, Handling)>,
    read: Instant,
    at: jiff::Timestamp,
}

pub(crate) struct Loop<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) cluster: &'a Cluster,
    /// The resident guard (which runs `pre` itself, and has metrics); else the armed `post`.
    pub(crate) suspends: bool,
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// All the loop keeps from one pass to the next but what it has said (`plan::acting`).
    pub(crate) state: LoopState,
    wake_tx: mpsc::Sender<()>,
    pub(crate) wake: mpsc::Receiver<()>,
    /// Of Harvester's latest Upgrade, the add-on's UpgradePlans, and the KubeVirt CR ([`Watched`]).
    watches: [Option<Watcher>; 3],
    offer: Option<Offer>,
    /// What it has said (`reporting`), so that it says each fact once.
    said: Said,
    /// The record of the upgrade under way, while one is (`recording`).
    recording: Option<recording::Recording>,
    /// The last record kept has been read (its gauges, at the start).
    records_read: bool,
    started: Instant,
}

impl<'a> Loop<'a> {
    pub(crate) fn new(
        cfg: &'a Config,
        cluster: &'a Cluster,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        let (wake_tx, wake) = mpsc::channel(1);
        Loop {
            cfg,
            cluster,
            suspends: metrics.is_some(),
            metrics,
            state: LoopState::default(),
            wake_tx,
            wake,
            watches: [None, None, None],
            offer: None,
            said: Said::default(),
            recording: None,
            records_read: false,
            started: Instant::now(),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        if self.suspends {
            "resident guard"
        } else {
            "armed post"
        }
    }

    /// A run of `phase` with the loop's settings (its own waiting off).
    pub(crate) fn as_phase(&self, phase: Phase) -> Config {
        let mut cfg = self.cfg.clone();
        cfg.intent.phase = phase;
        cfg.arm = None;
        cfg.watch = None;
        cfg
    }

    pub(crate) async fn pass(&mut self) -> Result<Pass, Error> {
        self.cluster.restart_deadline();
        let post = self.as_phase(Phase::Post);
        let mut objects = Objects::default();
        for target in post.intent.targets() {
            objects.set(target.kind, self.cluster.get(&target).await?);
        }
        let mut view = upgrades::read(self.cluster, &post).await?;
        self.keep_watching(&view);
        let read = PassRead {
            kubevirt: objects.kubevirt.as_ref(),
            chart: objects.chart.as_ref(),
            upgrade: view.upgrade.as_ref(),
            plans: &view.plans,
        };
        let now = Now {
            loop_time: self.clock(),
            wall: this_second(),
        };
        // The armed `post` restores once: it never comes back to a step's act.
        let resync = self.cfg.watch.as_ref().map_or(Duration::MAX, |w| w.resync);
        let step = self.state.step(&read, self.suspends, now, resync);
        let Step {
            decision,
            next,
            held_changed,
        } = step;
        self.read_offer(&view, &objects, &decision).await?;
        let retirement = self.retirement(&view, &objects);
        // The act that follows (`pre`'s advice) goes on from the offer read for it.
        if let Some(o) = &self.offer {
            view.current = o.current.clone();
            view.on_offer = o.on_offer.clone();
        }
        if let Some(w) = &self.cfg.watch {
            touch(&w.state_dir.join("ready"));
        }
        if let Some(m) = &self.metrics {
            m.read_everything(jiff::Timestamp::now().as_second());
        }
        Ok(Pass {
            decision,
            next,
            objects,
            retirement,
            view,
            held_changed,
        })
    }

    /// The resident guard's watches, before its first read (the armed `post` reads at its own
    /// pace, as its Job's RBAC says): every kind, served or not (one not served ends at its first
    /// list, and is started again once a read finds it served).
    pub(crate) fn start_watches(&mut self) {
        for which in Watched::ALL {
            self.watches[which as usize] = Some(self.watch(which, FirstList::BeforeTheRead));
        }
    }

    /// Until each watch has listed once (or failed, or ended), for at most [`SETTLE_WITHIN`]:
    /// the first read comes after. A list that hangs (a server still starting) is not waited
    /// for longer: its list then wakes the loop.
    pub(crate) async fn watches_settled(&self) {
        let all = async {
            for watch in self.watches.iter().flatten() {
                watch.settled().await;
            }
        };
        if tokio::time::timeout(SETTLE_WITHIN, all).await.is_err() {
            info!(
                "resident guard: a watch has not listed within {SETTLE_WITHIN:?}: reading without it"
            );
            self.watches
                .iter()
                .flatten()
                .for_each(Watcher::read_before_its_list);
        }
    }

    /// After a successful read: the server answers, so a failing watch is replaced now rather
    /// than at the end of its backoff (src/cluster/watches.rs), and a kind served since is
    /// watched. Each starts after the read, so its first list wakes the loop.
    fn keep_watching(&mut self, view: &View) {
        if !self.suspends {
            return;
        }
        let stale = |w: &Option<Watcher>| !w.as_ref().is_some_and(|w| w.alive() && !w.failing());
        for which in Watched::ALL {
            let served = match which {
                Watched::Upgrades => view.upgrades_served,
                Watched::Plans => view.plans_served,
                Watched::KubeVirt => true,
            };
            if served && stale(&self.watches[which as usize]) {
                self.watches[which as usize] = Some(self.watch(which, FirstList::AfterARead));
            }
        }
    }

    fn watch(&self, which: Watched, first_list: FirstList) -> Watcher {
        let wake = self.wake_tx.clone();
        let ns = Some(self.cfg.intent.keys.kubevirt.namespace.as_str());
        let cluster = self.cluster;
        match which {
            Watched::Upgrades => {
                let latest = format!("{LATEST_LABEL}=true");
                cluster.watch(Kind::Upgrade, ns, Some(&latest), None, first_list, wake)
            }
            Watched::Plans => cluster.watch(Kind::UpgradePlan, None, None, None, first_list, wake),
            // The CR itself: a write that turns updates on mid-upgrade is answered in seconds,
            // not at the resync after KubeVirt's updater (about 5 s) has acted on it; and the
            // outdated count (the metric) follows KubeVirt's status as it changes.
            Watched::KubeVirt => {
                let name = Some(self.cfg.intent.keys.kubevirt.name.as_str());
                cluster.watch(Kind::KubeVirt, ns, None, name, first_list, wake)
            }
        }
    }

    /// The loop's clock (the resync of an act remembered, `plan::acting`).
    pub(crate) fn clock(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn pause_for(&self, resync: Duration) -> Duration {
        if self.watches.iter().flatten().any(Watcher::failing) {
            resync.min(WATCH_FAILING_PAUSE)
        } else if self.state.act_failed {
            resync.min(ACT_RETRY_PAUSE)
        } else if self.recording.is_some() {
            // The record is kept while it changes, and closed after the wave's window.
            resync.min(recording::KEEP_EVERY)
        } else {
            resync
        }
    }
}

/// When `pre` recorded the suspension on `objects` (a record not read yet is taken as made now).
fn since(objects: &Objects) -> jiff::Timestamp {
    let read: Vec<&Value> = objects.kubevirt.iter().chain(&objects.chart).collect();
    record_time(&read).unwrap_or_else(this_second)
}

/// Now, in whole seconds (as the API server writes its times).
fn this_second() -> jiff::Timestamp {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("now is a time")
}

/// A failure is only logged: the probe (which reads the mtime) then fails, as it should.
fn touch(path: &std::path::Path) {
    if let Err(e) = std::fs::write(path, this_second().to_string()) {
        error!(path = %path.display(), error = %e, "cannot write the probe file");
    }
}

/// `alive` is touched by a task of its own: it says the runtime runs, whatever the reads do.
pub(crate) async fn start_probes_and_metrics(
    cfg: &Config,
    settings: &crate::config::Watch,
) -> Arc<Metrics> {
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
        "resident guard: watching Harvester's Upgrades, the add-on's UpgradePlans and the KubeVirt CR"
    );
    let chart = cfg.chart_version.as_deref().unwrap_or_default();
    metrics::start(settings.metrics_port, chart).await
}
