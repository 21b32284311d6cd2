//! `#[lockscript_test::test]` and `TestRedis`, as users test their own scripts: sync and
//! async tests, fixtures, the helpers, the pool and a shared server.

use lockscript::builtin;
use lockscript_test::TestRedis;
use lockscript_test::fixtures::bump;
use lockscript_test::server::RedisServer;
use redis::{AsyncCommands, Commands};

#[lockscript_test::test(fixtures("fixtures/accounts.redis"))]
fn a_sync_test_starts_from_its_fixture(conn: &mut redis::Connection) {
    assert_eq!(bump("counter:{7}", 1).invoke(conn).unwrap(), 42);
    let name: String = conn.hget("account:{7}:owner", "name").unwrap();
    let city: String = conn.hget("account:{7}:owner", "city").unwrap();
    assert_eq!((name.as_str(), city.as_str()), ("Ada Lovelace", "London"));
    let ttl: i64 = conn.pttl("lock:{7}").unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
}

#[lockscript_test::test]
async fn an_async_test_gets_a_clean_server(mut conn: redis::aio::MultiplexedConnection) {
    // Whatever other tests wrote on this pooled server is gone.
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    assert_eq!(bump("c", 5).invoke_async(&mut conn).await.unwrap(), 5);
}

#[lockscript_test::test(flavor = "multi_thread", fixtures("fixtures/accounts.redis"))]
async fn a_multi_thread_test_with_a_managed_connection(
    mut conn: redis::aio::ConnectionManager,
) -> Result<(), lockscript::LockError> {
    let deleted = builtin::compare_del("lock:{7}", "holder-token")
        .invoke_async(&mut conn)
        .await?;
    assert_eq!(deleted, 1);
    Ok(())
}

#[lockscript_test::test]
fn scripts_are_loaded_and_counted(redis: &TestRedis, conn: &mut redis::Connection) {
    // Preloaded: the first call is an EVALSHA that needs no EVAL.
    let script = bump("x", 0).script();
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(script.sha1())
        .query(conn)
        .unwrap();
    assert_eq!(exists, [true]);
    assert_eq!(bump("n", 2).invoke(conn).unwrap(), 2);
    assert_eq!(redis.command_calls("evalsha"), 1);
    assert_eq!(redis.command_calls("eval"), 0);
    // The script's own commands count too: one INCRBY.
    assert_eq!(redis.command_calls("incrby"), 1);
}

#[lockscript_test::test]
fn expire_now_reaches_the_expiry_path_without_sleeping(redis: &TestRedis) {
    redis.exec("SET lock:{a} token PX 60000");
    let mut conn = redis.connection();
    assert!(redis.expire_now("lock:{a}"));
    // renew on an expired lock: 0, as after a real expiry.
    assert_eq!(
        builtin::renew("lock:{a}", "token", 1000)
            .invoke(&mut conn)
            .unwrap(),
        0
    );
    assert!(!redis.expire_now("lock:{a}"));
}

#[test]
#[should_panic(expected = "accounts.redis:2: ")]
fn a_failing_fixture_line_is_named() {
    let redis = TestRedis::start();
    redis.load_fixture("accounts.redis", "SET a 1\nINCR a b c\n");
}

#[test]
fn on_a_shared_server_each_test_gets_its_own_database_and_leaves_it_empty() {
    let shared = RedisServer::start();
    let a = TestRedis::start_on(&shared.url());
    let b = TestRedis::start_on(&shared.url());
    assert_ne!(a.url(), b.url());
    a.exec("SET k a");
    b.exec("SET k b");
    let read = |r: &TestRedis| -> String { r.connection().get("k").unwrap() };
    assert_eq!((read(&a), read(&b)), ("a".to_owned(), "b".to_owned()));
    let a_url = a.url().to_owned();
    drop(a);
    let mut leftover = redis::Client::open(a_url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = leftover.keys("*").unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    // The database is free again: the next test gets it.
    let c = TestRedis::start_on(&shared.url());
    assert_eq!(c.url(), a_url);
    drop((b, c));
    let mut conn = shared.connection();
    let claims: Vec<String> = conn.keys("lockscript-test:claim:*").unwrap();
    assert!(claims.is_empty(), "{claims:?}");
}

#[lockscript_test::test(fixtures("fixtures/accounts.redis"))]
fn a_snapshot_reads_back_every_key_by_its_type(redis: &TestRedis) {
    redis.exec("SADD tags b a\nZADD board 2 second 1 first\nRPUSH queue one two");
    let keys = redis.snapshot();
    let text = |v: &redis::Value| redis::from_redis_value::<Vec<String>>(v.clone()).unwrap();
    assert_eq!(
        redis::from_redis_value::<String>(keys["counter:{7}"].clone()).unwrap(),
        "41"
    );
    assert_eq!(text(&keys["tags"]), ["a", "b"]);
    assert_eq!(text(&keys["board"]), ["first", "1", "second", "2"]);
    assert_eq!(text(&keys["queue"]), ["one", "two"]);
    let owner: std::collections::HashMap<String, String> =
        redis::from_redis_value(keys["account:{7}:owner"].clone()).unwrap();
    assert_eq!(owner["city"], "London");
    assert_eq!(keys.len(), 7, "{:?}", keys.keys());
}

/// A fixture sets up what the test starts from: its commands are not counted, so a test
/// of a script that ran no HSET sees none though the fixture ran one.
#[lockscript_test::test(fixtures("fixtures/accounts.redis"))]
fn a_fixtures_commands_are_not_counted(redis: &TestRedis, conn: &mut redis::Connection) {
    assert_eq!(redis.command_calls("hset"), 0);
    assert_eq!(redis.command_calls("set"), 0);
    assert_eq!(bump("counter:{7}", 1).invoke(conn).unwrap(), 42);
    assert_eq!(redis.command_calls("hset"), 0);
    assert_eq!(redis.command_calls("incrby"), 1);
    let () = conn.hset("account:{7}:owner", "city", "Paris").unwrap();
    assert_eq!(redis.command_calls("hset"), 1);
}

/// On a shared server, whose counters are not the test's to zero, the fixture's commands
/// are left out all the same, and `reset_stats` counts from where it is called.
#[test]
fn on_a_shared_server_a_fixture_is_not_counted_either() {
    let shared = RedisServer::start();
    let redis = TestRedis::start_on(&shared.url());
    redis.load_fixture("accounts.redis", include_str!("../fixtures/accounts.redis"));
    assert_eq!(redis.command_calls("hset"), 0);
    let mut conn = redis.connection();
    let () = conn.hset("h", "f", "v").unwrap();
    assert_eq!(redis.command_calls("hset"), 1);
    redis.reset_stats();
    assert_eq!(redis.command_calls("hset"), 0);
    // The server's own counters were left alone.
    assert_eq!(
        lockscript_test::command_calls(&mut shared.connection(), "hset"),
        2
    );
}

/// The database of the test's own URL on a shared server, and what database 0 of that
/// server holds under `key` (what SELECT n, GET key reads there).
fn read_in(shared: &RedisServer, db: i64, key: &str) -> Option<String> {
    let mut conn = shared.connection();
    redis::cmd("SELECT").arg(db).exec(&mut conn).unwrap();
    conn.get(key).unwrap()
}

/// A test's database on a shared server, as its URL's client selects it.
fn db_of(redis: &TestRedis) -> i64 {
    redis.client().get_connection_info().redis_settings().db()
}

/// A `LOCKSCRIPT_TEST_URL` that names a database gets a test the database it claimed in
/// its place (the claims stay in database 0), not a URL with two database numbers.
#[test]
fn on_a_shared_server_named_with_a_database_each_test_gets_the_one_it_claimed() {
    let shared = RedisServer::start();
    for named in [0, 5] {
        let redis = TestRedis::start_on(&format!("redis://127.0.0.1:{}/{named}", shared.port()));
        let db = db_of(&redis);
        assert!((1..16).contains(&db), "{}", redis.url());
        assert_eq!(
            redis.url(),
            format!("redis://127.0.0.1:{}/{db}", shared.port())
        );
        redis.exec("SET k mine");
        assert_eq!(read_in(&shared, db, "k").as_deref(), Some("mine"));
        let claim = format!("lockscript-test:claim:{db}");
        assert!(
            read_in(&shared, 0, &claim).is_some(),
            "no {claim} in database 0"
        );
    }
}

/// A `LOCKSCRIPT_TEST_URL` with a query string (`?protocol=resp3`) keeps it: each test's
/// URL has its database in the path and the same query.
#[test]
fn on_a_shared_server_named_with_a_query_string_each_test_keeps_it() {
    let shared = RedisServer::start();
    let redis = TestRedis::start_on(&format!(
        "redis://127.0.0.1:{}/?protocol=resp3",
        shared.port()
    ));
    let db = db_of(&redis);
    assert_eq!(
        redis.url(),
        format!("redis://127.0.0.1:{}/{db}?protocol=resp3", shared.port())
    );
    let info = redis.client().get_connection_info().clone();
    assert_eq!(
        info.redis_settings().protocol(),
        redis::ProtocolVersion::RESP3
    );
    assert_eq!(bump("n", 3).invoke(&mut redis.connection()).unwrap(), 3);
    assert_eq!(read_in(&shared, db, "n").as_deref(), Some("3"));
}

/// A `LOCKSCRIPT_TEST_URL` with a user and password (and a database and a query) gives
/// each test a URL with the same credentials, on the database it claimed.
#[test]
fn on_a_shared_server_with_a_password_each_test_gets_the_credentials() {
    let shared = RedisServer::start();
    redis::cmd("ACL")
        .arg(&["SETUSER", "tester", "on", ">s3cret", "~*", "&*", "+@all"])
        .exec(&mut shared.connection())
        .unwrap();
    let base = format!(
        "redis://tester:s3cret@127.0.0.1:{}/0?protocol=resp2",
        shared.port()
    );
    let redis = TestRedis::start_on(&base);
    let db = db_of(&redis);
    assert_eq!(
        redis.url(),
        format!(
            "redis://tester:s3cret@127.0.0.1:{}/{db}?protocol=resp2",
            shared.port()
        )
    );
    let mut conn = redis.connection();
    let user: String = redis::cmd("ACL").arg("WHOAMI").query(&mut conn).unwrap();
    assert_eq!(user, "tester");
    redis.exec("SET k mine");
    assert_eq!(read_in(&shared, db, "k").as_deref(), Some("mine"));
}

/// How many `SCRIPT LOAD`s `redis` counts (Redis 6.2 counts a subcommand under its
/// command: `script`).
fn script_loads(redis: &TestRedis) -> u64 {
    redis.command_calls("script|load") + redis.command_calls("script")
}

/// `command_calls` counts what the test did: the set-up's own `SCRIPT LOAD`s of the
/// binary's scripts are not counted.
#[lockscript_test::test]
fn command_calls_counts_the_tests_script_load_and_not_the_set_ups(
    redis: &TestRedis,
    conn: &mut redis::Connection,
) {
    // Nor the INFO by which a run of the matrix names its server.
    assert_eq!(redis.command_calls("info"), 0);
    assert_eq!(script_loads(redis), 0);
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(conn)
        .unwrap();
    assert_eq!(script_loads(redis), 1);
}

/// The same on a shared server, whose counters are not the test's to zero.
#[test]
fn on_a_shared_server_command_calls_counts_the_tests_script_load_only() {
    let shared = RedisServer::start();
    let redis = TestRedis::start_on(&shared.url());
    assert_eq!(script_loads(&redis), 0);
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(&mut redis.connection())
        .unwrap();
    assert_eq!(script_loads(&redis), 1);
}
