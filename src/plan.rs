//! What to change: pure functions from the objects' current JSON to conditional JSON Patches
//! (or nothing to do). No I/O here: `cluster` reads and writes, `runner` runs the steps.
//!
//! The rooms, by subject (docs/design.md, "Layers"):
//! - [`order`]: the order of a phase's writes and the hints between the two objects;
//! - [`kubevirt`]: the CR's suspension and restore, where the original comes from, the notice;
//! - [`chart`]: the ManagedChart's values override and comparePatches pointer;
//! - [`fleet_status`]: Fleet's view of the ManagedChart (its copied Bundle status) and what a
//!   phase waits for;
//! - [`ownership`]: `managedFields`: who owns the methods, and the release of our claim;
//! - [`harvester_upgrade`]: Harvester's own upgrade: its backup, its cleanup, its blind restores;
//! - [`pre_advice`]: whether `pre` is needed for the coming release, and whether it comes late;
//! - [`upgrade_progress`]: whether an upgrade (Harvester's or the add-on's) is under way;
//! - [`watch_decision`]: the waiting loop's decision (the resident guard and the armed `post`);
//! - [`monitoring`]: the resident guard's metrics' values and its Warning of an unprotected upgrade;
//! - [`retirement`]: whether the guard is still needed on this cluster (when to retire it);
//! - [`records`]: the annotation formats and their checked readers (shared with `report`);
//! - [`leftovers`]: what a phase leaves of ours on what it was told to skip (a step off, no name);
//! - [`suspenders`]: another suspender's `[]` (the add-on's, Harvester's) and the original in its place;
//! - [`migrations`]: the workload-update migrations under way;
//! - [`editor`]: the JSON Patch editor that makes a [`Plan`](crate::vocabulary::Plan).
//!
//! Every patch starts with a `test` of `/metadata/resourceVersion`, so it applies only to the exact
//! state it was planned from (docs/design.md, "The hazards, and the answer to each"). The original
//! value is recorded in an annotation in the same patch as the change (docs/design.md, "Record
//! annotations"), and a record, once written, is never overwritten.

pub mod chart;
pub mod editor;
pub mod fleet_status;
pub mod harvester_upgrade;
pub mod kubevirt;
pub mod leftovers;
pub mod migrations;
pub mod monitoring;
pub mod order;
pub mod ownership;
pub mod pre_advice;
pub mod records;
pub mod retirement;
pub mod suspenders;
#[cfg(test)]
pub(crate) mod testing;
pub mod upgrade_progress;
pub mod watch_decision;

pub use order::{plan_phase, plan_step, steps};
