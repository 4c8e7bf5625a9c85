//! `meta.k8s.io` `Table` responses: what the apiserver sends when a client
//! (kubectl) asks for `application/json;as=Table;v=v1;g=meta.k8s.io`.
//!
//! Built-in kinds get the columns and cells of the apiserver's printers
//! (`pkg/printers/internalversion/printers.go`, always generated "wide": the
//! priority-1 columns are sent and kubectl hides them unless `-o wide`).
//! Custom resources get a Name column plus their CRD's
//! `additionalPrinterColumns`, evaluated as the CRD table convertor does;
//! `type: date` cells are already humanized by the server ("5m"). Any other
//! kind gets the default convertor's `Name` and `Created At` (RFC 3339).
//!
//! Ages are computed from the `now` passed in, never from a clock.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use super::jsonpath::{self, JsonPath};
use super::selector::{self, LabelSelector};

/// The `meta.k8s.io` version of the Table (or PartialObjectMetadata) asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableVersion {
    /// `meta.k8s.io/v1`
    V1,
    /// `meta.k8s.io/v1beta1`
    V1Beta1,
}

impl TableVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// What an `Accept` header asks the server to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The object or list itself, as JSON.
    Object,
    /// A `Table`.
    Table(TableVersion),
    /// `PartialObjectMetadata` (`list` for `PartialObjectMetadataList`), as
    /// kube-rs' metadata API asks for.
    PartialObjectMetadata {
        /// Its `meta.k8s.io` version.
        version: TableVersion,
        /// `PartialObjectMetadataList` rather than `PartialObjectMetadata`.
        list: bool,
    },
}

/// Negotiates the response like the apiserver (`NegotiateMediaTypeOptions`):
/// clauses by preference (`q`, then specific before wildcard, then order),
/// the first one this JSON-only server can satisfy wins. `None` means no
/// clause is acceptable (406 Not Acceptable); no header means the object.
pub fn negotiate(accept: Option<&str>) -> Option<Representation> {
    let header = accept.map(str::trim).unwrap_or("");
    if header.is_empty() {
        return Some(Representation::Object);
    }
    let mut clauses: Vec<AcceptClause<'_>> =
        header.split(',').filter_map(AcceptClause::parse).collect();
    clauses.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then((a.kind == "*").cmp(&(b.kind == "*")))
            .then((a.sub_kind == "*").cmp(&(b.sub_kind == "*")))
    });
    clauses.iter().find_map(AcceptClause::representation)
}

/// The Table version kubectl's `Accept` header asks for, if any.
pub fn wants_table(accept: Option<&str>) -> Option<TableVersion> {
    match negotiate(accept) {
        Some(Representation::Table(v)) => Some(v),
        _ => None,
    }
}

struct AcceptClause<'a> {
    kind: &'a str,
    sub_kind: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> AcceptClause<'a> {
    fn parse(clause: &'a str) -> Option<AcceptClause<'a>> {
        let mut parts = clause.split(';');
        let media = parts.next()?.trim();
        let (kind, sub_kind) = media.split_once('/').unwrap_or((media, "*"));
        if kind.is_empty() {
            return None;
        }
        let mut q = 1.0;
        let mut params = Vec::new();
        for param in parts {
            let (k, v) = param.split_once('=').unwrap_or((param, ""));
            let (k, v) = (k.trim(), v.trim());
            if k == "q" {
                q = v.parse().unwrap_or(0.0);
            } else {
                params.push((k, v));
            }
        }
        Some(AcceptClause {
            kind: kind.trim(),
            sub_kind: sub_kind.trim(),
            q,
            params,
        })
    }

    fn representation(&self) -> Option<Representation> {
        let json = matches!(
            (self.kind, self.sub_kind),
            ("application", "json") | ("application", "*") | ("*", "*")
        );
        if !json {
            return None;
        }
        let param = |name: &str| {
            self.params
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
        };
        let (group, version, kind) = (param("g"), param("v"), param("as"));
        if group.is_none() && version.is_none() && kind.is_none() {
            return Some(Representation::Object);
        }
        if group != Some("meta.k8s.io") {
            return None;
        }
        let version = match version {
            Some("v1") => TableVersion::V1,
            Some("v1beta1") => TableVersion::V1Beta1,
            _ => return None,
        };
        match kind {
            Some("Table") => Some(Representation::Table(version)),
            Some("PartialObjectMetadata") => Some(Representation::PartialObjectMetadata {
                version,
                list: false,
            }),
            Some("PartialObjectMetadataList") => Some(Representation::PartialObjectMetadata {
                version,
                list: true,
            }),
            _ => None,
        }
    }
}

/// `?includeObject=`: what each row carries in `object`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `null`.
    None,
    /// A `PartialObjectMetadata` with the object's metadata (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Reads the query parameter; the error is the apiserver's 400 message.
    pub fn from_query(value: Option<&str>) -> Result<IncludeObject, String> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(format!(
                "unrecognized includeObject value: {}",
                selector::go_quote(other)
            )),
        }
    }
}

/// One CRD `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI format (`name`, `int32` …), may be empty.
    pub format: String,
    /// May be empty; the server then describes the JSON path.
    pub description: String,
    /// 0 shown always, higher only with `-o wide`.
    pub priority: i64,
    /// JSONPath relative to the object (`.spec.replicas`).
    pub json_path: String,
}

impl PrinterColumn {
    /// Reads a column from CRD JSON (`jsonPath`, `type`, …).
    pub fn from_crd(column: &Value) -> Option<PrinterColumn> {
        let s = |k: &str| {
            column
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        Some(PrinterColumn {
            name: column.get("name")?.as_str()?.to_owned(),
            type_: s("type"),
            format: s("format"),
            description: s("description"),
            priority: column.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: column.get("jsonPath")?.as_str()?.to_owned(),
        })
    }

    /// The columns a CRD declares for one served version (empty when it
    /// declares none: [`to_table`] then adds the default Age column).
    pub fn for_crd_version(crd: &Value, version: &str) -> Vec<PrinterColumn> {
        let per_version = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
            .and_then(|v| v.get("additionalPrinterColumns"));
        per_version
            .or_else(|| crd.pointer("/spec/additionalPrinterColumns"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(PrinterColumn::from_crd)
            .collect()
    }
}

/// The list's `metadata` to copy into the Table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListMeta {
    /// `resourceVersion` (of the list, or of the object for a single get).
    pub resource_version: Option<String>,
    /// `continue` token.
    pub continue_token: Option<String>,
    /// `remainingItemCount`.
    pub remaining_item_count: Option<i64>,
}

/// How to build the Table.
#[derive(Debug, Clone, Copy)]
pub struct TableOptions {
    /// `meta.k8s.io` version to answer in.
    pub version: TableVersion,
    /// What each row's `object` holds.
    pub include_object: IncludeObject,
    /// Leave out `columnDefinitions` (watch events after the first).
    pub no_headers: bool,
    /// The instant ages are measured from.
    pub now: Timestamp,
}

/// Builds the Table for `objects` of `kind`. `columns` is `Some` for a
/// custom resource (its CRD's printer columns, possibly empty) and `None`
/// for built-in kinds.
pub fn to_table(
    kind: &str,
    objects: &[Value],
    columns: Option<&[PrinterColumn]>,
    options: &TableOptions,
    list_meta: &ListMeta,
) -> Value {
    let now = options.now;
    let (definitions, rows): (Vec<Value>, Value) = match columns {
        Some(columns) => custom_resource_table(columns, objects, options),
        None => match printer_for(kind) {
            Some(printer) => {
                let rows = objects
                    .iter()
                    .map(|o| {
                        let (cells, conditions) = (printer.cells)(o, now);
                        row(cells, conditions, o, options)
                    })
                    .collect();
                (
                    printer.columns.iter().map(Column::definition).collect(),
                    Value::Array(rows),
                )
            }
            None => default_table(objects, options),
        },
    };

    let mut metadata = Map::new();
    if let Some(rv) = list_meta
        .resource_version
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        metadata.insert("resourceVersion".into(), rv.into());
    }
    if let Some(c) = list_meta
        .continue_token
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        metadata.insert("continue".into(), c.into());
    }
    if let Some(n) = list_meta.remaining_item_count {
        metadata.insert("remainingItemCount".into(), n.into());
    }
    json!({
        "kind": "Table",
        "apiVersion": options.version.api_version(),
        "metadata": metadata,
        "columnDefinitions": if options.no_headers { Value::Null } else { Value::Array(definitions) },
        "rows": rows,
    })
}

fn row(cells: Vec<Value>, conditions: Option<Value>, obj: &Value, options: &TableOptions) -> Value {
    let object = match options.include_object {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => obj.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": options.version.api_version(),
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    };
    let mut r = json!({"cells": cells, "object": object});
    if let (Some(c), Some(map)) = (conditions, r.as_object_mut()) {
        map.insert("conditions".into(), c);
    }
    r
}

/// The default table convertor: Name and Created At, `rows: null` when empty.
fn default_table(objects: &[Value], options: &TableOptions) -> (Vec<Value>, Value) {
    let columns = [
        Column::new("Name", "string", NAME_DESC).format("name"),
        Column::new("Created At", "date", AGE_DESC),
    ];
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let created = timestamp_at(o, "/metadata/creationTimestamp")
                .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_else(|| "0001-01-01T00:00:00Z".to_owned());
            row(vec![name(o).into(), created.into()], None, o, options)
        })
        .collect();
    let rows = if rows.is_empty() {
        Value::Null
    } else {
        Value::Array(rows)
    };
    (columns.iter().map(Column::definition).collect(), rows)
}

/// The CRD table convertor: Name, then each printer column (a default Age
/// column when the CRD declares none). A column whose path does not parse
/// ends the list, as the apiserver falls back to the columns before it.
fn custom_resource_table(
    columns: &[PrinterColumn],
    objects: &[Value],
    options: &TableOptions,
) -> (Vec<Value>, Value) {
    let default_age = [PrinterColumn {
        name: "Age".to_owned(),
        type_: "date".to_owned(),
        format: String::new(),
        description: AGE_DESC.to_owned(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".to_owned(),
    }];
    let columns = if columns.is_empty() {
        &default_age[..]
    } else {
        columns
    };
    let mut definitions = vec![
        Column::new("Name", "string", NAME_DESC)
            .format("name")
            .definition(),
    ];
    let mut parsed = Vec::new();
    for column in columns {
        let Ok(path) = JsonPath::parse(&column.json_path) else {
            break;
        };
        let description = if column.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                column.json_path
            )
        } else {
            column.description.clone()
        };
        definitions.push(json!({
            "name": column.name,
            "type": column.type_,
            "format": column.format,
            "description": description,
            "priority": column.priority,
        }));
        parsed.push((path, column.type_.as_str()));
    }
    let rows = objects
        .iter()
        .map(|o| {
            let mut cells = vec![Value::from(name(o))];
            for (path, type_) in &parsed {
                let cell = match path.eval(o) {
                    Ok(values) => values
                        .first()
                        .map_or(Value::Null, |v| crd_cell(type_, v, options.now)),
                    Err(_) => Value::Null,
                };
                cells.push(cell);
            }
            row(cells, None, o, options)
        })
        .collect();
    (definitions, Value::Array(rows))
}

/// `cellForJSONValue`, with `string` columns printed like `kubectl get -o
/// jsonpath` would (numbers as text, objects as JSON, `null` as
/// `<no value>`).
fn crd_cell(type_: &str, value: &Value, now: Timestamp) -> Value {
    if type_ == "string" {
        return jsonpath::print_value(value).into();
    }
    match (type_, value) {
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => i.into(),
            // Go truncates the float64 toward zero.
            None => (n.as_f64().unwrap_or(0.0) as i64).into(),
        },
        ("number", Value::Number(n)) => go_float(n.as_f64().unwrap_or(0.0)),
        ("boolean", Value::Bool(b)) => (*b).into(),
        ("date", Value::String(s)) => {
            if s.is_empty() || s == "null" {
                return "<unknown>".into();
            }
            match s.parse::<Timestamp>() {
                Ok(t) => human_duration(now.duration_since(t)).into(),
                Err(_) => "<invalid>".into(),
            }
        }
        _ => Value::Null,
    }
}

/// A float64 cell as Go's JSON encoder writes it: `3`, not `3.0`.
fn go_float(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::from(f as i64)
    } else {
        Value::from(f)
    }
}

/// `duration.HumanDuration`: "45s", "2m30s", "10m", "3h", "5h20m", "2d5h",
/// "12d", "2y45d", "9y"; "0s" up to a second in the future, "<invalid>"
/// beyond.
pub fn human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `translateTimestampSince`: the age of a timestamp, `<unknown>` if unset.
pub fn age(timestamp: Option<Timestamp>, now: Timestamp) -> String {
    match timestamp {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// Built-in printers

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DESC: &str = "Names of each container in the template.";
const IMAGES_DESC: &str = "Images referenced by each container in the template.";
// The printers take the remaining descriptions from the API types' field
// documentation; these are its first sentences.
const SELECTOR_DESC: &str = "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.";

#[derive(Clone, Copy)]
struct Column {
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i64,
}

impl Column {
    const fn new(name: &'static str, type_: &'static str, description: &'static str) -> Column {
        Column {
            name,
            type_,
            format: "",
            description,
            priority: 0,
        }
    }

    const fn format(mut self, format: &'static str) -> Column {
        self.format = format;
        self
    }

    const fn wide(mut self) -> Column {
        self.priority = 1;
        self
    }

    fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

const NAME: Column = Column::new("Name", "string", NAME_DESC).format("name");
const AGE: Column = Column::new("Age", "string", AGE_DESC);
const CONTAINERS: Column = Column::new("Containers", "string", CONTAINERS_DESC).wide();
const IMAGES: Column = Column::new("Images", "string", IMAGES_DESC).wide();

type Cells = fn(&Value, Timestamp) -> (Vec<Value>, Option<Value>);

struct Printer {
    columns: &'static [Column],
    cells: Cells,
}

fn printer_for(kind: &str) -> Option<Printer> {
    let (columns, cells): (&'static [Column], Cells) = match kind {
        "Pod" => (POD_COLUMNS, pod_cells),
        "Deployment" => (DEPLOYMENT_COLUMNS, deployment_cells),
        "ReplicaSet" => (REPLICA_SET_COLUMNS, replica_set_cells),
        "StatefulSet" => (STATEFUL_SET_COLUMNS, stateful_set_cells),
        "DaemonSet" => (DAEMON_SET_COLUMNS, daemon_set_cells),
        "ReplicationController" => (REPLICATION_CONTROLLER_COLUMNS, replication_controller_cells),
        "Job" => (JOB_COLUMNS, job_cells),
        "CronJob" => (CRON_JOB_COLUMNS, cron_job_cells),
        "Service" => (SERVICE_COLUMNS, service_cells),
        "Namespace" => (NAMESPACE_COLUMNS, namespace_cells),
        "Node" => (NODE_COLUMNS, node_cells),
        "Event" => (EVENT_COLUMNS, event_cells),
        "ConfigMap" => (CONFIG_MAP_COLUMNS, config_map_cells),
        "Secret" => (SECRET_COLUMNS, secret_cells),
        "ServiceAccount" => (SERVICE_ACCOUNT_COLUMNS, service_account_cells),
        "Lease" => (LEASE_COLUMNS, lease_cells),
        "NetworkPolicy" => (NETWORK_POLICY_COLUMNS, network_policy_cells),
        "PodDisruptionBudget" => (POD_DISRUPTION_BUDGET_COLUMNS, pod_disruption_budget_cells),
        "RoleBinding" => (ROLE_BINDING_COLUMNS, role_binding_cells),
        "ClusterRoleBinding" => (CLUSTER_ROLE_BINDING_COLUMNS, role_binding_cells),
        "PersistentVolumeClaim" => (PVC_COLUMNS, pvc_cells),
        "PersistentVolume" => (PV_COLUMNS, pv_cells),
        "Ingress" => (INGRESS_COLUMNS, ingress_cells),
        "StorageClass" => (STORAGE_CLASS_COLUMNS, storage_class_cells),
        "ComponentStatus" => (COMPONENT_STATUS_COLUMNS, component_status_cells),
        "CertificateSigningRequest" => (CSR_COLUMNS, csr_cells),
        "APIService" => (API_SERVICE_COLUMNS, api_service_cells),
        _ => return None,
    };
    Some(Printer { columns, cells })
}

// -- JSON helpers

fn str_at<'v>(obj: &'v Value, pointer: &str) -> &'v str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn array_at<'v>(obj: &'v Value, pointer: &str) -> &'v [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn len_at(obj: &Value, pointer: &str) -> i64 {
    let n = match obj.pointer(pointer) {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(m)) => m.len(),
        _ => 0,
    };
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn timestamp_at(obj: &Value, pointer: &str) -> Option<Timestamp> {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

fn name(obj: &Value) -> &str {
    str_at(obj, "/metadata/name")
}

fn created(obj: &Value, now: Timestamp) -> Value {
    age(timestamp_at(obj, "/metadata/creationTimestamp"), now).into()
}

/// Replica counts the apiserver defaults to 1 when unset.
fn replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_owned()
    } else {
        s.to_owned()
    }
}

/// `layoutContainerCells`: names and images, comma-separated.
fn containers(pod_spec: Option<&Value>) -> (Value, Value) {
    let containers = pod_spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, "/image")).collect();
    (names.join(",").into(), images.join(",").into())
}

fn condition<'v>(obj: &'v Value, type_: &str) -> Option<&'v Value> {
    array_at(obj, "/status/conditions")
        .iter()
        .find(|c| str_at(c, "/type") == type_)
}

fn condition_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|c| str_at(c, "/status") == "True")
}

// -- Pod

const POD_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Ready",
        "string",
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    Column::new(
        "Status",
        "string",
        "The aggregate status of the containers in this pod.",
    ),
    Column::new(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    Column::new(
        "IP",
        "string",
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    )
    .wide(),
    Column::new(
        "Node",
        "string",
        "NodeName indicates in which node this pod is scheduled.",
    )
    .wide(),
    Column::new(
        "Nominated Node",
        "string",
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
    )
    .wide(),
    Column::new(
        "Readiness Gates",
        "string",
        "If specified, all readiness gates will be evaluated for pod readiness.",
    )
    .wide(),
];

/// The Ready, Status and Restarts cells of a pod, as `printPod` computes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSummary {
    /// Ready containers (regular, plus started sidecars).
    pub ready: i64,
    /// Regular containers plus restartable init containers (sidecars).
    pub total: i64,
    /// The Status column: `Running`, `ContainerCreating`, `CrashLoopBackOff`,
    /// `Init:0/2`, `Completed`, `Terminating` …
    pub status: String,
    /// The Restarts column: `0` or `3 (5m ago)`.
    pub restarts: String,
}

/// Computes what `kubectl get pods` shows for a pod.
pub fn pod_summary(pod: &Value, now: Timestamp) -> PodSummary {
    let phase = str_at(pod, "/status/phase");
    let mut reason = pod_reason(pod, phase);
    let mut tally = ContainerTally::default();
    let init_reason = tally.init_containers(pod);
    let initializing = init_reason.is_some();
    if let Some(r) = init_reason {
        reason = r;
    }
    if !initializing || condition_true(pod, "Initialized") {
        tally.containers(pod, &mut reason);
    }
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    if deleting && str_at(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".to_owned();
    } else if deleting && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".to_owned();
    }
    let restarts = tally.restarts;
    let restarts_text = match tally.last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", age(Some(t), now)),
        _ => restarts.to_string(),
    };
    PodSummary {
        ready: tally.ready,
        total: pod_total(pod),
        status: reason,
        restarts: restarts_text,
    }
}

/// The Status column before the containers are looked at: the pod's
/// reason or phase, `SchedulingGated` while a scheduling gate holds it.
fn pod_reason(pod: &Value, phase: &str) -> String {
    let mut reason = match str_at(pod, "/status/reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    for c in array_at(pod, "/status/conditions") {
        if str_at(c, "/type") == "PodScheduled" && str_at(c, "/reason") == "SchedulingGated" {
            reason = "SchedulingGated".to_owned();
        }
    }
    reason
}

/// Regular containers plus restartable init containers (sidecars).
fn pod_total(pod: &Value) -> i64 {
    let init_specs = array_at(pod, "/spec/initContainers");
    i64::try_from(array_at(pod, "/spec/containers").len()).unwrap_or(0)
        + i64::try_from(
            init_specs
                .iter()
                .filter(|c| str_at(c, "/restartPolicy") == "Always")
                .count(),
        )
        .unwrap_or(0)
}

/// What the container statuses of a pod add up to, as kubectl's printer
/// counts them.
#[derive(Debug, Default)]
struct ContainerTally {
    /// Ready containers.
    ready: i64,
    /// Restarts counted so far.
    restarts: i64,
    /// Restarts of sidecars alone.
    sidecar_restarts: i64,
    /// When a counted container last ended.
    last_restart: Option<Timestamp>,
    /// When a sidecar last ended.
    last_sidecar_restart: Option<Timestamp>,
}

/// The later of two times, either when one is unset.
fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// When a container's last run ended, if it had one.
fn last_finished(c: &Value) -> Option<Timestamp> {
    if c.pointer("/lastState/terminated")
        .is_some_and(Value::is_object)
    {
        timestamp_at(c, "/lastState/terminated/finishedAt")
    } else {
        None
    }
}

impl ContainerTally {
    /// Counts the init containers up to the first one still initializing
    /// the pod, and gives the Status it shows (`Init:0/2`, `Init:Error` …),
    /// or `None` when none is.
    fn init_containers(&mut self, pod: &Value) -> Option<String> {
        let init_specs = array_at(pod, "/spec/initContainers");
        let restartable = |name: &str| {
            init_specs
                .iter()
                .any(|c| str_at(c, "/name") == name && str_at(c, "/restartPolicy") == "Always")
        };
        let init_statuses = array_at(pod, "/status/initContainerStatuses");
        for (i, c) in init_statuses.iter().enumerate() {
            let count = int_at(c, "/restartCount");
            self.restarts += count;
            self.last_restart = later(self.last_restart, last_finished(c));
            let is_sidecar = restartable(str_at(c, "/name"));
            if is_sidecar {
                self.sidecar_restarts += count;
                self.last_sidecar_restart = later(self.last_sidecar_restart, last_finished(c));
            }
            let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
            let waiting_reason = str_at(c, "/state/waiting/reason");
            if terminated.is_some_and(|t| int_at(t, "/exitCode") == 0) {
                continue;
            }
            if is_sidecar && c.get("started").and_then(Value::as_bool) == Some(true) {
                if c.get("ready").and_then(Value::as_bool) == Some(true) {
                    self.ready += 1;
                }
                continue;
            }
            return Some(if let Some(t) = terminated {
                let r = str_at(t, "/reason");
                if !r.is_empty() {
                    format!("Init:{r}")
                } else if int_at(t, "/signal") != 0 {
                    format!("Init:Signal:{}", int_at(t, "/signal"))
                } else {
                    format!("Init:ExitCode:{}", int_at(t, "/exitCode"))
                }
            } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
                format!("Init:{waiting_reason}")
            } else {
                format!("Init:{i}/{}", init_specs.len())
            });
        }
        None
    }

    /// Counts the regular containers (restarts start again from the
    /// sidecars'), setting `reason` from the last that waits or ended.
    fn containers(&mut self, pod: &Value, reason: &mut String) {
        self.restarts = self.sidecar_restarts;
        self.last_restart = self.last_sidecar_restart;
        let mut has_running = false;
        for c in array_at(pod, "/status/containerStatuses").iter().rev() {
            self.restarts += int_at(c, "/restartCount");
            self.last_restart = later(self.last_restart, last_finished(c));
            let waiting_reason = str_at(c, "/state/waiting/reason");
            let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
            if !waiting_reason.is_empty() {
                *reason = waiting_reason.to_owned();
            } else if let Some(t) = terminated {
                let r = str_at(t, "/reason");
                *reason = if !r.is_empty() {
                    r.to_owned()
                } else if int_at(t, "/signal") != 0 {
                    format!("Signal:{}", int_at(t, "/signal"))
                } else {
                    format!("ExitCode:{}", int_at(t, "/exitCode"))
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some_and(Value::is_object)
            {
                has_running = true;
                self.ready += 1;
            }
        }
        if *reason == "Completed" && has_running {
            *reason = if condition_true(pod, "Ready") {
                "Running".to_owned()
            } else {
                "NotReady".to_owned()
            };
        }
    }
}

fn pod_cells(pod: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let summary = pod_summary(pod, now);
    let conditions = match str_at(pod, "/status/phase") {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };
    let gates = array_at(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let passing = gates
            .iter()
            .filter(|g| condition_true(pod, str_at(g, "/conditionType")))
            .count();
        format!("{passing}/{}", gates.len())
    };
    let cells = vec![
        name(pod).into(),
        format!("{}/{}", summary.ready, summary.total).into(),
        summary.status.into(),
        summary.restarts.into(),
        created(pod, now),
        or_none(selector::pod_ip(pod)).into(),
        or_none(str_at(pod, "/spec/nodeName")).into(),
        or_none(str_at(pod, "/status/nominatedNodeName")).into(),
        readiness_gates.into(),
    ];
    (cells, conditions)
}

// -- Workloads

const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Ready", "string", "Number of the pod with ready state"),
    Column::new(
        "Up-to-date",
        "string",
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
    ),
    Column::new(
        "Available",
        "string",
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::new("Selector", "string", SELECTOR_DESC).wide(),
];

fn deployment_cells(d: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let (names, images) = containers(d.pointer("/spec/template/spec"));
    let selector =
        match LabelSelector::from_k8s(d.pointer("/spec/selector").unwrap_or(&Value::Null)) {
            Ok(s) => s.to_string(),
            Err(_) => "<invalid>".to_owned(),
        };
    let cells = vec![
        name(d).into(),
        format!("{}/{}", int_at(d, "/status/readyReplicas"), replicas(d)).into(),
        int_at(d, "/status/updatedReplicas").into(),
        int_at(d, "/status/availableReplicas").into(),
        created(d, now),
        names,
        images,
        selector.into(),
    ];
    (cells, None)
}

const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "Replicas is the number of desired replicas.",
    ),
    Column::new(
        "Current",
        "integer",
        "Replicas is the most recently observed number of replicas.",
    ),
    Column::new(
        "Ready",
        "integer",
        "The number of ready replicas for this replica set.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::new(
        "Selector",
        "string",
        "Selector is a label query over pods that should match the replica count.",
    )
    .wide(),
];

fn replica_set_cells(rs: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let (names, images) = containers(rs.pointer("/spec/template/spec"));
    let cells = vec![
        name(rs).into(),
        replicas(rs).into(),
        int_at(rs, "/status/replicas").into(),
        int_at(rs, "/status/readyReplicas").into(),
        created(rs, now),
        names,
        images,
        selector::format_label_selector(rs.pointer("/spec/selector").unwrap_or(&Value::Null))
            .into(),
    ];
    (cells, None)
}

const STATEFUL_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Ready", "string", "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

fn stateful_set_cells(s: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let (names, images) = containers(s.pointer("/spec/template/spec"));
    let cells = vec![
        name(s).into(),
        format!("{}/{}", int_at(s, "/status/readyReplicas"), replicas(s)).into(),
        created(s, now),
        names,
        images,
    ];
    (cells, None)
}

const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
    ),
    Column::new(
        "Current",
        "integer",
        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
    ),
    Column::new(
        "Ready",
        "integer",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    ),
    Column::new(
        "Up-to-date",
        "integer",
        "The total number of nodes that are running updated daemon pod",
    ),
    Column::new(
        "Available",
        "integer",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
    ),
    Column::new(
        "Node Selector",
        "string",
        "NodeSelector is a selector which must be true for the pod to fit on a node.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::new(
        "Selector",
        "string",
        "A label query over pods that are managed by the daemon set.",
    )
    .wide(),
];

fn daemon_set_cells(ds: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let (names, images) = containers(ds.pointer("/spec/template/spec"));
    let cells = vec![
        name(ds).into(),
        int_at(ds, "/status/desiredNumberScheduled").into(),
        int_at(ds, "/status/currentNumberScheduled").into(),
        int_at(ds, "/status/numberReady").into(),
        int_at(ds, "/status/updatedNumberScheduled").into(),
        int_at(ds, "/status/numberAvailable").into(),
        selector::format_labels(
            ds.pointer("/spec/template/spec/nodeSelector")
                .unwrap_or(&Value::Null),
        )
        .into(),
        created(ds, now),
        names,
        images,
        selector::format_label_selector(ds.pointer("/spec/selector").unwrap_or(&Value::Null))
            .into(),
    ];
    (cells, None)
}

const REPLICATION_CONTROLLER_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "Replicas is the number of desired replicas.",
    ),
    Column::new(
        "Current",
        "integer",
        "Replicas is the most recently observed number of replicas.",
    ),
    Column::new(
        "Ready",
        "integer",
        "The number of ready replicas for this replication controller.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::new(
        "Selector",
        "string",
        "Selector is a label query over pods that should match the Replicas count.",
    )
    .wide(),
];

fn replication_controller_cells(rc: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let (names, images) = containers(rc.pointer("/spec/template/spec"));
    let cells = vec![
        name(rc).into(),
        replicas(rc).into(),
        int_at(rc, "/status/replicas").into(),
        int_at(rc, "/status/readyReplicas").into(),
        created(rc, now),
        names,
        images,
        selector::format_labels(rc.pointer("/spec/selector").unwrap_or(&Value::Null)).into(),
    ];
    (cells, None)
}

const JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "Status of the job."),
    Column::new(
        "Completions",
        "string",
        "The number of pods which reached phase Succeeded.",
    ),
    Column::new("Duration", "string", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::new(
        "Selector",
        "string",
        "A label query over pods that should match the pod count.",
    )
    .wide(),
];

/// `hasJobCondition`: the first condition of that type decides.
fn job_condition(job: &Value, type_: &str) -> bool {
    condition_true(job, type_)
}

fn job_cells(job: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let succeeded = int_at(job, "/status/succeeded");
    let completions = match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = int_at(job, "/spec/parallelism");
            if parallelism > 1 {
                format!("{succeeded}/1 of {parallelism}")
            } else {
                format!("{succeeded}/1")
            }
        }
    };
    let duration = match (
        timestamp_at(job, "/status/startTime"),
        timestamp_at(job, "/status/completionTime"),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now.duration_since(start)),
        (Some(start), Some(end)) => human_duration(end.duration_since(start)),
    };
    let deleting = job
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    let status = if job_condition(job, "Complete") {
        "Complete"
    } else if job_condition(job, "Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if job_condition(job, "Suspended") {
        "Suspended"
    } else if job_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = containers(job.pointer("/spec/template/spec"));
    let cells = vec![
        name(job).into(),
        status.into(),
        completions.into(),
        duration.into(),
        created(job, now),
        names,
        images,
        selector::format_label_selector(job.pointer("/spec/selector").unwrap_or(&Value::Null))
            .into(),
    ];
    (cells, None)
}

const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Schedule",
        "string",
        "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
    ),
    Column::new(
        "Timezone",
        "string",
        "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
    ),
    Column::new(
        "Suspend",
        "boolean",
        "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.",
    ),
    Column::new(
        "Active",
        "integer",
        "A list of pointers to currently running jobs.",
    ),
    Column::new(
        "Last Schedule",
        "string",
        "Information when was the last time the job was successfully scheduled.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::new(
        "Selector",
        "string",
        "A label query over pods that should match the pod count.",
    )
    .wide(),
];

fn cron_job_cells(cj: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let last = match timestamp_at(cj, "/status/lastScheduleTime") {
        Some(t) => age(Some(t), now),
        None => "<none>".to_owned(),
    };
    let suspend = match cj.pointer("/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let (names, images) = containers(cj.pointer("/spec/jobTemplate/spec/template/spec"));
    let cells = vec![
        name(cj).into(),
        str_at(cj, "/spec/schedule").into(),
        or_none(str_at(cj, "/spec/timeZone")).into(),
        suspend.into(),
        len_at(cj, "/status/active").into(),
        last.into(),
        created(cj, now),
        names,
        images,
        selector::format_label_selector(
            cj.pointer("/spec/jobTemplate/spec/selector")
                .unwrap_or(&Value::Null),
        )
        .into(),
    ];
    (cells, None)
}

// -- Service, Namespace, Node, Event

const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Type",
        "string",
        "type determines how the Service is exposed. Defaults to ClusterIP.",
    ),
    Column::new(
        "Cluster-IP",
        "string",
        "clusterIP is the IP address of the service and is usually assigned randomly.",
    ),
    Column::new(
        "External-IP",
        "string",
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
    ),
    Column::new(
        "Port(s)",
        "string",
        "The list of ports that are exposed by this service.",
    ),
    AGE,
    Column::new(
        "Selector",
        "string",
        "Route service traffic to pods with label keys and values matching this selector.",
    )
    .wide(),
];

fn service_cells(svc: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let type_ = match str_at(svc, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = svc
        .pointer("/spec/clusterIPs/0")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            Some(str_at(svc, "/spec/clusterIP"))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "<none>".to_owned());
    let external_ips: Vec<&str> = array_at(svc, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external = match type_ {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_owned()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = array_at(svc, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| match (str_at(i, "/ip"), str_at(i, "/hostname")) {
                    ("", "") => None,
                    ("", host) => Some(host),
                    (ip, _) => Some(ip),
                })
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            let mut all: Vec<&str> = ingress;
            all.extend(external_ips.iter());
            if all.is_empty() {
                "<pending>".to_owned()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => str_at(svc, "/spec/externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    };
    let ports: Vec<String> = array_at(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = match str_at(p, "/protocol") {
                "" => "TCP",
                proto => proto,
            };
            let port = int_at(p, "/port");
            match int_at(p, "/nodePort") {
                0 => format!("{port}/{protocol}"),
                node_port => format!("{port}:{node_port}/{protocol}"),
            }
        })
        .collect();
    let cells = vec![
        name(svc).into(),
        type_.into(),
        cluster_ip.into(),
        external.into(),
        or_none(&ports.join(",")).into(),
        created(svc, now),
        selector::format_labels(svc.pointer("/spec/selector").unwrap_or(&Value::Null)).into(),
    ];
    (cells, None)
}

const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "The status of the namespace"),
    AGE,
];

fn namespace_cells(ns: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let cells = vec![
        name(ns).into(),
        str_at(ns, "/status/phase").into(),
        created(ns, now),
    ];
    (cells, None)
}

const NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "The status of the node"),
    Column::new("Roles", "string", "The roles of the node"),
    AGE,
    Column::new("Version", "string", "Kubelet Version reported by the node."),
    Column::new(
        "Internal-IP",
        "string",
        "List of addresses reachable to the node.",
    )
    .wide(),
    Column::new(
        "External-IP",
        "string",
        "List of addresses reachable to the node.",
    )
    .wide(),
    Column::new(
        "OS-Image",
        "string",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    )
    .wide(),
    Column::new(
        "Kernel-Version",
        "string",
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    )
    .wide(),
    Column::new(
        "Container-Runtime",
        "string",
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    )
    .wide(),
];

fn node_cells(node: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    // The last Ready condition wins, as in the printer's condition map.
    let ready = array_at(node, "/status/conditions")
        .iter()
        .rev()
        .find(|c| str_at(c, "/type") == "Ready");
    let mut status = vec![match ready {
        Some(c) if str_at(c, "/status") == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<&str> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                (!role.is_empty()).then_some(role)
            } else if k == "kubernetes.io/role" {
                v.as_str().filter(|v| !v.is_empty())
            } else {
                None
            }
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let address = |type_: &str| {
        array_at(node, "/status/addresses")
            .iter()
            .find(|a| str_at(a, "/type") == type_)
            .map(|a| str_at(a, "/address").to_owned())
            .unwrap_or_else(|| "<none>".to_owned())
    };
    let unknown = |p: &str| match str_at(node, p) {
        "" => "<unknown>".to_owned(),
        s => s.to_owned(),
    };
    let cells = vec![
        name(node).into(),
        status.join(",").into(),
        or_none(&roles.join(",")).into(),
        created(node, now),
        str_at(node, "/status/nodeInfo/kubeletVersion").into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        unknown("/status/nodeInfo/osImage").into(),
        unknown("/status/nodeInfo/kernelVersion").into(),
        unknown("/status/nodeInfo/containerRuntimeVersion").into(),
    ];
    (cells, None)
}

const EVENT_COLUMNS: &[Column] = &[
    Column::new(
        "Last Seen",
        "string",
        "The time at which the most recent occurrence of this event was recorded.",
    ),
    Column::new(
        "Type",
        "string",
        "Type of this event (Normal, Warning), new types could be added in the future",
    ),
    Column::new(
        "Reason",
        "string",
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    Column::new("Object", "string", "The object that this event is about."),
    Column::new(
        "Subobject",
        "string",
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2].",
    )
    .wide(),
    Column::new(
        "Source",
        "string",
        "The component reporting this event. Should be a short machine understandable string.",
    )
    .wide(),
    Column::new(
        "Message",
        "string",
        "A human-readable description of the status of this operation.",
    ),
    Column::new(
        "First Seen",
        "string",
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    )
    .wide(),
    Column::new(
        "Count",
        "string",
        "The number of times this event has occurred.",
    )
    .wide(),
    NAME.wide(),
];

/// Reads a core/v1 Event or an events.k8s.io/v1 Event through the field
/// names of the internal type both convert to.
struct EventView<'v> {
    obj: &'v Value,
    events_api: bool,
}

impl<'v> EventView<'v> {
    fn new(obj: &'v Value) -> EventView<'v> {
        EventView {
            obj,
            events_api: str_at(obj, "/apiVersion").starts_with("events.k8s.io/"),
        }
    }

    fn get(&self, core: &str, events: &str) -> &'v str {
        str_at(self.obj, if self.events_api { events } else { core })
    }

    fn time(&self, core: &str, events: &str) -> Option<Timestamp> {
        timestamp_at(self.obj, if self.events_api { events } else { core })
    }
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

fn event_cells(ev: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let e = EventView::new(ev);
    let first_timestamp = match e.time("/firstTimestamp", "/deprecatedFirstTimestamp") {
        Some(t) => age(Some(t), now),
        None => age(timestamp_at(ev, "/eventTime"), now),
    };
    let mut last_timestamp = match e.time("/lastTimestamp", "/deprecatedLastTimestamp") {
        Some(t) => age(Some(t), now),
        None => first_timestamp.clone(),
    };
    let mut count = if e.events_api {
        int_at(ev, "/deprecatedCount")
    } else {
        int_at(ev, "/count")
    };
    if let Some(series) = ev.get("series").filter(|s| s.is_object()) {
        last_timestamp = age(timestamp_at(series, "/lastObservedTime"), now);
        count = int_at(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let kind = e
        .get("/involvedObject/kind", "/regarding/kind")
        .to_lowercase();
    let object_name = e.get("/involvedObject/name", "/regarding/name");
    let target = if object_name.is_empty() {
        kind
    } else {
        format!("{kind}/{object_name}")
    };
    let component = first_non_empty(
        e.get("/source/component", "/deprecatedSource/component"),
        e.get("/reportingComponent", "/reportingController"),
    );
    let instance = first_non_empty(
        e.get("/source/host", "/deprecatedSource/host"),
        str_at(ev, "/reportingInstance"),
    );
    let source = if instance.is_empty() {
        component.to_owned()
    } else {
        format!("{component}, {instance}")
    };
    let cells = vec![
        last_timestamp.into(),
        str_at(ev, "/type").into(),
        str_at(ev, "/reason").into(),
        target.into(),
        e.get("/involvedObject/fieldPath", "/regarding/fieldPath")
            .into(),
        source.into(),
        e.get("/message", "/note").trim().into(),
        first_timestamp.into(),
        count.into(),
        name(ev).into(),
    ];
    (cells, None)
}

// -- Config and access

const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Data",
        "string",
        "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
    ),
    AGE,
];

fn config_map_cells(cm: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let data = len_at(cm, "/data") + len_at(cm, "/binaryData");
    (vec![name(cm).into(), data.into(), created(cm, now)], None)
}

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Type",
        "string",
        "Used to facilitate programmatic handling of secret data.",
    ),
    Column::new(
        "Data",
        "string",
        "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
    ),
    AGE,
];

fn secret_cells(secret: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    // stringData is merged into data on write; count the keys of both once.
    let mut keys: Vec<&String> = ["data", "stringData"]
        .iter()
        .filter_map(|k| secret.get(*k).and_then(Value::as_object))
        .flat_map(|m| m.keys())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let data = i64::try_from(keys.len()).unwrap_or(i64::MAX);
    let cells = vec![
        name(secret).into(),
        str_at(secret, "/type").into(),
        data.into(),
        created(secret, now),
    ];
    (cells, None)
}

const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Secrets",
        "string",
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
    ),
    AGE,
];

fn service_account_cells(sa: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let cells = vec![
        name(sa).into(),
        len_at(sa, "/secrets").into(),
        created(sa, now),
    ];
    (cells, None)
}

const LEASE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Holder",
        "string",
        "holderIdentity contains the identity of the holder of a current lease.",
    ),
    AGE,
];

fn lease_cells(lease: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let cells = vec![
        name(lease).into(),
        str_at(lease, "/spec/holderIdentity").into(),
        created(lease, now),
    ];
    (cells, None)
}

// -- cluster-level kinds, as printers.go (and the aggregator) print them

const COMPONENT_STATUS_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "Status of the component conditions"),
    Column::new("Message", "string", "Message of the component conditions"),
    Column::new("Error", "string", "Error of the component conditions"),
];

fn component_status_cells(cs: &Value, _now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let (mut status, mut message, mut error) = ("Unknown", "", "");
    if let Some(c) = array_at(cs, "/conditions")
        .iter()
        .find(|c| c["type"] == "Healthy")
    {
        status = if c["status"] == "True" {
            "Healthy"
        } else {
            "Unhealthy"
        };
        message = str_at(c, "/message");
        error = str_at(c, "/error");
    }
    let cells = vec![name(cs).into(), status.into(), message.into(), error.into()];
    (cells, None)
}

const CSR_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    Column::new(
        "SignerName",
        "string",
        "Only use signers that are known to the cluster.",
    ),
    Column::new(
        "Requestor",
        "string",
        "Name of the user requesting the certificate",
    ),
    Column::new(
        "RequestedDuration",
        "string",
        "expirationSeconds is the requested duration of validity of the issued certificate.",
    ),
    Column::new(
        "Condition",
        "string",
        "Approval and issuance status of the certificate signing request",
    ),
];

fn csr_cells(csr: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    // `extractCSRStatus`: the approval, then Issued once a certificate is in.
    let mut states: Vec<&str> = Vec::new();
    for c in array_at(csr, "/status/conditions") {
        match c["type"].as_str() {
            Some(t @ ("Approved" | "Denied" | "Failed")) if c["status"] != "False" => {
                states.push(t)
            }
            _ => {}
        }
    }
    if states.is_empty() {
        states.push("Pending");
    }
    if !str_at(csr, "/status/certificate").is_empty() {
        states.push("Issued");
    }
    let duration = match csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
    {
        Some(s) => human_duration(SignedDuration::from_secs(s)),
        None => "<none>".to_owned(),
    };
    let cells = vec![
        name(csr).into(),
        created(csr, now),
        str_at(csr, "/spec/signerName").into(),
        str_at(csr, "/spec/username").into(),
        duration.into(),
        states.join(",").into(),
    ];
    (cells, None)
}

const API_SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Service",
        "string",
        "The reference to the service that hosts this API endpoint.",
    ),
    Column::new("Available", "string", "Whether this service is available."),
    AGE,
];

fn api_service_cells(svc: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let service = match svc.pointer("/spec/service").filter(|s| !s.is_null()) {
        Some(s) => format!("{}/{}", str_at(s, "/namespace"), str_at(s, "/name")),
        None => "Local".to_owned(),
    };
    let available = match array_at(svc, "/status/conditions")
        .iter()
        .find(|c| c["type"] == "Available")
    {
        Some(c) if c["status"] == "True" => "True".to_owned(),
        Some(c) => format!("{} ({})", str_at(c, "/status"), str_at(c, "/reason")),
        None => "Unknown".to_owned(),
    };
    let cells = vec![
        name(svc).into(),
        service.into(),
        available.into(),
        created(svc, now),
    ];
    (cells, None)
}

// -- storage and ingress, as kubectl's printers.go prints them

/// `ReadWriteOnce` → `RWO` …, joined by commas (`GetAccessModesAsString`).
fn access_modes(obj: &Value, pointer: &str) -> String {
    let modes: Vec<&str> = array_at(obj, pointer)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    [
        "ReadWriteOnce",
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOncePod",
    ]
    .iter()
    .zip(["RWO", "ROX", "RWX", "RWOP"])
    .filter(|(long, _)| modes.contains(long))
    .map(|(_, short)| short)
    .collect::<Vec<_>>()
    .join(",")
}

fn or_unset(s: &str) -> String {
    if s.is_empty() {
        "<unset>".to_owned()
    } else {
        s.to_owned()
    }
}

fn volume_mode(obj: &Value) -> String {
    match str_at(obj, "/spec/volumeMode") {
        "" => "<unset>".to_owned(),
        m => m.to_owned(),
    }
}

const PVC_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "Status of the claim."),
    Column::new(
        "Volume",
        "string",
        "The PersistentVolume bound to the claim.",
    ),
    Column::new("Capacity", "string", "Capacity of the bound volume."),
    Column::new(
        "Access Modes",
        "string",
        "Access modes of the bound volume.",
    ),
    Column::new("StorageClass", "string", "StorageClass of the claim."),
    Column::new(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the claim.",
    ),
    AGE,
    Column::new("VolumeMode", "string", "Volume mode of the claim.").wide(),
];

fn pvc_cells(pvc: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let phase = match str_at(pvc, "/status/phase") {
        _ if pvc.pointer("/metadata/deletionTimestamp").is_some() => "Terminating",
        "" => "Pending",
        p => p,
    };
    let bound = !str_at(pvc, "/spec/volumeName").is_empty();
    let (capacity, modes) = if bound {
        (
            str_at(pvc, "/status/capacity/storage").to_owned(),
            access_modes(pvc, "/status/accessModes"),
        )
    } else {
        (String::new(), String::new())
    };
    let class = match str_at(pvc, "/spec/storageClassName") {
        "" => str_at(
            pvc,
            "/metadata/annotations/volume.beta.kubernetes.io~1storage-class",
        ),
        c => c,
    };
    let cells = vec![
        name(pvc).into(),
        phase.into(),
        str_at(pvc, "/spec/volumeName").into(),
        capacity.into(),
        modes.into(),
        class.into(),
        or_unset(str_at(pvc, "/spec/volumeAttributesClassName")).into(),
        created(pvc, now),
        volume_mode(pvc).into(),
    ];
    (cells, None)
}

const PV_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Capacity", "string", "Capacity of the volume."),
    Column::new("Access Modes", "string", "Access modes of the volume."),
    Column::new(
        "Reclaim Policy",
        "string",
        "What happens to the volume when released.",
    ),
    Column::new("Status", "string", "Phase of the volume."),
    Column::new("Claim", "string", "The claim bound to the volume."),
    Column::new("StorageClass", "string", "StorageClass of the volume."),
    Column::new(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the volume.",
    ),
    Column::new("Reason", "string", "Why the volume is in its phase."),
    AGE,
    Column::new("VolumeMode", "string", "Volume mode of the volume.").wide(),
];

fn pv_cells(pv: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let claim = match (
        str_at(pv, "/spec/claimRef/namespace"),
        str_at(pv, "/spec/claimRef/name"),
    ) {
        (_, "") => String::new(),
        (ns, n) => format!("{ns}/{n}"),
    };
    let phase = match str_at(pv, "/status/phase") {
        _ if pv.pointer("/metadata/deletionTimestamp").is_some() => "Terminating",
        p => p,
    };
    let cells = vec![
        name(pv).into(),
        str_at(pv, "/spec/capacity/storage").into(),
        access_modes(pv, "/spec/accessModes").into(),
        str_at(pv, "/spec/persistentVolumeReclaimPolicy").into(),
        phase.into(),
        claim.into(),
        str_at(pv, "/spec/storageClassName").into(),
        or_unset(str_at(pv, "/spec/volumeAttributesClassName")).into(),
        str_at(pv, "/status/reason").into(),
        created(pv, now),
        volume_mode(pv).into(),
    ];
    (cells, None)
}

const INGRESS_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Class", "string", "The IngressClass of the ingress."),
    Column::new("Hosts", "string", "Hosts the ingress routes."),
    Column::new("Address", "string", "Address of the load balancer."),
    Column::new("Ports", "string", "Ports the ingress serves."),
    AGE,
];

fn ingress_cells(ing: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let hosts: Vec<&str> = array_at(ing, "/spec/rules")
        .iter()
        .map(|r| match str_at(r, "/host") {
            "" => "*",
            h => h,
        })
        .collect();
    let hosts = match hosts.len() {
        0 => "*".to_owned(),
        1..=3 => hosts.join(","),
        n => format!("{} + {} more...", hosts[..3].join(","), n - 3),
    };
    let address: Vec<&str> = array_at(ing, "/status/loadBalancer/ingress")
        .iter()
        .map(|i| match str_at(i, "/ip") {
            "" => str_at(i, "/hostname"),
            ip => ip,
        })
        .filter(|a| !a.is_empty())
        .collect();
    let ports = if array_at(ing, "/spec/tls").is_empty() {
        "80"
    } else {
        "80, 443"
    };
    let class = match str_at(ing, "/spec/ingressClassName") {
        "" => "<none>",
        c => c,
    };
    let cells = vec![
        name(ing).into(),
        class.into(),
        hosts.into(),
        address.join(",").into(),
        ports.into(),
        created(ing, now),
    ];
    (cells, None)
}

const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Provisioner", "string", "The provisioner of the class."),
    Column::new("ReclaimPolicy", "string", "Reclaim policy of its volumes."),
    Column::new("VolumeBindingMode", "string", "When its volumes are bound."),
    Column::new(
        "AllowVolumeExpansion",
        "string",
        "Whether its volumes can grow.",
    ),
    AGE,
];

fn storage_class_cells(sc: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let default = [
        "storageclass.kubernetes.io~1is-default-class",
        "storageclass.beta.kubernetes.io~1is-default-class",
    ]
    .iter()
    .any(|a| str_at(sc, &format!("/metadata/annotations/{a}")) == "true");
    let shown = if default {
        format!("{} (default)", name(sc))
    } else {
        name(sc).to_owned()
    };
    let or = |p: &str, d: &str| match str_at(sc, p) {
        "" => d.to_owned(),
        v => v.to_owned(),
    };
    let cells = vec![
        shown.into(),
        str_at(sc, "/provisioner").into(),
        or("/reclaimPolicy", "Delete").into(),
        or("/volumeBindingMode", "Immediate").into(),
        sc.pointer("/allowVolumeExpansion")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .to_string()
            .into(),
        created(sc, now),
    ];
    (cells, None)
}

const NETWORK_POLICY_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Pod-Selector",
        "string",
        "Selects the pods to which this NetworkPolicy object applies.",
    ),
    AGE,
];

fn network_policy_cells(np: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    // podSelector is a struct, not a pointer: absent means empty, i.e. all pods.
    let pod_selector = np
        .pointer("/spec/podSelector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let cells = vec![
        name(np).into(),
        selector::format_label_selector(&pod_selector).into(),
        created(np, now),
    ];
    (cells, None)
}

const POD_DISRUPTION_BUDGET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Min Available",
        "string",
        "The minimum number of pods that must be available.",
    ),
    Column::new(
        "Max Unavailable",
        "string",
        "The maximum number of pods that may be unavailable.",
    ),
    Column::new(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

fn pod_disruption_budget_cells(pdb: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let int_or_string = |p: &str| match pdb.pointer(p) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".to_owned(),
    };
    let cells = vec![
        name(pdb).into(),
        int_or_string("/spec/minAvailable").into(),
        int_or_string("/spec/maxUnavailable").into(),
        int_at(pdb, "/status/disruptionsAllowed").into(),
        created(pdb, now),
    ];
    (cells, None)
}

const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Role",
        "string",
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
    ),
    AGE,
    Column::new("Users", "string", "Users in the roleBinding").wide(),
    Column::new("Groups", "string", "Groups in the roleBinding").wide(),
    Column::new(
        "ServiceAccounts",
        "string",
        "ServiceAccounts in the roleBinding",
    )
    .wide(),
];

const CLUSTER_ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Role",
        "string",
        "RoleRef can only reference a ClusterRole in the global namespace.",
    ),
    AGE,
    Column::new("Users", "string", "Users in the clusterRoleBinding").wide(),
    Column::new("Groups", "string", "Groups in the clusterRoleBinding").wide(),
    Column::new(
        "ServiceAccounts",
        "string",
        "ServiceAccounts in the clusterRoleBinding",
    )
    .wide(),
];

fn role_binding_cells(rb: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in array_at(rb, "/subjects") {
        let subject_name = str_at(s, "/name");
        match str_at(s, "/kind") {
            "ServiceAccount" => sas.push(format!("{}/{subject_name}", str_at(s, "/namespace"))),
            "User" => users.push(subject_name.to_owned()),
            "Group" => groups.push(subject_name.to_owned()),
            _ => {}
        }
    }
    let cells = vec![
        name(rb).into(),
        format!(
            "{}/{}",
            str_at(rb, "/roleRef/kind"),
            str_at(rb, "/roleRef/name")
        )
        .into(),
        created(rb, now),
        users.join(", ").into(),
        groups.join(", ").into(),
        sas.join(", ").into(),
    ];
    (cells, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2025-06-01T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().expect("valid timestamp")
    }

    /// An RFC 3339 instant `secs` seconds before NOW.
    fn ago(secs: i64) -> String {
        (now() - SignedDuration::from_secs(secs)).to_string()
    }

    fn options() -> TableOptions {
        TableOptions {
            version: TableVersion::V1,
            include_object: IncludeObject::None,
            no_headers: false,
            now: now(),
        }
    }

    fn cells(kind: &str, obj: Value) -> Vec<Value> {
        let table = to_table(kind, &[obj], None, &options(), &ListMeta::default());
        table["rows"][0]["cells"]
            .as_array()
            .expect("one row")
            .clone()
    }

    fn column_names(table: &Value) -> Vec<String> {
        table["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn durations_are_humanized_like_the_apiserver() {
        let cases: &[(i64, &str)] = &[
            (-3, "<invalid>"),
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (599, "9m59s"),
            (600, "10m"),
            (2 * 3600, "120m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 20 * 60, "3h20m"),
            (8 * 3600 - 60, "7h59m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (53 * 3600, "2d5h"),
            (8 * 86400, "8d"),
            (12 * 86400, "12d"),
            (729 * 86400, "729d"),
            (730 * 86400, "2y"),
            (775 * 86400, "2y45d"),
            (8 * 365 * 86400, "8y"),
            (20 * 365 * 86400, "20y"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(*secs)),
                *want,
                "{secs}s"
            );
        }
        // Fractions of a second are truncated towards zero.
        assert_eq!(human_duration(SignedDuration::from_millis(-1500)), "0s");
        assert_eq!(human_duration(SignedDuration::from_millis(1999)), "1s");
    }

    fn pod(status: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "agent-0", "creationTimestamp": ago(300)},
            "spec": {"containers": [{"name": "main", "image": "agent:1"}]},
            "status": status
        })
    }

    #[test]
    fn pod_status_follows_the_kubectl_reason_logic() {
        let running = json!({"running": {"startedAt": ago(100)}});
        let cases: Vec<(&str, Value, &str, &str, &str)> = vec![
            (
                "pending without statuses",
                pod(json!({"phase": "Pending"})),
                "0/1",
                "Pending",
                "0",
            ),
            (
                "container creating",
                pod(json!({"phase": "Pending", "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
                ]})),
                "0/1",
                "ContainerCreating",
                "0",
            ),
            (
                "running and ready",
                pod(
                    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [
                        {"name": "main", "ready": true, "restartCount": 0, "state": running}
                    ]}),
                ),
                "1/1",
                "Running",
                "0",
            ),
            (
                "running but not ready",
                pod(json!({"phase": "Running", "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 0, "state": running}
                ]})),
                "0/1",
                "Running",
                "0",
            ),
            (
                "completed",
                pod(json!({"phase": "Succeeded", "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                ]})),
                "0/1",
                "Completed",
                "0",
            ),
            (
                "error",
                pod(json!({"phase": "Failed", "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
                ]})),
                "0/1",
                "Error",
                "0",
            ),
            (
                "killed without a reason",
                pod(json!({"phase": "Failed", "containerStatuses": [
                    {"name": "main", "restartCount": 0, "state": {"terminated": {"exitCode": 137}}}
                ]})),
                "0/1",
                "ExitCode:137",
                "0",
            ),
            (
                "signalled without a reason",
                pod(json!({"phase": "Failed", "containerStatuses": [
                    {"name": "main", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "signal": 9}}}
                ]})),
                "0/1",
                "Signal:9",
                "0",
            ),
            (
                "crash loop with restarts",
                pod(json!({"phase": "Running", "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 3,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}}}
                ]})),
                "0/1",
                "CrashLoopBackOff",
                "3 (5m ago)",
            ),
            (
                "evicted",
                pod(json!({"phase": "Failed", "reason": "Evicted"})),
                "0/1",
                "Evicted",
                "0",
            ),
            (
                "scheduling gated",
                pod(
                    json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
                ),
                "0/1",
                "SchedulingGated",
                "0",
            ),
        ];
        for (what, p, ready, status, restarts) in cases {
            let c = cells("Pod", p);
            assert_eq!(c[1], json!(ready), "{what}: ready");
            assert_eq!(c[2], json!(status), "{what}: status");
            assert_eq!(c[3], json!(restarts), "{what}: restarts");
        }
    }

    #[test]
    fn deleting_pods_show_terminating_unless_finished_or_lost() {
        let cases = [
            ("Running", "", "Terminating"),
            ("Pending", "", "Terminating"),
            ("Succeeded", "", "Succeeded"),
            ("Failed", "", "Failed"),
            ("Running", "NodeLost", "Unknown"),
        ];
        for (phase, reason, want) in cases {
            let mut p = pod(json!({"phase": phase}));
            p["metadata"]["deletionTimestamp"] = json!(ago(10));
            if !reason.is_empty() {
                p["status"]["reason"] = json!(reason);
            }
            let status = if reason.is_empty() { phase } else { reason };
            let c = cells("Pod", p);
            assert_eq!(c[2], json!(want), "{phase}/{status}");
        }
    }

    fn pod_with_init(init_statuses: Value, conditions: Value) -> Value {
        json!({
            "metadata": {"name": "p", "creationTimestamp": ago(60)},
            "spec": {
                "initContainers": [{"name": "migrate"}, {"name": "seed"}],
                "containers": [{"name": "main"}]
            },
            "status": {"phase": "Pending", "conditions": conditions, "initContainerStatuses": init_statuses,
                       "containerStatuses": [{"name": "main", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}
        })
    }

    #[test]
    fn init_containers_show_their_progress() {
        let cases = vec![
            (
                json!([{"name": "migrate", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]),
                "Init:0/2",
            ),
            (
                json!([
                    {"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "seed", "restartCount": 0, "state": {"running": {}}}
                ]),
                "Init:1/2",
            ),
            (
                json!([{"name": "migrate", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
                "Init:CrashLoopBackOff",
            ),
            (
                json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]),
                "Init:Error",
            ),
            (
                json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}]),
                "Init:ExitCode:3",
            ),
            (
                json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 143, "signal": 15}}}]),
                "Init:Signal:15",
            ),
        ];
        for (statuses, want) in cases {
            let c = cells("Pod", pod_with_init(statuses.clone(), json!([])));
            assert_eq!(c[2], json!(want), "{statuses}");
        }
    }

    #[test]
    fn init_container_restarts_count_until_the_pod_is_initialized() {
        let statuses = json!([{"name": "migrate", "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(30)}}}]);
        let c = cells("Pod", pod_with_init(statuses.clone(), json!([])));
        assert_eq!(c[3], json!("2 (30s ago)"));
        // Once Initialized, only the regular containers' restarts count.
        let c = cells(
            "Pod",
            pod_with_init(statuses, json!([{"type": "Initialized", "status": "True"}])),
        );
        assert_eq!(c[3], json!("0"));
        assert_eq!(c[2], json!("PodInitializing"));
    }

    #[test]
    fn sidecars_count_as_containers_and_a_finished_main_container_keeps_the_pod_running() {
        let p = json!({
            "metadata": {"name": "p", "creationTimestamp": ago(60)},
            "spec": {
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
                "containers": [{"name": "main"}, {"name": "helper"}]
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [{"name": "proxy", "started": true, "ready": true, "restartCount": 1,
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(120)}},
                    "state": {"running": {}}}],
                "containerStatuses": [
                    {"name": "main", "ready": true, "restartCount": 0, "state": {"running": {}}},
                    {"name": "helper", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                ]
            }
        });
        let c = cells("Pod", p.clone());
        assert_eq!(c[1], json!("2/3"));
        // The printer walks containers backwards: `helper` sets "Completed",
        // then `main` is running, which turns it into NotReady while the pod
        // has no Ready condition.
        assert_eq!(c[2], json!("NotReady"));
        assert_eq!(c[3], json!("1 (2m ago)"));
        let mut ready = p;
        ready["status"]["conditions"] =
            json!([{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}]);
        assert_eq!(cells("Pod", ready)[2], json!("Running"));
    }

    #[test]
    fn pod_rows_have_wide_cells_and_completion_conditions() {
        let mut p = pod(
            json!({"phase": "Succeeded", "podIP": "127.0.0.9", "nominatedNodeName": "",
            "conditions": [{"type": "example.com/gate", "status": "True"}]}),
        );
        p["spec"]["nodeName"] = json!("node-1");
        p["spec"]["readinessGates"] =
            json!([{"conditionType": "example.com/gate"}, {"conditionType": "other"}]);
        let table = to_table("Pod", &[p], None, &options(), &ListMeta::default());
        assert_eq!(
            column_names(&table),
            [
                "Name",
                "Ready",
                "Status",
                "Restarts",
                "Age",
                "IP",
                "Node",
                "Nominated Node",
                "Readiness Gates"
            ]
        );
        let row = &table["rows"][0];
        assert_eq!(
            row["cells"],
            json!([
                "agent-0",
                "0/1",
                "Succeeded",
                "0",
                "5m",
                "127.0.0.9",
                "node-1",
                "<none>",
                "1/2"
            ])
        );
        assert_eq!(
            row["conditions"],
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
        );
        assert_eq!(table["columnDefinitions"][5]["priority"], json!(1));
        assert_eq!(table["columnDefinitions"][0]["format"], json!("name"));
    }

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "creationTimestamp": ago(3 * 86400)},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [
                    {"name": "nginx", "image": "nginx:1.27"},
                    {"name": "sidecar", "image": "envoy:1"}
                ]}}
            },
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2, "replicas": 3}
        })
    }

    #[test]
    fn workload_rows_match_the_printers() {
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "Deployment",
                deployment(),
                json!([
                    "web",
                    "2/3",
                    3,
                    2,
                    "3d",
                    "nginx,sidecar",
                    "nginx:1.27,envoy:1",
                    "app=web"
                ]),
            ),
            (
                "ReplicaSet",
                json!({"metadata": {"name": "web-7c9", "creationTimestamp": ago(90)},
                       "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7c9"}},
                                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}},
                       "status": {"replicas": 2, "readyReplicas": 1}}),
                json!([
                    "web-7c9",
                    2,
                    2,
                    1,
                    "90s",
                    "nginx",
                    "nginx",
                    "app=web,pod-template-hash=7c9"
                ]),
            ),
            (
                "StatefulSet",
                json!({"metadata": {"name": "db", "creationTimestamp": ago(7200)},
                       "spec": {"template": {"spec": {"containers": [{"name": "pg", "image": "postgres"}]}}},
                       "status": {"readyReplicas": 1}}),
                json!(["db", "1/1", "120m", "pg", "postgres"]),
            ),
            (
                "DaemonSet",
                json!({"metadata": {"name": "agent", "creationTimestamp": ago(60)},
                       "spec": {"selector": {"matchLabels": {"app": "agent"}},
                                "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{"name": "a", "image": "a:1"}]}}},
                       "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2}}),
                json!([
                    "agent",
                    3,
                    3,
                    2,
                    3,
                    2,
                    "kubernetes.io/os=linux",
                    "60s",
                    "a",
                    "a:1",
                    "app=agent"
                ]),
            ),
            (
                "CronJob",
                json!({"metadata": {"name": "nightly", "creationTimestamp": ago(86400)},
                       "spec": {"schedule": "0 3 * * *", "suspend": false,
                                "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "job", "image": "job:1"}]}}}}},
                       "status": {"active": [{"name": "nightly-1"}], "lastScheduleTime": ago(600)}}),
                json!([
                    "nightly",
                    "0 3 * * *",
                    "<none>",
                    "False",
                    1,
                    "10m",
                    "24h",
                    "job",
                    "job:1",
                    "<none>"
                ]),
            ),
        ];
        for (kind, obj, want) in cases {
            assert_eq!(Value::Array(cells(kind, obj)), want, "{kind}");
        }
    }

    #[test]
    fn a_deployment_without_a_selector_prints_an_empty_selector() {
        let mut d = deployment();
        d["spec"].as_object_mut().expect("spec").remove("selector");
        d["spec"].as_object_mut().expect("spec").remove("replicas");
        let c = cells("Deployment", d);
        assert_eq!(c[1], json!("2/1"));
        assert_eq!(c[7], json!(""));
    }

    fn job(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "migrate", "creationTimestamp": ago(600)},
               "spec": spec, "status": status})
    }

    #[test]
    fn job_status_completions_and_duration_follow_the_printer() {
        let complete = json!([{"type": "Complete", "status": "True"}]);
        let cases: Vec<(&str, Value, Vec<Value>)> = vec![
            (
                "running",
                job(
                    json!({"completions": 3, "parallelism": 1}),
                    json!({"succeeded": 1, "startTime": ago(150)}),
                ),
                vec![json!("Running"), json!("1/3"), json!("2m30s")],
            ),
            (
                "complete",
                job(
                    json!({"completions": 1}),
                    json!({"succeeded": 1, "conditions": complete,
                    "startTime": ago(500), "completionTime": ago(470)}),
                ),
                vec![json!("Complete"), json!("1/1"), json!("30s")],
            ),
            (
                "failed",
                job(
                    json!({"completions": 1}),
                    json!({"failed": 4, "startTime": ago(100),
                    "conditions": [{"type": "Failed", "status": "True"}]}),
                ),
                vec![json!("Failed"), json!("0/1"), json!("100s")],
            ),
            (
                "suspended before it started",
                job(
                    json!({"completions": 2, "suspend": true}),
                    json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
                ),
                vec![json!("Suspended"), json!("0/2"), json!("")],
            ),
            (
                "failure target",
                job(
                    json!({"completions": 1}),
                    json!({"conditions": [{"type": "FailureTarget", "status": "True"}]}),
                ),
                vec![json!("FailureTarget"), json!("0/1"), json!("")],
            ),
            (
                "work queue",
                job(json!({"parallelism": 4}), json!({"succeeded": 2})),
                vec![json!("Running"), json!("2/1 of 4"), json!("")],
            ),
            (
                "a false Complete condition",
                job(
                    json!({"completions": 1}),
                    json!({"conditions": [{"type": "Complete", "status": "False"}]}),
                ),
                vec![json!("Running"), json!("0/1"), json!("")],
            ),
        ];
        for (what, j, want) in cases {
            let c = cells("Job", j);
            assert_eq!(c[1..4].to_vec(), want, "{what}");
        }
        let mut deleting = job(json!({"completions": 1}), json!({}));
        deleting["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells("Job", deleting)[1], json!("Terminating"));
    }

    #[test]
    fn service_rows_show_addresses_and_ports() {
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "cluster IP",
                json!({"metadata": {"name": "api", "creationTimestamp": ago(30)},
                       "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"],
                                "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                                "selector": {"app": "api"}}}),
                json!([
                    "api",
                    "ClusterIP",
                    "10.0.0.10",
                    "<none>",
                    "80/TCP,53/UDP",
                    "30s",
                    "app=api"
                ]),
            ),
            (
                "node port",
                json!({"metadata": {"name": "np"},
                       "spec": {"type": "NodePort", "clusterIP": "10.0.0.11", "externalIPs": ["1.2.3.4"],
                                "ports": [{"port": 80, "nodePort": 30080}]}}),
                json!([
                    "np",
                    "NodePort",
                    "10.0.0.11",
                    "1.2.3.4",
                    "80:30080/TCP",
                    "<unknown>",
                    "<none>"
                ]),
            ),
            (
                "pending load balancer",
                json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.0.0.12"]}}),
                json!([
                    "lb",
                    "LoadBalancer",
                    "10.0.0.12",
                    "<pending>",
                    "<none>",
                    "<unknown>",
                    "<none>"
                ]),
            ),
            (
                "load balancer with ingress",
                json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.0.0.12"], "externalIPs": ["9.9.9.9"]},
                       "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}, {"ip": "5.6.7.8"}]}}}),
                json!([
                    "lb",
                    "LoadBalancer",
                    "10.0.0.12",
                    "5.6.7.8,lb.example.com,9.9.9.9",
                    "<none>",
                    "<unknown>",
                    "<none>"
                ]),
            ),
            (
                "headless",
                json!({"metadata": {"name": "db"}, "spec": {"clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 5432}]}}),
                json!([
                    "db",
                    "ClusterIP",
                    "None",
                    "<none>",
                    "5432/TCP",
                    "<unknown>",
                    "<none>"
                ]),
            ),
            (
                "external name",
                json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "db.example.com"}}),
                json!([
                    "ext",
                    "ExternalName",
                    "<none>",
                    "db.example.com",
                    "<none>",
                    "<unknown>",
                    "<none>"
                ]),
            ),
        ];
        for (what, svc, want) in cases {
            assert_eq!(Value::Array(cells("Service", svc)), want, "{what}");
        }
    }

    #[test]
    fn node_rows_show_readiness_roles_and_version() {
        let cases: Vec<(Value, Value)> = vec![
            (
                json!({"metadata": {"name": "cp", "creationTimestamp": ago(86400 * 10),
                        "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/": "x", "kubernetes.io/role": "master"}},
                       "spec": {"unschedulable": true},
                       "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                                  "addresses": [{"type": "InternalIP", "address": "192.168.1.2"}, {"type": "Hostname", "address": "cp"}],
                                  "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Ubuntu", "kernelVersion": "6.8", "containerRuntimeVersion": "containerd://2.0"}}}),
                json!([
                    "cp",
                    "Ready,SchedulingDisabled",
                    "control-plane,master",
                    "10d",
                    "v1.33.1",
                    "192.168.1.2",
                    "<none>",
                    "Ubuntu",
                    "6.8",
                    "containerd://2.0"
                ]),
            ),
            (
                json!({"metadata": {"name": "w"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
                json!([
                    "w",
                    "NotReady",
                    "<none>",
                    "<unknown>",
                    "",
                    "<none>",
                    "<none>",
                    "<unknown>",
                    "<unknown>",
                    "<unknown>"
                ]),
            ),
            (
                json!({"metadata": {"name": "new"}}),
                json!([
                    "new",
                    "Unknown",
                    "<none>",
                    "<unknown>",
                    "",
                    "<none>",
                    "<none>",
                    "<unknown>",
                    "<unknown>",
                    "<unknown>"
                ]),
            ),
        ];
        for (node, want) in cases {
            assert_eq!(Value::Array(cells("Node", node)), want);
        }
    }

    #[test]
    fn event_rows_read_both_event_apis() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "agent-0.17a", "creationTimestamp": ago(400)},
            "involvedObject": {"kind": "Pod", "name": "agent-0", "fieldPath": "spec.containers{main}"},
            "reason": "BackOff", "type": "Warning", "message": "  Back-off restarting failed container\n",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": ago(400), "lastTimestamp": ago(65), "count": 7
        });
        let series = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "lease.1"},
            "regarding": {"kind": "Lease", "name": "agentdeck-leader"},
            "reason": "LeaderElection", "type": "Normal", "note": "became leader",
            "reportingController": "agentdeck", "reportingInstance": "agentdeck-7f",
            "eventTime": ago(3600), "series": {"count": 4, "lastObservedTime": ago(20)}
        });
        let singleton = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "ns.1"},
            "involvedObject": {"kind": "Namespace"},
            "reason": "Created", "type": "Normal", "message": "ok",
            "reportingComponent": "sandbox", "eventTime": ago(5)
        });
        let cases = [
            (
                core,
                json!([
                    "65s",
                    "Warning",
                    "BackOff",
                    "pod/agent-0",
                    "spec.containers{main}",
                    "kubelet, node-1",
                    "Back-off restarting failed container",
                    "6m40s",
                    7,
                    "agent-0.17a"
                ]),
            ),
            (
                series,
                json!([
                    "20s",
                    "Normal",
                    "LeaderElection",
                    "lease/agentdeck-leader",
                    "",
                    "agentdeck, agentdeck-7f",
                    "became leader",
                    "60m",
                    4,
                    "lease.1"
                ]),
            ),
            (
                singleton,
                json!([
                    "5s",
                    "Normal",
                    "Created",
                    "namespace",
                    "",
                    "sandbox",
                    "ok",
                    "5s",
                    1,
                    "ns.1"
                ]),
            ),
        ];
        for (event, want) in cases {
            assert_eq!(Value::Array(cells("Event", event)), want);
        }
        let table = to_table("Event", &[], None, &options(), &ListMeta::default());
        assert_eq!(
            column_names(&table),
            [
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name"
            ]
        );
    }

    #[test]
    fn config_and_access_rows_match_the_printers() {
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "Namespace",
                json!({"metadata": {"name": "pools", "creationTimestamp": ago(86400 * 40)}, "status": {"phase": "Active"}}),
                json!(["pools", "Active", "40d"]),
            ),
            (
                "ConfigMap",
                json!({"metadata": {"name": "cfg", "creationTimestamp": ago(10)}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}),
                json!(["cfg", 3, "10s"]),
            ),
            (
                "Secret",
                json!({"metadata": {"name": "tls", "creationTimestamp": ago(10)}, "type": "kubernetes.io/tls",
                       "data": {"tls.crt": "", "tls.key": ""}, "stringData": {"tls.key": "x", "ca.crt": "y"}}),
                json!(["tls", "kubernetes.io/tls", 3, "10s"]),
            ),
            (
                "ServiceAccount",
                json!({"metadata": {"name": "default", "creationTimestamp": ago(10)}}),
                json!(["default", 0, "10s"]),
            ),
            (
                "Lease",
                json!({"metadata": {"name": "agentdeck-leader", "creationTimestamp": ago(10)}, "spec": {"holderIdentity": "agentdeck-0"}}),
                json!(["agentdeck-leader", "agentdeck-0", "10s"]),
            ),
            (
                "NetworkPolicy",
                json!({"metadata": {"name": "deny", "creationTimestamp": ago(10)}, "spec": {"podSelector": {}}}),
                json!(["deny", "<none>", "10s"]),
            ),
            (
                "NetworkPolicy",
                json!({"metadata": {"name": "agents", "creationTimestamp": ago(10)},
                       "spec": {"podSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["agent", "runner"]}]}}}),
                json!(["agents", "role in (agent,runner)", "10s"]),
            ),
            (
                "PodDisruptionBudget",
                json!({"metadata": {"name": "pdb", "creationTimestamp": ago(10)}, "spec": {"minAvailable": 1}, "status": {"disruptionsAllowed": 2}}),
                json!(["pdb", "1", "N/A", 2, "10s"]),
            ),
            (
                "PodDisruptionBudget",
                json!({"metadata": {"name": "pdb2", "creationTimestamp": ago(10)}, "spec": {"maxUnavailable": "25%"}}),
                json!(["pdb2", "N/A", "25%", 0, "10s"]),
            ),
            (
                "RoleBinding",
                json!({"metadata": {"name": "rb", "creationTimestamp": ago(10)},
                       "roleRef": {"kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                                    {"kind": "ServiceAccount", "name": "agent", "namespace": "pools"}, {"kind": "User", "name": "bob"}]}),
                json!([
                    "rb",
                    "ClusterRole/view",
                    "10s",
                    "alice, bob",
                    "devs",
                    "pools/agent"
                ]),
            ),
            (
                "ClusterRoleBinding",
                json!({"metadata": {"name": "crb", "creationTimestamp": ago(10)}, "roleRef": {"kind": "ClusterRole", "name": "admin"}}),
                json!(["crb", "ClusterRole/admin", "10s", "", "", ""]),
            ),
        ];
        for (kind, obj, want) in cases {
            assert_eq!(Value::Array(cells(kind, obj)), want, "{kind}");
        }
    }

    #[test]
    fn kinds_without_a_printer_get_name_and_created_at() {
        for kind in ["Role", "ClusterRole", "CustomResourceDefinition", "Widget"] {
            let obj =
                json!({"metadata": {"name": "x", "creationTimestamp": "2024-03-05T06:07:08Z"}});
            let table = to_table(kind, &[obj], None, &options(), &ListMeta::default());
            assert_eq!(column_names(&table), ["Name", "Created At"], "{kind}");
            assert_eq!(table["columnDefinitions"][1]["type"], json!("date"));
            assert_eq!(
                table["rows"][0]["cells"],
                json!(["x", "2024-03-05T06:07:08Z"]),
                "{kind}"
            );
        }
        let empty = to_table("Role", &[], None, &options(), &ListMeta::default());
        assert_eq!(empty["rows"], Value::Null);
        let unset = to_table(
            "Role",
            &[json!({"metadata": {"name": "y"}})],
            None,
            &options(),
            &ListMeta::default(),
        );
        assert_eq!(
            unset["rows"][0]["cells"],
            json!(["y", "0001-01-01T00:00:00Z"])
        );
    }

    fn agent_pool() -> Value {
        json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "build", "namespace": "pools", "creationTimestamp": ago(7200),
                         "labels": {"app.kubernetes.io/name": "agentdeck"}},
            "spec": {"replicas": 4, "cpu": 1.5, "paused": false, "image": "agent:2", "tags": ["a", "b"]},
            "status": {
                "readyReplicas": 3,
                "lastScaleTime": ago(90),
                "conditions": [
                    {"type": "Progressing", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "ScalingUp"}
                ]
            }
        })
    }

    fn column(name: &str, type_: &str, json_path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.to_owned(),
            type_: type_.to_owned(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: json_path.to_owned(),
        }
    }

    #[test]
    fn custom_resource_columns_are_evaluated_with_jsonpath() {
        let columns = vec![
            column("Replicas", "integer", ".spec.replicas"),
            column(
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
            ),
            column(
                "Reason",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].reason",
            ),
            column("CPU", "number", ".spec.cpu"),
            column("Whole", "number", ".spec.replicas"),
            column("Paused", "boolean", ".spec.paused"),
            column("Scaled", "date", ".status.lastScaleTime"),
            column("Age", "date", ".metadata.creationTimestamp"),
            column(
                "Name Label",
                "string",
                ".metadata.labels.app\\.kubernetes\\.io/name",
            ),
            column("Tags", "string", ".spec.tags"),
            column("Missing", "string", ".status.nothing"),
            column("Wrong Type", "boolean", ".spec.image"),
            column("Out of range", "string", ".spec.tags[5]"),
        ];
        let table = to_table(
            "AgentPool",
            &[agent_pool()],
            Some(&columns),
            &options(),
            &ListMeta::default(),
        );
        assert_eq!(
            table["rows"][0]["cells"],
            json!([
                "build",
                4,
                "False",
                "ScalingUp",
                1.5,
                4,
                false,
                "90s",
                "120m",
                "agentdeck",
                "[\"a\",\"b\"]",
                null,
                null,
                null
            ])
        );
        let defs = &table["columnDefinitions"];
        assert_eq!(
            defs[0],
            json!({"name": "Name", "type": "string", "format": "name", "description": NAME_DESC, "priority": 0})
        );
        assert_eq!(
            defs[1]["description"],
            json!("Custom resource definition column (in JSONPath format): .spec.replicas")
        );
    }

    #[test]
    fn a_custom_resource_without_columns_gets_name_and_age() {
        let table = to_table(
            "AgentPool",
            &[agent_pool()],
            Some(&[]),
            &options(),
            &ListMeta::default(),
        );
        assert_eq!(column_names(&table), ["Name", "Age"]);
        assert_eq!(table["columnDefinitions"][1]["type"], json!("date"));
        assert_eq!(table["rows"][0]["cells"], json!(["build", "120m"]));
    }

    #[test]
    fn date_cells_that_do_not_parse_are_invalid() {
        let obj =
            json!({"metadata": {"name": "x"}, "spec": {"at": "yesterday", "empty": "", "n": 5}});
        let columns = vec![
            column("At", "date", ".spec.at"),
            column("Empty", "date", ".spec.empty"),
            column("Number", "date", ".spec.n"),
        ];
        let table = to_table(
            "X",
            &[obj],
            Some(&columns),
            &options(),
            &ListMeta::default(),
        );
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["x", "<invalid>", "<unknown>", null])
        );
    }

    #[test]
    fn a_column_that_does_not_parse_ends_the_column_list() {
        let columns = vec![
            column("Replicas", "integer", ".spec.replicas"),
            column("Broken", "string", ".spec.containers["),
            column("After", "string", ".spec.image"),
        ];
        let table = to_table(
            "AgentPool",
            &[agent_pool()],
            Some(&columns),
            &options(),
            &ListMeta::default(),
        );
        assert_eq!(column_names(&table), ["Name", "Replicas"]);
        assert_eq!(table["rows"][0]["cells"], json!(["build", 4]));
    }

    #[test]
    fn printer_columns_are_read_from_the_served_crd_version() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1alpha1", "additionalPrinterColumns": [
                {"name": "Ready", "type": "string", "jsonPath": ".status.ready", "priority": 1, "description": "ready pods"}
            ]},
            {"name": "v1beta1"}
        ]}});
        assert_eq!(
            PrinterColumn::for_crd_version(&crd, "v1alpha1"),
            vec![PrinterColumn {
                name: "Ready".to_owned(),
                type_: "string".to_owned(),
                format: String::new(),
                description: "ready pods".to_owned(),
                priority: 1,
                json_path: ".status.ready".to_owned(),
            }]
        );
        assert!(PrinterColumn::for_crd_version(&crd, "v1beta1").is_empty());
        assert!(PrinterColumn::for_crd_version(&crd, "v9").is_empty());
    }

    #[test]
    fn rows_carry_the_object_the_client_asked_for() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "cfg", "namespace": "pools", "resourceVersion": "7", "labels": {"a": "b"}},
                         "data": {"k": "v"}});
        let cases = [
            (IncludeObject::None, TableVersion::V1, Value::Null),
            (
                IncludeObject::Metadata,
                TableVersion::V1,
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": {"name": "cfg", "namespace": "pools", "resourceVersion": "7", "labels": {"a": "b"}}}),
            ),
            (
                IncludeObject::Metadata,
                TableVersion::V1Beta1,
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1beta1",
                       "metadata": {"name": "cfg", "namespace": "pools", "resourceVersion": "7", "labels": {"a": "b"}}}),
            ),
            (IncludeObject::Object, TableVersion::V1, obj.clone()),
        ];
        for (include, version, want) in cases {
            let opts = TableOptions {
                include_object: include,
                version,
                ..options()
            };
            let table = to_table(
                "ConfigMap",
                std::slice::from_ref(&obj),
                None,
                &opts,
                &ListMeta::default(),
            );
            assert_eq!(table["rows"][0]["object"], want, "{include:?}");
            assert_eq!(table["apiVersion"], json!(version.api_version()));
            assert_eq!(table["kind"], json!("Table"));
        }
    }

    #[test]
    fn include_object_query_values_are_checked() {
        let cases = [
            (None, Ok(IncludeObject::Metadata)),
            (Some(""), Ok(IncludeObject::Metadata)),
            (Some("Metadata"), Ok(IncludeObject::Metadata)),
            (Some("None"), Ok(IncludeObject::None)),
            (Some("Object"), Ok(IncludeObject::Object)),
            (
                Some("object"),
                Err("unrecognized includeObject value: \"object\"".to_owned()),
            ),
        ];
        for (query, want) in cases {
            assert_eq!(IncludeObject::from_query(query), want, "{query:?}");
        }
    }

    #[test]
    fn list_metadata_and_headers_are_copied() {
        let meta = ListMeta {
            resource_version: Some("42".to_owned()),
            continue_token: Some("abc".to_owned()),
            remaining_item_count: Some(10),
        };
        let table = to_table("Pod", &[], None, &options(), &meta);
        assert_eq!(
            table["metadata"],
            json!({"resourceVersion": "42", "continue": "abc", "remainingItemCount": 10})
        );
        assert_eq!(table["rows"], json!([]));
        let opts = TableOptions {
            no_headers: true,
            ..options()
        };
        let bare = to_table("Pod", &[], None, &opts, &ListMeta::default());
        assert_eq!(bare["columnDefinitions"], Value::Null);
        assert_eq!(bare["metadata"], json!({}));
    }

    #[test]
    fn accept_headers_negotiate_the_representation() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        let cases: &[(Option<&str>, Option<Representation>)] = &[
            (None, Some(Representation::Object)),
            (Some(""), Some(Representation::Object)),
            (Some("application/json"), Some(Representation::Object)),
            (Some("*/*"), Some(Representation::Object)),
            (Some(kubectl), Some(Representation::Table(TableVersion::V1))),
            (
                Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json"),
                Some(Representation::Table(TableVersion::V1Beta1)),
            ),
            (
                Some("application/json;as=Table;v=v2;g=meta.k8s.io,application/json"),
                Some(Representation::Object),
            ),
            (
                Some(
                    "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io",
                ),
                Some(Representation::Table(TableVersion::V1Beta1)),
            ),
            (
                Some("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io"),
                Some(Representation::Table(TableVersion::V1)),
            ),
            (
                Some("*/*,application/json;as=Table;v=v1;g=meta.k8s.io"),
                Some(Representation::Table(TableVersion::V1)),
            ),
            (
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                Some(Representation::PartialObjectMetadata {
                    version: TableVersion::V1,
                    list: true,
                }),
            ),
            (Some("application/yaml"), None),
            (Some("application/json;as=Table;v=v1;g=example.com"), None),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(*accept), *want, "{accept:?}");
        }
        assert_eq!(wants_table(Some(kubectl)), Some(TableVersion::V1));
        assert_eq!(wants_table(Some("application/json")), None);
        assert_eq!(wants_table(None), None);
    }
}
