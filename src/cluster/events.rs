//! The Events on the KubeVirt CR, so `kubectl describe kubevirt` tells the story.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;
use tracing::{debug, warn};

use super::Cluster;
use crate::error::with_causes;
use crate::model::{FIELD_MANAGER, Kind, Target};
use crate::plan::fields;
use crate::warnings::Warning;

/// An Event's type, as the Event names it (its `Debug`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// `object` (its namespace, name, uid and resourceVersion, as read), of `about`'s kind, as an
/// Event names it.
pub fn regarding(about: Kind, object: ObjectReference) -> ObjectReference {
    ObjectReference {
        api_version: Some(about.api_version().into()),
        kind: Some(about.name().into()),
        ..object
    }
}

impl Cluster {
    /// A WARN line and a Warning Event; a run records it ([`crate::context::Run::warned`]).
    /// `Err`: the Event could not be made (`REASON: error`).
    pub async fn warn(
        &self,
        kubevirt: Option<&Value>,
        target: Option<&Target>,
        w: &Warning,
    ) -> Result<(), String> {
        // An `Option` field is left out of the line when `None`.
        let object = target.map(tracing::field::display);
        warn!(object, reason = w.reason, "{}", w.message);
        match kubevirt {
            Some(kv) => {
                self.event(kv, EventKind::Warning, w.reason, &w.message)
                    .await
            }
            None => Ok(()),
        }
    }

    /// Best effort: a failure is logged, never fatal; `Err` says it (`REASON: error`), for a
    /// run's termination message.
    pub async fn event(
        &self,
        kubevirt: &Value,
        kind: EventKind,
        reason: &str,
        note: &str,
    ) -> Result<(), String> {
        let about = regarding(Kind::KubeVirt, fields::reference(kubevirt));
        self.event_about(about, kind, reason, note).await
    }

    /// On an Upgrade, `kubectl describe upgrade` then says why it waits.
    pub async fn event_about(
        &self,
        regarding: ObjectReference,
        kind: EventKind,
        reason: &str,
        note: &str,
    ) -> Result<(), String> {
        if self.dry_run {
            return Ok(());
        }
        let name = regarding.name.clone().unwrap_or_default();
        let namespace = regarding.namespace.clone().unwrap_or_default();
        let about = regarding.kind.clone().unwrap_or_default();
        let now = jiff::Timestamp::now();
        // The API server takes at most 1 kB of note.
        let mut note = note.to_string();
        crate::model::truncate_bytes(&mut note, 1024);
        let event = Event {
            metadata: ObjectMeta {
                // client-go's recorder names Events `<object>.<unix nanos in hex>`.
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(reason.into()),
            reason: Some(reason.into()),
            note: Some(note),
            type_: Some(format!("{kind:?}")),
            reporting_controller: Some(FIELD_MANAGER.into()),
            reporting_instance: Some(
                std::env::var("HOSTNAME").unwrap_or_else(|_| FIELD_MANAGER.into()),
            ),
            regarding: Some(regarding),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        // One attempt: an Event is not worth delaying the upgrade for.
        if let Err(e) = api.create(&params, &event).await {
            let e = with_causes(&e);
            warn!(error = %e, reason, "could not record the Event on the {about}");
            return Err(format!("{reason}: {e}"));
        }
        Ok(())
    }

    /// The newest Event of `reason`: its time, reporting instance and note. `None` also when it
    /// may not be read: a 403 says nothing of the guard, `status` leaves it out.
    pub async fn latest_event(
        &self,
        namespace: &str,
        reason: &str,
    ) -> Option<(jiff::Timestamp, String, String)> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default().fields(&format!("reason={reason}"));
        let what = format!("list events {reason}");
        let list = (self.call(&what, || api.list(&params)).await)
            .inspect_err(|e| debug!(error = %e, "the resident guard's Events not read"))
            .ok()?;
        let events = list.items.into_iter().filter_map(|e| {
            let instance = e.reporting_instance.unwrap_or_default();
            Some((e.event_time?.0, instance, e.note.unwrap_or_default()))
        });
        events.max_by_key(|(time, ..)| *time)
    }
}
