//! The settings of the armed `post` (`ARM`, `ARM_WAIT_SECONDS`, `ARM_POLL_SECONDS`) and of the
//! plan that runs a `post` (`UPGRADE_PLAN`): apart, so `config.rs` stays one screenful of rules.

use std::time::Duration;

use super::{ConfigError, Raw, boolean, invalid, name};
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

/// The resident guard's settings (`PHASE=watch`): how often it reads when no watch event comes
/// (`WATCH_RESYNC_SECONDS`), where its probe files are (`WATCH_STATE_DIR`), the port of its
/// metrics (`METRICS_PORT`; `None`: not served) and whether the chart's admission policy holds
/// an unprotected upgrade (`ADMISSION_HOLD`: what its metrics and Warnings say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub resync: Duration,
    pub state_dir: std::path::PathBuf,
    pub metrics_port: Option<u16>,
    pub admission_hold: bool,
}

impl Watch {
    /// How old the `ready` file may be: two missed reads and a minute's slack.
    pub fn ready_within(&self) -> Duration {
        self.resync * 2 + Duration::from_secs(60)
    }
}

/// How often the loop touches `alive` (no request), and how old it may be.
pub const ALIVE_EVERY: Duration = Duration::from_secs(30);
pub const ALIVE_WITHIN: Duration = Duration::from_secs(90);

/// `WATCH_*`, `METRICS_PORT` and `ADMISSION_HOLD`, for `PHASE=watch` only (`WATCH_*` are also
/// read by `--probe`, whatever the phase).
pub(super) fn watch(phase: Phase, raw: &Raw) -> Result<Option<Watch>, ConfigError> {
    if phase != Phase::Watch {
        return Ok(None);
    }
    let mut settings = watch_settings(
        raw.watch_resync_seconds.clone(),
        raw.watch_state_dir.clone(),
    )?;
    let port = raw
        .metrics_port
        .clone()
        .unwrap_or_else(|| defaults::METRICS_PORT.to_string());
    settings.metrics_port = match port.parse::<u16>() {
        Ok(0) => None,
        Ok(n) => Some(n),
        Err(_) => {
            return Err(invalid(
                "METRICS_PORT",
                &port,
                "a TCP port from 1 to 65535, or 0 (no metrics)",
            ));
        }
    };
    settings.admission_hold = boolean("ADMISSION_HOLD", raw.admission_hold.clone(), false)?;
    Ok(Some(settings))
}

/// The two settings, checked.
pub(super) fn watch_settings(
    resync: Option<String>,
    dir: Option<String>,
) -> Result<Watch, ConfigError> {
    let value = resync.unwrap_or_else(|| defaults::WATCH_RESYNC_SECONDS.to_string());
    let resync = match value.parse::<u64>() {
        Ok(n) if (30..=3600).contains(&n) => Duration::from_secs(n),
        _ => {
            return Err(invalid(
                "WATCH_RESYNC_SECONDS",
                &value,
                "a whole number of seconds from 30 to 3600",
            ));
        }
    };
    let dir = dir.unwrap_or_else(|| "/tmp".into());
    if !dir.starts_with('/') {
        return Err(invalid("WATCH_STATE_DIR", &dir, "an absolute path"));
    }
    Ok(Watch {
        resync,
        state_dir: dir.into(),
        metrics_port: None,
        admission_hold: false,
    })
}

/// `--probe`'s settings, from the environment (the Deployment's, which the kubelet's exec probe
/// inherits): `WATCH_RESYNC_SECONDS` and `WATCH_STATE_DIR`, checked as `PHASE=watch` checks them.
pub fn probe_settings() -> Result<Watch, ConfigError> {
    watch_settings(
        std::env::var("WATCH_RESYNC_SECONDS").ok(),
        std::env::var("WATCH_STATE_DIR").ok(),
    )
}
