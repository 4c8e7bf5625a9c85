//! A container's environment as the kubelet builds it
//! (`makeEnvironmentVariables`): the node's own variables, then `envFrom`,
//! then `env` in order, with `$(VAR)` references expanded against what came
//! before, and `valueFrom` read from the pod (downward API), Secrets and
//! ConfigMaps. Pure over a lookup of objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// Reads `secrets` or `configmaps` by name in the pod's namespace.
pub(super) type Lookup<'a> = &'a dyn Fn(&str, &str) -> Option<Arc<Value>>;

/// The pod as the downward API sees it: the object, plus the addresses the
/// node has assigned (which the stored object may not show yet).
pub(super) struct PodFields<'a> {
    pub pod: &'a Value,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
}

impl PodFields<'_> {
    fn meta_str(&self, key: &str) -> String {
        self.pod["metadata"][key]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The value of a `fieldRef.fieldPath`, or None when it is not one the
    /// downward API supports.
    pub fn field(&self, path: &str) -> Option<String> {
        let map_entry = |prefix: &str| -> Option<(String, String)> {
            let key = path
                .strip_prefix(prefix)?
                .strip_prefix("['")?
                .strip_suffix("']")?;
            Some((prefix.rsplit('.').next()?.to_string(), key.to_string()))
        };
        for prefix in ["metadata.labels", "metadata.annotations"] {
            if let Some((map, key)) = map_entry(prefix) {
                return Some(
                    self.pod["metadata"][map][key]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
        }
        Some(match path {
            "metadata.name" => self.meta_str("name"),
            "metadata.namespace" => self.meta_str("namespace"),
            "metadata.uid" => self.meta_str("uid"),
            "spec.nodeName" => self.pod["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            "spec.serviceAccountName" => self.pod["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            "status.podIP" | "status.podIPs" => self.pod_ip.to_string(),
            "status.hostIP" | "status.hostIPs" => self.host_ip.to_string(),
            _ => return None,
        })
    }

    /// A downward API volume file: single fields as [`PodFields::field`],
    /// and whole label/annotation maps as `key="value"` lines, sorted.
    pub fn volume_field(&self, path: &str) -> Option<String> {
        match path {
            "metadata.labels" | "metadata.annotations" => {
                let key = path.trim_start_matches("metadata.");
                let lines: Vec<String> = self.pod["metadata"][key]
                    .as_object()
                    .map(|m| {
                        let sorted: BTreeMap<&String, &Value> = m.iter().collect();
                        sorted
                            .into_iter()
                            .map(|(k, v)| {
                                let v = v.as_str().unwrap_or_default();
                                format!("{k}={}", Value::String(v.to_string()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Some(lines.join("\n"))
            }
            _ => self.field(path),
        }
    }
}

/// The `data` of a Secret (base64-decoded, plus any `stringData`) or a
/// ConfigMap (`data`, plus base64-decoded `binaryData`).
pub(super) fn object_data(resource: &str, obj: &Value) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let (encoded, plain) = if resource == "secrets" {
        ("data", "stringData")
    } else {
        ("binaryData", "data")
    };
    if let Some(m) = obj.get(encoded).and_then(Value::as_object) {
        for (k, v) in m {
            if let Some(bytes) = v.as_str().and_then(decode_base64) {
                out.insert(k.clone(), bytes);
            }
        }
    }
    if let Some(m) = obj.get(plain).and_then(Value::as_object) {
        for (k, v) in m {
            if let Some(s) = v.as_str() {
                out.insert(k.clone(), s.as_bytes().to_vec());
            }
        }
    }
    out
}

/// Standard base64 (padding optional, whitespace ignored).
pub(super) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Expands `$(VAR)` with the variables defined so far; `$$` is a literal `$`
/// and unknown references stay as written (Kubernetes' expansion rules).
pub(super) fn expand(input: &str, vars: &[(String, String)]) -> String {
    let lookup = |name: &str| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match bytes[cursor + 1] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(end) => {
                        let name = &rest[1..end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        end + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // Not a reference: keep `$` and let the next character be copied.
                    out.push('$');
                    0
                }
            };
            cursor += advance + 1;
            checkpoint = cursor;
        } else {
            cursor += 1;
        }
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    out
}

/// The Services whose variables every pod gets, whatever its
/// `enableServiceLinks` (the kubelet's `masterServices`), in `default`.
const MASTER_SERVICES: [&str; 1] = ["kubernetes"];

/// The service-link variables of a pod in `namespace`, as the kubelet's
/// `getServiceEnvVarMap` and `envvars.FromServices` make them: for each
/// Service with a cluster IP (not headless, not ExternalName) of the pod's
/// namespace when `enable_links`, and for `default/kubernetes` always,
/// `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (first port),
/// `<NAME>_SERVICE_PORT_<PORTNAME>` (each named port), and the
/// Docker-link variables `<NAME>_PORT` (first port, `tcp://ip:port`),
/// `<NAME>_PORT_<port>_<PROTO>`, `…_PROTO`, `…_PORT`, `…_ADDR`. Names are
/// upper-cased with `-` turned into `_`. Services are taken in name order
/// (the kubelet's map has none); a namespace's own `kubernetes` Service
/// gives way to the master one.
pub(super) fn service_env(
    services: &[Arc<Value>],
    namespace: &str,
    enable_links: bool,
) -> Vec<(String, String)> {
    let mut chosen: BTreeMap<&str, &Value> = BTreeMap::new();
    for svc in services {
        let meta = &svc["metadata"];
        let (ns, name) = (
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default(),
        );
        let ip = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
        if ip.is_empty() || ip == "None" {
            continue;
        }
        if ns == "default" && MASTER_SERVICES.contains(&name) {
            chosen.insert(name, svc);
        } else if ns == namespace && enable_links {
            chosen.entry(name).or_insert(svc);
        }
    }
    let mut out = Vec::new();
    for (name, svc) in chosen {
        let ports: Vec<&Value> = svc["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let Some(first) = ports.first() else { continue };
        let prefix = name.to_ascii_uppercase().replace('-', "_");
        let ip = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
        let port_of = |p: &Value| p["port"].as_i64().unwrap_or_default();
        out.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
        out.push((format!("{prefix}_SERVICE_PORT"), port_of(first).to_string()));
        for p in &ports {
            if let Some(port_name) = p["name"].as_str().filter(|n| !n.is_empty()) {
                out.push((
                    format!(
                        "{prefix}_SERVICE_PORT_{}",
                        port_name.to_ascii_uppercase().replace('-', "_")
                    ),
                    port_of(p).to_string(),
                ));
            }
        }
        // `net.JoinHostPort`: IPv6 addresses in brackets.
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        for (i, p) in ports.iter().enumerate() {
            let proto = p["protocol"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("TCP");
            let lower = proto.to_ascii_lowercase();
            let url = format!("{lower}://{host}:{}", port_of(p));
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!(
                "{prefix}_PORT_{}_{}",
                port_of(p),
                proto.to_ascii_uppercase()
            );
            out.push((format!("{pp}_PROTO"), lower));
            out.push((format!("{pp}_PORT"), port_of(p).to_string()));
            out.push((format!("{pp}_ADDR"), ip.to_string()));
            out.push((pp, url));
        }
    }
    out
}

fn set(env: &mut Vec<(String, String)>, name: &str, value: String) {
    match env.iter_mut().find(|(k, _)| k == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name.to_string(), value)),
    }
}

fn kind_name(resource: &str) -> (&'static str, &'static str) {
    if resource == "secrets" {
        ("secret", "Secret")
    } else {
        ("configmap", "ConfigMap")
    }
}

/// The environment of `container`: `base` (the node's variables), then
/// `envFrom`, then `env`. An error is the message the kubelet gives with
/// `CreateContainerConfigError`.
pub(super) fn container_env(
    fields: &PodFields<'_>,
    container: &Value,
    base: Vec<(String, String)>,
    lookup: Lookup<'_>,
) -> Result<Vec<(String, String)>, String> {
    let ns = fields.pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let mut env = base;
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = source["prefix"].as_str().unwrap_or_default();
        for (field, resource) in [("configMapRef", "configmaps"), ("secretRef", "secrets")] {
            let Some(r) = source.get(field) else { continue };
            let name = r["name"].as_str().unwrap_or_default();
            let optional = r["optional"].as_bool().unwrap_or(false);
            match lookup(resource, name) {
                Some(obj) => {
                    for (k, v) in object_data(resource, &obj) {
                        if k.is_empty() || k.contains('=') {
                            continue;
                        }
                        set(
                            &mut env,
                            &format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        );
                    }
                }
                None if optional => {}
                None => return Err(format!("{} \"{name}\" not found", kind_name(resource).0)),
            }
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let Some(name) = var["name"].as_str() else {
            continue;
        };
        let Some(from) = var.get("valueFrom") else {
            let value = expand(var["value"].as_str().unwrap_or_default(), &env);
            set(&mut env, name, value);
            continue;
        };
        if let Some(path) = from.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
            let value = fields
                .field(path)
                .ok_or_else(|| format!("unsupported fieldPath: {path}"))?;
            set(&mut env, name, value);
            continue;
        }
        if let Some(r) = from.get("resourceFieldRef") {
            set(&mut env, name, resource_field(container, r));
            continue;
        }
        for (field, resource) in [
            ("secretKeyRef", "secrets"),
            ("configMapKeyRef", "configmaps"),
        ] {
            let Some(r) = from.get(field) else { continue };
            let obj_name = r["name"].as_str().unwrap_or_default();
            let key = r["key"].as_str().unwrap_or_default();
            let optional = r["optional"].as_bool().unwrap_or(false);
            let (lower, kind) = kind_name(resource);
            match lookup(resource, obj_name) {
                None if optional => {}
                None => return Err(format!("{lower} \"{obj_name}\" not found")),
                Some(obj) => match object_data(resource, &obj).remove(key) {
                    Some(v) => set(&mut env, name, String::from_utf8_lossy(&v).into_owned()),
                    None if optional => {}
                    None => {
                        return Err(format!("couldn't find key {key} in {kind} {ns}/{obj_name}"));
                    }
                },
            }
        }
    }
    Ok(env)
}

/// The node's capacity, for `limits.*` a container does not set (what the
/// sandbox's nodes advertise).
const NODE_CPU: f64 = 8.0;
const NODE_MEMORY: f64 = 32.0 * 1024.0 * 1024.0 * 1024.0;

/// `resourceFieldRef`: the container's request or limit (limits default to
/// the node's allocatable), divided by the divisor and rounded up.
fn resource_field(container: &Value, r: &Value) -> String {
    let resource = r["resource"].as_str().unwrap_or_default();
    let Some((kind, what)) = resource.split_once('.') else {
        return String::new();
    };
    let set = container["resources"][kind][what]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            container["resources"][kind][what]
                .as_f64()
                .map(|f| f.to_string())
        })
        .and_then(|q| parse_quantity(&q));
    let value = set.unwrap_or(match (kind, what) {
        ("limits", "cpu") => NODE_CPU,
        ("limits", "memory") => NODE_MEMORY,
        _ => 0.0,
    });
    let divisor = r["divisor"]
        .as_str()
        .and_then(parse_quantity)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    format!("{}", (value / divisor).ceil() as i64)
}

/// A Kubernetes quantity (`500m`, `2Gi`, `1e3`) as a number.
fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * factor)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web-0", "namespace": "prod", "uid": "u-1",
                         "labels": {"app": "web", "tier": "front"},
                         "annotations": {"note": "a \"quoted\" value"}},
            "spec": {"nodeName": "sandbox-node-0", "serviceAccountName": "agents"}
        })
    }

    fn store(resource: &str, name: &str) -> Option<Arc<Value>> {
        match (resource, name) {
            ("secrets", "token") => Some(Arc::new(
                json!({"data": {"value": "czNjcjN0", "other": "eA=="}}),
            )),
            ("configmaps", "settings") => Some(Arc::new(
                json!({"data": {"LEVEL": "debug", "MODE": "fast"}}),
            )),
            _ => None,
        }
    }

    fn env_of(container: Value) -> Result<Vec<(String, String)>, String> {
        let p = pod();
        let fields = PodFields {
            pod: &p,
            pod_ip: "127.1.0.7",
            host_ip: "127.0.0.1",
        };
        container_env(
            &fields,
            &container,
            vec![("BASE".into(), "b".into())],
            &store,
        )
    }

    fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn field_refs_read_the_pod_and_the_assigned_addresses() {
        let env = env_of(json!({"env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
            {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
        ]}))
        .expect("resolves");
        let want = [
            ("NAME", "web-0"),
            ("NS", "prod"),
            ("UID", "u-1"),
            ("APP", "web"),
            ("NOTE", "a \"quoted\" value"),
            ("NODE", "sandbox-node-0"),
            ("SA", "agents"),
            ("IP", "127.1.0.7"),
            ("IPS", "127.1.0.7"),
            ("HOST", "127.0.0.1"),
        ];
        for (k, v) in want {
            assert_eq!(get(&env, k), Some(v), "{k}");
        }
        assert_eq!(get(&env, "BASE"), Some("b"));
    }

    #[test]
    fn secret_and_config_map_keys_are_read_and_decoded() {
        let env = env_of(json!({"env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "value"}}},
            {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}}},
            {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k", "optional": true}}},
            {"name": "NOKEY", "valueFrom": {"secretKeyRef": {"name": "token", "key": "nope", "optional": true}}}
        ]}))
        .expect("resolves");
        assert_eq!(get(&env, "TOKEN"), Some("s3cr3t"));
        assert_eq!(get(&env, "LEVEL"), Some("debug"));
        assert_eq!(get(&env, "GONE"), None);
        assert_eq!(get(&env, "NOKEY"), None);
    }

    #[test]
    fn missing_required_sources_are_errors_worded_as_the_kubelet_words_them() {
        let e = env_of(
            json!({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k"}}}]}),
        );
        assert_eq!(e, Err("secret \"missing\" not found".to_string()));
        let e = env_of(
            json!({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "token", "key": "k"}}}]}),
        );
        assert_eq!(
            e,
            Err("couldn't find key k in Secret prod/token".to_string())
        );
        let e = env_of(
            json!({"env": [{"name": "T", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}]}),
        );
        assert_eq!(
            e,
            Err("couldn't find key k in ConfigMap prod/settings".to_string())
        );
        let e = env_of(json!({"envFrom": [{"configMapRef": {"name": "nope"}}]}));
        assert_eq!(e, Err("configmap \"nope\" not found".to_string()));
        assert!(
            env_of(json!({"envFrom": [{"configMapRef": {"name": "nope", "optional": true}}]}))
                .is_ok()
        );
    }

    #[test]
    fn env_from_comes_first_with_its_prefix_and_env_overrides_it() {
        let env = env_of(json!({
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}, {"secretRef": {"name": "token"}}],
            "env": [{"name": "APP_MODE", "value": "slow"}]
        }))
        .expect("resolves");
        assert_eq!(get(&env, "APP_LEVEL"), Some("debug"));
        assert_eq!(get(&env, "APP_MODE"), Some("slow"));
        assert_eq!(get(&env, "value"), Some("s3cr3t"));
        assert_eq!(get(&env, "other"), Some("x"));
    }

    #[test]
    fn values_expand_references_to_earlier_variables() {
        let env = env_of(json!({"env": [
            {"name": "A", "value": "x"},
            {"name": "B", "value": "$(A)-$(BASE)-$(LATER)-$$(A)-$-$(open"},
            {"name": "LATER", "value": "z"}
        ]}))
        .expect("resolves");
        assert_eq!(get(&env, "B"), Some("x-b-$(LATER)-$(A)-$-$(open"));
    }

    #[test]
    fn resource_fields_read_limits_and_default_to_the_node() {
        let c = json!({"resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}});
        let r = |res: &str, div: Option<&str>| {
            resource_field(&c, &json!({"resource": res, "divisor": div}))
        };
        assert_eq!(r("limits.memory", None), "67108864");
        assert_eq!(r("limits.memory", Some("1Mi")), "64");
        assert_eq!(r("requests.cpu", None), "1");
        assert_eq!(r("requests.cpu", Some("1m")), "250");
        assert_eq!(r("limits.cpu", None), "8");
    }

    fn svc(ns: &str, name: &str, ip: &str, ports: Value) -> Arc<Value> {
        Arc::new(json!({"metadata": {"namespace": ns, "name": name},
                        "spec": {"clusterIP": ip, "ports": ports}}))
    }

    fn services() -> Vec<Arc<Value>> {
        vec![
            svc(
                "default",
                "kubernetes",
                "10.96.0.1",
                json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]),
            ),
            svc(
                "prod",
                "agentdeck-controller",
                "10.96.0.5",
                json!([{"name": "http", "port": 8080, "protocol": "TCP"},
                       {"name": "dns-udp", "port": 53, "protocol": "UDP"}]),
            ),
            svc("prod", "db", "None", json!([{"port": 5432}])),
            svc("prod", "external", "", json!([{"port": 80}])),
            svc("other", "web", "10.96.0.9", json!([{"port": 80}])),
        ]
    }

    #[test]
    fn service_links_are_the_kubelets_variables_for_the_pods_namespace() {
        let env = service_env(&services(), "prod", true);
        let got: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let want = BTreeMap::from([
            ("AGENTDECK_CONTROLLER_SERVICE_HOST", "10.96.0.5"),
            ("AGENTDECK_CONTROLLER_SERVICE_PORT", "8080"),
            ("AGENTDECK_CONTROLLER_SERVICE_PORT_HTTP", "8080"),
            ("AGENTDECK_CONTROLLER_SERVICE_PORT_DNS_UDP", "53"),
            ("AGENTDECK_CONTROLLER_PORT", "tcp://10.96.0.5:8080"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP", "tcp://10.96.0.5:8080"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP_PROTO", "tcp"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP_PORT", "8080"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP_ADDR", "10.96.0.5"),
            ("AGENTDECK_CONTROLLER_PORT_53_UDP", "udp://10.96.0.5:53"),
            ("AGENTDECK_CONTROLLER_PORT_53_UDP_PROTO", "udp"),
            ("AGENTDECK_CONTROLLER_PORT_53_UDP_PORT", "53"),
            ("AGENTDECK_CONTROLLER_PORT_53_UDP_ADDR", "10.96.0.5"),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ]);
        assert_eq!(got, want);
        assert_eq!(env.len(), want.len(), "no variable twice");
    }

    #[test]
    fn without_service_links_only_the_master_service_is_injected() {
        let env = service_env(&services(), "prod", false);
        assert!(
            env.iter().all(|(k, _)| k.starts_with("KUBERNETES_")),
            "{env:?}"
        );
        assert_eq!(env.len(), 8);
        // A pod in `default` gets the master Service once, links or not.
        let env = service_env(&services(), "default", true);
        assert_eq!(env.len(), 8, "{env:?}");
        // And no Service without a cluster IP, in any namespace.
        assert!(
            service_env(&services(), "other", true)
                .iter()
                .any(|(k, v)| k == "WEB_PORT" && v == "tcp://10.96.0.9:80")
        );
    }

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(decode_base64("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(decode_base64("aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(decode_base64(""), Some(vec![]));
        assert_eq!(decode_base64("a*"), None);
    }

    #[test]
    fn downward_volume_maps_are_sorted_quoted_lines() {
        let p = pod();
        let fields = PodFields {
            pod: &p,
            pod_ip: "",
            host_ip: "",
        };
        assert_eq!(
            fields.volume_field("metadata.labels").as_deref(),
            Some("app=\"web\"\ntier=\"front\"")
        );
        assert_eq!(fields.field("metadata.labels"), None);
    }
}
