//! A script is never re-sent on the cluster connection `Locks::connect_cluster` makes,
//! and redis-rs's default retries would re-send it.
//!
//! The master that owns lock `{resend}` is put behind a [`Proxy`]: it announces the
//! proxy's port (`CONFIG SET cluster-announce-port`, the bus port unchanged), so every
//! node's `CLUSTER SLOTS` names the proxy for that slot and a cluster client, seeded with
//! the nodes' real ports, routes the lock's scripts through it. The proxy then forwards
//! the acquire script and cuts the connection before its reply comes back: the grant is
//! made, and the client sees an I/O error. The master's slowlog (every command, with its
//! arguments) tells how many times the acquire script reached it.

use std::time::{Duration, Instant};

use lockscript::{LockError, Locks};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::command_calls;
use lockscript_test::proxy::Proxy;
use redis::Value;

/// The lock of every test here.
const NAME: &str = "resend";
const KEY: &str = "lock:{resend}";
const FENCE: &str = "lock:{resend}:fence";

/// A lease far longer than the bound below: only a release can free the lock in time.
const TTL: Duration = Duration::from_secs(60);

/// How soon the grant whose reply was lost must be gone. The background release retries
/// after 50, 100, 200, 400 ms...; its first or second try gets through.
const RELEASED_WITHIN: Duration = Duration::from_secs(2);

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(30);

fn acquire_sha() -> &'static str {
    lockscript::builtin::acquire("k", "f", "h", "t", 1, 1)
        .script()
        .sha1()
}

fn release_sha() -> &'static str {
    lockscript::builtin::compare_del("k", "t").script().sha1()
}

/// Puts a proxy in front of the master that owns `key`: the master announces the
/// proxy's port (its bus port stays the real one), and this returns once every node
/// names the proxy for it. Returns the master and the proxy.
fn proxy_the_master_of(cluster: &RedisCluster, key: &str) -> (usize, Proxy) {
    let master = cluster.master_for_key(key);
    let proxy = Proxy::start(cluster.node(master).port());
    cluster.announce_port(master, proxy.port());
    (master, proxy)
}

/// Zeroes the node's command counters and has its slowlog record every command, with
/// its arguments, from now on.
fn start_recording(conn: &mut redis::Connection) {
    for (option, value) in [("slowlog-max-len", 10_000), ("slowlog-log-slower-than", 0)] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(option)
            .arg(value)
            .query(conn)
            .unwrap_or_else(|e| panic!("CONFIG SET {option}: {e}"));
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query(conn)
        .expect("SLOWLOG RESET");
    lockscript_test::reset_stats(conn);
}

/// How many `EVALSHA <sha> ...` the node's slowlog recorded.
fn evalsha_runs(conn: &mut redis::Connection, sha: &str) -> usize {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query(conn)
        .expect("SLOWLOG GET");
    entries
        .iter()
        .filter(|entry| {
            let Value::Array(fields) = entry else {
                return false;
            };
            let Some(Value::Array(argv)) = fields.get(3) else {
                return false;
            };
            let arg = |i: usize| match argv.get(i) {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).to_ascii_lowercase(),
                _ => String::new(),
            };
            arg(0) == "evalsha" && arg(1) == sha
        })
        .count()
}

/// Loads the lock scripts on the master (the first try_lock loads them), so the
/// acquire below goes out as one `EVALSHA` that runs.
async fn warm_up<C>(locks: &Locks<C>) -> u64
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let guard = locks
        .try_lock(NAME)
        .await
        .expect("try_lock through the proxy")
        .expect("free");
    let fence = guard.fencing_token();
    guard.release().await.expect("release through the proxy");
    fence
}

/// The lock's fencing counter: the last token the acquire script gave.
fn fence(conn: &mut redis::Connection) -> u64 {
    redis::cmd("GET")
        .arg(FENCE)
        .query(conn)
        .expect("GET the fence")
}

/// `connect_cluster`'s connection (retries off) reports the I/O error instead of re-sending:
/// the acquire reaches the master once, and its grant, which nobody owns, is released in the
/// background within [`RELEASED_WITHIN`], far inside its 60 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_cluster_never_re_sends_a_script_after_an_io_error() {
    let cluster = RedisCluster::start(3, 0);
    let (master, proxy) = proxy_the_master_of(&cluster, KEY);
    let locks = Locks::connect_cluster(cluster.urls())
        .await
        .expect("connect_cluster")
        .ttl(TTL)
        // The scripts' calls are what is counted.
        .native_commands(false);
    let f0 = warm_up(&locks).await;
    let mut conn = cluster.node(master).connection();
    start_recording(&mut conn);

    proxy.reset_after(acquire_sha().as_bytes());
    let err = locks
        .try_lock(NAME)
        .await
        .expect_err("the grant's reply was lost (the client routes `{resend}` through the proxy)");
    let failed = Instant::now();
    match &err {
        LockError::Redis(e) => assert!(e.is_io_error() || e.is_connection_dropped(), "{e:?}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert_eq!(fence(&mut conn), f0 + 1, "the acquire ran and granted");

    // The grant nobody owns is released in the background, long before its TTL.
    let mut direct = cluster.node(master).multiplexed().await;
    let released = tokio::time::timeout(PATIENCE, async {
        while redis::cmd("EXISTS")
            .arg(KEY)
            .query_async::<bool>(&mut direct)
            .await
            .expect("EXISTS")
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        failed.elapsed()
    })
    .await
    .expect("the orphaned grant is never released");
    println!(
        "connect_cluster: the grant whose reply was lost ({err}) was released {released:?} \
         after the error (ttl {TTL:?})"
    );
    assert!(
        released <= RELEASED_WITHIN,
        "the orphaned grant was released {released:?} after the error, not within \
         {RELEASED_WITHIN:?}"
    );

    assert_eq!(
        evalsha_runs(&mut conn, acquire_sha()),
        1,
        "the acquire script reached the master exactly once"
    );
    assert_eq!(
        evalsha_runs(&mut conn, release_sha()),
        1,
        "and the background release once"
    );
    assert_eq!(
        (
            command_calls(&mut conn, "evalsha"),
            command_calls(&mut conn, "eval")
        ),
        (2, 0),
        "no other script call reached the master"
    );

    let guard = locks
        .try_lock(NAME)
        .await
        .expect("try_lock after the fault")
        .expect("the lock is free again");
    assert!(guard.fencing_token() >= f0 + 2);
    guard.release().await.expect("release");
}

/// The hazard `connect_cluster` avoids, with the same fault on a cluster connection with
/// redis-rs's default retries: after the I/O error the connection re-sends the acquire with
/// the same owner token, which finds the lock taken (by that very token) and answers
/// "held". The caller is told someone else holds the lock, and the grant it made has no
/// owner: nothing releases it, it blocks everyone until its TTL ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_default_retries_re_send_a_script_after_an_io_error_and_orphan_the_grant() {
    let cluster = RedisCluster::start(3, 0);
    let (master, proxy) = proxy_the_master_of(&cluster, KEY);
    // The acquire script, which a Cluster keeps (a transaction would be re-sent the same
    // way).
    let locks = Locks::new(cluster.async_connection().await)
        .ttl(TTL)
        .native_commands(false);
    let f0 = warm_up(&locks).await;
    let mut conn = cluster.node(master).connection();
    start_recording(&mut conn);

    proxy.reset_after(acquire_sha().as_bytes());
    let outcome = locks
        .try_lock(NAME)
        .await
        .expect("redis-rs hides the I/O error by re-sending");
    assert!(
        outcome.is_none(),
        "the re-sent acquire found the first one's grant and answered \"held\""
    );
    let acquires = evalsha_runs(&mut conn, acquire_sha());
    assert_eq!(acquires, 2, "the acquire script reached the master twice");
    assert_eq!(
        (
            command_calls(&mut conn, "evalsha"),
            command_calls(&mut conn, "eval")
        ),
        (2, 0),
        "no other script call reached the master"
    );
    assert_eq!(
        fence(&mut conn),
        f0 + 1,
        "the first of them granted the lock"
    );

    // Nobody owns that grant, and nothing releases it: the lock stays taken for its TTL.
    assert!(
        locks.try_lock(NAME).await.expect("try_lock").is_none(),
        "the orphaned grant blocks everyone"
    );
    let pttl: i64 = redis::cmd("PTTL").arg(KEY).query(&mut conn).expect("PTTL");
    println!(
        "default retries: try_lock answered \"held\" after the acquire script ran \
         {acquires} times; the orphaned grant has {pttl} ms of its {TTL:?} lease left"
    );
    assert!(
        pttl > 50_000,
        "the orphaned grant lives out its lease ({pttl} ms left)"
    );
}
