//! Capacity windows: recurring stretches of wall-clock time in which a
//! pool's replica bounds are the window's own (`spec.capacitySchedules`),
//! so that agents are warm when people work and none run at night.
//!
//! Pure: the current time is an argument, never read from a clock.
//!
//! # Semantics
//!
//! - A window's times read as a freeze window's do ([`crate::plan::freeze`]:
//!   `from` inclusive, `to` exclusive, crossing midnight when `to < from`,
//!   weekdays it starts on, its own time zone, daylight-saving gaps and
//!   folds resolved the same way), except that `from == to` is refused: a
//!   bound for the whole day is the pool's own `minReplicas`.
//! - While a window is open, its `minReplicas` replaces the pool's and its
//!   `maxReplicas` (or the pool's, when it sets none) replaces the pool's.
//! - Where several windows are open, the highest minimum and the highest
//!   maximum apply. Each window promises capacity to someone (the office
//!   hours, the release night): the highest minimum keeps every promise, and
//!   the highest maximum takes away no room a window grants. Each window's
//!   minimum is at most its maximum, so the highest minimum is at most the
//!   highest maximum: the combination is always a valid pair of bounds,
//!   whatever the order the windows are listed in.
//! - How the bounds meet the rest of the autoscaler (freeze, hold, drain,
//!   the stabilization window at a close) is in [`crate::plan::autoscale`].

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::freeze::{self, FreezeWindow, HORIZON_DAYS};
use crate::crd::{CapacitySchedule, CapacityStatus};

/// Path of the schedule list in an AgentPool, for error messages.
const FIELD_PREFIX: &str = "spec.capacitySchedules";
/// Most replicas a bound may name, as the CRD's range says.
const MOST_REPLICAS: i32 = crate::crd::MAX_REPLICAS;

/// A capacity schedule from an AgentPool that did not validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value} is not valid; expected {expected}")]
pub struct CapacityError {
    /// Path of the bad field, e.g. `spec.capacitySchedules[1].minReplicas`.
    pub field: String,
    /// The value as the user wrote it.
    pub value: String,
    /// What would have been valid.
    pub expected: String,
}

/// A validated capacity schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityWindow {
    times: FreezeWindow,
    min: u32,
    max: Option<u32>,
}

impl CapacityWindow {
    /// Position of the schedule in the pool's `capacitySchedules`.
    pub fn index(&self) -> usize {
        self.times.index()
    }

    /// The schedule's name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.times.name()
    }

    /// How the window is named in messages: its name, else its field path.
    pub fn label(&self) -> String {
        match self.times.name() {
            Some(name) => name.to_string(),
            None => format!("capacitySchedules[{}]", self.index()),
        }
    }

    /// Its minimum while open.
    pub fn min_replicas(&self) -> u32 {
        self.min
    }

    /// Its own maximum, if it sets one.
    pub fn max_replicas(&self) -> Option<u32> {
        self.max
    }

    /// Its days, hours and time zone (`Mon–Fri 09:00–18:00 Europe/Berlin`).
    pub fn times(&self) -> &FreezeWindow {
        &self.times
    }

    /// The window's bounds over a pool whose own maximum is `pool_max`.
    fn bounds(&self, pool_max: u32) -> Bounds {
        Bounds {
            min: self.min,
            max: self.max.unwrap_or(pool_max),
        }
    }
}

/// Validates every capacity schedule of a pool whose own maximum is
/// `pool_max`, reporting every problem at once; `default_tz` applies to a
/// schedule that names no time zone.
pub fn parse_all(
    schedules: &[CapacitySchedule],
    pool_max: i32,
    default_tz: &TimeZone,
) -> Result<Vec<CapacityWindow>, Vec<CapacityError>> {
    let mut windows = Vec::with_capacity(schedules.len());
    let mut errors = Vec::new();
    for (index, schedule) in schedules.iter().enumerate() {
        match parse_one(index, schedule, pool_max, default_tz) {
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

fn parse_one(
    index: usize,
    schedule: &CapacitySchedule,
    pool_max: i32,
    default_tz: &TimeZone,
) -> Result<CapacityWindow, Vec<CapacityError>> {
    let field = |name: &str| format!("{FIELD_PREFIX}[{index}].{name}");
    let error = |name: &str, value: String, expected: String| CapacityError {
        field: field(name),
        value,
        expected,
    };
    let times = FreezeWindow::parse_collecting(FIELD_PREFIX, index, &schedule.times(), default_tz)
        .map_err(|found| {
            found
                .into_iter()
                .map(|e| CapacityError {
                    field: e.field().to_string(),
                    value: e.value().to_string(),
                    expected: e.expected().to_string(),
                })
                .collect::<Vec<_>>()
        });
    let mut errors = Vec::new();
    if let Ok(times) = &times
        && times.from_minute() == times.to_minute()
    {
        errors.push(error(
            "to",
            schedule.to.clone(),
            format!(
                "a time other than from ({}); a bound for the whole day is spec.minReplicas",
                schedule.from
            ),
        ));
    }
    let in_range = |v: i32| (0..=MOST_REPLICAS).contains(&v);
    let min = schedule.min_replicas;
    if !in_range(min) {
        errors.push(error(
            "minReplicas",
            min.to_string(),
            format!("0 to {MOST_REPLICAS}"),
        ));
    }
    match schedule.max_replicas {
        Some(max) if !in_range(max) => errors.push(error(
            "maxReplicas",
            max.to_string(),
            format!("0 to {MOST_REPLICAS}"),
        )),
        Some(max) if min > max => errors.push(error(
            "minReplicas",
            min.to_string(),
            format!("a value less than or equal to the window's maxReplicas ({max})"),
        )),
        None if min > pool_max => errors.push(error(
            "minReplicas",
            min.to_string(),
            format!(
                "a value less than or equal to spec.maxReplicas ({pool_max}), or a maxReplicas of the window's own"
            ),
        )),
        _ => {}
    }
    match times {
        Ok(times) if errors.is_empty() => Ok(CapacityWindow {
            times,
            min: clamp_u32(min),
            max: schedule.max_replicas.map(clamp_u32),
        }),
        Ok(_) => Err(errors),
        Err(mut found) => {
            found.append(&mut errors);
            Err(found)
        }
    }
}

fn clamp_u32(v: i32) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(0)
}

/// A pair of replica bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: u32,
    pub max: u32,
}

/// The capacity windows open at one instant, combined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenCapacity {
    /// The highest minimum and the highest maximum of the open windows.
    pub bounds: Bounds,
    /// Where the minimum comes from, for reasons:
    /// `capacity window all-day (until 23:59 UTC)` (the window with the
    /// highest minimum, the first listed on a tie).
    pub min_from: String,
    /// Where the maximum comes from, when a window's own maximum is the
    /// highest; `None` when it is the pool's.
    pub max_from: Option<String>,
    /// Labels of the open windows, in the order they are listed.
    pub open: Vec<String>,
}

/// The windows open at `now` and the bounds they set over a pool whose own
/// maximum is `pool_max`; `None` when no window is open.
pub fn open_at(windows: &[CapacityWindow], pool_max: u32, now: Timestamp) -> Option<OpenCapacity> {
    let open: Vec<(&CapacityWindow, Timestamp)> = windows
        .iter()
        .filter_map(|w| w.times.covering(now).map(|end| (w, end)))
        .collect();
    if open.is_empty() {
        return None;
    }
    let source = |(w, end): (&CapacityWindow, Timestamp)| {
        let local = end.to_zoned(w.times.time_zone().clone());
        format!(
            "capacity window {} (until {})",
            w.label(),
            local.strftime("%H:%M %Z")
        )
    };
    // `max_by_key` keeps the last of equals; the first listed should win.
    let first_highest = |key: &dyn Fn(&CapacityWindow) -> u32| {
        open.iter()
            .copied()
            .rev()
            .max_by_key(|(w, _)| key(w))
            .expect("at least one window is open")
    };
    let by_min = first_highest(&|w| w.min);
    let by_max = first_highest(&|w| w.bounds(pool_max).max);
    Some(OpenCapacity {
        bounds: Bounds {
            min: by_min.0.min,
            max: by_max.0.bounds(pool_max).max,
        },
        min_from: source(by_min),
        max_from: by_max.0.max.is_some().then(|| source(by_max)),
        open: open.iter().map(|(w, _)| w.label()).collect(),
    })
}

/// The bounds in force at `t`: the open windows', else the pool's.
pub fn bounds_at(windows: &[CapacityWindow], pool: Bounds, t: Timestamp) -> Bounds {
    open_at(windows, pool.max, t).map_or(pool, |open| open.bounds)
}

/// A window opening or closing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityEdge {
    pub at: Timestamp,
    /// Position of the window in `capacitySchedules`.
    pub window: usize,
    /// The window's label.
    pub label: String,
    /// Opens (else closes) at `at`.
    pub opens: bool,
}

/// Every opening and closing of `windows` after `from` and up to `to`,
/// earliest first (at one instant, closings before openings).
pub fn edges_between(
    windows: &[CapacityWindow],
    from: Timestamp,
    to: Timestamp,
) -> Vec<CapacityEdge> {
    if to <= from {
        return Vec::new();
    }
    let days = to.duration_since(from).as_hours() / 24 + 1;
    let mut edges: Vec<CapacityEdge> = windows
        .iter()
        .flat_map(|w| {
            w.times
                .occurrences_near(from, -2, days + 1)
                .flat_map(move |(start, end)| {
                    [(start, true), (end, false)].map(|(at, opens)| CapacityEdge {
                        at,
                        window: w.index(),
                        label: w.label(),
                        opens,
                    })
                })
        })
        .filter(|e| e.at > from && e.at <= to)
        .collect();
    edges.sort_by_key(|e| (e.at, e.opens, e.window));
    edges.dedup();
    edges
}

/// The next time the bounds change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityChange {
    pub at: Timestamp,
    /// The bounds from then on.
    pub then: Bounds,
    /// The windows open from then on, if any.
    pub then_open: Option<OpenCapacity>,
}

/// The first instant after `now` (within [`HORIZON_DAYS`]) at which the
/// bounds over `pool` differ from the bounds at `now`: when the controller
/// must decide again. A window closing as another with the same bounds
/// opens is no change.
pub fn next_change(
    windows: &[CapacityWindow],
    pool: Bounds,
    now: Timestamp,
) -> Option<CapacityChange> {
    let current = bounds_at(windows, pool, now);
    let horizon = freeze::horizon_from(now);
    edges_between(windows, now, horizon)
        .into_iter()
        .map(|edge| edge.at)
        .find(|&at| bounds_at(windows, pool, at) != current)
        .map(|at| CapacityChange {
            at,
            then: bounds_at(windows, pool, at),
            then_open: open_at(windows, pool.max, at),
        })
}

/// One line for the status, `agentdeck status` and the console: the open
/// window and the next change (`office-hours: min 4 until 18:00, then 0`),
/// or the next window to open (`none open; office-hours from Mon 09:00: min 4`).
/// Times are the windows' own wall-clock times. `None` without windows.
pub fn summary(windows: &[CapacityWindow], pool: Bounds, now: Timestamp) -> Option<String> {
    let first = windows.first()?;
    let open = open_at(windows, pool.max, now);
    let change = next_change(windows, pool, now);
    let current = open.as_ref().map_or(pool, |o| o.bounds);
    let show_max =
        current.max != pool.max || change.as_ref().is_some_and(|c| c.then.max != pool.max);
    let describe = |b: Bounds| {
        if show_max {
            format!("min {}, max {}", b.min, b.max)
        } else {
            format!("min {}", b.min)
        }
    };
    // Times read in the zone of the window the line is about.
    let zone_of = |label: Option<&str>| {
        label
            .and_then(|l| windows.iter().find(|w| w.label() == l))
            .unwrap_or(first)
            .times
            .time_zone()
            .clone()
    };
    let when = |at: Timestamp, tz: TimeZone| {
        let local = at.to_zoned(tz.clone());
        if local.date() == now.to_zoned(tz).date() {
            local.strftime("%H:%M").to_string()
        } else {
            local.strftime("%a %H:%M").to_string()
        }
    };
    let line = match (open, change) {
        (Some(open), change) => {
            let tz = zone_of(open.open.first().map(String::as_str));
            let head = format!("{}: {}", open.open.join("+"), describe(open.bounds));
            match change {
                None => format!("{head} (no change in the next {HORIZON_DAYS} days)"),
                Some(c) => {
                    let then = match &c.then_open {
                        Some(next) => format!("{}: {}", next.open.join("+"), describe(c.then)),
                        None if show_max => describe(c.then),
                        None => c.then.min.to_string(),
                    };
                    format!("{head} until {}, then {then}", when(c.at, tz))
                }
            }
        }
        (None, Some(c)) => match &c.then_open {
            Some(next) => {
                let tz = zone_of(next.open.first().map(String::as_str));
                format!(
                    "none open; {} from {}: {}",
                    next.open.join("+"),
                    when(c.at, tz),
                    describe(c.then)
                )
            }
            None => format!("none open; {}", describe(c.then)),
        },
        (None, None) => format!("none open in the next {HORIZON_DAYS} days"),
    };
    Some(line)
}

/// The pool status's account of its windows at `now`; `None` without
/// windows.
pub fn status(windows: &[CapacityWindow], pool: Bounds, now: Timestamp) -> Option<CapacityStatus> {
    let summary = summary(windows, pool, now)?;
    let open = open_at(windows, pool.max, now);
    let whole = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    Some(CapacityStatus {
        min_replicas: open.as_ref().map(|o| whole(o.bounds.min)),
        max_replicas: open.as_ref().map(|o| whole(o.bounds.max)),
        open: open.map(|o| o.open).unwrap_or_default(),
        summary,
    })
}

/// How long from `now` until `at`, for a requeue; zero when it has passed.
pub fn until(now: Timestamp, at: Timestamp) -> std::time::Duration {
    std::time::Duration::try_from(at.duration_since(now).max(SignedDuration::ZERO))
        .unwrap_or(std::time::Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOL: Bounds = Bounds { min: 0, max: 5 };

    fn schedule(name: &str, from: &str, to: &str, min: i32, max: Option<i32>) -> CapacitySchedule {
        CapacitySchedule {
            name: Some(name.to_string()),
            from: from.to_string(),
            to: to.to_string(),
            weekdays: Vec::new(),
            timezone: None,
            min_replicas: min,
            max_replicas: max,
        }
    }

    fn in_zone(mut s: CapacitySchedule, tz: &str) -> CapacitySchedule {
        s.timezone = Some(tz.to_string());
        s
    }

    fn on(mut s: CapacitySchedule, weekdays: &[i32]) -> CapacitySchedule {
        s.weekdays = weekdays.to_vec();
        s
    }

    fn windows(schedules: &[CapacitySchedule]) -> Vec<CapacityWindow> {
        parse_all(schedules, 5, &TimeZone::UTC).expect("test schedules are valid")
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("test timestamp parses")
    }

    fn zoned(s: &str) -> Timestamp {
        s.parse::<jiff::Zoned>()
            .expect("test zoned datetime parses")
            .timestamp()
    }

    fn bounds(min: u32, max: u32) -> Bounds {
        Bounds { min, max }
    }

    // 2025-01-13 is a Monday.

    #[test]
    fn a_window_sets_its_bounds_from_its_start_until_its_end() {
        let w = windows(&[schedule("office-hours", "09:00", "18:00", 4, None)]);
        for (instant, expected) in [
            ("2025-01-13T08:59:59Z", POOL),
            ("2025-01-13T09:00:00Z", bounds(4, 5)),
            ("2025-01-13T17:59:59Z", bounds(4, 5)),
            ("2025-01-13T18:00:00Z", POOL),
        ] {
            assert_eq!(bounds_at(&w, POOL, at(instant)), expected, "at {instant}");
        }
        let open = open_at(&w, 5, at("2025-01-13T12:00:00Z")).expect("open");
        assert_eq!(
            open.min_from,
            "capacity window office-hours (until 18:00 UTC)"
        );
        assert_eq!(open.max_from, None);
        assert_eq!(open.open, vec!["office-hours".to_string()]);
    }

    #[test]
    fn an_open_window_changes_at_its_close_back_to_the_pool_bounds() {
        let w = windows(&[schedule("office-hours", "09:00", "18:00", 4, None)]);
        let change = next_change(&w, POOL, at("2025-01-13T12:00:00Z")).expect("a change");
        assert_eq!(change.at, at("2025-01-13T18:00:00Z"));
        assert_eq!(change.then, POOL);
        assert_eq!(change.then_open, None);
        assert_eq!(
            summary(&w, POOL, at("2025-01-13T12:00:00Z")).as_deref(),
            Some("office-hours: min 4 until 18:00, then 0")
        );
    }

    #[test]
    fn a_closed_window_is_the_next_change_and_says_when_it_opens() {
        let w = windows(&[on(
            schedule("office-hours", "09:00", "18:00", 4, None),
            &[1, 2, 3, 4, 5],
        )]);
        // Saturday noon: the next opening is Monday's.
        let now = at("2025-01-11T12:00:00Z");
        let change = next_change(&w, POOL, now).expect("a change");
        assert_eq!(change.at, at("2025-01-13T09:00:00Z"));
        assert_eq!(change.then, bounds(4, 5));
        assert_eq!(
            summary(&w, POOL, now).as_deref(),
            Some("none open; office-hours from Mon 09:00: min 4")
        );
        assert_eq!(
            summary(&w, POOL, at("2025-01-13T07:00:00Z")).as_deref(),
            Some("none open; office-hours from 09:00: min 4")
        );
    }

    #[test]
    fn overlapping_windows_take_the_highest_min_and_the_highest_max() {
        let w = windows(&[
            schedule("office-hours", "09:00", "18:00", 4, Some(6)),
            schedule("release", "16:00", "20:00", 2, Some(10)),
            schedule("standup", "09:30", "10:00", 4, Some(4)),
        ]);
        let open = open_at(&w, 5, at("2025-01-13T17:00:00Z")).expect("open");
        assert_eq!(open.bounds, bounds(4, 10));
        assert_eq!(
            open.min_from,
            "capacity window office-hours (until 18:00 UTC)"
        );
        assert_eq!(
            open.max_from.as_deref(),
            Some("capacity window release (until 20:00 UTC)")
        );
        assert_eq!(open.open, vec!["office-hours", "release"]);
        // A tie on the minimum names the first listed window.
        let open = open_at(&w, 5, at("2025-01-13T09:45:00Z")).expect("open");
        assert_eq!(open.bounds, bounds(4, 6));
        assert!(open.min_from.contains("office-hours"), "{open:?}");
        // Office hours end at 18:00 but release keeps the pool at min 2.
        let change = next_change(&w, POOL, at("2025-01-13T17:00:00Z")).expect("a change");
        assert_eq!(change.at, at("2025-01-13T18:00:00Z"));
        assert_eq!(change.then, bounds(2, 10));
        assert_eq!(
            summary(&w, POOL, at("2025-01-13T17:00:00Z")).as_deref(),
            Some("office-hours+release: min 4, max 10 until 18:00, then release: min 2, max 10")
        );
    }

    #[test]
    fn a_window_with_no_max_of_its_own_keeps_the_pool_max_in_the_combination() {
        let w = windows(&[
            schedule("quiet", "00:00", "06:00", 0, Some(1)),
            schedule("batch", "02:00", "04:00", 1, None),
        ]);
        let open = open_at(&w, 5, at("2025-01-13T03:00:00Z")).expect("open");
        assert_eq!(open.bounds, bounds(1, 5));
        assert_eq!(open.max_from, None);
        assert_eq!(
            open_at(&w, 5, at("2025-01-13T01:00:00Z")).map(|o| o.bounds),
            Some(bounds(0, 1))
        );
    }

    #[test]
    fn a_window_crossing_midnight_holds_until_the_morning_after_its_start_day() {
        // Friday 22:00 to Saturday 06:00 only; 2025-01-10 is a Friday.
        let w = windows(&[on(
            schedule("nightly-batch", "22:00", "06:00", 2, None),
            &[5],
        )]);
        for (instant, expected) in [
            ("2025-01-10T21:59:59Z", POOL),
            ("2025-01-10T22:00:00Z", bounds(2, 5)),
            ("2025-01-11T00:00:00Z", bounds(2, 5)),
            ("2025-01-11T05:59:59Z", bounds(2, 5)),
            ("2025-01-11T06:00:00Z", POOL),
            // Friday morning is a Thursday night's, which is not listed.
            ("2025-01-10T03:00:00Z", POOL),
        ] {
            assert_eq!(bounds_at(&w, POOL, at(instant)), expected, "at {instant}");
        }
        assert_eq!(
            summary(&w, POOL, at("2025-01-10T23:00:00Z")).as_deref(),
            Some("nightly-batch: min 2 until Sat 06:00, then 0")
        );
    }

    #[test]
    fn a_window_closing_as_another_with_the_same_bounds_opens_is_no_change() {
        let w = windows(&[
            schedule("day", "06:00", "18:00", 2, None),
            schedule("evening", "18:00", "22:00", 2, None),
        ]);
        let change = next_change(&w, POOL, at("2025-01-13T12:00:00Z")).expect("a change");
        assert_eq!(change.at, at("2025-01-13T22:00:00Z"));
    }

    #[test]
    fn windows_in_a_named_zone_follow_its_daylight_saving_change() {
        // Berlin springs forward on Sunday 2025-03-30: 09:00 is 08:00 UTC on
        // the Saturday before (CET) and 07:00 UTC on the Monday after (CEST).
        let w = windows(&[in_zone(
            schedule("office-hours", "09:00", "18:00", 4, None),
            "Europe/Berlin",
        )]);
        assert_eq!(bounds_at(&w, POOL, at("2025-03-29T07:30:00Z")), POOL);
        assert_eq!(
            bounds_at(&w, POOL, at("2025-03-29T08:00:00Z")),
            bounds(4, 5)
        );
        assert_eq!(
            bounds_at(&w, POOL, at("2025-03-31T07:00:00Z")),
            bounds(4, 5)
        );
        assert_eq!(bounds_at(&w, POOL, at("2025-03-31T16:00:00Z")), POOL);
        // Saturday evening, the next change is Sunday 09:00 CEST, after the jump.
        let change = next_change(&w, POOL, at("2025-03-29T20:00:00Z")).expect("a change");
        assert_eq!(change.at, zoned("2025-03-30T09:00[Europe/Berlin]"));
        assert_eq!(change.at, at("2025-03-30T07:00:00Z"));
        let open = open_at(&w, 5, at("2025-03-30T08:00:00Z")).expect("open");
        assert_eq!(
            open.min_from,
            "capacity window office-hours (until 18:00 CEST)"
        );
    }

    #[test]
    fn a_night_window_over_the_skipped_hour_is_an_hour_shorter() {
        let w = windows(&[in_zone(
            schedule("night", "01:00", "05:00", 1, None),
            "Europe/Berlin",
        )]);
        let edges = edges_between(&w, at("2025-03-29T12:00:00Z"), at("2025-03-30T12:00:00Z"));
        let times: Vec<(Timestamp, bool)> = edges.iter().map(|e| (e.at, e.opens)).collect();
        assert_eq!(
            times,
            vec![
                (at("2025-03-30T00:00:00Z"), true),
                (at("2025-03-30T03:00:00Z"), false),
            ]
        );
    }

    #[test]
    fn edges_list_openings_and_closings_in_a_stretch_earliest_first() {
        let w = windows(&[
            schedule("a", "10:00", "10:30", 1, None),
            schedule("b", "10:30", "11:00", 2, None),
        ]);
        let edges = edges_between(&w, at("2025-01-13T09:45:00Z"), at("2025-01-13T10:45:00Z"));
        let seen: Vec<(&str, bool)> = edges.iter().map(|e| (e.label.as_str(), e.opens)).collect();
        assert_eq!(seen, vec![("a", true), ("a", false), ("b", true)]);
        assert!(
            edges_between(&w, at("2025-01-13T12:00:00Z"), at("2025-01-13T11:00:00Z")).is_empty()
        );
    }

    #[test]
    fn a_pool_without_windows_has_no_summary_and_no_change() {
        assert_eq!(summary(&[], POOL, at("2025-01-13T12:00:00Z")), None);
        assert_eq!(next_change(&[], POOL, at("2025-01-13T12:00:00Z")), None);
        assert_eq!(open_at(&[], 5, at("2025-01-13T12:00:00Z")), None);
    }

    #[test]
    fn an_unnamed_window_is_named_by_its_field_path() {
        let mut s = schedule("x", "00:00", "23:59", 3, None);
        s.name = None;
        let w = windows(&[s]);
        let open = open_at(&w, 5, at("2025-01-13T12:00:00Z")).expect("open");
        assert_eq!(
            open.min_from,
            "capacity window capacitySchedules[0] (until 23:59 UTC)"
        );
    }

    #[test]
    fn parse_refuses_bad_bounds_equal_times_and_unknown_zones_naming_the_field() {
        let cases: Vec<(CapacitySchedule, &str, &str)> = vec![
            (
                schedule("w", "09:00", "18:00", 4, Some(3)),
                "spec.capacitySchedules[0].minReplicas",
                "the window's maxReplicas (3)",
            ),
            (
                schedule("w", "09:00", "18:00", 6, None),
                "spec.capacitySchedules[0].minReplicas",
                "spec.maxReplicas (5)",
            ),
            (
                schedule("w", "09:00", "09:00", 1, None),
                "spec.capacitySchedules[0].to",
                "a time other than from (09:00)",
            ),
            (
                in_zone(
                    schedule("w", "09:00", "18:00", 1, None),
                    "Mars/Olympus_Mons",
                ),
                "spec.capacitySchedules[0].timezone",
                "IANA",
            ),
            (
                schedule("w", "24:00", "18:00", 1, None),
                "spec.capacitySchedules[0].from",
                "HH:MM",
            ),
            (
                schedule("w", "09:00", "18:00", -1, None),
                "spec.capacitySchedules[0].minReplicas",
                "0 to 10000",
            ),
            (
                schedule("w", "09:00", "18:00", 1, Some(10_001)),
                "spec.capacitySchedules[0].maxReplicas",
                "0 to 10000",
            ),
        ];
        for (s, field, expected) in cases {
            let errors =
                parse_all(std::slice::from_ref(&s), 5, &TimeZone::UTC).expect_err("refused");
            assert_eq!(errors.len(), 1, "{s:?}: {errors:?}");
            assert_eq!(errors[0].field, field, "{s:?}");
            assert!(
                errors[0].expected.contains(expected),
                "{s:?}: {:?}",
                errors[0]
            );
        }
    }

    #[test]
    fn parse_reports_every_error_of_every_schedule() {
        let errors = parse_all(
            &[
                schedule("ok", "09:00", "18:00", 1, None),
                in_zone(schedule("bad", "09:00", "09:00", 9, None), "Nowhere/City"),
            ],
            5,
            &TimeZone::UTC,
        )
        .expect_err("refused");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.capacitySchedules[1].timezone",
                "spec.capacitySchedules[1].minReplicas",
            ]
        );
        // A window above the pool's max is fine with a max of its own.
        assert!(
            parse_all(
                &[schedule("big", "09:00", "18:00", 8, Some(12))],
                5,
                &TimeZone::UTC
            )
            .is_ok()
        );
    }
}
