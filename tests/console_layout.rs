//! The console's layout as space runs out: every view and every dialog at
//! 80×24 and 160×48 (snapshots in `tests/snapshots/`), numbers and ages
//! whole or gone at every width, names shortened in the middle, the watch
//! state always in the header, toasts wrapped, dialogs that scroll and keep
//! their keys line.

use std::sync::Arc;
use std::time::Duration;

use agentdeck::app::rows::{self, Snapshot};
use agentdeck::app::{
    ActionRequest, App, AppOptions, ClusterStatus, Msg, PreviewState, Role as AppRole, WatchState,
    fixtures,
};
use agentdeck::crd::{AgentTaskStatus, TaskPhase};
use agentdeck::health::FreshnessThresholds;
use agentdeck::ui::{self, Theme};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use jiff::SignedDuration;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const SIZES: [(u16, u16); 2] = [(80, 24), (160, 48)];

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

fn status(watch: WatchState) -> ClusterStatus {
    ClusterStatus {
        role: AppRole::Leader,
        watch,
        latency: Some(Duration::from_millis(4)),
        ..Default::default()
    }
}

fn app_on(w: u16, h: u16, snap: Snapshot, context: &str) -> App {
    let mut app = App::new(
        AppOptions {
            context: context.into(),
            namespace: fixtures::NS.into(),
            ..AppOptions::default()
        },
        fixtures::now(),
    );
    app.update(Msg::Resize(w, h));
    app.update(Msg::Status(status(WatchState::Synced)));
    app.update(Msg::Snapshot(Arc::new(snap)));
    app
}

fn app(w: u16, h: u16) -> App {
    app_on(w, h, snapshot(40), "prod-eu")
}

fn keys(app: &mut App, keys: &str) {
    for c in keys.chars() {
        let code = match c {
            '\n' => KeyCode::Enter,
            '\x1b' => KeyCode::Esc,
            '\t' => KeyCode::Tab,
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

fn code(app: &mut App, code: KeyCode) {
    app.update(Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

/// The screen as text, one line per row, trailing blanks cut.
fn text(app: &App) -> String {
    let (w, h) = app.size;
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| ui::draw(f, app, &Theme::default()))
        .expect("drawn");
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

/// The preview the ops layer sends for a retry of plan-00003: its
/// `status` diff as `diff::lines` writes it, `status.history` whole.
fn retry_preview() -> Vec<String> {
    let before: AgentTaskStatus = serde_json::from_value(serde_json::json!({
        "phase": "Failed",
        "agent": "iac-agent-platform-7d9f5c8b4-9lz6q",
        "attempts": 1,
        "startedAt": "2026-11-24T09:58:12Z",
        "finishedAt": "2026-11-24T09:58:24Z",
        "exitCode": 3,
        "message": "exited with code 3 after 12s: credentials expired",
    }))
    .expect("a task status");
    let after = before.retried("alice", fixtures::now());
    let wrap = |s: &AgentTaskStatus| serde_json::json!({ "status": s });
    let changes = agentdeck::ops::diff::lines(&wrap(&before), &wrap(&after));
    assert!(
        changes
            .iter()
            .any(|l| l.starts_with("status.history: (none) → [{")),
        "the raw JSON this test is about: {changes:?}"
    );
    vec![
        "1 task runs again as Pending (attempt 2 next); the earlier runs stay in status.history"
            .into(),
        format!("AgentTask/plan-00003: {}", changes.join("; ")),
    ]
}

fn preview(app: &mut App, result: Result<Vec<String>, String>) {
    let request = app.dialog.as_ref().expect("a dialog").request.clone();
    app.update(Msg::ActionPreview { request, result });
}

/// Each view, reached by keys from a fresh app.
const VIEWS: &[(&str, &str)] = &[
    ("pools", ""),
    ("agents", "2"),
    ("tasks", "3"),
    ("events", "4"),
];

#[test]
fn every_view_matches_its_snapshot_at_80x24_and_160x48() {
    for (w, h) in SIZES {
        for (name, seq) in VIEWS {
            let mut a = app(w, h);
            keys(&mut a, seq);
            insta::assert_snapshot!(format!("layout_{name}_{w}x{h}"), text(&a));
        }
        let mut a = app(w, h);
        keys(&mut a, ":audit\n");
        a.update(Msg::AuditLoaded(Ok(agentdeck::app::audit::rows(
            &audit_records(),
        ))));
        insta::assert_snapshot!(format!("layout_audit_{w}x{h}"), text(&a));
    }
}

fn audit_records() -> Vec<agentdeck::ops::audit::AuditRecord> {
    use agentdeck::ops::audit::{AuditObject, AuditRecord};
    let now = fixtures::now();
    let rec = |ago: i64, user: &str, action: &str, object: &str, change: &str, outcome: &str| {
        AuditRecord {
            time: now - SignedDuration::from_secs(ago),
            user: user.into(),
            via: "console".into(),
            context: "kind-a".into(),
            namespace: fixtures::NS.into(),
            action: action.into(),
            request: serde_json::json!({}),
            summary: format!("{action} {object}"),
            objects: vec![AuditObject {
                object: object.into(),
                before: serde_json::json!({}),
                after: serde_json::json!({}),
                changes: vec![change.into()],
            }],
            unchanged: Vec::new(),
            outcome: outcome.into(),
        }
    };
    vec![
        rec(
            1068,
            "alice@example.com",
            "drain",
            "Pod/iac-agent-platform-7d9f5c8b4-9lz6q",
            "metadata.annotations[\"agentdeck.dev/drain\"]: (none) → \"true\"",
            "applied",
        ),
        rec(
            90,
            "bob",
            "retry",
            "AgentTask/plan-00003",
            "status.phase: \"Failed\" → \"Pending\"",
            "failed: the task changed since it was read (409 Conflict); try again",
        ),
    ]
}

/// Each dialog: keys from a fresh app, then what the worker answers.
#[allow(clippy::type_complexity)]
fn dialogs() -> Vec<(
    &'static str,
    &'static str,
    Option<Result<Vec<String>, String>>,
)> {
    vec![
        ("scale_input", "jjs", None),
        ("scale_hold_beyond_bounds", "jjs\x15=100\n", None),
        ("drain_pool", "jjd", None),
        (
            "drain_pool_refused",
            "jjd",
            Some(Err(
                "AgentPool platform changed since it was read (409 Conflict)".into(),
            )),
        ),
        (
            "debug_logs_pool",
            "jj\x07",
            Some(Ok(vec![
                "3 agents switch to debug logs within a second, without a restart".into(),
                "AgentPool/platform: spec.debug: false → true".into(),
            ])),
        ),
        ("drain_agent", "2d", None),
        ("debug_logs_agent", "2\x07", None),
        ("cancel_task", "3/plan-00001\n\x0b", None),
        ("retry_task", "3/plan-00003\nr", Some(Ok(retry_preview()))),
    ]
}

#[test]
fn every_dialog_matches_its_snapshot_at_80x24_and_160x48() {
    for (w, h) in SIZES {
        for (name, seq, answer) in dialogs() {
            let mut a = app(w, h);
            keys(&mut a, seq);
            assert!(a.dialog.is_some(), "{name}: a dialog is open");
            if let Some(answer) = answer {
                preview(&mut a, answer);
            }
            let screen = text(&a);
            let keys_line = a.dialog.as_ref().expect("dialog").keys_line();
            assert!(screen.contains(keys_line), "{name} {w}x{h}:\n{screen}");
            insta::assert_snapshot!(format!("layout_dialog_{name}_{w}x{h}"), screen);
        }
    }
}

#[test]
fn a_retry_preview_reads_status_history_as_runs_not_json() {
    let mut a = app(80, 24);
    keys(&mut a, "3/plan-00003\nr");
    preview(&mut a, Ok(retry_preview()));
    let screen = text(&a);
    assert!(!screen.contains("[{"), "{screen}");
    assert!(!screen.contains("\"attempts\""), "{screen}");
    assert!(
        screen.contains("attempt 1: Failed on iac-agent-platform-7d9f5c8b4-9lz6q, exit 3"),
        "{screen}"
    );
    assert!(screen.contains("y/enter apply · n/esc cancel"), "{screen}");
}

#[test]
fn a_long_preview_scrolls_and_its_keys_line_stays() {
    let mut a = app(80, 24);
    keys(&mut a, "3/plan-00003\nr");
    let many: Vec<String> = (0..40)
        .map(|i| format!("AgentTask/plan-{i:05}: status.phase: \"Failed\" → \"Pending\""))
        .collect();
    preview(&mut a, Ok(many));
    let first = text(&a);
    assert!(first.contains("y/enter apply · n/esc cancel"), "{first}");
    assert!(first.contains("↑/↓ 1–"), "{first}");
    assert!(!first.contains("plan-00039"), "{first}");
    insta::assert_snapshot!("layout_dialog_long_preview_80x24", first);
    for _ in 0..60 {
        keys(&mut a, "j");
    }
    let last = text(&a);
    assert!(last.contains("plan-00039"), "scrolled to the end:\n{last}");
    assert!(last.contains("y/enter apply · n/esc cancel"), "{last}");
    insta::assert_snapshot!("layout_dialog_long_preview_scrolled_80x24", last);
    // Scrolled to the end, one key up moves at once (no presses lost past
    // the end).
    assert!(last.contains("27–44 of 44"), "{last}");
    keys(&mut a, "k");
    assert!(text(&a).contains("26–43 of 44"), "{}", text(&a));
    keys(&mut a, "j");
    code(&mut a, KeyCode::PageUp);
    code(&mut a, KeyCode::PageUp);
    code(&mut a, KeyCode::PageUp);
    code(&mut a, KeyCode::PageUp);
    code(&mut a, KeyCode::PageUp);
    code(&mut a, KeyCode::PageUp);
    assert_eq!(text(&a), first, "back at the top");
}

#[test]
fn a_hold_beyond_the_bounds_says_what_is_allowed_and_is_not_offered() {
    let mut a = app(80, 24);
    keys(&mut a, "jjs\x15=100\n");
    let d = a.dialog.as_ref().expect("the scale dialog stays");
    assert_eq!(d.preview, PreviewState::None, "nothing is asked of the API");
    let e = d.error.as_deref().expect("an error");
    assert!(e.contains("above pool platform's maximum 6"), "{e}");
    assert!(e.contains("hold 1–6") && e.contains("=100!"), "{e}");
    assert!(!e.contains("--force"), "{e}");
    // Enter again changes nothing; `!` widens the bounds on purpose.
    keys(&mut a, "\n");
    assert!(a.dialog.as_ref().is_some_and(|d| d.input.is_some()));
    keys(&mut a, "\x15=100!\n");
    let d = a.dialog.as_ref().expect("dialog");
    assert!(
        matches!(
            &d.request,
            ActionRequest::HoldReplicas {
                replicas: 100,
                force: true,
                ..
            }
        ),
        "{:?}",
        d.request
    );
    assert_eq!(d.preview, PreviewState::Loading);
}

#[test]
fn a_refused_preview_offers_no_apply() {
    let mut a = app(80, 24);
    keys(&mut a, "jjd");
    preview(&mut a, Err("replicas 100 is above the maximum 6".into()));
    let screen = text(&a);
    assert!(
        screen.contains("n/esc close (nothing to apply)"),
        "{screen}"
    );
    assert!(!screen.contains("y/enter apply"), "{screen}");
    for k in ["y", "\n"] {
        let mut cmds = Vec::new();
        for c in k.chars() {
            let code = if c == '\n' {
                KeyCode::Enter
            } else {
                KeyCode::Char(c)
            };
            cmds.extend(a.update(Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))));
        }
        assert!(cmds.is_empty(), "{k:?}: {cmds:?}");
        assert!(a.dialog.is_some(), "{k:?} leaves the dialog open");
    }
    keys(&mut a, "n");
    assert!(a.dialog.is_none());
}

#[test]
fn on_a_bundle_the_header_names_it_and_when_it_was_taken() {
    for w in [80u16, 160] {
        let mut a = App::new(
            AppOptions {
                context: "prod-eu".into(),
                namespace: fixtures::NS.into(),
                read_only: true,
                bundle: Some(agentdeck::app::BundleOpened {
                    file: "agentdeck-bundle-team-a-20261130T100000Z.zip".into(),
                    taken_at: fixtures::now(),
                    notes: Vec::new(),
                }),
                ..AppOptions::default()
            },
            fixtures::now(),
        );
        a.update(Msg::Resize(w, 24));
        a.update(Msg::Status(ClusterStatus {
            role: AppRole::ReadOnly,
            watch: WatchState::Synced,
            ..Default::default()
        }));
        a.update(Msg::Snapshot(Arc::new(snapshot(40))));
        let screen = text(&a);
        let header = screen.lines().next().expect("header");
        // Whole where it fits, else shortened in the middle.
        let file = if w == 160 {
            "bundle agentdeck-bundle-team-a-20261130T100000Z.zip"
        } else {
            "bundle agentdeck-bundle-t…-20261130T100000Z.zip"
        };
        assert!(header.contains(file), "{w}: {header}");
        assert!(header.contains("watch synced"), "{w}: {header}");
        assert!(
            !header.contains("api "),
            "{w}: the zip has no latency: {header}"
        );
        if w == 160 {
            let taken = fixtures::now().strftime("%Y-%m-%d %H:%M:%SZ").to_string();
            assert!(header.contains(&format!("taken {taken}")), "{header}");
            assert!(header.contains("ctx prod-eu"), "{header}");
        }
        assert!(header.chars().count() <= usize::from(w), "{header}");
    }
}

#[test]
fn the_header_keeps_the_watch_state_at_80_columns() {
    let long_ctx = "arn:aws:eks:eu-west-1:123456789012:cluster/prod-platform";
    let states = [
        ("synced", WatchState::Synced, "watch synced"),
        (
            "failing",
            WatchState::Failing(
                "watch agenttasks: 500 Internal Server Error, retrying in 8s".into(),
            ),
            "watch failing: watch agenttasks",
        ),
        (
            "resyncing",
            WatchState::Resyncing("agentpools".into()),
            "watch resyncing: agentpools",
        ),
    ];
    for ctx in ["prod-eu", long_ctx] {
        for (name, state, want) in &states {
            let mut a = app_on(80, 24, snapshot(40), ctx);
            a.update(Msg::Status(status(state.clone())));
            let screen = text(&a);
            let header = screen.lines().next().expect("header");
            assert!(header.contains(want), "{ctx} {name}: {header}");
            assert!(header.chars().count() <= 80, "{header}");
            if ctx == long_ctx {
                insta::assert_snapshot!(format!("layout_header_{name}_80x24"), header);
            }
        }
    }
}

#[test]
fn a_debug_pod_toast_wraps_and_its_kubectl_line_is_whole() {
    let pod = "iac-agent-platform-7d9f5c8b4-9lz6q-debug-x2k8p";
    let command = format!("kubectl exec -it -n ops {pod} -c debugger -- sh");
    for (w, h) in SIZES {
        let mut a = app(w, h);
        a.update(Msg::DebugPodCreated(Ok(format!(
            "debug pod {pod}, deleted at 10:30:00Z; shell: {command}"
        ))));
        let screen = text(&a);
        let bottom: Vec<&str> = screen.lines().rev().take(4).collect();
        let joined: String = bottom
            .iter()
            .rev()
            .map(|l| {
                l.trim_start_matches(['│', ' '])
                    .trim_end_matches(['│', ' '])
            })
            .collect::<Vec<_>>()
            .join(" ");
        assert!(joined.contains(&command), "{w}x{h}:\n{screen}");
        insta::assert_snapshot!(format!("layout_debug_pod_toast_{w}x{h}"), screen);
    }
    // A short toast stays on the footer's line.
    let mut a = app(80, 24);
    a.update(Msg::BundleWritten(Ok("/tmp/b.zip".into())));
    let screen = text(&a);
    let footer = screen.lines().last().expect("footer");
    assert!(footer.ends_with("bundle written: /tmp/b.zip"), "{footer}");
}

/// A snapshot whose tasks are all Succeeded, created `ages[i]` seconds
/// before `now`, named `age-<i>` so a row tells which it is.
fn aged_tasks(ages: &[i64]) -> Snapshot {
    let mut snap = snapshot(ages.len());
    let now = fixtures::now();
    for (i, (row, age)) in snap.tasks.iter_mut().zip(ages).enumerate() {
        let t = Arc::make_mut(row);
        t.name = format!("age-{i:02}");
        t.name_lc = None;
        t.phase = TaskPhase::Succeeded;
        t.created = Some(now - SignedDuration::from_secs(*age));
        t.started = None;
        t.finished = None;
        t.waited = None;
    }
    snap
}

fn expected_age(s: i64) -> String {
    ui::duration(s)
}

/// Ages from 2 seconds to 100 days, each unit's edges and some between.
fn ages() -> Vec<i64> {
    let mut v = vec![
        2, 9, 10, 59, 60, 61, 599, 600, 601, 1068, 3599, 3600, 3601, 35_999, 36_000, 86_399,
        86_400, 863_999, 864_000, 8_640_000,
    ];
    let mut x: i64 = 12_345;
    while v.len() < 40 {
        x = (x * 1_103_515_245 + 12_345) % 8_640_000;
        v.push(x.max(2));
    }
    v
}

#[test]
fn no_age_is_ever_cut_at_any_width() {
    let ages = ages();
    let mut shown_at = Vec::new();
    for w in 60..=200u16 {
        let mut a = app_on(w, 50, aged_tasks(&ages), "prod-eu");
        keys(&mut a, "3");
        let screen = text(&a);
        let lines: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
        let header = screen
            .lines()
            .position(|l| l.starts_with("│NAME"))
            .expect("the column titles");
        let title: String = lines[header].iter().collect();
        // AGE is right-aligned: its cells end where its title ends.
        let Some(at) = title
            .match_indices(" AGE")
            .find(|(b, _)| matches!(title[b + 4..].chars().next(), Some(' ' | '│')))
            .map(|(b, _)| title[..b].chars().count() + 4)
        else {
            continue;
        };
        shown_at.push(w);
        let mut rows = 0;
        for line in &lines[header + 1..] {
            let s: String = line.iter().collect();
            let Some(i) = s.find("age-") else { continue };
            let n: usize = s[i + 4..i + 6].parse().expect("row number");
            let mut start = at;
            while start > 0 && line[start - 1] != ' ' {
                start -= 1;
            }
            let cell: String = line[start..at].iter().collect();
            let after = line.get(at).copied().unwrap_or(' ');
            assert!(
                after == ' ' || after == '│',
                "{w}: the age of {s} runs on: {after:?}"
            );
            assert_eq!(cell, expected_age(ages[n]), "width {w}, row {s}\n{screen}");
            rows += 1;
        }
        assert_eq!(rows, ages.len(), "width {w}: every task on screen");
    }
    assert!(
        (80..=200).all(|w| shown_at.contains(&w)),
        "AGE shown from 80 columns: {shown_at:?}"
    );
}

#[test]
fn ages_of_ten_minutes_and_more_keep_their_first_digit_at_80x24() {
    // 17m48s, 10h05m, 99d: the cut the issue saw was `7m48s`.
    let ages = [1068, 36_300, 8_553_600, 5];
    let mut a = app_on(80, 24, aged_tasks(&ages), "prod-eu");
    keys(&mut a, "3");
    let screen = text(&a);
    for want in ["17m48s", "10h05m", "99d", "5s"] {
        assert!(screen.contains(&format!(" {want} ")), "{want}:\n{screen}");
    }
    insta::assert_snapshot!("layout_ages_whole_80x24", screen);
}

#[test]
fn agents_of_one_replica_set_stay_apart_at_80x24() {
    let mut snap = snapshot(40);
    let names = [
        "iac-agent-platform-7d9f5c8b4-9lz6q",
        "iac-agent-platform-7d9f5c8b4-x2k8p",
        "iac-agent-platform-7d9f5c8b4-mm4vt",
    ];
    let mut n = 0;
    for row in snap.agents.iter_mut() {
        if row.pool == "platform" && n < names.len() {
            let r = Arc::make_mut(row);
            r.name = names[n].into();
            r.name_lc = None;
            n += 1;
        }
    }
    assert_eq!(n, names.len());
    let mut a = app_on(80, 24, snap, "prod-eu");
    keys(&mut a, "2");
    let screen = text(&a);
    for suffix in ["-9lz6q", "-x2k8p", "-mm4vt"] {
        let row = screen
            .lines()
            .find(|l| l.contains(suffix))
            .unwrap_or_else(|| panic!("{suffix} on screen:\n{screen}"));
        assert!(row.contains("iac-agent-"), "{row}");
    }
    insta::assert_snapshot!("layout_agent_names_80x24", screen);
}

#[test]
fn the_count_of_marks_stays_in_the_title_when_a_long_filter_and_a_sort_do_not_fit() {
    for w in [60u16, 80, 100] {
        let mut a = app(w, 24);
        keys(&mut a, "3");
        keys(
            &mut a,
            "/plan-0000|plan-0001|plan-0002|plan-0003|plan-0004\n",
        );
        keys(&mut a, "  N");
        let screen = text(&a);
        let title = screen
            .lines()
            .find(|l| l.contains("Tasks ["))
            .unwrap_or_else(|| panic!("a title at {w}: {screen}"));
        assert!(title.contains("2 marked"), "at {w}: {title}");
    }
}

/// An app fed [`fixtures::an_hour`]: platform's queue rising and
/// draining, its replicas following, scaled up twice and down once.
fn app_with_an_hour(w: u16, h: u16) -> App {
    let mut app = App::new(
        AppOptions {
            context: "prod-eu".into(),
            namespace: fixtures::NS.into(),
            ..AppOptions::default()
        },
        fixtures::now(),
    );
    app.update(Msg::Resize(w, h));
    app.update(Msg::Status(status(WatchState::Synced)));
    for snap in fixtures::an_hour(&snapshot(40)) {
        app.update(Msg::Snapshot(Arc::new(snap)));
    }
    app
}

#[test]
fn the_pools_table_draws_the_queue_of_the_last_hour_where_it_fits() {
    for (w, h) in SIZES {
        let a = app_with_an_hour(w, h);
        let screen = text(&a);
        insta::assert_snapshot!(format!("layout_pools_history_{w}x{h}"), screen);
        let platform = screen
            .lines()
            .find(|l| l.contains("platform"))
            .expect("platform's row");
        if w >= 160 {
            assert!(screen.contains("QUEUE 1h"), "{screen}");
            // Empty for 20 minutes, rising, draining: 7½ minutes a bar.
            assert!(platform.contains("▁▁▂▅▇█▆▁"), "{platform}");
        } else {
            assert!(
                !screen.contains("QUEUE 1h"),
                "the first column to go:\n{screen}"
            );
        }
    }
}

#[test]
fn the_pool_history_view_draws_the_hour_on_one_axis_with_the_decisions() {
    for (w, h) in SIZES {
        let mut a = app_with_an_hour(w, h);
        keys(&mut a, "/platform\ni");
        let screen = text(&a);
        insta::assert_snapshot!(format!("layout_pool_history_{w}x{h}"), screen);
        assert!(screen.contains("Pool platform: the last hour"), "{screen}");
        assert!(
            screen.contains("-60m") && screen.contains("now"),
            "{screen}"
        );
        for mark in ["▲", "▼"] {
            let axis = screen
                .lines()
                .find(|l| l.contains('└'))
                .expect("the time axis");
            assert!(axis.contains(mark), "{mark} on the axis: {axis}");
        }
        assert!(
            screen.contains("ScaledDown") && screen.contains("ScaledUp"),
            "{screen}"
        );
        code(&mut a, KeyCode::Esc);
        assert!(text(&a).contains("Pools ["), "esc goes back");
    }
}

#[test]
fn with_no_color_the_pool_history_reads_the_same_in_characters() {
    let mut a = app_with_an_hour(80, 24);
    keys(&mut a, "/platform\ni");
    let mut t = Terminal::new(TestBackend::new(80, 24)).expect("test terminal");
    let plain = Theme::load("default", true).expect("the default theme");
    t.draw(|f| ui::draw(f, &a, &plain)).expect("drawn");
    let buf = t.backend().buffer();
    let mut screen = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            let cell = &buf[(x, y)];
            assert_eq!(
                (cell.fg, cell.bg),
                (ratatui::style::Color::Reset, ratatui::style::Color::Reset),
                "no colour at {x},{y}"
            );
            line.push_str(cell.symbol());
        }
        screen.push_str(line.trim_end());
        screen.push('\n');
    }
    // What colour would tell is in the characters: the decisions' marks,
    // the replicas desired but not ready, the bars.
    assert_eq!(screen, text(&a), "the same characters as in colour");
    for c in ["▲", "▼", "░", "█", "▁"] {
        assert!(screen.contains(c), "{c}:\n{screen}");
    }
}

/// [`app_with_an_hour`] with a capacity window on platform: open now, and
/// its opening an Event marked beside the first scale-up.
fn app_with_a_capacity_window(w: u16, h: u16) -> App {
    let mut app = App::new(
        AppOptions {
            context: "prod-eu".into(),
            namespace: fixtures::NS.into(),
            ..AppOptions::default()
        },
        fixtures::now(),
    );
    app.update(Msg::Resize(w, h));
    app.update(Msg::Status(status(WatchState::Synced)));
    for mut snap in fixtures::an_hour(&snapshot(40)) {
        snap.pools = snap
            .pools
            .iter()
            .map(|p| {
                if p.name != "platform" {
                    return p.clone();
                }
                Arc::new(rows::PoolRow {
                    capacity: Some("office-hours: min 4 until 18:00, then 0".into()),
                    ..(**p).clone()
                })
            })
            .collect();
        let first_up = snap
            .events
            .iter()
            .find(|e| e.object == "agentpool/platform" && e.reason == "ScaledUp")
            .cloned();
        if let Some(up) = first_up {
            snap.events.push(Arc::new(rows::EventRow {
                key: format!("{}-window", up.key),
                reason: "CapacityWindowOpened".into(),
                message:
                    "capacity window office-hours opened; office-hours: min 4 until 18:00, then 0"
                        .into(),
                ..(*up).clone()
            }));
        }
        app.update(Msg::Snapshot(Arc::new(snap)));
    }
    app
}

#[test]
fn a_pool_with_a_capacity_window_shows_it_and_marks_the_opening_on_its_hour() {
    for (w, h) in SIZES {
        let mut a = app_with_a_capacity_window(w, h);
        keys(&mut a, "/platform\ni");
        let screen = text(&a);
        assert!(
            screen.contains(" capacity office-hours: min 4 until 18:00, then 0"),
            "{screen}"
        );
        let axis = screen
            .lines()
            .find(|l| l.contains('└'))
            .expect("the time axis");
        assert!(axis.contains('◇'), "the opening on the axis: {axis}");
        assert!(screen.contains("CapacityWindowOpe"), "{screen}");
        if w >= 160 {
            assert!(screen.contains("◇ capacity window"), "{screen}");
        }
    }
    // The pools table has the column where the width allows it.
    let a = app_with_a_capacity_window(250, 30);
    let screen = text(&a);
    assert!(screen.contains("CAPACITY"), "{screen}");
    let platform = screen
        .lines()
        .find(|l| l.contains("platform"))
        .expect("platform's row");
    assert!(platform.contains("office-hours: min 4"), "{platform}");
}

#[test]
fn while_the_first_list_streams_in_the_tab_counts_what_is_here_of_what_will_be() {
    use agentdeck::cluster::watches::ListProgress;
    let mut a = app_on(160, 48, snapshot(40), "prod-eu");
    let listing = |listed, expected| ClusterStatus {
        listing: vec![("AgentTask".into(), ListProgress { listed, expected })],
        ..status(WatchState::Syncing)
    };
    a.update(Msg::Status(listing(40, Some(100_000))));
    let screen = text(&a);
    let tabs = screen.lines().nth(1).expect("tabs");
    assert!(tabs.contains("3:tasks 40/100000…"), "{tabs}");
    assert!(tabs.contains("1:pools 3 "), "pools listed whole: {tabs}");
    assert!(
        screen.contains("Pools [3/3]"),
        "the rows there are are shown: {screen}"
    );
    // No total said (a list with a selector): the count alone.
    a.update(Msg::Status(listing(40, None)));
    let tabs = text(&a).lines().nth(1).expect("tabs").to_owned();
    assert!(tabs.contains("3:tasks 40 "), "{tabs}");
    // Listed: the count alone.
    a.update(Msg::Status(status(WatchState::Synced)));
    let tabs = text(&a).lines().nth(1).expect("tabs").to_owned();
    assert!(
        tabs.contains("3:tasks 40 ") && !tabs.contains('…'),
        "{tabs}"
    );
}

#[test]
fn the_events_tab_counts_them_once_they_are_watched() {
    let mut a = app_on(160, 48, snapshot(40), "prod-eu");
    a.update(Msg::Status(status(WatchState::Synced)));
    let tabs = text(&a).lines().nth(1).expect("tabs").to_owned();
    // Not watched until a view reads them: no count (not a `0`).
    assert!(tabs.contains("4:events  "), "{tabs}");
    assert!(tabs.contains("3:tasks 40 "), "{tabs}");
    keys(&mut a, "4");
    let tabs = text(&a).lines().nth(1).expect("tabs").to_owned();
    let n = a.snapshot.events.len();
    assert!(tabs.contains(&format!("4:events {n} ")), "{tabs}");
}
