//! Every branch of the lock scripts (acquire, compare-del, renew, handover), against a
//! real redis-server.

use std::time::Duration;

use lockscript::builtin::{acquire, compare_del, handover, renew};
use lockscript_test::TestRedis;
use redis::Commands;

const LOCK: &str = "lock:{orders}";
const FENCE: &str = "lock:{orders}:fence";
const HOLDERS: &str = "lock:{orders}:holders";
const CHANNEL: &str = "lock:{orders}:released";
/// How long the fencing counter lives after a grant: 30 s of lease plus an hour.
const FENCE_MS: u64 = 3_630_000;

/// The server's clock in microseconds (`TIME`).
fn server_micros(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1_000_000 + micros
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    conn.pttl(key).expect("PTTL")
}

#[lockscript_test::test]
fn acquire_on_free_lock_stores_token_with_ttl_and_raises_fence(mut conn: redis::Connection) {
    let before = server_micros(&mut conn);
    let first = acquire(LOCK, FENCE, HOLDERS, "token-a", 30_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    let after = server_micros(&mut conn);
    assert_eq!(first.0, 1);
    assert!(
        (before..=after).contains(&first.1),
        "a new counter starts from the server's clock: {before} <= {} <= {after}",
        first.1
    );
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a");
    let ttl = pttl(&mut conn, LOCK);
    assert!(ttl > 29_000 && ttl <= 30_000, "pttl {ttl}");
    let fence_ttl = pttl(&mut conn, FENCE);
    assert!(
        fence_ttl > 3_629_000 && fence_ttl <= 3_630_000,
        "the counter lives FENCE_MS after the grant: pttl {fence_ttl}"
    );

    let _: i64 = conn.del(LOCK).unwrap();
    let second = acquire(LOCK, FENCE, HOLDERS, "token-b", 30_000, 60_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(second, (1, first.1 + 1), "each grant gets the next fence");
    let fence_ttl = pttl(&mut conn, FENCE);
    assert!(
        fence_ttl > 59_000 && fence_ttl <= 60_000,
        "each grant sets the counter's life anew: pttl {fence_ttl}"
    );
}

/// Tokens keep rising when an idle counter has expired: the counter restarts from the
/// server's clock, which has moved past every token the old one gave.
#[lockscript_test::test]
fn fences_keep_rising_across_the_counters_expiry(server: &TestRedis, mut conn: redis::Connection) {
    let (_, first) = acquire(LOCK, FENCE, HOLDERS, "token-a", 30_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    // Many grants in a row: the counter moves one per grant, slower than the clock.
    let mut last = first;
    for n in 0..200 {
        let token = format!("token-{n}");
        let fence = handover(LOCK, FENCE, "token-a", &token, 30_000, FENCE_MS)
            .invoke(&mut conn)
            .unwrap();
        assert_eq!(fence, last + 1);
        last = fence;
        let _: () = conn.set(LOCK, "token-a").unwrap();
    }
    assert_eq!(compare_del(LOCK, "token-a").invoke(&mut conn).unwrap(), 1);
    assert!(server.expire_now(FENCE), "the counter existed");
    assert!(!conn.exists::<_, bool>(FENCE).unwrap());

    let (acquired, next) = acquire(LOCK, FENCE, HOLDERS, "token-b", 30_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(acquired, 1);
    assert!(
        next > last,
        "the token after the expiry ({next}) is above the last before it ({last})"
    );
    // The same through handover.lua, whose restart is the same rule.
    assert!(server.expire_now(FENCE));
    let handed = handover(LOCK, FENCE, "token-b", "token-c", 30_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    assert!(handed > next, "{handed} > {next}");
}

/// Redlock's raise-fence.lua gives the counter the same life as a grant.
#[lockscript_test::test]
fn raise_fence_sets_the_counters_life(mut conn: redis::Connection) {
    use lockscript::builtin::raise_fence;
    assert_eq!(raise_fence(FENCE, 42, 5_000).invoke(&mut conn).unwrap(), 42);
    let ttl = pttl(&mut conn, FENCE);
    assert!(ttl > 4_000 && ttl <= 5_000, "pttl {ttl}");
    assert_eq!(
        raise_fence(FENCE, 7, 9_000).invoke(&mut conn).unwrap(),
        42,
        "never lowered"
    );
    let ttl = pttl(&mut conn, FENCE);
    assert!(
        ttl > 8_000 && ttl <= 9_000,
        "the life is set anew: pttl {ttl}"
    );
}

#[lockscript_test::test]
fn acquire_on_held_lock_returns_holder_pttl_and_changes_nothing(mut conn: redis::Connection) {
    let (_, granted) = acquire(LOCK, FENCE, HOLDERS, "token-a", 10_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();

    let (acquired, remaining) = acquire(LOCK, FENCE, HOLDERS, "token-b", 60_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(acquired, 0);
    assert!(
        remaining > 9_000 && remaining <= 10_000,
        "holder's pttl, got {remaining}"
    );
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a");
    let fence: i64 = conn.get(FENCE).unwrap();
    assert_eq!(fence, granted, "a refused attempt does not raise the fence");
    assert!(
        pttl(&mut conn, LOCK) <= 10_000,
        "the holder's lease is not extended"
    );
}

#[lockscript_test::test]
fn acquire_on_key_without_expiry_returns_minus_one(mut conn: redis::Connection) {
    let _: () = conn.set(LOCK, "someone").unwrap();
    let reply = acquire(LOCK, FENCE, HOLDERS, "token-b", 1_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(reply, (0, -1));
}

/// `conn` subscribed to the release channel, with a short read timeout.
fn subscribed(conn: &mut redis::Connection) -> redis::PubSub<'_> {
    let mut pubsub = conn.as_pubsub();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    pubsub.subscribe(CHANNEL).unwrap();
    pubsub
}

fn next_message(sub: &mut redis::PubSub<'_>) -> Option<(String, String)> {
    match sub.get_message() {
        Ok(msg) => Some((
            msg.get_channel_name().to_owned(),
            msg.get_payload().unwrap(),
        )),
        Err(e) if e.is_timeout() => None,
        Err(e) => panic!("pubsub: {e}"),
    }
}

#[lockscript_test::test]
fn compare_del_of_own_lock_deletes_and_publishes_release(
    server: &TestRedis,
    mut conn: redis::Connection,
) {
    let mut sub_conn = server.connection();
    let mut sub = subscribed(&mut sub_conn);
    acquire(LOCK, FENCE, HOLDERS, "token-a", 30_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();

    assert_eq!(compare_del(LOCK, "token-a").invoke(&mut conn).unwrap(), 1);
    let exists: bool = conn.exists(LOCK).unwrap();
    assert!(!exists);
    assert_eq!(
        next_message(&mut sub),
        Some((CHANNEL.to_owned(), "released".to_owned()))
    );
}

#[lockscript_test::test]
fn compare_del_of_another_owners_lock_is_refused_silently(
    server: &TestRedis,
    mut conn: redis::Connection,
) {
    let mut sub_conn = server.connection();
    let mut sub = subscribed(&mut sub_conn);
    acquire(LOCK, FENCE, HOLDERS, "token-a", 30_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();

    assert_eq!(compare_del(LOCK, "token-b").invoke(&mut conn).unwrap(), 0);
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a");
    assert_eq!(next_message(&mut sub), None, "no release is announced");
}

#[lockscript_test::test]
fn compare_del_of_missing_lock_returns_zero(server: &TestRedis, mut conn: redis::Connection) {
    let mut sub_conn = server.connection();
    let mut sub = subscribed(&mut sub_conn);
    assert_eq!(compare_del(LOCK, "token-a").invoke(&mut conn).unwrap(), 0);
    assert_eq!(next_message(&mut sub), None);
}

#[lockscript_test::test]
fn renew_of_own_lock_sets_the_new_lease(mut conn: redis::Connection) {
    acquire(LOCK, FENCE, HOLDERS, "token-a", 2_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();

    assert_eq!(renew(LOCK, "token-a", 60_000).invoke(&mut conn).unwrap(), 1);
    let ttl = pttl(&mut conn, LOCK);
    assert!(ttl > 59_000 && ttl <= 60_000, "pttl {ttl}");
}

#[lockscript_test::test]
fn renew_of_another_owners_lock_is_refused(mut conn: redis::Connection) {
    acquire(LOCK, FENCE, HOLDERS, "token-a", 2_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();

    assert_eq!(renew(LOCK, "token-b", 60_000).invoke(&mut conn).unwrap(), 0);
    assert!(pttl(&mut conn, LOCK) <= 2_000, "lease unchanged");
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a");
}

#[lockscript_test::test]
fn renew_of_missing_lock_creates_nothing(mut conn: redis::Connection) {
    assert_eq!(renew(LOCK, "token-a", 60_000).invoke(&mut conn).unwrap(), 0);
    let exists: bool = conn.exists(LOCK).unwrap();
    assert!(!exists);
}

#[lockscript_test::test]
fn handover_of_own_lock_passes_it_with_a_new_lease_and_fence_and_publishes_nothing(
    server: &TestRedis,
    mut conn: redis::Connection,
) {
    let mut sub_conn = server.connection();
    let mut sub = subscribed(&mut sub_conn);
    let (_, granted) = acquire(LOCK, FENCE, HOLDERS, "token-a", 2_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();

    let fence = handover(LOCK, FENCE, "token-a", "token-b", 60_000, 90_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(fence, granted + 1, "the next holder gets the next fence");
    let fence_ttl = pttl(&mut conn, FENCE);
    assert!(
        fence_ttl > 89_000 && fence_ttl <= 90_000,
        "counter pttl {fence_ttl}"
    );
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-b");
    let ttl = pttl(&mut conn, LOCK);
    assert!(
        ttl > 59_000 && ttl <= 60_000,
        "the next holder's lease: {ttl}"
    );
    assert_eq!(next_message(&mut sub), None, "no release is announced");
}

#[lockscript_test::test]
fn handover_of_another_owners_or_a_missing_lock_changes_nothing(mut conn: redis::Connection) {
    let reply = handover(LOCK, FENCE, "token-a", "token-b", 60_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(reply, 0);
    assert!(!conn.exists::<_, bool>(LOCK).unwrap(), "nothing created");
    assert!(!conn.exists::<_, bool>(FENCE).unwrap(), "fence untouched");

    let (_, granted) = acquire(LOCK, FENCE, HOLDERS, "token-a", 2_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    let reply = handover(LOCK, FENCE, "token-x", "token-b", 60_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(reply, 0);
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a");
    let fence: i64 = conn.get(FENCE).unwrap();
    assert_eq!(fence, granted);
    assert!(pttl(&mut conn, LOCK) <= 2_000, "lease unchanged");
}

/// When a script fails, it has changed nothing: its error reply always means "not
/// acquired" / "not handed over", so a client that reads it as such never leaves a lock
/// behind that nobody owns. (A fencing counter that is not a number makes `INCR` fail.)
#[lockscript_test::test]
fn acquire_and_handover_that_fail_change_nothing(mut conn: redis::Connection) {
    // An acquire that must fail with the server's error reply (`what` names the case).
    let refused = |conn: &mut redis::Connection, fence_ms: u64, what: &str| {
        let err = acquire(LOCK, FENCE, HOLDERS, "token-a", 30_000, fence_ms)
            .invoke(conn)
            .unwrap_err();
        assert!(
            matches!(err, lockscript::LockError::Script { .. }),
            "{what}: {err:?}"
        );
    };
    let _: () = conn.set(FENCE, "not a number").unwrap();
    refused(&mut conn, FENCE_MS, "a counter that is not a number");
    assert!(
        !conn.exists::<_, bool>(LOCK).unwrap(),
        "no lock key left after the failed acquire"
    );

    let _: () = conn.set(LOCK, "token-a").unwrap();
    let err = handover(LOCK, FENCE, "token-a", "token-b", 30_000, FENCE_MS)
        .invoke(&mut conn)
        .unwrap_err();
    assert!(
        matches!(err, lockscript::LockError::Script { .. }),
        "{err:?}"
    );
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a", "the lock still belongs to the holder");

    let _: () = conn.del(LOCK).unwrap();
    // The lock key is written first; a counter life the server refuses fails the steps
    // after it, which take it back: with the counter missing (no counter left that
    // would start low) and with the counter there (raised by one, a skipped number).
    let _: () = conn.del(FENCE).unwrap();
    for counter in ["missing", "present"] {
        let before: Option<i64> = conn.get(FENCE).unwrap();
        refused(&mut conn, u64::MAX, counter);
        assert!(
            !conn.exists::<_, bool>(LOCK).unwrap(),
            "{counter}: no lock key"
        );
        let after: Option<i64> = conn.get(FENCE).unwrap();
        assert_eq!(after, before.map(|f| f + 1), "{counter}: the counter");
        if before.is_none() {
            acquire(LOCK, FENCE, HOLDERS, "token-a", 30_000, FENCE_MS)
                .invoke(&mut conn)
                .unwrap();
            let _: () = conn.del(LOCK).unwrap();
        }
    }
}
