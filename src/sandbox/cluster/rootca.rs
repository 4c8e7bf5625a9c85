//! The root CA publisher (kube-controller-manager's `root-ca-cert-publisher`):
//! every active namespace gets the ConfigMap `kube-root-ca.crt` with the
//! cluster's CA bundle under `ca.crt`, put back if it is deleted or changed.
//!
//! The bundle is the CA that signs the sandbox's serving certificate (see
//! [`crate::sandbox::tls`]), so pods verify the API server with it as they
//! would in a cluster.

use serde_json::{Value, json};

use super::meta::{self, Gvr, Writer};
use super::{Controller, Pass};
use crate::sandbox::api::Api;

const COMPONENT: &str = "root-ca-cert-publisher";

/// The ConfigMap's name, as in every cluster.
pub const NAME: &str = "kube-root-ca.crt";

const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

const NAMESPACES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "namespaces",
    kind: "Namespace",
};

const CONFIG_MAPS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "configmaps",
    kind: "ConfigMap",
};

/// Keeps `kube-root-ca.crt` in each namespace.
#[derive(Debug, Default)]
pub(crate) struct RootCaPublisher;

impl Controller for RootCaPublisher {
    const NAME: &'static str = "root-ca-cert-publisher";

    fn watches(&self) -> &'static [&'static str] {
        &["namespaces", "configmaps"]
    }

    fn reconcile(&mut self, api: &Api, _now: i64) -> Pass {
        let (namespaces, _) = api.store.list(&NAMESPACES.key(), None);
        let mut w = Writer::new(api, COMPONENT);
        let ca = api.security.pki().ca_pem();
        for ns in &namespaces {
            let name = meta::name(ns);
            if meta::is_deleting(ns) || meta::str_at(ns, "/status/phase") == "Terminating" {
                continue;
            }
            match api.store.get(&CONFIG_MAPS.key(), name, NAME) {
                None => {
                    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": NAME, "namespace": name,
                                     "annotations": {"kubernetes.io/description": DESCRIPTION}},
                        "data": {"ca.crt": ca}});
                    let _ = w.create(CONFIG_MAPS, name, cm);
                }
                Some(cm) if cm["data"] != json!({"ca.crt": ca}) => {
                    let mut fixed: Value = (*cm).clone();
                    fixed["data"] = json!({"ca.crt": ca});
                    let _ = w.update(CONFIG_MAPS, fixed);
                }
                Some(_) => {}
            }
        }
        Pass { retry: w.retry }
    }
}
