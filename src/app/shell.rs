//! `s` on an agent (k9s's habit on pods): a shell in its container;
//! `:shell POD [CONTAINER]` for any pod, a debug pod included. The
//! event loop suspends the console for it (see `tui::suspend`) and reports
//! how it ended with [`Msg::ShellEnded`](super::Msg::ShellEnded).

use super::{App, Command, ViewKind};

/// A pod's container to open a shell in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellRequest {
    /// The kube context of the pod (empty: the console's only one).
    pub context: String,
    pub namespace: String,
    pub pod: String,
    /// None: the agent's container (`agent`, `worker`, else the first).
    pub container: Option<String>,
}

impl App {
    /// The shell command for the selected agent, if the agents view is open.
    pub(super) fn shell(&mut self) -> Vec<Command> {
        let Some((ViewKind::Agents, _)) = self.table_kind() else {
            return Vec::new();
        };
        let Some(i) = self.selected_index(ViewKind::Agents) else {
            return Vec::new();
        };
        let s = self.snapshot.clone();
        let Some(a) = s.agents.get(i) else {
            return Vec::new();
        };
        let context = a.context.to_string();
        vec![super::fleet::routed(
            &context,
            Command::Shell(ShellRequest {
                context: context.clone(),
                namespace: a.namespace.clone(),
                pod: a.name.clone(),
                container: (a.component == "task").then(|| "runner".to_owned()),
            }),
        )]
    }

    /// `:shell [NS/]POD [CONTAINER]`: a shell in any pod of the namespace,
    /// a debug pod (`agentdeck debug --list`) included.
    pub(super) fn shell_named(
        &mut self,
        pod: Option<String>,
        container: Option<&str>,
    ) -> Vec<Command> {
        if self.opts.read_only {
            self.toast("read-only: no shells".into(), true);
            return Vec::new();
        }
        let Some(pod) = pod else {
            self.toast(
                "usage: :shell POD [CONTAINER] (a debug pod, or any pod of the namespace)".into(),
                true,
            );
            return Vec::new();
        };
        // `[CONTEXT/]NS/POD`: a context's name may hold `/` too.
        let (context, namespace, pod) = match pod.rsplit_once('/') {
            Some((rest, p)) => match rest.rsplit_once('/') {
                Some((ctx, ns)) => (ctx.to_owned(), ns.to_owned(), p.to_owned()),
                None => (String::new(), rest.to_owned(), p.to_owned()),
            },
            None => (String::new(), self.opts.namespace.clone(), pod),
        };
        // In a console over several contexts: the one named, else the one
        // the tables are narrowed to.
        let context = match (self.is_fleet(), context.is_empty()) {
            (false, _) => String::new(),
            (true, false) => context,
            (true, true) => match &self.narrow {
                Some(c) => c.clone(),
                None => {
                    self.toast(
                        "usage: :shell CONTEXT/NS/POD [CONTAINER] (or :ctx NAME first)".into(),
                        true,
                    );
                    return Vec::new();
                }
            },
        };
        vec![super::fleet::routed(
            &context,
            Command::Shell(ShellRequest {
                context: context.clone(),
                namespace,
                pod,
                container: container.map(str::to_owned),
            }),
        )]
    }

    /// How a shell ended: a toast.
    pub(super) fn shell_ended(&mut self, pod: &str, result: Result<i32, String>) {
        match result {
            Ok(0) => self.toast(format!("shell in {pod} ended"), false),
            Ok(code) => self.toast(format!("shell in {pod} exited with code {code}"), false),
            Err(why) => self.toast(format!("shell in {pod}: {why}"), true),
        }
    }
}
