//! Kubernetes strategic merge patch and RFC 7386 JSON merge patch over
//! `serde_json::Value`.
//!
//! The strategic merge is what kube-apiserver does for `PATCH` with
//! `Content-Type: application/strategic-merge-patch+json` (`kubectl patch`,
//! client-side `kubectl apply`): a port of the apply half of
//! k8s.io/apimachinery's `strategicpatch`, driven by the patch metadata of the
//! built-in kinds in [`schema`]. In short:
//!
//! - maps merge recursively and `null` deletes a key;
//! - lists with patch strategy `merge` merge element-wise by their merge key
//!   (containers by `name`, volumeMounts by `mountPath`, …), or become a union
//!   when they hold primitives (`finalizers`); every other list is replaced;
//! - directives: `$patch: replace|delete` on a map or a list element,
//!   `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`,
//!   `$retainKeys`. None of them is left in the result.
//!
//! Two behaviours surprise people but are Kubernetes' own:
//!
//! - Elements new to a merging list land *before* the existing ones, unless a
//!   `$setElementOrder` list (which `kubectl apply` always sends) orders them;
//!   find containers by name, never by index.
//! - `$patch: merge` is refused (kube-apiserver answers 500), and
//!   `$patch: delete` on a map that exists leaves `{}` behind.
//!
//! A field of an unknown nested type (a field newer than the table, or under a
//! field the table does not describe) merges as maps do and is replaced as
//! lists are; Kubernetes, knowing every field, would instead reject a field it
//! does not know.

mod engine;
mod schema;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

/// One field's patch extensions as the apiserver's OpenAPI documents carry
/// them (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchExtension {
    /// The OpenAPI definition (`io.k8s.api.core.v1.PodSpec`).
    pub definition: String,
    /// The property (`containers`).
    pub field: &'static str,
    /// `merge` or `replace`.
    pub strategy: &'static str,
    /// The merge key of a merging list of objects (`name`).
    pub merge_key: Option<&'static str>,
}

/// Every field of the built-in kinds whose patch strategy is not the
/// default, from the same table the merge itself follows.
pub fn patch_extensions() -> Vec<PatchExtension> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<&'static schema::TypeSchema> =
        schema::KINDS.iter().map(|(_, _, s)| *s).collect();
    while let Some(type_schema) = stack.pop() {
        if !seen.insert(std::ptr::from_ref(type_schema)) {
            continue;
        }
        let definition = schema::definition_name(type_schema);
        for field in type_schema.fields {
            stack.extend(field.child);
            let (strategy, merge_key) = match field.strategy {
                schema::Strategy::Default => continue,
                schema::Strategy::Merge { key } => ("merge", key),
                schema::Strategy::Replace => ("replace", None),
            };
            if let Some(definition) = &definition {
                out.push(PatchExtension {
                    definition: definition.clone(),
                    field: field.name,
                    strategy,
                    merge_key,
                });
            }
        }
    }
    out
}

/// Why a patch could not be applied. [`MergeError::http_status`] gives the
/// status kube-apiserver answers with for the same failure.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The patch does not have the shape the schema asks for at `path`: a
    /// malformed directive, a key outside `$retainKeys`, a body that is not an
    /// object.
    #[error("{path}: {message}")]
    BadPatch { path: String, message: String },
    /// A list holds lists, which strategic merge cannot address.
    #[error("{path}: lists of lists are not supported by strategic merge patch")]
    ListOfLists { path: String },
    /// The patch is well formed but cannot be merged into the target at `path`
    /// (an element without its merge key, elements of different kinds,
    /// `$patch: merge`, a `$setElementOrder` list that contradicts the patch).
    #[error("{path}: {message}")]
    CannotMerge { path: String, message: String },
    /// No strategic-merge schema for this kind, as for every custom resource;
    /// the message is kube-apiserver's.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    NoSchema { api_version: String, kind: String },
}

impl MergeError {
    /// The HTTP status kube-apiserver answers with: 400 for a malformed patch,
    /// 422 for lists of lists, 415 for a kind without a schema, and 500 for the
    /// other merge failures, which it does not classify.
    pub fn http_status(&self) -> u16 {
        match self {
            MergeError::BadPatch { .. } => 400,
            MergeError::ListOfLists { .. } => 422,
            MergeError::CannotMerge { .. } => 500,
            MergeError::NoSchema { .. } => 415,
        }
    }
}

/// Merges `overlay` (a partial `PodTemplateSpec`) into `base` the way
/// `kubectl patch --type strategic` would. On error `base` is left as it was.
pub fn merge_pod_template(base: &mut Value, overlay: &Value) -> Result<(), MergeError> {
    merge_document(base, overlay, &schema::POD_TEMPLATE_SPEC)
}

/// Applies a strategic merge `patch` to `target`, an object of the built-in
/// kind `kind` in `api_version` (`("v1", "Pod")`, `("apps/v1", "Deployment")`).
/// On error `target` is left as it was; kinds without a schema (custom
/// resources) get [`MergeError::NoSchema`].
pub fn strategic_merge(
    target: &mut Value,
    patch: &Value,
    api_version: &str,
    kind: &str,
) -> Result<(), MergeError> {
    let root = schema::kind_schema(api_version, kind).ok_or_else(|| MergeError::NoSchema {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    })?;
    merge_document(target, patch, root)
}

/// Whether [`strategic_merge`] knows `kind` in `api_version`.
pub fn has_schema(api_version: &str, kind: &str) -> bool {
    schema::kind_schema(api_version, kind).is_some()
}

/// Applies an RFC 7386 JSON merge patch (`application/merge-patch+json`).
pub fn json_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                json_merge_patch(target.entry(key.as_str()).or_insert(Value::Null), value);
            }
        }
    }
}

fn merge_document(
    target: &mut Value,
    patch: &Value,
    root: &'static schema::TypeSchema,
) -> Result<(), MergeError> {
    let original = document(target, "the object to patch")?;
    let patch = document(patch, "a patch")?;
    *target = Value::Object(engine::merge_object(original, patch, Some(root), "")?);
    Ok(())
}

/// A JSON document as Kubernetes reads one: an object, or `null` for none.
fn document(value: &Value, what: &str) -> Result<Map<String, Value>, MergeError> {
    match value {
        Value::Object(object) => Ok(object.clone()),
        Value::Null => Ok(Map::new()),
        _ => Err(MergeError::BadPatch {
            path: "(root)".to_owned(),
            message: format!("{what} must be a JSON object"),
        }),
    }
}
