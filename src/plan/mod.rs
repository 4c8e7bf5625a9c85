//! Pure decisions: no I/O, no clock (time is an input), exhaustively unit-tested.

pub mod autoscale;
pub mod capacity;
pub mod freeze;
pub mod manifests;
pub mod pool;
pub mod redaction_key;
pub mod retention;
pub mod strategic_merge;
pub mod tails;
pub mod validate;
pub mod verdict;
