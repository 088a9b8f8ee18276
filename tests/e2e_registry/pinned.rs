//! The guard's own upgrade as docs/upgrading.md writes it, from an install pinned by digest as
//! the README's install writes it: both releases' images pushed to the tests' registry (the
//! previous one with `hack/image.sh push --previous`), the previous release's chart installed
//! with `image.repository`, `image.tag` and `image.digest`, the node pulling by digest. A
//! `helm upgrade --reset-then-reuse-values` that forgets the new digest is refused by the chart
//! and leaves the old pod running; the documented command runs the new build: the pod's image is
//! the new digest and `status`'s last line names the new version and its chart. A chart of
//! another version running this build by tag: `status` warns that the build is not the chart's.

use std::time::{Duration, Instant};

use crate::node::*;
use crate::registry::RegistryUp;
use crate::release::*;
use crate::support::{output_ok, repo_root};

/// The Ready guard pod's name and image, and what its binary's `--version` says.
fn running() -> (String, String, String) {
    let pod = newest_guard_pod()
        .filter(is_ready)
        .expect("the guard's pod Ready");
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let (image, version) = image_and_version(&name);
    (name, image, version)
}

/// `status` in the guard's pod, as the docs run it (its stdout, whatever its exit code).
fn status_in_pod() -> String {
    let mut status = node().kubectl();
    status.args([
        "-n",
        NS,
        "exec",
        "deploy/workload-update-guard-watch",
        "--",
        "workload-update-guard",
        "status",
    ]);
    String::from_utf8(status.output().unwrap().stdout).unwrap()
}

#[test]
fn the_documented_helm_upgrade_from_a_digest_pinned_install_runs_the_new_build() {
    let _turn = turn();
    harvester_state();
    let start = Instant::now();
    let reg = RegistryUp::start(None);
    let _cleanup = Cleanup { secret: None };
    let (old_tag, old_digest) = reg.push(&["--previous"]);
    let (new_tag, new_digest) = reg.push(&[]);
    let repo = format!("{}/wug/workload-update-guard", reg.vars["REGISTRY"]);
    let previous_chart = repo_root().join("target/previous/chart");
    let previous_version = chart_field(&previous_chart, "appVersion");
    let chart = repo_root().join("manifests/chart");
    let version = chart_field(&chart, "appVersion");
    assert_eq!(old_tag, previous_version, "the previous image's tag");
    assert_eq!(new_tag, version, "this image's tag");

    // The README's install, of the previous release: pinned by digest.
    let previous_chart = previous_chart.to_str().unwrap();
    let pinned = format!("image.repository={repo},image.tag={old_tag},image.digest={old_digest}");
    helm_ok(&[
        "install",
        RELEASE,
        previous_chart,
        "-n",
        NS,
        "--set",
        &pinned,
        "--wait",
        "--timeout",
        "120s",
    ]);
    let (old_pod, image, running_version) = running();
    assert!(image.ends_with(&format!("@{old_digest}")), "{image}");
    assert!(
        running_version.contains(&previous_commit()),
        "the previous build runs: {running_version}"
    );

    // The new chart with the old values: the old digest is refused, nothing rolls out.
    let chart = chart.to_str().unwrap();
    let reused = [
        "upgrade",
        RELEASE,
        chart,
        "-n",
        NS,
        "--reset-then-reuse-values",
    ];
    if previous_version != version {
        let (ok, out) = helm(&reused);
        assert!(!ok, "an upgrade that keeps the old digest renders: {out}");
        assert!(
            out.contains(&format!("pins a build of version {previous_version}"))
                && out.contains(&format!("image.tag={version},image.digest=")),
            "the refusal says what to give: {out}"
        );
        std::thread::sleep(Duration::from_secs(2));
        let (pod, image, _) = running();
        assert_eq!(pod, old_pod, "nothing rolled out");
        assert!(image.ends_with(&format!("@{old_digest}")), "{image}");
    } else {
        figure(
            "pinned: the previous release has this version (before a release's bump): the \
             chart cannot tell its digest from this one's, the refusal is not checked",
        );
    }

    // docs/upgrading.md's command: the new tag and digest, the other values reused.
    let new_pin = format!("image.tag={new_tag},image.digest={new_digest}");
    let mut documented = reused.to_vec();
    documented.extend(["--set", &new_pin]);
    helm_ok(&documented);
    let rolled = wait_until(
        "the new build's pod Ready",
        Duration::from_secs(120),
        || {
            newest_guard_pod().is_some_and(|p| {
                is_ready(&p)
                    && p["spec"]["containers"][0]["image"]
                        .as_str()
                        .is_some_and(|i| i.ends_with(&new_digest))
            })
        },
    );
    let (new_pod, image, _) = running();
    assert_ne!(new_pod, old_pod);
    assert_eq!(image, format!("{repo}:{new_tag}@{new_digest}"));
    let status = status_in_pod();
    let build = status.trim_end().lines().last().unwrap_or_default();
    assert!(
        build.starts_with(&format!(
            "build: workload-update-guard {} (commit ",
            env!("CARGO_PKG_VERSION")
        )) && build.ends_with(&format!(", chart {version}")),
        "status names the new build and its chart: {status}"
    );
    assert!(!status.contains("WARNING: this build"), "{status}");

    // A chart of another version (the next release's, here) running this build's image by its
    // tag alone: it runs, and `status` says the build is not the chart's.
    let next = node().dir.join("chart-next");
    let _ = std::fs::remove_dir_all(&next);
    output_ok({
        let mut c = std::process::Command::new("cp");
        c.args(["-r", chart]).arg(&next);
        c
    });
    let chart_yaml = next.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart_yaml).unwrap();
    let next_version = format!("{version}-next");
    std::fs::write(
        &chart_yaml,
        text.replace(
            &format!("version: {version}"),
            &format!("version: {next_version}"),
        )
        .replace(
            &format!("appVersion: \"{version}\""),
            &format!("appVersion: \"{next_version}\""),
        ),
    )
    .unwrap();
    let by_tag = format!("image.tag={new_tag},image.digest=");
    helm_ok(&[
        "upgrade",
        RELEASE,
        next.to_str().unwrap(),
        "-n",
        NS,
        "--reset-then-reuse-values",
        "--set",
        &by_tag,
        "--wait",
        "--timeout",
        "120s",
    ]);
    wait_until(
        "the pod of the next chart Ready",
        Duration::from_secs(120),
        || {
            newest_guard_pod().is_some_and(|p| {
                is_ready(&p)
                    && p["spec"]["containers"][0]["env"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|e| e["name"] == "CHART_VERSION" && e["value"] == next_version)
            })
        },
    );
    let status = status_in_pod();
    assert!(
        status.contains(&format!(
            "WARNING: this build is version {} but the chart is version {next_version}",
            env!("CARGO_PKG_VERSION")
        )) && status
            .trim_end()
            .ends_with(&format!(", chart {next_version}")),
        "status warns of another version's build: {status}"
    );
    figure(&format!(
        "pinned: helm upgrade {previous_version} to {version} by digest as docs/upgrading.md \
         writes it: the new build's pod Ready {:.1} s after; the whole test {:.1} s",
        rolled.as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
}
