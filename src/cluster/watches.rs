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

use std::borrow::Cow;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::DynamicResourceScope;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::{Deserialize, Deserializer};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::Cluster;
use crate::model::Kind;
use crate::plan::upgrade_record::{Listed, MigrationSeen, Object, Seen, Tally, VmiSeen};

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

/// Migrations a page of the record's lists: about 2 KiB each as stored, so some 100 KiB of JSON,
/// which kube holds two or three times while it reads it (hyper's chunks, `to_bytes`, the copy
/// into a string). kube's 500 a page (and `DynamicObject`s) cost the resident guard 30 MiB at
/// 30,000 migrations and 2,000 VMIs (`hack/bench.sh scale`); 50 a page is 600 requests there.
const RECORD_MIGRATIONS_PAGE: u32 = 50;

/// VMIs a page of the record's lists: a VMI is 10 to 20 KiB, so 50 to 100 KiB (10 a page
/// added about 0.4 MiB more to the peak at 2,000 VMIs; 5 a page is 400 requests there).
const RECORD_VMIS_PAGE: u32 = 5;

/// What the record's watches parse each migration or VMI into, page by page and event by event:
/// the few fields counted (`MigrationSeen`, `VmiSeen`), the rest of each object skipped as it is
/// read (`upgrade_record::Object`). kube's `DynamicObject` holds all of it (its `managedFields`,
/// every annotation), a page at a time.
#[derive(Debug, Clone)]
struct Counted<T> {
    seen: T,
    /// Its `resourceVersion` only: where kube's watcher goes on from after each event.
    meta: ObjectMeta,
}

impl<'de, T: From<Object>> Deserialize<'de> for Counted<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let object = Object::deserialize(d)?;
        let meta = ObjectMeta {
            resource_version: Some(object.resource_version().to_string()),
            ..ObjectMeta::default()
        };
        Ok(Counted {
            seen: object.into(),
            meta,
        })
    }
}

impl<T> Resource for Counted<T> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl Cluster {
    /// A watch of every migration or VMI, while an upgrade's record is open: each object read
    /// into the few fields the record counts (`plan::upgrade_record`) as it is parsed. It wakes
    /// nothing: the loop keeps the record at its passes.
    pub fn count_into(
        &self,
        kind: Kind,
        tally: Arc<Mutex<Tally>>,
        one_list: Arc<tokio::sync::Mutex<()>>,
    ) -> Watcher {
        let failing = Arc::<AtomicBool>::default();
        let (settle, settled) = watch::channel(false);
        let counting = Counting {
            kind,
            tally,
            one_list,
            failing: Arc::clone(&failing),
            settle,
        };
        let task = if kind == Kind::Migration {
            let events = self.counted::<MigrationSeen>(kind, RECORD_MIGRATIONS_PAGE);
            let seen = |m, deleted| {
                if deleted {
                    Seen::MigrationDeleted(m)
                } else {
                    Seen::Migration(m)
                }
            };
            tokio::spawn(count_events(events, seen, counting))
        } else {
            let events = self.counted::<VmiSeen>(kind, RECORD_VMIS_PAGE);
            let seen = |v, deleted| {
                if deleted {
                    Seen::VmiDeleted(v)
                } else {
                    Seen::Vmi(v)
                }
            };
            tokio::spawn(count_events(events, seen, counting))
        };
        Watcher {
            failing,
            first_list_wakes: Arc::default(),
            settled,
            task,
        }
    }

    fn counted<T: From<Object> + Clone + Debug + Send + 'static>(
        &self,
        kind: Kind,
        page: u32,
    ) -> BoxStream<'static, watcher::Result<Event<Counted<T>>>> {
        let api = Api::all_with(self.watch_client.clone(), &kind.resource());
        let backoff = watcher::ExponentialBackoff::from(super::retry::backoff());
        // Consistent lists, page by page: one served from the watch cache (`resourceVersion=0`)
        // ignores the page size, and 30,000 migrations would come at once.
        let config = watcher::Config::default().page_size(page);
        watcher::watcher(api, config).backoff(backoff).boxed()
    }
}

/// What a count's task needs besides its events.
struct Counting {
    kind: Kind,
    tally: Arc<Mutex<Tally>>,
    /// Held from a list's start to its end: the record's two watches list one at a time.
    one_list: Arc<tokio::sync::Mutex<()>>,
    failing: Arc<AtomicBool>,
    settle: watch::Sender<bool>,
}

async fn count_events<T>(
    mut events: BoxStream<'static, watcher::Result<Event<Counted<T>>>>,
    seen: fn(T, bool) -> Seen,
    c: Counting,
) {
    let list = if c.kind == Kind::Migration {
        Listed::Migrations
    } else {
        Listed::Vmis
    };
    let mut listing = None;
    while let Some(event) = events.next().await {
        let seen = match event {
            // kube asks for the list's first page at the next poll, after this lock.
            Ok(Event::Init) => {
                listing = Some(Arc::clone(&c.one_list).lock_owned().await);
                Seen::ListBegins(list)
            }
            Ok(Event::InitDone) => {
                drop(listing.take());
                c.settle.send_replace(true);
                Seen::ListDone(list)
            }
            Ok(Event::InitApply(o) | Event::Apply(o)) => seen(o.seen, false),
            Ok(Event::Delete(o)) => seen(o.seen, true),
            Err(e) => {
                drop(listing.take());
                c.failing.store(true, Relaxed);
                c.settle.send_replace(true);
                if let watcher::Error::InitialListFailed(kube::Error::Api(s))
                | watcher::Error::WatchStartFailed(kube::Error::Api(s)) = &e
                    && matches!(s.code, 403 | 404)
                {
                    warn!(kind = ?c.kind, code = s.code, "the upgrade's record: not watched ({}); its figures of this kind stay 0", s.message);
                    break;
                }
                debug!(kind = ?c.kind, error = %e, "watch error; it backs off and resumes");
                continue;
            }
        };
        c.failing.store(false, Relaxed);
        c.tally
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
    use kube::ResourceExt;
    use kube::api::{ApiResource, WatchEvent};
    use kube::core::ObjectList;
    use serde_json::json;

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

    /// What the record's watches parse (a list page, a watch event) is what `seen` reads from
    /// the whole object, with the `resourceVersion` kube's watcher goes on from.
    #[test]
    fn the_records_watches_keep_the_fields_counted_and_the_resource_version() {
        let migration = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "kubevirt-workload-update-x", "namespace": "ns", "uid": "u-1",
                "resourceVersion": "41", "creationTimestamp": "2026-12-06T10:00:00Z",
                "annotations": {"kubevirt.io/workloadUpdateMigration": "", "padding": "x".repeat(2000)},
                "managedFields": [{"manager": "virt-controller", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"vmiName": "vm-1"}, "status": {"phase": "Failed", "migrationState": {}}});
        // One object's `null` status fails neither the page nor the object's other fields.
        let unset = json!({"metadata": {"name": "vmim-2", "namespace": "ns", "uid": "u-2",
            "resourceVersion": "40"}, "spec": {"vmiName": "vm-2"}, "status": null});
        let page = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigrationList",
            "metadata": {"resourceVersion": "42", "continue": "next"}, "items": [migration, unset]});
        let page: ObjectList<Counted<MigrationSeen>> = serde_json::from_value(page).unwrap();
        assert_eq!(page.items[0].seen, MigrationSeen::read(&migration));
        assert_eq!(page.items[0].resource_version().as_deref(), Some("41"));
        assert_eq!(page.items[1].seen.vmi, "ns/vm-2");
        assert_eq!(page.items[1].resource_version().as_deref(), Some("40"));

        let vmi = json!({"metadata": {"name": "vm-1", "namespace": "ns", "resourceVersion": "43",
                "labels": {"kubevirt.io/outdatedLauncherImage": ""}},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": "Running", "nodeName": "node-1",
                "conditions": [{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable"}]}});
        let line = json!({"type": "MODIFIED", "object": vmi}).to_string();
        let Ok(WatchEvent::Modified(event)) =
            serde_json::from_str::<WatchEvent<Counted<VmiSeen>>>(&line)
        else {
            panic!("a watch event of a VMI parses");
        };
        assert_eq!(event.seen, VmiSeen::read(&vmi));
        assert_eq!(event.resource_version().as_deref(), Some("43"));
    }
}
