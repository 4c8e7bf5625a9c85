//! Durations as operators type them and as agentdeck writes them: one
//! grammar for the command line, the console's dialogs, the environment
//! and the sandbox.
//!
//! A duration is a whole number of seconds (`90`), or numbers each followed
//! by a unit — `s`, `m`, `h`, `d` — one or more (`30s`, `15m`, `2h`, `1d`,
//! `1h30m`, `1h0m5s`). No sign, no fractions, no spaces inside.

use std::time::Duration;

/// Parses a duration (see the module); zero (`0`, `0s`) is one. The error
/// names the text and the forms that are accepted; a negative one is told
/// so.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration; use e.g. 30s, 15m, 2h, 1d or 1h30m");
    let t = text.trim();
    if t.is_empty() {
        return Err(bad());
    }
    if t.starts_with('-') {
        return Err(format!(
            "{text:?} is negative; durations are positive (e.g. 5m)"
        ));
    }
    if let Ok(n) = t.parse::<u64>() {
        return Ok(Duration::from_secs(n));
    }
    let mut total = 0u64;
    let mut digits = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    if !digits.is_empty() {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// [`parse_duration`], refusing zero: for what must last a while (a hold,
/// a look back).
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("{text:?} is zero; a duration must be more than 0s"));
    }
    Ok(d)
}

/// `1h30m`, `45s`, `2d3h`: the shortest form [`parse_duration`] reads
/// back (whole seconds; a fraction is dropped).
pub fn format_duration(d: Duration) -> String {
    let mut s = d.as_secs();
    if s == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, name) in [(86_400, 'd'), (3600, 'h'), (60, 'm'), (1, 's')] {
        if s >= unit {
            out.push_str(&format!("{}{name}", s / unit));
            s %= unit;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_form_either_old_grammar_took() {
        let cases: [(&str, u64); 13] = [
            // A bare number is seconds (the command line's flags).
            ("90", 90),
            ("0", 0),
            // Parts with units, in any count (the actions' and the console's).
            ("90s", 90),
            ("30s", 30),
            ("15m", 900),
            ("30m", 1800),
            ("2h", 7200),
            ("1d", 86_400),
            ("2d", 172_800),
            ("1h30m", 5400),
            ("1h0m5s", 3605),
            ("0s", 0),
            // Space around the text is not part of it.
            (" 5m ", 300),
        ];
        for (text, secs) in cases {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_malformed_duration_is_refused_naming_it_and_the_valid_forms() {
        for text in [
            "",
            "  ",
            "m",
            "5x",
            "1h30",
            "1.5h",
            "1h 30m",
            "soon",
            "99999999999999999999d",
            "999999999999999999d",
        ] {
            let e = parse_duration(text).expect_err(text);
            assert_eq!(
                e,
                format!("{text:?} is not a duration; use e.g. 30s, 15m, 2h, 1d or 1h30m"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_negative_duration_is_told_it_is_negative() {
        for text in ["-5m", "-1", " -90s"] {
            assert_eq!(
                parse_duration(text),
                Err(format!(
                    "{text:?} is negative; durations are positive (e.g. 5m)"
                ))
            );
        }
    }

    #[test]
    fn a_positive_duration_refuses_zero_and_takes_the_rest() {
        for text in ["0", "0s", "0m0s"] {
            assert_eq!(
                parse_positive_duration(text),
                Err(format!("{text:?} is zero; a duration must be more than 0s"))
            );
        }
        assert_eq!(parse_positive_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(
            parse_positive_duration("1h30m"),
            Ok(Duration::from_secs(5400))
        );
        assert!(
            parse_positive_duration("-5m")
                .expect_err("-5m")
                .contains("negative")
        );
        assert!(
            parse_positive_duration("30x")
                .expect_err("30x")
                .contains("not a duration")
        );
    }

    #[test]
    fn a_formatted_duration_is_the_shortest_that_reads_back() {
        let cases: [(u64, &str); 8] = [
            (0, "0s"),
            (1, "1s"),
            (59, "59s"),
            (60, "1m"),
            (90, "1m30s"),
            (5400, "1h30m"),
            (86_400, "1d"),
            (90_061, "1d1h1m1s"),
        ];
        for (secs, text) in cases {
            let d = Duration::from_secs(secs);
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s");
    }
}
