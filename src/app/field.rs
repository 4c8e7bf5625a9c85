//! A one-line text field on top of tui-input's editing, with the one habit
//! tui-input leaves to its user: a prefilled value is *selected*, so the
//! first character typed replaces it (as in a browser's address bar), while
//! the arrows, Home/End and Backspace keep it and edit it from the end.
//! ctrl-u clears the field.

use std::ops::Deref;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use tui_input::Input;
use tui_input::backend::crossterm::EventHandler;

/// A text field.
#[derive(Debug, Clone, Default)]
pub struct Field {
    input: Input,
    selected: bool,
}

impl Field {
    /// An empty field, or one holding text the user typed before (history):
    /// typing goes on at its end.
    pub fn new(text: String) -> Field {
        Field {
            input: Input::new(text),
            selected: false,
        }
    }

    /// A field prefilled with a suggestion: the whole value is selected and
    /// the first character typed replaces it.
    pub fn prefilled(text: String) -> Field {
        let selected = !text.is_empty();
        Field {
            input: Input::new(text),
            selected,
        }
    }

    /// Whether the whole value is selected (shown highlighted).
    pub fn selected(&self) -> bool {
        self.selected
    }

    /// Applies a key; true when the value changed.
    pub fn key(&mut self, k: KeyEvent) -> bool {
        let before = self.input.value().len();
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        let alt = k.modifiers.contains(KeyModifiers::ALT);
        if ctrl && k.code == KeyCode::Char('u') {
            let changed = !self.input.value().is_empty();
            self.input = Input::default();
            self.selected = false;
            return changed;
        }
        if self.selected {
            self.selected = false;
            if let KeyCode::Char(c) = k.code
                && !ctrl
                && !alt
            {
                self.input = Input::new(c.to_string());
                return true;
            }
        }
        let old = self.input.value().to_owned();
        self.input.handle_event(&Event::Key(k));
        before != self.input.value().len() || old != self.input.value()
    }

    /// Inserts pasted text (control characters dropped); a selected value is
    /// replaced.
    pub fn paste(&mut self, text: &str) {
        if self.selected {
            self.input = Input::default();
            self.selected = false;
        }
        for c in text.chars().filter(|c| !c.is_control()) {
            self.input.handle(tui_input::InputRequest::InsertChar(c));
        }
    }

    /// Replaces the value (a completion), cursor at its end.
    pub fn set(&mut self, text: String) {
        self.input = Input::new(text);
        self.selected = false;
    }
}

impl Deref for Field {
    type Target = Input;
    fn deref(&self) -> &Input {
        &self.input
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn typed(f: &mut Field, s: &str) {
        for c in s.chars() {
            f.key(key(KeyCode::Char(c)));
        }
    }

    #[test]
    fn typing_into_a_prefilled_field_replaces_it() {
        let mut f = Field::prefilled("1-4".into());
        assert!(f.selected());
        typed(&mut f, "2-8");
        assert_eq!(f.value(), "2-8");
        assert!(!f.selected());
    }

    #[test]
    fn arrows_and_backspace_keep_a_prefilled_value_and_edit_it_from_its_end() {
        let mut f = Field::prefilled("1-4".into());
        f.key(key(KeyCode::Backspace));
        typed(&mut f, "6");
        assert_eq!(f.value(), "1-6");

        let mut f = Field::prefilled("drift".into());
        f.key(key(KeyCode::End));
        typed(&mut f, "-1");
        assert_eq!(f.value(), "drift-1");

        let mut f = Field::prefilled("abc".into());
        f.key(key(KeyCode::Left));
        typed(&mut f, "X");
        assert_eq!(f.value(), "abXc");
    }

    #[test]
    fn ctrl_u_clears_and_history_text_is_appended_to() {
        let mut f = Field::new("tasks".into());
        assert!(!f.selected());
        typed(&mut f, " p");
        assert_eq!(f.value(), "tasks p");
        assert!(f.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL)));
        assert_eq!(f.value(), "");
    }

    #[test]
    fn a_paste_replaces_a_selected_value_without_its_control_characters() {
        let mut f = Field::prefilled("1-4".into());
        f.paste("2-\n9");
        assert_eq!(f.value(), "2-9");
        f.paste("0");
        assert_eq!(f.value(), "2-90");
    }
}
