//! Containers that see their volumes at their mount paths and only their
//! own processes: a private mount namespace and a PID namespace per
//! container, set up by a hidden entry point of our own binary that then
//! `exec`s the container's command.
//!
//! The kubelet starts a real-process container as
//!
//! ```text
//! agentdeck __sandbox-container --rootfs <pod dir>/rootfs [--cwd DIR]
//!     [--pid-namespace] [--mount SRC=DST]… [--mount-ro SRC=DST]… -- COMMAND ARGS…
//! ```
//!
//! which, first thing in `main` (before any thread or runtime exists):
//!
//! 1. unshares a mount namespace (`CLONE_NEWNS`) — as root — or a user and
//!    a mount namespace (`CLONE_NEWUSER | CLONE_NEWNS`, the caller's uid and
//!    gid mapped to themselves) where it is not root;
//! 2. makes every mount private (nothing propagates back to the host);
//! 3. builds the container's root on a tmpfs at `--rootfs`: every entry of
//!    the host's `/` bind-mounted (recursively) at its own name, symlinks
//!    copied, and switches to it with `pivot_root` (the host's root stays
//!    reachable at `/.oldroot` until step 5);
//! 4. for each mount, shallowest first: where its path does not exist, the
//!    nearest existing parent that holds host content (`/`, `/etc`, `/var/run`
//!    …) is replaced by a tmpfs holding bind mounts of the same entries
//!    ("tmpfs + binds": the host's files stay visible, new entries go to
//!    memory), the missing directories (or file, for a file `subPath`) are
//!    created, and the volume is bind-mounted there; `readOnly` mounts are
//!    remounted read-only afterwards. The kubelet adds the agentdeck binary as one more (read-only) mount,
//!    at [`super::policy::CONTAINER_EXE`], and agentdeck containers run that path: where
//!    the binary really is may be hidden by a volume (a checkout under
//!    `/tmp`, below the pods' `/tmp` emptyDir);
//! 5. detaches the old root, with `--pid-namespace` unshares a PID
//!    namespace (`CLONE_NEWPID`: its next child is that namespace's PID 1),
//!    and starts the command as its child, staying as the container's
//!    supervisor ([`supervise`]): tied to the sandbox (a parent-death
//!    signal, checked against `--parent`), subreaper of what the command
//!    leaves behind, all of it SIGKILLed when the sandbox is gone — SIGKILL
//!    of the sandbox included — or when the command ends, and exiting as the
//!    command did. It is the process the kubelet knows (its group and
//!    session are the container's, so the kubelet's signals and kills reach
//!    the command too), outside the PID namespace;
//! 6. in a PID namespace, the command, before it is `exec`ed, mounts a
//!    fresh `/proc` over the host's (in the container's mount namespace), so
//!    `sh -c 'echo $$'` prints 1 and `ps` shows the container's processes
//!    only. As on a node, PID 1 gets no signal it has no handler for (a
//!    bare `sleep` ignores the SIGTERM of a deletion and is SIGKILLed after
//!    the grace period, a shell's children get the kubelet's SIGTERM, which
//!    goes to the container's process group), and when it ends the kernel
//!    ends every other process of the container. The supervisor no longer
//!    reads `/proc` once the command runs (it is the container's now): it
//!    ends the container by SIGKILLing its PID 1. Given a terminal (`tty:
//!    true`, an `exec -t`), the command leads a session of its own whose
//!    controlling terminal it is (util-linux `setsid --ctty`), as runc
//!    sets up a terminal, so a shell's job control finds its process groups
//!    in the namespace; the supervisor passes the kubelet's signals on to it
//!    then.
//!
//! Nothing is written to the host outside the pod directory: shadow tmpfs
//! mounts live in the namespace, which dies with the container's last
//! process. New directories created *inside* a volume (a mount path below
//! another volume's) are written into that volume, as a container runtime
//! does.
//!
//! **Joining** (for `kubectl exec` and anything else that must see the same
//! files and processes): `agentdeck __sandbox-container --join PID [--cwd
//! DIR] -- COMMAND ARGS…`, `PID` a container's supervisor, enters its user
//! namespace when it has its own and, for its children, the PID namespace
//! of its children (`setns` on `/proc/PID/ns/user` and
//! `/proc/PID/ns/pid_for_children`), and runs the command under the same
//! supervision as step 5; the command first enters the container's mount
//! namespace (`/proc/PID/ns/mnt`, opened by the supervisor and inherited),
//! whose root is the container's root (it was `pivot_root`ed) and whose
//! `/proc` the container's, then changes to `--cwd` (default `/`). So an
//! exec'd `sh -c 'echo $$'` prints a PID of the container's namespace
//! (other than 1, the container's command) and its `ps` shows the
//! container's processes; the supervisor stays in the host's mount
//! namespace, whose `/proc` it reads to end what the command leaves behind. Build the argument list with [`join_args`]; the
//! kubelet keeps each running container's pid and whether it has a
//! namespace of its own (`ContainerSlot::process` in `pod.rs`).
//!
//! **Probing**: `--probe` does steps 1–3, then tries a PID namespace whose
//! first process mounts its `/proc`, says on standard output whether that
//! worked ([`probed_pid_namespace`] reads it) and exits 0 instead of
//! running anything; the kubelet runs it once to learn whether this machine
//! allows mount namespaces (see [`probe_args`]), and otherwise falls back
//! to passing host paths (see the kubelet module); without PID namespaces
//! containers keep their mount namespace and see the host's processes.
//! That is the case of a sandbox run by a user other than root: its uid is
//! mapped to itself in the user namespace, so the command's first process
//! has no capability left after its `exec` to mount the namespace's
//! `/proc` (the probe says `EPERM`), and a PID namespace whose `/proc` is
//! the host's would show PIDs that are not the container's.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::statvfs::{FsFlags, statvfs};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpid, getppid};

/// The hidden first argument that selects this entry point.
pub const SUBCOMMAND: &str = "__sandbox-container";

/// Where the host's root is put while the container's root is assembled.
const OLD_ROOT: &str = "/.oldroot";

/// The file behind `exe` on the host: an absolute path with symlinks
/// resolved, or a bare name looked up on `PATH`; None where there is none.
pub fn host_executable(exe: &Path) -> Option<PathBuf> {
    if exe.components().count() > 1 || exe.is_absolute() {
        return std::fs::canonicalize(exe).ok().filter(|p| p.is_file());
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(exe))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
}

/// One volume mount of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The volume's directory (or file, for a file `subPath`) on the host.
    pub source: PathBuf,
    /// Its `mountPath` in the container.
    pub target: PathBuf,
    /// `readOnly: true`.
    pub read_only: bool,
}

/// What the entry point was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// Set up a new namespace and run `command` in it.
    Create {
        /// Mount point (an empty directory in the pod directory) for the
        /// container's root.
        rootfs: PathBuf,
        /// Working directory in the container.
        cwd: Option<PathBuf>,
        /// Volume mounts.
        mounts: Vec<Mount>,
        /// Program and arguments; empty for a probe.
        command: Vec<OsString>,
        /// Only check that a namespace can be set up.
        probe: bool,
        /// The process that started it (see [`supervise`]).
        parent: Option<i32>,
        /// Run `command` as the first process of a PID namespace of its
        /// own (`--pid-namespace`).
        pid_namespace: bool,
    },
    /// Enter the namespaces of process `pid` and run `command` there.
    Join {
        /// A process of the container.
        pid: i32,
        /// Working directory in the container.
        cwd: Option<PathBuf>,
        /// Program and arguments.
        command: Vec<OsString>,
        /// The process that started it (see [`supervise`]).
        parent: Option<i32>,
    },
}

/// Arguments (after the executable) that run `command` in a new mount
/// namespace with `mounts` at their paths, and with `pid_namespace` in a
/// PID namespace of its own.
pub fn create_args(
    rootfs: &Path,
    cwd: Option<&Path>,
    mounts: &[Mount],
    pid_namespace: bool,
    command: &[OsString],
) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![SUBCOMMAND.into(), "--rootfs".into(), rootfs.into()];
    out.extend(parent_args());
    if pid_namespace {
        out.push("--pid-namespace".into());
    }
    if let Some(cwd) = cwd {
        out.extend(["--cwd".into(), cwd.into()]);
    }
    for m in mounts {
        let flag = if m.read_only { "--mount-ro" } else { "--mount" };
        let mut pair = m.source.clone().into_os_string();
        pair.push("=");
        pair.push(&m.target);
        out.extend([flag.into(), pair]);
    }
    out.push("--".into());
    out.extend(command.iter().cloned());
    out
}

/// Arguments (after the executable) that run `command` in the mount view
/// of the container whose process is `pid` (see the module documentation).
pub fn join_args(pid: i32, cwd: Option<&Path>, command: &[OsString]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![SUBCOMMAND.into(), "--join".into(), pid.to_string().into()];
    out.extend(parent_args());
    if let Some(cwd) = cwd {
        out.extend(["--cwd".into(), cwd.into()]);
    }
    out.push("--".into());
    out.extend(command.iter().cloned());
    out
}

/// `--parent` with this process's id: whoever builds the arguments starts
/// the entry point as its own child (util-linux `setsid` and `setpriv` exec
/// in place).
fn parent_args() -> [OsString; 2] {
    ["--parent".into(), std::process::id().to_string().into()]
}

/// Arguments (after the executable) of a probe using `rootfs` as its
/// scratch mount point.
pub fn probe_args(rootfs: &Path) -> Vec<OsString> {
    vec![
        SUBCOMMAND.into(),
        "--rootfs".into(),
        rootfs.into(),
        "--probe".into(),
    ]
}

/// Reads the arguments after [`SUBCOMMAND`].
pub fn parse(args: &[OsString]) -> Result<Invocation, String> {
    let mut rootfs = None;
    let mut cwd = None;
    let mut join = None;
    let mut parent = None;
    let mut probe = false;
    let mut pid_namespace = false;
    let mut mounts = Vec::new();
    let mut it = args.iter();
    let mut command = Vec::new();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.to_str() {
            Some("--") => {
                command = it.cloned().collect();
                break;
            }
            Some("--rootfs") => rootfs = Some(PathBuf::from(value("--rootfs")?)),
            Some("--cwd") => cwd = Some(PathBuf::from(value("--cwd")?)),
            Some("--probe") => probe = true,
            Some("--pid-namespace") => pid_namespace = true,
            Some(flag @ ("--join" | "--parent")) => {
                let v = value(flag)?;
                let pid = v
                    .to_str()
                    .and_then(|s| s.parse::<i32>().ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("{flag}: {v:?} is not a process id"))?;
                if flag == "--join" {
                    join = Some(pid);
                } else {
                    parent = Some(pid);
                }
            }
            Some(flag @ ("--mount" | "--mount-ro")) => {
                let v = value(flag)?;
                let text = v
                    .to_str()
                    .ok_or_else(|| format!("{flag}: {v:?} is not UTF-8"))?;
                let (source, target) = text
                    .split_once('=')
                    .filter(|(s, t)| Path::new(s).is_absolute() && Path::new(t).is_absolute())
                    .ok_or_else(|| {
                        format!("{flag}: {text:?} is not SOURCE=TARGET, both absolute")
                    })?;
                mounts.push(Mount {
                    source: source.into(),
                    target: target.into(),
                    read_only: flag == "--mount-ro",
                });
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    if let Some(pid) = join {
        if command.is_empty() {
            return Err("--join needs a command after --".into());
        }
        return Ok(Invocation::Join {
            pid,
            cwd,
            command,
            parent,
        });
    }
    let rootfs = rootfs.ok_or("--rootfs is required")?;
    if command.is_empty() && !probe {
        return Err("a command is required after --".into());
    }
    Ok(Invocation::Create {
        rootfs,
        cwd,
        mounts,
        command,
        probe,
        parent,
        pid_namespace,
    })
}

/// The entry point: `Some(exit code)` when this process was started as
/// [`SUBCOMMAND`] (on success it never returns: the command replaces it),
/// `None` otherwise. Call it first thing in `main`, before any thread.
pub fn entry_point() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(SUBCOMMAND)) {
        return None;
    }
    let rest: Vec<OsString> = args.collect();
    if rest.first().map(OsString::as_os_str) == Some(OsStr::new(UNBLOCK)) {
        return Some(unblock_and_exec(&rest[1..]));
    }
    let invocation = match parse(&rest) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("agentdeck {SUBCOMMAND}: {e}");
            return Some(ExitCode::from(2));
        }
    };
    let error = match run(invocation) {
        Ok(code) => return Some(ExitCode::from(code)),
        Err(e) => e,
    };
    // What a container runtime reports when it cannot start the container.
    eprintln!("agentdeck {SUBCOMMAND}: {error}");
    Some(ExitCode::from(128))
}

/// Carries out `invocation`: the exit code to end with.
fn run(invocation: Invocation) -> Result<u8, String> {
    match invocation {
        Invocation::Create {
            rootfs,
            cwd,
            mounts,
            command,
            probe,
            parent,
            pid_namespace,
        } => {
            enter_new_namespace()?;
            switch_root(&rootfs)?;
            if probe {
                probe_pid_namespace();
                return Ok(0);
            }
            let mut sorted = mounts;
            // Parents before children, as container runtimes order mounts.
            sorted.sort_by_key(|m| depth(&m.target));
            // Directories on a tmpfs of ours: new entries there touch no host file.
            let mut shadowed: Vec<PathBuf> = vec![PathBuf::from("/")];
            for (i, m) in sorted.iter().enumerate() {
                let inside_volume = sorted[..i]
                    .iter()
                    .any(|v| m.target.starts_with(&v.target) && m.target != v.target);
                // Sources are read through the host's root: a mount made
                // earlier (a volume on `/tmp`) may hide their path here.
                let source = on_host(&m.source);
                prepare_target(&source, &m.target, inside_volume, &mut shadowed)?;
                bind(&source, &m.target)?;
            }
            for m in sorted.iter().filter(|m| m.read_only) {
                remount_read_only(&m.target)?;
            }
            umount2(OLD_ROOT, MntFlags::MNT_DETACH)
                .map_err(|e| format!("cannot detach the host's root: {e}"))?;
            let _ = std::fs::remove_dir(OLD_ROOT);
            if pid_namespace {
                // The next child (the command) is the namespace's first
                // process, PID 1; this one stays outside it.
                unshare(CloneFlags::CLONE_NEWPID)
                    .map_err(|e| format!("cannot create a PID namespace: {e}"))?;
            }
            let child = ChildSetup {
                cwd: cwd.unwrap_or_else(|| PathBuf::from("/")),
                init: pid_namespace,
                mount_fd: None,
            };
            supervise(&child, &command, parent)
        }
        Invocation::Join {
            pid,
            cwd,
            command,
            parent,
        } => {
            let mount = join(pid)?;
            let child = ChildSetup {
                cwd: cwd.unwrap_or_else(|| PathBuf::from("/")),
                init: false,
                mount_fd: Some(mount),
            };
            supervise(&child, &command, parent)
        }
    }
}

/// `path` of the host, seen from the new root before the old is detached.
fn on_host(path: &Path) -> PathBuf {
    Path::new(OLD_ROOT).join(path.strip_prefix("/").unwrap_or(path))
}

fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// Step 1 and 2 of the module documentation.
fn enter_new_namespace() -> Result<(), String> {
    let uid = nix::unistd::geteuid();
    let gid = nix::unistd::getegid();
    if uid.is_root() {
        unshare(CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("cannot create a mount namespace: {e}"))?;
    } else {
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("cannot create a user and mount namespace: {e}"))?;
        let write = |file: &str, text: String| {
            std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
        };
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))
}

fn tmpfs(at: &Path) -> Result<(), String> {
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )
    .map_err(|e| format!("cannot mount a tmpfs on {}: {e}", at.display()))
}

fn bind(source: &Path, target: &Path) -> Result<(), String> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| {
        format!(
            "cannot bind-mount {} on {}: {e}",
            source.display(),
            target.display()
        )
    })
}

/// Fills the (new, empty) directory `into` with the entries of `from`:
/// directories and files bind-mounted, symlinks copied.
fn mirror(from: &Path, into: &Path) -> Result<(), String> {
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("cannot list {}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let source = entry.path();
        let target = into.join(entry.file_name());
        let Ok(meta) = std::fs::symlink_metadata(&source) else {
            continue;
        };
        let ft = meta.file_type();
        let made = if ft.is_symlink() {
            std::fs::read_link(&source).and_then(|to| symlink(to, &target))
        } else if ft.is_dir() {
            std::fs::create_dir(&target)
        } else {
            File::create(&target).map(drop)
        };
        made.map_err(|e| format!("cannot create {}: {e}", target.display()))?;
        if !ft.is_symlink() {
            bind(&source, &target)?;
        }
    }
    Ok(())
}

/// Step 3: a tmpfs root mirroring the host's, made the root.
fn switch_root(rootfs: &Path) -> Result<(), String> {
    std::fs::create_dir_all(rootfs)
        .map_err(|e| format!("cannot create {}: {e}", rootfs.display()))?;
    tmpfs(rootfs)?;
    mirror(Path::new("/"), rootfs)?;
    let old = rootfs.join(OLD_ROOT.trim_start_matches('/'));
    std::fs::create_dir(&old).map_err(|e| format!("cannot create {}: {e}", old.display()))?;
    nix::unistd::pivot_root(rootfs, &old)
        .map_err(|e| format!("cannot make {} the root: {e}", rootfs.display()))?;
    nix::unistd::chdir("/").map_err(|e| format!("cannot change to /: {e}"))
}

/// Step 4 for one mount: its path exists, with no host directory written.
fn prepare_target(
    source: &Path,
    target: &Path,
    inside_volume: bool,
    shadowed: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let is_dir = std::fs::metadata(source)
        .map_err(|e| format!("volume source {}: {e}", source.display()))?
        .is_dir();
    if std::fs::metadata(target).is_ok() {
        return Ok(());
    }
    // The nearest existing ancestor, symlinks resolved in the new root.
    let mut existing = target.to_path_buf();
    let mut missing: Vec<OsString> = Vec::new();
    while std::fs::metadata(&existing).is_err() {
        let Some(name) = existing.file_name().map(OsStr::to_os_string) else {
            break;
        };
        missing.push(name);
        if !existing.pop() {
            break;
        }
    }
    missing.reverse();
    let parent = std::fs::canonicalize(&existing)
        .map_err(|e| format!("cannot resolve {}: {e}", existing.display()))?;
    // Ours to write in: the root's tmpfs, a directory shadowed or created
    // earlier (tmpfs too), or a volume.
    let ours = inside_volume || shadowed.contains(&parent);
    if !ours {
        // Host content: put the same entries on a tmpfs so that a new one
        // can be added without touching the host.
        let host = on_host(&parent);
        tmpfs(&parent)?;
        mirror(&host, &parent)?;
        shadowed.push(parent.clone());
    }
    let mut path = parent;
    let last = missing.len().saturating_sub(1);
    for (i, name) in missing.iter().enumerate() {
        path.push(name);
        let made = if i == last && !is_dir {
            File::create(&path).map(drop)
        } else {
            std::fs::create_dir(&path)
        };
        made.map_err(|e| format!("cannot create mount point {}: {e}", path.display()))?;
        shadowed.push(path.clone());
    }
    Ok(())
}

fn remount_read_only(target: &Path) -> Result<(), String> {
    // A remount must keep the flags the kernel locked on the source (in a
    // user namespace it is refused otherwise).
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    if let Ok(st) = statvfs(target) {
        let f = st.flags();
        for (fs, ms) in [
            (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
            (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
            (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        ] {
            if f.contains(fs) {
                flags |= ms;
            }
        }
    }
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>)
        .map_err(|e| format!("cannot make {} read-only: {e}", target.display()))
}

/// Enters the user namespace of `pid` (when it is not ours) and, for the
/// children to come, its PID namespace (when it has its own); returns its
/// mount namespace, which the child enters ([`ChildSetup::mount_fd`]):
/// this process stays in the host's, whose `/proc` shows the host's
/// processes (the container's shows only its own).
fn join(pid: i32) -> Result<File, String> {
    let open = |kind: &str| {
        let path = format!("/proc/{pid}/ns/{kind}");
        File::open(&path).map_err(|e| format!("cannot open {path}: {e}"))
    };
    let same = |kind: &str| {
        let mine = std::fs::read_link(format!("/proc/self/ns/{kind}")).ok();
        mine.is_some() && mine == std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok()
    };
    // All are opened first: once in the user namespace, the others may no
    // longer be ours to open. The container's supervisor is outside the
    // container's PID namespace; its children are in it.
    let user = if same("user") {
        None
    } else {
        Some(open("user")?)
    };
    let pids = if same("pid_for_children") {
        None
    } else {
        Some(open("pid_for_children")?)
    };
    let mnt = open("mnt")?;
    if let Some(user) = user {
        setns(&user, CloneFlags::CLONE_NEWUSER)
            .map_err(|e| format!("cannot enter the user namespace of {pid}: {e}"))?;
    }
    if let Some(pids) = pids {
        setns(&pids, CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("cannot enter the PID namespace of {pid}'s children: {e}"))?;
    }
    Ok(mnt)
}

/// What the supervisor's child does before it becomes the command.
struct ChildSetup {
    /// Its working directory in the container.
    cwd: PathBuf,
    /// It is PID 1 of a new PID namespace: it mounts that namespace's
    /// `/proc` over the host's.
    init: bool,
    /// A mount namespace to enter first (inherited by the child).
    mount_fd: Option<File>,
}

/// Where the first process of a new PID namespace mounts it (`ps` and
/// `/proc` show the container's processes), with the flags a runtime
/// mounts a container's `/proc` with.
fn mount_proc() -> Result<(), String> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| format!("cannot mount /proc for the PID namespace: {e}"))
}

/// The probe's second half: whether a PID namespace, whose first process
/// mounts its own `/proc`, can be had here. Says so on standard output
/// ([`PID_NAMESPACE_OK`], or why not): without one, containers still get
/// their mount namespace.
fn probe_pid_namespace() {
    let outcome = unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| format!("cannot create a PID namespace: {e}"))
        .and_then(|()| {
            std::process::Command::new("/proc/self/exe")
                .args([SUBCOMMAND, UNBLOCK, "--proc", "--"])
                .output()
                .map_err(|e| format!("cannot start a process in a PID namespace: {e}"))
        })
        .and_then(|o| {
            if o.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
            }
        });
    match outcome {
        Ok(()) => println!("{PID_NAMESPACE_OK}"),
        Err(why) => println!("{PID_NAMESPACE_NO}{why}"),
    }
}

/// What the probe prints when containers can have PID namespaces.
pub const PID_NAMESPACE_OK: &str = "pid namespace: yes";
/// ... and before why not, when they cannot.
pub const PID_NAMESPACE_NO: &str = "pid namespace: no: ";

/// Whether a probe's standard output says containers can have PID
/// namespaces: `Ok`, or why not.
pub fn probed_pid_namespace(stdout: &str) -> Result<(), String> {
    for line in stdout.lines() {
        if line == PID_NAMESPACE_OK {
            return Ok(());
        }
        if let Some(why) = line.strip_prefix(PID_NAMESPACE_NO) {
            return Err(why.to_string());
        }
    }
    Err("the probe did not say".to_string())
}

/// Signals the supervisor takes itself (blocked, and read with `sigwait`)
/// rather than die of: the kubelet signals the container's whole group, so
/// its command gets them anyway.
const SUPERVISOR_SIGNALS: [Signal; 8] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
];

/// Runs `command` as a child and stays as the container's supervisor, tied
/// to the sandbox's life on every exit path (SIGKILL included), as a
/// kubelet's containers die with their node:
///
/// - its parent-death signal (`PR_SET_PDEATHSIG`) is SIGHUP, and each time
///   it comes (or any other signal) it checks that its parent is still
///   `parent`: the signal also comes when the *thread* that started it
///   exits, the process going on;
/// - it is a subreaper (`PR_SET_CHILD_SUBREAPER`), so what its command
///   starts and leaves behind stays below it; once the sandbox is gone it
///   SIGKILLs every process below it and exits;
/// - when the command exits, it ends what is left below it (as a runtime
///   tears the container down) and exits as the command did.
fn supervise(child: &ChildSetup, command: &[OsString], parent: Option<i32>) -> Result<u8, String> {
    if command.is_empty() {
        return Err("no command".into());
    }
    let mut signals = SigSet::empty();
    for s in SUPERVISOR_SIGNALS {
        signals.add(s);
    }
    signals
        .thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot become a subreaper: {e}"))?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGHUP)
        .map_err(|e| format!("cannot set the parent-death signal: {e}"))?;
    let parent = parent.unwrap_or_else(|| getppid().as_raw());
    let orphaned = || getppid().as_raw() != parent;
    // Gone before the parent-death signal was set: nothing would tell us.
    if orphaned() {
        return Err("the sandbox that started the container is gone".into());
    }
    // The command must not inherit the blocked signals: it starts through
    // this entry point again, which unblocks them and becomes the command.
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg(SUBCOMMAND)
        .arg(UNBLOCK)
        .arg("--cwd")
        .arg(&child.cwd);
    if child.init {
        cmd.arg("--proc");
    }
    if let Some(mnt) = &child.mount_fd {
        // Inherited (this one flag cleared), entered and closed by the child.
        fcntl(mnt, FcntlArg::F_SETFD(FdFlag::empty()))
            .map_err(|e| format!("cannot pass the mount namespace on: {e}"))?;
        cmd.arg("--mount-fd").arg(mnt.as_raw_fd().to_string());
    }
    let spawned = cmd
        .arg("--")
        .args(command)
        .spawn()
        .map_err(|e| format!("cannot start the command: {e}"))?;
    let main = Pid::from_raw(
        i32::try_from(spawned.id()).map_err(|_| "the command has no process id".to_string())?,
    );
    drop(spawned);
    // With a PID namespace of its own, the container is every process in
    // it, which the kernel ends with its first one, `main`; this process
    // no longer reads `/proc` (the container's is mounted over the host's).
    let end_container = || {
        if child.init {
            let _ = nix::sys::signal::kill(main, Signal::SIGKILL);
        } else {
            kill_below(getpid());
        }
    };
    let status = loop {
        let signal = signals
            .wait()
            .map_err(|e| format!("cannot wait for signals: {e}"))?;
        if orphaned() {
            end_container();
            reap_all();
            return Ok(128 + Signal::SIGKILL as u8);
        }
        if signal != Signal::SIGCHLD {
            // The command leads a session of its own (a terminal's, see
            // `unblock_and_exec`): the kubelet's signals to the container's
            // process group reach it through here.
            if nix::unistd::getpgid(Some(main)).is_ok_and(|g| g != nix::unistd::getpgrp()) {
                let _ = nix::sys::signal::kill(main, signal);
            }
            continue;
        }
        if let Some(status) = reap(main) {
            break status;
        }
    };
    end_container();
    reap_all();
    Ok(match status {
        WaitStatus::Exited(_, code) => u8::try_from(code).unwrap_or(255),
        WaitStatus::Signaled(_, signal, _) => {
            // Ends the same way where the signal's default is to end.
            if matches!(
                signal,
                Signal::SIGTERM
                    | Signal::SIGINT
                    | Signal::SIGHUP
                    | Signal::SIGKILL
                    | Signal::SIGUSR1
                    | Signal::SIGUSR2
                    | Signal::SIGALRM
            ) {
                let mut one = SigSet::empty();
                one.add(signal);
                let _ = one.thread_unblock();
                let _ = nix::sys::signal::raise(signal);
            }
            128u8.saturating_add(signal as u8)
        }
        _ => 255,
    })
}

/// The supervisor's child: unblocks every signal, enters the container's
/// mount namespace (`--mount-fd N`, when joining) or mounts its PID
/// namespace's `/proc` (`--proc`, as its first process), changes to
/// `--cwd`, then becomes the command; with `--proc` and no command, a
/// probe: exits 0 when it is PID 1 with its `/proc` mounted.
const UNBLOCK: &str = "--unblock";

fn unblock_and_exec(rest: &[OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let _ = SigSet::all().thread_unblock();
    let fail = |e: String| {
        eprintln!("agentdeck {SUBCOMMAND}: {e}");
        ExitCode::from(128)
    };
    let mut it = rest.iter();
    let mut cwd = PathBuf::from("/");
    let mut proc = false;
    let mut mount_fd = None;
    let mut command: Vec<OsString> = Vec::new();
    while let Some(arg) = it.next() {
        match arg.to_str() {
            Some("--") => {
                command = it.cloned().collect();
                break;
            }
            Some("--cwd") => cwd = it.next().map(PathBuf::from).unwrap_or(cwd),
            Some("--proc") => proc = true,
            Some("--mount-fd") => {
                mount_fd = it.next().and_then(|v| v.to_str()?.parse::<i32>().ok());
            }
            _ => return fail(format!("unexpected argument {arg:?}")),
        }
    }
    if let Some(fd) = mount_fd {
        // Reopened through its number (a new descriptor, closed on exec),
        // the inherited one closed: the command gets none of ours.
        let entered = File::open(format!("/proc/self/fd/{fd}"))
            .map_err(|e| format!("cannot open the container's mount namespace: {e}"))
            .and_then(|ns| {
                let _ = nix::unistd::close(fd);
                setns(&ns, CloneFlags::CLONE_NEWNS)
                    .map_err(|e| format!("cannot enter the container's mount namespace: {e}"))
            });
        if let Err(e) = entered {
            return fail(e);
        }
    }
    if proc {
        if let Err(e) = mount_proc() {
            return fail(e);
        }
        if command.is_empty() {
            return if getpid().as_raw() == 1 {
                ExitCode::SUCCESS
            } else {
                fail(format!("the first process is {}, not 1", getpid()))
            };
        }
    }
    if let Err(e) = nix::unistd::chdir(&cwd) {
        return fail(format!("cannot change to {}: {e}", cwd.display()));
    }
    let Some((program, args)) = command.split_first() else {
        return fail("no command".to_string());
    };
    // Given a terminal, the command leads a session of its own in the
    // container whose controlling terminal it is, as runc makes a `tty`
    // container's process or an `exec -t`'s: a shell's job control then
    // finds its process groups in the container's PID namespace.
    let setsid = ["/usr/bin/setsid", "/bin/setsid"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let e = match setsid {
        Some(setsid) if nix::unistd::isatty(std::io::stdin()).unwrap_or(false) => {
            std::process::Command::new(setsid)
                .args(["--ctty", "--"])
                .arg(program)
                .args(args)
                .exec()
        }
        _ => std::process::Command::new(program).args(args).exec(),
    };
    fail(format!("exec {}: {e}", Path::new(program).display()))
}

/// Reaps every child that has exited (adopted orphans included); the
/// status of `main` if it was one of them.
fn reap(main: Pid) -> Option<WaitStatus> {
    let mut found = None;
    loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return found,
            Ok(status) => {
                if status.pid() == Some(main) {
                    found = Some(status);
                }
            }
        }
    }
}

/// Waits for every child left (after [`kill_below`] they are dying).
fn reap_all() {
    while waitpid(None::<Pid>, None).is_ok() {}
}

/// SIGKILLs every process below `top` (children, theirs, and so on; as a
/// subreaper, orphans of the container are children too), again until none
/// is left that was not yet signalled.
fn kill_below(top: Pid) {
    let mut killed = std::collections::HashSet::new();
    for _ in 0..10 {
        let procs = super::runtime::processes();
        let mut below = Vec::new();
        let mut queue = vec![top.as_raw()];
        while let Some(p) = queue.pop() {
            for child in procs.iter().filter(|c| c.ppid == p) {
                below.push(child.pid);
                queue.push(child.pid);
            }
        }
        let fresh: Vec<i32> = below.into_iter().filter(|p| killed.insert(*p)).collect();
        if fresh.is_empty() {
            return;
        }
        for pid in fresh {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn create_arguments_read_back_as_they_were_built() {
        let mounts = vec![
            Mount {
                source: "/pod/volumes/config".into(),
                target: "/etc/agentdeck".into(),
                read_only: true,
            },
            Mount {
                source: "/pod/volumes/shared".into(),
                target: "/shared".into(),
                read_only: false,
            },
        ];
        let command = os(&["/bin/agentdeck", "--daemon", "--", "x"]);
        let args = create_args(
            Path::new("/pod/rootfs"),
            Some(Path::new("/work")),
            &mounts,
            true,
            &command,
        );
        assert_eq!(args[0], SUBCOMMAND);
        assert_eq!(
            parse(&args[1..]),
            Ok(Invocation::Create {
                rootfs: "/pod/rootfs".into(),
                cwd: Some("/work".into()),
                mounts,
                command,
                probe: false,
                parent: Some(std::process::id() as i32),
                pid_namespace: true,
            })
        );
    }

    #[test]
    fn join_and_probe_arguments_read_back() {
        let args = join_args(42, None, &os(&["/bin/sh", "-c", "ls"]));
        assert_eq!(
            parse(&args[1..]),
            Ok(Invocation::Join {
                pid: 42,
                cwd: None,
                command: os(&["/bin/sh", "-c", "ls"]),
                parent: Some(std::process::id() as i32),
            })
        );
        let args = probe_args(Path::new("/pod/rootfs"));
        assert!(matches!(
            parse(&args[1..]),
            Ok(Invocation::Create { probe: true, .. })
        ));
    }

    #[test]
    fn malformed_arguments_say_what_is_wrong() {
        assert_eq!(
            parse(&os(&[
                "--rootfs",
                "/r",
                "--mount",
                "relative=/x",
                "--",
                "a"
            ])),
            Err("--mount: \"relative=/x\" is not SOURCE=TARGET, both absolute".into())
        );
        assert_eq!(
            parse(&os(&["--rootfs", "/r"])),
            Err("a command is required after --".into())
        );
        assert_eq!(
            parse(&os(&["--join", "x", "--", "a"])),
            Err("--join: \"x\" is not a process id".into())
        );
        assert_eq!(parse(&os(&["--", "a"])), Err("--rootfs is required".into()));
        assert_eq!(
            parse(&os(&["--what"])),
            Err("unexpected argument \"--what\"".into())
        );
    }
}
