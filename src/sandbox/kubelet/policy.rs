//! What runs for real: the sandbox's one policy on agentdeck's own programs.
//!
//! **Why it exists.** The sandbox has no container images: its kubelet
//! cannot pull `busybox` or `agentdeck:1.2` and run what is inside. It
//! decides instead what a container's image and command mean *on this
//! machine*, and that takes knowing a few things about agentdeck itself —
//! which containers are agentdeck (so the binary under test runs them), which
//! shell scripts agentdeck's own pods run (so those run with the host's
//! `/bin/sh` rather than being simulated), and where agentdeck looks for its
//! files (so a container without a mount namespace still finds them). That
//! knowledge is here and nowhere else in the sandbox: the rest of the
//! kubelet asks this module, and product code never asks the sandbox
//! anything (it must not know it runs there).
//!
//! **What it maps.**
//! - The agentdeck image (`…/agentdeck[:tag][@digest]`) and a `command[0]`
//!   of `agentdeck` or `…/agentdeck` → the kubelet's agentdeck executable,
//!   seen inside a container at [`CONTAINER_EXE`] as the image has it
//!   (`assets/Dockerfile`).
//! - `sh -c <script>` → the host's `/bin/sh` when the script is the job task
//!   runner ([`crate::plan::manifests::RUNNER_SCRIPT`]) or a debug pod's
//!   waiting shell ([`crate::ops::debug::is_waiting_shell`]); any other script
//!   only when its pod opts in (`sandbox.agentdeck.dev/run-shell`, see
//!   [`super::runtime`]).
//! - Without a mount namespace ([`super::fallback`]): an `agentdeck agent`'s
//!   default token, shared and work paths (as `AGENTDECK_AGENT_*` variables)
//!   and the configuration file agentdeck searches for in [`CONFIG_DIR`]
//!   ([`crate::config::CONFIG_FILE_NAME`],
//!   [`crate::config::AGENT_CONFIG_FILE_NAME`] for `agentdeck agent`).

use std::path::{Path, PathBuf};

use crate::config::{AGENT_CONFIG_FILE_NAME, AgentConfig, CONFIG_FILE_NAME};
use crate::plan::manifests::RUNNER_SCRIPT;

/// Where a container finds the agentdeck binary (bind-mounted read-only from
/// wherever it really is), as the agentdeck image has it; agentdeck
/// containers run this path.
pub const CONTAINER_EXE: &str = "/usr/local/bin/agentdeck";

/// Where agentdeck looks for its configuration file when given no
/// `--config`.
pub const CONFIG_DIR: &str = "/etc/agentdeck";

/// The name of the agentdeck binary.
const EXE_NAME: &str = "agentdeck";

/// Whether `exe` is the agentdeck binary, whose `main` serves the hidden
/// container entry point (`__sandbox-container`).
pub(super) fn is_agentdeck_exe(exe: &Path) -> bool {
    exe.file_name().and_then(|n| n.to_str()) == Some(EXE_NAME)
}

/// The agentdeck executable when nothing names one: `agentdeck` from `PATH`.
pub(super) fn default_exe() -> PathBuf {
    PathBuf::from(EXE_NAME)
}

/// Whether an image reference names the agentdeck image (any registry, tag
/// or digest).
pub(super) fn is_agentdeck_image(image: &str) -> bool {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    let repo = last.split(':').next().unwrap_or(last);
    repo == EXE_NAME
}

/// Whether a command (`command[0]`, or what `kubectl exec` runs) is
/// agentdeck: `agentdeck` or a path ending in `/agentdeck`.
pub(super) fn is_agentdeck_command(c: &str) -> bool {
    c == EXE_NAME || c.ends_with("/agentdeck")
}

/// Whether a `sh -c` script is one of agentdeck's own, which run for real
/// whatever the pod says: the job task runner and a debug pod's waiting
/// shell.
pub(super) fn is_product_script(script: &str) -> bool {
    script.trim() == RUNNER_SCRIPT.trim() || crate::ops::debug::is_waiting_shell(script)
}

/// Whether agentdeck's arguments (after the program) start `agentdeck agent`.
pub(super) fn is_agent(args: &[String]) -> bool {
    args.first().is_some_and(|a| a == "agent")
}

/// The agent's documented settings whose default paths a container without
/// a mount namespace is given as host paths: `(variable, default path)`.
pub(super) fn agent_default_paths() -> [(&'static str, PathBuf); 3] {
    let defaults = AgentConfig::default();
    [
        ("AGENTDECK_AGENT_TOKEN_FILE", defaults.token_file),
        ("AGENTDECK_AGENT_SHARED_DIR", defaults.shared_dir),
        ("AGENTDECK_AGENT_WORK_DIR", defaults.work_dir),
    ]
}

/// Where agentdeck (`agent`: `agentdeck agent`) searches for its
/// configuration file when given no `--config`.
pub(super) fn searched_config(agent: bool) -> PathBuf {
    let name = if agent {
        AGENT_CONFIG_FILE_NAME
    } else {
        CONFIG_FILE_NAME
    };
    Path::new(CONFIG_DIR).join(name)
}
