//! What runs for real: the sandbox's one policy on what a container's image
//! and command mean on this machine.
//!
//! **Why it exists.** The sandbox has no container images: its kubelet
//! cannot pull `busybox` or `agentdeck:1.2` and run what is inside. It
//! decides instead what a container's image and command mean *on this
//! machine*: the host's userland (`/bin/sh`, coreutils, whatever is on its
//! `PATH`) stands in for every image, and agentdeck's own binary for the
//! agentdeck image. That knowledge is here and nowhere else in the sandbox:
//! the rest of the kubelet asks this module, and product code never asks
//! the sandbox anything (it must not know it runs there).
//!
//! **What runs, in this order** ([`super::runtime::plan`] applies it):
//! 1. A `command[0]` of `agentdeck` or `…/agentdeck` → the kubelet's
//!    agentdeck executable, seen inside a container at [`CONTAINER_EXE`] as
//!    the image has it (`assets/Dockerfile`).
//! 2. agentdeck's own shell scripts (`sh -c` of the job task runner,
//!    [`crate::plan::manifests::RUNNER_SCRIPT`], or a debug pod's waiting
//!    shell, [`crate::ops::debug::is_waiting_shell`]) → the host's `/bin/sh`,
//!    whatever the image; then the agentdeck image
//!    (`…/agentdeck[:tag][@digest]`) → the agentdeck executable with
//!    `command + args`.
//! 3. A container shaped by the simulation annotations
//!    (`sandbox.agentdeck.dev/simulate: "true"`, `exit-after`, `exit-code`,
//!    `ready`, see [`super::runtime`]) is played: its author asked for a
//!    stand-in.
//! 4. Any other container with a `command` or `args` runs them: `command +
//!    args`, or with `args` alone the image's entrypoint ([`default_command`])
//!    followed by them (none for an image this module does not know: base
//!    images have none, and kubectl puts `kubectl run … -- CMD` in `args`).
//!    The program is looked up as a runtime does (a name on the container's
//!    `PATH`, a path in the container's file tree: the host's, with its
//!    volumes at their mount paths). One that is not there fails the way a
//!    missing binary fails under containerd ([`missing_program`]): the
//!    container is `Terminated` with reason `StartError`, exit code 128 and
//!    runc's message, then restarted by the pod's policy with back-off
//!    (`CrashLoopBackOff`), or fails the pod under `restartPolicy: Never`.
//! 5. A container with neither is played ("simulated": it logs that it
//!    started and runs until stopped, ready). A real node would run the
//!    image's ENTRYPOINT/CMD, which the sandbox cannot know for an arbitrary
//!    image; and for the images it does know ([`default_command`]: busybox's
//!    `sh`, …) that default is a shell that, without input, exits at once —
//!    a crash loop nobody writing a placeholder pod (`kubectl create
//!    deployment web --image=nginx`, the demo's, tests' and client suites'
//!    pods) wants. The table serves containers that keep their input open
//!    (`stdin: true`: `kubectl run -it --image=busybox` runs `sh`, attached),
//!    attach to an ephemeral container (`kubectl debug -it --image=busybox`
//!    starts `sh`) and `args`-only containers.
//!
//! The pod's status says what stood in for what: a condition of type
//! [`STAND_IN_CONDITION`] (a qualified name, as readiness gates use, which
//! clients list and otherwise ignore) whose message names, per container,
//! the host program run for its image or that it was played.
//!
//! Without a mount namespace ([`super::fallback`]): an `agentdeck agent`'s
//! default token, shared and work paths (as `AGENTDECK_AGENT_*` variables)
//! and the configuration file agentdeck searches for in [`CONFIG_DIR`]
//! ([`crate::config::CONFIG_FILE_NAME`],
//! [`crate::config::AGENT_CONFIG_FILE_NAME`] for `agentdeck agent`).

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
    repository(image) == EXE_NAME
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

/// The pod condition that says what stood in for each container's image.
pub const STAND_IN_CONDITION: &str = "sandbox.agentdeck.dev/StandIn";

/// An image's ENTRYPOINT and CMD, as its Dockerfile sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageDefaults {
    /// ENTRYPOINT (`args` are appended to it).
    pub entrypoint: &'static [&'static str],
    /// CMD (what runs when the container sets neither `command` nor `args`).
    pub cmd: &'static [&'static str],
}

/// The well-known images whose defaults the sandbox knows, by repository
/// name (the last path segment, any registry and tag): the base images
/// people run commands in, whose CMD is a shell and ENTRYPOINT empty.
const KNOWN_IMAGES: [(&str, ImageDefaults); 8] = [
    (
        "busybox",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["sh"],
        },
    ),
    (
        "alpine",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["/bin/sh"],
        },
    ),
    (
        "ubuntu",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["/bin/bash"],
        },
    ),
    (
        "debian",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["bash"],
        },
    ),
    (
        "fedora",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["/bin/bash"],
        },
    ),
    (
        "bash",
        ImageDefaults {
            entrypoint: &["docker-entrypoint.sh"],
            cmd: &["bash"],
        },
    ),
    (
        "python",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["python3"],
        },
    ),
    (
        "netshoot",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["zsh"],
        },
    ),
];

/// The repository name of an image reference: `busybox` for
/// `docker.io/library/busybox:1.36@sha256:…`.
fn repository(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split(':').next().unwrap_or(last)
}

/// The ENTRYPOINT and CMD of a well-known image (see [`KNOWN_IMAGES`]).
pub fn default_command(image: &str) -> Option<ImageDefaults> {
    let repo = repository(image);
    KNOWN_IMAGES
        .iter()
        .find(|(name, _)| *name == repo)
        .map(|(_, d)| *d)
}

/// What a container runs, as a runtime builds it from the image and the
/// pod (`command` replaces ENTRYPOINT and CMD, `args` replaces CMD): empty
/// when the container sets neither (see the module documentation, rule 5).
pub fn container_argv(image: &str, command: &[String], args: &[String]) -> Vec<String> {
    if !command.is_empty() {
        return command.iter().chain(args).cloned().collect();
    }
    if args.is_empty() {
        return Vec::new();
    }
    let entrypoint = default_command(image).map_or(&[][..], |d| d.entrypoint);
    entrypoint
        .iter()
        .map(|s| (*s).to_string())
        .chain(args.iter().cloned())
        .collect()
}

/// What a container with neither command nor args that keeps its input
/// open (`stdin: true`) runs: its image's default, when the image is one
/// this module knows (else nothing: it is simulated).
pub fn interactive_argv(image: &str) -> Vec<String> {
    default_command(image)
        .map(|d| {
            d.entrypoint
                .iter()
                .chain(d.cmd)
                .map(|s| (*s).to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// What attach to an ephemeral container starts when it sets no command:
/// its image's default, or `sh` (what debugging images run).
pub fn attach_argv(image: &str, command: &[String], args: &[String]) -> Vec<String> {
    let argv = container_argv(image, command, args);
    if !argv.is_empty() {
        return argv;
    }
    match default_command(image) {
        Some(d) => d
            .entrypoint
            .iter()
            .chain(d.cmd)
            .map(|s| (*s).to_string())
            .collect(),
        None => vec!["sh".to_string()],
    }
}

/// The message containerd reports (in the container's `StartError` state
/// and the kubelet's `Failed` event) when a container's program is not in
/// its file tree: runc's `exec` error, as for a missing binary.
pub fn missing_program(program: &str) -> String {
    let why = if program.contains('/') {
        format!("exec: \"{program}\": stat {program}: no such file or directory")
    } else {
        format!("exec: \"{program}\": executable file not found in $PATH")
    };
    format!(
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: \
         runc create failed: unable to start container process: {why}: unknown"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_string()).collect()
    }

    /// Image, command, args, what runs.
    type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);

    #[test]
    fn what_a_container_runs_is_built_from_its_image_command_and_args() {
        let cases: [Case; 6] = [
            // command replaces ENTRYPOINT and CMD.
            (
                "busybox",
                &["sh", "-c"],
                &["exit 3"],
                &["sh", "-c", "exit 3"],
            ),
            ("bash:5", &["env"], &[], &["env"]),
            // args alone follow the image's ENTRYPOINT, if it has one.
            ("busybox", &[], &["sleep", "5"], &["sleep", "5"]),
            (
                "docker.io/library/bash:5",
                &[],
                &["-c", "date"],
                &["docker-entrypoint.sh", "-c", "date"],
            ),
            ("example.com/unknown:1", &[], &["serve"], &["serve"]),
            // Neither: nothing to run (simulated).
            ("busybox", &[], &[], &[]),
        ];
        for (image, command, args, want) in cases {
            assert_eq!(
                container_argv(image, &v(command), &v(args)),
                v(want),
                "{image} {command:?} {args:?}"
            );
        }
    }

    #[test]
    fn interactive_and_attached_containers_get_their_images_default() {
        assert_eq!(interactive_argv("busybox:1.36"), v(&["sh"]));
        assert_eq!(
            interactive_argv("ghcr.io/x/alpine@sha256:ab"),
            v(&["/bin/sh"])
        );
        assert_eq!(interactive_argv("nginx"), Vec::<String>::new());
        assert_eq!(attach_argv("nicolaka/netshoot", &[], &[]), v(&["zsh"]));
        assert_eq!(attach_argv("example.com/debug:1", &[], &[]), v(&["sh"]));
        assert_eq!(attach_argv("busybox", &v(&["top"]), &[]), v(&["top"]));
    }

    #[test]
    fn a_missing_program_is_reported_in_runcs_words() {
        assert!(missing_program("nginx").ends_with(
            "unable to start container process: exec: \"nginx\": executable file not found in $PATH: unknown"
        ));
        assert!(missing_program("/docker-entrypoint.sh").contains(
            "exec: \"/docker-entrypoint.sh\": stat /docker-entrypoint.sh: no such file or directory: unknown"
        ));
    }
}
