//! The blocking lock API mirrors the async one: the same behaviours, checked the
//! same way, on sync connections and threads.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockscript::blocking::Locks;
use lockscript::{LockError, RetryPolicy};
use lockscript_test::command_calls;
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;
use redis::Commands;

const PATIENCE: Duration = Duration::from_secs(10);
/// The scheduling slack of a call's bound on this busy 2-core machine (the guide's, as
/// the chaos checker's).
const SLACK: Duration = Duration::from_millis(250);

fn locks(server: &RedisServer) -> Locks {
    Locks::connect(&server.client()).expect("connect")
}

/// Polls `done` until it holds, and fails if that takes longer than `bound`.
fn within(bound: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < bound,
            "{what} did not happen within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn try_lock_grants_with_rising_fences_and_refuses_when_held() {
    let server = RedisServer::start();
    let locks = locks(&server);
    let first = locks.try_lock("q").unwrap().expect("free");
    let f0 = first.fencing_token();
    assert!(locks.try_lock("q").unwrap().is_none());
    first.release().unwrap();
    let second = locks.try_lock("q").unwrap().expect("free again");
    assert!(second.fencing_token() > f0);
    second.release().unwrap();
}

#[test]
fn waiter_is_woken_by_the_release_notification() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .ttl(Duration::from_secs(60))
        .wait_timeout(Duration::from_secs(5))
        .retry(RetryPolicy::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
        ));
    let holder = locks.lock("q").unwrap();
    let f0 = holder.fencing_token();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || locks.lock("q"))
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished());
    holder.release().unwrap();
    let guard = waiter.join().unwrap().expect("woken before its timeout");
    assert!(guard.fencing_token() > f0);
    assert!(guard.attempts() <= 3, "attempts {}", guard.attempts());
    guard.release().unwrap();
}

#[test]
fn lock_gives_up_with_a_timeout_error() {
    let server = RedisServer::start();
    let locks = locks(&server).wait_timeout(Duration::from_millis(200));
    let holder = locks.lock("q").unwrap();
    let err = locks.lock("q").unwrap_err();
    assert!(
        matches!(err, LockError::Timeout { ref name, .. } if name == "q"),
        "{err:?}"
    );
    holder.release().unwrap();
}

/// A waiter subscribed to release notifications naps until its deadline and returns
/// then: its naps and its wait for the subscription are timed by the OS, so a busy or
/// idle notification runtime cannot make it oversleep (it did, by up to ~1 s, in the
/// chaos soak). Each of 20 waits of 150 ms with a 30 s backoff ends within its bound.
#[test]
fn a_notified_waiter_returns_at_its_deadline() {
    let server = RedisServer::start();
    let wait = Duration::from_millis(150);
    let locks = locks(&server).wait_timeout(wait).retry(RetryPolicy::new(
        Duration::from_secs(30),
        Duration::from_secs(30),
    ));
    let holder = locks
        .clone()
        .ttl(Duration::from_secs(60))
        .lock("q")
        .unwrap();
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        let err = locks.lock("q").unwrap_err();
        assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
        worst = worst.max(started.elapsed());
    }
    assert!(
        worst <= wait + lockscript::DEFAULT_RESPONSE_TIMEOUT,
        "lock() within wait_timeout plus one response timeout: worst {worst:?}"
    );
    assert!(worst >= wait, "it waited its whole wait_timeout: {worst:?}");
    holder.release().unwrap();
}

#[test]
fn stale_guard_release_and_extend_are_refused_and_change_nothing() {
    let server = RedisServer::start();
    let locks = locks(&server);
    let stale = locks
        .clone()
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .lock("q")
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let fresh = locks.lock("q").unwrap();
    assert!(matches!(
        stale.extend(Duration::from_secs(30)),
        Err(LockError::NotHeld { .. })
    ));
    assert!(matches!(stale.release(), Err(LockError::NotHeld { .. })));
    assert!(fresh.is_held().unwrap());
    fresh.release().unwrap();
}

#[test]
fn extend_sets_the_new_lease_on_the_server() {
    let server = RedisServer::start();
    let locks = locks(&server).ttl(Duration::from_secs(2)).watchdog(false);
    let guard = locks.lock("q").unwrap();
    guard.extend(Duration::from_secs(120)).unwrap();
    let pttl: i64 = server.connection().pttl("lock:{q}").unwrap();
    assert!(pttl > 110_000, "pttl {pttl}");
    guard.release().unwrap();
}

#[test]
fn watchdog_thread_keeps_the_lock_across_three_ttls() {
    let server = RedisServer::start();
    let locks = locks(&server).ttl(Duration::from_millis(150));
    let guard = locks.lock("q").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!guard.is_lost());
    assert!(guard.is_held().unwrap());
    assert!(locks.try_lock("q").unwrap().is_none());
    guard.release().unwrap();
}

#[test]
fn without_watchdog_the_lease_runs_out_and_the_loss_is_signalled() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .ttl(Duration::from_millis(100))
        .watchdog(false);
    let guard = locks.lock("q").unwrap();
    assert!(guard.lost_within(PATIENCE));
    assert!(!guard.is_held().unwrap());
}

#[test]
fn loss_is_signalled_when_the_key_is_deleted_externally() {
    let server = RedisServer::start();
    let locks = locks(&server).ttl(Duration::from_millis(300));
    let guard = locks.lock("q").unwrap();
    let _: () = server.connection().del("lock:{q}").unwrap();
    assert!(guard.lost_within(PATIENCE));
    assert!(matches!(guard.release(), Err(LockError::NotHeld { .. })));
}

#[test]
fn no_renewal_is_sent_after_release() {
    let server = RedisServer::start();
    // Renewals counted as EVALSHA: the scripts' path.
    let locks = locks(&server)
        .ttl(Duration::from_millis(60))
        .native_commands(false);
    let mut stats = server.connection();
    let guard = locks.lock("q").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        command_calls(&mut stats, "evalsha") >= 3,
        "the watchdog renewed"
    );
    guard.release().unwrap();
    lockscript_test::reset_stats(&mut stats);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(command_calls(&mut stats, "evalsha"), 0);
}

#[test]
fn dropping_a_guard_releases_it_and_stops_the_watchdog() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    // A 60 s lease: only the release can free it within a second.
    drop(
        locks(&server)
            .ttl(Duration::from_secs(60))
            .lock("q")
            .unwrap(),
    );
    within(
        Duration::from_secs(1),
        "the release of the dropped guard",
        || !conn.exists::<_, bool>("lock:{q}").unwrap(),
    );
    // A 150 ms lease would be renewed every 50 ms: after the drop, nothing is.
    drop(
        locks(&server)
            .ttl(Duration::from_millis(150))
            .lock("r")
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(50));
    lockscript_test::reset_stats(&mut conn);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        command_calls(&mut conn, "evalsha"),
        0,
        "no renewal after the drop"
    );
}

/// A server with the scripts loaded, a proxy in front of it, and a handle (60 s leases)
/// that talks to the server through the proxy.
fn behind_a_proxy() -> (RedisServer, Proxy, Locks) {
    let server = RedisServer::start();
    lockscript_test::load_scripts(&mut server.connection());
    let proxy = Proxy::start(server.port());
    let locks = Locks::connect(&redis::Client::open(proxy.url()).unwrap())
        .unwrap()
        .ttl(Duration::from_secs(60));
    (server, proxy, locks)
}

/// What marks an acquire attempt on the wire: a plain lock's is one `MULTI`/`EXEC`
/// (no other call of the lock sends `MULTI`).
const ACQUIRE: &[u8] = b"MULTI";

/// The acquire ran but its reply was lost: the blocking face releases that grant in the
/// background (with its own token), instead of leaving it for its TTL.
#[test]
fn an_attempt_whose_reply_was_lost_leaves_no_grant_behind() {
    let (server, proxy, locks) = behind_a_proxy();
    proxy.reset_after(ACQUIRE);
    let err = locks.try_lock("lost").unwrap_err();
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    let mut conn = server.connection();
    let fence: Option<u64> = conn.get("lock:{lost}:fence").unwrap();
    let fence = fence.expect("the acquire ran: the counter exists");
    within(
        Duration::from_secs(1),
        "the release of the lost grant",
        || !conn.exists::<_, bool>("lock:{lost}").unwrap(),
    );
    let guard = locks.try_lock("lost").unwrap().expect("free again");
    assert!(guard.fencing_token() > fence);
    guard.release().unwrap();
}

#[test]
fn bad_input_is_a_typed_error_and_sends_nothing() {
    let server = RedisServer::start();
    let locks = locks(&server);
    let mut stats = server.connection();
    lockscript_test::reset_stats(&mut stats);
    assert!(matches!(
        locks.clone().ttl(Duration::ZERO).try_lock("q"),
        Err(LockError::InvalidTtl { .. })
    ));
    assert!(matches!(
        locks.clone().wait_timeout(Duration::ZERO).lock("q"),
        Err(LockError::InvalidSettings(_))
    ));
    assert!(matches!(locks.lock(""), Err(LockError::InvalidName { .. })));
    assert!(matches!(
        locks.try_lock(&"n".repeat(600)),
        Err(LockError::InvalidName { .. })
    ));
    assert_eq!(command_calls(&mut stats, "evalsha"), 0);
}

#[test]
fn with_lock_returns_the_value_or_reports_the_loss() {
    let server = RedisServer::start();
    let locks = locks(&server).ttl(Duration::from_millis(150));
    let fence = locks.with_lock("q", |guard| guard.fencing_token()).unwrap();
    let mut conn = server.connection();
    let counter: u64 = conn.get("lock:{q}:fence").unwrap();
    assert_eq!(fence, counter, "the value of the closure");
    let lost = locks.with_lock("q", |guard| {
        let _: () = conn.del("lock:{q}").unwrap();
        guard.lost_within(PATIENCE)
    });
    assert!(matches!(lost, Err(LockError::Lost { .. })), "{lost:?}");
}

#[test]
fn debug_output_never_shows_the_token() {
    let server = RedisServer::start();
    let locks = locks(&server);
    let guard = locks.lock("q").unwrap();
    let token: String = server.connection().get("lock:{q}").unwrap();
    let shown = format!("{guard:?} {locks:?}");
    assert!(!shown.contains(&token), "{shown}");
    guard.release().unwrap();
}

#[test]
fn many_threads_never_overlap_and_fences_rise() {
    let server = RedisServer::start();
    let history = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8)
        .map(|worker| {
            // Each thread is its own client: its own handle and connections.
            let locks = locks(&server).wait_timeout(PATIENCE);
            let history = Arc::clone(&history);
            std::thread::spawn(move || {
                for _ in 0..12 {
                    let guard = locks.lock("shared").unwrap();
                    let start = Instant::now();
                    if worker % 2 == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    let end = Instant::now();
                    let fence = guard.fencing_token();
                    guard.release().unwrap();
                    history.lock().unwrap().push((fence, start, end));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut history = Arc::try_unwrap(history).unwrap().into_inner().unwrap();
    assert_eq!(history.len(), 8 * 12);
    lockscript_test::history::assert_exclusive(&mut history);
}

/// A call that must first re-open its connection (the server restarted), to a server
/// that then stops answering, still returns within the one response timeout: the
/// re-open and the command share it. (redis-rs's `CLIENT SETINFO` at connect would have
/// waited the whole timeout twice more.)
#[test]
fn a_reopen_to_a_frozen_server_stays_within_the_response_timeout() {
    let mut server = RedisServer::start();
    let locks = locks(&server);
    for round in 0..3 {
        server.stop();
        server.restart();
        // The first call finds the old connection broken (or succeeds if it was
        // re-opened since); the next one must re-open.
        drop(locks.try_lock("q"));
        server.signal("STOP");
        let started = Instant::now();
        let frozen = locks.try_lock("q");
        let took = started.elapsed();
        server.signal("CONT");
        assert!(
            matches!(frozen, Err(LockError::Redis(ref e)) if e.is_timeout()),
            "{frozen:?}"
        );
        assert!(
            took <= lockscript::DEFAULT_RESPONSE_TIMEOUT + Duration::from_millis(100),
            "round {round}: the re-open and the attempt took {took:?}"
        );
    }
}

/// A reply that comes after the response timeout must not be read as the reply of the
/// next command on the same connection: the connection is dropped and opened anew.
#[test]
fn a_late_reply_is_never_read_as_the_next_commands() {
    let (server, proxy, locks) = behind_a_proxy();
    let locks = locks.response_timeout(Duration::from_millis(200));
    let held = locks.try_lock("late").unwrap().expect("free");
    // The next acquire's reply ("held") is delayed past the timeout.
    proxy.delay_reply_to(ACQUIRE, Duration::from_millis(400));
    let err = locks.try_lock("late").unwrap_err();
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    std::thread::sleep(Duration::from_millis(500));
    // Another lock, free: it must be granted with its own counter's fence, and "late"
    // stays held.
    let other = locks.try_lock("other").unwrap().expect("free");
    let counter: u64 = server.connection().get("lock:{other}:fence").unwrap();
    assert_eq!(other.fencing_token(), counter);
    assert!(
        other.fencing_token() > held.fencing_token(),
        "a counter started later"
    );
    assert!(locks.try_lock("late").unwrap().is_none(), "late is held");
    assert!(held.is_held().unwrap());
    other.release().unwrap();
    held.release().unwrap();
}

/// A call that needs several commands (EVALSHA, then SCRIPT LOAD and EVALSHA after
/// `NOSCRIPT`) still ends within one response timeout: each command gets only what is
/// left of it. Replies delayed 150 ms each would take 450 ms; the call gives up at 300.
/// (The acquire goes as its script here: the transaction needs no script.)
#[test]
fn a_call_that_needs_the_script_loaded_ends_within_the_response_timeout() {
    let (server, proxy, locks) = behind_a_proxy();
    let timeout = Duration::from_millis(300);
    let locks = locks.response_timeout(timeout).native_commands(false);
    // Open the handle's connection first (a re-open shares the timeout too).
    let warm = locks.try_lock("warm").unwrap().expect("free");
    warm.release().unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    proxy.set_delay(Duration::from_millis(150));
    let started = Instant::now();
    let result = locks.try_lock("slow");
    let took = started.elapsed();
    assert!(
        matches!(&result, Err(LockError::Redis(e)) if e.is_timeout() || e.is_io_error()),
        "{result:?}"
    );
    assert!(
        took <= timeout + Duration::from_millis(100),
        "bounded by the response timeout: took {took:?}"
    );
    // With replies on time again, the next call loads the script and is granted.
    proxy.set_delay(Duration::ZERO);
    std::thread::sleep(Duration::from_millis(300));
    let guard = locks.try_lock("slow").unwrap();
    assert!(guard.is_some(), "granted once the replies are on time");
}

/// A late reply of a call that gave up does not give the next call a second response
/// timeout. The client skips such replies before its own, and each read waits the
/// socket's read timeout afresh: with replies delayed 900 ms and a 500 ms timeout, the
/// second call read the first one's reply at 900 ms and then waited until 1,400 ms for
/// its own (a soak saw a release take 860 ms). Each call now shares what is left of its
/// timeout among the reads ahead of it.
#[test]
fn a_late_reply_of_an_earlier_call_does_not_stretch_the_next_call() {
    let (_server, proxy, locks) = behind_a_proxy();
    let timeout = Duration::from_millis(500);
    let locks = locks.response_timeout(timeout);
    let warm = locks.try_lock("warm").unwrap().expect("free");
    warm.release().unwrap();
    proxy.set_delay(Duration::from_millis(900));
    for call in 0..4 {
        let started = Instant::now();
        let result = locks.try_lock("slow");
        let took = started.elapsed();
        assert!(
            took <= timeout + SLACK,
            "call {call} took {took:?}, over its bound of {timeout:?} + {SLACK:?}: {result:?}"
        );
    }
    // Replies on time again: the late ones are skipped and the handle works on.
    proxy.set_delay(Duration::ZERO);
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(Some(guard)) = locks.try_lock("slow") {
            guard.release().unwrap();
            break;
        }
        assert!(Instant::now() < deadline, "the handle never recovered");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last clone of a blocking handle whose notifications run may be dropped by async
/// code (a service keeps one in its state): that is no panic. Tokio refuses to drop a
/// runtime where blocking is not allowed; the notifications' private runtime is shut
/// down without waiting instead.
#[test]
fn a_handle_with_running_notifications_can_be_dropped_by_async_code() {
    let server = RedisServer::start();
    let client = server.client();
    // Fair mode asks for the handle's handoff channel, which starts the notifications.
    let locks = Locks::connect(&client).unwrap().fair(true);
    locks.lock("dropped-in-async").unwrap().release().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async move { drop(locks) });
}
