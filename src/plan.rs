//! What to change: pure functions from the objects' current JSON to conditional JSON Patches
//! (or nothing to do). No I/O here: `cluster` reads and writes, `phases` runs the steps.
//!
//! The rooms, by subject (docs/design.md, "Layers"):
//! - [`phase`]: the phase's order of writes and the hints between the two objects;
//! - [`kubevirt`]: the CR's suspension and restore, where the original comes from, the notice;
//! - [`chart`]: the ManagedChart's values override and comparePatches pointer;
//! - [`fleet`]: Fleet's view of the ManagedChart (its copied Bundle status) and what a phase
//!   waits for;
//! - [`ownership`]: `managedFields`: who owns the methods, and the release of our claim;
//! - [`harvester`]: Harvester's own upgrade: its backup, its cleanup, its blind restores;
//! - [`records`]: the annotation formats and their checked readers (shared with `report`);
//! - [`skipped`]: what a phase leaves of ours on what it was told to skip (a step off, no name);
//! - [`editor`]: the JSON Patch editor and the [`Plan`] it makes.
//!
//! Every patch starts with a `test` of `/metadata/resourceVersion`, so it applies only to the exact
//! state it was planned from (docs/design.md, "The hazards, and the answer to each"). The original
//! value is recorded in an annotation in the same patch as the change (docs/design.md, "Record
//! annotations"), and a record, once written, is never overwritten.

pub mod chart;
pub mod editor;
pub mod fleet;
pub mod harvester;
pub mod kubevirt;
pub mod ownership;
pub mod phase;
pub mod records;
pub mod skipped;
#[cfg(test)]
pub(crate) mod testing;

pub use editor::{
    CHANGED_WHILE_SUSPENDED, COMPARE_PATCH_GONE, HARVESTER_SUSPENDED, Malformed, Plan,
    STILL_SUSPENDED, UPDATE_CLAIM_LEFT, Warning,
};
pub use phase::{
    Intent, Keys, Objects, Phase, Refusal, Step, Steps, Write, plan_phase, plan_step, steps,
    targets,
};
