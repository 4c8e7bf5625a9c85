//! The clusterrole-aggregation controller (kube-controller-manager's
//! `clusterrole-aggregation`): a ClusterRole with an `aggregationRule`
//! holds the rules of every other ClusterRole its selectors pick, kept so
//! as those roles are created, changed or deleted. That is how `admin`,
//! `edit` and `view` get their rules from the `system:aggregate-to-*` roles
//! (and `edit` from `view`, `admin` from `edit`), and how a role labelled
//! `rbac.authorization.k8s.io/aggregate-to-view: "true"` extends `view`.
//!
//! As the Go controller does: for each selector in turn, the matching roles
//! sorted by name (the role itself skipped), their rules appended in that
//! order unless an equal rule is already there; the role is written only
//! when that list differs from its rules.

use serde_json::{Value, json};

use super::meta::{self, Gvr, Writer};
use super::{Controller, Pass};
use crate::sandbox::api::Api;
use crate::sandbox::selector::LabelSelector;

const COMPONENT: &str = "clusterrole-aggregation-controller";

const CLUSTER_ROLES: Gvr = Gvr {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterroles",
    kind: "ClusterRole",
};

/// Chains of aggregation (`view` into `edit` into `admin`) settle in one
/// pass each.
const MAX_PASSES: usize = 8;

/// The rules `role` aggregates from `roles`, or `None` when it has no
/// `aggregationRule` (or a selector Go would refuse to parse, which leaves
/// the role alone).
pub(crate) fn aggregated_rules(role: &Value, roles: &[&Value]) -> Option<Vec<Value>> {
    let selectors = role.pointer("/aggregationRule/clusterRoleSelectors")?;
    let mut rules: Vec<Value> = Vec::new();
    for selector in selectors.as_array().into_iter().flatten() {
        let selector = LabelSelector::from_k8s(selector).ok()?;
        let mut picked: Vec<&Value> = roles
            .iter()
            .copied()
            .filter(|r| meta::name(r) != meta::name(role) && selector.matches_object(r))
            .collect();
        picked.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
        for rule in picked.into_iter().flat_map(|r| meta::array_at(r, "/rules")) {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    Some(rules)
}

/// Every aggregated role whose rules are not what it aggregates, with the
/// rules it should hold.
pub(crate) fn stale(roles: &[&Value]) -> Vec<(Value, Vec<Value>)> {
    roles
        .iter()
        .filter_map(|role| {
            let rules = aggregated_rules(role, roles)?;
            let current = meta::array_at(role, "/rules");
            // Go compares semantically: nil and empty rules are equal.
            (current != rules.as_slice()).then(|| ((*role).clone(), rules))
        })
        .collect()
}

/// Fills the aggregated roles among `roles` in place, pass after pass
/// until none is stale (the bootstrap policy, before it is created: its
/// `admin`, `edit` and `view` hold their rules from the first request).
pub(crate) fn settle(roles: &mut [Value]) {
    for _ in 0..MAX_PASSES {
        let refs: Vec<&Value> = roles.iter().collect();
        let updates: Vec<(String, Vec<Value>)> = stale(&refs)
            .into_iter()
            .map(|(role, rules)| (meta::name(&role).to_owned(), rules))
            .collect();
        if updates.is_empty() {
            return;
        }
        for (name, rules) in updates {
            if let Some(role) = roles.iter_mut().find(|r| meta::name(r) == name) {
                role["rules"] = json!(rules);
            }
        }
    }
}

/// Keeps aggregated ClusterRoles' rules in step with the roles they pick.
#[derive(Debug, Default)]
pub(crate) struct ClusterRoleAggregator;

impl Controller for ClusterRoleAggregator {
    const NAME: &'static str = COMPONENT;

    fn watches(&self) -> &'static [&'static str] {
        &["clusterroles.rbac.authorization.k8s.io"]
    }

    fn reconcile(&mut self, api: &Api, _now: i64) -> Pass {
        let mut w = Writer::new(api, COMPONENT);
        let (stored, _) = api.store.list(&CLUSTER_ROLES.key(), None);
        let roles: Vec<&Value> = stored.iter().map(|r| r.as_ref()).collect();
        // Its own write is a change that wakes it again: a chain (view
        // into edit into admin) settles one link a pass.
        for (mut role, rules) in stale(&roles) {
            role["rules"] = json!(rules);
            w.update(CLUSTER_ROLES, role);
        }
        Pass { retry: w.retry }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str, labels: Value, rules: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    fn aggregating(name: &str, labels: Value, key: &str) -> Value {
        json!({"metadata": {"name": name, "labels": labels},
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {key: "true"}}]}})
    }

    #[test]
    fn a_role_without_an_aggregation_rule_is_not_aggregated() {
        let r = role("plain", json!({}), json!([]));
        assert_eq!(aggregated_rules(&r, &[&r]), None);
    }

    #[test]
    fn aggregated_rules_come_from_matching_roles_sorted_by_name_without_duplicates() {
        let view = aggregating("view", json!({}), "to-view");
        let b = role(
            "b-extra",
            json!({"to-view": "true"}),
            json!([{"verbs": ["get"], "resources": ["pods"]}, {"verbs": ["list"], "resources": ["pods"]}]),
        );
        let a = role(
            "a-base",
            json!({"to-view": "true"}),
            json!([{"verbs": ["list"], "resources": ["pods"]}]),
        );
        let other = role(
            "unlabelled",
            json!({}),
            json!([{"verbs": ["*"], "resources": ["*"]}]),
        );
        let got = aggregated_rules(&view, &[&view, &b, &a, &other]).expect("aggregated");
        assert_eq!(
            got,
            vec![
                json!({"verbs": ["list"], "resources": ["pods"]}),
                json!({"verbs": ["get"], "resources": ["pods"]}),
            ]
        );
    }

    #[test]
    fn a_role_is_never_its_own_source() {
        let selfish = json!({"metadata": {"name": "me", "labels": {"k": "true"}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"k": "true"}}]},
            "rules": [{"verbs": ["get"], "resources": ["x"]}]});
        assert_eq!(aggregated_rules(&selfish, &[&selfish]), Some(vec![]));
    }

    #[test]
    fn stale_lists_only_roles_whose_rules_differ() {
        let view = aggregating("view", json!({}), "to-view");
        let source = role(
            "src",
            json!({"to-view": "true"}),
            json!([{"verbs": ["get"], "resources": ["pods"]}]),
        );
        let empty = aggregating("nothing-matches", json!({}), "no-such-label");
        let out = stale(&[&view, &source, &empty]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(meta::name(&out[0].0), "view");
        let mut done = view.clone();
        done["rules"] = json!(out[0].1);
        assert!(stale(&[&done, &source, &empty]).is_empty());
    }

    #[test]
    fn the_bootstrap_policy_aggregates_view_into_edit_into_admin() {
        let policy: Vec<Value> = crate::sandbox::bootstrap::default_rbac()
            .iter()
            .filter(|(plural, _)| *plural == "clusterroles")
            .map(|(_, o)| o.clone())
            .collect();
        let mut roles: Vec<Value> = policy
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if r.get("aggregationRule").is_some()
                    && let Some(o) = r.as_object_mut()
                {
                    o.remove("rules");
                }
                r
            })
            .collect();
        settle(&mut roles);
        assert_eq!(roles, policy, "the policy is served aggregated");
        let rules_of = |name: &str| -> Vec<Value> {
            let r = roles
                .iter()
                .find(|r| meta::name(r) == name)
                .expect("bootstrap role");
            meta::array_at(r, "/rules").to_vec()
        };
        let to = |n: &str| rules_of(&format!("system:aggregate-to-{n}"));
        assert_eq!(rules_of("view"), to("view"));
        let mut edit = to("edit");
        edit.extend(to("view").into_iter().filter(|r| !to("edit").contains(r)));
        assert_eq!(rules_of("edit"), edit);
        let mut admin = rules_of("edit");
        admin.extend(to("admin").into_iter().filter(|r| !edit.contains(r)));
        assert_eq!(rules_of("admin"), admin);
    }
}
