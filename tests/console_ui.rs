//! Whole screens of the console drawn on ratatui's TestBackend from a fixed
//! fixture cluster at a fixed time, compared with the committed snapshots
//! (`tests/snapshots/`); every view at 100×30 and at 80×24.

use std::sync::Arc;
use std::time::Duration;

use agentdeck::app::rows::{self, Snapshot};
use agentdeck::app::{
    App, AppOptions, ClusterStatus, Msg, ObjectKey, Role as AppRole, WatchState, fixtures,
};
use agentdeck::health::FreshnessThresholds;
use agentdeck::ui::{self, Role, Theme};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;

fn snapshot(tasks: usize) -> Snapshot {
    let now = fixtures::now();
    rows::build(
        &fixtures::sources(now, tasks),
        now,
        &FreshnessThresholds {
            stale_after: Duration::from_secs(20),
            offline_after: Duration::from_secs(60),
        },
    )
}

fn app(w: u16, h: u16) -> App {
    let mut app = App::new(
        AppOptions {
            context: "prod-eu".into(),
            namespace: fixtures::NS.into(),
            ..AppOptions::default()
        },
        fixtures::now(),
    );
    app.update(Msg::Resize(w, h));
    app.update(Msg::Status(ClusterStatus {
        role: AppRole::Leader,
        watch: WatchState::Synced,
        latency: Some(Duration::from_millis(4)),
        ..Default::default()
    }));
    app.update(Msg::Snapshot(Arc::new(snapshot(40))));
    app
}

fn keys(app: &mut App, keys: &str) {
    for c in keys.chars() {
        let code = match c {
            '\n' => KeyCode::Enter,
            '\x1b' => KeyCode::Esc,
            '\t' => KeyCode::Tab,
            // Control letters as ctrl-<letter>.
            c @ '\x01'..='\x1a' => KeyCode::Char(char::from(c as u8 + b'a' - 1)),
            c => KeyCode::Char(c),
        };
        let m = if c.is_ascii_uppercase() {
            KeyModifiers::SHIFT
        } else if ('\x01'..='\x1a').contains(&c) && !matches!(c, '\n' | '\t') {
            KeyModifiers::CONTROL
        } else {
            KeyModifiers::NONE
        };
        app.update(Msg::Key(KeyEvent::new(code, m)));
    }
}

fn terminal(app: &App, theme: &Theme) -> Terminal<TestBackend> {
    let (w, h) = app.size;
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| ui::draw(f, app, theme)).expect("drawn");
    t
}

/// The screen as text, one line per row, trailing blanks cut.
fn text(app: &App) -> String {
    let t = terminal(app, &Theme::default());
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Each view reached by keys from a fresh app, at both sizes.
const SCREENS: &[(&str, &str)] = &[
    ("pools", ""),
    ("agents", "2"),
    ("tasks", "3"),
    ("events", "4"),
    ("pool_tasks", "jj\n"),
    ("pool_agents", "jj\n\t"),
    ("tasks_filtered", "3/fail|err\n"),
    ("tasks_sorted_by_status", "3S"),
    ("tasks_wide", "3\x17"),
    ("help", "?"),
    ("help_scrolled_to_the_end", "?G"),
    ("drain_dialog", "jjd"),
    ("command_bar", ":ag"),
];

#[test]
fn every_view_matches_its_snapshot_at_100x30_and_80x24() {
    for (w, h) in [(100, 30), (80, 24)] {
        for (name, seq) in SCREENS {
            let mut a = app(w, h);
            keys(&mut a, seq);
            insta::assert_snapshot!(format!("{name}_{w}x{h}"), text(&a));
        }
    }
}

#[test]
fn with_all_namespaces_tables_lead_with_a_namespace_column() {
    for (w, h) in [(100, 30), (80, 24)] {
        let mut a = App::new(
            AppOptions {
                context: "prod-eu".into(),
                namespace: "(all)".into(),
                all_namespaces: true,
                ..AppOptions::default()
            },
            fixtures::now(),
        );
        a.update(Msg::Resize(w, h));
        a.update(Msg::Snapshot(Arc::new(snapshot(40))));
        keys(&mut a, "3");
        insta::assert_snapshot!(format!("tasks_all_namespaces_{w}x{h}"), text(&a));
    }
}

#[test]
fn the_log_and_yaml_views_match_their_snapshots() {
    for (w, h) in [(100, 30), (80, 24)] {
        let mut a = app(w, h);
        // A running task of pool platform, then its log.
        keys(&mut a, "jj\n/running\n\n");
        assert!(
            matches!(a.screen(), agentdeck::app::Screen::Logs { .. }),
            "the log view is open"
        );
        let prefix = a
            .logs
            .as_ref()
            .and_then(|l| l.prefix.clone())
            .expect("an agent's log is narrowed to the task");
        let lines = (0..60)
            .map(|i| {
                format!(
                    "2026-11-24T09:59:{:02}Z {prefix}aws_instance.web[{i}]: Creating... \u{1b}[1mstill creating\u{1b}[0m",
                    i % 60
                )
            })
            .chain([
                format!(r#"2026-11-24T09:59:59Z {prefix}{{"level":"error","msg":"apply failed","resource":"aws_s3_bucket.logs"}}"#),
                format!("2026-11-24T09:59:59Z {prefix}a very long line that goes on and on beyond the width of any terminal this console will be drawn on, to show wrapping"),
            ])
            .collect();
        a.update(Msg::LogLines { id: 1, lines });
        insta::assert_snapshot!(format!("logs_{w}x{h}"), text(&a));
        keys(&mut a, "wt");
        insta::assert_snapshot!(format!("logs_wrapped_timestamps_{w}x{h}"), text(&a));

        let mut a = app(w, h);
        keys(&mut a, "y");
        a.update(Msg::Yaml {
            object: ObjectKey {
                context: String::new(),
                kind: "AgentPool",
                namespace: fixtures::NS.into(),
                name: "batch".into(),
            },
            text: "apiVersion: agentdeck.dev/v1alpha1\nkind: AgentPool\nmetadata:\n  name: batch\n  namespace: ops\nspec:\n  executionMode: job\n  maxReplicas: 20\n".into(),
        });
        insta::assert_snapshot!(format!("yaml_{w}x{h}"), text(&a));
    }
}

#[test]
fn the_header_says_observer_read_only_and_disconnected_with_the_reason() {
    let mut a = app(100, 30);
    a.update(Msg::Status(ClusterStatus {
        role: AppRole::Observer,
        watch: WatchState::Disconnected("Connection refused (os error 111)".into()),
        latency: None,
        ..Default::default()
    }));
    let screen = text(&a);
    let header = screen.lines().next().expect("header");
    assert!(header.contains("role observer"), "{header}");
    assert!(
        header.contains("disconnected: Connection refused"),
        "{header}"
    );
    let mut a = App::new(
        AppOptions {
            read_only: true,
            ..AppOptions::default()
        },
        fixtures::now(),
    );
    a.update(Msg::Resize(100, 30));
    let screen = text(&a);
    assert!(
        screen
            .lines()
            .next()
            .is_some_and(|h| h.contains("role read-only")),
        "{screen}"
    );
    // Nothing loaded yet: the table says so rather than looking empty.
    assert!(screen.contains("loading…"), "{screen}");
}

fn cell_style(app: &App, theme: &Theme, needle: &str) -> ratatui::style::Style {
    let t = terminal(app, theme);
    let buf = t.backend().buffer();
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
        if let Some(i) = line.find(needle) {
            let x = line[..i].chars().count() as u16;
            return buf[(x, y)].style();
        }
    }
    panic!("{needle:?} not on screen");
}

#[test]
fn verdicts_and_phases_are_coloured_by_their_role_and_no_color_drops_colour() {
    let a = app(120, 30);
    let theme = Theme::default();
    assert_eq!(
        cell_style(&a, &theme, "Stuck").fg,
        theme.style(Role::Danger).fg
    );
    assert_eq!(
        cell_style(&a, &theme, "Degraded").fg,
        theme.style(Role::Warn).fg
    );
    let plain = Theme::load("default", true).expect("theme");
    let s = cell_style(&a, &plain, "Stuck");
    assert!(matches!(s.fg, None | Some(Color::Reset)), "{s:?}");
    let hc = Theme::load("high-contrast", false).expect("theme");
    assert_eq!(cell_style(&a, &hc, "Stuck").fg, hc.style(Role::Danger).fg);
}

#[test]
fn escape_sequences_from_the_cluster_never_reach_the_screen() {
    let mut a = app(120, 30);
    keys(&mut a, "4");
    let screen = text(&a);
    assert!(screen.contains("credentials expired"), "{screen}");
    assert!(!screen.contains('\u{1b}'), "{screen}");
    // An event about an object that is not ours is left out.
    assert!(!screen.contains("someone-elses-pod"), "{screen}");
}

#[test]
fn a_frame_builds_only_the_rows_on_screen() {
    // 100k tasks draw the same screen shape as 40: the table shows a page.
    let mut a = app(100, 30);
    a.update(Msg::Snapshot(Arc::new(snapshot(100_000))));
    keys(&mut a, "3");
    let screen = text(&a);
    assert!(screen.contains("Tasks [100000/100000]"), "{screen}");
    let rows = screen.lines().filter(|l| l.contains("plan-")).count();
    assert_eq!(rows, agentdeck::app::list_rows(30));
}

/// An audit trail as the ops layer writes it, at fixed times before the
/// fixture's `now`.
fn audit_records() -> Vec<agentdeck::ops::audit::AuditRecord> {
    use agentdeck::ops::audit::{AuditObject, AuditRecord};
    use serde_json::json;
    let now = fixtures::now();
    let rec = |ago: i64,
               user: &str,
               via: &str,
               action: &str,
               object: Option<(&str, &str)>,
               outcome: &str| {
        AuditRecord {
            time: now - jiff::SignedDuration::from_secs(ago),
            user: user.into(),
            via: via.into(),
            context: "kind-a".into(),
            namespace: fixtures::NS.into(),
            action: action.into(),
            request: json!({}),
            summary: format!("{action} pool platform"),
            objects: object
                .map(|(o, change)| AuditObject {
                    object: o.into(),
                    before: json!({}),
                    after: json!({}),
                    changes: vec![change.into()],
                })
                .into_iter()
                .collect(),
            unchanged: Vec::new(),
            outcome: outcome.into(),
        }
    };
    vec![
        rec(
            7200,
            "alice@example.com",
            "cli",
            "scale",
            Some(("AgentPool/platform", "spec.maxReplicas: 6 → 8")),
            "applied",
        ),
        rec(
            3000,
            "alice@example.com",
            "console",
            "drain",
            Some(("AgentPool/batch", "spec.drain: false → true")),
            "applied",
        ),
        rec(
            600,
            "bob",
            "console",
            "hold",
            None,
            "failed: replicas 30 is above the maximum 20 of pool batch",
        ),
        rec(
            90,
            "bob",
            "console",
            "retry",
            Some(("AgentTask/plan-00003", "status.phase: Failed → Pending")),
            "applied",
        ),
        rec(
            20,
            "alice@example.com",
            "console",
            "undrain",
            Some((
                "Pod/iac-agent-platform-7d9f-a1",
                "metadata.annotations[\"agentdeck.dev/drain\"]: \"true\" → (none)",
            )),
            "applied",
        ),
    ]
}

#[test]
fn the_audit_view_the_hold_dialog_and_the_bundle_gauge_match_their_snapshots() {
    for (w, h) in [(100, 30), (80, 24)] {
        let mut a = app(w, h);
        keys(&mut a, ":audit\n");
        insta::assert_snapshot!(format!("audit_loading_{w}x{h}"), text(&a));
        a.update(Msg::AuditLoaded(Ok(agentdeck::app::audit::rows(
            &audit_records(),
        ))));
        insta::assert_snapshot!(format!("audit_{w}x{h}"), text(&a));
        keys(&mut a, "/console\n");
        insta::assert_snapshot!(format!("audit_filtered_{w}x{h}"), text(&a));

        // The scale dialog: a hold typed, then the API's dry run shown
        // before the confirmation.
        let mut a = app(w, h);
        keys(&mut a, "jjs");
        a.update(Msg::Key(KeyEvent::new(
            KeyCode::Char('u'),
            KeyModifiers::CONTROL,
        )));
        keys(&mut a, "=6 30m\n");
        let request = a.dialog.as_ref().expect("dialog").request.clone();
        a.update(Msg::ActionPreview {
            request,
            result: Ok(vec![
                "the hold applies at once: 3 → 6 agents".into(),
                "AgentPool/platform: spec.hold: (none) → {\"replicas\":6,\"until\":\"2026-11-24T10:30:00Z\"}".into(),
            ]),
        });
        insta::assert_snapshot!(format!("hold_dialog_{w}x{h}"), text(&a));

        let mut a = app(w, h);
        keys(&mut a, "jjb");
        a.update(Msg::BundleProgress(agentdeck::app::BundleGauge {
            scope: "pool platform".into(),
            phase: "collecting".into(),
            files_done: 14,
            files_expected: 40,
            bytes: 3_400_000,
        }));
        insta::assert_snapshot!(format!("bundle_gauge_{w}x{h}"), text(&a));
    }
}

#[test]
fn a_held_pool_and_a_drained_agent_show_in_their_tables() {
    let mut snap = snapshot(40);
    let p = snap
        .pools
        .iter_mut()
        .find(|p| p.name == "platform")
        .expect("pool platform");
    Arc::make_mut(p).hold = Some("6 by alice until 2026-11-24T10:30:00Z".into());
    let idle = snap
        .agents
        .iter()
        .position(|a| a.component == "agent" && a.task.is_none())
        .expect("an idle agent");
    Arc::make_mut(&mut snap.agents[idle]).draining = true;
    let name = snap.agents[idle].name.clone();
    let mut a = app(200, 30);
    a.update(Msg::Snapshot(Arc::new(snap)));
    let screen = text(&a);
    let row = screen
        .lines()
        .find(|l| l.contains("platform"))
        .expect("platform row");
    assert!(row.contains("6 by alice until"), "{screen}");
    keys(&mut a, "2");
    let screen = text(&a);
    let row = screen
        .lines()
        .find(|l| l.contains(&name))
        .expect("the agent's row");
    assert!(row.contains("idle (drain)"), "{row}");
}

/// A console over `eu-west` (leading, synced) and `us-east` (unreachable),
/// each showing the fixture cluster.
fn fleet_app(w: u16, h: u16) -> App {
    use agentdeck::app::fleet::Merger;
    let contexts = vec!["eu-west".to_owned(), "us-east".to_owned()];
    let mut a = App::new(
        AppOptions {
            context: contexts.join(", "),
            contexts: contexts.clone(),
            namespace: fixtures::NS.into(),
            ..AppOptions::default()
        },
        fixtures::now(),
    );
    a.update(Msg::Resize(w, h));
    let one = Arc::new(snapshot(6));
    let mut merger = Merger::new(&contexts);
    merger.take(0, one.clone());
    merger.take(1, one);
    a.update(Msg::Snapshot(Arc::new(merger.merged())));
    a.update(Msg::ContextStatus {
        context: "eu-west".into(),
        status: ClusterStatus {
            role: AppRole::Leader,
            watch: WatchState::Synced,
            latency: Some(Duration::from_millis(3)),
            ..Default::default()
        },
    });
    a.update(Msg::ContextStatus {
        context: "us-east".into(),
        status: ClusterStatus {
            role: AppRole::Observer,
            watch: WatchState::Disconnected("Connection refused (os error 111)".into()),
            latency: None,
            ..Default::default()
        },
    });
    a
}

#[test]
fn with_several_contexts_tables_lead_with_a_context_column_and_the_header_has_each() {
    for (w, h) in [(100, 30), (80, 24)] {
        for (name, seq) in [
            ("pools", ""),
            ("tasks", "3"),
            ("narrowed", ":ctx us-east\n3"),
        ] {
            let mut a = fleet_app(w, h);
            keys(&mut a, seq);
            insta::assert_snapshot!(format!("fleet_{name}_{w}x{h}"), text(&a));
        }
    }
    let a = fleet_app(120, 30);
    let screen = text(&a);
    let header = screen.lines().next().expect("header");
    assert!(header.contains("eu-west leader synced"), "{header}");
    assert!(
        header.contains("us-east disconnected: Connection refused"),
        "{header}"
    );
    // The unreachable context's last rows are shown muted.
    let theme = Theme::default();
    let t = terminal(&a, &theme);
    let buf = t.backend().buffer();
    let row_of = |ctx: &str| {
        (0..buf.area.height)
            .find(|&y| {
                let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
                line.starts_with(&format!("│{ctx}"))
            })
            .expect("a row of the context")
    };
    let (up, down) = (row_of("eu-west"), row_of("us-east"));
    assert_ne!(
        buf[(1, up)].fg,
        theme.style(Role::Muted).fg.unwrap_or(Color::Reset)
    );
    assert_eq!(
        Some(buf[(1, down)].fg),
        theme.style(Role::Muted).fg,
        "the disconnected context's row"
    );
}
