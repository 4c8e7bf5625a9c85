//! What an identity may do with agentdeck, feature by feature.
//!
//! [`needs`] says, as data, the verbs and resources each feature of
//! agentdeck uses — read off the code that calls the API (the cluster
//! view's watches, [`super::exec`]'s loads and writes, the bundle's lists,
//! [`super::debug`], [`super::attach`], the controller's leader Lease), so
//! that a "no" names what is missing. [`review`] asks the API about each
//! distinct need with a SelfSubjectAccessReview (a question any
//! authenticated user may ask), a few at a time, so a table costs well
//! under a second. `agentdeck access` prints it, the console checks views
//! and actions against it, and a support bundle records it in its
//! manifest, so that a receiver knows why something is absent.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use super::action::Action;
use crate::cluster::Impersonation;

/// Access reviews in flight at once: a table is ~35 questions.
pub const REVIEWS_IN_FLIGHT: usize = 8;

/// How long one review may take: a 403 is an answer, silence is not.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the questions could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// An access review (or who-am-I) request failed.
    #[error("{}", crate::cluster::api_fault(what, source))]
    Review {
        /// What was asked ("ask whether this identity may list pods in
        /// team-a").
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The API did not answer in time.
    #[error(
        "cannot {what}: {} did not answer within {} s",
        crate::cluster::server_label(),
        after.as_secs()
    )]
    NoAnswer {
        /// What was asked.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// `--as`: the kubeconfig's user may not impersonate the subject.
    #[error("you may not impersonate {subject} (needs {needs}): {message}")]
    ImpersonationRefused {
        /// The user (or service account) to act as.
        subject: String,
        /// What the kubeconfig's user would need.
        needs: String,
        /// The API server's words.
        message: String,
    },
}

/// Result of this module.
pub type Result<T, E = AccessError> = std::result::Result<T, E>;

/// A feature of agentdeck, as the user knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// The pools view (the watch of AgentPools).
    SeePools,
    /// The tasks view.
    SeeTasks,
    /// The agents view (the watch of pods).
    SeeAgents,
    /// Logs of agents and tasks.
    ReadLogs,
    /// The events view.
    SeeEvents,
    /// `scale`: bounds, holds.
    Scale,
    /// `drain` of a pool (or one agent).
    Drain,
    /// `debug-logs` of a pool (or one agent).
    DebugLogs,
    /// `task cancel` and `task retry`.
    CancelRetry,
    /// `bundle`.
    Bundle,
    /// `debug`: a copy of an agent pod.
    DebugPod,
    /// A shell in an agent (`debug --attach`, the console's `s`).
    Exec,
    /// Leading: holding the controller's Lease.
    Lead,
}

impl Feature {
    /// Every feature, in the order the table shows them.
    pub const ALL: [Feature; 13] = [
        Feature::SeePools,
        Feature::SeeTasks,
        Feature::SeeAgents,
        Feature::ReadLogs,
        Feature::SeeEvents,
        Feature::Scale,
        Feature::Drain,
        Feature::DebugLogs,
        Feature::CancelRetry,
        Feature::Bundle,
        Feature::DebugPod,
        Feature::Exec,
        Feature::Lead,
    ];

    /// As the table says it: "see pools", "cancel/retry".
    pub fn name(self) -> &'static str {
        match self {
            Feature::SeePools => "see pools",
            Feature::SeeTasks => "see tasks",
            Feature::SeeAgents => "see agents",
            Feature::ReadLogs => "read logs",
            Feature::SeeEvents => "see events",
            Feature::Scale => "scale",
            Feature::Drain => "drain",
            Feature::DebugLogs => "debug logs",
            Feature::CancelRetry => "cancel/retry",
            Feature::Bundle => "bundle",
            Feature::DebugPod => "debug pod",
            Feature::Exec => "exec",
            Feature::Lead => "lead",
        }
    }

    /// A stable identifier for scripts (`-o json`): "see-pools".
    pub fn id(self) -> &'static str {
        match self {
            Feature::SeePools => "see-pools",
            Feature::SeeTasks => "see-tasks",
            Feature::SeeAgents => "see-agents",
            Feature::ReadLogs => "read-logs",
            Feature::SeeEvents => "see-events",
            Feature::Scale => "scale",
            Feature::Drain => "drain",
            Feature::DebugLogs => "debug-logs",
            Feature::CancelRetry => "cancel-retry",
            Feature::Bundle => "bundle",
            Feature::DebugPod => "debug-pod",
            Feature::Exec => "exec",
            Feature::Lead => "lead",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Feature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

/// One permission a feature uses: a verb on a resource (or subresource)
/// in a namespace, or in every namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    /// API group ("" for the core group).
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    /// `None`: all namespaces (for a cluster-scoped resource: the cluster).
    pub namespace: Option<String>,
    /// The part of the feature that needs it, when the rest works without
    /// it ("one agent", "events.yaml"); `None`: the feature needs it.
    pub part: Option<&'static str>,
}

/// What an access review asks: a need without its part.
type NeedKey = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<String>,
);

impl Need {
    fn key(&self) -> NeedKey {
        (
            self.verb,
            self.group,
            self.resource,
            self.subresource,
            self.namespace.clone(),
        )
    }

    /// Resources that live in no namespace.
    pub fn cluster_scoped(&self) -> bool {
        matches!(self.resource, "nodes" | "namespaces")
    }

    /// `pods/log`, `agentpools`.
    pub fn resource_path(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        }
    }

    fn place(&self) -> String {
        match (&self.namespace, self.cluster_scoped()) {
            (_, true) => String::new(),
            (Some(ns), false) => format!(" in {ns}"),
            (None, false) => " in all namespaces".to_owned(),
        }
    }
}

/// `list pods in team-a`, `create pods/exec in team-a`, `list nodes`.
impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}{}", self.verb, self.resource_path(), self.place())
    }
}

impl Serialize for Need {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Need", 7)?;
        st.serialize_field("verb", self.verb)?;
        st.serialize_field("group", self.group)?;
        st.serialize_field("resource", self.resource)?;
        st.serialize_field("subresource", &self.subresource)?;
        st.serialize_field("namespace", &self.namespace)?;
        st.serialize_field("for", &self.part)?;
        st.serialize_field("text", &self.to_string())?;
        st.end()
    }
}

/// Where a grant applies.
#[derive(Clone, Copy)]
enum Scope {
    /// The namespace asked about (or all).
    Namespace,
    /// The namespace of the controller's leader Lease.
    Lease,
    /// The cluster (nodes).
    Cluster,
}

/// Verbs on one resource, as a feature's code uses them.
struct Uses {
    verbs: &'static [&'static str],
    group: &'static str,
    resource: &'static str,
    sub: Option<&'static str>,
    scope: Scope,
    part: Option<&'static str>,
}

const fn uses(verbs: &'static [&'static str], group: &'static str, resource: &'static str) -> Uses {
    Uses {
        verbs,
        group,
        resource,
        sub: None,
        scope: Scope::Namespace,
        part: None,
    }
}

impl Uses {
    const fn sub(mut self, sub: &'static str) -> Uses {
        self.sub = Some(sub);
        self
    }
    const fn part(mut self, part: &'static str) -> Uses {
        self.part = Some(part);
        self
    }
    const fn scope(mut self, scope: Scope) -> Uses {
        self.scope = scope;
        self
    }
}

const CORE: &str = "";
const AGENTDECK: &str = crate::crd::GROUP;
const APPS: &str = "apps";
const BATCH: &str = "batch";
const LEASES: &str = "coordination.k8s.io";
const NETWORKING: &str = "networking.k8s.io";

/// What every pool action reads first ([`super::exec::load`]): the pools
/// (is it there?), its agents and its tasks (the impact in words).
const POOL_ACTION_READS: [Uses; 3] = [
    uses(&["list"], AGENTDECK, "agentpools"),
    uses(&["list"], CORE, "pods"),
    uses(&["list"], AGENTDECK, "agenttasks"),
];

/// The verbs and resources `feature` uses, as its code calls the API.
fn uses_of(feature: Feature) -> Vec<Uses> {
    match feature {
        // The cluster view's watches (list, then watch); the YAML view's
        // get falls back to the watched copy.
        Feature::SeePools => vec![uses(&["list", "watch"], AGENTDECK, "agentpools")],
        Feature::SeeTasks => vec![uses(&["list", "watch"], AGENTDECK, "agenttasks")],
        Feature::SeeAgents => vec![uses(&["list", "watch"], CORE, "pods")],
        // Live logs; the lines the controller kept of pods gone are in
        // labelled ConfigMaps, a finished task's output in its own
        // (ops::kept, crd::output).
        Feature::ReadLogs => vec![
            uses(&["get"], CORE, "pods").sub("log"),
            uses(&["list"], CORE, "configmaps").part("lines kept of pods already gone"),
            uses(&["get"], CORE, "configmaps").part("a finished task's kept output"),
        ],
        Feature::SeeEvents => vec![uses(&["list", "watch"], CORE, "events")],
        // Bounds and holds are a merge patch of the pool (previewed as a
        // server-side dry run, which is authorized as the patch itself).
        // The audit Event is best effort: not a need.
        Feature::Scale => {
            let mut v = Vec::from(POOL_ACTION_READS);
            v.push(uses(&["patch"], AGENTDECK, "agentpools"));
            v
        }
        // A pool's switch is in its spec; one agent's is an annotation on
        // its pod.
        Feature::Drain | Feature::DebugLogs => {
            let mut v = Vec::from(POOL_ACTION_READS);
            v.push(uses(&["patch"], AGENTDECK, "agentpools"));
            v.push(uses(&["patch"], CORE, "pods").part("one agent"));
            v
        }
        // Cancel sets spec.cancel; retry rewrites the status (its history
        // kept) and deletes the task's Job, which it reads first.
        Feature::CancelRetry => vec![
            uses(&["get", "patch"], AGENTDECK, "agenttasks"),
            uses(&["list"], AGENTDECK, "agenttasks").part("-l selector"),
            uses(&["patch"], AGENTDECK, "agenttasks")
                .sub("status")
                .part("retry"),
            uses(&["get", "delete"], BATCH, "jobs").part("retry"),
        ],
        // Everything is optional: a bundle writes what it could collect
        // and lists the rest (bundle::kinds and bundle::Scope::run).
        Feature::Bundle => vec![
            uses(&["list"], CORE, "secrets")
                .part("Secret values hidden wherever they appear, beyond the patterns"),
            uses(&["list"], AGENTDECK, "agentpools").part("objects/agentpools.yaml"),
            uses(&["list"], AGENTDECK, "agenttasks")
                .part("objects/agenttasks.yaml and task outputs"),
            uses(&["list"], CORE, "pods").part("objects/pods.yaml, pod logs and agent health"),
            uses(&["get"], CORE, "pods").sub("log").part("pod logs"),
            uses(&["list"], CORE, "events").part("events.yaml"),
            uses(&["list"], APPS, "deployments").part("objects/deployments.yaml"),
            uses(&["list"], APPS, "replicasets").part("objects/replicasets.yaml"),
            uses(&["list"], BATCH, "jobs").part("objects/jobs.yaml"),
            uses(&["list"], CORE, "services").part("objects/services.yaml"),
            uses(&["list"], CORE, "configmaps").part("objects/configmaps.yaml and kept log tails"),
            uses(&["list"], NETWORKING, "networkpolicies").part("objects/networkpolicies.yaml"),
            uses(&["list"], LEASES, "leases").part("objects/leases.yaml"),
            uses(&["list"], CORE, "nodes")
                .scope(Scope::Cluster)
                .part("objects/nodes.yaml"),
            uses(&["list"], LEASES, "leases")
                .scope(Scope::Lease)
                .part("objects/controller-leases.yaml"),
        ],
        // A copy of the pod (read first); `--mode ephemeral` patches the
        // pod's ephemeralcontainers instead.
        Feature::DebugPod => vec![
            uses(&["get", "create"], CORE, "pods"),
            uses(&["patch"], CORE, "pods")
                .sub("ephemeralcontainers")
                .part("--mode ephemeral"),
            uses(&["list"], CORE, "pods").part("--list"),
            uses(&["delete"], CORE, "pods").part("--cleanup"),
        ],
        // The pod is read and watched until its container runs; the
        // shell is a WebSocket upgrade (a GET: `get`), and API servers
        // from 1.35 also ask for `create` on it, as SPDY always did.
        Feature::Exec => vec![
            uses(&["get", "list", "watch"], CORE, "pods"),
            uses(&["get", "create"], CORE, "pods").sub("exec"),
        ],
        // controller::leader: read, create, renew (update) the Lease.
        Feature::Lead => {
            vec![uses(&["get", "create", "update"], LEASES, "leases").scope(Scope::Lease)]
        }
    }
}

/// The exact permissions `feature` uses, in `namespace` (`None`: every
/// namespace, as the console's `-A`); the leader Lease is in
/// `lease_namespace`. Pure.
pub fn needs(feature: Feature, namespace: Option<&str>, lease_namespace: &str) -> Vec<Need> {
    let mut out = Vec::new();
    for u in uses_of(feature) {
        let ns = match u.scope {
            Scope::Namespace => namespace.map(str::to_owned),
            Scope::Lease => Some(lease_namespace.to_owned()),
            Scope::Cluster => None,
        };
        // The bundle lists the controller's Leases apart only when they
        // are elsewhere.
        if matches!(u.scope, Scope::Lease)
            && feature == Feature::Bundle
            && namespace == Some(lease_namespace)
        {
            continue;
        }
        for verb in u.verbs {
            out.push(Need {
                verb,
                group: u.group,
                resource: u.resource,
                subresource: u.sub,
                namespace: ns.clone(),
                part: u.part,
            });
        }
    }
    out
}

/// The permissions one action needs as it will be carried out, in
/// `namespace`: for the console, to refuse before a dialog rather than
/// after it. Pure.
pub fn action_needs(action: &Action, namespace: &str) -> Vec<Need> {
    let at = |verb, group, resource, subresource| Need {
        verb,
        group,
        resource,
        subresource,
        namespace: Some(namespace.to_owned()),
        part: None,
    };
    let reads = || {
        POOL_ACTION_READS
            .iter()
            .flat_map(|u| u.verbs.iter().map(|v| at(v, u.group, u.resource, u.sub)))
            .collect::<Vec<_>>()
    };
    match action {
        Action::ScalePool { .. }
        | Action::HoldReplicas { .. }
        | Action::ClearHold { .. }
        | Action::DrainPool { .. }
        | Action::DebugLogs { agent: None, .. } => {
            let mut v = reads();
            v.push(at("patch", AGENTDECK, "agentpools", None));
            v
        }
        Action::DrainAgent { .. } | Action::DebugLogs { agent: Some(_), .. } => {
            let mut v = reads();
            v.push(at("patch", CORE, "pods", None));
            v
        }
        Action::CancelTasks(sel) | Action::RetryTasks(sel) => {
            let mut v = Vec::new();
            if !sel.names.is_empty() {
                v.push(at("get", AGENTDECK, "agenttasks", None));
            }
            if sel.selector.is_some() {
                v.push(at("list", AGENTDECK, "agenttasks", None));
            }
            if matches!(action, Action::CancelTasks(_)) {
                v.push(at("patch", AGENTDECK, "agenttasks", None));
            } else {
                v.push(at("get", BATCH, "jobs", None));
                v.push(at("delete", BATCH, "jobs", None));
                v.push(at("patch", AGENTDECK, "agenttasks", Some("status")));
            }
            v
        }
    }
}

/// One feature's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureAccess {
    pub feature: Feature,
    /// Every need is granted.
    pub allowed: bool,
    /// Not every need is granted, but what is missing is only for parts
    /// of the feature (its `for`), and something is granted.
    pub partial: bool,
    /// The needs not granted, in the order [`needs`] gives them.
    pub missing: Vec<Need>,
}

impl FeatureAccess {
    /// `yes`, `partly` or `no`.
    pub fn verdict(&self) -> &'static str {
        if self.allowed {
            "yes"
        } else if self.partial {
            "partly"
        } else {
            "no"
        }
    }
}

impl Serialize for FeatureAccess {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("FeatureAccess", 5)?;
        st.serialize_field("feature", &self.feature)?;
        st.serialize_field("name", self.feature.name())?;
        st.serialize_field("allowed", &self.allowed)?;
        st.serialize_field("partial", &self.partial)?;
        st.serialize_field("missing", &self.missing)?;
        st.end()
    }
}

/// Every feature's answer for one identity, in one namespace (or all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessTable {
    /// One row per [`Feature::ALL`], in that order.
    pub rows: Vec<FeatureAccess>,
    /// `None`: all namespaces.
    pub namespace: Option<String>,
    /// Where the controller's leader Lease is.
    pub lease_namespace: String,
    /// The identity as the API knows it (SelfSubjectReview), when it says.
    pub user: Option<String>,
}

impl AccessTable {
    /// The table `granted` answers: pure, for tests and for any source of
    /// answers (a rules review, a fixture).
    pub fn decide(
        namespace: Option<&str>,
        lease_namespace: &str,
        user: Option<String>,
        granted: impl Fn(&Need) -> bool,
    ) -> AccessTable {
        let rows = Feature::ALL
            .iter()
            .map(|&feature| {
                let all = needs(feature, namespace, lease_namespace);
                let missing: Vec<Need> = all.iter().filter(|n| !granted(n)).cloned().collect();
                let allowed = missing.is_empty();
                let partial = !allowed
                    && missing.len() < all.len()
                    && missing.iter().all(|n| n.part.is_some());
                FeatureAccess {
                    feature,
                    allowed,
                    partial,
                    missing,
                }
            })
            .collect();
        AccessTable {
            rows,
            namespace: namespace.map(str::to_owned),
            lease_namespace: lease_namespace.to_owned(),
            user,
        }
    }

    /// The row of `feature`.
    pub fn row(&self, feature: Feature) -> Option<&FeatureAccess> {
        self.rows.iter().find(|r| r.feature == feature)
    }

    /// Whether every need of `feature` is granted.
    pub fn allows(&self, feature: Feature) -> bool {
        self.row(feature).is_some_and(|r| r.allowed)
    }

    /// What `feature` lacks (empty when allowed).
    pub fn missing(&self, feature: Feature) -> &[Need] {
        self.row(feature).map_or(&[], |r| r.missing.as_slice())
    }

    /// What a support bundle taken by this identity would lack, each with
    /// the permissions that would bring it: "events.yaml: list events in
    /// team-a".
    pub fn bundle_lacks(&self) -> Vec<String> {
        let mut by_part: Vec<(&str, Vec<String>)> = Vec::new();
        for need in self.missing(Feature::Bundle) {
            let part = need.part.unwrap_or("the bundle");
            match by_part.iter_mut().find(|(p, _)| *p == part) {
                Some((_, v)) => v.push(need.to_string()),
                None => by_part.push((part, vec![need.to_string()])),
            }
        }
        by_part
            .into_iter()
            .map(|(part, needs)| format!("{part}: {}", needs.join(", ")))
            .collect()
    }
}

impl Serialize for AccessTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("AccessTable", 5)?;
        st.serialize_field("user", &self.user)?;
        st.serialize_field("namespace", &self.namespace)?;
        st.serialize_field("leaseNamespace", &self.lease_namespace)?;
        st.serialize_field("features", &self.rows)?;
        st.serialize_field("bundleLacks", &self.bundle_lacks())?;
        st.end()
    }
}

/// Missing needs in few words: verbs on one resource together,
/// `list, watch pods in team-a; patch pods in team-a (for one agent)`.
pub fn missing_text(missing: &[Need]) -> String {
    let mut groups: Vec<(Vec<&str>, &Need)> = Vec::new();
    for need in missing {
        let same = |n: &Need| {
            n.group == need.group
                && n.resource == need.resource
                && n.subresource == need.subresource
                && n.namespace == need.namespace
                && n.part == need.part
        };
        match groups.iter_mut().find(|(_, n)| same(n)) {
            Some((verbs, _)) => verbs.push(need.verb),
            None => groups.push((vec![need.verb], need)),
        }
    }
    groups
        .iter()
        .map(|(verbs, n)| {
            let part = n.part.map(|p| format!(" (for {p})")).unwrap_or_default();
            format!(
                "{} {}{}{part}",
                verbs.join(", "),
                n.resource_path(),
                n.place()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The table as `agentdeck access` prints it.
pub fn table_text(table: &AccessTable) -> String {
    let mut out = format!(
        "{} in {}; the leader Lease in {}\n\n",
        table
            .user
            .as_deref()
            .unwrap_or("this identity (the API did not say who)"),
        table.namespace.as_deref().map_or_else(
            || "all namespaces".to_owned(),
            |ns| format!("namespace {ns}")
        ),
        table.lease_namespace
    );
    let width = Feature::ALL
        .iter()
        .map(|f| f.name().len())
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "{:<width$}  {:<7}  MISSING\n",
        "FEATURE", "ALLOWED"
    ));
    for row in &table.rows {
        let missing = if row.feature == Feature::Bundle && !row.missing.is_empty() {
            "see below".to_owned()
        } else {
            missing_text(&row.missing)
        };
        let line = format!(
            "{:<width$}  {:<7}  {missing}",
            row.feature.name(),
            row.verdict()
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let lacks = table.bundle_lacks();
    if !lacks.is_empty() {
        out.push_str("\nA support bundle taken here would lack:\n");
        for l in lacks {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out
}

/// Whether `e` is the API server refusing an impersonation (the
/// kubeconfig's user may not act as the `Impersonate-*` subject).
pub fn is_impersonation_refused(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 && s.message.contains("cannot impersonate"))
}

/// Whether the API grants `need` to this client's identity (one
/// SelfSubjectAccessReview).
pub async fn allowed(client: &kube::Client, need: &Need) -> Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(need.verb.to_owned()),
                group: Some(need.group.to_owned()),
                resource: Some(need.resource.to_owned()),
                subresource: need.subresource.map(str::to_owned),
                namespace: need.namespace.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review)).await {
        Ok(Ok(answer)) => Ok(answer.status.is_some_and(|s| s.allowed)),
        Ok(Err(source)) => Err(AccessError::Review {
            what: format!("ask whether this identity may {need}"),
            source,
        }),
        Err(_) => Err(AccessError::NoAnswer {
            what: format!("ask whether this identity may {need}"),
            after: REVIEW_TIMEOUT,
        }),
    }
}

/// Who this client is, as the API says (SelfSubjectReview, `kubectl auth
/// whoami`): `None` when the API cannot say (an older server, a user
/// refused the review). A refused impersonation or an unusable API is an
/// error: every other question would fail the same way.
pub async fn whoami(client: &kube::Client) -> Result<Option<String>> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let what = "ask who this identity is (SelfSubjectReview)";
    match tokio::time::timeout(
        REVIEW_TIMEOUT,
        api.create(&PostParams::default(), &SelfSubjectReview::default()),
    )
    .await
    {
        Ok(Ok(review)) => Ok(review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty())),
        Ok(Err(e)) if is_impersonation_refused(&e) || crate::cluster::is_unusable(&e) => {
            Err(AccessError::Review {
                what: what.to_owned(),
                source: e,
            })
        }
        Ok(Err(_)) => Ok(None),
        Err(_) => Err(AccessError::NoAnswer {
            what: what.to_owned(),
            after: REVIEW_TIMEOUT,
        }),
    }
}

/// The API's answer for each distinct need (its part aside), asked
/// [`REVIEWS_IN_FLIGHT`] at a time.
async fn decide_each(
    client: &kube::Client,
    needs: impl IntoIterator<Item = Need>,
) -> Result<BTreeMap<NeedKey, bool>> {
    let mut distinct: BTreeMap<NeedKey, Need> = BTreeMap::new();
    for need in needs {
        distinct.entry(need.key()).or_insert(need);
    }
    let answers: Vec<(NeedKey, Result<bool>)> = futures::stream::iter(distinct.into_values())
        .map(|need| async move { (need.key(), allowed(client, &need).await) })
        .buffer_unordered(REVIEWS_IN_FLIGHT)
        .collect()
        .await;
    let mut granted = BTreeMap::new();
    for (key, answer) in answers {
        granted.insert(key, answer?);
    }
    Ok(granted)
}

/// Those of `needs` the API does not grant this client's identity, in
/// their order: for the console, the needs of an action
/// ([`action_needs`]) before its dialog opens. Empty: all granted.
pub async fn refused(client: &kube::Client, needs: &[Need]) -> Result<Vec<Need>> {
    let granted = decide_each(client, needs.iter().cloned()).await?;
    Ok(needs
        .iter()
        .filter(|n| !granted.get(&n.key()).copied().unwrap_or(false))
        .cloned()
        .collect())
}

/// Every feature's answer for this client's identity in `namespace`
/// (`None`: all namespaces): who it is, then one access review per
/// distinct need, [`REVIEWS_IN_FLIGHT`] at a time.
pub async fn review(
    client: &kube::Client,
    namespace: Option<&str>,
    lease_namespace: &str,
) -> Result<AccessTable> {
    let user = whoami(client).await?;
    let all = Feature::ALL
        .iter()
        .flat_map(|f| needs(*f, namespace, lease_namespace));
    let granted = decide_each(client, all).await?;
    Ok(AccessTable::decide(namespace, lease_namespace, user, |n| {
        granted.get(&n.key()).copied().unwrap_or(false)
    }))
}

/// [`review`] for a client made with `impersonation`: a refused
/// impersonation is said as such, naming whom and what it needs.
pub async fn review_as(
    client: &kube::Client,
    namespace: Option<&str>,
    lease_namespace: &str,
    impersonation: Option<&Impersonation>,
) -> Result<AccessTable> {
    match (
        review(client, namespace, lease_namespace).await,
        impersonation,
    ) {
        (Err(AccessError::Review { source, .. }), Some(as_))
            if is_impersonation_refused(&source) =>
        {
            let message = match &source {
                kube::Error::Api(s) => s.message.clone(),
                other => other.to_string(),
            };
            Err(AccessError::ImpersonationRefused {
                subject: as_.user.clone(),
                needs: as_.needs(),
                message,
            })
        }
        (result, _) => result,
    }
}

/// For `-A` without a cluster-wide list of AgentPools: the namespaces
/// this identity may list AgentPools in, as far as they can be found
/// (the namespaces it may list, each asked; else only `fallback`, the
/// kube context's). `Ok(None)`: it may list them everywhere.
pub async fn readable_namespaces(
    client: &kube::Client,
    fallback: &str,
) -> Result<Option<Vec<String>>> {
    let pools = |namespace: Option<&str>| Need {
        verb: "list",
        group: AGENTDECK,
        resource: "agentpools",
        subresource: None,
        namespace: namespace.map(str::to_owned),
        part: None,
    };
    if allowed(client, &pools(None)).await? {
        return Ok(None);
    }
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let candidates: Vec<String> = match api.list_metadata(&kube::api::ListParams::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect(),
        Err(_) => vec![fallback.to_owned()],
    };
    let answers = futures::stream::iter(candidates)
        .map(|ns| async move {
            let ok = allowed(client, &pools(Some(&ns))).await;
            (ns, ok)
        })
        .buffered(REVIEWS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let mut readable = Vec::new();
    for (ns, ok) in answers {
        if ok? {
            readable.push(ns);
        }
    }
    Ok(Some(readable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(feature: Feature) -> Vec<String> {
        needs(feature, Some("team-a"), "agentdeck-system")
            .iter()
            .map(|n| match n.part {
                Some(p) => format!("{n} (for {p})"),
                None => n.to_string(),
            })
            .collect()
    }

    #[test]
    fn each_feature_needs_what_its_code_calls() {
        let cases: [(Feature, &[&str]); 13] = [
            (
                Feature::SeePools,
                &["list agentpools in team-a", "watch agentpools in team-a"],
            ),
            (
                Feature::SeeTasks,
                &["list agenttasks in team-a", "watch agenttasks in team-a"],
            ),
            (
                Feature::SeeAgents,
                &["list pods in team-a", "watch pods in team-a"],
            ),
            (
                Feature::ReadLogs,
                &[
                    "get pods/log in team-a",
                    "list configmaps in team-a (for lines kept of pods already gone)",
                    "get configmaps in team-a (for a finished task's kept output)",
                ],
            ),
            (
                Feature::SeeEvents,
                &["list events in team-a", "watch events in team-a"],
            ),
            (
                Feature::Scale,
                &[
                    "list agentpools in team-a",
                    "list pods in team-a",
                    "list agenttasks in team-a",
                    "patch agentpools in team-a",
                ],
            ),
            (
                Feature::Drain,
                &[
                    "list agentpools in team-a",
                    "list pods in team-a",
                    "list agenttasks in team-a",
                    "patch agentpools in team-a",
                    "patch pods in team-a (for one agent)",
                ],
            ),
            (
                Feature::DebugLogs,
                &[
                    "list agentpools in team-a",
                    "list pods in team-a",
                    "list agenttasks in team-a",
                    "patch agentpools in team-a",
                    "patch pods in team-a (for one agent)",
                ],
            ),
            (
                Feature::CancelRetry,
                &[
                    "get agenttasks in team-a",
                    "patch agenttasks in team-a",
                    "list agenttasks in team-a (for -l selector)",
                    "patch agenttasks/status in team-a (for retry)",
                    "get jobs in team-a (for retry)",
                    "delete jobs in team-a (for retry)",
                ],
            ),
            (
                Feature::Bundle,
                &[
                    "list secrets in team-a (for Secret values hidden wherever they appear, beyond the patterns)",
                    "list agentpools in team-a (for objects/agentpools.yaml)",
                    "list agenttasks in team-a (for objects/agenttasks.yaml and task outputs)",
                    "list pods in team-a (for objects/pods.yaml, pod logs and agent health)",
                    "get pods/log in team-a (for pod logs)",
                    "list events in team-a (for events.yaml)",
                    "list deployments in team-a (for objects/deployments.yaml)",
                    "list replicasets in team-a (for objects/replicasets.yaml)",
                    "list jobs in team-a (for objects/jobs.yaml)",
                    "list services in team-a (for objects/services.yaml)",
                    "list configmaps in team-a (for objects/configmaps.yaml and kept log tails)",
                    "list networkpolicies in team-a (for objects/networkpolicies.yaml)",
                    "list leases in team-a (for objects/leases.yaml)",
                    "list nodes (for objects/nodes.yaml)",
                    "list leases in agentdeck-system (for objects/controller-leases.yaml)",
                ],
            ),
            (
                Feature::DebugPod,
                &[
                    "get pods in team-a",
                    "create pods in team-a",
                    "patch pods/ephemeralcontainers in team-a (for --mode ephemeral)",
                    "list pods in team-a (for --list)",
                    "delete pods in team-a (for --cleanup)",
                ],
            ),
            (
                Feature::Exec,
                &[
                    "get pods in team-a",
                    "list pods in team-a",
                    "watch pods in team-a",
                    "get pods/exec in team-a",
                    "create pods/exec in team-a",
                ],
            ),
            (
                Feature::Lead,
                &[
                    "get leases in agentdeck-system",
                    "create leases in agentdeck-system",
                    "update leases in agentdeck-system",
                ],
            ),
        ];
        for (feature, want) in cases {
            assert_eq!(texts(feature), want, "{feature}");
        }
        assert_eq!(
            cases.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            Feature::ALL,
            "every feature has its case"
        );
    }

    #[test]
    fn every_namespace_is_asked_at_the_cluster_scope_and_the_lease_stays_where_it_is() {
        let all = needs(Feature::SeeAgents, None, "agentdeck-system");
        assert_eq!(all[0].to_string(), "list pods in all namespaces");
        assert_eq!(all[0].namespace, None);
        let lead = needs(Feature::Lead, None, "ops");
        assert!(lead.iter().all(|n| n.namespace.as_deref() == Some("ops")));
        // The bundle of the Lease's own namespace lists its Leases once.
        let bundle = needs(Feature::Bundle, Some("ops"), "ops");
        assert_eq!(
            bundle.iter().filter(|n| n.resource == "leases").count(),
            1,
            "{bundle:?}"
        );
    }

    #[test]
    fn groups_are_those_of_the_api() {
        let groups: BTreeMap<String, &str> = Feature::ALL
            .iter()
            .flat_map(|f| needs(*f, Some("a"), "b"))
            .map(|n| (n.resource_path(), n.group))
            .collect();
        assert_eq!(groups["agentpools"], "agentdeck.dev");
        assert_eq!(groups["agenttasks/status"], "agentdeck.dev");
        assert_eq!(groups["pods/exec"], "");
        assert_eq!(groups["events"], "");
        assert_eq!(groups["deployments"], "apps");
        assert_eq!(groups["jobs"], "batch");
        assert_eq!(groups["leases"], "coordination.k8s.io");
        assert_eq!(groups["networkpolicies"], "networking.k8s.io");
    }

    /// A viewer: get/list/watch of pools and tasks in team-a, nothing else.
    fn viewer(n: &Need) -> bool {
        n.namespace.as_deref() == Some("team-a")
            && n.group == "agentdeck.dev"
            && n.subresource.is_none()
            && matches!(n.resource, "agentpools" | "agenttasks")
            && matches!(n.verb, "get" | "list" | "watch")
    }

    #[test]
    fn a_viewer_sees_pools_and_tasks_and_is_told_what_else_lacks() {
        let t = AccessTable::decide(Some("team-a"), "agentdeck-system", None, viewer);
        assert!(t.allows(Feature::SeePools));
        assert!(t.allows(Feature::SeeTasks));
        assert!(!t.allows(Feature::SeeAgents));
        assert_eq!(
            missing_text(t.missing(Feature::SeeAgents)),
            "list, watch pods in team-a"
        );
        assert!(t.missing(Feature::SeePools).is_empty());
        // Cancel needs a patch the viewer lacks: no, not partly.
        let cancel = t.row(Feature::CancelRetry).expect("row");
        assert_eq!(cancel.verdict(), "no");
        // The bundle gets the pools and tasks, and lacks the rest.
        let bundle = t.row(Feature::Bundle).expect("row");
        assert_eq!(bundle.verdict(), "partly");
        let lacks = t.bundle_lacks();
        assert!(
            lacks.contains(&"events.yaml: list events in team-a".to_owned()),
            "{lacks:?}"
        );
        assert!(
            lacks.contains(&"pod logs: get pods/log in team-a".to_owned()),
            "{lacks:?}"
        );
        assert!(!lacks.iter().any(|l| l.contains("agentpools")), "{lacks:?}");
        let text = table_text(&t);
        assert!(text.contains("see pools     yes"), "{text}");
        assert!(
            text.contains("see agents    no       list, watch pods in team-a"),
            "{text}"
        );
        assert!(text.contains("bundle        partly   see below"), "{text}");
    }

    #[test]
    fn a_feature_missing_only_a_part_is_partly_allowed() {
        // Drain of pools, not of one agent.
        let t = AccessTable::decide(Some("ns"), "l", None, |n| {
            !(n.resource == "pods" && n.verb == "patch")
        });
        let drain = t.row(Feature::Drain).expect("row");
        assert!(!drain.allowed);
        assert!(drain.partial);
        assert_eq!(drain.verdict(), "partly");
        assert_eq!(
            missing_text(&drain.missing),
            "patch pods in ns (for one agent)"
        );
        assert!(t.allows(Feature::Scale));
        // Nothing granted at all: a bundle of nothing is a no.
        let none = AccessTable::decide(Some("ns"), "l", None, |_| false);
        assert_eq!(none.row(Feature::Bundle).expect("row").verdict(), "no");
        let all = AccessTable::decide(Some("ns"), "l", None, |_| true);
        assert!(Feature::ALL.iter().all(|f| all.allows(*f)));
        assert!(all.bundle_lacks().is_empty());
        assert!(!table_text(&all).contains("would lack"));
    }

    #[test]
    fn a_failed_question_names_what_was_asked_and_a_refused_impersonation_whom() {
        let forbidden = |message: &str| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure(message, "Forbidden").with_code(403),
            ))
        };
        let refused = forbidden(
            r#"serviceaccounts "viewer" is forbidden: User "bob" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team-a""#,
        );
        assert!(is_impersonation_refused(&refused));
        assert!(!is_impersonation_refused(&forbidden(
            r#"selfsubjectaccessreviews is forbidden: User "bob" cannot create"#
        )));
        let e = AccessError::Review {
            what: "ask whether this identity may list pods in team-a".into(),
            source: forbidden("no"),
        };
        assert!(
            e.to_string()
                .contains("to ask whether this identity may list pods in team-a"),
            "{e}"
        );
        let e = AccessError::ImpersonationRefused {
            subject: "system:serviceaccount:team-a:viewer".into(),
            needs: "impersonate on serviceaccounts in team-a".into(),
            message: "forbidden".into(),
        };
        assert_eq!(
            e.to_string(),
            "you may not impersonate system:serviceaccount:team-a:viewer \
             (needs impersonate on serviceaccounts in team-a): forbidden"
        );
    }

    #[test]
    fn the_json_has_stable_names() {
        let t = AccessTable::decide(Some("team-a"), "sys", Some("jane".into()), viewer);
        let v = serde_json::to_value(&t).expect("json");
        assert_eq!(v["user"], "jane");
        assert_eq!(v["namespace"], "team-a");
        assert_eq!(v["leaseNamespace"], "sys");
        assert_eq!(v["features"][0]["feature"], "see-pools");
        assert_eq!(v["features"][0]["name"], "see pools");
        assert_eq!(v["features"][0]["allowed"], true);
        let agents = &v["features"][2];
        assert_eq!(agents["feature"], "see-agents");
        assert_eq!(agents["allowed"], false);
        assert_eq!(
            agents["missing"][0],
            serde_json::json!({"verb": "list", "group": "", "resource": "pods",
                "subresource": null, "namespace": "team-a", "for": null,
                "text": "list pods in team-a"})
        );
        assert!(v["bundleLacks"].as_array().is_some_and(|a| !a.is_empty()));
    }

    #[test]
    fn an_action_needs_what_its_load_and_its_write_use() {
        use super::super::action::TaskSelection;
        let text = |a: &Action| {
            action_needs(a, "ns")
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        let reads = [
            "list agentpools in ns",
            "list pods in ns",
            "list agenttasks in ns",
        ];
        let with = |last: &str| {
            let mut v: Vec<String> = reads.iter().map(|s| (*s).to_owned()).collect();
            v.push(last.to_owned());
            v
        };
        let pool = |p: &str| p.to_owned();
        assert_eq!(
            text(&Action::ScalePool {
                pool: pool("p"),
                min: Some(1),
                max: None
            }),
            with("patch agentpools in ns")
        );
        assert_eq!(
            text(&Action::DrainAgent {
                pool: pool("p"),
                agent: "a".into(),
                undo: false
            }),
            with("patch pods in ns")
        );
        assert_eq!(
            text(&Action::DebugLogs {
                pool: pool("p"),
                agent: None,
                on: true
            }),
            with("patch agentpools in ns")
        );
        let named = TaskSelection {
            names: vec!["t".into()],
            selector: None,
        };
        assert_eq!(
            text(&Action::CancelTasks(named.clone())),
            ["get agenttasks in ns", "patch agenttasks in ns"]
        );
        let selected = TaskSelection {
            names: Vec::new(),
            selector: Some("run=nightly".into()),
        };
        assert_eq!(
            text(&Action::RetryTasks(selected)),
            [
                "list agenttasks in ns",
                "get jobs in ns",
                "delete jobs in ns",
                "patch agenttasks/status in ns"
            ]
        );
        // What an action needs is what its feature needs, without parts.
        for (action, feature) in [
            (Action::CancelTasks(named), Feature::CancelRetry),
            (
                Action::DrainPool {
                    pool: pool("p"),
                    undo: true,
                },
                Feature::Drain,
            ),
        ] {
            let of_feature = needs(feature, Some("ns"), "l");
            for need in action_needs(&action, "ns") {
                assert!(
                    of_feature.iter().any(|n| n.key() == need.key()),
                    "{need} is not among the needs of {feature}"
                );
            }
        }
    }

    /// Whether RBAC `rules` (as rendered) grant `need`.
    fn granted_by(rules: &serde_json::Value, need: &Need) -> bool {
        let has = |rule: &serde_json::Value, key: &str, want: &str| {
            rule[key]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == want || v == "*"))
        };
        rules.as_array().into_iter().flatten().any(|rule| {
            rule.get("resourceNames").is_none()
                && has(rule, "verbs", need.verb)
                && has(rule, "apiGroups", need.group)
                && has(rule, "resources", &need.resource_path())
        })
    }

    #[test]
    fn the_installed_controller_role_grants_what_the_controller_uses() {
        let rules = crate::install::controller_rules();
        // What the controller itself does: watch pools, tasks and pods,
        // follow logs. (Its Lease is in a Role of its own, below.)
        for feature in [
            Feature::SeePools,
            Feature::SeeTasks,
            Feature::SeeAgents,
            Feature::ReadLogs,
        ] {
            for need in needs(feature, Some("ns"), "sys") {
                if need.part.is_some() {
                    continue;
                }
                assert!(
                    granted_by(&rules, &need),
                    "the controller's Role lacks {need}"
                );
            }
        }
        let opts = crate::install::InstallOptions {
            namespace: "sys".into(),
            image: "agentdeck:dev".into(),
            config: crate::config::Config::default(),
            cluster_wide: false,
        };
        let objects = crate::install::controller_objects(&opts).expect("renders");
        let leader = objects
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "agentdeck-controller-leader")
            .expect("the leader Role");
        for need in needs(Feature::Lead, Some("ns"), "sys") {
            assert!(
                granted_by(&leader["rules"], &need),
                "the leader Role lacks {need}"
            );
            assert_eq!(leader["metadata"]["namespace"], "sys");
        }
        // Several namespaces: one watch across them, granted cluster-wide.
        let across = crate::install::cluster_watch_rules();
        for feature in [Feature::SeePools, Feature::SeeTasks, Feature::SeeAgents] {
            for need in needs(feature, None, "sys") {
                assert!(
                    granted_by(&across, &need),
                    "the watch ClusterRole lacks {need}"
                );
            }
        }
        // And it may not do what only operators do.
        for need in needs(Feature::Exec, Some("ns"), "sys") {
            if need.subresource == Some("exec") {
                assert!(!granted_by(&rules, &need), "the controller may {need}");
            }
        }
        assert!(
            !needs(Feature::DebugPod, Some("ns"), "sys")
                .iter()
                .filter(|n| n.verb == "create")
                .any(|n| granted_by(&rules, n)),
            "the controller may create pods"
        );
    }
}
