//! Which lists merge, by which key, and which maps are replaced: the patch
//! metadata of the built-in kinds.
//!
//! The facts come from Kubernetes v1.33's own OpenAPI definitions: the
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` extensions,
//! which openapi-gen derives from the `patchStrategy`/`patchMergeKey` Go struct
//! tags that kube-apiserver's `strategicpatch` package reads by reflection. They
//! were extracted from the schema set that the `kubernetes-validate` package
//! (PyPI, 1.37.0) ships for v1.33.0, not written from memory. Those patch
//! extensions differ from the `x-kubernetes-list-type`/`-list-map-keys` that
//! k8s-openapi's `DeepMerge` follows: container ports merge by `containerPort`
//! alone (list-map keys `containerPort`+`protocol`), Service ports by `port`,
//! topologySpreadConstraints by `topologyKey`, and Job conditions merge by
//! `type` although their list type is atomic.
//!
//! Only fields whose strategy differs from the default are listed, plus the
//! object-valued fields that lead to such fields. Anything not listed gets the
//! default, which is also what a field without a patch strategy gets in
//! Kubernetes: maps merge recursively, lists are replaced whole (`args`,
//! `command`, `tolerations`, `readinessGates`, a Job's `podFailurePolicy.rules`
//! …). The `retainKeys` strategy is left out: it only shapes patches computed
//! client-side, and the server honours a `$retainKeys` directive wherever it
//! appears.

/// How the elements of a field are patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Strategy {
    /// No patch strategy: maps merge recursively, lists are replaced whole.
    Default,
    /// `patchStrategy:"merge"`: lists of objects merge element-wise by `key`,
    /// lists of primitives (`key: None`) become a union.
    Merge { key: Option<&'static str> },
    /// `patchStrategy:"replace"`: the patch's map replaces the target's map.
    Replace,
}

/// The patch metadata of one Kubernetes type.
#[derive(Debug)]
pub(super) struct TypeSchema {
    /// The OpenAPI definition name without its `io.k8s.api.` or
    /// `io.k8s.apimachinery.pkg.apis.` prefix; the test that checks the table
    /// against k8s-openapi's definitions is what reads it.
    pub(super) name: &'static str,
    pub(super) fields: &'static [Field],
}

/// One field's patch metadata.
#[derive(Debug)]
pub(super) struct Field {
    pub(super) name: &'static str,
    /// The type of the field, or of its elements for a merging list; `None`
    /// when nothing below the field has a patch strategy.
    pub(super) child: Option<&'static TypeSchema>,
    pub(super) strategy: Strategy,
}

/// The full OpenAPI definition name of `schema`, or `None` for the shared
/// metadata-only stand-in, which names no real type.
pub(super) fn definition_name(schema: &TypeSchema) -> Option<String> {
    if schema.name.starts_with('(') {
        return None;
    }
    Some(match schema.name.strip_prefix("meta.") {
        Some(rest) => format!("io.k8s.apimachinery.pkg.apis.meta.{rest}"),
        None => format!("io.k8s.api.{}", schema.name),
    })
}

/// What the merge needs to know about one field of a value.
#[derive(Clone, Copy, Debug)]
pub(super) struct FieldMeta {
    pub(super) child: Option<&'static TypeSchema>,
    pub(super) strategy: Strategy,
}

impl FieldMeta {
    /// A field of an unknown type: maps merge, lists are replaced.
    pub(super) const UNKNOWN: FieldMeta = FieldMeta {
        child: None,
        strategy: Strategy::Default,
    };
}

/// Looks up `field` in `schema`; unknown types and fields get the default.
pub(super) fn field_meta(schema: Option<&'static TypeSchema>, field: &str) -> FieldMeta {
    schema
        .and_then(|s| s.fields.iter().find(|f| f.name == field))
        .map_or(FieldMeta::UNKNOWN, |f| FieldMeta {
            child: f.child,
            strategy: f.strategy,
        })
}

/// The root schema of a kind, if strategic merge is defined for it.
pub(super) fn kind_schema(api_version: &str, kind: &str) -> Option<&'static TypeSchema> {
    KINDS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, schema)| *schema)
}

const fn object(name: &'static str, child: &'static TypeSchema) -> Field {
    Field {
        name,
        child: Some(child),
        strategy: Strategy::Default,
    }
}

const fn merge_list(name: &'static str, key: &'static str) -> Field {
    Field {
        name,
        child: None,
        strategy: Strategy::Merge { key: Some(key) },
    }
}

const fn merge_list_of(name: &'static str, key: &'static str, child: &'static TypeSchema) -> Field {
    Field {
        name,
        child: Some(child),
        strategy: Strategy::Merge { key: Some(key) },
    }
}

const fn merge_set(name: &'static str) -> Field {
    Field {
        name,
        child: None,
        strategy: Strategy::Merge { key: None },
    }
}

const fn replace(name: &'static str) -> Field {
    Field {
        name,
        child: None,
        strategy: Strategy::Replace,
    }
}

/// The built-in kinds that accept a strategic merge patch, by apiVersion and
/// kind. Custom resources are absent on purpose: kube-apiserver answers 415
/// for them.
pub(super) static KINDS: &[(&str, &str, &TypeSchema)] = &[
    ("v1", "Pod", &POD),
    ("v1", "PodTemplate", &POD_TEMPLATE),
    ("v1", "ReplicationController", &REPLICATION_CONTROLLER),
    ("v1", "Service", &SERVICE),
    ("v1", "Endpoints", &ONLY_METADATA),
    ("v1", "ConfigMap", &ONLY_METADATA),
    ("v1", "Secret", &ONLY_METADATA),
    ("v1", "ServiceAccount", &SERVICE_ACCOUNT),
    ("v1", "Namespace", &NAMESPACE),
    ("v1", "Node", &NODE),
    ("v1", "Event", &ONLY_METADATA),
    ("v1", "PersistentVolumeClaim", &PERSISTENT_VOLUME_CLAIM),
    ("v1", "PersistentVolume", &ONLY_METADATA),
    ("v1", "ResourceQuota", &ONLY_METADATA),
    ("v1", "LimitRange", &ONLY_METADATA),
    ("apps/v1", "Deployment", &DEPLOYMENT),
    ("apps/v1", "ReplicaSet", &REPLICA_SET),
    ("apps/v1", "StatefulSet", &STATEFUL_SET),
    ("apps/v1", "DaemonSet", &DAEMON_SET),
    ("apps/v1", "ControllerRevision", &ONLY_METADATA),
    ("batch/v1", "Job", &JOB),
    ("batch/v1", "CronJob", &CRON_JOB),
    ("coordination.k8s.io/v1", "Lease", &ONLY_METADATA),
    ("networking.k8s.io/v1", "NetworkPolicy", &ONLY_METADATA),
    ("networking.k8s.io/v1", "Ingress", &ONLY_METADATA),
    ("networking.k8s.io/v1", "IngressClass", &ONLY_METADATA),
    ("policy/v1", "PodDisruptionBudget", &POD_DISRUPTION_BUDGET),
    ("rbac.authorization.k8s.io/v1", "Role", &ONLY_METADATA),
    (
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        &ONLY_METADATA,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        &ONLY_METADATA,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        &ONLY_METADATA,
    ),
    ("events.k8s.io/v1", "Event", &ONLY_METADATA),
    ("autoscaling/v1", "HorizontalPodAutoscaler", &ONLY_METADATA),
    (
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        &HORIZONTAL_POD_AUTOSCALER,
    ),
    ("scheduling.k8s.io/v1", "PriorityClass", &ONLY_METADATA),
    ("storage.k8s.io/v1", "StorageClass", &ONLY_METADATA),
    ("discovery.k8s.io/v1", "EndpointSlice", &ONLY_METADATA),
    ("autoscaling/v1", "Scale", &ONLY_METADATA),
];

/// Shared by every type whose only patch-relevant field is `metadata`
/// (ConfigMap, Secret, Role, Lease, NetworkPolicy, Event, …).
static ONLY_METADATA: TypeSchema = TypeSchema {
    name: "(object whose only patch-relevant field is metadata)",
    fields: &[object("metadata", &OBJECT_META)],
};

static CONTAINER: TypeSchema = TypeSchema {
    name: "core.v1.Container",
    fields: &[
        merge_list("env", "name"),
        merge_list("ports", "containerPort"),
        merge_list("volumeDevices", "devicePath"),
        merge_list("volumeMounts", "mountPath"),
    ],
};
static CRON_JOB: TypeSchema = TypeSchema {
    name: "batch.v1.CronJob",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &CRON_JOB_SPEC),
    ],
};
static CRON_JOB_SPEC: TypeSchema = TypeSchema {
    name: "batch.v1.CronJobSpec",
    fields: &[object("jobTemplate", &JOB_TEMPLATE_SPEC)],
};
static DAEMON_SET: TypeSchema = TypeSchema {
    name: "apps.v1.DaemonSet",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &DAEMON_SET_SPEC),
        object("status", &DAEMON_SET_STATUS),
    ],
};
static DAEMON_SET_SPEC: TypeSchema = TypeSchema {
    name: "apps.v1.DaemonSetSpec",
    fields: &[object("template", &POD_TEMPLATE_SPEC)],
};
static DAEMON_SET_STATUS: TypeSchema = TypeSchema {
    name: "apps.v1.DaemonSetStatus",
    fields: &[merge_list("conditions", "type")],
};
static DEPLOYMENT: TypeSchema = TypeSchema {
    name: "apps.v1.Deployment",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &DEPLOYMENT_SPEC),
        object("status", &DEPLOYMENT_STATUS),
    ],
};
static DEPLOYMENT_SPEC: TypeSchema = TypeSchema {
    name: "apps.v1.DeploymentSpec",
    fields: &[object("template", &POD_TEMPLATE_SPEC)],
};
static DEPLOYMENT_STATUS: TypeSchema = TypeSchema {
    name: "apps.v1.DeploymentStatus",
    fields: &[merge_list("conditions", "type")],
};
static EPHEMERAL_CONTAINER: TypeSchema = TypeSchema {
    name: "core.v1.EphemeralContainer",
    fields: &[
        merge_list("env", "name"),
        merge_list("ports", "containerPort"),
        merge_list("volumeDevices", "devicePath"),
        merge_list("volumeMounts", "mountPath"),
    ],
};
static EPHEMERAL_VOLUME_SOURCE: TypeSchema = TypeSchema {
    name: "core.v1.EphemeralVolumeSource",
    fields: &[object("volumeClaimTemplate", &ONLY_METADATA)],
};
static HORIZONTAL_POD_AUTOSCALER: TypeSchema = TypeSchema {
    name: "autoscaling.v2.HorizontalPodAutoscaler",
    fields: &[
        object("metadata", &OBJECT_META),
        object("status", &HORIZONTAL_POD_AUTOSCALER_STATUS),
    ],
};
static HORIZONTAL_POD_AUTOSCALER_STATUS: TypeSchema = TypeSchema {
    name: "autoscaling.v2.HorizontalPodAutoscalerStatus",
    fields: &[merge_list("conditions", "type")],
};
static JOB: TypeSchema = TypeSchema {
    name: "batch.v1.Job",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &JOB_SPEC),
        object("status", &JOB_STATUS),
    ],
};
static JOB_SPEC: TypeSchema = TypeSchema {
    name: "batch.v1.JobSpec",
    fields: &[object("template", &POD_TEMPLATE_SPEC)],
};
static JOB_STATUS: TypeSchema = TypeSchema {
    name: "batch.v1.JobStatus",
    fields: &[merge_list("conditions", "type")],
};
static JOB_TEMPLATE_SPEC: TypeSchema = TypeSchema {
    name: "batch.v1.JobTemplateSpec",
    fields: &[object("metadata", &OBJECT_META), object("spec", &JOB_SPEC)],
};
static NAMESPACE: TypeSchema = TypeSchema {
    name: "core.v1.Namespace",
    fields: &[
        object("metadata", &OBJECT_META),
        object("status", &NAMESPACE_STATUS),
    ],
};
static NAMESPACE_STATUS: TypeSchema = TypeSchema {
    name: "core.v1.NamespaceStatus",
    fields: &[merge_list("conditions", "type")],
};
static NODE: TypeSchema = TypeSchema {
    name: "core.v1.Node",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &NODE_SPEC),
        object("status", &NODE_STATUS),
    ],
};
static NODE_SPEC: TypeSchema = TypeSchema {
    name: "core.v1.NodeSpec",
    fields: &[merge_set("podCIDRs")],
};
static NODE_STATUS: TypeSchema = TypeSchema {
    name: "core.v1.NodeStatus",
    fields: &[
        merge_list("addresses", "type"),
        merge_list("conditions", "type"),
    ],
};
static OBJECT_META: TypeSchema = TypeSchema {
    name: "meta.v1.ObjectMeta",
    fields: &[
        merge_set("finalizers"),
        merge_list("ownerReferences", "uid"),
    ],
};
static PERSISTENT_VOLUME_CLAIM: TypeSchema = TypeSchema {
    name: "core.v1.PersistentVolumeClaim",
    fields: &[
        object("metadata", &OBJECT_META),
        object("status", &PERSISTENT_VOLUME_CLAIM_STATUS),
    ],
};
static PERSISTENT_VOLUME_CLAIM_STATUS: TypeSchema = TypeSchema {
    name: "core.v1.PersistentVolumeClaimStatus",
    fields: &[merge_list("conditions", "type")],
};
static POD: TypeSchema = TypeSchema {
    name: "core.v1.Pod",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &POD_SPEC),
        object("status", &POD_STATUS),
    ],
};
static POD_DISRUPTION_BUDGET: TypeSchema = TypeSchema {
    name: "policy.v1.PodDisruptionBudget",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &POD_DISRUPTION_BUDGET_SPEC),
        object("status", &POD_DISRUPTION_BUDGET_STATUS),
    ],
};
static POD_DISRUPTION_BUDGET_SPEC: TypeSchema = TypeSchema {
    name: "policy.v1.PodDisruptionBudgetSpec",
    fields: &[replace("selector")],
};
static POD_DISRUPTION_BUDGET_STATUS: TypeSchema = TypeSchema {
    name: "policy.v1.PodDisruptionBudgetStatus",
    fields: &[merge_list("conditions", "type")],
};
static POD_SPEC: TypeSchema = TypeSchema {
    name: "core.v1.PodSpec",
    fields: &[
        merge_list_of("containers", "name", &CONTAINER),
        merge_list_of("ephemeralContainers", "name", &EPHEMERAL_CONTAINER),
        merge_list("hostAliases", "ip"),
        merge_list("imagePullSecrets", "name"),
        merge_list_of("initContainers", "name", &CONTAINER),
        merge_list("resourceClaims", "name"),
        merge_list("schedulingGates", "name"),
        merge_list("topologySpreadConstraints", "topologyKey"),
        merge_list_of("volumes", "name", &VOLUME),
    ],
};
static POD_STATUS: TypeSchema = TypeSchema {
    name: "core.v1.PodStatus",
    fields: &[
        merge_list("conditions", "type"),
        merge_list("hostIPs", "ip"),
        merge_list("podIPs", "ip"),
        merge_list("resourceClaimStatuses", "name"),
    ],
};
static POD_TEMPLATE: TypeSchema = TypeSchema {
    name: "core.v1.PodTemplate",
    fields: &[
        object("metadata", &OBJECT_META),
        object("template", &POD_TEMPLATE_SPEC),
    ],
};
pub(super) static POD_TEMPLATE_SPEC: TypeSchema = TypeSchema {
    name: "core.v1.PodTemplateSpec",
    fields: &[object("metadata", &OBJECT_META), object("spec", &POD_SPEC)],
};
static REPLICATION_CONTROLLER: TypeSchema = TypeSchema {
    name: "core.v1.ReplicationController",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &REPLICATION_CONTROLLER_SPEC),
        object("status", &REPLICATION_CONTROLLER_STATUS),
    ],
};
static REPLICATION_CONTROLLER_SPEC: TypeSchema = TypeSchema {
    name: "core.v1.ReplicationControllerSpec",
    fields: &[object("template", &POD_TEMPLATE_SPEC)],
};
static REPLICATION_CONTROLLER_STATUS: TypeSchema = TypeSchema {
    name: "core.v1.ReplicationControllerStatus",
    fields: &[merge_list("conditions", "type")],
};
static REPLICA_SET: TypeSchema = TypeSchema {
    name: "apps.v1.ReplicaSet",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &REPLICA_SET_SPEC),
        object("status", &REPLICA_SET_STATUS),
    ],
};
static REPLICA_SET_SPEC: TypeSchema = TypeSchema {
    name: "apps.v1.ReplicaSetSpec",
    fields: &[object("template", &POD_TEMPLATE_SPEC)],
};
static REPLICA_SET_STATUS: TypeSchema = TypeSchema {
    name: "apps.v1.ReplicaSetStatus",
    fields: &[merge_list("conditions", "type")],
};
static SERVICE: TypeSchema = TypeSchema {
    name: "core.v1.Service",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &SERVICE_SPEC),
        object("status", &SERVICE_STATUS),
    ],
};
static SERVICE_ACCOUNT: TypeSchema = TypeSchema {
    name: "core.v1.ServiceAccount",
    fields: &[
        object("metadata", &OBJECT_META),
        merge_list("secrets", "name"),
    ],
};
static SERVICE_SPEC: TypeSchema = TypeSchema {
    name: "core.v1.ServiceSpec",
    fields: &[merge_list("ports", "port")],
};
static SERVICE_STATUS: TypeSchema = TypeSchema {
    name: "core.v1.ServiceStatus",
    fields: &[merge_list("conditions", "type")],
};
static STATEFUL_SET: TypeSchema = TypeSchema {
    name: "apps.v1.StatefulSet",
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &STATEFUL_SET_SPEC),
        object("status", &STATEFUL_SET_STATUS),
    ],
};
static STATEFUL_SET_SPEC: TypeSchema = TypeSchema {
    name: "apps.v1.StatefulSetSpec",
    fields: &[object("template", &POD_TEMPLATE_SPEC)],
};
static STATEFUL_SET_STATUS: TypeSchema = TypeSchema {
    name: "apps.v1.StatefulSetStatus",
    fields: &[merge_list("conditions", "type")],
};
static VOLUME: TypeSchema = TypeSchema {
    name: "core.v1.Volume",
    fields: &[object("ephemeral", &EPHEMERAL_VOLUME_SOURCE)],
};
