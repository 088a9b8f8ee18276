//! The raw variables, apart so that `config.rs` stays one screenful of rules.

use serde::Deserialize;

/// The raw variables, all optional strings: `Config::from_vars` checks them and gives the messages.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Raw {
    pub(super) phase: Option<String>,
    pub(super) kubevirt_namespace: Option<String>,
    pub(super) kubevirt_name: Option<String>,
    pub(super) managedchart_namespace: Option<String>,
    pub(super) managedchart_name: Option<String>,
    pub(super) step_kubevirt: Option<String>,
    pub(super) step_compare_patches: Option<String>,
    pub(super) step_chart_values: Option<String>,
    pub(super) fallback_methods: Option<String>,
    pub(super) dry_run: Option<String>,
    pub(super) deadline_seconds: Option<String>,
    pub(super) harvester_cleanup_wait_seconds: Option<String>,
    pub(super) fleet_wait_seconds: Option<String>,
    pub(super) log_format: Option<String>,
    pub(super) termination_message_path: Option<String>,
    pub(super) allow_missing: Option<String>,
    pub(super) pre_even_if_not_needed: Option<String>,
    pub(super) restore_during_upgrade: Option<String>,
    pub(super) upgrade_plan: Option<String>,
    pub(super) arm: Option<String>,
    pub(super) arm_wait_seconds: Option<String>,
    pub(super) arm_poll_seconds: Option<String>,
    pub(super) watch_resync_seconds: Option<String>,
    pub(super) watch_state_dir: Option<String>,
    pub(super) metrics_port: Option<String>,
    pub(super) admission_hold: Option<String>,
}
