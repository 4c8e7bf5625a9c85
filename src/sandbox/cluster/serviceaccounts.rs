//! The service account controller: every namespace gets its `default`
//! ServiceAccount, which pods run as unless they name another.

use serde_json::json;

use super::meta::{self, Gvr, Writer};
use super::{Controller, Pass};
use crate::sandbox::api::Api;

const COMPONENT: &str = "service-account-controller";

const NAMESPACES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "namespaces",
    kind: "Namespace",
};

const SERVICE_ACCOUNTS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "serviceaccounts",
    kind: "ServiceAccount",
};

/// Creates the `default` ServiceAccount of each active namespace (again,
/// if someone deletes it, as the real controller does).
#[derive(Debug, Default)]
pub(crate) struct ServiceAccountController;

impl Controller for ServiceAccountController {
    const NAME: &'static str = "serviceaccount";

    fn watches(&self) -> &'static [&'static str] {
        &["namespaces", "serviceaccounts"]
    }

    fn reconcile(&mut self, api: &Api, _now: i64) -> Pass {
        let (namespaces, _) = api.store.list(&NAMESPACES.key(), None);
        let mut w = Writer::new(api, COMPONENT);
        for ns in &namespaces {
            let name = meta::name(ns);
            if meta::is_deleting(ns) || meta::str_at(ns, "/status/phase") == "Terminating" {
                continue;
            }
            if api
                .store
                .get(&SERVICE_ACCOUNTS.key(), name, "default")
                .is_none()
            {
                let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                "metadata": {"name": "default", "namespace": name}});
                let _ = w.create(SERVICE_ACCOUNTS, name, sa);
            }
        }
        Pass { retry: w.retry }
    }
}
