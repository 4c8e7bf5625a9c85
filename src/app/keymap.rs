//! The keymap: every action the console has, its default keys, and the
//! user's overrides from `keymap:` in agentdeck.yaml. Help (`?`) is
//! generated from the live map, so it never disagrees with the keys.

use std::collections::BTreeMap;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Where a binding applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Global,
    Table,
    Logs,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Global => "Global",
            Scope::Table => "Tables",
            Scope::Logs => "Logs",
        }
    }
}

macro_rules! actions {
    ($( $v:ident = $name:literal, $scope:ident, $danger:literal, [$($key:literal),*], $help:literal; )*) => {
        /// Something a key can do.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Action { $( $v, )* }

        impl Action {
            /// Every action, in help order.
            pub const ALL: &'static [Action] = &[ $( Action::$v, )* ];
            /// Name in the config's `keymap:`.
            pub fn name(self) -> &'static str { match self { $( Action::$v => $name, )* } }
            pub fn scope(self) -> Scope { match self { $( Action::$v => Scope::$scope, )* } }
            /// Changes the cluster: unbound in read-only mode.
            pub fn writes(self) -> bool { match self { $( Action::$v => $danger, )* } }
            pub fn help(self) -> &'static str { match self { $( Action::$v => $help, )* } }
            fn defaults(self) -> &'static [&'static str] { match self { $( Action::$v => &[$($key),*], )* } }
        }
    };
}

actions! {
    Quit = "quit", Global, false, ["q", "ctrl-c"], "quit";
    Help = "help", Global, false, ["?"], "this help";
    Command = "command", Global, false, [":"], "command bar (:pools :agents :tasks :events :audit :bundle :ctx :q)";
    Filter = "filter", Global, false, ["/"], "filter: regex, !inverse, -f fuzzy, -l label=value";
    Back = "back", Global, false, ["esc"], "back (clear filter, leave a view)";
    HistoryBack = "history-back", Global, false, ["["], "previous view in history";
    HistoryForward = "history-forward", Global, false, ["]"], "next view in history";
    Pools = "pools", Global, false, ["1"], "pools view";
    Agents = "agents", Global, false, ["2"], "agents view";
    Tasks = "tasks", Global, false, ["3"], "tasks view";
    Events = "events", Global, false, ["4"], "events view";
    Audit = "audit", Global, false, ["5"], "audit trail of actions (:audit)";
    Recheck = "recheck", Global, false, ["ctrl-r"], "ask the API again now: your rights, and resources it refused or did not serve";
    Up = "up", Global, false, ["up", "k"], "up";
    Down = "down", Global, false, ["down", "j"], "down";
    PageUp = "page-up", Global, false, ["pgup", "ctrl-b"], "page up";
    PageDown = "page-down", Global, false, ["pgdn", "ctrl-f"], "page down";
    Top = "top", Global, false, ["home", "g"], "top";
    Bottom = "bottom", Global, false, ["end", "G"], "bottom";
    Enter = "enter", Table, false, ["enter"], "drill down: pool → tasks → logs";
    Switch = "switch", Table, false, ["tab"], "in a pool: its agents ⇄ its tasks";
    Yaml = "yaml", Table, false, ["y"], "YAML of the selected object";
    Logs = "logs", Table, false, ["l"], "logs of the selected task or agent";
    PreviousLogs = "previous-logs", Table, false, ["p"], "logs of the previous container";
    Mark = "mark", Table, false, ["space"], "mark the row (for bulk actions)";
    ClearMarks = "clear-marks", Table, false, ["ctrl-\\"], "clear marks";
    Wide = "wide", Table, false, ["ctrl-w"], "wide columns (labels, job) on / off";
    SortName = "sort-name", Table, false, ["N"], "sort by name (again: reverse)";
    SortAge = "sort-age", Table, false, ["A"], "sort by age";
    SortStatus = "sort-status", Table, false, ["S"], "sort by status / phase";
    SortPool = "sort-pool", Table, false, ["P"], "sort by pool";
    Scale = "scale", Table, true, ["s"], "scale / hold pool; agents: shell";
    Drain = "drain", Table, true, ["d"], "drain / resume pools or agents";
    DebugLogs = "debug-logs", Table, true, ["ctrl-g"], "debug logs of pools or agents";
    CancelTask = "cancel-task", Table, true, ["ctrl-k"], "cancel the marked or selected tasks";
    RetryTask = "retry-task", Table, true, ["r"], "retry Failed/Errored tasks";
    DebugPod = "debug-pod", Table, true, ["D"], "copy-mode debug pod of the agent";
    Bundle = "bundle", Table, false, ["b"], "support bundle (pool/namespace)";
    PoolHistory = "pool-history", Table, false, ["i"], "the pool's last hour: queue, replicas, scaling";
    Follow = "follow", Logs, false, ["f", "s"], "follow (autoscroll)";
    Wrap = "wrap", Logs, false, ["w"], "wrap long lines";
    Timestamps = "timestamps", Logs, false, ["t"], "show timestamps";
    SearchNext = "search-next", Logs, false, ["n"], "next match of the / search";
    SearchPrevious = "search-previous", Logs, false, ["shift-n"], "previous match";
}

/// A key as written in the config: `q`, `G`, `ctrl-c`, `shift-n`, `enter`,
/// `esc`, `space`, `tab`, `up`, `pgdn`, `f5` …
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub code: KeyCode,
    pub ctrl: bool,
    pub alt: bool,
}

const NAMED: &[(&str, KeyCode)] = &[
    ("enter", KeyCode::Enter),
    ("esc", KeyCode::Esc),
    ("tab", KeyCode::Tab),
    ("backtab", KeyCode::BackTab),
    ("space", KeyCode::Char(' ')),
    ("backspace", KeyCode::Backspace),
    ("delete", KeyCode::Delete),
    ("up", KeyCode::Up),
    ("down", KeyCode::Down),
    ("left", KeyCode::Left),
    ("right", KeyCode::Right),
    ("home", KeyCode::Home),
    ("end", KeyCode::End),
    ("pgup", KeyCode::PageUp),
    ("pgdn", KeyCode::PageDown),
];

impl Key {
    /// Parses a key name; the error lists the forms accepted.
    pub fn parse(s: &str) -> Result<Key, String> {
        let mut ctrl = false;
        let mut alt = false;
        let mut shift = false;
        let mut rest = s.trim();
        loop {
            let lower = rest.to_ascii_lowercase();
            if rest.len() > 1 && lower.starts_with("ctrl-") {
                ctrl = true;
                rest = &rest[5..];
            } else if rest.len() > 1 && lower.starts_with("alt-") {
                alt = true;
                rest = &rest[4..];
            } else if rest.len() > 1 && lower.starts_with("shift-") {
                shift = true;
                rest = &rest[6..];
            } else {
                break;
            }
        }
        let lower = rest.to_ascii_lowercase();
        let code = if let Some((_, c)) = NAMED.iter().find(|(n, _)| *n == lower) {
            *c
        } else if let Some(n) = lower.strip_prefix('f').and_then(|n| n.parse::<u8>().ok()) {
            KeyCode::F(n)
        } else {
            let mut chars = rest.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => {
                    let c = if ctrl { c.to_ascii_lowercase() } else { c };
                    KeyCode::Char(if shift { c.to_ascii_uppercase() } else { c })
                }
                _ => {
                    return Err(format!(
                        "{s:?} is not a key; expected one character (q, G, ?), ctrl-/alt-/shift- \
                         followed by one, f1-f12, or one of {}",
                        NAMED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        };
        Ok(Key { code, ctrl, alt })
    }

    /// The key of a terminal event (shift folded into the character).
    pub fn from_event(e: &KeyEvent) -> Key {
        let ctrl = e.modifiers.contains(KeyModifiers::CONTROL);
        let code = match e.code {
            // Terminals send ctrl-\ ] ^ _ as 0x1C–0x1F, which crossterm
            // reads as ctrl-4 … ctrl-7: give them back their names.
            KeyCode::Char('4') if ctrl => KeyCode::Char('\\'),
            KeyCode::Char('5') if ctrl => KeyCode::Char(']'),
            KeyCode::Char('6') if ctrl => KeyCode::Char('^'),
            KeyCode::Char('7') if ctrl => KeyCode::Char('_'),
            KeyCode::Char(c) if ctrl => KeyCode::Char(c.to_ascii_lowercase()),
            c => c,
        };
        Key {
            code,
            ctrl,
            alt: e.modifiers.contains(KeyModifiers::ALT),
        }
    }

    /// As written in help.
    pub fn label(&self) -> String {
        let base = match self.code {
            KeyCode::Char(' ') => "space".to_owned(),
            KeyCode::Char(c) if c.is_ascii_uppercase() && !self.ctrl => {
                format!("shift-{}", c.to_ascii_lowercase())
            }
            KeyCode::Char(c) => c.to_string(),
            KeyCode::F(n) => format!("f{n}"),
            other => NAMED.iter().find(|(_, c)| *c == other).map_or_else(
                || format!("{other:?}").to_lowercase(),
                |(n, _)| (*n).to_owned(),
            ),
        };
        let mut s = String::new();
        if self.ctrl {
            s.push_str("ctrl-");
        }
        if self.alt {
            s.push_str("alt-");
        }
        s.push_str(&base);
        s
    }
}

/// Why a keymap override was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeymapError {
    #[error("keymap.{0}: no such action; valid actions: {1}")]
    UnknownAction(String, String),
    #[error("keymap.{action}: {reason}")]
    BadKey { action: String, reason: String },
}

/// Keys to actions, per scope.
#[derive(Clone, Debug)]
pub struct Keymap {
    bindings: Vec<(Key, Action)>,
}

impl Default for Keymap {
    fn default() -> Self {
        let mut bindings = Vec::new();
        for &a in Action::ALL {
            for k in a.defaults() {
                bindings.push((Key::parse(k).expect("default keys parse"), a));
            }
        }
        Keymap { bindings }
    }
}

impl Keymap {
    /// The defaults with `overrides` (action name → keys, comma separated)
    /// replacing the keys of the actions they name. A key taken by an
    /// override is removed from any other action in the same or global scope.
    pub fn with_overrides(overrides: &BTreeMap<String, String>) -> Result<Keymap, KeymapError> {
        let mut map = Keymap::default();
        for (name, keys) in overrides {
            let action = Action::ALL
                .iter()
                .copied()
                .find(|a| a.name() == name)
                .ok_or_else(|| {
                    KeymapError::UnknownAction(
                        name.clone(),
                        Action::ALL
                            .iter()
                            .map(|a| a.name())
                            .collect::<Vec<_>>()
                            .join(", "),
                    )
                })?;
            let keys: Vec<Key> = keys
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| {
                    Key::parse(if k == "," { "," } else { k }).map_err(|reason| {
                        KeymapError::BadKey {
                            action: name.clone(),
                            reason,
                        }
                    })
                })
                .collect::<Result<_, _>>()?;
            map.bindings.retain(|(k, a)| {
                *a != action
                    && !(keys.contains(k)
                        && (a.scope() == action.scope()
                            || a.scope() == Scope::Global
                            || action.scope() == Scope::Global))
            });
            map.bindings.extend(keys.into_iter().map(|k| (k, action)));
        }
        Ok(map)
    }

    /// The action `key` does in `scope` (its own bindings first, then global).
    pub fn lookup(&self, key: Key, scope: Scope, read_only: bool) -> Option<Action> {
        let find = |s: Scope| {
            self.bindings
                .iter()
                .find(|(k, a)| *k == key && a.scope() == s)
                .map(|(_, a)| *a)
        };
        let a = if scope == Scope::Global {
            find(Scope::Global)
        } else {
            find(scope).or_else(|| find(Scope::Global))
        }?;
        (!(read_only && a.writes())).then_some(a)
    }

    /// Keys of `action`.
    pub fn keys(&self, action: Action) -> Vec<Key> {
        self.bindings
            .iter()
            .filter(|(_, a)| *a == action)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Help lines: (scope, keys, what) for every bound action, in order;
    /// actions that write are left out in read-only mode.
    pub fn help(&self, read_only: bool) -> Vec<(Scope, String, &'static str)> {
        self.help_actions(read_only)
            .into_iter()
            .map(|(s, keys, a)| (s, keys, a.help()))
            .collect()
    }

    /// [`Keymap::help`], each line with its action.
    pub fn help_actions(&self, read_only: bool) -> Vec<(Scope, String, Action)> {
        let mut out = Vec::new();
        for &a in Action::ALL {
            if read_only && a.writes() {
                continue;
            }
            let keys = self.keys(a);
            if keys.is_empty() {
                continue;
            }
            let keys = keys.iter().map(Key::label).collect::<Vec<_>>().join(" ");
            out.push((a.scope(), keys, a));
        }
        out.sort_by_key(|(s, _, _)| *s);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_parse_to_the_events_they_match() {
        let ev = |code, m| Key::from_event(&KeyEvent::new(code, m));
        let cases = [
            ("q", ev(KeyCode::Char('q'), KeyModifiers::NONE)),
            ("G", ev(KeyCode::Char('G'), KeyModifiers::SHIFT)),
            ("shift-n", ev(KeyCode::Char('N'), KeyModifiers::SHIFT)),
            ("ctrl-c", ev(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            ("Ctrl-K", ev(KeyCode::Char('k'), KeyModifiers::CONTROL)),
            // What a terminal's 0x1C decodes to.
            ("ctrl-\\", ev(KeyCode::Char('4'), KeyModifiers::CONTROL)),
            ("enter", ev(KeyCode::Enter, KeyModifiers::NONE)),
            ("space", ev(KeyCode::Char(' '), KeyModifiers::NONE)),
            ("f5", ev(KeyCode::F(5), KeyModifiers::NONE)),
            ("pgdn", ev(KeyCode::PageDown, KeyModifiers::NONE)),
        ];
        for (name, want) in cases {
            assert_eq!(Key::parse(name), Ok(want), "{name}");
        }
        assert!(Key::parse("hyper-x").is_err_and(|e| e.contains("f1-f12")));
    }

    #[test]
    fn an_override_moves_an_action_to_its_new_key() {
        let map = Keymap::with_overrides(&BTreeMap::from([("quit".into(), "x, ctrl-q".into())]))
            .expect("valid");
        let key = |s| Key::parse(s).expect("key");
        assert_eq!(
            map.lookup(key("x"), Scope::Table, false),
            Some(Action::Quit)
        );
        assert_eq!(
            map.lookup(key("ctrl-q"), Scope::Logs, false),
            Some(Action::Quit)
        );
        assert_eq!(map.lookup(key("q"), Scope::Table, false), None);
        assert!(
            map.help(false)
                .iter()
                .any(|(_, k, w)| k == "x ctrl-q" && *w == "quit")
        );
    }

    #[test]
    fn an_unknown_action_or_key_is_refused_naming_what_is_valid() {
        let e = Keymap::with_overrides(&BTreeMap::from([("qiut".into(), "q".into())]))
            .expect_err("unknown");
        assert!(
            e.to_string().contains("keymap.qiut") && e.to_string().contains("quit"),
            "{e}"
        );
        let e = Keymap::with_overrides(&BTreeMap::from([("quit".into(), "meta-q".into())]))
            .expect_err("bad key");
        assert!(e.to_string().starts_with("keymap.quit:"), "{e}");
    }

    #[test]
    fn read_only_unbinds_every_action_that_writes() {
        let map = Keymap::default();
        for &a in Action::ALL {
            for k in map.keys(a) {
                let got = map.lookup(k, a.scope(), true);
                if a.writes() {
                    assert_eq!(got, None, "{a:?}");
                } else {
                    assert!(got.is_some(), "{a:?}");
                }
            }
        }
        assert!(map.help(true).iter().all(|(_, _, w)| !w.contains("drain")));
    }

    #[test]
    fn context_keys_shadow_global_ones_only_in_their_scope() {
        let map = Keymap::default();
        let s = Key::parse("s").expect("key");
        assert_eq!(map.lookup(s, Scope::Table, false), Some(Action::Scale));
        assert_eq!(map.lookup(s, Scope::Logs, false), Some(Action::Follow));
    }
}
