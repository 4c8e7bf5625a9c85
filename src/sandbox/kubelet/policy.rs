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
//! 4. Any other container runs what a runtime would run: `command +
//!    args`; `args` alone after the image's ENTRYPOINT; neither, the image's
//!    ENTRYPOINT and CMD. Images have them in their config, which the
//!    sandbox cannot pull: [`default_command`] is the table of the images it
//!    knows (busybox `sh`, alpine `/bin/sh`, nginx `/docker-entrypoint.sh
//!    nginx -g 'daemon off;'`, …, each as its Dockerfile sets it); for one
//!    it does not know, `args` are the whole command line (base images have
//!    no ENTRYPOINT, and kubectl puts `kubectl run … -- CMD` in `args`).
//!    The program is looked up as a runtime does (a name on the container's
//!    `PATH`, a path in the container's file tree: the host's, with its
//!    volumes at their mount paths). One that is not there fails the way a
//!    missing binary fails under containerd ([`missing_program`]): the
//!    container is `Terminated` with reason `StartError`, exit code 128 and
//!    runc's message, then restarted by the pod's policy with back-off
//!    (`CrashLoopBackOff`), or fails the pod under `restartPolicy: Never`.
//!    So a commandless `nginx` is a `StartError` (no
//!    `/docker-entrypoint.sh` here), and a commandless `busybox` runs the
//!    host's `sh`, which, its input empty, exits 0 at once and is restarted
//!    into `CrashLoopBackOff`, as on a real node (with `stdin: true`,
//!    `kubectl run -it --image=busybox`, it has input and stays).
//! 5. The pause image (`registry.k8s.io/pause`, any registry or tag)
//!    running its own `/pause` is played: that program only sleeps until
//!    SIGTERM or SIGINT (then writes `Shutting down, got signal:
//!    Terminated` and exits 0), which the kubelet does exactly: Running,
//!    ready, an empty log. It is the placeholder for a pod that only has to
//!    exist (`kubectl create deployment web --image=registry.k8s.io/pause`).
//! 6. A container with neither `command` nor `args` whose image this
//!    module does not know has nothing the sandbox can run, and it does not
//!    pretend: the container stays `Waiting` as one whose image cannot be
//!    pulled, with the kubelet's reasons — `ErrImagePull` with the
//!    runtime's message ([`unpullable`], which says what to do instead),
//!    then `ImagePullBackOff` (`Back-off pulling image "…": ErrImagePull:
//!    …`) with the image back-off (10 s doubling to 300 s on a kubelet,
//!    the kubelet's restart back-off here) — and the pod `Pending`.
//!
//! The pod's status says what stood in for what: a condition of type
//! [`STAND_IN_CONDITION`] (a qualified name, as readiness gates use, which
//! clients list and otherwise ignore) whose message names, per container,
//! the host program run for its image, that it was played (the pause
//! image, the annotations) or that its image could not be run.
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
/// name (the last path segment, any registry and tag), as their
/// Dockerfiles set them: the base images people run commands in (CMD a
/// shell, no ENTRYPOINT), the pause image, and the placeholder images
/// tutorials and client suites use (whose programs are not on this
/// machine: they fail as a missing binary does).
const KNOWN_IMAGES: [(&str, ImageDefaults); 12] = [
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
    // kubernetes/build/pause: ENTRYPOINT ["/pause"] (see [`is_pause`]).
    (
        PAUSE,
        ImageDefaults {
            entrypoint: &[PAUSE_PROGRAM],
            cmd: &[],
        },
    ),
    // nginxinc/docker-nginx.
    (
        "nginx",
        ImageDefaults {
            entrypoint: &["/docker-entrypoint.sh"],
            cmd: &["nginx", "-g", "daemon off;"],
        },
    ),
    (
        "httpd",
        ImageDefaults {
            entrypoint: &[],
            cmd: &["httpd-foreground"],
        },
    ),
    (
        "redis",
        ImageDefaults {
            entrypoint: &["docker-entrypoint.sh"],
            cmd: &["redis-server"],
        },
    ),
];

/// The pause image's repository name (`registry.k8s.io/pause:3.10`).
const PAUSE: &str = "pause";

/// What the pause image runs.
const PAUSE_PROGRAM: &str = "/pause";

/// Whether a container of `image` that runs `argv` is the pause image's
/// own program: it sleeps until signalled, which the kubelet plays exactly
/// (see the module documentation, rule 5).
pub fn is_pause(image: &str, argv: &[String]) -> bool {
    repository(image) == PAUSE && argv.len() == 1 && argv[0] == PAUSE_PROGRAM
}

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
/// when the container sets neither and its image is not one this module
/// knows (see the module documentation, rule 6).
pub fn container_argv(image: &str, command: &[String], args: &[String]) -> Vec<String> {
    if !command.is_empty() {
        return command.iter().chain(args).cloned().collect();
    }
    let defaults = default_command(image);
    let entrypoint = defaults.map_or(&[][..], |d| d.entrypoint);
    let cmd: Vec<String> = if args.is_empty() {
        defaults
            .map_or(&[][..], |d| d.cmd)
            .iter()
            .map(|s| (*s).to_string())
            .collect()
    } else {
        args.to_vec()
    };
    entrypoint
        .iter()
        .map(|s| (*s).to_string())
        .chain(cmd)
        .collect()
}

/// What attach to an ephemeral container starts: what it runs, or `sh`
/// (what debugging images run) for an image this module does not know.
pub fn attach_argv(image: &str, command: &[String], args: &[String]) -> Vec<String> {
    let argv = container_argv(image, command, args);
    if !argv.is_empty() {
        return argv;
    }
    vec!["sh".to_string()]
}

/// The reference a runtime pulls for `image`, as containerd normalizes it:
/// `docker.io/library/nginx:latest` for `nginx`.
fn normalized(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let first = name.split('/').next().unwrap_or(name);
    let has_domain =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut out = if has_domain {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    let last = out.rsplit('/').next().unwrap_or_default();
    if !last.contains(':') && digest.is_none() {
        out.push_str(":latest");
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    out
}

/// The runtime's error for an image the sandbox cannot run (rule 6), as
/// the kubelet puts it in the container's `ErrImagePull` state and its
/// `Failed to pull image` event: containerd's words for a reference it
/// cannot resolve, then why and what to do instead.
pub fn unpullable(image: &str) -> String {
    let reference = normalized(image);
    format!(
        "rpc error: code = Unknown desc = failed to pull and unpack image \"{reference}\": \
         failed to resolve reference \"{reference}\": the agentdeck sandbox pulls no images \
         and does not know what {image} runs: give the container a command (this machine's \
         programs stand in for the image's), use the image registry.k8s.io/pause (a container \
         that runs until stopped), or annotate the pod {}: \"true\"",
        super::runtime::SIMULATE
    )
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
        let cases: [Case; 9] = [
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
            // Neither: the image's ENTRYPOINT and CMD, as its config has them.
            ("busybox", &[], &[], &["sh"]),
            (
                "nginx:1.27",
                &[],
                &[],
                &["/docker-entrypoint.sh", "nginx", "-g", "daemon off;"],
            ),
            ("registry.k8s.io/pause:3.10", &[], &[], &["/pause"]),
            // ... nothing for an image the table does not know.
            ("example.com/unknown:1", &[], &[], &[]),
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
    fn attached_ephemeral_containers_get_their_images_default_or_sh() {
        assert_eq!(attach_argv("busybox:1.36", &[], &[]), v(&["sh"]));
        assert_eq!(
            attach_argv("ghcr.io/x/alpine@sha256:ab", &[], &[]),
            v(&["/bin/sh"])
        );
        assert_eq!(attach_argv("nicolaka/netshoot", &[], &[]), v(&["zsh"]));
        assert_eq!(attach_argv("example.com/debug:1", &[], &[]), v(&["sh"]));
        assert_eq!(attach_argv("busybox", &v(&["top"]), &[]), v(&["top"]));
    }

    #[test]
    fn only_the_pause_images_own_program_is_the_pause_program() {
        for image in [
            "registry.k8s.io/pause",
            "registry.k8s.io/pause:3.10",
            "k8s.gcr.io/pause@sha256:ab",
        ] {
            assert!(is_pause(image, &container_argv(image, &[], &[])), "{image}");
        }
        assert!(!is_pause(
            "registry.k8s.io/pause:3.10",
            &v(&["sh", "-c", "sleep 1"])
        ));
        assert!(!is_pause("busybox", &v(&["/pause"])));
    }

    #[test]
    fn an_image_the_sandbox_cannot_run_fails_as_a_pull_in_containerds_words() {
        let cases = [
            ("nginx-unknown", "docker.io/library/nginx-unknown:latest"),
            ("acme/web:2", "docker.io/acme/web:2"),
            ("localhost:5000/web", "localhost:5000/web:latest"),
            ("ghcr.io/acme/web@sha256:ab", "ghcr.io/acme/web@sha256:ab"),
        ];
        for (image, reference) in cases {
            let m = unpullable(image);
            assert!(
                m.starts_with(&format!(
                    "rpc error: code = Unknown desc = failed to pull and unpack image \"{reference}\": failed to resolve reference \"{reference}\": "
                )),
                "{m}"
            );
        }
        let m = unpullable("acme/web:2");
        for hint in [
            "give the container a command",
            "registry.k8s.io/pause",
            "sandbox.agentdeck.dev/simulate: \"true\"",
        ] {
            assert!(m.contains(hint), "{m} lacks {hint}");
        }
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
