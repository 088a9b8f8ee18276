//! Integration tests against a real kube-apiserver and etcd (see `support`).

mod chart;
mod cli;
mod control_plane;
mod fleet;
mod harvester;
mod harvester_writes;
mod hazards;
mod hold;
mod lifetime;
mod manifests;
mod migrations;
mod monitoring;
mod operator;
mod pre_advice;
mod process;
mod release;
mod resident;
#[path = "../support/mod.rs"]
mod support;
mod updater;
mod upgrade;
mod upgrade_order;
mod worst_hour;
