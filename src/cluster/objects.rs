//! Reads, the conditional write, and lists: the object I/O, each request through the retry
//! layer.

use std::time::Duration;

use backon::BackoffBuilder;
use json_patch::Patch as JsonPatch;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::Value;
use tracing::debug;

use super::retry::{Class, backoff, classify};
use super::{Cluster, Written, rv};
use crate::error::{Error, Subject};
use crate::model::{FIELD_MANAGER, Kind, Target};
use crate::vocabulary::{Plan, Refusal};

impl Cluster {
    fn api(&self, target: &Target) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &target.key.namespace,
            &target.kind.resource(),
        )
    }

    /// The object's JSON, or `None` if it does not exist. A 404 for the resource itself (no CRD)
    /// is a permanent error.
    pub async fn get(&self, target: &Target) -> Result<Option<Value>, Error> {
        let api = self.api(target);
        let what = format!("get {target}");
        match self.call(&what, || api.get(&target.key.name)).await {
            Ok(obj) => Ok(Some(serde_json::to_value(obj).expect("objects serialize"))),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                if s.details
                    .as_ref()
                    .is_some_and(|d| d.name == target.key.name)
                {
                    Ok(None)
                } else {
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
            }
            Err(e) => Err(self.permanent(Subject::Object(target.clone()), e)),
        }
    }

    /// Plans against `current` and writes the plan conditionally; on a conflict, reads again and
    /// plans again, until the plan applies or there is nothing to do.
    pub async fn converge(
        &self,
        target: &Target,
        mut current: Value,
        plan: impl Fn(&Value) -> Result<Plan, Refusal>,
    ) -> Result<Written, Error> {
        let mut conflicts = backoff().with_min_delay(Duration::from_millis(10)).build();
        loop {
            let p = plan(&current)?;
            let Some(patch) = p.patch.clone() else {
                return Ok(Written::Unchanged {
                    plan: p,
                    object: current,
                });
            };
            match self.patch(target, &patch).await {
                Ok(object) => return Ok(Written::Changed { plan: p, object }),
                Err(e) if classify(&e) == Class::NotFound => return Ok(Written::Missing),
                Err(e) if classify(&e) == Class::Conflict => {
                    // Back off before the fresh read, never between read and write: the plan
                    // must go out while its resourceVersion is still current.
                    tokio::time::sleep(conflicts.next().unwrap_or_default()).await;
                    let before = rv(&current).map(str::to_string);
                    current = match self.get(target).await? {
                        Some(obj) => obj,
                        None => return Ok(Written::Missing),
                    };
                    // A failed patch on an unchanged object is not a conflict: it would fail forever.
                    if rv(&current) == before.as_deref() {
                        return Err(self.permanent(Subject::Object(target.clone()), e));
                    }
                    debug!(object = %target, resource_version = rv(&current), "conflict: read again");
                }
                Err(e) => return Err(self.permanent(Subject::Object(target.clone()), e)),
            }
        }
    }

    async fn patch(&self, target: &Target, patch: &JsonPatch) -> Result<Value, kube::Error> {
        let api = self.api(target);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            dry_run: self.dry_run,
            ..Default::default()
        };
        let what = format!("patch {target}");
        let obj = self
            .call(&what, || async {
                api.patch(&target.key.name, &params, &Patch::<()>::Json(patch.clone()))
                    .await
            })
            .await?;
        Ok(serde_json::to_value(obj).expect("objects serialize"))
    }

    /// Harvester's objects of `kind` in `namespace` (with a label selector, if any); `None` when
    /// the resource is not served (not a Harvester cluster). One page: there are a handful.
    pub async fn list_harvester(
        &self,
        kind: Kind,
        namespace: &str,
        selector: Option<&str>,
    ) -> Result<Option<Vec<Value>>, Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource());
        // From the API server's watch cache (resourceVersion 0): a consistent list waits up to
        // ~100 ms for the cache to catch up with etcd; a few ms of staleness mean nothing here
        // (the wait reads again, and Harvester's steps are minutes apart).
        let mut params = ListParams::default().match_any();
        if let Some(s) = selector {
            params = params.labels(s);
        }
        let subject = || Subject::Listed {
            kind,
            namespace: namespace.to_string(),
        };
        self.list_one_page(&api, &params, subject()).await
    }

    /// Every object of the cluster-scoped `kind` (the add-on's UpgradePlans, a handful), from
    /// the watch cache as [`Cluster::list_harvester`]; `None` when the resource is not served
    /// (no add-on).
    pub async fn list_cluster_scoped(&self, kind: Kind) -> Result<Option<Vec<Value>>, Error> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.resource());
        let params = ListParams::default().match_any();
        let subject = Subject::Listed {
            kind,
            namespace: "(cluster)".into(),
        };
        self.list_one_page(&api, &params, subject).await
    }

    /// One page of a list (a handful of objects); `None` when the resource is not served.
    async fn list_one_page(
        &self,
        api: &Api<DynamicObject>,
        params: &ListParams,
        subject: Subject,
    ) -> Result<Option<Vec<Value>>, Error> {
        match self
            .call(&format!("list {subject}"), || api.list(params))
            .await
        {
            Ok(list) => Ok(Some(
                list.items
                    .into_iter()
                    .map(|o| serde_json::to_value(o).expect("objects serialize"))
                    .collect(),
            )),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(self.permanent(subject, e)),
        }
    }

    /// The Job `namespace/name` (`status`: the armed post's), or `None` when it is not there or
    /// may not be read (a 403 says nothing about it: the report just leaves it out).
    pub async fn job(&self, namespace: &str, name: &str) -> Option<Value> {
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("batch", "v1", "Job"),
            "jobs",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        match self
            .call(&format!("get job {namespace}/{name}"), || api.get(name))
            .await
        {
            Ok(o) => Some(serde_json::to_value(o).expect("objects serialize")),
            Err(e) => {
                debug!(error = %e, "the armed post's Job not read");
                None
            }
        }
    }

    /// Whether the API server serves `kind` (discovery, which every authenticated user may
    /// read): `status` asks it of the add-on's UpgradePlans, which its RBAC does not list.
    pub async fn served(&self, kind: Kind) -> Result<bool, Error> {
        let group_version = kind.api_version();
        match self
            .call(&format!("discover {group_version}"), || {
                self.client.list_api_group_resources(group_version)
            })
            .await
        {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == kind.plural())),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(self.permanent(
                Subject::Listed {
                    kind,
                    namespace: "(cluster)".into(),
                },
                e,
            )),
        }
    }

    /// The `value` of Harvester's cluster-scoped `Setting` `name`; `None` when it, or the
    /// resource, is not there (not a Harvester cluster).
    pub async fn harvester_setting(&self, name: &str) -> Result<Option<String>, Error> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &Kind::Setting.resource());
        let subject = || Subject::Listed {
            kind: Kind::Setting,
            namespace: "(cluster)".into(),
        };
        match self
            .call(&format!("get {} {name}", subject()), || api.get(name))
            .await
        {
            Ok(o) => Ok(o
                .data
                .get("value")
                .and_then(Value::as_str)
                .map(str::to_string)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(self.permanent(subject(), e)),
        }
    }
}
