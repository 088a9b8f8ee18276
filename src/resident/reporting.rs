//! What the resident guard's loop tells its monitoring after a pass (and a failed act): the
//! metrics' values, and an unprotected upgrade's Warning, said once per change. The values and
//! the words are decided in [`crate::plan::monitoring`]; this is their I/O.

use crate::cluster::EventKind;
use crate::model::Kind;
use crate::plan::monitoring;

use super::{Loop, Pass};

impl Loop<'_> {
    /// What a pass (and the act after it, if it failed) leaves the metrics saying; an upgrade
    /// under way unprotected is said once (a WARN line, Warning Events on the Upgrade and on
    /// the KubeVirt CR) and again only when it changes (another Upgrade, the hold on or off).
    pub(super) async fn report(&mut self, pass: &Pass) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let seen = monitoring::Seen {
            kubevirt: pass.objects.kubevirt.as_ref(),
            upgrade: pass.upgrade.as_ref(),
            admission_hold: self.cfg.watch.as_ref().is_some_and(|w| w.admission_hold),
            held_after_failure: self.memory.held.is_some(),
            retirement: pass.retirement.as_ref(),
        };
        metrics.show(&monitoring::gauges(&seen));
        let last_pre = self.last_pre.as_deref().unwrap_or("has not run for it");
        let Some((key, said)) = monitoring::unprotected_warning(&seen, last_pre) else {
            self.unprotected_said = None;
            return;
        };
        if self.unprotected_said.as_ref() == Some(&key) {
            return;
        }
        self.cluster.warn(seen.kubevirt, None, &said).await;
        if let Some(u) = &pass.upgrade {
            let upgrade = serde_json::json!({"metadata": {
                "namespace": u.namespace, "name": u.name, "uid": u.uid}});
            self.cluster
                .event_about(
                    Kind::Upgrade,
                    &upgrade,
                    EventKind::Warning,
                    said.reason,
                    &said.message,
                )
                .await;
        }
        self.unprotected_said = Some(key);
    }
}
