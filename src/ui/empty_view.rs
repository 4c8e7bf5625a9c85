//! What an empty table says: why it is empty, and what to do about it.
//!
//! An empty view is an answer too. Before its watch answered it is
//! loading; when the API refused this identity its resource, it says which
//! verb on which resource in which namespace, and what to ask for; when
//! agentdeck's own resources are not served, it says they are not
//! installed and how to install them. Only then is it "no pools yet".

use crate::app::{App, Elsewhere, Refusal, ViewKind, WatchState, plural};

use super::theme::Role;

/// The command that installs agentdeck's resources.
pub const INSTALL_CRDS: &str = "agentdeck crds | kubectl apply -f -";

/// The kind a view lists.
pub fn kind_of(view: ViewKind) -> &'static str {
    match view {
        ViewKind::Pools => "AgentPool",
        ViewKind::Agents => "Pod",
        ViewKind::Tasks => "AgentTask",
        ViewKind::Events => "Event",
    }
}

/// Where the console reads, in words: `team-a`, or `any namespace`.
fn scope(app: &App) -> String {
    if app.opts.all_namespaces {
        "any namespace".to_owned()
    } else {
        app.opts.namespace.clone()
    }
}

/// Why the table of `view` has no rows, in lines, and their colour.
pub fn why_empty(app: &App, view: ViewKind) -> (Vec<String>, Role) {
    let kind = kind_of(view);
    if let WatchState::Disconnected(why) = &app.status.watch {
        return (vec![format!("disconnected: {why}")], Role::Danger);
    }
    let not_installed = app.status.watch == WatchState::NotInstalled
        || app.status.refusal("AgentPool") == Some(Refusal::NotServed);
    if not_installed && matches!(view, ViewKind::Pools | ViewKind::Tasks) {
        return (not_installed_lines(), Role::Warn);
    }
    match app.status.refusal(kind) {
        Some(Refusal::Forbidden(verb)) => return (forbidden_lines(app, view, verb), Role::Warn),
        Some(Refusal::NotServed) => {
            return (
                vec![format!(
                    "this cluster does not serve {} (the API answered 404)",
                    plural(kind)
                )],
                Role::Warn,
            );
        }
        None => {}
    }
    if app.status.watch == WatchState::Syncing || app.status.loading.iter().any(|k| k == kind) {
        return (vec!["loading…".to_owned()], Role::Muted);
    }
    let mut lines = vec![format!("no {} in {} yet", view.as_str(), scope(app))];
    if view == ViewKind::Pools {
        if let Some(note) = &app.opts.namespace_note {
            lines.push(note.clone());
        }
        lines.extend(elsewhere_line(app));
        if let Some(why) = &app.status.role_reason {
            lines.push(format!(
                "this console is {}: {why}",
                app.status.role.as_str()
            ));
        }
    }
    (lines, Role::Muted)
}

/// Where the pools are, when they are not where the console looks.
fn elsewhere_line(app: &App) -> Option<String> {
    if app.opts.all_namespaces {
        return None;
    }
    match &app.elsewhere {
        Elsewhere::NotLooked => None,
        Elsewhere::Found(found) if found.is_empty() => Some(
            "no pools in any namespace you may list either: `kubectl apply -f` a pool \
             (config/pool-quickstart.yaml is one) to start"
                .to_owned(),
        ),
        Elsewhere::Found(found) => {
            let shown: Vec<String> = found
                .iter()
                .take(4)
                .map(|(ns, n)| format!("{n} {} in {ns}", if *n == 1 { "pool" } else { "pools" }))
                .collect();
            let more = if found.len() > 4 {
                format!(" and {} more namespaces", found.len() - 4)
            } else {
                String::new()
            };
            Some(format!(
                "{}{more} — agentdeck -n {}, or -A for every namespace",
                shown.join(", "),
                found[0].0
            ))
        }
        Elsewhere::CannotLook(why) => Some(format!("other namespaces were not looked at: {why}")),
    }
}

/// What a view whose resource the API forbids says.
fn forbidden_lines(app: &App, view: ViewKind, verb: &str) -> Vec<String> {
    let resource = plural(kind_of(view));
    let within = if app.opts.all_namespaces {
        "in all namespaces".to_owned()
    } else {
        format!("in {}", app.opts.namespace)
    };
    vec![
        format!(
            "you may not {verb} {resource} {within} — {} need get/list/watch {resource}",
            view.as_str()
        ),
        "ask your cluster admin for a Role that grants them; `agentdeck access` lists what you \
         may do here (ctrl-r asks the API again)"
            .to_owned(),
    ]
}

/// What the pools and tasks views say when agentdeck is not installed.
pub fn not_installed_lines() -> Vec<String> {
    vec![
        "agentdeck is not installed in this cluster: the API does not serve AgentPools and \
         AgentTasks (their CustomResourceDefinitions are missing)"
            .to_owned(),
        format!("install them:  {INSTALL_CRDS}"),
        "not allowed to create CRDs? `agentdeck access` says what you may do; a cluster admin \
         can apply them. This view notices within seconds when they appear."
            .to_owned(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{AppOptions, ClusterStatus, Msg};

    fn app(status: ClusterStatus) -> App {
        let mut app = App::new(
            AppOptions {
                namespace: "team-a".into(),
                ..AppOptions::default()
            },
            crate::app::fixtures::now(),
        );
        app.update(Msg::Status(status));
        app
    }

    #[test]
    fn a_forbidden_resource_names_verb_resource_namespace_and_what_to_ask_for() {
        let a = app(ClusterStatus {
            watch: WatchState::Partial(vec!["pods".into()]),
            refused: vec![("Pod".into(), Refusal::Forbidden("list"))],
            ..ClusterStatus::default()
        });
        let (lines, _) = why_empty(&a, ViewKind::Agents);
        assert_eq!(
            lines[0],
            "you may not list pods in team-a — agents need get/list/watch pods"
        );
        // The pools are not forbidden: their view does not say so.
        let (lines, _) = why_empty(&a, ViewKind::Pools);
        assert_eq!(lines[0], "no pools in team-a yet");
    }

    #[test]
    fn a_view_loads_only_while_its_own_watch_has_not_answered() {
        let a = app(ClusterStatus {
            watch: WatchState::Synced,
            loading: vec!["Event".into()],
            ..ClusterStatus::default()
        });
        assert_eq!(why_empty(&a, ViewKind::Events).0, vec!["loading…"]);
        assert_eq!(
            why_empty(&a, ViewKind::Agents).0,
            vec!["no agents in team-a yet"]
        );
    }

    #[test]
    fn missing_crds_say_not_installed_and_the_install_command() {
        let a = app(ClusterStatus {
            watch: WatchState::NotInstalled,
            refused: vec![
                ("AgentPool".into(), Refusal::NotServed),
                ("AgentTask".into(), Refusal::NotServed),
            ],
            ..ClusterStatus::default()
        });
        for view in [ViewKind::Pools, ViewKind::Tasks] {
            let (lines, _) = why_empty(&a, view);
            assert!(lines[0].contains("not installed"), "{lines:?}");
            assert!(lines.iter().any(|l| l.contains(INSTALL_CRDS)), "{lines:?}");
        }
    }

    #[test]
    fn an_empty_pools_view_names_the_namespaces_that_have_pools() {
        let mut a = app(ClusterStatus {
            watch: WatchState::Synced,
            ..ClusterStatus::default()
        });
        a.update(Msg::PoolsElsewhere(Elsewhere::Found(vec![(
            "team-b".into(),
            3,
        )])));
        let (lines, _) = why_empty(&a, ViewKind::Pools);
        assert_eq!(lines[0], "no pools in team-a yet");
        assert_eq!(
            lines[1],
            "3 pools in team-b — agentdeck -n team-b, or -A for every namespace"
        );
        a.update(Msg::PoolsElsewhere(Elsewhere::CannotLook(
            "you may not list agentpools in all namespaces".into(),
        )));
        assert_eq!(
            why_empty(&a, ViewKind::Pools).0[1],
            "other namespaces were not looked at: you may not list agentpools in all namespaces"
        );
    }

    #[test]
    fn an_empty_pools_view_says_why_the_console_does_not_lead() {
        let a = app(ClusterStatus {
            watch: WatchState::Synced,
            role_reason: Some("namespace agentdeck-system missing (the Lease lives there)".into()),
            ..ClusterStatus::default()
        });
        let (lines, _) = why_empty(&a, ViewKind::Pools);
        assert_eq!(
            lines[1],
            "this console is observer: namespace agentdeck-system missing (the Lease lives there)"
        );
    }
}
