//! The waiting loop's watches keep no objects: each change only wakes the loop, which reads what
//! it decides on, so memory does not grow with the cluster. A watch refused for good (403, or the
//! resource no longer served) ends; the loop's periodic read starts it again once served.
//!
//! The resident guard starts its watches before its first read and waits for their first lists
//! ([`Watcher::settled`]), as kube-runtime's reflector is ready only once listed: that read then
//! sees all the lists saw, so a first list wakes nothing, and every later change is an event. A
//! watch started after a read (one replaced, a resource served since) may list what the read
//! missed: its first list wakes the loop.
//!
//! After an API server's outage (every Harvester upgrade restarts it on each server node), kube's
//! default backoff (0.8 s doubling to 30 s) would resume tens of seconds after the server is
//! back: the watcher backs off with the one retry layer's policy instead (at most 2 s between
//! attempts). A list or watch sent to a server still starting can hang, though, which no backoff
//! sees: so a watch that errs says so (`failing`, one wake-up), and the loop replaces it.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::Cluster;
use crate::model::Kind;
use crate::plan::upgrade_record::{Listed, MigrationSeen, Seen, Tally, VmiSeen};

/// A watch running in its own task (stopped when this is dropped): `failing` while its last
/// event was an error (no successful list or event since).
pub struct Watcher {
    failing: Arc<AtomicBool>,
    /// Its first list wakes the loop ([`FirstList::AfterARead`], or set when the loop read
    /// without waiting for it: [`Watcher::read_before_its_list`]).
    first_list_wakes: Arc<AtomicBool>,
    /// `true` once the first list is complete, or the first attempt failed (the task also ends).
    settled: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Whether a watch's first list wakes the loop (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstList {
    /// Started before the loop's read, which waits for it: what it lists, the read sees.
    BeforeTheRead,
    /// Started after a read: it may list what that read missed.
    AfterARead,
}

impl Watcher {
    /// Returns once the first list is complete, the first attempt has failed (the API server
    /// down: the read that follows fails as well, and the loop replaces the watch later), or
    /// the watch has ended (403, not served).
    pub async fn settled(&self) {
        let mut settled = self.settled.clone();
        let _ = settled.wait_for(|s| *s).await;
    }

    /// The loop reads before this watch's first list (it did not come in time): that list may
    /// hold what the read missed, so it wakes the loop. Nothing, once it has listed.
    pub fn read_before_its_list(&self) {
        if !*self.settled.borrow() {
            self.first_list_wakes.store(true, Relaxed);
        }
    }

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
        first_list: FirstList,
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
        let first_list_wakes = Arc::new(AtomicBool::new(first_list == FirstList::AfterARead));
        let (settle, settled) = watch::channel(false);
        let woken = Woken {
            kind,
            wake,
            failing: Arc::clone(&failing),
            first_list_wakes: Arc::clone(&first_list_wakes),
            settle,
        };
        let task = tokio::spawn(wake_on_events(events, woken));
        Watcher {
            failing,
            first_list_wakes,
            settled,
            task,
        }
    }
}

impl Cluster {
    /// A watch of every migration or VMI, while an upgrade's record is open: each event read
    /// into the few fields the record counts (`plan::upgrade_record`), the object dropped. It
    /// wakes nothing: the loop keeps the record at its passes.
    pub fn count_into(&self, kind: Kind, tally: Arc<Mutex<Tally>>) -> Watcher {
        let api = super::objects::api(&self.watch_client, kind, None);
        let backoff = watcher::ExponentialBackoff::from(super::retry::backoff());
        // Consistent lists, page by page (kube's 500): one served from the watch cache
        // (`resourceVersion=0`) ignores the page size, and 30,000 migrations would come at once.
        let config = watcher::Config::default();
        let events = watcher::watcher(api, config).backoff(backoff).boxed();
        let failing = Arc::<AtomicBool>::default();
        let (settle, settled) = watch::channel(false);
        let task = tokio::spawn(count_events(
            events,
            kind,
            tally,
            Arc::clone(&failing),
            settle,
        ));
        Watcher {
            failing,
            first_list_wakes: Arc::default(),
            settled,
            task,
        }
    }
}

async fn count_events(
    mut events: BoxStream<'static, watcher::Result<Event<DynamicObject>>>,
    kind: Kind,
    tally: Arc<Mutex<Tally>>,
    failing: Arc<AtomicBool>,
    settle: watch::Sender<bool>,
) {
    let list = if kind == Kind::Migration {
        Listed::Migrations
    } else {
        Listed::Vmis
    };
    let seen = |object: DynamicObject, deleted: bool| {
        let object = serde_json::to_value(object).expect("objects serialize");
        match (kind == Kind::Migration, deleted) {
            (true, false) => Seen::Migration(MigrationSeen::read(&object)),
            (true, true) => Seen::MigrationDeleted(MigrationSeen::read(&object)),
            (false, false) => Seen::Vmi(VmiSeen::read(&object)),
            (false, true) => Seen::VmiDeleted(VmiSeen::read(&object)),
        }
    };
    while let Some(event) = events.next().await {
        let seen = match event {
            Ok(Event::Init) => Seen::ListBegins(list),
            Ok(Event::InitDone) => {
                settle.send_replace(true);
                Seen::ListDone(list)
            }
            Ok(Event::InitApply(o) | Event::Apply(o)) => seen(o, false),
            Ok(Event::Delete(o)) => seen(o, true),
            Err(e) => {
                failing.store(true, Relaxed);
                settle.send_replace(true);
                if let watcher::Error::InitialListFailed(kube::Error::Api(s))
                | watcher::Error::WatchStartFailed(kube::Error::Api(s)) = &e
                    && matches!(s.code, 403 | 404)
                {
                    warn!(kind = ?kind, code = s.code, "the upgrade's record: not watched ({}); its figures of this kind stay 0", s.message);
                    break;
                }
                debug!(kind = ?kind, error = %e, "watch error; it backs off and resumes");
                continue;
            }
        };
        failing.store(false, Relaxed);
        tally
            .lock()
            .expect("no panic holds the tally")
            .observe(seen);
    }
}

/// What a watch's task tells the loop.
struct Woken {
    kind: Kind,
    wake: mpsc::Sender<()>,
    failing: Arc<AtomicBool>,
    first_list_wakes: Arc<AtomicBool>,
    settle: watch::Sender<bool>,
}

impl Woken {
    fn wake_up(&self) {
        let _ = self.wake.try_send(());
    }
}

async fn wake_on_events(
    mut events: BoxStream<'static, watcher::Result<Event<DynamicObject>>>,
    woken: Woken,
) {
    let kind = woken.kind;
    // The first list wakes the loop only if it may hold what the loop's read missed; a later
    // list (after an error, or the server's 410) may hold what the watch missed: a wake, once
    // it is complete.
    let mut listed_before = false;
    while let Some(event) = events.next().await {
        match event {
            // `Init` comes before the list is asked for: it says nothing of the server; the
            // objects of a list (`InitApply`) are told by its end.
            Ok(Event::Init | Event::InitApply(_)) => {}
            Ok(event) => {
                woken.failing.store(false, Relaxed);
                if matches!(event, Event::InitDone) {
                    woken.settle.send_replace(true);
                }
                let first = matches!(event, Event::InitDone) && !listed_before;
                if first {
                    listed_before = true;
                }
                if !first || woken.first_list_wakes.load(Relaxed) {
                    woken.wake_up();
                }
            }
            Err(e) => {
                // Settled by an error: the loop reads without the list, which then wakes it.
                if !listed_before {
                    woken.first_list_wakes.store(true, Relaxed);
                }
                woken.settle.send_replace(true);
                // Once per failing spell: the loop then reads often until it replaces this watch.
                if !woken.failing.swap(true, Relaxed) {
                    woken.wake_up();
                }
                if let watcher::Error::InitialListFailed(kube::Error::Api(s))
                | watcher::Error::WatchStartFailed(kube::Error::Api(s)) = &e
                {
                    match s.code {
                        // Not served (no Harvester, no add-on): the loop's read says when it is.
                        404 => {
                            info!(kind = ?kind, "not served: not watched; read at each pass, and watched once served");
                            break;
                        }
                        403 => {
                            warn!(kind = ?kind, code = s.code, "watch ended: {}; read periodically instead", s.message);
                            break;
                        }
                        _ => {}
                    }
                }
                debug!(kind = ?kind, error = %e, "watch error; it backs off and resumes");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use kube::api::ApiResource;

    use super::*;

    type Events = Vec<watcher::Result<Event<DynamicObject>>>;

    fn object() -> DynamicObject {
        DynamicObject::new(
            "kubevirt",
            &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        )
    }

    /// Runs the task on `events`; the wakes it made and whether it settled.
    async fn run(events: Events, first_list: FirstList, read_first: bool) -> (usize, bool) {
        let (wake, mut woken_rx) = mpsc::channel(16);
        let (settle, settled) = watch::channel(false);
        let woken = Woken {
            kind: Kind::KubeVirt,
            wake,
            failing: Arc::default(),
            first_list_wakes: Arc::new(AtomicBool::new(
                read_first || first_list == FirstList::AfterARead,
            )),
            settle,
        };
        wake_on_events(stream::iter(events).boxed(), woken).await;
        let mut wakes = 0;
        while woken_rx.try_recv().is_ok() {
            wakes += 1;
        }
        (wakes, *settled.borrow())
    }

    fn listed() -> Events {
        vec![
            Ok(Event::Init),
            Ok(Event::InitApply(object())),
            Ok(Event::InitDone),
        ]
    }

    #[tokio::test]
    async fn a_first_list_before_the_read_wakes_nothing_and_a_change_after_it_wakes() {
        assert_eq!(
            run(listed(), FirstList::BeforeTheRead, false).await,
            (0, true)
        );
        let mut events = listed();
        events.push(Ok(Event::Apply(object())));
        assert_eq!(
            run(events, FirstList::BeforeTheRead, false).await,
            (1, true)
        );
    }

    #[tokio::test]
    async fn a_first_list_the_read_did_not_wait_for_wakes() {
        assert_eq!(run(listed(), FirstList::AfterARead, false).await, (1, true));
        assert_eq!(
            run(listed(), FirstList::BeforeTheRead, true).await,
            (1, true)
        );
    }

    #[tokio::test]
    async fn a_list_after_an_error_wakes_and_a_first_error_settles() {
        let error = || Err(watcher::Error::NoResourceVersion);
        // The error wakes once (the loop replaces a failing watch); the list after it wakes,
        // the loop having read without it.
        let mut events = vec![error()];
        events.extend(listed());
        assert_eq!(
            run(events, FirstList::BeforeTheRead, false).await,
            (2, true)
        );
        let mut events = listed();
        events.extend([error(), error()]);
        events.extend(listed());
        assert_eq!(
            run(events, FirstList::BeforeTheRead, false).await,
            (2, true)
        );
    }
}
