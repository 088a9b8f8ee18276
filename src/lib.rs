//! workload-update-guard: suspends KubeVirt's automated workload updates before a Harvester
//! upgrade and restores exactly what was there afterwards.
//!
//! The layers, lowest first; each file imports only from the layers below it (docs/design.md,
//! "Layers"; `hack/house.py` checks it):
//! - [`model`], [`warnings`], [`vocabulary`]: the objects and our names on them, every reason
//!   the guard gives, and the run's vocabulary (phase, intent, steps, plan);
//! - [`build`], [`config`], [`error`], [`outcome`], [`summary`]: the Job contract: the build's
//!   identity, settings, exit codes, what each step came to and the termination message;
//! - [`plan`]: what to change (pure: object JSON in, conditional JSON Patch out);
//! - [`cluster`]: all I/O with the API server (read, conditional write, retry, events);
//! - [`context`]: one run's context and the one call that tells a fact (log, Event, summary);
//! - [`upgrades`], [`fleet_wait`], [`harvester_gate`], [`leftovers_check`]: the I/O around a
//!   phase's writes: the one read of the upgrades, the wait for Fleet, Harvester's own upgrade,
//!   what is left on what a phase skips;
//! - [`metrics`]: the resident guard's Prometheus metrics and their tiny HTTP server;
//! - [`resident`]: the one waiting loop: the resident guard (`PHASE=watch`) and the armed `post`;
//! - [`report`]: `status`'s report: its data, its judgement (the verdict) and its text;
//! - [`status`]: runs `PHASE=status`: reads, builds the report, prints it;
//! - [`runner`]: runs a phase: read, plan, write step by step, say what each write did.

pub mod build;
pub mod cluster;
pub mod config;
pub mod context;
pub mod error;
pub mod fleet_wait;
pub mod harvester_gate;
pub mod leftovers_check;
pub mod metrics;
pub mod model;
pub mod outcome;
pub mod plan;
pub mod report;
pub mod resident;
pub mod runner;
pub mod status;
pub mod summary;
pub mod upgrades;
pub mod vocabulary;
pub mod warnings;
