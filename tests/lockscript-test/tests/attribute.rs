//! The crate's own example, run: a script tested with `#[lockscript_test::test]`, sync and
//! (with the `tokio` feature) async, from a fixture whose commands are not counted.

use lockscript_test::TestRedis;

#[lockscript::lock_script("lua/bump.lua")]
fn bump(#[key] counter: &str, by: i64) -> i64;

#[lockscript_test::test(fixtures("tests/fixtures/counters.redis"))]
fn bump_adds_to_an_existing_counter(conn: &mut redis::Connection) {
    assert_eq!(bump("counter:{a}", 2).invoke(conn).unwrap(), 42);
}

#[cfg(feature = "tokio")]
#[lockscript_test::test]
async fn bump_creates_a_missing_counter(mut conn: redis::aio::MultiplexedConnection) {
    assert_eq!(bump("fresh", 5).invoke_async(&mut conn).await.unwrap(), 5);
}

#[lockscript_test::test(fixtures("tests/fixtures/counters.redis"))]
fn bump_runs_one_incrby_and_the_fixture_is_not_counted(redis: &TestRedis) {
    assert_eq!(redis.command_calls("hset"), 0);
    assert_eq!(redis.command_calls("set"), 0);
    bump("counter:{a}", 1)
        .invoke(&mut redis.connection())
        .unwrap();
    assert_eq!(redis.command_calls("incrby"), 1);
    assert_eq!(redis.command_calls("hset"), 0);
}
