//! What `pre` says of the coming upgrade before it writes (`status` too): is it needed, is it late.

use serde::Serialize;
use serde_json::Value;

use super::fields::KubeVirtRead;
use super::harvester_upgrade::{Backup, Upgrade, blind_value};
use super::migrations::Migration;
use super::records::{describe, is_suspended};
use super::releases::{self, Handling};
use super::upgrade_progress::upgrade_under_way as under_way;

/// The release the cluster upgrades to, as far as it is known.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Coming {
    Upgrade { describe: String, version: String },
    Offered { version: String },
    AddOn { plan: String, version: String },
    Unknown { on_offer: Vec<String> },
}

impl Coming {
    /// An Upgrade under way wins, then the add-on's plan under way, then the one release on offer.
    pub fn of(
        upgrade: Option<&Upgrade>,
        addon: Option<(&str, &str)>,
        on_offer: &[(String, Handling)],
    ) -> Coming {
        let upgrade = upgrade.filter(|u| under_way(u) && !u.version.is_empty());
        match (upgrade, addon, on_offer) {
            (Some(u), ..) => Coming::Upgrade {
                describe: u.describe(),
                version: u.version.clone(),
            },
            (None, Some((plan, version)), _) => Coming::AddOn {
                plan: plan.into(),
                version: version.into(),
            },
            (None, None, [(version, _)]) => Coming::Offered {
                version: version.clone(),
            },
            _ => Coming::Unknown {
                on_offer: on_offer.iter().map(|(v, _)| v.clone()).collect(),
            },
        }
    }
}

/// `pre`'s answer to "is the guard needed for this upgrade?" (`status` gives it too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "why", rename_all = "camelCase")]
pub enum Advice {
    /// `pre` writes nothing (unless `PRE_EVEN_IF_NOT_NEEDED`).
    NotNeeded(String),
    Needed(String),
    /// The coming release is not known: `pre` acts.
    Unknown(String),
}

impl Advice {
    pub fn line(&self) -> &str {
        match self {
            Advice::NotNeeded(s) | Advice::Needed(s) | Advice::Unknown(s) => s,
        }
    }
}

/// Whether `pre` is needed for `coming`: by what its own handling does to the methods.
pub fn advise(coming: &Coming, methods: &Option<Value>) -> Advice {
    let now = describe(methods);
    let (handling, name) = match coming {
        Coming::Upgrade { describe, version } => (Handling::of(version), describe.clone()),
        Coming::Offered { version } => {
            let name = format!("Harvester {version}, the one release on offer");
            (Handling::of(version), name)
        }
        Coming::AddOn { plan, version } => {
            let name = format!("the upgrade add-on's UpgradePlan {plan} (to {version})");
            (Handling::PatchAndHardCodedRestore, name)
        }
        Coming::Unknown { on_offer } => return unknown(on_offer),
    };
    match handling {
        Handling::BackupAndRestore => Advice::NotNeeded(format!(
            "pre is not needed: {name} suspends the methods itself and restores what is there \
             now ({now}) at its cleanup"
        )),
        // Whatever the methods: its own suspension is a patch of the CR, an `Update` claim on
        // the `[]` that Fleet's deploy of the new chart (the chart's `[LiveMigrate]`, applied
        // without force) conflicts with, and the upgrade stops there (harvester#10677 in that
        // release, #10899 with the add-on). The guard's values override makes the chart render
        // that same `[]`: nothing to conflict on.
        Handling::PatchAndHardCodedRestore => {
            let end = match methods.as_ref() == Some(&blind_value()) {
                true => String::new(),
                false => format!(
                    "; and its end writes a hard-coded [LiveMigrate], not what is there now \
                     ({now}): post puts that back after it"
                ),
            };
            Advice::Needed(format!(
                "pre is needed: {name} patches the KubeVirt CR to [] itself, a claim that Fleet's \
                 deploy of the new chart meets and stops on (harvester#10899) unless the chart \
                 renders [] too, which the guard's values override does{end}"
            ))
        }
        Handling::None => Advice::Needed(format!(
            "pre is needed: {name} does nothing to the methods itself"
        )),
    }
}

fn unknown(on_offer: &[String]) -> Advice {
    let offer = match on_offer {
        [] => "no release on offer".to_string(),
        list => format!("{} releases on offer ({})", list.len(), list.join(", ")),
    };
    Advice::Unknown(format!(
        "pre is needed unless the upgrade goes to {} (Harvester suspends and restores any methods \
         itself): the release the cluster upgrades to is not known (no Upgrade under way, \
         {offer}), so pre suspends",
        releases::restoring_themselves()
    ))
}

/// Why `pre` comes late: the wave of workload updates has begun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Late {
    /// The Upgrade under way in a state in which KubeVirt is (being) upgraded: its description.
    pub upgrade: Option<String>,
    /// The KubeVirt CR's `status.outdatedVirtualMachineInstanceWorkloads`, if above zero.
    pub outdated: Option<u64>,
}

pub fn late(upgrade: Option<&Upgrade>, kubevirt: Option<&Value>) -> Option<Late> {
    // KubeVirt is upgraded in these states (the apply-manifests job runs in the first).
    let late_states = ["UpgradingSystemServices", "UpgradingNodes"];
    let late = |u: &&Upgrade| !u.deleting && late_states.contains(&u.state.as_str());
    let upgrade = upgrade.filter(late).map(Upgrade::describe);
    let outdated = kubevirt.and_then(|kv| KubeVirtRead::of(kv).outdated());
    let outdated = outdated
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| *n > 0);
    (upgrade.is_some() || outdated.is_some()).then_some(Late { upgrade, outdated })
}

impl Late {
    pub fn message(&self, migrations: Result<&[Migration], &str>) -> String {
        let mut why = Vec::new();
        if let Some(u) = &self.upgrade {
            why.push(format!("{u} has reached KubeVirt's upgrade"));
        }
        if let Some(n) = self.outdated {
            why.push(format!(
                "the KubeVirt CR counts {n} outdated workload{} \
                 (status.outdatedVirtualMachineInstanceWorkloads)",
                if n == 1 { "" } else { "s" }
            ));
        }
        let under_way = match migrations {
            Ok([]) => "no workload-update migration is under way".to_string(),
            Ok(list) => format!("workload-update migrations under way: {}", names(list)),
            Err(e) => format!("the workload-update migrations under way are not known ({e})"),
        };
        format!(
            "pre came late: {}. The suspension stops the rest of the wave, not the migrations \
             already created; {under_way}",
            why.join("; ")
        )
    }
}

pub fn names(list: &[Migration]) -> String {
    let each = |m: &Migration| format!("{}/{} ({})", m.namespace, m.name, m.phase);
    let mut names: Vec<String> = list.iter().take(10).map(each).collect();
    if list.len() > 10 {
        names.push(format!("and {} more", list.len() - 10));
    }
    names.join(", ")
}

/// `pre`'s decision before any write.
#[derive(Debug, Clone, PartialEq)]
pub enum PreGate {
    Proceed(Vec<String>),
    /// Harvester's upgrade suspended the updates and will restore them itself: recording its `[]`
    /// as the original would turn them off for good (`post` would put `[]` back after its cleanup).
    LeaveToHarvester(String),
}

/// `ours`: a rerun keeps its suspension; `methods`, with `foreign`: another suspender's original.
pub fn pre_gate(
    upgrade: Option<&Upgrade>,
    ours: bool,
    methods: &Option<Value>,
    foreign: bool,
) -> PreGate {
    let Some(u) = upgrade.filter(|u| u.cleanup_pending()) else {
        return PreGate::Proceed(Vec::new());
    };
    let it = u.describe();
    if ours {
        return PreGate::Proceed(vec![format!(
            "{it} is under way: post waits for its cleanup before it restores"
        )]);
    }
    // The hard-coded restore's release keeps no backup: its `[]` on the CR is its suspension,
    // never an original (`foreign` says where `pre` takes the original from instead), and `pre`
    // goes on: its values override is what lets the retried deploy of the new chart past that
    // release's claim (harvester#10677).
    if u.backup != Backup::None {
        let now = describe(methods);
        let backup = u.backup.describe();
        let state = match is_suspended(methods) {
            true => "the methods are [] (its suspension)".to_string(),
            false => format!(
                "the methods are {now} now (its values override [] has not been rendered yet, or \
                 someone changed them)"
            ),
        };
        return PreGate::LeaveToHarvester(format!(
            "{it} already suspended the updates and holds the original ({backup}); its cleanup \
             restores it, so pre writes nothing: {state}"
        ));
    }
    PreGate::Proceed(vec![proceed_note(u, foreign)])
}

fn proceed_note(u: &Upgrade, foreign: bool) -> String {
    let (done, then) = match u.handling() {
        Handling::PatchAndHardCodedRestore if foreign => (
            "has suspended the methods already",
            "its cleanup will write [LiveMigrate], not that original",
        ),
        Handling::PatchAndHardCodedRestore => (
            "has not suspended the methods yet",
            "its cleanup will write [LiveMigrate]",
        ),
        _ => (
            "has not suspended the methods yet",
            "it will back up this [] and write it back at its cleanup",
        ),
    };
    format!(
        "{} is under way and {done}: {then}; post waits for its cleanup, then restores the \
         original recorded here",
        u.describe()
    )
}

#[cfg(test)]
mod tests;
