//! Logging: one `tracing` subscriber for every mode, writing to stderr and,
//! when asked, to daily-rolling files, with a log level that can be changed
//! while the process runs (the agent toggles debug logs live).

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tracing_appender::non_blocking::{NonBlocking, WorkerGuard};
use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};
use tracing_subscriber::{Layer, Registry, reload};

/// Base name of the log files written to the log directory; each day's file
/// gets the date appended (`agentdeck.log.2026-11-02`).
pub const LOG_FILE_NAME: &str = "agentdeck.log";

/// Daily files kept in the log directory before the oldest is deleted.
const KEPT_LOG_FILES: usize = 14;

/// How log lines look.
#[derive(
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    clap::ValueEnum,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One compact line per event; colours only on a terminal and without `NO_COLOR`.
    #[default]
    Plain,
    /// One JSON object per line, for log collectors.
    Json,
    /// Multi-line events with targets and source locations, for development.
    Dev,
}

impl LogFormat {
    /// The name as written in config files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Plain => "plain",
            LogFormat::Json => "json",
            LogFormat::Dev => "dev",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can go wrong while setting up or adjusting logging.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A log level or filter directive that does not parse.
    #[error(
        "invalid log level {value:?} in {origin}: expected one of off, error, warn, info, debug, \
         trace, or filter directives such as `info,agentdeck=debug`{detail}"
    )]
    InvalidLevel {
        /// Where the text came from (`RUST_LOG`, the log level).
        origin: &'static str,
        /// The text as given.
        value: String,
        /// The parser's explanation, prefixed with `: ` when there is one.
        detail: String,
    },
    /// The log directory cannot be created or opened.
    #[error("cannot write log files to {}: {source}", dir.display())]
    LogDir {
        /// The directory asked for.
        dir: PathBuf,
        #[source]
        source: tracing_appender::rolling::InitError,
    },
    /// A global subscriber is already installed in this process.
    #[error("logging is already set up in this process")]
    AlreadyInitialized(#[source] TryInitError),
    /// The subscriber holding the filter is gone.
    #[error("cannot change the log level: {0}")]
    Reload(#[source] reload::Error),
}

impl TelemetryError {
    /// Whether the user can fix this by changing a flag, file or variable
    /// (exit code 2), rather than it being a failure of the process.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            TelemetryError::InvalidLevel { .. } | TelemetryError::LogDir { .. }
        )
    }
}

/// Parses a log level as written in config files and flags: a bare level
/// (`info`, `debug`, …) or `tracing` filter directives (`info,kube=warn`).
/// A bare word that is not a level is rejected rather than read as a target
/// name, so `level: verbose` is an error instead of silently logging nothing.
pub fn parse_level(level: &str) -> Result<EnvFilter, TelemetryError> {
    parse_filter(level, "the log level", true)
}

fn parse_filter(
    text: &str,
    origin: &'static str,
    strict: bool,
) -> Result<EnvFilter, TelemetryError> {
    let invalid = |detail: String| TelemetryError::InvalidLevel {
        origin,
        value: text.to_owned(),
        detail,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid(String::new()));
    }
    let is_bare_word = !trimmed.contains(['=', ',', '[']);
    let filter = if strict && is_bare_word {
        let level: LevelFilter = trimmed.parse().map_err(|err| invalid(format!(": {err}")))?;
        EnvFilter::default().add_directive(level.into())
    } else {
        EnvFilter::builder()
            .parse(trimmed)
            .map_err(|err| invalid(format!(": {err}")))?
    };
    Ok(quiet_kube_request_errors(filter, trimmed))
}

/// kube's client logs every failed request at ERROR ("failed with error
/// client error (Connect)"), several a second while the API is away; the
/// controller says that once, with the server and the cause. Shown again
/// when the filter names `kube_client` itself.
fn quiet_kube_request_errors(filter: EnvFilter, text: &str) -> EnvFilter {
    if text.contains("kube_client") {
        return filter;
    }
    match "kube_client::client::builder=off".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// The filter to start with: `RUST_LOG` when set and not empty (standard
/// `tracing` directive syntax), else the configured level. Returns the
/// filter and the text it was built from.
fn initial_filter(
    level: &str,
    rust_log: Option<&str>,
) -> Result<(EnvFilter, String), TelemetryError> {
    match rust_log.filter(|text| !text.trim().is_empty()) {
        Some(text) => Ok((parse_filter(text, "RUST_LOG", false)?, text.to_owned())),
        None => Ok((parse_level(level)?, level.trim().to_owned())),
    }
}

/// Whether stderr output gets colours: never with a non-empty `NO_COLOR`
/// (<https://no-color.org>), never for JSON, otherwise when stderr is a
/// terminal (`dev` also colours when redirected, as `cargo` users expect of a
/// development format).
fn use_ansi(format: LogFormat, stderr_is_terminal: bool, no_color: Option<&str>) -> bool {
    if no_color.is_some_and(|value| !value.is_empty()) {
        return false;
    }
    match format {
        LogFormat::Plain => stderr_is_terminal,
        LogFormat::Json => false,
        LogFormat::Dev => true,
    }
}

/// Everything [`init_with`] needs.
#[derive(Clone, Copy, Debug)]
pub struct TelemetryOptions<'a> {
    /// How lines look.
    pub format: LogFormat,
    /// Level or directives, used when `RUST_LOG` is unset.
    pub level: &'a str,
    /// Also write daily-rolling [`LOG_FILE_NAME`] files here.
    pub dir: Option<&'a Path>,
    /// Write to stderr; off for the terminal console, whose screen would be
    /// overwritten by log lines.
    pub stderr: bool,
}

/// Keeps logging alive: dropping it flushes and closes the log file writer.
/// Holds the handle that changes the level at runtime.
pub struct TelemetryGuard {
    filter: reload::Handle<EnvFilter, Registry>,
    level: Mutex<String>,
    dir: Option<PathBuf>,
    _file_writer: Option<WorkerGuard>,
}

impl fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("level", &self.level())
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl TelemetryGuard {
    /// Replaces the filter of the running subscriber (level or directives,
    /// same syntax as [`parse_level`]). On error the old level stays.
    pub fn set_level(&self, level: &str) -> Result<(), TelemetryError> {
        let filter = parse_level(level)?;
        self.filter.reload(filter).map_err(TelemetryError::Reload)?;
        *self.level.lock().unwrap_or_else(PoisonError::into_inner) = level.trim().to_owned();
        Ok(())
    }

    /// The filter text in force (the level, or `RUST_LOG` when that was used).
    pub fn level(&self) -> String {
        self.level
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The directory log files are written to, if any.
    pub fn log_dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

/// Installs the process-wide subscriber writing to stderr (and to `dir` when
/// given). The filter is `RUST_LOG` when set, else `level`. A second call
/// returns [`TelemetryError::AlreadyInitialized`].
pub fn init(
    format: LogFormat,
    level: &str,
    dir: Option<&Path>,
) -> Result<TelemetryGuard, TelemetryError> {
    init_with(TelemetryOptions {
        format,
        level,
        dir,
        stderr: true,
    })
}

/// [`init`] with every option, e.g. file-only logging for the console.
pub fn init_with(options: TelemetryOptions<'_>) -> Result<TelemetryGuard, TelemetryError> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, text) = initial_filter(options.level, rust_log.as_deref())?;
    let no_color = std::env::var("NO_COLOR").ok();
    let ansi = use_ansi(
        options.format,
        std::io::stderr().is_terminal(),
        no_color.as_deref(),
    );
    let console = options
        .stderr
        .then_some((std::io::stderr as fn() -> _, ansi));
    let (subscriber, guard) = build(options.format, filter, text, console, options.dir)?;
    subscriber
        .try_init()
        .map_err(TelemetryError::AlreadyInitialized)?;
    Ok(guard)
}

type Filtered = Layered<reload::Layer<EnvFilter, Registry>, Registry>;
type BoxedLayer = Box<dyn Layer<Filtered> + Send + Sync + 'static>;

/// Assembles the subscriber without installing it, so tests can scope it.
fn build<W>(
    format: LogFormat,
    filter: EnvFilter,
    filter_text: String,
    console: Option<(W, bool)>,
    dir: Option<&Path>,
) -> Result<
    (
        impl tracing::Subscriber + Send + Sync + 'static,
        TelemetryGuard,
    ),
    TelemetryError,
>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let mut layers: Vec<BoxedLayer> = Vec::new();
    if let Some((writer, ansi)) = console {
        layers.push(console_layer(format, ansi, writer));
    }
    let mut file_writer = None;
    if let Some(dir) = dir {
        let appender = RollingFileAppender::builder()
            .rotation(Rotation::DAILY)
            .filename_prefix(LOG_FILE_NAME)
            .max_log_files(KEPT_LOG_FILES)
            .build(dir)
            .map_err(|source| TelemetryError::LogDir {
                dir: dir.to_owned(),
                source,
            })?;
        let (writer, guard) = tracing_appender::non_blocking(appender);
        layers.push(file_layer(format, writer));
        file_writer = Some(guard);
    }
    let (filter, handle) = reload::Layer::new(filter);
    let subscriber = Registry::default().with(filter).with(layers);
    let guard = TelemetryGuard {
        filter: handle,
        level: Mutex::new(filter_text),
        dir: dir.map(Path::to_owned),
        _file_writer: file_writer,
    };
    Ok((subscriber, guard))
}

fn console_layer<W>(format: LogFormat, ansi: bool, writer: W) -> BoxedLayer
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Plain => layer.compact().with_ansi(ansi).boxed(),
        LogFormat::Json => layer.json().with_ansi(false).boxed(),
        LogFormat::Dev => layer.pretty().with_target(true).with_ansi(ansi).boxed(),
    }
}

/// Files never get colour codes; `dev` writes the full single-line format
/// there, since multi-line events are hard to grep.
fn file_layer(format: LogFormat, writer: NonBlocking) -> BoxedLayer {
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false);
    match format {
        LogFormat::Json => layer.json().boxed(),
        LogFormat::Plain | LogFormat::Dev => layer.boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    /// A writer collecting everything logged, for assertions.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("capture lock")).into_owned()
        }
    }

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("capture lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn captured_subscriber(
        format: LogFormat,
        level: &str,
    ) -> (
        impl tracing::Subscriber + Send + Sync,
        TelemetryGuard,
        Captured,
    ) {
        let captured = Captured::default();
        let filter = parse_level(level).expect("test level parses");
        let (subscriber, guard) = build(
            format,
            filter,
            level.to_owned(),
            Some((captured.clone(), false)),
            None,
        )
        .expect("subscriber without files builds");
        (subscriber, guard, captured)
    }

    #[test]
    fn bare_levels_and_directives_parse() {
        for level in [
            "info",
            "DEBUG",
            " warn ",
            "off",
            "trace",
            "info,kube=warn",
            "agentdeck=debug",
        ] {
            assert!(parse_level(level).is_ok(), "{level:?} should parse");
        }
    }

    #[test]
    fn unknown_levels_are_rejected_with_the_value_in_the_message() {
        for level in ["verbose", "", "  ", "agentdeck=loud"] {
            let err = parse_level(level).expect_err(level);
            assert!(err.is_user_error());
            assert!(
                err.to_string().contains(&format!("{level:?}")),
                "{err} should quote {level:?}"
            );
        }
    }

    #[test]
    fn rust_log_takes_precedence_over_the_configured_level() {
        let (_, text) = initial_filter("info", Some("agentdeck=trace")).expect("parses");
        assert_eq!(text, "agentdeck=trace");
        let (_, text) = initial_filter("info", Some("  ")).expect("parses");
        assert_eq!(text, "info");
        let (_, text) = initial_filter("debug", None).expect("parses");
        assert_eq!(text, "debug");
    }

    #[test]
    fn an_invalid_rust_log_is_reported_as_rust_log() {
        let err = initial_filter("info", Some("agentdeck=loud")).expect_err("bad RUST_LOG");
        assert!(err.to_string().contains("RUST_LOG"), "{err}");
    }

    #[test]
    fn colours_follow_no_color_terminal_and_format() {
        let cases = [
            (LogFormat::Plain, true, None, true),
            (LogFormat::Plain, false, None, false),
            (LogFormat::Plain, true, Some("1"), false),
            (LogFormat::Plain, true, Some(""), true),
            (LogFormat::Json, true, None, false),
            (LogFormat::Dev, false, None, true),
            (LogFormat::Dev, true, Some("yes"), false),
        ];
        for (format, terminal, no_color, expected) in cases {
            assert_eq!(
                use_ansi(format, terminal, no_color),
                expected,
                "{format} terminal={terminal} NO_COLOR={no_color:?}"
            );
        }
    }

    #[test]
    fn log_formats_parse_from_their_lowercase_names() {
        for format in [LogFormat::Plain, LogFormat::Json, LogFormat::Dev] {
            let json = serde_json::to_value(format).expect("serializes");
            assert_eq!(json, serde_json::json!(format.as_str()));
            let back: LogFormat = serde_json::from_value(json).expect("deserializes");
            assert_eq!(back, format);
            let parsed = <LogFormat as clap::ValueEnum>::from_str(format.as_str(), false)
                .expect("clap parses the same name");
            assert_eq!(parsed, format);
        }
    }

    #[test]
    fn set_level_turns_debug_logs_on_for_the_running_subscriber() {
        let (subscriber, guard, captured) = captured_subscriber(LogFormat::Plain, "info");
        tracing::subscriber::with_default(subscriber, || {
            for phase in ["before-switch", "after-switch"] {
                tracing::debug!(phase, "debug event");
                if phase == "before-switch" {
                    guard.set_level("debug").expect("debug is a level");
                }
            }
        });
        let text = captured.text();
        assert!(!text.contains("before-switch"), "{text}");
        assert!(text.contains("after-switch"), "{text}");
        assert_eq!(guard.level(), "debug");
    }

    #[test]
    fn set_level_can_turn_logging_down_again() {
        let (subscriber, guard, captured) = captured_subscriber(LogFormat::Json, "debug");
        tracing::subscriber::with_default(subscriber, || {
            for phase in ["while-debug", "after-info"] {
                tracing::debug!(phase, "debug event");
                if phase == "while-debug" {
                    guard.set_level("info").expect("info is a level");
                }
            }
        });
        let text = captured.text();
        assert!(text.contains("while-debug"), "{text}");
        assert!(!text.contains("after-info"), "{text}");
    }

    #[test]
    fn set_level_rejects_a_bad_level_and_keeps_the_old_one() {
        let (subscriber, guard, captured) = captured_subscriber(LogFormat::Plain, "info");
        let err = guard.set_level("chatty").expect_err("not a level");
        assert!(matches!(err, TelemetryError::InvalidLevel { .. }), "{err}");
        assert_eq!(guard.level(), "info");
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("still-logged");
            tracing::debug!("still-hidden");
        });
        let text = captured.text();
        assert!(text.contains("still-logged"), "{text}");
        assert!(!text.contains("still-hidden"), "{text}");
    }

    #[test]
    fn json_format_writes_one_object_per_line() {
        let (subscriber, _guard, captured) = captured_subscriber(LogFormat::Json, "info");
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(pool = "default", "pool scaled");
        });
        let text = captured.text();
        let line: serde_json::Value =
            serde_json::from_str(text.trim()).expect("one JSON object per line");
        assert_eq!(line["fields"]["message"], "pool scaled");
        assert_eq!(line["fields"]["pool"], "default");
    }

    #[test]
    fn log_files_are_written_to_the_directory_and_flushed_on_drop() {
        let dir = tempfile::tempdir().expect("temp dir");
        let filter = parse_level("info").expect("level");
        let (subscriber, guard) = build(
            LogFormat::Plain,
            filter,
            "info".to_owned(),
            None::<(Captured, bool)>,
            Some(dir.path()),
        )
        .expect("log dir is writable");
        assert_eq!(guard.log_dir(), Some(dir.path()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("written-to-file");
        });
        drop(guard);
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read dir")
            .map(|entry| entry.expect("entry").path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let name = files[0]
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with(LOG_FILE_NAME), "{name}");
        let text = std::fs::read_to_string(&files[0]).expect("log file");
        assert!(text.contains("written-to-file"), "{text}");
        assert!(!text.contains('\u{1b}'), "no colour codes in files: {text}");
    }

    #[test]
    fn an_unusable_log_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "x").expect("write file");
        let filter = parse_level("info").expect("level");
        let result = build(
            LogFormat::Plain,
            filter,
            "info".to_owned(),
            None::<(Captured, bool)>,
            Some(&file.join("logs")),
        );
        let Err(err) = result else {
            panic!("a directory below a file cannot be created");
        };
        assert!(matches!(err, TelemetryError::LogDir { .. }), "{err}");
        assert!(err.to_string().contains("not-a-dir"), "{err}");
    }

    #[test]
    fn initialising_twice_returns_an_error_instead_of_panicking() {
        let options = TelemetryOptions {
            format: LogFormat::Plain,
            level: "off",
            dir: None,
            stderr: false,
        };
        // The first call may already fail if another test installed a global
        // subscriber; the second one must fail either way.
        let _first = init_with(options);
        let second = init_with(options);
        assert!(
            matches!(second, Err(TelemetryError::AlreadyInitialized(_))),
            "{second:?}"
        );
    }
}
