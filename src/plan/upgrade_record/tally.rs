//! The count of the upgrade under way, from its watches' events: each migration counted once by
//! its cause (across lists, restarts and a new pod), each VM shut down named with its reason.
//!
//! What is held is bounded by what exists, not by what happened: the uid, hashed to 64 bits, of
//! each migration made during the upgrade while it exists (KubeVirt keeps five finished ones per
//! VMI and deletes the rest; one made before is never held), a few fields per VMI; the figures
//! themselves are the record's counters.

use std::collections::HashMap;

use jiff::Timestamp;

use super::seen::{Cause, MigrationSeen, Outcome, VmiSeen};
use super::{Counting, NAMED, Reason, Record, ShutDownVm};

/// One watch event, as the tally takes it (`kube::runtime::watcher::Event` of a migration or a
/// VMI, read by `seen`).
#[derive(Debug, Clone)]
pub enum Seen {
    Migration(MigrationSeen),
    MigrationDeleted(MigrationSeen),
    Vmi(VmiSeen),
    VmiDeleted(VmiSeen),
    /// A list begins (a watch's start, or a relist after an error or the server's 410): what it
    /// holds is all there is at its end.
    ListBegins(Listed),
    ListDone(Listed),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    Migrations,
    Vmis,
}

/// A migration made during the upgrade (created at or after its start) that exists, as counted.
#[derive(Debug, Clone, Copy)]
struct Known {
    finished: bool,
    workload_update_after_restore: bool,
    /// Seen since the list under way began (what is not at its end is gone).
    listed: bool,
}

/// A VMI that exists, as last seen.
#[derive(Debug, Clone, Default)]
struct Vm {
    running: bool,
    live_migratable: Option<bool>,
    not_migratable_reason: Box<str>,
    outdated: bool,
    node: Box<str>,
    /// One of its migrations failed during the upgrade.
    migration_failed: bool,
    /// Seen since the list under way began (as [`Known::listed`]).
    listed: bool,
}

impl Vm {
    fn of(v: VmiSeen, migration_failed: bool) -> Vm {
        Vm {
            running: v.running(),
            live_migratable: v.live_migratable,
            not_migratable_reason: v.not_migratable_reason.into(),
            outdated: v.outdated,
            node: v.node.into(),
            migration_failed,
            listed: true,
        }
    }

    fn outdated_running(&self) -> bool {
        self.running && self.outdated
    }

    fn outdated_migratable(&self) -> bool {
        self.outdated_running() && self.live_migratable == Some(true)
    }

    /// Why it was shut down, from what was seen of it last: a failed migration first (the
    /// drain then shuts it down), then not live-migratable (Harvester's pre-drain), then the
    /// updater's eviction (`Evict` listed, outdated), else stopped (a person, its guest).
    fn reason(&self, evict_listed: bool) -> Reason {
        if self.migration_failed {
            Reason::FailedMigration
        } else if self.live_migratable == Some(false) {
            Reason::NotLiveMigratable
        } else if self.outdated && evict_listed {
            Reason::EvictedByTheUpdater
        } else {
            Reason::Stopped
        }
    }
}

/// The record of the upgrade under way and what counting it needs.
#[derive(Debug)]
pub struct Tally {
    pub record: Record,
    /// Something changed since the record was last kept.
    pub changed: bool,
    /// The methods list `Evict` (the updater then evicts what it does not migrate).
    pub evict_listed: bool,
    migrations: HashMap<u64, Known>,
    /// By `namespace/name`.
    vms: HashMap<Box<str>, Vm>,
    /// A list of each kind is under way (what it does not list is gone at its end).
    listing_migrations: bool,
    listing_vms: bool,
    vms_listed: bool,
    /// The newest creation among the migrations counted, and those counted in its second.
    through: Option<Timestamp>,
    at_through: Vec<u64>,
    /// What the pod before this one had counted (its record's `counting`).
    resumed: Option<Counting>,
    outdated_now: u64,
    outdated_migratable_now: u64,
}

impl Tally {
    /// A new record, or one a pod before this one kept (it goes on from there).
    pub fn new(record: Record) -> Tally {
        let resumed = record.counting.clone();
        let (through, at_through) = resumed.as_ref().map_or((None, vec![]), |c| {
            let keys = c
                .at_through
                .iter()
                .filter_map(|k| u64::from_str_radix(k, 16).ok());
            (c.through, keys.collect())
        });
        Tally {
            record,
            changed: true,
            evict_listed: false,
            migrations: HashMap::new(),
            vms: HashMap::new(),
            listing_migrations: false,
            listing_vms: false,
            vms_listed: resumed.as_ref().is_some_and(|c| c.vms_listed),
            through,
            at_through,
            resumed,
            outdated_now: 0,
            outdated_migratable_now: 0,
        }
    }

    pub fn observe(&mut self, seen: Seen) {
        match seen {
            Seen::Migration(m) => self.migration(m),
            Seen::MigrationDeleted(m) => {
                self.migrations.remove(&m.key);
            }
            Seen::Vmi(v) => self.vmi(v),
            Seen::VmiDeleted(v) => {
                if let Some(vm) = self.forget(&v.name) {
                    self.shut_down_if_running(v.name, &vm, None);
                }
            }
            Seen::ListBegins(Listed::Migrations) => {
                self.listing_migrations = true;
                self.migrations.values_mut().for_each(|k| k.listed = false);
            }
            Seen::ListBegins(Listed::Vmis) => {
                self.listing_vms = true;
                self.vms.values_mut().for_each(|v| v.listed = false);
            }
            Seen::ListDone(Listed::Migrations) => {
                if std::mem::take(&mut self.listing_migrations) {
                    self.migrations.retain(|_, k| k.listed);
                }
            }
            Seen::ListDone(Listed::Vmis) => self.vms_listed_done(),
        }
    }

    /// The workload-update migrations made since the restore that have not finished: the
    /// record waits for them.
    pub fn wave_running(&self) -> usize {
        let running = |k: &&Known| k.workload_update_after_restore && !k.finished;
        self.migrations.values().filter(running).count()
    }

    /// VMIs running on an outdated launcher now.
    pub fn outdated_now(&self) -> u64 {
        self.outdated_now
    }

    /// What a new pod needs to go on counting where this one stopped.
    pub fn counting(&self) -> Counting {
        let open = self.migrations.iter().filter(|(_, k)| !k.finished);
        let mut open: Vec<String> = open.map(|(key, _)| format!("{key:016x}")).collect();
        open.sort();
        Counting {
            through: self.through,
            at_through: self
                .at_through
                .iter()
                .map(|k| format!("{k:016x}"))
                .collect(),
            open_overflow: open.len().saturating_sub(super::OPEN_KEPT),
            open: open.into_iter().take(super::OPEN_KEPT).collect(),
            vms_listed: self.vms_listed,
        }
    }

    fn migration(&mut self, m: MigrationSeen) {
        let failed_now = m.outcome == Outcome::Failed;
        let finished = m.outcome != Outcome::Unfinished;
        if let Some(known) = self.migrations.get_mut(&m.key) {
            let failed = !known.finished && failed_now;
            known.finished |= finished;
            known.listed = true;
            if failed {
                self.failed(&m);
            }
            return;
        }
        // Made before the upgrade: never in the figures, and nothing to hold of it (a cluster's
        // 30,000 old migrations would hold 1 MiB of keys).
        if m.created.is_some_and(|t| t < self.record.started) {
            return;
        }
        let (counted_before, open_before) = self.counted_before(&m);
        let after_restore = m.cause == Cause::WorkloadUpdate
            && self
                .record
                .restored_at
                .zip(m.created)
                .is_some_and(|(r, c)| c >= r);
        if !counted_before {
            self.count(&m, after_restore);
        }
        let failure_uncounted = !counted_before || open_before;
        if failed_now && failure_uncounted {
            self.failed(&m);
        }
        let known = Known {
            finished,
            workload_update_after_restore: after_restore,
            listed: true,
        };
        self.migrations.insert(m.key, known);
    }

    /// Counted by the pod before this one, and whether it was unfinished then (its failure,
    /// if any, is still to count).
    fn counted_before(&self, m: &MigrationSeen) -> (bool, bool) {
        let Some(c) = &self.resumed else {
            return (false, false);
        };
        let hex = format!("{:016x}", m.key);
        let open = c.open.contains(&hex);
        let counted = match (m.created, c.through) {
            (Some(created), Some(through)) => {
                created < through || (created == through && c.at_through.contains(&hex))
            }
            _ => open,
        };
        (counted || open, open)
    }

    fn count(&mut self, m: &MigrationSeen, after_restore: bool) {
        let r = &mut self.record;
        match m.cause {
            Cause::WorkloadUpdate if after_restore => r.after_restore.workload_update += 1,
            Cause::WorkloadUpdate => r.migrations.workload_update += 1,
            Cause::Evacuation => r.migrations.evacuation += 1,
            Cause::Other => r.migrations.other += 1,
        }
        if let Some(created) = m.created {
            match self.through {
                Some(t) if created < t => {}
                Some(t) if created == t => self.at_through.push(m.key),
                _ => {
                    self.through = Some(created);
                    self.at_through = vec![m.key];
                }
            }
        }
        self.changed = true;
    }

    fn failed(&mut self, m: &MigrationSeen) {
        self.record.migrations.failed += 1;
        if let Some(vm) = self.vms.get_mut(m.vmi.as_str()) {
            vm.migration_failed = true;
        }
        self.changed = true;
    }

    fn vmi(&mut self, v: VmiSeen) {
        let before = self.forget(&v.name);
        let failed = before.as_ref().is_some_and(|b| b.migration_failed);
        if v.ended() {
            match &before {
                Some(b) => self.shut_down_if_running(v.name.clone(), b, v.phase_since),
                None => self.ended_unseen(&v),
            }
        }
        self.remember(v.name.clone(), Vm::of(v, failed));
    }

    /// A VMI first seen ended (a list at the start, or a new pod's): shut down during the
    /// upgrade if it ended since its start, and since the pod before this one last kept the
    /// record (which counted what it saw before that).
    fn ended_unseen(&mut self, v: &VmiSeen) {
        let Some(since) = v.phase_since else {
            return;
        };
        let kept_at = self.record.kept_at.filter(|_| self.resumed.is_some());
        if since >= self.record.started && kept_at.is_none_or(|k| since > k) {
            let vm = Vm {
                running: true,
                ..Vm::of(v.clone(), false)
            };
            self.shut_down_if_running(v.name.clone(), &vm, Some(since));
        }
    }

    fn shut_down_if_running(&mut self, name: String, vm: &Vm, at: Option<Timestamp>) {
        if !vm.running {
            return;
        }
        let reason = vm.reason(self.evict_listed);
        let s = &mut self.record.shut_down;
        s.total += 1;
        *s.by_reason.entry(reason).or_default() += 1;
        if s.named.len() < NAMED {
            let detail = match reason {
                Reason::NotLiveMigratable => vm.not_migratable_reason.to_string(),
                _ => String::new(),
            };
            let node = vm.node.to_string();
            s.named.push(ShutDownVm {
                vm: name,
                node,
                reason,
                detail,
                at,
            });
        }
        self.changed = true;
    }

    fn forget(&mut self, name: &str) -> Option<Vm> {
        let vm = self.vms.remove(name)?;
        self.outdated_now -= u64::from(vm.outdated_running());
        self.outdated_migratable_now -= u64::from(vm.outdated_migratable());
        Some(vm)
    }

    fn remember(&mut self, name: String, vm: Vm) {
        self.outdated_now += u64::from(vm.outdated_running());
        self.outdated_migratable_now += u64::from(vm.outdated_migratable());
        let v = &mut self.record.vms;
        if self.outdated_now > v.outdated_peak {
            v.outdated_peak = self.outdated_now;
            self.changed = true;
        }
        // What the updater would have moved at once had it not been suspended: counted until
        // the restore (after it, the wave is counted instead).
        if self.record.restored_at.is_none()
            && self.outdated_migratable_now > v.outdated_migratable_peak
        {
            v.outdated_migratable_peak = self.outdated_migratable_now;
            self.changed = true;
        }
        self.vms.insert(name.into(), vm);
    }

    fn vms_listed_done(&mut self) {
        if std::mem::take(&mut self.listing_vms) {
            let gone = self.vms.iter().filter(|(_, v)| !v.listed);
            let gone: Vec<String> = gone.map(|(name, _)| name.to_string()).collect();
            for name in gone {
                if let Some(vm) = self.forget(&name) {
                    self.shut_down_if_running(name, &vm, None);
                }
            }
        }
        // The VMs at the start: the first list of the record (a pod before this one may have
        // made it).
        if !self.vms_listed {
            let running = self.vms.values().filter(|v| v.running);
            let v = &mut self.record.vms;
            v.running_at_start = running.clone().count() as u64;
            v.not_live_migratable_at_start =
                running.filter(|v| v.live_migratable != Some(true)).count() as u64;
            self.changed = true;
        }
        self.vms_listed = true;
    }
}
