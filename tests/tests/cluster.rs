//! Typed scripts and locks on a local Redis Cluster started by the harness: routing by
//! the first key, the fallback (SCRIPT LOAD) on the node that owns the slot, preloading on every
//! primary, cross-slot keys, and a master that restarts with an empty cache.

use std::time::Duration;

use lockscript::{LockError, Locks};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::command_calls;
use lockscript_test::fixtures::bump;

const PATIENCE: Duration = Duration::from_secs(30);

/// (EVALSHA, EVAL, SCRIPT LOAD) calls seen by node `i`.
fn script_calls(cluster: &RedisCluster, i: usize) -> (u64, u64, u64) {
    let mut conn = cluster.node(i).connection();
    (
        command_calls(&mut conn, "evalsha"),
        command_calls(&mut conn, "eval"),
        command_calls(&mut conn, "script|load"),
    )
}

/// Two keys whose slots are served by different masters.
fn keys_on_two_masters(cluster: &RedisCluster) -> ((String, usize), (String, usize)) {
    let a = "{alpha}counter".to_owned();
    let master_a = cluster.master_for_key(&a);
    let b = (0..1000)
        .map(|i| format!("{{beta{i}}}counter"))
        .find(|k| cluster.master_for_key(k) != master_a)
        .unwrap();
    let master_b = cluster.master_for_key(&b);
    ((a, master_a), (b, master_b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_route_by_first_key_and_fall_back_on_the_owning_node() {
    let cluster = RedisCluster::start(3, 0);
    let ((a, master_a), (b, master_b)) = keys_on_two_masters(&cluster);
    cluster.flush_scripts_and_reset_stats();

    let mut conn = cluster.async_connection().await;
    assert_eq!(bump(&a, 1).invoke_async(&mut conn).await.unwrap(), 1);
    assert_eq!(bump(&a, 1).invoke_async(&mut conn).await.unwrap(), 2);
    assert_eq!(
        script_calls(&cluster, master_a),
        (3, 0, 1),
        "cold: EVALSHA, then SCRIPT LOAD and EVALSHA in one pipeline; then EVALSHA"
    );
    let other = (0..3).find(|i| *i != master_a && *i != master_b).unwrap();
    assert_eq!(script_calls(&cluster, master_b), (0, 0, 0));
    assert_eq!(
        script_calls(&cluster, other),
        (0, 0, 0),
        "nothing went to a node without the key"
    );

    // The sync cluster connection routes scripts the same way; b's node still has a cold
    // cache. Its SCRIPT LOAD goes alone, so to every node (loaded on all of them).
    let mut sync = cluster.connection();
    assert_eq!(bump(&b, 5).invoke(&mut sync).unwrap(), 5);
    assert_eq!(script_calls(&cluster, master_b), (2, 0, 1));
    assert_eq!(script_calls(&cluster, master_a), (3, 0, 2));
    assert_eq!(script_calls(&cluster, other), (0, 0, 1));
}

/// lockscript's own cluster connection, to the same cluster.
async fn ours(cluster: &RedisCluster) -> lockscript::ClusterConnection {
    lockscript::ClusterConnection::connect(cluster.urls())
        .await
        .expect("a lockscript cluster connection")
}

/// The same through lockscript's cluster connection: the fallback's `SCRIPT LOAD` goes
/// in one pipeline with the `EVALSHA`, to the key's primary only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockscripts_cluster_connection_routes_scripts_by_first_key() {
    let cluster = RedisCluster::start(3, 0);
    let ((a, master_a), (b, master_b)) = keys_on_two_masters(&cluster);
    cluster.flush_scripts_and_reset_stats();
    let mut conn = ours(&cluster).await;
    assert_eq!(bump(&a, 1).invoke_async(&mut conn).await.unwrap(), 1);
    assert_eq!(bump(&a, 1).invoke_async(&mut conn).await.unwrap(), 2);
    assert_eq!(bump(&b, 5).invoke_async(&mut conn).await.unwrap(), 5);
    assert_eq!(script_calls(&cluster, master_a), (3, 0, 1));
    assert_eq!(script_calls(&cluster, master_b), (2, 0, 1));
    let other = (0..3).find(|i| *i != master_a && *i != master_b).unwrap();
    assert_eq!(script_calls(&cluster, other), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_scripts_loads_on_every_primary() {
    let cluster = RedisCluster::start(3, 0);
    let conn = cluster.async_connection().await;
    loads_scripts_and_functions_on_every_primary(&cluster, conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_scripts_loads_on_every_primary_through_lockscripts_cluster_connection() {
    let cluster = RedisCluster::start(3, 0);
    let conn = ours(&cluster).await;
    loads_scripts_and_functions_on_every_primary(&cluster, conn).await;
}

/// `load_scripts_async` and `load_functions_async` on `conn` leave the scripts and the
/// library on every primary.
async fn loads_scripts_and_functions_on_every_primary<C: redis::aio::ConnectionLike>(
    cluster: &RedisCluster,
    mut conn: C,
) {
    cluster.flush_scripts_and_reset_stats();
    let library = lockscript::load_functions_async(&mut conn).await.unwrap();
    for master in cluster.masters() {
        let listed: redis::Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(library)
            .query(&mut cluster.node(master).connection())
            .unwrap();
        assert!(
            format!("{listed:?}").contains(library),
            "node {master} has no {library}: {listed:?}"
        );
    }
    let loaded = lockscript::load_scripts_async(&mut conn).await.unwrap();
    assert_eq!(loaded, lockscript::scripts().len());
    for master in cluster.masters() {
        let mut node = cluster.node(master).connection();
        let mut exists = redis::cmd("SCRIPT");
        exists.arg("EXISTS");
        for script in lockscript::scripts() {
            exists.arg(script.sha1());
        }
        let cached: Vec<bool> = exists.query(&mut node).unwrap();
        assert!(cached.iter().all(|c| *c), "node {master}: {cached:?}");
    }
    // Preloaded: the first call anywhere needs no EVAL.
    let ((a, master_a), _) = keys_on_two_masters(cluster);
    assert_eq!(bump(&a, 1).invoke_async(&mut conn).await.unwrap(), 1);
    let (evalsha, eval, _) = script_calls(cluster, master_a);
    assert_eq!((evalsha, eval), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_different_slots_get_an_error_that_names_hash_tags() {
    let cluster = RedisCluster::start(3, 0);
    cross_slot_keys_are_refused(cluster.async_connection().await).await;
    cross_slot_keys_are_refused(ours(&cluster).await).await;
}

async fn cross_slot_keys_are_refused<C>(mut conn: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let err = lockscript::builtin::acquire(
        "lock:{a}",
        "lock:{b}:fence",
        "lock:{a}:holders",
        "token",
        1_000,
        1_000,
    )
    .invoke_async(&mut conn)
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::CrossSlot {
                script: "acquire-with-retry",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("hash tag"), "{err}");
    // The lock runtime's own keys share one tag, so they never hit this.
    let locks = Locks::new(conn);
    let guard = locks.try_lock("orders:42").await.unwrap().expect("free");
    assert!(guard.is_held().await.unwrap());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_keep_working_after_a_master_restarts_empty() {
    let mut cluster = RedisCluster::start(3, 0);
    let ((a, master_a), _) = keys_on_two_masters(&cluster);
    let mut conn = cluster.async_connection().await;
    lockscript::load_scripts_async(&mut conn).await.unwrap();
    assert_eq!(bump(&a, 1).invoke_async(&mut conn).await.unwrap(), 1);

    // No persistence: the master comes back with no data and no script cache, but
    // still owns its slots (nodes.conf survives in its directory).
    cluster.node_mut(master_a).stop();
    cluster.node_mut(master_a).restart();
    cluster.wait_until_ok(PATIENCE);

    let deadline = std::time::Instant::now() + PATIENCE;
    let value = loop {
        match bump(&a, 1).invoke_async(&mut conn).await {
            Ok(v) => break v,
            // The connection to the restarted node may fail once before it reconnects;
            // an I/O error is returned as is, never retried blindly.
            Err(LockError::Redis(e)) if std::time::Instant::now() < deadline => {
                assert!(
                    e.is_io_error()
                        || e.is_connection_dropped()
                        || e.is_timeout()
                        || e.is_connection_refusal(),
                    "{e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("unexpected error {other:?}\n{}", cluster.logs()),
        }
    };
    assert_eq!(value, 1, "ran once, on the empty master");
    let (_, evals, loads) = script_calls(&cluster, master_a);
    assert_eq!(
        (evals, loads),
        (0, 1),
        "the cold cache was refilled by SCRIPT LOAD"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_run_on_a_cluster_connection_with_notifications() {
    let cluster = RedisCluster::start(3, 0);
    let conn = cluster.async_connection().await;
    // PUBLISH reaches subscribers on every node, so any node serves notifications.
    let node = redis::Client::open(cluster.urls()[0].as_str()).unwrap();
    let locks = Locks::new(conn)
        .notifications(node)
        .wait_timeout(Duration::from_secs(10));
    let mut names = Vec::new();
    for i in 0..6 {
        let name = format!("job:{i}");
        let holder = locks.lock(&name).await.unwrap();
        let holder_fence = holder.fencing_token();
        let waiter = {
            let (locks, name) = (locks.clone(), name.clone());
            tokio::spawn(async move { locks.lock(&name).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        holder.release().await.unwrap();
        let next = tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(next.fencing_token() > holder_fence);
        next.release().await.unwrap();
        names.push(name);
    }
    let masters: std::collections::BTreeSet<usize> = names
        .iter()
        .map(|n| cluster.master_for_key(&format!("lock:{{{n}}}")))
        .collect();
    assert!(
        masters.len() > 1,
        "the locks lived on several masters: {masters:?}"
    );
}

#[test]
fn cluster_pipeline_on_cold_caches_never_fails_with_noscript() {
    use lockscript::PipelineExt;
    let cluster = RedisCluster::start(3, 0);
    let ((a, _), (b, _)) = keys_on_two_masters(&cluster);
    cluster.flush_scripts_and_reset_stats();
    let mut conn = cluster.connection();
    let mut pipe = redis::cluster::cluster_pipe();
    for key in [&a, &b, &a, &b] {
        pipe.invoke(&bump(key, 1)).unwrap();
    }
    let replies: (i64, i64, i64, i64) = pipe.query(&mut conn).unwrap();
    assert_eq!(
        replies,
        (1, 1, 2, 2),
        "each call ran exactly once, on its key's node"
    );
}
