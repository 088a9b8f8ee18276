//! Reads, the conditional write, and lists: each request through the retry layer.

use std::time::Duration;

use backon::BackoffBuilder;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ObjectList, Request};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::debug;

use super::retry::{Class, backoff, classify};
use super::{Cluster, Written, rv};
use crate::error::{Error, Subject};
use crate::model::{FIELD_MANAGER, Kind, Target};
use crate::plan::forecast::Forecast;
use crate::plan::migrations::{Listed, Migration};
use crate::plan::upgrade_record::{self, MigrationSeen, Seen, VmiSeen};
use crate::vocabulary::{Plan, Refusal};

pub(super) fn api(client: &Client, kind: Kind, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &kind.resource()),
        None => Api::all_with(client.clone(), &kind.resource()),
    }
}

fn listed(kind: Kind, namespace: Option<&str>) -> Subject {
    let namespace = namespace.unwrap_or("(cluster)").to_string();
    Subject::Listed { kind, namespace }
}

fn json(object: DynamicObject) -> Value {
    serde_json::to_value(object).expect("objects serialize")
}

impl Cluster {
    /// `None`: no such object. A 404 for the resource itself (no CRD) is an error.
    pub async fn get(&self, target: &Target) -> Result<Option<Value>, Error> {
        let api = api(&self.client, target.kind, Some(&target.key.namespace));
        let name = &target.key.name;
        let s = match self.call(&format!("get {target}"), || api.get(name)).await {
            Ok(obj) => return Ok(Some(json(obj))),
            Err(kube::Error::Api(s)) if s.code == 404 => s,
            Err(e) => return Err(self.permanent(Subject::Object(target.clone()), e)),
        };
        if s.details.as_ref().is_some_and(|d| d.name == *name) {
            return Ok(None);
        }
        Err(Error::NotServed {
            subject: Subject::Object(target.clone()),
            plural: target.kind.plural(),
            hint: match target.kind {
                Kind::ManagedChart => {
                    "; for KubeVirt without Rancher/Fleet, set MANAGEDCHART_NAME= (empty)"
                }
                _ => "",
            },
            message: s.message.trim().to_string(),
            source: Box::new(kube::Error::Api(s)),
        })
    }

    /// On a conflict, reads and plans again, until the plan applies or there is nothing to do.
    pub async fn converge(
        &self,
        target: &Target,
        mut object: Value,
        decide: impl Fn(&Value) -> Result<Plan, Refusal>,
    ) -> Result<Written, Error> {
        let api = api(&self.client, target.kind, Some(&target.key.namespace));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            dry_run: self.dry_run,
            ..Default::default()
        };
        let mut conflicts = backoff().with_min_delay(Duration::from_millis(10)).build();
        loop {
            let plan = decide(&object)?;
            let Some(patch) = plan.patch.clone() else {
                return Ok(Written::Unchanged { plan, object });
            };
            let patch = Patch::<()>::Json(patch);
            let what = format!("patch {target}");
            let e = match self
                .call(&what, || api.patch(&target.key.name, &params, &patch))
                .await
            {
                Ok(written) => {
                    let object = json(written);
                    return Ok(Written::Changed { plan, object });
                }
                Err(e) if classify(&e) == Class::NotFound => return Ok(Written::Missing),
                Err(e) if classify(&e) == Class::Conflict => e,
                Err(e) => return Err(self.permanent(Subject::Object(target.clone()), e)),
            };
            // Back off before the fresh read, never between read and write: the plan must go
            // out while its resourceVersion is still current.
            tokio::time::sleep(conflicts.next().unwrap_or_default()).await;
            let before = rv(&object).map(str::to_string);
            let Some(now) = self.get(target).await? else {
                return Ok(Written::Missing);
            };
            object = now;
            // A failed patch on an unchanged object is not a conflict: it would fail forever.
            if rv(&object) == before.as_deref() {
                return Err(self.permanent(Subject::Object(target.clone()), e));
            }
            debug!(object = %target, resource_version = rv(&object), "conflict: read again");
        }
    }

    /// A request whose 404 is `None` (not served, or no such object).
    async fn optional<T, Fut: Future<Output = Result<T, kube::Error>>>(
        &self,
        what: String,
        subject: Subject,
        request: impl FnMut() -> Fut,
    ) -> Result<Option<T>, Error> {
        match self.call(&what, request).await {
            Ok(t) => Ok(Some(t)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(self.permanent(subject, e)),
        }
    }

    /// `None` when the resource is not served (not a Harvester cluster, no add-on). One page:
    /// there are a handful.
    pub async fn list(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Option<Vec<Value>>, Error> {
        let api = api(&self.client, kind, namespace);
        // A consistent list (no resourceVersion): it holds every object created before it was
        // sent. The watch cache's resourceVersion=0 list may lag etcd, on a loaded server by
        // more than the time between an object's creation and the guard's start, and a fact
        // said once from it ("no longer needed", from a Version list that missed the offer)
        // would stand until the next read of the offer, half an hour later. Since Kubernetes
        // 1.31 the server answers a consistent list from its cache once the cache has caught
        // up, so it costs about what the stale one did.
        let params = ListParams {
            label_selector: selector.map(str::to_string),
            ..ListParams::default()
        };
        let subject = listed(kind, namespace);
        let list = self.optional(format!("list {subject}"), subject, || api.list(&params));
        Ok(list
            .await?
            .map(|list| list.items.into_iter().map(json).collect()))
    }

    /// `None` also when it may not be read: a 403 says nothing of it, `status` leaves it out.
    pub async fn job(&self, namespace: &str, name: &str) -> Option<Job> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let what = format!("get job {namespace}/{name}");
        let job = self.call(&what, || api.get(name)).await;
        job.inspect_err(|e| debug!(error = %e, "the armed post's Job not read"))
            .ok()
    }

    /// Whether the API server serves `kind` (discovery, which every authenticated user may
    /// read): `status` asks it of the add-on's UpgradePlans, which its RBAC does not list.
    pub async fn served(&self, kind: Kind) -> Result<bool, Error> {
        let group_version = kind.api_version();
        let subject = listed(kind, None);
        let list = self.optional(format!("discover {group_version}"), subject, || {
            self.client.list_api_group_resources(group_version)
        });
        Ok(list
            .await?
            .is_some_and(|l| l.resources.iter().any(|r| r.name == kind.plural())))
    }

    /// `None` when it, or the resource, is not there (not a Harvester cluster).
    pub async fn harvester_setting(&self, name: &str) -> Result<Option<String>, Error> {
        let api = api(&self.client, Kind::Setting, None);
        let subject = listed(Kind::Setting, None);
        let what = format!("get {subject} {name}");
        let setting = self.optional(what, subject, || api.get(name)).await?;
        Ok(setting.and_then(|o| Some(o.data.get("value")?.as_str()?.to_string())))
    }
}

// Migrations and VMIs, page by page, each page folded at once: memory flat in their number (the
// Jobs' 64 MiB), as a cluster holds tens of thousands of migrations (five finished ones per VMI).

/// Objects per page, as `kubectl get`'s default chunk size: a page of 2 KiB migrations is about
/// 1 MiB of JSON, held twice at most while it is parsed (kube reads the body, then copies it
/// into a string), and 20 requests cover 10,000 migrations.
pub const MIGRATIONS_PAGE: u32 = 500;

/// VMIs per page: a VMI (10 to 20 KiB) is larger than a migration; 100 stay near 1 MiB a page.
pub const VMIS_PAGE: u32 = 100;

/// How long `pre` lets the list take: best effort, its writes do not wait for it.
pub const UNDER_WAY_WITHIN: Duration = Duration::from_secs(10);

/// An expired continue token (410) restarts the list at most this often: the token outlives a
/// list of seconds by minutes (etcd's compaction), so more is a server that cannot list.
const RESTARTS: usize = 3;

impl Cluster {
    /// The unfinished workload-update migrations in all namespaces ([`MIGRATIONS_PAGE`]).
    pub async fn list_migrations(&self, limit: u32) -> Result<Vec<Migration>, Error> {
        let keep = |out: &mut Vec<Migration>, m: Listed| out.extend(m.unfinished());
        (self.list_paged((Kind::Migration, Subject::Migrations), limit, keep)).await
    }

    /// `status`'s forecast of the drains, from the VMIs in all namespaces ([`VMIS_PAGE`]); `None`
    /// where they are not served (KubeVirt without its VMI CRD: a list of a served one never 404s).
    pub async fn vmi_forecast(&self, limit: u32) -> Result<Option<Forecast>, Error> {
        let vmis = (Kind::Vmi, listed(Kind::Vmi, None));
        match self.list_paged(vmis, limit, Forecast::add).await {
            Err(Error::Refused { code: 404, .. }) => Ok(None),
            read => read.map(Some),
        }
    }

    /// Every migration and VMI, as the upgrade's record takes them (a Job's `post`, after the
    /// upgrade): a list of each, page by page, each object read into its few fields. The VMIs
    /// not served (KubeVirt without its VMI CRD): none.
    pub async fn seen_by_a_list(&self) -> Result<Vec<Seen>, Error> {
        let migration = |out: &mut Vec<Seen>, m: Value| {
            out.push(Seen::Migration(MigrationSeen::read(&m)));
        };
        let vmi = |out: &mut Vec<Seen>, v: Value| out.push(Seen::Vmi(VmiSeen::read(&v)));
        let migrations = (Kind::Migration, Subject::Migrations);
        let mut seen = vec![Seen::ListBegins(upgrade_record::Listed::Migrations)];
        seen.extend(
            self.list_paged(migrations, MIGRATIONS_PAGE, migration)
                .await?,
        );
        seen.push(Seen::ListDone(upgrade_record::Listed::Migrations));
        let vmis = (Kind::Vmi, listed(Kind::Vmi, None));
        match self.list_paged(vmis, VMIS_PAGE, vmi).await {
            Err(Error::Refused { code: 404, .. }) => {}
            listed => {
                seen.push(Seen::ListBegins(upgrade_record::Listed::Vmis));
                seen.extend(listed?);
                seen.push(Seen::ListDone(upgrade_record::Listed::Vmis));
            }
        }
        Ok(seen)
    }

    /// Every object of `kind` in all namespaces, each page folded into `S` as it is parsed.
    async fn list_paged<T: DeserializeOwned + Clone, S: Default>(
        &self,
        (kind, subject): (Kind, Subject),
        limit: u32,
        fold: impl Fn(&mut S, T),
    ) -> Result<S, Error> {
        let url = DynamicObject::url_path(&kind.resource(), None);
        let what = format!("list {}", kind.plural());
        let mut out = S::default();
        let mut restarts = 0;
        // A consistent list (no resourceVersion), paged: the watch cache's resourceVersion=0
        // list ignores the limit and answers with every object in one page, which is what
        // peaked at about 100 MiB with 10,000 migrations (docs/figures/bench-scale.md, the
        // compared build). `kubectl get` lists the same way.
        let mut params = ListParams::default().limit(limit);
        loop {
            let page = self.call(&what, || {
                let request = Request::new(&url).list(&params);
                let request = request.map_err(kube::Error::BuildRequest);
                async move { self.client.request::<ObjectList<T>>(request?).await }
            });
            match page.await {
                Ok(page) => {
                    page.items.into_iter().for_each(|item| fold(&mut out, item));
                    match page.metadata.continue_ {
                        Some(c) if !c.is_empty() => params.continue_token = Some(c),
                        _ => return Ok(out),
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 410 && restarts < RESTARTS => {
                    // The continue token expired (a list slowed down by retries past etcd's
                    // compaction): the pages read so far are of another snapshot, so start over.
                    restarts += 1;
                    debug!(restarts, "continue token expired: {what} again");
                    out = S::default();
                    params.continue_token = None;
                }
                Err(e) => return Err(self.permanent(subject, e)),
            }
        }
    }

    /// The workload-update migrations not finished, bounded: best effort (a run lists them once,
    /// [`crate::context::Run::migrations_under_way`]).
    pub async fn migrations_under_way(&self) -> Result<Vec<Migration>, String> {
        let (list, secs) = (
            self.list_migrations(MIGRATIONS_PAGE),
            UNDER_WAY_WITHIN.as_secs(),
        );
        match tokio::time::timeout(UNDER_WAY_WITHIN, list).await {
            Ok(listed) => listed.map_err(|e| e.to_string()),
            Err(_) => Err(format!("not listed within {secs} s")),
        }
    }
}
