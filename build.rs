//! The git commit that `--version` prints: `$WORKLOAD_UPDATE_GUARD_COMMIT` if set (a build
//! without `.git`, such as the Dockerfile's, passes it), else `git rev-parse --short HEAD`, else
//! `unknown`.

use std::path::Path;
use std::process::Command;

const VAR: &str = "WORKLOAD_UPDATE_GUARD_COMMIT";

fn main() {
    println!("cargo:rerun-if-env-changed={VAR}");
    println!("cargo:rerun-if-changed=build.rs");
    let commit = std::env::var(VAR)
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=WUG_GIT_COMMIT={commit}");
}

/// The trimmed stdout of a successful `git ARGS`, if any.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn git_commit() -> Option<String> {
    // Built again when HEAD moves: HEAD itself, and the refs a commit or checkout rewrites.
    let dir = git(&["rev-parse", "--git-dir"])?;
    let common = git(&["rev-parse", "--git-common-dir"]).unwrap_or_else(|| dir.clone());
    for path in [
        Path::new(&dir).join("HEAD"),
        Path::new(&common).join("packed-refs"),
        Path::new(&common).join("refs/heads"),
    ] {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    git(&["rev-parse", "--short", "HEAD"])
}
