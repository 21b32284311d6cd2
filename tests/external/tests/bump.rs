//! The app's script, tested as its developers would: under a real, private Redis.

use external_user::bump;
use lockscript_test::TestRedis;

#[lockscript_test::test(fixtures("tests/fixtures/counters.redis"))]
fn bump_adds_to_an_existing_counter(conn: &mut redis::Connection) {
    assert_eq!(bump("counter:{a}", 2).invoke(conn).unwrap(), 42);
    assert_eq!(bump("counter:{b}", 3).invoke(conn).unwrap(), 0);
}

#[lockscript_test::test]
async fn bump_creates_a_missing_counter(mut conn: redis::aio::MultiplexedConnection) {
    assert_eq!(bump("fresh", 5).invoke_async(&mut conn).await.unwrap(), 5);
}

#[lockscript_test::test]
fn bump_runs_one_incrby_and_nothing_else(redis: &TestRedis) {
    let mut conn = redis.connection();
    bump("c", 1).invoke(&mut conn).unwrap();
    assert_eq!(redis.command_calls("incrby"), 1);
    assert_eq!(redis.command_calls("set"), 0);
}

/// The same test on every server of the matrix (`REDIS_SERVER_BIN` with several binaries):
/// each run appends the server it ran on to the file `SERVERS_SEEN` names, when set.
#[lockscript_test::test]
fn bump_is_the_same_on_every_server(redis: &TestRedis) {
    assert_eq!(bump("c", 7).invoke(&mut redis.connection()).unwrap(), 7);
    if let Some(path) = std::env::var_os("SERVERS_SEEN") {
        use std::io::Write as _;
        let mut seen = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(seen, "{}", redis.describe()).unwrap();
    }
}

/// Fails on Valkey only: run by lockscript's suite to show a failure names its server.
#[lockscript_test::test]
#[ignore = "fails on Valkey on purpose"]
fn bump_fails_on_valkey(redis: &TestRedis) {
    assert!(
        !redis.describe().starts_with("Valkey"),
        "this script was only meant for Redis"
    );
}
