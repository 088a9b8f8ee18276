//! The release table: what each Harvester release's upgrade does with the methods (docs/design.md,
//! "Harvester's own handling"). Its boundaries are here and nowhere else in the code: `pre`'s
//! advice, the retirement, the metrics' help and the reports take their words from it, and the
//! chart's admission policy is checked against [`Handling::of`] by a test
//! (`tests/integration/hold.rs`). A new Harvester release that changes the handling is a change
//! here (and in that policy's expression).

use serde::Serialize;

/// A release's `(major, minor, patch)`.
pub type Release = (u64, u64, u64);

/// The last release whose upgrade does nothing to the methods itself.
pub const LAST_WITHOUT_HANDLING: Release = (1, 7, 1);
/// The one release whose upgrade patches the CR to `[]` itself and writes a hard-coded
/// `[LiveMigrate]` at its cleanup (harvester#10677).
pub const HARD_CODED_RESTORE: Release = (1, 8, 0);

/// What Harvester's upgrade does with the methods, by release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Handling {
    /// Up to [`LAST_WITHOUT_HANDLING`]: nothing.
    None,
    /// [`HARD_CODED_RESTORE`]: the CR merge-patched to `[]` and our pointer added; at its cleanup
    /// a PUT of a hard-coded `[LiveMigrate]` and the pointer removed.
    PatchAndHardCodedRestore,
    /// Every later release: the values key backed up on the Upgrade and set to `[]`; the backup
    /// written back at its cleanup.
    BackupAndRestore,
}

impl Handling {
    /// A version that does not parse (a development build) is taken as the newest.
    pub fn of(version: &str) -> Handling {
        match parse_version(version) {
            Some(v) if v <= LAST_WITHOUT_HANDLING => Handling::None,
            Some(HARD_CODED_RESTORE) => Handling::PatchAndHardCodedRestore,
            _ => Handling::BackupAndRestore,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Handling::None => "does nothing to the methods itself: the guard is what suspends them",
            Handling::PatchAndHardCodedRestore => {
                "suspends the methods itself (CR patched to [], comparePatches pointer added), a \
                 claim that Fleet's deploy of the new chart stops on unless the chart renders [] \
                 too (harvester#10677), and at its cleanup writes a hard-coded [LiveMigrate]: the \
                 guard suspends through the values, and post restores after that cleanup"
            }
            Handling::BackupAndRestore => {
                "suspends the methods itself (values override [], backed up on the Upgrade) and \
                 restores them at its cleanup: the guard is not needed; if pre ran, run post after \
                 the cleanup (post waits for it)"
            }
        }
    }
}

/// `vMAJOR.MINOR.PATCH`, with any `-rcN` or build suffix ignored.
pub fn parse_version(v: &str) -> Option<Release> {
    let core = v.strip_prefix('v').unwrap_or(v);
    let core = core.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

/// `vMAJOR.MINOR.PATCH`.
pub fn name((major, minor, patch): Release) -> String {
    format!("v{major}.{minor}.{patch}")
}

/// The releases that do nothing to the methods themselves: "up to v1.7.1".
pub fn without_handling() -> String {
    format!("up to {}", name(LAST_WITHOUT_HANDLING))
}

/// The releases that suspend and restore the methods themselves: "v1.7.2+, v1.8.1+ or v1.9".
pub fn restoring_themselves() -> String {
    let (major, minor, patch) = LAST_WITHOUT_HANDLING;
    let (hard_major, hard_minor, hard_patch) = HARD_CODED_RESTORE;
    format!(
        "{}+, {}+ or v{hard_major}.{}",
        name((major, minor, patch + 1)),
        name((hard_major, hard_minor, hard_patch + 1)),
        hard_minor + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words as the docs write them (README, docs/jobs.md).
    #[test]
    fn the_table_in_words() {
        assert_eq!(without_handling(), "up to v1.7.1");
        assert_eq!(restoring_themselves(), "v1.7.2+, v1.8.1+ or v1.9");
        assert_eq!(name(HARD_CODED_RESTORE), "v1.8.0");
    }
}
