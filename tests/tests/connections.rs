//! Typed scripts on every kind of redis-rs connection, in pipelines and transactions,
//! and across a server restart: never a `NOSCRIPT` failure, each run exactly once.

use lockscript::PipelineExt;
use lockscript_test::command_calls;
use lockscript_test::fixtures::{bump, peek, put};
use lockscript_test::server::RedisServer;
use redis::{AsyncCommands, Commands};

fn noscript_errors(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_NOSCRIPT:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Two scripts, twice each, in one batch sent on a cold cache.
fn batch(pipe: &mut redis::Pipeline) {
    pipe.invoke(&put("a", 1)).unwrap();
    pipe.invoke(&bump("counter", 10)).unwrap();
    pipe.invoke(&put("b", 2)).unwrap();
    pipe.invoke(&bump("counter", 5)).unwrap();
}

fn assert_ran_once_each(conn: &mut redis::Connection) {
    let (a, b, counter): (i64, i64, i64) = redis::pipe()
        .get("a")
        .get("b")
        .get("counter")
        .query(conn)
        .unwrap();
    assert_eq!((a, b, counter), (1, 2, 15), "every script ran exactly once");
    assert_eq!(
        command_calls(conn, "eval"),
        2,
        "first occurrence of each script as EVAL"
    );
    assert_eq!(
        command_calls(conn, "evalsha"),
        2,
        "later occurrences as EVALSHA"
    );
    assert_eq!(noscript_errors(conn), 0);
}

#[test]
fn transaction_on_a_cold_cache_runs_every_script_once() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut conn);
    let mut pipe = redis::pipe();
    pipe.atomic();
    batch(&mut pipe);
    let replies: (String, i64, String, i64) = pipe.query(&mut conn).unwrap();
    assert_eq!(replies, ("OK".to_owned(), 10, "OK".to_owned(), 15));
    assert_eq!(command_calls(&mut conn, "exec"), 1);
    assert_ran_once_each(&mut conn);
}

#[tokio::test]
async fn async_pipeline_on_a_cold_cache_runs_every_script_once() {
    let server = RedisServer::start();
    let mut stats = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);
    let mut conn = server.multiplexed().await;
    let mut pipe = redis::pipe();
    batch(&mut pipe);
    let replies: (String, i64, String, i64) = pipe.query_async(&mut conn).await.unwrap();
    assert_eq!(replies.3, 15);
    assert_ran_once_each(&mut stats);
}

#[test]
fn read_only_script_in_a_pipeline_goes_as_eval_ro_then_evalsha_ro() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = conn.set("k", "v").unwrap();
    lockscript_test::flush_scripts_and_reset_stats(&mut conn);
    let mut pipe = redis::pipe();
    pipe.invoke(&peek("k")).unwrap().invoke(&peek("k")).unwrap();
    let (a, b): (String, String) = pipe.query(&mut conn).unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("v", "v"));
    assert_eq!(command_calls(&mut conn, "eval_ro"), 1);
    assert_eq!(command_calls(&mut conn, "evalsha_ro"), 1);
    assert_eq!(
        command_calls(&mut conn, "eval") + command_calls(&mut conn, "evalsha"),
        0
    );
}

#[test]
fn a_bad_argument_adds_nothing_to_the_pipeline() {
    let mut pipe = redis::pipe();
    let err = pipe.invoke(&put("k", ("x", "y"))).unwrap_err();
    assert!(
        matches!(
            err,
            lockscript::LockError::Argument {
                parameter: "value",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(pipe.cmd_iter().count(), 0);
}

#[tokio::test]
async fn connection_manager_loads_the_script_on_a_cold_cache() {
    let server = RedisServer::start();
    let mut stats = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);
    let mut conn = server.client().get_connection_manager().await.unwrap();
    assert_eq!(bump("n", 1).invoke_async(&mut conn).await.unwrap(), 1);
    assert_eq!(bump("n", 1).invoke_async(&mut conn).await.unwrap(), 2);
    assert_eq!(command_calls(&mut stats, "script|load"), 1);
    assert_eq!(command_calls(&mut stats, "evalsha"), 3);
    assert_eq!(command_calls(&mut stats, "eval"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_manager_survives_a_server_restart_through_the_fallback() {
    let mut server = RedisServer::start();
    let mut conn = server.client().get_connection_manager().await.unwrap();
    assert_eq!(bump("n", 1).invoke_async(&mut conn).await.unwrap(), 1);

    server.stop();
    server.restart(); // no persistence: data and script cache are gone
    // The manager reconnects on its own; the first call after it may still see the
    // dead connection and fail with an I/O error (never re-sent: it may have run).
    let mut value = None;
    for _ in 0..50 {
        match bump("n", 1).invoke_async(&mut conn).await {
            Ok(v) => {
                value = Some(v);
                break;
            }
            Err(lockscript::LockError::Redis(e)) => {
                assert!(
                    e.is_io_error() || e.is_connection_dropped() || e.is_timeout(),
                    "{e}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(
        value,
        Some(1),
        "ran once on the fresh server, after SCRIPT LOAD"
    );
    let mut stats = server.connection();
    assert_eq!(command_calls(&mut stats, "script|load"), 1);
    assert_eq!(command_calls(&mut stats, "eval"), 0);
    let n: i64 = stats.get("n").unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn pooled_connections_run_scripts() {
    let server = RedisServer::start();
    let mut stats = server.connection();
    lockscript_test::flush_scripts_and_reset_stats(&mut stats);
    let pool = bb8::Pool::builder()
        .max_size(4)
        .build(server.client())
        .await
        .unwrap();
    for expected in 1..=8 {
        let mut conn = pool.get().await.unwrap();
        assert_eq!(
            bump("pooled", 1).invoke_async(&mut *conn).await.unwrap(),
            expected
        );
    }
    assert_eq!(
        command_calls(&mut stats, "script|load"),
        1,
        "the cache is per server, not per connection"
    );
    assert_eq!(command_calls(&mut stats, "eval"), 0);
    let mut conn = pool.get().await.unwrap();
    let n: i64 = conn.get("pooled").await.unwrap();
    assert_eq!(n, 8);
}
