//! The watches of the waiting loop (`resident`): kube's own watcher (`kube::runtime::watcher`,
//! which lists once, then watches, renews the watch when the server ends it, and backs off on
//! errors) on Harvester's latest Upgrade and on the add-on's UpgradePlans. It keeps no objects:
//! each change only wakes the loop, which reads what it decides on, so memory does not grow with
//! the cluster. A watch the server refuses for good (403, or the resource no longer served) ends
//! its task and says so once; the loop's periodic read takes over and starts it again when the
//! resource is served.
//!
//! After an API server's outage (every Harvester upgrade restarts it on each server node), kube's
//! default backoff (0.8 s doubling to 30 s) would resume tens of seconds after the server is
//! back: the watcher backs off with the one retry layer's policy instead ([`super::retry`]: at
//! most 2 s between attempts), so it resumes as soon as the server answers. A list or watch sent
//! to a server still starting can hang, though, which no backoff sees: so a watch that errs says
//! so (`failing`, and one wake-up); the loop then reads again within a second, and replaces the
//! failing watch by a new one as soon as a read succeeds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::Cluster;
use crate::model::Kind;

/// A watch running in its own task (stopped when this is dropped): `alive` is false once it has
/// ended; `failing` while its last event was an error (no successful list or event since).
pub struct Watcher {
    alive: Arc<AtomicBool>,
    failing: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Cluster {
    /// Watches `kind` (in `namespace`, or cluster-wide; with a label selector), sending `()` on
    /// `wake` for every change (a full channel already holds a wake-up: nothing is lost).
    pub fn watch(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        labels: Option<&str>,
        wake: mpsc::Sender<()>,
    ) -> Watcher {
        let resource = kind.resource();
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.watch_client.clone(), ns, &resource),
            None => Api::all_with(self.watch_client.clone(), &resource),
        };
        let mut config = watcher::Config::default().any_semantic();
        if let Some(l) = labels {
            config = config.labels(l);
        }
        let alive = Arc::new(AtomicBool::new(true));
        let failing = Arc::new(AtomicBool::new(false));
        let (flag, erring) = (alive.clone(), failing.clone());
        let task = tokio::spawn(async move {
            let backoff = watcher::ExponentialBackoff::from(super::retry::backoff());
            let events = watcher(api, config).backoff(backoff).boxed();
            wake_on_events(events, kind, wake, erring).await;
            flag.store(false, Ordering::Relaxed);
        });
        Watcher {
            alive,
            failing,
            task,
        }
    }
}

/// Wakes the loop on what a watch says (see the module's comment); ends when the watch is
/// refused for good (403, 404: the loop then reads periodically).
async fn wake_on_events(
    mut events: BoxStream<'static, watcher::Result<watcher::Event<DynamicObject>>>,
    kind: Kind,
    wake: mpsc::Sender<()>,
    erring: Arc<AtomicBool>,
) {
    // An empty first list repeats what the loop read just before it started the watch:
    // no wake (a quiet cluster costs no extra read). A first list with objects may hold
    // one made between that read and the list (an Upgrade created as the guard starts),
    // and a later list (after an error, or the server's 410) what the watch missed: a
    // wake, once the list is complete.
    let (mut listed, mut seen) = (false, false);
    while let Some(event) = events.next().await {
        // The first error after a success wakes the loop once, which then reads often
        // until this watch is replaced (see the module's comment). `Init` comes before
        // the list is asked for: it says nothing of the server.
        match &event {
            Err(_) if !erring.swap(true, Ordering::Relaxed) => {
                let _ = wake.try_send(());
            }
            Ok(watcher::Event::Init) | Err(_) => {}
            Ok(_) => erring.store(false, Ordering::Relaxed),
        }
        match event {
            Ok(watcher::Event::Init) => {}
            Ok(watcher::Event::InitApply(_)) => seen = true,
            Ok(watcher::Event::InitDone) if !listed => {
                listed = true;
                if seen {
                    let _ = wake.try_send(());
                }
            }
            Ok(_) => {
                let _ = wake.try_send(());
            }
            Err(
                watcher::Error::InitialListFailed(kube::Error::Api(s))
                | watcher::Error::WatchStartFailed(kube::Error::Api(s)),
            ) if s.code == 403 || s.code == 404 => {
                warn!(kind = ?kind, code = s.code, "watch ended: {}; read periodically instead", s.message);
                break;
            }
            Err(e) => {
                debug!(kind = ?kind, error = %e, "watch error; it backs off and resumes")
            }
        }
    }
}
