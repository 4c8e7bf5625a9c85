//! Errors a user can act on, and the exit codes they map to.

/// Exit code for a user mistake (bad flag, bad config, invalid pool); nothing was changed.
pub const EXIT_USAGE: i32 = 2;
