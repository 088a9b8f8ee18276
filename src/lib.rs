//! workload-update-guard: suspends KubeVirt's automated workload updates before a Harvester
//! upgrade and restores exactly what was there afterwards.
//!
//! - [`model`]: the objects, their fields and our names on them (shared by all below).
//! - [`plan`]: what to change (pure: object JSON in, conditional JSON Patch out), including
//!   the order of a phase's writes.
//! - [`cluster`]: all I/O with the API server (read, conditional write, retry, events).
//! - [`phases`]: runs a phase: read, plan, write step by step, report.
//! - [`harvester`]: Harvester's own upgrade around a phase: `pre`'s and `post`'s gates.
//! - [`outcome`]: what each step came to, written by `phases` and summed up by `summary`.
//! - [`config`], [`error`], [`summary`], [`report`]: the Job contract around them.

pub mod cluster;
pub mod config;
pub mod error;
pub mod harvester;
pub mod model;
pub mod outcome;
pub mod phases;
pub mod plan;
pub mod report;
pub mod summary;
