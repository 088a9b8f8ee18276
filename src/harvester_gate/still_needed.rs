//! Whether the guard is still needed ([`crate::plan::retirement`]): the resident guard's read of
//! what the cluster can upgrade to next, and the answer from what a pass or `status` read.

use super::{SERVER_VERSION, View, anything_of_ours};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::error::Error;
use crate::model::Kind;
use crate::plan::harvester_upgrade::{self, Handling};
use crate::plan::records::methods;
use crate::plan::retirement::{self, Retirement, Seen};
use crate::plan::watch_decision::running;
use crate::vocabulary::Objects;

/// The resident guard's read of what the cluster can upgrade to next (for [`retirement`]): its
/// own version and the releases on offer; nothing where Harvester's resources are not served.
pub async fn read_offer(
    cluster: &Cluster,
    cfg: &Config,
) -> Result<(Option<String>, Vec<(String, Handling)>), Error> {
    let ns = &cfg.intent.keys.kubevirt.namespace;
    let Some(versions) = cluster.list_harvester(Kind::Version, ns, None).await? else {
        return Ok((None, Vec::new()));
    };
    let current = cluster.harvester_setting(SERVER_VERSION).await?;
    let on_offer = harvester_upgrade::on_offer(&versions, current.as_deref());
    Ok((current, on_offer))
}

/// Whether the guard is still needed ([`retirement::retirement`]), from what a pass or `status` read:
/// the cluster's version and the releases on offer, the add-on's resource, the objects.
pub fn retirement(
    current: Option<&str>,
    on_offer: &[(String, Handling)],
    view: &View,
    objects: &Objects,
) -> Retirement {
    let methods = objects
        .kubevirt
        .as_ref()
        .and_then(|kv| methods(kv).ok().flatten());
    let under_way = running(view.upgrade.as_ref(), &view.plans).map(|(_, d)| d);
    retirement::retirement(&Seen {
        current,
        on_offer,
        methods: &methods,
        addon: view.plans_served,
        ours: anything_of_ours(objects),
        under_way: under_way.as_deref(),
    })
}
