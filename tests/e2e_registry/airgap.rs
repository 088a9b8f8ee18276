//! An air-gapped site, no build, as docs/chart.md ("Air-gapped: the release through a file")
//! writes it. The tests' usual registry stands for the release's home, `ghcr.io`: the image
//! pushed by `hack/image.sh push` and the chart by `hack/chart.sh push` (the release workflow's
//! two steps). Outside, a host with internet writes two files: the image by digest as an
//! `oci-archive` (`skopeo copy --all --preserve-digests`) and the chart (`helm pull oci://`).
//! The first registry is stopped, so only the files cross; inside, they go into the site's
//! registry (a second one beside it): `skopeo copy` of the archive, `helm push` of the .tgz. Then
//! the two installs from there:
//!
//! - the operator's `helm install oci://…/workload-update-guard --version` (Helm 4): the pod
//!   runs the released digest, and the one command the doc gives to show it prints it;
//! - Harvester's add-on. Its Addon becomes a HelmChart with `spec.chart`, `spec.repo`,
//!   `spec.version` and the values copied, nothing else (harvester/harvester v1.7.1 and master
//!   3d63c2a, `pkg/controller/master/addon/common.go` `deployHelmChart`, `addon_processing.go`
//!   on an update); its CRD requires `repo` but takes `""`
//!   (`deploy/charts/harvester-crd/templates/harvesterhci.io_addons.yaml`). With `spec.repo`
//!   empty the helm-controller hands `spec.chart` as is to klipper-helm's Job
//!   (k3s-io/helm-controller v0.15.0 to v0.17.7, `pkg/controllers/chart/chart.go` `job`: `CHART`
//!   is `NAME/CHART` only with a repo; `args`: `install --version VERSION`), whose entry script
//!   adds no repository for it and runs `helm install --version VERSION NAME oci://…` with the
//!   valuesContent as `--values` (k3s-io/klipper-helm `entry`, v0.9.18 with Helm v3.20.2 and
//!   v0.13.3 with Helm v4.1.4: `helm_repo_init`, `helm_update`; the `delete` is `helm uninstall
//!   --wait`). Nothing of the Addon sets the Job's CA (`repoCA`, `repoCAConfigMap`), login
//!   (`dockerRegistrySecret`) or `plainHTTP`: its helm pulls anonymously, over TLS, trusting the
//!   CAs of `SSL_CERT_FILE` (the entry sets it to the service account's CA) and of the image's
//!   `/etc/ssl/certs` (the public ones). Modelled here with the pinned Helm 3: refused with a CA
//!   it does not trust (a private CA, as most sites' registries have), installed with the
//!   registry's CA as `SSL_CERT_FILE` (standing for a public CA's certificate), and uninstalled as
//!   the entry's `delete` (the hook's pod on the site registry's image).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::node::*;
use crate::registry::RegistryUp;
use crate::release::*;
use crate::support::{helm_bin, helm_with_env, helm3_bin, repo_root};

/// The site's registry beside the tests' usual one (port 5000), on the same address.
const SITE_PORT: u16 = 5001;
const CHART: &str = "workload-update-guard";

/// `hack/chart.sh ARGS` with the pinned Helm 4 and the registry tests' Helm home: its stdout.
fn chart_sh(args: &[&str]) -> String {
    let home = node().dir.join("helm-home-registry");
    let out = Command::new("bash")
        .arg(repo_root().join("hack/chart.sh"))
        .args(args)
        .env("HELM", helm_bin())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hack/chart.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn skopeo_ok(args: &[&str]) {
    let out = skopeo(args);
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// klipper-helm's Job with Helm 3: a fresh Helm home (its emptyDirs), `ca` as the CAs it trusts
/// (`SSL_CERT_FILE`; `SSL_CERT_DIR` as the entry sets it).
fn addon_job_helm(ca: &Path, args: &[&str]) -> (bool, String) {
    let home = node().dir.join("helm-home-addon");
    let _ = std::fs::remove_dir_all(&home);
    let env = [
        ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ("SSL_CERT_DIR", "/etc/ssl/certs"),
    ];
    let kubeconfig = node().dir.join("kubeconfig");
    helm_with_env(helm3_bin(), &home, &kubeconfig, &env, args)
}

/// docs/chart.md's one command that shows the digest that runs: one line per guard pod.
fn running_digest() -> String {
    k(&[
        "-n",
        NS,
        "get",
        "pod",
        "-l",
        "app.kubernetes.io/instance=workload-update-guard,app.kubernetes.io/component=watch",
        "-o",
        "jsonpath={range .items[*]}{.status.containerStatuses[0].imageID}{\"\\n\"}{end}",
    ])
}

#[test]
fn the_release_through_a_file_into_a_site_registry_installs_from_oci_and_runs_its_digest() {
    let _turn = turn();
    harvester_state();
    let start = Instant::now();
    let version = env!("CARGO_PKG_VERSION");

    // The release (release.yml): the image and the chart on "ghcr.io".
    let released = RegistryUp::start(None);
    let (tag, digest) = released.push(&[]);
    assert_eq!(tag, version);
    let released_ca = format!("{}/ca.crt", released.vars["CA_DIR"]);
    let work = node().dir.join("airgap");
    let _ = std::fs::remove_dir_all(&work);
    let (package, transfer) = (work.join("package"), work.join("transfer"));
    std::fs::create_dir_all(&transfer).unwrap();
    let package = package.to_str().unwrap();
    let transfer = transfer.to_str().unwrap();
    chart_sh(&["package", package]);
    let released_charts = format!("oci://{}/charts", released.vars["PUSH"]);
    chart_sh(&["push", package, &released_charts, "--ca-file", &released_ca]);
    let site = RegistryUp::start_on(SITE_PORT, None);
    let site_ca = format!("{}/ca.crt", site.vars["CA_DIR"]);
    let _cleanup = Cleanup { secret: None };

    // Outside: two files.
    let outside = Instant::now();
    let archive = format!("oci-archive:{transfer}/workload-update-guard-{version}.tar");
    skopeo_ok(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--src-cert-dir",
        &released.vars["CA_DIR"],
        &format!(
            "docker://{}/wug/workload-update-guard@{digest}",
            released.vars["PUSH"]
        ),
        &archive,
    ]);
    helm_ok(&[
        "pull",
        &format!("{released_charts}/{CHART}"),
        "--version",
        version,
        "--ca-file",
        &released_ca,
        "--destination",
        transfer,
    ]);
    let outside = outside.elapsed();
    let inspected = skopeo(&["inspect", "--format", "{{.Digest}}", &archive]);
    assert_eq!(
        String::from_utf8_lossy(&inspected.stdout).trim(),
        digest,
        "the archive keeps the released digest: {}",
        String::from_utf8_lossy(&inspected.stderr)
    );
    // Only the files cross.
    node().script("registry-stop", &[]);

    // Inside: into the site's registry.
    let inside = Instant::now();
    skopeo_ok(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--dest-cert-dir",
        &site.vars["CA_DIR"],
        &archive,
        &format!(
            "docker://{}/wug/workload-update-guard:{version}",
            site.vars["PUSH"]
        ),
    ]);
    let tgz = format!("{transfer}/{CHART}-{version}.tgz");
    let site_charts = format!("oci://{}/charts", site.vars["PUSH"]);
    // The .tgz is the release's byte for byte; its OCI manifest is not (`helm push` stamps the
    // push's time in it).
    let released_tgz = format!("{package}/{CHART}-{version}.tgz");
    assert!(
        std::fs::read(&tgz).unwrap() == std::fs::read(&released_tgz).unwrap(),
        "helm pull gave another archive than the release's"
    );
    helm_ok(&["push", &tgz, &site_charts, "--ca-file", &site_ca]);
    let inside = inside.elapsed();

    // The operator's install from the site's registry, by the released digest.
    let repo = format!("{}/wug/workload-update-guard", site.vars["REGISTRY"]);
    let image = format!("image.repository={repo},image.tag={version},image.digest={digest}");
    let chart = format!("{site_charts}/{CHART}");
    let install = Instant::now();
    helm_ok(&[
        "install",
        RELEASE,
        &chart,
        "--version",
        version,
        "-n",
        NS,
        "--ca-file",
        &site_ca,
        "--set",
        &image,
        "--wait",
        "--timeout",
        "120s",
    ]);
    let ready = install.elapsed();
    let pod = newest_guard_pod()
        .filter(is_ready)
        .expect("the guard's pod Ready");
    let runs = format!("{repo}@{digest}");
    assert_eq!(pod["status"]["containerStatuses"][0]["imageID"], runs);
    assert_eq!(running_digest(), format!("{runs}\n"));
    helm_ok(&["uninstall", RELEASE, "-n", NS, "--no-hooks", "--wait"]);
    // Its pod goes by the garbage collector after Helm's wait: gone before the next install.
    wait_until(
        "the operator's guard pod gone",
        Duration::from_secs(60),
        || newest_guard_pod().is_none(),
    );

    // The add-on: the Addon's spec.chart oci://…, spec.repo "", spec.version, its valuesContent.
    let values = work.join("values-01_HelmChart.yaml");
    std::fs::write(
        &values,
        format!("image:\n  repository: {repo}\n  tag: {version}\n  digest: {digest}\n"),
    )
    .unwrap();
    let job = [
        "install",
        "--version",
        version,
        RELEASE,
        &chart,
        // The Job's namespace, in-cluster; here the node's kubeconfig names none.
        "--namespace",
        NS,
        "--values",
        values.to_str().unwrap(),
    ];
    let (ok, said) = addon_job_helm(Path::new(&released_ca), &job);
    assert!(
        !ok && said.contains("x509"),
        "a registry whose CA the Job does not trust: {said}"
    );
    let addon = Instant::now();
    let (ok, said) = addon_job_helm(Path::new(&site_ca), &job);
    assert!(ok, "the add-on's helm install from oci://: {said}");
    wait_until("the add-on's guard Ready", Duration::from_secs(120), || {
        newest_guard_pod().is_some_and(|p| is_ready(&p))
    });
    let addon_ready = addon.elapsed();
    assert_eq!(running_digest(), format!("{runs}\n"));
    // The Addon disabled: the entry's delete, the hook pulling from the site's registry.
    let (ok, said) = addon_job_helm(
        Path::new(&site_ca),
        &["uninstall", RELEASE, "--namespace", NS, "--wait"],
    );
    assert!(ok, "the add-on's helm uninstall: {said}");
    let hook_pulled = events(&format!("{HOOK}-"), "Pulled").join("; ");
    assert!(hook_pulled.contains(&repo), "{hook_pulled}");

    figure(&format!(
        "air-gapped: outside (skopeo to an oci-archive, helm pull) {:.1} s; inside (skopeo copy, \
         helm push) {:.1} s; helm install oci:// Ready {:.1} s; the add-on's (Helm 3) Ready \
         {:.1} s; the whole test {:.1} s",
        outside.as_secs_f64(),
        inside.as_secs_f64(),
        ready.as_secs_f64(),
        addon_ready.as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
}
