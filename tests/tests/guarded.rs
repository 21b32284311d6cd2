//! Owner-guarded scripts (`#[lock_script("...", guarded)]`): the user's script runs only
//! while the guard's lock key holds its token and no later holder was granted the lock,
//! checked by the server in the same atomic step; otherwise nothing runs and the call
//! says `NotHeld` or `Stale`. Against real servers: one node, a pipeline, the blocking
//! face, and a Redis Cluster for the slot rule.

use std::time::Duration;

use lockscript::{LockError, Locks, PipelineExt, lock_script};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::server::RedisServer;
use redis::{AsyncCommands, Commands};

/// Adds `by` to the counter at `counter` (the file the unguarded tests use too).
#[lock_script("lua/bump.lua", guarded)]
fn bump(#[key] counter: &str, by: i64) -> i64;

/// Reads a key; `#!lua flags=no-writes`, so the guarded form goes as EVALSHA_RO too.
#[lock_script("lua/peek.lua", guarded)]
fn peek(#[key] key: &str) -> Option<String>;

/// Fails on purpose: INCR on a key that holds no number raises at its line 10.
#[lock_script("lua/fail.lua", guarded)]
fn fail(#[key] key: &str, how: &str) -> i64;

/// A data key in the lock's slot: it carries the lock's hash tag, `{orders:42}`.
const DATA: &str = "{orders:42}:total";

async fn locks(server: &RedisServer) -> Locks {
    Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_script_runs_while_held_and_is_refused_after_release() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let mut conn = server.multiplexed().await;
    let guard = locks.lock("orders:42").await.unwrap();
    assert_eq!(
        bump(&guard, DATA, 5).invoke_async(&mut conn).await.unwrap(),
        5
    );
    // Its Lease view works the same.
    let lease = guard.lease();
    assert_eq!(
        bump(&lease, DATA, 2).invoke_async(&mut conn).await.unwrap(),
        7
    );
    guard.release().await.unwrap();

    let err = bump(&lease, DATA, 100)
        .invoke_async(&mut conn)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::NotHeld { name } if name == "orders:42"),
        "{err:?}"
    );
    let total: i64 = conn.get(DATA).await.unwrap();
    assert_eq!(total, 7, "the refused call changed nothing");
}

/// The holder paused past its lease: another holder took the lock and wrote. The first
/// one's write is refused as `Stale` with both fencing tokens, and its guard learns of
/// the loss at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_refused_and_learns_of_its_loss() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let stale = locks(&server)
        .await
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .lock("orders:42")
        .await
        .unwrap();
    // The key expires on the server (a holder paused past its lease sees no difference).
    let _: () = conn.del("lock:{orders:42}").await.unwrap();
    let fresh = locks(&server).await.lock("orders:42").await.unwrap();
    assert_eq!(
        bump(&fresh, DATA, 1).invoke_async(&mut conn).await.unwrap(),
        1
    );
    assert!(!stale.is_lost(), "the stale holder does not know yet");

    let err = bump(&stale, DATA, 1000)
        .invoke_async(&mut conn)
        .await
        .unwrap_err();
    match &err {
        LockError::Stale { name, fence, newer } => {
            assert_eq!(name, "orders:42");
            assert_eq!(*fence, stale.fencing_token());
            assert_eq!(*newer, fresh.fencing_token());
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    assert!(err.to_string().contains("later holder"), "{err}");
    assert!(stale.is_lost(), "the refusal signals the loss");
    tokio::time::timeout(Duration::from_millis(50), stale.lost())
        .await
        .expect("lost() has fired");
    let total: i64 = conn.get(DATA).await.unwrap();
    assert_eq!(total, 1, "the stale write did not happen");
    fresh.release().await.unwrap();
}

/// The key was deleted (or expired) and nobody took the lock since: `NotHeld`, and the
/// guard's loss is signalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_ended_is_refused_as_not_held() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let guard = locks(&server).await.lock("orders:42").await.unwrap();
    let _: () = conn.del("lock:{orders:42}").await.unwrap();
    let err = bump(&guard, DATA, 1)
        .invoke_async(&mut conn)
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::NotHeld { .. }), "{err:?}");
    assert!(guard.is_lost());
    assert!(!conn.exists::<_, bool>(DATA).await.unwrap());
}

/// What runs is the file wrapped by `lockscript_audit::guarded::wrap`, which
/// `lockscript audit --guarded` prints: a reviewer sees the same text and digest. Both
/// forms are in `scripts()`.
#[test]
fn the_guarded_form_is_the_audited_wrapper_and_is_listed() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(manifest.join("lua/bump.lua")).unwrap();
    let script = lockscript::scripts()
        .find(|s| s.name() == "bump+guarded")
        .expect("listed by scripts()");
    let wrapped = lockscript_audit::guarded::wrap(&file);
    assert_eq!(script.source(), wrapped);
    assert_eq!(
        script.sha1(),
        lockscript_audit::sha1_hex(wrapped.as_bytes())
    );
    assert_eq!(script.path(), "lua/bump.lua");
    assert_eq!(script.keys(), lockscript::Arity::Exactly(3));
    assert_eq!(script.args(), lockscript::Arity::Exactly(3));
    assert!(lockscript::scripts().any(|s| s.name() == "peek+guarded" && s.read_only()));
    // The runtime reads the refusals by the codes the wrapper sends.
    assert!(wrapped.contains(lockscript_audit::guarded::NOT_HELD));
    assert!(wrapped.contains(lockscript_audit::guarded::STALE));
    let err = LockError::Stale {
        name: "x".into(),
        fence: 1,
        newer: 2,
    };
    assert!(err.to_string().contains("moved on (to 2"), "{err}");
}

/// A holder runs its guarded script even after attempts of others were refused while
/// it held the lock: each refused attempt moves the fencing counter on (the acquire
/// transaction runs its increment whatever its `SET NX` answered), and the guard used
/// to read a counter above its token as a later grant. The chaos checker's cluster
/// soak found leases lost by their own guarded writes this way, 70 ms after the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_passed_by_refused_attempts_still_runs_its_guarded_script() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let holder = locks(&server).await.lock("orders:42").await.unwrap();
    let other = locks(&server).await;
    for _ in 0..3 {
        assert!(other.try_lock("orders:42").await.unwrap().is_none());
    }
    let counter: u64 = conn.get("lock:{orders:42}:fence").await.unwrap();
    assert!(
        counter > holder.fencing_token(),
        "refused attempts moved it on"
    );
    assert_eq!(
        bump(&holder, DATA, 5)
            .invoke_async(&mut conn)
            .await
            .unwrap(),
        5
    );
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_guarded_script_goes_as_evalsha_ro() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let _: () = conn.set(DATA, "9").await.unwrap();
    let guard = locks(&server).await.lock("orders:42").await.unwrap();
    lockscript_test::reset_stats(&mut server.connection());
    let value = peek(&guard, DATA).invoke_async(&mut conn).await.unwrap();
    assert_eq!(value.as_deref(), Some("9"));
    let value = peek(&guard, DATA).invoke_async(&mut conn).await.unwrap();
    assert_eq!(value.as_deref(), Some("9"));
    let mut stats = server.connection();
    assert_eq!(
        lockscript_test::command_calls(&mut stats, "script|load"),
        1,
        "the cold call loads it"
    );
    assert_eq!(lockscript_test::command_calls(&mut stats, "evalsha_ro"), 3);
    assert_eq!(lockscript_test::command_calls(&mut stats, "eval_ro"), 0);
    assert_eq!(lockscript_test::command_calls(&mut stats, "eval"), 0);
    guard.release().await.unwrap();
}

/// In a pipeline (and a MULTI), each guarded call is checked on its own, and `read`
/// turns each reply into the same typed result `invoke` gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_calls_work_in_pipelines() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let mut conn = server.multiplexed().await;
    let held = locks.lock("orders:42").await.unwrap();
    let gone = locks.lock("orders:43").await.unwrap();
    let _: () = conn.del("lock:{orders:43}").await.unwrap();

    for atomic in [false, true] {
        let first = bump(&held, DATA, 1);
        let refused = bump(&gone, "{orders:43}:total", 1);
        let second = bump(&held, DATA, 10);
        let mut pipe = redis::pipe();
        if atomic {
            pipe.atomic();
        }
        pipe.ignore_errors();
        pipe.invoke(&first).unwrap();
        pipe.invoke(&refused).unwrap();
        pipe.invoke(&second).unwrap();
        let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await.unwrap();
        let [a, b, c]: [redis::Value; 3] = replies.try_into().unwrap();
        let base = if atomic { 11 } else { 0 };
        assert_eq!(first.read(a).unwrap(), base + 1, "atomic {atomic}");
        assert!(
            matches!(refused.read(b), Err(LockError::NotHeld { ref name }) if name == "orders:43"),
            "atomic {atomic}"
        );
        assert_eq!(second.read(c).unwrap(), base + 11, "atomic {atomic}");
    }
    assert!(!conn.exists::<_, bool>("{orders:43}:total").await.unwrap());
    held.release().await.unwrap();
}

#[test]
fn the_blocking_face_guards_the_same_way() {
    let server = RedisServer::start();
    let locks = lockscript::blocking::Locks::new(server.connection());
    let mut conn = server.connection();
    let guard = locks.lock("orders:42").unwrap();
    assert_eq!(bump(&guard, DATA, 3).invoke(&mut conn).unwrap(), 3);
    let lease = guard.lease();
    guard.release().unwrap();
    let err = bump(&lease, DATA, 3).invoke(&mut conn).unwrap_err();
    assert!(matches!(err, LockError::NotHeld { .. }), "{err:?}");
    let total: i64 = conn.get(DATA).unwrap();
    assert_eq!(total, 3);
}

/// On a cluster the data keys must share the lock's slot: `{name}` in the key (the lock
/// key is `lock:{name}`). A key
/// elsewhere is refused by the server before anything runs, and the error says the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_data_keys_must_share_the_locks_slot() {
    let cluster = RedisCluster::start(3, 0);
    let mut conn = cluster.async_connection().await;
    let locks = Locks::new(conn.clone());
    let guard = locks.lock("orders:42").await.unwrap();
    assert_eq!(
        bump(&guard, DATA, 4).invoke_async(&mut conn).await.unwrap(),
        4
    );
    let err = bump(&guard, "orders:43:total", 4)
        .invoke_async(&mut conn)
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::CrossSlot { .. }), "{err:?}");
    assert!(err.to_string().contains("hash tag"), "{err}");
    guard.release().await.unwrap();
}

/// A Redlock grant lives on several masters and a script runs on one: its lease cannot
/// guard a script, and the call says so before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_lease_cannot_guard_a_script() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let clients: Vec<redis::Client> = servers.iter().map(RedisServer::client).collect();
    let redlock = lockscript::Redlock::connect(&clients).await.unwrap();
    let guard = redlock.lock("orders:42").await.unwrap();
    let mut conn = servers[0].multiplexed().await;
    lockscript_test::reset_stats(&mut servers[0].connection());
    let err = bump(&guard.lease(), DATA, 1)
        .invoke_async(&mut conn)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidSettings(m) if m.contains("Redlock")),
        "{err:?}"
    );
    let mut stats = servers[0].connection();
    assert_eq!(lockscript_test::command_calls(&mut stats, "evalsha"), 0);
    assert_eq!(lockscript_test::command_calls(&mut stats, "eval"), 0);
    guard.release().await.unwrap();
}

/// The guard's own lines come before the script's: an error the server reports in the
/// wrapped script still names the script's file and its own line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_inside_a_guarded_script_names_the_scripts_own_line() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let mut conn = server.multiplexed().await;
    let _: () = conn.set(DATA, "not a number").await.unwrap();
    let guard = locks.lock("orders:42").await.unwrap();
    let err = fail(&guard, DATA, "incr")
        .invoke_async(&mut conn)
        .await
        .unwrap_err();
    let LockError::Script { at, message, .. } = &err else {
        panic!("expected a script error, got {err:?}");
    };
    assert!(message.contains("not an integer"), "{message}");
    assert_eq!(at.as_deref(), Some("lua/fail.lua:10"));
    guard.release().await.unwrap();
}
