//! A Kubernetes-API-compatible server on loopback, backed by an in-memory
//! store, so that agentdeck runs and is tested with no cluster. Its yardstick
//! is what `kubectl` and kube-rs see from a real kube-apiserver.

pub mod api;
pub mod builtin;
pub mod discovery;
pub mod jsonpath;
pub mod registry;
pub mod schema;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;
