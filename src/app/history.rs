//! The last hour of each pool, as the console observed it: queue length
//! (pending tasks), desired and ready replicas and fresh agents, one
//! sample per [`STEP`] taken from the snapshots it receives, and the
//! pool's scaling decisions from its Events. Pure: time is the snapshot's
//! `built`, so it is tested without sleeping.
//!
//! Snapshots are sent when something changed, not on a timer: between two
//! samples a pool's values are the earlier sample's, and the last sample's
//! values hold until now.

use std::collections::{BTreeMap, VecDeque};

use jiff::Timestamp;

use super::rows::{EventRow, PoolRow, Snapshot};

/// One sample at most per this many seconds (the later observation in a
/// step replaces the earlier one, so the sample is the step's last word).
pub const STEP_SECS: i64 = 5;
/// How far back samples are kept.
pub const WINDOW_SECS: i64 = 3600;
/// Samples kept per pool: one hour of steps (and the one in force an hour
/// ago).
pub const CAPACITY: usize = (WINDOW_SECS / STEP_SECS) as usize;
/// Pools followed at most (about 17 KiB each); a pool beyond is not drawn.
pub const MAX_POOLS: usize = 256;

/// What one pool looked like at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Seconds since the Unix epoch.
    pub at: i64,
    /// Pending tasks.
    pub queue: i32,
    pub desired: i32,
    pub ready: i32,
    pub fresh: i32,
}

impl Sample {
    pub fn of(at: i64, p: &PoolRow) -> Sample {
        Sample {
            at,
            queue: p.pending,
            desired: p.desired,
            ready: p.ready,
            fresh: p.fresh,
        }
    }
}

/// Every pool's last hour, by pool key (`namespace/name`).
#[derive(Clone, Debug, Default)]
pub struct History {
    pools: BTreeMap<String, VecDeque<Sample>>,
}

impl History {
    /// Samples the pools of `snap` at its `built` time: pools no longer in
    /// it are dropped, a new pool starts its own history.
    pub fn observe(&mut self, snap: &Snapshot) {
        let Some(built) = snap.built else { return };
        let at = built.as_second();
        let shown: std::collections::BTreeSet<&str> =
            snap.pools.iter().map(|p| p.key.as_str()).collect();
        self.pools.retain(|k, _| shown.contains(k.as_str()));
        for p in &snap.pools {
            self.record(&p.key, Sample::of(at, p));
        }
    }

    /// Adds `s` to the history of `key`.
    pub fn record(&mut self, key: &str, s: Sample) {
        if !self.pools.contains_key(key) {
            if self.pools.len() >= MAX_POOLS {
                return;
            }
            self.pools.insert(key.to_owned(), VecDeque::new());
        }
        let Some(ring) = self.pools.get_mut(key) else {
            return;
        };
        match ring.back_mut() {
            // A clock that went back: what was seen later stands.
            Some(last) if s.at < last.at => return,
            Some(last) if s.at.div_euclid(STEP_SECS) == last.at.div_euclid(STEP_SECS) => {
                *last = s;
            }
            _ => ring.push_back(s),
        }
        // The oldest sample kept is the one in force an hour ago.
        while ring.len() > CAPACITY + 1 || (ring.len() > 1 && ring[1].at <= s.at - WINDOW_SECS) {
            ring.pop_front();
        }
    }

    /// The samples of the pools in `namespace` (`pool`: that one only),
    /// as a support bundle keeps them (`history/pools.json`): per pool
    /// key, `[{at, queue, desired, ready, fresh}]`, `at` in RFC 3339.
    pub fn export(&self, namespace: &str, pool: Option<&str>) -> serde_json::Value {
        let pools: serde_json::Map<String, serde_json::Value> = self
            .pools
            .iter()
            .filter(|(k, _)| match k.split_once('/') {
                Some((ns, name)) => ns == namespace && pool.is_none_or(|p| p == name),
                None => false,
            })
            .map(|(k, ring)| {
                let samples = ring
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "at": Timestamp::from_second(s.at).map(|t| t.to_string()).unwrap_or_default(),
                            "queue": s.queue, "desired": s.desired, "ready": s.ready, "fresh": s.fresh,
                        })
                    })
                    .collect();
                (k.clone(), serde_json::Value::Array(samples))
            })
            .collect();
        serde_json::json!({"stepSeconds": STEP_SECS, "windowSeconds": WINDOW_SECS, "pools": pools})
    }

    /// The history [`History::export`] wrote; samples that do not read
    /// are left out.
    pub fn import(v: &serde_json::Value) -> History {
        let mut h = History::default();
        for (key, samples) in v["pools"].as_object().into_iter().flatten() {
            for s in samples.as_array().into_iter().flatten() {
                let Some(at) = s["at"].as_str().and_then(|t| t.parse::<Timestamp>().ok()) else {
                    continue;
                };
                let n = |f: &str| {
                    s[f].as_i64()
                        .and_then(|v| i32::try_from(v).ok())
                        .unwrap_or(0)
                };
                h.record(
                    key,
                    Sample {
                        at: at.as_second(),
                        queue: n("queue"),
                        desired: n("desired"),
                        ready: n("ready"),
                        fresh: n("fresh"),
                    },
                );
            }
        }
        h
    }

    /// The samples of `key`, oldest first.
    pub fn samples(&self, key: &str) -> Option<&VecDeque<Sample>> {
        self.pools.get(key)
    }

    /// Pools followed.
    pub fn len(&self) -> usize {
        self.pools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// `value` of the pool `key` over the hour before `now` in `n` equal
    /// columns, oldest first: each the highest value in force during its
    /// span (a sample's value holds until the next one), `None` before the
    /// first sample.
    pub fn columns(
        &self,
        key: &str,
        now: Timestamp,
        n: usize,
        value: impl Fn(&Sample) -> i32,
    ) -> Vec<Option<i32>> {
        match self.samples(key) {
            Some(s) => columns(s, now.as_second(), n, value),
            None => vec![None; n],
        }
    }
}

/// See [`History::columns`].
pub fn columns(
    samples: &VecDeque<Sample>,
    now: i64,
    n: usize,
    value: impl Fn(&Sample) -> i32,
) -> Vec<Option<i32>> {
    let start = now - WINDOW_SECS;
    // Column i spans [start + i·W/n, start + (i+1)·W/n).
    let edge = |i: usize| start + (WINDOW_SECS * i as i64) / n.max(1) as i64;
    let mut out = Vec::with_capacity(n);
    let mut next = 0;
    // The value in force when a column begins.
    let mut held: Option<i32> = None;
    for i in 0..n {
        let (from, to) = (edge(i), edge(i + 1));
        while next < samples.len() && samples[next].at < from {
            held = Some(value(&samples[next]));
            next += 1;
        }
        let mut top = held;
        while next < samples.len() && samples[next].at < to {
            let v = value(&samples[next]);
            top = Some(top.map_or(v, |t| t.max(v)));
            held = Some(v);
            next += 1;
        }
        // Nothing after now is drawn; a sample in the future belongs to now.
        if i + 1 == n {
            while next < samples.len() {
                let v = value(&samples[next]);
                top = Some(top.map_or(v, |t| t.max(v)));
                next += 1;
            }
        }
        out.push(top);
    }
    out
}

/// Eight heights of a bar, lowest first.
pub const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// One character per column scaled to the highest: zero is `▁`, any
/// other value `▂` to `█`, no data a space.
pub fn sparkline(cols: &[Option<i32>]) -> String {
    let top = cols.iter().flatten().copied().max().unwrap_or(0).max(0);
    cols.iter()
        .map(|c| match *c {
            None => ' ',
            Some(v) if v <= 0 || top == 0 => BARS[0],
            Some(v) => {
                // 1..=7 above the lowest bar, rounded up: the peak is `█`.
                let level = (v.unsigned_abs() * 7)
                    .div_ceil(top.unsigned_abs())
                    .clamp(1, 7);
                BARS[level as usize]
            }
        })
        .collect()
}

/// What kind of scaling decision an Event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The controller added replicas.
    Up,
    /// The controller removed replicas.
    Down,
    /// An operator's scale, hold, or a hold or freeze that began or ended.
    Other,
    /// A capacity window opened or closed.
    Window,
}

impl Decision {
    /// Its mark on the time axis (a character, so it reads with `NO_COLOR`).
    pub fn mark(self) -> char {
        match self {
            Decision::Up => '▲',
            Decision::Down => '▼',
            Decision::Other => '◆',
            Decision::Window => '◇',
        }
    }

    /// The decision an Event with `reason` records, if it records one.
    pub fn of(reason: &str) -> Option<Decision> {
        Some(match reason {
            "ScaledUp" => Decision::Up,
            "ScaledDown" => Decision::Down,
            "OperatorScaled" | "OperatorHeld" | "OperatorHoldCleared" | "HoldEnded" | "Frozen" => {
                Decision::Other
            }
            "CapacityWindowOpened" | "CapacityWindowClosed" => Decision::Window,
            _ => return None,
        })
    }
}

/// The scaling decisions of the pool `namespace/name` in the hour before
/// `now`, oldest first, from the Events of the snapshot.
pub fn decisions<'a>(
    events: &'a [std::sync::Arc<EventRow>],
    context: &str,
    namespace: &str,
    name: &str,
    now: Timestamp,
) -> Vec<(Timestamp, Decision, &'a EventRow)> {
    let from = now.as_second() - WINDOW_SECS;
    let object = format!("agentpool/{name}");
    let mut out: Vec<_> = events
        .iter()
        .filter(|e| &*e.context == context && e.namespace == namespace && e.object == object)
        .filter_map(|e| {
            let d = Decision::of(&e.reason)?;
            let at = e.last?;
            (at.as_second() >= from).then_some((at, d, &**e))
        })
        .collect();
    out.sort_by_key(|(at, _, _)| *at);
    out
}

/// The column of `n` over the hour before `now` that `at` falls in.
pub fn column_of(at: Timestamp, now: Timestamp, n: usize) -> Option<usize> {
    let ago = now.as_second() - at.as_second();
    if !(0..=WINDOW_SECS).contains(&ago) || n == 0 {
        return None;
    }
    let from_start = WINDOW_SECS - ago;
    Some(((from_start * n as i64) / WINDOW_SECS).min(n as i64 - 1) as usize)
}

impl super::App {
    /// `i`: the selected pool's last hour, drawn; in a pool's tasks or
    /// agents, that pool's.
    pub(super) fn open_pool_history(&mut self) -> Vec<super::Command> {
        use super::{Screen, ViewKind};
        let found = match self.table_kind() {
            Some((ViewKind::Pools, _)) => self
                .selected_index(ViewKind::Pools)
                .and_then(|i| self.snapshot.pools.get(i)),
            Some((_, Some(pool))) => self
                .snapshot
                .pools
                .iter()
                .find(|p| super::fleet::in_pool(&***p, pool)),
            _ => None,
        };
        match found.map(|p| (p.context.to_string(), p.namespace.clone(), p.name.clone())) {
            Some((context, namespace, name)) => self.go(Screen::PoolHistory {
                context,
                namespace,
                name,
            }),
            None => {
                self.toast(
                    "the last hour is drawn for a pool: select one in the pools view (1)".into(),
                    false,
                );
                Vec::new()
            }
        }
    }

    /// `j`/`k` in a pool's history: the next or previous pool of the pools
    /// view, in its order and filter, in place (`Esc` goes back to the
    /// pools with that pool selected).
    pub(super) fn pool_history_step(&mut self, delta: i64) {
        use super::{Screen, ViewKind};
        let kind = ViewKind::Pools;
        if self.tables[kind.index()].stale {
            self.refilter(kind, true);
        }
        let Screen::PoolHistory {
            context,
            namespace,
            name,
        } = self.screen().clone()
        else {
            return;
        };
        let key = super::fleet::key_in(&context, &format!("{namespace}/{name}"));
        let pools = &self.snapshot.pools;
        let t = &self.tables[kind.index()];
        let n = t.visible.len() as i64;
        if n == 0 {
            return;
        }
        let at = t
            .visible
            .iter()
            .position(|&i| pools.get(i as usize).is_some_and(|p| p.key == key));
        let next = at.map_or(0, |a| (a as i64 + delta).clamp(0, n - 1) as usize);
        let Some(p) = t.visible.get(next).and_then(|&i| pools.get(i as usize)) else {
            return;
        };
        let screen = Screen::PoolHistory {
            context: p.context.to_string(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        };
        self.tables[kind.index()].selected = next;
        self.clamp(kind);
        self.history[self.at] = screen;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_history_exported_for_a_bundle_imports_as_it_was() {
        let mut h = History::default();
        for (i, q) in [3, 5, 0].iter().enumerate() {
            let at = 1_764_000_000 + i as i64 * STEP_SECS;
            h.record(
                "team-a/p",
                Sample {
                    at,
                    queue: *q,
                    desired: 2,
                    ready: 1,
                    fresh: 1,
                },
            );
            h.record(
                "team-b/q",
                Sample {
                    at,
                    queue: 9,
                    desired: 9,
                    ready: 9,
                    fresh: 9,
                },
            );
        }
        let v = h.export("team-a", None);
        assert!(v["pools"].get("team-b/q").is_none(), "{v}");
        let back = History::import(&v);
        assert_eq!(back.samples("team-a/p"), h.samples("team-a/p"));
        assert_eq!(back.len(), 1);
        assert_eq!(
            h.export("team-a", Some("other"))["pools"],
            serde_json::json!({})
        );
    }

    use super::*;

    fn s(at: i64, queue: i32) -> Sample {
        Sample {
            at,
            queue,
            desired: 1,
            ready: 1,
            fresh: 1,
        }
    }

    const T0: i64 = 1_795_000_000;

    #[test]
    fn one_sample_per_step_the_steps_last_word() {
        let mut h = History::default();
        for i in 0..60 {
            // A snapshot every second for a minute, the queue counting up.
            h.record("ns/p", s(T0 + i, i as i32));
        }
        let got = h.samples("ns/p").expect("followed");
        assert_eq!(got.len(), 60 / STEP_SECS as usize, "{got:?}");
        // Each step keeps its last observation.
        assert_eq!(got.back().map(|x| x.queue), Some(59));
        assert!(got.iter().all(|x| x.queue % 5 == 4), "{got:?}");
    }

    #[test]
    fn an_hour_is_kept_and_no_more() {
        let mut h = History::default();
        for i in 0..3 * CAPACITY as i64 {
            h.record("ns/p", s(T0 + i * STEP_SECS, 1));
        }
        let got = h.samples("ns/p").expect("followed");
        assert!(got.len() <= CAPACITY + 1, "{}", got.len());
        let span = got.back().expect("one").at - got.front().expect("one").at;
        assert_eq!(span, WINDOW_SECS, "the sample in force an hour ago stays");
    }

    #[test]
    fn a_pool_that_is_gone_is_dropped_and_the_pools_followed_are_capped() {
        let mut h = History::default();
        for i in 0..MAX_POOLS + 10 {
            h.record(&format!("ns/p{i}"), s(T0, 1));
        }
        assert_eq!(h.len(), MAX_POOLS);
        let now = crate::app::fixtures::now();
        let snap = crate::app::rows::build(
            &crate::app::fixtures::sources(now, 4),
            now,
            &crate::health::FreshnessThresholds {
                stale_after: std::time::Duration::from_secs(20),
                offline_after: std::time::Duration::from_secs(60),
            },
        );
        h.observe(&snap);
        let keys: Vec<&str> = snap.pools.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(h.len(), keys.len(), "only the pools of the snapshot");
        for k in keys {
            assert_eq!(h.samples(k).map(VecDeque::len), Some(1), "{k}");
        }
        let mut gone = snap.clone();
        gone.pools.retain(|p| p.name != "platform");
        gone.built = Some(now + jiff::SignedDuration::from_secs(10));
        h.observe(&gone);
        assert!(
            h.samples(&format!("{}/platform", crate::app::fixtures::NS))
                .is_none()
        );
        assert_eq!(h.len(), gone.pools.len());
    }

    #[test]
    fn across_a_gap_the_last_value_holds_and_nothing_is_invented_before_the_first() {
        let now = T0 + WINDOW_SECS;
        let mut ring = VecDeque::new();
        // First seen half an hour ago with 4 queued, then nothing for 20
        // minutes (no change), then 8 for a moment, then 0.
        ring.push_back(s(now - 1800, 4));
        ring.push_back(s(now - 600, 8));
        ring.push_back(s(now - 595, 0));
        let cols = columns(&ring, now, 12, |x| x.queue);
        assert_eq!(
            cols,
            [
                None,
                None,
                None,
                None,
                None,
                None,
                Some(4),
                Some(4),
                Some(4),
                Some(4),
                Some(8),
                Some(0)
            ]
        );
        assert_eq!(sparkline(&cols), "      ▅▅▅▅█▁");
        // A gap within the ring: the samples either side of it stay.
        let mut h = History::default();
        h.record("ns/p", s(T0, 3));
        h.record("ns/p", s(T0 + 1500, 5));
        assert_eq!(h.samples("ns/p").map(VecDeque::len), Some(2));
        // A clock that went back is ignored.
        h.record("ns/p", s(T0 + 10, 9));
        assert_eq!(
            h.samples("ns/p").and_then(|r| r.back()).map(|x| x.queue),
            Some(5)
        );
    }

    #[test]
    fn decisions_are_marked_in_their_column() {
        let now = crate::app::fixtures::now();
        let n = 60;
        assert_eq!(column_of(now, now, n), Some(n - 1));
        assert_eq!(
            column_of(now - jiff::SignedDuration::from_secs(3600), now, n),
            Some(0)
        );
        assert_eq!(
            column_of(now - jiff::SignedDuration::from_secs(1800), now, n),
            Some(30)
        );
        assert_eq!(
            column_of(now - jiff::SignedDuration::from_secs(3601), now, n),
            None
        );
        assert_eq!(Decision::of("ScaledUp"), Some(Decision::Up));
        assert_eq!(Decision::of("CapacityWindowOpened"), Some(Decision::Window));
        assert_eq!(Decision::of("CapacityWindowClosed"), Some(Decision::Window));
        assert_eq!(Decision::of("BackOff"), None);
    }
}
