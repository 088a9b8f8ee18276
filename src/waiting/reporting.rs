//! The waiting loop's I/O for what `plan::acting`, `retirement` and `monitoring` decide.

use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::Value;
use tokio::time::Instant;
use tracing::info;

use super::{Loop, OFFER_EVERY, Offer, Pass, SAY_EVERY};
use crate::cluster::{EventKind, regarding};
use crate::error::Error;
use crate::model::Kind;
use crate::plan::fields;
use crate::plan::monitoring;
use crate::plan::ownership::anything_of_ours;
use crate::plan::retirement::{self, Retirement};
use crate::plan::upgrade_progress::running;
use crate::plan::watch_decision::Decision;
use crate::upgrades::{self, View};
use crate::vocabulary::Objects;
use crate::warnings::{
    HELD_AFTER_FAILURE, NO_LONGER_NEEDED, RESIDENT, TURNED_ON_DURING_UPGRADE, Warning,
};

impl Loop<'_> {
    /// The loop's facts are told outside any run, by a log line and an Event: one that could not
    /// be made is in the log (`Cluster::event_about`), and no summary carries it.
    async fn warn(&self, kubevirt: Option<&Value>, w: &Warning) {
        let _ = self.cluster.warn(kubevirt, None, w).await;
    }

    async fn event(&self, about: ObjectReference, kind: EventKind, reason: &str, note: &str) {
        let _ = self.cluster.event_about(about, kind, reason, note).await;
    }

    /// Says a decision: its line when its kind changes, and again every [`SAY_EVERY`]; a Normal
    /// Event on the KubeVirt CR when it becomes a suspend, a restore or a stand-aside (the
    /// resident guard; a wait is the log's only); a hold's Warning once per failed Upgrade.
    pub(crate) async fn say(&mut self, pass: &Pass) {
        let decision = &pass.decision;
        let kubevirt = pass.objects.kubevirt.as_ref();
        let now = Instant::now();
        let last = self.said.decision;
        let changed = last.is_none_or(|(kind, _)| kind != decision.kind());
        if changed || last.is_some_and(|(_, at)| now - at >= SAY_EVERY) {
            let line = decision.line();
            info!(decision = decision.kind(), "{}: {line}", self.name());
            self.said.decision = Some((decision.kind(), now));
        }
        if changed
            && self.suspends
            && let (Some(kv), Some(note)) = (kubevirt, decision.event())
        {
            let about = regarding(Kind::KubeVirt, fields::reference(kv));
            self.event(about, EventKind::Normal, RESIDENT, &note).await;
        }
        if let Decision::Hold { why, .. } = decision
            && pass.held_changed
        {
            let said = Warning {
                reason: HELD_AFTER_FAILURE,
                message: why.clone(),
            };
            self.warn(kubevirt, &said).await;
        }
        // Each write that turned updates on is said, with its writer: who wrote it may look for
        // why their change did not last, and how to let this upgrade's migrations happen.
        if let Decision::Resuspend { upgrade, .. } = decision {
            let latest = pass.view.upgrade.as_ref();
            let message = monitoring::turned_on_during_upgrade(&decision.line(), upgrade, latest);
            let reason = TURNED_ON_DURING_UPGRADE;
            self.warn(kubevirt, &Warning { reason, message }).await;
        }
    }

    /// The releases on offer (and the cluster's version), read in the pass that needs them:
    /// one about to run `pre` (its advice names them), and a quiet one when the last read is
    /// [`OFFER_EVERY`] old ("still needed"). Otherwise (an upgrade under way, something of
    /// ours) the guard is needed whatever the offer says, and the next quiet pass reads it anew:
    /// after an upgrade the cluster's version and the offer have moved.
    pub(crate) async fn read_offer(
        &mut self,
        view: &View,
        now: &Objects,
        decision: &Decision,
    ) -> Result<(), Error> {
        if !self.suspends || !view.upgrades_served {
            return Ok(());
        }
        let suspending = matches!(
            decision,
            Decision::Suspend { .. } | Decision::Resuspend { .. }
        );
        let quiet = running(view.upgrade.as_ref(), &view.plans).is_none() && !anything_of_ours(now);
        let due = (self.offer.as_ref()).is_none_or(|o| o.read.elapsed() >= OFFER_EVERY);
        if suspending || (quiet && due) {
            let (current, on_offer) = upgrades::read_offer(self.cluster, self.cfg).await?;
            let (read, at) = (Instant::now(), jiff::Timestamp::now());
            self.offer = Some(Offer {
                current,
                on_offer,
                read,
                at,
            });
        } else if !quiet {
            self.offer = None;
        }
        Ok(())
    }

    /// Whether the guard is still needed, from the pass's read and the offer as last read.
    pub(crate) fn retirement(&self, view: &View, now: &Objects) -> Option<Retirement> {
        if !self.suspends || !view.upgrades_served {
            return None;
        }
        let current = self.offer.as_ref().and_then(|o| o.current.as_deref());
        let on_offer = self.offer.as_ref().map_or(&[][..], |o| &o.on_offer);
        let upgrade = view.upgrade.as_ref();
        let plans = &view.plans;
        let served = view.plans_served;
        Some(retirement::still_needed(
            current, on_offer, upgrade, plans, served, now,
        ))
    }

    /// A Fleet deploy that waits on another manager's claim is warned of once per claim and
    /// Bundle generation, before the pass acts (a suspension through the values ends it).
    pub(crate) async fn say_blocked_deploy(&mut self, pass: &Pass) {
        if !self.suspends {
            return;
        }
        let (Some(kv), Some(chart)) = (&pass.objects.kubevirt, &pass.objects.chart) else {
            self.said.blocked = None;
            return;
        };
        let suspending = matches!(
            pass.decision,
            Decision::Suspend { .. } | Decision::Resuspend { .. }
        );
        let Some((key, said)) = monitoring::blocked_deploy_warning(kv, chart, suspending) else {
            self.said.blocked = None;
            return;
        };
        if self.said.blocked.as_ref() != Some(&key) {
            self.warn(Some(kv), &said).await;
            self.said.blocked = Some(key);
        }
    }

    /// "No longer needed" is said once, with a Normal Event; "needed again" in the log only.
    pub(crate) async fn say_retirement(&mut self, pass: &Pass) {
        let Some(r) = &pass.retirement else {
            return;
        };
        let gone = r.no_longer_needed();
        let line = r.line();
        if gone == self.said.retirement {
            return;
        }
        self.said.retirement = gone;
        if !gone {
            info!("resident guard: {line}");
            return;
        }
        // What it was decided from, and when: the offer is read every half hour only.
        let line = match &self.offer {
            Some(o) => format!(
                "{line} (read at {}: the server-version Setting, and the Versions in {})",
                o.at.round(jiff::Unit::Second).unwrap_or(o.at),
                self.cfg.intent.keys.kubevirt.namespace
            ),
            None => line,
        };
        info!(reason = NO_LONGER_NEEDED, "resident guard: {line}");
        if let Some(kv) = &pass.objects.kubevirt {
            let normal = EventKind::Normal;
            let about = regarding(Kind::KubeVirt, fields::reference(kv));
            self.event(about, normal, NO_LONGER_NEEDED, &line).await;
        }
    }

    /// The metrics after a pass (and a failed act); an upgrade under way unprotected is warned
    /// of once, and again only when that changes (another Upgrade, the hold on or off).
    pub(crate) async fn report(&mut self, pass: &Pass) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let seen = monitoring::Seen {
            kubevirt: pass.objects.kubevirt.as_ref(),
            chart: pass.objects.chart.as_ref(),
            upgrade: pass.view.upgrade.as_ref(),
            admission_hold: self.cfg.watch.as_ref().is_some_and(|w| w.admission_hold),
            held_after_failure: self.state.memory.held.is_some(),
            retirement: pass.retirement.as_ref(),
        };
        metrics.show(&monitoring::gauges(&seen));
        let last_pre = self.state.last_pre.as_deref();
        let last_pre = last_pre.unwrap_or("has not run for it");
        let Some((key, said)) = monitoring::unprotected_warning(&seen, last_pre) else {
            self.said.unprotected = None;
            return;
        };
        if self.said.unprotected.as_ref() == Some(&key) {
            return;
        }
        self.warn(seen.kubevirt, &said).await;
        if let Some(u) = &pass.view.upgrade {
            let upgrade = ObjectReference {
                namespace: Some(u.namespace.clone()),
                name: Some(u.name.clone()),
                uid: Some(u.uid.clone()),
                ..ObjectReference::default()
            };
            let about = regarding(Kind::Upgrade, upgrade);
            let note = &said.message;
            self.event(about, EventKind::Warning, said.reason, note)
                .await;
        }
        self.said.unprotected = Some(key);
    }
}
