//! Exec and attach on the node: what `kubectl exec`, `kubectl cp` and
//! `kubectl debug -it` start in a container (see [`crate::sandbox::exec`]
//! for the wire side).
//!
//! - exec runs the command as a real process in the environment of a
//!   container the sandbox runs as a process: its env and working
//!   directory, in its mount namespace (joined through [`mountns`], so its
//!   volumes are at their paths for every file the command opens, relative
//!   paths included). Where the container has none (see the kubelet's
//!   fallback), absolute arguments under a mount path are given as the
//!   mount's host directory instead.
//! - Ephemeral containers are played, not run: exec in one runs in the
//!   environment of its target container, and each attach starts its
//!   command (or its image's default, `sh` for busybox and any image the
//!   policy does not know: [`policy::attach_argv`]).
//! - A simulated container, or one not running, is refused with a Status
//!   that says so.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use serde_json::Value;

use super::mountns;
use super::pod::{ContainerProcess, PodRuntime};
use super::policy;
use super::runtime::{self, Launch};
use super::status::State;
use super::volumes;
use crate::sandbox::api::{ApiError, ApiResult};
use crate::sandbox::exec::{Ends, ExecIo, ExecProcess, Launcher, StreamRequest};

/// The environment a container's process was started with, kept for exec.
#[derive(Debug, Clone)]
pub(super) struct ExecContext {
    /// Whether the container runs as a real process (else it is simulated).
    pub real: bool,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// The pod directory (its processes' working directory).
    pub dir: PathBuf,
    /// Its volume mounts, resolved to the host.
    pub mounts: Vec<volumes::ContainerMount>,
    /// Its working directory in the container.
    pub working_dir: PathBuf,
    /// Its running process, when the exec starts (see [`running_context`]).
    pub process: Option<ContainerProcess>,
}

/// Where `program` is found on `PATH` (as the runtime's exec looks it up),
/// in the file tree below `root` (`/` for the host's).
fn look_path(root: &Path, program: &str, env: &[(String, String)]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        let p = root.join(p.strip_prefix("/").unwrap_or(p));
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
}

/// What to start for `req` in `rt`, checked before the upgrade.
pub(super) fn launcher(
    pod: &Value,
    rt: Option<Arc<PodRuntime>>,
    container: &str,
    exe: &Path,
    req: &StreamRequest,
) -> ApiResult<Launcher> {
    let name = &req.pod;
    let Some(rt) = rt else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    };
    let ephemeral = pod["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == container);
    let (context, argv) = match ephemeral {
        Some(spec) => {
            let target = spec["targetContainerName"]
                .as_str()
                .filter(|t| !t.is_empty())
                .or_else(|| rt.slots.iter().find(|s| !s.init).map(|s| s.name.as_str()))
                .unwrap_or_default();
            let slot = rt.slot(target).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "ephemeral container \"{container}\" in pod \"{name}\" targets container \"{target}\", which the pod does not have"
                ))
            })?;
            let context = running_context(&slot.name, name, slot)?;
            let argv = if req.attach {
                policy::attach_argv(
                    spec["image"].as_str().unwrap_or_default(),
                    &strings(&spec["command"]),
                    &strings(&spec["args"]),
                )
            } else {
                req.command.clone()
            };
            (context, argv)
        }
        None => {
            let slot = rt.slot(container).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{name}\" is not available"
                ))
            })?;
            let context = running_context(container, name, slot)?;
            if req.attach {
                return attach_launcher(slot, container, name, req);
            }
            (context, req.command.clone())
        }
    };
    let exe = exe.to_path_buf();
    let tty = req.tty;
    let (stdin, stdout, stderr) = (req.stdin, req.stdout, req.stderr && !req.tty);
    Ok(Box::new(move || {
        start(&context, &exe, &argv, tty, stdin, stdout, stderr)
    }))
}

/// Attach to a running container: its streams, when it keeps its input
/// open (`stdin: true`); the output of one that does not is its log.
fn attach_launcher(
    slot: &super::pod::ContainerSlot,
    container: &str,
    pod: &str,
    req: &StreamRequest,
) -> ApiResult<Launcher> {
    let Some(attach) = slot.attach() else {
        return Err(ApiError::bad_request(format!(
            "attach to container \"{container}\" in pod \"{pod}\" is served by the agentdeck sandbox \
             for containers that keep their standard input open (stdin: true, as `kubectl run -i` \
             writes them); this one's output is its log (`kubectl logs -f {pod} -c {container}`); \
             use `kubectl exec` for a shell, or attach to an ephemeral container (`kubectl debug -it`)"
        )));
    };
    let stdin = req.stdin;
    Ok(Box::new(move || {
        let terminal = match &attach.master {
            Some(m) => Some(m.try_clone()?),
            None => None,
        };
        Ok(ExecProcess {
            ends: Ends::Container(attach.exited.subscribe()),
            io: ExecIo::Container {
                output: attach.output.subscribe(),
                input: stdin.then(|| attach.input.clone()),
                terminal,
            },
            cleanup: Box::new(|| {}),
        })
    }))
}

/// The context of a running container that runs as a process.
fn running_context(
    container: &str,
    pod: &str,
    slot: &super::pod::ContainerSlot,
) -> ApiResult<ExecContext> {
    let state = slot.status().state.clone();
    match state {
        State::Running { .. } => {}
        State::Waiting { reason, .. } => {
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{pod}\" is waiting to start: {reason}"
            )));
        }
        State::Terminated(_) => {
            return Err(ApiError::bad_request(format!(
                "cannot exec in a stopped container: container \"{container}\" in pod \"{pod}\" has terminated"
            )));
        }
    }
    let context = slot.exec_context().ok_or_else(|| {
        ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" is not running yet"
        ))
    })?;
    if !context.real {
        let image = slot.spec["image"].as_str().unwrap_or_default();
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" is simulated by the agentdeck sandbox \
             (image {image} has no process on this machine), so there is nothing to exec in or attach to; \
             exec and attach are served for containers the sandbox runs as processes: agentdeck \
             images and any container with a command or args (the host's programs stand in for \
             its image), unless the sandbox.agentdeck.dev/exit-after, exit-code or ready \
             annotations ask for a simulation"
        )));
    }
    let mut context = (*context).clone();
    context.process = slot.process();
    Ok(context)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Starts `argv` in the container's environment.
fn start(
    context: &ExecContext,
    exe: &Path,
    argv: &[String],
    tty: bool,
    stdin: bool,
    stdout: bool,
    stderr: bool,
) -> std::io::Result<ExecProcess> {
    let (first, rest) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command"))?;
    let not_found = || {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("executable file not found in $PATH: {first}"),
        )
    };
    let is_agentdeck = policy::is_agentdeck_command(first);
    let (program, args) = if let Some(process) = context.process.filter(|p| p.mount_namespace) {
        // The container's own view: its volumes at their paths, relative
        // paths from its working directory, as a runtime's exec has it.
        let root = PathBuf::from(format!("/proc/{}/root", process.pid));
        let program = if is_agentdeck {
            policy::CONTAINER_EXE.to_string()
        } else {
            look_path(&root, first, &context.env).ok_or_else(not_found)?;
            first.clone()
        };
        let mut command: Vec<std::ffi::OsString> = vec![program.into()];
        command.extend(rest.iter().map(std::ffi::OsString::from));
        let args = mountns::join_args(process.pid, Some(&context.working_dir), &command)
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        (exe.to_path_buf(), args)
    } else {
        let program = if is_agentdeck {
            exe.to_path_buf()
        } else {
            let mapped = map_path(context, first);
            look_path(Path::new("/"), &mapped, &context.env).ok_or_else(not_found)?
        };
        let mut args: Vec<String> = rest.iter().map(|a| map_path(context, a)).collect();
        if program.file_name().is_some_and(|n| n == "tar") {
            args.extend(tar_renames(rest, &args));
        }
        (program, args)
    };
    let launch = Launch {
        program: &program,
        args: &args,
        env: &context.env,
        cwd: &context.dir,
    };
    let mut cmd = runtime::exec_command(&launch, tty);
    let null_or = |asked: bool| if asked { Stdio::piped() } else { Stdio::null() };
    let (child, io) = if tty {
        let pty = nix::pty::openpty(None, None).map_err(std::io::Error::from)?;
        let slave: OwnedFd = pty.slave;
        cmd.stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave));
        let child = cmd.spawn()?;
        // The terminal closes (EIO on its reads) once the process and
        // what it started are gone, not while this side holds it open.
        drop(cmd);
        (child, ExecIo::Pty(pty.master))
    } else {
        cmd.stdin(null_or(stdin))
            .stdout(null_or(stdout))
            .stderr(null_or(stderr));
        let mut child = cmd.spawn()?;
        drop(cmd);
        let io = ExecIo::Pipes {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
        };
        (child, io)
    };
    let pgid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(nix::unistd::Pid::from_raw);
    Ok(ExecProcess {
        ends: Ends::Child(child),
        io,
        cleanup: Box::new(move || {
            if let Some(pgid) = pgid {
                runtime::kill_container(pgid);
            }
        }),
    })
}

/// GNU tar options that name the archive members of mapped paths as the
/// container sees them (`kubectl cp` from a pod reads `tar cf - /data/x`
/// and checks that every member starts with `data/x`).
fn tar_renames(given: &[String], mapped: &[String]) -> Vec<String> {
    let escape = |s: &str| {
        let mut out = String::new();
        for c in s.chars() {
            if "\\.^$*+?()[]{}|".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
        out
    };
    given
        .iter()
        .zip(mapped)
        .filter(|(g, m)| g != m && !g.contains(',') && !m.contains(','))
        .map(|(g, m)| {
            format!(
                "--transform=s,^{},{},",
                escape(m.trim_start_matches('/')),
                g.trim_start_matches('/')
            )
        })
        .collect()
}

/// An absolute path under one of the container's mounts, as the host
/// directory behind it; anything else unchanged.
fn map_path(context: &ExecContext, arg: &str) -> String {
    if !arg.starts_with('/') {
        return arg.to_string();
    }
    volumes::resolve_host_path(Some(&context.dir), &context.mounts, Path::new(arg))
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_looked_up_on_the_containers_path() {
        let env = vec![("PATH".to_string(), "/nonexistent:/bin:/usr/bin".to_string())];
        let root = Path::new("/");
        let sh = look_path(root, "sh", &env).expect("sh on PATH");
        assert!(sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(look_path(root, "no-such-program-here", &env), None);
        assert_eq!(look_path(root, "/no/such/file", &env), None);
    }

    #[test]
    fn tar_names_members_of_mapped_paths_as_the_container_sees_them() {
        let given = ["cf".to_string(), "-".into(), "/data/a.b".into()];
        let mapped = [
            "cf".to_string(),
            "-".into(),
            "/tmp/p-1/volumes/data/a.b".into(),
        ];
        assert_eq!(
            tar_renames(&given, &mapped),
            ["--transform=s,^tmp/p-1/volumes/data/a\\.b,data/a.b,"]
        );
    }

    #[test]
    fn paths_under_a_mount_are_given_as_its_host_directory() {
        let context = ExecContext {
            real: true,
            env: Vec::new(),
            dir: PathBuf::from("/tmp/pod"),
            mounts: vec![volumes::ContainerMount {
                path: "/data".to_string(),
                host: PathBuf::from("/tmp/pod/volumes/data"),
                read_only: false,
            }],
            working_dir: PathBuf::from("/"),
            process: None,
        };
        assert_eq!(map_path(&context, "/data/x"), "/tmp/pod/volumes/data/x");
        assert_eq!(map_path(&context, "-c"), "-c");
        assert_eq!(map_path(&context, "/etc/hosts"), "/etc/hosts");
    }
}
