//! Locks on a real Redis Cluster through `Locks::connect_cluster`: grants, fencing and
//! release notifications on several masters, `wait_for_replicas`, and contention across a
//! master failover.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockscript::ClusterConnection;
use lockscript::{LockError, Locks, RetryPolicy};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::command_calls;

/// A liveness bound for waits and failovers that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(30);

async fn connect(cluster: &RedisCluster) -> Locks<ClusterConnection> {
    Locks::connect_cluster(cluster.urls())
        .await
        .expect("connect_cluster")
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"))
}

fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// The node that replicates master `master` (each master has one here).
fn replica_of(cluster: &RedisCluster, master: usize) -> usize {
    let port = cluster.node(master).port().to_string();
    cluster
        .replicas()
        .into_iter()
        .find(|&r| {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut cluster.node(r).connection())
                .expect("INFO replication");
            info.lines()
                .any(|l| l.trim() == format!("master_port:{port}"))
        })
        .unwrap_or_else(|| panic!("no replica of node {master}"))
}

/// Whether node `i` holds `key` (with `READONLY`, so a replica answers too).
fn node_has_key(cluster: &RedisCluster, i: usize, key: &str) -> bool {
    let mut conn = cluster.node(i).connection();
    let _: () = redis::cmd("READONLY").query(&mut conn).expect("READONLY");
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut conn)
        .expect("EXISTS")
}

/// Whether node `i` has compare-del.lua, the release a server without `DELIFEQ` or
/// `DELEX` runs, in its cache.
fn has_release_script(cluster: &RedisCluster, i: usize) -> bool {
    let sha = lockscript::builtin::compare_del("k", "t").script().sha1();
    let cached: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .query(&mut cluster.node(i).connection())
        .expect("SCRIPT EXISTS");
    cached == [true]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_cluster_grants_fences_and_wakes_waiters_on_every_master() {
    let cluster = RedisCluster::start(3, 0);
    // A 60 s lease and a 30 s backoff against a 5 s wait: only the release notification
    // can get a waiter in. connect_cluster subscribes on one node (picked at random), so
    // at least two of the three masters publish to a node other than themselves.
    let patient = || async {
        connect(&cluster)
            .await
            .ttl(Duration::from_secs(60))
            .wait_timeout(Duration::from_secs(5))
            .retry(RetryPolicy::new(
                Duration::from_secs(30),
                Duration::from_secs(30),
            ))
    };
    let locks = patient().await;
    // The waiters use a handle of their own: a release cannot hand them the lock
    // (handover.lua serves waiters of the releasing handle only), so only pub/sub wakes
    // them.
    let waiters = patient().await;
    let names = cluster.one_lock_name_per_master("orders");
    assert_eq!(names.len(), 3);
    for (name, master) in &names {
        let first = locks.try_lock(name).await.unwrap().expect("free");
        let f0 = first.fencing_token();
        assert!(first.is_held().await.unwrap());
        assert!(locks.try_lock(name).await.unwrap().is_none(), "{name} held");
        assert!(node_has_key(&cluster, *master, &lock_key(name)));

        let waiter = {
            let (locks, name) = (waiters.clone(), name.clone());
            tokio::spawn(async move { locks.lock(&name).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await; // subscribed and asleep
        assert!(!waiter.is_finished(), "{name}: the waiter must wait");
        first.release().await.unwrap();
        let second = within("the notified handoff", waiter)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{name} on node {master}: {e}"));
        assert!(second.fencing_token() > f0);
        assert!(second.attempts() <= 3, "attempts {}", second.attempts());
        second.release().await.unwrap();

        let third = locks.lock(name).await.unwrap();
        let last = third.fencing_token();
        assert!(last >= f0 + 2);
        third.release().await.unwrap();
        assert!(!node_has_key(&cluster, *master, &lock_key(name)));
        let fence: u64 = redis::cmd("GET")
            .arg(format!("{}:fence", lock_key(name)))
            .query(&mut cluster.node(*master).connection())
            .unwrap();
        assert_eq!(fence, last, "the counter lives on {name}'s master");
    }
}

/// Local subscribers of `channel` on node `i` (0 when the node is down).
fn subscribers(cluster: &RedisCluster, i: usize, channel: &str) -> u64 {
    if !cluster.node(i).is_running() {
        return 0;
    }
    let (_, count): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut cluster.node(i).connection())
        .expect("PUBSUB NUMSUB");
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_move_to_another_node_when_theirs_stops() {
    let mut cluster = RedisCluster::start(3, 1);
    // Subscribe on two replicas only: stopping one leaves the cluster's slots served.
    let replicas = cluster.replicas();
    let pair = [replicas[0], replicas[1]];
    let urls: Vec<String> = pair.iter().map(|&i| cluster.node(i).url()).collect();
    let locks = Locks::connect_cluster(urls)
        .await
        .unwrap()
        .ttl(Duration::from_secs(60))
        .wait_timeout(Duration::from_secs(10))
        .retry(RetryPolicy::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
        ));
    let channel = format!("{}:released", lock_key("moving"));
    let holder = locks.lock("moving").await.unwrap();
    let f0 = holder.fencing_token();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("moving").await })
    };
    within("the waiter to subscribe", async {
        while subscribers(&cluster, pair[0], &channel) + subscribers(&cluster, pair[1], &channel)
            == 0
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let (used, other) = if subscribers(&cluster, pair[0], &channel) > 0 {
        (pair[0], pair[1])
    } else {
        (pair[1], pair[0])
    };
    cluster.node_mut(used).stop();
    within("the subscription to move to the other node", async {
        while subscribers(&cluster, other, &channel) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(!waiter.is_finished(), "the waiter must still wait");
    holder.release().await.unwrap();
    let guard = within("the notified handoff", waiter)
        .await
        .unwrap()
        .expect("woken through the other node");
    assert!(guard.fencing_token() > f0);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_cluster_refuses_an_empty_node_list() {
    let err = Locks::connect_cluster(Vec::<String>::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidSettings(_)), "{err:?}");
}

/// A refused grant is released in the background, a round trip or two later.
async fn released_within_a_second(cluster: &RedisCluster, master: usize, name: &str) {
    let refused = Instant::now();
    while node_has_key(cluster, master, &lock_key(name)) {
        assert!(
            refused.elapsed() < Duration::from_secs(1),
            "{name}: the unreplicated grant was not released"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_confirms_or_releases_the_grant() {
    let cluster = RedisCluster::start(3, 1);
    let base = connect(&cluster).await.wait_timeout(Duration::from_secs(5));
    let names = cluster.one_lock_name_per_master("replicated");
    for node in cluster.nodes() {
        lockscript_test::reset_stats(&mut node.connection());
    }

    // Every master has one replica: asking for one succeeds, and the replica has the key.
    let one = base.clone().wait_for_replicas(1, Duration::from_secs(5));
    let mut last_fence = Vec::new();
    for (name, master) in &names {
        let guard = one.try_lock(name).await.unwrap().expect("free");
        let f0 = guard.fencing_token();
        let replica = replica_of(&cluster, *master);
        assert!(
            node_has_key(&cluster, replica, &lock_key(name)),
            "{name}: acknowledged, so the replica (node {replica}) has it"
        );
        guard.release().await.unwrap();
        let guard = one.lock(name).await.unwrap();
        assert!(guard.fencing_token() > f0);
        last_fence.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    for (name, master) in &names {
        let waits = command_calls(&mut cluster.node(*master).connection(), "wait");
        assert_eq!(
            waits, 2,
            "WAIT went to {name}'s master only, once per grant"
        );
    }

    // Two replicas cannot acknowledge: the grant is released again, nothing is held.
    let two = base.clone().wait_for_replicas(2, Duration::from_secs(1));
    for ((name, master), last) in names.iter().zip(last_fence) {
        let err = two.try_lock(name).await.unwrap_err();
        match &err {
            LockError::NotReplicated {
                name: n,
                acked,
                wanted,
            } => {
                assert_eq!(n, name);
                assert_eq!((*acked, *wanted), (1, 2), "{err}");
            }
            other => panic!("{name}: expected NotReplicated, got {other:?}"),
        }
        assert!(err.to_string().contains("replicas"), "{err}");
        released_within_a_second(&cluster, *master, name).await;
        let err = two.lock(name).await.unwrap_err();
        assert!(matches!(err, LockError::NotReplicated { .. }), "{err:?}");
        released_within_a_second(&cluster, *master, name).await;
        // Free for anyone; the two refused grants used up the two tokens after `last`.
        let guard = base.try_lock(name).await.unwrap().expect("nothing held");
        assert!(guard.fencing_token() >= last + 3);
        guard.release().await.unwrap();
    }

    // Settings that cannot work are refused before anything is sent.
    for (locks, why) in [
        (
            base.clone().wait_for_replicas(0, Duration::from_secs(1)),
            "zero replicas",
        ),
        (
            base.clone().wait_for_replicas(1, Duration::ZERO),
            "WAIT with timeout 0 blocks forever",
        ),
        (
            base.clone()
                .ttl(Duration::from_secs(1))
                .wait_for_replicas(1, Duration::from_secs(2)),
            "a timeout above the ttl",
        ),
    ] {
        let err = locks.try_lock("never-sent").await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidSettings(_)),
            "{why}: {err:?}"
        );
        let err = locks.lock("never-sent").await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidSettings(_)),
            "{why}: {err:?}"
        );
    }
    let master = cluster.master_for_key(&lock_key("never-sent"));
    assert!(!node_has_key(&cluster, master, &lock_key("never-sent")));
}

/// One grant of a contender.
struct Grant {
    name: String,
    fence: u64,
    /// When the acquire that got it was sent (the `lock()` call's start plus `waited()`).
    sent: Instant,
    /// When the holder started working.
    start: Instant,
    /// When it stopped.
    end: Instant,
}

/// How many grants started while an earlier grant of the same name was still working
/// (two holders at once), and how many fencing tokens did not rise in start order (the
/// counter rolled back). Never panics: a failover may produce both.
fn anomalies(grants: &[Grant]) -> (usize, usize) {
    let mut by_name: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for grant in grants {
        by_name.entry(&grant.name).or_default().push(grant);
    }
    let (mut overlaps, mut fence_drops) = (0, 0);
    for history in by_name.values_mut() {
        history.sort_by_key(|grant| grant.start);
        let mut latest_end: Option<Instant> = None;
        let mut highest_fence = 0;
        for grant in history.iter() {
            if latest_end.is_some_and(|e| grant.start < e) {
                overlaps += 1;
            }
            if grant.fence <= highest_fence {
                fence_drops += 1;
            }
            latest_end = Some(latest_end.map_or(grant.end, |e| e.max(grant.end)));
            highest_fence = highest_fence.max(grant.fence);
        }
    }
    (overlaps, fence_drops)
}

/// How long the cluster may take to settle after a master is killed (a replica promoted,
/// every node `cluster_state:ok` and agreeing on the slots). With `cluster-node-timeout`
/// 1 s the others flag the master as failing after 1 to 1.5 s, and its replica wins the
/// election 0.5 to 1 s later: measured 2.1 to 2.9 s. The margin is for a busy 2-core
/// machine; a node timeout of a few seconds, or a replica that never stands, fails it.
const SETTLE_BOUND: Duration = Duration::from_secs(6);

/// How long after the cluster settled the failed-over lock may take to be granted again.
/// The client must find the new master, and the grant the killed master held (its release
/// failed) is released in the background, whose retries back off to 1 s at most; waiters
/// nap 250 ms at most. The same holds for the other lock, whose release may have failed
/// while the cluster was down. Measured 0 to 340 ms. A lock that waited for an orphaned
/// grant's lease to run out (10 s) would miss it by seconds.
const REGRANT_AFTER_SETTLE: Duration = Duration::from_secs(3);

/// The contenders' `wait_timeout`: it covers the whole failover, so no `lock()` call
/// fails while the lock's slot has no master (`lock()` retries transient errors within
/// its wait).
const FAILOVER_WAIT: Duration = Duration::from_secs(10);
const _: () = assert!(
    FAILOVER_WAIT.as_millis() > SETTLE_BOUND.as_millis() + REGRANT_AFTER_SETTLE.as_millis()
);

/// A contender's call that failed.
struct Failure {
    /// When the call returned.
    at: Instant,
    name: String,
    /// `lock` or `release`.
    call: &'static str,
    /// For a release: when the acquire of the grant it released was sent.
    grant_sent: Option<Instant>,
    error: String,
}

/// Six tasks on three `connect_cluster` handles contend for two locks, one on the master
/// that is then stopped (SIGKILL) and replaced by its replica, the other on a master that
/// stays up. The cluster must settle within [`SETTLE_BOUND`] of the kill, both locks must
/// be granted again within [`REGRANT_AFTER_SETTLE`] after that (the failed-over one by the
/// new master), the new master's empty script cache must be refilled by the EVAL
/// fallback, and no `lock()` call may fail: each retries through the failover within its
/// wait.
///
/// A `release()` may fail, at most once per lock, and only for a grant made before the
/// cluster settled: the one in flight on the master when it was killed (an I/O error: it
/// may have run, so it is not re-sent), and one on the other lock while the cluster is
/// down (from when the dead master is flagged as failing until its replica takes over,
/// about 1 s, every master answers `CLUSTERDOWN`, since by default a cluster serves no
/// slot while one has no master; a release retries that only within its 500 ms response
/// timeout). Either grant is then released in the background.
///
/// What a failover can and cannot guarantee: Redis replicates asynchronously. A grant the
/// old master acknowledged but had not yet sent to its replica is lost with it, so after
/// the promotion a second holder can get the lock while the first still believes it holds
/// it (its next renewal or release then finds the key gone: `lost()` fires, `release()`
/// says `NotHeld`). `wait_for_replicas` narrows this window (a grant is handed out only once
/// a replica acknowledged it) but does not close it: the acknowledging replica need not be
/// the one promoted, and replication stays asynchronous. The fencing counter lives in the
/// same slot and is replicated the same way, so it can roll back too: a token can be
/// handed out twice. Hence this test counts and prints double grants and falling fencing
/// tokens instead of failing on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn contention_resumes_after_a_master_failover() {
    let mut cluster = RedisCluster::start(3, 1);
    cluster.flush_scripts_and_reset_stats();
    let all = cluster.one_lock_name_per_master("failover");
    let (victim_name, victim) = all[0].clone();
    let (steady_name, steady) = all[1].clone();
    let heir = replica_of(&cluster, victim);
    let names = [victim_name.clone(), steady_name.clone()];

    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(
            connect(&cluster)
                .await
                .ttl(Duration::from_secs(10))
                .wait_timeout(FAILOVER_WAIT),
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let grants: Arc<Mutex<Vec<Grant>>> = Arc::default();
    let failures: Arc<Mutex<Vec<Failure>>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let locks = handles[t % 3].clone();
        let name = names[t % 2].clone();
        let (stop, grants, failures) = (stop.clone(), grants.clone(), failures.clone());
        tasks.push(tokio::spawn(async move {
            let failed = |call, grant_sent, error: LockError| {
                failures.lock().unwrap().push(Failure {
                    at: Instant::now(),
                    name: name.clone(),
                    call,
                    grant_sent,
                    error: error.to_string(),
                });
            };
            while !stop.load(Ordering::Relaxed) {
                let called = Instant::now();
                match locks.lock(&name).await {
                    Ok(guard) => {
                        let sent = called + guard.waited();
                        let start = Instant::now();
                        tokio::select! {
                            () = guard.lost() => {}
                            () = tokio::time::sleep(Duration::from_millis(2)) => {}
                        }
                        let end = Instant::now();
                        let fence = guard.fencing_token();
                        if let Err(e) = guard.release().await {
                            failed("release", Some(sent), e);
                        }
                        grants.lock().unwrap().push(Grant {
                            name: name.clone(),
                            fence,
                            sent,
                            start,
                            end,
                        });
                    }
                    Err(e) => {
                        failed("lock", None, e);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let heir_cached_before = has_release_script(&cluster, heir);
    let killed = Instant::now();
    cluster.node_mut(victim).stop();
    // The master is gone (killed and reaped): a grant sent from here on is the heir's.
    let dead = Instant::now();
    cluster.wait_until_ok(PATIENCE);
    let settled = Instant::now();
    assert_eq!(
        cluster.master_for_key(&lock_key(&victim_name)),
        heir,
        "the replica took over"
    );
    // Past the bound on the first grant after the failover, and a second more.
    tokio::time::sleep(REGRANT_AFTER_SETTLE + Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        within("a contender to stop", task).await.unwrap();
    }

    let grants = std::mem::take(&mut *grants.lock().unwrap());
    let failures = std::mem::take(&mut *failures.lock().unwrap());
    // Grants of `name` that started in from..to (unbounded where `None`).
    let count = |name: &str, from: Option<Instant>, to: Option<Instant>| {
        grants
            .iter()
            .filter(|g| {
                g.name == name
                    && from.is_none_or(|f| g.start >= f)
                    && to.is_none_or(|t| g.start < t)
            })
            .count()
    };
    let settle = settled - killed;
    // The first grant of the failed-over lock by the new master, and the first grant of the
    // other lock after the cluster settled.
    let regranted = grants
        .iter()
        .filter(|g| g.name == victim_name && g.sent >= dead)
        .map(|g| g.start)
        .min();
    let steady_regranted = grants
        .iter()
        .filter(|g| g.name == steady_name && g.start >= settled)
        .map(|g| g.start)
        .min();
    // The longest the other lock went without a new grant around the failover (its master
    // refuses everything while the cluster is down).
    let mut steady_starts: Vec<Instant> = grants
        .iter()
        .filter(|g| g.name == steady_name)
        .map(|g| g.start)
        .collect();
    steady_starts.sort_unstable();
    let steady_gap = steady_starts
        .windows(2)
        .filter(|w| w[1] >= killed && w[0] <= settled)
        .map(|w| w[1] - w[0])
        .max();
    let (overlaps, fence_drops) = anomalies(&grants);
    println!(
        "failover: node {victim} stopped, node {heir} promoted; cluster settled {settle:?} \
         after the kill (bound {SETTLE_BOUND:?}); `{victim_name}` granted again {:?} after \
         the kill, {:?} after the cluster settled (bound {REGRANT_AFTER_SETTLE:?}); \
         `{steady_name}` granted {:?} after the cluster settled, its longest gap between \
         grants meanwhile {steady_gap:?}",
        regranted.map(|at| at - killed),
        regranted.map(|at| at.saturating_duration_since(settled)),
        steady_regranted.map(|at| at - settled),
    );
    for (name, master) in [(&victim_name, victim), (&steady_name, steady)] {
        println!(
            "  `{name}` (node {master}): grants before {}, kill..settled {}, after {}",
            count(name, None, Some(killed)),
            count(name, Some(killed), Some(settled)),
            count(name, Some(settled), None)
        );
    }
    for f in &failures {
        println!(
            "  failed: {} of `{}` {:?} after the kill{}: {}",
            f.call,
            f.name,
            f.at.saturating_duration_since(killed),
            f.grant_sent.map_or(String::new(), |sent| if sent < killed {
                format!(" (grant sent {:?} before the kill)", killed - sent)
            } else {
                format!(" (grant sent {:?} after the kill)", sent - killed)
            }),
            f.error
        );
    }
    println!(
        "  double grants (overlapping holders): {overlaps}; fencing tokens not rising: \
         {fence_drops}; heir had the script before: {heir_cached_before}"
    );

    assert!(
        settle <= SETTLE_BOUND,
        "the cluster settled {settle:?} after the kill, not within {SETTLE_BOUND:?}"
    );
    let regranted =
        regranted.unwrap_or_else(|| panic!("`{victim_name}` was never granted by the new master"));
    assert!(
        regranted <= settled + REGRANT_AFTER_SETTLE,
        "`{victim_name}` was granted again {:?} after the cluster settled, not within \
         {REGRANT_AFTER_SETTLE:?}",
        regranted.saturating_duration_since(settled)
    );
    let steady_regranted = steady_regranted
        .unwrap_or_else(|| panic!("`{steady_name}` was never granted after the failover"));
    assert!(
        steady_regranted <= settled + REGRANT_AFTER_SETTLE,
        "`{steady_name}` was granted again {:?} after the cluster settled, not within \
         {REGRANT_AFTER_SETTLE:?}",
        steady_regranted - settled
    );
    let described: Vec<String> = failures
        .iter()
        .map(|f| format!("{} of `{}`: {}", f.call, f.name, f.error))
        .collect();
    assert!(
        failures
            .iter()
            .all(|f| f.call == "release" && f.grant_sent.is_some_and(|sent| sent < settled)),
        "only releases of grants made before the cluster settled may fail: {described:?}"
    );
    for name in &names {
        assert!(
            failures.iter().filter(|f| &f.name == name).count() <= 1,
            "at most one release of `{name}` may fail: {described:?}"
        );
    }
    // Where releases are scripts (no DELIFEQ, no DELEX), the new master's script cache
    // was refilled by the fallback to EVAL.
    let offered = handles.first().and_then(|h| {
        let found: Option<lockscript::NativeCommands> = h.offered_commands();
        found
    });
    let native_releases = offered.is_some_and(|n| n.releases());
    assert!(
        native_releases || has_release_script(&cluster, heir),
        "the new master's script cache was refilled"
    );
    if !heir_cached_before && !native_releases {
        let loads = command_calls(&mut cluster.node(heir).connection(), "script|load");
        assert!(
            loads > 0,
            "the fallback loaded the scripts on the new master"
        );
        println!("  SCRIPT LOAD calls on the new master: {loads}");
    }
}

/// A primary frozen (SIGSTOP) until the cluster replaces it sends neither `MOVED` nor an
/// error, and its connection stays open: the handle learns of the promoted replica by
/// reading the slots again when its calls go unanswered, and a `lock()` waiting through
/// the failover is granted by the new primary within [`REGRANT_AFTER_SETTLE`] of the
/// cluster settling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_primary_replaced_by_the_cluster_is_left_for_its_replica() {
    let cluster = RedisCluster::start(3, 1);
    let (name, victim) = cluster.one_lock_name_per_master("frozen")[0].clone();
    let heir = replica_of(&cluster, victim);
    let locks = connect(&cluster).await.wait_timeout(FAILOVER_WAIT);
    // The handle's connection to the victim is made and in use.
    let first = locks.lock(&name).await.expect("a lock before the freeze");
    first.release().await.expect("its release");
    cluster.node(victim).signal("STOP");
    let waiter = tokio::spawn({
        let (locks, name) = (locks.clone(), name.clone());
        async move {
            let granted = locks.lock(&name).await;
            (granted.map(|g| g.fencing_token()), Instant::now())
        }
    });
    tokio::task::block_in_place(|| cluster.wait_until_ok(PATIENCE));
    let settled = Instant::now();
    assert_eq!(
        cluster.master_for_key(&lock_key(&name)),
        heir,
        "the replica took over"
    );
    let (granted, at) = within("the waiting lock()", waiter)
        .await
        .expect("the waiter");
    cluster.node(victim).signal("CONT");
    let granted = granted.expect("granted by the promoted replica");
    let after = at.saturating_duration_since(settled);
    eprintln!("granted {after:?} after the cluster settled (fence {granted})");
    assert!(
        after <= REGRANT_AFTER_SETTLE,
        "granted {after:?} after the cluster settled (bound {REGRANT_AFTER_SETTLE:?})"
    );
}
