//! Key sequences and the commands they emit.

use super::*;
use crate::health::FreshnessThresholds;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn thresholds() -> FreshnessThresholds {
    FreshnessThresholds {
        stale_after: Duration::from_secs(20),
        offline_after: Duration::from_secs(60),
    }
}

fn app_with(opts: AppOptions, tasks: usize) -> App {
    let now = fixtures::now();
    let mut app = App::new(opts, now);
    app.update(Msg::Resize(100, 30));
    let snap = rows::build(&fixtures::sources(now, tasks), now, &thresholds());
    app.update(Msg::Snapshot(Arc::new(snap)));
    app
}

fn app() -> App {
    app_with(AppOptions::default(), 40)
}

fn key(c: char) -> Msg {
    let m = if c.is_ascii_uppercase() {
        KeyModifiers::SHIFT
    } else {
        KeyModifiers::NONE
    };
    Msg::Key(KeyEvent::new(KeyCode::Char(c), m))
}

fn code(c: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(c, KeyModifiers::NONE))
}

fn ctrl(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL))
}

/// Sends each message, collecting every command emitted.
fn send(app: &mut App, msgs: impl IntoIterator<Item = Msg>) -> Vec<Command> {
    msgs.into_iter().flat_map(|m| app.update(m)).collect()
}

fn typed(s: &str) -> Vec<Msg> {
    s.chars().map(key).collect()
}

fn visible_names(app: &App, kind: ViewKind) -> Vec<String> {
    let s = &app.snapshot;
    app.table(kind)
        .visible
        .iter()
        .map(|&i| match kind {
            ViewKind::Pools => s.pools[i as usize].name.clone(),
            ViewKind::Agents => s.agents[i as usize].name.clone(),
            ViewKind::Tasks => s.tasks[i as usize].name.clone(),
            ViewKind::Events => s.events[i as usize].object.clone(),
        })
        .collect()
}

#[test]
fn q_and_ctrl_c_quit_from_anywhere() {
    let mut a = app();
    assert_eq!(send(&mut a, [key('q')]), vec![Command::Quit]);
    let mut a = app();
    // Even while typing a filter or with a dialog open.
    send(&mut a, [key('/'), key('x')]);
    assert_eq!(send(&mut a, [ctrl('c')]), vec![Command::Quit]);
    let mut a = app();
    assert_eq!(send(&mut a, typed(":q")).len(), 0);
    assert_eq!(send(&mut a, [code(KeyCode::Enter)]), vec![Command::Quit]);
}

#[test]
fn the_command_bar_switches_views_and_completes() {
    let mut a = app();
    send(&mut a, typed(":ta"));
    send(&mut a, [code(KeyCode::Tab)]);
    match &a.prompt {
        Some(Prompt::Command(i)) => assert_eq!(i.value(), "tasks"),
        other => panic!("command prompt expected, got {other:?}"),
    }
    send(&mut a, [code(KeyCode::Enter)]);
    assert_eq!(a.table_kind(), Some((ViewKind::Tasks, None)));
    send(&mut a, typed(":tasks batch"));
    send(&mut a, [code(KeyCode::Enter)]);
    assert_eq!(a.table_kind(), Some((ViewKind::Tasks, Some("batch"))));
    assert!(visible_names(&a, ViewKind::Tasks).iter().all(|n| {
        a.snapshot
            .tasks
            .iter()
            .any(|t| &t.name == n && t.pool == "batch")
    }));
    // Up recalls the last command.
    send(&mut a, [key(':'), code(KeyCode::Up)]);
    match &a.prompt {
        Some(Prompt::Command(i)) => assert_eq!(i.value(), "tasks batch"),
        other => panic!("command prompt expected, got {other:?}"),
    }
    send(&mut a, [code(KeyCode::Esc)]);
    send(&mut a, typed(":nope"));
    send(&mut a, [code(KeyCode::Enter)]);
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.error && t.text.contains(":pools"))
    );
}

#[test]
fn the_filter_applies_as_it_is_typed_and_esc_clears_it() {
    let mut a = app();
    send(&mut a, [key('3')]);
    let all = visible_names(&a, ViewKind::Tasks).len();
    send(&mut a, typed("/plan-0001"));
    // Applied before Enter, at each keystroke.
    let mut shown = visible_names(&a, ViewKind::Tasks);
    shown.sort();
    assert_eq!(
        shown,
        (10..20).map(|i| format!("plan-{i:05}")).collect::<Vec<_>>()
    );
    send(&mut a, [code(KeyCode::Enter)]);
    assert!(a.prompt.is_none());
    assert_eq!(a.table(ViewKind::Tasks).filter_text, "plan-0001");
    send(&mut a, [code(KeyCode::Esc)]);
    assert_eq!(visible_names(&a, ViewKind::Tasks).len(), all);
    // Inverse, fuzzy and label forms.
    send(&mut a, typed("/!failed|succeeded"));
    assert!(
        a.snapshot
            .tasks
            .iter()
            .filter(|t| visible_names(&a, ViewKind::Tasks).contains(&t.name))
            .all(|t| !matches!(
                t.phase,
                crate::crd::TaskPhase::Failed | crate::crd::TaskPhase::Succeeded
            ))
    );
    send(&mut a, [code(KeyCode::Esc)]);
    send(&mut a, typed("/-l kind=apply"));
    assert_eq!(visible_names(&a, ViewKind::Tasks).len(), all / 2);
    send(&mut a, [code(KeyCode::Esc)]);
    send(&mut a, typed("/-f p39"));
    assert_eq!(visible_names(&a, ViewKind::Tasks), vec!["plan-00039"]);
}

#[test]
fn enter_drills_from_a_pool_to_its_tasks_to_the_logs_and_esc_comes_back() {
    let mut a = app();
    // Pools are sorted by key: batch, legacy, platform.
    send(&mut a, [key('j'), key('j')]);
    send(&mut a, [code(KeyCode::Enter)]);
    assert_eq!(a.table_kind(), Some((ViewKind::Tasks, Some("platform"))));
    let names = visible_names(&a, ViewKind::Tasks);
    assert!(!names.is_empty());
    assert!(names.iter().all(|n| {
        a.snapshot
            .tasks
            .iter()
            .any(|t| &t.name == n && t.pool == "platform")
    }));
    // Tab shows the same pool's agents, and back.
    send(&mut a, [code(KeyCode::Tab)]);
    assert_eq!(a.table_kind(), Some((ViewKind::Agents, Some("platform"))));
    assert_eq!(visible_names(&a, ViewKind::Agents).len(), 3);
    send(&mut a, [code(KeyCode::Tab)]);
    // A Running task's log is its agent's, narrowed to the task's lines.
    send(&mut a, typed("/running"));
    send(&mut a, [code(KeyCode::Enter)]);
    let running = visible_names(&a, ViewKind::Tasks);
    let cmds = send(&mut a, [code(KeyCode::Enter)]);
    let task = &running[0];
    let t = a
        .snapshot
        .tasks
        .iter()
        .find(|t| &t.name == task)
        .expect("task");
    assert_eq!(
        cmds,
        vec![Command::StreamLogs {
            id: 1,
            source: rows::LogSource {
                namespace: fixtures::NS.into(),
                pod: t.agent.clone(),
                container: None,
                prefix: Some(format!("[{task}] ")),
            },
            previous: false,
        }]
    );
    assert!(matches!(a.screen(), Screen::Logs { .. }));
    // Lines of this stream arrive; others are ignored.
    send(
        &mut a,
        [
            Msg::LogLines {
                id: 1,
                lines: vec![
                    format!("2026-11-24T09:59:59Z [{task}] Plan: 1 to add"),
                    "2026-11-24T09:59:59Z [other] not this task".into(),
                ],
            },
            Msg::LogLines {
                id: 99,
                lines: vec![format!("2026-11-24T09:59:59Z [{task}] stale stream")],
            },
        ],
    );
    let l = a.logs.as_ref().expect("logs open");
    assert_eq!(l.buffer.len(), 1);
    assert_eq!(
        l.buffer.get(0).map(|l| l.text.as_str()),
        Some("Plan: 1 to add")
    );
    // Esc stops the stream and returns to the tasks.
    assert_eq!(send(&mut a, [code(KeyCode::Esc)]), vec![Command::StopLogs]);
    assert_eq!(a.table_kind(), Some((ViewKind::Tasks, Some("platform"))));
    // `[` and `]` walk the history; going forward into logs streams anew.
    send(&mut a, [key('[')]);
    assert_eq!(a.table_kind(), Some((ViewKind::Agents, Some("platform"))));
    send(&mut a, [key(']')]);
    let cmds = send(&mut a, [key(']')]);
    assert!(
        matches!(cmds.as_slice(), [Command::StreamLogs { id: 2, .. }]),
        "{cmds:?}"
    );
}

#[test]
fn a_pending_task_has_no_log_yet_and_says_so() {
    let mut a = app();
    send(&mut a, [key('3')]);
    send(&mut a, typed("/pending"));
    send(&mut a, [code(KeyCode::Enter)]);
    let cmds = send(&mut a, [code(KeyCode::Enter)]);
    assert!(cmds.is_empty());
    assert!(a.toast.as_ref().is_some_and(|t| t.text.contains("Pending")));
    // The toast goes once its time is up.
    let later = a
        .now
        .checked_add(TOAST_FOR + Duration::from_secs(1))
        .expect("time");
    send(&mut a, [Msg::Tick(later)]);
    assert!(a.toast.is_none());
}

#[test]
fn y_loads_the_yaml_of_the_selected_object() {
    let mut a = app();
    let cmds = send(&mut a, [key('y')]);
    assert_eq!(
        cmds,
        vec![Command::LoadYaml(ObjectKey {
            kind: "AgentPool",
            namespace: fixtures::NS.into(),
            name: "batch".into(),
        })]
    );
    send(
        &mut a,
        [Msg::Yaml {
            object: ObjectKey {
                kind: "AgentPool",
                namespace: fixtures::NS.into(),
                name: "batch".into(),
            },
            text: "kind: AgentPool\nmetadata:\n  name: batch\n".into(),
        }],
    );
    assert_eq!(
        a.yaml.lines,
        vec!["kind: AgentPool", "metadata:", "  name: batch"]
    );
    send(&mut a, [code(KeyCode::Esc)]);
    assert_eq!(a.table_kind(), Some((ViewKind::Pools, None)));
}

#[test]
fn shift_letters_sort_and_again_reverse() {
    let mut a = app();
    send(&mut a, [key('3'), key('N')]);
    let names = visible_names(&a, ViewKind::Tasks);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    send(&mut a, [key('N')]);
    sorted.reverse();
    assert_eq!(visible_names(&a, ViewKind::Tasks), sorted);
    send(&mut a, [key('P')]);
    let pools: Vec<String> = visible_names(&a, ViewKind::Tasks)
        .iter()
        .map(|n| {
            a.snapshot
                .tasks
                .iter()
                .find(|t| &t.name == n)
                .expect("row")
                .pool
                .clone()
        })
        .collect();
    let mut sorted = pools.clone();
    sorted.sort();
    assert_eq!(pools, sorted);
}

#[test]
fn the_selection_follows_its_row_across_snapshots() {
    let mut a = app();
    send(&mut a, [key('3'), key('j'), key('j'), key('j')]);
    let picked = visible_names(&a, ViewKind::Tasks)[3].clone();
    // A newer snapshot with more tasks puts new rows on top.
    let now = fixtures::now();
    let snap = rows::build(&fixtures::sources(now, 45), now, &thresholds());
    send(&mut a, [Msg::Snapshot(Arc::new(snap))]);
    let t = a.table(ViewKind::Tasks);
    assert_eq!(visible_names(&a, ViewKind::Tasks)[t.selected], picked);
}

#[test]
fn space_marks_rows_and_cancel_asks_before_acting_on_them() {
    let mut a = app();
    send(&mut a, [key('3')]);
    send(&mut a, typed("/running"));
    send(&mut a, [code(KeyCode::Enter), key(' '), key(' ')]);
    assert_eq!(a.table(ViewKind::Tasks).marks.len(), 2);
    let marked: Vec<String> = visible_names(&a, ViewKind::Tasks)[..2].to_vec();
    // ctrl-k asks first; nothing is done until confirmed, only the
    // API's dry-run preview is asked for.
    let mut tasks = marked.clone();
    tasks.sort();
    let request = ActionRequest::CancelTasks {
        namespace: fixtures::NS.into(),
        tasks: tasks.clone(),
    };
    assert_eq!(
        send(&mut a, [ctrl('k')]),
        vec![Command::PreviewAction(request.clone())]
    );
    let d = a.dialog.as_ref().expect("a confirmation");
    assert!(d.title.contains("Cancel 2"), "{}", d.title);
    assert!(
        d.body.iter().any(|l| l.contains("2 running")),
        "{:?}",
        d.body
    );
    assert_eq!(d.preview, PreviewState::Loading);
    // A preview of another request (an older dialog) is ignored.
    send(
        &mut a,
        [Msg::ActionPreview {
            request: ActionRequest::CancelTasks {
                namespace: fixtures::NS.into(),
                tasks: vec!["other".into()],
            },
            result: Ok(vec!["wrong".into()]),
        }],
    );
    assert_eq!(
        a.dialog.as_ref().map(|d| d.preview.clone()),
        Some(PreviewState::Loading)
    );
    send(
        &mut a,
        [Msg::ActionPreview {
            request: request.clone(),
            result: Ok(vec!["2 running tasks are stopped".into()]),
        }],
    );
    assert_eq!(
        a.dialog.as_ref().map(|d| d.preview.clone()),
        Some(PreviewState::Lines(vec![
            "2 running tasks are stopped".into()
        ]))
    );
    let cmds = send(&mut a, [key('y')]);
    assert_eq!(
        cmds,
        vec![Command::Action(ActionRequest::CancelTasks {
            namespace: fixtures::NS.into(),
            tasks,
        })]
    );
    assert!(a.dialog.is_none());
    // The outcome comes back as a toast.
    send(
        &mut a,
        [Msg::ActionDone {
            request: ActionRequest::CancelTasks {
                namespace: fixtures::NS.into(),
                tasks: marked,
            },
            result: Err("forbidden".into()),
        }],
    );
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.error && t.text.contains("forbidden"))
    );
}

#[test]
fn scale_takes_bounds_in_its_dialog_and_refuses_bad_ones() {
    let mut a = app();
    send(&mut a, [key('j'), key('j'), key('s')]);
    assert!(
        a.dialog
            .as_ref()
            .is_some_and(|d| d.title == "Scale pool platform")
    );
    // Clear the suggested "1-6" and type new bounds.
    send(&mut a, [ctrl('u')]);
    for _ in 0..3 {
        send(&mut a, [code(KeyCode::Backspace)]);
    }
    send(&mut a, typed("5-2"));
    assert!(send(&mut a, [code(KeyCode::Enter)]).is_empty());
    assert!(
        a.dialog
            .as_ref()
            .and_then(|d| d.error.as_ref())
            .is_some_and(|e| e.contains("above max"))
    );
    for _ in 0..3 {
        send(&mut a, [code(KeyCode::Backspace)]);
    }
    send(&mut a, typed("2-8"));
    assert_eq!(
        send(&mut a, [code(KeyCode::Enter)]),
        vec![Command::Action(ActionRequest::ScalePool {
            namespace: fixtures::NS.into(),
            pool: "platform".into(),
            min: 2,
            max: 8,
        })]
    );
    // Scale (typed bounds) asks no preview; drain does. Esc cancels
    // without a command.
    let cmds = send(&mut a, [key('d')]);
    assert!(
        matches!(cmds.as_slice(), [Command::PreviewAction(ActionRequest::DrainPool { pool, undo: false, .. })] if pool == "platform"),
        "{cmds:?}"
    );
    assert!(a.dialog.is_some());
    assert!(send(&mut a, [code(KeyCode::Esc)]).is_empty());
    assert!(a.dialog.is_none());
}

#[test]
fn read_only_binds_no_action_that_writes() {
    let mut a = app_with(
        AppOptions {
            read_only: true,
            ..AppOptions::default()
        },
        40,
    );
    for m in [key('s'), key('d'), ctrl('g'), ctrl('k')] {
        assert!(send(&mut a, [m]).is_empty());
        assert!(a.dialog.is_none());
    }
    // A status from the worker cannot make a read-only console leader.
    send(
        &mut a,
        [Msg::Status(ClusterStatus {
            role: Role::Leader,
            watch: WatchState::Synced,
            latency: None,
        })],
    );
    assert_eq!(a.status.role, Role::ReadOnly);
}

#[test]
fn logs_keys_toggle_follow_wrap_timestamps_and_search_finds_lines() {
    let mut a = app();
    send(&mut a, [key('2'), code(KeyCode::Enter)]);
    assert!(matches!(a.screen(), Screen::Logs { .. }));
    let lines = (0..100)
        .map(|i| format!("2026-11-24T09:00:00Z line {i}"))
        .collect();
    send(&mut a, [Msg::LogLines { id: 1, lines }]);
    send(&mut a, [key('w'), key('t'), key('f')]);
    let l = a.logs.as_ref().expect("logs");
    assert!(l.wrap && l.timestamps && !l.follow);
    send(&mut a, typed("/line 4"));
    send(&mut a, [code(KeyCode::Enter)]);
    let first = a.logs.as_ref().and_then(|l| l.matched).expect("a match");
    send(&mut a, [key('n')]);
    let second = a.logs.as_ref().and_then(|l| l.matched).expect("a match");
    assert_ne!(first, second);
    assert!(a.logs.as_ref().is_some_and(|l| {
        l.buffer
            .get(second)
            .is_some_and(|x| x.text.contains("line 4"))
    }));
    // Esc first clears the search, then leaves.
    assert!(send(&mut a, [code(KeyCode::Esc)]).is_empty());
    assert_eq!(send(&mut a, [code(KeyCode::Esc)]), vec![Command::StopLogs]);
}

#[test]
fn help_is_built_from_the_live_keymap() {
    let keymap = keymap::Keymap::with_overrides(&std::collections::BTreeMap::from([(
        "help".to_owned(),
        "f1".to_owned(),
    )]))
    .expect("keymap");
    let mut a = app_with(
        AppOptions {
            keymap,
            ..AppOptions::default()
        },
        5,
    );
    send(&mut a, [key('?')]);
    assert!(!a.help);
    send(&mut a, [code(KeyCode::F(1))]);
    assert!(a.help);
    assert!(
        a.opts
            .keymap
            .help(false)
            .iter()
            .any(|(_, k, w)| k == "f1" && *w == "this help")
    );
    // Any key closes it.
    send(&mut a, [key('x')]);
    assert!(!a.help);
}

#[test]
fn help_scrolls_at_80x24_to_its_last_line_and_any_other_key_closes_it() {
    let mut a = app();
    send(&mut a, [Msg::Resize(80, 24)]);
    let total = help::lines(&a.opts.keymap, false).len();
    let (columns, rows) = help::layout(a.size);
    assert_eq!(columns, 1, "one column of full descriptions at 80 wide");
    assert!(total > rows, "{total} lines do not fit in {rows}");
    send(&mut a, [key('?')]);
    assert!(a.help);
    send(&mut a, [key('j'), key('j'), code(KeyCode::Down)]);
    assert_eq!(a.help_top, 3);
    send(&mut a, [key('k')]);
    assert_eq!(a.help_top, 2);
    // The end stops at the last screenful, however far one goes.
    send(&mut a, [key('G'), key('j'), code(KeyCode::PageDown)]);
    assert_eq!(a.help_top, total - rows);
    assert!(a.help, "moving keys do not close it");
    send(&mut a, [key('g')]);
    assert_eq!(a.help_top, 0);
    // Any other key closes it; the next opening starts at the top.
    send(&mut a, [key('G'), key('x')]);
    assert!(!a.help);
    assert_eq!(a.table_kind().map(|(k, _)| k), Some(ViewKind::Pools));
    send(&mut a, [key('?')]);
    assert_eq!(a.help_top, 0);
}

#[test]
fn ctrl_w_toggles_wide_columns_in_tables() {
    let mut a = app();
    assert!(!a.wide);
    assert_eq!(send(&mut a, [key('3'), ctrl('w')]), Vec::new());
    assert!(a.wide);
    send(&mut a, [ctrl('w')]);
    assert!(!a.wide);
}
