//! Text from the cluster made safe to draw: names, messages and log lines
//! can carry escape sequences that would move the cursor, change colours or
//! retitle the terminal. They are removed once, when rows are built.

use std::borrow::Cow;

/// `s` without control characters, terminal escape sequences (CSI, OSC,
/// and two-character escapes) and the characters that print nothing (see
/// [`invisible`]); a tab becomes one space.
pub fn sanitize(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() || invisible(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\t' => out.push(' '),
            '\u{1b}' => match chars.next() {
                // CSI: parameters and intermediates up to a final byte @..~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC / DCS / APC / PM: up to BEL or ESC \.
                Some(']' | 'P' | '_' | '^') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' {
                            if chars.peek() == Some(&'\\') {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                _ => {}
            },
            // C1 CSI (U+009B) has parameters like ESC [.
            '\u{9b}' => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            c if c.is_control() || invisible(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Characters that print nothing of their own — zero-width spaces and
/// joiners, bidirectional marks, embeddings and isolates, variation
/// selectors, fillers, tags. Terminals (and tmux) disagree with each other
/// and with ratatui about the columns they take, so one left in a cell
/// shifts the rest of its line: a U+200D in a task's output left stray
/// marks in the border under tmux. They are dropped (an emoji sequence
/// joined by U+200D shows as its parts).
pub fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e007f}'
            | '\u{e0100}'..='\u{e01ef}'
    )
}

/// [`sanitize`] into an owned string.
pub fn clean(s: &str) -> String {
    sanitize(s).into_owned()
}

/// A JSON log line (`{"level":…,"msg":…,…}`) as `LEVEL msg key=value …`;
/// any other line unchanged.
pub fn readable_json(line: &str) -> Option<String> {
    let t = line.trim_start();
    if !t.starts_with('{') {
        return None;
    }
    let serde_json::Value::Object(map) = serde_json::from_str::<serde_json::Value>(t).ok()? else {
        return None;
    };
    let pick = |keys: &[&'static str]| -> Option<(&'static str, String)> {
        keys.iter()
            .find_map(|k| map.get(*k).map(|v| (*k, v)))
            .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
    };
    let level = pick(&["level", "lvl", "severity"]);
    let msg = pick(&["msg", "message"]);
    let time_keys = ["time", "ts", "timestamp"];
    let mut out = String::new();
    if let Some((_, l)) = &level {
        out.push_str(&l.to_uppercase());
        out.push(' ');
    }
    if let Some((_, m)) = &msg {
        out.push_str(m);
    }
    for (k, v) in &map {
        if level.as_ref().is_some_and(|(lk, _)| lk == k)
            || msg.as_ref().is_some_and(|(mk, _)| mk == k)
            || time_keys.contains(&k.as_str())
        {
            continue;
        }
        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(&v);
    }
    Some(out)
}

/// Columns `s` takes on a terminal.
pub fn width(s: &str) -> usize {
    ratatui::text::Span::raw(s).width()
}

fn char_width(c: char) -> usize {
    width(c.encode_utf8(&mut [0; 4]))
}

/// The longest start of `s` at most `w` columns wide.
fn head(s: &str, w: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += char_width(c);
        if used > w {
            return &s[..i];
        }
    }
    s
}

/// The longest end of `s` at most `w` columns wide.
fn tail(s: &str, w: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices().rev() {
        used += char_width(c);
        if used > w {
            return &s[i + c.len_utf8()..];
        }
    }
    s
}

/// `s` in at most `w` columns, cut at the end with `…` when it is longer.
pub fn ellipsize(s: &str, w: usize) -> Cow<'_, str> {
    if width(s) <= w {
        return Cow::Borrowed(s);
    }
    if w == 0 {
        return Cow::Borrowed("");
    }
    Cow::Owned(format!("{}…", head(s, w - 1).trim_end()))
}

/// A name in at most `w` columns, shortened in the middle: the end that
/// tells pods apart (`-9lz6q`, the first dash-separated part from the end
/// with a digit in it) is kept whole when it takes at most two thirds of
/// the width, so `iac-agent-platform-7d9f5c8b4-9lz6q` in 20 columns is
/// `iac-agent-pla…-9lz6q`.
pub fn shorten_middle(s: &str, w: usize) -> Cow<'_, str> {
    if width(s) <= w {
        return Cow::Borrowed(s);
    }
    if w < 3 {
        return ellipsize(s, w);
    }
    let room = w - 1;
    let mut keep = None;
    for (i, _) in s
        .match_indices(['-', '.', '/', '_'])
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        if i == 0 || width(&s[i..]) > room * 2 / 3 {
            break;
        }
        keep = Some(i);
        if s[i..].chars().any(|c| c.is_ascii_digit()) {
            break;
        }
    }
    let end = match keep {
        Some(i) => &s[i..],
        None => tail(s, room / 2),
    };
    let start = head(s, room - width(end));
    Cow::Owned(format!("{start}…{end}"))
}

/// `s` in lines of at most `w` columns, each `; `-separated part starting
/// a line (so a command after `shell: ` is on a line of its own).
pub fn wrap_parts(s: &str, w: usize) -> Vec<String> {
    s.split("; ").flat_map(|part| wrap(part, w)).collect()
}

/// `s` in lines of at most `w` columns, broken at spaces (a word longer
/// than a line is broken where the line ends).
pub fn wrap(s: &str, w: usize) -> Vec<String> {
    let w = w.max(1);
    let mut out = Vec::new();
    {
        let part = s;
        let mut line = String::new();
        for word in part.split(' ') {
            let gap = usize::from(!line.is_empty());
            if width(&line) + gap + width(word) <= w {
                if gap == 1 {
                    line.push(' ');
                }
                line.push_str(word);
                continue;
            }
            if !line.is_empty() {
                out.push(std::mem::take(&mut line));
            }
            let mut rest = word;
            while width(rest) > w {
                let h = head(rest, w);
                out.push(h.to_owned());
                rest = &rest[h.len()..];
            }
            line.push_str(rest);
        }
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_controls_are_removed() {
        let cases = [
            ("plain", "plain"),
            ("red \u{1b}[31mtext\u{1b}[0m", "red text"),
            ("title \u{1b}]0;pwned\u{7}after", "title after"),
            ("osc st \u{1b}]8;;http://x\u{1b}\\link", "osc st link"),
            ("bell\u{7} and nul\u{0}", "bell and nul"),
            ("tab\there", "tab here"),
            ("cr\rlf\n", "crlf"),
            ("c1 \u{9b}2Jcsi", "c1 csi"),
            ("cursor \u{1b}[10;20Hmove", "cursor move"),
            ("ünïcødé ✓", "ünïcødé ✓"),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize(input), want, "{input:?}");
        }
    }

    #[test]
    fn characters_that_print_nothing_are_removed_and_visible_ones_kept() {
        let cases = [
            ("zero\u{200d}width joiner", "zerowidth joiner"),
            ("zwsp\u{200b} zwnj\u{200c}", "zwsp zwnj"),
            ("\u{feff}bom first", "bom first"),
            ("rlo \u{202e}txt.exe\u{202c}", "rlo txt.exe"),
            ("isolate \u{2067}x\u{2069} lrm\u{200e}", "isolate x lrm"),
            (
                "soft\u{ad}hyphen word\u{2060}joiner",
                "softhyphen wordjoiner",
            ),
            ("line\u{2028}sep", "linesep"),
            ("heart \u{2764}\u{fe0f}", "heart \u{2764}"),
            ("tag \u{e0041}\u{e007f}end", "tag end"),
            ("👩\u{200d}💻 ok", "👩💻 ok"),
            // Wide and combining characters that do print are kept.
            ("日本 e\u{301} ✓", "日本 e\u{301} ✓"),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize(input), want, "{input:?}");
        }
        assert!(matches!(sanitize("日本 ok"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_log_lines_read_as_level_message_and_fields() {
        assert_eq!(
            readable_json(r#"{"level":"info","msg":"applied","resources":3,"time":"x"}"#)
                .as_deref(),
            Some("INFO applied resources=3")
        );
        assert_eq!(readable_json("not json {"), None);
        assert_eq!(readable_json("[1,2]"), None);
    }

    #[test]
    fn names_are_shortened_in_the_middle_keeping_the_suffix() {
        let pod = "iac-agent-platform-7d9f5c8b4-9lz6q";
        let cases = [
            (pod, 40, pod),
            (pod, 34, pod),
            (pod, 33, "iac-agent-platform-7d9f5c8…-9lz6q"),
            (pod, 20, "iac-agent-pla…-9lz6q"),
            (pod, 12, "iac-a…-9lz6q"),
            (pod, 8, "iac-…z6q"),
            ("plan-00034", 7, "pla…034"),
            ("abcdefghij", 5, "ab…ij"),
            ("abc", 2, "a…"),
        ];
        for (s, w, want) in cases {
            let got = shorten_middle(s, w);
            assert_eq!(got, want, "{s} in {w}");
            assert!(width(&got) <= w, "{got} in {w}");
        }
        // Two pods of one ReplicaSet stay apart at any width that shows
        // their suffix.
        let other = "iac-agent-platform-7d9f5c8b4-x2k8p";
        for w in 10..34 {
            assert_ne!(shorten_middle(pod, w), shorten_middle(other, w), "{w}");
        }
    }

    #[test]
    fn long_text_is_cut_at_the_end_with_an_ellipsis() {
        assert_eq!(
            ellipsize("0/0 ready, 1 pending, 4 running", 40),
            "0/0 ready, 1 pending, 4 running"
        );
        assert_eq!(
            ellipsize("0/0 ready, 1 pending, 4 running", 24),
            "0/0 ready, 1 pending, 4…"
        );
        assert_eq!(ellipsize("frozen by window 22:00", 10), "frozen by…");
        assert_eq!(ellipsize("ünïcødé ✓", 4), "ünï…");
        assert_eq!(ellipsize("abc", 0), "");
    }

    #[test]
    fn wrapped_text_keeps_every_character_and_puts_a_command_on_its_own_line() {
        let toast = "debug pod iac-agent-platform-7d9f5c8b4-9lz6q-debug-x2k8p, deleted at 10:30:00Z; shell: kubectl exec -it -n ops iac-agent-platform-7d9f5c8b4-9lz6q-debug-x2k8p -c debugger -- sh";
        for w in [20, 40, 78, 120, 200] {
            let lines = wrap_parts(toast, w);
            assert!(lines.iter().all(|l| width(l) <= w), "{w}: {lines:?}");
            let joined: String = lines.concat().split_whitespace().collect();
            let want: String = toast.replace("; ", "").split_whitespace().collect();
            assert_eq!(joined, want, "{w}");
        }
        assert_eq!(
            wrap_parts(toast, 120),
            [
                "debug pod iac-agent-platform-7d9f5c8b4-9lz6q-debug-x2k8p, deleted at 10:30:00Z",
                "shell: kubectl exec -it -n ops iac-agent-platform-7d9f5c8b4-9lz6q-debug-x2k8p -c debugger -- sh",
            ]
        );
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("a; b c", 4), ["a; b", "c"]);
    }
}
