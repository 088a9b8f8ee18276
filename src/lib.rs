//! workload-update-guard: suspends KubeVirt's automated workload updates before a Harvester
//! upgrade and restores exactly what was there afterwards.
//!
//! Its layers, lowest first, each file importing only from the layers below it, are listed in
//! docs/design.md, "Layers" (`hack/house.py` checks both).

pub mod build;
pub mod cluster;
pub mod config;
pub mod context;
pub mod error;
pub mod fleet_wait;
pub mod leftovers_check;
pub mod metrics;
pub mod model;
pub mod outcome;
pub mod phase;
pub mod plan;
pub mod report;
pub mod summary;
pub mod upgrades;
pub mod vocabulary;
pub mod waiting;
pub mod warnings;
