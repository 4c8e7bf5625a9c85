//! Operator actions, shared by the CLI and the console: what the user
//! wants ([`action::Action`]), what it would change and mean
//! ([`exec::preview`]: server-side dry run + impact in words), doing it
//! ([`exec::apply`]: optimistic concurrency, 409s retried on fresh data)
//! and the audit trail ([`audit`]: an Event on each object, a JSON line in
//! the local audit file). Every action is an object change that whichever
//! controller leads carries out.

pub mod access;
pub mod action;
pub mod attach;
pub mod audit;
pub mod bundle;
pub mod cli;
pub mod debug;
pub mod diff;
pub mod error;
pub mod exec;
pub mod kept;
pub mod plan;
pub mod status;

pub use action::{Action, Actor, TaskSelection};
pub use error::OpsError;
pub use exec::{Outcome, Preview, apply, preview};
