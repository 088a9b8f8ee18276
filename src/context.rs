//! One run's context. A fact is told by one call, which logs it, sends its Event where it has
//! one, and adds it to what was done: [`Run::said`], [`Run::warned`].

use serde_json::Value;
use tracing::info;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::model::{Kind, Target};
use crate::outcome::Done;
use crate::warnings::Warning;

/// A phase's run (a Job's, or one act of the waiting loop).
pub struct Run<'a> {
    pub cfg: &'a Config,
    pub cluster: &'a Cluster,
    /// What each step came to, in order: the summary is made from it (kept by the caller, so
    /// that a run cut short by a signal or its deadline still tells what it did).
    pub done: &'a mut Vec<Done>,
}

impl<'a> Run<'a> {
    pub fn new(cfg: &'a Config, cluster: &'a Cluster, done: &'a mut Vec<Done>) -> Self {
        Run { cfg, cluster, done }
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
        self.cluster.warn(kubevirt, target.as_ref(), &w).await;
        let target = target.unwrap_or_else(|| self.kubevirt());
        self.push(Done::warned(target, w));
    }
}
