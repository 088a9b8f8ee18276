//! The one read of the cluster's upgrades, for the gate, `status` and the waiting loop alike.

use crate::cluster::Cluster;
use crate::config::Config;
use crate::error::Error;
use crate::model::{Kind, ObjectKey, Target};
use crate::plan::harvester_upgrade::{self, LATEST_LABEL, Upgrade};
use crate::plan::pre_advice::Coming;
use crate::plan::releases::Handling;
use crate::plan::upgrade_progress::{self, PlanView};
use crate::vocabulary::{Phase, Refusal};

/// What the cluster says of Harvester's upgrades; empty on a cluster without Harvester.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub upgrade: Option<Upgrade>,
    /// `post`: the add-on's UpgradePlans (but the one that runs this post, `UPGRADE_PLAN`).
    pub plans: Vec<PlanView>,
    /// Every release on offer, newest first (`pre`'s "exactly one release on offer").
    pub on_offer: Vec<(String, Handling)>,
    /// Whether Upgrades and UpgradePlans are served (the waiting loop watches only what is).
    pub upgrades_served: bool,
    pub plans_served: bool,
    /// Harvester's own version (the `server-version` Setting), where it was read.
    pub current: Option<String>,
}

impl View {
    pub fn coming(&self) -> Coming {
        let addon = self.plans.iter().find(|p| p.under_way());
        let addon = addon.map(|p| (p.name.as_str(), p.version.as_str()));
        Coming::of(self.upgrade.as_ref(), addon, &self.on_offer)
    }

    /// The releases on offer that handle the methods themselves, newest first.
    pub fn offered(&self) -> Vec<(String, Handling)> {
        let handled = self.on_offer.iter().filter(|(_, h)| *h != Handling::None);
        handled.cloned().collect()
    }

    pub fn offered_line(&self) -> Option<String> {
        let offered = self.offered();
        let (version, handling) = offered.first()?;
        let list: Vec<&str> = offered.iter().map(|(v, _)| v.as_str()).collect();
        let list = list.join(", ");
        let handling = handling.describe();
        let line = format!("the cluster offers upgrades to {list}: Harvester {version} {handling}");
        Some(line)
    }
}

/// Upgrades and Versions sit in the KubeVirt CR's namespace; a kind not served means no Harvester.
pub async fn read(cluster: &Cluster, cfg: &Config) -> Result<View, Error> {
    let ns = &cfg.intent.keys.kubevirt.namespace;
    let selector = format!("{LATEST_LABEL}=true");
    // One after the other, on the one pooled connection: at once, the second opens a connection
    // of its own, and that costs more than the list (a list from the cache takes under 1 ms).
    let upgrades = cluster
        .list(Kind::Upgrade, Some(ns), Some(&selector))
        .await?;
    let upgrades_served = upgrades.is_some();
    let upgrades = upgrades.unwrap_or_default();
    let versions = match cfg.intent.phase {
        Phase::Post => None,
        _ => cluster.list(Kind::Version, Some(ns), None).await?,
    }
    .unwrap_or_default();
    let upgrade = harvester_upgrade::latest(&upgrades).map_err(|reason| {
        let first = upgrades.first();
        let name = first.and_then(|u| u["metadata"]["name"].as_str());
        let namespace = ns.clone();
        let name = name.unwrap_or("").to_string();
        let target = Target::new(Kind::Upgrade, &ObjectKey { namespace, name });
        Refusal { target, reason }
    })?;
    // `status` says whether the guard is still needed: the version decides, even with no offer.
    let wanted = !versions.is_empty() || (cfg.intent.phase == Phase::Status && upgrades_served);
    let current = match wanted {
        true => cluster.harvester_setting(SERVER_VERSION).await?,
        false => None,
    };
    // `status`'s read-only RBAC reads no UpgradePlan, only whether they are served (installed).
    let (plans, plans_served) = match cfg.intent.phase {
        Phase::Pre | Phase::Post => {
            let plans = cluster.list(Kind::UpgradePlan, None, None).await?;
            let served = plans.is_some();
            (plans.unwrap_or_default(), served)
        }
        _ => (Vec::new(), cluster.served(Kind::UpgradePlan).await?),
    };
    Ok(View {
        upgrade,
        on_offer: harvester_upgrade::on_offer(&versions, current.as_deref()),
        plans: upgrade_progress::plans(&plans, cfg.upgrade_plan.as_deref()),
        upgrades_served,
        plans_served,
        current,
    })
}

/// The resident guard's: the cluster's own version and the releases on offer (what "still
/// needed" is decided on); nothing where Harvester's resources are not served.
pub async fn read_offer(
    cluster: &Cluster,
    cfg: &Config,
) -> Result<(Option<String>, Vec<(String, Handling)>), Error> {
    let ns = &cfg.intent.keys.kubevirt.namespace;
    let Some(versions) = cluster.list(Kind::Version, Some(ns), None).await? else {
        return Ok((None, Vec::new()));
    };
    let current = cluster.harvester_setting(SERVER_VERSION).await?;
    let on_offer = harvester_upgrade::on_offer(&versions, current.as_deref());
    Ok((current, on_offer))
}

const SERVER_VERSION: &str = "server-version";
