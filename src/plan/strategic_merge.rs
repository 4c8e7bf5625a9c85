//! Strategic merge patch (placeholder: plain JSON merge until the real one lands).

use serde_json::Value;

/// Why a strategic merge could not be done.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The patch does not have the shape the schema asks for at `path`.
    #[error("{path}: {message}")]
    BadPatch { path: String, message: String },
}

/// Merges `overlay` (a partial `PodTemplateSpec`) into `base` the way
/// `kubectl patch --type strategic` would.
pub fn merge_pod_template(base: &mut Value, overlay: &Value) -> Result<(), MergeError> {
    json_merge(base, overlay);
    Ok(())
}

fn json_merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    json_merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}
