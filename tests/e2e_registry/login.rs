//! A registry that needs a login, as many sites' do: the tests' registry with basic auth
//! (htpasswd), the image pushed with `hack/image.sh push --creds`, the chart installed by the
//! real Helm 4 with the image there and `pullPolicy: Always` (every pod pulls). Without a pull
//! secret the pod cannot pull, with the registry's auth error; with `imagePullSecrets` naming a
//! `kubernetes.io/dockerconfigjson` Secret (`kubectl create secret docker-registry`), the guard's
//! pod pulls and turns Ready, and `helm uninstall`'s hook Job pulls with the same secret. The
//! pre-flight check `hack/job.sh images --pull-secret NAME` pulls with it on every node too
//! (without it, the node's line says `false (… auth …)`), and so does a Job by hand
//! (`hack/job.sh run status --pull-secret NAME`).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::node::*;
use crate::registry::{RegistryUp, remove_from_node};
use crate::release::*;
use crate::support::{output_ok, repo_root};

const USER: &str = "wug-puller";
const PASSWORD: &str = "pull-me-9Qx";
const SECRET: &str = "wug-registry-login";

#[test]
fn the_chart_pulls_through_a_registry_that_needs_a_login() {
    let _turn = turn();
    harvester_state();
    let start = Instant::now();
    let login = format!("{USER}:{PASSWORD}");
    let reg = RegistryUp::start(Some(&login));
    let _cleanup = Cleanup {
        secret: Some(SECRET),
    };

    // The push needs the login too.
    let version = output_ok({
        let mut c = Command::new("bash");
        c.arg(repo_root().join("hack/image.sh")).arg("version");
        c
    });
    let push = |creds: Option<&str>| {
        let mut c = Command::new("bash");
        c.arg(repo_root().join("hack/image.sh"))
            .arg("push")
            .arg(format!("{}/wug/workload-update-guard", reg.vars["PUSH"]))
            .arg("--cert-dir")
            .arg(&reg.vars["CA_DIR"])
            .env_remove("IMAGE_PUSH_CREDS")
            .env_remove("REGISTRY_AUTH_FILE");
        if let Some(creds) = creds {
            c.args(["--creds", creds]);
        }
        c.output().unwrap()
    };
    let refused = push(None);
    let said = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(
        !refused.status.success()
            && (said.contains("401")
                || said.contains("unauthorized")
                || said.contains("authentication required")),
        "pushed without a login, or refused for another reason: {said}"
    );
    let pushed = push(Some(&login));
    assert!(
        pushed.status.success(),
        "hack/image.sh push --creds: {}",
        String::from_utf8_lossy(&pushed.stderr)
    );

    // By the registry's own address, which the node's hosts.toml gives its CA: the login is the
    // only thing missing.
    let repo = format!("{}/wug/workload-update-guard", reg.vars["REGISTRY"]);
    let image = format!("{repo}:{}", version.trim());
    let chart = repo_root().join("manifests/chart");
    let chart = chart.to_str().unwrap();
    let values = [
        "--set",
        &format!("image.repository={repo}"),
        "--set",
        "image.pullPolicy=Always",
    ];

    // 1. No pull secret: the pod cannot pull, and says it is the login.
    let mut install = vec!["install", RELEASE, chart, "-n", NS];
    install.extend(values);
    helm_ok(&install);
    let no_login = wait_until(
        "the pull without a login to fail",
        Duration::from_secs(90),
        || !events("workload-update-guard-watch-", "Failed").is_empty(),
    );
    let failed = events("workload-update-guard-watch-", "Failed").join("; ");
    assert!(failed.contains(&image), "{failed}");
    assert!(
        [
            "401 Unauthorized",
            "authorization failed",
            "may require authorization"
        ]
        .iter()
        .any(|s| failed.contains(s)),
        "an auth error: {failed}"
    );
    let pod = newest_guard_pod().expect("the guard's pod");
    assert!(
        pod["status"]["containerStatuses"][0]["state"]["running"].is_null(),
        "{pod:#}"
    );

    // 2. The Secret as operators make it, named in imagePullSecrets: the new pod pulls and runs.
    create_pull_secret(SECRET, &reg.vars["REGISTRY"], USER, PASSWORD);
    let secret = get_json(&["-n", NS, "secret", SECRET]);
    assert_eq!(secret["type"], "kubernetes.io/dockerconfigjson");

    // The README's pre-flight check, with and without the login: every node pulls with it.
    let unchecked = job_sh(&["images", "--image", &image]);
    assert_eq!(unchecked.code, 1, "{unchecked:?}");
    assert!(unchecked.stdout.contains(" false ("), "{unchecked:?}");
    assert!(unchecked.stdout.contains("auth"), "{unchecked:?}");
    let checked = job_sh(&["images", "--image", &image, "--pull-secret", SECRET]);
    assert_eq!(checked.code, 0, "{checked:?}");
    let line = checked.stdout.lines().next().unwrap_or_default();
    assert!(line.contains(" true"), "{checked:?}");
    // The Jobs by hand (the runbooks' fallback with no guard pod) pull with it too.
    remove_from_node(&repo);
    let job = job_sh(&[
        "run",
        "status",
        "--image",
        &image,
        "--pull-secret",
        SECRET,
        "--timeout",
        "120",
    ]);
    assert_eq!(job.code, 0, "{job:?}");
    let status_pulled = events("workload-update-guard-status-", "Pulled").join("; ");
    assert!(
        status_pulled.contains("Successfully pulled image"),
        "{status_pulled}"
    );
    let mut upgrade = vec!["upgrade", RELEASE, chart, "-n", NS];
    upgrade.extend(values);
    let pull_secrets = format!("imagePullSecrets[0].name={SECRET}");
    upgrade.extend(["--set", &pull_secrets]);
    let with_login = Instant::now();
    helm_ok(&upgrade);
    wait_until(
        "the guard's pod Ready with the login",
        Duration::from_secs(120),
        || {
            newest_guard_pod()
                .is_some_and(|p| p["spec"]["imagePullSecrets"][0]["name"] == SECRET && is_ready(&p))
        },
    );
    let ready = with_login.elapsed();
    let pod = newest_guard_pod().unwrap();
    let name = pod["metadata"]["name"].as_str().unwrap();
    let pulled = events(name, "Pulled").join("; ");
    assert!(pulled.contains("Successfully pulled image"), "{pulled}");
    assert!(
        pod["status"]["containerStatuses"][0]["imageID"]
            .as_str()
            .is_some_and(|id| id.starts_with(&repo)),
        "{pod:#}"
    );

    // 3. helm uninstall: the hook's Job pulls with the same secret (Always), runs `post`
    // (nothing of ours: it ends at once), and the release goes.
    let uninstall_start = Instant::now();
    let out = helm_ok(&["uninstall", RELEASE, "-n", NS, "--wait"]);
    let uninstall = uninstall_start.elapsed();
    let hook_pulled = events(&format!("{HOOK}-"), "Pulled").join("; ");
    assert!(
        hook_pulled.contains("Successfully pulled image") && hook_pulled.contains(&image),
        "the hook's pod pulled: {hook_pulled}; helm: {out}"
    );
    figure(&format!(
        "registry with a login: the pull without it failed after {:.1} s; with imagePullSecrets \
         the pod Ready {:.1} s after helm upgrade; helm uninstall (the hook pulling) {:.1} s; \
         the whole test {:.1} s",
        no_login.as_secs_f64(),
        ready.as_secs_f64(),
        uninstall.as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
}
