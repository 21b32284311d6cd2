//! The chaos checker, in CI: a fixed seed on every topology must show no violation, the
//! checker must catch a client with its lease deadline switched off, and every kind of
//! violation planted in a recorded history must be reported.
//!
//! The long soak is `./run chaos --topology all --minutes 30`.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};
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
        t_done: time_of(a) + 1,
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
        Event::Grant { t, .. }
        | Event::Check { t, .. }
        | Event::Lost { t, .. }
        | Event::Observed { t, .. } => Some(*t),
        Event::Write { t_done, .. } => Some(*t_done),
        Event::Release { t_end, .. } | Event::Call { t_end, .. } | Event::Fault { t_end, .. } => {
            Some(*t_end)
        }
        _ => None,
    }
}

/// The fault kinds issue 37 added, each drawn at least once (`--faults` draws each named
/// kind once before any again).
const NEW_FAULTS: [&str; 6] = [
    "acl_channels",
    "acl_deny",
    "replace_server",
    "demote",
    "client_pause",
    "delay_one_connection",
];

/// One recorded run under [`NEW_FAULTS`] only (20 s on one server, a seed whose schedule
/// has every kind before its calm stretch), shared by the tests that plant violations in
/// it; and the run's output.
fn under_new_faults() -> &'static (Vec<Event>, String) {
    static RECORDED: OnceLock<(Vec<Event>, String)> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_string_lossy().into_owned();
        let (code, out) = chaos(&[
            "--topology",
            "single",
            "--seed",
            "11",
            "--seconds",
            "20",
            "--faults",
            &NEW_FAULTS.join(","),
            "--dir",
            &path,
        ]);
        assert!(code.is_some(), "the chaos run ended: {out}");
        (read_all(&dir.path().join("single-11")), out)
    })
}

/// The kinds of the violations `planted` has beyond those of `clean` (a recording may
/// hold violations of its own: the lock's, which the fixed seed reports; these tests are
/// about the checker).
fn added(clean: &Report, planted: &Report) -> Vec<&'static str> {
    let mut before: HashMap<&str, usize> = HashMap::new();
    for v in &clean.violations {
        *before.entry(v.kind).or_default() += 1;
    }
    let mut new = Vec::new();
    for v in &planted.violations {
        match before.get_mut(v.kind) {
            Some(n) if *n > 0 => *n -= 1,
            _ => new.push(v.kind),
        }
    }
    new
}

/// The faults of `kind` the nemesis made (not those it could not).
fn faults_of<'a>(events: &'a [Event], kind: &str) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| {
            matches!(e, Event::Fault { kind: k, mode, .. }
                if k == kind && !mode.starts_with("not made"))
        })
        .collect()
}

/// How a lock a single holder owns was granted (a lock, a name of a multi-lock, a
/// leadership; not a reader's, a permit's, a queued grant's).
fn unshared(how: &str) -> bool {
    single(how) || matches!(how, "multi" | "try_multi" | "leader")
}

/// How a single lock was granted (not a multi-lock's name, nor a leadership).
fn single(how: &str) -> bool {
    matches!(
        how,
        "lock" | "try_lock" | "with_lock" | "handover" | "blocking" | "pool" | "long"
    )
}

/// A grant `a` granted as `a_how` says and a later grant `b` of the same lock, granted
/// as `b_how` says, by another worker, that reached its holder within its lease (so the
/// checker counts it as a holder).
fn later_grant(
    events: &[Event],
    a_how: impl Fn(&str) -> bool,
    b_how: impl Fn(&str) -> bool,
) -> Option<(&Event, &Event)> {
    let grants = || events.iter().filter(|e| matches!(e, Event::Grant { .. }));
    grants().find_map(|a| {
        let Event::Grant {
            lock,
            worker,
            t,
            how,
            ..
        } = a
        else {
            return None;
        };
        if !a_how(how) {
            return None;
        }
        grants()
            .find(|b| {
                matches!(b, Event::Grant { lock: l, worker: w, t: tb, how: h, valid_until, .. }
                    if l == lock && w != worker && tb > t && valid_until > tb && b_how(h))
            })
            .map(|b| (a, b))
    })
}

/// A grant `a` (granted `a_how` if given) before `fault` began and a grant `b` of the
/// same lock by another worker during it (or within a second after: a fault that holds
/// writes back, as `client_pause`, lets no grant through while it lasts, and on a busy
/// machine the next one may come some hundred milliseconds after it ends; CI once found
/// none within 300 ms), both unshared.
fn pair_across<'a>(
    events: &'a [Event],
    fault: &Event,
    a_how: Option<&str>,
) -> Option<(&'a Event, &'a Event)> {
    let Event::Fault { t_start, t_end, .. } = fault else {
        return None;
    };
    let grants: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Grant { how, .. } if unshared(how)))
        .collect();
    grants.iter().find_map(|a| {
        let Event::Grant {
            lock,
            worker,
            t,
            how,
            ..
        } = a
        else {
            return None;
        };
        if *t >= *t_start || *t + 2_000_000_000 < *t_start || a_how.is_some_and(|h| h != how) {
            return None;
        }
        grants
            .iter()
            .find(|b| {
                matches!(b, Event::Grant { lock: l, worker: w, t: tb, .. }
                    if l == lock && w != worker && *t_start <= *tb
                        && *tb <= t_end + 1_000_000_000)
            })
            .map(|b| (*a, *b))
    })
}

/// A holder found valid after a later grant of its lock: planted across each new fault
/// kind, it is reported. None of them forgets a lock (replace_server and demote carry
/// the data over), so none excuses an overlap.
#[test]
fn an_overlap_planted_across_each_new_fault_kind_is_reported() {
    let (recorded, out) = under_new_faults();
    let clean = check(recorded);
    let replaced = !out.contains("replace_server skipped");
    for kind in NEW_FAULTS {
        if kind == "replace_server" && !replaced {
            println!("replace_server skipped: only one server product at hand");
            continue;
        }
        let faults = faults_of(recorded, kind);
        assert!(!faults.is_empty(), "the run injected {kind}: {out}");
        for fault in &faults {
            assert!(
                matches!(
                    fault,
                    Event::Fault {
                        forgets_locks: false,
                        forgets_fences: false,
                        ..
                    }
                ),
                "{kind} forgets nothing: {fault:?}"
            );
        }
        let (a, b) = faults
            .iter()
            .find_map(|f| pair_across(recorded, f, None))
            .unwrap_or_else(|| panic!("a lock granted before and during {kind}"));
        let mut planted = recorded.clone();
        planted.push(Event::Check {
            worker: worker_of(a),
            grant: grant_of(a),
            lost: false,
            t: time_of(b) + 1_000_000,
        });
        let report = check(&planted);
        assert_eq!(added(&clean, &report), ["exclusion"], "across {kind}");
    }
}

/// The pooled actor (a handle over a round-robin pool, one of whose connections
/// `delay_one_connection` holds back) is checked like every other: its grants count, and
/// an overlap of one of them is reported.
#[test]
fn the_pooled_actor_runs_under_its_own_fault_and_its_overlaps_are_reported() {
    let (recorded, out) = under_new_faults();
    let clean = check(recorded);
    assert!(
        clean.figures.get("grants by pool").is_some_and(|&n| n > 50),
        "the pooled actor was granted locks: {out}"
    );
    let pool_faults: Vec<&Event> = faults_of(recorded, "delay_one_connection")
        .into_iter()
        .filter(|f| matches!(f, Event::Fault { mode, .. } if mode == "pool"))
        .collect();
    assert!(
        !pool_faults.is_empty(),
        "a pool connection was held back: {out}"
    );
    let (a, b) = pool_faults
        .iter()
        .find_map(|f| pair_across(recorded, f, Some("pool")))
        .expect("a pooled grant before the fault and another during it");
    let mut planted = recorded.clone();
    planted.push(Event::Check {
        worker: worker_of(a),
        grant: grant_of(a),
        lost: false,
        t: time_of(b) + 1_000_000,
    });
    assert_eq!(added(&clean, &check(&planted)), ["exclusion"]);
}

/// The multi-lock and election actors are checked like every other: a multi-lock's names
/// and a leadership are each a grant of a lock, so an overlap planted between a
/// multi-lock's name and a single lock of that name (either first), or between two
/// leaderships, is an exclusion violation, and a leadership whose term does not rise is a
/// fence violation; an observer told of a lower term after a higher one is reported too.
#[test]
fn multi_lock_and_election_overlaps_and_terms_that_do_not_rise_are_each_reported() {
    let (recorded, out) = under_new_faults();
    let clean = check(recorded);
    for (figure, least) in [
        ("grants by multi", 20),
        ("grants by leader", 20),
        ("observed terms checked", 20),
    ] {
        assert!(
            clean.figures.get(figure).is_some_and(|&n| n >= least),
            "{figure}: at least {least}: {out}"
        );
    }
    let multi = |how: &str| how == "multi" || how == "try_multi";
    let leader = |how: &str| how == "leader";
    // A holder that found its lease valid 1 ms after a later grant of its lock.
    let overlap = |(a, b): (&Event, &Event)| {
        let mut planted = recorded.clone();
        planted.push(Event::Check {
            worker: worker_of(a),
            grant: grant_of(a),
            lost: false,
            t: time_of(b) + 1_000_000,
        });
        added(&clean, &check(&planted))
    };
    let pairs = [
        (
            "a multi-lock, then a single lock",
            later_grant(recorded, multi, single),
        ),
        (
            "a single lock, then a multi-lock",
            later_grant(recorded, single, multi),
        ),
        ("two leaderships", later_grant(recorded, leader, leader)),
    ];
    for (what, pair) in pairs {
        let pair = pair.unwrap_or_else(|| panic!("{what} of one name in the recording"));
        assert_eq!(overlap(pair), ["exclusion"], "{what}");
    }

    // A leadership granted after the recording's end whose term is one a leader had.
    let end = recorded.iter().filter_map(history_times).max().unwrap_or(0);
    let Some(Event::Grant { fence: term, .. }) = recorded
        .iter()
        .find(|e| matches!(e, Event::Grant { how, .. } if how == "leader"))
    else {
        panic!("a leadership")
    };
    let mut planted = recorded.clone();
    planted.push(Event::Grant {
        worker: 99,
        grant: 1,
        lock: "leader".into(),
        fence: *term,
        how: "leader".into(),
        t_sent: end + 1_000_000,
        t: end + 2_000_000,
        valid_until: end + 300_000_000,
    });
    assert_eq!(added(&clean, &check(&planted)), ["fences"]);

    // An observer told of term 1 after all it was told.
    let Some(Event::Observed { worker, lock, .. }) = recorded
        .iter()
        .find(|e| matches!(e, Event::Observed { term: Some(_), .. }))
    else {
        panic!("an observed leader")
    };
    let mut planted = recorded.clone();
    planted.push(Event::Observed {
        worker: *worker,
        lock: lock.clone(),
        term: Some(1),
        value: "planted".into(),
        t_start: end + 1_000_000,
        t: end + 2_000_000,
    });
    assert_eq!(added(&clean, &check(&planted)), ["observed terms"]);
}

/// What the guide promises beyond overlaps, each planted in the recorded run and
/// reported: no loss after a release that returned `Ok`, `suspect` within its bound, and
/// every call within its bound.
#[test]
#[allow(clippy::too_many_lines)] // one recorded history, each plant in turn
fn planted_breaks_of_the_promises_beyond_overlaps_are_each_reported() {
    let (recorded, _) = under_new_faults();
    let clean = check(recorded);
    assert!(
        clean
            .figures
            .get("renewals checked for suspicion")
            .is_some_and(|&n| n > 10),
        "the long-lease actor's renewals were checked: {:?}",
        clean.figures
    );

    // Loss after release: a lease released with Ok, reported lost 5 ms later.
    let released = recorded
        .iter()
        .find_map(|e| match e {
            Event::Release {
                worker,
                grant,
                outcome,
                t_end,
                ..
            } if outcome == "released" => Some((*worker, *grant, *t_end)),
            _ => None,
        })
        .expect("a release that returned Ok");
    let mut planted = recorded.clone();
    planted.push(Event::Lost {
        worker: released.0,
        grant: released.1,
        t: released.2 + 5_000_000,
        valid_until: released.2 + 100_000_000,
    });
    assert_eq!(added(&clean, &check(&planted)), ["loss after release"]);

    // Suspect: a long lease whose first renewal was due, and nothing happened to it (no
    // renewal, no suspicion, no loss) until its release began a second after.
    let (worker, grant, due) = recorded
        .iter()
        .find_map(|e| match e {
            Event::Renewal {
                worker, grant, due, ..
            } => Some((*worker, *grant, *due)),
            _ => None,
        })
        .expect("a long lease's renewal");
    let mut planted: Vec<Event> = recorded
        .iter()
        .filter(|e| {
            let later = matches!(e,
                Event::Renewal { worker: w, grant: g, due: d, .. } if *d > due && (*w, *g) == (worker, grant))
                || matches!(e,
                Event::Suspect { worker: w, grant: g, .. }
                | Event::Lost { worker: w, grant: g, .. }
                | Event::Releasing { worker: w, grant: g, .. }
                | Event::Release { worker: w, grant: g, .. } if (*w, *g) == (worker, grant));
            !later
        })
        .cloned()
        .collect();
    planted.push(Event::Releasing {
        worker,
        grant,
        t: due + 1_000_000_000,
    });
    assert_eq!(added(&clean, &check(&planted)), ["suspect"]);

    // Call durations: each kind of call a second past its bound (500 ms + the slack).
    let Some(Event::Grant { lock, t, .. }) =
        recorded.iter().find(|e| matches!(e, Event::Grant { .. }))
    else {
        panic!("a grant")
    };
    for kind in ["release", "try_lock", "extend"] {
        let mut planted = recorded.clone();
        planted.push(Event::Call {
            worker: 0,
            kind: kind.into(),
            lock: lock.clone(),
            outcome: "ok".into(),
            detail: String::new(),
            t_start: *t,
            t_end: t + 1_750_000_000,
        });
        assert_eq!(added(&clean, &check(&planted)), ["call duration"], "{kind}");
    }
}

/// Whether `worker` ran from `from` to `to` (and a second either side): no
/// `worker_stall` or `freeze_worker` of it, which would excuse its own losses (the
/// machine or the nemesis kept it off the CPU, not the lock).
fn ran(recorded: &[Event], worker: u32, from: u64, to: u64) -> bool {
    let target = format!("worker:{worker}");
    recorded.iter().all(|e| {
        !matches!(e, Event::Fault { kind, target: t, t_start, t_end, .. }
            if (kind == "worker_stall" || kind == "freeze_worker") && *t == target
                && *t_start <= to + 1_000_000_000 && *t_end + 1_000_000_000 >= from)
    })
}

/// On a cluster with one primary stalled (`freeze_server`: SIGSTOP of one master, below
/// the node timeout, while the others serve), a lease whose key lives on another primary
/// must stay held: a loss of one planted during a freeze is reported, while a loss on
/// the frozen primary is not.
#[test]
#[allow(clippy::too_many_lines)]
fn a_loss_on_a_healthy_primary_while_another_is_stalled_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_string_lossy().into_owned();
    let (code, out) = chaos(&[
        "--topology",
        "cluster",
        "--seed",
        "3",
        "--seconds",
        "10",
        "--faults",
        "freeze_server",
        "--dir",
        &path,
    ]);
    assert!(code.is_some(), "the chaos run ended: {out}");
    let recorded = read_all(&dir.path().join("cluster-3"));
    let clean = check(&recorded);
    let freezes = faults_of(&recorded, "freeze_server");
    assert!(!freezes.is_empty(), "a primary was frozen: {out}");
    let on = |slots: &[(u16, u16)], lock: &str| {
        let slot = lockscript_test::cluster::key_slot(format!("lock:{{{lock}}}"));
        slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    };
    // No freeze of `lock`'s primary from 2 s before `from` to 1 s after `to`.
    let untouched = |lock: &str, from: u64, to: u64| {
        freezes.iter().all(|f| {
            !matches!(f, Event::Fault { t_start, t_end, slots, .. }
                if on(slots, lock) && *t_start <= to + 1_000_000_000
                    && *t_end + 2_000_000_000 >= from)
        })
    };
    // On the frozen primary, a lease that spans the freeze; elsewhere, one granted while
    // it lasted, on a primary no freeze came near.
    let during = |fault: &Event, frozen_primary: bool| {
        let Event::Fault {
            t_start,
            t_end,
            slots,
            ..
        } = fault
        else {
            return None;
        };
        recorded.iter().find(|e| match e {
            Event::Grant {
                lock,
                t,
                t_sent,
                valid_until,
                worker,
                ..
            } if frozen_primary => {
                on(slots, lock)
                    && *t < *t_end
                    && *valid_until > *t_start
                    && ran(&recorded, *worker, *t_sent, *valid_until)
            }
            Event::Grant {
                lock,
                t,
                t_sent,
                valid_until,
                worker,
                ..
            } => {
                *t_start <= *t
                    && *t <= *t_end
                    && !on(slots, lock)
                    && untouched(lock, *t_sent, *valid_until)
                    && ran(&recorded, *worker, *t_sent, *valid_until)
            }
            _ => false,
        })
    };
    for (frozen_primary, expected) in [(false, vec!["healthy primary"]), (true, vec![])] {
        let g = freezes
            .iter()
            .find_map(|f| during(f, frozen_primary))
            .expect("a grant during a freeze");
        let Event::Grant {
            worker,
            grant,
            valid_until,
            ..
        } = g
        else {
            unreachable!()
        };
        // The lease ran out while held: no release of it, lost at its validity end.
        let mut planted: Vec<Event> = recorded
            .iter()
            .filter(|e| {
                !matches!(e,
                    Event::Lost { worker: w, grant: n, .. }
                    | Event::Releasing { worker: w, grant: n, .. }
                    | Event::Release { worker: w, grant: n, .. } if w == worker && n == grant)
            })
            .cloned()
            .collect();
        planted.push(Event::Lost {
            worker: *worker,
            grant: *grant,
            t: *valid_until,
            valid_until: *valid_until,
        });
        let report = check(&planted);
        let mut new = added(&clean, &report);
        // Removing the grant's own release may take away a violation the recording had.
        new.retain(|k| *k == "healthy primary");
        assert_eq!(
            new, expected,
            "a loss on the frozen primary: {frozen_primary}"
        );
    }
}

/// A failover the cluster makes by itself (a master stopped past the node timeout, as a
/// busy script on a loaded machine can stall one) is recorded as a `failover` fault that
/// forgets locks and fences, on the promoted replica, with the slots it took over, and
/// between the last answer that showed it a replica and the first that showed it a
/// master: the checker counts fence repeats and overlaps across it, as the topology table
/// says, instead of reporting them (seeds 4422 and 4440 of a cluster soak).
#[test]
fn a_failover_the_cluster_makes_itself_is_recorded_as_a_forgetting_fault() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let mut cluster = lockscript_test::cluster::RedisCluster::start(3, 1);
    let watch = lockscript_test::chaos::watch::ServerWatch::start(cluster.urls(), true);
    let master = cluster.masters()[0];
    let slots = cluster.slots_of(master);
    // Let the watch see every node once as it is.
    std::thread::sleep(Duration::from_millis(300));
    let stopped = history::now_ns();
    cluster.node_mut(master).stop();
    cluster.wait_until_ok(Duration::from_secs(60));
    let promoted = cluster
        .masters()
        .into_iter()
        .find(|m| cluster.slots_of(*m) == slots)
        .expect("a replica took the stopped master's slots");
    let settled = history::now_ns();
    std::thread::sleep(Duration::from_millis(300));
    let found: Vec<Event> = watch
        .finish()
        .into_iter()
        .filter(|e| matches!(e, Event::Fault { kind, .. } if kind == "failover"))
        .collect();
    let [
        Event::Fault {
            kind,
            target,
            t_start,
            t_end,
            forgets_locks: true,
            forgets_fences: true,
            slots: taken,
            ..
        },
    ] = found.as_slice()
    else {
        panic!("one forgetting failover recorded, not {found:?}");
    };
    assert_eq!(kind, "failover");
    assert_eq!(*target, format!("server:{promoted}"));
    assert_eq!(*taken, slots);
    assert!(
        stopped <= *t_end && *t_start <= settled && t_start < t_end,
        "the failover recorded from {t_start} to {t_end}, the master stopped at {stopped} \
         and the cluster settled at {settled}"
    );
}

/// A stall a server reports in its latency monitor (here a script busy for 400 ms; in a
/// soak, an `fsync` of the append-only file held up by the disk) is recorded as a
/// `server_stall` fault whose span holds the stall: the checker then takes no stretch
/// around it for calm (AOF script soak, seed 4307: a fair waiter's place lapsed in a
/// 1.4 s stall of every call that no injected fault explained).
#[test]
fn a_stall_the_server_reports_is_recorded_as_a_fault_around_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let server = lockscript_test::server::RedisServer::start();
    let watch = lockscript_test::chaos::watch::ServerWatch::start(vec![server.url()], false);
    // The watch has set the threshold and read the (empty) samples once.
    std::thread::sleep(Duration::from_millis(600));
    let began = history::now_ns();
    server
        .busy_for(Duration::from_millis(400))
        .join()
        .expect("the busy script");
    std::thread::sleep(Duration::from_millis(600));
    let found = watch.finish();
    let stalls: Vec<&Event> = found
        .iter()
        .filter(|e| matches!(e, Event::Fault { kind, .. } if kind == "server_stall"))
        .collect();
    let [
        Event::Fault {
            target,
            t_start,
            t_end,
            forgets_locks: false,
            forgets_fences: false,
            mode,
            ..
        },
    ] = stalls.as_slice()
    else {
        panic!("one stall recorded, not {found:?}");
    };
    assert_eq!(target, "server:0");
    assert_eq!(mode, "command", "a slow command");
    // The script ran from after `began` for 400 ms (the server's clock; its reply may
    // reach the watch before it reaches the busy thread).
    assert!(
        *t_start <= began && *t_end >= began + 400_000_000,
        "the stall recorded from {t_start} to {t_end} holds the busy script's 400 ms \
         from {began}"
    );
}
