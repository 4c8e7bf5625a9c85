//! Text from outside (task output, pod reasons, object names someone else
//! wrote) made safe to show: wherever *we* display such text — a task's
//! message, an Event, the console, a support bundle — it goes through
//! [`sanitize`] first, so an escape sequence in a task's output cannot move
//! a cursor, retitle a terminal or hide text from the reader.

/// `text` without terminal control: escape sequences (CSI `ESC [ … final`,
/// OSC `ESC ] … BEL|ST`, DCS/SOS/PM/APC strings, two-byte `ESC x`) are
/// removed, other C0/C1 control characters and DEL become `�`, and the
/// bidirectional overrides that can reorder what a reader sees
/// (U+202A–U+202E, U+2066–U+2069) become `�` too. Newlines and tabs are
/// kept; see [`sanitize_line`] for one-line places.
pub fn sanitize(text: &str) -> String {
    // Common case: nothing to do, no allocation beyond the copy.
    if !text.chars().any(needs_work) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            // C1 CSI / OSC / DCS … introducers written as one character.
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            '\n' | '\t' => out.push(c),
            c if is_control(c) => out.push(REPLACEMENT),
            c => out.push(c),
        }
    }
    out
}

/// [`sanitize`], then every line break and tab as one space, so the result
/// stays on one line (Event notes, task messages, table cells).
pub fn sanitize_line(text: &str) -> String {
    sanitize(text)
        .chars()
        .map(|c| if matches!(c, '\n' | '\t') { ' ' } else { c })
        .collect()
}

const REPLACEMENT: char = '\u{fffd}';

fn needs_work(c: char) -> bool {
    c != '\n' && c != '\t' && is_control(c)
}

fn is_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After ESC: the sequence it starts, whatever its kind.
fn skip_escape(chars: &mut Chars<'_>) {
    match chars.next() {
        Some('[') => skip_csi(chars),
        Some(']' | 'P' | 'X' | '^' | '_') => skip_string(chars),
        // `ESC ( B`-style: one intermediate byte, then the final one.
        Some(' '..='/') => {
            chars.next();
        }
        // Two-byte sequences (`ESC c`, `ESC 7` …), or a lone ESC at the end.
        _ => {}
    }
}

/// CSI: parameter and intermediate bytes, then one final byte `@`–`~`.
fn skip_csi(chars: &mut Chars<'_>) {
    while let Some(&c) = chars.peek() {
        chars.next();
        if ('@'..='~').contains(&c) || !(' '..='?').contains(&c) {
            return;
        }
    }
}

/// OSC, DCS, SOS, PM, APC: up to BEL, ST (`ESC \`) or C1 ST.
fn skip_string(chars: &mut Chars<'_>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_escape_sequences_are_removed_or_replaced() {
        let cases = [
            ("plain text", "plain text"),
            ("naïve ✓ 日本", "naïve ✓ 日本"),
            ("two\nlines\tand tab", "two\nlines\tand tab"),
            ("\u{1b}[31mred\u{1b}[0m", "red"),
            ("\u{1b}[2J\u{1b}[Hcleared", "cleared"),
            ("\u{1b}[?1049hscreen", "screen"),
            ("\u{1b}]0;owned title\u{7}after", "after"),
            (
                "\u{1b}]8;;https://evil\u{1b}\\link\u{1b}]8;;\u{1b}\\",
                "link",
            ),
            ("\u{1b}Pdcs payload\u{1b}\\x", "x"),
            ("\u{1b}(Bcharset", "charset"),
            ("\u{1b}cReset", "Reset"),
            ("\u{9b}31mC1 csi", "C1 csi"),
            (
                "bell\u{7} nul\u{0} del\u{7f}",
                "bell\u{fffd} nul\u{fffd} del\u{fffd}",
            ),
            ("carriage\rreturn", "carriage\u{fffd}return"),
            ("back\u{8}space", "back\u{fffd}space"),
            ("abc\u{202e}fed", "abc\u{fffd}fed"),
            ("\u{2066}isolate\u{2069}", "\u{fffd}isolate\u{fffd}"),
            ("trailing escape \u{1b}", "trailing escape "),
            ("unterminated \u{1b}[12", "unterminated "),
            ("unterminated osc \u{1b}]0;title", "unterminated osc "),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize(input), want, "{input:?}");
        }
    }

    #[test]
    fn one_line_form_turns_breaks_and_tabs_into_spaces() {
        assert_eq!(sanitize_line("a\nb\tc\u{1b}[1m!"), "a b c!");
    }

    #[test]
    fn sanitized_text_has_no_control_characters_left() {
        let nasty: String = (0u32..0x2100)
            .filter_map(char::from_u32)
            .chain("\u{1b}[1;2;3m\u{1b}]x\u{7}".chars())
            .collect();
        let clean = sanitize_line(&nasty);
        assert!(!clean.chars().any(is_control), "{clean:?}");
    }
}
