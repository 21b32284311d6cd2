//! A lease's commands reach the server in the order its bookkeeping assumes, and every
//! call keeps its bound while other calls of the same handle are slow. Each test here
//! reproduces a defect a review found on the blocking face (two connections per handle,
//! untimed waits for the connection, renewals one after another), under a real server
//! kept busy by another client, paused, or behind the fault proxy.

use std::thread;
use std::time::{Duration, Instant};

use lockscript::LockError;
use lockscript::blocking::Locks;
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;
use redis::Commands;

/// The README's scheduling slack for a call's bound.
const CALL_SLACK: Duration = Duration::from_millis(250);

fn sleep_until(at: Instant) {
    thread::sleep(at.saturating_duration_since(Instant::now()));
}

/// A server with the scripts loaded, a proxy in front of it, and a handle through it.
fn behind_a_proxy(ttl: Duration) -> (RedisServer, Proxy, Locks) {
    let server = RedisServer::start();
    lockscript_test::load_scripts(&mut server.connection());
    let proxy = Proxy::start(server.port());
    let locks = Locks::connect(&redis::Client::open(proxy.url()).unwrap())
        .unwrap()
        .ttl(ttl);
    (server, proxy, locks)
}

/// What marks a plain lock's attempt on the wire: its `MULTI`/`EXEC` (no other call of
/// the lock sends `MULTI`).
const ACQUIRE: &[u8] = b"MULTI";

fn sha1_of_renew() -> &'static str {
    lockscript::builtin::renew("k", "t", 1).script().sha1()
}

fn sha1_of_fair_queue() -> &'static str {
    lockscript::builtin::fair_queue("a", "b", "c", "d", "e", "f", "o", "t", "x", "k", 1, 1, 1, 0)
        .script()
        .sha1()
}

/// Polls `done` every 2 ms; the instant it first held, or `None` at `give_up`.
fn when(give_up: Instant, mut done: impl FnMut() -> bool) -> Option<Instant> {
    loop {
        if done() {
            return Some(Instant::now());
        }
        if Instant::now() >= give_up {
            return None;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Review defect 1. `extend(500 ms)` waits for the handle's connection (a clone's call
/// has it, the server is busy) while the watchdog's renewal (6 s) is sent; on the server
/// the extend runs last, so the key lives 500 ms. The guard must never believe in its
/// lease longer than the key lives: checked against the server's PTTL until the key is
/// gone, and a second client that gets the lock must find the guard lost.
#[test]
fn an_extend_queued_behind_other_calls_never_outlives_the_key() {
    let server = RedisServer::start();
    let locks = Locks::connect(&server.client())
        .unwrap()
        .ttl(Duration::from_secs(6));
    let guard = locks.lock("x").unwrap();
    let granted = Instant::now();
    // The watchdog renews a third of the way through: 2 s after the grant. The server is
    // busy from 1.7 s to 2.2 s, so that renewal waits there.
    sleep_until(granted + Duration::from_millis(1_700));
    let busy = server.busy_for(Duration::from_millis(500));
    thread::sleep(Duration::from_millis(30));
    let clone = locks.clone();
    let other = thread::spawn(move || clone.try_lock("other").map(|g| g.is_some()));
    thread::sleep(Duration::from_millis(30));
    let extended = guard.extend(Duration::from_millis(500));
    busy.join().unwrap();
    // Its answer does not matter (behind the busy server it may time out): it held the
    // connection while the extend waited.
    drop(other.join().unwrap());
    // Whatever the extend answered, from here on: the guard's validity end is never
    // later than the key's end on the server (checked past the end a 500 ms lease set at
    // 2.2 s would have), and a second client that gets the lock finds the guard lost.
    let mut conn = server.connection();
    let other_client = Locks::connect(&server.client()).unwrap();
    let until = granted + Duration::from_secs(4);
    while Instant::now() < until {
        // The guard's belief first, then the key: a renewal confirmed between the two
        // readings moves the belief and the key alike, and read the other way round it
        // would compare the new belief with the old key (seen 65 ms apart on a loaded
        // machine, a renewal landing between the readings).
        let (lost, believed) = (guard.is_lost(), guard.valid_until());
        let pttl: i64 = conn.pttl("lock:{x}").unwrap();
        let key_end = Instant::now() + Duration::from_millis(u64::try_from(pttl.max(0)).unwrap());
        assert!(
            lost || believed <= key_end + Duration::from_millis(2),
            "the guard believes in its lease {:?} past the key's end (extend: {extended:?})",
            believed.saturating_duration_since(key_end)
        );
        if let Some(next) = other_client.try_lock("x").unwrap() {
            assert!(
                guard.is_lost(),
                "a second holder (fence {}) while the first guard believes it holds \
                 (remaining {:?}, extend: {extended:?})",
                next.fencing_token(),
                guard.remaining()
            );
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Review defect 2. The acquire request is held up 800 ms on its way (past the 500 ms
/// response timeout): the grant it makes belongs to nobody and must be released. Its
/// background release must not reach the server first, find nothing and stop.
#[test]
fn a_grant_made_by_a_delayed_attempt_is_released_after_it() {
    let (server, proxy, locks) = behind_a_proxy(Duration::from_secs(60));
    let warm = locks.try_lock("warm").unwrap().expect("free");
    warm.release().unwrap();
    let delay = Duration::from_millis(800);
    proxy.delay_request_to(ACQUIRE, delay);
    let started = Instant::now();
    let err = locks.try_lock("y").unwrap_err();
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    let mut conn = server.connection();
    // The grant is made at 800 ms; released right after it (the release waits behind
    // the attempt on the same connection).
    let bound = started + delay + lockscript::DEFAULT_RESPONSE_TIMEOUT;
    let mut made = false;
    let freed = when(bound + Duration::from_secs(2), || {
        let fence: Option<u64> = conn.get("lock:{y}:fence").unwrap();
        made |= fence.is_some();
        made && !conn.exists::<_, bool>("lock:{y}").unwrap()
    });
    assert!(made, "the delayed attempt ran and granted");
    let freed = freed.expect("the grant nobody owns was never released");
    assert!(
        freed <= bound,
        "released {:?} after the bound",
        freed - bound
    );
}

/// Review defect 2, fair mode: the waiter gives up while its fair acquire is held up on
/// the way; the ticket's background release must come after it, or the free lock is
/// granted to a ticket nobody listens to.
#[test]
fn a_fair_ticket_given_up_during_a_delayed_call_is_taken_out_after_it() {
    let (server, proxy, locks) = behind_a_proxy(Duration::from_secs(60));
    let locks = locks.fair(true).wait_timeout(Duration::from_millis(300));
    let warm = locks.lock("warm").unwrap();
    warm.release().unwrap();
    let delay = Duration::from_millis(800);
    proxy.delay_request_to(sha1_of_fair_queue().as_bytes(), delay);
    let started = Instant::now();
    let err = locks.lock("z").unwrap_err();
    assert!(
        matches!(err, LockError::Redis(_) | LockError::Timeout { .. }),
        "{err:?}"
    );
    let mut conn = server.connection();
    let bound = started + delay + lockscript::DEFAULT_RESPONSE_TIMEOUT;
    let mut made = false;
    let freed = when(bound + Duration::from_secs(2), || {
        let fence: Option<u64> = conn.get("lock:{z}:fence").unwrap();
        made |= fence.is_some();
        let queued: u64 = conn.zcard("lock:{z}:queue").unwrap();
        made && queued == 0 && !conn.exists::<_, bool>("lock:{z}").unwrap()
    });
    assert!(made, "the delayed fair acquire ran and granted");
    let freed = freed.expect("the grant to the given-up ticket was never released");
    assert!(
        freed <= bound,
        "released {:?} after the bound",
        freed - bound
    );
}

/// Review defect 3. Four clones call `try_lock` while the server is paused for 2 s: each
/// returns within its own response timeout plus the scheduling slack, however long the
/// others hold the handle's connection.
#[test]
fn calls_of_clones_keep_their_bound_while_the_connection_is_busy() {
    let server = RedisServer::start();
    let locks = Locks::connect(&server.client()).unwrap();
    let warm = locks.try_lock("warm").unwrap().expect("free");
    warm.release().unwrap();
    server.signal("STOP");
    let calls: Vec<_> = (0..4)
        .map(|i| {
            let locks = locks.clone();
            thread::spawn(move || {
                let started = Instant::now();
                let result = locks.try_lock(&format!("stalled{i}"));
                (result.map(|g| g.is_some()), started.elapsed())
            })
        })
        .collect();
    let outcomes: Vec<_> = calls.into_iter().map(|c| c.join().unwrap()).collect();
    thread::sleep(Duration::from_millis(1_200));
    server.signal("CONT");
    for (result, took) in &outcomes {
        assert!(
            matches!(result, Err(LockError::Redis(_))),
            "a paused server: {result:?}"
        );
        assert!(
            *took <= lockscript::DEFAULT_RESPONSE_TIMEOUT + CALL_SLACK,
            "a call took {took:?}: {outcomes:?}"
        );
    }
}

/// Review defect 5. A guard is dropped while a renewal is in flight (the server ran it,
/// its reply is late), then the server is unreachable past the lease's last confirmed
/// end. The background release must keep trying until the end the renewal may have set,
/// and free the lock when the server is back, instead of leaving it held by nobody.
#[test]
fn a_dropped_guards_release_outlasts_a_renewal_in_flight() {
    let ttl = Duration::from_secs(6);
    let (server, proxy, locks) = behind_a_proxy(ttl);
    let guard = locks.lock("w").unwrap();
    let granted = Instant::now();
    // The first renewal (at 2 s) runs on the server; its reply is held back.
    proxy.delay_reply_to(sha1_of_renew().as_bytes(), Duration::from_millis(400));
    sleep_until(granted + Duration::from_millis(2_100));
    drop(guard);
    proxy.set_refusing(true);
    // Unreachable past the first lease's end (6 s after the grant).
    sleep_until(granted + Duration::from_millis(6_200));
    proxy.set_refusing(false);
    let back = Instant::now();
    let mut conn = server.connection();
    let pttl: i64 = conn.pttl("lock:{w}").unwrap();
    assert!(
        pttl > 0,
        "the renewal ran: the key outlives the first lease"
    );
    // Retries back off to once a second at most.
    let bound = back + Duration::from_secs(1) + CALL_SLACK;
    let freed = when(
        back + Duration::from_millis(u64::try_from(pttl).unwrap()),
        || !conn.exists::<_, bool>("lock:{w}").unwrap(),
    );
    let freed = freed.expect("the lock stayed held by nobody until its ttl");
    assert!(freed <= bound, "released {:?} late", freed - bound);
}

/// Review defect 8. Thirty leases of 1 s on one handle, each reply 40 ms late: renewed
/// one after another they take 1.2 s a round, longer than the lease, and leases that
/// were never in danger are lost. Renewed together, none is.
#[test]
fn many_leases_on_a_slow_server_are_all_kept() {
    let (_server, proxy, locks) = behind_a_proxy(Duration::from_secs(1));
    let guards: Vec<_> = (0..30)
        .map(|i| locks.lock(&format!("many{i}")).unwrap())
        .collect();
    proxy.set_delay(Duration::from_millis(40));
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let lost: Vec<_> = guards
            .iter()
            .filter(|g| g.is_lost())
            .map(|guard| guard.name().to_owned())
            .collect();
        assert!(lost.is_empty(), "leases lost on a slow server: {lost:?}");
        thread::sleep(Duration::from_millis(20));
    }
    proxy.set_delay(Duration::ZERO);
    for guard in guards {
        guard.release().unwrap();
    }
}

/// Issue 37, defect 5. A lease is due to renew while a call of the same thread holds the
/// handle's connection (its reply is held up 200 ms): the background thread marks the
/// renewal in flight and waits for the connection, and the thread, its call done,
/// releases the guard at once, taking the connection again before the background
/// thread wakes. The release finds its key and returns `Ok`; the renewal that goes after
/// it is refused. A lease whose release returned `Ok` was never lost: none of ten may
/// be reported lost.
#[test]
fn a_lease_released_while_its_renewal_waits_for_the_connection_is_never_lost() {
    let ttl = Duration::from_millis(900);
    let (_server, proxy, locks) = behind_a_proxy(ttl);
    // The lease counts from the grant's send time for the ttl less 1% + 2 ms.
    let validity = Duration::from_millis(900 - 9 - 2);
    let mut leases = Vec::new();
    for i in 0..10 {
        let guard = locks.lock(&format!("r{i}")).unwrap();
        leases.push(guard.lease());
        // The renewal is due a third of the way through the lease (and may go 30 ms
        // early); the connection is busy from 100 ms before until 100 ms after.
        let sent = guard
            .valid_until()
            .checked_sub(validity)
            .expect("after boot");
        let due = sent + ttl / 3;
        sleep_until(sent + Duration::from_millis(200));
        let other = format!("hold-{i}");
        proxy.delay_reply_to(other.as_bytes(), Duration::from_millis(200));
        let holder = locks.try_lock(&other).unwrap().expect("free");
        let released = guard.release();
        assert!(
            released.is_ok(),
            "lease r{i}: {released:?} ({:?} after its renewal was due)",
            Instant::now().saturating_duration_since(due)
        );
        holder.release().unwrap();
    }
    // Every renewal has been answered (or given up) within its response timeout.
    thread::sleep(lockscript::DEFAULT_RESPONSE_TIMEOUT);
    let lost: Vec<_> = (leases.iter())
        .filter(|lease| lease.is_lost())
        .map(|lease| lease.name().to_owned())
        .collect();
    assert!(
        lost.is_empty(),
        "leases released with Ok(()) reported lost: {lost:?}"
    );
}
