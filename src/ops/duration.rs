//! Durations as operators type them: `90s`, `30m`, `2h`, `1h30m`, `1d`.

use std::time::Duration;

/// Parses `1h30m`-style durations (units s, m, h, d; at least one part;
/// more than zero in all). The error says what is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration; use e.g. 90s, 30m, 2h or 1h30m");
    let text_trim = text.trim();
    if text_trim.is_empty() {
        return Err(bad());
    }
    if text_trim.starts_with('-') {
        return Err(crate::cli::negative_duration(text));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text_trim.chars() {
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
    if total == 0 {
        return Err(format!("{text:?} is zero; a duration must be more than 0s"));
    }
    Ok(Duration::from_secs(total))
}

/// `1h30m`, `45s`, `2d3h`: the shortest form [`parse`] reads back.
pub fn format(d: Duration) -> String {
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
    fn durations_parse_as_typed_or_are_refused_with_examples() {
        let cases: [(&str, Option<u64>); 14] = [
            ("90s", Some(90)),
            ("30m", Some(1800)),
            ("2h", Some(7200)),
            ("1h30m", Some(5400)),
            ("1d", Some(86_400)),
            ("1h0m5s", Some(3605)),
            ("", None),
            ("30", None),
            ("m", None),
            ("-5m", None),
            ("5x", None),
            ("0m", None),
            ("1.5h", None),
            ("99999999999999999999d", None),
        ];
        for (text, want) in cases {
            let got = parse(text);
            assert_eq!(got.clone().ok(), want.map(Duration::from_secs), "{text}");
            if let Err(msg) = got {
                assert!(msg.contains(&format!("{text:?}")), "{text}: {msg}");
            }
        }
    }

    #[test]
    fn formatting_reads_back() {
        for secs in [1, 59, 60, 90, 3600, 5400, 86_400, 90_061] {
            let d = Duration::from_secs(secs);
            assert_eq!(parse(&format(d)), Ok(d), "{secs}");
        }
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
    }
}
