//! The JSON Patch editor: every patch starts with a `test` of `/metadata/resourceVersion`
//! (docs/design.md, "The hazards, and the answer to each"). It knows JSON, not KubeVirt or
//! Fleet: what to change is decided by the object rooms.

use json_patch::{Patch, PatchOperation};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::json::{annotation, lookup};
use super::records::{ValueRecord, describe};
use crate::model::pointer;
use crate::vocabulary::{Malformed, Plan};
use crate::warnings::Warning;

/// Builds a patch op by op, applying each to a working copy so later decisions see its effect.
#[derive(Default)]
pub(super) struct Editor {
    /// The document as the ops so far leave it.
    pub(super) doc: Value,
    ops: Vec<PatchOperation>,
    actions: Vec<String>,
    warnings: Vec<Warning>,
}

impl Editor {
    pub(super) fn new(obj: &Value) -> Result<Self, Malformed> {
        if !obj.is_object() {
            return Err(Malformed("the object is not a JSON map".into()));
        }
        let rv = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            .ok_or_else(|| Malformed("metadata.resourceVersion is missing".into()))?;
        let mut ed = Self {
            doc: obj.clone(),
            ..Self::default()
        };
        ed.test("/metadata/resourceVersion", rv);
        Ok(ed)
    }

    pub(super) fn note(&mut self, action: impl Into<String>) {
        self.actions.push(action.into());
    }

    pub(super) fn warn(&mut self, reason: &'static str, message: impl Into<String>) {
        self.warnings.push(Warning {
            reason,
            message: message.into(),
        });
    }

    pub(super) fn push(&mut self, op: Value) {
        let op: PatchOperation = serde_json::from_value(op).expect("planned ops are well-formed");
        json_patch::patch(&mut self.doc, std::slice::from_ref(&op))
            .expect("planned ops apply to the document they were planned from");
        self.ops.push(op);
    }

    pub(super) fn add(&mut self, path: &str, value: Value) {
        self.push(json!({"op": "add", "path": path, "value": value}));
    }

    pub(super) fn test(&mut self, path: &str, value: &str) {
        self.push(json!({"op": "test", "path": path, "value": value}));
    }

    pub(super) fn remove(&mut self, path: &str) {
        self.push(json!({"op": "remove", "path": path}));
    }

    /// Sets `path` to `value` unless it already is; missing parent maps are created in the same
    /// op. Returns the pointers of the maps it created.
    pub(super) fn ensure(
        &mut self,
        path: &[&str],
        value: Value,
        what: &str,
    ) -> Result<Vec<String>, Malformed> {
        let current = lookup(&self.doc, path)?;
        if current == Some(&value) {
            return Ok(Vec::new());
        }
        let before = describe(&current.cloned());
        // Depth of the first missing parent map (the whole path: none missing): the op adds the
        // value there, wrapped in the maps that are missing.
        let missing = (1..path.len())
            .find(|&d| lookup(&self.doc, &path[..d]).ok().flatten().is_none())
            .unwrap_or(path.len());
        let nested = path[missing..].iter().rev().fold(value.clone(), |v, seg| {
            Value::Object(Map::from_iter([(seg.to_string(), v)]))
        });
        self.add(&pointer(&path[..missing]), nested);
        let created = (missing..path.len()).map(|e| pointer(&path[..e])).collect();
        if !path.starts_with(&["metadata"]) {
            self.note(format!("set {what} to {value} (was {before})"));
        }
        Ok(created)
    }

    /// Puts a recorded value back: the exact value, or no value and no parents we created.
    pub(super) fn restore(
        &mut self,
        path: &[&str],
        record: &ValueRecord,
        what: &str,
    ) -> Result<(), Malformed> {
        if record.present {
            self.ensure(path, record.value.clone().unwrap_or(Value::Null), what)?;
        } else if lookup(&self.doc, path)?.is_some() {
            self.remove(&pointer(path));
            self.note(format!("removed {what} (it was absent before)"));
        }
        self.remove_empty(&record.created_parents);
        Ok(())
    }

    /// Removes the maps or lists we created, deepest first, where they are now empty.
    pub(super) fn remove_empty(&mut self, created: &[String]) {
        let mut created: Vec<&String> = created.iter().collect();
        created.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
        for p in created {
            if [json!({}), json!([])]
                .iter()
                .any(|e| self.doc.pointer(p) == Some(e))
            {
                self.remove(p);
            }
        }
    }

    pub(super) fn write_record<T: Serialize>(
        &mut self,
        key: &str,
        record: &T,
    ) -> Result<(), Malformed> {
        let text = serde_json::to_string(record).expect("records serialize");
        self.ensure(&["metadata", "annotations", key], Value::String(text), key)?;
        Ok(())
    }

    pub(super) fn remove_annotation(&mut self, key: &str) {
        if annotation(&self.doc, key).is_some() {
            self.remove(&pointer(&["metadata", "annotations", key]));
        }
        if self.doc.pointer("/metadata/annotations") == Some(&json!({})) {
            self.remove("/metadata/annotations");
        }
    }

    pub(super) fn finish(self) -> Plan {
        // Only the resourceVersion test: nothing to do.
        let patch = (self.ops.len() > 1).then_some(Patch(self.ops));
        Plan {
            patch,
            actions: self.actions,
            warnings: self.warnings,
        }
    }
}
