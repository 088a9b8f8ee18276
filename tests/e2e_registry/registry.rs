//! The image as operators get it: through a registry. The reference registry (CNCF distribution,
//! `hack/registry.sh`) runs with TLS in the node's namespace; the node's containerd has it as a
//! mirror, configured as RKE2 renders Harvester's `containerd-registry` setting (`hosts.toml`
//! with the registry's CA); `hack/image.sh push` puts the image there; the Jobs run with nothing
//! imported by hand, the kubelet pulling through the mirror. Then what the kubelet's image GC
//! does (the image removed from the node), `hack/job.sh images` on a node without the image that
//! can pull it, one with it, and one that can do neither, and the registry stopped: a Job that
//! fails within its bound, naming the image, the node and the pull error.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::node::*;
use crate::support::{assert_contains_all, output_ok, repo_root};

const STATUS: &str = "workload-update-guard-status";

/// Stops the registry and removes its hosts.toml files, however the test ends.
pub struct RegistryUp {
    /// What `hack/node.sh registry-up` printed: REGISTRY (as the node reaches it), PUSH (as the
    /// host does), CA_DIR; on port 5000 also MIRROR and MIRROR_NO_CA.
    pub vars: BTreeMap<String, String>,
    port: u16,
}

impl RegistryUp {
    /// The registry up on port 5000, mirrored as `registry.wug.test`; with `login`
    /// (USER:PASSWORD), it takes only that login.
    pub fn start(login: Option<&str>) -> RegistryUp {
        RegistryUp::start_on(5000, login)
    }

    /// A registry on `port` of the registry's address: 5000 the mirrored one, another port one
    /// beside it known by its address only (a site's own registry).
    pub fn start_on(port: u16, login: Option<&str>) -> RegistryUp {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/node.sh"))
            .arg("registry-up")
            .arg(&node().dir)
            .arg(port.to_string())
            .envs(login.map(|login| ("REGISTRY_LOGIN", login)))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "hack/node.sh registry-up {port} (login: {}): {}",
            login.is_some(),
            String::from_utf8_lossy(&out.stderr)
        );
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        let vars = out
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>();
        let mut keys = vec!["REGISTRY", "PUSH", "CA_DIR"];
        if port == 5000 {
            keys.extend(["MIRROR", "MIRROR_NO_CA"]);
        }
        for key in keys {
            assert!(
                vars.contains_key(key),
                "registry-up printed no {key}: {out}"
            );
        }
        RegistryUp { vars, port }
    }
}

impl RegistryUp {
    /// `hack/image.sh push PUSH/wug/workload-update-guard ARGS` (the registry as the host
    /// reaches it, its CA): the tag and the digest it printed.
    pub fn push(&self, args: &[&str]) -> (String, String) {
        let pushed = output_ok({
            let mut c = Command::new("bash");
            c.arg(repo_root().join("hack/image.sh"))
                .arg("push")
                .arg(format!("{}/wug/workload-update-guard", self.vars["PUSH"]))
                .arg("--cert-dir")
                .arg(&self.vars["CA_DIR"])
                .args(args);
            c
        });
        let pushed = pushed.trim();
        let (pushed_ref, digest) = pushed.split_once('@').unwrap_or_else(|| panic!("{pushed}"));
        assert!(
            digest.starts_with("sha256:") && digest.len() == 71,
            "{pushed}"
        );
        let tag = pushed_ref.rsplit_once(':').unwrap().1;
        (tag.to_string(), digest.to_string())
    }
}

impl Drop for RegistryUp {
    /// The registry stopped, and what the node pulled from it forgotten: the next test counts on
    /// pulling it. (Not while the test panics: a second panic would abort the binary.)
    fn drop(&mut self) {
        for host in ["REGISTRY", "MIRROR"] {
            if let Some(host) = self.vars.get(host)
                && !std::thread::panicking()
            {
                forget_on_node(&format!("{host}/wug/workload-update-guard"));
            }
        }
        let _ = Command::new("bash")
            .arg(repo_root().join("hack/node.sh"))
            .arg("registry-down")
            .arg(&node().dir)
            .arg(self.port.to_string())
            .status();
    }
}

/// Removes every reference of the node's containerd to `repo` (tag and digest), as the kubelet's
/// image GC does for an image no pod uses; the imported images stay.
pub fn remove_from_node(repo: &str) {
    assert!(forget_on_node(repo) > 0, "{repo} was not on the node");
    let after = node().script("ctr", &["images", "ls", "-q"]);
    assert!(!after.contains(repo), "{after}");
}

/// Removes the node's references to `repo`, if any (how many): what a test pulled is not on the
/// node for the next one, which may count on pulling it.
pub fn forget_on_node(repo: &str) -> usize {
    let list = node().script("ctr", &["images", "ls", "-q"]);
    let refs: Vec<&str> = list
        .lines()
        .filter(|r| r.starts_with(&format!("{repo}:")) || r.starts_with(&format!("{repo}@")))
        .collect();
    if !refs.is_empty() {
        let mut args = vec!["images", "rm"];
        args.extend(&refs);
        node().script("ctr", &args);
    }
    refs.len()
}

/// The kubelet's `Pulled` event of the Job's pod: "Successfully pulled image ..." or "Container
/// image ... already present on machine".
fn pulled_event(job: &str) -> String {
    let pods = pods_of(job);
    let pod = pods[0]["metadata"]["name"].as_str().unwrap();
    let selector = format!("involvedObject.name={pod},reason=Pulled");
    let events = get_json(&["-n", NS, "events", "--field-selector", &selector]);
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

fn image_id(job: &str) -> String {
    let pods = pods_of(job);
    pods[0]["status"]["containerStatuses"][0]["imageID"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `hack/job.sh images --image IMAGE`: exit 1, the node cannot pull it, for the reason that
/// starts with `reason` and names `naming`.
fn cannot_pull(image: &str, reason: &str, naming: &str) {
    let run = job_sh(&["images", "--image", image]);
    assert_eq!(run.code, 1, "{run:?}");
    let said = format!("wug-node false (not present, cannot pull: {reason}");
    assert!(run.stdout.starts_with(&said), "{run:?}");
    assert!(run.stdout.contains(naming), "{run:?}");
}

#[test]
fn the_image_through_a_registry_mirror() {
    let _turn = turn();
    harvester_state();
    let start = Instant::now();
    let reg = RegistryUp::start(None);
    let up = start.elapsed();

    // Push with the operator's script, to the registry as the host reaches it.
    let version = output_ok({
        let mut c = Command::new("bash");
        c.arg(repo_root().join("hack/image.sh")).arg("version");
        c
    });
    let version = version.trim();
    let push_start = Instant::now();
    let (tag, digest) = reg.push(&[]);
    let push_took = push_start.elapsed();
    assert_eq!(tag, version, "the tag is the version");

    // The Jobs name the image by the mirrored registry's name; the node resolves it only
    // through its hosts.toml.
    let repo = format!("{}/wug/workload-update-guard", reg.vars["MIRROR"]);
    let image = format!("{repo}:{version}");
    let first = job_sh(&["run", "status", "--image", &image, "--timeout", "180"]);
    assert_eq!(first.code, 0, "{first:?}");
    let event = pulled_event(STATUS);
    assert!(event.contains("Successfully pulled image"), "{event}");
    assert!(image_id(STATUS).ends_with(&digest), "{}", image_id(STATUS));

    // The image GC'd between two Jobs: the next one pulls it again.
    remove_from_node(&repo);
    let second = job_sh(&["run", "status", "--image", &image, "--timeout", "180"]);
    assert_eq!(second.code, 0, "{second:?}");
    let event = pulled_event(STATUS);
    assert!(event.contains("Successfully pulled image"), "{event}");

    // hack/job.sh images: present; absent but pullable (it pulls it); then neither.
    let has = job_sh(&["images", "--image", &image]);
    assert_eq!(has.code, 0, "{has:?}");
    assert_eq!(has.stdout.trim(), "wug-node true", "{has:?}");
    remove_from_node(&repo);
    let pullable = job_sh(&["images", "--image", &image]);
    assert_eq!(pullable.code, 0, "{pullable:?}");
    assert_eq!(
        pullable.stdout.trim(),
        "wug-node true (pulled now)",
        "{pullable:?}"
    );
    // A tag the registry lacks: after the mirror's 404, containerd (1.6) goes on to the name's
    // own server and reports that error (here: no route, as on an air-gapped site).
    cannot_pull(&format!("{repo}:0.0.0-absent"), "", "0.0.0-absent");
    // The mirror without its CA: TLS.
    let no_ca = format!(
        "{}/wug/workload-update-guard:{version}",
        reg.vars["MIRROR_NO_CA"]
    );
    cannot_pull(&no_ca, "TLS: ErrImagePull: ", "x509");
    // By the registry's own address (its hosts.toml gives the CA): pulled.
    let direct = job_sh(&[
        "images",
        "--image",
        &format!(
            "{}/wug/workload-update-guard:{version}",
            reg.vars["REGISTRY"]
        ),
    ]);
    assert_eq!(
        direct.stdout.trim(),
        "wug-node true (pulled now)",
        "{direct:?}"
    );

    // The registry stopped: the node can neither find nor pull it.
    node().script("registry-stop", &[]);
    remove_from_node(&repo);
    let neither = job_sh(&["images", "--image", &image]);
    assert_eq!(neither.code, 1, "{neither:?}");
    assert!(
        neither
            .stdout
            .starts_with("wug-node false (not present, cannot pull: unreachable: ErrImagePull: "),
        "{neither:?}"
    );
    assert!(neither.stdout.contains(&image), "{neither:?}");

    // And a Job: Failed within its bound, naming the image, the node and the pull error.
    let failed = job_sh(&[
        "run",
        "status",
        "--image",
        &image,
        "--pull-timeout",
        "15",
        "--timeout",
        "180",
    ]);
    assert_eq!(failed.code, 1, "{failed:?}");
    // The guard's words, the Job's condition, containerd's error.
    let cannot = format!("the image {image} cannot be pulled on node wug-node: ");
    assert_contains_all(
        &failed.stderr,
        &[
            &cannot,
            "job: Failed (PodFailurePolicy)",
            "connection refused",
        ],
    );
    let job: Value = get_json(&["-n", NS, "job", STATUS]);
    let note = job["metadata"]["annotations"]["workload-update-guard.harvesterhci.io/failure"]
        .as_str()
        .unwrap_or_default();
    assert!(note.contains(&image) && note.contains("wug-node"), "{note}");
    assert!(failed.took < Duration::from_secs(90), "{failed:?}");
    figure(&format!(
        "registry: up (build cached) {:.1} s; hack/image.sh push {:.1} s; status Job pulling through the mirror {:.1} s, \
         again after the image's removal {:.1} s; images: present {:.1} s, pulled now {:.1} s, registry stopped {:.1} s; \
         Job Failed with the registry stopped (--pull-timeout 15) {:.1} s",
        up.as_secs_f64(),
        push_took.as_secs_f64(),
        first.took.as_secs_f64(),
        second.took.as_secs_f64(),
        has.took.as_secs_f64(),
        pullable.took.as_secs_f64(),
        neither.took.as_secs_f64(),
        failed.took.as_secs_f64()
    ));
}
