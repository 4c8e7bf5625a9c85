//! Freeze windows: recurring stretches of wall-clock time in which the
//! autoscaler leaves a pool's replica count alone.
//!
//! Pure: the current time is an argument, never read from a clock.
//!
//! # Semantics
//!
//! - A window is `from`–`to` (`HH:MM`, 24 h) on the weekdays it **starts** on
//!   (0 = Sunday … 6 = Saturday; an empty list means every day), read in the
//!   window's own time zone (IANA name, default UTC or whatever the caller
//!   passes as the default).
//! - `from < to`: the same-day interval `[from, to)`.
//! - `from > to`: the window crosses midnight. It covers `[from, 24:00)` on a
//!   listed day and `[00:00, to)` on the day after. So `23:00–02:00` on Friday
//!   covers Saturday 01:00, but not Friday 01:00 unless Thursday is listed too.
//! - `from == to`: 24 hours starting at `from` on each listed day (23 or 25
//!   hours of real time on a daylight-saving change).
//! - `from` is inclusive and `to` exclusive, so a window ending at 02:00 and
//!   one starting at 02:00 leave no unfrozen instant between them.
//!
//! Each occurrence is turned into an interval of real time, and an instant is
//! frozen when it lies in one. Daylight-saving changes move wall-clock times:
//!
//! - A boundary inside a skipped hour (spring forward) moves to the instant the
//!   clocks jump, so the window covers every wall-clock time of it that exists.
//!   A window entirely inside the skipped hour does not occur that day.
//! - A boundary inside a repeated hour (fall back) takes the first pass for
//!   `from` and the second pass for `to`. The window then errs on the frozen
//!   side, which is the safe one for a freeze.
//!
//! Overlapping and adjacent windows merge: [`active_freeze`] reports when the
//! whole frozen stretch ends, following chained windows across days. Searches
//! look at most [`HORIZON_DAYS`] ahead; windows that leave no gap within that
//! are reported as open-ended rather than looped over forever.

use std::fmt;

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use crate::crd::FreezeSchedule;

/// How far [`active_freeze`] and [`next_freeze`] look ahead. One week plus a
/// day, so that a window listed on a single weekday is always found.
pub const HORIZON_DAYS: i64 = 8;

/// Path of the schedule list in an AgentPool, for error messages.
const FIELD_PREFIX: &str = "spec.freezeSchedules";
const EXPECTED_TIME: &str = "HH:MM from 00:00 to 23:59";
const EXPECTED_WEEKDAY: &str = "0 (Sunday) to 6 (Saturday)";
const EXPECTED_TIME_ZONE: &str = "an IANA name such as Europe/Berlin";
/// Every weekday bit set.
const EVERY_DAY: u8 = 0b111_1111;

/// A freeze schedule from an AgentPool that did not validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FreezeError {
    #[error("{field}: {value:?} is not a time; expected {expected}")]
    InvalidTime {
        field: String,
        value: String,
        expected: String,
    },
    #[error("{field}: weekday {value} is out of range; expected {expected}")]
    WeekdayOutOfRange {
        field: String,
        value: String,
        expected: String,
    },
    #[error("{field}: unknown time zone {value:?}; expected {expected}")]
    UnknownTimeZone {
        field: String,
        value: String,
        expected: String,
    },
}

impl FreezeError {
    /// Path of the bad field, e.g. `spec.freezeSchedules[1].from`.
    pub fn field(&self) -> &str {
        match self {
            Self::InvalidTime { field, .. }
            | Self::WeekdayOutOfRange { field, .. }
            | Self::UnknownTimeZone { field, .. } => field,
        }
    }

    /// The value as the user wrote it.
    pub fn value(&self) -> &str {
        match self {
            Self::InvalidTime { value, .. }
            | Self::WeekdayOutOfRange { value, .. }
            | Self::UnknownTimeZone { value, .. } => value,
        }
    }

    /// What would have been valid.
    pub fn expected(&self) -> &str {
        match self {
            Self::InvalidTime { expected, .. }
            | Self::WeekdayOutOfRange { expected, .. }
            | Self::UnknownTimeZone { expected, .. } => expected,
        }
    }
}

/// A validated freeze schedule. Fields are private so that every instance
/// went through [`FreezeWindow::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezeWindow {
    index: usize,
    name: Option<String>,
    from: Time,
    to: Time,
    /// Bit `n` set = the window starts on weekday `n` (0 = Sunday).
    weekdays: u8,
    tz: TimeZone,
}

impl FreezeWindow {
    /// Validates schedule number `index` of a pool; `default_tz` applies when
    /// the schedule names no time zone. Reports the first problem found.
    pub fn parse(
        index: usize,
        schedule: &FreezeSchedule,
        default_tz: &TimeZone,
    ) -> Result<FreezeWindow, FreezeError> {
        Self::parse_collecting(FIELD_PREFIX, index, schedule, default_tz).map_err(|errors| {
            errors
                .into_iter()
                .next()
                .expect("a failed parse reports at least one error")
        })
    }

    /// Like [`FreezeWindow::parse`], but reports every problem, naming
    /// fields under `field_prefix` (another list of windows in the same
    /// shape, such as `spec.capacitySchedules`); the error list is never
    /// empty.
    pub(crate) fn parse_collecting(
        field_prefix: &str,
        index: usize,
        schedule: &FreezeSchedule,
        default_tz: &TimeZone,
    ) -> Result<FreezeWindow, Vec<FreezeError>> {
        let field = |name: &str| format!("{field_prefix}[{index}].{name}");
        let mut errors = Vec::new();

        let from = parse_hh_mm(&schedule.from).ok_or_else(|| FreezeError::InvalidTime {
            field: field("from"),
            value: schedule.from.clone(),
            expected: EXPECTED_TIME.to_string(),
        });
        let to = parse_hh_mm(&schedule.to).ok_or_else(|| FreezeError::InvalidTime {
            field: field("to"),
            value: schedule.to.clone(),
            expected: EXPECTED_TIME.to_string(),
        });

        let mut weekdays = 0u8;
        for (position, &day) in schedule.weekdays.iter().enumerate() {
            match u8::try_from(day) {
                Ok(day @ 0..=6) => weekdays |= 1 << day,
                _ => errors.push(FreezeError::WeekdayOutOfRange {
                    field: field(&format!("weekdays[{position}]")),
                    value: day.to_string(),
                    expected: EXPECTED_WEEKDAY.to_string(),
                }),
            }
        }
        if schedule.weekdays.is_empty() {
            weekdays = EVERY_DAY;
        }

        let tz = match &schedule.timezone {
            None => Ok(default_tz.clone()),
            Some(name) => TimeZone::get(name).map_err(|_| FreezeError::UnknownTimeZone {
                field: field("timezone"),
                value: name.clone(),
                expected: EXPECTED_TIME_ZONE.to_string(),
            }),
        };

        match (from, to, tz) {
            (Ok(from), Ok(to), Ok(tz)) if errors.is_empty() => Ok(FreezeWindow {
                index,
                name: schedule.name.clone(),
                from,
                to,
                weekdays,
                tz,
            }),
            (from, to, tz) => {
                // Report in the order the fields appear in the schedule.
                let mut all: Vec<FreezeError> =
                    [from.err(), to.err()].into_iter().flatten().collect();
                all.append(&mut errors);
                all.extend(tz.err());
                Err(all)
            }
        }
    }

    /// Position of the schedule in the pool's `freezeSchedules`.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The schedule's name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Start as minutes after midnight (0..1440).
    pub fn from_minute(&self) -> u16 {
        minute_of_day(self.from)
    }

    /// End as minutes after midnight (0..1440).
    pub fn to_minute(&self) -> u16 {
        minute_of_day(self.to)
    }

    /// Whether the window starts on `day` (in its own time zone).
    pub fn starts_on(&self, day: Weekday) -> bool {
        let bit = day.to_sunday_zero_offset();
        self.weekdays & (1 << bit) != 0
    }

    /// The time zone the window is read in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// How the window is named in messages: its name, else its field path.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("window {name:?}"),
            None => format!("freezeSchedules[{}]", self.index),
        }
    }

    /// The occurrence starting on `date` (a civil date in the window's time
    /// zone) as a half-open interval of real time, if the window starts on
    /// that day and the interval is not empty.
    fn occurrence(&self, date: Date) -> Option<(Timestamp, Timestamp)> {
        if !self.starts_on(date.weekday()) {
            return None;
        }
        let end_date = if self.to > self.from {
            date
        } else {
            date.tomorrow().ok()?
        };
        let start = resolve(&self.tz, date.to_datetime(self.from), Boundary::Start)?;
        let end = resolve(&self.tz, end_date.to_datetime(self.to), Boundary::End)?;
        (start < end).then_some((start, end))
    }

    /// Occurrences starting on the local dates from `first` to `last` days
    /// after the local date of `around`.
    pub(crate) fn occurrences_near(
        &self,
        around: Timestamp,
        first: i64,
        last: i64,
    ) -> impl Iterator<Item = (Timestamp, Timestamp)> + '_ {
        let local = around.to_zoned(self.tz.clone()).date();
        (first..=last).filter_map(move |offset| {
            let date = local.checked_add(jiff::Span::new().days(offset)).ok()?;
            self.occurrence(date)
        })
    }

    /// The occurrence containing `t` that ends last, if any.
    pub(crate) fn covering(&self, t: Timestamp) -> Option<Timestamp> {
        // An occurrence lasts at most 25 hours, so one that covers `t` started
        // on the local date of `t` or one of the two before it (two, because a
        // fall-back hour can shift local dates against real time).
        self.occurrences_near(t, -2, 0)
            .filter(|&(start, end)| start <= t && t < end)
            .map(|(_, end)| end)
            .max()
    }
}

impl fmt::Display for FreezeWindow {
    /// E.g. `Fri 23:00–02:00 Europe/Berlin`, `Mon–Fri 09:00–17:00 UTC`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = self.from.strftime("%H:%M");
        let to = self.to.strftime("%H:%M");
        let days = describe_weekdays(self.weekdays);
        let tz = tz_label(&self.tz);
        if self.from == self.to {
            write!(f, "{days} {from}–{to} (24 h) {tz}")
        } else {
            write!(f, "{days} {from}–{to} {tz}")
        }
    }
}

/// Validates every schedule of a pool, reporting every problem at once.
pub fn parse_all(
    schedules: &[FreezeSchedule],
    default_tz: &TimeZone,
) -> Result<Vec<FreezeWindow>, Vec<FreezeError>> {
    let mut windows = Vec::with_capacity(schedules.len());
    let mut errors = Vec::new();
    for (index, schedule) in schedules.iter().enumerate() {
        match FreezeWindow::parse_collecting(FIELD_PREFIX, index, schedule, default_tz) {
            Ok(window) => windows.push(window),
            Err(mut found) => errors.append(&mut found),
        }
    }
    if errors.is_empty() {
        Ok(windows)
    } else {
        Err(errors)
    }
}

/// The pool is inside a freeze.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezeStatus {
    /// Index (in `freezeSchedules`) of the window that freezes the pool now;
    /// the first listed when several do.
    pub window_index: usize,
    /// That window's name.
    pub name: Option<String>,
    /// End of the whole frozen stretch, chained windows included. When
    /// `open_ended`, only a lower bound past the search horizon.
    pub until: Timestamp,
    /// The windows leave no gap within [`HORIZON_DAYS`].
    pub open_ended: bool,
    /// One line for the console and Kubernetes Events, e.g.
    /// `frozen by window "release-freeze" (Fri 23:00–02:00 Europe/Berlin) until Sat 02:00 CET`.
    pub reason: String,
}

/// Whether `now` lies in a freeze window, and until when the pool stays
/// frozen.
pub fn active_freeze(windows: &[FreezeWindow], now: Timestamp) -> Option<FreezeStatus> {
    let mut covering = windows
        .iter()
        .filter_map(|window| window.covering(now).map(|end| (window, end)));
    let (window, first_end) = covering.next()?;
    let mut until = covering.map(|(_, end)| end).fold(first_end, Timestamp::max);

    let horizon = horizon_from(now);
    let mut chained: Vec<&FreezeWindow> = Vec::new();
    // `until` grows strictly on each round (an occurrence only counts when it
    // ends later) and the horizon bounds it, so this ends even when the
    // windows cover every hour.
    let open_ended = loop {
        if until > horizon {
            break true;
        }
        let next = windows
            .iter()
            .filter_map(|w| w.covering(until).map(|end| (w, end)))
            .filter(|&(_, end)| end > until)
            .max_by_key(|&(_, end)| end);
        match next {
            Some((next_window, end)) => {
                if !std::ptr::eq(next_window, window)
                    && !chained.iter().any(|w| std::ptr::eq(*w, next_window))
                {
                    chained.push(next_window);
                }
                until = end;
            }
            None => break false,
        }
    };

    let mut reason = format!("frozen by {} ({window})", window.label());
    if open_ended {
        reason.push_str(&format!(" with no gap in the next {HORIZON_DAYS} days"));
    } else {
        let zoned = until.to_zoned(window.tz.clone());
        // A weekday alone is ambiguous once the end is about a week away.
        let pattern = if until.duration_since(now) >= SignedDuration::from_hours(6 * 24) {
            "%a %Y-%m-%d %H:%M %Z"
        } else {
            "%a %H:%M %Z"
        };
        reason.push_str(&format!(" until {}", zoned.strftime(pattern)));
    }
    if !chained.is_empty() {
        let labels: Vec<String> = chained.iter().map(|w| w.label()).collect();
        reason.push_str(&format!(", chained with {}", labels.join(", ")));
    }

    Some(FreezeStatus {
        window_index: window.index,
        name: window.name.clone(),
        until,
        open_ended,
        reason,
    })
}

/// When the pool next goes from unfrozen to frozen: the earliest window start
/// after `now`, or, while frozen, the first start after the current stretch
/// (windows chained into the current stretch do not count). `None` when no
/// window starts within [`HORIZON_DAYS`] or the freeze never ends within it.
pub fn next_freeze(windows: &[FreezeWindow], now: Timestamp) -> Option<Timestamp> {
    let after = match active_freeze(windows, now) {
        Some(status) if status.open_ended => return None,
        Some(status) => status.until,
        None => now,
    };
    let horizon = horizon_from(now);
    windows
        .iter()
        .flat_map(|window| window.occurrences_near(after, -1, HORIZON_DAYS + 1))
        .map(|(start, _)| start)
        .filter(|&start| start > after && start <= horizon)
        .min()
}

pub(crate) fn horizon_from(now: Timestamp) -> Timestamp {
    now.checked_add(SignedDuration::from_hours(HORIZON_DAYS * 24))
        .unwrap_or(Timestamp::MAX)
}

/// Which end of a window a wall-clock time is.
#[derive(Clone, Copy)]
enum Boundary {
    Start,
    End,
}

/// The instant a window boundary falls on (see the module doc for daylight
/// saving). `None` only at the edges of the representable range.
fn resolve(tz: &TimeZone, dt: DateTime, boundary: Boundary) -> Option<Timestamp> {
    let ambiguous = tz.to_ambiguous_timestamp(dt);
    match ambiguous.offset() {
        AmbiguousOffset::Unambiguous { .. } => ambiguous.compatible().ok(),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the later offset, `dt` lands before the jump; the
            // next transition from there is the jump itself.
            let before_jump = after.to_timestamp(dt).ok()?;
            tz.following(before_jump)
                .next()
                .map(|transition| transition.timestamp())
                .or_else(|| ambiguous.later().ok())
        }
        AmbiguousOffset::Fold { .. } => match boundary {
            Boundary::Start => ambiguous.earlier().ok(),
            Boundary::End => ambiguous.later().ok(),
        },
    }
}

/// Strict `HH:MM`, 00:00 to 23:59, as the CRD's pattern demands.
fn parse_hh_mm(s: &str) -> Option<Time> {
    let b = s.as_bytes();
    if b.len() != 5 || b[2] != b':' {
        return None;
    }
    let two_digits = |hi: u8, lo: u8| -> Option<i8> {
        if !(hi.is_ascii_digit() && lo.is_ascii_digit()) {
            return None;
        }
        i8::try_from((hi - b'0') * 10 + (lo - b'0')).ok()
    };
    let hour = two_digits(b[0], b[1])?;
    let minute = two_digits(b[3], b[4])?;
    // Time::new rejects hour > 23 and minute > 59.
    Time::new(hour, minute, 0, 0).ok()
}

fn minute_of_day(t: Time) -> u16 {
    // hour() is 0..=23 and minute() 0..=59 by construction of `Time`.
    u16::try_from(t.hour()).unwrap_or(0) * 60 + u16::try_from(t.minute()).unwrap_or(0)
}

/// Name of a time zone for messages: IANA name, else its fixed offset.
pub(crate) fn tz_label(tz: &TimeZone) -> String {
    match tz.iana_name() {
        Some(name) => name.to_string(),
        None => tz
            .to_fixed_offset()
            .map(|offset| offset.to_string())
            .unwrap_or_else(|_| "local time".to_string()),
    }
}

/// `daily`, `Fri`, `Mon–Fri`, `Sat,Sun`: Monday first, runs of three or more
/// days collapsed into a range.
fn describe_weekdays(bits: u8) -> String {
    if bits == EVERY_DAY {
        return "daily".to_string();
    }
    const NAMES: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    let monday_first = [1usize, 2, 3, 4, 5, 6, 0];
    let listed: Vec<usize> = monday_first
        .iter()
        .enumerate()
        .filter(|&(_, &day)| bits & (1 << day) != 0)
        .map(|(position, _)| position)
        .collect();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < listed.len() {
        let mut j = i;
        while j + 1 < listed.len() && listed[j + 1] == listed[j] + 1 {
            j += 1;
        }
        let name = |position: usize| NAMES[monday_first[listed[position]]];
        if j - i >= 2 {
            parts.push(format!("{}–{}", name(i), name(j)));
        } else {
            parts.extend((i..=j).map(|k| name(k).to_string()));
        }
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(from: &str, to: &str, weekdays: &[i32], timezone: Option<&str>) -> FreezeSchedule {
        FreezeSchedule {
            name: None,
            from: from.to_string(),
            to: to.to_string(),
            weekdays: weekdays.to_vec(),
            timezone: timezone.map(str::to_string),
        }
    }

    fn window(from: &str, to: &str, weekdays: &[i32], timezone: Option<&str>) -> FreezeWindow {
        FreezeWindow::parse(0, &schedule(from, to, weekdays, timezone), &TimeZone::UTC)
            .expect("test schedule is valid")
    }

    fn named(mut w: FreezeWindow, index: usize, name: &str) -> FreezeWindow {
        w.index = index;
        w.name = Some(name.to_string());
        w
    }

    /// An instant from an RFC 3339 string (`Z` or an offset).
    fn at(s: &str) -> Timestamp {
        s.parse().expect("test timestamp parses")
    }

    /// An instant from a zoned string such as `2025-03-30T03:00[Europe/Berlin]`.
    fn zoned(s: &str) -> Timestamp {
        s.parse::<jiff::Zoned>()
            .expect("test zoned datetime parses")
            .timestamp()
    }

    const SUN: i32 = 0;
    const MON: i32 = 1;
    const WED: i32 = 3;
    const THU: i32 = 4;
    const FRI: i32 = 5;
    const SAT: i32 = 6;

    /// Runs `(instant, frozen?)` cases against one set of windows.
    fn check_frozen(windows: &[FreezeWindow], cases: &[(&str, bool)]) {
        for &(instant, expected) in cases {
            let status = active_freeze(windows, at(instant));
            assert_eq!(
                status.is_some(),
                expected,
                "at {instant}: expected frozen={expected}, got {status:?}"
            );
        }
    }

    // 2025-01-10 is a Friday.

    #[test]
    fn a_same_day_window_includes_from_and_excludes_to() {
        let windows = [window("09:00", "17:00", &[FRI], None)];
        check_frozen(
            &windows,
            &[
                ("2025-01-10T08:59:59Z", false),
                ("2025-01-10T09:00:00Z", true),
                ("2025-01-10T12:00:00Z", true),
                ("2025-01-10T16:59:59Z", true),
                ("2025-01-10T17:00:00Z", false),
                ("2025-01-09T12:00:00Z", false),
                ("2025-01-11T12:00:00Z", false),
                ("2025-01-17T12:00:00Z", true),
            ],
        );
    }

    #[test]
    fn a_same_day_window_is_frozen_until_its_end() {
        let windows = [window("09:00", "17:00", &[FRI], None)];
        let status = active_freeze(&windows, at("2025-01-10T10:00:00Z")).expect("frozen");
        assert_eq!(status.until, at("2025-01-10T17:00:00Z"));
        assert!(!status.open_ended);
    }

    #[test]
    fn a_window_crossing_midnight_belongs_to_the_day_it_starts_on() {
        let windows = [window("23:00", "02:00", &[FRI], None)];
        check_frozen(
            &windows,
            &[
                ("2025-01-10T22:59:59Z", false),
                ("2025-01-10T23:00:00Z", true),
                ("2025-01-10T23:30:00Z", true),
                ("2025-01-11T01:00:00Z", true),
                ("2025-01-11T01:59:59Z", true),
                ("2025-01-11T02:00:00Z", false),
                // Friday morning is the tail of a Thursday window, not listed.
                ("2025-01-10T01:00:00Z", false),
                ("2025-01-11T23:30:00Z", false),
            ],
        );
        let status = active_freeze(&windows, at("2025-01-10T23:30:00Z")).expect("frozen");
        assert_eq!(status.until, at("2025-01-11T02:00:00Z"));
    }

    #[test]
    fn a_window_crossing_midnight_covers_friday_morning_when_thursday_is_listed() {
        let windows = [window("23:00", "02:00", &[THU, FRI], None)];
        check_frozen(
            &windows,
            &[
                ("2025-01-10T01:00:00Z", true),
                ("2025-01-10T02:00:00Z", false),
                ("2025-01-11T01:00:00Z", true),
                ("2025-01-12T01:00:00Z", false),
            ],
        );
    }

    #[test]
    fn a_window_ending_at_midnight_ends_as_the_next_day_begins() {
        let windows = [window("22:00", "00:00", &[FRI], None)];
        check_frozen(
            &windows,
            &[
                ("2025-01-10T21:59:59Z", false),
                ("2025-01-10T22:00:00Z", true),
                ("2025-01-10T23:59:59Z", true),
                ("2025-01-11T00:00:00Z", false),
            ],
        );
    }

    #[test]
    fn empty_weekdays_mean_every_day() {
        let windows = [window("09:00", "10:00", &[], None)];
        let cases: Vec<(String, bool)> = (5..=11)
            .flat_map(|day| {
                [
                    (format!("2025-01-{day:02}T09:30:00Z"), true),
                    (format!("2025-01-{day:02}T10:30:00Z"), false),
                ]
            })
            .collect();
        let cases: Vec<(&str, bool)> = cases.iter().map(|(s, f)| (s.as_str(), *f)).collect();
        check_frozen(&windows, &cases);
    }

    #[test]
    fn listing_every_weekday_is_the_same_as_listing_none() {
        let all = window("09:00", "10:00", &[0, 1, 2, 3, 4, 5, 6], None);
        let none = window("09:00", "10:00", &[], None);
        assert_eq!(all, none);
        assert_eq!(all.to_string(), "daily 09:00–10:00 UTC");
    }

    #[test]
    fn from_equal_to_is_a_full_day_starting_at_from() {
        // 2025-01-08 is a Wednesday.
        let windows = [window("06:00", "06:00", &[WED], None)];
        check_frozen(
            &windows,
            &[
                ("2025-01-08T05:59:59Z", false),
                ("2025-01-08T06:00:00Z", true),
                ("2025-01-08T23:00:00Z", true),
                ("2025-01-09T05:59:59Z", true),
                ("2025-01-09T06:00:00Z", false),
            ],
        );
        let status = active_freeze(&windows, at("2025-01-08T12:00:00Z")).expect("frozen");
        assert_eq!(status.until, at("2025-01-09T06:00:00Z"));
    }

    #[test]
    fn a_berlin_window_is_read_in_berlin_time_at_a_utc_instant() {
        let windows = [window("23:00", "02:00", &[FRI], Some("Europe/Berlin"))];
        check_frozen(
            &windows,
            &[
                // Winter, CET = UTC+1.
                ("2025-01-10T21:30:00Z", false),
                ("2025-01-10T22:00:00Z", true),
                ("2025-01-11T00:59:59Z", true),
                ("2025-01-11T01:00:00Z", false),
                // Summer, CEST = UTC+2.
                ("2025-07-11T21:00:00Z", true),
                ("2025-07-11T20:59:59Z", false),
                ("2025-07-11T23:59:59Z", true),
                ("2025-07-12T00:00:00Z", false),
            ],
        );
        let status = active_freeze(&windows, at("2025-01-10T22:30:00Z")).expect("frozen");
        assert_eq!(status.until, at("2025-01-11T01:00:00Z"));
    }

    #[test]
    fn weekdays_are_evaluated_in_the_window_time_zone() {
        // Saturday 03:00 UTC is still Friday 22:00 in New York.
        let windows = [window("21:00", "23:00", &[FRI], Some("America/New_York"))];
        check_frozen(
            &windows,
            &[
                ("2025-01-11T03:00:00Z", true),
                ("2025-01-10T22:00:00Z", false),
                ("2025-01-11T04:00:00Z", false),
            ],
        );
    }

    #[test]
    fn a_new_york_working_day_window_follows_eastern_time() {
        let windows = [window(
            "09:00",
            "17:00",
            &[1, 2, 3, 4, 5],
            Some("America/New_York"),
        )];
        check_frozen(
            &windows,
            &[
                // 2025-01-13 is a Monday, EST = UTC-5.
                ("2025-01-13T13:59:59Z", false),
                ("2025-01-13T14:00:00Z", true),
                ("2025-01-13T21:59:59Z", true),
                ("2025-01-13T22:00:00Z", false),
                // 2025-07-14 is a Monday, EDT = UTC-4.
                ("2025-07-14T13:00:00Z", true),
                ("2025-07-14T21:00:00Z", false),
                // Saturday.
                ("2025-01-11T15:00:00Z", false),
            ],
        );
    }

    #[test]
    fn a_window_starting_in_the_skipped_hour_starts_when_the_clocks_jump() {
        // Berlin skips 02:00–03:00 on Sunday 2025-03-30 (01:00 UTC).
        let windows = [window("02:00", "04:00", &[SUN], Some("Europe/Berlin"))];
        check_frozen(
            &windows,
            &[
                ("2025-03-30T00:59:59Z", false),
                ("2025-03-30T01:00:00Z", true),
                ("2025-03-30T01:59:59Z", true),
                ("2025-03-30T02:00:00Z", false),
            ],
        );
        let status = active_freeze(&windows, at("2025-03-30T01:30:00Z")).expect("frozen");
        assert_eq!(status.until, zoned("2025-03-30T04:00[Europe/Berlin]"));
    }

    #[test]
    fn a_window_ending_in_the_skipped_hour_ends_when_the_clocks_jump() {
        let windows = [window("01:00", "02:30", &[SUN], Some("Europe/Berlin"))];
        let status = active_freeze(&windows, at("2025-03-30T00:30:00Z")).expect("frozen");
        assert_eq!(status.until, at("2025-03-30T01:00:00Z"));
        assert!(active_freeze(&windows, at("2025-03-30T01:00:00Z")).is_none());
    }

    #[test]
    fn a_window_inside_the_skipped_hour_does_not_occur_that_day() {
        let windows = [window("02:15", "02:45", &[SUN], Some("Europe/Berlin"))];
        for minute in 0..120 {
            let t = at("2025-03-30T00:00:00Z")
                .checked_add(SignedDuration::from_mins(minute))
                .expect("in range");
            assert!(active_freeze(&windows, t).is_none(), "frozen at {t}");
        }
        assert_eq!(
            next_freeze(&windows, at("2025-03-29T12:00:00Z")),
            Some(zoned("2025-04-06T02:15[Europe/Berlin]"))
        );
    }

    #[test]
    fn a_window_over_the_repeated_hour_covers_both_passes() {
        // New York repeats 01:00–02:00 on Sunday 2025-11-02:
        // 01:00 EDT = 05:00 UTC, 01:00 EST = 06:00 UTC.
        let windows = [window("01:00", "01:30", &[SUN], Some("America/New_York"))];
        check_frozen(
            &windows,
            &[
                ("2025-11-02T04:59:59Z", false),
                ("2025-11-02T05:00:00Z", true),
                ("2025-11-02T06:15:00Z", true),
                ("2025-11-02T06:30:00Z", false),
            ],
        );
    }

    #[test]
    fn a_full_day_window_on_a_fall_back_day_lasts_twenty_five_hours() {
        let windows = [window("00:00", "00:00", &[SUN], Some("America/New_York"))];
        let start = zoned("2025-11-02T00:00[America/New_York]");
        let status = active_freeze(&windows, start).expect("frozen");
        assert_eq!(
            status.until.duration_since(start),
            SignedDuration::from_hours(25)
        );
    }

    #[test]
    fn overlapping_windows_freeze_until_the_later_end() {
        let windows = [
            named(window("09:00", "12:00", &[], None), 0, "morning"),
            named(window("11:00", "14:00", &[], None), 1, "midday"),
        ];
        let cases = [
            ("2025-01-10T10:00:00Z", 0, "2025-01-10T14:00:00Z"),
            ("2025-01-10T11:30:00Z", 0, "2025-01-10T14:00:00Z"),
            ("2025-01-10T13:00:00Z", 1, "2025-01-10T14:00:00Z"),
        ];
        for (instant, index, until) in cases {
            let status = active_freeze(&windows, at(instant)).expect("frozen");
            assert_eq!(status.window_index, index, "at {instant}");
            assert_eq!(status.until, at(until), "at {instant}");
        }
        assert!(active_freeze(&windows, at("2025-01-10T14:00:00Z")).is_none());
    }

    #[test]
    fn chained_windows_freeze_until_the_first_gap() {
        let windows = [
            named(window("22:00", "00:00", &[FRI], None), 0, "evening"),
            named(window("00:00", "03:00", &[SAT], None), 1, "night"),
            named(window("03:00", "05:00", &[SAT], None), 2, "early"),
            named(window("06:00", "07:00", &[SAT], None), 3, "after-gap"),
        ];
        let status = active_freeze(&windows, at("2025-01-10T23:00:00Z")).expect("frozen");
        assert_eq!(status.window_index, 0);
        assert_eq!(status.name.as_deref(), Some("evening"));
        assert_eq!(status.until, at("2025-01-11T05:00:00Z"));
        assert_eq!(
            status.reason,
            "frozen by window \"evening\" (Fri 22:00–00:00 UTC) until Sat 05:00 UTC, \
             chained with window \"night\", window \"early\""
        );
        assert_eq!(
            next_freeze(&windows, at("2025-01-10T23:00:00Z")),
            Some(at("2025-01-11T06:00:00Z"))
        );
    }

    #[test]
    fn windows_that_never_leave_a_gap_are_reported_as_open_ended() {
        let configs = [
            vec![window("00:00", "00:00", &[], None)],
            vec![
                window("00:00", "12:00", &[], None),
                window("12:00", "00:00", &[], None),
            ],
        ];
        let now = at("2025-01-10T10:00:00Z");
        for windows in configs {
            let status = active_freeze(&windows, now).expect("frozen");
            assert!(status.open_ended, "{windows:?}");
            assert!(
                status.until > now + SignedDuration::from_hours(HORIZON_DAYS * 24),
                "{status:?}"
            );
            assert!(
                status.reason.contains("with no gap in the next 8 days"),
                "{}",
                status.reason
            );
            assert_eq!(next_freeze(&windows, now), None);
        }
    }

    #[test]
    fn a_freeze_of_nearly_a_week_shows_the_date_it_ends() {
        let windows = [window("00:00", "00:00", &[1, 2, 3, 4, 5, 6], None)];
        // Monday 2025-01-06 00:00 to Sunday 2025-01-12 00:00.
        let status = active_freeze(&windows, at("2025-01-06T00:00:00Z")).expect("frozen");
        assert!(!status.open_ended);
        assert_eq!(
            status.reason,
            "frozen by freezeSchedules[0] (Mon–Sat 00:00–00:00 (24 h) UTC) until Sun 2025-01-12 00:00 UTC"
        );
    }

    #[test]
    fn the_reason_names_the_window_its_hours_and_the_local_end() {
        let windows = [named(
            window("23:00", "02:00", &[FRI], Some("Europe/Berlin")),
            0,
            "release-freeze",
        )];
        let status =
            active_freeze(&windows, zoned("2025-01-10T23:30[Europe/Berlin]")).expect("frozen");
        assert_eq!(
            status.reason,
            "frozen by window \"release-freeze\" (Fri 23:00–02:00 Europe/Berlin) until Sat 02:00 CET"
        );
    }

    #[test]
    fn an_unnamed_window_is_named_by_its_field_path() {
        let mut w = window("09:00", "17:00", &[MON], None);
        w.index = 3;
        let status = active_freeze(&[w], at("2025-01-13T10:00:00Z")).expect("frozen");
        assert_eq!(status.window_index, 3);
        assert_eq!(status.name, None);
        assert_eq!(
            status.reason,
            "frozen by freezeSchedules[3] (Mon 09:00–17:00 UTC) until Mon 17:00 UTC"
        );
    }

    #[test]
    fn no_windows_never_freeze() {
        assert_eq!(active_freeze(&[], at("2025-01-10T10:00:00Z")), None);
        assert_eq!(next_freeze(&[], at("2025-01-10T10:00:00Z")), None);
    }

    #[test]
    fn next_freeze_is_the_earliest_upcoming_start() {
        let windows = [
            window("23:00", "02:00", &[FRI], None),
            window("09:00", "10:00", &[THU], Some("Europe/Berlin")),
        ];
        let cases = [
            // Wednesday: Thursday 09:00 Berlin comes first.
            ("2025-01-08T12:00:00Z", "2025-01-09T08:00:00Z"),
            // Thursday after the Berlin window: Friday 23:00 UTC.
            ("2025-01-09T12:00:00Z", "2025-01-10T23:00:00Z"),
            // Inside the Friday window: the next freeze is next Thursday.
            ("2025-01-11T01:00:00Z", "2025-01-16T08:00:00Z"),
            // Exactly at a start, that start is now, not next.
            ("2025-01-10T23:00:00Z", "2025-01-16T08:00:00Z"),
        ];
        for (now, expected) in cases {
            assert_eq!(
                next_freeze(&windows, at(now)),
                Some(at(expected)),
                "from {now}"
            );
        }
    }

    #[test]
    fn next_freeze_finds_a_weekly_window_that_just_ended() {
        let windows = [window("09:00", "17:00", &[FRI], None)];
        assert_eq!(
            next_freeze(&windows, at("2025-01-10T17:00:00Z")),
            Some(at("2025-01-17T09:00:00Z"))
        );
    }

    #[test]
    fn windows_describe_their_days_hours_and_zone() {
        let cases = [
            (
                window("23:00", "02:00", &[FRI], Some("Europe/Berlin")),
                "Fri 23:00–02:00 Europe/Berlin",
            ),
            (
                window("09:00", "17:00", &[1, 2, 3, 4, 5], None),
                "Mon–Fri 09:00–17:00 UTC",
            ),
            (
                window("09:00", "17:00", &[SAT, SUN], None),
                "Sat,Sun 09:00–17:00 UTC",
            ),
            (
                window("09:00", "17:00", &[MON, WED, THU], None),
                "Mon,Wed,Thu 09:00–17:00 UTC",
            ),
            (
                window("09:00", "17:00", &[MON, 2, 3, FRI, SAT, SUN], None),
                "Mon–Wed,Fri–Sun 09:00–17:00 UTC",
            ),
            (
                window("06:00", "06:00", &[WED], None),
                "Wed 06:00–06:00 (24 h) UTC",
            ),
            (window("00:00", "23:59", &[], None), "daily 00:00–23:59 UTC"),
        ];
        for (w, expected) in cases {
            assert_eq!(w.to_string(), expected);
        }
    }

    #[test]
    fn parse_keeps_name_index_minutes_and_weekdays() {
        let s = FreezeSchedule {
            name: Some("release".to_string()),
            ..schedule("23:15", "01:05", &[FRI, FRI, SAT], None)
        };
        let w = FreezeWindow::parse(2, &s, &TimeZone::UTC).expect("valid");
        assert_eq!(w.index(), 2);
        assert_eq!(w.name(), Some("release"));
        assert_eq!(w.from_minute(), 23 * 60 + 15);
        assert_eq!(w.to_minute(), 65);
        assert!(w.starts_on(Weekday::Friday));
        assert!(w.starts_on(Weekday::Saturday));
        assert!(!w.starts_on(Weekday::Sunday));
        assert_eq!(w.time_zone().iana_name(), Some("UTC"));
    }

    #[test]
    fn a_schedule_without_a_time_zone_uses_the_default() {
        let berlin = TimeZone::get("Europe/Berlin").expect("tz database has Berlin");
        let w =
            FreezeWindow::parse(0, &schedule("09:00", "10:00", &[], None), &berlin).expect("valid");
        assert_eq!(w.time_zone().iana_name(), Some("Europe/Berlin"));
        check_frozen(
            &[w],
            &[
                ("2025-01-10T08:30:00Z", true),
                ("2025-01-10T09:30:00Z", false),
            ],
        );
    }

    #[test]
    fn parse_rejects_bad_values_naming_field_value_and_what_is_valid() {
        let cases: [(FreezeSchedule, &str, &str, &str); 13] = [
            (
                schedule("25:00", "02:00", &[], None),
                "spec.freezeSchedules[1].from",
                "25:00",
                r#"spec.freezeSchedules[1].from: "25:00" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("24:00", "02:00", &[], None),
                "spec.freezeSchedules[1].from",
                "24:00",
                r#"spec.freezeSchedules[1].from: "24:00" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("09:00", "12:60", &[], None),
                "spec.freezeSchedules[1].to",
                "12:60",
                r#"spec.freezeSchedules[1].to: "12:60" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("7", "02:00", &[], None),
                "spec.freezeSchedules[1].from",
                "7",
                r#"spec.freezeSchedules[1].from: "7" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("09:00", "", &[], None),
                "spec.freezeSchedules[1].to",
                "",
                r#"spec.freezeSchedules[1].to: "" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("9:00", "10:00", &[], None),
                "spec.freezeSchedules[1].from",
                "9:00",
                r#"spec.freezeSchedules[1].from: "9:00" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("09:00:00", "10:00", &[], None),
                "spec.freezeSchedules[1].from",
                "09:00:00",
                r#"spec.freezeSchedules[1].from: "09:00:00" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("09.00", "10:00", &[], None),
                "spec.freezeSchedules[1].from",
                "09.00",
                r#"spec.freezeSchedules[1].from: "09.00" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("+9:00", "10:00", &[], None),
                "spec.freezeSchedules[1].from",
                "+9:00",
                r#"spec.freezeSchedules[1].from: "+9:00" is not a time; expected HH:MM from 00:00 to 23:59"#,
            ),
            (
                schedule("09:00", "10:00", &[1, 7], None),
                "spec.freezeSchedules[1].weekdays[1]",
                "7",
                "spec.freezeSchedules[1].weekdays[1]: weekday 7 is out of range; expected 0 (Sunday) to 6 (Saturday)",
            ),
            (
                schedule("09:00", "10:00", &[-1], None),
                "spec.freezeSchedules[1].weekdays[0]",
                "-1",
                "spec.freezeSchedules[1].weekdays[0]: weekday -1 is out of range; expected 0 (Sunday) to 6 (Saturday)",
            ),
            (
                schedule("09:00", "10:00", &[], Some("Mars/Base")),
                "spec.freezeSchedules[1].timezone",
                "Mars/Base",
                r#"spec.freezeSchedules[1].timezone: unknown time zone "Mars/Base"; expected an IANA name such as Europe/Berlin"#,
            ),
            (
                schedule("09:00", "10:00", &[], Some("")),
                "spec.freezeSchedules[1].timezone",
                "",
                r#"spec.freezeSchedules[1].timezone: unknown time zone ""; expected an IANA name such as Europe/Berlin"#,
            ),
        ];
        for (s, field, value, message) in cases {
            let error = FreezeWindow::parse(1, &s, &TimeZone::UTC).expect_err("invalid schedule");
            assert_eq!(error.field(), field, "{s:?}");
            assert_eq!(error.value(), value, "{s:?}");
            assert_eq!(error.to_string(), message, "{s:?}");
            assert!(message.ends_with(error.expected()), "{s:?}");
        }
    }

    #[test]
    fn parse_all_reports_every_error_of_every_schedule() {
        let schedules = [
            schedule("09:00", "10:00", &[], None),
            schedule("25:00", "10:00", &[9], Some("Mars/Base")),
            schedule("09:00", "12:60", &[], None),
        ];
        let errors = parse_all(&schedules, &TimeZone::UTC).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(FreezeError::field).collect();
        assert_eq!(
            fields,
            [
                "spec.freezeSchedules[1].from",
                "spec.freezeSchedules[1].weekdays[0]",
                "spec.freezeSchedules[1].timezone",
                "spec.freezeSchedules[2].to",
            ]
        );
    }

    #[test]
    fn parse_all_returns_windows_in_order_with_their_indices() {
        let schedules = [
            schedule("09:00", "10:00", &[], None),
            schedule("23:00", "02:00", &[FRI], Some("Europe/Berlin")),
        ];
        let windows = parse_all(&schedules, &TimeZone::UTC).expect("valid");
        let indices: Vec<usize> = windows.iter().map(FreezeWindow::index).collect();
        assert_eq!(indices, [0, 1]);
        assert_eq!(parse_all(&[], &TimeZone::UTC), Ok(vec![]));
    }

    #[test]
    fn instants_at_the_edges_of_time_do_not_panic() {
        let windows = [
            window("23:00", "02:00", &[], Some("Europe/Berlin")),
            window("00:00", "00:00", &[], None),
        ];
        for t in [Timestamp::MIN, Timestamp::MAX] {
            let _ = active_freeze(&windows, t);
            let _ = next_freeze(&windows, t);
        }
    }
}
