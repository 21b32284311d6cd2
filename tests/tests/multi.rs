//! Multi-locks against real servers: all or nothing, a fencing token per name, one call
//! for names on one server or in one Cluster slot, slot by slot otherwise, nothing held
//! after a failure, no deadlock between opposite orders, the wait and loss bounds.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockscript::{LockError, Locks, RetryPolicy};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::command_calls;
use lockscript_test::server::RedisServer;
use redis::aio::ConnectionManager;

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(30);

/// How late `lost()` may fire after the validity end, and how far a call may overrun its
/// bound on a busy machine: the guide's figures.
const LOSS_SLACK: Duration = Duration::from_millis(100);
const CALL_SLACK: Duration = Duration::from_millis(250);

async fn locks(server: &RedisServer) -> Locks<ConnectionManager> {
    Locks::connect(&server.client()).await.expect("connect")
}

/// Waiters that move only when a release notifies them: a 30 s backoff, a 60 s lease.
async fn patient(server: &RedisServer) -> Locks<ConnectionManager> {
    locks(server)
        .await
        .ttl(Duration::from_secs(60))
        .wait_timeout(Duration::from_secs(20))
        .retry(RetryPolicy::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
        ))
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"))
}

fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// Every key of `names` that exists on `conn`, with its value.
fn held(conn: &mut impl redis::ConnectionLike, names: &[&str]) -> HashMap<String, String> {
    names
        .iter()
        .filter_map(|n| {
            let v: Option<String> = redis::cmd("GET").arg(lock_key(n)).query(conn).unwrap();
            v.map(|v| ((*n).to_owned(), v))
        })
        .collect()
}

/// Script calls the server ran (cached or not).
fn script_calls(server: &RedisServer) -> u64 {
    let mut conn = server.connection();
    command_calls(&mut conn, "evalsha") + command_calls(&mut conn, "eval")
}

#[tokio::test]
async fn names_on_one_server_are_taken_in_one_call_each_with_its_own_fence() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    // Earlier grants of `b` raise its counter above the others'.
    for _ in 0..3 {
        locks
            .try_lock("b")
            .await
            .unwrap()
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let b_before = locks.try_lock("b").await.unwrap().unwrap();
    let b_last = b_before.fencing_token();
    b_before.release().await.unwrap();

    // The server has the script cached from here on (its first call is EVALSHA, then
    // EVAL on NOSCRIPT).
    locks
        .lock_all(&["w"])
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let calls = script_calls(&server);
    let all = locks.lock_all(&["c", "a", "b"]).await.unwrap();
    assert_eq!(
        script_calls(&server) - calls,
        1,
        "three names on one server: one script call"
    );
    let mut names = all.names();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(all.fencing_token("b").unwrap() > b_last, "b's fence rises");
    assert!(all.fencing_token("a").is_some() && all.fencing_token("c").is_some());
    assert_eq!(all.fencing_token("d"), None);
    // One owner token on every name; a single lock of any of them is refused.
    let values = held(&mut server.connection(), &["a", "b", "c"]);
    assert_eq!(values.len(), 3);
    assert_eq!(
        values
            .values()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        1
    );
    assert!(locks.try_lock("a").await.unwrap().is_none());
    assert!(locks.try_lock_all(&["z", "c"]).await.unwrap().is_none());
    assert!(all.is_held().await.unwrap());

    let fence_a = all.fencing_token("a").unwrap();
    all.release().await.unwrap();
    assert!(held(&mut server.connection(), &["a", "b", "c", "z"]).is_empty());
    let again = locks.try_lock("a").await.unwrap().expect("a is free");
    assert!(
        again.fencing_token() > fence_a,
        "a single lock's fence rises past it"
    );
}

#[tokio::test]
async fn a_held_name_makes_try_lock_all_take_nothing() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let b = locks.try_lock("b").await.unwrap().unwrap();
    assert!(
        locks
            .try_lock_all(&["a", "b", "c"])
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        held(&mut server.connection(), &["a", "b", "c"])
            .keys()
            .collect::<Vec<_>>(),
        ["b"],
        "only the single lock's name is held"
    );
    b.release().await.unwrap();
    let all = locks.try_lock_all(&["a", "b", "c"]).await.unwrap();
    all.expect("all free").release().await.unwrap();
}

#[tokio::test]
async fn readers_of_a_name_refuse_the_multi_lock_with_wrong_kind() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let rw = locks.rw();
    let reader = rw.try_read("b").await.unwrap().unwrap();
    let err = locks.try_lock_all(&["a", "b"]).await.unwrap_err();
    assert!(
        matches!(err, LockError::WrongKind { ref name, .. } if name == "b"),
        "{err:?}"
    );
    assert!(held(&mut server.connection(), &["a"]).is_empty());
    reader.release().await.unwrap();
}

#[tokio::test]
async fn lock_all_waits_for_the_held_name_and_is_woken_by_its_release() {
    let server = RedisServer::start();
    let locks = patient(&server).await;
    let other = patient(&server).await;
    let b = other.lock("b").await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock_all(&["a", "b"]).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    b.release().await.unwrap();
    let all = within("the multi-lock", waiter).await.unwrap().unwrap();
    // Its backoff is 30 s and the lease 60 s: only the release notification wakes it.
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken {:?} after the release",
        released.elapsed()
    );
    assert!(all.guards().iter().all(|g| g.attempts() >= 2));
    all.release().await.unwrap();
}

#[tokio::test]
async fn lock_all_times_out_within_its_bound_and_holds_nothing() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .await
        .wait_timeout(Duration::from_millis(300));
    let b = locks.lock("b").await.unwrap();
    let start = Instant::now();
    let err = locks.lock_all(&["a", "b", "c"]).await.unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    let bound = Duration::from_millis(300) + lockscript::DEFAULT_RESPONSE_TIMEOUT;
    assert!(took <= bound + CALL_SLACK, "took {took:?}, bound {bound:?}");
    assert_eq!(held(&mut server.connection(), &["a", "c"]).len(), 0);
    b.release().await.unwrap();
}

#[tokio::test]
async fn bad_name_lists_are_refused_with_a_setting_error() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let none: [&str; 0] = [];
    for err in [
        locks.lock_all(&none).await.unwrap_err(),
        locks.lock_all(&["a", "b", "a"]).await.unwrap_err(),
        locks.try_lock_all(&["a", ""]).await.unwrap_err(),
        locks
            .clone()
            .fair(true)
            .lock_all(&["a", "b"])
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                LockError::InvalidSettings(_) | LockError::InvalidName { .. }
            ),
            "{err:?}"
        );
    }
    let many: Vec<String> = (0..=lockscript::MAX_NAMES)
        .map(|i| format!("n{i}"))
        .collect();
    assert!(matches!(
        locks.try_lock_all(&many).await,
        Err(LockError::InvalidSettings(_))
    ));
    assert!(held(&mut server.connection(), &["a", "b"]).is_empty());
}

#[tokio::test]
async fn lost_fires_by_the_earliest_validity_end() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .await
        .ttl(Duration::from_millis(300))
        .watchdog(false);
    let all = locks.lock_all(&["a", "b"]).await.unwrap();
    let end = all.valid_until();
    assert!(all.guards().iter().all(|g| g.valid_until() >= end));
    within("the loss", all.lost()).await;
    let late = Instant::now().saturating_duration_since(end);
    assert!(
        late <= LOSS_SLACK,
        "lost() fired {late:?} after the validity end"
    );
    assert!(all.is_lost());
    assert!(matches!(
        all.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test]
async fn the_watchdog_renews_every_name_together() {
    let server = RedisServer::start();
    let locks = locks(&server).await.ttl(Duration::from_millis(300));
    let all = locks.lock_all(&["a", "b", "c"]).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!all.is_lost() && all.is_held().await.unwrap());
    let mut conn = server.connection();
    for name in ["a", "b", "c"] {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(lock_key(name))
            .query(&mut conn)
            .unwrap();
        assert!(pttl > 0, "{name}'s lease is renewed: pttl {pttl}");
    }
    all.release().await.unwrap();
}

/// Two callers lock overlapping names in opposite orders, over and over, beside a
/// single lock of one of them: all finish, and no two holders of a name ever overlap.
async fn opposite_orders<C>(first: Locks<C>, second: Locks<C>, names: [String; 3])
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let busy: Arc<HashMap<String, AtomicBool>> = Arc::new(
        names
            .iter()
            .map(|n| (n.clone(), AtomicBool::new(false)))
            .collect(),
    );
    let [low, mid, high] = names;
    let orders = [
        vec![low.clone(), mid.clone(), high.clone()],
        vec![high, mid.clone(), low],
    ];
    let mut tasks = Vec::new();
    for (order, locks) in orders.into_iter().zip([first.clone(), second]) {
        let busy = Arc::clone(&busy);
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let all = locks.lock_all(&order).await.expect("lock_all");
                for n in &order {
                    assert!(!busy[n].swap(true, Ordering::SeqCst), "{n} held twice");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for n in &order {
                    busy[n].store(false, Ordering::SeqCst);
                }
                all.release().await.expect("release");
            }
        }));
    }
    let single = {
        let busy = Arc::clone(&busy);
        tokio::spawn(async move {
            for _ in 0..25 {
                let guard = first.lock(&mid).await.expect("lock");
                assert!(!busy[&mid].swap(true, Ordering::SeqCst), "{mid} held twice");
                tokio::time::sleep(Duration::from_millis(2)).await;
                busy[&mid].store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        })
    };
    tasks.push(single);
    for task in tasks {
        within("every caller finishing", task).await.unwrap();
    }
}

#[tokio::test]
async fn opposite_orders_finish_without_deadlock_on_one_server() {
    let server = RedisServer::start();
    let (a, b) = (locks(&server).await, locks(&server).await);
    opposite_orders(a, b, ["x".into(), "y".into(), "z".into()]).await;
    assert!(held(&mut server.connection(), &["x", "y", "z"]).is_empty());
}

/// A name in the same Cluster slot as `name` (another hash tag).
fn same_slot_as(name: &str) -> String {
    use redis::cluster_routing::Slot;
    let slot = Slot::for_key(lock_key(name));
    (0..1_000_000)
        .map(|i| format!("twin{i}"))
        .find(|n| Slot::for_key(lock_key(n)) == slot)
        .expect("a twin among a million names")
}

#[tokio::test]
async fn on_a_cluster_one_slot_is_one_call_and_several_go_slot_by_slot() {
    let cluster = RedisCluster::start(3, 0);
    let locks = Locks::connect_cluster(cluster.urls()).await.unwrap();
    let spread: Vec<String> = cluster
        .one_lock_name_per_master("m")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let twin = same_slot_as(&spread[0]);
    // One slot: one call on its master.
    let master = cluster.master_for_key(&lock_key(&spread[0]));
    let node = cluster.node(master);
    let warm = locks.lock_all(&[spread[0].as_str()]).await.unwrap();
    warm.release().await.unwrap();
    let before = script_calls(node);
    let pair = locks
        .lock_all(&[spread[0].as_str(), twin.as_str()])
        .await
        .unwrap();
    assert_eq!(script_calls(node) - before, 1, "one slot, one call");
    pair.release().await.unwrap();

    // Three slots on three masters: each name's own fence, all held, then all free.
    let all = locks.lock_all(&spread).await.unwrap();
    assert_eq!(all.names().len(), 3);
    for (i, name) in spread.iter().enumerate() {
        let node = cluster.node(cluster.master_for_key(&lock_key(name)));
        let names = [name.as_str()];
        assert_eq!(held(&mut node.connection(), &names).len(), 1, "{i}: {name}");
        assert!(all.fencing_token(name).is_some());
    }
    all.release().await.unwrap();
    for name in &spread {
        let node = cluster.node(cluster.master_for_key(&lock_key(name)));
        assert!(held(&mut node.connection(), &[name.as_str()]).is_empty());
    }
}

#[tokio::test]
async fn on_a_cluster_a_failure_midway_leaves_nothing_held() {
    let cluster = RedisCluster::start(3, 0);
    let locks = Locks::connect_cluster(cluster.urls())
        .await
        .unwrap()
        .wait_timeout(Duration::from_millis(300));
    let spread: Vec<String> = cluster
        .one_lock_name_per_master("f")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    // Learn the order the multi-lock takes them in, then hold the last one.
    let probe = locks.lock_all(&spread).await.unwrap();
    let order: Vec<String> = probe.names().into_iter().map(str::to_owned).collect();
    probe.release().await.unwrap();
    let last = locks.lock(&order[2]).await.unwrap();

    let start = Instant::now();
    let err = locks.lock_all(&spread).await.unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    // The wait, its last attempt, and the release of the two slots taken before.
    let bound = Duration::from_millis(300) + 2 * lockscript::DEFAULT_RESPONSE_TIMEOUT;
    assert!(took <= bound + CALL_SLACK, "took {took:?}, bound {bound:?}");
    for name in &order[..2] {
        let node = cluster.node(cluster.master_for_key(&lock_key(name)));
        assert!(
            held(&mut node.connection(), &[name.as_str()]).is_empty(),
            "{name} was taken before the failure and must be released"
        );
    }
    last.release().await.unwrap();
    // A try that finds the last one held takes nothing either.
    let last = locks.lock(&order[2]).await.unwrap();
    assert!(locks.try_lock_all(&spread).await.unwrap().is_none());
    for name in &order[..2] {
        let node = cluster.node(cluster.master_for_key(&lock_key(name)));
        assert!(held(&mut node.connection(), &[name.as_str()]).is_empty());
    }
    last.release().await.unwrap();
}

#[tokio::test]
async fn on_a_cluster_opposite_orders_finish_without_deadlock() {
    let cluster = RedisCluster::start(3, 0);
    let a = Locks::connect_cluster(cluster.urls()).await.unwrap();
    let b = Locks::connect_cluster(cluster.urls()).await.unwrap();
    let spread: Vec<String> = cluster
        .one_lock_name_per_master("d")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let names: [String; 3] = spread.try_into().expect("three masters");
    opposite_orders(a, b, names).await;
}

#[test]
fn the_blocking_face_takes_all_or_nothing_waits_and_never_deadlocks() {
    use lockscript::blocking;
    let server = RedisServer::start();
    let connect = || {
        blocking::Locks::connect(&server.client())
            .unwrap()
            .ttl(Duration::from_secs(60))
            .wait_timeout(Duration::from_secs(20))
            .retry(RetryPolicy::new(
                Duration::from_secs(30),
                Duration::from_secs(30),
            ))
    };
    let (one, two) = (connect(), connect());
    let b = one.lock("b").unwrap();
    assert!(two.try_lock_all(&["a", "b", "c"]).unwrap().is_none());
    assert_eq!(held(&mut server.connection(), &["a", "c"]).len(), 0);
    let waiter = {
        let two = two.clone();
        std::thread::spawn(move || two.lock_all(&["a", "b", "c"]))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished());
    let released = Instant::now();
    b.release().unwrap();
    let all = waiter.join().unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken by the release"
    );
    assert_eq!(all.names().len(), 3);
    assert!(all.is_held().unwrap() && !all.is_lost());
    all.release().unwrap();

    let short = connect().wait_timeout(Duration::from_millis(300));
    let b = one.lock("b").unwrap();
    let start = Instant::now();
    let err = short.lock_all(&["a", "b"]).unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    let bound = Duration::from_millis(300) + lockscript::DEFAULT_RESPONSE_TIMEOUT;
    assert!(start.elapsed() <= bound + CALL_SLACK);
    assert!(held(&mut server.connection(), &["a"]).is_empty());
    b.release().unwrap();

    // Opposite orders on two handles, 25 rounds each: both finish.
    let rounds = |locks: blocking::Locks, order: [&'static str; 3]| {
        std::thread::spawn(move || {
            for _ in 0..25 {
                locks.lock_all(&order).unwrap().release().unwrap();
            }
        })
    };
    let x = rounds(one, ["x", "y", "z"]);
    let y = rounds(two, ["z", "y", "x"]);
    x.join().unwrap();
    y.join().unwrap();
    assert!(held(&mut server.connection(), &["x", "y", "z"]).is_empty());
}

#[tokio::test]
async fn on_a_cluster_a_slot_lost_while_later_ones_are_waited_for_is_taken_again() {
    let cluster = RedisCluster::start(3, 0);
    let spread: Vec<String> = cluster
        .one_lock_name_per_master("l")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    // Short leases the watchdog does not renew: the first slots' run out while the call
    // waits for the last.
    let locks = Locks::connect_cluster(cluster.urls())
        .await
        .unwrap()
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .wait_timeout(Duration::from_secs(10));
    let probe = locks.lock_all(&spread).await.unwrap();
    let order: Vec<String> = probe.names().into_iter().map(str::to_owned).collect();
    probe.release().await.unwrap();
    let other = Locks::connect_cluster(cluster.urls()).await.unwrap();
    let last = other.lock(&order[2]).await.unwrap();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        last.release().await.unwrap();
    });
    let all = within("the multi-lock", locks.lock_all(&spread))
        .await
        .unwrap();
    // Returned with every name still held: none lost on the way.
    assert!(!all.is_lost(), "{all:?}");
    assert!(all.remaining() > Duration::ZERO);
    assert!(all.is_held().await.unwrap());
    releaser.await.unwrap();
    let _ = all.release().await;
}
