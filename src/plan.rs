//! What to change: pure functions from the objects' current JSON to conditional JSON Patches
//! (or nothing to do). No I/O here: `cluster` reads and writes, `phase::steps` runs the steps.
//!
//! Every patch starts with a `test` of `/metadata/resourceVersion`, so it applies only to the exact
//! state it was planned from (docs/design.md, "The hazards, and the answer to each"). The original
//! value is recorded in an annotation in the same patch as the change (docs/design.md, "Record
//! annotations"), and a record, once written, is never overwritten.

pub mod acting;
pub mod chart;
pub mod editor;
pub mod fields;
pub mod fleet_status;
pub mod forecast;
pub mod harvester_upgrade;
pub mod json;
pub mod kubevirt;
pub mod leftovers;
pub mod migrations;
pub mod monitoring;
pub mod order;
pub mod ownership;
pub mod pre_advice;
pub mod records;
pub mod releases;
pub mod retirement;
pub mod suspenders;
#[cfg(test)]
pub(crate) mod testing;
pub mod upgrade_progress;
pub mod upgrade_record;
pub mod watch_decision;

pub use order::{plan_phase, plan_step, steps};
