//! The workload-update migrations, read page by page in memory flat in their number (so that
//! the Jobs' 64 MiB limit holds):
//! a large cluster holds tens of thousands of migrations (KubeVirt keeps five finished ones per
//! VMI), of which a handful are reported. Each page is parsed straight into
//! [`Listed`], which keeps four fields of an object, and only the unfinished workload-update ones outlive their page. What counts as one
//! is decided in `plan::migrations`.

use std::time::Duration;

use kube::Resource;
use kube::api::{DynamicObject, ListParams};
use kube::core::{ObjectList, Request};
use tracing::debug;

use super::Cluster;
use crate::error::{Error, Subject};
use crate::model::Kind;
use crate::plan::migrations::{Listed, Migration};

/// Objects per page, as `kubectl get`'s default chunk size: a page of 2 KiB migrations is about
/// 1 MiB of JSON, held twice at most while it is parsed (kube reads the body, then copies it
/// into a string), and 20 requests cover 10,000 migrations.
pub const MIGRATIONS_PAGE: u32 = 500;

/// How long `pre` lets the list take: best effort, its writes do not wait for it.
pub const UNDER_WAY_WITHIN: Duration = Duration::from_secs(10);

/// An expired continue token (410) restarts the list at most this often: the token outlives a
/// list of seconds by minutes (etcd's compaction), so more is a server that cannot list.
const RESTARTS: usize = 3;

impl Cluster {
    /// The unfinished workload-update migrations in all namespaces (`status`, and `pre`'s
    /// warnings through [`Cluster::migrations_under_way`]), [`MIGRATIONS_PAGE`] at a time.
    pub async fn list_migrations(&self) -> Result<Vec<Migration>, Error> {
        self.list_migrations_by(MIGRATIONS_PAGE).await
    }

    /// As [`Cluster::list_migrations`], `limit` objects a page, each parsed as it is read.
    pub async fn list_migrations_by(&self, limit: u32) -> Result<Vec<Migration>, Error> {
        let url = DynamicObject::url_path(&Kind::Migration.resource(), None);
        let mut out = Vec::new();
        let mut restarts = 0;
        // A consistent list (no resourceVersion), paged: the watch cache's resourceVersion=0
        // list ignores the limit and answers with every object in one page, which is what
        // peaked at about 100 MiB with 10,000 migrations (docs/figures/bench-scale.md, the
        // compared build). `kubectl get` lists the same way.
        let mut params = ListParams::default().limit(limit);
        loop {
            let page = self.call("list virtualmachineinstancemigrations", || {
                let request = Request::new(&url).list(&params);
                let request = request.map_err(kube::Error::BuildRequest);
                async move { self.client.request::<ObjectList<Listed>>(request?).await }
            });
            match page.await {
                Ok(page) => {
                    out.extend(page.items.into_iter().filter_map(Listed::unfinished));
                    match page.metadata.continue_ {
                        Some(c) if !c.is_empty() => params.continue_token = Some(c),
                        _ => return Ok(out),
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 410 && restarts < RESTARTS => {
                    // The continue token expired (a list slowed down by retries past etcd's
                    // compaction): the pages read so far are of another snapshot, so start over.
                    restarts += 1;
                    debug!(
                        restarts,
                        "continue token expired: the migrations listed again"
                    );
                    out.clear();
                    params.continue_token = None;
                }
                Err(e) => return Err(self.permanent(Subject::Migrations, e)),
            }
        }
    }

    /// `pre`'s list of the unfinished workload-update migrations, at most [`UNDER_WAY_WITHIN`],
    /// made once per run: a late `pre` names them before its writes (its late warning) and
    /// after them (the migrations' own warning), and the second takes the first's answer, as a
    /// second list of a large cluster would cost as much again to say the same.
    pub async fn migrations_under_way(&self) -> Result<Vec<Migration>, String> {
        if let Some(known) = self.under_way.lock().expect("not poisoned").clone() {
            return known;
        }
        let listed = match tokio::time::timeout(UNDER_WAY_WITHIN, self.list_migrations()).await {
            Ok(Ok(list)) => Ok(list),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "not listed within {} s",
                UNDER_WAY_WITHIN.as_secs()
            )),
        };
        *self.under_way.lock().expect("not poisoned") = Some(listed.clone());
        listed
    }
}
