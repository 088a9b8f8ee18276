//! The JSON helpers left where the planner reads what it writes (serde structs read the rest:
//! `plan::fields`): one of an object's annotations (our records, whose type is checked where
//! they are read), and a value at a path whose parents must be maps (a malformed object
//! otherwise).

use serde_json::Value;

use crate::vocabulary::Malformed;

/// The annotation `key`, as it is (our records check its type).
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    obj.get("metadata")?.get("annotations")?.get(key)
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
