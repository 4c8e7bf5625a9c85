//! Request bodies in the Kubernetes protobuf encoding
//! (`application/vnd.kubernetes.protobuf`), decoded to the JSON the rest of
//! the sandbox works on.
//!
//! kubectl's typed clients (`kubectl create namespace|configmap|secret|
//! deployment|job|role…`, `kubectl drain`'s evictions) send protobuf and do
//! not fall back to JSON on a 415, so a server that wants those commands to
//! work must read it. The envelope is the `k8s\0` magic and a
//! `runtime.Unknown` {typeMeta, raw, contentEncoding, contentType}; `raw` is
//! the object's message. The schemas below hold the field numbers of the
//! `k8s.io/api` `generated.proto` messages those commands write; fields not
//! listed are skipped, as an old server skips fields it does not know.
//!
//! Go's generated marshallers write every non-pointer field, zero or not,
//! while its JSON omits zero `omitempty` fields: a zero scalar is dropped
//! unless the field is marked as a pointer (`?`), where zero was asked for.

use serde_json::{Map, Value, json};

/// The magic prefix of a Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// No `k8s\0` prefix, or the wire format is broken.
    #[error("protobuf body is malformed: {0}")]
    Malformed(&'static str),
    /// A kind this server cannot read from protobuf.
    #[error(
        "the sandbox cannot decode {0} from protobuf; send it as application/json or application/yaml"
    )]
    UnknownKind(String),
}

/// Decodes a protobuf request body into the object's JSON.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or(ProtobufError::Malformed("missing k8s magic prefix"))?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for field in Fields::new(rest) {
        let (num, wire) = field?;
        match (num, wire) {
            (1, Wire::Bytes(tm)) => {
                for f in Fields::new(tm) {
                    match f? {
                        (1, Wire::Bytes(b)) => api_version = String::from_utf8_lossy(b).into(),
                        (2, Wire::Bytes(b)) => kind = String::from_utf8_lossy(b).into(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let schema = top_level(group, &kind).ok_or_else(|| {
        ProtobufError::UnknownKind(if api_version.is_empty() {
            kind.clone()
        } else {
            format!("{api_version} {kind}")
        })
    })?;
    let mut obj = message(raw, schema)?;
    if let Value::Object(m) = &mut obj {
        let mut head = Map::new();
        head.insert("apiVersion".into(), json!(api_version));
        head.insert("kind".into(), json!(kind));
        head.append(m);
        return Ok(Value::Object(head));
    }
    Ok(obj)
}

/// The message schema of a top-level kind.
fn top_level(group: &str, kind: &str) -> Option<&'static str> {
    Some(match (group, kind) {
        ("", "Namespace") => "Namespace",
        ("", "ConfigMap") => "ConfigMap",
        ("", "Secret") => "Secret",
        ("", "ServiceAccount") => "ServiceAccount",
        ("", "Service") => "Service",
        ("", "Pod") => "Pod",
        ("apps", "Deployment") => "Deployment",
        ("batch", "Job") => "Job",
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => "Role",
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => "RoleBinding",
        ("policy", "PodDisruptionBudget") => "PodDisruptionBudget",
        ("policy", "Eviction") => "Eviction",
        ("meta.k8s.io" | "", "DeleteOptions") => "DeleteOptions",
        ("", "Event") => "CoreEvent",
        ("events.k8s.io", "Event") => "Event",
        ("coordination.k8s.io", "Lease") => "Lease",
        ("autoscaling", "Scale") => "Scale",
        ("authentication.k8s.io", "TokenRequest") => "TokenRequest",
        ("certificates.k8s.io", "CertificateSigningRequest") => "CertificateSigningRequest",
        ("authentication.k8s.io", "SelfSubjectReview") => "SelfSubjectReview",
        ("authorization.k8s.io", "SelfSubjectAccessReview") => "SelfSubjectAccessReview",
        _ => return None,
    })
}

/// Field tables: `number name type`, `;`-separated. Types: `s` string,
/// `i` integer, `b` bool, `bytes` (base64 in JSON), `map` string→string,
/// `bmap` string→bytes, `qmap` string→Quantity, `time`, `ios` IntOrString,
/// or a message name. `*` before the type: repeated; `?` after: a pointer
/// whose zero value is kept.
fn schema(name: &str) -> Option<&'static str> {
    Some(match name {
        "ObjectMeta" => {
            "1 name s; 2 generateName s; 3 namespace s; 5 uid s; 6 resourceVersion s; \
             7 generation i; 8 creationTimestamp time; 9 deletionTimestamp time; \
             10 deletionGracePeriodSeconds i?; 11 labels map; 12 annotations map; \
             13 ownerReferences *OwnerReference; 14 finalizers *s"
        }
        "OwnerReference" => {
            "1 kind s; 3 name s; 4 uid s; 5 apiVersion s; 6 controller b?; 7 blockOwnerDeletion b?"
        }
        "Namespace" => "1 metadata ObjectMeta; 2 spec NamespaceSpec",
        // k8s.io/api/certificates/v1 generated.proto; `kubectl certificate
        // approve` writes the whole object back to /approval.
        "CertificateSigningRequest" => {
            "1 metadata ObjectMeta; 2 spec CertificateSigningRequestSpec; \
             3 status CertificateSigningRequestStatus"
        }
        "CertificateSigningRequestSpec" => {
            "1 request bytes; 2 username s; 3 uid s; 4 groups *s; 5 usages *s; \
             7 signerName s; 8 expirationSeconds i?"
        }
        "CertificateSigningRequestStatus" => {
            "1 conditions *CertificateSigningRequestCondition; 2 certificate bytes"
        }
        "CertificateSigningRequestCondition" => {
            "1 type s; 2 reason s; 3 message s; 4 lastUpdateTime time; 5 lastTransitionTime time; \
             6 status s"
        }
        "NamespaceSpec" => "1 finalizers *s",
        "ConfigMap" => "1 metadata ObjectMeta; 2 data map; 3 binaryData bmap; 4 immutable b?",
        "Secret" => {
            "1 metadata ObjectMeta; 2 data bmap; 3 type s; 4 stringData map; 5 immutable b?"
        }
        "ServiceAccount" => {
            "1 metadata ObjectMeta; 2 secrets *ObjectReference; \
             3 imagePullSecrets *LocalObjectReference; 4 automountServiceAccountToken b?"
        }
        "ObjectReference" => {
            "1 kind s; 2 namespace s; 3 name s; 4 uid s; 5 apiVersion s; 6 resourceVersion s; 7 fieldPath s"
        }
        "LocalObjectReference" => "1 name s",
        "Service" => "1 metadata ObjectMeta; 2 spec ServiceSpec",
        "ServiceSpec" => {
            "1 ports *ServicePort; 2 selector map; 3 clusterIP s; 4 type s; 5 externalIPs *s; \
             7 sessionAffinity s; 8 loadBalancerIP s; 10 externalName s; 11 externalTrafficPolicy s; \
             12 healthCheckNodePort i; 13 publishNotReadyAddresses b; 17 ipFamilyPolicy s; \
             18 clusterIPs *s; 19 ipFamilies *s; 22 internalTrafficPolicy s"
        }
        "ServicePort" => {
            "1 name s; 2 protocol s; 3 port i; 4 targetPort ios; 5 nodePort i; 6 appProtocol s"
        }
        "Pod" => "1 metadata ObjectMeta; 2 spec PodSpec",
        "PodTemplateSpec" => "1 metadata ObjectMeta; 2 spec PodSpec",
        "PodSpec" => {
            "2 containers *Container; 3 restartPolicy s; 4 terminationGracePeriodSeconds i?; \
             5 activeDeadlineSeconds i?; 6 dnsPolicy s; 7 nodeSelector map; 8 serviceAccountName s; \
             10 nodeName s; 11 hostNetwork b; 12 hostPID b; 13 hostIPC b; \
             15 imagePullSecrets *LocalObjectReference; 16 hostname s; 17 subdomain s; \
             19 schedulerName s; 20 initContainers *Container; 21 automountServiceAccountToken b?; \
             22 tolerations *Toleration; 24 priorityClassName s; 25 priority i?; \
             27 shareProcessNamespace b?; 29 runtimeClassName s?; 30 enableServiceLinks b?"
        }
        "Container" => {
            "1 name s; 2 image s; 3 command *s; 4 args *s; 5 workingDir s; 6 ports *ContainerPort; \
             7 env *EnvVar; 8 resources ResourceRequirements; 13 terminationMessagePath s; \
             14 imagePullPolicy s; 16 stdin b; 17 stdinOnce b; 18 tty b; 20 terminationMessagePolicy s"
        }
        "ContainerPort" => "1 name s; 2 hostPort i; 3 containerPort i; 4 protocol s; 5 hostIP s",
        "EnvVar" => "1 name s; 2 value s",
        "ResourceRequirements" => "1 limits qmap; 2 requests qmap",
        "Toleration" => "1 key s; 2 operator s; 3 value s; 4 effect s; 5 tolerationSeconds i?",
        "LabelSelector" => "1 matchLabels map; 2 matchExpressions *LabelSelectorRequirement",
        "LabelSelectorRequirement" => "1 key s; 2 operator s; 3 values *s",
        "Deployment" => "1 metadata ObjectMeta; 2 spec DeploymentSpec",
        "DeploymentSpec" => {
            "1 replicas i?; 2 selector LabelSelector; 3 template PodTemplateSpec; \
             4 strategy DeploymentStrategy; 5 minReadySeconds i; 6 revisionHistoryLimit i?; \
             7 paused b; 9 progressDeadlineSeconds i?"
        }
        "DeploymentStrategy" => "1 type s; 2 rollingUpdate RollingUpdateDeployment",
        "RollingUpdateDeployment" => "1 maxUnavailable ios; 2 maxSurge ios",
        "Job" => "1 metadata ObjectMeta; 2 spec JobSpec",
        "JobSpec" => {
            "1 parallelism i?; 2 completions i?; 3 activeDeadlineSeconds i?; 4 selector LabelSelector; \
             5 manualSelector b?; 6 template PodTemplateSpec; 7 backoffLimit i?; \
             8 ttlSecondsAfterFinished i?; 9 completionMode s?; 10 suspend b?"
        }
        "Role" => "1 metadata ObjectMeta; 2 rules *PolicyRule",
        "PolicyRule" => {
            "1 verbs *s; 2 apiGroups *s; 3 resources *s; 4 resourceNames *s; 5 nonResourceURLs *s"
        }
        "RoleBinding" => "1 metadata ObjectMeta; 2 subjects *Subject; 3 roleRef RoleRef",
        "Subject" => "1 kind s; 2 apiGroup s; 3 name s; 4 namespace s",
        "RoleRef" => "1 apiGroup s; 2 kind s; 3 name s",
        "PodDisruptionBudget" => "1 metadata ObjectMeta; 2 spec PodDisruptionBudgetSpec",
        "PodDisruptionBudgetSpec" => {
            "1 minAvailable ios; 2 selector LabelSelector; 3 maxUnavailable ios; \
             4 unhealthyPodEvictionPolicy s?"
        }
        "Eviction" => "1 metadata ObjectMeta; 2 deleteOptions DeleteOptions",
        "DeleteOptions" => {
            "1 gracePeriodSeconds i?; 2 preconditions Preconditions; 3 orphanDependents b?; \
             4 propagationPolicy s?; 5 dryRun *s"
        }
        "Preconditions" => "1 uid s?; 2 resourceVersion s?",
        // What every Go controller's event recorder and leader election write.
        "CoreEvent" => {
            "1 metadata ObjectMeta; 2 involvedObject ObjectReference; 3 reason s; 4 message s; \
             5 source EventSource; 6 firstTimestamp time; 7 lastTimestamp time; 8 count i; \
             9 type s; 10 eventTime microtime; 11 series EventSeries; 12 action s; \
             13 related ObjectReference; 14 reportingComponent s; 15 reportingInstance s"
        }
        "Event" => {
            "1 metadata ObjectMeta; 2 eventTime microtime; 3 series EventSeries; \
             4 reportingController s; 5 reportingInstance s; 6 action s; 7 reason s; \
             8 regarding ObjectReference; 9 related ObjectReference; 10 note s; 11 type s; \
             12 deprecatedSource EventSource; 13 deprecatedFirstTimestamp time; \
             14 deprecatedLastTimestamp time; 15 deprecatedCount i"
        }
        "EventSource" => "1 component s; 2 host s",
        "EventSeries" => "1 count i; 2 lastObservedTime microtime",
        "Lease" => "1 metadata ObjectMeta; 2 spec LeaseSpec",
        // `replicas` is not a pointer, but zero is what scaling to zero sends.
        "Scale" => "1 metadata ObjectMeta; 2 spec ScaleSpec",
        "ScaleSpec" => "1 replicas i?",
        "LeaseSpec" => {
            "1 holderIdentity s?; 2 leaseDurationSeconds i?; 3 acquireTime microtime; \
             4 renewTime microtime; 5 leaseTransitions i?; 6 strategy s?; 7 preferredHolder s?"
        }
        "TokenRequest" => "1 metadata ObjectMeta; 2 spec TokenRequestSpec",
        "TokenRequestSpec" => {
            "1 audiences *s; 3 boundObjectRef BoundObjectReference; 4 expirationSeconds i?"
        }
        "BoundObjectReference" => "1 kind s; 2 apiVersion s; 3 name s; 4 uid s",
        "SelfSubjectReview" => "1 metadata ObjectMeta",
        "SelfSubjectAccessReview" => "1 metadata ObjectMeta; 2 spec SelfSubjectAccessReviewSpec",
        "SelfSubjectAccessReviewSpec" => {
            "1 resourceAttributes ResourceAttributes; 2 nonResourceAttributes NonResourceAttributes"
        }
        "ResourceAttributes" => {
            "1 namespace s; 2 verb s; 3 group s; 4 version s; 5 resource s; 6 subresource s; 7 name s"
        }
        "NonResourceAttributes" => "1 path s; 2 verb s",
        _ => return None,
    })
}

/// One field of a message's table.
struct FieldSpec<'a> {
    name: &'a str,
    ty: &'a str,
    repeated: bool,
    pointer: bool,
}

fn field_spec(table: &'static str, num: u64) -> Option<FieldSpec<'static>> {
    table.split(';').find_map(|entry| {
        let mut parts = entry.split_whitespace();
        let n: u64 = parts.next()?.parse().ok()?;
        if n != num {
            return None;
        }
        let name = parts.next()?;
        let mut ty = parts.next()?;
        let repeated = ty.starts_with('*');
        ty = ty.trim_start_matches('*');
        let pointer = ty.ends_with('?');
        ty = ty.trim_end_matches('?');
        Some(FieldSpec {
            name,
            ty,
            repeated,
            pointer,
        })
    })
}

fn message(bytes: &[u8], name: &str) -> Result<Value, ProtobufError> {
    let Some(table) = schema(name) else {
        return Ok(Value::Null);
    };
    let mut out = Map::new();
    for field in Fields::new(bytes) {
        let (num, wire) = field?;
        let Some(spec) = field_spec(table, num) else {
            continue;
        };
        let value = scalar_or_message(&spec, wire)?;
        if spec.repeated {
            let list = out
                .entry(spec.name.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = list {
                a.push(value);
            }
            continue;
        }
        if spec.ty.ends_with("map") {
            // Map entries arrive one by one as repeated key/value messages.
            let m = out
                .entry(spec.name.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let (Value::Object(m), Value::Object(entry)) = (m, value) {
                m.extend(entry);
            }
            continue;
        }
        if !spec.pointer && is_zero(&value) {
            out.remove(spec.name);
            continue;
        }
        out.insert(spec.name.to_string(), value);
    }
    Ok(Value::Object(out))
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn scalar_or_message(spec: &FieldSpec<'_>, wire: Wire<'_>) -> Result<Value, ProtobufError> {
    let text = |b: &[u8]| Value::String(String::from_utf8_lossy(b).into_owned());
    Ok(match (spec.ty, wire) {
        ("s", Wire::Bytes(b)) => text(b),
        // int64 negatives arrive as ten-byte two's complement varints.
        ("i", Wire::Varint(v)) => json!(v as i64),
        ("b", Wire::Varint(v)) => json!(v != 0),
        ("bytes", Wire::Bytes(b)) => json!(base64(b)),
        ("map" | "bmap" | "qmap", Wire::Bytes(b)) => {
            let mut key = String::new();
            let mut value = Value::String(String::new());
            for f in Fields::new(b) {
                match f? {
                    (1, Wire::Bytes(k)) => key = String::from_utf8_lossy(k).into_owned(),
                    (2, Wire::Bytes(v)) => {
                        value = match spec.ty {
                            "bmap" => json!(base64(v)),
                            "qmap" => quantity(v)?,
                            _ => text(v),
                        }
                    }
                    _ => {}
                }
            }
            let mut m = Map::new();
            m.insert(key, value);
            Value::Object(m)
        }
        ("time", Wire::Bytes(b)) => time(b, false)?,
        ("microtime", Wire::Bytes(b)) => time(b, true)?,
        ("ios", Wire::Bytes(b)) => int_or_string(b)?,
        (msg, Wire::Bytes(b)) if schema(msg).is_some() => message(b, msg)?,
        _ => {
            return Err(ProtobufError::Malformed(
                "field has an unexpected wire type",
            ));
        }
    })
}

/// `resource.Quantity`: `{1: string}`.
fn quantity(b: &[u8]) -> Result<Value, ProtobufError> {
    for f in Fields::new(b) {
        if let (1, Wire::Bytes(s)) = f? {
            return Ok(json!(String::from_utf8_lossy(s)));
        }
    }
    Ok(json!("0"))
}

/// `intstr.IntOrString`: `{1: type (0 int, 1 string), 2: intVal, 3: strVal}`.
fn int_or_string(b: &[u8]) -> Result<Value, ProtobufError> {
    let (mut ty, mut int, mut s) = (0, 0i64, String::new());
    for f in Fields::new(b) {
        match f? {
            (1, Wire::Varint(v)) => ty = v,
            (2, Wire::Varint(v)) => int = v as i64,
            (3, Wire::Bytes(v)) => s = String::from_utf8_lossy(v).into_owned(),
            _ => {}
        }
    }
    Ok(if ty == 1 { json!(s) } else { json!(int) })
}

/// `metav1.Time` / `MicroTime`: `{1: seconds, 2: nanos}`; the zero time is
/// absent in JSON. MicroTime prints microseconds, as Go's RFC3339Micro.
fn time(b: &[u8], micro: bool) -> Result<Value, ProtobufError> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    for f in Fields::new(b) {
        match f? {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = v as i64,
            _ => {}
        }
    }
    if seconds == 0 && nanos == 0 {
        return Ok(Value::Null);
    }
    let Ok(t) = jiff::Timestamp::from_second(seconds) else {
        return Ok(Value::Null);
    };
    Ok(json!(if micro {
        format!("{}.{:06}Z", t.strftime("%Y-%m-%dT%H:%M:%S"), nanos / 1000)
    } else {
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }))
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A field's payload on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Iterates over the (field number, payload) pairs of a message.
struct Fields<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Fields {
            rest: bytes,
            failed: false,
        }
    }

    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut v = 0u64;
        for (i, b) in self.rest.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.rest = &self.rest[i + 1..];
                return Ok(v);
            }
        }
        Err(ProtobufError::Malformed("truncated varint"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if self.rest.len() < n {
            return Err(ProtobufError::Malformed("field runs past the end"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn next_field(&mut self) -> Result<(u64, Wire<'a>), ProtobufError> {
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| ProtobufError::Malformed("length too large"))?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err(ProtobufError::Malformed("unknown wire type")),
        };
        Ok((key >> 3, wire))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>), ProtobufError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = self.next_field();
        self.failed = r.is_err();
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal encoder for the tests: field `n` with a payload.
    fn field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = varint((n << 3) | 2);
        out.extend(varint(payload.len() as u64));
        out.extend_from_slice(payload);
        out
    }

    fn int_field(n: u64, v: u64) -> Vec<u8> {
        let mut out = varint(n << 3);
        out.extend(varint(v));
        out
    }

    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
        let mut body = MAGIC.to_vec();
        body.extend(field(1, &type_meta));
        body.extend(field(2, raw));
        body.extend(field(3, b""));
        body.extend(field(4, b""));
        body
    }

    fn meta(name: &str) -> Vec<u8> {
        // As Go writes it: every string, the zero generation, an empty time.
        [
            field(1, name.as_bytes()),
            field(2, b""),
            field(3, b""),
            int_field(7, 0),
            field(8, b""),
            field(11, &[field(1, b"app"), field(2, b"web")].concat()),
        ]
        .concat()
    }

    #[test]
    fn a_config_map_decodes_with_its_data_and_without_zero_fields() {
        let raw = [
            field(1, &meta("settings")),
            field(2, &[field(1, b"mode"), field(2, b"fast")].concat()),
            field(2, &[field(1, b"level"), field(2, b"3")].concat()),
        ]
        .concat();
        let obj = decode(&envelope("v1", "ConfigMap", &raw)).expect("decodes");
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings", "labels": {"app": "web"}},
                   "data": {"mode": "fast", "level": "3"}})
        );
    }

    #[test]
    fn deployment_keeps_an_explicit_zero_replicas_and_reads_ports_and_repeated_empty_strings() {
        let container = [
            field(1, b"web"),
            field(2, b"nginx"),
            field(6, &[int_field(2, 0), int_field(3, 80)].concat()),
            int_field(16, 0),
        ]
        .concat();
        let spec = [
            int_field(1, 0),
            field(3, &field(2, &field(2, &container))),
            int_field(5, 0),
        ]
        .concat();
        let raw = [field(1, &meta("web")), field(2, &spec)].concat();
        let obj = decode(&envelope("apps/v1", "Deployment", &raw)).expect("decodes");
        assert_eq!(obj["spec"]["replicas"], 0);
        assert!(obj["spec"].get("minReadySeconds").is_none(), "{obj}");
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]}])
        );
        let rule = [field(1, b"get"), field(2, b""), field(3, b"pods")].concat();
        let role = decode(&envelope(
            "rbac.authorization.k8s.io/v1",
            "Role",
            &[field(1, &meta("r")), field(2, &rule)].concat(),
        ))
        .expect("decodes");
        assert_eq!(
            role["rules"],
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}])
        );
    }

    #[test]
    fn secrets_data_is_base64_and_int_or_string_keeps_its_type() {
        let raw = [
            field(1, &meta("t")),
            field(2, &[field(1, b"value"), field(2, b"s3cr3t")].concat()),
            field(3, b"Opaque"),
        ]
        .concat();
        let obj = decode(&envelope("v1", "Secret", &raw)).expect("decodes");
        assert_eq!(obj["data"]["value"], "czNjcjN0");
        assert_eq!(obj["type"], "Opaque");
        let pdb_spec = [
            field(1, &[int_field(1, 1), field(3, b"50%")].concat()),
            field(3, &[int_field(1, 0), int_field(2, 2)].concat()),
        ]
        .concat();
        let pdb = decode(&envelope(
            "policy/v1",
            "PodDisruptionBudget",
            &[field(1, &meta("p")), field(2, &pdb_spec)].concat(),
        ))
        .expect("decodes");
        assert_eq!(pdb["spec"]["minAvailable"], "50%");
        assert_eq!(pdb["spec"]["maxUnavailable"], 2);
    }

    #[test]
    fn bodies_that_are_not_ours_to_read_are_refused_with_a_reason() {
        assert_eq!(
            decode(b"{}"),
            Err(ProtobufError::Malformed("missing k8s magic prefix"))
        );
        let e = decode(&envelope("batch/v1", "CronJob", &[])).expect_err("unknown");
        assert!(e.to_string().contains("batch/v1 CronJob"), "{e}");
        let mut broken = envelope("v1", "ConfigMap", &field(1, &meta("x")));
        broken.truncate(broken.len() - 8);
        assert!(decode(&broken).is_err());
    }

    #[test]
    fn leases_carry_micro_times_as_leader_election_writes_them() {
        let renew = [int_field(1, 1_700_000_000), int_field(2, 123_456_789)].concat();
        let spec = [
            field(1, b"agentdeck-0"),
            int_field(2, 15),
            field(4, &renew),
            int_field(5, 0),
        ]
        .concat();
        let lease = decode(&envelope(
            "coordination.k8s.io/v1",
            "Lease",
            &[field(1, &meta("leader")), field(2, &spec)].concat(),
        ))
        .expect("decodes");
        assert_eq!(
            lease["spec"],
            json!({"holderIdentity": "agentdeck-0", "leaseDurationSeconds": 15,
                   "renewTime": "2023-11-14T22:13:20.123456Z", "leaseTransitions": 0})
        );
    }

    #[test]
    fn base64_pads_like_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"s3cr3t"), "czNjcjN0");
    }
}
