//! Whether the resident guard is still needed: the offer read again when it is due and the
//! cluster is quiet, and "no longer needed" said once. The answer is decided in
//! [`crate::plan::retirement::still_needed`]; this is its I/O.

use serde_json::Value;
use tracing::info;

use super::{Loop, OFFER_EVERY};
use crate::cluster::EventKind;
use crate::error::Error;
use crate::plan::ownership::anything_of_ours;
use crate::plan::retirement::{self, Retirement};
use crate::plan::upgrade_progress::running;
use crate::upgrades::{self, View};
use crate::vocabulary::Objects;
use crate::warnings::NO_LONGER_NEEDED;

impl Loop<'_> {
    /// The resident guard: whether it is still needed, the offer read again when it is due and
    /// the cluster is quiet (no upgrade under way, nothing of ours: otherwise the answer is
    /// "needed" whatever the offer says).
    pub(super) async fn retirement(
        &mut self,
        view: &View,
        now: &Objects,
    ) -> Result<Option<Retirement>, Error> {
        if !self.suspends || !view.upgrades_served {
            return Ok(None);
        }
        let quiet = running(view.upgrade.as_ref(), &view.plans).is_none() && !anything_of_ours(now);
        let due = self
            .offer
            .as_ref()
            .is_none_or(|(_, _, at)| at.elapsed() >= OFFER_EVERY);
        if !quiet {
            // After the upgrade, the cluster's version and the offer have moved: read again.
            self.offer = None;
        } else if due {
            let (current, on_offer) = upgrades::read_offer(self.cluster, self.cfg).await?;
            self.offer = Some((current, on_offer, tokio::time::Instant::now()));
        }
        let (current, on_offer) = match &self.offer {
            Some((c, o, _)) => (c.as_deref(), o.as_slice()),
            None => (None, &[][..]),
        };
        Ok(Some(retirement::still_needed(
            current,
            on_offer,
            view.upgrade.as_ref(),
            &view.plans,
            view.plans_served,
            now,
        )))
    }

    /// Says "no longer needed" once (a log line and a Normal Event on the KubeVirt CR), and
    /// "needed again" in the log if that changes.
    pub(super) async fn say_retirement(
        &mut self,
        retirement: Option<&Retirement>,
        kubevirt: Option<&Value>,
    ) {
        let Some(r) = retirement else {
            return;
        };
        match (r.no_longer_needed(), self.retirement_said) {
            (true, false) => {
                let line = r.line();
                info!(reason = NO_LONGER_NEEDED, "resident guard: {line}");
                if let Some(kv) = kubevirt {
                    self.cluster
                        .event(kv, EventKind::Normal, NO_LONGER_NEEDED, &line)
                        .await;
                }
                self.retirement_said = true;
            }
            (false, true) => {
                info!("resident guard: {}", r.line());
                self.retirement_said = false;
            }
            _ => {}
        }
    }
}
