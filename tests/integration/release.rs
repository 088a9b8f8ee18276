//! One release, one number: the binary, the chart, the Addon, the Jobs' manifests, the image
//! and the docs all name Cargo.toml's version, and CHANGELOG.md has its dated section. Files
//! only: no control plane.

use crate::support::{BIN, repo_root};
use std::process::Command;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The value of the first line `KEY: VALUE` (after `indent`), quotes dropped.
fn field(text: &str, indent: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        l.strip_prefix(indent)?
            .strip_prefix(key)?
            .strip_prefix(':')
            .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_string())
    })
}

/// Every tracked file, by git.
fn tracked() -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo_root())
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .split('\0')
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect()
}

/// The versions `text` names as the image's tag, its archive or the chart's package:
/// `workload-update-guard:X.Y.Z`, `workload-update-guard_X.Y.Z.tar`,
/// `workload-update-guard-X.Y.Z.tgz`, each with its pre-release (`-dev`), if any; the tests'
/// image variants (`-failpoints`, `-previous`) are not part of it.
fn named_versions(text: &str) -> Vec<String> {
    let needle = "workload-update-guard";
    let mut found = Vec::new();
    for (at, _) in text.match_indices(needle) {
        let rest = &text[at + needle.len()..];
        let Some(rest) = rest.strip_prefix([':', '_', '-']) else {
            continue;
        };
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let version = rest[..end].trim_end_matches('.');
        if version.split('.').count() != 3 || version.split('.').any(|p| p.is_empty()) {
            continue;
        }
        let after = &rest[version.len()..];
        let pre = after
            .strip_prefix('-')
            .map(|p| {
                &p[..p
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(p.len())]
            })
            .filter(|p| !p.is_empty() && !["failpoints", "previous"].contains(p));
        match pre {
            Some(pre) => found.push(format!("{version}-{pre}")),
            None => found.push(version.to_string()),
        }
    }
    found
}

/// Every place that carries the version says Cargo.toml's; a failure lists them all.
#[test]
fn one_version_everywhere() {
    let mut wrong = Vec::new();
    let mut expect = |what: String, got: Option<String>| {
        if got.as_deref() != Some(VERSION) {
            wrong.push(format!("{what}: {got:?}"));
        }
    };
    let lock = read("Cargo.lock");
    let locked = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"workload-update-guard\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim_matches('"').to_string());
    expect("Cargo.lock's workload-update-guard".into(), locked);
    let chart = read("manifests/chart/Chart.yaml");
    expect("Chart.yaml version".into(), field(&chart, "", "version"));
    expect(
        "Chart.yaml appVersion".into(),
        field(&chart, "", "appVersion"),
    );
    let addon = read("manifests/addon/workload-update-guard.yaml");
    expect(
        "the Addon's spec.version".into(),
        field(&addon, "  ", "version"),
    );
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    expect(
        format!("--version ({})", printed.trim()),
        printed.split_whitespace().nth(1).map(str::to_string),
    );
    let image = Command::new("bash")
        .arg(repo_root().join("hack/image.sh"))
        .arg("version")
        .output()
        .unwrap();
    expect(
        "hack/image.sh version (the image's tag)".into(),
        Some(String::from_utf8_lossy(&image.stdout).trim().to_string()),
    );
    for file in tracked() {
        if file.ends_with("kustomization.yaml") {
            for tag in read(&file)
                .lines()
                .filter_map(|l| l.trim().strip_prefix("newTag:"))
            {
                expect(
                    format!("{file} newTag"),
                    Some(tag.trim().trim_matches('"').into()),
                );
            }
        }
        // The changelog names every version; 0.0.0 (and 0.0.0-missing, ...) the tests' images
        // that are never built.
        if file == "CHANGELOG.md" || file.starts_with(".git") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(repo_root().join(&file)) else {
            continue;
        };
        for v in named_versions(&text) {
            if !v.starts_with("0.0.0") {
                expect(format!("{file} names workload-update-guard {v}"), Some(v));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "Cargo.toml's version is {VERSION}, but:\n  {}",
        wrong.join("\n  ")
    );
}

/// CHANGELOG.md: "Unreleased" first, then the newest release's dated section,
/// `## X.Y.Z - YYYY-MM-DD`, not empty: a release's version (no pre-release) is that section's, so
/// that a version bump without its section fails here; main's next version (`X.Y.Z-dev`, until
/// it is released) comes after the newest release, whose changes its "Unreleased" lists.
#[test]
fn the_version_has_its_changelog_section() {
    let changelog = read("CHANGELOG.md");
    let headings: Vec<&str> = changelog.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(headings.first(), Some(&"## Unreleased"), "{headings:?}");
    let heading = headings.get(1).copied().unwrap_or_default();
    let (released, date) = heading
        .strip_prefix("## ")
        .and_then(|h| h.split_once(" - "))
        .unwrap_or_default();
    assert!(
        jiff::civil::Date::strptime("%Y-%m-%d", date).is_ok(),
        "the newest section of CHANGELOG.md is {heading:?}, not \"## X.Y.Z - YYYY-MM-DD\""
    );
    let number = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    match VERSION.split_once('-') {
        None => assert_eq!(
            released, VERSION,
            "the newest release section is not this version's"
        ),
        Some((next, pre)) => assert!(
            pre == "dev" && number(next) > number(released),
            "main's version {VERSION} is not the next release's with -dev after {released}"
        ),
    }
    let body = changelog
        .split(heading)
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_default();
    assert!(
        body.lines().any(|l| l.starts_with("- ")),
        "the section {heading:?} lists nothing"
    );
}

#[test]
fn named_versions_finds_tags_archives_and_packages() {
    // Written apart, so that this file names no version itself.
    let text =
        "run NAME:1.2.3 or NAME_0.2.0.tar, NAME-10.0.1.tgz, NAME:0.4.0-dev, NAME:1.0.0-failpoints; \
         not NAME-watch nor NAME:VERSION."
            .replace("NAME", "workload-update-guard");
    assert_eq!(
        named_versions(&text),
        ["1.2.3", "0.2.0", "10.0.1", "0.4.0-dev", "1.0.0"]
    );
}
