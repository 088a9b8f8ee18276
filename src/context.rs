//! One run's context. A fact is told by one call, which logs it, sends its Event where it has
//! one, and adds it to what was done: [`Run::said`], [`Run::warned`].

use serde_json::Value;
use tracing::info;

use crate::cluster::{Cluster, EventKind};
use crate::config::Config;
use crate::model::{Kind, Target};
use crate::outcome::Done;
use crate::plan::migrations::Migration;
use crate::warnings::Warning;

/// A phase's run (a Job's, or one act of the waiting loop): what it is told, and what it has
/// found so far. The resident guard's acts are weeks apart: each is a run of its own, none keeps
/// the last one's findings, which described another upgrade.
pub struct Run<'a> {
    pub cfg: &'a Config,
    pub cluster: &'a Cluster,
    /// What each step came to, in order: the summary is made from it (kept by the caller, so
    /// that a run cut short by a signal or its deadline still tells what it did).
    pub done: &'a mut Vec<Done>,
    /// The Events that could not be made (`REASON: error`), for the summary's warnings.
    event_failures: Vec<String>,
    /// `pre`'s list of the migrations under way, once made ([`Run::migrations_under_way`]).
    under_way: Option<Result<Vec<Migration>, String>>,
}

impl<'a> Run<'a> {
    pub fn new(cfg: &'a Config, cluster: &'a Cluster, done: &'a mut Vec<Done>) -> Self {
        Run {
            cfg,
            cluster,
            done,
            event_failures: Vec::new(),
            under_way: None,
        }
    }

    /// The KubeVirt CR's step, where what a phase found (not what it wrote) is said.
    pub fn kubevirt(&self) -> Target {
        Target::new(Kind::KubeVirt, &self.cfg.intent.keys.kubevirt)
    }

    pub fn push(&mut self, done: Done) {
        self.done.push(done);
    }

    /// Lines on the KubeVirt CR's step, already logged by the caller (or not to be).
    pub fn noted(&mut self, actions: Vec<String>) {
        let target = self.kubevirt();
        self.push(Done::noted(target, actions));
    }

    pub fn said(&mut self, line: String) {
        info!("{line}");
        self.noted(vec![line]);
    }

    /// Recorded on `target`, else on the KubeVirt CR's step.
    pub async fn warned(&mut self, kubevirt: Option<&Value>, target: Option<Target>, w: Warning) {
        let made = self.cluster.warn(kubevirt, target.as_ref(), &w).await;
        self.event_made(made);
        let target = target.unwrap_or_else(|| self.kubevirt());
        self.push(Done::warned(target, w));
    }

    /// A step's outcome with its warnings: each logged and its Warning Event made, then the
    /// step recorded with them.
    pub async fn step_done(&mut self, kubevirt: Option<&Value>, done: Done) {
        for w in &done.warnings {
            let made = self.cluster.warn(kubevirt, Some(&done.target), w).await;
            self.event_made(made);
        }
        self.push(done);
    }

    /// An Event on `object` (the KubeVirt CR) whose line the caller has logged or noted.
    pub async fn event(&mut self, object: &Value, kind: EventKind, reason: &str, note: &str) {
        let made = self.cluster.event(object, kind, reason, note).await;
        self.event_made(made);
    }

    fn event_made(&mut self, made: Result<(), String>) {
        if let Err(failure) = made {
            self.event_failures.push(failure);
        }
    }

    /// The Events that could not be made, in order.
    pub fn event_failures(&self) -> &[String] {
        &self.event_failures
    }

    /// Listed once per run: a late `pre` names them before its writes and after them, and a
    /// second list of a large cluster would cost as much again to say the same.
    pub async fn migrations_under_way(&mut self) -> Result<Vec<Migration>, String> {
        if let Some(known) = &self.under_way {
            return known.clone();
        }
        let listed = self.cluster.migrations_under_way().await;
        self.under_way = Some(listed.clone());
        listed
    }
}
