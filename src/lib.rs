//! workload-update-guard: suspends KubeVirt's automated workload updates before a Harvester
//! upgrade and restores exactly what was there afterwards.
//!
//! - [`model`]: the objects, their fields and our names on them (shared by all below).
//! - [`plan`]: what to change (pure: object JSON in, conditional JSON Patch out), including
//!   the order of a phase's writes.
//! - [`cluster`]: all I/O with the API server (read, conditional write, retry, events).
//! - [`phases`]: runs a phase: read, plan, write step by step, report.
//! - [`fleet`]: the wait for Fleet after a phase's ManagedChart change.
//! - [`harvester`]: Harvester's own upgrade around a phase: `pre`'s and `post`'s gates.
//! - [`leftovers`]: what a phase leaves on what it skips, said after its steps.
//! - [`outcome`]: what each step came to, written by `phases` and summed up by `summary`.
//! - [`config`], [`error`], [`summary`], [`report`]: the Job contract around them.

pub mod cluster;
pub mod config;
pub mod error;
pub mod fleet;
pub mod harvester;
pub mod leftovers;
pub mod model;
pub mod outcome;
pub mod phases;
pub mod plan;
pub mod report;
pub mod summary;
