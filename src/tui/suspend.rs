//! Suspending the console for an interactive shell: stop reading keys
//! (the event stream is dropped, so its reader thread takes none of the
//! shell's input), leave the alternate screen and raw mode, run the
//! session on the plain terminal, then take the terminal back, drop any
//! input left over, and redraw everything.

use std::io::Write;
use std::time::Duration;

use crossterm::event::EventStream;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::app::{App, Msg, ShellRequest};
use crate::ops::attach::{self, ShellTarget};

/// Runs a shell for `req` with the console suspended; the outcome reaches
/// the app as [`Msg::ShellEnded`].
pub async fn shell(
    terminal: &mut super::Term,
    events: &mut EventStream,
    app: &mut App,
    client: &Client,
    req: ShellRequest,
) -> std::io::Result<()> {
    drop(std::mem::replace(events, EventStream::new()));
    super::restore_terminal();
    {
        let mut out = std::io::stdout();
        let _ = crossterm::execute!(out, crossterm::cursor::Show);
        let _ = writeln!(
            out,
            "agentdeck: shell in pod {}/{}; exit or Ctrl-D returns to the console",
            req.namespace, req.pod
        );
        let _ = out.flush();
    }
    let result = run(client, &req).await;
    if let Err(why) = &result {
        let _ = writeln!(std::io::stderr(), "agentdeck: {why}");
    }
    crossterm::terminal::enable_raw_mode()?;
    crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen)?;
    // Keys typed while the shell ended are not the console's.
    while crossterm::event::poll(Duration::ZERO)? {
        let _ = crossterm::event::read()?;
    }
    terminal.clear()?;
    let size = terminal.size()?;
    app.update(Msg::Resize(size.width, size.height));
    // The clock stood still while the shell ran.
    app.update(Msg::Tick(jiff::Timestamp::now()));
    app.update(Msg::ShellEnded {
        pod: req.pod,
        result,
    });
    Ok(())
}

async fn run(client: &Client, req: &ShellRequest) -> Result<i32, String> {
    let container = match &req.container {
        Some(c) => c.clone(),
        None => {
            let api: Api<Pod> = Api::namespaced(client.clone(), &req.namespace);
            let pod = api.get(&req.pod).await.map_err(|e| e.to_string())?;
            pod.spec
                .as_ref()
                .and_then(crate::ops::debug::agent_container)
                .map(|c| c.name.clone())
                .ok_or_else(|| format!("pod {} has no containers", req.pod))?
        }
    };
    let target = ShellTarget {
        namespace: req.namespace.clone(),
        pod: req.pod.clone(),
        container,
    };
    attach::wait_running(client, &target)
        .await
        .map_err(|e| e.to_string())?;
    attach::shell(client, &target)
        .await
        .map_err(|e| e.to_string())
}
