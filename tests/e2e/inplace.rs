//! The resident guard upgraded in place, on the real kubelet with the real Helm 4: the previous
//! release (the commit in `hack/previous-release`: its chart, and its image from `hack/image.sh
//! build --previous`) installed first, then `helm upgrade` to this tree's chart, as an operator
//! does (or the add-on's helm-controller when the Addon's `spec.version` moves):
//! - between upgrades: nothing written to the KubeVirt CR or the ManagedChart, the new pod Ready;
//! - mid-suspension: the new pod goes on from the previous guard's records, holds through the
//!   rest of the upgrade and restores exactly at its end (objects and field owners);
//! - from the previous release's Jobs (its `pre` and its armed `post`) to this chart mid-upgrade,
//!   as docs/upgrading.md writes it: the resident guard restores at the upgrade's end.
//!
//! The charts are installed from their directories, not from a repository: before a release's
//! version bump both charts carry the same version, which one repository cannot hold. Neither
//! version is written here: each is read from its Chart.yaml.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::chart::*;
use crate::node::*;
use crate::support::{as_compared, repo_root};

const UPGRADE: &str = "hvst-upgrade-e2e-inplace";
/// The previous release's armed `post` (its manifests/post-armed).
const ARMED: &str = "workload-update-guard-post-armed";

/// One release's chart and the image it runs.
struct Release {
    chart: PathBuf,
    image: String,
    /// Chart.yaml's version (equal to its appVersion and to its binary's version).
    version: String,
}

/// The previous release as `hack/image.sh build --previous` left it in target/previous/.
fn previous() -> Release {
    let dir = repo_root().join("target/previous");
    let image = std::fs::read_to_string(dir.join("image")).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: the previous release is not built: run `hack/image.sh build --previous` \
             (hack/test.sh does), then restart the node so that it imports the image",
            dir.join("image").display()
        )
    });
    let chart = dir.join("chart");
    Release {
        version: chart_field(&chart, "version"),
        chart,
        image: image.trim().to_string(),
    }
}

/// This tree's chart and image.
fn current() -> Release {
    let chart = repo_root().join("manifests/chart");
    Release {
        version: chart_field(&chart, "version"),
        image: built_image(|l| {
            l.ends_with(&format!(
                "/workload-update-guard:{}",
                env!("CARGO_PKG_VERSION")
            ))
        }),
        chart,
    }
}

impl Release {
    /// The Addon's valuesContent (the image the node has), with the tag only where the built
    /// image's is not the chart's appVersion: the previous release's before a version bump
    /// (hack/image.sh tags it `-previous` then).
    fn values(&self, name: &str) -> PathBuf {
        let tag = self.image.rsplit(':').next().unwrap();
        let mut values = "image:\n  repository: workload-update-guard\n".to_string();
        if tag != chart_field(&self.chart, "appVersion") {
            values.push_str(&format!("  tag: {tag}\n"));
        }
        let path = node().dir.join(format!("inplace-{name}-values.yaml"));
        std::fs::write(&path, values).unwrap();
        path
    }

    /// `helm install` (or `upgrade`) of this chart, `--wait`ed: the release says this version.
    fn helm(&self, helm: &Helm, verb: &str, name: &str) -> HelmRun {
        let values = self.values(name);
        let chart = self.chart.to_str().unwrap();
        let run = helm.waiting(&[verb, RELEASE, chart, "--values", values.to_str().unwrap()]);
        assert!(run.ok, "{run:?}");
        let list = helm.ok(&["list", "-n", NS, "-o", "json"]);
        let releases: Value = serde_json::from_str(&list.out).unwrap();
        assert_eq!(
            releases[0]["chart"],
            format!("workload-update-guard-{}", self.version),
            "{list:?}"
        );
        run
    }
}

/// A test's start on the shared node: the Harvester objects as a fresh cluster has them, no
/// Upgrade, and whatever the test leaves removed however it ends.
fn fresh(helm: &Helm) -> Leftovers<'_> {
    harvester_state();
    no_upgrades_yet();
    Leftovers {
        helm,
        node: NodeAsFound::record(),
    }
}

/// The Ready guard pod's image and what its binary's `--version` says.
fn running_version() -> (String, String) {
    let (_, name) = ready_pod().expect("the guard Ready");
    image_and_version(&name)
}

/// Both objects as the API server has them (resourceVersion and managedFields included).
fn objects() -> (Value, Value) {
    (
        get_json(&["-n", NS, "kubevirt", "kubevirt"]),
        get_json(&["-n", CHART_NS, "managedchart", "harvester"]),
    )
}

fn rvs() -> (Value, Value) {
    let (kv, chart) = objects();
    (
        kv["metadata"]["resourceVersion"].clone(),
        chart["metadata"]["resourceVersion"].clone(),
    )
}

/// Both objects as "exactly as before" compares them: content and field owners.
fn compared() -> (String, String) {
    let (kv, chart) = objects();
    (as_compared(&kv, NS), as_compared(&chart, CHART_NS))
}

/// The records the guard keeps while suspended (every annotation under its prefix), per object.
fn records() -> Vec<String> {
    let (kv, chart) = objects();
    [kv, chart]
        .iter()
        .flat_map(|o| {
            o["metadata"]["annotations"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .filter(|k| k.starts_with("workload-update-guard.harvesterhci.io/"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The previous release installed and running its own binary.
fn previous_installed(helm: &Helm) -> Release {
    let previous = previous();
    let run = previous.helm(helm, "install", "previous");
    let (image, version) = running_version();
    assert_eq!(
        image,
        previous.image.trim_start_matches("docker.io/library/")
    );
    assert!(
        version.contains(&previous_commit()),
        "the previous release's binary runs: {version}"
    );
    figure(&format!(
        "inplace: helm install of the previous release {} ({image}), Ready in {:.1} s",
        previous.version,
        run.took.as_secs_f64()
    ));
    previous
}

/// `helm upgrade` to this tree's chart: the new pod Ready, running this tree's binary.
fn upgraded(helm: &Helm, old_pod: &str) -> HelmRun {
    let current = current();
    let run = current.helm(helm, "upgrade", "current");
    let (uid, _) = ready_pod().expect("helm --wait: the new pod Ready");
    assert_ne!(uid, old_pod, "a new pod");
    let (image, version) = running_version();
    assert_eq!(
        image,
        current.image.trim_start_matches("docker.io/library/")
    );
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")) && !version.contains(&previous_commit()),
        "this tree's binary runs: {version}"
    );
    run
}

/// Between upgrades, with Helm 3 (the other tests use Helm 4): `helm upgrade` from the previous
/// chart writes nothing to either object; a value the schema refuses is refused; `helm
/// uninstall` runs the pre-delete hook (nothing of ours: it proceeds) and the release goes.
#[test]
fn with_helm_3_an_upgrade_from_the_previous_release_writes_nothing_then_uninstalls() {
    let _turn = turn();
    let start = Instant::now();
    let helm = Helm::v3();
    let leftovers = fresh(&helm);
    let previous = previous_installed(&helm);
    let (old_pod, _) = ready_pod().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let (kv0, chart0) = objects();
    assert_eq!(
        methods(),
        json!(["LiveMigrate"]),
        "nothing to do: nothing done"
    );

    let run = upgraded(&helm, &old_pod);
    std::thread::sleep(Duration::from_secs(3));
    let (kv1, chart1) = objects();
    for (what, before, after) in [
        ("KubeVirt CR", &kv0, &kv1),
        ("ManagedChart", &chart0, &chart1),
    ] {
        assert_eq!(
            after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
            "the {what} is not written"
        );
        assert_eq!(
            after["metadata"]["managedFields"], before["metadata"]["managedFields"],
            "the {what}'s field owners"
        );
    }
    figure(&format!(
        "inplace: Helm 3: helm upgrade {} to {} between upgrades: the new pod Ready in {:.1} s, nothing written",
        previous.version,
        current().version,
        run.took.as_secs_f64(),
    ));
    let chart = current().chart;
    let set = ["--reuse-values", "--set", "guard.bogus=1"];
    let upgrade = [
        &["upgrade", RELEASE, chart.to_str().unwrap(), "-n", NS][..],
        &set,
    ]
    .concat();
    let refused = helm.run(&upgrade);
    assert!(!refused.ok && refused.out.contains("bogus"), "{refused:?}");
    let uninstall = helm.waiting(&["uninstall", RELEASE]);
    assert!(uninstall.ok, "{uninstall:?}");
    assert_eq!(helm.status(), None, "the release is gone");
    assert_eq!(
        rvs(),
        (
            kv1["metadata"]["resourceVersion"].clone(),
            chart1["metadata"]["resourceVersion"].clone()
        ),
        "the hook wrote nothing"
    );
    figure(&format!(
        "inplace: Helm 3: helm uninstall (the hook's post) in {:.1} s; the test {:.1} s",
        uninstall.took.as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
    drop(leftovers);
}

/// Mid-suspension: the previous guard suspended a v1.7.1 upgrade; `helm upgrade` to this chart;
/// the new pod holds on the previous records (nothing written) and restores exactly at the end.
#[test]
fn helm_upgrade_mid_suspension_holds_and_restores_exactly_at_the_upgrades_end() {
    let _turn = turn();
    let start = Instant::now();
    let helm = Helm::new();
    let leftovers = fresh(&helm);
    let previous = previous_installed(&helm);
    let (old_pod, _) = ready_pod().unwrap();
    let before = compared();
    let original = methods();
    assert_eq!(original, json!(["LiveMigrate"]), "something to restore");

    // The upgrade begins: the previous guard suspends.
    upgrade_suspended(UPGRADE, "the previous guard, at the Upgrade's creation");
    // Its last write (the ManagedChart's, or an event's wake) settled.
    std::thread::sleep(Duration::from_secs(2));
    let suspended = rvs();
    let previous_records = records();
    assert!(!previous_records.is_empty(), "the previous guard's records");

    // helm upgrade mid-upgrade: the new pod goes on from those records, writing nothing.
    let run = upgraded(&helm, &old_pod);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(rvs(), suspended, "the new pod writes nothing mid-upgrade");
    assert_eq!(records(), previous_records);
    set_state(UPGRADE, "PreparingNodes");
    set_state(UPGRADE, "UpgradingSystemServices");
    set_state(UPGRADE, "UpgradingNodes");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rvs(), suspended, "held through the rest of the upgrade");
    assert_eq!(methods(), json!([]));

    // The end: restored, then the field owners given back (the release, a write of its own).
    let ended = Instant::now();
    finish_upgrade(UPGRADE);
    let restored = restored_exactly(
        "the new pod, at the Upgrade's end",
        &original,
        &before,
        ended,
    );
    assert!(records().is_empty());
    figure(&format!(
        "inplace: helm upgrade {} to {} mid-suspension: the new pod Ready in {:.1} s, held, restored {:.1} s after Succeeded, exactly (owners included) {:.1} s after; the test {:.1} s",
        previous.version,
        current().version,
        run.took.as_secs_f64(),
        restored.as_secs_f64(),
        ended.elapsed().as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
    drop(leftovers);
}

/// From the previous release's Jobs to this chart mid-upgrade, as docs/upgrading.md writes it:
/// its `pre` Job and its armed `post` (its manifests with its image) before the upgrade; during
/// it, this chart installed, then the armed Job deleted so that one restorer is left; this
/// resident guard writes nothing until the upgrade's end, then restores exactly.
#[test]
fn from_the_previous_releases_jobs_to_the_chart_mid_upgrade_the_resident_guard_restores() {
    let _turn = turn();
    let start = Instant::now();
    let helm = Helm::new();
    let leftovers = fresh(&helm);
    let previous = previous();
    let before = compared();
    let original = methods();
    let with_previous_image = |dir: &str| {
        let image = previous.image.clone();
        rendered_with(&format!("target/previous/src/manifests/{dir}"), |job| {
            job["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        })
    };

    // The previous release's Jobs: pre, then the armed post, waiting for the next upgrade.
    apply(&with_previous_image("pre"));
    let outcome = wait_job("workload-update-guard-pre", Duration::from_secs(120));
    assert_eq!(outcome.condition, "Complete", "the previous release's pre");
    let pod = &pods_of("workload-update-guard-pre")[0];
    assert_eq!(pod["spec"]["containers"][0]["image"], json!(previous.image));
    assert_eq!(methods(), json!([]), "suspended by the previous pre");
    apply(&with_previous_image("post-armed"));
    wait_until(
        "the previous release's armed post running",
        Duration::from_secs(60),
        || {
            pods_of(ARMED)
                .iter()
                .any(|p| p["status"]["phase"] == "Running")
        },
    );
    // The upgrade after pre's record (second precision, as creationTimestamp).
    std::thread::sleep(Duration::from_millis(1100));
    let suspended = rvs();
    let previous_records = records();
    let created = Instant::now();
    start_upgrade(UPGRADE, "v1.7.1");
    set_state(UPGRADE, "PreparingRepo");

    // Mid-upgrade: this chart installed, then the armed Job deleted.
    let install = current().helm(&helm, "install", "current");
    k(&["-n", NS, "delete", "job", ARMED, "--wait"]);
    wait_until("the armed post's pod gone", Duration::from_secs(60), || {
        pods_of(ARMED).is_empty()
    });
    set_state(UPGRADE, "UpgradingNodes");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        rvs(),
        suspended,
        "held through the upgrade: nothing written"
    );
    assert_eq!(records(), previous_records);
    let ended = Instant::now();
    finish_upgrade(UPGRADE);
    let restored = restored_exactly(
        "this resident guard, at the Upgrade's end",
        &original,
        &before,
        ended,
    );
    figure(&format!(
        "inplace: the previous release's ({}) pre and armed post, this chart installed mid-upgrade in {:.1} s and the armed Job deleted: restored {:.1} s after Succeeded ({:.1} s after the Upgrade's creation); the test {:.1} s",
        previous.version,
        install.took.as_secs_f64(),
        restored.as_secs_f64(),
        created.elapsed().as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
    drop(leftovers);
}

/// The methods back at `original` within 10 s of `ended` (the time it took), then both objects
/// and their field owners exactly as `before` (the release's own write comes just after).
fn restored_exactly(
    who: &str,
    original: &Value,
    before: &(String, String),
    ended: Instant,
) -> Duration {
    let restored = methods_become(who, original, ended, Duration::from_secs(10));
    let mut now = compared();
    while now != *before && ended.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        now = compared();
    }
    assert_eq!(
        now.0, before.0,
        "the KubeVirt CR and its field owners as before"
    );
    assert_eq!(
        now.1, before.1,
        "the ManagedChart and its field owners as before"
    );
    restored
}
