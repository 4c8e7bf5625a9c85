use std::io::Write;
use std::process::ExitCode;

use agentdeck::cli::{BundleCommand, Cli, Command};
use agentdeck::commands::{self, act};
use agentdeck::error::{Error, Result};
use agentdeck::ops;
use clap::{CommandFactory, Parser};

/// jemalloc, not the system's malloc: at 100,000 tasks glibc's malloc held
/// the controller at about 320 MiB for a heap of about 230 MB, and the
/// console at 530–570 MiB (a header on each of millions of small
/// allocations, and freed memory kept between them); jemalloc holds the
/// same heaps in about 30 and 40–50 MiB less (benches/README.md, the
/// scale bench).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation. Freed pages go back
/// to the system after a second unused rather than ten: a console's first
/// list frees most of what it decoded (each page's text, the objects'
/// discarded parts), and with ten seconds its RSS stayed that much higher
/// well after the list: at 10,000 tasks 1.6–2.8 MiB above glibc's malloc,
/// within a MiB of it with one second.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 20] = b"dirty_decay_ms:1000\0";

/// Starts jemalloc's background thread, which gives freed pages back to
/// the system on time (`dirty_decay_ms`) even while the process is quiet.
/// Without it pages go back only when the thread that freed them
/// allocates again, so a quiet daemon keeps what its busy minutes freed:
/// at 100,000 tasks the daemon held 287 MiB without it, 274 with it, and
/// stayed flat (benches/README.md). Called by `main` after the sandbox
/// kubelet's container set-up, not set in [`MALLOC_CONF`]: there the
/// thread starts before `main`, and a process with a second thread cannot
/// unshare a mount namespace.
fn purge_in_the_background() {
    let mut on = true;
    // SAFETY: `background_thread` is a `bool` option; jemalloc reads
    // `size_of::<bool>()` bytes from the pointer during the call and keeps
    // nothing of it. No old value is asked for (both null).
    // Not fatal when refused: pages then go back as the process allocates.
    let _refused = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"background_thread".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut on).cast(),
            std::mem::size_of::<bool>(),
        )
    };
}

fn main() -> ExitCode {
    // The sandbox kubelet's container set-up (a mount namespace, then the
    // container's command): first, while this process has one thread.
    if let Some(code) = agentdeck::sandbox::kubelet::mountns::entry_point() {
        return code;
    }
    purge_in_the_background();
    // kube's client needs one process-wide rustls provider: ring, the one
    // crypto backend built in (no aws-lc and its C build).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match Cli::parse().settle() {
        Ok(cli) => cli,
        Err(why) => {
            eprintln!("agentdeck: {why}");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentdeck: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}

/// The command asked for, run (see [`agentdeck::commands`]).
fn run(cli: Cli) -> Result<()> {
    let global = &cli.global;
    match cli.command {
        Some(Command::Crds) => commands::install::crds(),
        Some(Command::Manifests(args)) => commands::install::manifests(global, args),
        Some(Command::Monitoring(args)) => commands::install::monitoring(global, args),
        Some(Command::Completions { shell }) => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "agentdeck", &mut out);
            std::io::stdout().write_all(&out).map_err(Error::Output)
        }
        Some(Command::Sandbox(args)) => commands::sandbox(global, args),
        Some(Command::Agent(args)) => commands::agent(global, args),
        Some(Command::Bundle(args)) => match args.command {
            Some(BundleCommand::Redact(redact)) => commands::bundle::redact(global, redact),
            None => commands::bundle::bundle(global, args),
        },
        Some(Command::Debug(args)) => commands::debug::debug(global, args),
        Some(Command::Scale(args)) => act(global, &ops::cli::scale_action(&args), args.confirm),
        Some(Command::Drain(args)) => commands::drain(global, &args),
        Some(Command::DebugLogs(args)) => {
            act(global, &ops::cli::debug_logs_action(&args)?, args.confirm)
        }
        Some(Command::Task(args)) => commands::task(global, &args),
        Some(Command::Status(args)) => commands::status(global, &args),
        Some(Command::Audit(args)) => commands::audit(global, &args),
        Some(Command::Access(args)) => commands::access(global, &args),
        None if cli.daemon => commands::daemon::daemon(&cli),
        None => commands::console::console(&cli),
    }
}
