//! The namespace's redaction key: the one key with which both the
//! controller (kept log tails, [`crate::controller::tails`]) and the support
//! bundle ([`crate::ops::bundle`]) derive placeholders, so that one secret
//! value gets one placeholder in a bundle whether it was read from a live
//! log or from a tail the controller kept of a pod already gone.
//!
//! **How a placeholder is derived.** `***REDACTED:<rule>:<hash>***`, where
//! `<hash>` is the first 40 bits of HMAC-SHA256(key, value)
//! ([`crate::redact::Redactor::placeholder`]). Never the value, never an
//! unkeyed hash: a password of a few words could be guessed back from an
//! unkeyed hash by anyone who can read the ConfigMap the tails are kept in.
//!
//! **Why a shared key rather than the alternatives.**
//! - Placeholders that name the Secret (`secret:ns/name/key`) need no key,
//!   but only for values of Secrets: the controller reads no Secret values,
//!   so it still hides `password=…` and URL credentials in tails by pattern,
//!   and those must agree with the bundle's too.
//! - The bundle cannot re-redact a kept tail it cannot map: the tail holds
//!   placeholders, not values (and must: it is a ConfigMap).
//! - Keeping tails in a Secret would need `create` on Secrets, which RBAC
//!   cannot narrow to one name (and a created `service-account-token`
//!   Secret is a way to another account's token).
//!
//! **Where it lives, and who may read it.** A Secret
//! [`SECRET_NAME`] in each namespace the controller watches, rendered by
//! `agentdeck manifests` *without* a value (a rendered random value would
//! change on every render and sit in whatever repository keeps the
//! manifests). The controller may `get` and `update` that one Secret by
//! name and no other ([`crate::install::controller_rules`]): it fills in the
//! key the first time it needs one. The bundle finds it among the Secrets it
//! lists anyway (their values teach it what to hide): whoever may read the
//! namespace's Secrets may read the key, and nobody who may read only the
//! ConfigMaps can. Without it (manifests not applied, no right to list
//! Secrets) each side falls back to a random key of its own and placeholders
//! of pattern matches agree only within one side; the bundle's manifest
//! says which.

use serde_json::Value;

/// Name of the Secret holding the namespace's redaction key.
pub const SECRET_NAME: &str = "agentdeck-redaction-key";
/// Its data key.
pub const DATA_KEY: &str = "key";
/// Shortest key taken (hex digits): anything shorter was not made by us.
pub const MIN_KEY_LEN: usize = 32;

/// The key in a Secret (as JSON, `data` base64 or `stringData`), if it holds
/// one long enough.
pub fn key_in(secret: &Value) -> Option<Vec<u8>> {
    let raw = match secret["data"][DATA_KEY].as_str() {
        Some(b64) => decode_base64(b64)?,
        None => secret["stringData"][DATA_KEY].as_str()?.as_bytes().to_vec(),
    };
    let key = raw.trim_ascii().to_vec();
    (key.len() >= MIN_KEY_LEN).then_some(key)
}

/// A new key: 32 random bytes as 64 hex digits (text, so that the key
/// itself is a literal the bundle hides should it ever be printed).
pub fn new_key(random: &[u8; 32]) -> String {
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Secret as `agentdeck manifests` renders it: no value.
pub fn empty_secret(namespace: &str, labels: Value) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": SECRET_NAME, "namespace": namespace, "labels": labels},
    })
}

/// A Secret's `data` value decoded (standard or URL-safe alphabet,
/// padding and whitespace ignored); `None` when it is not base64.
pub(crate) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_is_read_from_data_or_string_data_and_a_short_one_is_refused() {
        let key = new_key(&[7u8; 32]);
        assert_eq!(key.len(), 64);
        // "0707…" base64-encoded as the API serves it.
        let b64 = "MDcwNzA3MDcwNzA3MDcwNzA3MDcwNzA3MDcwNzA3MDcwNzA3MDcwNzA3MDcwNzA3MDcwNzA3MDcwNzA3MDcwNw==";
        assert_eq!(
            key_in(&json!({"data": {"key": b64}})),
            Some(key.clone().into_bytes())
        );
        assert_eq!(
            key_in(&json!({"stringData": {"key": format!("{key}\n")}})),
            Some(key.into_bytes())
        );
        assert_eq!(key_in(&json!({"stringData": {"key": "short"}})), None);
        assert_eq!(key_in(&json!({"metadata": {"name": SECRET_NAME}})), None);
    }
}
