//! `agentdeck bundle` and `bundle redact`.

use super::{check_config, print, runtime};
use crate::config::{Config, ConfigSources};
use crate::error::{Error, Result};
use crate::ops;

/// `agentdeck bundle`: collects, shows a progress bar on a terminal, prints
/// where the zip is and what could not be collected.
pub fn bundle(global: &crate::cli::GlobalArgs, args: crate::cli::BundleArgs) -> Result<()> {
    use crate::ops::bundle::{self, Phase};
    let (config, _) = Config::load(&ConfigSources::from_process(global.config.clone()))?;
    let rt = runtime()?;
    let summary = rt.block_on(async {
        let conn =
            crate::cluster::connect(global.context.as_deref(), global.namespace.as_deref()).await?;
        // Nothing is started for a namespace or pool that is not there, or
        // an API that cannot be used.
        crate::cluster::require_namespace(&conn).await?;
        if let Some(pool) = &args.pool {
            ops::exec::require_pool(&conn, pool).await?;
        }
        let output = args.output.clone().unwrap_or_else(|| {
            bundle::file_name(
                &conn.namespace,
                args.pool.as_deref(),
                jiff::Timestamp::now(),
            )
            .into()
        });
        let opts = options(&args, global, conn.namespace.clone(), output, config);
        let bar = progress_bar("files");
        let b = bar.clone();
        let summary = bundle::collect(conn.client, opts, move |p| {
            b.set_length(p.files_expected.max(p.files_done));
            b.set_position(p.files_done);
            b.set_prefix(format!("{:.1} MB", p.bytes_written as f64 / 1e6));
            b.set_message(match p.phase {
                Phase::Listing => "listing",
                Phase::Collecting => "collecting",
                Phase::Finishing => "finishing",
                Phase::Done => "done",
            });
        })
        .await;
        bar.finish_and_clear();
        Ok::<_, Error>(summary?)
    })?;
    let out = report(&summary, args.no_redact);
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    print(&out)?;
    if summary.listed == 0 {
        // A zip of nothing from the cluster is not a bundle: say so, and
        // keep it for what it says about why.
        return Err(bundle::BundleError::NothingListed {
            path: summary.path.clone(),
            first: summary
                .errors
                .first()
                .map(|e| e.message.clone())
                .unwrap_or_default(),
            count: summary.errors.len(),
        }
        .into());
    }
    Ok(())
}

/// `agentdeck bundle redact`: one more redaction pass over a bundle, with a
/// progress bar on a terminal; prints what it hid per rule.
pub fn redact(global: &crate::cli::GlobalArgs, args: crate::cli::BundleRedactArgs) -> Result<()> {
    use crate::ops::bundle::reredact::{self, RedactOptions};
    check_config(global)?;
    let mut literals = Vec::new();
    for file in &args.literal_files {
        literals.extend(
            reredact::read_literal_file(file).map_err(crate::ops::bundle::BundleError::from)?,
        );
    }
    let opts = RedactOptions {
        input: args.input,
        output: args.output,
        literals,
        patterns: args.regexes,
    };
    let bar = progress_bar("entries");
    let b = bar.clone();
    let summary = reredact::run(&opts, move |p| {
        b.set_length(p.files_expected.max(p.files_done));
        b.set_position(p.files_done);
        b.set_prefix(format!("{:.1} MB read", p.bytes_written as f64 / 1e6));
        b.set_message(match p.phase {
            crate::ops::bundle::Phase::Finishing => "finishing",
            crate::ops::bundle::Phase::Done => "done",
            _ => "redacting",
        });
    });
    bar.finish_and_clear();
    print(&summary?.report(&opts.input))
}

/// What `agentdeck bundle`'s flags ask for, written to `output`.
fn options(
    args: &crate::cli::BundleArgs,
    global: &crate::cli::GlobalArgs,
    namespace: String,
    output: std::path::PathBuf,
    config: Config,
) -> ops::bundle::BundleOptions {
    let mut opts = ops::bundle::BundleOptions::new(namespace, output);
    opts.pool = args.pool.clone();
    opts.since = args.since;
    opts.max_bytes_per_log = args.max_bytes_per_log;
    opts.redact = !args.no_redact;
    opts.deadline = args.deadline;
    opts.request_timeout = args.request_timeout;
    opts.parallelism = usize::from(args.parallel);
    opts.controller_url = args.controller_url.clone();
    opts.context = global.context.clone();
    // Values to hide that only the operator knows (tokens of the
    // platform the agents talk to), one per line.
    if let Ok(values) = std::env::var("AGENTDECK_BUNDLE_REDACT") {
        opts.literals
            .extend(values.lines().map(|l| l.trim().as_bytes().to_vec()));
    }
    opts.controller_namespace = Some(config.controller_namespace);
    opts
}

/// What was written, what each rule hid, and what could not be collected.
fn report(summary: &ops::bundle::Summary, no_redact: bool) -> String {
    let mut out = format!(
        "wrote {} ({} files, {:.1} MB compressed from {:.1} MB, {} secrets hidden) in {:.1} s\n",
        summary.path.display(),
        summary.files,
        summary.zip_bytes as f64 / 1e6,
        summary.bytes as f64 / 1e6,
        summary.redactions,
        summary.elapsed.as_secs_f64()
    );
    // Per rule, never a value (per file: redactions.json).
    out.push_str(&if no_redact {
        "hidden: nothing (--no-redact)\n".to_owned()
    } else {
        format!(
            "hidden: {}\n",
            ops::bundle::redact::describe_counts(&summary.hidden)
        )
    });
    if !summary.errors.is_empty() {
        out.push_str(&format!(
            "{} things could not be collected (all listed in manifest.json){}:\n",
            summary.errors.len(),
            if summary.deadline_reached {
                "; the deadline was reached"
            } else {
                ""
            }
        ));
        for e in summary.errors.iter().take(10) {
            let container = e
                .container
                .as_deref()
                .map(|c| format!("/{c}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {} {} {}{}: {}\n",
                e.what, e.kind, e.name, container, e.message
            ));
        }
    }
    if !summary.lacks.is_empty() {
        out.push_str(&format!(
            "{} parts are missing for want of rights (manifest.json: access):\n",
            summary.lacks.len()
        ));
        for l in summary.lacks.iter().take(10) {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out
}

/// A progress bar on stderr counting `unit` (hidden when stderr is not a
/// terminal).
fn progress_bar(unit: &str) -> indicatif::ProgressBar {
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::new(0)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {{msg:12}} [{{bar:30}}] {{pos}}/{{len}} {unit}, {{prefix}}"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}
