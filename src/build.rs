//! The build's identity, and whether it is the version of the chart that runs it.

/// The git commit the binary was built from (build.rs), or `unknown`.
pub const COMMIT: &str = env!("WUG_GIT_COMMIT");

pub fn version() -> String {
    format!(
        "workload-update-guard {} (commit {COMMIT})\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// `status`'s last line, so that `status | tail -1` shows the build and chart (docs/upgrading.md).
pub fn line(chart: Option<&str>) -> String {
    let chart = chart.map(|c| format!(", chart {c}")).unwrap_or_default();
    format!("build: {}{chart}\n", version().trim_end())
}

/// The warning when the chart (`CHART_VERSION`) runs another version's build: the image given
/// with it (`image.tag`, `image.digest`) is not the chart's own.
pub fn mismatch(chart: Option<&str>) -> Option<String> {
    let chart = chart?;
    let build = env!("CARGO_PKG_VERSION");
    (chart != build).then(|| {
        format!(
            "this build is version {build} but the chart is version {chart}: the image given \
             (image.tag, image.digest) is another version's; give the chart's own \
             (docs/upgrading.md)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commit is one word (`unknown` in a tree without git and without
    /// WORKLOAD_UPDATE_GUARD_COMMIT).
    #[test]
    fn version_names_the_commit() {
        let v = env!("CARGO_PKG_VERSION");
        assert_eq!(
            version(),
            format!("workload-update-guard {v} (commit {COMMIT})\n")
        );
        assert!(
            !COMMIT.is_empty() && !COMMIT.contains(char::is_whitespace),
            "{COMMIT}"
        );
    }

    #[test]
    fn the_line_names_the_chart_and_another_version_is_warned() {
        let v = env!("CARGO_PKG_VERSION");
        assert!(line(None).starts_with(&format!("build: workload-update-guard {v} (commit ")));
        assert!(
            line(Some(v)).ends_with(&format!("), chart {v}\n")),
            "{}",
            line(Some(v))
        );
        assert_eq!(mismatch(None), None);
        assert_eq!(mismatch(Some(v)), None);
        let w = mismatch(Some("9.9.9")).unwrap();
        assert!(
            w.contains(&format!(
                "this build is version {v} but the chart is version 9.9.9"
            )),
            "{w}"
        );
    }
}
