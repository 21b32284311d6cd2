//! The least privilege a lock user needs, as documented in the guide (lockscript::guide::servers): scripts run
//! with the caller's ACL permissions, so the user needs the commands the scripts call,
//! the key pattern and the release channels, not just EVAL/EVALSHA.

use std::time::Duration;

use lockscript::{LockError, Locks, RetryPolicy};
use lockscript_test::server::RedisServer;

/// The guide's rules for a lock user (default key prefix `lock:`), with its password.
fn lock_user_rules() -> Vec<&'static str> {
    let mut rules = vec!["on", ">s3cret"];
    rules.extend(lockscript_test::acl::LOCK_USER_RULES);
    rules
}

fn create_user(server: &RedisServer, name: &str, rules: &[&str]) -> redis::Client {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(name);
    for rule in rules {
        cmd.arg(*rule);
    }
    let _: () = cmd.query(&mut server.connection()).unwrap();
    redis::Client::open(format!(
        "redis://{name}:s3cret@127.0.0.1:{}/",
        server.port()
    ))
    .unwrap()
}

/// A handle for the user of `client`: 300 ms leases, 5 s waits.
async fn connect_as(client: &redis::Client) -> Locks {
    Locks::connect(client)
        .await
        .unwrap()
        .ttl(Duration::from_millis(300))
        .wait_timeout(Duration::from_secs(5))
}

/// A fair handle for the user of `client`: 3 s leases (its ticket renewed every second).
async fn fair_as(client: &redis::Client) -> Locks {
    connect_as(client)
        .await
        .fair(true)
        .ttl(Duration::from_secs(3))
}

/// `ACL SETUSER locker <rule>`, as the server's administrator.
fn set_locker(server: &RedisServer, rule: &str) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg(rule)
        .query(&mut server.connection())
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rules_are_enough_for_the_whole_lock_cycle() {
    let server = RedisServer::start();
    let client = create_user(&server, "locker", &lock_user_rules());
    let connect = || async {
        connect_as(&client).await.retry(RetryPolicy::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
        ))
    };
    let locks = connect().await;
    let holder = locks.lock("orders").await.unwrap();
    let f0 = holder.fencing_token();
    // A waiter of the same handle (handed the lock by handover.lua) and one of another
    // handle (woken by compare-del's release notification).
    let local = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("orders").await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let remote = {
        let other = connect().await;
        tokio::spawn(async move { other.lock("orders").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await; // watchdog renewals happen
    assert!(holder.is_held().await.unwrap());
    holder.extend(Duration::from_secs(1)).await.unwrap();
    holder.release().await.unwrap();
    let next = local.await.unwrap().unwrap();
    let f1 = next.fencing_token();
    assert!(f1 > f0);
    next.release().await.unwrap();
    // Only the release notification (subscribe + publish) can wake it in time.
    let last = remote.await.unwrap().unwrap();
    assert!(last.fencing_token() > f1);
    last.release().await.unwrap();
}

/// A lock user set up by the rules of a version before the acquire transaction (no
/// `MULTI`, no `EXEC`) still locks: the first attempt's commands run one by one (the
/// server refuses `MULTI` and runs each as it comes), later ones as
/// acquire-with-retry.lua. Nothing is left held, and tokens rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_of_earlier_versions_without_multi_still_lock() {
    let server = RedisServer::start();
    let rules: Vec<&str> = (lock_user_rules().into_iter())
        .filter(|r| !matches!(*r, "+multi" | "+exec"))
        .collect();
    let client = create_user(&server, "earlier", &rules);
    let locks = connect_as(&client).await;
    let mut last = 0;
    for _ in 0..3 {
        let guard = locks.try_lock("orders").await.unwrap().expect("free");
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.release().await.unwrap();
        let left: Option<String> = redis::cmd("GET")
            .arg("lock:{orders}")
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(left, None, "released, nothing left held");
    }
    let counter: u64 = redis::cmd("GET")
        .arg("lock:{orders}:fence")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(counter, last, "each grant's token is the counter's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rules_are_enough_for_fair_locks_read_write_locks_and_semaphores() {
    let server = RedisServer::start();
    let client = create_user(&server, "locker", &lock_user_rules());
    let connect = || connect_as(&client);
    // Fair: a waiter of another handle is handed the lock on its own channel (a 3 s
    // lease: its ticket is renewed every 666 ms, so one call is all it makes here).
    let fair = || async { connect().await.fair(true).ttl(Duration::from_secs(3)) };
    let (holder, waiter) = (fair().await, fair().await);
    let first = holder.lock("fair").await.unwrap();
    let next = tokio::spawn(async move { waiter.lock("fair").await.map(|g| g.attempts()) });
    tokio::time::sleep(Duration::from_millis(400)).await;
    first.release().await.unwrap();
    assert_eq!(
        next.await.unwrap().unwrap(),
        1,
        "handed over, no second call"
    );
    // Read/write: readers renew, a writer waits, is handed the lock, downgrades.
    let rw = connect().await.rw();
    let reader = rw.read("doc").await.unwrap();
    let writer = {
        let rw = connect().await.rw();
        tokio::spawn(async move { rw.write("doc").await })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(reader.is_held().await.unwrap());
    reader.release().await.unwrap();
    let read_again = writer.await.unwrap().unwrap().downgrade().await.unwrap();
    read_again.release().await.unwrap();
    // Semaphore: permits renew and come back.
    let pool = connect().await.semaphore(1);
    let permit = pool.acquire("pool").await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(permit.is_held().await.unwrap());
    permit.release().await.unwrap();
    pool.try_acquire("pool")
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rules_are_enough_for_multi_locks_and_elections() {
    let server = RedisServer::start();
    let client = create_user(&server, "locker", &lock_user_rules());
    let locks = connect_as(&client).await;
    let all = locks.lock_all(&["a", "b", "c"]).await.unwrap();
    assert!(locks.try_lock_all(&["c", "d"]).await.unwrap().is_none());
    all.release().await.unwrap();

    let election = locks.election("leader");
    let mut observer = election.observe();
    assert_eq!(observer.next().await.unwrap(), None);
    let leadership = election.campaign("me").await.unwrap();
    let seen = observer.next().await.unwrap().unwrap();
    assert_eq!((seen.value.as_str(), seen.term), ("me", leadership.term()));
    leadership.proclaim("me again").await.unwrap();
    assert_eq!(election.leader().await.unwrap().unwrap().value, "me again");
    leadership.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

#[tokio::test]
async fn a_missing_permission_is_an_error_that_names_it() {
    let server = RedisServer::start();
    let rules: Vec<&str> = lock_user_rules()
        .iter()
        .copied()
        .filter(|r| *r != "+publish")
        .collect();
    let client = create_user(&server, "nopublish", &rules);
    let locks = Locks::connect(&client).await.unwrap();
    let guard = locks.lock("orders").await.unwrap();
    let token: String = redis::cmd("GET")
        .arg("lock:{orders}")
        .query(&mut server.connection())
        .unwrap();
    let err = guard.release().await.unwrap_err();
    // All or nothing: the refused PUBLISH comes before the DEL, so the failed release
    // deleted nothing (it is not a release that reports an error).
    let still: Option<String> = redis::cmd("GET")
        .arg("lock:{orders}")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(still, Some(token), "the lock is still held");
    match &err {
        LockError::Permission {
            script, command, ..
        } => {
            assert_eq!(*script, "compare-del");
            assert_eq!(command.as_deref(), Some("PUBLISH"));
        }
        other => panic!("expected a permission error, got {other:?}"),
    }
    assert!(
        err.to_string().contains("+publish"),
        "says what to grant: {err}"
    );

    let rules: Vec<&str> = lock_user_rules()
        .iter()
        .copied()
        .filter(|r| *r != "~lock:*")
        .collect();
    let client = create_user(&server, "nokeys", &rules);
    let err = Locks::connect(&client)
        .await
        .unwrap()
        .try_lock("orders")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Permission { command: None, message, .. } if message.contains("key")),
        "names the missing key permission: {err:?}"
    );
}

/// A queued grant is written before it is announced. fair-queue.lua hands the lock to
/// the first waiter by a message on the waiter's channel; a script that stops midway
/// keeps what it did (Redis undoes nothing), so a message sent before the grant's
/// writes announced a grant the server then refused to write (here `SET` taken from
/// the lock user while a waiter queued): the waiter held a lock nobody recorded, with a
/// fence the next grant repeated. Found by the chaos checker (`acl_deny`, seed 21).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_grant_the_server_refused_to_write_is_never_announced() {
    let server = RedisServer::start();
    let client = create_user(&server, "locker", &lock_user_rules());
    let fair = || fair_as(&client);
    let (holder, waiter) = (fair().await, fair().await);
    let first = holder.lock("queued").await.unwrap();
    let granted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let next = {
        let (granted, waiter) = (granted.clone(), waiter.clone());
        tokio::spawn(async move {
            let guard = waiter.lock("queued").await;
            *granted.lock().unwrap() = Some(std::time::Instant::now());
            guard
        })
    };
    // The waiter's ticket is queued (it is renewed every second: 3 s lease).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let admin = |rule: &str| set_locker(&server, rule);
    admin("-set");
    let denied_at = std::time::Instant::now();
    let refused = first.release().await;
    assert!(
        matches!(refused, Err(LockError::Permission { .. })),
        "the release's handoff needs SET: {refused:?}"
    );
    // Long enough for a message to arrive and for a renewal of the waiter's ticket.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let restored_at = std::time::Instant::now();
    admin("+set");
    // The waiter is granted once SET is allowed again, or its wait fails with the
    // permission it met (a renewal of its ticket met the refused grant): never granted
    // while the server could not write the grant.
    let guard = match next.await.unwrap() {
        Ok(guard) => {
            let at = granted.lock().unwrap().expect("granted");
            assert!(
                at >= restored_at,
                "granted {:?} after SET was denied, {:?} before it was allowed again",
                at - denied_at,
                restored_at - at
            );
            guard
        }
        Err(LockError::Permission { command, .. }) => {
            assert_eq!(command.as_deref(), Some("SET"));
            waiter.lock("queued").await.unwrap()
        }
        Err(other) => panic!("the waiter failed: {other:?}"),
    };
    // The grant is the server's: the key holds it and the counter is its fence.
    let fence: u64 = redis::cmd("GET")
        .arg("lock:{queued}:fence")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(guard.fencing_token(), fence);
    assert!(guard.is_held().await.unwrap());
    guard.release().await.unwrap();
}

/// A fair waiter whose handle's subscription the server refused (the lock user's channel
/// rights were revoked a moment, as an operator might) takes its place in the queue at
/// once, and polls: it is served before a waiter that came after it. It used to wait up
/// to a response timeout for its channel to go live first, so a waiter that came 100 ms
/// later took its place; found by the chaos checker (cluster, Valkey 9.1, seed 136,
/// after `acl_channels`: the handles' handoff channels stayed refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_whose_channel_was_refused_keeps_its_place_in_line() {
    let server = RedisServer::start();
    let client = create_user(&server, "locker", &lock_user_rules());
    let fair = || fair_as(&client);
    let channels = |rule: &str| set_locker(&server, rule);
    let holder = fair().await.lock("line").await.unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let wait = |locks: Locks, who: &'static str| {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = locks.lock("line").await.unwrap();
            order.lock().unwrap().push(who);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        })
    };
    let (first, second) = (fair().await, fair().await);
    channels("resetchannels");
    let first = wait(first, "refused, first in line");
    tokio::time::sleep(Duration::from_millis(50)).await;
    channels("&lock:*");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = wait(second, "subscribed, second");
    tokio::time::sleep(Duration::from_millis(600)).await;
    holder.release().await.unwrap();
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["refused, first in line", "subscribed, second"]
    );
}
