//! The migration list on the real API server, for a cluster with tens of thousands of them:
//! page by page, and exactly the
//! unfinished workload-update migrations, told by KubeVirt's annotation or, without it, by the
//! name prefix.

use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use workload_update_guard::cluster::{Cluster, MIGRATIONS_PAGE};
use workload_update_guard::plan::migrations::WORKLOAD_UPDATE_ANNOTATION;
use workload_update_guard::warnings::{MIGRATIONS_UNDER_WAY, PRE_LATE};

use crate::support::*;

/// More than two pages of [`MIGRATIONS_PAGE`].
const COUNT: usize = 1200;

/// The objects of the test, by name: (annotated, phase). The bulk (`a-NNNN`, then `z-NNNN`, so
/// that the prefixed names fall in the middle page) carries neither, as a user's migration;
/// every 50th is the updater's and finished. Four are reported, one on each page and two by
/// their names: by annotation alone on the first and last page, by the prefix alone (no status
/// yet: `Pending`), and by both.
fn objects() -> Vec<(String, bool, Option<&'static str>)> {
    let mut out: Vec<(String, bool, Option<&'static str>)> = (0..COUNT - 4)
        .map(|i| {
            let name = format!("{}-{i:04}", if i < COUNT / 2 { "a" } else { "z" });
            match i {
                250 => (name, true, Some("Running")),
                1150 => (name, true, Some("Scheduling")),
                _ if i % 50 == 0 => (name, true, Some(["Succeeded", "Failed"][i / 50 % 2])),
                _ => (name, false, None),
            }
        })
        .collect();
    out.extend([
        (
            "kubevirt-workload-update-r9q4m".into(),
            true,
            Some("Running"),
        ),
        ("kubevirt-workload-update-x7k2p".into(), false, None),
        ("kubevirt-workload-update-done".into(), true, Some("Failed")),
        ("renamed-running".into(), false, Some("Running")),
    ]);
    out
}

/// Creates the objects, 16 requests at a time, then sets the phases.
async fn create_all(client: &kube::Client, ns: &str, objects: &[(String, bool, Option<&str>)]) {
    let mut tasks = JoinSet::new();
    for chunk in objects.chunks(objects.len().div_ceil(16)) {
        let (client, ns) = (client.clone(), ns.to_string());
        let chunk: Vec<(String, bool)> = chunk.iter().map(|(n, a, _)| (n.clone(), *a)).collect();
        tasks.spawn(async move {
            for (name, annotated) in chunk {
                let mut meta = json!({"name": name});
                if annotated {
                    meta["annotations"] = json!({WORKLOAD_UPDATE_ANNOTATION: ""});
                }
                create(&client, "VirtualMachineInstanceMigration", &ns,
                    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                           "metadata": meta, "spec": {"vmiName": "vm1"}})).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    for (name, _, phase) in objects {
        if let Some(p) = phase {
            let status = json!({"phase": p});
            set_status(client, "VirtualMachineInstanceMigration", ns, name, status).await;
        }
    }
}

/// The list requests for migrations in the audit log from line `from` on.
fn migration_lists(cp: &ControlPlane, from: usize) -> usize {
    std::fs::read_to_string(cp.dir.join("audit.log"))
        .unwrap()
        .lines()
        .skip(from)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "list"
                && e["objectRef"]["resource"] == "virtualmachineinstancemigrations"
        })
        .count()
}

fn audit_lines(cp: &ControlPlane) -> usize {
    std::fs::read_to_string(cp.dir.join("audit.log"))
        .unwrap()
        .lines()
        .count()
}

/// 1,200 migrations: the list is paged by the API server, and `status`, a late `pre` and the
/// list itself report exactly the four unfinished workload-update ones, whatever the page
/// size; the late `pre` lists once for its two warnings. On a control plane of its own: the
/// other tests' lists are cluster-wide and must not see these.
#[tokio::test]
async fn the_migrations_are_listed_page_by_page_and_only_the_unfinished_updater_s_kept() {
    let (cp, client) = ControlPlane::own_audited().await;
    // The CR counts outdated workloads: `pre` comes late, and names the migrations twice.
    let ns = harvester_ns(&client, "paged", json!(["LiveMigrate"])).await;
    let objects = objects();
    create_all(&client, &ns, &objects).await;
    let want = [
        "a-0250 Running",
        "kubevirt-workload-update-r9q4m Running",
        "kubevirt-workload-update-x7k2p Pending",
        "z-1150 Scheduling",
    ];

    // The real server pages a consistent list with a limit (its watch cache's
    // resourceVersion=0 list would not): what keeps the memory flat.
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("VirtualMachineInstanceMigration"),
    );
    let first = api
        .list(&ListParams::default().limit(MIGRATIONS_PAGE))
        .await
        .unwrap();
    assert_eq!(first.items.len(), MIGRATIONS_PAGE as usize);
    assert!(first.metadata.continue_.is_some_and(|c| !c.is_empty()));

    let cluster = Cluster::from_client(client.clone(), false);
    for limit in [MIGRATIONS_PAGE, 100, 7] {
        let listed = cluster.list_migrations(limit).await.unwrap();
        let got: Vec<String> = listed
            .iter()
            .map(|m| format!("{} {}", m.name, m.phase))
            .collect();
        assert_eq!(got, want, "{limit} a page");
    }

    let mut env = env_for(&ns, "status");
    env.insert("LOG_FORMAT".into(), "json".into());
    let status = cp.run(env).await;
    status.ok();
    let report: Value = serde_json::from_str(&status.stdout).unwrap();
    let got: Vec<String> = report["unfinishedMigrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}/{} ({})",
                m["namespace"].as_str().unwrap(),
                m["name"].as_str().unwrap(),
                m["phase"].as_str().unwrap()
            )
        })
        .collect();
    let named: Vec<String> = want
        .iter()
        .map(|w| {
            let (name, phase) = w.split_once(' ').unwrap();
            format!("{ns}/{name} ({phase})")
        })
        .collect();
    assert_eq!(got, named);

    let before = audit_lines(&cp);
    let pre = cp.run(env_for(&ns, "pre")).await;
    pre.ok();
    for reason in [PRE_LATE, MIGRATIONS_UNDER_WAY] {
        let w = pre.warnings_of(reason);
        assert_eq!(w.len(), 1, "{reason}: {pre:?}");
        for n in &named {
            assert!(w[0].contains(n.as_str()), "{n} in {}", w[0]);
        }
        assert!(
            !w[0].contains("done") && !w[0].contains("renamed"),
            "{}",
            w[0]
        );
    }
    // Once, in pages of 500: 1,200 objects are three.
    assert_eq!(migration_lists(&cp, before), 3);
    cp.down();
}

/// A migration in `ns` for `vmi`, made by `cause` (KubeVirt's annotation; none: a user's), in
/// `phase`.
async fn migration(client: &kube::Client, ns: &str, name: &str, cause: Option<&str>, phase: &str) {
    let mut meta = json!({"name": name});
    if let Some(annotation) = cause {
        meta["annotations"] = json!({annotation: ""});
    }
    create(
        client,
        "VirtualMachineInstanceMigration",
        ns,
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
               "metadata": meta, "spec": {"vmiName": "vm1"}}),
    )
    .await;
    set_status(
        client,
        "VirtualMachineInstanceMigration",
        ns,
        name,
        json!({"phase": phase}),
    )
    .await;
}

/// `post` run as a Job after an upgrade no resident guard recorded: the upgrade's record from
/// the migrations still there (made since the Upgrade's creation, by cause; the failed one),
/// saying what it could not count; a second `post` adds nothing. On a control plane of its own:
/// the record counts every migration of the cluster.
#[tokio::test]
async fn a_jobs_post_records_the_upgrade_after_the_fact() {
    let (cp, client) = ControlPlane::own().await;
    let kubeconfig = cp.kubeconfig();
    let ns = harvester_ns(&client, "after-the-fact", json!(["LiveMigrate"])).await;
    create_records_configmap(&kubeconfig, &ns);
    let vms = namespace(&client, "vms").await;
    migration(&client, &vms, "before", None, "Succeeded").await;
    // Times are whole seconds: the Upgrade a second after the migration made before it.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let pre = run_bin(&kubeconfig, env_for(&ns, "pre")).await;
    pre.ok();
    let up =
        crate::support::harvester::Upgrade::start(&client, &ns, "hvst-upgrade-after", "v1.7.1")
            .await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let evacuation = "kubevirt.io/evacuationMigration";
    migration(
        &client,
        &vms,
        "kubevirt-evacuation-a",
        Some(evacuation),
        "Succeeded",
    )
    .await;
    migration(
        &client,
        &vms,
        "kubevirt-evacuation-b",
        Some(evacuation),
        "Failed",
    )
    .await;
    migration(&client, &vms, "mine", None, "Succeeded").await;
    up.finish(&client, true).await;
    let post = run_bin(&kubeconfig, env_for(&ns, "post")).await;
    post.ok();
    let records = upgrade_records(&client, &ns).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    let r = &records[0];
    assert_eq!(
        r["upgrade"],
        format!("Upgrade {ns}/hvst-upgrade-after"),
        "{r:#}"
    );
    let m = &r["migrations"];
    assert_eq!(
        (
            &m["evacuation"],
            &m["workloadUpdate"],
            &m["other"],
            &m["failed"]
        ),
        (&json!(2), &json!(0), &json!(1), &json!(1)),
        "{r:#}"
    );
    assert_eq!(r["suspendedBy"], "the guard", "{r:#}");
    assert_eq!(r["complete"], true, "{r:#}");
    assert!(
        r["afterTheFact"].as_str().unwrap().contains("undercounted"),
        "{r:#}"
    );
    assert!(post.stderr.contains("after the fact"), "{}", post.stderr);
    let again = run_bin(&kubeconfig, env_for(&ns, "post")).await;
    again.ok();
    assert_eq!(upgrade_records(&client, &ns).await.len(), 1);
    drop(cp);
}
