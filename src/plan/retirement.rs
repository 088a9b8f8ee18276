//! Whether the guard is still needed on this cluster, so that an operator knows when to retire
//! it. Harvester upgrades one minor at a time, so the releases the cluster can upgrade to next
//! are its own minor's later patches and the next minor's; of those, [`Handling`] says which
//! leave the methods alone and which patch the CR themselves (one release; the add-on, on any
//! release): both need the guard, the second because their patch is a claim that Fleet's deploy
//! of the new chart stops on (harvester#10677, #10899).

use serde::Serialize;

use super::harvester_upgrade::Upgrade;
use super::ownership::anything_of_ours;
use super::releases::{self, HARD_CODED_RESTORE, Handling, LAST_WITHOUT_HANDLING, parse_version};
use super::upgrade_progress::{PlanView, running};
use crate::vocabulary::Objects;

/// What the answer is made of, as read (see [`still_needed`]).
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// Harvester's own version (the `server-version` Setting).
    pub current: Option<&'a str>,
    /// The releases on offer newer than it (`Version` objects), with their handling.
    pub on_offer: &'a [(String, Handling)],
    /// The add-on's `UpgradePlan` resource is served.
    pub addon: bool,
    pub ours: bool,
    pub under_way: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "why", rename_all = "camelCase")]
pub enum Retirement {
    #[serde(serialize_with = "as_text")]
    Needed(Need),
    #[serde(serialize_with = "as_text")]
    NoLongerNeeded(Covered),
}

/// The reasons, in the report's JSON, as the words they say.
fn as_text<S: serde::Serializer>(why: &impl std::fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(why)
}

/// Why the guard is still needed; its `Display` says each reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    Ours,
    UnderWay(String),
    VersionUnknown,
    NotARelease(String),
    EarlyRelease { current: String, next: String },
    OnOffer(String),
    V180Next { current: String },
    AddOn,
}

/// Why the guard is no longer needed: every release the cluster can upgrade to next suspends
/// and restores the methods itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered {
    pub current: String,
    /// The minors it can reach (`v1.9.x and v1.10.x`).
    pub next: String,
    pub offer: String,
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Need::Ours => f.write_str("a suspension of ours is in place: post restores it first"),
            Need::UnderWay(u) => write!(f, "{u} is under way"),
            Need::VersionUnknown => f.write_str(
                "Harvester's own version (the server-version Setting) is not known, so neither \
                 are the releases it can upgrade to next",
            ),
            Need::NotARelease(text) => write!(
                f,
                "Harvester's own version {text:?} is not a release, so the releases it can \
                 upgrade to next are not known"
            ),
            Need::EarlyRelease { current, next } => write!(
                f,
                "Harvester {current} can upgrade next to {next}, among them releases {}, which \
                 do nothing to the methods themselves",
                releases::without_handling()
            ),
            Need::OnOffer(v) => {
                write!(f, "{v} is on offer, and does nothing to the methods itself")
            }
            Need::V180Next { current } => write!(
                f,
                "Harvester {current} can upgrade next to {}, which patches the KubeVirt CR to [] \
                 itself: a claim that Fleet's deploy of its chart stops on unless the guard's \
                 values render [] too (harvester#10677)",
                releases::name(HARD_CODED_RESTORE)
            ),
            Need::AddOn => f.write_str(
                "the upgrade add-on is installed (its UpgradePlans are served), which patches the \
                 KubeVirt CR to [] itself: a claim that Fleet's deploy of the new chart stops on \
                 unless the guard's values render [] too (harvester#10899)",
            ),
        }
    }
}

impl std::fmt::Display for Covered {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "Harvester {}: every release it can upgrade to next ({}; {}) suspends the methods \
             itself and restores them",
            self.current, self.next, self.offer
        )
    }
}

impl Retirement {
    pub fn no_longer_needed(&self) -> bool {
        matches!(self, Retirement::NoLongerNeeded(_))
    }

    /// The line that says it (`status`, the log, the Event).
    pub fn line(&self) -> String {
        match self {
            Retirement::Needed(why) => format!("the guard is still needed: {why}"),
            Retirement::NoLongerNeeded(why) => format!(
                "the guard is no longer needed: {why}; it can be uninstalled (helm uninstall, or \
                 the add-on disabled)"
            ),
        }
    }
}

pub fn retirement(seen: &Facts) -> Retirement {
    use Retirement::{Needed, NoLongerNeeded};
    if seen.ours {
        return Needed(Need::Ours);
    }
    if let Some(u) = seen.under_way {
        return Needed(Need::UnderWay(u.to_string()));
    }
    let Some(text) = seen.current else {
        return Needed(Need::VersionUnknown);
    };
    let current = text.to_string();
    let Some(now @ (major, minor, _)) = parse_version(text) else {
        return Needed(Need::NotARelease(current));
    };
    let next = format!("v{major}.{minor}.x and v{major}.{}.x", minor + 1);
    if now < LAST_WITHOUT_HANDLING {
        return Needed(Need::EarlyRelease { current, next });
    }
    if let Some((v, _)) = seen.on_offer.iter().find(|(_, h)| *h == Handling::None) {
        return Needed(Need::OnOffer(v.clone()));
    }
    // The hard-coded restore's release is reachable from its previous minor only (one minor at a
    // time), or when it is on offer.
    let (hard_major, hard_minor, _) = HARD_CODED_RESTORE;
    let v180_next = (now < HARD_CODED_RESTORE && (major, minor + 1) >= (hard_major, hard_minor))
        || seen
            .on_offer
            .iter()
            .any(|(_, h)| *h == Handling::PatchAndHardCodedRestore);
    if v180_next {
        return Needed(Need::V180Next { current });
    }
    if seen.addon {
        return Needed(Need::AddOn);
    }
    let names: Vec<&str> = seen.on_offer.iter().map(|(v, _)| v.as_str()).collect();
    let offer = match names.join(", ") {
        none if none.is_empty() => "none on offer".to_string(),
        names => format!("on offer: {names}"),
    };
    NoLongerNeeded(Covered {
        current,
        next,
        offer,
    })
}

/// Whether the guard is still needed, from what a pass or `status` read.
pub fn still_needed(
    current: Option<&str>,
    on_offer: &[(String, Handling)],
    upgrade: Option<&Upgrade>,
    plans: &[PlanView],
    addon: bool,
    objects: &Objects,
) -> Retirement {
    let under_way = running(upgrade, plans).map(|n| n.words);
    retirement(&Facts {
        current,
        on_offer,
        addon,
        ours: anything_of_ours(objects),
        under_way: under_way.as_deref(),
    })
}

#[cfg(test)]
mod tests;
