//! The chaos checker, in CI: a fixed seed on every topology must show no violation, the
//! checker must catch a client with its lease deadline switched off, and every kind of
//! violation planted in a recorded history must be reported.
//!
//! The long soak is `./run chaos --topology all --minutes 30`.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lockscript_test::chaos::checker::{self, Bounds, Report};
use lockscript_test::chaos::history::{self, Event};
use lockscript_test::chaos::run::{self, CALL_SLACK, SLACK};

/// One chaos run at a time: each loads the machine's two cores on its own, and the
/// bounds it checks are timing bounds.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the chaos binary with `args`; its exit code and output.
fn chaos(args: &[&str]) -> (Option<i32>, String) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let out = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .arg("run")
        .args(args)
        .output()
        .expect("the chaos binary runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// One schedule of 20 s with a fixed seed on each topology (about 100 s in all).
#[test]
fn a_fixed_seed_on_every_topology_shows_no_violation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_string_lossy().into_owned();
    let (code, out) = chaos(&[
        "--topology",
        "all",
        "--seed",
        "7",
        "--seconds",
        "20",
        "--dir",
        &dir,
    ]);
    println!("{out}");
    if !out.contains("\n0 violations") || code != Some(0) {
        // The histories (and the workers' logs) are what tells why: keep them.
        let kept = tmp.keep();
        panic!(
            "the fixed seed failed (exit {code:?}); histories kept in {}",
            kept.display()
        );
    }
    for topology in ["single", "aof", "cluster", "redlock"] {
        assert!(
            out.contains(&format!("chaos {topology} seed 7")),
            "{topology} ran: {out}"
        );
    }
}

/// The checker is trusted because it catches a known bug: with the lease's deadline
/// switched off (the loss signalled only when a renewal is refused), a worker frozen
/// past its lease goes on writing after another was granted the lock.
#[test]
fn the_checker_catches_a_client_without_the_lease_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_string_lossy().into_owned();
    let (code, out) = chaos(&[
        "--topology",
        "single",
        "--seed",
        "1",
        "--seconds",
        "20",
        "--mutant",
        "no-deadline",
        "--dir",
        &dir,
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("VIOLATION (seed 1)")
            && (out.contains("exclusion:") || out.contains("timely loss:")),
        "the checker reports the mutant's overlaps or late losses: {out}"
    );
}

fn bounds() -> Bounds {
    Bounds {
        slack: SLACK,
        call_slack: CALL_SLACK,
        wait_timeout: Duration::from_secs(2),
        call: lockscript::DEFAULT_RESPONSE_TIMEOUT,
        drift: run::drift(Duration::from_millis(300)),
    }
}

fn kinds(report: &Report) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.kind).collect()
}

/// A recorded run (8 s on one server) is clean; each kind of violation planted in it is
/// reported, with the window that shows it.
#[test]
#[allow(clippy::too_many_lines)] // one recorded history, each plant in turn
fn planted_violations_in_a_recorded_history_are_each_reported() {
    // A recorded history with a lock granted to two workers away from every fault that
    // could excuse an overlap, to plant one in: an 8 s schedule's faults sometimes cover
    // all of it (a run on Redis 8.2 found no such pair), so the next seed is tried then.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_string_lossy().into_owned();
    let recorded = (3..6)
        .find_map(|seed: u64| {
            let seed = seed.to_string();
            let (code, out) = chaos(&[
                "--topology",
                "single",
                "--seed",
                &seed,
                "--seconds",
                "8",
                "--dir",
                &path,
            ]);
            assert_eq!(code, Some(0), "{out}");
            let recorded = read_all(&dir.path().join(format!("single-{seed}")));
            let grants: Vec<&Event> = recorded
                .iter()
                .filter(|e| matches!(e, Event::Grant { .. }))
                .collect();
            two_grants_of_one_lock(&grants, &recorded)
                .is_some()
                .then_some(recorded.clone())
        })
        .expect("seeds 3 to 5: no lock was granted to two workers away from faults");
    let clean = check(&recorded);
    assert!(clean.violations.is_empty());
    let grants: Vec<&Event> = recorded
        .iter()
        .filter(|e| matches!(e, Event::Grant { .. }))
        .collect();
    assert!(grants.len() > 50, "a busy history: {} grants", grants.len());

    // Exclusion: a holder that found its lease valid after a later grant of its lock.
    let (a, b) = two_grants_of_one_lock(&grants, &recorded).expect("found above");
    let mut planted = recorded.clone();
    planted.push(Event::Check {
        worker: worker_of(a),
        grant: grant_of(a),
        lost: false,
        t: time_of(b) + 1_000_000,
    });
    let report = check(&planted);
    assert_eq!(kinds(&report), ["exclusion"], "{:?}", report.violations);
    // The same, with a forward jump of the server's clock beyond the drift margin in
    // between: expected, reported apart.
    planted.push(Event::ClockJump {
        target: "server:0".into(),
        t: time_of(a) + 1,
        step_ms: 200,
        offset_ms: 200,
    });
    let report = check(&planted);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(
        report.explained.len(),
        clean.explained.len() + 1,
        "{:?}",
        report.explained
    );

    // Fences: a later grant with the same token.
    let mut planted = recorded.clone();
    let Event::Grant { lock, fence, t, .. } = a else {
        unreachable!()
    };
    planted.push(Event::Grant {
        worker: 99,
        grant: 1,
        lock: lock.clone(),
        fence: *fence,
        how: "lock".into(),
        t_sent: t + 10_000_000,
        t: t + 11_000_000,
        valid_until: t + 300_000_000,
    });
    let reported = kinds(&check(&planted));
    assert!(reported.contains(&"fences"), "{reported:?}");

    // Timely loss: a loss signalled 300 ms after the validity end of a lease its holder
    // had not stopped using (no release of it, nor the start of one).
    let mut planted = recorded.clone();
    let Event::Grant {
        worker,
        grant,
        valid_until,
        ..
    } = a
    else {
        unreachable!()
    };
    planted.retain(|e| {
        !matches!(e, Event::Release { worker: w, grant: g, .. }
            | Event::Releasing { worker: w, grant: g, .. }
            | Event::Lost { worker: w, grant: g, .. }
            if w == worker && g == grant)
    });
    planted.push(Event::Lost {
        worker: *worker,
        grant: *grant,
        t: valid_until + 300_000_000,
        valid_until: *valid_until,
    });
    assert_eq!(kinds(&check(&planted)), ["timely loss"]);

    // Call duration: a lock() that waited a second past its bound.
    let mut planted = recorded.clone();
    planted.push(Event::Call {
        worker: 0,
        kind: "lock".into(),
        lock: lock.clone(),
        outcome: "timeout".into(),
        detail: String::new(),
        t_start: *t,
        t_end: t + 3_600_000_000,
    });
    assert_eq!(kinds(&check(&planted)), ["call duration"]);

    // Stale write: the fenced store took a write of `a` after one of a newer grant.
    let mut planted = recorded.clone();
    let end = planted.iter().filter_map(history_times).max().unwrap_or(0);
    planted.push(Event::Grant {
        worker: 98,
        grant: 1,
        lock: lock.clone(),
        fence: fence + 1_000_000_000,
        how: "lock".into(),
        t_sent: end + 1_000_000,
        t: end + 2_000_000,
        valid_until: end + 300_000_000,
    });
    for (worker, grant, at) in [(98, 1, end + 3_000_000), (*worker, *grant, end + 6_000_000)] {
        planted.push(Event::Write {
            worker,
            grant,
            outcome: "written".into(),
            t_sent: at,
            t_done: at + 1_000_000,
            store: "fenced".into(),
        });
    }
    let report = check(&planted);
    assert_eq!(kinds(&report), ["stale write"]);
    assert_eq!(report.figures["stale fenced writes accepted"], 1);

    // Store order: the store took a lower token after a higher one.
    let mut planted = recorded;
    let log = planted
        .iter_mut()
        .find_map(|e| match e {
            Event::StoreLog { fences, .. } if !fences.is_empty() => Some(fences),
            _ => None,
        })
        .expect("the store logged writes");
    log.push(0);
    assert_eq!(kinds(&check(&planted)), ["store order"]);
}

fn check(events: &[Event]) -> Report {
    checker::check(events, &bounds())
}

fn read_all(dir: &Path) -> Vec<Event> {
    run::histories(dir)
        .iter()
        .flat_map(|p| history::read(p))
        .collect()
}

/// Two grants of one lock by different workers, the second known later, away from
/// anything the checker accepts as a reason for an overlap or a late loss, so that each
/// plant is reported whatever the run's timing: a fault that made the server forget locks
/// or counters, a move of the server's clock (or an offset still in force), from the
/// earlier grant's request on (the checker dates a grant from its request: a lock()
/// that waited was sent long before it was granted); nor a freeze of the first holder
/// near its validity end (a loss signalled late by a frozen worker is held to its thaw).
fn two_grants_of_one_lock<'a>(
    grants: &[&'a Event],
    all: &[Event],
) -> Option<(&'a Event, &'a Event)> {
    const S: u64 = 1_000_000_000;
    let near = |from: u64, to: u64, start: u64, end: u64| start <= to + S && end + S >= from;
    let excused = |from: u64, to: u64| {
        all.iter().any(|e| match e {
            Event::Fault {
                t_start,
                t_end,
                forgets_locks,
                forgets_fences,
                ..
            } => (*forgets_locks || *forgets_fences) && near(from, to, *t_start, *t_end),
            Event::ClockJump { t, .. } => near(from, to, *t, *t),
            _ => false,
        })
    };
    // A server's clock set ahead or back and not yet healed: an overlap then may be
    // explained by the move, whenever it was (a run on Redis 8.2 saw the plant explained
    // so).
    let offset_at = |at: u64| {
        all.iter()
            .filter_map(|e| match e {
                Event::ClockJump { t, offset_ms, .. } if *t <= at => Some((*t, *offset_ms)),
                _ => None,
            })
            .max_by_key(|(t, _)| *t)
            .map_or(0, |(_, offset)| offset)
    };
    let frozen_near = |worker: u32, at: u64| {
        let target = format!("worker:{worker}");
        all.iter().any(|e| {
            matches!(e, Event::Fault { kind, target: t, t_start, t_end, .. }
                if kind == "freeze_worker" && *t == target && near(at, at, *t_start, *t_end))
        })
    };
    for (i, a) in grants.iter().enumerate() {
        for b in &grants[i + 1..] {
            if let (
                Event::Grant {
                    lock: la,
                    worker: wa,
                    t: ta,
                    t_sent: sa,
                    valid_until,
                    how,
                    ..
                },
                Event::Grant {
                    lock: lb,
                    worker: wb,
                    t: tb,
                    t_sent: sb,
                    ..
                },
            ) = (a, b)
                && la == lb
                // A grant nobody shares (not a reader's nor a permit).
                && !how.starts_with("permit")
                && how != "read"
                && how != "downgrade"
                && wa != wb
                && tb > ta
                && !excused((*sa).min(*sb), *tb)
                && offset_at(*sa.min(sb)) == 0
                && offset_at(*tb) == 0
                && !frozen_near(*wa, *valid_until)
            {
                return Some((a, b));
            }
        }
    }
    None
}

fn worker_of(e: &Event) -> u32 {
    e.worker().expect("a worker's event")
}

fn grant_of(e: &Event) -> u64 {
    match e {
        Event::Grant { grant, .. } => *grant,
        _ => unreachable!(),
    }
}

fn time_of(e: &Event) -> u64 {
    match e {
        Event::Grant { t, .. } => *t,
        _ => unreachable!(),
    }
}

/// The latest instant an event names (to plant events after all of a history).
fn history_times(e: &Event) -> Option<u64> {
    match e {
        Event::Grant { t, .. } | Event::Check { t, .. } | Event::Lost { t, .. } => Some(*t),
        Event::Write { t_done, .. } => Some(*t_done),
        Event::Release { t_end, .. } | Event::Call { t_end, .. } | Event::Fault { t_end, .. } => {
            Some(*t_end)
        }
        _ => None,
    }
}
