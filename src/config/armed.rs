//! The settings of the armed `post` (`ARM`, `ARM_WAIT_SECONDS`, `ARM_POLL_SECONDS`) and of the
//! plan that runs a `post` (`UPGRADE_PLAN`): apart, so `config.rs` stays one screenful of rules.

use std::time::Duration;

use super::{ConfigError, boolean, invalid, name};
use crate::model::defaults;
use crate::vocabulary::Phase;

/// The armed `post`'s bound (`ARM_WAIT_SECONDS`) and the time between two reads
/// (`ARM_POLL_SECONDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm {
    pub wait: Duration,
    pub every: Duration,
}

/// `ARM` and its settings; an armed run is a `post`.
pub(super) fn arm(
    phase: Phase,
    arm: Option<String>,
    wait: Option<String>,
    every: Option<String>,
) -> Result<Option<Arm>, ConfigError> {
    if !boolean("ARM", arm, false)? {
        return Ok(None);
    }
    if phase != Phase::Post {
        return Err(ConfigError(format!(
            "ARM=true is for PHASE=post (the armed post), not PHASE={phase}"
        )));
    }
    let seconds = |var: &str, raw: Option<String>, default: &str, max: u64| {
        let value = raw.unwrap_or_else(|| default.to_string());
        match value.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(Duration::from_secs(n)),
            _ => Err(invalid(
                var,
                &value,
                &format!("a whole number of seconds from 1 to {max}"),
            )),
        }
    };
    Ok(Some(Arm {
        wait: seconds(
            "ARM_WAIT_SECONDS",
            wait,
            defaults::ARM_WAIT_SECONDS,
            2_592_000,
        )?,
        every: seconds("ARM_POLL_SECONDS", every, defaults::ARM_POLL_SECONDS, 30)?,
    }))
}

/// An object name, or `None` when unset or empty.
pub(super) fn optional_name(
    var: &str,
    value: Option<String>,
) -> Result<Option<String>, ConfigError> {
    match value.filter(|v| !v.is_empty()) {
        Some(v) => name(var, Some(v), "").map(Some),
        None => Ok(None),
    }
}
