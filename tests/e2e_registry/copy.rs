//! The release's image into a site's own registry with no build, as docs/chart.md writes it:
//! `skopeo copy --all --preserve-digests` by digest from the registry the image was pushed to
//! (standing for the release's, `ghcr.io`) into a second registry that takes only a login; the
//! first registry stopped, so that nothing else could serve it; the chart installed from the
//! second by that digest with a pull secret, as chart.md's "A registry that needs a login" does:
//! the pod runs the copied image, its `imageID` the released digest.

use std::time::Instant;

use crate::node::*;
use crate::registry::RegistryUp;
use crate::release::*;
use crate::support::repo_root;

const USER: &str = "wug-mirror";
const PASSWORD: &str = "copy-me-4Hd";
const SECRET: &str = "wug-mirror-login";
/// The site's registry beside the tests' usual one (port 5000), on the same address.
const SITE_PORT: u16 = 5001;

#[test]
fn the_released_image_copied_by_digest_into_a_registry_with_a_login_runs_the_chart() {
    let _turn = turn();
    harvester_state();
    let start = Instant::now();
    let released = RegistryUp::start(None);
    let (tag, digest) = released.push(&[]);
    let login = format!("{USER}:{PASSWORD}");
    let site = RegistryUp::start_on(SITE_PORT, Some(&login));
    let _cleanup = Cleanup {
        secret: Some(SECRET),
    };

    // docs/chart.md's copy; the registries' private CAs as --src-cert-dir and --dest-cert-dir.
    let source = format!(
        "docker://{}/wug/workload-update-guard@{digest}",
        released.vars["PUSH"]
    );
    let target = format!(
        "docker://{}/wug/workload-update-guard:{tag}",
        site.vars["PUSH"]
    );
    let copy = |creds: Option<&str>| {
        let mut args = vec![
            "copy",
            "--all",
            "--preserve-digests",
            "--src-cert-dir",
            &released.vars["CA_DIR"],
            "--dest-cert-dir",
            &site.vars["CA_DIR"],
        ];
        if let Some(creds) = creds {
            args.extend(["--dest-creds", creds]);
        }
        args.extend([source.as_str(), target.as_str()]);
        skopeo(&args)
    };
    let refused = copy(None);
    let said = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(
        !refused.status.success()
            && (said.contains("unauthorized") || said.contains("authentication required")),
        "copied without the login, or refused for another reason: {said}"
    );
    let copy_start = Instant::now();
    let copied = copy(Some(&login));
    let copy_took = copy_start.elapsed();
    assert!(
        copied.status.success(),
        "skopeo copy: {}",
        String::from_utf8_lossy(&copied.stderr)
    );
    let inspected = skopeo(&[
        "inspect",
        "--format",
        "{{.Digest}}",
        "--cert-dir",
        &site.vars["CA_DIR"],
        "--creds",
        &login,
        &target,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&inspected.stdout).trim(),
        digest,
        "the copy keeps the released digest: {}",
        String::from_utf8_lossy(&inspected.stderr)
    );

    // Only the site's registry serves it from now on.
    node().script("registry-stop", &[]);

    // chart.md's "A registry that needs a login": the Secret, the install by digest, the check.
    let repo = format!("{}/wug/workload-update-guard", site.vars["REGISTRY"]);
    create_pull_secret(SECRET, &site.vars["REGISTRY"], USER, PASSWORD);
    let chart = repo_root().join("manifests/chart");
    let install_start = Instant::now();
    helm_ok(&[
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        NS,
        "--set",
        &format!("image.repository={repo},image.tag={tag},image.digest={digest}"),
        "--set",
        &format!("imagePullSecrets[0].name={SECRET}"),
        "--wait",
        "--timeout",
        "120s",
    ]);
    let ready = install_start.elapsed();
    let pod = newest_guard_pod()
        .filter(is_ready)
        .expect("the guard's pod Ready");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["imageID"],
        format!("{repo}@{digest}"),
        "{pod:#}"
    );
    let pod_name = pod["metadata"]["name"].as_str().unwrap();
    let pulled = events(pod_name, "Pulled").join("; ");
    assert!(pulled.contains("Successfully pulled image"), "{pulled}");
    let checked = job_sh(&[
        "images",
        "--image",
        &format!("{repo}:{tag}@{digest}"),
        "--pull-secret",
        SECRET,
    ]);
    assert_eq!(checked.code, 0, "{checked:?}");
    figure(&format!(
        "copy by digest: skopeo copy into a registry with a login {:.1} s; the chart's pod Ready \
         {:.1} s after helm install from it; the whole test {:.1} s",
        copy_took.as_secs_f64(),
        ready.as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
}
