//! `?` help: its lines, generated from the live keymap, and how they are
//! laid out (columns side by side when the terminal is wide, scrolled when
//! they do not fit), shared by `update` (scrolling) and `ui` (drawing).

use super::keymap::{Action, Keymap, Scope};

/// One line of help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelpLine {
    /// A scope's title (Global, Tables, Logs).
    Title(Scope),
    /// Keys and the action they take.
    Entry(String, Action),
    Blank,
}

/// Width of the keys column.
pub const KEYS_WIDTH: usize = 14;
/// A help column is this wide at least, so no description is cut.
pub const COLUMN_WIDTH: u16 = 66;

/// The lines of help for `keymap` (read-only leaves out what writes).
pub fn lines(keymap: &Keymap, read_only: bool) -> Vec<HelpLine> {
    let mut out = Vec::new();
    let mut scope = None;
    for (s, keys, what) in keymap.help_actions(read_only) {
        if scope != Some(s) {
            if scope.is_some() {
                out.push(HelpLine::Blank);
            }
            out.push(HelpLine::Title(s));
            scope = Some(s);
        }
        out.push(HelpLine::Entry(keys, what));
    }
    out
}

/// The help box's inner size in a terminal of `size`: it leaves two
/// columns and one line free around it, inside its borders.
pub fn inner(size: (u16, u16)) -> (u16, u16) {
    (
        size.0.saturating_sub(4).saturating_sub(2),
        size.1.saturating_sub(2).saturating_sub(2),
    )
}

/// Columns side by side (1 to 3) and lines per column in a terminal of
/// `size`.
pub fn layout(size: (u16, u16)) -> (usize, usize) {
    let (w, h) = inner(size);
    let columns = usize::from(w / COLUMN_WIDTH).clamp(1, 3);
    (columns, usize::from(h.max(1)))
}

/// The first line shown at most: the last screenful, no further.
pub fn max_top(total: usize, size: (u16, u16)) -> usize {
    let (columns, rows) = layout(size);
    total.saturating_sub(columns * rows)
}
