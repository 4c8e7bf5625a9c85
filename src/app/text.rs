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
}
