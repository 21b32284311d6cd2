//! The async lock API against a real redis-server: grants, waits, fencing, leases,
//! the watchdog and the loss signal, bad input, drop and cancellation.

use std::time::Duration;

use lockscript::{LockError, LockGuard, Locks, RetryPolicy};
use lockscript_test::command_calls;
use lockscript_test::server::RedisServer;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tokio::task::JoinHandle;

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(10);

async fn locks(server: &RedisServer) -> Locks<ConnectionManager> {
    Locks::connect(&server.client()).await.expect("connect")
}

/// A handle whose waiters move only when a release notifies them or hands the lock over:
/// a 60 s lease and a 30 s backoff.
async fn patient(server: &RedisServer) -> Locks<ConnectionManager> {
    locks(server)
        .await
        .ttl(Duration::from_secs(60))
        .retry(RetryPolicy::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
        ))
}

/// `locks.lock(name)` in a task of its own.
fn spawn_lock<C>(
    locks: &Locks<C>,
    name: &'static str,
) -> JoinHandle<Result<LockGuard<C>, LockError>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let locks = locks.clone();
    tokio::spawn(async move { locks.lock(name).await })
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"))
}

#[tokio::test]
async fn try_lock_grants_a_free_lock_with_rising_fencing_tokens() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let first = locks.try_lock("orders:42").await.unwrap().expect("free");
    assert_eq!(first.name(), "orders:42");
    let f0 = first.fencing_token();
    assert_eq!(first.attempts(), 1);
    first.release().await.unwrap();
    let second = locks
        .try_lock("orders:42")
        .await
        .unwrap()
        .expect("free again");
    assert!(second.fencing_token() > f0);
    second.release().await.unwrap();
}

#[tokio::test]
async fn try_lock_on_a_held_lock_returns_none() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let held = locks.try_lock("orders:42").await.unwrap().expect("free");
    assert!(locks.try_lock("orders:42").await.unwrap().is_none());
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_by_the_release_notification() {
    let server = RedisServer::start();
    // Backoff far beyond wait_timeout and a 60 s lease: only the release notification
    // can get the waiter in before it times out. The holder is another handle (a
    // release by the waiter's own handle would hand the lock over instead).
    let locks = patient(&server).await.wait_timeout(Duration::from_secs(5));
    let holder = patient(&server).await.lock("q").await.unwrap();
    let f0 = holder.fencing_token();
    let waiter = spawn_lock(&locks, "q");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    holder.release().await.unwrap();
    let guard = within("the handoff", waiter)
        .await
        .unwrap()
        .expect("waiter acquires");
    assert!(guard.fencing_token() > f0);
    assert!(guard.attempts() <= 3, "attempts {}", guard.attempts());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn waiter_without_notifications_polls_until_release() {
    let server = RedisServer::start();
    let conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let locks = Locks::new(conn)
        .wait_timeout(Duration::from_secs(5))
        .retry(RetryPolicy::new(
            Duration::from_millis(5),
            Duration::from_millis(20),
        ));
    let holder = locks.lock("q").await.unwrap();
    let waiter = spawn_lock(&locks, "q");
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.unwrap();
    let guard = within("the handoff", waiter).await.unwrap().unwrap();
    assert!(guard.attempts() > 1);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn lock_gives_up_with_a_timeout_error() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .await
        .wait_timeout(Duration::from_millis(200));
    let holder = locks.lock("q").await.unwrap();
    let err = locks.lock("q").await.unwrap_err();
    match &err {
        LockError::Timeout {
            name,
            waited,
            attempts,
        } => {
            assert_eq!(name, "q");
            assert!(*waited >= Duration::from_millis(200));
            assert!(*attempts >= 2);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        err.to_string().contains("try_lock"),
        "says what to do: {err}"
    );
    holder.release().await.unwrap();
}

#[tokio::test]
async fn lock_waits_out_an_expired_holder() {
    let server = RedisServer::start();
    let locks = locks(&server).await.wait_timeout(Duration::from_secs(5));
    let crashed = locks
        .clone()
        .ttl(Duration::from_millis(200))
        .watchdog(false);
    let holder = crashed.lock("q").await.unwrap();
    let f0 = holder.fencing_token();
    std::mem::forget(holder); // a holder that vanished without releasing
    let guard = within("the takeover", locks.lock("q")).await.unwrap();
    assert!(guard.fencing_token() > f0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn stale_guard_release_and_extend_are_refused_and_change_nothing() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let stale = locks
        .clone()
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .lock("q")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let fresh = locks.lock("q").await.unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());

    assert!(matches!(
        stale.extend(Duration::from_secs(30)).await,
        Err(LockError::NotHeld { .. })
    ));
    let err = stale.release().await.unwrap_err();
    assert!(
        matches!(err, LockError::NotHeld { ref name } if name == "q"),
        "{err:?}"
    );
    assert!(
        fresh.is_held().await.unwrap(),
        "the new holder keeps its lock"
    );
    fresh.release().await.unwrap();
}

#[tokio::test]
async fn extend_sets_the_new_lease_on_the_server() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .await
        .ttl(Duration::from_secs(2))
        .watchdog(false);
    let guard = locks.lock("q").await.unwrap();
    guard.extend(Duration::from_secs(120)).await.unwrap();
    let mut conn = server.multiplexed().await;
    let pttl: i64 = conn.pttl("lock:{q}").await.unwrap();
    assert!(pttl > 110_000, "pttl {pttl}");
    assert!(guard.remaining() > Duration::from_secs(100));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_the_lock_across_three_ttls() {
    let server = RedisServer::start();
    let locks = locks(&server).await.ttl(Duration::from_millis(150));
    let guard = locks.lock("q").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!guard.is_lost());
    assert!(guard.is_held().await.unwrap());
    assert!(locks.try_lock("q").await.unwrap().is_none());
    guard.release().await.unwrap();
}

/// The watchdog task sleeps until its earliest lease needs it and is only woken for a
/// lease due sooner: a short lease granted while a long one is queued must still be
/// renewed on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_a_short_lease_granted_after_a_long_one() {
    let server = RedisServer::start();
    let long = locks(&server).await.ttl(Duration::from_secs(30));
    let short = long.clone().ttl(Duration::from_millis(150));
    let first = long.lock("long").await.unwrap();
    // Let the task go to sleep until the long lease's renewal, ten seconds away.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = short.lock("short").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_lost(), "the short lease was not renewed");
    assert!(second.is_held().await.unwrap());
    second.release().await.unwrap();
    first.release().await.unwrap();
}
#[tokio::test]
async fn without_watchdog_the_lease_runs_out_and_lost_fires() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .await
        .ttl(Duration::from_millis(100))
        .watchdog(false);
    let guard = locks.lock("q").await.unwrap();
    within("the loss signal", guard.lost()).await;
    assert!(guard.is_lost());
    assert!(!guard.is_held().await.unwrap());
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_key_is_deleted_externally() {
    let server = RedisServer::start();
    let locks = locks(&server).await.ttl(Duration::from_millis(300));
    let guard = locks.lock("q").await.unwrap();
    let mut conn = server.multiplexed().await;
    let _: () = conn.del("lock:{q}").await.unwrap();
    within("the loss signal", guard.lost()).await;
    assert!(matches!(
        guard.extend(Duration::from_secs(1)).await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renewal_is_sent_after_release() {
    let server = RedisServer::start();
    // Renewed every 50 ms: each renewal has 97 ms to come back before the lease ends,
    // which a loaded two-core machine needs. Renewals counted as EVALSHA: the scripts'
    // path.
    let locks = locks(&server)
        .await
        .ttl(Duration::from_millis(150))
        .native_commands(false);
    let mut stats = server.connection();
    let guard = locks.lock("q").await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let renewals = command_calls(&mut stats, "evalsha");
    assert!(renewals >= 3, "the watchdog renewed ({renewals} EVALSHA)");
    let (lost, remaining) = (guard.is_lost(), guard.remaining());
    let released = guard.release().await;
    assert!(
        released.is_ok(),
        "{released:?}: lost {lost}, remaining {remaining:?}"
    );
    lockscript_test::reset_stats(&mut stats);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        command_calls(&mut stats, "evalsha"),
        0,
        "no traffic after release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background_and_stops_the_watchdog() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    // A 60 s lease: only the background release can free it within a second.
    let locks = locks(&server).await.ttl(Duration::from_secs(60));
    drop(locks.lock("q").await.unwrap());
    tokio::time::timeout(Duration::from_secs(1), async {
        while conn.exists::<_, bool>("lock:{q}").await.unwrap() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the dropped guard was released in the background");
    // A 150 ms lease would be renewed every 50 ms: after the drop, nothing is.
    let short = locks.clone().ttl(Duration::from_millis(150));
    drop(short.lock("r").await.unwrap());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut stats = server.connection();
    lockscript_test::reset_stats(&mut stats);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        command_calls(&mut stats, "evalsha"),
        0,
        "no watchdog left running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_lock_at_random_points_leaves_no_orphan_key_or_watchdog() {
    let server = RedisServer::start();
    // A 60 s lease: only a release frees the key within the bound below, never the TTL;
    // an orphaned grant, or a leaked watchdog renewing one, keeps it.
    let locks = locks(&server).await.ttl(Duration::from_secs(60));
    let mut conn = server.multiplexed().await;
    let mut acquired = 0;
    for i in 0..300u64 {
        let cutoff = Duration::from_micros(getrandom::u64().unwrap() % 400);
        if let Ok(guard) = tokio::time::timeout(cutoff, locks.lock("q")).await {
            acquired += 1;
            // Sometimes release, sometimes drop: both must clean up.
            if i % 2 == 0 {
                guard.unwrap().release().await.unwrap();
            }
        }
        // Background releases take a round trip or two; a second is far more.
        tokio::time::timeout(Duration::from_secs(1), async {
            while conn.exists::<_, bool>("lock:{q}").await.unwrap() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("round {i}: the key outlived its owner by a second"));
    }
    assert!(acquired > 0, "some attempts completed");
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_sends_nothing() {
    let server = RedisServer::start();
    // Calls counted as EVALSHA: the scripts' path.
    let locks = locks(&server).await.native_commands(false);
    let mut stats = server.connection();
    // Warm, so each call below is one EVALSHA.
    lockscript_test::load_scripts(&mut stats);
    lockscript_test::reset_stats(&mut stats);

    let zero = locks.clone().ttl(Duration::ZERO);
    assert!(matches!(
        zero.try_lock("q").await,
        Err(LockError::InvalidTtl { .. })
    ));
    let huge = locks
        .clone()
        .ttl(lockscript::MAX_TTL + Duration::from_secs(1));
    assert!(matches!(
        huge.lock("q").await,
        Err(LockError::InvalidTtl { .. })
    ));
    let no_wait = locks.clone().wait_timeout(Duration::ZERO);
    assert!(matches!(
        no_wait.lock("q").await,
        Err(LockError::InvalidSettings(_))
    ));
    assert!(matches!(
        locks.lock("").await,
        Err(LockError::InvalidName { .. })
    ));
    let long = "n".repeat(lockscript::MAX_NAME_LEN + 1);
    assert!(matches!(
        locks.try_lock(&long).await,
        Err(LockError::InvalidName { .. })
    ));
    assert!(matches!(
        locks.lock("a{b}").await,
        Err(LockError::InvalidName { .. })
    ));
    let braces = locks.clone().prefix("x{");
    assert!(matches!(
        braces.try_lock("q").await,
        Err(LockError::InvalidSettings(_))
    ));
    // Every setting with a limit refuses what is outside it, never panics on it.
    let out_of_range = [
        locks.clone().max_hold(Duration::from_secs(1)),
        locks.clone().max_hold(Duration::MAX),
        locks.clone().response_timeout(Duration::ZERO),
        locks.clone().response_timeout(Duration::MAX),
        locks.clone().fence_retention(Duration::ZERO),
        locks.clone().fence_retention(Duration::MAX),
        locks.clone().wait_timeout(Duration::MAX),
        locks
            .clone()
            .retry(RetryPolicy::new(Duration::from_millis(1), Duration::MAX)),
        locks.clone().retry(RetryPolicy::new(
            Duration::from_secs(2),
            Duration::from_secs(1),
        )),
    ];
    for bad in &out_of_range {
        let err = bad.lock("q").await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidSettings(_)),
            "{bad:?}: {err:?}"
        );
    }

    let guard = locks.lock("q").await.unwrap();
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(LockError::InvalidTtl { .. })
    ));
    guard.release().await.unwrap();
    // Only the one valid lock()/release pair reached the server.
    assert_eq!(command_calls(&mut stats, "evalsha"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_renewal_and_the_lease_runs_out() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .await
        .ttl(Duration::from_millis(100))
        .max_hold(Duration::from_millis(300));
    let guard = locks.lock("q").await.unwrap();
    let f0 = guard.fencing_token();
    let acquired = std::time::Instant::now();
    within("the loss signal", guard.lost()).await;
    // Renewed up to the cap, then left to run out: held past the first lease, freed after.
    assert!(acquired.elapsed() >= Duration::from_millis(300));
    let next = within("the next grant", locks.lock("q")).await.unwrap();
    assert!(next.fencing_token() > f0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_returns_the_value_and_releases() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let fence = locks
        .with_lock("q", |lease| async move { lease.fencing_token() })
        .await
        .unwrap();
    let counter: u64 = redis::Commands::get(&mut server.connection(), "lock:{q}:fence").unwrap();
    assert_eq!(fence, counter, "the lease's token is the grant's");
    assert!(
        locks.try_lock("q").await.unwrap().is_some(),
        "released after the work"
    );
}

/// The work finished, but the lease had ended before the release (here the key was
/// deleted behind its back): the work may have overlapped another holder's, and the
/// caller hears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_reports_a_lease_that_ended_before_the_release() {
    let server = RedisServer::start();
    let locks = locks(&server).await.ttl(Duration::from_secs(60));
    let mut conn = server.multiplexed().await;
    let result = locks
        .with_lock("q", |_lease| async move {
            let _: () = conn.del("lock:{q}").await.unwrap();
            "finished"
        })
        .await;
    assert!(
        matches!(result, Err(LockError::NotHeld { ref name }) if name == "q"),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_cancels_the_work_when_the_lease_is_lost() {
    let server = RedisServer::start();
    let locks = locks(&server).await.ttl(Duration::from_millis(150));
    let mut conn = server.multiplexed().await;
    let result = locks
        .with_lock("q", |_lease| async move {
            let _: () = conn.del("lock:{q}").await.unwrap();
            tokio::time::sleep(PATIENCE * 2).await;
            "finished"
        })
        .await;
    assert!(
        matches!(result, Err(LockError::Lost { ref name }) if name == "q"),
        "{result:?}"
    );
}

#[tokio::test]
async fn debug_output_never_shows_the_token() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let guard = locks.lock("q").await.unwrap();
    let mut conn = server.multiplexed().await;
    let token: String = conn.get("lock:{q}").await.unwrap();
    assert_eq!(token.len(), 32);
    let shown = format!("{guard:?} {:?} {locks:?}", guard.lease());
    assert!(!shown.contains(&token), "{shown}");
    assert!(shown.contains("fencing_token: 1"), "{shown}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_never_overlap_and_fences_rise() {
    let server = RedisServer::start();
    let history = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut shared: Option<Locks<ConnectionManager>> = None;
    for worker in 0..12 {
        // Every third worker has its own handle and connections, like a separate client.
        let locks = if worker % 3 == 0 || shared.is_none() {
            let own = locks(&server).await.wait_timeout(PATIENCE);
            shared.get_or_insert_with(|| own.clone());
            own
        } else {
            shared.clone().unwrap()
        };
        let history = std::sync::Arc::clone(&history);
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let guard = locks.lock("shared").await.unwrap();
                let start = std::time::Instant::now();
                tokio::time::sleep(Duration::from_micros(300)).await;
                let end = std::time::Instant::now();
                let fence = guard.fencing_token();
                guard.release().await.unwrap();
                history.lock().unwrap().push((fence, start, end));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut history = std::sync::Arc::try_unwrap(history)
        .unwrap()
        .into_inner()
        .unwrap();
    assert_eq!(history.len(), 12 * 15);
    lockscript_test::history::assert_exclusive(&mut history);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_local_waiter_not_all() {
    let server = RedisServer::start();
    // Nothing but the notification makes a waiter try.
    let locks = patient(&server).await.wait_timeout(Duration::from_secs(20));
    // The holder is another handle (another process, in effect): a release by a guard
    // of the waiters' own handle would hand the lock over instead of notifying. Its
    // release is counted as one compare-del: the scripts' path.
    let holder = patient(&server).await.native_commands(false);
    let holder = holder.lock("herd").await.unwrap();
    let waiters: Vec<_> = (0..8).map(|_| spawn_lock(&locks, "herd")).collect();
    tokio::time::sleep(Duration::from_millis(300)).await; // all subscribed and asleep
    let mut stats = server.connection();
    // Warm (compare-del has not run yet): the counts below are the calls themselves.
    lockscript_test::load_scripts(&mut stats);
    lockscript_test::reset_stats(&mut stats);

    holder.release().await.unwrap();
    let mut conn = server.multiplexed().await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !conn.exists::<_, bool>("lock:{herd}").await.unwrap() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("a waiter took over");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // One compare-del, then one acquire attempt (a transaction): the other seven
    // stayed asleep.
    assert_eq!(command_calls(&mut stats, "evalsha"), 1);
    assert_eq!(command_calls(&mut stats, "exec"), 1);
    assert_eq!(
        command_calls(&mut stats, "publish"),
        1,
        "compare-del published"
    );
    for w in waiters {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_local_waiter_in_one_call() {
    let server = RedisServer::start();
    // Nothing but the release makes the waiter move.
    let locks = patient(&server).await;
    let holder = locks.lock("baton").await.unwrap();
    let waiter = spawn_lock(&locks, "baton");
    tokio::time::sleep(Duration::from_millis(300)).await; // tried once, now waiting
    let mut stats = server.connection();
    // Warm (handover.lua has not run yet): the counts below are the calls themselves.
    lockscript_test::load_scripts(&mut stats);
    lockscript_test::reset_stats(&mut stats);

    let fence = holder.fencing_token();
    holder.release().await.unwrap();
    let next = within("the handover", waiter).await.unwrap().unwrap();
    assert!(next.fencing_token() > fence);
    // Its attempt before subscribing and the one right after; none once handed the lock.
    assert_eq!(next.attempts(), 2);
    // handover.lua alone: no compare-del, no acquire attempt, and nothing published.
    assert_eq!(command_calls(&mut stats, "evalsha"), 1);
    assert_eq!(command_calls(&mut stats, "publish"), 0);
    assert!(next.is_held().await.unwrap());
    let mut conn = server.multiplexed().await;
    let ttl: i64 = conn.pttl("lock:{baton}").await.unwrap();
    assert!(
        ttl > 50_000,
        "the new holder got a full lease, not the old one's rest: {ttl}"
    );
    next.release().await.unwrap();
    assert!(!conn.exists::<_, bool>("lock:{baton}").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_around_a_handover_leaves_no_orphan_grant() {
    let server = RedisServer::start();
    // A 60 s lease: a grant handed to a waiter that is gone would outlive every check
    // below unless it is released.
    let locks = locks(&server).await.ttl(Duration::from_secs(60));
    let mut conn = server.multiplexed().await;
    let mut handed = 0;
    for round in 0..150 {
        let holder = locks.lock("h").await.unwrap();
        let waiter = spawn_lock(&locks, "h");
        tokio::time::sleep(Duration::from_millis(3)).await; // waiting, its offer standing
        // Abort the waiter a random number of scheduler turns into the release: before
        // the handover, while it is in flight, or after it was sent to the waiter. One
        // round in ten aborts only well after the release, so that some waiters get the
        // lock however slow the machine is.
        let turns = getrandom::u64().unwrap() % 40;
        let late = round % 10 == 9;
        let abort = waiter.abort_handle();
        let aborter = tokio::spawn(async move {
            if late {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for _ in 0..turns {
                tokio::task::yield_now().await;
            }
            abort.abort();
        });
        holder.release().await.unwrap();
        aborter.await.unwrap();
        if let Ok(Ok(guard)) = waiter.await {
            handed += 1;
            guard.release().await.unwrap();
        }
        within("the key to be freed", async {
            while conn.exists::<_, bool>("lock:{h}").await.unwrap() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
    }
    assert!(handed > 0, "some waiters got the lock before being aborted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_hands_nothing_over_and_the_waiter_still_gets_the_lock() {
    let server = RedisServer::start();
    let locks = patient(&server).await;
    let holder = locks.lock("s").await.unwrap();
    let waiter = spawn_lock(&locks, "s");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Someone else takes the key over behind the holder's back.
    let mut conn = server.multiplexed().await;
    let _: () = conn.set("lock:{s}", "intruder").await.unwrap();
    assert!(matches!(
        holder.release().await,
        Err(LockError::NotHeld { .. })
    ));
    let value: String = conn.get("lock:{s}").await.unwrap();
    assert_eq!(value, "intruder", "a stale holder changed nothing");
    // The waiter, told nothing was handed over, tries again and waits for the key.
    let _: () = conn.del("lock:{s}").await.unwrap();
    let next = within("the waiter's grant", waiter).await.unwrap().unwrap();
    assert!(next.is_held().await.unwrap());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handovers_in_a_row_are_capped_so_other_handles_get_a_turn() {
    let server = RedisServer::start();
    // A lease-length backoff everywhere: waiters move only when a release hands them
    // the lock or notifies them, never on a timer.
    let backoff = RetryPolicy::new(Duration::from_secs(30), Duration::from_secs(30));
    let busy = locks(&server)
        .await
        .wait_timeout(Duration::from_secs(20))
        .retry(backoff);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Three tasks of one handle that always have a waiter queued at each release.
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (busy, stop) = (busy.clone(), std::sync::Arc::clone(&stop));
            tokio::spawn(async move {
                let mut grants = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let guard = busy.lock("popular").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.unwrap();
                    grants += 1;
                }
                grants
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Another handle (another process, in effect): it gets the lock only from a release
    // that is not a handover, and races the busy handle's next waiter for it.
    let other = locks(&server)
        .await
        .wait_timeout(Duration::from_secs(10))
        .retry(backoff);
    let guard = within("the other handle's grant", other.lock("popular"))
        .await
        .expect("the other handle got a turn");
    guard.release().await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        assert!(w.await.unwrap() > 0);
    }
}
