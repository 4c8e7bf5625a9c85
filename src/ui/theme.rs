//! Colour themes: named roles (`ok`, `stale`, `selection` …), never raw
//! colours in view code. `themes/default.yaml` sets every role; other
//! themes override some. Embedded in the binary; a path to a YAML file of
//! the same shape works too. `NO_COLOR` keeps only bold/reverse.

use std::collections::BTreeMap;

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;

macro_rules! roles {
    ($( $v:ident = $name:literal, )*) => {
        /// What a piece of text is, for colouring.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Role { $( $v, )* }
        impl Role {
            pub const ALL: &'static [Role] = &[ $( Role::$v, )* ];
            pub fn name(self) -> &'static str { match self { $( Role::$v => $name, )* } }
        }
    };
}

roles! {
    Text = "text",
    Muted = "muted",
    Header = "header",
    HeaderValue = "header-value",
    Title = "title",
    Border = "border",
    Column = "column",
    Selection = "selection",
    Marked = "marked",
    Ok = "ok",
    Warn = "warn",
    Danger = "danger",
    Running = "running",
    Pending = "pending",
    Succeeded = "succeeded",
    Failed = "failed",
    Fresh = "fresh",
    Stale = "stale",
    Offline = "offline",
    Prompt = "prompt",
    Suggestion = "suggestion",
    Toast = "toast",
    ToastError = "toast-error",
    Dialog = "dialog",
    Key = "key",
    Match = "match",
}

/// The themes built in.
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../themes/default.yaml")),
    ("dark", include_str!("../../themes/default.yaml")),
    ("light", include_str!("../../themes/light.yaml")),
    (
        "high-contrast",
        include_str!("../../themes/high-contrast.yaml"),
    ),
];

#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RoleSpec {
    fg: Option<String>,
    bg: Option<String>,
    #[serde(default)]
    bold: bool,
    #[serde(default)]
    italic: bool,
    #[serde(default)]
    underline: bool,
    #[serde(default)]
    reversed: bool,
}

/// Why a theme could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ThemeError {
    #[error("theme {0:?} not found; built-in themes: {1} (or a path to a .yaml file)")]
    Unknown(String, String),
    #[error("theme {source_name}: {message}")]
    Invalid {
        source_name: String,
        message: String,
    },
}

/// Resolved styles per role.
#[derive(Clone, Debug, PartialEq)]
pub struct Theme {
    styles: BTreeMap<Role, Style>,
    pub name: String,
}

fn parse_color(s: &str) -> Result<Color, String> {
    let t = s.trim().to_ascii_lowercase();
    let named = match t.as_str() {
        "reset" | "default" => Some(Color::Reset),
        "black" => Some(Color::Black),
        "red" => Some(Color::Red),
        "green" => Some(Color::Green),
        "yellow" => Some(Color::Yellow),
        "blue" => Some(Color::Blue),
        "magenta" => Some(Color::Magenta),
        "cyan" => Some(Color::Cyan),
        "gray" | "grey" => Some(Color::Gray),
        "dark-gray" | "dark-grey" => Some(Color::DarkGray),
        "light-red" => Some(Color::LightRed),
        "light-green" => Some(Color::LightGreen),
        "light-yellow" => Some(Color::LightYellow),
        "light-blue" => Some(Color::LightBlue),
        "light-magenta" => Some(Color::LightMagenta),
        "light-cyan" => Some(Color::LightCyan),
        "white" => Some(Color::White),
        _ => None,
    };
    if let Some(c) = named {
        return Ok(c);
    }
    if let Some(hex) = t.strip_prefix('#')
        && hex.len() == 6
        && let Ok(v) = u32::from_str_radix(hex, 16)
    {
        return Ok(Color::Rgb((v >> 16) as u8, (v >> 8) as u8, v as u8));
    }
    if let Ok(i) = t.parse::<u8>() {
        return Ok(Color::Indexed(i));
    }
    Err(format!(
        "{s:?} is not a colour; expected an ANSI name (red, light-blue, dark-gray …), reset, 0-255 or #rrggbb"
    ))
}

/// A colour by its ANSI name (or `reset`), as the shipped themes write
/// every colour: the terminal's palette then decides the shade.
pub fn is_named(s: &str) -> bool {
    matches!(
        parse_color(s),
        Ok(Color::Reset
            | Color::Black
            | Color::Red
            | Color::Green
            | Color::Yellow
            | Color::Blue
            | Color::Magenta
            | Color::Cyan
            | Color::Gray
            | Color::DarkGray
            | Color::LightRed
            | Color::LightGreen
            | Color::LightYellow
            | Color::LightBlue
            | Color::LightMagenta
            | Color::LightCyan
            | Color::White)
    )
}

fn parse_file(name: &str, text: &str) -> Result<BTreeMap<Role, RoleSpec>, ThemeError> {
    let invalid = |message: String| ThemeError::Invalid {
        source_name: name.to_owned(),
        message,
    };
    let raw: BTreeMap<String, RoleSpec> =
        serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (k, v) in raw {
        let role = Role::ALL
            .iter()
            .copied()
            .find(|r| r.name() == k)
            .ok_or_else(|| {
                invalid(format!(
                    "unknown role {k:?}; roles: {}",
                    Role::ALL
                        .iter()
                        .map(|r| r.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        for c in [&v.fg, &v.bg].into_iter().flatten() {
            parse_color(c).map_err(|e| invalid(format!("{k}: {e}")))?;
        }
        out.insert(role, v);
    }
    Ok(out)
}

impl Default for Theme {
    fn default() -> Self {
        Theme::load("default", false).expect("the built-in default theme is valid")
    }
}

impl Theme {
    /// The theme `name` (built in, or a path to a YAML file) over the
    /// default; `no_color` drops every colour.
    pub fn load(name: &str, no_color: bool) -> Result<Theme, ThemeError> {
        let base = parse_file("default", BUILTIN[0].1)?;
        let over = if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            parse_file(name, text)?
        } else if name.ends_with(".yaml") || name.ends_with(".yml") || name.contains('/') {
            let text = std::fs::read_to_string(name).map_err(|e| ThemeError::Invalid {
                source_name: name.to_owned(),
                message: format!("cannot read: {e}"),
            })?;
            parse_file(name, &text)?
        } else {
            return Err(ThemeError::Unknown(
                name.to_owned(),
                BUILTIN
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        };
        let mut styles = BTreeMap::new();
        for &role in Role::ALL {
            let spec = over
                .get(&role)
                .or_else(|| base.get(&role))
                .cloned()
                .unwrap_or_default();
            let mut s = Style::default();
            if !no_color {
                if let Some(c) = spec.fg.as_deref().and_then(|c| parse_color(c).ok()) {
                    s = s.fg(c);
                }
                if let Some(c) = spec.bg.as_deref().and_then(|c| parse_color(c).ok()) {
                    s = s.bg(c);
                }
            }
            let mut m = Modifier::empty();
            if spec.bold {
                m |= Modifier::BOLD;
            }
            if spec.italic {
                m |= Modifier::ITALIC;
            }
            if spec.underline {
                m |= Modifier::UNDERLINED;
            }
            if spec.reversed {
                m |= Modifier::REVERSED;
            }
            // Without colour, what colour set apart is set apart by reversing.
            if no_color
                && matches!(
                    role,
                    Role::Selection | Role::Toast | Role::ToastError | Role::Match | Role::Dialog
                )
            {
                m |= Modifier::REVERSED;
            }
            styles.insert(role, s.add_modifier(m));
        }
        Ok(Theme {
            styles,
            name: name.to_owned(),
        })
    }

    pub fn style(&self, role: Role) -> Style {
        self.styles.get(&role).copied().unwrap_or_default()
    }
}

/// `NO_COLOR` set to anything but the empty string (no-color.org).
pub fn no_color_env() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_theme_loads_and_overrides_only_what_it_sets() {
        let base = Theme::load("default", false).expect("default");
        for (name, _) in BUILTIN {
            let t = Theme::load(name, false).expect(name);
            assert_eq!(t.styles.len(), Role::ALL.len(), "{name}");
        }
        let light = Theme::load("light", false).expect("light");
        assert_ne!(light.style(Role::Selection), base.style(Role::Selection));
        // light.yaml does not set `ok`: it is the default's.
        assert_eq!(light.style(Role::Ok), base.style(Role::Ok));
    }

    #[test]
    fn an_unknown_theme_lists_the_valid_ones() {
        let e = Theme::load("solarized", false).expect_err("unknown");
        let msg = e.to_string();
        assert!(
            msg.contains("default") && msg.contains("high-contrast"),
            "{msg}"
        );
    }

    #[test]
    fn a_bad_role_or_colour_in_a_theme_file_is_named() {
        let e = parse_file("x.yaml", "okay: {fg: green}\n").expect_err("bad role");
        assert!(e.to_string().contains("unknown role \"okay\""), "{e}");
        let e = parse_file("x.yaml", "ok: {fg: greeen}\n").expect_err("bad colour");
        assert!(
            e.to_string().contains("ok: \"greeen\" is not a colour"),
            "{e}"
        );
        assert_eq!(parse_color("#ff8000"), Ok(Color::Rgb(255, 128, 0)));
        assert_eq!(parse_color("208"), Ok(Color::Indexed(208)));
    }

    #[test]
    fn no_color_keeps_no_colour_but_still_marks_the_selection() {
        let t = Theme::load("default", true).expect("theme");
        for &r in Role::ALL {
            let s = t.style(r);
            assert_eq!((s.fg, s.bg), (None, None), "{r:?}");
        }
        assert!(
            t.style(Role::Selection)
                .add_modifier
                .contains(Modifier::REVERSED)
        );
    }

    /// The colour names a theme file uses, as written.
    fn colours_of(text: &str) -> Vec<String> {
        parse_file("t", text)
            .expect("a valid theme")
            .values()
            .flat_map(|v| [v.fg.clone(), v.bg.clone()])
            .flatten()
            .collect()
    }

    #[test]
    fn every_shipped_theme_uses_named_ansi_colours_only() {
        for (name, text) in BUILTIN {
            for c in colours_of(text) {
                assert!(
                    is_named(&c),
                    "theme {name}: {c:?} is not a named ANSI colour"
                );
            }
        }
        assert!(is_named("light-blue") && is_named("reset"));
        assert!(!is_named("#8a6d00") && !is_named("7") && !is_named("208"));
    }

    #[test]
    fn the_light_theme_has_no_pale_text_on_the_background() {
        let t = Theme::load("light", false).expect("light");
        let pale = [
            Color::White,
            Color::Gray,
            Color::Yellow,
            Color::Cyan,
            Color::LightRed,
            Color::LightGreen,
            Color::LightYellow,
            Color::LightBlue,
            Color::LightMagenta,
            Color::LightCyan,
        ];
        for &r in Role::ALL {
            let s = t.style(r);
            if s.bg.is_none() {
                assert!(
                    !s.fg.is_some_and(|c| pale.contains(&c)),
                    "{}: {:?} on a light background",
                    r.name(),
                    s.fg
                );
            } else {
                assert_ne!(s.fg, s.bg, "{}", r.name());
            }
        }
        assert_eq!(t.style(Role::Muted).fg, Some(Color::DarkGray));
    }
}
