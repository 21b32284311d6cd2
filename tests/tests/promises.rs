//! The README's promises of a lock, each written once and run on both faces (async and
//! blocking; `lockscript_test::faces`), each bound measured against its deadline.

use std::thread;
use std::time::{Duration, Instant};

use lockscript::LockError;
use lockscript_test::faces::{Face, Held};
use lockscript_test::on_both_faces;
use lockscript_test::server::RedisServer;
use redis::Commands;

/// The README's slack on the loss signal.
const LOSS_SLACK: Duration = Duration::from_millis(100);
/// The README's scheduling slack on a call's bound.
const CALL_SLACK: Duration = Duration::from_millis(250);
const RESPONSE_TIMEOUT: Duration = lockscript::DEFAULT_RESPONSE_TIMEOUT;

fn with<F: Face>(server: &RedisServer, ttl: Duration, watchdog: bool) -> F {
    F::connect(
        server,
        lockscript_test::faces::Settings {
            ttl,
            watchdog,
            ..F::settings()
        },
    )
}

on_both_faces!(
    try_lock_grants_rising_fences_and_refuses_while_held,
    a_waiter_gets_the_lock_soon_after_the_release,
    lock_gives_up_with_a_timeout_within_its_bound,
    extend_sets_the_new_lease_on_the_server,
    a_stale_guard_is_refused_and_changes_nothing,
    the_loss_is_signalled_at_the_validity_end,
    the_watchdog_keeps_the_lease_across_three_ttls,
    with_lock_returns_the_work_and_releases,
    calls_on_a_frozen_server_end_within_the_response_timeout,
    a_dropped_guard_is_released_in_the_background,
    a_release_hands_the_lock_to_a_waiting_caller_of_the_handle,
    waiting_callers_of_a_handle_are_served_in_arrival_order,
    wait_for_replicas_refuses_a_grant_no_replica_acknowledged,
);

/// Waiters that move only when a release hands them the lock or notifies them: their
/// backoff is longer than any test.
fn patient<F: Face>(server: &RedisServer) -> F {
    let backoff = lockscript::RetryPolicy::new(Duration::from_secs(30), Duration::from_secs(30));
    F::connect(
        server,
        lockscript_test::faces::Settings {
            retry: Some(backoff),
            wait_timeout: Duration::from_secs(20),
            ..F::settings()
        },
    )
}

fn try_lock_grants_rising_fences_and_refuses_while_held<F: Face>() {
    let server = RedisServer::start();
    let (a, b) = (
        F::connect(&server, F::settings()),
        F::connect(&server, F::settings()),
    );
    let first = a.try_lock("x").unwrap().expect("free");
    assert_eq!(first.attempts(), 1);
    assert!(b.try_lock("x").unwrap().is_none(), "{}: held", F::NAME);
    let fence = first.fencing_token();
    first.release().unwrap();
    let second = b.try_lock("x").unwrap().expect("free again");
    assert!(second.fencing_token() > fence, "{}: fences rise", F::NAME);
    second.release().unwrap();
}

fn a_waiter_gets_the_lock_soon_after_the_release<F: Face>() {
    let server = RedisServer::start();
    let (holder, waiter) = (
        F::connect(&server, F::settings()),
        F::connect(&server, F::settings()),
    );
    let held = holder.lock("w").unwrap();
    let fence = held.fencing_token();
    let waiting = thread::spawn(move || {
        let guard = waiter.lock("w");
        (guard, Instant::now())
    });
    thread::sleep(Duration::from_millis(200));
    held.release().unwrap();
    let released = Instant::now();
    let (guard, granted) = waiting.join().unwrap();
    let guard = guard.unwrap();
    assert!(guard.fencing_token() > fence);
    // Woken by the release notification, not by its backoff (up to 250 ms).
    assert!(
        granted - released <= Duration::from_millis(100),
        "{}: granted {:?} after the release",
        F::NAME,
        granted - released
    );
    guard.release().unwrap();
}

fn lock_gives_up_with_a_timeout_within_its_bound<F: Face>() {
    let server = RedisServer::start();
    let holder = F::connect(&server, F::settings());
    let wait = Duration::from_millis(300);
    let waiter = F::connect(
        &server,
        lockscript_test::faces::Settings {
            wait_timeout: wait,
            ..F::settings()
        },
    );
    let held = holder.lock("t").unwrap();
    let started = Instant::now();
    let err = waiter.lock("t").err().expect("held");
    let took = started.elapsed();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(took >= wait, "{}: gave up early, {took:?}", F::NAME);
    assert!(
        took <= wait + RESPONSE_TIMEOUT + CALL_SLACK,
        "{}: took {took:?}",
        F::NAME
    );
    held.release().unwrap();
}

fn extend_sets_the_new_lease_on_the_server<F: Face>() {
    let server = RedisServer::start();
    let locks = with::<F>(&server, Duration::from_secs(5), false);
    let guard = locks.lock("e").unwrap();
    let before = guard.valid_until();
    guard.extend(Duration::from_secs(60)).unwrap();
    let pttl: i64 = server.connection().pttl("lock:{e}").unwrap();
    assert!(pttl > 55_000, "{}: pttl {pttl}", F::NAME);
    assert!(guard.valid_until() > before + Duration::from_secs(50));
    guard.release().unwrap();
}

fn a_stale_guard_is_refused_and_changes_nothing<F: Face>() {
    let server = RedisServer::start();
    let locks = with::<F>(&server, Duration::from_millis(100), false);
    let stale = locks.lock("s").unwrap();
    assert!(stale.lost_within(Duration::from_secs(5)));
    let fresh = F::connect(&server, F::settings()).lock("s").unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(matches!(
        stale.extend(Duration::from_secs(5)),
        Err(LockError::NotHeld { .. })
    ));
    assert!(!stale.is_held().unwrap());
    assert!(matches!(stale.release(), Err(LockError::NotHeld { .. })));
    assert!(
        fresh.is_held().unwrap(),
        "{}: the fresh holder kept it",
        F::NAME
    );
    fresh.release().unwrap();
}

fn the_loss_is_signalled_at_the_validity_end<F: Face>() {
    let server = RedisServer::start();
    let locks = with::<F>(&server, Duration::from_millis(300), false);
    let guard = locks.lock("l").unwrap();
    assert!(guard.lost_within(Duration::from_secs(5)));
    let fired = Instant::now();
    let end = guard.valid_until();
    assert!(fired >= end, "{}: lost {:?} early", F::NAME, end - fired);
    assert!(
        fired - end <= LOSS_SLACK,
        "{}: lost {:?} after the validity end",
        F::NAME,
        fired - end
    );
    assert!(guard.is_lost());
}

/// A lease of a second, so that the watchdog's renewals (every third of it) have room
/// on a loaded machine: with 300 ms, a test process kept off the CPU for 200 ms (2 cores,
/// busier processes beside it) lost its lease as it should, which said nothing of the
/// watchdog.
fn the_watchdog_keeps_the_lease_across_three_ttls<F: Face>() {
    let server = RedisServer::start();
    let locks = with::<F>(&server, Duration::from_secs(1), true);
    let guard = locks.lock("k").unwrap();
    assert!(!guard.lost_within(Duration::from_secs(3)), "{}", F::NAME);
    assert!(guard.is_held().unwrap());
    guard.release().unwrap();
}

fn with_lock_returns_the_work_and_releases<F: Face>() {
    let server = RedisServer::start();
    let locks = F::connect(&server, F::settings());
    let fence = locks.with_lock("wl", |fence| fence).unwrap();
    assert!(fence > 0);
    assert!(
        !server.connection().exists::<_, bool>("lock:{wl}").unwrap(),
        "{}: released after the work",
        F::NAME
    );
    let next = locks.try_lock("wl").unwrap().expect("free");
    assert!(next.fencing_token() > fence);
    next.release().unwrap();
}

fn calls_on_a_frozen_server_end_within_the_response_timeout<F: Face>() {
    let server = RedisServer::start();
    let locks = F::connect(&server, F::settings());
    let guard = locks.lock("f").unwrap();
    server.signal("STOP");
    let bound = RESPONSE_TIMEOUT + CALL_SLACK;
    let started = Instant::now();
    let tried = locks.try_lock("g");
    let try_took = started.elapsed();
    let started = Instant::now();
    let extended = guard.extend(Duration::from_secs(30));
    let extend_took = started.elapsed();
    server.signal("CONT");
    assert!(matches!(tried, Err(LockError::Redis(_))), "{}", F::NAME);
    assert!(matches!(extended, Err(LockError::Redis(_))), "{extended:?}");
    assert!(try_took <= bound, "{}: try_lock took {try_took:?}", F::NAME);
    assert!(
        extend_took <= bound,
        "{}: extend took {extend_took:?}",
        F::NAME
    );
    drop(guard);
}

fn a_dropped_guard_is_released_in_the_background<F: Face>() {
    let server = RedisServer::start();
    // A 60 s lease: only the background release frees it this soon.
    let locks = with::<F>(&server, Duration::from_secs(60), true);
    drop(locks.lock("d").unwrap());
    let dropped = Instant::now();
    let mut conn = server.connection();
    while conn.exists::<_, bool>("lock:{d}").unwrap() {
        assert!(
            dropped.elapsed() <= RESPONSE_TIMEOUT + CALL_SLACK,
            "{}: not released in the background",
            F::NAME
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until the server has refused a waiter twice (its attempt, then the one right
/// after it subscribed; each a `MULTI`/`EXEC`): from the first refusal on its handover
/// offer stands.
fn refused_twice(stats: &mut redis::Connection) {
    let began = Instant::now();
    while lockscript_test::command_calls(stats, "exec") < 2 {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the waiter never tried"
        );
        thread::sleep(Duration::from_millis(2));
    }
    // Its reply on the way back.
    thread::sleep(Duration::from_millis(20));
}

/// A release hands the lock to a caller of the same handle that waits for it, in one
/// round trip (handover.lua: no delete, no attempt, nothing published), with a whole
/// lease, within a call's bound.
fn a_release_hands_the_lock_to_a_waiting_caller_of_the_handle<F: Face>() {
    let server = RedisServer::start();
    let locks = patient::<F>(&server);
    let holder = locks.lock("baton").unwrap();
    let mut stats = server.connection();
    // Warm (handover.lua has not run yet): the counts below are the calls themselves.
    lockscript_test::load_scripts(&mut stats);
    lockscript_test::reset_stats(&mut stats);
    let waiter = {
        let locks = locks.clone();
        thread::spawn(move || locks.lock("baton"))
    };
    // Refused (its offer stands from then on), subscribed, refused again: asleep.
    refused_twice(&mut stats);
    lockscript_test::reset_stats(&mut stats);
    let fence = holder.fencing_token();
    let released = Instant::now();
    holder.release().unwrap();
    let next = waiter.join().unwrap().unwrap();
    let took = released.elapsed();
    assert!(took <= CALL_SLACK, "{}: handed over in {took:?}", F::NAME);
    assert!(next.fencing_token() > fence, "{}", F::NAME);
    assert_eq!(
        next.attempts(),
        2,
        "{}: no attempt once handed the lock",
        F::NAME
    );
    let evalsha = lockscript_test::command_calls(&mut stats, "evalsha");
    let publish = lockscript_test::command_calls(&mut stats, "publish");
    assert_eq!(
        (evalsha, publish),
        (1, 0),
        "{}: handover.lua alone",
        F::NAME
    );
    let pttl: i64 = stats.pttl("lock:{baton}").unwrap();
    assert!(
        pttl > 25_000,
        "{}: a whole lease, not the rest of the old one: {pttl}",
        F::NAME
    );
    assert!(next.is_held().unwrap());
    next.release().unwrap();
}

/// Callers of one handle that wait for a lock get it first come, first served, each
/// handed it by the one before; the last release alone publishes.
///
/// Each holds the lock for the scheduling slack: when the lock is handed to the head of
/// the line, the next in line becomes the head and stands its offer after one attempt
/// of its own; a holder that releases before that (a thread not yet scheduled on this
/// busy 2-core machine: seen in CI with a 5 ms hold) releases plainly, which publishes,
/// and the next is served by that notification instead.
fn waiting_callers_of_a_handle_are_served_in_arrival_order<F: Face>() {
    const HOLD: Duration = CALL_SLACK;
    let server = RedisServer::start();
    let locks = patient::<F>(&server);
    let holder = locks.lock("line").unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut stats = server.connection();
    lockscript_test::load_scripts(&mut stats);
    lockscript_test::reset_stats(&mut stats);
    let waiters: Vec<_> = (0..4)
        .map(|i| {
            let (locks, order) = (locks.clone(), std::sync::Arc::clone(&order));
            let waiter = thread::spawn(move || {
                let guard = locks.lock("line").unwrap();
                order.lock().unwrap().push(i);
                thread::sleep(HOLD);
                guard.release().unwrap();
            });
            if i == 0 {
                // The head of the line: refused twice, its offer standing.
                refused_twice(&mut stats);
            }
            // Each in line (no I/O before its turn) before the next comes.
            thread::sleep(Duration::from_millis(200));
            waiter
        })
        .collect();
    lockscript_test::reset_stats(&mut stats);
    let released = Instant::now();
    holder.release().unwrap();
    for waiter in waiters {
        waiter.join().unwrap();
    }
    let took = released.elapsed();
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3], "{}", F::NAME);
    assert!(took <= 4 * (HOLD + CALL_SLACK), "{}: {took:?}", F::NAME);
    assert_eq!(
        lockscript_test::command_calls(&mut stats, "publish"),
        1,
        "{}: four handovers, then one release with nobody waiting",
        F::NAME
    );
}

/// With `wait_for_replicas` and its only replica frozen, a grant is refused with
/// `NotReplicated { acked: 0 }` within the response timeout plus the `WAIT` timeout, and
/// released (the next attempt, replica back, is granted).
fn wait_for_replicas_refuses_a_grant_no_replica_acknowledged<F: Face>() {
    let (primary, replica) = RedisServer::with_replica();
    let mut conn = primary.connection();
    let wait = Duration::from_secs(1);
    let settings = lockscript_test::faces::Settings {
        ttl: Duration::from_secs(5),
        replicas: Some((1, wait)),
        ..F::settings()
    };
    let locks = F::connect(&primary, settings);
    let guard = locks.try_lock("replicated").unwrap().expect("replicated");
    guard.release().unwrap();

    replica.signal("STOP");
    let started = Instant::now();
    let err = locks.try_lock("replicated").err();
    let took = started.elapsed();
    replica.signal("CONT");
    assert!(
        matches!(
            err,
            Some(LockError::NotReplicated {
                acked: 0,
                wanted: 1,
                ..
            })
        ),
        "{}: {err:?}",
        F::NAME
    );
    assert!(
        took <= RESPONSE_TIMEOUT + wait + CALL_SLACK,
        "{}: took {took:?}",
        F::NAME
    );
    let freed = Instant::now();
    while conn.exists::<_, bool>("lock:{replicated}").unwrap() {
        assert!(
            freed.elapsed() < Duration::from_secs(5),
            "{}: the refused grant is released",
            F::NAME
        );
        thread::sleep(Duration::from_millis(5));
    }
    let guard = locks
        .try_lock("replicated")
        .unwrap()
        .expect("granted again");
    guard.release().unwrap();
}
