//! The variables' types: a text refused says what it accepts, `config::read_env` which variable.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::IntoDeserializer;
use serde::{Deserialize, Deserializer};

/// Every `*_SECONDS` variable, its range declared with its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Seconds<const MIN: u64, const MAX: u64>(pub Duration);

impl<const MIN: u64, const MAX: u64> TryFrom<String> for Seconds<MIN, MAX> {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        match text.parse() {
            Ok(n) if (MIN..=MAX).contains(&n) => Ok(Self(Duration::from_secs(n))),
            _ => Err(format!("a whole number of seconds from {MIN} to {MAX}")),
        }
    }
}

/// `$read` returns `None` for a text refused, which is then said with `$accepts`.
macro_rules! read_from_text {
    ($($(#[$doc:meta])* $name:ident($inner:ty), $accepts:literal, $read:expr;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(pub $inner);

        impl TryFrom<String> for $name {
            type Error = &'static str;

            fn try_from(text: String) -> Result<Self, &'static str> {
                let read: fn(String) -> Option<$inner> = $read;
                read(text).map($name).ok_or($accepts)
            }
        }
    )*};
}

read_from_text! {
    Flag(bool), "true or false (also 1/0, yes/no)",
    |text| match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    };
    Namespace(String), "a namespace name (RFC 1123 label: a-z, 0-9, '-', at most 63)",
    |text| is_label(&text).then_some(text);
    Name(String), "an object name (RFC 1123 subdomain: a-z, 0-9, '-', '.')",
    |text| (text.len() <= 253 && text.split('.').all(is_label)).then_some(text);
    /// In the order given.
    Methods(Option<Vec<String>>), "a comma-separated list of distinct LiveMigrate and Evict, or empty",
    |text| {
        let list: Vec<String> = text.split(',').map(|m| m.trim().into()).collect();
        let unique = list.iter().enumerate().all(|(i, m)| !list[..i].contains(m));
        let valid = unique && list.iter().all(|m| m == "LiveMigrate" || m == "Evict");
        if text.trim().is_empty() { Some(None) } else { valid.then_some(Some(list)) }
    };
    AbsolutePath(PathBuf), "an absolute path",
    |text| text.starts_with('/').then(|| text.into());
    Port(Option<u16>), "a TCP port from 1 to 65535, or 0 (no metrics)",
    |text| text.parse().ok().map(|port| (port != 0).then_some(port));
}

/// An RFC 1123 label.
fn is_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub fn empty_is_none<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    let text = String::deserialize(d)?;
    (!text.is_empty())
        .then(|| T::deserialize(text.into_deserializer()))
        .transpose()
}
