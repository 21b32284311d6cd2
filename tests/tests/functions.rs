//! Redis Functions delivery (`Delivery::Functions`): the binary's scripts as one library,
//! called with FCALL / FCALL_RO, loaded when the server lacks it; the library as a
//! reviewer reads it; a promoted replica that already has it; and the typed errors of
//! servers that cannot run Lua or Functions. Against real servers.

use std::time::{Duration, Instant};

use lockscript::{Delivery, LockError, Locks, builtin, functions_library, lock_script};
use lockscript_test::TestRedis;
use lockscript_test::cluster::RedisCluster;
use lockscript_test::fixtures::{fail, peek};
use lockscript_test::server::RedisServer;
use lockscript_test::{command_calls, has_functions, reset_stats};

/// Sets `key` and `other` (not given as a key) to `value`: a script without a shebang,
/// which a Cluster lets touch a key of another slot on the same node.
#[lock_script("lua/set-two.lua")]
fn set_two(#[key] key: &str, other: &str, value: &str) -> i64;

/// A liveness bound for the cluster's failover; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(30);

/// A clean server with Redis Functions and a connection to it; `None` (the test is
/// skipped, and says so) on a server before 7.0.
fn functions_redis() -> Option<(TestRedis, redis::Connection)> {
    let redis = TestRedis::start();
    let mut conn = redis.connection();
    if has_functions(&mut conn) {
        Some((redis, conn))
    } else {
        eprintln!("skipped: the server has no Redis Functions (before 7.0)");
        None
    }
}

/// The code of library `name` on the server, byte for byte, if it has it.
fn library_code(conn: &mut redis::Connection, name: &str) -> Option<Vec<u8>> {
    let reply: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(name)
        .arg("WITHCODE")
        .query(conn)
        .unwrap();
    let libraries: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::from_redis_value(reply).unwrap();
    libraries
        .into_iter()
        .find(|lib| {
            lib.get("library_name")
                .is_some_and(|n| redis::from_redis_value_ref::<String>(n).unwrap() == name)
        })
        .map(|lib| redis::from_redis_value(lib["library_code"].clone()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_run_their_scripts_as_functions_loading_the_library_once() {
    let Some((redis, mut conn)) = functions_redis() else {
        return;
    };
    let locks = Locks::connect(&redis.client())
        .await
        .unwrap()
        .watchdog(false)
        .delivery(Delivery::Functions)
        // Counted below: every lock command a function (no native release).
        .native_commands(false);
    redis.reset_stats();
    for _ in 0..3 {
        let guard = locks.lock("fn-cycle").await.unwrap();
        guard.release().await.unwrap();
    }
    // The first call missed the function and loaded the library (with its FCALL in the
    // same round trip); every other call was one FCALL. No script went by EVALSHA.
    assert_eq!(redis.command_calls("function|load"), 1);
    assert_eq!(redis.command_calls("fcall"), 1 + 6);
    assert_eq!(redis.command_calls("evalsha"), 0);
    assert_eq!(redis.command_calls("eval"), 0);

    // A server that lost its functions (FUNCTION FLUSH) gets the library again.
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut conn)
        .unwrap();
    redis.reset_stats();
    let guard = locks.lock("fn-cycle").await.unwrap();
    assert!(guard.fencing_token() > 0);
    guard.release().await.unwrap();
    assert_eq!(redis.command_calls("function|load"), 1);
    assert_eq!(redis.command_calls("fcall"), 3);
}

#[test]
fn the_servers_library_is_the_files_byte_for_byte() {
    let Some((_redis, mut conn)) = functions_redis() else {
        return;
    };
    let name = lockscript::load_functions(&mut conn).unwrap();
    let library = functions_library();
    assert_eq!(name, library.name);
    // Loading again is not an error: the library's name is its content's digest.
    assert_eq!(lockscript::load_functions(&mut conn).unwrap(), name);
    let code = library_code(&mut conn, name).expect("the library is on the server");
    assert_eq!(code, library.code);
    let found = lockscript_audit::functions::split(&code);
    assert_eq!(found.len(), library.functions.len());
    for function in &found {
        let sha1 = lockscript_audit::sha1_hex(&function.source);
        assert!(function.function.ends_with(&sha1), "{}", function.function);
        assert!(
            lockscript::scripts().any(|s| s.sha1() == sha1 && s.bytes() == function.source),
            "function {} is not a registered script",
            function.function
        );
    }
    assert_eq!(
        found.len(),
        lockscript::scripts()
            .map(lockscript::Script::sha1)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
}

#[test]
fn sync_calls_use_fcall_and_fcall_ro_and_keep_their_typed_errors() {
    let Some((redis, mut conn)) = functions_redis() else {
        return;
    };
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    redis.reset_stats();
    let got = peek("k")
        .delivery(Delivery::Functions)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(got.as_deref(), Some("v"));
    // No function yet: FCALL_RO missed, the library was loaded, FCALL_RO ran it.
    assert_eq!(redis.command_calls("fcall_ro"), 2);
    assert_eq!(redis.command_calls("function|load"), 1);
    assert_eq!(redis.command_calls("evalsha_ro"), 0);

    let err = fail("k2", "reply")
        .delivery(Delivery::Functions)
        .invoke(&mut conn)
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Script { script: "fail", message, .. } if message.contains("boom")),
        "{err:?}"
    );
    let renewed = builtin::renew("lock:{none}", "t", 1_000)
        .delivery(Delivery::Functions)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(renewed, 0);
    assert_eq!(redis.command_calls("fcall"), 2);
    assert_eq!(redis.command_calls("function|load"), 1);
}

#[test]
fn the_blocking_face_delivers_by_functions_too() {
    let Some((redis, mut conn)) = functions_redis() else {
        return;
    };
    let locks = lockscript::blocking::Locks::connect(&redis.client())
        .unwrap()
        .watchdog(false)
        .delivery(Delivery::Functions)
        // Counted below: every lock command a function (no native release).
        .native_commands(false);
    redis.reset_stats();
    let guard = locks.lock("fn-blocking").unwrap();
    guard.extend(Duration::from_secs(5)).unwrap();
    guard.release().unwrap();
    assert_eq!(redis.command_calls("function|load"), 1);
    // acquire (missed, then run), renew, release.
    assert_eq!(redis.command_calls("fcall"), 4);
    assert_eq!(redis.command_calls("evalsha"), 0);

    // A guard dropped without release is released by the background thread, by
    // Functions too.
    drop(locks.lock("fn-dropped").unwrap());
    let deadline = Instant::now() + Duration::from_secs(2);
    while redis::cmd("EXISTS")
        .arg("lock:{fn-dropped}")
        .query::<bool>(&mut conn)
        .unwrap()
    {
        assert!(
            Instant::now() < deadline,
            "the dropped guard was not released"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(redis.command_calls("fcall"), 6);
    assert_eq!(redis.command_calls("evalsha"), 0);
}

/// A Valkey 9 whose Lua engine (a module since 9.0) was unloaded: every face says at
/// connect that the server cannot run scripts, and a call says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_lua_is_refused_at_connect_with_a_typed_error() {
    let Some(server) = RedisServer::without_lua() else {
        eprintln!("skipped: Lua is an unloadable module only in Valkey 9+");
        return;
    };
    let mut conn = server.connection();
    let is_no_lua = |e: &LockError| matches!(e, LockError::Unsupported { what, .. } if *what == "run Lua scripts");

    let err = Locks::connect(&server.client()).await.unwrap_err();
    assert!(is_no_lua(&err), "{err:?}");
    assert!(err.to_string().contains("lua"), "{err}");
    let err = lockscript::blocking::Locks::connect(&server.client()).unwrap_err();
    assert!(is_no_lua(&err), "{err:?}");
    let err = builtin::renew("lock:{a}", "t", 1_000)
        .invoke(&mut conn)
        .unwrap_err();
    assert!(is_no_lua(&err), "{err:?}");
    let err = builtin::renew("lock:{a}", "t", 1_000)
        .delivery(Delivery::Functions)
        .invoke(&mut conn)
        .unwrap_err();
    assert!(is_no_lua(&err), "{err:?}");
    // A handle made from a connection learns it at its first call that needs a script:
    // a plain lock's acquire is a transaction of the server's own commands, no Lua; a
    // fair lock's is fair-queue.lua.
    let locks = Locks::new(server.multiplexed().await);
    let plain = locks
        .try_lock("a")
        .await
        .expect("the plain acquire needs no Lua");
    assert!(plain.is_some(), "free");
    let err = locks.fair(true).try_lock("b").await.unwrap_err();
    assert!(is_no_lua(&err), "{err:?}");
}

/// Redis 6.2 has scripts but no Functions: choosing them is a typed error, not a hang
/// or a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_on_a_server_without_them_are_a_typed_error() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    if has_functions(&mut conn) {
        eprintln!("skipped: the server has Redis Functions (7.0+)");
        return;
    }
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .delivery(Delivery::Functions)
        // Counted below: every lock command a function (no native release).
        .native_commands(false);
    let started = Instant::now();
    let err = locks.try_lock("a").await.unwrap_err();
    assert!(
        matches!(&err, LockError::Unsupported { what, .. } if *what == "run Redis Functions"),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    let err = lockscript::load_functions(&mut conn).unwrap_err();
    assert!(matches!(&err, LockError::Unsupported { .. }), "{err:?}");
}

/// The point of Functions: they are replicated with the data, so the replica promoted
/// after its master died serves lock calls without loading anything, where the script
/// cache of the same replica starts cold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_already_has_the_functions() {
    let mut cluster = RedisCluster::start(3, 1);
    if !has_functions(&mut cluster.node(0).connection()) {
        eprintln!("skipped: the server has no Redis Functions (before 7.0)");
        return;
    }
    let urls = cluster.urls();
    let by_functions = Locks::connect_cluster(urls.iter().map(String::as_str))
        .await
        .unwrap()
        .watchdog(false)
        .wait_timeout(PATIENCE)
        .delivery(Delivery::Functions)
        // Counted below: every lock command a function (no native release).
        .native_commands(false);
    let by_scripts = Locks::connect_cluster(urls.iter().map(String::as_str))
        .await
        .unwrap()
        .watchdog(false)
        .wait_timeout(PATIENCE);
    // A first call on a cluster that has no library loads it on the node of its key
    // (FUNCTION LOAD and FCALL in one pipeline, routed by the key).
    let lazy = "lazy";
    by_functions
        .lock(lazy)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let lazy_master = cluster.master_for_key("lock:{lazy}");
    assert!(
        library_code(
            &mut cluster.node(lazy_master).connection(),
            &functions_library().name
        )
        .is_some()
    );
    // Loaded up front through a cluster connection: on every primary (one of which
    // already has it, which is no error).
    let mut conn = cluster.async_connection().await;
    let library = &functions_library().name;
    assert_eq!(
        lockscript::load_functions_async(&mut conn).await.unwrap(),
        library
    );
    for master in cluster.masters() {
        assert!(
            library_code(&mut cluster.node(master).connection(), library).is_some(),
            "primary {master} lacks the library"
        );
    }
    // One name, taken in turn through each handle: one master serves both.
    let (a, b) = ("fo", "fo");
    by_functions.lock(a).await.unwrap().release().await.unwrap();
    by_scripts.lock(b).await.unwrap().release().await.unwrap();
    let old = cluster.master_for_key("lock:{fo}");
    let replica = cluster
        .replicas()
        .into_iter()
        .find(|&r| {
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query(&mut cluster.node(r).connection())
                .unwrap();
            let master_port: u16 = redis::from_redis_value_ref(&role[2]).unwrap();
            master_port == cluster.node(old).port()
        })
        .expect("the master has a replica");
    // The library reached the replica (replication is asynchronous).
    let deadline = Instant::now() + PATIENCE;
    while library_code(&mut cluster.node(replica).connection(), library).is_none() {
        assert!(
            Instant::now() < deadline,
            "the library never reached the replica"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    cluster.node_mut(old).stop();
    cluster.wait_until_ok(PATIENCE);
    let new = cluster.master_for_key("lock:{fo}");
    assert_eq!(new, replica);
    let mut heir = cluster.node(new).connection();
    reset_stats(&mut heir);

    by_functions.lock(a).await.unwrap().release().await.unwrap();
    assert_eq!(
        command_calls(&mut heir, "function|load"),
        0,
        "nothing loaded"
    );
    assert!(command_calls(&mut heir, "fcall") >= 2);
    assert_eq!(command_calls(&mut heir, "evalsha"), 0);

    by_scripts.lock(b).await.unwrap().release().await.unwrap();
    assert!(
        command_calls(&mut heir, "script|load") >= 1,
        "the script cache of a promoted replica starts cold"
    );
}

/// Redis 6.2 reads a `#!lua flags=...` first line as Lua and cannot compile it: a script
/// with a shebang is a typed error there that says what to do, from a call and from
/// `load_scripts`.
#[test]
fn a_shebang_before_redis_7_is_a_typed_error() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    if has_functions(&mut conn) {
        eprintln!("skipped: the server parses shebangs (7.0+)");
        return;
    }
    let is_shebang = |e: &LockError| matches!(e, LockError::Unsupported { what, .. } if what.contains("shebang"));
    let err = peek("k").invoke(&mut conn).unwrap_err();
    assert!(is_shebang(&err), "{err:?}");
    assert!(err.to_string().contains("peek"), "{err}");
    // load_scripts refuses the server before loading anything, naming the script and
    // what it needs.
    let err = lockscript::load_scripts(&mut conn).unwrap_err();
    assert!(
        matches!(&err, LockError::ServerTooOld { needs, server, .. }
            if needs == "Redis 7.0.0 or later (for the `#!lua` shebang)" && server.starts_with("Redis 6.")),
        "{err:?}"
    );
    // Scripts without a shebang run as usual.
    assert_eq!(
        builtin::renew("lock:{a}", "t", 1_000)
            .invoke(&mut conn)
            .unwrap(),
        0
    );
}

/// A script's error under Functions delivery names the script's file and line, as under
/// EVALSHA: the server counts lines in the library (`@user_function:N`), where the script
/// starts at its function's first line.
#[test]
fn an_error_under_functions_names_the_scripts_own_line() {
    let Some((_redis, mut conn)) = functions_redis() else {
        return;
    };
    let () = redis::cmd("SET")
        .arg("n")
        .arg("not a number")
        .query(&mut conn)
        .unwrap();
    let err = fail("n", "incr")
        .delivery(Delivery::Functions)
        .invoke(&mut conn)
        .unwrap_err();
    let LockError::Script { message, at, .. } = &err else {
        panic!("expected a script error, got {err:?}");
    };
    assert!(message.contains("@user_function:"), "{message}");
    assert_eq!(at.as_deref(), Some("lua/fail.lua:10"), "{message}");
}

/// A read-only replica that lacks the library refuses the `FUNCTION LOAD` that follows
/// "Function not found" with `READONLY`: that is the same retryable `LockError::Redis`
/// (kind `ReadOnly`) as any other command's `READONLY`, not a script that raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_the_library_answers_readonly_as_a_redis_error() {
    let (primary, replica) = RedisServer::with_replica();
    if !has_functions(&mut primary.connection()) {
        eprintln!("skipped: the server has no Redis Functions (before 7.0)");
        return;
    }
    let is_readonly = |e: &LockError| {
        matches!(e, LockError::Redis(r)
            if r.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly))
    };
    let mut conn = replica.connection();
    // A script that writes: FCALL, "Function not found", FUNCTION LOAD refused.
    let err = fail("k", "incr")
        .delivery(Delivery::Functions)
        .invoke(&mut conn)
        .unwrap_err();
    assert!(is_readonly(&err), "{err:?}");
    let mut conn = replica
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let err = fail("k", "incr")
        .delivery(Delivery::Functions)
        .invoke_async(&mut conn)
        .await
        .unwrap_err();
    assert!(is_readonly(&err), "{err:?}");
    // And loading it up front on the replica.
    let err = lockscript::load_functions(&mut replica.connection()).unwrap_err();
    assert!(is_readonly(&err), "{err:?}");
    // The same error as the script's own write on the replica, by EVALSHA.
    let err = fail("k", "incr")
        .invoke(&mut replica.connection())
        .unwrap_err();
    assert!(is_readonly(&err), "{err:?}");
}

/// On a Cluster, a script without a shebang may touch a key of another slot served by
/// the same node, and its function may too (the library registers it with
/// `allow-cross-slot-keys`); a key on another node is refused to both, as the server
/// refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_touches_keys_of_other_slots_on_its_node_as_its_script_does() {
    let cluster = RedisCluster::start(3, 0);
    if !has_functions(&mut cluster.node(0).connection()) {
        eprintln!("skipped: the server has no Redis Functions (before 7.0)");
        return;
    }
    let key = "{x}a";
    let node = cluster.master_for_key(key);
    let slot = lockscript_test::cluster::key_slot(key);
    let candidates = (0..1000).map(|i| format!("{{y{i}}}b"));
    let same_node = candidates
        .clone()
        .find(|k| {
            cluster.master_for_key(k) == node && lockscript_test::cluster::key_slot(k) != slot
        })
        .unwrap();
    let other_node = candidates
        .clone()
        .find(|k| cluster.master_for_key(k) != node)
        .unwrap();
    let mut sync = cluster.connection();
    let mut conn = cluster.async_connection().await;
    for delivery in [Delivery::Scripts, Delivery::Functions] {
        let value = format!("{delivery:?}");
        assert_eq!(
            set_two(key, &same_node, &value)
                .delivery(delivery)
                .invoke(&mut sync)
                .unwrap(),
            2,
            "{delivery:?}"
        );
        assert_eq!(
            set_two(key, &same_node, &value)
                .delivery(delivery)
                .invoke_async(&mut conn)
                .await
                .unwrap(),
            2,
            "{delivery:?}"
        );
        let stored: String = redis::cmd("GET")
            .arg(&same_node)
            .query(&mut cluster.node(node).connection())
            .unwrap();
        assert_eq!(stored, value);
        let err = set_two(key, &other_node, &value)
            .delivery(delivery)
            .invoke_async(&mut conn)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LockError::Script { message, .. } if message.contains("non local key")),
            "{delivery:?}: {err:?}"
        );
    }
}
