//! Fair mode against real servers: one queue per lock on the server, waiters of
//! separate handles (each with its own connections, as separate processes have) served
//! in arrival order by direct handoff, without a second attempt; cancelled and timed-out
//! waiters leave the queue; dead waiters are skipped within the guide's bound; Redis
//! Cluster; the blocking face.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockscript::{LockError, LockGuard, Locks, Redlock};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::server::RedisServer;
use redis::aio::ConnectionLike;

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(10);

/// How long a waiter's ticket lives without renewal, and how often it is renewed
/// (lockscript's fair-mode constants, as the README states them).
const WAITER_LEASE: Duration = Duration::from_secs(2);
const REFRESH: Duration = Duration::from_millis(666);

/// The scheduling slack of a call on this busy two-core machine (as the chaos checker's).
const SLACK: Duration = Duration::from_millis(250);

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"))
}

/// A fair handle of its own: its own connection and its own notification connection.
async fn fair(server: &RedisServer) -> Locks {
    Locks::connect(&server.client())
        .await
        .expect("connect")
        .fair(true)
        .ttl(Duration::from_secs(30))
}

async fn queued<C: ConnectionLike>(conn: &mut C, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("lock:{{{name}}}:queue"))
        .query_async(conn)
        .await
        .unwrap()
}

/// Waits until the queue of `name` holds `n` tickets.
async fn until_queued<C: ConnectionLike>(conn: &mut C, name: &str, n: usize) {
    within(&format!("{n} tickets in the queue"), async {
        while queued(conn, name).await != n {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}

/// Starts `lock(name)` on each handle in turn, each after the previous one is queued;
/// each grant is recorded (handle index, fence, attempts), held `hold`, and released.
async fn queue_up<C>(
    handles: &[Locks<C>],
    name: &'static str,
    hold: Duration,
    conn: &mut impl ConnectionLike,
    already: usize,
) -> (
    Vec<tokio::task::JoinHandle<()>>,
    Arc<Mutex<Vec<(usize, u64, u32)>>>,
)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, locks) in handles.iter().enumerate() {
        let (locks, order) = (locks.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let guard = locks.lock(name).await.expect("granted in turn");
            order
                .lock()
                .unwrap()
                .push((i, guard.fencing_token(), guard.attempts()));
            tokio::time::sleep(hold).await;
            guard.release().await.expect("released in time");
        }));
        until_queued(conn, name, already + i + 1).await;
    }
    (tasks, order)
}

#[tokio::test]
async fn waiters_of_separate_handles_are_served_in_arrival_order_by_handoff() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let holder = fair(&server).await;
    let mut handles = Vec::new();
    for _ in 0..5 {
        handles.push(fair(&server).await);
    }
    let first = holder.lock("fifo").await.unwrap();
    let first_fence = first.fencing_token();
    let (tasks, order) = queue_up(&handles, "fifo", Duration::from_millis(5), &mut conn, 0).await;
    first.release().await.unwrap();
    for task in tasks {
        within("every waiter granted", task).await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let turns: Vec<usize> = order.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(turns, [0, 1, 2, 3, 4], "first come, first served");
    // Each waiter made one call, which queued it: the lock came to it by handoff.
    for (i, _, attempts) in &order {
        assert_eq!(*attempts, 1, "waiter {i} made a second attempt");
    }
    let fences: Vec<u64> = order.iter().map(|(_, f, _)| *f).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]) && fences[0] > first_fence,
        "fences rise with each handoff: {fences:?}"
    );
    assert_eq!(queued(&mut conn, "fifo").await, 0);
    let left: Option<String> = redis::cmd("GET")
        .arg("lock:{fifo}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, None, "the last release frees the lock");
}

#[tokio::test]
async fn a_handoff_reaches_the_waiter_within_the_release_round_trip() {
    // The waiter's lock() returns as soon as its handoff message arrives: bounded by
    // the release's call plus a message, far below a renewal interval.
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let (holder, waiter) = (fair(&server).await, fair(&server).await);
    let guard = holder.lock("quick").await.unwrap();
    let task = tokio::spawn(async move {
        let g = waiter.lock("quick").await.unwrap();
        (Instant::now(), g)
    });
    until_queued(&mut conn, "quick", 1).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (granted, g) = within("the handoff", task).await.unwrap();
    assert_eq!(g.attempts(), 1);
    let took = granted - released;
    assert!(
        took < REFRESH / 2,
        "granted {took:?} after the release: by the message, not by a renewal"
    );
    // The handed lease is valid from no later than the release.
    assert!(g.lease().valid_until() > granted);
    g.release().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_or_timed_out_wait_leaves_the_queue() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let holder = fair(&server).await;
    let guard = holder.lock("leave").await.unwrap();

    // Cancelled: the future is dropped while queued.
    let waiter = fair(&server).await;
    let cancelled = tokio::spawn(async move { waiter.lock("leave").await.map(drop) });
    until_queued(&mut conn, "leave", 1).await;
    cancelled.abort();
    let dropped = Instant::now();
    until_queued(&mut conn, "leave", 0).await;
    assert!(
        dropped.elapsed() < SLACK,
        "the ticket left {:?} after the cancel",
        dropped.elapsed()
    );

    // Timed out: wait_timeout ends the wait, and the ticket goes with it.
    let waiter = fair(&server).await.wait_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let e = waiter.lock("leave").await.unwrap_err();
    assert!(matches!(e, LockError::Timeout { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_millis(300) + Duration::from_millis(500));
    until_queued(&mut conn, "leave", 0).await;
    assert!(started.elapsed() < Duration::from_millis(300) + SLACK * 2);

    // Nobody waits: the release frees the lock.
    guard.release().await.unwrap();
    let left: Option<String> = redis::cmd("GET")
        .arg("lock:{leave}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, None);
}

/// A ticket for a waiter that never renews it and listens nowhere: a process that died
/// right after queueing.
async fn dead_ticket<C: ConnectionLike>(conn: &mut C, name: &str, claim: Duration) -> String {
    let token = format!("{:032x}", 0xdead_u128 + u128::from(claim.subsec_nanos()));
    let ticket = format!("{token} {} x nobody-listens", claim.as_millis());
    let keys = (
        format!("lock:{{{name}}}"),
        format!("lock:{{{name}}}:fence"),
        format!("lock:{{{name}}}:queue"),
        format!("lock:{{{name}}}:alive"),
        format!("lock:{{{name}}}:holders"),
        format!("lock:{{{name}}}:fences"),
    );
    let (status, ..) = lockscript::builtin::fair_queue(
        &keys.0, &keys.1, &keys.2, &keys.3, &keys.4, &keys.5, "acquire", &token, &ticket, "x",
        30_000, 3_600_000, 2_000, 0,
    )
    .invoke_async(conn)
    .await
    .unwrap();
    assert_eq!(status, 0, "the dead waiter queued behind the holder");
    token
}

#[tokio::test]
async fn a_waiter_that_died_costs_the_queue_at_most_its_claim_and_one_renewal() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let holder = fair(&server).await;
    let guard = holder.lock("dead").await.unwrap();
    // Died just after queueing, ahead of a live waiter: still alive when the lock is
    // released, so the lock is handed to it, for its claim lease only.
    let claim = Duration::from_millis(600);
    let dead = dead_ticket(&mut conn, "dead", claim).await;
    let waiter = fair(&server).await;
    let task = tokio::spawn(async move {
        let g = waiter.lock("dead").await.unwrap();
        (Instant::now(), g)
    });
    until_queued(&mut conn, "dead", 2).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let holder_now: Option<String> = redis::cmd("GET")
        .arg("lock:{dead}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        holder_now.as_deref(),
        Some(dead.as_str()),
        "handed to the first in line"
    );
    let (granted, g) = within("the live waiter's grant", task).await.unwrap();
    let took = granted - released;
    assert!(
        took >= claim.saturating_sub(Duration::from_millis(20)),
        "the live waiter got the lock {took:?} after the release, inside the dead one's claim"
    );
    assert!(
        took <= claim + REFRESH + SLACK,
        "the dead waiter held the queue up {took:?}: more than its claim ({claim:?}) plus one \
         renewal interval ({REFRESH:?})"
    );
    g.release().await.unwrap();

    // Died long enough ago (past the waiter lease): dropped before anyone is served, so
    // the handoff goes to the live waiter at once.
    let guard = holder.lock("dead").await.unwrap();
    dead_ticket(&mut conn, "dead", Duration::from_secs(2)).await;
    let waiter = fair(&server).await;
    let task = tokio::spawn(async move {
        let g = waiter.lock("dead").await.unwrap();
        (Instant::now(), g)
    });
    until_queued(&mut conn, "dead", 2).await;
    tokio::time::sleep(WAITER_LEASE + Duration::from_millis(50)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (granted, g) = within("the live waiter's grant", task).await.unwrap();
    assert!(
        granted - released < SLACK,
        "a ticket past its lease was not skipped: {:?}",
        granted - released
    );
    g.release().await.unwrap();
    assert_eq!(queued(&mut conn, "dead").await, 0);
}

#[tokio::test]
async fn a_grant_to_a_waiter_that_left_goes_on_to_the_next_at_once() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let holder = fair(&server).await;
    let guard = holder.lock("left").await.unwrap();
    let claim = Duration::from_secs(2);
    let token = dead_ticket(&mut conn, "left", claim).await;
    let ticket = format!("{token} {} x nobody-listens", claim.as_millis());
    let waiter = fair(&server).await;
    let task = tokio::spawn(async move {
        let g = waiter.lock("left").await.unwrap();
        (Instant::now(), g)
    });
    until_queued(&mut conn, "left", 2).await;
    guard.release().await.unwrap();
    // The first in line got it, and leaves (as a cancelled or timed-out waiter does).
    let left = Instant::now();
    let (status, ..) = lockscript::builtin::fair_queue(
        "lock:{left}",
        "lock:{left}:fence",
        "lock:{left}:queue",
        "lock:{left}:alive",
        "lock:{left}:holders",
        "lock:{left}:fences",
        "release",
        &token,
        &ticket,
        "x",
        30_000,
        3_600_000,
        2_000,
        0,
    )
    .invoke_async(&mut conn)
    .await
    .unwrap();
    assert_eq!(status, 1, "it held the lock when it left");
    let (granted, g) = within("the next waiter's grant", task).await.unwrap();
    assert!(
        granted - left < SLACK,
        "passed on {:?} after it left",
        granted - left
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn a_holder_that_died_is_followed_when_its_lease_ends() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let ttl = Duration::from_millis(400);
    let crashed = fair(&server).await.ttl(ttl).watchdog(false);
    let guard = crashed.lock("crash").await.unwrap();
    let expires = guard.lease().valid_until();
    std::mem::forget(guard);
    let waiter = fair(&server).await;
    let task = tokio::spawn(async move {
        let g = waiter.lock("crash").await.unwrap();
        (Instant::now(), g)
    });
    until_queued(&mut conn, "crash", 1).await;
    let (granted, g) = within("the grant after the lease", task).await.unwrap();
    assert!(
        granted <= expires + Duration::from_millis(20) + SLACK,
        "granted {:?} after the dead holder's lease ended",
        granted.saturating_duration_since(expires)
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn try_lock_does_not_jump_the_queue() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let holder = fair(&server).await;
    let guard = holder.lock("jump").await.unwrap();
    let waiter = fair(&server).await;
    let task = tokio::spawn(async move { waiter.lock("jump").await.unwrap() });
    until_queued(&mut conn, "jump", 1).await;
    // The holder's key vanishes (its lease ran out) while a waiter is queued.
    let _: () = redis::cmd("DEL")
        .arg("lock:{jump}")
        .query_async(&mut conn)
        .await
        .unwrap();
    let other = fair(&server).await;
    assert!(
        other.try_lock("jump").await.unwrap().is_none(),
        "try_lock took a lock the first in line was owed"
    );
    let g = within("the waiter's grant", task).await.unwrap();
    g.release().await.unwrap();
    drop(guard);
    // Nobody queued: try_lock takes a free lock.
    let g = other.try_lock("jump").await.unwrap().expect("free");
    g.release().await.unwrap();
}

#[tokio::test]
async fn redlock_refuses_fair_mode_with_a_clear_error() {
    let server = RedisServer::start();
    let redlock = Redlock::connect(&[server.client()])
        .await
        .unwrap()
        .fair(true);
    let e = redlock.try_lock("x").await.unwrap_err();
    assert!(
        matches!(&e, LockError::InvalidSettings(m) if m.contains("fair")),
        "{e}"
    );
}

#[tokio::test]
async fn fair_mode_serves_in_order_on_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let mut conn = cluster.async_connection().await;
    let connect = || async {
        Locks::connect_cluster(cluster.urls())
            .await
            .unwrap()
            .fair(true)
    };
    let holder = connect().await;
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(connect().await);
    }
    for name in ["c-a", "c-b", "c-c"] {
        let first = holder.lock(name).await.unwrap();
        let (tasks, order) = queue_up(&handles, name, Duration::from_millis(2), &mut conn, 0).await;
        first.release().await.unwrap();
        for task in tasks {
            within("every waiter granted", task).await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let turns: Vec<usize> = order.iter().map(|(i, _, _)| *i).collect();
        assert_eq!(turns, [0, 1, 2], "{name}: first come, first served");
        assert!(
            order.iter().all(|(_, _, attempts)| *attempts == 1),
            "{order:?}"
        );
    }
}

#[test]
fn blocking_handles_are_served_in_arrival_order_with_async_ones() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let queued_now = |conn: &mut redis::Connection| -> usize {
        redis::cmd("ZCARD")
            .arg("lock:{mixed}:queue")
            .query(conn)
            .unwrap()
    };
    let blocking = || {
        lockscript::blocking::Locks::connect(&server.client())
            .unwrap()
            .fair(true)
    };
    let holder = blocking();
    let first = holder.lock("mixed").unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..3 {
        let (locks, order) = (blocking(), Arc::clone(&order));
        threads.push(std::thread::spawn(move || {
            let guard = locks.lock("mixed").expect("granted in turn");
            order.lock().unwrap().push((i, guard.attempts()));
            std::thread::sleep(Duration::from_millis(5));
            guard.release().expect("released in time");
        }));
        let deadline = Instant::now() + PATIENCE;
        while queued_now(&mut conn) != i + 1 {
            assert!(Instant::now() < deadline, "waiter {i} queued");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // An async waiter of another handle queues last.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let async_locks = runtime.block_on(fair(&server));
    let async_order = Arc::clone(&order);
    let task = runtime.spawn(async move {
        let guard = async_locks.lock("mixed").await.unwrap();
        async_order.lock().unwrap().push((3, guard.attempts()));
        guard.release().await.unwrap();
    });
    let deadline = Instant::now() + PATIENCE;
    while queued_now(&mut conn) != 4 {
        assert!(Instant::now() < deadline, "the async waiter queued");
        std::thread::sleep(Duration::from_millis(2));
    }
    first.release().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    runtime.block_on(task).unwrap();
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "first come, first served across faces"
    );
    assert!(order.iter().all(|(_, a)| *a == 1), "{order:?}");
}

#[allow(dead_code)]
fn assert_guard_type(_: &LockGuard) {}
