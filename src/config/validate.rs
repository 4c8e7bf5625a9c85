//! Checks shared by both configurations, and the error they produce.

use std::fmt;

/// A key whose value is out of range or inconsistent with another key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidField {
    /// Key path (`healthProbe.intervalSeconds`, `namespaces[1]`).
    pub field: String,
    /// The value (JSON-quoted when a string).
    pub value: String,
    /// What would be valid.
    pub expected: String,
    /// Another key the rule involves, when the value is only wrong
    /// relative to it (`healthProbe.offlineAfterSeconds`).
    pub related: Option<String>,
}

impl InvalidField {
    pub(crate) fn new(
        field: impl Into<String>,
        value: impl fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        InvalidField {
            field: field.into(),
            value: value.to_string(),
            expected: expected.into(),
            related: None,
        }
    }

    pub(crate) fn related_to(mut self, field: impl Into<String>) -> Self {
        self.related = Some(field.into());
        self
    }
}

impl fmt::Display for InvalidField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {}: expected {}",
            self.field, self.value, self.expected
        )
    }
}

impl std::error::Error for InvalidField {}

pub(crate) fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// Counts and durations that must not be zero.
pub(crate) fn positive(field: &str, value: u64) -> Result<(), InvalidField> {
    if value == 0 {
        return Err(InvalidField::new(field, value, "a whole number, 1 or more"));
    }
    Ok(())
}

pub(crate) fn port(field: &str, value: u16) -> Result<(), InvalidField> {
    if value == 0 {
        return Err(InvalidField::new(
            field,
            value,
            "a whole number from 1 to 65535",
        ));
    }
    Ok(())
}

pub(crate) fn less_than(
    field: &str,
    value: u64,
    bound_field: &str,
    bound: u64,
) -> Result<(), InvalidField> {
    if value >= bound {
        return Err(
            InvalidField::new(field, value, format!("less than {bound_field} ({bound})"))
                .related_to(bound_field),
        );
    }
    Ok(())
}

pub(crate) fn not_blank(field: &str, value: &str) -> Result<(), InvalidField> {
    if value.trim().is_empty() {
        return Err(InvalidField::new(
            field,
            quoted(value),
            "a non-empty string",
        ));
    }
    Ok(())
}

/// A Kubernetes namespace name: an RFC 1123 label.
pub(crate) fn namespace(field: &str, value: &str) -> Result<(), InvalidField> {
    if !is_dns_label(value) {
        return Err(InvalidField::new(
            field,
            quoted(value),
            "a namespace name: at most 63 lowercase letters, digits and '-', \
             starting and ending with a letter or digit",
        ));
    }
    Ok(())
}

/// A Kubernetes object name: an RFC 1123 subdomain.
pub(crate) fn object_name(field: &str, value: &str) -> Result<(), InvalidField> {
    if value.is_empty() || value.len() > 253 || !value.split('.').all(is_dns_label) {
        return Err(InvalidField::new(
            field,
            quoted(value),
            "an object name: at most 253 lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit",
        ));
    }
    Ok(())
}

fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    value.len() <= 63
        && edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// A log level or filter directives, as the telemetry module accepts them.
pub(crate) fn log_level(field: &str, value: &str) -> Result<(), InvalidField> {
    crate::telemetry::parse_level(value).map(drop).map_err(|_| {
        InvalidField::new(
            field,
            quoted(value),
            "one of off, error, warn, info, debug, trace, \
             or filter directives such as \"info,agentdeck=debug\"",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_follow_rfc_1123_labels() {
        for good in ["a", "team-a", "ns1", &"a".repeat(63)] {
            assert!(namespace("n", good).is_ok(), "{good}");
        }
        for bad in ["", "Team", "-a", "a-", "a.b", "a_b", &"a".repeat(64)] {
            assert!(namespace("n", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_names_may_contain_dots() {
        assert!(object_name("n", "agentdeck.controller").is_ok());
        for bad in ["", "a..b", ".a", "A", &"a.".repeat(127)] {
            assert!(object_name("n", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn invalid_field_message_names_field_value_and_expectation() {
        let err = positive("healthProbe.intervalSeconds", 0).expect_err("zero");
        assert_eq!(
            err.to_string(),
            "healthProbe.intervalSeconds = 0: expected a whole number, 1 or more"
        );
    }
}
