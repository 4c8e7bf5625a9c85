use k8s_openapi::Resource;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

use super::schema::{KINDS, Strategy, TypeSchema};
use super::*;

/// One strategic merge and the object Kubernetes would store.
struct Case {
    name: &'static str,
    api_version: &'static str,
    kind: &'static str,
    target: Value,
    patch: Value,
    expected: Value,
}

fn pod(name: &'static str, target: Value, patch: Value, expected: Value) -> Case {
    Case {
        name,
        api_version: "v1",
        kind: "Pod",
        target,
        patch,
        expected,
    }
}

fn of_kind(
    api_version: &'static str,
    kind: &'static str,
    name: &'static str,
    target: Value,
    patch: Value,
    expected: Value,
) -> Case {
    Case {
        name,
        api_version,
        kind,
        target,
        patch,
        expected,
    }
}

fn check(cases: Vec<Case>) {
    for case in cases {
        let mut target = case.target.clone();
        if let Err(error) = strategic_merge(&mut target, &case.patch, case.api_version, case.kind) {
            panic!("{}: unexpected error {error}", case.name);
        }
        assert_eq!(target, case.expected, "{}", case.name);
        assert_no_directives(&target, case.name);
    }
}

fn assert_no_directives(value: &Value, case: &str) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                assert!(
                    !key.starts_with('$'),
                    "{case}: directive {key} left in the result"
                );
                assert_no_directives(child, case);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| assert_no_directives(item, case)),
        _ => {}
    }
}

fn containers(list: Value) -> Value {
    json!({"spec": {"containers": list}})
}

#[test]
fn pod_spec_lists_merge_element_wise_by_their_kubernetes_merge_keys() {
    check(vec![
        pod(
            "containers merge by name and keep the others",
            containers(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}])),
            containers(json!([{"name": "b", "image": "b:2"}])),
            containers(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}])),
        ),
        pod(
            "env merges by name and the patch overrides the value",
            containers(json!([{"name": "a", "env": [
                {"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}])),
            containers(json!([{"name": "a", "env": [{"name": "Y", "value": "3"}]}])),
            containers(json!([{"name": "a", "env": [
                {"name": "X", "value": "1"}, {"name": "Y", "value": "3"}]}])),
        ),
        pod(
            "an env entry goes with $patch: delete on its name",
            containers(json!([{"name": "a", "env": [
                {"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}])),
            containers(json!([{"name": "a", "env": [{"name": "X", "$patch": "delete"}]}])),
            containers(json!([{"name": "a", "env": [{"name": "Y", "value": "2"}]}])),
        ),
        pod(
            "deleting an env entry that is not there changes nothing",
            containers(json!([{"name": "a", "env": [{"name": "Y", "value": "2"}]}])),
            containers(json!([{"name": "a", "env": [{"name": "Z", "$patch": "delete"}]}])),
            containers(json!([{"name": "a", "env": [{"name": "Y", "value": "2"}]}])),
        ),
        pod(
            "volumeMounts merge by mountPath, not by name",
            containers(json!([{"name": "a", "volumeMounts": [
                {"name": "data", "mountPath": "/data"},
                {"name": "cache", "mountPath": "/cache"}]}])),
            containers(json!([{"name": "a", "volumeMounts": [
                {"name": "data2", "mountPath": "/data", "readOnly": true}]}])),
            containers(json!([{"name": "a", "volumeMounts": [
                {"name": "data2", "mountPath": "/data", "readOnly": true},
                {"name": "cache", "mountPath": "/cache"}]}])),
        ),
        pod(
            "container ports merge by containerPort alone, so UDP overwrites TCP (kubernetes#108255)",
            containers(json!([{"name": "a", "ports": [
                {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"}]}])),
            containers(json!([{"name": "a", "ports": [
                {"name": "dns-udp", "containerPort": 53, "protocol": "UDP"}]}])),
            containers(json!([{"name": "a", "ports": [
                {"name": "dns-udp", "containerPort": 53, "protocol": "UDP"}]}])),
        ),
        pod(
            "initContainers merge by name",
            json!({"spec": {"initContainers": [{"name": "init", "image": "i:1", "args": ["x"]}]}}),
            json!({"spec": {"initContainers": [{"name": "init", "image": "i:2"}]}}),
            json!({"spec": {"initContainers": [{"name": "init", "image": "i:2", "args": ["x"]}]}}),
        ),
        pod(
            "ephemeralContainers merge by name",
            json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}}),
            json!({"spec": {"ephemeralContainers": [{"name": "debug", "tty": true}]}}),
            json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox", "tty": true}]}}),
        ),
        pod(
            "volumes merge by name",
            json!({"spec": {"volumes": [
                {"name": "a", "emptyDir": {}},
                {"name": "b", "configMap": {"name": "old", "defaultMode": 420}}]}}),
            json!({"spec": {"volumes": [{"name": "b", "configMap": {"name": "new"}}]}}),
            json!({"spec": {"volumes": [
                {"name": "a", "emptyDir": {}},
                {"name": "b", "configMap": {"name": "new", "defaultMode": 420}}]}}),
        ),
        pod(
            "imagePullSecrets merge by name without duplicates",
            json!({"spec": {"imagePullSecrets": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"imagePullSecrets": [{"name": "b"}]}}),
            json!({"spec": {"imagePullSecrets": [{"name": "a"}, {"name": "b"}]}}),
        ),
        pod(
            "hostAliases merge by ip and their hostnames list is replaced",
            json!({"spec": {"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}]}}),
            json!({"spec": {"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}]}}),
            json!({"spec": {"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}]}}),
        ),
        pod(
            "topologySpreadConstraints merge by topologyKey",
            json!({"spec": {"topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1,
                "whenUnsatisfiable": "DoNotSchedule"}]}}),
            json!({"spec": {"topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}]}}),
            json!({"spec": {"topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2,
                "whenUnsatisfiable": "DoNotSchedule"}]}}),
        ),
        pod(
            "schedulingGates merge by name",
            json!({"spec": {"schedulingGates": [{"name": "a"}]}}),
            json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}}),
        ),
    ]);
}

#[test]
fn lists_without_a_patch_strategy_are_replaced_whole() {
    check(vec![
        pod(
            "args are replaced",
            containers(json!([{"name": "a", "args": ["--one", "--two"]}])),
            containers(json!([{"name": "a", "args": ["--three"]}])),
            containers(json!([{"name": "a", "args": ["--three"]}])),
        ),
        pod(
            "command is replaced",
            containers(json!([{"name": "a", "command": ["sh", "-c"]}])),
            containers(json!([{"name": "a", "command": ["bash"]}])),
            containers(json!([{"name": "a", "command": ["bash"]}])),
        ),
        pod(
            "tolerations are replaced",
            json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}),
            json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
            json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
        ),
        pod(
            "readinessGates are replaced",
            json!({"spec": {"readinessGates": [{"conditionType": "a"}]}}),
            json!({"spec": {"readinessGates": [{"conditionType": "b"}]}}),
            json!({"spec": {"readinessGates": [{"conditionType": "b"}]}}),
        ),
        pod(
            "envFrom is replaced",
            containers(json!([{"name": "a", "envFrom": [{"configMapRef": {"name": "x"}}]}])),
            containers(json!([{"name": "a", "envFrom": [{"secretRef": {"name": "y"}}]}])),
            containers(json!([{"name": "a", "envFrom": [{"secretRef": {"name": "y"}}]}])),
        ),
        of_kind(
            "batch/v1",
            "Job",
            "a Job's podFailurePolicy rules are replaced",
            json!({"spec": {"podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}}}),
            json!({"spec": {"podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}),
            json!({"spec": {"podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}),
        ),
        of_kind(
            "rbac.authorization.k8s.io/v1",
            "Role",
            "a Role's rules are replaced",
            json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            json!({"rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]}),
            json!({"rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]}),
        ),
        of_kind(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "a NetworkPolicy's ingress rules are replaced",
            json!({"spec": {"ingress": [{"ports": [{"port": 80}]}]}}),
            json!({"spec": {"ingress": [{"ports": [{"port": 443}]}]}}),
            json!({"spec": {"ingress": [{"ports": [{"port": 443}]}]}}),
        ),
    ]);
}

#[test]
fn lists_of_other_kinds_merge_by_their_keys() {
    check(vec![
        of_kind(
            "v1",
            "Service",
            "Service ports merge by port",
            json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}}),
        ),
        of_kind(
            "v1",
            "ServiceAccount",
            "ServiceAccount secrets merge by name",
            json!({"secrets": [{"name": "a"}]}),
            json!({"secrets": [{"name": "a", "namespace": "ns"}]}),
            json!({"secrets": [{"name": "a", "namespace": "ns"}]}),
        ),
        of_kind(
            "v1",
            "Node",
            "Node podCIDRs become a union",
            json!({"spec": {"podCIDRs": ["10.0.0.0/24"]}}),
            json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"]}}),
            json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"]}}),
        ),
        of_kind(
            "v1",
            "Node",
            "Node conditions merge by type",
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "False"}, {"type": "DiskPressure", "status": "False"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}}),
        ),
        of_kind(
            "apps/v1",
            "Deployment",
            "Deployment conditions merge by type",
            json!({"status": {"conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                {"type": "Progressing", "status": "True"}]}}),
            json!({"status": {"conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}}),
            json!({"status": {"conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True"}]}}),
        ),
        of_kind(
            "batch/v1",
            "Job",
            "Job conditions merge by type although their list type is atomic",
            json!({"status": {"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]}}),
            json!({"status": {"conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}}),
            json!({"status": {"conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}}),
        ),
        of_kind(
            "v1",
            "Pod",
            "Pod conditions merge by type",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        ),
        of_kind(
            "batch/v1",
            "CronJob",
            "a CronJob's job template reaches the pod spec's merge keys",
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}}}}}),
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "a:2"}]}}}}}}),
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "a:2"}, {"name": "b", "image": "b:1"}]}}}}}}),
        ),
    ]);
}

#[test]
fn metadata_merges_labels_and_owner_references_and_unions_finalizers() {
    check(vec![
        of_kind(
            "v1",
            "ConfigMap",
            "labels merge as a map",
            json!({"metadata": {"labels": {"app": "x", "tier": "web"}}}),
            json!({"metadata": {"labels": {"tier": "db", "team": "infra"}}}),
            json!({"metadata": {"labels": {"app": "x", "tier": "db", "team": "infra"}}}),
        ),
        of_kind(
            "v1",
            "Secret",
            "null deletes an annotation",
            json!({"metadata": {"annotations": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"annotations": {"a": null}}}),
            json!({"metadata": {"annotations": {"b": "2"}}}),
        ),
        of_kind(
            "apps/v1",
            "ReplicaSet",
            "ownerReferences merge by uid",
            json!({"metadata": {"ownerReferences": [
                {"uid": "1", "kind": "Deployment", "name": "d"},
                {"uid": "2", "kind": "Other", "name": "o"}]}}),
            json!({"metadata": {"ownerReferences": [{"uid": "2", "controller": true}]}}),
            json!({"metadata": {"ownerReferences": [
                {"uid": "1", "kind": "Deployment", "name": "d"},
                {"uid": "2", "kind": "Other", "name": "o", "controller": true}]}}),
        ),
        of_kind(
            "v1",
            "Namespace",
            "finalizers become a union in patch order after the ones they follow",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
        ),
        of_kind(
            "v1",
            "Namespace",
            "a finalizer new to the list lands first",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c"]}}),
            json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
        ),
        of_kind(
            "coordination.k8s.io/v1",
            "Lease",
            "$deleteFromPrimitiveList removes finalizers",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "x"]}}),
            json!({"metadata": {"finalizers": ["a", "c"]}}),
        ),
        of_kind(
            "coordination.k8s.io/v1",
            "Lease",
            "$deleteFromPrimitiveList on a missing list adds nothing",
            json!({"metadata": {"name": "l"}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            json!({"metadata": {"name": "l"}}),
        ),
    ]);
}

#[test]
fn null_deletes_a_key_at_any_depth() {
    check(vec![
        pod(
            "a null field is removed",
            json!({"spec": {"nodeSelector": {"disk": "ssd"}, "hostNetwork": true}}),
            json!({"spec": {"nodeSelector": null}}),
            json!({"spec": {"hostNetwork": true}}),
        ),
        pod(
            "a null inside a merged list element is removed",
            containers(json!([{"name": "a", "image": "a:1", "workingDir": "/w"}])),
            containers(json!([{"name": "a", "workingDir": null}])),
            containers(json!([{"name": "a", "image": "a:1"}])),
        ),
        pod(
            "nulls inside a value new to the target are dropped",
            json!({"spec": {}}),
            json!({"spec": {"securityContext": {"runAsUser": 1, "fsGroup": null}}}),
            json!({"spec": {"securityContext": {"runAsUser": 1}}}),
        ),
    ]);
}

#[test]
fn patch_directives_replace_and_delete_maps_and_list_elements() {
    check(vec![
        pod(
            "$patch: replace on a map replaces it instead of merging",
            json!({"spec": {"securityContext": {"runAsUser": 1, "fsGroup": 2}}}),
            json!({"spec": {"securityContext": {"$patch": "replace", "runAsNonRoot": true}}}),
            json!({"spec": {"securityContext": {"runAsNonRoot": true}}}),
        ),
        pod(
            "$patch: replace inside a list makes the patch the whole list",
            containers(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}])),
            containers(json!([{"$patch": "replace"}, {"name": "c", "image": "c:1"}])),
            containers(json!([{"name": "c", "image": "c:1"}])),
        ),
        pod(
            "$patch: delete on an existing map leaves an empty map, as kube does",
            json!({"spec": {"securityContext": {"runAsUser": 1}, "hostPID": true}}),
            json!({"spec": {"securityContext": {"$patch": "delete"}}}),
            json!({"spec": {"securityContext": {}, "hostPID": true}}),
        ),
        pod(
            "$patch: delete on a map the target lacks adds nothing",
            json!({"spec": {"hostPID": true}}),
            json!({"spec": {"securityContext": {"$patch": "delete"}}}),
            json!({"spec": {"hostPID": true}}),
        ),
        pod(
            "$patch: replace on a map the target lacks is dropped, as kube does",
            json!({"spec": {"hostPID": true}}),
            json!({"spec": {"affinity": {"$patch": "replace", "nodeAffinity": {}}}}),
            json!({"spec": {"hostPID": true}}),
        ),
        pod(
            "a list element deleted by merge key goes while the others merge",
            containers(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}])),
            containers(json!([{"name": "a", "$patch": "delete"}, {"name": "b", "image": "b:2"}])),
            containers(json!([{"name": "b", "image": "b:2"}])),
        ),
        of_kind(
            "apps/v1",
            "Deployment",
            "$retainKeys keeps only the listed keys",
            json!({"spec": {"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "30%"}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        ),
        pod(
            "directives inside a value new to the target are stripped",
            containers(json!([{"name": "a"}])),
            containers(json!([{"name": "b", "env": [
                {"name": "X", "$patch": "delete"}, {"name": "Y", "value": "1"}],
                "$setElementOrder/env": [{"name": "Y"}],
                "securityContext": {"$retainKeys": ["runAsUser"], "runAsUser": 1}}])),
            containers(json!([{"name": "b", "env": [{"name": "Y", "value": "1"}],
                "securityContext": {"runAsUser": 1}}, {"name": "a"}])),
        ),
        pod(
            "a primitive deletion list on a list without merge strategy replaces it, as kube does",
            containers(json!([{"name": "a", "args": ["x", "y"]}])),
            containers(json!([{"name": "a", "$deleteFromPrimitiveList/args": ["x"]}])),
            containers(json!([{"name": "a", "args": ["x"]}])),
        ),
    ]);
}

#[test]
fn set_element_order_reorders_lists_and_is_stripped() {
    check(vec![
        pod(
            "containers take the given order",
            containers(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
            json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]}}),
            containers(json!([{"name": "c"}, {"name": "a"}, {"name": "b"}])),
        ),
        pod(
            "a new container goes where the order puts it",
            containers(json!([{"name": "a"}, {"name": "b"}])),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "new"}, {"name": "b"}],
                "containers": [{"name": "new", "image": "n"}]}}),
            containers(json!([{"name": "a"}, {"name": "new", "image": "n"}, {"name": "b"}])),
        ),
        pod(
            "elements the order leaves out follow their old places",
            containers(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
            json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "b"}]}}),
            containers(json!([{"name": "a"}, {"name": "c"}, {"name": "b"}])),
        ),
        of_kind(
            "v1",
            "ConfigMap",
            "primitive lists take the given order",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["b", "a"]}}),
            json!({"metadata": {"finalizers": ["b", "a"]}}),
        ),
        of_kind(
            "v1",
            "ConfigMap",
            "an order together with additions and deletions, as kubectl apply sends it",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["d", "a", "c"],
                "finalizers": ["d"],
                "$deleteFromPrimitiveList/finalizers": ["b"]}}),
            json!({"metadata": {"finalizers": ["d", "a", "c"]}}),
        ),
    ]);
}

#[test]
fn new_list_elements_land_before_existing_ones_unless_the_patch_lists_those_too() {
    check(vec![
        pod(
            "a lone new container goes first",
            containers(json!([{"name": "a"}, {"name": "b"}])),
            containers(json!([{"name": "d"}])),
            containers(json!([{"name": "d"}, {"name": "a"}, {"name": "b"}])),
        ),
        pod(
            "a new container after a patched one follows it",
            containers(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
            containers(json!([{"name": "c", "image": "c:2"}, {"name": "d"}])),
            containers(
                json!([{"name": "a"}, {"name": "b"}, {"name": "c", "image": "c:2"}, {"name": "d"}]),
            ),
        ),
    ]);
}

#[test]
fn replace_strategy_maps_are_replaced_while_plain_maps_merge() {
    check(vec![
        of_kind(
            "policy/v1",
            "PodDisruptionBudget",
            "a PodDisruptionBudget selector is replaced",
            json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "minAvailable": 1}}),
            json!({"spec": {"selector": {"matchLabels": {"tier": "b"}}}}),
            json!({"spec": {"selector": {"matchLabels": {"tier": "b"}}, "minAvailable": 1}}),
        ),
        of_kind(
            "apps/v1",
            "Deployment",
            "a Deployment selector merges",
            json!({"spec": {"selector": {"matchLabels": {"app": "a"}}}}),
            json!({"spec": {"selector": {"matchLabels": {"tier": "b"}}}}),
            json!({"spec": {"selector": {"matchLabels": {"app": "a", "tier": "b"}}}}),
        ),
    ]);
}

#[test]
fn fields_of_unknown_types_merge_as_maps_and_are_replaced_as_lists() {
    check(vec![
        pod(
            "an unknown field merges its map and replaces its list",
            json!({"spec": {"futureField": {"a": 1, "items": [{"name": "x", "v": 1}]}}}),
            json!({"spec": {"futureField": {"b": 2, "items": [{"name": "x", "v": 2}]}}}),
            json!({"spec": {"futureField": {"a": 1, "b": 2, "items": [{"name": "x", "v": 2}]}}}),
        ),
        pod(
            "a value of another JSON type replaces the old one",
            json!({"spec": {"overhead": "odd"}}),
            json!({"spec": {"overhead": {"cpu": "1"}}}),
            json!({"spec": {"overhead": {"cpu": "1"}}}),
        ),
    ]);
}

/// What each malformed patch must fail with: the variant's HTTP status and
/// the path it names.
struct BadCase {
    name: &'static str,
    target: Value,
    patch: Value,
    status: u16,
    path: &'static str,
}

#[test]
fn malformed_patches_fail_with_the_status_kube_answers_and_leave_the_target_alone() {
    let cases = [
        BadCase {
            name: "a container without its merge key",
            target: containers(json!([{"name": "a"}])),
            patch: containers(json!([{"image": "x"}])),
            status: 500,
            path: "spec.containers",
        },
        BadCase {
            name: "$patch: merge on a map",
            target: json!({"metadata": {"labels": {"a": "1"}}}),
            patch: json!({"metadata": {"labels": {"$patch": "merge", "b": "2"}}}),
            status: 500,
            path: "metadata.labels",
        },
        BadCase {
            name: "$patch: merge in a list",
            target: containers(json!([{"name": "a"}])),
            patch: containers(json!([{"name": "a", "$patch": "merge"}])),
            status: 500,
            path: "spec.containers",
        },
        BadCase {
            name: "an unknown $patch value",
            target: json!({"spec": {"securityContext": {"runAsUser": 1}}}),
            patch: json!({"spec": {"securityContext": {"$patch": "drop"}}}),
            status: 500,
            path: "spec.securityContext",
        },
        BadCase {
            name: "a list of lists",
            target: json!({"metadata": {"finalizers": []}}),
            patch: json!({"metadata": {"finalizers": [["a"]]}}),
            status: 422,
            path: "metadata.finalizers",
        },
        BadCase {
            name: "list elements of different kinds",
            target: json!({"metadata": {"finalizers": ["a"]}}),
            patch: json!({"metadata": {"finalizers": [1]}}),
            status: 500,
            path: "metadata.finalizers",
        },
        BadCase {
            name: "a patched key missing from $retainKeys",
            target: json!({"spec": {"securityContext": {"runAsUser": 1}}}),
            patch: json!({"spec": {"securityContext": {"$retainKeys": ["runAsUser"], "fsGroup": 2}}}),
            status: 400,
            path: "spec.securityContext",
        },
        BadCase {
            name: "$retainKeys that is not a list",
            target: json!({"spec": {}}),
            patch: json!({"spec": {"$retainKeys": "runAsUser"}}),
            status: 400,
            path: "spec",
        },
        BadCase {
            name: "a deletion list key without its slash",
            target: json!({"metadata": {"finalizers": ["a"]}}),
            patch: json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
            status: 400,
            path: "metadata",
        },
        BadCase {
            name: "an element order that contradicts the patch list",
            target: containers(json!([{"name": "a"}, {"name": "b"}])),
            patch: json!({"spec": {"$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "b", "image": "x"}]}}),
            status: 500,
            path: "spec.containers",
        },
        BadCase {
            name: "a patch that is not an object",
            target: json!({"spec": {}}),
            patch: json!(["spec"]),
            status: 400,
            path: "(root)",
        },
    ];
    for case in cases {
        let mut target = case.target.clone();
        let error = match strategic_merge(&mut target, &case.patch, "v1", "Pod") {
            Ok(()) => panic!("{}: merged into {target}", case.name),
            Err(error) => error,
        };
        assert_eq!(error.http_status(), case.status, "{}: {error}", case.name);
        let path = match &error {
            MergeError::BadPatch { path, .. }
            | MergeError::CannotMerge { path, .. }
            | MergeError::ListOfLists { path } => path.as_str(),
            MergeError::NoSchema { .. } => "",
        };
        assert_eq!(path, case.path, "{}: {error}", case.name);
        assert_eq!(target, case.target, "{}: the target changed", case.name);
    }
}

#[test]
fn kinds_without_a_schema_are_refused_as_unsupported_media_type() {
    let original = json!({"spec": {"replicas": 1}});
    let mut target = original.clone();
    let error = strategic_merge(
        &mut target,
        &json!({"spec": {"replicas": 2}}),
        "agentdeck.dev/v1alpha1",
        "AgentPool",
    )
    .expect_err("custom resources have no strategic merge schema");
    assert!(matches!(
        &error,
        MergeError::NoSchema { api_version, kind }
            if api_version == "agentdeck.dev/v1alpha1" && kind == "AgentPool"
    ));
    assert_eq!(error.http_status(), 415);
    assert!(error.to_string().contains("application/merge-patch+json"));
    assert_eq!(target, original);
}

#[test]
fn has_schema_knows_the_built_in_kinds_by_api_version() {
    let cases = [
        ("v1", "Pod", true),
        ("apps/v1", "Deployment", true),
        ("batch/v1", "Job", true),
        ("coordination.k8s.io/v1", "Lease", true),
        ("events.k8s.io/v1", "Event", true),
        ("v1", "Event", true),
        ("v1", "Deployment", false),
        ("apps/v1", "Pod", false),
        ("agentdeck.dev/v1alpha1", "AgentTask", false),
    ];
    for (api_version, kind, expected) in cases {
        assert_eq!(
            has_schema(api_version, kind),
            expected,
            "{api_version} {kind}"
        );
    }
}

#[test]
fn merge_pod_template_overlays_a_partial_template() {
    let mut base = json!({
        "metadata": {"labels": {"app": "agentdeck-agent", "pool": "p"}},
        "spec": {
            "serviceAccountName": "agent",
            "containers": [{
                "name": "agent", "image": "agent:1", "args": ["run"],
                "env": [{"name": "POOL", "value": "p"}],
                "resources": {"limits": {"cpu": "1"}}
            }]
        }
    });
    let overlay = json!({
        "metadata": {"labels": {"team": "infra"}, "annotations": {"a": "b"}},
        "spec": {
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "containers": [
                {"name": "agent", "env": [{"name": "POOL", "value": "q"}],
                 "resources": {"limits": {"memory": "1Gi"}}},
                {"name": "sidecar", "image": "proxy:2"}
            ]
        }
    });
    merge_pod_template(&mut base, &overlay).expect("the overlay is well formed");
    assert_eq!(
        base,
        json!({
            "metadata": {"labels": {"app": "agentdeck-agent", "pool": "p", "team": "infra"},
                         "annotations": {"a": "b"}},
            "spec": {
                "serviceAccountName": "agent",
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "containers": [
                    {"name": "agent", "image": "agent:1", "args": ["run"],
                     "env": [{"name": "POOL", "value": "q"}],
                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                    {"name": "sidecar", "image": "proxy:2"}
                ]
            }
        })
    );
}

#[test]
fn merge_pod_template_puts_a_container_new_to_the_template_first() {
    let mut base = containers(json!([{"name": "agent", "image": "agent:1"}]));
    merge_pod_template(
        &mut base,
        &containers(json!([{"name": "sidecar", "image": "s"}])),
    )
    .expect("the overlay is well formed");
    assert_eq!(
        base,
        containers(
            json!([{"name": "sidecar", "image": "s"}, {"name": "agent", "image": "agent:1"}])
        )
    );
}

#[test]
fn merge_pod_template_reports_the_path_of_a_bad_overlay() {
    let original = containers(json!([{"name": "agent"}]));
    let mut base = original.clone();
    let error = merge_pod_template(&mut base, &containers(json!([{"image": "x"}])))
        .expect_err("a container without a name cannot be merged");
    assert!(matches!(&error, MergeError::CannotMerge { path, .. } if path == "spec.containers"));
    assert_eq!(base, original);
}

/// The "Update API Objects in Place Using kubectl patch" task of the
/// Kubernetes documentation (v1.11 to v1.31 pages) shows what the API server
/// stored after each patch; the same patches must give the same objects here.
#[test]
fn kubectl_patch_examples_from_the_kubernetes_docs_give_the_documented_objects() {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "patch-demo"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {
                    "containers": [{"name": "patch-demo-ctr", "image": "nginx"}],
                    "tolerations": [{"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}]
                }
            }
        }
    });
    let pod_spec = |value: &Value| value["spec"]["template"]["spec"].clone();

    // patch-file.yaml: the docs list patch-demo-ctr-2 (redis) before patch-demo-ctr.
    let mut patched = deployment.clone();
    strategic_merge(
        &mut patched,
        &json!({"spec": {"template": {"spec": {"containers": [
            {"name": "patch-demo-ctr-2", "image": "redis"}]}}}}),
        "apps/v1",
        "Deployment",
    )
    .expect("the docs' patch applies");
    assert_eq!(
        pod_spec(&patched)["containers"],
        json!([{"name": "patch-demo-ctr-2", "image": "redis"}, {"name": "patch-demo-ctr", "image": "nginx"}])
    );

    // patch-file-tolerations.yaml: "the tolerations list was replaced, not merged".
    strategic_merge(
        &mut patched,
        &json!({"spec": {"template": {"spec": {"tolerations": [
            {"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}}}),
        "apps/v1",
        "Deployment",
    )
    .expect("the docs' patch applies");
    assert_eq!(
        pod_spec(&patched)["tolerations"],
        json!([{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}])
    );

    // patch-file-2.yaml with --type merge: a JSON merge patch replaces the list.
    json_merge_patch(
        &mut patched,
        &json!({"spec": {"template": {"spec": {"containers": [
            {"name": "patch-demo-ctr-3", "image": "gcr.io/google-samples/hello-app:2.0"}]}}}}),
    );
    assert_eq!(
        pod_spec(&patched)["containers"],
        json!([{"name": "patch-demo-ctr-3", "image": "gcr.io/google-samples/hello-app:2.0"}])
    );

    // patch-file-retainkeys.yaml: rollingUpdate goes, only type is retained.
    let mut retain = json!({"spec": {"strategy": {"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "30%", "maxUnavailable": "25%"}}}});
    strategic_merge(
        &mut retain,
        &json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        "apps/v1",
        "Deployment",
    )
    .expect("the docs' patch applies");
    assert_eq!(retain, json!({"spec": {"strategy": {"type": "Recreate"}}}));
}

#[test]
fn json_merge_patch_gives_the_results_of_rfc_7386_appendix_a() {
    let cases = [
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (
            json!({"a": "b", "b": "c"}),
            json!({"a": null}),
            json!({"b": "c"}),
        ),
        (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
        (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
        (
            json!({"a": [{"b": "c"}]}),
            json!({"a": [1]}),
            json!({"a": [1]}),
        ),
        (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
        (json!({"a": "b"}), json!(["c"]), json!(["c"])),
        (json!({"a": "foo"}), json!(null), json!(null)),
        (json!({"a": "foo"}), json!("bar"), json!("bar")),
        (
            json!({"e": null}),
            json!({"a": 1}),
            json!({"e": null, "a": 1}),
        ),
        (
            json!([1, 2]),
            json!({"a": "b", "c": null}),
            json!({"a": "b"}),
        ),
        (
            json!({}),
            json!({"a": {"bb": {"ccc": null}}}),
            json!({"a": {"bb": {}}}),
        ),
    ];
    for (original, patch, expected) in cases {
        let mut target = original.clone();
        json_merge_patch(&mut target, &patch);
        assert_eq!(target, expected, "{original} + {patch}");
    }
}

/// Registers `T`'s schema and returns its kind and definition name.
fn root<T: JsonSchema + Resource>(
    generator: &mut SchemaGenerator,
) -> (&'static str, &'static str, String) {
    generator.subschema_for::<T>();
    (T::API_VERSION, T::KIND, T::schema_name().into_owned())
}

/// The definition a `{"$ref": "#/$defs/<name>"}` schema points at.
fn referenced(schema: &Value) -> Option<&str> {
    schema.get("$ref")?.as_str()?.strip_prefix("#/$defs/")
}

/// Checks `schema` against the k8s-openapi definition `definition`: every
/// field exists, merging fields are lists whose elements carry the merge key,
/// and each child schema describes the type the field really has.
fn check_against_openapi(schema: &TypeSchema, definition: &str, definitions: &Map<String, Value>) {
    let Some(openapi) = definitions.get(definition) else {
        panic!("k8s-openapi has no definition {definition}");
    };
    if !schema.name.starts_with('(') {
        assert!(
            definition.ends_with(schema.name),
            "{} is described by {definition}",
            schema.name
        );
    }
    for field in schema.fields {
        let Some(property) = openapi["properties"].get(field.name) else {
            panic!("{definition} has no field {}", field.name);
        };
        let element = match field.strategy {
            Strategy::Merge { key } => {
                assert_eq!(
                    property["type"], "array",
                    "{definition}.{} is not a list",
                    field.name
                );
                let element = referenced(&property["items"]);
                match (key, element) {
                    (Some(key), Some(element)) => assert!(
                        definitions[element]["properties"].get(key).is_some(),
                        "{element} has no merge key {key}"
                    ),
                    (None, None) => {}
                    _ => panic!(
                        "{definition}.{}: merge key and element type disagree",
                        field.name
                    ),
                }
                element
            }
            Strategy::Replace | Strategy::Default => {
                let child = referenced(property);
                assert!(
                    child.is_some(),
                    "{definition}.{} is not an object",
                    field.name
                );
                child
            }
        };
        if let Some(child) = field.child {
            let Some(element) = element else {
                panic!("{definition}.{} has no object type", field.name);
            };
            check_against_openapi(child, element, definitions);
        }
    }
}

#[test]
fn the_table_names_real_fields_of_the_types_k8s_openapi_knows() {
    use k8s_openapi::api::{
        apps, autoscaling, batch, coordination, core, discovery, events, networking, policy, rbac,
        scheduling, storage,
    };
    let mut generator = SchemaGenerator::default();
    let roots = [
        root::<core::v1::Pod>(&mut generator),
        root::<core::v1::PodTemplate>(&mut generator),
        root::<core::v1::ReplicationController>(&mut generator),
        root::<core::v1::Service>(&mut generator),
        root::<core::v1::Endpoints>(&mut generator),
        root::<core::v1::ConfigMap>(&mut generator),
        root::<core::v1::Secret>(&mut generator),
        root::<core::v1::ServiceAccount>(&mut generator),
        root::<core::v1::Namespace>(&mut generator),
        root::<core::v1::Node>(&mut generator),
        root::<core::v1::Event>(&mut generator),
        root::<core::v1::PersistentVolumeClaim>(&mut generator),
        root::<core::v1::PersistentVolume>(&mut generator),
        root::<core::v1::ResourceQuota>(&mut generator),
        root::<core::v1::LimitRange>(&mut generator),
        root::<apps::v1::Deployment>(&mut generator),
        root::<apps::v1::ReplicaSet>(&mut generator),
        root::<apps::v1::StatefulSet>(&mut generator),
        root::<apps::v1::DaemonSet>(&mut generator),
        root::<apps::v1::ControllerRevision>(&mut generator),
        root::<batch::v1::Job>(&mut generator),
        root::<batch::v1::CronJob>(&mut generator),
        root::<coordination::v1::Lease>(&mut generator),
        root::<networking::v1::NetworkPolicy>(&mut generator),
        root::<networking::v1::Ingress>(&mut generator),
        root::<networking::v1::IngressClass>(&mut generator),
        root::<policy::v1::PodDisruptionBudget>(&mut generator),
        root::<rbac::v1::Role>(&mut generator),
        root::<rbac::v1::RoleBinding>(&mut generator),
        root::<rbac::v1::ClusterRole>(&mut generator),
        root::<rbac::v1::ClusterRoleBinding>(&mut generator),
        root::<events::v1::Event>(&mut generator),
        root::<autoscaling::v1::HorizontalPodAutoscaler>(&mut generator),
        root::<autoscaling::v2::HorizontalPodAutoscaler>(&mut generator),
        root::<scheduling::v1::PriorityClass>(&mut generator),
        root::<storage::v1::StorageClass>(&mut generator),
        root::<discovery::v1::EndpointSlice>(&mut generator),
        root::<autoscaling::v1::Scale>(&mut generator),
    ];
    let definitions = generator.definitions().clone();
    assert_eq!(
        roots.len(),
        KINDS.len(),
        "every kind in the table is checked once"
    );
    for (api_version, kind, schema) in KINDS {
        let Some((_, _, definition)) = roots.iter().find(|(v, k, _)| v == api_version && k == kind)
        else {
            panic!("{api_version} {kind} is not a k8s-openapi resource");
        };
        check_against_openapi(schema, definition, &definitions);
    }
    check_against_openapi(
        &super::schema::POD_TEMPLATE_SPEC,
        "io.k8s.api.core.v1.PodTemplateSpec",
        &definitions,
    );
}
