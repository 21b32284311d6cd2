//! What a chaos run records: every event of every worker process and of the nemesis,
//! stamped on one timeline (the machine's `CLOCK_MONOTONIC`, shared by all processes),
//! as JSON lines.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::history::monotonic_ns as now_ns;

/// Converts this process's `Instant`s (also `CLOCK_MONOTONIC` on Linux) to the shared
/// timeline.
///
/// `Instant` does not expose its reading, so the two clocks are read one after the
/// other, and a process preempted between the two reads would stamp every event of its
/// run late by the length of the preemption. On a busy machine that is milliseconds (a
/// soak saw a worker's events shifted by 2.5 ms and by 47 ms, which made two holders
/// appear at once when one had released before the other was granted). So the shared
/// clock is read between two `Instant`s, many times, and the tightest bracket is kept:
/// the error is at most half of it (`error_ns`).
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    instant: Instant,
    ns: u64,
    /// At most this far off, either way.
    error_ns: u64,
}

/// Brackets tried at most; a tight one usually comes at once.
const CALIBRATIONS: usize = 1_000;
/// A bracket this tight ends the calibration.
const TIGHT: Duration = Duration::from_micros(2);

impl Timeline {
    /// Reads both clocks now, to within a few microseconds.
    pub fn new() -> Self {
        Self::calibrate(std::iter::repeat_with(|| {
            let before = Instant::now();
            let ns = now_ns();
            (before, ns, Instant::now())
        }))
    }

    /// The tightest of `readings` (an `Instant` before, the shared clock, an `Instant`
    /// after), taking the shared clock's reading to be midway.
    fn calibrate(readings: impl IntoIterator<Item = (Instant, u64, Instant)>) -> Self {
        let mut best: Option<(Duration, Instant, u64)> = None;
        for (before, ns, after) in readings.into_iter().take(CALIBRATIONS) {
            let window = after.saturating_duration_since(before);
            if best.is_none_or(|(w, ..)| window < w) {
                best = Some((window, before + window / 2, ns));
            }
            if window <= TIGHT {
                break;
            }
        }
        let (window, instant, ns) =
            best.unwrap_or_else(|| (Duration::ZERO, Instant::now(), now_ns()));
        Self {
            instant,
            ns,
            error_ns: nanos(window) / 2 + 1,
        }
    }

    /// How far this timeline may be off the shared clock, either way.
    pub fn error_ns(&self) -> u64 {
        self.error_ns
    }

    /// `at` on the shared timeline.
    pub fn ns(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.ns + nanos(after),
            None => self
                .ns
                .saturating_sub(nanos(self.instant.duration_since(at))),
        }
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One recorded event. Times are nanoseconds on the shared timeline; `worker` numbers
/// the worker process, `grant` a grant within it.
// Each variant says what its fields hold.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case")]
pub enum Event {
    /// A worker process started.
    Start { worker: u32, pid: u32, t: u64 },
    /// A worker process finished cleanly.
    End { worker: u32, t: u64 },
    /// A grant: `lock` with fencing token `fence`, requested at `t_sent` (the granting
    /// command was sent), known to the worker at `t` (the call returned), valid until
    /// `valid_until`. `grant` numbers grants within the worker.
    Grant {
        worker: u32,
        grant: u64,
        lock: String,
        fence: u64,
        /// How it was taken: `lock`, `handover`, `try_lock`, `with_lock`, `blocking`.
        how: String,
        t_sent: u64,
        t: u64,
        valid_until: u64,
    },
    /// The holder asked `is_lost()` before a write, at `t`.
    Check {
        worker: u32,
        grant: u64,
        lost: bool,
        t: u64,
    },
    /// A fenced write, sent at `t_sent`, answered at `t_done`: `written` (the store took
    /// it), `refused` (a higher token had written), or `error`. `store` says where:
    /// `guarded` (a guarded script on the lock's own server) or `fenced` (the separate
    /// fenced store, by token alone; empty in histories recorded before it was kept).
    Write {
        worker: u32,
        grant: u64,
        outcome: String,
        t_sent: u64,
        t_done: u64,
        #[serde(default)]
        store: String,
    },
    /// `lost()` fired at `t`; the lease's validity end was then `valid_until`.
    Lost {
        worker: u32,
        grant: u64,
        t: u64,
        valid_until: u64,
    },
    /// The grant ended: `released`, `not_held`, `error` (release failed), `dropped`
    /// (without release), `lost` (with_lock reported the loss). `valid_until` is the
    /// lease's validity end as its holder knew it when the release began (after the
    /// watchdog's renewals; 0 in histories recorded before it was kept).
    Release {
        worker: u32,
        grant: u64,
        outcome: String,
        t_start: u64,
        t_end: u64,
        #[serde(default)]
        valid_until: u64,
    },
    /// The holder began to give the grant up at `t`: its release (or the drop, or the
    /// end of `with_lock`'s work) starts. Recorded before the release is awaited, so a
    /// worker killed while its release is on its way still leaves it.
    Releasing { worker: u32, grant: u64, t: u64 },
    /// A call that may wait or fail (`lock`, `try_lock`, `with_lock`, `extend`,
    /// `release`, `cancelled_lock`), for the duration bounds.
    Call {
        worker: u32,
        kind: String,
        lock: String,
        /// `ok`, `held` (try_lock: None), `timeout`, `error`, `cancelled`.
        outcome: String,
        detail: String,
        t_start: u64,
        t_end: u64,
    },
    /// A fault the nemesis injected, from `t_start` to `t_end`. `forgets_locks` marks
    /// faults after which a server may have forgotten held locks (a restart without
    /// persistence, a failover), where the topology table promises no exclusion;
    /// `forgets_fences` those after which a fencing counter may have gone back. `mode`
    /// says how, where a kind has several (`client_pause`: `ALL` or `WRITE`; `acl_deny`:
    /// the command denied; `replace_server`: which server replaced which, and how the
    /// data went over); `slots` are the hash slots the faulted server served when the
    /// fault began (on a cluster; empty elsewhere, and in histories recorded before
    /// they were kept).
    Fault {
        kind: String,
        target: String,
        t_start: u64,
        t_end: u64,
        forgets_locks: bool,
        forgets_fences: bool,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        mode: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        slots: Vec<(u16, u16)>,
    },
    /// The topology the run locked on (`single`, `aof`, `cluster`, `redlock`), recorded
    /// by the run with the nemesis's events: the rules that hold on one topology only
    /// (every lease on a cluster's healthy primaries stays held) look for it.
    Topology { name: String },
    /// `suspect()` fired at `t` (a renewal failed) while the lease was still valid,
    /// until `valid_until`. Recorded for the leases whose renewals are watched (see
    /// [`Event::Renewal`]).
    Suspect {
        worker: u32,
        grant: u64,
        t: u64,
        valid_until: u64,
    },
    /// The holder saw, by `t`, its lease valid until `valid_until` (the grant's own
    /// validity end, then each one a confirmed renewal moved it to), its next renewal
    /// due at `due`. Recorded for the leases of the long-lease actor only, whose
    /// renewals fail and are retried well within the lease: there the suspect bound can
    /// be checked (a 300 ms lease is lost before a renewal's response timeout ends).
    Renewal {
        worker: u32,
        grant: u64,
        t: u64,
        valid_until: u64,
        due: u64,
    },
    /// An observer of the election `lock` (`Observer::next`, called at `t_start`) was told
    /// at `t` that the leader changed: to the one that proclaimed `value` in `term`, or
    /// (`None`) to nobody. The read that told it ran in between.
    Observed {
        worker: u32,
        lock: String,
        term: Option<u64>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        value: String,
        t_start: u64,
        t: u64,
    },
    /// The fencing tokens the store accepted for `lock`, in the order it accepted them.
    StoreLog { lock: String, fences: Vec<u64> },
    /// The nemesis moved `target`'s wall clock at `t` by `step_ms` (positive: forward), to
    /// `offset_ms` from the real time. `t` is just before it wrote the clock file and
    /// `t_done` when the write returned: the server's clock moved somewhere in between
    /// (0 in histories written before it was recorded: at `t`).
    ClockJump {
        target: String,
        t: u64,
        #[serde(default)]
        t_done: u64,
        step_ms: i64,
        offset_ms: i64,
    },
}

impl Event {
    /// The worker that recorded it, if any.
    pub fn worker(&self) -> Option<u32> {
        match self {
            Event::Start { worker, .. }
            | Event::End { worker, .. }
            | Event::Grant { worker, .. }
            | Event::Check { worker, .. }
            | Event::Write { worker, .. }
            | Event::Lost { worker, .. }
            | Event::Release { worker, .. }
            | Event::Releasing { worker, .. }
            | Event::Call { worker, .. }
            | Event::Suspect { worker, .. }
            | Event::Renewal { worker, .. }
            | Event::Observed { worker, .. } => Some(*worker),
            Event::Fault { .. }
            | Event::StoreLog { .. }
            | Event::ClockJump { .. }
            | Event::Topology { .. } => None,
        }
    }
}

/// Appends events to a file, one JSON line each, from a thread of its own: the callers
/// (a worker's runtime threads) never wait for the disk. Written through at once, each
/// event a `write`, so a worker killed by the nemesis leaves every event the thread got
/// to: all but the last microseconds' unless the disk stalls. Written by the runtime
/// threads themselves, a write could hold one of the worker's two for milliseconds (on
/// the AOF topology, with redis-server fsyncing every write to the same disk, the
/// slowest write of a 20 s schedule took up to 14 ms), which moves the very times the
/// checker bounds; how long the slowest write took is printed to the worker's log.
pub struct Recorder {
    lines: Option<std::sync::mpsc::Sender<Vec<u8>>>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// The worker's number, stamped on its events by the callers.
    pub worker: u32,
    /// This process's `Instant`s on the shared timeline.
    pub timeline: Timeline,
}

impl Recorder {
    /// Records into a new file at `path`.
    ///
    /// # Panics
    ///
    /// If the file cannot be created.
    pub fn create(path: &Path, worker: u32) -> Self {
        let mut file =
            File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        let (lines, queued) = std::sync::mpsc::channel::<Vec<u8>>();
        let writer = std::thread::spawn(move || {
            let (mut count, mut slowest) = (0u64, Duration::ZERO);
            for line in queued {
                let started = Instant::now();
                let _ = file.write_all(&line);
                slowest = slowest.max(started.elapsed());
                count += 1;
            }
            eprintln!(
                "history: {count} events written, the slowest write took {:.1} ms",
                slowest.as_secs_f64() * 1e3
            );
        });
        Self {
            lines: Some(lines),
            writer: Some(writer),
            worker,
            timeline: Timeline::new(),
        }
    }

    /// Writes `event` as one line (on the recorder's thread).
    pub fn record(&self, event: &Event) {
        let mut line = serde_json::to_vec(event).unwrap_or_default();
        line.push(b'\n');
        if let Some(lines) = &self.lines {
            let _ = lines.send(line);
        }
    }

    /// `at` on the shared timeline.
    pub fn ns(&self, at: Instant) -> u64 {
        self.timeline.ns(at)
    }
}

/// Every event recorded is in the file once the recorder is gone.
impl Drop for Recorder {
    fn drop(&mut self) {
        drop(self.lines.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Reads the events of a history file; a last line cut off by a kill is skipped.
///
/// # Panics
///
/// If the file cannot be read.
pub fn read(path: &Path) -> Vec<Event> {
    let file = File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_map_onto_the_shared_clock() {
        let timeline = Timeline::new();
        let later = Instant::now() + Duration::from_millis(5);
        let ns = timeline.ns(later);
        assert!(ns >= now_ns() + 4_000_000, "5 ms ahead of now");
        let earlier = timeline.ns(timeline
            .instant
            .checked_sub(Duration::from_millis(1))
            .unwrap());
        assert_eq!(timeline.ns - earlier, 1_000_000);
    }

    /// A reading preempted between the two clocks is not the one kept: a 3 ms stall
    /// would put every event of the process 3 ms late.
    #[test]
    fn the_tightest_bracket_is_kept_so_a_preempted_reading_is_not() {
        let base = Instant::now();
        let at = |us: u64| base + Duration::from_micros(us);
        let readings = [
            // Preempted for 3 ms after reading the Instant: the shared clock reads late.
            (at(0), 1_000_000_000 + 3_000_000, at(3_001)),
            (at(5_000), 1_000_000_000 + 5_000_000, at(5_002)),
        ];
        let timeline = Timeline::calibrate(readings);
        assert!(timeline.error_ns() <= 1_001, "{}", timeline.error_ns());
        let off = timeline.ns(at(5_001)).abs_diff(1_000_000_000 + 5_000_000);
        assert!(off <= 1_000, "{off} ns off");
        // Had the first reading been kept, the timeline would be ~1.5 ms off there.
        let first_only = Timeline::calibrate(readings.into_iter().take(1));
        assert!(first_only.ns(at(5_001)).abs_diff(1_000_000_000 + 5_000_000) > 1_000_000);
    }

    #[test]
    fn the_calibration_is_tight_on_this_machine() {
        let timeline = Timeline::new();
        assert!(
            timeline.error_ns() < 1_000_000,
            "{} ns",
            timeline.error_ns()
        );
        assert!(timeline.ns(Instant::now()).abs_diff(now_ns()) < 1_000_000);
    }

    #[test]
    fn events_round_trip_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let rec = Recorder::create(&path, 3);
        let event = Event::Grant {
            worker: 3,
            grant: 1,
            lock: "hot0".into(),
            fence: 7,
            how: "lock".into(),
            t_sent: 9,
            t: 10,
            valid_until: 20,
        };
        rec.record(&event);
        drop(rec); // its thread has written every event
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"e\":\"grant\",\"wor")
            .unwrap();
        assert_eq!(read(&path), vec![event]);
    }
}
