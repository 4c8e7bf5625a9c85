//! The Swagger 2.0 document in gnostic's protobuf encoding
//! (`openapi.v2.Document` from `github.com/google/gnostic`'s
//! `openapiv2/OpenAPIv2.proto`), which is what `/openapi/v2` answers when a
//! client asks for `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`
//! — client-go always does, for `kubectl explain --output=plaintext-openapiv2`,
//! client-side validation and apply's patch metadata.
//!
//! The encoder reads the JSON document the way gnostic's compiler reads the
//! YAML one (`openapi_v2.NewDocument`): known keys to their fields, `x-…`
//! keys to `vendor_extension` entries, maps to repeated `Named…` pairs in
//! document order, and every free-form value (`default`, `enum`, `example`,
//! extensions) to an `Any` carrying its YAML text, which is what kube-openapi
//! reads back. Proto3 scalars at their zero value are not written, as Go's
//! marshaller omits them; `oneof` members are, whatever their value.

use serde_json::{Map, Value};

/// One message being written.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn tag(&mut self, num: u32, wire: u8) {
        self.varint(u64::from(num) << 3 | u64::from(wire));
    }

    fn bytes(&mut self, num: u32, b: &[u8]) {
        self.tag(num, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, num: u32, m: Msg) {
        self.bytes(num, &m.0);
    }

    fn string(&mut self, num: u32, v: Option<&Value>) {
        if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
            self.bytes(num, s.as_bytes());
        }
    }

    /// A `repeated string`; a lone string counts as one.
    fn strings(&mut self, num: u32, v: Option<&Value>) {
        match v {
            Some(Value::Array(items)) => {
                for s in items.iter().filter_map(Value::as_str) {
                    self.bytes(num, s.as_bytes());
                }
            }
            Some(Value::String(s)) => self.bytes(num, s.as_bytes()),
            _ => {}
        }
    }

    fn boolean(&mut self, num: u32, v: Option<&Value>) {
        if v.and_then(Value::as_bool) == Some(true) {
            self.tag(num, 0);
            self.varint(1);
        }
    }

    fn double(&mut self, num: u32, v: Option<&Value>) {
        if let Some(d) = v.and_then(Value::as_f64).filter(|d| *d != 0.0) {
            self.tag(num, 1);
            self.0.extend_from_slice(&d.to_le_bytes());
        }
    }

    fn int64(&mut self, num: u32, v: Option<&Value>) {
        if let Some(i) = v.and_then(Value::as_i64).filter(|i| *i != 0) {
            self.tag(num, 0);
            // Negative int64s are ten-byte two's-complement varints.
            self.varint(i as u64);
        }
    }

    fn any(&mut self, num: u32, v: Option<&Value>) {
        if let Some(v) = v {
            self.message(num, any(v));
        }
    }

    fn anys(&mut self, num: u32, v: Option<&Value>) {
        for item in v.and_then(Value::as_array).into_iter().flatten() {
            self.message(num, any(item));
        }
    }

    /// `repeated NamedAny vendor_extension`: every `x-…` key of `o`.
    fn extensions(&mut self, num: u32, o: &Map<String, Value>) {
        for (k, v) in o.iter().filter(|(k, _)| k.starts_with("x-")) {
            self.message(num, named(k, any(v)));
        }
    }

    /// A map message (`Definitions`, `Properties`, …): its field 1 repeats
    /// `Named…{name, value}` for each key.
    fn named_map(&mut self, num: u32, v: Option<&Value>, value: fn(&Value) -> Msg) {
        if let Some(o) = v.and_then(Value::as_object) {
            let mut m = Msg::default();
            for (k, item) in o {
                m.message(1, named(k, value(item)));
            }
            self.message(num, m);
        }
    }

    fn each(&mut self, num: u32, v: Option<&Value>, value: fn(&Value) -> Msg) {
        for item in v.and_then(Value::as_array).into_iter().flatten() {
            self.message(num, value(item));
        }
    }

    fn one(&mut self, num: u32, v: Option<&Value>, value: fn(&Value) -> Msg) {
        if let Some(v) = v.filter(|v| v.is_object()) {
            self.message(num, value(v));
        }
    }
}

/// `Named…{string name = 1; … value = 2;}`.
fn named(name: &str, value: Msg) -> Msg {
    let mut m = Msg::default();
    m.bytes(1, name.as_bytes());
    m.message(2, value);
    m
}

fn obj(v: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    v.as_object().unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// `Any{yaml = 2}`: the value as YAML text (JSON is YAML).
fn any(v: &Value) -> Msg {
    let mut m = Msg::default();
    m.bytes(2, v.to_string().as_bytes());
    m
}

/// Encodes a Swagger 2.0 document (as served at `/openapi/v2` in JSON).
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let o = obj(doc);
    let mut m = Msg::default();
    m.string(1, o.get("swagger"));
    m.one(2, o.get("info"), info);
    m.string(3, o.get("host"));
    m.string(4, o.get("basePath"));
    m.strings(5, o.get("schemes"));
    m.strings(6, o.get("consumes"));
    m.strings(7, o.get("produces"));
    m.one(8, o.get("paths"), paths);
    m.named_map(9, o.get("definitions"), schema);
    m.named_map(10, o.get("parameters"), parameter);
    m.named_map(11, o.get("responses"), response);
    m.each(12, o.get("security"), security_requirement);
    m.named_map(13, o.get("securityDefinitions"), security_definition);
    m.each(14, o.get("tags"), tag);
    m.one(15, o.get("externalDocs"), external_docs);
    m.extensions(16, o);
    m.0
}

fn info(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.string(1, o.get("title"));
    m.string(2, o.get("version"));
    m.string(3, o.get("description"));
    m.string(4, o.get("termsOfService"));
    m.one(5, o.get("contact"), |v| {
        let o = obj(v);
        let mut m = Msg::default();
        m.string(1, o.get("name"));
        m.string(2, o.get("url"));
        m.string(3, o.get("email"));
        m.extensions(4, o);
        m
    });
    m.one(6, o.get("license"), |v| {
        let o = obj(v);
        let mut m = Msg::default();
        m.string(1, o.get("name"));
        m.string(2, o.get("url"));
        m.extensions(3, o);
        m
    });
    m.extensions(7, o);
    m
}

fn external_docs(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.string(1, o.get("description"));
    m.string(2, o.get("url"));
    m.extensions(3, o);
    m
}

fn tag(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.string(1, o.get("name"));
    m.string(2, o.get("description"));
    m.one(3, o.get("externalDocs"), external_docs);
    m.extensions(4, o);
    m
}

fn paths(v: &Value) -> Msg {
    let mut m = Msg::default();
    for (k, item) in obj(v) {
        if k.starts_with("x-") {
            m.message(1, named(k, any(item)));
        } else {
            m.message(2, named(k, path_item(item)));
        }
    }
    m
}

fn path_item(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.string(1, o.get("$ref"));
    for (num, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        m.one(num, o.get(method), operation);
    }
    m.each(9, o.get("parameters"), parameters_item);
    m.extensions(10, o);
    m
}

fn operation(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.strings(1, o.get("tags"));
    m.string(2, o.get("summary"));
    m.string(3, o.get("description"));
    m.one(4, o.get("externalDocs"), external_docs);
    m.string(5, o.get("operationId"));
    m.strings(6, o.get("produces"));
    m.strings(7, o.get("consumes"));
    m.each(8, o.get("parameters"), parameters_item);
    m.one(9, o.get("responses"), responses);
    m.strings(10, o.get("schemes"));
    m.boolean(11, o.get("deprecated"));
    m.each(12, o.get("security"), security_requirement);
    m.extensions(13, o);
    m
}

fn json_reference(o: &Map<String, Value>) -> Msg {
    let mut m = Msg::default();
    m.string(1, o.get("$ref"));
    m.string(2, o.get("description"));
    m
}

/// `ParametersItem`: a reference or a parameter.
fn parameters_item(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    if o.contains_key("$ref") {
        m.message(2, json_reference(o));
    } else {
        m.message(1, parameter(v));
    }
    m
}

/// `Parameter`: the body, or one of the four kinds of non-body parameter.
fn parameter(v: &Value) -> Msg {
    let o = obj(v);
    let place = o.get("in").and_then(Value::as_str).unwrap_or_default();
    let mut m = Msg::default();
    if place == "body" {
        let mut body = Msg::default();
        body.string(1, o.get("description"));
        body.string(2, o.get("name"));
        body.string(3, o.get("in"));
        body.boolean(4, o.get("required"));
        body.one(5, o.get("schema"), schema);
        body.extensions(6, o);
        m.message(1, body);
        return m;
    }
    // Query and formData sub-schemas carry `allow_empty_value = 5` and
    // number the rest from 6; header and path ones number them from 5.
    let (choice, with_allow_empty) = match place {
        "header" => (1, false),
        "formData" => (2, true),
        "path" => (4, false),
        _ => (3, true),
    };
    let mut sub = Msg::default();
    sub.boolean(1, o.get("required"));
    sub.string(2, o.get("in"));
    sub.string(3, o.get("description"));
    sub.string(4, o.get("name"));
    let base = if with_allow_empty {
        sub.boolean(5, o.get("allowEmptyValue"));
        6
    } else {
        5
    };
    primitive(&mut sub, o, base);
    sub.extensions(base + 17, o);
    let mut non_body = Msg::default();
    non_body.message(choice, sub);
    m.message(2, non_body);
    m
}

/// The run of fields every primitive-valued message shares, from `type`
/// (numbered `base`) to `multipleOf` (`base + 16`).
fn primitive(m: &mut Msg, o: &Map<String, Value>, base: u32) {
    m.string(base, o.get("type"));
    m.string(base + 1, o.get("format"));
    m.one(base + 2, o.get("items"), primitives_items);
    m.string(base + 3, o.get("collectionFormat"));
    m.any(base + 4, o.get("default"));
    m.double(base + 5, o.get("maximum"));
    m.boolean(base + 6, o.get("exclusiveMaximum"));
    m.double(base + 7, o.get("minimum"));
    m.boolean(base + 8, o.get("exclusiveMinimum"));
    m.int64(base + 9, o.get("maxLength"));
    m.int64(base + 10, o.get("minLength"));
    m.string(base + 11, o.get("pattern"));
    m.int64(base + 12, o.get("maxItems"));
    m.int64(base + 13, o.get("minItems"));
    m.boolean(base + 14, o.get("uniqueItems"));
    m.anys(base + 15, o.get("enum"));
    m.double(base + 16, o.get("multipleOf"));
}

fn primitives_items(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    primitive(&mut m, o, 1);
    m.extensions(18, o);
    m
}

fn header(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    primitive(&mut m, o, 1);
    m.string(18, o.get("description"));
    m.extensions(19, o);
    m
}

fn responses(v: &Value) -> Msg {
    let mut m = Msg::default();
    for (code, r) in obj(v) {
        if code.starts_with("x-") {
            m.message(2, named(code, any(r)));
            continue;
        }
        let mut value = Msg::default();
        match r.as_object() {
            Some(ro) if ro.contains_key("$ref") => value.message(2, json_reference(ro)),
            _ => value.message(1, response(r)),
        }
        m.message(1, named(code, value));
    }
    m
}

fn response(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.string(1, o.get("description"));
    m.one(2, o.get("schema"), |s| {
        let mut item = Msg::default();
        if s.get("type").and_then(Value::as_str) == Some("file") {
            item.message(2, file_schema(s));
        } else {
            item.message(1, schema(s));
        }
        item
    });
    m.named_map(3, o.get("headers"), header);
    if let Some(examples) = o.get("examples").and_then(Value::as_object) {
        let mut e = Msg::default();
        for (k, x) in examples {
            e.message(1, named(k, any(x)));
        }
        m.message(4, e);
    }
    m.extensions(5, o);
    m
}

fn file_schema(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.string(1, o.get("format"));
    m.string(2, o.get("title"));
    m.string(3, o.get("description"));
    m.any(4, o.get("default"));
    m.strings(5, o.get("required"));
    m.string(6, o.get("type"));
    m.boolean(7, o.get("readOnly"));
    m.one(8, o.get("externalDocs"), external_docs);
    m.any(9, o.get("example"));
    m.extensions(10, o);
    m
}

fn schema(v: &Value) -> Msg {
    let o = obj(v);
    let mut m = Msg::default();
    m.string(1, o.get("$ref"));
    m.string(2, o.get("format"));
    m.string(3, o.get("title"));
    m.string(4, o.get("description"));
    m.any(5, o.get("default"));
    m.double(6, o.get("multipleOf"));
    m.double(7, o.get("maximum"));
    m.boolean(8, o.get("exclusiveMaximum"));
    m.double(9, o.get("minimum"));
    m.boolean(10, o.get("exclusiveMinimum"));
    m.int64(11, o.get("maxLength"));
    m.int64(12, o.get("minLength"));
    m.string(13, o.get("pattern"));
    m.int64(14, o.get("maxItems"));
    m.int64(15, o.get("minItems"));
    m.boolean(16, o.get("uniqueItems"));
    m.int64(17, o.get("maxProperties"));
    m.int64(18, o.get("minProperties"));
    m.strings(19, o.get("required"));
    m.anys(20, o.get("enum"));
    match o.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            // A oneof member: written even when false.
            let mut item = Msg::default();
            item.tag(2, 0);
            item.varint(u64::from(*b));
            m.message(21, item);
        }
        Some(s @ Value::Object(_)) => {
            let mut item = Msg::default();
            item.message(1, schema(s));
            m.message(21, item);
        }
        _ => {}
    }
    if let Some(t) = o.get("type").filter(|t| t.is_string() || t.is_array()) {
        let mut item = Msg::default();
        item.strings(1, Some(t));
        m.message(22, item);
    }
    match o.get("items") {
        Some(Value::Array(items)) => {
            let mut item = Msg::default();
            for s in items {
                item.message(1, schema(s));
            }
            m.message(23, item);
        }
        Some(s @ Value::Object(_)) => {
            let mut item = Msg::default();
            item.message(1, schema(s));
            m.message(23, item);
        }
        _ => {}
    }
    m.each(24, o.get("allOf"), schema);
    m.named_map(25, o.get("properties"), schema);
    m.string(26, o.get("discriminator"));
    m.boolean(27, o.get("readOnly"));
    m.one(28, o.get("xml"), |v| {
        let o = obj(v);
        let mut m = Msg::default();
        m.string(1, o.get("name"));
        m.string(2, o.get("namespace"));
        m.string(3, o.get("prefix"));
        m.boolean(4, o.get("attribute"));
        m.boolean(5, o.get("wrapped"));
        m.extensions(6, o);
        m
    });
    m.one(29, o.get("externalDocs"), external_docs);
    m.any(30, o.get("example"));
    m.extensions(31, o);
    m
}

/// `SecurityRequirement`: scheme name → the scopes it needs.
fn security_requirement(v: &Value) -> Msg {
    let mut m = Msg::default();
    for (k, scopes) in obj(v) {
        let mut array = Msg::default();
        array.strings(1, Some(scopes));
        m.message(1, named(k, array));
    }
    m
}

/// `SecurityDefinitionsItem`, chosen by `type` (and `flow` for OAuth 2).
fn security_definition(v: &Value) -> Msg {
    let o = obj(v);
    let kind = o.get("type").and_then(Value::as_str).unwrap_or_default();
    let flow = o.get("flow").and_then(Value::as_str).unwrap_or_default();
    let mut def = Msg::default();
    def.string(1, o.get("type"));
    let choice = match kind {
        "basic" => {
            def.string(2, o.get("description"));
            def.extensions(3, o);
            1
        }
        "apiKey" => {
            def.string(2, o.get("name"));
            def.string(3, o.get("in"));
            def.string(4, o.get("description"));
            def.extensions(5, o);
            2
        }
        _ => {
            def.string(2, o.get("flow"));
            def.named_map(3, o.get("scopes"), |s| {
                // `Oauth2Scopes` holds `NamedString`s, whose value field
                // has the same wire form as a message holding the text.
                let mut m = Msg::default();
                m.0.extend_from_slice(s.as_str().unwrap_or_default().as_bytes());
                m
            });
            let (choice, urls): (u32, &[&str]) = match flow {
                "implicit" => (3, &["authorizationUrl"]),
                "password" => (4, &["tokenUrl"]),
                "application" => (5, &["tokenUrl"]),
                _ => (6, &["authorizationUrl", "tokenUrl"]),
            };
            let mut num = 4;
            for url in urls {
                def.string(num, o.get(*url));
                num += 1;
            }
            def.string(num, o.get("description"));
            def.extensions(num + 1, o);
            choice
        }
    };
    let mut m = Msg::default();
    m.message(choice, def);
    m
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A protobuf reader just large enough to check the encoding: field
    /// number → the values written for it, in order.
    fn fields(mut b: &[u8]) -> Vec<(u32, Field<'_>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let num = (key >> 3) as u32;
            let field = match key & 7 {
                0 => Field::Varint(varint(&mut b)),
                1 => {
                    let (head, rest) = b.split_at(8);
                    b = rest;
                    Field::Fixed64(f64::from_le_bytes(head.try_into().expect("8 bytes")))
                }
                2 => {
                    let len = varint(&mut b) as usize;
                    let (head, rest) = b.split_at(len);
                    b = rest;
                    Field::Bytes(head)
                }
                w => panic!("unexpected wire type {w}"),
            };
            out.push((num, field));
        }
        out
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Field<'a> {
        Varint(u64),
        Fixed64(f64),
        Bytes(&'a [u8]),
    }

    fn bytes<'a>(fs: &[(u32, Field<'a>)], num: u32) -> Vec<&'a [u8]> {
        fs.iter()
            .filter(|(n, _)| *n == num)
            .filter_map(|(_, f)| match f {
                Field::Bytes(b) => Some(*b),
                _ => None,
            })
            .collect()
    }

    fn text(b: &[u8]) -> &str {
        std::str::from_utf8(b).expect("utf-8")
    }

    /// `Named…` entries of a map message, by name.
    fn named_entries(b: &[u8]) -> Vec<(&str, &[u8])> {
        bytes(&fields(b), 1)
            .into_iter()
            .map(|entry| {
                let fs = fields(entry);
                (text(bytes(&fs, 1)[0]), bytes(&fs, 2)[0])
            })
            .collect()
    }

    #[test]
    fn a_document_decodes_back_field_by_field() {
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": {"/api/v1/pods": {"get": {
                "operationId": "listPods",
                "parameters": [
                    {"name": "limit", "in": "query", "type": "integer", "uniqueItems": true},
                    {"$ref": "#/parameters/pretty"},
                ],
                "responses": {"200": {"description": "OK",
                    "schema": {"$ref": "#/definitions/io.k8s.api.core.v1.PodList"}}},
                "x-kubernetes-action": "list",
            }}},
            "definitions": {"io.k8s.api.core.v1.Pod": {
                "type": "object",
                "required": ["spec"],
                "properties": {
                    "spec": {"$ref": "#/definitions/io.k8s.api.core.v1.PodSpec",
                             "description": "the spec"},
                    "replicas": {"type": "integer", "minimum": 1.5},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "closed": {"type": "object", "additionalProperties": false},
                },
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
            }},
        });
        let encoded = encode_document(&doc);
        let top = fields(&encoded);
        assert_eq!(text(bytes(&top, 1)[0]), "2.0");
        let info = fields(bytes(&top, 2)[0]);
        assert_eq!(text(bytes(&info, 1)[0]), "Kubernetes");

        let defs = named_entries(bytes(&top, 9)[0]);
        assert_eq!(defs.len(), 1);
        let (name, pod) = defs[0];
        assert_eq!(name, "io.k8s.api.core.v1.Pod");
        let pod = fields(pod);
        assert_eq!(text(bytes(&fields(bytes(&pod, 22)[0]), 1)[0]), "object");
        assert_eq!(text(bytes(&pod, 19)[0]), "spec");
        let ext = fields(bytes(&pod, 31)[0]);
        assert_eq!(text(bytes(&ext, 1)[0]), "x-kubernetes-group-version-kind");
        let yaml = text(bytes(&fields(bytes(&ext, 2)[0]), 2)[0]);
        let gvk: Value = serde_json::from_str(yaml).expect("the Any's yaml is the value");
        assert_eq!(gvk[0]["kind"], "Pod");

        let props: Vec<(&str, Vec<(u32, Field<'_>)>)> = named_entries(bytes(&pod, 25)[0])
            .into_iter()
            .map(|(n, b)| (n, fields(b)))
            .collect();
        let prop = |n: &str| {
            props
                .iter()
                .find(|(name, _)| *name == n)
                .map(|(_, f)| f.clone())
                .expect("property")
        };
        let spec = prop("spec");
        assert_eq!(
            text(bytes(&spec, 1)[0]),
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
        assert_eq!(text(bytes(&spec, 4)[0]), "the spec");
        assert!(prop("replicas").contains(&(9, Field::Fixed64(1.5))));
        let labels = fields(bytes(&prop("labels"), 21)[0]);
        let string_schema = fields(bytes(&labels, 1)[0]);
        assert_eq!(
            text(bytes(&fields(bytes(&string_schema, 22)[0]), 1)[0]),
            "string"
        );
        let closed = fields(bytes(&prop("closed"), 21)[0]);
        assert_eq!(closed, vec![(2, Field::Varint(0))], "false is written");

        let paths = fields(bytes(&top, 8)[0]);
        let path = fields(bytes(&paths, 2)[0]);
        assert_eq!(text(bytes(&path, 1)[0]), "/api/v1/pods");
        let get = fields(bytes(&fields(bytes(&path, 2)[0]), 2)[0]);
        assert_eq!(text(bytes(&get, 5)[0]), "listPods");
        let params = bytes(&get, 8);
        assert_eq!(params.len(), 2);
        // Parameter → NonBodyParameter → QueryParameterSubSchema (3).
        let limit = fields(bytes(&fields(params[0]), 1)[0]);
        let query = fields(bytes(&fields(bytes(&limit, 2)[0]), 3)[0]);
        assert_eq!(text(bytes(&query, 4)[0]), "limit");
        assert_eq!(text(bytes(&query, 6)[0]), "integer");
        assert!(query.contains(&(20, Field::Varint(1))), "{query:?}");
        let reference = fields(bytes(&fields(params[1]), 2)[0]);
        assert_eq!(text(bytes(&reference, 1)[0]), "#/parameters/pretty");
        let responses = fields(bytes(&get, 9)[0]);
        let ok = fields(bytes(&responses, 1)[0]);
        assert_eq!(text(bytes(&ok, 1)[0]), "200");
        let response = fields(bytes(&fields(bytes(&ok, 2)[0]), 1)[0]);
        assert_eq!(text(bytes(&response, 1)[0]), "OK");
        let action = fields(bytes(&get, 13)[0]);
        assert_eq!(text(bytes(&action, 1)[0]), "x-kubernetes-action");
    }
}
