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
                context: String::new(),
                namespace: fixtures::NS.into(),
                pod: t.agent.clone(),
                container: None,
                prefix: Some(format!("[{task}] ")),
                task: Some(task.to_string()),
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
            context: String::new(),
            kind: "AgentPool",
            namespace: fixtures::NS.into(),
            name: "batch".into(),
        })]
    );
    send(
        &mut a,
        [Msg::Yaml {
            object: ObjectKey {
                context: String::new(),
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
    let scale = ActionRequest::ScalePool {
        namespace: fixtures::NS.into(),
        pool: "platform".into(),
        min: 2,
        max: 8,
    };
    // Enter reads the bounds and asks for the API's dry run; the dialog
    // stays until a second yes.
    assert_eq!(
        send(&mut a, [code(KeyCode::Enter)]),
        vec![Command::PreviewAction(scale.clone())]
    );
    let d = a.dialog.as_ref().expect("still asking");
    assert_eq!(d.preview, PreviewState::Loading);
    assert!(d.input.is_none());
    assert!(
        d.body
            .iter()
            .any(|l| l.contains("scale pool platform to 2–8")),
        "{:?}",
        d.body
    );
    send(
        &mut a,
        [Msg::ActionPreview {
            request: scale.clone(),
            result: Ok(vec!["AgentPool/platform: spec.maxReplicas: 6 → 8".into()]),
        }],
    );
    assert!(matches!(
        a.dialog.as_ref().map(|d| &d.preview),
        Some(PreviewState::Lines(l)) if l[0].contains("6 → 8")
    ));
    assert_eq!(send(&mut a, [key('y')]), vec![Command::Action(scale)]);
    // Drain previews at once. Esc cancels without a command.
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
fn on_a_bundle_every_action_key_says_it_is_read_only() {
    let taken = fixtures::now();
    let mut a = app_with(
        AppOptions {
            read_only: true,
            bundle: Some(BundleOpened {
                file: "B.zip".into(),
                taken_at: taken,
                notes: Vec::new(),
            }),
            ..AppOptions::default()
        },
        40,
    );
    for m in [
        key('s'),
        key('d'),
        ctrl('g'),
        ctrl('k'),
        key('r'),
        key('D'),
        key('b'),
    ] {
        let text = format!("{m:?}");
        a.toast = None;
        assert!(send(&mut a, [m]).is_empty(), "{text}");
        assert!(a.dialog.is_none(), "{text}");
        let toast = a.toast.as_ref().map(|t| t.text.clone()).unwrap_or_default();
        assert!(
            toast.starts_with("read-only: B.zip is a support bundle taken"),
            "{text}: {toast}"
        );
    }
    for line in [":bundle", ":shell agent-0"] {
        a.toast = None;
        send(&mut a, typed(line));
        assert!(send(&mut a, [code(KeyCode::Enter)]).is_empty(), "{line}");
        let toast = a.toast.as_ref().map(|t| t.text.clone()).unwrap_or_default();
        assert!(toast.contains("is a support bundle"), "{line}: {toast}");
    }
    // Reading keys still work.
    send(&mut a, [key('3')]);
    assert_eq!(a.table_kind().map(|(k, _)| k), Some(ViewKind::Tasks));
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
    for m in [key('s'), key('d'), ctrl('g'), ctrl('k'), key('r'), key('D')] {
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
            ..Default::default()
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
    // The new action keys are in it; read-only leaves out those that write
    // but keeps the bundle and the audit view, which only read.
    let help = a.opts.keymap.help(false);
    for (keys, what) in [
        ("r", "retry"),
        ("shift-d", "debug pod"),
        ("b", "support bundle"),
        ("5", "audit"),
    ] {
        assert!(
            help.iter().any(|(_, k, w)| k == keys && w.contains(what)),
            "{keys} {what}: {help:?}"
        );
    }
    let ro = a.opts.keymap.help(true);
    assert!(ro.iter().any(|(_, k, _)| k == "b") && ro.iter().any(|(_, k, _)| k == "5"));
    assert!(!ro.iter().any(|(_, k, _)| k == "r" || k == "shift-d"));
}

fn ns_app() -> App {
    app_with(
        AppOptions {
            namespace: fixtures::NS.into(),
            ..AppOptions::default()
        },
        40,
    )
}

/// Types into the open dialog's input, replacing what it held.
fn retype(a: &mut App, text: &str) {
    send(a, [ctrl('u')]);
    for _ in 0..12 {
        send(a, [code(KeyCode::Backspace)]);
    }
    send(a, typed(text));
}

#[test]
fn retry_asks_for_the_marked_failed_tasks_and_skips_the_others() {
    let mut a = app();
    send(&mut a, [key('3')]);
    send(&mut a, typed("/fail|err"));
    send(&mut a, [code(KeyCode::Enter), key(' '), key(' ')]);
    let mut marked: Vec<String> = visible_names(&a, ViewKind::Tasks)[..2].to_vec();
    marked.sort();
    let request = ActionRequest::RetryTasks {
        namespace: fixtures::NS.into(),
        tasks: marked,
    };
    assert_eq!(
        send(&mut a, [key('r')]),
        vec![Command::PreviewAction(request.clone())]
    );
    let d = a.dialog.as_ref().expect("a confirmation");
    assert!(d.title.starts_with("Retry 2"), "{}", d.title);
    assert_eq!(send(&mut a, [key('y')]), vec![Command::Action(request)]);
    // A running task is not retried: nothing is asked, the toast says why.
    send(&mut a, [ctrl('\\'), code(KeyCode::Esc)]);
    send(&mut a, typed("/running"));
    send(&mut a, [code(KeyCode::Enter)]);
    assert!(send(&mut a, [key('r')]).is_empty());
    assert!(a.dialog.is_none());
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.error && t.text.contains("Failed or Errored"))
    );
}

#[test]
fn the_scale_dialog_sets_and_clears_a_hold_after_its_preview() {
    let mut a = app();
    send(&mut a, [key('j'), key('j'), key('s')]);
    retype(&mut a, "=6 30m");
    let hold = ActionRequest::HoldReplicas {
        namespace: fixtures::NS.into(),
        pool: "platform".into(),
        replicas: 6,
        for_secs: Some(1800),
        force: false,
    };
    assert_eq!(
        send(&mut a, [code(KeyCode::Enter)]),
        vec![Command::PreviewAction(hold.clone())]
    );
    assert!(a.dialog.as_ref().is_some_and(|d| {
        d.body
            .iter()
            .any(|l| l.contains("hold pool platform at 6 for 30m"))
    }));
    // `n` in the confirmation step cancels; nothing is sent.
    assert!(send(&mut a, [key('n')]).is_empty());
    assert!(a.dialog.is_none());
    send(&mut a, [key('s')]);
    retype(&mut a, "clear");
    let clear = ActionRequest::ClearHold {
        namespace: fixtures::NS.into(),
        pool: "platform".into(),
    };
    assert_eq!(
        send(&mut a, [code(KeyCode::Enter)]),
        vec![Command::PreviewAction(clear.clone())]
    );
    assert_eq!(
        send(&mut a, [code(KeyCode::Enter)]),
        vec![Command::Action(clear)]
    );
    // A malformed duration is named in the dialog and nothing is asked.
    send(&mut a, [key('s')]);
    retype(&mut a, "=3 soon");
    assert!(send(&mut a, [code(KeyCode::Enter)]).is_empty());
    assert!(
        a.dialog
            .as_ref()
            .and_then(|d| d.error.as_deref())
            .is_some_and(|e| e.contains("\"soon\" is not a duration"))
    );
}

#[test]
fn drain_and_debug_logs_act_on_the_selected_or_marked_agents() {
    let mut a = app();
    send(&mut a, [key('2')]);
    let first = a.snapshot.agents[a.table(ViewKind::Agents).visible[0] as usize].clone();
    assert_eq!(first.component, "agent");
    let drain = |ag: &rows::AgentRow| ActionRequest::DrainAgent {
        namespace: ag.namespace.clone(),
        pool: ag.pool.clone(),
        agent: ag.name.clone(),
        undo: false,
    };
    assert_eq!(
        send(&mut a, [key('d')]),
        vec![Command::PreviewAction(drain(&first))]
    );
    assert!(
        a.dialog
            .as_ref()
            .is_some_and(|d| d.title == format!("Drain agent {}", first.name))
    );
    send(&mut a, [code(KeyCode::Esc)]);
    // Two marked: one request each, previewed and applied together.
    send(&mut a, [key(' '), key(' ')]);
    let second = a.snapshot.agents[a.table(ViewKind::Agents).visible[1] as usize].clone();
    let both = ActionRequest::Bulk(vec![drain(&first), drain(&second)]);
    assert_eq!(
        send(&mut a, [key('d')]),
        vec![Command::PreviewAction(both.clone())]
    );
    assert!(
        a.dialog
            .as_ref()
            .is_some_and(|d| d.title == "Drain 2 agents")
    );
    assert_eq!(send(&mut a, [key('y')]), vec![Command::Action(both)]);
    let cmds = send(&mut a, [ctrl('g')]);
    assert!(
        matches!(cmds.as_slice(), [Command::PreviewAction(ActionRequest::Bulk(parts))]
            if parts.len() == 2 && parts.iter().all(|p| matches!(p,
                ActionRequest::SetDebugLogs { agent: Some(_), on: true, .. }))),
        "{cmds:?}"
    );
    // Scale is for pools; on agents `s` is k9s's shell, into the cursor's agent.
    send(&mut a, [code(KeyCode::Esc)]);
    let cursor = a.snapshot.agents[a.selected_index(ViewKind::Agents).expect("a cursor")].clone();
    let cmds = send(&mut a, [key('s')]);
    assert!(
        matches!(cmds.as_slice(), [Command::Shell(ShellRequest { pod, .. })] if *pod == cursor.name),
        "{cmds:?}"
    );
}

#[test]
fn marked_pools_are_drained_and_held_together() {
    let mut a = app();
    // Mark the first two pools.
    send(&mut a, [key(' '), key(' ')]);
    let names: Vec<String> = visible_names(&a, ViewKind::Pools)[..2].to_vec();
    let cmds = send(&mut a, [key('d')]);
    let Some(Command::PreviewAction(ActionRequest::Bulk(parts))) = cmds.first() else {
        panic!("a bulk preview: {cmds:?}");
    };
    let drained: Vec<&str> = parts
        .iter()
        .map(|p| match p {
            ActionRequest::DrainPool {
                pool, undo: false, ..
            } => pool.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        drained,
        names.iter().map(String::as_str).collect::<Vec<_>>()
    );
    send(&mut a, [code(KeyCode::Esc), key('s')]);
    assert!(
        a.dialog
            .as_ref()
            .is_some_and(|d| d.title == "Scale 2 pools")
    );
    // Within the bounds of both (batch 0–20, legacy 1–1).
    retype(&mut a, "=1");
    let cmds = send(&mut a, [code(KeyCode::Enter)]);
    assert!(
        matches!(cmds.as_slice(), [Command::PreviewAction(ActionRequest::Bulk(parts))]
            if parts.len() == 2 && parts.iter().all(|p| matches!(p,
                ActionRequest::HoldReplicas { replicas: 1, for_secs: None, .. }))),
        "{cmds:?}"
    );
}

#[test]
fn b_takes_a_bundle_with_a_gauge_and_a_toast_with_its_path() {
    let mut a = ns_app();
    send(&mut a, [key('j'), key('j')]);
    let cmds = send(&mut a, [key('b')]);
    assert!(
        matches!(&cmds[..], [Command::TakeBundle { namespace, pool: Some(p), history: Some(h) }]
            if namespace == fixtures::NS && p == "platform" && h["pools"].is_object()),
        "{cmds:?}"
    );
    assert!(
        a.bundle
            .as_ref()
            .is_some_and(|g| g.scope == "pool platform")
    );
    let gauge = BundleGauge {
        scope: "pool platform".into(),
        phase: "collecting".into(),
        files_done: 3,
        files_expected: 12,
        bytes: 10_000,
    };
    send(&mut a, [Msg::BundleProgress(gauge.clone())]);
    assert_eq!(a.bundle, Some(gauge));
    // One at a time.
    assert!(send(&mut a, [key('b')]).is_empty());
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.error && t.text.contains("3/12 files"))
    );
    send(
        &mut a,
        [Msg::BundleWritten(Ok(
            "/tmp/agentdeck-bundle-x.zip (9 files)".into(),
        ))],
    );
    assert!(a.bundle.is_none());
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| !t.error && t.text.contains("/tmp/agentdeck-bundle-x.zip"))
    );
    // It stays long enough to copy the path, then goes.
    let now = a.now;
    send(&mut a, [Msg::Tick(now + Duration::from_secs(10))]);
    assert!(a.toast.is_some());
    send(&mut a, [Msg::Tick(now + Duration::from_secs(21))]);
    assert!(a.toast.is_none());
    // A progress report after the end does not bring the gauge back.
    send(
        &mut a,
        [Msg::BundleProgress(BundleGauge {
            scope: "pool platform".into(),
            phase: "done".into(),
            files_done: 9,
            files_expected: 9,
            bytes: 1,
        })],
    );
    assert!(a.bundle.is_none());
    // `:bundle` is the whole namespace; an unknown pool lists the pools.
    send(&mut a, typed(":bundle"));
    let cmds = send(&mut a, [code(KeyCode::Enter)]);
    assert!(
        matches!(&cmds[..], [Command::TakeBundle { namespace, pool: None, history: Some(_) }]
            if namespace == fixtures::NS),
        "{cmds:?}"
    );
    send(&mut a, [Msg::BundleWritten(Err("deadline".into()))]);
    send(&mut a, typed(":bundle nope"));
    assert!(send(&mut a, [code(KeyCode::Enter)]).is_empty());
    assert!(a.toast.as_ref().is_some_and(|t| t.error
        && t.text.contains("no pool nope")
        && t.text.contains("platform")));
}

#[test]
fn shift_d_makes_a_debug_pod_of_the_selected_agent() {
    let mut a = app();
    assert!(send(&mut a, [key('D')]).is_empty());
    assert!(a.toast.as_ref().is_some_and(|t| t.error));
    send(&mut a, [key('2')]);
    let first = a.snapshot.agents[a.table(ViewKind::Agents).visible[0] as usize].clone();
    // It asks first, saying what it makes and for how long.
    assert!(send(&mut a, [key('D')]).is_empty());
    let d = a.dialog.as_ref().expect("a confirmation");
    assert!(d.title.contains(&first.name), "{}", d.title);
    match &d.preview {
        PreviewState::Lines(l) => assert!(l.join(" ").contains("1h"), "{l:?}"),
        other => panic!("{other:?}"),
    }
    assert!(send(&mut a, [key('n')]).is_empty());
    assert!(a.dialog.is_none());
    send(&mut a, [key('D')]);
    assert_eq!(
        send(&mut a, [key('y')]),
        vec![Command::CreateDebugPod {
            namespace: first.namespace.clone(),
            pod: first.name.clone(),
        }]
    );
    send(
        &mut a,
        [Msg::DebugPodCreated(Ok(
            "debug pod debug-x-1, deleted at 15:00:00Z".into(),
        ))],
    );
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.text.contains("debug-x-1"))
    );
}

fn audit_rows() -> Vec<audit::AuditRow> {
    let rec = |action: &str, outcome: &str, object: &str| crate::ops::audit::AuditRecord {
        time: fixtures::now(),
        user: "alice".into(),
        via: "console".into(),
        context: "kind-a".into(),
        namespace: fixtures::NS.into(),
        action: action.into(),
        request: serde_json::json!({}),
        summary: format!("{action} {object}"),
        objects: Vec::new(),
        unchanged: Vec::new(),
        outcome: outcome.into(),
    };
    audit::rows(&[
        rec("drain", "applied", "pool platform"),
        rec("hold", "failed: forbidden", "pool batch"),
        rec("retry", "applied", "task t1"),
    ])
}

#[test]
fn events_are_asked_for_once_when_a_view_that_reads_them_is_first_opened() {
    let mut a = app();
    assert!(!a.events_watched);
    // Pools, agents, tasks, a task's YAML: no events read.
    for k in ['1', '2', '3', '1'] {
        let out = send(&mut a, [key(k)]);
        assert!(!out.contains(&Command::WatchEvents), "{k}: {out:?}");
    }
    assert!(!a.events_watched);
    assert_eq!(send(&mut a, [key('4')]), vec![Command::WatchEvents]);
    assert!(a.events_watched);
    // Once: back and forth asks nothing again, nor a pool's history.
    let again = send(
        &mut a,
        [
            key('1'),
            key('4'),
            key('1'),
            key('i'),
            code(KeyCode::Esc),
            key('4'),
        ],
    );
    assert!(!again.contains(&Command::WatchEvents), "{again:?}");
    // `:events` as well as `4`.
    let mut b = app();
    assert_eq!(
        send(
            &mut b,
            typed(":events").into_iter().chain([code(KeyCode::Enter)])
        ),
        vec![Command::WatchEvents]
    );
}

#[test]
fn the_audit_view_loads_filters_and_reloads_after_an_action() {
    let mut a = app();
    send(&mut a, typed(":audit"));
    assert_eq!(
        send(&mut a, [code(KeyCode::Enter)]),
        vec![Command::LoadAudit]
    );
    assert_eq!(*a.screen(), Screen::Audit);
    send(&mut a, [Msg::AuditLoaded(Ok(audit_rows()))]);
    assert_eq!(a.audit.table.visible.len(), 3);
    send(&mut a, typed("/fail"));
    assert_eq!(a.audit.table.visible.len(), 1);
    assert_eq!(
        a.audit.rows[a.audit.table.visible[0] as usize].action,
        "hold"
    );
    send(&mut a, [code(KeyCode::Enter)]);
    // Esc clears the filter first, as in the other views.
    send(&mut a, [code(KeyCode::Esc)]);
    assert_eq!(a.audit.table.visible.len(), 3);
    send(&mut a, [key('j'), key('j'), key('j')]);
    assert_eq!(a.audit.table.selected, 2);
    let done = Msg::ActionDone {
        request: ActionRequest::ClearHold {
            namespace: fixtures::NS.into(),
            pool: "platform".into(),
        },
        result: Ok("changed".into()),
    };
    assert_eq!(send(&mut a, [done.clone()]), vec![Command::LoadAudit]);
    // Elsewhere an action's outcome reads nothing.
    send(&mut a, [key('1')]);
    assert!(send(&mut a, [done]).is_empty());
    // `5` opens it too, reading the file again.
    assert_eq!(send(&mut a, [key('5')]), vec![Command::LoadAudit]);
    send(&mut a, [Msg::AuditLoaded(Err("permission denied".into()))]);
    assert_eq!(a.audit.error.as_deref(), Some("permission denied"));
}

#[test]
fn a_queued_action_says_how_many_are_ahead() {
    let mut a = app();
    send(
        &mut a,
        [Msg::ActionQueued {
            request: ActionRequest::DrainPool {
                namespace: fixtures::NS.into(),
                pool: "batch".into(),
                undo: false,
            },
            ahead: 2,
        }],
    );
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.text == "drain pool batch: queued behind 2 action(s) still running")
    );
}

#[test]
fn s_on_an_agent_asks_for_a_shell_in_it_and_its_end_is_told() {
    let mut a = app();
    send(&mut a, [key('2')]);
    let first = visible_names(&a, ViewKind::Agents)
        .first()
        .cloned()
        .expect("an agent");
    let agent = a
        .snapshot
        .agents
        .iter()
        .find(|x| x.name == first)
        .expect("its row")
        .clone();
    assert_eq!(
        send(&mut a, [key('s')]),
        vec![Command::Shell(ShellRequest {
            context: String::new(),
            namespace: agent.namespace.clone(),
            pod: first.clone(),
            container: (agent.component == "task").then(|| "runner".to_owned()),
        })]
    );
    assert!(a.dialog.is_none(), "no scale dialog on agents");
    send(
        &mut a,
        [Msg::ShellEnded {
            pod: first.clone(),
            result: Ok(3),
        }],
    );
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| !t.error && t.text == format!("shell in {first} exited with code 3"))
    );
    send(
        &mut a,
        [Msg::ShellEnded {
            pod: first.clone(),
            result: Err("no sh".into()),
        }],
    );
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.error && t.text.contains("no sh"))
    );
}

#[test]
fn the_shell_command_opens_a_shell_in_any_named_pod_but_not_read_only() {
    let mut a = app();
    let shell = |a: &mut App, line: &str| {
        let mut msgs = vec![key(':')];
        msgs.extend(typed(line));
        msgs.push(code(KeyCode::Enter));
        send(a, msgs)
    };
    let ns = a.opts.namespace.clone();
    assert_eq!(
        shell(&mut a, "shell debug-agent-0-1a2b3"),
        vec![Command::Shell(ShellRequest {
            context: String::new(),
            namespace: ns,
            pod: "debug-agent-0-1a2b3".into(),
            container: None,
        })]
    );
    assert_eq!(
        shell(&mut a, "sh other/p runner"),
        vec![Command::Shell(ShellRequest {
            context: String::new(),
            namespace: "other".into(),
            pod: "p".into(),
            container: Some("runner".into()),
        })]
    );
    assert!(shell(&mut a, "shell").is_empty());
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.error && t.text.contains("usage: :shell POD"))
    );
    let mut ro = app_with(
        AppOptions {
            read_only: true,
            ..AppOptions::default()
        },
        4,
    );
    assert!(shell(&mut ro, "shell p").is_empty());
    assert!(
        ro.toast
            .as_ref()
            .is_some_and(|t| t.text.contains("read-only"))
    );
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

/// A snapshot of `tasks` fixture tasks, the task list shuffled the way
/// rebuilt stores come back (not in the order of the last snapshot), with
/// the tasks named in `drop` gone.
fn reshuffled(tasks: usize, drop: &[&str]) -> Msg {
    let now = fixtures::now();
    let mut src = fixtures::sources(now, tasks);
    src.tasks.reverse();
    src.tasks.rotate_left(7);
    src.tasks
        .retain(|t| !drop.contains(&t.metadata.name.as_deref().unwrap_or_default()));
    Msg::Snapshot(Arc::new(rows::build(&src, now, &thresholds())))
}

fn selected_name(a: &App, kind: ViewKind) -> String {
    visible_names(a, kind)[a.table(kind).selected].clone()
}

#[test]
fn the_selection_stays_on_its_object_when_the_rows_are_rebuilt_in_another_order() {
    let mut a = app();
    send(&mut a, [key('3'), key('j'), key('j')]);
    let picked = selected_name(&a, ViewKind::Tasks);
    // Five new tasks arrive, and the store hands the rows over in another
    // order: the cursor stays on the task, not on row 2.
    send(&mut a, [reshuffled(45, &[])]);
    assert_eq!(selected_name(&a, ViewKind::Tasks), picked);
    assert!(a.toast.is_none(), "{:?}", a.toast);
    // And an action goes to it.
    let row = a.selected_object().expect("a row");
    assert_eq!(row.name, picked);
}

#[test]
fn when_the_selected_object_goes_its_neighbour_is_selected_and_the_console_says_so() {
    let mut a = app();
    send(&mut a, [key('3'), key('j'), key('j')]);
    let names = visible_names(&a, ViewKind::Tasks);
    let picked = names[2].clone();
    let next = names[3].clone();
    send(&mut a, [reshuffled(40, &[&picked])]);
    assert_eq!(selected_name(&a, ViewKind::Tasks), next);
    let toast = a.toast.as_ref().expect("a toast").text.clone();
    assert!(toast.contains(&format!("task {picked} is gone")), "{toast}");
    assert!(toast.contains(&next), "{toast}");
}

#[test]
fn the_selection_stays_on_its_object_through_a_filter_that_keeps_it() {
    let mut a = app();
    send(&mut a, [key('3')]);
    // Pick a running task further down, then filter on "running".
    let names = visible_names(&a, ViewKind::Tasks);
    let i = names
        .iter()
        .position(|n| {
            a.snapshot
                .tasks
                .iter()
                .any(|t| &t.name == n && t.phase == crate::crd::TaskPhase::Running)
        })
        .expect("a running task");
    for _ in 0..i {
        send(&mut a, [key('j')]);
    }
    let picked = selected_name(&a, ViewKind::Tasks);
    send(&mut a, typed("/running"));
    assert_eq!(selected_name(&a, ViewKind::Tasks), picked);
}

#[test]
fn marks_are_cleared_by_a_new_filter_and_by_leaving_the_view() {
    let mut a = app();
    send(&mut a, [key('3'), key(' '), key(' ')]);
    assert_eq!(a.table(ViewKind::Tasks).marks.len(), 2);
    send(&mut a, typed("/running"));
    assert!(a.table(ViewKind::Tasks).marks.is_empty());
    send(&mut a, [code(KeyCode::Enter), key(' ')]);
    assert_eq!(a.table(ViewKind::Tasks).marks.len(), 1);
    // Enter and Esc on the same filter keep them: the filter did not change.
    send(&mut a, [key('/'), code(KeyCode::End), code(KeyCode::Enter)]);
    assert_eq!(a.table(ViewKind::Tasks).marks.len(), 1);
    send(&mut a, [key('2'), key('3')]);
    assert!(a.table(ViewKind::Tasks).marks.is_empty());
}

#[test]
fn an_action_takes_only_the_marked_rows_on_screen() {
    let mut a = app();
    send(&mut a, [key('3')]);
    send(&mut a, typed("/running"));
    send(&mut a, [code(KeyCode::Enter), key(' ')]);
    let marked = selected_name_at(&a, 0);
    // A task deleted from under its mark is not acted on.
    send(&mut a, [reshuffled(40, &[&marked])]);
    assert!(a.table(ViewKind::Tasks).marks.is_empty());
    send(&mut a, [key(' ')]);
    let now_marked = selected_name_at(&a, 0);
    let before = a.table(ViewKind::Tasks).marks.clone();
    assert_eq!(before.len(), 1);
    send(&mut a, [ctrl('k')]);
    let d = a.dialog.as_ref().expect("a confirmation");
    assert!(d.title.contains("Cancel 1 "), "{}", d.title);
    let said = d.body.join("\n");
    assert!(said.contains(&now_marked), "{said}");
    assert!(!said.contains(&marked), "{said}");
}

fn selected_name_at(a: &App, row: usize) -> String {
    visible_names(a, ViewKind::Tasks)[row].clone()
}

#[test]
fn the_terminals_ctrl_backslash_and_esc_clear_marks() {
    let mut a = app();
    send(&mut a, [key('3'), key(' '), key(' ')]);
    // 0x1C, as crossterm decodes it.
    send(&mut a, [ctrl('4')]);
    assert!(a.table(ViewKind::Tasks).marks.is_empty());
    assert!(a.toast.as_ref().is_some_and(|t| t.text.contains("2 mark")));
    send(&mut a, [key(' ')]);
    send(&mut a, [code(KeyCode::Esc)]);
    assert!(a.table(ViewKind::Tasks).marks.is_empty());
    // Esc with nothing marked leaves the view as before.
    assert_eq!(a.table_kind().map(|(k, _)| k), Some(ViewKind::Tasks));
    send(&mut a, [code(KeyCode::Esc)]);
    assert_eq!(a.table_kind().map(|(k, _)| k), Some(ViewKind::Pools));
}

#[test]
fn typed_bounds_replace_the_scale_prompts_prefilled_ones() {
    let mut a = app();
    send(&mut a, [key('s')]);
    let d = a.dialog.as_ref().expect("the scale dialog");
    let input = d.input.as_ref().expect("an input");
    assert_eq!(input.value(), "0-20", "the bounds of pool batch, prefilled");
    assert!(input.selected());
    send(&mut a, typed("2-8"));
    let d = a.dialog.as_ref().expect("the scale dialog");
    assert_eq!(d.input.as_ref().expect("an input").value(), "2-8");
    let cmds = send(&mut a, [code(KeyCode::Enter)]);
    assert!(
        matches!(
            &cmds[..],
            [Command::PreviewAction(ActionRequest::ScalePool {
                min: 2,
                max: 8,
                ..
            })]
        ),
        "{cmds:?}"
    );
}

#[test]
fn slash_on_an_active_filter_replaces_it_when_typed_and_edits_it_from_its_end() {
    let mut a = app();
    send(&mut a, [key('3')]);
    send(&mut a, typed("/drift"));
    send(&mut a, [code(KeyCode::Enter)]);
    send(&mut a, typed("/apply"));
    assert_eq!(a.table(ViewKind::Tasks).filter_text, "apply");
    send(
        &mut a,
        [code(KeyCode::Enter), key('/'), code(KeyCode::Backspace)],
    );
    assert_eq!(a.table(ViewKind::Tasks).filter_text, "appl");
    send(&mut a, [ctrl('u')]);
    assert_eq!(a.table(ViewKind::Tasks).filter_text, "");
}

#[test]
fn tab_completes_a_commands_pool_argument() {
    let mut a = app();
    send(&mut a, typed(":tasks pl"));
    send(&mut a, [code(KeyCode::Tab)]);
    match &a.prompt {
        Some(Prompt::Command(i)) => assert_eq!(i.value(), "tasks platform"),
        other => panic!("{other:?}"),
    }
    let snap = a.snapshot.clone();
    // Two agents share a prefix: it completes as far as they agree.
    assert_eq!(
        complete_line("shell iac-agent-pl", &snap).as_deref(),
        Some("shell iac-agent-platform-7d9f-")
    );
    assert_eq!(complete_line("tasks nosuch", &snap), None);
    assert_eq!(complete_line("tas", &snap).as_deref(), Some("tasks"));
}

#[test]
fn k9s_keys_agentdeck_lacks_answer_instead_of_doing_nothing() {
    for (msg, says) in [
        (key('0'), "1–5 are the views"),
        (key('e'), "kubectl edit"),
        (ctrl('d'), "nothing is deleted"),
        (ctrl('a'), ":pools"),
    ] {
        let mut a = app();
        send(&mut a, [msg]);
        let t = a.toast.as_ref().map(|t| t.text.clone()).unwrap_or_default();
        assert!(t.contains(says), "{t}");
    }
    for (line, says) in [(":ns", "-n NAME"), (":ctx", "--context")] {
        let mut a = app();
        send(&mut a, typed(line));
        send(&mut a, [code(KeyCode::Enter)]);
        let t = a.toast.as_ref().map(|t| t.text.clone()).unwrap_or_default();
        assert!(t.contains(says), "{line}: {t}");
    }
    let mut a = app();
    send(&mut a, typed(":pod"));
    send(&mut a, [code(KeyCode::Enter)]);
    assert_eq!(a.table_kind().map(|(k, _)| k), Some(ViewKind::Agents));
}

#[test]
fn enter_on_an_audit_row_shows_the_whole_record_and_esc_goes_back() {
    let mut a = app();
    send(&mut a, typed(":audit"));
    send(&mut a, [code(KeyCode::Enter)]);
    send(&mut a, [Msg::AuditLoaded(Ok(audit_rows()))]);
    send(&mut a, [key('j')]);
    let cmds = send(&mut a, [code(KeyCode::Enter)]);
    assert!(cmds.is_empty(), "read from the row, not the API: {cmds:?}");
    match a.screen() {
        Screen::Yaml { object } => {
            assert_eq!(object.kind, audit::AUDIT_RECORD);
            assert!(object.name.contains("hold"), "{}", object.name);
        }
        other => panic!("{other:?}"),
    }
    let text = a.yaml.lines.join("\n");
    assert!(
        text.contains("outcome: 'failed: forbidden'") || text.contains("failed: forbidden"),
        "{text}"
    );
    assert!(text.contains("context: kind-a"), "{text}");
    send(&mut a, [code(KeyCode::Esc)]);
    assert_eq!(*a.screen(), Screen::Audit);
}

#[test]
fn i_opens_the_selected_pools_last_hour_and_esc_goes_back() {
    let mut a = app();
    let names = visible_names(&a, ViewKind::Pools);
    let at = names
        .iter()
        .position(|n| n == "platform")
        .expect("platform");
    for _ in 0..at {
        a.update(key('j'));
    }
    // Its decisions are Events: they are watched from now on.
    let out = a.update(key('i'));
    assert_eq!(out, vec![Command::WatchEvents]);
    assert_eq!(
        a.screen(),
        &Screen::PoolHistory {
            context: String::new(),
            namespace: fixtures::NS.into(),
            name: "platform".into()
        }
    );
    // The snapshot it came from is its first sample.
    let key_of = format!("{}/platform", fixtures::NS);
    assert_eq!(a.pool_history.samples(&key_of).map(|s| s.len()), Some(1));
    // j/k: the next and previous pools, in the pools view's order; Esc
    // goes back to the pools with the pool last drawn selected.
    a.update(key('k'));
    let before = names[at.saturating_sub(1)].clone();
    assert!(matches!(a.screen(), Screen::PoolHistory { name, .. } if *name == before));
    a.update(key('j'));
    assert!(matches!(a.screen(), Screen::PoolHistory { name, .. } if name == "platform"));
    a.update(code(KeyCode::Esc));
    assert_eq!(a.table_kind(), Some((ViewKind::Pools, None)));
    let t = a.table(ViewKind::Pools);
    assert_eq!(names[t.selected], "platform");
    // In a pool's tasks, `i` is that pool's hour; in the agents of every
    // pool there is no pool to draw: it says so.
    a.update(code(KeyCode::Enter));
    a.update(key('i'));
    assert!(matches!(a.screen(), Screen::PoolHistory { name, .. } if name == "platform"));
    a.update(key('2'));
    assert_eq!(a.table_kind(), Some((ViewKind::Agents, None)));
    a.update(key('i'));
    assert!(
        a.toast
            .as_ref()
            .is_some_and(|t| t.text.contains("select one in the pools view")),
        "{:?}",
        a.toast
    );
}

/// A console over contexts `a` and `b`, each showing the fixture cluster:
/// the same pools, tasks and agents by name in both.
fn fleet_app() -> (App, usize) {
    let now = fixtures::now();
    let mut app = App::new(
        AppOptions {
            context: "a, b".into(),
            contexts: vec!["a".into(), "b".into()],
            namespace: fixtures::NS.into(),
            ..AppOptions::default()
        },
        now,
    );
    app.update(Msg::Resize(100, 30));
    let snap = Arc::new(rows::build(&fixtures::sources(now, 12), now, &thresholds()));
    let pools = snap.pools.len();
    let mut merger = fleet::Merger::new(&app.opts.contexts);
    merger.take(0, snap.clone());
    merger.take(1, snap);
    app.update(Msg::Snapshot(Arc::new(merger.merged())));
    (app, pools)
}

fn routed_to(cmds: &[Command]) -> Vec<(String, Command)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::In { context, command } => Some((context.clone(), (**command).clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn an_action_on_a_row_of_context_b_goes_to_b() {
    let (mut a, pools) = fleet_app();
    // The first pool of b: below every pool of a.
    send(&mut a, (0..pools).map(|_| key('j')));
    let selected = &a.snapshot.pools[a.selected_index(ViewKind::Pools).expect("a row")];
    assert_eq!(&*selected.context, "b");
    let name = selected.name.clone();
    send(&mut a, [key('s')]);
    let title = a
        .dialog
        .as_ref()
        .map(|d| d.title.clone())
        .unwrap_or_default();
    assert!(title.contains(" in b"), "{title}");
    // The prefilled bounds are submitted: the preview is asked of b.
    let preview = send(&mut a, [code(KeyCode::Enter)]);
    let preview = routed_to(&preview);
    assert!(
        matches!(&preview[..], [(c, Command::PreviewAction(ActionRequest::ScalePool { pool, .. }))] if c == "b" && *pool == name),
        "{preview:?}"
    );
    let apply = routed_to(&send(&mut a, [key('y')]));
    assert!(
        matches!(&apply[..], [(c, Command::Action(ActionRequest::ScalePool { pool, .. }))] if c == "b" && *pool == name),
        "{apply:?}"
    );
    // And a's first pool goes to a.
    let (mut a, _) = fleet_app();
    send(&mut a, [key('s'), code(KeyCode::Enter)]);
    let apply = routed_to(&send(&mut a, [key('y')]));
    assert!(
        matches!(&apply[..], [(c, Command::Action(_))] if c == "a"),
        "{apply:?}"
    );
}

#[test]
fn ctx_narrows_the_tables_to_one_context_and_widens_again() {
    let (mut a, pools) = fleet_app();
    assert_eq!(a.table(ViewKind::Pools).visible.len(), 2 * pools);
    send(&mut a, typed(":ctx b"));
    send(&mut a, [code(KeyCode::Enter)]);
    let s = a.snapshot.clone();
    let shown = &a.table(ViewKind::Pools).visible;
    assert_eq!(shown.len(), pools);
    assert!(shown.iter().all(|&i| &*s.pools[i as usize].context == "b"));
    // Every table: the tasks too.
    send(&mut a, [key('3')]);
    assert!(
        a.table(ViewKind::Tasks)
            .visible
            .iter()
            .all(|&i| &*s.tasks[i as usize].context == "b")
    );
    send(&mut a, typed(":ctx"));
    send(&mut a, [code(KeyCode::Enter)]);
    assert_eq!(a.table(ViewKind::Tasks).visible.len(), s.tasks.len());
    send(&mut a, typed(":ctx nosuch"));
    send(&mut a, [code(KeyCode::Enter)]);
    let toast = a.toast.as_ref().map(|t| t.text.clone()).unwrap_or_default();
    assert!(
        toast.contains("no context nosuch") && toast.contains("a, b"),
        "{toast}"
    );
    assert!(a.narrow.is_none());
}

#[test]
fn a_pool_drilled_into_shows_its_own_contexts_tasks_and_logs_go_there() {
    let (mut a, pools) = fleet_app();
    send(&mut a, (0..pools).map(|_| key('j')));
    let pool = a.snapshot.pools[a.selected_index(ViewKind::Pools).expect("row")]
        .name
        .clone();
    send(&mut a, [code(KeyCode::Enter)]);
    let s = a.snapshot.clone();
    let shown: Vec<_> = a
        .table(ViewKind::Tasks)
        .visible
        .iter()
        .map(|&i| s.tasks[i as usize].clone())
        .collect();
    assert!(!shown.is_empty());
    assert!(shown.iter().all(|t| &*t.context == "b" && t.pool == pool));
    // The logs of one of them are asked of b.
    let with_log = shown
        .iter()
        .position(|t| t.log_at.is_some())
        .expect("a task with a log");
    send(&mut a, (0..with_log).map(|_| key('j')));
    let cmds = routed_to(&send(&mut a, [key('l')]));
    assert!(
        matches!(&cmds[..], [(c, Command::StreamLogs { source, .. })] if c == "b" && source.context == "b"),
        "{cmds:?}"
    );
    assert!(
        matches!(a.screen(), Screen::Logs { title, .. } if title.ends_with(" in b")),
        "{:?}",
        a.screen()
    );
}

#[test]
fn marks_in_two_contexts_are_not_acted_on_at_once() {
    let (mut a, pools) = fleet_app();
    send(&mut a, [key(' ')]);
    send(&mut a, (1..pools).map(|_| key('j')));
    send(&mut a, [key(' ')]);
    assert_eq!(a.table(ViewKind::Pools).marks.len(), 2);
    let cmds = send(&mut a, [key('d')]);
    assert!(cmds.is_empty() && a.dialog.is_none(), "{cmds:?}");
    let toast = a.toast.as_ref().map(|t| t.text.clone()).unwrap_or_default();
    assert!(toast.contains("2 contexts (a, b)"), "{toast}");
}

#[test]
fn each_contexts_status_is_its_own_and_the_whole_is_synced_while_one_is() {
    let (mut a, _) = fleet_app();
    let synced = ClusterStatus {
        role: Role::Leader,
        watch: WatchState::Synced,
        latency: None,
        ..Default::default()
    };
    a.update(Msg::ContextStatus {
        context: "a".into(),
        status: synced.clone(),
    });
    a.update(Msg::ContextStatus {
        context: "b".into(),
        status: ClusterStatus {
            role: Role::Observer,
            watch: WatchState::Disconnected("connection refused".into()),
            latency: None,
            ..Default::default()
        },
    });
    assert_eq!(a.contexts[0].status, synced);
    assert!(matches!(
        a.contexts[1].status.watch,
        WatchState::Disconnected(_)
    ));
    assert_eq!(a.status.watch, WatchState::Synced);
    // A single-context console's commands are not wrapped.
    let mut one = app();
    let cmds = send(&mut one, [key('3'), key('l')]);
    assert!(routed_to(&cmds).is_empty(), "{cmds:?}");
}

#[test]
fn yaml_bundles_debug_pods_and_shells_of_bs_rows_go_to_b() {
    let (mut a, pools) = fleet_app();
    send(&mut a, (0..pools).map(|_| key('j')));
    // YAML of b's pool.
    let cmds = routed_to(&send(&mut a, [key('y')]));
    assert!(
        matches!(&cmds[..], [(c, Command::LoadYaml(o))] if c == "b" && o.context == "b"),
        "{cmds:?}"
    );
    send(&mut a, [code(KeyCode::Esc)]);
    // A bundle of b's pool.
    let cmds = routed_to(&send(&mut a, [key('b')]));
    assert!(
        matches!(&cmds[..], [(c, Command::TakeBundle { pool: Some(_), .. })] if c == "b"),
        "{cmds:?}"
    );
    // A debug pod of, and a shell in, one of b's agents.
    let (mut a, _) = fleet_app();
    send(&mut a, [key('2')]);
    let s = a.snapshot.clone();
    let first_b = a
        .table(ViewKind::Agents)
        .visible
        .iter()
        .position(|&i| &*s.agents[i as usize].context == "b")
        .expect("an agent of b");
    send(&mut a, (0..first_b).map(|_| key('j')));
    send(&mut a, [key('D')]);
    let cmds = routed_to(&send(&mut a, [key('y')]));
    assert!(
        matches!(&cmds[..], [(c, Command::CreateDebugPod { .. })] if c == "b"),
        "{cmds:?}"
    );
    let cmds = routed_to(&send(&mut a, [key('s')]));
    assert!(
        matches!(&cmds[..], [(c, Command::Shell(r))] if c == "b" && r.context == "b"),
        "{cmds:?}"
    );
    // A bundle of a pool named in both contexts must say which.
    let name = s.pools[0].name.clone();
    send(&mut a, typed(&format!(":bundle {name}")));
    assert!(send(&mut a, [code(KeyCode::Enter)]).is_empty());
    let toast = a.toast.as_ref().map(|t| t.text.clone()).unwrap_or_default();
    assert!(toast.contains("is in contexts a, b"), "{toast}");
}
