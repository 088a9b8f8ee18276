//! The waiting loop's watches keep no objects: each change only wakes the loop, which reads what
//! it decides on, so memory does not grow with the cluster. A watch refused for good (403, or the
//! resource no longer served) ends; the loop's periodic read starts it again once served.
//!
//! After an API server's outage (every Harvester upgrade restarts it on each server node), kube's
//! default backoff (0.8 s doubling to 30 s) would resume tens of seconds after the server is
//! back: the watcher backs off with the one retry layer's policy instead (at most 2 s between
//! attempts). A list or watch sent to a server still starting can hang, though, which no backoff
//! sees: so a watch that errs says so (`failing`, one wake-up), and the loop replaces it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::Cluster;
use crate::model::Kind;

/// A watch running in its own task (stopped when this is dropped): `failing` while its last
/// event was an error (no successful list or event since).
pub struct Watcher {
    failing: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Not refused for good.
    pub fn alive(&self) -> bool {
        !self.task.is_finished()
    }

    pub fn failing(&self) -> bool {
        self.failing.load(Relaxed)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Cluster {
    /// A full `wake` channel already holds a wake-up: nothing is lost.
    pub fn watch(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        labels: Option<&str>,
        name: Option<&str>,
        wake: mpsc::Sender<()>,
    ) -> Watcher {
        let mut config = watcher::Config::default().any_semantic();
        config.label_selector = labels.map(str::to_string);
        // One named object (`metadata.name=`, as kube's `watch_object`): RBAC grants its `list`
        // and `watch` by that name only.
        config.field_selector = name.map(|n| format!("metadata.name={n}"));
        let api = super::objects::api(&self.watch_client, kind, namespace);
        let backoff = watcher::ExponentialBackoff::from(super::retry::backoff());
        let events = watcher::watcher(api, config).backoff(backoff).boxed();
        let failing = Arc::default();
        let task = tokio::spawn(wake_on_events(events, kind, wake, Arc::clone(&failing)));
        Watcher { failing, task }
    }
}

async fn wake_on_events(
    mut events: BoxStream<'static, watcher::Result<Event<DynamicObject>>>,
    kind: Kind,
    wake: mpsc::Sender<()>,
    erring: Arc<AtomicBool>,
) {
    let wake_up = || {
        let _ = wake.try_send(());
    };
    // An empty first list repeats what the loop read just before it started the watch: no
    // wake (a quiet cluster costs no extra read). A first list with objects may hold one made
    // between that read and the list (an Upgrade created as the guard starts), and a later list
    // (after an error, or the server's 410) what the watch missed: a wake, once it is complete.
    let mut wake_when_listed = false;
    while let Some(event) = events.next().await {
        match event {
            // `Init` comes before the list is asked for: it says nothing of the server.
            Ok(Event::Init) => {}
            Ok(event) => {
                erring.store(false, Relaxed);
                match event {
                    Event::InitApply(_) => wake_when_listed = true,
                    Event::InitDone if !wake_when_listed => wake_when_listed = true,
                    _ => wake_up(),
                }
            }
            Err(e) => {
                // Once per failing spell: the loop then reads often until it replaces this watch.
                if !erring.swap(true, Relaxed) {
                    wake_up();
                }
                if let watcher::Error::InitialListFailed(kube::Error::Api(s))
                | watcher::Error::WatchStartFailed(kube::Error::Api(s)) = &e
                    && (s.code == 403 || s.code == 404)
                {
                    warn!(kind = ?kind, code = s.code, "watch ended: {}; read periodically instead", s.message);
                    break;
                }
                debug!(kind = ?kind, error = %e, "watch error; it backs off and resumes");
            }
        }
    }
}
