//! workload-update-guard: suspends KubeVirt's automated workload updates before a Harvester
//! upgrade and restores exactly what was there afterwards.
//!
//! - [`plan`]: what to change (pure: object JSON in, conditional JSON Patch out).
//! - [`cluster`]: all I/O with the API server (read, conditional write, retry, events).
//! - [`phases`]: the order of steps for `pre`, `post` and `status`.
//! - [`config`], [`error`], [`summary`], [`report`]: the Job contract around them.

pub mod cluster;
pub mod config;
pub mod error;
pub mod phases;
pub mod plan;
pub mod report;
pub mod summary;
