//! `agentdeck debug`: debug pods made, listed, removed or attached to.

use super::{check_config, print, runtime};
use crate::error::{Error, Result};

/// `agentdeck debug`: makes, lists or removes debug pods.
pub fn debug(global: &crate::cli::GlobalArgs, args: crate::cli::DebugArgs) -> Result<()> {
    use crate::ops::debug;
    check_config(global)?;
    if args.attach {
        return debug_attach(global, &args);
    }
    let rt = runtime()?;
    let text = rt.block_on(async {
        let conn =
            crate::cluster::connect(global.context.as_deref(), global.namespace.as_deref()).await?;
        crate::cluster::require_namespace(&conn).await?;
        let ns = conn.namespace.clone();
        if args.list {
            let pods = debug::list(&conn.client, &ns).await?;
            let ephemeral = debug::list_ephemeral(&conn.client, &ns).await?;
            if pods.is_empty() && ephemeral.is_empty() {
                return Ok::<_, Error>(format!(
                    "no debug pods or ephemeral debug containers in {ns}\n"
                ));
            }
            let when = |t: Option<jiff::Timestamp>| t.map_or_else(|| "-".into(), |t| t.to_string());
            let mut out = String::new();
            if !pods.is_empty() {
                out.push_str(&format!(
                    "{:<56} {:<40} {:<10} EXPIRES\n",
                    "NAME", "TARGET", "PHASE"
                ));
                for p in pods {
                    out.push_str(&format!(
                        "{:<56} {:<40} {:<10} {}\n",
                        p.name,
                        p.target,
                        p.phase.unwrap_or_default(),
                        when(p.expires_at)
                    ));
                }
            }
            if !ephemeral.is_empty() {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!(
                    "{:<56} {:<20} {:<12} {:<24} EXPIRES\n",
                    "POD", "EPHEMERAL CONTAINER", "TARGETS", "STATE"
                ));
                for e in ephemeral {
                    out.push_str(&format!(
                        "{:<56} {:<20} {:<12} {:<24} {}\n",
                        e.pod,
                        e.container,
                        e.target_container.as_deref().unwrap_or("-"),
                        e.state,
                        when(e.expires_at)
                    ));
                }
            }
            return Ok(out);
        }
        if args.cleanup {
            let deleted = debug::cleanup(&conn.client, &ns, args.pod.as_deref(), None).await?;
            return Ok(if deleted.is_empty() {
                format!("no debug pods to delete in {ns}\n")
            } else {
                deleted
                    .iter()
                    .map(|n| format!("deleted pod/{n}\n"))
                    .collect()
            });
        }
        let pod = args.pod.clone().unwrap_or_default();
        let made = debug::create(&conn.client, &debug_options(&args, &ns, pod)).await?;
        let mut out = match made.expires_at {
            Some(t) => format!(
                "created pod/{} (a copy of {}), deleted by the controller at {t}\n",
                made.name, made.target
            ),
            None => format!(
                "added ephemeral container {} to pod/{}\n",
                made.container, made.name
            ),
        };
        if !made.original_command.is_empty() {
            out.push_str(&format!(
                "original command of container {}: {}\n",
                made.container,
                made.original_command.join(" ")
            ));
        }
        out.push_str(&format!(
            "shell: kubectl exec -it -n {ns} {} -c {} -- sh\n",
            made.name, made.container
        ));
        Ok(out)
    })?;
    print(&text)
}

/// `agentdeck debug POD --attach`: a shell in a new debug pod (or in POD
/// when it is one already); exits with the shell's code.
fn debug_attach(global: &crate::cli::GlobalArgs, args: &crate::cli::DebugArgs) -> Result<()> {
    use crate::ops::attach::{self, ShellTarget};
    use crate::ops::debug;
    let rt = runtime()?;
    let code = rt.block_on(async {
        let conn =
            crate::cluster::connect(global.context.as_deref(), global.namespace.as_deref()).await?;
        let ns = conn.namespace.clone();
        let pod = args.pod.clone().unwrap_or_default();
        let made = match debug::existing(&conn.client, &ns, &pod).await? {
            Some(found) => {
                eprintln!("attaching to debug pod/{}", found.name);
                found
            }
            None => {
                let made = debug::create(&conn.client, &debug_options(args, &ns, pod)).await?;
                match made.expires_at {
                    Some(t) => eprintln!(
                        "created pod/{} (a copy of {}), deleted by the controller at {t}",
                        made.name, made.target
                    ),
                    None => eprintln!(
                        "added ephemeral container {} to pod/{}",
                        made.container, made.name
                    ),
                }
                made
            }
        };
        let target = ShellTarget {
            namespace: ns,
            pod: made.name.clone(),
            container: made.container.clone(),
        };
        attach::wait_running(&conn.client, &target)
            .await
            .map_err(debug::DebugError::from)?;
        eprintln!("shell in {target}; exit or Ctrl-D ends it");
        let code = attach::shell(&conn.client, &target)
            .await
            .map_err(debug::DebugError::from)?;
        Ok::<_, Error>(code)
    })?;
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    if code != 0 {
        return Err(crate::ops::debug::DebugError::ShellExited(code).into());
    }
    Ok(())
}

/// What `agentdeck debug` asks for: a debug pod for `pod` in `ns`.
fn debug_options(
    args: &crate::cli::DebugArgs,
    ns: &str,
    pod: String,
) -> crate::ops::debug::DebugOptions {
    crate::ops::debug::DebugOptions {
        namespace: ns.to_owned(),
        pod,
        image: args.image.clone(),
        mode: args.mode,
        profile: args.profile,
        ttl: args.ttl,
    }
}
