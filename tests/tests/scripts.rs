//! Every branch of the lock scripts (acquire, compare-del, renew, handover), against a
//! real redis-server.

use std::time::Duration;

use lockscript::builtin::{acquire, compare_del, handover, renew};
use lockscript_test::TestRedis;
use redis::Commands;

const LOCK: &str = "lock:{orders}";
const FENCE: &str = "lock:{orders}:fence";
const CHANNEL: &str = "lock:{orders}:released";

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    conn.pttl(key).expect("PTTL")
}

#[lockscript_test::test]
fn acquire_on_free_lock_stores_token_with_ttl_and_raises_fence(mut conn: redis::Connection) {
    let first = acquire(LOCK, FENCE, "token-a", 30_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(first, (1, 1));
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a");
    let ttl = pttl(&mut conn, LOCK);
    assert!(ttl > 29_000 && ttl <= 30_000, "pttl {ttl}");
    assert_eq!(pttl(&mut conn, FENCE), -1, "the fence never expires");

    let _: i64 = conn.del(LOCK).unwrap();
    let second = acquire(LOCK, FENCE, "token-b", 30_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(second, (1, 2), "each grant gets a larger fence");
}

#[lockscript_test::test]
fn acquire_on_held_lock_returns_holder_pttl_and_changes_nothing(mut conn: redis::Connection) {
    acquire(LOCK, FENCE, "token-a", 10_000)
        .invoke(&mut conn)
        .unwrap();

    let (acquired, remaining) = acquire(LOCK, FENCE, "token-b", 60_000)
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
    assert_eq!(fence, 1, "a refused attempt does not raise the fence");
    assert!(
        pttl(&mut conn, LOCK) <= 10_000,
        "the holder's lease is not extended"
    );
}

#[lockscript_test::test]
fn acquire_on_key_without_expiry_returns_minus_one(mut conn: redis::Connection) {
    let _: () = conn.set(LOCK, "someone").unwrap();
    let reply = acquire(LOCK, FENCE, "token-b", 1_000)
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
    acquire(LOCK, FENCE, "token-a", 30_000)
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
    acquire(LOCK, FENCE, "token-a", 30_000)
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
    acquire(LOCK, FENCE, "token-a", 2_000)
        .invoke(&mut conn)
        .unwrap();

    assert_eq!(renew(LOCK, "token-a", 60_000).invoke(&mut conn).unwrap(), 1);
    let ttl = pttl(&mut conn, LOCK);
    assert!(ttl > 59_000 && ttl <= 60_000, "pttl {ttl}");
}

#[lockscript_test::test]
fn renew_of_another_owners_lock_is_refused(mut conn: redis::Connection) {
    acquire(LOCK, FENCE, "token-a", 2_000)
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
    acquire(LOCK, FENCE, "token-a", 2_000)
        .invoke(&mut conn)
        .unwrap();

    let fence = handover(LOCK, FENCE, "token-a", "token-b", 60_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(fence, 2, "the next holder gets the next fence");
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
    let reply = handover(LOCK, FENCE, "token-a", "token-b", 60_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(reply, 0);
    assert!(!conn.exists::<_, bool>(LOCK).unwrap(), "nothing created");
    assert!(!conn.exists::<_, bool>(FENCE).unwrap(), "fence untouched");

    acquire(LOCK, FENCE, "token-a", 2_000)
        .invoke(&mut conn)
        .unwrap();
    let reply = handover(LOCK, FENCE, "token-x", "token-b", 60_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(reply, 0);
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a");
    let fence: i64 = conn.get(FENCE).unwrap();
    assert_eq!(fence, 1);
    assert!(pttl(&mut conn, LOCK) <= 2_000, "lease unchanged");
}

/// When a script fails, it has changed nothing: its error reply always means "not
/// acquired" / "not handed over", so a client that reads it as such never leaves a lock
/// behind that nobody owns. (A fencing counter that is not a number makes `INCR` fail.)
#[lockscript_test::test]
fn acquire_and_handover_that_fail_change_nothing(mut conn: redis::Connection) {
    let _: () = conn.set(FENCE, "not a number").unwrap();
    let err = acquire(LOCK, FENCE, "token-a", 30_000)
        .invoke(&mut conn)
        .unwrap_err();
    assert!(
        matches!(err, lockscript::LockError::Script { .. }),
        "{err:?}"
    );
    assert!(
        !conn.exists::<_, bool>(LOCK).unwrap(),
        "no lock key left after the failed acquire"
    );

    let _: () = conn.set(LOCK, "token-a").unwrap();
    let err = handover(LOCK, FENCE, "token-a", "token-b", 30_000)
        .invoke(&mut conn)
        .unwrap_err();
    assert!(
        matches!(err, lockscript::LockError::Script { .. }),
        "{err:?}"
    );
    let held: String = conn.get(LOCK).unwrap();
    assert_eq!(held, "token-a", "the lock still belongs to the holder");
}
