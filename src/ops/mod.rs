//! Operator actions shared by the CLI and the console.

pub mod bundle;
pub mod debug;
