//! All I/O with the API server, one `impl Cluster` per concern. kube's own 429/503/504 retry is
//! off: `retry` is the one layer, bounded by the run's [`Deadline`]. Conflicts (409, or 422 from
//! the failed resourceVersion `test`) are answered by one fresh read and a new plan.

mod deadline;
mod events;
mod objects;
mod retry;
mod watches;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kube::{Client, Config};
use serde_json::Value;

use crate::error::{Error, with_causes};
use crate::vocabulary::Plan;

pub use deadline::{Deadline, Poll};
pub use events::{EventKind, regarding};
pub use objects::{MIGRATIONS_PAGE, VMIS_PAGE};
pub use retry::{Class, LastError, classify};
pub use watches::{FirstList, Watcher};

/// What a conditional write came to.
#[derive(Debug)]
pub enum Written {
    /// The patch was applied (or, in a dry run, accepted); the object as the server returned it.
    Changed { plan: Plan, object: Value },
    /// Nothing to do: the object (as last read) already is as planned.
    Unchanged { plan: Plan, object: Value },
    /// The object was deleted under us.
    Missing,
}

pub struct Cluster {
    client: Client,
    /// The client of the watches (`watches`): no read timeout.
    watch_client: Client,
    server: String,
    dry_run: bool,
    last_error: LastError,
    deadline: Deadline,
    /// Only the first retry's WARN line says what bounds the retries.
    retried: AtomicBool,
}

impl Cluster {
    pub async fn connect(
        dry_run: bool,
        last_error: LastError,
        deadline: Deadline,
    ) -> Result<Self, Error> {
        let mut config = Config::infer().await.map_err(|e| {
            // kube quotes a path with `Debug` inside its own quotes: '"/x"'. Once is enough.
            let causes = with_causes(&e).replace("'\"", "'").replace("\"'", "'");
            Error::Kubeconfig {
                message: one_line(format!(
                    "cannot load Kubernetes client configuration (KUBECONFIG, ~/.kube/config, or in-cluster): {causes}"
                )),
                source: Box::new(e),
            }
        })?;
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(30));
        config.write_timeout = Some(Duration::from_secs(30));
        // A watch is a long read: its own client, without the read timeout that would cut it
        // every 30 s (kube's watcher ends it after 290 s itself, and calls it dead 5 s later).
        let mut watching = config.clone();
        watching.read_timeout = None;
        let server = config.cluster_url.to_string();
        let build = |config: Config| {
            Client::try_from(config).map_err(|e| Error::Kubeconfig {
                message: one_line(format!(
                    "cannot build the Kubernetes client: {}",
                    with_causes(&e)
                )),
                source: Box::new(e),
            })
        };
        let client = build(config)?;
        Ok(Self {
            watch_client: build(watching)?,
            server,
            last_error,
            deadline,
            ..Self::from_client(client, dry_run)
        })
    }

    pub fn from_client(client: Client, dry_run: bool) -> Self {
        Self {
            watch_client: client.clone(),
            client,
            server: "(test client)".into(),
            dry_run,
            last_error: LastError::default(),
            deadline: Deadline::default(),
            retried: AtomicBool::new(false),
        }
    }
}

pub(crate) fn one_line(s: String) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) fn rv(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests;
