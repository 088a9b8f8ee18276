//! The JSON helpers left where no serde struct reads an object: a text or a time at a pointer
//! (empty or none when absent or of another type), one of an object's annotations, and a value
//! at a path whose parents must be maps (a malformed object otherwise).

use jiff::Timestamp;
use serde_json::Value;

use crate::vocabulary::Malformed;

/// The time at `ptr`; none when absent or not a time.
pub fn time_at(obj: &Value, ptr: &str) -> Option<Timestamp> {
    obj.pointer(ptr)?.as_str()?.parse().ok()
}

/// The text at `ptr`; empty when absent or not a string.
pub fn text_at<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    obj.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// The annotation `key`, as it is (our records check its type).
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    obj.pointer("/metadata/annotations")?.get(key)
}

/// The value at `path`, checking that every parent present is a map.
pub fn lookup<'a>(obj: &'a Value, path: &[&str]) -> Result<Option<&'a Value>, Malformed> {
    let mut node = obj;
    for (depth, seg) in path.iter().enumerate() {
        let Value::Object(map) = node else {
            let parent = path[..depth].join(".");
            return Err(Malformed(format!("{parent} is not a map")));
        };
        match map.get(*seg) {
            Some(next) => node = next,
            None => return Ok(None),
        }
    }
    Ok(Some(node))
}
