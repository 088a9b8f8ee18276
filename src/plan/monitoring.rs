//! What the resident guard says of itself to its monitoring, from what the waiting loop read and
//! decided; `metrics` serves the numbers.

use serde_json::Value;

use super::fields::{KubeVirtRead, generation, identity};
use super::fleet_status::deploy_blocked_by;
use super::harvester_upgrade::{ALLOW_UNPROTECTED, Upgrade};
use super::ownership::ours;
use super::records::{describe, is_suspended, methods, methods_as_they_are};
use super::releases::Handling;
use super::retirement::Retirement;
use super::upgrade_progress::{key_of, upgrade_under_way};
use crate::warnings::{FLEET_DEPLOY_BLOCKED, UPGRADE_HELD_BY_POLICY, UPGRADE_UNPROTECTED, Warning};

/// What one pass of the loop read and remembers, as the metrics need it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub kubevirt: Option<&'a Value>,
    /// The ManagedChart, with the status Rancher copies from Fleet's Bundle.
    pub chart: Option<&'a Value>,
    pub upgrade: Option<&'a Upgrade>,
    /// The chart installed its admission policy (`ADMISSION_HOLD`).
    pub admission_hold: bool,
    /// The suspension is held after a failed upgrade (the loop's memory).
    pub held_after_failure: bool,
    /// Whether the guard is still needed (`None`: not known this pass).
    pub retirement: Option<&'a Retirement>,
}

/// The gauges, each 0 or 1 but the count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Our `[]` is on the KubeVirt CR.
    pub suspension_in_place: bool,
    /// An upgrade that needs the guard is under way and automated updates are still on.
    pub upgrade_unprotected: bool,
    /// That upgrade is held by the admission policy (before `NodesPrepared`).
    pub upgrade_held: bool,
    pub hold_after_failed_upgrade: bool,
    pub no_longer_needed: bool,
    /// Fleet's deploy of the ManagedChart waits on another manager's claim on the methods.
    pub fleet_deploy_blocked: bool,
    /// KubeVirt's own count of the VMIs its updater would move (outdated launchers, pending
    /// hot-plug or volume changes): fewer after each drain; at the restore, what the drains left.
    pub outdated_vmis: i64,
}

/// The Upgrade under way that needs the guard ([`Handling::None`]) while the CR's updates
/// are on, accepted ([`ALLOW_UNPROTECTED`]) or not. Updates are on when the methods are a list
/// that is not empty (absent and `[]` both mean none); a malformed list counts as on: nothing
/// says it is off.
fn updates_on_during<'a>(
    kubevirt: Option<&Value>,
    upgrade: Option<&'a Upgrade>,
) -> Option<&'a Upgrade> {
    let on = methods(kubevirt?).map_or(true, |m| m.is_some() && !is_suspended(&m));
    upgrade.filter(|u| on && upgrade_under_way(u) && u.handling() == Handling::None)
}

/// That Upgrade, unless its migrations are accepted: what the guard warns of.
fn unprotected<'a>(seen: &Seen<'a>) -> Option<&'a Upgrade> {
    updates_on_during(seen.kubevirt, seen.upgrade).filter(|u| !u.allow_unprotected)
}

pub fn gauges(seen: &Seen) -> Gauges {
    let kubevirt = seen.kubevirt;
    let suspension_in_place =
        kubevirt.is_some_and(|kv| ours(kv) && methods(kv).is_ok_and(|m| is_suspended(&m)));
    let unprotected = unprotected(seen);
    Gauges {
        suspension_in_place,
        upgrade_unprotected: unprotected.is_some(),
        upgrade_held: unprotected.is_some_and(|u| seen.admission_hold && !u.nodes_prepared),
        hold_after_failed_upgrade: seen.held_after_failure,
        no_longer_needed: seen.retirement.is_some_and(Retirement::no_longer_needed),
        fleet_deploy_blocked: kubevirt
            .zip(seen.chart)
            .and_then(|(kv, c)| deploy_blocked_by(kv, c))
            .is_some(),
        outdated_vmis: kubevirt
            .and_then(|kv| KubeVirtRead::of(kv).outdated())
            .unwrap_or(0),
    }
}

/// The command that accepts `u`'s migrations, as it runs (the resource by its full name: a
/// cluster may serve another `upgrade`).
fn accept(u: &Upgrade) -> String {
    format!(
        "kubectl -n {} annotate upgrades.harvesterhci.io {} {ALLOW_UNPROTECTED}=true",
        u.namespace, u.name
    )
}

/// The Warning for updates turned on while the upgrade with key `upgrade_key` is under way
/// (`line`: the decision's), with what the operator may do: accept a Harvester Upgrade's
/// migrations by the command that runs as printed; an add-on's plan has no such annotation.
pub fn turned_on_during_upgrade(line: &str, upgrade_key: &str, latest: Option<&Upgrade>) -> String {
    let latest = latest.filter(|u| key_of(u) == upgrade_key);
    let then = match latest {
        Some(u) => format!("To accept this upgrade's migrations: {}", accept(u)),
        None => "The add-on's UpgradePlan has no accept annotation: the guard restores at its end"
            .to_string(),
    };
    format!(
        "{line}: KubeVirt's updater would migrate the outdated VMs mid-upgrade; pre runs again \
         (the original recorded before the upgrade is kept for post). {then}"
    )
}

/// `status`'s verdict while an upgrade that needs the guard is under way with updates on: first,
/// before what the objects say of the suspension, since it is what the operator must act on.
/// `status` knows not whether the chart installed the policy: it says where it holds.
pub fn unprotected_verdict(kubevirt: Option<&Value>, upgrade: Option<&Upgrade>) -> Option<String> {
    let u = updates_on_during(kubevirt, upgrade)?;
    let now = describe(&methods_as_they_are(kubevirt?));
    let upgrade = format!(
        "Harvester Upgrade {} to {} is under way and KubeVirt's automated workload updates are still on ({now})",
        u.name, u.version
    );
    let accept = accept(u);
    Some(if u.allow_unprotected {
        format!(
            "MIGRATIONS ACCEPTED: {upgrade}; it carries {ALLOW_UNPROTECTED}=true: the admission policy lets it pass and the guard does not suspend for it; once KubeVirt is upgraded its workload updater migrates the VMs while the nodes drain"
        )
    } else if !u.nodes_prepared {
        format!(
            "HELD BY THE POLICY: {upgrade}; the chart's admission policy (where installed) holds it before NodesPrepared until the guard suspends them; why the guard has not: its Warning below. To go on unprotected: {accept}"
        )
    } else {
        format!(
            "UNPROTECTED: {upgrade}; nothing holds it (it is past NodesPrepared): once KubeVirt is upgraded its workload updater migrates the VMs while the nodes drain; why the guard has not suspended: its Warning below. To accept the migrations: {accept}"
        )
    })
}

/// What an unprotected upgrade's Warning is said again on: a new Upgrade, or the policy's hold
/// beginning or ending (the words may change every pass).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnprotectedKey {
    pub upgrade: String,
    pub held: bool,
}

/// The Warning of an upgrade under way unprotected, with the key it is said once for.
/// `last_pre`: what the guard's last `pre` for it ended with, in words.
pub fn unprotected_warning(seen: &Seen, last_pre: &str) -> Option<(UnprotectedKey, Warning)> {
    let u = unprotected(seen)?;
    let kv = seen.kubevirt?;
    let held = seen.admission_hold && !u.nodes_prepared;
    let (_, kv_ns, kv_name) = identity(kv);
    let now = describe(&methods_as_they_are(kv));
    let annotate = accept(u);
    let upgrade = format!("{}/{}", u.namespace, u.name);
    let head = format!(
        "Harvester Upgrade {upgrade} to {} is under way and KubeVirt {kv_ns}/{kv_name} still has \
         workloadUpdateMethods {now}: the guard's last pre {last_pre}",
        u.version
    );
    let (reason, message) = if held {
        let message = format!(
            "{head}. The admission policy holds the upgrade before NodesPrepared (the next step \
             upgrades KubeVirt) until they are suspended; the guard tries again at the next read. \
             To accept the migrations instead (the policy lets it pass, the guard stops trying): \
             {annotate}"
        );
        (UPGRADE_HELD_BY_POLICY, message)
    } else {
        let why = if seen.admission_hold {
            "it is past NodesPrepared"
        } else {
            "the chart's admission policy is off (admissionPolicy.enabled=false)"
        };
        let message = format!(
            "{head}. Nothing holds the upgrade ({why}): once KubeVirt is upgraded, its workload \
             updater migrates the VMs while the nodes drain; the guard tries again at the next \
             read, or run pre by hand (hack/job.sh run pre). To accept the migrations instead \
             (the guard stops trying): {annotate}"
        );
        (UPGRADE_UNPROTECTED, message)
    };
    Some((
        UnprotectedKey { upgrade, held },
        Warning { reason, message },
    ))
}

/// The Warning of a Fleet deploy that waits on another manager's claim, with the key it is said
/// once for: the claim's manager and the Bundle's generation (a new spec that meets it too is
/// said again). `suspending`: the guard's `pre` runs now, and its values override ends the
/// conflict at the fleet-agent's next retry.
pub fn blocked_deploy_warning(
    kubevirt: &Value,
    chart: &Value,
    suspending: bool,
) -> Option<(String, Warning)> {
    let conflict = deploy_blocked_by(kubevirt, chart)?;
    let (_, ns, name) = identity(chart);
    let generation = generation(chart);
    let key = format!("{}@{}", conflict.manager, generation.unwrap_or(0));
    let then = if suspending {
        "; the guard suspends now through the values, which render the same value: the \
         fleet-agent's next retry deploys"
    } else {
        ""
    };
    let message = format!(
        "Fleet has not deployed ManagedChart {ns}/{name}'s current spec, and its deploy waits on \
         a claim (a conflict keeps the Bundle WaitApplied; only the fleet-agent's log names it): \
         {conflict}{then}"
    );
    let warning = Warning {
        reason: FLEET_DEPLOY_BLOCKED,
        message,
    };
    Some((key, warning))
}

#[cfg(test)]
mod tests;
