//! The object names of the settings: RFC 1123 labels and subdomains, checked.

use super::{ConfigError, invalid};

/// RFC 1123 label: a-z, 0-9 and '-', not at either end, at most 63 characters.
fn is_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A namespace name is an RFC 1123 label.
pub(super) fn namespace(
    var: &str,
    value: Option<String>,
    default: &str,
) -> Result<String, ConfigError> {
    let v = value.unwrap_or_else(|| default.to_string());
    if is_label(&v) {
        Ok(v)
    } else {
        Err(invalid(
            var,
            &v,
            "a namespace name (RFC 1123 label: a-z, 0-9, '-', at most 63)",
        ))
    }
}

/// An object name is an RFC 1123 subdomain: labels joined by '.', at most 253 characters.
pub(super) fn name(var: &str, value: Option<String>, default: &str) -> Result<String, ConfigError> {
    let v = value.unwrap_or_else(|| default.to_string());
    if v.len() <= 253 && v.split('.').all(is_label) {
        Ok(v)
    } else {
        Err(invalid(
            var,
            &v,
            "an object name (RFC 1123 subdomain: a-z, 0-9, '-', '.')",
        ))
    }
}
