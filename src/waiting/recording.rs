//! The upgrade's record (`plan::upgrade_record`), the waiting loop's I/O for it: opened at a
//! pass that finds an upgrade under way, counted by two watches (every migration, every VMI)
//! that run only while it is open (between upgrades, no request), kept in the guard's
//! ConfigMap at most every [`KEEP_EVERY`] while it changes, closed with an Event.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tracing::info;

use super::{Loop, Pass, this_second};
use crate::cluster::{EventKind, Watcher, Written, regarding};
use crate::model::{Kind, ObjectKey, RECORDS_CONFIGMAP, Target};
use crate::plan::fields;
use crate::plan::upgrade_record::{
    self, Next, Record, RecordRead, Tally, UnderWay, kept, resumable, save_plan,
};
use crate::vocabulary::Refusal;
use crate::warnings::{RECORD_NOT_KEPT, RECORDED, Warning};

/// How often an open record is kept while it changes: what a pod killed mid-upgrade loses
/// is counted again by the next one from what the cluster still shows.
pub(crate) const KEEP_EVERY: Duration = Duration::from_secs(10);

/// The record of the upgrade under way, and its watches.
pub(crate) struct Recording {
    tally: Arc<Mutex<Tally>>,
    _watches: [Watcher; 2],
    kept: Option<Instant>,
}

impl Recording {
    fn tally(&self) -> MutexGuard<'_, Tally> {
        self.tally.lock().expect("no panic holds the tally")
    }
}

impl Loop<'_> {
    fn records_target(&self) -> Target {
        let namespace = self.cfg.intent.keys.kubevirt.namespace.clone();
        let key = ObjectKey {
            namespace,
            name: RECORDS_CONFIGMAP.into(),
        };
        Target::new(Kind::ConfigMap, &key)
    }

    /// The record's step on what a pass read (the resident guard's).
    pub(crate) async fn record(&mut self, pass: &Pass) {
        if !self.suspends {
            return;
        }
        let read = RecordRead {
            kubevirt: pass.objects.kubevirt.as_ref(),
            upgrade: pass.view.upgrade.as_ref(),
            plans: &pass.view.plans,
            current: pass.view.current.as_deref(),
            now: this_second(),
        };
        if !self.records_read {
            self.show_last_record().await;
        }
        let next = match &self.recording {
            Some(r) => {
                let mut tally = r.tally();
                tally.from_pass(&read);
                upgrade_record::next(Some(&tally), &read)
            }
            None => upgrade_record::next(None, &read),
        };
        match next {
            Next::Open(u) => self.open_record(&u, &read).await,
            Next::Close => self.close_record(read.kubevirt).await,
            Next::Count => drop(self.keep_record(false, None, read.kubevirt).await),
            Next::Nothing => {}
        }
    }

    /// The gauges of the last record kept, at the guard's start.
    async fn show_last_record(&mut self) {
        self.records_read = true;
        let Ok(Some(cm)) = self.cluster.get(&self.records_target()).await else {
            return;
        };
        if let (Some(m), Ok(records)) = (&self.metrics, kept(&cm))
            && let Some(last) = records.last()
        {
            m.recorded(last);
        }
    }

    /// A new record, or the one a pod before this one kept for the same upgrade (it goes on).
    async fn open_record(&mut self, u: &UnderWay, read: &RecordRead<'_>) {
        let target = self.records_target();
        let configmap = self.cluster.get(&target).await.ok().flatten();
        let records = configmap.as_ref().map(|cm| kept(cm).unwrap_or_default());
        let records = records.unwrap_or_default();
        let resumed = resumable(&records, u);
        let going_on = resumed.is_some();
        let record = resumed.unwrap_or_else(|| Record::begin(u, read));
        let mut tally = Tally::new(record);
        tally.from_pass(read);
        let tally = Arc::new(Mutex::new(tally));
        let one_list = Arc::default();
        let watches = [Kind::Migration, Kind::Vmi]
            .map(|kind| (self.cluster).count_into(kind, Arc::clone(&tally), Arc::clone(&one_list)));
        info!(
            upgrade = %u.key,
            "resident guard: recording {} ({}): its migrations and VMIs are watched until it has ended",
            u.key,
            if going_on { "going on from the record kept" } else { "a new record" }
        );
        self.recording = Some(Recording {
            tally,
            _watches: watches,
            kept: None,
        });
        self.keep_record(true, configmap, read.kubevirt).await;
    }

    async fn close_record(&mut self, kubevirt: Option<&Value>) {
        let Some(r) = &self.recording else {
            return;
        };
        r.tally().close();
        let record = self.keep_record(true, None, kubevirt).await;
        self.recording = None;
        let Some(record) = record else {
            return;
        };
        let line = record.line();
        info!(upgrade = %record.upgrade, "resident guard: recorded {line}");
        if let Some(kv) = kubevirt {
            let about = regarding(Kind::KubeVirt, fields::reference(kv));
            let note = format!("{line} (kept in ConfigMap {RECORDS_CONFIGMAP})");
            let _ = (self.cluster)
                .event_about(about, EventKind::Normal, RECORDED, &note)
                .await;
        }
    }

    /// Keeps the open record if it changed (at once, or once [`KEEP_EVERY`] has passed since
    /// it was last kept); the record, when kept or due. `read`: the ConfigMap as just read (the
    /// record's opening read it), else it is read here.
    async fn keep_record(
        &mut self,
        now: bool,
        read: Option<Value>,
        kubevirt: Option<&Value>,
    ) -> Option<Record> {
        let target = self.records_target();
        let r = self.recording.as_mut()?;
        let due = now || r.kept.is_none_or(|k| k.elapsed() >= KEEP_EVERY);
        let record = {
            let mut tally = r.tally();
            if !due || !tally.changed {
                return None;
            }
            tally.to_keep(this_second())
        };
        r.kept = Some(Instant::now());
        if let Some(m) = &self.metrics {
            m.recorded(&record);
        }
        let cm = match read {
            Some(cm) => cm,
            None => match self.configmap(&target, kubevirt).await {
                Some(cm) => cm,
                None => return Some(record),
            },
        };
        let plan = |cm: &Value| {
            save_plan(cm, &record).map_err(|reason| Refusal {
                target: target.clone(),
                reason,
            })
        };
        match self.cluster.converge(&target, cm, plan).await {
            Ok(Written::Changed { .. } | Written::Unchanged { .. }) => {
                self.said.record_not_kept = None;
            }
            Ok(Written::Missing) => {
                self.record_not_kept(&target, "it is missing", kubevirt)
                    .await
            }
            Err(e) => {
                let why = e.to_string();
                self.record_not_kept(&target, &why, kubevirt).await;
                // Kept again at the next pass.
                if let Some(r) = &self.recording {
                    r.tally().changed = true;
                }
            }
        }
        Some(record)
    }

    async fn configmap(&mut self, target: &Target, kubevirt: Option<&Value>) -> Option<Value> {
        let why = match self.cluster.get(target).await {
            Ok(Some(cm)) => return Some(cm),
            Ok(None) => "it is missing".to_string(),
            Err(e) => e.to_string(),
        };
        self.record_not_kept(target, &why, kubevirt).await;
        None
    }

    /// Said once per cause: the record is still counted, and its line still said at the end.
    async fn record_not_kept(&mut self, target: &Target, why: &str, kubevirt: Option<&Value>) {
        if self.said.record_not_kept.as_deref() == Some(why) {
            return;
        }
        self.said.record_not_kept = Some(why.to_string());
        let message = format!(
            "the upgrade's record is not kept in {target}: {why}; it is still counted, and said \
             at the upgrade's end (the chart creates the ConfigMap; reinstall it to have it back)"
        );
        let w = Warning {
            reason: RECORD_NOT_KEPT,
            message,
        };
        let _ = self.cluster.warn(kubevirt, None, &w).await;
    }
}
