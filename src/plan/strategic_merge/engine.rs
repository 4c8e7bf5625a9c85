//! The merge itself: the apply half of k8s.io/apimachinery's
//! `pkg/util/strategicpatch` (`mergeMap`, `mergeSlice` and their helpers),
//! ported step by step so that odd corners behave as kube-apiserver's do.
//!
//! Where the Go code leaves directive keys in a value for the typed decoding
//! that follows it to drop (new values, replaced values), this port drops them
//! here, since our callers keep working on JSON.

use serde_json::{Map, Value};

use super::MergeError;
use super::schema::{FieldMeta, Strategy, TypeSchema, field_meta};

type Object = Map<String, Value>;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Merges `patch` into `original`, both objects of the type `schema`
/// describes (`None`: unknown type). `path` names the object in errors.
pub(super) fn merge_object(
    mut original: Object,
    mut patch: Object,
    schema: Option<&'static TypeSchema>,
    path: &str,
) -> Result<Object, MergeError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(clean_object(patch))
            }
            // Kubernetes leaves an empty object behind, not a missing key.
            Some("delete") => Ok(Object::new()),
            _ => Err(cannot_merge(
                path,
                format!("unknown patch type: {directive} in map"),
            )),
        };
    }

    apply_retain_keys(&mut original, &mut patch, path)?;
    merge_element_orders(&mut original, &mut patch, schema, path)?;

    for (patch_key, patch_value) in patch {
        let (key, is_delete_list) = match patch_key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(rest) => (
                directive_target(rest, path, "invalid patch format of primitive list")?,
                true,
            ),
            None => (patch_key.as_str(), false),
        };
        if patch_value.is_null() {
            original.remove(key);
            continue;
        }
        let Some(current) = original.remove(key) else {
            if !is_delete_list && let Some(value) = clean(patch_value) {
                original.insert(key.to_owned(), value);
            }
            continue;
        };
        let meta = field_meta(schema, key);
        let field_path = child_path(path, key);
        let merged = match (current, patch_value) {
            (Value::Object(current), Value::Object(patch_value)) => match meta.strategy {
                Strategy::Replace => clean(Value::Object(patch_value)),
                _ => Some(Value::Object(merge_object(
                    current,
                    patch_value,
                    meta.child,
                    &field_path,
                )?)),
            },
            (Value::Array(current), Value::Array(patch_value)) => Some(Value::Array(
                merge_list_field(current, patch_value, meta, is_delete_list, &field_path)?,
            )),
            // Go's reflect types decide: a scalar of the same type is
            // replaced even by a deletion list, another type only by a value.
            (current, patch_value) => {
                if ElemKind::of(&current) == ElemKind::of(&patch_value) || !is_delete_list {
                    clean(patch_value)
                } else {
                    Some(current)
                }
            }
        };
        if let Some(value) = merged {
            original.insert(key.to_owned(), value);
        }
    }
    Ok(original)
}

/// A list field whose target and patch are both lists.
fn merge_list_field(
    current: Vec<Value>,
    patch: Vec<Value>,
    meta: FieldMeta,
    is_delete_list: bool,
    path: &str,
) -> Result<Vec<Value>, MergeError> {
    match meta.strategy {
        Strategy::Merge { key } => {
            merge_list(current, patch, meta.child, key, is_delete_list, path)
        }
        // Also for a `$deleteFromPrimitiveList` on a list without the merge
        // strategy: Kubernetes then replaces the list with the deletion list.
        Strategy::Default | Strategy::Replace => Ok(clean_list(patch)),
    }
}

/// A list with patch strategy `merge`: primitives become a union (or lose the
/// patch's values for a deletion list), objects merge by `key`.
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    element: Option<&'static TypeSchema>,
    key: Option<&'static str>,
    is_delete_list: bool,
    path: &str,
) -> Result<Vec<Value>, MergeError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = element_kind(&original, &patch, path)?;
    if kind != Some(ElemKind::Object) {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|value| !patch.contains(value))
                .collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for value in original.iter().chain(&patch) {
            if !merged.contains(value) {
                merged.push(value.clone());
            }
        }
        return normalize_order(merged, &patch, &original, key, path);
    }
    let Some(key) = key else {
        return Err(cannot_merge(
            path,
            "cannot merge lists without merge key for type map".to_owned(),
        ));
    };
    let (original, patch) = apply_list_directives(original, patch, key, path)?;
    let merged = merge_by_key(original.clone(), &patch, key, element, path)?;
    normalize_order(merged, &patch, &original, Some(key), path)
}

/// Handles the elements that carry `$patch`: deletes by merge key, or turns
/// the whole patch into the new list for `replace`. Returns the list to merge
/// into and the patch elements left to merge.
fn apply_list_directives(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    path: &str,
) -> Result<(Vec<Value>, Vec<Value>), MergeError> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for element in patch {
        let Some(directive) = element.get(DIRECTIVE) else {
            rest.push(element);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(doomed) = element.get(key) else {
                    return Err(no_merge_key(path, &element, key));
                };
                original.retain(|candidate| candidate.get(key) != Some(doomed));
            }
            // Other `$patch` elements are still pruned, as Kubernetes does.
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(cannot_merge(
                    path,
                    "merging lists cannot yet be specified in the patch".to_owned(),
                ));
            }
            _ => {
                return Err(cannot_merge(
                    path,
                    format!("unknown patch type: {directive} in map: {element}"),
                ));
            }
        }
    }
    if replace {
        Ok((clean_list(rest), Vec::new()))
    } else {
        Ok((original, rest))
    }
}

/// Merges each patch element into the first element with the same merge key
/// value, or appends it.
fn merge_by_key(
    mut original: Vec<Value>,
    patch: &[Value],
    key: &str,
    element: Option<&'static TypeSchema>,
    path: &str,
) -> Result<Vec<Value>, MergeError> {
    for patch_element in patch {
        let Value::Object(patch_object) = patch_element else {
            return Err(bad_arg_type(path, "map", patch_element));
        };
        let Some(key_value) = patch_object.get(key) else {
            return Err(no_merge_key(path, patch_element, key));
        };
        let element_path = format!("{path}[{key}={key_value}]");
        let found = original
            .iter_mut()
            .find(|candidate| candidate.get(key) == Some(key_value));
        match found {
            Some(slot) => {
                let Value::Object(current) = slot.take() else {
                    return Err(bad_arg_type(&element_path, "map", slot));
                };
                *slot = Value::Object(merge_object(
                    current,
                    patch_object.clone(),
                    element,
                    &element_path,
                )?);
            }
            None => {
                if let Some(value) = clean(patch_element.clone()) {
                    original.push(value);
                }
            }
        }
    }
    Ok(original)
}

/// Applies the `$setElementOrder/<field>` directives of `patch`, merging each
/// named list with its patch list first, and removes both from `patch`.
fn merge_element_orders(
    original: &mut Object,
    patch: &mut Object,
    schema: Option<&'static TypeSchema>,
    path: &str,
) -> Result<(), MergeError> {
    let directives: Vec<String> = patch
        .keys()
        .filter(|key| key.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for directive in directives {
        let Some(order) = patch.remove(&directive) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(bad_arg_type(&child_path(path, &directive), "slice", &order));
        };
        let field = directive_target(
            &directive[SET_ELEMENT_ORDER.len()..],
            path,
            "invalid patch format of setElementOrder list",
        )?;
        let field_path = child_path(path, field);
        let current = list_at(original, field, &field_path)?;
        let patched = list_at(patch, field, &field_path)?;
        let meta = field_meta(schema, field);
        let key = match meta.strategy {
            Strategy::Merge { key } => key,
            Strategy::Default | Strategy::Replace => None,
        };
        validate_order(
            patched.as_deref().unwrap_or_default(),
            &order,
            key,
            &field_path,
        )?;
        let merged = match (current.clone(), patched.clone()) {
            (Some(current), None) => current,
            (None, Some(patched)) => clean_list(patched),
            (Some(current), Some(patched)) => {
                merge_list_field(current, patched, meta, false, &field_path)?
            }
            (None, None) => continue,
        };
        let current = current.unwrap_or_default();
        if element_kind(
            &current,
            patched.as_deref().unwrap_or_default(),
            &field_path,
        )?
        .is_none()
        {
            return Err(cannot_merge(
                &field_path,
                "no elements in any of the given slices".to_owned(),
            ));
        }
        let ordered = normalize_order(merged, &order, &current, key, &field_path)?;
        original.insert(field.to_owned(), Value::Array(ordered));
        patch.remove(field);
    }
    Ok(())
}

/// Checks that the patch list names its elements in the order of the
/// `$setElementOrder` list and names none that it lacks (deletions aside).
fn validate_order(
    patch: &[Value],
    order: &[Value],
    key: Option<&str>,
    path: &str,
) -> Result<(), MergeError> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let mut kept = Vec::with_capacity(patch.len());
    for element in patch {
        if key.is_some() {
            if !element.is_object() {
                return Err(bad_arg_type(path, "map", element));
            }
            if element.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                continue;
            }
        }
        kept.push(element);
    }
    let (mut in_patch, mut in_order) = (0, 0);
    while in_patch < kept.len() && in_order < order.len() {
        if kept[in_patch].get(DIRECTIVE).is_some() {
            in_patch += 1;
            continue;
        }
        if same_key(kept[in_patch], &order[in_order], key, path)? {
            in_patch += 1;
        }
        in_order += 1;
    }
    if in_patch < kept.len() {
        return Err(cannot_merge(
            path,
            format!(
                "the order in patch list {} doesn't match $setElementOrder list {}",
                Value::Array(patch.to_vec()),
                Value::Array(order.to_vec())
            ),
        ));
    }
    Ok(())
}

fn same_key(
    left: &Value,
    right: &Value,
    key: Option<&str>,
    path: &str,
) -> Result<bool, MergeError> {
    match key {
        Some(key) => Ok(merge_key_of(left, key, path)? == merge_key_of(right, key, path)?),
        None => Ok(left == right),
    }
}

fn merge_key_of<'v>(value: &'v Value, key: &str, path: &str) -> Result<&'v Value, MergeError> {
    if !value.is_object() {
        return Err(bad_arg_type(path, "map", value));
    }
    value.get(key).ok_or_else(|| no_merge_key(path, value, key))
}

/// Puts `merged` in the order Kubernetes gives it: the elements named by
/// `patch_order` in that order, the others in `server_order`, interleaved so
/// that a server element goes first only where the server list already had it
/// before the patch element. So an element new to the list lands before the
/// existing ones unless a `$setElementOrder` list says otherwise.
fn normalize_order(
    merged: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
    path: &str,
) -> Result<Vec<Value>, MergeError> {
    if let Some(key) = key {
        for element in merged.iter().chain(patch_order).chain(server_order) {
            if !element.is_object() {
                return Err(bad_arg_type(path, "map", element));
            }
            if element.get(key).is_none() {
                return Err(no_merge_key(path, element, key));
            }
        }
    }
    let position = |list: &[Value], value: &Value| -> Option<usize> {
        let wanted = identity(value, key);
        list.iter()
            .position(|candidate| identity(candidate, key) == wanted)
    };

    let (mut patch_items, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|value| position(patch_order, value).is_some());
    patch_items.sort_by_key(|value| position(patch_order, value));
    server_only.sort_by_key(|value| position(server_order, value));

    let precedes = |server: &Value, patched: &Value| {
        matches!(
            (position(server_order, server), position(server_order, patched)),
            (Some(s), Some(p)) if s < p
        )
    };
    let mut ordered = Vec::with_capacity(patch_items.len() + server_only.len());
    let mut server = server_only.into_iter().peekable();
    let mut patched = patch_items.into_iter().peekable();
    while let Some(next) = match (server.peek(), patched.peek()) {
        (Some(s), Some(p)) if precedes(s, p) => server.next(),
        (_, Some(_)) => patched.next(),
        _ => server.next(),
    } {
        ordered.push(next);
    }
    Ok(ordered)
}

/// What tells list elements apart: their merge key, or their whole value in
/// a list without one.
fn identity<'v>(value: &'v Value, key: Option<&str>) -> Option<&'v Value> {
    match key {
        Some(key) => value.get(key),
        None => Some(value),
    }
}

/// Retains only the keys a `$retainKeys` directive lists, after checking that
/// the patch sets no other key.
fn apply_retain_keys(
    original: &mut Object,
    patch: &mut Object,
    path: &str,
) -> Result<(), MergeError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(bad_patch(
            path,
            "invalid patch format of retainKeys: $retainKeys must be a list".to_owned(),
        ));
    };
    let retained = |key: &str| retain.iter().any(|kept| kept.as_str() == Some(key));
    for (key, value) in patch.iter() {
        let exempt = value.is_null()
            || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || key.starts_with(SET_ELEMENT_ORDER);
        if !exempt && !retained(key) {
            return Err(bad_patch(
                path,
                format!("invalid patch format of retainKeys: {key:?} is patched but not retained"),
            ));
        }
    }
    original.retain(|key, _| retained(key));
    Ok(())
}

/// The field a `$deleteFromPrimitiveList/<field>` or `$setElementOrder/<field>`
/// key names, given what follows the prefix.
fn directive_target<'a>(rest: &'a str, path: &str, message: &str) -> Result<&'a str, MergeError> {
    rest.strip_prefix('/')
        .ok_or_else(|| bad_patch(path, message.to_owned()))
}

fn list_at(object: &Object, field: &str, path: &str) -> Result<Option<Vec<Value>>, MergeError> {
    match object.get(field) {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items.clone())),
        Some(other) => Err(bad_arg_type(path, "slice", other)),
    }
}

/// The JSON kinds Kubernetes tells apart in a list (Go's reflect types after
/// its JSON decoding: integers and floats differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ElemKind {
    Null,
    Bool,
    Int,
    Float,
    String,
    List,
    Object,
}

impl ElemKind {
    fn of(value: &Value) -> ElemKind {
        match value {
            Value::Null => ElemKind::Null,
            Value::Bool(_) => ElemKind::Bool,
            Value::Number(n) if n.is_i64() || n.is_u64() => ElemKind::Int,
            Value::Number(_) => ElemKind::Float,
            Value::String(_) => ElemKind::String,
            Value::Array(_) => ElemKind::List,
            Value::Object(_) => ElemKind::Object,
        }
    }

    fn go_name(self) -> &'static str {
        match self {
            ElemKind::Null => "nil",
            ElemKind::Bool => "bool",
            ElemKind::Int => "int64",
            ElemKind::Float => "float64",
            ElemKind::String => "string",
            ElemKind::List => "slice",
            ElemKind::Object => "map",
        }
    }
}

/// The one kind shared by every element of both lists; `None` if both are
/// empty.
fn element_kind(
    original: &[Value],
    patch: &[Value],
    path: &str,
) -> Result<Option<ElemKind>, MergeError> {
    let mut elements = original.iter().chain(patch);
    let Some(first) = elements.next() else {
        return Ok(None);
    };
    let kind = ElemKind::of(first);
    if kind == ElemKind::List {
        return Err(MergeError::ListOfLists { path: shown(path) });
    }
    if elements.any(|element| ElemKind::of(element) != kind) {
        return Err(cannot_merge(
            path,
            "list element types are not identical".to_owned(),
        ));
    }
    Ok(Some(kind))
}

/// What Kubernetes keeps of a patch value it stores without merging: `None`
/// for an object carrying `$patch`, otherwise the value without directive keys
/// and without null fields.
fn clean(value: Value) -> Option<Value> {
    match value {
        Value::Object(object) if object.contains_key(DIRECTIVE) => None,
        Value::Object(object) => Some(Value::Object(clean_object(object))),
        Value::Array(items) => Some(Value::Array(clean_list(items))),
        scalar => Some(scalar),
    }
}

fn clean_object(object: Object) -> Object {
    object
        .into_iter()
        .filter(|(key, value)| !is_directive_key(key) && !value.is_null())
        .filter_map(|(key, value)| clean(value).map(|value| (key, value)))
        .collect()
}

fn clean_list(items: Vec<Value>) -> Vec<Value> {
    items.into_iter().filter_map(clean).collect()
}

fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE
        || key == RETAIN_KEYS
        || key.starts_with(SET_ELEMENT_ORDER)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn shown(path: &str) -> String {
    if path.is_empty() {
        "(root)".to_owned()
    } else {
        path.to_owned()
    }
}

fn bad_patch(path: &str, message: String) -> MergeError {
    MergeError::BadPatch {
        path: shown(path),
        message,
    }
}

fn cannot_merge(path: &str, message: String) -> MergeError {
    MergeError::CannotMerge {
        path: shown(path),
        message,
    }
}

fn no_merge_key(path: &str, element: &Value, key: &str) -> MergeError {
    cannot_merge(
        path,
        format!("map: {element} does not contain declared merge key: {key}"),
    )
}

fn bad_arg_type(path: &str, expected: &str, actual: &Value) -> MergeError {
    cannot_merge(
        path,
        format!(
            "expected a {expected}, but received a {}",
            ElemKind::of(actual).go_name()
        ),
    )
}
